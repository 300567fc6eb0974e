"""Steady training steps: the same step timed 40 times in each of several fresh processes.

A step that allocates megabyte-sized temporaries can be fast in one process and slow in
the next, or alternate fast / slow inside one, depending on whether the allocator hands
back memory whose pages are still mapped or fresh pages the kernel must fault in. This
benchmark shows it: for each step it starts ``--processes`` fresh Python processes, each
runs a warm-up and then ``--steps`` timed steps, and the report gives per step kind the
median over processes of each process's median step, and the worst ratio of a process's
slowest step to its median, ours and PyTorch's side by side (alternating processes).

The step (issue 38, item 6):

the embedding step: a 1,000,000 x 64 float32 table, 4,096 Zipf(1.2) ids, ``e = Embedding(ids)``,
loss ``sum(e * e)``, backward (row_sparse gradient), lazy ``sgd_update``; natively
(``native``), through the MXNet face (``mxnet``), and in PyTorch (``torch``:
``nn.Embedding(sparse=True)``, ``optim.SGD``); and the cookbook's factorization-machine
step (``fm``: a 4,096-row csr batch of a generated click log over 2**20 features,
``embedding_bag`` + ``fm_interaction``, logistic loss, lazy Adagrad), natively; and the
torch-bridged recommender step of ``bench_torch`` (``bridge``: a plugin's embedding-bag op on
4,096 csr bags of ~20 ids into the same table marked ``sparse_grad``, the pooled sum as the
loss, ``SparseAdam``) beside ``nn.EmbeddingBag(mode="sum", sparse=True)`` doing the same
(``torch_bag``).

Run: ``python -m benchmarks.bench_steady [--processes 10] [--steps 40]``; writes ``results/steady.md``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROWS, WIDTH, BATCH, LR = 1_000_000, 64, 4096, 1e-5  # a small rate keeps the values finite and normal
ROOT = Path(__file__).resolve().parent.parent  # the children import benchmarks.bench_torch from here
RESULTS = ROOT / "benchmarks" / "results"

CHILD = r'''
import json, sys, time
import numpy as np
kind, steps = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
ids = ((rng.zipf(1.2, {batch}) - 1) % {rows}).astype(np.int64)
weight = rng.standard_normal(({rows}, {width}), dtype=np.float32) * 0.01
if kind == "torch":
    import torch
    torch.set_num_threads(2)
    emb = torch.nn.Embedding({rows}, {width}, sparse=True)
    with torch.no_grad():
        emb.weight.copy_(torch.from_numpy(weight))
    opt = torch.optim.SGD(emb.parameters(), lr={lr})
    x = torch.from_numpy(ids)
    def step():
        opt.zero_grad()
        e = emb(x)
        (e * e).sum().backward()
        opt.step()
elif kind in ("native", "mxnet"):
    import sparse_ops as so
    if kind == "mxnet":
        from sparse_ops.compat import mxnet as mx
        nd, ag = mx.nd, mx.autograd
        w = nd.array(weight)
        w.attach_grad(stype="row_sparse")
        x = nd.array(ids, dtype="int64")
        def step():
            with ag.record():
                e = nd.Embedding(x, w, input_dim={rows}, output_dim={width}, sparse_grad=True)
                loss = nd.sum(e * e)
            loss.backward()
            nd.sgd_update(w, w.grad, lr={lr}, lazy_update=True, out=w)
    else:
        ag = so.autograd
        w = so.array(weight)
        w.attach_grad(stype="row_sparse")
        x = so.array(ids)
        def step():
            with ag.record():
                e = so.Embedding(x, w, input_dim={rows}, output_dim={width}, sparse_grad=True)
                loss = so.sum(so.elemwise_mul(e, e))
            loss.backward()
            so.sgd_update(w, w.grad, lr={lr}, lazy_update=True, out=w)
elif kind == "fm":
    import sparse_ops as so
    from sparse_ops_cookbook.demo.ctr import FactorizationMachine, _batches
    from sparse_ops_cookbook.demo.data import make_click_log
    data = make_click_log(n_examples=60_000, seed=0)
    batches = _batches(data, 4096)
    model = FactorizationMachine(data.n_features, k=8)
    turn = [0]
    def step():
        x, y = batches[turn[0] % len(batches)]
        turn[0] += 1
        model.step(x, y)
elif kind in ("bridge", "torch_bag"):
    import torch
    from benchmarks import bench_torch
    bags = bench_torch.make_bags(rows={rows}, dim={width}, bags={batch})
    contenders = bench_torch.recommender_contenders(bags, "sum")
    step = contenders["ours" if kind == "bridge" else "nn.EmbeddingBag"]["step"]
for _ in range(10):
    step()
times = []
for _ in range(steps):
    t0 = time.perf_counter()
    step()
    times.append(time.perf_counter() - t0)
print(json.dumps(times))
'''.format(batch=BATCH, rows=ROWS, width=WIDTH, lr=LR)


def run_process(kind: str, steps: int) -> list[float]:
    out = subprocess.run([sys.executable, "-c", CHILD, kind, str(steps)], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


SPIKE_TARGET = 1.5  # the slowest of a process's steps over its median (issue 38 item 6)


def summary(runs: list[list[float]]) -> dict[str, Any]:
    """Per step kind: the median of the processes' median steps, each process's slowest step
    over its median (the worst, the median of them, and how many processes stay within
    ``SPIKE_TARGET``)."""
    medians = [statistics.median(r) for r in runs]
    spikes = [max(r) / statistics.median(r) for r in runs]
    return {"median_ms": statistics.median(medians) * 1e3,
            "process_medians_ms": [round(m * 1e3, 3) for m in medians],
            "worst_slowest_over_median": max(spikes),
            "median_slowest_over_median": statistics.median(spikes),
            "within_target": sum(x <= SPIKE_TARGET for x in spikes)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--processes", type=int, default=10)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--kinds", nargs="+", default=["native", "mxnet", "torch", "fm", "bridge", "torch_bag"])
    args = parser.parse_args(argv)
    runs: dict[str, list[list[float]]] = {k: [] for k in args.kinds}
    for _ in range(args.processes):  # the kinds take turns, so machine noise falls on all of them
        for kind in args.kinds:
            runs[kind].append(run_process(kind, args.steps))
    results = {k: summary(v) for k, v in runs.items()}
    lines = []
    for k, r in results.items():
        lines.append(f"- `{k}`: median of process medians {r['median_ms']:.3f} ms; slowest/median: worst "
                     f"{r['worst_slowest_over_median']:.2f}, median {r['median_slowest_over_median']:.2f}, "
                     f"{r['within_target']} of {len(runs[k])} processes <= {SPIKE_TARGET}; per process "
                     f"{r['process_medians_ms']}")
    pairs = [(k, "torch") for k in ("native", "mxnet") if k in results and "torch" in results]
    pairs += [("bridge", "torch_bag")] if "bridge" in results and "torch_bag" in results else []
    lines += [f"- `{a}` / `{b}`: {results[a]['median_ms'] / results[b]['median_ms']:.2f}x" for a, b in pairs]
    print("\n".join(lines))
    from ._timing import describe_machine

    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "steady.md").write_text("\n".join(
        ["# Steady training steps in fresh processes", "",
         f"`python -m benchmarks.bench_steady --processes {args.processes} --steps {args.steps}`; each process "
         "runs 10 warm-up steps, then times each step. Kinds take turns, so the machine's noise falls on all.", "",
         "## Machine", "", *[f"- {k}: {v}" for k, v in describe_machine().items()], "", "## Results", "",
         *lines, ""]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
