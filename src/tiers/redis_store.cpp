// The Redis store (redis_store.h): one connection per instance, driven by this file. hiredis makes
// the connection (redisConnectWithTimeout) and parses the replies (the context's redisReader);
// the commands are written here in RESP, with a put's values sent in place by sendmsg (a batch of
// blocks is never copied into a command buffer), and every wait is a poll() against the call's
// one deadline, so a slow or stopped server costs a call at most its timeout, and a closed socket
// never raises SIGPIPE in the host (MSG_NOSIGNAL).
//
// A call is one pipeline, commands per key (a lookup's STRLEN, GETRANGE and EXISTS, a write's
// SET: per key rather than MGET, so replies are taken one at a time as they arrive instead of one
// array of the whole batch), written while its replies are read, so no buffer on either side
// fills up however large the batch. A call that breaks the connection (an I/O error, a closed
// socket, a timeout with replies still owed) drops it; a later call makes a new one, at most once
// per kReconnectInterval, so while the server is down calls fail at once ("not connected")
// instead of each waiting out the connect timeout. A connection found closed before any reply
// (the server restarted while it was idle) is remade at once and the pipeline sent again: every
// command here can be repeated (as can the administration's SCAN, STRLEN, GETRANGE and UNLINK in
// redis_store_admin.cpp, which share this machinery through redis_store_impl.h).
#include "tiers/redis_store.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "status.h"
#include "tiers/redis_store_impl.h"

