"""Reductions: ``sum``, ``mean``, ``norm``, ``square_sum``, and the broadcasts their
gradients need (``broadcast_to``, and the private ``_broadcast_reduced``, ``_div_or_zero``).

Axis semantics follow MXNet: ``axis`` is an int, a tuple or None (None or ``()`` reduce
every axis), negative axes count from the end, ``exclude=True`` reduces the axes *not*
listed. A full reduction gives a 0-d array (NumPy's shape ``()``), or all ones with
``keepdims``. Results keep the input dtype; float16 is accumulated in float32, integers
in int64.

Sparse inputs never get densified: csr reductions read ``indptr``/``indices``/``data``
(numba on the cpu; on a gpu the same segment-sum kernel, over the rows or over the values
grouped by column), row_sparse reductions reduce the stored rows and scatter them into
place. Every output is dense, except ``square_sum`` of a row_sparse input over non-row
axes with ``keepdims=True``, which stays row_sparse (only the stored rows), as MXNet's
``_square_sum`` does.
"""
from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from ..creation import full
from ..ndarray import NDArray
from ..registry import Op, Param, kernel, register
from ..sdk import capacity as cap
from ..tape import is_recording
from ._util import T, is_host, numba_values, row_ids

_BOTH = ("cpu", "gpu")
PLAIN, SQUARE, ABS = 0, 1, 2  # value transforms before summing (kernels/reduce.py uses the same codes)
_NUMBA_DTYPES = frozenset(np.dtype(t) for t in ("float16", "float32", "float64", "int32", "int64"))  # f16 widened
_FLOATS = frozenset(np.dtype(t) for t in ("float32", "float64"))  # what flat_sum takes as it is


# ---- axes and shapes ---------------------------------------------------------------------------
@functools.lru_cache(maxsize=4096)
def reduce_axes(axis: int | tuple[int, ...] | None, ndim: int, exclude: bool = False) -> tuple[int, ...]:
    """The sorted, non-negative axes a reduction over ``axis`` covers on an ``ndim``-d input.

    Raises ValueError for an axis out of range or named twice.
    """
    if axis is None or axis == ():
        return tuple(range(ndim))
    listed = (axis,) if isinstance(axis, int) else tuple(axis)
    axes = []
    for a in listed:
        if not -ndim <= a < ndim:
            valid = f"valid axes are {-ndim}..{ndim - 1}" if ndim else "a 0-d input has no axes"
            raise ValueError(f"axis {a} is out of range for a {ndim}-d input ({valid})")
        axes.append(a % ndim)
    if len(set(axes)) != len(axes):
        raise ValueError(f"axis {axis} names the same axis twice")
    if exclude:
        return tuple(i for i in range(ndim) if i not in axes)
    return tuple(sorted(axes))


def reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    """The shape left after reducing ``axes`` of ``shape``."""
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _count(shape: tuple[int, ...], axes: tuple[int, ...]) -> int:
    return math.prod(shape[a] for a in axes)


# ---- the reduction engine: sums of (transformed) values, in the accumulator dtype ---------------
def acc_dtype(dtype: np.dtype) -> np.dtype:
    """float16 -> float32, other floats keep their dtype, integers -> int64."""
    if dtype.kind == "f":
        return np.dtype(np.float32) if dtype.itemsize < 4 else dtype
    return np.dtype(np.int64)


def _transformed(xp: Any, a: Any, mode: int, acc: np.dtype) -> Any:
    if mode == PLAIN:
        return a
    a = a.astype(acc, copy=False)
    return xp.square(a) if mode == SQUARE else xp.abs(a)


_FLAT_SUM_MIN = 4096  # below this NumPy's sum is as fast (and nothing is compiled)


def _dense_reduce(xp: Any, a: Any, axes: tuple[int, ...], keepdims: bool, mode: int) -> Any:
    acc = acc_dtype(a.dtype)
    if (len(axes) == a.ndim and a.size >= _FLAT_SUM_MIN and xp is np and a.dtype in _FLOATS
            and a.flags.c_contiguous):
        from ..kernels.reduce import flat_sum

        return np.asarray(flat_sum(a.reshape(-1), mode), dtype=acc).reshape(reduced_shape(a.shape, axes, keepdims))
    return xp.sum(_transformed(xp, a, mode, acc), axis=axes, keepdims=keepdims, dtype=acc)


