"""StoreAdmin: a store's administration without an engine (pkv_store_open / info / list / verify /
clear / close), as `pkv store` does it.

    with pkv.StoreAdmin(pkv.StoreParams.file('/var/cache/pkv')) as store:
        print(store.info().num_blocks)
        for entry in store.list():               # StoreEntry: key, state, num_tokens, problem, ...
            ...
        result = store.verify(remove_bad=True)   # StoreVerifyResult
        store.clear()                            # how many blocks it removed
"""
import ctypes
import threading

from . import _raw
from ._lib import lib, text
from ._owner import Owner
from .enums import StoreListFlags
from .errors import PkvError, make_error
from .records import StoreVerifyResult, record
from .store import StoreParams


def _error(status):
    return make_error(status, text(lib.pkv_last_error()))


class StoreAdmin(Owner):
    """A handle on a FILE or REDIS store for its administrator (pkv_store_open), given the
    StoreParams an engine would take (StoreParams.file(path), StoreParams.redis(host, ...); the
    write path's fields do not apply). write_mode=pkv.STORE_READ_ONLY opens it for reading only:
    verify(remove_bad=True) and clear() are then StateError. A FILE store's directory must exist
    (StoreError otherwise); a CALLBACK store is UnsupportedError (the host administers its own).

    Calls on one StoreAdmin may come from several threads; a listing is one at a time per handle
    (a second list() started restarts it, and the first then fails with InvalidArgumentError).
    Every call but the open walks the whole store. Closed by close(), by the with-block, or when
    dropped; a closed StoreAdmin raises ValueError."""

    def __init__(self, params):
        if not isinstance(params, StoreParams):
            raise TypeError('StoreAdmin takes a pkv.StoreParams (StoreParams.file(path) or '
                            'StoreParams.redis(host, ...)), got %s' % type(params).__name__)
        c, keep = params._struct()
        handle = ctypes.POINTER(_raw.pkv_store)()
        status = lib.pkv_store_open(ctypes.byref(c), ctypes.byref(handle))
        if status != _raw.PKV_OK:
            raise _error(status)
        # the strings c points to live as long as the handle (pkv.h does not promise a copy)
        self._handle, self._lock, self._keep = handle, threading.RLock(), (c, keep)

    def _call(self, fn, *args):
        with self._lock:
            if self._handle is None:
                raise ValueError('pkv StoreAdmin is closed')
            status = fn(self._handle, *args)
            if status != _raw.PKV_OK:
                raise _error(status)

    def info(self):
        """How many blocks the store holds and their bytes (no value is read), as a StoreInfo."""
        out = _raw.pkv_store_info(struct_size=ctypes.sizeof(_raw.pkv_store_info))
        self._call(lib.pkv_store_info, ctypes.byref(out))
        return record(out)

    def list(self, keys_only=False, page=256):
        """Iterates over the store's blocks as StoreEntry records, `page` at a time. Each value is
        read and checked (state GOOD or BAD, and for BAD the problem) unless keys_only (state
        UNREAD: keys and sizes only). A block held throughout is listed at least once."""
        if page < 1:
            raise make_error(_raw.PKV_ERR_INVALID_ARGUMENT, 'page is %d: at least 1' % page)
        flags = StoreListFlags.KEYS_ONLY if keys_only else 0
        buf = (_raw.pkv_store_entry * page)()
        cursor, got = ctypes.c_uint64(0), ctypes.c_uint32()
        while True:
            self._call(lib.pkv_store_list, ctypes.byref(cursor), flags, buf,
                       ctypes.sizeof(_raw.pkv_store_entry), page, ctypes.byref(got))
            entries = [record(e) for e in buf[:got.value]]
            yield from entries
            if cursor.value == 0:
                return

    __iter__ = list

    def verify(self, remove_bad=False):
        """Reads and checks every value; with remove_bad, removes each bad one. Returns a
        StoreVerifyResult (counts, bytes, the first bad key and its problem). A failure part way
        (StoreError: the server gone) keeps what was removed, and the exception's .result holds
        the counts up to the failure."""
        out = _raw.pkv_store_verify_result(
            struct_size=ctypes.sizeof(_raw.pkv_store_verify_result))
        try:
            self._call(lib.pkv_store_verify, 1 if remove_bad else 0, ctypes.byref(out))
        except PkvError as e:
            e.result = record(out)
            raise
        return record(out)

    def clear(self):
        """Removes every block of the store (other files or keys stay); returns how many it
        removed. A failure part way keeps what was removed, counted in the exception's
        .removed."""
        removed = ctypes.c_uint64()
        try:
            self._call(lib.pkv_store_clear, ctypes.byref(removed))
        except PkvError as e:
            e.removed = removed.value
            raise
        return removed.value

    def close(self):
        """Closes the handle (pkv_store_close). Idempotent."""
        with self._lock:
            if self._handle is not None:
                lib.pkv_store_close(self._handle)
                self._handle = None

    def __repr__(self):
        return '<pkv.StoreAdmin %s>' % ('closed' if self.closed else 'open')


__all__ = ['StoreAdmin', 'StoreVerifyResult']
