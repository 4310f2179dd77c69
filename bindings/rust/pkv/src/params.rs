//! `Params`: the engine parameters, a builder over `pkv_engine_params` whose defaults come from
//! the library (`pkv_engine_params_init`), and the kinds they name (`Device`, `Dtype`,
//! `KvLayout`). What they give before an engine exists (the KV budget, the KV groups) is in
//! profile.rs.
use std::os::raw::c_char;
use std::ptr;
use std::sync::Arc;

use pkv_sys as sys;

use crate::config::layer_windows_of;
use crate::error::{Error, Result, Status};
use crate::layers::RawSpecs;
use crate::library::{call, library, sized, Library};
use crate::publisher::{EventPublisherParams, PublisherStruct};
use crate::types::KvBudget;

/// Where the pool lives (`PKV_DEVICE_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    /// CUDA when a GPU is usable, else the CPU.
    Auto,
    Cpu,
    Cuda,
}

impl Device {
    pub fn code(self) -> i32 {
        (match self {
            Device::Auto => sys::PKV_DEVICE_AUTO,
            Device::Cpu => sys::PKV_DEVICE_CPU,
            Device::Cuda => sys::PKV_DEVICE_CUDA,
        }) as i32
    }
    pub fn from_code(code: i32) -> Option<Device> {
        [Device::Auto, Device::Cpu, Device::Cuda].into_iter().find(|d| d.code() == code)
    }
}

/// The model's dtype (`Params::dtype`: F32, F16, Bf16) and the KV cache's (`Params::kv_dtype`:
/// the model's, or an fp8 kind) (`PKV_DTYPE_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dtype {
    F32,
    F16,
    Bf16,
    /// OCP e4m3fn, one byte, scaled per layer and kv head (`Engine::set_kv_scales`): KV only.
    Fp8E4m3,
    /// OCP e5m2, one byte, scaled per layer and kv head: KV only.
    Fp8E5m2,
}

impl Dtype {
    pub fn code(self) -> i32 {
        (match self {
            Dtype::F32 => sys::PKV_DTYPE_F32,
            Dtype::F16 => sys::PKV_DTYPE_F16,
            Dtype::Bf16 => sys::PKV_DTYPE_BF16,
            Dtype::Fp8E4m3 => sys::PKV_DTYPE_FP8_E4M3,
            Dtype::Fp8E5m2 => sys::PKV_DTYPE_FP8_E5M2,
        }) as i32
    }
    pub fn from_code(code: i32) -> Option<Dtype> {
        [Dtype::F32, Dtype::F16, Dtype::Bf16, Dtype::Fp8E4m3, Dtype::Fp8E5m2]
            .into_iter()
            .find(|d| d.code() == code)
    }
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::F16 | Dtype::Bf16 => 2,
            Dtype::Fp8E4m3 | Dtype::Fp8E5m2 => 1,
        }
    }
    pub fn is_fp8(self) -> bool {
        matches!(self, Dtype::Fp8E4m3 | Dtype::Fp8E5m2)
    }
}

/// Which ranks an engine decides for and holds pools of (`Params::ranks`, pkv 0.10,
/// `PKV_RANKS_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ranks {
    /// The engine is one rank (`tp_rank`, `pp_rank`) and decides for itself: alone, or as every
    /// rank's decider whose plans it exports (`OpenBatch::export_plan`). The default.
    One,
    /// The engine decides for every rank and holds every rank's pool in this process,
    /// `tp_size * pp_size` of them: `OpenBatch::rank` gives a rank's handle for attention.
    All,
    /// The engine is rank (`tp_rank`, `pp_rank`)'s pool only: it runs the plans a decider
    /// exported (`Engine::import_plan`) and decides nothing.
    Pool,
}

impl Ranks {
    pub fn code(self) -> u32 {
        (match self {
            Ranks::One => sys::PKV_RANKS_ONE,
            Ranks::All => sys::PKV_RANKS_ALL,
            Ranks::Pool => sys::PKV_RANKS_POOL,
        }) as u32
    }
    pub fn from_code(code: u32) -> Option<Ranks> {
        [Ranks::One, Ranks::All, Ranks::Pool].into_iter().find(|r| r.code() == code)
    }
}

