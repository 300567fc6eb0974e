"""``python -m benchmarks.bench_spgemm [--quick]``: ``dot(csr, csr)`` (SpGEMM) against SciPy's
``A @ B`` and MKL's ``dot_product_mkl`` (through ``sparse_dot_mkl``, n/a without it).

Two float32 cases: a power-law graph squared (A @ A, 100k nodes, ~1M edges: hub rows whose
products are long) and a uniform random pair of the same size. The contenders are timed
in alternation in one process; ratios are medians of per-round ours / reference. Our
output is canonical (sorted columns, exact zeros dropped); SciPy's ``A @ B`` leaves its
columns unsorted, and the check compares with ``(A @ B).sorted_indices()``. Issue 18's
targets: <= 0.5x SciPy, <= 1.0x MKL. Writes ``results/spgemm.md``.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

import sparse_ops as so

from ._anchors import mkl
from ._timing import alternating, markdown_table, paired_ratio

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
TARGETS = {"scipy": 0.5, "mkl": 1.0}


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
    return (np.array_equal(got.indptr.asnumpy(), want.indptr) and np.array_equal(got.indices.asnumpy(), want.indices)
            and np.allclose(got.data.asnumpy(), want.data, rtol=1e-4, atol=1e-5))


def _case(name: str, a: sp.csr_matrix, b: sp.csr_matrix, rounds: int, module: Any) -> dict[str, Any]:
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
        same_mkl = got.shape == want.shape and abs(got - want).max() <= 1e-3 if got.nnz else want.nnz == 0
    same = _same(so.dot(sa, sb), want)
    times = alternating(fns, rounds=rounds)
    result = {"case": name, "n": a.shape[0], "nnz_a": a.nnz, "nnz_b": b.nnz, "nnz_c": want.nnz, "same": same,
              "same_mkl": same_mkl, "ms": {k: float(np.median(v)) * 1e3 for k, v in times.items()},
              "vs_scipy": paired_ratio(times["ours"], times["scipy"])}
    result["vs_mkl"] = paired_ratio(times["ours"], times["mkl"]) if "mkl" in times else None
    return result


def run(scale: int = 1) -> dict[str, Any]:
    """Both cases; ``scale`` divides the node and edge counts (10 for --quick, 1000 for the smoke test)."""
    rng = np.random.default_rng(0)
    n, edges = max(100_000 // scale, 100), max(1_000_000 // scale, 1000)
    rounds = 7 if scale == 1 else 2
    module = mkl()
    graph = power_law(rng, n, edges)
    cases = [_case("power-law graph A @ A", graph, graph, rounds, module),
             _case("uniform random A @ B", uniform(rng, n, edges), uniform(rng, n, edges), rounds, module)]
    load = os.getloadavg()
    return {"cases": cases, "mkl": module is not None, "load": load}


def _verdict(ratio: float | None, target: float) -> str:
    if ratio is None:
        return "n/a"
    return "met" if ratio <= target else "**NOT met**"


def report(results: dict[str, Any]) -> str:
    rows, checks = [], []
    for c in results["cases"]:
        ms = c["ms"]
        mkl_ms = f"{ms['mkl']:.1f}" if "mkl" in ms else "n/a"
        rows.append([f"{c['case']} ({c['n']:,} nodes, nnz {c['nnz_a']:,} x {c['nnz_b']:,} -> {c['nnz_c']:,})",
                     f"{ms['ours']:.1f}", f"{ms['scipy']:.1f}", mkl_ms, f"{c['vs_scipy']:.2f}",
                     "n/a" if c["vs_mkl"] is None else f"{c['vs_mkl']:.2f}",
                     ("yes" if c["same"] else "NO") + ("" if c["same_mkl"] is None else
                                                       (", MKL too" if c["same_mkl"] else ", MKL differs"))])
        checks.append([c["case"], f"<= {TARGETS['scipy']}x SciPy", f"{c['vs_scipy']:.2f}x",
                       _verdict(c["vs_scipy"], TARGETS["scipy"])])
        checks.append([c["case"], f"<= {TARGETS['mkl']}x MKL",
                       "n/a" if c["vs_mkl"] is None else f"{c['vs_mkl']:.2f}x", _verdict(c["vs_mkl"], TARGETS["mkl"])])
    load = ", ".join(f"{x:.2f}" for x in results["load"])
    return "\n".join([
        f"float32, median ms of alternating rounds; load average after the run: {load} (a shared machine).", "",
        markdown_table(["case", "ours ms", "SciPy ms", "MKL ms", "ours / SciPy", "ours / MKL",
                        "same result as SciPy"], rows), "",
        markdown_table(["case", "target", "this run", "verdict"], checks)])


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
