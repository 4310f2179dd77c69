package pkv_test

// Recurrent state with a host tier (pkv 0.6, issue 28 item 4): host state slots in the budget and
// PoolInfo, swap's CopyStateOut / CopyStateIn copies, a checkpoint evicted from the device
// offloaded to the host and restored from there, and the Stats' offload counters. The model of
// state_test.go; the same cases as the other bindings' state tests.

import (
	"testing"

	"pkv.local/pkv"
)

// hostStateParams is hybridParams with a host tier: 8 working slots, checkpoints checkpoint slots.
func hostStateParams(t *testing.T, checkpoints uint32) pkv.EngineParams {
	p := hybridParams(t)
	p.HostNumBlocks, p.NumStateCheckpoints = 16, checkpoints
	return p
}

// copiesOf is the copies of kind a batch lists.
func copiesOf(t *testing.T, b *pkv.Batch, kind pkv.CopyKind) []stateCopy {
	t.Helper()
	kinds, src, dst := must(b.CopyKind()), must(b.CopySrc()), must(b.CopyDst())
	var out []stateCopy
	for i, k := range kinds {
		if k == kind {
			out = append(out, stateCopy{src[i], dst[i]})
		}
	}
	return out
}

func TestHostStateSlotsInBudgetAndPool(t *testing.T) {
	// host state slots: one per sequence (swap) and one per checkpoint (offload)
	p := hostStateParams(t, 4)
	e := newEngine(t, p)
	for _, b := range []pkv.KVBudget{must(pkv.Profile(p)), must(e.Budget())} {
		if b.NumHostStateSlots != 8+4 || b.HostStateBytes != 12*slotBytes {
			t.Fatalf("budget's host state: %d slots, %d bytes", b.NumHostStateSlots, b.HostStateBytes)
		}
	}
	if pool := must(e.PoolInfo()); pool.HostStateBase == 0 || pool.NumHostStateSlots != 12 {
		t.Fatalf("pool's host state: %#x, %d slots", pool.HostStateBase, pool.NumHostStateSlots)
	}
	st := must(e.Stats())
	if st.NumHostStateCheckpointsHeld != 0 || st.NumStateCheckpointsOffloaded != 0 || st.NumStateRestoresFromHost != 0 {
		t.Fatalf("a fresh engine's offload counters: %+v", st)
	}
	// no host tier: no host state
	b := must(pkv.Profile(hybridParams(t)))
	pool := must(newEngine(t, hybridParams(t)).PoolInfo())
	if b.NumHostStateSlots != 0 || b.HostStateBytes != 0 || pool.HostStateBase != 0 || pool.NumHostStateSlots != 0 {
		t.Fatalf("no host tier, yet host state: budget %+v, pool %+v", b, pool)
	}
}

func TestSwapMovesTheWorkingStateThroughAHostSlot(t *testing.T) {
	if pkv.CopyStateOut != 7 || pkv.CopyStateIn != 8 {
		t.Fatalf("copy kinds %d, %d", pkv.CopyStateOut, pkv.CopyStateIn)
	}
	e := newEngine(t, hostStateParams(t, 4))
	a := must(e.Allocate([]int32{1, 2, 3, 4, 5, 6}, nil))
	b := must(e.BeginBatch([]*pkv.Sequence{a}, nil))
	slot := must(b.StateSlots())[0]
	if err := b.End(); err != nil { // the host ran every layer itself
		t.Fatal(err)
	}
	if err := a.SwapOut(); err != nil {
		t.Fatal(err)
	}
	// the next batch (another sequence's) copies a's working slot out to a host state slot
	s2 := must(e.Allocate([]int32{50, 51, 52, 53, 54}, nil))
	b = must(e.BeginBatch([]*pkv.Sequence{s2}, nil))
	out := copiesOf(t, b, pkv.CopyStateOut)
	if len(out) != 1 || out[0].Src != slot || out[0].Dst < 0 || out[0].Dst >= 12 {
		t.Fatalf("state-out copies %v, a's working slot %d", out, slot)
	}
	if err := b.End(); err != nil {
		t.Fatal(err)
	}
	// back in: a working slot again, the state copied in from the host slot before the step
	if err := a.SwapIn(); err != nil {
		t.Fatal(err)
	}
	if err := a.Append(7); err != nil {
		t.Fatal(err)
	}
	b = must(e.BeginBatch([]*pkv.Sequence{a}, nil))
	in, working := copiesOf(t, b, pkv.CopyStateIn), must(b.StateSlots())[0]
	if len(in) != 1 || in[0] != (stateCopy{out[0].Dst, working}) {
		t.Fatalf("state-in copies %v, host slot %d, working slot %d", in, out[0].Dst, working)
	}
	if err := b.End(); err != nil {
		t.Fatal(err)
	}
	if err := e.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestACheckpointIsOffloadedThenRestored(t *testing.T) {
	// one checkpoint slot: B's checkpoint at 12 evicts A's, which moves to the host; A's prompt
	// again finds its KV on the device and its checkpoint on the host
	e := newEngine(t, hostStateParams(t, 1))
	var a, b []int32
	for i := int32(0); i < 14; i++ {
		a, b = append(a, i), append(b, 500+i)
	}
	runRequest(t, e, a)
	runRequest(t, e, b)
	if st := must(e.Stats()); st.NumStateCheckpointsOffloaded != 1 || st.NumHostStateCheckpointsHeld != 1 {
		t.Fatalf("after B: %+v", st)
	}
	if info, _ := runRequest(t, e, a); info.NumCachedTokens != 12 {
		t.Fatalf("A again: %d tokens cached, want 12", info.NumCachedTokens)
	}
	if st := must(e.Stats()); st.NumStateRestores != 1 || st.NumStateRestoresFromHost != 1 {
		t.Fatalf("after A again: %+v", st)
	}
	if err := e.Check(); err != nil {
		t.Fatal(err)
	}
}
