"""Activation functions of MXNet 1.9 beyond relu/sigmoid/tanh: ``hard_sigmoid`` (alpha,
beta), ``softsign``, ``smooth_l1`` (scalar) and ``LeakyReLU`` (act_type ``leaky``, ``elu``,
``selu``, ``gelu``; ``prelu`` and ``rrelu`` are not covered).

Dense kernels only, as MXNet declares: a sparse input falls back to dense with a
``StorageFallbackWarning``. Gradients are MXNet's (at the kinks, the right-hand side's
except for ``smooth_l1``).
"""
from __future__ import annotations

import math

from ..registry import Op, Param, kernel, register
from ._util import T

_BOTH = ("cpu", "gpu")
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_LAMBDA = 1.0507009873554804934193349852946


class _Activation(Op):
    trusted = True  # built-in kernels, tested against NumPy/SciPy references
    backward_needs_inputs = ("data",)
    backward_needs_outputs = ("output",)
    partition = "rows"

    def infer_type(self, data):
        if data.kind != "f":
            raise TypeError(f"{self._opdef.name} needs a floating point input, got {data} (argument data)")
        return [data]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: values on both sides of the kinks, a csr input (fallback)."""
        from . import _samples

        return [([_samples.array((3, 4))], {}), ([_samples.array((3, 4), "csr", seed=1)], {})]


@register("hard_sigmoid")
class HardSigmoid(_Activation):
    """``clip(alpha * x + beta, 0, 1)``."""

    alpha = Param(float, 0.2, doc="slope")
    beta = Param(float, 0.5, doc="offset")

    @kernel(device=_BOTH)
    def dense(self, ctx, data, output):
        t = data.dtype.type
        ctx.xp.clip(data * t(self.alpha) + t(self.beta), 0, 1, out=output)

    def gradient(self, out_grads, inputs, outputs):
        y = outputs[0]
        inside = T.elemwise_mul(T._greater_scalar(y, scalar=0.0), T._lesser_scalar(y, scalar=1.0))
        return [T._mul_scalar(T.elemwise_mul(out_grads[0], inside), scalar=self.alpha)]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: scaled so some values saturate, others do not."""
        from . import _samples

        return [([T._mul_scalar(_samples.array((3, 4)), scalar=2.0)], {}),
                ([_samples.array((3, 4), seed=1)], {"alpha": 0.5, "beta": 0.25})]


@register("softsign")
class Softsign(_Activation):
    """``x / (1 + |x|)``."""

    backward_needs_outputs = ()

    @kernel(device=_BOTH)
    def dense(self, ctx, data, output):
        output[...] = data / (1 + ctx.xp.abs(data))

    def gradient(self, out_grads, inputs, outputs):
        return [T.elemwise_div(out_grads[0], T.square(T._plus_scalar(T.abs(inputs[0]), scalar=1.0)))]


@register("smooth_l1")
class SmoothL1(_Activation):
    """``0.5 * (s * x) ** 2`` where ``|x| < 1 / s**2``, else ``|x| - 0.5 / s**2`` (``s`` is
    ``scalar``, MXNet's sigma)."""

    scalar = Param(float, 1.0, doc="sigma: the quadratic part covers |x| < 1 / sigma**2")
    backward_needs_outputs = ()

    @kernel(device=_BOTH)
    def dense(self, ctx, data, output):
        xp = ctx.xp
        s2 = data.dtype.type(self.scalar * self.scalar)
        a = xp.abs(data)
        output[...] = xp.where(a < 1 / s2, 0.5 * s2 * data * data, a - 0.5 / s2)

    def gradient(self, out_grads, inputs, outputs):
        x = inputs[0]
        s2 = self.scalar * self.scalar
        local = T.where(T._lesser_scalar(T.abs(x), scalar=1.0 / s2), T._mul_scalar(x, scalar=s2), T.sign(x))
        return [T.elemwise_mul(out_grads[0], local)]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: sigma 1 (values on both sides of |x| = 1), sigma 2."""
        from . import _samples

        return [([_samples.array((3, 4))], {}), ([_samples.array((3, 4), seed=1)], {"scalar": 1.2})]


@register("LeakyReLU")
class LeakyReLU(_Activation):
    """MXNet's ``LeakyReLU`` without a learned slope: ``leaky`` (``x`` or ``slope * x``),
    ``elu`` (``slope * (exp(x) - 1)`` below 0), ``selu`` (scaled elu with the fixed
    constants), ``gelu`` (``0.5 * x * (1 + erf(x / sqrt 2))``)."""

    act_type = Param(str, "leaky", doc="leaky, elu, selu or gelu", choices=("leaky", "elu", "selu", "gelu"))
    slope = Param(float, 0.25, doc="the negative slope of leaky, the scale of elu")
    lower_bound = Param(float, 0.125, doc="rrelu's (not covered; accepted for MXNet's signature)")
    upper_bound = Param(float, 0.334, doc="rrelu's (not covered; accepted for MXNet's signature)")

    @kernel(device=_BOTH)
    def dense(self, ctx, data, output):
        xp = ctx.xp
        t = data.dtype.type
        pos = data > 0
        if self.act_type == "leaky":
            output[...] = xp.where(pos, data, t(self.slope) * data)
        elif self.act_type == "elu":
            output[...] = xp.where(pos, data, t(self.slope) * xp.expm1(xp.minimum(data, 0)))
        elif self.act_type == "selu":
            output[...] = t(SELU_LAMBDA) * xp.where(pos, data, t(SELU_ALPHA) * xp.expm1(xp.minimum(data, 0)))
        else:
            import scipy.special

            output[...] = 0.5 * data * (1 + scipy.special.erf(data / t(math.sqrt(2.0))))

    def gradient(self, out_grads, inputs, outputs):
        g, x, y = out_grads[0], inputs[0], outputs[0]
        pos = T._greater_scalar(x, scalar=0.0)
        if self.act_type == "gelu":  # Phi(x) + x * phi(x)
            cdf = T._mul_scalar(T._plus_scalar(T.erf(T._mul_scalar(x, scalar=1 / math.sqrt(2.0))), scalar=1.0),
                                scalar=0.5)
            pdf = T._mul_scalar(T.exp(T._mul_scalar(T.square(x), scalar=-0.5)), scalar=1 / math.sqrt(2 * math.pi))
            return [T.elemwise_mul(g, T.elemwise_add(cdf, T.elemwise_mul(x, pdf)))]
        if self.act_type == "leaky":
            below = T._mul_scalar(T._rminus_scalar(pos, scalar=1.0), scalar=self.slope)
            return [T.elemwise_mul(g, T.elemwise_add(pos, below))]
        scale, alpha = (1.0, self.slope) if self.act_type == "elu" else (SELU_LAMBDA, SELU_ALPHA)
        below = T.elemwise_mul(T._rminus_scalar(pos, scalar=1.0), T._plus_scalar(y, scalar=scale * alpha))
        return [T.elemwise_mul(g, T.elemwise_add(T._mul_scalar(pos, scalar=scale), below))]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: each act_type, a csr input (fallback)."""
        from . import _samples

        x = _samples.array((3, 4))
        return [([x], {}), ([x], {"act_type": "leaky", "slope": 0.1}), ([x], {"act_type": "elu", "slope": 0.7}),
                ([x], {"act_type": "selu"}), ([x], {"act_type": "gelu"}),
                ([_samples.array((3, 4), "csr", seed=1)], {})]
