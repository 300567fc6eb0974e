"""Optional reference implementations for the benchmark tables: Intel MKL's sparse BLAS
(through ``sparse_dot_mkl``) and JAX's ``BCSR``. Each finder returns None when the
package is missing or does not load, so a table shows n/a instead of failing.

Install them with the ``bench`` extra (``pip install -e ".[bench]"``).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any


def _venv_mkl_rt() -> str | None:
    """libmkl_rt inside this interpreter's prefix (where the ``mkl`` wheel puts it)."""
    for name in ("libmkl_rt.so.3", "libmkl_rt.so.2", "libmkl_rt.so"):
        path = Path(sys.prefix) / "lib" / name
        if path.exists():
            return str(path)
    return None


def mkl() -> Any | None:
    """The ``sparse_dot_mkl`` module with MKL loaded, or None. ``MKL_RT`` is pointed at the
    venv's ``libmkl_rt`` when the user has not set it: the ``mkl`` wheel installs the
    library there, where sparse_dot_mkl does not look by itself."""
    if "MKL_RT" not in os.environ:
        rt = _venv_mkl_rt()
        if rt is not None:
            os.environ["MKL_RT"] = rt
    try:
        import sparse_dot_mkl
    except (ImportError, OSError):
        return None
    return sparse_dot_mkl


def mkl_version() -> str | None:
    """'sparse_dot_mkl X (MKL Y)' for the machine description, or None without MKL."""
    module = mkl()
    if module is None:
        return None
    try:
        inner = module.mkl_get_version_string()
    except Exception:  # older sparse_dot_mkl: the wrapper's own version is enough
        inner = None
    version = getattr(module, "__version__", "?")
    return f"sparse_dot_mkl {version}" + (f" ({inner})" if inner else "")


def jax_sparse() -> Any | None:
    """``jax.experimental.sparse`` (CPU), or None without JAX."""
    try:
        from jax.experimental import sparse
    except ImportError:
        return None
    return sparse
