"""Whole training steps next to the same model written in PyTorch (issue 18, item 3).

(a) **Embedding step with its loss**: a 1M x 64 float32 table, 4,096 Zipf(1.2) ids,
``e = Embedding(ids, w, sparse_grad=True)``, ``loss = sum(e * e)``, backward, lazy
``sgd_update``; PyTorch: ``nn.Embedding(sparse=True)``, ``(e * e).sum()``, backward,
``torch.optim.SGD``. Unlike ``bench_embedding`` (backward from a given head gradient),
the elementwise product, the sum and their gradients are part of the step.

(b) **Factorization machine step**: the demo's model (``demo.ctr.FactorizationMachine``:
``embedding_bag`` + ``fm_interaction`` + bias, mean logistic loss, lazy AdaGrad on
row_sparse gradients) on a 4,096-row batch of the demo's click log (1M features), against
the same model written in plain PyTorch: ``F.embedding_bag(..., sparse=True)`` for the
linear term and for sum_j x_j v_j, ``F.embedding(..., sparse=True)`` and ``index_add_``
for sum_j x_j^2 v_j^2, ``binary_cross_entropy_with_logits`` and ``torch.optim.Adagrad``
(sparse gradients, the same learning rate and initial history).

Ours and PyTorch take turns (``_timing.alternating``); the ratio is the median of the
per-round ratios. PyTorch runs with its faster thread count (1 or numba's). 'same result'
runs one step of each from the same parameters and compares the updated parameters.
"""
from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

import sparse_ops as so
from sparse_ops import autograd as ag

from ._timing import alternating, markdown_table, paired_ratio, torch_best_threads, torch_threads
from .bench_embedding import make_problem

RESULTS = Path(__file__).resolve().parent / "results"
TARGETS = {"embedding_loss": 0.8, "fm": 0.8}
EMBEDDING_LR = 1e-3  # small enough that the most frequent ids' rows (hundreds of repeats) stay finite


@dataclass
class StepRow:
    case: str
    ours_ms: float
    torch_ms: float | None
    ratio: float | None
    threads: int | None
    same: bool | None

    def row(self, target: float) -> list[str]:
        na = "n/a"
        verdict = na if self.ratio is None else ("met" if self.ratio <= target else "**NOT met**")
        return [self.case, f"{self.ours_ms:.3f}",
                na if self.torch_ms is None else f"{self.torch_ms:.3f} ({self.threads} thr.)",
                na if self.ratio is None else f"{self.ratio:.2f}", f"<= {target}x", verdict,
                na if self.same is None else ("yes" if self.same else "**NO**")]


def _torch() -> Any | None:
    try:
        import torch
    except ImportError:
        return None
    return torch


# ---- (a) embedding step with its loss -----------------------------------------------------------
def embedding_ours(weight: np.ndarray, ids: np.ndarray) -> tuple[Callable[[], None], so.NDArray]:
    w = so.array(weight.copy())
    w.attach_grad(stype="row_sparse")
    x = so.array(ids)
    rows, width = weight.shape

    def step() -> None:
        with ag.record():
            e = so.Embedding(x, w, input_dim=rows, output_dim=width, sparse_grad=True)
            loss = so.sum(e * e)
        loss.backward()
        so.sgd_update(w, w.grad, lr=EMBEDDING_LR, lazy_update=True, out=w)

    return step, w


def embedding_torch(weight: np.ndarray, ids: np.ndarray) -> tuple[Callable[[], None], Any]:
    torch = _torch()
    emb = torch.nn.Embedding(*weight.shape, sparse=True)
    with torch.no_grad():
        emb.weight.copy_(torch.from_numpy(weight))
    opt = torch.optim.SGD(emb.parameters(), lr=EMBEDDING_LR)
    t_ids = torch.from_numpy(ids)

    def step() -> None:
        opt.zero_grad()
        e = emb(t_ids)
        (e * e).sum().backward()
        opt.step()

    return step, emb.weight


