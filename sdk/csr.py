"""The csr primitives, once for the whole project and both devices: row ids, transpose,
csr @ dense, segment sums, row gathers.

Every function takes the op context ``ctx`` first (or a device; None: the cpu) and the
csr matrix as its component arrays (``indptr``, ``indices``, ``data``), and writes into
arrays the caller allocated unless it says it returns new ones. The per-row work is
``sparse_ops.sdk.rowkernel`` bodies, so the cpu (numba, serial or ``prange`` by the one
size policy) and the gpu (numba.cuda, on the context's stream) run the same source.
Index arrays these functions return are read-only, as a container's index views are, so a
kernel that reads both meets one array type and numba compiles it once.
The built-ins (``sparse_ops.ops``, ``sparse_ops.kernels``), the gpu backend
(``sparse_ops.cuda``) and the cookbook use these; this module imports none of them.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .rowkernel import is_gpu, parallel_worth, row_kernel

PLAIN, SQUARE, ABS = 0, 1, 2  # the value transforms of ``segment_sum``


def _xp(ctx: Any) -> Any:
    return np if ctx is None else ctx.xp


def _frozen(*arrays: Any) -> tuple[Any, ...]:
    """Mark new host index arrays read-only (CuPy arrays have no such flag)."""
    for a in arrays:
        if isinstance(a, np.ndarray):
            a.flags.writeable = False
    return arrays


# ---- row ids ---------------------------------------------------------------------------------------
@row_kernel(lanes=True)
def _row_ids_row(r, lane, lanes, indptr, out):
    for p in range(indptr[r] + lane, indptr[r + 1], lanes):
        out[p] = r


def row_ids(ctx: Any, indptr: Any, out: Any = None) -> Any:
    """The row of each stored value (``indptr`` expanded), into ``out`` (new, of indptr's
    dtype, when None); returned."""
    if out is None:
        out = _xp(ctx).empty(int(indptr[-1]), dtype=indptr.dtype)
    _row_ids_row(ctx, indptr.shape[0] - 1, indptr, out, work=out.shape[0])
    return out


# ---- transpose -------------------------------------------------------------------------------------
_counting_sort: Any = None


def _counting_sort_kernel() -> Any:
    """The cpu transpose: one serial counting sort by column (compiled on first use)."""
    global _counting_sort
    if _counting_sort is None:
        from sparse_ops.kernels import jit

        @jit()
        def counting_sort(n_cols, indptr, indices, data, out_indptr, out_indices, out_data):
            # out_indptr holds counts, then each column's next free slot, then is shifted into indptr
            cursor = out_indptr
            cursor[:] = 0
            for p in range(indices.shape[0]):
                cursor[indices[p] + 1] += 1
            for c in range(n_cols):
                cursor[c + 1] += cursor[c]
            for r in range(indptr.shape[0] - 1):  # rows in order: each output row comes out sorted
                for p in range(indptr[r], indptr[r + 1]):
                    c = indices[p]
                    q = cursor[c]
                    out_indices[q] = r
                    out_data[q] = data[p]
                    cursor[c] = q + 1
            for c in range(n_cols, 0, -1):  # cursor[c] is now where column c + 1 starts
                cursor[c] = cursor[c - 1]
            cursor[0] = 0

        _counting_sort = counting_sort
    return _counting_sort


def transpose_into(ctx: Any, n_cols: int, indptr: Any, indices: Any, data: Any,
                   out_indptr: Any, out_indices: Any, out_data: Any) -> None:
    """Write the csr of the transpose of a canonical csr with ``n_cols`` columns into the
    out arrays (``n_cols + 1``, nnz, nnz entries). The result is canonical: each output row
    lists its source rows in increasing order, on both devices.

    cpu: a counting sort by column (serial: one pass, memory bound). gpu: counts per
    column and their prefix sum give the indptr; a stable sort of the column indices
    (CuPy's radix sort) orders the row ids and values. Deterministic, with no atomics and
    no row too long for it (a one-thread-per-row sort would stall on a hub column)."""
    if not is_gpu(ctx):
        _counting_sort_kernel()(n_cols, indptr, indices, data, out_indptr, out_indices, out_data)
        return
    xp = ctx.xp
    out_indptr[0] = 0
    if n_cols:
        xp.cumsum(xp.bincount(indices, minlength=n_cols), out=out_indptr[1:])
    if indices.shape[0]:
        rows = row_ids(ctx, indptr, xp.empty(indices.shape[0], dtype=out_indices.dtype))
        order = xp.argsort(indices, kind="stable")
        xp.take(rows, order, out=out_indices)
        xp.take(data, order, out=out_data)


def transpose(ctx: Any, n_cols: int, indptr: Any, indices: Any, data: Any,
              index_dtype: Any = None) -> tuple[Any, Any, Any]:
    """(indptr, indices, data) of the transpose (new arrays; see ``transpose_into``).
    Index dtype: ``index_dtype``, else the source's (int64 when the row count needs it)."""
    xp = _xp(ctx)
    idt = np.dtype(index_dtype or indices.dtype)
    if indptr.shape[0] - 1 > np.iinfo(idt).max:  # the transpose's indices are row numbers
        idt = np.dtype(np.int64)
    out = (xp.empty(n_cols + 1, dtype=idt), xp.empty(indices.shape[0], dtype=idt),
           xp.empty(data.shape[0], dtype=data.dtype))
    transpose_into(ctx, n_cols, indptr, indices, data, *out)
    return (*_frozen(out[0], out[1]), out[2])


def nonempty_rows(ctx: Any, indptr: Any) -> tuple[Any, Any]:
    """(rows holding a stored value, the indptr of the csr keeping only those rows).

    Empty rows own no stored values, so dropping them only drops indptr entries: the
    indices and values arrays are shared unchanged."""
    xp = _xp(ctx)
    rows = xp.flatnonzero(indptr[1:] != indptr[:-1])
    return _frozen(rows, xp.concatenate((indptr[rows], indptr[-1:])).astype(indptr.dtype, copy=False))


# ---- csr @ dense -----------------------------------------------------------------------------------
@row_kernel(lanes=True)
def _csr_dense_row(i, lane, lanes, indptr, indices, data, b, out):
    # Two stored values at a time: each pass over the output row does two multiply-adds
    # (fewer loads and stores of ``out``). On a gpu the lanes stride over the columns.
    n = b.shape[1]
    for c in range(lane, n, lanes):
        out[i, c] = 0
    j, end = indptr[i], indptr[i + 1]
    while j + 1 < end:
        c0, v0 = indices[j], data[j]
        c1, v1 = indices[j + 1], data[j + 1]
        for c in range(lane, n, lanes):
            out[i, c] += v0 * b[c0, c] + v1 * b[c1, c]
        j += 2
    if j < end:
        c0, v0 = indices[j], data[j]
        for c in range(lane, n, lanes):
            out[i, c] += v0 * b[c0, c]


@row_kernel(lanes=True)
def _mean_row(i, lane, lanes, indptr, out):
    # apart from the product, and in the values' dtype (a float32 row divides in float32)
    count = indptr[i + 1] - indptr[i]
    if count > 0:
        scale = out.dtype.type(1.0) / out.dtype.type(count)
        for c in range(lane, out.shape[1], lanes):
            out[i, c] *= scale


def csr_dense(ctx: Any, indptr: Any, indices: Any, data: Any, b: Any, out: Any, mean: bool = False) -> Any:
    """out = A @ b for csr A (m x k) and row-major dense b (k x n), accumulated in out's
    dtype; with ``mean`` each row is then divided by its stored count (empty rows give
    zeros). ``out`` (m x n) is written whole and returned.

    The gpu runs the row body above (a warp a row); the cpu runs ``sdk.csr_cpu``'s kernel
    (sums held in vector registers, work split by stored values: see there), which computes
    the same sums up to fused multiply-adds, serial or parallel by ``parallel_worth``."""
    rows = out.shape[0]
    if rows and out.shape[1]:
        work = indices.shape[0] * b.shape[1]
        if is_gpu(ctx):
            _csr_dense_row(ctx, rows, indptr, indices, data, b, out, work=work)
        else:
            from . import csr_cpu

            csr_cpu.csr_dense(indptr, indices, data, b, out, parallel_worth(work))
        if mean:
            _mean_row(ctx, rows, indptr, out, work=out.size)
    return out


def runs_csr_dense(mean: Callable[[Any], bool | None]) -> Callable[[Callable], Callable]:
    """Mark a cpu storage-aware kernel of inputs (csr A, dense X) whose whole work, when A
    and X share a float dtype, X is 2-d and the output dense, is ``csr_dense`` above.
    ``mean(op)`` tells from the op's parameters which form a call takes: the row means
    (True), the plain product (False), or neither (None: the kernel does something else for
    those parameters). A caller with no Python on its path (the JAX bridge's native FFI
    handler) then runs ``csr_dense``'s cpu kernel itself for the calls whose plan picks the
    kernel: the plan's choice, not a list of ops kept beside it."""
    def mark(fn: Callable) -> Callable:
        fn.csr_dense_mean = mean
        return fn

    return mark


# ---- segment sums ----------------------------------------------------------------------------------
@row_kernel
def _segment_sum_row(r, indptr, data, mode, out):
    acc = out[r]
    lo, hi = indptr[r], indptr[r + 1]
    if mode == 1:  # SQUARE
        for j in range(lo, hi):
            acc += data[j] * data[j]
    elif mode == 2:  # ABS
        for j in range(lo, hi):
            acc += abs(data[j])
    else:
        for j in range(lo, hi):
            acc += data[j]
    out[r] = acc


def segment_sum(ctx: Any, indptr: Any, data: Any, out: Any, mode: int = PLAIN) -> Any:
    """out[r] += sum of the (``PLAIN``, ``SQUARE``d or ``ABS``olute) values
    ``data[indptr[r]:indptr[r + 1]]``: the row sums of a csr matrix. ``out``'s dtype types
    the running sums (pass float64 to sum float32 values in float64). Returned."""
    _segment_sum_row(ctx, out.shape[0], indptr, data, int(mode), out, work=data.shape[0])
    return out


@row_kernel(lanes=True)
def _segment_sum_rows_row(u, lane, lanes, starts, order, values, dest_rows, dest):
    d = dest_rows[u]
    n = dest.shape[1]
    for c in range(lane, n, lanes):
        dest[d, c] = 0
    for k in range(starts[u], starts[u + 1]):
        src = order[k]
        for c in range(lane, n, lanes):
            dest[d, c] += values[src, c]


def segment_sum_rows(ctx: Any, starts: Any, order: Any, values: Any, dest_rows: Any, dest: Any) -> Any:
    """dest[dest_rows[u], :] = the sum of rows ``values[order[k], :]`` for k in
    [starts[u], starts[u + 1]), in dest's dtype: rows of a dense array summed by group (an
    embedding's gradient, its ids grouped by a counting sort). It is csr @ dense for the
    csr (``starts``, ``order``) of ones. Each group writes its own row, so there are no
    atomics and every row adds up in the order of ``order``, on both devices. Returned."""
    groups = starts.shape[0] - 1
    if groups and dest.shape[1]:
        _segment_sum_rows_row(ctx, groups, starts, order, values, dest_rows, dest,
                              work=order.shape[0] * dest.shape[1])
    return dest


def group_columns(ctx: Any, indices: Any, n_cols: int) -> tuple[Any, Any, Any]:
    """(columns, starts, order) of a csr's stored column ``indices`` (each in [0, n_cols);
    any such integer keys, an embedding's ids too): the distinct columns ascending, and the
    positions holding the u-th of them, ``order[starts[u]:starts[u + 1]]``, ascending (so
    by row): the rows of A.T that A stores, without a pass over all ``n_cols`` columns (a
    wide A: an embedding table's ids). O(nnz) on the host (``sdk.groups``: a hash table,
    then a radix sort of the distinct columns only), a stable sort on a gpu. Index arrays
    read-only on the host."""
    xp = _xp(ctx)
    n = indices.shape[0]
    if n == 0:
        return _frozen(xp.zeros(0, dtype=np.int64), xp.zeros(1, dtype=np.int64), xp.zeros(0, dtype=np.int64))
    if not is_gpu(ctx):
        from .groups import group_by_rank, rank_ids

        rank, columns, _ = rank_ids(indices, n_cols)
        order, starts = group_by_rank(rank, columns.shape[0])
        return _frozen(columns, starts, order)
    order = xp.argsort(indices, kind="stable")
    ranked = indices[order]
    first = xp.empty(n, dtype=bool)
    first[0] = True
    xp.not_equal(ranked[1:], ranked[:-1], out=first[1:])
    heads = xp.flatnonzero(first)
    starts = xp.empty(heads.shape[0] + 1, dtype=np.int64)
    starts[:-1] = heads
    starts[-1] = n
    return ranked[heads], starts, order


def index_add(ctx: Any, target: Any, index: Any, values: Any) -> Any:
    """``target[index[k]] += values[k]`` for every k (``index`` 1-d, into target's first axis,
    in range; repeated entries add up), each target row adding its values in the order of k,
    on either device: NumPy's ``add.at`` on the host; on a gpu the entries grouped by row (a
    stable sort) and each group summed by ``segment_sum_rows``, with no float atomics, so the
    same sums every run (into a target of zeros: the host's bits). ``target`` may be a view.
    Returned."""
    xp = _xp(ctx)
    if not is_gpu(ctx):
        np.add.at(target, index, values)
        return target
    m = index.shape[0]
    if m == 0:
        return target
    width = int(np.prod(target.shape[1:], dtype=np.int64))
    keys, starts, order = group_columns(ctx, index, target.shape[0])
    groups = keys.shape[0]
    rows = values.reshape(m, width)
    if rows.dtype == np.float16:  # summed in float32, as every float16 kernel here
        rows = rows.astype(np.float32)
    sums = xp.empty((groups, width), dtype=np.float32 if target.dtype == np.float16 else target.dtype)
    segment_sum_rows(ctx, starts, order, rows, xp.arange(groups), sums)
    target[keys] += sums.reshape((groups,) + tuple(target.shape[1:])).astype(target.dtype, copy=False)
    return target


# ---- row gathers -----------------------------------------------------------------------------------
@row_kernel
def _gather_rows_row(s, indptr, indices, data, rows, new_ptr, out_indices, out_data):
    r = rows[s]
    src, dst = indptr[r], new_ptr[s]
    for t in range(indptr[r + 1] - src):
        out_indices[dst + t] = indices[src + t]
        out_data[dst + t] = data[src + t]


def take_rows(ctx: Any, indptr: Any, indices: Any, data: Any, rows: Any) -> tuple[Any, Any, Any]:
    """(indptr, indices, data) of the rows ``rows`` (in that order) of a csr: new arrays."""
    xp = _xp(ctx)
    new_ptr = xp.zeros(rows.shape[0] + 1, dtype=indptr.dtype)
    if rows.shape[0]:
        xp.cumsum(indptr[rows + 1] - indptr[rows], out=new_ptr[1:])
    nnz = int(new_ptr[-1])
    out_indices = xp.empty(nnz, dtype=indices.dtype)
    out_data = xp.empty(nnz, dtype=data.dtype)
    if nnz:
        _gather_rows_row(ctx, rows.shape[0], indptr, indices, data, rows, new_ptr, out_indices, out_data, work=nnz)
    return (*_frozen(new_ptr, out_indices), out_data)


def keep_columns(ctx: Any, indptr: Any, indices: Any, data: Any, slot: Any) -> tuple[Any, Any, Any]:
    """(indptr, indices, data) of a csr keeping only the columns ``c`` with ``slot[c] >= 0``,
    renumbered ``slot[c]`` (csr @ row_sparse: only the columns at stored rows count)."""
    xp = _xp(ctx)
    target = slot[indices]
    keep = target >= 0
    kept_before = xp.zeros(indices.shape[0] + 1, dtype=np.int64)
    xp.cumsum(keep, out=kept_before[1:])
    return (*_frozen(kept_before[indptr].astype(indptr.dtype), target[keep].astype(indices.dtype)), data[keep])


__all__ = ["PLAIN", "SQUARE", "ABS", "row_ids", "transpose", "transpose_into", "nonempty_rows", "csr_dense",
           "runs_csr_dense", "segment_sum", "segment_sum_rows", "group_columns", "index_add", "take_rows",
           "keep_columns"]
