"""Optimizer updates with MXNet 1.9 semantics: ``sgd_update``, ``sgd_mom_update``,
``adam_update``, ``adagrad_update``, ``ftrl_update``, ``nag_mom_update``, ``rmsprop_update``,
``rmspropalex_update``, ``signsgd_update``, ``signum_update``, ``ftml_update``, LAMB's two
phases ``lamb_update_phase1`` (the step direction; mean and var updated) and
``lamb_update_phase2`` (the step, scaled by the ratio of the weight's and the direction's norms),
and MXNet's contrib updates ``_adamw_update`` / ``_mp_adamw_update`` (decoupled weight decay,
the rescale factor an input; skipped when it is not finite or zero) and
``_contrib_group_adagrad_update`` (one AdaGrad rate per row).

The new weight is the output, so ``sgd_update(w, g, lr=0.1, out=w)`` updates ``w`` in
place (the dispatcher hands ``w`` itself to the kernel) while a call without ``out=``
returns a new array and leaves ``w`` alone. The states (``mom``, ``mean``, ``var``,
``history``) are always updated in place: they are the ops' mutated inputs.

In every update ``g = clip(rescale_grad * grad, clip_gradient)`` (no clipping when
``clip_gradient < 0``). With a row_sparse ``grad`` and ``lazy_update=True`` only the rows
the gradient stores change: weight, states and weight decay elsewhere are left alone
(adagrad is always lazy, as MXNet's sparse adagrad). ``lazy_update=False`` applies the
dense update, as if the gradient were dense with zeros in the other rows. ``ftrl_update``
takes ``lazy_update`` too (MXNet 1.9 updates lazily only for a row_sparse weight; here the
dense weight stands in for it, and ``lazy_update=False`` gives MXNet's dense-weight result).
The updates MXNet has only dense kernels for (``nag_mom_update``, ``rmsprop_update``,
``rmspropalex_update``, ``signsgd_update``, ``signum_update``) always apply the dense update
to a row_sparse gradient, as MXNet's storage fallback does, without the fallback warning.
Weight and states share one float dtype with the gradient. They are dense, or the weight
is row_sparse (a row_sparse gradient then). With dense states, as in MXNet 1.9, a
row_sparse weight must store every row (checked as MXNet's CheckAllRowsPresent does) and
gets the standard update. With row_sparse states the weight and states may store any rows,
the rows they do not store being zero: hashed embedding tables of 2**40 rows storing a
few are updated in time and memory that follow the stored rows. Weight and states then
come out storing the same rows, theirs and the gradient's (MXNet 1.9 refuses a weight
missing rows; a weight storing every row gives MXNet's result), updated lazily under
``lazy_update``; adagrad and ftrl take row_sparse states only and always update lazily.
States share one storage type. Every other combination of storage types (a csr weight,
a row_sparse weight of a dense-only update, sparse states of a dense weight) takes MXNet's
storage fallback, with its ``StorageFallbackWarning``: the inputs are densified, the dense
update runs, and the new weight and states are written back in their own storage types
(``out=weight`` keeps a csr weight csr); adagrad, as MXNet's sparse adagrad, refuses them.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..dtypes import require_one_dtype
from ..registry import Op, Param, kernel, register
from ..sdk import capacity as cap
from ._util import ROW_VALUES_PER_WORK

_BOTH = ("cpu", "gpu")
_FLOATS = frozenset(np.dtype(t) for t in ("float16", "float32", "float64"))
_NUMBA_FLOATS = frozenset(np.dtype(t) for t in ("float32", "float64"))


# parameters shared by the updates (fresh Param objects per class keep MXNet's order)
def _lr() -> Param:
    return Param(float, doc="learning rate")


def _wd() -> Param:
    return Param(float, 0.0, "weight decay: adds wd * weight to the gradient")


def _rescale() -> Param:
    return Param(float, 1.0, "the gradient is multiplied by this first")


def _clip_gradient() -> Param:
    return Param(float, -1.0, "clip the rescaled gradient to [-c, c]; no clipping when negative")


def _lazy() -> Param:
    return Param(bool, True, "with a row_sparse grad, update only the rows it stores (a dense weight with dense "
                             "states, or a row_sparse weight with row_sparse states; a row_sparse weight with dense "
                             "states gets the standard update, as in MXNet 1.9)")


_kernel_module: Any = None


def _lazy_rows(kernel_name: str, grad: np.ndarray, *args: Any) -> None:
    """Run the row kernel ``sparse_ops.kernels.optimizer.<kernel_name>`` over the gradient's
    rows on the cpu, in parallel when the values it moves pay for the threads (the project's
    one parallel-size policy). The kernel module is imported on first use (``import
    sparse_ops`` compiles nothing) and kept."""
    global _kernel_module
    if _kernel_module is None:
        from ..kernels import optimizer

        _kernel_module = optimizer
    getattr(_kernel_module, kernel_name)(None, grad.shape[0], *args, work=grad.size // ROW_VALUES_PER_WORK)


def _rows_union(xp: Any, first: Any, *others: Any) -> Any:
    """The sorted union of sorted unique row ids: ``first`` itself when it holds the others
    (one binary search per row of theirs; a sort only when rows are added)."""
    missing = []
    for rows in others:
        if rows is first or rows.shape[0] == 0:
            continue
        if first.shape[0] == 0:
            missing.append(rows)
            continue
        pos = xp.minimum(xp.searchsorted(first, rows), first.shape[0] - 1)
        new = first[pos] != rows
        if bool(new.any()):
            missing.append(rows[new])
    if not missing:
        return first
    return xp.unique(xp.concatenate([first, *missing]))


def _on_rows(xp: Any, x: Any, rows: Any) -> Any:
    """The values of row_sparse ``x`` on the sorted rows ``rows`` (a superset of its own),
    zero where it stores none: a new array."""
    values = xp.zeros((rows.shape[0], *x.shape[1:]), dtype=x.dtype)
    if x.indices.shape[0]:
        values[xp.searchsorted(rows, x.indices)] = x.data
    return values


# the hyperparameters an update checks, by name: finite ones, decays in [0, 1) (1 never
# forgets; above it the state grows without bound), non-negative epsilons, and update
# numbers t from 1 (bias corrections divide by 1 - beta ** t, zero at t = 0); torch.optim
# and MXNet's optimizer classes refuse the same, each update op by itself did not
_FINITE = ("lr", "wd", "momentum", "eta", "lamda1", "beta", "wd_lh")
_DECAYS = ("beta1", "beta2", "gamma1", "gamma2")


def check_hyperparameters(op: Op) -> None:
    """Raise ValueError for a hyperparameter of ``op`` out of its range (see above)."""
    for name in _FINITE:
        v = getattr(op, name, None)
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError(f"{name} must be finite, got {v}")
    for name in _DECAYS:
        v = getattr(op, name, None)
        if isinstance(v, float) and not 0.0 <= v < 1.0:
            raise ValueError(f"{name} must be in [0, 1), got {v}")
    eps = getattr(op, "epsilon", None)
    if isinstance(eps, float) and not (eps >= 0.0 and math.isfinite(eps)):
        raise ValueError(f"epsilon must be finite and non-negative, got {eps}")
    t = getattr(op, "t", None)
    if isinstance(t, int) and t < 1:
        raise ValueError(f"t (the update's number) must be at least 1, got {t}: the bias corrections divide by "
                         "1 - beta ** t")


class _Update(Op):
    """Shared rules and kernels. Subclasses give ``rows`` (the vectorised formula, for dense
    arrays and for gathered rows), ``numba_rows`` (the lazy cpu kernel) and register
    ``sparse_update`` as their storage-aware kernel for their number of states."""

    trusted = True  # built-in kernels, tested against NumPy/SciPy references
    # out=weight is the update's usual form (MXNet's in-place write): every kernel reads a
    # value of the weight before it writes that place, and a lazy update writes only its rows
    out_may_alias = True

    differentiable = False
    lazy_update = True  # overridden by a Param where the op has one
    # the new weight and states store the union of the weight's, the gradient's and the states' rows
    capacity = cap.sum_of()

    check_params = check_hyperparameters

    # ---- rules --------------------------------------------------------------------------------
    def infer_shape(self, weight, *others):
        for name, s in zip(self._opdef.arguments[1:], others):
            if tuple(s) != tuple(weight):
                raise ValueError(f"{name} has shape {tuple(s)}, weight {tuple(weight)}")
        return [tuple(weight)]

    def infer_type(self, weight, *others):
        if weight not in _FLOATS:
            raise TypeError(f"weight must be float16, float32 or float64, got {weight.name}")
        require_one_dtype(self._opdef.name, self._opdef.arguments, (weight, *others))
        return [weight]

    # the states' storage types a row_sparse weight takes ("default", "row_sparse" or both)
    rsp_weight_states: tuple = ("default", "row_sparse")
    rsp_weight_lazy: bool | None = None  # with a row_sparse weight: always lazy (True), else lazy_update

    storage_fallback = True  # False: combinations without a kernel are refused (MXNet's sparse adagrad)

    def infer_storage_type(self, weight, grad, *states):
        """A dense weight with dense states gives a dense output (the dense kernel, or the
        storage-aware one for a row_sparse grad); a row_sparse weight with a row_sparse grad
        and states of a storage type among ``rsp_weight_states`` gives a row_sparse output
        (MXNet 1.9's sparse kernels). States share one storage type (MXNet's check). Any
        other combination (a csr weight, a row_sparse weight of an update with only a dense
        kernel, sparse states of a dense weight) runs as MXNet 1.9 runs it: the storage
        fallback densifies the inputs, runs the dense update and writes the new weight into
        ``out=`` and the new states into the states, each in its own storage type; updates
        MXNet has no fallback for (``storage_fallback = False``) refuse it instead."""
        names = self._opdef.arguments
        if len(set(states)) > 1:
            raise ValueError(f"the states {', '.join(names[2:])} must share one storage type, got {list(states)}")
        if weight == "row_sparse" and grad == "row_sparse" and self.rsp_weight_states:
            if all(st in self.rsp_weight_states for st in states):
                return ["row_sparse"]
        elif weight == "default" and all(st == "default" for st in states):
            return ["default"]
        if not self.storage_fallback:
            raise ValueError(f"no kernel for {names[0]} {weight}, {names[1]} {grad} and states {list(states)}: "
                             f"a row_sparse {names[0]} takes a row_sparse {names[1]} and "
                             f"{' or '.join(self.rsp_weight_states)} states, a dense one dense states")
        return ["default"]

    # ---- formulas -----------------------------------------------------------------------------
    def scaled(self, xp: Any, grad: Any) -> Any:
        g = grad * self.rescale_grad
        return xp.clip(g, -self.clip_gradient, self.clip_gradient) if self.clip_gradient >= 0 else g

    def rows(self, xp: Any, w: Any, grad: Any, *states: Any) -> list:
        """[new weight, *new states] for these rows (new arrays; inputs untouched)."""
        raise NotImplementedError

    def numba_rows(self, out: Any, idx: Any, grad: Any, *states: Any) -> None:
        raise NotImplementedError

    def computed_rows(self, xp: Any, w: Any, grad: Any, *states: Any) -> list:
        """``rows``, in float32 for float16 arrays (the results are stored back in float16):
        in float16 an epsilon of 1e-8 is 0, so a row with zero mean and variance gave 0/0."""
        if w.dtype == np.float16:
            return self.rows(xp, *(a.astype(np.float32) for a in (w, grad, *states)))
        return self.rows(xp, w, grad, *states)

    # ---- kernels ------------------------------------------------------------------------------
    @kernel(device=_BOTH)
    def dense(self, ctx, weight, grad, *rest):
        *states, out = rest
        new = self.computed_rows(ctx.xp, weight, grad, *states)
        for s, v in zip(states, new[1:]):
            s[...] = v
        out[...] = new[0]

    def rsp_weight_update(self, ctx, weight, grad, *rest) -> None:
        """The kernel body for a row_sparse weight. With dense states (MXNet 1.9's case) the
        weight must store all of its rows and gets the dense weight's standard update on
        its stored values. With row_sparse states the weight and states may store any rows
        (a hashed table of 2**40 rows storing a few): a row not stored is zero, in the
        weight and in every state. Weight and states are first brought to the same stored
        rows, the union of theirs and the gradient's (no copy when they already store them,
        as after the first update), then updated as dense arrays over those rows: lazily,
        at the gradient's rows, under ``lazy_update``, else every stored row (a row none of
        them stores stays zero in every update here). Time and memory follow the stored
        rows, never ``weight.shape[0]``."""
        *states, out = rest
        op = self._opdef.name
        xp = ctx.xp
        n = weight.shape[0]
        full = weight.indices.shape[0] == n
        if any(s.stype != "row_sparse" for s in states):
            if not full:
                raise ValueError(f"{op}: with dense states a row_sparse weight must store all of its rows: "
                                 f"weight.data.shape[0] ({weight.indices.shape[0]}) != weight.shape[0] ({n}); "
                                 f"row_sparse states take a weight storing any rows")
            w = weight.data
            o = w if out is weight else xp.empty_like(w)
            self._update_arrays(ctx, w, grad, [s.data for s in states], o, False)
            if out is not weight:
                ctx.set_row_sparse(out, o, weight.indices)
            return
        rows = weight.indices if full else _rows_union(xp, weight.indices, grad.indices,
                                                         *(s.indices for s in states))
        st = []
        for s in states:
            if s.indices.shape[0] != rows.shape[0]:
                ctx.set_row_sparse(s, _on_rows(xp, s, rows), rows)
            st.append(s.data)
        grown = weight.indices.shape[0] != rows.shape[0]
        w = _on_rows(xp, weight, rows) if grown else weight.data
        o = w if out is weight or grown else xp.empty_like(w)
        if not full:  # the gradient's rows as positions among the stored ones
            grad = type(grad)._trusted(grad.data, xp.searchsorted(rows, grad.indices),
                                       (rows.shape[0], *grad.shape[1:]), grad.device)
        lazy = self.rsp_weight_lazy if self.rsp_weight_lazy is not None else self.lazy_update
        self._update_arrays(ctx, w, grad, st, o, lazy)
        if out is not weight or grown:
            ctx.set_row_sparse(out, o, rows)

    def sparse_update(self, ctx, weight, grad, *rest) -> None:
        """The kernel body for (default weight, row_sparse grad, default states): lazy or
        dense semantics. Each op registers it for its own arity."""
        *states, out = rest
        self._update_arrays(ctx, weight.data, grad, [s.data for s in states], out.data, self.lazy_update)

    def _update_arrays(self, ctx, w, grad, st, o, lazy) -> None:
        """Update dense buffers ``w`` (weight), ``st`` (states) into ``o`` with row_sparse ``grad``."""
        if not lazy:
            self.dense(ctx, w, grad.tostype("default").data, *st, o)
            return
        if o is not w:
            o[...] = w
        nnz = grad.indices.shape[0]
        if nnz == 0:
            return
        n = o.shape[0]
        width = math.prod(o.shape[1:])
        if ctx.device.device_type == "cpu" and o.dtype in _NUMBA_FLOATS and all(a.flags.c_contiguous
                                                                               for a in (o, *st)):
            # int64 rows and contiguous values: one compiled kernel per float dtype
            idx = grad.indices.astype(np.int64, copy=False)
            g2 = np.ascontiguousarray(grad.data).reshape(nnz, width)
            self.numba_rows(o.reshape(n, width), idx, g2, *[s.reshape(n, width) for s in st])
            return
        idx = grad.indices
        new = self.computed_rows(ctx.xp, o[idx], grad.data, *[s[idx] for s in st])
        for s, v in zip(st, new[1:]):
            s[idx] = v
        o[idx] = new[0]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: (4, 3) float64 weight and states (positive ones last, the
        sums of squares) with a dense and a row_sparse gradient, lazily and not."""
        from . import _samples

        n = len(cls._opdef.arguments)
        positive = (False,) * (n - 1) + (n > 2,)
        params = {"lr": 0.1, "wd": 0.01}
        out = _samples.by_stypes(_samples.kernel_stypes(cls), [(4, 3)] * n, params, positive=positive)
        if "lazy_update" in cls._opdef.params:
            sig = [("default", "row_sparse") + ("default",) * (n - 2)]
            out += _samples.by_stypes(sig, [(4, 3)] * n, {**params, "lazy_update": False}, positive=positive)
        # a row_sparse weight (and row_sparse states) store every row, as MXNet requires;
        # with dense states the update is the standard one (so the reference's too)
        for inputs, p in out:
            if inputs[0].stype == "row_sparse":
                for k in (0, *range(2, n)):
                    if inputs[k].stype == "row_sparse":
                        dense = _samples.array((4, 3), "default", seed=k + 1, positive=positive[k])
                        inputs[k] = dense.tostype("row_sparse")
                if n > 2 and inputs[2].stype == "default" and "lazy_update" in cls._opdef.params:
                    p["lazy_update"] = False
        return out

    def reference(self, weight: np.ndarray, grad: np.ndarray, *states: np.ndarray) -> np.ndarray:
        """NumPy reference for ``opcheck``: ``rows`` applied to every row, or, with
        ``lazy_update``, only to the rows where the gradient has a nonzero value (the stored
        rows of the samples' row_sparse gradients, which hold no zeros), the others kept."""
        rows = np.flatnonzero(np.any(grad.reshape(grad.shape[0], -1) != 0, axis=1)) if self.lazy_update \
            else np.arange(weight.shape[0])
        out = weight.copy()
        out[rows] = self.rows(np, weight[rows], grad[rows], *(s[rows] for s in states))[0]
        return out


