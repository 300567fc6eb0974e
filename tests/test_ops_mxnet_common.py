"""MXNet's common dense operators (cast, max/min/prod/nan*, arg searches, softmax family,
passthrough and rearranging ops, erf/erfinv), the potrf gradient, and the MXNet face's
refusals, against NumPy/SciPy references."""
import warnings

import numpy as np
import pytest
import scipy.special as sps

import sparse_ops as so
import sparse_ops.compat.mxnet as mx
from sparse_ops.sdk.testing import check_gradient


@pytest.fixture(autouse=True)
def _fallback_warnings_again():
    """The fallback warning comes once per signature and process: forget earlier tests' ones."""
    so.dispatch._warned.clear()

FLOATS = [np.float32, np.float64]
STYPES = ["default", "csr", "row_sparse"]


def _v(shape=(3, 4), seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return (rng.permutation(int(np.prod(shape))).reshape(shape) / 3.0 - 1.7).astype(dtype)


def _tol(dtype):
    return dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)


def _quiet(fn, *a, **k):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", so.StorageFallbackWarning)
        return fn(*a, **k)


# ---- cast -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("src", ["float16", "float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("dst", ["float16", "float32", "float64", "int32", "int64", "uint8"])
def test_cast_matches_numpy_astype(src, dst):
    v = np.array([[0.9, 1.3, -1.0], [300.0, 11.1, -3.0]]).astype(src)
    try:
        y = mx.nd.cast(mx.nd.array(v, dtype=src), dtype=dst)
    except so.SparseOpsError as exc:  # a dtype the library does not hold
        assert "uint8" in str(exc) and dst == "uint8"
        return
    assert y.dtype == np.dtype(dst)
    np.testing.assert_array_equal(y.asnumpy(), v.astype(dst))
    assert mx.nd.Cast(mx.nd.array(v, dtype=src), dtype=dst).dtype == np.dtype(dst)


@pytest.mark.parametrize("stype", ["csr", "row_sparse"])
def test_cast_of_sparse_falls_back_to_dense_with_a_warning(stype):
    v = _v()
    v[0] = 0
    x = mx.nd.array(v).tostype(stype)
    with pytest.warns(so.StorageFallbackWarning, match="cast"):
        y = mx.nd.cast(x, dtype="float64")
    assert y.stype == "default" and y.dtype == np.float64
    np.testing.assert_allclose(y.asnumpy(), v.astype(np.float32), rtol=1e-7)


def test_cast_gradient_is_cast_back_to_the_input_dtype():
    x = mx.nd.array(_v(), dtype=np.float32)
    x.attach_grad()
    with mx.autograd.record():
        y = (mx.nd.cast(x, dtype="float64") * mx.nd.array(_v(seed=1), dtype=np.float64)).sum()
    y.backward()
    assert x.grad.dtype == np.float32
    np.testing.assert_allclose(x.grad.asnumpy(), _v(seed=1), rtol=1e-6)
    check_gradient("cast", [so.array(_v())], {"dtype": "float64"})
    with pytest.raises(so.SparseOpsError, match="cast.*dtype"):
        mx.nd.cast(x, dtype="complex128")
    with pytest.raises(so.SparseOpsError, match="cast.*dtype"):
        mx.nd.cast(x)


# ---- identity, BlockGrad, erf, erfinv ----------------------------------------------------------------
@pytest.mark.parametrize("name", ["identity", "_copy", "BlockGrad", "stop_gradient"])
@pytest.mark.parametrize("stype", STYPES)
def test_copies_keep_the_storage_type(name, stype):
    v = _v()
    v[1] = 0
    x = mx.nd.array(v).tostype(stype)
    y = getattr(mx.nd, name)(x)
    assert y.stype == stype
    np.testing.assert_array_equal(y.asnumpy(), v.astype(np.float32))
    y[:] = 0 if stype == "default" else y  # a copy: writing it leaves x alone
    np.testing.assert_array_equal(x.asnumpy(), v.astype(np.float32))


def test_block_grad_stops_the_gradient_and_identity_passes_it():
    a, b = mx.nd.array(_v()), mx.nd.array(_v(seed=1))
    a.attach_grad()
    b.attach_grad()
    with mx.autograd.record():
        loss = (mx.nd.stop_gradient(3 * b) + a * mx.nd.identity(b)).sum()
    loss.backward()
    np.testing.assert_allclose(a.grad.asnumpy(), _v(seed=1).astype(np.float32))
    np.testing.assert_allclose(b.grad.asnumpy(), _v().astype(np.float32))  # only through identity


@pytest.mark.parametrize("dtype", FLOATS)
def test_erf_and_erfinv_against_scipy(dtype):
    v = np.linspace(-0.95, 0.95, 12).reshape(3, 4).astype(dtype)
    np.testing.assert_allclose(mx.nd.erf(mx.nd.array(v, dtype=dtype)).asnumpy(), sps.erf(v.astype(np.float64)), **_tol(dtype))
    np.testing.assert_allclose(mx.nd.erfinv(mx.nd.array(v, dtype=dtype)).asnumpy(), sps.erfinv(v.astype(np.float64)),
                               rtol=1e-5 if dtype == np.float32 else 1e-12)
    for name in ("erf", "erfinv"):
        check_gradient(name, [so.array(v.astype(np.float64))], eps=1e-6, rtol=1e-5)
    c = mx.nd.array(np.where(np.abs(v) < 0.5, 0, v), dtype=dtype).tostype("csr")
    y = mx.nd.erf(c)
    assert y.stype == "default"
    np.testing.assert_allclose(y.asnumpy(), sps.erf(c.asnumpy().astype(np.float64)), **_tol(dtype))


