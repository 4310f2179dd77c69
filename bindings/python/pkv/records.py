"""What pkv's calls report, as frozen dataclasses made from the generated ctypes structs: one
field per C field (struct_size and reserved* left out), enums as pkv.enums classes, flags of 0/1
as bool, C strings as str, keys and digests as bytes, addresses as int or None, arrays of numbers
as tuples (a state layer's state_shape: one tuple of dimensions per part).

    budget = pkv.profile(params)           # a KvBudget: budget.device is Device.CPU, ...
    dataclasses.asdict(engine.stats())     # every counter by name
"""
import ctypes
import dataclasses
import typing

from . import _raw
from .enums import (AttentionKind, BudgetSource, DebugFlags, Device, Dtype, EventFormat, EventType,
                    FinishReason, KvLayout, LayerKind, PreemptionMode, Ranks, BlockLayout,
                    StateCheckpointPolicy, StoreKind, StoreValueState, StoreWriteMode, Tier,
                    TransferOutcome, TransferState, typed)
from .sequence import Sequence

# The enum of each C field that holds one, by field name (the names are unique across pkv.h's
# structs where they hold an enum, but for STRUCT_ENUMS').
FIELD_ENUMS = {'device': Device, 'dtype': Dtype, 'kv_dtype': Dtype, 'model_dtype': Dtype,
               'kv_layout': KvLayout, 'source': BudgetSource, 'finish_reason': FinishReason,
               'kv_tier': Tier, 'medium': Tier, 'type': EventType, 'state': StoreValueState,
               'kind': StoreKind, 'write_mode': StoreWriteMode, 'preemption_mode': PreemptionMode,
               'debug_flags': DebugFlags, 'format': EventFormat, 'attention': AttentionKind,
               'state_checkpoint_policy': StateCheckpointPolicy, 'index_dtype': Dtype,
               'ranks': Ranks, 'block_layout': BlockLayout, 'transfer': TransferState,
               'outcome': TransferOutcome}
# 'struct.field' of an enum field whose name means another enum elsewhere (the stores' kind)
STRUCT_ENUMS = {'pkv_layer_info.kind': LayerKind, 'pkv_layer_spec.kind': LayerKind}
# uint32_t 0 or 1: pkv_seq_info's, a layer's (pkv_layer_spec, pkv_layer_info), and
# pkv_agent_completion's served
_BOOLS = {'is_preempted', 'in_batch', 'is_request', 'k_eq_v', 'sinks', 'served'}


def state_shapes(flat):
    """pkv's state_shape array (PKV_MAX_STATE_PARTS x PKV_MAX_STATE_DIMS, each part ending at its
    first 0) as one tuple of dimensions per part."""
    parts = []
    for part in range(_raw.PKV_MAX_STATE_PARTS):
        dims = list(flat[part * _raw.PKV_MAX_STATE_DIMS:(part + 1) * _raw.PKV_MAX_STATE_DIMS])
        parts.append(tuple(dims[:dims.index(0)] if 0 in dims else dims))
    return tuple(parts)


def _is_numbers(ctype):
    return issubclass(ctype, ctypes.Array) and ctype._type_ in (ctypes.c_uint32, ctypes.c_uint64)


def field_enum(struct_name, name):
    """The enum class of field `name` of struct `struct_name`, or None."""
    return STRUCT_ENUMS.get(struct_name + '.' + name) or FIELD_ENUMS.get(name)


def _is_text(ctype):
    return ctype is ctypes.c_char_p or (issubclass(ctype, ctypes.Array)
                                        and ctype._type_ is ctypes.c_char)


def _is_bytes(ctype):
    return ctype is _raw.pkv_store_key or (issubclass(ctype, ctypes.Array)
                                           and ctype._type_ is ctypes.c_uint8)


def _annotation(struct_name, name, ctype):
    if field_enum(struct_name, name):
        return field_enum(struct_name, name)
    if name in _BOOLS:
        return bool
    if _is_text(ctype):
        return str
    if _is_bytes(ctype):
        return bytes
    if ctype is ctypes.c_void_p:
        return typing.Optional[int]
    if ctype in (ctypes.c_double, ctypes.c_float):
        return float
    if name == 'state_shape':
        return typing.Tuple[typing.Tuple[int, ...], ...]
    if name == 'state_dtype':
        return typing.Tuple[Dtype, ...]
    if _is_numbers(ctype):
        return typing.Tuple[int, ...]
    return int


