"""Creation, views, dtypes, copies, assignment, interchange and pickling of the containers."""
import pickle

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given
from hypothesis import strategies as st

import sparse_ops as so
from conftest import INDEX_DTYPES, VALUE_DTYPES, csr_parts, dense_arrays, row_sparse_parts


# ---- creation ---------------------------------------------------------------------------
def test_mxnet_names_and_subclassing():
    assert so.CSRNDArray.stype == "csr" and so.RowSparseNDArray.stype == "row_sparse"
    assert issubclass(so.CSRNDArray, so.NDArray) and issubclass(so.RowSparseNDArray, so.NDArray)
    assert so.NDArray.stype == "default"


def test_array_dtype_rules():
    assert so.array([1, 2, 3]).dtype == np.float32  # Python data: float32, as MXNet
    assert so.array(np.arange(3)).dtype == np.int64  # arrays keep their dtype
    assert so.array(np.arange(3, dtype=np.float16)).dtype == np.float16
    assert so.array([1, 2], dtype="int32").dtype == np.int32
    with pytest.raises(TypeError, match=r"arrays of dtype complex64 are not supported \(supported value dtypes: float16"):
        so.array([1, 2], dtype=np.complex64)
    with pytest.raises(TypeError, match="bool are not supported"):
        so.array(np.array([True, False]))
    assert so.array(np.array([True, False]), dtype="int32").asnumpy().tolist() == [1, 0]


def test_array_copies_its_source():
    src = np.ones(3, np.float32)
    x = so.array(src)
    src[0] = 5
    assert x.asnumpy()[0] == 1


def test_array_of_containers_keeps_stype_and_copies():
    c = so.array(np.eye(3, dtype=np.float32)).tostype("csr")
    d = so.array(c)
    assert d.stype == "csr" and not np.shares_memory(d.data, c.data)
    assert so.array(c, dtype="float64").dtype == np.float64
    assert so.array(sp.eye(3, format="csr")).stype == "csr"


@pytest.mark.parametrize("dtype", VALUE_DTYPES)
@pytest.mark.parametrize("stype", ["default", "row_sparse", "csr"])
def test_filled_creators(stype, dtype):
    shape = (4, 3)
    z = so.zeros(shape, stype=stype, dtype=dtype)
    assert (z.stype, z.shape, z.dtype) == (stype, shape, np.dtype(dtype))
    np.testing.assert_array_equal(z.asnumpy(), np.zeros(shape, dtype))
    if stype != "default":
        assert z.nnz == 0
    o = so.ones(shape, stype=stype, dtype=dtype)
    np.testing.assert_array_equal(o.asnumpy(), np.ones(shape, dtype))
    f = so.full(shape, 3, stype=stype, dtype=dtype)
    np.testing.assert_array_equal(f.asnumpy(), np.full(shape, 3, dtype))
    e = so.empty(shape, stype=stype, dtype=dtype)
    assert (e.stype, e.shape, e.dtype) == (stype, shape, np.dtype(dtype))


def test_default_dtype_is_float32_and_bad_shapes_refused():
    assert so.zeros((2, 2)).dtype == np.float32 and so.ones(3).shape == (3,)
    with pytest.raises(so.SparseFormatError, match="non-negative"):
        so.zeros((-1, 2))
    with pytest.raises(so.SparseFormatError, match="integers"):
        so.zeros((2.5, 2))
    with pytest.raises(so.SparseFormatError, match="2-d"):
        so.zeros((2, 2, 2), stype="csr")
    with pytest.raises(ValueError, match="unknown storage type"):
        so.zeros((2, 2), stype="coo")


@given(dense=dense_arrays(), index_dtype=st.sampled_from(INDEX_DTYPES))
def test_csr_matrix_from_every_input_form(dense, index_dtype):
    parts = csr_parts(dense, index_dtype)
    forms = [
        so.csr_matrix(parts, shape=dense.shape),
        so.csr_matrix(dense),
        so.csr_matrix(so.array(dense)),
        so.csr_matrix(so.array(dense).tostype("row_sparse")),
    ]
    if dense.dtype != np.float16:
        forms.append(so.csr_matrix(sp.csr_matrix(dense)))
        rows, cols = np.nonzero(dense)
        forms.append(so.csr_matrix((dense[rows, cols], (rows, cols)), shape=dense.shape))
    for x in forms:
        assert x.stype == "csr" and x.shape == dense.shape and x.dtype == dense.dtype
        np.testing.assert_array_equal(x.asnumpy(), dense)
    assert forms[0].aux_types == [np.dtype(index_dtype)] * 2


