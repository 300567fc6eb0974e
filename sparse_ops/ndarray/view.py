"""The NumPy view type of sparse components (``x.data``, ``x.indices``, ``x.indptr``)."""
from __future__ import annotations

import numpy as np


class ComponentView(np.ndarray):
    """A zero-copy NumPy view of a container's component array.

    It is a plain ``numpy.ndarray`` for NumPy, SciPy and numba (kernels take it as they
    take any array), plus ``asnumpy()``, because MXNet code reads components as
    ``x.indices.asnumpy()``.
    """

    def asnumpy(self) -> np.ndarray:
        """A plain NumPy copy."""
        return np.array(self, copy=True, subok=False)


def component_view(a, writable: bool):
    """``a`` as a ComponentView (host arrays only; CuPy arrays are returned as they are)."""
    if not isinstance(a, np.ndarray):
        return a
    v = a.view(ComponentView)
    if not writable:
        v.flags.writeable = False
    return v
