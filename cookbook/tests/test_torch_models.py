"""The cookbook's models in PyTorch (``sparse_ops_cookbook.torch_models``) against their
sparse-ops-native twins and against NumPy: same data, same initial weights, losses and
parameters equal within rtol 1e-5 after several optimizer steps; the sparse gradients
torch's optimizers receive; ``torch.compile(fullgraph=True)``; ``sparse-ops demo --torch``.

Needs PyTorch (the README's test command installs a CPU build) and the bridge
``sparse_ops.torch``.
"""
import subprocess
import sys

import numpy as np
import pytest
import torch  # not importorskip: CI installs a CPU build (the README's test command) and never skips these

import cookbook_helpers  # noqa: F401  (first of ours: puts the cookbook on sys.path when not installed)
import sparse_ops.torch as sot
from sparse_ops import autograd
from sparse_ops.cli import main
from sparse_ops_cookbook.demo import torch_demo
from sparse_ops_cookbook.demo.ctr import FactorizationMachine as NativeFM, _batches, logistic_loss
from sparse_ops_cookbook.demo.data import make_click_log, stochastic_block_model
from sparse_ops_cookbook.demo.twins import NativeGCN, attention_scale, gcn_inputs, gcn_weights
from sparse_ops_cookbook.torch_models import GCN, FactorizationMachine, compile_models, to_torch_csr


@pytest.fixture(scope="module")
def graph():
    return stochastic_block_model(blocks=3, size=40, p_in=0.15, p_out=0.01, seed=2)


@pytest.fixture(scope="module")
def clicks():
    return make_click_log(n_examples=6000, n_features=1 << 14, seed=1)


def numpy_gcn_loss(graph, weights, attention):
    """The GCN's cross-entropy from its initial weights, in float64 NumPy (no sparse_ops, no torch)."""
    indptr, indices, data = graph.adjacency
    n = graph.n_nodes
    a = np.zeros((n, n))
    a[np.repeat(np.arange(n), np.diff(indptr)), indices] = data
    a += np.eye(n)
    d = 1 / np.sqrt(a.sum(axis=1))
    a_hat = a * d[:, None] * d[None, :]
    w = {k: v.astype(np.float64) for k, v in weights.items()}

    def layer(h, l):
        z = h @ w[f"w{l}"]
        if not attention:
            return a_hat @ z
        s = np.where(a_hat != 0, (z @ w[f"q{l}"]) @ (z @ w[f"k{l}"]).T * attention_scale(w["q1"].shape[1]), -np.inf)
        e = np.exp(s - s.max(axis=1, keepdims=True))
        return (e / e.sum(axis=1, keepdims=True)) @ z

    logits = layer(np.maximum(layer(graph.features.astype(np.float64), 1), 0), 2)[graph.train_nodes]
    lse = np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1)) + logits.max(1)
    return float(np.mean(lse - logits[np.arange(len(logits)), graph.labels[graph.train_nodes]]))


