"""Structure operators: storage casts, ``*_like``, ``add_n``, ``retain``, slicing, ``split``,
``concat``, reshaping, ``transpose``, ``take`` and ``where`` (MXNet names and semantics).

Output storage types follow MXNet 1.9 (DESIGN.md): ``cast_storage`` gives the requested
type, ``zeros_like`` keeps the input's, ``add_n`` of all-``row_sparse`` inputs stays
``row_sparse``, ``retain`` gives ``row_sparse``, ``slice``/``slice_axis`` of a csr (step 1)
stay csr, ``concat`` of csr arrays along axis 0 and ``transpose`` of a csr stay csr;
everything else is dense.

Gradients that scatter (``slice``, ``take``) run through the internal operators
``_backward_slice`` and ``_backward_take``, so they are recorded like any other call.
"""
from __future__ import annotations

import builtins
import operator
from typing import Any, Sequence

import numpy as np

from ..dispatch import op_function
from ..errors import OperatorError
from ..ndarray import STYPES
from ..registry import Op, Param, kernel, register
from ..storage import cast_storage as _cast_storage
from ..storage import densify_into
from ._util import index_dtype_for, is_host, row_ids

_BOTH = ("cpu", "gpu")
_pyslice = builtins.slice  # this module exports an operator named ``slice``

# concat registers its csr kernel per input count (exact patterns keep all-dense calls on the
# dense kernel); more csr inputs than this run on the dense kernel (fallback).
MAX_CSR_CONCAT = 16


class TakeIndexError(OperatorError, IndexError):
    """``take(..., mode="raise")`` met an index outside the axis."""


# ---- parameter parsing and shared shape helpers ---------------------------------------------------
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


def _norm_axis(axis: int, ndim: int, extra: int = 0) -> int:
    """``axis`` in ``[0, ndim + extra)``, negative values counting from the end."""
    n = ndim + extra
    if not -n <= axis < n:
        raise ValueError(f"axis {axis} is out of range for an array of {ndim} dimension(s)")
    return axis + n if axis < 0 else axis


def _prod(dims: Sequence[int]) -> int:
    p = 1
    for d in dims:
        p *= int(d)
    return p


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
        ctx.set_csr(out, sub._data, sub._indices, sub._indptr)
        return
    xp = ctx.xp
    idt = sub._indptr.dtype
    keep = (sub._indices >= cb) & (sub._indices < ce)
    kept_before = xp.zeros(keep.shape[0] + 1, dtype=idt)
    xp.cumsum(keep, out=kept_before[1:])
    indptr = kept_before[sub._indptr]
    indices = (sub._indices[keep] - cb).astype(idt, copy=False)
    ctx.set_csr(out, sub._data[keep], indices, indptr)


# ---- storage casts and *_like ------------------------------------------------------------------------
@register("cast_storage")
class CastStorage(Op):
    """The values of ``data`` in storage type ``stype`` (a copy when it already has it)."""

    stype = Param(str, choices=STYPES, doc="the output storage type")
    backward_needs_inputs = ()
    partition = "rows"

    def infer_shape(self, data):
        if self.stype == "csr" and len(data) != 2:
            raise ValueError(f"csr arrays are 2-d; cannot cast an array of shape {data}")
        if self.stype == "row_sparse" and len(data) < 1:
            raise ValueError("row_sparse arrays have at least one dimension; got a 0-d array")
        return [data]

    def infer_storage_type(self, data):
        return [self.stype]

    @kernel(device=_BOTH, stypes=("*",))
    def any_stype(self, ctx, data, out):
        if out.stype == "default":
            if data.stype == "default":
                out._data[...] = data._data
            else:
                densify_into(data, out._data)
            return
        r = _cast_storage(data, self.stype)
        if r.stype == "csr":
            ctx.set_csr(out, r._data, r._indices, r._indptr)
        else:
            ctx.set_row_sparse(out, r._data, r._indices)

    def gradient(self, out_grads, inputs, outputs):
        return [cast_storage(out_grads[0], stype=inputs[0].stype)]


