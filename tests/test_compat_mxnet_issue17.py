"""Issue 17: the MXNet face's new operators, namespaces and behaviours, against NumPy/SciPy."""
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.special as sps

import sparse_ops.compat.mxnet as mx

ZERO_KEEPING = ["round", "rint", "fix", "floor", "ceil", "trunc", "sin", "tan", "arcsin", "arctan", "sinh",
                "arcsinh", "arctanh", "degrees", "radians", "expm1", "cbrt"]
DENSE_RESULT = ["cos", "arccos", "cosh"]
REFS = {"round": lambda x: np.sign(x) * np.floor(np.abs(x) + 0.5), "fix": np.trunc, "rsqrt": lambda x: 1 / np.sqrt(x),
        "rint": lambda x: np.where(x - np.floor(x) <= np.ceil(x) - x, np.floor(x), np.ceil(x)),  # MXNet's: halves down
        "gamma": sps.gamma, "gammaln": sps.gammaln}


def _x():
    v = np.array([[0.0, 0.5, -0.25], [0.0, 0.0, 0.0], [-0.75, 0.0, 0.4]], dtype=np.float32)
    return v


@pytest.mark.parametrize("name", ZERO_KEEPING + DENSE_RESULT)
@pytest.mark.parametrize("stype", ["default", "csr", "row_sparse"])
def test_unary_math_values_and_storage(name, stype):
    v = _x()
    x = mx.nd.array(v).tostype(stype)
    y = getattr(mx.nd, name)(x)
    ref = (REFS[name] if name in REFS else getattr(np, name))(v.astype(np.float64))
    np.testing.assert_allclose(y.asnumpy(), ref, rtol=1e-5, atol=1e-6)
    expected = stype if name in ZERO_KEEPING else "default"
    assert y.stype == expected
    assert getattr(x, name)().stype == expected  # the fluent method


@pytest.mark.parametrize("name", ["log2", "log10", "rsqrt", "reciprocal", "gamma", "gammaln", "arccosh"])
def test_unary_math_positive_domain(name):
    v = np.array([1.5, 2.0, 3.25], dtype=np.float64)
    y = getattr(mx.nd, name)(mx.nd.array(v, dtype=np.float64))
    np.testing.assert_allclose(y.asnumpy(), (REFS[name] if name in REFS else getattr(np, name))(v), rtol=1e-12)


def test_round_halves_away_from_zero():
    assert mx.nd.round(mx.nd.array([0.5, 1.5, -2.5, 2.4])).asnumpy().tolist() == [1.0, 2.0, -3.0, 2.0]
    # MXNet's rint takes the floor where it is no farther than the ceiling: halves go down
    assert mx.nd.rint(mx.nd.array([0.5, 1.5, -2.5, -0.5])).asnumpy().tolist() == [0.0, 1.0, -3.0, -1.0]
    assert mx.nd.rint(mx.nd.array([-1.5, 1.5, -1.9, 1.9, 2.1])).asnumpy().tolist() == [-2, 1, -2, 2, 2]  # its doc


@pytest.mark.parametrize("name,deriv", [("sin", np.cos), ("arctan", lambda x: 1 / (1 + x * x)),
                                        ("gammaln", sps.digamma), ("cbrt", lambda x: x ** (-2 / 3) / 3),
                                        ("floor", np.zeros_like)])
def test_unary_math_gradients(name, deriv):
    v = np.array([0.3, 1.2, 2.5])
    x = mx.nd.array(v, dtype=np.float64)
    x.attach_grad()
    with mx.autograd.record():
        y = getattr(mx.nd, name)(x)
    y.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), deriv(v), rtol=1e-10)


def test_broadcast_like():
    v = np.arange(4.0).reshape(1, 4)
    for stype in ("default", "csr"):
        y = mx.nd.array(v).tostype(stype).broadcast_like(mx.nd.ones((3, 4)))
        np.testing.assert_array_equal(y.asnumpy(), np.broadcast_to(v, (3, 4)))
        assert y.stype == "default"
    y = mx.nd.broadcast_like(mx.nd.array(v), mx.nd.ones((2, 5)), lhs_axes=(0,), rhs_axes=(0,))
    assert y.shape == (2, 4)
    with pytest.raises(mx.base.MXNetError, match="broadcast_like"):
        mx.nd.broadcast_like(mx.nd.ones((2, 4)), mx.nd.ones((3, 4)))


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_contrib_getnnz(axis):
    m = sp.random(6, 5, density=0.4, format="csr", random_state=3)
    got = mx.nd.contrib.getnnz(mx.nd.sparse.csr_matrix(m), axis=axis).asnumpy()
    np.testing.assert_array_equal(got, np.atleast_1d(m.getnnz(axis=axis)))
    assert got.dtype == np.int64
    with pytest.raises(mx.base.MXNetError, match="getnnz"):
        mx.nd.contrib.getnnz(mx.nd.ones((2, 2)))


@pytest.mark.parametrize("c,stype", [(0.0, "csr"), (1.0, "default")])
def test_contrib_quadratic(c, stype):
    m = sp.random(4, 5, density=0.5, format="csr", random_state=1, dtype=np.float32)
    y = mx.nd.contrib.quadratic(mx.nd.sparse.csr_matrix(m), a=0.5, b=-2.0, c=c)
    d = m.toarray()
    np.testing.assert_allclose(y.asnumpy(), 0.5 * d * d - 2.0 * d + c, rtol=1e-5, atol=1e-6)
    assert y.stype == stype


