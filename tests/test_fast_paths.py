"""The shortcuts taken for whole-step speed give the results of the general paths: x * x's
one-op gradient, the vectorised full sum, the word-wise Embedding gather, the ufunc call
that skips allocating the output, and MXNet-form custom ops whose forward calls operators."""
import numpy as np
import pytest

import sparse_ops as so
from sparse_ops import autograd as ag
from sparse_ops.dispatch import plan_for
from sparse_ops.registry import get_op


def _rand(shape, dtype="float64", seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# ---- x * x ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_square_by_product_gradient_is_two_x_first_and_second_order(dtype):
    a = _rand((5, 3), dtype)
    x = so.array(a)
    x.attach_grad()
    with ag.record():
        y = so.sum(x * x * x)  # (x * x) is one node with both inputs the same array
        (g,) = [ag.grad(y, x, create_graph=True)]
        z = so.sum(g)
    np.testing.assert_allclose(g.asnumpy(), 3 * a * a, rtol=1e-5)
    z.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), 6 * a, rtol=1e-5)
    assert x.grad.dtype == np.dtype(dtype)


def test_product_of_two_arrays_still_gives_each_its_gradient():
    a, b = _rand((4, 4)), _rand((4, 4), seed=1)
    x, y = so.array(a), so.array(b)
    x.attach_grad()
    y.attach_grad()
    with ag.record():
        loss = so.sum(x * y)
    loss.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), b)
    np.testing.assert_allclose(y.grad.asnumpy(), a)


def test_sparse_square_by_product_keeps_the_general_gradient():
    a = _rand((6, 4))
    a[[1, 4]] = 0
    x = so.array(a).tostype("row_sparse")
    x.attach_grad(stype="row_sparse")
    with ag.record():
        loss = so.sum(x * x)
    loss.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), 2 * a)


def test_scaled_mul_values_and_gradients():
    from sparse_ops.sdk.testing import opcheck

    a, b = _rand((3, 4)), _rand((3, 4), seed=2)
    out = so.invoke("_scaled_mul", [so.array(a), so.array(b)], {"scalar": -1.5})
    np.testing.assert_allclose(out.asnumpy(), -1.5 * a * b)
    report = opcheck("_scaled_mul", get_op("_scaled_mul").cls.samples())
    assert report == 1 and "gradient" not in report.skipped(), report  # opcheck raises on a mismatch


# ---- the full sum --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(4097,), (300, 70), (3, 50, 40), (8192, 3)])
def test_full_sum_is_accurate_for_large_arrays(dtype, shape):
    a = (_rand(shape, dtype) + 3).astype(dtype)
    exact = a.astype(np.float64).sum()
    got = so.sum(so.array(a))
    assert got.shape == () and got.dtype == np.dtype(dtype)
    assert abs(float(got.asnumpy()) - exact) <= 1e-6 * abs(exact)
    keep = so.sum(so.array(a), axis=tuple(range(a.ndim)), keepdims=True)
    assert keep.shape == (1,) * a.ndim
    np.testing.assert_allclose(keep.asnumpy().ravel(), [exact], rtol=1e-6)


@pytest.mark.parametrize("op,ref", [("square_sum", lambda a: (a.astype(np.float64) ** 2).sum()),
                                    ("norm", lambda a: np.sqrt((a.astype(np.float64) ** 2).sum())),
                                    ("mean", lambda a: a.astype(np.float64).mean())])
def test_transformed_full_reductions_of_large_arrays(op, ref):
    a = _rand((200, 60), "float32")
    got = getattr(so, op)(so.array(a))
    np.testing.assert_allclose(float(got.asnumpy()), ref(a), rtol=1e-6)


def test_full_sum_of_non_contiguous_and_special_values():
    a = _rand((200, 80))
    view = so.array(a)[::2]  # not C-contiguous: NumPy's path
    np.testing.assert_allclose(float(so.sum(view).asnumpy()), a[::2].sum())
    b = np.ones(5000, np.float32)
    b[17] = np.inf
    assert np.isinf(float(so.sum(so.array(b)).asnumpy()))
    b[18] = np.nan
    assert np.isnan(float(so.sum(so.array(b)).asnumpy()))
    assert so.sum(so.array(np.arange(6000, dtype=np.int64))).asnumpy() == 6000 * 5999 // 2


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", [0, 1, 4095, 4096, 4097, 1_000_003])
def test_full_sum_kernel_modes_against_a_float64_reference(dtype, n):
    from sparse_ops.kernels.reduce import ABS, PLAIN, SQUARE, flat_sum

    a = (_rand(n, dtype, seed=n) + 0.5).astype(dtype)  # mixed signs, a non-zero mean
    wide = a.astype(np.float64)
    tol = 2e-6 if dtype == "float32" else 1e-12
    for mode, ref in ((PLAIN, wide.sum()), (SQUARE, (wide * wide).sum()), (ABS, np.abs(wide).sum())):
        got = flat_sum(a, mode)
        assert abs(got - ref) <= tol * max(1.0, np.abs(wide).sum() if mode != SQUARE else ref), (mode, got, ref)


