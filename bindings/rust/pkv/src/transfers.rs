//! KV transfers between engines (pkv 0.12, DESIGN.md §10), for disaggregated prefill and
//! decode: a producer engine holds a finished sequence's blocks while a transport reads them
//! (`Engine::hold`, `Request::hold_on_finish`, `Engine::hold_end`), and a consumer engine admits
//! a request whose first tokens' KV arrives from it (`Request::num_remote_tokens`) into blocks it
//! reserved, lists it (`Engine::drain_receiving`) and runs it once the bytes are in
//! (`Engine::receive_end`). pkv moves no bytes itself: the host's transport copies the
//! producer's segments (`Engine::seq_segments`, `Engine::seq_state_segment`) to the consumer's,
//! between engines of equal `Engine::layout_fingerprint`.
use pkv_sys as sys;

use crate::engine::Engine;
use crate::error::Result;
use crate::library::{call, codes};
use crate::segments::Segment;
use crate::seq::Seq;

/// `Engine::hold`'s (and `Request::hold_timeout_ms`'s) timeout 0: this many milliseconds
/// (`PKV_TRANSFER_TIMEOUT_DEFAULT_MS`, vLLM's 480 s).
pub const TRANSFER_TIMEOUT_DEFAULT_MS: u32 = sys::PKV_TRANSFER_TIMEOUT_DEFAULT_MS as u32;
/// A hold's timeout that never comes (`UINT32_MAX`): it lasts until `Engine::hold_end` or the
/// engine's end. The only one an engine of one rank of several takes.
pub const TRANSFER_TIMEOUT_NONE: u32 = u32::MAX;

codes! {
    /// Where a sequence is in a transfer (`SeqInfo::transfer`, `PKV_TRANSFER_NONE`, `HOLDING`,
    /// `RECEIVING`).
    TransferState: u32 {
        /// Neither below.
        None = sys::PKV_TRANSFER_NONE,
        /// Its blocks are held for a transfer out (`Engine::hold`, `Request::hold_on_finish`).
        Holding = sys::PKV_TRANSFER_HOLDING,
        /// A request waiting for its first `num_remote_tokens`' KV (`Engine::drain_receiving`).
        Receiving = sys::PKV_TRANSFER_RECEIVING,
    }
}

codes! {
    /// How a transfer ended (`Engine::hold_end`, `Engine::receive_end`; `PKV_TRANSFER_DONE`,
    /// `FAILED`, `FAILED_FINISH`).
    TransferOutcome: u32 {
        /// Every byte arrived.
        Done = sys::PKV_TRANSFER_DONE,
        /// They did not: a receiving request computes its prompt itself.
        Failed = sys::PKV_TRANSFER_FAILED,
        /// They did not: the receiving request finishes (`FinishReason::TransferFailed`).
        /// `receive_end` only.
        FailedFinish = sys::PKV_TRANSFER_FAILED_FINISH,
    }
}

impl Engine {
    /// Holds `allocate`d sequence `seq` for a transfer out (`pkv_hold`): it stops running and
    /// keeps its blocks (and its state working slot) untouched until `hold_end`, its timeout
    /// (`timeout_ms` after this call on the engine's clock; 0 = `TRANSFER_TIMEOUT_DEFAULT_MS`,
    /// `TRANSFER_TIMEOUT_NONE` = never) or the engine's end. Then it is finished: it holds
    /// nothing, and `release` ends it. Meanwhile `seq_segments` and `seq_state_segment` give its
    /// bytes, its sealed blocks stay in the prefix cache, and `release` refuses it
    /// (`Status::State`). A request of `submit` holds when it finishes instead
    /// (`Request::hold_on_finish`).
    ///
    /// Errors: `Status::NotFound` for no such sequence; `Status::State` when `seq` is not
    /// running, is in the open batch, has uncomputed tokens or is a request; `Status::NoSpace`
    /// when its blocks would pass `max_held_blocks` (nothing changed); `Status::Unsupported` for
    /// a timeout other than `TRANSFER_TIMEOUT_NONE` on an engine of one rank of several.
    pub fn hold(&self, seq: Seq, timeout_ms: u32) -> Result<()> {
        // SAFETY: live handle.
        unsafe { call!(self.library(), pkv_hold(self.as_raw(), seq.0, timeout_ms)) }
    }