@register("sgd_update")
class SGDUpdate(_Update):
    """weight = (1 - lr * wd) * weight - lr * g."""

    arguments = ("weight", "grad")
    lr, wd, rescale_grad, clip_gradient, lazy_update = _lr(), _wd(), _rescale(), _clip_gradient(), _lazy()

    @kernel(device=_BOTH, stypes=("default", "row_sparse"))
    def rsp_grad(self, ctx, weight, grad, out):
        self.sparse_update(ctx, weight, grad, out)

    @kernel(device=_BOTH, stypes=[("row_sparse", "row_sparse")])
    def rsp_weight(self, ctx, weight, grad, out):
        self.rsp_weight_update(ctx, weight, grad, out)

    def rows(self, xp, w, grad):
        return [(1.0 - self.lr * self.wd) * w - self.lr * self.scaled(xp, grad)]

    def numba_rows(self, out, idx, grad):
        _lazy_rows("sgd_row", grad, out, idx, grad, self.lr, self.wd, self.rescale_grad, self.clip_gradient)


@register("sgd_mom_update")
class SGDMomUpdate(_Update):
    """mom = momentum * mom - lr * wd * weight - lr * g; weight = weight + mom."""

    arguments = ("weight", "grad", "mom")
    mutate = ("mom",)
    lr = _lr()
    momentum = Param(float, 0.0, "decay of the momentum")
    wd, rescale_grad, clip_gradient, lazy_update = _wd(), _rescale(), _clip_gradient(), _lazy()

    @kernel(device=_BOTH, stypes=("default", "row_sparse", "default"))
    def rsp_grad(self, ctx, weight, grad, mom, out):
        self.sparse_update(ctx, weight, grad, mom, out)

    @kernel(device=_BOTH, stypes=[("row_sparse", "row_sparse", "default"), ("row_sparse", "row_sparse", "row_sparse")])
    def rsp_weight(self, ctx, weight, grad, mom, out):
        self.rsp_weight_update(ctx, weight, grad, mom, out)

    def rows(self, xp, w, grad, mom):
        m = self.momentum * mom - (self.lr * self.wd) * w - self.lr * self.scaled(xp, grad)
        return [w + m, m]

    def numba_rows(self, out, idx, grad, mom):
        _lazy_rows("sgd_mom_row", grad, out, idx, grad, mom, self.lr, self.momentum, self.wd, self.rescale_grad,
                   self.clip_gradient)


