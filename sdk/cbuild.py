"""Compile an operator library against ``sparse_ops.h`` with the system compiler.

``compile_library(["ops.c"], "libops.so")`` runs ``cc -shared -fPIC -O2 -I<include_dir>``
(``nvcc -shared -Xcompiler -fPIC`` for ``.cu`` sources); the C compiler is ``$CC`` or the
first of ``cc``, ``gcc``, ``clang`` on ``PATH``, nvcc is found through ``$CUDA_HOME`` or
``PATH``. This is what a build system does by hand; tests and examples use it so they build
the way users do.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Sequence

from . import include_dir


class BuildError(RuntimeError):
    """The compiler is missing or failed; the message holds its command and output."""


def c_compiler() -> str | None:
    """The C compiler to use: ``$CC``, else ``cc``, ``gcc`` or ``clang`` on PATH (None if none)."""
    cc = os.environ.get("CC")
    if cc:
        return cc
    return next((found for name in ("cc", "gcc", "clang") if (found := shutil.which(name))), None)


def nvcc() -> str | None:
    """nvcc from ``$CUDA_HOME/bin`` or PATH (None if neither has it)."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and os.access(os.path.join(home, "bin", "nvcc"), os.X_OK):
        return os.path.join(home, "bin", "nvcc")
    return shutil.which("nvcc")


def compile_library(sources: Sequence[str | os.PathLike], output: str | os.PathLike,
                    flags: Sequence[str] = (), optimize: str = "-O2") -> Path:
    """Compile ``sources`` into the shared library ``output`` and return its path. Any
    ``.cu`` source makes it a CUDA build with nvcc. Raises BuildError with the compiler's
    output on failure."""
    sources = [os.fspath(s) for s in sources]
    cuda = any(s.endswith(".cu") for s in sources)
    compiler = nvcc() if cuda else c_compiler()
    if compiler is None:
        raise BuildError("no CUDA compiler (nvcc) found: set CUDA_HOME or put nvcc on PATH" if cuda else
                         "no C compiler found: set CC or install cc, gcc or clang")
    pic = ["-Xcompiler", "-fPIC"] if cuda else ["-fPIC"]
    cmd = [*shlex.split(compiler), "-shared", *pic, optimize, f"-I{include_dir()}", *flags, *sources,
           "-o", os.fspath(output)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise BuildError(f"{shlex.join(cmd)} failed ({result.returncode}):\n{result.stdout}{result.stderr}")
    return Path(output)


__all__ = ["BuildError", "c_compiler", "compile_library", "nvcc"]
