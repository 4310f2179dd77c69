"""Finds and loads libpkv, binds the generated prototypes, checks the ABI major.

Search order: $PKV_LIBRARY (a full path; when set, nothing else is tried); the dynamic loader's
own search for libpkv.so.1 (LD_LIBRARY_PATH, the ld.so cache of the system's library
directories); ctypes.util.find_library('pkv'). A package imported from a source tree
(bindings/python of a pkv checkout, not an installed copy) also tries that tree's default meson
build directory, build/src/libpkv.so.1; an installed package never looks there.
"""
import ctypes
import ctypes.util
import os

from . import _raw
from .errors import error_class

_SONAME = 'libpkv.so.%d' % _raw.PKV_ABI_VERSION
ENV = 'PKV_LIBRARY'


def _source_tree():
    """The pkv checkout this package sits in (as bindings/python/pkv), or None once installed."""
    package = os.path.dirname(os.path.abspath(__file__))
    tree = os.path.dirname(os.path.dirname(os.path.dirname(package)))
    if os.path.relpath(package, tree) != os.path.join('bindings', 'python', 'pkv'):
        return None
    if not os.path.isfile(os.path.join(tree, 'include', 'pkv', 'pkv.h')):
        return None
    return tree


def _candidates():
    env = os.environ.get(ENV)
    if env:
        yield env
        return  # an explicit choice is not second-guessed
    yield _SONAME
    found = ctypes.util.find_library('pkv')
    if found and found != _SONAME:
        yield found
    tree = _source_tree()
    if tree:
        yield os.path.join(tree, 'build', 'src', _SONAME)  # not build-*: sanitizer builds abort


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
            tried.append(str(e) if path in str(e) else '%s: %s' % (path, e))
            continue
        missing = _raw.bind(lib)
        for name in missing:  # a library older than the header: fail when used, clearly
            setattr(lib, name, _missing(name, path))
        abi = lib.pkv_abi_version()
        if abi != _raw.PKV_ABI_VERSION:
            raise ImportError('pkv: %s has ABI %d, this binding needs %d (%s; set %s to its '
                              'full path)' % (path, abi, _raw.PKV_ABI_VERSION, _SONAME, ENV))
        return lib, path, missing
    if os.environ.get(ENV):
        raise ImportError('pkv: cannot load %s from $%s: %s. Set %s to the full path of %s, or '
                          'unset it to search the dynamic loader\'s path'
                          % (_SONAME, ENV, tried[0], ENV, _SONAME))
    raise ImportError('pkv: cannot load %s (%s). Install libpkv (meson install, then ldconfig), '
                      'or set %s to its full path, or add its directory to LD_LIBRARY_PATH'
                      % (_SONAME, '; '.join(tried), ENV))


lib, path, missing = _load()


def text(raw):
    """A C string returned by pkv, as str."""
    return (raw or b'').decode('utf-8', 'replace')
