package pkv_test

// Retention (pkv 0.8): a system prompt kept by its cache priority through a burst of unique
// prompts (and evicted by plain LRU), evictions by priority, pins and their cap, a retention
// that decays on the test clock.
//
// Block size 4, a pool of 8 blocks. A prompt of 9 tokens holds 3 blocks while it runs;
// released, its 2 full blocks stay cached and the third is free. The system prompts are 8
// tokens (2 blocks); each request is one plus a token of its own.

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"pkv.local/pkv"
)

func span(first int32, n int) []int32 {
	t := make([]int32, n)
	for i := range t {
		t[i] = first + int32(i)
	}
	return t
}

var (
	system = span(1000, 8)
	other  = span(2000, 8) // a second tenant's system prompt
)

func withOne(prefix []int32) []int32 { return append(append([]int32{}, prefix...), 1) }

func retentionEngine(t *testing.T, flags pkv.DebugFlags) *pkv.Engine {
	p := smallParams(t)
	p.NumBlocks, p.DebugFlags = 8, flags
	return newEngine(t, p)
}

// runPrompt allocates tokens with r, computes them and releases them.
func runPrompt(t *testing.T, e *pkv.Engine, tokens []int32, r pkv.Retention) {
	t.Helper()
	s := must(e.AllocateRetained(tokens, pkv.SeqKeys{}, r))
	runStep(t, e, s)
	if err := s.Release(); err != nil {
		t.Fatal(err)
	}
}

// burst runs count unique 9-token prompts of priority 0 from first.
func burst(t *testing.T, e *pkv.Engine, count int, first int32) {
	t.Helper()
	for i := 0; i < count; i++ {
		runPrompt(t, e, span(first+100*int32(i), 9), pkv.Retention{})
	}
}

func cachedOf(e *pkv.Engine, prefix []int32) uint32 {
	_, cached, err := e.AllocateQuery(withOne(prefix), nil)
	if err != nil {
		panic(err)
	}
	return cached
}

func checkSums(t *testing.T, e *pkv.Engine) pkv.Stats {
	t.Helper()
	s := must(e.Stats())
	if sum := s.NumEvictionsLow + s.NumEvictionsNormal + s.NumEvictionsHigh + s.NumEvictionsHighest; sum != s.NumEvictions {
		t.Fatalf("evictions by priority sum to %d, num_evictions is %d", sum, s.NumEvictions)
	}
	if err := e.Check(); err != nil {
		t.Fatal(err)
	}
	return s
}

// systemPromptsAfterABurst: system cached with priority through its allocation, other at 0 and
// then given it by CacheSetPriority; 4 bursts. 4 free blocks: the first burst takes 3 and frees
// 1 (6 of 8 cached); each later one needs 1 (then 2, 2) more than is free: 5 evictions.
func systemPromptsAfterABurst(t *testing.T, priority int32) (uint32, uint32, pkv.Stats) {
	e := retentionEngine(t, 0)
	runPrompt(t, e, withOne(system), pkv.Retention{Priority: priority})
	runPrompt(t, e, withOne(other), pkv.Retention{})
	if priority != 0 {
		if n := must(e.CacheSetPriority(other, pkv.SeqKeys{}, pkv.Retention{Priority: priority})); n != 2 {
			t.Fatalf("CacheSetPriority gave %d blocks the priority, want 2", n)
		}
	}
	if n := must(e.Stats()).NumCachedBlocks; n != 4 {
		t.Fatalf("%d cached blocks, want 4", n)
	}
	burst(t, e, 4, 5000)
	return cachedOf(e, system), cachedOf(e, other), checkSums(t, e)
}

func TestRetentionKeepsSystemPrompts(t *testing.T) {
	sys, oth, s := systemPromptsAfterABurst(t, pkv.CachePriorityMax)
	if sys != 8 || oth != 8 || s.NumEvictions != 5 || s.NumEvictionsNormal != 5 || s.NumEvictionsHighest != 0 {
		t.Fatalf("priority max: cached %d, %d; stats %+v", sys, oth, s)
	}
	sys, oth, s = systemPromptsAfterABurst(t, 0) // plain LRU: the 4 oldest blocks go first
	if sys != 0 || oth != 0 || s.NumEvictions != 5 || s.NumEvictionsNormal != 5 {
		t.Fatalf("plain LRU: cached %d, %d; stats %+v", sys, oth, s)
	}
}

