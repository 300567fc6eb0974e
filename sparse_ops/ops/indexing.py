"""Indexing operators: ``slice``, ``slice_axis``, ``take``, ``where`` and the slice
assignments ``_slice_assign``/``_slice_assign_scalar`` (MXNet names and semantics), and the
scatters of their gradients, ``_backward_slice`` and ``_backward_take`` (operators, so
gradients are recorded like any other call).

Output storage types follow MXNet 1.9: ``slice``/``slice_axis`` of a csr (step 1) stay csr,
and so does ``take`` of csr rows (axis 0, clip or wrap); everything else is dense.
"""
from __future__ import annotations

import builtins
import operator
from typing import Any, Sequence

import numpy as np

from ..dtypes import require_one_dtype
from ..errors import OperatorError
from ..registry import Op, Param, kernel, register
from ..sdk import capacity as cap
from ..sdk import csr as sdk_csr
from ..storage import cast_storage as _cast_storage
from ..storage import densify_into
from ._util import T, int_ids, refuse_nonfinite_ids
from .shape import _norm_axis, _prod

_BOTH = ("cpu", "gpu")
_pyslice = builtins.slice  # this module defines an operator class named ``Slice``; keep Python's


class TakeIndexError(OperatorError, IndexError):
    """``take(..., mode="raise")`` met an index outside the axis."""


# ---- parameter parsing and slice ranges ------------------------------------------------------------
def _opt_int(v: Any) -> int | None:
    """An int, or None (also spelled ``"None"``)."""
    if v is None or (isinstance(v, str) and v.strip() in ("None", "")):
        return None
    if isinstance(v, (bool, np.bool_)):
        raise ValueError(f"expected an int or None, got {v!r}")
    if isinstance(v, str):
        return int(v)
    if isinstance(v, (float, np.floating)):
        if not float(v).is_integer():
            raise ValueError(f"expected an int or None, got {v!r}")
        return int(v)
    return operator.index(v)


def _opt_ints(v: Any) -> tuple[int | None, ...]:
    """A tuple of ints and Nones, from a sequence, an int or a string such as ``"(1, None)"``."""
    if v is None:
        return ()
    if isinstance(v, str):
        parts = [p.strip() for p in v.strip().strip("()[]").split(",")]
        return tuple(_opt_int(p) for p in parts if p)
    if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
        return (int(v),)
    return tuple(_opt_int(p) for p in v)


def _slice_ranges(shape: Sequence[int], begin: Sequence[int | None], end: Sequence[int | None],
                  step: Sequence[int | None]) -> tuple[tuple[int, int, int], ...]:
    """Normalised ``(begin, end, step)`` per axis under MXNet's rules: None takes the
    default for the step's direction, negative values count from the end, a range outside
    the axis or running against the step is an error. ``end == -1`` means "through index 0"
    for a negative step. Unlike MXNet, ``begin == end`` gives an empty axis."""
    nd = len(shape)
    if len(begin) != len(end):
        raise ValueError(f"begin {tuple(begin)} and end {tuple(end)} must have the same length")
    if len(begin) > nd:
        raise ValueError(f"begin {tuple(begin)} has more entries than the data has axes ({nd})")
    if step and len(step) != len(begin):
        raise ValueError(f"step {tuple(step)} and begin {tuple(begin)} must have the same length")
    ranges = []
    for i, n in enumerate(shape):
        if i >= len(begin):
            ranges.append((0, n, 1))
            continue
        s = step[i] if step and step[i] is not None else 1
        if s == 0:
            raise ValueError(f"step[{i}] cannot be 0")
        if n == 0:
            ranges.append((0, 0, s))
            continue
        b, e = begin[i], end[i]
        b = (n - 1 if s < 0 else 0) if b is None else (b + n if b < 0 else b)
        e = (-1 if s < 0 else n) if e is None else (e + n if e < 0 else e)
        lo = 0 if s > 0 else -1
        if not 0 <= b <= n - (s < 0):
            raise ValueError(f"begin[{i}]={begin[i]} is out of range for axis {i} of length {n}")
        if not lo <= e <= n:
            raise ValueError(f"end[{i}]={end[i]} is out of range for axis {i} of length {n}")
        if (s > 0 and b > e) or (s < 0 and b < e):
            raise ValueError(
                f"slicing axis {i} from begin={begin[i]} to end={end[i]} with step {s} is invalid "
                f"(begin must be {'<=' if s > 0 else '>='} end)")
        ranges.append((b, e, s))
    return tuple(ranges)