@given(dense=dense_arrays(ndim=st.integers(1, 3)), index_dtype=st.sampled_from(INDEX_DTYPES))
def test_row_sparse_array_from_every_input_form(dense, index_dtype):
    forms = [
        so.row_sparse_array(row_sparse_parts(dense, index_dtype), shape=dense.shape),
        so.row_sparse_array(dense),
    ]
    if dense.ndim == 2:
        forms.append(so.row_sparse_array(so.array(dense).tostype("csr")))
    for x in forms:
        assert x.stype == "row_sparse" and x.shape == dense.shape and x.dtype == dense.dtype
        np.testing.assert_array_equal(x.asnumpy(), dense)
    assert forms[0].aux_types == [np.dtype(index_dtype)]


def test_shape_inference_and_shape_tuples():
    x = so.csr_matrix((np.ones(2, np.float32), np.array([1, 4]), np.array([0, 1, 2])))
    assert x.shape == (2, 5)
    r = so.row_sparse_array((np.ones((2, 3), np.float32), np.array([0, 6])))
    assert r.shape == (7, 3)
    assert so.csr_matrix((3, 4)).shape == (3, 4) and so.csr_matrix((3, 4)).nnz == 0
    assert so.row_sparse_array((5, 2, 2)).shape == (5, 2, 2)
    with pytest.raises(so.SparseFormatError, match="does not match"):
        so.csr_matrix(np.eye(3), shape=(4, 4))


def test_coo_input_sums_duplicates_like_scipy():
    data, row, col = np.array([1.0, 2.0, 3.0, 4.0]), np.array([1, 0, 1, 1]), np.array([2, 0, 2, 0])
    x = so.csr_matrix((data, (row, col)), shape=(2, 3))
    ref = sp.csr_matrix((data, (row, col)), shape=(2, 3))
    np.testing.assert_array_equal(x.asnumpy(), ref.toarray())
    np.testing.assert_array_equal(x.indices, [0, 0, 2])
    with pytest.raises(so.SparseFormatError, match="coo col indices"):
        so.csr_matrix((data, (row, col)), shape=(2, 2))


def test_from_scipy_is_zero_copy_and_keeps_int32():
    m = sp.random(50, 40, density=0.1, format="csr", dtype=np.float32, random_state=0)
    x = so.csr_matrix(m)
    assert x.aux_types == [np.int32, np.int32]
    for ours, theirs in ((x.data, m.data), (x.indices, m.indices), (x.indptr, m.indptr)):
        assert np.shares_memory(ours, theirs)
    y = so.csr_matrix(m, copy=True)
    assert not np.shares_memory(y.data, m.data)


def test_from_scipy_canonicalises_and_converts_other_formats():
    m = sp.csr_matrix((np.array([1.0, 2.0, 5.0]), np.array([2, 0, 2]), np.array([0, 3])), shape=(1, 3))
    assert not m.has_canonical_format
    x = so.csr_matrix(m)
    np.testing.assert_array_equal(x.indices, [0, 2])
    np.testing.assert_array_equal(x.data, [2.0, 6.0])
    dense = np.array([[0, 1, 0], [2, 0, 3]], dtype=np.float64)
    for fmt in ("csc", "coo", "lil", "dok", "bsr", "dia"):
        np.testing.assert_array_equal(so.csr_matrix(sp.csr_matrix(dense).asformat(fmt)).asnumpy(), dense)
    with pytest.raises(TypeError, match="int8"):
        so.csr_matrix(sp.csr_matrix(dense.astype(np.int8)))
    assert so.csr_matrix(sp.csr_matrix(dense.astype(np.int8)), dtype="int32").dtype == np.int32


@pytest.mark.parametrize("index_dtype", [np.uint8, np.int8, np.int16, np.uint16, np.uint32, np.uint64])
@pytest.mark.parametrize("make", [so.csr_matrix, so.row_sparse_array, so.array])
def test_scipy_index_arrays_of_other_integer_dtypes_become_int64(index_dtype, make):
    """SciPy keeps whatever integer index dtype it is given; the containers hold int32 or
    int64 (as the (data, indices, indptr) form makes them), so a row id past the narrow
    dtype's range (row 299) never wraps on the way."""
    dense = np.zeros((300, 3), np.float32)
    dense[299, 1], dense[0, 2] = 5.0, -1.0
    m = sp.csr_matrix(dense)
    m.indices, m.indptr = m.indices.astype(index_dtype), m.indptr.astype(index_dtype)
    x = make(m)
    parts = [x.indices] + ([x.indptr] if x.stype == "csr" else [])
    assert all(p.dtype == np.int64 for p in parts)
    np.testing.assert_array_equal(x.asnumpy(), dense)
    np.testing.assert_array_equal(x.tostype("row_sparse").indices, [0, 299])


