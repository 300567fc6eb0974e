"""``python -m benchmarks.bench_spgemm [--quick]``: ``dot(csr, csr)`` (SpGEMM) against SciPy's
``A @ B`` and MKL's ``dot_product_mkl`` (through ``sparse_dot_mkl``, n/a without it).

Eight cases: a power-law graph squared (A @ A: hub rows whose products are long) and a
uniform random pair of the same size, at 50k and 100k nodes (10 edges a node), in float32
and float64. The contenders are timed in alternation in one process; ratios are medians of
per-round ours / reference. Our output is canonical (sorted columns, exact zeros dropped);
SciPy's ``A @ B`` leaves its columns unsorted, and the check compares with
``(A @ B).sorted_indices()``, exactly (SciPy sums in the value dtype, in the same order).
Issue 38's targets: <= 0.45x SciPy, <= 0.8x MKL.

A second table splits our kernel's time into its phases (``sparse_ops.kernels.spgemm``'s
``timings``): the bound (each row's work, an upper bound on its length: the symbolic
step when the rooms come from it), the exact symbolic count (timed alone for reference
where the kernel skips it), output allocation, the numeric pass (with the finished
chunks moved down to their places meanwhile) and the closing (what is left after: chunks
no thread had moved, the arrays shrunk), each beside the bytes it must move and the rate
that makes. Writes ``results/spgemm.md``.
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

import sparse_ops as so

from ._anchors import mkl
from ._timing import alternating, markdown_table, paired_ratio

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
TARGETS = {"scipy": 0.45, "mkl": 0.8}
NODES = (50_000, 100_000)
PHASES = ("bound", "symbolic", "allocation", "numeric", "closing")
DTYPES = ("float32", "float64")


def power_law(rng: np.random.Generator, n: int, edges: int) -> sp.csr_matrix:
    """A Chung-Lu graph: node i ends an edge with probability ~ (i + 1) ** -0.8, shuffled."""
    weights = (np.arange(n) + 1.0) ** -0.8
    weights /= weights.sum()
    rows = rng.permutation(n)[rng.choice(n, edges, p=weights)]
    cols = rng.permutation(n)[rng.choice(n, edges, p=weights)]
    a = sp.csr_matrix((rng.standard_normal(edges).astype(np.float32), (rows, cols)), shape=(n, n))
    a.sum_duplicates()
    return a


def uniform(rng: np.random.Generator, n: int, edges: int) -> sp.csr_matrix:
    a = sp.random(n, n, edges / (n * n), format="csr", dtype=np.float32, random_state=rng)
    a.sort_indices()
    return a


def _ours(a: sp.csr_matrix) -> Any:
    return so.csr_matrix((a.data, a.indices.astype(np.int32), a.indptr.astype(np.int32)), shape=a.shape)


def _same(got: Any, want: sp.csr_matrix) -> bool:
    """The same structure and bit-for-bit the same values as SciPy's sorted product."""
    return (np.array_equal(got.indptr.asnumpy(), want.indptr) and np.array_equal(got.indices.asnumpy(), want.indices)
            and np.array_equal(got.data.asnumpy(), want.data))


