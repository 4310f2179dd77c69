package pkv

// #include <pkv/pkv.h>
import "C"

import (
	"math"
	"unsafe"
)

// Ranks (pkv 0.10, DESIGN.md §10). A rank is a tensor-parallel head shard (TPRank), a pipeline
// stage (PPRank: its layers), or both: rank = PPRank*TPSize + TPRank. EngineParams.Ranks
// RanksAll makes one engine hold every rank's pool (TPSize x PPSize of them) and decide for all:
// Batch.Rank gives a rank's handle, whose Attention runs that rank's heads on its pool. Across
// processes, the decider (RanksOne) exports each step's plan (Batch.ExportPlan) and every other
// rank's RanksPool engine imports it (Engine.ImportPlan) to run its share.

// numRanks is TPSize x PPSize (a PPSize of 0 is 1): the length of RankDeviceIDs.
func numRanks(tpSize, ppSize uint32) int {
	if ppSize == 0 {
		ppSize = 1
	}
	return int(tpSize) * int(ppSize)
}

// Rank is rank rank's handle of this batch (pkv_batch_rank, pkv 0.10) on an engine of
// EngineParams.Ranks RanksAll. Its Attention (and AttentionU16, AttentionRaw, the indexer's and
// sparse MLA's calls, PlanGraph) runs on that rank's pool with that rank's heads: q and out
// [tokens][NumQHeads/TPSize][HeadDim], k and v [tokens][its kv heads][HeadDim], as an engine of
// TPRank rank; on such an engine Attention of the batch itself is ErrInvalidArgument. Its view
// (NumTokens, Positions, ...) is the batch's, and End, Commit and Abort on it end the batch,
// every rank's. It is valid while the batch is open: after that its calls return ErrClosed. On
// an engine of one rank, rank 0 is the batch itself.
//
// Errors: ErrInvalidArgument for a rank not below the engine's ranks, or b a rank's handle
// already; ErrClosed after the batch ended.
func (b *Batch) Rank(rank int) (*Batch, error) {
	if rank < 0 || uint64(rank) > math.MaxUint32 {
		return nil, invalid("Rank: rank %d is not a rank (0 to TPSize x PPSize - 1)", rank)
	}
	r := &Batch{engine: b.engine, view: b.view, fromStep: b.fromStep, of: b, rank: rank}
	err := b.call(func(p *C.pkv_batch) C.pkv_status {
		return C.pkv_batch_rank(p, C.uint32_t(rank), &r.b)
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// RankIndex is the rank of a rank's handle (Batch.Rank); -1 for a batch itself.
func (b *Batch) RankIndex() int {
	if b.of == nil {
		return -1
	}
	return b.rank
}

// ExportPlan is this step's plan as bytes (pkv_batch_export_plan, pkv 0.10), for the RanksPool
// engines of other processes (Engine.ImportPlan): the batch's view and its block copies, with
// a version, the engine's shape, a step number (the engine's exported plans counted from 0)
// and a checksum. The host carries the bytes (a pipe, shared memory, an NCCL broadcast); every
// export of one batch returns the same plan.
//
// Errors: ErrState on an engine of RanksPool (its batches are imported); ErrClosed after the
// batch ended.
func (b *Batch) ExportPlan() ([]byte, error) {
	var out []byte
	err := b.call(func(p *C.pkv_batch) C.pkv_status {
		var n C.uint64_t
		if s := C.pkv_batch_export_plan(p, nil, 0, &n); s != 0 {
			return s
		}
		out = make([]byte, int(n))
		if n == 0 {
			return 0
		}
		return C.pkv_batch_export_plan(p, unsafe.Pointer(&out[0]), n, &n)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ImportPlan opens the batch a decider exported (Batch.ExportPlan; pkv_plan_import, pkv 0.10)
// on this engine of EngineParams.Ranks RanksPool, made with the decider's parameters (NumBlocks
// and HostNumBlocks included) and this process's TPRank and PPRank. The batch runs this rank's
// heads of its stage's layers (Attention); End or Abort it (the decider's batch is the one that
// commits). Plans come in the order they were exported, each once; a refused plan changes
// nothing.
//
// Errors: ErrState for a plan out of order (a stale one, or one ahead of the next), while a
// batch is open, or on an engine that is not of RanksPool; ErrInvalidArgument for bytes that
// are no plan of this engine's shape (damaged, cut, another version, another shape: the field
// named).
func (eng *Engine) ImportPlan(plan []byte) (*Batch, error) {
	var ptr unsafe.Pointer
	if len(plan) > 0 {
		ptr = unsafe.Pointer(&plan[0])
	}
	eng.mu.Lock()
	defer eng.mu.Unlock()
	b := &Batch{engine: eng}
	b.view.StructSize = uint32(unsafe.Sizeof(b.view))
	err := eng.callLocked(func(e *C.pkv_engine) C.pkv_status {
		s := C.pkv_plan_import(e, ptr, C.uint64_t(len(plan)), &b.b)
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

// RankPoolInfo is rank rank's pool (pkv_rank_pool_info, pkv 0.10) on an engine of RanksAll, as
// PoolInfo (which is rank 0's): Rank, NumRanks, DeviceID (-1 on the CPU), TPRank, PPRank, and
// its stage's layers FirstLayer .. EndLayer-1, whose K and V the pool holds.
//
// Errors: ErrInvalidArgument for a rank not below NumRanks.
func (eng *Engine) RankPoolInfo(rank int) (PoolInfo, error) {
	var p PoolInfo
	if rank < 0 || uint64(rank) > math.MaxUint32 {
		return p, invalid("RankPoolInfo: rank %d is not a rank (0 to NumRanks - 1)", rank)
	}
	raw := cPoolInfo{StructSize: uint32(unsafe.Sizeof(cPoolInfo{}))}
	err := eng.call(func(e *C.pkv_engine) C.pkv_status {
		out := (*C.struct_pkv_pool_info)(unsafe.Pointer(&raw))
		return C.pkv_rank_pool_info(e, C.uint32_t(rank), out)
	})
	p.fromC(&raw)
	return p, err
}

// SetRankStream sets rank rank's CUDA stream (pkv_engine_set_rank_stream, pkv 0.10; 0: the
// default stream), on that rank's device; SetStream on an engine of several ranks takes 0 only.
//
// Errors: ErrInvalidArgument for a rank not below NumRanks, or a stream other than 0 on a CPU
// engine.
func (eng *Engine) SetRankStream(rank int, cudaStream uintptr) error {
	if rank < 0 || uint64(rank) > math.MaxUint32 {
		return invalid("SetRankStream: rank %d is not a rank (0 to NumRanks - 1)", rank)
	}
	return eng.call(func(e *C.pkv_engine) C.pkv_status {
		stream := *(*unsafe.Pointer)(unsafe.Pointer(&cudaStream))
		return C.pkv_engine_set_rank_stream(e, C.uint32_t(rank), stream)
	})
}
