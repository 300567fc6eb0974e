"""numba CPU kernels of sparse @ sparse: ``dot(csr, csr)`` (SpGEMM) and its gradient, the
product of two operands sampled at a csr matrix's stored entries (SDDMM).

SpGEMM is Gustavson's row-by-row product over row chunks of about equal work
(multiply-adds), run in parallel; each chunk owns its accumulator and its output rows, so
there are no atomics. A numeric pass accumulates each row into a dense accumulator, writes
its columns in increasing order (read off a two-level bitmap of the columns met) and drops
the entries that summed to exactly zero (SciPy's ``A @ B`` drops them too). Its room comes
from the rows' work, an upper bound on their lengths, when that bound is small enough;
otherwise a symbolic pass first counts each row's distinct columns, so the output is
allocated once, exactly. Either way the chunks' rows are closed up after.

Both passes jump to a row of B for each stored value of A; they prefetch the row pointer
PTR_AHEAD values ahead and the row ROW_AHEAD values ahead (``prefetch``: the lines of its
first and last stored values, a short row's two lines where it straddles them), which the
hardware's stream prefetchers cannot guess.

Inputs are validated, canonical csr parts (sorted, unique columns); values arrive widened
to float32, float64 or int64 and share one dtype.
"""
from __future__ import annotations

from typing import Any

import numba
import numpy as np
from numba import prange
from numba.cpython.unsafe.numbers import trailing_zeros

from ..sdk.rowkernel import parallel_worth, row_kernel
from . import jit
from .memmove import move
from .prefetch import prefetch


PTR_AHEAD, ROW_AHEAD = 8, 4  # prefetch distances in stored values of A (the row's must have arrived)


@jit()
def _prefetch_ends(a, lo, hi):
    """Prefetch the cache lines of a[lo] and of a[hi - 1] (one row of B's index or value
    array; nothing for an empty row)."""
    if hi > lo:
        prefetch(a, lo)
        prefetch(a, hi - 1)


@jit()
def row_work(a_ptr, a_idx, b_ptr, work):
    """work[i] = multiply-adds of output row i of A @ B (the stored values of B's rows
    that row i of A selects)."""
    for i in range(a_ptr.shape[0] - 1):
        s = 0
        for j in range(a_ptr[i], a_ptr[i + 1]):
            c = a_idx[j]
            s += b_ptr[c + 1] - b_ptr[c]
        work[i] = s


@jit()
def spgemm_count_rows(a_ptr, a_idx, b_ptr, b_idx, n_cols, lo, hi, counts):
    """counts[i] = distinct columns of row i of A @ B for lo <= i < hi, with a marker array
    (the last row that met each column)."""
    if hi > lo:
        mark = np.full(n_cols, -1, dtype=np.int64)
        stored = a_idx.shape[0]
        for i in range(lo, hi):
            c = 0
            for j in range(a_ptr[i], a_ptr[i + 1]):
                if j + PTR_AHEAD < stored:  # the rows of B that A's next values select: a jump per value
                    prefetch(b_ptr, a_idx[j + PTR_AHEAD])
                if j + ROW_AHEAD < stored:
                    ahead = a_idx[j + ROW_AHEAD]
                    _prefetch_ends(b_idx, b_ptr[ahead], b_ptr[ahead + 1])
                r = a_idx[j]
                for q in range(b_ptr[r], b_ptr[r + 1]):
                    col = b_idx[q]
                    if mark[col] != i:
                        mark[col] = i
                        c += 1
            counts[i] = c


@jit(parallel=True)
def spgemm_count(a_ptr, a_idx, b_ptr, b_idx, n_cols, bounds, counts):
    """``spgemm_count_rows`` for the row chunks ``bounds[t]:bounds[t+1]``, in parallel."""
    for t in prange(bounds.shape[0] - 1):
        spgemm_count_rows(a_ptr, a_idx, b_ptr, b_idx, n_cols, bounds[t], bounds[t + 1], counts)


@jit()
def _bit(k):
    """The uint64 word with bit ``k % 64`` set."""
    return np.uint64(1) << np.uint64(k & 63)


