"""The recipes' cpu kernels: plain numba (no SDK types inside) and thin drivers.

Kernels are compiled with ``sparse_ops.sdk.jit`` (numba's ``njit`` with the SDK's settings:
on-disk cache, nogil, a threading layer safe for kernels launched from several threads,
bounds checking in the debug mode ``SPARSE_OPS_BOUNDSCHECK=1``).

The numba kernels (underscored) write into arrays their caller allocated. The public
functions are the drivers the operators call; ``kernels/gpu.py`` has the same functions
with the same arguments, launching numba.cuda kernels instead, so an operator's kernel
method is written once for both devices (``backend(ctx)`` picks the module).

Every kernel compiles on first use for the dtypes it meets and is cached on disk. Where a
row does enough arithmetic to pay for more cores (products, softmax forward, factorization
machines, optimizer steps) a kernel has two forms: a serial one over a range of rows (``_name_rows(..., start, stop)``) and a parallel one (``_name``) that
splits the rows into blocks of ``ROWS_PER_TASK`` with ``numba.prange`` and runs the serial
one on each. The driver runs the parallel form only for at least ``PARALLEL_MIN_WORK``
multiply-adds (or values) and more than one numba thread: waking the worker threads costs
~50-100 us on a quiet machine and milliseconds on a loaded one, more than a small input
takes serially. Both forms add up each row in the same order, so they give bit-identical
results. Light memory-bound passes (gathers, the graph normalisation run once per graph)
are serial only, which also keeps their compilation cheap. Scalar accumulators are float64
whatever the value dtype; rows of a product accumulate in the output's dtype, as SciPy's do.

(The two forms are two Python functions on purpose: numba's on-disk cache key ignores the
``parallel`` flag, so two dispatchers of one function would share a cache entry.)
"""
from __future__ import annotations

import math

import numba
import numpy as np

from sparse_ops.sdk import jit as _jit

# Below this much work (stored values x columns for the products, values for the softmax,
# OPTIMIZER_COST x values for the optimizer rows) a kernel runs serially: a parallel region
# would cost more than it saves. Measured on 2 threads: gathers from large tables (1M-row
# embeddings: the demo's factorization machine) pay from ~250k (fm forward 0.89 ms serial vs
# 0.47-0.62 ms parallel at 262k, serial faster at 61k); products over a cache-resident dense
# operand only from ~0.6-1M (csr_spmm, 64 columns: 0.27-0.34 ms either way at 640k).
PARALLEL_MIN_WORK = 1 << 17
OPTIMIZER_COST = 4  # sqrt, division and a random row per value: adagrad broke even at 23k values
ROWS_PER_TASK = 64  # rows per parallel task; the fm forward allocates its scratch once per task


def _parallel(work: int) -> bool:
    """Whether a kernel doing ``work`` multiply-adds (or values) should run its parallel form."""
    return work >= PARALLEL_MIN_WORK and numba.get_num_threads() > 1


# ---- csr structure -----------------------------------------------------------------------------
@_jit()
def _transpose(n_cols, indptr, indices, data, out_indptr, out_indices, out_data):
    """Counting sort of the stored values by column. Rows of the result come out sorted
    because source rows are visited in order."""
    cursor = out_indptr  # counts, then each column's next free slot, then shifted into indptr
    cursor[:] = 0
    for p in range(indices.shape[0]):
        cursor[indices[p] + 1] += 1
    for c in range(n_cols):
        cursor[c + 1] += cursor[c]
    for r in range(indptr.shape[0] - 1):
        for p in range(indptr[r], indptr[r + 1]):
            c = indices[p]
            q = cursor[c]
            out_indices[q] = r
            out_data[q] = data[p]
            cursor[c] = q + 1
    for c in range(n_cols, 0, -1):  # cursor[c] is now where column c + 1 starts
        cursor[c] = cursor[c - 1]
    cursor[0] = 0


def transpose(ctx, n_cols, indptr, indices, data, out_indptr, out_indices, out_data) -> None:
    """Write the csr of the transpose of a csr with ``n_cols`` columns into the out arrays."""
    _transpose(n_cols, indptr, indices, data, out_indptr, out_indices, out_data)


def nonempty_rows(ctx, indptr):
    """(rows holding a stored value, the indptr of the csr keeping only those rows).

    Empty rows own no stored values, so dropping them only drops indptr entries: the
    indices and values arrays are shared unchanged."""
    rows = np.flatnonzero(indptr[1:] != indptr[:-1])
    return rows, np.append(indptr[rows], indptr[-1]).astype(indptr.dtype, copy=False)


@_jit()
def _gather_dense(indptr, indices, dense, out):
    for r in range(indptr.shape[0] - 1):
        for p in range(indptr[r], indptr[r + 1]):
            out[p] = dense[r, indices[p]]


