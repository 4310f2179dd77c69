package pkv_test

// KV transfers between engines (pkv 0.12), as tests/unit/test_transfers.c: a producer's holds
// (Engine.Hold, RequestParams.HoldOnFinish, HoldEnd, the timeout, MaxHeldBlocks) and a
// consumer's remote fills (RequestParams.NumRemoteTokens, DrainReceiving, ReceiveEnd), the
// "transport" a copy between two engines' segments of one fingerprint; the consumer's output
// after a fill is the producer's. Then a failed fill, the refusals, and SeqStateSegment: a
// sequence's recurrent state, moved beside its blocks.

import (
	"bytes"
	"fmt"
	"math"
	"testing"

	"pkv.local/pkv"
)

const xferQRow, xferKVRow = segQHeads * segDim, segKVHeads * segDim

// xferEngine is segments_test's engine (f32, blocks of segBS tokens) on the test clock.
func xferEngine(t *testing.T, numBlocks uint32) *pkv.Engine {
	p := segParams(numBlocks, pkv.DTypeF32)
	p.DebugFlags = pkv.DebugTestClock
	return newEngine(t, p)
}

// xferQKV fills Q, K and V of position pos in layer l: the same on every engine, so two engines
// computing the same tokens write the same bytes and get the same outputs.
func xferQKV(pos int32, l int, q, k, v []float32) {
	for i := range q {
		q[i] = 0.01 * float32((i+int(pos)+l)%13)
	}
	for i := range k {
		x := float32((int(pos)*7+l*3+i)%17)*0.125 - 1
		k[i], v[i] = x, -0.5*x
	}
}

// xferRun runs every layer of b with xferQKV's values; it returns the last row's output of each
// layer, layer after layer.
func xferRun(t *testing.T, b *pkv.Batch) []float32 {
	t.Helper()
	n := b.NumTokens()
	pos := must(b.Positions())
	q, out := make([]float32, n*xferQRow), make([]float32, n*xferQRow)
	k, v := make([]float32, n*xferKVRow), make([]float32, n*xferKVRow)
	var last []float32
	for l := 0; l < segLayers; l++ {
		for i := 0; i < n; i++ {
			xferQKV(pos[i], l, q[i*xferQRow:(i+1)*xferQRow], k[i*xferKVRow:(i+1)*xferKVRow],
				v[i*xferKVRow:(i+1)*xferKVRow])
		}
		if err := b.Attention(l, q, k, v, out); err != nil {
			t.Fatal(err)
		}
		last = append(last, out[(n-1)*xferQRow:]...)
	}
	return last
}

// xferComputed is a sequence of Allocate of prompt, computed in one batch, and its last row's
// outputs.
func xferComputed(t *testing.T, e *pkv.Engine, prompt []int32) (*pkv.Sequence, []float32) {
	t.Helper()
	seq := must(e.Allocate(prompt, nil))
	b := must(e.BeginBatch([]*pkv.Sequence{seq}, nil))
	defer b.Abort()
	out := xferRun(t, b)
	if err := b.End(); err != nil {
		t.Fatal(err)
	}
	return seq, out
}

func xferSubmit(t *testing.T, e *pkv.Engine, prompt []int32, remote uint32) *pkv.Sequence {
	t.Helper()
	rp := must(pkv.DefaultRequestParams())
	rp.MaxNewTokens, rp.NumRemoteTokens = 1, remote
	return must(e.Submit(prompt, &rp, nil))
}

// xferStep steps e once, which must run seq alone (the rest of its prompt), samples 7 and
// returns its last row's outputs.
func xferStep(t *testing.T, e *pkv.Engine, seq *pkv.Sequence) []float32 {
	t.Helper()
	b := must(e.Step())
	if b == nil {
		t.Fatal("Step ran nothing")
	}
	if ids := must(b.SeqIDs()); len(ids) != 1 || ids[0] != seq.ID {
		t.Fatalf("Step ran %v, want [%d]", ids, seq.ID)
	}
	out := xferRun(t, b)
	if err := b.Commit([]int32{7}); err != nil {
		t.Fatal(err)
	}
	return out
}

