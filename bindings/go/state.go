package pkv

// Recurrent state (pkv 0.6, DESIGN.md §13): a LayerState layer keeps a fixed-size state per
// sequence (Gated DeltaNet, KDA, Mamba) instead of K and V, in up to MaxStateParts parts (a conv
// state, an SSM / delta-rule state). pkv owns the memory (PoolInfo.StateBase, one slot per
// running sequence: Batch.StateSlots) and says where each part is (LayerInfo.StateParts); the
// host runs the recurrence. LayerSpec's StateDType / StateShape and LayerInfo's state fields are
// pkv.h's arrays; StatePart is one part of them.

// StatePart is one part of a state layer's state: a dense array of Shape (outermost first, up to
// MaxStateDims dimensions, each >= 1) of DType (F32, F16 or BF16). A part with no Shape is absent.
type StatePart struct {
	DType DType
	Shape []uint32
}

// StatePartInfo is where one part of a state layer's state is in a slot: Bytes bytes at
// PoolInfo.StateBase + slot*StateSlotBytes + Offset.
type StatePartInfo struct {
	StatePart
	Offset uint64
	Bytes  uint64
}

// StateLayer is a recurrent layer, this rank's state, of up to MaxStateParts parts: part 0 the
// conv state (Qwen3-Next: conv_dim x (conv_kernel - 1)), part 1 the SSM / delta-rule state
// (v_heads x k_dim x v_dim); a StatePart{} leaves a part out. A part no LayerSpec can hold (more
// parts or dimensions than pkv.h has, a dimension 0) is StatusInvalidArgument, saying which.
func StateLayer(parts ...StatePart) (LayerSpec, error) {
	s := LayerSpec{Kind: LayerState}
	if len(parts) > MaxStateParts {
		return s, invalid("StateLayer: %d parts given: a state has at most %d (a conv state, an "+
			"SSM state)", len(parts), MaxStateParts)
	}
	for i, part := range parts {
		if len(part.Shape) > MaxStateDims {
			return s, invalid("StateLayer: part %d's shape %v has %d dimensions: give at most %d",
				i, part.Shape, len(part.Shape), MaxStateDims)
		}
		for k, d := range part.Shape {
			if d == 0 {
				return s, invalid("StateLayer: part %d's shape %v has a dimension 0: give each "+
					">= 1 (no shape for an absent part)", i, part.Shape)
			}
			s.StateShape[i*MaxStateDims+k] = d
		}
		s.StateDType[i] = uint32(part.DType)
	}
	return s, nil
}

// stateParts reads pkv.h's per-part arrays: each part's shape ends at its first 0.
func stateParts(dtype [MaxStateParts]uint32, shape [MaxStateParts * MaxStateDims]uint32) []StatePart {
	out := make([]StatePart, MaxStateParts)
	for i := range out {
		out[i].DType = DType(dtype[i])
		for _, d := range shape[i*MaxStateDims : (i+1)*MaxStateDims] {
			if d == 0 {
				break
			}
			out[i].Shape = append(out[i].Shape, d)
		}
	}
	return out
}

// StateParts are the spec's MaxStateParts parts (absent ones with no Shape).
func (s LayerSpec) StateParts() []StatePart {
	return stateParts(s.StateDType, s.StateShape)
}

// StateParts are a state layer's MaxStateParts parts and where each is in a slot (0 Bytes: no
// such part; every other layer's are all absent).
func (l LayerInfo) StateParts() []StatePartInfo {
	parts := stateParts(l.StateDType, l.StateShape)
	out := make([]StatePartInfo, len(parts))
	for i, p := range parts {
		out[i] = StatePartInfo{StatePart: p, Offset: l.StateOffset[i], Bytes: l.StateBytes[i]}
	}
	return out
}

// StateSlots is each sequence's state slot (pkv 0.6), which the step reads and updates in place
// (PoolInfo.StateBase + slot*StateSlotBytes); empty on an engine without state layers. A copy
// of kind CopyState moves slot CopySrc()[i] into slot CopyDst()[i] (a fork's state) before the
// step reads any state.
func (b *Batch) StateSlots() ([]int32, error) {
	n := b.NumSeqs()
	if b.view.StateSlots == 0 { // no state layers, or a library older than 0.6
		n = 0
	}
	return copyInts[int32](b, b.view.StateSlots, n)
}

// stateLayerRefusal is Attention's error on a state layer, which has no attention.
func stateLayerRefusal(call string, layer int) error {
	return invalid("%s: layer %d is a state layer (a recurrent state, no K and V): pkv has no "+
		"attention for it; run its recurrence on the slots of Batch.StateSlots", call, layer)
}