# ---- the sum's gradient, a broadcast view -----------------------------------------------------------------
def test_gradient_of_a_sum_reaches_the_caller_writable_and_contiguous():
    a = _rand((40, 30))
    x = so.array(a)
    x.attach_grad()
    with ag.record():
        total = so.sum(x)
        loss = so.sum(x * x)
    gx = ag.grad(total, x, retain_graph=True)
    data = gx._data
    assert data.flags.writeable and data.flags.c_contiguous and 0 not in data.strides
    np.testing.assert_array_equal(gx.asnumpy(), np.ones_like(a))
    loss.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), 2 * a)
    x.grad._data[0, 0] = 7.0  # the gradient buffer is the caller's to write
    assert x.grad.asnumpy()[0, 0] == 7.0 and x.grad.asnumpy()[1, 1] == 2 * a[1, 1]


def test_gradient_of_an_axis_sum_and_of_a_mean_are_right_through_a_product():
    a, b = _rand((6, 5)), _rand((6, 5), seed=3)
    x, y = so.array(a), so.array(b)
    x.attach_grad()
    y.attach_grad()
    with ag.record():
        loss = so.sum(so.mean(x * y, axis=0) * so.array(np.arange(5.0)))
    loss.backward()
    w = np.arange(5.0) / 6
    np.testing.assert_allclose(x.grad.asnumpy(), b * w)
    np.testing.assert_allclose(y.grad.asnumpy(), a * w)


class _Doubler(ag.Function):
    seen: list = []

    def forward(self, x):
        return x * 1.0

    def backward(self, dy):
        data = dy._data
        type(self).seen.append((data.flags.writeable, 0 in data.strides))
        data *= 2.0  # a user function may write into the gradient it is given
        return dy


def test_user_functions_receive_writable_out_grads_from_a_sum():
    _Doubler.seen.clear()
    a = _rand((8, 3))
    x = so.array(a)
    x.attach_grad()
    with ag.record():
        loss = so.sum(_Doubler()(x))
    loss.backward()
    assert _Doubler.seen == [(True, False)]
    np.testing.assert_array_equal(x.grad.asnumpy(), np.full_like(a, 2.0))


def test_custom_op_backward_reads_a_sums_gradient_as_an_ordinary_array(product_op):
    a, b = _rand((5, 4)), _rand((5, 4), seed=4)
    x, y = so.array(a), so.array(b)
    x.attach_grad()
    y.attach_grad()
    with ag.record():
        loss = so.sum(so.Custom(x, y, op_type=product_op), axis=1)
    loss.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), b)
    np.testing.assert_allclose(y.grad.asnumpy(), a)


def test_second_order_through_an_axis_sum_keeps_the_graph():
    a = _rand((4, 6))
    x = so.array(a)
    x.attach_grad()
    with ag.record():
        s = so.sum(x * x, axis=1, keepdims=True)  # d/dx sum(s * x) = 2x * sum(x) + s
        g = ag.grad(so.sum(s * x), x, create_graph=True)
        z = so.sum(g)
    rows = a.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(g.asnumpy(), 2 * a * rows + (a * a).sum(axis=1, keepdims=True))
    z.backward()  # sum(g) = ncols * s + 2 * rows**2, per row
    np.testing.assert_allclose(x.grad.asnumpy(), 2 * a * a.shape[1] + 4 * rows)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
@pytest.mark.parametrize("swap", [False, True])
def test_scaled_mul_with_a_broadcast_operand(dtype, swap):
    b = (_rand((7, 5), seed=6) * 10).astype(dtype)
    from sparse_ops.ndarray import NDArray

    dense = so.array(b)
    threes = NDArray(np.broadcast_to(np.asarray(3, dtype), (7, 5)), dense.device)  # as a sum's gradient
    assert threes._data.strides == (0, 0)
    pair = [dense, threes] if swap else [threes, dense]
    scalar = 2.0 if dtype == "int64" else -1.5
    out = so.invoke("_scaled_mul", pair, {"scalar": scalar})
    assert out.dtype == np.dtype(dtype) and out._data.flags.c_contiguous
    np.testing.assert_allclose(out.asnumpy(), (scalar * 3 * b).astype(dtype), rtol=1e-6)


