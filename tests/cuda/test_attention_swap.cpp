// Attention after the host tier (kernels/cache_ops.cu's copy_tier_blocks under decode_attention.cu
// and prefill_attention.cu), against the fp64 reference; the kernel-level twin of
// tests/cpu/test_attention_swap.c. A batch's cached K/V (every layer) goes out to a pinned host
// tier in one launch, every pool block it used is overwritten (other sequences took them), and it
// comes back in one launch into other pool blocks, with the block tables rewritten: a swap-in, or
// a host-tier prefix hit landing in whatever blocks are free. Then, on every layer, write_kv of
// the new tokens and both attention kernels: decodes whose new token goes into the loaded partial
// block, a prefill chunk after a loaded block-aligned prefix (a host-tier hit) with a second
// request sharing those blocks, and a chunk after a mid-block prefix (a prompt swapped out between
// chunks). The host tier after the swap-out and the whole pool at the end are checked byte for
// byte too.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "attention_ref.h"
#include "kv_harness.h"

namespace {

using namespace kvtest;
using Bytes = std::vector<unsigned char>;

// share_of >= 0: the first shared_blocks blocks are those of that earlier sequence (one prefix
// loaded once, attended by both); they must be full in both sequences' cached prefixes.
struct SwapSeq {
  int32_t context_len, query_len, share_of = -1, shared_blocks = 0;
};

struct SwapCase {
  DType dtype;
  int32_t block_size, kv_heads, group, head_dim, layers;
  std::vector<SwapSeq> seqs;
  int32_t split_tokens = 0;  // decode: 0 = plan_decode's choice
};

// Blocks by logical id: 0 .. num_cached - 1 hold cached prefixes (out to the host tier and back),
// num_cached .. on are taken after the swap-in for new tokens only. Pool and host-tier ids of
// each; a loaded block never returns to the pool id it left.
struct Blocks {
  int32_t num_cached = 0, num_fresh = 0, pool_blocks = 0, host_blocks = 0;
  std::vector<std::vector<int32_t>> of_seq;  // logical ids, in context order
  std::vector<int32_t> before, host, after;  // [num_cached], [num_cached], [num_cached + num_fresh]
};

std::vector<int32_t> shuffled(int32_t n, Rng &rng) {
  std::vector<int32_t> ids(n);
  for (int32_t i = 0; i < n; ++i) ids[i] = i;
  for (size_t i = ids.size(); i > 1; --i) std::swap(ids[i - 1], ids[rng.below(uint32_t(i))]);
  return ids;
}

Blocks plan_blocks(const SwapCase &c, Rng &rng) {
  Blocks b;
  const int32_t bs = c.block_size;
  for (const SwapSeq &s : c.seqs) {
    std::vector<int32_t> ids;
    for (int32_t i = 0; i < (s.context_len - s.query_len + bs - 1) / bs; ++i)
      ids.push_back(i < s.shared_blocks ? b.of_seq[s.share_of][i] : b.num_cached++);
    b.of_seq.push_back(ids);
  }
  for (size_t s = 0; s < c.seqs.size(); ++s)
    while (int32_t(b.of_seq[s].size()) < (c.seqs[s].context_len + bs - 1) / bs)
      b.of_seq[s].push_back(b.num_cached + b.num_fresh++);
  b.pool_blocks = b.num_cached + b.num_fresh + 3;
  b.host_blocks = b.num_cached + 3;  // the host tier holds others' blocks too
  b.before = shuffled(b.pool_blocks, rng);
  b.before.resize(b.num_cached);
  b.host = shuffled(b.host_blocks, rng);
  b.host.resize(b.num_cached);
  for (bool moved = false; !moved;) {
    b.after = shuffled(b.pool_blocks, rng);
    b.after.resize(b.num_cached + b.num_fresh);
    moved = true;
    for (int32_t i = 0; i < b.num_cached; ++i) moved = moved && b.after[i] != b.before[i];
  }
  return b;
}

// One layer's step on the host: the true contiguous K/V per sequence (rounded to the dtype), the
// new rows and the queries.
struct LayerStep {
  std::vector<std::vector<double>> k_seq, v_seq;  // per seq [context][kv_heads][head_dim]
  std::vector<double> q;                          // [tokens][q_heads][head_dim]
  Bytes q_raw, k_new, v_new;                      // [tokens][...] in the dtype
};

struct World {
  SwapCase c;
  Blocks b;
  size_t eb, row, block_bytes, layer_bytes;  // row: elements of one token's K (or V)
  int32_t num_tokens = 0, max_query_len = 0, max_context_len = 0;
  std::vector<int32_t> query_start{0}, context_lens, block_indptr{0}, block_indices;
  std::vector<int64_t> slot_mapping;  // pool slots after the swap-in
  Bytes pool[2];                      // K, V [layers][pool_blocks][block] before the swap-out
  std::vector<LayerStep> layers;
};

// Element e of position pos's row in block `block` of layer `layer`, in a pool
// [layers][pool_blocks][block_size][row].
size_t pool_elem(const World &w, int32_t layer, int32_t block, int32_t pos, size_t e) {
  const size_t slot = size_t(layer) * w.b.pool_blocks * w.c.block_size +
                      size_t(block) * w.c.block_size + pos % w.c.block_size;
  return slot * w.row + e;
}

double draw(DType t, Rng &rng) {
  unsigned char buf[4];
  store_elem(t, buf, 0, rng.uniform(-1, 1));
  return load_elem(t, buf, 0);
}

// Cached positions go into the pool at their pre-swap blocks (a shared block is read back, not
// drawn again); slots past a cached prefix stay NaN until write_kv. New positions go to k_new.
void fill_layer(World &w, int32_t l, Rng &rng) {
  const SwapCase &c = w.c;
  const DType t = c.dtype;
  LayerStep &ls = w.layers[l];
  ls.q.resize(size_t(w.num_tokens) * w.row * c.group);
  ls.q_raw.resize(ls.q.size() * w.eb);
  for (size_t i = 0; i < ls.q.size(); ++i) {
    store_elem(t, ls.q_raw.data(), i, rng.uniform(-2, 2));
    ls.q[i] = load_elem(t, ls.q_raw.data(), i);
  }
  ls.k_new.resize(size_t(w.num_tokens) * w.row * w.eb);
  ls.v_new.resize(ls.k_new.size());
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    const SwapSeq &sq = c.seqs[s];
    const int32_t prefix = sq.context_len - sq.query_len;
    std::vector<double> kv[2] = {std::vector<double>(size_t(sq.context_len) * w.row),
                                 std::vector<double>(size_t(sq.context_len) * w.row)};
    for (int32_t pos = 0; pos < sq.context_len; ++pos) {
      const int32_t lid = w.b.of_seq[s][pos / c.block_size];
      for (size_t e = 0; e < w.row; ++e) {
        for (int j = 0; j < 2; ++j) {
          double &x = kv[j][size_t(pos) * w.row + e];
          if (pos >= prefix) {
            x = draw(t, rng);
            const size_t token = size_t(w.query_start[s] + pos - prefix);
            store_elem(t, (j ? ls.v_new : ls.k_new).data(), token * w.row + e, x);
            continue;
          }
          const size_t at = pool_elem(w, l, w.b.before[lid], pos, e);
          if (pos / c.block_size < sq.shared_blocks) {
            x = load_elem(t, w.pool[j].data(), at);
          } else {
            x = draw(t, rng);
            store_elem(t, w.pool[j].data(), at, x);
          }
        }
      }
    }
    ls.k_seq.push_back(std::move(kv[0]));
    ls.v_seq.push_back(std::move(kv[1]));
  }
}

