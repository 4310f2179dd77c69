package pkv

// The UCX transfer agent (pkv 0.12, DESIGN.md §10): pkv's own transport for KV transfers between
// engines in different processes. Each engine (rank) that takes part has an Agent; a consumer's
// agent connects to a producer's by address (Agent.Connect, the layout fingerprints checked at
// the handshake) and pulls a held sequence of the producer (Engine.Hold,
// RequestParams.HoldOnFinish) into one of its receiving requests (RequestParams.NumRemoteTokens,
// Engine.DrainReceiving) with one-sided reads (Agent.Pull), then ends both sides: ReceiveEnd
// TransferDone here, HoldEnd TransferDone there. Nothing moves but in Connect and Progress: both
// sides call Progress in their loops.

// #include <stdlib.h>
// #include <pkv/pkv.h>
import "C"

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"unsafe"
)

// AgentParams are an agent's parameters (pkv_agent_params): start from DefaultAgentParams.
type AgentParams struct {
	// Rank is the engine's rank whose pool the agent moves (default 0).
	Rank uint32
	// ListenAddress is the "ipv4:port" the agent accepts peers on (port 0: a free one,
	// Agent.Address says which); "" = none, it only connects. Default "127.0.0.1:0".
	ListenAddress string
	// TimeoutMs: a handshake or a pull taking longer fails (default 30000).
	TimeoutMs uint32
	// OnFailure is what a failed pull does to its receiving request: TransferFailed (it
	// computes its prompt itself; the default) or TransferFailedFinish (it finishes).
	OnFailure TransferOutcome
	// MaxInflightBytes bounds the reads in flight at once, over all pulls (at least one
	// segment's are; default 64 MiB).
	MaxInflightBytes uint64

	initialized bool
}

// DefaultAgentParams are pkv's defaults for an agent (pkv_agent_params_init): every AgentParams
// starts here.
func DefaultAgentParams() (AgentParams, error) {
	var p AgentParams
	if libraryError != nil {
		return p, libraryError
	}
	var raw cAgentParams
	err := check(func() C.pkv_status {
		return C.pkv_agent_params_init((*C.pkv_agent_params)(unsafe.Pointer(&raw)),
			C.uint32_t(unsafe.Sizeof(raw)))
	})
	if err != nil {
		return p, err
	}
	p = AgentParams{Rank: raw.Rank, ListenAddress: goString(raw.ListenAddress),
		TimeoutMs: raw.TimeoutMs, OnFailure: TransferOutcome(raw.OnFailure),
		MaxInflightBytes: raw.MaxInflightBytes, initialized: true}
	return p, nil
}

// AgentCompletion is one pull's end (pkv_agent_completion), as Agent.Progress reports it.
type AgentCompletion struct {
	// Seq is the agent's engine's sequence: the receiving request (Served false), or the held
	// sequence a peer pulled (Served true), whose hold has ended.
	Seq *Sequence
	// Outcome is TransferDone, or how it failed (AgentParams.OnFailure for a pull of this
	// agent's; TransferFailed for one served).
	Outcome TransferOutcome
	Served  bool
	Bytes   uint64 // the bytes read
}

// AgentStats are an agent's counters (pkv_agent_stats).
type AgentStats struct {
	NumPeers      uint32 // connected now
	PullsInFlight uint64 // this agent's, now; the rest are cumulative
	PullsDone     uint64
	PullsFailed   uint64
	ServedDone    uint64 // peers' pulls of this engine's holds
	ServedFailed  uint64
	BytesPulled   uint64 // read by this agent's pulls (as each read completes)
	BytesServed   uint64 // read by peers from this engine (as their pulls end)
	// FingerprintMismatches are the handshakes refused: the engines' layouts differ.
	FingerprintMismatches uint64
}

// Agent is an engine's UCX transfer agent (pkv_agent). Close it when done; a closed agent
// returns ErrClosed, and so does one whose engine was closed (Engine.Close closes its agents
// first). Safe for concurrent use: pkv serializes the calls on an agent, and the agent takes its
// engine's lock itself, so one goroutine may run an agent's Progress loop while others use the
// engine.
type Agent struct {
	h   *agentHandle
	eng *Engine // the agent must not outlive it: held so that it is collected after the agent
}

// agentHandle is an agent's C handle. The Engine lists its agents' handles (not the Agents,
// which point at the engine: no cycle of finalized objects) to close them before itself.
type agentHandle struct {
	mu sync.Mutex
	a  *C.pkv_agent
}

