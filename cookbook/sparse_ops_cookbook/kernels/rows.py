"""The recipes' kernels: one body per kernel for both devices, and thin drivers.

Each kernel is a per-row body (``sparse_ops.sdk.rowkernel.row_kernel``): plain numba with
no SDK types inside, writing into arrays its caller allocated. The SDK builds its cpu
drivers (serial, or ``numba.prange`` over blocks of rows when the work passes the
project's one size policy ``parallel_worth``) and its gpu driver (a thread per row, or a
warp per row for ``lanes=True`` bodies, whose lanes stride over a feature dimension or a
row's stored values) from that one source. The public functions are what the operators
call, the same on both devices: ``fn(ctx, ...)``.

The csr structure work (transpose, csr @ dense, dropping empty rows) is the SDK's own
(``sparse_ops.sdk.csr``). Light memory-bound passes (gathers, the softmax gradient, the
graph normalisation run once per graph, the row_sparse transpose) are serial on the cpu
(``parallel=False``): measured on 2 threads, more threads did not pay. Both cpu forms add up each row in the same order, so they give
bit-identical results. Scalar accumulators are float64 whatever the value dtype; rows of
a product accumulate in the output's dtype, as SciPy's do.
"""
from __future__ import annotations

import math

from sparse_ops.sdk import csr
from sparse_ops.sdk.rowkernel import row_kernel

OPTIMIZER_COST = 4  # work units per value of the optimizer rows: sqrt, division and a random row


# ---- csr structure -----------------------------------------------------------------------------
def transpose(ctx, n_cols, indptr, indices, data, out_indptr, out_indices, out_data) -> None:
    """Write the csr of the transpose of a csr with ``n_cols`` columns into the out arrays."""
    csr.transpose_into(ctx, n_cols, indptr, indices, data, out_indptr, out_indices, out_data)


nonempty_rows = csr.nonempty_rows


@row_kernel(lanes=True, parallel=False)
def _gather_dense(r, lane, lanes, indptr, indices, dense, out):
    for p in range(indptr[r] + lane, indptr[r + 1], lanes):
        out[p] = dense[r, indices[p]]


def gather_dense(ctx, indptr, indices, dense, out) -> None:
    """out[p] = dense[row of p, indices[p]]: a dense array read at a csr's positions."""
    _gather_dense(ctx, indptr.shape[0] - 1, indptr, indices, dense, out, work=indices.shape[0])


@row_kernel(lanes=True, parallel=False)
def _gather_csr(r, lane, lanes, indptr, indices, s_indptr, s_indices, s_data, out):
    lo0 = s_indptr[r]
    hi0 = s_indptr[r + 1]
    for p in range(indptr[r] + lane, indptr[r + 1], lanes):
        c = indices[p]
        lo = lo0
        hi = hi0
        while lo < hi:  # binary search for column c in row r of s
            mid = (lo + hi) // 2
            if s_indices[mid] < c:
                lo = mid + 1
            else:
                hi = mid
        if lo < hi0 and s_indices[lo] == c:
            out[p] = s_data[lo]
        else:
            out[p] = 0


def gather_csr(ctx, indptr, indices, s_indptr, s_indices, s_data, out) -> None:
    """out[p] = the value csr ``s`` stores at the position of stored value p, else 0."""
    _gather_csr(ctx, indptr.shape[0] - 1, indptr, indices, s_indptr, s_indices, s_data, out,
                work=indices.shape[0])


# ---- products ----------------------------------------------------------------------------------
def spmm(ctx, indptr, indices, data, x, mean: bool, out) -> None:
    """out[r, :] = sum over stored (r, j) of value * x[j, :]; divided by the row's stored
    count when ``mean`` (empty rows give zeros)."""
    csr.csr_dense(ctx, indptr, indices, data, x, out, mean=mean)


@row_kernel(lanes=True)
def _sddmm(i, lane, lanes, indptr, indices, lhs, rhs, out):
    k = lhs.shape[1]
    for p in range(indptr[i] + lane, indptr[i + 1], lanes):
        j = indices[p]
        acc = out.dtype.type(0.0)
        for f in range(k):
            acc += lhs[i, f] * rhs[j, f]
        out[p] = acc


def sddmm(ctx, indptr, indices, lhs, rhs, out) -> None:
    """out[p] = sum_k lhs[i, k] * rhs[j, k] for each stored (i, j): the sampled product."""
    _sddmm(ctx, indptr.shape[0] - 1, indptr, indices, lhs, rhs, out, work=indices.shape[0] * lhs.shape[1])


