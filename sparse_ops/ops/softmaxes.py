"""``softmax``, ``log_softmax`` and ``softmin`` along one axis, with MXNet's ``temperature``
(``softmax(x / t)``; ``softmin`` is ``softmax(-x / t)``).

Dense kernels only, as MXNet 1.9: a sparse input falls back to dense with a
``StorageFallbackWarning`` (``sparse_ops.ops.csr_row_softmax`` is the op over a csr's stored
values). The result has the input dtype unless ``dtype`` names another; float16 is computed in float32.
"""
from __future__ import annotations

import numpy as np

from ..registry import Op, Param, kernel, register
from ._util import T

_BOTH = ("cpu", "gpu")


class _Softmax(Op):
    """Shared rules: one axis, an optional temperature; subclasses set ``sign`` and ``log``."""

    trusted = True  # built-in kernels, tested against NumPy references

    axis = Param(int, -1, doc="the axis the values are normalised along")
    temperature = Param(float, None, doc="divide the input by this first (None: 1)")
    dtype = Param("dtype", None, doc="the result's dtype (None: the input's), computed in the wider of the two",
                  choices=("float16", "float32", "float64"))
    backward_needs_inputs = ()
    backward_needs_outputs = ("output",)
    sign = 1.0
    log = False

    def infer_shape(self, data):
        if not -len(data) <= self.axis < max(len(data), 1) or not data:
            raise ValueError(f"{self._opdef.name}: axis {self.axis} is out of range for shape {tuple(data)} "
                             "(argument axis)")
        return [tuple(data)]

    def infer_type(self, data):
        if data.kind != "f":
            raise TypeError(f"{self._opdef.name} needs a floating point input, got {data} (argument data)")
        return [data if self.dtype is None else np.dtype(self.dtype)]

    def check_params(self):
        if self.temperature is not None and self.temperature == 0:
            raise ValueError(f"{self._opdef.name}: temperature must not be 0")

    def _scale(self) -> float:
        return self.sign / (1.0 if self.temperature is None else self.temperature)

    @kernel(device=_BOTH)
    def dense(self, ctx, data, output):
        if data.size == 0:  # an empty axis (or no rows): nothing to normalise, no max to take
            return
        xp = ctx.xp
        z = data.astype(np.promote_types(np.promote_types(data.dtype, output.dtype), np.float32), copy=False)
        z = z * z.dtype.type(self._scale())
        z = z - xp.max(z, axis=self.axis, keepdims=True)
        e = xp.exp(z)
        s = xp.sum(e, axis=self.axis, keepdims=True)
        output[...] = (z - xp.log(s)) if self.log else (e / s)

    def gradient(self, out_grads, inputs, outputs):
        g, y = out_grads[0], outputs[0]
        if self.log:  # d/dz log_softmax: g - softmax * sum(g)
            dz = T.broadcast_sub(g, T.broadcast_mul(T.exp(y), T.sum(g, axis=self.axis, keepdims=True)))
        else:  # y * (g - sum(g * y))
            dz = T.elemwise_mul(y, T.broadcast_sub(g, T.sum(T.elemwise_mul(g, y), axis=self.axis, keepdims=True)))
        scale = self._scale()
        dz = dz if scale == 1.0 else T._mul_scalar(dz, scalar=scale)
        return [dz if dz.dtype == inputs[0].dtype else T.cast(dz, dtype=inputs[0].dtype)]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: the last and the first axis, a temperature, 3-d, a csr input (fallback)."""
        from . import _samples

        return [([_samples.array((3, 4))], {}), ([_samples.array((3, 4), seed=1)], {"axis": 0}),
                ([_samples.array((2, 3, 2), seed=2)], {"axis": 1, "temperature": 2.0}),
                ([_samples.array((3, 4), seed=4, dtype="float32")], {"dtype": "float64"}),
                ([_samples.array((3, 4), "csr", seed=3)], {})]


@register("softmax")
class Softmax(_Softmax):
    """``exp(x / t)`` normalised to sum to 1 along ``axis``."""


@register("log_softmax")
class LogSoftmax(_Softmax):
    """The logarithm of ``softmax``, computed without forming it (stable for large inputs)."""

    log = True


@register("softmin")
class Softmin(_Softmax):
    """``softmax(-x / t)``: the smallest values get the largest weights."""

    sign = -1.0
