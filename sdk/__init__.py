"""What plugin authors touch (``sparse_ops.sdk``).

- declaring operators: ``Op``, ``Param``, ``kernel``, ``register``, ``OpContext``
  (re-exported from the runtime: there is one registration API), and ``jit``, numba's
  ``njit`` with the project's settings (on-disk cache, nogil, a thread-safe threading
  layer, bounds checking under ``SPARSE_OPS_BOUNDSCHECK=1``);
- ``sparse_ops.sdk.rowkernel``: ``row_kernel``, one per-row numba body from which the SDK
  builds the cpu (serial / ``prange``) and gpu (thread or warp per row) drivers, and the
  project's one parallel-size policy ``parallel_worth``;
- ``sparse_ops.sdk.csr``: the csr primitives on both devices (row ids, transpose,
  csr @ dense, segment sums, row gathers), written with ``row_kernel``;
- ``sparse_ops.sdk.capacity``: capacity rules, the bound of each sparse output's stored
  entries an op declares (``Op.capacity = capacity.same_as("data")``, ``sum_of``,
  ``min_of``, ``columns_of``, ``computed``), which ``jax.jit`` reserves instead of the dense size;
- ``sparse_ops.sdk.testing``: ``opcheck``, ``check_gradient``, ``check_numeric_gradient``;
- ``sparse_ops.sdk.launch``: grid helpers for numba.cuda kernels;
- ``sparse_ops.sdk.scaffold`` and ``template/``: ``sparse-ops new-plugin``;
- ``SDK_VERSION``, which plugins' ``SPARSE_OPS_SDK`` ranges are checked against;
- ``include_dir()``: the folder holding ``sparse_ops.h``, the C ABI of operator libraries.

The guide: ``docs/author/`` (the documentation site's "Writing operators").
"""
import os
from typing import Any

SDK_VERSION = "0.1"


def include_dir() -> str:
    """The folder holding ``sparse_ops.h`` (``cc -I$(sparse-ops include-dir)``)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")

_REEXPORTS = {"Op": "registry", "Param": "registry", "kernel": "registry", "register": "registry",
              "OpContext": "context", "jit": "kernels"}


# the submodules an author reaches as attributes (sparse_ops.sdk.cbuild.compile_library(...)),
# imported when first touched: several pull in numba, a compiler driver or CUDA tooling
_SUBMODULES = frozenset(("cabi", "capacity", "cbuild", "csr", "csr_cpu", "gpu_compile", "groups", "launch",
                         "rowkernel", "scaffold", "testing"))


def __getattr__(name: str) -> Any:
    # Lazy: this package is imported while sparse_ops itself is still importing.
    import importlib

    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    module = _REEXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sparse_ops.sdk' has no attribute {name!r}")
    return getattr(importlib.import_module(f"sparse_ops.{module}"), name)


__all__ = ["SDK_VERSION", "include_dir", *_REEXPORTS]
