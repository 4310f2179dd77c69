package pkv_test

import (
	"math"
	"reflect"
	"sort"
	"strings"
	"testing"

	"pkv.local/pkv"
)

// Sparse attention (pkv 0.7, DeepSeek V3.2 / GLM-5): an MLA layer with an indexer, the top-k of
// a context longer than IndexTopk checked against the answer computed here (positions and
// slots), sparse MLA attention against a float64 reference over the selected latents, the
// layer's index fields, and a layer without an indexer refused.

const (
	dsaLatent, dsaRope, dsaQHeads, dsaScale = 16, 8, 2, 0.25
	dsaWidth                                = dsaLatent + dsaRope
	dsaIndexDim, dsaIndexHeads, dsaTopK     = 8, 2, 4
	dsaTokens                               = 10 // one prompt step: a context longer than dsaTopK
)

// dsaScores are key s's first values: distinct integers, so its score under the query e0 is
// known and unique.
var dsaScores = []float32{3, 9, 1, 7, 5, 10, 2, 8, 4, 6}

// dsaParams: layer 0 is MLA with an indexer, layer 1 plain MLA (the refusal's).
func dsaParams(t *testing.T) pkv.EngineParams {
	p := smallParams(t)
	p.KVLayout, p.KVLoraRank, p.QKRopeHeadDim = pkv.KVLayoutMLA, dsaLatent, dsaRope
	p.NumQHeads, p.NumKVHeads, p.HeadDim, p.SoftmaxScale = dsaQHeads, 1, dsaWidth, dsaScale
	indexed := pkv.IndexedMLALayer(dsaIndexDim, pkv.DTypeFP8E4M3, dsaIndexHeads, dsaTopK)
	indexed.SoftmaxScale = dsaScale
	p.LayerSpecs = []pkv.LayerSpec{indexed, {Kind: pkv.LayerMLA, SoftmaxScale: dsaScale}}
	return p
}

// dsaIndexInputs are keys [tokens][dim] whose first value is dsaScores[s] (the largest: it sets
// the fp8 scale), queries [tokens][heads][dim] (head 0 e0, head 1 -e0: relu makes it 0) and
// weights of 1.
func dsaIndexInputs(seed *uint64) (keys, q, weights []float32) {
	keys = mlaValues(seed, dsaTokens*dsaIndexDim) // in [-1, 1): below every score
	q = make([]float32, dsaTokens*dsaIndexHeads*dsaIndexDim)
	weights = make([]float32, dsaTokens*dsaIndexHeads)
	for s := 0; s < dsaTokens; s++ {
		keys[s*dsaIndexDim] = dsaScores[s]
		q[s*dsaIndexHeads*dsaIndexDim], q[(s*dsaIndexHeads+1)*dsaIndexDim] = 1, -1
		weights[2*s], weights[2*s+1] = 1, 1
	}
	return keys, q, weights
}

// dsaExpected is token t's top keys: the dsaTopK highest scores of positions 0..t, ascending,
// then -1.
func dsaExpected(t int) []int32 {
	pos := make([]int32, t+1)
	for s := range pos {
		pos[s] = int32(s)
	}
	sort.Slice(pos, func(i, j int) bool { return dsaScores[pos[i]] > dsaScores[pos[j]] })
	if len(pos) > dsaTopK {
		pos = pos[:dsaTopK]
	}
	sort.Slice(pos, func(i, j int) bool { return pos[i] < pos[j] })
	for len(pos) < dsaTopK {
		pos = append(pos, -1)
	}
	return pos
}

// dsaReference is absorbed MLA in float64, token t attending over the positions in its row of
// indices (-1 skipped).
func dsaReference(q, latents []float32, indices []int32) []float64 {
	out := make([]float64, 0, dsaTokens*dsaQHeads*dsaLatent)
	for t := 0; t < dsaTokens; t++ {
		var keys []int
		for _, j := range indices[t*dsaTopK:][:dsaTopK] {
			if j >= 0 && int(j) <= t {
				keys = append(keys, int(j))
			}
		}
		for h := 0; h < dsaQHeads; h++ {
			qt := q[(t*dsaQHeads+h)*dsaWidth:][:dsaWidth]
			w, top, total := make([]float64, len(keys)), math.Inf(-1), 0.0
			for i, j := range keys {
				for d, x := range latents[j*dsaWidth:][:dsaWidth] {
					w[i] += float64(qt[d]) * float64(x)
				}
				w[i] *= dsaScale
				top = math.Max(top, w[i])
			}
			for i := range w {
				w[i] = math.Exp(w[i] - top)
				total += w[i]
			}
			for d := 0; d < dsaLatent; d++ {
				sum := 0.0
				for i, j := range keys {
					sum += w[i] * float64(latents[j*dsaWidth+d])
				}
				out = append(out, sum/total)
			}
		}
	}
	return out
}

