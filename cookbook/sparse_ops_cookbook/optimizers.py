"""``lazy_adagrad`` and ``lazy_adam``: fused sparse optimizer steps for embedding tables.

With a row_sparse gradient only the rows it stores are touched: their weights, their
optimizer states, and their weight decay (the "lazy" update of sparse Adam; rows no batch
touched keep their state). The new weight is the output, so ``out=weight`` updates the
table in place; the states are mutated in place (declared in ``mutate``). One fused
kernel per step reads each touched row once. Not differentiable.
"""
from __future__ import annotations

import numpy as np

import sparse_ops as so

from ._common import BOTH, backend, check_floats


def _rows(a):
    """A C-contiguous array as (rows, row length), without copying."""
    if not a.flags.c_contiguous:
        raise ValueError("weight and optimizer states must be C-contiguous to be updated in place")
    return a.reshape(a.shape[0], -1) if a.ndim != 2 else a


class _LazyUpdate(so.Op):
    """Rules shared by the lazy updates: dense weight and states of one shape and float
    dtype, a row_sparse gradient of the same shape."""

    differentiable = False

    def infer_shape(self, weight, *others):
        if len(weight) < 1:
            raise ValueError("weight must have at least one dimension")
        for name, shape in zip(self._opdef.arguments[1:], others):
            if tuple(shape) != tuple(weight):
                raise ValueError(f"{name} has shape {tuple(shape)}, weight {tuple(weight)}")
        return [tuple(weight)]

    def infer_type(self, *dtypes):
        return [check_floats(**dict(zip(self._opdef.arguments, dtypes)))]

    def infer_storage_type(self, weight, grad, *states):
        if grad != "row_sparse":
            raise ValueError(f"grad must be row_sparse (a lazy update touches only its rows), got {grad}")
        names = (self._opdef.arguments[0], *self._opdef.arguments[2:])
        for name, stype in zip(names, (weight, *states)):
            if stype != "default":
                raise ValueError(f"{name} must be dense, got {stype}")
        return ["default"]

    def _start(self, ctx, weight, grad, out):
        """(weight rows to update, touched row indices, gradient rows): out starts as a
        copy of weight unless it is weight itself (``out=weight``)."""
        if out.data is not weight.data:
            out.data[...] = weight.data
        width = int(np.prod(weight.shape[1:], dtype=np.int64))
        return _rows(out.data), grad.indices, grad.data.reshape(grad.data.shape[0], width)

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: (5, 3) float64 weight and states (the sums of squares
        positive), a row_sparse gradient with missing rows, and one with no rows."""
        from sparse_ops.sdk.testing import sample_array

        n = len(cls._opdef.arguments)
        states = [sample_array((5, 3), seed=10 + k, positive=k == n - 3) for k in range(n - 2)]
        weight, grad = sample_array((5, 3), seed=1), sample_array((5, 3), "row_sparse", seed=2)
        empty = so.zeros((5, 3), stype="row_sparse", dtype="float64")
        return [([weight, grad, *states], {"lr": 0.1, "wd": 0.01}), ([weight, empty, *states], {"lr": 0.1})]


@so.register("lazy_adagrad")
class LazyAdagrad(_LazyUpdate):
    """Adagrad on the rows a row_sparse ``grad`` stores: g' = g + wd * w; history += g'^2;
    w -= lr * g' / (sqrt(history) + epsilon). Returns the new weight (``out=weight``
    updates in place); ``history`` is updated in place."""

    arguments = ("weight", "grad", "history")
    mutate = ("history",)
    lr = so.Param(float, doc="learning rate")
    epsilon = so.Param(float, 1e-10, "added to sqrt(history)")
    wd = so.Param(float, 0.0, "L2 weight decay, added to the gradient of the touched rows")

    def check_params(self):
        if self.epsilon < 0:
            raise ValueError(f"epsilon must be >= 0, got {self.epsilon}")

    @so.kernel(device=BOTH, stypes=("default", "row_sparse", "default"))
    def rsp(self, ctx, weight, grad, history, out):
        w, rows, g = self._start(ctx, weight, grad, out)
        if rows.shape[0]:
            backend(ctx).adagrad_rows(ctx, w, rows, g, _rows(history.data), self.lr, self.epsilon, self.wd)

    def reference(self, weight, grad, history):
        """NumPy reference for ``opcheck``: the docstring's formula on the rows where the
        gradient has a nonzero value (the samples' stored rows hold no zeros)."""
        rows = np.any(grad != 0, axis=1)
        g = grad + self.wd * weight
        h = history + g * g
        return np.where(rows[:, None], weight - self.lr * g / (np.sqrt(h) + self.epsilon), weight)


@so.register("lazy_adam")
class LazyAdam(_LazyUpdate):
    """Adam on the rows a row_sparse ``grad`` stores, with bias correction for step ``t``
    (1, 2, ...): g' = g + wd * w; mean = beta1 mean + (1 - beta1) g';
    var = beta2 var + (1 - beta2) g'^2; w -= lr * mean_hat / (sqrt(var_hat) + epsilon),
    mean_hat = mean / (1 - beta1^t), var_hat = var / (1 - beta2^t). Returns the new weight
    (``out=weight`` updates in place); ``mean`` and ``var`` are updated in place."""

    arguments = ("weight", "grad", "mean", "var")
    mutate = ("mean", "var")
    lr = so.Param(float, doc="learning rate")
    beta1 = so.Param(float, 0.9, "decay of the first moment, in [0, 1)")
    beta2 = so.Param(float, 0.999, "decay of the second moment, in [0, 1)")
    epsilon = so.Param(float, 1e-8, "added to sqrt(var_hat)")
    wd = so.Param(float, 0.0, "L2 weight decay, added to the gradient of the touched rows")
    t = so.Param(int, 1, "the step number, from 1, for bias correction")

    def check_params(self):
        if not (0 <= self.beta1 < 1 and 0 <= self.beta2 < 1):
            raise ValueError(f"beta1 and beta2 must be in [0, 1), got {self.beta1}, {self.beta2}")
        if self.t < 1:
            raise ValueError(f"t counts steps from 1, got {self.t}")
        if self.epsilon < 0:
            raise ValueError(f"epsilon must be >= 0, got {self.epsilon}")

    @so.kernel(device=BOTH, stypes=("default", "row_sparse", "default", "default"))
    def rsp(self, ctx, weight, grad, mean, var, out):
        w, rows, g = self._start(ctx, weight, grad, out)
        if rows.shape[0]:
            backend(ctx).adam_rows(ctx, w, rows, g, _rows(mean.data), _rows(var.data), self.lr, self.beta1,
                                   self.beta2, self.epsilon, self.wd, 1.0 - self.beta1 ** self.t,
                                   1.0 - self.beta2 ** self.t)

    def reference(self, weight, grad, mean, var):
        """NumPy reference for ``opcheck``: the docstring's formula on the rows where the
        gradient has a nonzero value (the samples' stored rows hold no zeros)."""
        rows = np.any(grad != 0, axis=1)
        g = grad + self.wd * weight
        m = self.beta1 * mean + (1 - self.beta1) * g
        v = self.beta2 * var + (1 - self.beta2) * g * g
        m_hat, v_hat = m / (1 - self.beta1 ** self.t), v / (1 - self.beta2 ** self.t)
        return np.where(rows[:, None], weight - self.lr * m_hat / (np.sqrt(v_hat) + self.epsilon), weight)


lazy_adagrad = so.dispatch.op_function("lazy_adagrad")
lazy_adam = so.dispatch.op_function("lazy_adam")

__all__ = ["lazy_adagrad", "lazy_adam"]
