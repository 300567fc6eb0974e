"""C operator libraries (``sparse_ops.h``) against the alternatives a user has, in one process,
the contenders taking turns (``_timing.alternating``), ratios the medians of per-round ratios.

(a) **Per-call overhead** on 4x4 float32: ``x * y`` as a C library op (``benchmarks/clib/
    benchops.c``, loaded with ``library.load``) against the same op written kernel-first with
    a numba dense kernel. Target: <= 1.2x.
(b) **csr @ dense through the ABI**: the 200,000 x 10,000 csr (20 values per row, float32,
    int32 indices) @ a 10,000 x 64 dense matrix, by the library's ``bench_spmm`` through
    ``sparse_ops`` (inference, dispatch, output allocation, checks) against calling the same
    C function through ctypes with hand-made ``so_array`` structs and a fresh output.
    Target: within 10% (<= 1.1x).

The library is compiled here with the system C compiler (``-O2``). Run alone with
``python -m benchmarks.bench_clib [--quick]``, which writes ``benchmarks/results/clib.md``;
``python -m benchmarks`` includes it.
"""
from __future__ import annotations

import argparse
import ctypes as C
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

import sparse_ops as so
from sparse_ops.sdk import jit
from sparse_ops.sdk.cbuild import c_compiler, compile_library

from ._timing import alternating, markdown_table, paired_ratio

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
TARGETS = {"overhead": 1.2, "spmm": 1.1}


@jit()
def _mul_kernel(x, y, out):  # compiled at its first call, as every numba kernel
    a, b, o = x.reshape(-1), y.reshape(-1), out.reshape(-1)
    for i in range(o.size):
        o[i] = a[i] * b[i]


@so.register("_bench_numba_mul", replace=True)
class _NumbaMul(so.Op):
    """x * y with a numba dense kernel: the kernel-first op the C op is compared with."""

    arguments = ("x", "y")

    @so.kernel()
    def dense(self, ctx, x, y, out):
        _mul_kernel(x, y, out)


def _load(folder: Path) -> Any:
    lib = compile_library([HERE / "clib" / "benchops.c"], folder / "libbenchops.so")
    module = so.library.load(lib)
    return module, C.CDLL(str(lib))


def _direct_spmm(cdll: Any, a: sp.csr_matrix, x: np.ndarray) -> Any:
    """A function calling bench_spmm through ctypes with so_arrays built once, each call
    allocating its output as the op does."""
    from sparse_ops.clib import abi

    fn = abi.KernelFn(C.cast(cdll.bench_spmm, C.c_void_p).value)
    ins = (abi.Array * 2)()
    for s in ins:
        s.struct_size, s.abi_version, s.device_type = C.sizeof(abi.Array), abi.ABI_VERSION, abi.DEVICE_CPU
    ins[0].stype, ins[0].dtype, ins[0].index_dtype, ins[0].ndim = 2, 0, 4, 2
    ins[0].shape[:2], ins[0].nnz = a.shape, a.nnz
    ins[0].data, ins[0].indices, ins[0].indptr = a.data.ctypes.data, a.indices.ctypes.data, a.indptr.ctypes.data
    ins[1].stype, ins[1].dtype, ins[1].index_dtype, ins[1].ndim = 0, 0, -1, 2
    ins[1].shape[:2], ins[1].nnz, ins[1].data = x.shape, x.size, x.ctypes.data
    outs = (abi.Array * 1)()
    o = outs[0]
    o.struct_size, o.abi_version, o.device_type = C.sizeof(abi.Array), abi.ABI_VERSION, abi.DEVICE_CPU
    o.stype, o.dtype, o.index_dtype, o.ndim = 0, 0, -1, 2
    o.shape[:2], o.nnz = (a.shape[0], x.shape[1]), a.shape[0] * x.shape[1]
    ctx, params, err = abi.Context(*abi.header(abi.Context)), abi.Params(*abi.header(abi.Params)), abi.Error()

    def call() -> np.ndarray:
        out = np.empty((a.shape[0], x.shape[1]), np.float32)
        outs[0].data = out.ctypes.data
        status = fn(C.byref(ctx), C.byref(params), 2, ins, 1, outs, C.byref(err))
        assert status == 0, err.message
        return out

    return call