@jit()
def spgemm_fill_rows(a_ptr, a_idx, a_val, b_ptr, b_idx, b_val, n_cols, lo, hi, base, out_idx, out_val, kept):
    """Rows lo <= i < hi of A @ B, one after another from out[base]: columns increasing,
    values summed in the accumulator, entries summing to zero dropped; kept[i] is row i's
    length. The region must hold the rows' distinct columns before the drop (their counts,
    or their work as an upper bound).

    The columns a row has met are bits of a bitmap (one bit a column, 8 KiB per 65,536
    columns: it stays in the L1 cache where a marker per column did not) with a second level
    marking its nonzero words. A row's columns come out in increasing order by walking the
    words of its column range that the second level marks (clearing them for the next row);
    a short row spread over a wide range is sorted instead (insertion sort up to 32 values)."""
    if hi > lo:
        words = (n_cols + 63) >> 6
        bits = np.zeros(words, dtype=np.uint64)
        top = np.zeros((words + 63) >> 6, dtype=np.uint64)
        acc = np.zeros(n_cols, dtype=out_val.dtype)
        zero, one = np.uint64(0), np.uint64(1)
        stored = a_idx.shape[0]
        start = base
        for i in range(lo, hi):
            p = start
            first, last = n_cols, -1
            for j in range(a_ptr[i], a_ptr[i + 1]):
                if j + PTR_AHEAD < stored:
                    prefetch(b_ptr, a_idx[j + PTR_AHEAD])
                if j + ROW_AHEAD < stored:
                    ahead = a_idx[j + ROW_AHEAD]
                    _prefetch_ends(b_idx, b_ptr[ahead], b_ptr[ahead + 1])
                    _prefetch_ends(b_val, b_ptr[ahead], b_ptr[ahead + 1])
                r = a_idx[j]
                v = a_val[j]
                for q in range(b_ptr[r], b_ptr[r + 1]):
                    col = np.int64(b_idx[q])
                    w = col >> 6
                    m = _bit(col)
                    if bits[w] & m == zero:
                        bits[w] |= m
                        top[w >> 6] |= _bit(w)
                        acc[col] = v * b_val[q]
                        out_idx[p] = col
                        p += 1
                        first = min(first, col)
                        last = max(last, col)
                    else:
                        acc[col] += v * b_val[q]
            o = start
            if p > start and (last >> 12) - (first >> 12) <= 2 * (p - start):
                for tw in range(first >> 12, (last >> 12) + 1):
                    t = top[tw]
                    top[tw] = zero
                    while t != zero:
                        w = tw * 64 + trailing_zeros(t)
                        t &= t - one
                        word = bits[w]
                        bits[w] = zero
                        while word != zero:
                            col = w * 64 + trailing_zeros(word)
                            word &= word - one
                            x = acc[col]
                            if x != 0:
                                out_idx[o] = col
                                out_val[o] = x
                                o += 1
            elif p > start:
                if p - start <= 32:
                    for k in range(start + 1, p):
                        c = out_idx[k]
                        s = k - 1
                        while s >= start and out_idx[s] > c:
                            out_idx[s + 1] = out_idx[s]
                            s -= 1
                        out_idx[s + 1] = c
                else:
                    out_idx[start:p].sort()
                for s in range(start, p):
                    col = np.int64(out_idx[s])
                    bits[col >> 6] = zero  # every bit of the word is this row's
                    top[col >> 12] = zero
                    x = acc[col]
                    if x != 0:
                        out_idx[o] = col
                        out_val[o] = x
                        o += 1
            kept[i] = o - start
            start = o


@jit(parallel=True)
def spgemm_fill(a_ptr, a_idx, a_val, b_ptr, b_idx, b_val, n_cols, bounds, bases, out_idx, out_val, kept):
    """``spgemm_fill_rows`` for the row chunks ``bounds[t]:bounds[t+1]`` from ``bases[t]``, in parallel."""
    for t in prange(bounds.shape[0] - 1):
        spgemm_fill_rows(a_ptr, a_idx, a_val, b_ptr, b_idx, b_val, n_cols, bounds[t], bounds[t + 1],
                         bases[t], out_idx, out_val, kept)


