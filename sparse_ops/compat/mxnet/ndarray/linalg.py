"""``mx.nd.linalg``: MXNet's dense matrix operators on the last two axes.

``mx.nd.linalg.<name>`` is operator ``_linalg_<name>`` of the table (MXNet's own table
name: ``potrf``, ``gemm2``, ``trsm``), called the MXNet way; ``mx.nd.linalg_<name>`` is
the same function.
"""
from __future__ import annotations

from typing import Any

from . import _op


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return _op.cached_function("_linalg_" + name)


def __dir__() -> list[str]:
    return sorted(n[len("_linalg_"):] for n in _op.known_names() if n.startswith("_linalg_"))


__all__: list[str] = []
