"""The MXNet 1.x face: snippets of ordinary MXNet imperative code, run unchanged against
``import sparse_ops.compat.mxnet as mx``, with values and storage types as MXNet 1.9 gives."""
import os

import numpy as np
import pytest
import scipy.sparse as sp

import sparse_ops as so
import sparse_ops.compat.mxnet as mx
from sparse_ops.compat.mxnet.test_utils import assert_almost_equal, rand_ndarray, same

DENSE = np.array([[1.0, 0.0, 2.0], [0.0, 0.0, 0.0], [0.0, 3.0, 0.0], [4.0, 0.0, 5.0]])


# ---- classes, contexts, errors -----------------------------------------------------------------
def test_classes_are_subclasses_of_the_core_classes():
    assert issubclass(mx.nd.NDArray, so.NDArray)
    assert issubclass(mx.nd.sparse.CSRNDArray, so.CSRNDArray)
    assert issubclass(mx.nd.sparse.RowSparseNDArray, so.RowSparseNDArray)
    for native in (so.zeros((2, 2)), so.zeros((2, 2), stype="csr")):  # native arrays pass MXNet's checks
        assert isinstance(native, mx.nd.NDArray)
    assert isinstance(so.zeros((2, 2), stype="csr"), mx.nd.sparse.CSRNDArray)
    x = mx.nd.array(DENSE)
    for a in (x, x.tostype("csr"), x.tostype("row_sparse"), mx.nd.sparse.zeros("csr", (2, 2))):
        assert isinstance(a, mx.nd.NDArray)
    assert isinstance(x.tostype("csr"), mx.nd.sparse.CSRNDArray)
    assert isinstance(x.tostype("row_sparse"), mx.nd.sparse.BaseSparseNDArray)


def test_contexts():
    x = mx.nd.zeros((2, 2), ctx=mx.cpu())
    assert x.context == mx.cpu() == mx.cpu(0) == mx.Context("cpu", 0)
    assert isinstance(x.context, mx.Context)
    assert mx.gpu(1).device_type == "gpu" and mx.gpu(1).device_id == 1  # checked when used, as in MXNet
    assert mx.current_context() == mx.cpu()
    with mx.cpu(0):
        assert mx.nd.ones((1,)).context == mx.cpu(0)


def test_assigning_the_default_context_sets_this_threads_default_only():
    """``Context.default_ctx = ctx`` (and ``Context._default_ctx.value = ctx``) set the
    calling thread's default, as MXNet's class property does: the class attribute stays
    per thread, a ``with`` block still overrides it, other threads keep theirs."""
    import threading

    seen = {}

    def run():
        try:
            mx.Context.default_ctx = mx.cpu(11)
            seen["set"] = (mx.Context.default_ctx, mx.nd.zeros((1,)).context, mx.cpu(3).default_ctx)
            with mx.cpu(10):
                seen["block"] = mx.Context.default_ctx
            seen["after"] = mx.Context.default_ctx
            mx.Context._default_ctx.value = mx.cpu(12)
            seen["value"] = (mx.Context._default_ctx.value, mx.current_context())
        except BaseException as exc:  # (reported below, in the main thread)
            seen["error"] = exc

    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    assert "error" not in seen, seen.get("error")
    assert seen["set"] == (mx.cpu(11),) * 3
    assert (seen["block"], seen["after"], seen["value"]) == (mx.cpu(10), mx.cpu(11), (mx.cpu(12),) * 2)
    assert mx.Context.default_ctx == mx.current_context() == so.current_device() == mx.cpu(0)  # this thread's
    assert mx.Context is so.Device and mx.Context.default_ctx is mx.cpu(0)
    with pytest.raises(TypeError, match=r"the default device must be a Device"):
        mx.Context.default_ctx = "cpu"


def test_mxnet_error_is_the_base_of_operator_error():
    assert mx.base.MXNetError is so.SparseOpsError and mx.MXNetError is so.SparseOpsError
    assert issubclass(so.OperatorError, mx.base.MXNetError)
    with pytest.raises(mx.base.MXNetError):
        mx.nd.dot(mx.nd.ones((2, 3)), mx.nd.ones((2, 3)))  # shapes do not chain
    with pytest.raises(mx.base.MXNetError):
        mx.nd.sum(mx.nd.ones((2, 2)), no_such_param=1)


