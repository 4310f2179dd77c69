//! Retention of cached prefixes (pkv 0.8): the eviction priority a sequence's or a request's
//! blocks keep when released (`Engine::allocate_retained`, `Request::cache_retention`), a
//! prefix's priority set by the host (`Engine::cache_set_priority`), and pins
//! (`Engine::cache_pin`), which hold a prefix's blocks until unpinned.
use pkv_sys as sys;

use crate::engine::Engine;
use crate::error::Result;
use crate::keys::{raw_keys, SeqKeys};
use crate::library::{call, count};
use crate::seq::{Allocation, Seq};

/// The lowest `Retention::priority`: evicted before normal blocks.
pub const CACHE_PRIORITY_MIN: i32 = sys::PKV_CACHE_PRIORITY_MIN as i32;
/// The highest `Retention::priority`: evicted last.
pub const CACHE_PRIORITY_MAX: i32 = sys::PKV_CACHE_PRIORITY_MAX as i32;
/// All pins together hold at most this share (percent) of the pool's blocks.
pub const MAX_PINNED_PERCENT: u32 = sys::PKV_MAX_PINNED_PERCENT as u32;
/// Distinct `retention_ms` values per non-zero priority among cached blocks at once (pkv.h says
/// which one a block joins past it).
pub const MAX_CACHE_RETENTIONS: u32 = sys::PKV_MAX_CACHE_RETENTIONS as u32;
/// `Params::debug_flags` bit: the engine's clock is the environment variable `PKV_TEST_CLOCK_MS`
/// (milliseconds), read once per call, so tests can advance it. For tests of pkv itself.
pub const DEBUG_TEST_CLOCK: u32 = sys::PKV_DEBUG_TEST_CLOCK as u32;

/// How long a prefix's blocks stay cached: `priority` (`CACHE_PRIORITY_MIN ..=
/// CACHE_PRIORITY_MAX`) orders eviction, the lowest first and least recently released first
/// within one; `retention_ms` 0 keeps it for good, else it decays to normal (0) that long after
/// the block's release. `Default` is normal: plain LRU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Retention {
    pub priority: i32,
    pub retention_ms: u32,
}

impl Retention {
    /// `priority` for good (no decay).
    pub fn priority(priority: i32) -> Retention {
        Retention { priority, retention_ms: 0 }
    }
}

/// A pin of a cached prefix (`Engine::cache_pin`): its blocks are never evicted while it lives.
/// Dropping it unpins; `unpin` does so and reports the status; `into_id` keeps the pin past
/// this value, for `Engine::cache_unpin`. Each way unpins at most once.
#[must_use = "dropping a CachePin unpins it at once"]
pub struct CachePin<'e> {
    engine: &'e Engine,
    id: u64,
    num_tokens: u32,
}

impl CachePin<'_> {
    /// The pin's id (never 0, never reused).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The tokens pinned (0 when nothing of the prefix was cached: the pin holds nothing).
    pub fn num_tokens(&self) -> u32 {
        self.num_tokens
    }

    /// Unpins (`pkv_cache_unpin`): the blocks are cached again, with the priority they had.
    /// `Status::State` while a batch is open: the pin is kept then, as `into_id` keeps it (read
    /// `id()` first to retry with `Engine::cache_unpin`).
    pub fn unpin(self) -> Result<()> {
        let (engine, id) = (self.engine, self.into_id());
        engine.cache_unpin(id)
    }

    /// The pin's id, the pin kept: the host unpins it with `Engine::cache_unpin`.
    pub fn into_id(self) -> u64 {
        let id = self.id;
        std::mem::forget(self); // it owns nothing but the pin, which the caller now holds
        id
    }
}

impl std::fmt::Debug for CachePin<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachePin").field("id", &self.id).field("num_tokens", &self.num_tokens).finish()
    }
}

impl Drop for CachePin<'_> {
    /// Unpins. A drop cannot report: one refused (a batch open on the engine) leaves the pin,
    /// as the C API would; call `unpin` where that matters.
    fn drop(&mut self) {
        let _ = self.engine.cache_unpin(self.id);
    }
}

