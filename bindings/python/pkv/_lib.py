"""Finds and loads libpkv, binds the generated prototypes, checks the ABI major.

Search order: $PKV_LIBRARY (a full path); the dynamic loader's own search for libpkv.so.1
(LD_LIBRARY_PATH, the ld.so cache); ctypes.util.find_library('pkv'); the default meson build
directory of the source tree this package sits in (build/src/libpkv.so.1).
"""
import ctypes
import ctypes.util
import os

from . import _raw
from .errors import error_class

_SONAME = 'libpkv.so.%d' % _raw.PKV_ABI_VERSION
_TREE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _candidates():
    env = os.environ.get('PKV_LIBRARY')
    if env:
        yield env
        return  # an explicit choice is not second-guessed
    yield _SONAME
    found = ctypes.util.find_library('pkv')
    if found:
        yield found
    yield os.path.join(_TREE, 'build', 'src', _SONAME)  # not build-*: sanitizer builds abort


def _missing(name, path):
    def call(*args):
        raise error_class(_raw.PKV_ERR_UNSUPPORTED)(
            '%s does not export %s: the library is older than this binding' % (path, name))
    return call


def _load():
    tried = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append('%s (%s)' % (path, e))
            continue
        missing = _raw.bind(lib)
        for name in missing:  # a library older than the header: fail when used, clearly
            setattr(lib, name, _missing(name, path))
        abi = lib.pkv_abi_version()
        if abi != _raw.PKV_ABI_VERSION:
            raise ImportError('%s has ABI %d, this binding needs %d'
                              % (path, abi, _raw.PKV_ABI_VERSION))
        return lib, path, missing
    raise ImportError('libpkv not found; set PKV_LIBRARY to its full path. Tried: '
                      + '; '.join(tried))


lib, path, missing = _load()


def text(raw):
    """A C string returned by pkv, as str."""
    return (raw or b'').decode('utf-8', 'replace')