# ---- views --------------------------------------------------------------------------------
def test_views_are_zero_copy_and_index_views_read_only():
    data = np.array([1.0, 2.0, 3.0], np.float32)
    indices, indptr = np.array([0, 2, 1]), np.array([0, 2, 3])
    x = so.csr_matrix((data, indices, indptr), shape=(2, 3))
    assert np.shares_memory(x.data, data) and np.shares_memory(x.indices, indices)
    x.data[0] = 10  # values are writable
    assert x.asnumpy()[0, 0] == 10
    for view in (x.indices, x.indptr, x.aux_data(0), x.aux_data(1)):
        with pytest.raises(ValueError, match="read-only"):
            view[0] = 1
    np.testing.assert_array_equal(x.aux_data(0), indptr)
    np.testing.assert_array_equal(x.aux_data(1), indices)
    assert x.aux_shapes == [(3,), (3,)] and x.nnz == 3
    r = x.tostype("row_sparse")
    with pytest.raises(ValueError, match="read-only"):
        r.indices[0] = 1
    r.data[0, 0] = 7
    assert r.asnumpy()[0, 0] == 7 and r.nnz_rows == 2 and r.nnz == 6
    d = so.array(np.ones((2, 2), np.float32))
    d.data[0, 0] = 5
    assert d.asnumpy()[0, 0] == 5


def test_components_are_one_set_of_arrays_for_everyone():
    """Users, built-in kernels and plugin kernels read the same cached component views, and
    a view handed on into a new container stores the array it shows, not the view."""
    x = so.csr_matrix(sp.random(6, 5, density=0.4, format="csr", random_state=1, dtype=np.float32))
    assert x.indices is x.indices and x.indptr is x.indptr and x.data is x.data
    y = so.csr_matrix((x.data, x.indices, x.indptr), shape=x.shape)
    assert all(type(a) is np.ndarray for a in (y._data, y._indices, y._indptr))
    assert y.indices.base is not None and np.shares_memory(y.indices, x.indices)
    derived = so.csr_matrix((x.data * 2, x.indices[:], x.indptr), shape=x.shape)  # arrays derived from views
    assert all(type(a) is np.ndarray for a in (derived._data, derived._indices))
    for out in (so.square(x), so.negative(x), x.tostype("row_sparse"), so.elemwise_add(x, x)):
        assert type(out._data) is np.ndarray and all(type(a) is np.ndarray for a in out._aux())
    assert so.square(x).indices.base is not None and np.shares_memory(so.square(x).indices, x.indices)


def test_builtin_and_plugin_kernels_share_one_numba_specialisation():
    """dot(csr, dense) (a built-in) and the cookbook's csr_spmm (a plugin) run the same
    sdk.csr cpu kernel on a container's components: numba compiles it once per dtype,
    not once for the built-in's arrays and once for the plugin's read-only views."""
    pytest.importorskip("sparse_ops_cookbook")
    from sparse_ops.sdk import csr_cpu

    a = so.csr_matrix(sp.random(40, 30, density=0.2, format="csr", random_state=2, dtype=np.float64))
    w = so.array(np.random.default_rng(0).standard_normal((30, 4)))
    serial = csr_cpu.csr_dense_rows  # this size runs serially
    before = set(serial.signatures)  # other tests may have called it with SciPy's (writable) arrays
    np.testing.assert_allclose(so.dot(a, w).asnumpy(), a.asscipy() @ w.asnumpy(), rtol=1e-12)
    np.testing.assert_allclose(so.ops.csr_spmm(a, w).asnumpy(), a.asscipy() @ w.asnumpy(), rtol=1e-12)
    # arguments: indptr, indices, data, b, out, lo, hi. Only signatures these two calls can
    # have made: w is a writable C array (a test run before this one may have called the
    # kernel with a read-only b, from a buffer another library owns)
    mine = [sig for sig in serial.signatures
            if str(sig[2].dtype) == a.data.dtype.name and str(sig[1].dtype) == a.indices.dtype.name
            and sig[3].layout == "C" and sig[3].mutable and not sig[0].mutable and not sig[1].mutable]
    assert len(mine) == 1, mine
    assert mine[0][2].mutable
    new = set(serial.signatures) - before
    assert len(new) <= 1 and all(not sig[0].mutable and not sig[1].mutable for sig in new), new


