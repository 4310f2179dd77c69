package pkv

// Sparse attention (pkv 0.7: DeepSeek V3.2, GLM-5; DESIGN.md §14) on an MLA layer with an
// indexer (LayerSpec.IndexHeadDim > 0, IndexedMLALayer), per layer per step, in this order:
//
//	b.IndexerWrite(layer, indexK, 0)                        // the new tokens' indexer keys
//	b.IndexerTopK(layer, indexQ, weights, TopKPositions, top) // each token's IndexTopk positions
//	b.SparseMLAAttention(layer, q, latents, top, out)       // MLA over those keys only
//
// Slices are checked as Attention's are (element type, length) before pkv is called; a layer
// without an indexer is pkv's ErrInvalidArgument, with its message.

// #include <pkv/pkv.h>
import "C"

import (
	"fmt"
	"unsafe"
)

// indexerShape is a layer's indexer (pkv_layer_info's index fields); dim 0: none.
type indexerShape struct{ dim, heads, topK int }

// IndexedMLALayer is an MLA layer with a sparse-attention indexer: keys of dim values in dtype
// (DTypeFP8E4M3, fp8 with one fp32 scale per token, or DTypeBF16), heads indexer query heads,
// topK keys kept per query token (DeepSeek V3.2: 128, DTypeFP8E4M3, 64, 2048).
func IndexedMLALayer(dim uint32, dtype DType, heads, topK uint32) LayerSpec {
	return LayerSpec{Kind: LayerMLA, IndexHeadDim: dim, IndexDType: dtype, IndexNHeads: heads,
		IndexTopk: topK}
}

// IndexerWrite runs pkv_indexer_write on a CPU engine of DType DTypeF32: the new tokens'
// indexer keys k [tokens][IndexHeadDim] into their slots of layer, quantized to the layer's
// IndexDType (fp8: one scale per token, max|x| / 448; flags IndexerScaleUE8M0 rounds it up to a
// power of two). Call it before IndexerTopK reads them.
func (b *Batch) IndexerWrite(layer int, k []float32, flags IndexerFlags) error {
	return indexerWrite(b, "IndexerWrite", layer, k, flags)
}

// IndexerWriteU16 is IndexerWrite for an f16 or bf16 engine: the values' 16-bit patterns.
func (b *Batch) IndexerWriteU16(layer int, k []uint16, flags IndexerFlags) error {
	return indexerWrite(b, "IndexerWriteU16", layer, k, flags)
}

// IndexerWriteRaw runs pkv_indexer_write on a raw address (device memory on CUDA), unchecked.
func (b *Batch) IndexerWriteRaw(layer int, k unsafe.Pointer, flags IndexerFlags) error {
	return b.call(func(p *C.pkv_batch) C.pkv_status {
		return C.pkv_indexer_write(p, C.uint32_t(layer), k, C.uint32_t(flags))
	})
}

// IndexerTopK runs pkv_indexer_topk on a CPU engine of DType DTypeF32: with q [tokens]
// [IndexNHeads][IndexHeadDim] and weights [tokens][IndexNHeads], key s scores the sum over heads
// h of weights[h] * relu(q[h] . key(s)); out [tokens][IndexTopk] gets each token's keys of
// highest score ascending by position (kind TopKSlots: their slots in the layer's KV group),
// then -1 where its context is shorter. Of equal scores the lower position is kept.
func (b *Batch) IndexerTopK(layer int, q, weights []float32, kind TopKKind, out []int32) error {
	return indexerTopK(b, "IndexerTopK", layer, q, weights, kind, out)
}

// IndexerTopKU16 is IndexerTopK for an f16 or bf16 engine: q's 16-bit patterns.
func (b *Batch) IndexerTopKU16(layer int, q []uint16, weights []float32, kind TopKKind, out []int32) error {
	return indexerTopK(b, "IndexerTopKU16", layer, q, weights, kind, out)
}

// IndexerTopKRaw runs pkv_indexer_topk on raw addresses (device memory on CUDA), unchecked.
func (b *Batch) IndexerTopKRaw(layer int, q, weights unsafe.Pointer, kind TopKKind, out unsafe.Pointer) error {
	return b.call(func(p *C.pkv_batch) C.pkv_status {
		return C.pkv_indexer_topk(p, C.uint32_t(layer), q, (*C.float)(weights), C.uint32_t(kind),
			(*C.int32_t)(out))
	})
}

