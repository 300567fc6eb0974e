"""``mx.nd.sparse``: MXNet 1.x's sparse classes, constructors and functions.

``CSRNDArray`` and ``RowSparseNDArray`` here are the face's subclasses of the library's
sparse containers (see ``ndarray.py``): their components ``data``, ``indices`` and
``indptr`` are NDArrays (copies, as MXNet's), where the library hands out NumPy views;
kernels and the library's own code get the library's class (``NDArray._kernel_class``).

Constructors follow MXNet's rules: the value dtype is ``dtype`` if given, else the
source's when it is an NDArray, a NumPy array or a SciPy matrix, else float32; index
arrays are int64 (MXNet's only aux type); components are always copied. Every
registered operator is reachable here too (``mx.nd.sparse.dot``, ``retain``,
``elemwise_add``, ``square``, ...), as are MXNet's ``_sparse_<name>`` spellings.
"""
from __future__ import annotations

import operator as _pyop
import sys
from typing import Any

import numpy as np

from .... import creation as _core
from .... import device as _dev
from ....errors import SparseFormatError
from ....ndarray import BaseSparseNDArray as _LibBaseSparse
from ....ndarray import CSRNDArray as _LibCSR
from ....ndarray import NDArray
from ....ndarray import RowSparseNDArray as _LibRowSparse
from ....ndarray import kernel_form, take_storage
from ..base import MXNetValueError, integer_types, mx_real_t
from . import _op
from ._op import as_face
from .ndarray import FaceClass, held_sparse, sparse_copy
from .ndarray import NDArray as _FaceNDArray

_INDEX = np.int64


# ---- the classes ------------------------------------------------------------------------------------------
class BaseSparseNDArray(_FaceNDArray, _LibBaseSparse, metaclass=FaceClass):
    """What the face's sparse arrays share: MXNet's methods over the library's sparse
    containers, components shown as NDArrays."""

    __slots__ = ()
    _library = _LibBaseSparse

    def __getitem__(self, key: Any) -> NDArray:
        return as_face(self._kernel_class.__getitem__(kernel_form(self), key))

    def _write(self, key: Any, value: Any) -> None:
        if not (key is Ellipsis or (isinstance(key, slice) and key == slice(None))):
            raise MXNetValueError(f"Assignment with slice for {type(self).__name__} is not implemented yet "
                                  "(MXNet 1.9.1: only x[:] = value)")
        form = kernel_form(self)
        self._kernel_class.__setitem__(form, key, kernel_form(value) if isinstance(value, NDArray) else value)
        take_storage(self, form)

    def _component(self, name: str) -> _FaceNDArray:
        """Component ``name`` as a dense NDArray: a copy, as MXNet's."""
        view = getattr(kernel_form(self), name)
        return as_face(NDArray(view.copy(), self._device))

    @property
    def data(self) -> _FaceNDArray:
        """The stored values, a new NDArray (a copy, as in MXNet)."""
        return self._component("data")

    @property
    def indices(self) -> _FaceNDArray:
        """The index array (csr: column ids; row_sparse: row ids), a new int64 NDArray."""
        return self._component("indices")

    @property
    def _num_aux(self) -> int:
        """MXNet's count of auxiliary arrays: csr 2, row_sparse 1."""
        return len(self._aux_names)

    def retain(self, *args: Any, **kwargs: Any) -> "RowSparseNDArray":
        return _op.cached_function("retain")(self, *args, **kwargs)


