"""``fm_interaction``: the pairwise term of a factorization machine, for click-through
rate models on one-hot / multi-hot features.

For csr features X (n, d) and factors V (d, k):
out[i] = sum_{j < l} <v_j, v_l> x_ij x_il = 0.5 * sum_f ((sum_j x_ij v_jf)^2 - sum_j x_ij^2 v_jf^2),
in O(nnz * k) rather than O(nnz^2 * k). The V gradient is row_sparse: only the factors of
features some sample holds get one.
"""
from __future__ import annotations

import sparse_ops as so
from sparse_ops.sdk import capacity as cap

from ._common import BOTH, backend, check_floats, dense_operand, matrix, transpose_parts
from .spmm import csr_sddmm


def _fm_shapes(x: tuple, v: tuple) -> tuple[int, int, int]:
    n, d = matrix("X", x)
    dv, k = matrix("V", v)
    if dv != d:
        raise ValueError(f"V must have one row per feature (X has {d} columns), got V {tuple(v)}")
    return n, d, k


@so.register("fm_interaction")
class FMInteraction(so.Op):
    """Factorization-machine pairwise interactions of csr X (n, d) with factors V (d, k):
    dense (n,), float32 or float64. X may also be dense. V's gradient is row_sparse for
    csr X (rows = the features present; ``_fm_interaction_backward``); X's stored values get
    theirs when asked for."""

    arguments = ("X", "V")
    backward_needs_inputs = ("X", "V")
    partition, partition_args = "rows", ("X",)  # V whole (sparse_ops.dask)

    def infer_shape(self, x, v):
        n, _, _ = _fm_shapes(x, v)
        return [(n,)]

    def infer_type(self, x, v):
        return [check_floats(X=x, V=v)]

    @so.kernel(device=BOTH, stypes=("csr", "*"))
    def csr(self, ctx, x, v, out):
        backend(ctx).fm_forward(ctx, x.indptr, x.indices, x.data, dense_operand(ctx, v), out.data)

    @so.kernel(device=BOTH)
    def dense(self, ctx, x, v, out):
        s = x @ v
        out[...] = 0.5 * (s * s - (x * x) @ (v * v)).sum(axis=1)

    def gradient(self, out_grads, inputs, outputs, needs=(True, True)):
        """V's (row_sparse for csr X) and, where asked for, X's at its stored values:
        dX_ij = g_i ((X V V^T)_ij - x_ij |v_j|^2) (``csr_sddmm`` for the first term)."""
        x, v = inputs
        g = out_grads[0]
        d_x = None
        if needs[0]:
            col = so.reshape(g, shape=(-1, 1))
            norms = so.reshape(so.sum(so.square(v), axis=1), shape=(1, -1))
            s = so.broadcast_mul(so.dot(x, v), col)
            pairs = csr_sddmm(x, s, v) if x.stype == "csr" else so.dot(s, v, transpose_b=True)
            d_x = so.elemwise_sub(pairs, so.broadcast_mul(so.broadcast_mul(x, col), norms))
        return [d_x, _fm_interaction_backward(x, v, g) if needs[1] else None]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: csr X (an empty row) and dense X with factors V, a csr with
        no stored values."""
        from sparse_ops.sdk.testing import sample_array

        x, v = sample_array((4, 5), "csr", seed=1), sample_array((5, 3), seed=2)
        return [[x, v], [x.tostype("default"), v], [so.zeros((3, 5), stype="csr", dtype="float64"), v]]


@so.register("_fm_interaction_backward")
class FMInteractionBackward(so.Op):
    """V's gradient of ``fm_interaction``: dV[j, f] = sum_i g_i (x_ij s_if - x_ij^2 v_jf)
    with s = X @ V; row_sparse (rows = the features X stores) for csr X, else dense."""

    arguments = ("X", "V", "out_grad")
    differentiable = False
    capacity = cap.columns_of("X")  # a row per feature X stores
    partition, partition_args = "sum", ("X", "out_grad")  # V whole; block gradients add up

    def infer_shape(self, x, v, g):
        n, d, k = _fm_shapes(x, v)
        if tuple(g) != (n,):
            raise ValueError(f"out_grad must have shape ({n},), got {tuple(g)}")
        return [(d, k)]

    def infer_type(self, x, v, g):
        return [check_floats(X=x, V=v, out_grad=g)]

    def infer_storage_type(self, x, v, g):
        return ["row_sparse" if x == "csr" else "default"]

    @so.kernel(device=BOTH, stypes=("csr", "*", "*"))
    def csr(self, ctx, x, v, g, out):
        k = backend(ctx)
        xp = ctx.xp
        v = dense_operand(ctx, v)
        g = dense_operand(ctx, g)
        s = xp.empty((x.shape[0], v.shape[1]), dtype=v.dtype)
        k.spmm(ctx, x.indptr, x.indices, x.data, v, False, s)
        t_indptr, t_indices, t_data = transpose_parts(ctx, x.shape[1], x.indptr, x.indices, x.data)
        rows, c_indptr = k.nonempty_rows(ctx, t_indptr)
        values, idx = ctx.alloc_row_sparse(out, rows.shape[0], index_dtype=x.indices.dtype)
        idx[...] = rows
        k.fm_backward_rows(ctx, c_indptr, t_indices, t_data, rows, v, g, s, values)

    @so.kernel(device=BOTH)
    def dense(self, ctx, x, v, g, out):
        s = x @ v
        out[...] = x.T @ (g[:, None] * s) - v * ((x * x).T @ g)[:, None]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: csr X (row_sparse result) and dense X."""
        from sparse_ops.sdk.testing import sample_array

        x, v, g = sample_array((4, 5), "csr", seed=1), sample_array((5, 3), seed=2), sample_array((4,), seed=3)
        return [[x, v, g], [x.tostype("default"), v, g]]


fm_interaction = so.dispatch.op_function("fm_interaction")
_fm_interaction_backward = so.dispatch.op_function("_fm_interaction_backward")

__all__ = ["fm_interaction"]
