//! Sparse attention (pkv 0.7: DeepSeek V3.2, GLM-5; DESIGN.md §14) on an MLA layer with an
//! indexer (`LayerSpec::indexer`), per layer per step, in this order:
//!
//! ```text
//! batch.indexer_write(layer, &index_k, 0)?;                          // the new tokens' keys
//! batch.indexer_topk(layer, &index_q, &weights, TopkKind::Positions, &mut top)?;
//! batch.sparse_mla_attention(layer, &q, &latents, &top, &mut out)?;  // MLA over those only
//! ```
//!
//! Host slices are checked as `attention`'s are (element type, length) before pkv is called; a
//! layer without an indexer is pkv's `Status::InvalidArgument`, with its message.
use std::os::raw::c_void;

use pkv_sys as sys;

use crate::batch::OpenBatch;
use crate::element::Element;
use crate::error::{Error, Result, Status};
use crate::library::{call, codes};
use crate::params::Dtype;
use crate::shape::host_shape;

/// `index_head_dim`'s limit in the indexer calls (`PKV_INDEXER_MAX_HEAD_DIM`), a multiple of
/// `PKV_ATTENTION_HEAD_DIM_ALIGN`.
pub const INDEXER_MAX_HEAD_DIM: u32 = sys::PKV_INDEXER_MAX_HEAD_DIM as u32;
/// `indexer_write`'s flag (`PKV_INDEXER_SCALE_UE8M0`): each fp8 key's scale rounded up to a
/// power of two (DeepSeek's "ue8m0" scale format).
pub const INDEXER_SCALE_UE8M0: u32 = sys::PKV_INDEXER_SCALE_UE8M0 as u32;

codes! {
    /// What `indexer_topk`'s indices are (`PKV_TOPK_*`).
    TopkKind: u32 {
        /// Positions in the token's sequence (`sparse_mla_attention` takes them).
        Positions = sys::PKV_TOPK_POSITIONS,
        /// Slots of the layer's KV group: block id * block_size + offset, for a host's own
        /// kernels over `LayerInfo::indexer`'s layout.
        Slots = sys::PKV_TOPK_SLOTS,
    }
}

/// An MLA layer's sparse-attention indexer (`pkv_layer_spec.index_*`): per token a key of
/// `head_dim` values beside its latent, in the same block. pkv.h documents the limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IndexerSpec {
    /// The key's values (DeepSeek V3.2, GLM-5: 128).
    pub head_dim: u32,
    /// `Fp8E4m3` (fp8 codes and one fp32 scale per token) or `Bf16`; `None`: fp8 (pkv's 0).
    pub dtype: Option<Dtype>,
    /// Indexer query heads, every rank's (DeepSeek V3.2: 64, GLM-5: 32).
    pub n_heads: u32,
    /// Keys each query token keeps (both: 2048).
    pub topk: u32,
}

impl IndexerSpec {
    /// An fp8 indexer of `head_dim`-value keys, `n_heads` query heads, `topk` keys kept.
    pub fn fp8(head_dim: u32, n_heads: u32, topk: u32) -> IndexerSpec {
        IndexerSpec { head_dim, dtype: Some(Dtype::Fp8E4m3), n_heads, topk }
    }

    /// `(index_head_dim, index_dtype, index_n_heads, index_topk)` of a spec: zeros for none.
    pub(crate) fn to_raw(spec: Option<IndexerSpec>) -> [u32; 4] {
        spec.map_or([0; 4], |s| [s.head_dim, s.dtype.map_or(0, |d| d.code() as u32), s.n_heads, s.topk])
    }

    /// The indexer of raw fields: `None` when `index_head_dim` is 0.
    pub(crate) fn from_raw(head_dim: u32, dtype: u32, n_heads: u32, topk: u32) -> Option<IndexerSpec> {
        let dtype = if dtype == 0 { None } else { Dtype::from_code(dtype as i32) };
        (head_dim > 0).then_some(IndexerSpec { head_dim, dtype, n_heads, topk })
    }
}

