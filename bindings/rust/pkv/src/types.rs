//! What pkv reports, as Rust types: `Stats` (`pkv_stats`), `SeqInfo` (`struct pkv_seq_info`),
//! `PoolInfo` (`struct pkv_pool_info`), `KvEvent` (`pkv_kv_event`) and `KvBudget`
//! (`pkv_kv_budget`): plain structs of Rust fields, enums for pkv's codes (`None` for a code this
//! binding does not know: a newer libpkv), `bool` for flags, `String` for text. Field meanings
//! are pkv.h's, named as there. The raw structs stay in `pkv::sys`.
use std::os::raw::c_void;

use pkv_sys as sys;

use crate::engine::Tier;
use crate::library::{codes, text};
use crate::params::{Device, Dtype, KvLayout};
use crate::transfers::TransferState;

/// A plain struct whose fields are the same-named fields of a pkv struct, copied as they are.
macro_rules! plain {
    ($(#[$doc:meta])* $name:ident from $raw:ty { $($(#[$fdoc:meta])* $field:ident: $t:ty,)* }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        pub struct $name { $($(#[$fdoc])* pub $field: $t,)* }
        impl $name {
            pub(crate) fn from_raw(raw: &$raw) -> $name {
                $name { $($field: raw.$field,)* }
            }
        }
    };
}

codes! {
    /// Why a request of `Engine::submit` finished (`PKV_FINISH_*`).
    FinishReason: u32 {
        /// Not finished: it runs or waits.
        None = sys::PKV_FINISH_NONE,
        /// It sampled its stop token (kept in the sequence).
        StopToken = sys::PKV_FINISH_STOP_TOKEN,
        /// It sampled `max_new_tokens`.
        Length = sys::PKV_FINISH_LENGTH,
        /// Its remote KV did not arrive and the host ended it (pkv 0.12; `Engine::receive_end`
        /// with `TransferOutcome::FailedFinish`).
        TransferFailed = sys::PKV_FINISH_TRANSFER_FAILED,
    }
}

codes! {
    /// What a KV event says (`PKV_EVENT_*`).
    KvEventKind: u32 {
        /// A block's KV became reusable under a prefix.
        BlockStored = sys::PKV_EVENT_BLOCK_STORED,
        /// A block's KV is held nowhere any more.
        BlockRemoved = sys::PKV_EVENT_BLOCK_REMOVED,
        /// The whole cache was emptied.
        AllCleared = sys::PKV_EVENT_ALL_CLEARED,
        /// Events were lost to a full queue: a router starts over.
        Overflow = sys::PKV_EVENT_OVERFLOW,
    }
}

codes! {
    /// Which rule decided a budget's `num_blocks` (`PKV_BUDGET_*`).
    BudgetSource: u32 {
        /// `memory_total * memory_utilization - used - reserve`.
        FromUtilization = sys::PKV_BUDGET_FROM_UTILIZATION,
        /// `Params::kv_cache_bytes`.
        FromByteCap = sys::PKV_BUDGET_FROM_BYTE_CAP,
        /// `Params::num_blocks`.
        FixedBlocks = sys::PKV_BUDGET_FIXED_BLOCKS,
    }
}

plain! {
    /// The pool's counters (`pkv_stats`; "cumulative" ones only grow). Each field is pkv.h's.
    Stats from sys::pkv_stats {
        num_blocks: u64, num_free_blocks: u64, num_cached_blocks: u64, num_used_blocks: u64,
        num_seqs: u64, num_preempted_seqs: u64, num_prefix_nodes: u64,
        /// Cumulative.
        prefix_query_tokens: u64,
        /// Cumulative: of `prefix_query_tokens`, served from the cache.
        prefix_hit_tokens: u64,
        num_evictions: u64, num_cow_copies: u64, num_preemptions: u64,
        num_waiting_requests: u64, num_running_requests: u64, num_finished_requests: u64,
        num_scheduled_tokens: u64, num_steps: u64,
        /// The host tier (pkv 0.2; 0: off).
        num_host_blocks: u64,
        num_host_free_blocks: u64, num_swapped_seqs: u64, num_swapped_out_blocks: u64,
        num_swapped_in_blocks: u64, num_swap_preemptions: u64, num_host_cached_blocks: u64,
        device_hit_tokens: u64, host_hit_tokens: u64, num_offloaded_blocks: u64,
        num_loaded_blocks: u64, num_host_evictions: u64,
        /// The store tier (pkv 0.2): blocks unless said otherwise, cumulative.
        store_hit_tokens: u64,
        num_store_lookups: u64, num_store_hits: u64, num_store_misses: u64,
        num_store_rejected: u64, num_store_errors: u64, num_store_puts: u64,
        num_store_put_dropped: u64, num_store_put_errors: u64, num_loading_requests: u64,
        /// Recurrent state (pkv 0.6; 0 without state layers): checkpoint slots holding a state.
        num_state_checkpoints_held: u64,
        /// Cumulative: states copied into a checkpoint slot at a block boundary.
        num_state_checkpoints_taken: u64,
        /// Cumulative: checkpoints dropped, for room or with the last copy of their block.
        num_state_checkpoint_evictions: u64,
        /// Cumulative: admissions that started from a checkpoint.
        num_state_restores: u64,
        /// Cumulative: prompt tokens whose KV was cached but were recomputed, for want of a
        /// checkpoint at that boundary.
        state_fallback_tokens: u64,
        /// Host state slots holding an offloaded checkpoint now (pkv 0.6).
        num_host_state_checkpoints_held: u64,
        /// Cumulative: checkpoints evicted from the device and copied to a host state slot.
        num_state_checkpoints_offloaded: u64,
        /// Cumulative: of `num_state_restores`, from an offloaded checkpoint.
        num_state_restores_from_host: u64,
        /// Retention (pkv 0.8): pool blocks held by pins (each counted once), and pins not yet
        /// unpinned.
        num_pinned_blocks: u64,
        num_pins: u64,
        /// Cumulative: `num_evictions` by the priority a block had when evicted (after its
        /// retention decayed): `CACHE_PRIORITY_MIN`, 0, 1, `CACHE_PRIORITY_MAX`. They sum to it.
        num_evictions_low: u64,
        num_evictions_normal: u64,
        num_evictions_high: u64,
        num_evictions_highest: u64,
        /// The CUDA step path (pkv 0.9; 0 on a CPU engine), cumulative: times pkv waited for
        /// the device, and device or pinned allocations after create (none in a step within
        /// the engine's bounds: `max_num_seqs`, `max_num_batched_tokens`, `max_model_len`).
        num_host_waits: u64,
        num_device_allocs: u64,
        /// KV transfers (pkv 0.12): sequences holding their blocks for a transfer out now, and
        /// their block references (at most `max_held_blocks`).
        num_held_seqs: u64,
        num_held_blocks: u64,
        /// Cumulative: holds ended by `Engine::hold_end` `Done`, by `Failed`, by their timeout.
        num_holds_done: u64,
        num_holds_failed: u64,
        num_holds_timed_out: u64,
        /// Cumulative: `Request::hold_on_finish` requests that finished without a hold
        /// (`max_held_blocks` was reached).
        num_holds_refused: u64,
        /// Requests waiting for their remote KV now, and the blocks they wait for.
        num_receiving_requests: u64,
        num_receiving_blocks: u64,
        /// Cumulative: remote fills ended `Done`, and `Failed` or `FailedFinish`.
        num_receives_done: u64,
        num_receives_failed: u64,
        /// Cumulative: tokens whose KV arrived by remote fills.
        received_tokens: u64,
    }
}

/// One sequence's state (`struct pkv_seq_info`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SeqInfo {
    /// Prompt + appended (and sampled) tokens.
    pub num_tokens: u32,
    /// Tokens whose KV is in the pool (cached ones included).
    pub num_computed_tokens: u32,
    /// Tokens served by the prefix cache at the last admission.
    pub num_cached_tokens: u32,
    /// Length of the block table.
    pub num_blocks: u32,
    /// Preempted, until re-admitted.
    pub is_preempted: bool,
    /// An open batch includes it.
    pub in_batch: bool,
    pub cache_salt_len: u32,
    /// A request of `Engine::submit` (the next three are 0 otherwise).
    pub is_request: bool,
    pub num_prompt_tokens: u32,
    /// Tokens sampled so far (`StepBatch::commit`).
    pub num_generated_tokens: u32,
    pub finish_reason: Option<FinishReason>,
    /// Where its KV is: `Device` in pool blocks, `Host` swapped out, `None` holding no KV.
    pub kv_tier: Option<Tier>,
    /// Host-tier blocks it holds while swapped out.
    pub num_host_blocks: u32,
    /// KV transfers (pkv 0.12): held for a transfer out, receiving one, or neither.
    pub transfer: Option<TransferState>,
    /// Receiving: its blocks `remote_first_block .. remote_first_block + remote_num_blocks` wait
    /// for the remote KV (the local prefix hit before them); else 0.
    pub remote_first_block: u32,
    pub remote_num_blocks: u32,
    /// Receiving: the tokens whose KV arrives; else 0.
    pub num_remote_tokens: u32,
}