class CSRNDArray(BaseSparseNDArray, _LibCSR, metaclass=FaceClass):
    """MXNet's CSRNDArray: the library's csr container, components shown as NDArrays."""

    __slots__ = ()
    _library = _LibCSR
    _kernel_class = _LibCSR

    @property
    def indptr(self) -> _FaceNDArray:
        """The row pointers, a new int64 NDArray."""
        return self._component("indptr")

    def __getitem__(self, key: Any) -> "CSRNDArray":
        """MXNet 1.9.1's keys: ``x[:]`` is ``x`` itself, ``x[i]`` and ``x[i:j]`` new csr arrays
        of those rows; steps, tuples and other keys are refused."""
        if isinstance(key, slice):
            if key.step is not None:
                raise MXNetValueError("CSRNDArray only supports continuous slicing on axis 0")
            if key.start is None and key.stop is None:
                return self
        elif isinstance(key, tuple):
            raise MXNetValueError("CSRNDArray: multi-dimension indexing is not supported")
        elif not isinstance(key, integer_types):
            raise MXNetValueError(f"CSRNDArray[{type(key).__name__}]: undefined for this key")
        return super().__getitem__(key)


class RowSparseNDArray(BaseSparseNDArray, _LibRowSparse, metaclass=FaceClass):
    """MXNet's RowSparseNDArray: the library's row_sparse container, components shown as NDArrays."""

    __slots__ = ()
    _library = _LibRowSparse
    _kernel_class = _LibRowSparse

    def __getitem__(self, key: Any) -> "RowSparseNDArray":
        """Only ``x[:]`` (``x`` itself), as in MXNet 1.9.1, which refuses integers, other
        slices and tuples (``sparse_ops``' own row_sparse arrays take NumPy's indexing)."""
        if isinstance(key, slice) and key.start is None and key.stop is None and key.step is None:
            return self
        if isinstance(key, integer_types):
            raise MXNetValueError("RowSparseNDArray[int]: indexing by an integer is not implemented for "
                                  "RowSparseNDArray (MXNet 1.9.1); x.tostype('default')[i] gives the row")
        if isinstance(key, slice):
            raise MXNetValueError("RowSparseNDArray[slice]: only [:] is supported (MXNet 1.9.1)")
        if isinstance(key, tuple):
            raise MXNetValueError("RowSparseNDArray[tuple]: multi-dimensional indexing is not supported")
        raise MXNetValueError(f"RowSparseNDArray[{type(key).__name__}]: undefined for this key")


_op.FACE_CLASSES[_LibCSR] = CSRNDArray
_op.FACE_CLASSES[_LibRowSparse] = RowSparseNDArray


def _is_scipy_sparse(obj: Any) -> bool:
    return "scipy.sparse" in sys.modules and sys.modules["scipy.sparse"].issparse(obj)


def _default_dtype(src: Any, dtype: Any) -> Any:
    """MXNet's ``_prepare_default_dtype``: ``dtype``, else an array's own, else float32."""
    if dtype is not None:
        return dtype
    if isinstance(src, NDArray) or _is_scipy_sparse(src) or (hasattr(src, "dtype") and hasattr(src, "shape")):
        return src.dtype
    return mx_real_t


def _host(a: Any) -> Any:
    """Components given as NDArrays become NumPy arrays; anything else passes through."""
    return a.asnumpy() if isinstance(a, NDArray) else a


def _index(a: Any) -> np.ndarray:
    """An index array as int64, MXNet's only aux type. Like MXNet, integral values of another
    numeric dtype are cast; anything that is not an integer (NaN, 0.5, booleans, objects, a
    value beyond int64) is refused instead of being cast to garbage."""
    a = np.asarray(_dev.to_host(_host(a)))
    kind = a.dtype.kind
    if kind == "i":
        return a.astype(_INDEX, copy=False)
    if kind == "u":
        if a.size and int(a.max()) > np.iinfo(_INDEX).max:
            raise SparseFormatError(f"index {int(a.max())} is out of range: it does not fit in int64")
        return a.astype(_INDEX)
    if kind == "f":
        with np.errstate(invalid="ignore"):
            integral = np.isfinite(a) & (a == np.trunc(a)) & (np.abs(a) < 2.0**63)
        if bool(integral.all()):
            return a.astype(_INDEX)
        bad = a[~integral].ravel()[0].item()
        raise SparseFormatError(f"indices must have an integer dtype or integral values, got {bad!r} "
                                f"in an array of dtype {a.dtype}")
    raise SparseFormatError(f"indices must have an integer dtype, got {a.dtype}")


