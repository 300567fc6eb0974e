"""``mx.nd.contrib``: MXNet's contrib operators (``getnnz``, ``quadratic``, ``SparseEmbedding``,
``isinf``/``isnan``/``isfinite``, ...).

``mx.nd.contrib.<name>`` is operator ``_contrib_<name>`` of the table (MXNet's own table
name), else operator ``<name>``, called the MXNet way. ``SparseEmbedding`` is
``Embedding`` with ``sparse_grad=True`` (what MXNet's contrib op is: a row_sparse weight
gradient).
"""
from __future__ import annotations

from typing import Any

from . import _op
from .op import Embedding


def SparseEmbedding(*args: Any, **kwargs: Any) -> Any:
    """``Embedding(data, weight, input_dim, output_dim, ...)`` with a row_sparse weight gradient."""
    kwargs["sparse_grad"] = True
    kwargs.pop("deterministic", None)  # MXNet's switch of its GPU kernel; results here are deterministic
    return Embedding(*args, **kwargs)


def isinf(data: Any) -> Any:
    """1 where ``data`` is +inf or -inf, else 0, in ``data``'s dtype (``abs(data) == inf``)."""
    return _op.call("_equal_scalar", [_op.call("abs", [data])], {"scalar": float("inf")})


def isnan(data: Any) -> Any:
    """1 where ``data`` is NaN, else 0, in ``data``'s dtype (``data != data``)."""
    return _op.call("broadcast_not_equal", [data, data])


def isfinite(data: Any) -> Any:
    """1 where ``data`` is neither infinite nor NaN, else 0, in ``data``'s dtype."""
    return _op.call("broadcast_mul", [_op.call("broadcast_equal", [data, data]),
                                      _op.call("_not_equal_scalar", [_op.call("abs", [data])],
                                               {"scalar": float("inf")})])


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    try:
        return _op.cached_function("_contrib_" + name)
    except AttributeError:
        return _op.cached_function(name)


__all__ = ["SparseEmbedding", "isinf", "isnan", "isfinite"]
