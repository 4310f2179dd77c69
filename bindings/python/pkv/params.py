"""Engine parameters (pkv_engine_params), the KV profiler (pkv_profile), the KV groups
(pkv_kv_groups), a config's per-layer windows (pkv_hf_config_layer_windows) and specs
(pkv_engine_params_from_hf_config_layers), and its digest (pkv_hf_config_digest)."""
import ctypes
import json

from . import _raw
from ._lib import lib, text
from .enums import KvLayout, typed  # noqa: F401  KvLayout: pkv.params.KvLayout as before
from .errors import make_error
from .layers import kv_group_info, spec_array, specs_from
from .records import FIELD_ENUMS, KvGroups, record


def _typed(name, value):
    """A field's value as this binding types it: an enum field (kv_layout, dtype, device, ...) as
    its pkv.enums class (an int pkv does not know stays an int)."""
    return typed(FIELD_ENUMS[name], value) if name in FIELD_ENUMS else value


def check(status):
    """Raises the PkvError of a failed call that has no engine (message: pkv_last_error())."""
    if status != _raw.PKV_OK:
        raise make_error(status, text(lib.pkv_last_error()))


def _config_bytes(config):
    """A Hugging Face config.json given as its text (str/bytes), a dict, or a path ending in
    .json, as bytes."""
    if isinstance(config, dict):
        config = json.dumps(config)
    elif isinstance(config, str) and config.endswith('.json') and not config.lstrip().startswith('{'):
        with open(config, 'rb') as f:
            config = f.read()
    return config.encode('utf-8') if isinstance(config, str) else bytes(config)


def hf_config_layer_windows(config):
    """Each layer's sliding window (0 = full attention) of a Hugging Face config.json (text,
    dict or path), as pkv_hf_config_layer_windows reads it (layer_types, sliding_window_pattern,
    Gemma 2's alternation, use_sliding_window with max_window_layers, or one window for all)."""
    data = _config_bytes(config)
    n = ctypes.c_uint32()
    check(lib.pkv_hf_config_layer_windows(data, len(data), None, 0, ctypes.byref(n)))
    out = (ctypes.c_uint32 * n.value)()
    check(lib.pkv_hf_config_layer_windows(data, len(data), out, n.value, ctypes.byref(n)))
    return list(out)


def hf_config_digest(config):
    """A model id for StoreParams(model_id=...) from a Hugging Face config.json (text, dict or
    path), as pkv_hf_config_digest makes it: 'config-sha256:' and SHA-256 of the text in hex. It
    tells models of other configs apart; two fine-tunes of one base model share a config, so give
    those a weights digest or 'org/model@revision' instead. A dict is hashed as json.dumps writes
    it; a config that pkv cannot read is InvalidArgumentError."""
    data = _config_bytes(config)
    out = ctypes.create_string_buffer(_raw.PKV_HF_CONFIG_DIGEST_BYTES)
    check(lib.pkv_hf_config_digest(data, len(data), out, len(out)))
    return out.value.decode('ascii')


