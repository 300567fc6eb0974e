"""numba CPU kernels of the structure operators: csr scatter-add (the csr transpose is
``sparse_ops.sdk.csr.transpose_into``)."""
from numba import prange

from . import jit


@jit(parallel=True)
def csr_scatter_add_into(indptr, indices, data, out):
    """out[r, indices[j]] += data[j] for the stored values of a canonical csr matrix."""
    for r in prange(indptr.shape[0] - 1):
        for j in range(indptr[r], indptr[r + 1]):
            out[r, indices[j]] += data[j]
