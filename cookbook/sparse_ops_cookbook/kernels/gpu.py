"""The recipes' gpu kernels: numba.cuda, launched with a grid from ``sparse_ops.sdk.launch``.

On a real GPU the arrays are CuPy (numba reads them through ``__cuda_array_interface__``,
no copies) and launches go to the op context's stream; under ``SPARSE_OPS_CUDA_SIM=1``
they are NumPy and numba's CUDA simulator runs the very same kernels, so every line here
is exercised without a GPU.

Layouts: ``warp_per_row`` for csr rows (lanes stride over a feature dimension, or over
the row's stored values), ``rows_grid`` where a row's work is a sequential scan,
``grid_for`` for element-wise work. Reductions across the lanes of a warp go through
shared memory with ``cuda.syncthreads()`` (portable to the simulator, which has no warp
shuffles), so those kernels keep every thread alive to the end. Atomics only count;
values are placed by a stable sort, so results never depend on thread timing. Scalar
accumulators are float64.
"""
from __future__ import annotations

import math

import numpy as np
from numba import cuda

from sparse_ops.sdk.launch import WARP_SIZE, grid_for, launch, rows_grid, warp_per_row

_BLOCK_LIMIT = 256  # threads per block of the warp_per_row kernels with shared scratch (8 warps)


# ---- csr structure -----------------------------------------------------------------------------
@cuda.jit(cache=True)
def _count_columns(indices, counts):
    p = cuda.grid(1)
    if p < indices.shape[0]:
        cuda.atomic.add(counts, indices[p] + 1, 1)