/// How a block is laid out in the pool (`Params::block_layout`, pkv 0.11,
/// `PKV_BLOCK_LAYOUT_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockLayout {
    /// A layer's blocks together: a block is 2 x layers segments (`Engine::block_segments`).
    /// The default.
    Layers,
    /// Each block one page of all its KV group's layers (a layer's K, then its V): one segment.
    Page,
}

impl BlockLayout {
    pub fn code(self) -> u32 {
        (match self {
            BlockLayout::Layers => sys::PKV_BLOCK_LAYOUT_LAYERS,
            BlockLayout::Page => sys::PKV_BLOCK_LAYOUT_PAGE,
        }) as u32
    }
    pub fn from_code(code: u32) -> Option<BlockLayout> {
        [BlockLayout::Layers, BlockLayout::Page].into_iter().find(|l| l.code() == code)
    }
}

/// What the cache holds per token per layer (`Params::kv_layout`, `PKV_KV_LAYOUT_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KvLayout {
    /// K and V of each kv head (multi-head, GQA, MQA attention): the default.
    Heads,
    /// One latent of `kv_lora_rank + qk_rope_head_dim` values and no V (multi-head latent
    /// attention: DeepSeek V2/V3, Kimi K2); V is the latent's first `kv_lora_rank` values.
    Mla,
}

impl KvLayout {
    pub fn code(self) -> u32 {
        (match self {
            KvLayout::Heads => sys::PKV_KV_LAYOUT_HEADS,
            KvLayout::Mla => sys::PKV_KV_LAYOUT_MLA,
        }) as u32
    }
    pub fn from_code(code: u32) -> Option<KvLayout> {
        [KvLayout::Heads, KvLayout::Mla].into_iter().find(|l| l.code() == code)
    }
    /// The layout a budget was computed for (its `kv_layout`; `None` for a code this binding
    /// does not know).
    pub fn of(budget: &KvBudget) -> Option<KvLayout> {
        budget.kv_layout
    }
}

/// Engine parameters. `Params::new()` holds the library's defaults; each setter replaces one
/// field and returns the builder. `raw()` / `raw_mut()` reach every field of the C struct but
/// `layer_windows` and `layer_specs`, which the `Params` keeps itself (`layer_windows`,
/// `layer_specs`) and points the struct at only for the calls that read them (their raw
/// pointers are ignored).
///
/// ```no_run
/// let p = pkv::Params::new()?.num_layers(2).num_q_heads(4).num_kv_heads(2).head_dim(16)
///     .dtype(pkv::Dtype::F32).num_blocks(64).device(pkv::Device::Cpu);
/// # Ok::<(), pkv::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Params {
    raw: sys::pkv_engine_params,
    pub(crate) windows: Option<Arc<[u32]>>,
    pub(crate) specs: RawSpecs,
    publisher: Option<Arc<PublisherStruct>>,
    devices: Option<Arc<[i32]>>, // rank_device_ids (pkv 0.10)
    lib: &'static Library,
}

macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident: $t:ty => $field:ident;)*) => {$(
        $(#[$doc])*
        pub fn $name(mut self, value: $t) -> Params {
            self.raw.$field = value;
            self
        }
    )*};
}

impl Params {
    /// The defaults of the default library (`pkv::library()`).
    pub fn new() -> Result<Params> {
        Params::with_library(library()?)
    }

    /// The defaults of `lib` (`pkv_engine_params_init`).
    pub fn with_library(lib: &'static Library) -> Result<Params> {
        let mut raw = sized!(sys::pkv_engine_params);
        // SAFETY: raw is a pkv_engine_params of the size passed.
        unsafe { call!(lib, pkv_engine_params_init(&mut raw, raw.struct_size))? };
        Ok(Params { raw, windows: None, specs: None, publisher: None, devices: None, lib })
    }

