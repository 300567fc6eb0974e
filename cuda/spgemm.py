"""The gpu SpGEMM: ``dot(csr, csr)`` on a gpu, a thread per output row.

Two passes with a prefix sum between them, as on the cpu (``sparse_ops.kernels.spgemm``),
but with no per-thread dense accumulator (a gpu thread cannot hold one): each row expands
its products (column, value) into its own slice of a workspace (the slices are the
prefix sums of the rows' multiply-adds), heap-sorts the slice by column (O(f log f) even
for a hub row), sums each column's run and drops exact zeros in place, and counts what
it kept; the second pass copies the kept entries to the output. The result is canonical,
and equal to SciPy's ``A @ B`` (which drops zeros too). No atomics: each row owns its
slices. Both bodies are ``sparse_ops.sdk.rowkernel`` bodies launched on the op context's
stream; CuPy arrays on a GPU, NumPy ones under the simulator.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..sdk.rowkernel import row_kernel


@row_kernel
def _expand_row(i, a_ptr, a_idx, a_val, b_ptr, b_idx, b_val, w_ptr, w_idx, w_val, kept):
    start = w_ptr[i]
    p = start
    for j in range(a_ptr[i], a_ptr[i + 1]):
        r = a_idx[j]
        v = a_val[j]
        for q in range(b_ptr[r], b_ptr[r + 1]):
            w_idx[p] = b_idx[q]
            w_val[p] = v * b_val[q]
            p += 1
    n = p - start
    # heap sort of the slice by column, values alongside
    root = n // 2
    while root > 0:
        root -= 1
        node = root
        while 2 * node + 1 < n:
            child = 2 * node + 1
            if child + 1 < n and w_idx[start + child + 1] > w_idx[start + child]:
                child += 1
            if w_idx[start + child] > w_idx[start + node]:
                ci, cv = w_idx[start + child], w_val[start + child]
                w_idx[start + child], w_val[start + child] = w_idx[start + node], w_val[start + node]
                w_idx[start + node], w_val[start + node] = ci, cv
                node = child
            else:
                break
    end = n
    while end > 1:
        end -= 1
        ci, cv = w_idx[start + end], w_val[start + end]
        w_idx[start + end], w_val[start + end] = w_idx[start], w_val[start]
        w_idx[start], w_val[start] = ci, cv
        node = 0
        while 2 * node + 1 < end:
            child = 2 * node + 1
            if child + 1 < end and w_idx[start + child + 1] > w_idx[start + child]:
                child += 1
            if w_idx[start + child] > w_idx[start + node]:
                ci, cv = w_idx[start + child], w_val[start + child]
                w_idx[start + child], w_val[start + child] = w_idx[start + node], w_val[start + node]
                w_idx[start + node], w_val[start + node] = ci, cv
                node = child
            else:
                break
    # sum each column's run in place; keep non-zero sums
    out = start
    s = start
    while s < p:
        col = w_idx[s]
        acc = w_val[s]
        s += 1
        while s < p and w_idx[s] == col:
            acc += w_val[s]
            s += 1
        if acc != 0:
            w_idx[out] = col
            w_val[out] = acc
            out += 1
    kept[i] = out - start


@row_kernel
def _copy_row(i, w_ptr, w_idx, w_val, out_ptr, out_idx, out_val):
    s = w_ptr[i]
    for d in range(out_ptr[i], out_ptr[i + 1]):
        out_idx[d] = w_idx[s]
        out_val[d] = w_val[s]
        s += 1


def spgemm(ctx: Any, a: tuple, b: tuple, n_cols: int, index_dtype: Any) -> tuple[Any, Any, Any]:
    """(indptr, indices, values) of A @ B for canonical csr parts ``a`` and ``b`` given as
    (indptr, indices, values) on ``ctx``'s gpu, B having ``n_cols`` columns: canonical,
    exact zeros dropped; index arrays of ``index_dtype``, int64 when the nnz needs it."""
    xp = ctx.xp
    a_ptr, a_idx, a_val = a
    b_ptr, b_idx, b_val = b
    rows = a_ptr.shape[0] - 1
    b_len = xp.diff(b_ptr).astype(np.int64)
    per_value = b_len[a_idx] if a_idx.shape[0] else xp.zeros(0, dtype=np.int64)
    flops_before = xp.zeros(a_idx.shape[0] + 1, dtype=np.int64)
    if a_idx.shape[0]:
        xp.cumsum(per_value, out=flops_before[1:])
    w_ptr = flops_before[a_ptr.astype(np.int64)]  # each row's workspace slice
    flops = int(w_ptr[-1])
    w_idx = xp.empty(flops, dtype=np.int64)
    w_val = xp.empty(flops, dtype=a_val.dtype)
    kept = xp.zeros(rows, dtype=np.int64)
    if flops:
        _expand_row(ctx, rows, a_ptr, a_idx, a_val, b_ptr, b_idx, b_val, w_ptr, w_idx, w_val, kept)
    out_ptr = xp.zeros(rows + 1, dtype=np.int64)
    if rows:
        xp.cumsum(kept, out=out_ptr[1:])
    nnz = int(out_ptr[-1])
    idt = np.dtype(index_dtype)
    if max(nnz, n_cols) > np.iinfo(idt).max:
        idt = np.dtype(np.int64)
    out_idx = xp.empty(nnz, dtype=idt)
    out_val = xp.empty(nnz, dtype=a_val.dtype)
    if nnz:
        _copy_row(ctx, rows, w_ptr, w_idx, w_val, out_ptr, out_idx, out_val)
    return out_ptr.astype(idt, copy=False), out_idx, out_val


__all__ = ["spgemm"]
