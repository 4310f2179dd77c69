package pkv

// The store tier (pkv 0.2): StoreConfig (pkv_store_params) given to NewEngineWithStore, and Store,
// a store of the host's own that pkv calls through the C callbacks of store_export.go.

/*
#include <stdint.h>
#include <stdlib.h>
#include <pkv/pkv.h>

// The Go functions of store_export.go (cgo declares them without const).
extern int pkvGoStoreExists(void *, pkv_store_key *, uint32_t, uint8_t *, char *, uint32_t);
extern int pkvGoStoreGet(void *, pkv_store_key *, uint32_t, void *, uint64_t, uint8_t *, uint32_t,
                         char *, uint32_t);
extern int pkvGoStorePut(void *, pkv_store_key *, uint32_t, void *, uint64_t, char *, uint32_t);

static int pkv_go_exists(void *user, const pkv_store_key *keys, uint32_t n, uint8_t *out,
                         char *message, uint32_t cap) {
  return pkvGoStoreExists(user, (pkv_store_key *)keys, n, out, message, cap);
}
static int pkv_go_get(void *user, const pkv_store_key *keys, uint32_t n, void *values,
                      uint64_t value_bytes, uint8_t *found, uint32_t timeout_ms, char *message,
                      uint32_t cap) {
  return pkvGoStoreGet(user, (pkv_store_key *)keys, n, values, value_bytes, found, timeout_ms,
                       message, cap);
}
static int pkv_go_put(void *user, const pkv_store_key *keys, uint32_t n, const void *values,
                      uint64_t value_bytes, char *message, uint32_t cap) {
  return pkvGoStorePut(user, (pkv_store_key *)keys, n, (void *)values, value_bytes, message, cap);
}
// The handle (a runtime/cgo.Handle) travels as user.
static void pkv_go_callbacks(pkv_store_callbacks *cb, uintptr_t handle, int with_exists) {
  cb->struct_size = sizeof *cb;
  cb->reserved0 = 0;
  cb->user = (void *)handle;
  cb->exists = with_exists ? pkv_go_exists : NULL;
  cb->get = pkv_go_get;
  cb->put = pkv_go_put;
}
*/
import "C"

import (
	"runtime/cgo"
	"sync"
	"unsafe"
)

// Store is a KV store of the host's own (StoreCallback): a byte map from 32-byte keys to values
// of one size per engine. pkv calls it from its own threads (a fetcher and a writer, possibly
// while the engine's goroutine runs), so it must be safe for concurrent use. An error (or a
// panic) makes every key of that call a miss, counted in Stats.NumStoreErrors and told by
// Engine.StoreError; no engine call fails because of it. pkv checks every value it reads.
type Store interface {
	// Get returns the value held under key, ok false when there is none.
	Get(key StoreKey) (value []byte, ok bool, err error)
	// Put stores value under key, replacing any; value is the caller's to keep.
	Put(key StoreKey, value []byte) error
}

// StoreExister is a Store that can say cheaply whether it holds a key (a hint; pkv uses Get
// when a Store does not implement it).
type StoreExister interface {
	Exists(key StoreKey) (bool, error)
}

// StoreConfig is an engine's store tier (pkv_store_params). Zero fields keep pkv's defaults;
// a nil Store and Kind StoreNone is no store. See pkv.h for each field.
type StoreConfig struct {
	Kind             StoreKind      // StoreFile, StoreRedis, StoreCallback (implied by a Store)
	WriteMode        StoreWriteMode // StoreWriteThrough (default), StoreWriteBack, StoreReadOnly
	LookupTimeoutMs  uint32         // how long Allocate/Resume wait for the store (default 200)
	WriteQueueBlocks uint32         // blocks waiting for the writer (default 256)
	// StoreFile
	Path     string // the directory, made if missing
	MaxBytes uint64 // size cap (LRU); 0: none
	// StoreRedis (or Valkey)
	Host, Username, Password, KeyPrefix string
	Port, Database, TTLSeconds          uint32
	ConnectTimeoutMs, IOTimeoutMs       uint32
	// StoreCallback
	Store Store
	// ModelID is the model's identity in every key (pkv 0.4): engines share blocks only when
	// their ids and KV shapes are equal, so two fine-tunes of one base never read each other's
	// KV. Name the weights: a digest of them, or "org/model@revision"; HFConfigDigest gives one
	// from config.json (it tells configs apart, not weights). "" = none: any model of the same
	// KV shape shares the blocks, and StoreError says so. OpenStore ignores it.
	ModelID string
}

