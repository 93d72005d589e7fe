"""shardfeed.Error raised by the Python layer itself, with the attributes the extension gives
the errors it raises (py_module.c sf_py_raise): .code, .reason (sf_strerror(code)), .errno."""
from . import _shardfeed as _C
from ._shardfeed import Error


def error(message, code):
    """An Error with `message` for library code `code` (an SF_E_* code or -errno)."""
    e = Error(message)
    e.code, e.reason = code, _C.strerror(code)
    e.errno = -code if -4096 < code < 0 else None
    return e
