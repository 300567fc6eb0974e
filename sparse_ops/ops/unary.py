"""Elementwise operators of one array: unary functions (``sqrt``, ``exp``, ``relu``, ``clip``, ...),
scalar operators with MXNet's names (``_plus_scalar``, ``_mul_scalar``, ``_greater_scalar``, ...),
and the dense broadcasting comparisons, ``broadcast_power``/``maximum``/``minimum``. NDArray's
Python operators (``x + y``, ``x * 2``, ``x > 0``, ``x += y``) are in ``methods.py``.

Storage types follow MXNet 1.9: an op keeps a sparse input's storage type when it maps
0 to 0 (``square``, ``sqrt``, ``abs``, ``x * s``, ...; for scalar ops this is decided from
the parameter when the call is planned), and gives a dense result otherwise (``exp``,
``sigmoid``, ``x + s``). Sparse inputs always run one storage-aware kernel: it applies the
function to the stored values only, and either shares the input's index arrays (sparse
result) or writes ``f(0)`` everywhere and scatters the stored results (dense result), so
no sparse input is ever densified first.

The output dtype is the input's dtype: integer arrays are computed (in floating point where
the function needs it) and cast back. As in MXNet, a scalar operand is first cast to the
array's dtype (``int_array * 2.7`` multiplies by 2).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..dispatch import op_function
from ..ndarray import NDArray
from ..registry import Op, Param, kernel, register
from ._util import row_ids
from .elemwise import (
    _Broadcast,
    broadcast_mul,
    elemwise_div,
    elemwise_mul,
    sum_to_shape,
)

_BOTH = ("cpu", "gpu")
_WIDER = {np.dtype(np.float16): np.float32}  # sigmoid's working dtype for float16 (ints: float64)


# ---- helpers ------------------------------------------------------------------------------------
def _scalar_as(value: float, dtype: np.dtype) -> np.generic:
    """``value`` in ``dtype``, as MXNet's ``DType(scalar)``: truncated (and saturated) for ints."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        with np.errstate(over="ignore"):
            return dtype.type(value)
    info = np.iinfo(dtype)
    if math.isnan(value):
        return dtype.type(0)
    if math.isinf(value):
        return dtype.type(info.max if value > 0 else info.min)
    return dtype.type(min(max(math.trunc(value), info.min), info.max))


def _float_math(dtype: np.dtype) -> Any:
    """The ufunc ``dtype=`` that computes integer inputs in float64 (None: the input's own loop)."""
    return np.float64 if dtype.kind in "iu" else None


def _reduce_to(g: NDArray, shape: tuple[int, ...]) -> NDArray:
    """A broadcast gradient summed back to an input's shape (no op at all when it already fits)."""
    return g if g.shape == shape else sum_to_shape(g, shape)