def run_embedding(scale: int, rounds: int, calls: int) -> StepRow:
    p = make_problem(rows=1_000_000 // scale, batch=max(4096 // scale, 16))
    ours, w = embedding_ours(p.weight, p.ids)
    case = f"embedding step with loss, {p.rows:,} x {p.width} table, {p.ids.shape[0]:,} ids"
    if _torch() is None:
        t = alternating({"ours": ours}, rounds=rounds, calls=calls)
        return StepRow(case, statistics.median(t["ours"]) * 1e3, None, None, None, None)
    ref, tw = embedding_torch(p.weight, p.ids)
    # one step each from the same table: the updated rows agree
    check_ours, cw = embedding_ours(p.weight, p.ids)
    check_ref, ctw = embedding_torch(p.weight, p.ids)
    check_ours()
    check_ref()
    same = bool(np.allclose(cw.asnumpy(), ctw.detach().numpy(), rtol=1e-4, atol=1e-6))
    import numba

    previous = torch_threads()
    try:
        threads = torch_best_threads(ref, (1, numba.get_num_threads()))
        t = alternating({"ours": ours, "torch": ref}, rounds=rounds, calls=calls)
    finally:
        torch_threads(previous)
    return StepRow(case, statistics.median(t["ours"]) * 1e3, statistics.median(t["torch"]) * 1e3,
                   paired_ratio(t["ours"], t["torch"]), threads, same)


# ---- (b) factorization machine step -------------------------------------------------------------
class TorchFM:
    """The demo's factorization machine in plain PyTorch, from the native model's parameters."""

    def __init__(self, native: Any, lr: float, init_history: float) -> None:
        torch = _torch()
        self.torch = torch
        self.w = torch.nn.Parameter(torch.from_numpy(native.w.asnumpy().copy()))
        self.v = torch.nn.Parameter(torch.from_numpy(native.v.asnumpy().copy()))
        self.b = torch.nn.Parameter(torch.from_numpy(native.b.asnumpy().copy()))
        self.opt = torch.optim.Adagrad([{"params": [self.w, self.v], "eps": 1e-10},
                                        {"params": [self.b], "eps": 1e-20}],
                                       lr=lr, initial_accumulator_value=init_history)

    def batch(self, x: so.CSRNDArray, y: so.NDArray) -> tuple:
        t = self.torch
        indptr, indices, values = (t.from_numpy(np.asarray(a)) for a in (x.indptr, x.indices, x.data))
        rows = t.repeat_interleave(t.arange(x.shape[0]), indptr[1:] - indptr[:-1])
        return indices.long(), indptr[:-1].long(), values, rows, t.from_numpy(y.asnumpy())

    def step(self, batch: tuple) -> None:
        t, F = self.torch, self.torch.nn.functional
        indices, offsets, values, rows, y = batch
        linear = F.embedding_bag(indices, self.w, offsets, mode="sum", per_sample_weights=values,
                                 sparse=True).reshape(-1)
        s = F.embedding_bag(indices, self.v, offsets, mode="sum", per_sample_weights=values, sparse=True)
        xv = F.embedding(indices, self.v, sparse=True) * values[:, None]
        q = t.zeros_like(s).index_add_(0, rows, xv * xv)
        logits = linear + 0.5 * (s * s - q).sum(dim=1) + self.b
        loss = F.binary_cross_entropy_with_logits(logits, y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()


def run_fm(scale: int, rounds: int, calls: int) -> StepRow:
    from sparse_ops_cookbook.demo.ctr import FactorizationMachine, _batches, warm_up
    from sparse_ops_cookbook.demo.data import make_click_log

    batch_size = max(4096 // scale, 64)
    data = make_click_log(n_examples=2 * batch_size + 100, n_features=(1 << 20) // scale)
    x, y = _batches(data, batch_size)[0]
    k, lr, init_history = 8, 0.05, 1e-5
    warm_up(data.n_features, k, x, y)
    native = FactorizationMachine(data.n_features, k=k, lr=lr, init_history=init_history)
    case = f"factorization machine step, {data.n_features:,} features, k = {k}, batch {x.shape[0]:,} ({x.nnz:,} values)"
    fns = {"ours": lambda: native.step(x, y)}
    if _torch() is None:
        t = alternating(fns, rounds=rounds, calls=calls)
        return StepRow(case, statistics.median(t["ours"]) * 1e3, None, None, None, None)
    # one step each from the same parameters: the updated parameters agree
    a = FactorizationMachine(data.n_features, k=k, lr=lr, init_history=init_history)
    b = TorchFM(a, lr, init_history)
    a.step(x, y)
    b.step(b.batch(x, y))
    same = all(np.allclose(getattr(a, n).asnumpy(), getattr(b, n).detach().numpy(), rtol=1e-4, atol=1e-6)
               for n in ("w", "v", "b"))
    ref_model = TorchFM(native, lr, init_history)
    tb = ref_model.batch(x, y)  # the conversion of the batch is not part of the step
    fns["torch"] = lambda: ref_model.step(tb)
    import numba

    previous = torch_threads()
    try:
        threads = torch_best_threads(fns["torch"], (1, numba.get_num_threads()))
        t = alternating(fns, rounds=rounds, calls=calls)
    finally:
        torch_threads(previous)
    return StepRow(case, statistics.median(t["ours"]) * 1e3, statistics.median(t["torch"]) * 1e3,
                   paired_ratio(t["ours"], t["torch"]), threads, same)


@dataclass
class Result:
    embedding: StepRow
    fm: StepRow
    scale: int


def run(quick: bool = False, scale: int | None = None) -> Result:
    scale = scale or (10 if quick else 1)
    rounds, calls = (40, 10) if scale == 1 else (4, 2)
    return Result(run_embedding(scale, rounds, calls), run_fm(scale, rounds, calls), scale)


HEADER = ["case", "ours (ms)", "PyTorch (ms)", "ours / PyTorch", "target", "verdict", "same result"]


# issue 18's per-call targets, read off ``bench_overhead``'s rows (case name before any
# parenthesis -> target)
PER_CALL_TARGETS = {"elemwise_mul 4x4 float32": ("<= 1.2x `torch.mul`", 1.2),
                    "MXNet-form Python custom op forward 4x4": ("<= 0.8x `torch.library.custom_op`", 0.8),
                    "MXNet-form Python custom op forward+backward 4x4": ("<= 0.5x `torch.library.custom_op`", 0.5)}


def per_call_rows(calls: list[list[str]]) -> list[list[str]]:
    """Verdict rows for the per-call targets from ``bench_overhead.run()["calls"]`` rows
    (case, ours us, reference us, ratio, ...)."""
    rows = []
    for case, ours, ref, ratio, *_ in calls:
        found = PER_CALL_TARGETS.get(case.split(" (")[0])
        if found is not None:
            target, bound = found
            verdict = "n/a" if ratio == "n/a" else ("met" if float(ratio) <= bound else "**NOT met**")
            rows.append([case, ours, ref, ratio, target, verdict])
    return rows


def report(result: Result, calls: list[list[str]] | None = None) -> str:
    parts = []
    if result.scale != 1:
        parts += [f"Sizes divided by {result.scale} in this run: the targets are set for the full sizes.", ""]
    parts.append(markdown_table(HEADER, [result.embedding.row(TARGETS["embedding_loss"]),
                                         result.fm.row(TARGETS["fm"])]))
    if calls:
        parts += ["", "Per-call overhead targets (from the per-call table above, 4x4 float32, in alternation):", "",
                  markdown_table(["case", "ours (us)", "PyTorch (us)", "ours / PyTorch", "target", "verdict"],
                                 per_call_rows(calls))]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> None:
    import datetime
    import os

    from ._timing import describe_machine

    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_training", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="every case 10x smaller (writes training-quick.md)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for training.md")
    args = parser.parse_args(argv)
    when, before = datetime.datetime.now().isoformat(timespec="seconds"), os.getloadavg()[0]
    result = run(quick=args.quick)
    lines = ["# Whole training steps vs PyTorch", "",
             f"Run {when} with `python -m benchmarks.bench_training{' --quick' if args.quick else ''}`; 1-minute "
             f"load average {before:.2f} before the run and {os.getloadavg()[0]:.2f} after it (2 cores shared with "
             "other users). Ratios are ours / PyTorch (below 1: we are faster).", "", "## Machine", ""]
    lines += [f"- {k}: {v}" for k, v in describe_machine().items()]
    lines += ["", "## Results", "", report(result), ""]
    text = "\n".join(lines)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / ("training-quick.md" if args.quick else "training.md")
    path.write_text(text)
    print(text)
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