# ---- Embedding's gather ----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype,width", [("float16", 1), ("float16", 3), ("float16", 6), ("float32", 5),
                                         ("float32", 64), ("float64", 7), ("int32", 3), ("int64", 2),
                                         ("float32", 0)])
def test_embedding_gathers_rows_of_any_byte_width(dtype, width):
    w = (np.arange(20 * width).reshape(20, width) % 251).astype(dtype)
    ids = np.array([3, 0, 19, 3, 7])
    e = so.Embedding(so.array(ids), so.array(w), input_dim=20, output_dim=width, dtype=dtype)
    assert e.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(e.asnumpy(), w[ids])


# ---- the ufunc call -----------------------------------------------------------------------------------------
def test_ufunc_call_skips_the_kernel_and_gives_row_major_outputs():
    x, y = so.array(_rand((3, 4))), so.array(_rand((3, 4), seed=1))
    plan = plan_for(get_op("elemwise_mul"), get_op("elemwise_mul")._default_instance, (x, y))
    assert plan.call.__qualname__.startswith("_host_ufunc_call")
    f = np.asfortranarray(_rand((3, 4), seed=3))
    out = so.elemwise_mul(so.array(f), so.array(f))
    assert out._data.flags.c_contiguous
    np.testing.assert_allclose(out.asnumpy(), f * f)


def test_ufunc_call_is_not_taken_where_numpy_would_disagree_with_the_plan():
    # int32 * float32: NumPy gives float64, and so does the op's rule: the ufunc path may run
    a, b = so.array(np.arange(12, dtype=np.int32).reshape(3, 4)), so.array(_rand((3, 4), "float32"))
    out = so.elemwise_mul(a, b)
    assert out.dtype == np.result_type(np.int32, np.float32)
    np.testing.assert_allclose(out.asnumpy(), a.asnumpy() * b.asnumpy())
    # 0-d operands: a ufunc returns a scalar there, so the kernel runs
    s = so.broadcast_mul(so.array(np.float32(2)), so.array(np.float32(3)))
    assert s.shape == () and float(s.asnumpy()) == 6.0


def test_ufunc_call_with_out_and_req_add_takes_the_general_path():
    x = so.array(np.full((2, 2), 3.0))
    out = so.array(np.ones((2, 2)))
    so.elemwise_mul(x, x, out=out, req="add")
    np.testing.assert_allclose(out.asnumpy(), 10.0)


def test_ufunc_call_errors_name_the_op_and_autograd_still_works():
    x, y = so.array(_rand((2, 3))), so.array(_rand((2, 3)))
    with np.errstate(all="raise"):
        with pytest.raises(so.OperatorError, match="elemwise_div"):
            so.elemwise_div(x, so.array(np.zeros((2, 3))))
    x.attach_grad()
    with ag.record():
        loss = so.sum(x * y)
    loss.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), y.asnumpy())


# ---- MXNet-form custom ops -------------------------------------------------------------------------------
class _ProductProp(so.CustomOpProp):
    def list_arguments(self):
        return ["x", "y"]

    def infer_storage_type(self, in_stype):
        return in_stype, ["default"], []

    def infer_storage_type_backward(self, ograd_stype, in_stype, out_stype, igrad_stype, aux_stype):
        return ograd_stype, in_stype, out_stype, ["default"] * len(in_stype), aux_stype

    def create_operator(self, ctx, shapes, dtypes):
        return _Product()


class _Product(so.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], in_data[0] * in_data[1])  # operators inside the kernel

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        self.assign(in_grad[0], req[0], out_grad[0] * in_data[1])
        self.assign(in_grad[1], req[1], out_grad[0] * in_data[0])


@pytest.fixture(scope="module")
def product_op():
    so.register("_test_fast_product", replace=True)(_ProductProp)
    yield "_test_fast_product"
    so.registry.unregister("_test_fast_product")


def test_custom_forward_records_one_node_not_its_inner_operators(product_op):
    from sparse_ops.autograd import _topological

    x, y = so.array(_rand((3, 3))), so.array(_rand((3, 3), seed=1))
    x.attach_grad()
    with ag.record():
        z = so.Custom(x, y, op_type=product_op)
    nodes = _topological([z._ag])
    assert len(nodes) == 1 and product_op in nodes[0].label
    z.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), y.asnumpy())


def test_custom_backward_repeated_with_other_storage_types(product_op):
    for stype in ("default", "row_sparse", "default"):
        a = _rand((4, 3))
        a[2] = 0
        x = so.array(a).tostype(stype)
        y = so.array(_rand((4, 3), seed=5))
        x.attach_grad()
        with ag.record():
            z = so.Custom(x, y, op_type=product_op)
        z.backward()
        np.testing.assert_allclose(x.grad.asnumpy(), y.asnumpy())
