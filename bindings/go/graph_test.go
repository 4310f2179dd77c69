package pkv_test

// Batch.PlanGraph (pkv_batch_plan_graph, pkv 0.9) and the CUDA step counters on a CPU engine:
// the call reaches pkv, which refuses it (a CPU engine has no CUDA graphs) with ErrUnsupported
// carrying its message; the batch stays open and usable (Attention, then End computes the
// decode token); Stats.NumHostWaits and NumDeviceAllocs read 0.

import (
	"strconv"
	"strings"
	"testing"

	"pkv.local/pkv"
)

// decodingEngine has one sequence whose 3-token prompt is computed and one token appended: its
// next batch is a decode step.
func decodingEngine(t *testing.T) (*pkv.Engine, *pkv.Sequence) {
	t.Helper()
	p := smallParams(t)
	p.MaxNumSeqs = 8
	e := newEngine(t, p)
	seq := must(e.Allocate([]int32{1, 2, 3}, nil))
	runStep(t, e, seq)
	if err := seq.Append(4); err != nil {
		t.Fatal(err)
	}
	return e, seq
}

func expectNoGraphs(t *testing.T, err error) {
	t.Helper()
	expectStatus(t, err, pkv.ErrUnsupported)
	msg := err.Error()
	if !strings.Contains(msg, "pkv_batch_plan_graph") || !strings.Contains(msg, "CUDA graphs") {
		t.Fatalf("PlanGraph on a CPU engine: %q does not carry pkv's message", msg)
	}
}

func TestPlanGraphOnACPUEngineKeepsTheBatch(t *testing.T) {
	e, seq := decodingEngine(t)
	b := must(e.BeginBatch([]*pkv.Sequence{seq}, nil))
	defer b.Abort()
	if b.NumTokens() != 1 {
		t.Fatalf("a decode step has %d tokens", b.NumTokens())
	}
	expectNoGraphs(t, b.PlanGraph(1))
	runLayers(t, b) // (batch_end_test.go) not planned by the refused call: attention runs eagerly
	if err := b.End(); err != nil {
		t.Fatal(err)
	}
	info := must(seq.Info())
	if info.NumTokens != 4 || info.NumComputedTokens != 4 || info.InBatch {
		t.Fatalf("after the decode step: %+v", info)
	}
	if err := e.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestPlanGraphOnAStepBatchThenCommit(t *testing.T) {
	p := smallParams(t)
	p.MaxNumSeqs = 8
	e := newEngine(t, p)
	rp := must(pkv.DefaultRequestParams())
	rp.MaxNewTokens = 2
	must(e.Submit([]int32{1, 2, 3}, &rp, nil))
	for step := 0; step < 2; step++ { // the prefill (3 tokens), then the decode (1)
		b := must(e.Step())
		expectNoGraphs(t, b.PlanGraph(8))
		runLayers(t, b)
		if err := b.Commit(make([]int32, b.NumSeqs())); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(must(e.DrainFinished())); n != 1 {
		t.Fatalf("%d requests finished, want 1", n)
	}
}

func TestPlanGraphRefusesABucketOutsideUint32(t *testing.T) {
	e, seq := decodingEngine(t)
	b := must(e.BeginBatch([]*pkv.Sequence{seq}, nil))
	buckets := []int{-1}
	if strconv.IntSize == 64 {
		buckets = append(buckets, 1<<(strconv.IntSize/2)|5) // uint32(...) would be 5
	}
	for _, bucket := range buckets {
		err := b.PlanGraph(bucket)
		expectStatus(t, err, pkv.ErrInvalidArgument)
		if !strings.Contains(err.Error(), "PlanGraph: bucket") {
			t.Fatalf("bucket %d: %v", bucket, err)
		}
	}
	b.Abort()
	if err := b.PlanGraph(1); err != pkv.ErrClosed {
		t.Fatalf("PlanGraph of an ended batch: %v", err)
	}
	if info := must(seq.Info()); info.NumComputedTokens != 3 {
		t.Fatalf("the aborted decode step computed tokens: %+v", info)
	}
}

func TestStepCountersOnACPUEngine(t *testing.T) {
	e, seq := decodingEngine(t)
	runStep(t, e, seq)
	s := must(e.Stats())
	if s.NumHostWaits != 0 || s.NumDeviceAllocs != 0 || s.NumSeqs != 1 {
		t.Fatalf("a CPU engine's step counters: waits %d, allocs %d (seqs %d)",
			s.NumHostWaits, s.NumDeviceAllocs, s.NumSeqs)
	}
}
