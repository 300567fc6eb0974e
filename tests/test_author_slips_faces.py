"""An author's slips in an op's rules and gradient, met alike on every face: the shape, type
and storage rules run through one set of checks (``dispatch.infer_shapes``,
``infer_dtypes``, ``infer_stypes``) and gradients through one (``gradients.call_gradient``),
so native calls, torch (eager and compiled) and JAX (eager, jit, grad) refuse the same
mistakes with a message naming the op, and keep working afterwards."""
import numpy as np
import pytest

import sparse_ops as so

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402

import sparse_ops.jax as soj  # noqa: E402
import sparse_ops.torch as st  # noqa: E402


def _op(name, *, shape=None, dtype=None, stype=None, gradient=None):
    """Register op ``name``: y = 2 x, with the given rule answers (a callable raising or
    returning anything) in place of the right ones."""
    attrs = {"arguments": ("x",)}
    if shape is not None:
        attrs["infer_shape"] = lambda self, x: shape(x)
    if dtype is not None:
        attrs["infer_type"] = lambda self, x: dtype(x)
    if stype is not None:
        attrs["infer_storage_type"] = lambda self, x: stype(x)

    def dense(self, ctx, x, out):
        out[...] = 2 * x
    attrs["dense"] = so.kernel(device="cpu")(dense)
    attrs["gradient"] = gradient or (lambda self, og, ins, outs: [so.ops._mul_scalar(og[0], scalar=2.0)])
    so.register(name)(type(name, (so.Op,), attrs))


def _faces(name):
    """Each face's call of op ``name`` on a (2, 3) float32 array."""
    x = np.ones((2, 3), np.float32)
    return {
        "native": lambda: getattr(so.ops, name)(so.array(x)),
        "torch": lambda: getattr(st.ops, name)(torch.from_numpy(x)),
        "torch.compile": lambda: torch.compile(lambda t: getattr(st.ops, name)(t), fullgraph=True,
                                               backend="eager")(torch.from_numpy(x)),
        "jax": lambda: jax.block_until_ready(getattr(soj.ops, name)(jnp.asarray(x))),
        "jax.jit": lambda: jax.block_until_ready(jax.jit(getattr(soj.ops, name))(jnp.asarray(x))),
    }


SLIPS = {
    "an unknown storage type": (dict(stype=lambda x: ["junk"]), "unknown storage type 'junk'"),
    "no dtype": (dict(dtype=lambda x: ["notadtype"]), "infer_type gave output 0 a dtype the library does not hold"),
    "a text shape": (dict(shape=lambda x: ["abc"]), "infer_shape gave output 0 the shape 'abc'"),
    "a negative shape": (dict(shape=lambda x: [(-1, 3)]), "infer_shape gave output 0 the shape \\(-1, 3\\)"),
    "a bare shape": (dict(shape=lambda x: tuple(x)), "infer_shape must return a list with one shape per output, "
                                                     "got \\(2, 3\\), a single shape"),
    "a KeyError in a rule": (dict(shape=lambda x: {}["rows"]), "infer_shape raised KeyError"),
    "a RuntimeError in a rule": (dict(dtype=lambda x: (_ for _ in ()).throw(RuntimeError("rule bug"))),
                                 "infer_type raised RuntimeError: rule bug"),
}


@pytest.mark.parametrize("slip", list(SLIPS))
def test_a_bad_rule_is_refused_naming_the_op_on_every_face(isolated, slip):
    torch._dynamo.reset()
    rules, message = SLIPS[slip]
    _op("_slip_op", **rules)
    for face, call in _faces("_slip_op").items():
        with pytest.raises(Exception) as info:
            call()
        text = str(info.value)
        assert "_slip_op" in text, (face, text)
        assert __import__("re").search(message, text), (face, text)
    np.testing.assert_array_equal(np.asarray(soj.ops.exp(jnp.zeros(2))), [1, 1])  # the faces still work
    np.testing.assert_array_equal(st.ops.exp(torch.zeros(2)).numpy(), [1, 1])


def test_a_gradient_of_the_wrong_shape_is_refused_on_every_face(isolated):
    """A rule returning a (3,) gradient for a (2, 3) input: JAX would broadcast it into a
    wrong gradient without a word; every face refuses it, naming the op."""
    _op("_slip_grad", gradient=lambda self, og, ins, outs: [so.sum(og[0], axis=0)])
    w = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    x = so.array(np.ones((2, 3), np.float32))
    x.attach_grad()
    with so.autograd.record():
        loss = so.sum(so.ops._slip_grad(x) * so.array(w))
    with pytest.raises(so.OperatorError, match="backward of operator '_slip_grad' gave input 0 .* shape \\(3,\\)"):
        loss.backward()
    t = torch.ones(2, 3, requires_grad=True)
    with pytest.raises(Exception, match="_slip_grad"):
        (st.ops._slip_grad(t) * torch.from_numpy(w)).sum().backward()
    with pytest.raises(Exception, match="backward of operator '_slip_grad' gave input 0"):
        jax.block_until_ready(jax.grad(lambda v: jnp.sum(soj.ops._slip_grad(v) * w))(jnp.ones((2, 3))))
    g = jax.grad(lambda v: jnp.sum(soj.ops.exp(v)))(jnp.zeros(3))  # gradients still work
    np.testing.assert_allclose(np.asarray(g), 1)


def test_a_kernel_allocating_sparse_parts_for_a_dense_output_is_told_where_the_storage_type_comes_from(isolated):
    """A backward kernel calling ``ctx.alloc_row_sparse`` on a gradient its
    ``backward_storage_type`` declared dense: the refusal names the op and the rule, not an
    attribute missing inside the container; the process keeps working."""
    class Slip(so.Op):
        arguments = ("a",)
        backward_needs_inputs = ("a",)

        @so.kernel(device="cpu")
        def dense(self, ctx, a, y):
            np.multiply(a, 3, out=y)

        def backward_storage_type(self, og, a):
            return ["default"]

        @so.backward_kernel(device="cpu", stypes=("default", "default"))
        def backward(self, ctx, g, a, da):
            values, rows = ctx.alloc_row_sparse(da, a.shape[0])

    so.register("_slip_alloc")(Slip)
    a = so.array(np.ones((3, 2)))
    a.attach_grad()
    with so.autograd.record():
        loss = so.sum(so.ops._slip_alloc(a))
    with pytest.raises(so.OperatorError, match=r"operator '_backward__slip_alloc': ctx.alloc_row_sparse needs a "
                                               r"row_sparse output, got a 'default' output of shape \(3, 2\) .*"
                                               r"backward_storage_type"):
        loss.backward()
    x = so.array(np.ones(3))
    x.attach_grad()
    with so.autograd.record():
        y = so.sum(so.exp(x))
    y.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), np.e)