def _check_shape(s1: Any, s2: Any, what: str = "csr_matrix") -> None:
    if s1 and s2 and tuple(s1) != tuple(s2):
        raise MXNetValueError(f"{what}: Shape mismatch detected. {tuple(s1)} v.s. {tuple(s2)} (argument shape)")


def _inferable(indices: np.ndarray, shape: Any, what: str) -> None:
    """MXNet infers a missing shape from the largest index, and refuses to when there is none."""
    if shape is None and indices.shape[0] == 0:
        raise MXNetValueError(f"{'csr_matrix' if what == 'csr' else 'row_sparse_array'}: invalid shape (argument shape): cannot infer the shape of a {what} array from empty indices; "
                         "pass shape=")


def csr_matrix(arg1: Any, shape: Any = None, ctx: Any = None, dtype: Any = None) -> CSRNDArray:
    """A CSRNDArray from ``(data, indices, indptr)``, ``(data, (row, col))`` (duplicates
    summed), a shape ``(M, N)``, a CSRNDArray, a SciPy matrix, or a dense array-like."""
    dev = _dev.as_device(ctx)
    if isinstance(arg1, tuple):
        if len(arg1) == 2 and isinstance(arg1[1], tuple) and len(arg1[1]) == 2:
            data, (row, col) = arg1
            return as_face(held_sparse(lambda d: _core.csr_matrix((_host(data), (_index(row), _index(col))),
                                                                  shape=shape, dtype=d, device=dev),
                                       _default_dtype(data, dtype)))
        if len(arg1) == 2:
            _check_shape(arg1, shape)
            return zeros("csr", arg1, ctx=ctx, dtype=dtype)
        if len(arg1) == 3:
            data, indices, indptr = arg1
            indices = _index(indices)
            _inferable(indices, shape, "csr")
            return as_face(held_sparse(lambda d: _core.csr_matrix((_host(data), indices, _index(indptr)), shape=shape,
                                                                  dtype=d, device=dev, copy=True, check=False),
                                       _default_dtype(data, dtype)))
        raise MXNetValueError(f"csr_matrix: Unexpected length of input tuple: {len(arg1)} (argument arg1)")
    if isinstance(arg1, CSRNDArray) or _is_scipy_sparse(arg1):
        _check_shape(arg1.shape, shape)
        return array(arg1, ctx=ctx, dtype=dtype)
    if isinstance(arg1, RowSparseNDArray):
        raise MXNetValueError("csr_matrix: Unexpected input type: RowSparseNDArray (argument arg1)")
    _check_shape(np.shape(arg1), shape)
    return as_face(held_sparse(lambda d: _core.array(arg1, dtype=d, device=dev).tostype("csr"),
                               _default_dtype(arg1, dtype)))


def row_sparse_array(arg1: Any, shape: Any = None, ctx: Any = None, dtype: Any = None) -> RowSparseNDArray:
    """A RowSparseNDArray from ``(data, indices)`` (sorted row ids), a shape
    ``(D0, D1, ...)``, a RowSparseNDArray, or a dense array-like."""
    dev = _dev.as_device(ctx)
    if isinstance(arg1, tuple):
        if len(arg1) < 2:
            raise MXNetValueError(f"row_sparse_array: Unexpected length of input tuple: {len(arg1)} (argument arg1)")
        if len(arg1) > 2 or all(isinstance(d, integer_types) for d in arg1):
            _check_shape(arg1, shape, "row_sparse_array")
            return zeros("row_sparse", arg1, ctx=ctx, dtype=dtype)
        data, indices = arg1
        indices = _index(indices)
        _inferable(indices, shape, "row_sparse")
        return as_face(held_sparse(lambda d: _core.row_sparse_array((_host(data), indices), shape=shape, dtype=d,
                                                                    device=dev, copy=True, check=False),
                                   _default_dtype(data, dtype)))
    if isinstance(arg1, RowSparseNDArray):
        _check_shape(arg1.shape, shape, "row_sparse_array")
        return array(arg1, ctx=ctx, dtype=dtype)
    if isinstance(arg1, CSRNDArray):
        raise MXNetValueError("row_sparse_array: Unexpected input type: CSRNDArray (argument arg1)")
    _check_shape(np.shape(arg1), shape, "row_sparse_array")
    return as_face(held_sparse(lambda d: _core.array(arg1, dtype=d, device=dev).tostype("row_sparse"),
                               _default_dtype(arg1, dtype)))