# ---- reductions ------------------------------------------------------------------------------------
REDUCTIONS = {"max": np.max, "min": np.min, "prod": np.prod, "nansum": np.nansum, "nanprod": np.nanprod}


@pytest.mark.parametrize("name", list(REDUCTIONS))
@pytest.mark.parametrize("dtype", FLOATS + [np.int32, np.int64])
@pytest.mark.parametrize("axis, keepdims, exclude", [(None, False, False), (0, False, False), (1, True, False),
                                                     ((0, 2), False, False), (1, False, True), (-1, True, False)])
def test_reductions_match_numpy(name, dtype, axis, keepdims, exclude):
    v = _v((2, 3, 4)).astype(dtype) if np.dtype(dtype).kind == "f" else np.arange(-11, 13).reshape(2, 3, 4).astype(dtype) % 5
    if exclude:
        axes = tuple(i for i in range(3) if i != axis % 3)
    else:
        axes = axis
    y = getattr(mx.nd, name)(mx.nd.array(v, dtype=dtype), axis=axis, keepdims=keepdims, exclude=exclude)
    ref = REDUCTIONS[name](v, axis=axes, keepdims=keepdims).astype(dtype)
    ref = ref.reshape(ref.shape or (1,))  # the face gives a full reduction shape (1,), as MXNet
    assert y.dtype == np.dtype(dtype) and y.shape == ref.shape
    np.testing.assert_allclose(y.asnumpy(), ref, rtol=1e-5 if dtype == np.float32 else 1e-12)
    fluent = getattr(mx.nd.array(v, dtype=dtype), name)(axis=axis, keepdims=keepdims, exclude=exclude)
    np.testing.assert_allclose(fluent.asnumpy().reshape(ref.shape), ref, rtol=1e-5 if dtype == np.float32 else 1e-12)


def test_max_axis_alias_and_nan_handling():
    v = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, -2.0]])
    x = mx.nd.array(v, dtype=np.float64)
    np.testing.assert_array_equal(mx.nd.max_axis(x, axis=1).asnumpy(), np.max(v, axis=1))
    np.testing.assert_array_equal(mx.nd.min_axis(x, axis=0).asnumpy(), np.min(v, axis=0))
    np.testing.assert_allclose(mx.nd.nansum(x, axis=1).asnumpy(), [4.0, 7.0])
    np.testing.assert_allclose(mx.nd.nanprod(x, axis=1).asnumpy(), [3.0, -40.0])
    x.attach_grad()
    with mx.autograd.record():
        y = mx.nd.nansum(x) + mx.nd.nanprod(x, axis=1).sum()
    y.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), [[1 + 3.0, 0.0, 1 + 1.0], [1 - 10.0, 1 - 8.0, 1 + 20.0]])


def _others_products(v, axis):
    """For each value, the product of the other values of its slice along ``axis`` (None:
    the whole array), by brute force: the exact derivative of the product."""
    out = np.empty_like(v)
    for idx in np.ndindex(v.shape):
        mask = np.zeros(v.shape, bool)
        if axis is None:
            mask[...] = True
        else:
            sl = list(idx)
            sl[axis] = slice(None)
            mask[tuple(sl)] = True
        mask[idx] = False
        out[idx] = np.prod(v[mask])
    return out


@pytest.mark.parametrize("axis", [None, 0, 1])
@pytest.mark.parametrize("name", ["prod", "nanprod"])
def test_the_gradient_of_a_product_is_exact_where_values_are_zero(name, axis):
    """Slices with no zero, one zero and two zeros: the product of the other values (torch's
    and JAX's gradient), not y / x (NaN at a zero); nanprod counts NaN as 1 and gives it 0."""
    v = np.array([[0.0, 2.0, 3.0, 1.5], [1.0, -2.0, 4.0, 0.5], [0.0, 0.0, 5.0, 2.0]])
    if name == "nanprod":
        v[1, 3] = np.nan
    x = so.array(v)
    x.attach_grad()
    with so.autograd.record():
        y = getattr(so, name)(x, axis=axis)
    y.backward()
    counted = np.where(np.isnan(v), 1.0, v)
    want = np.where(np.isnan(v), 0.0, _others_products(counted, axis))
    np.testing.assert_allclose(x.grad.asnumpy(), want, rtol=1e-12, atol=0)


@pytest.mark.parametrize("stype", ["csr", "row_sparse"])
@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_reductions_of_sparse_fall_back_to_dense(name, stype):
    v = _v()
    v[0] = 0
    with pytest.warns(so.StorageFallbackWarning, match=name):
        y = getattr(mx.nd, name)(mx.nd.array(v, dtype=np.float64).tostype(stype), axis=1)
    assert y.stype == "default"
    np.testing.assert_allclose(y.asnumpy(), REDUCTIONS[name](v, axis=1), rtol=1e-12)


@pytest.mark.parametrize("name", list(REDUCTIONS))
@pytest.mark.parametrize("params", [{}, {"axis": 0}, {"axis": (0, 2), "keepdims": True}, {"axis": 1, "exclude": True}])
def test_reduction_gradients_by_finite_differences(name, params):
    check_gradient(name, [so.array(_v((2, 3, 2)))], params, eps=1e-6, rtol=1e-5)


def test_max_gradient_goes_to_every_tie():
    x = mx.nd.array([[1.0, 3.0, 3.0], [2.0, 0.0, -1.0]])
    x.attach_grad()
    with mx.autograd.record():
        y = mx.nd.max(x, axis=1)
    y.backward(mx.nd.array([10.0, 20.0]))
    np.testing.assert_array_equal(x.grad.asnumpy(), [[0, 10, 10], [20, 0, 0]])