# ---- the shared base: one function applied to every value -------------------------------------
class _Elementwise(Op):
    """An op ``y = f(x)`` applied value by value; subclasses define ``apply`` and ``keeps_zero``.

    Dense inputs run ``apply`` on the whole array. Sparse inputs run ``sparse``, which
    applies ``f`` to the stored values only: the result shares the input's index arrays
    when the output is sparse, and is ``f(0)`` filled then scattered when it is dense.
    """

    trusted = True  # built-in kernels, tested against NumPy/SciPy references

    backward_needs_inputs: tuple[str, ...] = ()
    partition = "rows"  # value by value: any row block on its own (sparse_ops.dask)

    def apply(self, xp: Any, x: Any, out: Any) -> None:
        """Write ``f(x)`` into ``out`` (``out.dtype`` may differ from ``x.dtype``: cast unsafely)."""
        raise NotImplementedError

    def keeps_zero(self) -> bool:
        """Whether ``f(0) == 0`` for these parameters, so sparse inputs keep their storage type."""
        return False

    def infer_storage_type(self, data: str) -> list[str]:
        return [data if self.keeps_zero() else "default"]

    def fill_value(self, dtype: np.dtype) -> np.generic:
        """``f(0)`` in ``dtype``, computed once on the host and cached per dtype."""
        cache = self.__dict__.setdefault("_fill_values", {})
        value = cache.get(dtype)
        if value is None:
            out = np.empty(1, dtype=dtype)
            with np.errstate(all="ignore"):
                self.apply(np, np.zeros(1, dtype=dtype), out)
            value = cache[dtype] = out[0]
        return value

    @kernel(device=_BOTH)
    def dense(self, ctx, data, output):
        self.apply(ctx.xp, data, output)

    @kernel(device=_BOTH, stypes=[("row_sparse",), ("csr",)])
    def sparse(self, ctx, data, output):
        xp = ctx.xp
        values = xp.empty(data._data.shape, dtype=output.dtype)
        self.apply(xp, data._data, values)
        if output.stype == "default":
            self._fill_and_scatter(data, values, output._data)
        elif self.fill_value(output.dtype) == 0:
            if data.stype == "csr":
                ctx.set_csr(output, values, data._indices, data._indptr)
            else:
                ctx.set_row_sparse(output, values, data._indices)
        else:
            # f(0) != 0 only in this dtype (a scalar truncated to int or overflowed in float16):
            # keep the planned storage type, storing f(0) explicitly wherever it is not zero.
            dense = NDArray(xp.empty(output.shape, dtype=output.dtype), ctx.device)
            self._fill_and_scatter(data, values, dense._data)
            output._take_parts(dense.tostype(output.stype))

    def _fill_and_scatter(self, data: NDArray, values: Any, out: Any) -> None:
        out.fill(self.fill_value(out.dtype))
        if data.stype == "csr":
            out[row_ids(data), data._indices] = values
        else:
            out[data._indices] = values


