#include "engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "params.h"
#include "profiler.h"
#include "status.h"

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
  p.host_num_blocks = static_cast<uint32_t>(b.host_num_blocks);
  return p;
}

// The working slots (one per running sequence: max_num_seqs) and the checkpoint slots after them,
// as the profiler took them from the budget; none without STATE layers.
StatePool state_pool_of(const pkv_kv_budget &b) {
  if (!b.num_state_layers) return StatePool();
  // With a host tier, a host slot per working one (every running sequence may be swapped out),
  // then the offloaded checkpoints' (pkv_kv_budget.num_host_state_slots).
  return StatePool(b.num_state_slots, b.num_state_slots + b.num_state_checkpoints,
                   b.num_host_state_slots ? b.num_state_slots : 0, b.num_host_state_slots);
}

SchedulerLimits limits_of(const pkv_engine_params &p) {
  return SchedulerLimits{p.max_num_seqs, p.max_num_batched_tokens, p.max_model_len, p.block_size,
                         p.num_blocks,   p.preemption_mode};
}

}  // namespace

Engine::Engine(const pkv_engine_params &params)
    : budget_(budget_for(params)),
      params_(resolved(params, budget_)),
      groups_(kv_groups_of(params)),
      softmax_scale_(attention_scale(params_)),
      events_(params_.enable_kv_events != 0, params_.kv_events_capacity, params_.block_size),
      blocks_(params_.num_blocks, params_.block_size, params_.enable_prefix_caching != 0,
              params_.hash_seed, (params_.debug_flags & PKV_DEBUG_CONSTANT_HASH) != 0,
              params_.host_num_blocks, params_.host_offload != 0, group_kinds(groups_)),
      states_(state_pool_of(budget_)),
      transfers_(params_.max_held_blocks, params_.num_blocks),
      scheduler_(limits_of(params_), seqs_, blocks_, states_, transfers_) {
  PKV_REQUIRE(params_.max_held_blocks <= params_.num_blocks,
              "max_held_blocks %u: at most the pool's %u blocks", params_.max_held_blocks,
              params_.num_blocks);
  blocks_.set_events(&events_);
  if (params.layer_windows)
    layer_windows_.assign(params.layer_windows, params.layer_windows + params.num_layers);
  params_.layer_windows = params.layer_windows ? layer_windows_.data() : nullptr;
  layer_specs_ = copy_layer_specs(params);
  specs_ = resolve_layer_specs(params);
  state_layout_ = state_layout_of(specs_);
  PKV_ASSERT(state_layout_.slot_bytes == budget_.state_bytes_per_seq &&
             state_layout_.num_state_layers == budget_.num_state_layers);
  // A prefix hit needs the recurrent state at its boundary too: checkpoint slots follow the
  // working ones in the state region (DESIGN.md §13).
  // With a host tier and offload, host slots after the swapped-out sequences' hold checkpoints
  // evicted from the device.
  if (!state_layout_.empty()) {
    const uint32_t host_first = budget_.num_host_state_slots ? budget_.num_state_slots : 0;
    blocks_.enable_state(int32_t(budget_.num_state_slots), budget_.num_state_checkpoints,
                         params_.state_checkpoint_policy, params_.state_checkpoint_interval,
                         int32_t(host_first), budget_.num_host_state_slots - host_first);
  }
  params_.layer_specs = layer_specs_.empty() ? nullptr : layer_specs_.data();
  params_.layer_spec_size = layer_specs_.empty() ? 0 : sizeof(pkv_layer_spec);
  params_.pp_size = std::max(params_.pp_size, 1u);
  const uint32_t ranks = pkv::num_ranks(params_);
  if (params.rank_device_ids)
    rank_device_ids_.assign(params.rank_device_ids, params.rank_device_ids + ranks);
  params_.rank_device_ids = params.rank_device_ids ? rank_device_ids_.data() : nullptr;
  if (std::any_of(specs_.begin(), specs_.end(), [](const LayerSpec &s) { return s.sinks; })) {
    sinks_.assign(size_t(ranks) * params_.num_layers * (params_.num_q_heads / params_.tp_size),
                  0.0f);
    sinks_set_.assign(params_.num_layers, 0);
  }
  if (is_fp8(budget_.kv_dtype)) {
    k_scales_.assign(size_t(ranks) * params_.num_layers * budget_.kv_heads_per_rank, 1.0f);
    if (params_.kv_layout != PKV_KV_LAYOUT_MLA) v_scales_ = k_scales_;  // MLA: no V
  }
  if (params.store) store_config_ = std::make_unique<StoreConfig>(params.store);
  if (store_config_ && store_config_->params().kind == PKV_STORE_NONE) store_config_.reset();
  params_.store = store_config_ ? &store_config_->params() : nullptr;
  // Ranks that decide apart diverge through a store (a write dropped on one rank, a fetch that
  // ends at another moment on each): the replicated mode is refused with one (DESIGN.md §10).
  const uint32_t model_ranks = params_.tp_size * params_.pp_size;
  if (store_config_ && params_.ranks == PKV_RANKS_POOL)
    fail(PKV_ERR_INVALID_ARGUMENT,
         "a store on an engine of ranks POOL, which decides nothing: the decider's store serves "
         "every rank");
  if (store_config_ && ranks > 1 && !state_layout_.empty())
    fail(PKV_ERR_UNSUPPORTED,
         "a store with STATE layers and %u ranks: the store's checkpoints of the recurrent state "
         "would hold one rank's slice of it, for now",
         ranks);
  if (store_config_ && model_ranks > 1 && params_.ranks == PKV_RANKS_ONE)
    fail(PKV_ERR_UNSUPPORTED,
         "a store with tp_size %u x pp_size %u and ranks ONE: engines of one rank each can come "
         "to hold different blocks through a store (a write dropped on one rank, a fetch ending "
         "at another moment on each), and ranks that differ hang the host's collectives or mix "
         "sequences' KV; create one engine of every rank (ranks ALL), whose values hold every "
         "rank's slice",
         params_.tp_size, params_.pp_size);
  if (store_config_) {
    PKV_REQUIRE(params_.enable_prefix_caching,
                "a store needs prefix caching (enable_prefix_caching 1)");
    PKV_REQUIRE(
        params_.host_num_blocks > 0,
        "a store needs a host tier (host_num_blocks or host_cache_bytes): its blocks are fetched there");
  }
  // MLA's scale is the model's (1/sqrt(qk_nope_head_dim + qk_rope_head_dim), times yarn's
  // mscale^2): 1/sqrt(head_dim) of the latent would be silently wrong.
  if (params_.kv_layout == PKV_KV_LAYOUT_MLA && !(params_.softmax_scale > 0))
    fail(
        PKV_ERR_INVALID_ARGUMENT,
        "kv_layout MLA needs softmax_scale: the model's 1/sqrt(qk_nope_head_dim + qk_rope_head_dim) (times "
        "mscale^2 under yarn rope scaling), not 1/sqrt(head_dim) of the latent; "
        "pkv_engine_params_from_hf_config sets it");
  // Every rank's pool holds the same blocks, each of its share of the heads (the same for every
  // tensor-parallel rank) and of its stage's layers, on its rank's device.
  for (uint32_t r = 0; r < ranks; ++r) {
    RankPool rp;
    rp.params = rank_params(params_, r);
    rp.groups = rp.params.pp_rank == params_.pp_rank ? groups_ : kv_groups_of(rp.params);
    rp.layout = pool_layout(rp.params, params_.num_blocks);
    rp.stage = stage_layers(params_.num_layers, std::max(params_.pp_size, 1u), rp.params.pp_rank);
    const PoolShape shape = pool_shape(rp);
    rp.backend = params_.device == PKV_DEVICE_CUDA
                     ? make_cuda_backend(rank_device_id(params_, r), shape)
                     : make_cpu_backend(shape, params_.num_threads);
    pools_.push_back(std::move(rp));
  }
  backend_ = pools_[0].backend.get();
  plan_shape_ = make_plan_shape();
  if (store_config_) {
    const PoolShape shape = pool_shape(pools_[0]);
    // The indexer is named by its fields; KV groups and unequal layers by store_layout.
    LayerSpec indexer;
    for (const LayerSpec &s : specs_)
      if (s.indexed()) indexer = s;
    std::string layout = store_layout(params_, specs_, groups_);
    // Several ranks (DESIGN.md §10): a value holds every rank's slice of its block, every rank's
    // pool layers in rank order, so a hit or a miss is one for all of them.
    HostTierView host{{}, {}, shape.block_bytes()};
    uint32_t value_layers = 0;
    for (const RankPool &rp : pools_) {
      const PoolShape ps = pool_shape(rp);
      char *k = static_cast<char *>(rp.backend->host_k_pool());
      char *v = static_cast<char *>(rp.backend->host_v_pool());
      for (uint32_t l = 0; l < ps.num_layers; ++l) {
        host.k.push_back(k + l * ps.host_bytes.layer);
        host.v.push_back(v ? v + l * ps.host_bytes.layer : nullptr);
      }
      value_layers += ps.num_layers;
    }
    if (ranks > 1)
      layout +=
          "|ranks:tp=" + std::to_string(params_.tp_size) + ",pp=" + std::to_string(params_.pp_size);
    std::vector<float> scales = k_scales_;
    scales.insert(scales.end(), v_scales_.begin(), v_scales_.end());
    store_ = std::make_unique<StoreTier>(
        store_config_->params(),
        StoreShape{value_layers, shape.kv_heads, params_.head_dim, params_.block_size,
                   params_.tp_rank, params_.tp_size * params_.pp_size, shape.kv_dtype,
                   shape.block_bytes(), scales, shape.tensors, shape.kv_lora_rank,
                   store_config_->params().model_id ? store_config_->params().model_id : "",
                   indexer.index_dim, indexer.index_dtype, layout},
        host);
    store_->set_host_fence([this] {
      for (const RankPool &rp : pools_) rp.backend->wait_host_tier();
    });
    // Checkpoints of the recurrent state go to the store and come back through host state slots.
    if (!state_layout_.empty()) enable_store_state();
    if (store_config_->params().write_mode == PKV_STORE_WRITE_BACK)
      blocks_.on_host_evict([this](const EvictedHostBlock &b) { write_back(b, false); });
    scheduler_.set_store(store_.get());
  }
  if (params.event_publisher) {
    publisher_config_ = std::make_unique<EventPublisherConfig>(params.event_publisher);
    params_.event_publisher = &publisher_config_->params();
    const bool cuda = params_.device == PKV_DEVICE_CUDA;
    const bool file = store_config_ && store_config_->params().kind == PKV_STORE_FILE;
    std::array<std::string, 4> medium;  // [PKV_TIER_*]: pkv.h lists these names
    medium[PKV_TIER_DEVICE] = cuda ? "GPU" : "CPU";
    medium[PKV_TIER_HOST] = cuda ? "CPU" : "CPU_HOST_TIER";
    medium[PKV_TIER_STORE] = file ? "DISK" : "EXTERNAL";
    publisher_ = std::make_unique<KvPublisher>(publisher_config_->params(), params_.block_size,
                                               std::move(medium), groups_.group_window,
                                               params_.kv_layout == PKV_KV_LAYOUT_MLA);
    events_.set_publisher(publisher_.get());
  }
}

