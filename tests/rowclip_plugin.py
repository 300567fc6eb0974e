"""A plugin op whose storage-aware backward is declared on the op itself (rules and kernels,
no second registered op): the row-norm clip, y[r] = x[r] * min(1, c / |x[r]|).

Loaded by tests/test_backward_rules.py with ``sparse_ops.library.load``. Its forward keeps a
row_sparse x row_sparse; its backward gives a row_sparse x a row_sparse gradient on x's rows
(from a dense or row_sparse output gradient), a dense x a dense one."""
from __future__ import annotations

import math

import numpy as np

import sparse_ops as so
from sparse_ops.sdk.rowkernel import row_kernel


@row_kernel(float64="the row's norm: squares summed in float64")
def clip_row(r, x, c, y):
    n = 0.0
    for f in range(x.shape[1]):
        n += x[r, f] * x[r, f]
    n = math.sqrt(n)
    s = 1.0 if n <= c else c / n
    for f in range(x.shape[1]):
        y[r, f] = x[r, f] * s


@row_kernel(float64="the row's norm and dot product: summed in float64")
def clip_row_backward(r, g, x, c, dx):
    """dx[r] = g[r] if |x[r]| <= c, else (c / n) * (g[r] - x[r] (x[r] . g[r]) / n^2)."""
    n = 0.0
    dot = 0.0
    for f in range(x.shape[1]):
        n += x[r, f] * x[r, f]
        dot += x[r, f] * g[r, f]
    n = math.sqrt(n)
    if n <= c:
        for f in range(x.shape[1]):
            dx[r, f] = g[r, f]
    else:
        for f in range(x.shape[1]):
            dx[r, f] = (c / n) * (g[r, f] - x[r, f] * dot / (n * n))


@so.register("rc_row_clip")
class RowClip(so.Op):
    """Each row of a 2-d x scaled down to norm at most ``c``; row_sparse stays row_sparse."""

    arguments = ("x",)
    c = so.Param(float, 1.0, doc="the largest row norm")

    def infer_storage_type(self, x):
        return [x if x == "row_sparse" else "default"]

    def infer_type(self, x):
        if x not in (np.float32, np.float64):
            raise TypeError(f"x must be float32 or float64, got {x}")
        return [x]

    @so.kernel(device=("cpu", "gpu"), stypes=("row_sparse",))
    def rsp(self, ctx, x, y):
        values = ctx.alloc_like(y, x)  # y keeps x's rows
        clip_row(ctx, x.data.shape[0], x.data, self.c, values)

    @so.kernel(device=("cpu", "gpu"))
    def dense(self, ctx, x, y):
        clip_row(ctx, x.shape[0], x, self.c, y)

    # ---- the backward, declared on the op -----------------------------------------------
    # arguments: the output's gradient ("output_grad"), then the kept input x
    backward_needs_inputs = ("x",)

    def backward_storage_type(self, output_grad, x):
        return [x if x == "row_sparse" else "default"]

    @so.backward_kernel(device=("cpu", "gpu"), stypes=[("default", "row_sparse"), ("row_sparse", "row_sparse")])
    def rsp_backward(self, ctx, g, x, dx):
        """x's rows of the output gradient (dense, or row_sparse: its rows looked up), through
        the clip's Jacobian; dx keeps x's rows."""
        xp = ctx.xp
        if g.stype == "row_sparse":
            rows = xp.zeros((g.shape[0], g.shape[1]), dtype=g.dtype)
            rows[g.indices] = g.data
            gx = rows[x.indices]
        else:
            gx = g.data[x.indices]
        values = ctx.alloc_like(dx, x)
        clip_row_backward(ctx, x.data.shape[0], xp.ascontiguousarray(gx), x.data, self.c, values)

    @so.backward_kernel(device=("cpu", "gpu"))
    def dense_backward(self, ctx, g, x, dx):
        clip_row_backward(ctx, x.shape[0], g, x, self.c, dx)

    def reference(self, x):
        n = np.linalg.norm(x, axis=1, keepdims=True)
        return [x * np.minimum(1.0, self.c / np.where(n == 0, 1, n))]

    @classmethod
    def samples(cls):
        rng = np.random.default_rng(0)
        out = []
        for dtype in (np.float32, np.float64):
            x = (rng.standard_normal((6, 4)) * 2).astype(dtype)
            x[[1, 4]] = 0
            out.append(([so.array(x).tostype("row_sparse")], {"c": 1.5}))
            out.append(([so.array(x)], {"c": 0.5}))
        return out


def numpy_row_clip_grad(x: np.ndarray, g: np.ndarray, c: float) -> np.ndarray:
    """The clip's gradient in NumPy, for the tests."""
    n = np.linalg.norm(x, axis=1, keepdims=True)
    safe = np.where(n == 0, 1, n)
    clipped = (c / safe) * (g - x * np.sum(x * g, axis=1, keepdims=True) / safe ** 2)
    return np.where(n <= c, g, clipped)
