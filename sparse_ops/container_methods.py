"""Every method the containers get from the layers above them, installed in one place.

The containers (``sparse_ops.ndarray``) know nothing of operators, dispatch or autograd:
layers import downward only. What a container does that is written with operators or the
engine is attached here, once, when ``sparse_ops`` is imported:

- from ``sparse_ops.ops.methods``: the Python operators (``x + y``, ``x * 2``, ``x > 0``,
  ``x += y``, ``-x``, ``abs(x)``, ``x @ y``), MXNet's fluent methods (``x.sum(axis=1)``,
  ``x.dot(y)``, ``x.T``), ``attach_grad`` and the in-place write guard of ``x[:] = ...``;
- from ``sparse_ops.autograd``: ``x.backward()``;
- for the MXNet face, when it is imported (``install_mxnet``): MXNet's count of auxiliary
  arrays (``x._num_aux``) and single entries of sparse components that answer
  ``asscalar()`` as MXNet's NDArrays do (``x.indptr[0].asscalar()``), for MXNet code handed
  arrays of the native API (the face's own arrays are instances of its subclasses, whose
  components are NDArrays). Native code that never imports the face keeps NumPy's own
  indexing and cost.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from . import autograd, ops
from .device import as_device
from .dtypes import value_dtype
from .ndarray import NDArray
from .ndarray.view import ComponentView
from .ops import methods as _operator_methods


def _backward(self: NDArray, out_grad: NDArray | None = None, retain_graph: bool = False,
              train_mode: bool = True) -> None:
    """Backpropagate from this array (``autograd.backward([self], [out_grad])``)."""
    autograd.backward([self], [out_grad], retain_graph=retain_graph, train_mode=train_mode)


# the containers' own copies, conversions and moves, which the recorded forms below fall back to
_tostype, _copy, _astype, _to = NDArray.tostype, NDArray.copy, NDArray.astype, NDArray.to


def _recorded(x: NDArray) -> bool:
    """Whether a copy or conversion of ``x`` joins the graph being recorded (x needs a gradient)."""
    info = x._ag
    return info is not None and autograd.is_recording() and info.needs_grad()


def tostype(self: NDArray, stype: str) -> NDArray:
    """A new container holding these values in storage type ``stype`` (while recording, the
    ``cast_storage`` operator, so the gradient flows back through it)."""
    if _recorded(self):
        return ops.cast_storage(self, stype=stype)
    return _tostype(self, stype)


def copy(self: NDArray) -> NDArray:
    """A deep copy, same storage type, dtype and device (while recording, the ``identity``
    operator: the gradient passes through it)."""
    if _recorded(self):
        return ops.identity(self)
    return _copy(self)


def astype(self: NDArray, dtype: Any, copy: bool = True) -> NDArray:
    """These values converted to ``dtype``; with ``copy=False`` the array itself when nothing
    changes. While recording, the gradient flows back cast to this array's dtype (dense:
    the ``cast`` operator; sparse: the same structure with converted values)."""
    if not _recorded(self):
        return _astype(self, dtype, copy)
    dt = value_dtype(dtype)
    if dt == self.dtype and not copy:
        return self
    if self.stype == "default":
        return ops.cast(self, dtype=dt)
    return _Converted(dt)(self)


class _Converted(autograd.Function):
    """A sparse array's values converted to another dtype, structure kept; the gradient is
    the output's, converted back to the input's dtype."""

    def __init__(self, dtype: np.dtype) -> None:
        super().__init__()
        self.dtype = dtype

    def forward(self, x: NDArray) -> NDArray:
        self.source = x.dtype
        return _astype(x, self.dtype)

    def backward(self, grad: NDArray) -> NDArray:
        return _astype(grad, self.source)


def to(self: NDArray, device: Any, copy: bool = False) -> NDArray:
    """This array on ``device``: itself when already there (unless ``copy``), else a copy
    there. While recording, a move to another device joins the graph: its gradient goes back
    to this array's device (as torch's ``x.to(device)`` and MXNet's ``_copyto``)."""
    if not _recorded(self):
        return _to(self, device, copy)
    dev = as_device(device)
    if dev == self._device:
        return ops.identity(self) if copy else self
    return _Moved(dev)(self)


class _Moved(autograd.Function):
    """An array copied to another device; the gradient is the copy's, moved back."""

    trusted = True  # reads its head gradient as it comes (a move copies it)

    def __init__(self, device: Any) -> None:
        super().__init__()
        self.device = device

    def forward(self, x: NDArray) -> NDArray:
        self.source = x._device
        return _to(x, self.device)

    def backward(self, grad: NDArray) -> NDArray:
        return _to(grad, self.source)


def install() -> None:
    """Attach the operator and engine methods to ``NDArray`` (and so to every container)."""
    _operator_methods.install(NDArray)
    NDArray.backward = _backward
    NDArray.tostype, NDArray.copy, NDArray.astype, NDArray.to = tostype, copy, astype, to


# ---- the MXNet face's additions ------------------------------------------------------------------------
_SCALARS: dict = {}


def _asscalar(self: np.generic) -> np.generic:
    """The entry as a plain NumPy scalar."""
    return self.dtype.type(self)


def _mx_scalar(value: np.generic) -> np.generic:
    """``value`` as an instance of a subclass of its NumPy scalar type that adds ``asscalar()``;
    it is that type in every other respect (arithmetic gives plain NumPy scalars, numba types
    it as the NumPy type)."""
    kind = type(value)
    cls = _SCALARS.get(kind)
    if cls is None:
        try:
            cls = type(kind.__name__, (kind,), {"asscalar": _asscalar, "__module__": __name__})
        except TypeError:  # a scalar type that takes no subclass
            cls = kind
        _SCALARS[kind] = cls
    return value if cls is kind else cls(value)


def _component_getitem(self: ComponentView, key: object) -> object:
    got = np.ndarray.__getitem__(self, key)
    return _mx_scalar(got) if isinstance(got, np.generic) else got


def _num_aux(self: Any) -> int:
    return {"csr": 2, "row_sparse": 1}.get(self.stype, 0)


def install_mxnet() -> None:
    """The MXNet face's container behaviour (see the module docstring); idempotent."""
    if "__getitem__" not in ComponentView.__dict__:
        ComponentView.__getitem__ = _component_getitem
    if not hasattr(NDArray, "_num_aux"):
        NDArray._num_aux = property(_num_aux, doc="MXNet's count of auxiliary arrays: csr 2, row_sparse 1, dense 0")
