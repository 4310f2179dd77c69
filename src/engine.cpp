#include "engine.h"

#include "batch.h"
#include "params.h"
#include "profiler.h"
#include "status.h"

#include <cmath>
#include <cstring>

namespace pkv {
namespace {

pkv_kv_budget budget_for(const pkv_engine_params &p) {
  pkv_kv_budget b = profile(p);
  budget_error(p, b);
  return b;
}

pkv_engine_params resolved(pkv_engine_params p, const pkv_kv_budget &b) {
  p.device = b.device;
  p.num_blocks = static_cast<uint32_t>(b.num_blocks);
  return p;
}

}  // namespace

Engine::Engine(const pkv_engine_params &params)
    : budget_(budget_for(params)),
      params_(resolved(params, budget_)),
      blocks_(params_.num_blocks, params_.block_size, params_.enable_prefix_caching != 0,
              params_.hash_seed, (params_.debug_flags & PKV_DEBUG_CONSTANT_HASH) != 0),
      events_(params_.enable_kv_events != 0, params_.kv_events_capacity, params_.block_size) {
  blocks_.set_events(&events_);
  backend_ = params_.device == PKV_DEVICE_CUDA ? make_cuda_backend(params_.device_id, pool_shape())
                                               : make_cpu_backend(pool_shape(), params_.num_threads);
}

Engine::~Engine() = default;

PoolShape Engine::pool_shape() const {
  const PoolLayout l = pool_layout(params_, params_.num_blocks);
  return PoolShape{params_.num_layers, params_.num_blocks, params_.block_size, l.kv_heads,
                   params_.head_dim, l.dtype_bytes, params_.dtype, params_.num_q_heads / params_.tp_size,
                   {l.layer_block_bytes, l.layer_bytes, l.bytes_per_pool}};
}

void Engine::attention(Batch &batch, uint32_t layer, const void *q, const void *k, const void *v, void *out) {
  PKV_REQUIRE(layer < params_.num_layers, "layer %u of %u", layer, params_.num_layers);
  PKV_REQUIRE(q && k && v && out, "q, k, v and out must not be NULL");
  PKV_REQUIRE(out != q && out != k && out != v, "out may not alias q, k or v");
  if (params_.head_dim % 8 != 0 || params_.head_dim > 256)
    fail(PKV_ERR_UNSUPPORTED, "pkv_attention supports head_dim multiples of 8 up to 256, not %u",
         params_.head_dim);
  const pkv_batch_view view = batch.view();
  if (!batch.copies_done()) {
    // Copy-on-write copies come before any write of the step, for every layer at once.
    if (view.num_copies) backend_->copy_blocks(view.copy_src, view.copy_dst, view.num_copies);
    batch.set_copies_done();
  }
  const float scale = params_.softmax_scale > 0 ? params_.softmax_scale
                                                : 1.0f / std::sqrt(float(params_.head_dim));
  backend_->attention(StepView{&view, batch.serial()}, AttentionCall{layer, scale, q, k, v, out});
}

struct pkv_pool_info Engine::pool_info() const {
  const PoolLayout l = pool_layout(params_, params_.num_blocks);  // the layout pool_shape() allocated
  struct pkv_pool_info info;
  std::memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  info.device = backend_->device();
  info.dtype = params_.dtype;
  info.num_layers = params_.num_layers;
  info.num_blocks = params_.num_blocks;
  info.block_size = params_.block_size;
  info.kv_heads = l.kv_heads;
  info.head_dim = params_.head_dim;
  info.k_base = backend_->k_pool();
  info.v_base = backend_->v_pool();
  info.head_stride = l.head_stride;
  info.token_stride = l.token_stride;
  info.block_stride = l.block_stride;
  info.layer_stride = l.layer_stride;
  info.bytes_per_pool = l.bytes_per_pool;
  return info;
}

Sequence &Engine::seq(uint64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end())
    fail(PKV_ERR_NOT_FOUND, "sequence %llu does not exist (never allocated, or released)",
         (unsigned long long)id);
  return it->second;
}

