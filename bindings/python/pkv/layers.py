"""The cache described per layer (since 0.5.0): LayerSpec (pkv_layer_spec, an element of
Params.layer_specs), and what pkv reports per KV group (pkv_kv_group_info) and per layer of an
engine (pkv_layer_info, Engine.layer_info).

    specs = [pkv.LayerSpec.sliding(128, sinks=True), pkv.LayerSpec(sinks=True)] * 12  # gpt-oss
    gdn = pkv.LayerSpec.state(conv=(8192, 3), ssm=(32, 128, 128), conv_dtype=pkv.Dtype.BF16)
    params = pkv.Params(num_layers=24, ..., layer_specs=specs)
    [pkv.kv_group_info(params, g).bytes_per_token for g in range(params.kv_groups().num_groups)]
"""
import ctypes
import dataclasses

from . import _raw
from ._lib import lib, text
from .enums import AttentionKind, Dtype, LayerKind, typed
from .errors import make_error
from .records import record, state_shapes

_U32 = ('window', 'num_kv_heads', 'head_dim', 'v_head_dim', 'source_layer')
_INDEX = ('index_head_dim', 'index_dtype', 'index_n_heads', 'index_topk')  # (since 0.7.0)
_PARTS, _DIMS = _raw.PKV_MAX_STATE_PARTS, _raw.PKV_MAX_STATE_DIMS


@dataclasses.dataclass
class LayerSpec:
    """One layer of the cache (pkv_layer_spec). A field left 0 takes the engine's flat field
    (num_kv_heads, head_dim, softmax_scale), so LayerSpec() is the layer Params describes.

    kind: LayerKind.ATTENTION (K and V of its own heads), MLA, or SHARED (no cache of its own: it
    reads the K and V of source_layer, an earlier ATTENTION layer of the same shape and window).
    attention: AttentionKind.FULL, SLIDING (window: keys per token, itself included) or CHUNKED
    (window: the chunk size). v_head_dim: V's width (0 = head_dim). k_eq_v: V is K, stored once
    (attention() then takes v None). sinks: a learned logit per q head joins every softmax
    denominator (Engine.set_attention_sinks gives them). logit_softcap c > 0: each scaled score s
    becomes c * tanh(s / c). pkv checks the rules when the params are used.

    kind LayerKind.STATE (since 0.6.0; LayerSpec.state) is a recurrent layer: no K and V (its
    attention fields stay 0) but a fixed-size state per sequence in up to PKV_MAX_STATE_PARTS
    parts: state_shape holds each part's dimensions (outermost first, up to PKV_MAX_STATE_DIMS,
    each >= 1; () for an absent part), state_dtype each part's Dtype (F32, F16 or BF16).

    An MLA layer of a sparse-attention model (since 0.7.0: DeepSeek V3.2, GLM-5; LayerSpec.indexed)
    has an indexer: per token a key of index_head_dim values beside its latent, in the same block,
    of index_dtype (0 or Dtype.FP8_E4M3: fp8 codes with one fp32 scale per token; Dtype.BF16);
    index_n_heads indexer query heads, and index_topk keys kept per query token (Batch's
    indexer_write, indexer_topk and sparse_mla_attention). All four stay 0 without one."""
    kind: LayerKind = LayerKind.ATTENTION
    attention: AttentionKind = AttentionKind.FULL
    window: int = 0
    num_kv_heads: int = 0
    head_dim: int = 0
    v_head_dim: int = 0
    k_eq_v: bool = False
    source_layer: int = 0
    sinks: bool = False
    logit_softcap: float = 0.0
    softmax_scale: float = 0.0
    state_dtype: tuple = (Dtype.F32,) * _PARTS
    state_shape: tuple = ((),) * _PARTS
    index_head_dim: int = 0
    index_dtype: int = 0
    index_n_heads: int = 0
    index_topk: int = 0

    def __post_init__(self):
        # one spelling per spec (lists or fewer parts given), so specs compare equal after a
        # round trip through C; anything else is left for spec_array to refuse by name
        try:
            shape = tuple(tuple(part) for part in self.state_shape)
            dtype = tuple(self.state_dtype)
        except TypeError:
            return
        self.state_shape = shape + ((),) * (_PARTS - len(shape))
        self.state_dtype = dtype + (Dtype.F32,) * (_PARTS - len(dtype))

    @classmethod
    def sliding(cls, window, **fields):
        """A layer attending to its last `window` keys (its own included)."""
        return cls(attention=AttentionKind.SLIDING, window=window, **fields)

    @classmethod
    def chunked(cls, chunk, **fields):
        """A layer attending to the keys of its own `chunk`-token chunk (Llama 4)."""
        return cls(attention=AttentionKind.CHUNKED, window=chunk, **fields)

    @classmethod
    def shared(cls, source_layer, attention=AttentionKind.FULL, window=0, **fields):
        """A layer with no cache of its own, reading source_layer's (Gemma 3n / 4); its
        attention and window are its source's."""
        return cls(kind=LayerKind.SHARED, source_layer=source_layer, attention=attention,
                   window=window, **fields)

    @classmethod
    def indexed(cls, index_head_dim, index_n_heads, index_topk, index_dtype=Dtype.FP8_E4M3,
                **fields):
        """An MLA layer with a sparse-attention indexer (since 0.7.0; DeepSeek V3.2: 128, 64,
        2048, fp8)."""
        return cls(kind=LayerKind.MLA, index_head_dim=index_head_dim,
                   index_n_heads=index_n_heads, index_topk=index_topk, index_dtype=index_dtype,
                   **fields)

    @classmethod
    def state(cls, conv=(), ssm=(), conv_dtype=Dtype.F32, ssm_dtype=Dtype.F32, **fields):
        """A recurrent layer (since 0.6.0: Gated DeltaNet, KDA, Mamba), this rank's state:
        part 0 the conv state's shape (Qwen3-Next: conv_dim x (conv_kernel - 1)), part 1 the
        SSM / delta-rule state's (v_heads x k_dim x v_dim); () leaves a part out."""
        return cls(kind=LayerKind.STATE, state_shape=(tuple(conv), tuple(ssm)),
                   state_dtype=(conv_dtype, ssm_dtype), **fields)


