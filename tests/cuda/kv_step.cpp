// run_step: one forward step through write_kv, decode and prefill attention (see kv_harness.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "attention_ref.h"
#include "kv_harness.h"

namespace kvtest {
namespace {

// The batch on the host: a true contiguous K/V per sequence (rounded to the dtype, so the
// reference sees exactly what the kernels see) and the paged form of the same data.
struct HostStep {
  int32_t num_tokens = 0, num_blocks = 0, max_query_len = 0, max_context_len = 0;
  std::vector<int32_t> query_start{0}, context_lens, block_indptr{0}, block_indices;
  std::vector<int64_t> slot_mapping;
  std::vector<std::vector<double>> k_seq, v_seq;  // per seq [context][kv_heads][head_dim]
  std::vector<double> q;                          // [tokens][q_heads][head_dim]
  std::vector<unsigned char> q_raw, k_new, v_new, k_pool, v_pool;
};

double rounded(DType t, double x) {
  unsigned char buf[4];
  store_elem(t, buf, 0, x);
  return load_elem(t, buf, 0);
}

void build_tables(const StepCase &c, Rng &rng, HostStep &h) {
  for (const SeqSpec &s : c.seqs) {
    h.num_blocks += (s.context_len + c.block_size - 1) / c.block_size;
    h.num_tokens += s.query_len;
    h.query_start.push_back(h.num_tokens);
    h.context_lens.push_back(s.context_len);
    h.max_query_len = std::max(h.max_query_len, s.query_len);
    h.max_context_len = std::max(h.max_context_len, s.context_len);
  }
  h.num_blocks += 3;  // spare blocks stay NaN: reading one shows
  std::vector<int32_t> ids(h.num_blocks);
  for (int32_t i = 0; i < h.num_blocks; ++i) ids[i] = i;
  for (size_t i = ids.size(); i > 1; --i) std::swap(ids[i - 1], ids[rng.below(uint32_t(i))]);
  size_t next = 0;
  for (const SeqSpec &s : c.seqs) {
    for (int32_t b = 0; b < (s.context_len + c.block_size - 1) / c.block_size; ++b)
      h.block_indices.push_back(ids[next++]);
    h.block_indptr.push_back(int32_t(h.block_indices.size()));
  }
}

void fill_data(const StepCase &c, Rng &rng, HostStep &h) {
  const DType t = c.dtype;
  const size_t eb = pkv::cuda::dtype_bytes(t), row = size_t(c.kv_heads) * c.head_dim;
  const size_t q_row = row * c.group;
  h.k_pool.assign(size_t(h.num_blocks) * c.block_size * row * eb, 0xFF);
  h.v_pool.assign(h.k_pool.size(), 0xFF);
  h.k_new.resize(size_t(h.num_tokens) * row * eb);
  h.v_new.resize(h.k_new.size());
  h.q.resize(size_t(h.num_tokens) * q_row);
  h.q_raw.resize(h.q.size() * eb);
  for (size_t i = 0; i < h.q.size(); ++i) {
    store_elem(t, h.q_raw.data(), i, rng.uniform(-2, 2));
    h.q[i] = load_elem(t, h.q_raw.data(), i);
  }
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    const int32_t ctx = c.seqs[s].context_len, first_new = ctx - c.seqs[s].query_len;
    std::vector<double> k(size_t(ctx) * row), v(k.size());
    for (int32_t pos = 0; pos < ctx; ++pos) {
      const int32_t blk = h.block_indices[h.block_indptr[s] + pos / c.block_size];
      const int64_t slot = int64_t(blk) * c.block_size + pos % c.block_size;
      const bool is_new = pos >= first_new;
      const int32_t token = h.query_start[s] + pos - first_new;
      if (is_new) h.slot_mapping.push_back(slot);
      for (size_t e = 0; e < row; ++e) {
        const size_t i = size_t(pos) * row + e;
        k[i] = rounded(t, rng.uniform(-1, 1));
        v[i] = rounded(t, rng.uniform(-1, 1));
        const size_t dst = is_new ? size_t(token) * row + e : size_t(slot) * row + e;
        store_elem(t, is_new ? h.k_new.data() : h.k_pool.data(), dst, k[i]);
        store_elem(t, is_new ? h.v_new.data() : h.v_pool.data(), dst, v[i]);
      }
    }
    h.k_seq.push_back(std::move(k));
    h.v_seq.push_back(std::move(v));
  }
}

std::vector<double> reference(const StepCase &c, const HostStep &h) {
  const uint32_t q_heads = uint32_t(c.kv_heads * c.group);
  const size_t q_row = size_t(q_heads) * c.head_dim;
  std::vector<double> ref(h.q.size());
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    const size_t off = size_t(h.query_start[s]) * q_row;
    pkv_ref_attention(h.q.data() + off, h.k_seq[s].data(), h.v_seq[s].data(), ref.data() + off,
                      uint32_t(c.seqs[s].query_len), uint32_t(c.seqs[s].context_len), q_heads,
                      uint32_t(c.kv_heads), uint32_t(c.head_dim), 0.0);
  }
  return ref;
}

template <class T>
void upload_vec(DevBuf &b, const std::vector<T> &v) {
  b.upload(v.data(), v.size() * sizeof(T));
}

