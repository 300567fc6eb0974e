"""The FFI handlers that run bridged calls: buffers in, our invoke path, buffers out.

``forward`` runs the op of the call's spec, ``backward`` its gradient rule; both are the
same C handler for every op (``ffi.handler``: a ctypes callback, entered with the GIL
taken), registered under one FFI target name per op (``sparse_ops_<name>``,
``sparse_ops_<name>_grad``) so that HLO dumps and profiles name the op.

On cpu the buffers are wrapped as NumPy arrays without a copy and become our containers
(csr and row_sparse inputs are validated as every container is: a malformed structure is
an FFI error naming the op, never a crash). Dense outputs are written by the kernel
straight into XLA's result buffers; sparse outputs are copied into their capacity-sized
buffers and padded (``spec.py``). On gpu (``gpu_forward`` / ``gpu_backward``) XLA's
device pointers are wrapped as CuPy arrays and the kernels run on XLA's stream, fetched
through ``XLA_FFI_Stream_Get``: nothing crosses to the host.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..boundary import FULL, OURS, admit
from ..bridging import PARTS, aligned, arg_names, framework_gradient
from ..device import Device
from ..dispatch import plan_for
from ..errors import OperatorError
from ..ndarray import NDArray
from ..tape import _scope
from . import ffi
from .spec import ArgLayout, CallSpec, GradSpec, JaxBridgeError, lookup

CPU = Device("cpu", 0)


def _label(frame: ffi.CallFrame) -> str:
    try:
        return lookup(ffi.int_attr(frame, "call")).label
    except Exception:  # noqa: BLE001 - the error message still says where it came from
        return "sparse_ops.jax"


# ---- containers over buffers ------------------------------------------------------------------
def containers(layouts: Sequence[ArgLayout], parts: Sequence[Any], device: Device, check: bool = True,
               names: Sequence[str] = ()) -> list:
    """Our containers over component arrays laid out as ``layouts`` (capacity padding
    trimmed), through the boundary's full check unless ``check`` is False (our own outputs)."""
    out, k = [], 0
    for i, lay in enumerate(layouts):
        name = names[i] if i < len(names) else f"input {i}"
        n = PARTS[lay.stype]
        try:
            p = list(parts[k:k + n])
            if lay.stype == "csr":
                nnz = int(p[2][-1]) if p[2].shape[0] else 0  # entries past it: padding
                if not 0 <= nnz <= p[0].shape[0]:
                    raise ValueError(f"indptr[-1] = {nnz} is outside 0..{p[0].shape[0]} (the stored values)")
                p[0], p[1] = p[0][:nnz], p[1][:nnz]
            elif lay.stype == "row_sparse":
                nnz = int((p[1] < lay.shape[0]).sum())  # padding rows carry the index shape[0]
                p[0], p[1] = p[0][:nnz], p[1][:nnz]
            out.append(admit(lay.stype, p, lay.shape, device, FULL if check else OURS))
        except (OperatorError, TypeError, ValueError) as exc:
            raise JaxBridgeError(f"argument {name!r} ({lay.stype}): {exc}") from exc
        k += n
    return out


def write(result: Any, lay: ArgLayout, parts: Sequence[Any], what: str, source: str = "") -> None:
    """Copy one output container into its result buffers, padding sparse ones. A result
    holding more than its capacity is refused, naming where the capacity came from
    (``source``: the op's rule or ``max_nnz=``)."""
    if lay.stype == "default":
        dst = parts[0]
        src = result if result.stype == "default" else result.tostype("default")
        if src._data is not dst:
            dst[...] = src._data
        return
    if result.stype != lay.stype:
        result = result.tostype(lay.stype)
    nnz = result._data.shape[0]
    cap = parts[0].shape[0]
    if nnz > cap:
        origin = f" (from {source})" if source else ""
        raise JaxBridgeError(f"{what} holds {nnz} stored values but its capacity is {cap}{origin}; pass a larger "
                             "max_nnz= to the bridged op")
    values, indices = parts[0], parts[1]
    values[:nnz] = result._data
    values[nnz:] = 0
    indices[:nnz] = result._indices
    if lay.stype == "csr":
        indices[nnz:] = 0
        parts[2][...] = result._indptr
    else:
        indices[nnz:] = lay.shape[0]


def _arg_names(spec: CallSpec) -> list[str]:
    return arg_names(spec.opdef, len(spec.ins))


# ---- running --------------------------------------------------------------------------------------
def run_forward(spec: CallSpec, args: Sequence[Any], rets: Sequence[Any], device: Device) -> None:
    """Run ``spec``'s op on component arrays ``args``, writing the results into ``rets``: the
    outputs' components, then the new values of the inputs the op updates in place. XLA's
    argument buffers are never written: such an input is updated in a copy (a dense one in
    its result buffer itself)."""
    inputs = containers(spec.ins, args, device, names=_arg_names(spec))
    states = rets[spec.n_out_parts:]
    if spec.mutated:
        inputs = _updatable(spec, inputs, states, device)
    plan = plan_for(spec.opdef, spec.inst, inputs)
    with _scope(False, None):
        if spec.all_dense and device.xp is np:
            outs = [NDArray(r, device) for r in rets]
            results = plan.execute(inputs, outs[:plan.nvis] if plan.nvis > 1 else outs[0])
        else:
            results = plan.execute(inputs)
    k = 0
    sources = [c.source if c is not None else "" for c in spec.capacities]
    for j, (r, lay) in enumerate(zip(results, spec.outs)):
        n = PARTS[lay.stype]
        write(r, lay, rets[k:k + n], f"output {j}", sources[j])
        k += n
    for j, (i, lay) in enumerate(zip(spec.mutated, spec.states), len(spec.outs)):
        n = PARTS[lay.stype]
        write(inputs[i], lay, rets[k:k + n], f"the new value of input {i}", sources[j])
        k += n


