"""Per-call cost of a bridged op against a plain ``torch.library.custom_op`` doing the same
arithmetic, on 4x4 float32 tensors (ours and torch's calls alternate; medians of rounds).

    python -m benchmarks.torch_overhead
"""
from __future__ import annotations

import statistics
import time


def measure(rounds: int = 15, calls: int = 2000) -> dict[str, float]:
    """Median microseconds per call: bridged ``elemwise_mul``, the custom_op, their ratio."""
    import torch

    import sparse_ops.torch as st

    @torch.library.custom_op("sparse_ops_bench::torch_mul", mutates_args=(), schema="(Tensor x, Tensor y) -> Tensor")
    def mul(x, y):
        return x * y

    def setup(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return g * y, g * x

    mul.register_autograd(backward, setup_context=setup)
    x, y = torch.ones(4, 4), torch.ones(4, 4)
    ours_fn = st.ops.elemwise_mul
    for _ in range(200):
        ours_fn(x, y), mul(x, y)
    ours, theirs = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            ours_fn(x, y)
        t1 = time.perf_counter()
        for _ in range(calls):
            mul(x, y)
        t2 = time.perf_counter()
        ours.append((t1 - t0) / calls * 1e6)
        theirs.append((t2 - t1) / calls * 1e6)
    o, t = statistics.median(ours), statistics.median(theirs)
    return {"bridged_us": o, "custom_op_us": t, "ratio": o / t}


if __name__ == "__main__":
    r = measure()
    print(f"bridged elemwise_mul 4x4: {r['bridged_us']:.2f} us; torch.library.custom_op: {r['custom_op_us']:.2f} us; "
          f"ratio {r['ratio']:.2f}")
