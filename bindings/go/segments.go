package pkv

// #include <pkv/pkv.h>
import "C"

import (
	"math"
	"unsafe"
)

// Block descriptors (pkv 0.11, DESIGN.md §10): what a transport moves blocks by. Two engines of
// equal LayoutFingerprint list segments of equal bytes in the same order, so copying segment i
// to segment i moves blocks from one engine to the other.

// Segment is one contiguous piece of KV (pkv_segment): Bytes bytes at Base (device memory on a
// CUDA pool, host memory for the host tier and a CPU pool). A block a windowed group gave back
// is Base 0, Bytes 0.
type Segment struct {
	Base  uintptr
	Bytes uint64
}

// segments fills a variable-size pkv_segment output: asks the count, then copies, both under
// the engine's lock.
func (eng *Engine) segments(get func(*C.pkv_engine, *C.pkv_segment, C.uint32_t,
	*C.uint32_t) C.pkv_status) ([]Segment, error) {
	var raw []cSegment
	err := eng.call(func(e *C.pkv_engine) C.pkv_status {
		var n C.uint32_t
		if st := get(e, nil, 0, &n); st != 0 {
			return st
		}
		raw = make([]cSegment, n)
		var out *C.pkv_segment
		if n > 0 {
			out = (*C.pkv_segment)(unsafe.Pointer(&raw[0]))
		}
		st := get(e, out, n, &n)
		raw = raw[:n]
		return st
	})
	if err != nil {
		return nil, err
	}
	segs := make([]Segment, len(raw))
	for i, s := range raw {
		segs[i] = Segment{Base: s.Base, Bytes: s.Bytes}
	}
	return segs, nil
}

func checkRank(call string, rank int) error {
	if rank < 0 || uint64(rank) > math.MaxUint32 {
		return invalid("%s: rank %d is not a rank (0 to NumRanks - 1)", call, rank)
	}
	return nil
}

// BlockSegments are the segments holding the KV of block ids blocks of tier (TierDevice: the
// pool; TierHost: the host tier) on rank rank (pkv_block_segments; 0 on an engine of one rank):
// for each block in order, each of its pool's layers (PoolInfo.NumLayers), K then V (MLA: the
// latent alone); the same count for every block of an engine.
//
// Errors: ErrInvalidArgument for a tier other than TierDevice or TierHost, TierHost on an engine
// without a host tier, a block id outside the tier, or a rank not below the engine's ranks.
func (eng *Engine) BlockSegments(rank int, tier Tier, blocks []int32) ([]Segment, error) {
	if err := checkRank("BlockSegments", rank); err != nil {
		return nil, err
	}
	if uint64(len(blocks)) > math.MaxUint32 {
		return nil, invalid("BlockSegments: %d blocks", len(blocks))
	}
	return eng.segments(func(e *C.pkv_engine, out *C.pkv_segment, c C.uint32_t,
		n *C.uint32_t) C.pkv_status {
		return C.pkv_block_segments(e, C.uint32_t(rank), C.uint32_t(tier), int32Ptr(blocks),
			C.uint32_t(len(blocks)), out, c, n)
	})
}

// SeqSegments are the segments of running sequence seq's blocks first .. first+n-1 on rank rank
// (pkv_seq_segments): for each block index in order, each KV group in order, that group's
// block's segments as BlockSegments gives them. A block a windowed group gave back gives as many
// Segments of Base 0 and Bytes 0, so two engines of one layout list each token range at the same
// positions.
//
// Errors: ErrInvalidArgument for a range past seq's blocks (SeqInfo.NumBlocks) or a rank not
// below the engine's ranks; ErrNotFound for no such sequence; ErrState when seq holds no blocks
// of the pool (waiting, preempted or swapped out).
func (eng *Engine) SeqSegments(rank int, seq *Sequence, first, n uint32) ([]Segment, error) {
	if err := checkRank("SeqSegments", rank); err != nil {
		return nil, err
	}
	if seq == nil {
		return nil, invalid("SeqSegments: seq is nil")
	}
	return eng.segments(func(e *C.pkv_engine, out *C.pkv_segment, c C.uint32_t,
		count *C.uint32_t) C.pkv_status {
		return C.pkv_seq_segments(e, C.uint32_t(rank), C.uint64_t(seq.ID), C.uint32_t(first),
			C.uint32_t(n), out, c, count)
	})
}

// LayoutFingerprint is rank rank's layout fingerprint (pkv_layout_fingerprint): SHA-256 over
// what decides what a block's segments hold and where (the model's shape and dtypes, fp8 scales,
// the block size, the layers and groups, the ranks), not over how many blocks either tier has.
// Engines of equal fingerprints can move blocks segment by segment.
//
// Errors: ErrInvalidArgument for a rank not below the engine's ranks.
func (eng *Engine) LayoutFingerprint(rank int) ([32]byte, error) {
	var fp [32]byte
	if err := checkRank("LayoutFingerprint", rank); err != nil {
		return fp, err
	}
	err := eng.call(func(e *C.pkv_engine) C.pkv_status {
		return C.pkv_layout_fingerprint(e, C.uint32_t(rank), (*C.uint8_t)(unsafe.Pointer(&fp[0])))
	})
	return fp, err
}
