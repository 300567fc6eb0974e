"""The MXNet face's NDArray behaviour where MXNet 1.9.1 and the native API differ: face
arrays follow MXNet, native arrays keep the native design; and the operators and
functions of MXNet's ndarray module the face adds. Values are checked against NumPy."""
import ast
import inspect
import io
import pickle

import numpy as np
import pytest

import sparse_ops as so
import sparse_ops.compat.mxnet as mx
from sparse_ops.ndarray.view import ComponentView

A = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
DENSE = np.array([[1.0, 0.0, 2.0], [0.0, 0.0, 0.0], [0.0, 3.0, 0.0], [4.0, 0.0, 5.0]], dtype=np.float32)


# ---- classes ----------------------------------------------------------------------------------------
def test_face_results_are_face_arrays_and_native_ones_stay_native():
    x = mx.nd.array(A)
    for r in (x, x + 1, x.sum(axis=0), mx.nd.dot(x[0], x[0].T), x.copy(), x.detach(), x.astype("float64"),
              mx.nd.random.uniform(shape=(2,)), mx.nd.zeros((2,)), x.tostype("default")):
        assert type(r) is mx.nd.NDArray
    c = mx.nd.array(DENSE).tostype("csr")
    assert type(c) is mx.nd.sparse.CSRNDArray and type(c + c) is mx.nd.sparse.CSRNDArray
    assert type(mx.nd.array(DENSE).tostype("row_sparse")) is mx.nd.sparse.RowSparseNDArray
    native = so.array(A)
    assert type(native + 1) is so.NDArray and isinstance(native, mx.nd.NDArray)
    assert type(so.sum(x)) is so.NDArray and so.sum(x).shape == ()  # native functions keep their design
    assert type(mx.nd.sum(native)) is mx.nd.NDArray  # face functions take native arrays
    assert type(native) is so.NDArray  # and leave them as they are


def test_face_arrays_pickle_as_face_arrays():
    x = mx.nd.array(A)
    y = pickle.loads(pickle.dumps(x))
    assert type(y) is mx.nd.NDArray and np.array_equal(y.asnumpy(), A)
    c = pickle.loads(pickle.dumps(mx.nd.array(DENSE).tostype("csr")))
    assert type(c) is mx.nd.sparse.CSRNDArray and np.array_equal(c.asnumpy(), DENSE)


# ---- shapes of results --------------------------------------------------------------------------------
def test_full_reductions_and_scalar_indexing_have_shape_one_in_the_face_only():
    x, n = mx.nd.array(A), so.array(A)
    for method in ("sum", "max", "min", "mean", "prod", "norm"):
        assert getattr(x, method)().shape == (1,), method
        assert getattr(n, method)().shape == (), method
    assert x.sum().asnumpy()[0] == A.sum()
    assert x[1, 2, 3].shape == (1,) and x[1, 2, 3].asscalar() == A[1, 2, 3]
    assert mx.nd.array([4.0, 5.0])[1].shape == (1,)
    assert n[1, 2, 3].shape == () and so.array([4.0, 5.0])[1].shape == ()


def test_asscalar_returns_a_numpy_scalar_and_bool_follows_mxnet():
    v = mx.nd.array([2.5]).asscalar()
    assert type(v) is np.float32 and v == 2.5
    assert type(mx.nd.array([3], dtype="int64").asscalar()) is np.int64
    with pytest.raises(ValueError, match="not a scalar"):
        mx.nd.ones((2,)).asscalar()
    assert not bool(mx.nd.array([])) and not bool(mx.nd.zeros((1,))) and bool(mx.nd.ones((1, 1)))
    with pytest.raises(ValueError, match="ambiguous"):
        bool(mx.nd.ones((2, 3)))
    with pytest.raises(ValueError):
        bool(so.array(np.zeros(0)))  # native: an empty array has no truth value


# ---- indexing ----------------------------------------------------------------------------------------------
def test_basic_indexing_is_a_view_when_contiguous_and_a_copy_otherwise():
    x = mx.nd.array(A)
    row = x[1]
    row[:] = -1
    assert (x.asnumpy()[1] == -1).all()
    stepped = x[:, ::2]
    stepped[:] = 99
    assert not (x.asnumpy() == 99).any()
    assert np.array_equal(stepped.asnumpy(), np.full((2, 2, 4), 99))


@pytest.mark.parametrize("key", [(slice(None), slice(1, 3)), (slice(0, 1), slice(None), slice(1, 2)),
                                 (slice(None, None, -1),), (slice(1, 2), slice(0, 3, 2)), (slice(0, 0),),
                                 (slice(None), slice(None), slice(None, None, 2))])
def test_contiguity_rule_agrees_with_numpy(key):
    assert mx.nd.NDArray._basic_indexing_slice_is_contiguous(key, A.shape) == A[key].flags.c_contiguous


