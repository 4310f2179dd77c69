//! `Params`: the engine parameters, a builder over `pkv_engine_params` whose defaults come from
//! the library (`pkv_engine_params_init`); the KV profiler (`profile`).
use std::os::raw::c_char;

use pkv_sys as sys;

use crate::error::Result;
use crate::library::{call, library, sized, Library};

/// How a budget was decided: `pkv_kv_budget` (`source` is a `PKV_BUDGET_*`).
pub type KvBudget = sys::pkv_kv_budget;

/// Where the pool lives (`PKV_DEVICE_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

/// The KV (and activation) dtype (`PKV_DTYPE_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    F32,
    F16,
    Bf16,
}

impl Dtype {
    pub fn code(self) -> i32 {
        (match self {
            Dtype::F32 => sys::PKV_DTYPE_F32,
            Dtype::F16 => sys::PKV_DTYPE_F16,
            Dtype::Bf16 => sys::PKV_DTYPE_BF16,
        }) as i32
    }
    pub fn from_code(code: i32) -> Option<Dtype> {
        [Dtype::F32, Dtype::F16, Dtype::Bf16].into_iter().find(|d| d.code() == code)
    }
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::F16 | Dtype::Bf16 => 2,
        }
    }
}

/// Engine parameters. `Params::new()` holds the library's defaults; each setter replaces one
/// field and returns the builder. `raw()` / `raw_mut()` reach every field of the C struct.
///
/// ```no_run
/// let p = pkv::Params::new()?.num_layers(2).num_q_heads(4).num_kv_heads(2).head_dim(16)
///     .dtype(pkv::Dtype::F32).num_blocks(64).device(pkv::Device::Cpu);
/// # Ok::<(), pkv::Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Params {
    raw: sys::pkv_engine_params,
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
        Ok(Params { raw, lib })
    }

    /// The defaults with the model shape read from a Hugging Face `config.json` text.
    pub fn from_hf_config(json: &str) -> Result<Params> {
        Params::new()?.hf_config(json)
    }

    /// Replaces the model-shape fields (layers, heads, head_dim, dtype, max_model_len) with those
    /// of a Hugging Face `config.json` text (`pkv_engine_params_from_hf_config`).
    pub fn hf_config(mut self, json: &str) -> Result<Params> {
        let text = json.as_ptr() as *const c_char;
        // SAFETY: text points at json.len() bytes (no NUL needed); raw is a full struct.
        unsafe { call!(self.lib, pkv_engine_params_from_hf_config(&mut self.raw, text, json.len()))? };
        Ok(self)
    }

    /// Wraps parameters read back from an engine (`pkv_engine_params_get`).
    pub(crate) fn from_raw(raw: sys::pkv_engine_params, lib: &'static Library) -> Params {
        Params { raw, lib }
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

    /// Tensor parallelism: `size` ranks, this engine being rank `rank`.
    pub fn tensor_parallel(mut self, size: u32, rank: u32) -> Params {
        self.raw.tp_size = size;
        self.raw.tp_rank = rank;
        self
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
    }

    /// The KV budget these parameters give (`pkv_profile`); see `profile_detailed` for every
    /// term of a budget that is too small.
    pub fn profile(&self) -> Result<KvBudget> {
        let (budget, status) = self.profile_detailed();
        status.map(|()| budget)
    }

    /// `pkv_profile` with its budget even when the call fails: on `Status::OutOfMemory` every term
    /// is filled, `shortfall_bytes` included.
    pub fn profile_detailed(&self) -> (KvBudget, Result<()>) {
        let mut budget = sized!(sys::pkv_kv_budget);
        // SAFETY: both structs are full ones with struct_size set.
        let status = unsafe { call!(self.lib, pkv_profile(&self.raw, &mut budget)) };
        (budget, status)
    }
}

/// The KV budget of `params` (`pkv_profile`).
pub fn profile(params: &Params) -> Result<KvBudget> {
    params.profile()
}
