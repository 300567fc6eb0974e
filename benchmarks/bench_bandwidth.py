"""Effective memory bandwidth of the main kernels, against the machine's copy bandwidth.

For each kernel: the bytes it must move at the least (every input read once, every output
written once; the model is in the table), divided by its median time, as a share of the
bandwidth of a large ``np.copyto`` measured in the same run. The copy and the kernel take
turns (``_timing.alternating``) and the share is the median of the per-round shares, so
background load hits both alike. ``np.copyto`` runs on one core; our parallel kernels use
numba's threads, so a share above 100% is possible on a machine whose one core cannot
saturate memory. A low share means the kernel is bound by something else: latency of
random reads (gathers), arithmetic, or fixed per-call costs (the embedding step).

Kernels (float32; ``--quick`` divides the row counts by 10):

* csr -> dense, 200,000 x 10,000, 20 values a row (writes the 8 GB dense array);
* ``dot(csr, dense)``: that csr times 10,000 x 64;
* ``dot(csr.T, dense)``: its transpose times 200,000 x 64, row_sparse result;
* ``elemwise_add(csr, csr)``: two such csr matrices with independent structures;
* the embedding step of ``bench_embedding`` (1M x 64 table, 4,096 zipf ids).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

import sparse_ops as so

from . import bench_embedding
from ._timing import alternating, markdown_table
from .bench_conversions import random_csr

COPY_BYTES = 256 * 2**20  # each side of the reference copy: far larger than any cache


def _csr_bytes(m: sp.csr_matrix) -> int:
    return m.indptr.nbytes + m.indices.nbytes + m.data.nbytes


@dataclass
class Row:
    kernel: str
    size: str
    model: str
    bytes: int
    seconds: float
    share: float  # of the copy bandwidth measured alongside

    def row(self) -> list[str]:
        return [self.kernel, self.size, self.model, f"{self.bytes / 1e6:,.1f}", f"{self.seconds * 1e3:.3f}",
                f"{self.bytes / self.seconds / 1e9:.2f}", f"{self.share * 100:.0f}%"]


HEADER = ["kernel", "size", "bytes counted", "MB moved", "median time (ms)", "GB/s", "% of copy bandwidth"]


def copy_reference(scale: int = 1) -> tuple[Callable[[], Any], int]:
    """(the reference copy, the bytes it moves counting read + write) at the suite's size
    divided by ``scale``: the peak other benchmarks time in alternation with their kernels."""
    n = COPY_BYTES // 4 // (1 if scale == 1 else min(scale, 64))
    src, dst = np.ones(n, np.float32), np.empty(n, np.float32)

    def copy() -> None:
        np.copyto(dst, src)

    return copy, 2 * src.nbytes


def share(nbytes: int, kernel_s: list[float], copy_s: list[float], copy_bytes: int) -> float:
    """Median over rounds of the kernel's bandwidth (``nbytes`` / its time) as a share of the
    copy's, from the per-round times of ``alternating``."""
    return statistics.median((nbytes / k) / (copy_bytes / c) for k, c in zip(kernel_s, copy_s))


def _measure(fn: Callable[[], Any], nbytes: int, copy: Callable[[], Any], copy_bytes: int,
             rounds: int, calls: int = 1) -> tuple[float, float, float]:
    """(kernel median s, copy median s, median per-round share of the copy bandwidth)."""
    t = alternating({"copy": copy, "kernel": fn}, rounds=rounds, calls=calls)
    return (statistics.median(t["kernel"]), statistics.median(t["copy"]),
            share(nbytes, t["kernel"], t["copy"], copy_bytes))


def run(quick: bool = False, scale: int | None = None) -> dict[str, Any]:
    """Every kernel at the suite's sizes divided by ``scale`` (``quick``: 10)."""
    scale = scale or (10 if quick else 1)
    rounds = 5 if scale == 1 else 3
    copy, copy_bytes = copy_reference(scale)
    rows, copies = [], []

    def add(kernel: str, size: str, model: str, nbytes: int, fn: Callable[[], Any], r: int = rounds,
            calls: int = 1) -> None:
        k, c, share = _measure(fn, nbytes, copy, copy_bytes, r, calls)
        rows.append(Row(kernel, size, model, nbytes, k, share))
        copies.append(c)

    m = random_csr(200_000 // scale, 10_000, 20)
    x = so.csr_matrix(m)
    size = f"{m.shape[0]:,} x {m.shape[1]:,}, nnz {m.nnz:,}"
    add("csr -> dense", size, "csr read + dense written", _csr_bytes(m) + m.shape[0] * m.shape[1] * 4,
        lambda: x.tostype("default"), r=3 if scale == 1 else rounds)
    b = so.array(np.random.default_rng(0).standard_normal((m.shape[1], 64), dtype=np.float32))
    add("dot(csr, dense)", f"({size}) @ ({m.shape[1]:,} x 64)", "csr + dense read, result written",
        _csr_bytes(m) + b.data.nbytes + m.shape[0] * 64 * 4, lambda: so.dot(x, b))
    g = so.array(np.random.default_rng(1).standard_normal((m.shape[0], 64), dtype=np.float32))
    stored_cols = int(np.count_nonzero(np.bincount(m.indices, minlength=m.shape[1])))
    add("dot(csr.T, dense) -> row_sparse", f"({size}).T @ ({m.shape[0]:,} x 64)",
        "csr + dense read, stored rows written", _csr_bytes(m) + g.data.nbytes + stored_cols * (64 * 4 + 8),
        lambda: so.dot(x, g, transpose_a=True))
    del b, g
    m2 = random_csr(m.shape[0], m.shape[1], 20, seed=7)
    y = so.csr_matrix(m2)
    out_nnz = (m + m2).nnz
    add("elemwise_add(csr, csr) -> csr", f"2 x ({size})", "both csr read, result csr written",
        _csr_bytes(m) + _csr_bytes(m2) + out_nnz * 8 + m.indptr.nbytes, lambda: so.elemwise_add(x, y))
    del x, y, m, m2

    p = bench_embedding.make_problem(rows=1_000_000 // scale, batch=max(4096 // scale, 16))
    step = bench_embedding.ours_step(p)[0]
    add("embedding step (lookup + row_sparse grad + lazy SGD)", f"{p.rows:,} x {p.width}, {p.ids.shape[0]:,} ids",
        "batch rows gathered, head read, grad rows written, updated rows read + written", p.bytes_moved(), step,
        calls=10 if scale == 1 else 2)
    copy_s = statistics.median(copies)
    return {"rows": rows, "copy_gbs": copy_bytes / copy_s / 1e9, "copy_mib": copy_bytes / 2 / 2**20}


def report(result: dict[str, Any]) -> str:
    head = (f"Reference: `np.copyto` of {result['copy_mib']:.0f} MiB (one core), "
            f"{result['copy_gbs']:.2f} GB/s counting read + write (median over the run).")
    return head + "\n\n" + markdown_table(HEADER, [r.row() for r in result["rows"]])


if __name__ == "__main__":
    print(report(run()))