    /// The defaults with the model shape read from a Hugging Face `config.json` text.
    pub fn from_hf_config(json: &str) -> Result<Params> {
        Params::new()?.hf_config(json)
    }

    /// Replaces the model-shape fields (layers, heads, head_dim, dtype, max_model_len) and the
    /// windows with those of a Hugging Face `config.json` text
    /// (`pkv_engine_params_from_hf_config`): one window for every layer (Mistral) is
    /// `sliding_window`, windows that differ (Gemma 3, Qwen) are `layer_windows`. An MLA
    /// config (DeepSeek V2/V3, Kimi K2) sets `KvLayout::Mla`, `kv_lora_rank`,
    /// `qk_rope_head_dim`, one kv head of their sum and the model's `softmax_scale`. A model
    /// whose cache needs per-layer specs (gpt-oss's sinks, Gemma 2's soft-cap, Gemma 3n/4, Llama
    /// 4's chunks) is `Status::Unsupported`, naming the field: `hf_config_layers` reads it.
    pub fn hf_config(mut self, json: &str) -> Result<Params> {
        let text = json.as_ptr() as *const c_char;
        let windows = layer_windows_of(self.lib, json)?;
        let mut raw = self.raw;
        raw.layer_windows = ptr::null();
        raw.layer_specs = ptr::null();
        // SAFETY: text points at json.len() bytes (no NUL needed); raw is a full struct.
        unsafe { call!(self.lib, pkv_engine_params_from_hf_config(&mut raw, text, json.len()))? };
        self.raw = raw;
        self.specs = None; // the config replaces the shape: specs of the old layers do not apply
        self.windows = match windows.first() {
            Some(&first) if windows.iter().any(|&w| w != first) => Some(windows.into()),
            _ => None,
        };
        Ok(self)
    }

    /// Wraps parameters read back from an engine (`pkv_engine_params_get`), copying the layer
    /// windows it points at.
    ///
    /// # Safety
    /// `raw.layer_windows` is NULL or points at `raw.num_layers` readable values;
    /// `raw.layer_specs` is NULL or points at `raw.num_layers` specs of `raw.layer_spec_size`
    /// bytes each; `raw.rank_device_ids` is NULL or points at `tp_size * pp_size` values.
    pub(crate) unsafe fn from_raw(mut raw: sys::pkv_engine_params, lib: &'static Library) -> Params {
        let windows = if raw.layer_windows.is_null() {
            None
        } else {
            Some(std::slice::from_raw_parts(raw.layer_windows, raw.num_layers as usize).into())
        };
        let specs = if raw.layer_specs.is_null() {
            None
        } else {
            // a spec of another size: each is read at its stride, this binding's fields only
            let size = std::mem::size_of::<sys::pkv_layer_spec>();
            let stride = if raw.layer_spec_size == 0 { size } else { raw.layer_spec_size as usize };
            let base = raw.layer_specs as *const u8;
            let read = |l: usize| {
                let mut s: sys::pkv_layer_spec = std::mem::zeroed();
                ptr::copy_nonoverlapping(base.add(l * stride), &mut s as *mut _ as *mut u8, size.min(stride));
                s
            };
            Some((0..raw.num_layers as usize).map(read).collect::<Vec<_>>().into())
        };
        let devices = if raw.rank_device_ids.is_null() {
            None
        } else {
            Some(std::slice::from_raw_parts(raw.rank_device_ids, num_ranks(&raw)).into())
        };
        raw.layer_windows = ptr::null();
        raw.layer_specs = ptr::null();
        raw.layer_spec_size = 0;
        raw.rank_device_ids = ptr::null();
        raw.event_publisher = ptr::null(); // the engine's copy: used at create only
        Params { raw, windows, specs, publisher: None, devices, lib }
    }