/// Where an MLA layer's indexer is in the pool (`pkv_layer_info.index_*`): in each page, after
/// the block's latents, the block's `block_size` keys, then (fp8) their fp32 scales. Token t of
/// block b's key is at `base + b * block_bytes + t * head_dim * (1 or 2)` bytes, its scale at
/// `scale_base + b * block_bytes + 4 * t`. Addresses (device ones on CUDA), valid while the
/// engine lives.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IndexerInfo {
    /// The indexer as resolved (`dtype` `Fp8E4m3` or `Bf16`).
    pub spec: IndexerSpec,
    /// Bytes between blocks: the page.
    pub block_bytes: u64,
    pub base: *mut c_void,
    /// Null for `Bf16`.
    pub scale_base: *mut c_void,
    /// The host tier's, with the same strides; null when it is off.
    pub host_base: *mut c_void,
    pub host_scale_base: *mut c_void,
}

impl IndexerInfo {
    pub(crate) fn from_raw(r: &sys::pkv_layer_info) -> Option<IndexerInfo> {
        let spec = IndexerSpec::from_raw(r.index_head_dim, r.index_dtype, r.index_n_heads, r.index_topk)?;
        Some(IndexerInfo {
            spec,
            block_bytes: r.index_block_bytes,
            base: r.index_base,
            scale_base: r.index_scale_base,
            host_base: r.host_index_base,
            host_scale_base: r.host_index_scale_base,
        })
    }
}