@register("zeros_like")
class ZerosLike(Op):
    """Zeros of the shape, dtype and storage type of ``data`` (an empty sparse array for
    sparse input, keeping its index dtype)."""

    differentiable = False
    partition = "rows"

    def infer_storage_type(self, data):
        return [data]

    @kernel(device=_BOTH)
    def dense(self, ctx, data, out):
        out[...] = 0

    @kernel(device=_BOTH, stypes=[("row_sparse",), ("csr",)])
    def sparse(self, ctx, data, out):
        xp = ctx.xp
        idt = data._indices.dtype
        values = xp.empty((0, *out.shape[1:]) if out.stype == "row_sparse" else 0, dtype=out.dtype)
        if out.stype == "csr":
            ctx.set_csr(out, values, xp.empty(0, idt), xp.zeros(out.shape[0] + 1, idt))
        else:
            ctx.set_row_sparse(out, values, xp.empty(0, idt))


@register("ones_like")
class OnesLike(Op):
    """Ones of the shape and dtype of ``data``; always dense."""

    differentiable = False
    partition = "rows"

    @kernel(device=_BOTH)
    def dense(self, ctx, data, out):
        out[...] = 1

    @kernel(device=_BOTH, stypes=[("row_sparse",), ("csr",)])
    def sparse(self, ctx, data, out):
        out._data[...] = 1


# ---- add_n --------------------------------------------------------------------------------------------
def _scatter_add(xp, out: Any, x) -> None:
    """out += x for a sparse container ``x`` (canonical, so no index repeats)."""
    if x.stype == "row_sparse":
        out[x._indices] += x._data
    elif is_host(out) and x.dtype != np.float16 and out.flags.c_contiguous:
        from ..kernels.structure import csr_scatter_add_into

        csr_scatter_add_into(x._indptr, x._indices, x._data, out)
    else:
        out[row_ids(x), x._indices] += x._data


@register("add_n")
class AddN(Op):
    """The sum of any number (at least one) of same-shape arrays. All ``row_sparse`` ->
    ``row_sparse`` (union of rows); anything else -> dense, built from the dense inputs
    with the sparse ones scatter-added (never densified)."""

    arguments = ("args",)
    variadic = True
    num_args = Param(int, None, doc="number of inputs (MXNet compatibility; checked if given)")
    backward_needs_inputs = ()
    partition = "rows"

    def infer_shape(self, *shapes):
        if not shapes:
            raise ValueError("add_n needs at least one input")
        if self.num_args is not None and self.num_args != len(shapes):
            raise ValueError(f"num_args={self.num_args} but {len(shapes)} inputs were given")
        return super().infer_shape(*shapes)

    def infer_storage_type(self, *stypes):
        return ["row_sparse" if all(s == "row_sparse" for s in stypes) else "default"]

    @kernel(device=_BOTH, stypes=("...",))
    def any_stypes(self, ctx, *args):
        *xs, out = args
        xp = ctx.xp
        if out.stype == "row_sparse":
            rows = xp.unique(xp.concatenate([x._indices for x in xs]))
            rows = rows.astype(index_dtype_for(*[x._indices for x in xs], shape=out.shape), copy=False)
            data = xp.zeros((rows.shape[0], *out.shape[1:]), dtype=out.dtype)
            for x in xs:
                data[xp.searchsorted(rows, x._indices)] += x._data
            ctx.set_row_sparse(out, data, rows)
            return
        o = out._data
        dense = [x._data for x in xs if x.stype == "default"]
        if dense:
            o[...] = dense[0]
            for d in dense[1:]:
                xp.add(o, d, out=o)
        else:
            o[...] = 0
        for x in xs:
            if x.stype != "default":
                _scatter_add(xp, o, x)

    def gradient(self, out_grads, inputs, outputs):
        return [out_grads[0]] * len(inputs)


# ---- retain ---------------------------------------------------------------------------------------------
def _int_ids(ids: Any) -> Any:
    """Row ids as integers (float ids truncate, as MXNet's cast does)."""
    return ids if ids.dtype.kind in "iu" else ids.astype(np.int64)