# ---- creation --------------------------------------------------------------------------------
def test_array_defaults_to_float32_except_from_ndarrays():
    assert mx.nd.array(np.arange(4, dtype=np.int64)).dtype == np.float32  # MXNet converts
    assert mx.nd.array([1, 2, 3]).dtype == np.float32
    assert mx.nd.array(np.ones(2), dtype="float64").dtype == np.float64
    src = mx.nd.array([1, 2], dtype="int32")
    copy = mx.nd.array(src)
    assert copy.dtype == np.int32
    copy[:] = 7
    assert src.asnumpy().tolist() == [1, 2]  # array() copies
    m = sp.csr_matrix(DENSE)
    c = mx.nd.array(m)
    assert c.stype == "csr" and c.dtype == np.float64  # a SciPy matrix keeps its dtype
    np.testing.assert_array_equal(c.asnumpy(), DENSE)


def test_filled_arrays_and_arange():
    z = mx.nd.zeros((2, 3))
    assert z.dtype == np.float32 and z.stype == "default" and z.asnumpy().sum() == 0
    assert mx.nd.zeros((4, 3), stype="row_sparse").stype == "row_sparse"
    assert mx.nd.zeros((2, 3), mx.cpu(), "float64").dtype == np.float64
    assert mx.nd.ones((2,)).asnumpy().tolist() == [1, 1]
    assert mx.nd.full((2, 2), 3.5).asnumpy().tolist() == [[3.5, 3.5], [3.5, 3.5]]
    out = mx.nd.zeros((3,))
    assert mx.nd.full((3,), 2, out=out) is out and out.asnumpy().tolist() == [2, 2, 2]
    assert mx.nd.empty((2, 5)).shape == (2, 5) and mx.nd.empty((2, 5)).dtype == np.float32
    np.testing.assert_array_equal(mx.nd.arange(5).asnumpy(), np.arange(5, dtype=np.float32))
    a = mx.nd.arange(1, 3, 0.5, repeat=2)
    assert a.dtype == np.float32
    np.testing.assert_array_equal(a.asnumpy(), [1, 1, 1.5, 1.5, 2, 2, 2.5, 2.5])
    assert mx.nd.arange(0, 6, 2, dtype="int32").asnumpy().tolist() == [0, 2, 4]
    assert mx.nd.arange(3, ctx=mx.cpu()).context == mx.cpu()


def test_random_samplers():
    u = mx.nd.random.uniform(-1, 1, shape=(50, 4))
    assert u.shape == (50, 4) and u.dtype == np.float32
    assert -1 <= u.asnumpy().min() and u.asnumpy().max() < 1
    assert mx.nd.random.uniform().shape == (1,)  # MXNet's default shape
    n = mx.nd.random.normal(loc=2, scale=0.5, shape=(2000,), dtype="float64", ctx=mx.cpu())
    assert n.dtype == np.float64 and abs(float(n.asnumpy().mean()) - 2) < 0.1
    assert mx.nd.uniform(0, 1, (3,), mx.cpu()).shape == (3,)  # legacy name: ctx before dtype
    assert mx.nd.normal(shape=(2, 2)).shape == (2, 2)
    mx.random.seed(7)
    a = mx.nd.random.uniform(shape=(4,)).asnumpy()
    mx.random.seed(7)
    np.testing.assert_array_equal(a, mx.nd.random.uniform(shape=(4,)).asnumpy())


