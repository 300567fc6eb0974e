"""Operators of an array and a scalar, with MXNet's names: arithmetic (``_plus_scalar``,
``_mul_scalar``, ``_rdiv_scalar``, ``_power_scalar``, ...) and comparisons
(``_greater_scalar``, ... giving 1/0 in the array's dtype). NDArray's Python operators
(``x + 2``, ``x > 0``) run them (``methods.py``).

A scalar op keeps a sparse input's storage type when it maps 0 to 0 (``x * s``, ``x > s``
for ``s >= 0``, ...), decided from the parameter when the call is planned; otherwise the
result is dense (``x + s``). As in MXNet, the scalar is first cast to the array's dtype.
"""
from __future__ import annotations

import numpy as np

from ..registry import Param, register
from ._util import T, float_math
from .unary import _Elementwise, _scalar_as

_BOTH = ("cpu", "gpu")


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
        dt = float_math(x.dtype) if self.float_math else None
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
        return [T.negative(out_grads[0])]


@register("_mul_scalar")
class MulScalar(_Scalar):
    """x * scalar; keeps the storage type (unless scalar is inf or NaN)."""

    ufunc = np.multiply

    def gradient(self, out_grads, inputs, outputs):
        return [T._mul_scalar(out_grads[0], scalar=self.scalar)]


@register("_div_scalar")
class DivScalar(_Scalar):
    """x / scalar; keeps the storage type (unless scalar is 0 or NaN)."""

    ufunc = np.divide

    def gradient(self, out_grads, inputs, outputs):
        return [T._div_scalar(out_grads[0], scalar=self.scalar)]


@register("_rdiv_scalar")
class RDivScalar(_Scalar):
    """scalar / x; dense result."""

    ufunc, reverse = np.divide, True
    backward_needs_inputs = ("data",)

    def gradient(self, out_grads, inputs, outputs):
        # d(s/x)/dx = -s / x**2
        return [T.elemwise_mul(out_grads[0], T._rdiv_scalar(T.square(inputs[0]), scalar=-self.scalar))]


@register("_power_scalar")
class PowerScalar(_Scalar):
    """x ** scalar; keeps the storage type when scalar > 0."""

    ufunc, float_math = np.power, True
    backward_needs_inputs = ("data",)

    def gradient(self, out_grads, inputs, outputs):
        s = self.scalar
        return [T.elemwise_mul(out_grads[0], T._mul_scalar(T._power_scalar(inputs[0], scalar=s - 1), scalar=s))]


@register("_rpower_scalar")
class RPowerScalar(_Scalar):
    """scalar ** x; dense result."""

    ufunc, reverse, float_math = np.power, True, True
    backward_needs_outputs = ("output",)

    def gradient(self, out_grads, inputs, outputs):
        with np.errstate(all="ignore"):
            log_s = float(np.log(self.scalar))
        return [T._mul_scalar(T.elemwise_mul(out_grads[0], outputs[0]), scalar=log_s)]


@register("_maximum_scalar")
class MaximumScalar(_Scalar):
    """max(x, scalar); keeps the storage type when scalar <= 0."""

    ufunc = np.maximum
    backward_needs_inputs = ("data",)

    def gradient(self, out_grads, inputs, outputs):
        return [T.elemwise_mul(out_grads[0], T._greater_equal_scalar(inputs[0], scalar=self.scalar))]


@register("_minimum_scalar")
class MinimumScalar(_Scalar):
    """min(x, scalar); keeps the storage type when scalar >= 0."""

    ufunc = np.minimum
    backward_needs_inputs = ("data",)

    def gradient(self, out_grads, inputs, outputs):
        return [T.elemwise_mul(out_grads[0], T._lesser_equal_scalar(inputs[0], scalar=self.scalar))]


class _CompareScalar(_Scalar):
    """1 where ``x ∘ scalar`` holds, else 0, in x's dtype (MXNet). Piecewise constant: zero gradient."""

    def gradient(self, out_grads, inputs, outputs):
        return [T._mul_scalar(out_grads[0], scalar=0.0)]


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
