"""MXNet's ``contrib`` operators that its sparse tests use, registered under MXNet's table
names (``_contrib_<name>``, reached as ``mx.nd.contrib.<name>``): ``getnnz`` and ``quadratic``.
"""
from __future__ import annotations

import numpy as np

from ..registry import Param, Op, kernel, register
from ._util import T
from .unary import _Elementwise

_BOTH = ("cpu", "gpu")


@register("_contrib_getnnz")
class GetNNZ(Op):
    """The number of stored values of a csr array (as SciPy's ``getnnz``): in all
    (``axis=None``, shape (1,)), per row (``axis=1``) or per column (``axis=0``); int64."""

    trusted = True  # built-in kernels, tested against NumPy/SciPy references

    axis = Param("axis", default=None, doc="None, 0 or 1")
    differentiable = False

    def check_params(self) -> None:
        if self.axis not in (None, 0, 1, -1, -2):
            raise ValueError(f"axis must be None, 0 or 1, got {self.axis}")

    def infer_shape(self, data):
        if len(data) != 2:
            raise ValueError(f"getnnz takes a 2-d csr array, got shape {data}")
        if self.axis is None:
            return [(1,)]
        return [(data[1],) if self.axis % 2 == 0 else (data[0],)]

    def infer_type(self, data):
        return [np.dtype(np.int64)]

    def infer_storage_type(self, data):
        if data != "csr":
            raise TypeError(f"getnnz takes a csr array, got storage type {data!r}")
        return ["default"]

    @kernel(device=_BOTH, stypes=("csr",))
    def sparse(self, ctx, data, out):
        xp = ctx.xp
        if self.axis is None:
            out.data[...] = data.indices.shape[0]
        elif self.axis % 2 == 1:
            out.data[...] = xp.diff(data.indptr)
        else:
            out.data[...] = xp.bincount(data.indices, minlength=data.shape[1])

    def reference(self, data: np.ndarray) -> np.ndarray:
        """NumPy reference for ``opcheck``: the nonzeros counted (the samples store no zeros)."""
        if self.axis is None:
            return np.array([np.count_nonzero(data)], dtype=np.int64)
        return np.count_nonzero(data, axis=self.axis % 2).astype(np.int64)

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: a csr array, each axis."""
        from . import _samples

        x = _samples.array((3, 4), "csr")
        return [([x], {"axis": a}) for a in (None, 0, 1)]


@register("_contrib_quadratic")
class Quadratic(_Elementwise):
    """``a * x**2 + b * x + c`` elementwise (MXNet's ``contrib.quadratic``): a csr input stays
    csr when ``c == 0``; everything else gives a dense result."""

    a = Param(float, default=0.0, doc="coefficient of x**2")
    b = Param(float, default=0.0, doc="coefficient of x")
    c = Param(float, default=0.0, doc="constant term")
    backward_needs_inputs = ("data",)

    def keeps_zero(self) -> bool:
        return self.c == 0

    def infer_storage_type(self, data):
        return ["csr" if data == "csr" and self.c == 0 else "default"]

    def apply(self, xp, x, out):
        w = x if x.dtype.kind == "f" else x.astype(np.float64)
        xp.copyto(out, (self.a * w + self.b) * w + self.c, casting="unsafe")

    def gradient(self, out_grads, inputs, outputs):  # g * (2 a x + b)
        return [T.elemwise_mul(out_grads[0], T._plus_scalar(T._mul_scalar(inputs[0], scalar=2 * self.a),
                                                             scalar=self.b))]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: each storage type with c = 0 and c != 0."""
        from . import _samples

        return [([x], {"a": 0.5, "b": -1.5, "c": c}) for c in (0.0, 2.0) for x in _samples.each_stype((3, 4))]
