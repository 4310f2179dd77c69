//! Recurrent state (pkv 0.6, DESIGN.md §13): a `LayerKind::State` layer keeps a fixed-size state
//! per sequence (Gated DeltaNet, KDA, Mamba) instead of K and V, in up to
//! `PKV_MAX_STATE_PARTS` parts (`StatePart`: a conv state, an SSM / delta-rule state). pkv owns
//! the memory (`PoolInfo::state_base`, one slot per running sequence: `BatchView::state_slots`)
//! and says where each part is (`LayerInfo::state`); the host runs the recurrence.
use pkv_sys as sys;

use crate::error::{Error, Result, Status};
use crate::layers::{LayerKind, LayerSpec};
use crate::library::codes;
use crate::params::{Dtype, Params};

/// Parts of a state layer's state (`PKV_MAX_STATE_PARTS`).
pub const MAX_STATE_PARTS: usize = sys::PKV_MAX_STATE_PARTS as usize;
/// Dimensions of a part's shape (`PKV_MAX_STATE_DIMS`).
pub const MAX_STATE_DIMS: usize = sys::PKV_MAX_STATE_DIMS as usize;

codes! {
    /// Where a sequence leaves checkpoints of its recurrent state for prefix caching
    /// (`PKV_STATE_CHECKPOINT_*`), only at block boundaries.
    StateCheckpointPolicy: u32 {
        /// The last block boundary its prompt reaches (the default).
        PromptEnd = sys::PKV_STATE_CHECKPOINT_PROMPT_END,
        /// Every `state_checkpoint_interval` blocks of its computed tokens, and its prompt's
        /// last boundary.
        Every = sys::PKV_STATE_CHECKPOINT_EVERY,
        /// None: no prefix hits on a model with state layers.
        None = sys::PKV_STATE_CHECKPOINT_NONE,
    }
}

/// One part of a state layer's state: a dense array of `dims()` (outermost first) of `dtype`.
/// `shape` is pkv's: up to `MAX_STATE_DIMS` dimensions ending at the first 0; a part whose
/// first dimension is 0 is absent (`StatePart::default()`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct StatePart {
    /// F32, F16 or Bf16; `None`: F32 (pkv's 0). In what pkv reports, `None` is also a code
    /// this binding does not know.
    pub dtype: Option<Dtype>,
    pub shape: [u32; MAX_STATE_DIMS],
}

impl StatePart {
    /// A part of `dims` (1 ..= `MAX_STATE_DIMS` of them, each >= 1; pkv checks its limits) of
    /// `dtype`; `InvalidArgument` for a shape no part can hold, saying why.
    pub fn new(dtype: Dtype, dims: &[u32]) -> Result<StatePart> {
        if dims.is_empty() || dims.len() > MAX_STATE_DIMS || dims.contains(&0) {
            return Err(Error::new(
                Status::InvalidArgument,
                format!(
                    "StatePart::new: dims {:?}: give 1 to {} dimensions, each >= 1 \
                     (StatePart::default() is an absent part)",
                    dims, MAX_STATE_DIMS
                ),
            ));
        }
        let mut shape = [0u32; MAX_STATE_DIMS];
        shape[..dims.len()].copy_from_slice(dims);
        Ok(StatePart { dtype: Some(dtype), shape })
    }

    /// The dimensions, up to the first 0 (empty: no such part).
    pub fn dims(&self) -> &[u32] {
        let n = self.shape.iter().position(|&d| d == 0).unwrap_or(MAX_STATE_DIMS);
        &self.shape[..n]
    }

    pub fn is_present(&self) -> bool {
        self.shape[0] != 0
    }

    /// The parts of a C spec's or layer info's `state_dtype` and `state_shape` arrays; an absent
    /// part is `StatePart::default()` whatever its dtype code (so specs compare equal read back).
    pub(crate) fn parts_from_raw(dtype: &[u32], shape: &[u32]) -> [StatePart; MAX_STATE_PARTS] {
        let mut parts = [StatePart::default(); MAX_STATE_PARTS];
        for (i, part) in parts.iter_mut().enumerate() {
            part.shape.copy_from_slice(&shape[i * MAX_STATE_DIMS..(i + 1) * MAX_STATE_DIMS]);
            if part.is_present() {
                part.dtype = Dtype::from_code(dtype[i] as i32);
            }
        }
        parts
    }

    /// The C arrays of `parts`: (`state_dtype`, `state_shape`).
    pub(crate) fn parts_to_raw(
        parts: &[StatePart; MAX_STATE_PARTS],
    ) -> ([u32; MAX_STATE_PARTS], [u32; MAX_STATE_PARTS * MAX_STATE_DIMS]) {
        let mut dtype = [sys::PKV_DTYPE_F32 as u32; MAX_STATE_PARTS];
        let mut shape = [0u32; MAX_STATE_PARTS * MAX_STATE_DIMS];
        for (i, part) in parts.iter().enumerate() {
            dtype[i] = part.dtype.map_or(sys::PKV_DTYPE_F32 as u32, |d| d.code() as u32);
            shape[i * MAX_STATE_DIMS..(i + 1) * MAX_STATE_DIMS].copy_from_slice(&part.shape);
        }
        (dtype, shape)
    }
}

/// Where one part of a state layer's state is (`pkv_layer_info`'s state fields): `bytes` bytes
/// at `PoolInfo::state_base + slot * state_slot_bytes + offset`; 0 bytes: no such part.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct StatePartInfo {
    pub part: StatePart,
    pub offset: u64,
    pub bytes: u64,
}

impl StatePartInfo {
    pub(crate) fn from_raw(r: &sys::pkv_layer_info) -> [StatePartInfo; MAX_STATE_PARTS] {
        let parts = StatePart::parts_from_raw(&r.state_dtype, &r.state_shape);
        let mut out = [StatePartInfo::default(); MAX_STATE_PARTS];
        for (i, info) in out.iter_mut().enumerate() {
            *info = StatePartInfo { part: parts[i], offset: r.state_offset[i], bytes: r.state_bytes[i] };
        }
        out
    }
}

impl LayerSpec {
    /// A recurrent layer, this rank's state: `[conv, ssm]` (Qwen3-Next: the conv state
    /// conv_dim x (conv_kernel - 1), the delta-rule state v_heads x k_dim x v_dim); a
    /// `StatePart::default()` leaves a part out.
    pub fn state(parts: [StatePart; MAX_STATE_PARTS]) -> LayerSpec {
        LayerSpec { kind: Some(LayerKind::State), state: parts, ..LayerSpec::default() }
    }
}

impl Params {
    /// Where sequences leave checkpoints of their recurrent state (default `PromptEnd`).
    pub fn state_checkpoint_policy(mut self, policy: StateCheckpointPolicy) -> Params {
        self.raw_mut().state_checkpoint_policy = policy.code();
        self
    }
    /// `Every`: blocks between checkpoints, 1 ..= 2^20; else 0.
    pub fn state_checkpoint_interval(mut self, blocks: u32) -> Params {
        self.raw_mut().state_checkpoint_interval = blocks;
        self
    }
    /// Checkpoint slots, each a whole state; 0 = `max_num_seqs` (`None`: 0 always). Taken from
    /// the budget before the KV blocks.
    pub fn num_state_checkpoints(mut self, slots: u32) -> Params {
        self.raw_mut().num_state_checkpoints = slots;
        self
    }
    /// The policy set; `None` for a code this binding does not know.
    pub fn get_state_checkpoint_policy(&self) -> Option<StateCheckpointPolicy> {
        StateCheckpointPolicy::from_code(self.raw().state_checkpoint_policy)
    }
}
