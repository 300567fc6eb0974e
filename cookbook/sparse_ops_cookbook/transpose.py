"""``transpose_csr`` and ``transpose_row_sparse``: MXNet's ``lib_custom_op`` examples
(``transposecsr``, ``transposerowsp``) as kernel-first operators that keep their input's
storage type, on cpu and gpu."""
from __future__ import annotations

import numpy as np

import sparse_ops as so
from sparse_ops.sdk import capacity as cap

from ._common import BOTH, backend, matrix

_VALUES = tuple(np.dtype(t) for t in ("float32", "float64", "int32", "int64"))


def _check_values(dtype: np.dtype) -> list:
    if dtype not in _VALUES:
        raise TypeError(f"data must be float32, float64, int32 or int64, got {dtype.name}")
    return [dtype]


class _Transpose(so.Op):
    """What both transposes share: 2-d shape and value rules, the dense kernel, a gradient
    that is the transposed head gradient, and the storage type kept (``stype``)."""

    arguments = ("data",)
    backward_needs_inputs = ()
    stype = ""

    def infer_shape(self, data):
        rows, cols = matrix("data", data)
        return [(cols, rows)]

    def infer_type(self, data):
        return _check_values(data)

    def infer_storage_type(self, data):
        return [self.stype if data == self.stype else "default"]

    @so.kernel(device=BOTH)
    def dense(self, ctx, x, y):
        y[...] = x.T

    def gradient(self, out_grads, inputs, outputs):
        return [so.dispatch.op_function(self._opdef.name)(out_grads[0])]


@so.register("transpose_csr")
class TransposeCSR(_Transpose):
    """The transpose of a 2-d array: csr in, csr out (rows sorted, the input's index
    dtype kept); a dense input gives a dense output. The gradient is the transposed head
    gradient."""

    stype = "csr"
    capacity = cap.same_as("data")  # the same values, moved

    @so.kernel(device=BOTH, stypes=("csr",))
    def csr(self, ctx, x, y):
        data, indices, indptr = ctx.alloc_csr(y, x.nnz, index_dtype=x.indices.dtype)
        backend(ctx).transpose(ctx, x.shape[1], x.indptr, x.indices, x.data, indptr, indices, data)

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: csr (int64 and int32 indices, an empty row), dense, no stored values."""
        from sparse_ops.sdk.testing import sample_array

        return [[sample_array((4, 5), "csr", seed=1)], [sample_array((3, 4), "csr", seed=2, index_dtype="int32")],
                [sample_array((4, 5))], [so.zeros((3, 5), stype="csr", dtype="float64")]]


@so.register("transpose_row_sparse")
class TransposeRowSparse(_Transpose):
    """The transpose of a 2-d array: row_sparse in, row_sparse out, whose stored rows are
    the columns holding a non-zero (row j of the result is column j of the stored rows);
    a dense input gives a dense output. The gradient is the transposed head gradient."""

    stype = "row_sparse"
    capacity = cap.columns_of("data")  # a stored row per column holding a non-zero

    @so.kernel(device=BOTH, stypes=("row_sparse",))
    def rsp(self, ctx, x, y):
        values, rows = backend(ctx).rsp_transpose(ctx, x.shape[0], x.indices, x.data)
        ctx.set_row_sparse(y, values, rows)

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: row_sparse (int64 and int32 indices, a missing row), dense, no stored rows."""
        from sparse_ops.sdk.testing import sample_array

        return [[sample_array((4, 3), "row_sparse", seed=1)],
                [sample_array((3, 4), "row_sparse", seed=2, index_dtype="int32")],
                [sample_array((4, 3))], [so.zeros((4, 3), stype="row_sparse", dtype="float64")]]


transpose_csr = so.dispatch.op_function("transpose_csr")
transpose_row_sparse = so.dispatch.op_function("transpose_row_sparse")

__all__ = ["transpose_csr", "transpose_row_sparse"]
