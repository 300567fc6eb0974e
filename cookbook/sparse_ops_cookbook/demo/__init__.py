"""The sparse-ops demo (``sparse-ops demo``, or ``python -m sparse_ops_cookbook.demo``).

1. Click-through-rate prediction: a factorization machine (``embedding_bag`` +
   ``fm_interaction``) trained on a generated click log with power-law feature
   frequencies, row_sparse gradients and lazy Adagrad (``lazy_adagrad``); per-epoch loss
   and AUC, the speed against the same step with dense gradients, a PNG of the loss curve.
2. Node classification: a 2-layer GCN (``gcn_norm`` + ``csr_spmm``) on Zachary's karate
   club (networkx) or a generated stochastic block model, to a stated accuracy.

``--torch`` (``demo/torch_demo.py``) trains both models in PyTorch through the bridge next
to their native twins instead, comparing every step.

Everything is deterministic for a given ``seed``. ``run`` returns the figures and says
whether each target was met; ``main`` is the command line.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

PNG_NAME = "sparse_ops_demo_loss.png"


@dataclass(frozen=True)
class Settings:
    """Sizes of one demo run and the targets it promises."""

    examples: int
    features: int
    batch_size: int
    epochs: int
    compare_batches: int
    gcn_epochs: int
    auc_target: float


FULL = Settings(examples=400_000, features=1 << 20, batch_size=4096, epochs=3, compare_batches=4,
                gcn_epochs=200, auc_target=0.75)
QUICK = Settings(examples=60_000, features=1 << 20, batch_size=1024, epochs=1, compare_batches=2,
                 gcn_epochs=100, auc_target=0.70)


def run(quick: bool = False, epochs: int | None = None, seed: int = 0, out: str = ".", graph: str = "auto",
        progress: bool = True, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run both parts of the demo, printing as it goes; returns the figures (see the keys
    of the returned dict) with ``ok`` True when every stated target was met."""
    from .ctr import train_ctr
    from .data import karate_club, make_click_log, stochastic_block_model
    from .gcn import train_gcn
    from .plot import plot_losses, progress as make_bar

    s = QUICK if quick else FULL
    epochs = s.epochs if epochs is None else epochs
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    if graph not in ("auto", "karate", "sbm"):
        raise ValueError(f"graph must be 'auto', 'karate' or 'sbm', got {graph!r}")
    start = time.perf_counter()
    log("== 1. click-through rate: a factorization machine with row_sparse gradients and lazy Adagrad")
    t0 = time.perf_counter()
    data = make_click_log(n_examples=s.examples, n_features=s.features, seed=seed)
    counts = np.bincount(data.train[1], minlength=data.n_features)
    seen = np.sort(counts[counts > 0])[::-1]
    head = int(np.ceil(0.01 * len(seen)))
    log(f"data: {data.n_train:,} train / {data.n_test:,} test impressions, click rate {data.click_rate:.1%}; "
        f"{data.n_features:,} features in {len(data.field_sizes)} fields, "
        f"{np.diff(data.train[0]).mean():.1f} active per row")
    log(f"      Zipf-like frequencies: {len(seen):,} features occur, the top 1% of them in "
        f"{seen[:head].sum() / seen.sum():.0%} of the occurrences, {np.mean(seen == 1):.0%} of them once "
        f"(generated in {time.perf_counter() - t0:.1f} s)")
    log(f"model: logit = b + embedding_bag(x, w) + fm_interaction(x, V), w {data.n_features:,} x 1, "
        f"V {data.n_features:,} x 8; batches of {s.batch_size}; loss = mean logistic loss")

    report = train_ctr(data, epochs=epochs, batch_size=s.batch_size, seed=seed, compare_batches=s.compare_batches,
                       progress=lambda total, desc: make_bar(total, desc, enabled=progress), log=log)
    first, last = report.batch_losses[:5], report.batch_losses[-5:]
    log(f"batches touch {report.rows_touched:.1%} of the feature rows: sparse step {report.sparse_ms:.1f} ms vs "
        f"dense step {report.dense_ms:.1f} ms ({report.speedup:.1f}x faster); same weights either way "
        f"(max |difference| {report.max_weight_diff:.1e} after {s.compare_batches + 1} steps)")
    os.makedirs(out, exist_ok=True)
    png = os.path.abspath(os.path.join(out, PNG_NAME))
    renderer = plot_losses(png, report.batch_losses, report.batches_per_epoch,
                           [e["test_loss"] for e in report.epochs], "factorization machine, logistic loss")
    log(f"loss curve ({renderer}): {png}")
    auc_met = report.final_auc >= s.auc_target
    log(f"result: test AUC {report.final_auc:.3f} (target >= {s.auc_target}: {'met' if auc_met else 'MISSED'}; "
        f"the hidden model's own AUC {data.bayes_auc:.3f}, chance 0.5); batch loss "
        f"{np.mean(first):.3f} -> {np.mean(last):.3f}")

    log("\n== 2. node classification: a 2-layer GCN with gcn_norm and csr_spmm")
    t0 = time.perf_counter()
    g = karate_club() if graph in ("auto", "karate") else None
    if g is None:
        if graph == "karate":
            log("networkx is not installed: using a stochastic block model instead")
        g = stochastic_block_model(seed=seed)
    gcn = train_gcn(g, epochs=s.gcn_epochs, seed=seed)
    log(f"graph: {gcn.graph}: {gcn.nodes} nodes, {gcn.edges} edges, {gcn.labelled} labelled nodes")
    log(f"loss {gcn.first_loss:.3f} -> {gcn.final_loss:.3f} in {s.gcn_epochs} Adam steps "
        f"({time.perf_counter() - t0:.1f} s)")
    log(f"result: accuracy on the {gcn.nodes - gcn.labelled} unlabelled nodes {gcn.accuracy:.3f} "
        f"(target >= {gcn.target}: {'met' if gcn.met else 'MISSED'}); the same network without the edges: "
        f"{gcn.accuracy_without_graph:.3f}")

    seconds = time.perf_counter() - start
    ok = auc_met and gcn.met
    log(f"\ndemo finished in {seconds:.1f} s: " + ("every target met" if ok else "a target was MISSED"))
    return {"ok": ok, "seconds": seconds, "png": png, "renderer": renderer, "ctr": report, "data": data,
            "auc_target": s.auc_target, "auc_met": auc_met, "gcn": gcn}


