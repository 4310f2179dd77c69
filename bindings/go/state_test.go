package pkv_test

// Recurrent state (pkv 0.6, issue 28 item 7): state layer specs round-trip through the params and
// pkv_profile, whose budget's state terms are checked against bytes computed here by hand; an
// engine's state pool (PoolInfo), each state layer's parts in a slot (LayerInfo.StateParts) and
// the batch's state slots; the checkpoint params; refusals that name what was wrong. Prefix
// caching of the state through the step loop: the checkpoints each policy takes, the restore of a
// shared prefix from one, their copies in the batches, their events and the Stats' counters. The
// same model and requests as the other bindings' state tests.

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

// Working slots are ids 0..8 (MaxNumSeqs), checkpoints 8..16 (NumStateCheckpoints' default).
func isWorking(slot int32) bool    { return slot >= 0 && slot < 8 }
func isCheckpoint(slot int32) bool { return slot >= 8 && slot < 16 }

// stateCopy is a state copy of a batch (CopyState): slot Src into slot Dst.
type stateCopy struct{ Src, Dst int32 }

func (c stateCopy) isCapture() bool { return isWorking(c.Src) && isCheckpoint(c.Dst) }

// sharedPrompt is 14 tokens (3 whole blocks of 4 and 2 more): the 8 every prompt here shares (a
// system prompt of two blocks), then 6 of its own.
func sharedPrompt(own int32) []int32 {
	prompt := []int32{0, 1, 2, 3, 4, 5, 6, 7}
	for i := int32(0); i < 6; i++ {
		prompt = append(prompt, 100*own+i)
	}
	return prompt
}

// runRequest runs one request of prompt sampling one token through the step loop until it
// finishes; the host runs no kernel (pkv's checkpoints and counters do not read the state). It
// returns the request's info and the state copies its batches listed.
func runRequest(t *testing.T, e *pkv.Engine, prompt []int32) (pkv.SeqInfo, []stateCopy) {
	t.Helper()
	rp := must(pkv.DefaultRequestParams())
	rp.MaxNewTokens = 1
	seq := must(e.Submit(prompt, &rp, nil))
	var copies []stateCopy
	for steps := 1; ; steps++ {
		batch := must(e.Step())
		if batch == nil {
			break
		}
		if steps >= 10 {
			t.Fatal("the scheduler does not finish")
		}
		kinds, src, dst := must(batch.CopyKind()), must(batch.CopySrc()), must(batch.CopyDst())
		for i, k := range kinds {
			if k == pkv.CopyState {
				copies = append(copies, stateCopy{src[i], dst[i]})
			}
		}
		sampled := make([]int32, batch.NumSeqs())
		if err := batch.Commit(sampled); err != nil {
			t.Fatal(err)
		}
	}
	if done := must(e.DrainFinished()); len(done) != 1 || done[0].ID != seq.ID {
		t.Fatalf("finished %v, submitted %d", done, seq.ID)
	}
	info := must(seq.Info())
	if err := seq.Release(); err != nil {
		t.Fatal(err)
	}
	return info, copies
}

// threeRequests runs three requests sharing sharedPrompt's first two blocks, one after the other,
// on e: their infos' cached tokens, their state copies, then the engine's stats.
func threeRequests(t *testing.T, e *pkv.Engine) ([]uint32, [][]stateCopy, pkv.Stats) {
	t.Helper()
	var cached []uint32
	var copies [][]stateCopy
	for own := int32(1); own <= 3; own++ {
		info, c := runRequest(t, e, sharedPrompt(own))
		cached, copies = append(cached, info.NumCachedTokens), append(copies, c)
	}
	if err := e.Check(); err != nil {
		t.Fatal(err)
	}
	return cached, copies, must(e.Stats())
}