@register("adam_update")
class AdamUpdate(_Update):
    """g = clip(rescale_grad * grad + wd * weight); mean = beta1 * mean + (1 - beta1) * g;
    var = beta2 * var + (1 - beta2) * g**2; weight -= lr * mean / (sqrt(var) + epsilon).
    (No bias correction: MXNet's optimizer folds it into lr.)"""

    arguments = ("weight", "grad", "mean", "var")
    mutate = ("mean", "var")
    lr = _lr()
    beta1 = Param(float, 0.9, "decay of the first moment")
    beta2 = Param(float, 0.999, "decay of the second moment")
    epsilon = Param(float, 1e-8, "added to sqrt(var)")
    wd, rescale_grad, clip_gradient, lazy_update = _wd(), _rescale(), _clip_gradient(), _lazy()

    @kernel(device=_BOTH, stypes=("default", "row_sparse", "default", "default"))
    def rsp_grad(self, ctx, weight, grad, mean, var, out):
        self.sparse_update(ctx, weight, grad, mean, var, out)

    @kernel(device=_BOTH, stypes=[("row_sparse", "row_sparse", "default", "default"), ("row_sparse", "row_sparse", "row_sparse", "row_sparse")])
    def rsp_weight(self, ctx, weight, grad, mean, var, out):
        self.rsp_weight_update(ctx, weight, grad, mean, var, out)

    def rows(self, xp, w, grad, mean, var):
        g = grad * self.rescale_grad + self.wd * w
        if self.clip_gradient >= 0:
            g = xp.clip(g, -self.clip_gradient, self.clip_gradient)
        m = self.beta1 * mean + (1.0 - self.beta1) * g
        v = self.beta2 * var + (1.0 - self.beta2) * (g * g)
        return [w - self.lr * m / (xp.sqrt(v) + self.epsilon), m, v]

    def numba_rows(self, out, idx, grad, mean, var):
        _lazy_rows("adam_row", grad, out, idx, grad, mean, var, self.lr, self.beta1, self.beta2, self.epsilon,
                   self.wd, self.rescale_grad, self.clip_gradient)


