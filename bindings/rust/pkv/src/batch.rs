//! An open batch of one forward step: `Batch` (`pkv_batch_begin` .. `pkv_batch_end`) and
//! `StepBatch` (`pkv_step` .. `pkv_commit`), both aborted when dropped, and `OpenBatch`, what
//! they share (the plan, attention, the block copies).
//!
//! pkv keeps a batch open when ending it fails (a batch of `pkv_step` ended with
//! `pkv_batch_end`, a commit refused): so do these types. Ending consumes the batch and, on
//! failure, gives it back inside a `BatchError`, to retry, commit or abort; dropping it aborts
//! it. No sequence of calls leaves pkv with an open batch this crate no longer holds.
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::os::raw::c_void;
use std::ptr;

use pkv_sys as sys;

use crate::element::Element;
use crate::engine::Engine;
use crate::error::{Error, Result, Status};
use crate::library::{call, sized};
use crate::shape::host_shape;
use crate::view::{self, BatchView};

/// What every open batch does: read its plan, run attention, do its block copies. Reached
/// through a `Batch` or a `StepBatch` (which deref to it), never owned on its own.
pub struct OpenBatch<'e> {
    engine: &'e Engine,
    raw: *mut sys::pkv_batch,       // NULL once ended
    view: Box<sys::pkv_batch_view>, // boxed: a BatchError carrying the batch stays small
    owned: bool,                    // false for a rank's handle (RankBatch): its batch aborts
}

// SAFETY: pkv serializes calls on an engine's batches and allows them from any thread.
unsafe impl Send for OpenBatch<'_> {}

impl<'e> OpenBatch<'e> {
    /// Takes over an open batch of `engine` (freed by its end or commit, else aborted on drop).
    fn from_raw(engine: &'e Engine, raw: *mut sys::pkv_batch) -> Result<OpenBatch<'e>> {
        OpenBatch::from_raw_owned(engine, raw, true)
    }

    /// As `from_raw`; a batch not `owned` (a rank's handle) is never aborted by its drop.
    fn from_raw_owned(engine: &'e Engine, raw: *mut sys::pkv_batch, owned: bool) -> Result<Self> {
        if raw.is_null() {
            return Err(Error::new(Status::Internal, "pkv gave a NULL batch"));
        }
        let view = Box::new(sized!(sys::pkv_batch_view));
        let mut batch = OpenBatch { engine, raw, view, owned };
        // SAFETY: the batch is open; view is a full struct. On error, drop aborts the batch.
        unsafe { call!(engine.library(), pkv_batch_info(raw, &mut *batch.view))? };
        Ok(batch)
    }

    pub fn engine(&self) -> &'e Engine {
        self.engine
    }

    /// The handle, for calls through `pkv-sys`. Valid while the batch is open.
    pub fn as_raw(&self) -> *mut sys::pkv_batch {
        self.raw
    }

    /// New tokens in the step: the rows of q, k, v and out.
    pub fn num_tokens(&self) -> usize {
        self.view.num_tokens as usize
    }