def test_index_arrays_of_floats_are_cast_and_advanced_indexing_follows_numpy():
    x = mx.nd.array(A)
    got = x[mx.nd.array([1, 0, 1]), mx.nd.array([2, 0, 1])]  # float32 index arrays
    np.testing.assert_array_equal(got.asnumpy(), A[[1, 0, 1], [2, 0, 1]])
    np.testing.assert_array_equal(x[1, [2, 0], 1:3].asnumpy(), A[1, [2, 0], 1:3])
    np.testing.assert_array_equal(x[None, 0, ..., 1].asnumpy(), A[None, 0, ..., 1])


def test_one_element_values_fill_scalar_slots():
    b = mx.nd.zeros(1)
    b[0] = np.array([47.844944], dtype=np.float32)
    assert b.asnumpy()[0] == np.float32(47.844944)
    x = mx.nd.zeros((3, 4), dtype="int32")
    x[1, 2] = [5]
    x[0] = np.arange(4).reshape(1, 1, 4)  # leading axes of length 1
    ref = np.zeros((3, 4), np.int32)
    ref[1, 2] = 5
    ref[0] = np.arange(4)
    np.testing.assert_array_equal(x.asnumpy(), ref)
    with pytest.raises(ValueError):
        x[0] = np.arange(3)  # a shape that does not fit stays an error


def test_indexing_is_recorded_and_repeated_indices_accumulate():
    x = mx.nd.array(A)
    x.attach_grad()
    with mx.autograd.record():
        y = x[1, [2, 0, 2], 1:3]
    head = np.arange(6, dtype=np.float32).reshape(3, 2)
    y.backward(mx.nd.array(head))
    want = np.zeros_like(A)
    np.add.at(want, (1, [2, 0, 2], slice(1, 3)), head)
    np.testing.assert_array_equal(x.grad.asnumpy(), want)
    with mx.autograd.record():
        z = x[0, 1, 2] * 3  # a scalar entry: shape (1,)
    z.backward()
    want = np.zeros_like(A)
    want[0, 1, 2] = 3
    np.testing.assert_array_equal(x.grad.asnumpy(), want)


def test_writes_while_recording_follow_mxnet():
    message = "Inplace operations (+=, -=, x[:]=, etc) are not supported when recording with autograd."
    x, y = mx.nd.zeros((2, 3)), mx.nd.ones((3,))
    y.attach_grad()
    with mx.autograd.record():
        with pytest.raises(mx.base.MXNetError) as err:
            x[0] = y
        assert str(err.value) == message
        with pytest.raises(mx.base.MXNetError, match=r"Inplace operations"):
            x += mx.nd.broadcast_to(y.reshape((1, 3)), shape=(2, 3))
        x[0] = 2.0  # nothing that needs a gradient: not recorded, allowed
    w = mx.nd.zeros((3,))
    with mx.autograd.record():
        w[:] = y  # a whole copy: w joins the graph, as in MXNet
        loss = w * 2
    loss.backward()
    np.testing.assert_array_equal(y.grad.asnumpy(), [2, 2, 2])


# ---- shapes: reshape and the in-place views -----------------------------------------------------------------
def test_reshape_forms_and_special_values():
    x = mx.nd.arange(30).reshape(2, 3, 5)
    ref = np.arange(30, dtype=np.float32)
    for args, kwargs, shape in [((2, 15), {}, (2, 15)), (((5, 6),), {}, (5, 6)), ((), {"shape": (3, 10)}, (3, 10)),
                                ((-1,), {}, (30,)), ((0, -1), {}, (2, 15)), ((-3, -1), {}, (6, 5)),
                                ((-1, 0), {"reverse": True}, (6, 5))]:
        np.testing.assert_array_equal(x.reshape(*args, **kwargs).asnumpy(), ref.reshape(shape))
    with pytest.raises(ValueError):
        x.reshape((2, 3))
    view = x.reshape(6, 5)
    view[0] = -1
    assert (x.asnumpy()[0, 0] == -1).all()  # a view, as MXNet's reshape


def test_inplace_flatten_squeeze_expand_dims_are_views_and_copies_otherwise():
    x = mx.nd.array(np.arange(12, dtype=np.float32).reshape(1, 3, 1, 4))
    for name, kwargs, shape in [("flatten", {}, (1, 12)), ("squeeze", {}, (3, 4)), ("squeeze", {"axis": 2}, (1, 3, 4)),
                                ("expand_dims", {"axis": 1}, (1, 1, 3, 1, 4))]:
        copy = getattr(x, name)(**kwargs)
        view = getattr(x, name)(inplace=True, **kwargs)
        assert copy.shape == view.shape == shape
        x[:] = x + 1
        np.testing.assert_array_equal(view.asnumpy().ravel(), x.asnumpy().ravel())
        assert not np.array_equal(copy.asnumpy().ravel(), x.asnumpy().ravel())
    assert mx.nd.ones((1, 1, 1)).squeeze(inplace=True).shape == (1,)