// SparseMLAAttention runs pkv_sparse_mla_attention on a CPU engine of DType DTypeF32:
// Attention's MLA form (q [tokens][q heads per rank][W], k the new tokens' latents [tokens][W],
// out [tokens][q heads per rank][KVLoraRank]) with each token attending over the positions
// indices[t][0 .. IndexTopk) of its sequence only (IndexerTopK's TopKPositions; -1 and
// positions past the token's own are skipped, a token with none left gets out 0).
func (b *Batch) SparseMLAAttention(layer int, q, k []float32, indices []int32, out []float32) error {
	return sparseAttention(b, "SparseMLAAttention", layer, q, k, indices, out)
}

// SparseMLAAttentionU16 is SparseMLAAttention for an f16 or bf16 engine: 16-bit patterns.
func (b *Batch) SparseMLAAttentionU16(layer int, q, k []uint16, indices []int32, out []uint16) error {
	return sparseAttention(b, "SparseMLAAttentionU16", layer, q, k, indices, out)
}

// SparseMLAAttentionRaw runs pkv_sparse_mla_attention on raw addresses (device memory on
// CUDA), unchecked.
func (b *Batch) SparseMLAAttentionRaw(layer int, q, k, indices, out unsafe.Pointer) error {
	return b.call(func(p *C.pkv_batch) C.pkv_status {
		return C.pkv_sparse_mla_attention(p, C.uint32_t(layer), q, k, (*C.int32_t)(indices), out)
	})
}

// indexedLayer is layer's shape for a sparse call, and whether its slices are to be checked:
// not for a layer without an indexer, which pkv refuses by name before it reads any.
func indexedLayer[T float32 | uint16](b *Batch, call string, layer int) (*attentionShape, bool, error) {
	layers := b.engine.layers
	if layer < 0 || layer >= len(layers) {
		if layers == nil { // no layer specs: no indexer anywhere; pkv says so
			return &b.engine.shape, false, nil
		}
		return nil, false, invalid("%s: layer %d is not below NumLayers %d", call, layer, len(layers))
	}
	s := &layers[layer]
	if s.index.dim == 0 {
		return s, false, nil
	}
	return s, true, checkHostSlices[T](s, call)
}

// span is one slice's check: its length against tokens of width elements.
type span struct {
	name       string
	got, width int
	dims, of   string
}

func checkSpans(call string, n int, spans ...span) error {
	for _, a := range spans {
		if a.got < n*a.width || a.got == 0 {
			return invalid("%s: %s holds %d elements, the batch needs %d: [%d tokens]%s of %s",
				call, a.name, a.got, n*a.width, n, a.dims, a.of)
		}
	}
	return nil
}

func indexerWrite[T float32 | uint16](b *Batch, call string, layer int, k []T, flags IndexerFlags) error {
	s, check, err := indexedLayer[T](b, call, layer)
	if err == nil && check {
		err = checkSpans(call, b.NumTokens(), span{"k", len(k), s.index.dim,
			fmt.Sprintf("[index_head_dim %d]", s.index.dim), s.dtype.String()})
	}
	if err != nil {
		return err
	}
	return b.IndexerWriteRaw(layer, firstOf(k), flags)
}

func indexerTopK[T float32 | uint16](b *Batch, call string, layer int, q []T, weights []float32,
	kind TopKKind, out []int32) error {
	s, check, err := indexedLayer[T](b, call, layer)
	if err == nil && check {
		x := s.index
		err = checkSpans(call, b.NumTokens(),
			span{"q", len(q), x.heads * x.dim, fmt.Sprintf("[%d index heads][%d]", x.heads, x.dim), s.dtype.String()},
			span{"weights", len(weights), x.heads, fmt.Sprintf("[%d index heads]", x.heads), "float32"},
			span{"out", len(out), x.topK, fmt.Sprintf("[index_topk %d]", x.topK), "int32"})
	}
	if err != nil {
		return err
	}
	return b.IndexerTopKRaw(layer, firstOf(q), firstOf(weights), kind, firstOf(out))
}

func sparseAttention[T float32 | uint16](b *Batch, call string, layer int, q, k []T, indices []int32,
	out []T) error {
	s, check, err := indexedLayer[T](b, call, layer)
	if err == nil && check {
		err = checkAttention(s, call, b.NumTokens(), q, k, nil, out)
		if err == nil {
			err = checkSpans(call, b.NumTokens(), span{"indices", len(indices), s.index.topK,
				fmt.Sprintf("[index_topk %d]", s.index.topK), "int32"})
		}
	}
	if err != nil {
		return err
	}
	return b.SparseMLAAttentionRaw(layer, firstOf(q), firstOf(k), firstOf(indices), firstOf(out))
}

// firstOf is the address of x's first element; nil (NULL) for an empty slice.
func firstOf[T any](x []T) unsafe.Pointer {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Pointer(&x[0])
}
