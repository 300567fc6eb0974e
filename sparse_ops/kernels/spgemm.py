"""numba CPU kernels of sparse @ sparse: ``dot(csr, csr)`` (SpGEMM) and its gradient, the
product of two operands sampled at a csr matrix's stored entries (SDDMM).

SpGEMM is Gustavson's row-by-row product over row chunks of about equal work
(multiply-adds), run in parallel: one worker a thread, each with its own accumulator,
taking the next chunk left from an atomic counter (``fetch_add``), so a thread slowed by
other work on a shared machine takes fewer chunks instead of holding up the rest; each
chunk owns its output rows, so there are no other atomics. A numeric pass adds each row's
products into a dense accumulator and marks their columns in a two-level bitmap without a
branch, then writes the row's columns in increasing order, read off the bitmap (or, for a
few products spread over a wide range, collected again and sorted), dropping the entries
that summed to exactly zero (SciPy's ``A @ B`` drops them too; the sums are SciPy's: the
same order, in the value dtype). Its room comes from the rows' work, an upper bound on
their lengths, when that bound is small enough; otherwise a symbolic pass first counts
each row's distinct columns, so the output is allocated once, exactly. Either way a chunk
may end short of its room (repeated columns, zero sums), so each finished chunk is moved
down to its place (one ``memmove``) as soon as every chunk before it has been, by whichever
thread finds it so (``move_finished_chunks``, one thread at a time under a lock taken by an
atomic compare-and-swap): the moves overlap the other threads' products and mostly read
what was just written, instead of a pass over the whole output after. The rows' work is
counted in parallel too.

Both passes jump to a row of B for each stored value of A; they prefetch the row pointer
PTR_AHEAD values ahead and the row ROW_AHEAD values ahead (``prefetch``: the lines of its
first and last stored values, a short row's two lines where it straddles them), which the
hardware's stream prefetchers cannot guess.

Inputs are validated, canonical csr parts (sorted, unique columns); values arrive widened
to float32, float64 or int64 and share one dtype.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np
from numba import prange, types
from numba.core import cgutils
from numba.cpython.unsafe.numbers import trailing_zeros
from numba.extending import intrinsic, register_jitable

from ..sdk.rowkernel import parallel_worth, row_kernel
from . import jit
from .memmove import move
from .prefetch import prefetch


@intrinsic
def fetch_add(typingctx: Any, array: Any, i: Any, v: Any) -> Any:
    """``array[i] += v`` as one atomic step (LLVM's ``atomicrmw add``, sequentially
    consistent), returning the value before: a counter threads share without a lock."""
    if not (isinstance(array, types.Array) and array.ndim == 1 and isinstance(array.dtype, types.Integer)
            and isinstance(i, types.Integer) and isinstance(v, types.Integer)):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        aryty, ity, vty = signature.args
        ary = context.make_array(aryty)(context, builder, args[0])
        index = context.cast(builder, args[1], ity, types.intp)
        ptr = cgutils.get_item_pointer2(context, builder, data=ary.data, shape=cgutils.unpack_tuple(builder, ary.shape),
                                        strides=cgutils.unpack_tuple(builder, ary.strides), layout=aryty.layout,
                                        inds=[index], wraparound=False, boundscheck=False)
        return builder.atomic_rmw("add", ptr, context.cast(builder, args[2], vty, aryty.dtype), "seq_cst")

    return array.dtype(array, i, v), codegen


@intrinsic
def compare_exchange(typingctx: Any, array: Any, i: Any, expected: Any, new: Any) -> Any:
    """``array[i] = new`` if ``array[i] == expected``, as one atomic step (LLVM's ``cmpxchg``,
    sequentially consistent), returning the value before: a lock is taken when it returns
    ``expected``."""
    if not (isinstance(array, types.Array) and array.ndim == 1 and isinstance(array.dtype, types.Integer)
            and all(isinstance(t, types.Integer) for t in (i, expected, new))):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        aryty, ity, ety, nty = signature.args
        ary = context.make_array(aryty)(context, builder, args[0])
        index = context.cast(builder, args[1], ity, types.intp)
        ptr = cgutils.get_item_pointer2(context, builder, data=ary.data, shape=cgutils.unpack_tuple(builder, ary.shape),
                                        strides=cgutils.unpack_tuple(builder, ary.strides), layout=aryty.layout,
                                        inds=[index], wraparound=False, boundscheck=False)
        pair = builder.cmpxchg(ptr, context.cast(builder, args[2], ety, aryty.dtype),
                               context.cast(builder, args[3], nty, aryty.dtype), "seq_cst", "seq_cst")
        return builder.extract_value(pair, 0)

    return array.dtype(array, i, expected, new), codegen


PTR_AHEAD, ROW_AHEAD = 16, 8  # prefetch distances in stored values of A (the row's must have arrived)


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
def row_work_worker(a_ptr, a_idx, b_ptr, work, bounds, taken):
    """``row_work`` for the row blocks ``bounds[t]:bounds[t+1]``, taking the next untaken t
    (``taken[0]``, an atomic counter) until none is left."""
    t = fetch_add(taken, 0, 1)
    while t < bounds.shape[0] - 1:
        for i in range(bounds[t], bounds[t + 1]):
            s = 0
            for j in range(a_ptr[i], a_ptr[i + 1]):
                c = a_idx[j]
                s += b_ptr[c + 1] - b_ptr[c]
            work[i] = s
        t = fetch_add(taken, 0, 1)


@jit(parallel=True)
def row_work_parallel(a_ptr, a_idx, b_ptr, work, bounds, workers):
    """``row_work`` on ``workers`` threads, taking the row blocks ``bounds[t]:bounds[t+1]`` in turn."""
    taken = np.zeros(1, dtype=np.int64)
    for _ in prange(workers):
        row_work_worker(a_ptr, a_idx, b_ptr, work, bounds, taken)


@jit()
def spgemm_count_rows(a_ptr, a_idx, b_ptr, b_idx, n_cols, lo, hi, counts, mark):
    """counts[i] = distinct columns of row i of A @ B for lo <= i < hi, with a marker array
    ``mark`` of n_cols entries (the last row that met each column; -1 or rows before lo)."""
    stored = a_idx.shape[0]
    for i in range(lo, hi):
        c = 0
        for j in range(a_ptr[i], a_ptr[i + 1]):
            if j + PTR_AHEAD < stored:  # the rows of B that A's next values select: a jump per value
                prefetch(b_ptr, a_idx[j + PTR_AHEAD])
            if j + ROW_AHEAD < stored:
                ahead = a_idx[j + ROW_AHEAD]
                _prefetch_ends(b_idx, b_ptr[ahead], b_ptr[ahead + 1])
            r = np.uint64(a_idx[j])
            for q in range(np.uint64(b_ptr[r]), np.uint64(b_ptr[r + np.uint64(1)])):
                col = np.uint64(b_idx[q])
                new = mark[col] != i
                mark[col] = i
                c += new
        counts[i] = c


@jit()
def spgemm_count_worker(a_ptr, a_idx, b_ptr, b_idx, n_cols, bounds, counts, taken):
    """``spgemm_count_rows`` for the row chunks ``bounds[t]:bounds[t+1]``, taking the next
    untaken t (``taken[0]``, an atomic counter) until none is left, with one marker array."""
    mark = np.full(n_cols, -1, dtype=np.int64)
    t = fetch_add(taken, 0, 1)
    while t < bounds.shape[0] - 1:
        spgemm_count_rows(a_ptr, a_idx, b_ptr, b_idx, n_cols, bounds[t], bounds[t + 1], counts, mark)
        t = fetch_add(taken, 0, 1)


@jit(parallel=True)
def spgemm_count(a_ptr, a_idx, b_ptr, b_idx, n_cols, bounds, counts, workers):
    """``spgemm_count_rows`` for the row chunks ``bounds[t]:bounds[t+1]``, in parallel on
    ``workers`` threads taking chunks in turn (as ``spgemm_fill``)."""
    taken = np.zeros(1, dtype=np.int64)
    for _ in prange(workers):
        spgemm_count_worker(a_ptr, a_idx, b_ptr, b_idx, n_cols, bounds, counts, taken)


@jit()
def _insertion_sort(a, lo, hi):
    """Sort a[lo:hi] in place (for a few values)."""
    for k in range(lo + 1, hi):
        c = a[k]
        s = k - 1
        while s >= lo and a[s] > c:
            a[s + 1] = a[s]
            s -= 1
        a[s + 1] = c


@jit()
def walks(first, last, work):
    """Whether a row of ``work`` products, its columns within [first, last], leaves the
    accumulator by the bitmap walk (its range spans at most 2 * work + 8 words of the
    bitmap's second level, 4,096 columns each) rather than collected again and sorted."""
    return (last >> 12) - (first >> 12) <= 2 * work + 8


@jit()
def fill_workspace(n_cols, dtype):
    """The accumulator of ``spgemm_fill_rows``, zero: (bitmap, its second level, values)."""
    words = (n_cols + 63) >> 6
    return np.zeros(words, dtype=np.uint64), np.zeros((words + 63) >> 6, dtype=np.uint64), np.zeros(n_cols, dtype=dtype)


@jit()
def spgemm_fill_rows(a_ptr, a_idx, a_val, b_ptr, b_idx, b_val, n_cols, lo, hi, base, out_idx, out_val, kept,
                     bits, top, acc):
    """Rows lo <= i < hi of A @ B, one after another from out[base]: columns increasing,
    values summed in the accumulator, entries summing to zero dropped; kept[i] is row i's
    length. The region must hold the rows' distinct columns before the drop (their counts,
    or their work as an upper bound).

    Each product is added into a dense accumulator (zero between rows) and its column
    marked in a bitmap (one bit a column, 8 KiB per 65,536 columns: it stays in the L1
    cache) with a second level marking its nonzero words, without a branch: the inner loop
    is a few instructions a multiply-add (indices unsigned, so numba adds no wraparound of
    negative ones). A row's columns then come out in increasing order by walking the words
    of its column range that the second level marks, taking each value and zeroing it
    (clearing the bitmap for the next row). A row whose range spans many more words of the
    second level than its work (a few products spread wide: the walk would cost more than
    the row) collects its columns instead by reading its rows of B again (in the cache now),
    clearing each bit as it is met, and sorts them (insertion sort up to 32 values).
    Zeros are dropped by not advancing the write position (no branch on the value). The
    accumulator (``fill_workspace``) arrives zero and is left zero. Returns where the rows
    end (``base`` plus their lengths)."""
    o = np.uint64(base)
    if hi > lo:
        zero, one, six, low = np.uint64(0), np.uint64(1), np.uint64(6), np.uint64(63)
        stored = a_idx.shape[0]
        for i in range(lo, hi):
            start = o
            work = 0
            first, last = n_cols, -1
            for j in range(a_ptr[i], a_ptr[i + 1]):
                if j + PTR_AHEAD < stored:  # the rows of B that A's next values select: a jump per value
                    prefetch(b_ptr, a_idx[j + PTR_AHEAD])
                if j + ROW_AHEAD < stored:
                    ahead = a_idx[j + ROW_AHEAD]
                    _prefetch_ends(b_idx, b_ptr[ahead], b_ptr[ahead + 1])
                    _prefetch_ends(b_val, b_ptr[ahead], b_ptr[ahead + 1])
                r = np.uint64(a_idx[j])
                v = a_val[j]
                q0, q1 = np.uint64(b_ptr[r]), np.uint64(b_ptr[r + one])
                if q1 > q0:
                    work += np.int64(q1 - q0)
                    first = min(first, np.int64(b_idx[q0]))
                    last = max(last, np.int64(b_idx[q1 - one]))
                for q in range(q0, q1):
                    col = np.uint64(b_idx[q])
                    w = col >> six
                    bits[w] |= one << (col & low)
                    top[w >> six] |= one << (w & low)
                    acc[col] += v * b_val[q]
            if work == 0:
                kept[i] = 0
                continue
            if walks(first, last, work):  # walk the marked words in order
                for tw in range(np.uint64(first >> 12), np.uint64((last >> 12) + 1)):
                    t = top[tw]
                    top[tw] = zero
                    while t != zero:
                        w = (tw << six) + np.uint64(trailing_zeros(t))
                        t &= t - one
                        word = bits[w]
                        bits[w] = zero
                        while word != zero:
                            col = (w << six) + np.uint64(trailing_zeros(word))
                            word &= word - one
                            x = acc[col]
                            acc[col] = 0
                            out_idx[o] = col
                            out_val[o] = x
                            o += np.uint64(x != 0)
            else:  # few columns spread wide: collect them again, then sort
                p = start
                for j in range(a_ptr[i], a_ptr[i + 1]):
                    r = np.uint64(a_idx[j])
                    for q in range(np.uint64(b_ptr[r]), np.uint64(b_ptr[r + one])):
                        col = np.uint64(b_idx[q])
                        w = col >> six
                        m = one << (col & low)
                        if bits[w] & m != zero:  # first meeting of the column: clear it
                            bits[w] ^= m
                            top[w >> six] = zero  # all of the row's bits end cleared
                            out_idx[p] = col
                            p += one
                ks, kp = np.int64(start), np.int64(p)
                if kp - ks <= 32:
                    _insertion_sort(out_idx, ks, kp)
                else:
                    out_idx[ks:kp].sort()
                for s in range(start, p):
                    col = np.uint64(out_idx[s])
                    x = acc[col]
                    acc[col] = 0
                    out_idx[o] = col
                    out_val[o] = x
                    o += np.uint64(x != 0)
            kept[i] = np.int64(o - start)
    return np.int64(o)


# the slots of ``move_finished_chunks``'s state: the lock, the next chunk to move, where it goes
LOCK, NEXT, PLACE = 0, 1, 2


@jit()
def move_finished_chunks(out_idx, out_val, bases, lengths, done, state):
    """Move each finished chunk down to its place in the output, in order, as far as the
    chunks are finished: chunk t's ``lengths[t]`` entries, written from ``bases[t]``, go to
    ``state[PLACE]`` (the lengths of the chunks before it added up), once ``done[t]`` is set
    and every chunk before t has moved; then the next. Its place overlaps only the rooms of
    chunks already moved (rooms are upper bounds), never a chunk still being computed.

    One thread moves at a time: the one that takes ``state[LOCK]`` (compare-and-swap 0 to 1);
    a thread that finds it taken goes on with its products, and the holder looks again for
    a finished chunk after letting go, so a chunk finished meanwhile is not left behind."""
    chunks = bases.shape[0] - 1
    while compare_exchange(state, LOCK, 0, 1) == 0:
        t, place = state[NEXT], state[PLACE]
        while t < chunks and fetch_add(done, t, 0) != 0:  # (an atomic read)
            n = lengths[t]
            if place != bases[t]:
                move(out_idx, place, bases[t], n)
                move(out_val, place, bases[t], n)
            place += n
            t += 1
        state[NEXT], state[PLACE] = t, place
        fetch_add(state, LOCK, -1)
        if t >= chunks or fetch_add(done, t, 0) == 0:
            return


@jit()
def spgemm_fill_worker(a_ptr, a_idx, a_val, b_ptr, b_idx, b_val, n_cols, bounds, bases, out_idx, out_val, kept,
                       taken, lengths, done, state):
    """Row chunks ``bounds[t]:bounds[t+1]`` from ``bases[t]``, taking the next untaken t
    (``taken[0]``, an atomic counter) until none is left, with one accumulator for all;
    each finished chunk's length goes to ``lengths[t]``, then ``done[t]`` is set and the
    finished chunks are moved to their places (``move_finished_chunks``)."""
    chunks = bounds.shape[0] - 1
    bits, top, acc = fill_workspace(n_cols, out_val.dtype)
    t = fetch_add(taken, 0, 1)
    while t < chunks:
        end = spgemm_fill_rows(a_ptr, a_idx, a_val, b_ptr, b_idx, b_val, n_cols, bounds[t], bounds[t + 1], bases[t],
                               out_idx, out_val, kept, bits, top, acc)
        lengths[t] = end - bases[t]
        fetch_add(done, t, 1)  # after the chunk's writes: the atomic step orders them before it
        move_finished_chunks(out_idx, out_val, bases, lengths, done, state)
        t = fetch_add(taken, 0, 1)


@jit(parallel=True)
def spgemm_fill(a_ptr, a_idx, a_val, b_ptr, b_idx, b_val, n_cols, bounds, bases, out_idx, out_val, kept, workers,
                lengths, done, state):
    """``spgemm_fill_rows`` for the row chunks ``bounds[t]:bounds[t+1]`` from ``bases[t]``, in
    parallel: ``workers`` loop iterations (one a thread), each taking the next chunk left
    until none is (numba's OpenMP layer hands each thread a fixed share of a loop's
    iterations: a thread slowed by other work on a shared machine would hold up the rest),
    moving finished chunks to their places on the way (``spgemm_fill_worker``)."""
    taken = np.zeros(1, dtype=np.int64)
    for _ in prange(workers):
        spgemm_fill_worker(a_ptr, a_idx, a_val, b_ptr, b_idx, b_val, n_cols, bounds, bases, out_idx, out_val, kept,
                           taken, lengths, done, state)


# how ``sampled_entry`` reads X or Y: csr parts; a row-major dense matrix (values k wide); or
# a row_sparse matrix's stored rows (ptr: their sorted row ids; values k wide): a hashed
# table's few rows read where they are, never densified
CSR, DENSE, STORED_ROWS = 0, 1, 2


@register_jitable  # numba compiles it into either device's kernel; the CUDA simulator calls it as Python
def stored_position(rows, r):
    """The position of row id ``r`` among the sorted ``rows``, or -1 when it is not stored."""
    lo, hi = 0, rows.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        if rows[mid] < r:
            lo = mid + 1
        else:
            hi = mid
    return lo if lo < rows.shape[0] and rows[lo] == r else -1


@row_kernel
def sampled_entry(s, s_rows, s_idx, x_ptr, x_idx, x_val, x_mode, y_ptr, y_idx, y_val, y_mode, k, out):
    """out[s] = sum over l of X[p, l] * Y[q, l] for the stored entry s = (s_rows[s], s_idx[s])
    of a csr structure S: (X @ Y.T) sampled at S, never formed whole. X and Y are each read
    as ``x_mode`` / ``y_mode`` says (``CSR``, ``DENSE`` or ``STORED_ROWS``; the arrays a
    form does not use are ignored). A stored row is found by binary search and then read as
    a dense one (a row not stored gives 0); a csr row meets a dense one by direct reads; two
    csr rows by walking the shorter and binary-searching the longer."""
    p = s_rows[s]
    q = s_idx[s]
    out[s] = 0
    if x_mode == STORED_ROWS:
        p = stored_position(x_ptr, p)
    if y_mode == STORED_ROWS:
        q = stored_position(y_ptr, q)
    x_dense = x_mode != CSR
    y_dense = y_mode != CSR
    if p < 0 or q < 0:
        pass
    elif x_dense and y_dense:
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


# ---- host drivers ------------------------------------------------------------------------------
CHUNKS_PER_THREAD = 16  # row chunks per numba thread, taken in turn: evens out uneven rows and threads
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
           threads: int | None = None, timings: dict | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(indptr, indices, values) of A @ B for canonical csr parts ``a`` and ``b`` given as
    (indptr, indices, values), B having ``n_cols`` columns: canonical, exact zeros dropped.
    Index arrays of ``index_dtype``, or int64 when the product's nnz needs it. It runs on
    ``threads`` (default: numba's) threads when ``parallel`` (default: when the work, in
    multiply-adds, pays for them: the project's ``parallel_worth``).

    ``timings``, a dict, receives the seconds of each phase (``bound``: the rows' work, an
    upper bound on their lengths, and the chunks; ``symbolic``: the counting pass, 0 when
    the work bounds the rooms; ``allocation``; ``numeric``: the products, and the chunks
    moved to their places meanwhile; ``closing``: what is left after, the chunks no thread
    had moved yet and the arrays shrunk to the output) and what they moved: ``flops``,
    ``room``, ``moved`` (entries moved down to their places), ``one_pass``."""
    clock = time.perf_counter
    t0 = clock()
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
    threads = numba.get_num_threads() if threads is None else threads
    stored = a_idx.shape[0]
    if threads > 1 and rows > 1 and (parallel_worth(stored) if parallel is None else parallel):
        blocks = threads * CHUNKS_PER_THREAD  # blocks of rows of about equal stored values
        cuts = np.searchsorted(a_ptr, np.arange(1, blocks) * (stored / blocks), side="left").clip(0, rows)
        cuts = np.unique(np.concatenate(([0], cuts, [rows]))).astype(np.int64)
        row_work_parallel(a_ptr, a_idx, b_ptr, work[1:], cuts, min(threads, cuts.shape[0] - 1))
    else:
        row_work(a_ptr, a_idx, b_ptr, work[1:])
    flops = int(work.sum())
    parallel = threads > 1 and (parallel_worth(flops) if parallel is None else parallel)
    bounds = _schedule(work[1:], parallel, threads)
    idt = np.dtype(index_dtype)
    one_pass = flops * (idt.itemsize + a_val.dtype.itemsize) <= ONE_PASS_BYTES
    t1 = clock()
    if one_pass:  # each row gets room for its work (an upper bound on its length)
        ends = np.cumsum(work, out=work)
    else:  # two passes: the symbolic pass sizes each row exactly
        ends = np.zeros(rows + 1, dtype=np.int64)
        if flops:
            if parallel:
                spgemm_count(a_ptr, a_idx, b_ptr, b_idx, n_cols, bounds, ends[1:], min(threads, bounds.shape[0] - 1))
            else:
                spgemm_count_rows(a_ptr, a_idx, b_ptr, b_idx, n_cols, 0, rows, ends[1:],
                                  np.full(n_cols, -1, dtype=np.int64))
        np.cumsum(ends, out=ends)
    t2 = clock()
    bases = ends[bounds]  # where each chunk's rows start (the last: the end of the room)
    room = int(bases[-1])
    if room > np.iinfo(idt).max:
        idt = np.dtype(np.int64)
    indices = np.empty(room, dtype=idt)
    values = np.empty(room, dtype=a_val.dtype)
    kept = np.zeros(rows + 1, dtype=np.int64)
    t3 = clock()
    if room:
        if parallel:
            chunks = bounds.shape[0] - 1
            lengths, done = np.zeros(chunks, dtype=np.int64), np.zeros(chunks, dtype=np.int64)
            state = np.zeros(3, dtype=np.int64)
            spgemm_fill(a_ptr, a_idx, a_val, b_ptr, b_idx, b_val, n_cols, bounds, bases, indices, values, kept[1:],
                        min(threads, chunks), lengths, done, state)
        else:
            spgemm_fill_rows(a_ptr, a_idx, a_val, b_ptr, b_idx, b_val, n_cols, 0, rows, 0, indices, values, kept[1:],
                             *fill_workspace(n_cols, values.dtype))
    t4 = clock()
    if room and parallel:  # every chunk done: any the threads left unmoved
        move_finished_chunks(indices, values, bases, lengths, done, state)
    ptr = np.cumsum(kept, out=kept)
    starts = ptr[bounds]  # where each chunk's rows belong in the output
    moved = int(ptr[-1] - starts[np.argmax(starts != bases)]) if not np.array_equal(starts, bases) else 0
    nnz = int(ptr[-1])
    if nnz != room:  # shorter than the room: give the rest back (realloc in place: the arrays are ours)
        indices.resize(nnz, refcheck=False)
        values.resize(nnz, refcheck=False)
    if columns is not None:  # renumbered columns back (an increasing map: rows stay sorted)
        indices = columns[indices].astype(idt, copy=False)
    ptr = ptr.astype(idt, copy=False)
    if timings is not None:
        timings.update(bound=t1 - t0, symbolic=t2 - t1, allocation=t3 - t2, numeric=t4 - t3, closing=clock() - t4,
                       flops=flops, room=room, moved=moved, one_pass=one_pass)
    return ptr, indices, values


@dataclass(frozen=True)
class StoredRows:
    """A row_sparse matrix for ``sampled``: its sorted stored row ids and their values (a
    row-major 2-d array, one row each)."""
    rows: Any
    values: Any

    @property
    def dtype(self) -> Any:
        return self.values.dtype


def sampled(ctx: Any, s_ptr: Any, s_idx: Any, x: Any, y: Any, k: int, dtype: Any) -> Any:
    """The values of (X @ Y.T) at the stored entries of the csr structure (``s_ptr``,
    ``s_idx``), for X (one row per row of S) and Y (one row per column of S), both ``k``
    wide, each csr parts (indptr, indices, values), a dense row-major 2-d array or
    ``StoredRows``, values of ``dtype``; on ``ctx``'s device (None: the cpu)."""
    from ..sdk.csr import row_ids

    xp = np if ctx is None else ctx.xp
    out = xp.empty(s_idx.shape[0], dtype=dtype)
    if not out.shape[0]:
        return out
    none = xp.zeros(1, dtype=s_idx.dtype)

    def parts(m: Any) -> tuple:
        if isinstance(m, StoredRows):
            return m.rows, none, xp.ascontiguousarray(m.values).reshape(-1), STORED_ROWS
        if isinstance(m, tuple):
            return m[0], m[1], m[2], CSR
        return none, none, xp.ascontiguousarray(m).reshape(-1), DENSE

    xp_, xi, xv, xm = parts(x)
    yp, yi, yv, ym = parts(y)
    per_entry = k if CSR not in (xm, ym) else \
        max(1, (xv.shape[0] if xm == CSR else yv.shape[0]) // max(1, s_ptr.shape[0] - 1))
    rows = row_ids(ctx, s_ptr)
    sampled_entry(ctx, out.shape[0], rows, s_idx, xp_, xi, xv, xm, yp, yi, yv, ym, k, out,
                  work=out.shape[0] * per_entry)
    return out
