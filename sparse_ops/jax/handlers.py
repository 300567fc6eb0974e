"""The FFI handlers that run bridged calls: buffers in, our invoke path, buffers out.

Four kinds of call, one C handler each for every op, registered under one FFI target name
per op and kind so that HLO dumps and profiles name the op: ``run_forward`` runs the op
(``sparse_ops_<name>``), ``run_backward`` its gradient rule (``_grad``), ``run_jvp`` the
forward-mode derivative (``_jvp``) and ``run_hvp`` the second derivative (``_hvp``); the
last two differentiate the gradient rule with our engine (``derivatives.py`` says when
JAX asks for each).

On cpu the handler is a ctypes callback (entered with the GIL taken) reading the frame by
address (``ffi.Frame``): the call's id, then each buffer checked against the layout the
call's spec gives (dtype, shape) and viewed as a NumPy array without a copy (arguments
read-only). Buffers become our containers (csr and row_sparse inputs are validated as every
container is: a malformed structure is an FFI error naming the op, never a crash; a csr
input that may hold unsorted or repeated columns is sorted and summed first). An all-dense
call with one result runs its plan's ``call`` and copies a small result into XLA's buffer,
or writes a large one there directly; sparse outputs are copied into their capacity-sized
buffers and padded (``spec.py``). On gpu (``_gpu``) XLA's device pointers are wrapped as
CuPy arrays, on the device holding them, and the kernels run on XLA's stream, fetched
through ``XLA_FFI_Stream_Get``, allocating from a capped pool per device (``_pool``). The
host waits for the device only for numbers it needs: the sizes a call with symbolic sizes
carries, and each sparse input's stored count and the boundary's verdict on its structure.
"""
from __future__ import annotations

import os
import threading
from typing import Any, Sequence

import numpy as np

from ..boundary import FULL, OURS, admit
from ..bridging import PARTS, aligned, arg_names, framework_gradient
from ..device import Device, allocating_on
from ..dispatch import plan_for
from ..errors import OperatorError, SparseFormatError
from ..gradients import call_gradient
from ..ndarray import NDArray
from ..ops.methods import attach_gradient_buffer
from ..sdk.csr import index_add
from ..tape import _scope
from ..tape import _state as tape_state
from ..validation import UNORDERED, csr_violation
from . import ffi
from .spec import ArgLayout, CallSpec, GradSpec, HvpSpec, JaxBridgeError, JvpSpec, dims_dtype, lookup, resolve

CPU = Device("cpu", 0)


def _struct_label(frame: ffi.CallFrame) -> str:
    try:
        return lookup(ffi.int_attr(frame, "call")).label
    except Exception:  # noqa: BLE001 - the error message still says where it came from
        return "sparse_ops.jax"


# ---- containers over buffers ------------------------------------------------------------------
def containers(layouts: Sequence[ArgLayout], parts: Sequence[Any], device: Device, check: bool = True,
               names: Sequence[str] = (), maps: list | None = None) -> list:
    """Our containers over component arrays laid out as ``layouts`` (capacity padding
    trimmed), through the boundary's full check unless ``check`` is False (our own outputs).
    A csr input that may hold unsorted or repeated columns (``ArgLayout.canonical`` False:
    JAX's BCSR default) and does is sorted and summed first (``sorted_and_summed``); then
    ``maps`` (when given) gets, per input, the position of each stored value in the summed
    structure (None for the others)."""
    out, k = [], 0
    for i, lay in enumerate(layouts):
        name = names[i] if i < len(names) else f"input {i}"
        n = PARTS[lay.stype]
        mapping = None
        try:
            p = list(parts[k:k + n])
            if lay.stype == "csr":
                nnz = int(p[2][-1]) if p[2].shape[0] else 0  # entries past it: padding
                if not 0 <= nnz <= p[0].shape[0]:
                    raise ValueError(f"indptr[-1] = {nnz} is outside 0..{p[0].shape[0]} (the stored values)")
                p[0], p[1] = p[0][:nnz], p[1][:nnz]
            elif lay.stype == "row_sparse":
                # padding: the trailing rows whose index is shape[0]; any other index out of
                # range stays among the stored rows, for the boundary's check to refuse
                real = device.xp.flatnonzero(p[1] != lay.shape[0])
                nnz = int(real[-1]) + 1 if real.shape[0] else 0
                p[0], p[1] = p[0][:nnz], p[1][:nnz]
            try:
                x = admit(lay.stype, p, lay.shape, device, FULL if check else OURS)
            except SparseFormatError:
                if not (check and lay.stype == "csr" and not lay.canonical
                        and csr_violation(p[1], p[2], lay.shape[1]) == UNORDERED):
                    raise
                p, mapping = sorted_and_summed(device, p, lay.shape[0])
                x = admit("csr", p, lay.shape, device, FULL)
            out.append(x)
        except (OperatorError, TypeError, ValueError) as exc:
            raise JaxBridgeError(f"argument {name!r} ({lay.stype}): {exc}") from exc
        if maps is not None:
            maps.append(mapping)
        k += n
    return out


