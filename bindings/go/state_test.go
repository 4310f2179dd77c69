package pkv_test

// Recurrent state (pkv 0.6, issue 28 item 7): state layer specs round-trip through the params and
// pkv_profile, whose budget's state terms are checked against bytes computed here by hand; an
// engine's state pool (PoolInfo), each state layer's parts in a slot (LayerInfo.StateParts) and
// the batch's state slots; the checkpoint params; refusals that name what was wrong. The same
// model as the other bindings' state tests.

import (
	"reflect"
	"testing"

	"pkv.local/pkv"
)

// A Gated DeltaNet-like layer, small: a bf16 conv state of 96 channels x 3 taps (576 bytes, 768
// with its part rounded to 256) and an f32 delta-rule state of 2 heads x 16 x 16 (2048).
const (
	convBytes  = 96 * 3 * 2
	ssmBytes   = 2 * 16 * 16 * 4
	layerBytes = 768 + ssmBytes     // each part at a 256-byte boundary
	slotBytes  = 3 * layerBytes     // 8448, a multiple of 256
	blockBytes = 2 * 2 * 16 * 4 * 4 // layer 3: f32 K and V of 2 kv heads x 16, 4 tokens a block
)

func gdn() pkv.LayerSpec {
	return must(pkv.StateLayer(pkv.StatePart{DType: pkv.DTypeBF16, Shape: []uint32{96, 3}},
		pkv.StatePart{DType: pkv.DTypeF32, Shape: []uint32{2, 16, 16}}))
}

// hybridParams: three state layers then one attention layer (3 : 1, as Qwen3-Next's), 8 sequences.
func hybridParams(t *testing.T) pkv.EngineParams {
	p := smallParams(t)
	p.NumLayers, p.NumBlocks, p.MaxNumSeqs = 4, 32, 8
	p.LayerSpecs = []pkv.LayerSpec{gdn(), gdn(), gdn(), {}}
	return p
}

func TestStateSpecRoundTrips(t *testing.T) {
	e := newEngine(t, hybridParams(t))
	specs := e.Params().LayerSpecs
	if !reflect.DeepEqual(specs[1], gdn()) || specs[1].Kind != pkv.LayerState {
		t.Fatalf("layer 1 read back: %+v", specs[1])
	}
	want := []pkv.StatePart{{DType: pkv.DTypeBF16, Shape: []uint32{96, 3}}, {DType: pkv.DTypeF32, Shape: []uint32{2, 16, 16}}}
	if got := specs[2].StateParts(); !reflect.DeepEqual(got, want) {
		t.Fatalf("layer 2's parts: %+v", got)
	}
	if got := specs[3].StateParts(); got[0].Shape != nil || got[1].Shape != nil {
		t.Fatalf("an attention layer's parts: %+v", got)
	}
}

func TestStateBudgetByHand(t *testing.T) {
	// default checkpoints: MaxNumSeqs of them, beside the 8 working slots
	b := must(pkv.Profile(hybridParams(t)))
	if b.NumStateLayers != 3 || b.NumStateSlots != 8 || b.NumStateCheckpoints != 8 ||
		b.StateBytesPerSeq != slotBytes || b.StatePoolBytes != 16*slotBytes || b.BlockBytes != blockBytes {
		t.Fatalf("budget: %+v", b)
	}
	// a budget in bytes: the state pool (8 + 4 slots) first, then whole blocks of what is left
	p := hybridParams(t)
	p.NumBlocks, p.KVCacheBytes, p.NumStateCheckpoints = 0, 12*slotBytes+40*blockBytes+100, 4
	b = must(pkv.Profile(p))
	if b.NumStateSlots != 8 || b.NumStateCheckpoints != 4 || b.StatePoolBytes != 12*slotBytes ||
		b.NumBlocks != 40 || b.PoolBytes != 40*blockBytes {
		t.Fatalf("budget of %d bytes: %+v", p.KVCacheBytes, b)
	}
	p = hybridParams(t)
	p.StateCheckpointPolicy = pkv.StateCheckpointNone
	if b = must(pkv.Profile(p)); b.NumStateCheckpoints != 0 || b.StatePoolBytes != 8*slotBytes {
		t.Fatalf("policy NONE: %+v", b)
	}
	b = must(pkv.Profile(smallParams(t))) // no state layers: every state term 0
	if b.NumStateLayers != 0 || b.NumStateSlots != 0 || b.StateBytesPerSeq != 0 || b.StatePoolBytes != 0 {
		t.Fatalf("no state layers: %+v", b)
	}
}

