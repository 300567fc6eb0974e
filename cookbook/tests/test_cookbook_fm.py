"""fm_interaction: the factorization-machine pairwise term and its row_sparse V gradient."""
import numpy as np
import pytest

import sparse_ops as so
from cookbook_helpers import normal, random_csr, serial_and_parallel
from sparse_ops import autograd as ag
from sparse_ops.dispatch import InferenceError
from sparse_ops.sdk.testing import check_numeric_gradient, opcheck
from sparse_ops_cookbook import fm_interaction


def pairwise(x: np.ndarray, v: np.ndarray) -> np.ndarray:
    """sum_{j < l} <v_j, v_l> x_ij x_il, by brute force."""
    gram = v @ v.T
    return np.array([sum(gram[j, l] * row[j] * row[l] for j in range(len(row)) for l in range(j + 1, len(row)))
                     for row in x])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fm_matches_the_pairwise_sum(dtype):
    x = random_csr(12, 9, 0.3, seed=1, dtype=dtype, empty_rows=[4])
    v = normal(9, 4, seed=2, dtype=dtype)
    out = fm_interaction(x, v)
    assert (out.stype, out.shape, out.dtype) == ("default", (12,), np.dtype(dtype))
    want = pairwise(x.asnumpy().astype(np.float64), v.asnumpy())
    np.testing.assert_allclose(out.asnumpy(), want, rtol=1e-5, atol=1e-5)
    assert out.asnumpy()[4] == 0
    assert so.explain("fm_interaction", x, v)["dispatch_mode"] == "fcompute_ex"


def test_fm_gradient_is_row_sparse_over_the_features_present():
    x = random_csr(10, 12, 0.2, seed=3)
    v = normal(12, 3, seed=4)
    present = np.flatnonzero(x.asnumpy().any(axis=0)).tolist()
    assert len(present) < 12
    v.attach_grad(stype="row_sparse")
    with ag.record():
        out = fm_interaction(x, v)
    out.backward()
    g = so.ops._fm_interaction_backward(x, v, so.ones(10, dtype="float64"))
    assert g.stype == "row_sparse" and g.indices.tolist() == present
    np.testing.assert_allclose(v.grad.asnumpy(), g.asnumpy())
    xd, vd = x.asnumpy(), v.asnumpy()
    want = xd.T @ (xd @ vd) - vd * (xd * xd).sum(axis=0)[:, None]
    np.testing.assert_allclose(g.asnumpy(), want, atol=1e-12)
    check_numeric_gradient(lambda v_: fm_interaction(x, v_), [v])


def test_fm_opcheck():
    x = random_csr(8, 6, 0.4, seed=5)
    v = normal(6, 3, seed=6)
    empty = so.zeros((3, 6), stype="csr", dtype="float64")
    assert opcheck("fm_interaction", [[x, v], [x.tostype("default"), v], [empty, v]]) == 3
    head = so.ones(8, dtype="float64")
    sparse_grad = so.ops._fm_interaction_backward(x, v, head)
    dense_grad = so.ops._fm_interaction_backward(x.tostype("default"), v, head)
    assert (sparse_grad.stype, dense_grad.stype) == ("row_sparse", "default")
    np.testing.assert_allclose(dense_grad.asnumpy(), sparse_grad.asnumpy(), atol=1e-12)


def test_fm_errors():
    with pytest.raises(InferenceError, match="one row per feature"):
        fm_interaction(random_csr(3, 4, 0.5), normal(5, 2))


def test_fm_serial_and_parallel_forms_agree_exactly(monkeypatch):
    """Forward and V gradient below and above the cpu kernels' work threshold."""
    x = random_csr(300, 150, 0.04, seed=7, empty_rows=[5, 128])
    v, head = normal(150, 6, seed=8), normal(300, seed=9)
    serial, parallel = serial_and_parallel(monkeypatch, lambda: [
        fm_interaction(x, v), so.ops._fm_interaction_backward(x, v, head)])
    for s, p in zip(serial, parallel):
        np.testing.assert_array_equal(s, p)
    xd, vd, hd = x.asnumpy(), v.asnumpy(), head.asnumpy()
    np.testing.assert_allclose(serial[0], 0.5 * (((xd @ vd) ** 2).sum(axis=1) - (xd ** 2) @ (vd ** 2).sum(axis=1)),
                               rtol=1e-10, atol=1e-12)
    want = xd.T @ (hd[:, None] * (xd @ vd)) - vd * ((xd * xd).T @ hd)[:, None]
    np.testing.assert_allclose(serial[1], want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("stype", ["csr", "default"])
def test_the_features_get_their_gradient_when_asked(stype):
    """dX_ij = g_i ((X V V^T)_ij - x_ij |v_j|^2) at X's stored values: finite differences
    agree, and a csr X gets a csr gradient of its structure."""
    x = random_csr(6, 8, 0.4, seed=3)
    x = x if stype == "csr" else x.tostype("default")
    v = normal(8, 3, seed=4)
    check_numeric_gradient(lambda a: fm_interaction(a, v), [x])
    x.attach_grad()
    with ag.record():
        y = fm_interaction(x, v)
    g = normal(6, 1, seed=5).asnumpy().ravel()
    y.backward(so.array(g))
    xd, vd = x.asnumpy(), v.asnumpy()
    want = g[:, None] * (xd @ vd @ vd.T - xd * (vd * vd).sum(axis=1)[None, :])
    assert x.grad.stype == stype
    np.testing.assert_allclose(x.grad.asnumpy(), np.where(xd != 0, want, 0) if stype == "csr" else want, rtol=1e-10,
                               atol=1e-12)
