"""``dot`` with a csr operand next to SciPy, the raw numba kernels and (if installed) PyTorch.

float32 throughout, random canonical csr from ``bench_conversions.random_csr``. Each row
gives our median time through ``so.dot`` (dispatch included), the raw numba kernel(s)
called directly on the same arrays (so the difference is the dispatch and bookkeeping
overhead), SciPy's median time, and ours / SciPy (below 1: we are faster). The
functions are timed in interleaved rounds (each round: a median of 3 calls of each, after
a warm-up) and the median round is reported, so background load on a small machine
hits every contender alike (torch, when installed, is timed on its own afterwards).

Cases (``--quick`` divides the csr row counts by 10):

* ``csr @ dense``: 200,000 x 10,000 csr, 20 nnz per row, times a 10,000 x 64 dense
  matrix, dense result. SciPy: ``m @ b``.
* ``csr.T @ dense``: the same csr transposed times a 200,000 x 64 dense matrix
  (``transpose_a=True``), row_sparse result. SciPy: ``m.T @ g`` (dense result).
* ``csr @ dense, small``: 1,000 x 1,000 csr, 10 nnz per row, times 1,000 x 8: here the
  fixed per-call cost shows (this size runs the serial kernel: below
  ``sparse_ops.sdk.rowkernel.PARALLEL_MIN_WORK`` multiply-adds a parallel region costs more).

Run ``python -m benchmarks.bench_dot [--quick]``; writes ``benchmarks/results/dot.md``
(``dot-quick.md`` with ``--quick``).
"""
from __future__ import annotations

import argparse
import datetime
import gc
import statistics
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

import sparse_ops as so

from ._timing import describe_machine, frozen_heap, markdown_table, median_time, torch_csr
from .bench_conversions import random_csr

RESULTS = Path(__file__).resolve().parent / "results"
HEADER = ["case", "size", "ours: so.dot (s)", "raw numba kernel (s)", "SciPy (s)", "ours / SciPy",
          "raw / SciPy", "torch (s)", "same result"]


@dataclass
class Result:
    case: str
    size: str
    ours_s: float
    raw_s: float
    ref_s: float
    torch_s: float | None
    same: bool

    def row(self) -> list[str]:
        torch_s = "n/a" if self.torch_s is None else f"{self.torch_s:.4g}"
        return [self.case, self.size, f"{self.ours_s:.4g}", f"{self.raw_s:.4g}", f"{self.ref_s:.4g}",
                f"{self.ours_s / self.ref_s:.2f}", f"{self.raw_s / self.ref_s:.2f}", torch_s,
                "yes" if self.same else "**NO**"]


def batched(fn: Callable[[], Any], calls: int) -> Callable[[], Any]:
    """``fn`` called ``calls`` times in a row: microsecond calls are timed in batches
    (``median_time`` collects garbage between timed calls, which leaves cold caches)."""
    def run() -> None:
        for _ in range(calls):
            fn()
    return run


def interleaved(fns: dict[str, Callable[[], Any]], rounds: int = 5, repeat: int = 3,
                calls: int = 1) -> dict[str, float]:
    """Median over ``rounds`` of each function's ``median_time`` (per call, for ``calls``
    calls per timing), the functions taking turns."""
    for fn in fns.values():  # warm-up: numba compiles or loads its cache
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    with frozen_heap():  # one full collection for all the rounds
        for _ in range(rounds):
            for name, fn in fns.items():
                times[name].append(median_time(batched(fn, calls), repeat=repeat, warmup=0) / calls)
    return {name: statistics.median(t) for name, t in times.items()}


def _torch_matmul(m: sp.csr_matrix, dense: np.ndarray, transpose: bool) -> Callable[[], Any] | None:
    """torch's sparse csr @ dense, or None when torch is not installed."""
    try:
        import torch
    except ImportError:
        return None
    a = torch_csr(m)
    if transpose:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta"
            a = a.t().to_sparse_csr()
    b = torch.from_numpy(dense)
    return lambda: a @ b


def _time_torch(fn: Callable[[], Any] | None, calls: int) -> float | None:
    """torch on its own, after the others: its OpenMP threads spin-wait after each call and
    would slow whichever contender ran next."""
    if fn is None:
        return None
    fn()
    return median_time(batched(fn, calls), repeat=5) / calls


def _size(m: sp.csr_matrix, dense: np.ndarray, transpose: bool) -> str:
    t = ".T" if transpose else ""
    return f"({m.shape[0]:,} x {m.shape[1]:,}, nnz {m.nnz:,}){t} @ ({dense.shape[0]:,} x {dense.shape[1]})"


