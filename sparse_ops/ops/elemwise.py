"""Elementwise binary operators: ``elemwise_*`` (same shape, storage-aware) and
``broadcast_*`` (dense, NumPy broadcasting).

Output storage types follow MXNet 1.9: add/sub keep ``row_sparse`` (r,r) and ``csr``
(c,c); mul keeps sparsity whenever one side is sparse of a kind it can keep; div is dense.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..dispatch import op_function
from ..ndarray import NDArray
from ..registry import Op, kernel, register
from ._util import index_dtype_for, is_host, match_rows, numba_values, row_ids

_BOTH = ("cpu", "gpu")


# ---- storage-aware pieces shared by add, sub and mul ---------------------------------------------
def _rsp_union(ctx, a, b, sign: int, out) -> None:
    xp = ctx.xp
    idx = xp.union1d(a._indices, b._indices).astype(index_dtype_for(a._indices, b._indices, shape=a.shape))
    data = xp.zeros((idx.shape[0], *a.shape[1:]), dtype=out.dtype)
    data[xp.searchsorted(idx, a._indices)] = a._data
    pos = xp.searchsorted(idx, b._indices)
    if sign > 0:
        data[pos] += b._data
    else:
        data[pos] -= b._data
    ctx.set_row_sparse(out, data, idx)


def _csr_merge(ctx, a, b, op: int, out) -> None:
    """Row-wise union (add, sub) or intersection (mul) of two canonical csr arrays, on
    either device (``sparse_ops.kernels.elemwise``); float16 computed in float32."""
    from ..device import allocating_on
    from ..kernels.elemwise import csr_merge

    idt = index_dtype_for(a._indices, b._indices, nnz=a.nnz + b.nnz, shape=a.shape)
    with allocating_on(ctx.device):
        values, indices, indptr = csr_merge(ctx, (a._indptr, a._indices, numba_values(a._data)),
                                            (b._indptr, b._indices, numba_values(b._data)), op, idt)
        ctx.set_csr(out, values.astype(out.dtype, copy=False), indices, indptr)


def _dense_plus_sparse(ctx, dense, sparse, sign: int, out, sparse_first: bool) -> None:
    """out = dense ± sparse (or sparse ± dense), dense result."""
    if sparse_first and sign < 0:
        ctx.xp.negative(dense, out=out)
        sign = 1
    else:
        out[...] = dense
    if sparse.stype == "row_sparse":
        target, values = (sparse._indices,), sparse._data
    else:
        target, values = (row_ids(sparse), sparse._indices), sparse._data
    if sign > 0:
        out[target] += values
    else:
        out[target] -= values


class _Binary(Op):
    arguments = ("lhs", "rhs")
    partition = "rows"  # equal shapes, value by value: both operands cut into the same row blocks
    ufunc: np.ufunc  # NumPy ufuncs also run on CuPy arrays (``__array_ufunc__``)

    @kernel(device=_BOTH)
    def dense(self, ctx, lhs, rhs, out):
        self.ufunc(lhs, rhs, out=out)


class _AddSub(_Binary):
    sign = 1
    backward_needs_inputs = ()

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
        _dense_plus_sparse(ctx, lhs._data, rhs, self.sign, out._data, sparse_first=False)

    @kernel(device=_BOTH, stypes=[("row_sparse", "default"), ("csr", "default")])
    def sparse_dns(self, ctx, lhs, rhs, out):
        _dense_plus_sparse(ctx, rhs._data, lhs, self.sign, out._data, sparse_first=True)


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
        from .unary import negative

        g = out_grads[0]
        return [g, negative(g)]


@register("elemwise_mul")
class ElemwiseMul(_Binary):
    """lhs * rhs, same shapes. Sparse whenever a sparse side can keep its storage type:
    r,r / d,r / r,d -> r and c,c / d,c / c,d -> c; otherwise dense."""

    backward_needs_inputs = ("lhs", "rhs")

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
        qa, qb = match_rows(rhs._indices, lhs._indices, xp)
        ctx.set_row_sparse(out, lhs._data[qa] * rhs._data[qb], lhs._indices[qa])

    @kernel(device=_BOTH, stypes=[("default", "row_sparse"), ("row_sparse", "default")])
    def dns_rsp(self, ctx, lhs, rhs, out):
        dense, sparse = (lhs, rhs) if lhs.stype == "default" else (rhs, lhs)
        ctx.set_row_sparse(out, dense._data[sparse._indices] * sparse._data, sparse._indices)

    @kernel(device=_BOTH, stypes=("csr", "csr"))
    def csr_csr(self, ctx, lhs, rhs, out):
        _csr_merge(ctx, lhs, rhs, 2, out)

    @kernel(device=_BOTH, stypes=[("default", "csr"), ("csr", "default")])
    def dns_csr(self, ctx, lhs, rhs, out):
        dense, sparse = (lhs, rhs) if lhs.stype == "default" else (rhs, lhs)
        values = dense._data[row_ids(sparse), sparse._indices] * sparse._data
        ctx.set_csr(out, values, sparse._indices, sparse._indptr)

    def gradient(self, out_grads, inputs, outputs):
        g = out_grads[0]
        lhs, rhs = inputs
        return [elemwise_mul(g, rhs), elemwise_mul(g, lhs)]


@register("elemwise_div")
class ElemwiseDiv(_Binary):
    """lhs / rhs, same shapes; always dense (sparse inputs are densified)."""

    backward_needs_inputs = ("lhs", "rhs")

    ufunc = np.divide

    @kernel(device=_BOTH)
    def dense(self, ctx, lhs, rhs, out):
        ctx.xp.divide(lhs, rhs, out=out, casting="unsafe")

    def gradient(self, out_grads, inputs, outputs):
        from .unary import negative, square

        g = out_grads[0]
        lhs, rhs = inputs
        return [elemwise_div(g, rhs), negative(elemwise_div(elemwise_mul(g, lhs), square(rhs)))]


# ---- broadcasting (dense) --------------------------------------------------------------------------
def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(np.broadcast_shapes(*shapes))


def sum_to_shape(g: NDArray, shape: tuple[int, ...]) -> NDArray:
    """Reduce a broadcast gradient back to ``shape`` (summing the broadcast axes), with ops."""
    from .reduce import sum as _sum
    from .structure import reshape

    if g.shape == shape:
        return g
    lead = len(g.shape) - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, d in enumerate(shape) if d == 1 and g.shape[lead + i] != 1)
    return reshape(_sum(g, axis=axes, keepdims=False), shape=shape) if axes else reshape(g, shape=shape)


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
        from .unary import negative

        g = out_grads[0]
        return [sum_to_shape(g, inputs[0].shape), sum_to_shape(negative(g), inputs[1].shape)]


@register("broadcast_mul")
class BroadcastMul(_Broadcast):
    """lhs * rhs with NumPy broadcasting (dense)."""

    ufunc = np.multiply

    def gradient(self, out_grads, inputs, outputs):
        g = out_grads[0]
        lhs, rhs = inputs
        return [sum_to_shape(broadcast_mul(g, rhs), lhs.shape), sum_to_shape(broadcast_mul(g, lhs), rhs.shape)]


@register("broadcast_div")
class BroadcastDiv(_Broadcast):
    """lhs / rhs with NumPy broadcasting (dense)."""

    @kernel(device=_BOTH)
    def dense(self, ctx, lhs, rhs, out):
        ctx.xp.divide(lhs, rhs, out=out, casting="unsafe")

    def gradient(self, out_grads, inputs, outputs):
        from .unary import negative, square

        g = out_grads[0]
        lhs, rhs = inputs
        dl = broadcast_div(g, rhs)
        dr = negative(broadcast_div(broadcast_mul(g, lhs), square(rhs)))
        return [sum_to_shape(dl, lhs.shape), sum_to_shape(dr, rhs.shape)]


elemwise_add = op_function("elemwise_add")
elemwise_sub = op_function("elemwise_sub")
elemwise_mul = op_function("elemwise_mul")
elemwise_div = op_function("elemwise_div")
broadcast_add = op_function("broadcast_add")
broadcast_sub = op_function("broadcast_sub")
broadcast_mul = op_function("broadcast_mul")
broadcast_div = op_function("broadcast_div")

__all__ = ["elemwise_add", "elemwise_sub", "elemwise_mul", "elemwise_div",
           "broadcast_add", "broadcast_sub", "broadcast_mul", "broadcast_div"]