func TestSparseLayerInfo(t *testing.T) {
	e := newEngine(t, dsaParams(t))
	l := must(e.LayerInfo(0))
	if l.IndexHeadDim != dsaIndexDim || l.IndexDType != pkv.DTypeFP8E4M3 || l.IndexNHeads != dsaIndexHeads ||
		l.IndexTopk != dsaTopK || l.HostIndexBase != 0 || l.HostIndexScaleBase != 0 {
		t.Fatalf("layer 0 %+v", l)
	}
	// a page holds the block's 4 f32 latents, then their 4 fp8 keys, then their 4 fp32 scales
	if l.IndexBlockBytes != must(e.Budget()).BlockBytes || l.IndexBase != l.KBase+4*dsaWidth*4 ||
		l.IndexScaleBase != l.IndexBase+4*dsaIndexDim {
		t.Fatalf("layer 0's indexer layout %+v", l)
	}
	if l1 := must(e.LayerInfo(1)); l1.IndexHeadDim != 0 || l1.IndexTopk != 0 || l1.IndexBase != 0 {
		t.Fatalf("layer 1 %+v", l1)
	}
	spec := e.Params().LayerSpecs[0]
	if !reflect.DeepEqual(spec, dsaParams(t).LayerSpecs[0]) {
		t.Fatalf("spec read back %+v", spec)
	}
	if s := pkv.TopKSlots.String(); s != "TOPK_SLOTS" || pkv.IndexerMaxHeadDim != 256 {
		t.Fatalf("constants %q %d", s, pkv.IndexerMaxHeadDim)
	}
}

