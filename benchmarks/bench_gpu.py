"""GPU benchmarks (hardware only; skipped cleanly without CuPy and a GPU).

- ``dot(csr, dense)`` on gpu(0): ours (numba-CUDA kernel, and the optional cuSPARSE branch) against
  ``cupyx.scipy.sparse`` (cuSPARSE) directly; 200k x 10k, 20 nnz/row, 64 columns, float32.
- an embedding step (1M x 64 table, 4096 zipf ids: lookup, row_sparse gradient, lazy SGD)
  against PyTorch ``nn.Embedding(sparse=True)`` + SGD on cuda, when PyTorch has CUDA.
Times are medians after a warm-up, with the device synchronised around each call.
"""
from __future__ import annotations

import statistics
import time

import numpy as np


def _timed(fn, sync, repeat: int = 10) -> float:
    fn()
    sync()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _torch_sync(device: str):
    """The synchronisation for timing torch on ``device`` ('cuda' or 'cpu'), or None when
    this python has no torch or no such device."""
    try:
        import torch
    except ImportError:
        return None
    if device == "cuda":
        return torch.cuda.synchronize if torch.cuda.is_available() else None
    return lambda: None


def embedding_steps(device, vocab: int = 1_000_000, dim: int = 64, batch: int = 4096,
                    torch_device: str | None = "cuda", seed: int = 0):
    """(our step, torch's step) of a sparse embedding training step: ``batch`` Zipf-drawn ids
    into a ``vocab`` x ``dim`` float32 table, the lookup, its row_sparse gradient of the sum
    and a lazy SGD update (ours on ``device``); torch's is ``nn.Embedding(sparse=True)`` +
    SGD on ``torch_device``, None where torch or that device is missing (or it is None)."""
    import sparse_ops as so
    from sparse_ops import autograd as ag

    rng = np.random.default_rng(seed)
    ids = np.minimum(rng.zipf(1.2, size=batch), vocab) - 1
    weight = so.array(rng.standard_normal((vocab, dim)).astype(np.float32), device=device)
    weight.attach_grad(stype="row_sparse")
    id_arr = so.array(ids.astype(np.float32), device=device)

    def ours_step():
        with ag.record():
            emb = so.Embedding(id_arr, weight, input_dim=vocab, output_dim=dim, sparse_grad=True)
            loss = so.sum(emb)
        loss.backward()
        so.sgd_update(weight, weight.grad, lr=0.01, lazy_update=True, out=weight)

    if torch_device is None or _torch_sync(torch_device) is None:
        return ours_step, None
    import torch

    emb_t = torch.nn.Embedding(vocab, dim, sparse=True).to(torch_device)
    opt = torch.optim.SGD(emb_t.parameters(), lr=0.01)
    ids_t = torch.as_tensor(ids, device=torch_device)

    def torch_step():
        opt.zero_grad()
        emb_t(ids_t).sum().backward()
        opt.step()

    return ours_step, torch_step


def run() -> list[list[str]]:
    try:
        import cupy
        import cupyx.scipy.sparse as csp
    except ImportError:
        return [["(skipped)", "CuPy is not installed", "", "", ""]]
    import sparse_ops as so
    from sparse_ops.cuda import kernels

    from .bench_conversions import random_csr

    if so.num_gpus() == 0:
        return [["(skipped)", "no gpu", "", "", ""]]
    sync = cupy.cuda.get_current_stream().synchronize
    rng = np.random.default_rng(0)
    rows, cols, per_row, k = 200_000, 10_000, 20, 64
    host = random_csr(rows, cols, per_row)
    a = so.csr_matrix(host, device=so.gpu(0))
    x = so.array(rng.random((cols, k), dtype=np.float32), device=so.gpu(0))
    ref = csp.csr_matrix((cupy.asarray(host.data), cupy.asarray(host.indices), cupy.asarray(host.indptr)),
                         shape=(rows, cols))
    xr = cupy.asarray(x.data)
    t_ref = _timed(lambda: ref @ xr, sync)
    t_ours = _timed(lambda: so.dot(a, x), sync)
    ours_result = so.dot(a, x).data
    kernels.USE_CUSPARSE = True
    t_branch = _timed(lambda: so.dot(a, x), sync)
    branch_result = so.dot(a, x).data
    kernels.USE_CUSPARSE = False
    expected = ref @ xr
    for name, got in (("numba-CUDA kernel (default)", ours_result), ("cuSPARSE branch", branch_result)):
        err = float(cupy.max(cupy.abs(got - expected)) / cupy.max(cupy.abs(expected)))
        print(f"dot(csr, dense) {name}: max relative difference to cupyx {err:.2e}")
        assert err < 1e-5, (name, err)
    out = [["dot(csr, dense) 200k x 10k @ 10k x 64", f"{t_ours * 1e3:.2f}", f"{t_branch * 1e3:.2f}",
            f"{t_ref * 1e3:.2f}", f"{t_ours / t_ref:.2f}"]]

    b = so.csr_matrix(random_csr(rows, cols, per_row, seed=1), device=so.gpu(0))
    ref_b = b.asscipy()
    t_add = _timed(lambda: so.elemwise_add(a, b), sync)
    t_add_ref = _timed(lambda: ref + ref_b, sync)
    diff = so.elemwise_add(a, b).asscipy() - (ref + ref_b)
    assert diff.nnz == 0 or float(cupy.abs(diff.data).max()) < 1e-5
    out.append(["elemwise_add(csr, csr) 200k x 10k, 4M nnz each", f"{t_add * 1e3:.2f}", "",
                f"{t_add_ref * 1e3:.2f}", f"{t_add / t_add_ref:.2f}"])
    dense = so.array(cupy.asarray(rng.random((20_000, 10_000), dtype=np.float32) < 0.01, dtype=cupy.float32),
                     device=so.gpu(0))
    t_cast = _timed(lambda: dense.tostype("csr"), sync)
    t_cast_ref = _timed(lambda: csp.csr_matrix(dense.data), sync)
    assert int(dense.tostype("csr").nnz) == int(csp.csr_matrix(dense.data).nnz)
    out.append(["dense -> csr 20k x 10k, 1% nnz", f"{t_cast * 1e3:.2f}", "", f"{t_cast_ref * 1e3:.2f}",
                f"{t_cast / t_cast_ref:.2f}"])

    ours_step, torch_step = embedding_steps(so.gpu(0))
    t_ours = _timed(ours_step, sync)
    t_torch = _timed(torch_step, _torch_sync("cuda")) if torch_step else None
    out.append(["embedding step 1M x 64, 4096 zipf ids", f"{t_ours * 1e3:.2f}", "",
                f"{t_torch * 1e3:.2f}" if t_torch else "n/a (no CUDA PyTorch)",
                f"{t_ours / t_torch:.2f}" if t_torch else "n/a"])
    return out


def report(rows: list[list[str]]) -> str:
    from ._timing import markdown_table

    return markdown_table(["case", "ours (ms)", "ours, cuSPARSE branch (ms)", "reference (ms)",
                           "ours / reference"], rows)


if __name__ == "__main__":
    print(report(run()))
