// Engine: owns the configuration, the KV pool (backend), the block manager, the sequences, the
// scheduler and the one open batch, and is the only place that ties them together. Calls flow
// down from here; nothing below calls back up. Every public operation validates everything
// first and changes state only once nothing can fail but a pkv bug, so a failed call leaves the
// engine as it was.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "backend/backend.h"
#include "batch.h"
#include "block_manager.h"
#include "kv_events.h"
#include "kv_groups.h"
#include "layer_specs.h"
#include "params.h"
#include "plan_wire.h"
#include "profiler.h"
#include "pkv/pkv.h"
#include "scheduler.h"
#include "sequence.h"
#include "state_layout.h"
#include "state_pool.h"
#include "tiers/store_tier.h"
#include "transfers.h"

namespace pkv {

class Engine {
 public:
  explicit Engine(const pkv_engine_params &params);  // validated here; throws
  ~Engine();

  std::mutex &mutex() { return mutex_; }
  std::string &last_error() { return last_error_; }
  const char *last_error_text() const { return last_error_.c_str(); }
  const pkv_engine_params &params() const { return params_; }
  const pkv_kv_budget &budget() const { return budget_; }
  const KvGroups &groups() const { return groups_; }

  // Sequences (pkv_allocate's).
  uint64_t allocate(const int32_t *tokens, uint32_t n, const PrefixKeys &keys, uint32_t *cached);
  BlockManager::Admission query(const int32_t *tokens, uint32_t n, const PrefixKeys &keys) const;
  void append(uint64_t id, const int32_t *tokens, uint32_t n);
  uint64_t fork(uint64_t parent);
  void release(uint64_t id);
  void truncate(uint64_t id, uint32_t num_tokens);
  void preempt(uint64_t id);
  uint32_t resume(uint64_t id);
  void swap_out(uint64_t id);
  void swap_in(uint64_t id);
  const Sequence &seq(uint64_t id) const { return seqs_.get(id); }
  struct pkv_seq_info seq_info(uint64_t id) const;

  // Requests (the scheduler's).
  uint64_t submit(const int32_t *prompt, uint32_t n, const pkv_request_params &rp,
                  const PrefixKeys &keys);
  size_t drain_finished(uint64_t *out, size_t cap) { return scheduler_.drain_finished(out, cap); }

  // The one open batch: begun by pkv_batch_begin or pkv_step, ended by pkv_batch_end or
  // pkv_commit (it ran) or pkv_batch_abort (it did not).
  bool has_open_batch() const { return open_ != nullptr; }
  const Batch &open_batch() const;
  void begin_batch(const uint64_t *seqs, const uint32_t *num_new_tokens, uint32_t num_seqs);
  bool step();  // false: nothing to run, no batch opened
  void end_batch();
  void require_no_batch(const char *call) const;  // PKV_ERR_STATE naming how the open batch ends
  void commit(const int32_t *sampled_tokens);
  void abort_batch();
  // The open batch's copies, once (pkv_batch_copy; the first pkv_attention calls it).
  void do_copies();
  // Plans across processes (engine_plans.cpp, DESIGN.md §10): the open batch's plan as bytes
  // (numbered at its first export), and a ranks POOL engine's batch opened from them.
  const std::vector<uint8_t> &export_plan();
  void import_plan(const void *bytes, uint64_t len);
  void unimport_plan();  // the batch import_plan opened, closed unrun and its step not taken
  // pkv_batch_plan_graph: the open decode batch's copies, then its plan padded to `bucket`
  // sequences (Backend::plan_graph), so its layers' attention can be captured in a CUDA graph.
  void plan_graph(uint32_t bucket);
  // pkv_attention of the open batch: its copies and its plan first (once), then one layer.
  void attention(uint32_t layer, const void *q, const void *k, const void *v, void *out);
  // Sparse attention's calls of the open batch (engine_sparse.cpp, DESIGN.md §14).
  void indexer_write(uint32_t layer, const void *k, uint32_t flags);
  void indexer_topk(uint32_t layer, const void *q, const float *weights, uint32_t out_kind,
                    int32_t *out);
  void sparse_attention(uint32_t layer, const void *q, const void *k, const int32_t *indices,
                        void *out);

