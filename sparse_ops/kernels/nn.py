"""Embedding kernels: a checked row gather and the per-id sums of its gradient.

Each row kernel has a serial form over a range of rows and a parallel driver that splits
the rows among the threads; the operators call the serial form for small inputs (waking
the worker threads costs more than an embedding batch of a few thousand rows takes).
The gradient ranks the ids with a hash table (no sort of all ids, only of the distinct
ones), then adds each head row into its id's row in the order of the ids: here serially
(``scatter_add_rows``), or grouped by id (``group_by_rank``) and summed per group in
parallel by ``sparse_ops.sdk.csr.segment_sum_rows``; a row's sum is the same either way.
"""
import numpy as np
from numba import prange

from . import jit

ROWS_PER_TASK = 256


@jit()
def gather_rows_range(ids, weight, out, start, stop):
    """out[i, :] = weight[int(ids[i]), :] for start <= i < stop; returns how many of those
    ids fall outside [0, len(weight)).

    An id is valid when ``-1 < id < len(weight)`` (so float ids truncate toward zero as a
    cast does, and NaN is invalid); rows of invalid ids are zeroed, never read. Callers
    pass rows as bytes (uint8), so one compiled kernel serves every value dtype.
    """
    n = weight.shape[0]
    bad = 0
    for i in range(start, stop):
        v = ids[i]
        dst = out[i]
        if v > -1 and v < n:
            src = weight[int(v)]
            for j in range(dst.shape[0]):
                dst[j] = src[j]
        else:
            bad += 1
            for j in range(dst.shape[0]):
                dst[j] = 0
    return bad


@jit(parallel=True)
def gather_rows(ids, weight, out):
    """``gather_rows_range`` over all ids, blocks of rows in parallel."""
    m = ids.shape[0]
    bad = 0
    for t in prange((m + ROWS_PER_TASK - 1) // ROWS_PER_TASK):
        bad += gather_rows_range(ids, weight, out, t * ROWS_PER_TASK, min(m, (t + 1) * ROWS_PER_TASK))
    return bad


@jit()
def count_out_of_range_serial(ids, n):
    """How many ids fail ``-1 < id < n`` (NaN fails)."""
    bad = 0
    for i in range(ids.shape[0]):
        v = ids[i]
        if not (v > -1 and v < n):
            bad += 1
    return bad


@jit(parallel=True)
def count_out_of_range(ids, n):
    """``count_out_of_range_serial`` with the ids split among the threads."""
    bad = 0
    for i in prange(ids.shape[0]):
        v = ids[i]
        if not (v > -1 and v < n):
            bad += 1
    return bad


@jit()
def radix_argsort(keys, bound):
    """The permutation sorting int64 ``keys`` in [0, bound) ascending (stable LSD radix
    sort, 11 bits a pass: two passes for a million-row table, where numba's quicksort
    argsort took 2.5x as long on the 1,365 distinct ids of the benchmark batch)."""
    n = keys.shape[0]
    perm = np.arange(n)
    tmp = np.empty(n, dtype=np.int64)
    counts = np.empty(2049, dtype=np.int64)
    shift = 0
    while n > 1:
        counts[:] = 0
        for i in range(n):
            counts[((keys[i] >> shift) & 2047) + 1] += 1
        for d in range(2048):
            counts[d + 1] += counts[d]
        for i in range(n):
            p = perm[i]
            d = (keys[p] >> shift) & 2047
            tmp[counts[d]] = p
            counts[d] += 1
        perm, tmp = tmp, perm
        shift += 11
        if shift > 55 or (bound - 1) >> shift == 0:  # keys have at most 63 bits
            break
    return perm


@jit()
def rank_ids(ids, n):
    """(rank, unique, bad) of ids that index rows [0, n).

    ``unique`` holds the distinct ids ascending (int64) and ``ids[i]`` truncates to
    ``unique[rank[i]]``. ``bad`` counts the ids failing ``-1 < id < n``; when it is not
    zero the other results are meaningless. O(len(ids)) with an open-addressing hash table
    (Fibonacci hashing, linear probing), plus a radix sort of the distinct ids only.
    """
    m = ids.shape[0]
    bits = 4
    while (1 << bits) < 2 * m:
        bits += 1
    mask = (1 << bits) - 1
    shift = np.uint64(64 - bits)
    keys = np.full(1 << bits, -1, dtype=np.int64)
    slot_group = np.empty(1 << bits, dtype=np.int64)
    group = np.empty(m, dtype=np.int64)
    first = np.empty(m, dtype=np.int64)  # the id of each group, in order of first appearance
    groups = 0
    bad = 0
    for i in range(m):
        v = ids[i]
        if not (v > -1 and v < n):
            bad += 1
            group[i] = 0
            continue
        k = np.int64(v)
        s = np.int64((np.uint64(k) * np.uint64(0x9E3779B97F4A7C15)) >> shift)
        while True:
            if keys[s] == k:
                group[i] = slot_group[s]
                break
            if keys[s] == -1:
                keys[s] = k
                slot_group[s] = groups
                first[groups] = k
                group[i] = groups
                groups += 1
                break
            s = (s + 1) & mask
    perm = radix_argsort(first[:groups], n)
    rank_of_group = np.empty(groups, dtype=np.int64)
    for r in range(groups):
        rank_of_group[perm[r]] = r
    for i in range(m):
        group[i] = rank_of_group[group[i]]
    return group, first[:groups][perm], bad


@jit()
def scatter_add_rows(rank, values, dest_rows, dest):
    """dest[dest_rows[rank[i]], :] += values[i, :] for every i, in order of i."""
    for i in range(rank.shape[0]):
        dst = dest[dest_rows[rank[i]]]
        src = values[i]
        for j in range(dst.shape[0]):
            dst[j] += src[j]


@jit()
def group_by_rank(rank, groups):
    """(order, starts): group u (``rank == u``) is ``order[starts[u]:starts[u + 1]]``, its
    members ascending (a counting sort of ``rank``)."""
    starts = np.zeros(groups + 1, dtype=np.int64)
    for i in range(rank.shape[0]):
        starts[rank[i] + 1] += 1
    for u in range(groups):
        starts[u + 1] += starts[u]
    fill = starts[:-1].copy()
    order = np.empty(rank.shape[0], dtype=np.int64)
    for i in range(rank.shape[0]):
        u = rank[i]
        order[fill[u]] = i
        fill[u] += 1
    return order, starts