# ---- unary functions ------------------------------------------------------------------------------
class _Unary(_Elementwise):
    """``f`` is the ufunc ``ufunc``; ``zero_preserving`` says ``f(0) == 0``."""

    ufunc: np.ufunc  # NumPy ufuncs also run on CuPy arrays (``__array_ufunc__``)
    zero_preserving: bool = False

    def keeps_zero(self) -> bool:
        return self.zero_preserving

    def apply(self, xp, x, out):
        self.ufunc(x, out=out, casting="unsafe")

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: a (3, 4) float64 array as dense, csr (int64 and int32
        indices) and row_sparse, values away from 0 (positive for sqrt and the logs)."""
        from . import _samples

        positive = getattr(cls, "ufunc", None) in (np.sqrt, np.log, np.log1p)
        return ([[x] for x in _samples.each_stype((3, 4), positive=positive)]
                + [[_samples.array((4, 3), "csr", seed=5, positive=positive, index_dtype="int32")]])


@register("negative")
class Negative(_Unary):
    """-x elementwise; keeps the storage type."""

    ufunc, zero_preserving = np.negative, True

    def gradient(self, out_grads, inputs, outputs):
        return [negative(out_grads[0])]


@register("abs")
class Abs(_Unary):
    """|x| elementwise; keeps the storage type."""

    ufunc, zero_preserving = np.abs, True
    backward_needs_inputs = ("data",)

    def gradient(self, out_grads, inputs, outputs):
        return [elemwise_mul(out_grads[0], sign(inputs[0]))]


@register("sign")
class Sign(_Unary):
    """-1, 0 or 1 by the sign of x; keeps the storage type. Its gradient is zero (as in MXNet)."""

    ufunc, zero_preserving = np.sign, True

    def gradient(self, out_grads, inputs, outputs):
        return [_mul_scalar(out_grads[0], scalar=0.0)]


@register("square")
class Square(_Unary):
    """x * x elementwise; keeps the storage type."""

    ufunc, zero_preserving = np.square, True
    backward_needs_inputs = ("data",)

    def gradient(self, out_grads, inputs, outputs):
        return [elemwise_mul(out_grads[0], _mul_scalar(inputs[0], scalar=2.0))]


@register("sqrt")
class Sqrt(_Unary):
    """Square root elementwise; keeps the storage type."""

    ufunc, zero_preserving = np.sqrt, True
    backward_needs_outputs = ("output",)

    def gradient(self, out_grads, inputs, outputs):
        return [elemwise_mul(out_grads[0], _rdiv_scalar(outputs[0], scalar=0.5))]  # g / (2 sqrt(x))


@register("exp")
class Exp(_Unary):
    """e ** x elementwise; dense result."""

    ufunc = np.exp
    backward_needs_outputs = ("output",)

    def gradient(self, out_grads, inputs, outputs):
        return [elemwise_mul(out_grads[0], outputs[0])]


@register("log")
class Log(_Unary):
    """Natural logarithm elementwise; dense result."""

    ufunc = np.log
    backward_needs_inputs = ("data",)

    def gradient(self, out_grads, inputs, outputs):
        return [elemwise_div(out_grads[0], inputs[0])]


@register("log1p")
class Log1p(_Unary):
    """log(1 + x) elementwise, accurate near 0; keeps the storage type."""

    ufunc, zero_preserving = np.log1p, True
    backward_needs_inputs = ("data",)

    def gradient(self, out_grads, inputs, outputs):
        return [elemwise_div(out_grads[0], _plus_scalar(inputs[0], scalar=1.0))]


@register("tanh")
class Tanh(_Unary):
    """Hyperbolic tangent elementwise; keeps the storage type."""

    ufunc, zero_preserving = np.tanh, True
    backward_needs_outputs = ("output",)

    def gradient(self, out_grads, inputs, outputs):
        return [elemwise_mul(out_grads[0], _rminus_scalar(square(outputs[0]), scalar=1.0))]


@register("relu")
class Relu(_Unary):
    """max(x, 0) elementwise (NaN stays NaN); keeps the storage type."""

    zero_preserving = True
    backward_needs_outputs = ("output",)

    def apply(self, xp, x, out):
        xp.maximum(x, x.dtype.type(0), out=out)

    def gradient(self, out_grads, inputs, outputs):
        # relu(x) > 0 exactly where x > 0; reading the output spares keeping the input
        return [elemwise_mul(out_grads[0], _greater_scalar(outputs[0], scalar=0.0))]


@register("sigmoid")
class Sigmoid(_Unary):
    """1 / (1 + e ** -x) elementwise, without overflow for large |x|; dense result."""

    backward_needs_outputs = ("output",)

    def apply(self, xp, x, out):
        w = x if x.dtype.kind == "f" and x.dtype != np.float16 else x.astype(_WIDER.get(x.dtype, np.float64))
        e = xp.exp(-xp.abs(w))  # in (0, 1]: never overflows
        r = 1 / (1 + e)
        xp.copyto(out, xp.where(w >= 0, r, e * r), casting="unsafe")

    def gradient(self, out_grads, inputs, outputs):
        y = outputs[0]
        return [elemwise_mul(out_grads[0], elemwise_mul(y, _rminus_scalar(y, scalar=1.0)))]


@register("clip")
class Clip(_Elementwise):
    """x limited to [a_min, a_max]; keeps the storage type when a_min <= 0 <= a_max."""

    a_min = Param(float, doc="lower bound")
    a_max = Param(float, doc="upper bound")
    backward_needs_inputs = ("data",)

    def check_params(self) -> None:
        if not self.a_min <= self.a_max:
            raise ValueError(f"a_min must be <= a_max, got a_min={self.a_min}, a_max={self.a_max}")

    def keeps_zero(self) -> bool:
        return self.a_min <= 0 <= self.a_max

    def apply(self, xp, x, out):
        xp.clip(x, _scalar_as(self.a_min, x.dtype), _scalar_as(self.a_max, x.dtype), out=out)

    def gradient(self, out_grads, inputs, outputs):
        x = inputs[0]
        inside = elemwise_mul(_greater_equal_scalar(x, scalar=self.a_min),
                              _lesser_equal_scalar(x, scalar=self.a_max))
        return [elemwise_mul(out_grads[0], inside)]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: each storage type, bounds keeping and losing sparsity."""
        from . import _samples

        return ([([x], {"a_min": -0.8, "a_max": 0.9}) for x in _samples.each_stype((3, 4))]
                + [([x], {"a_min": 0.7, "a_max": 1.2}) for x in _samples.each_stype((3, 4))])


