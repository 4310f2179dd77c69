"""Retention of cached prefixes (since 0.8.0): a prefix's eviction priority and pins.

    engine.cache_set_priority(system_prompt, pkv.CACHE_PRIORITY_MAX)  # evicted last
    with engine.cache_pin(system_prompt) as pin:                      # never evicted in here
        print(pin.num_tokens, engine.stats().num_pinned_blocks)

Engine takes these methods from RetentionCalls; a sequence or a request gets its priority with
allocate(..., cache_priority=, cache_retention_ms=) and submit(...) alike."""
import ctypes

from . import _raw
from ._buffers import int32_array
from ._lib import lib
from .errors import make_error


def check_priority(priority, retention_ms):
    """(priority, retention_ms) as the C fields hold them: int32 and uint32 (ctypes would wrap
    other values silently); the range of the priority is pkv's to check, with its message."""
    for name, value, low, high in (('cache_priority', priority, -2**31, 2**31 - 1),
                                   ('cache_retention_ms', retention_ms, 0, 2**32 - 1)):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise make_error(_raw.PKV_ERR_INVALID_ARGUMENT,
                             '%s is %r: give an integer %d .. %d (cache_priority: '
                             'CACHE_PRIORITY_MIN .. CACHE_PRIORITY_MAX)' % (name, value, low, high))
    return priority, retention_ms


class CachePin:
    """A pin of a cached prefix (Engine.cache_pin): its blocks are never evicted until unpin().
    As a context manager it unpins on exit, unless unpinned already (never twice); dropped
    without either, the pin stays until the engine closes (pins are the host's to end).

    id: the pin's id (never 0, never reused; Engine.cache_unpin(id) drops it too).
    num_tokens: the tokens pinned (0 when nothing of the prefix was cached)."""

    __slots__ = ('engine', 'id', 'num_tokens', 'unpinned')

    def __init__(self, engine, pin_id, num_tokens):
        self.engine, self.id, self.num_tokens, self.unpinned = engine, pin_id, num_tokens, False

    def unpin(self):
        """Drops the pin (pkv_cache_unpin): its blocks are cached again, with the priority they
        had. NotFoundError when the pin was dropped already (this call changes nothing then)."""
        self.engine.cache_unpin(self.id)
        self.unpinned = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if not self.unpinned and not self.engine.closed:
            self.unpin()

    def __repr__(self):
        return '<pkv.CachePin %d: %d tokens%s>' % (self.id, self.num_tokens,
                                                   ', unpinned' if self.unpinned else '')


class RetentionCalls:
    """Engine's retention calls (a mixin: Engine's _call and lock)."""

    def cache_set_priority(self, tokens, priority, retention_ms=0, salt=None, extra_keys=None,
                           lora_id=0):
        """Gives the pool blocks the prefix cache holds of the prefix `tokens` (its full blocks,
        under salt, extra_keys and lora_id, as allocate() takes them) an eviction priority
        (CACHE_PRIORITY_MIN .. CACHE_PRIORITY_MAX) and retention_ms (0: never decays)
        (pkv_cache_set_priority). Cached blocks move in eviction order at once; blocks in use
        keep it for their release. Returns how many blocks it was given. InvalidArgumentError
        (a priority out of range: nothing changed), StateError (a batch is open)."""
        from .engine import _seq_params
        arr, n = int32_array(tokens)
        priority, retention_ms = check_priority(priority, retention_ms)
        sp, keep = _seq_params(salt, extra_keys, lora_id)
        blocks = ctypes.c_uint32()
        self._call(lib.pkv_cache_set_priority, arr, n, sp, ctypes.c_int32(priority),
                   ctypes.c_uint32(retention_ms), ctypes.byref(blocks))
        del keep
        return blocks.value

    def cache_pin(self, tokens, salt=None, extra_keys=None, lora_id=0):
        """Pins the leading cached blocks of the prefix `tokens` that the pool holds
        (pkv_cache_pin), in every KV group; returns a CachePin (use it in a with-block, or
        unpin() it). Pinned blocks are never evicted and are not free; all pins together hold
        at most MAX_PINNED_PERCENT of the pool's blocks: past it, NoSpaceError (nothing
        changed). StateError: a batch is open."""
        from .engine import _seq_params
        arr, n = int32_array(tokens)
        sp, keep = _seq_params(salt, extra_keys, lora_id)
        pin, pinned = ctypes.c_uint64(), ctypes.c_uint32()
        self._call(lib.pkv_cache_pin, arr, n, sp, ctypes.byref(pin), ctypes.byref(pinned))
        del keep
        return CachePin(self, pin.value, pinned.value)

    def cache_unpin(self, pin):
        """Drops a pin by its id or CachePin (pkv_cache_unpin). NotFoundError: no such pin (never
        given, or unpinned already); StateError: a batch is open."""
        pin_id = pin.id if isinstance(pin, CachePin) else pin
        self._call(lib.pkv_cache_unpin, ctypes.c_uint64(pin_id))
        if isinstance(pin, CachePin):
            pin.unpinned = True