    pub fn view(&self) -> BatchView<'_> {
        // SAFETY: the arrays live as long as the batch and have the lengths pkv.h gives.
        unsafe { view::borrow(&self.view) }
    }

    /// `pkv_attention` on a CPU engine, from host slices of the engine's dtype (`f32` for F32,
    /// `pkv::F16` for F16, `pkv::Bf16` for BF16): q and out hold `num_tokens * (num_q_heads / tp_size) *
    /// head_dim` elements, k and v `num_tokens * kv_heads_per_rank * head_dim` (longer slices
    /// are fine; only those are used). Another element type or a shorter slice is
    /// `Status::InvalidArgument` naming what was expected, before pkv is called. An MLA engine
    /// takes no V: `attention_mla` (a v here is `Status::InvalidArgument`). With layer specs
    /// each layer has its own shape (`Engine::layer_info`); a K = V or shared layer is
    /// `attention_kv`'s.
    pub fn attention<T: Element>(
        &mut self,
        layer: u32,
        q: &[T],
        k: &[T],
        v: &[T],
        out: &mut [T],
    ) -> Result<()> {
        let want = host_shape::<T>(self.engine, layer, self.num_tokens(), "attention")?;
        if self.engine.layer_shape(layer).is_some() {
            want.check_args("attention", layer, true, true)?;
        }
        want.check("attention", &[("q", q.len(), want.q), ("k", k.len(), want.k), ("v", v.len(), want.v)])?;
        want.check("attention", &[("out", out.len(), want.out)])?;
        // SAFETY: host buffers of the sizes pkv reads and writes; out does not alias the others.
        unsafe {
            self.attention_raw(
                layer,
                q.as_ptr().cast(),
                k.as_ptr().cast(),
                v.as_ptr().cast(),
                out.as_mut_ptr().cast(),
            )
        }
    }

    /// `pkv_attention` on a CPU engine of `KvLayout::Mla` (pkv 0.3), the absorbed form, with
    /// `W = kv_lora_rank + qk_rope_head_dim` (the engine's `head_dim`): q holds
    /// `num_tokens * (num_q_heads / tp_size) * W` elements (queries projected into latent space),
    /// `latents` the new tokens' `num_tokens * W` (cached), and out gets
    /// `num_tokens * (num_q_heads / tp_size) * kv_lora_rank`: each head's softmax-weighted sum of
    /// its context's latents' first `kv_lora_rank` values. There is no V (pkv gets NULL). Checked
    /// as `attention`.
    pub fn attention_mla<T: Element>(
        &mut self,
        layer: u32,
        q: &[T],
        latents: &[T],
        out: &mut [T],
    ) -> Result<()> {
        let want = host_shape::<T>(self.engine, layer, self.num_tokens(), "attention_mla")?;
        want.check("attention_mla", &[("q", q.len(), want.q), ("latents", latents.len(), want.k)])?;
        want.check("attention_mla", &[("out", out.len(), want.out)])?;
        // SAFETY: host buffers of the sizes pkv reads and writes; out does not alias the others;
        // v NULL is MLA's.
        unsafe {
            self.attention_raw(
                layer,
                q.as_ptr().cast(),
                latents.as_ptr().cast(),
                ptr::null(),
                out.as_mut_ptr().cast(),
            )
        }
    }

    /// `pkv_attention` on any layer of a CPU engine (pkv 0.5), k and v as the layer takes them
    /// (`Engine::layer_info`): an attention layer k and v, a K = V layer (`LayerSpec::k_eq_v`)
    /// or an MLA one k only, a shared layer neither (it reads its source layer's cache, written
    /// earlier in the step, and writes nothing). q holds `num_tokens * q_heads_per_rank *
    /// head_dim` elements, k `num_tokens * kv_heads * head_dim`, v `num_tokens * kv_heads *
    /// v_head_dim` and out `num_tokens * q_heads_per_rank * v_head_dim`, of the layer. Other
    /// arguments are `Status::InvalidArgument` saying what the layer takes, before pkv is called.
    pub fn attention_kv<T: Element>(
        &mut self,
        layer: u32,
        q: &[T],
        k: Option<&[T]>,
        v: Option<&[T]>,
        out: &mut [T],
    ) -> Result<()> {
        let want = host_shape::<T>(self.engine, layer, self.num_tokens(), "attention_kv")?;
        want.check_args("attention_kv", layer, k.is_some(), v.is_some())?;
        want.check("attention_kv", &[("q", q.len(), want.q), ("out", out.len(), want.out)])?;
        if let Some(k) = k {
            want.check("attention_kv", &[("k", k.len(), want.k)])?;
        }
        if let Some(v) = v {
            want.check("attention_kv", &[("v", v.len(), want.v)])?;
        }
        let ptr_of = |s: Option<&[T]>| s.map_or(ptr::null(), |s| s.as_ptr().cast());
        // SAFETY: host buffers of the sizes pkv reads and writes for this layer; NULL where the
        // layer takes none; out does not alias the others.
        unsafe { self.attention_raw(layer, q.as_ptr().cast(), ptr_of(k), ptr_of(v), out.as_mut_ptr().cast()) }
    }

    /// `pkv_attention` with raw pointers (device pointers on a CUDA engine); an MLA engine's v
    /// is NULL.
    ///
    /// # Safety
    /// The pointers must be valid for the sizes `pkv_attention` documents, on the engine's
    /// device, and `out` must not alias the others.
    pub unsafe fn attention_raw(
        &mut self,
        layer: u32,
        q: *const c_void,
        k: *const c_void,
        v: *const c_void,
        out: *mut c_void,
    ) -> Result<()> {
        call!(self.engine.library(), pkv_attention(self.raw, layer, q, k, v, out))
    }

    /// Does the step's listed block copies now (`pkv_batch_copy`), unless they are done already:
    /// for hosts that run no `attention` but let pkv move the blocks (the first `attention` does
    /// them too).
    pub fn copy(&mut self) -> Result<()> {
        // SAFETY: the batch is open.
        unsafe { call!(self.engine.library(), pkv_batch_copy(self.raw)) }
    }

    /// Plans this decode step for a CUDA graph (`pkv_batch_plan_graph`, pkv 0.9; a CUDA engine
    /// only): a GPU engine's decode step is captured once in a CUDA graph and replayed after each
    /// later `plan_graph` of the same bucket. Call it before the step's first `attention_raw`: it
    /// queues the block copies and the batch's arrays, padded to `bucket` sequences, into device
    /// buffers at fixed addresses, so every `attention_raw` of the batch launches kernels that
    /// depend only on the bucket and the layer; capture them on the stream of
    /// `Engine::set_stream` (not the legacy NULL stream). Every sequence computes one token, and
    /// `num_seqs <= bucket <= max_num_seqs`. Between replays the sequences, their count (up to
    /// `bucket`), lengths and block tables and the contents of q, k and v may change; the bucket,
    /// the layers and their order, the q, k, v and out pointers (`bucket` rows each) and the
    /// stream may not.
    ///
    /// Errors: `Status::Unsupported` on a CPU engine (it has no CUDA graphs: run `attention` as
    /// is; the batch stays usable) or one with indexer layers; `Status::InvalidArgument` for a
    /// bucket of 0, below `num_seqs` or above `max_num_seqs`, or a sequence computing more than
    /// one token; `Status::State` once an attention call of the batch ran.
    pub fn plan_graph(&mut self, bucket: u32) -> Result<()> {
        // SAFETY: the batch is open.
        unsafe { call!(self.engine.library(), pkv_batch_plan_graph(self.raw, bucket)) }
    }

    /// Rank `rank`'s handle of this batch (`pkv_batch_rank`, pkv 0.10) on an engine of
    /// `Ranks::All` (rank `pp_rank * tp_size + tp_rank`). Its `attention` (and the indexer's and
    /// sparse MLA's calls, `plan_graph`) runs on that rank's pool with that rank's heads: q and
    /// out `num_tokens * (num_q_heads / tp_size) * head_dim`, k and v its kv heads'; on such an
    /// engine `attention` of the batch itself is `Status::InvalidArgument`. Its view is the
    /// batch's. It borrows the batch, which cannot end while a rank's handle lives; dropping the
    /// handle changes nothing. On an engine of one rank, rank 0 is the batch itself.
    ///
    /// Errors: `Status::InvalidArgument` for a rank not below the engine's ranks, or on a rank's
    /// handle.
    pub fn rank(&self, rank: u32) -> Result<RankBatch<'_, 'e>> {
        let mut raw = ptr::null_mut();
        // SAFETY: the batch is open; raw receives the rank's handle, valid while it is.
        unsafe { call!(self.engine.library(), pkv_batch_rank(self.raw, rank, &mut raw))? };
        let batch = OpenBatch::from_raw_owned(self.engine, raw, false)?;
        Ok(RankBatch { batch, rank, _of: PhantomData })
    }

    /// This step's plan as bytes (`pkv_batch_export_plan`, pkv 0.10), for the `Ranks::Pool`
    /// engines of other processes (`Engine::import_plan`): the batch's view and its block
    /// copies, with a version, the engine's shape, a step number (the engine's exported plans
    /// counted from 0) and a checksum. The host carries the bytes (a pipe, shared memory, an
    /// NCCL broadcast); every export of one batch gives the same plan.
    ///
    /// Errors: `Status::State` on an engine of `Ranks::Pool` (its batches are imported).
    pub fn export_plan(&self) -> Result<Vec<u8>> {
        let lib = self.engine.library();
        let mut len = 0u64;
        // SAFETY: the batch is open; out NULL with cap 0 asks the size.
        unsafe { call!(lib, pkv_batch_export_plan(self.raw, ptr::null_mut(), 0, &mut len))? };
        let mut plan = vec![0u8; len as usize];
        if len > 0 {
            let out = plan.as_mut_ptr().cast();
            // SAFETY: out has len writable bytes.
            unsafe { call!(lib, pkv_batch_export_plan(self.raw, out, len, &mut len))? };
        }
        plan.truncate(len as usize);
        Ok(plan)
    }

    /// Runs an ending call (`pkv_batch_end`, `pkv_commit`); on success the batch is pkv's no
    /// more (nothing to abort), on failure it stays open, as pkv keeps it.
    fn end_with(&mut self, end: impl FnOnce(&Engine, *mut sys::pkv_batch) -> Result<()>) -> Result<()> {
        end(self.engine, self.raw)?;
        self.raw = ptr::null_mut();
        Ok(())
    }
}