# ---- scalar operators ------------------------------------------------------------------------------
class _Scalar(_Elementwise):
    """``f(x) = x ∘ scalar`` (or ``scalar ∘ x`` when ``reverse``) with the ufunc ``ufunc``.

    Sparse storage is kept when ``f(0) == 0`` for this scalar (found once per parameter set),
    unless ``always_dense`` (MXNet: ``x + s`` and ``x - s`` are dense for every ``s``).
    """

    scalar = Param(float, doc="the scalar operand")
    ufunc: np.ufunc
    reverse: bool = False
    always_dense: bool = False
    float_math: bool = False  # integer inputs computed in float64 (power: negative exponents)

    def check_params(self) -> None:
        self._scalars: dict[np.dtype, np.generic] = {}
        self._keeps_zero = not self.always_dense and self.fill_value(np.dtype(np.float64)) == 0

    def keeps_zero(self) -> bool:
        return self._keeps_zero

    def scalar_as(self, dtype: np.dtype) -> np.generic:
        s = self._scalars.get(dtype)
        if s is None:
            s = self._scalars[dtype] = _scalar_as(self.scalar, dtype)
        return s

    def apply(self, xp, x, out):
        s = self.scalar_as(x.dtype)
        a, b = (s, x) if self.reverse else (x, s)
        dt = _float_math(x.dtype) if self.float_math else None
        self.ufunc(a, b, out=out, dtype=dt, casting="unsafe")

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: each storage type with scalar 2 (a positive base for the
        powers), and scalar 0 for the ops that keep sparsity at 0 (maximum, minimum, compares)."""
        from . import _samples

        positive = cls.ufunc is np.power
        out = [([x], {"scalar": 2.0}) for x in _samples.each_stype((3, 4), positive=positive)]
        if cls.ufunc in (np.maximum, np.minimum, np.greater, np.less, np.not_equal):
            out += [([x], {"scalar": 0.0}) for x in _samples.each_stype((3, 4), seed=3)]
        return out


@register("_plus_scalar")
class PlusScalar(_Scalar):
    """x + scalar; dense result (MXNet)."""

    ufunc, always_dense = np.add, True

    def gradient(self, out_grads, inputs, outputs):
        return [out_grads[0]]


@register("_minus_scalar")
class MinusScalar(_Scalar):
    """x - scalar; dense result (MXNet)."""

    ufunc, always_dense = np.subtract, True

    def gradient(self, out_grads, inputs, outputs):
        return [out_grads[0]]


@register("_rminus_scalar")
class RMinusScalar(_Scalar):
    """scalar - x; keeps the storage type when scalar == 0."""

    ufunc, reverse = np.subtract, True

    def gradient(self, out_grads, inputs, outputs):
        return [negative(out_grads[0])]


@register("_mul_scalar")
class MulScalar(_Scalar):
    """x * scalar; keeps the storage type (unless scalar is inf or NaN)."""

    ufunc = np.multiply

    def gradient(self, out_grads, inputs, outputs):
        return [_mul_scalar(out_grads[0], scalar=self.scalar)]


@register("_div_scalar")
class DivScalar(_Scalar):
    """x / scalar; keeps the storage type (unless scalar is 0 or NaN)."""

    ufunc = np.divide

    def gradient(self, out_grads, inputs, outputs):
        return [_div_scalar(out_grads[0], scalar=self.scalar)]


@register("_rdiv_scalar")
class RDivScalar(_Scalar):
    """scalar / x; dense result."""

    ufunc, reverse = np.divide, True
    backward_needs_inputs = ("data",)

    def gradient(self, out_grads, inputs, outputs):
        # d(s/x)/dx = -s / x**2
        return [elemwise_mul(out_grads[0], _rdiv_scalar(square(inputs[0]), scalar=-self.scalar))]


@register("_power_scalar")
class PowerScalar(_Scalar):
    """x ** scalar; keeps the storage type when scalar > 0."""

    ufunc, float_math = np.power, True
    backward_needs_inputs = ("data",)

    def gradient(self, out_grads, inputs, outputs):
        s = self.scalar
        return [elemwise_mul(out_grads[0], _mul_scalar(_power_scalar(inputs[0], scalar=s - 1), scalar=s))]


@register("_rpower_scalar")
class RPowerScalar(_Scalar):
    """scalar ** x; dense result."""

    ufunc, reverse, float_math = np.power, True, True
    backward_needs_outputs = ("output",)

    def gradient(self, out_grads, inputs, outputs):
        with np.errstate(all="ignore"):
            log_s = float(np.log(self.scalar))
        return [_mul_scalar(elemwise_mul(out_grads[0], outputs[0]), scalar=log_s)]


@register("_maximum_scalar")
class MaximumScalar(_Scalar):
    """max(x, scalar); keeps the storage type when scalar <= 0."""

    ufunc = np.maximum
    backward_needs_inputs = ("data",)

    def gradient(self, out_grads, inputs, outputs):
        return [elemwise_mul(out_grads[0], _greater_equal_scalar(inputs[0], scalar=self.scalar))]


@register("_minimum_scalar")
class MinimumScalar(_Scalar):
    """min(x, scalar); keeps the storage type when scalar >= 0."""

    ufunc = np.minimum
    backward_needs_inputs = ("data",)

    def gradient(self, out_grads, inputs, outputs):
        return [elemwise_mul(out_grads[0], _lesser_equal_scalar(inputs[0], scalar=self.scalar))]


class _CompareScalar(_Scalar):
    """1 where ``x ∘ scalar`` holds, else 0, in x's dtype (MXNet). Piecewise constant: zero gradient."""

    def gradient(self, out_grads, inputs, outputs):
        return [_mul_scalar(out_grads[0], scalar=0.0)]


