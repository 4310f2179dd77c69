package pkv_test

// The UCX transfer agent (pkv 0.12), as tests/agent/test_agent_procs.c but in one process: the
// producer engine's agent listens and a goroutine runs its Progress loop (Connect waits for the
// listening agent's answer), while the test connects the consumer's agent, pulls and progresses
// it. A pull of a held sequence: the consumer's output is the producer's and the producer's hold
// ends; engines of different layouts refused at the handshake; a pull of a sequence not held
// fails and the request computes itself; the refusals. Skipped when libpkv has no UCX.

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"pkv.local/pkv"
)

// agentEngine is segments_test's engine (blocks of segBS tokens) of dtype.
func agentEngine(t *testing.T, dtype pkv.DType) *pkv.Engine {
	return newEngine(t, segParams(64, dtype))
}

// newAgent is an agent of e (p nil: the defaults, listening on a free port), closed when the
// test ends; the test is skipped when libpkv was built without UCX.
func newAgent(t *testing.T, e *pkv.Engine, p *pkv.AgentParams) *pkv.Agent {
	t.Helper()
	a, err := e.NewAgent(p)
	if errors.Is(err, pkv.ErrUnsupported) {
		t.Skipf("no transfer agent: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

// connectingParams are the defaults but for listening: the agent only connects.
func connectingParams() *pkv.AgentParams {
	p := must(pkv.DefaultAgentParams())
	p.ListenAddress = ""
	return &p
}

// serve runs a's Progress loop (1 ms waits) in a goroutine until the test ends (before a is
// closed); it sends what a reports on the channel it returns.
func serve(t *testing.T, a *pkv.Agent) <-chan pkv.AgentCompletion {
	stop, got := make(chan struct{}), make(chan pkv.AgentCompletion, 16)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			done, err := a.Progress(1)
			if err != nil {
				t.Errorf("the producer's Progress: %v", err)
				return
			}
			for _, c := range done {
				select {
				case got <- c:
				case <-stop:
					return
				}
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		wg.Wait()
	})
	return got
}

// waitOne progresses a until it reports one completion (at most about 20 s).
func waitOne(t *testing.T, a *pkv.Agent) pkv.AgentCompletion {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		done := must(a.Progress(10))
		if len(done) > 1 {
			t.Fatalf("%d completions, want 1: %+v", len(done), done)
		}
		if len(done) == 1 {
			return done[0]
		}
	}
	t.Fatal("no completion in 20 s")
	return pkv.AgentCompletion{}
}

// waitServed waits for the producer's completion on served, progressing the consumer's agent a
// meanwhile (at most about 20 s).
func waitServed(t *testing.T, served <-chan pkv.AgentCompletion,
	a *pkv.Agent) pkv.AgentCompletion {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		select {
		case c := <-served:
			return c
		default:
		}
		if done := must(a.Progress(2)); len(done) != 0 {
			t.Fatalf("the consumer reports %+v", done)
		}
	}
	t.Fatal("the producer reported nothing in 20 s")
	return pkv.AgentCompletion{}
}

// agentProducer is a listening agent of prod, progressed by serve, and its address.
func agentProducer(t *testing.T, prod *pkv.Engine) (*pkv.Agent, <-chan pkv.AgentCompletion,
	string) {
	t.Helper()
	a := newAgent(t, prod, nil)
	addr := must(a.Address())
	if !strings.HasPrefix(addr, "127.0.0.1:") || addr == "127.0.0.1:0" {
		t.Fatalf("the producer listens on %q", addr)
	}
	return a, serve(t, a), addr
}

// receivingRequest submits prompt with its first remote tokens remote, steps once and returns
// it, receiving.
func receivingRequest(t *testing.T, e *pkv.Engine, prompt []int32,
	remote uint32) *pkv.Sequence {
	t.Helper()
	s := xferSubmit(t, e, prompt, remote)
	if b := must(e.Step()); b != nil {
		t.Fatalf("a receiving request ran: %d tokens", b.NumTokens())
	}
	if recv := must(e.DrainReceiving()); len(recv) != 1 || recv[0].ID != s.ID {
		t.Fatalf("receiving %v, want %d", recv, s.ID)
	}
	return s
}

// segmentBytes copies the bytes of seq's blocks first .. first+n-1, segment after segment.
func segmentBytes(t *testing.T, e *pkv.Engine, seq *pkv.Sequence, first, n uint32) []byte {
	t.Helper()
	var out []byte
	for _, s := range must(e.SeqSegments(0, seq, first, n)) {
		out = append(out, segBytes(s)...)
	}
	return out
}

