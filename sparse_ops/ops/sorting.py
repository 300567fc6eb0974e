"""Sorting: ``sort`` and ``topk`` (MXNet 1.9's parameters: ``axis`` (None: the flattened
array), ``is_ascend``, ``k``, ``ret_typ`` value / indices / mask / both, ``dtype`` of the
indices), and the private ``_gather_along_axis`` / ``_scatter_along_axis`` their gradients
are written with. ``argsort`` is in ``positions.py``.

Sorts are stable (ties keep their order, in either direction); MXNet does not promise an
order for ties. Dense kernels only, as in MXNet: a sparse input falls back to dense with a
``StorageFallbackWarning``. Gradients: the sorted (top) values send the head gradient back
to the entries they came from; indices and masks are constants.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..registry import Op, Param, kernel, register
from ..sdk.csr import index_add
from ._util import T
from .shape import _norm_axis

_BOTH = ("cpu", "gpu")


def stable_order(xp: Any, data: Any, axis: int, ascend: bool) -> Any:
    """The positions sorting ``data`` along ``axis`` (int64), ties in their order either way."""
    if ascend:
        return xp.argsort(data, axis=axis, kind="stable")
    n = data.shape[axis]
    return xp.flip(n - 1 - xp.argsort(xp.flip(data, axis=axis), axis=axis, kind="stable"), axis=axis)


class _AlongAxis(Op):
    trusted = True  # built-in kernels, tested against NumPy references
    arguments = ("data", "index")
    axis = Param(int, -1, doc="the axis the index runs along")
    backward_needs_inputs = ("index",)

    def infer_type(self, data, index):
        if index.kind not in "iu":
            raise TypeError(f"{self._opdef.name} needs integer indices, got {index} (argument index)")
        return [data]


@register("_gather_along_axis")
class GatherAlongAxis(_AlongAxis):
    """``out[..., i, ...] = data[..., index[..., i, ...], ...]`` along ``axis`` (NumPy's
    ``take_along_axis``; index in range)."""

    def infer_shape(self, data, index):
        a = _norm_axis(self.axis, len(data))
        if len(index) != len(data) or any(d != i for k, (d, i) in enumerate(zip(data, index)) if k != a):
            raise ValueError(f"_gather_along_axis: index of shape {tuple(index)} does not fit data of shape "
                             f"{tuple(data)} along axis {a} (argument index)")
        return [tuple(index)]

    @kernel(device=_BOTH)
    def dense(self, ctx, data, index, output):
        output[...] = ctx.xp.take_along_axis(data, index, axis=self.axis)

    def gradient(self, out_grads, inputs, outputs, needs=None):
        data, index = inputs
        a = _norm_axis(self.axis, len(data.shape))
        return [T._scatter_along_axis(out_grads[0], index, axis=a, size=data.shape[a]), None]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: a permutation per row, repeated positions along axis 0."""
        from . import _samples

        idx = _samples.ints([[1, 0, 3, 2], [3, 2, 1, 0], [0, 1, 2, 3]])
        return [([_samples.array((3, 4)), idx], {}), ([_samples.array((3, 4)), _samples.ints([[2, 0, 0, 1]])], {"axis": 0})]