def _positive_int(text: str) -> int:
    import argparse

    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def add_arguments(parser: Any) -> None:
    """The demo's command-line options (shared by ``sparse-ops demo`` and ``python -m``)."""
    parser.add_argument("--quick", action="store_true", help="small data, one epoch: a few seconds (for tests)")
    parser.add_argument("--epochs", type=_positive_int, default=None, metavar="N",
                        help=f"epochs of the CTR model (default {FULL.epochs}; {QUICK.epochs} with --quick)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the data and the initial weights (default 0)")
    parser.add_argument("--out", default=".", metavar="DIR",
                        help=f"folder for {PNG_NAME} (default: the current folder)")
    parser.add_argument("--graph", choices=("auto", "karate", "sbm"), default="auto",
                        help="GCN graph: karate club if networkx is installed (auto), or a stochastic block model")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    parser.add_argument("--torch", action="store_true",
                        help="train the same models in PyTorch through sparse_ops.torch next to the native ones "
                             "(demo/torch_demo.py; needs torch)")


def main(argv: list[str] | None = None) -> int:
    """``python -m sparse_ops_cookbook.demo [options]``: exit 0 when every target is met."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m sparse_ops_cookbook.demo", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    args = vars(parser.parse_args(argv))
    if args.pop("torch"):
        from .torch_demo import run as torch_demo

        return 0 if torch_demo(quick=args["quick"], seed=args["seed"], graph=args["graph"])["ok"] else 1
    return 0 if run(**args)["ok"] else 1


__all__ = ["run", "main", "add_arguments", "PNG_NAME", "FULL", "QUICK"]