// storeMem is what an engine's store parameters hold in C memory, and the handle of its Store,
// kept until the engine is destroyed.
type storeMem struct {
	mem    cMem
	params *C.pkv_store_params
	handle cgo.Handle
}

func (m *storeMem) free() {
	m.mem.free()
	m.params = nil
	if m.handle != 0 {
		m.handle.Delete()
		m.handle = 0
	}
}

// build makes the pkv_store_params of sc in C memory.
func (sc *StoreConfig) build(m *storeMem) error {
	sp := (*C.pkv_store_params)(m.mem.alloc(C.sizeof_pkv_store_params))
	if err := check(func() C.pkv_status {
		return C.pkv_store_params_init(sp, C.uint32_t(C.sizeof_pkv_store_params))
	}); err != nil {
		return err
	}
	sp.kind = C.uint32_t(sc.Kind)
	if sc.Store != nil && sc.Kind == StoreNone {
		sp.kind = C.uint32_t(StoreCallback)
	}
	sp.write_mode = C.uint32_t(sc.WriteMode)
	setNonZero(&sp.lookup_timeout_ms, sc.LookupTimeoutMs)
	setNonZero(&sp.write_queue_blocks, sc.WriteQueueBlocks)
	sp.path, sp.max_bytes = m.mem.cString(sc.Path), C.uint64_t(sc.MaxBytes)
	sp.host, sp.username, sp.password = m.mem.cString(sc.Host), m.mem.cString(sc.Username), m.mem.cString(sc.Password)
	sp.key_prefix, sp.model_id = m.mem.cString(sc.KeyPrefix), m.mem.cString(sc.ModelID)
	setNonZero(&sp.port, sc.Port)
	sp.database, sp.ttl_seconds = C.uint32_t(sc.Database), C.uint32_t(sc.TTLSeconds)
	setNonZero(&sp.connect_timeout_ms, sc.ConnectTimeoutMs)
	setNonZero(&sp.io_timeout_ms, sc.IOTimeoutMs)
	if sc.Store != nil {
		cb := (*C.pkv_store_callbacks)(m.mem.alloc(C.sizeof_pkv_store_callbacks))
		m.handle = cgo.NewHandle(sc.Store)
		_, exists := sc.Store.(StoreExister)
		C.pkv_go_callbacks(cb, C.uintptr_t(m.handle), cBool(exists))
		sp.callbacks = cb
	}
	m.params = sp
	return nil
}

func setNonZero(dst *C.uint32_t, v uint32) {
	if v != 0 {
		*dst = C.uint32_t(v)
	}
}

func cBool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// NewEngineWithStore creates an engine (pkv_engine_create) of p with the store tier sc (which
// needs prefix caching and a host tier). A Store is called by pkv until Close, which waits for
// the queued writes.
func NewEngineWithStore(p EngineParams, sc StoreConfig) (*Engine, error) {
	if libraryError != nil {
		return nil, libraryError
	}
	m := &storeMem{}
	if err := sc.build(m); err != nil {
		m.free()
		return nil, err
	}
	eng, err := newEngine(p, m)
	if err != nil {
		m.free()
	}
	return eng, err
}

// StoreError is the store's last problem (a miss by error, a rejected value, a failed write),
// "" when there was none or the engine has no store (pkv_engine_store_error).
func (eng *Engine) StoreError() (string, error) {
	var out string
	err := eng.call(func(e *C.pkv_engine) C.pkv_status {
		var n C.uint32_t
		if s := C.pkv_engine_store_error(e, nil, 0, &n); s != 0 {
			return s
		}
		buf := (*C.char)(C.malloc(C.size_t(n) + 1))
		defer C.free(unsafe.Pointer(buf))
		s := C.pkv_engine_store_error(e, buf, n+1, &n)
		out = C.GoString(buf)
		return s
	})
	return out, err
}

// MapStore is the example Store: a map behind a mutex. Share one between engines to share
// their KV.
type MapStore struct {
	mu     sync.Mutex
	values map[StoreKey][]byte
}

// NewMapStore is an empty MapStore.
func NewMapStore() *MapStore { return &MapStore{values: map[StoreKey][]byte{}} }

// Get implements Store.
func (s *MapStore) Get(key StoreKey) ([]byte, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.values[key]
	return v, ok, nil
}

// Put implements Store.
func (s *MapStore) Put(key StoreKey, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.values[key] = value
	return nil
}

// Exists implements StoreExister.
func (s *MapStore) Exists(key StoreKey) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.values[key]
	return ok, nil
}

// Len is the number of values held.
func (s *MapStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.values)
}
