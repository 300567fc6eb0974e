"""``x @ y`` on every container: the same dispatch as ``dot`` (values against NumPy and
SciPy, storage types as ``dot`` gives them, the fallback warning), NumPy's 1-d rules,
clear errors, NumPy arrays on the other side, and the recorded gradient."""
import itertools
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import sparse_ops as so
from sparse_ops import autograd as ag

STYPES = ["default", "row_sparse", "csr"]


def data(rng, shape, density=0.4):
    """Small integers with zeros: exact in float32 and float64, whatever the summation order."""
    values = rng.integers(1, 6, size=shape) * (rng.random(shape) < density)
    return values.astype(np.float32)


def quietly(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", so.StorageFallbackWarning)
        return fn()


@pytest.mark.parametrize("lhs_stype,rhs_stype", list(itertools.product(STYPES, STYPES)))
def test_matmul_is_dot_for_every_storage_pair(lhs_stype, rhs_stype):
    rng = np.random.default_rng(3)
    a, b = data(rng, (5, 4)), data(rng, (4, 3))
    x, y = so.array(a).tostype(lhs_stype), so.array(b).tostype(rhs_stype)
    got = quietly(lambda: x @ y)
    via_dot = quietly(lambda: so.dot(x, y))
    assert got.stype == via_dot.stype
    assert got.shape == (5, 3) and got.dtype == np.float32
    np.testing.assert_array_equal(got.asnumpy(), a @ b)
    np.testing.assert_array_equal(got.asnumpy(), via_dot.asnumpy())


def test_matmul_storage_types_follow_dot():
    rng = np.random.default_rng(4)
    a, b = data(rng, (6, 5)), data(rng, (5, 4))
    d, c = so.array(a), so.array(a).tostype("csr")
    assert (d @ so.array(b)).stype == "default"
    assert (c @ so.array(b)).stype == "default"
    assert (d @ so.array(b).tostype("csr")).stype == "csr"  # dense @ csr -> csr (MXNet 1.9)
    # against SciPy's own product
    ref = sp.csr_matrix(a) @ b
    np.testing.assert_array_equal((c @ so.array(b)).asnumpy(), ref)
    ref = a @ sp.csr_matrix(b)
    np.testing.assert_array_equal((d @ so.array(b).tostype("csr")).asnumpy(), np.asarray(ref))


def test_matmul_warns_where_dot_falls_back():
    rng = np.random.default_rng(5)
    x = so.array(data(rng, (4, 4))).tostype("row_sparse")
    y = so.array(data(rng, (4, 2))).tostype("row_sparse")
    so.dispatch._warned.clear()  # the warning comes once per signature: forget earlier ones
    with pytest.warns(so.StorageFallbackWarning, match="dot"):
        x @ y.tostype("csr")  # r,c: no storage-aware kernel


@pytest.mark.parametrize("stype", STYPES)
def test_matmul_vectors_as_numpy(stype):
    rng = np.random.default_rng(6)
    a, v, w = data(rng, (3, 4), 0.8), data(rng, (4,), 1.0), data(rng, (3,), 1.0)
    m = so.array(a).tostype(stype)
    mv = quietly(lambda: m @ so.array(v))
    assert mv.shape == (3,)
    np.testing.assert_array_equal(mv.asnumpy(), a @ v)
    wm = quietly(lambda: so.array(w) @ m)
    assert wm.shape == (4,)
    np.testing.assert_array_equal(wm.asnumpy(), w @ a)
    vv = so.array(v) @ so.array(v)
    assert vv.shape == () and vv.item() == float(v @ v)


def test_matmul_errors():
    m = so.array(np.ones((3, 4), np.float32))
    with pytest.raises(ValueError, match=r"do not align: 4 != 3"):
        m @ so.array(np.ones((3, 2), np.float32))
    with pytest.raises(ValueError, match="1-d and 2-d operands.*sparse_ops.dot"):
        m @ so.array(np.ones((4, 2, 2), np.float32))
    with pytest.raises(ValueError, match="lhs has shape"):
        so.array(np.float32(2)) @ m
    with pytest.raises(TypeError):
        m @ "a"


def test_matmul_with_numpy_on_the_other_side_is_numpys():
    """As with ``+``: NumPy computes ``container @ ndarray`` through ``__array__``."""
    a, b = np.arange(6.0).reshape(2, 3), np.arange(12.0).reshape(3, 4)
    x = so.array(a)
    assert isinstance(x @ b, np.ndarray) and isinstance(x + a, np.ndarray)
    np.testing.assert_array_equal(x @ b, a @ b)
    np.testing.assert_array_equal(a.T @ x, a.T @ a)
    with pytest.raises(TypeError, match="does not convert implicitly"):
        x.tostype("csr") @ b  # a sparse container never densifies silently


def test_in_place_matmul_rebinds():
    """No in-place matmul (as in MXNet): ``x @= y`` is ``x = x @ y``, the product's own
    storage type included."""
    a, b = np.arange(4.0).reshape(2, 2), np.eye(2) * 3
    x = so.array(a)
    first = x
    x @= so.array(b).tostype("csr")
    assert x is not first and x.stype == "csr"
    np.testing.assert_array_equal(x.asnumpy(), a @ b)
    np.testing.assert_array_equal(first.asnumpy(), a)


def test_matmul_records_dots_gradient():
    rng = np.random.default_rng(7)
    a, b = data(rng, (4, 3), 0.7), data(rng, (3, 2), 1.0)
    x, w = so.array(a).tostype("csr"), so.array(b)
    w.attach_grad()
    with ag.record():
        loss = (x @ w).sum()
    loss.backward()
    np.testing.assert_array_equal(w.grad.asnumpy(), a.T @ np.ones((4, 2), np.float32))
