#include "tiers/store_format.h"

#include <openssl/evp.h>
#include <xxhash.h>

#include <cstdio>
#include <cstring>

#include "status.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the store format is little-endian");

namespace pkv {
namespace {

constexpr char kMagic[8] = {'P', 'K', 'V', 'S', 'T', 'O', 'R', 'E'};
constexpr uint32_t kFormatVersion = 1;

// The header's fixed part, at the start of every value.
struct Header {
  char magic[8];
  uint32_t format_version;
  uint32_t header_bytes;  // sizeof(Header)
  uint8_t fingerprint[32];
  uint8_t key[32];
  uint8_t parent[32];
  uint32_t num_tokens;
  uint32_t reserved0;
  uint64_t payload_bytes;
  uint64_t payload_checksum;  // XXH3-64 of the payload
  uint64_t header_checksum;   // XXH3-64 of the header up to here, then of the tokens
  uint64_t reserved1;
};
static_assert(sizeof(Header) == 152, "the header's layout is the format");

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new()) {
    if (!ctx_ || EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1)
      fail(PKV_ERR_OUT_OF_MEMORY, "SHA-256: libcrypto could not start a digest");
  }
  ~Sha256() { EVP_MD_CTX_free(ctx_); }
  Sha256 &add(const void *data, size_t n) {
    if (n && EVP_DigestUpdate(ctx_, data, n) != 1) fail(PKV_ERR_INTERNAL, "SHA-256: update failed");
    return *this;
  }
  void done(uint8_t out[32]) {
    unsigned len = 0;
    if (EVP_DigestFinal_ex(ctx_, out, &len) != 1 || len != 32)
      fail(PKV_ERR_INTERNAL, "SHA-256: final failed");
  }

 private:
  EVP_MD_CTX *ctx_;
};

template <class T> void add_le(Sha256 &h, T v) { h.add(&v, sizeof v); }

uint64_t header_checksum(const Header &h, const int32_t *tokens) {
  XXH3_state_t *st = XXH3_createState();
  if (!st) fail(PKV_ERR_OUT_OF_MEMORY, "no memory for a checksum");
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, &h, offsetof(Header, header_checksum));
  XXH3_64bits_update(st, tokens, sizeof(int32_t) * h.num_tokens);
  const uint64_t sum = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return sum;
}

}  // namespace

bool StoreKey::operator==(const StoreKey &o) const { return std::memcmp(bytes, o.bytes, 32) == 0; }

std::string StoreKey::hex() const {
  static const char digits[] = "0123456789abcdef";
  std::string s(64, '0');
  for (int i = 0; i < 32; ++i) {
    s[2 * i] = digits[bytes[i] >> 4];
    s[2 * i + 1] = digits[bytes[i] & 15];
  }
  return s;
}

uint64_t StoreShape::value_bytes() const { return payload_offset(*this) + payload_bytes(); }

uint64_t payload_offset(const StoreShape &shape) {
  return sizeof(Header) + sizeof(int32_t) * uint64_t(shape.block_size);
}
static_assert(sizeof(Header) == kValueHeaderBytes, "store_format.h names the header's size");

StoreFingerprint store_fingerprint(const StoreShape &s) {
  Sha256 h;
  h.add("pkv-store-fingerprint-v1", 24);
  add_le(h, s.num_layers), add_le(h, s.kv_heads), add_le(h, s.head_dim), add_le(h, s.dtype);
  add_le(h, s.block_size), add_le(h, s.tp_rank), add_le(h, s.tp_size), add_le(h, s.block_bytes);
  // A latent cache (one tensor): named apart from a K/V cache of the same widths. K/V caches hash
  // as before 0.3, so their stores keep their keys.
  if (s.tensors == 1) h.add("mla", 3), add_le(h, s.kv_lora_rank);
  // An indexer's keys are in the pages (since 0.7): named, so that no other layout of equal
  // page bytes reads them as something else.
  if (s.index_dim) h.add("indexer", 7), add_le(h, s.index_dim), add_le(h, s.index_dtype);
  // KV groups (since 0.8): the layers' specs and their groups and slots, so that no other
  // grouping of equal page bytes reads a block as its own. One full-attention group of the flat
  // fields' layers names none: its keys stay those of 0.7.
  if (!s.layout.empty()) {
    h.add("kv-layout", 9);
    add_le(h, uint64_t(s.layout.size()));
    h.add(s.layout.data(), s.layout.size());
  }
  // fp8 blocks mean their values times the scales: blocks written under other scales are other KV.
  for (float f : s.kv_scales) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    add_le(h, bits);
  }
  // The model's identity, when the host names it (since 0.4; without one the keys stay 0.3's).
  if (!s.model_id.empty()) {
    h.add("model-id", 8);
    add_le(h, uint64_t(s.model_id.size()));
    h.add(s.model_id.data(), s.model_id.size());
  }
  StoreFingerprint fp;
  h.done(fp.bytes);
  return fp;
}

