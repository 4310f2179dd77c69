package pkv_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"pkv.local/pkv"
)

// Multi-head latent attention (pkv 0.3): an MLA engine's params, its V-less attention checked
// against a reference computed here, its pool without V, V-less fp8 scales, and a DeepSeek-V3
// config profiled as MLA.

const (
	mlaLatent = 16
	mlaRope   = 16
	mlaWidth  = mlaLatent + mlaRope // the latent's width: the engine's HeadDim
	mlaQHeads = 4
	mlaScale  = 0.2
)

func mlaParams(t *testing.T) pkv.EngineParams {
	p := smallParams(t)
	p.KVLayout, p.KVLoraRank, p.QKRopeHeadDim = pkv.KVLayoutMLA, mlaLatent, mlaRope
	p.NumQHeads, p.NumKVHeads, p.HeadDim, p.SoftmaxScale = mlaQHeads, 1, mlaWidth, mlaScale
	return p
}

// mlaValues are n values in [-1, 1) from a small LCG: the same on every run.
func mlaValues(seed *uint64, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		*seed = *seed*6364136223846793005 + 1442695040888963407
		out[i] = float32(float64(*seed>>40)/float64(1<<24)*2 - 1)
	}
	return out
}

// mlaReference is absorbed attention of one sequence's n new tokens (positions 0..n-1) in
// float64: out[t][h] = sum over j <= t of softmax_j(scale * q[t][h] . latent[j]) *
// latent[j][:kv_lora_rank].
func mlaReference(q, latents []float32, n int) []float64 {
	out := make([]float64, 0, n*mlaQHeads*mlaLatent)
	for t := 0; t < n; t++ {
		for h := 0; h < mlaQHeads; h++ {
			qt := q[(t*mlaQHeads+h)*mlaWidth:][:mlaWidth]
			scores := make([]float64, t+1)
			top := math.Inf(-1)
			for j := range scores {
				for d, x := range latents[j*mlaWidth:][:mlaWidth] {
					scores[j] += float64(qt[d]) * float64(x)
				}
				scores[j] *= mlaScale
				top = math.Max(top, scores[j])
			}
			total := 0.0
			for j := range scores {
				scores[j] = math.Exp(scores[j] - top)
				total += scores[j]
			}
			for d := 0; d < mlaLatent; d++ {
				sum := 0.0
				for j, w := range scores {
					sum += w * float64(latents[j*mlaWidth+d])
				}
				out = append(out, sum/total)
			}
		}
	}
	return out
}

func TestMLAParams(t *testing.T) {
	p := mlaParams(t)
	b := must(pkv.Profile(p))
	if b.KVLayout != pkv.KVLayoutMLA || b.BlockBytes != 2*4*mlaWidth*4 { // one latent, no V
		t.Fatalf("budget %+v", b)
	}
	if s := pkv.KVLayoutMLA.String(); s != "KV_LAYOUT_MLA" {
		t.Fatalf("String %q", s)
	}
	if d := must(pkv.DefaultParams()); d.KVLayout != pkv.KVLayoutHeads {
		t.Fatalf("default layout %v", d.KVLayout)
	}
	e := newEngine(t, p)
	ep := e.Params()
	if ep.KVLayout != pkv.KVLayoutMLA || ep.KVLoraRank != mlaLatent || ep.QKRopeHeadDim != mlaRope {
		t.Fatalf("params %+v", ep)
	}
	if must(e.Budget()).KVLayout != pkv.KVLayoutMLA {
		t.Fatal("engine budget's layout")
	}
	p.NumKVHeads = 2 // MLA caches one latent
	_, err := pkv.NewEngine(p)
	expectStatus(t, err, pkv.ErrInvalidArgument)
}

