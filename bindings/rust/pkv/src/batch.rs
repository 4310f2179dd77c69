//! `Batch`: one forward step's plan (`pkv_batch_begin` .. `pkv_batch_end`), aborted on drop.
use std::os::raw::c_void;
use std::ptr;
use std::slice;

use pkv_sys as sys;

use crate::engine::Engine;
use crate::error::{Error, Result, Status};
use crate::library::{call, sized};
use crate::params::{Device, Dtype, KvLayout};

/// An element type `attention` takes from host slices: `f32` for F32 engines, `u16` (the raw
/// bits) for F16 and BF16 ones.
pub trait Element: Copy + private::Sealed {
    #[doc(hidden)]
    fn fits(dtype: Dtype) -> bool;
}
impl Element for f32 {
    fn fits(dtype: Dtype) -> bool {
        dtype == Dtype::F32
    }
}
impl Element for u16 {
    fn fits(dtype: Dtype) -> bool {
        dtype == Dtype::F16 || dtype == Dtype::Bf16
    }
}
mod private {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for u16 {}
}

/// What a listed block copy moves (`pkv_batch_view.copy_kind`, a `PKV_COPY_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyKind {
    /// Pool block to pool block: copy-on-write.
    Cow,
    /// Pool block to host-tier block: `Engine::swap_out`.
    SwapOut,
    /// Host-tier block to pool block: `Engine::swap_in`.
    SwapIn,
    /// Pool block to host-tier block: a cached block evicted from the pool keeps its KV in the
    /// host tier (`Params::host_offload`).
    Offload,
    /// Host-tier block to pool block: a prefix hit on a block held only in the host tier.
    Load,
}

impl CopyKind {
    pub fn code(self) -> i32 {
        (match self {
            CopyKind::Cow => sys::PKV_COPY_COW,
            CopyKind::SwapOut => sys::PKV_COPY_SWAP_OUT,
            CopyKind::SwapIn => sys::PKV_COPY_SWAP_IN,
            CopyKind::Offload => sys::PKV_COPY_OFFLOAD,
            CopyKind::Load => sys::PKV_COPY_LOAD,
        }) as i32
    }
    pub fn from_code(code: i32) -> Option<CopyKind> {
        [CopyKind::Cow, CopyKind::SwapOut, CopyKind::SwapIn, CopyKind::Offload, CopyKind::Load]
            .into_iter()
            .find(|k| k.code() == code)
    }
}

/// An open batch. It borrows its engine, so the engine cannot be closed while it is open.
/// `end()` commits the step; dropping it without `end()` aborts it (`pkv_batch_abort`):
///
/// ```compile_fail,E0505
/// let engine = pkv::Engine::new(&pkv::Params::new().unwrap()).unwrap();
/// let batch = engine.batch(&[], None).unwrap();
/// engine.close(); // error[E0505]: cannot move out of `engine` because it is borrowed
/// batch.end().unwrap();
/// ```
pub struct Batch<'e> {
    engine: &'e Engine,
    raw: *mut sys::pkv_batch,
    view: sys::pkv_batch_view,
}

// SAFETY: pkv serializes calls on an engine's batches and allows them from any thread.
unsafe impl Send for Batch<'_> {}

/// The step's plan (`pkv_batch_view`) as slices borrowed from the batch; layouts as in pkv.h.
#[derive(Clone, Copy, Debug)]
pub struct BatchView<'b> {
    pub num_seqs: u32,
    pub num_tokens: u32,
    pub max_blocks_per_seq: u32,
    pub max_query_len: u32,
    pub max_context_len: u32,
    pub block_size: u32,
    /// `[num_seqs]`
    pub seq_ids: &'b [u64],
    /// `[num_seqs + 1]`: new tokens of seq i are rows `query_start[i] .. query_start[i+1]`.
    pub query_start: &'b [i32],
    /// `[num_tokens]`
    pub positions: &'b [i32],
    /// `[num_tokens]`: block * block_size + offset; -1 = skip.
    pub slot_mapping: &'b [i64],
    /// `[num_seqs]`
    pub context_lens: &'b [i32],
    /// `[num_seqs + 1]`
    pub block_indptr: &'b [i32],
    /// `[block_indptr[num_seqs]]`
    pub block_indices: &'b [i32],
    /// `[num_seqs]`
    pub last_block_len: &'b [i32],
    /// `[num_seqs * max_blocks_per_seq]`, padded with -1.
    pub block_tables: &'b [i32],
    /// `[num_copies]`: block copies to do, in order, before any write of the step (ids in the
    /// tiers `copy_kind` names).
    pub copy_src: &'b [i32],
    pub copy_dst: &'b [i32],
    /// `[num_copies]`: `PKV_COPY_*` codes (`CopyKind::from_code`); empty from a library older
    /// than 0.2, whose copies are all copy-on-write.
    pub copy_kind: &'b [i32],
    /// `[num_seqs]`: the row sampled when the step completes the sequence's tokens, else -1.
    pub sample_rows: &'b [i32],
    /// KV groups (`Engine::kv_groups`; 1 without windows, 0 from a library older than 0.2):
    /// the slot mapping and tables above are group 0's.
    pub num_kv_groups: u32,
    /// `[num_kv_groups][num_tokens]`: each group's slot mapping (`group_slots`).
    pub group_slot_mapping: &'b [i64],
    /// `[num_kv_groups][num_seqs][max_blocks_per_seq]`, -1 padded (`group_tables`); a windowed
    /// group's hold -1 for blocks it gave back.
    pub group_block_tables: &'b [i32],
}

