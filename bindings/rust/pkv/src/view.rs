//! `BatchView`, an open batch's plan (`pkv_batch_view`) as slices, and `CopyKind`, what each of
//! its listed block copies moves.
use std::slice;

use pkv_sys as sys;

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
    /// State slot to state slot (pkv 0.6; ids are slots, `PoolInfo::state_base`): a fork's
    /// copy of the working state, run before the step reads any state.
    State,
    /// State slot to host state slot (pkv 0.6; `src` a state slot, `dst` a host state slot at
    /// `PoolInfo::host_state_base`): `Engine::swap_out`'s working state, or a checkpoint evicted
    /// from the device and offloaded.
    StateOut,
    /// Host state slot to working state slot (pkv 0.6): `Engine::swap_in`, or a prefix hit
    /// restoring an offloaded checkpoint.
    StateIn,
}

impl CopyKind {
    pub fn code(self) -> i32 {
        (match self {
            CopyKind::Cow => sys::PKV_COPY_COW,
            CopyKind::SwapOut => sys::PKV_COPY_SWAP_OUT,
            CopyKind::SwapIn => sys::PKV_COPY_SWAP_IN,
            CopyKind::Offload => sys::PKV_COPY_OFFLOAD,
            CopyKind::Load => sys::PKV_COPY_LOAD,
            CopyKind::State => sys::PKV_COPY_STATE,
            CopyKind::StateOut => sys::PKV_COPY_STATE_OUT,
            CopyKind::StateIn => sys::PKV_COPY_STATE_IN,
        }) as i32
    }
    pub fn from_code(code: i32) -> Option<CopyKind> {
        [
            CopyKind::Cow,
            CopyKind::SwapOut,
            CopyKind::SwapIn,
            CopyKind::Offload,
            CopyKind::Load,
            CopyKind::State,
            CopyKind::StateOut,
            CopyKind::StateIn,
        ]
        .into_iter()
        .find(|k| k.code() == code)
    }
}

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
    /// `[num_seqs]` (pkv 0.6): the state slot of each sequence, which the step reads and updates
    /// in place (`PoolInfo::state_base`); empty without state layers.
    pub state_slots: &'b [i32],
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

/// The slices of a view pkv filled (`pkv_batch_info`).
///
/// # Safety
/// `v`'s arrays are valid for the lengths pkv.h gives them while `'b` lasts (the batch is open).
pub(crate) unsafe fn borrow<'b>(v: &sys::pkv_batch_view) -> BatchView<'b> {
    let (seqs, tokens) = (v.num_seqs as usize, v.num_tokens as usize);
    let indptr = view_slice(v.block_indptr, seqs + 1);
    let num_indices = indptr.last().map_or(0, |&n| n.max(0) as usize);
    let tables = seqs * v.max_blocks_per_seq as usize;
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
        block_tables: view_slice(v.block_tables, tables),
        copy_src: view_slice(v.copy_src, v.num_copies as usize),
        copy_dst: view_slice(v.copy_dst, v.num_copies as usize),
        copy_kind: view_slice(v.copy_kind, v.num_copies as usize),
        sample_rows: view_slice(v.sample_rows, seqs),
        num_kv_groups: v.num_kv_groups,
        group_slot_mapping: view_slice(v.group_slot_mapping, v.num_kv_groups as usize * tokens),
        group_block_tables: view_slice(v.group_block_tables, v.num_kv_groups as usize * tables),
        state_slots: view_slice(v.state_slots, seqs),
    }
}