def _range_len(r: tuple[int, int, int]) -> int:
    b, e, s = r
    return max(0, (e - b + s - 1) // s) if s > 0 else max(0, (b - e - s - 1) // (-s))


def _range_key(ranges: Sequence[tuple[int, int, int]]) -> tuple:
    return tuple(_pyslice(b, e if e >= 0 else None, s) for b, e, s in ranges)


def _csr_slice(ctx, x, rows: tuple[int, int], cols: tuple[int, int], out) -> None:
    """Rows ``rows[0]:rows[1]`` (zero-copy, the container's own row slice) and, when narrower
    than the matrix, columns ``cols[0]:cols[1]`` (the stored values in range, shifted)."""
    sub = x[rows[0]:rows[1]]
    cb, ce = cols
    if cb == 0 and ce == x.shape[1]:
        ctx.set_csr(out, sub.data, sub.indices, sub.indptr)
        return
    xp = ctx.xp
    idt = sub.indptr.dtype
    cb, ce = np.int64(cb), np.int64(ce)  # (bounds past int32 compare with int32 indices in int64)
    keep = (sub.indices >= cb) & (sub.indices < ce)
    kept_before = xp.zeros(keep.shape[0] + 1, dtype=idt)
    xp.cumsum(keep, out=kept_before[1:])
    indptr = kept_before[sub.indptr]
    indices = (sub.indices[keep] - cb).astype(idt, copy=False)
    ctx.set_csr(out, sub.data[keep], indices, indptr)


# ---- slicing ------------------------------------------------------------------------------------------
def _rows_in_range(xp: Any, rows: Any, r: tuple[int, int, int]) -> tuple[Any, Any]:
    """(positions in ``rows`` of the row ids inside the range ``r`` = (begin, end, step), their
    rows in the sliced result): which stored rows of a row_sparse array a slice keeps."""
    b, e, s = r
    off = rows.astype(np.int64) - b
    inside = (off >= 0) & (rows < e) if s > 0 else (off <= 0) & (rows > e)
    kept = xp.nonzero(inside & (off % s == 0))[0]
    return kept, off[kept] // s


def _row_sparse_input(x: Any) -> bool:
    """Whether a gradient rule's input was row_sparse: its gradient then stays row_sparse
    where only some rows get one (a hashed table's gradient is never its dense size)."""
    return x.stype == "row_sparse" and len(x.shape) > 0


class _SliceBase(Op):
    """What ``slice`` and ``slice_axis`` share: kernels driven by ``_ranges(shape)``."""

    trusted = True  # built-in kernels, tested against NumPy/SciPy references

    backward_needs_inputs = ()
    capacity = cap.same_as("data")  # a csr slice keeps the stored values inside it

    def _ranges(self, shape: Sequence[int]) -> tuple[tuple[int, int, int], ...]:
        raise NotImplementedError

    def infer_shape(self, data):
        return [tuple(_range_len(r) for r in self._ranges(data))]

    @kernel(device=_BOTH)
    def dense(self, ctx, data, out):
        out[...] = data[_range_key(self._ranges(data.shape))]

    @kernel(device=_BOTH, stypes=("csr",))
    def csr(self, ctx, data, out):
        ranges = self._ranges(data.shape)
        if out.stype == "csr":
            _csr_slice(ctx, data, ranges[0][:2], ranges[1][:2], out)
        else:  # a stepped slice: dense result
            out.data[...] = _cast_storage(data, "default").data[_range_key(ranges)]

    @kernel(device=_BOTH, stypes=("row_sparse",))
    def row_sparse(self, ctx, data, out):
        """The stored rows inside the range read where they are (a hashed table is never
        densified); the rows it does not store are zero."""
        ranges = self._ranges(data.shape)
        out.data[...] = 0
        kept, at = _rows_in_range(ctx.xp, data.indices, ranges[0])
        if kept.shape[0]:
            out.data[at] = data.data[kept][(slice(None),) + _range_key(ranges[1:])]


@register("slice")
class Slice(_SliceBase):
    """``data[begin:end:step]`` over the leading ``len(begin)`` axes (MXNet's ``slice``: None
    entries take the default, negative values count from the end, out-of-range bounds are
    errors). A csr input with unit steps gives a csr: the row range is zero-copy, a column
    range keeps the stored values inside it."""

    begin = Param(_opt_ints, doc="first index per axis (None: from the start)")
    end = Param(_opt_ints, doc="stop index per axis, exclusive (None: to the end)")
    step = Param(_opt_ints, (), doc="step per axis (None or omitted: 1)")

    def _ranges(self, shape):
        return _slice_ranges(shape, self.begin, self.end, self.step)

    def infer_storage_type(self, data):
        unit = all(s in (None, 1) for s in self.step)
        return ["csr" if data == "csr" and unit else "default"]

    def gradient(self, out_grads, inputs, outputs):
        return [T._backward_slice(out_grads[0], begin=self.begin, end=self.end, step=self.step,
                                shape=inputs[0].shape, sparse_grad=_row_sparse_input(inputs[0]))]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: dense, csr and row_sparse (its stored rows), a plain and a stepped range."""
        from . import _samples

        out = [([x], {"begin": (1, 0), "end": (3, 3)}) for x in _samples.each_stype((4, 5))]
        out += [([x], {"begin": (0, 1), "end": (4, 5), "step": (2, 2)}) for x in _samples.each_stype((4, 5), seed=2)]
        return out


@register("slice_axis")
class SliceAxis(_SliceBase):
    """``data`` restricted to ``begin:end`` along ``axis`` (``end=None``: to the end); a csr
    input gives a csr."""

    axis = Param(int, doc="the axis to slice")
    begin = Param(int, doc="first index (negative counts from the end)")
    end = Param(_opt_int, optional=True, doc="stop index, exclusive (None: to the end)")

    def _tuples(self, ndim: int) -> tuple[tuple, tuple]:
        a = _norm_axis(self.axis, ndim)
        return (None,) * a + (self.begin,), (None,) * a + (self.end,)

    def _ranges(self, shape):
        begin, end = self._tuples(len(shape))
        return _slice_ranges(shape, begin, end, ())

    def infer_storage_type(self, data):
        return ["csr" if data == "csr" else "default"]

    def gradient(self, out_grads, inputs, outputs):
        begin, end = self._tuples(len(inputs[0].shape))
        return [T._backward_slice(out_grads[0], begin=begin, end=end, shape=inputs[0].shape,
                                sparse_grad=_row_sparse_input(inputs[0]))]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: rows and columns of dense, csr and row_sparse arrays."""
        from . import _samples

        return [([x], {"axis": axis, "begin": 1, "end": 3}) for axis in (0, 1) for x in _samples.each_stype((4, 5))]


@register("_backward_slice")
class BackwardSlice(Op):
    """The gradient of ``slice``: ``grad`` written at ``begin:end:step`` of zeros of ``shape``;
    dense, or row_sparse with ``sparse_grad`` (storing the rows the slice reached)."""

    trusted = True  # built-in kernels, tested against NumPy/SciPy references

    arguments = ("grad",)
    begin = Param(_opt_ints)
    end = Param(_opt_ints)
    step = Param(_opt_ints, ())
    shape = Param("shape", doc="shape of the sliced input")
    sparse_grad = Param(bool, False, "a row_sparse result (the gradient of a row_sparse input)")
    backward_needs_inputs = ()
    capacity = cap.computed(lambda op, out, grad: grad.shape[0] if grad.shape else 0, "rows(grad)")

    def _ranges(self):
        return _slice_ranges(self.shape, self.begin, self.end, self.step)

    def infer_shape(self, grad):
        expect = tuple(_range_len(r) for r in self._ranges())
        if tuple(grad) != expect:
            raise ValueError(f"gradient of shape {grad} does not match the slice's shape {expect}")
        return [self.shape]

    def infer_storage_type(self, grad):
        if self.sparse_grad and not self.shape:
            raise ValueError("_backward_slice: sparse_grad needs an input of at least one axis")
        return ["row_sparse" if self.sparse_grad else "default"]

    @kernel(device=_BOTH)
    def dense(self, ctx, grad, out):
        out[...] = 0
        out[_range_key(self._ranges())] = grad

    @kernel(device=_BOTH, stypes=[("row_sparse",), ("csr",)])
    def sparse(self, ctx, grad, out):
        if out.stype == "row_sparse":
            self._stored_rows(ctx, grad, out)
            return
        out.data[...] = 0
        densify_into(grad, out.data[_range_key(self._ranges())])

    @kernel(device=_BOTH, stypes=[("*",)])
    def rows(self, ctx, grad, out):
        self._stored_rows(ctx, grad, out)  # a dense gradient, a row_sparse result

    def _stored_rows(self, ctx, grad, out):
        """The row_sparse result: every row of the range stored (ascending), holding the
        gradient at the range of the other axes."""
        xp, ranges = ctx.xp, self._ranges()
        b, e, s = ranges[0]
        n = _range_len(ranges[0])
        values = xp.zeros((n,) + tuple(self.shape[1:]), dtype=out.dtype)
        g = grad.data if grad.stype == "default" else _cast_storage(grad, "default").data
        if s < 0:  # the range's rows descend: stored rows ascend
            g = g[::-1]
        values[(slice(None),) + _range_key(ranges[1:])] = g
        rows = xp.arange(b, e, s, dtype=np.int64)[::-1] if s < 0 else xp.arange(b, b + n * s, s, dtype=np.int64)
        ctx.set_row_sparse(out, values, rows)

    def gradient(self, out_grads, inputs, outputs):
        return [T.slice(out_grads[0], begin=self.begin, end=self.end, step=self.step)]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: a (2, 3) gradient of each storage type into a (4, 5) zero array,
        dense and row_sparse results (a descending range too)."""
        from . import _samples

        out = [([g], {"begin": (1, 1), "end": (3, 4), "shape": (4, 5)}) for g in _samples.each_stype((2, 3))]
        out += [([g], {"begin": (1, 1), "end": (3, 4), "shape": (4, 5), "sparse_grad": True})
                for g in _samples.each_stype((2, 3), seed=3)]
        return out + [([_samples.array((2, 5), seed=4)],
                       {"begin": (3,), "end": (0,), "step": (-2,), "shape": (4, 5), "sparse_grad": True})]


# ---- take ------------------------------------------------------------------------------------------------
def _take_positions(xp: Any, indices: Any, n: int, axis: int, mode: str) -> Any:
    """``indices`` as int64 positions in ``[0, n)`` under ``mode`` (floats truncate, as MXNet's
    cast does): clip into range, wrap around, or raise naming the first bad index."""
    if mode == "wrap" and indices.dtype.kind == "f" and n > 0:
        # wrapped before the cast: a float at or past 2**63 is an exact integer that int64 cannot hold
        refuse_nonfinite_ids(xp, indices, "take", "indices")
        wrapped = xp.fmod(xp.trunc(indices.astype(np.float64)), n)  # exact at any magnitude
        wrapped[wrapped < 0] += n
        return wrapped.astype(np.int64)
    idx = int_ids(xp, indices, "take", "indices").astype(np.int64)  # a copy: clipped or wrapped in place below
    if idx.size == 0:
        return idx
    if n == 0:
        first = indices.ravel()[0].item()
        raise TakeIndexError(f"operator 'take': cannot take index {first} from axis {axis}, which has length 0")
    if mode == "clip":
        xp.clip(idx, 0, n - 1, out=idx)
    elif mode == "wrap":
        xp.remainder(idx, n, out=idx)
    else:
        bad = (idx < 0) | (idx >= n)
        if bool(bad.any()):
            first = indices.ravel()[int(xp.argmax(bad.ravel()))].item()
            raise TakeIndexError(f"operator 'take': index {first} is out of bounds for axis {axis} "
                                 f"with size {n} (mode='raise' needs 0 <= index < {n})")
    return idx


class _TakeParams(Op):
    trusted = True  # built-in kernels, tested against NumPy/SciPy references
    axis = Param(int, 0, doc="the axis to take along")
    mode = Param(str, "clip", choices=("clip", "wrap", "raise"),
                 doc="out-of-range indices: clip into range, wrap around, or raise IndexError")
    backward_needs_inputs = ("indices",)

    def infer_type(self, first, indices):
        if indices.kind not in "iuf":
            raise TypeError(f"take needs integer (or floating point) indices, got {indices}")
        return [first]


@register("take")
class Take(_TakeParams):
    """Entries of ``a`` at ``indices`` along ``axis``; the output's shape is
    ``a.shape[:axis] + indices.shape + a.shape[axis+1:]``. As in MXNet 1.9, rows of a csr
    (``axis=0``, ``mode`` clip or wrap, 1-d indices) give a csr; everything else is dense
    (N-d indices give NumPy's result, of rank ``indices.ndim + 1``)
    (a row_sparse ``a`` read at its stored rows, a hashed table never densified)."""

    arguments = ("a", "indices")
    # a csr result has one row per index, each at most as long as a's longest row
    capacity = cap.computed(lambda op, out, a, indices: indices.size * min(a.cols, a.bound_in("csr")),
                            "size(indices) x min(columns(a), nnz(a))")

    def partitioning(self, a, indices):
        """Along axis 0 the output's rows follow the indices' (``a`` whole); along another
        axis they follow ``a``'s rows (indices whole)."""
        if not a:
            return None, None
        if _norm_axis(self.axis, len(a)) == 0:
            return ("rows", ("indices",)) if indices else (None, None)
        return "rows", ("a",)

    def infer_shape(self, a, indices):
        if not a:
            raise ValueError("take needs an array of at least one dimension")
        ax = _norm_axis(self.axis, len(a))
        return [tuple(a[:ax]) + tuple(indices) + tuple(a[ax + 1:])]

    def infer_storage_type(self, a, indices):
        rows = self.axis in (0, -2) and self.mode in ("clip", "wrap")  # a csr is 2-d: -2 is axis 0
        return ["csr" if a == "csr" and indices == "default" and rows else "default"]

    @kernel(device=_BOTH, stypes=("csr", "default"))
    def csr(self, ctx, a, indices, out):
        indices = indices.data
        if out.stype != "csr":  # columns, or mode="raise": the rows of the dense array
            self._take_dense(ctx.xp, _cast_storage(a, "default").data, indices, out.data)
            return
        xp = ctx.xp  # (1-d indices: other ones give a result of another rank, dense)
        rows = _take_positions(xp, indices, a.shape[0], 0, self.mode)
        indptr = a.indptr
        if indptr.dtype != np.int64 and rows.shape[0] and \
                int((indptr[rows + 1] - indptr[rows]).sum(dtype=np.int64)) > np.iinfo(indptr.dtype).max:
            indptr = indptr.astype(np.int64)  # repeated rows may hold more values than int32 counts
        values = a.data
        if values.dtype == np.float16:  # numba has no float16 on the cpu: move the bits
            values = values.view(np.uint16)
        new_ptr, new_indices, new_data = sdk_csr.take_rows(ctx, indptr, a.indices, values, rows)
        ctx.set_csr(out, new_data.view(a.data.dtype), new_indices, new_ptr)

    @kernel(device=_BOTH, stypes=("row_sparse", "default"))
    def row_sparse(self, ctx, a, indices, out):
        """Rows (or columns) of a row_sparse array read where they are stored: a hashed
        table's few rows, never the table densified; rows it does not store are zero."""
        xp, o = ctx.xp, out.data
        ax = _norm_axis(self.axis, a.ndim)
        idx = _take_positions(xp, indices.data, a.shape[ax], ax, self.mode)
        stored, values = a.indices, a.data
        o[...] = 0
        if ax != 0:  # each stored row's entries taken along ax, into its row of the result
            o[stored] = xp.take(values, idx, axis=ax)
            return
        if not stored.shape[0] or not idx.size:
            return
        flat = idx.reshape(-1)
        pos = xp.minimum(xp.searchsorted(stored, flat), stored.shape[0] - 1)
        found = stored[pos] == flat
        o.reshape((flat.shape[0],) + tuple(a.shape[1:]))[found] = values[pos[found]]

    @kernel(device=_BOTH)
    def dense(self, ctx, a, indices, out):
        self._take_dense(ctx.xp, a, indices, out)

    def _take_dense(self, xp, a, indices, out):
        ax = _norm_axis(self.axis, a.ndim)
        idx = _take_positions(xp, indices, a.shape[ax], ax, self.mode)
        if xp is np:
            np.take(a, idx, axis=ax, out=out, mode="clip")  # positions are in range already
        else:
            out[...] = xp.take(a, idx, axis=ax)

    def gradient(self, out_grads, inputs, outputs):
        a = inputs[0]
        rows = _row_sparse_input(a) and _norm_axis(self.axis, len(a.shape)) == 0
        return [T._backward_take(out_grads[0], inputs[1], shape=a.shape, axis=self.axis, mode=self.mode,
                               sparse_grad=rows), None]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: rows and columns of a dense array, repeated and clipped ids, wrap."""
        from . import _samples

        a = _samples.array((4, 3))
        c = _samples.array((4, 3), stype="csr")
        r = _samples.array((5, 3), stype="row_sparse", seed=4)
        return [[r, _samples.ints([[0, 4], [2, 2]])], ([r, _samples.ints([2, 0])], {"axis": 1}),
                [a, _samples.ints([0, 2, 2])], ([a, _samples.ints([[1, 0], [2, 1]])], {"axis": 1}),
                ([a, _samples.ints([5, -1, 3])], {"mode": "wrap"}), [a, _samples.ints([7, 1])],
                [c, _samples.ints([3, 0, 3, 9])], ([c, _samples.ints([5, -1])], {"mode": "wrap"}),
                ([c, _samples.ints([1, 2])], {"axis": 1})]


@register("_backward_take")
class BackwardTake(_TakeParams):
    """The gradient of ``take``: ``grad`` scatter-added (repeated indices accumulate) into
    zeros of ``shape``; dense, or with ``sparse_grad`` (``axis`` 0) row_sparse, storing the
    rows taken."""

    arguments = ("grad", "indices")
    shape = Param("shape", doc="shape of the array taken from")
    sparse_grad = Param(bool, False, "a row_sparse result (the gradient of a row_sparse input)")
    capacity = cap.computed(lambda op, out, grad, indices: indices.size, "size(indices)")

    def infer_storage_type(self, grad, indices):
        if self.sparse_grad and (not self.shape or _norm_axis(self.axis, len(self.shape)) != 0):
            raise ValueError(f"_backward_take: sparse_grad needs axis 0, got axis {self.axis} of a "
                             f"{len(self.shape)}-d array")
        return ["row_sparse" if self.sparse_grad else "default"]

    def infer_shape(self, grad, indices):
        ax = _norm_axis(self.axis, len(self.shape))
        expect = tuple(self.shape[:ax]) + tuple(indices) + tuple(self.shape[ax + 1:])
        if tuple(grad) != expect:
            raise ValueError(f"gradient of shape {grad} does not match take's output shape {expect}")
        return [self.shape]

    @kernel(device=_BOTH)
    def dense(self, ctx, grad, indices, out):
        xp = ctx.xp
        out[...] = 0
        ax = _norm_axis(self.axis, out.ndim)
        n = out.shape[ax]
        idx = _take_positions(xp, indices, n, ax, self.mode).ravel()
        if idx.size == 0:
            return
        pre, post = _prod(out.shape[:ax]), _prod(out.shape[ax + 1:])
        target = out.reshape(pre, n, post).transpose(1, 0, 2)
        sdk_csr.index_add(ctx, target, idx, grad.reshape(pre, idx.size, post).transpose(1, 0, 2))

    @kernel(device=_BOTH, stypes=[("*", "*")])
    def rows(self, ctx, grad, indices, out):
        """A sparse gradient, or a row_sparse result: the distinct rows taken, ascending, each
        the sum of its gradient rows (in their order, on either device)."""
        g, ids = (x.data if x.stype == "default" else _cast_storage(x, "default").data for x in (grad, indices))
        if out.stype != "row_sparse":
            self.dense(ctx, g, ids, out.data)
            return
        xp = ctx.xp
        idx = _take_positions(xp, ids, self.shape[0], 0, self.mode).ravel()
        rows, starts, order = sdk_csr.group_columns(ctx, idx, self.shape[0])
        rank = xp.empty(idx.shape[0], dtype=np.int64)
        rank[order] = xp.repeat(xp.arange(rows.shape[0]), xp.diff(starts))
        sums = xp.zeros((rows.shape[0],) + tuple(self.shape[1:]), dtype=out.dtype)
        sdk_csr.index_add(ctx, sums, rank, g.reshape((idx.shape[0],) + tuple(self.shape[1:])))
        ctx.set_row_sparse(out, sums, rows)

    def gradient(self, out_grads, inputs, outputs):
        return [T.take(out_grads[0], inputs[1], axis=self.axis, mode=self.mode), None]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: repeated ids accumulate, along rows and columns; row_sparse
        results (clipped and wrapped ids, a row_sparse gradient)."""
        from . import _samples

        return [([_samples.array((3, 3)), _samples.ints([0, 2, 2])], {"shape": (4, 3)}),
                ([_samples.array((4, 2)), _samples.ints([1, 1])], {"shape": (4, 3), "axis": 1}),
                ([_samples.array((2, 3, 3), seed=2), _samples.ints([[3, 0, 9], [3, 1, 0]])],
                 {"shape": (5, 3), "sparse_grad": True}),
                ([_samples.array((4, 3), "row_sparse", seed=3), _samples.ints([6, -1, 2, 6])],
                 {"shape": (5, 3), "mode": "wrap", "sparse_grad": True})]


# ---- slice assignment ---------------------------------------------------------------------------------
class _SliceAssignBase(Op):
    """What ``_slice_assign`` and ``_slice_assign_scalar`` share: the region
    ``begin:end:step`` (``slice``'s rules) of a copy of the first input is overwritten."""

    trusted = True  # built-in kernels, tested against NumPy references

    begin = Param(_opt_ints, doc="first index per axis (None: from the start)")
    end = Param(_opt_ints, doc="stop index per axis, exclusive (None: to the end)")
    step = Param(_opt_ints, (), doc="step per axis (None or omitted: 1)")
    backward_needs_inputs = ()

    def _key(self, shape: Sequence[int]) -> tuple:
        return _range_key(_slice_ranges(shape, self.begin, self.end, self.step))

    def _region_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        return tuple(_range_len(r) for r in _slice_ranges(shape, self.begin, self.end, self.step))

    def _outside_grad(self, g: Any) -> Any:
        """The head gradient with the overwritten region zeroed: what the first input gets."""
        return T._slice_assign_scalar(g, scalar=0.0, begin=self.begin, end=self.end, step=self.step)


@register("_slice_assign")
class SliceAssign(_SliceAssignBase):
    """A copy of ``lhs`` whose region ``begin:end:step`` holds ``rhs`` (of the region's
    shape); MXNet's ``_slice_assign`` (``_crop_assign``). Gradients: the head gradient
    outside the region for ``lhs``, inside it for ``rhs``."""

    arguments = ("lhs", "rhs")

    def infer_shape(self, lhs, rhs):
        region = self._region_shape(lhs)
        if tuple(rhs) != region:
            raise ValueError(f"rhs of shape {tuple(rhs)} does not fill the region {region} of lhs "
                             f"{tuple(lhs)} from begin={self.begin} to end={self.end} (argument rhs)")
        return [tuple(lhs)]

    def infer_type(self, lhs, rhs):
        return [lhs]

    @kernel(device=_BOTH)
    def dense(self, ctx, lhs, rhs, out):
        out[...] = lhs
        out[self._key(lhs.shape)] = rhs

    def gradient(self, out_grads, inputs, outputs):
        g = out_grads[0]
        return [self._outside_grad(g), T.slice(g, begin=self.begin, end=self.end, step=self.step)]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: a block, a stepped region."""
        from . import _samples

        x = _samples.array((4, 5))
        return [([x, _samples.array((2, 3), seed=1)], {"begin": (1, 0), "end": (3, 3)}),
                ([x, _samples.array((2, 2), seed=2)], {"begin": (0, 1), "end": (4, 5), "step": (2, 2)})]


@register("_slice_assign_scalar")
class SliceAssignScalar(_SliceAssignBase):
    """A copy of ``data`` whose region ``begin:end:step`` holds ``scalar``; MXNet's
    ``_slice_assign_scalar`` (``_crop_assign_scalar``). The gradient is the head gradient
    outside the region."""

    scalar = Param(float, 0.0, doc="the value written into the region")

    def infer_shape(self, data):
        self._region_shape(data)
        return [tuple(data)]

    @kernel(device=_BOTH)
    def dense(self, ctx, data, out):
        out[...] = data
        out[self._key(data.shape)] = self.scalar

    def gradient(self, out_grads, inputs, outputs):
        return [self._outside_grad(out_grads[0])]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: a block, a stepped region."""
        from . import _samples

        x = _samples.array((4, 5))
        return [([x], {"scalar": 2.5, "begin": (1, 0), "end": (3, 3)}),
                ([x], {"scalar": -1.0, "begin": (0, 1), "end": (4, 5), "step": (2, 2)})]


# ---- where -------------------------------------------------------------------------------------------------
@register("where")
class Where(Op):
    """``x`` where ``condition`` is non-zero, else ``y`` (dense). ``condition`` has the shape
    of ``x``, or is 1-d and picks whole rows (MXNet)."""

    trusted = True  # built-in kernels, tested against NumPy/SciPy references

    arguments = ("condition", "x", "y")
    backward_needs_inputs = ("condition",)
    partition = "rows"

    def infer_shape(self, condition, x, y):
        if tuple(x) != tuple(y):
            raise ValueError(f"x and y must have one shape, got {tuple(x)} and {tuple(y)}")
        if tuple(condition) != tuple(x) and not (len(condition) == 1 and x and condition[0] == x[0]):
            raise ValueError(f"condition of shape {tuple(condition)} must have the shape of x {tuple(x)} "
                             f"or be 1-d of length x.shape[0]")
        return [x]

    def infer_type(self, condition, x, y):
        require_one_dtype("where", ("x", "y"), (x, y))
        return [x]

    @kernel(device=_BOTH)
    def dense(self, ctx, condition, x, y, out):
        xp = ctx.xp
        pick = condition != 0
        if pick.ndim != out.ndim:
            pick = pick.reshape(pick.shape + (1,) * (out.ndim - 1))
        xp.copyto(out, y)
        xp.copyto(out, x, where=pick)

    def gradient(self, out_grads, inputs, outputs):
        g = out_grads[0]
        zero = T.zeros_like(g)
        condition = inputs[0]
        return [None, T.where(condition, g, zero), T.where(condition, zero, g)]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: an integer condition of x's shape, and a 1-d one picking rows."""
        from . import _samples

        x, y = _samples.array((3, 4), seed=1), _samples.array((3, 4), seed=2)
        cond = _samples.ints([[1, 0, 0, 2], [0, 1, 1, 0], [3, 0, 0, 1]])
        return [[cond, x, y], [_samples.ints([0, 1, 0]), x, y]]
