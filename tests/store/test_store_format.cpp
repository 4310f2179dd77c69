// The store's keys and values (src/tiers/store_format.h), directly: keys are SHA-256 chains that
// depend on every input (salt, each fingerprint field, parent, every token), and verify_value()
// accepts exactly the value written for (fingerprint, key, parent, tokens) and rejects, with a
// reason, every other: a flipped bit anywhere (header, tokens, payload), a truncated or padded
// value (read_value_header), another fingerprint, key, parent or tokens.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tiers/store_format.h"

namespace {

int failed = 0, passed = 0;
#define EXPECT(c)                                                                 \
  do {                                                                            \
    if (c)                                                                        \
      passed++;                                                                   \
    else                                                                          \
      failed++, std::fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #c); \
  } while (0)

using namespace pkv;

StoreShape shape() { return StoreShape{2, 2, 8, 4, 0, 1, PKV_DTYPE_F16, 4 * 2 * 8 * 2, {}}; }

std::vector<uint8_t> make_value(const StoreShape &s, const StoreFingerprint &fp,
                                const StoreKey &key, const StoreKey &parent,
                                const int32_t *tokens) {
  std::vector<uint8_t> v(s.value_bytes());
  for (uint64_t i = 0; i < s.payload_bytes(); ++i) v[payload_offset(s) + i] = uint8_t(i * 7 + 3);
  encode_value(s, fp, key, parent, tokens, v.data());
  return v;
}

void test_keys() {
  const StoreShape s = shape();
  const StoreFingerprint fp = store_fingerprint(s);
  const int32_t t[4] = {1, 2, 3, 4}, u[4] = {1, 2, 3, 5};
  const StoreKey root = store_root_key(fp, "a");
  EXPECT(!(root == store_root_key(fp, "b")));
  EXPECT(!(root == store_root_key(fp, "")));
  EXPECT(root == store_root_key(fp, "a"));
  const StoreKey k = store_block_key(root, t, 4);
  EXPECT(k == store_block_key(root, t, 4));
  EXPECT(!(k == store_block_key(root, u, 4)));
  EXPECT(!(k == store_block_key(store_root_key(fp, "b"), t, 4)));
  EXPECT(k.hex().size() == 64);
  // An adapter is a root of its own (lora_id 0 is none); extra bytes name another parent, and
  // none leave it the parent key itself (0.4's chain).
  EXPECT(root == store_root_key(fp, "a", 0));
  EXPECT(!(root == store_root_key(fp, "a", 1)));
  EXPECT(!(store_root_key(fp, "a", 1) == store_root_key(fp, "a", 2)));
  EXPECT(!(store_root_key(fp, "", 1) == store_root_key(fp, "", 0)));
  EXPECT(store_value_parent(root, "") == root);
  const StoreKey p1 = store_value_parent(root, std::string("\x00\x00\x00\x00", 4) + "img-a");
  EXPECT(!(p1 == root));
  EXPECT(!(p1 == store_value_parent(root, std::string("\x00\x00\x00\x00", 4) + "img-b")));
  EXPECT(p1 == store_value_parent(root, std::string("\x00\x00\x00\x00", 4) + "img-a"));
  EXPECT(!(store_block_key(p1, t, 4) == k));
  // Every field of the shape is in the fingerprint.
  StoreShape o = s;
  const auto differs = [&](const StoreShape &x) {
    const StoreFingerprint f = store_fingerprint(x);
    return std::memcmp(f.bytes, fp.bytes, 32) != 0;
  };
  o = s;
  o.num_layers++;
  EXPECT(differs(o));
  o = s;
  o.kv_heads++;
  EXPECT(differs(o));
  o = s;
  o.head_dim++;
  EXPECT(differs(o));
  o = s;
  o.block_size++;
  EXPECT(differs(o));
  o = s;
  o.tp_rank++;
  EXPECT(differs(o));
  o = s;
  o.tp_size++;
  EXPECT(differs(o));
  o = s;
  o.dtype = PKV_DTYPE_BF16;
  EXPECT(differs(o));
  // A salt that is a prefix of another, or the same bytes split otherwise, is another root.
  EXPECT(!(store_root_key(fp, std::string("ab", 2)) == store_root_key(fp, std::string("a\0", 2))));
}

void test_values() {
  const StoreShape s = shape();
  const StoreFingerprint fp = store_fingerprint(s);
  const int32_t t[4] = {10, 20, 30, 40}, other[4] = {10, 20, 30, 41};
  const StoreKey root = store_root_key(fp, "");
  const StoreKey key = store_block_key(root, t, 4);
  const std::vector<uint8_t> good = make_value(s, fp, key, root, t);
  EXPECT(verify_value(s, fp, key, root, t, good.data()).empty());
  StoreValueInfo info;
  std::string why;
  EXPECT(read_value_header(good.data(), good.size(), &info, &why));
  EXPECT(info.key == key && info.parent == root && info.num_tokens == 4 &&
         info.payload_bytes == s.payload_bytes());
  // One flipped bit anywhere is caught (every byte tried).
  uint64_t caught = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    std::vector<uint8_t> bad = good;
    bad[i] ^= uint8_t(1u << (i % 8));
    caught += !verify_value(s, fp, key, root, t, bad.data()).empty();
  }
  EXPECT(caught == good.size());
  // Truncated or padded: not a value of this format.
  EXPECT(!read_value_header(good.data(), good.size() - 1, &info, &why));
  std::vector<uint8_t> padded = good;
  padded.push_back(0);
  EXPECT(!read_value_header(padded.data(), padded.size(), &info, &why));
  EXPECT(!read_value_header(good.data(), 10, &info, &why));
  // Asked for another key, parent, tokens or model: rejected, saying which.
  const StoreKey key2 = store_block_key(root, other, 4);
  EXPECT(verify_value(s, fp, key2, root, t, good.data()) == "stored under another key");
  EXPECT(verify_value(s, fp, key, key2, t, good.data()) == "another parent block");
  EXPECT(verify_value(s, fp, key, root, other, good.data()) == "other tokens");
  StoreShape s2 = s;
  s2.tp_rank = 1;
  EXPECT(verify_value(s, store_fingerprint(s2), key, root, t, good.data()) ==
         "another model fingerprint");
  // A value of another model's shape (another block size) is refused before anything is read past it.
  StoreShape s3 = s;
  s3.block_size = 8;
  s3.block_bytes *= 2;
  std::vector<uint8_t> big(s3.value_bytes());
  const int32_t t8[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  encode_value(s3, store_fingerprint(s3), key, root, t8, big.data());
  EXPECT(verify_value(s, fp, key, root, t, big.data()).find("where its header says") !=
         std::string::npos);
}

// Issue 26: a 16,600-byte value whose header says 2^30 tokens and a payload_bytes that makes
// header + tokens + payload wrap 64 bits to exactly 16,600. The sum passed the size check and the
// header checksum read 4 GiB past the value (SIGSEGV in `pkv store verify`). Now every size is
// bounded before it is added: refused, saying why, reading nothing past the header.
std::vector<uint8_t> wrapping_value() {
  const StoreShape s = shape();
  const StoreFingerprint fp = store_fingerprint(s);
  const int32_t t[4] = {1, 2, 3, 4};
  const StoreKey root = store_root_key(fp, "");
  std::vector<uint8_t> v = make_value(s, fp, store_block_key(root, t, 4), root, t);
  v.resize(16600);
  const uint32_t num_tokens = 1u << 30;
  const uint64_t payload =
      16600 - kValueHeaderBytes - (uint64_t(4) << 30);      // wraps: 2^64 - 2^32 + 16448
  std::memcpy(v.data() + 8 + 4 + 4 + 96, &num_tokens, 4);   // Header::num_tokens
  std::memcpy(v.data() + 8 + 4 + 4 + 96 + 8, &payload, 8);  // Header::payload_bytes
  return v;
}

void test_sizes_never_wrap() {
  const std::vector<uint8_t> v = wrapping_value();
  StoreValueInfo info;
  std::string why;
  EXPECT(!read_value_header(v.data(), v.size(), &info, &why));
  EXPECT(why.find("1073741824 tokens") != std::string::npos);
  EXPECT(!parse_value_header(v.data(), v.size(), &info, &why));
  // Tokens within the limit, a payload that wraps the sum: refused as a size mismatch.
  std::vector<uint8_t> w = v;
  const uint32_t four = 4;
  const uint64_t payload = UINT64_MAX - 100;
  std::memcpy(w.data() + 8 + 4 + 4 + 96, &four, 4);
  std::memcpy(w.data() + 8 + 4 + 4 + 96 + 8, &payload, 8);
  EXPECT(!read_value_header(w.data(), w.size(), &info, &why));
  EXPECT(why.find("more than 2^64") != std::string::npos);
  // Zero tokens: refused.
  const uint32_t zero = 0;
  std::memcpy(w.data() + 8 + 4 + 4 + 96, &zero, 4);
  EXPECT(!read_value_header(w.data(), w.size(), &info, &why) &&
         why.find("0 tokens") != std::string::npos);
  // The engine's check of the same value (as the size it expects): refused too.
  const StoreShape s = shape();
  const StoreFingerprint fp = store_fingerprint(s);
  std::vector<uint8_t> as_block = v;
  as_block.resize(s.value_bytes());
  EXPECT(!verify_value(s, fp, StoreKey{}, StoreKey{}, nullptr, as_block.data()).empty());
  // Shorter than a header, and empty: refused, saying the size.
  EXPECT(!read_value_header(v.data(), 0, &info, &why) && why.find("0 bytes") == 0);
  EXPECT(!read_value_header(v.data(), kValueHeaderBytes - 1, &info, &why));
}

}  // namespace

int main() {
  test_keys();
  test_values();
  test_sizes_never_wrap();
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
