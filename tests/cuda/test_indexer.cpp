// kernels/indexer.cu against the fp64 reference (tests/common/indexer_ref.h): launch_indexer_write
// of every token of a step's sequences into shuffled pages (other bytes around the keys, which
// must stay as they were), the pages checked byte for byte against pkv_ref_indexer_quantize_fp8 /
// pkv_ref_bf16_bits; then launch_indexer_topk of the new tokens, each row equal to pkv_ref_topk
// over pkv_ref_indexer_score of the keys the pages hold, as positions and as slots. The keys are
// small integers with a largest magnitude of 7 (an fp8 scale of exactly 2^-6; ue8m0: 4 .. 7,
// rounded up to it), some all zeros (scale 1), queries and weights small integers times powers
// of two: every fp32 sum is exact, so the sets must be equal, and the many ties must break as
// pkv.h says. Cases: f32, f16 and bf16 models, fp8 (with and without ue8m0) and bf16 caches,
// dims 32 .. 256, 2 .. 72 heads (more than the score kernel stages at once), block sizes 1, 5
// and 16, contexts over several score splits, top-k above and below the context, NaN keys
// (ranked last), several waves of tokens; then refused launches.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "indexer.cuh"
#include "indexer_ref.h"
#include "kv_harness.h"

namespace {

using namespace kvtest;
using pkv::cuda::IndexerLayer;

struct Case {
  DType dtype, index_dtype;
  bool ue8m0;
  int32_t dim, heads, topk, block_size;
  std::vector<SeqSpec> seqs;
  bool nan_keys = false;           // some cached keys' codes become NaN's
  size_t max_workspace = 1 << 30;  // small: several waves
};

std::string describe(const Case &c) {
  std::string s = std::string(dtype_name(c.dtype)) + "/" + dtype_name(c.index_dtype) +
                  (c.ue8m0 ? " ue8m0" : "") + " dim=" + std::to_string(c.dim) +
                  " heads=" + std::to_string(c.heads) + " topk=" + std::to_string(c.topk) +
                  " bs=" + std::to_string(c.block_size);
  return s + (c.nan_keys ? " nan" : "");
}

// The step's layout on the host: each sequence's shuffled blocks, every token's slot.
struct Step {
  std::vector<int32_t> query_start{0}, ctx, indptr{0}, blocks;
  std::vector<int64_t> all_slots;  // every token of every sequence, in order
  int32_t num_blocks = 0, num_tokens = 0, max_query = 0, max_ctx = 0;
};

Step make_step(const Case &c, Rng &rng) {
  Step s;
  for (const SeqSpec &q : c.seqs) s.num_blocks += (q.context_len + c.block_size - 1) / c.block_size;
  s.num_blocks += 3;  // blocks no sequence holds
  std::vector<int32_t> ids(static_cast<size_t>(s.num_blocks));
  for (int32_t i = 0; i < s.num_blocks; ++i) ids[size_t(i)] = i;
  for (size_t i = ids.size(); i > 1; --i) std::swap(ids[i - 1], ids[rng.below(uint32_t(i))]);
  size_t next = 0;
  for (const SeqSpec &q : c.seqs) {
    const int32_t first = int32_t(s.blocks.size());
    for (int32_t b = 0; b * c.block_size < q.context_len; ++b) s.blocks.push_back(ids[next++]);
    for (int32_t p = 0; p < q.context_len; ++p)
      s.all_slots.push_back(int64_t(s.blocks[size_t(first + p / c.block_size)]) * c.block_size +
                            p % c.block_size);
    s.query_start.push_back(s.query_start.back() + q.query_len);
    s.ctx.push_back(q.context_len);
    s.indptr.push_back(int32_t(s.blocks.size()));
    s.max_query = std::max(s.max_query, q.query_len),
    s.max_ctx = std::max(s.max_ctx, q.context_len);
  }
  s.num_tokens = s.query_start.back();
  return s;
}

// Key values: integers whose largest magnitude is 7 (an fp8 scale of 2^-6 exactly); with ue8m0
// 4 .. 7 (amax / 448 rounds up to 2^-6: the rounding is exercised, the codes stay exact). Every
// eleventh key is zeros (scale 1, score 0: ties).
std::vector<double> make_keys(const Case &c, size_t tokens, Rng &rng) {
  std::vector<double> k(tokens * size_t(c.dim));
  for (size_t t = 0; t < tokens; ++t) {
    if (t % 11 == 5) continue;
    const int amax = c.ue8m0 ? 4 + int(rng.below(4)) : 7;
    for (int32_t i = 0; i < c.dim; ++i)
      k[t * c.dim + i] = double(int(rng.below(uint32_t(2 * amax + 1))) - amax);
    k[t * c.dim + rng.below(uint32_t(c.dim))] = rng.below(2) ? amax : -amax;
  }
  return k;
}

// The page bytes: other data (0xA5) around the layer's keys and scales, a 16-byte multiple.
IndexerLayer page_layout(const Case &c) {
  const bool fp8 = c.index_dtype == DType::fp8_e4m3;
  const int64_t key_bytes = int64_t(c.dim) * (fp8 ? 1 : 2), bs = c.block_size;
  IndexerLayer l{};
  l.key_offset = 48;
  l.scale_offset = l.key_offset + bs * key_bytes;
  const int64_t end = l.scale_offset + (fp8 ? 4 * bs : 0) + 24;
  l.block_stride = (end + 15) / 16 * 16;
  l.block_size = c.block_size, l.dim = c.dim, l.dtype = c.dtype, l.index_dtype = c.index_dtype;
  return l;
}

// The pages as launch_indexer_write must leave them, from the keys' values.
std::vector<unsigned char> expected_pages(const Case &c, const IndexerLayer &l, const Step &s,
                                          const std::vector<double> &keys, size_t bytes) {
  std::vector<unsigned char> pages(bytes, 0xA5);
  std::vector<float> x(static_cast<size_t>(c.dim));
  for (size_t t = 0; t < s.all_slots.size(); ++t) {
    const int64_t slot = s.all_slots[t];
    unsigned char *page = pages.data() + slot / c.block_size * l.block_stride;
    const int64_t off = slot % c.block_size;
    for (int32_t i = 0; i < c.dim; ++i) x[size_t(i)] = float(keys[t * c.dim + i]);
    if (c.index_dtype == DType::bf16) {
      for (int32_t i = 0; i < c.dim; ++i) {
        const uint16_t b = pkv_ref_bf16_bits(x[size_t(i)]);
        std::memcpy(page + l.key_offset + (off * c.dim + i) * 2, &b, 2);
      }
      continue;
    }
    float scale;
    pkv_ref_indexer_quantize_fp8(x.data(), uint32_t(c.dim), c.ue8m0,
                                 page + l.key_offset + off * c.dim, &scale);
    std::memcpy(page + l.scale_offset + off * 4, &scale, 4);
  }
  return pages;
}

// Key `slot` of the pages, as the reference reads it.
std::vector<double> read_key(const Case &c, const IndexerLayer &l,
                             const std::vector<unsigned char> &pages, int64_t slot) {
  std::vector<double> key(static_cast<size_t>(c.dim));
  const unsigned char *page = pages.data() + slot / c.block_size * l.block_stride;
  const int64_t off = slot % c.block_size;
  if (c.index_dtype == DType::bf16) {
    std::vector<uint16_t> bits(static_cast<size_t>(c.dim));
    std::memcpy(bits.data(), page + l.key_offset + off * c.dim * 2, bits.size() * 2);
    pkv_ref_indexer_key_bf16(bits.data(), uint32_t(c.dim), key.data());
  } else {
    float scale;
    std::memcpy(&scale, page + l.scale_offset + off * 4, 4);
    pkv_ref_indexer_key_fp8(page + l.key_offset + off * c.dim, scale, uint32_t(c.dim), key.data());
  }
  return key;
}

// A device copy of a host vector (16 bytes at least).
struct DevVec : DevBuf {
  template <class T>
  explicit DevVec(const std::vector<T> &v) : DevBuf(std::max<size_t>(v.size() * sizeof(T), 16)) {
    if (!v.empty()) upload(v.data(), v.size() * sizeof(T));
  }
};

// The new tokens' rows: the kernel's (positions, then slots) against the reference's.
size_t check_topk(const Case &c, const IndexerLayer &l, const Step &s,
                  const std::vector<unsigned char> &pages, const std::vector<double> &q,
                  const std::vector<double> &w, const std::vector<int32_t> &got, bool slots) {
  size_t bad = 0, seq_first = 0;
  for (size_t i = 0; i < c.seqs.size(); ++i) {
    const int32_t n_ctx = s.ctx[i], first = n_ctx - c.seqs[i].query_len;
    std::vector<double> scores(static_cast<size_t>(n_ctx));
    for (int32_t j = 0; j < c.seqs[i].query_len; ++j) {
      const int32_t t = s.query_start[i] + j, pos = first + j;
      for (int32_t p = 0; p <= pos; ++p) {
        const std::vector<double> key = read_key(c, l, pages, s.all_slots[seq_first + size_t(p)]);
        scores[size_t(p)] = pkv_ref_indexer_score(q.data() + size_t(t) * c.heads * c.dim,
                                                  w.data() + size_t(t) * c.heads, key.data(),
                                                  uint32_t(c.heads), uint32_t(c.dim));
      }
      std::vector<int32_t> ref(static_cast<size_t>(c.topk));
      pkv_ref_topk(scores.data(), uint32_t(pos + 1), uint32_t(c.topk), ref.data());
      if (slots)
        pkv_ref_positions_to_slots(ref.data(), uint32_t(c.topk), s.blocks.data() + s.indptr[i],
                                   uint32_t(c.block_size), ref.data());
      const int32_t *row = got.data() + size_t(t) * c.topk;
      for (int32_t e = 0; e < c.topk; ++e)
        if (row[e] != ref[size_t(e)] && bad++ < 10)
          fprintf(stderr, "FAIL %s %s: token %d (pos %d) entry %d: %d, want %d\n",
                  describe(c).c_str(), slots ? "slots" : "positions", t, pos, e, row[e],
                  ref[size_t(e)]);
    }
    seq_first += size_t(n_ctx);
  }
  return bad;
}

bool run_case(const Case &c, uint64_t seed) {
  Rng rng(seed);
  const Step s = make_step(c, rng);
  IndexerLayer l = page_layout(c);
  const size_t pool_bytes = size_t(s.num_blocks) * size_t(l.block_stride);
  DevBuf pool(pool_bytes);
  std::vector<unsigned char> pages(pool_bytes, 0xA5);
  pool.upload(pages.data(), pool_bytes);
  l.pages = pool.as<void>();
  // Every token's key through the write kernel, then the pages compared byte for byte.
  const std::vector<double> keys = make_keys(c, s.all_slots.size(), rng);
  const size_t eb = pkv::cuda::dtype_bytes(c.dtype);
  std::vector<unsigned char> kraw(keys.size() * eb);
  for (size_t i = 0; i < keys.size(); ++i) store_elem(c.dtype, kraw.data(), i, keys[i]);
  DevVec dk(kraw), dslots(s.all_slots);
  check_cuda(pkv::cuda::launch_indexer_write(l, dk.as<void>(), dslots.as<int64_t>(),
                                             int32_t(s.all_slots.size()), c.ue8m0, nullptr),
             "launch_indexer_write");
  pool.download(pages.data(), pool_bytes);
  const std::vector<unsigned char> want = expected_pages(c, l, s, keys, pool_bytes);
  size_t bad = 0;
  for (size_t i = 0; i < pool_bytes; ++i)
    if (pages[i] != want[i] && bad++ < 10)
      fprintf(stderr, "FAIL %s: page byte %zu is 0x%02x, want 0x%02x\n", describe(c).c_str(), i,
              pages[i], want[i]);
  if (c.nan_keys) {  // every seventh slot's first code a NaN: its scores NaN, ranked last
    for (size_t t = 0; t < s.all_slots.size(); t += 7)
      pages[s.all_slots[t] / c.block_size * l.block_stride + l.key_offset +
            s.all_slots[t] % c.block_size * c.dim] = 0x7F;
    pool.upload(pages.data(), pool_bytes);
  }
  // The new tokens' queries and weights: q in -3 .. 3, weights in -1 .. 3 quarters.
  std::vector<double> q(size_t(s.num_tokens) * c.heads * c.dim), w(size_t(s.num_tokens) * c.heads);
  std::vector<unsigned char> qraw(q.size() * eb);
  for (size_t i = 0; i < q.size(); ++i) {
    q[i] = double(int(rng.below(7)) - 3);
    store_elem(c.dtype, qraw.data(), i, q[i]);
  }
  std::vector<float> wf(w.size());
  for (size_t i = 0; i < w.size(); ++i) w[i] = wf[i] = float(int(rng.below(5)) - 1) * 0.25f;
  DevVec dq(qraw), dw(wf), dqs(s.query_start), dctx(s.ctx), dptr(s.indptr), dblocks(s.blocks);
  const pkv::cuda::BatchView batch{
      int32_t(c.seqs.size()), s.num_tokens,       s.max_query,        s.max_ctx,
      dqs.as<int32_t>(),      dctx.as<int32_t>(), dptr.as<int32_t>(), dblocks.as<int32_t>()};
  const pkv::cuda::IndexerTopkPlan plan = pkv::cuda::plan_indexer_topk(batch, c.max_workspace);
  DevBuf ws(plan.workspace_bytes), dout(size_t(s.num_tokens) * c.topk * 4);
  std::vector<int32_t> got(size_t(s.num_tokens) * c.topk);
  for (bool slots : {false, true}) {
    check_cuda(
        pkv::cuda::launch_indexer_topk(l, batch, dq.as<void>(), dw.as<float>(), c.heads, c.topk,
                                       slots, dout.as<int32_t>(), plan, ws.as<void>(), nullptr),
        "launch_indexer_topk");
    dout.download(got.data(), got.size() * 4);
    bad += check_topk(c, l, s, pages, q, w, got, slots);
  }
  if (!bad)
    printf("ok %s (%d tokens, waves of %d)\n", describe(c).c_str(), s.num_tokens, plan.wave_tokens);
  return bad == 0;
}

// Launches both launchers must refuse (cudaErrorInvalidValue) before any work, and the limits
// they must take: pkv.h's index_head_dim rules, the page offsets' alignment (an odd block size's
// fp8 scales put the next layer's keys off 16 bytes), the dtypes, q's alignment, heads, top-k.
bool check_refused_indexer_launches() {
  struct Try {
    const char *what;
    bool ok;
    IndexerLayer l;
    size_t q_offset = 0;
    int32_t heads = 4, topk = 8;
  };
  const Case base{DType::bf16, DType::fp8_e4m3, false, 64, 4, 8, 16, {{40, 1}}};
  Rng rng(5);
  const Step s = make_step(base, rng);
  DevBuf pool(1 << 16), dq(4096), dw(256), dout(256), ws(1 << 12);
  DevVec dslots(s.all_slots);
  DevVec dqs(s.query_start), dctx(s.ctx), dptr(s.indptr), dblocks(s.blocks);
  const pkv::cuda::BatchView batch{1,
                                   1,
                                   1,
                                   40,
                                   dqs.as<int32_t>(),
                                   dctx.as<int32_t>(),
                                   dptr.as<int32_t>(),
                                   dblocks.as<int32_t>()};
  IndexerLayer good = page_layout(base);
  good.pages = pool.as<void>();
  std::vector<Try> tries(11, Try{"the layout of the test", true, good});
  tries[1].what = "index_head_dim = PKV_INDEXER_MAX_HEAD_DIM", tries[1].l.dim = 256;
  tries[2].what = "index_head_dim past PKV_INDEXER_MAX_HEAD_DIM", tries[2].ok = false,
  tries[2].l.dim = 264;
  tries[3].what = "index_head_dim not a multiple of 8", tries[3].ok = false, tries[3].l.dim = 60;
  tries[4].what = "keys 8 bytes off 16", tries[4].ok = false, tries[4].l.key_offset += 8;
  tries[5].what = "a block stride 4 bytes off 16", tries[5].ok = false,
  tries[5].l.block_stride += 4;
  tries[6].what = "an f16 indexer cache", tries[6].ok = false, tries[6].l.index_dtype = DType::f16;
  tries[7].what = "an fp8 model dtype", tries[7].ok = false, tries[7].l.dtype = DType::fp8_e4m3;
  tries[8].what = "q 8 bytes off 16", tries[8].ok = false, tries[8].q_offset = 8;
  tries[9].what = "0 heads", tries[9].ok = false, tries[9].heads = 0;
  tries[10].what = "a top-k of 0", tries[10].ok = false, tries[10].topk = 0;
  const pkv::cuda::IndexerTopkPlan plan = pkv::cuda::plan_indexer_topk(batch, 1 << 12);
  bool all = true;
  for (const Try &t : tries) {
    const bool write_only = t.q_offset || t.heads != 4 || t.topk != 8;
    const cudaError_t w = write_only
                              ? (t.ok ? cudaSuccess : cudaErrorInvalidValue)
                              : pkv::cuda::launch_indexer_write(
                                    t.l, dq.as<char>(), dslots.as<int64_t>(), 1, false, nullptr);
    const cudaError_t k = pkv::cuda::launch_indexer_topk(
        t.l, batch, dq.as<char>() + t.q_offset, dw.as<float>(), t.heads, t.topk, false,
        dout.as<int32_t>(), plan, ws.as<void>(), nullptr);
    for (cudaError_t e : {w, k})
      if ((e == cudaSuccess) != t.ok) {
        fprintf(stderr, "FAIL refused indexer launch, %s: got %s\n", t.what, cudaGetErrorString(e));
        all = false;
      }
  }
  check_cuda(cudaDeviceSynchronize(), "the accepted launches");
  return all;
}

}  // namespace

