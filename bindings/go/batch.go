package pkv

// #include <pkv/pkv.h>
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"unsafe"
)

// Batch is one forward step's plan (pkv_batch). Call Attention for every layer, then end it:
// a batch of BeginBatch with End (the new tokens become computed), a batch of Engine.Step with
// Commit (End refuses it: ErrState), either with Abort (nothing becomes computed). Typical use:
//
//	b, err := engine.BeginBatch(seqs, nil)
//	defer b.Abort() // a no-op once ended
//	... b.Attention(layer, q, k, v, out) ...
//	err = b.End()
//
// A batch that failed to end stays open (pkv keeps it), so it can still be ended or aborted.
// One that becomes unreachable while open is aborted by the garbage collector (a finalizer),
// so a dropped batch never leaves its engine refusing the next one; defer Abort to free it at
// once.
type Batch struct {
	engine   *Engine
	b        *C.pkv_batch
	gen      uint64
	view     cBatchView
	fromStep bool   // made by Engine.Step: ends with Commit, not End
	of       *Batch // a rank's handle (Batch.Rank, pkv 0.10): the batch it is of; else nil
	rank     int    // a rank's handle: its rank
}

// opened records b as the engine's open batch (caller holds the engine's mutex).
func (eng *Engine) opened(b *Batch) {
	eng.batchGen++
	eng.batch, b.gen = b.b, eng.batchGen
	runtime.SetFinalizer(b, (*Batch).Abort)
}

// opening is the error of a call that would open a batch (BeginBatch, Step): while one is open,
// pkv's ErrState with how a Go program ends it (caller holds the engine's mutex).
func (eng *Engine) opening(err error) error {
	var pe *Error
	if eng.batch == nil || !errors.As(err, &pe) || pe.Status != StatusState {
		return err
	}
	return &Error{Status: StatusState, Message: pe.Message + " (in Go: the open Batch ends with " +
		"Commit or Abort if Step made it, End or Abort if BeginBatch did; a Batch no longer " +
		"referenced is aborted when the garbage collector finds it: defer b.Abort() ends it at once)"}
}

// ended records that pkv freed b (caller holds the engine's mutex).
func (b *Batch) ended() {
	b.engine.batch = nil
	runtime.SetFinalizer(b, nil)
}

// BeginBatch plans one step over seqs (pkv_batch_begin); numNewTokens nil = all uncomputed
// tokens of each.
func (eng *Engine) BeginBatch(seqs []*Sequence, numNewTokens []uint32) (*Batch, error) {
	ids := make([]uint64, len(seqs))
	for i, s := range seqs {
		ids[i] = s.ID
	}
	return eng.BeginBatchIDs(ids, numNewTokens)
}

// BeginBatchIDs is BeginBatch by sequence ids.
func (eng *Engine) BeginBatchIDs(ids []uint64, numNewTokens []uint32) (*Batch, error) {
	if numNewTokens != nil && len(numNewTokens) != len(ids) {
		return nil, &Error{Status: StatusInvalidArgument, Message: "numNewTokens needs one count per sequence"}
	}
	var ptrIDs *C.uint64_t
	var ptrCounts *C.uint32_t
	if len(ids) > 0 {
		ptrIDs = (*C.uint64_t)(unsafe.Pointer(&ids[0]))
	}
	if len(numNewTokens) > 0 {
		ptrCounts = (*C.uint32_t)(unsafe.Pointer(&numNewTokens[0]))
	}
	eng.mu.Lock()
	defer eng.mu.Unlock()
	b := &Batch{engine: eng}
	b.view.StructSize = uint32(unsafe.Sizeof(b.view))
	err := eng.callLocked(func(e *C.pkv_engine) C.pkv_status {
		s := C.pkv_batch_begin(e, ptrIDs, ptrCounts, C.uint32_t(len(ids)), &b.b)
		if s == 0 {
			s = C.pkv_batch_info(b.b, (*C.pkv_batch_view)(unsafe.Pointer(&b.view)))
			if s != 0 {
				C.pkv_batch_abort(b.b)
			}
		}
		return s
	})
	if err != nil {
		return nil, eng.opening(err)
	}
	eng.opened(b)
	return b, nil
}

// live is true while the batch is open (caller holds the engine's mutex); a rank's handle is
// live while its batch is.
func (b *Batch) live() bool {
	if b.of != nil {
		return b.of.live()
	}
	return b.engine.e != nil && b.engine.batch == b.b && b.engine.batchGen == b.gen
}