// NewAgent creates an agent for rank p.Rank of the engine (pkv_agent_create; p nil:
// DefaultAgentParams), listening on p.ListenAddress unless it is "". It registers the rank's
// pool (and host tier and state slots) with UCX once. Close it before the engine, or let
// Engine.Close do it.
//
// Errors: ErrInvalidArgument for bad params (a Rank not below the engine's ranks, an address
// that is not ipv4:port, an OnFailure other than TransferFailed or TransferFailedFinish,
// MaxInflightBytes or TimeoutMs 0); ErrUnsupported for a libpkv built without UCX or a CUDA
// engine; ErrDevice when UCX failed (the address cannot be listened on, memory cannot be
// registered: the message has UCX's).
func (eng *Engine) NewAgent(p *AgentParams) (*Agent, error) {
	if p == nil {
		d, err := DefaultAgentParams()
		if err != nil {
			return nil, err
		}
		p = &d
	} else if !p.initialized {
		return nil, fmt.Errorf("%w: this AgentParams was not made by pkv.DefaultAgentParams() (a "+
			"struct literal has none of them): start from it, or pass nil", ErrUninitialized)
	}
	if strings.IndexByte(p.ListenAddress, 0) >= 0 {
		return nil, invalid("NewAgent: ListenAddress %q holds a NUL byte", p.ListenAddress)
	}
	var m cMem
	defer m.free() // pkv keeps no pointer of the params
	raw := (*cAgentParams)(m.alloc(unsafe.Sizeof(cAgentParams{})))
	*raw = cAgentParams{StructSize: uint32(unsafe.Sizeof(cAgentParams{})), Rank: p.Rank,
		ListenAddress: uintptr(unsafe.Pointer(m.cString(p.ListenAddress))),
		TimeoutMs:     p.TimeoutMs, OnFailure: uint32(p.OnFailure),
		MaxInflightBytes: p.MaxInflightBytes}
	eng.mu.Lock()
	defer eng.mu.Unlock()
	if eng.e == nil {
		return nil, ErrClosed
	}
	var a *C.pkv_agent
	if err := check(func() C.pkv_status {
		return C.pkv_agent_create(eng.e, (*C.pkv_agent_params)(unsafe.Pointer(raw)), &a)
	}); err != nil {
		return nil, err
	}
	h := &agentHandle{a: a}
	if eng.agents == nil {
		eng.agents = map[*agentHandle]struct{}{}
	}
	eng.agents[h] = struct{}{}
	ag := &Agent{h: h, eng: eng}
	runtime.SetFinalizer(ag, (*Agent).Close)
	return ag, nil
}

// Engine is the agent's engine.
func (ag *Agent) Engine() *Engine { return ag.eng }

// Close ends the agent (pkv_agent_destroy): every pull in flight fails first (its receiving
// request ends with AgentParams.OnFailure, a served hold FAILED, once its reads are cancelled),
// then its peers are disconnected. Idempotent; later calls return ErrClosed.
func (ag *Agent) Close() error {
	if ag.h.close() {
		runtime.SetFinalizer(ag, nil)
		ag.eng.mu.Lock()
		delete(ag.eng.agents, ag.h)
		ag.eng.mu.Unlock()
	}
	return nil
}

// close destroys the handle once; it says whether this call did.
func (h *agentHandle) close() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.a == nil {
		return false
	}
	C.pkv_agent_destroy(h.a)
	h.a = nil
	return true
}

// call runs fn on the open handle under the mutex; a failure carries pkv_last_error's message
// (an agent's calls have no engine message).
func (ag *Agent) call(fn func(*C.pkv_agent) C.pkv_status) error {
	h := ag.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.a == nil {
		return ErrClosed
	}
	return check(func() C.pkv_status { return fn(h.a) })
}

// Address is the address the agent listens on, "ipv4:port" (pkv_agent_address), its port
// resolved when AgentParams.ListenAddress asked for a free one: what a peer's Connect takes.
//
// Errors: ErrState when it does not listen (AgentParams.ListenAddress "").
func (ag *Agent) Address() (string, error) {
	var buf [64]C.char
	err := ag.call(func(a *C.pkv_agent) C.pkv_status {
		return C.pkv_agent_address(a, &buf[0], C.uint32_t(len(buf)))
	})
	if err != nil {
		return "", err
	}
	return C.GoString(&buf[0]), nil
}