# ---- mx.nd.sparse constructors -------------------------------------------------------------------
def test_csr_matrix_forms():
    a = mx.nd.sparse.csr_matrix(([1, 2, 3], [1, 0, 2], [0, 1, 2, 2, 3]), shape=(4, 3))
    assert a.stype == "csr" and a.dtype == np.float32
    np.testing.assert_array_equal(a.asnumpy(), [[0, 1, 0], [2, 0, 0], [0, 0, 0], [0, 0, 3]])
    assert a.aux_types == [np.int64, np.int64]  # MXNet's only index type
    m = sp.csr_matrix(DENSE)
    m.indices, m.indptr = m.indices.astype(np.int32), m.indptr.astype(np.int32)
    b = mx.nd.sparse.csr_matrix((m.data, m.indices, m.indptr), shape=DENSE.shape)
    assert b.dtype == np.float64 and b.aux_types == [np.int64, np.int64]  # numpy data keeps its dtype
    np.testing.assert_array_equal(b.asnumpy(), DENSE)
    coo = mx.nd.sparse.csr_matrix(([1.0, 2.0, 5.0], ([0, 0, 2], [1, 1, 0])), shape=(3, 2))
    np.testing.assert_array_equal(coo.asnumpy(), [[0, 3], [0, 0], [5, 0]])  # duplicates summed
    assert mx.nd.sparse.csr_matrix((2, 5)).shape == (2, 5)
    parts = (mx.nd.array([1.0, 2.0]), mx.nd.array([0, 1]), mx.nd.array([0, 1, 2]))  # NDArray components
    from_nd = mx.nd.sparse.csr_matrix(parts, shape=(2, 2))
    assert from_nd.dtype == np.float32 and from_nd.asnumpy().tolist() == [[1, 0], [0, 2]]
    assert mx.nd.sparse.csr_matrix(DENSE, dtype="float32").dtype == np.float32
    np.testing.assert_array_equal(mx.nd.sparse.csr_matrix(m).asnumpy(), DENSE)
    with pytest.raises(ValueError):
        mx.nd.sparse.csr_matrix(mx.nd.array(DENSE).tostype("row_sparse"))
    with pytest.raises(ValueError):
        mx.nd.sparse.csr_matrix(DENSE, shape=(2, 2))


def test_row_sparse_array_forms_and_zeros():
    a = mx.nd.sparse.row_sparse_array(([[1, 2], [3, 4]], [1, 4]), shape=(6, 2))
    assert a.stype == "row_sparse" and a.dtype == np.float32 and a.aux_types == [np.int64]
    np.testing.assert_array_equal(a.asnumpy(), [[0, 0], [1, 2], [0, 0], [0, 0], [3, 4], [0, 0]])
    assert mx.nd.sparse.row_sparse_array((3, 4)).shape == (3, 4)
    assert mx.nd.sparse.row_sparse_array((2, 3, 4)).shape == (2, 3, 4)
    assert mx.nd.sparse.row_sparse_array(DENSE).dtype == np.float64
    z = mx.nd.sparse.zeros("row_sparse", (1, 2), ctx=mx.cpu(), dtype="float16")  # stype first
    assert z.stype == "row_sparse" and z.dtype == np.float16 and z.asnumpy().tolist() == [[0, 0]]
    assert mx.nd.sparse.zeros("default", (2,)).stype == "default"
    assert mx.nd.sparse.empty("csr", (3, 2)).stype == "csr"
    c = mx.nd.sparse.array(a)
    assert c.stype == "row_sparse" and c is not a
    np.testing.assert_array_equal(c.asnumpy(), a.asnumpy())
    with pytest.raises(ValueError):
        mx.nd.sparse.array(mx.nd.ones((2, 2)))


# ---- operators and their output storage types ------------------------------------------------------
def _inputs(kinds):
    base = {"d": mx.nd.array(DENSE), "c": mx.nd.array(DENSE).tostype("csr"),
            "r": mx.nd.array(DENSE).tostype("row_sparse")}
    return [base[k] for k in kinds]


STYPE_CASES = [
    ("elemwise_add", "rr", {}, "row_sparse", lambda a, b: a + b),
    ("elemwise_add", "cc", {}, "csr", lambda a, b: a + b),
    ("elemwise_sub", "cc", {}, "csr", lambda a, b: a - b),
    ("elemwise_mul", "dc", {}, "csr", lambda a, b: a * b),
    ("elemwise_mul", "rd", {}, "row_sparse", lambda a, b: a * b),
    ("elemwise_add", "dc", {}, "default", lambda a, b: a + b),
    ("square", "c", {}, "csr", np.square),
    ("sqrt", "r", {}, "row_sparse", np.sqrt),
    ("abs", "c", {}, "csr", np.abs),
    ("sign", "r", {}, "row_sparse", np.sign),
    ("negative", "c", {}, "csr", np.negative),
    ("relu", "c", {}, "csr", lambda a: np.maximum(a, 0)),
    ("log1p", "r", {}, "row_sparse", np.log1p),
    ("clip", "c", {"a_min": -1.0, "a_max": 2.0}, "csr", lambda a: np.clip(a, -1, 2)),
    ("exp", "c", {}, "default", np.exp),
    ("sigmoid", "r", {}, "default", lambda a: 1 / (1 + np.exp(-a))),
    ("zeros_like", "c", {}, "csr", np.zeros_like),
    ("cast_storage", "d", {"stype": "csr"}, "csr", lambda a: a),
    ("sum", "c", {"axis": 0}, "default", lambda a: a.sum(axis=0)),
]