def test_empty_reductions():
    e = mx.nd.zeros((0, 3))
    assert mx.nd.prod(e, axis=0).asnumpy().tolist() == [1, 1, 1]
    assert mx.nd.nansum(e, axis=0).asnumpy().tolist() == [0, 0, 0]
    assert mx.nd.max(e, axis=1).shape == (0,)
    with pytest.raises(so.SparseOpsError, match="max.*axis"):
        mx.nd.max(e, axis=0)


# ---- index searches --------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOATS + [np.int32, np.int64])
def test_argmax_argmin_match_numpy(dtype):
    v = np.array([[1, 7, 7, 0], [5, -2, 3, 5], [0, 0, 1, -9]], dtype=dtype)
    x = mx.nd.array(v, dtype=dtype)
    for name, ref in (("argmax", np.argmax), ("argmin", np.argmin)):
        for axis in (0, 1, -1):
            y = getattr(mx.nd, name)(x, axis=axis)
            assert y.dtype == np.dtype(dtype)
            np.testing.assert_array_equal(y.asnumpy(), ref(v, axis=axis))
            assert getattr(x, name)(axis=axis, keepdims=True).shape == np.expand_dims(ref(v, axis=axis), axis).shape
        assert getattr(mx.nd, name)(x).asnumpy() == ref(v)
    np.testing.assert_array_equal(mx.nd.argmax_channel(x).asnumpy(), np.argmax(v, axis=-1))
    np.testing.assert_array_equal(x.argmax_channel().asnumpy(), np.argmax(v, axis=-1))
    with pytest.raises(so.SparseOpsError, match="argmax"):
        mx.nd.argmax(mx.nd.zeros((0,)))


def test_argmax_of_csr_falls_back_and_gives_no_gradient():
    v = np.array([[0, 2.0, 0], [0, 0, 0], [-1.0, 0, 0]])
    with pytest.warns(so.StorageFallbackWarning):
        y = mx.nd.argmax(mx.nd.array(v).tostype("csr"), axis=1)
    np.testing.assert_array_equal(y.asnumpy(), np.argmax(v, axis=1))
    x = mx.nd.array(v)
    x.attach_grad()
    with mx.autograd.record():
        loss = (mx.nd.argmax(x, axis=1) * x.sum(axis=1)).sum()
    loss.backward()  # the indices are constants
    np.testing.assert_array_equal(x.grad.asnumpy(), np.repeat(np.argmax(v, axis=1)[:, None], 3, axis=1))


# ---- softmax family --------------------------------------------------------------------------------
def _softmax_ref(v, axis, t):
    z = v / t
    e = np.exp(z - z.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("dtype", FLOATS + [np.float16])
@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("temperature", [None, 0.5])
def test_softmax_family_matches_numpy(dtype, axis, temperature):
    v = _v((2, 3, 4)).astype(dtype)
    x = mx.nd.array(v, dtype=dtype)
    t = 1.0 if temperature is None else temperature
    w = v.astype(np.float64)
    refs = {"softmax": _softmax_ref(w, axis, t), "log_softmax": np.log(_softmax_ref(w, axis, t)),
            "softmin": _softmax_ref(-w, axis, t)}
    tol = dict(rtol=2e-3, atol=2e-3) if dtype == np.float16 else _tol(dtype) | {"rtol": 1e-5 if dtype == np.float32 else 1e-10}
    for name, ref in refs.items():
        y = getattr(mx.nd, name)(x, axis=axis, temperature=temperature)
        assert y.dtype == np.dtype(dtype)
        np.testing.assert_allclose(y.asnumpy().astype(np.float64), ref, **tol)
        np.testing.assert_allclose(getattr(x, name)(axis=axis).asnumpy().astype(np.float64),
                                   {"softmax": _softmax_ref(w, axis, 1), "softmin": _softmax_ref(-w, axis, 1),
                                    "log_softmax": np.log(_softmax_ref(w, axis, 1))}[name], **tol)


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "softmin"])
@pytest.mark.parametrize("params", [{}, {"axis": 0}, {"axis": 1, "temperature": 2.0}])
def test_softmax_family_gradients(name, params):
    check_gradient(name, [so.array(_v((2, 3, 2)))], params, eps=1e-6, rtol=1e-5)


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "softmin"])
@pytest.mark.parametrize("shape,axis", [((0,), -1), ((3, 0), -1), ((0, 4), 0), ((0, 4), -1)])
def test_softmax_family_of_empty_inputs(name, shape, axis):
    """Nothing to normalise: an empty result of the input's shape, and an empty gradient."""
    from sparse_ops import autograd

    x = so.array(np.empty(shape, np.float32))
    x.attach_grad()
    with autograd.record():
        y = so.dispatch.op_function(name)(x, axis=axis)
    assert y.shape == shape and y.dtype == np.float32
    y.backward()
    assert x.grad.shape == shape


def test_softmax_is_stable_for_large_inputs_and_refuses_bad_arguments():
    x = mx.nd.array([[1000.0, 1001.0], [-1000.0, -1e4]])
    np.testing.assert_allclose(mx.nd.softmax(x).asnumpy(), _softmax_ref(x.asnumpy().astype(np.float64), -1, 1),
                               rtol=1e-6)
    assert np.isfinite(mx.nd.log_softmax(x).asnumpy()).all()
    with pytest.raises(so.SparseOpsError, match="softmax.*axis"):
        mx.nd.softmax(x, axis=2)
    with pytest.raises(so.SparseOpsError, match="softmax.*temperature"):
        mx.nd.softmax(x, temperature=0.0)
    with pytest.raises(so.SparseOpsError, match="softmax.*int32"):
        mx.nd.softmax(mx.nd.array([1, 2], dtype=np.int32))