@register("retain")
class Retain(Op):
    """MXNet's ``sparse.retain``: the rows of row_sparse ``data`` listed in ``indices``
    (others dropped), as row_sparse. Dense ``data`` is accepted too (its listed rows become
    the stored rows); ``indices`` outside ``[0, rows)`` are ignored."""

    arguments = ("data", "indices")
    backward_needs_inputs = ("indices",)

    def infer_shape(self, data, indices):
        if len(data) < 1:
            raise ValueError("retain needs data of at least one dimension")
        return [data]

    def infer_type(self, data, indices):
        if indices.kind not in "iuf":
            raise TypeError(f"retain needs integer (or floating point) indices, got {indices}")
        return [data]

    def infer_storage_type(self, data, indices):
        if indices != "default":
            raise ValueError(f"retain needs dense indices, got {indices}")
        if data == "csr":
            raise ValueError("retain needs row_sparse (or dense) data, got csr; "
                             "convert it with tostype('row_sparse')")
        return ["row_sparse"]

    @kernel(device=_BOTH, stypes=("row_sparse", "default"))
    def rsp(self, ctx, data, indices, out):
        keep = ctx.xp.isin(data._indices, _int_ids(indices._data).ravel())
        ctx.set_row_sparse(out, data._data[keep], data._indices[keep])

    @kernel(device=_BOTH, stypes=("default", "default"))
    def dense(self, ctx, data, indices, out):
        xp = ctx.xp
        ids = _int_ids(indices._data).ravel()
        rows = xp.unique(ids[(ids >= 0) & (ids < data.shape[0])])
        rows = rows.astype(index_dtype_for(indices._data, shape=data.shape), copy=False)
        ctx.set_row_sparse(out, data._data[rows], rows)

    def gradient(self, out_grads, inputs, outputs):
        return [retain(out_grads[0], inputs[1]), None]


# ---- slicing ------------------------------------------------------------------------------------------
class _SliceBase(Op):
    """What ``slice`` and ``slice_axis`` share: kernels driven by ``_ranges(shape)``."""

    backward_needs_inputs = ()

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
            out._data[...] = _cast_storage(data, "default")._data[_range_key(ranges)]


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
        return [_backward_slice(out_grads[0], begin=self.begin, end=self.end, step=self.step,
                                shape=inputs[0].shape)]


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
        return [_backward_slice(out_grads[0], begin=begin, end=end, shape=inputs[0].shape)]


@register("_backward_slice")
class BackwardSlice(Op):
    """The gradient of ``slice``: ``grad`` written at ``begin:end:step`` of zeros of ``shape`` (dense)."""

    arguments = ("grad",)
    begin = Param(_opt_ints)
    end = Param(_opt_ints)
    step = Param(_opt_ints, ())
    shape = Param("shape", doc="shape of the sliced input")
    backward_needs_inputs = ()

    def _ranges(self):
        return _slice_ranges(self.shape, self.begin, self.end, self.step)

    def infer_shape(self, grad):
        expect = tuple(_range_len(r) for r in self._ranges())
        if tuple(grad) != expect:
            raise ValueError(f"gradient of shape {grad} does not match the slice's shape {expect}")
        return [self.shape]

    @kernel(device=_BOTH)
    def dense(self, ctx, grad, out):
        out[...] = 0
        out[_range_key(self._ranges())] = grad

    @kernel(device=_BOTH, stypes=[("row_sparse",), ("csr",)])
    def sparse(self, ctx, grad, out):
        out._data[...] = 0
        densify_into(grad, out._data[_range_key(self._ranges())])

    def gradient(self, out_grads, inputs, outputs):
        return [slice(out_grads[0], begin=self.begin, end=self.end, step=self.step)]


# ---- split and concat ---------------------------------------------------------------------------------
@register("split")
class Split(Op):
    """MXNet's ``split`` (SliceChannel): ``num_outputs`` equal pieces of ``data`` along
    ``axis`` (one output per piece); ``squeeze_axis=True`` drops that axis (each piece must
    then have length 1 there). Dense outputs."""

    num_outputs = Param(int, doc="number of pieces (and of outputs)")
    axis = Param(int, 1, doc="the axis to split")
    squeeze_axis = Param(bool, False, doc="drop the split axis (pieces of length 1)")
    backward_needs_inputs = ()

    def output_count(self) -> int:
        return self.num_outputs

    def check_params(self):
        if self.num_outputs < 1:
            raise ValueError(f"num_outputs must be at least 1, got {self.num_outputs}")

    def infer_shape(self, data):
        a = _norm_axis(self.axis, len(data))
        n = data[a]
        if n % self.num_outputs:
            raise ValueError(f"axis {a} of length {n} does not split evenly into {self.num_outputs} outputs")
        k = n // self.num_outputs
        if self.squeeze_axis and k != 1:
            raise ValueError(f"squeeze_axis=True needs pieces of length 1 along axis {a}, "
                             f"but {n} / {self.num_outputs} = {k}")
        piece = tuple(data[:a]) + (() if self.squeeze_axis else (k,)) + tuple(data[a + 1:])
        return [piece] * self.num_outputs

    @kernel(device=_BOTH)
    def dense(self, ctx, data, *outs):
        for o, piece in zip(outs, ctx.xp.split(data, self.num_outputs, axis=_norm_axis(self.axis, data.ndim))):
            o[...] = piece.reshape(o.shape)

    def gradient(self, out_grads, inputs, outputs):
        present = [g for g in out_grads if g is not None]
        if not present:
            return [None]
        zero = zeros_like(present[0])
        parts = [zero if g is None else g for g in out_grads]
        a = _norm_axis(self.axis, len(inputs[0].shape))
        if self.squeeze_axis:
            parts = [expand_dims(p, axis=a) for p in parts]
        return [parts[0] if len(parts) == 1 else concat(*parts, dim=a)]