@pytest.mark.parametrize("name,kinds,params,stype,ref", STYPE_CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in STYPE_CASES])
def test_sparse_ops_output_stypes(name, kinds, params, stype, ref):
    out = getattr(mx.nd.sparse, name)(*_inputs(kinds), **params)
    assert out.stype == stype
    assert_almost_equal(out, ref(*[DENSE] * len(kinds)).astype(np.float32), rtol=1e-6)


def test_dot_add_n_retain_stypes():
    d, c = mx.nd.array(DENSE), mx.nd.array(DENSE).tostype("csr")
    rhs = mx.nd.array(np.arange(8.0).reshape(4, 2))
    g = mx.nd.sparse.dot(c, rhs, transpose_a=True)
    assert g.stype == "row_sparse"
    assert_almost_equal(g, DENSE.T @ np.arange(8.0).reshape(4, 2))
    lhs = mx.nd.array(np.arange(8.0).reshape(2, 4))
    assert mx.nd.dot(lhs, c).stype == "csr"
    assert mx.nd.dot(c, mx.nd.ones((3, 2))).stype == "default"
    r = d.tostype("row_sparse")
    assert mx.nd.sparse.add_n(r, r, r).stype == "row_sparse"
    assert mx.nd.add_n(r, d).stype == "default"
    kept = mx.nd.sparse.retain(r, mx.nd.array([0, 3], dtype="int64"))
    assert kept.stype == "row_sparse" and kept.indices.tolist() == [0, 3]
    assert (c * 2).stype == "csr" and (c + 1).stype == "default"


def test_full_reductions_have_shape_one():
    x = mx.nd.array(DENSE)
    for reduced in (mx.nd.sum(x), mx.nd.mean(x), mx.nd.norm(x), mx.nd.sum(x.tostype("csr")),
                    mx.nd.sparse.sum(x.tostype("row_sparse"))):
        assert reduced.shape == (1,)
    assert mx.nd.sum(x).asscalar() == pytest.approx(15.0)
    assert mx.nd.sum(x, axis=1).shape == (4,)
    assert mx.nd.sum(x, axis=(0, 1), keepdims=True).shape == (1, 1)
    x.attach_grad()
    with mx.autograd.record():
        loss = mx.nd.sum(x * x)
    loss.backward()  # a (1,) head, as in MXNet
    assert_almost_equal(x.grad, 2 * DENSE)


def test_mxnet_calling_conventions():
    x = mx.nd.array(DENSE)
    assert_almost_equal(mx.nd.sum(x, 1), DENSE.sum(axis=1))  # parameters by position
    assert_almost_equal(mx.nd.sum(data=x, axis=0, name="s"), DENSE.sum(axis=0))  # inputs by keyword
    w, b = mx.nd.ones((2, 3)), mx.nd.array([1.0, -1.0])
    fc = mx.nd.FullyConnected(data=x, weight=w, bias=b, num_hidden=2)
    assert_almost_equal(fc, DENSE @ np.ones((3, 2)) + [1, -1])
    assert_almost_equal(mx.nd.FullyConnected(x, w, num_hidden=2, no_bias=True), DENSE @ np.ones((3, 2)))
    parts = mx.nd.SliceChannel(x, num_outputs=2, axis=0)  # MXNet alias of split
    assert [p.shape for p in parts] == [(2, 3), (2, 3)]
    assert mx.nd.Concat(*parts, dim=0).shape == (4, 3)
    assert_almost_equal(mx.nd.broadcast_plus(x, mx.nd.ones((1, 3))), DENSE + 1)
    assert_almost_equal(mx.nd.Activation(x - 2, act_type="relu"), np.maximum(DENSE - 2, 0))
    assert_almost_equal(mx.nd.concatenate([x, x], axis=1), np.hstack([DENSE, DENSE]))
    assert mx.nd._random_uniform(shape=(2,), ctx=mx.cpu()).shape == (2,)
    with pytest.raises(AttributeError):
        mx.nd.no_such_operator
    assert "dot" in dir(mx.nd) and "Concat" in dir(mx.nd)


