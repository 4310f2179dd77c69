// Package pkv is the Go binding of libpkv, a paged KV-cache runtime for LLM inference.
//
// It is built against pkv.h, found with pkg-config (#cgo pkg-config: pkv: PKG_CONFIG_PATH must
// reach the pkv.pc that meson install wrote), and loads libpkv.so.1 when it initializes (the
// dynamic loader's search: LD_LIBRARY_PATH, the ld.so cache, ...; PKV_LIBRARY names a file
// instead); LoadError says why it could not. Every failed call returns an *Error carrying the
// pkv status and message; errors.Is(err, pkv.ErrNoSpace) tests the status. An Engine may be used
// from several goroutines.
package pkv

// #cgo pkg-config: pkv
// #cgo LDFLAGS: -ldl -Wl,--as-needed
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
	return unknown("Status", int64(s))
}

// Description is pkv's static text for the status (pkv_status_string).
func (s Status) Description() string { return C.GoString(C.pkv_status_string(C.pkv_status(s))) }

func unknown(typ string, v int64) string { return fmt.Sprintf("%s(%d)", typ, v) }

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

// ErrUninitialized is returned for parameters that did not start from pkv's defaults: an
// EngineParams not made by DefaultParams (a struct literal), a RequestParams not made by
// DefaultRequestParams. The error says which.
var ErrUninitialized = errors.New("pkv: parameters without pkv's defaults")

// newError makes the error of a failed call; status OK gives nil.
func newError(s C.pkv_status, message *C.char) error {
	if s == 0 {
		return nil
	}
	return &Error{Status: Status(s), Message: C.GoString(message)}
}

