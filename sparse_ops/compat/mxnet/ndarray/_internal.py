"""``mx.nd._internal``: the operators MXNet registers under underscored names
(``_square_sum``, ``_plus_scalar``, ``_random_uniform``, ...), called the MXNet way, and
``_set_value``, the fill behind ``x[:] = scalar``.
"""
from __future__ import annotations

from typing import Any

from ....ndarray import NDArray
from . import _op


def _set_value(src: float, out: NDArray, name: str | None = None) -> NDArray:
    """Fill ``out`` with ``src``: a dense array everywhere, a row_sparse one in every row
    (as MXNet 1.9; 0 stores nothing here). A csr ``out`` takes only 0."""
    out[:] = float(src)
    return out


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return _op.cached_function(name)


def __dir__() -> list[str]:
    return sorted({"_set_value"} | {n for n in _op.known_names() if n.startswith("_")})


__all__ = ["_set_value"]