def test_fluent_methods_take_their_second_input_by_keyword():
    x = mx.nd.array(DENSE)
    np.testing.assert_array_equal(x.take(indices=mx.nd.array([2, 0])).asnumpy(), DENSE[[2, 0]])
    np.testing.assert_array_equal(x.pick(index=mx.nd.array([0, 1, 1, 2]), axis=1).asnumpy(), DENSE[range(4), [0, 1, 1, 2]])
    np.testing.assert_array_equal(x.reshape_like(rhs=mx.nd.zeros((2, 6))).asnumpy(), DENSE.reshape(2, 6))
    np.testing.assert_array_equal(x.slice_like(shape_like=mx.nd.zeros((2, 2))).asnumpy(), DENSE[:2, :2])


# ---- creation --------------------------------------------------------------------------------------------
def test_creation_with_out_eye_and_linspace():
    out = mx.nd.full((2, 3), 7.0)
    assert mx.nd.ones((2, 3), out=out) is out and (out.asnumpy() == 1).all()
    assert mx.nd.zeros((2, 3), out=out) is out and (out.asnumpy() == 0).all()
    for n, m, k in [(3, 0, 0), (4, 2, -1), (2, 5, 3)]:
        np.testing.assert_array_equal(mx.nd.eye(n, m, k).asnumpy(), np.eye(n, m or None, k))
    assert mx.nd.eye(3, dtype="int32").dtype == np.int32
    np.testing.assert_allclose(mx.nd.linspace(1.5, 7.0, 9).asnumpy(), np.linspace(1.5, 7.0, 9), rtol=1e-6)
    np.testing.assert_allclose(mx.nd.linspace(0, 5, 4, endpoint=False).asnumpy(), np.linspace(0, 5, 4, endpoint=False))
    np.testing.assert_array_equal(mx.nd.linspace(2.5, 9.5, 6, dtype="int32").asnumpy(),
                                  np.linspace(2.5, 9.5, 6).astype(np.int32))


def test_int8_and_uint8_arrays_in_the_face_only():
    a = np.array([[7, -7, 9], [100, -100, 3]], dtype=np.int8)
    b = np.array([[2, 2, 4], [3, 5, 3]], dtype=np.int8)
    x, y = mx.nd.array(a, dtype=np.int8), mx.nd.array(b, dtype="int8")
    assert x.dtype == np.int8
    for got, want in [(x + y, a + b), (x - y, a - b), (x * y, a * b), (x / y, (a / b).astype(np.int8))]:
        assert got.dtype == np.int8
        np.testing.assert_array_equal(got.asnumpy(), want)
    u = mx.nd.array([250, 3], dtype="uint8")
    np.testing.assert_array_equal((u + u).asnumpy(), np.array([250, 3], np.uint8) * 2)
    assert mx.nd.zeros((2,), dtype="uint8").dtype == np.uint8 and x.astype("float32").dtype == np.float32
    assert mx.nd.array([1.9, -2.7]).astype("int8").asnumpy().tolist() == [1, -2]
    with pytest.raises(TypeError, match="int8"):
        so.array(a)  # the native API keeps its held dtypes
    with pytest.raises(TypeError, match="int16"):
        mx.nd.array([1], dtype="int16")
    # a face array keeps MXNet's rules in a native function too (docs/bridges/mxnet.md)
    for native, face in [(so.exp, mx.nd.exp), (so.sum, mx.nd.sum), (so.negative, mx.nd.negative)]:
        with np.errstate(all="ignore"):
            got, want = native(u), face(u)
        assert got.dtype == want.dtype == np.uint8
        np.testing.assert_array_equal(got.asnumpy().reshape(-1), want.asnumpy().reshape(-1))


def test_from_numpy_shares_memory_and_freezes_the_source():
    a = np.arange(6, dtype=np.float32).reshape(3, 2)
    x = mx.nd.from_numpy(a)
    with pytest.raises(ValueError):
        a[0, 0] = 5
    x[2, 1] = 100
    assert a[2, 1] == 100
    copy = mx.nd.from_numpy(np.ones(3), zero_copy=False)
    assert copy.dtype == np.float64
    with pytest.raises(ValueError, match="C-contiguous"):
        mx.nd.from_numpy(np.ones((2, 3)).T)


def test_dlpack_round_trip_shares_memory():
    x = mx.nd.array(A)
    y = mx.nd.from_dlpack(x.to_dlpack_for_write())
    z = mx.nd.from_dlpack(mx.nd.to_dlpack_for_read(x))
    np.testing.assert_array_equal(z.asnumpy(), A)
    y[0] = 0
    assert (x.asnumpy()[0] == 0).all()


def test_cpu_shared_context_is_the_cpu():
    ctx = mx.Context("cpu_shared", 0)
    assert ctx == mx.cpu(0) and mx.nd.zeros((1,), ctx=ctx).context == ctx