// TestAgentPull: the consumer's agent pulls the producer's held sequence into its receiving
// request; its blocks then hold the producer's bytes, are cached as computed ones, and its step
// gets the producer's output. The producer's agent reports the pull served and its hold ended.
func TestAgentPull(t *testing.T) {
	prod, cons := agentEngine(t, pkv.DTypeF32), agentEngine(t, pkv.DTypeF32)
	pa, served, addr := agentProducer(t, prod)
	prompt := span(300, 13) // 4 blocks; 12 tokens, 3 blocks, from the producer
	ps, want := xferComputed(t, prod, prompt)
	if err := prod.Hold(ps, pkv.TransferNoTimeout); err != nil {
		t.Fatal(err)
	}
	from := segmentBytes(t, prod, ps, 0, 3) // the hold ends with the pull: read them now

	ca := newAgent(t, cons, connectingParams())
	if ca.Engine() != cons {
		t.Fatal("the agent's engine is not the one it was made of")
	}
	peer := must(ca.Connect(addr))
	if peer != 0 {
		t.Fatalf("the first peer is %d", peer)
	}
	cs := receivingRequest(t, cons, prompt, 12)
	if i := must(cs.Info()); i.RemoteFirstBlock != 0 || i.RemoteNumBlocks != 3 {
		t.Fatalf("receiving: %+v", i)
	}
	if bytes.Equal(segmentBytes(t, cons, cs, 0, 3), from) {
		t.Fatal("the consumer holds the producer's bytes before the pull")
	}
	if err := ca.Pull(peer, ps.ID, cs); err != nil {
		t.Fatal(err)
	}
	expectStatus(t, ca.Pull(peer, ps.ID, cs), pkv.ErrState) // one pull into it at a time
	done := waitOne(t, ca)
	const wantBytes = 3 * segLayers * 2 * segBS * segKVHeads * segDim * 4 // K and V, f32
	if done.Seq.ID != cs.ID || done.Seq.Engine != cons || done.Outcome != pkv.TransferDone ||
		done.Served || done.Bytes != wantBytes {
		t.Fatalf("the pull's end %+v, want sequence %d DONE of %d bytes", done, cs.ID, wantBytes)
	}
	st := must(ca.Stats())
	if st.PullsDone != 1 || st.PullsInFlight != 0 || st.PullsFailed != 0 ||
		st.BytesPulled != done.Bytes || st.NumPeers != 1 {
		t.Fatalf("the consumer's agent: %+v", st)
	}
	if i := must(cs.Info()); i.Transfer != pkv.TransferNone || i.NumComputedTokens != 12 {
		t.Fatalf("after the pull: %+v", i)
	}
	if !bytes.Equal(segmentBytes(t, cons, cs, 0, 3), from) {
		t.Fatal("the received blocks do not hold the producer's bytes")
	}
	if n := must(cons.Stats()).NumReceivesDone; n != 1 {
		t.Fatalf("%d fills done", n)
	}
	if _, cached := must2(cons.AllocateQuery(prompt, nil)); cached != 12 {
		t.Fatalf("%d tokens cached, want 12", cached)
	}
	if got := xferStep(t, cons, cs); !closeTo(got, want) {
		t.Fatalf("the consumer's output %v, the producer's %v", got, want)
	}

	// The producer's side: the pull served, the hold ended DONE.
	sv := waitServed(t, served, ca)
	if sv.Seq.ID != ps.ID || sv.Seq.Engine != prod || !sv.Served ||
		sv.Outcome != pkv.TransferDone || sv.Bytes != done.Bytes {
		t.Fatalf("the producer's completion %+v, want sequence %d served DONE", sv, ps.ID)
	}
	if i := must(ps.Info()); i.Transfer != pkv.TransferNone {
		t.Fatalf("the producer's sequence after the pull: %+v", i)
	}
	if es := must(prod.Stats()); es.NumHoldsDone != 1 || es.NumHeldSeqs != 0 {
		t.Fatalf("the producer: %d holds done, %d held", es.NumHoldsDone, es.NumHeldSeqs)
	}
	if st := must(pa.Stats()); st.ServedDone != 1 || st.ServedFailed != 0 ||
		st.BytesServed != done.Bytes || st.NumPeers != 1 {
		t.Fatalf("the producer's agent: %+v", st)
	}
	if err := ps.Release(); err != nil {
		t.Fatal(err)
	}
	checkEngines(t, prod, cons)
}

