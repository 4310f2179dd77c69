"""Engine parameters (pkv_engine_params) and the KV profiler (pkv_profile)."""
import ctypes
import json
import types

from . import _raw
from ._lib import lib, text
from .errors import make_error


def check(status):
    """Raises the PkvError of a failed call that has no engine (message: pkv_last_error())."""
    if status != _raw.PKV_OK:
        raise make_error(status, text(lib.pkv_last_error()))


def record(struct):
    """A ctypes result struct as a read-only-ish namespace (struct_size and reserved* left out)."""
    return types.SimpleNamespace(**{name: getattr(struct, name) for name, _ in struct._fields_
                                    if name != 'struct_size' and not name.startswith('reserved')})


class Params:
    """pkv_engine_params with pkv's defaults (pkv_engine_params_init); every field of the C
    struct is an attribute. Params(num_layers=32, head_dim=128, ...) sets fields by name."""

    __slots__ = ('_c',)

    def __init__(self, **fields):
        object.__setattr__(self, '_c', _raw.pkv_engine_params())
        check(lib.pkv_engine_params_init(ctypes.byref(self._c), ctypes.sizeof(self._c)))
        for name, value in fields.items():
            setattr(self, name, value)

    @classmethod
    def from_hf_config(cls, config, **fields):
        """Params with the model shape read from a Hugging Face config.json, given as its text
        (str/bytes), a dict, or a path ending in .json; then fields set by name."""
        if isinstance(config, dict):
            config = json.dumps(config)
        elif isinstance(config, str) and config.endswith('.json') and not config.lstrip().startswith('{'):
            with open(config, 'rb') as f:
                config = f.read()
        data = config.encode('utf-8') if isinstance(config, str) else bytes(config)
        p = cls()
        check(lib.pkv_engine_params_from_hf_config(ctypes.byref(p._c), data, len(data)))
        for name, value in fields.items():
            setattr(p, name, value)
        return p

    @classmethod
    def _from_struct(cls, struct):
        p = cls.__new__(cls)
        object.__setattr__(p, '_c', struct)
        return p

    def __getattr__(self, name):
        try:
            return getattr(object.__getattribute__(self, '_c'), name)
        except AttributeError:
            raise AttributeError('pkv_engine_params has no field %r' % name) from None

    def __setattr__(self, name, value):
        if name.startswith('_') or name not in dict(_raw.pkv_engine_params._fields_):
            raise AttributeError('pkv_engine_params has no field %r' % name)
        setattr(self._c, name, value)

    def as_dict(self):
        return {name: getattr(self._c, name) for name, _ in self._c._fields_}

    def __repr__(self):
        shown = ('num_layers', 'num_q_heads', 'num_kv_heads', 'head_dim', 'dtype', 'block_size',
                 'num_blocks', 'device')
        return 'Params(%s)' % ', '.join('%s=%r' % (n, getattr(self._c, n)) for n in shown)

    def profile(self):
        return profile(self)


def profile(params):
    """How many KV blocks fit and why (pkv_profile), as a namespace of pkv_kv_budget's fields.
    When the budget is too small it raises OutOfMemoryError whose .budget has every term,
    shortfall_bytes included."""
    out = _raw.pkv_kv_budget(struct_size=ctypes.sizeof(_raw.pkv_kv_budget))
    status = lib.pkv_profile(ctypes.byref(params._c), ctypes.byref(out))
    if status != _raw.PKV_OK:
        err = make_error(status, text(lib.pkv_last_error()))
        if status == _raw.PKV_ERR_OUT_OF_MEMORY:
            err.budget = record(out)
        raise err
    return record(out)