# ---- sparse components --------------------------------------------------------------------------------------
def test_sparse_components_are_ndarray_copies_in_the_face_and_views_natively():
    c = mx.nd.array(DENSE).tostype("csr")
    ref = so.array(DENSE).tostype("csr").asscipy()
    for name in ("data", "indices", "indptr"):
        comp = getattr(c, name)
        assert type(comp) is mx.nd.NDArray
        np.testing.assert_array_equal(comp.asnumpy(), getattr(ref, name))
    assert c.indices.dtype == np.int64 and c.indptr[0].asscalar() == 0
    values = c.data
    values[:] = 0
    np.testing.assert_array_equal(c.asnumpy(), DENSE)  # a copy, as in MXNet
    r = mx.nd.array(DENSE).tostype("row_sparse")
    np.testing.assert_array_equal(r.indices.asnumpy(), [0, 2, 3])
    assert type(r.data) is mx.nd.NDArray and r.aux_data(0).asnumpy().tolist() == [0, 2, 3]
    assert (r._num_aux, c._num_aux) == (1, 2)
    native = so.array(DENSE).tostype("csr")
    assert type(native.data) is ComponentView and type(native.indices) is ComponentView


def test_kernels_and_the_native_api_take_face_sparse_arrays():
    c = mx.nd.array(DENSE).tostype("csr")
    w = np.arange(6, dtype=np.float32).reshape(3, 2)
    np.testing.assert_allclose(so.dot(c, so.array(w)).asnumpy(), DENSE @ w)  # a native function
    np.testing.assert_allclose(mx.nd.dot(c, mx.nd.array(w)).asnumpy(), DENSE @ w)
    np.testing.assert_allclose((c * 2 + c).asnumpy(), DENSE * 3)
    np.testing.assert_allclose(mx.nd.sum(c, axis=0).asnumpy(), DENSE.sum(axis=0))
    out = mx.nd.sparse.zeros("csr", DENSE.shape)
    mx.nd.sparse.elemwise_add(c, c, out=out)  # a kernel writing new components into a face out=
    np.testing.assert_array_equal(out.asnumpy(), DENSE * 2)
    np.testing.assert_array_equal(out.indices.asnumpy(), [0, 2, 1, 0, 2])
    r = mx.nd.array(DENSE).tostype("row_sparse")
    r.attach_grad()
    with mx.autograd.record():
        loss = mx.nd.sum(r * r)
    loss.backward()
    assert r.grad.stype == "row_sparse" and type(r.grad) is mx.nd.sparse.RowSparseNDArray
    np.testing.assert_allclose(r.grad.asnumpy(), 2 * DENSE)


# ---- the module's namespace --------------------------------------------------------------------------------
def test_operators_looked_up_under_builtin_names_shadow_nothing():
    for name in ("max", "min", "sum", "abs", "round", "slice", "sort"):
        getattr(mx.nd, name)  # cached in mx.nd's namespace from now on
    np.testing.assert_array_equal(mx.nd.arange(2, 11, 3).asnumpy(), [2, 5, 8])
    np.testing.assert_array_equal(mx.nd.arange(4, repeat=2).asnumpy(), [0, 0, 1, 1, 2, 2, 3, 3])
    np.testing.assert_allclose(mx.nd.linspace(0, 1, 3).asnumpy(), [0, 0.5, 1])
    np.testing.assert_array_equal(mx.nd.concatenate([mx.nd.ones((1, 2)), mx.nd.zeros((1, 2))]).asnumpy(),
                                  [[1, 1], [0, 0]])
    # the package module holds no code a cached operator could shadow: only its PEP 562 hooks
    tree = ast.parse(inspect.getsource(mx.nd))
    functions = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assert functions == {"__getattr__", "__dir__"}


# ---- operators and functions the face adds ---------------------------------------------------------------
def test_crop_assign_values_and_gradients():
    x, z = mx.nd.array(A), mx.nd.array(-np.ones((2, 1, 3), np.float32))
    got = mx.nd._internal._crop_assign(x, z, begin=(0, 1, 0), end=(2, 2, 3))
    want = A.copy()
    want[:, 1:2, 0:3] = -1
    np.testing.assert_array_equal(got.asnumpy(), want)
    got = mx.nd._internal._crop_assign_scalar(x, scalar=5, begin=(None, None, 1), end=(None, None, None),
                                              step=(1, 2, 2))
    want = A.copy()
    want[:, ::2, 1::2] = 5
    np.testing.assert_array_equal(got.asnumpy(), want)
    x.attach_grad()
    z.attach_grad()
    with mx.autograd.record():
        y = mx.nd._internal._crop_assign(x, z, begin=(0, 1, 0), end=(2, 2, 3))
    y.backward(mx.nd.array(A))
    outside = A.copy()
    outside[:, 1:2, 0:3] = 0
    np.testing.assert_array_equal(x.grad.asnumpy(), outside)
    np.testing.assert_array_equal(z.grad.asnumpy(), A[:, 1:2, 0:3])
    with pytest.raises(ValueError, match="rhs of shape"):
        mx.nd._internal._slice_assign(x, mx.nd.ones((2, 2, 3)), begin=(0, 1, 0), end=(2, 2, 3))


@pytest.mark.parametrize("mode,width", [("constant", (0, 0, 1, 2, 0, 1)), ("edge", (1, 0, 0, 2, 2, 1)),
                                        ("reflect", (1, 1, 2, 1, 3, 2))])
