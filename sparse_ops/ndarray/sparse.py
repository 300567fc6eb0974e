"""The sparse containers: ``RowSparseNDArray`` (``row_sparse``) and ``CSRNDArray`` (``csr``).

A sparse container holds its values (``data``) and index arrays (``indices``, and for
csr ``indptr``) plus a shape. Index arrays keep the dtype they came with (int32 or
int64). Index views handed out are read-only; values are writable. Construction from
user-given components validates every invariant (``validation.py``); internal code
that builds already-valid components passes ``check=False``.
"""
from __future__ import annotations

import operator
from typing import Any

import numpy as np

from .. import device as _dev
from ..device import Device
from ..dtypes import INDEX_DTYPES, source_dtype
from ..errors import SparseFormatError
from ..validation import check_csr, check_row_sparse, normalize_shape
from .dense import NDArray
from .view import component_view


def _read_only(a: Any) -> Any:
    return component_view(a, writable=False)  # CuPy arrays have no read-only flag


def _unify_indices(*arrays: Any) -> tuple[Any, ...]:
    """One index dtype for all aux arrays: theirs if they agree on int32/int64, else int64."""
    dtypes = {a.dtype for a in arrays}
    if len(dtypes) == 1 and next(iter(dtypes)) in INDEX_DTYPES:
        return arrays
    return tuple(a.astype(np.int64) for a in arrays)


class BaseSparseNDArray(NDArray):
    """What ``row_sparse`` and ``csr`` containers share: a shape, values and index arrays."""

    __slots__ = ("_shape",)
    _aux_names: tuple[str, ...] = ()

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def data(self) -> Any:
        """The stored values, a writable zero-copy view."""
        return component_view(self._data, writable=True)

    @property
    def nnz(self) -> int:
        """How many values are stored (explicit zeros included), as in SciPy."""
        return int(self._data.size)

    def _aux(self) -> tuple[Any, ...]:
        raise NotImplementedError

    def aux_data(self, i: int) -> Any:
        """Index array ``i`` (csr: 0 = indptr, 1 = indices; row_sparse: 0 = indices), read-only."""
        return _read_only(self._aux()[i])

    @property
    def aux_types(self) -> list[np.dtype]:
        return [a.dtype for a in self._aux()]

    @property
    def aux_shapes(self) -> list[tuple[int, ...]]:
        return [tuple(a.shape) for a in self._aux()]

    def __repr__(self) -> str:
        return f"<{self._describe()} nnz={self.nnz}>"

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise TypeError(
            f"{type(self).__name__} does not convert implicitly to a dense NumPy array; "
            "call asnumpy() (or asscipy()) explicitly"
        )

    def __dlpack__(self, **kwargs: Any) -> Any:
        raise TypeError(
            f"DLPack exchanges dense arrays only; use tostype('default') or the component "
            f"arrays ({', '.join(('data',) + self._aux_names)})"
        )

    def __dlpack_device__(self) -> tuple[int, int]:
        raise TypeError("DLPack exchanges dense arrays only")

    def asnumpy(self) -> np.ndarray:
        return self.tostype("default").asnumpy()

    def __setitem__(self, key: Any, value: Any) -> None:
        if not (isinstance(key, slice) and key == slice(None)) and key is not Ellipsis:
            raise TypeError(f"{type(self).__name__} supports only whole assignment, x[:] = value")
        if self._ag is not None:
            from ..autograd import check_not_in_graph

            check_not_in_graph(self)
        from ..storage import coerce

        new = coerce(value, self.stype, self.dtype, self._device, shape=self._shape)
        if new.shape != self._shape:
            raise ValueError(f"cannot assign an array of shape {new.shape} to one of shape {self._shape}")
        self._take_parts(new)

    def _take_parts(self, other: "BaseSparseNDArray") -> None:
        raise NotImplementedError

    def check_format(self, full_check: bool = True) -> None:
        """Raise SparseFormatError naming the first broken storage invariant, if any."""
        raise NotImplementedError

    def _moved(self, device: Device) -> "BaseSparseNDArray":
        parts = [_dev.on_device(a, device, copy=True) for a in (self._data, *self._aux())]
        return self._rebuild(parts, device)

    def _rebuild(self, parts: list[Any], device: Device) -> "BaseSparseNDArray":
        raise NotImplementedError

    def __reduce__(self):
        parts = [np.array(_dev.to_host(a), copy=True) for a in (self._data, *self._aux())]
        return (_rebuild_sparse, (self.stype, parts, self._shape, self._device))


