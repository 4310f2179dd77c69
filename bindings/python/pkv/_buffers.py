"""Python objects to the pointers pkv takes, without requiring numpy.

Token arrays: a list/tuple/range of ints, or any buffer of 4-byte integers (array('i'),
numpy int32, a memoryview of either). Data arrays (pkv_attention's q/k/v/out): any C-contiguous
buffer (bytearray, memoryview, array.array, numpy arrays) of at least the bytes needed, or an
int address (device memory: not checked).
"""
import ctypes

_INT32_FORMATS = {'i', '=i', '<i', '@i', 'l', '=l', '<l'}


def _memoryview(obj):
    try:
        mv = memoryview(obj)
    except TypeError:
        return None
    if not mv.c_contiguous:
        raise ValueError('pkv needs a C-contiguous buffer')
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
    mv = _memoryview(obj)
    if mv is None:
        raise TypeError('%s: expected a buffer (bytearray, array, memoryview, numpy array) or an '
                        'address, got %s' % (name, type(obj).__name__))
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


def byte_string(obj):
    """(bytes, length) of a salt given as bytes, str (UTF-8) or a buffer; (None, 0) for None."""
    if obj is None:
        return None, 0
    data = obj.encode('utf-8') if isinstance(obj, str) else bytes(memoryview(obj).cast('B'))
    return data, len(data)
