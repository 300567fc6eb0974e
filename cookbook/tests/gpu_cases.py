"""Every recipe on cpu(0) and on gpu(0), compared. Run as a script (the gpu tests start it
in a subprocess with ``SPARSE_OPS_CUDA_SIM=1`` when no real gpu exists, since the
simulator must be chosen before numba is imported); prints one JSON object mapping each
case to "ok" or what went wrong. Inputs are tiny: the simulator runs each gpu thread as a
Python thread."""
from __future__ import annotations

import json
import sys
import traceback

import numpy as np

from cookbook_helpers import csr, random_dense  # first: puts the cookbook on sys.path when not installed
import sparse_ops as so
from sparse_ops import autograd as ag
import sparse_ops_cookbook as cb

DTYPES = ("float32", "float64")


def _inputs(dtype: str) -> dict:
    a = random_dense(5, 6, 0.5, seed=1, empty_rows=[2])
    adj = (np.random.default_rng(2).random((5, 5)) < 0.4).astype(np.float64)
    adj[3, 3] = 2.0
    d = {
        "A": csr(a, dtype), "A32": csr(a, dtype, index_dtype="int32"), "X": random_dense(6, 3, 1.0, seed=3),
        "G": random_dense(5, 3, 1.0, seed=4), "H": random_dense(5, 6, 1.0, seed=5), "ADJ": csr(adj, dtype),
        "RSP": so.array(random_dense(6, 4, 0.4, seed=6).astype(dtype)).tostype("row_sparse"),
        "W": random_dense(7, 3, 1.0, seed=7), "g": random_dense(5, 1, 1.0, seed=8)[:, 0],
        # many more columns than stored values: gradients sort the stored values (no full transpose)
        "WIDE": csr(random_dense(5, 120, 0.03, seed=11), dtype),
    }
    return {k: (so.array(v.astype(dtype)) if isinstance(v, np.ndarray) else v) for k, v in d.items()}


def _dtype(d: dict) -> str:
    return d["A"].dtype.name


def _grad_rows(dtype: str) -> so.RowSparseNDArray:
    rng = np.random.default_rng(9)
    return so.row_sparse_array((rng.standard_normal((3, 3)).astype(dtype), np.array([0, 3, 6])), shape=(7, 3))


def _adagrad(d):
    dtype = _dtype(d)
    w, h = d["W"].copy(), so.array(np.full((7, 3), 0.5, dtype=dtype), device=d["W"].device)
    cb.lazy_adagrad(w, _grad_rows(dtype).to(w.device), h, lr=0.1, wd=0.01, out=w)
    return [w, h]


def _adam(d):
    dtype = _dtype(d)
    w = d["W"].copy()
    m, v = (so.zeros((7, 3), dtype=dtype, device=w.device) for _ in range(2))
    for t in (1, 2):
        cb.lazy_adam(w, _grad_rows(dtype).to(w.device), m, v, lr=0.01, wd=0.1, t=t, out=w)
    return [w, m, v]


def _attention_backward(d):
    """A graph-attention layer through autograd: every gradient op runs on the device."""
    a = csr(random_dense(5, 5, 0.5, seed=10), _dtype(d)).to(d["G"].device)
    q, k, v = d["G"].copy(), (d["G"] * 0.5).copy(), d["X"][:5].copy()
    for x in (q, k, v):
        x.attach_grad()
    with ag.record():
        y = cb.csr_spmm(cb.csr_row_softmax(cb.csr_sddmm(a, q, k)), v)
    y.backward()
    return [y, q.grad, k.grad, v.grad]


CASES = {
    "transpose_csr": lambda d: [cb.transpose_csr(d["A"]), cb.transpose_csr(d["A32"])],
    "transpose_row_sparse": lambda d: [cb.transpose_row_sparse(d["RSP"])],
    "csr_spmm": lambda d: [cb.csr_spmm(d["A"], d["X"])],
    "csr_spmm_t": lambda d: [cb.csr_spmm_t(d["A"], d["G"]), cb.csr_spmm_t(d["A"], d["G"], sparse_grad=True)],
    "csr_sddmm": lambda d: [cb.csr_sddmm(d["A"], d["G"], d["X"])],
    "csr_sample": lambda d: [cb.csr_sample(d["A"], d["H"]), cb.csr_sample(d["A"], d["H"].tostype("csr"))],
    "csr_row_softmax": lambda d: [cb.csr_row_softmax(d["A"])],
    "csr_row_softmax_backward": lambda d: [so.ops._csr_row_softmax_backward(cb.csr_row_softmax(d["A"]), d["H"])],
    "embedding_bag": lambda d: [cb.embedding_bag(d["A"], d["X"], mode=m) for m in ("sum", "mean")],
    "embedding_bag_backward": lambda d: [so.ops._embedding_bag_backward(a, d["G"], mode=m)
                                         for a in (d["A"], d["WIDE"]) for m in ("sum", "mean")],
    "fm_interaction": lambda d: [cb.fm_interaction(d["A"], d["X"])],
    "fm_interaction_backward": lambda d: [so.ops._fm_interaction_backward(d["A"], d["X"], d["g"])],
    "gcn_norm": lambda d: [cb.gcn_norm(d["ADJ"]), cb.gcn_norm(d["ADJ"], add_self_loops=False)],
    "lazy_adagrad": _adagrad,
    "lazy_adam": _adam,
    "attention_backward": _attention_backward,
}


def compare(name: str) -> str:
    for dtype in DTYPES:  # both: CI compiles each recorded float32 variant and checks it computes in float32
        host = _inputs(dtype)
        want = CASES[name](host)
        got = CASES[name]({k: v.to(so.gpu(0)) for k, v in host.items()})
        tol = 1e-5 if dtype == "float32" else 1e-12
        for i, (w, g) in enumerate(zip(want, got)):
            if g.device != so.gpu(0):
                return f"{dtype} output {i} is on {g.device}"
            if (g.stype, g.dtype, g.shape) != (w.stype, w.dtype, w.shape):
                return f"{dtype} output {i}: gpu {(g.stype, g.dtype, g.shape)} vs cpu {(w.stype, w.dtype, w.shape)}"
            if g.stype != "default":
                g.check_format(full_check=True)
            if not np.allclose(g.asnumpy(), w.asnumpy(), rtol=tol, atol=tol):
                return f"{dtype} output {i} differs: max {np.max(np.abs(g.asnumpy() - w.asnumpy())):.3g}"
    return "ok"


def main() -> None:
    if so.cuda.is_simulator():
        sys.setswitchinterval(5e-4)  # the simulator's threads meet at barriers: hand the GIL over sooner
    results = {}
    for name in CASES:
        try:
            results[name] = compare(name)
        except Exception:  # report every case, not only the first failure
            results[name] = traceback.format_exc(limit=6)
    print(json.dumps({"gpus": so.num_gpus(), "simulated": so.cuda.is_simulator(), "results": results}))


if __name__ == "__main__":
    main()
