"""``dot`` with a csr operand next to SciPy, the raw numba kernels, and (if installed) PyTorch,
Intel MKL and JAX.

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

The width sweep (``sweep``, issue 18): the csr above, and one with power-law row lengths
(``powerlaw_csr``: most rows short, a few with thousands of values), float32 and float64,
times dense operands of 1, 2, 4, 8, 16, 32, 64, 128 and 256 columns (the narrowest are the
products with a few right-hand sides that solvers and power iterations take): ``so.dot``
next to Intel MKL (``sparse_dot_mkl.dot_product_mkl``, row-major output, on numba's thread
count), SciPy and
JAX's jitted ``BCSR @ dense`` (optional references, ``benchmarks/_anchors.py``; n/a when not
installed), all in alternation with ``bench_bandwidth``'s reference copy, so each row also
gives our effective bandwidth (``least_bytes`` / time) as a share of the copy's.

Run ``python -m benchmarks.bench_dot [--quick] [--sweep-only]``; writes
``benchmarks/results/dot.md`` (``dot-quick.md`` with ``--quick``).
"""
from __future__ import annotations

import argparse
import datetime
import gc
import os
import statistics
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

import sparse_ops as so

from . import _anchors
from ._timing import alternating, describe_machine, frozen_heap, markdown_table, median_time, paired_ratio, torch_csr
from .bench_bandwidth import copy_reference, share
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
    from sparse_ops.kernels.linalg import csr_t_dense_product
    from sparse_ops.ops.linalg import _stored_columns

    x, y = so.csr_matrix(m), so.array(g)

    def raw():  # the kernels so.dot runs here (every column stored: no renumbering, no pick)
        cols, counts, indices = _stored_columns(m.indices, m.shape[1])
        out = np.zeros((m.shape[1], g.shape[1]), dtype=g.dtype)
        csr_t_dense_product(m.indptr, indices, m.data, g, counts, out)
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


# ---- the width sweep against MKL (issue 18 item 4) ----------------------------------------------
WIDTHS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
SWEEP_HEADER = ["rows", "dtype", "k", "ours (ms)", "MKL (ms)", "ours / MKL", "SciPy (ms)", "ours / SciPy",
                "JAX BCSR (ms)", "ours GB/s", "% of copy", "same result"]


def powerlaw_csr(rows: int, cols: int, mean: float, seed: int = 0, shape: float = 1.5) -> sp.csr_matrix:
    """A canonical float32 csr whose row lengths are power-law distributed (Pareto with
    ``shape``, infinite variance at 1.5) with about ``mean`` stored values a row, capped at
    ``cols``: a few rows hold thousands of values, most hold a handful (graphs, text)."""
    rng = np.random.default_rng(seed)
    lengths = rng.pareto(shape, rows) + 1.0
    lengths = np.minimum(np.round(lengths * (mean / lengths.mean())), cols).astype(np.int64)
    indptr = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    nnz = int(indptr[-1])
    m = sp.csr_matrix((rng.uniform(0.5, 1.5, nnz).astype(np.float32), rng.integers(0, cols, nnz, dtype=np.int32),
                       indptr.astype(np.int32)), shape=(rows, cols))
    m.sum_duplicates()  # sorted unique columns; summed duplicates stay in [0.5, 3)
    return m


@dataclass
class SweepRow:
    rows: str
    dtype: str
    width: int
    ours_s: float
    mkl_s: float | None
    vs_mkl: float | None  # median per-round ratio
    scipy_s: float
    vs_scipy: float
    jax_s: float | None
    gbs: float  # least bytes / our median time
    share: float  # of the copy bandwidth measured in the same rounds
    same: bool

    def row(self) -> list[str]:
        def ms(v: float | None) -> str:
            return "n/a" if v is None else f"{v * 1e3:.2f}"

        return [self.rows, self.dtype, str(self.width), ms(self.ours_s), ms(self.mkl_s),
                "n/a" if self.vs_mkl is None else f"{self.vs_mkl:.2f}", ms(self.scipy_s), f"{self.vs_scipy:.2f}",
                ms(self.jax_s), f"{self.gbs:.2f}", f"{self.share * 100:.0f}%", "yes" if self.same else "**NO**"]


def least_bytes(m: sp.csr_matrix, width: int, itemsize: int) -> int:
    """Bytes csr @ dense must move at the least: the csr read once, the dense operand read
    once (it is gathered a row per stored value, but it fits in the last-level cache at
    these sizes), the result written once."""
    return (m.indptr.nbytes + m.indices.nbytes + m.data.nbytes + m.shape[1] * width * itemsize
            + m.shape[0] * width * itemsize)


def _mkl_call(m: sp.csr_matrix, b: np.ndarray) -> Callable[[], Any] | None:
    """MKL's csr @ dense (row-major output, like ours) on numba's thread count, or None."""
    mkl = _anchors.mkl()
    if mkl is None:
        return None
    import numba

    mkl.mkl_set_num_threads(numba.get_num_threads())
    return lambda: mkl.dot_product_mkl(m, b)


