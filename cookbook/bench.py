"""Time the cookbook's cpu kernels against SciPy / NumPy doing the same work.

    python cookbook/bench.py [--quick]

Each line: the recipe, its time, the reference's time and the ratio (reference / recipe,
above 1 = the recipe is faster). Times are the best of several runs after a warm-up
call (which compiles the kernels or loads them from numba's cache). Numbers depend on
the core count: the products, softmax and factorization-machine kernels are parallel.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import sparse_ops as so  # noqa: E402
import sparse_ops_cookbook as cb  # noqa: E402


def best(fn, repeat: int = 5) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def row_softmax_scipy(m: sp.csr_matrix) -> sp.csr_matrix:
    """Vectorised NumPy reference: per-row max and sum through reduceat."""
    starts = m.indptr[:-1]
    nonempty = starts < m.indptr[1:]
    top = np.zeros(m.shape[0])
    top[nonempty] = np.maximum.reduceat(m.data, starts[nonempty])
    rows = np.repeat(np.arange(m.shape[0]), np.diff(m.indptr))
    e = np.exp(m.data - top[rows])
    total = np.zeros(m.shape[0])
    total[nonempty] = np.add.reduceat(e, starts[nonempty])
    return sp.csr_matrix((e / total[rows], m.indices, m.indptr), shape=m.shape)


def gcn_norm_scipy(m: sp.csr_matrix) -> sp.csr_matrix:
    a = (m + sp.eye(m.shape[0], format="csr")).tocsr()
    deg = np.asarray(a.sum(axis=1)).ravel()
    dinv = sp.diags(np.where(deg > 0, 1 / np.sqrt(np.where(deg > 0, deg, 1)), 0))
    return (dinv @ a @ dinv).tocsr()


def random_csr(n: int, d: int, per_row: int, seed: int) -> sp.csr_matrix:
    """About ``per_row`` stored values per row at random columns (duplicates merged)."""
    rng = np.random.default_rng(seed)
    rows = np.repeat(np.arange(n), per_row)
    cols = rng.integers(0, d, size=rows.shape[0])
    m = sp.coo_matrix((rng.random(rows.shape[0], dtype=np.float32), (rows, cols)), shape=(n, d)).tocsr()
    m.sum_duplicates()
    return m


def main(quick: bool) -> None:
    n, d, k = (20_000, 20_000, 32) if quick else (200_000, 200_000, 64)
    nnz_per_row = 16
    rng = np.random.default_rng(0)
    m = random_csr(n, d, nnz_per_row, seed=0)
    a = so.csr_matrix(m)
    x_np = rng.standard_normal((d, k)).astype(np.float32)
    g_np = rng.standard_normal((n, k)).astype(np.float32)
    x, g = so.array(x_np), so.array(g_np)
    v_np = rng.standard_normal((d, 16)).astype(np.float32) * 0.1
    v = so.array(v_np)
    sq = random_csr(n, n, nnz_per_row // 2, seed=1)
    sq = (sq + sq.T).tocsr()
    sq_so = so.csr_matrix(sq)

    def fm_scipy():
        s = m @ v_np
        return 0.5 * (s * s - m.multiply(m) @ (v_np * v_np)).sum(axis=1)

    rows = [
        ("transpose_csr", lambda: cb.transpose_csr(a), lambda: m.T.tocsr()),
        ("csr_spmm (A @ X)", lambda: cb.csr_spmm(a, x), lambda: m @ x_np),
        ("csr_spmm_t (A.T @ G)", lambda: cb.csr_spmm_t(a, g), lambda: m.T @ g_np),
        ("csr_sddmm", lambda: cb.csr_sddmm(a, g, x),
         lambda: np.einsum("ij,ij->i", g_np[np.repeat(np.arange(n), np.diff(m.indptr))], x_np[m.indices])),
        ("csr_row_softmax", lambda: cb.csr_row_softmax(a), lambda: row_softmax_scipy(m)),
        ("embedding_bag (sum)", lambda: cb.embedding_bag(a, x), lambda: m @ x_np),
        ("fm_interaction", lambda: cb.fm_interaction(a, v), fm_scipy),
        ("gcn_norm", lambda: cb.gcn_norm(sq_so), lambda: gcn_norm_scipy(sq)),
    ]
    print(f"A: {n} x {d} csr float32, {m.nnz} stored; dense operands with {k} columns; {os.cpu_count()} cores")
    for name, ours, ref in rows:
        t_ours, t_ref = best(ours), best(ref)
        print(f"{name:24s} {t_ours * 1e3:9.2f} ms   reference {t_ref * 1e3:9.2f} ms   ratio {t_ref / t_ours:5.2f}")


if __name__ == "__main__":
    main("--quick" in sys.argv)
