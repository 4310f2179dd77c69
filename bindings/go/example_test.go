package pkv_test

// Examples (go doc shows them; go test runs them and checks their output).

import (
	"fmt"
	"os"
	"path/filepath"

	"pkv.local/pkv"
)

// exampleParams: a small f32 CPU engine, 2 layers of 4 q heads and 2 kv heads of 16.
func exampleParams() pkv.EngineParams {
	p, err := pkv.DefaultParams()
	if err != nil {
		panic(err)
	}
	p.NumLayers, p.NumQHeads, p.NumKVHeads, p.HeadDim = 2, 4, 2, 16
	p.DType, p.BlockSize, p.NumBlocks, p.Device, p.NumThreads = pkv.DTypeF32, 4, 32, pkv.DeviceCPU, 1
	return p
}

// The scheduler's loop: Step plans a batch, the host runs attention for every layer, Commit
// hands back the sampled tokens. A batch of Step ends with Commit or Abort, never End.
func ExampleEngine_Step() {
	e, err := pkv.NewEngine(exampleParams())
	if err != nil {
		panic(err)
	}
	defer e.Close()
	rp, _ := pkv.DefaultRequestParams()
	rp.MaxNewTokens = 3
	seq, err := e.Submit([]int32{1, 2, 3, 4, 5, 6}, &rp, nil)
	if err != nil {
		panic(err)
	}
	for steps := 1; ; steps++ {
		b, err := e.Step()
		if err != nil || b == nil {
			break
		}
		n := b.NumTokens()
		q, kv, out := make([]float32, n*4*16), make([]float32, n*2*16), make([]float32, n*4*16)
		for layer := 0; layer < 2; layer++ {
			if err := b.Attention(layer, q, kv, kv, out); err != nil {
				b.Abort()
				panic(err)
			}
		}
		if steps == 1 {
			fmt.Println("End:", b.End() != nil) // refused; the batch stays open
		}
		sampled := []int32{int32(100 + steps)} // the model's token, one per sequence
		if err := b.Commit(sampled); err != nil {
			b.Abort()
			panic(err)
		}
		fmt.Printf("step %d: %d tokens\n", steps, n)
	}
	tokens, _ := seq.Tokens()
	fmt.Println(tokens)
	// Output:
	// End: true
	// step 1: 6 tokens
	// step 2: 1 tokens
	// step 3: 1 tokens
	// [1 2 3 4 5 6 101 102 103]
}

// Reading a config is one call that yields the whole shape, Gemma 3's windows included.
func ExampleParamsFromHFConfig() {
	text, err := os.ReadFile(filepath.Join("..", "..", "tools", "configs", "gemma-3-27b.json"))
	if err != nil {
		panic(err)
	}
	base, _ := pkv.DefaultParams()
	p, err := pkv.ParamsFromHFConfig(base, text)
	if err != nil {
		panic(err)
	}
	p.Device, p.MemoryTotalBytes = pkv.DeviceCPU, 24<<30
	b, err := pkv.Profile(p)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%d layers, windows %v...; %d KV groups\n", p.NumLayers, p.LayerWindows[:6], b.NumKVGroups)
	fmt.Printf("%d sequences of %d tokens in 24 GiB\n", b.MaxSeqsAtMaxModelLen, p.MaxModelLen)
	// Output:
	// 62 layers, windows [1024 1024 1024 1024 1024 0]...; 7 KV groups
	// 2 sequences of 131072 tokens in 24 GiB
}

// A model whose layers differ beyond their windows (Gemma 2 caps its logits) is read per layer.
func ExampleParamsFromHFConfigLayers() {
	text, err := os.ReadFile(filepath.Join("..", "..", "tools", "configs", "gemma-2-9b.json"))
	if err != nil {
		panic(err)
	}
	base, _ := pkv.DefaultParams()
	p, err := pkv.ParamsFromHFConfigLayers(base, text)
	if err != nil {
		panic(err)
	}
	p.Device, p.MemoryTotalBytes = pkv.DeviceCPU, 24<<30
	b, err := pkv.Profile(p)
	if err != nil {
		panic(err)
	}
	s := p.LayerSpecs
	fmt.Printf("%d layers: %v %d, %v %d, ...; soft-cap %v; %d KV groups\n", len(s), s[0].Attention,
		s[0].Window, s[1].Attention, s[1].Window, s[0].LogitSoftcap, b.NumKVGroups)
	fmt.Printf("%d sequences of %d tokens in 24 GiB\n", b.MaxSeqsAtMaxModelLen, p.MaxModelLen)
	// Output:
	// 42 layers: ATTENTION_SLIDING 4096, ATTENTION_FULL 0, ...; soft-cap 50; 2 KV groups
	// 10 sequences of 8192 tokens in 24 GiB
}

// Administering a FILE store an engine wrote: what it holds, whether every value is whole, and
// clearing it.
func ExampleOpenStore() {
	dir, err := os.MkdirTemp("", "pkv-store-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	sc := pkv.StoreConfig{Kind: pkv.StoreFile, Path: dir, ModelID: "example/small@1"}
	p := exampleParams()
	p.HostNumBlocks = 16 // the store tier needs a host tier
	e, err := pkv.NewEngineWithStore(p, sc)
	if err != nil {
		panic(err)
	}
	seq, _ := e.Allocate([]int32{1, 2, 3, 4, 5, 6, 7, 8, 9}, nil) // 2 full blocks
	b, _ := e.BeginBatch([]*pkv.Sequence{seq}, nil)
	if err := b.Copy(); err != nil { // no attention here: the step "ran"
		panic(err)
	}
	if err := b.End(); err != nil {
		panic(err)
	}
	e.Close() // waits for the store's writes

	a, err := pkv.OpenStore(sc)
	if err != nil {
		panic(err)
	}
	defer a.Close()
	info, _ := a.Info()
	fmt.Println(info.Kind, info.NumBlocks, "blocks")
	l := a.List()
	for l.Next() {
		fmt.Println(l.Entry().State, l.Entry().NumTokens, "tokens")
	}
	res, _ := a.Verify(false)
	fmt.Println("good:", res.NumGood, "bad:", res.NumBad)
	removed, _ := a.Clear()
	fmt.Println("removed:", removed)
	// Output:
	// STORE_FILE 2 blocks
	// STORE_VALUE_GOOD 4 tokens
	// STORE_VALUE_GOOD 4 tokens
	// good: 2 bad: 0
	// removed: 2
}
