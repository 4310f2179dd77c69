#include "plan_wire.h"

#include <algorithm>
#include <cstring>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "backend/copy_kind.h"
#include "status.h"

namespace pkv {
namespace {

constexpr char kMagic[8] = {'P', 'K', 'V', 'P', 'L', 'A', 'N', '\0'};
constexpr uint32_t kVersion = 1;
// magic, version and header size, total size, checksum, step, the shape, the counts.
constexpr uint64_t kChecked = 32;  // the checksum covers the bytes from here on
constexpr uint64_t kShapeAt = 40;
constexpr uint64_t kCountsAt = kShapeAt + 8 * kPlanShapeFields;
enum : uint32_t {
  kSeqs,
  kTokens,
  kMaxBlocks,
  kMaxQuery,
  kMaxContext,
  kCopies,
  kBlockSize,
  kGroups,
  kIndices,
  kHasState,
  kCounts
};
constexpr uint64_t kHeaderBytes = kCountsAt + 4 * kCounts + 4;  // padded to 8

const char *const kFieldNames[kPlanShapeFields] = {"num_layers",
                                                   "num_q_heads",
                                                   "num_kv_heads",
                                                   "head_dim",
                                                   "dtype",
                                                   "kv_dtype",
                                                   "kv_layout",
                                                   "kv_lora_rank",
                                                   "qk_rope_head_dim",
                                                   "block_size",
                                                   "num_blocks",
                                                   "host_num_blocks",
                                                   "tp_size",
                                                   "pp_size",
                                                   "num_kv_groups",
                                                   "state slots",
                                                   "host state slots",
                                                   "max_num_seqs",
                                                   "layer specs and windows"};

uint64_t padded(uint64_t n) { return (n + 7) & ~uint64_t(7); }

class Writer {
 public:
  explicit Writer(std::vector<uint8_t> &out) : out_(out) {}
  template <class T> void put(const T *p, uint64_t n) {
    const size_t at = out_.size();
    out_.resize(at + padded(n * sizeof(T)), 0);
    if (n) std::memcpy(out_.data() + at, p, n * sizeof(T));
  }

 private:
  std::vector<uint8_t> &out_;
};

class Reader {
 public:
  Reader(const uint8_t *p, uint64_t len) : p_(p), len_(len), at_(kHeaderBytes) {}
  template <class T> std::vector<T> take(uint64_t n, const char *what) {
    const uint64_t bytes = n * sizeof(T);  // n is below 2^32 * 2^32: no overflow in u64 / 8
    if (n > (len_ - at_) / sizeof(T) || padded(bytes) > len_ - at_)
      fail(PKV_ERR_INVALID_ARGUMENT, "plan: its %s pass its end (%llu bytes)", what,
           (unsigned long long)len_);
    std::vector<T> v(n);
    if (n) std::memcpy(v.data(), p_ + at_, bytes);
    at_ += padded(bytes);
    return v;
  }
  uint64_t left() const { return len_ - at_; }