namespace pkv {
namespace redis {

RedisStore::RedisStore(const pkv_store_params &p)
    : host_(p.host ? p.host : "127.0.0.1"),
      username_(p.username ? p.username : ""),
      password_(p.password ? p.password : ""),
      prefix_(p.key_prefix ? p.key_prefix : "pkv:"),
      port_(p.port ? int(p.port) : 6379),
      database_(p.database),
      ttl_seconds_(p.ttl_seconds),
      connect_timeout_ms_(p.connect_timeout_ms ? p.connect_timeout_ms : kDefaultTimeoutMs),
      io_timeout_ms_(p.io_timeout_ms ? p.io_timeout_ms : kDefaultTimeoutMs),
      has_username_(p.username != nullptr),
      has_password_(p.password != nullptr) {
  PKV_REQUIRE(!host_.empty(), "store host must not be empty (NULL: 127.0.0.1)");
  PKV_REQUIRE(p.port <= 65535, "store port must be 1 .. 65535, got %u", p.port);
  PKV_REQUIRE(!has_username_ || has_password_, "store username \"%s\" needs a password",
              username_.c_str());
  std::string why = connect(Deadline(connect_timeout_ms_ + io_timeout_ms_));
  if (!why.empty()) fail(PKV_ERR_STORE, "%s: %s", where().c_str(), why.c_str());
}

// Connects, then AUTH, SELECT and PING in one pipeline (PING: a server wanting a password says so
// now, not at the first lookup). "" or why not; either way not again before kReconnectInterval.
std::string RedisStore::connect(const Deadline &d) {
  next_connect_ = Clock::now() + kReconnectInterval;
  int ms = std::min(int(std::min<uint32_t>(connect_timeout_ms_, INT_MAX)), d.remaining_ms());
  if (ms <= 0) return last_error_ = "no time left to connect";
  timeval tv{ms / 1000, (ms % 1000) * 1000};
  redisContext *c = redisConnectWithTimeout(host_.c_str(), port_, tv);
  if (!c) return last_error_ = "out of memory for a connection";
  if (c->err) {
    last_error_ = c->errstr;
    redisFree(c);
    return last_error_;
  }
  ctx_ = c;
  Pipeline hello;
  if (has_password_) {
    hello.command(has_username_ ? 3 : 2);
    hello.arg("AUTH", 4);
    if (has_username_) hello.arg(username_);
    hello.arg(password_);
  }
  if (database_ != 0) {
    hello.command(2);
    hello.arg("SELECT", 6);
    hello.arg(std::to_string(database_));
  }
  hello.command(1);
  hello.arg("PING", 4);
  Exchange x = exchange(hello, d, [](size_t, const redisReply *r) -> std::string {
    if (r->type == REDIS_REPLY_ERROR) return std::string(r->str, r->len);
    return "";
  });
  if (x.error.empty()) return "";
  drop();
  return last_error_ = x.error;
}

// Sends p while taking its replies, until every reply is in, the connection breaks or d passes.
RedisStore::Exchange RedisStore::exchange(Pipeline &p, const Deadline &d, const OnReply &on_reply) {
  Exchange x;
  auto broken = [&](std::string why, bool closed) {
    x.link = Link::broken;
    x.closed = closed;
    x.error = std::move(why);
    return x;
  };
  std::vector<iovec> iov = p.iovecs();
  size_t next_iov = 0, n = p.num_commands();
  if (recv_buf_.empty()) recv_buf_.resize(kRecvBytes);
  std::string first_error;
  while (x.num_replies < n) {
    void *r = nullptr;
    if (redisReaderGetReply(ctx_->reader, &r) != REDIS_OK)
      return broken(std::string("bad reply: ") + ctx_->reader->errstr, false);
    if (r) {
      std::string e = on_reply(x.num_replies++, static_cast<const redisReply *>(r));
      freeReplyObject(r);
      if (first_error.empty()) first_error = std::move(e);
      continue;
    }
    int left_ms = d.remaining_ms();
    if (left_ms == 0) {
      return broken("timed out after " + std::to_string(d.budget_ms) + " ms (" +
                        std::to_string(x.num_replies) + " of " + std::to_string(n) + " replies)",
                    false);
    }
    pollfd pfd{ctx_->fd, short(POLLIN | (next_iov < iov.size() ? POLLOUT : 0)), 0};
    int ready = poll(&pfd, 1, left_ms);
    if (ready < 0 && errno != EINTR) return broken(std::string("poll: ") + strerror(errno), false);
    if (ready <= 0) continue;
    if ((pfd.revents & POLLOUT) && next_iov < iov.size()) {
      msghdr m{};
      m.msg_iov = &iov[next_iov];
      m.msg_iovlen = std::min<size_t>(iov.size() - next_iov, IOV_MAX);
      ssize_t sent = sendmsg(ctx_->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (sent < 0 && errno != EAGAIN && errno != EINTR) {
        bool closed = errno == EPIPE || errno == ECONNRESET;
        return broken(std::string("send: ") + strerror(errno), closed);
      }
      for (size_t k = sent > 0 ? size_t(sent) : 0; k > 0;) {
        size_t step = std::min(k, iov[next_iov].iov_len);
        iov[next_iov].iov_base = static_cast<char *>(iov[next_iov].iov_base) + step;
        iov[next_iov].iov_len -= step;
        k -= step;
        if (iov[next_iov].iov_len == 0) ++next_iov;
      }
    }
    if (pfd.revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t got = recv(ctx_->fd, recv_buf_.data(), recv_buf_.size(), MSG_DONTWAIT);
      if (got == 0) return broken("the server closed the connection", true);
      if (got < 0 && errno != EAGAIN && errno != EINTR) {
        bool closed = errno == ECONNRESET || errno == EPIPE;
        return broken(std::string("recv: ") + strerror(errno), closed);
      }
      if (got > 0 && redisReaderFeed(ctx_->reader, recv_buf_.data(), size_t(got)) != REDIS_OK)
        return broken("out of memory for replies", false);
    }
  }
  x.error = std::move(first_error);
  return x;
}

// Runs one call's pipeline, connecting first when needed; any failure is "redis H:P: what: why".
StoreStatus RedisStore::call(const char *what, Pipeline &p, const Deadline &d,
                             const OnReply &on_reply) {
  auto failure = [&](const std::string &why) {
    return StoreStatus::failure(where() + ": " + what + ": " + why);
  };
  bool fresh = false;
  if (!ctx_) {
    if (Clock::now() < next_connect_) return failure("not connected (" + last_error_ + ")");
    std::string why = connect(d);
    if (!why.empty()) return failure("reconnect: " + why);
    fresh = true;
  }
  Exchange x = exchange(p, d, on_reply);
  if (x.link == Link::broken && x.closed && x.num_replies == 0 && !fresh) {
    drop();  // closed while idle since the last call: try once more on a new connection
    std::string why = connect(d);
    if (!why.empty()) return failure("reconnect: " + why);
    x = exchange(p, d, on_reply);
  }
  if (x.link == Link::broken) {
    drop();  // replies still owed: the stream is out of step
    last_error_ = x.error;
    next_connect_ = Clock::now() + kReconnectInterval;
  }
  if (!x.error.empty()) return failure(x.error);
  return {};
}

StoreStatus RedisStore::exists(const StoreKey *keys, size_t n, uint8_t *out) {
  if (n == 0) return {};
  std::memset(out, 0, n);
  Pipeline p;
  for (size_t i = 0; i < n; ++i) {
    p.command(2);
    p.arg("EXISTS", 6);
    p.arg(key(keys[i]));
  }
  StoreStatus s = call("exists", p, Deadline(io_timeout_ms_),
                       [&](size_t i, const redisReply *r) -> std::string {
                         if (r->type == REDIS_REPLY_INTEGER) {
                           out[i] = r->integer > 0;
                           return "";
                         }
                         if (r->type == REDIS_REPLY_ERROR) return std::string(r->str, r->len);
                         return "unexpected reply to EXISTS (type " + std::to_string(r->type) + ")";
                       });
  if (!s.ok) std::memset(out, 0, n);
  return s;
}

// Per key: STRLEN, GETRANGE of at most value_bytes and EXISTS (an empty string and no key both
// have STRLEN 0), so a value of another size is named with its size and never read whole: what
// a lookup reads is bounded by value_bytes however large the value under the key.
StoreStatus RedisStore::get(const StoreKey *keys, size_t n, uint8_t *values, size_t value_bytes,
                            uint8_t *found, uint32_t timeout_ms, uint64_t *held_bytes) {
  if (n == 0) return {};
  std::memset(found, kStoreAbsent, n);
  std::vector<uint64_t> sizes(n, 0);
  if (value_bytes == 0) return StoreStatus::failure(where() + ": get: a value size of 0");
  const std::string last = std::to_string(value_bytes - 1);
  Pipeline p;
  for (size_t i = 0; i < n; ++i) {
    const std::string k = key(keys[i]);
    p.command(2), p.arg("STRLEN", 6), p.arg(k);
    p.command(4), p.arg("GETRANGE", 8), p.arg(k), p.arg("0", 1), p.arg(last);
    p.command(2), p.arg("EXISTS", 6), p.arg(k);
  }
  Deadline d(timeout_ms ? timeout_ms : io_timeout_ms_);
  StoreStatus s = call("get", p, d, [&](size_t r_i, const redisReply *r) -> std::string {
    const size_t i = r_i / 3;
    if (r->type == REDIS_REPLY_ERROR && std::strncmp(r->str, "WRONGTYPE", 9) == 0) {
      found[i] = kStoreNotAValue;  // a list, a hash, ...: not a block
      return "";
    }
    if (r->type == REDIS_REPLY_ERROR) return std::string(r->str, r->len);
    switch (r_i % 3) {
      case 0:
        if (r->type != REDIS_REPLY_INTEGER) break;
        sizes[i] = uint64_t(std::max<long long>(r->integer, 0));
        return "";
      case 1:
        if (r->type != REDIS_REPLY_STRING) break;
        if (found[i] == kStoreAbsent && sizes[i] == value_bytes && r->len == value_bytes) {
          std::memcpy(values + i * value_bytes, r->str, value_bytes);
          found[i] = kStoreFound;
        }
        return "";
      case 2:
        if (r->type != REDIS_REPLY_INTEGER) break;
        if (found[i] == kStoreAbsent && r->integer > 0 && sizes[i] != value_bytes)
          found[i] = kStoreWrongSize;
        return "";
    }
    return "unexpected reply (type " + std::to_string(r->type) + ") to a get";
  });
  if (!s.ok) std::memset(found, kStoreAbsent, n);  // a failed call's outputs are misses (store.h)
  for (size_t i = 0; held_bytes && i < n; ++i)
    held_bytes[i] = found[i] == kStoreWrongSize ? sizes[i] : 0;
  return s;
}

StoreStatus RedisStore::put(const StoreKey *keys, size_t n, const uint8_t *values,
                            size_t value_bytes) {
  if (n == 0) return {};
  Pipeline p;
  std::string ttl = std::to_string(ttl_seconds_);
  for (size_t i = 0; i < n; ++i) {
    p.command(ttl_seconds_ ? 5 : 3);
    p.arg("SET", 3);
    p.arg(key(keys[i]));
    p.arg_in_place(values + i * value_bytes, value_bytes);
    if (ttl_seconds_) {
      p.arg("EX", 2);
      p.arg(ttl);
    }
  }
  return call("put", p, Deadline(io_timeout_ms_), [](size_t, const redisReply *r) -> std::string {
    if (r->type == REDIS_REPLY_STATUS) return "";
    if (r->type == REDIS_REPLY_ERROR) return std::string(r->str, r->len);
    return "unexpected reply to SET (type " + std::to_string(r->type) + ")";
  });
}

}  // namespace redis

std::unique_ptr<Store> make_redis_store(const pkv_store_params &p) {
  return std::make_unique<redis::RedisStore>(p);
}

}  // namespace pkv
