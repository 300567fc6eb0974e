"""Derivatives that do not exist are refused, naming the op, on every face, never read as 0.

Three kinds of gradient rule cannot be differentiated again: an MXNet-form CustomOp's
backward (imperative code), a ``gradient()`` whose result comes from an op declared
``differentiable = False``, and backward kernels (``@so.backward_kernel``). Second
derivatives and forward mode (derived from the gradient) through them are refused when
taken; first derivatives, with or without ``create_graph``, still work."""
from __future__ import annotations

import numpy as np
import pytest

import sparse_ops as so
from sparse_ops import autograd as ag

X = np.array([[1.0, -2.0], [0.5, 3.0]])


class SquareProp(so.CustomOpProp):
    def __init__(self):
        super().__init__(need_top_grad=True)

    def create_operator(self, ctx, shapes, dtypes):
        return Square()


class Square(so.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], in_data[0] * in_data[0])

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        self.assign(in_grad[0], req[0], out_grad[0] * (in_data[0] * 2))


class RowSumGrad(so.Op):
    arguments = ("g", "x")
    differentiable = False

    def infer_shape(self, g, x):
        return [x]

    def infer_type(self, g, x):
        return [x]

    @so.kernel(device="cpu")
    def dense(self, ctx, g, x, y):
        y[...] = g[:, None]


class RowSum(so.Op):
    arguments = ("x",)

    def infer_shape(self, x):
        return [x[:1]]

    @so.kernel(device="cpu")
    def dense(self, ctx, x, y):
        y[...] = x.sum(1)

    def gradient(self, out_grads, inputs, outputs):
        return [so.invoke("nd_rowsum_grad", [out_grads[0], inputs[0]])]


CUSTOM = ("nd_square", r"cannot differentiate the gradient of operator 'nd_square': it comes from the CustomOp's "
                       r"backward, imperative code")
CONSTANT = ("nd_rowsum", r"the output of operator 'nd_rowsum_grad': it is declared differentiable = False")


@pytest.fixture
def ops(isolated):
    so.register("nd_square")(SquareProp)
    so.register("nd_rowsum_grad")(RowSumGrad)
    so.register("nd_rowsum")(RowSum)


@pytest.mark.parametrize("op, message", [CUSTOM, CONSTANT], ids=["custom_op", "constant_rule"])
def test_native_second_derivative_is_refused_and_first_derivatives_work(ops, op, message):
    x = so.array(X)
    x.attach_grad()
    with ag.record():
        loss = so.sum(so.square(so.invoke(op, [x])))
        (g,) = ag.grad(loss, [x], create_graph=True)  # first order under create_graph: fine
        # an imperative gradient joins the graph refusing; a constant one is a constant (declared so)
        again = so.sum(g * x) if op == "nd_square" else so.sum(g)
    want = 4 * X ** 3 if op == "nd_square" else np.repeat(2 * X.sum(1, keepdims=True), 2, axis=1)
    np.testing.assert_allclose(g.asnumpy(), want)
    with pytest.raises(so.OperatorError, match=message):
        again.backward()
    with ag.record():
        y = so.sum(so.invoke(op, [x]))
    y.backward()  # autograd still works
    assert x.grad.shape == X.shape


@pytest.mark.parametrize("op, message", [CUSTOM, CONSTANT], ids=["custom_op", "constant_rule"])
def test_torch_second_derivative_is_refused_not_zero(ops, op, message):
    torch = pytest.importorskip("torch")
    import sparse_ops.torch as st

    t = torch.tensor(X, requires_grad=True)
    (g,) = torch.autograd.grad(getattr(st.ops, op)(t).square().sum(), t, create_graph=True)
    with pytest.raises(Exception, match=message):
        torch.autograd.grad(g.sum(), t)


@pytest.mark.parametrize("op, message", [CUSTOM, CONSTANT], ids=["custom_op", "constant_rule"])
def test_jax_forward_mode_and_hessian_are_refused_not_zero(ops, op, message):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    import sparse_ops.jax as soj

    f = getattr(soj.ops, op)
    x = jnp.asarray(X)
    assert jax.grad(lambda v: jnp.sum(f(v) ** 2))(x).shape == X.shape  # reverse mode works
    with pytest.raises(Exception, match=message):
        jax.block_until_ready(jax.jvp(f, (x,), (jnp.ones_like(x),)))
    with pytest.raises(Exception, match=message):
        jax.block_until_ready(jax.hessian(lambda v: jnp.sum(f(v) ** 2))(x))


def test_forward_mode_of_backward_kernels_names_the_op(isolated):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    import sparse_ops.jax as soj
    from pathlib import Path

    import sys

    so.library.load(str(Path(__file__).with_name("rowclip_plugin.py")))
    try:
        x = jnp.asarray(np.random.default_rng(0).standard_normal((4, 3)))
        assert jax.grad(lambda v: jnp.sum(soj.ops.rc_row_clip(v, c=0.5)))(x).shape == (4, 3)
        with pytest.raises(Exception, match=r"operator 'rc_row_clip' \(plugin \S+\)'s gradient is its backward "
                                            r"kernels \(_backward_rc_row_clip\), which have no derivative"):
            jax.block_until_ready(jax.jvp(lambda v: soj.ops.rc_row_clip(v, c=0.5), (x,), (jnp.ones_like(x),)))
    finally:
        sys.modules.pop("rowclip_plugin", None)  # as tests/test_backward_rules.py's fixture: loadable again


def test_an_autograd_function_whose_backward_leaves_the_graph_is_refused_second_order():
    """A Function's backward computed with NumPy has no derivative: second order through it
    is refused naming it (it dropped its part silently); one made of operators has one."""
    class Cube(ag.Function):
        def forward(self, x):
            self.x = x
            return so.array(x.asnumpy() ** 3)

        def backward(self, dy):
            return so.array(dy.asnumpy() * 3 * self.x.asnumpy() ** 2)

    class CubeOps(Cube):
        def backward(self, dy):
            return dy * so.square(self.x) * 3

    for fn, second in ((Cube, None), (CubeOps, 6 * X)):
        x = so.array(X)
        x.attach_grad()
        with ag.record():
            (g,) = ag.grad(so.sum(fn()(x)), [x], create_graph=True)
            z = so.sum(g) + so.sum(x)
        np.testing.assert_allclose(g.asnumpy(), 3 * X ** 2)
        if second is None:
            with pytest.raises(so.OperatorError, match="cannot differentiate the gradient of Cube: its backward "
                                                       "computed it outside the graph"):
                z.backward()
        else:
            z.backward()
            np.testing.assert_allclose(x.grad.asnumpy(), second + 1)
