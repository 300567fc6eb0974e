"""PyTorch users' habits through the bridge (issue 38, items 1 and 3).

- Gradients as torch gives them: a dense input gets a dense gradient (what torch.sparse.mm
  gives), so torch.optim.Adam and torch.autograd.gradcheck work unchanged; a sparse COO
  gradient only where the user asks, per tensor (``st.sparse_grad(w)``) or per call (an op's
  own ``sparse_grad=True``), eagerly and inside ``torch.compile(fullgraph=True)``, where
  torch.optim.SparseAdam trains on it.
- torch's transforms: ``torch.func.grad``, ``jacrev``, ``vmap`` (and their compositions) on
  bridged ops, against the same functions written with torch's own ops.
- torch's conventions: Dropout follows ``training=`` as ``F.dropout`` does (a module passes
  ``self.training``); ``torch.library.opcheck`` on the ``default`` overload and through
  ``st.opcheck``; errors name dtypes as torch does and convert with ``.to(...)``.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

import sparse_ops as so
import sparse_ops.torch as st
import sparse_ops_cookbook  # noqa: F401  (registers the cookbook ops: csr_spmm, embedding_bag, ...)
from sparse_ops.torch import BridgeError, CSRParts
from sparse_ops.torch.library import encode_params

F64 = torch.float64


def _csr(n=6, k=5, density=0.4, seed=0, dtype=np.float64):
    return sp.random(n, k, density=density, format="csr", dtype=dtype, random_state=seed)


def _parts(m) -> CSRParts:
    """A SciPy csr matrix as the bridge's CSRParts of plain tensors (what compiled code passes)."""
    return CSRParts(torch.from_numpy(m.data.copy()), torch.from_numpy(m.indices.astype(np.int64)),
                    torch.from_numpy(m.indptr.astype(np.int64)), m.shape)


def _seeded(*shape, seed=0, dtype=F64):
    return torch.randn(*shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))


