"""The NumPy view type of sparse components (``x.data``, ``x.indices``, ``x.indptr``)."""
from __future__ import annotations

import numpy as np


class ComponentView(np.ndarray):
    """A zero-copy NumPy view of a container's component array.

    It is a plain ``numpy.ndarray`` for NumPy, SciPy and numba (kernels take it as they
    take any array), plus ``asnumpy()``, because MXNet code reads components as
    ``x.indices.asnumpy()``.

    Containers never store one: what they are built from is taken as a plain ndarray
    (``plain``), so arrays derived from a view (``x.data * 2``, ``x.indices[keep]``) do not
    carry the subclass into new containers.
    """

    # numba types any ndarray subclass as an ndarray, but looks this attribute up on every
    # call; declared, the look-up is a hit and costs no exception
    __numba_array_subtype_dispatch__ = False

    def asnumpy(self) -> np.ndarray:
        """A plain NumPy copy."""
        return np.array(self, copy=True, subok=False)


def plain(*arrays):
    """Each array itself, or for a ComponentView the array it shows: the container's own
    stored array for a view a container handed out (so handing ``x.indices`` on shares x's
    index array itself), else a plain ndarray over the same memory. One array in, one out;
    several in, a tuple out."""
    out = []
    for a in arrays:
        if type(a) is ComponentView:
            source = a.__dict__.get("_source")
            a = source if source is not None else a.view(np.ndarray)
        out.append(a)
    return out[0] if len(out) == 1 else tuple(out)
