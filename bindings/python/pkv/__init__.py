"""pkv: a paged KV-cache runtime for LLM inference - Python binding over libpkv (ctypes).

    import pkv
    params = pkv.Params(num_layers=2, num_q_heads=4, num_kv_heads=2, head_dim=16,
                        dtype=pkv.DTYPE_F32, num_blocks=64, device=pkv.DEVICE_CPU)
    with pkv.Engine(params) as engine:
        seq = engine.allocate(prompt_tokens)          # pkv.NoSpaceError when the pool is full
        with engine.batch([seq]) as batch:            # ends on success, aborts on an exception
            for layer in range(params.num_layers):
                batch.attention(layer, q, k, v, out)
        seq.release()

The raw generated layer is pkv._raw (ctypes structs and prototypes, every constant) and
pkv.lib (the loaded ctypes.CDLL, prototypes bound).
"""
from . import _raw
from .enums import CONSTANTS, ENUMS, owner
from ._lib import lib, path as library_path, text as _text
from .agent import Agent
from .batch import Batch, BatchView, RankBatch
from .engine import Engine
from .enums import *  # noqa: F401,F403  Device, Dtype, KvLayout, EventType, Tier, ... (IntEnum)
from .enums import __all__ as _enum_names
from .errors import *  # noqa: F401,F403  PkvError and one subclass per status
from .errors import __all__ as _error_names
from .events import EventPublisherParams
from .extra_keys import ExtraKey
from .hashing import (block_hash, block_hash_extra, block_hash_root, block_hash_root_lora,
                      block_hashes)
from .layers import LayerSpec, kv_group_info, kv_group_infos
from .params import Params, hf_config_digest, hf_config_layer_windows, kv_groups, profile
from .records import *  # noqa: F401,F403  Stats, KvBudget, PoolInfo, SeqInfo, ... (dataclasses)
from .records import __all__ as _record_names
from .retention import CachePin
from .sequence import Sequence
from .store import DictStore, StoreParams
from .store_admin import StoreAdmin

# every constant of pkv.h without its PKV_ prefix: DEVICE_CPU, DTYPE_F32, FINISH_LENGTH,
# EVENT_BLOCK_STORED, ABI_VERSION, the statuses (OK, ERR_NO_SPACE == -2), ...; those of an enum are
# its members (pkv.DTYPE_BF16 is pkv.Dtype.BF16), the others plain ints
_CONSTANTS = {name: value for name, value in CONSTANTS.items() if owner(name) == 'PLAIN'}
_CONSTANTS.update({name: ENUMS[owner(name)](value) for name, value in CONSTANTS.items()
                   if owner(name) in ENUMS})
globals().update(_CONSTANTS)

# This package's version: that of the pkv.h it was generated from (pyproject.toml takes it too).
__version__ = '%d.%d.%d' % (_raw.PKV_VERSION_MAJOR, _raw.PKV_VERSION_MINOR, _raw.PKV_VERSION_PATCH)


def version():
    """The loaded library's version, MAJOR*10000 + MINOR*100 + PATCH."""
    return lib.pkv_version()


def abi_version():
    return lib.pkv_abi_version()


def status_string(status):
    return _text(lib.pkv_status_string(status))


__all__ = ['Engine', 'Agent', 'Sequence', 'CachePin', 'Batch', 'BatchView', 'RankBatch', 'Params',
           'LayerSpec', 'ExtraKey', 'profile', 'kv_groups', 'kv_group_info', 'kv_group_infos',
           'hf_config_layer_windows',
           'hf_config_digest', 'StoreParams', 'StoreAdmin', 'EventPublisherParams', 'DictStore',
           'block_hash', 'block_hash_root', 'block_hashes', 'block_hash_root_lora',
           'block_hash_extra', 'version', 'abi_version',
           'status_string', 'library_path', 'lib'] + sorted(_CONSTANTS) + _error_names + \
    _enum_names + _record_names
