"""Elementwise operators of one array: unary functions (``sqrt``, ``exp``, ``relu``, ``clip``, ...),
scalar operators with MXNet's names (``_plus_scalar``, ``_mul_scalar``, ``_greater_scalar``, ...),
and the dense broadcasting comparisons, ``broadcast_power``/``maximum``/``minimum``. NDArray's
Python operators (``x + y``, ``x * 2``, ``x > 0``, ``x += y``) are in ``methods.py``.

Storage types follow MXNet 1.9: an op keeps a sparse input's storage type when it maps
0 to 0 (``square``, ``sqrt``, ``abs``, ``x * s``, ...; for scalar ops this is decided from
the parameter when the call is planned), and gives a dense result otherwise (``exp``,
``sigmoid``, ``x + s``). Sparse inputs always run one storage-aware kernel: it applies the
function to the stored values only, and either shares the input's index arrays (sparse
result) or writes ``f(0)`` everywhere and scatters the stored results (dense result), so
no sparse input is ever densified first.

The output dtype is the input's dtype: integer arrays are computed (in floating point where
the function needs it) and cast back. As in MXNet, a scalar operand is first cast to the
array's dtype (``int_array * 2.7`` multiplies by 2).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..registry import Op, Param, kernel, register
from ..ndarray import NDArray
from ..sdk import capacity as cap
from ._util import T, row_ids

_BOTH = ("cpu", "gpu")
_WIDER = {np.dtype(np.float16): np.float32}  # sigmoid's working dtype for float16 (ints: float64)
_FLOAT32 = np.dtype(np.float32)

# Transcendental ufuncs whose float32 values are computed in float64 and rounded once:
# NumPy's float32 loops (SIMD) may be an ulp off the C library's correctly rounded expf,
# logf, ... that MXNet calls (exp(1) gives 2.718282 there, expf's 2.7182817 here).
ROUNDED_FROM_FLOAT64 = frozenset({
    np.exp, np.log, np.log1p, np.expm1, np.log2, np.log10, np.tanh, np.sin, np.cos, np.tan, np.arcsin,
    np.arccos, np.arctan, np.sinh, np.cosh, np.arcsinh, np.arccosh, np.arctanh, np.cbrt,
})


def apply_ufunc(ufunc: Any, x: Any, out: Any) -> None:
    """``ufunc(x)`` into ``out`` (cast unsafely), float32 transcendentals rounded from float64."""
    if x.dtype == _FLOAT32 and ufunc in ROUNDED_FROM_FLOAT64:
        ufunc(x, out=out, dtype=np.float64, casting="unsafe")
    else:
        ufunc(x, out=out, casting="unsafe")


# ---- helpers ------------------------------------------------------------------------------------
def _scalar_as(value: float, dtype: np.dtype) -> np.generic:
    """``value`` in ``dtype``, as MXNet's ``DType(scalar)``: truncated (and saturated) for ints."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        with np.errstate(over="ignore"):
            return dtype.type(value)
    info = np.iinfo(dtype)
    if math.isnan(value):
        return dtype.type(0)
    if math.isinf(value):
        return dtype.type(info.max if value > 0 else info.min)
    return dtype.type(min(max(math.trunc(value), info.min), info.max))


# ---- the shared base: one function applied to every value -------------------------------------
def _elementwise_capacity(op: "_Elementwise", out: cap.Stored, data: cap.Stored) -> int:
    """A sparse result has data's structure, except where ``f(0) != 0`` in the output dtype
    alone (a scalar that overflows float16, say): then every entry may be stored."""
    if out.dtype is not None and op.fill_value(np.dtype(out.dtype)) != 0:
        return out.dense_count()
    return data.bound_in(out.stype)


