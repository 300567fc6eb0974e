"""Sparse-dense products for graph neural networks, closed under differentiation.

- ``csr_spmm(A, X)`` = A @ X (csr A, dense X): neighbourhood aggregation;
- ``csr_spmm_t(A, G)`` = A.T @ G: X's gradient (dense, or row_sparse with
  ``sparse_grad=True``: only A's non-empty columns);
- ``csr_sddmm(A, P, Q)``: for each stored (i, j) of A, sum_k P[i, k] Q[j, k], a csr with
  A's structure: the gradient of A's stored values (and edge scores in attention);
- ``csr_sample(A, H)``: H read at A's stored positions, a csr with A's structure.

Each gradient is made of these four operators, so second derivatives come for free.
"""
from __future__ import annotations

import sparse_ops as so
from sparse_ops.sdk import capacity as cap
from sparse_ops.sdk.csr import runs_csr_dense

from ._common import BOTH, backend, check_floats, dense_operand, matrix, sample_values, spmm_t

_CSR_ANY = ("csr", "*")  # a sparse dense-side operand is scattered into a dense array first


def _product_shapes(a: tuple, x: tuple, a_name: str, x_name: str, transpose: bool) -> tuple[int, int]:
    n, m = matrix(a_name, a)
    rows, k = matrix(x_name, x)
    inner = n if transpose else m
    if rows != inner:
        op = f"{a_name}.T @ {x_name}" if transpose else f"{a_name} @ {x_name}"
        raise ValueError(f"{op} needs {x_name} with {inner} rows, got {a_name} {tuple(a)} and {x_name} {tuple(x)}")
    return (m if transpose else n), k


