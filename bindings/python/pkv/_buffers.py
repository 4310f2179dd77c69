"""Python objects to the pointers pkv takes, without requiring numpy.

Token arrays: a list/tuple/range of ints, or any buffer of 4-byte integers (array('i'),
numpy int32, a memoryview of either). Data arrays (pkv_attention's q/k/v/out): any C-contiguous
buffer (bytearray, memoryview, array.array, numpy arrays) of the engine's model dtype and at least
the elements needed (element_pointer checks both), or an int address (device memory: not checked).
"""
import ctypes

from . import _raw
from .errors import make_error

_INT32_FORMATS = {'i', '=i', '<i', '@i', 'l', '=l', '<l'}


def _memoryview(obj):
    try:
        mv = memoryview(obj)
    except TypeError:
        return None
    if not mv.c_contiguous:
        raise ValueError('pkv needs a C-contiguous buffer')
    return mv


def _buffer(obj, name):
    """obj's memoryview, for a data pointer: TypeError when obj is neither a buffer nor an int
    address (the caller took the address already)."""
    mv = _memoryview(obj)
    if mv is None:
        raise TypeError('%s: expected a buffer (bytearray, array, memoryview, numpy array) or an '
                        'address, got %s' % (name, type(obj).__name__))
    return mv


def int32_array(obj, name='tokens'):
    """(ctypes array or pointer, count) for a sequence of int32 values; (None, 0) for None."""
    if obj is None:
        return None, 0
    mv = _memoryview(obj) if not isinstance(obj, (list, tuple, range)) else None
    if mv is not None and mv.itemsize == 4 and mv.format in _INT32_FORMATS:
        n = mv.nbytes // 4
        raw = mv.cast('B')
        if raw.readonly:
            return (ctypes.c_int32 * n).from_buffer_copy(raw), n
        return (ctypes.c_int32 * n).from_buffer(raw), n
    values = list(mv.tolist() if mv is not None else obj)
    for v in values:
        if not isinstance(v, int) and not hasattr(v, '__index__'):
            raise TypeError('%s must be integers, got %r' % (name, type(v).__name__))
        if not -2**31 <= int(v) < 2**31:
            raise OverflowError('%s: %d does not fit in int32' % (name, int(v)))
    return (ctypes.c_int32 * len(values))(*values), len(values)


def uint_array(ctype, values):
    values = list(values)
    return (ctype * len(values))(*values), len(values)


def data_pointer(obj, nbytes, writable, name):
    """A c_void_p (keeping obj alive through the returned holder) for nbytes of obj."""
    if isinstance(obj, int):
        return ctypes.c_void_p(obj), None
    mv = _buffer(obj, name)
    if mv.nbytes < nbytes:
        raise ValueError('%s: %d bytes, pkv needs %d' % (name, mv.nbytes, nbytes))
    raw = mv.cast('B') if mv.format != 'B' or mv.ndim != 1 else mv
    if raw.readonly:
        if writable:
            raise TypeError('%s must be writable' % name)
        holder = (ctypes.c_char * raw.nbytes).from_buffer_copy(raw)
    else:
        holder = (ctypes.c_char * raw.nbytes).from_buffer(raw)
    return ctypes.cast(holder, ctypes.c_void_p), holder


# What a buffer given to attention may hold per model dtype: (name, bytes, its formats). Python has
# no bf16 type, so 16-bit dtypes also come as their raw bits (array('H'), numpy uint16); untyped
# bytes (bytearray, bytes, numpy uint8) are taken by length for every dtype.
_DTYPES = {_raw.PKV_DTYPE_F32: ('f32', 4, ('f',)),
           _raw.PKV_DTYPE_F16: ('f16', 2, ('e', 'H')),
           _raw.PKV_DTYPE_BF16: ('bf16', 2, ('H',))}
_BYTES = ('B', 'b', 'c')
_FORMAT_NAMES = {'f': 'float32', 'd': 'float64', 'e': 'float16', 'H': 'uint16', 'h': 'int16',
                 'i': 'int32', 'I': 'uint32', 'q': 'int64', 'Q': 'uint64', '?': 'bool'}
_TAKES = {'f32': 'float32 elements (array(\'f\'), numpy float32)',
          'f16': 'float16 elements (numpy float16) or their bits as uint16 (array(\'H\'))',
          'bf16': 'bf16 values as their uint16 bits (array(\'H\'), numpy uint16)'}


def _invalid(message):
    return make_error(_raw.PKV_ERR_INVALID_ARGUMENT, message)


def element_pointer(obj, dtype, count, writable, name, shape):
    """data_pointer for `count` elements of the model dtype `dtype` (PKV_DTYPE_F32/F16/BF16), after
    checking the buffer's element type and length: InvalidArgumentError naming what was expected
    (shape: the expected shape as text, e.g. '3 tokens x 4 q heads x 16'). An int address is taken
    as is (device memory: pkv cannot check it)."""
    if isinstance(obj, int):
        return ctypes.c_void_p(obj), None
    mv = _buffer(obj, name)
    fmt = mv.format[1:] if mv.format[:1] in ('@', '=', '<') else mv.format  # x86-64: '<' is native
    dname, size, formats = _DTYPES[dtype]
    if fmt in _BYTES:
        if mv.nbytes < count * size:
            raise _invalid('%s: %d bytes, this step needs %d (%s, %s: %d bytes each)'
                           % (name, mv.nbytes, count * size, shape, dname, size))
    elif fmt in formats and mv.itemsize == size:
        if mv.nbytes // size < count:
            raise _invalid('%s: %d %s elements, this step needs %d (%s)'
                           % (name, mv.nbytes // size, _FORMAT_NAMES[fmt], count, shape))
    else:
        got = _FORMAT_NAMES.get(fmt, 'elements of format %r' % mv.format)
        raise _invalid('%s: the engine\'s dtype is %s, which takes %s or raw bytes; got %s'
                       % (name, dname, _TAKES[dname], got))
    return data_pointer(mv, count * size, writable, name)


def byte_string(obj):
    """(bytes, length) of a salt given as bytes, str (UTF-8) or a buffer; (None, 0) for None."""
    if obj is None:
        return None, 0
    data = obj.encode('utf-8') if isinstance(obj, str) else bytes(memoryview(obj).cast('B'))
    return data, len(data)