# ---- rearranging -----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOATS + [np.int64])
def test_rearranging_ops_match_numpy(dtype):
    v = _v((2, 1, 3)).astype(dtype) if np.dtype(dtype).kind == "f" else np.arange(6).reshape(2, 1, 3).astype(dtype)
    x = mx.nd.array(v, dtype=dtype)
    cases = [
        (mx.nd.squeeze(x), np.squeeze(v)), (mx.nd.squeeze(x, axis=1), np.squeeze(v, axis=1)), (x.squeeze(), np.squeeze(v)),
        (mx.nd.stack(x, x + 1, axis=1), np.stack([v, v + 1], axis=1)), (mx.nd.stack(x, axis=-1), np.stack([v], axis=-1)),
        (mx.nd.tile(x, reps=(2, 3)), np.tile(v, (2, 3))), (x.tile(reps=(2, 1, 1, 2)), np.tile(v, (2, 1, 1, 2))),
        (mx.nd.repeat(x, repeats=2), np.repeat(v, 2)), (x.repeat(repeats=3, axis=-1), np.repeat(v, 3, axis=-1)),
        (mx.nd.reverse(x, axis=0), np.flip(v, 0)), (mx.nd.flip(x, axis=(0, 2)), np.flip(v, (0, 2))),
        (x.flip(axis=2), np.flip(v, 2)), (mx.nd.swapaxes(x, dim1=0, dim2=2), np.swapaxes(v, 0, 2)),
        (mx.nd.SwapAxis(x, dim1=1, dim2=-1), np.swapaxes(v, 1, -1)), (x.swapaxes(dim1=0, dim2=1), np.swapaxes(v, 0, 1)),
    ]
    for got, ref in cases:
        assert got.dtype == np.dtype(dtype) and got.shape == ref.shape
        np.testing.assert_array_equal(got.asnumpy(), ref)
    assert mx.nd.squeeze(mx.nd.ones((1, 1))).shape == (1,)  # MXNet keeps one axis
    assert mx.nd.tile(mx.nd.zeros((0, 2)), reps=(2, 2)).shape == (0, 4)
    assert mx.nd.repeat(mx.nd.zeros((0, 2)), repeats=2, axis=1).shape == (0, 4)


@pytest.mark.parametrize("name, params, n", [
    ("squeeze", {}, 1), ("squeeze", {"axis": 1}, 1), ("stack", {"axis": 1}, 3), ("stack", {}, 1),
    ("tile", {"reps": (2, 1, 3)}, 1), ("tile", {"reps": (2, 1, 1, 2)}, 1), ("tile", {"reps": (2,)}, 1),
    ("repeat", {"repeats": 2}, 1), ("repeat", {"repeats": 3, "axis": 0}, 1), ("repeat", {"repeats": 2, "axis": -1}, 1),
    ("reverse", {"axis": (0, 2)}, 1), ("swapaxes", {"dim1": 0, "dim2": 2}, 1)])
def test_rearranging_gradients(name, params, n):
    check_gradient(name, [so.array(_v((2, 1, 3), seed=s)) for s in range(n)], params, eps=1e-6, rtol=1e-6)


def test_rearranging_refusals_name_the_op_and_argument():
    x = mx.nd.ones((2, 3))
    for call, pattern in [(lambda: mx.nd.squeeze(x, axis=0), "squeeze.*axis"),
                          (lambda: mx.nd.stack(x, mx.nd.ones((3, 2))), "stack.*shape"),
                          (lambda: mx.nd.stack(x, x, num_args=3), "stack.*num_args"),
                          (lambda: mx.nd.tile(x, reps=(-1, 2)), "tile.*reps"),
                          (lambda: mx.nd.repeat(x, repeats=-1), "repeat.*repeats"),
                          (lambda: mx.nd.reverse(x, axis=2), "reverse.*axis"),
                          (lambda: mx.nd.swapaxes(x, dim1=0, dim2=5), "swapaxes.*axis")]:
        with pytest.raises(mx.base.MXNetError, match=pattern):
            call()


# ---- potrf gradient --------------------------------------------------------------------------------
def _spd(n, batch=(), seed=0):
    rng = np.random.default_rng(seed)
    b = rng.normal(size=batch + (n, n))
    return b @ np.swapaxes(b, -1, -2) + n * np.eye(n)


def _potrf_grad_ref(a, dl):
    """dA by differentiating A = L L^T entry by entry in NumPy: solve the linear map
    dL -> dA for a symmetric perturbation basis (a reference independent of the formula)."""
    n = a.shape[-1]
    L = np.linalg.cholesky(a)
    out = np.zeros_like(a)
    h = 1e-6
    for i in range(n):
        for j in range(i + 1):
            e = np.zeros((n, n))
            e[i, j] = e[j, i] = 1.0
            d = (np.linalg.cholesky(a + h * e) - np.linalg.cholesky(a - h * e)) / (2 * h)
            val = np.sum(d * dl)
            if i == j:
                out[i, i] = val
            else:
                out[i, j] = out[j, i] = val / 2
    return out


