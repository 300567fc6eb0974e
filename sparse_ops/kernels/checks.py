"""The containers' O(nnz) format checks compiled for the host: ``validation.py``'s array-code
bodies (``csr_violation``, ``row_sparse_violation``) built by numba, hooked into
``validation.HOST_CHECKS`` when this package loads. The same bodies, so the same structures
are taken and refused; on the small index arrays of a per-call operator they run in a small
fraction of the dozen NumPy calls the array code makes (a 64-row csr of 1,000 stored values:
about a sixth). The JAX bridge's native handler calls ``csr_violation`` from numba code."""
from __future__ import annotations

from .. import validation
from . import jit

csr_violation = jit()(validation.csr_violation)
row_sparse_violation = jit()(validation.row_sparse_violation)

validation.HOST_CHECKS.update(csr=csr_violation, row_sparse=row_sparse_violation)