func TestStateCheckpointRestoresASharedPrefix(t *testing.T) {
	p := hybridParams(t)
	p.EnableKVEvents = true
	e := newEngine(t, p)
	cached, copies, st := threeRequests(t, e)
	// A: nothing cached. B: A's two blocks of KV, but no checkpoint at their end: from token 0.
	// C: the checkpoint B left where its cached KV ended (the branch point).
	if !reflect.DeepEqual(cached, []uint32{0, 0, 8}) {
		t.Fatalf("cached tokens %v", cached)
	}
	// A checkpoints at its prompt's last boundary (12); B at the branch point (8), then at 12;
	// C's working slot starts from B's checkpoint at 8, before any write, then checkpoints at 12
	a, b, c := copies[0], copies[1], copies[2]
	if len(a) != 1 || !a[0].isCapture() || len(b) != 2 || !b[0].isCapture() || !b[1].isCapture() {
		t.Fatalf("A's state copies %v, B's %v", a, b)
	}
	if len(c) != 2 || c[0].Src != b[0].Dst || !isWorking(c[0].Dst) || !c[1].isCapture() || c[1].Src != c[0].Dst {
		t.Fatalf("C's state copies %v (B's %v)", c, b)
	}
	if st.NumStateCheckpointsTaken != 4 || st.NumStateRestores != 1 || st.NumStateCheckpointsHeld != 4 ||
		st.StateFallbackTokens != 8 || st.NumStateCheckpointEvictions != 0 || st.PrefixHitTokens != 8 {
		t.Fatalf("stats %+v", st)
	}
	// each checkpoint is a BlockStored of its block's hash in the state "group", after the KV's
	groups := uint32(len(must(e.KVGroups()).GroupWindow))
	root := must(pkv.BlockHashRoot(0, nil))
	branch := must(pkv.BlockHash(0, must(pkv.BlockHash(0, root, []int32{0, 1, 2, 3})), []int32{4, 5, 6, 7}))
	var stored, atBranch int
	for _, ev := range must(e.DrainKVEvents(1024)) {
		if ev.Group != groups {
			continue
		}
		if ev.Type != pkv.EventBlockStored || ev.Medium != pkv.TierDevice {
			t.Fatalf("a checkpoint's event %+v", ev)
		}
		stored++
		if ev.BlockHash == branch {
			atBranch++
		}
	}
	if stored != 4 || atBranch != 1 {
		t.Fatalf("%d checkpoint events, %d of them B's at 8", stored, atBranch)
	}
}

func TestStateCheckpointPolicies(t *testing.T) {
	// EVERY 1: A leaves checkpoints at 4, 8 and 12; B and C each restore at 8, checkpoint at 12
	p := hybridParams(t)
	p.StateCheckpointPolicy, p.StateCheckpointInterval = pkv.StateCheckpointEvery, 1
	cached, _, st := threeRequests(t, newEngine(t, p))
	if !reflect.DeepEqual(cached, []uint32{0, 8, 8}) || st.NumStateCheckpointsTaken != 5 ||
		st.NumStateRestores != 2 || st.StateFallbackTokens != 0 || st.NumStateCheckpointsHeld != 5 {
		t.Fatalf("EVERY 1: cached tokens %v, stats %+v", cached, st)
	}
	// NONE: no checkpoint and no hit: every prompt from token 0, no fallback counted
	p.StateCheckpointPolicy, p.StateCheckpointInterval = pkv.StateCheckpointNone, 0
	cached, copies, st := threeRequests(t, newEngine(t, p))
	if !reflect.DeepEqual(cached, []uint32{0, 0, 0}) || len(copies[0])+len(copies[1])+len(copies[2]) != 0 {
		t.Fatalf("NONE: cached tokens %v, state copies %v", cached, copies)
	}
	if st.NumStateCheckpointsTaken != 0 || st.NumStateRestores != 0 || st.NumStateCheckpointsHeld != 0 ||
		st.StateFallbackTokens != 0 || st.PrefixHitTokens != 0 {
		t.Fatalf("NONE: stats %+v", st)
	}
}

func TestStateCheckpointsEvictTheLeastRecentlyUsed(t *testing.T) {
	// 2 checkpoint slots: B's at 12 evicts A's (the oldest); C's restore touches B's at 8, so C's
	// at 12 evicts B's at 12
	p := hybridParams(t)
	p.EnableKVEvents, p.NumStateCheckpoints = true, 2
	e := newEngine(t, p)
	cached, _, st := threeRequests(t, e)
	if !reflect.DeepEqual(cached, []uint32{0, 0, 8}) || st.NumStateCheckpointsTaken != 4 ||
		st.NumStateCheckpointEvictions != 2 || st.NumStateRestores != 1 || st.NumStateCheckpointsHeld != 2 {
		t.Fatalf("cached tokens %v, stats %+v", cached, st)
	}
	groups := uint32(len(must(e.KVGroups()).GroupWindow))
	var stored, removed []uint64
	for _, ev := range must(e.DrainKVEvents(1024)) {
		switch {
		case ev.Group == groups && ev.Type == pkv.EventBlockStored:
			stored = append(stored, ev.BlockHash)
		case ev.Group == groups && ev.Type == pkv.EventBlockRemoved:
			removed = append(removed, ev.BlockHash)
		}
	}
	// stored: A's at 12, B's at 8, B's at 12, C's at 12
	if len(stored) != 4 || !reflect.DeepEqual(removed, []uint64{stored[0], stored[2]}) {
		t.Fatalf("checkpoints stored %x, removed %x", stored, removed)
	}
}
