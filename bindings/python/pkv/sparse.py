"""Sparse attention (since 0.7.0; DeepSeek V3.2 / GLM-5, DESIGN.md §14): the Batch methods over an
MLA layer with an indexer (LayerSpec.indexed), per layer per step in this order:

    batch.indexer_write(layer, index_k)                       # the new tokens' indexer keys
    top = batch.indexer_topk(layer, index_q, weights)         # each token's index_topk positions
    batch.sparse_mla_attention(layer, q, latents, top, out)   # MLA over those keys only

Buffers are as Batch.attention's: C-contiguous, of the engine's model dtype (weights float32,
indices and top-k int32), checked against the step's shape before pkv is called; on a CUDA engine
int device addresses. A layer without an indexer is pkv's InvalidArgumentError, with its message.
"""
import array
import ctypes

from . import _raw
from ._buffers import data_pointer, element_pointer, int32_array
from ._lib import lib
from .enums import TopkKind
from .errors import make_error


class SparseAttention:
    """Batch's sparse-attention calls (a mixin: Batch is one)."""

    def indexer_write(self, layer, k, flags=0):
        """pkv_indexer_write: the new tokens' indexer keys k [num_tokens][index_head_dim] into
        their slots of `layer`, quantized to the layer's index_dtype (fp8: one scale per token,
        max|x| / 448; flags IndexerFlags.SCALE_UE8M0 rounds it up to a power of two). Call it
        before indexer_topk reads them."""
        n, e = self.view.num_tokens, self._engine
        info = _indexer(e, layer, (k,))
        pk = _pointer(e, k, n * info.index_head_dim, False, 'k', info,
                      '%d tokens x index_head_dim %d' % (n, info.index_head_dim))
        with e._lock:
            self._check(lib.pkv_indexer_write(self._live(), layer, pk[0], flags))

    def indexer_topk(self, layer, q, weights, out=None, out_kind=TopkKind.POSITIONS):
        """pkv_indexer_topk: each new token's index_topk best keys. q [num_tokens][index_n_heads]
        [index_head_dim] (model dtype) and weights [num_tokens][index_n_heads] (float32) score
        key s as sum over heads h of weights[h] * relu(q[h] . key(s)). Returns out (a new
        array('i') when None), [num_tokens][index_topk] int32: the keys of highest score
        ascending by position (TopkKind.SLOTS: their slots), then -1 where the context is shorter
        than index_topk. Of equal scores the lower position is kept."""
        n, e = self.view.num_tokens, self._engine
        info = _indexer(e, layer, (q, weights, out))
        heads, dim, topk = info.index_n_heads, info.index_head_dim, info.index_topk
        if out is None and info.index_topk:
            out = array.array('i', [0]) * (n * topk)
        pq = _pointer(e, q, n * heads * dim, False, 'q', info,
                      '%d tokens x %d index heads x %d' % (n, heads, dim))
        pw = _pointer(e, weights, n * heads, False, 'weights', info,
                      '%d tokens x %d index heads' % (n, heads), _raw.PKV_DTYPE_F32)
        po = _int32_pointer(e, out, n * topk, True, 'out', '%d tokens x index_topk %d' % (n, topk))
        with e._lock:
            self._check(lib.pkv_indexer_topk(self._live(), layer, pq[0],
                                             ctypes.cast(pw[0], ctypes.POINTER(ctypes.c_float)),
                                             out_kind, po[0]))
        return out

    def sparse_mla_attention(self, layer, q, k, indices, out):
        """pkv_sparse_mla_attention: Batch.attention's MLA form (q [num_tokens][q heads per rank]
        [W], k the new tokens' latents [num_tokens][W], out [num_tokens][q heads per rank]
        [kv_lora_rank]), each token attending over the positions indices[t][0 .. index_topk) of
        its sequence only (indexer_topk's POSITIONS; -1 and positions past the token's own are
        skipped, a token with none left gets out 0)."""
        n, e = self.view.num_tokens, self._engine
        info = _indexer(e, layer, (q, k, indices, out))
        _, q_dim, k_dim, _, out_dim = e._attention_shape(layer)
        if k is None:
            raise make_error(_raw.PKV_ERR_INVALID_ARGUMENT, 'sparse_mla_attention: k is None: '
                             'give the new tokens\' latents [%d tokens x %d]' % (n, k_dim or 0))
        pq = _pointer(e, q, n * q_dim, False, 'q', info,
                      '%d tokens x %d q heads x %d' % (n, e._q_heads, q_dim // e._q_heads))
        pk = _pointer(e, k, n * (k_dim or 0), False, 'k', info, '%d tokens x %d' % (n, k_dim or 0))
        pi = _int32_pointer(e, indices, n * info.index_topk, False, 'indices',
                            '%d tokens x index_topk %d' % (n, info.index_topk))
        po = _pointer(e, out, n * out_dim, True, 'out', info, '%d tokens x %d q heads x %d'
                      % (n, e._q_heads, out_dim // e._q_heads))
        with e._lock:
            self._check(lib.pkv_sparse_mla_attention(self._live(), layer, pq[0], pk[0], pi[0],
                                                     po[0]))


def _indexer(e, layer, buffers):
    """The layer's LayerInfo, its index_* fields 0 without an indexer (pkv then refuses the call
    with its message, before it reads any buffer). A CUDA engine takes device addresses only."""
    if e._device != _raw.PKV_DEVICE_CPU and not all(
            isinstance(b, int) for b in buffers if b is not None):
        raise make_error(_raw.PKV_ERR_UNSUPPORTED, 'sparse attention: a CUDA engine takes device '
                         'addresses (ints, e.g. tensor.data_ptr()), not host buffers')
    return e.layer_info(layer)


def _pointer(e, obj, count, writable, name, info, shape, dtype=None):
    """element_pointer for a buffer of the layer with an indexer; a layer without one (pkv refuses
    it by name) gets NULL for a missing buffer and the buffer unchecked."""
    if not info.index_head_dim and not isinstance(obj, int):
        return (None, None) if obj is None else data_pointer(obj, 0, writable, name)
    return element_pointer(obj, e._dtype if dtype is None else dtype, count, writable, name, shape)


def _int32_pointer(e, obj, count, writable, name, shape):
    """(int32 pointer, holder) for `count` int32 values of obj (array('i'), numpy int32, a list
    when read-only); an int is a device address."""
    if isinstance(obj, int):
        return ctypes.cast(ctypes.c_void_p(obj), ctypes.POINTER(ctypes.c_int32)), None
    if obj is None:
        return None, None
    if writable:
        mv = memoryview(obj)
        if mv.itemsize != 4 or mv.format not in ('i', '=i', '<i', '@i', 'l', '=l', '<l'):
            raise make_error(_raw.PKV_ERR_INVALID_ARGUMENT, '%s: give int32 elements '
                             '(array(\'i\'), numpy int32), got format %r' % (name, mv.format))
        ptr, holder = data_pointer(mv, 0, True, name)
        n = mv.nbytes // 4
    else:
        holder, n = int32_array(obj, name)
        ptr = holder
    if n < count:
        raise make_error(_raw.PKV_ERR_INVALID_ARGUMENT, '%s: %d int32 values, this step needs %d '
                         '(%s)' % (name, n, count, shape))
    return ctypes.cast(ptr, ctypes.POINTER(ctypes.c_int32)), holder