class Params:
    """pkv_engine_params with pkv's defaults (pkv_engine_params_init); every field of the C
    struct is an attribute. Params(num_layers=32, head_dim=128, ...) sets fields by name.

    kv_layout reads back as a KvLayout (KvLayout.HEADS, the default, or KvLayout.MLA with
    kv_lora_rank and qk_rope_head_dim: num_kv_heads 1, head_dim their sum, softmax_scale > 0).

    layer_windows is a list of ints (one window per layer, 0 = full attention) or None: the
    Params keeps the C array it points to, and its length must be num_layers when the params are
    used (InvalidArgumentError otherwise).

    layer_specs (since 0.5.0) is a list of pkv.LayerSpec, one per layer, or None (every layer as
    the flat fields say): kept as a C array the same way, with layer_spec_size set to match (it
    is not set by hand). With it, sliding_window must be 0 and layer_windows None.

    ranks (since 0.10.0) reads back as a Ranks: ONE (the default), ALL (one engine holding every
    rank's pool: tp_size x pp_size of them; Batch.rank(r) is rank r's handle) or POOL (rank
    (tp_rank, pp_rank)'s pool only, running the plans a decider exported: Engine.import_plan).
    rank_device_ids is a list of ints (each rank's CUDA device, tp_size x pp_size of them, with
    ranks ALL on CUDA) or None (every rank on device_id), kept as a C array as layer_windows."""

    __slots__ = ('_c', '_windows', '_specs', '_devices')

    def __init__(self, **fields):
        object.__setattr__(self, '_c', _raw.pkv_engine_params())
        object.__setattr__(self, '_windows', None)
        object.__setattr__(self, '_specs', None)
        object.__setattr__(self, '_devices', None)
        check(lib.pkv_engine_params_init(ctypes.byref(self._c), ctypes.sizeof(self._c)))
        for name, value in fields.items():
            setattr(self, name, value)

    @classmethod
    def from_hf_config(cls, config, **fields):
        """Params with the model shape read from a Hugging Face config.json, given as its text
        (str/bytes), a dict, or a path ending in .json; then fields set by name. A model whose
        layers have different windows (Gemma 2/3, gpt-oss) gets them as layer_windows; one window
        for every layer (Mistral) is sliding_window. An MLA config (kv_lora_rank and
        qk_rope_head_dim: DeepSeek V2/V3, Kimi K2) gets kv_layout KvLayout.MLA, those two,
        num_kv_heads 1, head_dim their sum and the model's softmax_scale."""
        data = _config_bytes(config)
        p = cls()
        check(lib.pkv_engine_params_from_hf_config(ctypes.byref(p._c), data, len(data)))
        windows = hf_config_layer_windows(data)
        if any(w != windows[0] for w in windows):
            p.layer_windows = windows
        for name, value in fields.items():
            setattr(p, name, value)
        return p

    @classmethod
    def from_hf_config_layers(cls, config, **fields):
        """Params and each layer's spec read from a Hugging Face config.json (text, dict or path;
        pkv_engine_params_from_hf_config_layers), for the models whose layers differ: gpt-oss
        (sinks), Gemma 2 (soft-capping), Gemma 3n / 4 (heads per layer, K = V, shared layers),
        Llama 4 (chunks). layer_specs is None when the flat fields describe every layer; then
        fields set by name."""
        data = _config_bytes(config)
        p, n = cls(), ctypes.c_uint32()
        size = ctypes.sizeof(_raw.pkv_layer_spec)
        check(lib.pkv_engine_params_from_hf_config_layers(ctypes.byref(p._c), data, len(data),
                                                          None, size, 0, ctypes.byref(n)))
        specs = (_raw.pkv_layer_spec * n.value)()
        check(lib.pkv_engine_params_from_hf_config_layers(ctypes.byref(p._c), data, len(data),
                                                          specs, size, n.value, ctypes.byref(n)))
        if p._c.layer_specs:  # it points into specs: the Params takes its own copy
            p._c.layer_specs = None
            p.layer_specs = specs_from(ctypes.addressof(specs), n.value, size)
        for name, value in fields.items():
            setattr(p, name, value)
        return p

    @classmethod
    def _from_struct(cls, struct):
        """Params over a struct pkv filled (pkv_engine_params_get): its layer_windows,
        layer_specs and rank_device_ids, which point into the engine, are copied here."""
        p = cls.__new__(cls)
        object.__setattr__(p, '_c', struct)
        object.__setattr__(p, '_windows', None)
        object.__setattr__(p, '_specs', None)
        object.__setattr__(p, '_devices', None)
        if struct.rank_device_ids:
            p.rank_device_ids = list(struct.rank_device_ids[:_num_ranks(struct)])
        if struct.layer_windows:
            p.layer_windows = list(struct.layer_windows[:struct.num_layers])
        if struct.layer_specs:
            address = ctypes.cast(struct.layer_specs, ctypes.c_void_p).value
            size = struct.layer_spec_size or ctypes.sizeof(_raw.pkv_layer_spec)
            p.layer_specs = specs_from(address, struct.num_layers, size)
        return p

    def _checked(self):
        """The C struct, for a call that reads it: layer_windows and layer_specs must have
        num_layers entries, rank_device_ids tp_size x pp_size."""
        for name, given in (('layer_windows', self._windows), ('layer_specs', self._specs)):
            if given is not None and len(given) != self._c.num_layers:
                raise make_error(_raw.PKV_ERR_INVALID_ARGUMENT,
                                 '%s has %d entries, num_layers is %d: give one per layer'
                                 % (name, len(given), self._c.num_layers))
        if self._devices is not None and len(self._devices) != _num_ranks(self._c):
            raise make_error(_raw.PKV_ERR_INVALID_ARGUMENT,
                             'rank_device_ids has %d entries, tp_size x pp_size is %d: give one '
                             'per rank' % (len(self._devices), _num_ranks(self._c)))
        return self._c

    def __getattr__(self, name):
        if name == 'layer_windows':
            windows = object.__getattribute__(self, '_windows')
            return None if windows is None else list(windows)
        if name == 'layer_specs':
            specs = object.__getattribute__(self, '_specs')
            return None if specs is None else specs_from(ctypes.addressof(specs), len(specs),
                                                         ctypes.sizeof(_raw.pkv_layer_spec))
        if name == 'rank_device_ids':
            devices = object.__getattribute__(self, '_devices')
            return None if devices is None else list(devices)
        try:
            return _typed(name, getattr(object.__getattribute__(self, '_c'), name))
        except AttributeError:
            raise AttributeError('pkv_engine_params has no field %r' % name) from None

    def __setattr__(self, name, value):
        if name.startswith('_') or name not in dict(_raw.pkv_engine_params._fields_):
            raise AttributeError('pkv_engine_params has no field %r' % name)
        if name == 'layer_windows':
            windows = None if value is None else (ctypes.c_uint32 * len(value))(*value)
            object.__setattr__(self, '_windows', windows)
            self._c.layer_windows = ctypes.cast(windows, ctypes.POINTER(ctypes.c_uint32)) if windows else None
            return
        if name == 'layer_specs':
            specs = None if value is None else spec_array(value)
            object.__setattr__(self, '_specs', specs)
            self._c.layer_specs = ctypes.cast(specs, ctypes.POINTER(_raw.pkv_layer_spec)) if specs else None
            self._c.layer_spec_size = ctypes.sizeof(_raw.pkv_layer_spec) if specs else 0
            return
        if name == 'rank_device_ids':
            devices = None if value is None else (ctypes.c_int32 * len(value))(*value)
            object.__setattr__(self, '_devices', devices)
            self._c.rank_device_ids = (ctypes.cast(devices, ctypes.POINTER(ctypes.c_int32))
                                       if devices else None)
            return
        if name == 'layer_spec_size':
            raise AttributeError('layer_spec_size follows layer_specs: set layer_specs')
        setattr(self._c, name, value)

    def copy(self):
        """An independent copy (its own layer_windows, layer_specs, rank_device_ids arrays)."""
        c = _raw.pkv_engine_params.from_buffer_copy(self._c)
        c.layer_windows, c.layer_specs, c.rank_device_ids = None, None, None  # its own, below
        p = Params._from_struct(c)
        p.layer_windows = self.layer_windows
        p.layer_specs = self.layer_specs
        p.rank_device_ids = self.rank_device_ids
        return p

    def as_dict(self):
        d = {name: _typed(name, getattr(self._c, name)) for name, _ in self._c._fields_}
        d['layer_windows'] = self.layer_windows
        d['layer_specs'] = self.layer_specs
        d['rank_device_ids'] = self.rank_device_ids
        return d

    def __repr__(self):
        shown = ('num_layers', 'num_q_heads', 'num_kv_heads', 'head_dim', 'dtype', 'block_size',
                 'num_blocks', 'device')
        return 'Params(%s)' % ', '.join('%s=%r' % (n, getattr(self._c, n)) for n in shown)

    def profile(self):
        return profile(self)

    def kv_groups(self):
        return kv_groups(self)

    def kv_group_info(self, group):
        """pkv.kv_group_info(self, group): one KV group and its bytes."""
        return kv_group_info(self, group)