def _rebuild_sparse(stype: str, parts: list[np.ndarray], shape: tuple, device: Device):
    cls = CSRNDArray if stype == "csr" else RowSparseNDArray
    return cls._from_host_parts(parts, shape, device)


class RowSparseNDArray(BaseSparseNDArray):
    """Rows ``indices`` (sorted, unique) of an array of ``shape`` are stored in ``data``;
    all other rows are zero. ``data.shape == (len(indices), *shape[1:])``."""

    __slots__ = ("_indices",)
    stype = "row_sparse"
    _aux_names = ("indices",)

    def __init__(self, data: Any, indices: Any, shape: Any, device: Device | None = None,
                 check: bool = True) -> None:
        if check:
            shape = normalize_shape(shape)
            if len(shape) < 1:
                raise SparseFormatError("row_sparse arrays have at least one dimension")
            source_dtype(data.dtype)
            check_row_sparse(data, indices, shape, full=True)
            (indices,) = _unify_indices(indices)
        self._data = data
        self._indices = indices
        self._shape = tuple(shape)
        self._device = device if device is not None else _dev.current_device()
        self._ag = None

    @property
    def indices(self) -> Any:
        """Sorted stored row indices, read-only view."""
        return _read_only(self._indices)

    @property
    def nnz_rows(self) -> int:
        """How many rows are stored."""
        return int(self._indices.shape[0])

    def _aux(self) -> tuple[Any, ...]:
        return (self._indices,)

    def _with_values(self, values: Any, copy_aux: bool) -> "RowSparseNDArray":
        idx = self._indices.copy() if copy_aux else self._indices
        return RowSparseNDArray(values, idx, self._shape, self._device, check=False)

    def _rebuild(self, parts: list[Any], device: Device) -> "RowSparseNDArray":
        return RowSparseNDArray(parts[0], parts[1], self._shape, device, check=False)

    @classmethod
    def _from_host_parts(cls, parts, shape, device):
        data, indices = (_dev.on_device(p, device) for p in parts)
        return cls(data, indices, shape, device)

    def _take_parts(self, other: "RowSparseNDArray") -> None:
        self._data, self._indices = other._data, other._indices

    def check_format(self, full_check: bool = True) -> None:
        check_row_sparse(self._data, self._indices, self._shape, full=full_check)

    def retain(self, row_ids: Any) -> "RowSparseNDArray":
        """A row_sparse array keeping only the stored rows whose index is in ``row_ids``."""
        xp = self._device.xp
        ids = row_ids._data if isinstance(row_ids, NDArray) and row_ids.stype == "default" else row_ids
        ids = _dev.on_device(ids, self._device)
        if ids.dtype.kind not in "iu":
            raise TypeError(f"retain needs integer row ids, got dtype {ids.dtype}")
        keep = xp.isin(self._indices, ids.ravel())
        return RowSparseNDArray(self._data[keep], self._indices[keep], self._shape, self._device,
                                check=False)

    def asscipy(self) -> Any:
        """A ``scipy.sparse.csr_matrix`` of this 2-d array (a copy: the layouts differ)."""
        if self.ndim != 2:
            raise ValueError(f"asscipy needs a 2-d array, this one has shape {self._shape}")
        return self.tostype("csr").asscipy()


