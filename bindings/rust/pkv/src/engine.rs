//! `Engine`: one pkv engine (a KV pool and its sequences), destroyed on drop: its creation, what
//! it reports, its batches. A sequence's own calls are in seq.rs, the scheduler's in scheduler.rs.
use std::os::raw::c_void;
use std::ptr::{self, NonNull};

use pkv_sys as sys;

use crate::batch::Batch;
use crate::error::{Error, Result, Status};
use crate::library::{call, count, sized, Library};
use crate::params::{Device, Dtype, KvLayout, Params};
use crate::profile::KvGroups;
use crate::publisher::EventPublisherInfo;
use crate::seq::Seq;
use crate::store::{Bridge, StoreParams};
use crate::types::{KvBudget, KvEvent, PoolInfo, SeqInfo, Stats};

/// Where a sequence's KV is (`struct pkv_seq_info.kv_tier`) or a KV event's block is
/// (`pkv_kv_event.medium`), a `PKV_TIER_*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tier {
    /// No KV held: waiting, preempted or finished; for an event, every medium (`ALL_CLEARED`,
    /// `OVERFLOW`).
    None,
    /// In pool blocks.
    Device,
    /// In host-tier blocks: swapped out (`Engine::swap_out`), or an offloaded cached block
    /// (`Params::host_offload`).
    Host,
    /// Fetched from the store tier (a stored event's medium).
    Store,
}

impl Tier {
    pub fn code(self) -> u32 {
        (match self {
            Tier::None => sys::PKV_TIER_NONE,
            Tier::Device => sys::PKV_TIER_DEVICE,
            Tier::Host => sys::PKV_TIER_HOST,
            Tier::Store => sys::PKV_TIER_STORE,
        }) as u32
    }
    pub fn from_code(code: u32) -> Option<Tier> {
        [Tier::None, Tier::Device, Tier::Host, Tier::Store].into_iter().find(|t| t.code() == code)
    }
    /// The tier of a `SeqInfo` (its `kv_tier`; `None` for a code this binding does not know).
    pub fn of(info: &SeqInfo) -> Option<Tier> {
        info.kv_tier
    }
    /// Where a KV event's block was stored or removed (its `medium`).
    pub fn of_event(event: &KvEvent) -> Option<Tier> {
        event.medium
    }
}

/// An engine. Calls on it are serialized inside pkv, so it is `Send + Sync` and every method
/// takes `&self`; error messages are read from the calling thread's `pkv_last_error()`.
/// `close()` (or drop) destroys it; no handle or batch can outlive it:
///
/// ```compile_fail,E0382
/// let engine = pkv::Engine::new(&pkv::Params::new().unwrap()).unwrap();
/// engine.close();
/// engine.stats(); // error[E0382]: use of moved value
/// ```
pub struct Engine {
    raw: NonNull<sys::pkv_engine>,
    lib: &'static Library,
    params: Params,
    pool: sys::pkv_pool_info,
    // each layer's shape when the params have layer specs (attention's checks); else empty
    layers: Vec<sys::pkv_layer_info>,
    // the host's Store pkv calls; dropped after pkv_engine_destroy (Drop), which waits for the
    // queued writes
    _store: Option<Box<Bridge>>,
}

// SAFETY: pkv serializes the calls on one engine and allows them from any thread.
unsafe impl Send for Engine {}
unsafe impl Sync for Engine {}

impl Engine {
    /// Creates an engine (`pkv_engine_create`) in the library `params` came from.
    pub fn new(params: &Params) -> Result<Engine> {
        Engine::create(params, None)
    }

    /// Creates an engine with the store tier `store` (which needs prefix caching and a host
    /// tier). A `Store` is called by pkv until the engine is dropped (which waits for the queued
    /// writes).
    pub fn with_store(params: &Params, store: &StoreParams) -> Result<Engine> {
        Engine::create(params, Some(store))
    }

