"""numba CPU kernels of the built-ins. Imported lazily: ``import sparse_ops`` compiles nothing.

``jit`` is the one decorator our kernels use: nopython, nogil, on-disk cache, and
bounds checking when ``SPARSE_OPS_BOUNDSCHECK=1`` (numba then caches in a separate
folder, see ``sparse_ops/_numba_env.py``: its cache key ignores the flag), in a cache
folder keyed on the contents of every kernel module (``_numba_env.install_cache_locator``:
numba's own key checks only the defining file, not the helpers a kernel inlines). Importing this
package also picks a numba threading layer that tolerates parallel kernels launched from
several threads at once (the default ``workqueue`` layer aborts the process then), unless
the user chose one with ``NUMBA_THREADING_LAYER``, and asks OpenMP to wait passively
(``OMP_WAIT_POLICY``), and registers the exit-time ``gc.freeze`` of ``settings.FAST_EXIT``.

It also loads numba's cpu lowering registries (``_load_numba_registries``) without
importing ``scipy.linalg``: numba's ``numba.np.arraymath`` checks at import that SciPy's
BLAS is there with ``import scipy.linalg.cython_blas``, which runs the whole
``scipy.linalg`` package (a large share of a cold start's time). Only the two Cython
modules numba reads are loaded for that check, and are taken out of ``sys.modules``
afterwards, so a later ``import scipy.linalg`` (by the user, or by numba compiling a kernel
that calls BLAS) imports the real package as usual. And when no installed distribution
declares a ``numba_extensions`` entry point (our own fast scan of the distributions'
metadata, ``sparse_ops.plugins``), numba's scan through ``importlib.metadata``, which would
find none, is marked done.
"""
from __future__ import annotations

import atexit
import gc
import importlib
import importlib.util
import os
import sys
from typing import Any, Callable

import numba

from .. import _numba_env
from ..settings import BOUNDSCHECK, FAST_EXIT  # read in one place: sparse_ops/settings.py


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


_CYTHON_BLAS = ("scipy.linalg.cython_blas", "scipy.linalg.cython_lapack")


def _load_numba_registries() -> None:
    """Load numba's cpu target registries (what its first compile or cache load does),
    with SciPy's Cython BLAS modules loaded for numba's check but ``scipy.linalg`` itself
    not imported (see the module docstring)."""
    from numba.core.registry import cpu_target

    if "scipy.linalg" in sys.modules or any(name in sys.modules for name in _CYTHON_BLAS):
        return
    try:
        spec = importlib.util.find_spec("scipy.linalg")
    except ImportError:
        spec = None
    if spec is None:
        return
    # Another thread importing scipy.linalg meanwhile must wait for the real package, not get
    # the unexecuted one: it finds the module "initializing" and waits on its import lock.
    lock = getattr(importlib._bootstrap, "_ModuleLockManager", None)  # type: ignore[attr-defined]
    if lock is None:
        return
    with lock("scipy.linalg"):
        if "scipy.linalg" in sys.modules:
            return
        package = importlib.util.module_from_spec(spec)  # not executed: a parent for the two modules
        spec._initializing = True  # type: ignore[attr-defined]
        sys.modules["scipy.linalg"] = package
        try:
            for name in _CYTHON_BLAS:
                importlib.import_module(name)
        except ImportError:
            pass
        finally:
            spec._initializing = False  # type: ignore[attr-defined]
            if sys.modules.get("scipy.linalg") is package:
                del sys.modules["scipy.linalg"]
    try:
        cpu_target.target_context.refresh()  # imports numba.np.arraymath: its BLAS check passes
    finally:
        if "scipy.linalg" not in sys.modules:  # nothing imported the real package meanwhile
            for name in _CYTHON_BLAS:
                sys.modules.pop(name, None)


def _skip_empty_extension_scan() -> None:
    """Mark numba's extension entry points loaded when our scan finds there are none."""
    from numba.core import entrypoints

    probe = _numba_env.has_numba_extensions
    if probe is not None and getattr(entrypoints, "_already_initialized", True) is False and probe() is False:
        entrypoints._already_initialized = True


_skip_empty_extension_scan()
_load_numba_registries()
_numba_env.install_cache_locator()  # our kernels' cache keyed on every kernel source (sparse_ops/_numba_env.py)
if FAST_EXIT:  # see sparse_ops/settings.py
    atexit.register(gc.freeze)


def jit_options(parallel: bool = False, cache: bool = True, reassociate: bool = False,
                error_model: str = "python") -> dict[str, Any]:
    """The options ``jit`` gives numba.njit (also the ``jit_options`` of our overloads)."""
    return dict(parallel=parallel, cache=cache and _numba_env.CACHE_OK, nogil=True, boundscheck=BOUNDSCHECK or None,
                fastmath={"reassoc"} if reassociate else False, error_model=error_model)


def jit(parallel: bool = False, cache: bool = True, reassociate: bool = False,
        error_model: str = "python") -> Callable[[Callable[..., Any]], Any]:
    """numba.njit with the project's settings (see the module docstring); ``cache=False``
    for functions numba cannot cache (no source file); ``reassociate=True`` lets LLVM reorder
    floating-point sums (what vectorising a reduction needs), nothing else of fastmath;
    ``error_model="numpy"``: division by zero gives inf, NaN or 0 as NumPy's does instead of
    raising (what numba's parallel loops always do: the row kernels' drivers use it on every
    form, so serial and parallel runs agree)."""
    return numba.njit(**jit_options(parallel, cache, reassociate, error_model))

from . import checks  # noqa: E402,F401  (hooks the compiled format checks into validation.HOST_CHECKS)