impl Engine {
    /// `allocate_keyed` with a retention (`pkv_allocate`): the blocks `seq` releases
    /// (`release`, `truncate`, `preempt`, a window's give-back, a swap-out) keep `retention`; a
    /// block released by several holders keeps the highest. `Status::InvalidArgument`: a
    /// priority outside `CACHE_PRIORITY_MIN ..= CACHE_PRIORITY_MAX`, nothing changed.
    pub fn allocate_retained(
        &self,
        tokens: &[i32],
        keys: &SeqKeys<'_>,
        retention: Retention,
    ) -> Result<Allocation> {
        let n = count(tokens.len(), "tokens")?;
        let raw = raw_keys(keys.extra_keys)?;
        let mut sp = self.keyed_params(keys, &raw)?;
        (sp.cache_priority, sp.cache_retention_ms) = (retention.priority, retention.retention_ms);
        let (mut seq, mut cached) = (0u64, 0u32);
        // SAFETY: tokens has n elements; sp points at keys' salt and raw, which outlive the call.
        unsafe {
            call!(
                self.library(),
                pkv_allocate(self.as_raw(), tokens.as_ptr(), n, &sp, &mut seq, &mut cached)
            )?
        };
        Ok(Allocation { seq: Seq(seq), num_cached_tokens: cached })
    }

    /// Gives the pool blocks the prefix cache holds of the prefix `tokens` (its full blocks,
    /// under `keys`, in every KV group) `retention` (`pkv_cache_set_priority`): cached blocks
    /// move in eviction order at once, blocks in use keep it for their release. Returns how
    /// many blocks took it. `Status::InvalidArgument` (a priority out of range),
    /// `Status::State` (a batch is open): nothing changed.
    pub fn cache_set_priority(
        &self,
        tokens: &[i32],
        keys: &SeqKeys<'_>,
        retention: Retention,
    ) -> Result<u32> {
        let n = count(tokens.len(), "tokens")?;
        let raw = raw_keys(keys.extra_keys)?;
        let sp = self.keyed_params(keys, &raw)?;
        let mut blocks = 0u32;
        // SAFETY: as in allocate_retained.
        unsafe {
            call!(
                self.library(),
                pkv_cache_set_priority(
                    self.as_raw(),
                    tokens.as_ptr(),
                    n,
                    &sp,
                    retention.priority,
                    retention.retention_ms,
                    &mut blocks
                )
            )?
        };
        Ok(blocks)
    }

    /// Pins the leading cached blocks of the prefix `tokens` (under `keys`) that the pool holds
    /// (`pkv_cache_pin`): never evicted, not free, until the `CachePin` unpins. All pins
    /// together hold at most `MAX_PINNED_PERCENT` of the pool: past it, `Status::NoSpace`
    /// (the message gives the numbers; nothing changed). `Status::State`: a batch is open.
    pub fn cache_pin(&self, tokens: &[i32], keys: &SeqKeys<'_>) -> Result<CachePin<'_>> {
        let n = count(tokens.len(), "tokens")?;
        let raw = raw_keys(keys.extra_keys)?;
        let sp = self.keyed_params(keys, &raw)?;
        let (mut id, mut pinned) = (0u64, 0u32);
        // SAFETY: as in allocate_retained.
        unsafe {
            call!(
                self.library(),
                pkv_cache_pin(self.as_raw(), tokens.as_ptr(), n, &sp, &mut id, &mut pinned)
            )?
        };
        Ok(CachePin { engine: self, id, num_tokens: pinned })
    }

    /// Drops a pin by its id (`pkv_cache_unpin`; `CachePin::into_id`). `Status::NotFound`: no
    /// such pin (never given, or unpinned already); `Status::State`: a batch is open.
    pub fn cache_unpin(&self, pin: u64) -> Result<()> {
        // SAFETY: plain values.
        unsafe { call!(self.library(), pkv_cache_unpin(self.as_raw(), pin)) }
    }
}
