"""Dense built-ins lowered to torch's own operations in eager bridged calls
(``sparse_ops.torch.lowering``): each lowered op against the op's kernels on the op's own
samples (values, dtypes, shapes, gradients), the op's rules still deciding what is refused,
and every call the lowering must leave to the kernels (sparse inputs, ``sparse_grad``,
plugins under a built-in's name, traced and transformed calls)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import sparse_ops as so  # noqa: E402
import sparse_ops.torch as st  # noqa: E402
from conftest import kinks_like, special_like  # noqa: E402
from sparse_ops.torch import BridgeError, bridge, lowering  # noqa: E402


def _dense_samples(name):
    """The op's own samples whose inputs are all dense, as (tensors, params)."""
    out = []
    for sample in so.get_op(name).cls.samples():
        inputs, params = (sample, {}) if isinstance(sample, list) else sample
        if all(x.stype == "default" for x in inputs):
            out.append(([torch.from_numpy(np.ascontiguousarray(x.asnumpy())) for x in inputs], dict(params)))
    return out


def _kernels(fn, *args, **kwargs):
    """``fn`` with the lowering off: the op's kernels serve every call."""
    lowering.disabled(True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(*args, **kwargs)
    finally:
        lowering.disabled(False)


def _was_lowered(name):
    return any(v is not None for v in bridge.lookup(name)._signatures.values())


@pytest.mark.parametrize("name", lowering.names())
def test_each_lowered_op_matches_the_ops_kernels_on_its_samples(name):
    samples = _dense_samples(name)
    assert samples, f"{name}: no all-dense sample to check the lowering on"
    f = st.op(name)
    f._signatures.clear()
    for inputs, params in samples:
        got, want = f(*inputs, **params), _kernels(f, *inputs, **params)
        assert got.dtype == want.dtype and got.shape == want.shape, (name, params, got.dtype, want.dtype)
        tol = 2e-3 if want.dtype == torch.float16 else 1e-6  # float32 transcendentals: torch's own rounding
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=tol, atol=tol * 1e-3, err_msg=f"{name} {params}")
    assert _was_lowered(name), f"{name}: no sample took the lowering"


@pytest.mark.parametrize("name", lowering.names())
def test_each_lowered_op_matches_the_ops_kernels_at_special_values(name):
    """The op's samples refilled with NaN, infinities, signed zeros, float32 overflow and
    integer extremes (``conftest.special_like``), and scalar parameters of 0 and 0.5: the
    lowering gives the kernels' values (NaN where they give NaN), or the same error."""
    f = st.op(name)
    for inputs, params in _dense_samples(name):
        variants = [params] + ([{**params, "scalar": s} for s in (0.0, 0.5)] if "scalar" in params else [])
        as_ints = [x.to(torch.int32) if x.dtype.is_floating_point else x for x in inputs]  # integer division by 0 ...
        for shift, base in [(0, inputs), (5, inputs), (11, inputs), (0, as_ints), (4, as_ints)]:
            xs = [torch.from_numpy(special_like(x.numpy(), shift + 3 * i)) for i, x in enumerate(base)]
            for p in variants:
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        got = f(*xs, **p)
                except (BridgeError, RuntimeError) as exc:
                    with pytest.raises(type(exc)):
                        _kernels(f, *xs, **p)
                    continue
                want = _kernels(f, *xs, **p)
                assert got.dtype == want.dtype, (name, p)
                np.testing.assert_allclose(got.double().numpy(), want.double().numpy(), rtol=1e-6, atol=0,
                                           equal_nan=True, err_msg=f"{name} {p} {[x.tolist() for x in xs]}")