World make_world(const SwapCase &c, Rng &rng) {
  World w;
  w.c = c;
  w.b = plan_blocks(c, rng);
  w.eb = pkv::cuda::dtype_bytes(c.dtype);
  w.row = size_t(c.kv_heads) * c.head_dim;
  w.block_bytes = size_t(c.block_size) * w.row * w.eb;
  w.layer_bytes = size_t(w.b.pool_blocks) * w.block_bytes;
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    const SwapSeq &sq = c.seqs[s];
    w.num_tokens += sq.query_len;
    w.query_start.push_back(w.num_tokens);
    w.context_lens.push_back(sq.context_len);
    w.max_query_len = std::max(w.max_query_len, sq.query_len);
    w.max_context_len = std::max(w.max_context_len, sq.context_len);
    for (int32_t lid : w.b.of_seq[s]) w.block_indices.push_back(w.b.after[lid]);
    w.block_indptr.push_back(int32_t(w.block_indices.size()));
    for (int32_t pos = sq.context_len - sq.query_len; pos < sq.context_len; ++pos)
      w.slot_mapping.push_back(int64_t(w.b.after[w.b.of_seq[s][pos / c.block_size]]) *
                                   c.block_size +
                               pos % c.block_size);
  }
  for (Bytes &p : w.pool) p.assign(size_t(c.layers) * w.layer_bytes, 0xFF);
  w.layers.resize(c.layers);
  for (int32_t l = 0; l < c.layers; ++l) fill_layer(w, l, rng);
  return w;
}

