"""Embedding kernels: a checked row gather and the per-id sums of its gradient.

The gather and the id check are per-id bodies (``sparse_ops.sdk.rowkernel``, reducing form:
each returns whether its id is invalid, the call returns the count), run serially or in
parallel by the project's one parallel-size policy (small embedding batches run serially:
waking the worker threads costs more than a batch of a few thousand rows takes).
The gradient ranks the ids with a hash table (``sparse_ops.sdk.groups.rank_ids``: no sort
of all ids, only of the distinct ones), then adds each head row into its id's row in the
order of the ids: here serially (``scatter_add_rows``), or grouped by id
(``sdk.groups.group_by_rank``) and summed per group in parallel by
``sparse_ops.sdk.csr.segment_sum_rows``; a row's sum is the same either way.
"""
from ..sdk.rowkernel import row_kernel
from . import jit
from .prefetch import prefetch_row

ROWS_AHEAD = 8  # the gather prefetches the row of the id this many ids ahead (rows picked by id: no stream)


@row_kernel(total="int64")
def gather_row(i, ids, weight, out):
    """out[i, :] = weight[int(ids[i]), :]; returns whether the id is invalid.

    An id is valid when ``-1 < id < len(weight)`` (so float ids truncate toward zero as a
    cast does, and NaN is invalid); rows of invalid ids are zeroed, never read. Callers
    pass rows as unsigned words, so one compiled kernel serves every value dtype.
    """
    # rows indexed in place, not taken as views: numba reference-counts a view per row here
    # (1.6x the time of a 4,096-id batch)
    if i + ROWS_AHEAD < ids.shape[0]:
        prefetch_row(weight, ids[i + ROWS_AHEAD])
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
def scatter_add_rows(rank, values, dest_rows, dest):
    """dest[dest_rows[rank[i]], :] += values[i, :] for every i, in order of i."""
    for i in range(rank.shape[0]):
        dst = dest[dest_rows[rank[i]]]
        src = values[i]
        for j in range(dst.shape[0]):
            dst[j] += src[j]