# ---- 1. dense gradients by default -----------------------------------------------------------------
def test_a_dense_parameter_gets_the_dense_gradient_torch_sparse_mm_gives():
    m = _csr()
    a = st.to_torch(so.csr_matrix(m))
    w = torch.nn.Parameter(_seeded(5, 3))
    g = _seeded(6, 3, seed=1)
    st.ops.dot(a, w).backward(g)
    ref = torch.nn.Parameter(w.detach().clone())
    torch.sparse.mm(a.to_sparse_coo(), ref).backward(g)
    assert w.grad.layout == torch.strided and ref.grad.layout == torch.strided
    torch.testing.assert_close(w.grad, ref.grad, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(w.grad.numpy(), m.T @ g.numpy(), rtol=1e-12)


def test_adam_trains_on_the_default_gradient_as_on_torch_sparse_mm():
    """torch.optim.Adam refuses sparse gradients: on the default (dense) one it takes the
    same steps as on torch.sparse.mm's."""
    m = _csr(seed=3)
    a = st.to_torch(so.csr_matrix(m))
    w = torch.nn.Parameter(_seeded(5, 3, seed=2))
    ref = torch.nn.Parameter(w.detach().clone())
    opt, ref_opt = torch.optim.Adam([w], lr=0.05), torch.optim.Adam([ref], lr=0.05)
    target = _seeded(6, 3, seed=4)
    for _ in range(3):
        opt.zero_grad()
        ((st.ops.dot(a, w) - target) ** 2).sum().backward()
        opt.step()
        ref_opt.zero_grad()
        ((torch.sparse.mm(a.to_sparse_coo(), ref) - target) ** 2).sum().backward()
        ref_opt.step()
    torch.testing.assert_close(w.detach(), ref.detach(), rtol=1e-12, atol=1e-12)


def _bags(n_bags=5, vocab=12, seed=0):
    m = sp.random(n_bags, vocab, density=0.3, format="csr", dtype=np.float64, random_state=seed)
    m.data[:] = 1.0
    return m


@pytest.mark.parametrize("name", ["dot", "csr_spmm", "embedding_bag"])
def test_gradcheck_passes_on_the_defaults(name):
    """torch.autograd.gradcheck on the op as a torch user calls it (a torch.sparse_csr operand,
    a dense float64 leaf; no wrapper densifying the gradient), and on the csr operand's
    stored values (embedding_bag declares none for its bags: they are ids)."""
    m = _bags(seed=1) if name == "embedding_bag" else _csr(seed=2)
    a = st.to_torch(so.csr_matrix(m))
    w = _seeded(m.shape[1], 3).requires_grad_(True)
    f = st.op(name)
    assert torch.autograd.gradcheck(lambda w: f(a, w), (w,), eps=1e-6, atol=1e-7)
    if name == "embedding_bag":
        return
    values = torch.from_numpy(m.data.copy()).requires_grad_(True)
    parts = _parts(m)
    assert torch.autograd.gradcheck(lambda v: f(parts._replace(values=v), w.detach()), (values,), eps=1e-6,
                                    atol=1e-7)


# ---- 1. sparse gradients where the user asks --------------------------------------------------------
def test_a_marked_parameter_gets_a_coalesced_sparse_coo_gradient_and_unmarking_undoes_it():
    m = _bags(seed=5)
    bags = st.to_torch(so.csr_matrix(m))
    w = st.sparse_grad(torch.nn.Parameter(_seeded(12, 4)))
    assert st.is_sparse_grad(w)
    st.ops.embedding_bag(bags, w).pow(2).sum().backward()
    g = w.grad
    assert g.layout == torch.sparse_coo and g.sparse_dim() == 1 and g.is_coalesced()
    ref = m.T @ (2 * (m @ w.detach().numpy()))
    np.testing.assert_array_equal(g._indices()[0].numpy(), np.flatnonzero(np.asarray(m.sum(axis=0)).ravel()))
    np.testing.assert_allclose(g.to_dense().numpy(), ref, rtol=1e-12)
    w.grad = None
    assert st.sparse_grad(w, enabled=False) is w and not st.is_sparse_grad(w)
    st.ops.embedding_bag(bags, w).pow(2).sum().backward()
    assert w.grad.layout == torch.strided
    np.testing.assert_allclose(w.grad.numpy(), ref, rtol=1e-12)


@pytest.mark.parametrize("wrap", ["checkpoint", "save_on_cpu", "saved_tensors_hooks"])
def test_the_mark_holds_when_saved_tensors_come_back_as_other_objects(wrap):
    """torch.utils.checkpoint (non-reentrant) and saved-tensor hooks hand the backward other
    tensor objects than the marked leaf (not leaves, without the mark): the call's forward
    decides, so the gradient stays sparse COO and SparseAdam takes it."""
    import contextlib

    from torch.utils.checkpoint import checkpoint

    m = _bags(seed=6)
    bags = st.to_torch(so.csr_matrix(m))
    w = st.sparse_grad(torch.nn.Parameter(_seeded(12, 4)))
    hooks = {"save_on_cpu": lambda: torch.autograd.graph.save_on_cpu(),
             "saved_tensors_hooks": lambda: torch.autograd.graph.saved_tensors_hooks(lambda t: t.clone(),
                                                                                     lambda t: t.clone())}
    with hooks.get(wrap, contextlib.nullcontext)():
        y = checkpoint(lambda v: st.ops.embedding_bag(bags, v), w, use_reentrant=False) if wrap == "checkpoint" \
            else st.ops.embedding_bag(bags, w)
        y.pow(2).sum().backward()
    assert w.grad.layout == torch.sparse_coo and w.grad.is_coalesced()
    np.testing.assert_allclose(w.grad.to_dense().numpy(), m.T @ (2 * (m @ w.detach().numpy())), rtol=1e-12)
    torch.optim.SparseAdam([w], lr=0.1).step()


def test_a_marked_parameter_of_a_dense_gradient_rule_gets_its_nonzero_rows():
    """dot(dense x, w): the rule's gradient is dense; a marked w gets it as sparse COO of its
    rows with a nonzero (x has a column of zeros: that row of w's gradient is absent)."""
    x = _seeded(4, 5)
    x[:, 2] = 0
    w = st.sparse_grad(torch.nn.Parameter(_seeded(5, 3, seed=1)))
    st.ops.dot(x, w).sum().backward()
    assert w.grad.layout == torch.sparse_coo
    np.testing.assert_array_equal(w.grad._indices()[0].numpy(), [0, 1, 3, 4])
    torch.testing.assert_close(w.grad.to_dense(), x.T @ torch.ones(4, 3, dtype=F64))


@pytest.mark.parametrize("sparse_grad", [False, True])
def test_the_ops_own_sparse_grad_parameter_asks_per_call(sparse_grad):
    """Embedding's and csr_spmm's ``sparse_grad`` parameter (MXNet's, the cookbook's): True
    gives the unmarked weight a sparse COO gradient, False a dense one; values agree."""
    ids = torch.tensor([[4.0, 1.0], [1.0, 0.0]], dtype=F64)
    w = torch.nn.Parameter(_seeded(6, 3))
    st.ops.Embedding(ids, w, input_dim=6, output_dim=3, dtype="float64", sparse_grad=sparse_grad).sum().backward()
    assert w.grad.layout == (torch.sparse_coo if sparse_grad else torch.strided)
    want = torch.zeros(6, 3, dtype=F64)
    want[[0, 4]], want[1] = 1.0, 2.0
    torch.testing.assert_close(w.grad.to_dense(), want)
    m = _csr(seed=6)
    x = torch.nn.Parameter(_seeded(5, 2))
    st.ops.csr_spmm(st.to_torch(so.csr_matrix(m)), x, sparse_grad=sparse_grad).sum().backward()
    assert x.grad.layout == (torch.sparse_coo if sparse_grad else torch.strided)
    np.testing.assert_allclose(x.grad.to_dense().numpy(), m.T @ np.ones((6, 2)), rtol=1e-12)


def test_sparse_grad_marks_dense_tensors_with_rows_only():
    with pytest.raises(TypeError, match="dense.*sparse_csr"):
        st.sparse_grad(st.to_torch(so.csr_matrix(_csr())))
    with pytest.raises(ValueError, match="0-d"):
        st.sparse_grad(torch.tensor(1.0))
    leaf = torch.ones(3, 2, requires_grad=True)
    with pytest.raises(ValueError, match="leaf tensor.*the leaf it was computed from"):
        st.sparse_grad(leaf * 2)  # its gradient never reaches a .grad: the mark would do nothing
    with pytest.raises(TypeError, match="torch.int64 has no gradient"):
        st.sparse_grad(torch.ones(3, 2, dtype=torch.int64))
    assert st.is_sparse_grad(st.sparse_grad(torch.ones(3, 2)))  # marked first, requires_grad_() later: fine


# ---- 1. under torch.compile ------------------------------------------------------------------------
class Recommender(torch.nn.Module):
    """A bag-of-ids recommender: embedding_bag over a csr batch (the table marked for sparse
    gradients, as nn.EmbeddingBag(sparse=True) would be) and a dense linear head."""

    def __init__(self, vocab=30, dim=4):
        super().__init__()
        self.table = st.sparse_grad(torch.nn.Parameter(_seeded(vocab, dim, seed=7)))
        self.head = torch.nn.Parameter(_seeded(dim, 1, seed=8))

    def forward(self, values, indices, indptr, n_bags):
        bags = CSRParts(values, indices, indptr, (n_bags, self.table.shape[0]))
        return (st.ops.embedding_bag(bags, self.table) @ self.head).squeeze(-1)


def _batch(seed, n_bags=8, vocab=30):
    m = sp.random(n_bags, vocab, density=0.15, format="csr", dtype=np.float64, random_state=seed)
    m.data[:] = 1.0
    return list(_parts(m)[:3]) + [n_bags], torch.from_numpy(np.random.default_rng(seed).random(n_bags))


def _train(model, step, batches):
    sparse = torch.optim.SparseAdam([model.table], lr=0.05)
    dense = torch.optim.Adam([model.head], lr=0.05)
    layouts = []
    for args, y in batches:
        sparse.zero_grad()
        dense.zero_grad()
        ((step(*args) - y) ** 2).mean().backward()
        layouts.append((model.table.grad.layout, model.table.grad.is_coalesced(), model.head.grad.layout))
        sparse.step()
        dense.step()
    return layouts


def test_a_compiled_recommender_trains_with_sparse_adam_as_the_eager_one():
    """torch.compile(fullgraph=True), inductor: Dynamo reads the mark (one graph, no break),
    the compiled backward builds the table's sparse COO gradient (flagged coalesced, as
    eagerly), SparseAdam takes it; three steps equal the eager model's."""
    torch._dynamo.reset()
    batches = [_batch(s) for s in range(3)]
    eager, compiled = Recommender(), Recommender()
    assert _train(eager, eager, batches) == [(torch.sparse_coo, True, torch.strided)] * 3
    step = torch.compile(compiled, fullgraph=True)
    assert _train(compiled, step, batches) == [(torch.sparse_coo, True, torch.strided)] * 3
    torch.testing.assert_close(compiled.table.detach(), eager.table.detach(), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(compiled.head.detach(), eager.head.detach(), rtol=1e-10, atol=1e-12)
    explained = torch._dynamo.explain(compiled)(*batches[0][0])
    assert explained.graph_break_count == 0 and explained.graph_count == 1


def test_compiled_gradients_follow_the_mark_and_the_ops_parameter():
    """Compiled (aot_eager, fullgraph) gradients equal the eager ones in value and layout: an
    unmarked parameter's is dense, a marked one's sparse COO (a changed mark is guarded: the
    function compiles again), Embedding's sparse_grad=True asks per call, and an
    intermediate's stays dense."""
    torch._dynamo.reset()
    m = _csr(8, 10, density=0.3, seed=9)
    parts = list(_parts(m)[:3])
    w = torch.nn.Parameter(_seeded(10, 3))

    def f(v, i, p, w):
        return st.ops.dot(CSRParts(v, i, p, (8, 10)), w).square().sum()

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    want = 2 * (m.T @ (m @ w.detach().numpy()))
    for mark in (False, True, False):
        st.sparse_grad(w, enabled=mark)
        w.grad = None
        compiled(*parts, w).backward()
        assert w.grad.layout == (torch.sparse_coo if mark else torch.strided)
        np.testing.assert_allclose(w.grad.to_dense().numpy(), want, rtol=1e-12)

    ids = torch.tensor([[4.0, 1.0], [1.0, 0.0]], dtype=F64)
    table = torch.nn.Parameter(_seeded(6, 3))
    emb = torch.compile(lambda i, t: st.ops.Embedding(i, t, input_dim=6, output_dim=3, dtype="float64",
                                                      sparse_grad=True).sum(), fullgraph=True, backend="aot_eager")
    emb(ids, table).backward()
    assert table.grad.layout == torch.sparse_coo
    np.testing.assert_array_equal(table.grad.coalesce()._indices()[0].numpy(), [0, 1, 4])

    leaf = st.sparse_grad(torch.nn.Parameter(_seeded(10, 3)))
    through = torch.compile(lambda v, i, p, t: st.ops.dot(CSRParts(v, i, p, (8, 10)), t * 2).sum(), fullgraph=True,
                            backend="aot_eager")
    through(*parts, leaf).backward()  # t * 2 is an intermediate: its gradient flows on dense
    assert leaf.grad.layout == torch.strided
    np.testing.assert_allclose(leaf.grad.numpy(), 2 * m.T @ np.ones((8, 3)), rtol=1e-12)


# ---- 3. torch.func ----------------------------------------------------------------------------------
def test_torch_func_grad_and_jacrev_equal_torchs_own_ops():
    x, w = _seeded(4, 5), _seeded(5, 3, seed=1)
    for _ in range(2):  # the second time after eager calls filled the all-dense fast path
        st.ops.tanh(st.ops.dot(x, w))
        got = torch.func.grad(lambda w: st.ops.tanh(st.ops.dot(x, w)).sum())(w)
        torch.testing.assert_close(got, torch.func.grad(lambda w: torch.tanh(x @ w).sum())(w))
    jac = torch.func.jacrev(lambda x: st.ops.sigmoid(st.ops.dot(x, w)))(x)
    torch.testing.assert_close(jac, torch.func.jacrev(lambda x: torch.sigmoid(x @ w))(x))
    m = _csr(seed=3)
    parts = _parts(m)
    jv = torch.func.jacrev(lambda v: st.ops.dot(parts._replace(values=v), w))(parts.values)
    rows = torch.from_numpy(np.repeat(np.arange(6), np.diff(m.indptr)))

    def scattered(v):  # the csr matrix as a dense one: torch.func takes no sparse tensors
        return torch.zeros(6, 5, dtype=F64).index_put((rows, parts.indices), v) @ w

    torch.testing.assert_close(jv, torch.func.jacrev(scattered)(parts.values))


def test_vmap_loops_over_the_batch_and_composes_with_grad():
    x, w = _seeded(7, 5), _seeded(5, 3, seed=1)
    torch.testing.assert_close(torch.func.vmap(lambda r: st.ops.tanh(st.ops.dot(r[None], w))[0])(x),
                               torch.tanh(x @ w))
    torch.testing.assert_close(torch.vmap(torch.ops.sparse_ops.tanh)(x), torch.tanh(x))  # the operator's own rule

    def loss(w, r, f):
        return f(r[None], w).square().sum()

    per_example = torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0, None))(w, x, st.ops.dot)
    torch.testing.assert_close(per_example,
                               torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0, None))(w, x, torch.mm))
    total = torch.func.grad(lambda w: torch.func.vmap(lambda r: loss(w, r, st.ops.dot))(x).sum())(w)
    torch.testing.assert_close(total, 2 * x.T @ (x @ w))
    m = _csr(seed=4)
    parts = _parts(m)
    values = torch.stack([parts.values * (b + 1) for b in range(3)])  # one structure, a batch of values
    got = torch.func.vmap(lambda v: st.ops.dot(parts._replace(values=v), w))(values)
    for b in range(3):
        np.testing.assert_allclose(got[b].numpy(), (b + 1) * (m @ w.numpy()), rtol=1e-12)