// call runs fn on the open batch under the engine's mutex.
func (b *Batch) call(fn func(*C.pkv_batch) C.pkv_status) error {
	eng := b.engine
	eng.mu.Lock()
	defer eng.mu.Unlock()
	if !b.live() {
		return ErrClosed
	}
	return eng.callLocked(func(*C.pkv_engine) C.pkv_status { return fn(b.b) })
}

// View is the raw plan: counts, and C addresses valid while the batch is open. The methods
// below return copies of its arrays.
func (b *Batch) View() BatchView {
	var v BatchView
	v.fromC(&b.view)
	return v
}

// NumSeqs and NumTokens are the batch's sequences and new tokens.
func (b *Batch) NumSeqs() int   { return int(b.view.NumSeqs) }
func (b *Batch) NumTokens() int { return int(b.view.NumTokens) }

func copyInts[T int32 | int64 | uint64 | CopyKind](b *Batch, a uintptr, n int) ([]T, error) {
	out := make([]T, n)
	err := b.call(func(*C.pkv_batch) C.pkv_status {
		if n > 0 {
			copy(out, unsafe.Slice((*T)(addr(a)), n))
		}
		return 0
	})
	return out, err
}

func (b *Batch) SeqIDs() ([]uint64, error) { return copyInts[uint64](b, b.view.SeqIDs, b.NumSeqs()) }
func (b *Batch) QueryStart() ([]int32, error) {
	return copyInts[int32](b, b.view.QueryStart, b.NumSeqs()+1)
}
func (b *Batch) Positions() ([]int32, error) {
	return copyInts[int32](b, b.view.Positions, b.NumTokens())
}
func (b *Batch) SlotMapping() ([]int64, error) {
	return copyInts[int64](b, b.view.SlotMapping, b.NumTokens())
}
func (b *Batch) ContextLens() ([]int32, error) {
	return copyInts[int32](b, b.view.ContextLens, b.NumSeqs())
}
func (b *Batch) BlockIndptr() ([]int32, error) {
	return copyInts[int32](b, b.view.BlockIndptr, b.NumSeqs()+1)
}
func (b *Batch) BlockIndices() ([]int32, error) {
	indptr, err := b.BlockIndptr()
	if err != nil {
		return nil, err
	}
	return copyInts[int32](b, b.view.BlockIndices, int(indptr[b.NumSeqs()]))
}
func (b *Batch) LastBlockLen() ([]int32, error) {
	return copyInts[int32](b, b.view.LastBlockLen, b.NumSeqs())
}
func (b *Batch) BlockTables() ([]int32, error) {
	return copyInts[int32](b, b.view.BlockTables, b.NumSeqs()*int(b.view.MaxBlocksPerSeq))
}
func (b *Batch) CopySrc() ([]int32, error) {
	return copyInts[int32](b, b.view.CopySrc, int(b.view.NumCopies))
}
func (b *Batch) CopyDst() ([]int32, error) {
	return copyInts[int32](b, b.view.CopyDst, int(b.view.NumCopies))
}

// CopyKind is, per listed copy, what it moves: CopyCOW, CopySwapOut, CopySwapIn, CopyOffload (a
// cached block evicted from the pool, kept in the host tier) or CopyLoad (a prefix hit on a block
// held in the host tier only); with state layers (pkv 0.6) CopyState (slot to slot), CopyStateOut
// (a state slot to a host state slot at PoolInfo.HostStateBase: a swap-out, or a checkpoint
// offloaded) or CopyStateIn (a host state slot back to a working slot: a swap-in, or an offloaded
// checkpoint restored). Empty from a library older than 0.2, whose copies are all COW.
func (b *Batch) CopyKind() ([]CopyKind, error) {
	n := int(b.view.NumCopies)
	if b.view.CopyKind == 0 {
		n = 0
	}
	return copyInts[CopyKind](b, b.view.CopyKind, n)
}

// Copy does the batch's listed block copies now (pkv_batch_copy), unless they are done already:
// for hosts that run no Attention but let pkv move the blocks (the first Attention does them).
func (b *Batch) Copy() error {
	return b.call(func(p *C.pkv_batch) C.pkv_status { return C.pkv_batch_copy(p) })
}

