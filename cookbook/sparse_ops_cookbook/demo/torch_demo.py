"""``sparse-ops demo --torch``: the cookbook's models in PyTorch (``torch_models``), each
trained next to its sparse-ops-native twin from the same initial weights on the same data,
step by step: the losses and parameters must agree (rtol 1e-5), and each side's step is
timed.

1. the click-log factorization machine: ``embedding_bag`` + ``fm_interaction`` through
   the bridge, sparse COO gradients, ``torch.optim.Adagrad``; twin: ``demo.ctr``'s model
   with row_sparse gradients and ``lazy_adagrad``;
2. the 2-layer GCN (``csr_spmm``), plain and with ``csr_row_softmax`` attention, Adam;
   twin: ``demo.twins.NativeGCN``;
3. whether ``torch.compile(fullgraph=True)`` compiles each model (``compile_check``).

Importing this module imports no torch; ``run`` and the comparisons do.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

RTOL = 1e-5


@dataclass
class Comparison:
    """One model trained natively and in PyTorch from the same start."""

    name: str
    native_losses: list = field(default_factory=list)
    torch_losses: list = field(default_factory=list)
    param_rel_diff: float = float("nan")  # max over parameters of max|a - b| / max|b| at the end
    params_close: bool = False  # every parameter within rtol (and a small atol), elementwise
    native_ms: float = float("nan")  # median step time
    torch_ms: float = float("nan")

    @property
    def loss_rel_diff(self) -> float:
        a, b = np.asarray(self.native_losses), np.asarray(self.torch_losses)
        return float(np.max(np.abs(a - b) / np.abs(b)))

    @property
    def agree(self) -> bool:
        return (len(self.native_losses) == len(self.torch_losses) > 0 and self.params_close
                and bool(np.allclose(self.torch_losses, self.native_losses, rtol=RTOL, atol=0)))


def _compare_params(native: dict, ours: dict, atol: float) -> tuple[float, bool]:
    rel = max(float(np.max(np.abs(native[k] - ours[k]))) / max(float(np.max(np.abs(native[k]))), 1e-30)
              for k in native)
    close = all(np.allclose(ours[k], native[k], rtol=RTOL, atol=atol) for k in native)
    return rel, close


def _timed(fn: Callable[[], float], times: list) -> float:
    t0 = time.perf_counter()
    value = fn()
    times.append(time.perf_counter() - t0)
    return value


def compare_fm(data: Any, steps: int = 8, batch_size: int = 4096, k: int = 8, lr: float = 0.05,
               seed: int = 0, log: Callable[[str], None] | None = None) -> Comparison:
    """Train the factorization machine ``steps`` minibatches natively and through the bridge
    (the same batches in the same order, the same initial weights); the first step of each
    (numba compiling, or loading its cache) is not timed."""
    import torch

    from ..torch_models import FactorizationMachine as TorchFM, to_torch_csr
    from .ctr import FactorizationMachine, _batches, warm_up

    batches = _batches(data, batch_size)[:steps]
    warm_up(data.n_features, k, batches[0][0][:64], batches[0][1][:64])
    native = FactorizationMachine(data.n_features, k=k, lr=lr, seed=seed)
    model = TorchFM.from_native(native)
    opt = model.adagrad(lr=lr)
    result = Comparison("factorization machine (embedding_bag + fm_interaction, Adagrad)")
    native_t, torch_t = [], []
    for i, (x, y) in enumerate(batches):
        xt, yt = to_torch_csr(x), torch.from_numpy(y.asnumpy())

        def torch_step() -> float:
            opt.zero_grad(set_to_none=True)
            loss = model.loss(xt, yt)
            loss.backward()
            opt.step()
            return loss.detach().item()

        a = _timed(lambda: native.step(x, y), native_t)
        b = _timed(torch_step, torch_t)
        result.native_losses.append(a)
        result.torch_losses.append(b)
        if log:
            log(f"  step {i + 1:3d}: loss native {a:.6f}  torch {b:.6f}  |difference| {abs(a - b):.1e}")
    result.param_rel_diff, result.params_close = _compare_params(
        {n: getattr(native, n).asnumpy() for n in ("w", "v", "b")}, model.arrays(), atol=1e-7)
    result.native_ms = 1e3 * statistics.median(native_t[1:] or native_t)
    result.torch_ms = 1e3 * statistics.median(torch_t[1:] or torch_t)
    return result


def compare_gcn(graph: Any, steps: int = 30, attention: bool = False, hidden: int = 16, lr: float = 0.01,
                weight_decay: float = 5e-4, seed: int = 0, log: Callable[[str], None] | None = None) -> Comparison:
    """Train the 2-layer GCN (``attention``: with csr_row_softmax attention) ``steps`` Adam
    steps natively and through the bridge, from ``gcn_weights(..., seed)``."""
    import torch

    from ..torch_models import GCN, to_torch_csr
    from .twins import NativeGCN, gcn_inputs, gcn_weights

    a_hat, x, rows, onehot = gcn_inputs(graph)
    weights = gcn_weights(x.shape[1], hidden, graph.n_classes, attention=attention, seed=seed)
    native = NativeGCN(weights)
    model = GCN(x.shape[1], hidden, graph.n_classes, weights=weights)
    opt = model.optimizer(lr=lr, weight_decay=weight_decay)
    at, xt = to_torch_csr(a_hat), torch.from_numpy(x.asnumpy())
    rt, labels = torch.from_numpy(rows.asnumpy()), torch.from_numpy(graph.labels[graph.train_nodes])
    name = "GCN with csr_row_softmax attention" if attention else "GCN (csr_spmm)"
    result = Comparison(f"{name}, Adam")
    native_t, torch_t = [], []

    def torch_step() -> float:
        opt.zero_grad(set_to_none=True)
        loss = model.loss(at, xt, rt, labels)
        loss.backward()
        opt.step()
        return loss.detach().item()

    for i in range(steps):
        a = _timed(lambda: native.step(a_hat, x, rows, onehot, lr=lr, weight_decay=weight_decay), native_t)
        b = _timed(torch_step, torch_t)
        result.native_losses.append(a)
        result.torch_losses.append(b)
        if log:
            log(f"  step {i + 1:3d}: loss native {a:.6f}  torch {b:.6f}  |difference| {abs(a - b):.1e}")
    result.param_rel_diff, result.params_close = _compare_params(native.arrays(), model.arrays(), atol=1e-6)
    result.native_ms = 1e3 * statistics.median(native_t[1:] or native_t)
    result.torch_ms = 1e3 * statistics.median(torch_t[1:] or torch_t)
    return result


def run(quick: bool = False, seed: int = 0, graph: str = "auto", log: Callable[[str], None] = print,
        compile_models: bool = True) -> dict[str, Any]:
    """The whole ``--torch`` demo; returns the comparisons and ``ok`` (every model agrees
    with its twin)."""
    import torch

    from .data import karate_club, make_click_log, stochastic_block_model

    start = time.perf_counter()
    fm_steps, gcn_steps = (4, 10) if quick else (8, 30)
    log(f"PyTorch {torch.__version__} ({torch.get_num_threads()} threads); every model trained natively and "
        f"through sparse_ops.torch from the same weights on the same data")
    log("\n== 1. factorization machine on a click log: embedding_bag + fm_interaction, sparse COO gradients, "
        "torch.optim.Adagrad")
    data = make_click_log(n_examples=60_000 if quick else 200_000, n_features=1 << 20, seed=seed)
    batch = 1024 if quick else 4096
    log(f"data: {data.n_train:,} impressions, {data.n_features:,} features; {fm_steps} batches of {batch}")
    results = [compare_fm(data, steps=fm_steps, batch_size=batch, seed=seed, log=log)]
    _summary(results[-1], log)

    g = karate_club() if graph in ("auto", "karate") else None
    g = g if g is not None else stochastic_block_model(seed=seed)
    for attention in (False, True):
        title = "with csr_row_softmax attention" if attention else "csr_spmm"
        log(f"\n== {2 + attention}. 2-layer GCN, {title}, Adam: {g.name}, {g.n_nodes} nodes, {g.n_edges} edges")
        results.append(compare_gcn(g, steps=gcn_steps, attention=attention, seed=seed, log=log))
        _summary(results[-1], log)

    compiled = {}
    if compile_models:
        log("\n== torch.compile(fullgraph=True) through torch.ops.sparse_ops on component tensors")
        compiled = compile_check(g, data, seed=seed)
        for name, (ok, detail) in compiled.items():
            log(f"{name}: {'compiled' if ok else 'NOT compiled'} ({detail})")
    ok = all(r.agree for r in results)
    log(f"\ndemo --torch finished in {time.perf_counter() - start:.1f} s: "
        + ("every model agrees with its native twin" if ok else "a model DISAGREES with its native twin"))
    return {"ok": ok, "comparisons": results, "compiled": compiled}


def _summary(r: Comparison, log: Callable[[str], None]) -> None:
    log(f"agreement: losses within {r.loss_rel_diff:.1e} (relative), parameters within {r.param_rel_diff:.1e} "
        f"(max |difference| / max |value|): {'AGREE' if r.agree else 'DISAGREE'} at rtol {RTOL}")
    log(f"step time: native {r.native_ms:.2f} ms, torch {r.torch_ms:.2f} ms "
        f"(torch / native {r.torch_ms / r.native_ms:.2f}; first step untimed)")


def compile_check(graph: Any, data: Any, seed: int = 0, backend: str = "aot_eager") -> dict[str, tuple[bool, str]]:
    """For each model, whether ``torch.compile(fullgraph=True)`` compiles its training loss
    on component tensors, and whether it gives the eager loss and gradients
    (``torch_models.compile_models``)."""
    from ..torch_models import compile_models

    return compile_models(graph, data, seed=seed, backend=backend)


__all__ = ["run", "compare_fm", "compare_gcn", "compile_check", "Comparison", "RTOL"]