def test_sparse_embedding_gives_row_sparse_grad():
    w = mx.nd.array(np.arange(12.0).reshape(4, 3))
    w.attach_grad(stype="row_sparse")
    with mx.autograd.record():
        y = mx.nd.contrib.SparseEmbedding(mx.nd.array([1, 3]), w, input_dim=4, output_dim=3)
    y.backward()
    assert w.grad.stype == "row_sparse"
    np.testing.assert_array_equal(w.grad.asnumpy()[[1, 3]], np.ones((2, 3)))


def test_random_family_moments_and_out():
    mx.random.seed(7)
    assert abs(mx.nd.random.gamma(2, 3, shape=(40000,)).asnumpy().mean() - 6) < 0.15
    assert abs(mx.nd.random.exponential(2, shape=(40000,)).asnumpy().mean() - 2) < 0.05
    p = mx.nd.random.poisson(3, shape=(40000,)).asnumpy()
    assert abs(p.mean() - 3) < 0.05 and np.all(p == np.round(p))
    nb = mx.nd.random.negative_binomial(k=3, p=0.4, shape=(40000,)).asnumpy()
    assert abs(nb.mean() - 3 * 0.6 / 0.4) < 0.15
    g = mx.nd.random.generalized_negative_binomial(mu=3, alpha=0.5, shape=(40000,)).asnumpy()
    assert abs(g.var() - (3 + 0.5 * 9)) < 0.5
    dns, rsp = mx.nd.zeros((5, 5)), mx.nd.zeros((5, 5), stype="row_sparse")
    mx.random.seed(1)
    mx.nd.random.gamma(shape=(5, 5), out=dns)
    mx.random.seed(1)
    mx.nd.random.gamma(shape=(5, 5), out=rsp)
    assert rsp.stype == "row_sparse"
    np.testing.assert_array_equal(dns.asnumpy(), rsp.asnumpy())
    with pytest.raises(mx.base.MXNetError, match="alpha"):
        mx.nd.random.gamma(alpha=-1)


def test_non_operator_api():
    assert mx.base.py_str(b"abc") == "abc" and mx.base._as_list(3) == [3] and mx.base._as_list((1, 2)) == [1, 2]
    assert mx.Context.default_ctx == mx.cpu()
    with mx.cpu(0):
        assert mx.Context.default_ctx == mx.cpu(0)
    x = mx.nd.array([[1.0, 0]])
    assert (x._num_aux, x.tostype("row_sparse")._num_aux, x.tostype("csr")._num_aux) == (0, 1, 2)
    with mx.name.Prefix("p_") as nm:
        assert nm.get(None, "fc") == "p_fc0" and nm.get(None, "fc") == "p_fc1" and nm.get("x", "fc") == "p_x"
        assert mx.name.current() is nm
    assert mx.use_np_shape(len)([1, 2]) == 2 and not mx.is_np_shape()


def test_argument_errors_are_mxnet_errors():
    with pytest.raises(mx.base.MXNetError, match=r"retain\(\) missing input 'indices'") as e:
        mx.nd.sparse.retain(mx.nd.ones((2, 2)), invalid_arg="garbage_value")
    assert isinstance(e.value, TypeError)
    rsp = mx.nd.ones((2, 2)).tostype("row_sparse")
    with pytest.raises(mx.base.MXNetError, match="invalid_arg"):
        mx.nd.sparse.retain(rsp, mx.nd.array([0]), invalid_arg="garbage_value")


def test_fully_connected_column_bias():
    x, w, b = np.ones((3, 4)), np.arange(8.0).reshape(2, 4), np.array([[1.0], [2.0]])
    y = mx.nd.FullyConnected(mx.nd.array(x), mx.nd.array(w), mx.nd.array(b), num_hidden=2)
    np.testing.assert_allclose(y.asnumpy(), x @ w.T + b.ravel())
    bb = mx.nd.array(b)
    bb.attach_grad()
    with mx.autograd.record():
        y = mx.nd.FullyConnected(mx.nd.array(x), mx.nd.array(w), bb, num_hidden=2)
    y.backward()
    assert bb.grad.shape == (2, 1)
    np.testing.assert_allclose(bb.grad.asnumpy(), [[3.0], [3.0]])
    with pytest.raises(mx.base.MXNetError, match="bias"):
        mx.nd.FullyConnected(mx.nd.array(x), mx.nd.array(w), mx.nd.ones((2, 2)), num_hidden=2)


def test_test_utils_mxnet_tolerances_and_helpers():
    from sparse_ops.compat.mxnet import test_utils as tu

    tu.assert_almost_equal(np.float32([1.0]), np.float32([1.0 + 5e-5]))  # float32: rtol 1e-4
    with pytest.raises(AssertionError):
        tu.assert_almost_equal(np.float64([1.0]), np.float64([1.0 + 5e-5]))  # float64: rtol 1e-5
    assert not tu.almost_equal(np.float32([1.0]), np.float32([1.0 + 5e-5]))  # almost_equal: 1e-5
    assert tu.np_reduce(np.ones((2, 3, 4)), (0, 2), True, np.sum).shape == (1, 3, 1)
    np.testing.assert_array_equal(tu.assign_each2(np.ones(3), np.arange(3.0), lambda a, b: a + b), [1, 2, 3])
    csr, _ = tu.rand_sparse_ndarray((8, 16), "csr", density=0.5, distribution="powerlaw")
    nnz = np.diff(csr.indptr.asnumpy())
    assert nnz[2] == 2 * nnz[1] and csr.nnz == 64
    import os
    with tu.environment("SPARSE_OPS_TEST_VAR", "1"):
        assert os.environ["SPARSE_OPS_TEST_VAR"] == "1"
    assert "SPARSE_OPS_TEST_VAR" not in os.environ
    ns = {}
    exec("from sparse_ops.compat.mxnet.test_utils import *", ns)
    assert ns["mx"] is mx and ns["np"] is np and ns["Context"] is mx.Context