// Block from_id of every layer of one [layers][from_blocks][block_bytes] pool onto block to_id
// of another.
void copy_block(const World &w, const unsigned char *from, int32_t from_blocks, int32_t from_id,
                unsigned char *to, int32_t to_blocks, int32_t to_id) {
  for (int32_t l = 0; l < w.c.layers; ++l)
    std::memcpy(to + (size_t(l) * to_blocks + to_id) * w.block_bytes,
                from + (size_t(l) * from_blocks + from_id) * w.block_bytes, w.block_bytes);
}

std::string describe(const SwapCase &c) {
  std::string s = std::string(dtype_name(c.dtype)) + " bs=" + std::to_string(c.block_size) +
                  " kvh=" + std::to_string(c.kv_heads) + " group=" + std::to_string(c.group) +
                  " d=" + std::to_string(c.head_dim) + " seqs(ctx/q)=";
  for (const SwapSeq &q : c.seqs)
    s += std::to_string(q.context_len) + "/" + std::to_string(q.query_len) + " ";
  return s;
}

template <class T> void upload_vec(DevBuf &b, const std::vector<T> &v) {
  b.upload(v.data(), v.size() * sizeof(T));
}

// Write_kv and both attention kernels on layer l, against the reference; returns mismatches.
size_t run_layer(const World &w, int32_t l, DevBuf &kp, DevBuf &vp,
                 const pkv::cuda::BatchView &batch, const pkv::cuda::DecodePlan &plan, DevBuf &ws,
                 DevBuf &sm) {
  const SwapCase &c = w.c;
  const LayerStep &ls = w.layers[l];
  const int32_t q_heads = c.kv_heads * c.group;
  const float scale = 1.f / std::sqrt(float(c.head_dim));
  DevBuf q(ls.q_raw.size()), kn(ls.k_new.size()), vn(ls.v_new.size()), out(ls.q_raw.size());
  upload_vec(q, ls.q_raw), upload_vec(kn, ls.k_new), upload_vec(vn, ls.v_new);
  char *k = kp.as<char>() + l * w.layer_bytes, *v = vp.as<char>() + l * w.layer_bytes;
  const pkv::cuda::KvLayer layer{k,       v,       c.block_size, c.kv_heads, c.head_dim,
                                 c.dtype, c.dtype, nullptr,      nullptr,    0};
  check_cuda(pkv::cuda::launch_write_kv(layer, kn.as<void>(), vn.as<void>(), sm.as<int64_t>(),
                                        w.num_tokens, nullptr),
             "launch_write_kv");
  check_cuda(pkv::cuda::launch_decode_attention(layer, batch, q.as<void>(), out.as<void>(), q_heads,
                                                scale, plan, ws.as<void>(), nullptr),
             "launch_decode_attention");
  check_cuda(pkv::cuda::launch_prefill_attention(layer, batch, q.as<void>(), out.as<void>(),
                                                 q_heads, scale, nullptr),
             "launch_prefill_attention");
  check_cuda(cudaDeviceSynchronize(), "sync");
  Bytes got_raw(ls.q_raw.size());
  out.download(got_raw.data(), got_raw.size());
  std::vector<double> got(ls.q.size()), ref(ls.q.size());
  for (size_t i = 0; i < got.size(); ++i) got[i] = load_elem(c.dtype, got_raw.data(), i);
  const size_t q_row = size_t(q_heads) * c.head_dim;
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    const size_t off = size_t(w.query_start[s]) * q_row;
    pkv_ref_attention(ls.q.data() + off, ls.k_seq[s].data(), ls.v_seq[s].data(), ref.data() + off,
                      uint32_t(c.seqs[s].query_len), uint32_t(c.seqs[s].context_len),
                      uint32_t(q_heads), uint32_t(c.kv_heads), uint32_t(c.head_dim), 0.0);
  }
  double atol, rtol;
  tolerances(c.dtype, &atol, &rtol);
  const std::string label =
      describe(c) + "split=" + std::to_string(plan.split_tokens) + " layer " + std::to_string(l);
  return pkv_ref_compare(label.c_str(), got.data(), ref.data(), got.size(), atol, rtol);
}

