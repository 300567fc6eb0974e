"""``dispatch.accumulate_into(target, value)``: what ``req="add"`` and ``grad_req="add"`` mean.

Every branch by storage-type pair (target default / row_sparse / csr x value default /
row_sparse / csr), by dtype (float32, float64, and a value dtype other than the target's),
with targets that already hold non-zero values so that overwriting and adding differ, then
the public paths into it: ``invoke(..., out=t, req="add")``, an op function's ``out=, req="add"``
and autograd's ``grad_req="add"`` with a row_sparse gradient accumulated twice. Expected values
are NumPy sums of the dense values (exact: small integers and quarters in every dtype used).
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import sparse_ops as so
from sparse_ops import autograd
from sparse_ops.dispatch import accumulate_into

from conftest import make

STYPES = ["default", "row_sparse", "csr"]
DTYPE_PAIRS = [("float32", "float32"), ("float64", "float64"), ("float32", "float64"), ("float64", "float32")]


def _target_values(shape, dtype):
    """Non-zero values in most rows (one row all zero, so a sparse target has a gap too)."""
    rng = np.random.default_rng(7)
    t = rng.integers(1, 9, size=shape).astype(dtype) * np.asarray(0.25, dtype)
    t[2] = 0  # an empty row in the target
    t[0, 1] = 0  # and an unstored entry inside a stored row (csr)
    return t


def _value_values(shape, dtype):
    """Rows 0, 2 (the target's empty row) and 4 hold values; rows 1, 3, 5 are empty."""
    rng = np.random.default_rng(11)
    v = np.zeros(shape, dtype=dtype)
    v[[0, 2, 4]] = rng.integers(-6, 7, size=(3, *shape[1:])).astype(dtype) * np.asarray(0.5, dtype)
    v[0, 1] = 1.5  # lands on the target's unstored entry
    v[4, 0] = 0  # and an unstored entry of a stored value row
    return v



@pytest.mark.parametrize("tdtype,vdtype", DTYPE_PAIRS)
@pytest.mark.parametrize("vstype", STYPES)
@pytest.mark.parametrize("tstype", STYPES)
def test_every_storage_pair_adds(tstype, vstype, tdtype, vdtype):
    shape = (6, 4)
    t0, v0 = _target_values(shape, tdtype), _value_values(shape, vdtype)
    target, value = make(t0, tstype), make(v0, vstype)
    value_before = value.asnumpy().copy()
    buffer = target._data if tstype == "default" else None

    accumulate_into(target, value)

    want = (t0.astype(np.float64) + v0.astype(np.float64)).astype(tdtype)
    assert target.stype == tstype and target.dtype == np.dtype(tdtype) and target.shape == shape
    got = target.asnumpy()
    assert got.dtype == np.dtype(tdtype)
    np.testing.assert_array_equal(got, want)
    # never an overwrite: the target's own values survive where the value has none
    assert not np.array_equal(got, v0.astype(tdtype))
    np.testing.assert_array_equal(value.asnumpy(), value_before)  # the value is left alone
    if buffer is not None:  # dense targets are updated in place (views of them see it)
        assert target._data is buffer
        np.testing.assert_array_equal(buffer, want)
    else:
        target.check_format(full_check=True)

    # a second accumulation adds again
    accumulate_into(target, value)
    want2 = (t0.astype(np.float64) + 2 * v0.astype(np.float64)).astype(tdtype)
    np.testing.assert_array_equal(target.asnumpy(), want2)
    if tstype != "default":
        target.check_format(full_check=True)


@pytest.mark.parametrize("tstype", STYPES)
def test_row_sparse_into_target_sums_rows_not_overwrites(tstype):
    """The planted bug ``target._data[value._indices] = value._data`` differs from the sum
    exactly at the value's stored rows whose target row is non-zero: checked row by row."""
    shape = (5, 3)
    t0 = np.arange(1, 16, dtype=np.float64).reshape(shape)
    target = make(t0, tstype)
    value = so.row_sparse_array((np.full((2, 3), 10.0), np.array([1, 3])), shape=shape)
    accumulate_into(target, value)
    got = target.asnumpy()
    for r in range(5):
        expected = t0[r] + (10.0 if r in (1, 3) else 0.0)
        np.testing.assert_array_equal(got[r], expected, err_msg=f"row {r}")


@pytest.mark.parametrize("tstype", STYPES)
@pytest.mark.parametrize("vstype", STYPES)
def test_all_zero_value_leaves_target(tstype, vstype):
    shape = (4, 3)
    t0 = _target_values(shape, "float64")[:4]
    target = make(t0, tstype)
    accumulate_into(target, make(np.zeros(shape), vstype))
    np.testing.assert_array_equal(target.asnumpy(), t0)
    assert target.stype == tstype


@pytest.mark.parametrize("vstype", ["default", "row_sparse"])
def test_higher_rank_row_sparse_value(vstype):
    """row_sparse of rank 3 into a dense and a row_sparse target (rows are the first axis)."""
    rng = np.random.default_rng(3)
    t0 = rng.integers(1, 5, size=(5, 2, 3)).astype(np.float32)
    v0 = np.zeros((5, 2, 3), np.float32)
    v0[[1, 4]] = rng.integers(1, 5, size=(2, 2, 3))
    for tstype in ("default", "row_sparse"):
        target = make(t0, tstype)
        accumulate_into(target, make(v0, vstype))
        np.testing.assert_array_equal(target.asnumpy(), t0 + v0)


# ---- public paths ---------------------------------------------------------------------------------
def _csr_and_grad(dtype="float64"):
    """A csr x (6, 5) with empty rows and columns, and g (6, 3): dot(x.T, g) is row_sparse
    with rows = the columns x stores (0, 2, 3)."""
    dense = np.zeros((6, 5))
    dense[0, 0], dense[0, 3], dense[2, 2], dense[4, 0], dense[5, 3] = 1.0, 2.0, -1.0, 3.0, 0.5
    g = np.arange(18, dtype=np.float64).reshape(6, 3) / 4 + 0.25
    return dense.astype(dtype), g.astype(dtype)


@pytest.mark.parametrize("tstype", ["default", "row_sparse"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_invoke_out_req_add_with_row_sparse_result(tstype, dtype):
    xd, g = _csr_and_grad(dtype)
    x, gg = make(xd, "csr"), so.array(g)
    product = xd.T.astype(np.float64) @ g.astype(np.float64)
    assert so.invoke("dot", [x, gg], {"transpose_a": True}).stype == "row_sparse"
    t0 = (np.arange(15, dtype=np.float64).reshape(5, 3) + 1).astype(dtype)
    target = make(t0, tstype)
    ret = so.invoke("dot", [x, gg], {"transpose_a": True}, out=target, req="add")
    assert ret is target and target.stype == tstype
    np.testing.assert_allclose(target.asnumpy(), t0 + product, rtol=1e-6)
    so.invoke("dot", [x, gg], {"transpose_a": True}, out=target, req="add")
    np.testing.assert_allclose(target.asnumpy(), t0 + 2 * product, rtol=1e-6)
    # req="write" into the same target overwrites: the two requests differ
    so.invoke("dot", [x, gg], {"transpose_a": True}, out=target, req="write")
    np.testing.assert_allclose(target.asnumpy(), product, rtol=1e-6)


@pytest.mark.parametrize("tstype,astype", [("default", "default"), ("default", "row_sparse"), ("default", "csr"),
                                           ("row_sparse", "row_sparse"), ("csr", "csr"), ("row_sparse", "default"),
                                           ("csr", "default")])
def test_op_function_out_req_add(tstype, astype):
    """``elemwise_add(a, b, out=t, req="add")`` for result storage types default, row_sparse
    and csr into targets of every storage type, and a float64 result into a float32 target."""
    shape = (6, 4)
    a0, b0 = _value_values(shape, "float64"), _value_values(shape, "float64")[::-1].copy()
    t0 = _target_values(shape, "float32")
    a, b = make(a0, astype), make(b0, astype)
    target = make(t0, tstype)
    so.elemwise_add(a, b, out=target, req="add")
    want = (t0.astype(np.float64) + a0 + b0).astype(np.float32)
    assert target.stype == tstype and target.dtype == np.float32
    np.testing.assert_array_equal(target.asnumpy(), want)
    so.elemwise_add(a, b, out=target, req="add")
    np.testing.assert_array_equal(target.asnumpy(), (t0.astype(np.float64) + 2 * (a0 + b0)).astype(np.float32))


@pytest.mark.parametrize("grad_stype", ["default", "row_sparse"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_grad_req_add_accumulates_row_sparse_gradient_of_dot(grad_stype, dtype):
    """w.grad (dense or row_sparse) with grad_req="add" sums the row_sparse gradients of
    dot(x, w) (dot(x.T, head)) of two backward passes."""
    xd, g = _csr_and_grad(dtype)
    x = make(xd, "csr")
    w = so.array((np.arange(15).reshape(5, 3) % 4 + 1).astype(dtype))
    w.attach_grad(grad_req="add", stype=grad_stype)
    head = so.array(g)
    expected = xd.T.astype(np.float64) @ g.astype(np.float64)
    for k in (1, 2):
        with autograd.record():
            y = so.dot(x, w)
        y.backward(head)
        assert w.grad.stype == grad_stype and w.grad.dtype == np.dtype(dtype)
        np.testing.assert_allclose(w.grad.asnumpy(), k * expected, rtol=1e-6, err_msg=f"after pass {k}")
    # a pre-filled buffer: the gradient adds to what is there
    w.grad[:] = so.array(np.ones((5, 3), dtype=dtype)).tostype(grad_stype)
    with autograd.record():
        y = so.dot(x, w)
    y.backward(head)
    np.testing.assert_allclose(w.grad.asnumpy(), 1 + expected, rtol=1e-6)


@pytest.mark.parametrize("grad_stype", ["default", "row_sparse"])
def test_grad_req_add_accumulates_embedding_sparse_grad(grad_stype):
    """Embedding with sparse_grad=True: a row_sparse weight gradient (rows = the ids used),
    accumulated twice, with different ids each pass, into a dense and a row_sparse .grad."""
    weight = so.array(np.arange(12, dtype=np.float32).reshape(6, 2))
    weight.attach_grad(grad_req="add", stype=grad_stype)
    passes = [np.array([1, 3, 1]), np.array([0, 3, 5, 5])]
    want = np.zeros((6, 2))
    for k, ids in enumerate(passes):
        head = np.arange(ids.size * 2, dtype=np.float64).reshape(ids.size, 2) + 1 + k
        with autograd.record():
            out = so.Embedding(so.array(ids.astype(np.float32)), weight, input_dim=6, output_dim=2,
                               sparse_grad=True)
        out.backward(so.array(head.astype(np.float32)))
        np.add.at(want, ids, head)
        assert weight.grad.stype == grad_stype
        np.testing.assert_array_equal(weight.grad.asnumpy(), want.astype(np.float32), err_msg=f"after pass {k}")
    # the per-pass gradient really is row_sparse (the path under test)
    with autograd.record():
        out = so.Embedding(so.array(np.array([2.0], np.float32)), weight, input_dim=6, output_dim=2,
                           sparse_grad=True)
    (g,) = autograd.grad(out, [weight], so.array(np.ones((1, 2), np.float32)))
    assert g.stype == "row_sparse"


def test_scipy_reference_for_csr_target():
    """csr += csr against SciPy's own sum, structure included (no explicit zeros needed)."""
    rng = np.random.default_rng(5)
    a = sp.random(7, 6, density=0.3, format="csr", random_state=rng, dtype=np.float64)
    b = sp.random(7, 6, density=0.3, format="csr", random_state=rng, dtype=np.float64)
    target = so.csr_matrix((a.data, a.indices, a.indptr), shape=a.shape)
    accumulate_into(target, so.csr_matrix((b.data, b.indices, b.indptr), shape=b.shape))
    np.testing.assert_allclose(target.asnumpy(), (a + b).toarray(), rtol=1e-15)
    target.check_format(full_check=True)
