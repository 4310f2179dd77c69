package pkv_test

// The cache described per layer (pkv 0.5, issue 27 item 8): an engine from LayerSpecs, each KV
// group's bytes (pkv_kv_group_info), each layer of the pool (pkv_layer_info), Attention per
// layer kind (K = V, shared) and attention sinks (pkv_set_attention_sinks), checked against
// values computed here; a config.json read per layer (pkv_engine_params_from_hf_config_layers).

import (
	"errors"
	"math"
	"reflect"
	"testing"

	"pkv.local/pkv"
)

// mixedSpecs: full, sliding 8, a K = V layer of one kv head of 32, a layer sharing layer 1's.
func mixedSpecs() []pkv.LayerSpec {
	shared := pkv.SharedLayer(1)
	shared.Attention, shared.Window = pkv.AttentionSliding, 8
	return []pkv.LayerSpec{{}, pkv.SlidingLayer(8), {NumKVHeads: 1, HeadDim: 32, KEqV: true}, shared}
}

func mixedParams(t *testing.T) pkv.EngineParams {
	p := smallParams(t)
	p.NumLayers, p.NumBlocks, p.LayerSpecs = 4, 32, mixedSpecs()
	return p
}

func TestLayerSpecsKeptAndChecked(t *testing.T) {
	p := mixedParams(t)
	p.NumLayers = 3
	_, err := pkv.Profile(p)
	expectStatus(t, err, pkv.ErrInvalidArgument)
	expectRefusal(t, err, "LayerSpecs has 4 specs", "NumLayers is 3")
	e := newEngine(t, mixedParams(t))
	if got := e.Params().LayerSpecs; len(got) != 4 || got[3].Kind != pkv.LayerShared || got[3].SourceLayer != 1 {
		t.Fatalf("the engine's specs: %+v", got)
	}
	e.Params().LayerSpecs[0].Window = 99 // a copy: the engine's stay
	if e.Params().LayerSpecs[0].Window != 0 {
		t.Fatal("Params shares its LayerSpecs with the engine")
	}
}

func TestEngineFromLayerSpecs(t *testing.T) {
	b := must(pkv.Profile(mixedParams(t)))
	// f32 K and V of one token: layers 0 and 1 2 heads x 16 each, layer 2 K only, 1 x 32
	if b.NumCachedLayers != 3 || b.ModelBytesPerToken != 2*(2*2*16*4)+32*4 {
		t.Fatalf("budget: %d cached layers, %d bytes per token", b.NumCachedLayers, b.ModelBytesPerToken)
	}
	e := newEngine(t, mixedParams(t))
	l1, l2, l3 := must(e.LayerInfo(1)), must(e.LayerInfo(2)), must(e.LayerInfo(3))
	if l2.Kind != pkv.LayerAttention || l2.KVHeads != 1 || l2.HeadDim != 32 || l2.VHeadDim != 32 ||
		!l2.KEqV || l2.VBase != l2.KBase {
		t.Fatalf("layer 2: %+v", l2)
	}
	if l3.Kind != pkv.LayerShared || l3.SourceLayer != 1 || l3.Group != l1.Group || l3.KBase != l1.KBase ||
		l3.Attention != pkv.AttentionSliding || l3.Window != 8 {
		t.Fatalf("layer 3: %+v (layer 1: %+v)", l3, l1)
	}
	_, err := e.LayerInfo(4)
	expectStatus(t, err, pkv.ErrInvalidArgument)
	// layers of unequal bytes share pages: the pool is one range, each layer's K inside it
	pool := must(e.PoolInfo())
	if pool.NumLayers != 1 || pool.VBase != 0 {
		t.Fatalf("pool of unequal layers: %+v", pool)
	}
	for l := 0; l < 4; l++ {
		if k := must(e.LayerInfo(l)).KBase; k < pool.KBase || k >= pool.KBase+uintptr(pool.BytesPerPool) {
			t.Fatalf("layer %d: %#x outside the pool %#x + %d", l, k, pool.KBase, pool.BytesPerPool)
		}
	}
}

