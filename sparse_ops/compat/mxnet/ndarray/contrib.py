"""``mx.nd.contrib``: MXNet's contrib operators (``getnnz``, ``quadratic``, ``SparseEmbedding``, ...).

``mx.nd.contrib.<name>`` is operator ``_contrib_<name>`` of the table (MXNet's own table
name), else operator ``<name>``, called the MXNet way. ``SparseEmbedding`` is
``Embedding`` with ``sparse_grad=True`` (what MXNet's contrib op is: a row_sparse weight
gradient).
"""
from __future__ import annotations

from typing import Any

from . import _op


def SparseEmbedding(*args: Any, **kwargs: Any) -> Any:
    """``Embedding(data, weight, input_dim, output_dim, ...)`` with a row_sparse weight gradient."""
    kwargs["sparse_grad"] = True
    kwargs.pop("deterministic", None)  # MXNet's switch of its GPU kernel; results here are deterministic
    return _op.cached_function("Embedding")(*args, **kwargs)


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    try:
        return _op.cached_function("_contrib_" + name)
    except AttributeError:
        return _op.cached_function(name)


__all__ = ["SparseEmbedding"]
