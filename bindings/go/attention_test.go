package pkv_test

// Issue 26 item 2: Attention's slices are checked against the engine's dtype and shape before
// pkv is called. A bf16 engine (Llama-3's config.json default) refuses []float32, an f32 engine
// []uint16, and short slices are refused naming the length and shape the batch needs.

import (
	"strings"
	"testing"

	"pkv.local/pkv"
)

// llamaBatch is a batch of 3 new tokens on a CPU engine of Llama-3-8B's shape (bf16; 32 q
// heads, 8 kv heads of 128).
func llamaBatch(t *testing.T) *pkv.Batch {
	t.Helper()
	p := must(pkv.ParamsFromHFConfig(must(pkv.DefaultParams()), readConfig(t, "llama-3-8b.json")))
	if p.DType != pkv.DTypeBF16 {
		t.Fatalf("llama-3 dtype %v", p.DType)
	}
	p.Device, p.NumBlocks, p.NumThreads, p.MaxModelLen = pkv.DeviceCPU, 4, 1, 64
	e := newEngine(t, p)
	b := must(e.BeginBatch([]*pkv.Sequence{must(e.Allocate([]int32{1, 2, 3}, nil))}, nil))
	t.Cleanup(b.Abort)
	return b
}

func expectRefusal(t *testing.T, err error, words ...string) {
	t.Helper()
	expectStatus(t, err, pkv.ErrInvalidArgument)
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("the error does not say %q: %v", w, err)
		}
	}
}

func TestAttentionRefusesTheWrongElementType(t *testing.T) {
	b := llamaBatch(t)
	q, kv := make([]float32, 3*32*128), make([]float32, 3*8*128)
	err := b.Attention(0, q, kv, kv, make([]float32, len(q)))
	expectRefusal(t, err, "DTYPE_BF16", "AttentionU16", "[]uint16")

	f32 := newEngine(t, smallParams(t))
	fb := must(f32.BeginBatch([]*pkv.Sequence{must(f32.Allocate([]int32{1, 2}, nil))}, nil))
	defer fb.Abort()
	u := make([]uint16, 2*64)
	err = fb.AttentionU16(0, u, u[:64], u[:64], make([]uint16, len(u)))
	expectRefusal(t, err, "DTYPE_F32", "[]float32")
}

func TestAttentionRefusesShortSlices(t *testing.T) {
	b := llamaBatch(t)
	q, kv, out := make([]uint16, 3*32*128), make([]uint16, 3*8*128), make([]uint16, 3*32*128)
	cases := []struct {
		name       string
		q, k, v, o []uint16
		said       []string
	}{
		{"q", q[:len(q)-1], kv, kv, out, []string{"q holds 12287 elements", "needs 12288",
			"[3 tokens][32 q heads per rank][head_dim 128]"}},
		{"k", q, kv[:8*128], kv, out, []string{"k holds 1024 elements", "needs 3072",
			"[8 kv heads per rank][head_dim 128]"}},
		{"v", q, kv, []uint16{}, out, []string{"v holds 0 elements", "needs 3072"}},
		{"v nil", q, kv, nil, out, []string{"v is nil", "MLA"}},
		{"out", q, kv, kv, out[:100], []string{"out holds 100 elements", "needs 12288"}},
	}
	for _, c := range cases {
		err := b.AttentionU16(0, c.q, c.k, c.v, c.o)
		if err == nil {
			t.Fatalf("%s: accepted", c.name)
		}
		expectRefusal(t, err, c.said...)
	}
	// The slices of the right type and shape run (longer ones too: only the first are read).
	if err := b.AttentionU16(0, q, kv, kv, out); err != nil {
		t.Fatal(err)
	}
	longQ, longOut := make([]uint16, len(q)+5), make([]uint16, len(out)+5)
	if err := b.AttentionU16(1, longQ, kv, kv, longOut); err != nil {
		t.Fatal(err)
	}
}

// An MLA engine's widths: q [tokens][q heads][W], the latents [tokens][W], out
// [tokens][q heads][kv_lora_rank], with W = kv_lora_rank + qk_rope_head_dim.
func TestAttentionChecksMLAWidths(t *testing.T) {
	e := newEngine(t, mlaParams(t))
	b := must(e.BeginBatch([]*pkv.Sequence{must(e.Allocate([]int32{1, 2}, nil))}, nil))
	defer b.Abort()
	q, latents := make([]float32, 2*mlaQHeads*mlaWidth), make([]float32, 2*mlaWidth)
	out := make([]float32, 2*mlaQHeads*mlaLatent)
	expectRefusal(t, b.Attention(0, q, latents[:mlaWidth], nil, out), "k holds 32", "needs 64",
		"[2 tokens][latent width 32]")
	expectRefusal(t, b.Attention(0, q, latents, nil, out[:len(out)-1]), "out holds 127", "needs 128",
		"[2 tokens][4 q heads per rank][kv_lora_rank 16]")
	expectRefusal(t, b.Attention(0, q, latents, latents, out), "no V", "pass v nil")
	if err := b.Attention(0, q, latents, nil, out); err != nil {
		t.Fatal(err)
	}
}
