"""PkvError and one subclass per pkv_status, made from the generated status list.

    try:
        engine.allocate(prompt)
    except pkv.NoSpaceError as e:      # e.status == pkv.ERR_NO_SPACE, e.status_name, str(e)
        ...
"""
from . import _raw


class PkvError(Exception):
    """A pkv call failed. .status is the pkv_status value, .status_name its C name without PKV_
    (e.g. 'ERR_NO_SPACE'), .message pkv's message about this failure."""

    status = None
    status_name = None

    def __init__(self, message='', status=None):
        if status is not None:
            self.status = status
            self.status_name = STATUS_NAMES.get(status, 'UNKNOWN')
        self.message = message
        super().__init__('%s: %s' % (self.status_name, message) if message else self.status_name)


STATUS_NAMES = {value: name for name, value, _ in _raw.STATUSES}
STATUS_MESSAGES = {value: message for _, value, message in _raw.STATUSES}

# Statuses that also read as the matching builtin exception.
_BUILTIN = {'ERR_INVALID_ARGUMENT': ValueError, 'ERR_OUT_OF_MEMORY': MemoryError,
            'ERR_UNSUPPORTED': NotImplementedError}


def _class_name(status_name):  # ERR_NO_SPACE -> NoSpaceError
    return ''.join(w.capitalize() for w in status_name[len('ERR_'):].split('_')) + 'Error'


_BY_STATUS = {}
for _name, _value, _message in _raw.STATUSES:
    if _value == _raw.PKV_OK:
        continue
    _bases = (PkvError,) + ((_BUILTIN[_name],) if _name in _BUILTIN else ())
    _cls = type(_class_name(_name), _bases, {
        '__doc__': 'PKV_%s: %s.' % (_name, _message), '__module__': 'pkv',
        'status': _value, 'status_name': _name})
    globals()[_cls.__name__] = _cls
    _BY_STATUS[_value] = _cls

__all__ = ['PkvError', 'error_class', 'STATUS_NAMES', 'STATUS_MESSAGES'] + \
    [c.__name__ for c in _BY_STATUS.values()]


def error_class(status):
    """The exception class of a pkv_status (PkvError for a value this binding does not know)."""
    return _BY_STATUS.get(status, PkvError)


def make_error(status, message):
    cls = error_class(status)
    return cls(message) if cls is not PkvError else PkvError(message, status)
