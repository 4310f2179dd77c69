package pkv_test

// Issue 26 item 1: no sequence of calls strands an open batch. A batch of Step ended with End is
// refused and stays open (Commit or Abort still end it); a batch dropped without being ended is
// aborted by the garbage collector; either way the next Step works.

import (
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"pkv.local/pkv"
)

// stepEngine is a small f32 engine with one request submitted.
func stepEngine(t *testing.T) (*pkv.Engine, *pkv.Sequence) {
	t.Helper()
	e := newEngine(t, smallParams(t))
	rp := must(pkv.DefaultRequestParams())
	rp.MaxNewTokens = 4
	return e, must(e.Submit([]int32{1, 2, 3, 4, 5, 6}, &rp, nil))
}

func runLayers(t *testing.T, b *pkv.Batch) {
	t.Helper()
	n := b.NumTokens()
	q, kv := make([]float32, n*64), make([]float32, n*32)
	for layer := 0; layer < 2; layer++ {
		if err := b.Attention(layer, q, kv, kv, make([]float32, len(q))); err != nil {
			t.Fatal(err)
		}
	}
}

// endRefused checks that End on a batch of Step is ErrState in Go's terms and keeps the batch:
// the engine still has it open.
func endRefused(t *testing.T, e *pkv.Engine, b *pkv.Batch) {
	t.Helper()
	err := b.End()
	expectStatus(t, err, pkv.ErrState)
	if !strings.Contains(err.Error(), "Commit(sampled)") || !strings.Contains(err.Error(), "still open") {
		t.Fatalf("End's error does not say how to end the batch: %v", err)
	}
	if _, err := e.Step(); !errors.Is(err, pkv.ErrState) || !strings.Contains(err.Error(), "Commit or Abort") {
		t.Fatalf("Step with the refused batch open: %v, want ErrState saying how it ends", err)
	}
	if must(b.SampleRows()) == nil {
		t.Fatal("the refused batch is not readable")
	}
}

func TestStepBatchEndRefusedThenCommit(t *testing.T) {
	e, seq := stepEngine(t)
	b := must(e.Step())
	runLayers(t, b)
	endRefused(t, e, b)
	if err := b.Commit([]int32{7}); err != nil {
		t.Fatalf("Commit after the refused End: %v", err)
	}
	if info := must(seq.Info()); info.NumComputedTokens != 6 || info.NumGeneratedTokens != 1 {
		t.Fatalf("after the commit: %+v", info)
	}
	next := must(e.Step())
	if next == nil || next.NumTokens() != 1 {
		t.Fatalf("the next step: %+v", next)
	}
	next.Abort()
}

func TestStepBatchEndRefusedThenAbort(t *testing.T) {
	e, seq := stepEngine(t)
	b := must(e.Step())
	endRefused(t, e, b)
	b.Abort()
	if info := must(seq.Info()); info.NumComputedTokens != 0 {
		t.Fatalf("after the abort %d tokens computed", info.NumComputedTokens)
	}
	if err := b.Commit([]int32{7}); err != pkv.ErrClosed {
		t.Fatalf("Commit after Abort: %v", err)
	}
	again := must(e.Step()) // the same prompt, planned again
	if again == nil || again.NumTokens() != 6 {
		t.Fatalf("the step after the abort: %+v", again)
	}
	runLayers(t, again)
	if err := again.Commit([]int32{7}); err != nil {
		t.Fatal(err)
	}
}

// untilStepRuns collects garbage until the dropped batch's finalizer has aborted it and Step
// plans again (finalizers run on their own goroutine, after a GC cycle finds the batch).
func untilStepRuns(t *testing.T, e *pkv.Engine) *pkv.Batch {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		b, err := e.Step()
		if err == nil {
			return b
		}
		if !errors.Is(err, pkv.ErrState) || time.Now().After(deadline) {
			t.Fatalf("Step after dropping the batch: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// dropStep makes a batch of Step and drops it, not ended (a function of its own: no variable
// of the caller's keeps it).
func dropStep(t *testing.T, e *pkv.Engine) {
	if b := must(e.Step()); b == nil || b.NumTokens() != 6 {
		t.Fatalf("step: %+v", b)
	}
}

func TestDroppedStepBatchIsAborted(t *testing.T) {
	e, seq := stepEngine(t)
	dropStep(t, e)
	b := untilStepRuns(t, e)
	if b == nil || b.NumTokens() != 6 {
		t.Fatalf("the step after the dropped one: %+v", b)
	}
	if info := must(seq.Info()); info.NumComputedTokens != 0 {
		t.Fatalf("the dropped batch computed %d tokens", info.NumComputedTokens)
	}
	b.Abort()
}

func dropBegun(t *testing.T, e *pkv.Engine, s *pkv.Sequence) {
	if b := must(e.BeginBatch([]*pkv.Sequence{s}, nil)); b.NumTokens() != 5 {
		t.Fatalf("batch of %d tokens", b.NumTokens())
	}
}

func TestDroppedBatchIsAborted(t *testing.T) {
	e := newEngine(t, smallParams(t))
	s := must(e.Allocate([]int32{1, 2, 3, 4, 5}, nil))
	dropBegun(t, e, s)
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		b, err := e.BeginBatch([]*pkv.Sequence{s}, nil)
		if err == nil {
			runLayers(t, b)
			if err := b.End(); err != nil {
				t.Fatal(err)
			}
			break
		}
		if !errors.Is(err, pkv.ErrState) || time.Now().After(deadline) {
			t.Fatalf("BeginBatch after dropping a batch: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if info := must(s.Info()); info.NumComputedTokens != 5 {
		t.Fatalf("computed %d", info.NumComputedTokens)
	}
}