def bench_csr_dense(m: sp.csr_matrix, b: np.ndarray, case: str, calls: int = 1) -> Result:
    from sparse_ops.sdk.csr import csr_dense

    x, y = so.csr_matrix(m), so.array(b)

    def raw():
        out = np.empty((m.shape[0], b.shape[1]), dtype=b.dtype)
        csr_dense(None, m.indptr, m.indices, m.data, b, out)  # serial or parallel as so.dot decides
        return out

    t = interleaved({"ours": lambda: so.dot(x, y), "raw": raw, "ref": lambda: m @ b}, calls=calls)
    t["torch"] = _time_torch(_torch_matmul(m, b, transpose=False), calls)
    same = np.allclose(so.dot(x, y).asnumpy(), m @ b, rtol=1e-4, atol=1e-4)
    return Result(case, _size(m, b, False), t["ours"], t["raw"], t["ref"], t["torch"], same)


def bench_csr_t_dense(m: sp.csr_matrix, g: np.ndarray) -> Result:
    import numba

    from sparse_ops.kernels.linalg import count_columns, csr_t_dense
    from sparse_ops.ops.linalg import _column_chunks

    x, y = so.csr_matrix(m), so.array(g)

    def raw():  # the kernel's own steps (every column is stored: no renumbering, no pick)
        counts = np.zeros(m.shape[1], dtype=np.int64)
        count_columns(m.indices, counts)
        cols = np.flatnonzero(counts)
        out = np.zeros((m.shape[1], g.shape[1]), dtype=g.dtype)
        csr_t_dense(m.indptr, m.indices, m.data, g, _column_chunks(counts, numba.get_num_threads()), out)
        return cols, out

    assert np.diff(m.tocsc().indptr).all(), "raw() assumes every column is stored"
    t = interleaved({"ours": lambda: so.dot(x, y, transpose_a=True), "raw": raw, "ref": lambda: m.T @ g})
    t["torch"] = _time_torch(_torch_matmul(m, g, transpose=True), 1)
    r = so.dot(x, y, transpose_a=True)
    ref = m.T @ g
    nonzero_cols = np.flatnonzero(np.diff(m.tocsc().indptr))
    same = (r.stype == "row_sparse" and np.array_equal(r.indices, nonzero_cols)
            and np.allclose(r.data, ref[nonzero_cols], rtol=1e-4, atol=1e-4))
    return Result("csr.T @ dense -> row_sparse", _size(m, g, True), t["ours"], t["raw"], t["ref"],
                  t["torch"], same)


def run(quick: bool = False, scale: int | None = None) -> list[Result]:
    """Every case; the big csr's rows divided by ``scale`` (``quick``: 10)."""
    scale = scale or (10 if quick else 1)
    rng = np.random.default_rng(0)
    cols = 10_000 if scale <= 10 else 100  # tiny runs: few columns, so every column is stored
    m = random_csr(200_000 // scale, cols, 20)
    b = rng.standard_normal((cols, 64), dtype=np.float32)
    results = [bench_csr_dense(m, b, "csr @ dense -> dense")]
    gc.collect()
    g = rng.standard_normal((m.shape[0], 64), dtype=np.float32)
    results.append(bench_csr_t_dense(m, g))
    del m, g
    gc.collect()
    small = random_csr(1_000, 1_000, 10, seed=3)
    calls = 200 if scale <= 10 else 2
    results.append(bench_csr_dense(small, rng.standard_normal((1_000, 8), dtype=np.float32),
                                   f"csr @ dense -> dense, small (per call, batches of {calls})", calls=calls))
    return results


def torch_note() -> str:
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed here: its column says n/a."
    return f"PyTorch {torch.__version__} ({torch.get_num_threads()} threads): `torch.sparse_csr_tensor @ dense`."


def report(results: list[Result]) -> str:
    return markdown_table(HEADER, [r.row() for r in results])


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_dot", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="csr row counts 10x smaller (smoke run)")
    quick = parser.parse_args().quick
    results = run(quick)
    when = datetime.datetime.now().isoformat(timespec="seconds")
    lines = [f"# dot vs SciPy{' (--quick)' if quick else ''}", "",
             f"Run {when} with `python -m benchmarks.bench_dot{' --quick' if quick else ''}`.", "",
             "## Machine", ""]
    lines += [f"- {k}: {v}" for k, v in describe_machine().items()]
    lines += ["", "## Results", "",
              "float32; median wall time of interleaved rounds (see the module docstring); ratio below 1 "
              "means faster than SciPy. 'raw' calls the numba kernel(s) directly: ours - raw is the "
              "dispatch and bookkeeping cost. " + torch_note(), "", report(results), ""]
    text = "\n".join(lines)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / ("dot-quick.md" if quick else "dot.md")
    out.write_text(text)
    print(text)
    print(f"\nwritten to {out}")


if __name__ == "__main__":
    main()
