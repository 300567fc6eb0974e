"""Operators that pass values through: ``cast`` (a new dtype), ``identity`` (a copy) and
``BlockGrad`` (a copy the gradient does not cross).

Storage types follow MXNet 1.9: ``identity`` (``_copy``) and ``BlockGrad`` keep a
row_sparse or csr input's storage type (the stored values copied, the index arrays
shared); ``Cast`` has dense kernels only, so a sparse input falls back to dense with a
``StorageFallbackWarning``, as in MXNet.
"""
from __future__ import annotations

import numpy as np

from ..registry import Op, Param, kernel, register
from ._util import T
from .unary import _Elementwise

_BOTH = ("cpu", "gpu")


@register("cast")
class Cast(Op):
    """The values of ``data`` converted to ``dtype`` (NumPy's unsafe cast: floats to ints
    truncate toward zero, out-of-range values wrap as C does). The gradient is the head
    gradient cast back to the input's dtype."""

    trusted = True  # built-in kernels, tested against NumPy references
    dtype = Param("dtype", doc="the output dtype")
    backward_needs_inputs = ()
    partition = "rows"

    def infer_type(self, data):
        return [self.dtype]

    @kernel(device=_BOTH)
    def dense(self, ctx, data, output):
        with np.errstate(invalid="ignore", over="ignore"):
            output[...] = data.astype(output.dtype, copy=False)

    def gradient(self, out_grads, inputs, outputs):
        return [T.cast(out_grads[0], dtype=inputs[0].dtype)]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: float64 kept and from float32, float64 to float32."""
        from . import _samples

        return [([_samples.array((3, 4))], {"dtype": "float64"}),
                ([_samples.array((3, 4), dtype="float32")], {"dtype": "float64"}),
                ([_samples.array((2, 3))], {"dtype": "float32"})]


class _Copy(_Elementwise):
    """A copy of ``data`` in its storage type."""

    def apply(self, xp, x, out):
        out[...] = x

    def keeps_zero(self) -> bool:
        return True

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: each storage type."""
        from . import _samples

        return [[x] for x in _samples.each_stype((3, 4))]


@register("identity")
class Identity(_Copy):
    """A copy of ``data`` (MXNet's ``_copy``); keeps the storage type; the gradient passes
    through unchanged."""

    def gradient(self, out_grads, inputs, outputs):
        return [out_grads[0]]


@register("BlockGrad")
class BlockGrad(_Copy):
    """A copy of ``data`` that stops the gradient (``stop_gradient``): its input gets none
    from it, as if it were a constant; keeps the storage type."""

    differentiable = False
