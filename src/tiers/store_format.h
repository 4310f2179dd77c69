// The store tier's keys and values (DESIGN.md §11), the same for every store kind, so engines of
// any machine that share a store read each other's blocks.
//
// Keys: SHA-256 chains (OpenSSL's libcrypto: the hashing library every Debian machine already
// has, with SHA-NI/AVX2 code paths picked at run time). The root of a salt is
// SHA-256("pkv-store-root-v1" | fingerprint | salt length | salt); a block's key is
// SHA-256(parent key | its token ids as int32 little-endian); a KV group other than the first
// chains from its own root (store_group_root). With a LoRA adapter (lora_id != 0)
// the root is SHA-256("pkv-store-root-lora-v1" | fingerprint | lora_id as u64 | salt length |
// salt); a block with extra keys names as its parent SHA-256("pkv-store-extra-v1" | parent key |
// extra length as u64 | its extra bytes, PrefixKeys::block_extra) instead of the parent key, so
// its key stays SHA-256 of the parent its value names and its tokens (the value format and
// `pkv store verify` are unchanged) while another adapter's or item's value is another key and
// never hits (its header names that key). The fingerprint is SHA-256 of the
// model's KV shape on this rank (layers, kv heads per rank, head_dim, KV dtype, block size, tp
// rank and size; an MLA cache's layout and kv_lora_rank; KV groups' layout) and of the host's
// model id when it gives
// one, so engines of other models (ids) or ranks never share a key. Without a model id, models
// of one KV shape share keys (pkv.h says so, and the engine warns).
//
// A value is a fixed-size header, the block's tokens, then the payload: for each layer, the
// block's K then its V (MLA: the latents alone), as the pool holds them (bytes.block each). Every field is little-endian.
// verify_value() checks everything before a block can hit: magic, format version, sizes, the
// fingerprint, the key asked for, the parent key, the tokens, and XXH3-64 checksums of the
// header and of the payload.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tiers/store.h"

namespace pkv {

// The KV shape the fingerprint covers, and the sizes of a value.
struct StoreShape {
  uint32_t num_layers, kv_heads, head_dim, block_size, tp_rank, tp_size;
  int32_t dtype;         // the pool's (kv dtype)
  uint64_t block_bytes;  // K (or V) bytes of one block of one layer
  std::vector<float>
      kv_scales;              // fp8: K's then V's (MLA: K's), [layers][kv heads] each; else empty
  uint32_t tensors = 2;       // 2 (K, V) or 1 (the MLA latent: K alone)
  uint32_t kv_lora_rank = 0;  // MLA: the latent's compressed part
  std::string model_id = "";  // pkv_store_params.model_id, "" for none
  uint32_t index_dim = 0, index_dtype = 0;  // MLA layers' indexer (DESIGN.md §14); 0: none
  // KV groups (DESIGN.md §12): every layer's spec, group and slot as text; "" for one
  // full-attention group of the flat fields' layers (the keys of 0.7 and before).
  std::string layout = "";

  uint64_t payload_bytes() const { return tensors * uint64_t(num_layers) * block_bytes; }
  uint64_t value_bytes() const;  // header + tokens + payload
};

struct StoreFingerprint {
  uint8_t bytes[32];
};

StoreFingerprint store_fingerprint(const StoreShape &shape);
// pkv_hf_config_digest's text: "config-sha256:" and SHA-256 of the bytes, in hex.
std::string config_model_id(const char *json, size_t len);
StoreKey store_root_key(const StoreFingerprint &fp, const std::string &salt, uint64_t lora_id = 0);
// The root of KV group `group`'s chain under a salt's root: the root itself for group 0 (an
// engine of one group keeps 0.7's keys), else SHA-256("pkv-store-group-v1" | root | group as
// u32), so each group's blocks of one prefix are values of their own.
StoreKey store_group_root(const StoreKey &root, uint32_t group);
// The parent a block's value names: parent itself when extra is empty, else mixed with it.
StoreKey store_value_parent(const StoreKey &parent, const std::string &extra);
StoreKey store_block_key(const StoreKey &parent, const int32_t *tokens, uint32_t n);

// Checkpoints of the recurrent state (DESIGN.md §13) are values of the same format: the state
// after the tokens up to a block boundary, under the block that ends there. Their shape is one
// "layer" of one tensor of state_bytes_per_seq (state_store_shape); their fingerprint is the KV
// fingerprint mixed with the state's layout (every STATE layer's parts: dtype and shape), so
// another state layout never hits; the parent a value names is store_state_parent(its
// fingerprint, the block's key), and its key store_block_key(that parent, the block's tokens):
// keyed apart from the block, and checked by `pkv store verify` as every value is.
StoreShape state_store_shape(const StoreShape &kv, uint64_t slot_bytes);
StoreFingerprint state_fingerprint(const StoreFingerprint &kv, const std::string &layout);
StoreKey store_state_parent(const StoreFingerprint &state_fp, const StoreKey &block_key);

// Writes the header and tokens of a value into value[0 .. value_bytes - payload_bytes); the
// payload (already in place after them) is checksummed.
void encode_value(const StoreShape &shape, const StoreFingerprint &fp, const StoreKey &key,
                  const StoreKey &parent, const int32_t *tokens, uint8_t *value);
// Where a value's payload starts.
uint64_t payload_offset(const StoreShape &shape);

// "" when value (value_bytes long) is the block of key under parent holding tokens for this
// fingerprint, else why not (for pkv_engine_store_error).
std::string verify_value(const StoreShape &shape, const StoreFingerprint &fp, const StoreKey &key,
                         const StoreKey &parent, const int32_t *tokens, const uint8_t *value);

// A value's fixed header: its first kValueHeaderBytes; the tokens follow, then the payload.
constexpr uint64_t kValueHeaderBytes = 152;

// What a value says of itself, for `pkv store ls|verify`: its key, parent, tokens and where its
// parts lie. Every size is checked before any is used: num_tokens is 1 .. PKV_MAX_BLOCK_SIZE and
// the sizes add up to the value's size without wrapping (check_layout, the one place that adds
// them).
struct StoreValueInfo {
  StoreKey key, parent;
  StoreFingerprint fingerprint;
  uint32_t num_tokens;
  uint64_t payload_bytes;
  uint64_t payload_offset;    // kValueHeaderBytes + 4 * num_tokens: where the payload starts
  uint64_t payload_checksum;  // XXH3-64 of the payload, as the header says
};
// The header alone (header: its first kValueHeaderBytes bytes) of a value of value_bytes bytes:
// false (with why) when it is not this format's or declares another size. Reads nothing past
// the header, so a value can be judged before it is read whole.
bool parse_value_header(const uint8_t *header, uint64_t value_bytes, StoreValueInfo *out,
                        std::string *why);
// The header and tokens (head: the value's first info.payload_offset bytes) against the header's
// checksum: "" or why not.
std::string check_value_head(const uint8_t *head, const StoreValueInfo &info);
// XXH3-64 of a payload read piece by piece (store administration reads large values in chunks).
class PayloadChecksum {
 public:
  PayloadChecksum();
  ~PayloadChecksum();
  PayloadChecksum(const PayloadChecksum &) = delete;
  PayloadChecksum &operator=(const PayloadChecksum &) = delete;
  void add(const uint8_t *p, size_t n);
  uint64_t done() const;

 private:
  void *state_;
};
// The three above on a value whole in memory (size bytes).
bool read_value_header(const uint8_t *value, size_t size, StoreValueInfo *out, std::string *why);

}  // namespace pkv
