"""numba.cuda kernels of the built-in operators, and the host code that launches them.

Imported lazily, by the gpu kernel methods of ``sparse_ops.ops`` on their first call:
importing this module imports ``numba.cuda`` (``import sparse_ops`` must not).

Every kernel takes CuPy arrays on a real GPU (through ``__cuda_array_interface__``, no
copies) and NumPy arrays under numba's CUDA simulator (``SPARSE_OPS_CUDA_SIM=1``) alike,
and every driver below is written against the op context's array module ``ctx.xp``, so
the code the simulator runs is the code a GPU runs. Grids come from
``sparse_ops.sdk.launch`` and kernels start on the context's CuPy stream
(``sdk.launch.launch``). Prefix sums are ``xp.cumsum``.

Conventions: values arrive widened where the GPU path needs it (float16 -> float32, by
the caller); index arrays are int32 or int64 and are never written; results get the
index dtype the caller asks for. Accumulators start from a zero of the values' dtype,
passed in as ``zero``, so float32 products add in float32 on the GPU (a literal ``0.0``
would make numba accumulate in float64: slow on most GPUs and a different result).

Kernels here:

- ``merge_count`` / ``merge_fill``: row-wise union (add, sub) or intersection (mul) of
  two canonical csr matrices, one thread per row: count, prefix sum, fill.
- ``count_columns``, ``expand_rows``: the pieces of the csr transpose (see
  ``csr_transpose`` for why it is a transpose and not atomics).
- ``csr_dense`` / ``csr_dense_slots``: ``A @ b`` for csr A and row-major dense b, a group
  of ``lanes`` threads per row striding over b's columns (a warp per row when b has 32
  columns or more); ``_slots`` reads b through a row map (csr @ row_sparse).
- ``gather_rows``: the csr of chosen rows of a csr matrix, one thread per chosen row.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda

from ..sdk.launch import WARP_SIZE, grid_for, launch, rows_grid

ADD, SUB, MUL = 0, 1, 2
BLOCK = 256  # threads per block (grid_for shrinks it to the work)

# True sends csr @ dense with float32/float64 values to cuSPARSE (through cupyx.scipy.sparse)
# instead of ``csr_dense``. Off by default: on an H200, ``csr_dense`` was as fast or faster in
# all nine shapes of benchmarks/bench_gpu_sweep.py (results/gpu_sweep.md); going through cupyx
# costs a matrix object, cupyx's F-order round trip and a copy into ``out`` on every call.
USE_CUSPARSE = False


# ---- merging two csr matrices ---------------------------------------------------------------------
@cuda.jit
def merge_count(a_ptr, a_idx, b_ptr, b_idx, union, counts):
    """counts[r] = size of the union (``union`` = 1) or intersection (0) of row r's columns."""
    r = cuda.grid(1)
    if r >= counts.shape[0]:
        return
    i, i_end = a_ptr[r], a_ptr[r + 1]
    j, j_end = b_ptr[r], b_ptr[r + 1]
    c = 0
    while i < i_end and j < j_end:
        if a_idx[i] == b_idx[j]:
            c += 1
            i += 1
            j += 1
        elif a_idx[i] < b_idx[j]:
            c += union
            i += 1
        else:
            c += union
            j += 1
    if union:
        c += (i_end - i) + (j_end - j)
    counts[r] = c