def sorted_and_summed(device: Device, parts: Sequence[Any], rows: int) -> tuple[list, Any]:
    """A csr's ``(values, indices, indptr)`` with the columns of each row sorted and repeated
    columns summed (the structure otherwise valid), and the position of each original stored
    value in the result (how gradients go back to the caller's layout)."""
    xp = device.xp
    values, indices, indptr = parts
    row = xp.repeat(xp.arange(rows, dtype=indptr.dtype), xp.diff(indptr))
    order = xp.lexsort(xp.stack([indices, row]))
    r, c = row[order], indices[order]
    first = xp.ones(order.shape[0], dtype=bool)
    first[1:] = (r[1:] != r[:-1]) | (c[1:] != c[:-1])
    segment = xp.cumsum(first) - 1
    starts = xp.flatnonzero(first)
    summed = _segment_sum(device, values[order], segment, starts.shape[0])
    indptr_out = xp.zeros(rows + 1, dtype=indptr.dtype)
    xp.cumsum(xp.bincount(r[starts], minlength=rows), out=indptr_out[1:])
    mapping = xp.empty(order.shape[0], dtype=xp.intp)
    mapping[order] = segment
    return [summed, c[starts].astype(indices.dtype), indptr_out], mapping


def _segment_sum(device: Device, values: Any, segment: Any, n: int) -> Any:
    """Sums of ``values`` by ``segment`` (n segments), in ``values``' dtype, in the order of
    the values (no atomics on a gpu: the same sums every run)."""
    return index_add(device, device.xp.zeros((n,) + values.shape[1:], dtype=values.dtype), segment, values)


def _to_canonical(t: Any, mapping: Any, x: NDArray) -> Any:
    """A tangent laid out like a csr input as JAX passed it, moved onto its sorted and summed
    structure (``mapping``: see ``sorted_and_summed``); as it is when nothing moved."""
    if mapping is None:
        return t
    return _segment_sum(x.device, t[:mapping.shape[0]], mapping, x._data.shape[0])


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
    if spec.all_dense and not spec.mutated and len(rets) == 1 and device.xp is np:
        return _run_dense(spec, args, rets[0], device)
    inputs = containers(spec.ins, args, device, names=_arg_names(spec))
    states = rets[spec.n_out_parts:]
    if spec.mutated:
        inputs = _updatable(spec, inputs, states, device)
    plan = plan_for(spec.opdef, spec.inst, inputs)
    with _scope(False, spec.training):  # the flag fixed when the call was traced
        if spec.all_dense:  # dense results straight into XLA's buffers, on either device
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


_COPY_BELOW = 1 << 15  # bytes: a dense result this small is run by the plan's call and copied


def _run_dense(spec: CallSpec, args: Sequence[Any], ret: Any, device: Device) -> None:
    """``run_forward`` of an all-dense call with one result on the host: small results by the
    plan's ``call`` (its closure for a dense kernel: a few hundred nanoseconds) and one copy
    into XLA's buffer, large ones by ``execute`` writing there directly (no copy)."""
    # dtypes: held_dtype at trace time, and the buffers checked against them (ffi.BufferSpec)
    inputs = [NDArray(a, device) for a in args]
    plan = plan_for(spec.opdef, spec.inst, inputs)
    if tape_state.recording or tape_state.training != spec.training:  # never recorded here; the
        with _scope(False, spec.training):                                # flag fixed when traced
            return _run_dense(spec, args, ret, device)
    if ret.nbytes <= _COPY_BELOW:
        ret[...] = plan.call(inputs)._data
    else:
        plan.execute(inputs, NDArray(ret, device))


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


