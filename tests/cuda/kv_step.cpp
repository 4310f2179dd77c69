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

bool fp8(const StepCase &c) { return pkv::cuda::is_fp8(c.kv_dtype); }
DType pool_dtype(const StepCase &c) { return fp8(c) ? c.kv_dtype : c.dtype; }
size_t pool_elem_bytes(const StepCase &c) { return pkv::cuda::dtype_bytes(pool_dtype(c)); }
bool mla(const StepCase &c) { return c.mla_rank > 0; }
// A pool of K alone: MLA's latents, or a layer whose V is its K.
bool no_v(const StepCase &c) { return mla(c) || c.k_eq_v; }
// Keys a token sees at most (plan_decode's window): the chunk or the window, 0 = all.
int32_t span(const StepCase &c) { return c.chunk ? c.chunk : c.window; }
size_t page_layers(const StepCase &c) { return c.page_layers > 0 ? size_t(c.page_layers) : 1; }
// Element e of slot's row in the layer's pool: blocks of block_size rows, each the last block of
// a page of page_layers (dense: pages of one block).
size_t pool_elem(const StepCase &c, int64_t slot, size_t e) {
  const size_t row = size_t(c.kv_heads) * c.head_dim, block = row * c.block_size;
  return size_t(slot / c.block_size) * block * page_layers(c) + (page_layers(c) - 1) * block +
         size_t(slot % c.block_size) * row + e;
}
// Values a head of out holds: kv_lora_rank for MLA, else head_dim.
size_t out_dim(const StepCase &c) { return size_t(mla(c) ? c.mla_rank : c.head_dim); }
float softmax_scale(const StepCase &c) {
  return (mla(c) ? 1.5f : 1.f) / std::sqrt(float(c.head_dim));
}

// The batch on the host: the context each sequence's new tokens see (from its first block the
// window keeps, rounded to the dtype or decoded from its fp8 code, so the reference sees exactly
// what the kernels see) and the paged form of the same data.
struct HostStep {
  int32_t num_tokens = 0, num_blocks = 0, max_query_len = 0, max_context_len = 0;
  std::vector<int32_t> query_start{0}, context_lens, block_indptr{0}, block_indices;
  std::vector<int32_t> kept_from;  // per seq: the first position in a kept block
  std::vector<int64_t> slot_mapping;
  std::vector<float> k_scale, v_scale;  // fp8: [kv_heads]
  std::vector<float> sinks;             // [q_heads] when c.sinks
  std::vector<std::vector<double>> k_seq,
      v_seq;              // per seq [context - kept_from][kv_heads][head_dim]
                          // (MLA: v_seq, v_new, v_pool empty)
  std::vector<double> q;  // [tokens][q_heads][head_dim]
  std::vector<unsigned char> q_raw, k_new, v_new, k_pool, v_pool;
};

double rounded(DType t, double x) {
  unsigned char buf[4];
  store_elem(t, buf, 0, x);
  return load_elem(t, buf, 0);
}

// The first position whose block a windowed (chunked) table keeps: the block of the first new
// token's window (chunk) start (pkv's windowed and chunked KV groups give back the blocks before).
int32_t first_kept(const StepCase &c, const SeqSpec &s) {
  const int32_t first_new = s.context_len - s.query_len;
  int32_t start = c.window && first_new >= c.window ? first_new - c.window + 1 : 0;
  if (c.chunk) start = first_new - first_new % c.chunk;
  return start / c.block_size * c.block_size;
}

