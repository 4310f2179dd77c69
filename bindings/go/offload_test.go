package pkv_test

// Offload to the host tier (pkv 0.2, EngineParams.HostOffload): a cached block evicted from the
// pool is copied to the host tier (CopyOffload, a stored event of medium TierHost) and a later
// prefix hit loads it back (CopyLoad); the per-tier stats; HostOffload false drops evicted blocks.

import (
	"reflect"
	"testing"

	"pkv.local/pkv"
)

func tokenRange(start, n int32) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = start + int32(i)
	}
	return out
}

var (
	offloadFirst = tokenRange(1, 13)   // 3 full blocks of 4 + 1 token: 3 blocks sealed
	offloadOther = tokenRange(100, 16) // 4 blocks: the whole pool, evicting offloadFirst's
)

func offloadEngine(t *testing.T, hostOffload bool) *pkv.Engine {
	p := smallParams(t)
	p.NumBlocks, p.HostNumBlocks, p.EnableKVEvents, p.HostOffload = 4, hostBlocks, true, hostOffload
	e := newEngine(t, p)
	if got := e.Params().HostOffload; got != hostOffload {
		t.Fatalf("Params().HostOffload = %v, want %v", got, hostOffload)
	}
	return e
}

// eventHashes are the block hashes of the events of one type and medium.
func eventHashes(events []pkv.KVEvent, typ pkv.EventType, medium pkv.Tier) []uint64 {
	var out []uint64
	for _, ev := range events {
		if ev.Type == typ && ev.Medium == medium {
			out = append(out, ev.BlockHash)
		}
	}
	return out
}

// hashCounts is a multiset of hashes, to compare lists in any order.
func hashCounts(h []uint64) map[uint64]int {
	out := map[uint64]int{}
	for _, x := range h {
		out[x]++
	}
	return out
}

func TestHostOffloadDefaultsAndKinds(t *testing.T) {
	p := must(pkv.DefaultParams())
	if !p.HostOffload || pkv.CopyOffload != 4 || pkv.CopyLoad != 5 {
		t.Fatalf("HostOffload %v, CopyOffload %d, CopyLoad %d", p.HostOffload, pkv.CopyOffload, pkv.CopyLoad)
	}
	if pkv.CopyOffload.String() != "COPY_OFFLOAD" || pkv.CopyKind(9).String() != "CopyKind(9)" {
		t.Fatalf("CopyKind names %v %v", pkv.CopyOffload, pkv.CopyKind(9))
	}
}