def _on_structure(x: NDArray, values: Any, device: Device) -> NDArray:
    """A container of ``x``'s shape and structure holding ``values`` (aligned with ``x``'s
    values component, capacity padding included): a cotangent or tangent of ``x``."""
    if x.stype == "default":
        return NDArray(values if values.dtype == x.dtype else values.astype(x.dtype), device)
    return x._with_values(values[:x._data.shape[0]].astype(x.dtype, copy=True), copy_aux=False)


def _zero_on_structure(x: NDArray, device: Device) -> NDArray:
    """Zeros with ``x``'s shape and structure (a cotangent nobody gave)."""
    return _on_structure(x, device.xp.zeros(x._data.shape, x.dtype), device)


def _write_aligned(dst: Any, g: NDArray | None, x: NDArray, mapping: Any = None) -> None:
    """Gradient (or tangent) ``g`` of ``x`` into ``dst``, laid out like ``x``'s values
    component as JAX passed it: dense, or one value per stored value with zeros past the
    true count; for a csr input sorted and summed on the way in (``mapping``), each value
    the one of the entry it was summed into."""
    if g is None:
        dst[...] = 0
        return
    a = aligned(g, x)
    if x.stype == "default":
        dst[...] = a
        return
    if mapping is not None:
        a = a[mapping]
    n = a.shape[0]
    dst[:n] = a
    dst[n:] = 0


def _cotangents(spec: CallSpec, outputs: list, given: Sequence[Any], device: Device) -> list:
    """One head gradient per output: the given cotangent of each tangent output (aligned with
    its values), zeros for the others (integer results)."""
    heads = [None] * len(outputs)
    for j, c in zip(spec.tangent_outs, given):
        heads[j] = _on_structure(outputs[j], c, device)
    return [h if h is not None else _zero_on_structure(o, device) for h, o in zip(heads, outputs)]


def run_backward(gspec: GradSpec, args: Sequence[Any], rets: Sequence[Any], device: Device) -> None:
    """The op's gradient rule: ``args`` are the inputs' components, the outputs' components
    and one cotangent per tangent output (dense, or aligned with a sparse output's values);
    ``rets`` one gradient per input that needs one (aligned with its values component)."""
    spec = gspec.fwd
    ni, no = spec.n_in_parts, spec.n_out_parts
    maps: list = []
    inputs = containers(spec.ins, args[:ni], device, names=_arg_names(spec), maps=maps)
    outputs = containers(spec.outs, args[ni:ni + no], device, check=False)
    out_grads = _cotangents(spec, outputs, args[ni + no:], device)
    grads = framework_gradient(spec.inst, out_grads, inputs, outputs, list(gspec.needs), face="JAX",
                               prefix=f"{spec.label}: ", error=JaxBridgeError)
    dsts = iter(rets)
    for g, x, need, mapping in zip(grads, inputs, gspec.needs, maps):
        if need:
            _write_aligned(next(dsts), g, x, mapping)


# ---- forward mode and second order, by our engine ---------------------------------------------------
def _in_graph(g: Any) -> bool:
    info = getattr(g, "_ag", None)
    return info is not None and info.needs_grad()


def _engine_error(s: Any, what: str, exc: Exception) -> JaxBridgeError:
    """The error of derivative call ``s`` (a ``JvpSpec`` or ``HvpSpec``) whose engine run failed."""
    return JaxBridgeError(f"{s.label}: {what} differentiates {s.fwd.opdef.label}'s gradient rule with the "
                          f"sparse-ops engine, which failed: {exc}")