void build_tables(const StepCase &c, Rng &rng, HostStep &h) {
  for (const SeqSpec &s : c.seqs) {
    h.kept_from.push_back(first_kept(c, s));
    h.num_blocks += (s.context_len - h.kept_from.back() + c.block_size - 1) / c.block_size;
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
  for (size_t i = 0; i < c.seqs.size(); ++i) {
    for (int32_t b = 0; b < (c.seqs[i].context_len + c.block_size - 1) / c.block_size; ++b)
      h.block_indices.push_back(b * c.block_size < h.kept_from[i] ? -1 : ids[next++]);
    h.block_indptr.push_back(int32_t(h.block_indices.size()));
  }
}

// Element e of a row (head e / head_dim), drawn: in [-1, 1) of the dtype, or for fp8 the
// head's scale times U(-span, span) in the dtype.
double draw(const StepCase &c, Rng &rng, const std::vector<float> &scales, size_t e) {
  if (!fp8(c)) return rounded(c.dtype, rng.uniform(-1, 1));
  return rounded(c.dtype, scales[e / c.head_dim] * rng.uniform(-c.fp8_span, c.fp8_span));
}

// The value the kernels read back for x stored under `scale`: x itself, or its fp8 code's value
// times the scale. code: where the code goes (fp8 only).
double stored(const StepCase &c, double x, float scale, unsigned char *code) {
  if (!fp8(c)) return x;
  const int e5m2 = c.kv_dtype == DType::fp8_e5m2;
  *code = pkv_ref_fp8_encode(float(x), scale, e5m2);
  return pkv_ref_fp8_decode(*code, e5m2) * double(scale);
}

void fill_data(const StepCase &c, Rng &rng, HostStep &h) {
  const DType t = c.dtype;
  const size_t eb = pkv::cuda::dtype_bytes(t), pb = pkv::cuda::dtype_bytes(pool_dtype(c));
  const size_t row = size_t(c.kv_heads) * c.head_dim, q_row = row * c.group;
  for (int32_t hd = 0; fp8(c) && hd < c.kv_heads; ++hd) {
    h.k_scale.push_back(float(c.fp8_scale * rng.uniform(0.5, 2)));
    h.v_scale.push_back(float(c.fp8_scale * rng.uniform(0.5, 2)));
  }
  h.k_pool.assign(size_t(h.num_blocks) * page_layers(c) * c.block_size * row * pb, 0xFF);
  h.k_new.resize(size_t(h.num_tokens) * row * eb);
  if (!no_v(c)) h.v_pool.assign(h.k_pool.size(), 0xFF), h.v_new.resize(h.k_new.size());
  for (size_t i = 0; c.sinks && i < q_row / c.head_dim; ++i)
    h.sinks.push_back(float(rng.uniform(-1, 3)));
  h.q.resize(size_t(h.num_tokens) * q_row);
  h.q_raw.resize(h.q.size() * eb);
  for (size_t i = 0; i < h.q.size(); ++i) {
    store_elem(t, h.q_raw.data(), i, rng.uniform(-2, 2));
    h.q[i] = load_elem(t, h.q_raw.data(), i);
  }
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    const int32_t ctx = c.seqs[s].context_len, first_new = ctx - c.seqs[s].query_len;
    const int32_t from = h.kept_from[s];
    std::vector<double> k(size_t(ctx - from) * row), v(no_v(c) ? 0 : k.size());
    for (int32_t pos = from; pos < ctx; ++pos) {
      const int32_t blk = h.block_indices[h.block_indptr[s] + pos / c.block_size];
      const int64_t slot = int64_t(blk) * c.block_size + pos % c.block_size;
      const bool is_new = pos >= first_new;
      const int32_t token = h.query_start[s] + pos - first_new;
      if (is_new) h.slot_mapping.push_back(slot);
      for (size_t e = 0; e < row; ++e) {
        const size_t i = size_t(pos - from) * row + e;
        for (int kv = 0; kv < (no_v(c) ? 1 : 2); ++kv) {
          const std::vector<float> &scales = kv ? h.v_scale : h.k_scale;
          std::vector<unsigned char> &pool = kv ? h.v_pool : h.k_pool;
          const double x = draw(c, rng, scales, e);
          unsigned char code = 0;
          (kv ? v : k)[i] = stored(c, x, fp8(c) ? scales[e / c.head_dim] : 1.f, &code);
          if (is_new)  // the model's dtype; write_kv stores it
            store_elem(t, (kv ? h.v_new : h.k_new).data(), size_t(token) * row + e, x);
          else if (fp8(c))  // the code, as write_kv would have left it
            pool[pool_elem(c, slot, e)] = code;
          else
            store_elem(t, pool.data(), pool_elem(c, slot, e), x);
        }
      }
    }
    h.k_seq.push_back(std::move(k));
    h.v_seq.push_back(std::move(v));
  }
}