@pytest.mark.parametrize("name", lowering.names())
def test_each_lowered_gradient_equals_the_ops_gradient_rule(name):
    """torch's derivative of the lowering against the op's own rule (the kernels' backward),
    in float64 so that the two agree to rounding."""
    f = st.op(name)
    if not so.get_op(name).differentiable:
        return
    for inputs, params in _dense_samples(name):
        if not all(x.dtype.is_floating_point for x in inputs) or \
                not _kernels(f, *inputs, **params).dtype.is_floating_point:
            continue
        xs = [x.to(torch.float64) for x in inputs]
        w = torch.from_numpy(np.random.default_rng(7).standard_normal(tuple(_kernels(f, *xs, **params).shape)))

        def grads():
            leaves = [x.clone().requires_grad_(True) for x in xs]
            (f(*leaves, **params) * w).sum().backward()  # comparisons: the kernels' zero gradients
            return [x.grad for x in leaves]

        for a, b in zip(grads(), _kernels(grads)):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-8, atol=1e-12,  # special functions: ~1e-9
                                       err_msg=f"{name} {params}")


@pytest.mark.parametrize("name", lowering.names())
def test_each_lowered_gradient_takes_the_rules_side_at_kinks(name):
    """The op's samples refilled with kinks and ties (0, -0, equal values, halves:
    ``conftest.kinks_like``), where torch's derivative may pick another side than the op's
    rule: the lowered gradient equals the kernels' wherever both are finite."""
    f = st.op(name)
    if not so.get_op(name).differentiable:
        return
    for inputs, params in _dense_samples(name):
        if not all(x.dtype.is_floating_point for x in inputs):
            continue
        for k in (0, 3):
            xs = [torch.from_numpy(kinks_like(x.numpy(), 4 * i + k)).to(torch.float64) for i, x in enumerate(inputs)]
            if not _kernels(f, *xs, **params).dtype.is_floating_point:
                break

            def grads():
                leaves = [x.clone().requires_grad_(True) for x in xs]
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    f(*leaves, **params).sum().backward()
                return [x.grad for x in leaves]

            for a, b in zip(grads(), _kernels(grads)):
                a, b = a.numpy(), b.numpy()
                both = np.isfinite(a) & np.isfinite(b)
                np.testing.assert_allclose(a[both], b[both], rtol=1e-8, atol=1e-12,
                                           err_msg=f"{name} {params} {[x.tolist() for x in xs]}")


def test_float16_and_integer_inputs_follow_the_ops_dtype_rules():
    x32 = torch.tensor([[1.5, -2.25, 3.0], [0.5, 4.0, -1.0]])
    i32 = torch.tensor([[3, -7, 2], [5, 0, 9]], dtype=torch.int32)
    cases = [("exp", [x32], {}), ("_div_scalar", [i32], {"scalar": 2.0}), ("_power_scalar", [i32], {"scalar": 2.0}),
             ("elemwise_add", [i32, x32], {}), ("sigmoid", [x32.half()], {}), ("sqrt", [i32.abs()], {}),
             ("broadcast_greater", [x32, torch.tensor([1.0, 0.0, 2.0])], {}), ("elemwise_div", [i32, i32 + 10], {}),
             ("abs", [i32], {}), ("_mul_scalar", [i32], {"scalar": 2.7}), ("relu", [i32], {}),
             ("add_n", [i32, i32 * 2, i32], {}), ("clip", [i32], {"a_min": -2.5, "a_max": 4.5})]
    for name, inputs, params in cases:
        f = st.op(name)
        got, want = f(*inputs, **params), _kernels(f, *inputs, **params)
        assert got.dtype == want.dtype, (name, got.dtype, want.dtype)
        assert _was_lowered(name), name
        np.testing.assert_allclose(got.float().numpy(), want.float().numpy(),
                                   rtol=2e-3 if want.dtype == torch.float16 else 1e-6, err_msg=name)