@cuda.jit
def merge_fill(a_ptr, a_idx, a_val, b_ptr, b_idx, b_val, op, out_ptr, out_idx, out_val):
    """Row r of a op b (``ADD``, ``SUB``, ``MUL``) into out[out_ptr[r]:out_ptr[r + 1]]."""
    r = cuda.grid(1)
    if r >= out_ptr.shape[0] - 1:
        return
    union = op != MUL
    i, i_end = a_ptr[r], a_ptr[r + 1]
    j, j_end = b_ptr[r], b_ptr[r + 1]
    p = out_ptr[r]
    while i < i_end and j < j_end:
        ca, cb = a_idx[i], b_idx[j]
        if ca == cb:
            out_idx[p] = ca
            if op == ADD:
                out_val[p] = a_val[i] + b_val[j]
            elif op == SUB:
                out_val[p] = a_val[i] - b_val[j]
            else:
                out_val[p] = a_val[i] * b_val[j]
            p += 1
            i += 1
            j += 1
        elif ca < cb:
            if union:
                out_idx[p] = ca
                out_val[p] = a_val[i]
                p += 1
            i += 1
        else:
            if union:
                out_idx[p] = cb
                out_val[p] = -b_val[j] if op == SUB else b_val[j]
                p += 1
            j += 1
    if union:
        while i < i_end:
            out_idx[p] = a_idx[i]
            out_val[p] = a_val[i]
            p += 1
            i += 1
        while j < j_end:
            out_idx[p] = b_idx[j]
            out_val[p] = -b_val[j] if op == SUB else b_val[j]
            p += 1
            j += 1


# ---- transposing -----------------------------------------------------------------------------------
@cuda.jit
def count_columns(indices, counts):
    """counts[c] += occurrences of column c (one thread per stored value; integer atomics,
    so the counts do not depend on the order the threads run in)."""
    j = cuda.grid(1)
    if j < indices.shape[0]:
        cuda.atomic.add(counts, indices[j], 1)


@cuda.jit
def expand_rows(indptr, row_of):
    """row_of[j] = the row of stored value j (one thread per row)."""
    r = cuda.grid(1)
    if r < indptr.shape[0] - 1:
        for j in range(indptr[r], indptr[r + 1]):
            row_of[j] = r


@cuda.jit
def gather_rows(indptr, indices, values, rows, new_ptr, out_idx, out_val):
    """Copy row ``rows[s]`` of a csr matrix to out[new_ptr[s]:new_ptr[s + 1]]."""
    s = cuda.grid(1)
    if s < rows.shape[0]:
        r = rows[s]
        src, dst = indptr[r], new_ptr[s]
        for t in range(indptr[r + 1] - src):
            out_idx[dst + t] = indices[src + t]
            out_val[dst + t] = values[src + t]


# ---- csr @ dense -----------------------------------------------------------------------------------
@cuda.jit
def csr_dense(indptr, indices, values, b, lanes, zero, out):
    """out = A @ b, csr A (m x k), dense b (k x n). Thread t serves row t // lanes and the
    columns lane, lane + lanes, ... (lane = t % lanes): a group of ``lanes`` threads per
    row, its reads of b's rows coalesced; lanes is a power of two up to a warp."""
    t = cuda.grid(1)
    row, lane = t // lanes, t % lanes
    if row >= out.shape[0]:
        return
    start, end = indptr[row], indptr[row + 1]
    for c in range(lane, out.shape[1], lanes):
        acc = zero
        for j in range(start, end):
            acc += values[j] * b[indices[j], c]
        out[row, c] = acc


@cuda.jit
def csr_dense_slots(indptr, indices, values, slot, b, lanes, zero, out):
    """out = A @ B where B's row l is b[slot[l]], or zero when slot[l] < 0 (B is a
    row_sparse matrix: b holds its stored rows); the layout of ``csr_dense``."""
    t = cuda.grid(1)
    row, lane = t // lanes, t % lanes
    if row >= out.shape[0]:
        return
    start, end = indptr[row], indptr[row + 1]
    for c in range(lane, out.shape[1], lanes):
        acc = zero
        for j in range(start, end):
            s = slot[indices[j]]
            if s >= 0:
                acc += values[j] * b[s, c]
        out[row, c] = acc


# ---- drivers ---------------------------------------------------------------------------------------
def _lanes(columns: int) -> int:
    """Threads per output row: the smallest power of two covering the columns, at most a warp."""
    lanes = 1
    while lanes < columns and lanes < WARP_SIZE:
        lanes *= 2
    return lanes