def _csr_reduce(ctx: Any, x: Any, axes: tuple[int, ...], keepdims: bool, mode: int,
                use_numba: bool = True) -> Any:
    """Reduce csr ``x`` over ``axes`` (a subset of (0, 1)) without densifying it."""
    xp = ctx.xp
    rows, cols = x.shape
    acc = acc_dtype(x.dtype)
    if axes == ():
        return _transformed(xp, x.tostype("default").data, mode, acc).astype(acc, copy=False)
    if axes == (0, 1):
        total = xp.sum(_transformed(xp, x.data, mode, acc), dtype=acc)
        return xp.asarray(total).reshape(reduced_shape(x.shape, axes, keepdims))
    data = x.data
    wide = np.dtype(np.float64) if data.dtype.kind == "f" else np.dtype(np.int64)  # the numba kernels' sums
    if use_numba and ctx.device.device_type == "gpu" and data.dtype in _NUMBA_DTYPES:
        # a gpu (or the simulator's): the row kernel the cpu runs, launched there, each
        # segment summed by one thread in order (no atomics: the same sums every run); for
        # column sums the segments are the stored columns, the values grouped by column
        from ..sdk.csr import group_columns, segment_sum

        if axes == (1,):
            sums = segment_sum(ctx, x.indptr, data, xp.zeros(rows, dtype=wide), mode)
        else:
            stored, starts, order = group_columns(ctx, x.indices, cols)
            sums = xp.zeros(cols, dtype=wide)
            sums[stored] = segment_sum(ctx, starts, data[order], xp.zeros(stored.shape[0], dtype=wide), mode)
    elif use_numba and is_host(data) and data.dtype in _NUMBA_DTYPES:
        from ..kernels.reduce import csr_col_sums_chunked, csr_col_sums_into
        from ..sdk.csr import segment_sum

        data = numba_values(data)
        indptr = x.indptr
        if axes == (1,):
            sums = np.zeros(rows, dtype=wide)
            segment_sum(None, indptr, data, sums, mode)
        else:
            chunks = _col_chunks(x.nnz, cols)
            if chunks == 1:  # no parallel region: its start-up costs more than it saves here
                sums = np.zeros(cols, dtype=wide)
                csr_col_sums_into(x.indices, data, int(indptr[0]), int(indptr[-1]), mode, sums)
            else:
                sums = np.zeros((chunks, cols), dtype=wide)
                csr_col_sums_chunked(indptr, x.indices, data, mode, sums)
                sums = sums.sum(axis=0)
    else:  # array-module code (float16, bool): bincount sums in float64
        values = _transformed(xp, data, mode, acc)
        if axes == (1,):
            sums = xp.bincount(row_ids(x), weights=values, minlength=rows)
        else:
            sums = xp.bincount(x.indices, weights=values, minlength=cols)
    return sums.reshape(reduced_shape(x.shape, axes, keepdims))