// Each sequence's whole context from position 0 (chunks are absolute): the positions before its
// first kept block, which no new token sees, are zeros. A K = V layer passes no V.
std::vector<double> reference(const StepCase &c, const HostStep &h) {
  const uint32_t q_heads = uint32_t(c.kv_heads * c.group);
  const size_t q_row = size_t(q_heads) * c.head_dim, out_row = size_t(q_heads) * out_dim(c);
  const size_t row = size_t(c.kv_heads) * c.head_dim;
  std::vector<double> ref(size_t(h.num_tokens) * out_row), sinks(h.sinks.begin(), h.sinks.end());
  const pkv_ref_layer layer{q_heads,
                            uint32_t(c.kv_heads),
                            uint32_t(c.head_dim),
                            uint32_t(c.head_dim),
                            0.0,
                            uint32_t(c.window),
                            uint32_t(c.chunk),
                            double(c.softcap),
                            c.sinks ? sinks.data() : nullptr};
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    const size_t off = size_t(h.query_start[s]) * q_row;
    if (mla(c)) {
      pkv_ref_mla_attention(
          h.q.data() + off, h.k_seq[s].data(), ref.data() + size_t(h.query_start[s]) * out_row,
          uint32_t(c.seqs[s].query_len), uint32_t(c.seqs[s].context_len), q_heads,
          uint32_t(c.mla_rank), uint32_t(c.head_dim - c.mla_rank), double(softmax_scale(c)));
      continue;
    }
    const size_t skipped = size_t(h.kept_from[s]) * row;
    std::vector<double> k(skipped), v(c.k_eq_v ? 0 : skipped);
    k.insert(k.end(), h.k_seq[s].begin(), h.k_seq[s].end());
    v.insert(v.end(), h.v_seq[s].begin(), h.v_seq[s].end());
    pkv_ref_attention_layer(&layer, h.q.data() + off, k.data(), c.k_eq_v ? nullptr : v.data(),
                            ref.data() + off, uint32_t(c.seqs[s].query_len),
                            uint32_t(c.seqs[s].context_len));
  }
  return ref;
}

// The pool write_kv must leave: the new rows in their slots, as bytes or as the reference's
// fp8 codes of their elements under their heads' scales (MLA: K alone).
void expect_write_kv(const StepCase &c, HostStep &h) {
  const size_t row = size_t(c.kv_heads) * c.head_dim, eb = pkv::cuda::dtype_bytes(c.dtype);
  if (!fp8(c) && !no_v(c) && page_layers(c) == 1) {
    pkv_ref_write_kv(h.k_new.data(), h.v_new.data(), h.k_pool.data(), h.v_pool.data(),
                     h.slot_mapping.data(), uint32_t(h.num_tokens), row * eb);
    return;
  }
  const int e5m2 = c.kv_dtype == DType::fp8_e5m2;
  for (int32_t t = 0; t < h.num_tokens; ++t) {
    if (h.slot_mapping[t] < 0) continue;
    for (size_t e = 0; e < row; ++e) {
      const size_t dst = pool_elem(c, h.slot_mapping[t], e), src = size_t(t) * row + e;
      if (!fp8(c)) {
        memcpy(&h.k_pool[dst * eb], &h.k_new[src * eb], eb);
        if (!no_v(c)) memcpy(&h.v_pool[dst * eb], &h.v_new[src * eb], eb);
        continue;
      }
      const float kx = float(load_elem(c.dtype, h.k_new.data(), src));
      h.k_pool[dst] = pkv_ref_fp8_encode(kx, h.k_scale[e / c.head_dim], e5m2);
      if (no_v(c)) continue;
      const float vx = float(load_elem(c.dtype, h.v_new.data(), src));
      h.v_pool[dst] = pkv_ref_fp8_encode(vx, h.v_scale[e / c.head_dim], e5m2);
    }
  }
}

template <class T> void upload_vec(DevBuf &b, const std::vector<T> &v) {
  b.upload(v.data(), v.size() * sizeof(T));
}

