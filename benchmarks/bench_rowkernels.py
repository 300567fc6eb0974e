"""The one-body row kernels (``sparse_ops.sdk.rowkernel``) against the cpu kernels they
replaced, in one process, taking turns.

    python -m benchmarks.bench_rowkernels [--baseline REV] [--rounds N] [--quick]

The replaced kernels are read from the git revision each replaced file last existed in
(832b943: the separate cpu and gpu twins; 2f6adf5: the embedding gradient's own segment
sum), or from ``REV`` for all when given, into a temporary folder and imported from there; the new ones are this checkout's. Each case runs the old and the new driver
alternately (``_timing.alternating``), on the same inputs, with the same serial/parallel
choice each made then; the ratio is the median over rounds of new / old (below 1: the
new form is faster). Sizes: csr 200k x 10k with 20 values a row @ 64 columns for the
built-ins' product, and ``cookbook/bench.py``'s sizes for the recipes (200k rows, 16
values a row, 64 columns, 16 factors).
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks._timing import alternating, markdown_table, paired_ratio  # noqa: E402

OLD_FILES = {  # key: (revision, path)
    "cookbook": ("832b943", "cookbook/sparse_ops_cookbook/kernels/cpu.py"),
    "linalg": ("832b943", "sparse_ops/kernels/linalg.py"),
    "elemwise": ("832b943", "sparse_ops/kernels/elemwise.py"),
    "structure": ("832b943", "sparse_ops/kernels/structure.py"),
    "reduce": ("832b943", "sparse_ops/kernels/reduce.py"),
    "nn": ("2f6adf5", "sparse_ops/kernels/nn.py"),
}


def load_old(rev: str | None, folder: str) -> dict[str, Any]:
    """The replaced kernel modules (of revision ``rev``, else each file's own), imported from
    copies in ``folder`` (their package-relative imports pointed at this checkout's
    ``sparse_ops.kernels``)."""
    modules = {}
    for key, (own_rev, path) in OLD_FILES.items():
        text = subprocess.run(["git", "-C", ROOT, "show", f"{rev or own_rev}:{path}"], check=True,
                              capture_output=True, text=True).stdout
        text = text.replace("from . import jit", "from sparse_ops.kernels import jit")
        file = os.path.join(folder, f"old_{key}.py")
        with open(file, "w") as f:
            f.write(text)
        spec = importlib.util.spec_from_file_location(f"old_{key}", file)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        modules[key] = module
    return modules


def random_csr(n: int, d: int, per_row: int, seed: int, dtype: Any = np.float32) -> sp.csr_matrix:
    """About ``per_row`` stored values per row at random columns (duplicates merged)."""
    rng = np.random.default_rng(seed)
    rows = np.repeat(np.arange(n), per_row)
    cols = rng.integers(0, d, size=rows.shape[0])
    m = sp.coo_matrix((rng.random(rows.shape[0]).astype(dtype), (rows, cols)), shape=(n, d)).tocsr()
    m.sum_duplicates()
    return m


def cases(old: dict[str, Any], quick: bool) -> dict[str, tuple[Callable[[], Any], Callable[[], Any]]]:
    """name -> (old driver call, new driver call) on shared inputs."""
    import numba

    from sparse_ops.sdk import csr
    from sparse_ops.kernels import elemwise
    from sparse_ops_cookbook.kernels import rows as new

    cb = old["cookbook"]
    scale = 10 if quick else 1

    class _Host:  # what the drivers read off an op context on the cpu
        xp = np
        device = type("D", (), {"device_type": "cpu"})()

    rng = np.random.default_rng(0)
    out: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {}

    # the built-ins' csr @ dense: 200k x 10k, 20 a row, @ 64 columns
    a = random_csr(200_000 // scale, 10_000, 20, seed=3)
    b = rng.standard_normal((10_000, 64)).astype(np.float32)
    prod = np.empty((a.shape[0], 64), dtype=np.float32)
    lin = old["linalg"]
    par = a.nnz * 64 >= 250_000 and numba.get_num_threads() > 1  # the old linalg threshold
    out["dot csr @ dense (f32)"] = (
        (lambda: lin.csr_dense(a.indptr, a.indices, a.data, b, prod)) if par
        else (lambda: lin.csr_dense_rows(a.indptr, a.indices, a.data, b, prod, 0, a.shape[0])),
        lambda: csr.csr_dense(None, a.indptr, a.indices, a.data, b, prod))
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    prod64 = np.empty_like(prod, dtype=np.float64)
    out["dot csr @ dense (f64)"] = (
        (lambda: lin.csr_dense(a64.indptr, a64.indices, a64.data, b64, prod64)) if par
        else (lambda: lin.csr_dense_rows(a64.indptr, a64.indices, a64.data, b64, prod64, 0, a.shape[0])),
        lambda: csr.csr_dense(None, a64.indptr, a64.indices, a64.data, b64, prod64))

    # csr merges (elemwise_add / mul of two csr), transpose, row sums
    c = random_csr(200_000 // scale, 10_000, 20, seed=4)
    em = old["elemwise"]
    counts = np.empty(a.shape[0], dtype=np.int64)
    idt = np.int32

    def merge(module: Any, op: int, new_form: bool) -> Callable[[], Any]:
        def run():
            if new_form:
                return elemwise.csr_merge(None, (a.indptr, a.indices, a.data), (c.indptr, c.indices, c.data), op, idt)
            module.csr_merge_count(a.indptr, a.indices, c.indptr, c.indices, op != 2, counts)
            indptr = np.zeros(a.shape[0] + 1, dtype=idt)
            np.cumsum(counts, out=indptr[1:])
            nnz = int(indptr[-1])
            indices, values = np.empty(nnz, dtype=idt), np.empty(nnz, dtype=a.data.dtype)
            module.csr_merge_fill(a.indptr, a.indices, a.data, c.indptr, c.indices, c.data, op, indptr, indices,
                                  values)
            return values, indices, indptr
        return run

    out["elemwise_add csr + csr"] = (merge(em, 0, False), merge(em, 0, True))
    out["elemwise_mul csr * csr"] = (merge(em, 2, False), merge(em, 2, True))

    t_ptr = np.empty(10_001, dtype=a.indptr.dtype)
    t_idx = np.empty(a.nnz, dtype=a.indices.dtype)
    t_val = np.empty(a.nnz, dtype=a.data.dtype)
    st = old["structure"]
    out["transpose csr (built-in)"] = (
        lambda: st.csr_transpose(a.indptr, a.indices, a.data, 10_000, t_ptr, t_idx, t_val),
        lambda: csr.transpose_into(None, 10_000, a.indptr, a.indices, a.data, t_ptr, t_idx, t_val))
    rd = old["reduce"]
    sums = np.zeros(a.shape[0])
    out["sum(csr, axis=1)"] = (lambda: rd.csr_row_sums(a.indptr, a.data, 0, sums),
                               lambda: csr.segment_sum(None, a.indptr, a.data, sums))

    # the cookbook at cookbook/bench.py's sizes
    n, d, k = 200_000 // scale, 200_000 // scale, 64
    m = random_csr(n, d, 16, seed=0)
    x = rng.standard_normal((d, k)).astype(np.float32)
    g = rng.standard_normal((n, k)).astype(np.float32)
    v = (rng.standard_normal((d, 16)) * 0.1).astype(np.float32)
    y = np.empty((n, k), dtype=np.float32)
    ip, ix, dt = m.indptr, m.indices, m.data
    out["cookbook csr_spmm"] = (lambda: cb.spmm(None, ip, ix, dt, x, False, y),
                                lambda: new.spmm(None, ip, ix, dt, x, False, y))
    out["cookbook embedding_bag mean"] = (lambda: cb.spmm(None, ip, ix, dt, x, True, y),
                                          lambda: new.spmm(None, ip, ix, dt, x, True, y))
    vals = np.empty(m.nnz, dtype=np.float32)
    out["cookbook sddmm"] = (lambda: cb.sddmm(None, ip, ix, g, x, vals),
                             lambda: new.sddmm(None, ip, ix, g, x, vals))
    out["cookbook row_softmax"] = (lambda: cb.row_softmax(None, ip, dt, vals),
                                   lambda: new.row_softmax(None, ip, dt, vals))
    grad = rng.standard_normal(m.nnz).astype(np.float32)
    out["cookbook row_softmax backward"] = (lambda: cb.row_softmax_backward(None, ip, dt, grad, vals),
                                            lambda: new.row_softmax_backward(None, ip, dt, grad, vals))
    fm = np.empty(n, dtype=np.float32)
    out["cookbook fm forward"] = (lambda: cb.fm_forward(None, ip, ix, dt, v, fm),
                                  lambda: new.fm_forward(_Host, ip, ix, dt, v, fm))
    tp, tx, tv = (np.empty(d + 1, dtype=ip.dtype), np.empty(m.nnz, dtype=ix.dtype), np.empty(m.nnz, dtype=dt.dtype))
    cb.transpose(None, d, ip, ix, dt, tp, tx, tv)
    out["cookbook transpose"] = (lambda: cb.transpose(None, d, ip, ix, dt, tp, tx, tv),
                                 lambda: new.transpose(None, d, ip, ix, dt, tp, tx, tv))
    rows_nz, c_ptr = cb.nonempty_rows(None, tp)
    s_fm = rng.standard_normal((n, 16)).astype(np.float32)
    g_fm = rng.standard_normal(n).astype(np.float32)
    dv = np.empty((rows_nz.shape[0], 16), dtype=np.float32)
    out["cookbook fm backward"] = (lambda: cb.fm_backward_rows(None, c_ptr, tx, tv, rows_nz, v, g_fm, s_fm, dv),
                                   lambda: new.fm_backward_rows(None, c_ptr, tx, tv, rows_nz, v, g_fm, s_fm, dv))
    dense = rng.standard_normal((2_000 // scale, 2_000)).astype(np.float32)
    small = random_csr(2_000 // scale, 2_000, 16, seed=5)
    gathered = np.empty(small.nnz, dtype=np.float32)
    out["cookbook gather dense"] = (
        lambda: cb.gather_dense(None, small.indptr, small.indices, dense, gathered),
        lambda: new.gather_dense(None, small.indptr, small.indices, dense, gathered))
    out["cookbook gather csr"] = (
        lambda: cb.gather_csr(None, ip, ix, ip, ix, dt, vals),
        lambda: new.gather_csr(None, ip, ix, ip, ix, dt, vals))

    sq = random_csr(n, n, 8, seed=1)
    sq = (sq + sq.T).tocsr()
    cnt, deg = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.float64)
    out["cookbook gcn count"] = (
        lambda: cb.gcn_count(None, sq.indptr, sq.indices, sq.data, True, cnt, deg),
        lambda: new.gcn_count(None, sq.indptr, sq.indices, sq.data, True, cnt, deg))
    cb.gcn_count(None, sq.indptr, sq.indices, sq.data, True, cnt, deg)
    o_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(cnt, out=o_ptr[1:])
    dinv = 1 / np.sqrt(deg)
    o_idx, o_val = np.empty(o_ptr[-1], dtype=sq.indices.dtype), np.empty(o_ptr[-1], dtype=np.float32)
    out["cookbook gcn fill"] = (
        lambda: cb.gcn_fill(None, sq.indptr, sq.indices, sq.data, True, dinv, o_ptr, o_idx, o_val),
        lambda: new.gcn_fill(None, sq.indptr, sq.indices, sq.data, True, dinv, o_ptr, o_idx, o_val))

    w = rng.standard_normal((1_000_000 // scale, 64)).astype(np.float32)
    hist, mean, var = np.ones_like(w), np.zeros_like(w), np.ones_like(w)
    upd = np.sort(rng.choice(w.shape[0], 65_536 // scale, replace=False)).astype(np.int64)
    gr = (rng.standard_normal((upd.shape[0], 64)) * 1e-3).astype(np.float32)
    out["cookbook adagrad rows"] = (lambda: cb.adagrad_rows(None, w, upd, gr, hist, 1e-9, 1e-7, 0.0),
                                    lambda: new.adagrad_rows(None, w, upd, gr, hist, 1e-9, 1e-7, 0.0))
    out["cookbook adam rows"] = (
        lambda: cb.adam_rows(None, w, upd, gr, mean, var, 1e-9, 0.9, 0.999, 1e-8, 0.0, 0.1, 0.001),
        lambda: new.adam_rows(None, w, upd, gr, mean, var, 1e-9, 0.9, 0.999, 1e-8, 0.0, 0.1, 0.001))

    stored_idx = np.sort(rng.choice(20_000, 2_000 // scale, replace=False)).astype(np.int64)
    stored = rng.standard_normal((stored_idx.shape[0], 512)).astype(np.float32)
    stored[:, ::3] = 0
    out["cookbook rsp transpose"] = (lambda: cb.rsp_transpose(_Host, 20_000, stored_idx, stored),
                                     lambda: new.rsp_transpose(_Host, 20_000, stored_idx, stored))

    from sparse_ops.sdk import csr as sdk_csr
    from sparse_ops.sdk import groups

    ids = rng.zipf(1.2, 4 * 262_144 // scale) % (1_000_000 // scale)  # an embedding batch's ids, power law
    head = rng.standard_normal((ids.shape[0], 64)).astype(np.float32)
    rank, unique, _ = groups.rank_ids(ids, 1_000_000 // scale)
    order, starts = groups.group_by_rank(rank, unique.shape[0])
    slots = np.arange(unique.shape[0])
    sums = np.empty((unique.shape[0], 64), dtype=np.float32)
    out["embedding gradient segment sum"] = (
        lambda: old["nn"].segment_sum_rows(order, starts, head, slots, sums),
        lambda: sdk_csr.segment_sum_rows(None, starts, order, head, slots, sums))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=None, help="one revision for every replaced file")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--quick", action="store_true", help="inputs 10x smaller")
    parser.add_argument("--only", default="", help="run the cases whose name contains this")
    args = parser.parse_args()
    import numba

    with tempfile.TemporaryDirectory() as folder:
        old = load_old(args.baseline, folder)
        rows = []
        for name, (before, after) in cases(old, args.quick).items():
            if args.only and args.only not in name:
                continue
            t = alternating({"old": before, "new": after}, rounds=args.rounds, warmup=2)
            ratio = paired_ratio(t["new"], t["old"])
            med = {k: float(np.median(v)) * 1e3 for k, v in t.items()}
            rows.append([name, f"{med['old']:.2f}", f"{med['new']:.2f}", f"{ratio:.2f}"])
            print(f"{name:34s} old {med['old']:8.2f} ms  new {med['new']:8.2f} ms  new/old {ratio:.2f}", flush=True)
    print()
    print(f"numba threads: {numba.get_num_threads()}; baseline {args.baseline}; medians of {args.rounds} rounds")
    print(markdown_table(["kernel (cpu)", "old ms", "new ms", "new / old"], rows))


if __name__ == "__main__":
    main()