std::string config_model_id(const char *json, size_t len) {
  uint8_t digest[32];
  Sha256().add(json, len).done(digest);
  StoreKey k;
  std::memcpy(k.bytes, digest, 32);
  return "config-sha256:" + k.hex();
}

StoreKey store_root_key(const StoreFingerprint &fp, const std::string &salt, uint64_t lora_id) {
  Sha256 h;
  if (lora_id == 0) {
    h.add("pkv-store-root-v1", 17).add(fp.bytes, 32);
  } else {
    h.add("pkv-store-root-lora-v1", 22).add(fp.bytes, 32);
    add_le(h, lora_id);
  }
  add_le(h, uint64_t(salt.size()));
  h.add(salt.data(), salt.size());
  StoreKey k;
  h.done(k.bytes);
  return k;
}

StoreKey store_group_root(const StoreKey &root, uint32_t group) {
  if (group == 0) return root;
  Sha256 h;
  h.add("pkv-store-group-v1", 18).add(root.bytes, 32);
  add_le(h, group);
  StoreKey k;
  h.done(k.bytes);
  return k;
}

StoreKey store_value_parent(const StoreKey &parent, const std::string &extra) {
  if (extra.empty()) return parent;
  Sha256 h;
  h.add("pkv-store-extra-v1", 18).add(parent.bytes, 32);
  add_le(h, uint64_t(extra.size()));
  h.add(extra.data(), extra.size());
  StoreKey k;
  h.done(k.bytes);
  return k;
}

StoreKey store_block_key(const StoreKey &parent, const int32_t *tokens, uint32_t n) {
  Sha256 h;
  h.add(parent.bytes, 32).add(tokens, sizeof(int32_t) * n);
  StoreKey k;
  h.done(k.bytes);
  return k;
}

StoreShape state_store_shape(const StoreShape &kv, uint64_t slot_bytes) {
  StoreShape s = kv;
  s.num_layers = 1, s.tensors = 1, s.block_bytes = slot_bytes;
  s.kv_scales.clear();
  return s;
}

StoreFingerprint state_fingerprint(const StoreFingerprint &kv, const std::string &layout) {
  Sha256 h;
  h.add("pkv-store-state-fingerprint-v1", 30).add(kv.bytes, 32);
  add_le(h, uint64_t(layout.size()));
  h.add(layout.data(), layout.size());
  StoreFingerprint fp;
  h.done(fp.bytes);
  return fp;
}

StoreKey store_state_parent(const StoreFingerprint &state_fp, const StoreKey &block_key) {
  Sha256 h;
  h.add("pkv-store-state-v1", 18).add(state_fp.bytes, 32).add(block_key.bytes, 32);
  StoreKey k;
  h.done(k.bytes);
  return k;
}

void encode_value(const StoreShape &shape, const StoreFingerprint &fp, const StoreKey &key,
                  const StoreKey &parent, const int32_t *tokens, uint8_t *value) {
  Header h;
  std::memset(&h, 0, sizeof h);
  std::memcpy(h.magic, kMagic, 8);
  h.format_version = kFormatVersion;
  h.header_bytes = sizeof(Header);
  std::memcpy(h.fingerprint, fp.bytes, 32);
  std::memcpy(h.key, key.bytes, 32);
  std::memcpy(h.parent, parent.bytes, 32);
  h.num_tokens = shape.block_size;
  h.payload_bytes = shape.payload_bytes();
  h.payload_checksum = XXH3_64bits(value + payload_offset(shape), shape.payload_bytes());
  h.header_checksum = header_checksum(h, tokens);
  std::memcpy(value, &h, sizeof h);
  std::memcpy(value + sizeof h, tokens, sizeof(int32_t) * shape.block_size);
}

