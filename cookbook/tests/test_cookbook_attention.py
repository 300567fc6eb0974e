"""csr_row_softmax: softmax over each row's stored values, and its gradient."""
import numpy as np
import pytest

import sparse_ops as so
from cookbook_helpers import csr, random_csr, random_dense, serial_and_parallel
from sparse_ops import autograd as ag
from sparse_ops.dispatch import InferenceError
from sparse_ops.sdk.testing import check_numeric_gradient, opcheck
from sparse_ops_cookbook import csr_row_softmax, csr_sddmm, csr_spmm


def reference(a: so.CSRNDArray) -> np.ndarray:
    """Row softmax of the stored values, as a dense array with zeros elsewhere."""
    d, mask = a.asnumpy().astype(np.float64), a.asnumpy() != 0
    out = np.zeros_like(d)
    for r in range(d.shape[0]):
        if mask[r].any():
            e = np.exp(d[r, mask[r]] - d[r, mask[r]].max())
            out[r, mask[r]] = e / e.sum()
    return out


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_softmax_matches_reference_and_keeps_structure(dtype):
    a = random_csr(20, 15, 0.25, seed=1, dtype=dtype, empty_rows=[0, 5])
    y = csr_row_softmax(a)
    assert (y.stype, y.dtype, y.nnz) == ("csr", np.dtype(dtype), a.nnz)
    np.testing.assert_array_equal(y.indices, a.indices)
    np.testing.assert_allclose(y.asnumpy(), reference(a), rtol=1e-6, atol=1e-7)
    sums = y.asnumpy().sum(axis=1)
    np.testing.assert_allclose(sums[[r for r in range(20) if r not in (0, 5)]], 1, rtol=1e-5)
    assert sums[0] == sums[5] == 0  # empty rows stay empty
    assert so.explain("csr_row_softmax", a)["dispatch_mode"] == "fcompute_ex"


def test_softmax_is_stable_for_large_values():
    a = csr(np.array([[1000.0, 0, 1001.0], [-1000.0, -999.0, 0]]))
    e = np.exp([-1.0, 0.0])
    np.testing.assert_allclose(csr_row_softmax(a).data, np.concatenate([e / e.sum(), e / e.sum()]))


def test_softmax_opcheck_and_gradients():
    a = random_csr(10, 8, 0.35, seed=2, empty_rows=[3])
    assert opcheck("csr_row_softmax", [[a], [so.zeros((4, 4), stype="csr", dtype="float64")]]) == 2
    y = csr_row_softmax(a)
    g = random_dense(10, 8, 1.0, seed=3)
    want = y.asnumpy() * (g - (g * y.asnumpy()).sum(axis=1, keepdims=True)) * (a.asnumpy() != 0)
    for head in (so.array(g), csr(g), csr(g * (a.asnumpy() != 0))):  # dense, other structure, same structure
        dx = so.ops._csr_row_softmax_backward(y, head)
        assert dx.stype == "csr" and dx.nnz == a.nnz
        np.testing.assert_allclose(dx.asnumpy(), want, atol=1e-12)


def test_graph_attention_layer_gradient():
    """scores = sddmm(A, Q, K); weights = row softmax; out = weights @ V."""
    a = random_csr(7, 7, 0.4, seed=4)
    q, k, v = (so.array(random_dense(7, 3, 1.0, seed=s)) for s in (5, 6, 7))
    check_numeric_gradient(lambda q_, k_, v_: csr_spmm(csr_row_softmax(csr_sddmm(a, q_, k_)), v_), [q, k, v])
    x = a.copy()
    x.attach_grad()
    with ag.record():
        y = csr_spmm(csr_row_softmax(x), v)
    y.backward()
    assert x.grad.stype == "csr"


def test_softmax_needs_csr():
    with pytest.raises(InferenceError, match="A must be csr"):
        csr_row_softmax(so.ones((2, 2), dtype="float64"))
    with pytest.raises(InferenceError, match="float32 or float64"):
        csr_row_softmax(so.zeros((2, 2), stype="csr", dtype="int32"))


def test_softmax_serial_and_parallel_forms_agree_exactly(monkeypatch):
    a = random_csr(300, 40, 0.2, seed=8, empty_rows=[0, 63, 64, 299])
    (serial,), (parallel,) = serial_and_parallel(monkeypatch, lambda: [csr_row_softmax(a)])
    np.testing.assert_array_equal(serial, parallel)
    np.testing.assert_allclose(serial, reference(a), rtol=1e-12, atol=1e-15)
