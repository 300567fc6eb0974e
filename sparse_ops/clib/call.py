"""Running C kernels and inference callbacks: arrays described as ``so_array``, the
``so_context`` with its resource callbacks, and a non-zero status turned into an
``OperatorError`` naming the op, the library and the C message.

Two ways into a kernel. The fast one (``trampoline.call_dense``) serves dense cpu kernels
that ask for no resources: compiled code describes the arrays and calls the kernel, against
a context and parameters built once. Everything else (storage-aware kernels, gpu kernels,
kernels using the workspace, the output allocator or a seed) goes through ctypes here.
"""
from __future__ import annotations

import ctypes as C
import itertools
import threading
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..device import allocating_on
from ..errors import OperatorError
from ..ndarray import NDArray
from . import abi
from .declare import c_params

_local = threading.local()


def error_buffer() -> abi.Error:
    """This thread's so_error (one per thread: messages of concurrent calls never mix)."""
    err = getattr(_local, "err", None)
    if err is None:
        err = _local.err = abi.Error(*abi.header(abi.Error))
        _local.err_address = C.addressof(err)
    return err


def error_address() -> int:
    try:
        return _local.err_address
    except AttributeError:
        error_buffer()
        return _local.err_address


def failure(where: str, what: str, status: int, message: str | None = None) -> OperatorError:
    """The error of a C callback that returned ``status``: ``where`` names the op and library."""
    if message is None:
        message = error_buffer().message.decode("utf-8", "replace")
    code = abi.STATUS_NAMES.get(status, f"status {status}")
    error = OperatorError(f"{where}: {what} returned {code}: {message or '(no message)'}")
    error.quoted = message or None  # the library's words, kept as they are by faces that reword
    return error


# ---- describing arrays ----------------------------------------------------------------------------
def _address(a: Any) -> int:
    return a.ctypes.data if isinstance(a, np.ndarray) else a.data.ptr  # NumPy or CuPy


def _device_fields(s: abi.Array, device: Any) -> None:
    s.device_type = abi.DEVICE_CODES[device.device_type]
    s.device_id = device.device_id


def describe(s: abi.Array, x: Any, device: Any, keep: list) -> None:
    """Fill so_array ``s`` for ``x`` (a container, or a dense array of the dense kernel path).
    Arrays that are not C-contiguous are copied; ``keep`` holds what must outlive the call."""
    s.struct_size, s.abi_version = C.sizeof(abi.Array), abi.ABI_VERSION
    if not isinstance(x, NDArray) or x.stype == "default":
        values = x.data if isinstance(x, NDArray) else x
        if not values.flags.c_contiguous:
            values = values.copy(order="C")
            keep.append(values)
        if values.ndim > abi.MAX_NDIM:
            raise OperatorError(f"C kernels take arrays of at most {abi.MAX_NDIM} dimensions, got shape "
                                f"{values.shape}")
        s.stype, s.index_dtype, s.ndim = 0, -1, values.ndim
        s.shape[:values.ndim] = values.shape
        s.nnz, s.data, s.indices, s.indptr = values.size, _address(values), None, None
        s.dtype = abi.DTYPE_CODES[values.dtype]
    else:
        s.stype, s.dtype = abi.STYPE_CODES[x.stype], abi.DTYPE_CODES[x.dtype]
        s.ndim = len(x.shape)
        s.shape[:s.ndim] = x.shape
        parts = [x.data, x.indices] + ([x.indptr] if x.stype == "csr" else [])
        parts = [p if p.flags.c_contiguous else p.copy(order="C") for p in parts]
        keep += parts
        s.index_dtype = abi.INDEX_CODES[parts[1].dtype]
        s.nnz = parts[1].shape[0]
        s.data, s.indices = _address(parts[0]), _address(parts[1])
        s.indptr = _address(parts[2]) if x.stype == "csr" else None
    _device_fields(s, device)