func TestSparseTopKAndAttention(t *testing.T) {
	e := newEngine(t, dsaParams(t))
	seq := must(e.Allocate([]int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, nil))
	b := must(e.BeginBatch([]*pkv.Sequence{seq}, nil))
	defer b.Abort()
	seed := uint64(29)
	keys, iq, weights := dsaIndexInputs(&seed)
	if err := b.IndexerWrite(0, keys, pkv.IndexerScaleUE8M0); err != nil {
		t.Fatal(err)
	}
	if err := b.IndexerWrite(0, keys, 0); err != nil {
		t.Fatal(err)
	}
	top := make([]int32, dsaTokens*dsaTopK)
	if err := b.IndexerTopK(0, iq, weights, pkv.TopKPositions, top); err != nil {
		t.Fatal(err)
	}
	for tok := 0; tok < dsaTokens; tok++ {
		if got := top[tok*dsaTopK:][:dsaTopK]; !reflect.DeepEqual(got, dsaExpected(tok)) {
			t.Fatalf("token %d: top-k %v, want %v", tok, got, dsaExpected(tok))
		}
	}
	bySlot := make([]int32, len(top))
	if err := b.IndexerTopK(0, iq, weights, pkv.TopKSlots, bySlot); err != nil {
		t.Fatal(err)
	}
	group := int(must(e.LayerInfo(0)).Group) // its KV group's slots: layer 1 has another
	slots := must(b.GroupSlotMapping())[group*dsaTokens:][:dsaTokens]
	for i, pos := range top {
		if want := int32(-1); pos >= 0 && bySlot[i] != int32(slots[pos]) || pos < 0 && bySlot[i] != want {
			t.Fatalf("entry %d: slot %d for position %d (slots %v)", i, bySlot[i], pos, slots)
		}
	}
	q, latents := mlaValues(&seed, dsaTokens*dsaQHeads*dsaWidth), mlaValues(&seed, dsaTokens*dsaWidth)
	out := make([]float32, dsaTokens*dsaQHeads*dsaLatent)
	if err := b.SparseMLAAttention(0, q, latents, top, out); err != nil {
		t.Fatal(err)
	}
	worst := 0.0
	for i, w := range dsaReference(q, latents, top) {
		worst = math.Max(worst, math.Abs(float64(out[i])-w))
	}
	if worst > 1e-4 {
		t.Fatalf("sparse MLA: max error %g", worst)
	}
	if err := b.End(); err != nil {
		t.Fatal(err)
	}
	if info := must(seq.Info()); info.NumComputedTokens != dsaTokens {
		t.Fatalf("info %+v", info)
	}
	if err := e.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestSparseRefusals(t *testing.T) {
	e := newEngine(t, dsaParams(t))
	seq := must(e.Allocate([]int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, nil))
	b := must(e.BeginBatch([]*pkv.Sequence{seq}, nil))
	defer b.Abort()
	seed := uint64(3)
	keys, iq, weights := dsaIndexInputs(&seed)
	top := make([]int32, dsaTokens*dsaTopK)
	for _, err := range []error{b.IndexerTopK(1, iq, weights, pkv.TopKPositions, top),
		b.IndexerWrite(1, keys, 0)} {
		expectStatus(t, err, pkv.ErrInvalidArgument) // pkv's own message
		if !strings.Contains(err.Error(), "layer 1 has no indexer") {
			t.Fatal(err)
		}
	}
	err := b.IndexerTopK(0, iq, weights[:3], pkv.TopKPositions, top) // checked before pkv
	expectStatus(t, err, pkv.ErrInvalidArgument)
	if !strings.Contains(err.Error(), "weights holds 3 elements, the batch needs 20") {
		t.Fatal(err)
	}
}

// bf16 is x's bfloat16 bit pattern (truncated: exact for the small integers and zeros used here).
func bf16(x float32) uint16 { return uint16(math.Float32bits(x) >> 16) }

// TestSparseBF16 runs the U16 forms on a bf16 engine whose indexer keeps bf16 keys: the top-k
// is exact (integer scores), and f32 slices are refused by name.
func TestSparseBF16(t *testing.T) {
	p := dsaParams(t)
	p.DType = pkv.DTypeBF16
	p.LayerSpecs[0].IndexDType = pkv.DTypeBF16
	e := newEngine(t, p)
	l := must(e.LayerInfo(0))
	if l.IndexDType != pkv.DTypeBF16 || l.IndexScaleBase != 0 || l.IndexBase != l.KBase+4*dsaWidth*2 {
		t.Fatalf("bf16 indexer %+v", l) // bf16 latents, then bf16 keys, no scales
	}
	seq := must(e.Allocate([]int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, nil))
	b := must(e.BeginBatch([]*pkv.Sequence{seq}, nil))
	defer b.Abort()
	seed := uint64(5)
	keys, iq, weights := dsaIndexInputs(&seed)
	k16, q16 := make([]uint16, len(keys)), make([]uint16, len(iq))
	for i := range keys {
		k16[i] = bf16(keys[i])
	}
	for i := range iq {
		q16[i] = bf16(iq[i])
	}
	err := b.IndexerWrite(0, keys, 0)
	expectStatus(t, err, pkv.ErrInvalidArgument)
	if !strings.Contains(err.Error(), "pass their bit patterns as []uint16 to IndexerWriteU16") {
		t.Fatal(err)
	}
	if err := b.IndexerWriteU16(0, k16, 0); err != nil {
		t.Fatal(err)
	}
	top := make([]int32, dsaTokens*dsaTopK)
	if err := b.IndexerTopKU16(0, q16, weights, pkv.TopKPositions, top); err != nil {
		t.Fatal(err)
	}
	for tok := 0; tok < dsaTokens; tok++ {
		if got := top[tok*dsaTopK:][:dsaTopK]; !reflect.DeepEqual(got, dsaExpected(tok)) {
			t.Fatalf("token %d: top-k %v, want %v", tok, got, dsaExpected(tok))
		}
	}
	q, latents := make([]uint16, dsaTokens*dsaQHeads*dsaWidth), make([]uint16, dsaTokens*dsaWidth)
	qf, lf := mlaValues(&seed, len(q)), mlaValues(&seed, len(latents))
	for i := range q {
		q[i], qf[i] = bf16(qf[i]), math.Float32frombits(uint32(bf16(qf[i]))<<16)
	}
	for i := range latents {
		latents[i], lf[i] = bf16(lf[i]), math.Float32frombits(uint32(bf16(lf[i]))<<16)
	}
	out := make([]uint16, dsaTokens*dsaQHeads*dsaLatent)
	if err := b.SparseMLAAttentionU16(0, q, latents, top, out); err != nil {
		t.Fatal(err)
	}
	for i, w := range dsaReference(qf, lf, top) { // bf16 out: 8 bits of mantissa
		if got := float64(math.Float32frombits(uint32(out[i]) << 16)); math.Abs(got-w) > 1e-2 {
			t.Fatalf("sparse MLA element %d: %g, want %g", i, got, w)
		}
	}
}
