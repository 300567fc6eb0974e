"""``gcn_norm``: the symmetric normalisation of a graph convolutional network's adjacency,
D^-1/2 (A + I) D^-1/2 (Kipf & Welling), computed once per graph and then used by
``csr_spmm`` in every layer."""
from __future__ import annotations

import numpy as np

import sparse_ops as so
from sparse_ops.sdk import capacity as cap

from ._common import BOTH, backend, check_floats, matrix

_INT32_MAX = np.iinfo(np.int32).max


def _inverse_sqrt(xp, degree):
    """degree^-1/2, and 0 where the degree is not positive (isolated nodes, no warning)."""
    positive = degree > 0
    return xp.where(positive, 1.0 / xp.sqrt(xp.where(positive, degree, 1.0)), 0.0)


@so.register("gcn_norm")
class GCNNorm(so.Op):
    """D^-1/2 (A + I) D^-1/2 for a square adjacency A (csr in, csr out; dense in, dense
    out), D the diagonal of row sums of A + I. ``add_self_loops=False`` normalises A
    itself. A + I adds 1 to a diagonal value A stores, and inserts it where A stores none.
    Rows with a degree <= 0 scale to zero. float32 or float64; not differentiable."""

    arguments = ("A",)
    differentiable = False
    add_self_loops = so.Param(bool, True, "normalise A + I rather than A")
    # A's stored values, plus a diagonal value per row where A + I inserts one
    capacity = cap.computed(lambda op, out, a: a.bound_in("csr") + (a.rows if op.add_self_loops else 0),
                            "nnz(A) + rows(A) with add_self_loops, else nnz(A)")

    def infer_shape(self, a):
        n, m = matrix("A", a)
        if n != m:
            raise ValueError(f"A must be square (an adjacency matrix), got shape {tuple(a)}")
        return [tuple(a)]

    def infer_type(self, a):
        return [check_floats(A=a)]

    def infer_storage_type(self, a):
        return ["csr" if a == "csr" else "default"]

    @so.kernel(device=BOTH, stypes=("csr",))
    def csr(self, ctx, a, out):
        xp, k = ctx.xp, backend(ctx)
        n = a.shape[0]
        index_dtype = a.indices.dtype if a.nnz + n <= _INT32_MAX else np.dtype(np.int64)
        counts = xp.empty(n, dtype=index_dtype)
        degree = xp.empty(n, dtype=np.float64)
        k.gcn_count(ctx, a.indptr, a.indices, a.data, self.add_self_loops, counts, degree)
        data, indices, indptr = ctx.alloc_csr(out, int(counts.sum()), index_dtype=index_dtype)
        indptr[0] = 0
        xp.cumsum(counts, out=indptr[1:])
        # degrees sum in float64; the scaling runs in the values' dtype
        k.gcn_fill(ctx, a.indptr, a.indices, a.data, self.add_self_loops,
                   _inverse_sqrt(xp, degree).astype(data.dtype, copy=False), indptr, indices, data)

    @so.kernel(device=BOTH)
    def dense(self, ctx, a, out):
        xp = ctx.xp
        a = a.astype(np.float64)
        if self.add_self_loops:
            a = a + xp.eye(a.shape[0])
        dinv = _inverse_sqrt(xp, a.sum(axis=1))
        out[...] = a * dinv[:, None] * dinv[None, :]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: a weighted csr adjacency with an isolated node, with and
        without self loops, and the same dense."""
        from sparse_ops.sdk.testing import sample_array

        a = sample_array((5, 5), "csr", seed=1, positive=True)
        return [[a], ([a], {"add_self_loops": False}), [a.tostype("default")],
                ([a.tostype("default")], {"add_self_loops": False})]


gcn_norm = so.dispatch.op_function("gcn_norm")

__all__ = ["gcn_norm"]