func TestOffloadAndLoadBack(t *testing.T) {
	e := offloadEngine(t, true)
	root := must(pkv.BlockHashRoot(0, nil))
	var firstHashes []uint64
	for h, i := root, 0; i < 3; i++ {
		h = must(pkv.BlockHash(0, h, offloadFirst[4*i:4*i+4]))
		firstHashes = append(firstHashes, h)
	}
	a := must(e.Allocate(offloadFirst, nil))
	runStep(t, e, a)
	if err := a.Release(); err != nil {
		t.Fatal(err)
	}
	stored := eventHashes(must(e.DrainKVEvents(64)), pkv.EventBlockStored, pkv.TierDevice)
	if !reflect.DeepEqual(stored, firstHashes) {
		t.Fatalf("stored in the pool: %v, want %v", stored, firstHashes)
	}
	// offloadOther takes every pool block: the 3 cached ones are offloaded, and its batch lists
	// the copies out (pool -> host tier) before anything is written.
	b := must(e.Allocate(offloadOther, nil))
	st := must(e.Stats())
	if st.NumEvictions != 3 || st.NumOffloadedBlocks != 3 || st.NumHostCachedBlocks != 3 || st.NumHostEvictions != 0 {
		t.Fatalf("after the eviction: %+v", st)
	}
	batch := must(e.BeginBatch([]*pkv.Sequence{b}, nil))
	offloads3 := []pkv.CopyKind{pkv.CopyOffload, pkv.CopyOffload, pkv.CopyOffload}
	if kinds := must(batch.CopyKind()); !reflect.DeepEqual(kinds, offloads3) {
		t.Fatalf("copy kinds %v", kinds)
	}
	if dst := sortedInts(must(batch.CopyDst())); !reflect.DeepEqual(dst, []int32{0, 1, 2}) {
		t.Fatalf("host-tier blocks %v", dst)
	}
	batch.Abort()
	runStep(t, e, b)
	if err := b.Release(); err != nil {
		t.Fatal(err)
	}
	events := must(e.DrainKVEvents(64))
	want := hashCounts(firstHashes)
	if got := hashCounts(eventHashes(events, pkv.EventBlockStored, pkv.TierHost)); !reflect.DeepEqual(got, want) {
		t.Fatalf("stored in the host tier: %v, want %v (events %+v)", got, want, events)
	}
	if got := hashCounts(eventHashes(events, pkv.EventBlockRemoved, pkv.TierDevice)); !reflect.DeepEqual(got, want) {
		t.Fatalf("removed from the pool: %v, want %v", got, want)
	}
	// offloadFirst again: its 12 tokens of sealed blocks are a prefix hit served by the host tier.
	if blocks, cached := must2(e.AllocateQuery(offloadFirst, nil)); blocks != 4 || cached != 12 {
		t.Fatalf("query: %d blocks, %d cached", blocks, cached)
	}
	a = must(e.Allocate(offloadFirst, nil))
	st = must(e.Stats())
	if a.NumCachedTokens != 12 || st.PrefixHitTokens != 12 || st.HostHitTokens != 12 ||
		st.DeviceHitTokens != 0 || st.NumLoadedBlocks != 3 || st.NumOffloadedBlocks != 7 {
		t.Fatalf("cached %d, stats %+v", a.NumCachedTokens, st)
	}
	batch = must(e.BeginBatch([]*pkv.Sequence{a}, nil))
	defer batch.Abort()
	kinds, dst := must(batch.CopyKind()), must(batch.CopyDst())
	var loads []int32
	offloads := 0
	for i, k := range kinds {
		switch k {
		case pkv.CopyLoad:
			loads = append(loads, dst[i])
		case pkv.CopyOffload:
			offloads++
		default:
			t.Fatalf("copy kinds %v", kinds)
		}
	}
	if table := must(a.BlockTable()); !reflect.DeepEqual(loads, table[:3]) || offloads != 4 {
		t.Fatalf("loads into %v (table %v), %d offloads", loads, table, offloads)
	}
	if batch.NumTokens() != 1 {
		t.Fatalf("%d tokens to compute, want the last one", batch.NumTokens())
	}
	if err := batch.Copy(); err != nil {
		t.Fatal(err)
	}
	if err := batch.End(); err != nil {
		t.Fatal(err)
	}
	if info := must(a.Info()); info.NumComputedTokens != 13 {
		t.Fatalf("computed %d", info.NumComputedTokens)
	}
	if err := a.Release(); err != nil {
		t.Fatal(err)
	}
	if err := e.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestHostOffloadOffDropsEvictedBlocks(t *testing.T) {
	e := offloadEngine(t, false)
	a := must(e.Allocate(offloadFirst, nil))
	runStep(t, e, a)
	if err := a.Release(); err != nil {
		t.Fatal(err)
	}
	b := must(e.Allocate(offloadOther, nil))
	batch := must(e.BeginBatch([]*pkv.Sequence{b}, nil))
	if kinds := must(batch.CopyKind()); len(kinds) != 0 {
		t.Fatalf("copy kinds %v", kinds)
	}
	batch.Abort()
	runStep(t, e, b)
	if err := b.Release(); err != nil {
		t.Fatal(err)
	}
	a = must(e.Allocate(offloadFirst, nil))
	st := must(e.Stats())
	if a.NumCachedTokens != 0 || st.NumEvictions != 7 || st.NumOffloadedBlocks != 0 ||
		st.NumLoadedBlocks != 0 || st.NumHostCachedBlocks != 0 || st.HostHitTokens != 0 {
		t.Fatalf("cached %d, stats %+v", a.NumCachedTokens, st)
	}
	for _, ev := range must(e.DrainKVEvents(64)) {
		if ev.Medium != pkv.TierDevice {
			t.Fatalf("event %+v", ev)
		}
	}
	if err := a.Release(); err != nil {
		t.Fatal(err)
	}
	if err := e.Check(); err != nil {
		t.Fatal(err)
	}
}

func must2[A, B any](a A, b B, err error) (A, B) {
	if err != nil {
		panic(err)
	}
	return a, b
}
