//! Continuous batching (`pkv_submit`, `pkv_step`, `pkv_commit`) and KV events on an `Engine`.
use std::os::raw::c_void;
use std::ptr;

use pkv_sys as sys;

use crate::batch::StepBatch;
use crate::engine::Engine;
use crate::error::Result;
use crate::keys::{keys_arg, raw_keys, ExtraKey};
use crate::library::{call, count, sized};
use crate::retention::Retention;
use crate::seq::Seq;
use crate::types::KvEvent;

/// A request's options for `Engine::submit` (`pkv_request_params`); `Default` = pkv's defaults
/// as documented in pkv.h (16 new tokens, no stop token, priority 0, no salt, no extra keys,
/// no adapter, normal retention, no transfer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request<'a> {
    pub max_new_tokens: u32,
    /// Finishing token (kept in the sequence).
    pub stop_token: Option<i32>,
    /// Larger runs first; ties run oldest first.
    pub priority: i32,
    pub cache_salt: &'a [u8],
    /// The prompt's extra keys (pkv 0.5; `Engine::allocate_keyed` says what they do).
    pub extra_keys: &'a [ExtraKey<'a>],
    /// The LoRA adapter the KV is computed with (pkv 0.5); 0 = none.
    pub lora_id: u64,
    /// The eviction priority and retention its blocks keep when released (pkv 0.8;
    /// `Engine::allocate_retained` says how). `priority` above orders the queue instead.
    pub cache_retention: Retention,
    /// KV transfers (pkv 0.12; `Engine::hold` says how): when it finishes, its blocks (and its
    /// state working slot) stay held for a transfer out, until `Engine::hold_end` or
    /// `hold_timeout_ms`. When the hold would pass `max_held_blocks` it finishes without one
    /// (`Stats::num_holds_refused`).
    pub hold_on_finish: bool,
    /// That hold's timeout: 0 = `TRANSFER_TIMEOUT_DEFAULT_MS`, `TRANSFER_TIMEOUT_NONE` = never.
    pub hold_timeout_ms: u32,
    /// Its first this many prompt tokens' KV comes from another engine
    /// (`Engine::drain_receiving` says how): below the prompt's length, the last prompt token
    /// being computed here for the first sample; 0 = none.
    pub num_remote_tokens: u32,
}

impl Default for Request<'_> {
    fn default() -> Self {
        Request {
            max_new_tokens: 16,
            stop_token: None,
            priority: 0,
            cache_salt: &[],
            extra_keys: &[],
            lora_id: 0,
            cache_retention: Retention::default(),
            hold_on_finish: false,
            hold_timeout_ms: 0,
            num_remote_tokens: 0,
        }
    }
}

impl Engine {
    /// Queues a request (`pkv_submit`); its id reads like any sequence's, until `release`.
    ///
    /// Errors: `Status::InvalidArgument` for options pkv refuses, among them
    /// `Request::num_remote_tokens` not below the prompt's length; `Status::Unsupported` for
    /// `hold_on_finish` with a timeout other than `TRANSFER_TIMEOUT_NONE` on an engine of one
    /// rank of several.
    pub fn submit(&self, prompt: &[i32], request: &Request<'_>) -> Result<Seq> {
        let n = count(prompt.len(), "prompt")?;
        let mut rp = sized!(sys::pkv_request_params);
        let mut seq = 0u64;
        let keys = raw_keys(request.extra_keys)?;
        // SAFETY: rp is a full struct; prompt has n elements; the salt and keys outlive the call.
        unsafe {
            call!(self.library(), pkv_request_params_init(&mut rp, rp.struct_size))?;
            rp.max_new_tokens = request.max_new_tokens;
            rp.stop_token = request.stop_token.unwrap_or(-1);
            rp.priority = request.priority;
            rp.cache_salt_len = count(request.cache_salt.len(), "cache_salt")?;
            if !request.cache_salt.is_empty() {
                rp.cache_salt = request.cache_salt.as_ptr() as *const c_void;
            }
            (rp.extra_keys, rp.num_extra_keys, rp.extra_key_size) = keys_arg(&keys)?;
            rp.lora_id = request.lora_id;
            rp.cache_priority = request.cache_retention.priority;
            rp.cache_retention_ms = request.cache_retention.retention_ms;
            rp.hold_on_finish = u32::from(request.hold_on_finish);
            rp.hold_timeout_ms = request.hold_timeout_ms;
            rp.num_remote_tokens = request.num_remote_tokens;
            call!(self.library(), pkv_submit(self.as_raw(), prompt.as_ptr(), n, &rp, &mut seq))?;
        }
        Ok(Seq(seq))
    }

