"""MXNet 1.9's remaining unary math operators: rounding, trigonometric and hyperbolic
functions and their inverses, ``degrees``/``radians``, ``expm1``, ``log2``/``log10``,
``cbrt``, ``rsqrt``, ``rcbrt``, ``reciprocal``, ``gamma``/``gammaln``.

Storage types follow MXNet 1.9 (``MXNET_OPERATOR_REGISTER_UNARY_WITH_RSP_CSR`` there): the
functions with ``f(0) == 0`` (``round, rint, fix, floor, ceil, trunc, sin, tan, arcsin,
arctan, sinh, arcsinh, arctanh, degrees, radians, expm1, cbrt``) keep a row_sparse or csr
input's storage type, computing on the stored values only; the others (``cos, arccos,
cosh, arccosh, log2, log10, rsqrt, rcbrt, reciprocal, gamma, gammaln``) give a dense result,
``f(0)`` filled and the stored values scattered (no sparse input is densified first).

Gradients are MXNet's: zero for the rounding functions, the derivative otherwise.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..registry import register
from ._util import T
from .unary import _Unary, apply_ufunc

# ufunc, keeps zero, sample domain ("any", "unit": |x| < 1, "positive", "above1"), gradient
#   gradient: (g, x, y) -> expression through the table; None = zero (rounding)


def _zero(g, x, y):
    return T._mul_scalar(g, scalar=0.0)


def _mul(g, e):
    return T.elemwise_mul(g, e)


def _div(g, e):
    return T.elemwise_div(g, e)


def _special(name: str) -> Any:
    """The ufunc ``scipy.special.<name>``, imported at its first call (``import sparse_ops``
    stays free of SciPy)."""
    def call(x: Any, out: Any = None, casting: str = "unsafe") -> Any:
        import scipy.special

        return getattr(scipy.special, name)(x, out=out, casting=casting)

    return call


def _trigamma(x: Any, out: Any = None, casting: str = "unsafe") -> Any:
    import scipy.special

    return np.copyto(out, scipy.special.polygamma(1, x), casting=casting)


_SPEC = {
    "round": (None, True, "any", _zero, "Round to the nearest integer, halves away from zero (C's round)"),
    "rint": (None, True, "any", _zero, "Round to the nearest integer, halves down (MXNet's rint: the floor "
                                       "where it is no farther than the ceiling)"),
    "fix": (np.trunc, True, "any", _zero, "Round toward zero"),
    "floor": (np.floor, True, "any", _zero, "The largest integer <= x"),
    "ceil": (np.ceil, True, "any", _zero, "The smallest integer >= x"),
    "trunc": (np.trunc, True, "any", _zero, "The integer part of x (toward zero)"),
    "sin": (np.sin, True, "any", lambda g, x, y: _mul(g, T.cos(x)), "Sine"),
    "cos": (np.cos, False, "any", lambda g, x, y: T.negative(_mul(g, T.sin(x))), "Cosine"),
    "tan": (np.tan, True, "unit",
            lambda g, x, y: _mul(g, T._plus_scalar(T.square(y), scalar=1.0)), "Tangent"),
    "arcsin": (np.arcsin, True, "unit",
               lambda g, x, y: _mul(g, T.rsqrt(T._rminus_scalar(T.square(x), scalar=1.0))), "Inverse sine"),
    "arccos": (np.arccos, False, "unit",
               lambda g, x, y: T.negative(_mul(g, T.rsqrt(T._rminus_scalar(T.square(x), scalar=1.0)))),
               "Inverse cosine"),
    "arctan": (np.arctan, True, "any",
               lambda g, x, y: _div(g, T._plus_scalar(T.square(x), scalar=1.0)), "Inverse tangent"),
    "sinh": (np.sinh, True, "any", lambda g, x, y: _mul(g, T.cosh(x)), "Hyperbolic sine"),
    "cosh": (np.cosh, False, "any", lambda g, x, y: _mul(g, T.sinh(x)), "Hyperbolic cosine"),
    "arcsinh": (np.arcsinh, True, "any",
                lambda g, x, y: _mul(g, T.rsqrt(T._plus_scalar(T.square(x), scalar=1.0))), "Inverse hyperbolic sine"),
    "arccosh": (np.arccosh, False, "above1",
                lambda g, x, y: _mul(g, T.rsqrt(T._minus_scalar(T.square(x), scalar=1.0))),
                "Inverse hyperbolic cosine"),
    "arctanh": (np.arctanh, True, "unit",
                lambda g, x, y: _div(g, T._rminus_scalar(T.square(x), scalar=1.0)), "Inverse hyperbolic tangent"),
    "degrees": (np.degrees, True, "any", lambda g, x, y: T._mul_scalar(g, scalar=180.0 / np.pi),
                "Radians to degrees"),
    "radians": (np.radians, True, "any", lambda g, x, y: T._mul_scalar(g, scalar=np.pi / 180.0),
                "Degrees to radians"),
    "expm1": (np.expm1, True, "any", lambda g, x, y: _mul(g, T._plus_scalar(y, scalar=1.0)),
              "e ** x - 1, accurate near 0"),
    "log2": (np.log2, False, "positive", lambda g, x, y: _div(g, T._mul_scalar(x, scalar=np.log(2.0))),
             "Base-2 logarithm"),
    "log10": (np.log10, False, "positive", lambda g, x, y: _div(g, T._mul_scalar(x, scalar=np.log(10.0))),
              "Base-10 logarithm"),
    "cbrt": (np.cbrt, True, "positive", lambda g, x, y: _div(g, T._mul_scalar(T.square(y), scalar=3.0)),
             "Cube root"),
    "rsqrt": (None, False, "positive",
              lambda g, x, y: T._mul_scalar(_mul(g, T.elemwise_mul(y, T.square(y))), scalar=-0.5),
              "1 / sqrt(x)"),
    "rcbrt": (None, False, "positive",
              lambda g, x, y: T._mul_scalar(_mul(g, T.elemwise_div(y, x)), scalar=-1.0 / 3.0),
              "1 / cbrt(x), the reciprocal cube root"),
    "reciprocal": (np.reciprocal, False, "positive", lambda g, x, y: T.negative(_mul(g, T.square(y))), "1 / x"),
    "gamma": (_special("gamma"), False, "positive", lambda g, x, y: _mul(g, T.elemwise_mul(y, T._digamma(x))),
              "The gamma function"),
    "gammaln": (_special("gammaln"), False, "positive", lambda g, x, y: _mul(g, T._digamma(x)),
                "The logarithm of the absolute value of the gamma function"),
}


def _round(x, out=None, casting="unsafe"):
    return np.copyto(out, np.sign(x) * np.floor(np.abs(x) + 0.5), casting=casting)


def _rint(x, out=None, casting="unsafe"):
    low, high = np.floor(x), np.ceil(x)
    with np.errstate(invalid="ignore"):  # inf - inf: the ceiling, inf, is taken
        return np.copyto(out, np.where(x - low <= high - x, low, high), casting=casting)


def _rsqrt(x, out=None, casting="unsafe"):
    with np.errstate(divide="ignore"):
        return np.divide(1.0, np.sqrt(x), out=out, casting=casting)


def _rcbrt(x, out=None, casting="unsafe"):
    with np.errstate(divide="ignore"):
        root = np.cbrt(x, dtype=np.float64) if x.dtype == np.float32 else np.cbrt(x)
        return np.divide(1.0, root, out=out, casting=casting)


class _MathUnary(_Unary):
    """One of MXNet's unary math functions (see the module docstring)."""

    backward_needs_inputs = ("data",)
    backward_needs_outputs = ("output",)
    domain = "any"
    grad_rule = None

    def apply(self, xp, x, out):
        if x.dtype.kind != "f":  # integers: computed in float64, cast back (as MXNet's DType math)
            x = x.astype(np.float64)
        with np.errstate(all="ignore"):
            apply_ufunc(self.ufunc, x, out)

    def gradient(self, out_grads, inputs, outputs):
        return [type(self).grad_rule(out_grads[0], inputs[0], outputs[0])]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples in the function's domain: every storage type for the
        functions defined at 0, dense only for those with a pole or NaN there."""
        from . import _samples

        stypes = _samples.STYPES
        out = []
        for x in _samples.each_stype((3, 4), stypes=stypes, positive=cls.domain in ("positive", "above1")):
            if cls.domain == "unit":
                x = T._mul_scalar(x, scalar=0.6)
            elif cls.domain == "above1":  # dense: all values > 1; sparse: stored values > 1 (NaN at 0)
                x = T._plus_scalar(x, scalar=1.2) if x.stype == "default" else T._mul_scalar(x, scalar=2.2)
            out.append([x])
        return out


for _name, (_fn, _keeps, _domain, _grad, _doc) in _SPEC.items():
    _cls = type(_name.capitalize(), (_MathUnary,), {
        "__doc__": f"{_doc}, elementwise; " + ("keeps the storage type." if _keeps else "dense result."),
        "ufunc": staticmethod(_fn if _fn is not None else {"round": _round, "rint": _rint, "rsqrt": _rsqrt, "rcbrt": _rcbrt}[_name]), "zero_preserving": _keeps,
        "domain": _domain, "grad_rule": staticmethod(_grad), "__module__": __name__,
    })
    globals()[_cls.__name__] = register(_name)(_cls)


@register("_digamma")
class Digamma(_MathUnary):
    """The digamma function psi(x) = d/dx log(gamma(x)) (the gradient of ``gammaln``); dense result."""

    ufunc = staticmethod(_special("digamma"))
    zero_preserving = False
    domain = "positive"
    grad_rule = staticmethod(lambda g, x, y: _mul(g, T._polygamma1(x)))


@register("_polygamma1")
class Polygamma1(_MathUnary):
    """The trigamma function psi'(x) (the gradient of ``_digamma``); not differentiable further here."""

    ufunc = staticmethod(_trigamma)
    zero_preserving = False
    domain = "positive"
    differentiable = False


def _erf_grad(g, x, y):  # 2 / sqrt(pi) * exp(-x^2)
    return _mul(g, T._mul_scalar(T.exp(T.negative(T.square(x))), scalar=2.0 / np.sqrt(np.pi)))


def _erfinv_grad(g, x, y):  # sqrt(pi) / 2 * exp(y^2)
    return _mul(g, T._mul_scalar(T.exp(T.square(y)), scalar=np.sqrt(np.pi) / 2.0))


@register("erf")
class Erf(_MathUnary):
    """The Gauss error function, elementwise; dense result (MXNet 1.9 declares no sparse
    kernel for it; here a sparse input is not densified first: ``erf(0) = 0`` is filled)."""

    ufunc = staticmethod(_special("erf"))
    zero_preserving = False
    grad_rule = staticmethod(_erf_grad)


@register("erfinv")
class Erfinv(_MathUnary):
    """The inverse of ``erf`` on (-1, 1), elementwise; dense result."""

    ufunc = staticmethod(_special("erfinv"))
    zero_preserving = False
    domain = "unit"
    grad_rule = staticmethod(_erfinv_grad)
