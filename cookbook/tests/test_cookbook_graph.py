"""gcn_norm: D^-1/2 (A + I) D^-1/2 of a csr adjacency."""
import numpy as np
import pytest

import sparse_ops as so
from cookbook_helpers import csr
from sparse_ops.dispatch import InferenceError
from sparse_ops.sdk.testing import opcheck
from sparse_ops_cookbook import gcn_norm

# a path 0-1-2 with a weighted self loop on 2, and an isolated node 3
ADJ = np.array([[0, 1, 0, 0], [1, 0, 1, 0], [0, 1, 2, 0], [0, 0, 0, 0]], dtype=np.float64)


def reference(a: np.ndarray, self_loops: bool) -> np.ndarray:
    a = a + np.eye(len(a)) if self_loops else a
    deg = a.sum(axis=1)
    dinv = np.where(deg > 0, 1 / np.sqrt(np.where(deg > 0, deg, 1)), 0)
    return a * dinv[:, None] * dinv[None, :]


@pytest.mark.parametrize("dtype, index_dtype", [("float32", "int64"), ("float64", "int64"), ("float64", "int32")])
@pytest.mark.parametrize("self_loops", [True, False])
def test_gcn_norm_matches_reference(dtype, index_dtype, self_loops):
    a = csr(ADJ, dtype=dtype, index_dtype=index_dtype)
    out = gcn_norm(a, add_self_loops=self_loops)
    assert (out.stype, out.dtype, out.indices.dtype) == ("csr", np.dtype(dtype), np.dtype(index_dtype))
    out.check_format(full_check=True)
    np.testing.assert_allclose(out.asnumpy(), reference(ADJ, self_loops), rtol=1e-6)
    assert out.nnz == a.nnz + (3 if self_loops else 0)  # diagonal of 0, 1, 3 inserted; 2's kept


def test_gcn_norm_dense_and_opcheck():
    rng = np.random.default_rng(0)
    adj = (rng.random((9, 9)) < 0.3).astype(np.float64)
    adj = np.maximum(adj, adj.T)
    np.testing.assert_allclose(gcn_norm(so.array(adj)).asnumpy(), reference(adj, True))
    samples = [[csr(adj)], ([csr(adj)], {"add_self_loops": False}), [so.zeros((3, 3), stype="csr", dtype="float64")]]
    assert opcheck("gcn_norm", samples) == 3


def test_gcn_norm_needs_a_square_matrix():
    with pytest.raises(InferenceError, match="square"):
        gcn_norm(csr(np.ones((2, 3))))
    assert not so.get_op("gcn_norm").differentiable