 private:
  const uint8_t *p_;
  uint64_t len_, at_;
};

template <class T> T load(const uint8_t *p, uint64_t at) {
  T v;
  std::memcpy(&v, p + at, sizeof v);
  return v;
}

// Every value of a lies in [lo, hi); else the plan is refused naming the array.
template <class T>
void require_range(const std::vector<T> &a, int64_t lo, int64_t hi, const char *what) {
  for (size_t i = 0; i < a.size(); ++i)
    if (int64_t(a[i]) < lo || int64_t(a[i]) >= hi)
      fail(PKV_ERR_INVALID_ARGUMENT, "plan: %s[%zu] is %lld, outside %lld .. %lld", what, i,
           (long long)a[i], (long long)lo, (long long)hi - 1);
}

}  // namespace

const char *plan_shape_field_name(uint32_t field) {
  return field < kPlanShapeFields ? kFieldNames[field] : "?";
}

std::vector<uint8_t> encode_plan(const pkv_batch_view &v, uint64_t step, const PlanShape &shape) {
  std::vector<uint8_t> out(kHeaderBytes, 0);
  std::memcpy(out.data(), kMagic, sizeof kMagic);
  const uint32_t version = kVersion, header = uint32_t(kHeaderBytes);
  std::memcpy(out.data() + 8, &version, 4);
  std::memcpy(out.data() + 12, &header, 4);
  std::memcpy(out.data() + 32, &step, 8);
  std::memcpy(out.data() + kShapeAt, shape.field, sizeof shape.field);
  const uint32_t n = v.num_seqs, t = v.num_tokens, mb = v.max_blocks_per_seq, g = v.num_kv_groups;
  const uint32_t indices = uint32_t(v.block_indptr[n]);
  const uint32_t counts[kCounts] = {n,
                                    t,
                                    mb,
                                    v.max_query_len,
                                    v.max_context_len,
                                    v.num_copies,
                                    v.block_size,
                                    g,
                                    indices,
                                    v.state_slots ? 1u : 0u};
  std::memcpy(out.data() + kCountsAt, counts, sizeof counts);
  Writer w(out);
  w.put(v.seq_ids, n);
  w.put(v.query_start, uint64_t(n) + 1);
  w.put(v.positions, t);
  w.put(v.slot_mapping, t);
  w.put(v.context_lens, n);
  w.put(v.block_indptr, uint64_t(n) + 1);
  w.put(v.block_indices, indices);
  w.put(v.last_block_len, n);
  w.put(v.copy_src, v.num_copies);
  w.put(v.copy_dst, v.num_copies);
  w.put(v.copy_kind, v.num_copies);
  w.put(v.sample_rows, n);
  if (v.state_slots) w.put(v.state_slots, n);
  if (g > 1) {
    w.put(v.group_slot_mapping, uint64_t(g) * t);
    w.put(v.group_block_tables, uint64_t(g) * n * mb);
  }
  const uint64_t total = out.size();
  std::memcpy(out.data() + 16, &total, 8);
  const uint64_t sum = XXH3_64bits(out.data() + kChecked, total - kChecked);
  std::memcpy(out.data() + 24, &sum, 8);
  return out;
}

ImportedPlan decode_plan(const void *bytes, uint64_t len, const PlanShape &shape) {
  const uint8_t *p = static_cast<const uint8_t *>(bytes);
  if (len < 16 || std::memcmp(p, kMagic, sizeof kMagic) != 0)
    fail(PKV_ERR_INVALID_ARGUMENT,
         "plan: these %llu bytes are not a pkv plan (pkv_batch_export_plan writes them)",
         (unsigned long long)len);
  const uint32_t version = load<uint32_t>(p, 8), header = load<uint32_t>(p, 12);
  if (version != kVersion || header != kHeaderBytes)
    fail(PKV_ERR_INVALID_ARGUMENT,
         "plan: version %u (a header of %u bytes); this library reads version %u: decider and "
         "pools must run the same pkv",
         version, header, kVersion);
  if (len < kHeaderBytes || load<uint64_t>(p, 16) != len)
    fail(PKV_ERR_INVALID_ARGUMENT, "plan: %llu bytes given, its header says %llu: cut or padded",
         (unsigned long long)len, (unsigned long long)(len < 24 ? 0 : load<uint64_t>(p, 16)));
  if (XXH3_64bits(p + kChecked, len - kChecked) != load<uint64_t>(p, 24))
    fail(PKV_ERR_INVALID_ARGUMENT, "plan: its checksum does not match: the bytes were damaged");
  for (uint32_t f = 0; f < kPlanShapeFields; ++f) {
    const uint64_t theirs = load<uint64_t>(p, kShapeAt + 8 * f);
    if (theirs != shape.field[f])
      fail(PKV_ERR_INVALID_ARGUMENT,
           "plan of another engine shape: its %s is %llu, this engine's %llu (a pool engine is "
           "created with its decider's parameters, num_blocks and host_num_blocks included)",
           kFieldNames[f], (unsigned long long)theirs, (unsigned long long)shape.field[f]);
  }
  uint32_t c[kCounts];
  std::memcpy(c, p + kCountsAt, sizeof c);
  ImportedPlan out;
  out.step = load<uint64_t>(p, 32);
  BatchArrays &a = out.arrays;
  const uint32_t n = c[kSeqs], t = c[kTokens], mb = c[kMaxBlocks], g = c[kGroups];
  PKV_REQUIRE(n >= 1 && c[kBlockSize] == shape.field[kShapeBlockSize] &&
                  g == shape.field[kShapeNumKvGroups] && c[kHasState] <= 1 &&
                  (c[kHasState] == 1) == (shape.field[kShapeNumStateSlots] > 0),
              "plan: its counts do not fit this engine (%u sequences, block size %u, %u groups)", n,
              c[kBlockSize], g);
  a.block_size = c[kBlockSize], a.num_groups = g, a.max_blocks_per_seq = mb;
  a.max_query_len = c[kMaxQuery], a.max_context_len = c[kMaxContext];
  Reader r(p, len);
  a.seq_ids = r.take<uint64_t>(n, "seq_ids");
  a.query_start = r.take<int32_t>(uint64_t(n) + 1, "query_start");
  a.positions = r.take<int32_t>(t, "positions");
  a.slot_mapping = r.take<int64_t>(t, "slot_mapping");
  a.context_lens = r.take<int32_t>(n, "context_lens");
  a.block_indptr = r.take<int32_t>(uint64_t(n) + 1, "block_indptr");
  a.block_indices = r.take<int32_t>(c[kIndices], "block_indices");
  a.last_block_len = r.take<int32_t>(n, "last_block_len");
  a.copy_src = r.take<int32_t>(c[kCopies], "copy_src");
  a.copy_dst = r.take<int32_t>(c[kCopies], "copy_dst");
  a.copy_kind = r.take<int32_t>(c[kCopies], "copy_kind");
  a.sample_rows = r.take<int32_t>(n, "sample_rows");
  if (c[kHasState]) a.state_slots = r.take<int32_t>(n, "state_slots");
  if (g > 1) {
    a.group_slot_mapping = r.take<int64_t>(uint64_t(g) * t, "group_slot_mapping");
    a.group_block_tables = r.take<int32_t>(uint64_t(g) * n * mb, "group_block_tables");
  }
  PKV_REQUIRE(r.left() == 0, "plan: %llu bytes past its arrays", (unsigned long long)r.left());
  // What the pool's kernels index with: every id within this engine's pool.
  const int64_t blocks = int64_t(shape.field[kShapeNumBlocks]);
  const int64_t host = int64_t(shape.field[kShapeHostNumBlocks]);
  const int64_t bs = int64_t(a.block_size);
  PKV_REQUIRE(a.query_start[0] == 0 && a.block_indptr[0] == 0 && a.query_start[n] == int64_t(t) &&
                  a.block_indptr[n] == int64_t(c[kIndices]),
              "plan: query_start or block_indptr do not span its tokens and blocks");
  for (uint32_t i = 0; i < n; ++i) {
    const int32_t q = a.query_start[i + 1] - a.query_start[i];
    PKV_REQUIRE(q >= 1 && uint32_t(q) <= a.max_query_len && a.context_lens[i] >= q &&
                    uint32_t(a.context_lens[i]) <= a.max_context_len &&
                    a.block_indptr[i + 1] >= a.block_indptr[i] &&
                    uint32_t(a.block_indptr[i + 1] - a.block_indptr[i]) <= mb &&
                    a.last_block_len[i] >= 0 && a.last_block_len[i] <= bs &&
                    a.sample_rows[i] >= -1 && a.sample_rows[i] < a.query_start[i + 1],
                "plan: sequence %u's rows, context or blocks do not hold together", i);
  }
  require_range(a.positions, 0, INT32_MAX, "positions");
  require_range(a.slot_mapping, -1, blocks * bs, "slot_mapping");
  require_range(a.group_slot_mapping, -1, blocks * bs, "group_slot_mapping");
  require_range(a.block_indices, -1, blocks, "block_indices");
  // The padded tables are the indices' rows (Batch's own rule): rebuilt, not carried.
  a.block_tables.assign(size_t(n) * mb, -1);
  for (uint32_t i = 0; i < n; ++i)
    std::copy(a.block_indices.begin() + a.block_indptr[i],
              a.block_indices.begin() + a.block_indptr[i + 1],
              a.block_tables.begin() + size_t(i) * mb);
  require_range(a.group_block_tables, -1, blocks, "group_block_tables");
  const int64_t states = int64_t(shape.field[kShapeNumStateSlots]);
  const int64_t host_states = int64_t(shape.field[kShapeNumHostStateSlots]);
  require_range(a.state_slots, 0, states, "state_slots");
  for (size_t i = 0; i < a.copy_kind.size(); ++i) {
    const int32_t k = a.copy_kind[i];
    PKV_REQUIRE(copy_kind_known(k) || copy_is_state(k), "plan: copy %zu has kind %d", i, k);
    const int64_t src_end = copy_is_state(k) ? (state_reads_host(k) ? host_states : states)
                                             : (copy_reads_host(k) ? host : blocks);
    const int64_t dst_end = copy_is_state(k) ? (state_writes_host(k) ? host_states : states)
                                             : (copy_writes_host(k) ? host : blocks);
    PKV_REQUIRE(a.copy_src[i] >= 0 && a.copy_src[i] < src_end && a.copy_dst[i] >= 0 &&
                    a.copy_dst[i] < dst_end,
                "plan: copy %zu (kind %d) %d -> %d is outside this engine's pools", i, k,
                a.copy_src[i], a.copy_dst[i]);
  }
  return out;
}

}  // namespace pkv