// The pool and the host tier on the device, and the copies between them.
struct Tiers {
  DevBuf k, v;
  PinnedBuf host;
  size_t host_bytes;
  pkv::cuda::KvPool dev_pool, host_pool;
  Tiers(const World &w, size_t host_bytes)
      : k(w.pool[0].size()), v(w.pool[0].size()), host(2 * host_bytes), host_bytes(host_bytes) {
    dev_pool = {k.as<void>(), v.as<void>(), w.c.layers, int64_t(w.layer_bytes),
                int64_t(w.block_bytes)};
    host_pool = {host.device(), host.device() + host_bytes, w.c.layers,
                 int64_t(w.b.host_blocks * w.block_bytes), int64_t(w.block_bytes)};
  }
  // One launch over every (from, to) pair: the swap-out or the swap-in.
  void copy(bool to_host, const std::vector<int32_t> &pairs, const char *what) {
    DevBuf dp(4 * pairs.size());
    upload_vec(dp, pairs);
    check_cuda(pkv::cuda::launch_copy_tier_blocks(to_host ? dev_pool : host_pool,
                                                  to_host ? host_pool : dev_pool, dp.as<int32_t>(),
                                                  int32_t(pairs.size() / 2), nullptr),
               what);
    check_cuda(cudaDeviceSynchronize(), "sync");
  }
};

// The host tier already holds other blocks; the batch's cached prefixes go out to it in one
// launch. Returns true when the host tier is then right byte for byte.
bool swap_out(const World &w, Tiers &t, Rng &rng) {
  const Blocks &b = w.b;
  std::vector<int32_t> pairs;
  for (int32_t i = 0; i < b.num_cached; ++i) pairs.insert(pairs.end(), {b.before[i], b.host[i]});
  Bytes want[2] = {Bytes(t.host_bytes), Bytes(t.host_bytes)};
  for (int j = 0; j < 2; ++j) {
    for (size_t i = 0; i < t.host_bytes / w.eb; ++i)
      store_elem(w.c.dtype, want[j].data(), i, rng.uniform(-1, 1));
    std::memcpy(t.host.host() + j * t.host_bytes, want[j].data(), t.host_bytes);
    for (int32_t i = 0; i < b.num_cached; ++i)
      copy_block(w, w.pool[j].data(), b.pool_blocks, b.before[i], want[j].data(), b.host_blocks,
                 b.host[i]);
  }
  t.k.upload(w.pool[0].data(), w.pool[0].size()), t.v.upload(w.pool[1].data(), w.pool[1].size());
  t.copy(true, pairs, "launch_copy_tier_blocks (swap-out)");
  const bool ok = std::memcmp(t.host.host(), want[0].data(), t.host_bytes) == 0 &&
                  std::memcmp(t.host.host() + t.host_bytes, want[1].data(), t.host_bytes) == 0;
  if (!ok) fprintf(stderr, "%s: host tier differs after the swap-out\n", describe(w.c).c_str());
  return ok;
}

// Other sequences take the freed blocks (their K/V overwrite ours; the rest of the pool is NaN),
// then the swap-in: one launch, host tier -> other pool blocks. `want` is the pool it leaves.
void swap_in(const World &w, Tiers &t, Rng &rng, Bytes (&want)[2]) {
  const Blocks &b = w.b;
  std::vector<int32_t> pairs;
  for (int32_t i = 0; i < b.num_cached; ++i) pairs.insert(pairs.end(), {b.host[i], b.after[i]});
  for (int j = 0; j < 2; ++j) {
    want[j].assign(w.pool[j].size(), 0xFF);
    for (int32_t l = 0; l < w.c.layers; ++l)
      for (int32_t id : b.before)
        for (size_t i = 0; i < w.block_bytes / w.eb; ++i)
          store_elem(w.c.dtype, want[j].data() + l * w.layer_bytes + id * w.block_bytes, i,
                     rng.uniform(-4, 4));
  }
  t.k.upload(want[0].data(), want[0].size()), t.v.upload(want[1].data(), want[1].size());
  t.copy(false, pairs, "launch_copy_tier_blocks (swap-in)");
  for (int j = 0; j < 2; ++j)
    for (int32_t i = 0; i < b.num_cached; ++i)
      copy_block(w, w.pool[j].data(), b.pool_blocks, b.before[i], want[j].data(), b.pool_blocks,
                 b.after[i]);
}