def _phases(a: sp.csr_matrix, b: sp.csr_matrix, rounds: int) -> dict[str, Any]:
    """Median seconds of each phase of our kernel over ``rounds`` calls, the exact symbolic
    count timed alone (what the bound replaces), and the bytes each must move."""
    from sparse_ops.kernels import spgemm as kernels

    pa = (a.indptr.astype(np.int32), a.indices.astype(np.int32), a.data)
    pb = (b.indptr.astype(np.int32), b.indices.astype(np.int32), b.data)
    runs: list[dict[str, Any]] = []
    counts = np.empty(a.shape[0], dtype=np.int64)
    count_s = []
    for _ in range(rounds + 1):  # the first loads the kernels
        t: dict[str, Any] = {}
        kernels.spgemm(pa, pb, b.shape[1], np.int32, timings=t)
        runs.append(t)
        threads = kernels.numba.get_num_threads()
        work = np.empty(a.shape[0], dtype=np.int64)
        kernels.row_work(pa[0], pa[1], pb[0], work)
        bounds = kernels.chunk_bounds(work, threads * kernels.CHUNKS_PER_THREAD)
        t0 = time.perf_counter()
        kernels.spgemm_count(*pa[:2], *pb[:2], b.shape[1], bounds, counts, min(threads, bounds.shape[0] - 1))
        count_s.append(time.perf_counter() - t0)
    runs, count_s = runs[1:], count_s[1:]
    med = {k: float(np.median([r[k] for r in runs])) for k in PHASES}
    last = runs[-1]
    isz, vsz, rows, nnz_a = 4, a.data.dtype.itemsize, a.shape[0], a.nnz
    flops = last["flops"]
    c_nnz = (a @ b).nnz
    jumps = 2 * nnz_a * isz  # b_ptr[r], b_ptr[r + 1] for each stored value of A
    return {"ms": {k: v * 1e3 for k, v in med.items()}, "count_ms": float(np.median(count_s)) * 1e3,
            "one_pass": last["one_pass"], "flops": flops, "room": last["room"], "moved": last["moved"],
            "nnz_c": c_nnz,
            "bytes": {"bound": (rows + 1) * isz + nnz_a * isz + jumps + rows * 8,
                      "count": (rows + 1) * isz + nnz_a * isz + jumps + flops * isz + rows * 8,
                      "numeric": (rows + 1) * isz + nnz_a * (isz + vsz) + jumps + flops * (isz + vsz)
                      + c_nnz * (isz + vsz) + rows * 8 + 2 * last["moved"] * (isz + vsz),
                      "closing": (rows + 1) * (8 + isz)}}


def _case(name: str, dtype: str, a: sp.csr_matrix, b: sp.csr_matrix, rounds: int, module: Any) -> dict[str, Any]:
    sa, sb = _ours(a), _ours(b)
    want = (a @ b).sorted_indices()
    fns = {"ours": lambda: so.dot(sa, sb), "scipy": lambda: a @ b}
    same_mkl = None
    if module is not None:
        fns["mkl"] = lambda: module.dot_product_mkl(a, b)
        got = module.dot_product_mkl(a, b).tocsr()
        got.sum_duplicates()
        got.sort_indices()
        got.eliminate_zeros()
        tol = 1e-3 if a.dtype == np.float32 else 1e-9
        same_mkl = got.shape == want.shape and abs(got - want).max() <= tol if got.nnz else want.nnz == 0
    same = _same(so.dot(sa, sb), want)
    times = alternating(fns, rounds=rounds)
    result = {"case": name, "dtype": dtype, "n": a.shape[0], "nnz_a": a.nnz, "nnz_b": b.nnz, "nnz_c": want.nnz,
              "same": same, "same_mkl": same_mkl, "ms": {k: float(np.median(v)) * 1e3 for k, v in times.items()},
              "vs_scipy": paired_ratio(times["ours"], times["scipy"])}
    result["vs_mkl"] = paired_ratio(times["ours"], times["mkl"]) if "mkl" in times else None
    result["phases"] = _phases(a, b, rounds)
    return result


