"""Lazy optimizer updates for a row_sparse gradient: only the rows it stores change.

Each update has a serial kernel over a range of the gradient's rows (``*_rows_range``) and a
parallel driver (``*_rows``) that splits the rows among the threads (``idx`` is sorted and
unique, so rows never collide); small gradients call the serial form directly, as waking
the worker threads costs more than they take. Arrays are 2-d views ``(rows, row_length)``;
``out`` already holds the weight (it may be the weight itself), and the states are updated
in place. Arithmetic is in float64, results are stored in the arrays' dtype.
"""
import math

from numba import prange

from . import jit

ROWS_PER_TASK = 256


@jit()
def _blocks(rows):
    return (rows + ROWS_PER_TASK - 1) // ROWS_PER_TASK


@jit()
def _clip(g, bound):
    if bound >= 0:
        if g > bound:
            return bound
        if g < -bound:
            return -bound
    return g


@jit()
def sgd_rows_range(out, idx, grad, lr, wd, rescale, clip, start, stop):
    decay = 1.0 - lr * wd
    for i in range(start, stop):
        w = out[idx[i]]
        g = grad[i]
        if clip < 0:  # the same arithmetic, without a branch per value (vectorises)
            for j in range(g.shape[0]):
                w[j] = decay * w[j] - lr * (rescale * g[j])
        else:
            for j in range(g.shape[0]):
                w[j] = decay * w[j] - lr * _clip(rescale * g[j], clip)


@jit(parallel=True)
def sgd_rows(out, idx, grad, lr, wd, rescale, clip):
    n = idx.shape[0]
    for t in prange(_blocks(n)):
        sgd_rows_range(out, idx, grad, lr, wd, rescale, clip, t * ROWS_PER_TASK, min(n, (t + 1) * ROWS_PER_TASK))


@jit()
def sgd_mom_rows_range(out, idx, grad, mom, lr, momentum, wd, rescale, clip, start, stop):
    for i in range(start, stop):
        r = idx[i]
        for j in range(grad.shape[1]):
            w = out[r, j]
            m = momentum * mom[r, j] - lr * wd * w - lr * _clip(rescale * grad[i, j], clip)
            mom[r, j] = m
            out[r, j] = w + m


@jit(parallel=True)
def sgd_mom_rows(out, idx, grad, mom, lr, momentum, wd, rescale, clip):
    n = idx.shape[0]
    for t in prange(_blocks(n)):
        sgd_mom_rows_range(out, idx, grad, mom, lr, momentum, wd, rescale, clip,
                           t * ROWS_PER_TASK, min(n, (t + 1) * ROWS_PER_TASK))


@jit()
def adam_rows_range(out, idx, grad, mean, var, lr, beta1, beta2, epsilon, wd, rescale, clip, start, stop):
    for i in range(start, stop):
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
def adam_rows(out, idx, grad, mean, var, lr, beta1, beta2, epsilon, wd, rescale, clip):
    n = idx.shape[0]
    for t in prange(_blocks(n)):
        adam_rows_range(out, idx, grad, mean, var, lr, beta1, beta2, epsilon, wd, rescale, clip,
                        t * ROWS_PER_TASK, min(n, (t + 1) * ROWS_PER_TASK))


@jit()
def adagrad_rows_range(out, idx, grad, history, lr, epsilon, wd, rescale, clip, start, stop):
    for i in range(start, stop):
        r = idx[i]
        for j in range(grad.shape[1]):
            w = out[r, j]
            g = _clip(rescale * grad[i, j], clip)
            h = history[r, j] + g * g
            history[r, j] = h
            out[r, j] = w - lr * (g / math.sqrt(h + epsilon) + wd * w)


@jit(parallel=True)
def adagrad_rows(out, idx, grad, history, lr, epsilon, wd, rescale, clip):
    n = idx.shape[0]
    for t in prange(_blocks(n)):
        adagrad_rows_range(out, idx, grad, history, lr, epsilon, wd, rescale, clip,
                           t * ROWS_PER_TASK, min(n, (t + 1) * ROWS_PER_TASK))


@jit()
def ftrl_rows_range(out, idx, grad, z, n, lr, lamda1, beta, wd, rescale, clip, start, stop):
    for i in range(start, stop):
        r = idx[i]
        for j in range(grad.shape[1]):
            w = out[r, j]
            g = _clip(rescale * grad[i, j], clip)
            nn = n[r, j]
            zz = z[r, j] + g - (math.sqrt(nn + g * g) - math.sqrt(nn)) * w / lr
            nn = nn + g * g
            z[r, j] = zz
            n[r, j] = nn
            if abs(zz) > lamda1:
                sign = 1.0 if zz > 0 else -1.0
                out[r, j] = (sign * lamda1 - zz) / ((beta + math.sqrt(nn)) / lr + wd)
            else:
                out[r, j] = 0.0


@jit(parallel=True)
def ftrl_rows(out, idx, grad, z, n, lr, lamda1, beta, wd, rescale, clip):
    m = idx.shape[0]
    for t in prange(_blocks(m)):
        ftrl_rows_range(out, idx, grad, z, n, lr, lamda1, beta, wd, rescale, clip,
                        t * ROWS_PER_TASK, min(m, (t + 1) * ROWS_PER_TASK))