@register("adagrad_update")
class AdagradUpdate(_Update):
    """history += g**2; weight -= lr * (g / sqrt(history + epsilon) + wd * weight).

    With a row_sparse grad only its rows change (MXNet's sparse adagrad, which takes only
    wd=0; a non-zero wd here acts as in MXNet's Python AdaGrad, on those rows)."""

    arguments = ("weight", "grad", "history")
    mutate = ("history",)
    rsp_weight_states, rsp_weight_lazy = ("row_sparse",), True  # MXNet's AdagradUpdateRspRspRspImpl
    storage_fallback = False  # MXNet's sparse adagrad has none
    lr = _lr()
    epsilon = Param(float, 1e-7, "added to history under the square root")
    wd, rescale_grad, clip_gradient = _wd(), _rescale(), _clip_gradient()

    @kernel(device=_BOTH, stypes=("default", "row_sparse", "default"))
    def rsp_grad(self, ctx, weight, grad, history, out):
        self.sparse_update(ctx, weight, grad, history, out)

    @kernel(device=_BOTH, stypes=[("row_sparse", "row_sparse", "row_sparse")])
    def rsp_weight(self, ctx, weight, grad, history, out):
        self.rsp_weight_update(ctx, weight, grad, history, out)

    def rows(self, xp, w, grad, history):
        g = self.scaled(xp, grad)
        h = history + g * g
        return [w - self.lr * (g / xp.sqrt(h + self.epsilon) + self.wd * w), h]

    def numba_rows(self, out, idx, grad, history):
        _lazy_rows("adagrad_row", grad, out, idx, grad, history, self.lr, self.epsilon, self.wd, self.rescale_grad,
                   self.clip_gradient)


def _clip_rows(xp: Any, x: Any, bound: float) -> Any:
    return xp.clip(x, -bound, bound) if bound >= 0 else x


@register("ftrl_update")
class FtrlUpdate(_Update):
    """g = clip(rescale_grad * grad); z += g - (sqrt(n + g**2) - sqrt(n)) * weight / lr;
    n += g**2; weight = (sign(z) * lamda1 - z) / ((beta + sqrt(n)) / lr + wd) * (|z| > lamda1)."""

    arguments = ("weight", "grad", "z", "n")
    mutate = ("z", "n")
    rsp_weight_states, rsp_weight_lazy = ("row_sparse",), True  # MXNet's FtrlUpdateRspRspRspImpl
    lr = _lr()
    lamda1 = Param(float, 0.01, "L1 regularization coefficient")
    beta = Param(float, 1.0, "per-coordinate learning rate correlation")
    wd, rescale_grad, clip_gradient, lazy_update = _wd(), _rescale(), _clip_gradient(), _lazy()

    @kernel(device=_BOTH, stypes=("default", "row_sparse", "default", "default"))
    def rsp_grad(self, ctx, weight, grad, z, n, out):
        self.sparse_update(ctx, weight, grad, z, n, out)

    @kernel(device=_BOTH, stypes=[("row_sparse", "row_sparse", "row_sparse", "row_sparse")])
    def rsp_weight(self, ctx, weight, grad, z, n, out):
        self.rsp_weight_update(ctx, weight, grad, z, n, out)

    def rows(self, xp, w, grad, z, n):
        g = self.scaled(xp, grad)
        z = z + g - (xp.sqrt(n + g * g) - xp.sqrt(n)) * w / self.lr
        n = n + g * g
        denom = (self.beta + xp.sqrt(n)) / self.lr + self.wd
        new = (xp.sign(z) * self.lamda1 - z) / denom * (xp.abs(z) > self.lamda1)
        return [new, z, n]

    def numba_rows(self, out, idx, grad, z, n):
        _lazy_rows("ftrl_row", grad, out, idx, grad, z, n, self.lr, self.lamda1, self.beta, self.wd,
                   self.rescale_grad, self.clip_gradient)


