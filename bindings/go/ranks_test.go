package pkv_test

// Ranks (pkv 0.10): one engine holding every tensor-parallel rank's pool (EngineParams.Ranks
// RanksAll: Batch.Rank, Engine.RankPoolInfo, Engine.SetRankStream), and a decider's plan carried
// to a rank's pool engine (RanksPool: Batch.ExportPlan, Engine.ImportPlan).

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"pkv.local/pkv"
)

const rankDim = 8

// rankParams: 2 layers, 4 q heads, 2 kv heads, tp_size 2: each rank holds 2 q heads, 1 kv head.
func rankParams(t *testing.T, ranks pkv.Ranks, tpRank uint32) pkv.EngineParams {
	t.Helper()
	p := must(pkv.DefaultParams())
	p.NumLayers, p.NumQHeads, p.NumKVHeads, p.HeadDim = 2, 4, 2, rankDim
	p.DType, p.BlockSize, p.NumBlocks = pkv.DTypeF32, 4, 32
	p.Device, p.NumThreads = pkv.DeviceCPU, 1
	p.TPSize, p.TPRank, p.Ranks = 2, tpRank, ranks
	return p
}

// rankAttention runs one rank's heads of a layer: q, out [tokens][2][8], k, v [tokens][1][8],
// every V value fill; the output of each head is then fill.
func rankAttention(b *pkv.Batch, layer int, fill float32) ([]float32, error) {
	n := b.NumTokens()
	q, kv := make([]float32, n*2*rankDim), make([]float32, n*rankDim)
	for i := range q {
		q[i] = 0.25
	}
	for i := range kv {
		kv[i] = fill
	}
	out := make([]float32, len(q))
	return out, b.Attention(layer, q, kv, kv, out)
}

func expectFilled(t *testing.T, out []float32, fill float32) {
	t.Helper()
	for i, x := range out {
		if math.Abs(float64(x-fill)) > 1e-5 {
			t.Fatalf("out[%d] = %v, want %v (the rank's V)", i, x, fill)
		}
	}
}

