"""Per-call overhead and autograd cost on tiny arrays, and autograd memory on long chains.

- ``elemwise_mul`` on 4x4 float32 dense: ours vs ``torch.mul`` (when PyTorch is installed)
  and NumPy's ``np.multiply`` (the floor: the kernel we call).
- record + backward of one elementwise op on 4x4: ours vs PyTorch autograd.
- a chain of N recorded ops: backward time per op for N = 1,000 .. 10,000 (linear means a
  flat column), and the peak memory (tracemalloc, which sees NumPy's allocations) of a
  chain of ops that keep nothing for backward against the same chain with an op that
  keeps every output.
"""
from __future__ import annotations

import statistics
import timeit
import tracemalloc
from typing import Any, Callable

import numpy as np

import sparse_ops as so
from sparse_ops import autograd as ag

from ._timing import markdown_table


def per_call_us(fn: Callable[[], Any], number: int = 20000, repeat: int = 7) -> float:
    """Median over ``repeat`` runs of the mean time of one call, in microseconds."""
    fn()
    return statistics.median(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def _torch():
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    return torch


@so.register("_bench_add_keep_output", replace=True)
class _AddKeepingOutput(so.ops.elemwise.ElemwiseAdd):
    """elemwise_add whose backward dependency (needlessly) keeps its output."""

    backward_needs_outputs = ("output",)


def run(quick: bool = False) -> dict[str, list]:
    torch = _torch()
    n = 2000 if quick else 20000
    a = np.ones((4, 4), np.float32)
    x, y = so.array(a), so.array(a)
    rows = []
    ours = per_call_us(lambda: so.elemwise_mul(x, y), n)
    floor = per_call_us(lambda: np.multiply(a, a), n)
    ref = None
    if torch is not None:
        tx, ty = torch.ones(4, 4), torch.ones(4, 4)
        ref = per_call_us(lambda: torch.mul(tx, ty), n)
    rows.append(["elemwise_mul 4x4 float32", f"{ours:.2f}", f"{ref:.2f}" if ref else "n/a",
                 f"{ours / ref:.2f}" if ref else "n/a", f"{floor:.2f}"])

    xv = so.array(a)
    xv.attach_grad()

    def ours_step():
        with ag.record():
            z = so.elemwise_mul(xv, y)
        z.backward()

    ours_ag = per_call_us(ours_step, n // 4)
    ref_ag = None
    if torch is not None:
        tx = torch.ones(4, 4, requires_grad=True)
        ty = torch.ones(4, 4)

        def torch_step():
            z = torch.mul(tx, ty)
            z.backward(torch.ones(4, 4))

        ref_ag = per_call_us(torch_step, n // 4)
    rows.append(["record + backward, elemwise_mul 4x4", f"{ours_ag:.2f}", f"{ref_ag:.2f}" if ref_ag else "n/a",
                 f"{ours_ag / ref_ag:.2f}" if ref_ag else "n/a", ""])

    chain = []
    c = so.array(np.full(1000, 1e-3))
    for length in ((1000, 2000) if quick else (1000, 5000, 10000)):
        v = so.array(np.zeros(1000))
        v.attach_grad()

        def build_and_backward():
            with ag.record():
                h = v
                for _ in range(length):
                    h = so.elemwise_add(h, c)
            h.backward()

        t = statistics.median(timeit.repeat(build_and_backward, number=1, repeat=3))
        chain.append([str(length), f"{t * 1e3:.1f}", f"{t / length * 1e6:.2f}"])

    memory = []
    length = 2000 if quick else 10000
    for name, op in (("elemwise_add (keeps nothing)", so.elemwise_add),
                     ("same op keeping its output", so.dispatch.op_function("_bench_add_keep_output"))):
        v = so.array(np.zeros(1000))
        v.attach_grad()
        tracemalloc.start()
        with ag.record():
            h = v
            for _ in range(length):
                h = op(h, c)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        h.backward()
        memory.append([name, str(length), f"{peak / 2**20:.1f}"])
    return {"calls": rows, "chain": chain, "memory": memory, "torch": [torch.__version__ if torch else None]}


def report(results: dict[str, list]) -> str:
    torch_version = results["torch"][0]
    parts = [
        f"PyTorch: {torch_version or 'not installed (reference columns n/a)'}; one thread each; "
        "median of 7 runs of many calls.", "",
        markdown_table(["case", "ours (us)", "PyTorch (us)", "ours / PyTorch", "np.multiply alone (us)"],
                       results["calls"]), "",
        "Backward through a chain of `elemwise_add` (1,000 float64 each): time per op should stay flat.", "",
        markdown_table(["chain length", "record + backward (ms)", "per op (us)"], results["chain"]), "",
        "Peak traced memory while recording the chain (arrays of 1,000 float64 = 7.8 KiB each):", "",
        markdown_table(["chain", "length", "peak (MiB)"], results["memory"]),
    ]
    return "\n".join(parts)


if __name__ == "__main__":
    print(report(run()))
