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

BOUNDSCHECK: bool = os.environ.get("SPARSE_OPS_BOUNDSCHECK", "0") == "1"
FAST_EXIT: bool = os.environ.get("SPARSE_OPS_FAST_EXIT", "1") != "0"
