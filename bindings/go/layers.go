package pkv

// The cache described per layer (pkv 0.5): EngineParams.LayerSpecs (pkv_layer_spec), what each
// KV group costs (KVGroupInfoOf), where each layer of an engine's pool is (Engine.LayerInfo),
// attention sinks (Engine.SetAttentionSinks) and a config.json read into specs
// (ParamsFromHFConfigLayers).

// #include <stdlib.h>
// #include <pkv/pkv.h>
import "C"

import (
	"fmt"
	"unsafe"
)

// SlidingLayer is a layer attending to its last window keys, its own included.
func SlidingLayer(window uint32) LayerSpec {
	return LayerSpec{Attention: AttentionSliding, Window: window}
}

// ChunkedLayer is a layer attending to the keys of its own chunk-token chunk (Llama 4).
func ChunkedLayer(chunk uint32) LayerSpec {
	return LayerSpec{Attention: AttentionChunked, Window: chunk}
}

// SharedLayer is a layer with no cache of its own, reading source's (Gemma 3n / 4): give it
// source's Attention and Window too.
func SharedLayer(source uint32) LayerSpec {
	return LayerSpec{Kind: LayerShared, SourceLayer: source}
}

// layerSpecsOf copies n specs of size bytes each from C memory at a (a library's specs may be
// larger than this binding's: each is read at its stride, this binding's fields only).
func layerSpecsOf(a uintptr, size, n uint32) []LayerSpec {
	stride := uintptr(size)
	if stride == 0 {
		stride = unsafe.Sizeof(cLayerSpec{})
	}
	read := unsafe.Sizeof(cLayerSpec{})
	if stride < read {
		read = stride
	}
	out := make([]LayerSpec, n)
	for i := range out {
		var c cLayerSpec
		src := unsafe.Slice((*byte)(unsafe.Add(addr(a), uintptr(i)*stride)), read)
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&c)), unsafe.Sizeof(c)), src)
		out[i].fromC(&c)
	}
	return out
}

// ParamsFromHFConfigLayers is ParamsFromHFConfig per layer
// (pkv_engine_params_from_hf_config_layers): p with the model of a Hugging Face config.json,
// and LayerSpecs when its layers differ (windows, sinks, soft-caps, heads, K = V, shared layers,
// chunks: gpt-oss, Gemma 2/3/3n/4, Llama 4); nil LayerSpecs when the flat fields describe every
// layer. LayerWindows is nil (windows are in the specs). On error p is returned unchanged.
func ParamsFromHFConfigLayers(p EngineParams, configJSON []byte) (EngineParams, error) {
	in := p
	in.LayerWindows, in.LayerSpecs = nil, nil
	c, err := newCParams(&in)
	if err != nil {
		return p, err
	}
	defer c.free()
	text := C.CBytes(configJSON)
	defer C.free(text)
	size := C.uint32_t(unsafe.Sizeof(cLayerSpec{}))
	var n C.uint32_t
	err = check(func() C.pkv_status { // the length first: specs NULL with cap 0
		return C.pkv_engine_params_from_hf_config_layers(c.c, (*C.char)(text), C.size_t(len(configJSON)),
			nil, size, 0, &n)
	})
	if err != nil {
		return p, err
	}
	specs := (*C.pkv_layer_spec)(c.mem.alloc(uintptr(n) * uintptr(size)))
	err = check(func() C.pkv_status {
		return C.pkv_engine_params_from_hf_config_layers(c.c, (*C.char)(text), C.size_t(len(configJSON)),
			specs, size, n, &n)
	})
	if err != nil {
		return p, err
	}
	raw := (*cEngineParams)(unsafe.Pointer(c.c))
	out := in
	out.fromC(raw)
	if raw.LayerSpecs != 0 {
		out.LayerSpecs = layerSpecsOf(raw.LayerSpecs, raw.LayerSpecSize, raw.NumLayers)
	}
	return out, nil
}

// KVGroupInfoOf is group group of p's layers and its bytes (pkv_kv_group_info); p is validated
// as by NewEngine. KVGroupsOf says how many groups there are.
func KVGroupInfoOf(p EngineParams, group int) (KVGroupInfo, error) {
	var g KVGroupInfo
	c, err := newCParams(&p)
	if err != nil {
		return g, err
	}
	defer c.free()
	raw := cKVGroupInfo{StructSize: uint32(unsafe.Sizeof(cKVGroupInfo{}))}
	err = check(func() C.pkv_status {
		return C.pkv_kv_group_info(c.c, C.uint32_t(group), (*C.struct_pkv_kv_group_info)(unsafe.Pointer(&raw)))
	})
	g.fromC(&raw)
	return g, err
}

