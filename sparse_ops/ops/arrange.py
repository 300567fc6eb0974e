"""Operators that rearrange values without computing on them: ``squeeze``, ``stack``,
``tile``, ``repeat``, ``reverse`` (``flip``), ``swapaxes`` (``SwapAxis``) and ``pad``
(``Pad``), with MXNet 1.9's parameters and NumPy's semantics.

Dense kernels only, as in MXNet: a sparse input falls back to dense with a
``StorageFallbackWarning``. Gradients gather the head gradient back to the input's
layout (``tile`` and ``repeat`` sum the copies).
"""
from __future__ import annotations

import math

import numpy as np

from ..registry import Op, Param, kernel, register
from ..sdk.csr import index_add
from ._util import T
from .shape import _norm_axes, _norm_axis

_BOTH = ("cpu", "gpu")


@register("squeeze")
class Squeeze(Op):
    """``data`` without its axes of length 1 (only those of ``axis`` when given; each must
    have length 1). Squeezing every axis of a 1-element array gives shape ``(1,)``, as MXNet."""

    trusted = True  # built-in kernels, tested against NumPy references
    axis = Param("axis", None, doc="the axes to drop (None: every axis of length 1)")
    backward_needs_inputs = ()

    def infer_shape(self, data):
        if self.axis is None:
            out = tuple(d for d in data if d != 1)
        else:
            listed = (self.axis,) if isinstance(self.axis, int) else tuple(self.axis)
            axes = _norm_axes(listed, len(data), "squeeze: argument axis")
            for a in sorted(axes):
                if data[a] != 1:
                    raise ValueError(f"squeeze: axis {a} has length {data[a]}, not 1 (argument axis)")
            out = tuple(d for i, d in enumerate(data) if i not in axes)
        return [out or (1,)]

    @kernel(device=_BOTH)
    def dense(self, ctx, data, output):
        output[...] = data.reshape(output.shape)

    def gradient(self, out_grads, inputs, outputs):
        return [T.reshape(out_grads[0], shape=inputs[0].shape)]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: every unit axis, one named axis."""
        from . import _samples

        x = _samples.array((3, 1, 4, 1))
        return [([x], {}), ([x], {"axis": 1}), ([x], {"axis": (1, 3)})]


@register("stack")
class Stack(Op):
    """Arrays of one shape joined along a new axis ``axis``."""

    trusted = True  # built-in kernels, tested against NumPy references
    variadic = True
    axis = Param(int, 0, doc="where the new axis goes")
    num_args = Param(int, None, doc="number of inputs (MXNet compatibility; checked if given)")
    backward_needs_inputs = ()

    def infer_shape(self, *shapes):
        if not shapes:
            raise ValueError("stack needs at least one input (argument data)")
        if self.num_args is not None and self.num_args != len(shapes):
            raise ValueError(f"stack: num_args={self.num_args} but {len(shapes)} inputs were given (argument num_args)")
        first = tuple(shapes[0])
        for s in shapes[1:]:
            if tuple(s) != first:
                raise ValueError(f"stack needs inputs of one shape, got {[tuple(s) for s in shapes]}")
        a = _norm_axis(self.axis, len(first), extra=1)
        return [first[:a] + (len(shapes),) + first[a:]]

    @kernel(device=_BOTH)
    def dense(self, ctx, *arrays):
        *data, output = arrays
        output[...] = ctx.xp.stack(data, axis=_norm_axis(self.axis, data[0].ndim, extra=1))

    def gradient(self, out_grads, inputs, outputs):
        a = _norm_axis(self.axis, len(inputs[0].shape), extra=1)
        parts = T.split(out_grads[0], num_outputs=len(inputs), axis=a, squeeze_axis=True)
        return list(parts) if isinstance(parts, (list, tuple)) else [parts]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: two and three inputs, first, middle and last axis."""
        from . import _samples

        x, y, z = (_samples.array((3, 4), seed=s) for s in (1, 2, 3))
        return [([x, y], {}), ([x, y, z], {"axis": 1}), ([x, y], {"axis": -1}), ([x], {})]