impl<'b> BatchView<'b> {
    /// KV group `group`'s slot mapping (`[num_tokens]`); empty past the groups.
    pub fn group_slots(&self, group: u32) -> &'b [i64] {
        let n = self.num_tokens as usize;
        self.group_slot_mapping.get(group as usize * n..(group as usize + 1) * n).unwrap_or(&[])
    }

    /// KV group `group`'s padded block tables (`[num_seqs * max_blocks_per_seq]`); empty past the
    /// groups.
    pub fn group_tables(&self, group: u32) -> &'b [i32] {
        let n = self.num_seqs as usize * self.max_blocks_per_seq as usize;
        self.group_block_tables.get(group as usize * n..(group as usize + 1) * n).unwrap_or(&[])
    }
}

/// A slice of `len` elements at `p`; empty for len 0 (pkv may give NULL then).
unsafe fn view_slice<'b, T>(p: *const T, len: usize) -> &'b [T] {
    if len == 0 || p.is_null() {
        &[]
    } else {
        slice::from_raw_parts(p, len)
    }
}

impl<'e> Batch<'e> {
    /// Takes over an open batch of `engine` (freed by end, abort or drop).
    pub(crate) fn from_raw(engine: &'e Engine, raw: *mut sys::pkv_batch) -> Result<Batch<'e>> {
        let mut batch = Batch { engine, raw, view: sized!(sys::pkv_batch_view) };
        if raw.is_null() {
            return Err(Error::new(Status::Internal, "pkv gave a NULL batch"));
        }
        // SAFETY: the batch is open; view is a full struct. On error, drop aborts the batch.
        unsafe { call!(engine.library(), pkv_batch_info(raw, &mut batch.view))? };
        Ok(batch)
    }

    pub fn engine(&self) -> &'e Engine {
        self.engine
    }

    /// The handle, for calls through `pkv-sys`. Valid while `self` lives.
    pub fn as_raw(&self) -> *mut sys::pkv_batch {
        self.raw
    }

    /// New tokens in the step: the rows of q, k, v and out.
    pub fn num_tokens(&self) -> usize {
        self.view.num_tokens as usize
    }

