"""Reductions (sum, mean, norm, square_sum) and broadcast_to against NumPy, on every storage
type: values, shapes, dtypes, output storage types, dispatch modes, gradients and errors."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import sparse_ops as so
from sparse_ops.dispatch import InferenceError
from sparse_ops.ops.reduce import _csr_reduce, reduce_axes
from sparse_ops.registry import ParameterError
from sparse_ops.sdk.testing import check_gradient

from conftest import INDEX_DTYPES, csr_parts, dense_arrays, row_sparse_parts

DTYPES = ["float32", "float64", "int32", "int64"]
OPS = ["sum", "mean", "square_sum", "norm1", "norm2"]


# ---- references ------------------------------------------------------------------------------------
def ref_axes(axis, ndim, exclude):
    """Written independently of reduce_axes: MXNet's rule, None/() = every axis."""
    if axis is None or axis == ():
        return tuple(range(ndim))
    listed = [axis] if isinstance(axis, int) else list(axis)
    listed = sorted(a + ndim if a < 0 else a for a in listed)
    return tuple(i for i in range(ndim) if i not in listed) if exclude else tuple(listed)


def reference(op, a, axis, keepdims, exclude=False):
    axes = ref_axes(axis, a.ndim, exclude)
    w = a.astype(np.float64)  # exact: the strategies draw small integers
    if op == "sum":
        r = w.sum(axis=axes, keepdims=keepdims)
    elif op == "square_sum":
        r = (w * w).sum(axis=axes, keepdims=keepdims)
    elif op == "norm1":
        r = np.abs(w).sum(axis=axes, keepdims=keepdims)
    elif op == "norm2":
        r = np.sqrt((w * w).sum(axis=axes, keepdims=keepdims))
    else:
        count = math.prod(a.shape[i] for i in axes)
        with np.errstate(invalid="ignore", divide="ignore"):
            r = w.sum(axis=axes, keepdims=keepdims) / count
        if a.dtype.kind != "f":
            r = np.zeros_like(r) if count == 0 else np.trunc(r)
    return np.asarray(r).astype(a.dtype)


def call(op, x, axis, keepdims, exclude=False):
    if op.startswith("norm"):
        assert not exclude
        return so.norm(x, ord=int(op[-1]), axis=axis, keepdims=keepdims)
    return getattr(so, op)(x, axis=axis, keepdims=keepdims, exclude=exclude)


def explain(op, x, axis, keepdims, exclude=False):
    if op.startswith("norm"):
        return so.explain("norm", x, ord=int(op[-1]), axis=axis, keepdims=keepdims)
    return so.explain(op, x, axis=axis, keepdims=keepdims, exclude=exclude)


def assert_matches(got, want):
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape, got.dtype, want.dtype)
    values = got.asnumpy()
    if want.dtype.kind == "f":
        rtol = {2: 2e-3, 4: 1e-5, 8: 1e-12}[want.dtype.itemsize]
        np.testing.assert_allclose(values, want, rtol=rtol, atol=0)
    else:
        np.testing.assert_array_equal(values, want)


@st.composite
def axis_args(draw, ndim):
    """None, an int or a tuple of distinct axes, each possibly negative."""
    kind = draw(st.sampled_from(["none", "int", "tuple"]))
    if ndim == 0 or kind == "none":
        return None
    flip = lambda a: a - ndim if draw(st.booleans()) else a  # noqa: E731
    if kind == "int":
        return flip(draw(st.integers(0, ndim - 1)))
    return tuple(flip(a) for a in draw(st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim, unique=True)))


@st.composite
def cases(draw, ndim):
    """(op, dense values, axis, keepdims, exclude)."""
    a = draw(dense_arrays(ndim=ndim, max_side=6, dtypes=DTYPES))
    op = draw(st.sampled_from(OPS))
    axis = draw(axis_args(a.ndim))
    exclude = False if op.startswith("norm") else draw(st.booleans())
    return op, a, axis, draw(st.booleans()), exclude


# ---- values against NumPy, per storage type ----------------------------------------------------------
@given(cases(st.integers(0, 3)))
def test_dense_matches_numpy(case):
    op, a, axis, keepdims, exclude = case
    x = so.array(a)
    out = call(op, x, axis, keepdims, exclude)
    assert out.stype == "default"
    assert_matches(out, reference(op, a, axis, keepdims, exclude))
    assert explain(op, x, axis, keepdims, exclude)["dispatch_mode"] == "fcompute"


