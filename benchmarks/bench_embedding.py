"""One training step of an embedding table with a sparse gradient, next to PyTorch.

The step: look up a batch of ids (``Embedding(..., sparse_grad=True)``), back-propagate a
head gradient (so the weight gradient is ``row_sparse``: one row per distinct id, the
rows of repeated ids summed), and apply SGD lazily to those rows only
(``sgd_update(w, w.grad, lazy_update=True, out=w)``). PyTorch's reference is the same
step with ``nn.Embedding(sparse=True)`` and ``torch.optim.SGD``; the third contender is
our step with a dense gradient (the whole table is written by the backward pass and by
the update), which the sparse step must beat by 30x or more.

The table is 1,000,000 x 64 float32, the batch 4,096 ids drawn from a Zipf law with
exponent 1.2 (``rng.zipf(1.2)`` folded into the table with ``% rows``): a few ids repeat
hundreds of times and most appear once, as in recommender logs. Ours and PyTorch take
turns (``_timing.alternating``, 50 rounds of 10 steps) and the ratio is the median of the
per-round ratios (the table also gives each side's median time); the dense step
alternates with our sparse step in 5 rounds of one. PyTorch runs with its faster thread
count, 1 or numba's (``_timing.torch_best_threads``: on this shared machine two OpenMP
threads made its step ~10x slower). 'same result' checks one step of each from the same
weights: the updated rows agree.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

import sparse_ops as so
from sparse_ops import autograd as ag

from ._timing import alternating, markdown_table, paired_ratio, torch_best_threads, torch_threads

LR = 0.05


@dataclass
class Problem:
    rows: int
    width: int
    ids: np.ndarray  # int64 batch of ids
    head: np.ndarray  # (batch, width) float32 upstream gradient
    weight: np.ndarray  # (rows, width) float32 initial table

    @property
    def distinct(self) -> int:
        return int(np.unique(self.ids).shape[0])

    def bytes_moved(self) -> int:
        """The least traffic of a sparse step: the gather reads and writes the batch's rows,
        the backward reads the head gradient and writes one row per distinct id, the update
        reads those and reads and writes as many weight rows (plus the ids, twice)."""
        row = self.width * 4
        return (3 * self.ids.shape[0] + 4 * self.distinct) * row + 2 * self.ids.nbytes


def make_problem(rows: int = 1_000_000, width: int = 64, batch: int = 4096, seed: int = 0) -> Problem:
    rng = np.random.default_rng(seed)
    ids = (rng.zipf(1.2, batch) - 1) % rows
    head = rng.standard_normal((batch, width), dtype=np.float32)
    weight = rng.standard_normal((rows, width), dtype=np.float32) * 0.01
    return Problem(rows, width, ids.astype(np.int64), head, weight)


def ours_step(p: Problem, sparse: bool = True) -> tuple[Callable[[], None], Any]:
    """Our step on a private copy of the table; returns (step, weight)."""
    w = so.array(p.weight.copy())
    w.attach_grad(stype="row_sparse" if sparse else "default")
    x, head = so.array(p.ids), so.array(p.head)

    def step() -> None:
        with ag.record():
            e = so.Embedding(x, w, input_dim=p.rows, output_dim=p.width, sparse_grad=sparse)
        e.backward(head)
        so.sgd_update(w, w.grad, lr=LR, lazy_update=True, out=w)

    return step, w


def torch_step(p: Problem) -> tuple[Callable[[], None], Any] | None:
    """PyTorch's step on a private copy of the table, or None without PyTorch."""
    try:
        import torch
    except ImportError:
        return None
    emb = torch.nn.Embedding(p.rows, p.width, sparse=True)
    with torch.no_grad():
        emb.weight.copy_(torch.from_numpy(p.weight))
    opt = torch.optim.SGD(emb.parameters(), lr=LR)
    ids, head = torch.from_numpy(p.ids), torch.from_numpy(p.head)

    def step() -> None:
        opt.zero_grad()
        emb(ids).backward(head)
        opt.step()

    return step, emb.weight


def same_result(p: Problem) -> bool:
    """One step of ours (sparse and dense gradient) and, when installed, PyTorch's, from the
    same table: the rows of the batch agree, every other row is untouched."""
    touched = np.unique(p.ids)
    expected = p.weight[touched].copy()
    np.add.at(expected, np.searchsorted(touched, p.ids), -LR * p.head)
    results = []
    for sparse in (True, False):
        step, w = ours_step(p, sparse)
        step()
        results.append(w.asnumpy())
    ref = torch_step(p)
    if ref is not None:
        step, weight = ref
        step()
        results.append(weight.detach().numpy())
    untouched = np.ones(p.rows, dtype=bool)
    untouched[touched] = False
    return all(np.allclose(r[touched], expected, rtol=1e-5, atol=1e-6)
               and np.array_equal(r[untouched], p.weight[untouched]) for r in results)


@dataclass
class Result:
    size: str
    torch_threads: int | None
    ours_s: float
    torch_s: float | None
    vs_torch: float | None
    dense_s: float
    dense_over_ours: float
    bytes_moved: int
    same: bool

    def row(self) -> list[str]:
        na = "n/a"
        torch_s = na if self.torch_s is None else f"{self.torch_s * 1e3:.3f} ({self.torch_threads} thr.)"
        return [self.size, f"{self.ours_s * 1e3:.3f}", torch_s,
                na if self.vs_torch is None else f"{self.vs_torch:.2f}", f"{self.dense_s * 1e3:.1f}",
                f"{self.dense_over_ours:.0f}x", "yes" if self.same else "**NO**"]


HEADER = ["size", "ours, sparse step (ms)", "PyTorch (ms)", "ours / PyTorch", "ours, dense gradient (ms)",
          "sparse step faster than dense by", "same result"]


def run(quick: bool = False, scale: int | None = None) -> Result:
    """The step at full size (1M x 64, 4,096 ids), or every size divided by ``scale``
    (``quick``: 10)."""
    import numba

    scale = scale or (10 if quick else 1)
    rounds, calls, dense_rounds = (50, 10, 5) if scale == 1 else (5, 2, 2)
    p = make_problem(rows=1_000_000 // scale, batch=max(4096 // scale, 16))
    previous = torch_threads()
    threads = None
    try:
        same = same_result(p)
        fns = {"ours": ours_step(p)[0]}
        ref = torch_step(p)
        if ref is not None:
            fns["torch"] = ref[0]
            threads = torch_best_threads(fns["torch"], (1, numba.get_num_threads()))
        t = alternating(fns, rounds=rounds, calls=calls)
        vs_dense = alternating({"ours": fns["ours"], "dense": ours_step(p, sparse=False)[0]},
                               rounds=dense_rounds, calls=1)
    finally:
        torch_threads(previous)
    size = f"{p.rows:,} x {p.width} float32 table, {p.ids.shape[0]:,} zipf(1.2) ids ({p.distinct:,} distinct)"
    return Result(size, threads, statistics.median(t["ours"]),
                  statistics.median(t["torch"]) if "torch" in t else None,
                  paired_ratio(t["ours"], t["torch"]) if "torch" in t else None,
                  statistics.median(vs_dense["dense"]), paired_ratio(vs_dense["dense"], vs_dense["ours"]),
                  p.bytes_moved(), same)


def report(result: Result) -> str:
    return markdown_table(HEADER, [result.row()])


if __name__ == "__main__":
    print(report(run()))