def test_a_gradient_differentiated_again_under_torch_func_is_refused_naming_the_op():
    """grad of grad, jacrev of jacrev and hessian through an op whose gradient is our
    operator (not lowered to torch's own ops) are refused naming it: torch would take the
    opaque gradient for a constant and give zeros. A gradient the outer transform does not
    differentiate (its inputs constant to it) still runs, and so does the next call."""
    x = torch.tensor([0.1, -0.3, 0.5], dtype=F64)

    def f(x):
        return st.ops.smooth_l1(x, scalar=1.0).sum()

    with pytest.raises(BridgeError, match=r"sparse_ops\.torch\.ops\.smooth_l1: derivatives of its gradient under "
                                          r"torch\.func.*create_graph=True"):
        torch.func.grad(lambda x: torch.func.grad(f)(x).sum())(x)
    w, parts = _seeded(5, 3, seed=1), _parts(_csr(seed=5))
    with pytest.raises(BridgeError, match=r"ops\.dot: derivatives of its gradient"):
        torch.func.jacrev(torch.func.jacrev(lambda w: st.ops.tanh(st.ops.dot(parts, w)).sum()))(w)
    y = torch.tensor([1.0, 2.0], dtype=F64)
    torch.testing.assert_close(torch.func.grad(lambda y: (y * torch.func.grad(f)(x).sum()).sum())(y),
                               torch.full((2,), float(x.sum()), dtype=F64))
    torch.testing.assert_close(torch.func.grad(f)(x), x)  # 0.5 x**2 inside |x| < 1
    # the eager second derivative of a dense call is ours to give
    xg = x.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(f(xg), xg, create_graph=True)
    torch.testing.assert_close(torch.autograd.grad(g.sum(), xg)[0], torch.ones(3, dtype=F64))