@register("concat")
class Concat(Op):
    """Inputs joined along ``dim``. All csr along axis 0 -> csr (rows stacked); otherwise dense."""

    arguments = ("data",)
    variadic = True
    dim = Param(int, 1, doc="the axis to join along")
    num_args = Param(int, None, doc="number of inputs (MXNet compatibility; checked if given)")
    backward_needs_inputs = ()

    def infer_shape(self, *shapes):
        if not shapes:
            raise ValueError("concat needs at least one input")
        if self.num_args is not None and self.num_args != len(shapes):
            raise ValueError(f"num_args={self.num_args} but {len(shapes)} inputs were given")
        first = tuple(shapes[0])
        if not first:
            raise ValueError("cannot concatenate 0-d arrays")
        a = _norm_axis(self.dim, len(first))
        for i, s in enumerate(shapes[1:], 1):
            if len(s) != len(first) or any(x != y for j, (x, y) in enumerate(zip(s, first)) if j != a):
                raise ValueError(f"input {i} has shape {tuple(s)}, which does not match input 0 {first} "
                                 f"outside axis {a}")
        return [first[:a] + (sum(s[a] for s in shapes),) + first[a + 1:]]

    def infer_storage_type(self, *stypes):
        stacked = all(s == "csr" for s in stypes) and _norm_axis(self.dim, 2) == 0
        return ["csr" if stacked else "default"]

    @kernel(device=_BOTH)
    def dense(self, ctx, *arrays):
        *xs, out = arrays
        ctx.xp.concatenate(xs, axis=_norm_axis(self.dim, out.ndim), out=out)

    @kernel(device=_BOTH, stypes=[("csr",) * n for n in range(1, MAX_CSR_CONCAT + 1)])
    def csr(self, ctx, *args):
        *xs, out = args
        xp = ctx.xp
        if out.stype == "default":  # along axis 1: each input fills its block of columns
            off = 0
            for x in xs:
                densify_into(x, out._data[:, off:off + x.shape[1]])
                off += x.shape[1]
            return
        nnz = sum(x.nnz for x in xs)
        idt = index_dtype_for(*[x._indices for x in xs], nnz=nnz, shape=out.shape)
        ptrs, off = [xp.zeros(1, dtype=idt)], 0
        for x in xs:
            ptrs.append(x._indptr[1:].astype(idt) + off)
            off += x.nnz
        ctx.set_csr(out, xp.concatenate([x._data for x in xs]),
                    xp.concatenate([x._indices for x in xs]).astype(idt, copy=False), xp.concatenate(ptrs))

    def gradient(self, out_grads, inputs, outputs):
        g = out_grads[0]
        a = _norm_axis(self.dim, g.ndim)
        grads, off = [], 0
        for x in inputs:
            n = x.shape[a]
            grads.append(slice_axis(g, axis=a, begin=off, end=off + n))
            off += n
        return grads