class CSRNDArray(BaseSparseNDArray):
    """A 2-d compressed sparse row array: row ``r`` holds columns
    ``indices[indptr[r]:indptr[r+1]]`` (sorted, unique) with values ``data[...]`` there."""

    __slots__ = ("_indices", "_indptr")
    stype = "csr"
    _aux_names = ("indptr", "indices")

    def __init__(self, data: Any, indices: Any, indptr: Any, shape: Any,
                 device: Device | None = None, check: bool = True) -> None:
        if check:
            shape = normalize_shape(shape, ndim=2)
            source_dtype(data.dtype)
            check_csr(data, indices, indptr, shape, full=True)
            indices, indptr = _unify_indices(indices, indptr)
        self._data = data
        self._indices = indices
        self._indptr = indptr
        self._shape = tuple(shape)
        self._device = device if device is not None else _dev.current_device()
        self._ag = None

    @property
    def indices(self) -> Any:
        """Column indices of the stored values, read-only view."""
        return _read_only(self._indices)

    @property
    def indptr(self) -> Any:
        """Row pointers (``rows + 1`` entries), read-only view."""
        return _read_only(self._indptr)

    def _aux(self) -> tuple[Any, ...]:
        return (self._indptr, self._indices)

    def _with_values(self, values: Any, copy_aux: bool) -> "CSRNDArray":
        idx, ptr = (self._indices.copy(), self._indptr.copy()) if copy_aux else (self._indices, self._indptr)
        return CSRNDArray(values, idx, ptr, self._shape, self._device, check=False)

    def _rebuild(self, parts: list[Any], device: Device) -> "CSRNDArray":
        return CSRNDArray(parts[0], parts[2], parts[1], self._shape, device, check=False)

    @classmethod
    def _from_host_parts(cls, parts, shape, device):
        data, indptr, indices = (_dev.on_device(p, device) for p in parts)
        return cls(data, indices, indptr, shape, device)

    def _take_parts(self, other: "CSRNDArray") -> None:
        self._data, self._indices, self._indptr = other._data, other._indices, other._indptr

    def check_format(self, full_check: bool = True) -> None:
        check_csr(self._data, self._indices, self._indptr, self._shape, full=full_check)

    def __getitem__(self, key: Any) -> "CSRNDArray":
        """Row ``x[i]`` (a 1-row csr, as in MXNet) or row slice ``x[i:j]``: data and indices
        are zero-copy views, indptr is rebased."""
        rows = self._shape[0]
        if isinstance(key, slice):
            start, stop, step = key.indices(rows)
            if step != 1:
                raise ValueError(f"csr row slices need step 1, got {step}")
            return self._row_slice(start, max(start, stop))
        try:
            i = operator.index(key)
        except TypeError:
            raise TypeError(f"csr arrays support x[i] and x[i:j] only, got key {key!r}") from None
        if not -rows <= i < rows:
            raise IndexError(f"row {i} is out of range for a csr array with {rows} rows")
        i %= rows
        return self._row_slice(i, i + 1)

    def _row_slice(self, start: int, stop: int) -> "CSRNDArray":
        ptr = self._indptr[start:stop + 1]
        lo, hi = int(ptr[0]), int(ptr[-1])
        return CSRNDArray(self._data[lo:hi], self._indices[lo:hi], ptr - ptr[0],
                          (stop - start, self._shape[1]), self._device, check=False)

    def asscipy(self) -> Any:
        """A ``scipy.sparse.csr_matrix`` sharing these arrays (``cupyx`` on a real gpu).

        Zero-copy except for float16 values, which SciPy does not support (cast to float32).
        """
        if _dev.is_cupy_array(self._data):
            import cupyx.scipy.sparse as csp

            m = csp.csr_matrix((self._data, self._indices, self._indptr), shape=self._shape)
            m.has_canonical_format = True
            return m
        import scipy.sparse as sp

        data = self._data
        if data.dtype == np.float16:
            data = data.astype(np.float32)
        m = sp.csr_matrix(self._shape, dtype=data.dtype)
        # Assigned rather than passed to the constructor: SciPy would downcast int64 indices (a copy).
        m.data, m.indices, m.indptr = data, self._indices, self._indptr
        m.has_sorted_indices = True
        m.has_canonical_format = True
        return m

