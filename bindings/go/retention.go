package pkv

// Retention of cached prefixes (pkv 0.8): the eviction priority a sequence's blocks keep when
// released (AllocateRetained; a request's RequestParams.CachePriority and CacheRetentionMs), a
// prefix's priority set by the host (CacheSetPriority), and pins (CachePin), which hold a
// prefix's blocks until unpinned.

// #include <pkv/pkv.h>
import "C"

import "sync"

// Retention is how long a prefix's blocks stay cached: Priority (CachePriorityMin ..
// CachePriorityMax) orders eviction, the lowest first and least recently released first within
// one; RetentionMs 0 keeps it for good, else it decays to normal (0) that long after the
// block's release. The zero value is normal: plain LRU.
type Retention struct {
	Priority    int32
	RetentionMs uint32
}

// CachePin is a pin of a cached prefix (Engine.CachePin): its blocks are never evicted until
// it is unpinned. Close unpins it once (later Closes do nothing: defer pin.Close()); Unpin
// always asks pkv, so a second Unpin is ErrNotFound.
type CachePin struct {
	Engine    *Engine
	ID        uint64 // never 0, never reused
	NumTokens uint32 // the tokens pinned (0 when nothing of the prefix was cached)

	mu       sync.Mutex
	unpinned bool
}

// Unpin drops the pin (pkv_cache_unpin): its blocks are cached again, with the priority they
// had. ErrNotFound: unpinned already; ErrState: a batch is open (the pin is kept).
func (p *CachePin) Unpin() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	err := p.Engine.CacheUnpin(p.ID)
	if err == nil {
		p.unpinned = true
	}
	return err
}

// Close unpins the pin unless it was unpinned already, or its engine is closed (which ended
// every pin): the io.Closer idiom, never unpinning twice.
func (p *CachePin) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.unpinned {
		return nil
	}
	err := p.Engine.CacheUnpin(p.ID)
	if err == ErrClosed {
		err = nil
	}
	if err == nil {
		p.unpinned = true
	}
	return err
}

// AllocateRetained is AllocateKeyed with a retention (pkv_allocate): the blocks the sequence
// releases (Release, Truncate, Preempt, a window's give-back, a swap-out) keep r; a block
// released by several holders keeps the highest. ErrInvalidArgument: a priority out of range,
// nothing changed.
func (eng *Engine) AllocateRetained(tokens []int32, k SeqKeys, r Retention) (*Sequence, error) {
	var id C.uint64_t
	var cached C.uint32_t
	err := eng.call(func(e *C.pkv_engine) C.pkv_status {
		return withParams(k, r, func(sp *C.pkv_seq_params) C.pkv_status {
			return C.pkv_allocate(e, int32Ptr(tokens), C.uint32_t(len(tokens)), sp, &id, &cached)
		})
	})
	if err != nil {
		return nil, err
	}
	return &Sequence{Engine: eng, ID: uint64(id), NumCachedTokens: uint32(cached)}, nil
}

// CacheSetPriority gives the pool blocks the prefix cache holds of the prefix tokens (its full
// blocks, under k, in every KV group) retention r (pkv_cache_set_priority): cached blocks move
// in eviction order at once, blocks in use keep it for their release. It returns how many
// blocks took it. ErrInvalidArgument (a priority out of range), ErrState (a batch is open):
// nothing changed.
func (eng *Engine) CacheSetPriority(tokens []int32, k SeqKeys, r Retention) (uint32, error) {
	var blocks C.uint32_t
	err := eng.call(func(e *C.pkv_engine) C.pkv_status {
		return withKeys(k, func(sp *C.pkv_seq_params) C.pkv_status {
			return C.pkv_cache_set_priority(e, int32Ptr(tokens), C.uint32_t(len(tokens)), sp,
				C.int32_t(r.Priority), C.uint32_t(r.RetentionMs), &blocks)
		})
	})
	return uint32(blocks), err
}

// CachePin pins the leading cached blocks of the prefix tokens (under k) that the pool holds
// (pkv_cache_pin): never evicted, not free, until the pin is unpinned. All pins together hold
// at most MaxPinnedPercent of the pool: past it, ErrNoSpace (the message gives the numbers;
// nothing changed). ErrState: a batch is open.
func (eng *Engine) CachePin(tokens []int32, k SeqKeys) (*CachePin, error) {
	var id C.uint64_t
	var pinned C.uint32_t
	err := eng.call(func(e *C.pkv_engine) C.pkv_status {
		return withKeys(k, func(sp *C.pkv_seq_params) C.pkv_status {
			return C.pkv_cache_pin(e, int32Ptr(tokens), C.uint32_t(len(tokens)), sp, &id, &pinned)
		})
	})
	if err != nil {
		return nil, err
	}
	return &CachePin{Engine: eng, ID: uint64(id), NumTokens: uint32(pinned)}, nil
}

// CacheUnpin drops a pin by its id (pkv_cache_unpin). ErrNotFound: no such pin (never given,
// or unpinned already); ErrState: a batch is open.
func (eng *Engine) CacheUnpin(id uint64) error {
	return eng.call(func(e *C.pkv_engine) C.pkv_status {
		return C.pkv_cache_unpin(e, C.uint64_t(id))
	})
}
