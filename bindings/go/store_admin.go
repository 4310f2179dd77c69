package pkv

// Store administration (pkv_store_open/info/list/verify/clear/close, pkv 0.2): StoreAdmin, a
// handle on a FILE or Redis store with no engine and no model, for what `pkv store` does.

// #include <pkv/pkv.h>
import "C"

import (
	"bytes"
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// StoreAdmin is an administrator's handle on a FILE or Redis store (pkv_store_open): how much it
// holds (Info), what (List, ListKeys), whether every value is whole (Verify, which can remove the
// bad ones), and Clear. Engines may use the store meanwhile. Calls take time in proportion to the
// store (each walks all of it). Safe for concurrent use; Close it when done.
type StoreAdmin struct {
	mu      sync.Mutex
	s       *C.pkv_store
	listing *StoreLister // the listing whose cursor the handle holds (one at a time)
}

// StoreInfo is what a store holds (pkv_store_info): Kind StoreFile or StoreRedis, NumBlocks
// values under block names and TotalBytes their sizes added up.
type StoreInfo struct {
	Kind       StoreKind
	NumBlocks  uint64
	TotalBytes uint64
}

// StoreEntry is one block of a listing (pkv_store_entry). NumTokens, PayloadBytes, Parent and
// Fingerprint are read from the value's header: set when State is StoreValueGood only. Problem
// says why a StoreValueBad value is bad ("" otherwise).
type StoreEntry struct {
	Key          StoreKey
	ValueBytes   uint64          // the value's size as listed
	State        StoreValueState // StoreValueUnread (ListKeys), StoreValueGood or StoreValueBad
	NumTokens    uint32          // the block's tokens
	PayloadBytes uint64          // K and V of every layer
	Parent       StoreKey        // the parent block's key, or the root of its salt and model
	Fingerprint  [32]byte        // the model's KV-shape fingerprint
	Problem      string
}

// StoreVerifyResult counts what Verify read (pkv_store_verify_result): NumBlocks values, of
// which NumGood and NumBad (NumRemoved of them removed); NumGone were listed, then gone or
// resized before they were read. FirstBadKey and FirstBadProblem name the first bad value met.
type StoreVerifyResult struct {
	NumBlocks, NumGood, NumBad, NumRemoved, NumGone uint64
	GoodBytes, BadBytes                             uint64
	FirstBadKey                                     StoreKey
	FirstBadProblem                                 string
}

// OpenStore opens the store sc describes (its Kind StoreFile, with Path an existing directory,
// or StoreRedis; the fields of the write path do not apply). WriteMode StoreReadOnly opens it
// for reading only: Verify's removals and Clear are then refused with ErrState. ErrStore: the
// directory or the server cannot be used; ErrUnsupported: a store of the host's own (Store, or
// Kind StoreCallback), which is the host's to administer.
func OpenStore(sc StoreConfig) (*StoreAdmin, error) {
	if libraryError != nil {
		return nil, libraryError
	}
	if sc.Store != nil || sc.Kind == StoreCallback {
		return nil, &Error{Status: StatusUnsupported, Message: "OpenStore: a Store of the host's " +
			"own (StoreCallback) is the host's to administer; OpenStore opens a StoreFile or StoreRedis"}
	}
	if sc.Kind != StoreFile && sc.Kind != StoreRedis {
		return nil, invalid("OpenStore: StoreConfig.Kind is %v: set StoreFile (with Path) or StoreRedis", sc.Kind)
	}
	m := &storeMem{}
	defer m.free() // pkv_store_open copies what it keeps
	if err := sc.build(m); err != nil {
		return nil, err
	}
	var s *C.pkv_store
	if err := check(func() C.pkv_status { return C.pkv_store_open(m.params, &s) }); err != nil {
		return nil, err
	}
	a := &StoreAdmin{s: s}
	runtime.SetFinalizer(a, (*StoreAdmin).Close)
	return a, nil
}

// Close frees the handle (pkv_store_close); the store itself stays. Idempotent; later calls
// return ErrClosed.
func (a *StoreAdmin) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.s != nil {
		C.pkv_store_close(a.s)
		a.s, a.listing = nil, nil
		runtime.SetFinalizer(a, nil)
	}
	return nil
}

// call runs fn on the open handle under the mutex; a failure carries pkv_last_error's message.
func (a *StoreAdmin) call(fn func(*C.pkv_store) C.pkv_status) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.s == nil {
		return ErrClosed
	}
	return check(func() C.pkv_status { return fn(a.s) })
}

// Info counts the blocks and their bytes (pkv_store_info); no value is read.
func (a *StoreAdmin) Info() (StoreInfo, error) {
	raw := cStoreInfo{StructSize: uint32(unsafe.Sizeof(cStoreInfo{}))}
	err := a.call(func(s *C.pkv_store) C.pkv_status {
		return C.pkv_store_info(s, (*C.struct_pkv_store_info)(unsafe.Pointer(&raw)))
	})
	return StoreInfo{Kind: StoreKind(raw.Kind), NumBlocks: raw.NumBlocks, TotalBytes: raw.TotalBytes}, err
}

// Verify reads every value and checks it as List does (pkv_store_verify); with removeBad each
// bad value is removed as it is found (ErrState on a handle opened StoreReadOnly). A failure part
// way (ErrStore: the server gone) returns the counts up to it, and keeps what was removed.
func (a *StoreAdmin) Verify(removeBad bool) (StoreVerifyResult, error) {
	raw := cStoreVerifyResult{StructSize: uint32(unsafe.Sizeof(cStoreVerifyResult{}))}
	err := a.call(func(s *C.pkv_store) C.pkv_status {
		return C.pkv_store_verify(s, C.uint32_t(boolU32(removeBad)),
			(*C.pkv_store_verify_result)(unsafe.Pointer(&raw)))
	})
	return StoreVerifyResult{NumBlocks: raw.NumBlocks, NumGood: raw.NumGood, NumBad: raw.NumBad,
		NumRemoved: raw.NumRemoved, NumGone: raw.NumGone, GoodBytes: raw.GoodBytes,
		BadBytes: raw.BadBytes, FirstBadKey: raw.FirstBadKey,
		FirstBadProblem: cText(raw.FirstBadProblem[:])}, err
}

// Clear removes every block of the store (pkv_store_clear; other files, or keys outside the
// prefix, stay) and returns how many it removed, also when it fails part way. ErrState on a
// handle opened StoreReadOnly.
func (a *StoreAdmin) Clear() (uint64, error) {
	var removed C.uint64_t
	err := a.call(func(s *C.pkv_store) C.pkv_status { return C.pkv_store_clear(s, &removed) })
	return uint64(removed), err
}

// cText is a NUL-terminated C char array's text.
func cText(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// String is the key as 64 lowercase hex digits (as `pkv store ls` prints it).
func (k StoreKey) String() string { return fmt.Sprintf("%x", k.Bytes[:]) }
