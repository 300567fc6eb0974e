"""Storage conversion kernels (csr <-> dense) for the cpu, as row kernels (one body a row,
run by ``sdk.rowkernel``'s serial or parallel driver by the work's size: a small
conversion never wakes numba's threads).

Plain numba over plain arrays; ``storage.py`` chooses between these and the
vectorised array-module code that also runs on CuPy.
"""
from ..sdk.rowkernel import row_kernel


@row_kernel
def csr_scatter_row(r, indptr, indices, data, out):
    """out[r, indices[j]] = data[j] for row r's stored values; ``out`` is pre-zeroed."""
    for j in range(indptr[r], indptr[r + 1]):
        out[r, indices[j]] = data[j]


@row_kernel
def csr_clear_scatter_row(r, indptr, indices, data, out):
    """Like ``csr_scatter_row`` for an ``out`` holding old values: the row is cleared first."""
    for c in range(out.shape[1]):
        out[r, c] = 0
    for j in range(indptr[r], indptr[r + 1]):
        out[r, indices[j]] = data[j]


@row_kernel
def csr_scatter_add_row(r, indptr, indices, data, out):
    """out[r, indices[j]] += data[j] for row r's stored values (a canonical csr)."""
    for j in range(indptr[r], indptr[r + 1]):
        out[r, indices[j]] += data[j]


@row_kernel
def count_row_nonzeros(r, dense, counts):
    """counts[r] = the nonzeros of ``dense``'s row r."""
    c = 0
    for j in range(dense.shape[1]):
        if dense[r, j] != 0:
            c += 1
    counts[r] = c


@row_kernel
def fill_csr_row(r, dense, indptr, indices, data):
    """Row r of the csr of ``dense`` into the places ``indptr`` gives it."""
    p = indptr[r]
    for j in range(dense.shape[1]):
        v = dense[r, j]
        if v != 0:
            indices[p] = j
            data[p] = v
            p += 1