def test_what_the_ops_rules_refuse_gets_the_ops_error_not_torchs_broadcast():
    a, b = torch.ones(2, 3), torch.ones(1, 3)
    with pytest.raises(BridgeError, match="elemwise_add") as lowered:
        st.ops.elemwise_add(a, b)  # torch.add would broadcast these
    with pytest.raises(BridgeError) as kernels:
        _kernels(st.ops.elemwise_add, a, b)
    assert str(lowered.value) == str(kernels.value)
    torch.testing.assert_close(st.ops.broadcast_add(a, b), a + b)  # the broadcasting op broadcasts
    with pytest.raises(BridgeError, match="int8"):
        st.ops.relu(torch.ones(3, dtype=torch.int8))  # a dtype the library does not hold: the bridge's words
    y = st.ops.relu(torch.tensor([-1.0, 2.0]))  # and the op still works after the refusals
    torch.testing.assert_close(y, torch.tensor([0.0, 2.0]))


def test_reductions_and_products_follow_the_ops_shape_rules_at_every_shape():
    x = torch.arange(24, dtype=torch.float64).reshape(2, 3, 4)
    cases = [("sum", [x], {"axis": (0, 2), "keepdims": True}), ("sum", [x], {"axis": 1, "exclude": True}),
             ("sum", [x], {"axis": ()}), ("mean", [x.to(torch.int32)], {"axis": 2}),
             ("mean", [torch.ones(0, 3, dtype=torch.int64)], {"axis": 0}), ("square_sum", [x.half()], {}),
             ("softmin", [x], {"axis": 1, "temperature": 0.5}), ("log_softmax", [x.float()], {"axis": 0}),
             ("dot", [x, torch.ones(4, 5, dtype=torch.float64)], {}),
             ("dot", [x, torch.ones(5, 2, dtype=torch.float64)], {"transpose_a": True, "transpose_b": True}),
             ("dot", [torch.ones(3, dtype=torch.int32), torch.ones(3, dtype=torch.float32)], {})]
    for name, inputs, params in cases:
        f = st.op(name)
        f._signatures.clear()
        got, want = f(*inputs, **params), _kernels(f, *inputs, **params)
        assert _was_lowered(name), (name, params)
        assert got.dtype == want.dtype and got.shape == want.shape, (name, params, got.shape, want.shape)
        np.testing.assert_allclose(got.double().numpy(), want.double().numpy(), rtol=1e-3 if want.dtype == torch.float16
                                   else 1e-6, err_msg=f"{name} {params}")
    for name, inputs, params in [("sum", [x], {"axis": 3}), ("dot", [x, torch.ones(5, 2)], {}),
                                 ("softmax", [x], {"axis": 3})]:
        with pytest.raises(BridgeError) as lowered:
            st.op(name)(*inputs, **params)
        with pytest.raises(BridgeError) as kernels:
            _kernels(st.op(name), *inputs, **params)
        assert str(lowered.value) == str(kernels.value), name
    y = st.ops.sum(torch.ones(5, 2), axis=0)  # a new shape: its own signature
    torch.testing.assert_close(y, torch.full((2,), 5.0))


def test_sparse_inputs_and_sparse_grad_leaves_keep_the_kernels():
    a = torch.tensor([[0.0, -2.0], [3.0, 0.0]]).to_sparse_csr()
    y = st.ops.relu(a)  # relu keeps csr: the op's sparse kernel, not torch.relu
    assert y.layout == torch.sparse_csr
    torch.testing.assert_close(y.to_dense(), torch.relu(a.to_dense()))
    w = st.sparse_grad(torch.nn.Parameter(torch.tensor([[1.0, 2.0], [0.0, 0.0], [3.0, 4.0]])))
    st.ops.elemwise_mul(w, torch.tensor([[1.0, 1.0], [0.0, 0.0], [2.0, 2.0]])).sum().backward()
    assert w.grad.layout == torch.sparse_coo  # the mark is honoured: rows 0 and 2 stored
    torch.testing.assert_close(w.grad.to_dense(), torch.tensor([[1.0, 1.0], [0.0, 0.0], [2.0, 2.0]]))
    assert w.grad.coalesce().indices().tolist() == [[0, 2]]