def _jax_call(m: sp.csr_matrix, b: np.ndarray) -> Callable[[], Any] | None:
    """JAX's jitted ``BCSR @ dense``, or None without JAX (or for float64 without x64)."""
    sparse = _anchors.jax_sparse()
    if sparse is None:
        return None
    import jax

    if b.dtype == np.float64 and not jax.config.jax_enable_x64:
        return None
    a = sparse.BCSR.from_scipy_sparse(m)
    bj = jax.device_put(b)
    f = jax.jit(lambda x, y: x @ y)
    return lambda: f(a, bj).block_until_ready()


def _sweep_case(label: str, m: sp.csr_matrix, width: int, copy: Callable[[], Any], copy_bytes: int,
                rounds: int) -> SweepRow:
    b = np.random.default_rng(width).standard_normal((m.shape[1], width)).astype(m.dtype)
    x, y = so.csr_matrix(m), so.array(b)
    fns: dict[str, Callable[[], Any]] = {"ours": lambda: so.dot(x, y), "scipy": lambda: m @ b, "copy": copy}
    for name, fn in (("mkl", _mkl_call(m, b)), ("jax", _jax_call(m, b))):
        if fn is not None:
            fns[name] = fn
    t = alternating(fns, rounds=rounds)
    ref = m @ b
    ours = so.dot(x, y).asnumpy()
    same = bool(np.allclose(ours, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max(initial=1.0))))
    if "mkl" in fns:
        same = same and bool(np.allclose(fns["mkl"](), ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max(initial=1.0))))
    nbytes = least_bytes(m, width, m.dtype.itemsize)
    med = {name: statistics.median(v) for name, v in t.items()}
    return SweepRow(label, m.dtype.name, width, med["ours"], med.get("mkl"),
                    paired_ratio(t["ours"], t["mkl"]) if "mkl" in t else None, med["scipy"],
                    paired_ratio(t["ours"], t["scipy"]), med.get("jax"), nbytes / med["ours"] / 1e9,
                    share(nbytes, t["ours"], t["copy"], copy_bytes), same)


def sweep(quick: bool = False, scale: int | None = None, widths: tuple[int, ...] = WIDTHS) -> list[SweepRow]:
    """``dot(csr, dense)`` for uniform and power-law rows, float32 and float64, each width:
    ours, MKL, SciPy, JAX and the reference copy in alternation. Rows divided by ``scale``."""
    scale = scale or (10 if quick else 1)
    rounds = 7 if scale == 1 else (3 if scale <= 10 else 1)
    copy, copy_bytes = copy_reference(scale)
    cols = 10_000 if scale <= 10 else 100
    out = []
    for label, m32 in (("uniform", random_csr(200_000 // scale, cols, 20)),
                       ("power-law", powerlaw_csr(200_000 // scale, cols, 20, seed=5))):
        for dtype in (np.float32, np.float64):
            m = m32.astype(dtype)
            for width in widths:
                out.append(_sweep_case(label, m, width, copy, copy_bytes, rounds))
                gc.collect()
    return out


def sweep_report(rows: list[SweepRow]) -> str:
    return markdown_table(SWEEP_HEADER, [r.row() for r in rows])


def sweep_note(rows: list[SweepRow]) -> str:
    """What the sweep table holds, with the load average it was measured under."""
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    version = _anchors.mkl_version() or "MKL not installed (n/a)"
    jax = _anchors.jax_sparse()
    jax_note = "JAX not installed (n/a)" if jax is None else "JAX `BCSR @ dense` jitted (float64 only with x64)"
    return (f"`so.dot(csr, dense)` (dispatch included) against {version} `dot_product_mkl` on numba's thread "
            f"count, SciPy `m @ b` and {jax_note}, with a {copy_reference()[1] // 2**21} MiB `np.copyto` "
            "(bench_bandwidth's peak) in the same alternating rounds; ratios are medians of per-round ratios "
            "(below 1: ours faster). GB/s counts the least bytes (`least_bytes`: csr + dense operand read once, "
            f"result written once). Load average when the table was written: {load}.")


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
    parser.add_argument("--sweep-only", action="store_true", help="only the width sweep against MKL")
    args = parser.parse_args()
    quick = args.quick
    results = [] if args.sweep_only else run(quick)
    rows = sweep(quick)
    when = datetime.datetime.now().isoformat(timespec="seconds")
    lines = [f"# dot vs SciPy{' (--quick)' if quick else ''}", "",
             f"Run {when} with `python -m benchmarks.bench_dot{' --quick' if quick else ''}`.", "",
             "## Machine", ""]
    lines += [f"- {k}: {v}" for k, v in describe_machine().items()]
    lines += ["", "## Results", "",
              "float32; median wall time of interleaved rounds (see the module docstring); ratio below 1 "
              "means faster than SciPy. 'raw' calls the numba kernel(s) directly: ours - raw is the "
              "dispatch and bookkeeping cost. " + torch_note(), "", report(results) if results else "(not run)", "",
              "## dot(csr, dense) by width vs MKL", "", sweep_note(rows), "", sweep_report(rows), ""]
    text = "\n".join(lines)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / ("dot-quick.md" if quick else "dot.md")
    out.write_text(text)
    print(text)
    print(f"\nwritten to {out}")


if __name__ == "__main__":
    main()