// KVGroupInfos is every group's KVGroupInfoOf, in group order.
func KVGroupInfos(p EngineParams) ([]KVGroupInfo, error) {
	groups, err := KVGroupsOf(p)
	if err != nil {
		return nil, err
	}
	out := make([]KVGroupInfo, len(groups.GroupWindow))
	for g := range out {
		if out[g], err = KVGroupInfoOf(p, g); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// LayerInfo is layer layer of the engine's pool (pkv_layer_info): its spec resolved, and where
// its K and V are. Layer l's K of token t of block b, kv head h, is element b*BlockStride +
// t*TokenStride + h*HeadStride from KBase (V from VBase, tokens VTokenStride apart and heads
// VHeadDim). The bases are addresses (device ones on CUDA), valid while the engine is open.
func (eng *Engine) LayerInfo(layer int) (LayerInfo, error) {
	var l LayerInfo
	raw := cLayerInfo{StructSize: uint32(unsafe.Sizeof(cLayerInfo{}))}
	err := eng.call(func(e *C.pkv_engine) C.pkv_status {
		return C.pkv_layer_info(e, C.uint32_t(layer), (*C.struct_pkv_layer_info)(unsafe.Pointer(&raw)))
	})
	l.fromC(&raw)
	return l, err
}

// SetAttentionSinks sets a layer's attention sinks (pkv_set_attention_sinks): one finite logit
// per q head of this rank (NumQHeads / TPSize), for a layer whose spec has Sinks, before the
// first sequence (ErrState after). Each joins its head's softmax denominator and adds nothing
// to the output.
func (eng *Engine) SetAttentionSinks(layer int, sinks []float32) error {
	heads := int(eng.params.NumQHeads / eng.params.TPSize) // TPSize >= 1 in an engine's params
	if len(sinks) != heads {
		return invalid("SetAttentionSinks: %d sinks, the engine has %d q heads per rank: give one per "+
			"q head", len(sinks), heads)
	}
	return eng.call(func(e *C.pkv_engine) C.pkv_status {
		return C.pkv_set_attention_sinks(e, C.uint32_t(layer), (*C.float)(unsafe.Pointer(&sinks[0])),
			C.uint32_t(len(sinks)))
	})
}

// layerShapes are each layer's attentionShape, from pkv_layer_info.
func (eng *Engine) layerShapes() ([]attentionShape, error) {
	p := &eng.params
	qHeads := int(p.NumQHeads / p.TPSize)
	out := make([]attentionShape, p.NumLayers)
	for layer := range out {
		l, err := eng.LayerInfo(layer)
		if err != nil {
			return nil, err
		}
		kvH, hd, vd := int(l.KVHeads), int(l.HeadDim), int(l.VHeadDim)
		s := attentionShape{dtype: p.DType, device: p.Device, q: qHeads * hd, kv: kvH * hd, v: kvH * vd,
			out: qHeads * vd, args: kvBoth, kvHeads: kvH, layer: layer}
		s.qDims = fmt.Sprintf("[%d q heads per rank][head_dim %d] (layer %d)", qHeads, hd, layer)
		s.kvDims = fmt.Sprintf("[%d kv heads per rank][head_dim %d] (layer %d)", kvH, hd, layer)
		s.vDims = fmt.Sprintf("[%d kv heads per rank][v_head_dim %d] (layer %d)", kvH, vd, layer)
		s.oDims = fmt.Sprintf("[%d q heads per rank][v_head_dim %d] (layer %d)", qHeads, vd, layer)
		s.index = indexerShape{dim: int(l.IndexHeadDim), heads: int(l.IndexNHeads), topK: int(l.IndexTopk)}
		switch {
		case l.Kind == LayerState:
			s.args = kvState
		case l.Kind == LayerShared:
			s.args = kvNone
		case l.Kind == LayerMLA:
			s.args, s.mla = kvKOnly, true
		case l.KEqV:
			s.args = kvKOnly
		}
		out[layer] = s
	}
	return out, nil
}
