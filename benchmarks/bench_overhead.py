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

import cProfile
import pstats
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


def paired_us(ours: Callable[[], Any], ref: Callable[[], Any] | None, number: int = 20000,
              repeat: int = 9) -> tuple[float, float | None]:
    """Per-call medians (us) of ``ours`` and ``ref`` measured in alternation, so a noisy
    neighbour slows both sides alike and the ratio stays meaningful."""
    ours()
    if ref is not None:
        ref()
    a, b = [], []
    for _ in range(repeat):
        a.append(timeit.timeit(ours, number=number) / number * 1e6)
        if ref is not None:
            b.append(timeit.timeit(ref, number=number) / number * 1e6)
    return statistics.median(a), (statistics.median(b) if b else None)


def python_calls(fn: Callable[[], Any]) -> tuple[int, Any]:
    """(Python-level function calls made by ``fn()``, its result), counted by cProfile
    (C functions such as NumPy's and builtins are not counted)."""
    prof = cProfile.Profile()
    prof.enable()
    result = fn()
    prof.disable()
    stats = pstats.Stats(prof).stats
    return sum(v[1] for k, v in stats.items() if k[0] != "~") - 1, result  # less Profile.disable


def recorded_dot_calls() -> tuple[int, int]:
    """Python calls of a recorded ``sum(dot(csr, dense))`` forward and of its backward (a
    50 x 40 csr with 200 values @ 40 x 8), after warm-up: the bookkeeping per op call."""
    rng = np.random.default_rng(0)
    dense = np.where(rng.random((50, 40)) < 0.1, rng.random((50, 40)), 0).astype(np.float32)
    x = so.array(dense).tostype("csr")
    w = so.array(rng.random((40, 8)).astype(np.float32))
    w.attach_grad()

    def forward():
        with ag.record():
            return so.sum(so.dot(x, w))

    for _ in range(3):
        forward().backward()
    n_forward, loss = python_calls(forward)
    n_backward, _ = python_calls(loss.backward)
    return n_forward, n_backward


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


@so.register("_bench_kernel_first_mul", replace=True)
class _KernelFirstMul(so.Op):
    """A plugin-style kernel-first op: x * y with a dense kernel."""

    arguments = ("x", "y")

    @so.kernel(device=("cpu", "gpu"))
    def dense(self, ctx, x, y, out):
        np.multiply(x, y, out=out)

    def gradient(self, out_grads, inputs, outputs):
        g = out_grads[0]
        return [so.elemwise_mul(g, inputs[1]), so.elemwise_mul(g, inputs[0])]


@so.register("_bench_mxnet_mul", replace=True)
class _MXNetMulProp(so.CustomOpProp):
    """The same product written as an MXNet-form Python custom op."""

    def list_arguments(self):
        return ["x", "y"]

    def create_operator(self, ctx, shapes, dtypes):
        return _MXNetMul()


class _MXNetMul(so.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], in_data[0] * in_data[1])

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        self.assign(in_grad[0], req[0], out_grad[0] * in_data[1])
        self.assign(in_grad[1], req[1], out_grad[0] * in_data[0])


_CUSTOM_MUL = None


def torch_custom_mul():
    """``x * y`` as a plain ``torch.library.custom_op`` with a registered backward: the
    reference of our per-call overhead here and in ``bench_torch`` (made once per process:
    a custom op's name can be registered only once)."""
    global _CUSTOM_MUL
    if _CUSTOM_MUL is None:
        import torch

        # an explicit schema: this module's postponed annotations are strings torch cannot resolve
        @torch.library.custom_op("sparse_ops_bench::mul", mutates_args=(), schema="(Tensor x, Tensor y) -> Tensor")
        def mul(x, y):
            return x * y

        def setup(ctx, inputs, output):
            ctx.save_for_backward(*inputs)

        def backward(ctx, g):
            x, y = ctx.saved_tensors
            return g * y, g * x

        mul.register_autograd(backward, setup_context=setup)
        _CUSTOM_MUL = mul
    return _CUSTOM_MUL