class _DenseOnly(_Update):
    """An update MXNet has only a dense kernel for: a row_sparse gradient gets the dense
    update (zeros in the rows it does not store), as MXNet's storage fallback gives."""

    lazy_update = False
    rsp_weight_states = ()  # a row_sparse weight takes the storage fallback, as in MXNet

    def sparse_update(self, ctx, weight, grad, *rest) -> None:
        *states, out = rest
        self.dense(ctx, weight.data, grad.tostype("default").data, *[s.data for s in states], out.data)


@register("nag_mom_update")
class NAGMomUpdate(_DenseOnly):
    """mom = momentum * mom; weight = weight - mom + (momentum + 1) * (mom - lr * (g + wd * weight));
    mom -= lr * (g + wd * weight), with g = clip(rescale_grad * grad)."""

    arguments = ("weight", "grad", "mom")
    mutate = ("mom",)
    lr = _lr()
    momentum = Param(float, 0.0, "decay of the momentum")
    wd, rescale_grad, clip_gradient = _wd(), _rescale(), _clip_gradient()

    @kernel(device=_BOTH, stypes=("default", "row_sparse", "default"))
    def rsp_grad(self, ctx, weight, grad, mom, out):
        self.sparse_update(ctx, weight, grad, mom, out)

    def rows(self, xp, w, grad, mom):
        step = self.lr * (self.scaled(xp, grad) + self.wd * w)
        m = self.momentum * mom
        return [w - m + (self.momentum + 1.0) * (m - step), m - step]


@register("rmsprop_update")
class RMSPropUpdate(_DenseOnly):
    """g = clip(rescale_grad * grad + wd * weight); n = (1 - gamma1) * g**2 + gamma1 * n;
    weight = clip_weights(weight - lr * g / sqrt(n + epsilon)) (Tieleman & Hinton)."""

    arguments = ("weight", "grad", "n")
    mutate = ("n",)
    lr = _lr()
    gamma1 = Param(float, 0.95, "decay of the mean square")
    epsilon = Param(float, 1e-8, "added to n under the square root")
    wd, rescale_grad, clip_gradient = _wd(), _rescale(), _clip_gradient()
    clip_weights = Param(float, -1.0, "clip the new weight to [-c, c]; no clipping when negative")

    @kernel(device=_BOTH, stypes=("default", "row_sparse", "default"))
    def rsp_grad(self, ctx, weight, grad, n, out):
        self.sparse_update(ctx, weight, grad, n, out)

    def rows(self, xp, w, grad, n):
        g = _clip_rows(xp, grad * self.rescale_grad + self.wd * w, self.clip_gradient)
        n = (1.0 - self.gamma1) * (g * g) + self.gamma1 * n
        return [_clip_rows(xp, w - self.lr * (g / xp.sqrt(n + self.epsilon)), self.clip_weights), n]


@register("rmspropalex_update")
class RMSPropAlexUpdate(_DenseOnly):
    """Graves' centered RMSProp: g = clip(rescale_grad * grad + wd * weight);
    n = (1 - gamma1) * g**2 + gamma1 * n; gm = (1 - gamma1) * g + gamma1 * gm;
    delta = gamma2 * delta - lr * g / sqrt(n - gm**2 + epsilon); weight = clip_weights(weight + delta)."""

    arguments = ("weight", "grad", "n", "g", "delta")
    mutate = ("n", "g", "delta")
    lr = _lr()
    gamma1 = Param(float, 0.95, "decay of the mean square and the mean")
    gamma2 = Param(float, 0.9, "decay of delta (momentum)")
    epsilon = Param(float, 1e-8, "added under the square root")
    wd, rescale_grad, clip_gradient = _wd(), _rescale(), _clip_gradient()
    clip_weights = Param(float, -1.0, "clip the new weight to [-c, c]; no clipping when negative")

    @kernel(device=_BOTH, stypes=("default", "row_sparse", "default", "default", "default"))
    def rsp_grad(self, ctx, weight, grad, n, g, delta, out):
        self.sparse_update(ctx, weight, grad, n, g, delta, out)

    def rows(self, xp, w, grad, n, gm, delta):
        g = _clip_rows(xp, grad * self.rescale_grad + self.wd * w, self.clip_gradient)
        n = (1.0 - self.gamma1) * g * g + self.gamma1 * n
        gm = (1.0 - self.gamma1) * g + self.gamma1 * gm
        delta = self.gamma2 * delta - self.lr * g / xp.sqrt(n - gm * gm + self.epsilon)
        return [_clip_rows(xp, w + delta, self.clip_weights), n, gm, delta]

    @classmethod
    def samples(cls) -> list:
        """n holds at least gm**2 (as it does after any sequence of updates), so the square
        root never sees a negative number."""
        from . import _samples

        from ..creation import array

        out = []
        for sig in _samples.kernel_stypes(cls):
            w = _samples.array((4, 3), "default", seed=1)
            grad = _samples.array((4, 3), sig[1], seed=2)
            gm = _samples.array((4, 3), "default", seed=4)
            delta = _samples.array((4, 3), "default", seed=5)
            n = _samples.array((4, 3), "default", seed=3, positive=True)
            n = array(n.asnumpy() + gm.asnumpy() ** 2)
            out.append(([w, grad, n, gm, delta], {"lr": 0.1, "wd": 0.01}))
        return out


@register("signsgd_update")
class SignSGDUpdate(_DenseOnly):
    """weight = (1 - lr * wd) * weight - lr * sign(grad) (MXNet's kernel takes the sign of the
    raw gradient: rescale_grad and clip_gradient are accepted and have no effect)."""

    arguments = ("weight", "grad")
    lr, wd, rescale_grad, clip_gradient = _lr(), _wd(), _rescale(), _clip_gradient()

    @kernel(device=_BOTH, stypes=("default", "row_sparse"))
    def rsp_grad(self, ctx, weight, grad, out):
        self.sparse_update(ctx, weight, grad, out)

    def rows(self, xp, w, grad):
        return [(1.0 - self.lr * self.wd) * w - self.lr * xp.sign(grad)]


