"""The cpu kernel of csr @ dense (``sparse_ops.sdk.csr.csr_dense`` on the cpu).

The per-row body of ``sdk.csr`` stays the gpu's (one warp a row) and the reference; the cpu
gets its own kernel because what makes it fast there does not exist on a gpu:

- the parallel tasks are row ranges holding equal numbers of stored values (plus one per
  row), not equal numbers of rows, so power-law rows do not leave one thread with most of
  the work;
- the width 8 is compiled with a literal trip count: a runtime width's vector loop is
  unrolled for long rows and leaves an 8-wide output row to its scalar tail (literal 16,
  32 and 64 measured no faster than the runtime loop and cost compile time);
- wide outputs (``WIDE_BYTES`` and up) prefetch the rows of ``b`` a few stored values
  ahead (``llvm.prefetch``, no such hint exists on the CUDA target): those gathers are
  random reads beyond the private caches;
- each row is written by its first stored value instead of zero-filled first, and
  multiply-adds may fuse (``fastmath={"contract"}``: no reassociation, one rounding less);
- column indices are masked non-negative, which lets numba's negative-index wrap-around
  checks fold away (canonical indices are non-negative anyway).

Imported by ``sdk.csr`` on the first cpu product (it loads numba). The options are
``sparse_ops.kernels.jit``'s (nogil, disk cache, bounds checking under
``SPARSE_OPS_BOUNDSCHECK=1``) plus the fused multiply-adds.
"""
from __future__ import annotations

from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba import prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from sparse_ops import _numba_env
from sparse_ops import kernels as _kernels  # noqa: F401  (picks numba's threading layer first)
from sparse_ops.settings import BOUNDSCHECK

_NONNEG = 0x7FFF_FFFF_FFFF_FFFF
AHEAD = 12  # stored values between a prefetch and the multiply-add that reads that row
WIDE_BYTES = 512  # output rows of at least this many bytes prefetch
TASKS_PER_THREAD = 4  # parallel tasks per numba thread


@intrinsic
def _prefetch(typingctx: Any, arr: Any, row: Any, col: Any) -> Any:
    """Hint the cpu to bring the cache line of ``arr[row, col]`` (a 2-d array) into its
    caches; no memory access, so any in-bounds-or-not address is harmless."""
    sig = types.void(arr, row, col)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        inds = [context.cast(builder, v, t, types.intp) for v, t in zip(args[1:], signature.args[1:])]
        ptr = cgutils.get_item_pointer2(context, builder, data=ary.data, shape=cgutils.unpack_tuple(builder, ary.shape),
                                        strides=cgutils.unpack_tuple(builder, ary.strides), layout=aryty.layout,
                                        inds=inds, wraparound=False, boundscheck=False)
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                            "llvm.prefetch.p0i8")
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])  # read, keep, data cache
        return context.get_dummy_value()

    return sig, codegen


_OPTS = dict(nogil=True, cache=_numba_env.CACHE_OK, boundscheck=BOUNDSCHECK or None, fastmath={"contract"})


@numba.njit(inline="always", **_OPTS)
def _row(indptr, indices, data, b, out, i, w, ahead):
    # out[i, :w] = sum over the stored values of row i of data[j] * b[indices[j], :w];
    # w is a literal in the width branches below. ahead > 0: prefetch that far ahead.
    j, end = indptr[i], indptr[i + 1]
    if j == end:
        for c in range(w):
            out[i, c] = 0
    else:
        last = indices.shape[0] - 1
        line = 64 // b.itemsize
        r, v = indices[j] & _NONNEG, data[j]
        for c in range(w):
            out[i, c] = v * b[r, c]
        j += 1
        while j + 1 < end:
            if ahead > 0:
                q = indices[min(j + ahead, last)] & _NONNEG
                for o in range(0, w, line):
                    _prefetch(b, q, o)
                q = indices[min(j + ahead + 1, last)] & _NONNEG
                for o in range(0, w, line):
                    _prefetch(b, q, o)
            r, v = indices[j] & _NONNEG, data[j]
            r1, v1 = indices[j + 1] & _NONNEG, data[j + 1]
            for c in range(w):
                out[i, c] += v * b[r, c] + v1 * b[r1, c]
            j += 2
        if j < end:
            r, v = indices[j] & _NONNEG, data[j]
            for c in range(w):
                out[i, c] += v * b[r, c]


@numba.njit(**_OPTS)
def csr_dense_rows(indptr, indices, data, b, out, lo, hi):
    """out[lo:hi] = (rows lo..hi-1 of the csr) @ b, every row of out written."""
    n = b.shape[1]
    lo = lo & _NONNEG
    if n == 8:
        for i in range(lo, hi):
            _row(indptr, indices, data, b, out, i, 8, 0)
    else:
        ahead = AHEAD if n * b.itemsize >= WIDE_BYTES else 0
        for i in range(lo, hi):
            _row(indptr, indices, data, b, out, i, n, ahead)


@numba.njit(parallel=True, **_OPTS)
def csr_dense_parallel(indptr, indices, data, b, out, bounds):
    """``csr_dense_rows`` over the row ranges ``bounds[t]..bounds[t + 1]``, one task each."""
    for t in prange(bounds.shape[0] - 1):
        csr_dense_rows(indptr, indices, data, b, out, bounds[t], bounds[t + 1])


def balanced_bounds(indptr: np.ndarray, tasks: int) -> np.ndarray:
    """``tasks + 1`` row boundaries splitting the rows into ranges of about equal work,
    counting each stored value and each row (its write) as one unit."""
    rows = indptr.shape[0] - 1
    cost = indptr.astype(np.int64) + np.arange(rows + 1, dtype=np.int64)
    cuts = np.searchsorted(cost, np.linspace(0, cost[-1], tasks + 1)[1:-1])
    return np.concatenate(([0], cuts, [rows])).astype(np.int64)


def csr_dense(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, b: np.ndarray, out: np.ndarray,
              parallel: bool) -> None:
    """out = A @ b for a csr A and a C-contiguous b, on the numba threads when ``parallel``."""
    rows = out.shape[0]
    threads = numba.get_num_threads() if parallel else 1
    if threads > 1 and rows > 1:
        csr_dense_parallel(indptr, indices, data, b, out, balanced_bounds(indptr, threads * TASKS_PER_THREAD))
    else:
        csr_dense_rows(indptr, indices, data, b, out, 0, rows)