@given(cases(2), st.sampled_from(INDEX_DTYPES))
def test_csr_matches_numpy_without_densifying(case, index_dtype):
    op, a, axis, keepdims, exclude = case
    x = so.csr_matrix(csr_parts(a, index_dtype), shape=a.shape)
    with warnings.catch_warnings():
        warnings.simplefilter("error", so.StorageFallbackWarning)
        out = call(op, x, axis, keepdims, exclude)
    assert out.stype == "default"
    assert_matches(out, reference(op, a, axis, keepdims, exclude))
    plan = explain(op, x, axis, keepdims, exclude)
    assert plan["dispatch_mode"] == "fcompute_ex" and plan["out_stypes"] == ["default"]


@given(cases(st.integers(1, 3)), st.sampled_from(INDEX_DTYPES))
def test_row_sparse_matches_numpy_without_densifying(case, index_dtype):
    op, a, axis, keepdims, exclude = case
    x = so.row_sparse_array(row_sparse_parts(a, index_dtype), shape=a.shape)
    with warnings.catch_warnings():
        warnings.simplefilter("error", so.StorageFallbackWarning)
        out = call(op, x, axis, keepdims, exclude)
    assert_matches(out.tostype("default"), reference(op, a, axis, keepdims, exclude))
    assert explain(op, x, axis, keepdims, exclude)["dispatch_mode"] == "fcompute_ex"


@given(dense_arrays(ndim=2, max_side=7, dtypes=["float16", "float32", "float64", "int32", "int64"]),
       st.sampled_from(INDEX_DTYPES), st.sampled_from([None, 0, 1]), st.sampled_from(["sum", "norm1", "norm2"]),
       st.booleans())
def test_csr_array_module_path_matches_numba_path(a, index_dtype, axis, op, keepdims):
    """The gpu (array-module) code, run on NumPy, agrees with the numba kernels."""
    x = so.csr_matrix(csr_parts(a, index_dtype), shape=a.shape)
    mode = {"sum": 0, "norm2": 1, "norm1": 2}[op]
    axes = reduce_axes(axis, 2)
    host = so.OpContext(so.cpu(), False, None)
    fast = _csr_reduce(host, x, axes, keepdims, mode, use_numba=True)
    generic = _csr_reduce(host, x, axes, keepdims, mode, use_numba=False)
    assert fast.shape == generic.shape
    np.testing.assert_allclose(fast, generic, rtol=1e-6)


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_parallel_column_sums_match_serial(mode, rng):
    """The chunked kernel (used for large inputs) agrees with the serial one, whatever the chunking."""
    from sparse_ops.kernels.reduce import csr_col_sums_chunked, csr_col_sums_into

    a = np.where(rng.random((40, 7)) < 0.5, rng.integers(-9, 9, (40, 7)), 0).astype(np.float64)
    data, indices, indptr = csr_parts(a, np.int32)
    serial = np.zeros(7)
    csr_col_sums_into(indices, data, 0, len(data), mode, serial)
    want = [a.sum(0), (a * a).sum(0), np.abs(a).sum(0)][mode]
    np.testing.assert_array_equal(serial, want)
    for chunks in (1, 2, 3, 64):
        buf = np.zeros((chunks, 7))
        csr_col_sums_chunked(indptr, indices, data, mode, buf)
        np.testing.assert_array_equal(buf.sum(axis=0), want)


@pytest.mark.parametrize("stype", ["default", "csr", "row_sparse"])
@pytest.mark.parametrize("op", ["sum", "mean"])
def test_float16_accumulates_in_float32(stype, op):
    a = np.full((4, 3000), 1.0, dtype=np.float16)  # 3000 ones: float16 alone would stall at 2048
    a[1] = 0
    x = so.array(a).tostype(stype)
    for axis in (None, 0, 1):
        out = getattr(so, op)(x, axis=axis)
        assert out.dtype == np.float16
        np.testing.assert_allclose(out.asnumpy(), reference(op, a, axis, False), rtol=2e-3)


@pytest.mark.parametrize("stype", ["default", "csr", "row_sparse"])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_nothing_stored(stype, index_dtype):
    a = np.zeros((5, 4), dtype=np.float32)
    x = so.zeros((5, 4), stype=stype)
    if stype != "default":
        parts = csr_parts(a, index_dtype) if stype == "csr" else row_sparse_parts(a, index_dtype)
        x = (so.csr_matrix if stype == "csr" else so.row_sparse_array)(parts, shape=a.shape)
    for op in OPS:
        for axis in (None, 0, 1, (0, 1)):
            for keepdims in (False, True):
                assert_matches(call(op, x, axis, keepdims).tostype("default"), reference(op, a, axis, keepdims))