// Connect connects to the agent listening at address ("ipv4:port", a peer's Address) and waits
// for the handshake, up to AgentParams.TimeoutMs (pkv_agent_connect); it returns the peer's id
// for Pull. The listening agent must be progressed meanwhile (in another process, or another
// goroutine's Progress loop). A peer whose layout fingerprint differs is refused on both sides
// (AgentStats.FingerprintMismatches).
//
// Errors: ErrInvalidArgument for an address not ipv4:port, or fingerprints that differ (the
// message says where); ErrDevice for no connection (nobody listens there, the handshake timed
// out, UCX failed).
func (ag *Agent) Connect(address string) (uint32, error) {
	if strings.IndexByte(address, 0) >= 0 {
		return 0, invalid("Connect: address %q holds a NUL byte", address)
	}
	c := C.CString(address)
	defer C.free(unsafe.Pointer(c))
	var peer C.uint32_t
	err := ag.call(func(a *C.pkv_agent) C.pkv_status { return C.pkv_agent_connect(a, c, &peer) })
	if err != nil {
		return 0, err
	}
	return uint32(peer), nil
}

// Pull starts pulling peer's held sequence remoteSeq (an id of the peer's engine) into local,
// a receiving request of the agent's engine (Engine.DrainReceiving): its blocks
// SeqInfo.RemoteFirstBlock .. + RemoteNumBlocks - 1, and with state layers its state
// (pkv_agent_pull). It ends in Progress, which reports it; a pull that cannot finish (the peer
// gone, remoteSeq not held, the timeout) ends local with AgentParams.OnFailure and the hold
// FAILED, nothing half-written used.
//
// Errors: ErrInvalidArgument for no peer `peer`, or local nil or of another engine;
// ErrNotFound for no sequence local; ErrState when local is not receiving, a pull into it is in
// flight, or the peer is gone.
func (ag *Agent) Pull(peer uint32, remoteSeq uint64, local *Sequence) error {
	if local == nil {
		return invalid("Pull: local is nil")
	}
	if local.Engine != ag.eng {
		return invalid("Pull: local (sequence %d) is not a sequence of the agent's engine", local.ID)
	}
	return ag.call(func(a *C.pkv_agent) C.pkv_status {
		return C.pkv_agent_pull(a, C.uint32_t(peer), C.uint64_t(remoteSeq), C.uint64_t(local.ID))
	})
}

// Progress moves things along (pkv_agent_progress): accepts peers, answers their pulls, issues
// and completes reads, ends pulls (Engine.ReceiveEnd / Engine.HoldEnd on the engine, under its
// lock) and fails those past their timeout. It waits up to waitMs for something to happen (0:
// returns at once) and returns the pulls that ended, served ones included (nil when none).
func (ag *Agent) Progress(waitMs uint32) ([]AgentCompletion, error) {
	var out []AgentCompletion
	buf := make([]cAgentCompletion, 64)
	for {
		var got C.uint32_t
		err := ag.call(func(a *C.pkv_agent) C.pkv_status {
			return C.pkv_agent_progress(a, C.uint32_t(waitMs),
				(*C.pkv_agent_completion)(unsafe.Pointer(&buf[0])), C.uint32_t(len(buf)), &got)
		})
		if err != nil {
			return out, err
		}
		for _, c := range buf[:got] {
			out = append(out, AgentCompletion{Seq: &Sequence{Engine: ag.eng, ID: c.Seq},
				Outcome: TransferOutcome(c.Outcome), Served: c.Served != 0, Bytes: c.Bytes})
		}
		if int(got) < len(buf) {
			return out, nil
		}
		waitMs = 0 // more wait: take them now
	}
}

// Stats are the agent's counters now (pkv_agent_stats_get).
func (ag *Agent) Stats() (AgentStats, error) {
	raw := cAgentStats{StructSize: uint32(unsafe.Sizeof(cAgentStats{}))}
	err := ag.call(func(a *C.pkv_agent) C.pkv_status {
		return C.pkv_agent_stats_get(a, (*C.pkv_agent_stats)(unsafe.Pointer(&raw)))
	})
	if err != nil {
		return AgentStats{}, err
	}
	return AgentStats{NumPeers: raw.NumPeers, PullsInFlight: raw.PullsInFlight,
		PullsDone: raw.PullsDone, PullsFailed: raw.PullsFailed, ServedDone: raw.ServedDone,
		ServedFailed: raw.ServedFailed, BytesPulled: raw.BytesPulled,
		BytesServed: raw.BytesServed, FingerprintMismatches: raw.FingerprintMismatches}, nil
}
