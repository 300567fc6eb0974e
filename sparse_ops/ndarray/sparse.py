"""The sparse containers: ``RowSparseNDArray`` (``row_sparse``) and ``CSRNDArray`` (``csr``).

A sparse container holds its values (``data``) and index arrays (``indices``, and for
csr ``indptr``) plus a shape. Index arrays keep the dtype they came with (int32 or
int64). Index views handed out are read-only (for good: their read-only flag cannot be
turned off); values are writable.

Who validates (numba kernels read memory without bounds checks, so nothing unchecked
may reach them):

- the constructor validates every invariant (``validation.py``) unless ``check=False``;
- ``check=False`` defers the validation to the container's first use: the first read of
  its ``shape`` (which every operator call, conversion and slice does before touching the
  components) validates it once, raising ``SparseFormatError``, and then it is trusted;
- internal code that builds components it knows to be valid uses ``_trusted`` (no
  validation, trusted at once);
- operators trust containers validated in one of these ways. Changing their index arrays
  afterwards through memory the caller still holds (zero-copy construction shares it) is
  outside the contract: ``check_format()`` checks again, and the debug mode
  ``SPARSE_OPS_BOUNDSCHECK=1`` turns a kernel's out-of-bounds access into an IndexError.
"""
from __future__ import annotations

import operator
from typing import Any

import numpy as np

from .. import device as _dev
from ..device import Device
from ..dtypes import INDEX_DTYPES, VALUE_DTYPES, source_dtype
from ..errors import SparseFormatError
from ..validation import check_csr, check_row_sparse, normalize_shape
from .dense import CONVERSIONS, NDArray
from .view import ComponentView, plain


def _deferred_error(exc: SparseFormatError, stype: str) -> SparseFormatError:
    return SparseFormatError(f"{exc} (found on the first use of a {stype} array whose full check was deferred "
                             "to it: built with check=False, by sparse_ops.torch.from_torch or by the MXNet face's "
                             "constructors)")


_INT64_MAX = 2**63 - 1
_VALUE_DTYPES = frozenset(VALUE_DTYPES)


def _is_array(a: Any) -> bool:
    return type(a) is np.ndarray or _dev.is_cupy_array(a)


def _as_tuple(shape: Any) -> Any:
    """``shape`` as a tuple when it is iterable (validation says what is wrong with it later)."""
    if isinstance(shape, tuple):
        return shape
    try:
        return tuple(shape)
    except TypeError:
        return shape


def _require_arrays(*parts: Any) -> None:
    for p in parts:
        if not (hasattr(p, "dtype") and hasattr(p, "shape") and hasattr(p, "ndim")):
            raise SparseFormatError(f"sparse components must be arrays, got a {type(p).__name__}")


def unify_indices(*arrays: Any) -> tuple[Any, ...]:
    """One index dtype for all aux arrays: theirs if they agree on int32/int64, else int64."""
    dtypes = {a.dtype for a in arrays}
    if len(dtypes) == 1 and next(iter(dtypes)) in INDEX_DTYPES:
        return arrays
    return tuple(a.astype(np.int64) for a in arrays)


