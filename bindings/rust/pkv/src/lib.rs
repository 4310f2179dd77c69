//! Safe Rust binding of pkv, a paged KV-cache runtime for LLM inference (libpkv.so.1, C ABI).
//!
//! The library is loaded at run time (dlopen) from `PKV_LIBRARY` or `libpkv.so.1`; its ABI
//! version is checked right after loading. Every failed call returns an `Error` carrying pkv's
//! status and message, and (as in C) changes nothing.
//!
//! ```no_run
//! use pkv::{Device, Dtype, Engine, Params};
//! let params = Params::new()?.num_layers(2).num_q_heads(4).num_kv_heads(2).head_dim(16)
//!     .dtype(Dtype::F32).num_blocks(64).device(Device::Cpu);
//! let engine = Engine::new(&params)?;
//! let a = engine.allocate(&[1, 2, 3, 4, 5], None)?;
//! let mut batch = engine.batch(&[a.seq], None)?;
//! let n = batch.num_tokens();
//! let (q, kv, mut out) = (vec![0.1f32; n * 64], vec![0.2f32; n * 32], vec![0f32; n * 64]);
//! for layer in 0..2 { batch.attention(layer, &q, &kv, &kv, &mut out)?; }
//! batch.end()?;
//! engine.release(a.seq)?;
//! # Ok::<(), pkv::Error>(())
//! ```
mod library;

mod agent;
mod batch;
mod config;
mod element;
mod engine;
mod error;
mod keys;
mod layers;
mod params;
mod profile;
mod publisher;
mod retention;
mod scheduler;
mod segments;
mod seq;
mod shape;
mod sparse;
mod state;
mod store;
mod store_admin;
mod transfers;
mod types;
mod view;

pub use agent::{Agent, AgentCompletion, AgentParams, AgentStats, Peer};
pub use batch::{Batch, BatchError, OpenBatch, RankBatch, StepBatch};
pub use config::{hf_config_digest, hf_config_layer_windows};
pub use element::{Bf16, Element, F16};
pub use engine::{Engine, Tier};
pub use error::{Error, Result, Status};
pub use keys::{block_hash_extra, block_hash_root_lora, ExtraKey, SeqKeys};
pub use layers::{AttentionKind, KvGroupInfo, LayerInfo, LayerKind, LayerSpec};
pub use library::{library, Library, LIBRARY_ENV};
pub use params::{BlockLayout, Device, Dtype, KvLayout, Params, Ranks};
pub use pkv_sys as sys;
pub use profile::{profile, KvGroups};
pub use publisher::{EventFormat, EventPublisherInfo, EventPublisherParams};
pub use retention::{
    CachePin, Retention, CACHE_PRIORITY_MAX, CACHE_PRIORITY_MIN, DEBUG_TEST_CLOCK, MAX_CACHE_RETENTIONS,
    MAX_PINNED_PERCENT,
};
pub use scheduler::Request;
pub use segments::Segment;
pub use seq::{Allocation, AllocationQuery, Seq};
pub use sparse::{IndexerInfo, IndexerSpec, TopkKind, INDEXER_MAX_HEAD_DIM, INDEXER_SCALE_UE8M0};
pub use state::{StateCheckpointPolicy, StatePart, StatePartInfo, MAX_STATE_DIMS, MAX_STATE_PARTS};
pub use store::{MapStore, Store, StoreKey, StoreParams, StoreResult, WriteMode};
pub use store_admin::{StoreAdmin, StoreEntry, StoreInfo, StoreKind, StoreList, ValueState, VerifyResult};
pub use transfers::{TransferOutcome, TransferState};
pub use transfers::{TRANSFER_TIMEOUT_DEFAULT_MS, TRANSFER_TIMEOUT_NONE};
pub use types::{BudgetSource, FinishReason, KvBudget, KvEvent, KvEventKind, PoolInfo, SeqInfo, Stats};
pub use view::{BatchView, CopyKind};

/// This crate's version: pkv.h's `PKV_VERSION_MAJOR.MINOR.PATCH`, which `gen.sh` writes into
/// both crates' Cargo.toml (a test checks they agree).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

use std::os::raw::c_void;

/// The canonical hash of a salt's root (`pkv_block_hash_root`): the parent of a sequence's
/// first block. An empty salt is no salt.
pub fn block_hash_root(seed: u64, salt: &[u8]) -> Result<u64> {
    let lib = library()?;
    let len = library::count(salt.len(), "salt")?;
    let mut out = 0u64;
    // SAFETY: salt has len bytes.
    unsafe { library::call!(lib, pkv_block_hash_root(seed, salt.as_ptr() as *const c_void, len, &mut out))? };
    Ok(out)
}

/// The canonical hash of one block of tokens under `parent_hash` (`pkv_block_hash`).
pub fn block_hash(seed: u64, parent_hash: u64, tokens: &[i32]) -> Result<u64> {
    let lib = library()?;
    let n = library::count(tokens.len(), "tokens")?;
    let mut out = 0u64;
    // SAFETY: tokens has n elements.
    unsafe { library::call!(lib, pkv_block_hash(seed, parent_hash, tokens.as_ptr(), n, &mut out))? };
    Ok(out)
}
