"""MXNet operators whose calling convention differs from the table's generic mapping
(``_op.make_function``): ``Custom`` (inputs by the names the op declares), ``Activation``
(one operator per ``act_type``), ``Embedding`` (its dtype is the weight's) and the legacy
samplers ``uniform``/``normal`` (``ctx`` before ``dtype``).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ....custom import Custom as _core_custom
from ....dtypes import truncated_ids
from ....errors import InvalidIndexError
from ....ndarray import NDArray
from ....registry import get_op
from ..base import MXNetArgumentError, MXNetValueError
from . import _op, random
from ._op import as_face


def Embedding(*args: Any, **kwargs: Any) -> Any:
    """``Embedding(data, weight, input_dim, output_dim, dtype, sparse_grad)``: as MXNet 1.9.1
    infers it imperatively, the output's dtype is the weight's whatever ``dtype`` says (the
    operator's ``dtype`` defaults to float32 and refuses another weight dtype)."""
    weight = args[1] if len(args) > 1 else kwargs.get("weight")
    if isinstance(weight, NDArray):
        if len(args) > 4:
            args = (*args[:4], weight.dtype.name, *args[5:])
        else:
            kwargs["dtype"] = weight.dtype.name
    return _op.cached_function("Embedding")(*args, **kwargs)


def Custom(*data: Any, op_type: str, name: str | None = None, out: Any = None, **kwargs: Any) -> Any:
    """Run custom operator ``op_type`` (registered with ``mx.operator.register``).

    Inputs come by position, or by keyword under the names the op's ``list_arguments``
    and ``list_auxiliary_states`` give; other keywords are the op's parameters.
    """
    by_name = {k: v for k, v in kwargs.items() if isinstance(v, NDArray)}
    if by_name:
        params = {k: v for k, v in kwargs.items() if k not in by_name}
        order = _custom_input_names(op_type, params)
        unknown = sorted(set(by_name) - set(order))
        if unknown:
            raise MXNetArgumentError(f"Custom: {op_type!r} has no input named {', '.join(unknown)} (inputs: {order})")
        taken = [n for n in order[:len(data)] if n in by_name]
        if taken:
            raise MXNetArgumentError(f"Custom: input(s) {taken} given both by position and by keyword")
        rest = order[len(data):]
        k = sum(n in by_name for n in rest)  # keyword inputs must continue the positional ones
        missing = [n for n in rest[:k] if n not in by_name]
        if missing:
            raise MXNetArgumentError(f"Custom: missing input(s) {missing} of {op_type!r}")
        data = data + tuple(by_name[n] for n in rest[:k])
        kwargs = params
    result = _core_custom(*data, op_type=op_type, name=name, out=out, **kwargs)
    return result if out is not None else as_face(result)


def _custom_input_names(op_type: str, params: dict[str, Any]) -> list[str]:
    prop_cls = getattr(get_op(op_type).cls, "prop_class", None)
    if prop_cls is None:
        raise MXNetArgumentError(f"Custom: keyword inputs need an operator registered from a CustomOpProp; "
                        f"pass the inputs of {op_type!r} by position")
    prop = prop_cls(**{k: str(v) for k, v in params.items()})
    return list(prop.list_arguments()) + list(prop.list_auxiliary_states())


_ACTIVATIONS = {"relu": "relu", "sigmoid": "sigmoid", "tanh": "tanh", "softsign": "softsign"}


@_op.mxnet_call()
def Activation(data: NDArray, act_type: str, out: NDArray | None = None, name: str | None = None) -> NDArray:
    """MXNet's ``Activation`` for ``act_type`` relu, sigmoid, tanh or softsign."""
    op = _ACTIVATIONS.get(act_type)
    if op is None:
        raise MXNetValueError(f"Activation: act_type {act_type!r} is not supported here; "
                         f"supported: {', '.join(_ACTIVATIONS)}")
    return _op.call(op, [data], out=out)



def uniform(low: float = 0, high: float = 1, shape: Any = None, ctx: Any = None, dtype: Any = None,
            out: NDArray | None = None) -> NDArray:
    """MXNet's legacy ``nd.uniform`` (ctx before dtype); see ``mx.nd.random.uniform``."""
    return random.uniform(low, high, shape=shape, dtype=dtype, ctx=ctx, out=out)


def normal(loc: float = 0, scale: float = 1, shape: Any = None, ctx: Any = None, dtype: Any = None,
           out: NDArray | None = None) -> NDArray:
    """MXNet's legacy ``nd.normal`` (ctx before dtype); see ``mx.nd.random.normal``."""
    return random.normal(loc, scale, shape=shape, dtype=dtype, ctx=ctx, out=out)


@_op.mxnet_call()
def batch_take(a: NDArray, indices: NDArray, out: NDArray | None = None, name: str | None = None) -> NDArray:
    """MXNet's ``batch_take``: ``a[i, indices[i]]`` for each row ``i`` of a 2-d ``a``, indices
    clipped into range as MXNet's are (operator ``pick`` along axis 1)."""
    if a.ndim != 2:
        raise MXNetValueError(f"batch_take: a must be 2-d, got shape {tuple(a.shape)}")
    return _op.call("pick", [a, indices], {"axis": 1, "mode": "clip"}, out=out)


def _host_ids(indices: Any, what: str) -> np.ndarray:
    """Index values of a face array (floats truncate, as MXNet casts them) as int64 on the
    host: which entries a gather reads is decided there, before the gather runs."""
    ids = indices.asnumpy() if isinstance(indices, NDArray) else np.asarray(indices)
    if ids.dtype.kind == "f" and not np.isfinite(ids).all():
        raise InvalidIndexError(f"{what}: indices must be finite, got {ids[~np.isfinite(ids)][0]}")
    return truncated_ids(np, ids) if ids.dtype.kind == "f" else ids.astype(np.int64)


@_op.mxnet_call()
def gather_nd(data: NDArray, indices: NDArray, out: NDArray | None = None, name: str | None = None) -> NDArray:
    """MXNet's ``gather_nd``: ``indices`` of shape ``(M, Y...)`` pick ``data[i_0, ..., i_{M-1}]``
    for each position of ``Y...``, giving shape ``Y... + data.shape[M:]``; negative indices
    count from the end, others out of range raise ``IndexError``. Recorded as a reshape and
    a ``take``, so the gradient scatters back to ``data``."""
    ids = _host_ids(indices, "gather_nd")
    m = ids.shape[0] if ids.ndim else 0
    if ids.ndim < 1 or not 1 <= m <= data.ndim:
        raise MXNetValueError(f"gather_nd: indices must have shape (M, ...) with 1 <= M <= data.ndim = {data.ndim}, "
                              f"got shape {tuple(ids.shape)}")
    for axis in range(m):
        n = data.shape[axis]
        bad = (ids[axis] < -n) | (ids[axis] >= n)
        if bad.any():
            raise InvalidIndexError(f"gather_nd: index {ids[axis][bad][0]} is out of bounds for axis {axis} with "
                                    f"size {n}")
        ids[axis] %= max(n, 1)
    flat = np.ravel_multi_index(tuple(ids), data.shape[:m]) if ids.size else np.zeros(ids.shape[1:], np.int64)
    rows = _op.call("reshape", [data], {"shape": (-1,) + tuple(data.shape[m:])})
    positions = NDArray(data.device.xp.asarray(flat, dtype=np.int64), data.device)
    return _op.call("take", [rows, positions], {"axis": 0, "mode": "raise"}, out=out)


random_uniform = uniform
random_normal = normal
# MXNet 1.x's legacy names of its samplers' registered operators: the raw parameters
# (``random_exponential`` takes the rate ``lam``), ctx before dtype
_LEGACY = ("shape", "ctx", "dtype")
random_exponential = random._sampler("random_exponential", "_random_exponential", ("lam",), (1,), after=_LEGACY)
random_gamma = random._sampler("random_gamma", "_random_gamma", ("alpha", "beta"), (1, 1), after=_LEGACY)
random_poisson = random._sampler("random_poisson", "_random_poisson", ("lam",), (1,), after=_LEGACY)
random_negative_binomial = random._sampler("random_negative_binomial", "_random_negative_binomial", ("k", "p"),
                                           (1, 1), after=_LEGACY)
random_generalized_negative_binomial = random._sampler(
    "random_generalized_negative_binomial", "_random_generalized_negative_binomial", ("mu", "alpha"), (1, 1),
    after=_LEGACY)
random_randint = random.randint


__all__ = ["Custom", "Activation", "batch_take", "gather_nd", "uniform", "normal", "random_uniform", "random_normal",
           "random_exponential", "random_gamma", "random_poisson", "random_negative_binomial",
           "random_generalized_negative_binomial", "random_randint"]