// xferTransport is the transport: producer sequence ps's blocks first .. first+n-1 copied into
// consumer sequence cs's, segment by segment, and its recurrent state; it returns the bytes
// moved.
func xferTransport(t *testing.T, p *pkv.Engine, ps *pkv.Sequence, c *pkv.Engine,
	cs *pkv.Sequence, first, n uint32) uint64 {
	t.Helper()
	if must(p.LayoutFingerprint(0)) != must(c.LayoutFingerprint(0)) {
		t.Fatal("the engines' layouts differ")
	}
	from, to := must(p.SeqSegments(0, ps, first, n)), must(c.SeqSegments(0, cs, first, n))
	if len(from) != len(to) || len(to) == 0 {
		t.Fatalf("%d segments to copy into %d", len(from), len(to))
	}
	var moved uint64
	for i := range to {
		if to[i].Base == 0 {
			continue // a block a window gave back: nothing to write
		}
		if from[i].Base == 0 || from[i].Bytes != to[i].Bytes {
			t.Fatalf("segment %d: %+v into %+v", i, from[i], to[i])
		}
		moved += uint64(copy(segBytes(to[i]), segBytes(from[i])))
	}
	sf, st := must(p.SeqStateSegment(0, ps)), must(c.SeqStateSegment(0, cs))
	if sf.Bytes != st.Bytes {
		t.Fatalf("state segments of %d and %d bytes", sf.Bytes, st.Bytes)
	}
	if st.Base != 0 {
		moved += uint64(copy(segBytes(st), segBytes(sf)))
	}
	return moved
}

func closeTo(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(float64(a[i]-b[i])) > 1e-5*(1+math.Abs(float64(b[i]))) {
			return false
		}
	}
	return true
}