func TestAttentionPerLayerKind(t *testing.T) {
	e := newEngine(t, mixedParams(t))
	s := must(e.Allocate([]int32{1, 2, 3, 4, 5, 6}, nil))
	b := must(e.BeginBatch([]*pkv.Sequence{s}, nil))
	defer b.Abort()
	n := b.NumTokens()
	fill := func(size int, x float32) []float32 {
		v := make([]float32, size)
		for i := range v {
			v[i] = x
		}
		return v
	}
	q16, kv16, out16 := fill(n*64, 0.1), fill(n*32, 0.2), make([]float32, n*64)
	q32, k32, out32 := fill(n*128, 0.1), fill(n*32, 0.3), make([]float32, n*128)
	// refusals name what the layer takes, before pkv is called
	expectRefusal(t, b.Attention(2, q32, k32, k32, out32), "K = V", "pass v nil")
	expectRefusal(t, b.Attention(3, q16, kv16, nil, out16), "shared", "k and v nil")
	expectRefusal(t, b.Attention(2, q16, kv16, nil, out16), "q holds", "head_dim 32")
	expectRefusal(t, b.Attention(0, q16, kv16, nil, out16), "v is nil")
	for layer := 0; layer < 2; layer++ {
		if err := b.Attention(layer, q16, kv16, kv16, out16); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Attention(2, q32, k32, nil, out32); err != nil {
		t.Fatal(err)
	}
	for i, x := range out32 { // V is K: each head's output is the constant key
		if math.Abs(float64(x)-0.3) > 1e-6 {
			t.Fatalf("layer 2 out[%d] = %v, want 0.3", i, x)
		}
	}
	if err := b.Attention(3, q16, nil, nil, out16); err != nil {
		t.Fatal(err)
	}
	for i, x := range out16 { // layer 1's values, read through the shared layer
		if math.Abs(float64(x)-0.2) > 1e-6 {
			t.Fatalf("layer 3 out[%d] = %v, want 0.2", i, x)
		}
	}
	if err := b.End(); err != nil {
		t.Fatal(err)
	}
}

func TestKVGroupInfo(t *testing.T) {
	// equal layers: one group of both, as before 0.5
	g := must(pkv.KVGroupInfos(smallParams(t)))
	if len(g) != 1 || g[0] != (pkv.KVGroupInfo{Attention: pkv.AttentionFull, NumLayers: 2,
		BytesPerToken: 2 * 2 * 2 * 16 * 4}) {
		t.Fatalf("one group: %+v", g)
	}
	p := smallParams(t)
	p.LayerSpecs = []pkv.LayerSpec{{}, pkv.SlidingLayer(8)}
	g = must(pkv.KVGroupInfos(p))
	want := []pkv.KVGroupInfo{{Attention: pkv.AttentionFull, NumLayers: 1, BytesPerToken: 2 * 2 * 16 * 4},
		{Attention: pkv.AttentionSliding, Window: 8, NumLayers: 1, BytesPerToken: 2 * 2 * 16 * 4}}
	if !reflect.DeepEqual(g, want) {
		t.Fatalf("two groups: %+v, want %+v", g, want)
	}
	_, err := pkv.KVGroupInfoOf(p, 2)
	expectStatus(t, err, pkv.ErrInvalidArgument)
}

func TestLayerInfoOfEqualLayers(t *testing.T) {
	e := newEngine(t, smallParams(t))
	pool := must(e.PoolInfo())
	for layer := 0; layer < 2; layer++ {
		l := must(e.LayerInfo(layer))
		if l.Kind != pkv.LayerAttention || l.SourceLayer != uint32(layer) || l.KVHeads != 2 || l.HeadDim != 16 ||
			l.VHeadDim != 16 || l.KEqV || l.Sinks || l.BlockStride != pool.BlockStride ||
			l.TokenStride != pool.TokenStride || l.HeadStride != pool.HeadStride {
			t.Fatalf("layer %d: %+v (pool %+v)", layer, l, pool)
		}
		offset := uintptr(uint64(layer) * pool.LayerStride * 4) // f32 elements
		if l.KBase != pool.KBase+offset || l.VBase != pool.VBase+offset {
			t.Fatalf("layer %d: bases %#x %#x, pool %#x %#x", layer, l.KBase, l.VBase, pool.KBase, pool.VBase)
		}
		if math.Abs(float64(l.SoftmaxScale)-0.25) > 1e-7 {
			t.Fatalf("layer %d: scale %v, want 1/sqrt(16)", layer, l.SoftmaxScale)
		}
	}
}

// sinkEngine: layer 0 with sinks, layer 1 without; 4 q heads over 2 kv heads, f32.
func sinkEngine(t *testing.T) *pkv.Engine {
	p := smallParams(t)
	p.LayerSpecs = []pkv.LayerSpec{{Sinks: true}, {}}
	return newEngine(t, p)
}

func TestAttentionSinks(t *testing.T) {
	e := sinkEngine(t)
	expectRefusal(t, e.SetAttentionSinks(0, make([]float32, 3)), "3 sinks", "4 q heads")
	expectStatus(t, e.SetAttentionSinks(1, make([]float32, 4)), pkv.ErrInvalidArgument)
	expectStatus(t, e.SetAttentionSinks(0, []float32{0, float32(math.NaN()), 0, 0}), pkv.ErrInvalidArgument)
	if !must(e.LayerInfo(0)).Sinks {
		t.Fatal("layer 0 has no sinks")
	}
	sinks := []float32{0, float32(math.Log(3)), -1, 2}
	if err := e.SetAttentionSinks(0, sinks); err != nil {
		t.Fatal(err)
	}
	// one token: its only score is q . k = 0, so head h's weight is 1 / (1 + exp(sink_h))
	s := must(e.Allocate([]int32{7}, nil))
	b := must(e.BeginBatch([]*pkv.Sequence{s}, nil))
	defer b.Abort()
	q, k, v, out := make([]float32, 64), make([]float32, 32), make([]float32, 32), make([]float32, 64)
	for i := range v {
		k[i], v[i] = float32(i)*0.01, 1+float32(i)
	}
	if err := b.Attention(0, q, k, v, out); err != nil {
		t.Fatal(err)
	}
	for h := 0; h < 4; h++ {
		weight := 1 / (1 + math.Exp(float64(sinks[h])))
		for d := 0; d < 16; d++ {
			want, got := weight*float64(v[(h/2)*16+d]), float64(out[h*16+d]) // q head h reads kv head h/2
			if math.Abs(got-want) > 1e-5+1e-5*math.Abs(want) {
				t.Fatalf("head %d dim %d: %v, want %v", h, d, got, want)
			}
		}
	}
	if err := b.Attention(1, q, k, v, out); err != nil || out[0] != v[0] { // no sinks: the value
		t.Fatalf("layer 1: %v, out[0] %v", err, out[0])
	}
	if err := b.End(); err != nil {
		t.Fatal(err)
	}
	expectStatus(t, e.SetAttentionSinks(0, sinks), pkv.ErrState) // before the first sequence only
}

func TestAttentionRefusesUnsetSinks(t *testing.T) {
	e := sinkEngine(t)
	s := must(e.Allocate([]int32{1, 2}, nil))
	b := must(e.BeginBatch([]*pkv.Sequence{s}, nil))
	defer b.Abort()
	q, kv := make([]float32, 2*64), make([]float32, 2*32)
	expectStatus(t, b.Attention(0, q, kv, kv, make([]float32, len(q))), pkv.ErrState)
}

func TestSoftCappedLayer(t *testing.T) {
	const softcap = 0.5
	p := smallParams(t)
	p.NumLayers, p.LayerSpecs = 1, []pkv.LayerSpec{{LogitSoftcap: softcap, SoftmaxScale: 1}}
	e := newEngine(t, p)
	s := must(e.Allocate([]int32{1, 2}, nil))
	b := must(e.BeginBatch([]*pkv.Sequence{s}, nil))
	defer b.Abort()
	val := func(n, off int, m float32) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32((i+off)*7%13-6) * m
		}
		return x
	}
	q, k, v, out := val(2*64, 0, 0.1), val(2*32, 3, 0.2), val(2*32, 5, 1), make([]float32, 2*64)
	if err := b.Attention(0, q, k, v, out); err != nil {
		t.Fatal(err)
	}
	// token 1, head h (kv head h/2): softmax over keys 0 and 1 of softcap * tanh(q . k / softcap)
	for h := 0; h < 4; h++ {
		kv := h / 2
		score := func(j int) float64 {
			dot := 0.0
			for d := 0; d < 16; d++ {
				dot += float64(q[64+h*16+d]) * float64(k[j*32+kv*16+d])
			}
			return softcap * math.Tanh(dot/softcap)
		}
		w0, w1 := math.Exp(score(0)), math.Exp(score(1))
		for d := 0; d < 16; d++ {
			want := (w0*float64(v[kv*16+d]) + w1*float64(v[32+kv*16+d])) / (w0 + w1)
			if got := float64(out[64+h*16+d]); math.Abs(got-want) > 1e-4+1e-4*math.Abs(want) {
				t.Fatalf("head %d dim %d: %v, want %v", h, d, got, want)
			}
		}
	}
}

