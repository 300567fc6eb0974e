"""Build the cookbook's C and CUDA operator libraries (``cookbook/clib/``) for the tests, the
way a user builds them by hand (``cookbook/clib/README.md``): ``cc -shared -fPIC -O2
-I<include_dir>`` for ``.c`` sources, ``nvcc -shared -Xcompiler -fPIC`` for ``.cu`` sources
(through ``sparse_ops.sdk.cbuild``). Each library is compiled once per process (one test
session) into one temporary folder.

``relu.cu`` builds two ways: with nvcc (cpu and gpu kernels), and as C with ``cc -x c``
(cpu kernels only, its CUDA parts being under ``#ifdef __CUDACC__``), which is what a
machine without nvcc gets.
"""
from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from sparse_ops.sdk import include_dir
from sparse_ops.sdk.cbuild import BuildError, c_compiler, compile_library, nvcc

CLIB_DIR = Path(__file__).resolve().parent.parent / "clib"

# library name (lib<name>.so) -> its source in cookbook/clib/
SOURCES = {
    "gemm": "gemm.c",
    "relu": "relu.cu",
    "transpose_csr": "transpose_csr.c",
    "transpose_row_sparse": "transpose_row_sparse.c",
    "threshold": "threshold.c",
}

# The examples compile without a single warning: a warning in an example is a bug in it.
C_FLAGS = ("-Wall", "-Wextra", "-Werror")

_folder: Path | None = None
_built: dict[str, Path] = {}


def _out_folder() -> Path:
    global _folder
    if _folder is None:
        _folder = Path(tempfile.mkdtemp(prefix="sparse_ops_cookbook_clib_"))
    return _folder


def has_nvcc() -> bool:
    return nvcc() is not None


def build(name: str, cuda: bool | None = None) -> Path:
    """The path of ``lib<name>.so`` built from ``SOURCES[name]`` (compiled on first use).
    For the ``.cu`` source, ``cuda`` picks the build: True nvcc, False ``cc -x c`` (cpu
    kernels only), None nvcc where it exists, else cc."""
    source = CLIB_DIR / SOURCES[name]
    is_cu = source.suffix == ".cu"
    if is_cu and cuda is None:
        cuda = has_nvcc()
    key = f"{name}_cpu" if is_cu and not cuda else name  # librelu.so (nvcc), librelu_cpu.so (cc)
    if key not in _built:
        out = _out_folder() / f"lib{key}.so"
        if is_cu and cuda:
            compile_library([source], out)
        elif is_cu:
            _compile_as_c(source, out)
        else:
            compile_library([source], out, flags=C_FLAGS)
        _built[key] = out
    return _built[key]


def _compile_as_c(source: Path, out: Path) -> None:
    """``cc -x c`` on a ``.cu`` file: compile_library would hand a .cu source to nvcc."""
    cc = c_compiler()
    if cc is None:
        raise BuildError("no C compiler found: set CC or install cc, gcc or clang")
    cmd = [*cc.split(), "-shared", "-fPIC", "-O2", f"-I{include_dir()}", *C_FLAGS, "-x", "c", os.fspath(source),
           "-o", os.fspath(out)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise BuildError(f"{' '.join(cmd)} failed ({result.returncode}):\n{result.stdout}{result.stderr}")


__all__ = ["CLIB_DIR", "SOURCES", "build", "has_nvcc"]