@row_kernel
def sampled_entry(s, s_rows, s_idx, x_ptr, x_idx, x_val, x_dense, y_ptr, y_idx, y_val, y_dense, k, out):
    """out[s] = sum over l of X[p, l] * Y[q, l] for the stored entry s = (s_rows[s], s_idx[s])
    of a csr structure S: (X @ Y.T) sampled at S, never formed whole. X and Y are csr
    parts, or with ``x_dense`` / ``y_dense`` row-major dense matrices k wide flattened into
    ``x_val`` / ``y_val`` (their ptr and idx arrays unused). A csr row meets a dense one
    by direct reads; two csr rows by walking the shorter and binary-searching the longer."""
    p = s_rows[s]
    q = s_idx[s]
    out[s] = 0
    if x_dense and y_dense:
        for l in range(k):
            out[s] += x_val[p * k + l] * y_val[q * k + l]
    elif y_dense:
        for j in range(x_ptr[p], x_ptr[p + 1]):
            out[s] += x_val[j] * y_val[q * k + x_idx[j]]
    elif x_dense:
        for j in range(y_ptr[q], y_ptr[q + 1]):
            out[s] += x_val[p * k + y_idx[j]] * y_val[j]
    else:
        i0, i1 = x_ptr[p], x_ptr[p + 1]
        j0, j1 = y_ptr[q], y_ptr[q + 1]
        swap = (i1 - i0) > (j1 - j0)
        a0, a1, b0, b1 = (j0, j1, i0, i1) if swap else (i0, i1, j0, j1)
        for a in range(a0, a1):
            col = y_idx[a] if swap else x_idx[a]
            lo, hi = b0, b1  # first position in [b0, b1) whose column is >= col
            while lo < hi:
                mid = (lo + hi) // 2
                c = x_idx[mid] if swap else y_idx[mid]
                if c < col:
                    lo = mid + 1
                else:
                    hi = mid
            b0 = lo
            if lo < b1:
                c = x_idx[lo] if swap else y_idx[lo]
                if c == col:
                    out[s] += (x_val[lo] * y_val[a]) if swap else (x_val[a] * y_val[lo])
                    b0 = lo + 1


@jit()
def close_gaps(idx, val, bases, starts):
    """Chunk t's entries, at bases[t] in ``idx`` and ``val``, moved down to starts[t] (the
    chunks' lengths: the starts' differences), in place: chunk by chunk, front to back,
    every entry moves to a lower or the same position (``memmove``: the ranges may overlap)."""
    for t in range(starts.shape[0] - 1):
        s, d = bases[t], starts[t]
        if s != d:
            move(idx, d, s, starts[t + 1] - d)
            move(val, d, s, starts[t + 1] - d)


# ---- host drivers ------------------------------------------------------------------------------
CHUNKS_PER_THREAD = 4  # row chunks per numba thread: evens out rows of uneven cost
# B's columns are renumbered to its stored ones when there are this many times more
# columns than stored values: the per-chunk accumulators then fit the data, not the width
SPARSE_COLUMNS = 4
# a product whose work (multiply-adds) bounds its output under this many bytes of index and
# value is computed in one pass, into rooms of that size closed up after; a larger one
# counts its rows' lengths first, so its memory stays that of the output
ONE_PASS_BYTES = 256 << 20


def chunk_bounds(work: np.ndarray, chunks: int) -> np.ndarray:
    """Row boundaries splitting rows of cost ``work`` into ``chunks`` ranges of about equal
    total (int64, first 0, last the row count)."""
    rows = work.shape[0]
    chunks = max(1, min(chunks, rows))
    cum = np.cumsum(work)
    total = int(cum[-1]) if rows else 0
    inner = np.searchsorted(cum, total * np.arange(1, chunks) / chunks, side="left") + 1
    return np.unique(np.concatenate(([0], np.minimum(inner, rows), [rows]))).astype(np.int64)


def _schedule(work: np.ndarray, parallel: bool, threads: int) -> np.ndarray:
    return chunk_bounds(work, threads * CHUNKS_PER_THREAD) if parallel else \
        np.array([0, work.shape[0]], dtype=np.int64)


