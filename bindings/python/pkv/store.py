"""The store tier (pkv 0.2): StoreParams (pkv_store_params) and the host's own stores.

    engine = pkv.Engine(params, store=pkv.StoreParams.file('/var/cache/pkv'))
    engine = pkv.Engine(params, store=pkv.StoreParams.redis('10.0.0.5', password='...'))
    engine = pkv.Engine(params, store=pkv.DictStore())   # any object with get/put (PKV_STORE_CALLBACK)

A store of the host's own is an object with get(key) -> bytes or None and put(key, value), and
optionally exists(key) -> bool; keys are 32-byte bytes, values bytes of one size per engine. pkv
calls them from its own threads (a fetcher and a writer, possibly while the engine's thread runs),
so they must be thread-safe. An exception becomes a failed C call with its text as the message:
every key of that call is a miss (stats num_store_errors, Engine.store_error()), never an error of
the engine's own calls. pkv checks every value before it can hit, so a store may lose values.
"""
import ctypes
import threading

from . import _raw
from ._lib import lib
from .enums import typed
from .params import check
from .records import FIELD_ENUMS


class StoreParams:
    """pkv_store_params with pkv's defaults (pkv_store_params_init); the fields are attributes
    (path, host, username, password, key_prefix, model_id as str). model_id names the model
    (a weights digest, 'org/model@revision', or hf_config_digest(config)): engines share blocks
    only when their model ids match; without one any model of the same KV shape shares them, and
    Engine.store_error() says so. Build one with file(), redis() or
    callback(), or StoreParams(kind=pkv.STORE_FILE, path=...)."""

    _TEXT = ('path', 'host', 'username', 'password', 'key_prefix', 'model_id')

    def __init__(self, **fields):
        c = _raw.pkv_store_params()
        check(lib.pkv_store_params_init(ctypes.byref(c), ctypes.sizeof(c)))
        self.__dict__['_values'] = {name: getattr(c, name) for name, _ in c._fields_
                                    if name not in ('struct_size', 'callbacks')}
        self.__dict__['store'] = None  # the host's store of kind STORE_CALLBACK
        for name, value in fields.items():
            setattr(self, name, value)

    @classmethod
    def file(cls, path, **fields):
        """A directory of block files (made if missing); max_bytes caps it (LRU)."""
        return cls(kind=_raw.PKV_STORE_FILE, path=str(path), **fields)

    @classmethod
    def redis(cls, host=None, port=6379, **fields):
        """A Redis/Valkey server: database, username, password, key_prefix, ttl_seconds,
        connect_timeout_ms, io_timeout_ms."""
        return cls(kind=_raw.PKV_STORE_REDIS, host=host, port=port, **fields)

    @classmethod
    def callback(cls, store, **fields):
        """The host's store: an object with get/put (and optionally exists)."""
        p = cls(kind=_raw.PKV_STORE_CALLBACK, **fields)
        p.__dict__['store'] = store
        return p

    def __getattr__(self, name):
        try:
            value = self.__dict__['_values'][name]
        except KeyError:
            raise AttributeError('pkv_store_params has no field %r' % name) from None
        return typed(FIELD_ENUMS[name], value) if name in FIELD_ENUMS else value  # kind, ...

    def __setattr__(self, name, value):
        if name == 'store':
            self.__dict__['store'] = value
        elif name in self._values:
            self._values[name] = value
        else:
            raise AttributeError('pkv_store_params has no field %r' % name)

    def _struct(self):
        """(pkv_store_params, objects to keep alive while the engine lives)."""
        c = _raw.pkv_store_params(struct_size=ctypes.sizeof(_raw.pkv_store_params))
        keep = []
        for name, value in self._values.items():
            if name in self._TEXT:
                if isinstance(value, str):
                    value = value.encode('utf-8')
                keep.append(value)
            setattr(c, name, value)
        if self.kind == _raw.PKV_STORE_CALLBACK and self.store is not None:
            bridge = _Bridge(self.store)
            c.callbacks = ctypes.pointer(bridge.struct)
            keep.append(bridge)
        return c, keep

    def __repr__(self):
        shown = {k: v for k, v in self._values.items() if k != 'password'}
        return 'StoreParams(%s)' % ', '.join('%s=%r' % kv for kv in shown.items())


class _Bridge:
    """pkv_store_callbacks calling a Python store; the CFUNCTYPE objects live as long as this.
    ctypes takes the GIL for each call from pkv's threads."""

    def __init__(self, store):
        self.store = store
        self.struct = _raw.pkv_store_callbacks(struct_size=ctypes.sizeof(_raw.pkv_store_callbacks))
        self._get = _raw.pkv_store_callbacks_get_fn(self._on_get)
        self._put = _raw.pkv_store_callbacks_put_fn(self._on_put)
        self.struct.get, self.struct.put = self._get, self._put
        if callable(getattr(store, 'exists', None)):
            self._exists = _raw.pkv_store_callbacks_exists_fn(self._on_exists)
            self.struct.exists = self._exists

    @staticmethod
    def _guard(call, message, cap):
        """call() -> 0, or 1 with the exception's text in message[cap]: nothing unwinds into C."""
        try:
            call()
            return 0
        except BaseException as e:  # noqa: B902  a KeyboardInterrupt must not cross C either
            if message and cap:
                text = ('%s: %s' % (type(e).__name__, e)).encode('utf-8', 'replace')[:cap - 1]
                ctypes.memmove(message, text + b'\0', len(text) + 1)
            return 1

    def _on_exists(self, user, keys, n, out, message, cap):
        def run():
            for i in range(n):
                out[i] = 1 if self.store.exists(bytes(keys[i].bytes)) else 0
        return self._guard(run, message, cap)

    def _on_get(self, user, keys, n, values, value_bytes, found, timeout_ms, message, cap):
        def run():
            for i in range(n):
                value = self.store.get(bytes(keys[i].bytes))
                ok = value is not None and len(value) == value_bytes
                if ok:
                    ctypes.memmove(values + i * value_bytes, bytes(value), value_bytes)
                found[i] = 1 if ok else 0
        return self._guard(run, message, cap)

    def _on_put(self, user, keys, n, values, value_bytes, message, cap):
        def run():
            for i in range(n):
                self.store.put(bytes(keys[i].bytes), ctypes.string_at(values + i * value_bytes,
                                                                      value_bytes))
        return self._guard(run, message, cap)


class DictStore:
    """The example store: a dict behind a lock. Share one between engines to share their KV."""

    def __init__(self):
        self.values = {}
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            return self.values.get(key)

    def put(self, key, value):
        with self._lock:
            self.values[key] = value

    def exists(self, key):
        with self._lock:
            return key in self.values

    def __len__(self):
        with self._lock:
            return len(self.values)
