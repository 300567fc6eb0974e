"""``mx.nd.contrib``: MXNet's contrib operators (``getnnz``, ``quadratic``, ``SparseEmbedding``,
``isinf``/``isnan``/``isfinite``, ``rand_zipfian``, the AdamW updates, ...).

``mx.nd.contrib.<name>`` is operator ``_contrib_<name>`` of the table (MXNet's own table
name), else operator ``<name>``, called the MXNet way. ``SparseEmbedding`` is
``Embedding`` with ``sparse_grad=True`` (what MXNet's contrib op is: a row_sparse weight
gradient).
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from ....registry import Param
from ..base import MXNetArgumentError
from . import _op
from . import random as _random
from .ndarray import array
from .composed import BatchNorm
from .op import Embedding, _host_ids


def SparseEmbedding(*args: Any, **kwargs: Any) -> Any:
    """``Embedding(data, weight, input_dim, output_dim, ...)`` with a row_sparse weight gradient."""
    kwargs["sparse_grad"] = True
    kwargs.pop("deterministic", None)  # MXNet's switch of its GPU kernel; results here are deterministic
    return Embedding(*args, **kwargs)


@_op.mxnet_call(axis=Param(int, 0))
def boolean_mask(data: Any, index: Any, axis: int = 0, out: Any = None, name: Any = None) -> Any:
    """MXNet's ``contrib.boolean_mask``: the slices of ``data`` along ``axis`` where ``index``
    (1-d, one value per slice) is nonzero, in order; recorded as a ``take``, so the
    gradient reaches the kept slices and the others get zero."""
    keep = index.asnumpy() if hasattr(index, "asnumpy") else np.asarray(index)
    if keep.ndim != 1 or keep.shape[0] != data.shape[axis]:
        raise MXNetArgumentError(f"boolean_mask: index must be 1-d with one value per slice of axis {axis} "
                                 f"({data.shape[axis]}), got shape {tuple(keep.shape)}")
    positions = array(np.flatnonzero(keep), ctx=data.context, dtype="int64")
    return _op.call("take", [data, positions], {"axis": axis, "mode": "raise"}, out=out)


@_op.mxnet_call()
def index_copy(old_tensor: Any, index_vector: Any, new_tensor: Any, out: Any = None, name: Any = None) -> Any:
    """MXNet's ``contrib.index_copy``: a copy of ``old_tensor`` whose rows ``index_vector``
    (distinct, in range) hold the rows of ``new_tensor``. Recorded as ``old * keep`` plus the
    new rows scattered (``_backward_take``), so ``old_tensor`` gets the gradient of the rows
    kept and ``new_tensor`` that of the rows it filled."""
    ids = _host_ids(index_vector, "index_copy")
    n = old_tensor.shape[0]
    if ids.ndim != 1 or new_tensor.shape != (ids.shape[0],) + tuple(old_tensor.shape[1:]):
        raise MXNetArgumentError(f"index_copy: index_vector must be 1-d and new_tensor of shape (len(index_vector),) + "
                                 f"{tuple(old_tensor.shape[1:])}, got {tuple(ids.shape)} and {tuple(new_tensor.shape)}")
    if ids.size and (ids.min() < 0 or ids.max() >= n or np.unique(ids).size != ids.size):
        raise MXNetArgumentError(f"index_copy: index_vector must hold distinct rows in [0, {n}), got {ids.tolist()}")
    keep = np.ones((n,) + (1,) * (old_tensor.ndim - 1))
    keep[ids] = 0
    kept = _op.call("broadcast_mul", [old_tensor, array(keep, ctx=old_tensor.context, dtype=old_tensor.dtype)])
    placed = _op.call("_backward_take", [new_tensor, array(ids, ctx=old_tensor.context, dtype="int64")],
                      {"shape": tuple(old_tensor.shape), "axis": 0, "mode": "raise"})
    return _op.call("elemwise_add", [kept, placed], out=out)


def isinf(data: Any) -> Any:
    """1 where ``data`` is +inf or -inf, else 0, in ``data``'s dtype (``abs(data) == inf``)."""
    return _op.call("_equal_scalar", [_op.call("abs", [data])], {"scalar": float("inf")})


