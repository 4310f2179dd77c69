"""gen.py's Python emitter: bindings/python/pkv/_raw.py (ctypes structs, prototypes, constants,
statuses)."""
from gen_header import BANNER

PY_SCALARS = {'uint8_t': '_c.c_uint8', 'int': '_c.c_int', 'int32_t': '_c.c_int32', 'uint32_t': '_c.c_uint32', 'int64_t': '_c.c_int64',
              'uint64_t': '_c.c_uint64', 'size_t': '_c.c_size_t', 'double': '_c.c_double',
              'float': '_c.c_float', 'pkv_status': 'pkv_status', 'char': '_c.c_char'}


def py_type(t, callback=False):
    """callback: in a CFUNCTYPE, where a char * the callee writes is POINTER(c_char), not bytes."""
    if t.proto:
        return t.base
    if t.length:
        return '%s * %d' % (PY_SCALARS[t.base], t.length)
    if t.base == 'char' and t.depth == 1 and callback and not t.const:
        return '_c.POINTER(_c.c_char)'
    if t.base == 'void':
        return 'None' if t.depth == 0 else ('_c.c_void_p' if t.depth == 1 else
                                            '_c.POINTER(_c.c_void_p)')
    if t.base == 'char' and t.depth == 1:
        return '_c.c_char_p'
    s = PY_SCALARS.get(t.base, t.base)
    for _ in range(t.depth):
        s = '_c.POINTER(%s)' % s
    return s


def gen_python(h):
    o = ['# ' + BANNER, '"""Raw ctypes declarations of pkv.h: constants, statuses, structs and the',
         'prototypes of every call. The Pythonic layer (pkv/__init__.py) is built on this."""',
         'import ctypes as _c', '', 'pkv_status = _c.c_int32', '']
    o += ['%s = %d' % m for m in h.macros] + ['']
    o += ['PKV_%s = %d' % (n, v) for n, v, _ in h.statuses] + ['']
    for enum in h.enums:
        o += ['%s = %d' % kv for kv in enum]
    o += ['', '# (name, value, message) of every status, in PKV_STATUS_MAP order', 'STATUSES = (']
    o += ['    (%r, %d, %r),' % s for s in h.statuses] + [')', '', '']
    for name in sorted({t.base for _, _, ps, _ in h.functions for _, t in ps if t.opaque}):
        o += ['class %s(_c.Structure):' % name, '    """Opaque handle."""', '', '']
    for name, fields, _ in h.structs:
        for _, t in fields:
            if t.proto:
                res, params = t.proto
                o += ['# (%s)' % ', '.join(p for p, _ in params),
                      '%s = _c.CFUNCTYPE(%s)' % (t.base, ', '.join(
                          [py_type(res)] + [py_type(pt, callback=True) for _, pt in params])), '', '']
        o += ['class %s(_c.Structure):' % name, '    _fields_ = [']
        o += ['        (%r, %s),' % (f, py_type(t)) for f, t in fields]
        o += ['    ]', '', '']
    o += ['# sizeof of each struct as clang sees it on x86_64 Linux (checked by the tests)', 'SIZES = {']
    o += ['    %r: %d,' % (n, size) for n, _, size in h.structs] + ['}', '']
    o += ['# name: (restype, argtypes); the parameter names are in PARAM_NAMES', 'FUNCTIONS = {']
    for name, res, params, _ in h.functions:
        args = ', '.join(py_type(t) for _, t in params)
        o += ['    %r: (%s, [%s]),' % (name, py_type(res), args)]
    o += ['}', '', 'PARAM_NAMES = {']
    o += ['    %r: %r,' % (name, tuple(p for p, _ in params)) for name, _, params, _ in h.functions]
    o += ['}', '', '', 'def bind(lib):',
          '    """Sets restype and argtypes of every pkv call on the ctypes.CDLL lib. Returns the',
          '    names the library does not export (an older build), which are left unbound."""',
          '    missing = []', '    for name, (restype, argtypes) in FUNCTIONS.items():',
          '        try:', '            fn = getattr(lib, name)', '        except AttributeError:',
          '            missing.append(name)', '            continue',
          '        fn.restype, fn.argtypes = restype, argtypes', '    return missing', '']
    return '\n'.join(o)
