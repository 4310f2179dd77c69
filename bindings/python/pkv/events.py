"""KV events on the wire: pkv_event_publisher_params (an engine publishing its KV events over
ZeroMQ in vLLM's protocol, for KV-aware routers) and what the publisher did."""
import ctypes

from . import _raw
from ._lib import lib
from .enums import typed
from .params import check
from .records import FIELD_ENUMS


class EventPublisherParams:
    """pkv_event_publisher_params with pkv's defaults (pkv_event_publisher_params_init); the
    fields are attributes (endpoint, replay_endpoint, topic as str):

        pub = pkv.EventPublisherParams(endpoint='tcp://127.0.0.1:5557',
                                       replay_endpoint='tcp://127.0.0.1:5558')
        engine = pkv.Engine(params, event_publisher=pub)
        engine.event_publisher_info().endpoint    # as bound ('*' port resolved)
    """

    _TEXT = ('endpoint', 'replay_endpoint', 'topic')

    def __init__(self, **fields):
        c = _raw.pkv_event_publisher_params()
        check(lib.pkv_event_publisher_params_init(ctypes.byref(c), ctypes.sizeof(c)))
        self.__dict__['_values'] = {name: getattr(c, name) for name, _ in c._fields_
                                    if name != 'struct_size'}
        for name, value in fields.items():
            setattr(self, name, value)

    def __getattr__(self, name):
        try:
            value = self.__dict__['_values'][name]
        except KeyError:
            raise AttributeError('pkv_event_publisher_params has no field %r' % name) from None
        return typed(FIELD_ENUMS[name], value) if name in FIELD_ENUMS else value  # kind, ...

    def __setattr__(self, name, value):
        if name not in self._values:
            raise AttributeError('pkv_event_publisher_params has no field %r' % name)
        self._values[name] = value

    def _struct(self):
        """(pkv_event_publisher_params, the byte strings it points to); pkv copies them at
        engine create."""
        c = _raw.pkv_event_publisher_params(
            struct_size=ctypes.sizeof(_raw.pkv_event_publisher_params))
        keep = []
        for name, value in self._values.items():
            if name in self._TEXT and isinstance(value, str):
                value = value.encode('utf-8')
                keep.append(value)
            setattr(c, name, value)
        return c, keep

    def __repr__(self):
        return 'EventPublisherParams(%s)' % ', '.join('%s=%r' % kv for kv in self._values.items())