def _pushed(s: Any, what: str, heads: list, variables: list, head_grads: list) -> list:
    """``autograd.grad`` of ``heads`` (those in the recorded graph) for ``variables`` with
    ``head_grads``; None for each variable when no head is in the graph. A head made by an
    op declared ``differentiable = False`` is refused naming it: the engine cannot see
    through it, and a zero would be a wrong answer, not a derivative."""
    from ..autograd import grad

    for h in heads:
        info = getattr(h, "_ag", None)
        if h is not None and info is not None and info.constant is not None:
            raise JaxBridgeError(
                f"{s.label}: {what} differentiates {s.fwd.opdef.label}'s gradient rule with the sparse-ops "
                f"engine, which cannot differentiate the rule's result, {info.constant}")
    kept = [(h, t) for h, t in zip(heads, head_grads) if h is not None and _in_graph(h)]
    if not kept:
        return [None] * len(variables)
    hs = [h for h, _ in kept]
    ts = [t if t.stype == h.stype or h.stype != "default" else t.tostype("default") for h, t in kept]
    return grad(hs, variables, head_grads=ts)


def run_jvp(jspec: JvpSpec, args: Sequence[Any], rets: Sequence[Any], device: Device) -> None:
    """The forward-mode derivative ``J t``: ``args`` are the inputs' and outputs' components
    and one tangent per perturbed input; ``rets`` one tangent per tangent output. The
    gradient rule ``u -> J^T u`` is linear in its head gradient ``u``; recorded by our
    engine on a zero ``u`` and differentiated in ``u`` against ``t``, it gives ``J t``."""
    spec = jspec.fwd
    ni, no = spec.n_in_parts, spec.n_out_parts
    maps: list = []
    inputs = containers(spec.ins, args[:ni], device, names=_arg_names(spec), maps=maps)
    outputs = containers(spec.outs, args[ni:ni + no], device, check=False)
    given = iter(args[ni + no:])
    tangents = [_on_structure(x, _to_canonical(next(given), m, x), device) if p else None
                for x, p, m in zip(inputs, jspec.perturbed, maps)]
    heads = [_zero_on_structure(o, device) for o in outputs]  # u: zero, and a variable where it moves
    us = [heads[j] for j in spec.tangent_outs]
    for u in us:
        attach_gradient_buffer(u)
    try:
        with _scope(True, None):
            grads = call_gradient(spec.inst, heads, inputs, outputs, list(jspec.perturbed), face="JAX",
                                  prefix=f"{spec.label}: ", error=JaxBridgeError)
        got = _pushed(jspec, "forward mode (jax.jvp)", [g if t is not None else None for g, t in zip(grads, tangents)],
                      us, tangents)
    except JaxBridgeError:
        raise
    except OperatorError as exc:
        raise _engine_error(jspec, "forward mode (jax.jvp)", exc) from exc
    for dst, g, j in zip(rets, got, spec.tangent_outs):
        _write_aligned(dst, g, outputs[j])


