"""The bridge's shortest per-call paths (issue 38 item 4): a repeated all-dense host call runs
its plan's array form (``Plan.arrays``) on NumPy views, recorded by
``library.EagerAutograd`` when a gradient is needed; an eager host call with sparse
inputs runs the registered operator's steps without torch's dispatcher
(``library.host_call``, ``HostAutograd``). These tests check that those paths are taken and
that they give what torch gives (values, gradients), refuse what the general path refuses
with the same words, and leave everything else (sparse tensors, other dtypes and layouts,
several outputs, the training flag, sparse gradients, second order, transforms) to the
paths that serve it. Nothing here is timed: ``benchmarks/bench_torch.py`` measures.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import sparse_ops as so  # noqa: E402
import sparse_ops.torch as st  # noqa: E402
from sparse_ops import dispatch, registry  # noqa: E402
from sparse_ops.ndarray import NDArray  # noqa: E402
from sparse_ops.torch import bridge, library  # noqa: E402
from sparse_ops.torch.library import BridgeError  # noqa: E402


# dense built-ins run their kernels here (conftest's ``kernels``): their torch lowering
# (tests/test_torch_lowering.py) would otherwise serve these calls before the paths checked
pytestmark = pytest.mark.usefixtures("kernels")


def _values(seed: int, shape=(4, 4), dtype=torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g, dtype=torch.float64) * 4 - 2).to(dtype)


@pytest.fixture
def counted(monkeypatch):
    """How often each path ran: the array form of a plan, the slower dense call, the general
    call (each wrapped, still doing its work)."""
    counts = {"arrays": 0, "dense_call": 0, "general": 0}
    real_arrays = dispatch._host_arrays_call

    def arrays_counted(plan, ufunc):
        run = real_arrays(plan, ufunc)

        def counted_run(xs, training):
            counts["arrays"] += 1
            return run(xs, training)
        return counted_run

    monkeypatch.setattr(dispatch, "_host_arrays_call", arrays_counted)
    real_dense, real_call = bridge.BridgedOp._dense_call, bridge.BridgedOp._call

    def dense_counted(self, *a, **k):
        counts["dense_call"] += 1
        return real_dense(self, *a, **k)

    def call_counted(self, *a, **k):
        counts["general"] += 1
        return real_call(self, *a, **k)

    monkeypatch.setattr(bridge.BridgedOp, "_dense_call", dense_counted)
    monkeypatch.setattr(bridge.BridgedOp, "_call", call_counted)
    for name in ("relu", "elemwise_mul", "tanh", "broadcast_add", "exp"):
        registry.get_op(name).plans.clear()  # plans made from here on have counted array forms
    return counts


# ---- the plan key the bridge builds itself ----------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 3])
def test_host_plan_key_is_dispatchs_plan_key(n):
    inst = registry.get_op("add_n")._default_instance or registry.get_op("add_n").instance({})
    arrays = [np.zeros((2, 3 + i), dtype=np.float32 if i % 2 else np.float64) for i in range(n)]
    assert library.host_plan_key(inst, arrays) == dispatch.plan_key(inst, [NDArray(a, library._CPU) for a in arrays])


# ---- the shortest path: values --------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_repeated_dense_calls_take_the_array_form_and_match_torch(counted, dtype):
    x, y = _values(0, dtype=dtype), _values(1, dtype=dtype)
    for _ in range(3):
        torch.testing.assert_close(st.ops.relu(x), torch.relu(x), rtol=0, atol=0)
        torch.testing.assert_close(st.ops.tanh(x), torch.tanh(x))
        torch.testing.assert_close(st.ops.elemwise_mul(x, y), x * y, rtol=0, atol=0)
    # each op's first call of this dtype plans (the general call, or the dense call when another
    # dtype came first); the repeats run the plans' array forms
    assert counted["general"] + counted["dense_call"] <= 3 and counted["arrays"] >= 6
    out = st.ops.relu(x)
    assert out.dtype == dtype and out.is_contiguous() and out.data_ptr() != x.data_ptr()


def test_a_new_shape_plans_once_then_takes_the_array_form(counted):
    a, b = _values(2, (3, 5)), _values(3, (1, 5))
    for _ in range(2):
        torch.testing.assert_close(st.ops.broadcast_add(a, b), a + b)
    before = counted["arrays"]
    c = _values(4, (7, 5))
    for _ in range(2):
        torch.testing.assert_close(st.ops.broadcast_add(c, b), c + b)
    assert counted["arrays"] > before


def test_parameters_take_the_shortest_path_too(counted):
    w = torch.nn.Parameter(_values(5))
    st.ops.exp(w)
    before = counted["arrays"]
    y = st.ops.exp(w)
    assert counted["arrays"] == before + 1
    y.sum().backward()
    torch.testing.assert_close(w.grad, torch.exp(w.detach()))


def test_the_ops_namespace_keeps_what_it_found_until_the_table_changes(isolated):
    f = st.ops.relu
    assert vars(st.ops)["relu"] is f and st.ops.relu is f  # a plain attribute from the first look-up on

    @so.register("percall_twice")
    class Twice(so.Op):
        @so.kernel()
        def dense(self, ctx, x, out):
            out[...] = 2 * x

    x = torch.ones(3)
    torch.testing.assert_close(st.ops.percall_twice(x), 2 * x)
    assert "percall_twice" in vars(st.ops)

    @so.register("percall_twice", replace=True)
    class Thrice(so.Op):
        @so.kernel()
        def dense(self, ctx, x, out):
            out[...] = 3 * x

    assert "percall_twice" not in vars(st.ops)  # dropped with the old record
    torch.testing.assert_close(st.ops.percall_twice(x), 3 * x)
    registry.unregister("percall_twice")
    assert "percall_twice" not in vars(st.ops)
    with pytest.raises(AttributeError, match="no op 'percall_twice'"):
        st.ops.percall_twice


# ---- gradients ----------------------------------------------------------------------------------------
def _grads(fn, *tensors, head=None):
    leaves = [t.detach().clone().requires_grad_(True) for t in tensors]
    out = fn(*leaves)
    (out.sum() if head is None else (out * head).sum()).backward()
    return out.detach(), [t.grad for t in leaves]


@pytest.mark.parametrize("name, reference", [
    ("relu", torch.relu), ("tanh", torch.tanh), ("exp", torch.exp),
])
def test_unary_gradients_match_torch_on_repeated_calls(counted, name, reference):
    x, head = _values(6), _values(7)
    op = getattr(st.ops, name)
    for _ in range(3):  # the first call plans; the others take EagerAutograd
        got, (gx,) = _grads(op, x, head=head)
        want, (wx,) = _grads(reference, x, head=head)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(gx, wx)
    assert counted["arrays"] >= 2


def test_binary_gradients_for_either_or_both_inputs(counted):
    x, y = _values(8), _values(9)
    for _ in range(2):
        got, (gx, gy) = _grads(st.ops.elemwise_mul, x, y)
        torch.testing.assert_close(gx, y)
        torch.testing.assert_close(gy, x)
    xl = x.clone().requires_grad_(True)
    for _ in range(2):  # only the first needs one: the second gets none
        xl.grad = None
        st.ops.elemwise_mul(xl, y).sum().backward()
        torch.testing.assert_close(xl.grad, y)
    assert counted["arrays"] >= 3  # all but the very first call


def test_a_broadcast_head_gradient_is_read_as_it_is(counted):
    """``out.sum().backward()`` hands the backward an expanded (zero-stride) gradient."""
    x = _values(10, (5, 3))
    st.ops.tanh(x)
    xl = x.clone().requires_grad_(True)
    st.ops.tanh(xl).sum().backward()
    torch.testing.assert_close(xl.grad, 1 - torch.tanh(x) ** 2)


def test_an_input_changed_in_place_after_the_forward_is_refused_in_backward():
    x = _values(11).requires_grad_(True)
    st.ops.tanh(x)
    h = x * 1  # not a leaf: it may be changed in place
    y = st.ops.tanh(h)
    h.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_second_order_gradients_through_the_shortest_path():
    x = _values(12, (6,), torch.float64)
    st.ops.tanh(x)  # the next calls are repeated ones
    xl = x.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(st.ops.tanh(xl).sum(), xl, create_graph=True)
    (g2,) = torch.autograd.grad(g.sum(), xl)
    t = torch.tanh(x)
    torch.testing.assert_close(g, 1 - t ** 2)
    torch.testing.assert_close(g2, -2 * t * (1 - t ** 2))


def test_sparse_grad_marks_hold_on_the_shortest_path(counted):
    x = _values(13)
    for marked in (True, False):
        w = torch.nn.Parameter(_values(14))
        if marked:
            st.sparse_grad(w)
        st.ops.elemwise_mul(w, x)
        w.grad = None
        st.ops.elemwise_mul(w, x).sum().backward()
        if marked:
            assert w.grad.layout == torch.sparse_coo and w.grad.is_coalesced()
        else:
            assert w.grad.layout == torch.strided
        torch.testing.assert_close(w.grad.to_dense(), x)


def test_a_constant_op_gives_outputs_without_gradients():
    x = _values(15).requires_grad_(True)
    for _ in range(2):
        y = st.ops.argmax(x, axis=1)
        assert not y.requires_grad
    torch.testing.assert_close(y, torch.argmax(x.detach(), dim=1).to(y.dtype))


def test_torch_func_and_no_grad_calls_after_the_fast_path_exists(counted):
    x = _values(16)
    st.ops.tanh(x)
    st.ops.tanh(x)
    g = torch.func.grad(lambda t: st.ops.tanh(t).sum())(x)
    torch.testing.assert_close(g, 1 - torch.tanh(x) ** 2)
    with torch.no_grad():
        y = st.ops.tanh(x.clone().requires_grad_(True))
    assert not y.requires_grad
    torch.testing.assert_close(y, torch.tanh(x))


# ---- what the shortest path leaves to the others -----------------------------------------------------
def test_other_dtypes_layouts_and_shapes_are_refused_or_served_as_before():
    x = _values(17)
    st.ops.relu(x)
    st.ops.relu(x)  # the fast path exists for (no parameters, one input)
    with pytest.raises(BridgeError, match=r"sparse_ops.torch.ops.relu: argument 'data': arrays of dtype torch.int8"):
        st.ops.relu(torch.ones(3, dtype=torch.int8))
    t = _values(18, (4, 6)).t()  # non-contiguous: copied by the general path
    torch.testing.assert_close(st.ops.relu(t), torch.relu(t))
    st.ops.elemwise_mul(x, x)
    st.ops.elemwise_mul(x, x)
    with pytest.raises(BridgeError, match="sparse_ops.torch.ops.elemwise_mul"):
        st.ops.elemwise_mul(x, _values(19, (3, 3)))


def test_sparse_inputs_after_dense_calls_keep_their_storage_type():
    x = _values(20)
    st.ops.relu(x)
    st.ops.relu(x)
    dense = torch.tensor([[0.0, -1.5, 2.0], [0.0, 0.0, 0.0], [3.0, 0.0, -4.0]])
    csr = dense.to_sparse_csr()
    for _ in range(2):
        out = st.ops.relu(csr)
        assert out.layout == torch.sparse_csr
        torch.testing.assert_close(out.to_dense(), torch.relu(dense))
    rows = dense.to_sparse(1)
    for _ in range(2):
        out = st.ops.relu(rows)
        assert out.layout == torch.sparse_coo
        torch.testing.assert_close(out.to_dense(), torch.relu(dense))


def test_several_outputs_and_the_training_flag():
    x = torch.ones(64, 64)
    for _ in range(2):
        torch.testing.assert_close(st.ops.Dropout(x, p=0.5, training=False), x)
    so.random.seed(3)
    kept = st.ops.Dropout(x, p=0.5)
    assert 0 < int((kept == 0).sum()) < x.numel()
    torch.testing.assert_close(kept[kept != 0], torch.full_like(kept[kept != 0], 2.0))


def test_a_failing_kernel_is_named_on_the_shortest_path(isolated):
    @so.register("percall_fails")
    class Fails(so.Op):
        @so.kernel()
        def dense(self, ctx, x, out):
            if float(x.sum()) > 100:
                raise RuntimeError("too large")
            out[...] = x

    small, large = torch.ones(3), torch.full((3,), 50.0)
    st.ops.percall_fails(small)
    st.ops.percall_fails(small)
    with pytest.raises(BridgeError, match=r"sparse_ops.torch.ops.percall_fails: .*percall_fails.*too large") as err:
        st.ops.percall_fails(large)
    assert isinstance(err.value.__cause__, so.OperatorError)


# ---- sparse inputs: the registered operator's steps without torch's dispatcher ---------------------
def _csr_tensor(seed: int, shape=(5, 4)) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    dense = np.where(rng.random(shape) < 0.4, rng.standard_normal(shape), 0).astype(np.float32)
    dense[1] = 0  # an empty row
    return torch.from_numpy(dense).to_sparse_csr()


def test_csr_calls_take_the_eager_host_path_with_gradients(monkeypatch):
    calls = {"host_call": 0}
    real = library.host_call

    def counted(*a, **k):
        calls["host_call"] += 1
        return real(*a, **k)

    monkeypatch.setattr(bridge, "host_call", counted)
    a = _csr_tensor(21)
    dense_a = a.to_dense()
    w0 = _values(22, (4, 3))
    for _ in range(3):
        w = w0.clone().requires_grad_(True)
        y = st.ops.dot(a, w)
        torch.testing.assert_close(y, dense_a @ w0)
        (y * _values(23, (5, 3))).sum().backward()
        torch.testing.assert_close(w.grad, dense_a.t() @ _values(23, (5, 3)))
    assert calls["host_call"] >= 2  # the first call goes through torch.ops.sparse_ops.dot, the next ones not
    # the csr's stored values get the gradient of each stored value
    values = a.values().clone().requires_grad_(True)
    parts = st.CSRParts(values, a.col_indices(), a.crow_indices(), (5, 4))
    st.ops.dot(parts, w0).sum().backward()
    torch.testing.assert_close(values.grad, w0.sum(dim=1)[a.col_indices()])  # d sum(A @ W) / dA[i, j] = sum_k W[j, k]


def test_csr_inputs_are_still_validated_fully_on_each_call():
    good = _csr_tensor(24)
    st.ops.dot(good, torch.ones(4, 2))
    bad = torch.sparse_csr_tensor(torch.tensor([0, 2, 3]), torch.tensor([0, 5, 1]), torch.ones(3), (2, 3),
                                  check_invariants=False)
    for _ in range(2):
        with pytest.raises(BridgeError, match="argument 'lhs'.*column index 5 at position 1 is out of range") as err:
            st.ops.dot(bad, torch.ones(3, 2))
        assert isinstance(err.value.__cause__, so.SparseFormatError)


def test_embedding_bag_style_sparse_gradients_on_the_eager_host_path():
    """A csr of bags times a table marked sparse_grad: the table's gradient is torch's
    coalesced sparse COO of the rows the bags hold, equal to A.T @ head."""
    a = _csr_tensor(25, (6, 10))
    table = st.sparse_grad(torch.nn.Parameter(_values(26, (10, 3))))
    head = _values(27, (6, 3))
    for _ in range(2):
        table.grad = None
        st.ops.dot(a, table).backward(head)
        g = table.grad
        assert g.layout == torch.sparse_coo and g.is_coalesced()
        torch.testing.assert_close(g.to_dense(), a.to_dense().t() @ head)
        assert set(g._indices()[0].tolist()) <= set(a.col_indices().tolist())


def test_sparse_results_and_value_gradients_on_repeated_host_calls(monkeypatch):
    """csr in, csr out (relu keeps the structure) and on into dot: the gradient of each stored
    value flows back through both eager host calls (HostAutograd), on every repeat."""
    recorded = []
    real = library.host_apply
    monkeypatch.setattr(library, "host_apply", lambda ov, *a: recorded.append(ov.opdef.name) or real(ov, *a))
    a = _csr_tensor(28, (5, 4))
    w = _values(29, (4, 2))
    v0, cols = a.values(), a.col_indices()
    for _ in range(3):
        values = v0.clone().requires_grad_(True)
        y = st.ops.relu(st.CSRParts(values, cols, a.crow_indices(), (5, 4)))
        assert y.layout == torch.sparse_csr
        torch.testing.assert_close(y.to_dense(), torch.relu(a.to_dense()))
        st.ops.dot(y, w).sum().backward()
        torch.testing.assert_close(values.grad, (v0 > 0).to(v0.dtype) * w.sum(dim=1)[cols])
    assert recorded.count("relu") >= 2 and recorded.count("dot") >= 2  # all but each op's first call
