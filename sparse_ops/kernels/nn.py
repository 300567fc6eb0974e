"""Embedding kernels: a checked row gather and the per-id sums of its gradient.

The gather and the id check are per-id bodies (``sparse_ops.sdk.rowkernel``, reducing form:
each returns whether its id is invalid, the call returns the count), run serially or in
parallel by the project's one parallel-size policy (small embedding batches run serially:
waking the worker threads costs more than a batch of a few thousand rows takes).
The gradient ranks the ids with a hash table (no sort of all ids, only of the distinct
ones), then adds each head row into its id's row in the order of the ids: here serially
(``scatter_add_rows``), or grouped by id (``group_by_rank``) and summed per group in
parallel by ``sparse_ops.sdk.csr.segment_sum_rows``; a row's sum is the same either way.
"""
import numpy as np

from ..sdk.rowkernel import row_kernel
from . import jit


@row_kernel(total="int64")
def gather_row(i, ids, weight, out):
    """out[i, :] = weight[int(ids[i]), :]; returns whether the id is invalid.

    An id is valid when ``-1 < id < len(weight)`` (so float ids truncate toward zero as a
    cast does, and NaN is invalid); rows of invalid ids are zeroed, never read. Callers
    pass rows as unsigned words, so one compiled kernel serves every value dtype.
    """
    # rows indexed in place, not taken as views: numba reference-counts a view per row here
    # (1.6x the time of a 4,096-id batch)
    v = ids[i]
    valid = v > -1 and v < weight.shape[0]
    if valid:
        k = int(v)
        for j in range(out.shape[1]):
            out[i, j] = weight[k, j]
    else:
        for j in range(out.shape[1]):
            out[i, j] = 0
    return not valid


@row_kernel(total="int64")
def out_of_range_id(i, ids, n):
    """Whether ids[i] fails ``-1 < id < n`` (NaN fails)."""
    v = ids[i]
    return not (v > -1 and v < n)


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
