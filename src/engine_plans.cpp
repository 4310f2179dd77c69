// Engine's plans across processes (DESIGN.md §10): the engine that decides exports each step's
// plan as bytes (pkv_batch_export_plan); an engine of ranks POOL in another process imports them
// (pkv_plan_import) and runs them on its rank's pool, deciding nothing itself. The bytes are
// plan_wire.h's.
#include <cstring>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "engine.h"
#include "status.h"

namespace pkv {
namespace {

uint64_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

}  // namespace

PlanShape Engine::make_plan_shape() const {
  PlanShape s;
  const pkv_engine_params &p = params_;
  const uint64_t fields[kPlanShapeFields] = {p.num_layers,
                                             p.num_q_heads,
                                             p.num_kv_heads,
                                             p.head_dim,
                                             uint64_t(p.dtype),
                                             uint64_t(kv_dtype_of(p)),
                                             p.kv_layout,
                                             p.kv_lora_rank,
                                             p.qk_rope_head_dim,
                                             p.block_size,
                                             p.num_blocks,
                                             p.host_num_blocks,
                                             p.tp_size,
                                             p.pp_size,
                                             groups_.num_groups(),
                                             states_.num_total(),
                                             states_.num_host(),
                                             p.max_num_seqs,
                                             0};
  std::memcpy(s.field, fields, sizeof fields);
  // Every layer's spec and window, whole-model (not a stage's slots): a hash of the fields.
  std::vector<uint64_t> words;
  auto add = [&](uint64_t v) { words.push_back(v); };
  add(p.sliding_window);
  add(bits_of(p.softmax_scale));
  if (p.layer_windows)
    for (uint32_t l = 0; l < p.num_layers; ++l) add(p.layer_windows[l]);
  for (const LayerSpec &l : specs_) {
    for (uint64_t v :
         {uint64_t(l.kind), uint64_t(l.attention), uint64_t(l.window), uint64_t(l.kv_heads),
          uint64_t(l.head_dim), uint64_t(l.v_dim), uint64_t(l.k_eq_v), uint64_t(l.sinks),
          uint64_t(l.source), uint64_t(l.index_dim), uint64_t(l.index_dtype),
          uint64_t(l.index_heads), uint64_t(l.index_topk)})
      add(v);
    add(bits_of(l.softcap));
    add(bits_of(l.scale));
    for (const StatePart &part : l.state) add(part.bytes);
  }
  s.field[kShapeLayers] = XXH64(words.data(), words.size() * sizeof(uint64_t), 0);
  return s;
}

void Engine::require_decider(const char *call) const {
  if (params_.ranks == PKV_RANKS_POOL)
    fail(PKV_ERR_STATE,
         "%s: an engine of ranks POOL decides nothing; it runs the plans its decider exports "
         "(pkv_plan_import)",
         call);
}

const std::vector<uint8_t> &Engine::export_plan() {
  PKV_ASSERT(open_);
  if (open_->batch->imported())
    fail(PKV_ERR_STATE,
         "pkv_batch_export_plan: this batch was imported (pkv_plan_import); its decider exports "
         "the plans");
  if (open_->plan.empty()) {
    open_->plan = encode_plan(open_->batch->view(), next_export_step_, plan_shape_);
    ++next_export_step_;
  }
  return open_->plan;
}

void Engine::import_plan(const void *bytes, uint64_t len) {
  if (params_.ranks != PKV_RANKS_POOL)
    fail(PKV_ERR_STATE,
         "pkv_plan_import: this engine decides for itself (ranks %s); plans are imported by an "
         "engine of ranks POOL",
         params_.ranks == PKV_RANKS_ALL ? "ALL" : "ONE");
  require_no_batch("pkv_plan_import");
  ImportedPlan plan = decode_plan(bytes, len, plan_shape_);
  if (plan.step != next_import_step_)
    fail(PKV_ERR_STATE,
         "pkv_plan_import: plan of step %llu, step %llu expected: plans are imported in the "
         "order they were exported, each once%s",
         (unsigned long long)plan.step, (unsigned long long)next_import_step_,
         plan.step < next_import_step_ ? " (this one is stale)" : " (one was skipped)");
  open(std::make_unique<Batch>(std::move(plan.arrays)));
  ++next_import_step_;
}

void Engine::unimport_plan() {
  PKV_ASSERT(open_ && open_->batch->imported() && next_import_step_ > 0);
  abort_batch();
  --next_import_step_;
}

}  // namespace pkv