def _zero(values: Any) -> Any:
    return values.dtype.type(0)


def _prefix(xp: Any, counts: Any, dtype: Any) -> Any:
    """indptr (len(counts) + 1, ``dtype``) from per-row counts."""
    indptr = xp.zeros(counts.shape[0] + 1, dtype=dtype)
    if counts.shape[0]:
        indptr[1:] = xp.cumsum(counts)
    return indptr


def csr_merge(ctx: Any, a: tuple, b: tuple, op: int, index_dtype: Any) -> tuple[Any, Any, Any]:
    """(values, indices, indptr) of the row-wise union (``ADD``, ``SUB``) or intersection
    (``MUL``) of canonical csr matrices given as (indptr, indices, values), same shape,
    values of one dtype."""
    xp = ctx.xp
    (a_ptr, a_idx, a_val), (b_ptr, b_idx, b_val) = a, b
    rows = a_ptr.shape[0] - 1
    counts = xp.zeros(rows, dtype=np.int64)
    if rows:
        launch(ctx, merge_count, rows_grid(rows, BLOCK), a_ptr, a_idx, b_ptr, b_idx, int(op != MUL), counts)
    indptr = _prefix(xp, counts, index_dtype)
    nnz = int(indptr[-1])
    indices = xp.empty(nnz, dtype=index_dtype)
    values = xp.empty(nnz, dtype=a_val.dtype)
    if nnz:
        launch(ctx, merge_fill, rows_grid(rows, BLOCK), a_ptr, a_idx, a_val, b_ptr, b_idx, b_val, op,
               indptr, indices, values)
    return values, indices, indptr


def csr_transpose(ctx: Any, parts: tuple, columns: int, index_dtype: Any = None) -> tuple[tuple, Any]:
    """((indptr, indices, values) of A.T, stored values per column of A) for csr A given as
    (indptr, indices, values) with ``columns`` columns; A.T is canonical (its rows list
    A's rows in order). Index dtype: ``index_dtype``, else A's.

    A counting sort by column: column counts (``count_columns``) and their prefix sum give
    A.T's indptr, and the values move to their slots in a stable order by column. That
    order comes from a stable argsort (CuPy's always is: a radix sort, itself a chain of
    stable counting sorts). Scattering with one atomic cursor per column would be one
    pass too, but would store each column's values in whatever order the threads ran:
    A.T would not be canonical, and the sums of the products below would differ from
    run to run.
    """
    xp = ctx.xp
    indptr, indices, values = parts
    nnz, rows = indices.shape[0], indptr.shape[0] - 1
    idt = np.dtype(index_dtype or indices.dtype)
    if rows > np.iinfo(idt).max:  # A.T's indices are A's row numbers
        idt = np.dtype(np.int64)
    counts = xp.zeros(columns, dtype=np.int64)
    row_of = xp.empty(nnz, dtype=idt)
    if nnz:
        launch(ctx, count_columns, grid_for(nnz, BLOCK), indices, counts)
        launch(ctx, expand_rows, rows_grid(rows, BLOCK), indptr, row_of)
    t_ptr = _prefix(xp, counts, idt)
    order = xp.argsort(indices, kind="stable") if xp is np else xp.argsort(indices)  # CuPy's is stable
    return (t_ptr, row_of[order], values[order]), counts


def take_rows(ctx: Any, parts: tuple, rows: Any) -> tuple:
    """csr parts of the rows ``rows`` (in that order) of the csr ``parts``."""
    xp = ctx.xp
    indptr, indices, values = parts
    new_ptr = _prefix(xp, indptr[rows + 1] - indptr[rows], indptr.dtype)
    nnz = int(new_ptr[-1])
    out_idx = xp.empty(nnz, dtype=indices.dtype)
    out_val = xp.empty(nnz, dtype=values.dtype)
    if nnz:
        launch(ctx, gather_rows, rows_grid(rows.shape[0], BLOCK), indptr, indices, values, rows, new_ptr,
               out_idx, out_val)
    return new_ptr, out_idx, out_val