@register("tile")
class Tile(Op):
    """``data`` repeated ``reps`` times along each axis (``numpy.tile``: a shorter ``reps``
    is padded with ones in front, a longer one gives the array new leading axes)."""

    trusted = True  # built-in kernels, tested against NumPy references
    reps = Param("shape", doc="the number of copies along each axis")
    backward_needs_inputs = ()

    def _padded(self, shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        n = max(len(shape), len(self.reps))
        return (1,) * (n - len(shape)) + tuple(shape), (1,) * (n - len(self.reps)) + tuple(self.reps)

    def infer_shape(self, data):
        if any(r < 0 for r in self.reps):
            raise ValueError(f"tile: reps {self.reps} must not be negative (argument reps)")
        shape, reps = self._padded(tuple(data))
        return [tuple(d * r for d, r in zip(shape, reps))]

    @kernel(device=_BOTH)
    def dense(self, ctx, data, output):
        output[...] = ctx.xp.tile(data, self.reps)

    def gradient(self, out_grads, inputs, outputs):
        shape, reps = self._padded(inputs[0].shape)
        split = tuple(v for pair in zip(reps, shape) for v in pair)  # (r0, d0, r1, d1, ...)
        g = T.reshape(out_grads[0], shape=split)
        g = T.sum(g, axis=tuple(range(0, 2 * len(shape), 2)))
        return [T.reshape(g, shape=inputs[0].shape)]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: as many reps as axes, fewer, more."""
        from . import _samples

        x = _samples.array((2, 3))
        return [([x], {"reps": (2, 3)}), ([x], {"reps": (2,)}), ([x], {"reps": (2, 1, 2)})]


@register("repeat")
class Repeat(Op):
    """Each value of ``data`` repeated ``repeats`` times along ``axis`` (None: of the
    flattened array), as ``numpy.repeat`` with one count."""

    trusted = True  # built-in kernels, tested against NumPy references
    repeats = Param(int, doc="copies of each value")
    axis = Param(int, None, doc="the axis to repeat along (None: flatten first)")
    backward_needs_inputs = ()

    def infer_shape(self, data):
        if self.repeats < 0:
            raise ValueError(f"repeat: repeats={self.repeats} must not be negative (argument repeats)")
        if self.axis is None:
            return [(int(np.prod(data, dtype=np.int64)) * self.repeats,)]
        a = _norm_axis(self.axis, len(data))
        return [tuple(data[:a]) + (data[a] * self.repeats,) + tuple(data[a + 1:])]

    @kernel(device=_BOTH)
    def dense(self, ctx, data, output):
        output[...] = ctx.xp.repeat(data, self.repeats, axis=self.axis)

    def gradient(self, out_grads, inputs, outputs):
        shape = inputs[0].shape
        if self.axis is None:
            g = T.sum(T.reshape(out_grads[0], shape=(int(np.prod(shape, dtype=np.int64)), self.repeats)), axis=1)
        else:
            a = _norm_axis(self.axis, len(shape))
            g = T.sum(T.reshape(out_grads[0], shape=shape[:a] + (shape[a], self.repeats) + shape[a + 1:]), axis=a + 1)
        return [T.reshape(g, shape=shape)]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: flattened, each axis."""
        from . import _samples

        x = _samples.array((2, 3))
        return [([x], {"repeats": 2}), ([x], {"repeats": 3, "axis": 1}), ([x], {"repeats": 2, "axis": -2})]


@register("reverse")
class Reverse(Op):
    """``data`` with the order of the entries along ``axis`` (one or more axes) reversed (``flip``)."""

    trusted = True  # built-in kernels, tested against NumPy references
    axis = Param("axis", doc="the axis or axes to reverse")
    backward_needs_inputs = ()

    def _axes(self, ndim: int) -> tuple[int, ...]:
        listed = (self.axis,) if isinstance(self.axis, int) else tuple(self.axis or ())
        return _norm_axes(listed, ndim, "reverse: argument axis")

    def infer_shape(self, data):
        self._axes(len(data))
        return [tuple(data)]

    @kernel(device=_BOTH)
    def dense(self, ctx, data, output):
        output[...] = ctx.xp.flip(data, axis=self._axes(data.ndim))

    def gradient(self, out_grads, inputs, outputs):
        return [T.reverse(out_grads[0], axis=self.axis)]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: one axis, two axes."""
        from . import _samples

        return [([_samples.array((3, 4))], {"axis": 0}), ([_samples.array((2, 3, 2), seed=1)], {"axis": (0, 2)})]


@register("swapaxes")
class SwapAxes(Op):
    """``data`` with axes ``dim1`` and ``dim2`` exchanged (``SwapAxis``)."""

    trusted = True  # built-in kernels, tested against NumPy references
    dim1 = Param(int, 0, doc="the first axis")
    dim2 = Param(int, 0, doc="the second axis")
    backward_needs_inputs = ()

    def infer_shape(self, data):
        a, b = _norm_axis(self.dim1, len(data)), _norm_axis(self.dim2, len(data))
        out = list(data)
        out[a], out[b] = out[b], out[a]
        return [tuple(out)]

    @kernel(device=_BOTH)
    def dense(self, ctx, data, output):
        output[...] = ctx.xp.swapaxes(data, self.dim1, self.dim2)

    def gradient(self, out_grads, inputs, outputs):
        return [T.swapaxes(out_grads[0], dim1=self.dim1, dim2=self.dim2)]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: 2-d, and two axes of a 3-d array."""
        from . import _samples

        return [([_samples.array((3, 4))], {"dim1": 0, "dim2": 1}),
                ([_samples.array((2, 3, 2), seed=1)], {"dim1": 0, "dim2": -1})]


@register("reshape_like")
class ReshapeLike(Op):
    """``lhs``'s values in ``rhs``'s shape (the sizes must agree); ``rhs`` gets a zero
    gradient. With ``lhs_begin``/``lhs_end``/``rhs_begin``/``rhs_end`` (MXNet's ranges of
    axes, negative ones counted from the end, None: the start or the end), only lhs's axes
    ``lhs_begin:lhs_end`` take the lengths of rhs's ``rhs_begin:rhs_end``."""

    trusted = True  # built-in kernels, tested against NumPy references
    arguments = ("lhs", "rhs")
    backward_needs_inputs = ("rhs",)
    lhs_begin = Param(int, None, doc="first axis of lhs replaced (None: 0)")
    lhs_end = Param(int, None, doc="axis of lhs after the last replaced (None: lhs.ndim)")
    rhs_begin = Param(int, None, doc="first axis of rhs whose length is taken (None: 0)")
    rhs_end = Param(int, None, doc="axis of rhs after the last taken (None: rhs.ndim)")

    def infer_shape(self, lhs, rhs):
        lb, le = _axis_range(len(lhs), self.lhs_begin, self.lhs_end, "lhs")
        rb, re = _axis_range(len(rhs), self.rhs_begin, self.rhs_end, "rhs")
        shape = (*lhs[:lb], *rhs[rb:re], *lhs[le:])
        if math.prod(lhs) != math.prod(shape):  # products of sizes, symbolic ones kept symbolic
            raise ValueError(f"reshape_like: lhs of shape {tuple(lhs)} does not fit the shape {tuple(shape)} "
                             f"from rhs's {tuple(rhs)} (arguments lhs, rhs)")
        return [tuple(shape)]

    def infer_type(self, lhs, rhs):
        return [lhs]

    @kernel(device=_BOTH)
    def dense(self, ctx, lhs, rhs, output):
        output[...] = lhs.reshape(output.shape)

    def gradient(self, out_grads, inputs, outputs):
        return [T.reshape(out_grads[0], shape=inputs[0].shape), T.zeros_like(inputs[1])]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: 2-d to 3-d and back."""
        from . import _samples

        return [[_samples.array((3, 4)), _samples.array((2, 3, 2), seed=1)],
                [_samples.array((2, 6)), _samples.array((4, 3), seed=1)]]


def _axis_range(ndim: int, begin: int | None, end: int | None, side: str) -> tuple[int, int]:
    """(begin, end) of a reshape_like range of ``ndim`` axes, as MXNet canonicalizes it."""
    b = 0 if begin is None else begin + ndim if begin < 0 else begin
    e = ndim if end is None else end + ndim if end < 0 else end
    if not 0 <= b < e <= ndim:
        raise ValueError(f"reshape_like: {side}_begin={begin}, {side}_end={end} is no range of axes of a "
                         f"{ndim}-d {side}")
    return b, e


@register("broadcast_axis")
class BroadcastAxis(Op):
    """``data`` repeated along each axis of ``axis`` (each of length 1) to ``size`` (one
    size per axis; ``broadcast_axes``)."""

    trusted = True  # built-in kernels, tested against NumPy references
    axis = Param("shape", (), doc="the axes to broadcast (each of length 1)")
    size = Param("shape", (), doc="the new length of each axis")
    backward_needs_inputs = ()

    def _axes(self, ndim: int) -> tuple[int, ...]:
        if len(self.axis) != len(self.size):
            raise ValueError(f"broadcast_axis: axis {self.axis} and size {self.size} differ in length "
                             "(arguments axis, size)")
        return _norm_axes(self.axis, ndim)

    def infer_shape(self, data):
        out = list(data)
        for a, n in zip(self._axes(len(data)), self.size):
            if data[a] != 1:
                raise ValueError(f"broadcast_axis: axis {a} has length {data[a]}, not 1 (argument axis)")
            out[a] = n
        return [tuple(out)]

    @kernel(device=_BOTH)
    def dense(self, ctx, data, output):
        output[...] = ctx.xp.broadcast_to(data, output.shape)

    def gradient(self, out_grads, inputs, outputs):
        axes = self._axes(len(inputs[0].shape))
        return [T.sum(out_grads[0], axis=axes, keepdims=True) if axes else out_grads[0]]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: one axis, two axes."""
        from . import _samples

        return [([_samples.array((3, 1))], {"axis": 1, "size": 4}),
                ([_samples.array((1, 3, 1))], {"axis": (0, 2), "size": (2, 3)})]


@register("pad")
class Pad(Op):
    """``data`` padded along every axis by ``pad_width`` (before and after each axis, in axis
    order: ``2 * ndim`` values) with ``mode`` ``constant`` (``constant_value``), ``edge``
    (the border value repeated) or ``reflect`` (mirrored without the border), as
    ``numpy.pad``. MXNet's ``Pad``, which takes only 4-d and 5-d inputs; any rank here.
    Gradient: each output position's head gradient added to the input position it copies
    (none for constant padding)."""

    trusted = True  # built-in kernels, tested against NumPy references
    mode = Param(str, "constant", doc="constant, edge or reflect", choices=("constant", "edge", "reflect"))
    pad_width = Param("shape", doc="(before, after) per axis, flattened")
    constant_value = Param(float, 0.0, doc="the value of constant padding")
    backward_needs_inputs = ()

    def _widths(self, ndim: int) -> list[tuple[int, int]]:
        w = self.pad_width
        if len(w) != 2 * ndim:
            raise ValueError(f"pad_width needs 2 values per axis ({2 * ndim} for {ndim} axes), got {w} "
                             "(argument pad_width)")
        if any(v < 0 for v in w):
            raise ValueError(f"pad_width must not be negative, got {w} (argument pad_width)")
        return [(w[2 * i], w[2 * i + 1]) for i in range(ndim)]

    def infer_shape(self, data):
        widths = self._widths(len(data))
        if self.mode == "reflect" and any(n <= max(b, a) for n, (b, a) in zip(data, widths)):
            raise ValueError(f"reflect padding needs each padded axis longer than its pads, got shape "
                             f"{tuple(data)} and pad_width {self.pad_width}")
        return [tuple(n + b + a for n, (b, a) in zip(data, widths))]

    @kernel(device=_BOTH)
    def dense(self, ctx, data, output):
        widths = self._widths(data.ndim)
        if self.mode == "constant":
            output[...] = ctx.xp.pad(data, widths, mode="constant", constant_values=self.constant_value)
        else:
            output[...] = ctx.xp.pad(data, widths, mode=self.mode)

    def gradient(self, out_grads, inputs, outputs):
        return [T._backward_pad(out_grads[0], mode=self.mode, pad_width=self.pad_width)]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: each mode on a 2-d array, a 4-d one padded on its last axes."""
        from . import _samples

        x = _samples.array((3, 4))
        return [([x], {"mode": "constant", "pad_width": (1, 0, 2, 1), "constant_value": 0.5}),
                ([x], {"mode": "edge", "pad_width": (1, 2, 0, 1)}),
                ([x], {"mode": "reflect", "pad_width": (2, 1, 1, 2)}),
                ([_samples.array((1, 2, 2, 3), seed=1)], {"mode": "constant", "pad_width": (0, 0, 0, 0, 1, 1, 0, 2)})]


@register("_backward_pad")
class BackwardPad(Op):
    """The gradient of ``pad``: each position of ``grad`` added to the position of the
    unpadded input it was copied from (padding constants get nothing)."""

    trusted = True  # built-in kernels, tested against NumPy references
    arguments = ("grad",)
    mode = Param(str, "constant", choices=("constant", "edge", "reflect"))
    pad_width = Param("shape")
    backward_needs_inputs = ()

    def _widths(self, ndim: int) -> list[tuple[int, int]]:
        return Pad._widths(self, ndim)

    def infer_shape(self, grad):
        widths = self._widths(len(grad))
        shape = tuple(n - b - a for n, (b, a) in zip(grad, widths))
        if any(n <= 0 for n in shape):
            raise ValueError(f"a gradient of shape {tuple(grad)} is smaller than pad_width {self.pad_width}")
        return [shape]

    @kernel(device=_BOTH)
    def dense(self, ctx, grad, output):
        xp = ctx.xp
        g = grad
        for axis, (b, a) in enumerate(self._widths(grad.ndim)):
            n = g.shape[axis] - b - a
            if self.mode == "constant":
                g = xp.take(g, xp.arange(b, b + n), axis=axis)
                continue
            source = np.pad(np.arange(n), (b, a), mode=self.mode)  # the input position of each output one
            summed = xp.zeros(g.shape[:axis] + (n,) + g.shape[axis + 1:], dtype=g.dtype)
            index_add(ctx, xp.moveaxis(summed, axis, 0), xp.asarray(source), xp.moveaxis(g, axis, 0))
            g = summed
        output[...] = g

    def gradient(self, out_grads, inputs, outputs):
        # the adjoint of this scatter is the gather that pad is (zeros for constant padding)
        return [T.pad(out_grads[0], mode=self.mode, pad_width=self.pad_width)]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: the gradient of each mode on a (3, 4) input."""
        from . import _samples

        return [([_samples.array((4, 7))], {"mode": "constant", "pad_width": (1, 0, 2, 1)}),
                ([_samples.array((6, 5), seed=1)], {"mode": "edge", "pad_width": (1, 2, 0, 1)}),
                ([_samples.array((6, 7), seed=2)], {"mode": "reflect", "pad_width": (2, 1, 1, 2)})]
