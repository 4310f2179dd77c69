"""Engine (pkv_engine). Its sequences are sequence.py's Sequence."""
import ctypes
import threading
import weakref

from . import _raw
from ._buffers import byte_string, int32_array
from ._lib import lib, text
from ._owner import Owner
from .errors import make_error
from .enums import LayerKind, Tier
from .events import EventPublisherParams
from .extra_keys import key_array
from .layers import kv_group_info
from .params import KvLayout, Params, check, kv_groups
from .records import record
from .retention import RetentionCalls, check_priority
from .sequence import Sequence
from .store import StoreParams


class Engine(Owner, RetentionCalls):
    """A KV-cache engine. Use it as a context manager, or call close(); a closed engine refuses
    every call with ValueError. Calls on one Engine may come from several threads (each runs under
    the engine's lock, together with reading its error message).

        with pkv.Engine(pkv.Params(num_layers=2, ...)) as engine:
            seq = engine.allocate(prompt)

    store: the store tier (needs prefix caching and a host tier): a StoreParams (file(),
    redis(), callback()), or the host's own store object (get/put[/exists]: pkv.DictStore), which
    the engine keeps alive and pkv calls from its threads until close() (which waits for the
    queued writes).

    event_publisher: an EventPublisherParams: the engine publishes its KV events over ZeroMQ in
    vLLM's protocol (see event_publisher_info()).
    """

    def __init__(self, params=None, store=None, event_publisher=None, **fields):
        p = params.copy() if params else Params()
        for name, value in fields.items():
            setattr(p, name, value)
        self._store_keep = None
        p._c.store = None
        if store is not None:
            sp = store if isinstance(store, StoreParams) else StoreParams.callback(store)
            c, keep = sp._struct()
            p._c.store = ctypes.pointer(c)
            self._store_keep = (c, keep)  # the callbacks live as long as the engine
        p._c.event_publisher = None
        publisher_keep = None
        if event_publisher is not None:
            if not isinstance(event_publisher, EventPublisherParams):
                raise TypeError('event_publisher must be a pkv.EventPublisherParams')
            publisher_keep = event_publisher._struct()  # until create has copied it
            p._c.event_publisher = ctypes.pointer(publisher_keep[0])
        handle = ctypes.POINTER(_raw.pkv_engine)()
        # layer_windows, layer_specs: p keeps the arrays until create has copied them
        check(lib.pkv_engine_create(ctypes.byref(p._checked()), ctypes.byref(handle)))
        # its agents' handles (pkv.Agent, since 0.12.0): close() destroys those still open first
        self._agents = set()
        self._handle = handle
        self._lock = threading.RLock()
        # the open Batch, if any (pkv allows one per engine), weakly: a Batch dropped while open
        # is aborted by its __del__, never kept alive here
        self._batch = None
        out = _raw.pkv_engine_params(struct_size=ctypes.sizeof(_raw.pkv_engine_params))
        self._call(lib.pkv_engine_params_get, ctypes.byref(out))
        self.params = Params._from_struct(out)  # copies the windows out of the engine
        if p._specs is not None and not out.layer_specs:  # read at create only: keep them here
            self.params.layer_specs = p.layer_specs
        self._layer_shapes = {}  # attention()'s per-layer shapes, with layer specs (layer_info)
        budget = self.budget()
        # what attention() checks its buffers against: the model dtype, the device, and the
        # elements per new token of q, of k/v and of out; MLA's k is the latent (kv heads 1,
        # head_dim its width) and its out kv_lora_rank wide per q head
        self._device, self._dtype = budget.device, out.dtype
        self._q_heads = out.num_q_heads // max(out.tp_size, 1)
        self._kv_heads = budget.kv_heads_per_rank
        self._out_dim = out.kv_lora_rank if self.mla else out.head_dim

    # ------------------------------------------------------------------ lifetime
    def close(self):
        """Destroys the engine, its sequences and any open batch, after its open transfer agents
        (pkv.Agent: each closed, its pulls in flight failed). Idempotent."""
        with self._lock:
            if self._handle is None:
                return
            for agent in list(self._agents):  # an agent must not outlive its engine
                agent.destroy()
            self._agents.clear()
            batch = self._batch() if self._batch is not None else None
            if batch is not None:
                batch._handle = None  # freed by pkv_engine_destroy
            self._batch = None
            lib.pkv_engine_destroy(self._handle)  # waits for the store's queued writes
            self._handle = None
            self._store_keep = None  # pkv calls the store no more

    @property
    def mla(self):
        """True for an MLA engine (params.kv_layout KvLayout.MLA): attention() and
        set_kv_scales() take no V."""
        return self.params.kv_layout == KvLayout.MLA

    def _call(self, fn, *args):
        """fn(handle, *args) under the lock; a failure raises with the engine's message."""
        with self._lock:
            if self._handle is None:
                raise ValueError('pkv engine is closed')
            status = fn(self._handle, *args)
            if status != _raw.PKV_OK:
                raise make_error(status, text(lib.pkv_engine_last_error(self._handle)))

    @property
    def last_error(self):
        with self._lock:
            return text(lib.pkv_engine_last_error(self._handle)) if self._handle else ''

    # ------------------------------------------------------------------ sequences
    def allocate(self, tokens, salt=None, extra_keys=None, lora_id=0, cache_priority=0,
                 cache_retention_ms=0):
        """Admits a prompt (pkv_allocate); returns its Sequence, whose num_cached_tokens says how
        many tokens the prefix cache served. NoSpaceError: nothing changed.

        salt: a tenant key (bytes or str): different salts never share blocks. extra_keys (since
        0.5.0): pkv.ExtraKeys (a multimodal item's content hash over its placeholder tokens),
        sorted and not overlapping; lora_id: the LoRA adapter the KV is computed with (0 = none).
        A block hits only under equal tokens, extra keys and adapter.

        cache_priority (since 0.8.0): the eviction priority its blocks keep when it releases them,
        CACHE_PRIORITY_MIN .. CACHE_PRIORITY_MAX (lower evicted first; 0, plain LRU);
        cache_retention_ms: 0 = it never decays, else it holds that long after the release."""
        arr, n = int32_array(tokens)
        sp, keep = _seq_params(salt, extra_keys, lora_id, cache_priority, cache_retention_ms)
        seq, cached = ctypes.c_uint64(), ctypes.c_uint32()
        self._call(lib.pkv_allocate, arr, n, sp, ctypes.byref(seq), ctypes.byref(cached))
        del keep
        return Sequence(self, seq.value, cached.value)

    def allocate_query(self, tokens, salt=None, extra_keys=None, lora_id=0):
        """(free blocks pkv_allocate would take now, tokens it would find cached); changes nothing."""
        arr, n = int32_array(tokens)
        sp, keep = _seq_params(salt, extra_keys, lora_id)
        blocks, cached = ctypes.c_uint32(), ctypes.c_uint32()
        self._call(lib.pkv_allocate_query, arr, n, sp, ctypes.byref(blocks), ctypes.byref(cached))
        del keep
        return blocks.value, cached.value

    def sequence(self, seq_id):
        """The Sequence object of an existing id (e.g. one read from a BatchView)."""
        return Sequence(self, int(seq_id), 0)

    # ------------------------------------------------------------------ steps
    def batch(self, seqs, num_new_tokens=None):
        """Plans one step over seqs (Sequence objects or ids): pkv_batch_begin. Use the Batch as
        a context manager: it ends on success and is aborted on an exception."""
        from .batch import Batch
        ids, n = _ids(seqs)
        counts = None
        if num_new_tokens is not None:
            counts = (ctypes.c_uint32 * n)(*num_new_tokens)
            if len(num_new_tokens) != n:
                raise ValueError('num_new_tokens needs one count per sequence')
        handle = ctypes.POINTER(_raw.pkv_batch)()
        with self._lock:
            self._call(lib.pkv_batch_begin, ids, counts, n, ctypes.byref(handle))
            batch = Batch(self, handle)
            self._batch = weakref.ref(batch)
            return batch

    # ------------------------------------------------------------------ scheduler
    def submit(self, prompt, max_new_tokens=16, stop_token=-1, priority=0, salt=None,
               extra_keys=None, lora_id=0, cache_priority=0, cache_retention_ms=0,
               hold_on_finish=False, hold_timeout_ms=0, num_remote_tokens=0):
        """Queues a request (pkv_submit); returns its Sequence. salt, extra_keys, lora_id, the
        cache_*: as allocate()'s (priority orders the queue; cache_priority, eviction).

        KV transfers (since 0.12.0): hold_on_finish=True makes it hold its blocks for a transfer
        out when it finishes, as hold() does (hold_timeout_ms that hold's timeout: 0 =
        TRANSFER_TIMEOUT_DEFAULT_MS, None = none), unless the hold would pass
        params.max_held_blocks (it then finishes without one: stats().num_holds_refused).
        num_remote_tokens=N: its first N prompt tokens' KV comes from another engine (N below
        the prompt's length): step() admits it RECEIVING, drain_receiving() lists it, and
        receive_end() ends the fill. InvalidArgumentError for N >= the prompt's length;
        UnsupportedError for hold_on_finish with a timeout on an engine of one rank of several."""
        arr, n = int32_array(prompt, 'prompt')
        rp = _raw.pkv_request_params()
        check(lib.pkv_request_params_init(ctypes.byref(rp), ctypes.sizeof(rp)))
        rp.max_new_tokens, rp.stop_token, rp.priority = max_new_tokens, stop_token, priority
        data, rp.cache_salt_len = byte_string(salt)
        buf = ctypes.create_string_buffer(data, rp.cache_salt_len) if data is not None else None
        rp.cache_salt = ctypes.cast(buf, ctypes.c_void_p) if buf is not None else None
        keys, rp.num_extra_keys, keep = key_array(extra_keys)
        rp.extra_keys = ctypes.cast(keys, ctypes.POINTER(_raw.pkv_extra_key)) if keys else None
        rp.extra_key_size = ctypes.sizeof(_raw.pkv_extra_key)  # the stride of keys
        rp.lora_id = _lora(lora_id)
        retention = check_priority(cache_priority, cache_retention_ms)
        rp.cache_priority, rp.cache_retention_ms = retention
        rp.hold_on_finish = 1 if hold_on_finish else 0
        rp.hold_timeout_ms = _timeout(hold_timeout_ms, 'hold_timeout_ms')
        rp.num_remote_tokens = _uint32(num_remote_tokens, 'num_remote_tokens')
        seq = ctypes.c_uint64()
        self._call(lib.pkv_submit, arr, n, ctypes.byref(rp), ctypes.byref(seq))
        del keep
        return Sequence(self, seq.value, 0)

    def step(self):
        """The scheduler's next batch (pkv_step), or None when nothing is to run. Run it, then
        batch.commit(sampled_tokens), or abort() it; its end() is refused (StateError, the batch
        kept open). Left in a with-block without commit, or dropped, it is aborted.

            with engine.step() as batch:
                ...                                 # attention() per layer, sample
                batch.commit(sampled_tokens)"""
        from .batch import Batch
        handle = ctypes.POINTER(_raw.pkv_batch)()
        with self._lock:
            self._call(lib.pkv_step, ctypes.byref(handle))
            if not handle:
                return None
            batch = Batch(self, handle, scheduled=True)
            self._batch = weakref.ref(batch)
            return batch

    def drain_finished(self):
        """The requests finished since the last call, as Sequences (release them when read)."""
        out, got = [], ctypes.c_uint32()
        buf = (ctypes.c_uint64 * 256)()
        while True:
            self._call(lib.pkv_drain_finished, buf, len(buf), ctypes.byref(got))
            out += [Sequence(self, i, 0) for i in buf[:got.value]]
            if got.value < len(buf):
                return out

    def drain_kv_events(self, max_events=4096):
        """Up to max_events queued KV events (enable_kv_events), oldest first, as KvEvents
        with type (an EventType), num_tokens, seq_no, block_hash, parent_hash and medium (a Tier)
        (every field of pkv_kv_event; medium: TIER_DEVICE or TIER_HOST where the block was stored
        or removed, TIER_NONE for EVENT_ALL_CLEARED and EVENT_OVERFLOW; group: the KV group whose
        block it is, 0 without windows; a checkpoint of the recurrent state (pkv 0.6): the group
        one past the KV groups, kv_groups().num_groups)."""
        buf = (_raw.pkv_kv_event * max_events)()
        got = ctypes.c_uint32()
        # our sizeof: a library newer than _raw fills our fields only, an older one zeroes the rest
        self._call(lib.pkv_drain_kv_events_sized, buf, ctypes.sizeof(_raw.pkv_kv_event), max_events,
                   ctypes.byref(got))
        return [record(ev) for ev in buf[:got.value]]

    def reset_prefix_cache(self):
        """Evicts every cached (unreferenced) block from the prefix cache."""
        self._call(lib.pkv_reset_prefix_cache)

    # ------------------------------------------------------------------ state
    def stats(self):
        """The engine's counters (pkv_engine_stats), as a Stats."""
        return self._get(_raw.pkv_stats, lib.pkv_engine_stats)

    def budget(self):
        """The pool's budget (pkv_engine_budget), as a KvBudget: pkv_kv_budget's fields, the
        attention variants' included (kv_dtype, kv_scale_bytes, num_kv_groups, group_layers,
        padded_layers)."""
        return self._get(_raw.pkv_kv_budget, lib.pkv_engine_budget)

    def kv_groups(self):
        """How the engine's layers are grouped (pkv_kv_groups of its parameters)."""
        return kv_groups(self.params)

    def set_kv_scales(self, layer, k_scales, v_scales=None):
        """fp8 KV (kv_dtype FP8_E4M3 / FP8_E5M2): layer's K and V scales, one float per kv head
        of this rank each (finite, > 0; 1.0 until set), before the first sequence
        (pkv_set_kv_scales). An MLA engine's k_scales is the latent's one scale, and v_scales
        may be None (passed as NULL: there is no V); other engines need both. With layer specs,
        one per kv head of the layer (layer_info), a k_eq_v layer's v_scales may be None, and a
        SHARED layer's are its source's (refused here). StateError once a sequence was made;
        InvalidArgumentError for a cache that is not fp8."""
        heads = (self.budget().kv_heads_per_rank if self.params._specs is None
                 else self.layer_info(layer).kv_heads)
        arrays = []
        for name, scales in (('k_scales', k_scales), ('v_scales', v_scales)):
            if scales is None:  # NULL: pkv refuses it but for an MLA engine's v_scales
                arrays.append(None)
                continue
            values = [float(x) for x in scales]
            if len(values) != heads:
                raise make_error(_raw.PKV_ERR_INVALID_ARGUMENT, '%s needs %d values (kv heads per '
                                 'rank), got %d' % (name, heads, len(values)))
            arrays.append((ctypes.c_float * heads)(*values))
        self._call(lib.pkv_set_kv_scales, ctypes.c_uint32(layer), arrays[0], arrays[1])

    def set_attention_sinks(self, layer, sinks):
        """The sink logits of a layer whose spec has sinks (LayerSpec(sinks=True); gpt-oss): one
        finite float per q head of this rank, before the first sequence
        (pkv_set_attention_sinks). attention() on such a layer is StateError until they are
        set; StateError once a sequence was made; InvalidArgumentError for a layer without
        sinks or a count that is not this rank's q heads."""
        values = [float(x) for x in sinks]
        arr = (ctypes.c_float * len(values))(*values)
        self._call(lib.pkv_set_attention_sinks, ctypes.c_uint32(layer), arr,
                   ctypes.c_uint32(len(values)))

    def layer_info(self, layer):
        """Layer `layer` of the pool (pkv_layer_info), as a LayerInfo: its spec resolved (kind a
        LayerKind, attention an AttentionKind, k_eq_v and sinks bool, softmax_scale the one
        attention() uses), its KV group and source_layer, and where its K and V are (k_base,
        v_base: int addresses; strides in elements of the pool's dtype) for a host's own
        kernels. A STATE layer's (since 0.6.0) has no K and V: part i of slot s's state is
        state_bytes[i] bytes at pool_info().state_base + s * state_slot_bytes + state_offset[i],
        a dense array of state_shape[i] (a tuple of dimensions) of state_dtype[i]."""
        return self._get(_raw.pkv_layer_info, lib.pkv_layer_info, ctypes.c_uint32(layer))

    def kv_group_info(self, group):
        """One KV group of the engine and its bytes (pkv.kv_group_info of its parameters)."""
        return kv_group_info(self.params, group)

    def _attention_shape(self, layer):
        """(kv heads, then q, k, v and out elements per new token) of pkv_attention on `layer`,
        k or v None where the layer takes NULL, k False on a STATE layer (no attention); with
        layer specs from layer_info, once per layer."""
        if self.params._specs is None:
            kv = self._kv_heads * self.params.head_dim
            return (self._kv_heads, self._q_heads * self.params.head_dim, kv,
                    None if self.mla else kv, self._q_heads * self._out_dim)
        with self._lock:
            if layer not in self._layer_shapes:
                i = self.layer_info(layer)
                if i.kind == LayerKind.STATE:
                    return (0, 0, False, None, 0)
                shared = i.kind == LayerKind.SHARED
                self._layer_shapes[layer] = (
                    i.kv_heads, self._q_heads * i.head_dim, None if shared else i.kv_heads * i.head_dim,
                    None if shared or i.k_eq_v else i.kv_heads * i.v_head_dim,
                    self._q_heads * i.v_head_dim)
            return self._layer_shapes[layer]

    def store_error(self):
        """The store's last problem (a miss by error, a rejected value, a failed write) as text;
        '' when there was none or the engine has no store (pkv_engine_store_error)."""
        n = ctypes.c_uint32()
        with self._lock:
            self._call(lib.pkv_engine_store_error, None, 0, ctypes.byref(n))
            buf = ctypes.create_string_buffer(n.value + 1)
            self._call(lib.pkv_engine_store_error, buf, len(buf), ctypes.byref(n))
        return buf.value.decode('utf-8', 'replace')

    def pool_info(self):
        """Where the pool is (pkv_pool_info), as a PoolInfo: k_base, v_base (int addresses, or
        None), strides, dtype and model_dtype (Dtype), kernels (str), .... An MLA engine's
        k_base holds the latents and its v_base and host_v_base are None. Layers of unequal
        shapes (layer specs) share one range of pages: num_layers 1, k_base the first page,
        v_base None, block_stride the page; layer_info(l) says where each layer is. With STATE
        layers (since 0.6.0) state_base is where num_state_slots slots of state_slot_bytes
        are (None and 0 without); with a host tier too, host_state_base is where
        num_host_state_slots host slots of state_slot_bytes are (swapped-out states in the first
        max_num_seqs, offloaded checkpoints after them; None and 0 otherwise)."""
        return self._get(_raw.pkv_pool_info, lib.pkv_pool_info)

    def event_publisher_info(self):
        """What the event publisher did (pkv_event_publisher_info), as an EventPublisherInfo:
        endpoint and replay_endpoint as bound (str), next_seq, events_published, events_dropped,
        replay_requests, events_queued. StateError without a publisher."""
        return self._get(_raw.pkv_event_publisher_info, lib.pkv_event_publisher_info)

    def check(self):
        """Checks every block-manager invariant (pkv_engine_check); InternalError if one fails."""
        self._call(lib.pkv_engine_check)

    def set_stream(self, cuda_stream):
        """The CUDA stream (an int address, or None for the default one) pkv_attention runs on."""
        self._call(lib.pkv_engine_set_stream, cuda_stream)

    # ------------------------------------------------------------------ ranks (since 0.10.0)
    def rank_pool_info(self, rank):
        """Rank `rank`'s pool (pkv_rank_pool_info) on an engine of params.ranks Ranks.ALL, as a
        PoolInfo (pool_info() is rank 0's): rank, num_ranks, device_id (-1 on the CPU), tp_rank,
        pp_rank, and the layers of its stage, first_layer .. end_layer - 1, whose K and V its
        pool holds. InvalidArgumentError for a rank not below num_ranks."""
        return self._get(_raw.pkv_pool_info, lib.pkv_rank_pool_info, ctypes.c_uint32(rank))

    def set_rank_stream(self, rank, cuda_stream):
        """Rank `rank`'s CUDA stream (pkv_engine_set_rank_stream; an int address, or None for
        the default one), on that rank's device; set_stream on an engine of several ranks takes
        None only. InvalidArgumentError for a rank not below num_ranks, or a stream other than
        None on a CPU engine."""
        self._call(lib.pkv_engine_set_rank_stream, ctypes.c_uint32(rank), cuda_stream)

    def import_plan(self, plan):
        """Opens the batch a decider exported (Batch.export_plan; pkv_plan_import) on this
        engine of params.ranks Ranks.POOL, made with the decider's parameters (num_blocks and
        host_num_blocks included) and this process's tp_rank and pp_rank. Returns a Batch: its
        attention() runs this rank's heads of its stage's layers; end() or abort() it (the
        decider's batch is the one that commits). Plans come in the order they were exported,
        each once. `plan` is bytes (or any buffer). StateError for a plan out of order (a stale
        one, or one skipped ahead), while a batch is open, or on an engine that is not of ranks
        POOL; InvalidArgumentError for bytes that are no plan of this engine's shape (damaged,
        cut, another version, another shape: the field named). A refused plan changes nothing."""
        from .batch import Batch
        data = bytes(plan)
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data) if data else None
        handle = ctypes.POINTER(_raw.pkv_batch)()
        with self._lock:
            self._call(lib.pkv_plan_import, buf, ctypes.c_uint64(len(data)), ctypes.byref(handle))
            batch = Batch(self, handle)
            self._batch = weakref.ref(batch)
            return batch

    # ------------------------------------------------------------------ block descriptors (0.11)
    def block_segments(self, blocks, tier=Tier.DEVICE, rank=0):
        """The segments holding the KV of block ids `blocks` of `tier` (Tier.DEVICE: the pool;
        Tier.HOST: the host tier) on rank `rank` (pkv_block_segments), as a list of Segment
        (base: an int address, bytes): for each block in order, each of its pool's layers
        (pool_info().num_layers), K then V (MLA: the latent alone); the same count for every
        block. Two engines of equal layout_fingerprint() give segments of equal bytes in the same
        order: copying segment i to segment i moves the blocks. InvalidArgumentError for a tier
        other than DEVICE or HOST, HOST on an engine without a host tier, a block id outside the
        tier, or a rank not below the engine's ranks."""
        ids, n = int32_array(blocks, 'blocks')
        def get(handle, out, cap, count):
            return lib.pkv_block_segments(handle, ctypes.c_uint32(rank), ctypes.c_uint32(tier),
                                          ids, n, out, cap, count)
        return self._segments(get)

    def seq_segments(self, seq, first_block, num_blocks, rank=0):
        """The segments of running sequence `seq`'s (a Sequence or its id) blocks first_block ..
        first_block + num_blocks - 1 on rank `rank` (pkv_seq_segments): for each block index in
        order, each KV group in order, that group's block's segments as block_segments() gives
        them; a block a windowed group gave back gives as many Segment(None, 0), so two engines of
        one layout list each token range at the same positions. InvalidArgumentError for a range
        past seq's blocks (seq.info().num_blocks) or a rank not below the engine's ranks;
        NotFoundError for no such sequence; StateError when seq holds no blocks of the pool
        (waiting, preempted or swapped out)."""
        seq_id = _seq_id(seq)
        def get(handle, out, cap, count):
            return lib.pkv_seq_segments(handle, ctypes.c_uint32(rank), ctypes.c_uint64(seq_id),
                                        ctypes.c_uint32(first_block), ctypes.c_uint32(num_blocks),
                                        out, cap, count)
        return self._segments(get)

    def layout_fingerprint(self, rank=0):
        """Rank `rank`'s layout fingerprint (pkv_layout_fingerprint): 32 bytes of SHA-256 over
        what decides what a block's segments hold and where (the model's shape and dtypes, fp8
        scales, block size, layers, groups, ranks), not over how many blocks either tier has.
        Engines of equal fingerprints can move blocks segment by segment.
        InvalidArgumentError for a rank not below the engine's ranks."""
        out = (ctypes.c_uint8 * 32)()
        self._call(lib.pkv_layout_fingerprint, ctypes.c_uint32(rank), out)
        return bytes(out)

    # ------------------------------------------------------------------ KV transfers (0.12)
    def hold(self, seq, timeout_ms=0):
        """Holds running sequence `seq` (a Sequence or its id; an allocate() one with every token
        computed) for a transfer out (pkv_hold): it stops running and keeps its blocks (and STATE
        working slot) untouched for a transport to read (seq_segments, seq_state_segment) until
        hold_end(), its timeout or close(); then it is finished, holding nothing, and released
        as any. Its sealed blocks stay in the prefix cache meanwhile, and release() refuses it
        (StateError). timeout_ms: 0 = TRANSFER_TIMEOUT_DEFAULT_MS (480 s), None = none.
        NotFoundError for no such sequence; StateError when it is not running, is in the open
        batch, has uncomputed tokens or is a request (submit(hold_on_finish=True) holds one);
        NoSpaceError when its blocks would pass params.max_held_blocks (nothing changed);
        UnsupportedError for a timeout (other than None) on an engine of one rank of several."""
        self._call(lib.pkv_hold, ctypes.c_uint64(_seq_id(seq)),
                   ctypes.c_uint32(_timeout(timeout_ms, 'timeout_ms')))

    def hold_end(self, seq, outcome):
        """Ends `seq`'s hold (pkv_hold_end): the transport is done with its bytes. outcome
        TransferOutcome.DONE or FAILED (counted apart: stats().num_holds_done,
        num_holds_failed). Its blocks go back (sealed ones stay cached) and it is finished.
        InvalidArgumentError for another outcome; NotFoundError for no such sequence;
        StateError when it holds nothing (never held, or its hold ended or timed out)."""
        self._call(lib.pkv_hold_end, ctypes.c_uint64(_seq_id(seq)), _outcome(outcome))

    def drain_receiving(self):
        """The requests that began receiving since the last call (pkv_drain_receiving), as
        Sequences, each listed once: requests of submit(num_remote_tokens=N) that step() admitted
        but whose local prefix hit covers fewer than N tokens. Each waits, never run nor
        preempted: its info() gives the blocks whose KV must arrive (remote_first_block,
        remote_num_blocks), seq_segments() their segments, seq_state_segment() where its
        recurrent state goes; the transport writes them, then receive_end()."""
        out, got = [], ctypes.c_uint32()
        buf = (ctypes.c_uint64 * 256)()
        while True:
            self._call(lib.pkv_drain_receiving, buf, len(buf), ctypes.byref(got))
            out += [Sequence(self, i, 0) for i in buf[:got.value]]
            if got.value < len(buf):
                return out

    def receive_end(self, seq, outcome):
        """Ends receiving request `seq`'s remote fill (pkv_receive_end). TransferOutcome.DONE:
        its first num_remote_tokens tokens are computed, their full blocks sealed into the prefix
        cache as a step's would be, and it runs on at the next step(). FAILED: nothing the
        transfer wrote is used; it waits to be admitted again (preempted) and computes its prompt
        itself. FAILED_FINISH: it finishes (FinishReason.TRANSFER_FAILED; drain_finished() lists
        it). InvalidArgumentError for another outcome; NotFoundError for no such sequence;
        StateError when it is not receiving."""
        self._call(lib.pkv_receive_end, ctypes.c_uint64(_seq_id(seq)), _outcome(outcome))

    def seq_state_segment(self, seq, rank=0):
        """Where sequence `seq`'s recurrent state is on rank `rank` (pkv_seq_state_segment): its
        STATE working slot, a Segment of pool_info().state_slot_bytes, while it is running, held
        or receiving; Segment(None, 0) on an engine without STATE layers (no state to move).
        InvalidArgumentError for a rank not below the engine's ranks; NotFoundError for no such
        sequence; StateError when it holds no working slot (waiting, preempted, swapped out or
        finished)."""
        out = _raw.pkv_segment()
        self._call(lib.pkv_seq_state_segment, ctypes.c_uint32(rank),
                   ctypes.c_uint64(_seq_id(seq)), ctypes.byref(out))
        return record(out)

    def _segments(self, fn):
        """A variable-size pkv_segment output: asks the count, then fills, under one lock."""
        n = ctypes.c_uint32()
        with self._lock:
            self._call(fn, None, 0, ctypes.byref(n))
            out = (_raw.pkv_segment * n.value)()
            self._call(fn, out, n.value, ctypes.byref(n))
        return [record(s) for s in out[:n.value]]

    def _get(self, struct_type, fn, *args):
        out = struct_type(struct_size=ctypes.sizeof(struct_type))
        self._call(fn, *args, ctypes.byref(out))
        return record(out)

    def _array(self, fn, seq_id):
        """A variable-size int32 output: asks the length, then copies, under one lock."""
        n = ctypes.c_uint32()
        with self._lock:
            self._call(fn, ctypes.c_uint64(seq_id), None, 0, ctypes.byref(n))
            out = (ctypes.c_int32 * n.value)()
            self._call(fn, ctypes.c_uint64(seq_id), out, n.value, ctypes.byref(n))
        return list(out[:n.value])

    def __repr__(self):
        return '<pkv.Engine %s>' % ('closed' if self.closed else repr(self.params))