func TestMLAAttentionWithoutV(t *testing.T) {
	e := newEngine(t, mlaParams(t))
	pi := must(e.PoolInfo())
	if pi.KBase == 0 || pi.VBase != 0 || pi.HostVBase != 0 || pi.KVHeads != 1 || pi.HeadDim != mlaWidth {
		t.Fatalf("pool %+v", pi) // no V
	}
	const n = 10
	seq := must(e.Allocate([]int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, nil))
	b := must(e.BeginBatch([]*pkv.Sequence{seq}, nil))
	defer b.Abort()
	if b.NumTokens() != n {
		t.Fatalf("%d tokens", b.NumTokens())
	}
	seed := uint64(7)
	for layer := 0; layer < 2; layer++ {
		q, latents := mlaValues(&seed, n*mlaQHeads*mlaWidth), mlaValues(&seed, n*mlaWidth)
		out := make([]float32, n*mlaQHeads*mlaLatent) // kv_lora_rank per head
		if layer == 0 {
			// a V on an MLA engine is refused, and changes nothing
			err := b.Attention(layer, q, latents, latents, out)
			expectStatus(t, err, pkv.ErrInvalidArgument)
			if !strings.Contains(err.Error(), "no V") {
				t.Fatal(err)
			}
		}
		if err := b.Attention(layer, q, latents, nil, out); err != nil {
			t.Fatal(err)
		}
		worst := 0.0
		for i, w := range mlaReference(q, latents, n) {
			worst = math.Max(worst, math.Abs(float64(out[i])-w))
		}
		if worst > 1e-4 {
			t.Fatalf("layer %d: max error %g", layer, worst)
		}
	}
	short := make([]float32, n*mlaQHeads*mlaLatent-1)
	expectStatus(t, b.Attention(0, short, short, nil, short), pkv.ErrInvalidArgument)
	if err := b.End(); err != nil {
		t.Fatal(err)
	}
	if info := must(seq.Info()); info.NumComputedTokens != n {
		t.Fatalf("info %+v", info)
	}
	if err := e.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestMLAScalesWithoutV(t *testing.T) {
	p := mlaParams(t)
	p.KVDType = pkv.DTypeFP8E4M3
	e := newEngine(t, p)
	if b := must(e.Budget()); b.KVScaleBytes != 2*4 { // one scale per layer
		t.Fatalf("budget %+v", b)
	}
	for layer, scale := range []float32{0.5, 0.25} {
		if err := e.SetKVScales(uint32(layer), []float32{scale}, nil); err != nil {
			t.Fatal(err)
		}
	}
	expectStatus(t, e.SetKVScales(0, []float32{0}, nil), pkv.ErrInvalidArgument)
	err := newEngine(t, mlaParams(t)).SetKVScales(0, []float32{1}, nil) // f32: no scales
	if !errors.Is(err, pkv.ErrInvalidArgument) || !strings.Contains(err.Error(), "not fp8") {
		t.Fatalf("f32 engine scales: %v", err)
	}
}

func TestMLADeepSeekV3Config(t *testing.T) {
	p := must(pkv.ParamsFromHFConfig(must(pkv.DefaultParams()), readConfig(t, "deepseek-v3.json")))
	if p.KVLayout != pkv.KVLayoutMLA || p.KVLoraRank != 512 || p.QKRopeHeadDim != 64 ||
		p.NumKVHeads != 1 || p.HeadDim != 576 {
		t.Fatalf("params %+v", p)
	}
	mscale := 0.1*math.Log(40) + 1 // yarn: factor 40, mscale_all_dim 1
	if math.Abs(float64(p.SoftmaxScale)-mscale*mscale/math.Sqrt(192)) > 1e-6 {
		t.Fatalf("softmax scale %g", p.SoftmaxScale)
	}
	p.Device, p.MemoryTotalBytes = pkv.DeviceCPU, 80<<30
	b := must(pkv.Profile(p))
	if b.KVLayout != pkv.KVLayoutMLA || b.KVHeadsPerRank != 1 || b.BytesPerToken != 61*576*2 {
		t.Fatalf("budget %+v", b) // one bf16 latent per token per layer
	}
}