def describe_unallocated(s: abi.Array, out: NDArray, device: Any) -> None:
    """An so_array for a sparse output the kernel allocates (``alloc_output``)."""
    s.struct_size, s.abi_version = C.sizeof(abi.Array), abi.ABI_VERSION
    s.stype, s.dtype, s.index_dtype = abi.STYPE_CODES[out.stype], abi.DTYPE_CODES[out.dtype], -1
    s.ndim = len(out.shape)
    s.shape[:s.ndim] = out.shape
    s.nnz, s.data, s.indices, s.indptr = -1, None, None, None
    _device_fields(s, device)


# ---- the context and its callbacks ----------------------------------------------------------------
@dataclass
class _Call:
    """What the resource callbacks of one kernel call need."""

    ctx: Any  # the OpContext
    outputs: Sequence[Any]
    where: str
    problem: str | None = None  # what a callback refused, reported in place of the C message
    keep: list = field(default_factory=list)
    allocated: set = field(default_factory=set)  # the outputs alloc_output gave arrays


_CALLS: dict[int, _Call] = {}
_ids = itertools.count(1)
# what a callback refused in a call of the fast path (``opclass``: a dense cpu kernel of an op
# declaring no resources, called with host 0), per thread; read and reset by ``fast_problem``
_FAST = threading.local()


def fast_problem() -> str | None:
    """What a callback refused during this thread's last fast-path kernel call (None: nothing),
    forgotten once read."""
    problem = getattr(_FAST, "problem", None)
    if problem is not None:
        _FAST.problem = None
    return problem


def _workspace(host: int, nbytes: int) -> int | None:
    call = _CALLS.get(host)
    if call is None:
        _FAST.problem = f"ctx->workspace({nbytes}) failed: the op does not declare SO_RESOURCE_WORKSPACE"
        return None
    try:
        if "workspace" not in call.ctx.op.resources:
            raise OperatorError("ctx->workspace called, but the op does not declare SO_RESOURCE_WORKSPACE")
        buf = call.ctx.workspace((int(nbytes),), np.uint8)
        return _address(buf) if buf.size else _address(call.ctx.xp.empty(1, np.uint8))
    except Exception as exc:  # never let an exception reach C
        call.problem = f"ctx->workspace({nbytes}) failed: {exc}"
        return None


# what alloc_output says of a dense output: often a kernel declared without stypes (a dense
# kernel, whose outputs are dense and cast afterwards) for an op whose rule infers a sparse one
_DENSE_OUTPUT = ("output {i} is dense for this kernel: it arrives allocated (a kernel declared with stypes = NULL "
                 "is dense: its outputs arrive dense and are cast to the storage types infer_storage_type gives; "
                 "a kernel that builds a sparse output declares the input storage types it takes)")


def _alloc_output(host: int, index: int, nnz: int, index_code: int, s: Any) -> int:
    call = _CALLS.get(host)
    if call is None:
        _FAST.problem = (f"ctx->alloc_output(output={index}, nnz={nnz}) failed: {_DENSE_OUTPUT.format(i=index)}")
        return abi.ERR_RESOURCE
    try:
        if not 0 <= index < len(call.outputs):
            raise OperatorError(f"output {index} does not exist ({len(call.outputs)} outputs)")
        out = call.outputs[index]
        if not isinstance(out, NDArray) or out.stype == "default":
            raise OperatorError(_DENSE_OUTPUT.format(i=index))
        if nnz < 0:
            raise OperatorError(f"negative nnz {nnz} for output {index}")
        if index in call.allocated:  # its first arrays may still be written through the pointers handed out
            raise OperatorError(f"output {index} was already allocated (alloc_output is called once per output)")
        dtype = next((dt for dt, code in abi.INDEX_CODES.items() if code == index_code), None)
        if dtype is None:
            raise OperatorError(f"index dtype code {index_code} is neither SO_DTYPE_INT32 nor SO_DTYPE_INT64")
        if out.stype == "csr":
            data, indices, indptr = call.ctx.alloc_csr(out, int(nnz), dtype)
        else:
            data, indices = call.ctx.alloc_row_sparse(out, int(nnz), dtype)
            indptr = None
        call.allocated.add(index)
        desc = s[0]
        desc.nnz, desc.index_dtype = nnz, index_code
        desc.data, desc.indices = _address(data), _address(indices)
        desc.indptr = _address(indptr) if indptr is not None else None
        return abi.OK
    except Exception as exc:
        text, named = str(exc), f"{call.ctx.op.label}: "  # the failure names the op and library already
        call.problem = f"ctx->alloc_output(output={index}, nnz={nnz}) failed: {text.removeprefix(named)}"
        return abi.ERR_RESOURCE