def run(scale: int = 1) -> dict[str, Any]:
    """Every case; ``scale`` divides the node and edge counts (10 for --quick, 1000 for the smoke test)."""
    rng = np.random.default_rng(0)
    rounds = 11 if scale == 1 else 2
    module = mkl()
    cases = []
    for nodes in NODES:
        n, edges = max(nodes // scale, 100), max(10 * nodes // scale, 1000)
        graph = power_law(rng, n, edges)
        pair = uniform(rng, n, edges), uniform(rng, n, edges)
        for dtype in DTYPES:
            g = graph.astype(dtype)
            cases.append(_case("power-law graph A @ A", dtype, g, g, rounds, module))
            cases.append(_case("uniform random A @ B", dtype, *(m.astype(dtype) for m in pair), rounds, module))
    load = os.getloadavg()
    return {"cases": cases, "mkl": module is not None, "load": load}


def _verdict(ratio: float | None, target: float) -> str:
    if ratio is None:
        return "n/a"
    return "met" if ratio <= target else "**NOT met**"


def _rate(nbytes: int, ms: float) -> str:
    return f"{nbytes / (ms * 1e-3) / 1e9:.1f}" if ms > 0 else "n/a"


def report(results: dict[str, Any]) -> str:
    rows, checks, phases = [], [], []
    for c in results["cases"]:
        ms = c["ms"]
        mkl_ms = f"{ms['mkl']:.1f}" if "mkl" in ms else "n/a"
        label = f"{c['case']}, {c['dtype']}, {c['n']:,} nodes"
        rows.append([f"{label} (nnz {c['nnz_a']:,} x {c['nnz_b']:,} -> {c['nnz_c']:,})",
                     f"{ms['ours']:.1f}", f"{ms['scipy']:.1f}", mkl_ms, f"{c['vs_scipy']:.2f}",
                     "n/a" if c["vs_mkl"] is None else f"{c['vs_mkl']:.2f}",
                     ("yes" if c["same"] else "NO") + ("" if c["same_mkl"] is None else
                                                       (", MKL too" if c["same_mkl"] else ", MKL differs"))])
        checks.append([label, f"<= {TARGETS['scipy']}x SciPy", f"{c['vs_scipy']:.2f}x",
                       _verdict(c["vs_scipy"], TARGETS["scipy"])])
        checks.append([label, f"<= {TARGETS['mkl']}x MKL",
                       "n/a" if c["vs_mkl"] is None else f"{c['vs_mkl']:.2f}x", _verdict(c["vs_mkl"], TARGETS["mkl"])])
        p = c["phases"]
        pm, pb = p["ms"], p["bytes"]

        def moved(ms: float, nbytes: int) -> str:
            return f"{ms:.1f} ({nbytes / 1e6:.0f} MB, {_rate(nbytes, ms)} GB/s)"

        symbolic = moved(pm["symbolic"], pb["count"]) if not p["one_pass"] else \
            f"skipped (exact count alone: {moved(p['count_ms'], pb['count'])})"
        reserved = p["room"] * (4 + np.dtype(c["dtype"]).itemsize) / 1e6
        phases.append([label, f"{p['flops']:,} / {p['nnz_c']:,}", moved(pm["bound"], pb["bound"]), symbolic,
                       f"{pm['allocation']:.2f} ({reserved:.0f} MB reserved)", moved(pm["numeric"], pb["numeric"]),
                       moved(pm["closing"], pb["closing"]), f"{sum(pm.values()):.1f}"])
    load = ", ".join(f"{x:.2f}" for x in results["load"])
    return "\n".join([
        f"Median ms of alternating rounds; load average after the run: {load} (a shared machine).", "",
        markdown_table(["case", "ours ms", "SciPy ms", "MKL ms", "ours / SciPy", "ours / MKL",
                        "same result as SciPy"], rows), "",
        markdown_table(["case", "target", "this run", "verdict"], checks), "",
        "Our phases (median ms of separate calls, int32 indices; each beside the bytes it must move: the bound "
        "reads A's structure and two row pointers of B per stored value of A; the symbolic count also the column "
        "indices of the selected rows of B; the numeric pass A, the selected rows of B and C's writes, and reads "
        "and writes the entries it moves down to their places; the closing the row pointers; random reads are "
        "counted by their bytes, not their cache lines):", "",
        markdown_table(["case", "multiply-adds / nnz(C)", "bound ms", "symbolic ms", "allocation ms",
                        "numeric ms", "closing ms", "sum ms"], phases)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="sizes 10x smaller")
    args = parser.parse_args()
    from ._timing import describe_machine

    results = run(scale=10 if args.quick else 1)
    text = "\n".join(["# SpGEMM: dot(csr, csr)", "", report(results), "", "## Machine", ""] +
                     [f"- {k}: {v}" for k, v in describe_machine().items()])
    if not args.quick:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "spgemm.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