def test_big_shapes_beyond_int32_product():
    rows, cols = 200_000, 50_000  # 1e10 elements
    x = so.csr_matrix((np.ones(3, np.float32), np.array([0, 49_999, 7]), np.array([0, 2] + [3] * (rows - 1))),
                      shape=(rows, cols))
    assert x.shape == (rows, cols) and x.size == rows * cols > 2**31
    r = so.zeros((rows, cols), stype="row_sparse")
    assert r.size > 2**31
    s = x[0:2]
    np.testing.assert_array_equal(s.indices, [0, 49_999, 7])
    assert x.asscipy().nnz == 3 and x.asscipy()[0, 49_999] == 1
    rs = so.row_sparse_array((np.ones((1, 3), np.float32), np.array([2**31 + 5])), shape=(2**32, 3))
    assert rs.indices.dtype == np.int64 and rs.shape == (2**32, 3)
    assert rs.retain(np.array([2**31 + 5])).nnz_rows == 1


# ---- copies and assignment -----------------------------------------------------------------
@pytest.mark.parametrize("stype", ["default", "row_sparse", "csr"])
def test_copy_astype_copyto(stype):
    dense = np.array([[0, 1.5], [2, 0], [0, 0]], dtype=np.float32)
    x = so.array(dense).tostype(stype)
    c = x.copy()
    assert c.stype == stype and not np.shares_memory(c.data, x.data)
    c.data[...] = 0
    np.testing.assert_array_equal(x.asnumpy(), dense)
    a = x.astype("float64")
    assert a.dtype == np.float64 and a.stype == stype
    np.testing.assert_array_equal(a.asnumpy(), dense)
    assert x.astype("float32", copy=False) is x
    assert x.astype("float32").data is not x.data
    for dst_stype in ("default", "row_sparse", "csr"):
        dst = so.zeros(dense.shape, stype=dst_stype, dtype="float64")
        assert x.copyto(dst) is dst
        assert dst.stype == dst_stype and dst.dtype == np.float64
        np.testing.assert_array_equal(dst.asnumpy(), dense)
    moved = x.copyto(so.cpu())
    assert moved is not x and moved.stype == stype


@pytest.mark.parametrize("dst_stype", ["default", "row_sparse", "csr"])
@pytest.mark.parametrize("src_kind", ["default", "row_sparse", "csr", "numpy", "scipy"])
def test_whole_assignment_between_storage_types(dst_stype, src_kind):
    dense = np.array([[0, 1], [2, 0], [0, 0]], dtype=np.float64)
    src = {"numpy": dense, "scipy": sp.csr_matrix(dense)}.get(src_kind)
    if src is None:
        src = so.array(dense).tostype(src_kind)
    dst = so.ones((3, 2), stype=dst_stype, dtype="float32")
    dst[:] = src
    assert dst.stype == dst_stype and dst.dtype == np.float32
    np.testing.assert_array_equal(dst.asnumpy(), dense)
    if isinstance(src, so.NDArray) and src.stype == dst_stype:
        assert not np.shares_memory(dst.data, src.data)  # assignment copies


def test_assignment_errors_and_zero_scalar():
    x = so.ones((2, 2), stype="csr")
    with pytest.raises(ValueError, match="shape"):
        x[:] = np.ones((3, 2))
    with pytest.raises(ValueError, match="non-zero scalar"):
        x[:] = 1
    with pytest.raises(TypeError, match="whole assignment"):
        x[0] = np.ones(2)
    x[:] = 0
    assert x.nnz == 0 and x.asnumpy().sum() == 0


def test_dense_indexing():
    x = so.array(np.arange(12, dtype=np.float32).reshape(3, 4))
    np.testing.assert_array_equal(x[1].asnumpy(), [4, 5, 6, 7])
    x[0, :] = 1
    x[1] = so.array(np.full(4, 9, np.float32))
    np.testing.assert_array_equal(x.asnumpy()[:2], [[1] * 4, [9] * 4])
    assert x[2, 3].item() == 11 and float(x[2, 3]) == 11.0
    x[:] = so.array(np.eye(3, 4, dtype=np.float32)).tostype("csr")
    np.testing.assert_array_equal(x.asnumpy(), np.eye(3, 4))


# ---- interchange and description ----------------------------------------------------------
def test_dlpack_round_trip_and_sparse_refusal():
    src = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = so.from_dlpack(src)
    assert np.shares_memory(x.data, src)
    back = np.from_dlpack(x)
    assert np.shares_memory(back, src)
    assert so.from_dlpack(x).shape == (2, 3)
    again = so.from_dlpack(x)
    again[0, 0] = 7  # the same memory, counted as one write of it
    assert src[0, 0] == 7 and again._version is x._version
    with pytest.raises(TypeError, match="dense arrays only"):
        np.from_dlpack(x.tostype("csr"))
    assert np.shares_memory(np.asarray(x), src)
    with pytest.raises(TypeError, match="asnumpy"):
        np.asarray(x.tostype("csr"))