// TestAgentFingerprintMismatch: engines of another dtype refuse each other at the handshake.
func TestAgentFingerprintMismatch(t *testing.T) {
	prod, cons := agentEngine(t, pkv.DTypeBF16), agentEngine(t, pkv.DTypeF32)
	pa, _, addr := agentProducer(t, prod)
	ps, _ := xferComputed16(t, prod, span(300, 13))
	if err := prod.Hold(ps, pkv.TransferNoTimeout); err != nil {
		t.Fatal(err)
	}
	ca := newAgent(t, cons, connectingParams())
	// libpkv 0.12.0 races here: the listening agent answers the hello and closes the connection
	// at once, and the connecting one may see the connection lost (ERR_DEVICE) before it reads
	// the answer (tests/agent/test_agent_procs.c fails the same way now and then). Such an
	// attempt is tried again; each counts a mismatch on the producer's side.
	attempts := 1
	_, err := ca.Connect(addr)
	for ; errors.Is(err, pkv.ErrDevice) && strings.Contains(err.Error(), "connection lost") &&
		attempts < 20; attempts++ {
		t.Logf("attempt %d: %v (the handshake race): again", attempts, err)
		_, err = ca.Connect(addr)
	}
	expectStatus(t, err, pkv.ErrInvalidArgument)
	if !strings.Contains(err.Error(), "fingerprints differ") {
		t.Fatalf("the refusal says %q", err)
	}
	if st := must(ca.Stats()); st.FingerprintMismatches != 1 || st.NumPeers != 0 {
		t.Fatalf("the consumer's agent: %+v", st)
	}
	// That peer is gone: no pull from it.
	expectStatus(t, ca.Pull(uint32(attempts-1), ps.ID, cons.Sequence(1)), pkv.ErrState)
	// The producer refused it too, and still holds its sequence.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		st := must(pa.Stats())
		if st.FingerprintMismatches == uint64(attempts) && st.NumPeers == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the producer's agent: %+v", st)
		}
	}
	if i := must(ps.Info()); i.Transfer != pkv.TransferHolding {
		t.Fatalf("the producer's sequence: %+v", i)
	}
	checkEngines(t, prod, cons)
}

