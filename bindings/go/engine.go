package pkv

// #include <stdlib.h>
// #include <pkv/pkv.h>
import "C"

import (
	"runtime"
	"sync"
	"unsafe"
)

// Engine is a KV-cache engine (pkv_engine). Close it when done; a closed engine returns
// ErrClosed. Safe for concurrent use: each call runs under the engine's mutex, together with
// reading its error message.
type Engine struct {
	mu     sync.Mutex
	e      *C.pkv_engine
	params EngineParams
	// the open batch, if any (pkv allows one per engine); a Batch is live while it is this one
	batch    *C.pkv_batch
	batchGen uint64
	shape    attentionShape   // what Attention's slices hold per new token
	layers   []attentionShape // each layer's, when the engine has LayerSpecs (else shape)
	kvHeads  int              // per rank: SetKVScales' length
	store    *storeMem        // the store's C parameters and Store handle (NewEngineWithStore)

	// its open agents' handles (NewAgent), closed before it
	agents map[*agentHandle]struct{}
}

// NewEngine creates an engine (pkv_engine_create) of p, which starts from DefaultParams.
func NewEngine(p EngineParams) (*Engine, error) {
	return newEngine(p, nil)
}

func newEngine(p EngineParams, store *storeMem) (*Engine, error) {
	c, err := newCParams(&p)
	if err != nil {
		return nil, err
	}
	defer c.free() // pkv copies what it keeps (windows, publisher) at create
	if store != nil {
		c.c.store = store.params
	}
	var e *C.pkv_engine
	if err := check(func() C.pkv_status { return C.pkv_engine_create(c.c, &e) }); err != nil {
		return nil, err
	}
	eng := &Engine{e: e, store: store}
	runtime.SetFinalizer(eng, (*Engine).Close)
	// C memory: the effective parameters point into the engine
	params := (*cEngineParams)(c.mem.alloc(unsafe.Sizeof(cEngineParams{})))
	params.StructSize = uint32(unsafe.Sizeof(cEngineParams{}))
	budget := cKVBudget{StructSize: uint32(unsafe.Sizeof(cKVBudget{}))}
	err = eng.call(func(e *C.pkv_engine) C.pkv_status {
		if s := C.pkv_engine_params_get(e, rawParams(params)); s != 0 {
			return s
		}
		eng.params = engineParamsOf(params)
		return C.pkv_engine_budget(e, (*C.pkv_kv_budget)(unsafe.Pointer(&budget)))
	})
	if err != nil {
		eng.Close()
		return nil, err
	}
	eng.shape = attentionShapeOf(&eng.params, int(budget.KVHeadsPerRank))
	eng.kvHeads = int(budget.KVHeadsPerRank)
	if eng.params.LayerSpecs == nil && p.LayerSpecs != nil { // the library did not give them back
		eng.params.LayerSpecs = append([]LayerSpec(nil), p.LayerSpecs...)
	}
	if eng.params.LayerSpecs != nil {
		if eng.layers, err = eng.layerShapes(); err != nil {
			eng.Close()
			return nil, err
		}
	}
	return eng, nil
}

// Close destroys the engine, its sequences and any open batch; its open agents are closed first
// (Agent.Close). Idempotent.
func (eng *Engine) Close() error {
	eng.mu.Lock()
	defer eng.mu.Unlock()
	if eng.e != nil {
		for h := range eng.agents { // pkv: the engine must outlive its agents
			h.close()
		}
		eng.agents = nil
		C.pkv_engine_destroy(eng.e) // waits for the store's queued writes
		eng.e, eng.batch = nil, nil
		runtime.SetFinalizer(eng, nil)
		if eng.store != nil {
			eng.store.free() // pkv calls the Store no more (free is idempotent)
		}
	}
	return nil
}

// call runs fn on the engine handle under the mutex; a failure carries the engine's message.
func (eng *Engine) call(fn func(*C.pkv_engine) C.pkv_status) error {
	eng.mu.Lock()
	defer eng.mu.Unlock()
	return eng.callLocked(fn)
}

func (eng *Engine) callLocked(fn func(*C.pkv_engine) C.pkv_status) error {
	if eng.e == nil {
		return ErrClosed
	}
	s := fn(eng.e)
	if s == 0 {
		return nil
	}
	return newError(s, C.pkv_engine_last_error(eng.e))
}

// Params are the engine's effective parameters (num_blocks and device resolved), a copy.
func (eng *Engine) Params() EngineParams {
	p := eng.params
	if p.LayerWindows != nil {
		p.LayerWindows = append([]uint32(nil), p.LayerWindows...)
	}
	if p.LayerSpecs != nil {
		p.LayerSpecs = append([]LayerSpec(nil), p.LayerSpecs...)
	}
	if p.EventPublisher != nil {
		pub := *p.EventPublisher
		p.EventPublisher = &pub
	}
	if p.RankDeviceIDs != nil {
		p.RankDeviceIDs = append([]int32(nil), p.RankDeviceIDs...)
	}
	return p
}