    fn create(params: &Params, store: Option<&StoreParams>) -> Result<Engine> {
        let lib = params.library();
        let mut p = params.c_params()?; // its layer_windows live in params until create copies them
        let (sp, bridge) = match store {
            Some(s) => {
                let (sp, bridge) = s.build();
                (Some(sp), bridge)
            }
            None => (None, None),
        };
        p.store = sp.as_ref().map_or(ptr::null(), |sp| sp as *const _);
        let mut raw = ptr::null_mut();
        // SAFETY: p is a full struct whose store (and its strings) live until the call returns;
        // raw receives the handle.
        unsafe { call!(lib, pkv_engine_create(&p, &mut raw))? };
        let raw =
            NonNull::new(raw).ok_or_else(|| Error::new(Status::Internal, "pkv_engine_create gave NULL"))?;
        // From here on, an early return destroys the engine (Drop).
        let mut engine = Engine {
            raw,
            lib,
            params: params.clone(),
            pool: sized!(sys::pkv_pool_info),
            layers: Vec::new(),
            _store: bridge,
        };
        let (mut p, mut pool) = (sized!(sys::pkv_engine_params), sized!(sys::pkv_pool_info));
        // SAFETY: engine.raw is live; both structs are full ones. p.layer_windows points into
        // the engine (num_layers values) and is copied out at once; its store pointer is dropped.
        unsafe {
            call!(lib, pkv_engine_params_get(engine.as_raw(), &mut p))?;
            call!(lib, pkv_pool_info(engine.as_raw(), &mut pool))?;
            p.store = ptr::null();
            engine.params = Params::from_raw(p, lib);
        }
        engine.pool = pool;
        if engine.params.specs.is_none() {
            engine.params.specs = params.specs.clone(); // the library did not give them back
        }
        if engine.params.specs.is_some() {
            engine.layers = (0..engine.params.raw().num_layers)
                .map(|l| engine.raw_layer_info(l))
                .collect::<Result<_>>()?;
        }
        Ok(engine)
    }

    /// Destroys the engine now (as dropping it does).
    pub fn close(self) {}

