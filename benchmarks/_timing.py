"""Timing and machine-description helpers shared by the benchmarks."""
from __future__ import annotations

import gc
import os
import platform
import statistics
import sys
import time
from typing import Any, Callable


def median_time(fn: Callable[[], Any], repeat: int = 5, warmup: int = 1) -> float:
    """Median wall time (seconds, ``time.perf_counter``) of ``fn()`` over ``repeat`` runs.

    ``warmup`` untimed calls come first (numba kernels compile or load from their cache on
    the first call; first-touch page faults of the allocator settle). The result of each
    call is dropped straight away and ``gc.collect()`` runs between calls, outside the
    timed region, so at most one result is alive at a time: the big dense cases depend
    on it.
    """
    for _ in range(warmup):
        fn()
        gc.collect()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        gc.collect()
    return statistics.median(times)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> str:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return f"{int(line.split()[1]) / 2**20:.1f} GiB"
    except OSError:
        pass
    return "unknown"


def _numba_threading() -> str:
    """The layer numba actually uses; known only once a parallel kernel has run."""
    if "numba" not in sys.modules:
        return "numba not imported"
    import numba

    try:
        layer = numba.threading_layer()
    except ValueError:
        return "not initialised (no parallel kernel ran)"
    return f"{layer} ({numba.get_num_threads()} threads)"


def describe_machine() -> dict[str, str]:
    """CPU, cores, memory, Python and library versions, numba's threading layer."""
    import numpy
    import scipy

    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    info = {
        "CPU": _cpu_model(),
        "cores": f"{os.cpu_count()} (usable by this process: {usable})",
        "memory": _memory_gib(),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "scipy": scipy.__version__,
    }
    try:
        import numba

        info["numba"] = numba.__version__
    except ImportError:
        info["numba"] = "not installed"
    info["numba threading layer"] = _numba_threading()
    return info


def markdown_table(header: list[str], rows: list[list[Any]]) -> str:
    """A GitHub-flavoured markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