@register("_equal_scalar")
class EqualScalar(_CompareScalar):
    """x == scalar as 1/0; keeps the storage type when scalar != 0."""

    ufunc = np.equal


@register("_not_equal_scalar")
class NotEqualScalar(_CompareScalar):
    """x != scalar as 1/0; keeps the storage type when scalar == 0."""

    ufunc = np.not_equal


@register("_greater_scalar")
class GreaterScalar(_CompareScalar):
    """x > scalar as 1/0; keeps the storage type when scalar >= 0."""

    ufunc = np.greater


@register("_greater_equal_scalar")
class GreaterEqualScalar(_CompareScalar):
    """x >= scalar as 1/0; keeps the storage type when scalar > 0."""

    ufunc = np.greater_equal


@register("_lesser_scalar")
class LesserScalar(_CompareScalar):
    """x < scalar as 1/0; keeps the storage type when scalar <= 0."""

    ufunc = np.less


@register("_lesser_equal_scalar")
class LesserEqualScalar(_CompareScalar):
    """x <= scalar as 1/0; keeps the storage type when scalar < 0."""

    ufunc = np.less_equal


# ---- broadcasting array-array operators (dense) ----------------------------------------------------
class _BroadcastCompare(_Broadcast):
    """1 where ``lhs ∘ rhs`` holds, else 0, in the inputs' dtype, with NumPy broadcasting.
    Piecewise constant: zero gradients."""

    backward_needs_inputs = ()

    def gradient(self, out_grads, inputs, outputs):
        zero = _mul_scalar(out_grads[0], scalar=0.0)
        return [_reduce_to(zero, inputs[0].shape), _reduce_to(zero, inputs[1].shape)]


@register("broadcast_equal")
class BroadcastEqual(_BroadcastCompare):
    """lhs == rhs as 1/0 with NumPy broadcasting (dense)."""

    ufunc = np.equal


@register("broadcast_not_equal")
class BroadcastNotEqual(_BroadcastCompare):
    """lhs != rhs as 1/0 with NumPy broadcasting (dense)."""

    ufunc = np.not_equal


@register("broadcast_greater")
class BroadcastGreater(_BroadcastCompare):
    """lhs > rhs as 1/0 with NumPy broadcasting (dense)."""

    ufunc = np.greater


@register("broadcast_greater_equal")
class BroadcastGreaterEqual(_BroadcastCompare):
    """lhs >= rhs as 1/0 with NumPy broadcasting (dense)."""

    ufunc = np.greater_equal


@register("broadcast_lesser")
class BroadcastLesser(_BroadcastCompare):
    """lhs < rhs as 1/0 with NumPy broadcasting (dense)."""

    ufunc = np.less


@register("broadcast_lesser_equal")
class BroadcastLesserEqual(_BroadcastCompare):
    """lhs <= rhs as 1/0 with NumPy broadcasting (dense)."""

    ufunc = np.less_equal