impl Drop for OpenBatch<'_> {
    fn drop(&mut self) {
        if self.raw.is_null() || !self.owned {
            return;
        }
        if let Ok(abort) = &self.engine.library().raw().pkv_batch_abort {
            // SAFETY: the batch is open and its engine alive (borrowed). pkv_batch_abort ends
            // any open batch, of pkv_batch_begin or of pkv_step.
            unsafe { abort(self.raw) };
        }
    }
}

/// A batch of `Engine::batch` (`pkv_batch_begin`). It borrows its engine, so the engine cannot
/// be closed while it is open. `end()` says the step ran; dropping it (or `abort()`) says it did
/// not (`pkv_batch_abort`):
///
/// ```compile_fail,E0505
/// let engine = pkv::Engine::new(&pkv::Params::new().unwrap()).unwrap();
/// let batch = engine.batch(&[], None).unwrap();
/// engine.close(); // error[E0505]: cannot move out of `engine` because it is borrowed
/// batch.end().unwrap();
/// ```
pub struct Batch<'e>(OpenBatch<'e>);

impl<'e> Batch<'e> {
    pub(crate) fn from_raw(engine: &'e Engine, raw: *mut sys::pkv_batch) -> Result<Batch<'e>> {
        OpenBatch::from_raw(engine, raw).map(Batch)
    }

    /// The step ran (`pkv_batch_end`): its tokens become computed, full blocks are sealed into
    /// the prefix cache. On failure pkv keeps the batch open and the error gives it back
    /// (`BatchError::into_batch`); dropping the error aborts it.
    pub fn end(mut self) -> Result<(), BatchError<Batch<'e>>> {
        // SAFETY: the batch is open; pkv frees it only on success.
        match self.0.end_with(|e, raw| unsafe { call!(e.library(), pkv_batch_end(raw)) }) {
            Ok(()) => Ok(()),
            Err(error) => Err(BatchError { error, batch: self }),
        }
    }