  struct pkv_pool_info pool_info() const;
  // Layer l resolved: its spec (layer_specs), or the flat fields' (engine_layers.cpp).
  LayerSpec layer_spec(uint32_t l) const;
  struct pkv_layer_info layer_info(uint32_t layer) const;
  // fp8 KV: layer's scales ([its kv heads per rank] each), before the first sequence.
  void set_kv_scales(uint32_t layer, const float *k_scales, const float *v_scales);
  // A sinks layer's logits ([q heads per rank]), before the first sequence.
  void set_attention_sinks(uint32_t layer, const float *sinks, uint32_t num_sinks);
  // pkv_engine_set_stream: every rank's (NULL only, with several); pkv_engine_set_rank_stream.
  void set_stream(void *stream);
  void set_rank_stream(uint32_t rank, void *stream);
  // Ranks (DESIGN.md §10): the pools the engine holds, and rank r's pool_info.
  uint32_t num_ranks() const { return static_cast<uint32_t>(pools_.size()); }
  struct pkv_pool_info rank_pool_info(uint32_t rank) const;
  // Block descriptors for transports (engine_segments.cpp, DESIGN.md §10): the segments of
  // blocks of a tier, of a running sequence's blocks, and the layout's fingerprint.
  std::vector<pkv_segment> block_segments(uint32_t rank, uint32_t tier, const int32_t *blocks,
                                          uint32_t n) const;
  std::vector<pkv_segment> seq_segments(uint32_t rank, uint64_t seq, uint32_t first,
                                        uint32_t n) const;
  std::array<uint8_t, 32> layout_fingerprint(uint32_t rank) const;
  // KV transfers between engines (engine_transfers.cpp, DESIGN.md §10): holds of a producer,
  // remote fills of a consumer, and where a sequence's recurrent state is.
  void hold(uint64_t id, uint32_t timeout_ms);
  void hold_end(uint64_t id, uint32_t outcome);
  size_t drain_receiving(uint64_t *out, size_t cap) { return transfers_.drain_receiving(out, cap); }
  void receive_end(uint64_t id, uint32_t outcome);
  pkv_segment state_segment(uint32_t rank, uint64_t id) const;
  // The rank a batch call names (api.cpp's guard sets it from the handle, under the engine's
  // lock): kAnyRank for the batch's own handle, else the rank of a pkv_batch_rank handle.
  static constexpr uint32_t kAnyRank = UINT32_MAX;
  void set_call_rank(uint32_t rank) { call_rank_ = rank; }
  size_t drain_events(void *out, size_t event_size, size_t cap);
  // After every call on the engine (api.cpp's guards): its KV events go to the publisher.
  void publish_events() noexcept {
    if (publisher_) publisher_->flush();
  }
  // pkv_event_publisher_info; PKV_ERR_STATE without a publisher.
  void publisher_info(struct pkv_event_publisher_info *out) const;
  std::string store_error() const { return store_ ? store_->last_error() : std::string(); }
  void reset_prefix_cache();
  // Retention (engine_retention.cpp, DESIGN.md §4): a pkv_allocate sequence's (set after it),
  // pkv_cache_set_priority, pkv_cache_pin, pkv_cache_unpin, and the clock they are measured by,
  // read once per call (api.cpp's guards).
  void set_retention(uint64_t id, Retention r) { seqs_.get(id).retention = r; }
  // A retention with a deadline reads the engine's clock: refused on one rank of several
  // (ranks ONE), whose ranks' clocks would let their evictions differ (DESIGN.md §10).
  void require_timeless(const Retention &r, const char *what) const;
  uint32_t cache_set_priority(const int32_t *tokens, uint32_t n, const PrefixKeys &keys,
                              Retention r);
  uint64_t cache_pin(const int32_t *tokens, uint32_t n, const PrefixKeys &keys,
                     uint32_t *out_tokens);
  void cache_unpin(uint64_t pin);
  void tick() noexcept;
  pkv_stats stats() const;
  void check() const;

 private:
  // The open batch and how far the backend has taken it.
  struct OpenBatch {
    std::unique_ptr<Batch> batch;
    bool copies_done = false;      // by pkv_attention; then an abort keeps them done
    std::vector<uint8_t> planned;  // [rank]: its pool's Backend::plan ran for it
    std::vector<uint8_t> plan;     // its exported plan, once exported
  };