# ---- shapes and axis semantics ---------------------------------------------------------------------
@pytest.mark.parametrize("stype", ["default", "csr", "row_sparse"])
def test_full_reduction_is_0d_or_all_ones(stype):
    x = so.array(np.arange(6, dtype=np.float64).reshape(2, 3)).tostype(stype)
    for op in ("sum", "mean", "square_sum"):
        f = getattr(so, op)
        assert f(x).shape == () and f(x, axis=(0, 1)).shape == () and f(x, axis=()).shape == ()
        assert f(x, keepdims=True).shape == (1, 1)
        assert f(x, axis=0, exclude=True).shape == (2,)
        assert f(x, axis=(0, -1), exclude=True).shape == (2, 3)  # nothing left to reduce
    assert so.norm(x).shape == () and so.norm(x, keepdims=True).shape == (1, 1)
    assert float(so.sum(x)) == 15.0 and float(so.mean(x)) == 2.5


def test_positional_parameters_follow_mxnet_order():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = so.array(a)
    np.testing.assert_array_equal(so.sum(x, 1, True).asnumpy(), a.sum(axis=1, keepdims=True))
    np.testing.assert_allclose(so.norm(x, 1, 0).asnumpy(), np.abs(a).sum(axis=0))


def test_mean_of_nothing():
    x = so.zeros((0, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan(so.mean(x, axis=0).asnumpy()).all()
        assert so.mean(so.zeros((0, 3), dtype="int32"), axis=0).asnumpy().tolist() == [0, 0, 0]
        assert so.mean(x.tostype("csr"), axis=1).shape == (0,)


def test_reduce_axes_rules():
    assert reduce_axes(None, 3) == (0, 1, 2) and reduce_axes((), 3, True) == (0, 1, 2)
    assert reduce_axes(-1, 3) == (2,) and reduce_axes((2, -3), 3) == (0, 2)
    assert reduce_axes((1,), 3, True) == (0, 2) and reduce_axes(None, 0) == ()


# ---- errors --------------------------------------------------------------------------------------
@pytest.mark.parametrize("stype", ["default", "csr", "row_sparse"])
def test_axis_out_of_range_is_an_inference_error(stype):
    x = so.zeros((2, 3), stype=stype)
    for op in ("sum", "mean", "square_sum", "norm"):
        f = getattr(so, op)
        with pytest.raises(InferenceError, match=r"axis 2 is out of range for a 2-d input \(valid axes are -2..1\)"):
            f(x, axis=2)
        with pytest.raises(InferenceError, match="axis -3 is out of range"):
            f(x, axis=(0, -3))
        with pytest.raises(InferenceError, match="names the same axis twice"):
            f(x, axis=(1, -1))
    with pytest.raises(InferenceError, match="a 0-d input has no axes"):
        so.sum(so.array(np.float32(1)), axis=0)


def test_bad_parameters():
    x = so.zeros((2, 3))
    with pytest.raises(ParameterError, match="ord"):
        so.norm(x, ord=3)
    with pytest.raises(ParameterError, match="exclude"):
        so.norm(x, exclude=True)
    with pytest.raises(ParameterError, match="keepdims"):
        so.sum(x, keepdims="maybe")


# ---- square_sum keeps row_sparse over non-row axes with keepdims --------------------------------------
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_square_sum_row_sparse_output(index_dtype, rng):
    a = np.zeros((6, 4, 2))
    a[[1, 4]] = rng.standard_normal((2, 4, 2))
    x = so.row_sparse_array(row_sparse_parts(a, index_dtype), shape=a.shape)
    for params, axes in (({"axis": 1}, (1,)), ({"axis": (1, 2)}, (1, 2)), ({"axis": 0, "exclude": True}, (1, 2))):
        out = so.square_sum(x, keepdims=True, **params)
        assert out.stype == "row_sparse" and out.shape == reduced(a.shape, axes)
        np.testing.assert_array_equal(out.indices, [1, 4])
        assert out.indices.dtype == index_dtype
        np.testing.assert_allclose(out.asnumpy(), (a * a).sum(axis=axes, keepdims=True))
        plan = so.explain("square_sum", x, keepdims=True, **params)
        assert plan["dispatch_mode"] == "fcompute_ex" and plan["out_stypes"] == ["row_sparse"]
    for params in ({"axis": 1}, {"axis": 0, "keepdims": True}, {"axis": -1, "keepdims": True}, {}):
        out = so.square_sum(x, **params)
        assert out.stype == "default"
        np.testing.assert_allclose(out.asnumpy(), reference("square_sum", a, params.get("axis"),
                                                            params.get("keepdims", False)))


def reduced(shape, axes):
    return tuple(1 if i in axes else d for i, d in enumerate(shape))


# ---- gradients --------------------------------------------------------------------------------------
def _inputs(stype, rng, shape=(4, 5)):
    a = rng.standard_normal(shape)
    a[1] = 0  # an empty row
    a[rng.random(shape) < 0.3] = 0
    a[0, 0] = 1.5  # never all zero
    return so.array(a).tostype(stype)


GRAD_PARAMS = [{}, {"axis": 0}, {"axis": 1}, {"axis": -1, "keepdims": True}, {"axis": 0, "exclude": True},
               {"axis": (0, 1), "keepdims": True}]


@pytest.mark.parametrize("stype", ["default", "csr", "row_sparse"])
@pytest.mark.parametrize("op", ["sum", "mean", "square_sum"])
@pytest.mark.parametrize("params", GRAD_PARAMS)
def test_gradients(op, stype, params, rng):
    x = _inputs(stype, rng)
    (g,) = check_gradient(op, [x], params)
    assert g.shape == x.shape


@pytest.mark.parametrize("stype", ["default", "csr", "row_sparse"])
@pytest.mark.parametrize("ord", [1, 2])
@pytest.mark.parametrize("params", [{}, {"axis": 0}, {"axis": 1, "keepdims": True}, {"axis": (0, 1)}])
def test_norm_gradients(ord, stype, params, rng):
    x = _inputs(stype, rng)
    (g,) = check_gradient("norm", [x], {"ord": ord, **params})
    assert g.stype == stype  # x * (g / norm) and sign(x) * g keep x's storage type


def test_gradients_of_3d_row_sparse(rng):
    a = np.zeros((5, 3, 2))
    a[[0, 3]] = rng.standard_normal((2, 3, 2))
    x = so.row_sparse_array(a)
    for params in ({"axis": (1, 2)}, {"axis": 1, "keepdims": True}, {"axis": (0, 2)}):
        check_gradient("sum", [x], params)
        check_gradient("square_sum", [x], params)


def test_l2_gradient_at_zero_norm_is_zero():
    x = so.array(np.zeros((2, 3)))
    inst = so.get_op("norm").instance({"axis": 1})
    out = so.norm(x, axis=1)
    (g,) = inst.gradient([so.array(np.ones(2))], [x], [out])
    np.testing.assert_array_equal(g.asnumpy(), np.zeros((2, 3)))


def test_square_sum_row_sparse_gradient_stays_row_sparse(rng):
    a = np.zeros((6, 3))
    a[[2, 5]] = rng.standard_normal((2, 3))
    x = so.row_sparse_array(a)
    out = so.square_sum(x, axis=1, keepdims=True)
    head = so.row_sparse_array((np.ones((2, 1)), np.array([2, 5])), shape=(6, 1))
    (g,) = so.get_op("square_sum").instance({"axis": 1, "keepdims": True}).gradient([head], [x], [out])
    assert g.stype == "row_sparse"
    np.testing.assert_allclose(g.asnumpy(), 2 * a)
    check_gradient("square_sum", [x], {"axis": 1, "keepdims": True})


def test_backward_through_autograd(rng):
    a = rng.standard_normal((3, 4))
    x = so.array(a)
    x.attach_grad()
    with so.autograd.record():
        y = so.mean(x, axis=1)
    y.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), np.full((3, 4), 0.25))


