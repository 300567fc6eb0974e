"""Elementwise binary operators on every storage combination, against NumPy."""
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import sparse_ops as so
from conftest import INDEX_DTYPES, csr_parts, dense_arrays, make, row_sparse_parts
from sparse_ops.sdk.testing import check_gradient

STYPES = ["default", "row_sparse", "csr"]
D, R, C = "default", "row_sparse", "csr"
# expected output storage types (MXNet 1.9 behaviour; the README lists them)
EXPECTED = {
    "elemwise_add": {(R, R): R, (C, C): C},
    "elemwise_sub": {(R, R): R, (C, C): C},
    "elemwise_mul": {(R, R): R, (D, R): R, (R, D): R, (C, C): C, (D, C): C, (C, D): C},
    "elemwise_div": {},
}
NUMPY = {"elemwise_add": np.add, "elemwise_sub": np.subtract, "elemwise_mul": np.multiply,
         "elemwise_div": np.divide}
# combinations served by a storage-aware kernel (no densifying fallback)
EX_KERNELS = {
    "elemwise_add": {(R, R), (C, C), (D, R), (D, C), (R, D), (C, D)},
    "elemwise_sub": {(R, R), (C, C), (D, R), (D, C), (R, D), (C, D)},
    "elemwise_mul": {(R, R), (D, R), (R, D), (C, C), (D, C), (C, D)},
    "elemwise_div": set(),
}


@st.composite
def operand_pairs(draw):
    a = draw(dense_arrays(dtypes=["float32", "float64", "int64"]))
    seed = draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    mask = rng.random(a.shape) < draw(st.sampled_from([0.0, 0.3, 1.0]))
    b = np.where(mask, rng.integers(-5, 5, a.shape), 0).astype(a.dtype)
    return a, b


