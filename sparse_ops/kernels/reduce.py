"""Column sums of a csr matrix, optionally of the squares or absolute values (the row sums
are ``sparse_ops.sdk.csr.segment_sum``, whose modes these share), and the sum of a whole
dense array.

The column sums add into zero-initialised accumulators (float64 or int64, chosen by the
caller) whose dtype also types the running sums, so float32 values are summed in
float64; the whole-array sum adds float64 totals of blocks. The value transform
(``mode``) is tested outside the inner loops.
"""
import numpy as np
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
    """The (transformed) sum of a 1-d float array. Each block of SUM_BLOCK values is summed
    in the array's dtype, vectorised (reordered within the block); the blocks' sums are
    added in float64, in order. Faster than NumPy's pairwise sum and as accurate."""
    zero = np.zeros(1, a.dtype)[0]
    total = 0.0
    n = a.shape[0]
    for block in range((n + SUM_BLOCK - 1) // SUM_BLOCK):
        # offsets from a block start the compiler sees as non-negative: indices it cannot
        # prove non-negative get a wraparound test that stops the loop vectorising
        lo = block * SUM_BLOCK
        m = min(SUM_BLOCK, n - lo)
        s = zero
        if mode == SQUARE:
            for j in range(m):
                s += a[lo + j] * a[lo + j]
        elif mode == ABS:
            for j in range(m):
                s += abs(a[lo + j])
        else:
            for j in range(m):
                s += a[lo + j]
        total += s
    return total