void Engine::require_length(uint64_t num_tokens) const {
  PKV_REQUIRE(num_tokens <= INT32_MAX, "a sequence of %llu tokens is too long",
              (unsigned long long)num_tokens);
  PKV_REQUIRE(params_.max_model_len == 0 || num_tokens <= params_.max_model_len,
              "%llu tokens exceed max_model_len %u", (unsigned long long)num_tokens,
              params_.max_model_len);
}

void Engine::require_manual(const Sequence &s, const char *what) const {
  if (s.request.active)
    fail(PKV_ERR_STATE, "cannot %s sequence %llu: it is a request of the scheduler (pkv_submit)", what,
         (unsigned long long)s.id);
}

uint64_t Engine::add_sequence(Sequence s) {
  s.id = next_seq_id_;
  auto [it, inserted] = seqs_.emplace(s.id, std::move(s));
  PKV_ASSERT(inserted);
  next_seq_id_++;
  return it->first;
}

void Engine::remove_sequence(uint64_t id) { seqs_.erase(id); }

struct pkv_seq_info Engine::seq_info(uint64_t id) {
  const Sequence &s = seq(id);
  struct pkv_seq_info info;
  std::memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  const bool has_pending = s.request.has_pending;
  info.num_tokens = s.num_tokens() + has_pending;
  info.num_computed_tokens = s.num_computed;
  info.num_cached_tokens = s.num_cached;
  info.num_blocks = static_cast<uint32_t>(s.block_table.size());
  // A request waiting for its first admission, or finished, holds no blocks without being preempted.
  info.is_preempted = s.preempted && !(s.request.active && (!s.request.admitted_once || s.request.finish_reason));
  info.in_batch = s.in_batch;
  info.cache_salt_len = static_cast<uint32_t>(s.salt.size());
  info.is_request = s.request.active;
  info.num_prompt_tokens = s.request.active ? s.request.prompt_len : 0;
  info.num_generated_tokens = s.request.generated;
  info.finish_reason = s.request.finish_reason;
  return info;
}

void Engine::require_mutable(const Sequence &s, const char *what) const {
  if (s.in_batch)
    fail(PKV_ERR_STATE, "cannot %s sequence %llu: it is in the open batch (end or abort it first)",
         what, (unsigned long long)s.id);
}

BlockManager::Admission Engine::query(const int32_t *tokens, uint32_t n, const std::string &salt) const {
  require_length(n);
  return blocks_.plan_admission(salt, tokens, n);
}

uint64_t Engine::allocate(const int32_t *tokens, uint32_t n, const std::string &salt, uint32_t *cached) {
  require_length(n);
  Sequence s;
  s.id = next_seq_id_;
  s.salt = salt;
  s.tokens.assign(tokens, tokens + n);
  auto [it, inserted] = seqs_.emplace(s.id, Sequence{});  // room first: admit must be last
  PKV_ASSERT(inserted);
  try {
    blocks_.admit(s);
  } catch (...) {
    seqs_.erase(it);
    throw;
  }
  it->second = std::move(s);
  next_seq_id_++;
  if (cached) *cached = it->second.num_cached;
  return it->first;
}

void Engine::append(uint64_t id, const int32_t *tokens, uint32_t n) {
  Sequence &s = seq(id);
  require_mutable(s, "append to");
  require_manual(s, "append to");
  if (s.preempted) fail(PKV_ERR_STATE, "sequence %llu is preempted: resume it first", (unsigned long long)id);
  require_length(uint64_t(s.num_tokens()) + n);
  blocks_.append(s, tokens, n);
}

uint64_t Engine::fork(uint64_t parent_id) {
  Sequence &parent = seq(parent_id);
  require_mutable(parent, "fork");
  require_manual(parent, "fork");
  if (parent.preempted)
    fail(PKV_ERR_STATE, "sequence %llu is preempted: resume it first", (unsigned long long)parent_id);
  if (parent.num_uncomputed())
    fail(PKV_ERR_STATE, "sequence %llu has %u uncomputed tokens: fork it after the batch that computes them",
         (unsigned long long)parent_id, parent.num_uncomputed());
  Sequence child = parent;  // tokens, salt, computed and sealed counts
  child.id = next_seq_id_;
  auto [it, inserted] = seqs_.emplace(child.id, std::move(child));
  PKV_ASSERT(inserted);
  blocks_.fork(it->second);  // cannot fail: every block is already in use
  next_seq_id_++;
  return it->first;
}

