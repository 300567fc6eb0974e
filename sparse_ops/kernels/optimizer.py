"""Lazy optimizer updates for a row_sparse gradient: only the rows it stores change.

Each update is one body for one of the gradient's rows ``i`` (``idx[i]`` is the weight row
it updates), built by ``sparse_ops.sdk.rowkernel`` into the project's serial and parallel
cpu drivers under the one parallel-size policy (``idx`` is sorted and unique, so rows never
collide). Arrays are 2-d views ``(rows, row_length)``; ``out`` already holds the weight (it
may be the weight itself), and the states are updated in place. Arithmetic is in float64,
results are stored in the arrays' dtype.
"""
import math

from ..sdk.rowkernel import row_kernel
from . import jit
from .prefetch import prefetch_row

ROWS_AHEAD = 8  # each update prefetches the weight row this many gradient rows ahead


@jit()
def _clip(g, bound):
    if bound >= 0:
        if g > bound:
            return bound
        if g < -bound:
            return -bound
    return g


@row_kernel
def sgd_row(i, out, idx, grad, lr, wd, rescale, clip):
    if i + ROWS_AHEAD < idx.shape[0]:  # the rows a later gradient row updates
        prefetch_row(out, idx[i + ROWS_AHEAD])
    decay = 1.0 - lr * wd
    r = idx[i]
    if clip < 0:  # the same arithmetic, without a branch per value (vectorises)
        for j in range(grad.shape[1]):
            out[r, j] = decay * out[r, j] - lr * (rescale * grad[i, j])
    else:
        for j in range(grad.shape[1]):
            out[r, j] = decay * out[r, j] - lr * _clip(rescale * grad[i, j], clip)


@row_kernel
def sgd_mom_row(i, out, idx, grad, mom, lr, momentum, wd, rescale, clip):
    if i + ROWS_AHEAD < idx.shape[0]:  # the rows a later gradient row updates
        prefetch_row(out, idx[i + ROWS_AHEAD])
        prefetch_row(mom, idx[i + ROWS_AHEAD])
    r = idx[i]
    for j in range(grad.shape[1]):
        w = out[r, j]
        m = momentum * mom[r, j] - lr * wd * w - lr * _clip(rescale * grad[i, j], clip)
        mom[r, j] = m
        out[r, j] = w + m


@row_kernel
def adam_row(i, out, idx, grad, mean, var, lr, beta1, beta2, epsilon, wd, rescale, clip):
    if i + ROWS_AHEAD < idx.shape[0]:  # the rows a later gradient row updates
        prefetch_row(out, idx[i + ROWS_AHEAD])
        prefetch_row(mean, idx[i + ROWS_AHEAD])
        prefetch_row(var, idx[i + ROWS_AHEAD])
    r = idx[i]
    for j in range(grad.shape[1]):
        w = out[r, j]
        g = _clip(rescale * grad[i, j] + wd * w, clip)
        m = beta1 * mean[r, j] + (1.0 - beta1) * g
        v = beta2 * var[r, j] + (1.0 - beta2) * g * g
        mean[r, j] = m
        var[r, j] = v
        out[r, j] = w - lr * m / (math.sqrt(v) + epsilon)


@row_kernel
def adagrad_row(i, out, idx, grad, history, lr, epsilon, wd, rescale, clip):
    if i + ROWS_AHEAD < idx.shape[0]:  # the rows a later gradient row updates
        prefetch_row(out, idx[i + ROWS_AHEAD])
        prefetch_row(history, idx[i + ROWS_AHEAD])
    r = idx[i]
    for j in range(grad.shape[1]):
        w = out[r, j]
        g = _clip(rescale * grad[i, j], clip)
        h = history[r, j] + g * g
        history[r, j] = h
        out[r, j] = w - lr * (g / math.sqrt(h + epsilon) + wd * w)


@row_kernel
def ftrl_row(i, out, idx, grad, z, n, lr, lamda1, beta, wd, rescale, clip):
    if i + ROWS_AHEAD < idx.shape[0]:  # the rows a later gradient row updates
        prefetch_row(out, idx[i + ROWS_AHEAD])
        prefetch_row(z, idx[i + ROWS_AHEAD])
        prefetch_row(n, idx[i + ROWS_AHEAD])
    r = idx[i]
    for j in range(grad.shape[1]):
        w = out[r, j]
        g = _clip(rescale * grad[i, j], clip)
        nn = n[r, j]
        zz = z[r, j] + g - (math.sqrt(nn + g * g) - math.sqrt(nn)) * w / lr
        nn = nn + g * g
        z[r, j] = zz
        n[r, j] = nn
        # the dense rule's (sign(z) * lamda1 - z) / denominator * (|z| > lamda1), NaN included:
        # a NaN anywhere (the gradient, lr, lamda1) gives NaN, as it does there, not 0
        sign = 1.0 if zz > 0 else -1.0 if zz < 0 else zz * 0.0
        value = (sign * lamda1 - zz) / ((beta + math.sqrt(nn)) / lr + wd)
        out[r, j] = value if abs(zz) > lamda1 else value * 0.0
