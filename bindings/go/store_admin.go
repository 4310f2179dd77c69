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
	var info StoreInfo
	raw := cStoreInfo{StructSize: uint32(unsafe.Sizeof(cStoreInfo{}))}
	err := a.call(func(s *C.pkv_store) C.pkv_status {
		return C.pkv_store_info(s, (*C.struct_pkv_store_info)(unsafe.Pointer(&raw)))
	})
	info.fromC(&raw)
	return info, err
}

// Verify reads every value and checks it as List does (pkv_store_verify); with removeBad each
// bad value is removed as it is found (ErrState on a handle opened StoreReadOnly). A failure part
// way (ErrStore: the server gone) returns the counts up to it, and keeps what was removed.
func (a *StoreAdmin) Verify(removeBad bool) (StoreVerifyResult, error) {
	var res StoreVerifyResult
	raw := cStoreVerifyResult{StructSize: uint32(unsafe.Sizeof(cStoreVerifyResult{}))}
	err := a.call(func(s *C.pkv_store) C.pkv_status {
		return C.pkv_store_verify(s, C.uint32_t(boolU32(removeBad)),
			(*C.pkv_store_verify_result)(unsafe.Pointer(&raw)))
	})
	res.fromC(&raw)
	return res, err
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