@register("signum_update")
class SignumUpdate(_DenseOnly):
    """mom = momentum * mom - (1 - momentum) * (wd * weight + g);
    weight = (1 - lr * wd_lh) * weight + lr * sign(mom), with g = clip(rescale_grad * grad)."""

    arguments = ("weight", "grad", "mom")
    mutate = ("mom",)
    lr = _lr()
    momentum = Param(float, 0.0, "decay of the momentum")
    wd, rescale_grad, clip_gradient = _wd(), _rescale(), _clip_gradient()
    wd_lh = Param(float, 0.0, "decoupled weight decay (Loshchilov and Hutter)")

    @kernel(device=_BOTH, stypes=("default", "row_sparse", "default"))
    def rsp_grad(self, ctx, weight, grad, mom, out):
        self.sparse_update(ctx, weight, grad, mom, out)

    def rows(self, xp, w, grad, mom):
        m = self.momentum * mom - (1.0 - self.momentum) * self.wd * w - (1.0 - self.momentum) * self.scaled(xp, grad)
        return [(1.0 - self.lr * self.wd_lh) * w + self.lr * xp.sign(m), m]


@register("ftml_update")
class FTMLUpdate(_DenseOnly):
    """Follow the Moving Leader (Zheng & Kwok): g = clip(rescale_grad * grad + wd * weight);
    v = beta2 * v + (1 - beta2) * g**2; d_t = (1 - beta1**t) / lr * (sqrt(v / (1 - beta2**t)) + epsilon);
    z = beta1 * z + (1 - beta1) * g - (d_t - beta1 * d) * weight; d = d_t; weight = -z / d_t.
    ``t`` counts updates from 1."""

    arguments = ("weight", "grad", "d", "v", "z")
    mutate = ("d", "v", "z")
    lr = _lr()
    beta1 = Param(float, 0.6, "decay of z")
    beta2 = Param(float, 0.999, "decay of v")
    epsilon = Param(float, 1e-8, "added to the denominator d_t")
    t = Param(int, doc="the update's number, from 1")
    wd, rescale_grad = _wd(), _rescale()
    clip_grad = Param(float, -1.0, "clip the rescaled, decayed gradient to [-c, c]; no clipping when negative")

    def rows(self, xp, w, grad, d, v, z):
        g = _clip_rows(xp, self.rescale_grad * grad + self.wd * w, self.clip_grad)
        v = self.beta2 * v + (1.0 - self.beta2) * (g * g)
        # IEEE division (as the C of MXNet's kernel): lr = 0 gives inf, not Python's ZeroDivisionError
        with np.errstate(divide="ignore", invalid="ignore"):
            d_t = np.float64(1.0 - self.beta1 ** self.t) / np.float64(self.lr) * (
                xp.sqrt(v / (1.0 - self.beta2 ** self.t)) + self.epsilon)
        z = self.beta1 * z + (1.0 - self.beta1) * g - (d_t - self.beta1 * d) * w
        return [-z / d_t, d_t, v, z]

    @classmethod
    def samples(cls) -> list:
        """v (the mean square) is positive; t is the first and a later update."""
        from . import _samples

        return [(_samples.by_stypes([("default",) * 5], [(4, 3)] * 5, positive=(False, False, True, True, False))[0][0],
                 {"lr": 0.1, "wd": 0.01, "t": t}) for t in (1, 3)]


@register("lamb_update_phase1")
class LambUpdatePhase1(_DenseOnly):
    """LAMB's first phase (You et al.): the Adam moments of g = clip(rescale_grad * grad) and
    the step direction mean_hat / (sqrt(var_hat) + epsilon) + wd * weight, where the hats
    divide by 1 - beta**t when ``bias_correction``. The output is that direction (the
    weight is not changed; ``lamb_update_phase2`` applies it)."""

    arguments = ("weight", "grad", "mean", "var")
    mutate = ("mean", "var")
    beta1 = Param(float, 0.9, "decay of the first moment")
    beta2 = Param(float, 0.999, "decay of the second moment")
    epsilon = Param(float, 1e-6, "added to sqrt(var)")
    t = Param(int, doc="the update's number, from 1")
    bias_correction = Param(bool, True, "divide the moments by 1 - beta**t")
    wd, rescale_grad, clip_gradient = _wd(), _rescale(), _clip_gradient()

    def rows(self, xp, w, grad, mean, var):
        g = self.scaled(xp, grad)
        m = self.beta1 * mean + (1.0 - self.beta1) * g
        v = self.beta2 * var + (1.0 - self.beta2) * (g * g)
        if self.bias_correction:
            m_hat, v_hat = m / (1.0 - self.beta1 ** self.t), v / (1.0 - self.beta2 ** self.t)
        else:
            m_hat, v_hat = m, v
        return [m_hat / (xp.sqrt(v_hat) + self.epsilon) + self.wd * w, m, v]

    @classmethod
    def samples(cls) -> list:
        from . import _samples

        out = _samples.by_stypes([("default",) * 4], [(4, 3)] * 4, positive=(False, False, False, True))
        return [(xs, {"wd": 0.01, "t": t, "bias_correction": bc}) for xs, _ in out for t, bc in ((1, True), (4, False))]

    def reference(self, weight: np.ndarray, grad: np.ndarray, mean: np.ndarray, var: np.ndarray) -> np.ndarray:
        return self.rows(np, weight, grad, mean, var)[0]


