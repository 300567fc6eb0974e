"""Embedding kernels: a checked row gather and the per-id segment sum of its gradient."""
from numba import prange

from . import jit


@jit(parallel=True)
def gather_rows(ids, weight, out):
    """out[i, :] = weight[int(ids[i]), :]; returns how many ids fall outside [0, len(weight)).

    An id is valid when ``-1 < id < len(weight)`` (so float ids truncate toward zero as a
    cast does, and NaN is invalid); rows of invalid ids are zeroed, never read. Callers
    pass rows as bytes (uint8), so one compiled kernel serves every value dtype.
    """
    n = weight.shape[0]
    bad = 0
    for i in prange(ids.shape[0]):
        v = ids[i]
        if v > -1 and v < n:
            k = int(v)
            for j in range(weight.shape[1]):
                out[i, j] = weight[k, j]
        else:
            bad += 1
            for j in range(out.shape[1]):
                out[i, j] = 0
    return bad


@jit(parallel=True)
def count_out_of_range(ids, n):
    """How many ids fail ``-1 < id < n`` (NaN fails)."""
    bad = 0
    for i in prange(ids.shape[0]):
        v = ids[i]
        if not (v > -1 and v < n):
            bad += 1
    return bad


@jit(parallel=True)
def segment_sum_rows(order, starts, values, dest_rows, dest):
    """dest[dest_rows[u], :] = sum of values[order[k], :] for k in [starts[u], starts[u + 1]).

    ``order`` lists the rows of ``values`` grouped by id; each group writes one distinct
    destination row, so the groups run in parallel without races.
    """
    for u in prange(starts.shape[0] - 1):
        r = dest_rows[u]
        for j in range(dest.shape[1]):
            dest[r, j] = 0
        for k in range(starts[u], starts[u + 1]):
            src = order[k]
            for j in range(dest.shape[1]):
                dest[r, j] += values[src, j]