    /// The struct pkv reads: `raw()` with `layer_windows` and `layer_specs` pointing at this
    /// Params' windows and specs (valid while `self` lives). `Status::InvalidArgument` when they are not `num_layers`.
    pub(crate) fn c_params(&self) -> Result<sys::pkv_engine_params> {
        let mut raw = self.raw;
        raw.layer_windows = match &self.windows {
            None => ptr::null(),
            Some(w) if w.len() == raw.num_layers as usize => w.as_ptr(),
            Some(w) => {
                return Err(Error::new(
                    Status::InvalidArgument,
                    format!("layer_windows has {} entries, num_layers is {}", w.len(), raw.num_layers),
                ))
            }
        };
        (raw.layer_specs, raw.layer_spec_size) = match &self.specs {
            None => (ptr::null(), 0),
            Some(s) if s.len() == raw.num_layers as usize => {
                (s.as_ptr(), std::mem::size_of::<sys::pkv_layer_spec>() as u32)
            }
            Some(s) => {
                return Err(Error::new(
                    Status::InvalidArgument,
                    format!(
                        "layer_specs has {} specs, num_layers is {}: give one per layer",
                        s.len(),
                        raw.num_layers
                    ),
                ))
            }
        };
        raw.rank_device_ids = match &self.devices {
            None => ptr::null(),
            Some(d) if d.len() == num_ranks(&raw) => d.as_ptr(),
            Some(d) => {
                return Err(Error::new(
                    Status::InvalidArgument,
                    format!(
                        "rank_device_ids has {} devices, tp_size x pp_size is {}: one per rank",
                        d.len(),
                        num_ranks(&raw)
                    ),
                ))
            }
        };
        raw.event_publisher = self.publisher.as_ref().map_or(ptr::null(), |p| p.as_ptr());
        Ok(raw)
    }