def test_a_sparse_csr_tensor_closed_over_by_a_transform_is_a_constant():
    """torch.func takes no sparse inputs, so a GCN's adjacency is closed over: grad, jacrev,
    vmap and vmap of grad through dot(A, w) with A a torch.sparse_csr tensor equal the
    dense product's (its components were read through the transform's wrappers, which have
    no sparse layout, and refused with torch's 'do not have strides')."""
    m = _csr(seed=6)
    a, dense = torch.from_numpy(m.toarray()).to_sparse_csr(), torch.from_numpy(m.toarray())
    w = _seeded(5, 3, seed=2)
    torch.testing.assert_close(torch.func.grad(lambda w: st.ops.tanh(st.ops.dot(a, w)).sum())(w),
                               torch.func.grad(lambda w: torch.tanh(dense @ w).sum())(w))
    torch.testing.assert_close(torch.func.jacrev(lambda w: st.ops.dot(a, w))(w),
                               torch.func.jacrev(lambda w: dense @ w)(w))
    batch = torch.stack([w, 2 * w])
    torch.testing.assert_close(torch.func.vmap(lambda w: st.ops.dot(a, w))(batch), dense @ batch)
    torch.testing.assert_close(torch.func.vmap(torch.func.grad(lambda w: st.ops.tanh(st.ops.dot(a, w)).sum()))(batch),
                               torch.func.vmap(torch.func.grad(lambda w: torch.tanh(dense @ w).sum()))(batch))