std::string verify_value(const StoreShape &shape, const StoreFingerprint &fp, const StoreKey &key,
                         const StoreKey &parent, const int32_t *tokens, const uint8_t *value) {
  StoreValueInfo info;
  std::string why;
  if (!parse_value_header(value, shape.value_bytes(), &info, &why)) return why;
  // The same size need not mean the same shape (more tokens, a smaller payload).
  if (info.num_tokens != shape.block_size || info.payload_bytes != shape.payload_bytes())
    return "another block size or payload size";
  why = check_value_head(value, info);
  if (!why.empty()) return why;
  if (std::memcmp(info.fingerprint.bytes, fp.bytes, 32) != 0) return "another model fingerprint";
  if (!(info.key == key)) return "stored under another key";
  if (!(info.parent == parent)) return "another parent block";
  if (std::memcmp(value + kValueHeaderBytes, tokens, sizeof(int32_t) * shape.block_size) != 0)
    return "other tokens";
  if (info.payload_checksum != XXH3_64bits(value + info.payload_offset, info.payload_bytes))
    return "payload checksum mismatch";
  return std::string();
}

// The one place that adds a value's sizes: each term is bounded first, so no sum can wrap.
static std::string check_layout(const Header &h, uint64_t value_bytes, StoreValueInfo *out) {
  if (std::memcmp(h.magic, kMagic, 8) != 0) return "not a pkv block (magic)";
  if (h.format_version != kFormatVersion || h.header_bytes != sizeof(Header))
    return "format version " + std::to_string(h.format_version) + ", this pkv reads 1";
  if (h.reserved0 != 0 || h.reserved1 != 0) return "reserved header bytes are not 0";
  if (h.num_tokens == 0 || h.num_tokens > PKV_MAX_BLOCK_SIZE)
    return "a block of " + std::to_string(h.num_tokens) + " tokens (1 .. 2^20)";
  const uint64_t offset =
      sizeof(Header) + sizeof(int32_t) * uint64_t(h.num_tokens);  // <= 2^22 + 152
  if (value_bytes < offset || value_bytes - offset != h.payload_bytes) {
    const bool wraps = h.payload_bytes > UINT64_MAX - offset;
    return std::to_string(value_bytes) + " bytes where its header says " +
           (wraps ? std::string("more than 2^64") : std::to_string(offset + h.payload_bytes)) +
           " (truncated or padded)";
  }
  std::memcpy(out->key.bytes, h.key, 32);
  std::memcpy(out->parent.bytes, h.parent, 32);
  std::memcpy(out->fingerprint.bytes, h.fingerprint, 32);
  out->num_tokens = h.num_tokens;
  out->payload_bytes = h.payload_bytes;
  out->payload_offset = offset;
  out->payload_checksum = h.payload_checksum;
  return std::string();
}

bool parse_value_header(const uint8_t *header, uint64_t value_bytes, StoreValueInfo *out,
                        std::string *why) {
  if (value_bytes < sizeof(Header))
    return *why = std::to_string(value_bytes) + " bytes: shorter than a header (" +
                  std::to_string(sizeof(Header)) + ")",
           false;
  Header h;
  std::memcpy(&h, header, sizeof h);
  *why = check_layout(h, value_bytes, out);
  return why->empty();
}

std::string check_value_head(const uint8_t *head, const StoreValueInfo &info) {
  Header h;
  std::memcpy(&h, head, sizeof h);
  PKV_ASSERT(h.num_tokens == info.num_tokens);  // the header parse_value_header checked
  if (h.header_checksum != header_checksum(h, reinterpret_cast<const int32_t *>(head + sizeof h)))
    return "header checksum mismatch";
  return std::string();
}

PayloadChecksum::PayloadChecksum() : state_(XXH3_createState()) {
  if (!state_) fail(PKV_ERR_OUT_OF_MEMORY, "no memory for a checksum");
  XXH3_64bits_reset(static_cast<XXH3_state_t *>(state_));
}
PayloadChecksum::~PayloadChecksum() { XXH3_freeState(static_cast<XXH3_state_t *>(state_)); }
void PayloadChecksum::add(const uint8_t *p, size_t n) {
  XXH3_64bits_update(static_cast<XXH3_state_t *>(state_), p, n);
}
uint64_t PayloadChecksum::done() const {
  return XXH3_64bits_digest(static_cast<const XXH3_state_t *>(state_));
}

bool read_value_header(const uint8_t *value, size_t size, StoreValueInfo *out, std::string *why) {
  StoreValueInfo info;
  if (!parse_value_header(value, size, &info, why)) return false;
  *why = check_value_head(value, info);
  if (!why->empty()) return false;
  if (info.payload_checksum != XXH3_64bits(value + info.payload_offset, info.payload_bytes))
    return *why = "payload checksum mismatch", false;
  *out = info;
  return true;
}

}  // namespace pkv