# ctypes keeps these C entry points alive as long as the module is
WORKSPACE = abi.WorkspaceFn(_workspace)
ALLOC_OUTPUT = abi.AllocOutputFn(_alloc_output)


def context(ctx: Any, host: int = 0, seed: int = 0) -> abi.Context:
    """The so_context of OpContext ``ctx`` (for call ``host`` of ``_CALLS``)."""
    device = ctx.device
    stream = ctx.stream
    return abi.Context(*abi.header(abi.Context), abi.DEVICE_CODES[device.device_type], device.device_id,
                       stream.ptr if stream is not None else None, seed, int(ctx.is_train), 0, host,
                       WORKSPACE, ALLOC_OUTPUT)


# ---- running a kernel ------------------------------------------------------------------------------
def run_kernel(fn: Any, where: str, inst: Any, ctx: Any, n_in: int, arrays: Sequence[Any],
               mutated: tuple[int, ...] = ()) -> None:
    """Run C kernel ``fn`` (an abi.KernelFn) on ``arrays`` (the inputs, then the outputs:
    containers or dense arrays) through ctypes; raise an OperatorError on a non-zero status.
    Inputs at positions ``mutated`` (aux states) the kernel updated in a copy get the values back."""
    if ctx.device.device_type == "gpu" and ctx.xp is np:
        raise OperatorError(f"{where}: C kernels need a real GPU; under SPARSE_OPS_CUDA_SIM=1 the gpu device is "
                            f"simulated in host memory, where only numba kernels run")
    n = len(arrays)
    descs = (abi.Array * max(n, 1))()
    call = _Call(ctx, arrays[n_in:], where)
    for i, x in enumerate(arrays):
        if i >= n_in and isinstance(x, NDArray) and x.stype != "default":
            describe_unallocated(descs[i], x, ctx.device)
        else:
            describe(descs[i], x, ctx.device, call.keep)
    seed = int(ctx.rng.integers(0, 2**63 - 1)) if "random" in ctx.op.resources else 0
    host = next(_ids)
    _CALLS[host] = call
    try:
        with allocating_on(ctx.device):  # a real gpu: its device current, its stream in the context
            c_ctx = context(ctx, host, seed)
            params = c_params(inst)
            err = error_buffer()
            err.message = b""
            outs = C.cast(C.addressof(descs) + n_in * C.sizeof(abi.Array), C.POINTER(abi.Array))
            status = fn(C.byref(c_ctx), C.byref(params.struct), n_in, descs, n - n_in, outs, C.byref(err))
    finally:
        del _CALLS[host]
    if status != abi.OK:
        raise failure(where, "the kernel", status, call.problem)
    if call.problem is not None:
        raise OperatorError(f"{where}: the kernel returned SO_OK after a host callback failed: {call.problem}")
    names = inst.output_names()
    for i in range(n_in, n):
        if isinstance(arrays[i], NDArray) and arrays[i].stype != "default" and descs[i].nnz < 0:
            j = i - n_in
            name = f" ({names[j]!r})" if j < len(names) else ""
            raise OperatorError(f"{where}: the kernel returned SO_OK without allocating sparse output {j}{name}: "
                                "sparse outputs are allocated by the kernel with ctx->alloc_output")
    if call.keep and mutated:
        _copy_back(arrays, mutated, descs, call)


def _copy_back(arrays: Sequence[Any], mutated: tuple[int, ...], descs: Any, call: _Call) -> None:
    for i in mutated:
        x = arrays[i]
        values = x.data if isinstance(x, NDArray) and x.stype == "default" else x
        if isinstance(values, np.ndarray) and not values.flags.c_contiguous:
            copied = next((k for k in call.keep if _address(k) == descs[i].data), None)
            if copied is not None:
                values[...] = copied.reshape(values.shape)