def test_vmap_over_an_empty_batch_gives_empty_results_as_torch_does():
    """No example to run: the results are empty, shaped by the op's rules (its fake on meta
    tensors), as torch's own ops give them under vmap; grad under vmap too."""
    w, x = _seeded(5, 3, seed=1), torch.empty(0, 5, dtype=F64)
    got = torch.func.vmap(lambda r: st.ops.tanh(st.ops.dot(r[None], w))[0])(x)
    assert got.shape == torch.func.vmap(lambda r: torch.tanh(r[None] @ w)[0])(x).shape == (0, 3)
    assert got.dtype == F64
    per_example = torch.func.vmap(torch.func.grad(lambda r: st.ops.smooth_l1(r, scalar=1.0).sum()))(x)
    assert per_example.shape == (0, 5)


def test_what_the_transforms_cannot_serve_is_said():
    x = _seeded(4, 5)
    with pytest.raises(BridgeError, match="forward-mode.*jacrev"):  # (tanh, lowered to torch.tanh, takes it)
        torch.func.jacfwd(st.ops.hard_sigmoid)(x)
    with pytest.raises(BridgeError, match="sparse results.*per example"):
        torch.func.vmap(lambda r: st.ops.cast_storage(r[None], stype="csr").values.sum())(x)
    with pytest.raises(BridgeError, match="Dropout.*randomness='different'"):
        torch.func.vmap(lambda r: st.ops.Dropout(r, p=0.5))(x)
    out = torch.func.vmap(lambda r: st.ops.Dropout(r, p=0.5), randomness="different")(x)
    assert bool(((out == 0) | torch.isclose(out, 2 * x)).all())


