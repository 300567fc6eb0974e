"""Ahead-of-time compilation of the operators' numba kernels into numba's on-disk cache.

A deployment (a docker build step, say) runs ``sparse-ops warmup`` once; every later
process then loads machine code from the cache instead of compiling on its first call.
Each op runs forward on its own ``samples()`` (the inputs ``opcheck`` uses), with the
floating-point inputs converted to each requested dtype (storage types and index dtypes
kept), so the kernels compile for the signatures real calls have: each value dtype, int32
and int64 indices, each storage pair with a kernel. Every sample runs twice: once as is
(the serial cpu drivers small inputs take) and once with the parallel-size policy
lowered to zero, so the ``prange`` drivers large inputs take are compiled too. A dtype an
op refuses (its ``infer_type`` raises) is skipped, not a failure; any other error fails
the op and the others go on. Backward kernels are not run.

``warmup_jax`` (``sparse-ops warmup --jax``, needs jax) compiles the JAX bridge's
native FFI handlers (``sparse_ops.jax.native.warm``) for the ops they serve, so a process
that bridges a csr @ dense call loads their body from the cache too.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

DEFAULT_DTYPES = ("float32", "float64")


@dataclass
class OpWarmup:
    """What warming one op did: the sample calls run, the dtypes skipped as refused, the
    error that failed it (None: ok) and the seconds taken."""
    name: str
    calls: int = 0
    skipped: list[str] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0


def _split(sample: Any) -> tuple[list, dict]:
    if isinstance(sample, tuple) and len(sample) == 2 and isinstance(sample[1], dict):
        return list(sample[0]), dict(sample[1])
    return list(sample), {}


def _as_dtype(inputs: list, dtype: np.dtype) -> tuple[list, bool]:
    """The inputs with floating-point containers converted to ``dtype``; whether any was."""
    out, changed = [], False
    for x in inputs:
        if np.issubdtype(getattr(x, "dtype", np.dtype(object)), np.floating) and hasattr(x, "astype"):
            changed = changed or x.dtype != dtype
            x = x.astype(dtype)
        out.append(x)
    return out, changed


def _refused(exc: Exception) -> bool:
    """Whether ``exc`` says the op does not take this dtype (raised by its type inference)."""
    from .errors import SparseOpsError

    text = str(exc).lower()
    return isinstance(exc, (TypeError, SparseOpsError)) and "dtype" in text


def warmup_op(name: str, dtypes: Sequence[Any] = DEFAULT_DTYPES) -> OpWarmup:
    """Run op ``name`` on its samples in each of ``dtypes``, serial and parallel drivers
    (see the module docstring)."""
    from . import dispatch, registry
    from .sdk import rowkernel

    result = OpWarmup(name)
    t0 = time.perf_counter()
    try:
        opdef = registry.get_op(name)
        make = getattr(opdef.cls, "samples", None)
        if not callable(make):
            raise LookupError("no samples() classmethod: nothing to compile it for")
        samples = [_split(s) for s in make()]
        saved = rowkernel.PARALLEL_MIN_WORK
        seen: set = set()
        for dtype in [np.dtype(d) for d in dtypes]:
            for number, (inputs, params) in enumerate(samples):
                args, changed = _as_dtype(inputs, dtype)
                key = (number, tuple(str(getattr(x, "dtype", "")) for x in args))
                if key in seen:
                    continue  # a sample without floating-point inputs: run once
                seen.add(key)
                try:
                    for threshold in (saved, 0):
                        rowkernel.PARALLEL_MIN_WORK = threshold
                        dispatch.invoke(name, args, params)
                        result.calls += 1
                except Exception as exc:
                    if changed and _refused(exc):
                        if dtype.name not in result.skipped:
                            result.skipped.append(dtype.name)
                        continue
                    raise
                finally:
                    rowkernel.PARALLEL_MIN_WORK = saved
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    result.seconds = time.perf_counter() - t0
    return result


def warmup_jax(ops: Sequence[str] | None = None, dtypes: Sequence[Any] = DEFAULT_DTYPES) -> OpWarmup:
    """Compile the JAX bridge's native handlers for ``ops`` (default: all it serves) in
    ``dtypes``: an ``OpWarmup`` named ``jax native handlers`` whose ``calls`` counts the
    variants compiled (an ImportError when jax is not installed is its ``error``)."""
    result = OpWarmup("jax native handlers")
    t0 = time.perf_counter()
    try:
        from .jax import native

        result.calls = len(native.warm(ops, dtypes))
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    result.seconds = time.perf_counter() - t0
    return result


def warmup(ops: Sequence[str] | None = None, dtypes: Sequence[Any] = DEFAULT_DTYPES) -> list[OpWarmup]:
    """Warm ``ops`` (default: every registered op, installed plugins' included) in ``dtypes``;
    one ``OpWarmup`` each, failures included (one op's failure does not stop the others)."""
    from .registry import list_ops

    names = list(list_ops()) if ops is None else list(ops)
    return [warmup_op(name, dtypes) for name in names]


__all__ = ["warmup", "warmup_op", "warmup_jax", "OpWarmup", "DEFAULT_DTYPES"]
