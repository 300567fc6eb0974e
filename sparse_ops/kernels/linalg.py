"""numba CPU kernels of ``dot``: products of a csr matrix with a dense one, in the orientations
that have no gpu form (csr @ dense itself is ``sparse_ops.sdk.csr.csr_dense``, for both devices).

Each product is one body per output row, or per task (a range of rows or of output
columns, one per thread: ``tasks_for``), run by the serial and parallel cpu drivers
``sparse_ops.sdk.rowkernel`` builds, under its one parallel-size policy
(``parallel_worth``): small products run serially, as one task, since starting a parallel
region costs more than they do. The bodies are cpu-only (register-held chunks of
``sparse_ops.kernels.chunks``, array slices). Every body is race-free without atomics:
each row or task owns the output rows it writes. Values arrive widened to float32,
float64 or int64 (fewer specialisations to compile) and all value arrays of one call
share a dtype.
"""
import numba
import numpy as np
from numba.extending import overload

from .. import alloc
from ..sdk.rowkernel import parallel_worth, row_kernel
from . import chunks, jit, jit_options

# per-thread partial outputs of A.T @ b (one per thread but the first) while they stay this small
PARTIAL_MAX_BYTES = 256 << 20


# ---- the threading policy of the products (host code choosing a driver) ----------------------------
def tasks_for(work: int) -> int:
    """How many tasks (ranges cut for the threads) a product doing ``work`` multiply-adds
    is cut into: one per numba thread when ``parallel_worth`` says the work pays for a
    parallel region, else one (the serial driver runs it)."""
    return numba.get_num_threads() if parallel_worth(work) else 1


def column_counts(indices: np.ndarray, columns: int) -> np.ndarray:
    """How many stored values each of ``columns`` columns has (int64), counted in parallel
    slices (``count_columns_slice``) when the work pays for a parallel region."""
    nnz = indices.shape[0]
    slices = tasks_for(nnz)
    per_slice = np.zeros((slices, columns), dtype=np.int32 if nnz < 2**31 else np.int64)
    count_columns_slice(None, slices, indices, per_slice, work=nnz)
    return per_slice.sum(axis=0, dtype=np.int64)


def csr_t_dense_product(indptr: np.ndarray, indices: np.ndarray, values: np.ndarray, b: np.ndarray,
                        counts: np.ndarray, out: np.ndarray) -> None:
    """out += A.T @ b for csr A whose column ``indices`` are positions among ``out``'s rows
    (``counts`` stored values each). Small products run serially (one row range); big ones
    in parallel over row ranges into per-thread partial outputs while those stay small
    beside A (each thread reads its share of A and b once), else over ranges of output
    rows (no extra memory)."""
    stored, n = out.shape
    if not stored or not n:
        return
    work = indices.shape[0] * n
    tasks = tasks_for(work)
    if tasks == 1:
        csr_t_dense_row_range(None, 1, indptr, indices, values, b, 1, out, np.empty((0, 0, 0), values.dtype))
    elif tasks * stored <= indices.shape[0] and (tasks - 1) * out.nbytes <= PARTIAL_MAX_BYTES:
        spare = alloc.empty((tasks - 1, stored, n), values.dtype)
        csr_t_dense_row_range(None, tasks, indptr, indices, values, b, tasks, out, spare, work=work)
        add_partials_row(None, stored, out, spare, work=spare.size)
    else:
        csr_t_dense_column_range(None, tasks, indptr, indices, values, b, column_chunks(counts, tasks), out,
                                 work=work)


def column_chunks(counts: np.ndarray, chunks: int) -> np.ndarray:
    """Column boundaries splitting ``counts`` (stored values per column) into ``chunks``
    ranges of about equal total."""
    cum = np.cumsum(counts)
    total = int(cum[-1]) if cum.size else 0
    inner = np.searchsorted(cum, total * np.arange(1, chunks) / chunks, side="left") + 1
    return np.concatenate(([0], np.minimum(inner, counts.shape[0]), [counts.shape[0]])).astype(np.int64)


@row_kernel
def count_columns_slice(t, indices, counts):
    """counts[t, c] = how often column c occurs in slice t of ``indices`` (one slice per row
    of ``counts``; the caller sums them). NumPy's bincount first converts int32 indices to
    int64: twice as slow; int32 counts keep more of them in the L1 cache."""
    nnz, slices = indices.shape[0], counts.shape[0]
    for j in range(t * nnz // slices, (t + 1) * nnz // slices):
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


@jit()
def range_start(indptr, t, ranges):
    """The first row of range t when csr rows are cut into ``ranges`` ranges of about equal
    nnz (``ranges`` for t = ranges: the row count)."""
    rows = indptr.shape[0] - 1
    if t <= 0:
        return 0
    if t >= ranges:
        return rows
    return min(np.searchsorted(indptr, indptr[rows] * t // ranges), rows)


@row_kernel
def csr_t_dense_row_range(t, indptr, indices, data, b, ranges, out, spare):
    """Task t of out += A.T @ b cut into ``ranges`` row ranges of about equal nnz
    (``range_start``): range 0 adds into ``out``, range t > 0 into its own ``spare[t - 1]``
    (zeroed here), which ``add_partials_row`` then adds to ``out``.

    Each task reads only its part of A and b (a column range reads all of A): the better
    cut while the output is small beside A.
    """
    lo, hi = range_start(indptr, t, ranges), range_start(indptr, t + 1, ranges)
    if t == 0:
        csr_t_dense_rows(indptr, indices, data, b, lo, hi, out)
    else:
        part = spare[t - 1]
        part[:] = 0
        csr_t_dense_rows(indptr, indices, data, b, lo, hi, part)


@row_kernel
def add_partials_row(r, out, spare):
    """out[r] += spare[s, r] for every partial output s, in order of s."""
    for s in range(spare.shape[0]):
        for c in range(out.shape[1]):
            out[r, c] += spare[s, r, c]


@row_kernel
def csr_t_dense_column_range(t, indptr, indices, data, b, bounds, out):
    """Task t of out += A.T @ b cut into the column ranges ``bounds[t]:bounds[t + 1]`` of
    csr A (m x k) (about equal nnz each), row-major dense b (m x n): the output rows
    (k x n) of those columns, sums over all rows i of A[i, c] * b[i].

    Cutting the output columns keeps the writes race-free, reads b in order and keeps the
    output block in cache; transposing A first and then taking row-wise products would add
    a serial scatter and random reads of b's rows. The columns of a row are sorted, so its
    values in the range are one run: skipping to it costs a predictable branch per value
    instead of a random one. ``out`` is indexed by the column itself: an indirection
    through a renumbering array costs a dependent load per value.
    """
    lo, hi = bounds[t], bounds[t + 1]
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


@row_kernel
def dense_csr_row(i, a, indptr, indices, data, out):
    """out[i] = a[i] @ B for row-major dense a (m x k), csr B (k x n): scatter
    ``a[i, l] * B[l, :]`` for every ``a[i, l]``. Zeros of the dense ``a`` are values, not
    skipped: 0 * nan and 0 * inf stored in B give nan, as in NumPy."""
    for c in range(out.shape[1]):
        out[i, c] = 0
    for l in range(a.shape[1]):
        v = a[i, l]
        for j in range(indptr[l], indptr[l + 1]):
            out[i, indices[j]] += v * data[j]