# ---- softmax over each row's stored values -----------------------------------------------------
@row_kernel
def _row_softmax(r, indptr, data, out):
    lo = indptr[r]
    hi = indptr[r + 1]
    if lo < hi:
        top = data[lo]
        for p in range(lo + 1, hi):
            top = max(top, data[p])
        total = out.dtype.type(0.0)
        for p in range(lo, hi):
            e = math.exp(data[p] - top)
            out[p] = e
            total += e
        inv = out.dtype.type(1.0) / total
        for p in range(lo, hi):
            out[p] *= inv


def row_softmax(ctx, indptr, data, out) -> None:
    """Softmax of each row's stored values (max subtracted first, so large values are safe)."""
    _row_softmax(ctx, indptr.shape[0] - 1, indptr, data, out, work=data.shape[0])


@row_kernel(parallel=False)
def _row_softmax_backward(r, indptr, y, g, out):
    start = indptr[r]
    end = indptr[r + 1]
    dot = out.dtype.type(0.0)
    for p in range(start, end):
        dot += g[p] * y[p]
    for p in range(start, end):
        out[p] = y[p] * (g[p] - dot)


def row_softmax_backward(ctx, indptr, y, g, out) -> None:
    """dx = y * (g - sum(g * y)) within each row (y the softmax, g its gradient)."""
    _row_softmax_backward(ctx, indptr.shape[0] - 1, indptr, y, g, out, work=y.shape[0])


# ---- factorization machine ---------------------------------------------------------------------
@row_kernel
def _fm_forward(i, indptr, indices, data, v, scratch, out):
    # scratch[i] holds row i's sums (s) and sums of squares (q) per factor, in the value
    # dtype: the factor loops stay vectorised (float32 as float32), and each row owns
    # its scratch (a gpu thread cannot allocate one)
    k = v.shape[1]
    for f in range(k):
        scratch[i, 0, f] = 0
        scratch[i, 1, f] = 0
    for p in range(indptr[i], indptr[i + 1]):
        x = data[p]
        j = indices[p]
        for f in range(k):
            t = x * v[j, f]
            scratch[i, 0, f] += t
            scratch[i, 1, f] += t * t
    acc = out.dtype.type(0.0)
    for f in range(k):
        acc += scratch[i, 0, f] * scratch[i, 0, f] - scratch[i, 1, f]
    out[i] = out.dtype.type(0.5) * acc


def fm_forward(ctx, indptr, indices, data, v, out) -> None:
    """out[i] = 0.5 * sum_f ((sum_j x_ij v_jf)^2 - sum_j x_ij^2 v_jf^2), one pass over X."""
    scratch = ctx.xp.empty((out.shape[0], 2, v.shape[1]), dtype=v.dtype)
    _fm_forward(ctx, out.shape[0], indptr, indices, data, v, scratch, out, work=indices.shape[0] * v.shape[1])


@row_kernel(lanes=True)
def _fm_backward(q, lane, lanes, t_indptr, t_indices, t_data, rows, v, g, s, out):
    k = v.shape[1]
    j = rows[q]
    for f in range(lane, k, lanes):
        out[q, f] = 0
    c = out.dtype.type(0.0)
    for p in range(t_indptr[q], t_indptr[q + 1]):
        i = t_indices[p]
        w = g[i] * t_data[p]
        c += w * t_data[p]
        for f in range(lane, k, lanes):
            out[q, f] += w * s[i, f]
    for f in range(lane, k, lanes):
        out[q, f] -= v[j, f] * c


def fm_backward_rows(ctx, t_indptr, t_indices, t_data, rows, v, g, s, out) -> None:
    """Row q of the V gradient (feature j = rows[q]) from X's transpose restricted to its
    non-empty rows: dV[j, f] = sum_i g_i x_ij s_if - v_jf sum_i g_i x_ij^2, s = X @ V."""
    _fm_backward(ctx, rows.shape[0], t_indptr, t_indices, t_data, rows, v, g, s, out,
                 work=t_indices.shape[0] * v.shape[1])


# ---- graph normalization -----------------------------------------------------------------------
@row_kernel(parallel=False)
def _gcn_count(r, indptr, indices, data, self_loops, counts, degree):
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


def gcn_count(ctx, indptr, indices, data, self_loops: bool, counts, degree) -> None:
    """Per row: how many values A (+ I) stores, and its degree (row sum of A (+ I))."""
    _gcn_count(ctx, indptr.shape[0] - 1, indptr, indices, data, self_loops, counts, degree, work=indices.shape[0])


@row_kernel(parallel=False)
def _gcn_fill(r, indptr, indices, data, self_loops, dinv, out_indptr, out_indices, out_data):
    q = out_indptr[r]
    pending = self_loops  # the diagonal is still to be added
    for p in range(indptr[r], indptr[r + 1]):
        c = indices[p]
        value = data[p]
        if pending and c >= r:
            if c == r:
                value += out_data.dtype.type(1.0)
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


