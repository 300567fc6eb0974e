"""Steady training steps on Linux: glibc's malloc kept from handing back the memory of one
step's temporaries to the OS only to fault it in again on the next.

A training step allocates megabyte-sized temporaries (gathered rows, gradient values) and
frees them. glibc's dynamic thresholds serve such blocks from the heap, but trim the heap's
top back to the OS whenever more than twice the (dynamic) mmap threshold lies free there,
so on every other step the next allocation faults its pages in again: measured on the
embedding step (1M x 64 table, 4,096 ids), 85 and 480 page faults on alternate steps,
about 0.6 and 1.1 ms. Fixed thresholds (``MMAP_THRESHOLD``: blocks below it come from the
heap; ``TRIM_THRESHOLD``: the free memory the heap's top keeps) make steady steps fault
nothing.

``tune()`` runs at ``import sparse_ops``. It sets nothing when ``SPARSE_OPS_MALLOC_TUNING=0``,
off Linux/glibc, or when the user tuned malloc already (``MALLOC_TRIM_THRESHOLD_``,
``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TOP_PAD_`` or ``GLIBC_TUNABLES`` in the environment,
or an LD_PRELOADed allocator). The cost: up to ``TRIM_THRESHOLD`` bytes of freed memory stay
with the process instead of going back to the OS.
"""
from __future__ import annotations

import ctypes
import os
import sys

from .settings import env_flag

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
MMAP_THRESHOLD = 32 << 20  # glibc's own ceiling for its dynamic threshold on 64-bit systems
TRIM_THRESHOLD = 128 << 20

_USER_SETTINGS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "GLIBC_TUNABLES",
                  "LD_PRELOAD")

TUNED = False  # whether tune() set the thresholds in this process


def tune() -> bool:
    """Set glibc's fixed mmap and trim thresholds (see the module docstring); True if set."""
    global TUNED
    if TUNED:
        return True
    if not env_flag("SPARSE_OPS_MALLOC_TUNING", True) or not sys.platform.startswith("linux"):
        return False
    if any(os.environ.get(k) for k in _USER_SETTINGS):
        return False
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):  # musl and others have no such mallopt
            return False
        mallopt = ctypes.CDLL(None).mallopt
    except (ValueError, OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    TUNED = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return TUNED