@pytest.mark.parametrize("op", ["elemwise_add", "elemwise_sub", "elemwise_mul"])
@pytest.mark.parametrize("ls", STYPES)
@pytest.mark.parametrize("rs", STYPES)
@settings(max_examples=12)
@given(pair=operand_pairs(), index_dtype=st.sampled_from(INDEX_DTYPES))
def test_values_and_storage_types(op, ls, rs, pair, index_dtype):
    a, b = pair
    x, y = make(a, ls, index_dtype), make(b, rs, index_dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", so.StorageFallbackWarning)
        z = getattr(so, op)(x, y)
    assert z.stype == EXPECTED[op].get((ls, rs), D)
    assert z.dtype == a.dtype and z.shape == a.shape
    np.testing.assert_array_equal(z.asnumpy(), NUMPY[op](a, b))
    if z.stype != D:
        z.check_format()
    mode = so.explain(op, x, y)["dispatch_mode"]
    if (ls, rs) in EX_KERNELS[op]:
        assert mode == "fcompute_ex"
    elif ls == rs == D:
        assert mode == "fcompute"
    else:
        assert mode == "fallback"


@pytest.mark.parametrize("ls", STYPES)
@pytest.mark.parametrize("rs", STYPES)
def test_div_is_dense(ls, rs):
    a = np.array([[1.0, 0.0], [4.0, 2.0]])
    b = np.array([[2.0, 1.0], [1.0, 4.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", so.StorageFallbackWarning)
        z = so.elemwise_div(make(a, ls), make(b, rs))
    assert z.stype == D
    np.testing.assert_allclose(z.asnumpy(), a / b)


def test_float16_csr_merge_and_int32_indices_kept():
    a = np.array([[0, 1.5, 0], [2, 0, 0.25]], dtype=np.float16)
    b = np.array([[1, 0.5, 0], [0, 0, 0.75]], dtype=np.float16)
    x, y = make(a, C, "int32"), make(b, C, "int32")
    for op in ("elemwise_add", "elemwise_sub", "elemwise_mul"):
        z = getattr(so, op)(x, y)
        assert z.dtype == np.float16 and z.aux_types == [np.int32, np.int32]
        np.testing.assert_array_equal(z.asnumpy(), NUMPY[op](a, b))


def test_empty_operands():
    for st_ in (R, C):
        x = so.zeros((3, 4), stype=st_, dtype="float64")
        z = so.elemwise_add(x, x)
        assert z.stype == st_ and z.nnz == 0 and z.shape == (3, 4)
        assert so.elemwise_mul(x, so.ones((3, 4), dtype="float64")).nnz == 0
    zero_rows = so.zeros((0, 4), stype=C)
    assert so.elemwise_add(zero_rows, zero_rows).shape == (0, 4)


def test_large_csr_merge_matches_scipy(rng):
    import scipy.sparse as sp

    a = sp.random(2000, 300, density=0.02, format="csr", random_state=1)
    b = sp.random(2000, 300, density=0.02, format="csr", random_state=2)
    x, y = so.csr_matrix(a), so.csr_matrix(b)
    assert (so.elemwise_add(x, y).asscipy() != (a + b)).nnz == 0
    assert (so.elemwise_sub(x, y).asscipy() != (a - b)).nnz == 0
    assert (so.elemwise_mul(x, y).asscipy() != a.multiply(b)).nnz == 0


@pytest.mark.parametrize("op", ["elemwise_add", "elemwise_sub", "elemwise_mul", "elemwise_div"])
def test_gradients(op, rng):
    a = rng.standard_normal((3, 4))
    b = rng.standard_normal((3, 4)) + 3.0
    check_gradient(op, [so.array(a), so.array(b)])


def test_gradient_with_sparse_operands():
    a = np.array([[1.0, 0, 2.0], [0, 0, 0], [0, 3.0, 0]])
    b = np.array([[0.5, 1.0, 0], [2.0, 0, 0], [0, 1.5, 1.0]])
    grads = check_gradient("elemwise_mul", [make(a, C), so.array(b)])
    assert grads[0].stype == D and grads[1].stype == C  # g*b is dense; g*a keeps a's csr
    check_gradient("elemwise_add", [make(a, R), make(b, R)])


@pytest.mark.parametrize("op", ["broadcast_mul", "broadcast_div"])
@pytest.mark.parametrize("wshape", [(1, 4), (3, 1), (3, 4), (4,), (1, 1)])
def test_broadcast_mul_div_of_csr_by_dense_keep_the_csr_and_their_gradients(op, wshape):
    """csr (op) dense: a csr of the csr's structure, stored values computed with the dense
    value broadcast to each place; gradients against the dense rule restricted to the
    stored places (no storage fallback on the way)."""
    a = sp.random(3, 4, density=0.5, format="csr", dtype=np.float32, random_state=2)
    a.data += 1
    dense = a.toarray()
    w = np.arange(1, 1 + int(np.prod(wshape)), dtype=np.float32).reshape(wshape)
    x, y = so.csr_matrix(a), so.array(w)
    x.attach_grad()
    y.attach_grad()
    with warnings.catch_warnings():
        warnings.simplefilter("error", so.StorageFallbackWarning)
        with so.autograd.record():
            out = getattr(so, op)(x, y)
            loss = so.sum(out * out)
        loss.backward()
    wb = np.broadcast_to(w, dense.shape)
    ref = dense * wb if op == "broadcast_mul" else np.where(dense != 0, dense / wb, 0)
    assert out.stype == "csr"
    np.testing.assert_allclose(out.asnumpy(), ref, rtol=1e-6)
    d_out_d_w = dense if op == "broadcast_mul" else -dense / wb ** 2
    full = 2 * ref * d_out_d_w  # the gradient of w broadcast, summed back to w's shape
    gw = full.sum(axis=0) if len(wshape) == 1 else full.sum(axis=tuple(i for i, d in enumerate(wshape) if d == 1),
                                                            keepdims=True)
    np.testing.assert_allclose(y.grad.asnumpy(), gw.reshape(wshape), rtol=1e-5)
    d_out_d_x = wb if op == "broadcast_mul" else 1 / wb
    np.testing.assert_allclose(x.grad.asnumpy(), 2 * ref * d_out_d_x * (dense != 0), rtol=1e-5)


def test_broadcast_mul_of_a_broadcast_csr_row():
    row = np.array([[0, 2., 0]], np.float32)
    r = so.broadcast_mul(so.array(row).tostype("csr"), so.array(np.array([[1.], [3.]], np.float32)))
    assert r.stype == "csr"
    np.testing.assert_array_equal(r.asnumpy(), row * np.array([[1.], [3.]]))