def run(scale: int = 1) -> dict[str, Any]:
    """Both cases; ``scale`` divides the csr's rows (10 for --quick, 1000 for the smoke test)."""
    if c_compiler() is None:
        return {"skipped": "no C compiler"}
    with tempfile.TemporaryDirectory(prefix="bench_clib_") as tmp:
        module, cdll = _load(Path(tmp))
        x, y = so.array(np.full((4, 4), 1.5, np.float32)), so.array(np.full((4, 4), 2.0, np.float32))
        c_mul, nb_mul = so.ops.bench_c_mul, so.ops._bench_numba_mul
        same_mul = np.array_equal(c_mul(x, y).asnumpy(), nb_mul(x, y).asnumpy())
        calls = max(20000 // scale, 20)

        def many(fn: Any) -> Any:
            def go() -> None:
                for _ in range(calls):
                    fn(x, y)
            return go

        times = alternating({"c": many(c_mul), "numba": many(nb_mul)}, rounds=9 if scale == 1 else 2)
        overhead = {"c_us": np.median(times["c"]) / calls * 1e6, "numba_us": np.median(times["numba"]) / calls * 1e6,
                    "ratio": paired_ratio(times["c"], times["numba"]), "same": same_mul}

        rows = max(200_000 // scale, 50)
        rng = np.random.default_rng(0)
        cols = rng.integers(0, 10_000, size=(rows, 20))
        cols.sort(axis=1)
        a = sp.csr_matrix((rng.standard_normal(rows * 20).astype(np.float32), cols.ravel().astype(np.int32),
                           np.arange(0, rows * 20 + 1, 20, dtype=np.int32)), shape=(rows, 10_000))
        a.sum_duplicates()
        xd = rng.standard_normal((10_000, 64)).astype(np.float32)
        sa, sx = so.csr_matrix(a), so.array(xd)
        direct = _direct_spmm(cdll, a, xd)
        ours = lambda: so.ops.bench_c_spmm(sa, sx)  # noqa: E731
        same = np.allclose(ours().asnumpy(), direct(), rtol=1e-5, atol=1e-5) and \
            np.allclose(direct(), a @ xd, rtol=1e-4, atol=1e-4)
        times = alternating({"ours": ours, "direct": direct}, rounds=7 if scale == 1 else 2)
        spmm = {"rows": rows, "nnz": a.nnz, "ours_ms": np.median(times["ours"]) * 1e3,
                "direct_ms": np.median(times["direct"]) * 1e3, "ratio": paired_ratio(times["ours"], times["direct"]),
                "same": same}
        return {"overhead": overhead, "spmm": spmm, "library": module.library.path}


def _verdict(ratio: float, target: float) -> str:
    return "met" if ratio <= target else "**NOT met**"


def report(results: dict[str, Any]) -> str:
    if "skipped" in results:
        return f"C library benchmarks skipped: {results['skipped']}."
    o, s = results["overhead"], results["spmm"]
    lines = [markdown_table(["case", "target", "this run", "verdict"], [
        ["C op per call vs kernel-first numba op, 4x4 float32", f"<= {TARGETS['overhead']}x",
         f"{o['ratio']:.2f}x", _verdict(o["ratio"], TARGETS["overhead"])],
        ["C csr @ dense through the ABI vs the same C function by ctypes", f"<= {TARGETS['spmm']}x",
         f"{s['ratio']:.2f}x", _verdict(s["ratio"], TARGETS["spmm"])]]), "",
        markdown_table(["case", "ours", "reference", "ours / reference", "same result"], [
            ["`bench_c_mul` vs `_bench_numba_mul` (us per call)", f"{o['c_us']:.2f}", f"{o['numba_us']:.2f}",
             f"{o['ratio']:.2f}", "yes" if o["same"] else "NO"],
            [f"`bench_c_spmm` {s['rows']:,} x 10,000 csr (nnz {s['nnz']:,}) @ 64 columns (ms)",
             f"{s['ours_ms']:.1f}", f"{s['direct_ms']:.1f}", f"{s['ratio']:.3f}", "yes" if s["same"] else "NO"]])]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="sizes 10x smaller")
    args = parser.parse_args()
    from ._timing import describe_machine

    results = run(scale=10 if args.quick else 1)
    text = "\n".join(["# C operator libraries", "", report(results), "", "## Machine", ""] +
                     [f"- {k}: {v}" for k, v in describe_machine().items()])
    if not args.quick:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "clib.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