@register("broadcast_power")
class BroadcastPower(_Broadcast):
    """lhs ** rhs with NumPy broadcasting (dense); integer inputs are computed in float64."""

    backward_needs_outputs = ("output",)

    @kernel(device=_BOTH)
    def dense(self, ctx, lhs, rhs, out):
        ctx.xp.power(lhs, rhs, out=out, dtype=_float_math(lhs.dtype), casting="unsafe")

    def gradient(self, out_grads, inputs, outputs):
        g, (lhs, rhs), y = out_grads[0], inputs, outputs[0]
        dl = broadcast_mul(g, broadcast_mul(rhs, broadcast_power(lhs, _minus_scalar(rhs, scalar=1.0))))
        dr = broadcast_mul(broadcast_mul(g, y), log(lhs))
        return [_reduce_to(dl, lhs.shape), _reduce_to(dr, rhs.shape)]


@register("broadcast_maximum")
class BroadcastMaximum(_Broadcast):
    """max(lhs, rhs) with NumPy broadcasting (dense); ties send the gradient to lhs."""

    ufunc = np.maximum

    def gradient(self, out_grads, inputs, outputs):
        g, (lhs, rhs) = out_grads[0], inputs
        return [_reduce_to(broadcast_mul(g, broadcast_greater_equal(lhs, rhs)), lhs.shape),
                _reduce_to(broadcast_mul(g, broadcast_lesser(lhs, rhs)), rhs.shape)]


@register("broadcast_minimum")
class BroadcastMinimum(_Broadcast):
    """min(lhs, rhs) with NumPy broadcasting (dense); ties send the gradient to lhs."""

    ufunc = np.minimum

    def gradient(self, out_grads, inputs, outputs):
        g, (lhs, rhs) = out_grads[0], inputs
        return [_reduce_to(broadcast_mul(g, broadcast_lesser_equal(lhs, rhs)), lhs.shape),
                _reduce_to(broadcast_mul(g, broadcast_greater(lhs, rhs)), rhs.shape)]


# ---- functions ---------------------------------------------------------------------------------------
negative = op_function("negative")
abs = op_function("abs")  # noqa: A001  (the operator's name; builtins.abs is not used below)
sign = op_function("sign")
square = op_function("square")
sqrt = op_function("sqrt")
exp = op_function("exp")
log = op_function("log")
log1p = op_function("log1p")
relu = op_function("relu")
sigmoid = op_function("sigmoid")
tanh = op_function("tanh")
clip = op_function("clip")

_plus_scalar = op_function("_plus_scalar")
_minus_scalar = op_function("_minus_scalar")
_rminus_scalar = op_function("_rminus_scalar")
_mul_scalar = op_function("_mul_scalar")
_div_scalar = op_function("_div_scalar")
_rdiv_scalar = op_function("_rdiv_scalar")
_power_scalar = op_function("_power_scalar")
_rpower_scalar = op_function("_rpower_scalar")
_maximum_scalar = op_function("_maximum_scalar")
_minimum_scalar = op_function("_minimum_scalar")
_equal_scalar = op_function("_equal_scalar")
_not_equal_scalar = op_function("_not_equal_scalar")
_greater_scalar = op_function("_greater_scalar")
_greater_equal_scalar = op_function("_greater_equal_scalar")
_lesser_scalar = op_function("_lesser_scalar")
_lesser_equal_scalar = op_function("_lesser_equal_scalar")

broadcast_equal = op_function("broadcast_equal")
broadcast_not_equal = op_function("broadcast_not_equal")
broadcast_greater = op_function("broadcast_greater")
broadcast_greater_equal = op_function("broadcast_greater_equal")
broadcast_lesser = op_function("broadcast_lesser")
broadcast_lesser_equal = op_function("broadcast_lesser_equal")
broadcast_power = op_function("broadcast_power")
broadcast_maximum = op_function("broadcast_maximum")
broadcast_minimum = op_function("broadcast_minimum")


__all__ = [
    "negative", "abs", "sign", "square", "sqrt", "exp", "log", "log1p", "relu", "sigmoid", "tanh", "clip",
    "broadcast_equal", "broadcast_not_equal", "broadcast_greater", "broadcast_greater_equal",
    "broadcast_lesser", "broadcast_lesser_equal", "broadcast_power", "broadcast_maximum",
    "broadcast_minimum",
]