@cuda.jit(cache=True)
def _row_ids(indptr, out):
    """out[p] = the row of stored value p (one warp per row)."""
    lane = cuda.threadIdx.x % WARP_SIZE
    row = cuda.blockIdx.x * (cuda.blockDim.x // WARP_SIZE) + cuda.threadIdx.x // WARP_SIZE
    if row < indptr.shape[0] - 1:
        for p in range(indptr[row] + lane, indptr[row + 1], WARP_SIZE):
            out[p] = row


def transpose(ctx, n_cols, indptr, indices, data, out_indptr, out_indices, out_data) -> None:
    """Write the csr of the transpose of a csr with ``n_cols`` columns into the out arrays:
    count per column (atomics) and scan for the indptr; a stable sort of the column
    indices (CuPy's radix sort) orders the values, each output row listing its source
    rows in increasing order. Deterministic, and no row is too long for it (a hub node's
    column of a power-law graph would stall a one-thread-per-row sort)."""
    xp = ctx.xp
    nnz = indices.shape[0]
    counts = xp.zeros(n_cols + 1, dtype=out_indptr.dtype)
    if nnz:
        launch(ctx, _count_columns, grid_for(nnz), indices, counts)
    xp.cumsum(counts, out=out_indptr)
    if nnz:
        rows = xp.empty(nnz, dtype=out_indices.dtype)
        launch(ctx, _row_ids, warp_per_row(indptr.shape[0] - 1), indptr, rows)
        order = xp.argsort(indices, kind="stable")
        xp.take(rows, order, out=out_indices)
        xp.take(data, order, out=out_data)


def nonempty_rows(ctx, indptr):
    """(rows holding a stored value, the indptr of the csr keeping only those rows)."""
    xp = ctx.xp
    rows = xp.flatnonzero(indptr[1:] != indptr[:-1])
    return rows, xp.concatenate((indptr[rows], indptr[-1:])).astype(indptr.dtype, copy=False)


@cuda.jit(cache=True)
def _gather_dense(indptr, indices, dense, out):
    lane = cuda.threadIdx.x % WARP_SIZE
    row = cuda.blockIdx.x * (cuda.blockDim.x // WARP_SIZE) + cuda.threadIdx.x // WARP_SIZE
    if row < indptr.shape[0] - 1:
        for p in range(indptr[row] + lane, indptr[row + 1], WARP_SIZE):
            out[p] = dense[row, indices[p]]


@cuda.jit(cache=True)
def _gather_csr(indptr, indices, s_indptr, s_indices, s_data, out):
    lane = cuda.threadIdx.x % WARP_SIZE
    row = cuda.blockIdx.x * (cuda.blockDim.x // WARP_SIZE) + cuda.threadIdx.x // WARP_SIZE
    if row < indptr.shape[0] - 1:
        lo0 = s_indptr[row]
        hi0 = s_indptr[row + 1]
        for p in range(indptr[row] + lane, indptr[row + 1], WARP_SIZE):
            c = indices[p]
            lo = lo0
            hi = hi0
            while lo < hi:
                mid = (lo + hi) // 2
                if s_indices[mid] < c:
                    lo = mid + 1
                else:
                    hi = mid
            if lo < hi0 and s_indices[lo] == c:
                out[p] = s_data[lo]
            else:
                out[p] = 0


def gather_dense(ctx, indptr, indices, dense, out) -> None:
    launch(ctx, _gather_dense, warp_per_row(indptr.shape[0] - 1), indptr, indices, dense, out)


def gather_csr(ctx, indptr, indices, s_indptr, s_indices, s_data, out) -> None:
    launch(ctx, _gather_csr, warp_per_row(indptr.shape[0] - 1), indptr, indices, s_indptr, s_indices,
           s_data, out)


# ---- products ----------------------------------------------------------------------------------
@cuda.jit(cache=True)
def _spmm(indptr, indices, data, x, mean, out):
    """One warp per row, lanes over the output columns: reads of x[j, :] are coalesced."""
    lane = cuda.threadIdx.x % WARP_SIZE
    row = cuda.blockIdx.x * (cuda.blockDim.x // WARP_SIZE) + cuda.threadIdx.x // WARP_SIZE
    if row < out.shape[0]:
        start = indptr[row]
        end = indptr[row + 1]
        scale = 1.0
        if mean and end > start:
            scale = 1.0 / (end - start)
        for f in range(lane, out.shape[1], WARP_SIZE):
            acc = 0.0
            for p in range(start, end):
                acc += data[p] * x[indices[p], f]
            out[row, f] = acc * scale


def spmm(ctx, indptr, indices, data, x, mean: bool, out) -> None:
    """out = A @ x (rows divided by their stored count when ``mean``)."""
    if out.shape[0] == 0:
        return
    launch(ctx, _spmm, warp_per_row(out.shape[0]), indptr, indices, data, x, mean, out)


@cuda.jit(cache=True)
def _sddmm(indptr, indices, lhs, rhs, out):
    """One warp per row, lanes over the row's stored values."""
    lane = cuda.threadIdx.x % WARP_SIZE
    row = cuda.blockIdx.x * (cuda.blockDim.x // WARP_SIZE) + cuda.threadIdx.x // WARP_SIZE
    if row < indptr.shape[0] - 1:
        for p in range(indptr[row] + lane, indptr[row + 1], WARP_SIZE):
            j = indices[p]
            acc = 0.0
            for f in range(lhs.shape[1]):
                acc += lhs[row, f] * rhs[j, f]
            out[p] = acc


def sddmm(ctx, indptr, indices, lhs, rhs, out) -> None:
    launch(ctx, _sddmm, warp_per_row(indptr.shape[0] - 1), indptr, indices, lhs, rhs, out)


# ---- reductions across a warp --------------------------------------------------------------------
@cuda.jit(device=True)
def _warp_sum(scratch, base, lane, value):
    """Sum of ``value`` over the 32 lanes of a warp, returned to every lane. Every thread
    of the block must call it (it synchronises the block). Each lane reads the warp's 32
    slots (broadcast reads, no bank conflicts): two barriers instead of a tree's six."""
    scratch[base + lane] = value
    cuda.syncthreads()
    total = 0.0
    for i in range(WARP_SIZE):
        total += scratch[base + i]
    cuda.syncthreads()  # every lane has read before the scratch is reused
    return total


@cuda.jit(device=True)
def _warp_max(scratch, base, lane, value):
    """Maximum of ``value`` over a warp's lanes (same contract as _warp_sum)."""
    scratch[base + lane] = value
    cuda.syncthreads()
    top = scratch[base]
    for i in range(1, WARP_SIZE):
        top = max(top, scratch[base + i])
    cuda.syncthreads()
    return top


# ---- softmax over each row's stored values -----------------------------------------------------
@cuda.jit(cache=True)
def _row_softmax(indptr, data, out):
    scratch = cuda.shared.array(_BLOCK_LIMIT, np.float64)
    lane = cuda.threadIdx.x % WARP_SIZE
    base = cuda.threadIdx.x - lane
    row = cuda.blockIdx.x * (cuda.blockDim.x // WARP_SIZE) + cuda.threadIdx.x // WARP_SIZE
    start = 0
    end = 0
    if row < indptr.shape[0] - 1:
        start = indptr[row]
        end = indptr[row + 1]
    top = -math.inf
    for p in range(start + lane, end, WARP_SIZE):
        top = max(top, data[p])
    top = _warp_max(scratch, base, lane, top)
    part = 0.0
    for p in range(start + lane, end, WARP_SIZE):
        part += math.exp(data[p] - top)
    total = _warp_sum(scratch, base, lane, part)
    for p in range(start + lane, end, WARP_SIZE):
        out[p] = math.exp(data[p] - top) / total


@cuda.jit(cache=True)
def _row_softmax_backward(indptr, y, g, out):
    scratch = cuda.shared.array(_BLOCK_LIMIT, np.float64)
    lane = cuda.threadIdx.x % WARP_SIZE
    base = cuda.threadIdx.x - lane
    row = cuda.blockIdx.x * (cuda.blockDim.x // WARP_SIZE) + cuda.threadIdx.x // WARP_SIZE
    start = 0
    end = 0
    if row < indptr.shape[0] - 1:
        start = indptr[row]
        end = indptr[row + 1]
    part = 0.0
    for p in range(start + lane, end, WARP_SIZE):
        part += g[p] * y[p]
    dot = _warp_sum(scratch, base, lane, part)
    for p in range(start + lane, end, WARP_SIZE):
        out[p] = y[p] * (g[p] - dot)


def row_softmax(ctx, indptr, data, out) -> None:
    launch(ctx, _row_softmax, warp_per_row(indptr.shape[0] - 1), indptr, data, out)


def row_softmax_backward(ctx, indptr, y, g, out) -> None:
    launch(ctx, _row_softmax_backward, warp_per_row(indptr.shape[0] - 1), indptr, y, g, out)


# ---- factorization machine ---------------------------------------------------------------------
@cuda.jit(cache=True)
def _fm_forward(indptr, indices, data, v, out):
    """One warp per sample, lanes over the factors; the lanes' partial sums meet in shared
    memory."""
    scratch = cuda.shared.array(_BLOCK_LIMIT, np.float64)
    lane = cuda.threadIdx.x % WARP_SIZE
    base = cuda.threadIdx.x - lane
    row = cuda.blockIdx.x * (cuda.blockDim.x // WARP_SIZE) + cuda.threadIdx.x // WARP_SIZE
    start = 0
    end = 0
    if row < out.shape[0]:
        start = indptr[row]
        end = indptr[row + 1]
    part = 0.0
    for f in range(lane, v.shape[1], WARP_SIZE):
        s = 0.0
        q = 0.0
        for p in range(start, end):
            t = data[p] * v[indices[p], f]
            s += t
            q += t * t
        part += s * s - q
    total = _warp_sum(scratch, base, lane, part)
    if lane == 0 and row < out.shape[0]:
        out[row] = 0.5 * total


@cuda.jit(cache=True)
def _fm_backward(t_indptr, t_indices, t_data, rows, v, g, s, out):
    """One warp per stored feature (a row of X's transpose), lanes over the factors."""
    lane = cuda.threadIdx.x % WARP_SIZE
    q = cuda.blockIdx.x * (cuda.blockDim.x // WARP_SIZE) + cuda.threadIdx.x // WARP_SIZE
    if q < rows.shape[0]:
        j = rows[q]
        start = t_indptr[q]
        end = t_indptr[q + 1]
        c = 0.0
        for p in range(start, end):
            c += g[t_indices[p]] * t_data[p] * t_data[p]
        for f in range(lane, v.shape[1], WARP_SIZE):
            acc = 0.0
            for p in range(start, end):
                i = t_indices[p]
                acc += g[i] * t_data[p] * s[i, f]
            out[q, f] = acc - v[j, f] * c


def fm_forward(ctx, indptr, indices, data, v, out) -> None:
    launch(ctx, _fm_forward, warp_per_row(out.shape[0]), indptr, indices, data, v, out)


def fm_backward_rows(ctx, t_indptr, t_indices, t_data, rows, v, g, s, out) -> None:
    if rows.shape[0]:
        launch(ctx, _fm_backward, warp_per_row(rows.shape[0]), t_indptr, t_indices, t_data, rows, v, g, s, out)


# ---- graph normalization -----------------------------------------------------------------------
@cuda.jit(cache=True)
def _gcn_count(indptr, indices, data, self_loops, counts, degree):
    r = cuda.grid(1)
    if r < indptr.shape[0] - 1:
        start = indptr[r]
        end = indptr[r + 1]
        total = 0.0
        has_diag = False
        for p in range(start, end):
            total += data[p]
            if indices[p] == r:
                has_diag = True
        n = end - start
        if self_loops:
            total += 1.0
            if not has_diag:
                n += 1
        counts[r] = n
        degree[r] = total


@cuda.jit(cache=True)
def _gcn_fill(indptr, indices, data, self_loops, dinv, out_indptr, out_indices, out_data):
    r = cuda.grid(1)
    if r < indptr.shape[0] - 1:
        q = out_indptr[r]
        pending = self_loops
        for p in range(indptr[r], indptr[r + 1]):
            c = indices[p]
            value = data[p]
            if pending and c >= r:
                if c == r:
                    value += 1.0
                else:
                    out_indices[q] = r
                    out_data[q] = dinv[r] * dinv[r]
                    q += 1
                pending = False
            out_indices[q] = c
            out_data[q] = value * dinv[r] * dinv[c]
            q += 1
        if pending:
            out_indices[q] = r
            out_data[q] = dinv[r] * dinv[r]


def gcn_count(ctx, indptr, indices, data, self_loops: bool, counts, degree) -> None:
    launch(ctx, _gcn_count, rows_grid(indptr.shape[0] - 1), indptr, indices, data, self_loops, counts, degree)


def gcn_fill(ctx, indptr, indices, data, self_loops: bool, dinv, out_indptr, out_indices, out_data) -> None:
    launch(ctx, _gcn_fill, rows_grid(indptr.shape[0] - 1), indptr, indices, data, self_loops, dinv,
           out_indptr, out_indices, out_data)


# ---- lazy optimizers ----------------------------------------------------------------------------
@cuda.jit(cache=True)
def _adagrad(weight, rows, grad, history, lr, epsilon, wd):
    i = cuda.grid(1)
    width = weight.shape[1]
    if i < rows.shape[0] * width:
        q = i // width
        f = i - q * width
        r = rows[q]
        g = grad[q, f] + wd * weight[r, f]
        h = history[r, f] + g * g
        history[r, f] = h
        weight[r, f] -= lr * g / (math.sqrt(h) + epsilon)


@cuda.jit(cache=True)
def _adam(weight, rows, grad, mean, var, lr, beta1, beta2, epsilon, wd, correction1, correction2):
    i = cuda.grid(1)
    width = weight.shape[1]
    if i < rows.shape[0] * width:
        q = i // width
        f = i - q * width
        r = rows[q]
        g = grad[q, f] + wd * weight[r, f]
        m = beta1 * mean[r, f] + (1.0 - beta1) * g
        v = beta2 * var[r, f] + (1.0 - beta2) * g * g
        mean[r, f] = m
        var[r, f] = v
        weight[r, f] -= lr * (m / correction1) / (math.sqrt(v / correction2) + epsilon)


def adagrad_rows(ctx, weight, rows, grad, history, lr, epsilon, wd) -> None:
    launch(ctx, _adagrad, grid_for(rows.shape[0] * weight.shape[1]), weight, rows, grad, history, lr, epsilon, wd)


def adam_rows(ctx, weight, rows, grad, mean, var, lr, beta1, beta2, epsilon, wd, correction1, correction2) -> None:
    launch(ctx, _adam, grid_for(rows.shape[0] * weight.shape[1]), weight, rows, grad, mean, var, lr, beta1,
           beta2, epsilon, wd, correction1, correction2)


# ---- row_sparse transpose ------------------------------------------------------------------------
@cuda.jit(cache=True)
def _mark_nonzero_columns(data, flags):
    i = cuda.grid(1)
    width = data.shape[1]
    if i < data.shape[0] * width:
        c = i % width
        if data[i // width, c] != 0:
            flags[c] = 1  # every writer writes the same value: no atomic needed


@cuda.jit(cache=True)
def _rsp_transpose_fill(indices, data, keep, out):
    i = cuda.grid(1)
    n = indices.shape[0]
    if i < keep.shape[0] * n:
        q = i // n
        r = i - q * n
        out[q, indices[r]] = data[r, keep[q]]


def rsp_transpose(ctx, n_rows: int, indices, data):
    """(values, rows) of the row_sparse transpose of a matrix with ``n_rows`` rows whose
    stored rows are ``indices``/``data``: rows of the result are the columns holding a
    non-zero."""
    xp = ctx.xp
    flags = xp.zeros(data.shape[1], dtype=np.int32)
    if data.size:
        launch(ctx, _mark_nonzero_columns, grid_for(data.size), data, flags)
    keep = xp.flatnonzero(flags).astype(indices.dtype)
    out = xp.zeros((keep.shape[0], n_rows), dtype=data.dtype)
    if keep.shape[0] and indices.shape[0]:
        launch(ctx, _rsp_transpose_fill, grid_for(keep.shape[0] * indices.shape[0]), indices, data, keep, out)
    return out, keep
