"""Batch (pkv_batch: one forward step's plan) and BatchView (pkv_batch_view)."""
import ctypes

from . import _raw
from ._buffers import data_pointer, int32_array
from ._lib import lib, text
from .errors import make_error


class Batch:
    """One step's plan, from Engine.batch(). Call attention() for every layer, then end() (the new
    tokens become computed) or abort() (nothing does). As a context manager it ends on success and
    aborts on an exception. After end/abort (or Engine.close) every call raises ValueError.

    The plan's fields are the batch's attributes, as in the other bindings (Go's
    b.SlotMapping(), C#'s b.SlotMapping(), Rust's batch.view().slot_mapping): the counts
    (num_seqs, num_tokens, max_blocks_per_seq, max_query_len, max_context_len, num_copies,
    block_size, num_kv_groups) and the arrays as lists, copied when read (seq_ids, query_start,
    positions, slot_mapping, context_lens, block_indptr, block_indices, last_block_len,
    block_tables, copy_src, copy_dst, copy_kind, sample_rows, group_slot_mapping,
    group_block_tables; group_slots(g), group_tables(g)). batch.view is the same plan as a
    BatchView, whose .raw is the ctypes struct (zero-copy pointers while the batch is open)."""

    def __init__(self, engine, handle):
        self._engine, self._handle, self._view = engine, handle, None

    @property
    def closed(self):
        return self._handle is None

    def _live(self):
        if self._handle is None:
            raise ValueError('pkv batch is ended, aborted, or its engine closed')
        return self._handle

    def _check(self, status):
        if status != _raw.PKV_OK:  # batch calls: this thread's message
            raise make_error(status, text(lib.pkv_last_error()))

    @property
    def view(self):
        """The plan's arrays (pkv_batch_info), as a BatchView valid while the batch is open."""
        with self._engine._lock:
            if self._view is None:
                out = _raw.pkv_batch_view(struct_size=ctypes.sizeof(_raw.pkv_batch_view))
                self._check(lib.pkv_batch_info(self._live(), ctypes.byref(out)))
                self._view = BatchView(self, out)
            return self._view

    def group_slots(self, group):
        """KV group `group`'s slot mapping (view.group_slots)."""
        return self.view.group_slots(group)

    def group_tables(self, group):
        """KV group `group`'s padded block tables as rows (view.group_tables)."""
        return self.view.group_tables(group)

    def attention(self, layer, q, k, v, out):
        """pkv_attention for one layer. q, out: [num_tokens][q heads per rank][head_dim];
        k, v: [num_tokens][kv heads per rank][head_dim], in the engine's dtype. Each is a
        C-contiguous buffer (bytearray, array.array, memoryview, numpy array) of at least that
        many bytes (checked), or an int address (device memory, not checked).

        An MLA engine (engine.mla) takes the absorbed form, with W = kv_lora_rank +
        qk_rope_head_dim (its head_dim): q [num_tokens][q heads per rank][W], k the new tokens'
        latents [num_tokens][W], v None (NULL: V is the latents' first kv_lora_rank values; a V
        is refused with InvalidArgumentError), and out [num_tokens][q heads per rank]
        [kv_lora_rank]."""
        n = self.view.num_tokens
        e = self._engine
        pq, kq = data_pointer(q, n * e._q_bytes, False, 'q')
        pk, kk = data_pointer(k, n * e._kv_bytes, False, 'k')
        pv, kv = (None, None) if v is None else data_pointer(v, n * e._kv_bytes, False, 'v')
        po, ko = data_pointer(out, n * e._out_bytes, True, 'out')
        with e._lock:
            self._check(lib.pkv_attention(self._live(), layer, pq, pk, pv, po))
        del kq, kk, kv, ko

    def copy(self):
        """Does the batch's listed block copies now (pkv_batch_copy: copy-on-write, swap-out,
        swap-in, offload, load; view.copy_kind says which), unless done already: for hosts that
        run no attention() but let pkv move the blocks. The first attention() call does them too."""
        with self._engine._lock:
            self._check(lib.pkv_batch_copy(self._live()))

    def end(self):
        """The step ran: its tokens become computed, full blocks are sealed. Frees the batch."""
        with self._engine._lock:
            handle = self._live()
            self._close()
            self._check(lib.pkv_batch_end(handle))

    def commit(self, sampled_tokens=None):
        """Ends a batch of Engine.step (pkv_commit): sampled_tokens[i] is the token sampled for
        the batch's sequence i (read where view.sample_rows[i] != -1). On failure the batch
        stays open."""
        arr, _ = int32_array(sampled_tokens, 'sampled_tokens')
        with self._engine._lock:
            self._check(lib.pkv_commit(self._live(), arr))
            self._close()

    def abort(self):
        """The step did not run: nothing becomes computed. Frees the batch. Idempotent."""
        with self._engine._lock:
            if self._handle is not None:
                handle = self._handle
                self._close()
                lib.pkv_batch_abort(handle)

    def _close(self):
        self._handle = None
        if self._engine._batch is self:
            self._engine._batch = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None and self._handle is not None:
            self.end()
        else:
            self.abort()


