"""``mx.nd``: MXNet 1.x's imperative NDArray API over sparse-ops.

The classes are sparse-ops' own (``mx.nd.NDArray is sparse_ops.NDArray``; the sparse
classes subclass it), so arrays pass freely between this face and sparse-ops. Creation
functions take MXNet's signatures and defaults (``ctx=``, float32 unless the source is
an NDArray), every registered operator is reachable under its MXNet name
(``mx.nd.dot``, ``mx.nd.Embedding``, ...; resolved at first use), and results are
never 0-d (a full reduction has shape ``(1,)``, as in MXNet 1.x).
"""
from __future__ import annotations

import builtins as _builtins
import operator as _pyop
import os
import sys
from typing import Any, Callable

import numpy as np

from .... import creation as _core
from .... import device as _dev
from .... import io as _io
from ....container_methods import install_mxnet
from ....custom import Custom as _core_custom
from ....dtypes import value_dtype
from ....ndarray import BaseSparseNDArray, CSRNDArray, NDArray, RowSparseNDArray
from ....registry import get_op
from ..base import MXNetArgumentError, MXNetValueError, mx_real_t
from . import _op


install_mxnet()  # x.indptr[0].asscalar() and x._num_aux, as MXNet code reads them


def _device(ctx: Any) -> _dev.Device:
    return _dev.as_device(ctx)  # None -> the current default device


def _is_scipy_sparse(obj: Any) -> bool:
    return "scipy.sparse" in sys.modules and sys.modules["scipy.sparse"].issparse(obj)


# ---- creation -------------------------------------------------------------------------------------
def array(source_array: Any, ctx: Any = None, dtype: Any = None) -> NDArray:
    """A new array holding a copy of ``source_array`` on ``ctx``.

    The dtype is ``dtype`` if given, the source's for an NDArray (and a SciPy matrix),
    and float32 for anything else, NumPy arrays of any dtype included (MXNet converts).
    Sparse NDArrays and SciPy matrices give sparse arrays.
    """
    if (isinstance(source_array, NDArray) and source_array.stype != "default") or _is_scipy_sparse(source_array):
        from .sparse import array as sparse_array

        return sparse_array(source_array, ctx=ctx, dtype=dtype)
    if isinstance(source_array, NDArray):
        dt = source_array.dtype if dtype is None else dtype
    else:
        dt = mx_real_t if dtype is None else dtype
    return _core.array(source_array, dtype=dt, device=_device(ctx))


def zeros(shape: Any, ctx: Any = None, dtype: Any = None, stype: str | None = None) -> NDArray:
    """An array of zeros (float32 unless ``dtype``; dense unless ``stype``)."""
    return _core.zeros(shape, stype=stype or "default", dtype=mx_real_t if dtype is None else dtype,
                       device=_device(ctx))


def ones(shape: Any, ctx: Any = None, dtype: Any = None) -> NDArray:
    """A dense array of ones (float32 unless ``dtype``)."""
    return _core.ones(shape, dtype=mx_real_t if dtype is None else dtype, device=_device(ctx))


def full(shape: Any, val: Any, ctx: Any = None, dtype: Any = mx_real_t, out: NDArray | None = None) -> NDArray:
    """A dense array filled with ``val``; with ``out``, fill that array instead."""
    if out is not None:
        out[:] = val
        return out
    return _core.full(shape, val, dtype=dtype, device=_device(ctx))


def empty(shape: Any, ctx: Any = None, dtype: Any = None, stype: str | None = None) -> NDArray:
    """An uninitialised array (float32 unless ``dtype``); sparse storage types store nothing."""
    return _core.empty(shape, stype=stype or "default", dtype=mx_real_t if dtype is None else dtype,
                       device=_device(ctx))