def test_ufunc_helpers_with_scalars():
    x = mx.nd.array([1.0, 2.0, 3.0])
    assert mx.nd.subtract(1, x).asnumpy().tolist() == [0, -1, -2]
    assert mx.nd.divide(6, x).asnumpy().tolist() == [6, 3, 2]
    assert mx.nd.greater(2, x).asnumpy().tolist() == [1, 0, 0]
    assert mx.nd.lesser_equal(x, 2).asnumpy().tolist() == [1, 1, 0]
    assert mx.nd.maximum(x, 2.5).asnumpy().tolist() == [2.5, 2.5, 3]
    assert mx.nd.add(x, mx.nd.ones((2, 1))).shape == (2, 3)
    assert mx.nd.multiply(2, 3) == 6 and mx.nd.equal(1, 1) == 1
    c = mx.nd.array(DENSE).tostype("csr")
    assert mx.nd.sparse.add(c, c).stype == "csr" and mx.nd.sparse.multiply(c, 3).stype == "csr"
    assert_almost_equal(mx.nd.sparse.subtract(c, c), np.zeros_like(DENSE))


# ---- NDArray methods -------------------------------------------------------------------------------
def test_ndarray_methods():
    x = mx.nd.array([[1, 2], [3, 4]])
    assert (x.shape, x.dtype, x.stype, x.context) == ((2, 2), np.float32, "default", mx.cpu())
    assert mx.nd.array([5]).asscalar() == 5
    y = x.copy()
    y[:] = 0
    assert x.asnumpy().sum() == 10
    x.copyto(y)
    assert same(y, x)
    assert x.copyto(mx.cpu()).context == mx.cpu()
    assert x.astype("float64").dtype == np.float64
    assert x.astype("float32", copy=False) is x
    x.wait_to_read()
    mx.nd.waitall()
    c = x.tostype("csr")
    c[:] = mx.nd.array([[0, 9], [0, 0]])  # whole assignment keeps the storage type
    assert c.stype == "csr" and c.asnumpy().tolist() == [[0, 9], [0, 0]]
    assert_almost_equal((x * 2 + 1) / 2 - x, np.full((2, 2), 0.5))
    assert (x > 2).asnumpy().tolist() == [[0, 0], [1, 1]] and (x > 2).dtype == np.float32
    assert (x == 4).asnumpy().tolist() == [[0, 0], [0, 1]]
    assert (-x).asnumpy().tolist() == [[-1, -2], [-3, -4]]
    x.attach_grad()
    with mx.autograd.record():
        z = (x * x).detach() * x  # detached factor: gradient is x*x only
    z.backward()
    assert_almost_equal(x.grad, x.asnumpy() ** 2)
    x.drop_grad()
    assert x.grad is None


def test_sparse_components_read_like_ndarrays():
    a = mx.nd.array([[0, 1, 0], [2, 0, 0], [0, 0, 3]]).tostype("csr")
    assert a.data.asnumpy().tolist() == [1, 2, 3]
    assert a.tostype("row_sparse").indices.asnumpy().tolist() == [0, 1, 2]
    assert a.indices.asnumpy().tolist() == [1, 0, 2]
    assert a.indptr.asnumpy().tolist() == [0, 1, 2, 3]
    assert a.aux_data(1).asnumpy().tolist() == [1, 0, 2]


def test_every_sparse_ops_error_is_an_mxnet_error():
    bad = mx.nd.sparse.csr_matrix((np.ones(2), np.array([3, 1]), np.array([0, 2])), shape=(1, 4))  # as MXNet: unchecked
    with pytest.raises(mx.base.MXNetError):
        bad.check_format()
    with pytest.raises(mx.base.MXNetError):
        bad + bad
    with pytest.raises(mx.base.MXNetError):
        mx.nd.elemwise_add(mx.nd.ones((2,)), mx.nd.ones((3,)))


# ---- autograd --------------------------------------------------------------------------------------
def test_autograd_state_functions():
    assert not mx.autograd.is_recording() and not mx.autograd.is_training()
    with mx.autograd.record():
        assert mx.autograd.is_recording() and mx.autograd.is_training()
        with mx.autograd.pause():
            assert not mx.autograd.is_recording() and not mx.autograd.is_training()
        with mx.autograd.predict_mode():
            assert not mx.autograd.is_training()
    with mx.autograd.train_mode():
        assert mx.autograd.is_training() and not mx.autograd.is_recording()
    assert mx.autograd.set_recording(True) is False
    assert mx.autograd.set_recording(False) is True
    assert mx.autograd.set_training(False) is False


