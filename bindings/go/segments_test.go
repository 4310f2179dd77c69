package pkv_test

// Block descriptors (pkv 0.11): Engine.BlockSegments, Engine.SeqSegments and
// Engine.LayoutFingerprint, what a transport moves blocks by: a prompt computed on one engine is
// moved into another of the same layout (other block counts) by copying segment i to segment i.

import (
	"bytes"
	"encoding/binary"
	"math"
	"strings"
	"testing"
	"unsafe"

	"pkv.local/pkv"
)

const segLayers, segQHeads, segKVHeads, segDim, segBS = 2, 4, 2, 8, 4

func segParams(numBlocks uint32, dtype pkv.DType) pkv.EngineParams {
	p := must(pkv.DefaultParams())
	p.NumLayers, p.NumQHeads, p.NumKVHeads, p.HeadDim = segLayers, segQHeads, segKVHeads, segDim
	p.DType, p.BlockSize, p.NumBlocks = dtype, segBS, numBlocks
	p.Device, p.NumThreads = pkv.DeviceCPU, 1
	return p
}

// segCompute runs one batch of seq's tokens: K of token t, layer l, value i is
// 100t + 10l + 0.001i, V its negative.
func segCompute(t *testing.T, e *pkv.Engine, seq *pkv.Sequence) {
	t.Helper()
	b := must(e.BeginBatch([]*pkv.Sequence{seq}, nil))
	defer b.Abort()
	n := b.NumTokens()
	q, out := make([]float32, n*segQHeads*segDim), make([]float32, n*segQHeads*segDim)
	for i := range q {
		q[i] = 0.01 * float32(i)
	}
	k, v := make([]float32, n*segKVHeads*segDim), make([]float32, n*segKVHeads*segDim)
	for layer := 0; layer < segLayers; layer++ {
		for tok := 0; tok < n; tok++ {
			for i := 0; i < segKVHeads*segDim; i++ {
				x := float32(100*tok+10*layer) + 0.001*float32(i)
				k[tok*segKVHeads*segDim+i], v[tok*segKVHeads*segDim+i] = x, -x
			}
		}
		if err := b.Attention(layer, q, k, v, out); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.End(); err != nil {
		t.Fatal(err)
	}
}

// segBytes is the memory a segment names (a CPU engine's host memory).
func segBytes(s pkv.Segment) []byte {
	p := *(*unsafe.Pointer)(unsafe.Pointer(&s.Base))
	return unsafe.Slice((*byte)(p), s.Bytes)
}

func TestLayoutFingerprint(t *testing.T) {
	a := newEngine(t, segParams(16, pkv.DTypeF32))
	b := newEngine(t, segParams(24, pkv.DTypeF32))
	c := newEngine(t, segParams(16, pkv.DTypeBF16))
	fa, fb, fc := must(a.LayoutFingerprint(0)), must(b.LayoutFingerprint(0)),
		must(c.LayoutFingerprint(0))
	if fa == ([32]byte{}) {
		t.Fatal("a zero fingerprint")
	}
	if fa != fb {
		t.Fatalf("other block counts, one layout: %x != %x", fa, fb)
	}
	if fa == fc {
		t.Fatal("bf16 and f32 engines share a fingerprint")
	}
	_, err := a.LayoutFingerprint(1)
	expectStatus(t, err, pkv.ErrInvalidArgument)
}

func TestSeqSegmentsMoveAPrompt(t *testing.T) {
	a := newEngine(t, segParams(16, pkv.DTypeF32))
	b := newEngine(t, segParams(24, pkv.DTypeF32))
	prompt := []int32{100, 101, 102, 103, 104, 105, 106, 107} // 2 blocks
	sa := must(a.Allocate(prompt, nil))
	segCompute(t, a, sa)
	must(b.Allocate([]int32{900, 901, 902, 903}, nil)) // b's blocks of the prompt at other ids
	sb := must(b.Allocate(prompt, nil))
	src, dst := must(a.SeqSegments(0, sa, 0, 2)), must(b.SeqSegments(0, sb, 0, 2))
	if len(src) != 2*segLayers*2 || len(dst) != len(src) {
		t.Fatalf("%d and %d segments, want %d", len(src), len(dst), 2*segLayers*2)
	}
	const blockBytes = segBS * segKVHeads * segDim * 4
	for i := range src {
		if src[i].Bytes != blockBytes || dst[i].Bytes != src[i].Bytes {
			t.Fatalf("segment %d: %d and %d bytes, want %d", i, src[i].Bytes, dst[i].Bytes,
				blockBytes)
		}
	}
	// layer 0's K of token 1, value 2, as segCompute wrote it
	at := (segKVHeads*segDim + 2) * 4
	if x := math.Float32frombits(binary.LittleEndian.Uint32(segBytes(src[0])[at:])); math.Abs(
		float64(x)-100.002) > 1e-4 {
		t.Fatalf("K[1][2] = %v, want 100.002", x)
	}
	if bytes.Equal(segBytes(src[0]), segBytes(dst[0])) {
		t.Fatal("b's blocks hold a's bytes before the copy")
	}
	for i := range src {
		copy(segBytes(dst[i]), segBytes(src[i]))
	}
	for i, d := range must(b.SeqSegments(0, sb, 0, 2)) {
		if d != dst[i] || !bytes.Equal(segBytes(d), segBytes(src[i])) {
			t.Fatalf("segment %d: b holds other bytes than a", i)
		}
	}
	// block 1 alone is the second half of the list
	mid := must(a.SeqSegments(0, sa, 1, 1))
	if len(mid) != segLayers*2 || mid[0] != src[segLayers*2] {
		t.Fatalf("SeqSegments(1, 1) = %v", mid)
	}
	if err := a.Check(); err != nil {
		t.Fatal(err)
	}
	if err := b.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestBlockSegmentsWherePoolInfoSays(t *testing.T) {
	e := newEngine(t, segParams(16, pkv.DTypeF32))
	info := must(e.PoolInfo())
	block := uintptr(info.BlockStride * 4) // f32
	segs := must(e.BlockSegments(0, pkv.TierDevice, []int32{1, 3}))
	if len(segs) != 2*segLayers*2 {
		t.Fatalf("%d segments, want %d", len(segs), 2*segLayers*2)
	}
	if segs[0] != (pkv.Segment{Base: info.KBase + block, Bytes: uint64(block)}) ||
		segs[1].Base != info.VBase+block ||
		segs[2].Base != info.KBase+uintptr(info.LayerStride*4)+block ||
		segs[4].Base != info.KBase+3*block {
		t.Fatalf("segments %v, pool %+v", segs, info)
	}
	if none := must(e.BlockSegments(0, pkv.TierDevice, nil)); len(none) != 0 {
		t.Fatalf("no blocks: %v", none)
	}
}

func TestSegmentsRefusals(t *testing.T) {
	e := newEngine(t, segParams(16, pkv.DTypeF32))
	_, err := e.BlockSegments(0, pkv.TierHost, []int32{1}) // no host tier
	expectStatus(t, err, pkv.ErrInvalidArgument)
	if !strings.Contains(err.Error(), "no host tier") {
		t.Fatalf("pkv's message lost: %v", err)
	}
	_, err = e.BlockSegments(0, pkv.TierDevice, []int32{16})
	expectStatus(t, err, pkv.ErrInvalidArgument)
	_, err = e.BlockSegments(-1, pkv.TierDevice, []int32{1})
	expectStatus(t, err, pkv.ErrInvalidArgument)
	seq := must(e.Allocate([]int32{0, 1, 2, 3, 4, 5, 6, 7}, nil))
	_, err = e.SeqSegments(0, seq, 1, 2) // past its 2 blocks
	expectStatus(t, err, pkv.ErrInvalidArgument)
	_, err = e.SeqSegments(0, &pkv.Sequence{Engine: e, ID: seq.ID + 100}, 0, 1)
	expectStatus(t, err, pkv.ErrNotFound)
	if err := seq.Preempt(); err != nil {
		t.Fatal(err)
	}
	_, err = e.SeqSegments(0, seq, 0, 1)
	expectStatus(t, err, pkv.ErrState)
}

// TestPageLayoutOneSegmentABlock: with BlockLayoutPage a block is one segment, the page holding
// what the default layout keeps in 2 x layers segments (layer after layer, K then V).
func TestPageLayoutOneSegmentABlock(t *testing.T) {
	pp := segParams(16, pkv.DTypeF32)
	pp.BlockLayout = pkv.BlockLayoutPage
	a, b := newEngine(t, segParams(16, pkv.DTypeF32)), newEngine(t, pp)
	if b.Params().BlockLayout != pkv.BlockLayoutPage {
		t.Fatalf("block layout %v, want BlockLayoutPage", b.Params().BlockLayout)
	}
	if must(a.LayoutFingerprint(0)) == must(b.LayoutFingerprint(0)) {
		t.Fatal("the page layout's fingerprint equals the layers layout's")
	}
	prompt := []int32{100, 101, 102, 103, 104, 105, 106, 107}
	sa, sb := must(a.Allocate(prompt, nil)), must(b.Allocate(prompt, nil))
	segCompute(t, a, sa)
	segCompute(t, b, sb)
	layers, pages := must(a.SeqSegments(0, sa, 0, 2)), must(b.SeqSegments(0, sb, 0, 2))
	if len(pages) != 2 {
		t.Fatalf("%d segments for 2 blocks of pages, want 2", len(pages))
	}
	const per = segLayers * 2
	for i, page := range pages {
		var want []byte
		for _, s := range layers[i*per : (i+1)*per] {
			want = append(want, segBytes(s)...)
		}
		if !bytes.Equal(segBytes(page), want) {
			t.Fatalf("page %d differs from its blocks' layers", i)
		}
	}
}
