"""MXNet reads one entry of a sparse component as an NDArray: ``x.indptr[0].asscalar()``.

The components here are NumPy views (``ComponentView``), whose single entries are NumPy
scalars. The MXNet face, when imported, makes those entries instances of a subclass of
their NumPy scalar type that adds ``asscalar()`` (the plain NumPy scalar); they are that
type in every other respect (arithmetic gives plain NumPy scalars, numba types them as the
NumPy type). Native code that never imports the face keeps NumPy's own indexing and cost.
"""
from __future__ import annotations

import numpy as np

from ....ndarray.view import ComponentView

_SCALARS: dict = {}


def _asscalar(self: np.generic) -> np.generic:
    """The entry as a plain NumPy scalar."""
    return self.dtype.type(self)


def _scalar(value: np.generic) -> np.generic:
    kind = type(value)
    cls = _SCALARS.get(kind)
    if cls is None:
        try:
            cls = type(kind.__name__, (kind,), {"asscalar": _asscalar, "__module__": __name__})
        except TypeError:  # a scalar type that takes no subclass
            cls = kind
        _SCALARS[kind] = cls
    return value if cls is kind else cls(value)


def _getitem(self: ComponentView, key: object) -> object:
    got = np.ndarray.__getitem__(self, key)
    return _scalar(got) if isinstance(got, np.generic) else got


def install() -> None:
    """Give ``ComponentView`` the entry-as-scalar indexing above (once)."""
    if "__getitem__" not in ComponentView.__dict__:
        ComponentView.__getitem__ = _getitem