@pytest.mark.parametrize("batch", [(), (2,), (2, 3)])
def test_potrf_gradient_matches_a_numpy_reference(batch):
    a = _spd(4, batch)
    dl = np.random.default_rng(1).normal(size=a.shape)
    x = mx.nd.array(a, dtype=np.float64)
    x.attach_grad()
    with mx.autograd.record():
        L = mx.nd.linalg.potrf(x)
    L.backward(mx.nd.array(dl, dtype=np.float64))
    ref = np.stack([_potrf_grad_ref(m, g) for m, g in zip(a.reshape(-1, 4, 4), dl.reshape(-1, 4, 4))]).reshape(a.shape)
    np.testing.assert_allclose(x.grad.asnumpy(), ref, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(L.asnumpy(), np.linalg.cholesky(a), rtol=1e-12)


@pytest.mark.parametrize("dtype", FLOATS)
def test_potrf_gradient_by_finite_differences(dtype):
    a = _spd(3, (2,), seed=2).astype(dtype)
    tol = dict(eps=1e-6, rtol=1e-5) if dtype == np.float64 else dict(eps=1e-2, rtol=2e-2, atol=2e-2)
    check_gradient("_linalg_potrf", [so.array(a)], **tol)


def test_potrf_second_order_records():
    x = mx.nd.array(_spd(3), dtype=np.float64)
    x.attach_grad()
    with mx.autograd.record():
        L = mx.nd.linalg.potrf(x)
        (g,) = mx.autograd.grad(L.sum(), [x], create_graph=True)
        s = (g * g).sum()
    s.backward()
    assert np.isfinite(x.grad.asnumpy()).all() and np.abs(x.grad.asnumpy()).sum() > 0


# ---- every refusal of the face is an MXNetError naming the op and the argument ---------------------------
def _bad_calls():
    d = mx.nd.ones((2, 3))
    return [
        ("tostype", "stype", lambda: d.tostype("foo")),
        ("zeros", "stype", lambda: mx.nd.zeros((2, 2), stype="foo")),
        ("sparse.empty", "stype", lambda: mx.nd.sparse.empty("foo", (2, 2))),
        ("csr_matrix", "arg1", lambda: mx.nd.sparse.csr_matrix(([1.0], [0], [0, 1], [5]), shape=(2, 2))),
        ("csr_matrix", "arg1", lambda: mx.nd.sparse.csr_matrix(d.tostype("row_sparse"))),
        ("csr_matrix", "shape", lambda: mx.nd.sparse.csr_matrix(np.ones((2, 3)), shape=(3, 3))),
        ("row_sparse_array", "arg1", lambda: mx.nd.sparse.row_sparse_array(([1.0],))),
        ("row_sparse_array", "arg1", lambda: mx.nd.sparse.row_sparse_array(d.tostype("csr"))),
        ("row_sparse_array", "shape", lambda: mx.nd.sparse.row_sparse_array(([[1.0]], []))),
        ("sparse.array", "source_array", lambda: mx.nd.sparse.array(object())),
        ("sparse.array", "source_array", lambda: mx.nd.sparse.array(d)),
        ("arange", "step", lambda: mx.nd.arange(0, 3, step=0)),
        ("arange", "repeat", lambda: mx.nd.arange(0, 3, repeat=0)),
        ("save", "data", lambda: mx.nd.save("/nonexistent/x", 3)),
        ("Activation", "act_type", lambda: mx.nd.Activation(d, act_type="swish")),
        ("cast", "dtype", lambda: mx.nd.cast(d, dtype="nope")),
        ("cast", "dtype", lambda: mx.nd.cast(d)),
        ("broadcast_add", "lhs", lambda: mx.nd.add(d, "x")),
        ("kv.create", "name", lambda: mx.kv.create(3)),
        ("is_capable", "capability", lambda: mx.kv.create("local").is_capable("teleport")),
        ("uniform", "unexpected", lambda: mx.nd.random.uniform(0, 1, shape=(2,), bogus=1)),
        ("rand_sparse_ndarray", "stype", lambda: mx.test_utils.rand_sparse_ndarray((2, 2), "foo")),
        ("rand_sparse_ndarray", "density", lambda: mx.test_utils.rand_sparse_ndarray((2, 2), "csr", density=2.0)),
        ("rand_sparse_ndarray", "distribution",
         lambda: mx.test_utils.rand_sparse_ndarray((2, 2), "row_sparse", distribution="powerlaw")),
        ("softmax", "axis", lambda: mx.nd.softmax(d, axis=3)),
        ("sum", "axis", lambda: mx.nd.sum(d, axis=5)),
    ]


@pytest.mark.parametrize("op, arg, call", _bad_calls(), ids=[f"{c[0]}-{c[1]}" for c in _bad_calls()])
def test_every_bad_call_is_an_mxnet_error_naming_op_and_argument(op, arg, call):
    with pytest.raises(Exception) as info:
        _quiet(call)
    e = info.value
    assert isinstance(e, mx.base.MXNetError), f"{type(e).__name__}: {e}"
    msg = str(e)
    assert op.split(".")[-1] in msg and arg in msg, msg
    if arg in ("stype", "source_array", "arg1", "shape", "density"):
        assert isinstance(e, ValueError)  # ``except ValueError`` keeps working
    d = mx.nd.ones((2,))  # the process and autograd still work
    d.attach_grad()
    with mx.autograd.record():
        y = (d * d).sum()
    y.backward()
    assert d.grad.asnumpy().tolist() == [2.0, 2.0]


# ---- logic and modulo ------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOATS + [np.int32, np.int64])
def test_logical_ops_and_mod_match_numpy(dtype):
    a = np.array([[0, 3, -2, 5], [7, 0, 1, -4], [2, -6, 0, 3]], dtype=dtype)
    b = np.array([[2, 0, -3, 1]], dtype=dtype)
    x, y = mx.nd.array(a, dtype=dtype), mx.nd.array(b, dtype=dtype)
    for name, ref in (("broadcast_logical_and", np.logical_and), ("broadcast_logical_or", np.logical_or),
                      ("broadcast_logical_xor", np.logical_xor)):
        got = getattr(mx.nd, name)(x, y)
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got.asnumpy(), ref(a, b).astype(dtype))
    np.testing.assert_array_equal(mx.nd.logical_not(x).asnumpy(), np.logical_not(a).astype(dtype))
    with np.errstate(all="ignore"):
        ref = np.where(b == 0, 0, np.mod(a, np.where(b == 0, 1, b)))
    got = mx.nd.broadcast_mod(x, y)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got.asnumpy(), ref.astype(dtype))  # Python's %: the divisor's sign, 0 for 0


