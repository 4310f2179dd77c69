package pkv_test

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	"pkv.local/pkv"
)

func smallParams(t *testing.T) pkv.EngineParams {
	t.Helper()
	p, err := pkv.DefaultParams()
	if err != nil {
		t.Fatal(err)
	}
	p.NumLayers, p.NumQHeads, p.NumKVHeads, p.HeadDim = 2, 4, 2, 16
	p.DType, p.BlockSize, p.NumBlocks, p.Device, p.NumThreads = pkv.DTypeF32, 4, 16, pkv.DeviceCPU, 1
	return p
}

func newEngine(t *testing.T, p pkv.EngineParams) *pkv.Engine {
	t.Helper()
	e, err := pkv.NewEngine(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// must returns v, or panics (failing the test run) on an unexpected error.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func runStep(t *testing.T, e *pkv.Engine, seqs ...*pkv.Sequence) {
	t.Helper()
	b := must(e.BeginBatch(seqs, nil))
	defer b.Abort()
	q, kv := make([]float32, b.NumTokens()*64), make([]float32, b.NumTokens()*32)
	for layer := 0; layer < 2; layer++ {
		if err := b.Attention(layer, q, kv, kv, make([]float32, len(q))); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.End(); err != nil {
		t.Fatal(err)
	}
}

func TestHashVectors(t *testing.T) {
	path := os.Getenv("PKV_HASH_VECTORS")
	if path == "" {
		path = filepath.Join("..", "..", "tests", "data", "hash_vectors.txt")
	}
	f := must(os.Open(path))
	defer f.Close()
	cases := 0
	for sc := bufio.NewScanner(f); sc.Scan(); {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		sides := strings.Split(line, "->")
		left, right := strings.Fields(sides[0]), strings.Fields(sides[1])
		seed := must(strconv.ParseUint(left[0], 10, 64))
		var salt []byte
		if left[1] != "-" {
			salt = must(hex.DecodeString(left[1]))
		}
		h := must(pkv.BlockHashRoot(seed, salt))
		got := []string{"0x" + strconv.FormatUint(h, 16)}
		for _, block := range strings.Split(left[2], ";") {
			var tokens []int32
			for _, tok := range strings.Split(block, ",") {
				tokens = append(tokens, int32(must(strconv.ParseInt(tok, 10, 32))))
			}
			h = must(pkv.BlockHash(seed, h, tokens))
			got = append(got, "0x"+strconv.FormatUint(h, 16))
		}
		for i := range right {
			right[i] = "0x" + strings.TrimLeft(right[i][2:], "0")
		}
		if !reflect.DeepEqual(got, right) {
			t.Errorf("%s: got %v", line, got)
		}
		cases++
	}
	if cases < 5 {
		t.Fatalf("%d vectors read", cases)
	}
}

// With adapters and extra keys (pkv 0.5): tests/data/hash_vectors_extra.txt, every key passed
// with every block (those apart from a block add nothing to its hash).
func TestExtraHashVectors(t *testing.T) {
	path := filepath.Join("..", "..", "tests", "data", "hash_vectors_extra.txt")
	if v := os.Getenv("PKV_HASH_VECTORS"); v != "" {
		path = filepath.Join(filepath.Dir(v), "hash_vectors_extra.txt")
	}
	f := must(os.Open(path))
	defer f.Close()
	cases := 0
	for sc := bufio.NewScanner(f); sc.Scan(); {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		sides := strings.Split(line, "->")
		left, right := strings.Fields(sides[0]), strings.Fields(sides[1])
		if len(left) != 5 {
			t.Fatalf("seed salt lora_id keys blocks: %s", line)
		}
		seed := must(strconv.ParseUint(left[0], 10, 64))
		var salt []byte
		if left[1] != "-" {
			salt = must(hex.DecodeString(left[1]))
		}
		lora := must(strconv.ParseUint(left[2], 10, 64))
		var keys []pkv.ExtraKey
		if left[3] != "-" {
			for _, item := range strings.Split(left[3], ",") {
				parts := strings.Split(item, ":")
				keys = append(keys, pkv.ExtraKey{
					StartToken: uint32(must(strconv.ParseUint(parts[0], 10, 32))),
					EndToken:   uint32(must(strconv.ParseUint(parts[1], 10, 32))),
					Key:        must(hex.DecodeString(parts[2]))})
			}
		}
		h := must(pkv.BlockHashRootLoRA(seed, salt, lora))
		got := []string{"0x" + strconv.FormatUint(h, 16)}
		first := uint32(0)
		for _, block := range strings.Split(left[4], ";") {
			var tokens []int32
			for _, tok := range strings.Split(block, ",") {
				tokens = append(tokens, int32(must(strconv.ParseInt(tok, 10, 32))))
			}
			h = must(pkv.BlockHashExtra(seed, h, tokens, first, keys))
			got = append(got, "0x"+strconv.FormatUint(h, 16))
			first += uint32(len(tokens))
		}
		for i := range right {
			right[i] = "0x" + strings.TrimLeft(right[i][2:], "0")
		}
		if !reflect.DeepEqual(got, right) {
			t.Errorf("%s: got %v", line, got)
		}
		cases++
	}
	if cases < 5 {
		t.Fatalf("%d vectors read", cases)
	}
}

func expectStatus(t *testing.T, err error, sentinel *pkv.Error) {
	t.Helper()
	var pe *pkv.Error
	if !errors.As(err, &pe) || !errors.Is(err, sentinel) {
		t.Fatalf("want %v, got %v", sentinel.Status, err)
	}
	if pe.Message == "" || !strings.Contains(err.Error(), pe.Message) {
		t.Fatalf("%v: no message", err)
	}
}

func TestStatuses(t *testing.T) {
	for s := pkv.StatusOK; s >= pkv.StatusStore; s-- {
		if s.Description() == "" || !strings.HasPrefix(s.String(), map[bool]string{true: "OK", false: "ERR_"}[s == 0]) {
			t.Errorf("status %d: %q %q", int32(s), s, s.Description())
		}
	}
	if !errors.Is(&pkv.Error{Status: pkv.StatusNoSpace, Message: "x"}, pkv.ErrNoSpace) ||
		errors.Is(&pkv.Error{Status: pkv.StatusNoSpace}, pkv.ErrNotFound) {
		t.Fatal("errors.Is against the sentinels")
	}
	e := newEngine(t, smallParams(t))
	_, err := e.Allocate(nil, nil)
	expectStatus(t, err, pkv.ErrInvalidArgument)
	_, err = e.Allocate(make([]int32, 4*17), nil)
	expectStatus(t, err, pkv.ErrNoSpace)
	expectStatus(t, e.Sequence(12345).Release(), pkv.ErrNotFound)
	seq := must(e.Allocate([]int32{1, 2, 3, 4, 5}, nil))
	_, err = seq.Fork()
	expectStatus(t, err, pkv.ErrState)
	b := must(e.BeginBatch([]*pkv.Sequence{seq}, nil))
	expectStatus(t, seq.Append(6), pkv.ErrState)
	b.Abort()
	_, err = pkv.ParamsFromHFConfig(smallParams(t), []byte("{"))
	expectStatus(t, err, pkv.ErrInvalidArgument)

	p := smallParams(t)
	p.HeadDim = 12
	e12 := newEngine(t, p)
	b = must(e12.BeginBatch([]*pkv.Sequence{must(e12.Allocate([]int32{1, 2, 3}, nil))}, nil))
	buf := make([]float32, 3*4*12)
	expectStatus(t, b.Attention(0, buf, buf, buf, make([]float32, len(buf))), pkv.ErrUnsupported)
	b.Abort()

	p = smallParams(t)
	p.NumBlocks, p.KVCacheBytes, p.MaxModelLen = 0, 100, 4096
	budget, err := pkv.Profile(p)
	expectStatus(t, err, pkv.ErrOutOfMemory)
	if budget.ShortfallBytes == 0 {
		t.Fatal("no shortfall")
	}
	p = smallParams(t)
	p.Device = pkv.DeviceCUDA
	if e, err := pkv.NewEngine(p); err == nil {
		e.Close()
	} else {
		expectStatus(t, err, pkv.ErrNoDevice)
	}
}

func TestClosedEngineRefused(t *testing.T) {
	e := must(pkv.NewEngine(smallParams(t)))
	seq := must(e.Allocate([]int32{1, 2, 3}, nil))
	b := must(e.BeginBatch([]*pkv.Sequence{seq}, nil))
	e.Close()
	e.Close() // idempotent
	for _, err := range []error{seq.Release(), b.End(), e.Check(),
		func() error { _, err := e.Stats(); return err }(),
		func() error { _, err := e.Allocate([]int32{1}, nil); return err }(),
		func() error { _, err := b.Positions(); return err }()} {
		if err != pkv.ErrClosed {
			t.Fatalf("want ErrClosed, got %v", err)
		}
	}
	b.Abort() // a no-op
	e2 := newEngine(t, smallParams(t))
	b = must(e2.BeginBatch([]*pkv.Sequence{must(e2.Allocate([]int32{1}, nil))}, nil))
	if err := b.End(); err != nil {
		t.Fatal(err)
	}
	if err := b.End(); err != pkv.ErrClosed {
		t.Fatalf("second End: %v", err)
	}
}

func TestNoSpaceChangesNothing(t *testing.T) {
	e := newEngine(t, smallParams(t))
	prompt := make([]int32, 40)
	for i := range prompt {
		prompt[i] = int32(i)
	}
	seq := must(e.Allocate(prompt, nil))
	runStep(t, e, seq)
	before, table := must(e.Stats()), must(seq.BlockTable())
	_, err := e.Allocate(make([]int32, 28), nil)
	expectStatus(t, err, pkv.ErrNoSpace)
	expectStatus(t, seq.Append(make([]int32, 30)...), pkv.ErrNoSpace)
	if after := must(e.Stats()); after != before || !reflect.DeepEqual(must(seq.BlockTable()), table) {
		t.Fatalf("changed: %+v -> %+v", before, after)
	}
	if err := e.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestSequencesAndBatches(t *testing.T) {
	e := newEngine(t, smallParams(t))
	prompt := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	if blocks, cached, err := e.AllocateQuery(prompt, nil); err != nil || blocks != 3 || cached != 0 {
		t.Fatal(blocks, cached, err)
	}
	seq := must(e.Allocate(prompt, nil))
	if !reflect.DeepEqual(must(seq.Tokens()), prompt) {
		t.Fatal("tokens")
	}
	b := must(e.BeginBatch([]*pkv.Sequence{seq}, []uint32{4}))
	if !reflect.DeepEqual(must(b.QueryStart()), []int32{0, 4}) ||
		!reflect.DeepEqual(must(b.SeqIDs()), []uint64{seq.ID}) ||
		!reflect.DeepEqual(must(b.Positions()), []int32{0, 1, 2, 3}) {
		t.Fatal("batch view")
	}
	b.Abort()
	runStep(t, e, seq)
	child := must(seq.Fork())
	if err := seq.Preempt(); err != nil {
		t.Fatal(err)
	}
	if cached := must(seq.Resume()); cached != 8 {
		t.Fatalf("resume: %d cached", cached)
	}
	salted := must(e.Allocate(prompt, []byte("tenant")))
	if info := must(salted.Info()); info.CacheSaltLen != 6 || salted.NumCachedTokens != 0 {
		t.Fatalf("salted: %+v", info)
	}
	for _, s := range []*pkv.Sequence{seq, child, salted} {
		if err := s.Release(); err != nil {
			t.Fatal(err)
		}
	}
	if pool := must(e.PoolInfo()); pool.Device != pkv.DeviceCPU || pool.NumBlocks != 16 {
		t.Fatalf("pool %+v", pool)
	}
	if err := e.SetStream(0); err != nil {
		t.Fatal(err)
	}
}

func TestTruncate(t *testing.T) {
	e := newEngine(t, smallParams(t))
	prompt := make([]int32, 14)
	for i := range prompt {
		prompt[i] = int32(i + 1)
	}
	seq := must(e.Allocate(prompt, nil))
	runStep(t, e, seq)
	if err := seq.Truncate(6); err != nil {
		t.Fatal(err)
	}
	if info := must(seq.Info()); info.NumTokens != 6 || info.NumComputedTokens != 6 || info.NumBlocks != 2 {
		t.Fatalf("after truncate: %+v", info)
	}
	expectStatus(t, seq.Truncate(0), pkv.ErrInvalidArgument)
	expectStatus(t, seq.Truncate(7), pkv.ErrInvalidArgument)
	if err := seq.Release(); err != nil {
		t.Fatal(err)
	}
	if err := e.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentGoroutines(t *testing.T) {
	p := smallParams(t)
	p.NumBlocks = 64
	e := newEngine(t, p)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 300; i++ {
				seq, err := e.Allocate([]int32{int32(g), int32(i), 1, 2, 3}, nil)
				if errors.Is(err, pkv.ErrNoSpace) {
					continue
				} else if err != nil {
					errs <- err
					return
				}
				err = e.Sequence(1 << 40).Release()
				var pe *pkv.Error
				if !errors.As(err, &pe) || !strings.Contains(pe.Message, "sequence") {
					errs <- err // the message read must be this call's
					return
				}
				if err := seq.Append(4); err != nil {
					errs <- err
					return
				}
				if err := seq.Release(); err != nil {
					errs <- err
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if st := must(e.Stats()); st.NumSeqs != 0 {
		t.Fatalf("%d seqs left", st.NumSeqs)
	}
	if err := e.Check(); err != nil {
		t.Fatal(err)
	}
}

// Parameters start from pkv's defaults: a struct literal is refused with a Go error that says
// so, before pkv sees it.
func TestUninitializedParams(t *testing.T) {
	literal := pkv.EngineParams{NumLayers: 2, NumQHeads: 4, NumKVHeads: 2, HeadDim: 16, Device: pkv.DeviceCPU}
	_, err1 := pkv.NewEngine(literal)
	_, err2 := pkv.Profile(literal)
	_, err3 := pkv.KVGroupsOf(literal)
	_, err4 := pkv.NewEngineWithStore(literal, pkv.StoreConfig{Store: pkv.NewMapStore()})
	_, err5 := pkv.ParamsFromHFConfig(literal, []byte("{}"))
	for _, err := range []error{err1, err2, err3, err4, err5} {
		if !errors.Is(err, pkv.ErrUninitialized) || !strings.Contains(err.Error(), "pkv.DefaultParams()") ||
			strings.Contains(err.Error(), "struct_size") {
			t.Fatalf("literal params: %v", err)
		}
	}
	e := newEngine(t, smallParams(t))
	_, err := e.Submit([]int32{1, 2, 3}, &pkv.RequestParams{MaxNewTokens: 4}, nil)
	if !errors.Is(err, pkv.ErrUninitialized) || !strings.Contains(err.Error(), "pkv.DefaultRequestParams()") {
		t.Fatalf("literal request params: %v", err)
	}
	// Params() of an engine are initialized: they make another engine
	newEngine(t, e.Params())
}

// Go names: typed enums with String, bool on/off fields, initialisms upper-case.
func TestGoTypes(t *testing.T) {
	p := must(pkv.DefaultParams())
	if p.DType != pkv.DTypeBF16 || p.Device != pkv.DeviceAuto || !p.EnablePrefixCaching || p.EnableKVEvents ||
		!p.HostOffload || p.TPSize != 1 || p.DeviceID != 0 || p.PreemptionMode != pkv.PreemptRecompute {
		t.Fatalf("defaults %+v", p)
	}
	if s := fmt.Sprint(pkv.DTypeBF16, " ", pkv.DeviceCPU, " ", pkv.TierHost, " ", pkv.DType(42)); s != "DTYPE_BF16 DEVICE_CPU TIER_HOST DType(42)" {
		t.Fatalf("names %q", s)
	}
	if s := fmt.Sprint(pkv.StoreValueBad, " ", pkv.DebugConstantHash); s != "STORE_VALUE_BAD DEBUG_CONSTANT_HASH" {
		t.Fatalf("names %q", s)
	}
	// A flag of the typed DebugFlags reaches pkv: constant hashes still serve exact prefixes.
	d := smallParams(t)
	d.DebugFlags = pkv.DebugConstantHash
	de := newEngine(t, d)
	runStep(t, de, must(de.Allocate([]int32{1, 2, 3, 4, 5}, nil)))
	if hit := must(de.Allocate([]int32{1, 2, 3, 4, 9}, nil)); hit.NumCachedTokens != 4 ||
		de.Params().DebugFlags != pkv.DebugConstantHash {
		t.Fatalf("cached %d, flags %v", hit.NumCachedTokens, de.Params().DebugFlags)
	}
	d.DebugFlags = 1 << 31 // a bit pkv does not know (2 became DebugTestClock in 0.8)
	_, err := pkv.NewEngine(d)
	expectStatus(t, err, pkv.ErrInvalidArgument)
	p.NumLayers, p.NumQHeads, p.NumKVHeads, p.HeadDim = 2, 4, 2, 16
	p.DType, p.Device, p.NumBlocks, p.EnablePrefixCaching = pkv.DTypeF16, pkv.DeviceCPU, 8, false
	e := newEngine(t, p)
	got := e.Params()
	if got.DType != pkv.DTypeF16 || got.EnablePrefixCaching || got.Device != pkv.DeviceCPU {
		t.Fatalf("Params %+v", got)
	}
	pool := must(e.PoolInfo())
	if pool.DType != pkv.DTypeF16 || pool.ModelDType != pkv.DTypeF16 || pool.Kernels == "" {
		t.Fatalf("pool %+v", pool)
	}
	if b := must(e.Budget()); b.Source != pkv.BudgetFixedBlocks || b.Device != pkv.DeviceCPU {
		t.Fatalf("budget %+v", b)
	}
	info := must(must(e.Allocate([]int32{1, 2, 3}, nil)).Info())
	if info.IsPreempted || info.InBatch || info.IsRequest || info.KVTier != pkv.TierDevice {
		t.Fatalf("info %+v", info)
	}
}
