"""Sequence: a sequence id on an Engine, and its calls (pkv_append, pkv_fork, ...)."""
import ctypes

from . import _raw
from ._buffers import int32_array
from ._lib import lib


class Sequence:
    """A sequence of an Engine. As a context manager it is released on exit."""

    __slots__ = ('engine', 'id', 'num_cached_tokens')

    def __init__(self, engine, seq_id, num_cached_tokens):
        self.engine, self.id, self.num_cached_tokens = engine, seq_id, num_cached_tokens

    def append(self, tokens):
        """Reserves slots for more tokens (pkv_append); NoSpaceError: nothing changed."""
        arr, n = int32_array(tokens)
        self.engine._call(lib.pkv_append, ctypes.c_uint64(self.id), arr, n)

    def fork(self):
        """A new Sequence sharing every block of this one (copy-on-write)."""
        child = ctypes.c_uint64()
        self.engine._call(lib.pkv_fork, ctypes.c_uint64(self.id), ctypes.byref(child))
        return Sequence(self.engine, child.value, self.num_cached_tokens)

    def release(self):
        self.engine._call(lib.pkv_release, ctypes.c_uint64(self.id))

    def truncate(self, num_tokens):
        """Keeps the first num_tokens tokens, 1..len (rollback of rejected speculative tokens)."""
        self.engine._call(lib.pkv_truncate, ctypes.c_uint64(self.id), ctypes.c_uint32(num_tokens))

    def preempt(self):
        self.engine._call(lib.pkv_preempt, ctypes.c_uint64(self.id))

    def resume(self):
        """Re-admits a preempted sequence; returns (and remembers) its cached-token count."""
        cached = ctypes.c_uint32()
        self.engine._call(lib.pkv_resume, ctypes.c_uint64(self.id), ctypes.byref(cached))
        self.num_cached_tokens = cached.value
        return cached.value

    def swap_out(self):
        """Moves the sequence's KV to the host tier (pkv_swap_out), keeping its tokens and computed
        count; the next batch lists the copies (view.copy_kind COPY_SWAP_OUT; with STATE layers
        one COPY_STATE_OUT of its working state slot to a host state slot). UnsupportedError:
        the engine has no host tier; NoSpaceError: too few host blocks or no free host state
        slot, nothing changed; StateError: not running."""
        self.engine._call(lib.pkv_swap_out, ctypes.c_uint64(self.id))

    def swap_in(self):
        """Brings a swapped-out sequence's KV back into pool blocks (pkv_swap_in), all or nothing;
        the next batch lists the copies (COPY_SWAP_IN; with STATE layers one COPY_STATE_IN
        into its new working slot). StateError: not swapped out; NoSpaceError: too few free
        blocks or no free working state slot, nothing changed."""
        self.engine._call(lib.pkv_swap_in, ctypes.c_uint64(self.id))

    def info(self):
        """The sequence's state (pkv_seq_info), as a SeqInfo: is_preempted, in_batch and
        is_request as bool, finish_reason a FinishReason, kv_tier a Tier, transfer (since
        0.12.0) a TransferState: with remote_first_block, remote_num_blocks and
        num_remote_tokens, the blocks a RECEIVING request waits for (Engine.drain_receiving)."""
        return self.engine._get(_raw.pkv_seq_info, lib.pkv_seq_info, ctypes.c_uint64(self.id))

    def block_table(self):
        return self.engine._array(lib.pkv_seq_block_table, self.id)

    def group_block_table(self, group):
        """The block table in KV group `group` (pkv_seq_group_block_table): -1 where a windowed
        group gave back a block no later token's window reaches. Group 0's is block_table()."""
        def get(handle, seq, out, cap, n):
            return lib.pkv_seq_group_block_table(handle, seq, ctypes.c_uint32(group), out, cap, n)
        return self.engine._array(get, self.id)

    def tokens(self):
        return self.engine._array(lib.pkv_seq_tokens, self.id)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if not self.engine.closed:
            self.release()

    def __eq__(self, other):
        return isinstance(other, Sequence) and (self.engine, self.id) == (other.engine, other.id)

    def __hash__(self):
        return hash((id(self.engine), self.id))

    def __repr__(self):
        return '<pkv.Sequence %d>' % self.id
