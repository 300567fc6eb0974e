"""Native FFI handlers: numba ``cfunc``s that read XLA's call frame and run a compiled
kernel, with no Python (and no GIL) on the call path.

Which calls take it: those whose kernel is a plain numba function of arrays, known here
by op and signature (``_RULES``): csr @ dense (``csr_spmm``; ``dot`` without transposes;
``embedding_bag``, sums or means of bags), on cpu, float32 or float64 values, int32 or
int64 indices. They run the op's own cpu kernel (``sdk.csr_cpu``: its serial or parallel
driver, chosen at trace time from the static work size by the project's one size policy,
``parallel_worth``), so both paths give the same bits. Every other call takes the Python
handler (``handlers.py``); ``explain`` says which.

Each cfunc is a call of ``native_kernel.serve``, compiled once per variant and kept in
numba's disk cache (a fresh process loads it), and a hand-off to the Python handler,
whose address is the one thing that changes from process to process. ``serve`` reads the
frame as 64-bit words at the offsets ``ffi.OFFSETS`` gives (checked against the C header
by the tests) and checks the csr structure it is given (``indptr``
starting at 0, non-decreasing, ending within the stored values; every column index in
range). Anything it does not handle itself (XLA's metadata query, another execution stage,
a malformed structure) it hands, frame and all, to the Python handler, which answers or
returns the FFI error naming the op and the argument: the fast path never reports an
error of its own, so there is one source of messages. Gradients take the Python handler
(it runs the op's gradient rule, made of operators), except X's gradient when the csr is a
constant (``grad_target_for``).
"""
from __future__ import annotations

import ctypes
import threading
from typing import Any, Callable, Sequence

import numpy as np

from .spec import CallSpec

_LOCK = threading.Lock()
_BUILT: dict[tuple, tuple[Any, int]] = {}    # (value dtype, index dtype, parallel, mean) -> (cfunc, address)
_TARGETS: dict[tuple, str] = {}               # the same key -> its FFI target name
_DISABLED = [False]


# the ops the cfuncs serve: name -> (the ``mean`` values its calls can take, the rule
# choosing one for a call's instance, None when the cfunc does not serve it)
_OPS: dict[str, tuple[tuple[bool, ...], Callable[[Any], bool | None]]] = {
    "csr_spmm": ((False,), lambda inst: False),  # sparse_grad changes the gradient only
    "dot": ((False,), lambda inst: None if getattr(inst, "transpose_a", False) or getattr(inst, "transpose_b", False)
            else False),
    "embedding_bag": ((False, True), lambda inst: inst.mode == "mean"),
}


def _rule(spec: CallSpec) -> bool | None:
    """``mean`` (False: a plain product) when ``spec`` is a csr @ dense call the cfunc
    runs, else None."""
    ins, outs = spec.ins, spec.outs
    if len(ins) != 2 or len(outs) != 1 or outs[0].stype != "default":
        return None
    a, x = ins
    if a.stype != "csr" or x.stype != "default" or len(x.shape) != 2:
        return None
    if a.dtype != x.dtype or a.dtype not in (np.dtype(np.float32), np.dtype(np.float64)) or outs[0].dtype != a.dtype:
        return None
    if a.index_dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
        return None
    served = _OPS.get(spec.opdef.name)
    return None if served is None else served[1](spec.inst)


def _builtin(spec: CallSpec) -> bool:
    """Only the records this module knows: built-in ``dot``, the cookbook's ops (a
    re-registered name under another owner takes the Python path)."""
    mod = getattr(spec.opdef.cls, "__module__", "") or ""
    return mod.startswith("sparse_ops.") or mod.startswith("sparse_ops_cookbook.")


def _on_cpu() -> bool:
    """Whether jax computes on the cpu by default (the cfunc targets are cpu ones)."""
    import jax

    return jax.default_backend() == "cpu"


def _parallel(spec: CallSpec) -> bool:
    from ..sdk.rowkernel import parallel_worth

    a, x = spec.ins
    return bool(parallel_worth(a.nse * x.shape[1]))