def _updatable(spec: CallSpec, inputs: list, states: Sequence[Any], device: Device) -> list:
    """``inputs`` with each one the op updates in place replaced by a copy it may write: a
    dense one's result buffer holding its values, a sparse one's container copy."""
    inputs, k = list(inputs), 0
    for i, lay in zip(spec.mutated, spec.states):
        x = inputs[i]
        if lay.stype == "default":
            states[k][...] = x._data
            inputs[i] = NDArray(states[k], device)
        else:
            inputs[i] = x.copy()
        k += PARTS[lay.stype]
    return inputs


def run_backward(gspec: GradSpec, args: Sequence[Any], rets: Sequence[Any], device: Device) -> None:
    """The op's gradient rule: ``args`` are the inputs' components, the outputs' components
    and one cotangent per output (dense, or aligned with a sparse output's values);
    ``rets`` one gradient per input that needs one (aligned with its values component)."""
    spec = gspec.fwd
    ni, no = spec.n_in_parts, spec.n_out_parts
    inputs = containers(spec.ins, args[:ni], device, names=_arg_names(spec))
    outputs = containers(spec.outs, args[ni:ni + no], device, check=False)
    cots = args[ni + no:]
    out_grads = []
    for o, c in zip(outputs, cots):
        if o.stype == "default":
            out_grads.append(NDArray(c, device))
        else:
            out_grads.append(o._with_values(c[:o._data.shape[0]].astype(o.dtype, copy=False), copy_aux=False))
    grads = framework_gradient(spec.inst, out_grads, inputs, outputs, list(gspec.needs), face="JAX",
                               prefix=f"{spec.label}: ", error=JaxBridgeError)
    k = 0
    for g, x, lay, need in zip(grads, inputs, spec.ins, gspec.needs):
        if not need:
            continue
        dst = rets[k]
        k += 1
        if g is None:
            dst[...] = 0
            continue
        a = aligned(g, x)
        n = a.shape[0] if x.stype != "default" else None
        if n is None:
            dst[...] = a
        else:
            dst[:n] = a
            dst[n:] = 0


def _host_buffers(frame: ffi.CallFrame) -> tuple[list, list]:
    """(arguments, results) of a call as NumPy arrays over XLA's memory, the arguments
    read-only: JAX arrays are immutable, so no kernel may write them."""
    args, rets = ffi.buffers(frame)
    for a in args:
        a.flags.writeable = False
    return args, rets


def _cpu_forward(frame: ffi.CallFrame) -> None:
    spec = lookup(ffi.int_attr(frame, "call"))
    args, rets = _host_buffers(frame)
    run_forward(spec, args, rets, CPU)


def _cpu_backward(frame: ffi.CallFrame) -> None:
    gspec = lookup(ffi.int_attr(frame, "call"))
    args, rets = _host_buffers(frame)
    run_backward(gspec, args, rets, CPU)


# ---- gpu: XLA's device buffers as CuPy arrays, on XLA's stream ----------------------------------
def _device_arrays(frame: ffi.CallFrame) -> tuple[list, list, Any]:  # pragma: no cover - needs a gpu
    import cupy

    def wrap(ptr: int, shape: tuple, dtype: np.dtype) -> Any:
        n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if n == 0:
            return cupy.empty(shape, dtype)
        mem = cupy.cuda.UnownedMemory(ptr, n, owner=None)
        return cupy.ndarray(shape, dtype, cupy.cuda.MemoryPointer(mem, 0))

    a, r = ffi.buffer_pointers(frame)
    stream = cupy.cuda.ExternalStream(ffi.stream_of(frame))
    return [wrap(*x) for x in a], [wrap(*x) for x in r], stream


def _gpu_device() -> Device:  # pragma: no cover - needs a gpu
    from ..device import as_device

    return as_device("gpu")


def _gpu_forward(frame: ffi.CallFrame) -> None:  # pragma: no cover - needs a gpu
    spec = lookup(ffi.int_attr(frame, "call"))
    args, rets, stream = _device_arrays(frame)
    with stream:
        run_forward(spec, args, rets, _gpu_device())


def _gpu_backward(frame: ffi.CallFrame) -> None:  # pragma: no cover - needs a gpu
    gspec = lookup(ffi.int_attr(frame, "call"))
    args, rets, stream = _device_arrays(frame)
    with stream:
        run_backward(gspec, args, rets, _gpu_device())


# the C handlers (kept alive here) and their addresses
_HANDLERS: dict[str, tuple[object, int]] = {}


def address(kind: str) -> int:
    """The C address of handler ``kind``: ``cpu``, ``cpu_grad``, ``gpu``, ``gpu_grad``."""
    hit = _HANDLERS.get(kind)
    if hit is None:
        run = {"cpu": _cpu_forward, "cpu_grad": _cpu_backward, "gpu": _gpu_forward, "gpu_grad": _gpu_backward}[kind]
        hit = _HANDLERS[kind] = ffi.handler(run, _label)
    return hit[1]
