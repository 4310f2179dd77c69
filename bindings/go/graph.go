package pkv

// #include <pkv/pkv.h>
import "C"

import "math"

// PlanGraph plans this decode step for a CUDA graph (pkv_batch_plan_graph, pkv 0.9; a CUDA
// engine only): a GPU engine's decode step is captured once in a CUDA graph and replayed after
// each later PlanGraph of the same bucket. Call it before the step's first AttentionRaw: it
// queues on the engine's stream the block copies and the batch's arrays, padded to bucket
// sequences, into device buffers at fixed addresses, so every AttentionRaw of the batch
// launches kernels that depend only on the bucket and the layer. Capture those calls
// (cudaStreamBeginCapture on the stream of Engine.SetStream, not the legacy NULL stream) once,
// and replay the graph after each later PlanGraph of the same bucket.
//
// Every sequence must compute one token, and NumSeqs() <= bucket <= EngineParams.MaxNumSeqs.
// Between replays the sequences, their count (up to bucket), lengths and block tables and the
// contents of q, k and v may change; the bucket, the layers and their order, the q, k, v and
// out addresses (bucket rows each) and the stream may not. Eager batches may run between
// replays.
//
// Errors: ErrUnsupported on a CPU engine (it has no CUDA graphs: run Attention as is; the batch
// stays usable) or one with indexer layers; ErrInvalidArgument for a bucket of 0, below
// NumSeqs() or above MaxNumSeqs, or a sequence computing more than one token (a bucket outside
// uint32 is refused before pkv is called); ErrState once an AttentionRaw of the batch ran;
// ErrClosed after the batch ended.
func (b *Batch) PlanGraph(bucket int) error {
	if bucket < 0 || uint64(bucket) > math.MaxUint32 {
		return invalid("PlanGraph: bucket %d is not a sequence count (1 to MaxNumSeqs)", bucket)
	}
	return b.call(func(p *C.pkv_batch) C.pkv_status {
		return C.pkv_batch_plan_graph(p, C.uint32_t(bucket))
	})
}
