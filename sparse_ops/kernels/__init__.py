"""numba CPU kernels of the built-ins. Imported lazily: ``import sparse_ops`` compiles nothing.

``jit`` is the one decorator our kernels use: nopython, nogil, on-disk cache, and
bounds checking when ``SPARSE_OPS_BOUNDSCHECK=1`` (numba then caches in a separate
folder, see ``sparse_ops/_numba_env.py``: its cache key ignores the flag). Importing this
package also picks a numba threading layer that tolerates parallel kernels launched from
several threads at once (the default ``workqueue`` layer aborts the process then), unless
the user chose one with ``NUMBA_THREADING_LAYER``, and asks OpenMP to wait passively
(``OMP_WAIT_POLICY``).
"""
from __future__ import annotations

import importlib
import os
from typing import Any, Callable

import numba

from .. import _numba_env
from ..settings import BOUNDSCHECK  # read in one place: sparse_ops/settings.py


def _threadsafe_layer() -> str | None:
    for name, module in (("tbb", "numba.np.ufunc.tbbpool"), ("omp", "numba.np.ufunc.omppool")):
        try:
            importlib.import_module(module)
        except ImportError:
            continue
        return name
    return None


# GNU OpenMP threads spin after each parallel region by default; when cores are shared (other
# processes, or several Python threads launching kernels) that spinning made a tiny parallel
# kernel take ~4 ms instead of ~0.2 ms here. Passive waiting, unless the user chose otherwise.
# Must be set before the OpenMP runtime loads.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

if "NUMBA_THREADING_LAYER" not in os.environ:
    _layer = _threadsafe_layer()
    if _layer is not None:
        numba.config.THREADING_LAYER = _layer


def jit(parallel: bool = False, cache: bool = True, reassociate: bool = False) -> Callable[[Callable[..., Any]], Any]:
    """numba.njit with the project's settings (see the module docstring); ``cache=False``
    for functions numba cannot cache (no source file); ``reassociate=True`` lets LLVM reorder
    floating-point sums (what vectorising a reduction needs), nothing else of fastmath."""
    return numba.njit(parallel=parallel, cache=cache and _numba_env.CACHE_OK, nogil=True, boundscheck=BOUNDSCHECK or None,
                      fastmath={"reassoc"} if reassociate else False)