def spgemm(a: tuple, b: tuple, n_cols: int, index_dtype: Any, parallel: bool | None = None,
           threads: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(indptr, indices, values) of A @ B for canonical csr parts ``a`` and ``b`` given as
    (indptr, indices, values), B having ``n_cols`` columns: canonical, exact zeros dropped.
    Index arrays of ``index_dtype``, or int64 when the product's nnz needs it. It runs on
    ``threads`` (default: numba's) threads when ``parallel`` (default: when the work, in
    multiply-adds, pays for them: the project's ``parallel_worth``)."""
    a_ptr, a_idx, a_val = a
    b_ptr, b_idx, b_val = b
    columns = None
    if n_cols > SPARSE_COLUMNS * max(1, b_idx.shape[0]):  # accumulators by stored column, not all columns
        columns = np.unique(b_idx)
        b_idx = np.searchsorted(columns, b_idx).astype(b_idx.dtype, copy=False)
        n_cols = columns.shape[0]
    rows = a_ptr.shape[0] - 1
    work = np.empty(rows + 1, dtype=np.int64)
    work[0] = 0
    row_work(a_ptr, a_idx, b_ptr, work[1:])
    flops = int(work.sum())
    threads = numba.get_num_threads() if threads is None else threads
    parallel = threads > 1 and (parallel_worth(flops) if parallel is None else parallel)
    bounds = _schedule(work[1:], parallel, threads)
    idt = np.dtype(index_dtype)
    if flops * (idt.itemsize + a_val.dtype.itemsize) <= ONE_PASS_BYTES:
        # one pass: each row gets room for its work (an upper bound on its length)
        ends = np.cumsum(work, out=work)
    else:  # two passes: the symbolic pass sizes each row exactly
        ends = np.zeros(rows + 1, dtype=np.int64)
        if flops:
            if parallel:
                spgemm_count(a_ptr, a_idx, b_ptr, b_idx, n_cols, bounds, ends[1:])
            else:
                spgemm_count_rows(a_ptr, a_idx, b_ptr, b_idx, n_cols, 0, rows, ends[1:])
        np.cumsum(ends, out=ends)
    bases = ends[bounds]  # where each chunk's rows start (the last: the end of the room)
    room = int(bases[-1])
    if room > np.iinfo(idt).max:
        idt = np.dtype(np.int64)
    indices = np.empty(room, dtype=idt)
    values = np.empty(room, dtype=a_val.dtype)
    kept = np.zeros(rows + 1, dtype=np.int64)
    if room:
        if parallel:
            spgemm_fill(a_ptr, a_idx, a_val, b_ptr, b_idx, b_val, n_cols, bounds, bases, indices, values, kept[1:])
        else:
            spgemm_fill_rows(a_ptr, a_idx, a_val, b_ptr, b_idx, b_val, n_cols, 0, rows, 0, indices, values, kept[1:])
    ptr = np.cumsum(kept, out=kept)
    starts = ptr[bounds]  # where each chunk's rows belong in the output
    if not np.array_equal(starts, bases):  # rooms left between chunks: close them up
        close_gaps(indices, values, bases, starts)
        nnz = int(ptr[-1])
        indices.resize(nnz, refcheck=False)  # realloc in place: the arrays are ours, unshared
        values.resize(nnz, refcheck=False)
    if columns is not None:  # renumbered columns back (an increasing map: rows stay sorted)
        indices = columns[indices].astype(idt, copy=False)
    return ptr.astype(idt, copy=False), indices, values


def sampled(ctx: Any, s_ptr: Any, s_idx: Any, x: Any, y: Any, k: int, dtype: Any) -> Any:
    """The values of (X @ Y.T) at the stored entries of the csr structure (``s_ptr``,
    ``s_idx``), for X (one row per row of S) and Y (one row per column of S), both ``k``
    wide, each csr parts (indptr, indices, values) or a dense row-major 2-d array, values
    of ``dtype``; on ``ctx``'s device (None: the cpu)."""
    from ..sdk.csr import row_ids

    xp = np if ctx is None else ctx.xp
    out = xp.empty(s_idx.shape[0], dtype=dtype)
    if not out.shape[0]:
        return out
    none = xp.zeros(1, dtype=s_idx.dtype)

    def parts(m: Any) -> tuple:
        if isinstance(m, tuple):
            return m[0], m[1], m[2], False
        return none, none, xp.ascontiguousarray(m).reshape(-1), True

    xp_, xi, xv, xd = parts(x)
    yp, yi, yv, yd = parts(y)
    per_entry = k if (xd and yd) else max(1, (xv.shape[0] if not xd else yv.shape[0]) // max(1, s_ptr.shape[0] - 1))
    rows = row_ids(ctx, s_ptr)
    sampled_entry(ctx, out.shape[0], rows, s_idx, xp_, xi, xv, xd, yp, yi, yv, yd, k, out,
                  work=out.shape[0] * per_entry)
    return out