def gcn_fill(ctx, indptr, indices, data, self_loops: bool, dinv, out_indptr, out_indices, out_data) -> None:
    """Row r of D^-1/2 (A (+ I)) D^-1/2, the diagonal inserted in column order when A
    stores none there."""
    _gcn_fill(ctx, indptr.shape[0] - 1, indptr, indices, data, self_loops, dinv, out_indptr, out_indices,
              out_data, work=indices.shape[0])


# ---- lazy optimizers ----------------------------------------------------------------------------
@row_kernel(lanes=True, cost=OPTIMIZER_COST)
def _adagrad(q, lane, lanes, weight, rows, grad, history, lr, epsilon, wd):
    r = rows[q]
    for f in range(lane, weight.shape[1], lanes):
        g = grad[q, f] + wd * weight[r, f]
        h = history[r, f] + g * g
        history[r, f] = h
        weight[r, f] -= lr * g / (math.sqrt(h) + epsilon)


def adagrad_rows(ctx, weight, rows, grad, history, lr, epsilon, wd) -> None:
    """On rows ``rows`` (grad row q is weight row rows[q]): g' = g + wd * w;
    h += g'^2; w -= lr * g' / (sqrt(h) + epsilon). The scalars are taken in the weight's dtype,
    so a float32 table updates in float32."""
    lr, epsilon, wd = (weight.dtype.type(v) for v in (lr, epsilon, wd))
    _adagrad(ctx, rows.shape[0], weight, rows, grad, history, lr, epsilon, wd, work=grad.size)


@row_kernel(lanes=True, cost=OPTIMIZER_COST)
def _adam(q, lane, lanes, weight, rows, grad, mean, var, lr, beta1, beta2, epsilon, wd, correction1, correction2):
    r = rows[q]
    one = weight.dtype.type(1.0)
    for f in range(lane, weight.shape[1], lanes):
        g = grad[q, f] + wd * weight[r, f]
        m = beta1 * mean[r, f] + (one - beta1) * g
        v = beta2 * var[r, f] + (one - beta2) * g * g
        mean[r, f] = m
        var[r, f] = v
        weight[r, f] -= lr * (m / correction1) / (math.sqrt(v / correction2) + epsilon)


def adam_rows(ctx, weight, rows, grad, mean, var, lr, beta1, beta2, epsilon, wd, correction1, correction2) -> None:
    """Adam with bias correction (``correction1 = 1 - beta1**t``, ``correction2 = 1 -
    beta2**t``) on rows ``rows``; the scalars in the weight's dtype (a float32 table updates in float32)."""
    lr, beta1, beta2, epsilon, wd, correction1, correction2 = (
        weight.dtype.type(v) for v in (lr, beta1, beta2, epsilon, wd, correction1, correction2))
    _adam(ctx, rows.shape[0], weight, rows, grad, mean, var, lr, beta1, beta2, epsilon, wd, correction1,
          correction2, work=grad.size)


# ---- row_sparse transpose ------------------------------------------------------------------------
@row_kernel(lanes=True, parallel=False)
def _mark_nonzero_columns(r, lane, lanes, data, flags):
    for c in range(lane, data.shape[1], lanes):
        if data[r, c] != 0:
            flags[c] = 1  # every writer writes the same value


@row_kernel(lanes=True, parallel=False)
def _rsp_transpose_fill(q, lane, lanes, indices, data, keep, zero_first, out):
    # zero_first: the cpu clears the row it then scatters into (in cache); gpu lanes
    # would race doing that, so there ``out`` arrives zeroed
    c = keep[q]
    if zero_first:
        for f in range(out.shape[1]):
            out[q, f] = 0
    for r in range(lane, indices.shape[0], lanes):
        out[q, indices[r]] = data[r, c]


def rsp_transpose(ctx, n_rows: int, indices, data):
    """(values, rows) of the row_sparse transpose of a matrix with ``n_rows`` rows whose
    stored rows are ``indices``/``data``: rows of the result are the columns holding a
    non-zero (row q is column rows[q])."""
    xp = ctx.xp
    flags = xp.zeros(data.shape[1], dtype=xp.uint8)
    _mark_nonzero_columns(ctx, data.shape[0], data, flags, work=data.size)
    keep = xp.flatnonzero(flags).astype(indices.dtype)
    on_gpu = ctx.device.device_type == "gpu"
    out = (xp.zeros if on_gpu else xp.empty)((keep.shape[0], n_rows), dtype=data.dtype)
    _rsp_transpose_fill(ctx, keep.shape[0], indices, data, keep, not on_gpu, out,
                        work=keep.shape[0] * indices.shape[0])
    return out, keep