Engine::~Engine() {
  // A write-back store gets what the host tier still holds: the engine's cache outlives it.
  if (!store_ || store_config_->params().write_mode != PKV_STORE_WRITE_BACK) return;
  try {
    blocks_.for_each_host_cached([this](const EvictedHostBlock &b) { write_back(b, true); });
  } catch (...) {  // out of memory for a value: the rest is not written; nothing else to do here
  }
}

// ---------------------------------------------------------------- checks

void Engine::require_length(uint64_t num_tokens) const {
  PKV_REQUIRE(num_tokens <= INT32_MAX, "a sequence of %llu tokens is too long (at most 2^31-1)",
              (unsigned long long)num_tokens);
  PKV_REQUIRE(params_.max_model_len == 0 || num_tokens <= params_.max_model_len,
              "%llu tokens exceed max_model_len %u", (unsigned long long)num_tokens,
              params_.max_model_len);
}

void Engine::require_outside_batch(const Sequence &s, const char *what) const {
  if (s.in_batch)
    fail(PKV_ERR_STATE, "cannot %s sequence %llu: it is in the open batch (end or abort it first)",
         what, (unsigned long long)s.id);
}

void Engine::require_manual(const Sequence &s, const char *what) const {
  if (s.request.is_request)
    fail(PKV_ERR_STATE, "cannot %s sequence %llu: it is a request of the scheduler (pkv_submit)",
         what, (unsigned long long)s.id);
}