def test_mod_gradient_and_logic_gradients_are_zero():
    check_gradient("broadcast_mod", *so.get_op("broadcast_mod").cls.samples()[0], eps=1e-6, rtol=1e-6)
    a, b = mx.nd.array([[1.0, 2.0]]), mx.nd.array([[0.0, 3.0]])
    a.attach_grad()
    with mx.autograd.record():
        z = (mx.nd.broadcast_logical_or(a, b) * a + mx.nd.logical_not(a)).sum()
    z.backward()
    np.testing.assert_array_equal(a.grad.asnumpy(), [[1.0, 1.0]])


# ---- activations -----------------------------------------------------------------------------------
def _act_refs(v):
    sa, sl = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
    return {
        ("hard_sigmoid", ()): np.clip(0.2 * v + 0.5, 0, 1),
        ("softsign", ()): v / (1 + np.abs(v)),
        ("smooth_l1", ()): np.where(np.abs(v) < 1, 0.5 * v * v, np.abs(v) - 0.5),
        ("smooth_l1", (("scalar", 2.0),)): np.where(np.abs(v) < 0.25, 0.5 * 4 * v * v, np.abs(v) - 0.125),
        ("LeakyReLU", ()): np.where(v > 0, v, 0.25 * v),
        ("LeakyReLU", (("act_type", "elu"), ("slope", 0.7))): np.where(v > 0, v, 0.7 * np.expm1(v)),
        ("LeakyReLU", (("act_type", "selu"),)): sl * np.where(v > 0, v, sa * np.expm1(v)),
        ("LeakyReLU", (("act_type", "gelu"),)): 0.5 * v * (1 + sps.erf(v / np.sqrt(2))),
    }


@pytest.mark.parametrize("dtype", FLOATS)
def test_activations_match_numpy_and_their_gradients_finite_differences(dtype):
    v = np.linspace(-3.1, 2.9, 24).reshape(4, 6)
    for (name, params), ref in _act_refs(v).items():
        got = getattr(mx.nd, name)(mx.nd.array(v, dtype=dtype), **dict(params))
        assert got.dtype == np.dtype(dtype), name
        np.testing.assert_allclose(got.asnumpy(), ref, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-6,
                                   err_msg=f"{name} {params}")
        if dtype == np.float64:
            check_gradient(name, [so.array(v)], dict(params), eps=1e-6, rtol=1e-5)
    with pytest.raises(so.SparseOpsError, match="LeakyReLU.*act_type"):
        mx.nd.LeakyReLU(mx.nd.ones((2,)), act_type="prelu")
    with pytest.raises(so.SparseOpsError, match="softsign.*int32"):
        mx.nd.softsign(mx.nd.ones((2,), dtype=np.int32))
    c = np.where(v > 0, v, 0)
    s = _quiet(mx.nd.softsign, mx.nd.array(c, dtype=dtype).tostype("csr"))  # falls back (warned once per signature)
    assert s.stype == "default"
    np.testing.assert_allclose(s.asnumpy(), c / (1 + np.abs(c)), rtol=1e-6)


# ---- positions and sizes ---------------------------------------------------------------------------
@pytest.mark.parametrize("idx_dtype", [np.int32, np.int64, np.float32])
def test_one_hot_matches_numpy(idx_dtype):
    idx = np.array([[0, 2], [5, -1], [1, 1]], dtype=idx_dtype)
    got = mx.nd.one_hot(mx.nd.array(idx, dtype=idx_dtype), depth=3, on_value=2.0, off_value=-1.0, dtype="float64")
    ref = np.full((3, 2, 3), -1.0)
    for p in np.ndindex(idx.shape):
        if 0 <= idx[p] < 3:
            ref[p + (int(idx[p]),)] = 2.0
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got.asnumpy(), ref)
    assert mx.nd.array(idx, dtype=idx_dtype).one_hot(4).shape == (3, 2, 4)
    assert mx.nd.one_hot(mx.nd.array(np.zeros(0, dtype=idx_dtype)), depth=2).shape == (0, 2)
    with pytest.raises(so.SparseOpsError, match="one_hot.*depth"):
        mx.nd.one_hot(mx.nd.array(idx, dtype=idx_dtype), depth=-1)


@pytest.mark.parametrize("dtype", FLOATS + [np.int64])
def test_argsort_matches_a_stable_numpy_sort(dtype):
    v = np.array([[3, 1, 2, 1], [0, 5, 5, -1], [2, 2, 2, 2]], dtype=dtype)
    x = mx.nd.array(v, dtype=dtype)
    np.testing.assert_array_equal(mx.nd.argsort(x).asnumpy(), np.argsort(v, axis=-1, kind="stable"))
    np.testing.assert_array_equal(mx.nd.argsort(x, axis=0).asnumpy(), np.argsort(v, axis=0, kind="stable"))
    desc = mx.nd.argsort(x, is_ascend=False).asnumpy()
    np.testing.assert_array_equal(np.take_along_axis(v, desc.astype(np.int64), -1), -np.sort(-v, axis=-1))
    assert desc.tolist()[2] == [0, 1, 2, 3] and mx.nd.argsort(x).dtype == np.float32  # stable; MXNet's dtype
    flat = mx.nd.argsort(x, axis=None, dtype="int64")
    assert flat.dtype == np.int64
    np.testing.assert_array_equal(flat.asnumpy(), np.argsort(v.reshape(-1), kind="stable"))
    np.testing.assert_array_equal(x.argsort().asnumpy(), np.argsort(v, axis=-1, kind="stable"))


