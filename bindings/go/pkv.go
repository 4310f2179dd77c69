// Package pkv is the Go binding of libpkv, a paged KV-cache runtime for LLM inference.
//
// It links libpkv with cgo (-lpkv; point CGO_CFLAGS at pkv's include/ and CGO_LDFLAGS at the
// library's directory) and checks pkv_abi_version() when the package initializes. Every failed
// call returns an *Error carrying the pkv status and message; errors.Is(err, pkv.ErrNoSpace)
// tests the status. An Engine may be used from several goroutines.
package pkv

// #cgo LDFLAGS: -lpkv
// #include <stdlib.h>
// #include <pkv/pkv.h>
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"
)

// Status is a pkv_status: StatusOK or a negative error.
type Status int32

// String is the status's C name without PKV_, e.g. "ERR_NO_SPACE".
func (s Status) String() string {
	if name, ok := statusNames[s]; ok {
		return name
	}
	return fmt.Sprintf("UNKNOWN(%d)", int32(s))
}

// Description is pkv's static text for the status (pkv_status_string).
func (s Status) Description() string { return C.GoString(C.pkv_status_string(C.pkv_status(s))) }

// Error is a failed pkv call: its status and pkv's message about it.
type Error struct {
	Status  Status
	Message string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return "pkv: " + e.Status.String()
	}
	return "pkv: " + e.Status.String() + ": " + e.Message
}

// Is makes errors.Is(err, ErrNoSpace) true for any *Error of that status.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Status == e.Status && (t.Message == "" || t.Message == e.Message)
}

// ErrClosed is returned by calls on a closed Engine or an ended Batch.
var ErrClosed = errors.New("pkv: engine closed or batch ended")

// newError makes the error of a failed call; status OK gives nil.
func newError(s C.pkv_status, message *C.char) error {
	if s == 0 {
		return nil
	}
	return &Error{Status: Status(s), Message: C.GoString(message)}
}

// check runs a call that has no engine and reads this thread's message (pkv_last_error) on the
// same OS thread.
func check(call func() C.pkv_status) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	s := call()
	if s == 0 {
		return nil
	}
	return newError(s, C.pkv_last_error())
}

type fieldOffset struct {
	name     string
	goOffset uintptr
	cOffset  uintptr
}

type layout struct {
	name         string
	goSize       uintptr
	cSize        uintptr
	fieldOffsets []fieldOffset
}

// abiError is set by init when the loaded library does not match this binding; every
// constructor returns it.
var abiError error

func init() {
	for _, l := range layouts {
		if l.goSize != l.cSize {
			panic(fmt.Sprintf("pkv: %s is %d bytes in Go, %d in C", l.name, l.goSize, l.cSize))
		}
		for _, f := range l.fieldOffsets {
			if f.goOffset != f.cOffset {
				panic(fmt.Sprintf("pkv: %s.%s at %d in Go, %d in C", l.name, f.name, f.goOffset, f.cOffset))
			}
		}
	}
	if abi := uint32(C.pkv_abi_version()); abi != ABIVersion {
		abiError = &Error{Status: StatusUnsupported,
			Message: fmt.Sprintf("libpkv has ABI %d, this binding needs %d", abi, ABIVersion)}
	}
}

// Version is the loaded library's version, MAJOR*10000 + MINOR*100 + PATCH.
func Version() uint32 { return uint32(C.pkv_version()) }

// ABI is the loaded library's ABI major.
func ABI() uint32 { return uint32(C.pkv_abi_version()) }

// DefaultParams are pkv's default engine parameters (pkv_engine_params_init).
func DefaultParams() (EngineParams, error) {
	var p EngineParams
	if abiError != nil {
		return p, abiError
	}
	err := check(func() C.pkv_status {
		return C.pkv_engine_params_init(cParams(&p), C.uint32_t(unsafe.Sizeof(p)))
	})
	return p, err
}

// ParamsFromHFConfig fills the model shape of p from the text of a Hugging Face config.json.
func ParamsFromHFConfig(p EngineParams, configJSON []byte) (EngineParams, error) {
	text := C.CBytes(configJSON)
	defer C.free(text)
	err := check(func() C.pkv_status {
		return C.pkv_engine_params_from_hf_config(cParams(&p), (*C.char)(text), C.size_t(len(configJSON)))
	})
	return p, err
}

// Profile computes how many KV blocks fit and why (pkv_profile). When the budget is too small
// it returns ErrOutOfMemory with the budget still filled (ShortfallBytes says what is missing).
// opts: WithLayerWindows.
func Profile(p EngineParams, opts ...Option) (KVBudget, error) {
	b := KVBudget{StructSize: uint32(unsafe.Sizeof(KVBudget{}))}
	err := withOptions(&p, opts, func() error {
		return check(func() C.pkv_status {
			return C.pkv_profile(cParams(&p), (*C.pkv_kv_budget)(unsafe.Pointer(&b)))
		})
	})
	return b, err
}

// BlockHashRoot is the hash a prompt's first block chains from (salt may be nil).
func BlockHashRoot(seed uint64, salt []byte) (uint64, error) {
	var h C.uint64_t
	var ptr unsafe.Pointer
	if len(salt) > 0 {
		ptr = unsafe.Pointer(&salt[0])
	}
	err := check(func() C.pkv_status {
		return C.pkv_block_hash_root(C.uint64_t(seed), ptr, C.uint32_t(len(salt)), &h)
	})
	return uint64(h), err
}

// BlockHash is the canonical hash of one block of tokens under its parent's hash.
func BlockHash(seed, parentHash uint64, tokens []int32) (uint64, error) {
	var h C.uint64_t
	err := check(func() C.pkv_status {
		return C.pkv_block_hash(C.uint64_t(seed), C.uint64_t(parentHash), int32Ptr(tokens),
			C.uint32_t(len(tokens)), &h)
	})
	return uint64(h), err
}

func cParams(p *EngineParams) *C.pkv_engine_params { return (*C.pkv_engine_params)(unsafe.Pointer(p)) }

func int32Ptr(s []int32) *C.int32_t {
	if len(s) == 0 {
		return nil
	}
	return (*C.int32_t)(unsafe.Pointer(&s[0]))
}
