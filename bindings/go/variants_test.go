package pkv_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"pkv.local/pkv"
)

// Attention variants (pkv 0.2): fp8 KV and its scales, sliding windows and KV groups, a
// config's per-layer windows, and what they add to the budget, the pool, the batch and events.

func readConfig(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "tools", "configs", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestConfigWindowsAndGroups(t *testing.T) {
	json := readConfig(t, "gemma-3-27b.json")
	windows := must(pkv.HFConfigLayerWindows(json))
	want := make([]uint32, 62)
	for l := range want {
		if (l+1)%6 != 0 {
			want[l] = 1024
		}
	}
	if !reflect.DeepEqual(windows, want) {
		t.Fatalf("gemma 3 windows %v", windows)
	}
	base := must(pkv.DefaultParams())
	p := must(pkv.ParamsFromHFConfig(base, json))
	if p.NumLayers != 62 || p.SlidingWindow != 0 || !reflect.DeepEqual(p.LayerWindows, windows) {
		t.Fatalf("params %+v", p)
	}
	g := must(pkv.KVGroupsOf(p))
	if g.GroupLayers != 10 || !reflect.DeepEqual(g.GroupWindow, []uint32{0, 1024, 1024, 1024, 1024, 1024, 1024}) {
		t.Fatalf("groups %+v", g)
	}
	seen := map[[2]uint32]bool{}
	for l := range windows {
		seen[[2]uint32{g.LayerGroup[l], g.LayerSlot[l]}] = true
	}
	if len(seen) != 62 {
		t.Fatalf("%d distinct (group, slot) for 62 layers", len(seen))
	}
	p.Device, p.MemoryTotalBytes = pkv.DeviceCPU, 80<<30
	b := must(pkv.Profile(p))
	if b.NumKVGroups != 7 || b.GroupLayers != 10 || b.PaddedLayers != 8 || b.BlocksPerMaxSeq != 8192+6*65 {
		t.Fatalf("budget %+v", b)
	}
	gpt := must(pkv.HFConfigLayerWindows(readConfig(t, "gpt-oss-20b.json")))
	for l, w := range gpt {
		if w != uint32(128*(1-l%2)) {
			t.Fatalf("gpt-oss layer %d: window %d", l, w)
		}
	}
	// Mistral's one window is SlidingWindow, even read over params of another model's windows.
	mistral := must(pkv.ParamsFromHFConfig(p, readConfig(t, "mistral-7b.json")))
	if mistral.SlidingWindow != 4096 || mistral.LayerWindows != nil || mistral.NumLayers != 32 {
		t.Fatalf("mistral sliding window %d, layer windows %v", mistral.SlidingWindow, mistral.LayerWindows)
	}
	_, err := pkv.HFConfigLayerWindows([]byte(`{"num_hidden_layers": 2, "num_attention_heads": 4,
		"hidden_size": 64, "sliding_window": 8, "layer_types": ["sliding_attention", "chunked_attention"]}`))
	expectStatus(t, err, pkv.ErrInvalidArgument)
	if !strings.Contains(err.Error(), "layer_types[1]") {
		t.Fatalf("error %v", err)
	}
}

func TestLayerWindowsChecked(t *testing.T) {
	p := smallParams(t)
	g := must(pkv.KVGroupsOf(withWindows(p, 0, 16)))
	if g.GroupLayers != 1 || !reflect.DeepEqual(g.GroupWindow, []uint32{0, 16}) ||
		!reflect.DeepEqual(g.LayerGroup, []uint32{0, 1}) {
		t.Fatalf("groups %+v", g)
	}
	_, err := pkv.Profile(withWindows(p, 0, 16, 16)) // not NumLayers
	expectStatus(t, err, pkv.ErrInvalidArgument)
	_, err = pkv.NewEngine(withWindows(p, 0))
	expectStatus(t, err, pkv.ErrInvalidArgument)
	_, err = pkv.KVGroupsOf(withWindows(p, 0, 1<<31))
	expectStatus(t, err, pkv.ErrInvalidArgument)
	if g := must(pkv.KVGroupsOf(p)); len(g.GroupWindow) != 1 {
		t.Fatalf("no windows: %+v", g)
	}
	// two groups: created once the block manager keeps a table per group, else UNSUPPORTED
	e, err := pkv.NewEngine(withWindows(p, 16, 0))
	if err != nil {
		expectStatus(t, err, pkv.ErrUnsupported)
		if !strings.Contains(err.Error(), "KV groups") {
			t.Fatal(err)
		}
	} else {
		defer e.Close()
		if !reflect.DeepEqual(e.LayerWindows(), []uint32{16, 0}) || !reflect.DeepEqual(e.Params().LayerWindows, []uint32{16, 0}) {
			t.Fatalf("windows %v, params %+v", e.LayerWindows(), e.Params())
		}
	}
}

// withWindows is p with one window per layer given.
func withWindows(p pkv.EngineParams, windows ...uint32) pkv.EngineParams {
	p.LayerWindows = windows
	return p
}

func TestOneWindowEngine(t *testing.T) {
	p := smallParams(t)
	p.SlidingWindow = 8
	e := newEngine(t, p)
	if e.Params().SlidingWindow != 8 || e.LayerWindows() != nil {
		t.Fatalf("params %+v", e.Params())
	}
	b, pi := must(e.Budget()), must(e.PoolInfo())
	if b.NumKVGroups != 1 || pi.NumKVGroups != 1 {
		t.Fatalf("groups: budget %d, pool %d", b.NumKVGroups, pi.NumKVGroups)
	}
	if g := must(e.KVGroups()); !reflect.DeepEqual(g.GroupWindow, []uint32{8}) {
		t.Fatalf("groups %+v", g)
	}
	seq := must(e.Allocate([]int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, nil))
	if !reflect.DeepEqual(must(seq.GroupBlockTable(0)), must(seq.BlockTable())) {
		t.Fatal("group 0's table is not the block table")
	}
	_, err := seq.GroupBlockTable(1)
	expectStatus(t, err, pkv.ErrInvalidArgument)
	batch := must(e.BeginBatch([]*pkv.Sequence{seq}, nil))
	defer batch.Abort()
	if batch.NumKVGroups() != 1 ||
		!reflect.DeepEqual(must(batch.GroupSlotMapping()), must(batch.SlotMapping())) ||
		!reflect.DeepEqual(must(batch.GroupBlockTables()), must(batch.BlockTables())) {
		t.Fatal("group arrays differ from group 0's")
	}
}

func TestFp8EngineAndScales(t *testing.T) {
	for _, kv := range []pkv.DType{pkv.DTypeFP8E4M3, pkv.DTypeFP8E5M2} {
		p := smallParams(t)
		p.KVDType = kv
		e := newEngine(t, p)
		b, pi := must(e.Budget()), must(e.PoolInfo())
		if b.KVDType != kv || b.KVScaleBytes != 2*2*2*4 || b.BlockBytes != 2*2*4*2*16 {
			t.Fatalf("budget %+v", b)
		}
		if pi.DType != kv || pi.ModelDType != pkv.DTypeF32 {
			t.Fatalf("pool %+v", pi)
		}
		if err := e.SetKVScales(0, []float32{0.5, 0.25}, []float32{1, 2}); err != nil {
			t.Fatal(err)
		}
		expectStatus(t, e.SetKVScales(0, []float32{1}, []float32{1, 1}), pkv.ErrInvalidArgument)
		expectStatus(t, e.SetKVScales(0, []float32{1, 0}, []float32{1, 1}), pkv.ErrInvalidArgument)
		expectStatus(t, e.SetKVScales(2, []float32{1, 1}, []float32{1, 1}), pkv.ErrInvalidArgument)
		must(e.Allocate([]int32{1, 2, 3}, nil))
		expectStatus(t, e.SetKVScales(1, []float32{1, 1}, []float32{1, 1}), pkv.ErrState)
	}
	f32 := newEngine(t, smallParams(t))
	err := f32.SetKVScales(0, []float32{1, 1}, []float32{1, 1})
	if !errors.Is(err, pkv.ErrInvalidArgument) || !strings.Contains(err.Error(), "not fp8") {
		t.Fatalf("f32 engine scales: %v", err)
	}
	for _, change := range []func(*pkv.EngineParams){
		func(p *pkv.EngineParams) { p.KVDType = 5 },
		func(p *pkv.EngineParams) { p.KVDType = pkv.DTypeF16 },
		func(p *pkv.EngineParams) { p.DType = pkv.DTypeFP8E4M3 },
		func(p *pkv.EngineParams) { p.SlidingWindow = 1 << 31 },
	} {
		p := smallParams(t)
		change(&p)
		_, err := pkv.NewEngine(p)
		expectStatus(t, err, pkv.ErrInvalidArgument)
	}
}

func TestKVEventGroup(t *testing.T) {
	p := smallParams(t)
	p.EnableKVEvents = true
	e := newEngine(t, p)
	seq := must(e.Allocate([]int32{1, 2, 3, 4, 5, 6, 7, 8}, nil))
	runStep(t, e, seq)
	events := must(e.DrainKVEvents(64))
	if len(events) == 0 {
		t.Fatal("no events")
	}
	for _, ev := range events {
		if ev.Group != 0 {
			t.Fatalf("event %+v: group %d of a single-group engine", ev, ev.Group)
		}
	}
}

// Issue 26 item 3: reading a config is one call that yields the whole shape, windows included,
// so the budget is the CLI's: `pkv profile --config tools/configs/gemma-2-9b.json --memory 24GiB
// --device cpu` plans 10 sequences of max_model_len (8 if the windows were lost), and Gemma 3
// 27B fits 2 in 24 GiB (ErrOutOfMemory if they were). Gemma 2 also caps its logits (pkv 0.5):
// ParamsFromHFConfig refuses it naming the per-layer call, and ParamsFromHFConfigLayers reads
// it whole, its windows in the specs.
func TestConfigBudgetWithItsWindows(t *testing.T) {
	profile := func(name string, p pkv.EngineParams, maxSeqs uint64, groups uint32) {
		t.Helper()
		p.Device, p.MemoryTotalBytes = pkv.DeviceCPU, 24<<30
		b, err := pkv.Profile(p)
		if err != nil {
			t.Fatalf("%s at 24 GiB: %v", name, err)
		}
		if b.MaxSeqsAtMaxModelLen != maxSeqs || b.NumKVGroups != groups {
			t.Fatalf("%s at 24 GiB: %d sequences in %d groups, want %d in %d (pkv profile's)",
				name, b.MaxSeqsAtMaxModelLen, b.NumKVGroups, maxSeqs, groups)
		}
	}
	p := must(pkv.ParamsFromHFConfig(must(pkv.DefaultParams()), readConfig(t, "gemma-3-27b.json")))
	if len(p.LayerWindows) != 62 {
		t.Fatalf("gemma 3: %d layer windows, want 62", len(p.LayerWindows))
	}
	profile("gemma 3", p, 2, 7)
	_, err := pkv.ParamsFromHFConfig(must(pkv.DefaultParams()), readConfig(t, "gemma-2-9b.json"))
	expectStatus(t, err, pkv.ErrUnsupported)
	if !strings.Contains(err.Error(), "attn_logit_softcapping") {
		t.Fatalf("gemma 2's refusal does not name its field: %v", err)
	}
	p = must(pkv.ParamsFromHFConfigLayers(must(pkv.DefaultParams()), readConfig(t, "gemma-2-9b.json")))
	if len(p.LayerSpecs) != 42 || p.LayerSpecs[0].LogitSoftcap != 50 {
		t.Fatalf("gemma 2: %d layer specs, the first %+v", len(p.LayerSpecs), p.LayerSpecs)
	}
	profile("gemma 2", p, 10, 2)
	// Without its windows Gemma 2 would plan 8.
	p.LayerSpecs = nil
	profile("gemma 2 without windows", p, 8, 1)
}