void Engine::require_running(const Sequence &s) const {
  if (s.running()) return;
  const char *what = s.state == SeqState::kSwapped    ? "swap it in first"
                     : s.state == SeqState::kHeld     ? "end its hold first (pkv_hold_end)"
                     : s.state == SeqState::kFinished ? "it holds nothing any more: release it"
                                                      : "resume it first";
  fail(PKV_ERR_STATE, "sequence %llu is %s: %s", (unsigned long long)s.id, state_name(s.state),
       what);
}

// ---------------------------------------------------------------- sequences

BlockManager::Admission Engine::query(const int32_t *tokens, uint32_t n,
                                      const PrefixKeys &keys) const {
  require_length(n);
  return blocks_.plan_admission(keys, tokens, n);
}

uint64_t Engine::allocate(const int32_t *tokens, uint32_t n, const PrefixKeys &keys,
                          uint32_t *cached) {
  require_decider("pkv_allocate");
  require_length(n);
  Sequence &s = seqs_.create();
  try {
    s.keys = keys;
    s.tokens.assign(tokens, tokens + n);
    consult_store(keys, tokens, n);
    admit(s, blocks_, states_);
  } catch (...) {
    seqs_.discard(s.id);
    throw;
  }
  if (cached) *cached = s.num_cached;
  return s.id;
}

