"""The PEP 517 build backend of the pkv Python package: standard library only.

pkv is pure Python (ctypes over libpkv.so.1), so its wheel is a zip of pkv/*.py and a .dist-info
directory; writing it here means `pip install ./bindings/python` needs nothing from a package
index, with or without build isolation (pip's isolated build environment has no setuptools, and
an offline machine cannot fetch one). pyproject.toml names this module (backend-path), and its
[project] table is the metadata; the version is the one pkv.h gives, read from pkv/_raw.py (the
declarations generated from it), so it is written in one place only.

Hooks: build_wheel, build_sdist, build_editable (PEP 660: a .pth file pointing at this
directory), prepare_metadata_for_build_wheel / _editable, and the get_requires_* ones (nothing).
"""
import base64
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = 'pkv'
TAG = 'py3-none-any'
# Reproducible archives: a fixed timestamp (SOURCE_DATE_EPOCH when set), as reproducible-builds.org.
EPOCH = int(os.environ.get('SOURCE_DATE_EPOCH', '315532800'))  # 1980-01-01, zip's first date


# ------------------------------------------------------------------------------ metadata
def _pyproject():
    """The [project] table of pyproject.toml."""
    with open(os.path.join(ROOT, 'pyproject.toml'), 'rb') as f:
        data = f.read()
    try:
        import tomllib  # Python >= 3.11
    except ImportError:
        return _small_toml(data.decode('utf-8'))['project']
    return tomllib.loads(data.decode('utf-8'))['project']


def _small_toml(text):
    """The TOML pyproject.toml uses, for Pythons without tomllib: [tables] of `key = value`,
    values being strings, arrays of strings (over several lines) or inline tables of strings."""
    tables, table, pending = {}, None, ''
    for line in text.splitlines():
        line = pending + _uncomment(line).strip()
        if not line or line.startswith('#'):
            continue
        if line.count('[') > line.count(']') or line.count('{') > line.count('}'):
            pending = line + ' '
            continue
        pending = ''
        m = re.fullmatch(r'\[([\w.-]+)\]', line)
        if m:
            table = tables.setdefault(m.group(1), {})
            continue
        key, _, value = (s.strip() for s in line.partition('='))
        table[key.strip('"')] = _small_value(value)
    return tables


def _uncomment(line):
    """line without its comment: from the first # outside quotes."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in '"\'':
            quote = ch
        elif ch == '#':
            return line[:i]
    return line


def _small_value(value):
    if value.startswith('['):
        return [_small_value(v.strip()) for v in _split(value[1:-1])]
    if value.startswith('{'):
        pairs = (p.partition('=') for p in _split(value[1:-1]))
        return {k.strip(): _small_value(v.strip()) for k, _, v in pairs}
    if value[:1] in '"\'' and '\\' not in value:
        return value[1:-1]
    raise ValueError('pyproject.toml: unsupported value %r (install Python >= 3.11)' % value)


def _split(items):
    return [s for s in re.findall(r'(?:"[^"]*"|\'[^\']*\'|[^,])+', items) if s.strip()]


def version():
    """PKV_VERSION_MAJOR.MINOR.PATCH of the pkv.h that pkv/_raw.py was generated from."""
    with open(os.path.join(ROOT, PACKAGE, '_raw.py'), encoding='utf-8') as f:
        found = dict(re.findall(r'^PKV_VERSION_(MAJOR|MINOR|PATCH) = (\d+)$', f.read(), re.M))
    return '%s.%s.%s' % (found['MAJOR'], found['MINOR'], found['PATCH'])


def _metadata():
    """The METADATA file (core metadata 2.1) from the [project] table."""
    p = _pyproject()
    lines = ['Metadata-Version: 2.1', 'Name: ' + p['name'], 'Version: ' + version(),
             'Summary: ' + p['description']]
    for url_name, url in p.get('urls', {}).items():
        lines.append('Project-URL: %s, %s' % (url_name, url))
    license_ = p.get('license', {})
    if 'text' in license_:
        lines.append('License: ' + license_['text'])
    if p.get('keywords'):
        lines.append('Keywords: ' + ','.join(p['keywords']))
    lines += ['Classifier: ' + c for c in p.get('classifiers', [])]
    if 'requires-python' in p:
        lines.append('Requires-Python: ' + p['requires-python'])
    body = ''
    readme = p.get('readme')
    if readme:
        with open(os.path.join(ROOT, readme), encoding='utf-8') as f:
            body = f.read()
        lines.append('Description-Content-Type: text/markdown; charset=UTF-8')
    return ('\n'.join(lines) + '\n\n' + body).encode('utf-8')


def _dist_info():
    return '%s-%s.dist-info' % (PACKAGE, version())


def _wheel_file():
    return ('Wheel-Version: 1.0\nGenerator: pkv_build\nRoot-Is-Purelib: true\nTag: %s\n'
            % TAG).encode('ascii')


# ------------------------------------------------------------------------------ archives
def _sources():
    """(path in the archive, bytes) of the package's modules, sorted."""
    pkg = os.path.join(ROOT, PACKAGE)
    for name in sorted(os.listdir(pkg)):
        if name.endswith('.py'):
            with open(os.path.join(pkg, name), 'rb') as f:
                yield '%s/%s' % (PACKAGE, name), f.read()


