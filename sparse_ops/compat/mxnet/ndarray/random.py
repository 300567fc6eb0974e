"""``mx.nd.random``: sampling with MXNet's signatures (``ctx=`` for the device): the
distributions, ``randint``, ``multinomial`` and ``shuffle``.

Scalar distribution parameters only: MXNet's per-element form (``low``/``high`` given
as NDArrays, its ``sample_uniform``) is not covered and raises TypeError.
"""
from __future__ import annotations

from typing import Any

from .... import random as _core_random
from ....ndarray import NDArray
from ..base import MXNetArgumentError, _Null
from . import _op
from ._op import as_face


def _given(v: Any) -> Any:
    return None if v is _Null else v


def _fresh(out: Any, result: Any) -> Any:
    """A sampler's result: the face's array when it is new (``out`` is returned as given)."""
    return result if out is not None else as_face(result)


def _scalar(name: str, v: Any) -> float:
    if isinstance(v, NDArray):
        raise MXNetArgumentError(f"{name} as an NDArray (per-element sampling) is not supported; pass a number")
    return v


def uniform(low: float = 0, high: float = 1, shape: Any = _Null, dtype: Any = _Null, ctx: Any = None,
            out: NDArray | None = None, **kwargs: Any) -> NDArray:
    """Samples of U[low, high); ``shape`` defaults to (1,), ``dtype`` to float32."""
    kwargs.pop("name", None)
    if kwargs:
        raise MXNetArgumentError(f"uniform() got unexpected arguments {sorted(kwargs)}")
    return _fresh(out, _core_random.uniform(_scalar("low", low), _scalar("high", high), shape=_given(shape),
                                            dtype=_given(dtype), device=ctx, out=out))


def normal(loc: float = 0, scale: float = 1, shape: Any = _Null, dtype: Any = _Null, ctx: Any = None,
           out: NDArray | None = None, **kwargs: Any) -> NDArray:
    """Samples of N(loc, scale²); ``shape`` defaults to (1,), ``dtype`` to float32."""
    kwargs.pop("name", None)
    if kwargs:
        raise MXNetArgumentError(f"normal() got unexpected arguments {sorted(kwargs)}")
    return _fresh(out, _core_random.normal(_scalar("loc", loc), _scalar("scale", scale), shape=_given(shape),
                                           dtype=_given(dtype), device=ctx, out=out))


def randn(*shape: int, loc: float = 0, scale: float = 1, dtype: Any = _Null, ctx: Any = None,
          out: NDArray | None = None) -> NDArray:
    """Normal samples of shape ``shape`` given as separate integers (``randn(2, 3)``)."""
    return normal(loc, scale, shape=shape or _Null, dtype=dtype, ctx=ctx, out=out)


def _sampler(mx_name: str, op_name: str, names: tuple, defaults: tuple, transform: Any = None,
             after: tuple = ("shape", "dtype", "ctx")) -> Any:
    """MXNet's sampler ``mx_name``: the distribution's scalar parameters ``names``, then
    ``after`` by position (the legacy ``mx.nd.random_*`` names take ctx before dtype)."""
    def fn(*args: Any, shape: Any = _Null, dtype: Any = _Null, ctx: Any = None, out: NDArray | None = None,
           **kwargs: Any) -> NDArray:
        kwargs.pop("name", None)
        if len(args) > len(names) + len(after):
            raise MXNetArgumentError(f"{mx_name}() takes at most {len(names) + len(after)} positional arguments "
                                     f"({', '.join(names + after)}), got {len(args)}")
        rest = dict(zip(after, args[len(names):]))
        shape, dtype, ctx = rest.get("shape", shape), rest.get("dtype", dtype), rest.get("ctx", ctx)
        values = dict(zip(names, defaults))
        values.update(zip(names, args))
        for k in list(kwargs):
            if k in values:
                values[k] = kwargs.pop(k)
        if kwargs:
            raise MXNetArgumentError(f"{mx_name}() got unexpected arguments {sorted(kwargs)}")
        values = {k: _scalar(k, v) for k, v in values.items()}
        params = transform(values) if transform else values
        return _fresh(out, _core_random.sample(op_name, params, shape=_given(shape), dtype=_given(dtype), device=ctx,
                                               out=out))

    fn.__name__ = fn.__qualname__ = mx_name
    fn.__doc__ = (f"MXNet's ``nd.random.{mx_name}({', '.join(f'{n}={d}' for n, d in zip(names, defaults))}, "
                  f"shape, dtype, ctx, out)``: operator ``{op_name}``; scalar parameters only.")
    return fn


gamma = _sampler("gamma", "_random_gamma", ("alpha", "beta"), (1, 1))
def _rate(values: dict) -> dict:
    """``_random_exponential``'s rate from MXNet's ``scale``, refused in the caller's terms
    (the op would name its own ``lam``)."""
    if not values["scale"] >= 0:
        raise MXNetArgumentError(f"exponential(): scale must be non-negative, got {values['scale']}")
    return {"lam": 1.0 / values["scale"] if values["scale"] else float("inf")}  # scale 0: zeros, as NumPy


exponential = _sampler("exponential", "_random_exponential", ("scale",), (1,), _rate)
poisson = _sampler("poisson", "_random_poisson", ("lam",), (1,))
negative_binomial = _sampler("negative_binomial", "_random_negative_binomial", ("k", "p"), (1, 1))
generalized_negative_binomial = _sampler("generalized_negative_binomial", "_random_generalized_negative_binomial",
                                         ("mu", "alpha"), (1, 1))

def randint(low: int, high: int, shape: Any = _Null, dtype: Any = _Null, ctx: Any = None,
            out: NDArray | None = None, **kwargs: Any) -> NDArray:
    """Integers uniform on [low, high); ``shape`` defaults to (1,), ``dtype`` to int32."""
    kwargs.pop("name", None)
    if kwargs:
        raise MXNetArgumentError(f"randint() got unexpected arguments {sorted(kwargs)}")
    return _fresh(out, _core_random.randint(_scalar("low", low), _scalar("high", high), shape=_given(shape),
                                            dtype=_given(dtype), device=ctx, out=out))


def multinomial(data: NDArray, shape: Any = _Null, get_prob: bool = False, out: Any = None,
                dtype: Any = "int32", **kwargs: Any) -> Any:
    """Category ids drawn from the distributions along ``data``'s last axis, of shape
    ``data.shape[:-1] + shape``; with ``get_prob``, ``[ids, log probabilities]``."""
    kwargs.pop("name", None)
    if kwargs:
        raise MXNetArgumentError(f"multinomial() got unexpected arguments {sorted(kwargs)}")
    params = {"get_prob": get_prob, "dtype": dtype}
    if _given(shape) is not None:
        params["shape"] = (shape,) if isinstance(shape, int) else shape
    return _op.call("_sample_multinomial", [data], params, out=out)


def shuffle(data: NDArray, out: NDArray | None = None, **kwargs: Any) -> NDArray:
    """A copy of ``data`` with its first axis randomly permuted."""
    kwargs.pop("name", None)
    if kwargs:
        raise MXNetArgumentError(f"shuffle() got unexpected arguments {sorted(kwargs)}")
    return _op.call("_shuffle", [data], out=out)


__all__ = ["randint", "multinomial", "shuffle", "uniform", "normal", "randn", "gamma", "exponential", "poisson", "negative_binomial",
           "generalized_negative_binomial"]
