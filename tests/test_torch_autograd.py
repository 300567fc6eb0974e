"""Torch autograd through bridged ops: the op's own gradient rule, storage types kept where
the user asks (row_sparse gradients in the .grad of a parameter marked by st.sparse_grad as
coalesced COO; csr inputs get csr value gradients), torch optimizers on those gradients
against dense references, gradcheck over the ops' own samples, second order. The dense
default (no mark: a dense gradient) is tested in test_torch_habits.py."""
import numpy as np
import pytest
import scipy.sparse as sp
import torch

import sparse_ops as so
import sparse_ops.torch as st
import sparse_ops_cookbook  # noqa: F401  (registers the cookbook ops)
from sparse_ops import registry
from sparse_ops.torch import BridgeError, CSRParts


def _bags(n_bags=5, vocab=12, seed=0):
    m = sp.random(n_bags, vocab, density=0.3, format="csr", dtype=np.float64, random_state=seed)
    m.data[:] = 1.0
    return m


def test_row_sparse_gradient_lands_in_param_grad_as_coalesced_coo():
    m = _bags()
    w = st.sparse_grad(torch.nn.Parameter(torch.randn(12, 4, dtype=torch.float64)))
    out = st.ops.embedding_bag(st.to_torch(so.csr_matrix(m)), w)
    np.testing.assert_allclose(out.detach().numpy(), m @ w.detach().numpy(), rtol=1e-12)
    out.pow(2).sum().backward()
    g = w.grad
    assert g.layout == torch.sparse_coo and g.sparse_dim() == 1 and g.is_coalesced()
    used = np.flatnonzero(np.asarray(m.sum(axis=0)).ravel())
    np.testing.assert_array_equal(g._indices()[0].numpy(), used)  # only the rows the bags touch
    ref = m.T @ (2 * (m @ w.detach().numpy()))
    np.testing.assert_allclose(g.to_dense().numpy(), ref, rtol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_row_sparse_gradient_of_an_intermediate_flows_on_dense(dtype):
    """dot(csr, x @ w): the op's gradient for its dense operand is row_sparse, but that operand
    is torch's own product, whose backward takes strided gradients only: it gets a dense one,
    while a marked leaf operand in the same graph keeps its sparse .grad."""
    m = sp.random(30, 20, density=0.1, format="csr", dtype=np.float64, random_state=3)
    m[:, 5] = 0  # a column no stored value uses: a row of zeros in the row_sparse gradient
    m.eliminate_zeros()
    a = st.to_torch(so.csr_matrix(m.astype(str(dtype).split(".")[1])))
    x = torch.randn(20, 6, dtype=dtype, generator=torch.Generator().manual_seed(0))
    w = torch.randn(6, 4, dtype=dtype, requires_grad=True)
    leaf = st.sparse_grad(torch.randn(20, 4, dtype=dtype, requires_grad=True))
    out = st.ops.dot(a, x @ w) + st.ops.dot(a, leaf)
    out.square().sum().backward()
    g = 2 * out.detach().numpy().astype(np.float64)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    assert w.grad.layout == torch.strided and w.grad.dtype == dtype
    np.testing.assert_allclose(w.grad.numpy(), x.numpy().T @ (m.T @ g), **tol)
    assert leaf.grad.layout == torch.sparse_coo and leaf.grad.is_coalesced()
    np.testing.assert_allclose(leaf.grad.to_dense().numpy(), m.T @ g, **tol)


def test_repeated_dense_calls_record_as_the_registered_operator_does():
    """A repeated all-dense host call with grad skips torch's dispatcher
    (``library.EagerAutograd``): the same outputs and first- and second-order gradients as
    the first call, which goes through ``torch.ops.sparse_ops``."""
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    y = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    got, paths = [], []
    mul = st.BridgedOp(registry.get_op("elemwise_mul"))  # a fresh one: its first call is its first
    for _ in range(2):
        out = mul(x, y)
        paths.append(out.grad_fn.name())
        gx, gy = torch.autograd.grad((out * out).sum(), (x, y), create_graph=True)
        (ggx,) = torch.autograd.grad(gy.sum(), x)  # d/dx sum(2 x^2 y) = 4 x y
        got.append([out.detach(), gx.detach(), gy.detach(), ggx])
    assert paths[0].startswith("GeneratedBackwardFor_sparse_ops_elemwise_mul") and paths[1] == "EagerAutogradBackward"
    xd, yd = x.detach(), y.detach()
    for want, a, b in zip([xd * yd, 2 * xd * yd * yd, 2 * xd * xd * yd, 4 * xd * yd], *got):
        torch.testing.assert_close(a, want)
        torch.testing.assert_close(b, a, rtol=0, atol=0)


def test_row_sparse_gradient_of_a_dense_input_is_flagged_coalesced_on_every_call():
    """Embedding(sparse_grad=True) on dense ids: an all-dense call whose weight gradient is
    row_sparse, flagged coalesced in ``.grad`` from the first backward on (the flag's hook
    is added by the backward that makes the gradient), through either call path."""
    ids = torch.tensor([[4.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    w = torch.nn.Parameter(torch.randn(6, 3, dtype=torch.float64))
    for _ in range(3):
        w.grad = None
        st.ops.Embedding(ids, w, input_dim=6, output_dim=3, dtype="float64", sparse_grad=True).sum().backward()
        g = w.grad
        assert g.layout == torch.sparse_coo and g.is_coalesced()
        np.testing.assert_array_equal(g._indices()[0].numpy(), [0, 1, 4])
        np.testing.assert_array_equal(g._values().numpy(), [[1.0] * 3, [2.0] * 3, [1.0] * 3])


@pytest.mark.parametrize("make_opt", [
    lambda p: torch.optim.SGD(p, lr=0.1),
    lambda p: torch.optim.SparseAdam(p, lr=0.05),
    lambda p: torch.optim.Adagrad(p, lr=0.1),
], ids=["SGD", "SparseAdam", "Adagrad"])
def test_torch_optimizers_take_the_sparse_gradient(make_opt):
    """Three steps on the bridged embedding_bag's sparse gradient against the same optimizer
    on the dense reference (nn.EmbeddingBag(sparse=True) with per-sample weights)."""
    m = _bags(seed=4)
    bags = st.to_torch(so.csr_matrix(m))
    init = torch.randn(12, 4, dtype=torch.float64)
    w = st.sparse_grad(torch.nn.Parameter(init.clone()))
    ref_bag = torch.nn.EmbeddingBag(12, 4, mode="sum", sparse=True).double()
    with torch.no_grad():
        ref_bag.weight.copy_(init)
    opt, ref_opt = make_opt([w]), make_opt([ref_bag.weight])
    coo = m.tocoo()
    ids, offsets = torch.from_numpy(m.indices.astype(np.int64)), torch.from_numpy(m.indptr[:-1].astype(np.int64))
    target = torch.randn(5, 4, dtype=torch.float64)
    for _ in range(3):
        opt.zero_grad()
        ((st.ops.embedding_bag(bags, w) - target) ** 2).sum().backward()
        opt.step()
        ref_opt.zero_grad()
        ((ref_bag(ids, offsets, per_sample_weights=torch.from_numpy(m.data)) - target) ** 2).sum().backward()
        ref_opt.step()
    assert coo.nnz > 0
    torch.testing.assert_close(w.detach(), ref_bag.weight.detach(), rtol=1e-10, atol=1e-12)


def test_csr_input_gets_a_csr_gradient_of_its_values():
    m = sp.random(6, 5, density=0.4, format="csr", dtype=np.float64, random_state=2)
    a = st.to_torch(so.csr_matrix(m)).detach().requires_grad_(True)
    x = torch.randn(5, 3, dtype=torch.float64)
    y = st.ops.csr_spmm(a, x)
    g = torch.randn(6, 3, dtype=torch.float64)
    y.backward(g)
    assert a.grad.layout == torch.sparse_csr
    torch.testing.assert_close(a.grad.crow_indices(), a.crow_indices().long().to(a.grad.crow_indices().dtype))
    rows = np.repeat(np.arange(6), np.diff(m.indptr))
    ref = (g.numpy() @ x.numpy().T)[rows, m.indices]  # dL/dA at the stored positions only
    np.testing.assert_allclose(a.grad.values().numpy(), ref, rtol=1e-12)


def test_only_the_gradients_torch_asks_for_are_computed(monkeypatch):
    calls = []
    cls = registry.get_op("csr_spmm").cls
    original = cls.gradient

    def spy(self, out_grads, inputs, outputs, needs=None):
        calls.append(list(needs))
        return original(self, out_grads, inputs, outputs, needs=needs)

    monkeypatch.setattr(cls, "gradient", spy)
    m = sp.random(4, 4, density=0.5, format="csr", dtype=np.float64, random_state=1)
    a = st.to_torch(so.csr_matrix(m))
    x = torch.randn(4, 2, dtype=torch.float64, requires_grad=True)
    st.ops.csr_spmm(a, x).sum().backward()
    assert calls == [[False, True]]


def test_dense_gradients_stay_dense_and_match_torch():
    a = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, 2, dtype=torch.float64, requires_grad=True)
    st.ops.tanh(st.ops.dot(a, b)).sum().backward()
    a2, b2 = a.detach().clone().requires_grad_(True), b.detach().clone().requires_grad_(True)
    torch.tanh(a2 @ b2).sum().backward()
    assert a.grad.layout == b.grad.layout == torch.strided
    torch.testing.assert_close(a.grad, a2.grad)
    torch.testing.assert_close(b.grad, b2.grad)


def _samples_for_gradcheck():
    """(op name, sample) per differentiable op (built-in or cookbook) whose samples have a
    dense or csr-values input: the first such sample of each op."""
    out = []
    for d in sorted(registry.all_ops(), key=lambda d: d.name):
        if not d.differentiable or "random" in d.resources or d.mutate or d.plugin not in (None, "cookbook"):
            continue
        if "gradient" in (getattr(d.cls, "opcheck_skip", None) or {}):  # a loss's gradient, not a derivative
            continue
        make = getattr(d.cls, "samples", None)
        for smp in (make() if callable(make) else []):
            xs, params = smp if isinstance(smp, tuple) else (smp, {})
            if all(x.stype in ("default", "csr") for x in xs):
                out.append((d.name, xs, params))
                break
    return out


GRADCHECK_SAMPLES = _samples_for_gradcheck()


@pytest.mark.parametrize("name, xs, params", GRADCHECK_SAMPLES, ids=[s[0] for s in GRADCHECK_SAMPLES])
def test_gradcheck_on_every_sample(name, xs, params):
    """gradcheck with the dense inputs as its leaves, as they are: their gradients are dense by
    default (torch's rule), so no wrapper densifies them."""
    opdef = registry.get_op(name)
    skip = getattr(opdef.cls, "opcheck_skip", {}) or {}
    args, diff = [], []
    for i, x in enumerate(xs):
        if x.stype == "csr":
            args.append(CSRParts(torch.from_numpy(x.data.asnumpy()), torch.from_numpy(x.indices.asnumpy()),
                                 torch.from_numpy(x.indptr.asnumpy()), x.shape))
        else:
            args.append(torch.from_numpy(x.asnumpy()))
        argname = opdef.arguments[min(i, len(opdef.arguments) - 1)]
        if x.dtype == np.float64 and f"gradient:{argname}" not in skip and "gradient" not in skip:
            diff.append(i)
    assert diff, f"{name}: no float64 input to check"
    variables = [(args[i].values if isinstance(args[i], CSRParts) else args[i]).clone().requires_grad_(True)
                 for i in diff]

    def f(*vs):
        a = list(args)
        for i, v in zip(diff, vs):
            a[i] = a[i]._replace(values=v) if isinstance(a[i], CSRParts) else v
        r = st.op(name)(*a, **params)
        r = r if isinstance(r, tuple) else (r,)
        return tuple(t.to_dense() if t.layout != torch.strided else t for t in r)

    assert torch.autograd.gradcheck(f, variables, eps=1e-6, atol=1e-5, rtol=1e-4)


def test_gradcheck_covers_every_cookbook_op_and_most_built_ins():
    names = {s[0] for s in GRADCHECK_SAMPLES}
    cookbook = {d.name for d in registry.all_ops() if d.plugin == "cookbook" and d.differentiable}
    assert cookbook <= names
    assert len(names) >= 70, len(names)


@pytest.mark.parametrize("name, make", [
    ("sigmoid", lambda: [torch.randn(3, 4, dtype=torch.float64)]),
    ("tanh", lambda: [torch.randn(3, 4, dtype=torch.float64)]),
    ("elemwise_mul", lambda: [torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64)]),
    ("dot", lambda: [torch.randn(3, 4, dtype=torch.float64), torch.randn(4, 2, dtype=torch.float64)]),
])
def test_second_order_through_our_own_gradient_rules(name, make, kernels):
    xs = [x.requires_grad_(True) for x in make()]
    assert torch.autograd.gradgradcheck(lambda *v: st.op(name)(*v), xs)


def test_second_order_value_and_the_limits_said_clearly(kernels):
    x = torch.randn(5, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(st.ops.sigmoid(x).sum(), x, create_graph=True)
    (gg,) = torch.autograd.grad(g.sum(), x, create_graph=True)
    s = torch.sigmoid(x.detach())
    torch.testing.assert_close(gg.detach(), s * (1 - s) * (1 - 2 * s))
    with pytest.raises(BridgeError, match=r"sparse_ops\.torch\.ops\.sigmoid: derivatives of third order"):
        torch.autograd.grad(gg.sum(), x)
    m = sp.random(4, 4, density=0.5, format="csr", dtype=np.float64, random_state=0)
    w = torch.randn(4, 2, dtype=torch.float64, requires_grad=True)
    with pytest.raises(BridgeError, match="second-order.*dense inputs"):
        torch.autograd.grad(st.ops.csr_spmm(st.to_torch(so.csr_matrix(m)), w).sum(), w, create_graph=True)
    (g,) = torch.autograd.grad(st.ops.square(x).sum(), x)  # and first order still works afterwards
    torch.testing.assert_close(g, 2 * x.detach())


def test_an_op_without_a_gradient_says_so(isolated):
    @so.register("_torch_bridge_nograd")
    class NoGrad(so.Op):
        @so.kernel()
        def dense(self, ctx, x, y):
            np.copyto(y, x)

    x = torch.ones(3, requires_grad=True)
    y = st.ops._torch_bridge_nograd(x)
    with pytest.raises(BridgeError, match="_torch_bridge_nograd.*declares no gradient.*'data'"):
        y.sum().backward()
    st.ops.square(x).sum().backward()
    torch.testing.assert_close(x.grad, 2 * torch.ones(3))


def test_coalesced_flag_is_trusted_only_for_the_gradient_returned_and_checked_for_sums():
    """One call's row_sparse gradient lands flagged without a check (``.grad`` holds the very
    buffers returned; the hook lets go of them). Accumulated into an earlier sparse
    ``.grad``, the sum is flagged only when its rows are sorted and unique (the O(nnz)
    check); values always equal the dense rule's."""
    from sparse_ops.torch import library

    w = st.sparse_grad(torch.nn.Parameter(torch.randn(6, 3, dtype=torch.float64)))
    a = torch.tensor([[4.0, 1.0]], dtype=torch.float64)

    def emb(ids):
        return st.ops.Embedding(ids, w, input_dim=6, output_dim=3, dtype="float64")

    emb(a).sum().backward()
    assert w.grad.is_coalesced() and library._GIVEN not in w.__dict__
    np.testing.assert_array_equal(w.grad._indices()[0].numpy(), [1, 4])
    for earlier, flagged in (([[1, 0]], False), ([[5]], None)):
        rows = torch.tensor(earlier)
        w.grad = torch.sparse_coo_tensor(rows, torch.ones(rows.shape[1], 3, dtype=torch.float64), (6, 3))
        emb(a).sum().backward()
        g = w.grad
        want = np.zeros((6, 3))
        want[[1, 4]] += 1
        np.add.at(want, earlier[0], 1)
        np.testing.assert_array_equal(g.to_dense().numpy(), want)
        assert library._GIVEN not in w.__dict__
        ordered = bool((np.diff(g._indices()[0].numpy()) > 0).all())
        assert g.is_coalesced() == ordered if flagged is None else g.is_coalesced() is flagged
