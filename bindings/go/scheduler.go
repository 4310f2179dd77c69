package pkv

// #include <stdlib.h>
// #include <pkv/pkv.h>
import "C"

import (
	"fmt"
	"unsafe"
)

// DefaultRequestParams are pkv's defaults for a request (pkv_request_params_init): every
// RequestParams starts here.
func DefaultRequestParams() (RequestParams, error) {
	var p RequestParams
	if libraryError != nil {
		return p, libraryError
	}
	raw := cRequestParams{}
	err := check(func() C.pkv_status {
		return C.pkv_request_params_init((*C.pkv_request_params)(unsafe.Pointer(&raw)), C.uint32_t(unsafe.Sizeof(raw)))
	})
	if err == nil {
		p.fromC(&raw)
		p.initialized = true
	}
	return p, err
}

// Submit queues a request for the scheduler (pkv_submit); rp nil = DefaultRequestParams, salt
// may be nil.
func (eng *Engine) Submit(prompt []int32, rp *RequestParams, salt []byte) (*Sequence, error) {
	r := rp
	if r == nil {
		d, err := DefaultRequestParams()
		if err != nil {
			return nil, err
		}
		r = &d
	} else if !r.initialized {
		return nil, fmt.Errorf("%w: this RequestParams was not made by pkv.DefaultRequestParams() (a "+
			"struct literal has none of them): start from it, or pass nil", ErrUninitialized)
	}
	raw := (*cRequestParams)(C.calloc(1, C.size_t(unsafe.Sizeof(cRequestParams{}))))
	defer C.free(unsafe.Pointer(raw))
	raw.StructSize = uint32(unsafe.Sizeof(*raw))
	r.toC(raw)
	if salt != nil {
		c := C.CBytes(salt)
		defer C.free(c)
		raw.CacheSalt, raw.CacheSaltLen = uintptr(c), uint32(len(salt))
	}
	var keys cMem
	defer keys.free()
	raw.ExtraKeys, raw.NumExtraKeys = cExtraKeys(&keys, r.ExtraKeys), uint32(len(r.ExtraKeys))
	raw.ExtraKeySize = uint32(unsafe.Sizeof(cExtraKey{}))
	var id C.uint64_t
	err := eng.call(func(e *C.pkv_engine) C.pkv_status {
		return C.pkv_submit(e, int32Ptr(prompt), C.uint32_t(len(prompt)),
			(*C.pkv_request_params)(unsafe.Pointer(raw)), &id)
	})
	if err != nil {
		return nil, err
	}
	return &Sequence{Engine: eng, ID: uint64(id)}, nil
}

// Step is the scheduler's next batch (pkv_step), or nil when nothing is to run. Run it, then
// Commit the sampled tokens, or Abort it (End refuses it). ErrState: a batch is open.
func (eng *Engine) Step() (*Batch, error) {
	eng.mu.Lock()
	defer eng.mu.Unlock()
	b := &Batch{engine: eng, fromStep: true}
	b.view.StructSize = uint32(unsafe.Sizeof(b.view))
	err := eng.callLocked(func(e *C.pkv_engine) C.pkv_status {
		s := C.pkv_step(e, &b.b)
		if s == 0 && b.b != nil {
			if s = C.pkv_batch_info(b.b, (*C.pkv_batch_view)(unsafe.Pointer(&b.view))); s != 0 {
				C.pkv_batch_abort(b.b)
			}
		}
		return s
	})
	if err != nil || b.b == nil {
		return nil, eng.opening(err)
	}
	eng.opened(b)
	return b, nil
}

// Commit ends a batch of Step (pkv_commit): sampled[i] is the token sampled for the batch's
// sequence i (read where SampleRows[i] != -1; nil when none samples). On failure the batch
// stays open, to commit again or Abort.
func (b *Batch) Commit(sampled []int32) error {
	if b.of != nil {
		return b.of.Commit(sampled) // a rank's handle commits its batch, every rank's
	}
	eng := b.engine
	eng.mu.Lock()
	defer eng.mu.Unlock()
	if !b.live() {
		return ErrClosed
	}
	err := eng.callLocked(func(*C.pkv_engine) C.pkv_status { return C.pkv_commit(b.b, int32Ptr(sampled)) })
	if err == nil {
		b.ended()
	}
	return err
}

// SampleRows is, per sequence, the row whose output is sampled, or -1 (a prompt chunk).
func (b *Batch) SampleRows() ([]int32, error) {
	return copyInts[int32](b, b.view.SampleRows, b.NumSeqs())
}

// DrainFinished returns the requests finished since the last call (release them when read; one
// held for a transfer, RequestParams.HoldOnFinish, after Engine.HoldEnd).
func (eng *Engine) DrainFinished() ([]*Sequence, error) {
	return eng.drain(func(e *C.pkv_engine, out *C.uint64_t, c C.uint32_t,
		n *C.uint32_t) C.pkv_status {
		return C.pkv_drain_finished(e, out, c, n)
	})
}

// DrainKVEvents returns up to max queued KV events (EnableKVEvents), oldest first; an event's
// Medium is the tier its block was stored in or removed from (TierDevice, or TierHost for an
// offloaded block), TierNone for EventAllCleared and EventOverflow. pkv writes them at the size
// of this binding's pkv_kv_event (56 bytes): a newer libpkv fills only the fields it has, an
// older one zeroes those it does not know.
func (eng *Engine) DrainKVEvents(max int) ([]KVEvent, error) {
	if max <= 0 {
		return nil, nil
	}
	raw := make([]cKVEvent, max)
	size := C.uint32_t(unsafe.Sizeof(cKVEvent{}))
	var got C.uint32_t
	err := eng.call(func(e *C.pkv_engine) C.pkv_status {
		return C.pkv_drain_kv_events_sized(e, (*C.pkv_kv_event)(unsafe.Pointer(&raw[0])), size, C.uint32_t(max), &got)
	})
	out := make([]KVEvent, got)
	for i := range out {
		out[i].fromC(&raw[i])
	}
	return out, err
}

// ResetPrefixCache evicts every cached (unreferenced) block from the prefix cache.
func (eng *Engine) ResetPrefixCache() error {
	return eng.call(func(e *C.pkv_engine) C.pkv_status { return C.pkv_reset_prefix_cache(e) })
}