def test_pad_values_and_gradient(mode, width):
    x = mx.nd.array(A)
    pairs = [(width[2 * i], width[2 * i + 1]) for i in range(3)]
    kwargs = {"constant_value": 2.5} if mode == "constant" else {}
    want = np.pad(A, pairs, mode=mode, **({"constant_values": 2.5} if mode == "constant" else {}))
    np.testing.assert_array_equal(mx.nd.pad(x, mode=mode, pad_width=width, **kwargs).asnumpy(), want)
    np.testing.assert_array_equal(x.pad(mode=mode, pad_width=width, **kwargs).asnumpy(), want)
    x.attach_grad()
    head = np.random.default_rng(0).uniform(size=want.shape).astype(np.float32)
    with mx.autograd.record():
        y = mx.nd.Pad(x, mode=mode, pad_width=width, **kwargs)
    y.backward(mx.nd.array(head))
    # the gradient is the adjoint of the padding: each head entry added to the entry it copies
    source = np.pad(np.arange(A.size).reshape(A.shape), pairs, mode="constant" if mode == "constant" else mode,
                    **({"constant_values": -1} if mode == "constant" else {}))
    expect = np.zeros(A.size, np.float64)
    keep = source.ravel() >= 0
    np.add.at(expect, source.ravel()[keep], head.ravel()[keep])
    np.testing.assert_allclose(x.grad.asnumpy().ravel(), expect, rtol=1e-6)
    with pytest.raises(ValueError, match="pad_width needs 2 values per axis"):
        mx.nd.pad(x, pad_width=(1, 1))


def test_split_v2_against_numpy():
    x = mx.nd.array(A)
    for arg in (2, (1, 3), [2]):
        got = mx.nd.split_v2(x, arg, axis=2)
        want = np.split(A, arg if isinstance(arg, int) else list(arg), axis=2)
        got = got if isinstance(got, list) else [got]
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g.asnumpy(), w)
    pieces = x.split_v2(3, axis=1, squeeze_axis=True)
    assert [p.shape for p in pieces] == [(2, 4)] * 3
    with pytest.raises(ValueError, match="does not split evenly"):
        mx.nd.split_v2(x, 3, axis=2)
    x.attach_grad()
    with mx.autograd.record():
        a, b = mx.nd.split_v2(x, (1,), axis=0)
        loss = a * 2 + b * 3
    loss.backward()
    np.testing.assert_array_equal(x.grad.asnumpy(), np.stack([np.full((3, 4), 2.0), np.full((3, 4), 3.0)]))


def test_rcbrt_values_and_gradient():
    v = np.array([1.0, 8.0, -125.0, 0.5], dtype=np.float32)
    x = mx.nd.array(v)
    np.testing.assert_allclose(mx.nd.rcbrt(x).asnumpy(), 1 / np.cbrt(v), rtol=1e-6)
    np.testing.assert_allclose(x.rcbrt().asnumpy(), 1 / np.cbrt(v), rtol=1e-6)
    x.attach_grad()
    with mx.autograd.record():
        y = mx.nd.rcbrt(x)
    y.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), -np.cbrt(v) ** -4 / 3, rtol=1e-5)


def test_moveaxis_against_numpy():
    x = mx.nd.zeros((2, 3, 4, 5))
    for src, dst in [(0, 2), (-1, 0), ([0, 1], [2, 3]), ([3, 0], [1, 0]), (range(4), range(4))]:
        assert mx.nd.moveaxis(x, src, dst).shape == np.moveaxis(np.zeros((2, 3, 4, 5)), src, dst).shape
    v = mx.nd.array(A)
    np.testing.assert_array_equal(mx.nd.moveaxis(v, 0, 2).asnumpy(), np.moveaxis(A, 0, 2))
    for src, dst, match in [(4, 0, "out of range"), ([0, 0], [1, 2], "repeated"), (0, [0, 1], "as many axes")]:
        with pytest.raises(ValueError, match=match):
            mx.nd.moveaxis(x, src, dst)


def test_legacy_element_functions_against_numpy():
    m = np.arange(12, dtype=np.float32).reshape(4, 3)
    idx = np.array([2, 0, 1, 1])
    np.testing.assert_array_equal(mx.nd.choose_element_0index(mx.nd.array(m), mx.nd.array(idx)).asnumpy(),
                                  m[range(4), idx])
    vals = np.array([-1, -2, -3, -4], np.float32)
    want = m.copy()
    want[range(4), idx] = vals
    got = mx.nd.fill_element_0index(mx.nd.array(m), mx.nd.array(vals), mx.nd.array(idx))
    np.testing.assert_array_equal(got.asnumpy(), want)
    out = mx.nd.full((4, 3), 9.0)
    mx.nd.onehot_encode(mx.nd.array(idx), out=out)
    np.testing.assert_array_equal(out.asnumpy(), np.eye(3)[idx])


def test_contrib_isinf_isnan_isfinite():
    v = np.array([[np.inf, -np.inf, np.nan], [1.5, 0.0, -3.0]], dtype=np.float32)
    x = mx.nd.array(v)
    for fn, ref in [(mx.nd.contrib.isinf, np.isinf), (mx.nd.contrib.isnan, np.isnan),
                    (mx.nd.contrib.isfinite, np.isfinite)]:
        got = fn(x)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got.asnumpy(), ref(v).astype(np.float32))