func TestBadStateSpecsRefused(t *testing.T) {
	_, err := pkv.StateLayer(pkv.StatePart{Shape: []uint32{1, 2, 3, 4, 5}})
	expectRefusal(t, err, "part 0", "5 dimensions")
	_, err = pkv.StateLayer(pkv.StatePart{}, pkv.StatePart{Shape: []uint32{8, 0}})
	expectRefusal(t, err, "part 1", "dimension 0")
	_, err = pkv.StateLayer(pkv.StatePart{}, pkv.StatePart{}, pkv.StatePart{})
	expectRefusal(t, err, "3 parts")
	// pkv's rules: a state layer has no attention fields, and one part at least
	p := hybridParams(t)
	p.LayerSpecs[0].NumKVHeads = 2
	_, err = pkv.Profile(p)
	expectRefusal(t, err, "num_kv_heads")
	p = hybridParams(t)
	p.LayerSpecs[1] = must(pkv.StateLayer())
	_, err = pkv.Profile(p)
	expectRefusal(t, err, "layer_specs[1]")
	p = hybridParams(t)
	p.StateCheckpointInterval = 3 // an interval without EVERY
	_, err = pkv.Profile(p)
	expectRefusal(t, err, "state_checkpoint_interval")
}

func TestEngineStateSlots(t *testing.T) {
	p := hybridParams(t)
	p.NumStateCheckpoints = 4
	e := newEngine(t, p)
	pool := must(e.PoolInfo())
	if pool.StateBase == 0 || pool.StateSlotBytes != slotBytes || pool.NumStateSlots != 12 {
		t.Fatalf("pool: %+v", pool)
	}
	for layer := 0; layer < 3; layer++ {
		l := must(e.LayerInfo(layer))
		parts := l.StateParts()
		base := uint64(layer * layerBytes)
		if l.Kind != pkv.LayerState || l.KBase != 0 || parts[0].Offset != base || parts[0].Bytes != convBytes ||
			parts[1].Offset != base+768 || parts[1].Bytes != ssmBytes ||
			!reflect.DeepEqual(parts[0].StatePart, gdn().StateParts()[0]) {
			t.Fatalf("layer %d: %+v", layer, parts)
		}
	}
	if l := must(e.LayerInfo(3)); l.StateBytes != [2]uint64{} {
		t.Fatalf("layer 3's state: %+v", l)
	}
	// each running sequence its own working slot
	a := must(e.Allocate([]int32{1, 2, 3, 4, 5, 6}, nil))
	s2 := must(e.Allocate([]int32{50, 51, 52, 53, 54}, nil))
	b := must(e.BeginBatch([]*pkv.Sequence{a, s2}, nil))
	slots := must(b.StateSlots())
	if len(slots) != 2 || slots[0] == slots[1] || slots[0] < 0 || slots[0] >= 8 || slots[1] < 0 || slots[1] >= 8 {
		t.Fatalf("state slots %v", slots)
	}
	q, kv := make([]float32, 11*64), make([]float32, 11*32)
	expectRefusal(t, b.Attention(0, q, kv, kv, make([]float32, len(q))), "layer 0 is a state layer")
	if err := b.End(); err != nil { // the host ran every layer itself
		t.Fatal(err)
	}
	// a fork takes a slot of its own, its parent's state copied into it before the step
	c := must(a.Fork())
	if err := c.Append(7); err != nil {
		t.Fatal(err)
	}
	b = must(e.BeginBatch([]*pkv.Sequence{c}, nil))
	defer b.Abort()
	slot := must(b.StateSlots())[0]
	kinds, src, dst := must(b.CopyKind()), must(b.CopySrc()), must(b.CopyDst())
	for i, k := range kinds {
		if k == pkv.CopyState {
			if src[i] != slots[0] || dst[i] != slot || slot == slots[0] || slot == slots[1] {
				t.Fatalf("state copy %d -> %d, the fork's slot %d, the parent's %d", src[i], dst[i], slot, slots[0])
			}
			return
		}
	}
	t.Fatalf("no state copy in %v", kinds)
}
