"""What the recipes share: dtype rules, the kernels module of a device, dense operands,
and the transpose-then-multiply step several gradients use."""
from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

import sparse_ops as so
from sparse_ops.sdk import csr

BOTH = ("cpu", "gpu")
FLOATS = (np.dtype("float32"), np.dtype("float64"))


def backend(ctx: so.OpContext) -> ModuleType:
    """The recipes' kernels module (``kernels.rows``): one body per kernel, which the SDK
    runs with numba on the cpu and numba.cuda on a gpu, so a kernel method is written
    once and registered for both devices. Imported here, lazily, so that
    ``import sparse_ops_cookbook`` compiles nothing."""
    from .kernels import rows

    return rows


def check_floats(**dtypes: np.dtype) -> np.dtype:
    """The one float dtype (float32 or float64) the named inputs share; TypeError otherwise."""
    for name, dt in dtypes.items():
        if dt not in FLOATS:
            raise TypeError(f"{name} must be float32 or float64, got {np.dtype(dt).name}")
    names = list(dtypes)
    first = dtypes[names[0]]
    for name in names[1:]:
        if dtypes[name] != first:
            raise TypeError(f"{names[0]} and {name} must share one dtype, got "
                            f"{first.name} and {dtypes[name].name}")
    return first


def matrix(name: str, shape: tuple) -> tuple[Any, Any]:
    """``shape`` as (rows, columns); ValueError unless it is 2-d. The sizes are returned as
    given, not turned into ints: under ``torch.compile`` they may be symbolic, and a shape
    rule that made them concrete would compile the model again for every batch size."""
    if len(shape) != 2:
        raise ValueError(f"{name} must be 2-d, got shape {tuple(shape)}")
    return shape[0], shape[1]


def dense_operand(ctx: so.OpContext, x: so.NDArray) -> Any:
    """The values of container ``x`` as a C-contiguous dense array of the device's module
    (one numba specialisation per dtype; a row_sparse operand is scattered into zeros)."""
    xp = ctx.xp
    if x.stype == "default":
        return xp.ascontiguousarray(x.data)
    if x.stype == "row_sparse":
        dense = xp.zeros(x.shape, dtype=x.dtype)
        dense[x.indices] = x.data
        return dense
    with so.autograd.pause():  # a conversion inside a kernel is no step of the user's graph
        return xp.ascontiguousarray(x.tostype("default").data)


def transpose_parts(ctx: so.OpContext, n_cols: int, indptr: Any, indices: Any, data: Any) -> tuple:
    """(indptr, indices, data) of the transpose of a csr with ``n_cols`` columns (index
    arrays read-only, like a container's)."""
    return csr.transpose(ctx, n_cols, indptr, indices, data)


def _read_only(*arrays: Any) -> tuple[Any, ...]:
    """Mark host index arrays read-only, as the csr primitives return them (numba then
    compiles one kernel for both); CuPy arrays have no such flag."""
    for a in arrays:
        if isinstance(a, np.ndarray):
            a.flags.writeable = False
    return arrays


def stored_columns_transpose(ctx: so.OpContext, a: so.CSRNDArray) -> tuple:
    """(the columns of csr A storing a value, and the csr of A.T keeping only those rows:
    indptr, indices, data), each row listing A's rows in increasing order (as
    ``transpose_parts`` does, so sums run in the same order either way).

    A wide A (an embedding table's ids: many more columns than stored values) has its
    stored values grouped by column instead (``csr.group_columns``: O(nnz) on the host): a
    transpose over every column would allocate and scan arrays as long as the vocabulary
    for a few stored values."""
    nnz, n_cols = a.indices.shape[0], a.shape[1]
    if not (0 < nnz and n_cols > 4 * nnz):
        t_indptr, t_indices, t_data = transpose_parts(ctx, n_cols, a.indptr, a.indices, a.data)
        return (*backend(ctx).nonempty_rows(ctx, t_indptr), t_indices, t_data)
    rows, starts, order = csr.group_columns(ctx, a.indices, n_cols)
    idt = a.indices.dtype if a.shape[0] <= np.iinfo(a.indices.dtype).max else np.dtype(np.int64)  # row numbers
    t_indices = csr.row_ids(ctx, a.indptr)[order].astype(idt, copy=False)
    return (*_read_only(rows, starts.astype(idt, copy=False), t_indices), a.data[order])


def spmm_t(ctx: so.OpContext, a: so.CSRNDArray, g: Any, out: so.NDArray) -> None:
    """out = A.T @ g for csr A and dense g: dense, or row_sparse holding A's non-empty
    columns. A is transposed once (a counting sort; for a row_sparse result of a wide A a
    sort of its stored values, ``stored_columns_transpose``), then multiplied row by row:
    no atomics, the same summation order on every run and on both devices."""
    k = backend(ctx)
    if out.stype == "default":
        t_indptr, t_indices, t_data = transpose_parts(ctx, a.shape[1], a.indptr, a.indices, a.data)
        k.spmm(ctx, t_indptr, t_indices, t_data, g, False, out.data)
        return
    rows, c_indptr, t_indices, t_data = stored_columns_transpose(ctx, a)
    values, idx = ctx.alloc_row_sparse(out, rows.shape[0], index_dtype=a.indices.dtype)
    idx[...] = rows
    k.spmm(ctx, c_indptr, t_indices, t_data, g, False, values)


def sample_values(ctx: so.OpContext, a: so.CSRNDArray, h: so.NDArray, out: Any) -> None:
    """Write the values of ``h`` (any storage type, A's shape) at the positions A stores
    into ``out`` (one value per stored position of A; 0 where a sparse h stores none)."""
    xp = ctx.xp
    k = backend(ctx)
    if h.stype == "csr":
        if h.nnz == a.nnz and xp.array_equal(h.indptr, a.indptr) and xp.array_equal(h.indices, a.indices):
            out[...] = h.data  # already on A's structure (the usual head gradient)
        else:
            k.gather_csr(ctx, a.indptr, a.indices, h.indptr, h.indices, h.data, out)
    else:
        k.gather_dense(ctx, a.indptr, a.indices, dense_operand(ctx, h), out)