  // Every rank's pool (DESIGN.md §10): one, or tp_size x pp_size with ranks ALL; each executes
  // the same copies and plan on its stage's layers. The store and the host tier's view are rank
  // 0's (a store needs one rank, for now).
  struct RankPool {
    pkv_engine_params params;  // the engine's, with this rank's tp_rank and pp_rank
    KvGroups groups;           // its stage's slots (the engine's groups_ for its own stage)
    PoolLayout layout;         // its pool's
    StageLayers stage;         // the layers it holds
    std::unique_ptr<Backend> backend;
  };
  PoolShape pool_shape(const RankPool &rank) const;
  // The rank that computes `layer` in a call of rank `rank` (refused when the layer is another
  // stage's), and the first rank of the layer's stage (pkv_layer_info's pool).
  const RankPool &stage_rank(uint32_t rank, uint32_t layer) const;
  const RankPool &layer_rank(uint32_t layer) const;
  // pkv_attention's checks of one layer's arguments, and its call (engine_layers.cpp).
  void check_attention(uint32_t layer, const LayerSpec &spec, const void *q, const void *k,
                       const void *v, const void *out) const;
  AttentionCall attention_call(uint32_t layer, const LayerSpec &spec, uint32_t rank) const;
  IndexerCall indexer_call(uint32_t layer, const LayerSpec &spec, uint32_t rank) const;
  // The rank a compute call of the open batch runs on: the one its handle names; the batch's
  // own handle names rank 0 on an engine of one rank, none (refused, naming `call`) on others.
  uint32_t compute_rank(const char *call) const;
  // The open batch's copies (every rank's pool, once) and rank's plan, once (every compute
  // call starts with it).
  void prepare_step(uint32_t rank);
  // A layer with an indexer the calls support, else the error naming `call`; its IndexerCall.
  LayerSpec indexed_layer(uint32_t layer, const char *call) const;
  struct pkv_layer_info state_layer_info(uint32_t layer, const LayerSpec &spec,
                                         struct pkv_layer_info info) const;
  void require_length(uint64_t num_tokens) const;
  // A hold's timeout (not UINT32_MAX) reads the clock: refused on one rank of several.
  void require_timeless_hold(uint32_t timeout_ms, const char *what) const;
  // Ends the holds whose deadline passed (tick); then the copies queued before a request began
  // receiving, done at once (step), so a transport may write its blocks.
  void expire_holds() noexcept;
  void flush_copies();
  // Runs compute, which makes tokens of s computed (a step's, or a remote fill's) and returns
  // the boundary of a checkpoint it took (else 0); then the store's write-through of the blocks
  // it sealed into new prefix nodes, and that checkpoint.
  void compute_through(Sequence &s, const std::function<uint32_t()> &compute);
  // A call that decides (makes sequences or batches), refused on an engine of ranks POOL.
  void require_decider(const char *call) const;
  // KV was written under the scales and sinks: a sequence was made, or a plan imported.
  bool kv_written() const { return seqs_.ever_created() || next_import_step_ > 0; }
  PlanShape make_plan_shape() const;  // after the pools are made
  void require_outside_batch(const Sequence &s, const char *what) const;
  void require_manual(const Sequence &s, const char *what) const;
  void require_running(const Sequence &s) const;
  void open(std::unique_ptr<Batch> batch);
  void close(bool ran);  // members leave the batch; ran: their new tokens are computed
  // The store tier. Before an admission of tokens under salt: the blocks after where the prefix
  // tree stops are asked of the store (each KV group's: store_lookup) and those verified are
  // staged in the host tier, for the admission to load. Never throws for the store's sake.
  void consult_store(const PrefixKeys &keys, const int32_t *tokens, uint32_t n);
  // After s's blocks were sealed (write-through): the new prefix blocks go to the writer.
  void write_sealed(const Sequence &s);
  // With STATE layers: the store's checkpoints (store_tier_state.cpp) are on; s's checkpoint just
  // taken at boundary b (its working slot's state) goes to the writer.
  void enable_store_state();
  void write_checkpoint(const Sequence &s, uint32_t b);
  // An offloaded block leaving the host tier goes to the writer (write-back); wait: for room in
  // the queue instead of dropping it (the flush at destroy).
  void write_back(const EvictedHostBlock &b, bool wait);
  void note_store_events();

  std::mutex mutex_;
  std::string last_error_;
  pkv_kv_budget budget_;  // before params_: params_ is resolved from it
  pkv_engine_params params_;
  KvGroups groups_;                      // the layers' windows and groups
  std::vector<uint32_t> layer_windows_;  // params_.layer_windows points here (or is null)
  // fp8: [ranks][num_layers][kv_heads_per_rank] (the most any layer has); else empty
  std::vector<float> k_scales_, v_scales_;
  std::vector<pkv_layer_spec> layer_specs_;  // params_.layer_specs points here (or is null)
  std::vector<LayerSpec> specs_;             // layer_specs resolved; empty without them
  StateLayout state_layout_;                 // each STATE layer's parts within a state slot
  std::vector<float> sinks_;                 // [ranks][num_layers][q heads per rank] when any has
  std::vector<uint8_t> sinks_set_;           // [num_layers]: 1 once pkv_set_attention_sinks ran
  float softmax_scale_;
  std::vector<RankPool> pools_;
  Backend *backend_ = nullptr;            // pools_[0]'s
  std::vector<int32_t> rank_device_ids_;  // params_.rank_device_ids points here (or is null)
  uint32_t call_rank_ = kAnyRank;
  PlanShape plan_shape_;           // what a plan's shape must be here (engine_plans.cpp)
  uint64_t next_export_step_ = 0;  // the step of the next plan exported
  uint64_t next_import_step_ = 0;  // ranks POOL: the step the next import must be
  // Before events_ and blocks_, which hand it events: it is destroyed after them.
  std::unique_ptr<EventPublisherConfig>
      publisher_config_;  // the caller's pkv_event_publisher_params, owned
  std::unique_ptr<KvPublisher> publisher_;
  KvEvents events_;
  BlockManager blocks_;
  SequenceTable seqs_;
  StatePool states_;     // before scheduler_, which holds it
  Transfers transfers_;  // likewise
  Scheduler scheduler_;
  std::unique_ptr<OpenBatch> open_;
  std::unique_ptr<StoreConfig> store_config_;  // the caller's pkv_store_params, owned
  std::unique_ptr<StoreTier> store_;
};

}  // namespace pkv