def _cusparse_product(xp: Any, parts: tuple, b: Any, out: Any) -> bool:
    """out = A @ b with cuSPARSE when on CuPy with float32/float64 values whose indices fit
    int32 (cupyx.scipy.sparse's index type); False when it does not apply."""
    indptr, indices, values = parts
    if (not USE_CUSPARSE or xp is np or values.dtype not in (np.float32, np.float64)
            or max(indices.shape[0], out.shape[0], b.shape[0]) > np.iinfo(np.int32).max):
        return False
    try:
        import cupyx.scipy.sparse as cusparse
    except ImportError:
        return False
    a = cusparse.csr_matrix((values, indices.astype(np.int32, copy=False), indptr.astype(np.int32, copy=False)),
                            shape=(out.shape[0], b.shape[0]))
    a.has_canonical_format = True  # our csr always is; spares cupyx a check and a device sync per call
    out[...] = a @ b
    return True


def csr_times_dense(ctx: Any, parts: tuple, b: Any, out: Any) -> Any:
    """out = A @ b for csr A given as (indptr, indices, values) and dense 2-d b of the
    values' dtype (row-major reads coalesce best); ``out`` (rows x b's columns) is
    written whole and returned."""
    rows, n = out.shape
    if rows == 0 or n == 0:
        return out
    indptr, indices, values = parts
    if _cusparse_product(ctx.xp, parts, b, out):
        return out
    lanes = _lanes(n)
    launch(ctx, csr_dense, grid_for(rows * lanes, BLOCK), indptr, indices, values, b, lanes,
           _zero(values), out)
    return out


def csr_times_row_sparse(ctx: Any, parts: tuple, stored: Any, stored_rows: Any, inner: int, out: Any) -> Any:
    """out = A @ R for csr A and a row_sparse R of ``inner`` rows whose stored rows
    ``stored_rows`` hold the dense 2-d ``stored``; only A's columns at stored rows count."""
    xp = ctx.xp
    rows, n = out.shape
    if rows == 0 or n == 0:
        return out
    slot = xp.full(inner, -1, dtype=np.int64)
    slot[stored_rows] = xp.arange(stored_rows.shape[0], dtype=np.int64)
    indptr, indices, values = parts
    lanes = _lanes(n)
    launch(ctx, csr_dense_slots, grid_for(rows * lanes, BLOCK), indptr, indices, values, slot, stored, lanes,
           _zero(values), out)
    return out


def csr_t_times_dense(ctx: Any, parts: tuple, columns: int, b: Any) -> tuple[Any, Any]:
    """(stored columns, product) of A.T @ b for csr A (``columns`` columns) and dense 2-d
    b: the product is zero outside the columns A stores, so it is computed for those only
    (their rows of A.T, each a row-wise product: no two threads write one output).
    Stored columns are sorted, of A's index dtype."""
    xp = ctx.xp
    indptr, indices, values = parts
    (t_ptr, t_idx, t_val), counts = csr_transpose(ctx, parts, columns)
    stored = xp.flatnonzero(counts).astype(indices.dtype, copy=False)
    # A.T without its empty rows: an empty row starts where the next one does
    compact_ptr = xp.empty(stored.shape[0] + 1, dtype=t_ptr.dtype)
    compact_ptr[:-1] = t_ptr[stored]
    compact_ptr[-1] = indices.shape[0]
    product = xp.empty((stored.shape[0], b.shape[1]), dtype=values.dtype)
    csr_times_dense(ctx, (compact_ptr, t_idx, t_val), b, product)
    return stored, product


__all__ = ["ADD", "SUB", "MUL", "USE_CUSPARSE", "csr_merge", "csr_transpose", "take_rows",
           "csr_times_dense", "csr_times_row_sparse", "csr_t_times_dense"]