std::string describe(const StepCase &c) {
  std::string s = std::string(dtype_name(c.dtype)) + " bs=" + std::to_string(c.block_size) +
                  " kvh=" + std::to_string(c.kv_heads) + " group=" + std::to_string(c.group) +
                  " d=" + std::to_string(c.head_dim) + " seqs(ctx/q)=";
  for (const SeqSpec &q : c.seqs)
    s += std::to_string(q.context_len) + "/" + std::to_string(q.query_len) + " ";
  return s;
}

}  // namespace

bool run_step(const StepCase &c, uint64_t seed) {
  Rng rng(seed);
  HostStep h;
  build_tables(c, rng, h);
  fill_data(c, rng, h);
  const int32_t q_heads = c.kv_heads * c.group, ns = int32_t(c.seqs.size());
  DevBuf qs(4 * h.query_start.size()), cl(4 * h.context_lens.size()), ip(4 * h.block_indptr.size());
  DevBuf bi(4 * h.block_indices.size()), sm(8 * h.slot_mapping.size());
  DevBuf q(h.q_raw.size()), kn(h.k_new.size()), vn(h.v_new.size()), out(h.q_raw.size());
  DevBuf kp(h.k_pool.size()), vp(h.v_pool.size());
  upload_vec(qs, h.query_start), upload_vec(cl, h.context_lens), upload_vec(ip, h.block_indptr);
  upload_vec(bi, h.block_indices), upload_vec(sm, h.slot_mapping), upload_vec(q, h.q_raw);
  upload_vec(kn, h.k_new), upload_vec(vn, h.v_new), upload_vec(kp, h.k_pool),
      upload_vec(vp, h.v_pool);

  const pkv::cuda::KvLayer layer{kp.as<void>(), vp.as<void>(), c.block_size,
                                 c.kv_heads,    c.head_dim,    c.dtype};
  const pkv::cuda::BatchView batch{ns,
                                   h.num_tokens,
                                   h.max_query_len,
                                   h.max_context_len,
                                   qs.as<int32_t>(),
                                   cl.as<int32_t>(),
                                   ip.as<int32_t>(),
                                   bi.as<int32_t>()};
  const pkv::cuda::DecodePlan plan =
      c.split_tokens ? pkv::cuda::plan_decode_with_split(batch, q_heads, c.head_dim, c.split_tokens)
                     : pkv::cuda::plan_decode(batch, q_heads, c.kv_heads, c.head_dim, 132);
  DevBuf ws(plan.workspace_bytes);
  check_cuda(pkv::cuda::launch_write_kv(layer, kn.as<void>(), vn.as<void>(), sm.as<int64_t>(),
                                        h.num_tokens, nullptr),
             "launch_write_kv");
  check_cuda(pkv::cuda::launch_decode_attention(layer, batch, q.as<void>(), out.as<void>(), q_heads,
                                                1.f / std::sqrt(float(c.head_dim)), plan, ws.as<void>(), nullptr),
             "launch_decode_attention");
  check_cuda(pkv::cuda::launch_prefill_attention(layer, batch, q.as<void>(), out.as<void>(),
                                                 q_heads, 1.f / std::sqrt(float(c.head_dim)), nullptr),
             "launch_prefill_attention");
  check_cuda(cudaDeviceSynchronize(), "sync");

  std::vector<unsigned char> got_raw(h.q_raw.size());
  out.download(got_raw.data(), got_raw.size());
  std::vector<double> got(h.q.size());
  for (size_t i = 0; i < got.size(); ++i) got[i] = load_elem(c.dtype, got_raw.data(), i);
  double atol, rtol;
  tolerances(c.dtype, &atol, &rtol);
  const std::string label = describe(c) + "split=" + std::to_string(plan.split_tokens);
  size_t bad =
      pkv_ref_compare(label.c_str(), got.data(), reference(c, h).data(), got.size(), atol, rtol);

  // write_kv put the new rows where the slot mapping says, and nothing else moved.
  std::vector<unsigned char> pool(h.k_pool.size());
  const size_t row_bytes = size_t(c.kv_heads) * c.head_dim * pkv::cuda::dtype_bytes(c.dtype);
  pkv_ref_write_kv(h.k_new.data(), h.v_new.data(), h.k_pool.data(), h.v_pool.data(),
                   h.slot_mapping.data(), uint32_t(h.num_tokens), row_bytes);
  kp.download(pool.data(), pool.size());
  bool pool_ok = pool == h.k_pool;
  vp.download(pool.data(), pool.size());
  pool_ok = pool_ok && pool == h.v_pool;
  if (!pool_ok) fprintf(stderr, "%s: KV pool differs after write_kv\n", label.c_str());
  return bad == 0 && pool_ok;
}

int run_cases(const char *name, const std::vector<StepCase> &cases) {
  if (int skip = require_device()) return skip;
  const bool refused = check_refused_launches();
  int failures = 0;
  uint64_t seed = 1;
  for (const StepCase &c : cases) failures += !run_step(c, seed++);
  printf("%s: %d of %zu cases passed%s\n", name, int(cases.size()) - failures, cases.size(),
         refused ? "" : "; a bad launch was not refused");
  return failures || !refused ? 1 : 0;
}

}  // namespace kvtest