func checkEngines(t *testing.T, engines ...*pkv.Engine) {
	t.Helper()
	for _, e := range engines {
		if err := e.Check(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHoldASequence: a computed sequence held for a transfer out keeps its blocks, readable and
// shared with the prefix cache, and refuses every change until HoldEnd or its timeout.
func TestHoldASequence(t *testing.T) {
	t.Setenv("PKV_TEST_CLOCK_MS", "1000") // the engine's clock (DebugTestClock)
	e := xferEngine(t, 32)
	prompt := span(100, 10) // 3 blocks, 2 of them full
	s, _ := xferComputed(t, e, prompt)
	before := must(e.Stats())
	if err := e.Hold(s, pkv.TransferNoTimeout); err != nil {
		t.Fatal(err)
	}
	if i := must(s.Info()); i.Transfer != pkv.TransferHolding || i.KVTier != pkv.TierDevice {
		t.Fatalf("held: %+v", i)
	}
	st := must(e.Stats())
	if st.NumHeldSeqs != 1 || st.NumHeldBlocks != 3 || st.NumUsedBlocks != before.NumUsedBlocks {
		t.Fatalf("held: %d seqs, %d blocks, %d used (%d before)", st.NumHeldSeqs,
			st.NumHeldBlocks, st.NumUsedBlocks, before.NumUsedBlocks)
	}
	// Its bytes are readable; it cannot change, run or be released meanwhile.
	if segs := must(e.SeqSegments(0, s, 0, 3)); len(segs) != 3*segLayers*2 {
		t.Fatalf("%d segments of a held sequence", len(segs))
	}
	expectStatus(t, s.Release(), pkv.ErrState)
	expectStatus(t, s.Append(1), pkv.ErrState)
	expectStatus(t, e.Hold(s, 0), pkv.ErrState)
	_, err := e.BeginBatch([]*pkv.Sequence{s}, nil)
	expectStatus(t, err, pkv.ErrState)
	expectStatus(t, e.HoldEnd(s, 7), pkv.ErrInvalidArgument)
	expectStatus(t, e.HoldEnd(s, pkv.TransferFailedFinish), pkv.ErrInvalidArgument) // fills only
	// Its sealed blocks stay in the prefix cache: another prompt shares them.
	other := must(e.Allocate(prompt, nil))
	if other.NumCachedTokens != 8 {
		t.Fatalf("%d tokens cached of a held sequence's, want 8", other.NumCachedTokens)
	}
	if err := other.Release(); err != nil {
		t.Fatal(err)
	}
	checkEngines(t, e)
	if err := e.HoldEnd(s, pkv.TransferDone); err != nil {
		t.Fatal(err)
	}
	if i := must(s.Info()); i.Transfer != pkv.TransferNone || i.KVTier != pkv.TierNone {
		t.Fatalf("after HoldEnd: %+v", i)
	}
	st = must(e.Stats())
	if st.NumHeldSeqs != 0 || st.NumHeldBlocks != 0 || st.NumHoldsDone != 1 ||
		st.NumUsedBlocks != 0 {
		t.Fatalf("after HoldEnd: %d seqs, %d blocks, %d done, %d used", st.NumHeldSeqs,
			st.NumHeldBlocks, st.NumHoldsDone, st.NumUsedBlocks)
	}
	expectStatus(t, e.HoldEnd(s, pkv.TransferDone), pkv.ErrState) // ended once
	_, err = e.SeqSegments(0, s, 0, 1)
	expectStatus(t, err, pkv.ErrState)
	if err := s.Release(); err != nil {
		t.Fatal(err)
	}

	// FAILED is counted apart.
	s, _ = xferComputed(t, e, prompt)
	if err := e.Hold(s, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.HoldEnd(s, pkv.TransferFailed); err != nil {
		t.Fatal(err)
	}
	if st := must(e.Stats()); st.NumHoldsFailed != 1 || st.NumHoldsDone != 1 {
		t.Fatalf("%d failed, %d done", st.NumHoldsFailed, st.NumHoldsDone)
	}
	if err := s.Release(); err != nil {
		t.Fatal(err)
	}

	// A timeout on the engine's clock: the hold ends by itself, too late for HoldEnd.
	a, _ := xferComputed(t, e, prompt)
	b, _ := xferComputed(t, e, span(200, 6))
	if err := e.Hold(a, 500); err != nil { // until 1500
		t.Fatal(err)
	}
	if err := e.Hold(b, 0); err != nil { // TransferTimeoutDefaultMs: until 481000
		t.Fatal(err)
	}
	t.Setenv("PKV_TEST_CLOCK_MS", "1499")
	if n := must(e.Stats()).NumHeldSeqs; n != 2 {
		t.Fatalf("%d held at 1499", n)
	}
	t.Setenv("PKV_TEST_CLOCK_MS", "1500")
	if st := must(e.Stats()); st.NumHeldSeqs != 1 || st.NumHoldsTimedOut != 1 {
		t.Fatalf("at 1500: %d held, %d timed out", st.NumHeldSeqs, st.NumHoldsTimedOut)
	}
	if i := must(a.Info()); i.Transfer != pkv.TransferNone {
		t.Fatalf("timed out: %+v", i)
	}
	expectStatus(t, e.HoldEnd(a, pkv.TransferDone), pkv.ErrState)
	t.Setenv("PKV_TEST_CLOCK_MS", fmt.Sprint(1000+pkv.TransferTimeoutDefaultMs))
	if st := must(e.Stats()); st.NumHeldSeqs != 0 || st.NumHoldsTimedOut != 2 {
		t.Fatalf("after the default timeout: %d held, %d timed out", st.NumHeldSeqs,
			st.NumHoldsTimedOut)
	}
	for _, s := range []*pkv.Sequence{a, b} {
		if err := s.Release(); err != nil {
			t.Fatal(err)
		}
	}
	if n := must(e.Stats()).NumUsedBlocks; n != 0 {
		t.Fatalf("%d blocks used at the end", n)
	}
	checkEngines(t, e)
}

// TestHoldOnFinish: a request of HoldOnFinish finishes and is listed as any, its blocks held;
// one that would pass MaxHeldBlocks finishes without a hold.
func TestHoldOnFinish(t *testing.T) {
	p := segParams(32, pkv.DTypeF32)
	p.MaxHeldBlocks = 5
	e := newEngine(t, p)
	if got := e.Params().MaxHeldBlocks; got != 5 {
		t.Fatalf("MaxHeldBlocks read back %d", got)
	}
	rp := must(pkv.DefaultRequestParams())
	if rp.HoldOnFinish || rp.HoldTimeoutMs != 0 || rp.NumRemoteTokens != 0 {
		t.Fatalf("defaults %+v", rp)
	}
	rp.MaxNewTokens, rp.HoldOnFinish, rp.HoldTimeoutMs = 1, true, pkv.TransferNoTimeout
	r := must(e.Submit(span(100, 10), &rp, nil))
	big := must(e.Submit(span(500, 20), &rp, nil)) // 5 blocks: past the bound once r holds 3
	rp.HoldOnFinish = false
	plain := must(e.Submit(span(100, 10), &rp, nil))
	for i := 0; i < 4; i++ {
		b := must(e.Step())
		if b == nil {
			break
		}
		xferRun(t, b)
		if err := b.Commit(make([]int32, b.NumSeqs())); err != nil {
			t.Fatal(err)
		}
	}
	if done := must(e.DrainFinished()); len(done) != 3 {
		t.Fatalf("%d finished, want 3", len(done))
	}
	i := must(r.Info())
	if i.Transfer != pkv.TransferHolding || i.FinishReason != pkv.FinishLength ||
		i.NumTokens != 11 || i.NumComputedTokens != 10 {
		t.Fatalf("held on finish: %+v", i)
	}
	if must(plain.Info()).Transfer != pkv.TransferNone ||
		must(big.Info()).Transfer != pkv.TransferNone {
		t.Fatal("a request held without HoldOnFinish, or past MaxHeldBlocks")
	}
	st := must(e.Stats())
	if st.NumHoldsRefused != 1 || st.NumHeldSeqs != 1 || st.NumHeldBlocks != 3 ||
		st.NumFinishedRequests != 3 {
		t.Fatalf("%d refused, %d held seqs, %d held blocks, %d finished", st.NumHoldsRefused,
			st.NumHeldSeqs, st.NumHeldBlocks, st.NumFinishedRequests)
	}
	if segs := must(e.SeqSegments(0, r, 0, 3)); len(segs) != 3*segLayers*2 {
		t.Fatalf("%d segments of a held request", len(segs))
	}
	expectStatus(t, r.Release(), pkv.ErrState)
	if err := e.HoldEnd(r, pkv.TransferDone); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*pkv.Sequence{r, plain, big} {
		if err := s.Release(); err != nil {
			t.Fatal(err)
		}
	}
	if n := must(e.Stats()).NumUsedBlocks; n != 0 {
		t.Fatalf("%d blocks used at the end", n)
	}
	checkEngines(t, e)
}

// TestRemoteFill: a producer computes a prompt and holds it; the consumer receives its first
// tokens past its own prefix hit, the transport copies the producer's segments into the
// consumer's, and after ReceiveEnd the consumer's blocks hold the producer's bytes, are cached
// as computed ones, and its step gets the producer's output.
func TestRemoteFill(t *testing.T) {
	for _, c := range []struct {
		name                    string
		n, remote, preload, hit uint32
	}{
		{"a partial last block", 10, 9, 0, 0},
		{"whole blocks", 13, 12, 0, 0},
		{"past a local hit", 13, 12, 6, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			prod, cons := xferEngine(t, 64), xferEngine(t, 64)
			prompt := span(300, int(c.n))
			ps, want := xferComputed(t, prod, prompt)
			if err := prod.Hold(ps, pkv.TransferNoTimeout); err != nil {
				t.Fatal(err)
			}
			if c.preload > 0 { // the consumer caches a prefix already: the hit is subtracted
				pre, _ := xferComputed(t, cons, prompt[:c.preload])
				if err := pre.Release(); err != nil {
					t.Fatal(err)
				}
			}
			cs := xferSubmit(t, cons, prompt, c.remote)
			if b := must(cons.Step()); b != nil {
				t.Fatalf("a receiving request ran: %d tokens", b.NumTokens())
			}
			recv := must(cons.DrainReceiving())
			if len(recv) != 1 || recv[0].ID != cs.ID {
				t.Fatalf("receiving %v, want %d", recv, cs.ID)
			}
			if again := must(cons.DrainReceiving()); len(again) != 0 {
				t.Fatalf("listed twice: %v", again)
			}
			i := must(cs.Info())
			if i.Transfer != pkv.TransferReceiving || i.NumComputedTokens != c.hit ||
				i.RemoteFirstBlock != c.hit/segBS ||
				i.RemoteNumBlocks != (c.remote+segBS-1)/segBS-c.hit/segBS ||
				i.NumRemoteTokens != c.remote {
				t.Fatalf("receiving: %+v", i)
			}
			st := must(cons.Stats())
			if st.NumReceivingRequests != 1 || st.NumReceivingBlocks != uint64(i.RemoteNumBlocks) {
				t.Fatalf("%d receiving requests, %d blocks", st.NumReceivingRequests,
					st.NumReceivingBlocks)
			}
			expectStatus(t, cs.Release(), pkv.ErrState)
			if b := must(cons.Step()); b != nil {
				t.Fatal("a receiving request ran before ReceiveEnd")
			}
			checkEngines(t, cons)
			from := must(prod.SeqSegments(0, ps, i.RemoteFirstBlock, i.RemoteNumBlocks))
			if bytes.Equal(segBytes(from[0]),
				segBytes(must(cons.SeqSegments(0, cs, i.RemoteFirstBlock, 1))[0])) {
				t.Fatal("the consumer holds the producer's bytes before the transfer")
			}
			if xferTransport(t, prod, ps, cons, cs, i.RemoteFirstBlock, i.RemoteNumBlocks) == 0 {
				t.Fatal("nothing moved")
			}
			if err := cons.ReceiveEnd(cs, pkv.TransferDone); err != nil {
				t.Fatal(err)
			}
			if i := must(cs.Info()); i.Transfer != pkv.TransferNone ||
				i.NumComputedTokens != c.remote {
				t.Fatalf("after ReceiveEnd: %+v", i)
			}
			st = must(cons.Stats())
			if st.NumReceivesDone != 1 || st.ReceivedTokens != uint64(c.remote-c.hit) ||
				st.NumReceivingRequests != 0 || st.NumReceivingBlocks != 0 {
				t.Fatalf("after ReceiveEnd: %d done, %d tokens, %d receiving", st.NumReceivesDone,
					st.ReceivedTokens, st.NumReceivingRequests)
			}
			for k, d := range must(cons.SeqSegments(0, cs, i.RemoteFirstBlock, i.RemoteNumBlocks)) {
				if !bytes.Equal(segBytes(d), segBytes(from[k])) {
					t.Fatalf("received segment %d differs from the producer's", k)
				}
			}
			checkEngines(t, cons)
			// The received full blocks are in the prefix cache, as if computed.
			wantCached := c.remote / segBS * segBS
			if last := (c.n - 1) / segBS * segBS; last < wantCached {
				wantCached = last
			}
			if _, cached := must2(cons.AllocateQuery(prompt, nil)); cached != wantCached {
				t.Fatalf("%d tokens cached, want %d", cached, wantCached)
			}
			// Its step computes the rest and gets the producer's output.
			if got := xferStep(t, cons, cs); !closeTo(got, want) {
				t.Fatalf("the consumer's output %v, the producer's %v", got, want)
			}
			if err := prod.HoldEnd(ps, pkv.TransferDone); err != nil {
				t.Fatal(err)
			}
			checkEngines(t, prod, cons)
		})
	}
}

// TestRemoteFillFailed: half the bytes arrive, then the peer is gone. FAILED: nothing the
// transfer wrote is used, the request is preempted and computes its prompt itself, to the
// producer's output. FAILED_FINISH: the request finishes (FinishTransferFailed).
func TestRemoteFillFailed(t *testing.T) {
	prod, cons := xferEngine(t, 64), xferEngine(t, 64)
	prompt := span(300, 13)
	ps, want := xferComputed(t, prod, prompt)
	if err := prod.Hold(ps, pkv.TransferNoTimeout); err != nil {
		t.Fatal(err)
	}
	cs := xferSubmit(t, cons, prompt, 12)
	if b := must(cons.Step()); b != nil {
		t.Fatal("a receiving request ran")
	}
	if i := must(cs.Info()); i.Transfer != pkv.TransferReceiving || i.RemoteNumBlocks != 3 {
		t.Fatalf("receiving: %+v", i)
	}
	xferTransport(t, prod, ps, cons, cs, 0, 1) // one block of 3
	before := must(cons.Stats())
	if err := cons.ReceiveEnd(cs, pkv.TransferFailed); err != nil {
		t.Fatal(err)
	}
	st := must(cons.Stats())
	if st.NumReceivesFailed != 1 || st.NumPrefixNodes != before.NumPrefixNodes ||
		st.NumUsedBlocks != 0 {
		t.Fatalf("after FAILED: %d failed, %d prefix nodes (%d before), %d used",
			st.NumReceivesFailed, st.NumPrefixNodes, before.NumPrefixNodes, st.NumUsedBlocks)
	}
	if _, cached := must2(cons.AllocateQuery(prompt, nil)); cached != 0 {
		t.Fatalf("%d tokens cached of a failed fill", cached)
	}
	if i := must(cs.Info()); i.Transfer != pkv.TransferNone || !i.IsPreempted {
		t.Fatalf("after FAILED: %+v", i)
	}
	checkEngines(t, cons)
	if got := xferStep(t, cons, cs); !closeTo(got, want) {
		t.Fatalf("computed itself: %v, the producer's %v", got, want)
	}
	if n := must(cons.Stats()).NumReceivesDone; n != 0 {
		t.Fatalf("%d fills done", n)
	}

	cs2 := xferSubmit(t, cons, prompt[1:], 11)
	if b := must(cons.Step()); b != nil { // cs's last token, if any
		xferRun(t, b)
		if err := b.Commit(make([]int32, b.NumSeqs())); err != nil {
			t.Fatal(err)
		}
	}
	if i := must(cs2.Info()); i.Transfer != pkv.TransferReceiving {
		t.Fatalf("not receiving: %+v", i)
	}
	if err := cons.ReceiveEnd(cs2, pkv.TransferFailedFinish); err != nil {
		t.Fatal(err)
	}
	if i := must(cs2.Info()); i.FinishReason != pkv.FinishTransferFailed ||
		i.KVTier != pkv.TierNone || i.Transfer != pkv.TransferNone {
		t.Fatalf("after FAILED_FINISH: %+v", i)
	}
	done := must(cons.DrainFinished())
	if len(done) == 0 || done[len(done)-1].ID != cs2.ID {
		t.Fatalf("finished %v, want %d last", done, cs2.ID)
	}
	if n := must(cons.Stats()).NumReceivesFailed; n != 2 {
		t.Fatalf("%d fills failed, want 2", n)
	}
	if err := cs2.Release(); err != nil {
		t.Fatal(err)
	}
	if err := prod.HoldEnd(ps, pkv.TransferFailed); err != nil {
		t.Fatal(err)
	}
	checkEngines(t, prod, cons)
}

func TestTransferRefusals(t *testing.T) {
	c := xferEngine(t, 64)
	prompt := span(300, 13)
	rp := must(pkv.DefaultRequestParams())
	rp.NumRemoteTokens = 13 // the last prompt token is computed here
	_, err := c.Submit(prompt, &rp, nil)
	expectStatus(t, err, pkv.ErrInvalidArgument)
	if n := must(c.Stats()).NumWaitingRequests; n != 0 {
		t.Fatalf("%d requests queued by refused submits", n)
	}
	if recv := must(c.DrainReceiving()); len(recv) != 0 {
		t.Fatalf("receiving %v", recv)
	}
	none := c.Sequence(42)
	expectStatus(t, c.ReceiveEnd(none, pkv.TransferDone), pkv.ErrNotFound)
	expectStatus(t, c.Hold(none, 0), pkv.ErrNotFound)
	expectStatus(t, c.HoldEnd(none, pkv.TransferDone), pkv.ErrNotFound)
	plain := must(c.Allocate(prompt, nil)) // not computed
	expectStatus(t, c.ReceiveEnd(plain, pkv.TransferDone), pkv.ErrState)
	expectStatus(t, c.ReceiveEnd(plain, 3), pkv.ErrInvalidArgument)
	expectStatus(t, c.Hold(plain, 0), pkv.ErrState)
	expectStatus(t, c.HoldEnd(plain, pkv.TransferDone), pkv.ErrState)
	expectStatus(t, c.Hold(nil, 0), pkv.ErrInvalidArgument)
	expectStatus(t, c.HoldEnd(nil, pkv.TransferDone), pkv.ErrInvalidArgument)
	expectStatus(t, c.ReceiveEnd(nil, pkv.TransferDone), pkv.ErrInvalidArgument)
	if seg := must(c.SeqStateSegment(0, plain)); seg != (pkv.Segment{}) {
		t.Fatalf("the state of an engine without state layers: %+v", seg)
	}
	_, err = c.SeqStateSegment(1, plain)
	expectStatus(t, err, pkv.ErrInvalidArgument)
	_, err = c.SeqStateSegment(-1, plain)
	expectStatus(t, err, pkv.ErrInvalidArgument)
	_, err = c.SeqStateSegment(0, nil)
	expectStatus(t, err, pkv.ErrInvalidArgument)
	_, err = c.SeqStateSegment(0, none)
	expectStatus(t, err, pkv.ErrNotFound)
	rp.NumRemoteTokens = 12
	r := must(c.Submit(prompt, &rp, nil))
	expectStatus(t, c.Hold(r, 0), pkv.ErrState) // a request holds when it finishes
	checkEngines(t, c)

	// The bound: at most MaxHeldBlocks block references held, <= NumBlocks.
	p := segParams(32, pkv.DTypeF32)
	p.MaxHeldBlocks = 33
	_, err = pkv.NewEngine(p)
	expectStatus(t, err, pkv.ErrInvalidArgument)
	p.MaxHeldBlocks = 2
	e := newEngine(t, p)
	s, _ := xferComputed(t, e, span(100, 10)) // 3 blocks
	expectStatus(t, e.Hold(s, 0), pkv.ErrNoSpace)
	if i := must(s.Info()); i.Transfer != pkv.TransferNone {
		t.Fatalf("a refused hold: %+v", i)
	}
	small, _ := xferComputed(t, e, span(100, 6)) // 2 blocks, 1 shared with s
	if err := e.Hold(small, 0); err != nil {
		t.Fatal(err)
	}
	if n := must(e.Stats()).NumHeldBlocks; n != 2 {
		t.Fatalf("%d blocks held", n)
	}
	checkEngines(t, e)

	names := fmt.Sprint(pkv.TransferOutcome(pkv.TransferDone), " ",
		pkv.TransferOutcome(pkv.TransferFailedFinish), " ", pkv.TransferOutcome(9))
	if names != "TRANSFER_DONE TRANSFER_FAILED_FINISH TransferOutcome(9)" {
		t.Fatalf("names %q", names)
	}
}

// TestSeqStateSegment: on an engine of state layers, a sequence's state is its working slot
// (Batch.StateSlots) while it runs and while it is held; it has none once the hold ends.
func TestSeqStateSegment(t *testing.T) {
	e := newEngine(t, hybridParams(t))
	seq := must(e.Allocate(span(1, 6), nil))
	b := must(e.BeginBatch([]*pkv.Sequence{seq}, nil))
	slots := must(b.StateSlots())
	n := b.NumTokens()
	q, kv := make([]float32, n*64), make([]float32, n*32)
	if err := b.Attention(3, q, kv, kv, make([]float32, len(q))); err != nil {
		t.Fatal(err)
	}
	if err := b.End(); err != nil {
		t.Fatal(err)
	}
	pool := must(e.PoolInfo())
	want := pkv.Segment{Base: pool.StateBase + uintptr(slots[0])*uintptr(pool.StateSlotBytes),
		Bytes: slotBytes}
	if got := must(e.SeqStateSegment(0, seq)); got != want || pool.StateSlotBytes != slotBytes {
		t.Fatalf("state segment %+v, want %+v", got, want)
	}
	if err := e.Hold(seq, pkv.TransferNoTimeout); err != nil {
		t.Fatal(err)
	}
	if got := must(e.SeqStateSegment(0, seq)); got != want {
		t.Fatalf("held: state segment %+v, want %+v", got, want)
	}
	if err := e.HoldEnd(seq, pkv.TransferDone); err != nil {
		t.Fatal(err)
	}
	_, err := e.SeqStateSegment(0, seq)
	expectStatus(t, err, pkv.ErrState)
	checkEngines(t, e)
}

// TestRemoteFillOfState: between engines of state layers the transport moves the recurrent
// state too: the producer's working slot (here a pattern the "recurrence" wrote) into the
// receiving request's, where the step after ReceiveEnd finds it.
func TestRemoteFillOfState(t *testing.T) {
	prod, cons := newEngine(t, hybridParams(t)), newEngine(t, hybridParams(t))
	prompt := span(1, 10)
	ps := must(prod.Allocate(prompt, nil))
	b := must(prod.BeginBatch([]*pkv.Sequence{ps}, nil))
	n := b.NumTokens()
	q, kv := make([]float32, n*64), make([]float32, n*32)
	if err := b.Attention(3, q, kv, kv, make([]float32, len(q))); err != nil {
		t.Fatal(err)
	}
	if err := b.End(); err != nil {
		t.Fatal(err)
	}
	state := segBytes(must(prod.SeqStateSegment(0, ps)))
	for i := range state {
		state[i] = byte(i*7 + 1)
	}
	if err := prod.Hold(ps, pkv.TransferNoTimeout); err != nil {
		t.Fatal(err)
	}
	rp := must(pkv.DefaultRequestParams())
	rp.MaxNewTokens, rp.NumRemoteTokens = 1, 9
	cs := must(cons.Submit(prompt, &rp, nil))
	if b := must(cons.Step()); b != nil {
		t.Fatal("a receiving request ran")
	}
	if recv := must(cons.DrainReceiving()); len(recv) != 1 || recv[0].ID != cs.ID {
		t.Fatalf("receiving %v", recv)
	}
	i := must(cs.Info())
	to := must(cons.SeqStateSegment(0, cs))
	if to.Bytes != slotBytes || bytes.Equal(segBytes(to), state) {
		t.Fatalf("the receiving request's state segment %+v", to)
	}
	if xferTransport(t, prod, ps, cons, cs, i.RemoteFirstBlock, i.RemoteNumBlocks) == 0 {
		t.Fatal("nothing moved")
	}
	if err := cons.ReceiveEnd(cs, pkv.TransferDone); err != nil {
		t.Fatal(err)
	}
	b = must(cons.Step())
	if b == nil || b.NumTokens() != 1 {
		t.Fatalf("the step after the fill: %+v", b)
	}
	slots, pool := must(b.StateSlots()), must(cons.PoolInfo())
	at := pkv.Segment{Base: pool.StateBase + uintptr(slots[0])*uintptr(pool.StateSlotBytes),
		Bytes: pool.StateSlotBytes}
	if !bytes.Equal(segBytes(at), state) {
		t.Fatal("the step's state slot does not hold the producer's state")
	}
	b.Abort()
	if err := prod.HoldEnd(ps, pkv.TransferDone); err != nil {
		t.Fatal(err)
	}
	checkEngines(t, prod, cons)
}