func TestRanksAllRunsEachRanksHeads(t *testing.T) {
	e := newEngine(t, rankParams(t, pkv.RanksAll, 0))
	if got := e.Params().Ranks; got != pkv.RanksAll {
		t.Fatalf("Params().Ranks = %v", got)
	}
	if n := must(e.Budget()).NumRanks; n != 2 {
		t.Fatalf("Budget().NumRanks = %d, want 2", n)
	}
	for r := 0; r < 2; r++ {
		info := must(e.RankPoolInfo(r))
		if info.Rank != uint32(r) || info.NumRanks != 2 || info.TPRank != uint32(r) ||
			info.PPRank != 0 || info.FirstLayer != 0 || info.EndLayer != 2 || info.DeviceID != -1 {
			t.Fatalf("RankPoolInfo(%d) = %+v", r, info)
		}
	}
	if must(e.RankPoolInfo(0)).KBase == must(e.RankPoolInfo(1)).KBase {
		t.Fatal("both ranks report one pool")
	}
	_, err := e.RankPoolInfo(2)
	expectStatus(t, err, pkv.ErrInvalidArgument)

	seq := must(e.Allocate([]int32{1, 2, 3, 4, 5}, nil))
	b := must(e.BeginBatch([]*pkv.Sequence{seq}, nil))
	defer b.Abort()
	// The batch's own handle names no rank: refused with pkv's message.
	_, err = rankAttention(b, 0, 0.5)
	expectStatus(t, err, pkv.ErrInvalidArgument)
	if !strings.Contains(err.Error(), "pkv_batch_rank") {
		t.Fatalf("attention on the batch's own handle: %q lacks pkv's message", err)
	}
	handles := []*pkv.Batch{must(b.Rank(0)), must(b.Rank(1))}
	if handles[1].RankIndex() != 1 || b.RankIndex() != -1 || handles[1].NumTokens() != 5 {
		t.Fatalf("rank handle: index %d, batch %d, %d tokens", handles[1].RankIndex(),
			b.RankIndex(), handles[1].NumTokens())
	}
	for layer := 0; layer < 2; layer++ {
		for r, h := range handles {
			fill := 0.5 + float32(r)
			expectFilled(t, must(rankAttention(h, layer, fill)), fill)
		}
	}
	_, err = b.Rank(2)
	expectStatus(t, err, pkv.ErrInvalidArgument)
	_, err = handles[0].Rank(0) // a rank's handle has no ranks of its own
	expectStatus(t, err, pkv.ErrInvalidArgument)
	if err := handles[1].End(); err != nil { // ends the batch, every rank's
		t.Fatal(err)
	}
	if _, err := rankAttention(handles[0], 0, 0.5); err != pkv.ErrClosed {
		t.Fatalf("a rank's handle after its batch ended: %v", err)
	}
	if err := b.End(); err != pkv.ErrClosed {
		t.Fatalf("the batch after a rank's handle ended it: %v", err)
	}
	if info := must(seq.Info()); info.NumComputedTokens != 5 {
		t.Fatalf("after the step: %+v", info)
	}
	if err := e.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestRankStreams(t *testing.T) {
	e := newEngine(t, rankParams(t, pkv.RanksAll, 0))
	for r := 0; r < 2; r++ {
		if err := e.SetRankStream(r, 0); err != nil {
			t.Fatal(err)
		}
	}
	err := e.SetRankStream(1, 16) // a CPU engine takes no stream
	expectStatus(t, err, pkv.ErrInvalidArgument)
	if !strings.Contains(err.Error(), "stream") {
		t.Fatalf("SetRankStream(1, 16): %q", err)
	}
	expectStatus(t, e.SetRankStream(2, 0), pkv.ErrInvalidArgument)
}

func TestRankDeviceIDs(t *testing.T) {
	p := rankParams(t, pkv.RanksAll, 0)
	p.RankDeviceIDs = []int32{0}
	_, err := pkv.NewEngine(p) // one per rank, checked before pkv reads the array
	expectStatus(t, err, pkv.ErrInvalidArgument)
	if !strings.Contains(err.Error(), "TPSize x PPSize is 2") {
		t.Fatalf("one device for 2 ranks: %q", err)
	}
	p.RankDeviceIDs = []int32{0, 1}
	_, err = pkv.NewEngine(p) // a CPU engine's pools are in host memory: pkv refuses devices
	expectStatus(t, err, pkv.ErrInvalidArgument)
	if !strings.Contains(err.Error(), "rank_device_ids") {
		t.Fatalf("devices on a CPU engine: %q", err)
	}
}

func TestPlanExportedRunsOnAPoolEngineOnce(t *testing.T) {
	decider := newEngine(t, rankParams(t, pkv.RanksOne, 0))
	pool := newEngine(t, rankParams(t, pkv.RanksPool, 1))
	if got := pool.Params().Ranks; got != pkv.RanksPool {
		t.Fatalf("Params().Ranks = %v", got)
	}
	_, err := pool.Allocate([]int32{1, 2, 3}, nil) // a pool engine decides nothing
	expectStatus(t, err, pkv.ErrState)

	seq := must(decider.Allocate([]int32{1, 2, 3, 4, 5, 6}, nil))
	b := must(decider.BeginBatch([]*pkv.Sequence{seq}, nil))
	defer b.Abort()
	plan := must(b.ExportPlan())
	if len(plan) == 0 || !bytes.Equal(must(b.ExportPlan()), plan) {
		t.Fatalf("ExportPlan: %d bytes, not one plan per batch", len(plan))
	}
	imported := must(pool.ImportPlan(plan))
	defer imported.Abort()
	if imported.NumTokens() != 6 {
		t.Fatalf("the imported batch has %d tokens", imported.NumTokens())
	}
	want, got := must(b.SlotMapping()), must(imported.SlotMapping())
	if len(got) != len(want) || got[5] != want[5] {
		t.Fatalf("slot mapping %v, the decider's %v", got, want)
	}
	_, err = imported.ExportPlan() // an imported batch is not exported again
	expectStatus(t, err, pkv.ErrState)
	for layer := 0; layer < 2; layer++ {
		expectFilled(t, must(rankAttention(imported, layer, 1.5)), 1.5) // rank 1's heads
		expectFilled(t, must(rankAttention(b, layer, 0.5)), 0.5)        // rank 0's, on the decider
	}
	if err := imported.End(); err != nil {
		t.Fatal(err)
	}
	if err := b.End(); err != nil {
		t.Fatal(err)
	}
	_, err = pool.ImportPlan(plan) // the same plan again: stale
	expectStatus(t, err, pkv.ErrState)
	if !strings.Contains(err.Error(), "stale") {
		t.Fatalf("a stale plan: %q", err)
	}
	_, err = pool.ImportPlan([]byte("not a plan"))
	expectStatus(t, err, pkv.ErrInvalidArgument)
	_, err = decider.ImportPlan(plan) // an engine that decides imports nothing
	expectStatus(t, err, pkv.ErrState)
	if err := pool.Check(); err != nil {
		t.Fatal(err)
	}
}