// invalid is an ErrInvalidArgument found by the binding before pkv was called.
func invalid(format string, args ...any) error {
	return &Error{Status: StatusInvalidArgument, Message: fmt.Sprintf(format, args...)}
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

// checkLayouts panics when a raw struct and its C twin differ (a binding generated from another
// pkv.h than the one it is built with).
func checkLayouts() {
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
}

// Version is the loaded library's version, MAJOR*10000 + MINOR*100 + PATCH (0 when not loaded).
func Version() uint32 { return uint32(C.pkv_version()) }

// ABI is the loaded library's ABI major (0 when not loaded).
func ABI() uint32 { return uint32(C.pkv_abi_version()) }

// DefaultParams are pkv's default engine parameters (pkv_engine_params_init): every EngineParams
// starts here.
func DefaultParams() (EngineParams, error) {
	var p EngineParams
	if libraryError != nil {
		return p, libraryError
	}
	c := cEngineParams{}
	err := check(func() C.pkv_status {
		return C.pkv_engine_params_init(rawParams(&c), C.uint32_t(unsafe.Sizeof(c)))
	})
	if err == nil {
		p.fromC(&c)
		p.initialized = true
	}
	return p, err
}

// ParamsFromHFConfig is p with the whole model shape of a Hugging Face config.json (its text):
// pkv_engine_params_from_hf_config's fields, and the layers' sliding windows
// (pkv_hf_config_layer_windows). A model whose layers have different windows (Gemma 3, Qwen
// with max_window_layers) gets them as LayerWindows; one window for every layer (Mistral) is
// SlidingWindow, with LayerWindows nil. An MLA config (kv_lora_rank and qk_rope_head_dim:
// DeepSeek V2/V3, Kimi K2) sets KVLayout KVLayoutMLA, KVLoraRank, QKRopeHeadDim, NumKVHeads 1,
// HeadDim their sum and the model's SoftmaxScale. A model whose cache needs per-layer specs
// (gpt-oss's sinks, Gemma 2's soft-cap, Gemma 3n/4, Llama 4's chunks) is ErrUnsupported, naming
// the field: ParamsFromHFConfigLayers reads it. On error p is returned unchanged.
func ParamsFromHFConfig(p EngineParams, configJSON []byte) (EngineParams, error) {
	// The config replaces the shape: windows of p's old layer count do not apply to it.
	in := p
	in.LayerWindows, in.LayerSpecs = nil, nil
	c, err := newCParams(&in)
	if err != nil {
		return p, err
	}
	defer c.free()
	text := C.CBytes(configJSON)
	defer C.free(text)
	err = check(func() C.pkv_status {
		return C.pkv_engine_params_from_hf_config(c.c, (*C.char)(text), C.size_t(len(configJSON)))
	})
	if err != nil {
		return p, err
	}
	windows, err := HFConfigLayerWindows(configJSON)
	if err != nil {
		return p, err
	}
	out := in
	out.fromC((*cEngineParams)(unsafe.Pointer(c.c)))
	for _, w := range windows {
		if w != windows[0] {
			out.LayerWindows = windows
			break
		}
	}
	return out, nil
}

// HFConfigDigest is a StoreConfig.ModelID from the text of a config.json (pkv_hf_config_digest):
// "config-sha256:" and the SHA-256 of the text as it is. It tells models of other configs apart
// where their KV shapes are equal; two fine-tunes of one base model share a config, so give
// those a digest of their weights or a name@revision instead.
func HFConfigDigest(configJSON []byte) (string, error) {
	if libraryError != nil {
		return "", libraryError
	}
	text := C.CBytes(configJSON)
	defer C.free(text)
	var out [HFConfigDigestBytes]C.char
	err := check(func() C.pkv_status {
		return C.pkv_hf_config_digest((*C.char)(text), C.size_t(len(configJSON)), &out[0], C.uint32_t(len(out)))
	})
	if err != nil {
		return "", err
	}
	return C.GoString(&out[0]), nil
}

// Profile computes how many KV blocks fit and why (pkv_profile). When the budget is too small
// it returns ErrOutOfMemory with the budget still filled (ShortfallBytes says what is missing).
func Profile(p EngineParams) (KVBudget, error) {
	var b KVBudget
	c, err := newCParams(&p)
	if err != nil {
		return b, err
	}
	defer c.free()
	raw := cKVBudget{StructSize: uint32(unsafe.Sizeof(cKVBudget{}))}
	err = check(func() C.pkv_status {
		return C.pkv_profile(c.c, (*C.pkv_kv_budget)(unsafe.Pointer(&raw)))
	})
	b.fromC(&raw)
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

// cParams are an EngineParams in C memory, with the arrays and strings its pointers reach.
type cParams struct {
	c   *C.pkv_engine_params
	mem cMem
}

func (c *cParams) free() { c.mem.free() }

// cMem is C memory allocated for a call (or an engine's life), freed together.
type cMem struct{ ptrs []unsafe.Pointer }

func (m *cMem) alloc(size uintptr) unsafe.Pointer {
	p := C.calloc(1, C.size_t(size))
	if p == nil {
		panic("pkv: out of C memory")
	}
	m.ptrs = append(m.ptrs, p)
	return p
}

// cString is s in C memory; nil for "".
func (m *cMem) cString(s string) *C.char {
	if s == "" {
		return nil
	}
	p := C.CString(s)
	m.ptrs = append(m.ptrs, unsafe.Pointer(p))
	return p
}

func (m *cMem) free() {
	for _, p := range m.ptrs {
		C.free(p)
	}
	m.ptrs = nil
}

// newCParams checks p (made by DefaultParams, one window per layer) and builds its C twin.
func newCParams(p *EngineParams) (*cParams, error) {
	if libraryError != nil {
		return nil, libraryError
	}
	if !p.initialized {
		return nil, fmt.Errorf("%w: this EngineParams was not made by pkv.DefaultParams() (a struct "+
			"literal has none of them, and a zero field is not a default): start from "+
			"p, err := pkv.DefaultParams(), then set the fields you need", ErrUninitialized)
	}
	if p.LayerWindows != nil && len(p.LayerWindows) != int(p.NumLayers) {
		return nil, invalid("LayerWindows has %d windows, NumLayers is %d: give one per layer, or nil",
			len(p.LayerWindows), p.NumLayers)
	}
	if p.LayerSpecs != nil && len(p.LayerSpecs) != int(p.NumLayers) {
		return nil, invalid("LayerSpecs has %d specs, NumLayers is %d: give one per layer, or nil",
			len(p.LayerSpecs), p.NumLayers)
	}
	if n := numRanks(p.TPSize, p.PPSize); p.RankDeviceIDs != nil && len(p.RankDeviceIDs) != n {
		return nil, invalid("RankDeviceIDs has %d devices, TPSize x PPSize is %d: give one per rank, "+
			"or nil", len(p.RankDeviceIDs), n)
	}
	c := &cParams{}
	raw := (*cEngineParams)(c.mem.alloc(unsafe.Sizeof(cEngineParams{})))
	raw.StructSize = uint32(unsafe.Sizeof(cEngineParams{}))
	p.toC(raw)
	if len(p.LayerWindows) > 0 {
		w := c.mem.alloc(uintptr(len(p.LayerWindows)) * 4)
		copy(unsafe.Slice((*uint32)(w), len(p.LayerWindows)), p.LayerWindows)
		raw.LayerWindows = uintptr(w)
	}
	if len(p.LayerSpecs) > 0 {
		specs := unsafe.Slice((*cLayerSpec)(c.mem.alloc(uintptr(len(p.LayerSpecs))*unsafe.Sizeof(cLayerSpec{}))),
			len(p.LayerSpecs))
		for i := range p.LayerSpecs {
			p.LayerSpecs[i].toC(&specs[i])
		}
		raw.LayerSpecs = uintptr(unsafe.Pointer(&specs[0]))
		raw.LayerSpecSize = uint32(unsafe.Sizeof(cLayerSpec{}))
	}
	if len(p.RankDeviceIDs) > 0 {
		d := c.mem.alloc(uintptr(len(p.RankDeviceIDs)) * 4)
		copy(unsafe.Slice((*int32)(d), len(p.RankDeviceIDs)), p.RankDeviceIDs)
		raw.RankDeviceIDs = uintptr(d)
	}
	if p.EventPublisher != nil {
		pub, err := p.EventPublisher.toC(&c.mem)
		if err != nil {
			c.free()
			return nil, err
		}
		raw.EventPublisher = uintptr(unsafe.Pointer(pub))
	}
	c.c = rawParams(raw)
	return c, nil
}

// engineParamsOf reads an engine's effective parameters (what pkv_engine_params_get wrote): its
// windows and publisher copied out of the engine's memory.
func engineParamsOf(raw *cEngineParams) EngineParams {
	var p EngineParams
	p.fromC(raw)
	p.initialized = true
	if raw.LayerWindows != 0 {
		p.LayerWindows = append([]uint32(nil), unsafe.Slice((*uint32)(addr(raw.LayerWindows)), raw.NumLayers)...)
	}
	if raw.LayerSpecs != 0 {
		p.LayerSpecs = layerSpecsOf(raw.LayerSpecs, raw.LayerSpecSize, raw.NumLayers)
	}
	if raw.EventPublisher != 0 {
		p.EventPublisher = eventPublisherParamsOf((*cEventPublisherParams)(addr(raw.EventPublisher)))
	}
	if raw.RankDeviceIDs != 0 {
		n := numRanks(raw.TPSize, raw.PPSize)
		p.RankDeviceIDs = append([]int32(nil), unsafe.Slice((*int32)(addr(raw.RankDeviceIDs)), n)...)
	}
	return p
}

func rawParams(p *cEngineParams) *C.pkv_engine_params {
	return (*C.pkv_engine_params)(unsafe.Pointer(p))
}

// addr is a C address held as a uintptr, as a pointer (the C memory is not Go's to move).
func addr(a uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&a)) }

// goString is the C string at a, "" for 0.
func goString(a uintptr) string {
	if a == 0 {
		return ""
	}
	return C.GoString((*C.char)(addr(a)))
}

func boolU32(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

func int32Ptr(s []int32) *C.int32_t {
	if len(s) == 0 {
		return nil
	}
	return (*C.int32_t)(unsafe.Pointer(&s[0]))
}