impl SeqInfo {
    pub(crate) fn from_raw(r: &sys::pkv_seq_info) -> SeqInfo {
        SeqInfo {
            num_tokens: r.num_tokens,
            num_computed_tokens: r.num_computed_tokens,
            num_cached_tokens: r.num_cached_tokens,
            num_blocks: r.num_blocks,
            is_preempted: r.is_preempted != 0,
            in_batch: r.in_batch != 0,
            cache_salt_len: r.cache_salt_len,
            is_request: r.is_request != 0,
            num_prompt_tokens: r.num_prompt_tokens,
            num_generated_tokens: r.num_generated_tokens,
            finish_reason: FinishReason::from_code(r.finish_reason),
            kv_tier: Tier::from_code(r.kv_tier),
            num_host_blocks: r.num_host_blocks,
            transfer: TransferState::from_code(r.transfer),
            remote_first_block: r.remote_first_block,
            remote_num_blocks: r.remote_num_blocks,
            num_remote_tokens: r.num_remote_tokens,
        }
    }
}

/// One KV event (`pkv_kv_event`), for routers: the canonical hashes of `pkv::block_hash`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KvEvent {
    pub kind: Option<KvEventKind>,
    /// Tokens in the block (the block size).
    pub num_tokens: u32,
    /// 1, 2, 3, ... per engine, never reused.
    pub seq_no: u64,
    pub block_hash: u64,
    /// Of the previous block, or the salt's root hash.
    pub parent_hash: u64,
    /// The tier the block was stored in or removed from; `Tier::None` for `AllCleared` and
    /// `Overflow`, which concern every tier.
    pub medium: Option<Tier>,
    /// The KV group of the block (`Engine::kv_groups`; 0 without windows). A checkpoint of the
    /// recurrent state (pkv 0.6) is in the group one past the KV groups.
    pub group: u32,
    /// The block's LoRA adapter (pkv 0.5; `Request::lora_id`): 0 = none.
    pub lora_id: u64,
    /// Extra keys overlapping the block (pkv 0.5): 0 = none, its hash is `block_hash`'s; else
    /// `block_hash_extra`'s.
    pub num_extra_keys: u32,
}