@register("_scatter_along_axis")
class ScatterAlongAxis(_AlongAxis):
    """Zeros of ``data``'s shape with axis ``axis`` of length ``size``, each value of
    ``data`` added at its ``index`` position along that axis (the gradient of
    ``_gather_along_axis``; repeated positions add up)."""

    size = Param(int, doc="the length of the axis in the result")

    def infer_shape(self, data, index):
        a = _norm_axis(self.axis, len(data))
        if tuple(index) != tuple(data):
            raise ValueError(f"_scatter_along_axis: index of shape {tuple(index)} differs from data's "
                             f"{tuple(data)} (argument index)")
        out = list(data)
        out[a] = self.size
        return [tuple(out)]

    @kernel(device=_BOTH)
    def dense(self, ctx, data, index, output):
        xp = ctx.xp
        a = self.axis % data.ndim
        output[...] = 0
        if data.size == 0:
            return
        outside = (index < -self.size) | (index >= self.size)
        if outside.any():
            raise IndexError(f"index {int(index[outside][0])} is out of range for axis {a} of size {self.size}")
        where = list(xp.indices(data.shape, sparse=True))
        where[a] = xp.where(index < 0, index + self.size, index)  # NumPy's negative positions
        # every value's position in the flattened output, each added there in order
        flat = xp.ravel_multi_index(tuple(xp.broadcast_arrays(*where)), output.shape)
        dest = output if output.flags.c_contiguous else xp.zeros(output.shape, dtype=output.dtype)
        index_add(ctx, dest.reshape(-1), flat.reshape(-1), data.reshape(-1))
        if dest is not output:
            output[...] = dest

    def gradient(self, out_grads, inputs, outputs, needs=None):
        return [T._gather_along_axis(out_grads[0], inputs[1], axis=self.axis), None]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: positions along the last axis, repeated positions along axis 0."""
        from . import _samples

        return [([_samples.array((3, 2)), _samples.ints([[1, 3], [0, 0], [2, 1]])], {"size": 4}),
                ([_samples.array((2, 3)), _samples.ints([[0, 2, 2], [0, 1, 2]])], {"axis": 0, "size": 3})]


class _Sorting(Op):
    trusted = True  # built-in kernels, tested against NumPy references
    axis = Param(int, -1, optional=True, doc="the axis to sort along (None: the flattened array)")
    backward_needs_inputs = ("data",)
    k = 0
    ret_typ = "value"
    is_ascend = True
    dtype = np.dtype(np.float32)

    def _axis(self, shape: tuple) -> tuple[tuple, int]:
        """(shape the kernel sorts, axis)."""
        if self.axis is None:
            return (int(np.prod(shape, dtype=np.int64)),), 0
        return tuple(shape), _norm_axis(self.axis, len(shape))

    def _k(self, n: int) -> int:
        return n if self.k < 1 else self.k

    def output_count(self) -> int:
        return 2 if self.ret_typ == "both" else 1

    def infer_shape(self, data):
        shape, a = self._axis(tuple(data))
        k = self._k(shape[a])
        if k > shape[a]:
            raise ValueError(f"{self._opdef.name}: k={k} exceeds the {shape[a]} entries along axis {a} (argument k)")
        if self.ret_typ == "mask":
            return [tuple(data)]
        out = shape[:a] + (k,) + shape[a + 1:]
        return [out, out] if self.ret_typ == "both" else [out]

    def infer_type(self, data):
        kinds = {"value": [data], "indices": [self.dtype], "mask": [data], "both": [data, self.dtype]}
        return kinds[self.ret_typ]

    @kernel(device=_BOTH)
    def dense(self, ctx, data, *outs):
        xp = ctx.xp
        shape, a = self._axis(data.shape)
        x = data.reshape(shape)
        k = self._k(shape[a])
        idx = xp.take(stable_order(xp, x, a, self.is_ascend), xp.arange(k), axis=a)
        if self.ret_typ == "mask":
            outs[0][...] = 0
            xp.put_along_axis(outs[0].reshape(shape), idx, 1, axis=a)
            return
        if self.ret_typ == "indices":
            outs[0][...] = idx
            return
        outs[0][...] = xp.take_along_axis(x, idx, axis=a)
        if self.ret_typ == "both":
            outs[1][...] = idx

    def gradient(self, out_grads, inputs, outputs):
        x = inputs[0]
        if self.ret_typ in ("indices", "mask") or out_grads[0] is None:
            return [T.zeros_like(x)]
        shape, a = self._axis(x.shape)
        flat = x if self.axis is not None else T.reshape(x, shape=shape)
        idx = T.topk(flat, axis=a, k=self._k(shape[a]), ret_typ="indices", is_ascend=self.is_ascend, dtype="int64")
        g = T._scatter_along_axis(out_grads[0], idx, axis=a, size=shape[a])
        return [g if self.axis is not None else T.reshape(g, shape=x.shape)]


@register("sort")
class Sort(_Sorting):
    """``data`` sorted along ``axis`` (ascending unless ``is_ascend=False``)."""

    is_ascend = Param(bool, True, doc="ascending (else descending) order")

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: each axis, descending, flattened."""
        from . import _samples

        x = _samples.array((3, 4))
        return [([x], {}), ([x], {"axis": 0, "is_ascend": False}), ([x], {"axis": None})]


@register("topk")
class TopK(_Sorting):
    """The ``k`` largest (``is_ascend=True``: smallest) entries along ``axis``, in order:
    their ``indices`` (in ``dtype``), their ``value``s, ``both``, or a ``mask`` of
    ``data``'s shape (1 at the chosen entries). ``k < 1`` takes the whole axis."""

    k = Param(int, 1, doc="how many entries to take (< 1: all)")
    ret_typ = Param(str, "indices", doc="value, indices, mask or both", choices=("value", "indices", "mask", "both"))
    is_ascend = Param(bool, False, doc="take the smallest (else the largest)")
    dtype = Param("dtype", "float32", doc="the dtype of the indices")

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: each ret_typ, an axis, ascending, flattened."""
        from . import _samples

        x = _samples.array((3, 4))
        return [([x], {"k": 2, "ret_typ": "value"}), ([x], {"k": 2}), ([x], {"k": 3, "ret_typ": "both", "axis": 1}),
                ([x], {"k": 2, "ret_typ": "mask", "axis": 0}), ([x], {"k": 2, "ret_typ": "value", "is_ascend": True}),
                ([x], {"k": 3, "ret_typ": "value", "axis": None})]