def isnan(data: Any) -> Any:
    """1 where ``data`` is NaN, else 0, in ``data``'s dtype (``data != data``)."""
    return _op.call("broadcast_not_equal", [data, data])


def isfinite(data: Any) -> Any:
    """1 where ``data`` is neither infinite nor NaN, else 0, in ``data``'s dtype."""
    return _op.call("broadcast_mul", [_op.call("broadcast_equal", [data, data]),
                                      _op.call("_not_equal_scalar", [_op.call("abs", [data])],
                                               {"scalar": float("inf")})])


def _rescale_array(rescale_grad: Any, weight: Any) -> Any:
    """``rescale_grad`` as the one-value float32 array the AdamW ops take (MXNet's
    ``_get_rescale_grad``): a number becomes one on the weight's device."""
    if isinstance(rescale_grad, (int, float, np.floating, np.integer)):
        return array(np.array([rescale_grad], np.float32), ctx=weight.context)
    return rescale_grad


def adamw_update(weight: Any, grad: Any, mean: Any, var: Any, rescale_grad: Any, lr: float, eta: float,
                 beta1: float = 0.9, beta2: float = 0.999, epsilon: float = 1e-8, wd: float = 0.0,
                 clip_gradient: float = -1.0, out: Any = None, name: Any = None, **kwargs: Any) -> Any:
    """AdamW's step (operator ``_adamw_update``): ``mean`` and ``var`` updated in place, the
    new weight written to ``out``; skipped when ``rescale_grad`` (a number or a one-value
    array) is not finite or zero."""
    params = dict(lr=lr, eta=eta, beta1=beta1, beta2=beta2, epsilon=epsilon, wd=wd, clip_gradient=clip_gradient,
                  **kwargs)
    return _op.call("_adamw_update", [weight, grad, mean, var, _rescale_array(rescale_grad, weight)], params, out)


def mp_adamw_update(weight: Any, grad: Any, mean: Any, var: Any, weight32: Any, rescale_grad: Any, lr: float,
                    eta: float, beta1: float = 0.9, beta2: float = 0.999, epsilon: float = 1e-8, wd: float = 0.0,
                    clip_gradient: float = -1.0, out: Any = None, name: Any = None, **kwargs: Any) -> Any:
    """``adamw_update`` in mixed precision (operator ``_mp_adamw_update``): float32 states and
    master weight ``weight32``, updated in place; ``out`` gets the new weight in its dtype."""
    params = dict(lr=lr, eta=eta, beta1=beta1, beta2=beta2, epsilon=epsilon, wd=wd, clip_gradient=clip_gradient,
                  **kwargs)
    return _op.call("_mp_adamw_update", [weight, grad, mean, var, weight32, _rescale_array(rescale_grad, weight)],
                    params, out)


def _multi(update: Any, groups: Sequence[Sequence[Any]], rescale_grad: Any, lrs: Any, wds: Any, etas: Any,
           out: Any, size: int, kwargs: dict) -> list:
    """``update`` on each weight's arrays in turn, with its own rate, decay and multiplier
    (MXNet's ``multi_*`` ops update a list of weights in one call)."""
    size = size or len(groups[0])
    for what, values in (("lrs", lrs), ("wds", wds), ("etas", etas), *(("arrays", g) for g in groups)):
        if len(values) < size:
            raise MXNetArgumentError(f"multi-tensor AdamW: {what} holds {len(values)} values for {size} weights")
    outs = list(out) if isinstance(out, (list, tuple)) else [None] * size if out is None else None
    if outs is None or len(outs) < size:
        raise MXNetArgumentError("multi-tensor AdamW: out must be a list with one array per weight")
    scale = _rescale_array(rescale_grad, groups[0][0])
    return [update(*(g[i] for g in groups), scale, lr=lrs[i], wd=wds[i], eta=etas[i], out=outs[i], **kwargs)
            for i in range(size)]


def multi_adamw_update(weights: Sequence[Any], grads: Sequence[Any], mean: Sequence[Any], var: Sequence[Any],
                       rescale_grad: Any, lrs: Any, wds: Any, etas: Any, out: Any = None, name: Any = None,
                       size: int = 0, **kwargs: Any) -> list:
    """``adamw_update`` on every weight of the lists, each with its ``lrs``/``wds``/``etas``
    value; one ``rescale_grad`` for all (all skipped when it is not finite or zero)."""
    return _multi(adamw_update, (weights, grads, mean, var), rescale_grad, lrs, wds, etas, out, size, kwargs)