# ---- numerics shared with the native API ----------------------------------------------------------------------
def test_relu_gradient_is_nan_at_nan():
    v = np.array([-1.0, 0.0, 2.0, np.nan, np.inf], dtype=np.float32)
    for make in (mx.nd.array, so.array):
        x = make(v)
        x.attach_grad()
        with mx.autograd.record():
            y = mx.nd.relu(x)
        y.backward()
        np.testing.assert_array_equal(x.grad.asnumpy(), [0, 0, 1, np.nan, 1])


def test_float32_transcendentals_are_rounded_from_float64():
    v = np.random.default_rng(1).uniform(-5, 5, size=2000).astype(np.float32)
    for name in ("exp", "log1p", "tanh", "sin", "arctan"):
        x = np.abs(v) if name == "log1p" else v
        want = getattr(np, name)(x.astype(np.float64)).astype(np.float32)
        np.testing.assert_array_equal(getattr(mx.nd, name)(mx.nd.array(x)).asnumpy(), want, err_msg=name)
    assert mx.nd.exp(mx.nd.ones((1,))).asscalar() == np.float32(2.7182817)


# ---- autograd flags -------------------------------------------------------------------------------------------
def test_fresh_grad_is_set_by_backward_and_reset_by_the_user():
    x, y = mx.nd.ones((2,)), mx.nd.ones((2,))
    mx.autograd.mark_variables([x, y], [mx.nd.zeros((2,)), mx.nd.zeros((2,))])
    assert (x._fresh_grad, y._fresh_grad) == (False, False)
    with mx.autograd.record():
        z = x.detach() * 2 + y
    z.backward()
    assert (x._fresh_grad, y._fresh_grad) == (False, True)
    y._fresh_grad = False
    assert y._fresh_grad is False


@pytest.mark.parametrize("write", ["detached", "view", "itself"])
def test_a_write_into_a_recorded_input_is_seen_by_backward(write):
    """``x[...] = v`` through the array, a view of it or its detached twin after a recorded
    call kept it: backward refuses to read the new values (as native arrays and torch do);
    a write that failed leaves backward working."""
    x = mx.nd.array(np.arange(4.0))
    x.attach_grad()
    with mx.autograd.record():
        y = x * x
    with pytest.raises(ValueError):
        x[1] = [1.0, 2.0]  # refused by NumPy's rules: nothing written
    target = {"detached": x.detach(), "view": x[1:3], "itself": x}[write]
    target[0] = 7.0
    with pytest.raises(so.OperatorError, match="written in place after the call was recorded"):
        y.backward()
    with mx.autograd.record():
        y = x * x
    y.backward()
    np.testing.assert_array_equal(x.grad.asnumpy(), 2 * x.asnumpy())


def test_autograd_grad_returns_face_arrays():
    x = mx.nd.ones((1,))
    x.attach_grad()
    with mx.autograd.record():
        z = mx.nd.elemwise_add(mx.nd.exp(x), x)
    dx = mx.autograd.grad(z, [x], create_graph=True)[0]
    assert type(dx) is mx.nd.NDArray and type(dx.asscalar()) is np.float32
    assert dx.asscalar() == np.float32(2.7182817) + 1


def test_autograd_grad_returns_a_list_for_a_single_variable_too():
    """MXNet makes a lone variable a list first: ``grad(y, x)[0]`` is x's whole gradient."""
    x = mx.nd.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    x.attach_grad()
    with mx.autograd.record():
        y = x * x
    got = mx.autograd.grad(y, x)
    assert isinstance(got, list) and len(got) == 1
    np.testing.assert_array_equal(got[0].asnumpy(), 2 * x.asnumpy())


# ---- files ------------------------------------------------------------------------------------------------------
def test_load_frombuffer_and_the_shape_mode_of_files(tmp_path):
    data = {"a": mx.nd.array(A), "c": mx.nd.array(DENSE).tostype("csr")}
    path = str(tmp_path / "f.params")
    mx.nd.save(path, data)
    buf = open(path, "rb").read()
    back = mx.nd.load_frombuffer(buf)
    assert type(back["c"]) is mx.nd.sparse.CSRNDArray and np.array_equal(back["c"].asnumpy(), DENSE)
    with pytest.raises(mx.base.MXNetError):
        mx.nd.load_frombuffer(buf[:-10])
    with mx.np_shape(True):
        with pytest.raises(mx.base.MXNetError, match="not saved in np shape semantics"):
            mx.nd.load(path)
        with pytest.raises(mx.base.MXNetError, match="default storage type"):
            mx.nd.save(path, data)
        mx.nd.save(path, [mx.nd.array(np.ones(()))])
        assert mx.nd.load(path)[0].shape == ()
    with pytest.raises(mx.base.MXNetError, match="saved in np shape semantics"):
        mx.nd.load(path)
    assert not mx.is_np_shape()
    buffer = io.BytesIO()
    so.save(buffer, [so.array(A)])  # a native file is read as saved in the legacy mode
    assert type(mx.nd.load_frombuffer(buffer.getvalue())[0]) is mx.nd.NDArray