// xferComputed16 is xferComputed on a bf16 engine: the sequence of Allocate of prompt, its KV
// written by one batch (the outputs are not needed).
func xferComputed16(t *testing.T, e *pkv.Engine, prompt []int32) (*pkv.Sequence, []uint16) {
	t.Helper()
	seq := must(e.Allocate(prompt, nil))
	b := must(e.BeginBatch([]*pkv.Sequence{seq}, nil))
	defer b.Abort()
	n := b.NumTokens()
	q, out := make([]uint16, n*xferQRow), make([]uint16, n*xferQRow)
	k, v := make([]uint16, n*xferKVRow), make([]uint16, n*xferKVRow)
	for l := 0; l < segLayers; l++ {
		if err := b.AttentionU16(l, q, k, v, out); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.End(); err != nil {
		t.Fatal(err)
	}
	return seq, out
}

// TestAgentPullNotHeld: a pull of a sequence the producer does not hold fails; the receiving
// request is preempted, nothing of it cached, and it computes its prompt itself.
func TestAgentPullNotHeld(t *testing.T) {
	prod, cons := agentEngine(t, pkv.DTypeF32), agentEngine(t, pkv.DTypeF32)
	_, _, addr := agentProducer(t, prod)
	prompt := span(300, 13)
	ps, want := xferComputed(t, prod, prompt) // running, not held
	ca := newAgent(t, cons, connectingParams())
	peer := must(ca.Connect(addr))
	cs := receivingRequest(t, cons, prompt, 12)
	if err := ca.Pull(peer, ps.ID, cs); err != nil {
		t.Fatal(err)
	}
	done := waitOne(t, ca)
	if done.Seq.ID != cs.ID || done.Outcome != pkv.TransferFailed || done.Served {
		t.Fatalf("the pull's end %+v, want sequence %d FAILED", done, cs.ID)
	}
	if st := must(ca.Stats()); st.PullsFailed != 1 || st.PullsDone != 0 || st.PullsInFlight != 0 {
		t.Fatalf("the consumer's agent: %+v", st)
	}
	if i := must(cs.Info()); i.Transfer != pkv.TransferNone || !i.IsPreempted {
		t.Fatalf("after the failed pull: %+v", i)
	}
	if st := must(cons.Stats()); st.NumReceivesFailed != 1 || st.NumReceivesDone != 0 {
		t.Fatalf("%d fills failed, %d done", st.NumReceivesFailed, st.NumReceivesDone)
	}
	if _, cached := must2(cons.AllocateQuery(prompt, nil)); cached != 0 {
		t.Fatalf("%d tokens cached of a failed pull", cached)
	}
	checkEngines(t, cons)
	if got := xferStep(t, cons, cs); !closeTo(got, want) {
		t.Fatalf("computed itself: %v, the producer's %v", got, want)
	}
	if i := must(ps.Info()); i.Transfer != pkv.TransferNone {
		t.Fatalf("the producer's sequence: %+v", i)
	}
	checkEngines(t, prod, cons)
}

// TestAgentRefusals: bad parameters and addresses, a non-listening agent's Address, pulls of no
// peer or into no sequence, an address nobody listens on, and closed agents.
func TestAgentRefusals(t *testing.T) {
	e := agentEngine(t, pkv.DTypeF32)
	d := must(pkv.DefaultAgentParams())
	if d.Rank != 0 || d.ListenAddress != "127.0.0.1:0" || d.TimeoutMs != 30000 ||
		d.OnFailure != pkv.TransferFailed || d.MaxInflightBytes != 64<<20 {
		t.Fatalf("the defaults: %+v", d)
	}
	p := d
	p.TimeoutMs = 2000
	a := newAgent(t, e, &p)
	if done := must(a.Progress(0)); len(done) != 0 {
		t.Fatalf("an idle agent reports %+v", done)
	}
	if st := must(a.Stats()); st != (pkv.AgentStats{}) {
		t.Fatalf("a new agent's counters: %+v", st)
	}

	// Addresses that are not ipv4:port.
	for _, bad := range []string{"localhost:1", "127.0.0.1", "127.0.0.1:99999", "127.0.0.1:",
		":1", "", "127.0.0.1:1\x00"} {
		_, err := a.Connect(bad)
		expectStatus(t, err, pkv.ErrInvalidArgument)
	}
	// Nobody listens there: a closed agent's port.
	b := newAgent(t, e, nil)
	gone := must(b.Address())
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := a.Connect(gone)
	expectStatus(t, err, pkv.ErrDevice)
	if st := must(a.Stats()); st.NumPeers != 0 {
		t.Fatalf("%d peers", st.NumPeers)
	}

	// Pulls: no peer 7, no sequence, another engine's sequence.
	s := must(e.Allocate(span(1, 5), nil))
	expectStatus(t, a.Pull(7, 1, s), pkv.ErrInvalidArgument)
	expectStatus(t, a.Pull(0, 1, nil), pkv.ErrInvalidArgument)
	other := agentEngine(t, pkv.DTypeF32)
	expectStatus(t, a.Pull(0, 1, other.Sequence(s.ID)), pkv.ErrInvalidArgument)

	// A non-listening agent has no address.
	c := newAgent(t, e, connectingParams())
	_, err = c.Address()
	expectStatus(t, err, pkv.ErrState)

	// Bad parameters.
	for name, edit := range map[string]func(*pkv.AgentParams){
		"listen address": func(p *pkv.AgentParams) { p.ListenAddress = "nowhere:1" },
		"NUL":            func(p *pkv.AgentParams) { p.ListenAddress = "127.0.0.1:0\x00" },
		"on failure":     func(p *pkv.AgentParams) { p.OnFailure = pkv.TransferDone },
		"rank":           func(p *pkv.AgentParams) { p.Rank = 1 },
		"timeout":        func(p *pkv.AgentParams) { p.TimeoutMs = 0 },
		"in flight":      func(p *pkv.AgentParams) { p.MaxInflightBytes = 0 },
	} {
		p := d
		edit(&p)
		if _, err := e.NewAgent(&p); !errors.Is(err, pkv.ErrInvalidArgument) {
			t.Fatalf("%s: %v, want ERR_INVALID_ARGUMENT", name, err)
		}
	}
	if _, err := e.NewAgent(&pkv.AgentParams{}); !errors.Is(err, pkv.ErrUninitialized) ||
		!strings.Contains(err.Error(), "pkv.DefaultAgentParams()") {
		t.Fatalf("params not made by DefaultAgentParams: %v", err)
	}

	// A closed agent refuses every call; Close again is nothing.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = c.Progress(0)
	if err != pkv.ErrClosed {
		t.Fatalf("Progress of a closed agent: %v", err)
	}
	if _, err := c.Stats(); err != pkv.ErrClosed {
		t.Fatalf("Stats of a closed agent: %v", err)
	}
	// Closing the engine closes its agents first.
	f := agentEngine(t, pkv.DTypeF32)
	fa := newAgent(t, f, nil)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := fa.Address(); err != pkv.ErrClosed {
		t.Fatalf("Address of an agent of a closed engine: %v", err)
	}
	if _, err := f.NewAgent(nil); err != pkv.ErrClosed {
		t.Fatalf("NewAgent of a closed engine: %v", err)
	}
	if err := fa.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(); err != nil {
		t.Fatal(err)
	}
	checkEngines(t, e)
}