impl KvEvent {
    pub(crate) fn from_raw(r: &sys::pkv_kv_event) -> KvEvent {
        KvEvent {
            kind: KvEventKind::from_code(r.type_),
            num_tokens: r.num_tokens,
            seq_no: r.seq_no,
            block_hash: r.block_hash,
            parent_hash: r.parent_hash,
            medium: Tier::from_code(r.medium),
            group: r.group,
            lora_id: r.lora_id,
            num_extra_keys: r.num_extra_keys,
        }
    }
}

/// Where the pool is, for a host's own kernels (`struct pkv_pool_info`): each of K and V is
/// `[num_layers][num_blocks][block_size][kv_heads][head_dim]`, strides in elements. An MLA
/// engine's `k_base` holds the latents and its `v_base` and `host_v_base` are null. The bases
/// are addresses (device ones on CUDA), valid while the engine lives; reading them is the host's
/// own unsafe code.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PoolInfo {
    pub device: Option<Device>,
    /// The pool's elements: the model's dtype or an fp8 kind.
    pub dtype: Option<Dtype>,
    /// The model's dtype: `attention`'s q, k, v and out.
    pub model_dtype: Option<Dtype>,
    /// The pool's layer dimension (`KvBudget::group_layers` with KV groups).
    pub num_layers: u32,
    pub num_blocks: u32,
    pub block_size: u32,
    /// Per rank.
    pub kv_heads: u32,
    pub head_dim: u32,
    pub k_base: *mut c_void,
    pub v_base: *mut c_void,
    pub layer_stride: u64,
    pub block_stride: u64,
    pub token_stride: u64,
    pub head_stride: u64,
    /// Bytes of K (and of V).
    pub bytes_per_pool: u64,
    /// The host tier's (pkv 0.2): null and 0 when it is off.
    pub host_k_base: *mut c_void,
    pub host_v_base: *mut c_void,
    pub host_num_blocks: u64,
    pub host_layer_stride: u64,
    pub host_bytes_per_pool: u64,
    pub num_kv_groups: u32,
    /// The attention kernels the engine runs: on the CPU the instruction-set variant picked at
    /// run time ("avx512-bf16", "avx512", "avx2", "baseline"); "cuda".
    pub kernels: String,
    /// Recurrent state (pkv 0.6): `num_state_slots` slots of `state_slot_bytes`, slot s at
    /// `state_base + s * state_slot_bytes` (`LayerInfo::state` says where each layer's parts
    /// are); null and 0 without state layers.
    pub state_base: *mut c_void,
    pub state_slot_bytes: u64,
    /// Working slots and checkpoint slots together.
    pub num_state_slots: u32,
    /// With state layers and a host tier (pkv 0.6): `num_host_state_slots` host slots of
    /// `state_slot_bytes` at `host_state_base` (pinned on CUDA). Slots 0 .. max_num_seqs hold
    /// swapped-out sequences' states, the rest checkpoints offloaded from the device
    /// (`CopyKind::StateOut` / `StateIn`); null and 0 otherwise.
    pub host_state_base: *mut c_void,
    pub num_host_state_slots: u32,
    /// Ranks (pkv 0.10): the rank whose pool this is (`Engine::rank_pool_info`), `pp_rank *
    /// tp_size + tp_rank`, of the engine's `num_ranks` pools (`tp_size * pp_size` with
    /// `Ranks::All`, else 1); its CUDA device (-1 on the CPU), head shard and pipeline stage,
    /// and the stage's layers `first_layer .. end_layer`, whose K and V the pool holds.
    pub rank: u32,
    pub num_ranks: u32,
    pub device_id: i32,
    pub tp_rank: u32,
    pub pp_rank: u32,
    pub first_layer: u32,
    pub end_layer: u32,
}

