"""``mx.base``: MXNet's error type and the small constants user code imports from it."""
from __future__ import annotations

import numbers
import os
import platform

import numpy as np

from ...errors import SparseOpsError

#: MXNet's error type: the base of every sparse-ops error (``OperatorError``,
#: ``SparseFormatError``, ``DeviceUnavailableError``), so ``except mx.base.MXNetError``
#: catches what MXNet's would.
MXNetError = SparseOpsError



class MXNetArgumentError(MXNetError, TypeError):
    """A call of the MXNet face with wrong arguments (a missing or doubled input, an unknown
    parameter): an ``MXNetError`` as in MXNet, and a ``TypeError`` as Python's own calls raise.
    The message names the operator and the argument."""


class MXNetValueError(MXNetError, ValueError):
    """A call of the MXNet face with an argument of the right kind but a bad value (an unknown
    storage type, a density outside [0, 1]): an ``MXNetError`` as in MXNet, and a
    ``ValueError`` as Python's own calls raise. The message names the operator and the argument."""


class MXNetIOError(MXNetError, OSError):
    """A file the MXNet face cannot read or write (missing, a folder, unreadable): an
    ``MXNetError`` as in MXNet, and an ``OSError`` (its ``errno`` and ``filename`` kept) as
    Python's own file calls raise. The message names the function and the file."""


def data_dir() -> str:
    """Where MXNet keeps downloaded data: ``$MXNET_HOME``, else ``~/.mxnet`` (``%APPDATA%\\mxnet``
    on Windows), as MXNet's ``base.data_dir``."""
    home = os.environ.get("MXNET_HOME")
    if home:
        return home
    if platform.system() == "Windows":
        return os.path.join(os.environ.get("APPDATA", ""), "mxnet")
    return os.path.join(os.path.expanduser("~"), ".mxnet")


mx_real_t = np.float32
numeric_types = (numbers.Real, np.generic)
integer_types = (int, np.integer)
string_types = (str,)


class _NullType:
    """MXNet's "argument not given" marker (``_Null``), distinct from None."""

    _instance = None

    def __new__(cls) -> "_NullType":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "_Null"

    def __bool__(self) -> bool:
        return False


_Null = _NullType()

def py_str(x: bytes | str) -> str:
    """A C string (bytes, UTF-8) as a Python str; a str passes through."""
    return x.decode("utf-8") if isinstance(x, bytes) else x


def _as_list(obj: object) -> list:
    """``obj`` itself when it is a list or tuple (as a list), else ``[obj]``."""
    return list(obj) if isinstance(obj, (list, tuple)) else [obj]


__all__ = ["py_str", "data_dir", "MXNetError", "MXNetArgumentError", "MXNetValueError", "MXNetIOError", "mx_real_t", "numeric_types", "integer_types", "string_types"]