# ---- reshaping ------------------------------------------------------------------------------------------
def reshape_target(shape: Sequence[int], spec: Sequence[int], reverse: bool = False) -> tuple[int, ...]:
    """The shape MXNet's ``reshape`` gives ``shape`` for ``spec``: 0 copies an input axis, -1
    is inferred, -2 copies all remaining axes, -3 merges two axes, -4 splits one into the next
    two values (one may be -1). ``reverse`` reads both from the right."""
    src = list(shape)[::-1] if reverse else list(shape)
    sp = list(spec)[::-1] if reverse else list(spec)
    out: list[int] = []
    infer_at = None
    i = k = 0
    what = f"cannot reshape an array of shape {tuple(shape)} with shape={tuple(spec)}"
    while k < len(sp):
        d = sp[k]
        if d == 0:
            if i >= len(src):
                raise ValueError(f"{what}: 0 copies input axis {i}, which does not exist")
            out.append(src[i])
            i += 1
        elif d == -1:
            if infer_at is not None:
                raise ValueError(f"{what}: only one dimension can be -1")
            infer_at = len(out)
            out.append(1)
            i += 1
        elif d == -2:
            out.extend(src[i:])
            i = len(src)
        elif d == -3:
            if i + 1 >= len(src):
                raise ValueError(f"{what}: -3 merges input axes {i} and {i + 1}, which do not exist")
            out.append(src[i] * src[i + 1])
            i += 2
        elif d == -4:
            if k + 2 >= len(sp) or i >= len(src):
                raise ValueError(f"{what}: -4 needs two values after it and an input axis to split")
            d1, d2 = sp[k + 1], sp[k + 2]
            k += 2
            if (d1 == -1 and d2 == -1) or d1 in (0, -2, -3, -4) or d2 in (0, -2, -3, -4) or min(d1, d2) < -1:
                raise ValueError(f"{what}: -4 is followed by {d1}, {d2}")
            if d1 == -1:
                d1 = src[i] // d2
            elif d2 == -1:
                d2 = src[i] // d1
            if d1 * d2 != src[i]:
                raise ValueError(f"{what}: {d1} x {d2} does not split input axis {i} of length {src[i]}")
            out += [d1, d2]
            i += 1
        elif d > 0:
            out.append(d)
            i += 1
        else:
            raise ValueError(f"{what}: {d} is not a valid dimension")
        k += 1
    total = _prod(shape)
    if infer_at is not None:
        rest = _prod(out)
        if rest == 0 or total % rest:
            raise ValueError(f"{what}: the -1 dimension cannot be inferred for {total} elements")
        out[infer_at] = total // rest
    if _prod(out) != total:
        raise ValueError(f"{what}: {total} elements do not fit shape {tuple(out[::-1] if reverse else out)}")
    return tuple(out[::-1] if reverse else out)


class _Reshaping(Op):
    """Dense reshapes: the values in order, a new shape; the gradient reshapes back."""

    backward_needs_inputs = ()

    @kernel(device=_BOTH)
    def dense(self, ctx, data, out):
        out[...] = data.reshape(out.shape)

    def gradient(self, out_grads, inputs, outputs):
        return [reshape(out_grads[0], shape=inputs[0].shape)]


@register("reshape")
class Reshape(_Reshaping):
    """``data`` with a new shape, MXNet's special values allowed (0, -1, -2, -3, -4; see
    ``reshape_target``)."""

    shape = Param("shape", doc="the new shape, special values allowed")
    reverse = Param(bool, False, doc="read the special values from the right")

    def infer_shape(self, data):
        return [reshape_target(data, self.shape, self.reverse)]


@register("expand_dims")
class ExpandDims(_Reshaping):
    """``data`` with a new axis of length 1 at ``axis`` (in ``[-ndim-1, ndim]``)."""

    axis = Param(int, doc="where the new axis goes")

    def infer_shape(self, data):
        a = _norm_axis(self.axis, len(data), extra=1)
        return [tuple(data[:a]) + (1,) + tuple(data[a:])]


@register("flatten")
class Flatten(_Reshaping):
    """``data`` as 2-d: the first axis kept, the others merged (MXNet's ``Flatten``)."""

    def infer_shape(self, data):
        if not data:
            raise ValueError("flatten needs an array of at least one dimension")
        return [(data[0], _prod(data[1:]))]