@register("lamb_update_phase2")
class LambUpdatePhase2(Op):
    """LAMB's second phase: weight - lr * (r1 / r2) * g, with r1 (the weight's norm, a
    one-element array) clamped to [lower_bound, upper_bound] where those are not negative,
    and the ratio 1 when either norm is zero."""

    trusted = True
    out_may_alias = True  # out=weight, as every update: value by value
    differentiable = False
    arguments = ("weight", "g", "r1", "r2")
    lr = _lr()
    lower_bound = Param(float, -1.0, "smallest r1 used; none when negative")
    upper_bound = Param(float, -1.0, "largest r1 used; none when negative")

    def infer_shape(self, weight, g, r1, r2):
        if tuple(g) != tuple(weight):
            raise ValueError(f"g has shape {tuple(g)}, weight {tuple(weight)}")
        for name, s in (("r1", r1), ("r2", r2)):
            if math.prod(s) != 1:
                raise ValueError(f"{name} must hold one value (a norm), got shape {tuple(s)}")
        return [tuple(weight)]

    def infer_type(self, weight, g, r1, r2):
        if weight not in _FLOATS:
            raise TypeError(f"weight must be float16, float32 or float64, got {weight.name}")
        require_one_dtype(self._opdef.name, ("weight", "g", "r1", "r2"), (weight, g, r1, r2))
        return [weight]

    def infer_storage_type(self, weight, g, r1, r2):
        return ["default"]

    def ratio(self, xp: Any, r1: Any, r2: Any) -> Any:
        r1 = r1.reshape(1)
        r2 = r2.reshape(1)
        if self.lower_bound >= 0:
            r1 = xp.maximum(r1, self.lower_bound)
        if self.upper_bound >= 0:
            r1 = xp.minimum(r1, self.upper_bound)
        either_zero = (r1 == 0) | (r2 == 0)
        return xp.where(either_zero, 1.0, r1 / xp.where(either_zero, 1.0, r2))

    @kernel(device=_BOTH)
    def dense(self, ctx, weight, g, r1, r2, out):
        out[...] = weight - (self.lr * self.ratio(ctx.xp, r1, r2)).astype(weight.dtype) * g

    @classmethod
    def samples(cls) -> list:
        from . import _samples
        from ..creation import array

        w, g = (_samples.array((4, 3), seed=s) for s in (1, 2))
        norm = array(np.array([np.linalg.norm(w.asnumpy())]))
        return [([w, g, norm, array(np.array([2.5]))], {"lr": 0.1}),
                ([w, g, norm, array(np.array([0.0]))], {"lr": 0.1, "upper_bound": 1.0})]

    def reference(self, weight: np.ndarray, g: np.ndarray, r1: np.ndarray, r2: np.ndarray) -> np.ndarray:
        return weight - self.lr * self.ratio(np, r1, r2) * g


# ---- AdamW (MXNet's contrib ops): the rescale factor an input, decoupled weight decay -------------
def _rescale_factor(rescale_grad: Any) -> float | None:
    """The one value of the ``rescale_grad`` input, or None where MXNet skips the update: a
    factor that is not finite or is zero (what a mixed-precision loss scaler sends on overflow)."""
    s = float(rescale_grad.reshape(-1)[0])
    return s if math.isfinite(s) and s != 0.0 else None


class _AdamW(Op):
    """AdamW as MXNet's ``_adamw_update`` computes it: Loshchilov & Hutter's decoupled weight
    decay, without bias correction (the caller folds it into ``lr``). The step::

        g = clip(rescale_grad * grad, clip_gradient)
        mean = beta1 * mean + (1 - beta1) * g;  var = beta2 * var + (1 - beta2) * g**2
        weight = weight - eta * (lr * mean / (sqrt(var) + epsilon) + wd * weight)

    ``rescale_grad`` is an input holding one value, read on the host; when it is not finite
    or is zero the update is skipped: weight (and ``out``) and states are left as they are.
    Dense arrays; a row_sparse gradient takes the storage fallback (MXNet has only dense
    kernels)."""

    trusted = True
    out_may_alias = True  # out=weight, value by value
    differentiable = False
    capacity = cap.sum_of()  # a sparse weight or state (the storage fallback writes them back): their rows
    check_params = check_hyperparameters
    lr = _lr()
    eta = Param(float, doc="the learning rate schedule's multiplier of the whole step")
    beta1 = Param(float, 0.9, "decay of the first moment")
    beta2 = Param(float, 0.999, "decay of the second moment")
    epsilon = Param(float, 1e-8, "added to sqrt(var)")
    wd = Param(float, 0.0, "decoupled weight decay: eta * wd * weight is subtracted")
    clip_gradient = _clip_gradient()
    master = False  # _mp_adamw_update: a float32 master copy of the weight is an input too

    def infer_shape(self, weight, *others):
        *arrays, rescale = others
        for name, s in zip(self._opdef.arguments[1:], arrays):
            if tuple(s) != tuple(weight):
                raise ValueError(f"{name} has shape {tuple(s)}, weight {tuple(weight)}")
        if math.prod(rescale) != 1:
            raise ValueError(f"rescale_grad must hold one value, got shape {tuple(rescale)}")
        return [tuple(weight)]

    def infer_type(self, weight, grad, *others):
        *states, rescale = others
        if weight not in _FLOATS:
            raise TypeError(f"weight must be float16, float32 or float64, got {weight.name}")
        if rescale.kind != "f":
            raise TypeError(f"rescale_grad must be floating point, got {rescale.name}")
        names = self._opdef.arguments
        if self.master:  # MXNet's multi-precision form: states and master weight in float32
            require_one_dtype(self._opdef.name, names[:2], (weight, grad))
            for name, d in zip(names[2:], states):
                if d != np.float32:
                    raise TypeError(f"{name} must be float32 (the master copy's dtype), got {d.name}")
        else:
            require_one_dtype(self._opdef.name, names[:-1], (weight, grad, *states))
        return [weight]

    def infer_storage_type(self, weight, *others):
        return ["default"]

    @kernel(device=_BOTH)
    def dense(self, ctx, weight, grad, mean, var, *rest):
        *master, rescale_grad, out = rest
        s = _rescale_factor(rescale_grad)
        if s is None:
            if out is not weight:
                out[...] = weight
            return
        xp = ctx.xp
        work = np.float64 if weight.dtype == np.float64 else np.float32  # float16 computes in float32
        w = master[0] if master else weight.astype(work, copy=False)
        g = grad.astype(work, copy=False) * work(s)
        if self.clip_gradient >= 0:
            g = xp.clip(g, -self.clip_gradient, self.clip_gradient)
        m = self.beta1 * mean + (1.0 - self.beta1) * g
        v = self.beta2 * var + (1.0 - self.beta2) * (g * g)
        new = w - self.eta * (self.lr * m / (xp.sqrt(v) + self.epsilon) + self.wd * w)
        mean[...] = m
        var[...] = v
        if master:
            master[0][...] = new
        out[...] = new

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: float64 (float16 with float32 states for the master form) with
        a factor, a clipped one, and a skipped update (factor 0)."""
        from . import _samples
        from ..creation import array

        n = len(cls._opdef.arguments) - 1
        if cls.master:
            w = _samples.array((4, 3), seed=1, dtype="float16")
            xs = [w, _samples.array((4, 3), seed=2, dtype="float16"), _samples.array((4, 3), seed=3, dtype="float32"),
                  _samples.array((4, 3), seed=4, positive=True, dtype="float32"), w.astype("float32")]
        else:
            xs = _samples.by_stypes([("default",) * n], [(4, 3)] * n, positive=(False,) * (n - 1) + (True,))[0][0]
        params = {"lr": 0.1, "eta": 0.5, "wd": 0.01}
        return [(xs + [array(np.array([s], np.float32))], {**params, **extra})
                for s, extra in ((2.0, {}), (1.0, {"clip_gradient": 0.1}), (0.0, {}))]

    def reference(self, weight: np.ndarray, grad: np.ndarray, mean: np.ndarray, var: np.ndarray,
                  *rest: np.ndarray) -> np.ndarray:
        *master, rescale = rest
        s = float(rescale.reshape(-1)[0])
        if not math.isfinite(s) or s == 0:
            return weight.copy()
        w = (master[0] if master else weight).astype(np.float64)
        g = np.clip(s * grad.astype(np.float64), -self.clip_gradient, self.clip_gradient) \
            if self.clip_gradient >= 0 else s * grad.astype(np.float64)
        m = self.beta1 * mean + (1 - self.beta1) * g
        v = self.beta2 * var + (1 - self.beta2) * g * g
        return (w - self.eta * (self.lr * m / (np.sqrt(v) + self.epsilon) + self.wd * w)).astype(weight.dtype)


@register("_adamw_update")
class AdamWUpdate(_AdamW):
    __doc__ = _AdamW.__doc__
    arguments = ("weight", "grad", "mean", "var", "rescale_grad")
    mutate = ("mean", "var")


@register("_mp_adamw_update")
class MPAdamWUpdate(_AdamW):
    """``_adamw_update`` in mixed precision (MXNet's ``_mp_adamw_update``): a float16 (or
    other) weight and gradient, float32 states and a float32 master copy ``weight32`` of the
    weight, which the step updates in float32; the output is the new master weight in the
    weight's dtype. Skipped, as ``_adamw_update``, for a factor that is not finite or zero."""

    arguments = ("weight", "grad", "mean", "var", "weight32", "rescale_grad")
    mutate = ("mean", "var", "weight32")
    master = True


