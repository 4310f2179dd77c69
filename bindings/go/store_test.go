package pkv_test

// The store tier (pkv 0.2): an engine writes its sealed prefix blocks to a store, a second engine
// on the same store gets them back as cached tokens; the host's own Store (called from pkv's
// threads through cgo), a failing one (a miss with its message, never an error) and a file store.

import (
	"errors"
	"strings"
	"testing"

	"pkv.local/pkv"
)

var storePrompt = tokenRange(1, 13) // 3 full blocks of 4 + 1 token: 3 blocks sealed and written

// testModelID names the tests' model in their stores (StoreConfig.ModelID).
const testModelID = "pkv-go-tests/small@1"

func storeEngine(t *testing.T, sc pkv.StoreConfig) *pkv.Engine {
	t.Helper()
	e, err := pkv.NewEngineWithStore(hostParams(t), sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// computePrompt runs engine a on storePrompt, then closes it: its queued writes are done.
func computePrompt(t *testing.T, sc pkv.StoreConfig) {
	a := storeEngine(t, sc)
	runStep(t, a, must(a.Allocate(storePrompt, nil)))
	a.Close()
}

func shareThroughStore(t *testing.T, sc pkv.StoreConfig) {
	computePrompt(t, sc)
	b := storeEngine(t, sc)
	s := must(b.Allocate(storePrompt, nil))
	if s.NumCachedTokens != 12 {
		t.Fatalf("cached %d tokens, want 12", s.NumCachedTokens)
	}
	st := must(b.Stats())
	if st.StoreHitTokens != 12 || st.NumStoreLookups != 3 || st.NumStoreHits != 3 || st.NumStoreErrors != 0 {
		t.Fatalf("stats %+v", st)
	}
	if msg := must(b.StoreError()); msg != "" {
		t.Fatalf("StoreError %q", msg)
	}
	runStep(t, b, s) // the loads, then the last token
	if info := must(s.Info()); info.NumComputedTokens != 13 {
		t.Fatalf("computed %d", info.NumComputedTokens)
	}
	if err := b.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestCallbackStoreSharedBetweenEngines(t *testing.T) {
	store := pkv.NewMapStore()
	shareThroughStore(t, pkv.StoreConfig{Store: store, ModelID: testModelID})
	if store.Len() != 3 {
		t.Fatalf("the store holds %d values, want 3", store.Len())
	}
}

// failingStore's Get fails (and a panicking one panics); Put works.
type failingStore struct {
	*pkv.MapStore
	panics bool
}

func (s failingStore) Get(key pkv.StoreKey) ([]byte, bool, error) {
	if s.panics {
		panic("the test store fell over")
	}
	return nil, false, errors.New("the test store is down")
}

func TestFailingStoreIsAMissWithItsMessage(t *testing.T) {
	for _, c := range []struct {
		panics bool
		want   string
	}{{false, "the test store is down"}, {true, "panic: the test store fell over"}} {
		sc := pkv.StoreConfig{Store: failingStore{pkv.NewMapStore(), c.panics}, ModelID: testModelID}
		computePrompt(t, sc)
		b := storeEngine(t, sc)
		s := must(b.Allocate(storePrompt, nil))
		st := must(b.Stats())
		if s.NumCachedTokens != 0 || st.NumStoreErrors != 3 || st.NumStoreHits != 0 {
			t.Fatalf("cached %d, stats %+v", s.NumCachedTokens, st)
		}
		if msg := must(b.StoreError()); !strings.Contains(msg, c.want) {
			t.Fatalf("StoreError %q lacks %q", msg, c.want)
		}
		if err := b.Check(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFileStore(t *testing.T) {
	shareThroughStore(t, pkv.StoreConfig{Kind: pkv.StoreFile, Path: t.TempDir(), ModelID: testModelID})
}

// Two models of one KV shape (two fine-tunes of one base) share nothing through a store when
// their ModelIDs differ; a store without one says what it risks.
func TestStoreModelID(t *testing.T) {
	sc := pkv.StoreConfig{Kind: pkv.StoreFile, Path: t.TempDir(), ModelID: "org/base-ft-a@1"}
	computePrompt(t, sc)
	other := sc
	other.ModelID = "org/base-ft-b@1"
	b := storeEngine(t, other)
	if s := must(b.Allocate(storePrompt, nil)); s.NumCachedTokens != 0 {
		t.Fatalf("another model's engine read %d cached tokens", s.NumCachedTokens)
	}
	same := storeEngine(t, sc)
	if s := must(same.Allocate(storePrompt, nil)); s.NumCachedTokens != 12 {
		t.Fatalf("the same model's engine read %d cached tokens", s.NumCachedTokens)
	}
	none := storeEngine(t, pkv.StoreConfig{Kind: pkv.StoreFile, Path: t.TempDir()})
	if msg := must(none.StoreError()); !strings.Contains(msg, "model_id") {
		t.Fatalf("a store without a model id: StoreError %q", msg)
	}

	gemma, err := pkv.HFConfigDigest(readConfig(t, "gemma-2-9b.json"))
	if err != nil || !strings.HasPrefix(gemma, "config-sha256:") || len(gemma) != len("config-sha256:")+64 {
		t.Fatalf("digest %q, %v", gemma, err)
	}
	if llama := must(pkv.HFConfigDigest(readConfig(t, "llama-3-8b.json"))); llama == gemma {
		t.Fatal("two configs, one digest")
	}
	_, err = pkv.HFConfigDigest([]byte("{"))
	expectStatus(t, err, pkv.ErrInvalidArgument)
}

func TestBadStoreConfigIsRefused(t *testing.T) {
	_, err := pkv.NewEngineWithStore(smallParams(t), pkv.StoreConfig{Store: pkv.NewMapStore()})
	expectStatus(t, err, pkv.ErrInvalidArgument) // no host tier
	_, err = pkv.NewEngineWithStore(hostParams(t), pkv.StoreConfig{Kind: pkv.StoreFile})
	expectStatus(t, err, pkv.ErrInvalidArgument) // no path
	e := newEngine(t, smallParams(t))
	if msg := must(e.StoreError()); msg != "" {
		t.Fatalf("StoreError %q without a store", msg)
	}
	if pkv.ErrStore.Status != pkv.StatusStore || pkv.StatusStore.String() != "ERR_STORE" {
		t.Fatal("ErrStore")
	}
}