int main() {
  if (int skip = require_device()) return skip;
  const DType f32 = DType::f32, f16 = DType::f16, bf16 = DType::bf16, e4m3 = DType::fp8_e4m3;
  const std::vector<SeqSpec> mixed = {{600, 1}, {40, 1}, {70, 9}, {5, 5}};
  std::vector<Case> cases = {
      {bf16, e4m3, false, 128, 8, 64, 16, mixed},
      {f16, e4m3, true, 64, 4, 32, 5, mixed},
      {f32, e4m3, false, 32, 3, 16, 1, {{300, 1}, {20, 20}}},
      {bf16, bf16, false, 64, 4, 48, 16, mixed},
      {f32, bf16, false, 32, 2, 8, 5, {{90, 3}, {8, 1}}},
      // More heads than one staging of q (64 at once: 72 = 64 + 8), the widest key.
      {bf16, e4m3, true, 256, 72, 24, 16, {{280, 1}, {30, 2}}},
      // A top-k of 1, NaN keys, waves of 3 tokens.
      {f16, e4m3, false, 32, 2, 1, 16, {{100, 4}, {1, 1}}, true, 3 * 100 * 4},
      {bf16, e4m3, false, 64, 4, 40, 5, mixed, true, 2 * 600 * 4},
  };
  bool ok = check_refused_indexer_launches();
  for (size_t i = 0; i < cases.size(); ++i) ok = run_case(cases[i], 100 + i) && ok;
  printf(ok ? "indexer: all passed\n" : "indexer: FAILED\n");
  return ok ? 0 : 1;
}
