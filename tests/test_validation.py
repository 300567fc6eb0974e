"""Every storage invariant violation is refused with SparseFormatError naming it."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import sparse_ops as so
from sparse_ops.errors import SparseFormatError
from conftest import INDEX_DTYPES, csr_parts, dense_arrays, row_sparse_parts

F32 = np.float32


def csr(data, indices, indptr, shape):
    return so.csr_matrix((np.asarray(data, F32), np.asarray(indices), np.asarray(indptr)), shape=shape)


CSR_CASES = [
    # (data, indices, indptr, shape, message fragment)
    ([1, 2], [0, 1], [0, 2], (2, 3), "rows \\+ 1 = 3 entries, got 2"),
    ([1, 2], [0, 1], [1, 2], (1, 3), "start at 0"),
    ([1, 2], [0, 1], [0, 1], (1, 3), "end at nnz = 2"),
    ([1, 2], [0, 1], [0, 3, 2], (2, 3), "non-decreasing"),
    ([1, 2], [0, 1], [0, -1, 2], (2, 3), "non-decreasing"),
    ([1], [0, 1], [0, 2], (1, 3), "same length"),
    ([1, 2], [0, 3], [0, 2], (1, 3), "column index 3 at position 1 is out of range \\[0, 3\\)"),
    ([1, 2], [-1, 1], [0, 2], (1, 3), "column index -1"),
    ([1, 2], [0, 2**40], [0, 2], (1, 3), "out of range"),
    ([1, 2], [2, 1], [0, 2], (1, 3), "unsorted index 1 after 2 in row 0"),
    ([1, 2, 3], [0, 1, 1], [0, 1, 3], (2, 3), "duplicate index 1 after 1 in row 1"),
]


@pytest.mark.parametrize("data,indices,indptr,shape,message,index_dtype", [
    (*case, dt) for case in CSR_CASES for dt in INDEX_DTYPES
    if dt == "int64" or max(map(abs, case[1] + case[2])) < 2**31
])
def test_csr_invariants(data, indices, indptr, shape, message, index_dtype):
    with pytest.raises(so.SparseFormatError, match=message):
        so.csr_matrix((np.asarray(data, F32), np.asarray(indices, index_dtype),
                       np.asarray(indptr, index_dtype)), shape=shape)


def test_csr_dtype_and_rank_invariants():
    with pytest.raises(so.SparseFormatError, match="indices must have an integer dtype, got float64"):
        csr([1.0], [0.0], [0, 1], (1, 2))
    with pytest.raises(so.SparseFormatError, match="integer dtype"):
        csr([1.0], [np.nan], [0, 1], (1, 2))
    with pytest.raises(so.SparseFormatError, match="indptr must have an integer dtype"):
        so.csr_matrix((np.ones(1, F32), np.array([0]), np.array([0.0, 1.0])), shape=(1, 2))
    with pytest.raises(so.SparseFormatError, match="1-d"):
        so.csr_matrix((np.ones(1, F32), np.array([[0]]), np.array([0, 1])), shape=(1, 2))
    with pytest.raises(so.SparseFormatError, match="data must be 1-d"):
        so.csr_matrix((np.ones((1, 1), F32), np.array([0]), np.array([0, 1])), shape=(1, 2))
    with pytest.raises(so.SparseFormatError, match="2-d"):
        so.csr_matrix((np.ones(1, F32), np.array([0]), np.array([0, 1])), shape=(1, 2, 3))
    with pytest.raises(so.SparseFormatError, match="non-negative"):
        so.csr_matrix((np.ones(1, F32), np.array([0]), np.array([0, 1])), shape=(1, -2))


RS_CASES = [
    # (data shape, indices, shape, message)
    ((2, 3), [0, 5], (5, 3), "row index 5 at position 1 is out of range \\[0, 5\\)"),
    ((2, 3), [-1, 2], (5, 3), "row index -1"),
    ((2, 3), [3, 1], (5, 3), "unsorted index 1 after 3"),
    ((2, 3), [1, 1], (5, 3), "duplicate index 1 after 1"),
    ((2, 4), [0, 1], (5, 3), "shape \\(len\\(indices\\), \\*shape\\[1:\\]\\) = \\(2, 3\\), got \\(2, 4\\)"),
    ((3, 3), [0, 1], (5, 3), "got \\(3, 3\\)"),
]


@pytest.mark.parametrize("data_shape,indices,shape,message", RS_CASES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_row_sparse_invariants(data_shape, indices, shape, message, index_dtype):
    with pytest.raises(so.SparseFormatError, match=message):
        so.row_sparse_array((np.ones(data_shape, F32), np.asarray(indices, index_dtype)), shape=shape)


def test_row_sparse_dtype_invariants():
    with pytest.raises(so.SparseFormatError, match="integer dtype"):
        so.row_sparse_array((np.ones((1, 2), F32), np.array([0.5])), shape=(2, 2))
    with pytest.raises(so.SparseFormatError, match="1-d"):
        so.row_sparse_array((np.ones((1, 2), F32), np.array([[0]])), shape=(2, 2))


def test_sparse_format_error_is_a_value_error():
    assert issubclass(so.SparseFormatError, ValueError)


@st.composite
def corrupted_csr(draw):
    """A valid csr with one invariant broken at a random place."""
    dense = draw(dense_arrays(dtypes=["float32"], max_side=7))
    data, indices, indptr = (a.copy() for a in csr_parts(dense, "int64"))
    rows, cols = dense.shape
    kind = draw(st.sampled_from(["index_high", "index_negative", "indptr_swap", "indptr_end",
                                 "indptr_short", "data_short", "duplicate"]))
    nnz = indices.shape[0]
    if kind in ("index_high", "index_negative") and nnz:
        p = draw(st.integers(0, nnz - 1))
        indices[p] = cols + draw(st.integers(0, 10**9)) if kind == "index_high" else -draw(st.integers(1, 10))
    elif kind == "indptr_swap" and rows >= 2 and indptr[1] < indptr[2]:
        indptr[1] = indptr[2] + 1
    elif kind == "indptr_end":
        indptr[-1] += draw(st.integers(1, 5))
    elif kind == "indptr_short":
        indptr = indptr[:-1]
    elif kind == "data_short" and nnz:
        data = data[:-1]
    elif kind == "duplicate" and nnz >= 2 and indptr[1] >= 2:
        indices[1] = indices[0]
    else:
        indptr = np.concatenate([indptr, [nnz]])  # one entry too many
    return data, indices, indptr, dense.shape


@given(corrupted_csr())
def test_any_corruption_is_refused(case):
    data, indices, indptr, shape = case
    with pytest.raises(so.SparseFormatError):
        so.csr_matrix((data, indices, indptr), shape=shape)


@given(dense=dense_arrays(), index_dtype=st.sampled_from(INDEX_DTYPES))
def test_valid_input_is_accepted_and_check_format_passes(dense, index_dtype):
    x = so.csr_matrix(csr_parts(dense, index_dtype), shape=dense.shape)
    x.check_format(full_check=True)
    x.check_format(full_check=False)
    so.row_sparse_array(row_sparse_parts(dense, index_dtype), shape=dense.shape).check_format()


def test_check_format_catches_later_corruption_through_the_value_view():
    # Index views are read-only, so structure can only be broken by going around them;
    # check_format still finds it.
    x = so.csr_matrix((np.ones(2, F32), np.array([0, 1]), np.array([0, 2])), shape=(1, 2))
    x._indices[1] = 5
    with pytest.raises(so.SparseFormatError, match="out of range"):
        x.check_format()
    x.check_format(full_check=False)  # the O(1) checks do not look at index values


def test_other_integer_index_dtypes_become_int64_after_checks():
    x = so.csr_matrix((np.ones(2, F32), np.array([0, 1], np.uint16), np.array([0, 2], np.int16)), shape=(1, 2))
    assert x.aux_types == [np.int64, np.int64]
    with pytest.raises(so.SparseFormatError, match="out of range"):
        so.csr_matrix((np.ones(1, F32), np.array([2**63], np.uint64), np.array([0, 1])), shape=(1, 2))
    mixed = so.csr_matrix((np.ones(1, F32), np.array([0], np.int32), np.array([0, 1], np.int64)), shape=(1, 1))
    assert mixed.aux_types == [np.int64, np.int64]


# ---- the compiled twins of the O(nnz) checks (sparse_ops/kernels/checks.py) --------------------------
@st.composite
def index_structures(draw):
    """(indices, indptr, columns): a csr structure of small random rows, often broken (an
    index out of range, an unsorted or repeated one in a row, indptr stepping down)."""
    index_dtype = draw(st.sampled_from(["int32", "int64"]))
    rows, columns = draw(st.integers(0, 6)), draw(st.integers(1, 9))
    lengths = draw(st.lists(st.integers(0, 4), min_size=rows, max_size=rows))
    indptr = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(index_dtype)
    indices = np.array(draw(st.lists(st.integers(-2, columns + 1), min_size=int(indptr[-1]),
                                     max_size=int(indptr[-1]))), dtype=index_dtype)
    if rows >= 2 and draw(st.booleans()):
        indptr[1], indptr[2] = indptr[2], indptr[1]
    return indices, indptr, columns


@given(index_structures(), st.booleans())
def test_compiled_checks_give_the_array_codes_verdicts(case, canonical):
    """The compiled checks (what NumPy int32/int64 index arrays get) and the array code (CuPy,
    other index dtypes) refuse the same structures for the same reason."""
    from sparse_ops import validation
    from sparse_ops.kernels import checks

    indices, indptr, columns = case
    assert (checks.csr_violation(indices, indptr, columns, canonical)
            == validation.csr_violation(indices, indptr, columns, canonical))
    assert checks.row_sparse_violation(indices, columns) == validation.row_sparse_violation(indices, columns)


def test_numpy_int32_and_int64_indices_take_the_compiled_checks_other_index_dtypes_the_array_code():
    from sparse_ops import validation
    from sparse_ops.kernels import checks

    for dt in ("int32", "int64"):
        ind, ptr = np.array([0, 2], dt), np.array([0, 2], dt)
        assert validation._violation_check("csr", validation.csr_violation, ind, ptr) is checks.csr_violation
        assert validation._violation_check("row_sparse", validation.row_sparse_violation, ind) \
            is checks.row_sparse_violation
    for dt in ("int16", "uint32", ">i8"):
        ind = np.array([0, 2], dt)
        assert validation._violation_check("csr", validation.csr_violation, ind, ind) is validation.csr_violation
    # refused with the same messages either way
    for dt in ("int64", "int16"):
        with pytest.raises(so.SparseFormatError, match="duplicate index 1 after 1 in row 0"):
            csr([1, 2], np.array([1, 1], dt), np.array([0, 2], dt), (1, 3))
        with pytest.raises(so.SparseFormatError, match="unsorted index 0 after 2 at position 1"):
            so.row_sparse_array((np.ones((2, 2), F32), np.array([2, 0], dt)), shape=(4, 2))
        with pytest.raises(so.SparseFormatError, match="row index 7 at position 1 is out of range"):
            so.row_sparse_array((np.ones((2, 2), F32), np.array([2, 7], dt)), shape=(4, 2))


def test_an_op_meeting_a_malformed_unchecked_input_names_itself_and_the_argument():
    """A container whose full check was deferred (check=False, from_torch, the MXNet face's
    constructors) is refused at its first use by an op as any malformed input is: naming the
    op and the argument, on the native functions, invoke and the MXNet face alike."""
    import sparse_ops.compat.mxnet as mx

    def bad():
        return so.CSRNDArray(np.array([1.0, 2.0]), np.array([0, 99]), np.array([0, 1, 2]), (2, 3), check=False)

    want = r"operator 'dot': argument 'rhs' \(csr\): csr column index 99 at position 1 is out of range \[0, 3\)"
    with pytest.raises(SparseFormatError, match=want):
        so.dot(so.ones((2, 2)), bad())
    with pytest.raises(SparseFormatError, match=want):
        so.invoke("dot", [so.ones((2, 2)), bad()])
    face = mx.nd.sparse.csr_matrix((np.array([1.0, 2.0]), np.array([0, 99]), np.array([0, 1, 2])), shape=(2, 3))
    with pytest.raises(SparseFormatError, match=want.replace("rhs", "lhs")):
        mx.nd.dot(face, mx.nd.ones((3, 2)))
    y = so.dot(so.ones((2, 2)), so.csr_matrix(np.eye(2, 3)))  # and the next call is served as before
    np.testing.assert_array_equal(y.asnumpy(), np.ones((2, 2)) @ np.eye(2, 3))
