"""numba CPU kernels of the structure operators: csr transpose and csr scatter-add."""
from numba import prange

from . import jit


@jit()
def csr_transpose(indptr, indices, data, ncols, out_ptr, out_idx, out_data):
    """The csr of the transpose of a canonical csr matrix (a counting sort by column).

    Rows are visited in order, so each output row (input column) receives its column
    indices (input rows) already sorted: the result is canonical. ``out_ptr`` has
    ``ncols + 1`` entries; ``out_idx``/``out_data`` have nnz entries.
    """
    nrows = indptr.shape[0] - 1
    out_ptr[:] = 0
    for j in range(indptr[nrows]):
        out_ptr[indices[j]] += 1
    start = 0
    for c in range(ncols):  # out_ptr[c] becomes the write cursor of output row c
        count = out_ptr[c]
        out_ptr[c] = start
        start += count
    for r in range(nrows):
        for j in range(indptr[r], indptr[r + 1]):
            c = indices[j]
            p = out_ptr[c]
            out_idx[p] = r
            out_data[p] = data[j]
            out_ptr[c] = p + 1
    for c in range(ncols, 0, -1):  # each cursor ended at the next row's start
        out_ptr[c] = out_ptr[c - 1]
    out_ptr[0] = 0


@jit(parallel=True)
def csr_scatter_add_into(indptr, indices, data, out):
    """out[r, indices[j]] += data[j] for the stored values of a canonical csr matrix."""
    for r in prange(indptr.shape[0] - 1):
        for j in range(indptr[r], indptr[r + 1]):
            out[r, indices[j]] += data[j]
