// The transfer agent's messages (DESIGN.md §10): what two agents say to each other over UCX's
// active messages to move a held sequence's KV - the handshake (the layout fingerprint and the
// registered regions' keys), a pull's request and answer (the segments to read), its end and
// the producer's acknowledgement. Plain data: encoded and decoded here, bounds-checked, so a
// damaged or foreign message is refused, never read past its end.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "pkv/pkv.h"

namespace pkv {

enum class AgentMsg : uint16_t {
  kHello = 1,
  kPullRequest = 2,
  kPullReply = 3,
  kPullEnd = 4,
  kPullAck = 5
};

// The active message's header: every message has one.
struct AgentHeader {
  uint32_t magic = kMagic;
  uint16_t version = kVersion;
  uint16_t type = 0;                              // AgentMsg
  uint64_t id = 0;                                // the pull's (0 for hello)
  static constexpr uint32_t kMagic = 0x504b5641;  // "PKVA"
  static constexpr uint16_t kVersion = 1;
};

// A registered region of the sender's memory: its bytes and the key a peer reads it with.
struct AgentRegion {
  uint64_t base = 0, bytes = 0;
  std::vector<uint8_t> rkey;
};

struct AgentHello {
  std::array<uint8_t, 32> fingerprint{};
  std::vector<AgentRegion> regions;
};

struct AgentPullRequest {
  uint64_t seq = 0;  // the producer's held sequence
  uint32_t first_block = 0, num_blocks = 0;
};

struct AgentPullReply {
  int32_t status = PKV_OK;  // the producer's refusal (its status and message), else OK
  std::string message;
  std::vector<pkv_segment> segments;  // pkv_seq_segments of the request's range
  pkv_segment state{nullptr, 0};      // pkv_seq_state_segment
};

struct AgentPullEnd {
  uint32_t read = 0;  // 1: every read completed; 0: the consumer gave the pull up
};

struct AgentPullAck {
  uint32_t held = 0;  // 1: the sequence was held through every read (its bytes are good)
};

std::vector<uint8_t> encode(const AgentHello &m);
std::vector<uint8_t> encode(const AgentPullRequest &m);
std::vector<uint8_t> encode(const AgentPullReply &m);
std::vector<uint8_t> encode(const AgentPullEnd &m);
std::vector<uint8_t> encode(const AgentPullAck &m);
// Each decode throws PKV_ERR_INVALID_ARGUMENT naming what is wrong.
AgentHello decode_hello(const uint8_t *p, size_t n);
AgentPullRequest decode_pull_request(const uint8_t *p, size_t n);
AgentPullReply decode_pull_reply(const uint8_t *p, size_t n);
AgentPullEnd decode_pull_end(const uint8_t *p, size_t n);
AgentPullAck decode_pull_ack(const uint8_t *p, size_t n);
// The header of a message, checked (magic, version, a known type).
AgentHeader decode_header(const void *p, size_t n);

}  // namespace pkv