// Attention runs pkv_attention for one layer of a CPU engine of DType DTypeF32 (an f16 or bf16
// engine's values go to AttentionU16). q, out: [tokens][q heads per rank][HeadDim]; k, v:
// [tokens][kv heads per rank][HeadDim], tokens = NumTokens(). A slice of another element type
// than the engine's dtype, or shorter than its shape (longer is fine: only the first elements
// are used), is refused with ErrInvalidArgument before pkv is called; a CUDA engine with
// ErrUnsupported (its buffers are device memory: AttentionRaw).
//
// An MLA engine (EngineParams.KVLayout KVLayoutMLA) takes the absorbed form, with W =
// KVLoraRank + QKRopeHeadDim (its HeadDim): q [tokens][q heads per rank][W], k the new tokens'
// latents [tokens][W], v nil (NULL: V is the latents' first KVLoraRank values; a v is
// ErrInvalidArgument), out [tokens][q heads per rank][KVLoraRank].
//
// With EngineParams.LayerSpecs each layer has its own shape (Engine.LayerInfo): k [tokens][its
// kv heads][its HeadDim], v [tokens][its kv heads][its VHeadDim], out [tokens][q heads per
// rank][its VHeadDim]; a K = V layer (LayerSpec.KEqV) takes v nil, and a shared layer
// (LayerShared) k and v nil: it reads its source layer's cache, written earlier in the step.
func (b *Batch) Attention(layer int, q, k, v, out []float32) error {
	return attention(b, "Attention", layer, q, k, v, out)
}

// AttentionU16 is Attention for an f16 or bf16 engine: the values' raw 16-bit patterns (an f32
// engine's values go to Attention).
func (b *Batch) AttentionU16(layer int, q, k, v, out []uint16) error {
	return attention(b, "AttentionU16", layer, q, k, v, out)
}

// AttentionRaw runs pkv_attention on raw addresses (device memory on a CUDA engine), unchecked;
// v is nil on an MLA engine.
func (b *Batch) AttentionRaw(layer int, q, k, v, out unsafe.Pointer) error {
	return b.call(func(p *C.pkv_batch) C.pkv_status { return C.pkv_attention(p, C.uint32_t(layer), q, k, v, out) })
}

// attentionShape is what pkv_attention reads and writes per new token, in elements, and how to
// say it in an error.
type attentionShape struct {
	dtype                       DType
	device                      Device
	q, kv, v, out               int    // elements per token of q, of k, of v, of out
	qDims, kvDims, vDims, oDims string // their shapes per token, e.g. "[4 q heads per rank][head_dim 16]"
	mla                         bool
	args                        kvArgs
	kvHeads                     int // per rank: SetKVScales' length
	layer                       int // with layer specs: the layer (for a state layer's refusal)
	index                       indexerShape
}

// kvArgs are which of k and v a layer's call takes.
type kvArgs int

const (
	kvBoth  kvArgs = iota // an attention layer: k and v
	kvKOnly               // V is K (KEqV) or the latents' first values (MLA): k, v nil
	kvNone                // a shared layer: k and v nil
	kvState               // a state layer (pkv 0.6): no attention at all
)

func attentionShapeOf(p *EngineParams, kvHeadsPerRank int) attentionShape {
	qHeads := int(p.NumQHeads / p.TPSize)
	s := attentionShape{dtype: p.DType, device: p.Device, q: qHeads * int(p.HeadDim),
		kv: kvHeadsPerRank * int(p.HeadDim), out: qHeads * int(p.HeadDim), kvHeads: kvHeadsPerRank}
	s.qDims = fmt.Sprintf("[%d q heads per rank][head_dim %d]", qHeads, p.HeadDim)
	s.kvDims = fmt.Sprintf("[%d kv heads per rank][head_dim %d]", kvHeadsPerRank, p.HeadDim)
	s.v, s.vDims, s.oDims = s.kv, s.kvDims, s.qDims
	if p.KVLayout == KVLayoutMLA {
		s.mla, s.out, s.args = true, qHeads*int(p.KVLoraRank), kvKOnly
		s.kvDims = fmt.Sprintf("[latent width %d]", p.HeadDim)
		s.oDims = fmt.Sprintf("[%d q heads per rank][kv_lora_rank %d]", qHeads, p.KVLoraRank)
	}
	return s
}

// checkAttention refuses slices of T that do not fit the engine: its device, its dtype, and n
// tokens of each argument's shape.
func checkAttention[T float32 | uint16](s *attentionShape, call string, n int, q, k, v, out []T) error {
	if err := checkHostSlices[T](s, call); err != nil {
		return err
	}
	if err := checkKV(s, call, k == nil, v == nil); err != nil {
		return err
	}
	args := []struct {
		name       string
		got, width int
		dims       string
	}{{"q", len(q), s.q, s.qDims}, {"k", len(k), s.kv, s.kvDims}, {"v", len(v), s.v, s.vDims},
		{"out", len(out), s.out, s.oDims}}
	for _, a := range args {
		if (a.name == "v" && v == nil) || (a.name == "k" && k == nil) {
			continue
		}
		if a.got < n*a.width || a.got == 0 {
			return invalid("%s: %s holds %d elements, the batch needs %d: [%d tokens]%s of %v",
				call, a.name, a.got, n*a.width, n, a.dims, s.dtype)
		}
	}
	return nil
}

