"""Storage-conversion speed of sparse_ops next to the closest SciPy operation.

Every case is float32 with random canonical csr input built in vectorised NumPy. Each
row reports our median time, SciPy's median time and ours / SciPy (below 1 means we are
faster). Both sides are warmed up first (numba kernels compile or load from their
on-disk cache on the first call). At most one dense result is alive at a time: the
csr -> dense case makes 8 GB arrays on a 24 GiB machine.

Cases (``--quick`` divides every row count by 10):

* csr -> dense, 200,000 x 10,000, 20 nnz per row: ``x.tostype("default")`` vs
  ``m.toarray()``; the numba scatter kernel against SciPy's C++ loop.
* dense -> csr, 20,000 x 10,000 at 1 %: ``d.tostype("csr")`` (the ``so.array`` copy is
  not timed) vs ``scipy.sparse.csr_matrix(dense)``.
* csr -> row_sparse and row_sparse -> csr, 200,000 x 1,000, 20 nnz per row, half the
  rows empty. SciPy has no row_sparse type, so the references are the nearest SciPy
  work: the dense block of the non-empty rows (``m[rows].toarray()``) and that block
  back to csr (``csr_matrix(block)``).
* from SciPy: ``so.csr_matrix(m)`` (zero-copy, but validates every index, O(nnz)) vs
  ``scipy.sparse.csr_matrix((data, indices, indptr), shape=...)`` with SciPy's default
  check (O(1): lengths and dtypes only), so this ratio is the price of full validation.
"""
from __future__ import annotations

import argparse
import gc
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

import sparse_ops as so

from ._timing import markdown_table, median_time


@dataclass
class Result:
    case: str
    size: str
    ours: str
    reference: str
    ours_s: float
    ref_s: float
    same: bool

    def row(self) -> list[str]:
        return [self.case, self.size, self.ours, self.reference, f"{self.ours_s:.4g}",
                f"{self.ref_s:.4g}", f"{self.ours_s / self.ref_s:.2f}", "yes" if self.same else "**NO**"]


HEADER = ["case", "size", "ours", "reference (SciPy)", "ours (s)", "reference (s)",
          "ours / reference", "same result"]


def random_csr(rows: int, cols: int, per_row: int, nonempty_fraction: float = 1.0,
               seed: int = 0) -> sp.csr_matrix:
    """A canonical float32 csr: ``per_row`` sorted unique columns in each non-empty row.

    Vectorised: draw ``per_row`` values in ``[0, cols - per_row]`` per row, sort each row
    and add ``0, 1, ..., per_row - 1``, which makes them strictly increasing and < cols.
    Values lie in [0.5, 1.5), so none is an explicit zero.
    """
    rng = np.random.default_rng(seed)
    n_nonempty = int(round(rows * nonempty_fraction))
    nonempty = np.sort(rng.choice(rows, size=n_nonempty, replace=False))
    cols_drawn = rng.integers(0, cols - per_row + 1, size=(n_nonempty, per_row))
    cols_drawn.sort(axis=1)
    cols_drawn += np.arange(per_row)
    counts = np.zeros(rows, dtype=np.int64)
    counts[nonempty] = per_row
    indptr = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(counts, out=indptr[1:])
    data = rng.uniform(0.5, 1.5, size=n_nonempty * per_row).astype(np.float32)
    return sp.csr_matrix((data, cols_drawn.ravel().astype(np.int32), indptr), shape=(rows, cols))


def _size(m: sp.csr_matrix) -> str:
    return f"{m.shape[0]:,} x {m.shape[1]:,}, nnz {m.nnz:,}"


