"""Operators whose results are positions or sizes: ``one_hot`` (depth, on_value,
off_value, dtype), ``argsort`` (axis, is_ascend, dtype), ``shape_array`` and ``size_array``
(int64, as MXNet). None is differentiable: MXNet gives these zero gradients, and here their
results are constants.

Dense kernels only, as in MXNet: a sparse input falls back to dense with a
``StorageFallbackWarning``.
"""
from __future__ import annotations

import numpy as np

from ..registry import Op, Param, kernel, register
from ._util import int_ids
from .shape import _norm_axis

_BOTH = ("cpu", "gpu")


class _Constant(Op):
    trusted = True  # built-in kernels, tested against NumPy references
    differentiable = False
    backward_needs_inputs = ()


@register("one_hot")
class OneHot(_Constant):
    """For each index of ``indices``, a vector of length ``depth``: ``on_value`` at the
    index, ``off_value`` elsewhere (all ``off_value`` for an index outside
    ``[0, depth)``, as MXNet). Indices are truncated toward zero first."""

    arguments = ("indices",)
    depth = Param(int, doc="the length of each one-hot vector")
    on_value = Param(float, 1.0, doc="the value at the index")
    off_value = Param(float, 0.0, doc="the value elsewhere")
    dtype = Param("dtype", "float32", doc="the output dtype")

    def check_params(self):
        if self.depth < 0:
            raise ValueError(f"one_hot: depth={self.depth} must not be negative (argument depth)")

    def infer_shape(self, indices):
        return [tuple(indices) + (self.depth,)]

    def infer_type(self, indices):
        return [self.dtype]

    @kernel(device=_BOTH)
    def dense(self, ctx, indices, output):
        xp = ctx.xp
        idx = int_ids(xp, indices, "one_hot", "indices").astype(np.int64, copy=False)
        if self.depth == 0:  # indices.shape + (0,): nothing to write
            return
        output[...] = self.off_value
        flat = output.reshape(-1, self.depth)
        idx = idx.reshape(-1)
        rows = xp.nonzero((idx >= 0) & (idx < self.depth))[0]
        flat[rows, idx[rows]] = self.on_value

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: int64 and float indices, one out of range, 2-d indices."""
        from ..creation import array

        return [([array(np.array([0, 2, 1, 5], dtype=np.int64))], {"depth": 3}),
                ([array(np.array([[1.0, 0.0], [3.0, 2.0]]))], {"depth": 4, "on_value": 2.5, "off_value": -1.0,
                                                                "dtype": "float64"})]


@register("argsort")
class Argsort(_Constant):
    """The indices that sort ``data`` along ``axis`` (None: the flattened array), ascending
    unless ``is_ascend=False``; ties keep their order (a stable sort). The indices have
    ``dtype`` (float32 by default, as MXNet)."""

    axis = Param(int, -1, optional=True, doc="the axis to sort along (None: flatten first)")
    is_ascend = Param(bool, True, doc="ascending (else descending) order")
    dtype = Param("dtype", "float32", doc="the dtype of the indices")

    def infer_shape(self, data):
        if self.axis is None:
            return [(int(np.prod(data, dtype=np.int64)),)]
        _norm_axis(self.axis, len(data))
        return [tuple(data)]

    def infer_type(self, data):
        return [self.dtype]

    @kernel(device=_BOTH)
    def dense(self, ctx, data, output):
        xp = ctx.xp
        a = data.reshape(-1) if self.axis is None else data
        axis = -1 if self.axis is None else self.axis
        if self.is_ascend:
            output[...] = xp.argsort(a, axis=axis, kind="stable")
        else:  # descending and stable: sort the reversed axis, map positions back
            n = a.shape[axis]
            rev = xp.flip(a, axis=axis)
            output[...] = xp.flip(n - 1 - xp.argsort(rev, axis=axis, kind="stable"), axis=axis)

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: each axis, descending, flattened."""
        from . import _samples

        x = _samples.array((3, 4))
        return [([x], {}), ([x], {"axis": 0, "is_ascend": False}), ([x], {"axis": None, "dtype": "int64"})]


class _Describe(_Constant):
    def infer_type(self, data):
        return [np.dtype(np.int64)]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: 2-d, 3-d, a csr input (fallback)."""
        from . import _samples

        return [[_samples.array((3, 4))], [_samples.array((2, 3, 2))], [_samples.array((3, 4), "csr")]]


@register("shape_array")
class ShapeArray(_Describe):
    """The shape of ``data`` as a 1-d int64 array."""

    def infer_shape(self, data):
        return [(len(data),)]

    @kernel(device=_BOTH)
    def dense(self, ctx, data, output):
        output[...] = ctx.xp.asarray(data.shape, dtype=np.int64)


@register("size_array")
class SizeArray(_Describe):
    """The number of entries of ``data`` as a 1-element int64 array."""

    def infer_shape(self, data):
        return [(1,)]

    @kernel(device=_BOTH)
    def dense(self, ctx, data, output):
        output[...] = data.size
