"""The cookbook's ``csr_spmm`` forward and backward next to PyTorch's sparse autograd.

``Y = csr_spmm(A, X)`` for a 200,000 x 10,000 csr A (20 stored values a row, float32) and a
dense X of 64 columns, then ``Y.backward(G)``: X gets ``A.T @ G`` and A's stored values get
``(G @ X.T)`` read at A's positions (a csr with A's structure). PyTorch's reference is
``torch.sparse.mm(A, X)`` with a sparse csr A and X both requiring gradients, the same head
gradient, so PyTorch computes the same two gradients (A's is a sparse csr tensor with A's
structure). PyTorch's sparse COO layout also differentiates both, but took about 18 s a
step here (10x its csr layout), so csr is the reference.

Ours and PyTorch take turns (``_timing.alternating``), forward alone and forward+backward,
PyTorch with its faster thread count for the forward, 1 or numba's
(``_timing.torch_best_threads``); ratios are medians of per-round ratios. 'same
result' compares Y and both gradients with PyTorch's. Skipped without the cookbook
(``pip install -e ./cookbook``); PyTorch columns n/a without PyTorch.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

import sparse_ops as so
from sparse_ops import autograd as ag

from ._timing import alternating, markdown_table, paired_ratio, torch_best_threads, torch_csr, torch_threads
from .bench_conversions import random_csr


def _cookbook_op() -> Callable[..., Any] | None:
    """The cookbook's ``csr_spmm`` from the operator table, or None without the cookbook."""
    return so.dispatch.op_function("csr_spmm") if "csr_spmm" in so.list_ops() else None


def _ours(spmm: Callable[..., Any], m: sp.csr_matrix, x: np.ndarray, g: np.ndarray) -> dict[str, Any]:
    a, xs, gs = so.csr_matrix(m), so.array(x.copy()), so.array(g)
    a.attach_grad()
    xs.attach_grad()

    def forward() -> None:
        spmm(a, xs)

    def step() -> None:
        with ag.record():
            y = spmm(a, xs)
        y.backward(gs)

    return {"forward": forward, "step": step, "a": a, "x": xs, "y": lambda: spmm(a, xs).asnumpy()}


def _torch(m: sp.csr_matrix, x: np.ndarray, g: np.ndarray) -> dict[str, Any] | None:
    try:
        import torch
    except ImportError:
        return None
    a = torch_csr(m, requires_grad=True)
    xt = torch.from_numpy(x.copy()).requires_grad_(True)
    gt = torch.from_numpy(g)

    def forward() -> None:
        with torch.no_grad():
            torch.sparse.mm(a, xt)

    def step() -> None:
        a.grad = xt.grad = None
        torch.sparse.mm(a, xt).backward(gt)

    def y() -> np.ndarray:
        with torch.no_grad():
            return torch.sparse.mm(a, xt).numpy()

    return {"forward": forward, "step": step, "a": a, "x": xt, "y": y}


def _same(ours: dict[str, Any], ref: dict[str, Any] | None, m: sp.csr_matrix, x: np.ndarray,
          g: np.ndarray) -> bool:
    """Y and both gradients after one step, against PyTorch's (or SciPy's without it)."""
    ours["step"]()
    y, gx, ga = ours["y"](), ours["x"].grad.asnumpy(), ours["a"].grad
    if ref is not None:
        ref["step"]()
        ta = ref["a"].grad
        exp_y, exp_gx = ref["y"](), ref["x"].grad.numpy()
        exp_ga = sp.csr_matrix((ta.values().numpy(), ta.col_indices().numpy(), ta.crow_indices().numpy()),
                               shape=m.shape)
    else:
        exp_y, exp_gx = m @ x, m.T @ g
        rows = np.repeat(np.arange(m.shape[0]), np.diff(m.indptr))
        exp_ga = sp.csr_matrix((np.einsum("ij,ij->i", g[rows], x[m.indices]), m.indices, m.indptr), shape=m.shape)
    tol = {"rtol": 1e-4, "atol": 1e-3}
    return (ga.stype == "csr" and np.array_equal(ga.indices, exp_ga.indices)
            and np.array_equal(ga.indptr, exp_ga.indptr) and np.allclose(ga.data, exp_ga.data, **tol)
            and np.allclose(y, exp_y, **tol) and np.allclose(gx, exp_gx, **tol))


@dataclass
class Result:
    size: str
    torch_threads: int | None
    fwd_s: float
    torch_fwd_s: float | None
    fwd_ratio: float | None
    step_s: float
    torch_step_s: float | None
    step_ratio: float | None
    same: bool

    def row(self) -> list[str]:
        def s(v: float | None, fmt: str = ".4g") -> str:
            return "n/a" if v is None else format(v, fmt)
        return [self.size, str(self.torch_threads or "n/a"), s(self.fwd_s), s(self.torch_fwd_s),
                s(self.fwd_ratio, ".2f"), s(self.step_s),
                s(self.torch_step_s), s(self.step_ratio, ".2f"), "yes" if self.same else "**NO**"]


HEADER = ["size", "PyTorch threads", "ours forward (s)", "PyTorch forward (s)", "ours / PyTorch",
          "ours forward+backward (s)", "PyTorch forward+backward (s)", "ours / PyTorch", "same result"]


def run(quick: bool = False, scale: int | None = None) -> Result | None:
    """The full-size case, or its rows divided by ``scale`` (``quick``: 10); None without
    the cookbook."""
    import numba

    spmm = _cookbook_op()
    if spmm is None:
        return None
    scale = scale or (10 if quick else 1)
    rounds = 5 if scale == 1 else 3
    m = random_csr(200_000 // scale, 10_000 // min(scale, 100), 20)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((m.shape[1], 64), dtype=np.float32)
    g = rng.standard_normal((m.shape[0], 64), dtype=np.float32)
    previous = torch_threads()
    threads = None
    try:
        ours, ref = _ours(spmm, m, x, g), _torch(m, x, g)
        same = _same(ours, ref, m, x, g)
        fns = {"ours": ours["forward"]}
        steps = {"ours": ours["step"]}
        if ref is not None:
            fns["torch"], steps["torch"] = ref["forward"], ref["step"]
            threads = torch_best_threads(ref["forward"], (1, numba.get_num_threads()))
        fwd = alternating(fns, rounds=rounds)
        step = alternating(steps, rounds=rounds)
    finally:
        torch_threads(previous)
    has_torch = ref is not None
    size = f"({m.shape[0]:,} x {m.shape[1]:,}, nnz {m.nnz:,}) @ ({x.shape[0]:,} x {x.shape[1]})"
    return Result(size, threads, statistics.median(fwd["ours"]),
                  statistics.median(fwd["torch"]) if has_torch else None,
                  paired_ratio(fwd["ours"], fwd["torch"]) if has_torch else None,
                  statistics.median(step["ours"]),
                  statistics.median(step["torch"]) if has_torch else None,
                  paired_ratio(step["ours"], step["torch"]) if has_torch else None, same)


def report(result: Result | None) -> str:
    if result is None:
        return "Skipped: no operator `csr_spmm` (install the cookbook: `pip install -e ./cookbook`)."
    return markdown_table(HEADER, [result.row()])


if __name__ == "__main__":
    print(report(run()))