void Engine::release(uint64_t id) {
  Sequence &s = seq(id);
  require_mutable(s, "release");
  if (s.request.active) scheduler_.forget(id, s.request.finish_reason != 0);
  blocks_.free_blocks(s);
  seqs_.erase(id);
}

void Engine::preempt(uint64_t id) {
  Sequence &s = seq(id);
  require_mutable(s, "preempt");
  require_manual(s, "preempt");
  if (s.preempted) fail(PKV_ERR_STATE, "sequence %llu is already preempted", (unsigned long long)id);
  blocks_.free_blocks(s);
  s.preempted = true;
  s.num_cached = 0;
  blocks_.count_preemption();
}

uint32_t Engine::resume(uint64_t id) {
  Sequence &s = seq(id);
  require_manual(s, "resume");
  if (!s.preempted) fail(PKV_ERR_STATE, "sequence %llu is not preempted", (unsigned long long)id);
  blocks_.admit(s);
  s.preempted = false;
  return s.num_cached;
}

pkv_stats Engine::stats() const {
  pkv_stats st;
  std::memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  st.num_blocks = blocks_.num_blocks();
  st.num_free_blocks = blocks_.num_free();
  st.num_cached_blocks = blocks_.num_cached();
  st.num_used_blocks = blocks_.num_blocks() - blocks_.num_free();
  st.num_seqs = seqs_.size();
  for (const auto &kv : seqs_) {
    const Sequence &s = kv.second;
    st.num_preempted_seqs += s.preempted && !(s.request.active && (!s.request.admitted_once || s.request.finish_reason));
  }
  st.num_waiting_requests = scheduler_.num_waiting();
  st.num_running_requests = scheduler_.num_running();
  st.num_finished_requests = scheduler_.num_finished();
  st.num_scheduled_tokens = scheduler_.num_scheduled_tokens();
  st.num_steps = scheduler_.num_steps();
  st.num_prefix_nodes = blocks_.num_prefix_nodes();
  const BlockStats &b = blocks_.stats();
  st.prefix_query_tokens = b.prefix_query_tokens;
  st.prefix_hit_tokens = b.prefix_hit_tokens;
  st.num_evictions = b.num_evictions;
  st.num_cow_copies = b.num_cow_copies;
  st.num_preemptions = b.num_preemptions;
  return st;
}

void Engine::check() const {
  blocks_.check(seqs_);
  size_t in_batch = 0;
  for (const auto &kv : seqs_) in_batch += kv.second.in_batch;
  const size_t members = open_batch_ ? open_batch_->num_seqs() : 0;
  if (in_batch != members)
    fail(PKV_ERR_INTERNAL, "%zu sequences marked in a batch, the open batch has %zu", in_batch, members);
}

Batch &Engine::begin_batch(const uint64_t *seqs, const uint32_t *num_new_tokens, uint32_t num_seqs,
                           bool from_step) {
  if (open_batch_) fail(PKV_ERR_STATE, "a batch is already open on this engine: end or abort it first");
  if (!from_step && seqs)
    for (uint32_t i = 0; i < num_seqs; ++i) {
      auto it = seqs_.find(seqs[i]);
      if (it != seqs_.end()) require_manual(it->second, "batch");
    }
  open_batch_ = std::make_unique<Batch>(*this, seqs, num_new_tokens, num_seqs, next_batch_serial_++, from_step);
  return *open_batch_;
}

void Engine::finish_batch(bool ran) {
  PKV_ASSERT(open_batch_);
  std::unique_ptr<Batch> batch = std::move(open_batch_);
  if (ran) batch->commit();
  else batch->abort();
}

}  // namespace pkv