def _build(vdtype: np.dtype, idtype: np.dtype, parallel: bool, mean: bool, grad: bool = False) -> tuple[Any, int]:
    """The cfunc of one variant: ``native_kernel.serve`` (compiled once, cached on disk) on
    the frame, or the Python handler when it declines the frame."""
    import numba
    from numba import types

    from . import native_kernel

    serve, as_ptr, address, done = native_kernel.serve, native_kernel.as_ptr, native_kernel.address, native_kernel.DONE
    fallback = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(ffi_address("cpu_grad" if grad else "cpu"))
    values, index = np.empty(0, vdtype), np.empty(0, idtype)  # their dtypes choose serve's compiled variant

    def handler(frame):
        if serve(address(frame), values, index, parallel, mean, grad, np.int64(numba.get_num_threads())) != done:
            return fallback(frame)
        return as_ptr(0)

    cf = numba.cfunc(types.voidptr(types.voidptr), nogil=True)(handler)
    return cf, cf.address


def _variants(name: str) -> tuple[tuple[bool, bool], ...]:
    """(mean, grad) of every variant op ``name``'s calls may take: its forward ones and,
    for plain products, X's gradient (``grad_target_for``)."""
    means = _OPS[name][0] if name in _OPS else ()
    return tuple((m, False) for m in means) + (((False, True),) if False in means else ())


def warm(ops: str | Sequence[str] | None = None, dtypes: Any = ("float32", "float64")) -> list[tuple]:
    """Compile ``native_kernel.serve`` into numba's disk cache for every variant the cfuncs
    of ``ops`` (registered names; default: all the native path serves, the others compile
    nothing) take in ``dtypes`` (float32, float64 only): both index dtypes, serial and
    parallel drivers, forward and, for plain products, X's gradient. The variants compiled,
    as (value dtype, index dtype, parallel, mean, grad). A process then builds a handler
    with no compilation but its small cfunc's."""
    from ..registry import get_op
    from . import native_kernel

    ops = [ops] if isinstance(ops, str) else ops
    dtypes = [dtypes] if isinstance(dtypes, (str, type, np.dtype)) else dtypes
    for name in ops or ():
        get_op(name)  # an unknown name: OperatorError
    names = list(_OPS) if ops is None else ops
    values = [np.dtype(d) for d in dtypes if np.dtype(d) in (np.dtype(np.float32), np.dtype(np.float64))]
    done = []
    for choice in dict.fromkeys(c for n in names for c in _variants(n)):
        for v in values:
            for i in (np.dtype(np.int32), np.dtype(np.int64)):
                for parallel in (False, True):
                    native_kernel.serve.compile(native_kernel.signature(v, i, parallel, *choice))
                    done.append((v.name, i.name, parallel) + choice)
    return done


def ffi_address(kind: str = "cpu") -> int:
    from . import handlers

    return handlers.address(kind)


def _key(spec: CallSpec) -> tuple | None:
    if _DISABLED[0] or not _builtin(spec) or not _on_cpu():
        return None
    mean = _rule(spec)
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


def grad_target_for(gspec: Any) -> str | None:
    """The native FFI target of a backward call, or None (the Python handler runs the
    gradient rule): csr @ dense calls whose csr operand is a constant (only X needs a
    gradient, as a GCN's adjacency), where the rule is X's gradient A.T @ G, dense for JAX;
    computed as the cookbook's ``csr_spmm_t`` computes it (the SDK's counting-sort
    transpose, then the same csr @ dense row kernel)."""
    spec = gspec.fwd
    key = _key(spec)
    if key is None or key[3] or gspec.needs != (False, True):
        return None
    a, x = spec.ins
    from ..sdk.rowkernel import parallel_worth

    gkey = (key[0], key[1], bool(parallel_worth(a.nse * x.shape[1])), False, "grad")
    name = _TARGETS.get(gkey)
    if name is not None:
        return name
    import jax

    with _LOCK:
        name = _TARGETS.get(gkey)
        if name is None:
            cf, addr = _build(np.dtype(key[0]), np.dtype(key[1]), gkey[2], False, grad=True)
            _BUILT[gkey] = (cf, addr)
            name = "sparse_ops_native_csr_t_dense_" + "_".join(str(k).lower() for k in gkey[:3])
            jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(addr), platform="cpu")
            _TARGETS[gkey] = name
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
                        "no Python, no GIL"),
            "gradient": None if key[3] else ("a constant csr operand (only X perturbed): X's gradient A.T @ G by a "
                                             "native cfunc too (counting-sort transpose, the same row kernel)")}


def disabled(flag: bool = True) -> None:
    """Send every call to the Python handler (``True``) or let the native path serve the
    calls it knows again (``False``); for comparisons. Takes effect at the next trace."""
    _DISABLED[0] = bool(flag)