@register("_contrib_group_adagrad_update")
class GroupAdagradUpdate(Op):
    """AdaGrad with one rate per row (MXNet's ``group_adagrad_update``). For a weight of
    shape (rows, d) and a ``history`` of shape (rows, 1)::

        g = clip(rescale_grad * grad, clip_gradient)
        history += mean(g**2, axis=1, keepdims=True)
        weight -= lr * g / sqrt(history + epsilon)

    A row_sparse gradient updates only the rows it stores (lazily, as MXNet's kernel);
    ``history`` is updated in place. No weight decay (MXNet has none for it). Other storage
    types (a row_sparse weight and history) take the storage fallback, whose dense update
    leaves the rows a gradient does not store as they were."""

    trusted = True
    out_may_alias = True  # out=weight, row by row
    differentiable = False
    capacity = cap.sum_of()  # a row_sparse weight and history: the union of the stored rows
    arguments = ("weight", "grad", "history")
    check_params = check_hyperparameters
    mutate = ("history",)
    lr = _lr()
    rescale_grad, clip_gradient = _rescale(), _clip_gradient()
    epsilon = Param(float, 1e-5, "added to the history under the square root")

    def infer_shape(self, weight, grad, history):
        if len(weight) != 2:
            raise ValueError(f"weight must be 2-d (rows, d), got shape {tuple(weight)}")
        if tuple(grad) != tuple(weight):
            raise ValueError(f"grad has shape {tuple(grad)}, weight {tuple(weight)}")
        if tuple(history) != (weight[0], 1):
            raise ValueError(f"history must have shape ({weight[0]}, 1), got {tuple(history)}")
        return [tuple(weight)]

    def infer_type(self, weight, grad, history):
        if weight not in _FLOATS:
            raise TypeError(f"weight must be float16, float32 or float64, got {weight.name}")
        require_one_dtype(self._opdef.name, self._opdef.arguments, (weight, grad, history))
        return [weight]

    def infer_storage_type(self, weight, grad, history):
        return ["row_sparse" if weight == "row_sparse" else "default"]

    def step(self, xp: Any, w: Any, g: Any, h: Any) -> tuple:
        """(new weight rows, new history rows) for weight rows ``w``, their gradient ``g``
        and history ``h``."""
        work = np.float32 if w.dtype == np.float16 else w.dtype  # float16 computes in float32
        g = g.astype(work, copy=False) * self.rescale_grad
        if self.clip_gradient >= 0:
            g = xp.clip(g, -self.clip_gradient, self.clip_gradient)
        h = h.astype(work, copy=False) + (g * g).mean(axis=1, keepdims=True)
        return w - self.lr * g / xp.sqrt(h + self.epsilon), h

    @kernel(device=_BOTH)
    def dense(self, ctx, weight, grad, history, out):
        new, h = self.step(ctx.xp, weight, grad, history)
        history[...] = h
        out[...] = new

    @kernel(device=_BOTH, stypes=("default", "row_sparse", "default"))
    def rsp_grad(self, ctx, weight, grad, history, out):
        w, o, h = weight.data, out.data, history.data
        if o is not w:
            o[...] = w
        rows = grad.indices
        if rows.shape[0]:
            new, hist = self.step(ctx.xp, w[rows], grad.data, h[rows])
            h[rows] = hist
            o[rows] = new

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: dense and row_sparse gradients, with and without clipping."""
        from . import _samples

        out = []
        for gst in ("default", "row_sparse"):
            xs = [_samples.array((4, 3), seed=1), _samples.array((4, 3), gst, seed=2),
                  _samples.array((4, 1), seed=3, positive=True)]
            out += [(xs, {"lr": 0.1}), (xs, {"lr": 0.1, "rescale_grad": 2.0, "clip_gradient": 0.5})]
        return out

    def reference(self, weight: np.ndarray, grad: np.ndarray, history: np.ndarray) -> np.ndarray:
        rows = np.flatnonzero(np.any(grad != 0, axis=1))  # the samples' row_sparse grads store no zero rows
        out = weight.copy()
        out[rows] = self.step(np, weight[rows], grad[rows], history[rows])[0]
        return out