    /// The scheduler's next step (`pkv_step`); `None` when nothing is left to run. End the batch
    /// with `StepBatch::commit`, or `abort` it (dropping it does). A refused commit gives the
    /// batch back:
    ///
    /// ```no_run
    /// # let engine = pkv::Engine::new(&pkv::Params::new()?)?;
    /// engine.submit(&[1, 2, 3, 4, 5], &pkv::Request { max_new_tokens: 4, ..Default::default() })?;
    /// while let Some(mut batch) = engine.step()? {
    ///     let n = batch.num_tokens();
    ///     let (q, kv, mut out) = (vec![0.1f32; n * 64], vec![0.2f32; n * 32], vec![0f32; n * 64]);
    ///     for layer in 0..2 { batch.attention(layer, &q, &kv, &kv, &mut out)?; }
    ///     let sampled = vec![7; batch.view().num_seqs as usize]; // one token per sequence
    ///     if let Err(refused) = batch.commit(&sampled) {
    ///         eprintln!("{}", refused); // ... (the batch is still open)
    ///         refused.into_batch().abort(); // or commit it again
    ///     }
    /// }
    /// for seq in engine.drain_finished()? {
    ///     println!("{:?}: {:?}", seq, engine.tokens(seq)?);
    /// }
    /// # Ok::<(), pkv::Error>(())
    /// ```
    pub fn step(&self) -> Result<Option<StepBatch<'_>>> {
        let mut raw = ptr::null_mut();
        // SAFETY: live handle; raw receives the batch or NULL.
        unsafe { call!(self.library(), pkv_step(self.as_raw(), &mut raw))? };
        if raw.is_null() {
            return Ok(None);
        }
        StepBatch::from_raw(self, raw).map(Some)
    }

    /// The requests finished since the last call (`pkv_drain_finished`).
    pub fn drain_finished(&self) -> Result<Vec<Seq>> {
        let mut all = Vec::new();
        let mut chunk = [0u64; 64];
        loop {
            let mut len = 0u32;
            // SAFETY: chunk has 64 elements.
            unsafe {
                call!(self.library(), pkv_drain_finished(self.as_raw(), chunk.as_mut_ptr(), 64, &mut len))?
            };
            all.extend(chunk[..len as usize].iter().map(|&id| Seq(id)));
            if len < 64 {
                return Ok(all);
            }
        }
    }

    /// The queued KV events, oldest first (`pkv_drain_kv_events_sized`; needs
    /// `Params::kv_events`). Events are read at pkv-sys's `size_of::<pkv_kv_event>()` (56 bytes):
    /// a newer libpkv fills only the fields this crate knows, an older one zeroes those it does
    /// not.
    pub fn drain_kv_events(&self) -> Result<Vec<KvEvent>> {
        const EVENT_SIZE: u32 = std::mem::size_of::<sys::pkv_kv_event>() as u32;
        let mut all: Vec<sys::pkv_kv_event> = Vec::new();
        loop {
            all.reserve(256);
            let (mut len, spare) = (0u32, (all.capacity() - all.len()).min(u32::MAX as usize));
            // SAFETY: the spare capacity holds `spare` events of EVENT_SIZE bytes; pkv writes `len`
            // of them, whole (every byte up to EVENT_SIZE).
            unsafe {
                let out = all.as_mut_ptr().add(all.len());
                call!(
                    self.library(),
                    pkv_drain_kv_events_sized(self.as_raw(), out, EVENT_SIZE, spare as u32, &mut len)
                )?;
                all.set_len(all.len() + len as usize);
            }
            if (len as usize) < spare {
                return Ok(all.iter().map(KvEvent::from_raw).collect());
            }
        }
    }

    /// Evicts every cached (ref-0) block (`pkv_reset_prefix_cache`).
    pub fn reset_prefix_cache(&self) -> Result<()> {
        // SAFETY: live handle.
        unsafe { call!(self.library(), pkv_reset_prefix_cache(self.as_raw())) }
    }
}