def gather_dense(ctx, indptr, indices, dense, out) -> None:
    """out[p] = dense[row of p, indices[p]]: a dense array read at a csr's positions."""
    _gather_dense(indptr, indices, dense, out)


@_jit()
def _gather_csr(indptr, indices, s_indptr, s_indices, s_data, out):
    for r in range(indptr.shape[0] - 1):
        lo0 = s_indptr[r]
        hi0 = s_indptr[r + 1]
        for p in range(indptr[r], indptr[r + 1]):
            c = indices[p]
            lo = lo0
            hi = hi0
            while lo < hi:  # binary search for column c in row r of s
                mid = (lo + hi) // 2
                if s_indices[mid] < c:
                    lo = mid + 1
                else:
                    hi = mid
            out[p] = s_data[lo] if lo < hi0 and s_indices[lo] == c else 0


def gather_csr(ctx, indptr, indices, s_indptr, s_indices, s_data, out) -> None:
    """out[p] = the value csr ``s`` stores at the position of stored value p, else 0."""
    _gather_csr(indptr, indices, s_indptr, s_indices, s_data, out)


# ---- products ----------------------------------------------------------------------------------
@_jit()
def _spmm_rows(indptr, indices, data, x, mean, out, start, stop):
    k = out.shape[1]
    for r in range(start, stop):
        lo = indptr[r]
        hi = indptr[r + 1]
        for f in range(k):
            out[r, f] = 0
        for p in range(lo, hi):
            a = data[p]
            j = indices[p]
            for f in range(k):
                out[r, f] += a * x[j, f]
        if mean and hi > lo:
            scale = 1.0 / (hi - lo)
            for f in range(k):
                out[r, f] *= scale


