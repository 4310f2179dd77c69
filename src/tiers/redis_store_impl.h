// The Redis store's machinery (redis_store.h), for its two source files: redis_store.cpp (the
// connection, the pipeline exchange, lookups and writes) and redis_store_admin.cpp (SCAN
// listing, UNLINK removal, GETRANGE reads of large values).
#pragma once

#include <hiredis/hiredis.h>
#include <sys/uio.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tiers/store.h"

namespace pkv::redis {

using Clock = std::chrono::steady_clock;
inline constexpr auto kReconnectInterval = std::chrono::milliseconds(1000);
inline constexpr uint32_t kDefaultTimeoutMs =
    1000;  // connect_timeout_ms or io_timeout_ms given as 0
inline constexpr size_t kRecvBytes = size_t(256) << 10;

// The commands of one call in RESP: the protocol text, with values referred to in place.
class Pipeline {
 public:
  void command(int argc) {
    text_ += '*';
    text_ += std::to_string(argc);
    text_ += "\r\n";
    ++num_commands_;
  }
  void arg(const char *p, size_t n) {
    bulk_header(n);
    text_.append(p, n);
    text_ += "\r\n";
  }
  void arg(const std::string &s) { arg(s.data(), s.size()); }
  // p is sent from where it is: it must outlive the call.
  void arg_in_place(const void *p, size_t n) {
    bulk_header(n);
    cut();
    pieces_.push_back({static_cast<const char *>(p), 0, n});
    text_ += "\r\n";
  }
  size_t num_commands() const { return num_commands_; }

  // The bytes to send, in order.
  std::vector<iovec> iovecs() {
    cut();
    std::vector<iovec> v;
    v.reserve(pieces_.size());
    for (const Piece &p : pieces_) {
      const char *base = p.external ? p.external : text_.data() + p.offset;
      if (p.len) v.push_back({const_cast<char *>(base), p.len});
    }
    return v;
  }

 private:
  struct Piece {
    const char *external;  // a value in place, or nullptr: text_[offset, offset + len)
    size_t offset, len;
  };
  void bulk_header(size_t n) {
    text_ += '$';
    text_ += std::to_string(n);
    text_ += "\r\n";
  }
  // Ends the text piece so far (offsets, not pointers: text_ may still move).
  void cut() {
    if (text_.size() > cut_at_) pieces_.push_back({nullptr, cut_at_, text_.size() - cut_at_});
    cut_at_ = text_.size();
  }

  std::string text_;
  std::vector<Piece> pieces_;
  size_t cut_at_ = 0, num_commands_ = 0;
};

struct Deadline {
  uint32_t budget_ms;
  Clock::time_point at;
  explicit Deadline(uint32_t ms)
      : budget_ms(ms), at(Clock::now() + std::chrono::milliseconds(ms)) {}
  int remaining_ms() const {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(at - Clock::now()).count();
    return int(std::clamp<decltype(left)>(left, 0, INT_MAX));
  }
};

class RedisStore final : public Store {
 public:
  explicit RedisStore(const pkv_store_params &p);
  ~RedisStore() override { drop(); }
  const char *kind() const override { return "redis"; }
  StoreStatus exists(const StoreKey *keys, size_t n, uint8_t *out) override;
  StoreStatus get(const StoreKey *keys, size_t n, uint8_t *values, size_t value_bytes,
                  uint8_t *found, uint32_t timeout_ms, uint64_t *held_bytes) override;
  StoreStatus read_range(const StoreKey &k, uint64_t offset, size_t n, uint8_t *out,
                         size_t *got) override;
  StoreStatus put(const StoreKey *keys, size_t n, const uint8_t *values,
                  size_t value_bytes) override;
  StoreStatus list(uint64_t *cursor, size_t count, std::vector<StoreEntry> *out) override;
  StoreStatus remove(const StoreKey *keys, size_t n, uint8_t *removed) override;

 private:
  // Takes reply i of a pipeline: "" or why it makes the call fail (the stream stays in step).
  using OnReply = std::function<std::string(size_t i, const redisReply *r)>;
  enum class Link { kept, broken };
  struct Exchange {
    Link link = Link::kept;
    bool closed = false;     // broken because the server closed the connection
    size_t num_replies = 0;  // taken before it ended
    std::string error;       // "" when every reply was taken and none failed
  };

  StoreStatus call(const char *what, Pipeline &p, const Deadline &d, const OnReply &on_reply);
  Exchange exchange(Pipeline &p, const Deadline &d, const OnReply &on_reply);
  std::string connect(const Deadline &d);
  void drop() {
    if (ctx_) redisFree(ctx_);
    ctx_ = nullptr;
  }
  std::string key(const StoreKey &k) const { return prefix_ + k.hex(); }
  std::string where() const { return "redis " + host_ + ":" + std::to_string(port_); }

  std::string host_, username_, password_, prefix_;
  int port_;
  uint32_t database_, ttl_seconds_, connect_timeout_ms_, io_timeout_ms_;
  bool has_username_, has_password_;
  redisContext *ctx_ = nullptr;       // nullptr: not connected
  Clock::time_point next_connect_{};  // no new connection before this
  std::string last_error_;            // why the connection was lost, for "not connected"
  std::vector<char> recv_buf_;
};

}  // namespace pkv::redis