def _num_ranks(c):
    """tp_size x pp_size of a pkv_engine_params (pp_size 0 is 1): rank_device_ids' length."""
    return c.tp_size * max(c.pp_size, 1)


def kv_groups(params):
    """How the layers of params are grouped for the pool (pkv_kv_groups), as a KvGroups:
    num_groups, group_layers (layers a block holds), group_window (each group's window, 0 =
    full attention; full groups first), layer_group and layer_slot (each layer's group and its
    place in that group's blocks)."""
    c = params._checked()
    n, layers = ctypes.c_uint32(), ctypes.c_uint32()
    check(lib.pkv_kv_groups(ctypes.byref(c), None, None, None, 0, ctypes.byref(n), ctypes.byref(layers)))
    group_window = (ctypes.c_uint32 * n.value)()
    layer_group = (ctypes.c_uint32 * c.num_layers)()
    layer_slot = (ctypes.c_uint32 * c.num_layers)()
    check(lib.pkv_kv_groups(ctypes.byref(c), layer_group, layer_slot, group_window, n.value,
                            ctypes.byref(n), ctypes.byref(layers)))
    return KvGroups(num_groups=n.value, group_layers=layers.value, group_window=list(group_window),
                    layer_group=list(layer_group), layer_slot=list(layer_slot))


def profile(params):
    """How many KV blocks fit and why (pkv_profile), as a KvBudget (pkv_kv_budget's fields).
    When the budget is too small it raises OutOfMemoryError whose .budget has every term,
    shortfall_bytes included."""
    out = _raw.pkv_kv_budget(struct_size=ctypes.sizeof(_raw.pkv_kv_budget))
    status = lib.pkv_profile(ctypes.byref(params._checked()), ctypes.byref(out))
    if status != _raw.PKV_OK:
        err = make_error(status, text(lib.pkv_last_error()))
        if status == _raw.PKV_ERR_OUT_OF_MEMORY:
            err.budget = record(out)
        raise err
    return record(out)
