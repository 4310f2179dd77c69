//! Block descriptors (pkv 0.11, DESIGN.md §10), what a transport moves blocks by:
//! `Engine::block_segments`, `Engine::seq_segments` and `Engine::layout_fingerprint`. Two engines
//! of equal fingerprints list segments of equal bytes in the same order, so copying segment i to
//! segment i moves blocks from one engine to the other.
use std::os::raw::c_void;
use std::ptr;

use pkv_sys as sys;

use crate::engine::{Engine, Tier};
use crate::error::{Error, Result, Status};
use crate::library::call;
use crate::seq::Seq;

/// One contiguous piece of KV (`pkv_segment`): `bytes` bytes at `base` (device memory on a CUDA
/// pool, host memory for the host tier and a CPU pool), valid while the engine lives and the
/// block is held; reading or writing it is the host's own unsafe code. A block a windowed group
/// gave back is a null `base` and 0 `bytes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Segment {
    pub base: *mut c_void,
    pub bytes: u64,
}

impl Segment {
    pub(crate) fn from_raw(r: &sys::pkv_segment) -> Segment {
        Segment { base: r.base, bytes: r.bytes }
    }
}

impl Engine {
    /// The segments holding the KV of block ids `blocks` of `tier` (`Tier::Device`: the pool;
    /// `Tier::Host`: the host tier) on rank `rank` (`pkv_block_segments`; 0 on an engine of one
    /// rank): for each block in order, each of its pool's layers (`PoolInfo::num_layers`), K
    /// then V (MLA: the latent alone); the same count for every block of an engine.
    ///
    /// Errors: `Status::InvalidArgument` for a tier other than `Device` or `Host`, `Host` on an
    /// engine without a host tier, a block id outside the tier, or a rank not below the
    /// engine's ranks.
    pub fn block_segments(&self, rank: u32, tier: Tier, blocks: &[i32]) -> Result<Vec<Segment>> {
        let n = u32::try_from(blocks.len())
            .map_err(|_| Error::new(Status::InvalidArgument, "block_segments: too many blocks"))?;
        let (lib, e, ids, tier) = (self.library(), self.as_raw(), blocks.as_ptr(), tier.code());
        self.read_segments(|out, cap, len| unsafe {
            // SAFETY: ids has n block ids; out has cap segments (or is NULL with cap 0).
            call!(lib, pkv_block_segments(e, rank, tier, ids, n, out, cap, len))
        })
    }

    /// The segments of running sequence `seq`'s blocks `first .. first + n` on rank
    /// `rank` (`pkv_seq_segments`): for each block index in order, each KV group in order, that
    /// group's block's segments as `block_segments` gives them. A block a windowed group gave
    /// back gives as many segments of null `base` and 0 `bytes`, so two engines of one layout
    /// list each token range at the same positions.
    ///
    /// Errors: `Status::InvalidArgument` for a range past `seq`'s blocks (`SeqInfo::num_blocks`)
    /// or a rank not below the engine's ranks; `Status::NotFound` for no such sequence;
    /// `Status::State` when `seq` holds no blocks of the pool (waiting, preempted or swapped
    /// out).
    pub fn seq_segments(&self, rank: u32, seq: Seq, first: u32, n: u32) -> Result<Vec<Segment>> {
        let (lib, e) = (self.library(), self.as_raw());
        self.read_segments(|out, cap, len| unsafe {
            // SAFETY: out has cap segments (or is NULL with cap 0).
            call!(lib, pkv_seq_segments(e, rank, seq.0, first, n, out, cap, len))
        })
    }

    /// Rank `rank`'s layout fingerprint (`pkv_layout_fingerprint`): SHA-256 over what decides
    /// what a block's segments hold and where (the model's shape and dtypes, fp8 scales, the
    /// block size, the layers and groups, the ranks), not over how many blocks either tier has.
    /// Engines of equal fingerprints can move blocks segment by segment.
    ///
    /// Errors: `Status::InvalidArgument` for a rank not below the engine's ranks.
    pub fn layout_fingerprint(&self, rank: u32) -> Result<[u8; 32]> {
        let mut out = [0u8; 32];
        let to = out.as_mut_ptr();
        // SAFETY: live handle; out holds the 32 bytes pkv writes.
        unsafe { call!(self.library(), pkv_layout_fingerprint(self.as_raw(), rank, to))? };
        Ok(out)
    }

    /// Reads a variable-size segment list: asks its count, then fills a buffer of that count.
    fn read_segments(
        &self,
        read: impl Fn(*mut sys::pkv_segment, u32, *mut u32) -> Result<()>,
    ) -> Result<Vec<Segment>> {
        let mut len = 0u32;
        read(ptr::null_mut(), 0, &mut len)?;
        let mut out = vec![sys::pkv_segment { base: ptr::null_mut(), bytes: 0 }; len as usize];
        read(out.as_mut_ptr(), len, &mut len)?;
        out.truncate(len as usize);
        Ok(out.iter().map(Segment::from_raw).collect())
    }
}