    /// The step did not run (`pkv_batch_abort`): nothing becomes computed. Dropping does the same.
    pub fn abort(self) {}
}

/// A batch of the scheduler (`Engine::step`). It ends with `commit` (the step ran, here are the
/// sampled tokens) or `abort` (it did not); dropping it aborts it. It has no `end`: pkv ends a
/// scheduler batch only with `pkv_commit`.
///
/// ```compile_fail,E0599
/// let engine = pkv::Engine::new(&pkv::Params::new().unwrap()).unwrap();
/// let batch = engine.step().unwrap().unwrap();
/// batch.end(); // error[E0599]: no method named `end` found
/// ```
pub struct StepBatch<'e>(OpenBatch<'e>);

impl<'e> StepBatch<'e> {
    pub(crate) fn from_raw(engine: &'e Engine, raw: *mut sys::pkv_batch) -> Result<StepBatch<'e>> {
        OpenBatch::from_raw(engine, raw).map(StepBatch)
    }

    /// Ends the step (`pkv_commit`): its tokens become computed and every sequence whose
    /// `sample_rows[i]` is not -1 takes `sampled_tokens[i]` (the others are ignored; the slice
    /// may be empty when no sequence samples). On failure (a slice too short, refused before pkv
    /// is called, or pkv's refusal) the batch stays open and the error gives it back
    /// (`BatchError::into_batch`); dropping the error aborts it.
    pub fn commit(mut self, sampled_tokens: &[i32]) -> Result<(), BatchError<StepBatch<'e>>> {
        let view = self.view();
        let samples = view.sample_rows.iter().filter(|&&r| r >= 0).count();
        if samples > 0 && sampled_tokens.len() < view.num_seqs as usize {
            let error = Error::new(
                Status::InvalidArgument,
                format!(
                    "commit: sampled_tokens has {} tokens, {} expected (one per sequence of the batch; \
                     {} of them sample)",
                    sampled_tokens.len(),
                    view.num_seqs,
                    samples
                ),
            );
            return Err(BatchError { error, batch: self });
        }
        let tokens = if sampled_tokens.is_empty() { ptr::null() } else { sampled_tokens.as_ptr() };
        // SAFETY: the batch is open; tokens has num_seqs elements or is NULL; pkv frees the
        // batch only on success.
        match self.0.end_with(|e, raw| unsafe { call!(e.library(), pkv_commit(raw, tokens)) }) {
            Ok(()) => Ok(()),
            Err(error) => Err(BatchError { error, batch: self }),
        }
    }

