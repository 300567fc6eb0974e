"""``csr_row_softmax``: softmax over each row's stored values, for sparse attention
(attention weights of each node over its neighbours, or each query over its allowed
keys). Rows without stored values stay empty; the output shares A's structure."""
from __future__ import annotations

import sparse_ops as so
from sparse_ops.sdk import capacity as cap

from ._common import BOTH, backend, check_floats, matrix, sample_values


@so.register("csr_row_softmax")
class CsrRowSoftmax(so.Op):
    """Softmax over the stored values of each row of csr A (float32 or float64): a csr
    with A's structure whose rows each sum to 1 (empty rows stay empty). Positions A does
    not store are masked out, not zeros taking part in the softmax. The gradient is a csr
    on the same structure (``_csr_row_softmax_backward``)."""

    arguments = ("A",)
    backward_needs_inputs = ()
    partition = "rows"  # each row's softmax on its own
    capacity = cap.same_as("A")  # A's structure
    backward_needs_outputs = ("output",)

    def infer_shape(self, a):
        matrix("A", a)
        return [tuple(a)]

    def infer_type(self, a):
        return [check_floats(A=a)]

    def infer_storage_type(self, a):
        if a != "csr":
            raise ValueError(f"A must be csr (the softmax runs over each row's stored values), got {a}")
        return ["csr"]

    @so.kernel(device=BOTH, stypes=("csr",))
    def csr(self, ctx, a, out):
        backend(ctx).row_softmax(ctx, a.indptr, a.data, ctx.alloc_like(out, a))

    def gradient(self, out_grads, inputs, outputs):
        return [_csr_row_softmax_backward(outputs[0], out_grads[0])]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: csr (an empty row; int64 and int32 indices), float64 and
        float32, and a csr with no stored values."""
        from sparse_ops.sdk.testing import sample_array

        return [[sample_array((4, 5), "csr", seed=1)], [sample_array((3, 4), "csr", seed=2, index_dtype="int32")],
                [sample_array((3, 4), "csr", seed=3, dtype="float32")], [so.zeros((3, 3), stype="csr", dtype="float64")]]

    def reference(self, a):
        """NumPy reference for ``opcheck``: the softmax over each row's nonzero values (the
        samples store no zeros, so these are the stored values)."""
        import numpy as np

        stored = a != 0
        e = np.where(stored, np.exp(a - np.max(np.where(stored, a, -np.inf), axis=1, keepdims=True,
                                                initial=-np.inf)), 0.0)
        return e / np.maximum(e.sum(axis=1, keepdims=True), np.finfo(a.dtype).tiny)


@so.register("_csr_row_softmax_backward")
class CsrRowSoftmaxBackward(so.Op):
    """The gradient of ``csr_row_softmax`` from its output Y and the head gradient G (any
    storage type; read at Y's positions): dA = Y * (G - sum_row(G * Y)), a csr with Y's
    structure."""

    arguments = ("output", "out_grad")
    differentiable = False
    partition = "rows"
    capacity = cap.same_as("output")  # Y's structure

    def infer_shape(self, y, g):
        matrix("output", y)
        if tuple(g) != tuple(y):
            raise ValueError(f"out_grad must have the output's shape {tuple(y)}, got {tuple(g)}")
        return [tuple(y)]

    def infer_type(self, y, g):
        return [check_floats(output=y, out_grad=g)]

    def infer_storage_type(self, y, g):
        if y != "csr":
            raise ValueError(f"output must be csr, got {y}")
        return ["csr"]

    @so.kernel(device=BOTH, stypes=("csr", "*"))
    def csr(self, ctx, y, g, out):
        head = ctx.xp.empty(y.nnz, dtype=y.dtype)
        sample_values(ctx, y, g, head)
        backend(ctx).row_softmax_backward(ctx, y.indptr, y.data, head, ctx.alloc_like(out, y))

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: a softmax output with a dense, a csr and a row_sparse head gradient."""
        from sparse_ops.sdk.testing import sample_array

        y = csr_row_softmax(sample_array((4, 5), "csr", seed=1))
        return [[y, sample_array((4, 5), seed=2)], [y, sample_array((4, 5), "csr", seed=3)],
                [y, sample_array((4, 5), "row_sparse", seed=4)]]

    def reference(self, y, g):
        """NumPy reference for ``opcheck``: Y * (G - sum_row(G * Y)) at Y's nonzeros (softmax
        outputs are positive, so these are Y's stored positions)."""
        import numpy as np

        return np.where(y != 0, y * (g - (g * y).sum(axis=1, keepdims=True)), 0.0)


csr_row_softmax = so.dispatch.op_function("csr_row_softmax")
_csr_row_softmax_backward = so.dispatch.op_function("_csr_row_softmax_backward")

__all__ = ["csr_row_softmax"]
