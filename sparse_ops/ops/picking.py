"""``pick`` (one entry per position along an axis, chosen by an index array) and
``slice_like`` (the leading block of ``data`` in another array's shape), with MXNet 1.9's
parameters.

Dense kernels only, as in MXNet: a sparse input falls back to dense with a
``StorageFallbackWarning``. Gradients: ``pick`` sends the head gradient to the picked
entries, ``slice_like`` writes it into zeros of the input's shape; the index and the
shape-giving array get zero gradients, as in MXNet.
"""
from __future__ import annotations

import numpy as np

from ..creation import full
from ..registry import Op, Param, kernel, register
from ._util import T, int_ids
from .shape import _norm_axis

_BOTH = ("cpu", "gpu")


@register("pick")
class Pick(Op):
    """``out[i..., j...] = data[i..., index[i..., j...], j...]`` along ``axis``: the index
    (any dtype; truncated toward zero) has ``data``'s shape without that axis (or with
    length 1 there). Out-of-range indices are clipped (``mode='clip'``) or wrapped (``'wrap'``)."""

    trusted = True  # built-in kernels, tested against NumPy references
    arguments = ("data", "index")
    axis = Param(int, -1, doc="the axis to pick along")
    keepdims = Param(bool, False, doc="keep the picked axis with length 1")
    mode = Param(str, "clip", doc="out-of-range indices: clip or wrap", choices=("clip", "wrap"))

    def _reduced(self, data: tuple) -> tuple[int, tuple[int, ...]]:
        a = _norm_axis(self.axis, len(data))
        return a, tuple(data[:a]) + tuple(data[a + 1:])

    def infer_shape(self, data, index):
        a, rest = self._reduced(tuple(data))
        kept = tuple(data[:a]) + (1,) + tuple(data[a + 1:])
        if tuple(index) not in (rest, kept):
            raise ValueError(f"pick: index of shape {tuple(index)} does not fit data of shape {tuple(data)} "
                             f"along axis {a} (argument index)")
        return [kept if self.keepdims else rest]

    def infer_type(self, data, index):
        return [data]

    def _positions(self, xp, index, n: int):
        idx = int_ids(xp, index, "pick", "index").astype(np.int64, copy=False)
        return xp.clip(idx, 0, max(n - 1, 0)) if self.mode == "clip" else xp.mod(idx, max(n, 1))

    @kernel(device=_BOTH)
    def dense(self, ctx, data, index, output):
        xp = ctx.xp
        a, rest = self._reduced(data.shape)
        if data.shape[a] == 0 and output.size:
            raise ValueError(f"pick: axis {a} of data is empty, nothing to pick (argument data)")
        if output.size == 0:
            return
        idx = self._positions(xp, index.reshape(rest), data.shape[a])
        got = xp.take_along_axis(data, xp.expand_dims(idx, a), axis=a)
        output[...] = got.reshape(output.shape)

    def gradient(self, out_grads, inputs, outputs):
        data, index = inputs
        a, rest = self._reduced(data.shape)
        n = data.shape[a]
        idx = T.reshape(index, shape=rest)
        if self.mode == "clip":
            idx = T.clip(idx, a_min=0.0, a_max=float(max(n - 1, 0)))
        else:
            idx = T.broadcast_mod(T.fix(idx), full((), max(n, 1), dtype=idx.dtype, device=idx.device))
        hot = T.one_hot(idx, depth=n, dtype=data.dtype)  # rest + (n,)
        perm = tuple(range(a)) + (len(rest),) + tuple(range(a, len(rest)))
        hot = T.transpose(hot, axes=perm)
        g = T.expand_dims(T.reshape(out_grads[0], shape=rest), axis=a)
        return [T.broadcast_mul(hot, g), T.zeros_like(index)]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: the last axis, the first with keepdims, wrapped and clipped
        out-of-range indices (all off the integers, where truncation jumps)."""
        from ..creation import array
        from . import _samples

        x = _samples.array((3, 4))
        return [([x, array(np.array([1.5, 0.5, 3.5]))], {}),
                ([x, array(np.array([[2.5, 0.5, 1.5, 2.5]]))], {"axis": 0, "keepdims": True}),
                ([x, array(np.array([5.5, -1.5, 2.5]))], {"mode": "wrap"}),
                ([x, array(np.array([7.5, -2.5, 1.5]))], {"axis": 1})]


@register("slice_like")
class SliceLike(Op):
    """The block ``data[:s0, :s1, ...]`` with the sizes of ``shape_like`` on ``axes`` (empty:
    every axis; the two arrays then have the same number of axes)."""

    trusted = True  # built-in kernels, tested against NumPy references
    arguments = ("data", "shape_like")
    axes = Param("shape", (), doc="the axes to slice (empty: all)")
    backward_needs_inputs = ("shape_like",)

    def infer_shape(self, data, shape_like):
        data, like = tuple(data), tuple(shape_like)
        if not self.axes:
            if len(data) != len(like):
                raise ValueError(f"slice_like: data of shape {data} and shape_like of shape {like} differ in "
                                 "their number of axes (argument shape_like)")
            axes = range(len(data))
        else:
            axes = [_norm_axis(a, len(data)) for a in self.axes]
        out = list(data)
        for a in axes:
            if a >= len(like) or like[a] > data[a]:
                raise ValueError(f"slice_like: axis {a} of shape_like {like} exceeds data of shape {data} "
                                 "(argument shape_like)")
            out[a] = like[a]
        return [tuple(out)]

    def infer_type(self, data, shape_like):
        return [data]

    @kernel(device=_BOTH)
    def dense(self, ctx, data, shape_like, output):
        output[...] = data[tuple(slice(0, n) for n in output.shape)]

    def gradient(self, out_grads, inputs, outputs):
        g = out_grads[0]
        shape = inputs[0].shape
        return [T._backward_slice(g, begin=(0,) * len(shape), end=g.shape, shape=shape),
                T.zeros_like(inputs[1])]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: every axis, one named axis."""
        from . import _samples

        x = _samples.array((3, 4))
        return [([x, _samples.array((2, 3), seed=1)], {}), ([x, _samples.array((5, 2), seed=2)], {"axes": (1,)})]