std::string describe(const StepCase &c) {
  std::string s = std::string(dtype_name(c.dtype)) + " bs=" + std::to_string(c.block_size) +
                  " kvh=" + std::to_string(c.kv_heads) + " group=" + std::to_string(c.group) +
                  " d=" + std::to_string(c.head_dim);
  if (c.window) s += " window=" + std::to_string(c.window);
  if (c.chunk) s += " chunk=" + std::to_string(c.chunk);
  if (c.softcap > 0.f) s += " softcap=" + std::to_string(c.softcap);
  if (c.sinks) s += " sinks";
  if (c.k_eq_v) s += " k=v";
  if (c.page_layers) s += " page_layers=" + std::to_string(c.page_layers);
  if (mla(c))
    s += " mla rank=" + std::to_string(c.mla_rank) + " rg=" + std::to_string(c.row_groups);
  if (fp8(c))
    s += std::string(" kv=") + dtype_name(c.kv_dtype) + " span=" + std::to_string(c.fp8_span) +
         " scale~" + std::to_string(c.fp8_scale);
  s += " seqs(ctx/q)=";
  for (const SeqSpec &q : c.seqs)
    s += std::to_string(q.context_len) + "/" + std::to_string(q.query_len) + " ";
  return s;
}

// write_kv, then decode + prefill attention (or MLA's); returns the plan's split size.
int32_t launch_step(const StepCase &c, const pkv::cuda::KvLayer &layer,
                    const pkv::cuda::BatchView &batch, const HostStep &h, const DevBuf &kn,
                    const DevBuf &vn, const DevBuf &sm, const DevBuf &q, const DevBuf &out) {
  const int32_t q_heads = c.kv_heads * c.group;
  check_cuda(pkv::cuda::launch_write_kv(layer, kn.as<void>(), no_v(c) ? nullptr : vn.as<void>(),
                                        sm.as<int64_t>(), h.num_tokens, nullptr),
             "launch_write_kv");
  if (mla(c)) {
    // The device's opt-in shared memory picks the rows per CTA, as the CUDA backend's plan does
    // (the emulator's under SIMT_ARCH); splits as on 132 SMs, whatever the device.
    int max_smem = 0;
    check_cuda(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0),
               "cudaDeviceGetAttribute");
    pkv::cuda::MlaPlan plan =
        pkv::cuda::plan_mla(batch, q_heads, c.mla_rank, c.head_dim, 132, size_t(max_smem));
    if (c.split_tokens || c.row_groups)
      plan = pkv::cuda::plan_mla_with(batch, q_heads, c.mla_rank,
                                      c.split_tokens ? c.split_tokens : plan.split_tokens,
                                      c.row_groups ? c.row_groups : plan.row_groups);
    DevBuf ws(plan.workspace_bytes);
    check_cuda(
        pkv::cuda::launch_mla_attention(layer, c.mla_rank, batch, q.as<void>(), out.as<void>(),
                                        q_heads, softmax_scale(c), plan, ws.as<void>(), nullptr),
        "launch_mla_attention");
    check_cuda(cudaDeviceSynchronize(), "sync");
    return plan.split_tokens;
  }
  const pkv::cuda::DecodePlan plan =
      c.split_tokens
          ? pkv::cuda::plan_decode_with_split(batch, q_heads, c.head_dim, span(c), c.split_tokens)
          : pkv::cuda::plan_decode(batch, q_heads, c.kv_heads, c.head_dim, span(c), 132);
  DevBuf ws(plan.workspace_bytes);
  check_cuda(pkv::cuda::launch_decode_attention(layer, batch, q.as<void>(), out.as<void>(), q_heads,
                                                softmax_scale(c), plan, ws.as<void>(), nullptr),
             "launch_decode_attention");
  check_cuda(pkv::cuda::launch_prefill_attention(layer, batch, q.as<void>(), out.as<void>(),
                                                 q_heads, softmax_scale(c), nullptr),
             "launch_prefill_attention");
  check_cuda(cudaDeviceSynchronize(), "sync");
  return plan.split_tokens;
}

}  // namespace