def value(name, ctype, raw, struct_name=''):
    """A C field's value as its record field holds it."""
    if field_enum(struct_name, name):
        return typed(field_enum(struct_name, name), raw)
    if name in _BOOLS:
        return bool(raw)
    if _is_text(ctype):
        return (raw or b'').decode('utf-8', 'replace')
    if ctype is _raw.pkv_store_key:
        return bytes(raw.bytes)
    if _is_bytes(ctype):
        return bytes(raw)
    if name == 'state_shape':  # (since 0.6.0) one tuple of dimensions per part
        return state_shapes(raw)
    if name == 'state_dtype':
        return tuple(typed(Dtype, d) for d in raw)
    if _is_numbers(ctype):
        return tuple(raw)
    return raw


def _record_class(name, struct, doc, types=None):
    """types: a field's type where the caller makes its value (not record()'s)."""
    types = types or {}
    fields = [(f, types.get(f) or _annotation(struct.__name__, f, t)) for f, t in struct._fields_
              if f != 'struct_size' and not f.startswith('reserved')]
    cls = dataclasses.make_dataclass(name, fields, frozen=True, namespace={'__module__': 'pkv'})
    cls.__doc__ = '%s (%s).' % (doc, struct.__name__)
    cls._struct = struct
    cls._c_fields = [(f, t) for f, t in struct._fields_ if f in dict(fields)]
    return cls


def record(struct_value):
    """The dataclass of a filled ctypes struct (one of RECORDS' structs)."""
    cls = _BY_STRUCT[type(struct_value)]
    name = cls._struct.__name__
    return cls(**{f: value(f, t, getattr(struct_value, f), name) for f, t in cls._c_fields})


Stats = _record_class('Stats', _raw.pkv_stats, "An engine's counters (Engine.stats)")
KvBudget = _record_class('KvBudget', _raw.pkv_kv_budget,
                         'How many KV blocks fit and why (pkv.profile, Engine.budget)')
PoolInfo = _record_class('PoolInfo', _raw.pkv_pool_info,
                         "Where an engine's pool is (Engine.pool_info, Engine.rank_pool_info)")
SeqInfo = _record_class('SeqInfo', _raw.pkv_seq_info, "A sequence's state (Sequence.info)")
KvEvent = _record_class('KvEvent', _raw.pkv_kv_event,
                        'A KV event (Engine.drain_kv_events): type, the block and where it was')
EventPublisherInfo = _record_class('EventPublisherInfo', _raw.pkv_event_publisher_info,
                                   'What the event publisher did (Engine.event_publisher_info)')
StoreInfo = _record_class('StoreInfo', _raw.pkv_store_info, 'What a store holds (StoreAdmin.info)')
StoreEntry = _record_class('StoreEntry', _raw.pkv_store_entry,
                           'One block of a store listing (StoreAdmin.list)')
StoreVerifyResult = _record_class('StoreVerifyResult', _raw.pkv_store_verify_result,
                                  'What StoreAdmin.verify found')
KvGroupInfo = _record_class('KvGroupInfo', _raw.pkv_kv_group_info,
                            'One KV group and its bytes (pkv.kv_group_info, Engine.kv_group_info)')
LayerInfo = _record_class('LayerInfo', _raw.pkv_layer_info,
                          "One layer of an engine's pool: its spec resolved, where its K and V "
                          'are (Engine.layer_info)')
Segment = _record_class('Segment', _raw.pkv_segment,
                        'One contiguous piece of KV: base (an int address, None for a given-back '
                        'block) and its bytes (Engine.block_segments, Engine.seq_segments, '
                        'Engine.seq_state_segment)')

AgentCompletion = _record_class('AgentCompletion', _raw.pkv_agent_completion,
                                'One pull\'s end (Agent.progress): seq, the Sequence of the '
                                'agent\'s engine (the receiving request, or the held sequence a '
                                'peer pulled: served True), outcome a TransferOutcome, the bytes '
                                'read', types={'seq': Sequence})
AgentStats = _record_class('AgentStats', _raw.pkv_agent_stats,
                           "A transfer agent's counters (Agent.stats)")

RECORDS = (Stats, KvBudget, PoolInfo, SeqInfo, KvEvent, EventPublisherInfo, StoreInfo,
           StoreEntry, StoreVerifyResult, KvGroupInfo, LayerInfo, Segment, AgentCompletion,
           AgentStats)
_BY_STRUCT = {cls._struct: cls for cls in RECORDS}


@dataclasses.dataclass(frozen=True)
class KvGroups:
    """How an engine's layers are grouped for the pool (pkv_kv_groups): num_groups, group_layers
    (layers a block holds), group_window (each group's window, 0 = full attention; full groups
    first), layer_group and layer_slot (each layer's group and its place in that group's
    blocks)."""
    num_groups: int
    group_layers: int
    group_window: typing.List[int]
    layer_group: typing.List[int]
    layer_slot: typing.List[int]


__all__ = [cls.__name__ for cls in RECORDS] + ['KvGroups']
