package pkv_test

// The host tier (pkv 0.2): its size in the budget, pool info and stats; SwapOut / SwapIn, the
// copies the next batch lists by kind and Batch.Copy; refusals; the limits pkv.h names.

import (
	"reflect"
	"sort"
	"testing"

	"pkv.local/pkv"
)

const hostBlocks = 8

func hostParams(t *testing.T) pkv.EngineParams {
	p := smallParams(t)
	p.HostNumBlocks = hostBlocks
	return p
}

func sortedInts(s []int32) []int32 {
	out := append([]int32(nil), s...)
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func TestHostTierBudgetPoolAndStats(t *testing.T) {
	p := hostParams(t)
	e := newEngine(t, p)
	for _, budget := range []pkv.KVBudget{must(pkv.Profile(p)), must(e.Budget())} {
		if budget.HostNumBlocks != hostBlocks || budget.HostPoolBytes != hostBlocks*budget.BlockBytes {
			t.Fatalf("budget %+v", budget)
		}
	}
	pool := must(e.PoolInfo())
	if pool.HostNumBlocks != hostBlocks || pool.HostKBase == 0 || pool.HostVBase == 0 ||
		pool.HostLayerStride != hostBlocks*pool.BlockStride ||
		2*pool.HostBytesPerPool != must(e.Budget()).HostPoolBytes {
		t.Fatalf("pool %+v", pool)
	}
	if st := must(e.Stats()); st.NumHostBlocks != hostBlocks || st.NumHostFreeBlocks != hostBlocks {
		t.Fatalf("stats %+v", st)
	}
	// No host tier: every host term is 0. HostCacheBytes sizes it in bytes.
	none := newEngine(t, smallParams(t))
	b := must(none.Budget())
	if b.HostNumBlocks != 0 || b.HostPoolBytes != 0 || must(none.PoolInfo()).HostKBase != 0 {
		t.Fatalf("no host tier: %+v", b)
	}
	p = smallParams(t)
	p.HostCacheBytes = 3 * b.BlockBytes
	if got := must(pkv.Profile(p)).HostNumBlocks; got != 3 {
		t.Fatalf("HostCacheBytes: %d blocks", got)
	}
}

func TestSwapOutAndIn(t *testing.T) {
	e := newEngine(t, hostParams(t))
	a := must(e.Allocate([]int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, nil)) // 3 blocks of 4
	runStep(t, e, a)
	table := must(a.BlockTable())
	if info := must(a.Info()); info.KVTier != pkv.TierDevice {
		t.Fatalf("before: %+v", info)
	}
	if err := a.SwapOut(); err != nil {
		t.Fatal(err)
	}
	if info := must(a.Info()); info.KVTier != pkv.TierHost || info.NumHostBlocks != 3 ||
		info.NumBlocks != 0 || info.NumComputedTokens != 10 {
		t.Fatalf("swapped: %+v", info)
	}
	if st := must(e.Stats()); st.NumSwappedSeqs != 1 || st.NumSwappedOutBlocks != 3 ||
		st.NumHostFreeBlocks != hostBlocks-3 {
		t.Fatalf("swapped: %+v", st)
	}
	expectStatus(t, a.SwapOut(), pkv.ErrState) // not running
	expectStatus(t, a.Append(1), pkv.ErrState) // a swapped sequence cannot grow
	// The next batch (another sequence's) lists the swap-out copies; Copy does them.
	b := must(e.Allocate([]int32{100, 101, 102, 103, 104, 105}, nil))
	expectStatus(t, b.SwapIn(), pkv.ErrState) // not swapped
	batch := must(e.BeginBatch([]*pkv.Sequence{b}, nil))
	defer batch.Abort()
	swapOut := pkv.CopySwapOut
	if kinds := must(batch.CopyKind()); !reflect.DeepEqual(kinds, []pkv.CopyKind{swapOut, swapOut, swapOut}) {
		t.Fatalf("copy kinds %v", kinds)
	}
	if src := must(batch.CopySrc()); !reflect.DeepEqual(sortedInts(src), sortedInts(table)) ||
		len(must(batch.CopyDst())) != 3 {
		t.Fatalf("copy src %v, table %v", src, table)
	}
	for i := 0; i < 2; i++ { // the second call finds them done
		if err := batch.Copy(); err != nil {
			t.Fatal(err)
		}
	}
	if err := batch.End(); err != nil {
		t.Fatal(err)
	}
	if err := e.Check(); err != nil {
		t.Fatal(err)
	}
	// Back in: the next batch of a lists the swap-in copies into its new blocks.
	if err := a.SwapIn(); err != nil {
		t.Fatal(err)
	}
	if info := must(a.Info()); info.KVTier != pkv.TierDevice || info.NumBlocks != 3 || info.NumHostBlocks != 0 {
		t.Fatalf("swapped in: %+v", info)
	}
	if st := must(e.Stats()); st.NumSwappedSeqs != 0 || st.NumSwappedInBlocks != 3 {
		t.Fatalf("swapped in: %+v", st)
	}
	if err := a.Append(10); err != nil {
		t.Fatal(err)
	}
	batch = must(e.BeginBatch([]*pkv.Sequence{a}, nil))
	swapIn := pkv.CopySwapIn
	if kinds := must(batch.CopyKind()); !reflect.DeepEqual(kinds, []pkv.CopyKind{swapIn, swapIn, swapIn}) {
		t.Fatalf("copy kinds %v", kinds)
	}
	if dst := must(batch.CopyDst()); !reflect.DeepEqual(sortedInts(dst), sortedInts(must(a.BlockTable()))) {
		t.Fatalf("copy dst %v", dst)
	}
	if err := batch.Copy(); err != nil {
		t.Fatal(err)
	}
	if err := batch.End(); err != nil {
		t.Fatal(err)
	}
	if st := must(e.Stats()); st.NumHostFreeBlocks != hostBlocks {
		t.Fatalf("after swap-in: %+v", st)
	}
	if info := must(a.Info()); info.NumComputedTokens != 11 {
		t.Fatalf("after swap-in: %+v", info)
	}
	for _, s := range []*pkv.Sequence{a, b} {
		if err := s.Release(); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestSwapOutWithoutHostTier(t *testing.T) {
	e := newEngine(t, smallParams(t))
	seq := must(e.Allocate([]int32{1, 2, 3, 4, 5}, nil))
	runStep(t, e, seq)
	expectStatus(t, seq.SwapOut(), pkv.ErrUnsupported)
	if info := must(seq.Info()); info.KVTier != pkv.TierDevice {
		t.Fatalf("%+v", info)
	}
}

func TestLimitsAndKinds(t *testing.T) {
	if pkv.CopyCOW != 1 || pkv.CopySwapOut != 2 || pkv.CopySwapIn != 3 ||
		pkv.TierNone != 0 || pkv.TierDevice != 1 || pkv.TierHost != 2 ||
		pkv.AttentionMaxHeadDim != 256 || pkv.CUDAMaxGrid != 65535 {
		t.Fatal("constants")
	}
	p := smallParams(t)
	p.HeadDim = pkv.MaxHeadDim
	if _, err := pkv.Profile(p); err != nil {
		t.Fatal(err)
	}
	p.HeadDim = pkv.MaxHeadDim + 1
	_, err := pkv.Profile(p)
	expectStatus(t, err, pkv.ErrInvalidArgument)
}

func TestPreemptionBySwappingNeedsTheHostTier(t *testing.T) {
	p := hostParams(t)
	p.PreemptionMode = pkv.PreemptSwap
	e := newEngine(t, p)
	defer e.Close()
	p = smallParams(t)
	p.PreemptionMode = pkv.PreemptSwap
	_, err := pkv.NewEngine(p)
	expectStatus(t, err, pkv.ErrInvalidArgument)
}