def _ids(seqs):
    ids = [_seq_id(s) for s in seqs]
    return (ctypes.c_uint64 * len(ids))(*ids), len(ids)


def _seq_id(seq):
    """A Sequence's id, or an id given as an int."""
    return seq.id if isinstance(seq, Sequence) else int(seq)


def _uint32(value, name):
    """value checked: a uint32 (ctypes would wrap a negative one silently)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**32:
        raise make_error(_raw.PKV_ERR_INVALID_ARGUMENT, '%s is %r: give an integer 0 .. 2^32-1'
                         % (name, value))
    return value


def _timeout(timeout_ms, name):
    """A hold's timeout in ms as pkv takes it: None (no timeout) is UINT32_MAX; 0 is
    TRANSFER_TIMEOUT_DEFAULT_MS."""
    return 0xFFFFFFFF if timeout_ms is None else _uint32(timeout_ms, name)


def _outcome(outcome):
    """A transfer's outcome (a TransferOutcome, or its int) as a uint32: pkv refuses a value it
    does not know, this a negative one or one that is no integer (InvalidArgumentError both)."""
    return ctypes.c_uint32(_uint32(outcome, 'outcome'))


def _seq_params(salt, extra_keys=None, lora_id=0, cache_priority=0, cache_retention_ms=0):
    """(pointer to pkv_seq_params or None, objects to keep alive during the call)."""
    data, n = byte_string(salt)
    lora_id = _lora(lora_id)
    retention = check_priority(cache_priority, cache_retention_ms)
    if data is None and not extra_keys and not lora_id and retention == (0, 0):
        return None, None  # NULL: what a 0.4 caller passes
    sp = _raw.pkv_seq_params()
    check(lib.pkv_seq_params_init(ctypes.byref(sp), ctypes.sizeof(sp)))
    buf = ctypes.create_string_buffer(data, n) if data is not None else None
    if buf is not None:
        sp.cache_salt_len, sp.cache_salt = n, ctypes.cast(buf, ctypes.c_void_p)
    keys, sp.num_extra_keys, keep = key_array(extra_keys)
    sp.extra_keys = ctypes.cast(keys, ctypes.POINTER(_raw.pkv_extra_key)) if keys else None
    sp.extra_key_size = ctypes.sizeof(_raw.pkv_extra_key)  # the stride of keys
    sp.lora_id = lora_id
    sp.cache_priority, sp.cache_retention_ms = retention
    return ctypes.byref(sp), (sp, buf, keep)


def _lora(lora_id):
    """lora_id checked: a uint64 (ctypes would wrap a negative one silently)."""
    if isinstance(lora_id, bool) or not isinstance(lora_id, int) or not 0 <= lora_id < 2**64:
        raise make_error(_raw.PKV_ERR_INVALID_ARGUMENT, 'lora_id is %r: give the adapter\'s id, '
                         'an integer 0 .. 2^64-1 (0 = none)' % (lora_id,))
    return lora_id