void Engine::append(uint64_t id, const int32_t *tokens, uint32_t n) {
  Sequence &s = seqs_.get(id);
  require_outside_batch(s, "append to");
  require_manual(s, "append to");
  require_running(s);
  require_length(uint64_t(s.num_tokens()) + n);
  pkv::append(s, blocks_, tokens, n);
}

uint64_t Engine::fork(uint64_t parent_id) {
  const Sequence &parent = seqs_.get(parent_id);
  require_outside_batch(parent, "fork");
  require_manual(parent, "fork");
  require_running(parent);
  if (parent.num_uncomputed())
    fail(PKV_ERR_STATE,
         "sequence %llu has %u uncomputed tokens: fork it after the batch that computes them",
         (unsigned long long)parent_id, parent.num_uncomputed());
  if (states_.enabled()) states_.require_free("pkv_fork");
  Sequence &child = seqs_.create();  // references into the table stay valid
  const uint64_t id = child.id;
  int32_t slot = -1;
  try {
    child = parent;  // tokens, keys (salt, adapter, extra keys), blocks, computed and cached
    if (states_.enabled()) {
      // The child's state is the parent's after its computed tokens: a copy queued for the
      // next step, which runs it before it writes either slot.
      slot = states_.take();
      states_.queue_copy(parent.state_slot, slot);
    }
  } catch (...) {
    if (slot >= 0) states_.give_back(slot);
    seqs_.discard(id);
    throw;
  }
  child.id = id;
  child.state_slot = slot;
  blocks_.fork(child.tables);  // cannot fail: every block is already in use
  return id;
}

void Engine::release(uint64_t id) {
  Sequence &s = seqs_.get(id);
  require_outside_batch(s, "release");
  if (s.state == SeqState::kHeld)
    fail(PKV_ERR_STATE,
         "sequence %llu is held for a transfer (a transport may be reading its blocks): end the "
         "hold first (pkv_hold_end), then release it",
         (unsigned long long)id);
  if (s.state == SeqState::kReceiving)
    fail(PKV_ERR_STATE,
         "sequence %llu is receiving its remote KV (a transport may be writing its blocks): end "
         "it first (pkv_receive_end), then release it",
         (unsigned long long)id);
  if (s.request.is_request) scheduler_.forget(s);
  free_kv(s, blocks_, states_);
  seqs_.erase(id);
}

void Engine::preempt(uint64_t id) {
  Sequence &s = seqs_.get(id);
  require_outside_batch(s, "preempt");
  require_manual(s, "preempt");
  if (!s.running())
    fail(PKV_ERR_STATE, "sequence %llu is already preempted", (unsigned long long)id);
  pkv::preempt(s, blocks_, states_);
}

void Engine::truncate(uint64_t id, uint32_t num_tokens) {
  Sequence &s = seqs_.get(id);
  require_outside_batch(s, "truncate");
  require_manual(s, "truncate");
  if (!s.running() && s.state != SeqState::kPreempted)
    fail(PKV_ERR_STATE, "sequence %llu is %s: truncate a running or preempted one",
         (unsigned long long)id, state_name(s.state));
  PKV_REQUIRE(num_tokens >= 1 && num_tokens <= s.num_tokens(),
              "num_tokens %u: 1 .. %u (the sequence's tokens) expected", num_tokens,
              s.num_tokens());
  // A recurrent state cannot give back tokens it has taken in: it goes back to a checkpoint.
  if (s.running() && s.state_slot >= 0 && num_tokens < s.num_computed)
    return roll_back(s, blocks_, states_, num_tokens);
  const size_t taken = open_ && !open_->copies_done ? open_->batch->copies().size() : 0;
  pkv::truncate(s, blocks_, num_tokens, taken);
}

