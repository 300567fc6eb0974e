"""Timing and machine-description helpers shared by the benchmarks."""
from __future__ import annotations

import contextlib
import gc
import os
import platform
import statistics
import sys
import time
from typing import Any, Callable, Iterator


_frozen_depth = 0


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Collect garbage once, then leave every object alive out of the collections between
    timed calls until the block ends (``gc.freeze``): once numba, SciPy and PyTorch are
    loaded a full collection scans millions of objects (~0.1 s each here), while only the
    timed calls' garbage needs it. Nested blocks share the outermost one's freeze."""
    global _frozen_depth
    if _frozen_depth == 0:
        gc.collect()
        gc.freeze()
    _frozen_depth += 1
    try:
        yield
    finally:
        _frozen_depth -= 1
        if _frozen_depth == 0:
            gc.unfreeze()


def median_time(fn: Callable[[], Any], repeat: int = 5, warmup: int = 1) -> float:
    """Median wall time (seconds, ``time.perf_counter``) of ``fn()`` over ``repeat`` runs.

    ``warmup`` untimed calls come first (numba kernels compile or load from their cache on
    the first call; first-touch page faults of the allocator settle). The result of each
    call is dropped straight away and ``gc.collect()`` runs between calls, outside the
    timed region (over the objects made since the timing began: ``frozen_heap``), so at
    most one result is alive at a time: the big dense cases depend on it.
    """
    for _ in range(warmup):
        fn()
    times = []
    with frozen_heap():  # collects the warm-up's garbage first
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
            gc.collect()
    return statistics.median(times)


def alternating(fns: dict[str, Callable[[], Any]], rounds: int = 9, calls: int = 1,
                warmup: int = 1) -> dict[str, list[float]]:
    """Per-call wall times (seconds) of each function in ``rounds`` rounds, the functions
    taking turns: in each round every function runs ``calls`` times in a row (timed as one
    batch, divided by ``calls``), and the order rotates from round to round.

    This is the paired measurement the suite relies on a shared, noisy machine: a burst
    of background load lands on neighbouring measurements of every contender, so the
    per-round ratios (``paired_ratio``) stay meaningful when absolute times do not.
    ``warmup`` untimed calls of each come first (numba compiles or loads its cache);
    garbage is collected after each batch, outside the timed region.
    """
    names = list(fns)
    for name in names:
        for _ in range(warmup):
            fns[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    with frozen_heap():  # collects the warm-up's garbage first
        for r in range(rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                fn = fns[name]
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn()
                times[name].append((time.perf_counter() - t0) / calls)
                gc.collect()
    return times


def paired_ratio(ours: list[float], reference: list[float]) -> float:
    """Median over rounds of ours / reference, from two lists of ``alternating``."""
    return statistics.median(a / b for a, b in zip(ours, reference))


def torch_threads(n: int | None = None) -> int | None:
    """PyTorch's intra-op thread count before this call (None without PyTorch); sets it to
    ``n`` when given."""
    try:
        import torch
    except ImportError:
        return None
    previous = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    return previous


def torch_best_threads(fn: Callable[[], Any], candidates: tuple[int, ...], rounds: int = 3) -> int:
    """Set PyTorch to whichever of ``candidates`` thread counts runs ``fn`` fastest (median
    of ``rounds`` alternating rounds) and return it. On a shared machine PyTorch's OpenMP
    threads can be 10x slower with two threads than with one, so the reference gets its
    best setting rather than its default."""
    import torch

    candidates = tuple(dict.fromkeys(candidates))
    if len(candidates) == 1:
        torch.set_num_threads(candidates[0])
        return candidates[0]

    def with_threads(n: int) -> Callable[[], Any]:
        def call() -> None:
            torch.set_num_threads(n)
            fn()
        return call

    t = alternating({str(n): with_threads(n) for n in candidates}, rounds=rounds)
    best = min(candidates, key=lambda n: statistics.median(t[str(n)]))
    torch.set_num_threads(best)
    return best


def torch_csr(m: Any, requires_grad: bool = False) -> Any:
    """A SciPy csr matrix as a PyTorch sparse csr tensor (int64 indices, values copied when
    they need a gradient); raises ImportError without PyTorch."""
    import warnings

    import numpy as np
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta"
        values = torch.from_numpy(m.data.copy() if requires_grad else m.data)
        return torch.sparse_csr_tensor(torch.from_numpy(m.indptr.astype(np.int64)),
                                       torch.from_numpy(m.indices.astype(np.int64)), values,
                                       size=m.shape, requires_grad=requires_grad)


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
    try:
        import torch

        info["torch"] = f"{torch.__version__} ({torch.get_num_threads()} threads)"
    except ImportError:
        info["torch"] = "not installed (PyTorch columns n/a)"
    info["os"] = platform.platform()
    return info


def markdown_table(header: list[str], rows: list[list[Any]]) -> str:
    """A GitHub-flavoured markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