def test_autograd_backward_grad_and_mark_variables():
    x = mx.nd.array([1.0, 2.0, 3.0])
    gx = mx.nd.zeros((3,))
    mx.autograd.mark_variables([x], [gx])
    with mx.autograd.record():
        y = mx.nd.exp(x) * 2
    mx.autograd.backward([y], [mx.nd.ones((3,))])
    assert_almost_equal(gx, 2 * np.exp([1.0, 2.0, 3.0]), rtol=1e-5)
    with mx.autograd.record():
        y = x * x * x
    (dx,) = mx.autograd.grad([y], [x], create_graph=True)
    assert_almost_equal(dx, 3 * np.array([1.0, 4.0, 9.0]))


def test_autograd_function():
    class Sigmoid(mx.autograd.Function):
        def forward(self, x):
            y = 1 / (1 + mx.nd.exp(-x))
            self.save_for_backward(y)
            return y

        def backward(self, dy):
            (y,) = self.saved_tensors
            return dy * y * (1 - y)

    x = mx.nd.array([-1.0, 0.0, 2.0])
    x.attach_grad()
    with mx.autograd.record():
        y = Sigmoid()(x)
    y.backward()
    s = 1 / (1 + np.exp(-np.array([-1.0, 0.0, 2.0])))
    assert_almost_equal(x.grad, s * (1 - s), rtol=1e-5)


# ---- end-to-end snippets ------------------------------------------------------------------------------
def test_sparse_linear_regression_step():
    """csr features, dense weight with a row_sparse gradient, lazy SGD on the touched rows."""
    rng = np.random.default_rng(0)
    used = sp.random(8, 5, density=0.3, format="csr", random_state=1, dtype=np.float32)
    x_np = sp.hstack([used, sp.csr_matrix((8, 1), dtype=np.float32)], format="csr")  # feature 5 unused
    y_np = rng.normal(size=(8, 1)).astype(np.float32)
    X = mx.nd.sparse.csr_matrix(x_np)
    y = mx.nd.array(y_np)
    w = mx.nd.random.normal(shape=(6, 1))
    w.attach_grad(stype="row_sparse")
    w0 = w.asnumpy()
    lr = 0.1
    with mx.autograd.record():
        pred = mx.nd.sparse.dot(X, w)
        loss = mx.nd.sum(mx.nd.square(pred - y)) / 8
    loss.backward()
    assert w.grad.stype == "row_sparse"
    expect_grad = x_np.T @ (2 * (x_np @ w0 - y_np) / 8)
    assert_almost_equal(w.grad, expect_grad, rtol=1e-4, atol=1e-6)
    assert 5 not in w.grad.indices.tolist()
    mx.nd.sgd_update(w, w.grad, lr=lr, out=w)
    assert_almost_equal(w, w0 - lr * expect_grad, rtol=1e-4, atol=1e-6)
    assert w.asnumpy()[5] == w0[5]


def test_embedding_with_sparse_grad():
    vocab, dim = 10, 4
    weight = mx.nd.random.uniform(shape=(vocab, dim))
    weight.attach_grad(stype="row_sparse")
    idx = mx.nd.array([[1, 3], [3, 7]])  # MXNet passes ids as float32
    with mx.autograd.record():
        emb = mx.nd.Embedding(data=idx, weight=weight, input_dim=vocab, output_dim=dim, sparse_grad=True)
        loss = mx.nd.sum(emb * 2)
    loss.backward()
    assert emb.shape == (2, 2, dim)
    assert weight.grad.stype == "row_sparse"
    assert weight.grad.indices.tolist() == [1, 3, 7]
    expect = np.zeros((vocab, dim))
    expect[[1, 7]] = 2
    expect[3] = 4
    assert_almost_equal(weight.grad, expect)


@mx.operator.register("compat_test_sqr")
class SqrProp(mx.operator.CustomOpProp):
    def __init__(self, scale="1"):
        super().__init__(need_top_grad=True)
        self.scale = float(scale)

    def list_arguments(self):
        return ["data"]

    def list_outputs(self):
        return ["output"]

    def infer_shape(self, in_shape):
        return in_shape, [in_shape[0]], []

    def create_operator(self, ctx, shapes, dtypes):
        return Sqr(self.scale)


