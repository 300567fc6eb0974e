"""Process-wide switches, read once from the environment when sparse_ops is imported.

``BOUNDSCHECK`` (``SPARSE_OPS_BOUNDSCHECK=1``) is the debug mode: our numba kernels are
compiled with bounds checking (``sparse_ops.kernels.jit``), and the outputs of kernels
that are not ours (plugins, user operators, MXNet-form custom operators) get the full
O(nnz) structural validation and a search for values the kernel left unset (see
``sparse_ops.dispatch._check_outputs``). Both readers use this one constant. Plans made
before a change of ``BOUNDSCHECK`` keep the value they were made with.

``FAST_EXIT`` (on unless ``SPARSE_OPS_FAST_EXIT=0``): once numba is loaded, the objects alive
at interpreter exit are frozen (``gc.freeze``) before Python's final garbage collections,
which would otherwise walk every object numba built (its typing and lowering tables): a
large share of a short process's wall time. Cyclic garbage left at exit then gets no
finalizer call, which Python does not promise anyway; ``0`` keeps the full collection.
"""
from __future__ import annotations

import os

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def env_flag(name: str, default: bool) -> bool:
    """The on/off environment variable ``name``: ``1``/``true``/``yes``/``on`` or
    ``0``/``false``/``no``/``off`` (any case), ``default`` when unset or empty. Any other
    value is a ValueError naming the variable: a misspelt switch (``SPARSE_OPS_BOUNDSCHECK=ture``)
    must not leave a debug mode silently off. Every switch of the library reads this way."""
    raw = os.environ.get(name, "")
    value = raw.strip().lower()
    if not value:
        return default
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"environment variable {name}={raw!r}: expected one of {', '.join(_TRUE)} (on) or "
                     f"{', '.join(_FALSE)} (off), or unset")


BOUNDSCHECK: bool = env_flag("SPARSE_OPS_BOUNDSCHECK", False)
FAST_EXIT: bool = env_flag("SPARSE_OPS_FAST_EXIT", True)
