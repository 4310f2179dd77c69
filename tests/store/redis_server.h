// A redis-server of the test's own on 127.0.0.1 (never another address): a free port, a temporary
// directory for its log, no persistence (--save "" --appendonly no). Started by fork/exec, ready
// once it answers PING (within 5 s), stopped by SIGTERM (SIGKILL after 5 s) and its directory
// removed when the object goes. kill() and restart() (same port) are for the server-gone tests;
// pause() and resume() (SIGSTOP/SIGCONT) for a server that does not answer.
// The server dies with the test process (PR_SET_PDEATHSIG), even when the test crashes.
// redis_server_or_skip() exits 77 (meson's skip) when redis-server is not installed.
#pragma once

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace pkv_test {

// The path of redis-server on PATH (or in /usr/sbin, /usr/bin), or "".
inline std::string find_redis_server() {
  std::string path = getenv("PATH") ? getenv("PATH") : "";
  path += ":/usr/sbin:/usr/bin";
  for (size_t start = 0; start <= path.size();) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(start, end - start);
    if (!dir.empty()) {
      std::string bin = dir + "/redis-server";
      if (access(bin.c_str(), X_OK) == 0) return bin;
    }
    start = end + 1;
  }
  return "";
}

// A port nothing listens on now (bound to 0 and let go; the kernel hands out another next time).
inline unsigned free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  unsigned port = 0;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) close(fd);
  return port;
}

class RedisServer {
 public:
  // password "": no requirepass.
  RedisServer(std::string binary, std::string password)
      : binary_(std::move(binary)), password_(std::move(password)), port_(free_port()) {
    char tmpl[] = "/tmp/pkv-redis-XXXXXX";
    if (mkdtemp(tmpl)) dir_ = tmpl;
  }
  ~RedisServer() {
    stop();
    remove_dir();
  }
  RedisServer(const RedisServer &) = delete;
  RedisServer &operator=(const RedisServer &) = delete;

  unsigned port() const { return port_; }
  bool running() const { return pid_ > 0; }

  // Starts it on port() and waits until it answers PING; false (its log printed) if it does not.
  bool start() {
    if (dir_.empty() || port_ == 0) return false;
    std::string log = dir_ + "/redis.log", port = std::to_string(port_);
    std::vector<std::string> args = {
        binary_,  "--port", port,           "--bind", "127.0.0.1",        "--dir", dir_,
        "--save", "",       "--appendonly", "no",     "--protected-mode", "no"};
    if (!password_.empty()) args.insert(args.end(), {"--requirepass", password_});
    pid_t parent = getpid();
    pid_ = fork();
    if (pid_ < 0) return pid_ = 0, false;
    if (pid_ == 0) {
      // A test that crashes (or is killed by meson's timeout) takes its server with it.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
      int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
      }
      std::vector<char *> argv;
      for (std::string &s : args) argv.push_back(&s[0]);
      argv.push_back(nullptr);
      execv(binary_.c_str(), argv.data());
      _exit(127);
    }
    for (auto until = clock::now() + std::chrono::seconds(5); clock::now() < until;) {
      int status;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = 0;
        break;
      }
      if (answers_ping()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    fprintf(stderr, "redis-server on port %u did not start; its log:\n", port_);
    print_log();
    stop();
    return false;
  }
  bool restart() { return stop(), start(); }

  // SIGTERM, then SIGKILL if it has not gone within 5 s.
  void stop() {
    if (pid_ <= 0) return;
    resume();
    ::kill(pid_, SIGTERM);
    if (!reap(std::chrono::seconds(5))) {
      ::kill(pid_, SIGKILL);
      reap(std::chrono::seconds(5));
    }
    pid_ = 0;
  }
  // Gone at once, as in a crash.
  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    reap(std::chrono::seconds(5));
    pid_ = 0;
  }
  void pause() {
    if (pid_ > 0) ::kill(pid_, SIGSTOP);
  }
  void resume() {
    if (pid_ > 0) ::kill(pid_, SIGCONT);
  }

  void print_log() const {
    FILE *f = fopen((dir_ + "/redis.log").c_str(), "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) fprintf(stderr, "  | %s", line);
    fclose(f);
  }

 private:
  using clock = std::chrono::steady_clock;

  bool reap(std::chrono::seconds bound) {
    for (auto until = clock::now() + bound; clock::now() < until;) {
      int status;
      pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_ || r < 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  // Any reply to PING ("+PONG", or "-NOAUTH" with a password) means it is serving.
  bool answers_ping() const {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return false;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port_);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval tv{0, 200 * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char c = 0;
    bool ok = connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0 &&
              send(fd, "PING\r\n", 6, MSG_NOSIGNAL) == 6 && recv(fd, &c, 1, 0) == 1 &&
              (c == '+' || c == '-');
    close(fd);
    return ok;
  }

  void remove_dir() {
    if (dir_.empty()) return;
    if (DIR *d = opendir(dir_.c_str())) {
      while (dirent *e = readdir(d))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
          unlink((dir_ + "/" + e->d_name).c_str());
      closedir(d);
    }
    rmdir(dir_.c_str());
    dir_.clear();
  }

  std::string binary_, password_, dir_;
  unsigned port_;
  pid_t pid_ = 0;
};

// The path of redis-server; exits 77 (skip) with a message when it is not installed.
inline std::string redis_server_or_skip() {
  std::string bin = find_redis_server();
  if (bin.empty()) {
    printf("SKIP: redis-server is not installed (Debian: apt-get install redis-server)\n");
    exit(77);
  }
  return bin;
}

}  // namespace pkv_test
