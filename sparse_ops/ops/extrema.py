"""Dense-only reductions: ``max``, ``min``, ``prod``, ``nansum``, ``nanprod`` (axis,
keepdims, exclude: the rules of ``sum``), and the index searches ``argmax``, ``argmin``,
``argmax_channel``.

MXNet 1.9 declares dense kernels only for these, so a row_sparse or csr input falls back
to dense with one ``StorageFallbackWarning``; outputs are dense and keep the input dtype
(the indices of ``argmax``/``argmin`` too, as MXNet's float indices). As ``sum`` here, a full
reduction gives a 0-d array. Gradients are MXNet's: ``max``/``min`` send the head gradient
to every entry equal to the result (ties each get it), ``prod`` the product of the other
values (``y / x`` where the slice holds no zero, exact where it does: MXNet's ``y / x``
gives NaN there), the ``nan`` forms give 0 at NaN entries; the index searches have none
(their results are constants).
"""
from __future__ import annotations

import math

from typing import Any

import numpy as np

from ..registry import Op, Param, kernel, register
from ._util import T
from .reduce import reduce_axes, reduced_shape

_BOTH = ("cpu", "gpu")


class _DenseReduction(Op):
    """``reduce(data)`` over ``axis``; subclasses name the array-module function and the gradient."""

    trusted = True  # built-in kernels, tested against NumPy references

    axis = Param("axis", None, doc="axis or axes to reduce; None reduces all")
    keepdims = Param(bool, False, doc="keep reduced axes with length 1")
    exclude = Param(bool, False, doc="reduce the axes not listed in axis")
    backward_needs_outputs = ("output",)
    function = "max"

    def axes(self, ndim: int) -> tuple[int, ...]:
        return reduce_axes(self.axis, ndim, self.exclude)

    def infer_shape(self, data):
        axes = self.axes(len(data))
        if self.function in ("max", "min") and any(data[a] == 0 for a in axes):  # no identity to give
            raise ValueError(f"cannot reduce an empty axis of shape {tuple(data)} (argument axis)")
        return [reduced_shape(data, axes, self.keepdims)]

    @kernel(device=_BOTH)
    def dense(self, ctx, data, output):
        axes = self.axes(data.ndim)
        fn = getattr(ctx.xp, self.function)
        with np.errstate(all="ignore"):
            output[...] = fn(data, axis=axes, keepdims=self.keepdims).astype(output.dtype, copy=False) \
                if axes else data

    def _spread(self, a: Any, shape: tuple[int, ...]) -> Any:
        axes = self.axes(len(shape))
        return T._broadcast_reduced(a, shape=shape, axis=axes) if axes else a

    def local_gradient(self, x: Any, y: Any) -> Any:
        """d output / d input with the output broadcast back (the head gradient multiplies it)."""
        raise NotImplementedError

    def gradient(self, out_grads, inputs, outputs):
        x = inputs[0]
        g = self._spread(out_grads[0], x.shape)
        return [self.local_gradient(x, g, self._spread(outputs[0], x.shape))]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: all axes, rows, columns, keepdims and exclude on 3-d, a csr input (fallback)."""
        from . import _samples

        x = _samples.array((3, 4))
        return [([x], {}), ([x], {"axis": 0}), ([x], {"axis": 1}),
                ([_samples.array((2, 3, 2), seed=1)], {"axis": (0, 2), "keepdims": True}),
                ([_samples.array((2, 3, 2), seed=2)], {"axis": 1, "exclude": True}),
                ([_samples.array((3, 4), "csr", seed=3)], {"axis": 1})]


@register("max")
class Max(_DenseReduction):
    """The largest value over ``axis``; NaN propagates."""

    function = "max"
    backward_needs_inputs = ("data",)

    def local_gradient(self, x, g, y):
        return T.elemwise_mul(g, T.broadcast_equal(x, y))


@register("min")
class Min(Max):
    """The smallest value over ``axis``; NaN propagates."""

    function = "min"


@register("prod")
class Prod(_DenseReduction):
    """The product of the values over ``axis``."""

    function = "prod"
    backward_needs_inputs = ("data",)

    def local_gradient(self, x, g, y):
        return T.elemwise_mul(g, self._others(x, y))

    def _others(self, x: Any, y: Any) -> Any:
        """d y / d x: for each value the product of the other values of its slice. That is
        ``y / x`` in a slice without zeros; in a slice with one zero, the product of the rest
        at the zero and 0 elsewhere; with more zeros, 0 (``y / x`` would be 0 / 0 there).
        ``y`` is the output spread back to ``x``'s shape."""
        reduced = {"axis": self.axis, "keepdims": self.keepdims, "exclude": self.exclude}
        zero = T._equal_scalar(x, scalar=0.0)
        safe = T.where(zero, T.ones_like(x), x)
        zeros = self._spread(T.sum(zero, **reduced), x.shape)
        rest = self._spread(T.prod(safe, **reduced), x.shape)
        only_zero = T.elemwise_mul(zero, T._equal_scalar(zeros, scalar=1.0))
        with_zero = T.where(only_zero, rest, T.zeros_like(x))
        return T.where(T._equal_scalar(zeros, scalar=0.0), T.elemwise_div(y, safe), with_zero)


