#include "agent/agent_wire.h"

#include <cstring>

#include "status.h"

namespace pkv {
namespace {

class Writer {
 public:
  template <class T> void put(T v) {
    const size_t at = out.size();
    out.resize(at + sizeof v);
    std::memcpy(out.data() + at, &v, sizeof v);
  }
  void bytes(const void *p, size_t n) {
    const uint8_t *b = static_cast<const uint8_t *>(p);
    out.insert(out.end(), b, b + n);
  }
  std::vector<uint8_t> out;
};

class Reader {
 public:
  Reader(const uint8_t *p, size_t n, const char *what) : p_(p), n_(n), what_(what) {}
  template <class T> T get() {
    T v;
    std::memcpy(&v, take(sizeof v), sizeof v);
    return v;
  }
  const uint8_t *take(size_t n) {
    if (n > n_ - at_)
      fail(PKV_ERR_INVALID_ARGUMENT, "agent message (%s): %zu bytes, cut short at byte %zu", what_,
           n_, at_);
    const uint8_t *p = p_ + at_;
    at_ += n;
    return p;
  }
  // A count of items of `size` bytes each that the rest of the message can hold.
  uint32_t count(size_t size) {
    const uint32_t n = get<uint32_t>();
    if (size && n > (n_ - at_) / size)
      fail(PKV_ERR_INVALID_ARGUMENT, "agent message (%s): %u items do not fit its %zu bytes", what_,
           n, n_);
    return n;
  }
  void end() const {
    if (at_ != n_)
      fail(PKV_ERR_INVALID_ARGUMENT, "agent message (%s): %zu bytes past its end", what_, n_ - at_);
  }

 private:
  const uint8_t *p_;
  size_t n_, at_ = 0;
  const char *what_;
};

void put_segment(Writer &w, const pkv_segment &s) {
  w.put<uint64_t>(reinterpret_cast<uintptr_t>(s.base));
  w.put<uint64_t>(s.bytes);
}

pkv_segment get_segment(Reader &r) {
  pkv_segment s;
  s.base = reinterpret_cast<void *>(static_cast<uintptr_t>(r.get<uint64_t>()));
  s.bytes = r.get<uint64_t>();
  return s;
}

}  // namespace

std::vector<uint8_t> encode(const AgentHello &m) {
  Writer w;
  w.bytes(m.fingerprint.data(), m.fingerprint.size());
  w.put<uint32_t>(static_cast<uint32_t>(m.regions.size()));
  for (const AgentRegion &r : m.regions) {
    w.put<uint64_t>(r.base);
    w.put<uint64_t>(r.bytes);
    w.put<uint32_t>(static_cast<uint32_t>(r.rkey.size()));
    w.bytes(r.rkey.data(), r.rkey.size());
  }
  return std::move(w.out);
}

AgentHello decode_hello(const uint8_t *p, size_t n) {
  Reader r(p, n, "hello");
  AgentHello m;
  std::memcpy(m.fingerprint.data(), r.take(32), 32);
  const uint32_t regions = r.count(20);
  for (uint32_t i = 0; i < regions; ++i) {
    AgentRegion g;
    g.base = r.get<uint64_t>();
    g.bytes = r.get<uint64_t>();
    const uint32_t k = r.count(1);
    const uint8_t *key = r.take(k);
    g.rkey.assign(key, key + k);
    m.regions.push_back(std::move(g));
  }
  r.end();
  return m;
}

std::vector<uint8_t> encode(const AgentPullRequest &m) {
  Writer w;
  w.put<uint64_t>(m.seq);
  w.put<uint32_t>(m.first_block);
  w.put<uint32_t>(m.num_blocks);
  return std::move(w.out);
}

AgentPullRequest decode_pull_request(const uint8_t *p, size_t n) {
  Reader r(p, n, "pull request");
  AgentPullRequest m;
  m.seq = r.get<uint64_t>();
  m.first_block = r.get<uint32_t>();
  m.num_blocks = r.get<uint32_t>();
  r.end();
  return m;
}

std::vector<uint8_t> encode(const AgentPullReply &m) {
  Writer w;
  w.put<int32_t>(m.status);
  w.put<uint32_t>(static_cast<uint32_t>(m.message.size()));
  w.bytes(m.message.data(), m.message.size());
  w.put<uint32_t>(static_cast<uint32_t>(m.segments.size()));
  for (const pkv_segment &s : m.segments) put_segment(w, s);
  put_segment(w, m.state);
  return std::move(w.out);
}

AgentPullReply decode_pull_reply(const uint8_t *p, size_t n) {
  Reader r(p, n, "pull reply");
  AgentPullReply m;
  m.status = r.get<int32_t>();
  const uint32_t len = r.count(1);
  const uint8_t *text = r.take(len);
  m.message.assign(reinterpret_cast<const char *>(text), len);
  const uint32_t segments = r.count(16);
  m.segments.reserve(segments);
  for (uint32_t i = 0; i < segments; ++i) m.segments.push_back(get_segment(r));
  m.state = get_segment(r);
  r.end();
  return m;
}

std::vector<uint8_t> encode(const AgentPullEnd &m) {
  Writer w;
  w.put<uint32_t>(m.read);
  return std::move(w.out);
}

AgentPullEnd decode_pull_end(const uint8_t *p, size_t n) {
  Reader r(p, n, "pull end");
  AgentPullEnd m;
  m.read = r.get<uint32_t>();
  r.end();
  return m;
}

std::vector<uint8_t> encode(const AgentPullAck &m) {
  Writer w;
  w.put<uint32_t>(m.held);
  return std::move(w.out);
}

AgentPullAck decode_pull_ack(const uint8_t *p, size_t n) {
  Reader r(p, n, "pull ack");
  AgentPullAck m;
  m.held = r.get<uint32_t>();
  r.end();
  return m;
}

AgentHeader decode_header(const void *p, size_t n) {
  AgentHeader h;
  PKV_REQUIRE(n == sizeof h, "agent message header: %zu bytes, %zu expected", n, sizeof h);
  std::memcpy(&h, p, sizeof h);
  PKV_REQUIRE(h.magic == AgentHeader::kMagic, "agent message: bad magic 0x%08x (not a pkv agent)",
              h.magic);
  PKV_REQUIRE(h.version == AgentHeader::kVersion,
              "agent message: version %u, this agent speaks version %u", h.version,
              AgentHeader::kVersion);
  PKV_REQUIRE(h.type >= uint16_t(AgentMsg::kHello) && h.type <= uint16_t(AgentMsg::kPullAck),
              "agent message: unknown type %u", h.type);
  return h;
}

}  // namespace pkv