class BatchView:
    """pkv_batch_view: counts as attributes, arrays as lists (copied when read). .raw is the
    ctypes struct, for zero-copy access to the pointers while the batch is open."""

    _ARRAYS = {  # name: length as a function of the view
        'seq_ids': lambda v: v.num_seqs, 'query_start': lambda v: v.num_seqs + 1,
        'positions': lambda v: v.num_tokens, 'slot_mapping': lambda v: v.num_tokens,
        'context_lens': lambda v: v.num_seqs, 'block_indptr': lambda v: v.num_seqs + 1,
        'block_indices': lambda v: v.block_indptr[v.num_seqs] if v.num_seqs else 0,
        'last_block_len': lambda v: v.num_seqs,
        'block_tables': lambda v: v.num_seqs * v.max_blocks_per_seq,
        'copy_src': lambda v: v.num_copies, 'copy_dst': lambda v: v.num_copies,
        'copy_kind': lambda v: v.num_copies,  # COPY_COW, _SWAP_OUT, _SWAP_IN, _OFFLOAD, _LOAD
        'sample_rows': lambda v: v.num_seqs,
        # KV groups: each group's slot mapping and padded tables, group 0's first (the ones above)
        'group_slot_mapping': lambda v: v.num_kv_groups * v.num_tokens,
        'group_block_tables': lambda v: v.num_kv_groups * v.num_seqs * v.max_blocks_per_seq,
    }

    def __init__(self, batch, raw):
        self._batch, self.raw = batch, raw

    def __getattr__(self, name):
        raw = self.__dict__['raw']
        if name in self._ARRAYS and any(f == name for f, _ in raw._fields_):
            self._batch._live()
            ptr = getattr(raw, name)
            n = self._ARRAYS[name](raw)
            return list(ptr[:n]) if n and ptr else []
        if name.startswith('_'):
            raise AttributeError(name)
        return getattr(raw, name)

    def group_slots(self, group):
        """KV group `group`'s slot mapping ([num_tokens]; layer l uses its group's, kv_groups())."""
        n = self.raw.num_tokens
        return self.group_slot_mapping[group * n:(group + 1) * n]

    def group_tables(self, group):
        """KV group `group`'s padded block tables, [num_seqs][max_blocks_per_seq] as rows."""
        m, s = self.raw.max_blocks_per_seq, self.raw.num_seqs
        flat = self.group_block_tables[group * s * m:(group + 1) * s * m]
        return [flat[i * m:(i + 1) * m] for i in range(s)]

    def __repr__(self):
        return '<pkv.BatchView %d seqs, %d tokens>' % (self.raw.num_seqs, self.raw.num_tokens)


_COUNTS = ('num_seqs', 'num_tokens', 'max_blocks_per_seq', 'max_query_len', 'max_context_len',
           'num_copies', 'block_size', 'num_kv_groups')


def _view_field(name):
    return property(lambda self: getattr(self.view, name),
                    doc='pkv_batch_view.%s (batch.view.%s)' % (name, name))


for _name in _COUNTS + tuple(BatchView._ARRAYS):
    setattr(Batch, _name, _view_field(_name))
