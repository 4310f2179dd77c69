package pkv

// The C callbacks of a Store (store.go): pkv calls them from its own threads; each finds the
// Store by its cgo.Handle, and turns an error or a panic into a nonzero return with a message,
// so nothing unwinds into C.

// #include <stdint.h>
// #include <pkv/pkv.h>
import "C"

import (
	"fmt"
	"runtime/cgo"
	"unsafe"
)

// storeCall runs fn on the Store of user; an error or a panic is 1 and its text in message.
func storeCall(user unsafe.Pointer, message *C.char, messageCap C.uint32_t, fn func(Store) error) (rc C.int) {
	defer func() {
		if r := recover(); r != nil {
			rc = storeFailed(fmt.Errorf("panic: %v", r), message, messageCap)
		}
	}()
	s := cgo.Handle(uintptr(user)).Value().(Store)
	if err := fn(s); err != nil {
		return storeFailed(err, message, messageCap)
	}
	return 0
}

func storeFailed(err error, message *C.char, messageCap C.uint32_t) C.int {
	if message != nil && messageCap > 0 {
		text := err.Error()
		if len(text) > int(messageCap)-1 {
			text = text[:messageCap-1]
		}
		out := unsafe.Slice((*byte)(unsafe.Pointer(message)), int(messageCap))
		out[copy(out, text)] = 0
	}
	return 1
}

func storeKeys(keys *C.pkv_store_key, n C.uint32_t) []StoreKey {
	return unsafe.Slice((*StoreKey)(unsafe.Pointer(keys)), int(n))
}

//export pkvGoStoreExists
func pkvGoStoreExists(user unsafe.Pointer, keys *C.pkv_store_key, n C.uint32_t, out *C.uint8_t,
	message *C.char, messageCap C.uint32_t) C.int {
	return storeCall(user, message, messageCap, func(s Store) error {
		held := unsafe.Slice((*uint8)(unsafe.Pointer(out)), int(n))
		for i, k := range storeKeys(keys, n) {
			ok, err := s.(StoreExister).Exists(k)
			if err != nil {
				return err
			}
			held[i] = 0
			if ok {
				held[i] = 1
			}
		}
		return nil
	})
}

//export pkvGoStoreGet
func pkvGoStoreGet(user unsafe.Pointer, keys *C.pkv_store_key, n C.uint32_t, values unsafe.Pointer,
	valueBytes C.uint64_t, found *C.uint8_t, timeoutMs C.uint32_t, message *C.char, messageCap C.uint32_t) C.int {
	return storeCall(user, message, messageCap, func(s Store) error {
		size := int(valueBytes)
		dst := unsafe.Slice((*byte)(values), int(n)*size)
		got := unsafe.Slice((*uint8)(unsafe.Pointer(found)), int(n))
		for i, k := range storeKeys(keys, n) {
			v, ok, err := s.Get(k)
			if err != nil {
				return err
			}
			got[i] = 0
			if ok && len(v) == size {
				copy(dst[i*size:(i+1)*size], v)
				got[i] = 1
			}
		}
		return nil
	})
}

//export pkvGoStorePut
func pkvGoStorePut(user unsafe.Pointer, keys *C.pkv_store_key, n C.uint32_t, values unsafe.Pointer,
	valueBytes C.uint64_t, message *C.char, messageCap C.uint32_t) C.int {
	return storeCall(user, message, messageCap, func(s Store) error {
		for i, k := range storeKeys(keys, n) {
			if err := s.Put(k, C.GoBytes(unsafe.Add(values, i*int(valueBytes)), C.int(valueBytes))); err != nil {
				return err
			}
		}
		return nil
	})
}