@pytest.mark.parametrize("stype", STYPES)
def test_shape_and_size_arrays(stype):
    x = mx.nd.array(_v((3, 4))).tostype(stype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", so.StorageFallbackWarning)
        s, n = mx.nd.shape_array(x), mx.nd.size_array(x)
        assert x.shape_array().asnumpy().tolist() == [3, 4]
    assert s.dtype == n.dtype == np.int64
    assert s.asnumpy().tolist() == [3, 4] and n.asnumpy().tolist() == [12]
    assert mx.nd.shape_array(mx.nd.zeros((2, 0, 5))).asnumpy().tolist() == [2, 0, 5]
    assert mx.nd.size_array(mx.nd.zeros((2, 0, 5))).asnumpy().tolist() == [0]


def test_reshape_like_and_broadcast_axis():
    v = _v((2, 6))
    x, like = mx.nd.array(v, dtype=np.float64), mx.nd.zeros((3, 4))
    np.testing.assert_array_equal(mx.nd.reshape_like(x, like).asnumpy(), v.reshape(3, 4))
    np.testing.assert_array_equal(x.reshape_like(like).asnumpy(), v.reshape(3, 4))
    check_gradient("reshape_like", [so.array(v), so.array(np.ones((3, 4)))], wrt=[0], eps=1e-6, rtol=1e-6)
    with pytest.raises(mx.base.MXNetError, match="reshape_like.*lhs"):
        mx.nd.reshape_like(x, mx.nd.zeros((5,)))
    c = mx.nd.array(_v((1, 3, 1)), dtype=np.float64)
    for fn in (mx.nd.broadcast_axis, mx.nd.broadcast_axes):
        np.testing.assert_array_equal(fn(c, axis=(0, 2), size=(2, 4)).asnumpy(),
                                      np.broadcast_to(c.asnumpy(), (2, 3, 4)))
    np.testing.assert_array_equal(c.broadcast_axes(axis=0, size=3).asnumpy(), np.broadcast_to(c.asnumpy(), (3, 3, 1)))
    check_gradient("broadcast_axis", [so.array(_v((1, 3, 1)))], {"axis": (0, 2), "size": (2, 4)}, eps=1e-6, rtol=1e-6)
    with pytest.raises(mx.base.MXNetError, match="broadcast_axis.*axis"):
        mx.nd.broadcast_axis(c, axis=1, size=4)


# ---- pick and slice_like ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOATS + [np.int64])
@pytest.mark.parametrize("idx_dtype", [np.float32, np.int32, np.int64])
def test_pick_matches_numpy(dtype, idx_dtype):
    v = np.arange(24).reshape(2, 3, 4).astype(dtype)
    x = mx.nd.array(v, dtype=dtype)
    idx = np.array([[3, 0, 7], [-1, 2, 1]], dtype=idx_dtype)  # along the last axis, out of range included
    for mode, fix in (("clip", lambda i: np.clip(i, 0, 3)), ("wrap", lambda i: np.mod(i, 4))):
        got = mx.nd.pick(x, mx.nd.array(idx, dtype=idx_dtype), mode=mode)
        ref = np.take_along_axis(v, fix(idx.astype(np.int64))[..., None], axis=-1)[..., 0]
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got.asnumpy(), ref)
    i1 = np.array([[2, 0, 1, 2], [1, 1, 0, 2]], dtype=idx_dtype)
    got = x.pick(mx.nd.array(i1, dtype=idx_dtype), axis=1, keepdims=True)
    np.testing.assert_array_equal(got.asnumpy(), np.take_along_axis(v, i1.astype(np.int64)[:, None, :], axis=1))
    with pytest.raises(mx.base.MXNetError, match="pick.*index"):
        mx.nd.pick(x, mx.nd.ones((3, 3)))