# ---- broadcast_to and the private broadcasts --------------------------------------------------------
@pytest.mark.parametrize("src,shape,want", [
    ((3, 1), (3, 4), (3, 4)), ((1,), (2, 5), (2, 5)), ((2, 1, 3), (0, 4, 0), (2, 4, 3)), ((), (2, 2), (2, 2)),
    ((1, 3), (2, 0, 3), (2, 1, 3)),
])
def test_broadcast_to(src, shape, want, rng):
    a = rng.standard_normal(src)
    out = so.broadcast_to(so.array(a), shape=shape)
    np.testing.assert_array_equal(out.asnumpy(), np.broadcast_to(a, want))
    check_gradient("broadcast_to", [so.array(a)], {"shape": shape})


def test_broadcast_to_errors():
    with pytest.raises(InferenceError, match="axis 1 has length 3, neither 1 nor 4"):
        so.broadcast_to(so.zeros((2, 3)), shape=(2, 4))
    with pytest.raises(InferenceError, match="shorter shape"):
        so.broadcast_to(so.zeros((2, 3)), shape=(3,))


def test_broadcast_reduced_keeps_row_sparse_rows(rng):
    a = np.zeros((5, 1))
    a[[1, 3]] = rng.standard_normal((2, 1))
    g = so.row_sparse_array(a)
    out = so.ops._broadcast_reduced(g, shape=(5, 4), axis=(1,))
    assert out.stype == "row_sparse"
    np.testing.assert_array_equal(out.indices, [1, 3])
    np.testing.assert_array_equal(out.asnumpy(), np.broadcast_to(a, (5, 4)))
    dense = so.ops._broadcast_reduced(so.array(a[:, 0]), shape=(5, 4), axis=(1,))
    np.testing.assert_array_equal(dense.asnumpy(), np.broadcast_to(a, (5, 4)))
    check_gradient("_broadcast_reduced", [so.array(a[:, 0])], {"shape": (5, 4), "axis": (1,)})
    with pytest.raises(InferenceError, match="is not shape"):
        so.ops._broadcast_reduced(so.zeros((3,)), shape=(5, 4), axis=(1,))


