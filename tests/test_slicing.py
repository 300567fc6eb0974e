"""csr row slicing and row_sparse retain, against NumPy."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import sparse_ops as so
from conftest import INDEX_DTYPES, csr_parts, dense_arrays, row_sparse_parts


@given(dense=dense_arrays(), index_dtype=st.sampled_from(INDEX_DTYPES),
       start=st.integers(-12, 12), stop=st.integers(-12, 12) | st.none())
def test_csr_row_slices(dense, index_dtype, start, stop):
    x = so.csr_matrix(csr_parts(dense, index_dtype), shape=dense.shape)
    s = x[start:stop]
    expected = dense[start:stop]
    assert s.stype == "csr" and s.shape == expected.shape
    np.testing.assert_array_equal(s.asnumpy(), expected)
    s.check_format()
    assert s.indptr[0] == 0 and s.aux_types == x.aux_types
    if s.nnz:
        assert np.shares_memory(s.data, x.data) and np.shares_memory(s.indices, x.indices)


@given(dense=dense_arrays(), data=st.data())
def test_csr_single_row(dense, data):
    rows = dense.shape[0]
    x = so.csr_matrix(dense)
    if rows == 0:
        with pytest.raises(IndexError, match="out of range"):
            x[0]
        return
    i = data.draw(st.integers(-rows, rows - 1))
    r = x[i]
    assert r.shape == (1, dense.shape[1])  # a one-row csr, as in MXNet
    np.testing.assert_array_equal(r.asnumpy(), dense[[i]])
    with pytest.raises(IndexError, match=f"row {rows} is out of range"):
        x[rows]


def test_csr_slice_errors_and_values_view():
    x = so.csr_matrix(np.eye(4, dtype=np.float32))
    with pytest.raises(ValueError, match="step 1"):
        x[::2]
    with pytest.raises(TypeError, match="x\\[i\\] and x\\[i:j\\]"):
        x[1, 2]
    s = x[1:3]
    s.data[:] = 5  # a view: the parent sees the write
    np.testing.assert_array_equal(x.asnumpy().diagonal(), [1, 5, 5, 1])


@given(dense=dense_arrays(ndim=st.integers(1, 3), max_side=6), index_dtype=st.sampled_from(INDEX_DTYPES),
       ids=st.lists(st.integers(-3, 9), max_size=8))
def test_retain(dense, index_dtype, ids):
    x = so.row_sparse_array(row_sparse_parts(dense, index_dtype), shape=dense.shape)
    kept = x.retain(np.array(ids, dtype=np.int64))
    expected = np.zeros_like(dense)
    keep = sorted({i for i in ids if 0 <= i < dense.shape[0]})
    expected[keep] = dense[keep]
    assert kept.stype == "row_sparse" and kept.shape == dense.shape
    np.testing.assert_array_equal(kept.asnumpy(), expected)
    kept.check_format()
    assert set(kept.indices.tolist()) <= set(keep)


def test_retain_accepts_containers_and_refuses_floats():
    x = so.array(np.arange(12, dtype=np.float32).reshape(4, 3)).tostype("row_sparse")
    r = x.retain(so.array(np.array([3, 1])))
    np.testing.assert_array_equal(r.indices, [1, 3])
    with pytest.raises(TypeError, match="integer row ids"):
        x.retain(np.array([1.0]))


def _rsp_sample(seed: int, n: int):
    rng = np.random.default_rng(seed)
    d = rng.standard_normal((n, 3)).astype(np.float32)
    d[rng.random(n) < 0.5] = 0  # about half the rows not stored
    return d, so.array(d).tostype("row_sparse")


@pytest.mark.parametrize("seed", range(6))
def test_row_sparse_indexing_is_numpys_on_the_array_not_on_the_stored_rows(seed):
    d, x = _rsp_sample(seed, 7)
    for i in range(-7, 7):  # a row: dense, zeros where not stored
        got = x[i]
        assert got.stype == "default" and got.shape == (3,)
        np.testing.assert_array_equal(got.asnumpy(), d[i])
    for key in [slice(a, b, c) for a in (None, 0, 2, -1, 9) for b in (None, 1, 5, -2) for c in (None, 1, 2, -1, -3)]:
        got = x[key]  # a slice keeps row_sparse, the stored rows renumbered
        assert got.stype == "row_sparse"
        got.check_format()
        np.testing.assert_array_equal(got.asnumpy(), d[key])
    ids = np.array([0, 6, -1, 3, 3])
    np.testing.assert_array_equal(x[ids].asnumpy(), d[ids])
    np.testing.assert_array_equal(x[so.array(ids)].asnumpy(), d[ids])
    np.testing.assert_array_equal(x[2:, 1:].asnumpy(), d[2:, 1:])
    assert float(x[3, 2].asnumpy()) == d[3, 2]
    assert x[:] is x  # as MXNet
    # tuples with arrays are NumPy's advanced indexing of the whole array: ids paired up, broadcast
    for key in [(ids, np.array([0, 1, 2, 0, 1])), ([1, 3], [0, 2]), (np.array([0, 1]), 2),
                (np.array([[0, 6], [3, 3]]), np.array([1, 2])), (np.array([5, -1]), slice(1, None)),
                (2, np.array([0, 2])), (slice(1, 5), np.array([2, 0])), (Ellipsis, 1), (ids, Ellipsis), (None, 2)]:
        np.testing.assert_array_equal(x[key].asnumpy(), d[key])
        assert x[key].shape == d[key].shape


def test_row_sparse_indexing_refuses_what_numpy_refuses():
    d, x = _rsp_sample(0, 5)
    with pytest.raises(IndexError, match="row 5 is out of range for a row_sparse array with 5 rows"):
        x[5]
    with pytest.raises(IndexError, match=r"row ids must lie in \[-5, 5\)"):
        x[np.array([0, -6])]
    with pytest.raises(IndexError, match="integer row ids"):
        x[np.array([True, False, True, False, True])]
    with pytest.raises(IndexError, match="indexed by ints, slices and integer arrays"):
        x[np.array([0.5])]


def test_row_sparse_keys_mixing_an_int_a_slice_and_an_array_are_numpys():
    """An int is an advanced index in NumPy: with an array after a slice, the broadcast axes
    go first (x[2, :, [0, 1]] is (2, 3)); Python bools are no row numbers."""
    d = np.arange(60, dtype=np.float32).reshape(5, 3, 4)
    d[[1, 3]] = 0
    x = so.array(d).tostype("row_sparse")
    for key in [(2, slice(None), np.array([0, 1])), (-3, slice(None), [0, 3]),
                (np.int64(2), slice(0, 2), np.array([[1], [3]])), (2, np.array([0, 1]), slice(None)), (4, 1, 2)]:
        got = x[key].asnumpy()
        assert got.shape == d[key].shape, key
        np.testing.assert_array_equal(got, d[key])
    for key in (True, False, (True, 2)):
        with pytest.raises(IndexError, match="integer row ids"):
            x[key]
    with pytest.raises(IndexError, match="not a bool"):
        so.array(d[:, :, 0]).tostype("csr")[True]