def test_a_class_registered_under_a_builtin_name_keeps_its_kernel(isolated):
    @so.register("relu", replace=True)
    class PlusOne(so.Op):
        @so.kernel()
        def dense(self, ctx, x, y):
            np.add(x, 1, out=y)

    torch.testing.assert_close(st.ops.relu(torch.tensor([-1.0, 2.0])), torch.tensor([0.0, 3.0]))
    assert st.explain("relu", torch.ones(2))["eager"].startswith("the op's kernels")


def test_results_of_ops_declared_not_differentiable_need_no_gradient():
    x = torch.tensor([1.0, -2.0], requires_grad=True)
    for name in ("BlockGrad", "zeros_like", "ones_like"):
        y = st.op(name)(x)
        assert not y.requires_grad, name
        assert y.data_ptr() != x.data_ptr(), name  # results never alias their input
    torch.testing.assert_close(st.ops.BlockGrad(x), x.detach())


def test_gradients_flow_to_any_order_and_relu_follows_torch_at_nan():
    x = torch.tensor([0.3, -0.7, 1.2], dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(st.ops.sigmoid(x).sum(), x, create_graph=True)
    (gg,) = torch.autograd.grad(g.sum(), x, create_graph=True)
    (ggg,) = torch.autograd.grad(gg.sum(), x)  # third order: torch's own derivative
    s = torch.sigmoid(x.detach())
    torch.testing.assert_close(ggg, s * (1 - s) * (1 - 6 * s + 6 * s * s))
    z = torch.tensor([float("nan"), 0.0, 2.0], requires_grad=True)
    st.ops.relu(z).sum().backward()
    assert z.grad.tolist() == [1.0, 0.0, 1.0]  # torch.relu's convention (the kernels' rule gives NaN at NaN)


def test_torch_func_transforms_take_lowered_ops_forward_mode_and_vmap_included():
    x = torch.randn(3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    w = torch.randn(4, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    _, tangent = torch.func.jvp(lambda v: st.ops.sum(st.ops.tanh(v)), (x,), (torch.ones_like(x),))
    torch.testing.assert_close(tangent, (1 - torch.tanh(x) ** 2).sum())
    jac = torch.func.jacfwd(lambda v: st.ops.elemwise_mul(v, v))(x[0])
    torch.testing.assert_close(jac, torch.diag(2 * x[0]))
    hess = torch.func.hessian(lambda v: st.ops.sum(st.ops.exp(v)))(x[0])
    torch.testing.assert_close(hess, torch.diag(torch.exp(x[0])))
    torch.testing.assert_close(torch.func.vmap(lambda r: st.ops.dot(r, w))(x), x @ w)
    per_row = torch.func.vmap(torch.func.grad(lambda r: st.ops.sum(st.ops.softmax(r) * r)))(x)
    want = torch.func.vmap(torch.func.grad(lambda r: (torch.softmax(r, 0) * r).sum()))(x)
    torch.testing.assert_close(per_row, want)
    info = st.explain("tanh", x)
    assert info["torch.func"].startswith("grad, vjp, jacrev, jvp, jacfwd") and "batching rules" in info["vmap"]
    # an op the lowering does not serve keeps the reverse-mode-only rule, and says so
    with pytest.raises(BridgeError, match="hard_sigmoid.*forward-mode derivatives"):
        torch.func.jvp(st.ops.hard_sigmoid, (x,), (torch.ones_like(x),))
    assert st.explain("hard_sigmoid", x)["torch.func"].startswith("grad, vjp, jacrev: ")


def test_forward_ad_dual_tensors_get_lowered_tangents_or_a_refusal_never_a_dropped_tangent():
    """torch.autograd.forward_ad: a lowered op carries the tangent (torch's own operations);
    a call the kernels serve (a csr input, a plugin op, lowering off) would drop it, so it is
    refused as torch.func.jvp is, and the dual level stays usable after."""
    import scipy.sparse as sp

    import torch.autograd.forward_ad as fwad

    x, t = torch.randn(5, 3, dtype=torch.float64), torch.randn(5, 3, dtype=torch.float64)
    a = st.to_torch(so.csr_matrix(sp.random(4, 5, density=0.5, format="csr", random_state=0)))
    with fwad.dual_level():
        d = fwad.make_dual(x, t)
        tangent = fwad.unpack_dual(st.ops.tanh(d)).tangent
        torch.testing.assert_close(tangent, (1 - torch.tanh(x) ** 2) * t)
        with pytest.raises(BridgeError, match=r"ops\.dot: forward-mode derivatives \(torch\.autograd\.forward_ad"):
            st.ops.dot(a, d)
        with lowering.disabled(), pytest.raises(BridgeError, match="sigmoid: forward-mode derivatives"):
            st.ops.sigmoid(d)
        torch.testing.assert_close(fwad.unpack_dual(st.ops.exp(d)).tangent, torch.exp(x) * t)
    torch.testing.assert_close(st.ops.dot(a, x), a.to_dense() @ x)  # plain tensors: no tangents, no refusal


def test_comparisons_are_lowered_unless_an_input_needs_a_gradient():
    x, y = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([2.0, 2.0, 2.0])
    f = st.ops.broadcast_greater
    f._signatures.clear()
    torch.testing.assert_close(f(x, y), torch.tensor([0.0, 0.0, 1.0]))
    assert _was_lowered("broadcast_greater")
    xg = x.clone().requires_grad_(True)
    out = f(xg, y)  # the op's rule: a result with a zero gradient, as the kernels give it
    assert out.requires_grad
    (out * 3).sum().backward()
    torch.testing.assert_close(xg.grad, torch.zeros(3))


def test_the_signature_cache_is_bounded_and_explain_says_what_runs():
    x = torch.linspace(-1, 1, 6)
    f = st.ops._plus_scalar
    for i in range(bridge.MAX_DENSE_CALLS * 2):
        torch.testing.assert_close(f(x, scalar=0.5 + i), x + (0.5 + i))
    assert len(f._signatures) <= bridge.MAX_DENSE_CALLS
    info = st.explain("relu", torch.ones(3))
    assert "torch's own operations" in info["eager"]
    assert st.explain("relu", torch.ones(2, 2).to_sparse_csr())["eager"].startswith("the op's kernels")
    lowering.disabled(True)
    try:
        assert st.explain("relu", torch.ones(3))["eager"].startswith("the op's kernels")
    finally:
        lowering.disabled(False)


def test_the_switch_is_each_threads_own():
    """Two threads in overlapping ``with lowering.disabled()`` blocks: each sees its own
    switch (the blocks ended in another order than they began left lowering off for good)."""
    import threading

    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def first():
        with lowering.disabled():
            first_in.set()
            second_in.wait(10)
            seen["first inside"] = lowering.disabled.__self__.off
        first_out.set()

    def second():
        first_in.wait(10)
        with lowering.disabled():
            second_in.set()
            first_out.wait(10)
            seen["second inside"] = lowering.disabled.__self__.off
        seen["second after"] = lowering.disabled.__self__.off

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    [t.start() for t in threads]
    [t.join(30) for t in threads]
    assert seen == {"first inside": True, "second inside": True, "second after": False}
    assert not lowering.disabled.__self__.off
    x = torch.randn(3)
    st.ops.relu(x)
    assert _was_lowered("relu")


def test_a_lowered_cast_to_the_same_dtype_is_a_new_tensor_as_the_kernels_give():
    x = torch.ones(3)
    y = st.ops.cast(x, dtype="float32")
    assert _was_lowered("cast") and y.data_ptr() != x.data_ptr()
    y += 1  # the input stays as it was
    assert torch.equal(x, torch.ones(3))
