"""Batch (pkv_batch: one forward step's plan) and BatchView (pkv_batch_view)."""
import ctypes
import weakref

from . import _raw
from ._buffers import element_pointer, int32_array
from ._lib import lib, text
from .enums import CopyKind, typed
from .errors import make_error
from .sparse import SparseAttention


class Batch(SparseAttention):
    """One step's plan, from Engine.batch() or Engine.step(). Call attention() for every layer,
    then end it: a batch of Engine.batch with end() (the new tokens become computed), a batch of
    Engine.step with commit(sampled_tokens); or abort() either (nothing becomes computed). A
    failed end() or commit() keeps the batch open, so it can be retried or aborted. As a context
    manager it is aborted on an exception; on a normal exit a batch of Engine.batch is ended, and
    a batch of Engine.step not committed in the block is aborted and StateError raised. A batch
    dropped while open (no reference left) is aborted. After it ends (or Engine.close) every call
    raises ValueError. An MLA layer with an indexer (since 0.7.0) runs indexer_write,
    indexer_topk and sparse_mla_attention (pkv.sparse): attention over each token's top keys.

    The plan's fields are the batch's attributes, as in the other bindings (Go's
    b.SlotMapping(), C#'s b.SlotMapping(), Rust's batch.view().slot_mapping): the counts
    (num_seqs, num_tokens, max_blocks_per_seq, max_query_len, max_context_len, num_copies,
    block_size, num_kv_groups) and the arrays as lists, copied when read (seq_ids, query_start,
    positions, slot_mapping, context_lens, block_indptr, block_indices, last_block_len,
    block_tables, copy_src, copy_dst, copy_kind, sample_rows, group_slot_mapping,
    group_block_tables, state_slots; group_slots(g), group_tables(g)). state_slots (since 0.6.0)
    is each sequence's state slot (engine.pool_info().state_base + slot * state_slot_bytes),
    [] on an engine without STATE layers; a copy of kind CopyKind.STATE moves slot copy_src[i]
    into slot copy_dst[i] (a fork's state), run before the step reads any state. batch.view is the same plan as a
    BatchView, whose .raw is the ctypes struct (zero-copy pointers while the batch is open)."""

    def __init__(self, engine, handle, scheduled=False):
        self._engine, self._handle, self._view = engine, handle, None
        self._scheduled = scheduled

    @property
    def closed(self):
        return self._handle is None

    @property
    def scheduled(self):
        """True for a batch of Engine.step: it ends with commit() or abort(), never end()."""
        return self._scheduled

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
        k, v: [num_tokens][kv heads per rank][head_dim], in the engine's model dtype
        (params.dtype). Each is a C-contiguous buffer (array.array, numpy array, memoryview,
        bytearray) whose element type is that dtype (f32: float32; f16: float16, or its bits as
        uint16; bf16: its bits as uint16) or raw bytes, holding at least that many elements; else
        InvalidArgumentError says what was expected, and nothing is called. On a CUDA engine each
        is an int device address (pkv cannot check it; a host buffer is UnsupportedError).

        An MLA engine (engine.mla) takes the absorbed form, with W = kv_lora_rank +
        qk_rope_head_dim (its head_dim): q [num_tokens][q heads per rank][W], k the new tokens'
        latents [num_tokens][W], v None (NULL: V is the latents' first kv_lora_rank values), and
        out [num_tokens][q heads per rank][kv_lora_rank].

        An engine of layer specs (since 0.5.0) takes each layer's own shape (engine.layer_info):
        q [num_tokens][q heads per rank][head_dim], k [num_tokens][kv_heads][head_dim], v
        [num_tokens][kv_heads][v_head_dim], out [num_tokens][q heads per rank][v_head_dim]; a
        k_eq_v layer takes v None (V is K), a SHARED layer k and v None (it writes nothing and
        reads its source layer's cache: call it after its source). A STATE layer (since 0.6.0)
        has no attention: the host runs its recurrence on the state in view.state_slots."""
        n = self.view.num_tokens
        e = self._engine
        if e._device != _raw.PKV_DEVICE_CPU and not all(
                isinstance(b, int) for b in (q, k, v, out) if b is not None):
            raise make_error(_raw.PKV_ERR_UNSUPPORTED, 'attention: a CUDA engine takes device '
                             'addresses (ints, e.g. tensor.data_ptr()), not host buffers')
        kv_rows, q_dim, k_dim, v_dim, out_dim = e._attention_shape(layer)
        _check_absent(e, layer, k, k_dim, v, v_dim)
        heads = '%d tokens x %d q heads x %d' % (n, e._q_heads, q_dim // e._q_heads)
        pq, kq = element_pointer(q, e._dtype, n * q_dim, False, 'q', heads)
        pk, kk = (None, None) if k is None else element_pointer(
            k, e._dtype, n * k_dim, False, 'k', _rows(n, kv_rows, k_dim, e.mla))
        pv, kv = (None, None) if v is None else element_pointer(
            v, e._dtype, n * v_dim, False, 'v', _rows(n, kv_rows, v_dim, e.mla))
        po, ko = element_pointer(out, e._dtype, n * out_dim, True, 'out', '%d tokens x %d q heads '
                                 'x %d' % (n, e._q_heads, out_dim // e._q_heads))
        with e._lock:
            self._check(lib.pkv_attention(self._live(), layer, pq, pk, pv, po))
        del kq, kk, kv, ko

    def copy(self):
        """Does the batch's listed block copies now (pkv_batch_copy: copy-on-write, swap-out,
        swap-in, offload, load; view.copy_kind says which), unless done already: for hosts that
        run no attention() but let pkv move the blocks. The first attention() call does them too."""
        with self._engine._lock:
            self._check(lib.pkv_batch_copy(self._live()))

    def plan_graph(self, bucket):
        """Plans this decode step for a CUDA graph (pkv_batch_plan_graph, since 0.9.0; a CUDA
        engine only): a GPU engine's decode step is captured once in a CUDA graph
        (torch.cuda.graph / cudaStreamBeginCapture on engine.set_stream's stream, not the legacy
        NULL stream) and replayed after each later plan_graph of the same bucket. Call it before
        the step's first attention(): it queues the block copies and the batch's arrays, padded
        to `bucket` sequences, into device buffers at fixed addresses, so every attention() of the
        batch launches kernels that depend only on the bucket and the layer. Every sequence must
        compute one token, and num_seqs <= bucket <= params.max_num_seqs. Between replays the
        sequences, their count (up to bucket), lengths and block tables and the contents of q, k,
        v may change; the bucket, the layers and their order, the q, k, v and out addresses
        (bucket rows each) and the stream may not. Eager batches may run between replays.

        UnsupportedError on a CPU engine (it has no CUDA graphs: run attention() as is; the batch
        stays usable) or one with indexer layers; InvalidArgumentError for a bucket of 0, below
        num_seqs or above max_num_seqs, or a sequence computing more than one token (a bucket
        that is not an int from 0 to 2**32 - 1 is refused before pkv is called); StateError once
        an attention() of the batch ran. ValueError after the batch ended."""
        if isinstance(bucket, bool) or not isinstance(bucket, int) or not 0 <= bucket < 1 << 32:
            raise make_error(_raw.PKV_ERR_INVALID_ARGUMENT, 'plan_graph: bucket must be a '
                             'sequence count (an int from 1 to max_num_seqs), not %r' % (bucket,))
        with self._engine._lock:
            self._check(lib.pkv_batch_plan_graph(self._live(), bucket))

    def rank(self, rank):
        """Rank `rank`'s handle of this batch (pkv_batch_rank, since 0.10.0), as a RankBatch, on
        an engine of params.ranks Ranks.ALL: rank = pp_rank * tp_size + tp_rank. Its attention()
        (and the indexer's and sparse MLA's calls, plan_graph) runs on that rank's pool with that
        rank's heads: q and out [num_tokens][num_q_heads / tp_size][head_dim], k and v its kv
        heads; on such an engine attention() of the batch itself is InvalidArgumentError. Its
        view is the batch's; ending it (end, commit, abort) ends the batch. It is valid while the
        batch is open. On an engine of one rank, rank 0 is the batch itself.
        InvalidArgumentError for a rank not below the engine's number of ranks."""
        out = ctypes.POINTER(_raw.pkv_batch)()
        with self._engine._lock:
            self._check(lib.pkv_batch_rank(self._live(), ctypes.c_uint32(rank), ctypes.byref(out)))
            return RankBatch(self, out, rank)

    def export_plan(self):
        """This step's plan as bytes (pkv_batch_export_plan, since 0.10.0), for the ranks
        Ranks.POOL engines of other processes (Engine.import_plan): the batch's view and its
        copies, with a version, the engine's shape, a step number (the engine's exported plans
        counted from 0) and a checksum. The host carries the bytes (a pipe, shared memory, an
        NCCL broadcast); every export of one batch gives the same plan. StateError on an engine
        of ranks POOL (its batches are imported); ValueError after the batch ended."""
        n = ctypes.c_uint64()
        with self._engine._lock:
            handle = self._live()
            self._check(lib.pkv_batch_export_plan(handle, None, 0, ctypes.byref(n)))
            buf = (ctypes.c_uint8 * n.value)()
            self._check(lib.pkv_batch_export_plan(handle, buf, n.value, ctypes.byref(n)))
        return bytes(buf)

    def end(self):
        """The step ran: its tokens become computed, full blocks are sealed (pkv_batch_end).
        StateError for a batch of Engine.step, which ends with commit() or abort(); on any
        failure the batch stays open."""
        with self._engine._lock:
            handle = self._live()
            if self._scheduled:
                raise make_error(_raw.PKV_ERR_STATE, 'end() is for batches of Engine.batch; this '
                                 'batch of Engine.step is still open: end it with '
                                 'commit(sampled_tokens), or abort()')
            self._check(lib.pkv_batch_end(handle))
            self._close()

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
        ref = self._engine._batch
        if ref is not None and ref() in (self, None):
            self._engine._batch = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None or self._handle is None:
            self.abort()
        elif self._scheduled:
            self.abort()
            raise make_error(_raw.PKV_ERR_STATE, 'a batch of Engine.step left its with-block '
                             'without commit(): aborted, nothing became computed; call '
                             'batch.commit(sampled_tokens) inside the block')
        else:
            try:
                self.end()
            except BaseException:
                self.abort()  # a with-block never leaves a batch open
                raise

    def __del__(self):
        # dropped while open: abort, so the engine can plan its next step. A batch whose engine
        # is closed was freed with it (_handle None).
        if getattr(self, '_handle', None) is not None:
            try:
                self.abort()
            except Exception:  # at interpreter shutdown the modules may be gone
                pass


class RankBatch(Batch):
    """One rank's handle of a batch (Batch.rank, pkv_batch_rank, since 0.10.0) on an engine of
    params.ranks Ranks.ALL: attention() runs on rank .rank_index's pool with its heads. The plan
    (view, counts, arrays) is the batch's; end(), commit() and abort() end the batch (every
    rank's); once the batch ended every call raises ValueError. Dropping it changes nothing."""

    def __init__(self, batch, handle, rank):
        super().__init__(batch._engine, handle, batch._scheduled)
        self._batch, self.rank_index = batch, rank

    @property
    def batch(self):
        """The batch this is a rank's handle of."""
        return self._batch

    @property
    def closed(self):
        return self._batch.closed

    def _live(self):
        self._batch._live()  # ValueError once the batch ended: its rank handles went with it
        return self._handle

    @property
    def view(self):
        return self._batch.view

    def end(self):
        """Ends the batch, every rank's (Batch.end)."""
        self._batch.end()

    def commit(self, sampled_tokens=None):
        """Commits the batch, every rank's (Batch.commit)."""
        self._batch.commit(sampled_tokens)

    def abort(self):
        """Aborts the batch, every rank's (Batch.abort). Idempotent."""
        self._batch.abort()

    def __exit__(self, exc_type, exc, tb):
        return self._batch.__exit__(exc_type, exc, tb)

    def __del__(self):
        pass  # the batch's to end: a rank's handle dropped ends nothing


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
        'copy_kind': lambda v: v.num_copies,  # CopyKind: COW, SWAP_OUT, SWAP_IN, OFFLOAD, LOAD
        'sample_rows': lambda v: v.num_seqs,
        # KV groups: each group's slot mapping and padded tables, group 0's first (the ones above)
        'group_slot_mapping': lambda v: v.num_kv_groups * v.num_tokens,
        'group_block_tables': lambda v: v.num_kv_groups * v.num_seqs * v.max_blocks_per_seq,
        # (since 0.6.0) each sequence's state slot ([] without STATE layers: pkv's NULL)
        'state_slots': lambda v: v.num_seqs,
    }

    def __init__(self, batch, raw):
        # weak: a view kept must not keep a dropped batch open, nor make a cycle that delays it
        self._batch, self.raw = weakref.ref(batch), raw

    def _live(self):
        batch = self._batch()
        if batch is None:
            raise ValueError('pkv batch is ended, aborted, or its engine closed')
        batch._live()

    def __getattr__(self, name):
        raw = self.__dict__['raw']
        if name in self._ARRAYS and any(f == name for f, _ in raw._fields_):
            self._live()
            ptr = getattr(raw, name)
            n = self._ARRAYS[name](raw)
            values = list(ptr[:n]) if n and ptr else []
            return [typed(CopyKind, k) for k in values] if name == 'copy_kind' else values
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