def multi_mp_adamw_update(weights: Sequence[Any], grads: Sequence[Any], mean: Sequence[Any], var: Sequence[Any],
                          weights32: Sequence[Any], rescale_grad: Any, lrs: Any, wds: Any, etas: Any, out: Any = None,
                          name: Any = None, size: int = 0, **kwargs: Any) -> list:
    """``mp_adamw_update`` on every weight of the lists (see ``multi_adamw_update``)."""
    return _multi(mp_adamw_update, (weights, grads, mean, var, weights32), rescale_grad, lrs, wds, etas, out, size,
                  kwargs)


@_op.mxnet_call(num_sampled=Param(int), range_max=Param(int))
def rand_zipfian(true_classes: Any, num_sampled: int, range_max: int, ctx: Any = None) -> tuple:
    """(``num_sampled`` classes drawn with replacement from the log-uniform (Zipfian)
    distribution over [0, range_max) as int64, the expected count of each true class, the
    expected count of each drawn class), as MXNet's ``contrib.rand_zipfian`` gives for
    sampled softmax: class k has probability log((k + 2) / (k + 1)) / log(range_max + 1), and
    a class's expected count is that times ``num_sampled``; the counts are float64."""
    if not hasattr(true_classes, "asnumpy"):
        raise MXNetArgumentError(f"rand_zipfian: true_classes must be an NDArray, got {type(true_classes).__name__}")
    device = true_classes.context if ctx is None else ctx
    log_range = math.log(range_max + 1)
    draws = _random.uniform(0, log_range, shape=(num_sampled,), dtype="float64", ctx=device)
    sampled = (draws.exp() - 1).astype("int64") % range_max

    def expected(classes: Any) -> Any:
        c = classes.astype("float64")
        return ((c + 2.0) / (c + 1.0)).log() / log_range * num_sampled

    return sampled, expected(true_classes), expected(sampled)


def SyncBatchNorm(data: Any, gamma: Any, beta: Any, moving_mean: Any, moving_var: Any, eps: float = 1e-3,
                  momentum: float = 0.9, fix_gamma: bool = True, use_global_stats: bool = False,
                  output_mean_var: bool = False, ndev: int = 1, key: Any = None, out: Any = None,
                  name: Any = None) -> Any:
    """MXNet's ``contrib.SyncBatchNorm``: ``BatchNorm`` over channel axis 1 whose statistics
    MXNet shares between the ``ndev`` devices of one batch (by ``key``). Here a batch lives on
    one device, so the statistics are the whole batch's: ``BatchNorm``'s values, gradients
    and moving statistics. With ``output_mean_var`` the third output is the variance (where
    ``BatchNorm`` gives the inverse standard deviation), as MXNet's SyncBatchNorm gives it."""
    if isinstance(ndev, bool) or not isinstance(ndev, (int, np.integer)) or ndev < 1:
        raise MXNetArgumentError(f"SyncBatchNorm: ndev must be a positive int, got {ndev!r}")
    got = BatchNorm(data, gamma, beta, moving_mean, moving_var, eps=eps, momentum=momentum, fix_gamma=fix_gamma,
                    use_global_stats=use_global_stats, output_mean_var=output_mean_var, axis=1,
                    out=None if output_mean_var else out)
    if not output_mean_var:
        return got
    result, mean, inv_std = got
    var = _op.call("BlockGrad", [1.0 / (inv_std * inv_std) - float(eps)])
    if out is None:
        return [result, mean, var]
    for o, r in zip(out, (result, mean, var)):
        o[:] = r
    return out


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    try:
        return _op.cached_function("_contrib_" + name)
    except AttributeError:
        return _op.cached_function(name)


__all__ = ["SparseEmbedding", "SyncBatchNorm", "boolean_mask", "index_copy", "isinf", "isnan", "isfinite", "rand_zipfian", "adamw_update", "mp_adamw_update", "multi_adamw_update",
           "multi_mp_adamw_update"]
