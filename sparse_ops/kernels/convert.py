"""Storage conversion kernels (csr <-> dense) for the cpu.

Plain numba over plain arrays; ``storage.py`` chooses between these and the
vectorised array-module code that also runs on CuPy.
"""
from numba import prange

from . import jit


@jit(parallel=True)
def csr_scatter_into(indptr, indices, data, out):
    """out[r, indices[j]] = data[j] for the stored values; ``out`` is pre-zeroed."""
    for r in prange(indptr.shape[0] - 1):
        for j in range(indptr[r], indptr[r + 1]):
            out[r, indices[j]] = data[j]


@jit(parallel=True)
def csr_zero_and_scatter_into(indptr, indices, data, out):
    """Like csr_scatter_into for an ``out`` holding old values: each row is cleared first."""
    for r in prange(indptr.shape[0] - 1):
        out[r, :] = 0
        for j in range(indptr[r], indptr[r + 1]):
            out[r, indices[j]] = data[j]


@jit(parallel=True)
def count_row_nonzeros(dense, counts):
    for r in prange(dense.shape[0]):
        c = 0
        for j in range(dense.shape[1]):
            if dense[r, j] != 0:
                c += 1
        counts[r] = c


@jit(parallel=True)
def fill_csr_from_dense(dense, indptr, indices, data):
    for r in prange(dense.shape[0]):
        p = indptr[r]
        for j in range(dense.shape[1]):
            v = dense[r, j]
            if v != 0:
                indices[p] = j
                data[p] = v
                p += 1
