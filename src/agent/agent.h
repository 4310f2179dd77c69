// The transfer agent (pkv_agent_*, DESIGN.md §10): moves the KV of one engine's held sequences
// into another engine's receiving requests, across processes, over UCX. The agent stands above
// the engine (it takes the engine's lock to read segments and end holds and fills); its UCX
// implementation is agent_ucx.cpp, built with the meson feature `ucx`; without it create()
// refuses.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "pkv/pkv.h"

namespace pkv {

class Engine;

pkv_agent_params default_agent_params();

// An IPv4 address and port ("a.b.c.d:port"): PKV_ERR_INVALID_ARGUMENT otherwise.
struct AgentAddress {
  uint32_t ip = 0;  // network byte order
  uint16_t port = 0;
};
AgentAddress parse_agent_address(const char *text, const char *what);

class Agent {
 public:
  virtual ~Agent() = default;
  // The agent for rank params.rank of e (params checked here); PKV_ERR_UNSUPPORTED without UCX.
  static std::unique_ptr<Agent> create(Engine &e, const pkv_agent_params &params);

  std::mutex &mutex() { return mutex_; }
  virtual std::string address() const = 0;
  virtual uint32_t connect(const char *address) = 0;
  virtual void pull(uint32_t peer, uint64_t remote_seq, uint64_t local_seq) = 0;
  virtual size_t progress(uint32_t wait_ms, pkv_agent_completion *out, size_t cap) = 0;
  virtual pkv_agent_stats stats() const = 0;

 private:
  std::mutex mutex_;
};

}  // namespace pkv
