"""csr_spmm / csr_spmm_t / csr_sddmm / csr_sample: GNN products and their gradients."""
import numpy as np
import pytest

import sparse_ops as so
from cookbook_helpers import csr, normal, random_csr, random_dense, serial_and_parallel
from sparse_ops import autograd as ag
from sparse_ops.dispatch import InferenceError
from sparse_ops.sdk.testing import check_numeric_gradient, opcheck
from sparse_ops_cookbook import csr_sample, csr_sddmm, csr_spmm, csr_spmm_t


@pytest.mark.parametrize("dtype, index_dtype", [("float32", "int64"), ("float64", "int64"), ("float64", "int32")])
def test_spmm_matches_scipy(dtype, index_dtype):
    a = random_csr(30, 20, 0.2, seed=1, dtype=dtype, index_dtype=index_dtype, empty_rows=[3])
    x = normal(20, 6, seed=2, dtype=dtype)
    y = csr_spmm(a, x)
    assert (y.stype, y.shape, y.dtype) == ("default", (30, 6), np.dtype(dtype))
    np.testing.assert_allclose(y.asnumpy(), a.asscipy() @ x.asnumpy(), rtol=1e-5, atol=1e-5)
    assert so.explain("csr_spmm", a, x)["dispatch_mode"] == "fcompute_ex"
    assert np.all(y.asnumpy()[3] == 0)


def test_spmm_t_dense_and_row_sparse():
    a = random_csr(15, 12, 0.15, seed=3)
    g = normal(15, 4, seed=4)
    want = a.asnumpy().T @ g.asnumpy()
    np.testing.assert_allclose(csr_spmm_t(a, g).asnumpy(), want, atol=1e-12)
    r = csr_spmm_t(a, g, sparse_grad=True)
    assert r.stype == "row_sparse"
    assert r.indices.tolist() == np.flatnonzero(a.asnumpy().any(axis=0)).tolist()  # A's non-empty columns
    np.testing.assert_allclose(r.asnumpy(), want, atol=1e-12)


@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_spmm_t_row_sparse_of_a_wide_matrix_sorts_its_stored_values(index_dtype):
    """Many more columns than stored values (an embedding table's ids): the row_sparse
    result comes from sorting the stored values, not a transpose over every column, and
    sums in the same order as the dense result's transpose (bitwise equal rows)."""
    a = random_csr(40, 5000, 0.002, seed=5, dtype="float32", index_dtype=index_dtype, empty_rows=[0, 7])
    assert a.shape[1] > 4 * a.nnz
    g = normal(40, 8, seed=6, dtype="float32")
    dense = csr_spmm_t(a, g).asnumpy()
    r = csr_spmm_t(a, g, sparse_grad=True)
    cols = np.unique(a.indices)
    assert r.stype == "row_sparse" and r.indices.dtype == np.dtype(index_dtype)
    np.testing.assert_array_equal(r.indices, cols)
    np.testing.assert_array_equal(r.data, dense[cols])
    np.testing.assert_allclose(dense, a.asscipy().T.astype(np.float64) @ g.asnumpy().astype(np.float64),
                               rtol=1e-5, atol=1e-5)


def test_sddmm_samples_the_product_at_stored_positions():
    a = random_csr(9, 7, 0.3, seed=5)
    p, q = normal(9, 5, seed=6), normal(7, 5, seed=7)
    s = csr_sddmm(a, p, q)
    assert s.stype == "csr" and s.nnz == a.nnz
    np.testing.assert_array_equal(s.indices, a.indices)
    np.testing.assert_allclose(s.asnumpy(), (p.asnumpy() @ q.asnumpy().T) * (a.asnumpy() != 0), atol=1e-12)


def test_sample_reads_dense_and_csr_at_a_structure():
    a = random_csr(8, 6, 0.4, seed=8)
    h = random_dense(8, 6, 0.5, seed=9)
    mask = a.asnumpy() != 0
    for source in (so.array(h), csr(h)):
        s = csr_sample(a, source)
        assert s.stype == "csr" and s.nnz == a.nnz
        np.testing.assert_array_equal(s.asnumpy(), np.where(mask, h, 0.0))


