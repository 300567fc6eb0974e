"""A short, checked tour of the containers (``sparse-ops demo --tour``; the main job,
``sparse-ops demo``, is the cookbook's model-training demo).

Every step prints what it did and verifies its result against NumPy/SciPy, so the
tour doubles as a smoke test of an installation.
"""
from __future__ import annotations

import os
import tempfile
import time

import numpy as np


def _random_csr(rows: int, cols: int, per_row: int, seed: int):
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    per_row = min(per_row, cols)
    # per_row distinct columns in each row: the positions of the per_row smallest random keys
    indices = np.sort(np.argsort(rng.random((rows, cols)), axis=1)[:, :per_row], axis=1)
    data = rng.standard_normal(rows * per_row).astype(np.float32)
    indptr = np.arange(0, rows * per_row + 1, per_row, dtype=np.int64)
    return sp.csr_matrix((data, indices.ravel(), indptr), shape=(rows, cols))


def run(rows: int = 2000, cols: int = 500, per_row: int = 8, seed: int = 0) -> None:
    """Build a random csr matrix, walk through views, conversions, slicing, retain and files."""
    import sparse_ops as so

    def step(title: str) -> None:
        print(f"\n== {title}")

    m = _random_csr(rows, cols, per_row, seed)
    step(f"a {rows}x{cols} SciPy csr matrix with {m.nnz} stored values, wrapped without a copy")
    x = so.csr_matrix(m)
    print(x)
    assert np.shares_memory(x.data, m.data) and x.indices.dtype == m.indices.dtype
    print("data shares SciPy's memory:", np.shares_memory(x.data, m.data))
    print("aux_types:", [d.name for d in x.aux_types], " aux_shapes:", x.aux_shapes)
    try:
        x.indices[0] = 1
    except ValueError as exc:
        print("index views are read-only:", exc)

    step("conversions between all storage types")
    dense = m.toarray()
    for src in ("default", "row_sparse", "csr"):
        for dst in ("default", "row_sparse", "csr"):
            t0 = time.perf_counter()
            y = x.tostype(src).tostype(dst)
            dt = (time.perf_counter() - t0) * 1e3
            assert y.stype == dst and np.array_equal(y.asnumpy(), dense)
            print(f"  csr -> {src:10s} -> {dst:10s} ok  ({dt:6.1f} ms, first calls compile)")

    step("row slicing (zero-copy) and retain")
    s = x[10:20]
    assert np.array_equal(s.asnumpy(), dense[10:20]) and np.shares_memory(s.data, x.data)
    print(s)
    r = x.tostype("row_sparse").retain(np.array([3, 5, 7]))
    kept = np.zeros_like(dense)
    kept[[3, 5, 7]] = dense[[3, 5, 7]]
    assert np.array_equal(r.asnumpy(), kept)
    print(r)

    step("validation at the boundary")
    try:
        so.csr_matrix((np.ones(2, np.float32), np.array([3, 1]), np.array([0, 2])), shape=(1, 4))
    except so.SparseFormatError as exc:
        print("refused:", exc)

    step("save and load (.npz, never pickled; SciPy reads a single csr)")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "tour.npz")
        so.save(path, {"x": x, "rows": x.tostype("row_sparse"), "dense": so.array(dense[:4])})
        back = so.load(path)
        assert all(np.array_equal(back[k].asnumpy(), v) for k, v in
                   (("x", dense), ("rows", dense), ("dense", dense[:4])))
        print({k: v.stype for k, v in back.items()})
        import scipy.sparse as sp

        single = os.path.join(tmp, "single.npz")
        so.save(single, x)
        assert (sp.load_npz(single) != m).nnz == 0
        print("scipy.sparse.load_npz reads our single-csr file: ok")

    step("devices")
    print("cpu:", so.cpu(), " gpus available:", so.num_gpus())
    print("\ntour finished: every step matched NumPy/SciPy")
