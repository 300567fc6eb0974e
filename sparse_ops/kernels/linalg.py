"""numba CPU kernels of ``dot``: products of a csr matrix with a dense one, in the orientations
that have no gpu form (csr @ dense itself is ``sparse_ops.sdk.csr.csr_dense``, for both devices).

Each product has a serial kernel over a range (of rows, or of output columns) and a
parallel driver that splits the whole range among the threads; the host functions at the
top choose between them (the products' threading policy). Small products call the
serial kernel directly: starting a parallel region costs more than they do. Every driver
is race-free without atomics: each parallel iteration owns the output rows it writes.
Values arrive widened to float32, float64 or int64 (fewer specialisations to compile)
and all value arrays of one call share a dtype.
"""
import numba
import numpy as np
from numba import prange
from numba.extending import overload

from .. import alloc
from ..sdk.rowkernel import ROWS_PER_TASK, parallel_worth  # noqa: F401  (ROWS_PER_TASK: the drivers' block)
from . import chunks, jit, jit_options

# per-thread partial outputs of A.T @ b (one per thread but the first) while they stay this small
PARTIAL_MAX_BYTES = 256 << 20


# ---- the threading policy of the products (host code choosing a driver) ----------------------------
def column_counts(indices: np.ndarray, columns: int) -> np.ndarray:
    """How many stored values each of ``columns`` columns has (int64), counted in parallel
    slices when ``parallel_worth`` says the work pays for a parallel region."""
    nnz = indices.shape[0]
    slices = numba.get_num_threads() if parallel_worth(nnz) else 1
    per_slice = np.zeros((slices, columns), dtype=np.int32 if nnz < 2**31 else np.int64)
    count_columns(indices, per_slice)
    return per_slice.sum(axis=0, dtype=np.int64)


def csr_t_dense_product(indptr: np.ndarray, indices: np.ndarray, values: np.ndarray, b: np.ndarray,
                        counts: np.ndarray, out: np.ndarray) -> None:
    """out += A.T @ b for csr A whose column ``indices`` are positions among ``out``'s rows
    (``counts`` stored values each). Small products run serially; big ones in parallel over
    row ranges into per-thread partial outputs while those stay small beside A (each thread
    reads its share of A and b once), else over ranges of output rows (no extra memory)."""
    stored, n = out.shape
    if not stored or not n:
        return
    threads = numba.get_num_threads()
    if not parallel_worth(indices.shape[0] * n):
        csr_t_dense_rows(indptr, indices, values, b, 0, indptr.shape[0] - 1, out)
    elif threads * stored <= indices.shape[0] and (threads - 1) * out.nbytes <= PARTIAL_MAX_BYTES:
        spare = alloc.empty((threads - 1, stored, n), values.dtype)
        csr_t_dense_partial(indptr, indices, values, b, row_chunks(indptr, threads), out, spare)
    else:
        csr_t_dense(indptr, indices, values, b, column_chunks(counts, threads), out)


def column_chunks(counts: np.ndarray, chunks: int) -> np.ndarray:
    """Column boundaries splitting ``counts`` (stored values per column) into ``chunks``
    ranges of about equal total."""
    cum = np.cumsum(counts)
    total = int(cum[-1]) if cum.size else 0
    inner = np.searchsorted(cum, total * np.arange(1, chunks) / chunks, side="left") + 1
    return np.concatenate(([0], np.minimum(inner, counts.shape[0]), [counts.shape[0]])).astype(np.int64)