@_jit(parallel=True)
def _spmm(indptr, indices, data, x, mean, out):
    m = out.shape[0]
    for t in numba.prange((m + ROWS_PER_TASK - 1) // ROWS_PER_TASK):
        _spmm_rows(indptr, indices, data, x, mean, out, t * ROWS_PER_TASK, min(m, (t + 1) * ROWS_PER_TASK))


def spmm(ctx, indptr, indices, data, x, mean: bool, out) -> None:
    """out[r, :] = sum over stored (r, j) of value * x[j, :]; divided by the row's stored
    count when ``mean`` (empty rows give zeros)."""
    if _parallel(indices.shape[0] * out.shape[1]):
        _spmm(indptr, indices, data, x, mean, out)
    else:
        _spmm_rows(indptr, indices, data, x, mean, out, 0, out.shape[0])


@_jit()
def _sddmm_rows(indptr, indices, lhs, rhs, out, start, stop):
    k = lhs.shape[1]
    for i in range(start, stop):
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            acc = 0.0
            for f in range(k):
                acc += lhs[i, f] * rhs[j, f]
            out[p] = acc


@_jit(parallel=True)
def _sddmm(indptr, indices, lhs, rhs, out):
    m = indptr.shape[0] - 1
    for t in numba.prange((m + ROWS_PER_TASK - 1) // ROWS_PER_TASK):
        _sddmm_rows(indptr, indices, lhs, rhs, out, t * ROWS_PER_TASK, min(m, (t + 1) * ROWS_PER_TASK))


def sddmm(ctx, indptr, indices, lhs, rhs, out) -> None:
    """out[p] = sum_k lhs[i, k] * rhs[j, k] for each stored (i, j): the sampled product."""
    if _parallel(indices.shape[0] * lhs.shape[1]):
        _sddmm(indptr, indices, lhs, rhs, out)
    else:
        _sddmm_rows(indptr, indices, lhs, rhs, out, 0, indptr.shape[0] - 1)


# ---- softmax over each row's stored values -----------------------------------------------------
@_jit()
def _row_softmax_rows(indptr, data, out, start, stop):
    for r in range(start, stop):
        lo = indptr[r]
        hi = indptr[r + 1]
        if lo == hi:
            continue
        top = data[lo]
        for p in range(lo + 1, hi):
            top = max(top, data[p])
        total = 0.0
        for p in range(lo, hi):
            e = math.exp(data[p] - top)
            out[p] = e
            total += e
        inv = 1.0 / total
        for p in range(lo, hi):
            out[p] *= inv


@_jit(parallel=True)
def _row_softmax(indptr, data, out):
    m = indptr.shape[0] - 1
    for t in numba.prange((m + ROWS_PER_TASK - 1) // ROWS_PER_TASK):
        _row_softmax_rows(indptr, data, out, t * ROWS_PER_TASK, min(m, (t + 1) * ROWS_PER_TASK))


def row_softmax(ctx, indptr, data, out) -> None:
    """Softmax of each row's stored values (max subtracted first, so large values are safe)."""
    if _parallel(data.shape[0]):
        _row_softmax(indptr, data, out)
    else:
        _row_softmax_rows(indptr, data, out, 0, indptr.shape[0] - 1)


@_jit()
def _row_softmax_backward(indptr, y, g, out):
    for r in range(indptr.shape[0] - 1):
        start = indptr[r]
        end = indptr[r + 1]
        dot = 0.0
        for p in range(start, end):
            dot += g[p] * y[p]
        for p in range(start, end):
            out[p] = y[p] * (g[p] - dot)


def row_softmax_backward(ctx, indptr, y, g, out) -> None:
    """dx = y * (g - sum(g * y)) within each row (y the softmax, g its gradient)."""
    _row_softmax_backward(indptr, y, g, out)


# ---- factorization machine ---------------------------------------------------------------------
@_jit()
def _fm_forward_rows(indptr, indices, data, v, out, start, stop):
    k = v.shape[1]
    s = np.empty(k, dtype=v.dtype)  # the value dtype: float32 stays vectorised as float32
    q = np.empty(k, dtype=v.dtype)
    for i in range(start, stop):
        s[:] = 0
        q[:] = 0
        for p in range(indptr[i], indptr[i + 1]):
            x = data[p]
            j = indices[p]
            for f in range(k):
                t = x * v[j, f]
                s[f] += t
                q[f] += t * t
        acc = 0.0
        for f in range(k):
            acc += s[f] * s[f] - q[f]
        out[i] = 0.5 * acc


@_jit(parallel=True)
def _fm_forward(indptr, indices, data, v, out):
    n = out.shape[0]
    for t in numba.prange((n + ROWS_PER_TASK - 1) // ROWS_PER_TASK):
        _fm_forward_rows(indptr, indices, data, v, out, t * ROWS_PER_TASK, min(n, (t + 1) * ROWS_PER_TASK))


def fm_forward(ctx, indptr, indices, data, v, out) -> None:
    """out[i] = 0.5 * sum_f ((sum_j x_ij v_jf)^2 - sum_j x_ij^2 v_jf^2), one pass over X."""
    if _parallel(indices.shape[0] * v.shape[1]):
        _fm_forward(indptr, indices, data, v, out)
    else:
        _fm_forward_rows(indptr, indices, data, v, out, 0, out.shape[0])


@_jit()
def _fm_backward_rows(t_indptr, t_indices, t_data, rows, v, g, s, out, start, stop):
    k = v.shape[1]
    for q in range(start, stop):
        j = rows[q]
        for f in range(k):
            out[q, f] = 0
        c = 0.0
        for p in range(t_indptr[q], t_indptr[q + 1]):
            i = t_indices[p]
            w = g[i] * t_data[p]
            c += w * t_data[p]
            for f in range(k):
                out[q, f] += w * s[i, f]
        for f in range(k):
            out[q, f] -= v[j, f] * c


@_jit(parallel=True)
def _fm_backward(t_indptr, t_indices, t_data, rows, v, g, s, out):
    m = rows.shape[0]
    for t in numba.prange((m + ROWS_PER_TASK - 1) // ROWS_PER_TASK):
        _fm_backward_rows(t_indptr, t_indices, t_data, rows, v, g, s, out, t * ROWS_PER_TASK,
                          min(m, (t + 1) * ROWS_PER_TASK))


def fm_backward_rows(ctx, t_indptr, t_indices, t_data, rows, v, g, s, out) -> None:
    """Row q of the V gradient (feature j = rows[q]) from X's transpose restricted to its
    non-empty rows: dV[j, f] = sum_i g_i x_ij s_if - v_jf sum_i g_i x_ij^2, s = X @ V."""
    if _parallel(t_indices.shape[0] * v.shape[1]):
        _fm_backward(t_indptr, t_indices, t_data, rows, v, g, s, out)
    else:
        _fm_backward_rows(t_indptr, t_indices, t_data, rows, v, g, s, out, 0, rows.shape[0])


# ---- graph normalization -----------------------------------------------------------------------
@_jit()
def _gcn_count(indptr, indices, data, self_loops, counts, degree):
    for r in range(indptr.shape[0] - 1):
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
    _gcn_count(indptr, indices, data, self_loops, counts, degree)


@_jit()
def _gcn_fill(indptr, indices, data, self_loops, dinv, out_indptr, out_indices, out_data):
    for r in range(indptr.shape[0] - 1):
        q = out_indptr[r]
        pending = self_loops  # the diagonal is still to be added
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


def gcn_fill(ctx, indptr, indices, data, self_loops: bool, dinv, out_indptr, out_indices, out_data) -> None:
    """Row r of D^-1/2 (A (+ I)) D^-1/2, the diagonal inserted in column order when A
    stores none there."""
    _gcn_fill(indptr, indices, data, self_loops, dinv, out_indptr, out_indices, out_data)


# ---- lazy optimizers ----------------------------------------------------------------------------
@_jit()
def _adagrad_rows(weight, rows, grad, history, lr, epsilon, wd, start, stop):
    width = weight.shape[1]
    for q in range(start, stop):
        r = rows[q]
        for f in range(width):
            g = grad[q, f] + wd * weight[r, f]
            h = history[r, f] + g * g
            history[r, f] = h
            weight[r, f] -= lr * g / (math.sqrt(h) + epsilon)


@_jit(parallel=True)
def _adagrad(weight, rows, grad, history, lr, epsilon, wd):
    m = rows.shape[0]
    for t in numba.prange((m + ROWS_PER_TASK - 1) // ROWS_PER_TASK):
        _adagrad_rows(weight, rows, grad, history, lr, epsilon, wd, t * ROWS_PER_TASK,
                      min(m, (t + 1) * ROWS_PER_TASK))


def adagrad_rows(ctx, weight, rows, grad, history, lr, epsilon, wd) -> None:
    """On rows ``rows`` (grad row q is weight row rows[q]): g' = g + wd * w;
    h += g'^2; w -= lr * g' / (sqrt(h) + epsilon)."""
    if _parallel(OPTIMIZER_COST * grad.shape[0] * grad.shape[1]):
        _adagrad(weight, rows, grad, history, lr, epsilon, wd)
    else:
        _adagrad_rows(weight, rows, grad, history, lr, epsilon, wd, 0, rows.shape[0])


@_jit()
def _adam_rows(weight, rows, grad, mean, var, lr, beta1, beta2, epsilon, wd, correction1, correction2,
               start, stop):
    width = weight.shape[1]
    for q in range(start, stop):
        r = rows[q]
        for f in range(width):
            g = grad[q, f] + wd * weight[r, f]
            m = beta1 * mean[r, f] + (1.0 - beta1) * g
            v = beta2 * var[r, f] + (1.0 - beta2) * g * g
            mean[r, f] = m
            var[r, f] = v
            weight[r, f] -= lr * (m / correction1) / (math.sqrt(v / correction2) + epsilon)


@_jit(parallel=True)
def _adam(weight, rows, grad, mean, var, lr, beta1, beta2, epsilon, wd, correction1, correction2):
    n = rows.shape[0]
    for t in numba.prange((n + ROWS_PER_TASK - 1) // ROWS_PER_TASK):
        _adam_rows(weight, rows, grad, mean, var, lr, beta1, beta2, epsilon, wd, correction1, correction2,
                   t * ROWS_PER_TASK, min(n, (t + 1) * ROWS_PER_TASK))


def adam_rows(ctx, weight, rows, grad, mean, var, lr, beta1, beta2, epsilon, wd, correction1, correction2) -> None:
    """Adam with bias correction (``correction1 = 1 - beta1**t``, ``correction2 = 1 -
    beta2**t``) on rows ``rows``."""
    args = (weight, rows, grad, mean, var, lr, beta1, beta2, epsilon, wd, correction1, correction2)
    if _parallel(OPTIMIZER_COST * grad.shape[0] * grad.shape[1]):
        _adam(*args)
    else:
        _adam_rows(*args, 0, rows.shape[0])


# ---- row_sparse transpose ------------------------------------------------------------------------
@_jit()
def _nonzero_columns(data, flags):
    for r in range(data.shape[0]):
        for c in range(data.shape[1]):
            if data[r, c] != 0:
                flags[c] = 1


@_jit()
def _rsp_transpose_fill(indices, data, keep, out):
    for q in range(keep.shape[0]):
        c = keep[q]
        for f in range(out.shape[1]):
            out[q, f] = 0
        for r in range(indices.shape[0]):
            out[q, indices[r]] = data[r, c]


def rsp_transpose(ctx, n_rows: int, indices, data):
    """(values, rows) of the row_sparse transpose of a matrix with ``n_rows`` rows whose
    stored rows are ``indices``/``data``: rows of the result are the columns holding a
    non-zero (row q is column rows[q])."""
    flags = np.zeros(data.shape[1], dtype=np.uint8)
    _nonzero_columns(data, flags)
    keep = np.flatnonzero(flags).astype(indices.dtype)
    out = np.empty((keep.shape[0], n_rows), dtype=data.dtype)
    _rsp_transpose_fill(indices, data, keep, out)
    return out, keep