impl PoolInfo {
    /// # Safety
    /// `r.kernels` is NULL or a valid C string.
    pub(crate) unsafe fn from_raw(r: &sys::pkv_pool_info) -> PoolInfo {
        PoolInfo {
            device: Device::from_code(r.device),
            dtype: Dtype::from_code(r.dtype),
            model_dtype: Dtype::from_code(r.model_dtype),
            num_layers: r.num_layers,
            num_blocks: r.num_blocks,
            block_size: r.block_size,
            kv_heads: r.kv_heads,
            head_dim: r.head_dim,
            k_base: r.k_base,
            v_base: r.v_base,
            layer_stride: r.layer_stride,
            block_stride: r.block_stride,
            token_stride: r.token_stride,
            head_stride: r.head_stride,
            bytes_per_pool: r.bytes_per_pool,
            host_k_base: r.host_k_base,
            host_v_base: r.host_v_base,
            host_num_blocks: r.host_num_blocks,
            host_layer_stride: r.host_layer_stride,
            host_bytes_per_pool: r.host_bytes_per_pool,
            num_kv_groups: r.num_kv_groups,
            kernels: text(r.kernels),
            state_base: r.state_base,
            state_slot_bytes: r.state_slot_bytes,
            num_state_slots: r.num_state_slots,
            host_state_base: r.host_state_base,
            num_host_state_slots: r.num_host_state_slots,
            rank: r.rank,
            num_ranks: r.num_ranks,
            device_id: r.device_id,
            tp_rank: r.tp_rank,
            pp_rank: r.pp_rank,
            first_layer: r.first_layer,
            end_layer: r.end_layer,
        }
    }
}

