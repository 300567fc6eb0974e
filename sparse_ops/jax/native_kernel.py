"""The compiled body of the native FFI handlers (``native.py``): read XLA's call frame,
check the csr it holds, run the cpu csr @ dense kernel.

``serve`` is an ordinary numba function of the frame's address, compiled once for each
variant (value and index dtypes, the constant choices the cfunc passes: ``signature``) and
kept in numba's on-disk cache, so a fresh process loads it instead of compiling it again
(``sparse-ops warmup --jax`` compiles the variants ahead of time). Everything it depends
on is the same in every process: the frame's offsets (``ffi.OFFSETS``, the C header's),
the kernels it calls (themselves cached). What is not (the address of the Python handler it hands frames to)
stays in the small per-process ``cfunc`` that ``native.py`` wraps around it.

Imported by ``native.py`` when it builds its first handler (it loads numba).
"""
from __future__ import annotations

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

from .. import validation
from ..kernels import checks, jit
from ..sdk import csr_cpu
from ..sdk.csr import _mean_row
from . import ffi

_W = {k: v // 8 for k, v in ffi.OFFSETS.items()}  # the frame's fields as 64-bit word positions
_EXT, _STAGE = _W["frame.extension_start"], _W["frame.stage"]
_ARGS, _RETS = _W["frame.args.args"], _W["frame.rets.rets"]
_DATA, _DIMS = _W["buffer.data"], _W["buffer.dims"]
_EXECUTE = ffi.STAGE_EXECUTE

_serial, _split, _bounds = csr_cpu.csr_dense_rows, csr_cpu.csr_dense_parallel, csr_cpu.balanced_bounds
_violation, _OK = checks.csr_violation, validation.OK  # the containers' own csr check, compiled
_row_means = _mean_row.drivers().cpu_serial

DONE, FALLBACK = 0, 1

# serve calls the parallel driver, whose runtime its cache entries do not always load (numba
# drops that hook from code compiled where the driver came from the cache): start numba's
# threads before any variant loads, or LLVM aborts the process (symbol allocate_sched)
numba.get_num_threads()


@intrinsic
def as_ptr(typingctx, addr):
    """The address ``addr`` (an int64) as a pointer."""
    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(types.voidptr))

    return types.voidptr(types.int64), codegen


@intrinsic
def address(typingctx, ptr):
    """The pointer ``ptr`` as an int64."""
    def codegen(context, builder, signature, args):
        return builder.ptrtoint(args[0], context.get_value_type(types.int64))

    return types.int64(types.voidptr), codegen


@numba.njit(inline="always")
def _words(addr, n):
    return numba.carray(as_ptr(addr), n, np.int64)


@numba.njit(inline="always")
def _buffer(table, i):
    b = _words(table[i], _DIMS + 1)
    return b[_DATA], _words(b[_DIMS], 2)


def signature(vdtype: np.dtype, idtype: np.dtype, parallel: bool, mean: bool) -> tuple:
    """``serve``'s argument types in the variant a cfunc of ``native.py`` calls: the dtype
    carriers are constants of the cfunc (read-only arrays), the choices literals."""
    carrier = lambda dt: types.Array(numba.from_dtype(np.dtype(dt)), 1, "C", readonly=True)
    return (types.int64, carrier(vdtype), carrier(idtype),
            types.literal(bool(parallel)), types.literal(bool(mean)), types.int64)


@jit()
def serve(frame, values, index, parallel, mean, threads):
    """Run the call in XLA's frame at address ``frame`` (arguments: A's three parts, X;
    result: A @ X, with each row's mean when ``mean``): ``DONE``, or ``FALLBACK`` when the
    Python handler must take it (the metadata query, another stage, a csr the containers'
    check refuses, which the handler then reports).

    ``values`` and ``index`` (empty arrays) give the dtypes. ``parallel``: the prange
    driver, split for ``threads`` numba threads as the cpu kernel's own parallel driver
    splits (the caller asks numba: its thread count is not a constant of the cache)."""
    tasks = max(1, threads) * csr_cpu.TASKS_PER_THREAD
    f = _words(frame, 16)
    if f[_EXT] != 0 or (f[_STAGE] & 0xFFFFFFFF) != _EXECUTE:
        return FALLBACK
    args = _words(f[_ARGS], 4)
    rets = _words(f[_RETS], 1)
    p_data, d_data = _buffer(args, 0)
    p_ind, _ = _buffer(args, 1)
    p_ptr, d_ptr = _buffer(args, 2)
    p_x, d_x = _buffer(args, 3)
    p_out, _ = _buffer(rets, 0)
    nse, rows, m, k = d_data[0], d_ptr[0] - 1, d_x[0], d_x[1]
    data = numba.carray(as_ptr(p_data), nse, values.dtype)
    indices = numba.carray(as_ptr(p_ind), nse, index.dtype)
    indptr = numba.carray(as_ptr(p_ptr), rows + 1, index.dtype)
    if indptr[0] != 0 or not 0 <= indptr[rows] <= nse:  # the entries past indptr[-1]: capacity padding
        return FALLBACK
    nnz = indptr[rows]
    if _violation(indices[:nnz], indptr, m, True) != _OK:
        return FALLBACK
    x = numba.carray(as_ptr(p_x), (m, k), values.dtype)
    out = numba.carray(as_ptr(p_out), (rows, k), values.dtype)
    if rows > 0 and k > 0:
        if parallel:
            _split(indptr, indices, data, x, out, _bounds(indptr, tasks))
        else:
            _serial(indptr, indices, data, x, out, 0, rows)
        if mean:
            _row_means(0, rows, indptr, out)
    return DONE
