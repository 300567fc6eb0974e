"""``mx.nd.random``: sampling with MXNet's signatures (``ctx=`` for the device).

Scalar distribution parameters only: MXNet's per-element form (``low``/``high`` given
as NDArrays, its ``sample_uniform``) is not covered and raises TypeError.
"""
from __future__ import annotations

from typing import Any

from .... import random as _core_random
from ....ndarray import NDArray
from ..base import _Null


def _given(v: Any) -> Any:
    return None if v is _Null else v


def _scalar(name: str, v: Any) -> float:
    if isinstance(v, NDArray):
        raise TypeError(f"{name} as an NDArray (per-element sampling) is not supported; pass a number")
    return v


def uniform(low: float = 0, high: float = 1, shape: Any = _Null, dtype: Any = _Null, ctx: Any = None,
            out: NDArray | None = None, **kwargs: Any) -> NDArray:
    """Samples of U[low, high); ``shape`` defaults to (1,), ``dtype`` to float32."""
    kwargs.pop("name", None)
    if kwargs:
        raise TypeError(f"uniform() got unexpected arguments {sorted(kwargs)}")
    return _core_random.uniform(_scalar("low", low), _scalar("high", high), shape=_given(shape),
                                dtype=_given(dtype), device=ctx, out=out)


def normal(loc: float = 0, scale: float = 1, shape: Any = _Null, dtype: Any = _Null, ctx: Any = None,
           out: NDArray | None = None, **kwargs: Any) -> NDArray:
    """Samples of N(loc, scale²); ``shape`` defaults to (1,), ``dtype`` to float32."""
    kwargs.pop("name", None)
    if kwargs:
        raise TypeError(f"normal() got unexpected arguments {sorted(kwargs)}")
    return _core_random.normal(_scalar("loc", loc), _scalar("scale", scale), shape=_given(shape),
                               dtype=_given(dtype), device=ctx, out=out)


def randn(*shape: int, loc: float = 0, scale: float = 1, dtype: Any = _Null, ctx: Any = None,
          out: NDArray | None = None) -> NDArray:
    """Normal samples of shape ``shape`` given as separate integers (``randn(2, 3)``)."""
    return normal(loc, scale, shape=shape or _Null, dtype=dtype, ctx=ctx, out=out)


__all__ = ["uniform", "normal", "randn"]
