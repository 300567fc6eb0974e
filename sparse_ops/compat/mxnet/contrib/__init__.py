"""``mx.contrib``: MXNet's contrib namespace as far as the face covers it: ``contrib.autograd``
(MXNet's first autograd API, kept for old code) and ``contrib.ndarray`` / ``contrib.nd``
(the contrib operators, ``mx.nd.contrib``)."""
from __future__ import annotations

from . import autograd  # noqa: F401
from ..ndarray import contrib as ndarray

nd = ndarray

__all__ = ["autograd", "ndarray", "nd"]