def test_opcheck_every_product():
    a = random_csr(10, 8, 0.3, seed=10, empty_rows=[2])
    x, g = normal(8, 3, seed=11), normal(10, 3, seed=12)
    empty = so.zeros((10, 8), stype="csr", dtype="float64")
    assert opcheck("csr_spmm", [[a, x], ([a, x], {"sparse_grad": True}), [a.tostype("default"), x], [empty, x],
                                [a, x.tostype("row_sparse")], [a, x.tostype("csr")]]) == 6
    assert opcheck("csr_spmm_t", [[a, g], ([a, g], {"sparse_grad": True}), [a.tostype("default"), g], [empty, g]]) == 4
    assert opcheck("csr_sddmm", [[a, g, x], [empty, g, x]]) == 2
    heads = [so.array(random_dense(10, 8, 1.0, seed=13)), random_csr(10, 8, 0.5, seed=14)]
    assert opcheck("csr_sample", [[a, h] for h in heads]) == 2


def test_gradients_on_the_tape_are_sparse():
    a = random_csr(12, 10, 0.2, seed=15, empty_rows=[1])
    x = normal(10, 4, seed=16)
    a.attach_grad()
    x.attach_grad(stype="row_sparse")
    with ag.record():
        y = csr_spmm(a, x, sparse_grad=True)
    y.backward(so.ones(y.shape, dtype="float64"))
    assert a.grad.stype == "csr" and x.grad.stype == "row_sparse"
    ones = np.ones((12, 4))
    np.testing.assert_allclose(x.grad.asnumpy(), a.asnumpy().T @ ones, atol=1e-12)
    np.testing.assert_allclose(a.grad.asnumpy(), (ones @ x.asnumpy().T) * (a.asnumpy() != 0), atol=1e-12)
    check_numeric_gradient(lambda a_, x_: csr_spmm(a_, x_), [a, x])


def test_two_layer_gnn_gradient():
    a = random_csr(8, 8, 0.3, seed=17)
    x, w = normal(8, 5, seed=18), normal(5, 3, seed=19)
    check_numeric_gradient(lambda x_, w_: csr_spmm(a, so.relu(so.dot(csr_spmm(a, x_), w_))), [x, w])


def test_product_errors():
    a = random_csr(4, 3, 0.5, seed=20)
    with pytest.raises(InferenceError, match=r"A @ X needs X with 3 rows"):
        csr_spmm(a, normal(4, 2))
    with pytest.raises(InferenceError, match="must share one dtype"):
        csr_spmm(a, normal(3, 2, dtype="float32"))
    with pytest.raises(InferenceError, match="A must be csr"):
        csr_sddmm(a.tostype("default"), normal(4, 2), normal(3, 2))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_products_serial_and_parallel_forms_agree_exactly(monkeypatch, dtype):
    """Below and above the cpu kernels' work threshold: the same bits, and SciPy's values
    (300 rows: several blocks of rows, the last one partial, with empty rows)."""
    a = random_csr(300, 120, 0.05, seed=21, dtype=dtype, empty_rows=[0, 64, 299])
    x, g = normal(120, 7, seed=22, dtype=dtype), normal(300, 7, seed=23, dtype=dtype)
    serial, parallel = serial_and_parallel(monkeypatch, lambda: [
        csr_spmm(a, x), csr_spmm_t(a, g), csr_spmm_t(a, g, sparse_grad=True), csr_sddmm(a, g, x)])
    for s, p in zip(serial, parallel):
        np.testing.assert_array_equal(s, p)
    m, xd, gd = a.asscipy(), x.asnumpy(), g.asnumpy()
    tol = 1e-4 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(serial[0], m @ xd, rtol=tol, atol=tol)
    np.testing.assert_allclose(serial[1], m.T @ gd, rtol=tol, atol=tol)
    np.testing.assert_allclose(serial[2], m.T @ gd, rtol=tol, atol=tol)
    np.testing.assert_allclose(serial[3], (gd @ xd.T) * (m.toarray() != 0), rtol=tol, atol=tol)


def test_parallel_form_needs_the_work_and_threads(monkeypatch):
    import numba

    from sparse_ops.sdk import rowkernel

    monkeypatch.setattr(rowkernel, "PARALLEL_MIN_WORK", 1000)
    assert not rowkernel.parallel_worth(999)
    assert rowkernel.parallel_worth(1000) == (numba.get_num_threads() > 1)
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        assert not rowkernel.parallel_worth(10 ** 9)
    finally:
        numba.set_num_threads(threads)