def run_hvp(hspec: HvpSpec, args: Sequence[Any], rets: Sequence[Any], device: Device) -> None:
    """The second derivative of ``<op(x), c>`` applied to the tangents ``t`` of the perturbed
    inputs, for the inputs in ``needs``: ``args`` are the inputs' and outputs' components,
    one cotangent ``c`` per tangent output and one tangent per perturbed input. Our engine
    records the op again, takes its gradient against ``c`` with ``create_graph``, and
    differentiates that against ``t`` (the matrix of second derivatives is symmetric)."""
    from ..autograd import grad

    spec = hspec.fwd
    if "random" in spec.opdef.resources:
        raise JaxBridgeError(f"{hspec.label}: {spec.opdef.label} draws random numbers, so running it again for "
                             "its second derivative would not reproduce this call; no second derivative")
    ni, no, nc = spec.n_in_parts, spec.n_out_parts, len(spec.tangent_outs)
    maps: list = []
    inputs = containers(spec.ins, args[:ni], device, names=_arg_names(spec), maps=maps)
    given_outputs = containers(spec.outs, args[ni:ni + no], device, check=False)
    cots = args[ni + no:ni + no + nc]
    given = iter(args[ni + no + nc:])
    tangents = [_on_structure(x, _to_canonical(next(given), m, x), device) if p else None
                for x, p, m in zip(inputs, hspec.perturbed, maps)]
    variables = inputs
    for x, p, n in zip(inputs, hspec.perturbed, hspec.needs):
        if p or n:
            attach_gradient_buffer(x)
    try:
        with _scope(True, None):
            plan = plan_for(spec.opdef, spec.inst, variables)
            outs = plan.call(variables)
            outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
            if len(outs) != len(given_outputs):
                raise JaxBridgeError(f"{hspec.label}: {spec.opdef.label} has hidden outputs; no second derivative")
            heads = [outs[j] for j in spec.tangent_outs]
            head_grads = [_on_structure(given_outputs[j], c, device) for j, c in zip(spec.tangent_outs, cots)]
            moved = [i for i, p in enumerate(hspec.perturbed) if p]
            firsts = grad(heads, [variables[i] for i in moved], head_grads=head_grads, create_graph=True)
        needed = [i for i, n in enumerate(hspec.needs) if n]
        got = _pushed(hspec, "the second derivative (jax.hessian, grad of grad)", list(firsts),
                      [variables[i] for i in needed], [tangents[i] for i in moved])
    except JaxBridgeError:
        raise
    except OperatorError as exc:
        raise _engine_error(hspec, "the second derivative (jax.hessian, grad of grad)", exc) from exc
    for dst, g, i in zip(rets, got, needed):
        _write_aligned(dst, g, inputs[i], maps[i])


def _host_buffers(frame: ffi.CallFrame) -> tuple[list, list]:
    """(arguments, results) of a call as NumPy arrays over XLA's memory, the arguments
    read-only: JAX arrays are immutable, so no kernel may write them."""
    args, rets = ffi.buffers(frame)
    for a in args:
        a.flags.writeable = False
    return args, rets


# ---- cpu: the frame read by address, buffers laid out by the spec --------------------------------------
def _values(layouts: Sequence[ArgLayout], mask: Sequence[bool] | None = None) -> list[tuple]:
    """(shape, dtype) of the values component of each layout (``mask`` marks which)."""
    return [lay.part_shapes()[0] for i, lay in enumerate(layouts) if mask is None or mask[i]]


def _parts(layouts: Sequence[ArgLayout]) -> list[tuple]:
    return [p for lay in layouts for p in lay.part_shapes()]


def buffer_layout(s: Any) -> tuple[list, list]:
    """(argument, result) buffers of the FFI call of spec ``s`` as ``ffi.BufferSpec``s (made
    once per spec): what the handler checks each call's buffers against before viewing them."""
    hit = getattr(s, "buffers", None)
    if hit is not None:
        return hit
    import jax

    if isinstance(s, CallSpec):
        args, rets = _parts(s.ins), _parts(s.outs) + _parts(s.states)
    else:
        f = s.fwd
        cots = [_values(f.outs)[j] for j in f.tangent_outs]
        fixed = _parts(f.ins) + _parts(f.outs)
        if isinstance(s, GradSpec):
            args, rets = fixed + cots, _values(f.ins, s.needs)
        elif isinstance(s, JvpSpec):
            args, rets = fixed + _values(f.ins, s.perturbed), cots
        else:
            args, rets = fixed + cots + _values(f.ins, s.perturbed), _values(f.ins, s.needs)
    # the dtypes XLA holds them in (float64 is float32 with x64 off)
    make = [[ffi.BufferSpec(shape, jax.dtypes.canonicalize_dtype(dt), writeable) for shape, dt in group]
            for group, writeable in ((args, False), (rets, True))]
    s.buffers = (make[0], make[1])
    return s.buffers


def _label(frame: ffi.Frame) -> str:
    try:
        return lookup(frame.call_id()).label
    except Exception:  # noqa: BLE001 - the error message still says where it came from
        return "sparse_ops.jax"