    /// The step did not run (`pkv_batch_abort`): nothing becomes computed, nothing is sampled;
    /// the next `step` plans it again. Dropping does the same.
    pub fn abort(self) {}
}

macro_rules! deref_open {
    ($($t:ident),*) => {$(
        impl<'e> Deref for $t<'e> {
            type Target = OpenBatch<'e>;
            fn deref(&self) -> &OpenBatch<'e> {
                &self.0
            }
        }
        impl<'e> DerefMut for $t<'e> {
            fn deref_mut(&mut self) -> &mut OpenBatch<'e> {
                &mut self.0
            }
        }
    )*};
}
deref_open!(Batch, StepBatch);

/// One rank's handle of a batch (`OpenBatch::rank`, pkv 0.10) on an engine of `Ranks::All`:
/// derefs to an `OpenBatch` whose `attention` runs on rank `rank_index()`'s pool with its heads. It
/// borrows its batch, so the batch cannot end (nor be ended through it) while it lives:
///
/// ```compile_fail,E0505
/// let engine = pkv::Engine::new(&pkv::Params::new().unwrap()).unwrap();
/// let batch = engine.batch(&[], None).unwrap();
/// let rank = batch.rank(0).unwrap();
/// batch.end().unwrap(); // error[E0505]: cannot move out of `batch` because it is borrowed
/// drop(rank);
/// ```
pub struct RankBatch<'b, 'e> {
    batch: OpenBatch<'e>,
    rank: u32,
    _of: PhantomData<&'b OpenBatch<'e>>,
}

impl<'b, 'e> RankBatch<'b, 'e> {
    /// The rank whose handle this is.
    pub fn rank_index(&self) -> u32 {
        self.rank
    }
}

impl<'b, 'e> Deref for RankBatch<'b, 'e> {
    type Target = OpenBatch<'e>;
    fn deref(&self) -> &OpenBatch<'e> {
        &self.batch
    }
}

impl<'b, 'e> DerefMut for RankBatch<'b, 'e> {
    fn deref_mut(&mut self) -> &mut OpenBatch<'e> {
        &mut self.batch
    }
}

/// A batch's end or commit that failed: pkv's error, and the batch, still open, given back.
/// `into_batch()` takes it to commit again or abort; dropping the `BatchError` (or turning it
/// into an `Error`, as `?` does in a function returning `pkv::Result`) aborts it.
pub struct BatchError<B> {
    error: Error,
    batch: B,
}

impl<B> BatchError<B> {
    pub fn error(&self) -> &Error {
        &self.error
    }
    pub fn status(&self) -> Status {
        self.error.status()
    }
    /// The batch, still open.
    pub fn into_batch(self) -> B {
        self.batch
    }
    pub fn into_parts(self) -> (Error, B) {
        (self.error, self.batch)
    }
}

/// The error alone: the batch is dropped, so aborted.
impl<B> From<BatchError<B>> for Error {
    fn from(e: BatchError<B>) -> Error {
        e.error
    }
}

impl<B> fmt::Debug for BatchError<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchError").field("error", &self.error).finish_non_exhaustive()
    }
}

impl<B> fmt::Display for BatchError<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (the batch is still open)", self.error)
    }
}

impl<B> std::error::Error for BatchError<B> {}