class _Elementwise(Op):
    """An op ``y = f(x)`` applied value by value; subclasses define ``apply`` and ``keeps_zero``.

    Dense inputs run ``apply`` on the whole array. Sparse inputs run ``sparse``, which
    applies ``f`` to the stored values only: the result shares the input's index arrays
    when the output is sparse, and is ``f(0)`` filled then scattered when it is dense.
    """

    trusted = True  # built-in kernels, tested against NumPy/SciPy references
    out_may_alias = True  # value by value (NumPy's ufuncs, which take overlapping out=)

    backward_needs_inputs: tuple[str, ...] = ()
    partition = "rows"  # value by value: any row block on its own (sparse_ops.dask)
    capacity = cap.computed(_elementwise_capacity, "nnz(data) (dense size if f(0) != 0 in the dtype)")

    def apply(self, xp: Any, x: Any, out: Any) -> None:
        """Write ``f(x)`` into ``out`` (``out.dtype`` may differ from ``x.dtype``: cast unsafely)."""
        raise NotImplementedError

    def keeps_zero(self) -> bool:
        """Whether ``f(0) == 0`` for these parameters, so sparse inputs keep their storage type."""
        return False

    def infer_storage_type(self, data: str) -> list[str]:
        return [data if self.keeps_zero() else "default"]

    def fill_value(self, dtype: np.dtype) -> np.generic:
        """``f(0)`` in ``dtype``, computed once on the host and cached per dtype."""
        cache = self.__dict__.setdefault("_fill_values", {})
        value = cache.get(dtype)
        if value is None:
            out = np.empty(1, dtype=dtype)
            with np.errstate(all="ignore"):
                self.apply(np, np.zeros(1, dtype=dtype), out)
            value = cache[dtype] = out[0]
        return value

    @kernel(device=_BOTH)
    def dense(self, ctx, data, output):
        self.apply(ctx.xp, data, output)

    @kernel(device=_BOTH, stypes=[("row_sparse",), ("csr",)])
    def sparse(self, ctx, data, output):
        xp = ctx.xp
        values = xp.empty(data.data.shape, dtype=output.dtype)
        self.apply(xp, data.data, values)
        if output.stype == "default":
            self._fill_and_scatter(data, values, output.data)
        elif self.fill_value(output.dtype) == 0:
            if data.stype == "csr":
                ctx.set_csr(output, values, data.indices, data.indptr)
            else:
                ctx.set_row_sparse(output, values, data.indices)
        else:
            # f(0) != 0 only in this dtype (a scalar truncated to int or overflowed in float16):
            # keep the planned storage type, storing f(0) explicitly wherever it is not zero.
            dense = NDArray(xp.empty(output.shape, dtype=output.dtype), ctx.device)
            self._fill_and_scatter(data, values, dense.data)
            ctx.adopt(output, dense.tostype(output.stype))

    def _fill_and_scatter(self, data: NDArray, values: Any, out: Any) -> None:
        out.fill(self.fill_value(out.dtype))
        if data.stype == "csr":
            out[row_ids(data), data.indices] = values
        else:
            out[data.indices] = values


