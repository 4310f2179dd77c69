package pkv_test

// Store administration (issue 26 item 9): a FILE store an engine filled, seen through StoreAdmin:
// Info, List (values read and checked), ListKeys, Verify finding and removing a damaged value,
// a read-only handle's refusals, Clear, and the handle's errors.

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pkv.local/pkv"
)

// filledStore is a FILE store in a temporary directory that an engine wrote storePrompt's 3
// blocks to.
func filledStore(t *testing.T) pkv.StoreConfig {
	sc := pkv.StoreConfig{Kind: pkv.StoreFile, Path: t.TempDir(), ModelID: testModelID}
	computePrompt(t, sc)
	return sc
}

func openStore(t *testing.T, sc pkv.StoreConfig) *pkv.StoreAdmin {
	t.Helper()
	a, err := pkv.OpenStore(sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

func TestStoreAdminListsWhatAnEngineWrote(t *testing.T) {
	sc := filledStore(t)
	a := openStore(t, sc)
	info := must(a.Info())
	if info.Kind != pkv.StoreFile || info.NumBlocks != 3 || info.TotalBytes == 0 {
		t.Fatalf("info %+v", info)
	}
	entries := must(a.List().All())
	if len(entries) != 3 {
		t.Fatalf("%d entries listed", len(entries))
	}
	var size uint64
	parents := map[pkv.StoreKey]bool{}
	for _, e := range entries {
		if e.State != pkv.StoreValueGood || e.NumTokens != 4 || e.PayloadBytes == 0 || e.Problem != "" {
			t.Fatalf("entry %+v (%v)", e, e.State)
		}
		size += e.ValueBytes
		parents[e.Parent] = true
	}
	if size != info.TotalBytes || len(parents) != 3 {
		t.Fatalf("sizes %d of %d, %d distinct parents", size, info.TotalBytes, len(parents))
	}
	for _, e := range entries { // a chain: two blocks' parents are the other blocks
		delete(parents, e.Key)
	}
	if len(parents) != 1 {
		t.Fatalf("the blocks do not chain from one root: %v", parents)
	}
	// In pages of one and of two: the same entries, whatever the pages.
	for _, page := range []int{1, 2} {
		old := pkv.SetStoreListPage(page)
		paged := must(a.List().All())
		pkv.SetStoreListPage(old)
		if !sameEntries(paged, entries) {
			t.Fatalf("pages of %d: %+v", page, paged)
		}
	}
	keys := must(a.ListKeys().All())
	if len(keys) != 3 || keys[0].State != pkv.StoreValueUnread || keys[0].NumTokens != 0 {
		t.Fatalf("keys only: %+v", keys)
	}
	if name := entries[0].Key.String(); len(name) != 64 || strings.Trim(name, "0123456789abcdef") != "" {
		t.Fatalf("key text %q", name)
	}
}

// damage overwrites the middle of one block file.
func damage(t *testing.T, dir string) {
	files, _ := filepath.Glob(filepath.Join(dir, "*", "*.blk"))
	if len(files) != 3 {
		t.Fatalf("block files %v", files)
	}
	f, err := os.OpenFile(files[1], os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st := must(f.Stat())
	if _, err := f.WriteAt([]byte("not KV"), st.Size()/2); err != nil {
		t.Fatal(err)
	}
}

func TestStoreAdminVerifyRemovesBadValues(t *testing.T) {
	sc := filledStore(t)
	damage(t, sc.Path)
	ro := sc
	ro.WriteMode = pkv.StoreReadOnly
	r := openStore(t, ro)
	res := must(r.Verify(false))
	if res.NumBlocks != 3 || res.NumGood != 2 || res.NumBad != 1 || res.NumRemoved != 0 ||
		res.FirstBadProblem == "" || res.FirstBadKey == (pkv.StoreKey{}) {
		t.Fatalf("verify %+v", res)
	}
	var bad []pkv.StoreEntry
	l := r.List()
	for l.Next() {
		if e := l.Entry(); e.State == pkv.StoreValueBad {
			bad = append(bad, e)
		}
	}
	if l.Err() != nil || len(bad) != 1 || bad[0].Key != res.FirstBadKey || bad[0].Problem == "" {
		t.Fatalf("bad entries %+v, %v", bad, l.Err())
	}
	_, err := r.Verify(true)
	expectStatus(t, err, pkv.ErrState) // read-only: nothing removed
	_, err = r.Clear()
	expectStatus(t, err, pkv.ErrState)
	if n := must(r.Info()).NumBlocks; n != 3 {
		t.Fatalf("a read-only handle removed blocks: %d left", n)
	}

	w := openStore(t, sc)
	res = must(w.Verify(true))
	if res.NumBad != 1 || res.NumRemoved != 1 || res.NumGood != 2 {
		t.Fatalf("verify, removing: %+v", res)
	}
	if n := must(w.Info()).NumBlocks; n != 2 {
		t.Fatalf("%d blocks after removing the bad one", n)
	}
	if removed := must(w.Clear()); removed != 2 {
		t.Fatalf("clear removed %d", removed)
	}
	if info := must(w.Info()); info.NumBlocks != 0 || info.TotalBytes != 0 {
		t.Fatalf("after clear %+v", info)
	}
	if entries := must(w.List().All()); len(entries) != 0 {
		t.Fatalf("listed after clear: %+v", entries)
	}
}

func TestStoreAdminHandleErrors(t *testing.T) {
	a := openStore(t, filledStore(t))
	first := a.ListKeys()
	if !first.Next() {
		t.Fatal(first.Err())
	}
	second := a.List() // a handle lists one listing at a time
	for first.Next() {
	}
	expectStatus(t, first.Err(), pkv.ErrState)
	if n := len(must(second.All())); n != 3 {
		t.Fatalf("the second listing: %d", n)
	}
	a.Close()
	a.Close() // idempotent
	if _, err := a.Info(); err != pkv.ErrClosed {
		t.Fatalf("Info after Close: %v", err)
	}
	if l := a.List(); l.Next() || l.Err() != pkv.ErrClosed {
		t.Fatalf("List after Close: %v", l.Err())
	}

	_, err := pkv.OpenStore(pkv.StoreConfig{Store: pkv.NewMapStore()})
	expectStatus(t, err, pkv.ErrUnsupported)
	_, err = pkv.OpenStore(pkv.StoreConfig{})
	expectStatus(t, err, pkv.ErrInvalidArgument)
	_, err = pkv.OpenStore(pkv.StoreConfig{Kind: pkv.StoreFile, Path: filepath.Join(t.TempDir(), "none")})
	expectStatus(t, err, pkv.ErrStore)
	if !errors.Is(err, pkv.ErrStore) || !strings.Contains(err.Error(), "none") {
		t.Fatalf("a missing directory: %v", err)
	}
}

// sameEntries: the same entries, in any order.
func sameEntries(a, b []pkv.StoreEntry) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[pkv.StoreKey]pkv.StoreEntry{}
	for _, e := range a {
		seen[e.Key] = e
	}
	for _, e := range b {
		if got, ok := seen[e.Key]; !ok || got != e {
			return false
		}
	}
	return true
}