func TestParamsFromHFConfigLayers(t *testing.T) {
	gptOSS := []byte(`{"model_type": "gpt_oss", "num_hidden_layers": 4, "num_attention_heads": 8,
		"num_key_value_heads": 2, "head_dim": 16, "hidden_size": 128, "sliding_window": 8,
		"layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
		"torch_dtype": "bfloat16", "max_position_embeddings": 4096}`)
	p := must(pkv.ParamsFromHFConfigLayers(must(pkv.DefaultParams()), gptOSS))
	if p.NumLayers != 4 || p.NumKVHeads != 2 || p.HeadDim != 16 || len(p.LayerSpecs) != 4 {
		t.Fatalf("gpt-oss: %d layers, %d kv heads, head_dim %d, specs %+v", p.NumLayers, p.NumKVHeads,
			p.HeadDim, p.LayerSpecs)
	}
	for l, s := range p.LayerSpecs {
		attention, window := pkv.AttentionFull, uint32(0)
		if l%2 == 0 {
			attention, window = pkv.AttentionSliding, 8
		}
		if !s.Sinks || s.Attention != attention || s.Window != window {
			t.Fatalf("layer %d: %+v", l, s)
		}
	}
	llama := []byte(`{"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
		"hidden_size": 64, "torch_dtype": "float32", "max_position_embeddings": 256}`)
	p = must(pkv.ParamsFromHFConfigLayers(must(pkv.DefaultParams()), llama))
	if p.NumLayers != 2 || p.LayerSpecs != nil {
		t.Fatalf("llama: %d layers, specs %+v", p.NumLayers, p.LayerSpecs)
	}
	before := must(pkv.DefaultParams())
	got, err := pkv.ParamsFromHFConfigLayers(before, []byte("{"))
	expectStatus(t, err, pkv.ErrInvalidArgument)
	if !errors.Is(err, pkv.ErrInvalidArgument) || !reflect.DeepEqual(got, before) {
		t.Fatal("a refused config changed the params")
	}
}

