"""Extra keys in block identity (pkv_extra_key, since 0.5.0): bytes that tell apart prompts whose
tokens are equal, over the tokens they concern (a multimodal item's content hash over its
placeholder tokens), given with a prompt together with a LoRA adapter id.

    image = pkv.ExtraKey(start_token=5, end_token=581, key=hashlib.sha256(pixels).digest()[:16])
    seq = engine.allocate(prompt, extra_keys=[image], lora_id=3)
"""
import ctypes
import dataclasses

from . import _raw
from .errors import make_error


@dataclasses.dataclass(frozen=True)
class ExtraKey:
    """Tokens [start_token, end_token) of the prompt, and the key (1 .. MAX_EXTRA_KEY_BYTES bytes,
    or a str as UTF-8) that joins the identity of every block they touch. A prompt's keys are
    sorted by start_token and do not overlap (pkv refuses them otherwise, naming the index)."""
    start_token: int
    end_token: int
    key: bytes


def key_array(keys):
    """(ctypes array of pkv_extra_key or None, count, objects to keep alive during the call) for a
    list of ExtraKeys (or (start, end, key) tuples); None or [] is (None, 0, None)."""
    if not keys:
        return None, 0, None
    out = (_raw.pkv_extra_key * len(keys))()
    keep = []
    for i, k in enumerate(keys):
        if not isinstance(k, ExtraKey):
            try:
                k = ExtraKey(*k)
            except TypeError:
                raise _invalid('extra_keys[%d] is %r: give a pkv.ExtraKey(start_token, '
                               'end_token, key) or a tuple of those three' % (i, k)) from None
        try:  # bytes-like, not bytes(n): an int would become n zero bytes
            data = k.key.encode('utf-8') if isinstance(k.key, str) else bytes(memoryview(k.key))
        except TypeError:
            raise _invalid('extra_keys[%d].key is %r: give bytes (a content hash) or a str'
                           % (i, k.key)) from None
        for name in ('start_token', 'end_token'):
            v = getattr(k, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2**32:
                raise _invalid('extra_keys[%d].%s is %r: give a token index 0 .. 2^32-1'
                               % (i, name, v))
        buf = ctypes.create_string_buffer(data, len(data))
        keep.append(buf)
        out[i].start_token, out[i].end_token = k.start_token, k.end_token
        out[i].key, out[i].key_len = ctypes.cast(buf, ctypes.c_void_p), len(data)
    return out, len(keys), (out, keep)


def _invalid(message):
    return make_error(_raw.PKV_ERR_INVALID_ARGUMENT, message)
