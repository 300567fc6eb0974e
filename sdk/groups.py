"""Grouping integer keys without sorting every one of them: the distinct keys of an array
ranked through a hash table (``rank_ids``: O(n), then a radix sort of the distinct keys
only, ``radix_argsort``), and the positions holding each key listed in order
(``group_by_rank``: a counting sort of the ranks). An embedding's gradient groups its ids
this way, and ``sdk.csr.group_columns`` a csr's stored values by column; a comparison sort
of all the keys takes several times as long on the ids of a training batch.

Host kernels (numba, ``sparse_ops.kernels.jit``'s settings), loaded on first use.
"""
import numpy as np

from sparse_ops.kernels import jit


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