def test_div_or_zero_gradient(rng):
    lhs = so.array(rng.standard_normal(4))
    rhs = so.array(np.array([1.5, -2.0, 0.0, 3.0]))
    out = so.ops._div_or_zero(lhs, rhs)
    np.testing.assert_allclose(out.asnumpy(), np.where(rhs.asnumpy() == 0, 0, lhs.asnumpy() / np.where(
        rhs.asnumpy() == 0, 1, rhs.asnumpy())))
    check_gradient("_div_or_zero", [lhs, so.array(np.array([1.5, -2.0, 0.5, 3.0]))])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_l2_norm_neither_overflows_nor_underflows(dtype):
    """Squares past the dtype's range are summed again on values scaled by a power of two
    (MXNet's nrm2 keeps a running scale): the norm and its gradient are right where the
    plain sum of squares gives inf or 0."""
    big = 1e20 if dtype == "float32" else 1e200
    small = 1e-30 if dtype == "float32" else 1e-200
    for v in ([big, big], [small, small], [big, -3 * big]):
        v = np.array(v, dtype)
        ref = np.sqrt(2.0) * abs(v[0]) if v[1] == v[0] else math.hypot(float(v[0]) / big, float(v[1]) / big) * big
        np.testing.assert_allclose(so.norm(so.array(v)).asnumpy(), ref, rtol=1e-6)
        np.testing.assert_allclose(so.norm(so.array(v.reshape(1, 2)).tostype("csr")).asnumpy(), ref, rtol=1e-6)
    rows = np.array([[big, 3], [small, 0], [0, 0]], dtype)
    for stype in ("default", "csr", "row_sparse"):  # each slice on its own terms, sparse ones too
        x = so.array(rows).tostype(stype)
        np.testing.assert_allclose(so.norm(x, axis=1).asnumpy(), [big, small, 0], rtol=1e-6)
        np.testing.assert_allclose(so.norm(x.T if stype == "default" else so.array(rows.T).tostype(stype),
                                           axis=0).asnumpy(), [big, small, 0], rtol=1e-6)
        np.testing.assert_allclose(so.norm(x, axis=0).asnumpy(), [big, 3], rtol=1e-6)
    x = so.array(np.array([[big, big]], dtype))
    x.attach_grad()
    with so.autograd.record():
        y = so.norm(x)
    y.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), [[0.5 ** 0.5, 0.5 ** 0.5]], rtol=1e-6)
    assert np.isinf(so.norm(so.array(np.array([np.inf, 1], dtype))).asnumpy())
    assert np.isnan(so.norm(so.array(np.array([np.nan, 1], dtype))).asnumpy())


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_sums_wrap_in_their_dtype(dtype):
    """An integer sum is stored in the input's dtype as C (and MXNet, which sums in it) wraps
    it; a mean divides the wrapped sum."""
    top = np.iinfo(dtype).max
    v = np.array([top, 1], dtype)
    wrapped = np.array([top], dtype) + np.array([1], dtype)  # NumPy's own wrap
    assert so.sum(so.array(v)).asnumpy() == wrapped[0]
    assert so.sum(so.array(v.reshape(1, 2)), axis=1).asnumpy()[0] == wrapped[0]
    assert so.mean(so.array(v)).asnumpy() == wrapped[0] // 2