/// How a KV budget was decided (`pkv_kv_budget`), from `Params::profile` or `Engine::budget`.
/// Each field is pkv.h's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KvBudget {
    /// The device the budget is for (`Auto` resolved).
    pub device: Option<Device>,
    pub source: Option<BudgetSource>,
    pub kv_heads_per_rank: u32,
    pub block_bytes: u64,
    pub bytes_per_token: u64,
    pub total_bytes: u64,
    pub used_bytes: u64,
    pub reserve_bytes: u64,
    pub memory_utilization: f64,
    pub budget_bytes: u64,
    pub num_blocks: u64,
    pub pool_bytes: u64,
    pub max_tokens: u64,
    pub blocks_per_max_seq: u64,
    pub max_seqs_at_max_model_len: u64,
    /// When the budget is too small: how many more bytes are needed.
    pub shortfall_bytes: u64,
    pub host_num_blocks: u64,
    pub host_pool_bytes: u64,
    pub host_total_bytes: u64,
    pub host_available_bytes: u64,
    /// The cache's dtype (the model's unless fp8).
    pub kv_dtype: Option<Dtype>,
    pub num_kv_groups: u32,
    pub group_layers: u32,
    pub padded_layers: u32,
    pub kv_scale_bytes: u64,
    pub kv_layout: Option<KvLayout>,
    /// Layers with a cache of their own (pkv 0.5): `num_layers` less the shared ones.
    pub num_cached_layers: u32,
    /// K and V of one token in every cached layer, this rank.
    pub model_bytes_per_token: u64,
    /// Bytes of a block no layer of its group fills, in the group that leaves the most.
    pub padding_bytes_per_block: u64,
    /// Recurrent state (pkv 0.6; 0 without state layers): the state layers.
    pub num_state_layers: u32,
    /// Working states: `max_num_seqs`.
    pub num_state_slots: u32,
    /// Checkpoint slots.
    pub num_state_checkpoints: u32,
    /// One slot: every state layer's parts, this rank.
    pub state_bytes_per_seq: u64,
    /// `(num_state_slots + num_state_checkpoints) * state_bytes_per_seq`, taken from the budget
    /// before the blocks.
    pub state_pool_bytes: u64,
    /// With a host tier (pkv 0.6): `max_num_seqs` (swapped-out states) plus, with host offload,
    /// `num_state_checkpoints` (checkpoints evicted from the device); else 0.
    pub num_host_state_slots: u32,
    /// `num_host_state_slots * state_bytes_per_seq`: host memory beside `host_pool_bytes`.
    pub host_state_bytes: u64,
    /// Ranks (pkv 0.10): the pools (`tp_size * pp_size` with `Ranks::All`, else 1); with
    /// several, every term above is `bounding_rank`'s, the rank whose pool holds the fewest
    /// blocks, whose device (or the host) `ranks_on_device` ranks share.
    pub num_ranks: u32,
    pub bounding_rank: u32,
    pub ranks_on_device: u32,
}

impl KvBudget {
    pub(crate) fn from_raw(r: &sys::pkv_kv_budget) -> KvBudget {
        KvBudget {
            device: Device::from_code(r.device),
            source: BudgetSource::from_code(r.source),
            kv_heads_per_rank: r.kv_heads_per_rank,
            block_bytes: r.block_bytes,
            bytes_per_token: r.bytes_per_token,
            total_bytes: r.total_bytes,
            used_bytes: r.used_bytes,
            reserve_bytes: r.reserve_bytes,
            memory_utilization: r.memory_utilization,
            budget_bytes: r.budget_bytes,
            num_blocks: r.num_blocks,
            pool_bytes: r.pool_bytes,
            max_tokens: r.max_tokens,
            blocks_per_max_seq: r.blocks_per_max_seq,
            max_seqs_at_max_model_len: r.max_seqs_at_max_model_len,
            shortfall_bytes: r.shortfall_bytes,
            host_num_blocks: r.host_num_blocks,
            host_pool_bytes: r.host_pool_bytes,
            host_total_bytes: r.host_total_bytes,
            host_available_bytes: r.host_available_bytes,
            kv_dtype: Dtype::from_code(r.kv_dtype),
            num_kv_groups: r.num_kv_groups,
            group_layers: r.group_layers,
            padded_layers: r.padded_layers,
            kv_scale_bytes: r.kv_scale_bytes,
            kv_layout: KvLayout::from_code(r.kv_layout),
            num_cached_layers: r.num_cached_layers,
            model_bytes_per_token: r.model_bytes_per_token,
            padding_bytes_per_block: r.padding_bytes_per_block,
            num_state_layers: r.num_state_layers,
            num_state_slots: r.num_state_slots,
            num_state_checkpoints: r.num_state_checkpoints,
            state_bytes_per_seq: r.state_bytes_per_seq,
            state_pool_bytes: r.state_pool_bytes,
            num_host_state_slots: r.num_host_state_slots,
            host_state_bytes: r.host_state_bytes,
            num_ranks: r.num_ranks,
            bounding_rank: r.bounding_rank,
            ranks_on_device: r.ranks_on_device,
        }
    }
}
