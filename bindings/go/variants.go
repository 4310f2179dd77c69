package pkv

// #include <stdlib.h>
// #include <pkv/pkv.h>
import "C"

import (
	"fmt"
	"unsafe"
)

// HFConfigLayerWindows is each layer's sliding window (0 = full attention) of a Hugging Face
// config.json (pkv_hf_config_layer_windows: layer_types, sliding_window_pattern, Gemma 2's
// alternation, use_sliding_window with max_window_layers, or one window for every layer).
// ParamsFromHFConfig reads them too (into LayerWindows or SlidingWindow).
func HFConfigLayerWindows(configJSON []byte) ([]uint32, error) {
	text := C.CBytes(configJSON)
	defer C.free(text)
	var n C.uint32_t
	var out []uint32
	err := check(func() C.pkv_status {
		s := C.pkv_hf_config_layer_windows((*C.char)(text), C.size_t(len(configJSON)), nil, 0, &n)
		if s != 0 || n == 0 {
			return s
		}
		out = make([]uint32, n)
		return C.pkv_hf_config_layer_windows((*C.char)(text), C.size_t(len(configJSON)),
			(*C.uint32_t)(unsafe.Pointer(&out[0])), n, &n)
	})
	if err != nil {
		return nil, err
	}
	if out == nil {
		out = []uint32{}
	}
	return out, nil
}

// KVGroups is how the layers are grouped for the pool (pkv_kv_groups, DESIGN.md §12): groups of
// GroupLayers layers of one window each, full-attention groups first.
type KVGroups struct {
	GroupLayers uint32   // layers a block holds (K and V): NumLayers with one group
	GroupWindow []uint32 // [groups]: each group's window, 0 = full attention
	LayerGroup  []uint32 // [NumLayers]: each layer's group
	LayerSlot   []uint32 // [NumLayers]: each layer's place in its group's blocks
}

// KVGroupsOf groups the layers of p (its LayerWindows, or SlidingWindow for every layer) as an
// engine of p would (pkv_kv_groups); p is validated as by NewEngine.
func KVGroupsOf(p EngineParams) (KVGroups, error) {
	var g KVGroups
	c, err := newCParams(&p)
	if err != nil {
		return g, err
	}
	defer c.free()
	var layers C.uint32_t
	err = check(func() C.pkv_status {
		var n C.uint32_t
		if s := C.pkv_kv_groups(c.c, nil, nil, nil, 0, &n, &layers); s != 0 {
			return s
		}
		g.GroupWindow = make([]uint32, n)
		g.LayerGroup = make([]uint32, p.NumLayers)
		g.LayerSlot = make([]uint32, p.NumLayers)
		return C.pkv_kv_groups(c.c, u32Ptr(g.LayerGroup), u32Ptr(g.LayerSlot), u32Ptr(g.GroupWindow), n, &n, &layers)
	})
	g.GroupLayers = uint32(layers)
	return g, err
}

// KVGroups is how the engine's layers are grouped (KVGroupsOf its parameters).
func (eng *Engine) KVGroups() (KVGroups, error) { return KVGroupsOf(eng.params) }

// LayerWindows are the engine's per-layer windows (a copy), nil when it has none
// (EngineParams.SlidingWindow applies to every layer).
func (eng *Engine) LayerWindows() []uint32 { return eng.Params().LayerWindows }

// SetKVScales sets an fp8 cache's scales of layer (KVDType DTypeFP8E4M3 / DTypeFP8E5M2): k and
// v have one per kv head of this rank each (finite, > 0; 1.0 until set), before the first
// sequence (pkv_set_kv_scales). An MLA engine's k is the latent's one scale and v may be nil
// (NULL: there is no V); other engines refuse a nil v. With LayerSpecs (pkv 0.5) each layer has
// its own kv heads, a K = V layer's v may be nil (its V is its K) and a shared layer has none
// (it reads its source's codes with the source's scales). ErrState once a sequence was made;
// ErrInvalidArgument for a cache that is not fp8.
func (eng *Engine) SetKVScales(layer uint32, k, v []float32) error {
	heads := eng.kvHeads
	if eng.layers != nil && int(layer) < len(eng.layers) {
		heads = eng.layers[layer].kvHeads
	}
	if len(k) != heads || (v != nil && len(v) != heads) {
		return &Error{Status: StatusInvalidArgument, Message: fmt.Sprintf(
			"SetKVScales: %d k and %d v scales, layer %d has %d kv heads per rank", len(k), len(v), layer, heads)}
	}
	var pv *C.float
	if v != nil {
		pv = (*C.float)(unsafe.Pointer(&v[0]))
	}
	return eng.call(func(e *C.pkv_engine) C.pkv_status {
		return C.pkv_set_kv_scales(e, C.uint32_t(layer), (*C.float)(unsafe.Pointer(&k[0])), pv)
	})
}

// GroupBlockTable is the sequence's block table in KV group `group`
// (pkv_seq_group_block_table): -1 where a windowed group gave back a block no later token's
// window reaches. Group 0's is BlockTable's.
func (s *Sequence) GroupBlockTable(group uint32) ([]int32, error) {
	return s.ints(func(e *C.pkv_engine, id C.uint64_t, out *C.int32_t, c C.uint32_t, n *C.uint32_t) C.pkv_status {
		return C.pkv_seq_group_block_table(e, id, C.uint32_t(group), out, c, n)
	})
}

// NumKVGroups is the batch's KV groups (1 without windows; 0 from a library older than 0.2).
func (b *Batch) NumKVGroups() int { return int(b.view.NumKVGroups) }

// GroupSlotMapping is every KV group's slot mapping, [NumKVGroups][NumTokens] (group 0's is
// SlotMapping's); layer l uses its group's (KVGroups).
func (b *Batch) GroupSlotMapping() ([]int64, error) {
	return copyInts[int64](b, b.view.GroupSlotMapping, b.NumKVGroups()*b.NumTokens())
}

// GroupBlockTables is every KV group's padded block tables,
// [NumKVGroups][NumSeqs][MaxBlocksPerSeq]; a windowed group's hold -1 for blocks it gave back.
func (b *Batch) GroupBlockTables() ([]int32, error) {
	return copyInts[int32](b, b.view.GroupBlockTables, b.NumKVGroups()*b.NumSeqs()*int(b.view.MaxBlocksPerSeq))
}

func u32Ptr(s []uint32) *C.uint32_t {
	if len(s) == 0 {
		return nil
	}
	return (*C.uint32_t)(unsafe.Pointer(&s[0]))
}