bool run_step(const StepCase &c, uint64_t seed) {
  Rng rng(seed);
  HostStep h;
  build_tables(c, rng, h);
  fill_data(c, rng, h);
  const int32_t ns = int32_t(c.seqs.size());
  const size_t out_elems = size_t(h.num_tokens) * c.kv_heads * c.group * out_dim(c);
  const size_t out_bytes = out_elems * pkv::cuda::dtype_bytes(c.dtype);
  DevBuf qs(4 * h.query_start.size()), cl(4 * h.context_lens.size()), ip(4 * h.block_indptr.size());
  DevBuf bi(4 * h.block_indices.size()), sm(8 * h.slot_mapping.size());
  DevBuf q(h.q_raw.size()), kn(h.k_new.size()), vn(h.v_new.size()), out(out_bytes);
  DevBuf kp(h.k_pool.size()), vp(h.v_pool.size()), ks(4 * h.k_scale.size()),
      vs(4 * h.v_scale.size());
  upload_vec(qs, h.query_start), upload_vec(cl, h.context_lens), upload_vec(ip, h.block_indptr);
  upload_vec(bi, h.block_indices), upload_vec(sm, h.slot_mapping), upload_vec(q, h.q_raw);
  upload_vec(kn, h.k_new), upload_vec(vn, h.v_new), upload_vec(kp, h.k_pool),
      upload_vec(vp, h.v_pool);
  upload_vec(ks, h.k_scale), upload_vec(vs, h.v_scale);

  DevBuf sinks(4 * h.sinks.size());
  upload_vec(sinks, h.sinks);
  const size_t block_bytes = size_t(c.block_size) * c.kv_heads * c.head_dim * pool_elem_bytes(c);
  const size_t layer_at = (page_layers(c) - 1) * block_bytes;  // the page's last layer
  pkv::cuda::KvLayer layer{kp.as<char>() + layer_at,
                           no_v(c) ? nullptr : vp.as<char>() + layer_at,
                           c.block_size,
                           c.kv_heads,
                           c.head_dim,
                           c.dtype,
                           pool_dtype(c),
                           fp8(c) ? ks.as<float>() : nullptr,
                           fp8(c) && !no_v(c) ? vs.as<float>() : nullptr,
                           c.window};
  layer.block_stride = c.page_layers ? int64_t(page_layers(c) * block_bytes) : 0;
  layer.chunk = c.chunk, layer.softcap = c.softcap;
  layer.sinks = c.sinks ? sinks.as<float>() : nullptr;
  const pkv::cuda::BatchView batch{ns,
                                   h.num_tokens,
                                   h.max_query_len,
                                   h.max_context_len,
                                   qs.as<int32_t>(),
                                   cl.as<int32_t>(),
                                   ip.as<int32_t>(),
                                   bi.as<int32_t>()};
  const int32_t split = launch_step(c, layer, batch, h, kn, vn, sm, q, out);

  std::vector<unsigned char> got_raw(out_bytes);
  out.download(got_raw.data(), got_raw.size());
  std::vector<double> got(out_elems);
  for (size_t i = 0; i < got.size(); ++i) got[i] = load_elem(c.dtype, got_raw.data(), i);
  double atol, rtol;
  tolerances(c.dtype, &atol, &rtol);
  const std::string label = describe(c) + "split=" + std::to_string(split);
  size_t bad =
      pkv_ref_compare(label.c_str(), got.data(), reference(c, h).data(), got.size(), atol, rtol);

  // write_kv put the new rows where the slot mapping says, and nothing else moved.
  std::vector<unsigned char> pool(h.k_pool.size());
  expect_write_kv(c, h);
  kp.download(pool.data(), pool.size());
  bool pool_ok = pool == h.k_pool;
  pool.resize(h.v_pool.size());
  vp.download(pool.data(), pool.size());
  pool_ok = pool_ok && pool == h.v_pool;
  if (!pool_ok) fprintf(stderr, "%s: KV pool differs after write_kv\n", label.c_str());
  return bad == 0 && pool_ok;
}

int run_cases(const char *name, const std::vector<StepCase> &cases) {
  if (int skip = require_device()) return skip;
  bool refused = check_refused_launches();
  if (std::any_of(cases.begin(), cases.end(), mla))
    refused = check_refused_mla_launches() && refused;
  int failures = 0;
  uint64_t seed = 1;
  for (const StepCase &c : cases) failures += !run_step(c, seed++);
  printf("%s: %d of %zu cases passed%s\n", name, int(cases.size()) - failures, cases.size(),
         refused ? "" : "; a bad launch was not refused");
  return failures || !refused ? 1 : 0;
}

}  // namespace kvtest