def _cpu(run: Any, kind: type) -> Any:
    """The cpu handler body for specs of class ``kind``: the spec by the call's id, NumPy
    views of XLA's buffers (checked against the spec's layout; arguments read-only: JAX
    arrays are immutable, so no kernel may write them), then ``run``."""
    def go(frame: ffi.Frame) -> None:
        s = lookup(frame.call_id())
        if not isinstance(s, kind):
            raise JaxBridgeError(f"{s.label}: called through a target for {kind.__name__}s")
        fwd = getattr(s, "fwd", s)
        if fwd.symbolic:  # exported for every size: the sizes it runs at come last
            sizes = dims_buffer(fwd)
            s = resolve(s, frame.last_argument(sizes).tolist())
            arg_specs, ret_specs = buffer_layout(s)
            args = frame.arrays(False, [*arg_specs, sizes])[:-1]
        else:
            arg_specs, ret_specs = buffer_layout(s)
            args = frame.arrays(False, arg_specs)
        run(s, args, frame.arrays(True, ret_specs), CPU)
    return go


def dims_buffer(spec: CallSpec) -> ffi.BufferSpec:
    """The buffer of the sizes a call with symbolic sizes carries last (``spec.dims_operand``),
    made once per spec."""
    hit = getattr(spec, "dims_spec", None)
    if hit is None:
        import jax

        hit = spec.dims_spec = ffi.BufferSpec((len(spec.dims),), jax.dtypes.canonicalize_dtype(dims_dtype()), False)
    return hit


# ---- gpu: XLA's device buffers as CuPy arrays, on XLA's stream ----------------------------------
def _device_arrays(frame: ffi.CallFrame) -> tuple[list, list, Any, Device]:  # pragma: no cover - needs a gpu
    """CuPy views of the call's argument and result buffers, XLA's stream, and the device
    holding the buffers (the device XLA runs the call on: device k's buffers on device k,
    not on whichever GPU is current in this thread)."""
    import cupy

    a, r = ffi.buffer_pointers(frame)
    held = [ptr for ptr, shape, dtype in (*a, *r) if ptr and int(np.prod(shape, dtype=np.int64))]
    device_id = (cupy.cuda.runtime.pointerGetAttributes(held[0]).device if held
                 else cupy.cuda.runtime.getDevice())

    def wrap(ptr: int, shape: tuple, dtype: np.dtype) -> Any:
        n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if n == 0:
            return cupy.empty(shape, dtype)
        mem = cupy.cuda.UnownedMemory(ptr, n, owner=None, device_id=device_id)
        return cupy.ndarray(shape, dtype, cupy.cuda.MemoryPointer(mem, 0))

    with cupy.cuda.Device(device_id):
        stream = cupy.cuda.ExternalStream(ffi.stream_of(frame))
        return [wrap(*x) for x in a], [wrap(*x) for x in r], stream, Device("gpu", device_id)


def _gpu_sizes(s: Any, args: list) -> tuple[Any, list]:  # pragma: no cover - needs a gpu
    """A call with symbolic sizes: the spec at the sizes it carries last (a few integers
    copied to the host), and the other arguments; as they are otherwise."""
    if not getattr(s, "fwd", s).symbolic:
        return s, args
    return resolve(s, args[-1].get().tolist()), args[:-1]


# XLA reserves most of a GPU's memory for itself (75% by default); what a handler allocates
# (temporaries, sparse results before they are copied into XLA's buffers) comes from a CuPy
# pool of its own per device, capped, so it neither grows CuPy's default pool beside XLA's
# nor takes more than its share of what XLA leaves.
POOL_FRACTION_VAR = "SPARSE_OPS_JAX_GPU_POOL_FRACTION"
DEFAULT_POOL_FRACTION = 0.1
_POOLS: dict[int, Any] = {}


def pool_limit(total_bytes: int, setting: str | None) -> int:
    """The byte cap of a handler pool on a device of ``total_bytes``: the fraction
    ``setting`` (the environment variable's text; ``DEFAULT_POOL_FRACTION`` when unset)."""
    if setting is None or not setting.strip():
        fraction = DEFAULT_POOL_FRACTION
    else:
        try:
            fraction = float(setting)
        except ValueError:
            fraction = -1.0
        if not 0.0 < fraction <= 1.0:
            raise JaxBridgeError(f"{POOL_FRACTION_VAR}={setting!r}: expected a fraction of the device's memory "
                                 "in (0, 1], e.g. 0.1")
    return int(total_bytes * fraction)


