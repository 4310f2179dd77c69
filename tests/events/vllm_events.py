"""vLLM's KV event classes as a router declares them, and decoders as strict as msgspec's.

vLLM (vllm/distributed/kv_events.py) declares its events as msgspec Structs and a router decodes
them with msgspec.msgpack.Decoder(type=KVEventBatch). Two encodings of the same classes exist:

- MAP (vLLM 0.26+): a struct is a msgpack map of its field names; an event map carries its class
  name in the tag field "type" (msgspec's default tag_field), first.
- ARRAY (vLLM before 0.26: array_like=True): a struct is an array of its fields in declaration
  order; an event array starts with its class name.

The classes are written here as plain dataclasses with vLLM's field names, order, types and
defaults (msgspec is not in Debian). The decoders do what msgspec does with them: check every
field's type, refuse an object that lacks a field without a default (an array too short for
them), take a missing field with a default as its default, ignore fields the class does not
declare (map keys it does not know, an array's trailing elements). LegacyBlockStored and
LegacyBlockRemoved are the classes of vLLM's older example subscriber
(examples/online_serving/kv_events_subscriber.py, array_like), whose decoders ignore the newer
trailing fields.
"""
import dataclasses
from typing import Any, List, Optional

import msgpack


@dataclasses.dataclass
class EventBatch:
    ts: float
    events: List[Any]
    data_parallel_rank: Optional[int] = None


@dataclasses.dataclass
class KVCacheEvent:
    """Base class for all KV cache-related events"""


@dataclasses.dataclass
class BlockStored(KVCacheEvent):
    block_hashes: List[int]  # ExternalBlockHash: pkv's hashes are uint64
    parent_block_hash: Optional[int]
    token_ids: List[int]
    block_size: int
    lora_id: Optional[int]
    medium: Optional[str]
    lora_name: Optional[str]
    extra_keys: Optional[List[Any]] = None
    group_idx: Optional[int] = None
    kv_cache_spec_kind: Optional[str] = None
    kv_cache_spec_sliding_window: Optional[int] = None


@dataclasses.dataclass
class BlockRemoved(KVCacheEvent):
    block_hashes: List[int]
    medium: Optional[str]
    group_idx: Optional[int] = None


@dataclasses.dataclass
class AllBlocksCleared(KVCacheEvent):
    pass


@dataclasses.dataclass
class KVEventBatch(EventBatch):
    events: List[Any]  # BlockStored | BlockRemoved | AllBlocksCleared


@dataclasses.dataclass
class LegacyBlockStored(KVCacheEvent):
    block_hashes: List[int]
    parent_block_hash: Optional[int]
    token_ids: List[int]
    block_size: int
    lora_id: Optional[int]
    medium: Optional[str]


@dataclasses.dataclass
class LegacyBlockRemoved(KVCacheEvent):
    block_hashes: List[int]
    medium: Optional[str]


CURRENT = {'BlockStored': BlockStored, 'BlockRemoved': BlockRemoved,
           'AllBlocksCleared': AllBlocksCleared}
LEGACY = {'BlockStored': LegacyBlockStored, 'BlockRemoved': LegacyBlockRemoved,
          'AllBlocksCleared': AllBlocksCleared}
TAG_FIELD = 'type'


class DecodeError(ValueError):
    pass


def _short(v):
    text = repr(v)
    return text if len(text) <= 200 else text[:200] + '...'


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


_CHECKS = {
    float: lambda v: isinstance(v, float),
    int: _is_int,
    Optional[int]: lambda v: v is None or _is_int(v),
    Optional[str]: lambda v: v is None or isinstance(v, str),
    List[int]: lambda v: isinstance(v, list) and all(_is_int(x) for x in v),
    List[Any]: lambda v: isinstance(v, list),
    Optional[List[Any]]: lambda v: v is None or isinstance(v, list),
}


def _required(f):
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _build(cls, values, where):
    """cls from {field name: value}: every value type-checked, a missing field without a default
    refused (msgspec: "Object missing required field")."""
    args = {}
    for f in dataclasses.fields(cls):
        if f.name not in values:
            if _required(f):
                raise DecodeError('%s: object missing required field `%s`' % (where, f.name))
            continue
        if not _CHECKS[f.type](values[f.name]):
            raise DecodeError('%s.%s: %s is not %s' % (where, f.name, _short(values[f.name]), f.type))
        args[f.name] = values[f.name]
    return cls(**args)


def _from_map(cls, raw, where):
    if not isinstance(raw, dict):
        raise DecodeError('%s: expected a map (vLLM 0.26+), got %s' % (where, _short(raw)))
    return _build(cls, raw, where)


def _from_array(cls, raw, where):
    if not isinstance(raw, list):
        raise DecodeError('%s: expected an array (vLLM before 0.26), got %s' % (where, _short(raw)))
    names = [f.name for f in dataclasses.fields(cls)]
    return _build(cls, dict(zip(names, raw)), where)  # trailing extras ignored


def _event(raw, named, classes):
    if named:
        if not isinstance(raw, dict) or raw.get(TAG_FIELD) not in classes:
            raise DecodeError('an event is a map tagged by its class in %r, got %s' % (TAG_FIELD, _short(raw)))
        cls = classes[raw[TAG_FIELD]]
        return _from_map(cls, {k: v for k, v in raw.items() if k != TAG_FIELD}, cls.__name__)
    if not isinstance(raw, list) or not raw or raw[0] not in classes:
        raise DecodeError('an event is an array tagged by its class first, got %s' % _short(raw))
    cls = classes[raw[0]]
    return _from_array(cls, raw[1:], cls.__name__)


def decode(payload, named=True, classes=CURRENT):
    """A KVEventBatch from one message's payload, as Decoder(type=KVEventBatch) decodes it: named
    for the MAP encoding, else ARRAY; classes: CURRENT or LEGACY."""
    raw = msgpack.unpackb(payload, raw=False, strict_map_key=True)
    batch = (_from_map if named else _from_array)(KVEventBatch, raw, 'KVEventBatch')
    batch.events = [_event(e, named, classes) for e in batch.events]
    return batch, raw


def field_names(cls):
    return [f.name for f in dataclasses.fields(cls)]


def encoded_names(raw_event, named):
    """The field names an encoded event carries (its tag first), in the order it carries them."""
    if named:
        return list(raw_event)
    cls = CURRENT[raw_event[0]]
    return [TAG_FIELD] + field_names(cls)[:len(raw_event) - 1]
