package pkv

// #include <pkv/pkv.h>
import "C"

import (
	"math"
	"unsafe"
)

// KV transfers between engines (pkv 0.12, DESIGN.md §10): disaggregated prefill and decode. A
// producer engine holds a computed sequence's blocks (Engine.Hold, or a request's
// RequestParams.HoldOnFinish) while a transport reads them (Engine.SeqSegments,
// Engine.SeqStateSegment); a consumer engine admits a request whose first
// RequestParams.NumRemoteTokens prompt tokens' KV comes from the producer: Step reserves its
// blocks and leaves it RECEIVING (Engine.DrainReceiving lists it, SeqInfo.RemoteFirstBlock and
// RemoteNumBlocks say which blocks wait), the transport writes them, and Engine.ReceiveEnd
// lets it run. pkv moves no bytes itself: the host's transport does, between engines of equal
// LayoutFingerprint. SeqInfo.Transfer is TransferNone, TransferHolding or TransferReceiving;
// Stats count holds (NumHeldSeqs .. NumHoldsRefused) and fills (NumReceivingRequests ..
// ReceivedTokens).

// TransferNoTimeout is a hold's timeout (Engine.Hold's timeoutMs, RequestParams.HoldTimeoutMs)
// that never ends it (pkv.h's UINT32_MAX); 0 is TransferTimeoutDefaultMs.
const TransferNoTimeout uint32 = math.MaxUint32

// Hold holds pkv_allocate sequence seq for a transfer out (pkv_hold): it stops running and keeps
// its blocks (and state working slot) untouched until HoldEnd, its timeout (timeoutMs after this
// call on the engine's clock; 0 = TransferTimeoutDefaultMs, TransferNoTimeout = none) or the
// engine's Close; then it is finished, holds nothing, and Release ends it. Meanwhile
// Engine.SeqSegments and Engine.SeqStateSegment give its bytes, its sealed blocks stay in the
// prefix cache, and Release is ErrState. A request of Submit holds when it finishes instead
// (RequestParams.HoldOnFinish).
//
// Errors: ErrNotFound for no such sequence; ErrState when seq is not running, is in the open
// batch, has uncomputed tokens, is held already or is a request; ErrNoSpace when its blocks would
// pass EngineParams.MaxHeldBlocks (nothing changed); ErrUnsupported for a timeout other than
// TransferNoTimeout on an engine of one rank of several.
func (eng *Engine) Hold(seq *Sequence, timeoutMs uint32) error {
	if seq == nil {
		return invalid("Hold: seq is nil")
	}
	return eng.call(func(e *C.pkv_engine) C.pkv_status {
		return C.pkv_hold(e, C.uint64_t(seq.ID), C.uint32_t(timeoutMs))
	})
}

// HoldEnd ends seq's hold, the transport done with its bytes (pkv_hold_end): outcome TransferDone
// or TransferFailed (Stats.NumHoldsDone, NumHoldsFailed). Its blocks go back (sealed ones stay
// cached) and it is finished: Release it.
//
// Errors: ErrInvalidArgument for an outcome other than TransferDone or TransferFailed;
// ErrNotFound for no such sequence; ErrState when seq holds nothing for a transfer (never held, or
// the hold ended or timed out).
func (eng *Engine) HoldEnd(seq *Sequence, outcome TransferOutcome) error {
	if seq == nil {
		return invalid("HoldEnd: seq is nil")
	}
	return eng.call(func(e *C.pkv_engine) C.pkv_status {
		return C.pkv_hold_end(e, C.uint64_t(seq.ID), C.uint32_t(outcome))
	})
}