def test_repr_names_stype_shape_dtype_nnz_device():
    x = so.array(np.eye(3, dtype=np.float32)).tostype("csr")
    assert repr(x) == "<CSRNDArray 3x3 stype=csr dtype=float32 @cpu(0) nnz=3>"
    r = repr(x.tostype("row_sparse"))
    assert "RowSparseNDArray 3x3" in r and "nnz=9" in r and "row_sparse" in r
    d = repr(so.ones((2,), dtype="int64"))
    assert d.endswith("<NDArray 2 stype=default dtype=int64 @cpu(0)>") and "[1 1]" in d


@pytest.mark.parametrize("stype", ["default", "row_sparse", "csr"])
def test_pickle_round_trip(stype):
    dense = np.array([[0, 1.5], [2, 0]], dtype=np.float64)
    x = so.array(dense).tostype(stype)
    if stype == "csr":
        x = so.csr_matrix(csr_parts(dense, "int32"), shape=(2, 2))
    y = pickle.loads(pickle.dumps(x))
    assert type(y) is type(x) and y.shape == x.shape and y.dtype == x.dtype and y.device == x.device
    if stype != "default":
        assert y.aux_types == x.aux_types
    np.testing.assert_array_equal(y.asnumpy(), dense)


def test_to_same_device_is_identity():
    x = so.ones((2, 2), stype="csr")
    assert x.to(so.cpu()) is x and x.as_in_context("cpu") is x
    assert x.to("cpu", copy=True) is not x
    assert x.context == so.cpu() == x.device


def test_numpy_operands_defer_to_the_containers_operators():
    """A NumPy scalar on the left gives a container (and the tape records the call), as with
    MXNet's NDArray (``__array_priority__``); a NumPy array on either side still gives
    NumPy's result, and a bool is the number 1 or 0."""
    x = so.array(np.arange(1, 4, dtype=np.float32))
    x.attach_grad()
    with so.autograd.record():
        y = np.float32(2.0) * x - np.float64(1.0)
    assert isinstance(y, so.NDArray) and y.dtype == np.float32
    y.backward()
    np.testing.assert_array_equal(x.grad.asnumpy(), [2, 2, 2])
    c = so.array(np.array([[0, 2.], [3, 0]], np.float32)).tostype("csr")
    assert (np.float32(2) * c).stype == "csr"
    r = np.ones(3) + x
    assert type(r) is np.ndarray and r.dtype == np.float64
    np.testing.assert_array_equal(r, [2, 3, 4])
    np.testing.assert_array_equal(x > np.array([1, 1, 5]), [False, True, False])
    np.testing.assert_array_equal((x * True).asnumpy(), x.asnumpy())
    np.testing.assert_array_equal((x + np.bool_(False)).asnumpy(), x.asnumpy())


def test_full_with_a_value_its_dtype_cannot_hold_says_so():
    with pytest.raises(ValueError, match="full: the value 1099511627776 does not fit dtype int32"):
        so.full((2,), 2**40, dtype="int32")
    for val in (float("nan"), float("inf"), np.float32(-np.inf)):
        for stype in ("default", "csr", "row_sparse"):
            with pytest.raises(ValueError, match=r"full: the value .* does not fit dtype int64 \(an integer dtype "
                                                 r"has no NaN or infinity\)"):
                so.full((2, 2), val, stype=stype, dtype="int64")
    np.testing.assert_array_equal(so.full((2,), 7, dtype="int32").asnumpy(), [7, 7])
    np.testing.assert_array_equal(so.full((2,), 2.9, dtype="int32").asnumpy(), [2, 2])  # as np.full truncates


def test_iteration_goes_along_the_first_axis_and_refuses_a_0_d_array():
    """As NumPy: a 0-d array (a full reduction's result) cannot be iterated over (len()
    refuses it too), never an empty loop that skips the value silently."""
    total = so.sum(so.ones((2,)))
    with pytest.raises(TypeError, match="iteration over a 0-d array"):
        iter(total)
    x = so.array(np.arange(6.0).reshape(3, 2))
    rows = list(x)
    assert len(rows) == 3 and all(isinstance(r, so.NDArray) for r in rows)
    np.testing.assert_array_equal(np.stack([r.asnumpy() for r in rows]), x.asnumpy())
