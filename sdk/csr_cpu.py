"""The cpu kernel of csr @ dense (``sparse_ops.sdk.csr.csr_dense`` on the cpu).

The per-row body of ``sdk.csr`` stays the gpu's (one warp a row) and the reference; the cpu
gets its own kernel because what makes it fast there does not exist on a gpu:

- each output row is cut into chunks of 256, 128, 64 and 32 bytes whose sums live in vector
  registers while the row's stored values stream past (``sparse_ops.kernels.chunks``:
  numba cannot prove that ``out`` and ``b`` do not overlap, so a loop written in Python
  loads and stores the output row at every stored value and leaves a narrow row to scalar
  code); operands the chunks do not take (``chunks.chunkable``), and bounds-checking runs,
  get the plain per-element loop, chosen when numba compiles the kernel for their types;
- the parallel tasks are row ranges holding equal numbers of stored values (plus one per
  row), not equal numbers of rows, so power-law rows do not leave one thread with most of
  the work;
- multiply-adds may fuse (``llvm.fmuladd``, ``fastmath={"contract"}``: no reassociation,
  one rounding less).

Imported by ``sdk.csr`` on the first cpu product (it loads numba). The options are
``sparse_ops.kernels.jit``'s (nogil, disk cache, bounds checking) plus the fused
multiply-adds.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import prange
from numba.extending import overload

from sparse_ops import _numba_env
from sparse_ops.kernels import chunks  # (importing sparse_ops.kernels picks numba's threading layer first)
from sparse_ops.settings import BOUNDSCHECK

TASKS_PER_THREAD = 4  # parallel tasks per numba thread
_OPTS = dict(nogil=True, cache=_numba_env.CACHE_OK, boundscheck=BOUNDSCHECK or None, fastmath={"contract"})


def _rows(indptr, indices, data, b, out, lo, hi):  # out[lo:hi] = rows of the csr @ b; compiled by the overload below
    raise NotImplementedError("compiled only")


@overload(_rows, inline="always", jit_options=_OPTS)
def _rows_overload(indptr, indices, data, b, out, lo, hi):
    if chunks.chunkable(data, b, out):
        return chunks.rows_by_chunks(chunks.gather_chunk, b.dtype.bitwidth // 8)

    def rows(indptr, indices, data, b, out, lo, hi):  # the plain loop, a column at a time
        for i in range(lo, hi):
            for c in range(b.shape[1]):
                s = out.dtype.type(0)
                for j in range(indptr[i], indptr[i + 1]):
                    s += data[j] * b[indices[j] & chunks.NONNEG, c]
                out[i, c] = s
    return rows


@numba.njit(**_OPTS)
def csr_dense_rows(indptr, indices, data, b, out, lo, hi):
    """out[lo:hi] = (rows lo..hi-1 of the csr) @ b, every row of out written."""
    _rows(indptr, indices, data, b, out, lo & chunks.NONNEG, hi)


@numba.njit(parallel=True, **_OPTS)
def csr_dense_parallel(indptr, indices, data, b, out, bounds):
    """``csr_dense_rows`` over the row ranges ``bounds[t]..bounds[t + 1]``, one task each."""
    for t in prange(bounds.shape[0] - 1):
        csr_dense_rows(indptr, indices, data, b, out, bounds[t], bounds[t + 1])


@numba.njit(**_OPTS)
def balanced_bounds(indptr, tasks):
    """``tasks + 1`` row boundaries splitting the rows into ranges of about equal work,
    counting each stored value and each row (its write) as one unit: for each cut, the
    first row whose work before it reaches that share (a binary search, nothing the size
    of the csr allocated)."""
    rows = indptr.shape[0] - 1
    total = indptr[rows] + rows
    bounds = np.empty(tasks + 1, dtype=np.int64)
    bounds[0], bounds[tasks] = 0, rows
    for t in range(1, tasks):
        target = (total * t + tasks - 1) // tasks
        lo, hi = 0, rows
        while lo < hi:
            mid = (lo + hi) // 2
            if indptr[mid] + mid < target:
                lo = mid + 1
            else:
                hi = mid
        bounds[t] = lo
    return bounds


def csr_dense(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, b: np.ndarray, out: np.ndarray,
              parallel: bool) -> None:
    """out = A @ b for a csr A and a C-contiguous b, on the numba threads when ``parallel``."""
    rows = out.shape[0]
    threads = numba.get_num_threads() if parallel else 1
    if threads > 1 and rows > 1:
        csr_dense_parallel(indptr, indices, data, b, out, balanced_bounds(indptr, threads * TASKS_PER_THREAD))
    else:
        csr_dense_rows(indptr, indices, data, b, out, 0, rows)