# ---- 3. Dropout follows training= ---------------------------------------------------------------------
def test_dropout_follows_training_as_torch_nn_functional_dropout_does():
    x = _seeded(50, 40) + 3.0  # no zeros of its own
    y = st.ops.Dropout(x, p=0.25)  # training=True by default, as in F.dropout
    dropped = y == 0
    assert 0.15 < dropped.double().mean().item() < 0.35
    torch.testing.assert_close(y[~dropped], x[~dropped] / 0.75)
    torch.testing.assert_close(st.ops.Dropout(x, p=0.25, training=False), x, rtol=0, atol=0)
    assert bool((st.ops.Dropout(x, p=0.25, mode="always", training=False) == 0).any())  # MXNet's "always"
    xr = x.clone().requires_grad_(True)
    out = st.ops.Dropout(xr, p=0.25)
    out.sum().backward()
    torch.testing.assert_close(xr.grad, (out.detach() != 0).to(F64) / 0.75)  # the mask the forward drew
    with pytest.raises(BridgeError, match="training must be a bool"):
        st.ops.Dropout(x, p=0.25, training="yes")


@pytest.mark.parametrize("how", ["eager", "eager with grad", "compiled"])
def test_random_ops_follow_torch_manual_seed(how):
    """A bridged random op draws from a generator seeded by torch's default one, so
    ``torch.manual_seed`` reproduces it as it does ``F.dropout`` (and the next call draws
    anew), eagerly, recorded and compiled; a sampler with no inputs too."""
    x = torch.ones(8, 16, requires_grad=how == "eager with grad")
    f = torch.compile(lambda x: st.ops.Dropout(x, p=0.5), fullgraph=True, backend="aot_eager") \
        if how == "compiled" else (lambda x: st.ops.Dropout(x, p=0.5))
    torch.manual_seed(5)
    a, b = f(x), f(x)
    torch.manual_seed(5)
    torch.testing.assert_close(f(x), a, rtol=0, atol=0)
    assert not torch.equal(a, b)
    torch.manual_seed(6)
    u = st.ops._random_uniform(shape=(4,))
    torch.manual_seed(6)
    torch.testing.assert_close(st.ops._random_uniform(shape=(4,)), u, rtol=0, atol=0)


def test_opcheck_takes_dropouts_default_overload():
    """opcheck seeds torch before each run it compares (eager, AOT dispatch): Dropout's
    draws follow it, so its documented overload passes."""
    torch.library.opcheck(torch.ops.sparse_ops.Dropout.default, (torch.ones(4, 8), encode_params({"p": 0.5})))


def test_vmap_of_dropout_in_eval_mode_draws_nothing_and_needs_no_randomness():
    """``training=False`` makes Dropout the identity, as ``F.dropout``: vmap takes it under
    its default ``randomness="error"``, as it takes ``F.dropout(training=False)``; training
    still asks for ``randomness="different"``."""
    x = _seeded(4, 6)
    torch.testing.assert_close(torch.func.vmap(lambda r: st.ops.Dropout(r, p=0.5, training=False))(x), x,
                               rtol=0, atol=0)
    with pytest.raises(BridgeError, match="randomness='different'"):
        torch.func.vmap(lambda r: st.ops.Dropout(r, p=0.5))(x)


class DropoutNet(torch.nn.Module):
    def forward(self, x):
        return st.ops.Dropout(x, p=0.5, training=self.training)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_a_module_passes_self_training_and_follows_train_and_eval(compiled):
    torch._dynamo.reset()
    net = DropoutNet()
    f = torch.compile(net, fullgraph=True, backend="aot_eager") if compiled else net
    x = _seeded(20, 20) + 3.0
    assert bool((f(x) == 0).any())
    net.eval()
    torch.testing.assert_close(f(x), x, rtol=0, atol=0)
    net.train()
    assert bool((f(x) == 0).any())


