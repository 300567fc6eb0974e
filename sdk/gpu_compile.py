"""GPU kernels compiled for the real CUDA target on a machine without a GPU.

numba's CUDA simulator (``SPARSE_OPS_CUDA_SIM=1``) runs gpu kernels on the cpu and serves
their values, but it runs the body as Python: a call of a plain (undecorated) Python
function or an allocation (``np.empty``) passes there and fails on the first real GPU. This
module compiles the row kernels' gpu drivers to PTX with numba-cuda's NVVM (pip's
``numba-cuda`` and ``nvidia-cuda-nvcc-cu12``: no GPU and no driver needed), so such a body
fails on any machine, with the author's file and line.

Which argument types to compile for is taken from runs: with
``SPARSE_OPS_GPU_SIGNATURES=<file>`` set, every gpu launch of a row kernel (in the simulator,
say) appends the kernel and its argument types to the file (``sdk.rowkernel.record_launch``),
and ``compile_recorded(<file>)`` compiles each recorded kernel and signature. CI records
the gpu-marked tests this way; ``sparse-ops check --gpu-compile <plugin>`` records the
plugin's samples run on a simulated gpu, then compiles them. Compiled signatures are
remembered on disk (``ptx_cache_dir()``), keyed by the kernel's generated driver, its
body's module source, the project's kernel sources and numba-cuda's version, so a second
run compiles only what changed.

A float32 variant (every floating-point array argument float32) must compute in float32:
its PTX holding float64 arithmetic (a Python float literal or scalar promoting the body's
arithmetic; most GPUs run float64 at 1/32-1/64 of the float32 rate) is refused, unless
the kernel declares why (``row_kernel(float64="...")``, or a float64 ``total``). Loading
a float64 scalar argument and narrowing it once to float32 is not arithmetic and passes.

Command line: ``python -m sparse_ops.sdk.gpu_compile RECORDS [--cc 8.0]`` (exit status 1
when a kernel is refused or cannot be found).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import importlib
import importlib.util
import json
import os
import sys
import types
from typing import Any, Iterator

from sparse_ops.settings import env_flag

from .rowkernel import RowKernel

DEFAULT_CC = (8, 0)  # the oldest compute capability the project's GPU machines have (A100: 8.0)
CHECKS = ("float32 variants compute in float32",)  # compile_kernel's own checks, part of the cache key


class GpuCompileError(RuntimeError):
    """The CUDA target refused a kernel, or compiling for it cannot run here."""


def require_cuda_compiler() -> Any:
    """numba-cuda's ``cuda`` module, compiling for the real target (not the simulator);
    a clear error when that is not possible in this process."""
    if env_flag("SPARSE_OPS_CUDA_SIM", False) or os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        raise GpuCompileError("compiling for the CUDA target needs a process without the simulator: "
                              "unset SPARSE_OPS_CUDA_SIM and NUMBA_ENABLE_CUDASIM")
    try:
        from numba import cuda
        from numba.cuda import dispatcher  # noqa: F401  (numba-cuda's; checked in _target)
    except ImportError as exc:
        raise GpuCompileError("compiling for the CUDA target needs numba-cuda and NVIDIA's NVVM: "
                              "pip install 'sparse-ops[gpu-compile]'") from exc
    if not hasattr(cuda, "compile_ptx"):
        raise GpuCompileError("this numba.cuda cannot compile PTX (is it the simulator?)")
    return cuda


@contextlib.contextmanager
def _target(cc: tuple[int, int]) -> Iterator[None]:
    """Compile for compute capability ``cc`` without a device. numba-cuda compiles a device
    function called from a kernel (a row kernel's body is one) for the *current device's*
    compute capability, and asks the driver for it; here there is none, so for the
    duration its dispatchers are told of a device of capability ``cc``."""
    from numba.cuda import dispatcher

    saved = dispatcher.get_current_device
    dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=cc)
    try:
        yield
    finally:
        dispatcher.get_current_device = saved


def numba_type(desc: list) -> Any:
    """The numba type of an argument described by ``sdk.rowkernel.argument_type``."""
    import numba
    import numpy as np

    kind = desc[0]
    if kind == "array":
        _, dtype, ndim, layout = desc
        return numba.types.Array(numba.from_dtype(np.dtype(dtype)), int(ndim), layout)
    if kind == "scalar":
        return numba.types.boolean if desc[1] == "bool" else numba.from_dtype(np.dtype(desc[1]))
    raise GpuCompileError(f"an argument type that cannot be compiled for: {desc}")


def float64_instructions(ptx: str) -> list[str]:
    """The float64 arithmetic of ``ptx``: its instructions on ``.f64`` operands, but for
    loading a float64 parameter and narrowing a float64 value to float32 (a float64 scalar
    argument used as float32)."""
    out = []
    for line in ptx.splitlines():
        op = line.strip().split(None, 1)[0] if line.strip() else ""
        if ".f64" not in op or op.startswith((".", "//")) or op.startswith(("ld.param.", "cvt.rn.f32.f64")):
            continue
        out.append(op)
    return out


def _float32_variant(argtypes: tuple) -> bool:
    """Whether every floating-point array argument is float32 (and there is one)."""
    import numba

    floats = [t.dtype for t in argtypes if isinstance(t, numba.types.Array) and isinstance(t.dtype, numba.types.Float)]
    return bool(floats) and all(d == numba.float32 for d in floats)


def compile_kernel(kernel: RowKernel, argtypes: tuple, cc: tuple[int, int] = DEFAULT_CC) -> str:
    """PTX of ``kernel``'s gpu driver for driver arguments of numba types ``argtypes`` (the
    arguments after the row count; a ``total`` kernel's running sum excluded), for compute
    capability ``cc``. A body CUDA refuses raises numba's error opened with the kernel's
    name and the author's file and line (the body is compiled alone to find it)."""
    import numba
    from numba.core.errors import NumbaError

    cuda = require_cuda_compiler()
    total = () if kernel.total is None else (numba.types.Array(numba.from_dtype(kernel.total), 1, "C"),)
    with _target(cc):
        try:
            ptx, _ = cuda.compile_ptx(kernel.gpu_driver().py_func, (numba.int64, *total, *argtypes), cc=cc)
        except NumbaError as exc:
            try:
                kernel.compile_body(tuple(argtypes), "gpu", cc)
            except NumbaError as own:
                raise kernel.located_error(own) from None
            raise kernel.driver_error(exc, "gpu") from None
    declared = kernel.float64 is not None or (kernel.total is not None and kernel.total.itemsize == 8
                                              and kernel.total.kind == "f")
    wide = float64_instructions(ptx) if _float32_variant(argtypes) and not declared else []
    if wide:
        kinds = ", ".join(sorted(set(wide))[:4])
        raise GpuCompileError(
            f"row kernel {kernel.__module__}.{kernel.__qualname__}: its float32 variant computes in float64 "
            f"({len(wide)} float64 instructions: {kinds}): a Python float literal or scalar (0.0, 1.0 - beta, "
            f"a float lr) promotes the arithmetic; write out.dtype.type(0.0) and pass scalars in the arrays' "
            f"dtype, or declare row_kernel(float64='why')")
    return ptx


def find_kernel(module: str, qualname: str, file: str | None = None) -> RowKernel:
    """The row kernel ``module.qualname``: imported by module name, else from ``file`` (a
    test module, a plugin's file); GpuCompileError when it cannot be found (one defined
    inside a function has no name to import it by)."""
    if "<locals>" in qualname:
        raise GpuCompileError(f"{module}.{qualname} is defined inside a function: not importable")
    try:
        mod = importlib.import_module(module)
    except ImportError:
        if not file or not os.path.exists(file):
            raise GpuCompileError(f"cannot import {module} (for {qualname})") from None
        mod = sys.modules.get(module)
        if mod is None:
            sys.path.insert(0, os.path.dirname(file))
            spec = importlib.util.spec_from_file_location(module, file)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[module] = mod
            spec.loader.exec_module(mod)
    obj: Any = mod
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    if not isinstance(obj, RowKernel):
        raise GpuCompileError(f"{module}.{qualname} is not a row kernel of that module")
    return obj


def ptx_cache_dir() -> str | None:
    """Where compiled signatures are remembered: ``$XDG_CACHE_HOME/sparse_ops/ptx``
    (``~/.cache/...``) or one under the temporary folder; None when none is writable."""
    from sparse_ops import _numba_env

    return _numba_env.first_writable([_numba_env.user_cache_dir("ptx")], "sparse_ops-ptx")


def _cache_key(kernel: RowKernel, desc: list, cc: tuple[int, int]) -> str:
    from importlib.metadata import version

    from sparse_ops import _numba_env

    h = hashlib.sha256()
    h.update(kernel._source_text().encode())  # the driver and the body's own source
    try:
        with open(kernel.body.__code__.co_filename, "rb") as f:  # helpers beside the body
            h.update(f.read())
    except OSError:
        pass
    h.update(_numba_env.kernel_fingerprint().encode())
    # what compile_kernel checks beyond CUDA's acceptance: a pass remembered before a check
    # existed (or while the kernel declared otherwise) is not a pass of the check
    h.update(json.dumps([desc, list(cc), version("numba-cuda"), CHECKS, kernel.float64]).encode())
    return h.hexdigest()


@dataclasses.dataclass
class CompileReport:
    """What ``compile_recorded`` did: signatures compiled (and how many of them the cache
    already knew), and the failures: refusals ``(kernel, signature, message, operators that
    launched it)`` and kernels not found ``(kernel, why)``."""

    kernels: int = 0
    compiled: int = 0
    cached: int = 0
    refused: list = dataclasses.field(default_factory=list)
    not_found: list = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.refused and not self.not_found

    def summary(self, cc: tuple[int, int]) -> str:
        return (f"gpu-compile (sm_{cc[0]}{cc[1]}): {self.kernels} row kernels, {self.compiled} signatures "
                f"compiled ({self.cached} known from the cache), {len(self.refused)} refused, "
                f"{len(self.not_found)} not found")


def read_records(path: str) -> dict[tuple[str, str, str], dict[str, list]]:
    """The recorded launches of ``path``: (module, qualname, file) -> {argument type list
    (as JSON text): [the operators that launched the kernel with it]}."""
    records: dict[tuple[str, str, str], dict[str, list]] = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                sigs = records.setdefault((r["module"], r["qualname"], r.get("file") or ""), {})
                ops = sigs.setdefault(json.dumps(r["args"]), [])
                if r.get("op") and r["op"] not in ops:
                    ops.append(r["op"])
    return records


def compile_recorded(path: str, cc: tuple[int, int] = DEFAULT_CC, use_cache: bool = True,
                     log: Any = None) -> CompileReport:
    """Compile every kernel and signature recorded in ``path`` for compute capability
    ``cc``; ``log`` (a callable) hears one line per failure."""
    require_cuda_compiler()
    report = CompileReport()
    folder = ptx_cache_dir() if use_cache else None
    for (module, qualname, file), sigs in sorted(read_records(path).items()):
        try:
            kernel = find_kernel(module, qualname, file)
        except Exception as exc:  # an import error of the kernel's module included
            report.not_found.append((f"{module}.{qualname}", str(exc)))
            if log:
                log(f"  NOT FOUND {module}.{qualname}: {exc}")
            continue
        report.kernels += 1
        for text, ops in sigs.items():
            desc = json.loads(text)
            key = os.path.join(folder, _cache_key(kernel, desc, cc)) if folder else None
            if key and os.path.exists(key):
                report.compiled += 1
                report.cached += 1
                continue
            try:
                compile_kernel(kernel, tuple(numba_type(d) for d in desc), cc)
            except Exception as exc:
                by = f" (operator {', '.join(ops)})" if ops else ""
                report.refused.append((f"{module}.{qualname}", desc, f"{type(exc).__name__}: {exc}", ops))
                if log:
                    log(f"  REFUSED {module}.{qualname} {describe(desc)}{by}: {type(exc).__name__}: {exc}")
                continue
            report.compiled += 1
            if key:
                with open(key, "w"):
                    pass
    return report


def describe(desc: list) -> str:
    """A signature as a reader writes it: ``(float32[:, ::1], int64)``."""
    out = []
    for d in desc:
        if d[0] == "array":
            out.append(f"{d[1]}[{d[2]}d, {d[3]}]")
        else:
            out.append(str(d[-1]))
    return "(" + ", ".join(out) + ")"


def parse_cc(text: str) -> tuple[int, int]:
    """``"8.0"`` -> (8, 0)."""
    major, _, minor = text.partition(".")
    return int(major), int(minor or 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sparse_ops.sdk.gpu_compile",
                                     description="compile recorded gpu kernel launches for the real CUDA target")
    parser.add_argument("records", help="a file written by runs with SPARSE_OPS_GPU_SIGNATURES=<file>")
    parser.add_argument("--cc", type=parse_cc, default=DEFAULT_CC, help="compute capability (default 8.0)")
    parser.add_argument("--no-cache", action="store_true", help="compile every signature again")
    args = parser.parse_args(argv)
    try:
        report = compile_recorded(args.records, args.cc, use_cache=not args.no_cache, log=print)
    except GpuCompileError as exc:
        print(f"gpu-compile: {exc}", file=sys.stderr)
        return 1
    print(report.summary(args.cc))
    return 0 if report.ok and report.compiled else 1


if __name__ == "__main__":
    sys.exit(main())