func TestRetentionEvictionsByPriority(t *testing.T) {
	e := retentionEngine(t, 0)
	runPrompt(t, e, withOne(system), pkv.Retention{Priority: pkv.CachePriorityMax})
	runPrompt(t, e, withOne(other), pkv.Retention{Priority: pkv.CachePriorityMin})
	runPrompt(t, e, span(3000, 9), pkv.Retention{Priority: 1})
	runPrompt(t, e, span(0, 32), pkv.Retention{}) // the whole pool: every cached block goes
	s := checkSums(t, e)
	got := [5]uint64{s.NumEvictionsLow, s.NumEvictionsNormal, s.NumEvictionsHigh, s.NumEvictionsHighest, s.NumEvictions}
	if got != [5]uint64{2, 0, 2, 2, 6} {
		t.Fatalf("evictions low, normal, high, highest, all: %v", got)
	}
}

func TestRetentionRefusals(t *testing.T) {
	e := retentionEngine(t, 0)
	runPrompt(t, e, withOne(system), pkv.Retention{})
	_, err := e.CacheSetPriority(system, pkv.SeqKeys{}, pkv.Retention{Priority: pkv.CachePriorityMax + 1})
	expectStatus(t, err, pkv.ErrInvalidArgument)
	if !strings.Contains(err.Error(), "priority") {
		t.Fatalf("message: %v", err)
	}
	_, err = e.AllocateRetained(system, pkv.SeqKeys{}, pkv.Retention{Priority: pkv.CachePriorityMin - 1})
	expectStatus(t, err, pkv.ErrInvalidArgument)
	rp := must(pkv.DefaultRequestParams())
	rp.CachePriority = pkv.CachePriorityMax + 1
	_, err = e.Submit(system, &rp, nil)
	expectStatus(t, err, pkv.ErrInvalidArgument)
	if n := must(e.Stats()).NumSeqs; n != 0 {
		t.Fatalf("%d sequences after refusals", n)
	}
}