def row_chunks(indptr: np.ndarray, chunks: int) -> np.ndarray:
    """Row boundaries splitting a csr into ``chunks`` row ranges of about equal nnz."""
    nnz = int(indptr[-1])
    inner = np.searchsorted(indptr, nnz * np.arange(1, chunks, dtype=np.int64) // chunks, side="left")
    return np.concatenate(([0], np.minimum(inner, indptr.shape[0] - 1), [indptr.shape[0] - 1])).astype(np.int64)


@jit(parallel=True)
def count_columns(indices, counts):
    """counts[t, c] = how often column c occurs in slice t of ``indices`` (one slice per row
    of ``counts``, counted in parallel; the caller sums them). NumPy's bincount first converts
    int32 indices to int64: twice as slow; int32 counts keep more of them in the L1 cache."""
    nnz, tasks = indices.shape[0], counts.shape[0]
    for t in prange(tasks):
        for j in range(t * nnz // tasks, (t + 1) * nnz // tasks):
            counts[t, indices[j]] += 1


@jit()
def renumber_columns(indices, renumbered):
    """The sorted distinct columns ``cols`` of ``indices`` and how often each occurs; writes
    ``renumbered[j]`` = the position of ``indices[j]`` in ``cols``. A sort of the stored
    values (O(nnz log nnz) time, O(nnz) memory): for column counts far above nnz, where a
    count per column would cost more than the product (hashed feature spaces)."""
    nnz = indices.shape[0]
    order = np.argsort(indices)
    cols = np.empty(nnz, dtype=indices.dtype)
    counts = np.zeros(nnz, dtype=np.int64)
    u = -1
    for p in range(nnz):
        j = order[p]
        c = indices[j]
        if u < 0 or c != cols[u]:
            u += 1
            cols[u] = c
        renumbered[j] = u
        counts[u] += 1
    return cols[:u + 1].copy(), counts[:u + 1].copy()


def _t_rows(indptr, indices, data, b, out, lo, hi):  # the part of A.T @ b rows lo..hi-1 give; compiled below
    raise NotImplementedError("compiled only")


@overload(_t_rows, inline="always", jit_options=jit_options())
def _t_rows_overload(indptr, indices, data, b, out, lo, hi):
    if chunks.chunkable(data, b, out):  # b's row held in registers, a chunk at a time
        return chunks.rows_by_chunks(chunks.scatter_chunk, b.dtype.bitwidth // 8)

    def rows(indptr, indices, data, b, out, lo, hi):  # the plain loop, a column of b at a time
        for i in range(lo, hi):
            for c in range(b.shape[1]):
                x = b[i, c]
                for j in range(indptr[i], indptr[i + 1]):
                    out[indices[j], c] = out[indices[j], c] + data[j] * x
    return rows


@jit()
def csr_t_dense_rows(indptr, indices, data, b, lo, hi, out):
    """out[c] += A[i, c] * b[i] for the rows lo <= i < hi of csr A and row-major dense b:
    the part of A.T @ b those rows give. Reads its rows of A and b once, in order."""
    _t_rows(indptr, indices, data, b, out, lo, hi)


@jit(parallel=True)
def csr_t_dense_partial(indptr, indices, data, b, bounds, out, spare):
    """out += A.T @ b with the row ranges ``bounds[t]:bounds[t + 1]`` (about equal nnz each)
    in parallel, range 0 into ``out`` and range t > 0 into its own zeroed ``spare[t - 1]``,
    then the spares summed into ``out`` by blocks of output rows.

    Each thread reads only its part of A and b (the column-range driver reads all of A
    in every thread): the better choice while the output is small beside A.
    """
    ranges = bounds.shape[0] - 1
    for t in prange(ranges):
        if t == 0:
            csr_t_dense_rows(indptr, indices, data, b, bounds[0], bounds[1], out)
        else:
            part = spare[t - 1]
            part[:] = 0
            csr_t_dense_rows(indptr, indices, data, b, bounds[t], bounds[t + 1], part)
    rows, n = out.shape[0], out.shape[1]
    for blk in prange((rows + ROWS_PER_TASK - 1) // ROWS_PER_TASK):
        lo = blk * ROWS_PER_TASK
        hi = min(rows, lo + ROWS_PER_TASK)
        for s in range(ranges - 1):
            for r in range(lo, hi):
                for c in range(n):
                    out[r, c] += spare[s, r, c]


@jit()
def csr_t_dense_columns(indptr, indices, data, b, lo, hi, out):
    """out[c] += sum over rows i of A[i, c] * b[i] for the columns lo <= c < hi of csr A
    (m x k) and row-major dense b (m x n): A.T @ b (k x n) restricted to those columns.

    Reads all of A and b in order and writes only the output rows of its columns. The
    columns of a row are sorted, so its values in [lo, hi) are one run: skipping to it
    costs a predictable branch per value instead of a random one. ``out`` is indexed by the
    column itself: an indirection through a renumbering array costs a dependent load per value.
    """
    n = b.shape[1]
    for i in range(indptr.shape[0] - 1):
        j, end = indptr[i], indptr[i + 1]
        while j < end and indices[j] < lo:
            j += 1
        while j < end and indices[j] < hi:
            col, v = indices[j], data[j]
            for c in range(n):
                out[col, c] += v * b[i, c]
            j += 1


@jit(parallel=True)
def csr_t_dense(indptr, indices, data, b, bounds, out):
    """out += A.T @ b (see ``csr_t_dense_columns``); the column ranges
    ``bounds[t]:bounds[t + 1]`` (about equal nnz each) run in parallel.

    Splitting the output columns keeps the writes race-free, reads b in order and keeps
    the output block in cache; transposing A first and then taking row-wise products would
    add a serial scatter and random reads of b's rows.
    """
    for t in prange(bounds.shape[0] - 1):
        csr_t_dense_columns(indptr, indices, data, b, bounds[t], bounds[t + 1], out)


@jit()
def dense_csr_rows(a, indptr, indices, data, out, start, stop):
    """out[start:stop] = a[start:stop] @ B for row-major dense a (m x k), csr B (k x n):
    per output row, scatter ``a[i, l] * B[l, :]`` for every ``a[i, l]``. Zeros of the dense
    ``a`` are values, not skipped: 0 * nan and 0 * inf stored in B give nan, as in NumPy."""
    k = a.shape[1]
    for i in range(start, stop):
        for c in range(out.shape[1]):
            out[i, c] = 0
        for l in range(k):
            v = a[i, l]
            for j in range(indptr[l], indptr[l + 1]):
                out[i, indices[j]] += v * data[j]


@jit(parallel=True)
def dense_csr(a, indptr, indices, data, out):
    """out = a @ B (see ``dense_csr_rows``), blocks of rows in parallel."""
    m = a.shape[0]
    for t in prange((m + ROWS_PER_TASK - 1) // ROWS_PER_TASK):
        dense_csr_rows(a, indptr, indices, data, out, t * ROWS_PER_TASK, min(m, (t + 1) * ROWS_PER_TASK))