# ---- unary functions ------------------------------------------------------------------------------
class _Unary(_Elementwise):
    """``f`` is the ufunc ``ufunc``; ``zero_preserving`` says ``f(0) == 0``."""

    ufunc: np.ufunc  # NumPy ufuncs also run on CuPy arrays (``__array_ufunc__``)
    zero_preserving: bool = False

    def keeps_zero(self) -> bool:
        return self.zero_preserving

    def apply(self, xp, x, out):
        apply_ufunc(self.ufunc, x, out)

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: a (3, 4) float64 array as dense, csr (int64 and int32
        indices) and row_sparse, values away from 0 (positive for sqrt and the logs)."""
        from . import _samples

        positive = getattr(cls, "ufunc", None) in (np.sqrt, np.log, np.log1p)
        return ([[x] for x in _samples.each_stype((3, 4), positive=positive)]
                + [[_samples.array((4, 3), "csr", seed=5, positive=positive, index_dtype="int32")]])


@register("negative")
class Negative(_Unary):
    """-x elementwise; keeps the storage type."""

    ufunc, zero_preserving = np.negative, True

    def gradient(self, out_grads, inputs, outputs):
        return [T.negative(out_grads[0])]


@register("abs")
class Abs(_Unary):
    """|x| elementwise; keeps the storage type."""

    ufunc, zero_preserving = np.abs, True
    backward_needs_inputs = ("data",)

    def gradient(self, out_grads, inputs, outputs):
        return [T.elemwise_mul(out_grads[0], T.sign(inputs[0]))]


@register("sign")
class Sign(_Unary):
    """-1, 0 or 1 by the sign of x; keeps the storage type. Its gradient is zero (as in MXNet)."""

    ufunc, zero_preserving = np.sign, True

    def gradient(self, out_grads, inputs, outputs):
        return [T._mul_scalar(out_grads[0], scalar=0.0)]


@register("square")
class Square(_Unary):
    """x * x elementwise; keeps the storage type."""

    ufunc, zero_preserving = np.square, True
    backward_needs_inputs = ("data",)

    def gradient(self, out_grads, inputs, outputs):
        return [T.elemwise_mul(out_grads[0], T._mul_scalar(inputs[0], scalar=2.0))]


@register("sqrt")
class Sqrt(_Unary):
    """Square root elementwise; keeps the storage type."""

    ufunc, zero_preserving = np.sqrt, True
    backward_needs_outputs = ("output",)

    def gradient(self, out_grads, inputs, outputs):
        return [T.elemwise_mul(out_grads[0], T._rdiv_scalar(outputs[0], scalar=0.5))]  # g / (2 sqrt(x))


@register("exp")
class Exp(_Unary):
    """e ** x elementwise; dense result."""

    ufunc = np.exp
    backward_needs_outputs = ("output",)

    def gradient(self, out_grads, inputs, outputs):
        return [T.elemwise_mul(out_grads[0], outputs[0])]


@register("log")
class Log(_Unary):
    """Natural logarithm elementwise; dense result."""

    ufunc = np.log
    backward_needs_inputs = ("data",)

    def gradient(self, out_grads, inputs, outputs):
        return [T.elemwise_div(out_grads[0], inputs[0])]


@register("log1p")
class Log1p(_Unary):
    """log(1 + x) elementwise, accurate near 0; keeps the storage type."""

    ufunc, zero_preserving = np.log1p, True
    backward_needs_inputs = ("data",)

    def gradient(self, out_grads, inputs, outputs):
        return [T.elemwise_div(out_grads[0], T._plus_scalar(inputs[0], scalar=1.0))]


@register("tanh")
class Tanh(_Unary):
    """Hyperbolic tangent elementwise; keeps the storage type."""

    ufunc, zero_preserving = np.tanh, True
    backward_needs_outputs = ("output",)

    def gradient(self, out_grads, inputs, outputs):
        return [T.elemwise_mul(out_grads[0], T._rminus_scalar(T.square(outputs[0]), scalar=1.0))]


@register("relu")
class Relu(_Unary):
    """max(x, 0) elementwise (NaN stays NaN); keeps the storage type."""

    zero_preserving = True
    backward_needs_outputs = ("output",)

    def apply(self, xp, x, out):
        xp.maximum(x, x.dtype.type(0), out=out)

    def gradient(self, out_grads, inputs, outputs):
        # The derivative read off the output y = relu(x) >= 0: sign(y) is 1 where x > 0, 0
        # where x <= 0 and NaN where x is NaN (MXNet's relu_grad), and keeps the storage type.
        return [T.elemwise_mul(out_grads[0], T.sign(outputs[0]))]


@register("sigmoid")
class Sigmoid(_Unary):
    """1 / (1 + e ** -x) elementwise, without overflow for large |x|; dense result."""

    backward_needs_outputs = ("output",)

    def apply(self, xp, x, out):
        w = x if x.dtype.kind == "f" and x.dtype != np.float16 else x.astype(_WIDER.get(x.dtype, np.float64))
        e = xp.exp(-xp.abs(w))  # in (0, 1]: never overflows
        r = 1 / (1 + e)
        xp.copyto(out, xp.where(w >= 0, r, e * r), casting="unsafe")

    def gradient(self, out_grads, inputs, outputs):
        y = outputs[0]
        return [T.elemwise_mul(out_grads[0], T.elemwise_mul(y, T._rminus_scalar(y, scalar=1.0)))]


@register("clip")
class Clip(_Elementwise):
    """x limited to [a_min, a_max]; keeps the storage type when a_min <= 0 <= a_max."""

    a_min = Param(float, doc="lower bound")
    a_max = Param(float, doc="upper bound")
    backward_needs_inputs = ("data",)

    def check_params(self) -> None:
        if not self.a_min <= self.a_max:
            raise ValueError(f"a_min must be <= a_max, got a_min={self.a_min}, a_max={self.a_max}")

    def keeps_zero(self) -> bool:
        return self.a_min <= 0 <= self.a_max

    def apply(self, xp, x, out):
        xp.clip(x, _scalar_as(self.a_min, x.dtype), _scalar_as(self.a_max, x.dtype), out=out)

    def gradient(self, out_grads, inputs, outputs):
        x = inputs[0]
        inside = T.elemwise_mul(T._greater_equal_scalar(x, scalar=self.a_min),
                              T._lesser_equal_scalar(x, scalar=self.a_max))
        return [T.elemwise_mul(out_grads[0], inside)]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: each storage type, bounds keeping and losing sparsity."""
        from . import _samples

        return ([([x], {"a_min": -0.8, "a_max": 0.9}) for x in _samples.each_stype((3, 4))]
                + [([x], {"a_min": 0.7, "a_max": 1.2}) for x in _samples.each_stype((3, 4))])
