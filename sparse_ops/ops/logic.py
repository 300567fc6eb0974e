"""Logical and modulo operators of MXNet 1.9: ``broadcast_logical_and``/``or``/``xor`` and
``logical_not`` (1/0 in the inputs' dtype, zero gradients, as MXNet's), and ``broadcast_mod``
(Python's ``%``: the result has the divisor's sign; 0 where the divisor is 0, as MXNet).

Dense kernels only (MXNet declares no sparse ones): a sparse input falls back to dense with
a ``StorageFallbackWarning``.
"""
from __future__ import annotations

import numpy as np

from ..registry import Op, kernel, register
from ._util import T, sum_to_shape
from .broadcast import _Broadcast, _BroadcastCompare

_BOTH = ("cpu", "gpu")


@register("broadcast_logical_and")
class BroadcastLogicalAnd(_BroadcastCompare):
    """1 where both operands are nonzero, else 0, with NumPy broadcasting (dense)."""

    ufunc = np.logical_and


@register("broadcast_logical_or")
class BroadcastLogicalOr(_BroadcastCompare):
    """1 where either operand is nonzero, else 0, with NumPy broadcasting (dense)."""

    ufunc = np.logical_or


@register("broadcast_logical_xor")
class BroadcastLogicalXor(_BroadcastCompare):
    """1 where exactly one operand is nonzero, else 0, with NumPy broadcasting (dense)."""

    ufunc = np.logical_xor


@register("logical_not")
class LogicalNot(Op):
    """1 where ``data`` is 0, else 0, in ``data``'s dtype (dense); a zero gradient."""

    trusted = True  # built-in kernels, tested against NumPy references
    backward_needs_inputs = ()
    partition = "rows"

    @kernel(device=_BOTH)
    def dense(self, ctx, data, output):
        ctx.xp.logical_not(data, out=output, casting="unsafe")

    def gradient(self, out_grads, inputs, outputs):
        return [T._mul_scalar(out_grads[0], scalar=0.0)]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: a dense array with zeros, a csr one (fallback)."""
        from . import _samples

        return [[_samples.array((3, 4), density=0.5)], [_samples.array((3, 4), "csr", seed=1)]]


@register("broadcast_mod")
class BroadcastMod(_Broadcast):
    """``lhs % rhs`` with the sign of ``rhs`` (Python's modulo), 0 where ``rhs`` is 0, with
    NumPy broadcasting (dense). Gradients: ``g`` for lhs, ``-floor(lhs / rhs) * g`` for rhs."""

    @kernel(device=_BOTH)
    def dense(self, ctx, lhs, rhs, out):
        xp = ctx.xp
        with np.errstate(divide="ignore", invalid="ignore"):
            r = xp.mod(lhs, rhs)
        out[...] = xp.where(rhs == 0, 0, r)

    def gradient(self, out_grads, inputs, outputs):
        g = out_grads[0]
        lhs, rhs = inputs
        dr = T.negative(T.broadcast_mul(g, T.floor(T.broadcast_div(lhs, rhs))))
        return [sum_to_shape(g, lhs.shape), sum_to_shape(dr, rhs.shape)]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: broadcast shapes with positive divisors away from the jumps."""
        from ..creation import array

        lhs = array(np.array([[2.3, -1.4, 3.7, -0.6], [5.2, 0.3, -4.1, 1.9], [-2.8, 6.6, 0.8, -3.3]]))
        return [([lhs, array(np.array([[1.5, 2.5, 1.25, 3.5]]))], {}),
                ([lhs, array(np.array([[1.5, -2.5, 1.25, -3.5]] * 3))], {})]
