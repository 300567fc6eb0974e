"""transpose_csr and transpose_row_sparse (MXNet lib_custom_op's transposecsr / transposerowsp)."""
import numpy as np
import pytest

import sparse_ops as so
from cookbook_helpers import csr, random_csr, random_dense
from sparse_ops.dispatch import InferenceError
from sparse_ops.sdk.testing import check_numeric_gradient, opcheck
from sparse_ops_cookbook import transpose_csr, transpose_row_sparse


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_csr_transpose_matches_numpy_and_keeps_index_dtype(dtype, index_dtype):
    x = random_csr(40, 25, 0.15, seed=1, dtype=dtype, index_dtype=index_dtype, empty_rows=[0, 7])
    y = transpose_csr(x)
    assert (y.stype, y.shape, y.dtype) == ("csr", (25, 40), np.dtype(dtype))
    assert y.indices.dtype == np.dtype(index_dtype) and y.indptr.dtype == np.dtype(index_dtype)
    y.check_format(full_check=True)  # rows sorted, indices unique
    np.testing.assert_array_equal(y.asnumpy(), x.asnumpy().T)
    assert so.explain("transpose_csr", x)["dispatch_mode"] == "fcompute_ex"


def test_csr_transpose_edge_cases():
    empty = so.zeros((3, 5), stype="csr")
    assert transpose_csr(empty).shape == (5, 3) and transpose_csr(empty).nnz == 0
    assert transpose_csr(so.zeros((0, 4), stype="csr")).shape == (4, 0)
    d = random_dense(4, 3, 0.5, seed=2)
    dense_out = transpose_csr(so.array(d))
    assert dense_out.stype == "default"
    np.testing.assert_array_equal(dense_out.asnumpy(), d.T)


def test_csr_transpose_opcheck_and_gradient():
    x = random_csr(12, 9, 0.3, seed=3)
    assert opcheck("transpose_csr", [[x], [x.tostype("default")], [so.zeros((3, 5), stype="csr")]]) == 3
    grads = check_numeric_gradient(lambda a: transpose_csr(a), [x])
    assert grads[0].stype == "csr"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_row_sparse_transpose_keeps_only_nonzero_columns(dtype):
    d = np.zeros((6, 5), dtype=dtype)
    d[1] = [1, 0, 2, 0, 0]
    d[4] = [0, 0, 3, 0, -1]
    y = transpose_row_sparse(so.array(d).tostype("row_sparse"))
    assert y.stype == "row_sparse" and y.dtype == np.dtype(dtype)
    assert y.indices.tolist() == [0, 2, 4]
    np.testing.assert_array_equal(y.asnumpy(), d.T)
    assert so.explain("transpose_row_sparse", so.array(d).tostype("row_sparse"))["dispatch_mode"] == "fcompute_ex"


def test_row_sparse_transpose_opcheck_and_gradient():
    r = csr(random_dense(10, 7, 0.3, seed=4)).tostype("row_sparse")
    assert opcheck("transpose_row_sparse", [[r], [r.tostype("default")], [so.zeros((4, 3), stype="row_sparse")]]) == 3
    check_numeric_gradient(lambda a: transpose_row_sparse(a), [r])


def test_transpose_errors():
    with pytest.raises(InferenceError, match="data must be 2-d"):
        transpose_row_sparse(so.zeros((2, 3, 4), stype="row_sparse"))
    with pytest.raises(InferenceError, match="float32, float64, int32 or int64"):
        transpose_csr(so.zeros((2, 3), stype="csr", dtype="float16"))