func TestChunkedAndSlidingLayersMaskTheirKeys(t *testing.T) {
	p := smallParams(t)
	p.LayerSpecs = []pkv.LayerSpec{pkv.ChunkedLayer(2), pkv.SlidingLayer(2)}
	e := newEngine(t, p)
	s := must(e.Allocate([]int32{1, 2, 3}, nil))
	b := must(e.BeginBatch([]*pkv.Sequence{s}, nil))
	defer b.Abort()
	// equal scores (q = 0): each token's output is the mean of the values it sees, token t's
	// values all t + 1
	q, k, v, out := make([]float32, 3*64), make([]float32, 3*32), make([]float32, 3*32), make([]float32, 3*64)
	for i := range v {
		v[i] = float32(i/32 + 1)
	}
	// chunks of 2: token 2 starts its own chunk; a window of 2: token 2 sees tokens 1 and 2
	for layer, want := range [][3]float64{{1, 1.5, 3}, {1, 1.5, 2.5}} {
		if err := b.Attention(layer, q, k, v, out); err != nil {
			t.Fatal(err)
		}
		for tok, w := range want {
			for _, x := range out[tok*64 : (tok+1)*64] {
				if math.Abs(float64(x)-w) > 1e-6 {
					t.Fatalf("layer %d token %d: %v, want %v", layer, tok, x, w)
				}
			}
		}
	}
	if err := b.End(); err != nil {
		t.Fatal(err)
	}
}

func TestFP8ScalesFollowEachLayersHeads(t *testing.T) {
	p := smallParams(t)
	p.NumLayers, p.KVDType = 3, pkv.DTypeFP8E4M3
	p.LayerSpecs = []pkv.LayerSpec{{}, {NumKVHeads: 1, HeadDim: 32, KEqV: true}, pkv.SharedLayer(0)}
	e := newEngine(t, p)
	half := []float32{0.5, 0.5}
	if err := e.SetKVScales(0, half, half); err != nil {
		t.Fatal(err)
	}
	// layer 1 has one kv head, and its V is its K: v nil
	expectRefusal(t, e.SetKVScales(1, half, half), "layer 1 has 1 kv heads")
	if err := e.SetKVScales(1, half[:1], nil); err != nil {
		t.Fatal(err)
	}
	// a shared layer reads its source's codes with the source's scales
	expectStatus(t, e.SetKVScales(2, half, half), pkv.ErrInvalidArgument)
	s := must(e.Allocate([]int32{1, 2, 3}, nil))
	b := must(e.BeginBatch([]*pkv.Sequence{s}, nil))
	defer b.Abort()
	fill := func(size int, x float32) []float32 {
		v := make([]float32, size)
		for i := range v {
			v[i] = x
		}
		return v
	}
	q16, kv16, out16 := fill(3*64, 0.1), fill(3*32, 0.2), make([]float32, 3*64)
	q32, k32, out32 := fill(3*128, 0.1), fill(3*32, 0.3), make([]float32, 3*128)
	if err := b.Attention(0, q16, kv16, kv16, out16); err != nil {
		t.Fatal(err)
	}
	if err := b.Attention(1, q32, k32, nil, out32); err != nil {
		t.Fatal(err)
	}
	if err := b.Attention(2, q16, nil, nil, out16); err != nil {
		t.Fatal(err)
	}
	// e4m3 keeps 3 mantissa bits: within 1/16 of the value
	for i := range out32 {
		if math.Abs(float64(out32[i])-0.3) > 0.3/16 || (i < len(out16) && math.Abs(float64(out16[i])-0.2) > 0.2/16) {
			t.Fatalf("out32[%d] = %v (want 0.3), out16 %v (want 0.2)", i, out32[i], out16[:4])
		}
	}
	if err := b.End(); err != nil {
		t.Fatal(err)
	}
}