def _write_wheel(directory, files):
    """A wheel of files (path, bytes) plus its .dist-info; returns its file name."""
    info = _dist_info()
    files = list(files) + [(info + '/METADATA', _metadata()), (info + '/WHEEL', _wheel_file())]
    record = []
    for path, data in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=')
        record.append('%s,sha256=%s,%d' % (path, digest.decode('ascii'), len(data)))
    record.append(info + '/RECORD,,')
    files.append((info + '/RECORD', ('\n'.join(record) + '\n').encode('utf-8')))
    name = '%s-%s-%s.whl' % (PACKAGE, version(), TAG)
    stamp = time.gmtime(max(EPOCH, 315532800))[:6]
    with zipfile.ZipFile(os.path.join(directory, name), 'w', zipfile.ZIP_DEFLATED) as z:
        for path, data in files:
            entry = zipfile.ZipInfo(path, stamp)
            entry.external_attr = 0o644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(entry, data)
    return name


# ------------------------------------------------------------------------------ PEP 517 hooks
def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    info = os.path.join(metadata_directory, _dist_info())
    os.makedirs(info, exist_ok=True)
    for name, data in (('METADATA', _metadata()), ('WHEEL', _wheel_file())):
        with open(os.path.join(info, name), 'wb') as f:
            f.write(data)
    return _dist_info()


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, _sources())


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """A wheel whose .pth file puts this directory on sys.path: edits take effect at once."""
    return _write_wheel(wheel_directory, [('pkv_editable.pth', (ROOT + '\n').encode('utf-8'))])


def build_sdist(sdist_directory, config_settings=None):
    """pkv-VERSION.tar.gz: pyproject.toml, README.md, this backend, the package, PKG-INFO."""
    base = '%s-%s' % (PACKAGE, version())
    files = [('PKG-INFO', _metadata())]
    for rel in ('pyproject.toml', 'README.md', 'build_backend/pkv_build.py'):
        with open(os.path.join(ROOT, rel), 'rb') as f:
            files.append((rel, f.read()))
    files += list(_sources())
    name = base + '.tar.gz'
    with tarfile.open(os.path.join(sdist_directory, name), 'w:gz', format=tarfile.PAX_FORMAT) as t:
        for path, data in files:
            entry = tarfile.TarInfo('%s/%s' % (base, path))
            entry.size, entry.mtime, entry.mode = len(data), EPOCH, 0o644
            t.addfile(entry, io.BytesIO(data))
    return name