    /// Ends `seq`'s hold, the transport done with its bytes (`pkv_hold_end`): `outcome`
    /// `TransferOutcome::Done` or `Failed` (counted apart: `Stats::num_holds_done`,
    /// `num_holds_failed`). Its blocks go back (sealed ones stay cached, its retention applies)
    /// and it is finished.
    ///
    /// Errors: `Status::InvalidArgument` for `TransferOutcome::FailedFinish`; `Status::NotFound`
    /// for no such sequence; `Status::State` when `seq` holds nothing for a transfer (never
    /// held, or the hold ended or timed out).
    pub fn hold_end(&self, seq: Seq, outcome: TransferOutcome) -> Result<()> {
        // SAFETY: live handle.
        unsafe { call!(self.library(), pkv_hold_end(self.as_raw(), seq.0, outcome.code())) }
    }

    /// The requests that began receiving since the last call (`pkv_drain_receiving`), each
    /// listed once. A request of `Request::num_remote_tokens` N is admitted by `step` as any
    /// other, its whole prompt reserved; when its local prefix hit covers fewer than N tokens it
    /// waits, `TransferState::Receiving`, instead of running: `seq_info` gives the blocks whose
    /// KV must arrive (`SeqInfo::remote_first_block`, `remote_num_blocks`), `seq_segments` their
    /// segments and, with state layers, `seq_state_segment` where the state after N tokens
    /// goes. The copies queued before it were done by that `step` (on CUDA: once the engine's
    /// stream reached them), so the transport may write. A hit that covers N admits it as an
    /// ordinary request, never listed. A receiving request is never preempted, and `release`
    /// refuses it until `receive_end`.
    pub fn drain_receiving(&self) -> Result<Vec<Seq>> {
        let mut all = Vec::new();
        let mut chunk = [0u64; 64];
        loop {
            let (mut len, e, out) = (0u32, self.as_raw(), chunk.as_mut_ptr());
            // SAFETY: chunk has 64 elements.
            unsafe { call!(self.library(), pkv_drain_receiving(e, out, 64, &mut len))? };
            all.extend(chunk[..len as usize].iter().map(|&id| Seq(id)));
            if len < 64 {
                return Ok(all);
            }
        }
    }

    /// Ends receiving request `seq`'s remote fill (`pkv_receive_end`).
    /// `TransferOutcome::Done`: its first `num_remote_tokens` tokens are computed, their full
    /// blocks sealed into the prefix cache as a step's would be, and it runs on from there at
    /// the next `step`. `Failed`: nothing the transfer wrote is used; its blocks past the hit go
    /// back unsealed and it waits to be admitted again (preempted), computing its prompt itself.
    /// `FailedFinish`: it gives everything back and finishes (`FinishReason::TransferFailed`;
    /// `drain_finished` lists it).
    ///
    /// Errors: `Status::NotFound` for no such sequence; `Status::State` when `seq` is not
    /// receiving.
    pub fn receive_end(&self, seq: Seq, outcome: TransferOutcome) -> Result<()> {
        // SAFETY: live handle.
        unsafe { call!(self.library(), pkv_receive_end(self.as_raw(), seq.0, outcome.code())) }
    }

    /// Where sequence `seq`'s recurrent state is on rank `rank` (`pkv_seq_state_segment`): its
    /// state working slot (`PoolInfo::state_slot_bytes` at `state_base + slot *
    /// state_slot_bytes`) while it is running, held or receiving. An engine without state layers
    /// gives a null `base` and 0 `bytes`: it has no state to move.
    ///
    /// Errors: `Status::InvalidArgument` for a rank not below the engine's ranks;
    /// `Status::NotFound` for no such sequence; `Status::State` when `seq` holds no working
    /// slot (waiting, preempted, swapped out or finished).
    pub fn seq_state_segment(&self, rank: u32, seq: Seq) -> Result<Segment> {
        let mut out = sys::pkv_segment { base: std::ptr::null_mut(), bytes: 0 };
        let e = self.as_raw();
        // SAFETY: live handle; out is a pkv_segment pkv writes.
        unsafe { call!(self.library(), pkv_seq_state_segment(e, rank, seq.0, &mut out))? };
        Ok(Segment::from_raw(&out))
    }
}