def _col_chunks(nnz: int, cols: int) -> int:
    """How many partial column sums ``csr_col_sums_chunked`` fills in parallel: one per
    thread while each slice has enough values and the buffers stay small next to them."""
    import numba

    return max(1, min(numba.get_num_threads(), nnz // max(4 * cols, 1 << 18)))


def _rsp_reduce(xp: Any, x: Any, axes: tuple[int, ...], keepdims: bool, mode: int) -> Any:
    """Reduce row_sparse ``x`` over ``axes`` from its stored rows."""
    acc = acc_dtype(x.dtype)
    part = xp.sum(_transformed(xp, x.data, mode, acc), axis=axes, keepdims=keepdims, dtype=acc)
    out_shape = reduced_shape(x.shape, axes, keepdims)
    if 0 in axes:  # summing the stored rows is summing every row
        return xp.asarray(part).reshape(out_shape)
    res = xp.zeros(out_shape, dtype=acc)
    res[x.indices] = part
    return res


def _reduce_any(ctx: Any, x: NDArray, axes: tuple[int, ...], keepdims: bool, mode: int) -> Any:
    xp = ctx.xp
    if x.stype == "csr":
        return _csr_reduce(ctx, x, axes, keepdims, mode)
    if x.stype == "row_sparse":
        return _rsp_reduce(xp, x, axes, keepdims, mode)
    return _dense_reduce(xp, x.data, axes, keepdims, mode)


def _wrapped(xp: Any, total: Any, dtype: np.dtype) -> Any:
    """An integer sum accumulated in int64 brought to the output's integer dtype as C (and
    MXNet, which sums in that dtype) wraps it; other sums as they are."""
    if dtype.kind in "iu":
        return xp.asarray(total).astype(dtype)
    return total


# ---- the operators -------------------------------------------------------------------------------
class _Reduction(Op):
    """Shared rules and kernels: subclasses set ``mode`` (the value transform) and
    ``finish`` (from the accumulated sum to the output values)."""

    trusted = True  # built-in kernels, tested against NumPy/SciPy references

    mode = PLAIN
    exclude = False  # overridden by a Param where the operator takes one
    backward_needs_inputs = ()
    partition = "rows"
    row_combine: str | None = None  # reduced over the rows: "sum" where block results add up

    def axes(self, ndim: int) -> tuple[int, ...]:
        return reduce_axes(self.axis, ndim, self.exclude)

    def partitioning(self, shape):
        """Rows when the row axis is kept; ``row_combine`` when it is reduced."""
        if not shape:
            return None, None
        return ("rows" if 0 not in self.axes(len(shape)) else self.row_combine), None

    def infer_shape(self, shape):
        return [reduced_shape(shape, self.axes(len(shape)), self.keepdims)]

    def finish(self, xp: Any, total: Any, count: int, out: Any) -> None:
        out[...] = _wrapped(xp, total, out.dtype)

    def _run(self, ctx, x: NDArray, out: Any) -> None:
        axes = self.axes(x.ndim)
        self.finish(ctx.xp, _reduce_any(ctx, x, axes, self.keepdims, self.mode), _count(x.shape, axes), out)

    @kernel(device=_BOTH)
    def dense(self, ctx, data, out):
        axes = self.axes(data.ndim)
        self.finish(ctx.xp, _dense_reduce(ctx.xp, data, axes, self.keepdims, self.mode),
                    _count(data.shape, axes), out)

    @kernel(device=_BOTH, stypes=[("csr",), ("row_sparse",)])
    def sparse(self, ctx, data, out):
        self._run(ctx, data, out.data)

    def _spread(self, g: NDArray, shape: tuple[int, ...]) -> NDArray:
        """Head gradient ``g`` (the output's shape) broadcast back to the input ``shape``."""
        axes = self.axes(len(shape))
        if not axes:
            return g
        if g.stype == "default" and not is_recording():
            # A read-only view with zero strides along ``axes``: the gradient rules that
            # consume it read it as they read any array, and the repeated values are never
            # written to memory. Recorded (create_graph), the op keeps the graph.
            keep = _keepdims_shape(g.shape, shape, axes)
            return NDArray(g.device.xp.broadcast_to(g._data.reshape(keep), shape), g.device)
        return T._broadcast_reduced(g, shape=shape, axis=axes)


class _AxisParams(_Reduction):
    axis = Param("axis", None, doc="axis or axes to reduce; None reduces all")
    keepdims = Param(bool, False, doc="keep reduced axes with length 1")
    exclude = Param(bool, False, doc="reduce the axes not listed in axis")

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: each storage type over all axes, rows and columns; keepdims
        and exclude on a dense 3-d array."""
        from . import _samples

        out = [([x], {"axis": axis}) for axis in (None, 0, 1) for x in _samples.each_stype((3, 4))]
        return out + [([_samples.array((2, 3, 2))], {"axis": (0, 2), "keepdims": True}),
                      ([_samples.array((2, 3, 2))], {"axis": 1, "exclude": True})]


@register("sum")
class Sum(_AxisParams):
    """Sum over ``axis`` (MXNet semantics: int, tuple or None; ``exclude`` reduces the other
    axes). csr and row_sparse inputs are summed from their stored values; dense output."""

    row_combine = "sum"

    def gradient(self, out_grads, inputs, outputs):
        return [self._spread(out_grads[0], inputs[0].shape)]


@register("mean")
class Mean(_AxisParams):
    """Mean over ``axis``: the sum divided by the number of reduced entries, implicit zeros
    of sparse inputs included. Integer inputs give the truncated mean; an empty reduction
    gives NaN (0 for integers)."""

    def finish(self, xp, total, count, out):
        if count == 0 and out.dtype.kind != "f":
            out[...] = 0
            return
        with np.errstate(divide="ignore", invalid="ignore"):  # an integer sum wraps first, as MXNet's
            out[...] = xp.true_divide(_wrapped(xp, total, out.dtype), count)

    def gradient(self, out_grads, inputs, outputs):
        g = out_grads[0]
        shape = inputs[0].shape
        count = max(_count(shape, self.axes(len(shape))), 1)
        return [self._spread(T.broadcast_div(g, full((), count, dtype=g.dtype, device=g.device)), shape)]


@register("square_sum")
class SquareSum(_AxisParams):
    """Sum of squares over ``axis`` (MXNet's ``_square_sum``). row_sparse input reduced over
    non-row axes with ``keepdims=True`` gives row_sparse output holding the stored rows only;
    everything else is dense."""

    mode = SQUARE
    backward_needs_inputs = ("data",)
    row_combine = "sum"
    capacity = cap.same_as("data")  # a row_sparse result holds data's stored rows

    def keeps_rows(self) -> bool:
        """Whether a row_sparse input keeps its storage type. Decided from the literal
        axis because storage inference sees no shapes: axes listed as non-negative numbers
        other than 0 (or, with ``exclude``, a list naming 0)."""
        if not self.keepdims or self.axis is None or self.axis == ():
            return False
        listed = (self.axis,) if isinstance(self.axis, int) else self.axis
        return 0 in listed if self.exclude else all(a > 0 for a in listed)

    def infer_storage_type(self, data):
        return ["row_sparse" if data == "row_sparse" and self.keeps_rows() else "default"]

    @kernel(device=_BOTH, stypes=[("csr",), ("row_sparse",)])
    def sparse(self, ctx, data, out):
        if out.stype == "row_sparse":
            xp = ctx.xp
            axes = self.axes(data.ndim)
            part = _dense_reduce(xp, data.data, axes, True, SQUARE)
            ctx.set_row_sparse(out, part.astype(out.dtype, copy=False), data.indices)
        else:
            self._run(ctx, data, out.data)

    def gradient(self, out_grads, inputs, outputs):
        x = inputs[0]
        t = T.elemwise_mul(x, self._spread(out_grads[0], x.shape))
        return [T.elemwise_add(t, t)]


@register("norm")
class Norm(_Reduction):
    """L2 (``ord=2``) or L1 (``ord=1``) norm of the entries over ``axis`` (None: all of them).
    Sparse inputs are reduced from their stored values. The gradient at a zero norm is 0."""

    ord = Param(int, 2, doc="1 or 2", choices=(1, 2))
    axis = Param("axis", None, doc="axis or axes to reduce; None reduces all")
    keepdims = Param(bool, False, doc="keep reduced axes with length 1")
    backward_needs_inputs = ("data",)
    backward_needs_outputs = ("output",)

    @property
    def mode(self) -> int:
        return SQUARE if self.ord == 2 else ABS

    def finish(self, xp, total, count, out):
        out[...] = xp.sqrt(total) if self.ord == 2 else _wrapped(xp, total, out.dtype)

    @kernel(device=_BOTH)
    def dense(self, ctx, data, out):
        self._run(ctx, NDArray(data, ctx.device), out)

    def _run(self, ctx, x: NDArray, out: Any) -> None:
        """The L2 norm as the reduction engine sums squares, unless a square overflowed or
        every square underflowed: then again, each reduced slice on its own terms. Integer,
        float16 and float32 squares always fit float64's range, so they are summed in float64;
        float64 values are scaled by a power of two near their slice's magnitude (exact)
        and the result scaled back, as a scaled nrm2 does."""
        if self.ord != 2:
            return super()._run(ctx, x, out)
        xp, axes = ctx.xp, self.axes(x.ndim)
        if x.dtype.kind != "f":  # integers: squares summed in float64 (int64 ones would wrap), the root truncated
            wide = x._with_values(x.data.astype(np.float64), copy_aux=False)
            out[...] = xp.asarray(xp.sqrt(_reduce_any(ctx, wide, axes, self.keepdims, self.mode))).astype(out.dtype)
            return
        with np.errstate(over="ignore", under="ignore"):  # seen below, and computed again
            total = _reduce_any(ctx, x, axes, self.keepdims, self.mode)
        info = np.finfo(total.dtype)
        values = x.data
        lost = ~xp.isfinite(total) | ((total < info.tiny / info.eps) & (total != 0))
        zero = total == 0
        if bool(xp.any(zero)):  # a zero sum of values not all zero: every square underflowed
            stored = xp.any(values != 0, axis=axes, keepdims=self.keepdims) if x.stype == "default" \
                else xp.any(values != 0)
            lost = lost | (zero & stored)
        if not bool(xp.any(lost)):
            self.finish(xp, total, 0, out)
            return
        if values.dtype.itemsize < 8:
            wide = x._with_values(values.astype(np.float64), copy_aux=False)
            out[...] = xp.sqrt(_reduce_any(ctx, wide, axes, self.keepdims, self.mode))
            return
        scale = self._slice_scales(ctx, x, axes)  # the keepdims shape
        per_value = scale if x.stype == "default" else _at_stored(x, axes, scale)
        scaled = x._with_values(values / per_value, copy_aux=False)
        with np.errstate(over="ignore", under="ignore"):
            total = _reduce_any(ctx, scaled, axes, self.keepdims, self.mode)
        out[...] = xp.sqrt(total) * scale.reshape(total.shape)

    @staticmethod
    def _slice_scales(ctx, x: NDArray, axes: tuple[int, ...]) -> Any:
        """A power of two near the largest magnitude of each reduced slice of float64 ``x``
        (1 where the slice is zero or not finite: its plain sum says so), in the keepdims
        shape."""
        xp = ctx.xp
        largest = _slice_max(xp, x, axes)
        usable = xp.isfinite(largest) & (largest > 0)
        return xp.where(usable, 2.0 ** xp.floor(xp.log2(xp.where(usable, largest, 1.0))), 1.0)

    def gradient(self, out_grads, inputs, outputs):
        x, g = inputs[0], out_grads[0]
        if self.ord == 2:
            return [T.elemwise_mul(x, self._spread(T._div_or_zero(g, outputs[0]), x.shape))]
        return [T.elemwise_mul(T.sign(x), self._spread(g, x.shape))]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: L2 and L1 norms of each storage type over all axes, rows and columns."""
        from . import _samples

        return [([x], {"axis": axis, "ord": o}) for o in (2, 1) for axis in (None, 0, 1)
                for x in _samples.each_stype((3, 4))]


def _slice_max(xp: Any, x: NDArray, axes: tuple[int, ...]) -> Any:
    """The largest magnitude of each slice of ``x`` that reducing ``axes`` leaves, in the
    keepdims shape (0 for a slice with no stored value)."""
    magnitude = xp.abs(x.data)
    if x.stype == "default":
        return xp.max(magnitude, axis=axes, keepdims=True)
    largest = xp.zeros(reduced_shape(x.shape, axes, True), dtype=magnitude.dtype)
    if x.stype == "csr":
        none = xp.zeros_like(x.indices)  # the one slice of a reduced axis
        xp.maximum.at(largest, (row_ids(x) if 0 not in axes else none, x.indices if 1 not in axes else none),
                      magnitude)
        return largest
    rows = xp.max(magnitude, axis=tuple(a for a in axes if a), keepdims=True)  # row_sparse: each stored row
    if 0 in axes:
        return xp.maximum(largest, xp.max(rows, axis=0, keepdims=True)) if rows.shape[0] else largest
    largest[x.indices] = rows
    return largest


def _at_stored(x: NDArray, axes: tuple[int, ...], per_slice: Any) -> Any:
    """``per_slice`` (one value a reduced slice of sparse ``x``, the keepdims shape) at each
    stored value of ``x``, shaped to divide its values."""
    if x.stype == "csr":
        return per_slice[row_ids(x) if 0 not in axes else 0, x.indices if 1 not in axes else 0]
    return per_slice[x.indices] if 0 not in axes else per_slice  # row_sparse: rows, broadcast the rest


# ---- broadcasts (the reductions' gradients) --------------------------------------------------------
def _keepdims_shape(data_shape: tuple[int, ...], shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple:
    if len(data_shape) == len(shape):
        return data_shape
    return reduced_shape(shape, axes, True)


@register("_broadcast_reduced")
class BroadcastReduced(Op):
    """The inverse of a reduction's shape change: ``data``, the result of reducing ``axis`` of
    an array of ``shape`` (with or without keepdims), repeated along ``axis`` to ``shape``.
    A row_sparse input stays row_sparse when the row axis was not reduced."""

    trusted = True  # built-in kernels, tested against NumPy/SciPy references

    shape = Param("shape", doc="the shape before the reduction")
    axis = Param("shape", doc="the reduced axes, non-negative")
    backward_needs_inputs = ()
    capacity = cap.same_as("data")  # a row_sparse result holds data's stored rows

    def infer_shape(self, data):
        if any(not 0 <= a < len(self.shape) for a in self.axis):
            raise ValueError(f"axes {self.axis} are not all axes of shape {self.shape}")
        if reduced_shape(self.shape, self.axis, len(data) == len(self.shape)) != tuple(data):
            raise ValueError(f"an array of shape {data} is not shape {self.shape} reduced over axes {self.axis}")
        return [self.shape]

    def infer_storage_type(self, data):
        return ["row_sparse" if data == "row_sparse" and 0 not in self.axis else "default"]

    @kernel(device=_BOTH)
    def dense(self, ctx, data, out):
        out[...] = data.reshape(_keepdims_shape(data.shape, self.shape, self.axis))

    @kernel(device=_BOTH, stypes=("row_sparse",))
    def rsp(self, ctx, data, out):
        if out.stype == "default":
            out.data[...] = data.tostype("default").data.reshape(
                _keepdims_shape(data.shape, self.shape, self.axis))
            return
        values = data.data
        rows = values.shape[0]
        values = values.reshape((rows, *_keepdims_shape(data.shape, self.shape, self.axis)[1:]))
        spread = ctx.xp.empty((rows, *self.shape[1:]), dtype=out.dtype)
        spread[...] = values
        ctx.set_row_sparse(out, spread, data.indices)

    def gradient(self, out_grads, inputs, outputs):
        g = out_grads[0]
        if not self.axis:
            return [g]
        return [T.sum(g, axis=self.axis, keepdims=inputs[0].ndim == len(self.shape))]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: dense and row_sparse results of reducing the last axis (with
        and without keepdims), a dense one of reducing the first."""
        from . import _samples

        return ([([x], {"shape": (3, 4, 2), "axis": (2,)}) for x in _samples.each_stype((3, 4), ("default", "row_sparse"))]
                + [([_samples.array((3, 4, 1))], {"shape": (3, 4, 2), "axis": (2,)}),
                   ([_samples.array((4, 2))], {"shape": (3, 4, 2), "axis": (0,)})])


@register("_div_or_zero")
class DivOrZero(Op):
    """lhs / rhs where rhs is not 0, else 0 (same shapes, dense): the L2 norm's gradient
    g / norm, which is 0 rather than NaN at a zero norm."""

    trusted = True  # built-in kernels, tested against NumPy/SciPy references

    arguments = ("lhs", "rhs")
    backward_needs_inputs = ("lhs", "rhs")

    @kernel(device=_BOTH)
    def dense(self, ctx, lhs, rhs, out):
        xp = ctx.xp
        zero = rhs == 0
        xp.divide(lhs, xp.where(zero, 1, rhs), out=out, casting="unsafe")
        out[zero] = 0

    def gradient(self, out_grads, inputs, outputs):
        h = out_grads[0]
        lhs, rhs = inputs
        return [T._div_or_zero(h, rhs), T.negative(T._div_or_zero(T._div_or_zero(T.elemwise_mul(h, lhs), rhs), rhs))]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: nonzero divisors (at a zero divisor the op jumps, so finite
        differences do not apply; norm's samples with an empty row run that case)."""
        from . import _samples

        return _samples.by_stypes([("default", "default")], [(3, 4), (3, 4)])
