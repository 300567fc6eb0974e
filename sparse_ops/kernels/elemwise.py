"""Merging two canonical csr matrices row by row (union for add/sub, intersection for mul),
on both devices: one per-row body for counting and one for filling
(``sparse_ops.sdk.rowkernel``), a prefix sum between them."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..sdk.rowkernel import row_kernel

ADD, SUB, MUL = 0, 1, 2


@row_kernel
def csr_merge_count(r, a_ptr, a_idx, b_ptr, b_idx, union, counts):
    """counts[r] = size of the union (``union`` = 1) or intersection (0) of row r's columns."""
    i, i_end = a_ptr[r], a_ptr[r + 1]
    j, j_end = b_ptr[r], b_ptr[r + 1]
    c = 0
    while i < i_end and j < j_end:
        if a_idx[i] == b_idx[j]:
            c += 1
            i += 1
            j += 1
        elif a_idx[i] < b_idx[j]:
            c += union
            i += 1
        else:
            c += union
            j += 1
    if union:
        c += (i_end - i) + (j_end - j)
    counts[r] = c


@row_kernel
def csr_merge_fill(r, a_ptr, a_idx, a_val, b_ptr, b_idx, b_val, op, out_ptr, out_idx, out_val):
    """Row r of a op b (``ADD``, ``SUB``, ``MUL``) into out[out_ptr[r]:out_ptr[r + 1]]."""
    union = op != 2  # MUL
    i, i_end = a_ptr[r], a_ptr[r + 1]
    j, j_end = b_ptr[r], b_ptr[r + 1]
    p = out_ptr[r]
    while i < i_end and j < j_end:
        ca, cb = a_idx[i], b_idx[j]
        if ca == cb:
            out_idx[p] = ca
            if op == 0:  # ADD
                out_val[p] = a_val[i] + b_val[j]
            elif op == 1:  # SUB
                out_val[p] = a_val[i] - b_val[j]
            else:
                out_val[p] = a_val[i] * b_val[j]
            p += 1
            i += 1
            j += 1
        elif ca < cb:
            if union:
                out_idx[p] = ca
                out_val[p] = a_val[i]
                p += 1
            i += 1
        else:
            if union:
                out_idx[p] = cb
                out_val[p] = -b_val[j] if op == 1 else b_val[j]
                p += 1
            j += 1
    if union:
        while i < i_end:
            out_idx[p] = a_idx[i]
            out_val[p] = a_val[i]
            p += 1
            i += 1
        while j < j_end:
            out_idx[p] = b_idx[j]
            out_val[p] = -b_val[j] if op == 1 else b_val[j]
            p += 1
            j += 1


def csr_merge(ctx: Any, a: tuple, b: tuple, op: int, index_dtype: Any) -> tuple[Any, Any, Any]:
    """(values, indices, indptr) of the row-wise union (``ADD``, ``SUB``) or intersection
    (``MUL``) of canonical csr matrices given as (indptr, indices, values), same shape,
    values of one dtype; arrays of ``ctx``'s array module (``ctx`` None: NumPy)."""
    xp = np if ctx is None else ctx.xp
    (a_ptr, a_idx, a_val), (b_ptr, b_idx, b_val) = a, b
    rows = a_ptr.shape[0] - 1
    work = a_idx.shape[0] + b_idx.shape[0]
    counts = xp.empty(rows, dtype=np.int64)
    csr_merge_count(ctx, rows, a_ptr, a_idx, b_ptr, b_idx, int(op != MUL), counts, work=work)
    indptr = xp.zeros(rows + 1, dtype=index_dtype)
    if rows:
        xp.cumsum(counts, out=indptr[1:])
    nnz = int(indptr[-1])
    indices = xp.empty(nnz, dtype=index_dtype)
    values = xp.empty(nnz, dtype=a_val.dtype)
    if nnz:
        csr_merge_fill(ctx, rows, a_ptr, a_idx, a_val, b_ptr, b_idx, b_val, op, indptr, indices, values, work=work)
    return values, indices, indptr
