"""Which value and index dtypes containers accept, and how dtypes are normalised."""
from __future__ import annotations

from typing import Any

import numpy as np

VALUE_DTYPES: tuple[np.dtype, ...] = tuple(
    np.dtype(t) for t in ("float16", "float32", "float64", "int32", "int64")
)
INDEX_DTYPES: tuple[np.dtype, ...] = (np.dtype("int32"), np.dtype("int64"))
DEFAULT_DTYPE = np.dtype("float32")
DEFAULT_INDEX_DTYPE = np.dtype("int64")

_VALUE_SET = frozenset(VALUE_DTYPES)


def value_dtype(dtype: Any, default: np.dtype | None = DEFAULT_DTYPE) -> np.dtype:
    """Normalise ``dtype`` (name, type or np.dtype; None means ``default``) to a supported value dtype."""
    if dtype is None:
        if default is None:
            raise TypeError("a dtype is required")
        return default
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"not a dtype: {dtype!r}") from exc
    if dt not in _VALUE_SET:
        names = ", ".join(d.name for d in VALUE_DTYPES)
        raise TypeError(f"unsupported value dtype {dt.name}; supported: {names}")
    return dt


def source_dtype(dtype: Any) -> np.dtype:
    """The dtype to keep for an existing array: its own if supported, else a clear error."""
    dt = np.dtype(dtype)
    if dt not in _VALUE_SET:
        names = ", ".join(d.name for d in VALUE_DTYPES)
        raise TypeError(
            f"arrays of dtype {dt.name} are not supported (supported: {names}); "
            "pass dtype= to convert"
        )
    return dt