def run(quick: bool = False, scale: int | None = None) -> dict[str, list]:
    """Every case; call counts and chain lengths divided by ``scale`` (``quick``: 10)."""
    scale = scale or (10 if quick else 1)
    torch = _torch()
    n = max(20000 // scale, 16)
    a = np.ones((4, 4), np.float32)
    x, y = so.array(a), so.array(a)
    rows = []
    floor = per_call_us(lambda: np.multiply(a, a), n)
    tx = ty = None
    if torch is not None:
        tx, ty = torch.ones(4, 4), torch.ones(4, 4)
    torch_mul = (lambda: torch.mul(tx, ty)) if torch is not None else None
    ours, ref = paired_us(lambda: so.elemwise_mul(x, y), torch_mul, n)
    rows.append(["elemwise_mul 4x4 float32", f"{ours:.2f}", f"{ref:.2f}" if ref else "n/a",
                 f"{ours / ref:.2f}" if ref else "n/a", f"{floor:.2f}"])

    kf = so.dispatch.op_function("_bench_kernel_first_mul")
    ours_kf, ref = paired_us(lambda: kf(x, y), torch_mul, n)
    rows.append(["kernel-first custom op 4x4", f"{ours_kf:.2f}", f"{ref:.2f}" if ref else "n/a",
                 f"{ours_kf / ref:.2f}" if ref else "n/a", f"{floor:.2f}"])

    tc = torch_custom_mul() if torch is not None else None
    mx_fwd, ref_fwd = paired_us(lambda: so.Custom(x, y, op_type="_bench_mxnet_mul"),
                                (lambda: tc(tx, ty)) if tc is not None else None, n // 4)
    rows.append(["MXNet-form Python custom op forward 4x4 (vs torch.library.custom_op)", f"{mx_fwd:.2f}",
                 f"{ref_fwd:.2f}" if ref_fwd else "n/a", f"{mx_fwd / ref_fwd:.2f}" if ref_fwd else "n/a", ""])
    xm = so.array(a)
    xm.attach_grad()

    def mx_step():
        with ag.record():
            z = so.Custom(xm, y, op_type="_bench_mxnet_mul")
        z.backward()

    torch_custom_step = None
    if tc is not None:
        txg = torch.ones(4, 4, requires_grad=True)

        def torch_custom_step():
            z = tc(txg, ty)
            z.backward(torch.ones(4, 4))

    mx_fb, ref_fb = paired_us(mx_step, torch_custom_step, n // 8)
    rows.append(["MXNet-form Python custom op forward+backward 4x4 (vs torch.library.custom_op)",
                 f"{mx_fb:.2f}", f"{ref_fb:.2f}" if ref_fb else "n/a", f"{mx_fb / ref_fb:.2f}" if ref_fb else "n/a", ""])

    xv = so.array(a)
    xv.attach_grad()

    def ours_step():
        with ag.record():
            z = so.elemwise_mul(xv, y)
        z.backward()

    torch_step = None
    if torch is not None:
        tgx = torch.ones(4, 4, requires_grad=True)

        def torch_step():
            z = torch.mul(tgx, ty)
            z.backward(torch.ones(4, 4))

    ours_ag, ref_ag = paired_us(ours_step, torch_step, n // 4)
    rows.append(["record + backward, elemwise_mul 4x4", f"{ours_ag:.2f}", f"{ref_ag:.2f}" if ref_ag else "n/a",
                 f"{ours_ag / ref_ag:.2f}" if ref_ag else "n/a", ""])

    n_forward, n_backward = recorded_dot_calls()
    python = [["recorded `sum(dot(csr, dense))`, forward", str(n_forward)],
              ["its backward (`loss.backward()`)", str(n_backward)]]

    chain = []
    c = so.array(np.full(1000, 1e-3))
    for length in ((1000, 2000) if scale == 10 else [max(k // scale, 2) for k in (1000, 5000, 10000)]):
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
    length = 2000 if scale == 10 else max(10000 // scale, 2)
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
    return {"calls": rows, "python": python, "chain": chain, "memory": memory,
            "torch": [torch.__version__ if torch else None]}


def report(results: dict[str, list]) -> str:
    torch_version = results["torch"][0]
    parts = [
        f"PyTorch: {torch_version or 'not installed (reference columns n/a)'}; one thread each; "
        "ours and the reference measured in alternation, median of 9 runs of many calls.", "",
        markdown_table(["case", "ours (us)", "PyTorch (us)", "ours / PyTorch", "np.multiply alone (us)"],
                       results["calls"]), "",
        "Python-level function calls per step (cProfile; the bookkeeping around the kernels):", "",
        markdown_table(["step", "Python calls"], results["python"]), "",
        "Backward through a chain of `elemwise_add` (1,000 float64 each): time per op should stay flat.", "",
        markdown_table(["chain length", "record + backward (ms)", "per op (us)"], results["chain"]), "",
        "Peak traced memory while recording the chain (arrays of 1,000 float64 = 7.8 KiB each):", "",
        markdown_table(["chain", "length", "peak (MiB)"], results["memory"]),
    ]
    return "\n".join(parts)


if __name__ == "__main__":
    print(report(run()))
