"""The PyTorch bridge on a real gpu (run by benchmarks/gpu_check.sh; needs torch with CUDA and
CuPy): zero-copy conversions of cuda tensors, bridged ops on cuda tensors running on
torch.cuda.current_stream() (a side stream, no host synchronisation asked for), gradients.
Prints one line per check and exits non-zero on the first failure."""
from __future__ import annotations

import sys
from typing import Iterator


def checks() -> Iterator[str]:
    """What each check showed, one line per check passed, in order; a failed check raises
    (AssertionError saying what differs). Needs torch with CUDA."""
    import numpy as np
    import scipy.sparse as sp
    import torch
    import cupy

    import sparse_ops as so
    import sparse_ops.torch as st
    import sparse_ops_cookbook  # noqa: F401

    dev = torch.device("cuda", 0)
    x = torch.randn(64, 32, device=dev)
    a = st.from_torch(x)
    assert a.device == so.gpu(0) and a.data.data.ptr == x.data_ptr(), "dense cuda from_torch is not zero-copy"
    assert st.to_torch(a).data_ptr() == x.data_ptr(), "dense cuda to_torch is not zero-copy"
    yield "dense cuda round trip shares memory"
    m = sp.random(200, 32, density=0.1, format="csr", dtype=np.float32, random_state=0)
    c = st.to_torch(so.csr_matrix(m).to(so.gpu(0)))
    assert c.layout == torch.sparse_csr and c.device == dev
    back = st.from_torch(c)
    assert back.data.data.ptr == c.values().data_ptr(), "csr cuda round trip copied"
    yield "csr cuda round trip shares memory"
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        w = torch.randn(32, 16, device=dev, requires_grad=True)
        y = st.ops.csr_spmm(c, w)  # kernels on the side stream: torch's current one
        y.square().sum().backward()
    side.synchronize()
    ref = torch.from_numpy(m.toarray()).to(dev) @ w.detach()
    torch.testing.assert_close(y.detach(), ref, rtol=1e-4, atol=1e-4)
    assert w.grad is not None
    torch.testing.assert_close(w.grad.to_dense(), 2 * torch.from_numpy(m.toarray()).to(dev).T @ ref,
                               rtol=1e-3, atol=1e-3)
    yield "csr_spmm forward/backward on a side stream matches torch"
    z = st.ops.relu(torch.randn(8, 8, device=dev))
    assert z.device == dev and bool((z >= 0).all())
    yield ("dense op on cuda; cupy current stream is restored: "
           f"{cupy.cuda.get_current_stream().ptr == cupy.cuda.Stream.null.ptr}")


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print("torch_gpu_check: torch has no cuda here; skipped")
        return 0
    for line in checks():
        print("ok  ", line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
