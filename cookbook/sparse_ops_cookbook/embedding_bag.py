"""``embedding_bag``: pooled embeddings of variable-length id lists, for recommender
features (a user's watched items, a document's tokens) without padding.

``bags`` is a csr (n_bags, vocab): row b lists bag b's ids as column indices and their
per-id weights as values (an id appears once per row; weight 2 counts it twice). The
output is dense (n_bags, dim); the weight gradient is row_sparse, holding only the ids
present in some bag, so a sparse optimizer touches only those rows.
"""
from __future__ import annotations

import sparse_ops as so
from sparse_ops.sdk import capacity as cap
from sparse_ops.sdk.csr import runs_csr_dense

from ._common import BOTH, backend, check_floats, dense_operand, matrix, spmm_t
from .spmm import csr_sddmm

_MODES = ("sum", "mean")


def _bag_shapes(bags: tuple, other: tuple, other_name: str) -> tuple[int, int, int, int]:
    n_bags, vocab = matrix("bags", bags)
    rows, dim = matrix(other_name, other)
    return n_bags, vocab, rows, dim


def _bags_gradient(bags: so.NDArray, pooled: so.NDArray, table: so.NDArray, mode: str) -> so.NDArray:
    """The gradient of the bags' values (per-id weights) of a product pooling ``table``'s rows
    whose gradient per bag is ``pooled``: d w_bi = <pooled_b, table_i>, over bag b's size
    under ``mean`` (sizes count the ids a bag holds, which small changes of the weights leave
    alone; so dense bags under ``mean`` give their zeros, which are no ids, no gradient)."""
    scaled = pooled if mode == "sum" else so.broadcast_div(pooled, _bag_sizes(bags))
    if bags.stype == "csr":
        return csr_sddmm(bags, scaled, table)
    d_bags = so.dot(scaled, table, transpose_b=True)
    if mode == "mean":
        d_bags = so.elemwise_mul(d_bags, so.array((bags.data != 0).astype(bags.dtype), device=bags.device))
    return d_bags


def _bag_sizes(bags: so.NDArray) -> so.NDArray:
    """Each bag's divisor under ``mean`` as an (n_bags, 1) array: its stored ids (its
    nonzeros when dense), at least 1."""
    xp = bags.device.xp
    counts = xp.diff(bags.indptr) if bags.stype == "csr" else (bags.data != 0).sum(axis=1)
    return so.array(_divisors(xp, counts).astype(bags.dtype), device=bags.device)


def _divisors(xp, counts):
    """Per bag, the divisor of ``mean``: how many ids it holds (1 for an empty bag)."""
    return xp.maximum(counts, 1)[:, None]