@register("nansum")
class Nansum(_DenseReduction):
    """The sum over ``axis`` with NaN counted as 0."""

    function = "nansum"
    backward_needs_inputs = ("data",)
    backward_needs_outputs = ()

    def local_gradient(self, x, g, y):
        return T.elemwise_mul(g, T.broadcast_equal(x, x))

    def gradient(self, out_grads, inputs, outputs):
        x = inputs[0]
        return [self.local_gradient(x, self._spread(out_grads[0], x.shape), None)]


@register("nanprod")
class Nanprod(Prod):
    """The product over ``axis`` with NaN counted as 1."""

    function = "nanprod"

    def local_gradient(self, x, g, y):
        number = T.broadcast_equal(x, x)  # 0 at NaN: no gradient there
        return T.elemwise_mul(T.elemwise_mul(g, number), self._others(T.where(number, x, T.ones_like(x)), y))


# ---- index searches ---------------------------------------------------------------------------------
class _Search(Op):
    """The index of the first largest (smallest) value along ``axis`` (None: of the
    flattened array), in the input's dtype."""

    trusted = True  # built-in kernels, tested against NumPy references
    differentiable = False
    axis = Param(int, None, doc="the axis to search; None searches the flattened array")
    keepdims = Param(bool, False, doc="keep the searched axis with length 1")
    backward_needs_inputs = ()
    function = "argmax"

    def infer_shape(self, data):
        if self.axis is None:
            if math.prod(data) == 0:
                raise ValueError(f"cannot search an empty array of shape {tuple(data)} (argument data)")
            return [(1,) * len(data) if self.keepdims else ()]
        axes = reduce_axes(self.axis, len(data))
        if data[axes[0]] == 0:  # (other axes may be empty: an empty result, as NumPy's)
            raise ValueError(f"cannot search an empty axis {self.axis} of shape {tuple(data)} (argument data)")
        return [reduced_shape(data, axes, self.keepdims)]

    @kernel(device=_BOTH)
    def dense(self, ctx, data, output):
        fn = getattr(ctx.xp, self.function)
        if self.axis is None:
            output[...] = fn(data.reshape(-1))
        else:
            output[...] = fn(data, axis=self.axis % data.ndim).reshape(output.shape)

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: flattened, each axis, keepdims, a csr input (fallback)."""
        from . import _samples

        x = _samples.array((3, 4))
        return [([x], {"axis": 1}), ([x], {}), ([x], {"axis": 0, "keepdims": True}),
                ([_samples.array((3, 4), "csr", seed=3)], {"axis": -1})]


@register("argmax")
class Argmax(_Search):
    __doc__ = _Search.__doc__.replace(" (smallest)", "")
    function = "argmax"


@register("argmin")
class Argmin(_Search):
    __doc__ = _Search.__doc__.replace("largest (smallest)", "smallest")
    function = "argmin"


@register("argmax_channel")
class ArgmaxChannel(Op):
    """The index of the first largest value along the last axis (MXNet's ``argmax_channel``),
    in the input's dtype."""

    trusted = True  # built-in kernels, tested against NumPy references
    differentiable = False
    backward_needs_inputs = ()

    def infer_shape(self, data):
        if not data:
            raise ValueError("argmax_channel needs an array of at least one dimension (argument data)")
        if data[-1] == 0:
            raise ValueError(f"cannot search an empty last axis, shape {tuple(data)} (argument data)")
        return [tuple(data[:-1])]

    @kernel(device=_BOTH)
    def dense(self, ctx, data, output):
        output[...] = ctx.xp.argmax(data, axis=-1)

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: 2-d and 3-d."""
        from . import _samples

        return [[_samples.array((3, 4))], [_samples.array((2, 3, 2), seed=1)]]