def test_importing_the_cookbook_and_its_demo_imports_no_torch():
    code = ("import sys, sparse_ops_cookbook, sparse_ops_cookbook.demo, sparse_ops_cookbook.demo.torch_demo, "
            "sparse_ops_cookbook.demo.twins; assert 'torch' not in sys.modules, 'torch imported'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=cookbook_helpers.COOKBOOK_DIR)
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.parametrize("attention", [False, True], ids=["gcn", "attention"])
def test_gcn_matches_its_native_twin_step_by_step(graph, attention):
    r = torch_demo.compare_gcn(graph, steps=8, attention=attention, seed=3)
    assert r.agree, (r.native_losses, r.torch_losses, r.param_rel_diff)
    np.testing.assert_allclose(r.torch_losses, r.native_losses, rtol=1e-5)
    assert r.torch_losses[-1] < r.torch_losses[0] - 0.05  # it learns
    weights = gcn_weights(graph.features.shape[1], 16, graph.n_classes, attention=attention, seed=3)
    assert r.torch_losses[0] == pytest.approx(numpy_gcn_loss(graph, weights, attention), rel=1e-5)


def test_attention_gradients_reach_the_query_and_key_maps(graph):
    """The scores' csr values get gradients through csr_row_softmax and csr_spmm, so the
    query and key maps get theirs: every gradient equals the native one."""
    weights = gcn_weights(graph.features.shape[1], 16, graph.n_classes, attention=True, seed=4)
    a_hat, x, rows, onehot = gcn_inputs(graph)
    native = NativeGCN(weights)
    with autograd.record():
        native_loss = native.loss(a_hat, x, rows, onehot)
    native_loss.backward()
    model = GCN(0, 0, 0, weights=weights)
    loss = model.loss(to_torch_csr(a_hat), torch.from_numpy(graph.features), torch.from_numpy(graph.train_nodes),
                      torch.from_numpy(graph.labels[graph.train_nodes]))
    loss.backward()
    assert loss.item() == pytest.approx(float(native_loss.asnumpy()), rel=1e-6)
    for name in ("w1", "w2", "q1", "k1", "q2", "k2"):
        grad = getattr(model, name).grad
        assert grad.layout == torch.strided and grad.abs().max() > 0, name
        np.testing.assert_allclose(grad.numpy(), native.params[name].grad.asnumpy(), rtol=1e-4, atol=1e-7)


def test_factorization_machine_matches_its_native_twin_step_by_step(clicks):
    r = torch_demo.compare_fm(clicks, steps=5, batch_size=512, seed=2)
    assert r.agree, (r.native_losses, r.torch_losses, r.param_rel_diff)
    np.testing.assert_allclose(r.torch_losses, r.native_losses, rtol=1e-5)
    assert r.native_losses[0] == pytest.approx(np.log(2), abs=1e-3)  # w = b = 0, V tiny: logits ~0


def test_fm_gradients_are_sparse_coo_with_the_batch_rows(clicks):
    """w and V get sparse COO gradients with one row per feature of the batch, equal to the
    native row_sparse ones; torch's Adagrad moves only those rows."""
    x, y = _batches(clicks, 256)[0]
    native = NativeFM(clicks.n_features, seed=5)
    with autograd.record():
        loss = logistic_loss(native.logits(x), y)
    loss.backward()
    model = FactorizationMachine.from_native(native)
    xt = to_torch_csr(x)
    model.loss(xt, torch.from_numpy(y.asnumpy())).backward()
    present = np.unique(x.indices)
    for name in ("w", "v"):
        grad, expected = getattr(model, name).grad, getattr(native, name).grad
        assert grad.layout == torch.sparse_coo and grad.sparse_dim() == 1, name
        grad = grad.coalesce()
        np.testing.assert_array_equal(grad.indices()[0].numpy(), present)
        assert expected.stype == "row_sparse"
        np.testing.assert_array_equal(np.asarray(expected.indices), present)
        np.testing.assert_allclose(grad.values().numpy(), expected.data, rtol=1e-5, atol=1e-8)
    before = model.v.detach().clone()
    model.adagrad().step()
    moved = (model.v.detach() != before).any(dim=1).numpy()
    assert moved[present].any() and not moved[np.setdiff1d(np.arange(clicks.n_features), present)].any()


def test_sparse_adam_takes_the_fm_gradient(clicks):
    """torch.optim.SparseAdam runs on the bridge's gradient of fm_interaction and moves V as
    it does with the gradient computed by hand in NumPy."""
    x, _ = _batches(clicks, 128)[0]
    model = FactorizationMachine(clicks.n_features, seed=6)
    head = torch.linspace(-1, 1, x.shape[0])
    start = model.v.detach().clone()
    opt = torch.optim.SparseAdam([model.v], lr=0.01)
    (sot.ops.fm_interaction(to_torch_csr(x), model.v) * head).sum().backward()
    opt.step()
    # dV = X.T (g * (X V)) - V * ((X * X).T g), nonzero on the batch's features only
    m, v0, g = x.asscipy(), start.numpy().astype(np.float64), head.numpy().astype(np.float64)
    dense = m.T @ (g[:, None] * (m @ v0)) - v0 * (m.multiply(m).T @ g)[:, None]
    present = np.unique(x.indices)
    ref = torch.nn.Parameter(start.clone())
    ref.grad = torch.sparse_coo_tensor(torch.from_numpy(present[None].astype(np.int64)),
                                       torch.from_numpy(dense[present].astype(np.float32)), tuple(start.shape))
    torch.optim.SparseAdam([ref], lr=0.01).step()
    # Adam's first step is lr * g / (|g| + eps): where g is within float32 rounding of 0 (the
    # bridge's float32 product vs the float64 reference) it moves by up to lr * that rounding
    np.testing.assert_allclose(model.v.detach().numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert not np.array_equal(model.v.detach().numpy()[present], start.numpy()[present])


def test_both_models_compile_with_fullgraph_and_match_eager(graph, clicks):
    """torch.compile(fullgraph=True) traces each model's loss through torch.ops.sparse_ops
    on component tensors with no graph break (a break raises); the compiled loss and
    gradients equal the eager ones (compile_models compares them)."""
    results = compile_models(graph, clicks, seed=1, batch_size=128)
    assert set(results) == {"GCN", "GCN with attention", "factorization machine"}
    for name, (ok, detail) in results.items():
        assert ok, f"{name}: {detail}"


def test_demo_torch_from_the_command_line(capsys):
    assert main(["demo", "--torch", "--quick", "--graph", "sbm"]) == 0
    out = capsys.readouterr().out
    assert out.count("AGREE at rtol 1e-05") == 3 and "DISAGREE" not in out
    assert "step   1: loss native" in out and out.count("step time: native") == 3
    assert "every model agrees with its native twin" in out
    assert out.count("compiled (backend aot_eager, fullgraph; loss and gradients equal the eager ones)") == 3


def test_demo_torch_without_torch(monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    assert main(["demo", "--torch", "--quick"]) == 1
    assert "pip install 'sparse-ops[torch]'" in capsys.readouterr().err