def _rows(n, kv_heads, per_token, mla):
    """k's or v's expected shape as text, for a refusal."""
    if mla:
        return '%d tokens x %d' % (n, per_token)
    return '%d tokens x %d kv heads x %d' % (n, kv_heads, per_token // max(kv_heads, 1))


def _check_absent(e, layer, k, k_dim, v, v_dim):
    """Refuses k or v where the layer takes none (or none where it needs one), saying why,
    before pkv is called."""
    if k_dim is False:
        raise make_error(_raw.PKV_ERR_INVALID_ARGUMENT, 'attention: layer %d is a STATE layer '
                         '(a recurrent state, no K and V): pkv has no attention for it; run its '
                         'recurrence on the state slots of batch.state_slots' % layer)
    if e.mla and v is not None:
        raise make_error(_raw.PKV_ERR_INVALID_ARGUMENT, 'attention: v must be None on an MLA '
                         'engine: it caches no V (the latents in k are both)')
    if k_dim is None and (k is not None or v is not None):
        raise make_error(_raw.PKV_ERR_INVALID_ARGUMENT, 'attention: layer %d is SHARED (it reads '
                         'layer %d\'s K and V and writes none): k and v must be None'
                         % (layer, e.layer_info(layer).source_layer))
    if k_dim is not None and k is None:
        raise make_error(_raw.PKV_ERR_INVALID_ARGUMENT, 'attention: k is None; only a SHARED '
                         'layer takes no K')
    if v_dim is None and v is not None:
        raise make_error(_raw.PKV_ERR_INVALID_ARGUMENT, 'attention: v must be None on layer %d: '
                         'its V is K (k_eq_v), stored once' % layer)
    if v_dim is not None and v is None:
        raise make_error(_raw.PKV_ERR_INVALID_ARGUMENT, 'attention: v is None; only an MLA '
                         'engine, a k_eq_v layer or a SHARED layer takes no V')