def zeros(stype: str, shape: Any, ctx: Any = None, dtype: Any = None) -> NDArray:
    """An all-zero array of storage type ``stype`` (stype comes first, as in MXNet)."""
    return as_face(held_sparse(lambda d: _core.zeros(shape, stype=stype, dtype=d, device=_dev.as_device(ctx)),
                               mx_real_t if dtype is None else dtype))


def empty(stype: str, shape: Any, ctx: Any = None, dtype: Any = None) -> BaseSparseNDArray:
    """An empty sparse array (nothing stored) of storage type ``csr`` or ``row_sparse``."""
    if stype not in ("csr", "row_sparse"):
        raise MXNetValueError(f"sparse.empty: unknown stype : {stype!r} (argument stype)")
    return zeros(stype, (shape,) if isinstance(shape, integer_types) else shape, ctx=ctx, dtype=dtype)


def array(source_array: Any, ctx: Any = None, dtype: Any = None) -> BaseSparseNDArray:
    """A copy of a sparse NDArray or a SciPy sparse matrix (made canonical: sorted
    indices, duplicates summed) on ``ctx`` (default: the current device)."""
    if isinstance(source_array, NDArray):
        if source_array.stype == "default":
            raise MXNetValueError("sparse.array: source_array is a dense NDArray. Please use `tostype` to create RowSparseNDArray or CSRNDArray from an NDArray")
        return sparse_copy(source_array, ctx, dtype)
    if _is_scipy_sparse(source_array):
        return sparse_copy(source_array, ctx, dtype)
    raise MXNetValueError(f"sparse.array: Unexpected source_array type: {type(source_array).__name__} (argument source_array)")


def _same_shape_ufunc(mx_name: str, elemwise: str, broadcast: str, scalar_fn: Any, lscalar: str,
                      rscalar: str | None = None) -> Any:
    def fn(lhs: Any, rhs: Any) -> Any:
        return _op.ufunc(lhs, rhs, broadcast, scalar_fn, lscalar, rscalar, same_shape_op=elemwise)

    fn.__name__ = fn.__qualname__ = mx_name
    fn.__doc__ = (f"``lhs {mx_name} rhs``: ``{elemwise}`` (storage-aware) for one shape, ``{broadcast}`` "
                  f"otherwise, ``{lscalar}`` with a scalar.")
    return fn


add = _same_shape_ufunc("add", "elemwise_add", "broadcast_add", _pyop.add, "_plus_scalar")
subtract = _same_shape_ufunc("subtract", "elemwise_sub", "broadcast_sub", _pyop.sub, "_minus_scalar",
                             "_rminus_scalar")
multiply = _same_shape_ufunc("multiply", "elemwise_mul", "broadcast_mul", _pyop.mul, "_mul_scalar")
divide = _same_shape_ufunc("divide", "elemwise_div", "broadcast_div", _pyop.truediv, "_div_scalar",
                           "_rdiv_scalar")


def __getattr__(name: str) -> Any:
    return _op.cached_function(name)


def __dir__() -> list[str]:
    return sorted(set(__all__) | set(_op.known_names()))


__all__ = ["csr_matrix", "row_sparse_array", "zeros", "empty", "array", "BaseSparseNDArray", "CSRNDArray",
           "RowSparseNDArray", "add", "subtract", "multiply", "divide"]
