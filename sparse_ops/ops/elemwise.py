"""Elementwise binary operators: ``elemwise_*`` (same shape, storage-aware) and
``broadcast_*`` (dense, NumPy broadcasting).

Output storage types follow MXNet 1.9: add/sub keep ``row_sparse`` (r,r) and ``csr``
(c,c); mul keeps sparsity whenever one side is sparse of a kind it can keep; div is dense.

Mixed dtypes promote as NumPy does (``dtypes.promote_types``: float32 with float64 gives
float64, int32 with float32 gives float64); the gradients come back in each input's own
dtype (``in_input_dtypes``).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import in_input_dtypes, promote_types
from ..registry import Op, Param, applies_ufunc, kernel, register
from ..sdk import capacity as cap
from ._util import T, index_dtype_for, is_host, match_rows, numba_values, row_ids

_BOTH = ("cpu", "gpu")


# ---- storage-aware pieces shared by add, sub and mul ---------------------------------------------
def _rsp_union(ctx, a, b, sign: int, out) -> None:
    xp = ctx.xp
    idx = xp.union1d(a.indices, b.indices).astype(index_dtype_for(a.indices, b.indices, shape=a.shape))
    data = xp.zeros((idx.shape[0], *a.shape[1:]), dtype=out.dtype)
    data[xp.searchsorted(idx, a.indices)] = a.data
    pos = xp.searchsorted(idx, b.indices)
    if sign > 0:
        data[pos] += b.data
    else:
        data[pos] -= b.data
    ctx.set_row_sparse(out, data, idx)


def _csr_merge(ctx, a, b, op: int, out) -> None:
    """Row-wise union (add, sub) or intersection (mul) of two canonical csr arrays, on
    either device (``sparse_ops.kernels.elemwise``), in the promoted dtype of the output;
    float16 computed in float32."""
    from ..device import allocating_on
    from ..kernels.elemwise import csr_merge

    idt = index_dtype_for(a.indices, b.indices, nnz=a.nnz + b.nnz, shape=a.shape)
    av, bv = (numba_values(x.data.astype(out.dtype, copy=False)) for x in (a, b))  # promoted
    with allocating_on(ctx.device):
        values, indices, indptr = csr_merge(ctx, (a.indptr, a.indices, av), (b.indptr, b.indices, bv), op, idt)
        ctx.set_csr(out, values.astype(out.dtype, copy=False), indices, indptr)


def _dense_plus_sparse(ctx, dense, sparse, sign: int, out, sparse_first: bool) -> None:
    """out = dense ± sparse (or sparse ± dense), dense result."""
    if sparse_first and sign < 0:
        ctx.xp.negative(dense, out=out)
        sign = 1
    else:
        out[...] = dense
    if sparse.stype == "row_sparse":
        target, values = (sparse.indices,), sparse.data
    else:
        target, values = (row_ids(sparse), sparse.indices), sparse.data
    if sign > 0:
        out[target] += values
    else:
        out[target] -= values


class _Binary(Op):
    """Two operands, one output of their promoted dtype (NumPy's ``result_type``)."""

    trusted = True  # built-in kernels, tested against NumPy/SciPy references
    out_may_alias = True  # value by value (NumPy's ufuncs, which take overlapping out=)
    arguments = ("lhs", "rhs")
    partition = "rows"  # equal shapes, value by value: both operands cut into the same row blocks
    ufunc: np.ufunc  # NumPy ufuncs also run on CuPy arrays (``__array_ufunc__``)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "gradient" in cls.__dict__:  # every binary op's gradient, in its inputs' dtypes
            cls.gradient = in_input_dtypes(cls.__dict__["gradient"])

    def infer_type(self, lhs: np.dtype, rhs: np.dtype) -> list[np.dtype]:
        return [promote_types(lhs, rhs)]

    @kernel(device=_BOTH)
    @applies_ufunc
    def dense(self, ctx, lhs, rhs, out):
        self.ufunc(lhs, rhs, out)  # out positional: NumPy parses it faster than the keyword

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: two (3, 4) float64 operands in every storage pair with a kernel."""
        from . import _samples

        return _samples.by_stypes(_samples.kernel_stypes(cls), [(3, 4), (3, 4)])


class _AddSub(_Binary):
    sign = 1
    backward_needs_inputs = ()
    capacity = cap.sum_of("lhs", "rhs")  # the union of the two structures

    def infer_storage_type(self, lhs, rhs):
        return [lhs if lhs == rhs and lhs != "default" else "default"]

    @kernel(device=_BOTH, stypes=("row_sparse", "row_sparse"))
    def rsp_rsp(self, ctx, lhs, rhs, out):
        _rsp_union(ctx, lhs, rhs, self.sign, out)

    @kernel(device=_BOTH, stypes=("csr", "csr"))
    def csr_csr(self, ctx, lhs, rhs, out):
        _csr_merge(ctx, lhs, rhs, 0 if self.sign > 0 else 1, out)

    @kernel(device=_BOTH, stypes=[("default", "row_sparse"), ("default", "csr")])
    def dns_sparse(self, ctx, lhs, rhs, out):
        _dense_plus_sparse(ctx, lhs.data, rhs, self.sign, out.data, sparse_first=False)

    @kernel(device=_BOTH, stypes=[("row_sparse", "default"), ("csr", "default")])
    def sparse_dns(self, ctx, lhs, rhs, out):
        _dense_plus_sparse(ctx, rhs.data, lhs, self.sign, out.data, sparse_first=True)


@register("elemwise_add")
class ElemwiseAdd(_AddSub):
    """lhs + rhs, same shapes. r,r -> r; c,c -> c; otherwise dense."""

    ufunc = np.add

    def gradient(self, out_grads, inputs, outputs):
        g = out_grads[0]
        return [g, g]


@register("elemwise_sub")
class ElemwiseSub(_AddSub):
    """lhs - rhs, same shapes. r,r -> r; c,c -> c; otherwise dense."""

    sign = -1

    ufunc = np.subtract

    def gradient(self, out_grads, inputs, outputs):
        g = out_grads[0]
        return [g, T.negative(g)]


@register("elemwise_mul")
class ElemwiseMul(_Binary):
    """lhs * rhs, same shapes. Sparse whenever a sparse side can keep its storage type:
    r,r / d,r / r,d -> r and c,c / d,c / c,d -> c; otherwise dense."""

    backward_needs_inputs = ("lhs", "rhs")
    capacity = cap.min_of("lhs", "rhs")  # the intersection of the structures (a dense side: the sparse one's)

    ufunc = np.multiply

    def infer_storage_type(self, lhs, rhs):
        pair = {lhs, rhs}
        if pair in ({"row_sparse"}, {"row_sparse", "default"}):
            return ["row_sparse"]
        if pair in ({"csr"}, {"csr", "default"}):
            return ["csr"]
        return ["default"]

    @kernel(device=_BOTH, stypes=("row_sparse", "row_sparse"))
    def rsp_rsp(self, ctx, lhs, rhs, out):
        xp = ctx.xp
        qa, qb = match_rows(rhs.indices, lhs.indices, xp)
        ctx.set_row_sparse(out, lhs.data[qa] * rhs.data[qb], lhs.indices[qa])

    @kernel(device=_BOTH, stypes=[("default", "row_sparse"), ("row_sparse", "default")])
    def dns_rsp(self, ctx, lhs, rhs, out):
        dense, sparse = (lhs, rhs) if lhs.stype == "default" else (rhs, lhs)
        ctx.set_row_sparse(out, dense.data[sparse.indices] * sparse.data, sparse.indices)

    @kernel(device=_BOTH, stypes=("csr", "csr"))
    def csr_csr(self, ctx, lhs, rhs, out):
        _csr_merge(ctx, lhs, rhs, 2, out)

    @kernel(device=_BOTH, stypes=[("default", "csr"), ("csr", "default")])
    def dns_csr(self, ctx, lhs, rhs, out):
        dense, sparse = (lhs, rhs) if lhs.stype == "default" else (rhs, lhs)
        values = dense.data[row_ids(sparse), sparse.indices] * sparse.data
        ctx.set_csr(out, values, sparse.indices, sparse.indptr)

    def gradient(self, out_grads, inputs, outputs):
        g = out_grads[0]
        lhs, rhs = inputs
        if lhs is rhs and g.stype == lhs.stype == "default":
            # x * x: one gradient 2 g x in one array, not two products and their sum (None adds nothing)
            return [T._scaled_mul(g, lhs, scalar=2.0), None]
        return [T.elemwise_mul(g, rhs), T.elemwise_mul(g, lhs)]


@register("_scaled_mul")
class ScaledMul(_Binary):
    """scalar * lhs * rhs, same shapes, dense (sparse inputs are densified): the gradient of
    ``x * x`` written into one array."""

    backward_needs_inputs = ("lhs", "rhs")
    scalar = Param(float, 1.0, doc="the factor")

    @kernel(device=_BOTH)
    def dense(self, ctx, lhs, rhs, out):
        if rhs.size and not any(rhs.strides):
            lhs, rhs = rhs, lhs
        if lhs.size and lhs.ndim and not any(lhs.strides):  # one value repeated (a sum's gradient): one pass
            ctx.xp.multiply(rhs, lhs[(0,) * lhs.ndim] * self.scalar, out, casting="unsafe")
            return
        ctx.xp.multiply(lhs, rhs, out)
        ctx.xp.multiply(out, self.scalar, out, casting="unsafe")  # in place: no second array

    def gradient(self, out_grads, inputs, outputs):
        g = out_grads[0]
        lhs, rhs = inputs
        if lhs is rhs:
            return [T._scaled_mul(g, lhs, scalar=2.0 * self.scalar), None]
        return [T._scaled_mul(g, rhs, scalar=self.scalar), T._scaled_mul(g, lhs, scalar=self.scalar)]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: dense (3, 4) operands, factor 2.5."""
        from . import _samples

        return _samples.by_stypes([("default", "default")], [(3, 4), (3, 4)], {"scalar": 2.5})


@register("elemwise_div")
class ElemwiseDiv(_Binary):
    """lhs / rhs, same shapes; always dense (sparse inputs are densified)."""

    backward_needs_inputs = ("lhs", "rhs")

    ufunc = np.divide

    @kernel(device=_BOTH)
    def dense(self, ctx, lhs, rhs, out):
        ctx.xp.divide(lhs, rhs, out=out, casting="unsafe")

    def gradient(self, out_grads, inputs, outputs):
        g = out_grads[0]
        lhs, rhs = inputs
        return [T.elemwise_div(g, rhs), T.negative(T.elemwise_div(T.elemwise_mul(g, lhs), T.square(rhs)))]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: dense operands, and sparse numerators (densified, rhs nonzero)."""
        from . import _samples

        return _samples.by_stypes([("default", "default"), ("csr", "default"), ("row_sparse", "default")],
                                  [(3, 4), (3, 4)])


# ---- add_n --------------------------------------------------------------------------------------------
def _scatter_add(xp, out: Any, x) -> None:
    """out += x for a sparse container ``x`` (canonical, so no index repeats)."""
    if x.stype == "row_sparse":
        out[x.indices] += x.data
    elif is_host(out) and x.dtype != np.float16 and out.flags.c_contiguous:
        from ..kernels.convert import csr_scatter_add_row

        csr_scatter_add_row(None, x.shape[0], x.indptr, x.indices, x.data, out, work=x.nnz)
    else:
        out[row_ids(x), x.indices] += x.data


@register("add_n")
class AddN(Op):
    """The sum of any number (at least one) of same-shape arrays. All ``row_sparse`` ->
    ``row_sparse`` (union of rows); anything else -> dense, built from the dense inputs
    with the sparse ones scatter-added (never densified)."""

    trusted = True  # built-in kernels, tested against NumPy/SciPy references

    arguments = ("args",)
    variadic = True
    num_args = Param(int, None, doc="number of inputs (MXNet compatibility; checked if given)")
    backward_needs_inputs = ()
    partition = "rows"
    capacity = cap.sum_of()  # the union of the inputs' rows

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
            rows = xp.unique(xp.concatenate([x.indices for x in xs]))
            rows = rows.astype(index_dtype_for(*[x.indices for x in xs], shape=out.shape), copy=False)
            data = xp.zeros((rows.shape[0], *out.shape[1:]), dtype=out.dtype)
            for x in xs:
                data[xp.searchsorted(rows, x.indices)] += x.data
            ctx.set_row_sparse(out, data, rows)
            return
        o = out.data
        dense = [x.data for x in xs if x.stype == "default"]
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

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: one, two and three inputs, all row_sparse, all csr, mixed."""
        from . import _samples

        sigs = [("default",), ("default", "default"), ("row_sparse", "row_sparse"), ("csr", "csr"),
                ("row_sparse", "default", "csr"), ("row_sparse", "row_sparse", "row_sparse")]
        return [s for sig in sigs for s in _samples.by_stypes([sig], [(3, 4)] * len(sig))]

    def reference(self, *args: np.ndarray) -> np.ndarray:
        """NumPy reference for ``opcheck``: the sum of the inputs."""
        return np.sum(np.stack(args), axis=0)
