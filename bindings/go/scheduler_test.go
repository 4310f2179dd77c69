package pkv_test

import (
	"reflect"
	"sort"
	"testing"

	"pkv.local/pkv"
)

func TestScheduler(t *testing.T) {
	p := smallParams(t)
	p.NumBlocks, p.EnableKVEvents = 32, true
	e := newEngine(t, p)
	rp := must(pkv.DefaultRequestParams())
	rp.MaxNewTokens = 3
	a := must(e.Submit([]int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, &rp, nil))
	rp.MaxNewTokens, rp.StopToken = 5, 9
	b := must(e.Submit([]int32{20, 21, 22, 23, 24, 25}, &rp, []byte{1}))
	var finished []uint64
	for steps := 1; ; steps++ {
		batch := must(e.Step())
		if batch == nil {
			break
		}
		n := batch.NumTokens()
		q, kv := make([]float32, n*64), make([]float32, n*32)
		for layer := 0; layer < 2; layer++ {
			if err := batch.Attention(layer, q, kv, kv, make([]float32, len(q))); err != nil {
				t.Fatal(err)
			}
		}
		sampled := make([]int32, batch.NumSeqs())
		for i := range sampled {
			sampled[i] = map[bool]int32{true: 9, false: 5}[steps == 3]
		}
		if err := batch.Commit(sampled); err != nil {
			t.Fatal(err)
		}
		if err := batch.Commit(sampled); err != pkv.ErrClosed {
			t.Fatalf("second commit: %v", err)
		}
		for _, s := range must(e.DrainFinished()) {
			finished = append(finished, s.ID)
		}
	}
	sort.Slice(finished, func(i, j int) bool { return finished[i] < finished[j] })
	if len(finished) != 2 || finished[0] != a.ID || finished[1] != b.ID {
		t.Fatalf("finished %v", finished)
	}
	if ia, ib := must(a.Info()), must(b.Info()); ia.FinishReason != pkv.FinishLength || ib.FinishReason != pkv.FinishStopToken {
		t.Fatalf("finish reasons %v %v", ia.FinishReason, ib.FinishReason)
	}
	events := must(e.DrainKVEvents(1024))
	if len(events) == 0 || events[0].Type != pkv.EventBlockStored {
		t.Fatalf("events %+v", events)
	}
	for _, id := range finished {
		if err := e.Sequence(id).Release(); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.ResetPrefixCache(); err != nil {
		t.Fatal(err)
	}
	if st := must(e.Stats()); st.NumCachedBlocks != 0 || st.NumSeqs != 0 {
		t.Fatalf("after reset: %+v", st)
	}
}

// The events come through pkv_drain_kv_events_sized at KVEvent's size: every field is filled,
// seq numbers count up from 1, hashes are the canonical chain (pkv_block_hash), the medium is
// the pool's.
func TestKVEvents(t *testing.T) {
	p := smallParams(t)
	p.EnableKVEvents = true
	e := newEngine(t, p)
	seq := must(e.Allocate([]int32{0, 1, 2, 3, 4, 5, 6, 7, 8}, nil))
	runStep(t, e, seq)
	root := must(pkv.BlockHashRoot(0, nil))
	h0 := must(pkv.BlockHash(0, root, []int32{0, 1, 2, 3}))
	h1 := must(pkv.BlockHash(0, h0, []int32{4, 5, 6, 7}))
	want := []pkv.KVEvent{
		{Type: pkv.EventBlockStored, NumTokens: 4, SeqNo: 1, BlockHash: h0, ParentHash: root, Medium: pkv.TierDevice},
		{Type: pkv.EventBlockStored, NumTokens: 4, SeqNo: 2, BlockHash: h1, ParentHash: h0, Medium: pkv.TierDevice},
	}
	if got := must(e.DrainKVEvents(1024)); !reflect.DeepEqual(got, want) {
		t.Fatalf("events %+v, want %+v", got, want)
	}
	if err := seq.Release(); err != nil {
		t.Fatal(err)
	}
	if err := e.ResetPrefixCache(); err != nil {
		t.Fatal(err)
	}
	later := must(e.DrainKVEvents(1024))
	if len(later) == 0 {
		t.Fatal("no events after the reset")
	}
	for i, ev := range later {
		if ev.SeqNo != uint64(3+i) {
			t.Fatalf("event %d after the reset: %+v", i, ev)
		}
	}
	if rest := must(e.DrainKVEvents(1024)); len(rest) != 0 {
		t.Fatalf("drained twice: %+v", rest)
	}
}