def bench_csr_to_dense(m: sp.csr_matrix) -> Result:
    """csr -> dense; repeat=3 because every call writes an 8 GB array (full size)."""
    x = so.csr_matrix(m)
    ours = median_time(lambda: x.tostype("default"), repeat=3)
    ref = median_time(lambda: m.toarray(), repeat=3)
    # Spot check on 1,000 rows: never two full dense results alive at once.
    dense = x.tostype("default").data  # zero-copy view of the values
    rows = np.linspace(0, m.shape[0] - 1, 1000).astype(np.int64)
    same = np.array_equal(dense[rows], m[rows].toarray())
    del dense
    gc.collect()
    return Result("csr -> dense", _size(m), '`x.tostype("default")`', "`m.toarray()`", ours, ref, same)


def bench_from_scipy(m: sp.csr_matrix) -> Result:
    """Wrapping an existing SciPy csr; ours checks every index (O(nnz)), SciPy's default O(1)."""
    ours = median_time(lambda: so.csr_matrix(m))
    ref = median_time(lambda: sp.csr_matrix((m.data, m.indices, m.indptr), shape=m.shape))
    same = (so.csr_matrix(m).asscipy() != m).nnz == 0
    return Result("from SciPy (wrap + validate)", _size(m), "`so.csr_matrix(m)` (full O(nnz) check)",
                  "`csr_matrix((data, indices, indptr), shape)` (default O(1) check)", ours, ref, same)


def bench_dense_to_csr(rows: int) -> Result:
    """dense -> csr; only ``tostype`` is timed, not the ``so.array`` copy."""
    m = random_csr(rows, 10_000, 100, seed=1)  # 1 % density
    dense = m.toarray()
    d = so.array(dense)
    ours = median_time(lambda: d.tostype("csr"))
    ref = median_time(lambda: sp.csr_matrix(dense))
    same = (d.tostype("csr").asscipy() != m).nnz == 0
    return Result("dense -> csr", _size(m), '`d.tostype("csr")`', "`csr_matrix(dense)`", ours, ref, same)


def bench_row_sparse(rows: int) -> list[Result]:
    """csr <-> row_sparse with half the rows empty, against the nearest SciPy work."""
    m = random_csr(rows, 1_000, 20, nonempty_fraction=0.5, seed=2)
    x = so.csr_matrix(m)
    size = _size(m) + ", half the rows empty"

    ours = median_time(lambda: x.tostype("row_sparse"))
    ref = median_time(lambda: m[np.flatnonzero(np.diff(m.indptr))].toarray())
    r = x.tostype("row_sparse")
    nonempty = np.flatnonzero(np.diff(m.indptr))
    block = m[nonempty].toarray()
    same = np.array_equal(np.asarray(r.indices), nonempty) and np.array_equal(np.asarray(r.data), block)
    to_rsp = Result("csr -> row_sparse", size, '`x.tostype("row_sparse")`',
                    "`m[rows].toarray()`, rows = non-empty rows (no row_sparse in SciPy)", ours, ref, same)

    ours = median_time(lambda: r.tostype("csr"))
    ref = median_time(lambda: sp.csr_matrix(block))
    same = (r.tostype("csr").asscipy() != m).nnz == 0
    to_csr = Result("row_sparse -> csr", size, '`r.tostype("csr")`',
                    "`csr_matrix(block)`, block = dense non-empty rows (no row_sparse in SciPy)",
                    ours, ref, same)
    return [to_rsp, to_csr]


def run(quick: bool = False, scale: int | None = None) -> list[Result]:
    """All cases, biggest first; every row count divided by ``scale`` (``quick``: 10)."""
    scale = scale or (10 if quick else 1)
    results = []
    m = random_csr(200_000 // scale, 10_000, 20)
    results.append(bench_csr_to_dense(m))
    results.append(bench_from_scipy(m))
    del m
    gc.collect()
    results.append(bench_dense_to_csr(20_000 // scale))
    gc.collect()
    results += bench_row_sparse(200_000 // scale)
    gc.collect()
    return results


def report(results: list[Result]) -> str:
    return markdown_table(HEADER, [r.row() for r in results])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="every case 10x smaller (smoke run)")
    print(report(run(parser.parse_args().quick)))


if __name__ == "__main__":
    main()