func TestRetentionOfARequest(t *testing.T) {
	e := retentionEngine(t, 0)
	rp := must(pkv.DefaultRequestParams())
	rp.MaxNewTokens, rp.CachePriority = 1, pkv.CachePriorityMax
	seq := must(e.Submit(withOne(system), &rp, nil))
	b := must(e.Step())
	q, kv := make([]float32, b.NumTokens()*64), make([]float32, b.NumTokens()*32)
	for layer := 0; layer < 2; layer++ {
		if err := b.Attention(layer, q, kv, kv, make([]float32, len(q))); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit([]int32{7}); err != nil {
		t.Fatal(err)
	}
	if done := must(e.DrainFinished()); len(done) != 1 || done[0].ID != seq.ID {
		t.Fatalf("finished: %v", done)
	}
	if err := seq.Release(); err != nil {
		t.Fatal(err)
	}
	burst(t, e, 4, 5000)
	if n := cachedOf(e, system); n != 8 {
		t.Fatalf("the request's system prompt: %d tokens cached, want 8", n)
	}
	checkSums(t, e)
}

func TestCachePin(t *testing.T) {
	e := retentionEngine(t, 0)
	runPrompt(t, e, withOne(system), pkv.Retention{})
	pin := must(e.CachePin(system, pkv.SeqKeys{}))
	defer pin.Close() // unpinned below: Close then does nothing
	if pin.NumTokens != 8 || pin.ID == 0 {
		t.Fatalf("pin %d of %d tokens", pin.ID, pin.NumTokens)
	}
	if s := must(e.Stats()); s.NumPins != 1 || s.NumPinnedBlocks != 2 {
		t.Fatalf("pins %d, pinned blocks %d", s.NumPins, s.NumPinnedBlocks)
	}
	burst(t, e, 4, 5000) // 6 blocks left to it: it evicts its own, never the pinned ones
	if n := cachedOf(e, system); n != 8 {
		t.Fatalf("pinned: %d tokens cached, want 8", n)
	}
	if err := pin.Unpin(); err != nil {
		t.Fatal(err)
	}
	if s := must(e.Stats()); s.NumPins != 0 || s.NumPinnedBlocks != 0 {
		t.Fatalf("unpinned: pins %d, pinned blocks %d", s.NumPins, s.NumPinnedBlocks)
	}
	err := pin.Unpin() // the second unpin
	expectStatus(t, err, pkv.ErrNotFound)
	if !strings.Contains(err.Error(), fmt.Sprintf("no pin %d", pin.ID)) {
		t.Fatalf("message: %v", err)
	}
	if err := pin.Close(); err != nil {
		t.Fatalf("Close after Unpin: %v", err)
	}
	runPrompt(t, e, span(0, 32), pkv.Retention{}) // the whole pool: the system prompt goes too
	if n := cachedOf(e, system); n != 0 {
		t.Fatalf("unpinned: %d tokens cached after the whole pool was taken", n)
	}
	checkSums(t, e)
}

func TestCachePinCap(t *testing.T) {
	e := retentionEngine(t, 0)
	runPrompt(t, e, withOne(system), pkv.Retention{})
	runPrompt(t, e, span(3000, 13), pkv.Retention{}) // 3 cached blocks
	pin := must(e.CachePin(system, pkv.SeqKeys{}))
	// 2 + 3 pinned blocks would pass MaxPinnedPercent (50) of 8
	_, err := e.CachePin(span(3000, 12), pkv.SeqKeys{})
	expectStatus(t, err, pkv.ErrNoSpace)
	if pkv.MaxPinnedPercent != 50 || !strings.Contains(err.Error(), "PKV_MAX_PINNED_PERCENT") {
		t.Fatalf("message: %v", err)
	}
	if s := must(e.Stats()); s.NumPins != 1 || s.NumPinnedBlocks != 2 {
		t.Fatalf("a refused pin changed the pins: %d, %d", s.NumPins, s.NumPinnedBlocks)
	}
	if err := pin.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.CacheUnpin(pin.ID); !errors.Is(err, pkv.ErrNotFound) {
		t.Fatalf("unpin after Close: %v", err)
	}
	other := must(e.CachePin(span(3000, 12), pkv.SeqKeys{}))
	if other.NumTokens != 12 {
		t.Fatalf("pinned %d tokens, want 12", other.NumTokens)
	}
	e.Close() // ends every pin: Close of one then asks nothing of the closed engine
	if err := other.Close(); err != nil {
		t.Fatalf("Close of a pin of a closed engine: %v", err)
	}
	if err := other.Unpin(); !errors.Is(err, pkv.ErrClosed) {
		t.Fatalf("Unpin of a pin of a closed engine: %v", err)
	}
}

func TestRetentionDecays(t *testing.T) {
	t.Setenv("PKV_TEST_CLOCK_MS", "1000") // the engine's clock (DebugTestClock), in this process
	e := retentionEngine(t, pkv.DebugTestClock)
	runPrompt(t, e, withOne(system), pkv.Retention{Priority: pkv.CachePriorityMax, RetentionMs: 500})
	burst(t, e, 4, 5000)
	if n := cachedOf(e, system); n != 8 {
		t.Fatalf("retained: %d tokens cached, want 8", n)
	}
	t.Setenv("PKV_TEST_CLOCK_MS", "1500") // decayed: the oldest normal blocks
	burst(t, e, 1, 9000)                  // 1 free block, then 2 evictions: the system prompt's
	if n := cachedOf(e, system); n != 0 {
		t.Fatalf("decayed: %d tokens cached, want 0", n)
	}
	if s := checkSums(t, e); s.NumEvictionsHighest != 0 || s.NumEvictionsNormal != s.NumEvictions {
		t.Fatalf("decayed blocks are evicted as normal ones: %+v", s)
	}
}
