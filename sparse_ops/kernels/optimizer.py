"""Lazy optimizer updates for a row_sparse gradient: only the rows it stores change.

Every kernel runs in parallel over the gradient's rows (``idx`` is sorted and unique, so
rows never collide). Arrays are 2-d views ``(rows, row_length)``; ``out`` already holds the
weight (it may be the weight itself), and the states are updated in place. Arithmetic is
in float64, results are stored in the arrays' dtype.
"""
import math

from numba import prange

from . import jit


@jit()
def _clip(g, bound):
    if bound >= 0:
        if g > bound:
            return bound
        if g < -bound:
            return -bound
    return g


@jit(parallel=True)
def sgd_rows(out, idx, grad, lr, wd, rescale, clip):
    decay = 1.0 - lr * wd
    for i in prange(idx.shape[0]):
        r = idx[i]
        for j in range(grad.shape[1]):
            out[r, j] = decay * out[r, j] - lr * _clip(rescale * grad[i, j], clip)


@jit(parallel=True)
def sgd_mom_rows(out, idx, grad, mom, lr, momentum, wd, rescale, clip):
    for i in prange(idx.shape[0]):
        r = idx[i]
        for j in range(grad.shape[1]):
            w = out[r, j]
            m = momentum * mom[r, j] - lr * wd * w - lr * _clip(rescale * grad[i, j], clip)
            mom[r, j] = m
            out[r, j] = w + m


@jit(parallel=True)
def adam_rows(out, idx, grad, mean, var, lr, beta1, beta2, epsilon, wd, rescale, clip):
    for i in prange(idx.shape[0]):
        r = idx[i]
        for j in range(grad.shape[1]):
            w = out[r, j]
            g = _clip(rescale * grad[i, j] + wd * w, clip)
            m = beta1 * mean[r, j] + (1.0 - beta1) * g
            v = beta2 * var[r, j] + (1.0 - beta2) * g * g
            mean[r, j] = m
            var[r, j] = v
            out[r, j] = w - lr * m / (math.sqrt(v) + epsilon)


@jit(parallel=True)
def adagrad_rows(out, idx, grad, history, lr, epsilon, wd, rescale, clip):
    for i in prange(idx.shape[0]):
        r = idx[i]
        for j in range(grad.shape[1]):
            w = out[r, j]
            g = _clip(rescale * grad[i, j], clip)
            h = history[r, j] + g * g
            history[r, j] = h
            out[r, j] = w - lr * (g / math.sqrt(h + epsilon) + wd * w)
