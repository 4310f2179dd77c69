package pkv_test

// Extra keys and a LoRA adapter in block identity (pkv 0.5, issue 27 items 5 and 8): two
// prompts of the same placeholder tokens hit each other only under the same item key, the
// text before the item stays shared, adapters never share, the events carry both, and the
// canonical hashes reduce to 0.4's without them.

import (
	"testing"

	"pkv.local/pkv"
)

// keyedEngine: block size 4, prefix caching and KV events on.
func keyedEngine(t *testing.T) *pkv.Engine {
	p := smallParams(t)
	p.NumBlocks, p.EnableKVEvents = 64, true
	return newEngine(t, p)
}

// image is an item over the prompt's placeholder tokens 4 .. 7 (its second block).
func image(key string) []pkv.ExtraKey {
	return []pkv.ExtraKey{{StartToken: 4, EndToken: 8, Key: []byte(key)}}
}

func TestExtraKeysInIdentity(t *testing.T) {
	e := keyedEngine(t)
	prompt := []int32{1, 2, 3, 4, 99, 99, 99, 99, 5, 6, 7, 8, 9}
	s := must(e.AllocateKeyed(prompt, pkv.SeqKeys{ExtraKeys: image("image-a")}))
	runStep(t, e, s)
	cases := []struct {
		name   string
		keys   pkv.SeqKeys
		cached uint32
	}{
		{"the same image", pkv.SeqKeys{ExtraKeys: image("image-a")}, 12},
		{"another image: the text before it only", pkv.SeqKeys{ExtraKeys: image("image-b")}, 4},
		{"no image: the text before it only", pkv.SeqKeys{}, 4},
		{"the same image, another adapter", pkv.SeqKeys{ExtraKeys: image("image-a"), LoraID: 7}, 0},
	}
	for _, c := range cases {
		if _, cached, err := e.AllocateQueryKeyed(prompt, c.keys); err != nil || cached != c.cached {
			t.Fatalf("%s: %d tokens cached (%v), want %d", c.name, cached, err, c.cached)
		}
	}
	other := must(e.AllocateKeyed(prompt, pkv.SeqKeys{ExtraKeys: image("image-a")}))
	if other.NumCachedTokens != 12 {
		t.Fatalf("the same image: %d tokens cached, want 12", other.NumCachedTokens)
	}
}

func TestExtraKeysRefused(t *testing.T) {
	e := keyedEngine(t)
	prompt := tokenRange(1, 8)
	before := must(e.Stats())
	bad := []struct {
		name string
		keys []pkv.ExtraKey
	}{
		{"past the prompt", []pkv.ExtraKey{{StartToken: 4, EndToken: 9, Key: []byte("x")}}},
		{"empty range", []pkv.ExtraKey{{StartToken: 4, EndToken: 4, Key: []byte("x")}}},
		{"no bytes", []pkv.ExtraKey{{StartToken: 0, EndToken: 4}}},
		{"overlapping", []pkv.ExtraKey{{StartToken: 0, EndToken: 4, Key: []byte("x")},
			{StartToken: 3, EndToken: 6, Key: []byte("y")}}},
		{"too long a key", []pkv.ExtraKey{{StartToken: 0, EndToken: 4, Key: make([]byte, pkv.MaxExtraKeyBytes+1)}}},
	}
	for _, c := range bad {
		_, err := e.AllocateKeyed(prompt, pkv.SeqKeys{ExtraKeys: c.keys})
		expectStatus(t, err, pkv.ErrInvalidArgument)
		rp := must(pkv.DefaultRequestParams())
		rp.ExtraKeys = c.keys
		_, err = e.Submit(prompt, &rp, nil)
		expectStatus(t, err, pkv.ErrInvalidArgument)
	}
	if after := must(e.Stats()); after != before {
		t.Fatalf("refused keys changed the engine: %+v -> %+v", before, after)
	}
}

func TestKeyedEvents(t *testing.T) {
	e := keyedEngine(t)
	runStep(t, e, must(e.AllocateKeyed([]int32{1, 2, 3, 4, 99, 99, 99, 99, 5},
		pkv.SeqKeys{ExtraKeys: image("image-a"), LoraID: 7})))
	events := must(e.DrainKVEvents(16))
	if len(events) != 2 {
		t.Fatalf("%d events, want 2 blocks stored: %+v", len(events), events)
	}
	for i, ev := range events {
		if ev.Type != pkv.EventBlockStored || ev.LoraID != 7 || ev.NumExtraKeys != uint32(i) {
			t.Fatalf("event %d: %+v (want lora 7, %d extra keys)", i, ev, i)
		}
	}
	// the stored blocks' hashes are the canonical ones of the same keys
	root := must(pkv.BlockHashRootLoRA(0, nil, 7))
	h0 := must(pkv.BlockHashExtra(0, root, []int32{1, 2, 3, 4}, 0, image("image-a")))
	h1 := must(pkv.BlockHashExtra(0, h0, []int32{99, 99, 99, 99}, 4, image("image-a")))
	if events[0].ParentHash != root || events[0].BlockHash != h0 || events[1].BlockHash != h1 {
		t.Fatalf("events %+v, want root %#x, hashes %#x %#x", events, root, h0, h1)
	}
}

func TestKeyedHashesReduceToPlainOnes(t *testing.T) {
	salt := []byte("tenant-a")
	for _, seed := range []uint64{0, 42} {
		plain, lora0 := must(pkv.BlockHashRoot(seed, salt)), must(pkv.BlockHashRootLoRA(seed, salt, 0))
		if plain != lora0 || must(pkv.BlockHashRootLoRA(seed, salt, 7)) == plain {
			t.Fatalf("seed %d: lora 0 must be the plain root, another lora another root", seed)
		}
		tokens := []int32{1, 2, 3, 4}
		h := must(pkv.BlockHash(seed, plain, tokens))
		if got := must(pkv.BlockHashExtra(seed, plain, tokens, 0, nil)); got != h {
			t.Fatalf("no keys: %#x, BlockHash %#x", got, h)
		}
		if got := must(pkv.BlockHashExtra(seed, plain, tokens, 0, image("later"))); got != h {
			t.Fatalf("a key after the block: %#x, BlockHash %#x", got, h)
		}
		if must(pkv.BlockHashExtra(seed, plain, tokens, 4, image("a"))) ==
			must(pkv.BlockHashExtra(seed, plain, tokens, 4, image("b"))) {
			t.Fatal("two keys over the block give one hash")
		}
	}
	_, err := pkv.BlockHashExtra(0, 0, []int32{1}, 0, []pkv.ExtraKey{{StartToken: 0, EndToken: 1}})
	expectStatus(t, err, pkv.ErrInvalidArgument)
}
