package pkv

// Listing a store a page at a time (pkv_store_list) as an iterator: StoreAdmin.List and ListKeys.

// #include <pkv/pkv.h>
import "C"

import "unsafe"

// storeListPage is how many entries one pkv_store_list call returns at most (each is read and
// checked whole unless keys only; pkv's memory stays bounded whatever the page). A variable for
// the tests' sake (export_test.go), which list in pages of one.
var storeListPage = 64

// StoreLister iterates over a listing, as bufio.Scanner does over lines:
//
//	l := admin.List()
//	for l.Next() {
//		e := l.Entry()
//		...
//	}
//	if err := l.Err(); err != nil { ... }
//
// A block held throughout the listing is listed at least once (a Redis listing may list one
// twice). A handle has one listing at a time: starting another (List, ListKeys) ends this one,
// whose Next then returns false with Err ErrState.
type StoreLister struct {
	admin   *StoreAdmin
	flags   uint32
	cursor  uint64
	started bool
	page    []cStoreEntry
	n, i    int
	entry   StoreEntry
	err     error
}

// List lists every block, each value read whole and checked: State StoreValueGood with its
// header's fields, or StoreValueBad with Problem (values gone before they were read are left
// out).
func (a *StoreAdmin) List() *StoreLister { return a.newLister(0) }

// ListKeys lists every block's key and size only (State StoreValueUnread): no value is read.
func (a *StoreAdmin) ListKeys() *StoreLister { return a.newLister(StoreListKeysOnly) }

func (a *StoreAdmin) newLister(flags uint32) *StoreLister {
	l := &StoreLister{admin: a, flags: flags, page: make([]cStoreEntry, storeListPage)}
	a.mu.Lock()
	a.listing = l
	a.mu.Unlock()
	return l
}

// Next moves to the next entry: false at the end of the listing or on an error (Err).
func (l *StoreLister) Next() bool {
	for l.err == nil && l.i >= l.n {
		if l.started && l.cursor == 0 {
			return false
		}
		l.fetch()
	}
	if l.err == nil {
		l.err = l.current()
	}
	if l.err != nil {
		return false
	}
	l.entry.fromC(&l.page[l.i])
	l.i++
	return true
}

// current is nil while l is the handle's listing, else why it ended.
func (l *StoreLister) current() error {
	a := l.admin
	a.mu.Lock()
	defer a.mu.Unlock()
	return l.currentLocked()
}

func (l *StoreLister) currentLocked() error {
	if l.admin.s == nil {
		return ErrClosed
	}
	if l.admin.listing != l {
		return &Error{Status: StatusState, Message: "StoreLister: another List or ListKeys started on " +
			"this StoreAdmin since, and a handle lists one listing at a time: list again"}
	}
	return nil
}

// fetch reads the next page into l.page (pkv_store_list), under the handle's mutex.
func (l *StoreLister) fetch() {
	a := l.admin
	a.mu.Lock()
	defer a.mu.Unlock()
	if l.err = l.currentLocked(); l.err != nil {
		return
	}
	var got C.uint32_t
	cursor := C.uint64_t(l.cursor)
	l.err = check(func() C.pkv_status {
		return C.pkv_store_list(a.s, &cursor, C.uint32_t(l.flags), (*C.pkv_store_entry)(unsafe.Pointer(&l.page[0])),
			C.uint32_t(unsafe.Sizeof(cStoreEntry{})), C.uint32_t(len(l.page)), &got)
	})
	if l.err == nil {
		l.started, l.cursor, l.n, l.i = true, uint64(cursor), int(got), 0
	}
}

// Entry is the entry Next moved to.
func (l *StoreLister) Entry() StoreEntry { return l.entry }

// Err is the error that ended the listing, nil at its end.
func (l *StoreLister) Err() error { return l.err }

// All reads the rest of the listing.
func (l *StoreLister) All() ([]StoreEntry, error) {
	var out []StoreEntry
	for l.Next() {
		out = append(out, l.Entry())
	}
	return out, l.Err()
}
