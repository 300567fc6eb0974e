"""Native FFI handlers: numba ``cfunc``s that read XLA's call frame and run a compiled
kernel, with no Python (and no GIL) on the call path.

Which calls take it: those whose kernel is a plain numba function of arrays, known here
by op and signature (``_RULES``): csr @ dense (``csr_spmm``; ``dot`` without transposes;
``embedding_bag``, sums or means of bags), on cpu, float32 or float64 values, int32 or
int64 indices. They run the op's own cpu kernel (``sdk.csr_cpu``: its serial or parallel
driver, chosen at trace time from the static work size by the project's one size policy,
``parallel_worth``), so both paths give the same bits. Every other call takes the Python
handler (``handlers.py``); ``explain`` says which.

The cfunc reads the frame as 64-bit words at the offsets ``ffi.OFFSETS`` gives (checked
against the C header by the tests) and checks the csr structure it is given (``indptr``
starting at 0, non-decreasing, ending within the stored values; every column index in
range). Anything it does not handle itself (XLA's metadata query, another execution stage,
a malformed structure) it hands, frame and all, to the Python handler, which answers or
returns the FFI error naming the op and the argument: the fast path never reports an
error of its own, so there is one source of messages. The gradient always takes the Python
handler (it runs the op's gradient rule, made of operators).
"""
from __future__ import annotations

import ctypes
import threading
from typing import Any

import numpy as np

from . import ffi
from .spec import CallSpec

_LOCK = threading.Lock()
_BUILT: dict[tuple, tuple[Any, int]] = {}    # (value dtype, index dtype, parallel, mean) -> (cfunc, address)
_TARGETS: dict[tuple, str] = {}               # the same key -> its FFI target name
_DISABLED = [False]


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
    name = spec.opdef.name
    if name == "csr_spmm":  # sparse_grad changes the gradient only
        return False
    if name == "dot" and not (getattr(spec.inst, "transpose_a", False) or getattr(spec.inst, "transpose_b", False)):
        return False
    if name == "embedding_bag":
        return spec.inst.mode == "mean"
    return None


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
    import numba
    from numba import types
    from numba.core.extending import intrinsic

    from ..sdk import csr_cpu
    from ..sdk.csr import _counting_sort_kernel, _mean_row

    serial, split = csr_cpu.csr_dense_rows, csr_cpu.csr_dense_parallel
    bounds, tasks = csr_cpu.balanced_bounds, max(1, numba.get_num_threads()) * csr_cpu.TASKS_PER_THREAD
    run_mean = _mean_row.drivers().cpu_serial
    transpose = _counting_sort_kernel()
    fallback = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(ffi_address("cpu_grad" if grad else "cpu"))
    W = {k: v // 8 for k, v in ffi.OFFSETS.items()}
    EXT, STAGE, ARGS, RETS = W["frame.extension_start"], W["frame.stage"], W["frame.args.args"], W["frame.rets.rets"]
    DATA, DIMS = W["buffer.data"], W["buffer.dims"]
    vdt, idt = np.dtype(vdtype), np.dtype(idtype)
    EXECUTE = ffi.STAGE_EXECUTE
    GRAD = grad

    @intrinsic
    def as_ptr(typingctx, addr):
        sig = types.voidptr(types.int64)

        def codegen(context, builder, signature, args):
            return builder.inttoptr(args[0], context.get_value_type(types.voidptr))

        return sig, codegen

    @numba.njit(inline="always")
    def words(addr, n):
        return numba.carray(as_ptr(addr), n, np.int64)

    @numba.njit(inline="always")
    def buffer(table, i):
        b = words(table[i], DIMS + 1)
        return b[DATA], words(b[DIMS], 2)

    def handler(frame):
        f = words(ctypes_addr(frame), 16)
        if f[EXT] != 0 or (f[STAGE] & 0xFFFFFFFF) != EXECUTE:
            return fallback(frame)
        args = words(f[ARGS], 6 if GRAD else 4)  # A's three parts, X (then the output and G for the gradient)
        rets = words(f[RETS], 1)
        p_data, d_data = buffer(args, 0)
        p_ind, _ = buffer(args, 1)
        p_ptr, d_ptr = buffer(args, 2)
        p_x, d_x = buffer(args, 3)
        p_out, _ = buffer(rets, 0)
        nse, rows, m, k = d_data[0], d_ptr[0] - 1, d_x[0], d_x[1]
        data = numba.carray(as_ptr(p_data), nse, vdt)
        indices = numba.carray(as_ptr(p_ind), nse, idt)
        indptr = numba.carray(as_ptr(p_ptr), rows + 1, idt)
        if GRAD:  # X's gradient A.T @ G: args (A's parts, X, the output, its cotangent G)
            p_g, _ = buffer(args, 5)
            g = numba.carray(as_ptr(p_g), (rows, k), vdt)
            out = numba.carray(as_ptr(p_out), (m, k), vdt)
        else:
            x = numba.carray(as_ptr(p_x), (m, k), vdt)
            out = numba.carray(as_ptr(p_out), (rows, k), vdt)
        if indptr[0] != 0 or indptr[rows] > nse:
            return fallback(frame)
        for r in range(rows):
            if indptr[r + 1] < indptr[r]:
                return fallback(frame)
        for j in range(indptr[rows]):
            if indices[j] < 0 or indices[j] >= m:
                return fallback(frame)
        if GRAD:
            nnz = indptr[rows]
            t_indptr = np.empty(m + 1, idt)
            t_indices = np.empty(nnz, idt)
            t_data = np.empty(nnz, vdt)
            transpose(m, indptr, indices[:nnz], data[:nnz], t_indptr, t_indices, t_data)
            if m > 0 and k > 0:
                if parallel:
                    split(t_indptr, t_indices, t_data, g, out, bounds(t_indptr, tasks))
                else:
                    serial(t_indptr, t_indices, t_data, g, out, 0, m)
        elif rows > 0 and k > 0:
            if parallel:
                split(indptr, indices, data, x, out, bounds(indptr, tasks))
            else:
                serial(indptr, indices, data, x, out, 0, rows)
            if mean:
                run_mean(0, rows, indptr, out)
        return as_ptr(0)

    @intrinsic
    def ctypes_addr(typingctx, ptr):
        sig = types.int64(types.voidptr)

        def codegen(context, builder, signature, args):
            return builder.ptrtoint(args[0], context.get_value_type(types.int64))

        return sig, codegen

    cf = numba.cfunc(types.voidptr(types.voidptr), nogil=True)(handler)
    return cf, cf.address


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