// checkHostSlices refuses Go slices of T on an engine that cannot take them: a CUDA engine (its
// buffers are device memory: the call's Raw form), or one of another dtype (f32 slices for
// f32, []uint16 bit patterns for f16 and bf16: the call's U16 form).
func checkHostSlices[T float32 | uint16](s *attentionShape, call string) error {
	base := strings.TrimSuffix(call, "U16")
	if s.device != DeviceCPU {
		return &Error{Status: StatusUnsupported, Message: fmt.Sprintf("%s: Go slices are host "+
			"memory and this engine's Device is %v: pass device addresses to %sRaw", call, s.device, base)}
	}
	var zero T
	if _, f32 := any(zero).(float32); f32 != (s.dtype == DTypeF32) {
		if f32 {
			return invalid("%s: the engine's dtype is %v, its values are 16 bits: pass their bit "+
				"patterns as []uint16 to %sU16, not []float32", call, s.dtype, base)
		}
		return invalid("%s: the engine's dtype is %v: pass []float32 to %s, not []uint16",
			call, s.dtype, base)
	}
	return nil
}

// checkKV refuses a nil k or v where the layer reads one, and one where it takes none.
func checkKV(s *attentionShape, call string, noK, noV bool) error {
	switch {
	case s.args == kvState:
		return stateLayerRefusal(call, s.layer)
	case s.args == kvNone && (!noK || !noV):
		return invalid("%s: a shared layer reads its source layer's cache and writes nothing: "+
			"pass k and v nil", call)
	case s.args != kvNone && noK:
		return invalid("%s: k is nil: give k [tokens]%s (only a shared layer takes none)", call, s.kvDims)
	case s.args == kvBoth && noV:
		return invalid("%s: v is nil: only an MLA engine or a K = V layer takes no V; give v [tokens]%s",
			call, s.vDims)
	case s.args == kvKOnly && !noV && s.mla:
		return invalid("%s: an MLA engine takes no V (V is the latents' first kv_lora_rank values): "+
			"pass v nil", call)
	case s.args == kvKOnly && !noV:
		return invalid("%s: a K = V layer takes no V (V is K, stored once): pass v nil", call)
	}
	return nil
}

// attention checks the slices against the layer's shape and calls pkv_attention; a nil k or v
// is NULL (MLA's and K = V layers' v, shared layers' k and v).
func attention[T float32 | uint16](b *Batch, call string, layer int, q, k, v, out []T) error {
	s := &b.engine.shape
	if layers := b.engine.layers; layers != nil {
		if layer < 0 || layer >= len(layers) {
			return invalid("%s: layer %d is not below NumLayers %d", call, layer, len(layers))
		}
		s = &layers[layer]
	}
	if err := checkAttention(s, call, b.NumTokens(), q, k, v, out); err != nil {
		return err
	}
	first := func(x []T) unsafe.Pointer {
		if x == nil {
			return nil
		}
		return unsafe.Pointer(&x[0])
	}
	return b.AttentionRaw(layer, first(q), first(k), first(v), first(out))
}

// End: the step ran; its tokens become computed and full blocks are sealed (pkv_batch_end).
// Frees the batch on success; on failure the batch stays open, to end again or Abort. A batch of
// Engine.Step is refused (ErrState): it ends with Commit, or Abort.
func (b *Batch) End() error {
	if b.of != nil {
		return b.of.End() // a rank's handle ends its batch, every rank's
	}
	eng := b.engine
	eng.mu.Lock()
	defer eng.mu.Unlock()
	if !b.live() {
		return ErrClosed
	}
	err := eng.callLocked(func(*C.pkv_engine) C.pkv_status { return C.pkv_batch_end(b.b) })
	if err == nil {
		b.ended()
		return nil
	}
	var pe *Error
	if b.fromStep && errors.As(err, &pe) && pe.Status == StatusState {
		return &Error{Status: StatusState, Message: "End: this batch came from Engine.Step, which ends " +
			"with Commit(sampled) once the step ran, or Abort() if it did not; the batch is still open (" +
			pe.Message + ")"}
	}
	return err
}

// Abort: the step did not run; nothing becomes computed (pkv_batch_abort). Frees the batch,
// whichever call made it and whatever failed before. A no-op on a batch already ended or
// aborted, or whose engine is closed.
func (b *Batch) Abort() {
	if b.of != nil {
		b.of.Abort()
		return
	}
	eng := b.engine
	eng.mu.Lock()
	defer eng.mu.Unlock()
	if b.live() {
		C.pkv_batch_abort(b.b)
		b.ended()
	}
}