class BaseSparseNDArray(NDArray):
    """What ``row_sparse`` and ``csr`` containers share: a shape, values and index arrays."""

    # _unchecked: None once validated (or built trusted); for a container built with
    # check=False, the index arrays given then, which the first use validates (a kernel
    # that later hands the container new arrays through OpContext replaces them, and
    # arrays built by our kernels are trusted). _v0, _v1, _v2: the views handed out of the
    # values and the index arrays, each cached with the array it shows (``_new_view``).
    __slots__ = ("_shape", "_unchecked", "_v0", "_v1", "_v2")
    _aux_names: tuple[str, ...] = ()

    @property
    def shape(self) -> tuple[int, ...]:
        if self._unchecked is not None and self._still_unchecked():
            self._validate_deferred()
        return self._shape

    def _still_unchecked(self) -> bool:
        """Whether a container built with ``check=False`` still needs validating: not when
        a kernel has since handed it new index arrays (as an output), nor when it stores
        nothing (the dispatcher's empty outputs); it is then trusted from now on."""
        given = self._unchecked
        if given is None:
            return False
        if any(a is not b for a, b in zip(self._aux(), given)) or self._stores_nothing():
            self._unchecked = None
            return False
        return True

    def _validate_deferred(self) -> None:
        """First use of a container built with ``check=False``: validate it once."""
        try:
            self._validate_now()
        except SparseFormatError as exc:
            raise _deferred_error(exc, self.stype) from None
        except TypeError as exc:  # e.g. values of an unsupported dtype
            raise TypeError(f"{exc} (found on the first use of a {self.stype} array built with "
                            f"check=False)") from None
        self._unchecked = None

    def _validate_now(self) -> None:
        """Validate every invariant and normalise (shape, index dtypes), as check=True does."""
        raise NotImplementedError

    def _stores_nothing(self) -> bool:
        """Whether this is a valid container that stores nothing, told cheaply: the empty
        outputs the dispatcher allocates with check=False, read before a kernel fills them."""
        shape, data = self._shape, self._data
        if type(shape) is not tuple or not shape or not _is_array(data) or data.size:
            return False
        for d in shape:
            if type(d) is not int or not 0 <= d <= _INT64_MAX:
                return False
        if data.dtype not in _VALUE_DTYPES:
            return False
        aux = self._aux()
        dtype = aux[0].dtype
        for a in aux:
            if not _is_array(a) or a.ndim != 1 or a.dtype != dtype:
                return False
        return dtype in INDEX_DTYPES and self._empty_structure(shape, data, aux)

    def _empty_structure(self, shape: tuple, data: Any, aux: tuple) -> bool:
        raise NotImplementedError

    def _new_view(self, i: int, a: Any) -> Any:
        """A view of component ``i`` (0: the values ``a``, then the index arrays) as handed
        to users and kernels alike: the values writable, the index arrays read-only for good
        (their memory is seen through a read-only buffer, so the flag cannot be switched
        back). Cached with the array it shows (slots ``_v0``, ``_v1``, ``_v2``), so every
        reader gets the same object and numba one array type."""
        if not isinstance(a, np.ndarray):
            v = a  # CuPy: no read-only flag, and no view type needed
        else:
            if i == 0:
                v = a.view(ComponentView)
            elif a.flags.c_contiguous:
                v = np.frombuffer(memoryview(a).toreadonly(), dtype=a.dtype).reshape(a.shape).view(ComponentView)
            else:  # a strided view: a plain read-only view
                v = a.view(ComponentView)
                v.flags.writeable = False
            v._source = a  # what ``plain`` gives back when a kernel hands this view on
        setattr(self, f"_v{i}", (a, v))
        return v

    @property
    def data(self) -> Any:
        """The stored values, a writable zero-copy view."""
        hit = self._v0
        return hit[1] if hit is not None and hit[0] is self._data else self._new_view(0, self._data)

    @property
    def nnz(self) -> int:
        """How many values are stored (explicit zeros included), as in SciPy."""
        return int(self._data.size)

    def _aux(self) -> tuple[Any, ...]:
        raise NotImplementedError

    def aux_data(self, i: int) -> Any:
        """Index array ``i`` (csr: 0 = indptr, 1 = indices; row_sparse: 0 = indices), read-only."""
        return getattr(self, self._aux_names[i])

    @property
    def aux_types(self) -> list[np.dtype]:
        return [a.dtype for a in self._aux()]

    @property
    def aux_shapes(self) -> list[tuple[int, ...]]:
        return [tuple(a.shape) for a in self._aux()]

    def __repr__(self) -> str:
        if self._unchecked is not None:  # never raise from repr: say it is not validated yet
            return f"<{type(self).__name__} shape={self._shape!r} built with check=False, not yet validated>"
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
            self._check_writable(self)
        shape = self.shape
        new = CONVERSIONS["coerce"](value, self.stype, self.dtype, self._device, shape=shape)
        if new.shape != shape:
            raise ValueError(f"cannot assign an array of shape {new.shape} to one of shape {shape}")
        # the parts are replaced, not written: what shares the old ones (the array a detach()
        # came from) is unchanged, so this array's count goes on alone
        v = getattr(self, "_version", None)
        self._version = [(v[0] if v is not None else 0) + 1]
        self._take_parts(new)

    def _take_parts(self, other: "BaseSparseNDArray") -> None:
        raise NotImplementedError

    def check_format(self, full_check: bool = True) -> None:
        """Raise SparseFormatError naming the first broken storage invariant, if any.

        ``full_check=False`` runs only the O(1) checks (lengths, dtypes, ``indptr`` ends).
        A full check that passes also marks a container built with ``check=False`` as
        validated."""
        if self._unchecked is not None and self._still_unchecked():
            if full_check:
                self._validate_now()
                self._unchecked = None
                return
            _require_arrays(self._data, *self._aux())
            shape = normalize_shape(self._shape, ndim=2 if self.stype == "csr" else None)
        else:
            shape = self._shape
        self._check_parts(shape, full_check)

    def _check_parts(self, shape: tuple[int, ...], full: bool) -> None:
        raise NotImplementedError

    def _same_trust(self, other: "BaseSparseNDArray") -> "BaseSparseNDArray":
        """``other`` (same structure as self) is unchecked when self is."""
        if self._unchecked is not None:
            other._unchecked = other._aux()
        return other

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
        self._data, self._indices = plain(data, indices)
        self._shape = _as_tuple(shape)
        self._device = device if device is not None else _dev.current_device()
        self._ag = None
        self._v0 = self._v1 = None
        self._unchecked = (self._indices,)
        if check:
            self._validate_now()
            self._unchecked = None

    @classmethod
    def _trusted(cls, data: Any, indices: Any, shape: tuple[int, ...],
                 device: Device | None = None) -> "RowSparseNDArray":
        """A container of components known to be valid (internal code): no validation."""
        x = cls(data, indices, shape, device, check=False)
        x._unchecked = None
        return x

    def _validate_now(self) -> None:
        shape = normalize_shape(self._shape)
        if len(shape) < 1:
            raise SparseFormatError("row_sparse arrays have at least one dimension")
        _require_arrays(self._data, self._indices)
        source_dtype(self._data.dtype)
        check_row_sparse(self._data, self._indices, shape, full=True)
        (self._indices,) = unify_indices(self._indices)
        self._shape = shape

    @property
    def indices(self) -> Any:
        """Sorted stored row indices, read-only view."""
        hit = self._v1
        return hit[1] if hit is not None and hit[0] is self._indices else self._new_view(1, self._indices)

    def _empty_structure(self, shape: tuple, data: Any, aux: tuple) -> bool:
        return aux[0].shape[0] == 0 and data.shape == (0, *shape[1:])

    @property
    def nnz_rows(self) -> int:
        """How many rows are stored."""
        return int(self._indices.shape[0])

    def _aux(self) -> tuple[Any, ...]:
        return (self._indices,)

    def _with_values(self, values: Any, copy_aux: bool) -> "RowSparseNDArray":
        idx = self._indices.copy() if copy_aux else self._indices
        return self._same_trust(RowSparseNDArray._trusted(values, idx, self._shape, self._device))

    def _rebuild(self, parts: list[Any], device: Device) -> "RowSparseNDArray":
        return self._same_trust(RowSparseNDArray._trusted(parts[0], parts[1], self._shape, device))

    @classmethod
    def _from_host_parts(cls, parts, shape, device):
        data, indices = (_dev.on_device(p, device) for p in parts)
        return cls(data, indices, shape, device)

    def _take_parts(self, other: "RowSparseNDArray") -> None:
        self._data, self._indices = other._data, other._indices
        self._unchecked = None if other._unchecked is None else (other._indices,)

    def _check_parts(self, shape: tuple[int, ...], full: bool) -> None:
        check_row_sparse(self._data, self._indices, shape, full=full)

    def __getitem__(self, key: Any) -> NDArray:
        """Rows of the array (not of the stored rows), NumPy's rules on the first axis:
        ``x[i]`` is row i as a dense array (a copy; zeros where no row is stored);
        ``x[i:j:k]`` a row_sparse array of those rows (``x[:]`` is ``x``, as in MXNet); an
        integer array (or NDArray) of row ids gives those rows, dense. A tuple is NumPy's
        indexing of the dense array (``x[rows, cols]`` pairs them up), reading only the rows
        it names."""
        if self._ag is not None and self._record_index is not None:  # while recording: recorded
            recorded = self._record_index(self, key)
            if recorded is not None:
                return recorded
        if isinstance(key, tuple):
            if len(key) < 2:
                return self[key[0]] if key else self
            first, rest = key[0], key[1:]
            if any(k is Ellipsis or k is None for k in key):
                return self.tostype("default")[key]
            if isinstance(first, slice):
                return self[first].tostype("default")[(slice(None), *rest)]
            # a row or row ids: each distinct row read once, the key applied as NumPy would (an
            # int is an advanced index there: with an array after a slice, their axes go first)
            ids = self._row_ids(first)
            distinct, where = self._device.xp.unique(ids, return_inverse=True)
            return self._gather(distinct)[(NDArray(where.reshape(ids.shape), self._device), *rest)]
        if key is Ellipsis or isinstance(key, slice) and key == slice(None):
            return self
        if isinstance(key, bool):  # NumPy's x[True] adds an axis; not a row number
            raise IndexError("row_sparse arrays take integer row ids, not a bool")
        rows = self.shape[0]
        if isinstance(key, slice):
            return self._row_range(*key.indices(rows))
        try:
            i = operator.index(key)
        except TypeError:
            return self._gather(key)
        if not -rows <= i < rows:
            raise IndexError(f"row {i} is out of range for a row_sparse array with {rows} rows")
        return self._gather(i % rows)

    def _row_range(self, start: int, stop: int, step: int) -> "RowSparseNDArray":
        """Rows ``range(start, stop, step)``: the stored ones among them, renumbered."""
        xp, idx = self._device.xp, self._indices
        count = len(range(start, stop, step))
        if step > 0:
            last = start + max(count - 1, 0) * step  # the highest row taken
            lo, hi = (int(v) for v in xp.searchsorted(idx, xp.asarray([start, last + 1])))
            if count == 0:
                lo = hi
            rows, data = idx[lo:hi] - start, self._data[lo:hi]
            if step > 1:
                keep = rows % step == 0
                rows, data = rows[keep] // step, data[keep]
        else:
            last = start + (count - 1) * step  # the lowest row taken
            lo, hi = (int(v) for v in xp.searchsorted(idx, xp.asarray([last, start + 1])))
            if count == 0:
                lo = hi
            offset = start - idx[lo:hi]
            keep = offset % -step == 0
            rows, data = (offset[keep] // -step)[::-1], self._data[lo:hi][keep][::-1]
        return RowSparseNDArray._trusted(xp.ascontiguousarray(data), rows.astype(idx.dtype, copy=False),
                                         (count, *self._shape[1:]), self._device)

    def _gather(self, key: Any) -> NDArray:
        """Rows ``key`` (an int or integer array), dense: stored values where stored, zeros
        elsewhere."""
        xp, idx = self._device.xp, self._indices
        ids = self._row_ids(key)
        out = xp.zeros((*ids.shape, *self._shape[1:]), dtype=self._data.dtype)
        if idx.shape[0]:
            pos = xp.minimum(xp.searchsorted(idx, ids), idx.shape[0] - 1)
            found = idx[pos] == ids
            out[found] = self._data[pos[found]]
        return NDArray(out, self._device)

    def _row_ids(self, key: Any) -> Any:
        """``key`` (an int or integer array, or a dense NDArray of them) as row ids on this
        array's device, negative ones counted from the end; IndexError for anything else
        and for ids out of range."""
        xp, rows = self._device.xp, self._shape[0]
        ids = key._data if isinstance(key, NDArray) and key.stype == "default" else key
        ids = _dev.on_device(xp.asarray(ids), self._device)
        if ids.dtype.kind == "b":
            raise IndexError("row_sparse arrays take integer row ids; turn a mask into ids with nonzero()")
        if ids.dtype.kind not in "iu":
            raise IndexError(f"row_sparse arrays are indexed by ints, slices and integer arrays, got {key!r}")
        if ids.size and (int(ids.min()) < -rows or int(ids.max()) >= rows):
            raise IndexError(f"row ids must lie in [-{rows}, {rows}) for a row_sparse array with {rows} rows")
        return xp.where(ids < 0, ids + rows, ids)

    def retain(self, row_ids: Any) -> "RowSparseNDArray":
        """A row_sparse array keeping only the stored rows whose index is in ``row_ids``."""
        xp = self._device.xp
        ids = row_ids._data if isinstance(row_ids, NDArray) and row_ids.stype == "default" else row_ids
        ids = _dev.on_device(ids, self._device)
        if ids.dtype.kind not in "iu":
            raise TypeError(f"retain needs integer row ids, got dtype {ids.dtype}")
        keep = xp.isin(self._indices, ids.ravel())
        return RowSparseNDArray._trusted(self._data[keep], self._indices[keep], self.shape, self._device)

    def asscipy(self) -> Any:
        """A ``scipy.sparse.csr_matrix`` of this 2-d array (a copy: the layouts differ)."""
        if self.ndim != 2:
            raise ValueError(f"asscipy needs a 2-d array, this one has shape {self.shape}")
        return self.tostype("csr").asscipy()


class CSRNDArray(BaseSparseNDArray):
    """A 2-d compressed sparse row array: row ``r`` holds columns
    ``indices[indptr[r]:indptr[r+1]]`` (sorted, unique) with values ``data[...]`` there."""

    __slots__ = ("_indices", "_indptr")
    stype = "csr"
    _aux_names = ("indptr", "indices")

    def __init__(self, data: Any, indices: Any, indptr: Any, shape: Any,
                 device: Device | None = None, check: bool = True) -> None:
        self._data, self._indices, self._indptr = plain(data, indices, indptr)
        self._shape = _as_tuple(shape)
        self._device = device if device is not None else _dev.current_device()
        self._ag = None
        self._v0 = self._v1 = self._v2 = None
        self._unchecked = (self._indptr, self._indices)
        if check:
            self._validate_now()
            self._unchecked = None

    @classmethod
    def _trusted(cls, data: Any, indices: Any, indptr: Any, shape: tuple[int, int],
                 device: Device | None = None) -> "CSRNDArray":
        """A container of components known to be valid (internal code): no validation."""
        x = cls(data, indices, indptr, shape, device, check=False)
        x._unchecked = None
        return x

    def _validate_now(self) -> None:
        shape = normalize_shape(self._shape, ndim=2)
        _require_arrays(self._data, self._indices, self._indptr)
        source_dtype(self._data.dtype)
        check_csr(self._data, self._indices, self._indptr, shape, full=True)
        self._indices, self._indptr = unify_indices(self._indices, self._indptr)
        self._shape = shape

    @property
    def indices(self) -> Any:
        """Column indices of the stored values, read-only view."""
        hit = self._v2
        return hit[1] if hit is not None and hit[0] is self._indices else self._new_view(2, self._indices)

    @property
    def indptr(self) -> Any:
        """Row pointers (``rows + 1`` entries), read-only view."""
        hit = self._v1
        return hit[1] if hit is not None and hit[0] is self._indptr else self._new_view(1, self._indptr)

    def _empty_structure(self, shape: tuple, data: Any, aux: tuple) -> bool:
        indptr, indices = aux
        return (len(shape) == 2 and data.shape == (0,) and indices.shape[0] == 0
                and indptr.shape[0] == shape[0] + 1 and not indptr.any())

    def _aux(self) -> tuple[Any, ...]:
        return (self._indptr, self._indices)

    def _with_values(self, values: Any, copy_aux: bool) -> "CSRNDArray":
        idx, ptr = (self._indices.copy(), self._indptr.copy()) if copy_aux else (self._indices, self._indptr)
        return self._same_trust(CSRNDArray._trusted(values, idx, ptr, self._shape, self._device))

    def _rebuild(self, parts: list[Any], device: Device) -> "CSRNDArray":
        return self._same_trust(CSRNDArray._trusted(parts[0], parts[2], parts[1], self._shape, device))

    @classmethod
    def _from_host_parts(cls, parts, shape, device):
        data, indptr, indices = (_dev.on_device(p, device) for p in parts)
        return cls(data, indices, indptr, shape, device)

    def _take_parts(self, other: "CSRNDArray") -> None:
        self._data, self._indices, self._indptr = other._data, other._indices, other._indptr
        self._unchecked = None if other._unchecked is None else (other._indptr, other._indices)

    def _check_parts(self, shape: tuple[int, ...], full: bool) -> None:
        check_csr(self._data, self._indices, self._indptr, shape, full=full)

    def __getitem__(self, key: Any) -> "CSRNDArray":
        """Row ``x[i]`` (a 1-row csr, as in MXNet) or row slice ``x[i:j]``: data and indices
        are zero-copy views, indptr is rebased."""
        if self._ag is not None and self._record_index is not None:  # while recording: recorded
            recorded = self._record_index(self, key)
            if recorded is not None:
                return recorded
        rows = self.shape[0]
        if isinstance(key, slice):
            start, stop, step = key.indices(rows)
            if step != 1:
                raise ValueError(f"csr row slices need step 1, got {step}")
            return self._row_slice(start, max(start, stop))
        if isinstance(key, bool):  # NumPy's x[True] adds an axis; not a row number
            raise IndexError("csr arrays take an integer row or a row slice, not a bool")
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
        return CSRNDArray._trusted(self._data[lo:hi], self._indices[lo:hi], ptr - ptr[0],
                                   (stop - start, self._shape[1]), self._device)

    def asscipy(self) -> Any:
        """A ``scipy.sparse.csr_matrix`` sharing these arrays (``cupyx`` on a real gpu).

        Zero-copy except for float16 values, which SciPy does not support (cast to float32).
        """
        shape = self.shape  # validates a container built with check=False: SciPy trusts these flags
        if _dev.is_cupy_array(self._data):
            import cupyx.scipy.sparse as csp

            m = csp.csr_matrix((self._data, self._indices, self._indptr), shape=shape)
            m.has_canonical_format = True
            return m
        import scipy.sparse as sp

        data = self._data
        if data.dtype == np.float16:
            data = data.astype(np.float32)
        m = sp.csr_matrix(shape, dtype=data.dtype)
        # Assigned rather than passed to the constructor: SciPy would downcast int64 indices (a copy).
        m.data, m.indices, m.indptr = data, self._indices, self._indptr
        m.has_sorted_indices = True
        m.has_canonical_format = True
        return m