def arange(start: float, stop: float | None = None, step: float = 1.0, repeat: int = 1,
           infer_range: Any = None, ctx: Any = None, dtype: Any = mx_real_t) -> NDArray:
    """Evenly spaced values in [start, stop) (``[0, start)`` without ``stop``), each
    repeated ``repeat`` times. Values are ``start + i * step`` computed in ``dtype``, as
    MXNet's kernel does."""
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise MXNetValueError("arange: argument step must not be 0")
    if repeat < 1:
        raise MXNetValueError(f"arange: argument repeat must be positive, got {repeat}")
    dt = value_dtype(dtype)
    n = _builtins.max(int(np.ceil((stop - start) / step)), 0)  # a bare max may be mx.nd.max once looked up
    steps = (np.arange(n * repeat) // repeat).astype(dt)
    values = dt.type(start) + steps * dt.type(step)
    return _core.array(values.astype(dt, copy=False), dtype=dt, device=_device(ctx))


# ---- files and synchronisation ---------------------------------------------------------------------
def save(fname: str | os.PathLike, data: Any) -> None:
    """Save an NDArray, a list of NDArrays or a dict of str -> NDArray. A single NDArray
    is saved as a list of one, so ``load`` gives a list back, as in MXNet."""
    if isinstance(data, NDArray):
        data = [data]
    elif isinstance(data, tuple):
        data = list(data)
    elif not isinstance(data, (list, dict)):
        raise MXNetValueError("save: argument data needs to either be a NDArray, dict of str, NDArray pairs or a list of NDarrays.")
    _io.save(fname, data)


def load(fname: str | os.PathLike) -> list | dict:
    """What ``save`` wrote: a list of NDArrays or a dict of str -> NDArray (a file of
    one array written by ``sparse_ops.save`` also comes back as a list)."""
    data = _io.load(fname)
    return [data] if isinstance(data, NDArray) else data


def waitall() -> None:
    """Wait for all pending device work. cpu work is synchronous; with CuPy loaded, every
    GPU is synchronised."""
    cupy = sys.modules.get("cupy")
    if cupy is None:
        return
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError:
        return
    for i in range(count):
        with cupy.cuda.Device(i):
            cupy.cuda.runtime.deviceSynchronize()


# ---- custom operators ----------------------------------------------------------------------------
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
        k = _builtins.sum(n in by_name for n in rest)  # keyword inputs must continue the positional ones
        missing = [n for n in rest[:k] if n not in by_name]
        if missing:
            raise MXNetArgumentError(f"Custom: missing input(s) {missing} of {op_type!r}")
        data = data + tuple(by_name[n] for n in rest[:k])
        kwargs = params
    return _core_custom(*data, op_type=op_type, name=name, out=out, **kwargs)


def _custom_input_names(op_type: str, params: dict[str, Any]) -> list[str]:
    prop_cls = getattr(get_op(op_type).cls, "prop_class", None)
    if prop_cls is None:
        raise MXNetArgumentError(f"Custom: keyword inputs need an operator registered from a CustomOpProp; "
                        f"pass the inputs of {op_type!r} by position")
    prop = prop_cls(**{k: str(v) for k, v in params.items()})
    return list(prop.list_arguments()) + list(prop.list_auxiliary_states())


# ---- element-wise functions with scalar handling (MXNet's nd.add, nd.greater, ...) ----------------
def _ufunc(mx_name: str, array_op: str, scalar_fn: Callable, lscalar: str, rscalar: str | None = None) -> Callable:
    def fn(lhs: Any, rhs: Any) -> Any:
        return _op.ufunc(lhs, rhs, array_op, scalar_fn, lscalar, rscalar)

    fn.__name__ = fn.__qualname__ = mx_name
    fn.__doc__ = (f"``lhs {mx_name} rhs`` with broadcasting (``{array_op}``); a scalar operand uses "
                  f"``{lscalar}``.")
    return fn


def _flag(test: Callable[[Any, Any], bool]) -> Callable[[Any, Any], int]:
    return lambda x, y: 1 if test(x, y) else 0


add = _ufunc("add", "broadcast_add", _pyop.add, "_plus_scalar")
subtract = _ufunc("subtract", "broadcast_sub", _pyop.sub, "_minus_scalar", "_rminus_scalar")
multiply = _ufunc("multiply", "broadcast_mul", _pyop.mul, "_mul_scalar")
divide = _ufunc("divide", "broadcast_div", _pyop.truediv, "_div_scalar", "_rdiv_scalar")
true_divide = divide
power = _ufunc("power", "broadcast_power", _pyop.pow, "_power_scalar", "_rpower_scalar")
maximum = _ufunc("maximum", "broadcast_maximum", lambda x, y: x if x > y else y, "_maximum_scalar")
minimum = _ufunc("minimum", "broadcast_minimum", lambda x, y: x if x < y else y, "_minimum_scalar")
equal = _ufunc("equal", "broadcast_equal", _flag(_pyop.eq), "_equal_scalar")
not_equal = _ufunc("not_equal", "broadcast_not_equal", _flag(_pyop.ne), "_not_equal_scalar")
greater = _ufunc("greater", "broadcast_greater", _flag(_pyop.gt), "_greater_scalar", "_lesser_scalar")
greater_equal = _ufunc("greater_equal", "broadcast_greater_equal", _flag(_pyop.ge),
                       "_greater_equal_scalar", "_lesser_equal_scalar")
lesser = _ufunc("lesser", "broadcast_lesser", _flag(_pyop.lt), "_lesser_scalar", "_greater_scalar")
lesser_equal = _ufunc("lesser_equal", "broadcast_lesser_equal", _flag(_pyop.le),
                      "_lesser_equal_scalar", "_greater_equal_scalar")


def concatenate(arrays: list, axis: int = 0, always_copy: bool = True) -> NDArray:
    """Join arrays along ``axis`` (``concat`` with ``dim=axis``)."""
    if len(arrays) == 1 and not always_copy:
        return arrays[0]
    return _op.call("concat", list(arrays), {"dim": axis})


_ACTIVATIONS = {"relu": "relu", "sigmoid": "sigmoid", "tanh": "tanh"}


def Activation(data: NDArray, act_type: str, out: NDArray | None = None, name: str | None = None) -> NDArray:
    """MXNet's ``Activation`` for ``act_type`` relu, sigmoid or tanh."""
    op = _ACTIVATIONS.get(act_type)
    if op is None:
        raise MXNetValueError(f"Activation: act_type {act_type!r} is not supported here; "
                         f"supported: {', '.join(_ACTIVATIONS)}")
    return _op.call(op, [data], out=out)


from . import _internal, contrib, linalg, random, sparse  # noqa: E402  (they import _op only, never this module's names)


def uniform(low: float = 0, high: float = 1, shape: Any = None, ctx: Any = None, dtype: Any = None,
            out: NDArray | None = None) -> NDArray:
    """MXNet's legacy ``nd.uniform`` (ctx before dtype); see ``mx.nd.random.uniform``."""
    return random.uniform(low, high, shape=shape, dtype=dtype, ctx=ctx, out=out)


def normal(loc: float = 0, scale: float = 1, shape: Any = None, ctx: Any = None, dtype: Any = None,
           out: NDArray | None = None) -> NDArray:
    """MXNet's legacy ``nd.normal`` (ctx before dtype); see ``mx.nd.random.normal``."""
    return random.normal(loc, scale, shape=shape, dtype=dtype, ctx=ctx, out=out)


random_uniform = uniform
random_normal = normal


# ---- every registered operator, by its MXNet name (PEP 562) --------------------------------------
def __getattr__(name: str) -> Any:
    fn = _op.cached_function(name)
    globals()[name] = fn  # later look-ups skip __getattr__; this module's code calls builtins as _builtins.<name>
    return fn


def __dir__() -> list[str]:
    return sorted(set(__all__) | set(_op.known_names()))


__all__ = [
    "NDArray", "BaseSparseNDArray", "CSRNDArray", "RowSparseNDArray",
    "array", "zeros", "ones", "full", "empty", "arange", "save", "load", "waitall", "Custom",
    "add", "subtract", "multiply", "divide", "true_divide", "power", "maximum", "minimum",
    "equal", "not_equal", "greater", "greater_equal", "lesser", "lesser_equal",
    "concatenate", "Activation", "contrib", "linalg", "random", "sparse", "uniform", "normal", "random_uniform", "random_normal",
]
