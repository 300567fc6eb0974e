"""Native FFI handlers: numba ``cfunc``s that read XLA's call frame and run a compiled
kernel, with no Python (and no GIL) on the call path.

Which calls take it: csr @ dense calls on cpu (float32 or float64 values, int32 or int64
indices, a 2-d dense X of the csr's dtype, a dense result) whose plan picks a kernel marked
``sdk.csr.runs_csr_dense`` (built-in ``dot`` without transposes; the cookbook's
``csr_spmm`` and ``embedding_bag`` sums and means): the kernel the Python handler would
run, chosen by the same ``dispatch.choose_dispatch``. The cfunc runs that kernel's cpu
body (``sdk.csr_cpu``: its serial or parallel driver, chosen at trace time by the
project's one size policy, ``parallel_worth``), so both paths give the same bits. Every
other call, and every gradient, takes the Python handler (``handlers.py``); ``explain``
says which.

Each cfunc is a call of ``native_kernel.serve``, compiled once per variant and kept in
numba's disk cache (a fresh process loads it), and a hand-off to the Python handler,
whose address is the one thing that changes from process to process. ``serve`` reads the
frame as 64-bit words at the offsets ``ffi.OFFSETS`` gives (checked against the C header
by the tests) and checks the csr structure with the containers' own check
(``validation.csr_violation``, compiled). Anything it does not handle itself (XLA's
metadata query, another execution stage, a malformed structure) it hands, frame and all,
to the Python handler, which answers or returns the FFI error naming the op and the
argument: the fast path never reports an error of its own, so there is one source of
messages.
"""
from __future__ import annotations

import ctypes
import itertools
import threading
from typing import Any, Sequence

import numpy as np

from .spec import CallSpec, is_symbolic

_LOCK = threading.Lock()
_BUILT: dict[tuple, tuple[Any, int]] = {}    # (value dtype, index dtype, parallel, mean) -> (cfunc, address)
_TARGETS: dict[tuple, str] = {}               # the same key -> its FFI target name
_DISABLED = [False]
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_INDICES = (np.dtype(np.int32), np.dtype(np.int64))


def _mean(spec: CallSpec) -> bool | None:
    """Whether ``spec``'s call takes the row-mean form of csr @ dense (True), the plain
    product (False), or not the native path at all (None)."""
    ins, outs = spec.ins, spec.outs
    if len(ins) != 2 or len(outs) != 1 or outs[0].stype != "default":
        return None
    a, x = ins
    if a.stype != "csr" or x.stype != "default" or len(x.shape) != 2:
        return None
    if a.dtype != x.dtype or a.dtype not in _FLOATS or outs[0].dtype != a.dtype or a.index_dtype not in _INDICES:
        return None
    rule = _marked(spec.opdef)
    return None if rule is None else rule(spec.inst)


def _marked(opdef: Any) -> Any:
    """The ``runs_csr_dense`` rule of the kernel ``opdef``'s plans pick for csr @ dense on
    the cpu, or None."""
    from ..device import cpu
    from ..dispatch import choose_dispatch
    from ..errors import OperatorError

    try:
        mode, fn = choose_dispatch(opdef, cpu(), ("csr", "default"), ("default",))
    except OperatorError:  # no kernel at all for these storage types
        return None
    return getattr(fn, "csr_dense_mean", None) if mode == "fcompute_ex" else None


def _on_cpu() -> bool:
    """Whether jax computes on the cpu by default (the cfunc targets are cpu ones)."""
    import jax

    return jax.default_backend() == "cpu"


def _parallel(spec: CallSpec) -> bool:
    """The driver the cfunc runs: the project's size policy on the static work, or, where
    the work is a symbolic size (one program exported for every size), the parallel driver
    whenever numba has threads (rows are independent: the serial driver's bits on any size)."""
    from ..sdk.rowkernel import PARALLEL_MIN_WORK, parallel_worth

    a, x = spec.ins
    work = a.nse * x.shape[1]
    return bool(parallel_worth(PARALLEL_MIN_WORK if is_symbolic(work) else work))


