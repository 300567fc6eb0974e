"""The gpu host drivers of the built-in csr products and structure operations.

Imported lazily, by the gpu kernel methods of ``sparse_ops.ops`` on their first call.
The per-row kernels themselves are written once for both devices in ``sparse_ops.sdk.csr``
(and ``sparse_ops.kernels.elemwise`` for the csr merges): ``sparse_ops.sdk.rowkernel``
builds their numba.cuda form, launched on the op context's stream. What stays here is
what only the gpu does: the choice of cuSPARSE, and the compositions of those primitives
the gpu ``dot`` uses (A.T @ b as a transpose, then row-wise products).

Every driver takes CuPy arrays on a real GPU and NumPy arrays under numba's CUDA
simulator (``SPARSE_OPS_CUDA_SIM=1``) alike and is written against ``ctx.xp``, so the
code the simulator runs is the code a GPU runs. Values arrive widened where the GPU path
needs it (float16 -> float32, by the caller); index arrays are never written.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..sdk import csr as sdk_csr

# True sends csr @ dense with float32/float64 values to cuSPARSE (through cupyx.scipy.sparse)
# instead of ``sdk.csr.csr_dense``. Off by default: on an H200, the warp-per-row kernel was as
# fast or faster in all nine shapes of benchmarks/bench_gpu_sweep.py (results/gpu_sweep.md);
# going through cupyx costs a matrix object, cupyx's F-order round trip and a copy into ``out``
# on every call.
USE_CUSPARSE = False


def csr_transpose(ctx: Any, parts: tuple, columns: int, index_dtype: Any = None) -> tuple[tuple, Any]:
    """((indptr, indices, values) of A.T, stored values per column of A) for csr A given as
    (indptr, indices, values) with ``columns`` columns; A.T is canonical. Index dtype:
    ``index_dtype``, else A's (see ``sparse_ops.sdk.csr.transpose``)."""
    t_parts = sdk_csr.transpose(ctx, columns, *parts, index_dtype=index_dtype)
    return t_parts, ctx.xp.diff(t_parts[0]).astype(np.int64)


def take_rows(ctx: Any, parts: tuple, rows: Any) -> tuple:
    """csr parts of the rows ``rows`` (in that order) of the csr ``parts``."""
    return sdk_csr.take_rows(ctx, *parts, rows)


def _cusparse_product(xp: Any, parts: tuple, b: Any, out: Any) -> bool:
    """out = A @ b with cuSPARSE when on CuPy with float32/float64 values whose indices fit
    int32 (cupyx.scipy.sparse's index type); False when it does not apply."""
    indptr, indices, values = parts
    if (not USE_CUSPARSE or xp is np or values.dtype not in (np.float32, np.float64)
            or max(indices.shape[0], out.shape[0], b.shape[0]) > np.iinfo(np.int32).max):
        return False
    try:
        import cupyx.scipy.sparse as cusparse
    except ImportError:
        return False
    a = cusparse.csr_matrix((values, indices.astype(np.int32, copy=False), indptr.astype(np.int32, copy=False)),
                            shape=(out.shape[0], b.shape[0]))
    a.has_canonical_format = True  # our csr always is; spares cupyx a check and a device sync per call
    out[...] = a @ b
    return True


def csr_times_dense(ctx: Any, parts: tuple, b: Any, out: Any) -> Any:
    """out = A @ b for csr A given as (indptr, indices, values) and dense 2-d b of the
    values' dtype (row-major reads coalesce best); ``out`` (rows x b's columns) is
    written whole and returned."""
    rows, n = out.shape
    if rows == 0 or n == 0:
        return out
    if _cusparse_product(ctx.xp, parts, b, out):
        return out
    return sdk_csr.csr_dense(ctx, *parts, b, out)


def csr_t_times_dense(ctx: Any, parts: tuple, columns: int, b: Any) -> tuple[Any, Any]:
    """(stored columns, product) of A.T @ b for csr A (``columns`` columns) and dense 2-d
    b: the product is zero outside the columns A stores, so it is computed for those only
    (their rows of A.T, each a row-wise product: no two threads write one output).
    Stored columns are sorted, of A's index dtype."""
    xp = ctx.xp
    indptr, indices, values = parts
    t_ptr, t_idx, t_val = sdk_csr.transpose(ctx, columns, *parts)
    stored, compact_ptr = sdk_csr.nonempty_rows(ctx, t_ptr)  # A.T without its empty rows
    stored = stored.astype(indices.dtype, copy=False)
    product = xp.empty((stored.shape[0], b.shape[1]), dtype=values.dtype)
    csr_times_dense(ctx, (compact_ptr, t_idx, t_val), b, product)
    return stored, product


__all__ = ["USE_CUSPARSE", "csr_transpose", "take_rows", "csr_times_dense", "csr_t_times_dense"]