def test_the_training_option_crosses_in_the_parameter_string():
    x = _seeded(3, 4) + 3.0
    out, mask = torch.ops.sparse_ops.Dropout.default(x, encode_params({"p": 0.5, "@training": False}))
    torch.testing.assert_close(out, x, rtol=0, atol=0)
    torch.testing.assert_close(mask, torch.ones_like(x), rtol=0, atol=0)
    with pytest.raises(BridgeError, match="unknown bridge option.*@trainig"):
        torch.ops.sparse_ops.Dropout.default(x, encode_params({"@trainig": False}))


# ---- 3. opcheck and explain -------------------------------------------------------------------------------
def test_opcheck_runs_on_the_default_overload_of_every_fixed_arity_op():
    """Dropout (two outputs: the result and its mask) has a ``default`` overload now, like
    relu; torch.library.opcheck runs all four of its checks there."""
    for name in ("relu", "Dropout", "dot"):
        assert "default" in torch.ops.sparse_ops.__getattr__(name).overloads(), name
    x = _seeded(3, 4).requires_grad_(True)
    checks = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    for op, args in ((torch.ops.sparse_ops.relu.default, (x,)),
                     (torch.ops.sparse_ops.Dropout.default, (x, encode_params({"p": 0.5, "@training": False}))),
                     (torch.ops.sparse_ops.dot.default, (x, _seeded(4, 2, seed=1).requires_grad_(True)))):
        assert torch.library.opcheck(op, args) == {c: "SUCCESS" for c in checks}


def test_st_opcheck_finds_the_overload_of_any_call():
    """Sparse operands (dot.cd_d), variadic ops (add_n.ddd_d), parameters deciding the number of
    outputs (split.d_ddd): st.opcheck checks the overload the bridged call runs."""
    checks = {c: "SUCCESS" for c in ("test_schema", "test_autograd_registration", "test_faketensor",
                                     "test_aot_dispatch_dynamic")}
    a = st.to_torch(so.csr_matrix(_csr(seed=5))).requires_grad_(True)
    w = _seeded(5, 3).requires_grad_(True)
    assert st.opcheck("dot", a, w) == checks
    xs = [_seeded(2, 3, seed=s).requires_grad_(True) for s in range(3)]
    assert st.opcheck("add_n", *xs) == checks
    assert st.opcheck("split", _seeded(2, 6).requires_grad_(True), axis=1, num_outputs=3) == checks
    assert st.explain("add_n", *xs)["overload"] == "torch.ops.sparse_ops.add_n.ddd_d"
    assert st.explain("split", xs[0], axis=1, num_outputs=3)["overload"] == "torch.ops.sparse_ops.split.d_ddd"


def test_explain_says_how_a_call_runs():
    a = st.to_torch(so.csr_matrix(_csr(seed=6)))
    w = torch.nn.Parameter(_seeded(5, 3))
    info = st.explain("dot", a, w)
    assert info["overload"] == "torch.ops.sparse_ops.dot.cd_d"
    assert info["in_stypes"] == ["csr", "default"] and info["out_stypes"] == ["default"]
    assert info["out_shapes"] == [[6, 3]]
    assert info["opcheck"].startswith("torch.library.opcheck(torch.ops.sparse_ops.dot.cd_d, (<lhs_values>")
    assert info["gradients"]["rhs"].startswith("dense")
    assert info["vmap"].startswith("a loop over the batch")
    assert "setup_context" in info["torch.func"] and "jacfwd: not supported" in info["torch.func"]
    assert info["faces"]["torch.grad"] == "yes"
    assert st.explain("dot", a, st.sparse_grad(w))["gradients"]["rhs"].startswith("sparse COO")
    assert st.explain("Dropout", w, p=0.5, training=False)["training"] is False
    assert "randomness='different'" in st.explain("Dropout", w, p=0.5)["vmap"]
    assert st.explain("cast_storage", w, stype="csr")["vmap"].startswith("refused")
    ids = torch.tensor([0, 2, 2])  # integer ids get no gradient in torch: said so, not "dense"
    grads = st.explain("Embedding", ids, torch.nn.Parameter(_seeded(5, 3)), input_dim=5, output_dim=3)["gradients"]
    assert grads == {"data": "none: torch.int64 values have no gradient in torch",
                     "weight": "dense (sparse_ops.torch.sparse_grad(t) marks a leaf for a sparse COO gradient)"}


