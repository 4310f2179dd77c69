// Engine's batches (engine.h): one open at a time, begun by pkv_batch_begin or pkv_step, ended by
// pkv_batch_end, pkv_commit or pkv_batch_abort; the block copies and the attention of a layer.
// The rest of Engine is in engine.cpp.
#include "engine.h"

#include <algorithm>
#include <memory>

#include "status.h"

namespace pkv {

const Batch &Engine::open_batch() const {
  PKV_ASSERT(open_);
  return *open_->batch;
}

void Engine::open(std::unique_ptr<Batch> batch) {
  auto ob = std::make_unique<OpenBatch>();
  ob->planned.assign(pools_.size(), 0);
  ob->batch = std::move(batch);
  // Nothing can fail from here on: the batch takes its members. (The copies it lists stay queued
  // in the block manager until they are done.)
  // An imported plan's sequences are its decider's: this engine has none.
  if (!ob->batch->imported())
    for (uint64_t id : ob->batch->seq_ids()) seqs_.get(id).in_batch = true;
  open_ = std::move(ob);
}

// Refuses `call` while a batch is open, saying how that batch ends (its kind decides).
void Engine::require_no_batch(const char *call) const {
  if (!open_) return;
  fail(PKV_ERR_STATE, "%s: a batch is already open on this engine; end it first (%s)", call,
       open_->batch->from_step()
           ? "it came from pkv_step: pkv_commit, or pkv_batch_abort"
           : "it came from pkv_batch_begin: pkv_batch_end, or pkv_batch_abort");
}

void Engine::begin_batch(const uint64_t *seqs, const uint32_t *num_new_tokens, uint32_t num_seqs) {
  require_decider("pkv_batch_begin");
  require_no_batch("pkv_batch_begin");
  if (seqs)
    for (uint32_t i = 0; i < num_seqs; ++i)
      if (const Sequence *s = seqs_.find(seqs[i])) require_manual(*s, "batch");
  open(std::make_unique<Batch>(seqs_, seqs, num_new_tokens, num_seqs, params_.block_size,
                               groups_.num_groups(), blocks_.pending_copies(), states_, false));
}

bool Engine::step() {
  require_decider("pkv_step");
  require_no_batch("pkv_step");
  StepPlan plan = scheduler_.schedule();
  // Nothing to run but requests loading from the store: wait for their fetches (each bounded by
  // the store's timeouts) rather than report an idle engine.
  while (plan.seq_ids.empty() && scheduler_.num_loading() > 0) {
    store_->wait_fetched(store_->lookup_timeout_ms());
    plan = scheduler_.schedule();
  }
  // A request began receiving: the copies queued before it (a block it took may be one an
  // offload or a swap-out still reads) are done now, so a transport may write its blocks.
  if (scheduler_.take_began_receiving()) flush_copies();
  if (plan.seq_ids.empty()) return false;
  open(std::make_unique<Batch>(seqs_, plan.seq_ids.data(), plan.num_new_tokens.data(),
                               static_cast<uint32_t>(plan.seq_ids.size()), params_.block_size,
                               groups_.num_groups(), blocks_.pending_copies(), states_, true));
  scheduler_.count_step(plan.num_tokens);
  return true;
}

void Engine::close(bool ran) {
  std::unique_ptr<OpenBatch> ob = std::move(open_);
  const Batch &b = *ob->batch;
  if (b.imported()) return;  // the decider's block manager ran it
  for (size_t i = 0; i < b.seq_ids().size(); ++i) {
    Sequence &s = seqs_.get(b.seq_ids()[i]);
    s.in_batch = false;
    if (!ran) continue;
    const uint32_t n = b.num_new_tokens()[i];
    compute_through(s, [&] { return computed(s, blocks_, states_, n); });
  }
  // A step that ran did its copies (pkv's attention, or the host's kernels); one that did not
  // leaves them queued for the next batch, unless pkv already did them.
  if (ran && !ob->copies_done) {
    blocks_.copies_done(b.copies().size());
    states_.copies_done(b.num_state_copies());
  }
  // The store's writer finishes blocks on its own thread: the wire hears of them step by step.
  if (publisher_) note_store_events();
}

void Engine::compute_through(Sequence &s, const std::function<uint32_t()> &compute) {
  // Write-through: the blocks these tokens sealed into new prefix nodes (their KV was just
  // computed); blocks sealed elsewhere (a swap-in resealing, its copy still queued) not.
  const bool through = store_ && store_->writes_through();
  blocks_.collect_sealed(through);
  states_.make_room(1);
  const uint32_t captured = compute();
  blocks_.collect_sealed(false);
  if (through) write_sealed(s);
  // A checkpoint of the state goes to the store when taken, in either write mode: the working
  // slot holds it only until the next step.
  if (captured && store_ && store_->has_state() && store_->writes()) write_checkpoint(s, captured);
}

void Engine::end_batch() {
  PKV_ASSERT(open_);
  if (open_->batch->from_step())
    fail(
        PKV_ERR_STATE,
        "a batch of pkv_step ends with pkv_commit (the step ran: pass the sampled tokens) or pkv_batch_abort "
        "(it did not); this batch stays open");
  close(true);
}

void Engine::commit(const int32_t *sampled) {
  PKV_ASSERT(open_);
  const Batch &b = *open_->batch;
  if (b.imported())
    fail(PKV_ERR_STATE,
         "an imported plan ends with pkv_batch_end or pkv_batch_abort; its decider's batch "
         "commits the sampled tokens; this batch stays open");
  if (!b.from_step())
    fail(
        PKV_ERR_STATE,
        "a batch of pkv_batch_begin ends with pkv_batch_end or pkv_batch_abort, not pkv_commit (only pkv_step's "
        "batches sample); this batch stays open");
  const std::vector<int32_t> rows = b.sample_rows();
  const std::vector<uint64_t> ids = b.seq_ids();
  const bool samples = std::any_of(rows.begin(), rows.end(), [](int32_t r) { return r >= 0; });
  PKV_REQUIRE(sampled != nullptr || !samples, "sampled_tokens is NULL but this step samples");
  for (size_t i = 0; i < ids.size(); ++i)  // room for the sampled tokens: nothing below can fail
    if (rows[i] >= 0) make_room(seqs_.get(ids[i]).tokens, 1);
  close(true);
  scheduler_.commit(ids, rows, sampled);
}

void Engine::abort_batch() {
  PKV_ASSERT(open_);
  close(false);
}

void Engine::do_copies() {
  PKV_ASSERT(open_);
  if (open_->copies_done) return;
  const Batch &b = *open_->batch;
  const size_t num_block_copies = b.copies().size(), num_state_copies = b.num_state_copies();
  if (num_block_copies + num_state_copies) {
    const pkv_batch_view view = b.view();
    for (const RankPool &pool : pools_)
      pool.backend->copy_blocks(view.copy_src, view.copy_dst, view.copy_kind, view.num_copies);
  }
  if (!b.imported()) {  // an imported plan's copies are its decider's block manager's
    blocks_.copies_done(num_block_copies);
    states_.copies_done(num_state_copies);
  }
  open_->copies_done = true;
}

uint32_t Engine::compute_rank(const char *call) const {
  if (call_rank_ != kAnyRank) {
    PKV_REQUIRE(call_rank_ < pools_.size(), "%s: a handle of rank %u; this engine holds %zu", call,
                call_rank_, pools_.size());
    return call_rank_;
  }
  if (pools_.size() == 1) return 0;
  fail(PKV_ERR_INVALID_ARGUMENT,
       "%s: this engine holds %zu ranks' pools (ranks ALL): call it with a rank's handle "
       "(pkv_batch_rank), with that rank's heads on its device",
       call, pools_.size());
}

void Engine::plan_graph(uint32_t bucket) {
  PKV_ASSERT(open_);
  const uint32_t rank = compute_rank("pkv_batch_plan_graph");
  const Batch &b = *open_->batch;
  if (params_.device != PKV_DEVICE_CUDA)
    fail(PKV_ERR_UNSUPPORTED,
         "pkv_batch_plan_graph: a CPU engine has no CUDA graphs; run the step's layers with "
         "pkv_attention as they are");
  if (std::any_of(specs_.begin(), specs_.end(), [](const LayerSpec &s) { return s.indexed(); }))
    fail(PKV_ERR_UNSUPPORTED,
         "pkv_batch_plan_graph: this engine has indexer layers (sparse attention), whose top-k "
         "runs in waves sized by the batch; run its steps without graphs");
  if (open_->planned[rank])
    fail(PKV_ERR_STATE,
         "pkv_batch_plan_graph: this batch is planned already%s (a pkv_attention or "
         "pkv_indexer_* of it ran); plan a graph step before its first layer",
         pools_.size() > 1 ? " on this rank" : "");
  const std::vector<uint32_t> &news = b.num_new_tokens();
  const uint32_t n = static_cast<uint32_t>(news.size());
  for (uint32_t i = 0; i < n; ++i)
    PKV_REQUIRE(news[i] == 1,
                "pkv_batch_plan_graph plans decode steps: sequence %u of the batch computes %u "
                "tokens, not 1 (run prefills with pkv_attention as they are)",
                i, news[i]);
  PKV_REQUIRE(bucket >= n && bucket >= 1 && bucket <= params_.max_num_seqs,
              "pkv_batch_plan_graph: bucket %u must hold the batch's %u sequences and be at "
              "most max_num_seqs (%u)",
              bucket, n, params_.max_num_seqs);
  // The plan first: it may refuse (a bucket past the buffers made at create) before anything
  // is queued; the copies and the arrays' upload are independent, both before any kernel.
  pools_[rank].backend->plan_graph(b.view(), bucket);
  open_->planned[rank] = 1;
  do_copies();
}

void Engine::attention(uint32_t layer, const void *q, const void *k, const void *v, void *out) {
  PKV_ASSERT(open_);
  PKV_REQUIRE(layer < params_.num_layers, "layer %u of %u", layer, params_.num_layers);
  const LayerSpec spec = layer_spec(layer);
  check_attention(layer, spec, q, k, v, out);  // each layer's own shape (engine_layers.cpp)
  const uint32_t rank = compute_rank("pkv_attention");
  AttentionCall call = attention_call(layer, spec, rank);  // refuses another stage's layer
  prepare_step(rank);
  call.q = q, call.k = k, call.v = v, call.out = out;
  pools_[rank].backend->attention(call);
}

}  // namespace pkv
