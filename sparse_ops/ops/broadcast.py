"""Broadcasting operators of two arrays (NumPy's broadcasting rules): arithmetic
(``broadcast_add``/``sub``/``mul``/``div``/``power``/``hypot``/``maximum``/``minimum``), comparisons
(``broadcast_equal``, ``broadcast_greater``, ... giving 1/0 in the promoted dtype), and
``broadcast_to``. Their gradients sum the broadcast axes back (``sum_to_shape``).
"""
from __future__ import annotations

import numpy as np

from ..ndarray import NDArray
from ..registry import Op, Param, applies_ufunc, kernel, register
from ..sdk import capacity as cap
from ..storage import cast_storage as _cast_storage
from ._util import T, broadcast_shape, float_math, row_ids, sum_to_shape
from .elemwise import _Binary
from .shape import _norm_axes

_BOTH = ("cpu", "gpu")


# ---- broadcasting (dense) --------------------------------------------------------------------------
class _Broadcast(_Binary):
    backward_needs_inputs = ("lhs", "rhs")

    def infer_shape(self, lhs, rhs):
        return [broadcast_shape(lhs, rhs)]

    def partitioning(self, lhs, rhs):
        """Row-separable along the output's first axis: operands spanning it are cut into
        row blocks, those broadcast along it (fewer axes, or length 1) go whole."""
        out = broadcast_shape(lhs, rhs)
        if not out:
            return None, None
        spans = tuple(name for name, s in zip(self._opdef.arguments, (lhs, rhs))
                      if len(s) == len(out) and s[0] == out[0])
        return "rows", spans

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: (3, 4) with (1, 4), (3, 1) with (3, 4), and equal shapes."""
        from . import _samples

        sig = [("default", "default")]
        return (_samples.by_stypes(sig, [(3, 4), (1, 4)], positive=(True, False))
                + _samples.by_stypes(sig, [(3, 1), (3, 4)], positive=(True, False))
                + _samples.by_stypes(sig, [(2, 3), (2, 3)], positive=(True, False)))


@register("broadcast_add")
class BroadcastAdd(_Broadcast):
    """lhs + rhs with NumPy broadcasting (dense)."""

    backward_needs_inputs = ()

    ufunc = np.add

    def gradient(self, out_grads, inputs, outputs):
        g = out_grads[0]
        return [sum_to_shape(g, inputs[0].shape), sum_to_shape(g, inputs[1].shape)]


@register("broadcast_sub")
class BroadcastSub(_Broadcast):
    """lhs - rhs with NumPy broadcasting (dense)."""

    backward_needs_inputs = ()

    ufunc = np.subtract

    def gradient(self, out_grads, inputs, outputs):
        g = out_grads[0]
        return [sum_to_shape(g, inputs[0].shape), sum_to_shape(T.negative(g), inputs[1].shape)]


class _ScalesCsr(_Broadcast):
    """A product or quotient whose csr ``lhs`` keeps its structure (MXNet 1.9's
    ``broadcast_mul`` / ``broadcast_div`` of a csr by a dense array): only the stored
    values are computed, each with the dense value broadcast to its place (a scalar, a row
    vector, a column vector or an array of the csr's shape), so the result is a csr and the
    places not stored stay 0 whatever the dense array holds there (no ``0 * inf``)."""

    capacity = cap.computed(lambda op, out, lhs, rhs: lhs.bound_in(out.stype) if tuple(lhs.shape) == tuple(out.shape)
                            else out.dense_count(), "nnz(lhs) (dense size where the csr itself broadcasts)")

    def infer_storage_type(self, lhs, rhs):
        return ["csr" if lhs == "csr" and rhs == "default" else "default"]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: the dense ones, and a csr by a row vector, a column vector and
        an array of its shape."""
        from . import _samples

        sig = [("csr", "default")]
        return (super().samples() + _samples.by_stypes(sig, [(3, 4), (1, 4)], positive=(True, True))
                + _samples.by_stypes(sig, [(3, 4), (3, 1)], positive=(True, True))
                + _samples.by_stypes(sig, [(3, 4), (3, 4)], positive=(True, True)))

    @kernel(device=_BOTH, stypes=("csr", "default"))
    def csr_dense(self, ctx, lhs, rhs, out):
        xp, b = ctx.xp, rhs.data
        if out.shape != lhs.shape:  # the csr itself is broadcast (one row or column repeated, or to more axes)
            dense = out.data if out.stype == "default" else xp.empty(out.shape, dtype=out.dtype)
            with np.errstate(divide="ignore", invalid="ignore"):
                self.ufunc(_cast_storage(lhs, "default").data, b, out=dense, casting="unsafe")
            if out.stype != "default":
                ctx.adopt(out, _cast_storage(NDArray(dense, ctx.device), "csr"))
            return
        b = b.reshape((1,) * (2 - b.ndim) + b.shape)
        rows = row_ids(lhs) if b.shape[0] != 1 else 0
        cols = lhs.indices if b.shape[1] != 1 else 0
        values = xp.empty(lhs.data.shape, dtype=out.dtype)
        with np.errstate(divide="ignore", invalid="ignore"):
            self.ufunc(lhs.data, b[rows, cols], out=values, casting="unsafe")
        ctx.set_csr(out, values, lhs.indices, lhs.indptr)


def _times(a: NDArray, b: NDArray) -> NDArray:
    """``a * b`` in a gradient, storage-aware where it can be: ``elemwise_mul`` for equal
    shapes (every storage pair), else ``broadcast_mul`` with a csr operand first."""
    if a.shape == b.shape:
        return T.elemwise_mul(a, b)
    return T.broadcast_mul(b, a) if b.stype == "csr" else T.broadcast_mul(a, b)


@register("broadcast_mul")
class BroadcastMul(_ScalesCsr):
    """lhs * rhs with NumPy broadcasting; a csr lhs times a dense rhs is a csr (``_ScalesCsr``)."""

    ufunc = np.multiply

    def gradient(self, out_grads, inputs, outputs):
        g = out_grads[0]
        lhs, rhs = inputs
        return [sum_to_shape(_times(g, rhs), lhs.shape), sum_to_shape(_times(g, lhs), rhs.shape)]


@register("broadcast_div")
class BroadcastDiv(_ScalesCsr):
    """lhs / rhs with NumPy broadcasting; a csr lhs over a dense rhs is a csr (``_ScalesCsr``)."""

    ufunc = np.true_divide

    @kernel(device=_BOTH)
    def dense(self, ctx, lhs, rhs, out):
        ctx.xp.divide(lhs, rhs, out=out, casting="unsafe")

    def gradient(self, out_grads, inputs, outputs):
        g = out_grads[0]
        lhs, rhs = inputs
        dl = T.broadcast_div(g, rhs)
        dr = T.negative(T.broadcast_div(_times(g, lhs), T.square(rhs)))
        return [sum_to_shape(dl, lhs.shape), sum_to_shape(dr, rhs.shape)]


# ---- broadcasting array-array operators (dense) ----------------------------------------------------
class _BroadcastCompare(_Broadcast):
    """1 where ``lhs ∘ rhs`` holds, else 0, in the inputs' dtype, with NumPy broadcasting.
    Piecewise constant: zero gradients."""

    backward_needs_inputs = ()

    def gradient(self, out_grads, inputs, outputs):
        zero = T._mul_scalar(out_grads[0], scalar=0.0)
        return [sum_to_shape(zero, inputs[0].shape), sum_to_shape(zero, inputs[1].shape)]


@register("broadcast_equal")
class BroadcastEqual(_BroadcastCompare):
    """lhs == rhs as 1/0 with NumPy broadcasting (dense)."""

    ufunc = np.equal


@register("broadcast_not_equal")
class BroadcastNotEqual(_BroadcastCompare):
    """lhs != rhs as 1/0 with NumPy broadcasting (dense)."""

    ufunc = np.not_equal


@register("broadcast_greater")
class BroadcastGreater(_BroadcastCompare):
    """lhs > rhs as 1/0 with NumPy broadcasting (dense)."""

    ufunc = np.greater


@register("broadcast_greater_equal")
class BroadcastGreaterEqual(_BroadcastCompare):
    """lhs >= rhs as 1/0 with NumPy broadcasting (dense)."""

    ufunc = np.greater_equal


@register("broadcast_lesser")
class BroadcastLesser(_BroadcastCompare):
    """lhs < rhs as 1/0 with NumPy broadcasting (dense)."""

    ufunc = np.less


@register("broadcast_lesser_equal")
class BroadcastLesserEqual(_BroadcastCompare):
    """lhs <= rhs as 1/0 with NumPy broadcasting (dense)."""

    ufunc = np.less_equal


class _FloatMath(_Broadcast):
    """A broadcasting function whose integer inputs are computed in float64 and cast back to
    the result's dtype (``float_ufunc``: the name of NumPy's and CuPy's function); its
    gradient reads the output."""

    backward_needs_outputs = ("output",)
    float_ufunc: str

    @kernel(device=_BOTH)
    def dense(self, ctx, lhs, rhs, out):
        getattr(ctx.xp, self.float_ufunc)(lhs, rhs, out=out, dtype=float_math(lhs.dtype), casting="unsafe")


@register("broadcast_power")
class BroadcastPower(_FloatMath):
    """lhs ** rhs with NumPy broadcasting (dense); integer inputs are computed in float64."""

    float_ufunc = "power"

    def gradient(self, out_grads, inputs, outputs):
        g, (lhs, rhs), y = out_grads[0], inputs, outputs[0]
        dl = T.broadcast_mul(g, T.broadcast_mul(rhs, T.broadcast_power(lhs, T._minus_scalar(rhs, scalar=1.0))))
        dr = T.broadcast_mul(T.broadcast_mul(g, y), T.log(lhs))
        return [sum_to_shape(dl, lhs.shape), sum_to_shape(dr, rhs.shape)]


@register("broadcast_hypot")
class BroadcastHypot(_FloatMath):
    """sqrt(lhs ** 2 + rhs ** 2) with NumPy broadcasting (dense), without the overflow of the
    squares; integer inputs are computed in float64 and cast back, as MXNet casts them."""

    float_ufunc = "hypot"

    def gradient(self, out_grads, inputs, outputs):
        g, (lhs, rhs), y = out_grads[0], inputs, outputs[0]
        scaled = T.broadcast_div(g, y)  # d hypot / d lhs = lhs / hypot (NaN at the origin, as MXNet's)
        return [sum_to_shape(T.broadcast_mul(scaled, lhs), lhs.shape),
                sum_to_shape(T.broadcast_mul(scaled, rhs), rhs.shape)]


class _Extremum(_Broadcast):
    """maximum / minimum. The gradient goes where the picked input wins (``lhs_wins`` and
    ``rhs_wins`` name the comparison ops; ties go to lhs). NumPy deprecates these ufuncs'
    output as a positional argument, hence their own dense kernel."""

    lhs_wins: str
    rhs_wins: str

    @kernel(device=_BOTH)
    @applies_ufunc
    def dense(self, ctx, lhs, rhs, out):
        self.ufunc(lhs, rhs, out=out)

    def gradient(self, out_grads, inputs, outputs):
        g, (lhs, rhs) = out_grads[0], inputs
        return [sum_to_shape(T.broadcast_mul(g, getattr(T, self.lhs_wins)(lhs, rhs)), lhs.shape),
                sum_to_shape(T.broadcast_mul(g, getattr(T, self.rhs_wins)(lhs, rhs)), rhs.shape)]


@register("broadcast_maximum")
class BroadcastMaximum(_Extremum):
    """max(lhs, rhs) with NumPy broadcasting (dense); ties send the gradient to lhs."""

    ufunc = np.maximum
    lhs_wins, rhs_wins = "broadcast_greater_equal", "broadcast_lesser"


@register("broadcast_minimum")
class BroadcastMinimum(_Extremum):
    """min(lhs, rhs) with NumPy broadcasting (dense); ties send the gradient to lhs."""

    ufunc = np.minimum
    lhs_wins, rhs_wins = "broadcast_lesser_equal", "broadcast_greater"


# ---- broadcast_to ------------------------------------------------------------------------------
@register("broadcast_to")
class BroadcastTo(Op):
    """``data`` repeated to ``shape``: axes of length 1 stretch, a 0 in ``shape`` keeps the
    input's length, and missing leading axes are added (NumPy's rule). Dense."""

    trusted = True  # built-in kernels, tested against NumPy/SciPy references

    shape = Param("shape", doc="the target shape")
    backward_needs_inputs = ()

    def infer_shape(self, data):
        lead = len(self.shape) - len(data)
        if lead < 0:
            raise ValueError(f"cannot broadcast shape {data} to the shorter shape {self.shape}")
        target = list(self.shape)
        for i, d in enumerate(data):
            t = target[lead + i]
            if t == 0:
                target[lead + i] = d
            elif d != t and d != 1:
                raise ValueError(f"cannot broadcast shape {data} to {self.shape}: axis {lead + i} has "
                                 f"length {d}, neither 1 nor {t}")
        return [tuple(target)]

    @kernel(device=_BOTH)
    def dense(self, ctx, data, out):
        out[...] = data

    def gradient(self, out_grads, inputs, outputs):
        g = out_grads[0]
        in_shape = inputs[0].shape
        lead = g.ndim - len(in_shape)
        stretched = tuple(lead + i for i, d in enumerate(in_shape) if d == 1 and g.shape[lead + i] != 1)
        if stretched:
            g = T.sum(g, axis=stretched, keepdims=True)
        if lead:
            g = T.sum(g, axis=tuple(range(lead)), keepdims=False)
        return [g]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: a column and a row broadcast to (3, 4), new leading axes."""
        from . import _samples

        return [([_samples.array((3, 1))], {"shape": (3, 4)}), ([_samples.array((1, 4))], {"shape": (3, 4)}),
                ([_samples.array((4,))], {"shape": (2, 3, 4)})]


@register("broadcast_like")
class BroadcastLike(Op):
    """``lhs`` broadcast to the shape of ``rhs`` (MXNet's ``broadcast_like``): with
    ``lhs_axes``/``rhs_axes``, only those axes of lhs take the lengths of those axes of rhs.
    Axes that stretch must have length 1. Dense result (sparse inputs run the fallback, as
    in MXNet 1.9); ``rhs`` gives only its shape (no gradient flows to it)."""

    trusted = True  # built-in kernels, tested against NumPy/SciPy references

    arguments = ("lhs", "rhs")
    lhs_axes = Param("shape", default=None, doc="axes of lhs to stretch (default: all)")
    rhs_axes = Param("shape", default=None, doc="axes of rhs giving the lengths (default: all)")
    backward_needs_inputs = ()

    def infer_type(self, lhs, rhs):
        return [lhs]  # rhs gives only its shape: any dtype (MXNet's rule)

    def infer_shape(self, lhs, rhs):
        if self.lhs_axes is None and self.rhs_axes is None:
            target = list(rhs)
            if len(lhs) != len(rhs):
                raise ValueError(f"broadcast_like: lhs has {len(lhs)} axes, rhs {len(rhs)}; they must agree")
            pairs = list(zip(range(len(lhs)), range(len(rhs))))
        else:
            la, ra = tuple(self.lhs_axes or ()), tuple(self.rhs_axes or ())
            if len(la) != len(ra) or not la:
                raise ValueError(f"broadcast_like: lhs_axes {la} and rhs_axes {ra} must be non-empty and of one length")
            pairs = list(zip(_norm_axes(la, len(lhs), "lhs_axes"), _norm_axes(ra, len(rhs), "rhs_axes")))
            target = list(lhs)
            for a, b in pairs:
                target[a] = rhs[b]
        for a, b in pairs:
            if lhs[a] != rhs[b] and lhs[a] != 1:
                raise ValueError(f"broadcast_like: axis {a} of lhs has length {lhs[a]}, neither 1 nor {rhs[b]}")
        return [tuple(target)]

    @kernel(device=_BOTH)
    def dense(self, ctx, lhs, rhs, out):
        out[...] = lhs

    def gradient(self, out_grads, inputs, outputs):
        g = out_grads[0]
        stretched = tuple(i for i, d in enumerate(inputs[0].shape) if d == 1 and g.shape[i] != 1)
        if stretched:
            g = T.sum(g, axis=stretched, keepdims=True)
        return [g, None]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: a column and a row stretched like (3, 4), chosen axes only,
        and a csr lhs (fallback)."""
        from . import _samples

        return [[_samples.array((3, 1)), _samples.array((3, 4), seed=1)],
                [_samples.array((1, 4)), _samples.array((3, 4), seed=1)],
                ([_samples.array((1, 4)), _samples.array((2, 5), seed=1)], {"lhs_axes": (0,), "rhs_axes": (0,)}),
                [_samples.array((1, 4), "csr"), _samples.array((3, 4), seed=1)]]