// DrainReceiving returns the requests that began receiving since the last call
// (pkv_drain_receiving), each listed once: Step admitted them past their local prefix hit and
// they wait, TransferReceiving, for their remote KV. SeqInfo says which blocks
// (RemoteFirstBlock, RemoteNumBlocks), Engine.SeqSegments gives those blocks' segments and
// Engine.SeqStateSegment where the recurrent state goes. The block copies queued before it were
// done by that Step (on CUDA: queued on the engine's stream; once the stream reached them, the
// transport may write). End each with Engine.ReceiveEnd; until then it never runs, is never
// preempted and Release is ErrState. A request whose hit covers its NumRemoteTokens runs as any
// other, never listed.
func (eng *Engine) DrainReceiving() ([]*Sequence, error) {
	return eng.drain(func(e *C.pkv_engine, out *C.uint64_t, c C.uint32_t,
		n *C.uint32_t) C.pkv_status {
		return C.pkv_drain_receiving(e, out, c, n)
	})
}

// drain reads a list of sequence ids pkv hands out once (pkv_drain_finished,
// pkv_drain_receiving), calling again while a call fills the buffer.
func (eng *Engine) drain(get func(*C.pkv_engine, *C.uint64_t, C.uint32_t,
	*C.uint32_t) C.pkv_status) ([]*Sequence, error) {
	var out []*Sequence
	buf := make([]uint64, 256)
	for {
		var got C.uint32_t
		err := eng.call(func(e *C.pkv_engine) C.pkv_status {
			return get(e, (*C.uint64_t)(unsafe.Pointer(&buf[0])), C.uint32_t(len(buf)), &got)
		})
		if err != nil {
			return out, err
		}
		for _, id := range buf[:got] {
			out = append(out, &Sequence{Engine: eng, ID: id})
		}
		if int(got) < len(buf) {
			return out, nil
		}
	}
}

// ReceiveEnd ends receiving request seq's remote fill (pkv_receive_end). TransferDone: its first
// NumRemoteTokens tokens are computed, their full blocks sealed into the prefix cache as a
// step's would be, and it runs on from there at the next Step. TransferFailed: nothing the
// transfer wrote is used; its blocks past the hit go back unsealed and it waits, preempted, to
// compute its prompt itself. TransferFailedFinish: it gives everything back and finishes
// (FinishTransferFailed; DrainFinished lists it). Stats.NumReceivesDone, NumReceivesFailed.
//
// Errors: ErrInvalidArgument for an outcome not a TransferOutcome; ErrNotFound for no such
// sequence; ErrState when seq is not receiving.
func (eng *Engine) ReceiveEnd(seq *Sequence, outcome TransferOutcome) error {
	if seq == nil {
		return invalid("ReceiveEnd: seq is nil")
	}
	return eng.call(func(e *C.pkv_engine) C.pkv_status {
		return C.pkv_receive_end(e, C.uint64_t(seq.ID), C.uint32_t(outcome))
	})
}

// SeqStateSegment is where seq's recurrent state is on rank rank (pkv_seq_state_segment): its
// state working slot (PoolInfo.StateSlotBytes at PoolInfo.StateBase + slot * StateSlotBytes)
// while it is running, held or receiving: what a transport moves beside its blocks' segments.
// An engine without state layers gives Segment{}: it has no state to move.
//
// Errors: ErrInvalidArgument for a rank not below the engine's ranks; ErrNotFound for no such
// sequence; ErrState when seq holds no working slot (waiting, preempted, swapped out or
// finished).
func (eng *Engine) SeqStateSegment(rank int, seq *Sequence) (Segment, error) {
	if err := checkRank("SeqStateSegment", rank); err != nil {
		return Segment{}, err
	}
	if seq == nil {
		return Segment{}, invalid("SeqStateSegment: seq is nil")
	}
	var raw cSegment
	err := eng.call(func(e *C.pkv_engine) C.pkv_status {
		return C.pkv_seq_state_segment(e, C.uint32_t(rank), C.uint64_t(seq.ID),
			(*C.pkv_segment)(unsafe.Pointer(&raw)))
	})
	if err != nil {
		return Segment{}, err
	}
	return Segment{Base: raw.Base, Bytes: raw.Bytes}, nil
}