// Stats are the engine's counters (pkv_engine_stats).
func (eng *Engine) Stats() (Stats, error) {
	var s Stats
	raw := cStats{StructSize: uint32(unsafe.Sizeof(cStats{}))}
	err := eng.call(func(e *C.pkv_engine) C.pkv_status {
		return C.pkv_engine_stats(e, (*C.pkv_stats)(unsafe.Pointer(&raw)))
	})
	s.fromC(&raw)
	return s, err
}

// Budget is the engine pool's KV budget (pkv_engine_budget).
func (eng *Engine) Budget() (KVBudget, error) {
	var b KVBudget
	raw := cKVBudget{StructSize: uint32(unsafe.Sizeof(cKVBudget{}))}
	err := eng.call(func(e *C.pkv_engine) C.pkv_status {
		return C.pkv_engine_budget(e, (*C.pkv_kv_budget)(unsafe.Pointer(&raw)))
	})
	b.fromC(&raw)
	return b, err
}

// PoolInfo says where the pool is (pkv_pool_info), for a host's own kernels. An MLA engine's KBase
// holds the latents, and its VBase and HostVBase are 0 (no V). Layers of unequal bytes (pkv 0.5)
// share pages: NumLayers 1, KBase the first page, BlockStride the page; each layer's K and V are
// where LayerInfo says.
func (eng *Engine) PoolInfo() (PoolInfo, error) {
	var p PoolInfo
	raw := cPoolInfo{StructSize: uint32(unsafe.Sizeof(cPoolInfo{}))}
	err := eng.call(func(e *C.pkv_engine) C.pkv_status {
		return C.pkv_pool_info(e, (*C.struct_pkv_pool_info)(unsafe.Pointer(&raw)))
	})
	p.fromC(&raw) // Kernels: a static string of the library
	return p, err
}

// Check verifies every block-manager invariant (pkv_engine_check): ErrInternal names the first
// one broken.
func (eng *Engine) Check() error {
	return eng.call(func(e *C.pkv_engine) C.pkv_status { return C.pkv_engine_check(e) })
}

// SetStream sets the CUDA stream pkv_attention runs on (0: the default stream).
func (eng *Engine) SetStream(cudaStream uintptr) error {
	return eng.call(func(e *C.pkv_engine) C.pkv_status {
		return C.pkv_engine_set_stream(e, *(*unsafe.Pointer)(unsafe.Pointer(&cudaStream)))
	})
}

// Sequence is a sequence of an Engine.
type Sequence struct {
	Engine *Engine
	ID     uint64
	// NumCachedTokens are the tokens the prefix cache served at the last admission.
	NumCachedTokens uint32
}

// withSalt calls fn with a pkv_seq_params holding salt in C memory (nil params for no salt).
func withSalt(salt []byte, fn func(*C.pkv_seq_params) C.pkv_status) C.pkv_status {
	if salt == nil {
		return fn(nil)
	}
	var sp C.pkv_seq_params
	C.pkv_seq_params_init(&sp, C.uint32_t(unsafe.Sizeof(sp)))
	sp.cache_salt = C.CBytes(salt)
	defer C.free(sp.cache_salt)
	sp.cache_salt_len = C.uint32_t(len(salt))
	return fn(&sp)
}

// Allocate admits a prompt (pkv_allocate); salt may be nil. ErrNoSpace: nothing changed.
func (eng *Engine) Allocate(tokens []int32, salt []byte) (*Sequence, error) {
	var id C.uint64_t
	var cached C.uint32_t
	err := eng.call(func(e *C.pkv_engine) C.pkv_status {
		return withSalt(salt, func(sp *C.pkv_seq_params) C.pkv_status {
			return C.pkv_allocate(e, int32Ptr(tokens), C.uint32_t(len(tokens)), sp, &id, &cached)
		})
	})
	if err != nil {
		return nil, err
	}
	return &Sequence{Engine: eng, ID: uint64(id), NumCachedTokens: uint32(cached)}, nil
}

// AllocateQuery says how many free blocks Allocate would take now and how many tokens it
// would find cached; it changes nothing.
func (eng *Engine) AllocateQuery(tokens []int32, salt []byte) (numBlocks, numCachedTokens uint32, err error) {
	var blocks, cached C.uint32_t
	err = eng.call(func(e *C.pkv_engine) C.pkv_status {
		return withSalt(salt, func(sp *C.pkv_seq_params) C.pkv_status {
			return C.pkv_allocate_query(e, int32Ptr(tokens), C.uint32_t(len(tokens)), sp, &blocks, &cached)
		})
	})
	return uint32(blocks), uint32(cached), err
}

// Sequence is the Sequence of an existing id (e.g. one read from a Batch).
func (eng *Engine) Sequence(id uint64) *Sequence { return &Sequence{Engine: eng, ID: id} }

// Append reserves slots for more tokens (pkv_append). ErrNoSpace: nothing changed.
func (s *Sequence) Append(tokens ...int32) error {
	return s.Engine.call(func(e *C.pkv_engine) C.pkv_status {
		return C.pkv_append(e, C.uint64_t(s.ID), int32Ptr(tokens), C.uint32_t(len(tokens)))
	})
}

