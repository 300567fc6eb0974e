"""Column sums of a csr matrix, optionally of the squares or absolute values (the row sums
are ``sparse_ops.sdk.csr.segment_sum``, whose modes these share), and the sum of a whole
dense array.

The kernels add into zero-initialised accumulators (float64 or int64, chosen by the
caller) whose dtype also types the running sums, so float32 values are summed in
float64. The value transform (``mode``) is tested outside the inner loops.
"""
from numba import prange

from ..sdk.csr import ABS, PLAIN, SQUARE  # noqa: F401  (the modes, re-exported)
from . import jit


@jit()
def csr_col_sums_into(indices, data, lo, hi, mode, out):
    """out[col] += (transformed) stored values lo..hi-1, by column."""
    if mode == SQUARE:
        for j in range(lo, hi):
            out[indices[j]] += data[j] * data[j]
    elif mode == ABS:
        for j in range(lo, hi):
            out[indices[j]] += abs(data[j])
    else:
        for j in range(lo, hi):
            out[indices[j]] += data[j]


@jit(parallel=True)
def csr_col_sums_chunked(indptr, indices, data, mode, buf):
    """buf[c] += column sums of the c-th of ``buf.shape[0]`` equal slices of the stored
    values; the caller sums ``buf`` over its first axis. Slicing the values, not the rows,
    balances the work whatever the row lengths."""
    chunks = buf.shape[0]
    first = indptr[0]
    total = indptr[indptr.shape[0] - 1] - first
    for c in prange(chunks):
        lo = first + total * c // chunks
        hi = first + total * (c + 1) // chunks
        csr_col_sums_into(indices, data, lo, hi, mode, buf[c])


SUM_BLOCK = 4096


@jit(reassociate=True)
def flat_sum(a, mode):
    """The (transformed) sum of a 1-d float array, in float64. Each block's sum is
    vectorised (reordered within the block), the blocks' sums added in order: faster than
    NumPy's pairwise float32 sum and more accurate."""
    total = 0.0
    n = a.shape[0]
    for lo in range(0, n, SUM_BLOCK):
        hi = min(n, lo + SUM_BLOCK)
        s = 0.0
        if mode == SQUARE:
            for i in range(lo, hi):
                s += a[i] * a[i]
        elif mode == ABS:
            for i in range(lo, hi):
                s += abs(a[i])
        else:
            for i in range(lo, hi):
                s += a[i]
        total += s
    return total
