package pkv

// Extra keys and a LoRA adapter in block identity (pkv 0.5): a prompt's multimodal items (each
// a content hash over its placeholder tokens) and the adapter its KV is computed with join the
// canonical hash of every block they touch, and a cached block hits only under equal ones.

// #include <stdlib.h>
// #include <pkv/pkv.h>
import "C"

import "unsafe"

// ExtraKey is an extra key of a prompt (pkv_extra_key): Key's bytes (1 ..
// MaxExtraKeyBytes, e.g. an image's content hash) over the tokens [StartToken, EndToken).
// A prompt's keys are sorted by StartToken and do not overlap.
type ExtraKey struct {
	StartToken uint32
	EndToken   uint32
	Key        []byte
}

// SeqKeys are what tells a prompt's blocks apart beyond its tokens: the cache salt (nil: none),
// the extra keys (nil: none) and the LoRA adapter (0: none).
type SeqKeys struct {
	Salt      []byte
	ExtraKeys []ExtraKey
	LoraID    uint64
}

// cExtraKeys copies keys and their bytes into m's C memory: the array's address, or 0 for none.
// A key pkv would refuse is passed as it is, for pkv's message naming its index and rule.
func cExtraKeys(m *cMem, keys []ExtraKey) uintptr {
	if len(keys) == 0 {
		return 0
	}
	out := unsafe.Slice((*cExtraKey)(m.alloc(uintptr(len(keys))*unsafe.Sizeof(cExtraKey{}))), len(keys))
	for i, k := range keys {
		out[i] = cExtraKey{StartToken: k.StartToken, EndToken: k.EndToken, KeyLen: uint32(len(k.Key))}
		if len(k.Key) > 0 {
			b := m.alloc(uintptr(len(k.Key)))
			copy(unsafe.Slice((*byte)(b), len(k.Key)), k.Key)
			out[i].Key = uintptr(b)
		}
	}
	return uintptr(unsafe.Pointer(&out[0]))
}

// withKeys calls fn with a pkv_seq_params of k, in C memory freed after.
func withKeys(k SeqKeys, fn func(*C.pkv_seq_params) C.pkv_status) C.pkv_status {
	return withParams(k, Retention{}, fn)
}

// withParams is withKeys with a retention (pkv 0.8) in the params too.
func withParams(k SeqKeys, r Retention, fn func(*C.pkv_seq_params) C.pkv_status) C.pkv_status {
	var m cMem
	defer m.free()
	sp := (*cSeqParams)(m.alloc(unsafe.Sizeof(cSeqParams{})))
	if s := C.pkv_seq_params_init((*C.pkv_seq_params)(unsafe.Pointer(sp)), C.uint32_t(unsafe.Sizeof(*sp))); s != 0 {
		return s
	}
	if len(k.Salt) > 0 {
		salt := m.alloc(uintptr(len(k.Salt)))
		copy(unsafe.Slice((*byte)(salt), len(k.Salt)), k.Salt)
		sp.CacheSalt, sp.CacheSaltLen = uintptr(salt), uint32(len(k.Salt))
	}
	sp.ExtraKeys, sp.NumExtraKeys = cExtraKeys(&m, k.ExtraKeys), uint32(len(k.ExtraKeys))
	sp.ExtraKeySize, sp.LoraID = uint32(unsafe.Sizeof(cExtraKey{})), k.LoraID
	sp.CachePriority, sp.CacheRetentionMs = r.Priority, r.RetentionMs
	return fn((*C.pkv_seq_params)(unsafe.Pointer(sp)))
}

// AllocateKeyed is Allocate of a prompt with extra keys and a LoRA adapter (pkv_allocate):
// its blocks hit only blocks of equal tokens, extra keys and adapter; blocks before the first
// key keep their text prefix shared. ErrNoSpace: nothing changed.
func (eng *Engine) AllocateKeyed(tokens []int32, k SeqKeys) (*Sequence, error) {
	var id C.uint64_t
	var cached C.uint32_t
	err := eng.call(func(e *C.pkv_engine) C.pkv_status {
		return withKeys(k, func(sp *C.pkv_seq_params) C.pkv_status {
			return C.pkv_allocate(e, int32Ptr(tokens), C.uint32_t(len(tokens)), sp, &id, &cached)
		})
	})
	if err != nil {
		return nil, err
	}
	return &Sequence{Engine: eng, ID: uint64(id), NumCachedTokens: uint32(cached)}, nil
}

// AllocateQueryKeyed is AllocateQuery of a prompt with extra keys and a LoRA adapter.
func (eng *Engine) AllocateQueryKeyed(tokens []int32, k SeqKeys) (numBlocks, numCachedTokens uint32, err error) {
	var blocks, cached C.uint32_t
	err = eng.call(func(e *C.pkv_engine) C.pkv_status {
		return withKeys(k, func(sp *C.pkv_seq_params) C.pkv_status {
			return C.pkv_allocate_query(e, int32Ptr(tokens), C.uint32_t(len(tokens)), sp, &blocks, &cached)
		})
	})
	return uint32(blocks), uint32(cached), err
}

// BlockHashRootLoRA is the root a prompt's first block chains from under a LoRA adapter
// (pkv_block_hash_root_lora): BlockHashRoot's when loraID is 0.
func BlockHashRootLoRA(seed uint64, salt []byte, loraID uint64) (uint64, error) {
	var h C.uint64_t
	var ptr unsafe.Pointer
	if len(salt) > 0 {
		ptr = unsafe.Pointer(&salt[0])
	}
	err := check(func() C.pkv_status {
		return C.pkv_block_hash_root_lora(C.uint64_t(seed), ptr, C.uint32_t(len(salt)), C.uint64_t(loraID), &h)
	})
	return uint64(h), err
}

// BlockHashExtra is the canonical hash of a block with extra keys (pkv_block_hash_extra): its
// tokens are the prompt's [firstToken, firstToken+len(tokens)), keys all the prompt's (those
// not overlapping the block are skipped). BlockHash's when none overlaps it.
func BlockHashExtra(seed, parentHash uint64, tokens []int32, firstToken uint32, keys []ExtraKey) (uint64, error) {
	var h C.uint64_t
	var m cMem
	defer m.free()
	ck := cExtraKeys(&m, keys)
	err := check(func() C.pkv_status {
		return C.pkv_block_hash_extra(C.uint64_t(seed), C.uint64_t(parentHash), int32Ptr(tokens),
			C.uint32_t(len(tokens)), C.uint32_t(firstToken), (*C.pkv_extra_key)(addr(ck)), C.uint32_t(len(keys)),
			C.uint32_t(unsafe.Sizeof(cExtraKey{})), &h)
	})
	return uint64(h), err
}