# ---- what the core gives the face -----------------------------------------------------------------------
def test_a_subclass_hiding_its_components_still_runs_every_kernel():
    class Hidden(so.CSRNDArray):
        """Components shown as something kernels cannot read: they must get the kernel form."""

        __slots__ = ()
        _kernel_class = so.CSRNDArray
        data = indices = indptr = property(lambda self: None)

    x = so.array(DENSE).tostype("csr")
    h = object.__new__(Hidden)
    so.ndarray.take_storage(h, x)
    np.testing.assert_array_equal(so.elemwise_add(h, h).asnumpy(), DENSE * 2)
    out = so.zeros(DENSE.shape, stype="csr")
    out.__class__ = Hidden
    so.elemwise_mul(x, x, out=out)
    np.testing.assert_array_equal(so.ndarray.kernel_form(out).asnumpy(), DENSE ** 2)
    form = so.ndarray.kernel_form(h)
    assert type(form) is so.CSRNDArray and form._indices is h._indices


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_int8_and_uint8_arrays_the_face_holds_come_back_from_its_files(tmp_path, dtype):
    """The face holds MXNet's int8 and uint8: its save and load round-trip them (load refused
    the file as corrupt); the library's own load says it does not hold that dtype."""
    x = mx.nd.array(np.array([1, 2, 250 if dtype == "uint8" else -7]), dtype=dtype)
    m = mx.nd.array(np.array([[0, 3, 0], [5, 0, 0]]), dtype=dtype)
    path = tmp_path / "a.npz"
    mx.nd.save(path, {"x": x, "csr": m.tostype("csr"), "rsp": m.tostype("row_sparse")})
    loaded = mx.nd.load(path)
    back = loaded["x"]
    assert type(back) is mx.nd.NDArray and back.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(back.asnumpy(), x.asnumpy())
    for name in ("csr", "rsp"):
        assert loaded[name].dtype == np.dtype(dtype)
        np.testing.assert_array_equal(loaded[name].asnumpy(), m.asnumpy())
    with open(path, "rb") as f:
        assert mx.nd.load_frombuffer(f.read())["x"].dtype == np.dtype(dtype)
    for what in ({"x": x}, {"csr": m.tostype("csr")}):
        mx.nd.save(path, what)
        with pytest.raises(TypeError, match=f"the file holds values its arrays cannot: arrays of dtype {dtype} are "
                                            "not supported .*the MXNet face's nd.load keeps int8 and uint8"):
            so.load(path)


def test_load_refusals_are_mxnet_errors_naming_load(tmp_path):
    """A missing file, a folder and a file that is no archive: each an ``MXNetError`` naming
    ``load`` (and still the OSError or ValueError Python code expects)."""
    with pytest.raises(mx.base.MXNetIOError, match=r"load: No such file or directory") as missing:
        mx.nd.load(str(tmp_path / "missing.npz"))
    assert isinstance(missing.value, OSError) and missing.value.filename == str(tmp_path / "missing.npz")
    for bad, content in (("folder.npz", None), ("garbage.npz", b"PK\x03\x04not a zip")):
        path = tmp_path / bad
        path.mkdir() if content is None else path.write_bytes(content)
        with pytest.raises(mx.base.MXNetValueError, match=r"load: .*not a readable .npz/.npy file"):
            mx.nd.load(str(path))
    mx.nd.save(str(tmp_path / "ok.npz"), [mx.nd.ones((2,))])
    assert mx.nd.load(str(tmp_path / "ok.npz"))[0].asnumpy().tolist() == [1.0, 1.0]


def test_native_save_keeps_attrs():
    buf = io.BytesIO()
    so.save(buf, [so.array(A)], attrs={"writer": "test", "mode": 2})
    buf.seek(0)
    got: dict = {}
    back = so.load(buf, attrs=got)
    assert got == {"writer": "test", "mode": 2} and np.array_equal(back[0].asnumpy(), A)


def test_row_sparse_indexing_is_mxnets_only_whole_slice():
    """MXNet 1.9.1's RowSparseNDArray takes only x[:]; the native container takes NumPy's keys."""
    import sparse_ops as so

    dense = np.eye(3, dtype=np.float32)
    r = mx.nd.array(dense).tostype("row_sparse")
    assert r[:] is r
    for key, what in ((1, "integer"), (slice(0, 2), r"only \[:\]"), ((0, 1), "multi-dimensional"),
                      ("a", "undefined")):
        with pytest.raises(mx.base.MXNetError, match=what):
            r[key]
    native = so.array(dense).tostype("row_sparse")
    np.testing.assert_array_equal(native[1].asnumpy(), dense[1])
    c = mx.nd.array(dense).tostype("csr")
    assert c[1].stype == "csr" and c[1].shape == (1, 3)
    np.testing.assert_array_equal(c[-1].asnumpy(), dense[-1:])