@so.register("embedding_bag")
class EmbeddingBag(so.Op):
    """out[b] = sum over the ids i of bag b of w_i * weight[i] (``mode="sum"``), or that
    sum divided by the number of ids in the bag (``mode="mean"``; empty bags give zeros).

    ``bags`` csr (n_bags, vocab), ``weight`` (vocab, dim) dense (a row_sparse weight's
    missing rows read as zeros), float32 or float64; dense ``bags`` run a dense matmul. The weight gradient is row_sparse with the
    ids present as rows (``_embedding_bag_backward``); the bags' per-id weights get theirs at
    their stored places (``csr_sddmm``: torch's ``per_sample_weights`` gradient), computed
    only when asked for.
    """

    arguments = ("bags", "weight")
    backward_needs_inputs = ("bags", "weight")  # the weight: for the per-id weights' gradient
    partition, partition_args = "rows", ("bags",)  # the weight whole (sparse_ops.dask)
    mode = so.Param(str, "sum", "pool by sum or mean", choices=_MODES)

    def infer_shape(self, bags, weight):
        n_bags, vocab, rows, dim = _bag_shapes(bags, weight, "weight")
        if rows != vocab:
            raise ValueError(f"weight must have one row per id (bags has {vocab} columns), got {tuple(weight)}")
        return [(n_bags, dim)]

    def infer_type(self, bags, weight):
        return [check_floats(bags=bags, weight=weight)]

    @so.kernel(device=BOTH, stypes=("csr", "*"))
    @runs_csr_dense(lambda op: op.mode == "mean")  # JAX's native handler may run it
    def csr(self, ctx, bags, weight, out):
        backend(ctx).spmm(ctx, bags.indptr, bags.indices, bags.data, dense_operand(ctx, weight),
                          self.mode == "mean", out.data)

    @so.kernel(device=BOTH)
    def dense(self, ctx, bags, weight, out):
        xp = ctx.xp
        xp.matmul(bags, weight, out=out)
        if self.mode == "mean":
            out /= _divisors(xp, (bags != 0).sum(axis=1))

    def gradient(self, out_grads, inputs, outputs, needs=(True, True)):
        """The weight's (row_sparse) and, where asked for, the per-id weights' (``_bags_gradient``)."""
        bags, weight = inputs
        g = out_grads[0]
        return [_bags_gradient(bags, g, weight, self.mode) if needs[0] else None,
                _embedding_bag_backward(bags, g, mode=self.mode) if needs[1] else None]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: csr bags (an empty bag) with a dense and a row_sparse weight,
        sum and mean, dense bags (under ``mean`` with every id present: a zero there is no
        id, and finite differences would make it one)."""
        from sparse_ops.sdk.testing import sample_array

        bags, weight = sample_array((4, 6), "csr", seed=1, positive=True), sample_array((6, 3), seed=2)
        full = sample_array((4, 6), seed=4, positive=True)
        return [([bags, weight], {"mode": m}) for m in ("sum", "mean")] + [
            ([bags, sample_array((6, 3), "row_sparse", seed=3)], {"mode": "mean"}),
            ([full, weight], {"mode": "mean"}), [bags.tostype("default"), weight]]


@so.register("_embedding_bag_backward")
class EmbeddingBagBackward(so.Op):
    """The weight gradient of ``embedding_bag``: row i sums w_i * out_grad[b] (divided by
    bag b's size for ``mean``) over the bags b holding id i. row_sparse (rows = the ids
    present) for csr bags, dense for dense bags."""

    arguments = ("bags", "out_grad")
    backward_needs_inputs = ("bags", "out_grad")
    capacity = cap.columns_of("bags")  # a row per id present in the bags
    partition = "sum"  # bags and out_grad cut on their shared rows; block gradients add up
    mode = so.Param(str, "sum", "pool by sum or mean", choices=_MODES)

    def infer_shape(self, bags, out_grad):
        n_bags, vocab, rows, dim = _bag_shapes(bags, out_grad, "out_grad")
        if rows != n_bags:
            raise ValueError(f"out_grad must have one row per bag ({n_bags}), got {tuple(out_grad)}")
        return [(vocab, dim)]

    def infer_type(self, bags, out_grad):
        return [check_floats(bags=bags, out_grad=out_grad)]

    def infer_storage_type(self, bags, out_grad):
        return ["row_sparse" if bags == "csr" else "default"]

    @so.kernel(device=BOTH, stypes=("csr", "*"))
    def csr(self, ctx, bags, out_grad, out):
        g = dense_operand(ctx, out_grad)
        if self.mode == "mean":
            g = (g / _divisors(ctx.xp, ctx.xp.diff(bags.indptr))).astype(g.dtype, copy=False)
        spmm_t(ctx, bags, g, out)

    @so.kernel(device=BOTH)
    def dense(self, ctx, bags, out_grad, out):
        xp = ctx.xp
        if self.mode == "mean":
            out_grad = (out_grad / _divisors(xp, (bags != 0).sum(axis=1))).astype(out_grad.dtype, copy=False)
        xp.matmul(bags.T, out_grad, out=out)

    def gradient(self, out_grads, inputs, outputs, needs=(True, True)):
        """out_grad's: the head pooled by the bags (``embedding_bag``); the per-id weights':
        d w_bi = <out_grad_b, head_i> (over bag b's size for ``mean``), as the forward op's."""
        bags, g = inputs
        head = out_grads[0]
        return [_bags_gradient(bags, g, head, self.mode) if needs[0] else None,
                embedding_bag(bags, head, mode=self.mode) if needs[1] else None]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: csr bags (row_sparse result) and dense bags, sum and mean (dense
        bags under ``mean`` with every id present, as for ``embedding_bag``)."""
        from sparse_ops.sdk.testing import sample_array

        bags, g = sample_array((4, 6), "csr", seed=1, positive=True), sample_array((4, 3), seed=2)
        full = sample_array((4, 6), seed=4, positive=True)
        return [([bags, g], {"mode": m}) for m in ("sum", "mean")] + [
            ([bags.tostype("default"), g], {"mode": "sum"}), ([full, g], {"mode": "mean"})]


embedding_bag = so.dispatch.op_function("embedding_bag")
_embedding_bag_backward = so.dispatch.op_function("_embedding_bag_backward")

__all__ = ["embedding_bag"]
