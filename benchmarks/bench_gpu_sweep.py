"""GPU sweep (hardware only): where cuSPARSE pays for ``dot(csr, dense)`` and where the time of
an embedding step goes. The measurements behind ``sparse_ops.cuda.kernels.USE_CUSPARSE``'s default.

``python -m benchmarks.bench_gpu_sweep`` prints two markdown tables:
- ``dot(csr, dense)``, float32, 100k rows x 10k columns, for nnz per row x dense columns: our
  numba-CUDA kernel, our cuSPARSE branch and ``cupyx`` directly, medians in ms;
- the embedding step (1M x 64, 4096 zipf ids) split into forward, backward and lazy update.
"""
from __future__ import annotations

import numpy as np

from .bench_gpu import _timed


def dot_sweep() -> str:
    import cupy

    import sparse_ops as so
    from sparse_ops.cuda import kernels

    from ._timing import markdown_table
    from .bench_conversions import random_csr

    sync = cupy.cuda.get_current_stream().synchronize
    rng = np.random.default_rng(0)
    rows, cols = 100_000, 10_000
    out = []
    for per_row in (4, 20, 200):
        host = random_csr(rows, cols, per_row)
        a = so.csr_matrix(host, device=so.gpu(0))
        ref = a.asscipy()
        for k in (8, 64, 512):
            x = so.array(rng.random((cols, k), dtype=np.float32), device=so.gpu(0))
            xr = x.data
            kernels.USE_CUSPARSE = False
            t_numba = _timed(lambda: so.dot(a, x), sync)
            kernels.USE_CUSPARSE = True
            t_branch = _timed(lambda: so.dot(a, x), sync)
            kernels.USE_CUSPARSE = False
            t_ref = _timed(lambda: ref @ xr, sync)
            out.append([str(per_row), str(k), f"{t_numba * 1e3:.3f}", f"{t_branch * 1e3:.3f}",
                        f"{t_ref * 1e3:.3f}", f"{t_numba / t_ref:.2f}"])
    return markdown_table(["nnz/row", "columns", "numba-CUDA (ms)", "cuSPARSE branch (ms)", "cupyx (ms)",
                           "numba / cupyx"], out)


def embedding_parts() -> str:
    import cupy

    import sparse_ops as so
    from sparse_ops import autograd as ag

    from ._timing import markdown_table

    sync = cupy.cuda.get_current_stream().synchronize
    rng = np.random.default_rng(0)
    vocab, dim, batch = 1_000_000, 64, 4096
    ids = np.minimum(rng.zipf(1.2, size=batch), vocab) - 1
    weight = so.array(rng.standard_normal((vocab, dim)).astype(np.float32), device=so.gpu(0))
    weight.attach_grad(stype="row_sparse")
    id_arr = so.array(ids.astype(np.float32), device=so.gpu(0))
    kw = dict(input_dim=vocab, output_dim=dim, sparse_grad=True)

    def forward():
        return so.Embedding(id_arr, weight, **kw)

    def recorded():
        with ag.record():
            loss = so.sum(so.Embedding(id_arr, weight, **kw))
        return loss

    def backward():
        recorded().backward()

    def update():
        so.sgd_update(weight, weight.grad, lr=0.01, lazy_update=True, out=weight)

    backward()
    grad = weight.grad
    parts = [("Embedding forward", forward, None), ("record forward + sum", recorded, None),
             ("record + backward", backward, None), ("lazy sgd_update", update, None),
             ("unique of the ids (cupy)", lambda: cupy.unique(id_arr.data), None)]
    out = [[name, f"{_timed(fn, sync) * 1e3:.3f}"] for name, fn, _ in parts]
    out.append(["(gradient rows stored)", str(int(grad.indices.shape[0]))])
    return markdown_table(["part", "ms"], out)


if __name__ == "__main__":
    print(dot_sweep())
    print()
    print(embedding_parts())