    pub fn library(&self) -> &'static Library {
        self.lib
    }

    /// The handle, for calls through `pkv-sys`. Valid while `self` lives.
    pub fn as_raw(&self) -> *mut sys::pkv_engine {
        self.raw.as_ptr()
    }

    /// The effective parameters (num_blocks and device resolved), as of creation; its store
    /// pointer is NULL (the store is the engine's).
    pub fn params(&self) -> Params {
        self.params.clone()
    }

    /// The pool's layout (`pkv_pool_info`), as of creation. An MLA engine's `k_base` holds the
    /// latents and its `v_base` and `host_v_base` are null. Layers of unequal bytes (pkv 0.5)
    /// share pages: `num_layers` 1, `k_base` the first page, `block_stride` the page; each
    /// layer's K and V are where `layer_info` says.
    pub fn pool_info(&self) -> PoolInfo {
        // SAFETY: kernels is a static string of the library (pkv.h).
        unsafe { PoolInfo::from_raw(&self.pool) }
    }

    pub(crate) fn raw_pool(&self) -> &sys::pkv_pool_info {
        &self.pool
    }

    /// Layer `layer`'s resolved spec, as of creation, when the engine has layer specs.
    pub(crate) fn layer_shape(&self, layer: u32) -> Option<&sys::pkv_layer_info> {
        self.layers.get(layer as usize)
    }

    /// The effective parameters' C struct (its pointers are NULL).
    pub(crate) fn params_raw(&self) -> &sys::pkv_engine_params {
        self.params.raw()
    }

    pub fn device(&self) -> Option<Device> {
        Device::from_code(self.pool.device)
    }

    /// The model's dtype: `attention`'s q, k, v and out (`PoolInfo::model_dtype`).
    pub fn dtype(&self) -> Option<Dtype> {
        // Only an fp8 cache differs from the model (a 0.1 library has no model_dtype, nor fp8).
        match Dtype::from_code(self.pool.dtype) {
            Some(kv) if kv.is_fp8() => Dtype::from_code(self.pool.model_dtype),
            other => other,
        }
    }

    /// The pool's elements: the model's dtype or an fp8 kind (`PoolInfo::dtype`).
    pub fn kv_dtype(&self) -> Option<Dtype> {
        Dtype::from_code(self.pool.dtype)
    }

    /// How the engine's layers are grouped (`pkv_kv_groups` of its parameters).
    pub fn kv_groups(&self) -> Result<KvGroups> {
        self.params.kv_groups()
    }

    /// fp8 KV: `layer`'s K and V scales, one per kv head of this rank each (finite, > 0; 1.0
    /// until set), before the first sequence (`pkv_set_kv_scales`). `Status::State` once a
    /// sequence was made; `Status::InvalidArgument` for a cache that is not fp8. An MLA engine
    /// or a K = V layer has no V scales: `set_k_scales`. With layer specs (pkv 0.5) each layer
    /// has its own kv heads; a shared layer has no scales (it reads its source's codes with the
    /// source's).
    pub fn set_kv_scales(&self, layer: u32, k_scales: &[f32], v_scales: &[f32]) -> Result<()> {
        let heads = self.kv_heads_of(layer);
        if k_scales.len() != heads || v_scales.len() != heads {
            return Err(Error::new(
                Status::InvalidArgument,
                format!(
                    "set_kv_scales: {} k and {} v scales, layer {} has {} kv heads per rank",
                    k_scales.len(),
                    v_scales.len(),
                    layer,
                    heads
                ),
            ));
        }
        // SAFETY: both slices have kv_heads_per_rank elements, what pkv reads.
        unsafe {
            call!(self.lib, pkv_set_kv_scales(self.as_raw(), layer, k_scales.as_ptr(), v_scales.as_ptr()))
        }
    }

    /// fp8 KV on a `KvLayout::Mla` engine (pkv 0.3): `layer`'s latent scale (one value: the
    /// latent is one kv head), with no V scales (pkv gets NULL); as `set_kv_scales` otherwise.
    pub fn set_mla_scales(&self, layer: u32, k_scales: &[f32]) -> Result<()> {
        self.k_scales("set_mla_scales", layer, k_scales)
    }

    /// fp8 KV of a layer without V scales (pkv gets NULL): an MLA engine's (as `set_mla_scales`)
    /// or a K = V layer's (pkv 0.5: its V is its K), one scale per kv head of the layer on this
    /// rank; as `set_kv_scales` otherwise.
    pub fn set_k_scales(&self, layer: u32, k_scales: &[f32]) -> Result<()> {
        self.k_scales("set_k_scales", layer, k_scales)
    }

    fn k_scales(&self, call: &str, layer: u32, k_scales: &[f32]) -> Result<()> {
        let heads = self.kv_heads_of(layer);
        if k_scales.len() != heads {
            return Err(Error::new(
                Status::InvalidArgument,
                format!(
                    "{}: {} scales, layer {} has {} kv heads per rank",
                    call,
                    k_scales.len(),
                    layer,
                    heads
                ),
            ));
        }
        // SAFETY: k_scales has the layer's kv heads per rank elements; v NULL: no V scales.
        unsafe { call!(self.lib, pkv_set_kv_scales(self.as_raw(), layer, k_scales.as_ptr(), ptr::null())) }
    }

    /// `layer`'s kv heads per rank: its own with layer specs, else the pool's.
    fn kv_heads_of(&self, layer: u32) -> usize {
        self.layer_shape(layer).map_or(self.pool.kv_heads, |l| l.kv_heads) as usize
    }

    /// The cache's layout (`Params::kv_layout`).
    pub fn kv_layout(&self) -> Option<KvLayout> {
        self.params.get_kv_layout()
    }

    /// The pool's KV budget (`pkv_engine_budget`).
    pub fn budget(&self) -> Result<KvBudget> {
        let mut out = sized!(sys::pkv_kv_budget);
        // SAFETY: live handle, full struct.
        unsafe { call!(self.lib, pkv_engine_budget(self.as_raw(), &mut out))? };
        Ok(KvBudget::from_raw(&out))
    }

    /// What the engine's event publisher did (`pkv_event_publisher_info`; `Params::event_publisher`):
    /// the endpoints as bound and its counters. `Status::State` when the engine has none.
    pub fn event_publisher_info(&self) -> Result<EventPublisherInfo> {
        let mut info = sized!(sys::pkv_event_publisher_info);
        // SAFETY: the engine is live; info is a full struct; its strings live as long as the
        // engine and are copied out at once.
        unsafe {
            call!(self.lib, pkv_event_publisher_info(self.as_raw(), &mut info))?;
            Ok(EventPublisherInfo::from_raw(&info))
        }
    }

    /// The store's last problem (a miss by error, a rejected value, a failed write); "" when
    /// there was none or the engine has no store (`pkv_engine_store_error`).
    pub fn store_error(&self) -> Result<String> {
        let mut len = 0u32;
        // SAFETY: live handle; out NULL with cap 0, then a buffer of cap bytes.
        unsafe { call!(self.lib, pkv_engine_store_error(self.as_raw(), ptr::null_mut(), 0, &mut len))? };
        let mut buf = vec![0u8; len as usize + 1];
        let cap = count(buf.len(), "store error")?;
        unsafe {
            call!(self.lib, pkv_engine_store_error(self.as_raw(), buf.as_mut_ptr() as *mut _, cap, &mut len))?
        };
        buf.truncate((len as usize).min(buf.len() - 1));
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }

    /// The pool's counters (`pkv_engine_stats`).
    pub fn stats(&self) -> Result<Stats> {
        let mut out = sized!(sys::pkv_stats);
        // SAFETY: live handle, full struct.
        unsafe { call!(self.lib, pkv_engine_stats(self.as_raw(), &mut out))? };
        Ok(Stats::from_raw(&out))
    }

    /// Plans one step over `seqs` (`pkv_batch_begin`): each computes its next `num_new_tokens[i]`
    /// uncomputed tokens, or all of them when `num_new_tokens` is `None`.
    pub fn batch(&self, seqs: &[Seq], num_new_tokens: Option<&[u32]>) -> Result<Batch<'_>> {
        let n = count(seqs.len(), "seqs")?;
        if num_new_tokens.map_or(false, |c| c.len() != seqs.len()) {
            return Err(Error::new(Status::InvalidArgument, "num_new_tokens: one count per sequence"));
        }
        let ids: Vec<u64> = seqs.iter().map(|s| s.0).collect();
        let counts = num_new_tokens.map_or(ptr::null(), |c| c.as_ptr());
        let mut raw = ptr::null_mut();
        // SAFETY: ids and counts have n elements (counts may be NULL); raw receives the batch.
        unsafe { call!(self.lib, pkv_batch_begin(self.as_raw(), ids.as_ptr(), counts, n, &mut raw))? };
        Batch::from_raw(self, raw)
    }

    /// Sets the CUDA stream `pkv_attention` runs on (`pkv_engine_set_stream`).
    ///
    /// # Safety
    /// `stream` must be a `cudaStream_t` valid while the engine uses it (NULL on a CPU engine).
    pub unsafe fn set_stream(&self, stream: *mut c_void) -> Result<()> {
        call!(self.lib, pkv_engine_set_stream(self.as_raw(), stream))
    }

    /// Rank `rank`'s pool (`pkv_rank_pool_info`, pkv 0.10) on an engine of `Ranks::All`, as
    /// `pool_info` (rank 0's): `rank`, `num_ranks`, `device_id` (-1 on the CPU), `tp_rank`,
    /// `pp_rank`, and its stage's layers `first_layer .. end_layer`, whose K and V it holds.
    ///
    /// Errors: `Status::InvalidArgument` for a rank not below `num_ranks`.
    pub fn rank_pool_info(&self, rank: u32) -> Result<PoolInfo> {
        let mut raw = sized!(sys::pkv_pool_info);
        // SAFETY: live handle; raw is a full struct. kernels is a static string of the library.
        unsafe {
            call!(self.lib, pkv_rank_pool_info(self.as_raw(), rank, &mut raw))?;
            Ok(PoolInfo::from_raw(&raw))
        }
    }

    /// Sets rank `rank`'s CUDA stream (`pkv_engine_set_rank_stream`, pkv 0.10), on that rank's
    /// device; `set_stream` on an engine of several ranks takes NULL only.
    ///
    /// Errors: `Status::InvalidArgument` for a rank not below `num_ranks`, or a stream other
    /// than NULL on a CPU engine.
    ///
    /// # Safety
    /// `stream` must be a `cudaStream_t` of the rank's device valid while the engine uses it
    /// (NULL on a CPU engine).
    pub unsafe fn set_rank_stream(&self, rank: u32, stream: *mut c_void) -> Result<()> {
        call!(self.lib, pkv_engine_set_rank_stream(self.as_raw(), rank, stream))
    }

    /// Opens the batch a decider exported (`OpenBatch::export_plan`; `pkv_plan_import`, pkv
    /// 0.10) on this engine of `Ranks::Pool`, made with the decider's parameters (`num_blocks`
    /// and `host_num_blocks` included) and this process's `tp_rank` and `pp_rank`. The batch
    /// runs this rank's heads of its stage's layers; `end` or drop it (the decider's batch is
    /// the one that commits). Plans come in the order they were exported, each once; a refused
    /// plan changes nothing.
    ///
    /// Errors: `Status::State` for a plan out of order (a stale one, or one ahead of the next),
    /// while a batch is open, or on an engine not of `Ranks::Pool`; `Status::InvalidArgument`
    /// for bytes that are no plan of this engine's shape (damaged, cut, another version,
    /// another shape: the field named).
    pub fn import_plan(&self, plan: &[u8]) -> Result<Batch<'_>> {
        let (mut raw, bytes, len) = (ptr::null_mut(), plan.as_ptr().cast(), plan.len() as u64);
        // SAFETY: bytes has len readable bytes; raw receives the batch.
        unsafe { call!(self.lib, pkv_plan_import(self.as_raw(), bytes, len, &mut raw))? };
        Batch::from_raw(self, raw)
    }

    /// Checks every block-manager invariant (`pkv_engine_check`): for tests.
    pub fn check(&self) -> Result<()> {
        // SAFETY: live handle.
        unsafe { call!(self.lib, pkv_engine_check(self.as_raw())) }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if let Ok(destroy) = &self.lib.raw().pkv_engine_destroy {
            // SAFETY: the handle is live and no batch borrows the engine any more.
            unsafe { destroy(self.as_raw()) };
        }
    }
}