@so.register("csr_spmm")
class CsrSpmm(so.Op):
    """A @ X for csr A (n, m) and dense X (m, k): dense (n, k), float32 or float64.

    One pass over A's rows, each row a weighted sum of rows of X (a warp per row on a
    gpu). Gradients: X gets A.T @ G (``csr_spmm_t``; row_sparse with
    ``sparse_grad=True``, holding only A's non-empty columns), A's stored values get
    ``csr_sddmm(A, G, X)`` (a csr with A's structure). A dense A runs a dense matmul.
    """

    arguments = ("A", "X")
    partition, partition_args = "rows", ("A",)  # A's row blocks, X whole (sparse_ops.dask)
    sparse_grad = so.Param(bool, False, "give X a row_sparse gradient (rows = A's non-empty columns)")

    def infer_shape(self, a, x):
        return [_product_shapes(a, x, "A", "X", transpose=False)]

    def infer_type(self, a, x):
        return [check_floats(A=a, X=x)]

    def infer_storage_type(self, a, x):
        return ["default"]

    @so.kernel(device=BOTH, stypes=_CSR_ANY)
    @runs_csr_dense(lambda op: False)  # JAX's native handler may run it (sparse_grad changes the gradient only)
    def csr(self, ctx, a, x, out):
        backend(ctx).spmm(ctx, a.indptr, a.indices, a.data, dense_operand(ctx, x), False, out.data)

    @so.kernel(device=BOTH)
    def dense(self, ctx, a, x, out):
        ctx.xp.matmul(a, x, out=out)

    def gradient(self, out_grads, inputs, outputs, needs=(True, True)):
        """A's values get the SDDMM, X gets A.T @ G; either is skipped when not needed (a
        constant adjacency in a GNN costs no SDDMM)."""
        a, x = inputs
        g = out_grads[0]
        if a.stype != "csr":
            return [so.dot(g, x, transpose_b=True) if needs[0] else None,
                    so.dot(a, g, transpose_a=True) if needs[1] else None]
        return [csr_sddmm(a, g, x) if needs[0] else None,
                csr_spmm_t(a, g, sparse_grad=self.sparse_grad) if needs[1] else None]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: csr A (an empty row; int32 indices too) @ dense X, a
        row_sparse gradient for X, dense A, A with no stored values."""
        from sparse_ops.sdk.testing import sample_array

        a, x = sample_array((4, 5), "csr", seed=1), sample_array((5, 2), seed=2)
        return [[a, x], ([a, x], {"sparse_grad": True}), [sample_array((4, 5), "csr", seed=3, index_dtype="int32"), x],
                [a.tostype("default"), x], [so.zeros((3, 5), stype="csr", dtype="float64"), x]]


@so.register("csr_spmm_t")
class CsrSpmmT(so.Op):
    """A.T @ G for csr A (n, m) and dense G (n, k): (m, k), dense, or row_sparse with
    ``sparse_grad=True`` (stored rows = A's non-empty columns).

    A is transposed once (a counting sort) and the product runs row by row: no atomics,
    the same result on every run. This is ``csr_spmm``'s gradient for X; its own
    gradients are ``csr_sddmm(A, G, H)`` for A and ``csr_spmm(A, H)`` for G.
    """

    arguments = ("A", "G")
    partition = "sum"  # A and G cut on their shared rows; the per-block products add up
    capacity = cap.columns_of("A")  # a row_sparse result stores A's non-empty columns
    sparse_grad = so.Param(bool, False, "row_sparse output holding only A's non-empty columns")

    def infer_shape(self, a, g):
        return [_product_shapes(a, g, "A", "G", transpose=True)]

    def infer_type(self, a, g):
        return [check_floats(A=a, G=g)]

    def infer_storage_type(self, a, g):
        return ["row_sparse" if self.sparse_grad and a == "csr" else "default"]

    @so.kernel(device=BOTH, stypes=_CSR_ANY)
    def csr(self, ctx, a, g, out):
        spmm_t(ctx, a, dense_operand(ctx, g), out)

    @so.kernel(device=BOTH)
    def dense(self, ctx, a, g, out):
        ctx.xp.matmul(a.T, g, out=out)

    def gradient(self, out_grads, inputs, outputs, needs=(True, True)):
        a, g = inputs
        h = out_grads[0]
        if a.stype != "csr":
            return [so.dot(g, h, transpose_b=True) if needs[0] else None, so.dot(a, h) if needs[1] else None]
        return [csr_sddmm(a, g, h) if needs[0] else None, csr_spmm(a, h) if needs[1] else None]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: csr A.T @ dense G, dense and row_sparse results, dense A."""
        from sparse_ops.sdk.testing import sample_array

        a, g = sample_array((4, 5), "csr", seed=1), sample_array((4, 2), seed=2)
        return [[a, g], ([a, g], {"sparse_grad": True}), [a.tostype("default"), g],
                [so.zeros((4, 5), stype="csr", dtype="float64"), g]]


@so.register("csr_sddmm")
class CsrSddmm(so.Op):
    """Sampled dense-dense product: for each stored (i, j) of csr A (n, m), sum_k P[i, k]
    Q[j, k] with P (n, k), Q (m, k); a csr with A's structure (A's values are not used).

    ``csr_spmm``'s gradient for A's stored values; also the edge scores of graph attention
    (``csr_sddmm(A, queries, keys)``). Gradients: P gets ``csr_spmm(H, Q)``, Q gets
    ``csr_spmm_t(H, P)``, with H the head gradient read at A's positions; A gets none.
    """

    arguments = ("A", "P", "Q")
    backward_needs_inputs = ("A", "P", "Q")
    capacity = cap.same_as("A")  # A's structure
    partition, partition_args = "rows", ("A", "P")  # Q whole

    def infer_shape(self, a, p, q):
        n, m = matrix("A", a)
        pn, k = matrix("P", p)
        qm, qk = matrix("Q", q)
        if pn != n or qm != m or qk != k:
            raise ValueError(f"A (n, m) needs P (n, k) and Q (m, k); got A {tuple(a)}, P {tuple(p)}, Q {tuple(q)}")
        return [(n, m)]

    def infer_type(self, a, p, q):
        return [check_floats(P=p, Q=q)]

    def infer_storage_type(self, a, p, q):
        if a != "csr":
            raise ValueError(f"A must be csr (its stored positions choose where to sample), got {a}")
        return ["csr"]

    @so.kernel(device=BOTH, stypes=("csr", "*", "*"))
    def csr(self, ctx, a, p, q, out):
        values = ctx.alloc_like(out, a)
        backend(ctx).sddmm(ctx, a.indptr, a.indices, dense_operand(ctx, p), dense_operand(ctx, q), values)

    def gradient(self, out_grads, inputs, outputs):
        a, p, q = inputs
        h = csr_sample(a, out_grads[0])
        return [None, csr_spmm(h, q), csr_spmm_t(h, p)]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: csr A (an empty row) with dense P and Q, A with no stored values."""
        from sparse_ops.sdk.testing import sample_array

        p, q = sample_array((4, 2), seed=2), sample_array((5, 2), seed=3)
        return [[sample_array((4, 5), "csr", seed=1), p, q], [so.zeros((4, 5), stype="csr", dtype="float64"), p, q]]

    def reference(self, a, p, q):
        """NumPy reference for ``opcheck``: (P @ Q.T) at A's nonzeros (the samples store no zeros)."""
        import numpy as np

        return np.where(a != 0, p @ q.T, 0.0)


@so.register("csr_sample")
class CsrSample(so.Op):
    """H read at the positions csr A stores: a csr with A's structure and H's values
    (zeros where H stores nothing). H may be dense, csr or row_sparse; A's values are not
    used. The gradient for H is the head gradient read at A's positions."""

    arguments = ("A", "H")
    backward_needs_inputs = ("A",)
    partition = "rows"
    capacity = cap.same_as("A")  # A's structure

    def infer_shape(self, a, h):
        matrix("A", a)
        if tuple(h) != tuple(a):
            raise ValueError(f"H must have A's shape {tuple(a)}, got {tuple(h)}")
        return [tuple(a)]

    def infer_type(self, a, h):
        return [check_floats(H=h)]

    def infer_storage_type(self, a, h):
        if a != "csr":
            raise ValueError(f"A must be csr (its stored positions choose where to read H), got {a}")
        return ["csr"]

    @so.kernel(device=BOTH, stypes=("csr", "*"))
    def csr(self, ctx, a, h, out):
        sample_values(ctx, a, h, ctx.alloc_like(out, a))

    def gradient(self, out_grads, inputs, outputs):
        return [None, csr_sample(inputs[0], out_grads[0])]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: csr A read from a dense and from a csr H."""
        from sparse_ops.sdk.testing import sample_array

        a = sample_array((4, 5), "csr", seed=1)
        return [[a, sample_array((4, 5), seed=2)], [a, sample_array((4, 5), "csr", seed=3)]]

    def reference(self, a, h):
        """NumPy reference for ``opcheck``: H at A's nonzeros (the samples store no zeros)."""
        import numpy as np

        return np.where(a != 0, h, 0.0)


csr_spmm = so.dispatch.op_function("csr_spmm")
csr_spmm_t = so.dispatch.op_function("csr_spmm_t")
csr_sddmm = so.dispatch.op_function("csr_sddmm")
csr_sample = so.dispatch.op_function("csr_sample")

__all__ = ["csr_spmm", "csr_spmm_t", "csr_sddmm", "csr_sample"]