def _build(vdtype: np.dtype, idtype: np.dtype, parallel: bool, mean: bool) -> tuple[Any, int]:
    """The cfunc of one variant: ``native_kernel.serve`` (compiled once, cached on disk) on
    the frame, or the Python handler when it declines the frame."""
    import numba
    from numba import types

    from . import native_kernel

    serve, as_ptr, address, done = native_kernel.serve, native_kernel.as_ptr, native_kernel.address, native_kernel.DONE
    fallback = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(ffi_address("cpu"))
    values, index = np.empty(0, vdtype), np.empty(0, idtype)  # their dtypes choose serve's compiled variant

    def handler(frame):
        if serve(address(frame), values, index, parallel, mean, np.int64(numba.get_num_threads())) != done:
            return fallback(frame)
        return as_ptr(0)

    cf = numba.cfunc(types.voidptr(types.voidptr), nogil=True)(handler)
    return cf, cf.address


def warm(ops: str | Sequence[str] | None = None, dtypes: Any = ("float32", "float64")) -> list[tuple]:
    """Compile ``native_kernel.serve`` into numba's disk cache for every variant the cfuncs
    of ``ops`` (registered names; default: all whose cpu csr @ dense kernel is marked
    ``runs_csr_dense``; others compile nothing) take in ``dtypes`` (float32, float64 only):
    both index dtypes, serial and parallel drivers, each form (plain, row means) the op's
    parameters can give. The variants compiled, as (value dtype, index dtype, parallel,
    mean). A process then builds a handler with no compilation but its small cfunc's."""
    from ..registry import get_op, list_ops
    from . import native_kernel

    ops = [ops] if isinstance(ops, str) else ops
    dtypes = [dtypes] if isinstance(dtypes, (str, type, np.dtype)) else dtypes
    opdefs = [get_op(name) for name in (list_ops() if ops is None else ops)]  # an unknown name: OperatorError
    values = [np.dtype(d) for d in dtypes if np.dtype(d) in _FLOATS]
    done = []
    for mean in dict.fromkeys(m for opdef in opdefs for m in _forms(opdef)):
        for v in values:
            for i in _INDICES:
                for parallel in (False, True):
                    native_kernel.serve.compile(native_kernel.signature(v, i, parallel, mean))
                    done.append((v.name, i.name, parallel, mean))
    return done


def _forms(opdef: Any) -> tuple[bool, ...]:
    """The forms (mean or not) an op's calls may take on the native path: those its
    parameters' declared choices give (a parameter without choices: its default)."""
    rule = _marked(opdef)
    if rule is None:
        return ()
    if any(p.required and not p.choices for p in opdef.params.values()):
        return (False, True)
    options = [list(p.choices) if p.choices else [p.default] for p in opdef.params.values()]
    names = list(opdef.params)
    forms = set()
    for combo in itertools.product(*options):
        form = rule(opdef.instance(dict(zip(names, combo))))
        if form is not None:
            forms.add(bool(form))
    return tuple(sorted(forms))


def ffi_address(kind: str = "cpu") -> int:
    from . import handlers

    return handlers.address(kind)


def _key(spec: CallSpec) -> tuple | None:
    if _DISABLED[0] or not _on_cpu():
        return None
    mean = _mean(spec)
    if mean is None:
        return None
    a = spec.ins[0]
    return (a.dtype.name, a.index_dtype.name, _parallel(spec), bool(mean))


def target_for(spec: CallSpec) -> str | None:
    """The native FFI target serving ``spec``'s forward call (built and registered on first
    use), or None: the call takes the Python handler."""
    key = _key(spec)
    if key is None:
        return None
    name = _TARGETS.get(key)
    if name is not None:
        return name
    import jax

    with _LOCK:
        name = _TARGETS.get(key)
        if name is None:
            cf, addr = _build(np.dtype(key[0]), np.dtype(key[1]), key[2], key[3])
            _BUILT[key] = (cf, addr)
            name = "sparse_ops_native_csr_dense_" + "_".join(str(k).lower() for k in key)
            jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(addr), platform="cpu")
            _TARGETS[key] = name
    return name


def describe(spec: CallSpec) -> dict | None:
    """``explain``'s entry for a call the native path serves, else None."""
    key = _key(spec)
    if key is None:
        return None
    name = "sparse_ops_native_csr_dense_" + "_".join(str(k).lower() for k in key)
    return {"target": name,
            "handler": (f"native: numba cfunc reading the call frame, sdk.csr_cpu csr @ dense kernel "
                        f"({'prange' if key[2] else 'serial'} driver{', row means' if key[3] else ''}); "
                        "no Python, no GIL; gradients through the Python handler")}


def disabled(flag: bool = True) -> None:
    """Send every call to the Python handler (``True``) or let the native path serve the
    calls it knows again (``False``); for comparisons. Takes effect at the next trace."""
    _DISABLED[0] = bool(flag)
