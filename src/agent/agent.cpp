#include "agent/agent.h"

#include <arpa/inet.h>

#include <cstdlib>
#include <cstring>

#include "engine.h"
#include "status.h"

namespace pkv {

#if PKV_HAVE_UCX
std::unique_ptr<Agent> make_ucx_agent(Engine &e, const pkv_agent_params &params);
#endif

pkv_agent_params default_agent_params() {
  pkv_agent_params p;
  std::memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  p.listen_address = "127.0.0.1:0";
  p.timeout_ms = 30000;
  p.on_failure = PKV_TRANSFER_FAILED;
  p.max_inflight_bytes = uint64_t(64) << 20;
  p.progress_thread = 1;
  return p;
}

AgentAddress parse_agent_address(const char *text, const char *what) {
  PKV_REQUIRE(text != nullptr, "%s is NULL", what);
  const char *colon = std::strrchr(text, ':');
  PKV_REQUIRE(colon != nullptr && colon != text && std::strlen(text) < 64,
              "%s \"%s\" is not ipv4:port (\"127.0.0.1:5555\")", what, text);
  const std::string host(text, colon);
  char *end = nullptr;
  const unsigned long port = std::strtoul(colon + 1, &end, 10);
  PKV_REQUIRE(colon[1] != '\0' && *end == '\0' && port <= 65535,
              "%s \"%s\": the port is not a number 0 .. 65535", what, text);
  AgentAddress a;
  PKV_REQUIRE(inet_pton(AF_INET, host.c_str(), &a.ip) == 1,
              "%s \"%s\": \"%s\" is not an IPv4 address", what, text, host.c_str());
  a.port = static_cast<uint16_t>(port);
  return a;
}

std::unique_ptr<Agent> Agent::create(Engine &e, const pkv_agent_params &p) {
  PKV_REQUIRE(p.rank < e.num_ranks(), "agent params' rank %u: the engine holds %u ranks' pools",
              p.rank, e.num_ranks());
  PKV_REQUIRE(p.on_failure == PKV_TRANSFER_FAILED || p.on_failure == PKV_TRANSFER_FAILED_FINISH,
              "agent params' on_failure %u is not PKV_TRANSFER_FAILED (1) or "
              "PKV_TRANSFER_FAILED_FINISH (2)",
              p.on_failure);
  PKV_REQUIRE(p.max_inflight_bytes > 0, "agent params' max_inflight_bytes is 0");
  PKV_REQUIRE(p.timeout_ms > 0, "agent params' timeout_ms is 0");
  PKV_REQUIRE(p.progress_thread <= 1, "agent params' progress_thread %u is not 0 or 1",
              p.progress_thread);
  PKV_REQUIRE(p.reserved0 == 0, "agent params' reserved0 must be 0");
  if (p.listen_address) parse_agent_address(p.listen_address, "agent params' listen_address");
  if (e.params().device == PKV_DEVICE_CUDA)
    fail(PKV_ERR_UNSUPPORTED,
         "pkv_agent_create: a CUDA engine's pool is device memory, which this build's UCX cannot "
         "register (Debian's has no CUDA support); CUDA pools through host memory are not "
         "there yet: move its blocks with your transport by pkv_seq_segments");
#if PKV_HAVE_UCX
  return make_ucx_agent(e, p);
#else
  fail(PKV_ERR_UNSUPPORTED,
       "pkv_agent_create: this libpkv was built without UCX (meson -Ducx=enabled, Debian "
       "libucx-dev); move blocks with your own transport by pkv_seq_segments");
#endif
}

}  // namespace pkv