uint32_t Engine::resume(uint64_t id) {
  Sequence &s = seqs_.get(id);
  require_manual(s, "resume");
  if (s.state != SeqState::kPreempted)
    fail(PKV_ERR_STATE, "sequence %llu is not preempted", (unsigned long long)id);
  consult_store(s.keys, s.tokens.data(), s.num_tokens());
  admit(s, blocks_, states_);
  return s.num_cached;
}

void Engine::swap_out(uint64_t id) {
  Sequence &s = seqs_.get(id);
  require_outside_batch(s, "swap out");
  require_manual(s, "swap out");
  if (!s.running())
    fail(PKV_ERR_STATE, "sequence %llu is %s, not running", (unsigned long long)id,
         state_name(s.state));
  pkv::swap_out(s, blocks_, states_);
}

void Engine::swap_in(uint64_t id) {
  Sequence &s = seqs_.get(id);
  require_manual(s, "swap in");
  if (s.state != SeqState::kSwapped)
    fail(PKV_ERR_STATE, "sequence %llu is %s, not swapped out", (unsigned long long)id,
         state_name(s.state));
  pkv::swap_in(s, blocks_, states_);
}

uint64_t Engine::submit(const int32_t *prompt, uint32_t n, const pkv_request_params &rp,
                        const PrefixKeys &keys) {
  require_decider("pkv_submit");
  require_timeless(Retention{0, rp.cache_retention_ms}, "request params'");
  if (rp.hold_on_finish) require_timeless_hold(rp.hold_timeout_ms, "request params':");
  return scheduler_.submit(prompt, n, rp, keys);
}

struct pkv_seq_info Engine::seq_info(uint64_t id) const {
  const Sequence &s = seqs_.get(id);
  struct pkv_seq_info info;
  std::memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  info.num_tokens = s.num_tokens();
  info.num_computed_tokens = s.num_computed;
  info.num_cached_tokens = s.num_cached;
  info.num_blocks = s.tables.empty() ? 0 : static_cast<uint32_t>(s.tables[0].ids.size());
  info.is_preempted = s.state == SeqState::kPreempted;
  info.in_batch = s.in_batch;
  info.cache_salt_len = static_cast<uint32_t>(s.keys.salt.size());
  info.is_request = s.request.is_request;
  info.num_prompt_tokens = s.request.prompt_len;
  info.num_generated_tokens = s.request.num_generated;
  info.finish_reason = s.request.finish_reason;
  info.kv_tier = s.holds_kv()                    ? PKV_TIER_DEVICE
                 : s.state == SeqState::kSwapped ? PKV_TIER_HOST
                                                 : PKV_TIER_NONE;
  info.num_host_blocks = static_cast<uint32_t>(
      std::count_if(s.host_blocks.begin(), s.host_blocks.end(), [](int32_t h) { return h >= 0; }));
  info.transfer = s.state == SeqState::kHeld        ? PKV_TRANSFER_HOLDING
                  : s.state == SeqState::kReceiving ? PKV_TRANSFER_RECEIVING
                                                    : PKV_TRANSFER_NONE;
  if (s.state == SeqState::kReceiving) {
    info.remote_first_block = s.transfer.first_block;
    info.remote_num_blocks = s.transfer.num_blocks;
    info.num_remote_tokens = s.request.remote_tokens;
  }
  return info;
}

// ---------------------------------------------------------------- cache, stats, checks