// Fork makes a sequence sharing every block of s (copy-on-write).
func (s *Sequence) Fork() (*Sequence, error) {
	var child C.uint64_t
	err := s.Engine.call(func(e *C.pkv_engine) C.pkv_status { return C.pkv_fork(e, C.uint64_t(s.ID), &child) })
	if err != nil {
		return nil, err
	}
	return &Sequence{Engine: s.Engine, ID: uint64(child), NumCachedTokens: s.NumCachedTokens}, nil
}

// Release ends the sequence (pkv_release).
func (s *Sequence) Release() error {
	return s.Engine.call(func(e *C.pkv_engine) C.pkv_status { return C.pkv_release(e, C.uint64_t(s.ID)) })
}

// Truncate keeps the sequence's first numTokens tokens, 1..len (pkv_truncate): rollback of
// rejected speculative tokens. StatusInvalidArgument outside that range; StatusState in the open
// batch, swapped out, or a request of Submit.
func (s *Sequence) Truncate(numTokens uint32) error {
	return s.Engine.call(func(e *C.pkv_engine) C.pkv_status { return C.pkv_truncate(e, C.uint64_t(s.ID), C.uint32_t(numTokens)) })
}

// Preempt gives back the sequence's blocks, keeping its tokens (pkv_preempt).
func (s *Sequence) Preempt() error {
	return s.Engine.call(func(e *C.pkv_engine) C.pkv_status { return C.pkv_preempt(e, C.uint64_t(s.ID)) })
}

// Resume re-admits a preempted sequence; it returns the tokens found cached.
func (s *Sequence) Resume() (uint32, error) {
	var cached C.uint32_t
	err := s.Engine.call(func(e *C.pkv_engine) C.pkv_status { return C.pkv_resume(e, C.uint64_t(s.ID), &cached) })
	if err == nil {
		s.NumCachedTokens = uint32(cached)
	}
	return uint32(cached), err
}

// SwapOut moves the sequence's KV to the host tier (pkv_swap_out), keeping its tokens and
// computed count; the next batch lists the copies (CopySwapOut; with state layers one
// CopyStateOut of its working state slot to a host state slot). ErrUnsupported: the engine has
// no host tier; ErrNoSpace: too few host blocks or no free host state slot, nothing changed;
// ErrState: not running.
func (s *Sequence) SwapOut() error {
	return s.Engine.call(func(e *C.pkv_engine) C.pkv_status { return C.pkv_swap_out(e, C.uint64_t(s.ID)) })
}

// SwapIn brings a swapped-out sequence's KV back into pool blocks (pkv_swap_in), all or
// nothing; the next batch lists the copies (CopySwapIn; with state layers one CopyStateIn into
// its new working slot). ErrState: not swapped out; ErrNoSpace: too few free blocks or no free
// working state slot, nothing changed.
func (s *Sequence) SwapIn() error {
	return s.Engine.call(func(e *C.pkv_engine) C.pkv_status { return C.pkv_swap_in(e, C.uint64_t(s.ID)) })
}

// Info is the sequence's state (pkv_seq_info).
func (s *Sequence) Info() (SeqInfo, error) {
	var i SeqInfo
	raw := cSeqInfo{StructSize: uint32(unsafe.Sizeof(cSeqInfo{}))}
	err := s.Engine.call(func(e *C.pkv_engine) C.pkv_status {
		return C.pkv_seq_info(e, C.uint64_t(s.ID), (*C.struct_pkv_seq_info)(unsafe.Pointer(&raw)))
	})
	i.fromC(&raw)
	return i, err
}

type int32Getter func(*C.pkv_engine, C.uint64_t, *C.int32_t, C.uint32_t, *C.uint32_t) C.pkv_status

// ints reads a variable-size output: its length, then its values, under one lock.
func (s *Sequence) ints(get int32Getter) ([]int32, error) {
	var out []int32
	err := s.Engine.call(func(e *C.pkv_engine) C.pkv_status {
		var n C.uint32_t
		if st := get(e, C.uint64_t(s.ID), nil, 0, &n); st != 0 {
			return st
		}
		out = make([]int32, n)
		return get(e, C.uint64_t(s.ID), int32Ptr(out), n, &n)
	})
	return out, err
}

// BlockTable is the sequence's physical block ids, in order.
func (s *Sequence) BlockTable() ([]int32, error) {
	return s.ints(func(e *C.pkv_engine, id C.uint64_t, out *C.int32_t, c C.uint32_t, n *C.uint32_t) C.pkv_status {
		return C.pkv_seq_block_table(e, id, out, c, n)
	})
}

// Tokens are the sequence's token ids.
func (s *Sequence) Tokens() ([]int32, error) {
	return s.ints(func(e *C.pkv_engine, id C.uint64_t, out *C.int32_t, c C.uint32_t, n *C.uint32_t) C.pkv_status {
		return C.pkv_seq_tokens(e, id, out, c, n)
	})
}