impl OpenBatch<'_> {
    /// `pkv_indexer_write` on a CPU engine: the new tokens' indexer keys `k` (`num_tokens *
    /// head_dim` of the model dtype) into their slots of `layer`, quantized to its indexer's
    /// dtype (fp8: one scale per token, max|x| / 448; `INDEXER_SCALE_UE8M0` rounds it up to a
    /// power of two). Call it before `indexer_topk` reads them.
    pub fn indexer_write<T: Element>(&mut self, layer: u32, k: &[T], flags: u32) -> Result<()> {
        if let Some(x) = self.indexer_of::<T>(layer, "indexer_write")? {
            check(
                "indexer_write",
                self.num_tokens(),
                &[("k", k.len(), x.head_dim as usize, "index_head_dim")],
            )?;
        }
        // SAFETY: a host slice of the keys pkv reads (a layer without an indexer reads none).
        unsafe { self.indexer_write_raw(layer, k.as_ptr().cast(), flags) }
    }

    /// `pkv_indexer_write` with a raw pointer (a device pointer on a CUDA engine).
    ///
    /// # Safety
    /// `k` must be valid for the keys `pkv_indexer_write` documents, on the engine's device.
    pub unsafe fn indexer_write_raw(&mut self, layer: u32, k: *const c_void, flags: u32) -> Result<()> {
        call!(self.engine().library(), pkv_indexer_write(self.as_raw(), layer, k, flags))
    }

    /// `pkv_indexer_topk` on a CPU engine: with q (`num_tokens * n_heads * head_dim` of the
    /// model dtype) and weights (`num_tokens * n_heads`), key s scores the sum over heads h of
    /// `weights[h] * relu(q[h] . key(s))`; out (`num_tokens * topk`) gets each token's keys of
    /// highest score ascending by position (`TopkKind::Slots`: their slots in the layer's KV
    /// group), then -1 where its context is shorter. Of equal scores the lower position is kept.
    pub fn indexer_topk<T: Element>(
        &mut self,
        layer: u32,
        q: &[T],
        weights: &[f32],
        kind: TopkKind,
        out: &mut [i32],
    ) -> Result<()> {
        if let Some(x) = self.indexer_of::<T>(layer, "indexer_topk")? {
            let (heads, dim) = (x.n_heads as usize, x.head_dim as usize);
            check(
                "indexer_topk",
                self.num_tokens(),
                &[
                    ("q", q.len(), heads * dim, "index_n_heads x index_head_dim"),
                    ("weights", weights.len(), heads, "index_n_heads"),
                    ("out", out.len(), x.topk as usize, "index_topk"),
                ],
            )?;
        }
        // SAFETY: host slices of the sizes pkv reads and writes; out aliases neither input.
        unsafe { self.indexer_topk_raw(layer, q.as_ptr().cast(), weights.as_ptr(), kind, out.as_mut_ptr()) }
    }

    /// `pkv_indexer_topk` with raw pointers (device pointers on a CUDA engine).
    ///
    /// # Safety
    /// The pointers must be valid for the sizes `pkv_indexer_topk` documents, on the engine's
    /// device.
    pub unsafe fn indexer_topk_raw(
        &mut self,
        layer: u32,
        q: *const c_void,
        weights: *const f32,
        kind: TopkKind,
        out: *mut i32,
    ) -> Result<()> {
        call!(self.engine().library(), pkv_indexer_topk(self.as_raw(), layer, q, weights, kind.code(), out))
    }

    /// `pkv_sparse_mla_attention` on a CPU engine: `attention_mla`'s absorbed form (q, the new
    /// tokens' `latents`, out of the layer's shape) with each token attending over the positions
    /// `indices[t][0 .. topk]` of its sequence only (`indexer_topk`'s `TopkKind::Positions`; -1
    /// and positions past the token's own are skipped, a token with none left gets out 0).
    pub fn sparse_mla_attention<T: Element>(
        &mut self,
        layer: u32,
        q: &[T],
        latents: &[T],
        indices: &[i32],
        out: &mut [T],
    ) -> Result<()> {
        const CALL: &str = "sparse_mla_attention";
        if let Some(x) = self.indexer_of::<T>(layer, CALL)? {
            let want = host_shape::<T>(self.engine(), layer, self.num_tokens(), CALL)?;
            want.check(CALL, &[("q", q.len(), want.q), ("latents", latents.len(), want.k)])?;
            want.check(CALL, &[("out", out.len(), want.out)])?;
            check(CALL, self.num_tokens(), &[("indices", indices.len(), x.topk as usize, "index_topk")])?;
        }
        // SAFETY: host slices of the sizes pkv reads and writes; out aliases none of the others.
        unsafe {
            self.sparse_mla_attention_raw(
                layer,
                q.as_ptr().cast(),
                latents.as_ptr().cast(),
                indices.as_ptr(),
                out.as_mut_ptr().cast(),
            )
        }
    }

    /// `pkv_sparse_mla_attention` with raw pointers (device pointers on a CUDA engine).
    ///
    /// # Safety
    /// The pointers must be valid for the sizes `pkv_sparse_mla_attention` documents, on the
    /// engine's device, and `out` must not alias the others.
    pub unsafe fn sparse_mla_attention_raw(
        &mut self,
        layer: u32,
        q: *const c_void,
        latents: *const c_void,
        indices: *const i32,
        out: *mut c_void,
    ) -> Result<()> {
        call!(
            self.engine().library(),
            pkv_sparse_mla_attention(self.as_raw(), layer, q, latents, indices, out)
        )
    }

    /// The layer's indexer, once the engine takes host slices of `T`; `None` for a layer without
    /// one (pkv refuses it by name, reading nothing) or past the engine's layers.
    fn indexer_of<T: Element>(&self, layer: u32, call: &str) -> Result<Option<IndexerSpec>> {
        let spec = self.engine().layer_shape(layer).and_then(|l| {
            IndexerSpec::from_raw(l.index_head_dim, l.index_dtype, l.index_n_heads, l.index_topk)
        });
        if spec.is_some() {
            host_shape::<T>(self.engine(), layer, self.num_tokens(), call)?; // the device and dtype
        }
        Ok(spec)
    }
}

/// `InvalidArgument` for the first slice shorter than `rows` tokens of its width.
fn check(call: &str, rows: usize, slices: &[(&str, usize, usize, &str)]) -> Result<()> {
    for &(name, got, width, dims) in slices {
        if got < rows * width {
            return Err(Error::new(
                Status::InvalidArgument,
                format!(
                    "{}: {} has {} elements, {} expected ({} tokens x {} {})",
                    call,
                    name,
                    got,
                    rows * width,
                    rows,
                    width,
                    dims
                ),
            ));
        }
    }
    Ok(())
}
