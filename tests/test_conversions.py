"""All 9 storage conversions against NumPy/SciPy, every dtype, both index dtypes, edge shapes."""
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given
from hypothesis import strategies as st

import sparse_ops as so
from conftest import INDEX_DTYPES, csr_parts, dense_arrays, make, row_sparse_parts, scipy_csr

STYPES = ["default", "row_sparse", "csr"]


@given(dense=dense_arrays(), src=st.sampled_from(STYPES), dst=st.sampled_from(STYPES),
       index_dtype=st.sampled_from(INDEX_DTYPES))
def test_every_pair_round_trips(dense, src, dst, index_dtype):
    x = make(dense, src, index_dtype)
    y = x.tostype(dst)
    assert y.stype == dst and y.shape == dense.shape and y.dtype == dense.dtype
    assert y is not x
    np.testing.assert_array_equal(y.asnumpy(), dense)
    if dst != "default":
        y.check_format()
    np.testing.assert_array_equal(y.tostype(src).asnumpy(), dense)


@given(dense=dense_arrays(), index_dtype=st.sampled_from(INDEX_DTYPES))
def test_sparse_structure_matches_scipy(dense, index_dtype):
    ref = scipy_csr(dense, index_dtype)
    for x in (so.array(dense).tostype("csr"), make(dense, "row_sparse", index_dtype).tostype("csr")):
        np.testing.assert_array_equal(x.indptr, ref.indptr)
        np.testing.assert_array_equal(x.indices, ref.indices)
        np.testing.assert_array_equal(x.data, ref.data.astype(dense.dtype))


@given(dense=dense_arrays(ndim=3, max_side=5))
def test_row_sparse_of_higher_rank(dense):
    r = so.array(dense).tostype("row_sparse")
    rows = np.flatnonzero(dense.reshape(dense.shape[0], -1).any(axis=1)) if dense.size else []
    np.testing.assert_array_equal(r.indices, rows)
    assert r.data.shape == (len(rows), *dense.shape[1:])
    np.testing.assert_array_equal(r.asnumpy(), dense)


def test_index_dtype_kept_through_sparse_conversions():
    dense = np.eye(4, dtype=np.float32)
    x = so.csr_matrix(csr_parts(dense, "int32"), shape=(4, 4))
    assert x.aux_types == [np.int32, np.int32]
    assert x.tostype("row_sparse").aux_types == [np.int32]
    assert x.tostype("row_sparse").tostype("csr").aux_types == [np.int32, np.int32]
    assert so.array(dense).tostype("csr").aux_types == [np.int64, np.int64]  # created by us: int64


def test_csr_to_row_sparse_keeps_explicit_zero_rows_as_stored_structure():
    x = so.csr_matrix((np.array([0.0, 2.0], np.float32), np.array([1, 0]), np.array([0, 1, 1, 2])), shape=(3, 2))
    r = x.tostype("row_sparse")
    np.testing.assert_array_equal(r.indices, [0, 2])
    np.testing.assert_array_equal(r.asnumpy(), [[0, 0], [0, 0], [2, 0]])


def test_nan_counts_as_nonzero():
    dense = np.array([[np.nan, 0.0], [0.0, 0.0]], dtype=np.float64)
    x = so.array(dense).tostype("csr")
    assert x.nnz == 1 and np.isnan(x.data[0])
    assert so.array(dense).tostype("row_sparse").indices.tolist() == [0]


def test_non_contiguous_dense_source():
    base = np.arange(24, dtype=np.float32).reshape(4, 6) % 3
    view = base[:, ::2]
    x = so.array(view)
    np.testing.assert_array_equal(x.tostype("csr").asnumpy(), view)


def test_csr_needs_two_dimensions():
    with pytest.raises(ValueError, match="2-d"):
        so.zeros((2, 3, 4)).tostype("csr")
    with pytest.raises(ValueError, match="2-d"):
        so.zeros((2, 3, 4), stype="row_sparse").tostype("csr")


def test_unknown_stype():
    with pytest.raises(ValueError, match="unknown storage type"):
        so.zeros((2, 2)).tostype("coo")


def test_cast_storage_function_matches_method():
    x = so.array(np.eye(3, dtype=np.float32))
    np.testing.assert_array_equal(so.cast_storage(x, "csr").asnumpy(), x.tostype("csr").asnumpy())


def test_asscipy_is_zero_copy_and_keeps_int64(rng):
    dense = (rng.random((30, 20)) < 0.2) * rng.random((30, 20))
    x = so.array(dense.astype(np.float32)).tostype("csr")
    m = x.asscipy()
    assert isinstance(m, sp.csr_matrix)
    assert np.shares_memory(m.data, x.data) and np.shares_memory(m.indices, x.indices)
    assert m.indices.dtype == np.int64
    np.testing.assert_array_equal(m.toarray(), dense.astype(np.float32))
    np.testing.assert_allclose(m @ np.ones(20, np.float32), dense.astype(np.float32).sum(1), rtol=1e-5)


def test_asscipy_float16_is_float32_copy_and_row_sparse_via_csr():
    dense = np.array([[0, 1.5], [0, 0]], dtype=np.float16)
    m = so.array(dense).tostype("csr").asscipy()
    assert m.dtype == np.float32
    np.testing.assert_array_equal(m.toarray(), dense.astype(np.float32))
    r = so.array(dense).tostype("row_sparse")
    np.testing.assert_array_equal(r.asscipy().toarray(), dense.astype(np.float32))
    with pytest.raises(ValueError, match="2-d"):
        so.zeros((2, 2, 2), stype="row_sparse").asscipy()


def test_large_csr_to_dense_uses_parallel_kernel_correctly(rng):
    rows, cols, per_row = 3000, 700, 9
    idx = np.sort(np.argsort(rng.random((rows, cols)), axis=1)[:, :per_row], axis=1)
    m = sp.csr_matrix((rng.standard_normal(rows * per_row), idx.ravel(),
                       np.arange(0, rows * per_row + 1, per_row)), shape=(rows, cols))
    x = so.csr_matrix(m)
    np.testing.assert_array_equal(x.tostype("default").asnumpy(), m.toarray())
    back = x.tostype("default").tostype("csr")
    assert (back.asscipy() != m).nnz == 0