class Sqr(mx.operator.CustomOp):
    """The classic MXNet custom op: NumPy inside, NDArrays in and out."""

    def __init__(self, scale):
        self.scale = scale

    def forward(self, is_train, req, in_data, out_data, aux):
        x = in_data[0].asnumpy()
        self.assign(out_data[0], req[0], mx.nd.array(self.scale * x * x))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        x = in_data[0].asnumpy()
        self.assign(in_grad[0], req[0], mx.nd.array(2 * self.scale * x * out_grad[0].asnumpy()))


def test_custom_op_through_the_face():
    x = mx.nd.array([[1.0, -2.0], [3.0, 0.5]])
    x.attach_grad()
    with mx.autograd.record():
        y = mx.nd.Custom(x, op_type="compat_test_sqr", scale=3)
    y.backward()
    assert_almost_equal(y, 3 * x.asnumpy() ** 2)
    assert_almost_equal(x.grad, 6 * x.asnumpy())
    z = mx.nd.Custom(data=x, op_type="compat_test_sqr")  # input by the name list_arguments gives
    assert_almost_equal(z, x.asnumpy() ** 2)
    assert "compat_test_sqr" in mx.operator.get_all_registered_operators()


def test_custom_op_reregistration_and_name_clash():
    @mx.operator.register("compat_test_twice")
    class One(SqrProp):
        pass

    with pytest.warns(UserWarning, match="overriding"):
        @mx.operator.register("compat_test_twice")
        class Two(SqrProp):
            def create_operator(self, ctx, shapes, dtypes):
                return Sqr(10.0)

    assert_almost_equal(mx.nd.Custom(mx.nd.array([2.0]), op_type="compat_test_twice"), [40.0])
    with pytest.raises(mx.base.MXNetError, match="built-in"):
        mx.operator.register("dot")(SqrProp)


def test_save_load_round_trip(tmp_path):
    d = mx.nd.array(DENSE)
    c, r = d.tostype("csr"), d.tostype("row_sparse")
    single = os.path.join(tmp_path, "w.params")
    mx.nd.save(single, d)
    loaded = mx.nd.load(single)
    assert isinstance(loaded, list) and len(loaded) == 1 and same(loaded[0], d)
    listed = os.path.join(tmp_path, "list.nd")
    mx.nd.save(listed, [c, r])
    a, b = mx.nd.load(listed)
    assert (a.stype, b.stype) == ("csr", "row_sparse") and same(a, DENSE) and same(b, DENSE)
    named = os.path.join(tmp_path, "dict.nd")
    mx.nd.save(named, {"weight": d, "feat": c})
    back = mx.nd.load(named)
    assert set(back) == {"weight", "feat"} and back["feat"].stype == "csr"
    assert_almost_equal(back["weight"], DENSE)
    with pytest.raises(ValueError):
        mx.nd.save(named, "not an array")


def test_rand_ndarray_and_assert_almost_equal():
    np.random.seed(3)
    d = rand_ndarray((5, 4))
    assert d.stype == "default" and d.dtype == np.float32
    c = rand_ndarray((30, 40), "csr", density=0.1, dtype="float64")
    assert c.stype == "csr" and c.dtype == np.float64
    values = c.asnumpy()
    assert 0.02 < np.count_nonzero(values) / values.size < 0.2
    assert values.min() >= 0 and values.max() < 1
    r = rand_ndarray((20, 3), "row_sparse", density=0.5)
    assert r.stype == "row_sparse" and 0 < r.nnz_rows < 20
    np.random.seed(3)
    assert same(rand_ndarray((5, 4)), d)  # NumPy's global generator, as in MXNet
    rsp, (vals, rows) = mx.test_utils.rand_sparse_ndarray((6, 2), "row_sparse", rsp_indices=np.array([1, 4]))
    assert rsp.indices.tolist() == [1, 4] and vals.shape == (2, 2)
    assert_almost_equal(c, values)
    assert_almost_equal(c.tostype("default"), values + 1e-9, rtol=1e-5, atol=1e-8)
    with pytest.raises(AssertionError, match="exceeds tolerance"):
        assert_almost_equal(d, d.asnumpy() + 1e-2)  # float32: MXNet 1.9.1 defaults rtol 1e-4, atol 1e-3
    assert not same(d, d.asnumpy() + 1e-3)
    assert mx.test_utils.almost_equal(d, d.asnumpy() + 1e-3, atol=1e-2)
