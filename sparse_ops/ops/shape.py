"""Shape operators: ``reshape``, ``expand_dims``, ``flatten``, ``transpose``, ``split``,
``_split_v2`` and ``concat`` (MXNet names and semantics).

Output storage types follow MXNet 1.9: ``concat`` of csr arrays along axis 0 and
``transpose`` of a csr stay csr; everything else is dense.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..creation import zeros
from ..registry import Op, Param, kernel, register
from ..sdk import capacity as cap
from ..storage import densify_into
from ._util import T, index_dtype_for

_BOTH = ("cpu", "gpu")

# concat registers its csr kernel per input count (exact patterns keep all-dense calls on the
# dense kernel); more csr inputs than this run on the dense kernel (fallback).
MAX_CSR_CONCAT = 16


# ---- shared shape helpers -----------------------------------------------------------------------
def _norm_axis(axis: int, ndim: int, extra: int = 0) -> int:
    """``axis`` in ``[0, ndim + extra)``, negative values counting from the end."""
    n = ndim + extra
    if not -n <= axis < n:
        raise ValueError(f"axis {axis} is out of range for an array of {ndim} dimension(s)")
    return axis + n if axis < 0 else axis


def _norm_axes(axes: Sequence[int], ndim: int, what: str = "axis") -> tuple[int, ...]:
    """Each of ``axes`` in ``[0, ndim)`` (``_norm_axis``), none named twice."""
    out = tuple(_norm_axis(a, ndim) for a in axes)
    if len(set(out)) != len(out):
        raise ValueError(f"{what} {tuple(axes)} names the same axis twice")
    return out


def _prod(dims: Sequence[int]) -> int:
    """The product of ``dims`` by multiplication alone: sizes ``torch.compile`` made symbolic
    stay symbolic (``int()`` would fix them to this call's values)."""
    p = 1
    for d in dims:
        p = p * d
    return p


# ---- split and concat ---------------------------------------------------------------------------------
@register("split")
class Split(Op):
    """MXNet's ``split`` (SliceChannel): ``num_outputs`` equal pieces of ``data`` along
    ``axis`` (one output per piece); ``squeeze_axis=True`` drops that axis (each piece must
    then have length 1 there). Dense outputs."""

    trusted = True  # built-in kernels, tested against NumPy/SciPy references

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
        zero = T.zeros_like(present[0])
        parts = [zero if g is None else g for g in out_grads]
        a = _norm_axis(self.axis, len(inputs[0].shape))
        if self.squeeze_axis:
            parts = [T.expand_dims(p, axis=a) for p in parts]
        return [parts[0] if len(parts) == 1 else T.concat(*parts, dim=a)]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: two and three parts along each axis, squeezed."""
        from . import _samples

        x = _samples.array((4, 6))
        return [([x], {"num_outputs": 2, "axis": 0}), ([x], {"num_outputs": 3, "axis": 1}),
                ([_samples.array((2, 3))], {"num_outputs": 3, "axis": 1, "squeeze_axis": True})]


@register("_split_v2")
class SplitV2(Op):
    """MXNet's ``_split_v2`` (behind ``split_v2``): ``data`` cut along ``axis`` into
    ``sections`` equal pieces, or, when ``sections`` is 0, at the boundaries ``indices``
    (the first is 0: piece i runs from ``indices[i]`` to ``indices[i + 1]``, the last to the
    end, as ``numpy.split`` with ``indices[1:]``). ``squeeze_axis=True`` drops the axis
    (pieces of length 1). Dense outputs; the gradient joins the pieces' gradients."""

    trusted = True  # built-in kernels, tested against NumPy references

    indices = Param("shape", (), doc="the start of each piece along axis (0 first); unused with sections")
    axis = Param(int, 1, doc="the axis to split")
    squeeze_axis = Param(bool, False, doc="drop the split axis (pieces of length 1)")
    sections = Param(int, 0, doc="number of equal pieces (0: split at indices)")
    backward_needs_inputs = ()

    def check_params(self):
        if self.sections < 0:
            raise ValueError(f"sections must be >= 0, got {self.sections}")
        if self.sections == 0 and not self.indices:
            raise ValueError("give sections > 0 or the indices of the pieces")

    def output_count(self) -> int:
        return self.sections if self.sections > 0 else len(self.indices)

    def _bounds(self, n: int) -> list[tuple[int, int]]:
        """(start, stop) of each piece along an axis of length ``n``."""
        if self.sections > 0:
            if n % self.sections:
                raise ValueError(f"an axis of length {n} does not split evenly into {self.sections} sections")
            k = n // self.sections
            return [(i * k, (i + 1) * k) for i in range(self.sections)]
        starts = [min(max(i, 0), n) for i in self.indices]
        stops = starts[1:] + [n]
        return [(a, max(a, b)) for a, b in zip(starts, stops)]

    def infer_shape(self, data):
        a = _norm_axis(self.axis, len(data))
        shapes = []
        for start, stop in self._bounds(data[a]):
            if self.squeeze_axis and stop - start != 1:
                raise ValueError(f"squeeze_axis=True needs pieces of length 1 along axis {a}, got one of "
                                 f"length {stop - start}")
            piece = () if self.squeeze_axis else (stop - start,)
            shapes.append(tuple(data[:a]) + piece + tuple(data[a + 1:]))
        return shapes

    @kernel(device=_BOTH)
    def dense(self, ctx, data, *outs):
        a = _norm_axis(self.axis, data.ndim)
        lead = (slice(None),) * a
        for o, (start, stop) in zip(outs, self._bounds(data.shape[a])):
            o[...] = data[lead + (slice(start, stop),)].reshape(o.shape)

    def gradient(self, out_grads, inputs, outputs):
        x = inputs[0]
        a = _norm_axis(self.axis, len(x.shape))
        parts = []
        for g, shape in zip(out_grads, self.infer_shape(x.shape)):
            if g is None:  # a piece nobody used (a bridge may pass None)
                g = zeros(shape, dtype=x.dtype, device=x.device)
            parts.append(T.expand_dims(g, axis=a) if self.squeeze_axis else g)
        return [parts[0] if len(parts) == 1 else T.concat(*parts, dim=a)]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: equal sections, uneven boundaries, squeezed pieces."""
        from . import _samples

        x = _samples.array((4, 6))
        return [([x], {"sections": 3, "axis": 1}), ([x], {"indices": (0, 1, 3), "axis": 0}),
                ([_samples.array((2, 3))], {"sections": 3, "axis": 1, "squeeze_axis": True})]


@register("concat")
class Concat(Op):
    """Inputs joined along ``dim``. All csr along axis 0 -> csr (rows stacked); otherwise dense."""

    trusted = True  # built-in kernels, tested against NumPy/SciPy references

    arguments = ("data",)
    variadic = True
    dim = Param(int, 1, doc="the axis to join along")
    num_args = Param(int, None, doc="number of inputs (MXNet compatibility; checked if given)")
    backward_needs_inputs = ()
    capacity = cap.sum_of()  # csr rows stacked: every input's stored values

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
                densify_into(x, out.data[:, off:off + x.shape[1]])
                off += x.shape[1]
            return
        nnz = sum(x.nnz for x in xs)
        idt = index_dtype_for(*[x.indices for x in xs], nnz=nnz, shape=out.shape)
        ptrs, off = [xp.zeros(1, dtype=idt)], 0
        for x in xs:
            ptrs.append(x.indptr[1:].astype(idt) + off)
            off += x.nnz
        ctx.set_csr(out, xp.concatenate([x.data for x in xs]),
                    xp.concatenate([x.indices for x in xs]).astype(idt, copy=False), xp.concatenate(ptrs))

    def gradient(self, out_grads, inputs, outputs):
        g = out_grads[0]
        a = _norm_axis(self.dim, g.ndim)
        grads, off = [], 0
        for x in inputs:
            n = x.shape[a]
            grads.append(T.slice_axis(g, axis=a, begin=off, end=off + n))
            off += n
        return grads

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: one, two and three csr inputs along rows and columns, dense inputs."""
        from . import _samples

        out = _samples.by_stypes([("csr",)], [(2, 3)], {"dim": 0})
        for sig in (("csr", "csr"), ("csr", "csr", "csr"), ("default", "default"), ("csr", "default")):
            out += _samples.by_stypes([sig], [(2, 3)] * len(sig), {"dim": 0})
            out += _samples.by_stypes([sig], [(2, 3)] * len(sig), {"dim": 1})
        return out


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

    trusted = True  # built-in kernels, tested against NumPy/SciPy references

    backward_needs_inputs = ()

    @kernel(device=_BOTH)
    def dense(self, ctx, data, out):
        out[...] = data.reshape(out.shape)

    def gradient(self, out_grads, inputs, outputs):
        return [T.reshape(out_grads[0], shape=inputs[0].shape)]


@register("reshape")
class Reshape(_Reshaping):
    """``data`` with a new shape, MXNet's special values allowed (0, -1, -2, -3, -4; see
    ``reshape_target``). An empty array whose special reading does not fit takes the shape
    as written, its 0s as sizes: ``(0, 2)`` to ``(4, 0, 2)`` (the reshapes that written-out
    shapes of empty arrays need)."""

    shape = Param("shape", doc="the new shape, special values allowed")
    reverse = Param(bool, False, doc="read the special values from the right")

    def infer_shape(self, data):
        try:
            return [reshape_target(data, self.shape, self.reverse)]
        except ValueError:
            literal = tuple(self.shape)
            if 0 in literal and min(literal) >= 0 and _prod(data) == 0:
                return [literal]
            raise

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: dense reshapes with -1 and 0, a csr input (fallback)."""
        from . import _samples

        return [([_samples.array((3, 4))], {"shape": (4, 3)}), ([_samples.array((3, 4))], {"shape": (2, -1)}),
                ([_samples.array((2, 3, 2))], {"shape": (0, 6)}), ([_samples.array((3, 4), "csr")], {"shape": (6, 2)})]


@register("expand_dims")
class ExpandDims(_Reshaping):
    """``data`` with a new axis of length 1 at ``axis`` (in ``[-ndim-1, ndim]``)."""

    axis = Param(int, doc="where the new axis goes")

    def infer_shape(self, data):
        a = _norm_axis(self.axis, len(data), extra=1)
        return [tuple(data[:a]) + (1,) + tuple(data[a:])]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: a new first, middle and last axis."""
        from . import _samples

        return [([_samples.array((3, 4))], {"axis": axis}) for axis in (0, 1, -1)]


@register("flatten")
class Flatten(_Reshaping):
    """``data`` as 2-d: the first axis kept, the others merged (MXNet's ``Flatten``)."""

    def infer_shape(self, data):
        if not data:
            raise ValueError("flatten needs an array of at least one dimension")
        return [(data[0], _prod(data[1:]))]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: 3-d and 2-d dense arrays."""
        from . import _samples

        return [[_samples.array((2, 3, 2))], [_samples.array((3, 4))]]


# ---- transpose -----------------------------------------------------------------------------------------
@register("transpose")
class Transpose(Op):
    """``data`` with its axes permuted (default: reversed). A csr input gives a csr with
    sorted column indices."""

    trusted = True  # built-in kernels, tested against NumPy/SciPy references

    axes = Param("shape", (), doc="the permutation (empty: reverse the axes)")
    backward_needs_inputs = ()
    capacity = cap.same_as("data")  # the same values, moved

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
            ctx.set_csr(out, data.data.copy(), data.indices, data.indptr)
            return
        from ..sdk.csr import transpose_into

        idt = index_dtype_for(data.indices, data.indptr, nnz=data.nnz, shape=out.shape)
        values, indices, indptr = ctx.alloc_csr(out, data.nnz, idt)
        src = data.data
        if src.dtype == np.float16:  # numba has no float16 on the cpu: move the bits
            src, values = src.view(np.uint16), values.view(np.uint16)
        transpose_into(ctx, data.shape[1], data.indptr, data.indices, src, indptr, indices, values)

    def gradient(self, out_grads, inputs, outputs):
        perm = self._perm(len(inputs[0].shape))
        return [T.transpose(out_grads[0], axes=tuple(int(p) for p in np.argsort(perm)))]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: dense and csr (int64 and int32 indices), a 3-d dense array with axes."""
        from . import _samples

        return ([[x] for x in _samples.each_stype((3, 4), ("default", "csr"))]
                + [[_samples.array((4, 3), "csr", seed=4, index_dtype="int32")],
                   ([_samples.array((2, 3, 4))], {"axes": (1, 2, 0)})])
