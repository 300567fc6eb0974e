"""``mx.engine``: MXNet's engine controls, for code that sets them.

MXNet's engine runs operators asynchronously and can bulk several into one engine task
(``bulk(size)``, ``set_bulk_size``), a scheduling choice with no effect on values. sparse-ops
runs each operator when it is called, so there is nothing to bulk: the size is kept (so that
``set_bulk_size`` returns the previous one, as MXNet's does) and changes nothing else.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator

_local = threading.local()


def _size() -> int:
    return getattr(_local, "size", 0)


def set_bulk_size(size: int) -> int:
    """Set this thread's bulk size (how many operators MXNet would bulk together); returns the
    previous one. A scheduling hint here: operators run when called."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise TypeError(f"set_bulk_size: size must be a non-negative int, got {size!r}")
    previous = _size()
    _local.size = size
    return previous


@contextlib.contextmanager
def bulk(size: int) -> Iterator[None]:
    """``with mx.engine.bulk(size):`` the bulk size inside the block (restored after it)."""
    previous = set_bulk_size(size)
    try:
        yield
    finally:
        set_bulk_size(previous)


__all__ = ["bulk", "set_bulk_size"]
