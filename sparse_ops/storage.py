"""Conversions between the three storage types (MXNet's ``cast_storage``), all 9 pairs.

On the cpu the csr <-> dense hot paths run numba kernels; everything else (and every
path on a gpu) is vectorised array-module code, so the same function serves NumPy and
CuPy. Every result is a new container; the input is never modified.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from . import device as _dev
from .dtypes import DEFAULT_INDEX_DTYPE
from .errors import StorageTypeError
from .ndarray import STYPES, CSRNDArray, NDArray, RowSparseNDArray
from .ndarray.dense import CONVERSIONS

_NUMBA_VALUE_DTYPES = frozenset(np.dtype(t) for t in ("float32", "float64", "int32", "int64"))


def _numba_ok(device: Any, *arrays: Any) -> bool:
    """Whether the numba cpu kernels serve these arrays: on the cpu (a simulated gpu's memory
    is NumPy too, but its calls take the gpu's path) and of their dtypes."""
    return device.device_type == "cpu" and all(a.dtype in _NUMBA_VALUE_DTYPES for a in arrays)


def _bits(a: np.ndarray) -> np.ndarray:
    """float16 viewed as uint16 (numba has no cpu float16); a plain copy of bits is exact."""
    return a.view(np.uint16) if a.dtype == np.float16 else a


def cast_storage(x: NDArray, stype: str) -> NDArray:
    """A new container with the values of ``x`` in storage type ``stype``."""
    if stype not in STYPES:
        raise StorageTypeError(f"cast_storage (tostype): unknown storage type {stype!r} (argument stype); expected one of {STYPES}")
    if x.stype == stype:
        return x.copy()
    return _CASTS[(x.stype, stype)](x)


# ---- to dense ----------------------------------------------------------------------------
def densify_into(x: NDArray, out: Any) -> None:
    """Write the dense values of sparse ``x`` into the existing array ``out`` (same shape)."""
    xp = x.device.xp
    if x.stype == "csr":
        on_cpu = x.device.device_type == "cpu"
        if _numba_ok(x.device, x.data) or (on_cpu and x.dtype == np.float16 and out.dtype == x.dtype):
            if out.dtype == x.dtype and out.flags.c_contiguous:
                from .kernels.convert import csr_clear_scatter_row

                csr_clear_scatter_row(None, x.shape[0], x.indptr, x.indices, _bits(x.data), _bits(out),
                                      work=out.size)
                return
        out[...] = 0
        rows = _csr_row_ids(x, xp)
        out[rows, x.indices] = x.data
    else:
        out[...] = 0
        out[x.indices] = x.data


def _csr_to_dense(x: CSRNDArray) -> NDArray:
    xp = x.device.xp
    with _dev.allocating_on(x.device):
        out = xp.zeros(x.shape, dtype=x.dtype)
    if x.device.device_type == "cpu":
        from .kernels.convert import csr_scatter_row

        csr_scatter_row(None, x.shape[0], x.indptr, x.indices, _bits(x.data), _bits(out), work=x.nnz)
    else:
        out[_csr_row_ids(x, xp), x.indices] = x.data
    return NDArray(out, x.device)


def _row_sparse_to_dense(x: RowSparseNDArray) -> NDArray:
    xp = x.device.xp
    with _dev.allocating_on(x.device):
        out = xp.zeros(x.shape, dtype=x.dtype)
    out[x.indices] = x.data
    return NDArray(out, x.device)


# ---- from dense --------------------------------------------------------------------------
def _dense_to_csr(x: NDArray) -> CSRNDArray:
    a = x.data
    if a.ndim != 2:
        raise ValueError(f"csr arrays are 2-d; cannot convert an array of shape {x.shape}")
    xp = x.device.xp
    rows, cols = a.shape
    with _dev.allocating_on(x.device):
        if _numba_ok(x.device, a):
            from .kernels.convert import count_row_nonzeros, fill_csr_row

            a = np.ascontiguousarray(a)
            counts = np.empty(rows, dtype=DEFAULT_INDEX_DTYPE)
            count_row_nonzeros(None, rows, a, counts, work=a.size)
            indptr = _indptr_from_counts(counts, xp)
            nnz = int(indptr[-1])
            indices = np.empty(nnz, dtype=DEFAULT_INDEX_DTYPE)
            data = np.empty(nnz, dtype=a.dtype)
            fill_csr_row(None, rows, a, indptr, indices, data, work=a.size)
        else:
            mask = a != 0
            indptr = _indptr_from_counts(mask.sum(axis=1), xp)
            _, indices = xp.nonzero(mask)  # of a 2-d mask: strided views of one (nnz, 2) array
            indices = xp.ascontiguousarray(indices, dtype=DEFAULT_INDEX_DTYPE)
            data = a[mask]
    return CSRNDArray._trusted(data, indices, indptr, (rows, cols), x.device)


def _dense_to_row_sparse(x: NDArray) -> RowSparseNDArray:
    a = x.data
    if a.ndim < 1:
        raise ValueError("row_sparse arrays have at least one dimension; got a 0-d array")
    xp = x.device.xp
    rows = a.shape[0]
    flat = a.reshape(rows, int(np.prod(a.shape[1:], dtype=np.int64)))
    with _dev.allocating_on(x.device):
        keep = xp.nonzero((flat != 0).any(axis=1))[0].astype(DEFAULT_INDEX_DTYPE, copy=False)
    return RowSparseNDArray._trusted(a[keep], keep, x.shape, x.device)


# ---- between sparse types ----------------------------------------------------------------
def _csr_to_row_sparse(x: CSRNDArray) -> RowSparseNDArray:
    xp = x.device.xp
    with _dev.allocating_on(x.device):
        nonempty = xp.diff(x.indptr) > 0
        keep = xp.nonzero(nonempty)[0].astype(x.indices.dtype, copy=False)
        values = xp.zeros((keep.shape[0], x.shape[1]), dtype=x.dtype)
        slot = xp.cumsum(nonempty) - 1  # position of each kept row in ``keep``
        values[slot[_csr_row_ids(x, xp)], x.indices] = x.data
    return RowSparseNDArray._trusted(values, keep, x.shape, x.device)


def _row_sparse_to_csr(x: RowSparseNDArray) -> CSRNDArray:
    if x.ndim != 2:
        raise ValueError(f"csr arrays are 2-d; cannot convert a row_sparse array of shape {x.shape}")
    xp = x.device.xp
    with _dev.allocating_on(x.device):
        mask = x.data != 0
        counts = xp.zeros(x.shape[0], dtype=np.int64)
        counts[x.indices] = mask.sum(axis=1)
        indptr = _indptr_from_counts(counts, xp)
        _, cols = xp.nonzero(mask)
        idx_dtype = _result_index_dtype(x.indices.dtype, int(indptr[-1]), x.shape)
    return CSRNDArray._trusted(x.data[mask], xp.ascontiguousarray(cols, dtype=idx_dtype),
                               indptr.astype(idx_dtype, copy=False), x.shape, x.device)


# ---- helpers -------------------------------------------------------------------------------
def _result_index_dtype(source: np.dtype, nnz: int, shape: tuple[int, ...]) -> np.dtype:
    """Keep the source's index dtype unless int32 cannot hold the result's indices."""
    if source == np.int32 and max(nnz, *shape) <= np.iinfo(np.int32).max:
        return np.dtype(np.int32)
    return DEFAULT_INDEX_DTYPE


def _indptr_from_counts(counts: Any, xp: Any) -> Any:
    indptr = xp.zeros(counts.shape[0] + 1, dtype=DEFAULT_INDEX_DTYPE)
    xp.cumsum(counts, out=indptr[1:])
    return indptr


def _csr_row_ids(x: CSRNDArray, xp: Any) -> Any:
    """The row of each stored value (``sparse_ops.sdk.csr.row_ids`` on x's device)."""
    from .sdk.csr import row_ids

    return row_ids(x.device, x.indptr)


def on_structure(g: NDArray, x: CSRNDArray) -> CSRNDArray:
    """The values of ``g`` (any storage type, x's shape) at the stored entries of csr ``x``,
    as a csr of x's structure (index arrays shared; zero where ``g`` stores nothing): the
    gradient of a csr variable's stored values, whatever storage type the rules gave."""
    xp = x.device.xp
    rows, cols = _csr_row_ids(x, xp), x._indices
    if g.stype == "csr" and g._indices is x._indices and g._indptr is x._indptr:
        values = g._data
    elif g.stype == "default":
        values = g._data[rows, cols]
    elif g.stype == "row_sparse":
        pos = xp.searchsorted(g._indices, rows).clip(0, max(g._indices.shape[0] - 1, 0))
        hit = g._indices[pos] == rows if g._indices.shape[0] else xp.zeros(rows.shape, dtype=bool)
        values = xp.where(hit, g._data[pos, cols] if g._indices.shape[0] else 0, 0)
    else:  # another csr structure: merge the two (row, column) lists, x's entries before g's on ties
        g_rows = _csr_row_ids(g, xp)
        n = cols.shape[0]
        order = xp.lexsort((xp.concatenate((xp.zeros(n, np.int8), xp.ones(g_rows.shape[0], np.int8))),
                            xp.concatenate((cols, g._indices)), xp.concatenate((rows, g_rows))))
        after = xp.concatenate((order[1:], xp.asarray([-1], dtype=order.dtype)))
        mine = order < n  # sorted positions holding x's entries; the next one is g's same entry, if any
        nxt = after[mine]
        same = nxt >= n
        other = xp.where(same, nxt - n, 0)
        same &= (g_rows[other] == rows[order[mine]]) & (g._indices[other] == cols[order[mine]]) \
            if g_rows.shape[0] else same
        values = xp.zeros(n, dtype=g.dtype)
        if g_rows.shape[0]:
            values[order[mine]] = xp.where(same, g._data[other], 0)
    return CSRNDArray._trusted(xp.ascontiguousarray(values).astype(x.dtype, copy=False), x._indices, x._indptr,
                               x.shape, x._device)


_CASTS = {
    ("csr", "default"): _csr_to_dense,
    ("row_sparse", "default"): _row_sparse_to_dense,
    ("default", "csr"): _dense_to_csr,
    ("default", "row_sparse"): _dense_to_row_sparse,
    ("csr", "row_sparse"): _csr_to_row_sparse,
    ("row_sparse", "csr"): _row_sparse_to_csr,
}


CONVERSIONS.update(cast_storage=cast_storage, densify_into=densify_into)