    pub fn view(&self) -> BatchView<'_> {
        let v = &self.view;
        let (seqs, tokens) = (v.num_seqs as usize, v.num_tokens as usize);
        // SAFETY: the arrays live as long as the batch and have the lengths pkv.h gives.
        unsafe {
            let indptr = view_slice(v.block_indptr, seqs + 1);
            let num_indices = indptr.last().map_or(0, |&n| n.max(0) as usize);
            BatchView {
                num_seqs: v.num_seqs,
                num_tokens: v.num_tokens,
                max_blocks_per_seq: v.max_blocks_per_seq,
                max_query_len: v.max_query_len,
                max_context_len: v.max_context_len,
                block_size: v.block_size,
                seq_ids: view_slice(v.seq_ids, seqs),
                query_start: view_slice(v.query_start, seqs + 1),
                positions: view_slice(v.positions, tokens),
                slot_mapping: view_slice(v.slot_mapping, tokens),
                context_lens: view_slice(v.context_lens, seqs),
                block_indptr: indptr,
                block_indices: view_slice(v.block_indices, num_indices),
                last_block_len: view_slice(v.last_block_len, seqs),
                block_tables: view_slice(v.block_tables, seqs * v.max_blocks_per_seq as usize),
                copy_src: view_slice(v.copy_src, v.num_copies as usize),
                copy_dst: view_slice(v.copy_dst, v.num_copies as usize),
                copy_kind: view_slice(v.copy_kind, v.num_copies as usize),
                sample_rows: view_slice(v.sample_rows, seqs),
                num_kv_groups: v.num_kv_groups,
                group_slot_mapping: view_slice(v.group_slot_mapping, v.num_kv_groups as usize * tokens),
                group_block_tables: view_slice(
                    v.group_block_tables,
                    v.num_kv_groups as usize * seqs * v.max_blocks_per_seq as usize,
                ),
            }
        }
    }

    /// `pkv_attention` on a CPU engine, from host slices: q and out hold
    /// `num_tokens * (num_q_heads / tp_size) * head_dim` elements, k and v
    /// `num_tokens * kv_heads_per_rank * head_dim` (longer slices are fine; only those are used).
    /// An MLA engine takes no V: `attention_mla` (a v here is `Status::InvalidArgument`).
    pub fn attention<T: Element>(
        &mut self,
        layer: u32,
        q: &[T],
        k: &[T],
        v: &[T],
        out: &mut [T],
    ) -> Result<()> {
        let (q_len, kv_len, out_len) = self.host_lens::<T>()?;
        if q.len() < q_len || out.len() < out_len || k.len() < kv_len || v.len() < kv_len {
            return Err(invalid(
                Status::InvalidArgument,
                &format!("attention: q needs {} elements, k and v {}, out {}", q_len, kv_len, out_len),
            ));
        }
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
    /// its context's latents' first `kv_lora_rank` values. There is no V (pkv gets NULL).
    pub fn attention_mla<T: Element>(
        &mut self,
        layer: u32,
        q: &[T],
        latents: &[T],
        out: &mut [T],
    ) -> Result<()> {
        let (q_len, kv_len, out_len) = self.host_lens::<T>()?;
        if q.len() < q_len || out.len() < out_len || latents.len() < kv_len {
            return Err(invalid(
                Status::InvalidArgument,
                &format!("attention_mla: q needs {} elements, latents {}, out {}", q_len, kv_len, out_len),
            ));
        }
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

    /// The elements `attention` reads and writes from host slices of `T`: (q, k and v, out).
    /// An MLA engine's k is the latent (one kv head of `head_dim`), its out `kv_lora_rank` wide
    /// per q head.
    fn host_lens<T: Element>(&self) -> Result<(usize, usize, usize)> {
        let engine = self.engine;
        let (p, pool) = (engine.params(), engine.pool_info());
        if engine.device() != Some(Device::Cpu) {
            return Err(invalid(
                Status::Unsupported,
                "attention: host slices need a CPU engine; use attention_raw",
            ));
        }
        if !engine.dtype().map_or(false, T::fits) {
            return Err(invalid(
                Status::InvalidArgument,
                "attention: element type does not match the engine's dtype",
            ));
        }
        let rows = self.num_tokens();
        let q_heads = (p.raw().num_q_heads / p.raw().tp_size.max(1)) as usize;
        let out_dim = match p.get_kv_layout() {
            Some(KvLayout::Mla) => p.raw().kv_lora_rank,
            _ => pool.head_dim,
        };
        Ok((
            rows * q_heads * pool.head_dim as usize,
            rows * pool.kv_heads as usize * pool.head_dim as usize,
            rows * q_heads * out_dim as usize,
        ))
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

    /// The step ran (`pkv_batch_end`): its tokens become computed, full blocks are sealed into
    /// the prefix cache. The batch is freed even when this fails.
    pub fn end(mut self) -> Result<()> {
        let raw = std::mem::replace(&mut self.raw, ptr::null_mut());
        // SAFETY: raw is open; pkv frees it whatever the status.
        unsafe { call!(self.engine.library(), pkv_batch_end(raw)) }
    }

    /// The step did not run (`pkv_batch_abort`): nothing becomes computed. Dropping does the same.
    pub fn abort(self) {}

    /// Ends a batch of `Engine::step` (`pkv_commit`): `sampled_tokens[i]` for every sequence
    /// whose `sample_rows[i]` is not -1 (the others are ignored). On error the batch is aborted.
    pub fn commit(mut self, sampled_tokens: &[i32]) -> Result<()> {
        if sampled_tokens.len() < self.view.num_seqs as usize
            && self.view().sample_rows.iter().any(|&r| r >= 0)
        {
            return Err(invalid(
                Status::InvalidArgument,
                "commit: sampled_tokens needs one token per sequence of the batch",
            ));
        }
        let tokens = if sampled_tokens.is_empty() { ptr::null() } else { sampled_tokens.as_ptr() };
        // SAFETY: the batch is open; tokens has num_seqs elements or is NULL.
        unsafe { call!(self.engine.library(), pkv_commit(self.raw, tokens))? };
        self.raw = ptr::null_mut(); // freed by pkv_commit's success
        Ok(())
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        if self.raw.is_null() {
            return;
        }
        if let Ok(abort) = &self.engine.library().raw().pkv_batch_abort {
            // SAFETY: the batch is open and its engine alive (borrowed).
            unsafe { abort(self.raw) };
        }
    }
}

fn invalid(status: Status, message: &str) -> Error {
    Error::new(status, message.to_string())
}
