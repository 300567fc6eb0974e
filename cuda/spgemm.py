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

The workspace is bounded as the cpu's is (``WORKSPACE_BYTES``, the cpu's one-pass size):
the rows run in chunks whose products fit it, each chunk's kept entries copied out before
the next expands, so a power-law ``A @ A`` whose products would take tens of GB needs the
output and one chunk's workspace (a single row larger than the bound gets a workspace of
its own size: a row's products are sorted together).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..sdk.rowkernel import row_kernel

WORKSPACE_BYTES = 256 << 20  # a chunk's products (column and value) fit in this many bytes


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


def chunk_rows(w_ptr: np.ndarray, entries: int) -> list[tuple[int, int]]:
    """Row ranges [start, stop) covering the rows whose products start at ``w_ptr`` (the
    prefix sums of the rows' products, on the host), each holding at most ``entries``
    products, or one row that alone holds more."""
    rows, out, start = w_ptr.shape[0] - 1, [], 0
    while start < rows:
        stop = int(np.searchsorted(w_ptr, w_ptr[start] + entries, side="right")) - 1
        stop = min(max(stop, start + 1), rows)
        out.append((start, stop))
        start = stop
    return out


def spgemm(ctx: Any, a: tuple, b: tuple, n_cols: int, index_dtype: Any,
           workspace_bytes: int = WORKSPACE_BYTES) -> tuple[Any, Any, Any]:
    """(indptr, indices, values) of A @ B for canonical csr parts ``a`` and ``b`` given as
    (indptr, indices, values) on ``ctx``'s gpu, B having ``n_cols`` columns: canonical,
    exact zeros dropped; index arrays of ``index_dtype``, int64 when the nnz needs it. The
    rows' products are formed a chunk of rows at a time, each chunk's within
    ``workspace_bytes`` (see the module docstring)."""
    from sparse_ops.device import to_host

    xp = ctx.xp
    a_ptr, a_idx, a_val = a
    b_ptr, b_idx, b_val = b
    rows = a_ptr.shape[0] - 1
    b_len = xp.diff(b_ptr).astype(np.int64)
    per_value = b_len[a_idx] if a_idx.shape[0] else xp.zeros(0, dtype=np.int64)
    flops_before = xp.zeros(a_idx.shape[0] + 1, dtype=np.int64)
    if a_idx.shape[0]:
        xp.cumsum(per_value, out=flops_before[1:])
    w_ptr = flops_before[a_ptr.astype(np.int64)]  # each row's products start here (all rows' count)
    entries = max(1, workspace_bytes // (8 + a_val.dtype.itemsize))
    pieces_idx, pieces_val, kept_all = [], [], xp.zeros(rows, dtype=np.int64)
    for start, stop in chunk_rows(to_host(w_ptr), entries):
        c_ptr = w_ptr[start:stop + 1] - w_ptr[start]  # the chunk's own workspace offsets
        flops = int(c_ptr[-1])
        if not flops:
            continue
        w_idx = xp.empty(flops, dtype=np.int64)
        w_val = xp.empty(flops, dtype=a_val.dtype)
        kept = kept_all[start:stop]
        _expand_row(ctx, stop - start, a_ptr[start:], a_idx, a_val, b_ptr, b_idx, b_val, c_ptr, w_idx, w_val, kept)
        k_ptr = xp.zeros(stop - start + 1, dtype=np.int64)
        xp.cumsum(kept, out=k_ptr[1:])
        n = int(k_ptr[-1])
        piece_idx, piece_val = xp.empty(n, dtype=np.int64), xp.empty(n, dtype=a_val.dtype)
        if n:
            _copy_row(ctx, stop - start, c_ptr, w_idx, w_val, k_ptr, piece_idx, piece_val)
        pieces_idx.append(piece_idx)
        pieces_val.append(piece_val)
        del w_idx, w_val  # the next chunk's workspace reuses the memory
    out_ptr = xp.zeros(rows + 1, dtype=np.int64)
    if rows:
        xp.cumsum(kept_all, out=out_ptr[1:])
    nnz = int(out_ptr[-1])
    idt = np.dtype(index_dtype)
    if max(nnz, n_cols) > np.iinfo(idt).max:
        idt = np.dtype(np.int64)
    def joined(pieces: list, dtype: Any) -> Any:
        if not pieces:
            return xp.empty(0, dtype=dtype)
        return (pieces[0] if len(pieces) == 1 else xp.concatenate(pieces)).astype(dtype, copy=False)

    out_idx, out_val = joined(pieces_idx, idt), joined(pieces_val, a_val.dtype)
    return out_ptr.astype(idt, copy=False), out_idx, out_val


__all__ = ["spgemm"]