# ---- transpose -----------------------------------------------------------------------------------------
@register("transpose")
class Transpose(Op):
    """``data`` with its axes permuted (default: reversed). A csr input gives a csr with
    sorted column indices."""

    axes = Param("shape", (), doc="the permutation (empty: reverse the axes)")
    backward_needs_inputs = ()

    def _perm(self, ndim: int) -> tuple[int, ...]:
        if not self.axes:
            return tuple(range(ndim - 1, -1, -1))
        if len(self.axes) != ndim:
            raise ValueError(f"axes {self.axes} must have one entry per axis of the {ndim}-d data")
        perm = tuple(a + ndim if a < 0 else a for a in self.axes)
        if sorted(perm) != list(range(ndim)):
            raise ValueError(f"axes {self.axes} is not a permutation of the {ndim} axes")
        return perm

    def infer_shape(self, data):
        return [tuple(data[p] for p in self._perm(len(data)))]

    def infer_storage_type(self, data):
        return [data if data == "csr" else "default"]

    @kernel(device=_BOTH)
    def dense(self, ctx, data, out):
        out[...] = ctx.xp.transpose(data, self._perm(data.ndim))

    @kernel(device=_BOTH, stypes=("csr",))
    def csr(self, ctx, data, out):
        if self._perm(2) == (0, 1):
            ctx.set_csr(out, data._data.copy(), data._indices, data._indptr)
            return
        from ..sdk.csr import transpose_into

        idt = index_dtype_for(data._indices, data._indptr, nnz=data.nnz, shape=out.shape)
        values, indices, indptr = ctx.alloc_csr(out, data.nnz, idt)
        src = data._data
        if src.dtype == np.float16:  # numba has no float16 on the cpu: move the bits
            src, values = src.view(np.uint16), values.view(np.uint16)
        transpose_into(ctx, data.shape[1], data._indptr, data._indices, src, indptr, indices, values)

    def gradient(self, out_grads, inputs, outputs):
        perm = self._perm(len(inputs[0].shape))
        return [transpose(out_grads[0], axes=tuple(int(p) for p in np.argsort(perm)))]


# ---- take ------------------------------------------------------------------------------------------------
def _take_positions(xp: Any, indices: Any, n: int, axis: int, mode: str) -> Any:
    """``indices`` as int64 positions in ``[0, n)`` under ``mode`` (floats truncate, as MXNet's
    cast does): clip into range, wrap around, or raise naming the first bad index."""
    idx = indices.astype(np.int64)
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
    """Entries of ``a`` at ``indices`` along ``axis`` (dense); the output's shape is
    ``a.shape[:axis] + indices.shape + a.shape[axis+1:]``."""

    arguments = ("a", "indices")

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

    @kernel(device=_BOTH)
    def dense(self, ctx, a, indices, out):
        xp = ctx.xp
        ax = _norm_axis(self.axis, a.ndim)
        idx = _take_positions(xp, indices, a.shape[ax], ax, self.mode)
        if xp is np:
            np.take(a, idx, axis=ax, out=out, mode="clip")  # positions are in range already
        else:
            out[...] = xp.take(a, idx, axis=ax)

    def gradient(self, out_grads, inputs, outputs):
        return [_backward_take(out_grads[0], inputs[1], shape=inputs[0].shape, axis=self.axis,
                               mode=self.mode), None]


@register("_backward_take")
class BackwardTake(_TakeParams):
    """The gradient of ``take``: ``grad`` scatter-added (repeated indices accumulate) into
    zeros of ``shape`` (dense)."""

    arguments = ("grad", "indices")
    shape = Param("shape", doc="shape of the array taken from")

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
        xp.add.at(target, idx, grad.reshape(pre, idx.size, post).transpose(1, 0, 2))

    def gradient(self, out_grads, inputs, outputs):
        return [take(out_grads[0], inputs[1], axis=self.axis, mode=self.mode), None]


# ---- where -------------------------------------------------------------------------------------------------
@register("where")
class Where(Op):
    """``x`` where ``condition`` is non-zero, else ``y`` (dense). ``condition`` has the shape
    of ``x``, or is 1-d and picks whole rows (MXNet)."""

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
        if x != y:
            raise TypeError(f"x and y must have one dtype, got {x} and {y}")
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
        zero = zeros_like(g)
        condition = inputs[0]
        return [None, where(condition, g, zero), where(condition, zero, g)]


# ---- functions -----------------------------------------------------------------------------------------------
cast_storage = op_function("cast_storage")
zeros_like = op_function("zeros_like")
ones_like = op_function("ones_like")
add_n = op_function("add_n")
retain = op_function("retain")
slice = op_function("slice")  # noqa: A001  (MXNet's name)
slice_axis = op_function("slice_axis")
concat = op_function("concat")
reshape = op_function("reshape")
expand_dims = op_function("expand_dims")
flatten = op_function("flatten")
transpose = op_function("transpose")
take = op_function("take")
where = op_function("where")
_backward_slice = op_function("_backward_slice")
_backward_take = op_function("_backward_take")
split = op_function("split")


__all__ = ["cast_storage", "zeros_like", "ones_like", "add_n", "retain", "slice", "slice_axis",
           "split", "concat", "reshape", "expand_dims", "flatten", "transpose", "take", "where"]