def _pool(device_id: int) -> Any:  # pragma: no cover - needs a gpu
    """The capped CuPy pool of the handlers on GPU ``device_id`` (made on first use)."""
    pool = _POOLS.get(device_id)
    if pool is None:
        import cupy

        with cupy.cuda.Device(device_id):
            total = cupy.cuda.runtime.memGetInfo()[1]
            pool = cupy.cuda.MemoryPool()
            pool.set_limit(size=pool_limit(total, os.environ.get(POOL_FRACTION_VAR)))
        pool = _POOLS.setdefault(device_id, pool)
    return pool


def _gpu(run: Any) -> Any:  # pragma: no cover - needs a gpu
    """The gpu handler body running ``run`` (``run_forward``, ``run_backward``, ``run_jvp``,
    ``run_hvp``): the spec by the call's id, CuPy views of XLA's device buffers, at the sizes
    a call with symbolic sizes carries, on XLA's stream and device, allocating from the
    device's capped handler pool."""
    def go(frame: ffi.CallFrame) -> None:
        import cupy

        spec = lookup(ffi.int_attr(frame, "call"))
        args, rets, stream, device = _device_arrays(frame)
        spec, args = _gpu_sizes(spec, args)
        pool = _pool(device.device_id)
        try:
            with allocating_on(device), stream, cupy.cuda.using_allocator(pool.malloc):
                run(spec, args, rets, device)
        except cupy.cuda.memory.OutOfMemoryError as exc:
            raise JaxBridgeError(f"{exc}: the bridge's gpu pool on gpu({device.device_id}) holds at most "
                                 f"{pool.get_limit()} bytes; raise {POOL_FRACTION_VAR} (a fraction of the "
                                 "device's memory) or lower XLA's share (XLA_PYTHON_CLIENT_MEM_FRACTION)") from exc
    return go


# the C handlers (kept alive here) and their addresses, and the FFI targets registered with them
_HANDLERS: dict[str, tuple[object, int]] = {}
_TARGETS: set[tuple[str, str]] = set()
_TLOCK = threading.Lock()


def _platforms() -> list[str]:
    import jax

    plats = ["cpu"]
    try:
        if any(d.platform == "gpu" for d in jax.devices()):  # pragma: no cover - needs a gpu
            plats.append("CUDA")
    except RuntimeError:  # pragma: no cover
        pass
    return plats


def target(name: str, kind: str = "") -> str:
    """The FFI target of op ``name``: its forward call (``kind`` empty), gradient rule
    (``"grad"``), forward-mode derivative (``"jvp"``) or second derivative (``"hvp"``),
    registered on first use for cpu (and CUDA where jax sees a gpu) with this module's
    handler of that kind."""
    import jax

    suffix = f"_{kind}" if kind else ""
    tname = f"sparse_ops_{name}{suffix}"
    for plat in _platforms():
        if (tname, plat) in _TARGETS:
            continue
        with _TLOCK:
            if (tname, plat) in _TARGETS:
                continue
            handler = ("cpu" if plat == "cpu" else "gpu") + suffix
            jax.ffi.register_ffi_target(tname, jax.ffi.pycapsule(address(handler)), platform=plat)
            _TARGETS.add((tname, plat))
    return tname


def address(kind: str) -> int:
    """The C address of handler ``kind``: ``cpu`` or ``gpu``, optionally followed by
    ``_grad`` (the gradient rule), ``_jvp`` (forward mode) or ``_hvp`` (second order)."""
    hit = _HANDLERS.get(kind)
    if hit is None:
        device, _, rule = kind.partition("_")
        run, spec_class = {"": (run_forward, CallSpec), "grad": (run_backward, GradSpec), "jvp": (run_jvp, JvpSpec),
                           "hvp": (run_hvp, HvpSpec)}[rule]
        if device == "cpu":
            hit = ffi.raw_handler(_cpu(run, spec_class), _label)
        else:
            hit = ffi.handler(_gpu(run), _struct_label)
        _HANDLERS[kind] = hit
    return hit[1]