def spec_array(specs):
    """A ctypes array of pkv_layer_spec from LayerSpecs (or dicts of their fields). A value
    no pkv_layer_spec field can hold is InvalidArgumentError naming the layer and field."""
    specs = [s if isinstance(s, LayerSpec) else _from_mapping(i, s) for i, s in enumerate(specs)]
    out = (_raw.pkv_layer_spec * len(specs))()
    for i, s in enumerate(specs):
        c = out[i]
        for name in ('kind', 'attention') + _U32 + _INDEX:
            v = getattr(s, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2**32:
                raise _invalid('layer_specs[%d].%s is %r: give an integer 0 .. 2^32-1'
                               % (i, name, v))
            setattr(c, name, v)
        for name in ('k_eq_v', 'sinks'):
            v = getattr(s, name)
            if v not in (0, 1):  # True, False, 0 and 1
                raise _invalid('layer_specs[%d].%s is %r: give True or False' % (i, name, v))
            setattr(c, name, int(v))
        for name in ('logit_softcap', 'softmax_scale'):
            v = getattr(s, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise _invalid('layer_specs[%d].%s is %r: give a number' % (i, name, v))
            setattr(c, name, float(v))
        _state_into(c, i, s)
    return out


def _state_into(c, i, s):
    """s's state parts into C spec c, refusing what no field can hold, by layer and part."""
    for name, given in (('state_dtype', s.state_dtype), ('state_shape', s.state_shape)):
        if not isinstance(given, (tuple, list)) or len(given) > _PARTS:
            raise _invalid('layer_specs[%d].%s is %r: give a tuple of at most %d parts'
                           % (i, name, given, _PARTS))
    for part, dtype in enumerate(s.state_dtype):
        if isinstance(dtype, bool) or not isinstance(dtype, int) or not 0 <= dtype < 2**32:
            raise _invalid('layer_specs[%d].state_dtype[%d] is %r: give a pkv.Dtype (F32, F16 '
                           'or BF16)' % (i, part, dtype))
        c.state_dtype[part] = dtype
    for part, dims in enumerate(s.state_shape):
        if (not isinstance(dims, tuple) or len(dims) > _DIMS
                or not all(isinstance(d, int) and not isinstance(d, bool) and 0 < d < 2**32
                           for d in dims)):
            raise _invalid('layer_specs[%d].state_shape[%d] is %r: give up to %d dimensions, '
                           'each an integer >= 1 (() for an absent part)' % (i, part, dims, _DIMS))
        for k, d in enumerate(dims):
            c.state_shape[part * _DIMS + k] = d


def _from_mapping(i, d):
    try:
        return LayerSpec(**d)
    except TypeError as e:  # an unknown field name, or not a mapping
        raise _invalid('layer_specs[%d]: %s (give pkv.LayerSpec objects, or dicts of their '
                       'fields)' % (i, e)) from None


def specs_from(address, count, size):
    """LayerSpecs read from `count` C specs at address, `size` bytes apart (the library's own
    sizeof, pkv_engine_params.layer_spec_size); only the fields this binding knows."""
    out = []
    for i in range(count):
        c = _raw.pkv_layer_spec.from_address(address + i * size)
        out.append(LayerSpec(kind=typed(LayerKind, c.kind),
                             attention=typed(AttentionKind, c.attention),
                             **{n: getattr(c, n) for n in _U32},
                             k_eq_v=bool(c.k_eq_v), sinks=bool(c.sinks),
                             logit_softcap=c.logit_softcap, softmax_scale=c.softmax_scale,
                             **_state_from(c, size), **_index_from(c, size)))
    return out


def _state_from(c, size):
    """The state fields of C spec c, when the library's specs have them (since 0.6.0)."""
    if size < _raw.pkv_layer_spec.state_shape.offset + _raw.pkv_layer_spec.state_shape.size:
        return {}
    return dict(state_dtype=tuple(typed(Dtype, d) for d in c.state_dtype),
                state_shape=state_shapes(c.state_shape))


def _index_from(c, size):
    """The indexer fields of C spec c, when the library's specs have them (since 0.7.0); a
    dtype of 0 (fp8) stays 0, so a spec compares equal after a round trip."""
    last = getattr(_raw.pkv_layer_spec, _INDEX[-1])
    if size < last.offset + last.size:
        return {}
    fields = {n: getattr(c, n) for n in _INDEX}
    if fields['index_dtype']:
        fields['index_dtype'] = typed(Dtype, fields['index_dtype'])
    return fields


def kv_group_info(params, group):
    """KV group `group` (< params.kv_groups().num_groups) of params, as a KvGroupInfo
    (pkv_kv_group_info): attention (AttentionKind), window, num_layers, bytes_per_token (its
    layers' K and V of one token, this rank) and padding_bytes_per_block (what its blocks leave
    unused)."""
    out = _raw.pkv_kv_group_info(struct_size=ctypes.sizeof(_raw.pkv_kv_group_info))
    status = lib.pkv_kv_group_info(ctypes.byref(params._checked()), ctypes.c_uint32(group),
                                   ctypes.byref(out))
    if status != _raw.PKV_OK:
        raise make_error(status, text(lib.pkv_last_error()))
    return record(out)


def kv_group_infos(params):
    """kv_group_info of every KV group of params, in group order."""
    return [kv_group_info(params, g) for g in range(params.kv_groups().num_groups)]


def _invalid(message):
    return make_error(_raw.PKV_ERR_INVALID_ARGUMENT, message)