# ---- 3. errors in torch's words ---------------------------------------------------------------------
def test_dtype_errors_name_torch_dtypes_and_convert_with_to():
    x32, x64 = torch.ones(2, 2), torch.ones(2, 2, dtype=F64)
    calls = [lambda: st.ops.add_n(x32, x64),
             lambda: torch.ops.sparse_ops.add_n.dd_d(x32, x64),
             lambda: torch.compile(lambda a, b: st.ops.add_n(a, b), fullgraph=True, backend="aot_eager")(x32, x64)]
    for call in calls:
        with pytest.raises(RuntimeError) as err:
            call()
        text = str(err.value)
        assert "input 1 is torch.float64 but input 0 is torch.float32" in text
        assert "convert one with .to(torch.float32)" in text and ".astype" not in text
    with pytest.raises(BridgeError, match=r"sgd_update.*'grad' is torch\.float64 but 'weight' is torch\.float32.*"
                                          r"convert one with \.to\(torch\.float32\)") as err:
        st.ops.sgd_update(torch.ones(3), torch.ones(3, dtype=F64), lr=0.1)
    assert isinstance(err.value.__cause__, so.OperatorError)  # the library's own error, kept
    assert "float64" in str(err.value.__cause__) and "torch.float64" not in str(err.value.__cause__)
    with pytest.raises(BridgeError, match=r"dtype torch\.bool are not supported .*torch\.float32"):
        st.ops.relu(torch.ones(2, dtype=torch.bool))


def test_a_dtype_parameter_hint_is_one_a_torch_user_can_follow():
    """The hint of a refused dtype parameter names the torch dtype to pass, and passing it
    works (it said ``dtype='torch.float16'``, which the parameter refuses)."""
    w, ids = torch.randn(4, 2, dtype=torch.float16), torch.tensor([0, 3])
    with pytest.raises(BridgeError, match=r"pass dtype=torch\.float16$"):
        st.ops.Embedding(ids, w, input_dim=4, output_dim=2)
    out = st.ops.Embedding(ids, w, input_dim=4, output_dim=2, dtype=torch.float16)
    torch.testing.assert_close(out, w[ids])


def test_an_authors_own_error_text_is_quoted_as_written(isolated):
    """A kernel's exception text is the author's words: the bridge rewords its own messages
    for torch users, never the quoted ones (eagerly and through torch.ops)."""
    @so.register("th_picky")
    class Picky(so.Op):
        @so.kernel(device="cpu")
        def dense(self, ctx, x, out):
            raise ValueError("need float32 input, dtype int8 is not supported; use .astype()")

    said = "ValueError: need float32 input, dtype int8 is not supported; use .astype()"
    for call in (lambda: st.ops.th_picky(torch.ones(2)), lambda: torch.ops.sparse_ops.th_picky.default(torch.ones(2), "")):
        with pytest.raises(RuntimeError) as err:
            call()
        assert said in str(err.value) and "th_picky" in str(err.value)
    x32, x64 = torch.ones(2, 2), torch.ones(2, 2, dtype=F64)
    with pytest.raises(BridgeError, match=r"convert one with \.to\(torch\.float32\)"):  # ours still speak torch
        st.ops.add_n(x32, x64)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.bool, torch.int8, torch.complex64])
def test_a_refused_dtype_under_compile_is_worded_as_eagerly(dtype):
    """The refusal of a dtype we do not hold, traced by Dynamo, carries the eager wording
    (Dynamo could not trace the wording's ``np.dtype`` on a torch dtype, and raised an
    internal error about it instead)."""
    with pytest.raises(RuntimeError) as err:
        torch.compile(lambda x: st.ops.relu(x), fullgraph=True, backend="eager")(torch.ones(2, dtype=dtype))
    assert f"arrays of dtype {dtype} are not supported" in str(err.value)
    assert ".to(torch.float32)" in str(err.value) and "Cannot interpret" not in str(err.value)


def test_out_is_refused_in_torch_terms():
    for name in ("exp", "relu"):
        with pytest.raises(BridgeError, match=rf"sparse_ops.torch.ops.{name}: out= is not taken on the torch face"):
            getattr(st.ops, name)(torch.ones(2), out=torch.empty(2))
    torch.testing.assert_close(st.ops.exp(torch.zeros(2)), torch.ones(2))