def test_shape_and_assignment_refusals_are_mxnet_errors():
    """What MXNet refuses in C++ (a reshape that changes the size, a value that does not
    broadcast to its slot) is an MXNetError on the face, and a ValueError as Python's."""
    a = mx.nd.ones((2, 3))
    with pytest.raises(mx.base.MXNetError, match=r"reshape: .*6 elements do not fit"):
        a.reshape((7,))
    with pytest.raises(mx.base.MXNetError, match=r"__setitem__: .*could not broadcast"):
        a[:] = mx.nd.ones((4, 4))
    with pytest.raises(ValueError):
        a[0] = np.ones(5)
    a[:] = mx.nd.array([[5.0]])  # the array is intact and takes what broadcasts
    np.testing.assert_array_equal(a.asnumpy(), np.full((2, 3), 5.0))


@pytest.mark.parametrize("make", [
    lambda dt: mx.nd.sparse.zeros("csr", (2, 3), dtype=dt),
    lambda dt: mx.nd.sparse.zeros("row_sparse", (2, 3), dtype=dt),
    lambda dt: mx.nd.sparse.csr_matrix(([1, 2, 255], [0, 2, 1], [0, 2, 3]), shape=(2, 3), dtype=dt),
    lambda dt: mx.nd.sparse.csr_matrix(([1, 2], ([0, 1], [2, 0])), shape=(2, 3), dtype=dt),
    lambda dt: mx.nd.sparse.row_sparse_array(([[1, 2, 3]], [1]), shape=(2, 3), dtype=dt),
    lambda dt: mx.nd.sparse.csr_matrix(np.array([[0, 3, 0], [4, 0, 0]]), dtype=dt),
    lambda dt: mx.nd.sparse.array(mx.nd.array([[0, 3, 0], [4, 0, 0]]).tostype("csr"), dtype=dt),
])
@pytest.mark.parametrize("dt", ["int8", "uint8"])
def test_sparse_arrays_of_mxnets_narrow_integer_dtypes(make, dt):
    """MXNet makes int8 and uint8 sparse arrays as tostype does on the face; values convert as
    astype converts them (255 wraps in int8, as a C cast)."""
    x = make(dt)
    assert x.dtype == np.dtype(dt) and x.stype in ("csr", "row_sparse")
    want = make("int32").asnumpy().astype(dt)
    np.testing.assert_array_equal(x.asnumpy(), want)
    assert x.asnumpy().dtype == np.dtype(dt)


def test_an_unknown_dtype_is_an_mxnet_argument_error():
    with pytest.raises(mx.base.MXNetArgumentError, match="not understood \\(argument dtype\\)"):
        mx.nd.sparse.zeros("csr", (2, 2), dtype="nonsense")


def test_attach_grad_on_an_intermediate_makes_a_new_leaf_as_mxnet():
    """MXNet's MarkVariables gives the array a fresh variable node: gradients stop there (what
    used it before still reaches its inputs)."""
    x = mx.nd.array([1.0, 2.0, 3.0])
    x.attach_grad()
    with mx.autograd.record():
        y = x * 2
        before = (y * 3).sum()
        y.attach_grad()
        z = (y * y).sum()
    z.backward()
    np.testing.assert_array_equal(y.grad.asnumpy(), [4, 8, 12])
    np.testing.assert_array_equal(x.grad.asnumpy(), [0, 0, 0])
    before.backward()
    np.testing.assert_array_equal(x.grad.asnumpy(), [6, 6, 6])


def test_cpu_contexts_mix_and_moves_between_them_are_recorded():
    a = mx.nd.array([1.0, 2.0], ctx=mx.cpu(1))
    b = mx.nd.array([2.0, 3.0], ctx=mx.cpu(0))
    c = a + b
    assert c.context == mx.cpu(1)
    np.testing.assert_array_equal(c.asnumpy(), [3, 5])
    for move in (lambda v: v.as_in_context(mx.cpu(1)), lambda v: v.copyto(mx.cpu(1))):
        v = mx.nd.array([1.0, 2.0])
        v.attach_grad()
        with mx.autograd.record():
            w = move(v)
            loss = (w * 2).sum()
        assert w.context == mx.cpu(1)
        loss.backward()
        np.testing.assert_array_equal(v.grad.asnumpy(), [2, 2])


def test_arithmetic_with_numpy_arrays_is_refused_as_mxnet():
    """MXNet's operators take NDArrays and numbers only: a NumPy operand is a TypeError, never
    a NumPy result that leaves autograd (y += ndarray would rebind y to NumPy)."""
    x = mx.nd.array([1.0, 2.0])
    for bad in (lambda: x + np.ones(2), lambda: np.ones(2) + x, lambda: x * np.ones(2)):
        with pytest.raises(TypeError, match="not supported"):
            bad()
    y = mx.nd.array([1.0, 2.0])
    with pytest.raises(TypeError, match="not supported"):
        y += np.ones(2)
    assert isinstance(y, mx.nd.NDArray)
    np.testing.assert_array_equal((x + np.float32(1)).asnumpy(), [2, 3])  # NumPy scalars are numbers
    assert mx.nd.zeros(2).writable