// The pool at the end: the loaded blocks at their new ids with the new rows where the slot
// mapping says, the other sequences' blocks untouched.
bool check_pool(const World &w, Tiers &t, Bytes (&want)[2]) {
  for (int32_t l = 0; l < w.c.layers; ++l)
    pkv_ref_write_kv(w.layers[l].k_new.data(), w.layers[l].v_new.data(),
                     want[0].data() + l * w.layer_bytes, want[1].data() + l * w.layer_bytes,
                     w.slot_mapping.data(), uint32_t(w.num_tokens), w.row * w.eb);
  Bytes got(want[0].size());
  t.k.download(got.data(), got.size());
  bool ok = got == want[0];
  t.v.download(got.data(), got.size());
  ok = ok && got == want[1];
  if (!ok) fprintf(stderr, "%s: KV pool differs after the swap-in\n", describe(w.c).c_str());
  return ok;
}

bool run_swap(const SwapCase &c, uint64_t seed) {
  Rng rng(seed);
  const World w = make_world(c, rng);
  Tiers t(w, size_t(c.layers) * w.b.host_blocks * w.block_bytes);
  const bool out_ok = swap_out(w, t, rng);
  Bytes want[2];
  swap_in(w, t, rng, want);

  DevBuf tables[4] = {DevBuf(4 * w.query_start.size()), DevBuf(4 * w.context_lens.size()),
                      DevBuf(4 * w.block_indptr.size()), DevBuf(4 * w.block_indices.size())};
  upload_vec(tables[0], w.query_start), upload_vec(tables[1], w.context_lens);
  upload_vec(tables[2], w.block_indptr), upload_vec(tables[3], w.block_indices);
  DevBuf sm(8 * w.slot_mapping.size());
  upload_vec(sm, w.slot_mapping);
  const pkv::cuda::BatchView batch{int32_t(c.seqs.size()),  w.num_tokens,
                                   w.max_query_len,         w.max_context_len,
                                   tables[0].as<int32_t>(), tables[1].as<int32_t>(),
                                   tables[2].as<int32_t>(), tables[3].as<int32_t>()};
  const int32_t q_heads = c.kv_heads * c.group;
  const pkv::cuda::DecodePlan plan =
      c.split_tokens
          ? pkv::cuda::plan_decode_with_split(batch, q_heads, c.head_dim, 0, c.split_tokens)
          : pkv::cuda::plan_decode(batch, q_heads, c.kv_heads, c.head_dim, 0, 132);
  DevBuf ws(plan.workspace_bytes);
  size_t bad = 0;
  for (int32_t l = 0; l < c.layers; ++l) bad += run_layer(w, l, t.k, t.v, batch, plan, ws, sm);
  const bool pool_ok = check_pool(w, t, want);
  return out_ok && pool_ok && bad == 0;
}

}  // namespace

int main() {
  if (int skip = require_device()) return skip;
  const DType dtypes[] = {DType::f32, DType::f16, DType::bf16};
  const int32_t head_dims[] = {64, 128, 80, 72, 64, 40};
  const int32_t groups[] = {4, 1, 8};
  std::vector<SwapCase> cases;
  int i = 0;
  for (DType t : dtypes) {
    for (int32_t bs : {7, 16}) {
      // ctx/query: a decode whose new token lands in the loaded partial block; a decode over more
      // splits; a host-tier hit of two full blocks and 20 new tokens; a second request hitting the
      // same two blocks; a chunk after a mid-block prefix of 30.
      const std::vector<SwapSeq> seqs = {
          {3 * bs + 5, 1}, {150, 1}, {2 * bs + 20, 20}, {2 * bs + 9, 9, 2, 2}, {47, 17}};
      cases.push_back({t, bs, 2, groups[i % 3], head_dims[i % 6], 2, seqs, i % 2 ? 64 : 0});
      ++i;
    }
  }
  // Three layers, a group that is not a power of 2, head_dim 256, a prefix hit of five blocks.
  cases.push_back({DType::f16, 16, 1, 5, 96, 3, {{70, 1}, {5 * 16 + 11, 11}, {40, 1}}, 64});
  cases.push_back({DType::bf16, 7, 2, 2, 256, 2, {{30, 1}, {5 * 7 + 12, 12}}, 0});
  int failures = 0;
  uint64_t seed = 1;
  for (const SwapCase &c : cases) failures += !run_swap(c, seed++);
  printf("attention_swap: %d of %zu cases passed\n", int(cases.size()) - failures, cases.size());
  return failures ? 1 : 0;
}