def test_pick_gradient():
    data = np.random.default_rng(0).normal(size=(3, 4))
    for idx, params in ((np.array([1.5, 0.5, 3.5]), {}), (np.array([5.5, -1.5, 2.5]), {"mode": "wrap"}),
                        (np.array([[2.5, 0.5, 1.5, 2.5]]), {"axis": 0, "keepdims": True})):
        (gd, gi) = check_gradient("pick", [so.array(data), so.array(idx)], params, eps=1e-6, rtol=1e-6)
        assert not gi.asnumpy().any()
    x = mx.nd.array(data)
    x.attach_grad()
    with mx.autograd.record():
        y = mx.nd.pick(x, mx.nd.array([0, 0, 3]))
    y.backward(mx.nd.array([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(x.grad.asnumpy(), [[1, 0, 0, 0], [2, 0, 0, 0], [0, 0, 0, 3]])


def test_slice_like_matches_numpy_and_its_gradient():
    v = _v((3, 4, 2))
    x = mx.nd.array(v, dtype=np.float64)
    np.testing.assert_array_equal(mx.nd.slice_like(x, mx.nd.zeros((2, 3, 1))).asnumpy(), v[:2, :3, :1])
    np.testing.assert_array_equal(x.slice_like(mx.nd.zeros((1, 2)), axes=(1,)).asnumpy(), v[:, :2])
    np.testing.assert_array_equal(mx.nd.slice_like(x, mx.nd.zeros((9, 1, 2)), axes=(-2,)).asnumpy(), v[:, :1])
    check_gradient("slice_like", [so.array(v), so.array(np.ones((2, 3, 1)))], wrt=[0], eps=1e-6, rtol=1e-6)
    for bad in (lambda: mx.nd.slice_like(x, mx.nd.zeros((2, 3))), lambda: mx.nd.slice_like(x, mx.nd.zeros((4, 1, 1)))):
        with pytest.raises(mx.base.MXNetError, match="slice_like.*shape_like"):
            bad()


# ---- sort and topk ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOATS + [np.int32, np.int64])
def test_sort_and_topk_match_numpy(dtype):
    v = np.array([[3, 1, 2, 1], [0, 5, 5, -1], [2, 2, 7, 2]], dtype=dtype)
    x = mx.nd.array(v, dtype=dtype)
    np.testing.assert_array_equal(mx.nd.sort(x).asnumpy(), np.sort(v, axis=-1))
    np.testing.assert_array_equal(x.sort(axis=0, is_ascend=False).asnumpy(), -np.sort(-v, axis=0))
    np.testing.assert_array_equal(mx.nd.sort(x, axis=None).asnumpy(), np.sort(v.reshape(-1)))
    desc = np.argsort(-v, axis=-1, kind="stable")
    top = mx.nd.topk(x, k=2)
    assert top.dtype == np.float32
    np.testing.assert_array_equal(top.asnumpy(), desc[:, :2])
    vals = x.topk(k=2, ret_typ="value")
    assert vals.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(vals.asnumpy(), np.take_along_axis(v, desc[:, :2], -1))
    both = mx.nd.topk(x, k=3, ret_typ="both", dtype="int64")
    assert len(both) == 2 and both[1].dtype == np.int64
    np.testing.assert_array_equal(both[0].asnumpy(), np.take_along_axis(v, desc[:, :3], -1))
    np.testing.assert_array_equal(both[1].asnumpy(), desc[:, :3])
    mask = mx.nd.topk(x, k=1, ret_typ="mask", axis=0, is_ascend=True)
    ref = np.zeros_like(v)
    np.put_along_axis(ref, np.argsort(v, axis=0, kind="stable")[:1], 1, axis=0)
    np.testing.assert_array_equal(mask.asnumpy(), ref)
    np.testing.assert_array_equal(mx.nd.topk(x, k=0, ret_typ="value").asnumpy(), -np.sort(-v, axis=-1))  # k < 1: all
    np.testing.assert_array_equal(mx.nd.topk(x, k=2, axis=None).asnumpy(), np.argsort(-v.reshape(-1), kind="stable")[:2])
    with pytest.raises(mx.base.MXNetError, match="topk.*k"):
        mx.nd.topk(x, k=5)
    with pytest.raises(mx.base.MXNetError, match="topk.*ret_typ"):
        mx.nd.topk(x, ret_typ="values")


@pytest.mark.parametrize("name, params", [
    ("sort", {}), ("sort", {"axis": 0, "is_ascend": False}), ("sort", {"axis": None}),
    ("topk", {"k": 2, "ret_typ": "value"}), ("topk", {"k": 3, "ret_typ": "both", "axis": 0}),
    ("topk", {"k": 4, "ret_typ": "value", "axis": None, "is_ascend": True})])
def test_sort_and_topk_gradients(name, params):
    check_gradient(name, [so.array(_v((3, 4)))], params, eps=1e-6, rtol=1e-6)


def test_topk_gradient_lands_on_the_chosen_entries_and_scatter_adds_repeats():
    x = mx.nd.array([[1.0, 4.0, 2.0], [9.0, 0.0, 5.0]])
    x.attach_grad()
    with mx.autograd.record():
        y = mx.nd.topk(x, k=2, ret_typ="value")
    y.backward(mx.nd.array([[10.0, 20.0], [30.0, 40.0]]))
    np.testing.assert_array_equal(x.grad.asnumpy(), [[0, 10, 20], [30, 0, 40]])
    g = so.ops._scatter_along_axis(so.array(np.array([[1.0, 2.0, 3.0]])), so.array(np.array([[0, 2, 0]])), size=3)
    np.testing.assert_array_equal(g.asnumpy(), [[4.0, 0.0, 2.0]])
    # negative positions count from the end, as NumPy's; positions outside the axis are refused
    g = so.ops._scatter_along_axis(so.array(np.array([[1.0, 2.0, 3.0]])), so.array(np.array([[0, -1, -3]])), size=3)
    np.testing.assert_array_equal(g.asnumpy(), [[4.0, 0.0, 2.0]])
    for bad in (3, -4):
        with pytest.raises(so.OperatorError, match=f"_scatter_along_axis.*index {bad} is out of range for axis 1 of size 3"):
            so.ops._scatter_along_axis(so.array(np.ones((1, 3))), so.array(np.array([[0, bad, 1]])), size=3)
    with pytest.raises(so.SparseOpsError, match="_gather_along_axis.*index"):
        so.ops._gather_along_axis(so.array(np.ones((2, 3))), so.array(np.ones((2, 3))))


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "softmin"])
def test_softmax_family_dtype_parameter(name):
    """MXNet's ``dtype``: the result in that dtype, computed in the wider of it and the
    input's; the gradient comes back in the input's dtype."""
    from sparse_ops import autograd

    v = _v((3, 4), dtype=np.float32)
    ref = {"softmax": _softmax_ref(v.astype(np.float64), -1, 1.0), "softmin": _softmax_ref(-v.astype(np.float64), -1, 1.0)}
    ref["log_softmax"] = np.log(ref["softmax"])
    y = getattr(mx.nd, name)(mx.nd.array(v), dtype="float64")
    assert y.dtype == np.float64
    np.testing.assert_allclose(y.asnumpy(), ref[name], rtol=1e-13, atol=1e-15)
    assert getattr(mx.nd, name)(mx.nd.array(v), dtype="float16").dtype == np.float16
    x = so.array(v)
    x.attach_grad()
    with autograd.record():
        out = so.dispatch.op_function(name)(x, dtype="float64")
    out.backward()
    assert x.grad.dtype == np.float32
    with pytest.raises(so.SparseOpsError, match="must be one of"):
        getattr(mx.nd, name)(mx.nd.array(v), dtype="int32")