    pub fn raw(&self) -> &sys::pkv_engine_params {
        &self.raw
    }
    pub fn raw_mut(&mut self) -> &mut sys::pkv_engine_params {
        &mut self.raw
    }
    pub fn library(&self) -> &'static Library {
        self.lib
    }
    pub fn get_dtype(&self) -> Option<Dtype> {
        Dtype::from_code(self.raw.dtype)
    }
    pub fn get_device(&self) -> Option<Device> {
        Device::from_code(self.raw.device)
    }
    /// The KV cache's dtype as set (`None` for 0: the model's).
    pub fn get_kv_dtype(&self) -> Option<Dtype> {
        if self.raw.kv_dtype == 0 {
            None
        } else {
            Dtype::from_code(self.raw.kv_dtype)
        }
    }
    /// Each layer's window, when set per layer.
    pub fn get_layer_windows(&self) -> Option<&[u32]> {
        self.windows.as_deref()
    }
    /// The cache's layout (`None` for a code this binding does not know).
    pub fn get_kv_layout(&self) -> Option<KvLayout> {
        KvLayout::from_code(self.raw.kv_layout)
    }
    /// An MLA cache's latent: (`kv_lora_rank`, `qk_rope_head_dim`); (0, 0) for `Heads`.
    pub fn get_mla_dims(&self) -> (u32, u32) {
        (self.raw.kv_lora_rank, self.raw.qk_rope_head_dim)
    }

    /// The cache's layout (pkv 0.3): `KvLayout::Heads` (the default) or `KvLayout::Mla`, which
    /// needs `kv_lora_rank` and `qk_rope_head_dim`, `num_kv_heads(1)`, `head_dim` their sum,
    /// a `softmax_scale` and no sliding window. `from_hf_config` sets all of them for an MLA
    /// config (DeepSeek V2/V3, Kimi K2).
    pub fn kv_layout(mut self, layout: KvLayout) -> Params {
        self.raw.kv_layout = layout.code();
        self
    }
    /// `KvLayout::Mla` with its latent: `kv_lora_rank` compressed values and `qk_rope_head_dim`
    /// rotary ones (DeepSeek V3: 512 and 64); sets `num_kv_heads` to 1 and `head_dim` to their
    /// sum.
    pub fn mla(self, kv_lora_rank: u32, qk_rope_head_dim: u32) -> Params {
        self.kv_layout(KvLayout::Mla)
            .kv_lora_rank(kv_lora_rank)
            .qk_rope_head_dim(qk_rope_head_dim)
            .num_kv_heads(1)
            .head_dim(kv_lora_rank.saturating_add(qk_rope_head_dim))
    }

    /// The KV cache's dtype: the model's (the default), or `Dtype::Fp8E4m3` / `Fp8E5M2` (one
    /// byte per element; scales from `Engine::set_kv_scales`).
    pub fn kv_dtype(mut self, dtype: Dtype) -> Params {
        self.raw.kv_dtype = dtype.code();
        self
    }
    /// Each layer's sliding window (0 = full attention), in place of `sliding_window`: one per
    /// layer, so `num_layers` of them (checked when the params are used). Kept by the Params.
    pub fn layer_windows(mut self, windows: &[u32]) -> Params {
        self.windows = Some(windows.into());
        self
    }
    /// Drops the per-layer windows (`sliding_window` applies to every layer again).
    pub fn without_layer_windows(mut self) -> Params {
        self.windows = None;
        self
    }
    /// KV events on the wire (pkv 0.3): an engine created with these params publishes its KV
    /// events over ZeroMQ (`Engine::event_publisher_info`). Kept by the Params (a copy), read at
    /// create only: `Engine::params()` has none. A library built without libzmq refuses the
    /// engine (`Status::Unsupported`); an endpoint that cannot be bound is `Status::Events`.
    pub fn event_publisher(mut self, publisher: &EventPublisherParams) -> Params {
        self.publisher = Some(PublisherStruct::new(publisher));
        self
    }
    /// Drops the event publisher.
    pub fn without_event_publisher(mut self) -> Params {
        self.publisher = None;
        self
    }

    /// Tensor parallelism: `size` ranks, this engine being rank `rank`.
    pub fn tensor_parallel(mut self, size: u32, rank: u32) -> Params {
        self.raw.tp_size = size;
        self.raw.tp_rank = rank;
        self
    }
    /// Pipeline parallelism (pkv 0.10): `size` stages (1 .. num_layers), this engine being
    /// stage `rank` (`Ranks::One` and `Ranks::Pool`; 0 with `Ranks::All`). A stage's pool holds
    /// its layers only (`PoolInfo::first_layer .. end_layer`).
    pub fn pipeline_parallel(mut self, size: u32, rank: u32) -> Params {
        self.raw.pp_size = size;
        self.raw.pp_rank = rank;
        self
    }
    /// Which ranks the engine decides for and holds pools of (pkv 0.10): `Ranks::One` (the
    /// default), `Ranks::All` or `Ranks::Pool` (which needs `num_blocks`, the decider's).
    pub fn ranks(mut self, ranks: Ranks) -> Params {
        self.raw.ranks = ranks.code();
        self
    }
    /// `Ranks::All` on CUDA (pkv 0.10): each rank's CUDA device, `tp_size * pp_size` of them
    /// (rank `pp_rank * tp_size + tp_rank`; ranks may share one), in place of `device_id`.
    /// Kept by the Params, read at create only; refused on the CPU and with `Ranks::One` or
    /// `Ranks::Pool`.
    pub fn rank_device_ids(mut self, devices: &[i32]) -> Params {
        self.devices = Some(devices.into());
        self
    }
    /// Drops the per-rank devices (every rank on `device_id`).
    pub fn without_rank_device_ids(mut self) -> Params {
        self.devices = None;
        self
    }
    /// The engine's ranks (`None` for a code this binding does not know).
    pub fn get_ranks(&self) -> Option<Ranks> {
        Ranks::from_code(self.raw.ranks)
    }
    /// How a block is laid out in the pool (pkv 0.11): `BlockLayout::Layers` (the default) or
    /// `BlockLayout::Page` (one segment a block, for transports; not with pipeline stages).
    pub fn block_layout(mut self, layout: BlockLayout) -> Params {
        self.raw.block_layout = layout.code();
        self
    }
    /// The pool's block layout (`None` for a code this binding does not know).
    pub fn get_block_layout(&self) -> Option<BlockLayout> {
        BlockLayout::from_code(self.raw.block_layout)
    }
    /// Each rank's CUDA device, when set.
    pub fn get_rank_device_ids(&self) -> Option<&[i32]> {
        self.devices.as_deref()
    }

    pub fn dtype(mut self, dtype: Dtype) -> Params {
        self.raw.dtype = dtype.code();
        self
    }
    pub fn device(mut self, device: Device) -> Params {
        self.raw.device = device.code();
        self
    }
    pub fn prefix_caching(mut self, on: bool) -> Params {
        self.raw.enable_prefix_caching = u32::from(on);
        self
    }
    /// Queue KV events for `Engine::drain_kv_events`.
    pub fn kv_events(mut self, on: bool) -> Params {
        self.raw.enable_kv_events = u32::from(on);
        self
    }
    /// With a host tier and prefix caching, keep cached blocks evicted from the pool in the host
    /// tier, and load them back on a later prefix hit (`CopyKind::Offload` / `Load`). On by
    /// default; off, the host tier holds swapped-out sequences only.
    pub fn host_offload(mut self, on: bool) -> Params {
        self.raw.host_offload = u32::from(on);
        self
    }

    setters! {
        num_layers: u32 => num_layers;
        num_q_heads: u32 => num_q_heads;
        /// Must divide `num_q_heads`.
        num_kv_heads: u32 => num_kv_heads;
        head_dim: u32 => head_dim;
        /// Longest sequence in tokens; 0 = no limit.
        max_model_len: u32 => max_model_len;
        /// Tokens per block.
        block_size: u32 => block_size;
        /// Blocks in the pool; 0 = as many as the memory budget allows.
        num_blocks: u32 => num_blocks;
        /// Seed of the canonical block hash.
        hash_seed: u64 => hash_seed;
        device_id: i32 => device_id;
        /// CPU worker threads; 0 = one per core.
        num_threads: u32 => num_threads;
        /// `PKV_DEBUG_*` bits: for tests of pkv itself.
        debug_flags: u32 => debug_flags;
        memory_utilization: f64 => memory_utilization;
        kv_cache_bytes: u64 => kv_cache_bytes;
        memory_total_bytes: u64 => memory_total_bytes;
        memory_used_bytes: u64 => memory_used_bytes;
        reserve_bytes: u64 => reserve_bytes;
        /// 0 = 1/sqrt(head_dim).
        softmax_scale: f32 => softmax_scale;
        max_num_seqs: u32 => max_num_seqs;
        max_num_batched_tokens: u32 => max_num_batched_tokens;
        /// Events kept until drained; 0 = 65536.
        kv_events_capacity: u32 => kv_events_capacity;
        /// Blocks of the host tier (swap space); 0 = from `host_cache_bytes`.
        host_num_blocks: u32 => host_num_blocks;
        /// The host tier's budget in bytes when `host_num_blocks` is 0; 0 = no host tier.
        host_cache_bytes: u64 => host_cache_bytes;
        /// `pkv_step`'s preemption: `sys::PKV_PREEMPT_RECOMPUTE` (default), `_SWAP` (needs the
        /// host tier) or `_AUTO`.
        preemption_mode: u32 => preemption_mode;
        /// Keys each token attends to in every layer `layer_windows` does not set; 0 = full
        /// attention.
        sliding_window: u32 => sliding_window;
        /// MLA: the latent's compressed part, >= 1; 0 for `KvLayout::Heads`.
        kv_lora_rank: u32 => kv_lora_rank;
        /// MLA: the latent's rotary part; 0 for `KvLayout::Heads`.
        qk_rope_head_dim: u32 => qk_rope_head_dim;
        /// KV transfers (pkv 0.12): the most block references held for transfers out at once
        /// (`Engine::hold`, `Request::hold_on_finish`), at most `num_blocks`; 0 = half the
        /// pool's blocks.
        max_held_blocks: u32 => max_held_blocks;
    }
}

/// `tp_size * pp_size` (a `pp_size` of 0 is 1): the ranks of `Ranks::All`, `rank_device_ids`'
/// length.
fn num_ranks(raw: &sys::pkv_engine_params) -> usize {
    raw.tp_size as usize * raw.pp_size.max(1) as usize
}