void Engine::reset_prefix_cache() {
  require_no_batch("pkv_reset_prefix_cache");
  blocks_.reset_cache();
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
  st.num_preempted_seqs = seqs_.count(SeqState::kPreempted);
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
  st.num_host_blocks = blocks_.num_host_blocks();
  st.num_host_free_blocks = blocks_.num_host_free();
  st.num_swapped_seqs = seqs_.count(SeqState::kSwapped);
  st.num_swapped_out_blocks = b.num_swapped_out_blocks;
  st.num_swapped_in_blocks = b.num_swapped_in_blocks;
  st.num_swap_preemptions = scheduler_.num_swap_preemptions();
  st.num_host_cached_blocks = blocks_.num_host_cached();
  st.host_hit_tokens = b.host_hit_tokens;
  st.num_offloaded_blocks = b.num_offloaded_blocks;
  st.num_loaded_blocks = b.num_loaded_blocks;
  st.num_host_evictions = b.num_host_evictions;
  st.store_hit_tokens = b.store_hit_tokens;
  st.device_hit_tokens = b.prefix_hit_tokens - b.host_hit_tokens - b.store_hit_tokens;
  st.num_state_checkpoints_held = blocks_.num_checkpoints_held();
  st.num_state_checkpoints_taken = b.num_state_checkpoints_taken;
  st.num_state_checkpoint_evictions = b.num_state_checkpoint_evictions;
  st.num_state_restores = b.num_state_restores;
  st.state_fallback_tokens = b.state_fallback_tokens;
  st.num_host_state_checkpoints_held = blocks_.num_host_checkpoints_held();
  st.num_state_checkpoints_offloaded = b.num_state_checkpoints_offloaded;
  st.num_state_restores_from_host = b.num_state_restores_from_host;
  st.num_pinned_blocks = blocks_.num_pinned_blocks();
  st.num_pins = blocks_.num_pins();
  st.num_evictions_low = b.num_evictions_by_priority[0];
  st.num_evictions_normal = b.num_evictions_by_priority[1];
  st.num_evictions_high = b.num_evictions_by_priority[2];
  st.num_evictions_highest = b.num_evictions_by_priority[3];
  for (const RankPool &pool : pools_) {
    st.num_host_waits += pool.backend->host_waits();
    st.num_device_allocs += pool.backend->device_allocs();
  }
  const TransferCounters &t = transfers_.counters();
  st.num_held_seqs = transfers_.num_held();
  st.num_held_blocks = transfers_.held_blocks();
  st.num_holds_done = t.holds_done, st.num_holds_failed = t.holds_failed;
  st.num_holds_timed_out = t.holds_timed_out, st.num_holds_refused = t.holds_refused;
  st.num_receiving_requests = transfers_.num_receiving();
  st.num_receiving_blocks = transfers_.receiving_blocks();
  st.num_receives_done = t.receives_done, st.num_receives_failed = t.receives_failed;
  st.received_tokens = t.received_tokens;
  if (store_) {
    const StoreCounters &c = store_->counters();
    st.num_store_lookups = c.lookups, st.num_store_hits = c.hits, st.num_store_misses = c.misses;
    st.num_store_rejected = c.rejected, st.num_store_errors = c.errors, st.num_store_puts = c.puts;
    st.num_store_put_dropped = c.put_dropped, st.num_store_put_errors = c.put_errors;
    st.num_loading_requests = scheduler_.num_loading();
  }
  return st;
}

void Engine::check() const {
  blocks_.check(seqs_.owners());
  scheduler_.check();
  transfers_.check(seqs_);
  if (states_.enabled()) states_.check(seqs_.state_slots(), seqs_.state_slots(true));
  size_t in_batch = 0;
  for (const auto &kv : seqs_) {
    const Sequence &s = kv.second;
    in_batch += s.in_batch;
    const bool swapped = s.state == SeqState::kSwapped;
    // A running (held, receiving) sequence's state is in a working slot, a swapped-out one's in
    // a host slot.
    if ((s.state_slot >= 0) != (states_.enabled() && s.holds_kv()) ||
        (s.host_state_slot >= 0) != (states_.enabled() && swapped))
      fail(PKV_ERR_INTERNAL, "sequence %llu (%s) holds state slot %d, host state slot %d",
           (unsigned long long)s.id, state_name(s.state), s.state_slot, s.host_state_slot);
    if (s.host_blocks.size() !=
        (swapped
             ? size_t(blocks_.num_groups()) * blocks_for_tokens(s.num_slotted(), params_.block_size)
             : 0u))
      fail(PKV_ERR_INTERNAL, "sequence %llu (%s) holds %zu host blocks for %u tokens",
           (unsigned long long)s.id, state_name(s.state), s.host_blocks.size(), s.num_slotted());
    // Only a request holds unslotted tokens (a sampled token; a prompt admitted per chunk).
    if (s.num_unslotted &&
        !(s.request.is_request && (s.running() || swapped || s.state == SeqState::kHeld)))
      fail(PKV_ERR_INTERNAL, "sequence %llu (%s) has %u tokens without a slot",
           (unsigned long long)s.id, state_name(s.state), s.num_unslotted);
  }
  const size_t members = open_ ? open_->batch->seq_ids().size() : 0;
  if (in_batch != members)
    fail(PKV_ERR_INTERNAL, "%zu sequences marked in a batch, the open batch has %zu", in_batch,
         members);
}

}  // namespace pkv
