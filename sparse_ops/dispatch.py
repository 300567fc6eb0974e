"""The one invoke path: infer, choose a dispatch mode, allocate, run, record.

``invoke(opdef, inputs, params)`` memoises everything that depends only on the input
signature (op parameters, storage types, dtypes, shapes, device) in a ``Plan``, so a
repeated call costs a few dictionary look-ups plus the kernel.
"""
from __future__ import annotations

import contextlib
import warnings
from typing import Any, Sequence

import numpy as np

from . import alloc, faces
from .backward_op import backward_instance, backward_of
from .boundary import output_problem
from . import device as _dev
from . import settings as _settings
from .context import OpContext, holds_unset, mark_unset, release_workspace, workspace_mark
from .device import Device
from .dtypes import held_dtype
from .errors import OperatorError, SparseFormatError, StorageFallbackWarning
from .ndarray import (DENSE_CLASSES, STYPES, CSRNDArray, NDArray, RowSparseNDArray, bump_version, convert, kernel_form,
                      shares_memory, take_storage, unwritable)
from .registry import Op, OpDef, get_op
from .tape import _record, _scope, _state, check_not_in_graph
from .validation import normalize_shape

REQS = ("write", "inplace", "add", "null")
_MAX_PLANS = 2048


class InferenceError(OperatorError, ValueError):
    """An operator's shape, dtype or storage-type rule refused its inputs."""


# ---- plans -------------------------------------------------------------------------------------
# dispatch modes whose kernel takes containers (storage-aware), and those that densify the inputs first
STORAGE_AWARE = ("fcompute_ex", "fallback_ex")
DENSIFIED = ("fallback", "fallback_ex")
_HOST = contextlib.nullcontext()  # what the kernel of a host call enters: nothing


class Plan:
    """Everything decided for one input signature, and how to run it.

    ``execute(inputs, out, req)`` is the one way an op runs, on every face (native calls
    through ``call``; the torch bridge's eager, registered and compiled forms; the JAX
    Python handler; the MXNet face, C library ops and Dask tasks through ``invoke``): the
    plan's kernel on its inputs, outputs allocated or taken from ``out``, the checks the
    plan decided on what the kernel produced; every output (visible and hidden) returned.
    ``call(inputs, out, req)`` is the native operator call: execute, record on the tape when
    autograd records, return the visible outputs. For a dense kernel on host memory with one
    output (the most common call of all) ``call`` is a short closure built once per plan,
    which skips what that signature makes unnecessary (``out``, sparse outputs, checks of
    trusted dense results) and nothing else. Such a plan also has ``arrays(xs, training)``,
    the same kernel on plain NumPy arrays, returning the output array and recording nothing:
    for faces that hold arrays and record calls in their own autograd (the torch bridge's
    repeated all-dense calls); None on every other plan.
    """

    __slots__ = ("opdef", "inst", "device", "in_stypes", "out_shapes", "out_dtypes", "out_stypes",
                 "mode", "kernel", "contexts", "nout", "nvis", "kernel_stypes", "uses_workspace",
                 "trusted", "debug", "check", "kept", "mutated", "call", "arrays")

    def describe(self) -> dict[str, Any]:
        fn = self.kernel
        return {
            "op": self.opdef.name,
            "in_stypes": list(self.in_stypes),
            "out_stypes": list(self.out_stypes),
            "dispatch_mode": self.mode,
            "kernel": f"{fn.__qualname__}" + (" (on densified inputs)" if self.mode in DENSIFIED else ""),
            "device": str(self.device),
            "out_shapes": [tuple(s) for s in self.out_shapes],
            "out_dtypes": [np.dtype(d).name for d in self.out_dtypes],
        }

    def execute(self, inputs: Sequence[NDArray], out: Any = None, req: str = "write") -> list[NDArray]:
        """Run the planned kernel; returns every output (visible and hidden)."""
        device, mode = self.device, self.mode
        if self.mutated or out is not None:
            _check_updatable(self, inputs, out)
            for i in self.mutated:  # written in place: a recorded call that kept them sees it
                x = inputs[i]
                bump_version(x)
        if self.debug:  # debug mode: indices changed in place since validation must not reach the kernel
            _recheck_inputs(self, inputs)
        if mode in DENSIFIED:
            given = inputs
            inputs = [x if x.stype == "default" else _densified(self, i, x) for i, x in enumerate(inputs)]
        if out is None:
            targets = None
            results = [_allocated(self, i) for i in range(self.nout)]
        else:
            targets = [None] * self.nout
            targets[:self.nvis] = given_out = _as_list(out, self.nvis, self.opdef)
            if any(t.__class__._kernel_class is not None for t in given_out):
                targets[:self.nvis] = [kernel_form(t) for t in given_out]  # see NDArray._kernel_class
            else:
                given_out = None
            for i, (t, dt, shape) in enumerate(zip(targets, self.out_dtypes, self.out_shapes)):
                if t is None:
                    continue
                if tuple(t.shape) != tuple(shape):  # NumPy's rule for out=: the result's shape, no broadcasting
                    raise OperatorError(f"{self.opdef.label}: cannot write output {i} of shape {tuple(shape)} into "
                                        f"out= of shape {tuple(t.shape)} (out= must have the output's shape)")
                if t.dtype != dt and not np.can_cast(dt, t.dtype, "same_kind"):
                    raise OperatorError(f"{self.opdef.label}: cannot write output {i} ({dt.name}) into out= of "
                                        f"dtype {t.dtype.name} (NumPy's same_kind casting rule)")
            for t in (*targets[:self.nvis], *(given_out or ())):  # written in place: a recorded call that
                bump_version(t)                                       # kept them sees it
            direct = not self.debug  # debug mode marks outputs (below): never the caller's (it may be an input)
            aliased = not self.inst.out_may_alias
            results = [t if direct and _direct(t, s, shape, dt, device, req) and not (aliased and _aliases(t, inputs))
                       else _allocated(self, i)
                       for i, (t, s, shape, dt) in enumerate(zip(targets, self.kernel_stypes, self.out_shapes,
                                                                self.out_dtypes))]
        if self.debug:
            for r in results:
                if r.stype == "default":
                    mark_unset(r._data)
        if self.uses_workspace:
            mark = workspace_mark(device)
        state = _state
        ctx = self.contexts[state.training]
        recording = state.recording
        try:
            # a gpu kernel, built-in or plugin, runs with its call's device current (CuPy's
            # allocations, its launches), never on whichever GPU happened to be current
            with _dev.allocating_on(device) if device.device_type == "gpu" else _HOST:
                if mode in STORAGE_AWARE:
                    # a storage-aware kernel may call operators (an MXNet-form custom op's forward
                    # does): they are its own steps, not nodes of the caller's graph
                    state.recording = False
                    ret = self.kernel(self.inst, ctx, *inputs, *results)
                else:
                    ret = self.kernel(self.inst, ctx, *[x._data for x in inputs], *[r._data for r in results])
        except Exception as exc:
            raise _kernel_error(self, exc)
        finally:
            state.recording = recording
            if self.uses_workspace:
                release_workspace(mark)
        if ret is not None and not self.trusted:
            _check_returned(self, ret, results)
        if self.check:
            _check_outputs(self, results)
        if mode in DENSIFIED:
            for i in self.mutated:  # the kernel updated a densified copy: the caller's array gets it
                if given[i] is not inputs[i]:
                    given[i][:] = inputs[i]
            if mode == "fallback":  # the dense kernel's outputs, cast to the planned storage types
                results = [r if s == "default" else convert(r, s) for r, s in zip(results, self.out_stypes)]
        if targets is not None:
            _store(targets, results, req)
            if given_out is not None:  # the caller's arrays get what their kernel forms received
                for i, t in enumerate(given_out):
                    take_storage(t, targets[i])
                    if results[i] is targets[i]:
                        results[i] = t
        return results

    def call_any(self, inputs: Sequence[NDArray], out: Any = None, req: str = "write") -> Any:
        """The operator call for any plan and any ``out``/``req``: run, record, visible outputs."""
        if req != "write":
            if req not in REQS:
                raise OperatorError(f"{self.opdef.label}: req must be one of {REQS}, got {req!r}")
            if out is not None and req == "null":
                return out
        recording = _state.recording
        if recording and req == "add" and self.opdef.differentiable and any(
                x._ag is not None and x._ag.needs_grad() for x in inputs):
            raise OperatorError(f"{self.opdef.label}: req='add' is not recorded by autograd (the gradient would "
                                "read the buffer's sum, not this call's result); write out += the call's result, "
                                "or make the call outside autograd.record()")
        results = self.execute(inputs, out, req)
        if recording:
            _record(self, inputs, results)
        return results[0] if self.nvis == 1 else results[:self.nvis]


def _host_dense_call(plan: Plan) -> Any:
    """The short ``call`` of a plan whose kernel is dense, on host memory, with one output and
    no workspace: allocate, run, wrap, record. Anything else (``out=``, ``req``) takes
    ``call_any``."""
    kernel, inst, contexts, device = plan.kernel, plan.inst, plan.contexts, plan.device
    shape, dtype = plan.out_shapes[0], plan.out_dtypes[0]
    general, trusted, state, new = plan.call_any, plan.trusted, _state, object.__new__
    empty = alloc.empty if alloc.wants_alignment(shape, dtype) else np.empty

    def call(inputs: Sequence[NDArray], out: Any = None, req: str = "write") -> Any:
        if out is not None or req != "write":
            return general(inputs, out, req)
        try:
            a = empty(shape, dtype)
        except (ValueError, MemoryError) as exc:
            raise _allocation_error(plan, 0, exc) from None
        try:
            if len(inputs) == 2:
                ret = kernel(inst, contexts[state.training], inputs[0]._data, inputs[1]._data, a)
            else:
                ret = kernel(inst, contexts[state.training], *[x._data for x in inputs], a)
        except Exception as exc:
            raise _kernel_error(plan, exc)
        result = new(NDArray)  # NDArray(a, device) less its __init__'s checks: a is our own ndarray
        result._data, result._device, result._ag = a, device, None
        if ret is not None and not trusted:
            _check_returned(plan, ret, [result])
        if state.recording:
            _record(plan, inputs, [result])
        return result

    return call


_TRACERS = ("torch", "jax", "jaxlib")  # packages whose exceptions a traced rule lets through


def _infer(opdef: OpDef, inst: Op, what: str, values: list, nout: int) -> list:
    rule = getattr(inst, f"infer_{what}")
    try:
        answer = rule(*values)
        if what == "shape" and _one_bare_shape(answer):
            raise InferenceError(f"{opdef.label}: infer_shape must return a list with one shape per output, got "
                                 f"{answer!r}, a single shape; return [{answer!r}]")
        result = list(answer)
    except OperatorError:
        raise
    except (TypeError, ValueError, IndexError) as exc:  # the rule's own refusal of these inputs
        raise InferenceError(f"{opdef.label}: {what.replace('_', ' ')} inference failed: {exc}") from None
    except Exception as exc:  # a slip in the rule (a KeyError, a RuntimeError): named, with its cause
        if type(exc).__module__.split(".")[0] in _TRACERS:  # a tracer's own signal (a guard on a
            raise                                           # data-dependent size): the tracer handles it
        raise InferenceError(f"{opdef.label}: infer_{what} raised {type(exc).__name__}: {exc}") from exc
    if len(result) != nout:
        raise InferenceError(f"{opdef.label}: infer_{what} returned {len(result)} values for {nout} outputs")
    return result


def _one_bare_shape(answer: Any) -> bool:
    """Whether a shape rule's answer is a tuple of ints: one shape where a list of them (one
    per output) belongs (``return x`` for ``return [x]``)."""
    return answer.__class__ is tuple and len(answer) > 0 and all(
        isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in answer)


def infer_shapes(opdef: OpDef, inst: Op, in_shapes: Sequence[Any], traced: bool = False) -> list[tuple]:
    """The output shapes the op's shape rule infers from ``in_shapes``, each checked as
    non-negative ints (an ``InferenceError`` naming the op otherwise). ``traced``: the shapes
    may hold a tracer's symbolic sizes (torch.compile's, jax.export's), kept as they are;
    the concrete entries are checked. Every face plans with this."""
    shapes = _infer(opdef, inst, "shape", list(in_shapes), inst.output_count())
    return [_output_shape(opdef, i, s, traced) for i, s in enumerate(shapes)]


def infer_dtypes(opdef: OpDef, inst: Op, in_dtypes: Sequence[np.dtype]) -> list[np.dtype]:
    """The output dtypes the op's type rule infers from ``in_dtypes``, each one the library
    holds or an input's (``_output_dtype``). Every face plans with this."""
    in_dtypes = list(in_dtypes)
    return [_output_dtype(opdef, i, d, in_dtypes)
            for i, d in enumerate(_infer(opdef, inst, "type", in_dtypes, inst.output_count()))]


def _output_shape(opdef: OpDef, i: int, shape: Any, traced: bool = False) -> tuple:
    """An output shape from the op's rule, as non-negative ints (a rule of C or Python code
    may answer anything). ``traced``: entries that are no integer (a text, a float, None)
    or negative are refused, the rest kept as they are: converting a symbolic size to an int, as the
    full check does, would fix it to this call's value (Dynamo sees a SymInt as an int);
    the call itself then plans with concrete sizes, fully checked."""
    try:
        if traced and not isinstance(shape, (str, bytes)):
            dims = tuple(shape)
            for d in dims:
                if d is None or isinstance(d, (bool, np.bool_, float, np.floating, str, bytes)):
                    raise TypeError(f"shape entries must be integers, got {shape!r}")
                if d < 0:  # (a symbolic size's sign is a guard, not its value)
                    raise TypeError(f"shape entries must be non-negative, got {shape!r}")
            return dims
        return normalize_shape(shape)
    except (SparseFormatError, TypeError) as exc:
        raise InferenceError(f"{opdef.label}: infer_shape gave output {i} the shape {shape!r}: {exc}") from None


def _output_dtype(opdef: OpDef, i: int, dtype: Any, in_dtypes: list) -> np.dtype:
    """An output dtype from the op's rule: one the library holds (the one dtype policy of
    every face: a plugin's rule may answer int8, which nothing else would take, or no dtype
    at all), or an input's (a face holding more dtypes, MXNet's int8, admitted it)."""
    try:
        return held_dtype(dtype)
    except TypeError as exc:
        try:
            if np.dtype(dtype) in in_dtypes:
                return np.dtype(dtype)
        except TypeError:
            pass
        raise InferenceError(f"{opdef.label}: infer_type gave output {i} a dtype the library does not hold: {exc}") \
            from None


def choose_dispatch(opdef: OpDef, device: Device, in_stypes: tuple[str, ...],
                    out_stypes: Sequence[str]) -> tuple[str, Any]:
    """(dispatch mode, kernel) for these storage types: a storage-aware kernel if one
    matches, the dense kernel when everything is dense, else the dense kernel on densified
    inputs (``fallback``), or, for an op without one, the storage-aware kernel declared for
    dense inputs on densified inputs (``fallback_ex``: its outputs keep the storage types it
    makes, a backward kernel's row_sparse gradient say)."""
    dev = device.device_type
    fn = opdef.fcompute_ex.get((dev, in_stypes))  # a kernel declared for exactly these storage types
    if fn is not None:
        return "fcompute_ex", fn
    dense = opdef.fcompute.get(dev)
    all_dense = all(s == "default" for s in in_stypes) and all(s == "default" for s in out_stypes)
    if dense is not None and all_dense:
        return "fcompute", dense
    fn = _wildcard(opdef, dev, in_stypes)
    if fn is not None:
        return "fcompute_ex", fn
    if dense is not None:
        return "fallback", dense
    dense_in = ("default",) * len(in_stypes)
    fn = opdef.fcompute_ex.get((dev, dense_in)) or _wildcard(opdef, dev, dense_in)
    if fn is not None:
        return "fallback_ex", fn
    raise OperatorError(
        f"{opdef.label} has no kernel for device {device} and input storage types "
        f"{list(in_stypes)} (kernels: {_kernel_list(opdef)})"
    )


def _wildcard(opdef: OpDef, dev: str, in_stypes: tuple[str, ...]) -> Any:
    """The storage-aware kernel a wildcard declaration ("*" entries, or ("...",)) gives these
    input storage types on device type ``dev``, or None."""
    for (d, pattern), f in opdef.fcompute_ex.items():
        if d == dev and (pattern == ("...",) or len(pattern) == len(in_stypes) and all(
                p == "*" or p == s for p, s in zip(pattern, in_stypes))):
            return f
    return None


def _kernel_list(opdef: OpDef) -> str:
    items = [f"{d} dense" for d in opdef.fcompute] + [f"{d} {','.join(s)}" for d, s in opdef.fcompute_ex]
    return "; ".join(items) or "none"


_warned: set = set()


def _warn_fallback(plan: Plan) -> None:
    if not _settings.env_flag("SPARSE_OPS_STORAGE_FALLBACK_LOG_VERBOSE", True):
        return
    key = (plan.opdef.name, plan.in_stypes, tuple(plan.out_stypes), plan.device)
    if key in _warned:
        return
    _warned.add(key)
    ran = ("running the dense kernel and casting the outputs to" if plan.mode == "fallback"
           else "running the kernel declared for dense inputs, whose outputs are")
    warnings.warn(
        f"{plan.opdef.label}: no storage-aware kernel for input storage types "
        f"{list(plan.in_stypes)} on {plan.device}; densifying the inputs, {ran} {list(plan.out_stypes)}. "
        "Set SPARSE_OPS_STORAGE_FALLBACK_LOG_VERBOSE=0 to silence this.",
        StorageFallbackWarning, stacklevel=4,
    )


def _device_of(opdef: OpDef, inst: Op, inputs: Sequence[NDArray]) -> Device:
    if inputs:
        dev = inputs[0]._device
        for x in inputs[1:]:  # (cpu(0) and cpu(1) are one memory: MXNet mixes them, giving the first's)
            if x._device is not dev and not (x._device.device_type == dev.device_type == "cpu"):
                raise OperatorError(
                    f"{opdef.label}: inputs live on different devices "
                    f"({', '.join(str(y._device) for y in inputs)}); move them with .to(device) "
                    "(MXNet face: .as_in_context(ctx))"
                )
        return dev
    dev = getattr(inst, "device", None)
    return dev if isinstance(dev, Device) else _dev.current_device()


def infer_stypes(opdef: OpDef, inst: Op, in_stypes: list, out_shapes: Sequence[tuple] | None) -> list:
    """The output storage types the op's rule infers from ``in_stypes``, for outputs of
    ``out_shapes`` (None: not known yet). Storage rules speak of matrices: an output whose
    shape a sparse layout cannot hold (a csr that is not 2-d, a 0-d row_sparse: ``dot`` of a
    1-d vector and a csr) is dense. Every face plans with this."""
    stypes = _infer(opdef, inst, "storage_type", in_stypes, inst.output_count())
    for s in stypes:
        if s not in STYPES:
            raise InferenceError(f"{opdef.label}: infer_storage_type returned unknown storage type {s!r} "
                                 f"(one of {', '.join(STYPES)})")
    return stypes if out_shapes is None else fitted_stypes(stypes, out_shapes)


def fitted_stypes(stypes: Sequence[str], out_shapes: Sequence[tuple]) -> list:
    """``stypes`` with each one that its output's shape cannot hold (a csr that is not 2-d,
    a 0-d row_sparse) made dense: the rule ``infer_stypes`` applies, for a face that learns
    the shapes later (a traced call's symbolic ones: only their lengths count)."""
    return [("default" if (s == "csr" and len(shape) != 2) or (s == "row_sparse" and not len(shape)) else s)
            for s, shape in zip(stypes, out_shapes)]


def make_plan(opdef: OpDef, inst: Op, inputs: Sequence[NDArray], debug: bool | None = None) -> Plan:
    """The plan of one call (``plan_for`` memoises them). ``debug``: check an untrusted
    kernel's outputs as debug mode does (values it never wrote found), whatever
    ``SPARSE_OPS_BOUNDSCHECK`` says (``opcheck`` asks for it); None follows the setting."""
    if len(inputs) != len(opdef.arguments) and not opdef.variadic:
        raise OperatorError(
            f"{opdef.label} takes {len(opdef.arguments)} input(s) ({', '.join(opdef.arguments)}), "
            f"got {len(inputs)}"
        )
    device = _device_of(opdef, inst, inputs)
    device.xp  # raises DeviceUnavailableError early
    in_stypes = tuple(x.stype for x in inputs)
    plan = Plan()
    plan.opdef, plan.inst, plan.device, plan.in_stypes = opdef, inst, device, in_stypes
    plan.nout, plan.nvis = inst.output_count(), inst.visible_output_count()
    plan.out_shapes = infer_shapes(opdef, inst, [x.shape for x in inputs])
    plan.out_dtypes = infer_dtypes(opdef, inst, [x.dtype for x in inputs])
    plan.out_stypes = infer_stypes(opdef, inst, list(in_stypes), plan.out_shapes)
    plan.mode, plan.kernel = choose_dispatch(opdef, device, in_stypes, plan.out_stypes)
    # how hard the outputs are checked (see _check_outputs): our own kernels cheaply, others
    # more, and in debug mode (SPARSE_OPS_BOUNDSCHECK=1) fully, with unset values detected
    plan.trusted = plan.kernel in opdef.trusted_kernels
    plan.debug = (_settings.BOUNDSCHECK if debug is None else debug) and not plan.trusted
    plan.check = plan.mode in STORAGE_AWARE or plan.debug
    plan.contexts = (OpContext(device, False, opdef, plan.debug), OpContext(device, True, opdef, plan.debug))
    # storage types the kernel itself produces: dense ones when it runs on densified inputs
    plan.kernel_stypes = ["default"] * plan.nout if plan.mode == "fallback" else list(plan.out_stypes)
    plan.uses_workspace = "workspace" in opdef.resources
    plan.mutated = tuple(i for i, a in enumerate(opdef.arguments) if a in opdef.mutate and i < len(inputs))
    # what the tape keeps of each recorded call: (input positions or None for all, output positions)
    plan.kept = inst.kept_for_backward() if opdef.differentiable else ((), ())
    host_dense = (plan.mode == "fcompute" and device.xp is np and not plan.uses_workspace
                  and not plan.debug and plan.nout == 1 and not plan.mutated)
    ufunc = host_dense and getattr(plan.kernel, "applies_ufunc", False) and _ufunc_gives_plan(plan, inputs)
    if ufunc:
        plan.call = _host_ufunc_call(plan)
    else:
        plan.call = _host_dense_call(plan) if host_dense else plan.call_any
    plan.arrays = _host_arrays_call(plan, ufunc) if host_dense else None
    if any(x.__class__._kernel_class is not None for x in inputs):
        plan.call = _kernel_form_call(plan)
    return plan


def _kernel_form_call(plan: Plan) -> Any:
    """The ``call`` of a plan with an input whose class shows its components differently
    (``NDArray._kernel_class``): kernels, the tape and gradient rules get each such input's
    ``kernel_form``, and an input the op updates gets back what its form received."""
    general, mutated = plan.call_any, plan.mutated

    def call(inputs: Sequence[NDArray], out: Any = None, req: str = "write") -> Any:
        forms = [kernel_form(x) for x in inputs]
        try:
            return general(forms, out, req)
        finally:
            for i in mutated:
                take_storage(inputs[i], forms[i])

    return call


def _ufunc_gives_plan(plan: Plan, inputs: Sequence[NDArray]) -> bool:
    """Whether ``inst.ufunc(*inputs)`` returns an array of the planned dtype and shape
    (NumPy's own dtype rule can differ from the op's ``infer_type``)."""
    if len(inputs) not in (1, 2) or not plan.out_shapes[0]:  # a ufunc gives 0-d results as scalars
        return False
    probe = plan.inst.ufunc(*[np.zeros(1, dtype=x.dtype) for x in inputs])
    return (probe.dtype == plan.out_dtypes[0]
            and np.broadcast_shapes(*[x.shape for x in inputs]) == plan.out_shapes[0])


def _host_ufunc_call(plan: Plan) -> Any:
    """The ``call`` of a plan whose dense kernel ``applies_ufunc``: the ufunc's own result is
    the output. Anything else (``out=``, ``req``) takes ``call_any``."""
    ufunc, device, general, state, new = plan.inst.ufunc, plan.device, plan.call_any, _state, object.__new__
    binary = len(plan.in_stypes) == 2

    def call(inputs: Sequence[NDArray], out: Any = None, req: str = "write") -> Any:
        if out is not None or req != "write":
            return general(inputs, out, req)
        try:
            a = ufunc(inputs[0]._data, inputs[1]._data) if binary else ufunc(inputs[0]._data)
        except Exception as exc:
            raise _kernel_error(plan, exc)
        if not a.flags.c_contiguous:  # NumPy follows the inputs' layout; outputs are row-major
            a = np.ascontiguousarray(a)
        result = new(NDArray)  # as in _host_dense_call
        result._data, result._device, result._ag = a, device, None
        if state.recording:
            _record(plan, inputs, [result])
        return result

    return call


def _host_arrays_call(plan: Plan, ufunc: bool) -> Any:
    """``plan.arrays(xs, training)`` of a host dense plan: what its short ``call`` runs (the
    ufunc, or allocate and run the kernel with the context of the training flag ``training``,
    then the check of what an untrusted kernel returned), on the NumPy arrays ``xs`` rather
    than containers; returns the output array and records nothing."""
    kernel, inst, contexts, trusted = plan.kernel, plan.inst, plan.contexts, plan.trusted
    if ufunc:
        apply = inst.ufunc

        def ufunc_arrays(xs: Sequence[Any], training: bool) -> Any:
            try:
                a = apply(*xs)
            except Exception as exc:
                raise _kernel_error(plan, exc)
            return a if a.flags.c_contiguous else np.ascontiguousarray(a)  # outputs are row-major

        return ufunc_arrays
    shape, dtype = plan.out_shapes[0], plan.out_dtypes[0]
    empty = alloc.empty if alloc.wants_alignment(shape, dtype) else np.empty

    def kernel_arrays(xs: Sequence[Any], training: bool) -> Any:
        try:
            a = empty(shape, dtype)
        except (ValueError, MemoryError) as exc:
            raise _allocation_error(plan, 0, exc) from None
        try:
            ret = kernel(inst, contexts[training], *xs, a)
        except Exception as exc:
            raise _kernel_error(plan, exc)
        if ret is not None and not trusted:
            _check_returned(plan, ret, [NDArray(a, plan.device)])
        return a

    return kernel_arrays


def plan_key(inst: Op, inputs: Sequence[NDArray]) -> tuple:
    """What a plan depends on: the parameters and each input's class (storage type),
    device, dtype and shape (all fixed for a container's lifetime). A dense array's shape is
    read off its values rather than through the property: this runs on every call."""
    n = len(inputs)
    if n == 2:  # the common arities spelled out: this runs on every call
        a, b = inputs
        ca, cb = a.__class__, b.__class__
        return (inst, ca, a._device, a._data.dtype, a._data.shape if ca in DENSE_CLASSES else a.shape,
                cb, b._device, b._data.dtype, b._data.shape if cb in DENSE_CLASSES else b.shape)
    if n == 1:
        a = inputs[0]
        ca = a.__class__
        return (inst, ca, a._device, a._data.dtype, a._data.shape if ca in DENSE_CLASSES else a.shape)
    if n == 0:  # the device then comes from a parameter or the current default
        return (inst, _dev.current_device())
    key = [inst]
    for x in inputs:
        key += (x.__class__, x._device, x._data.dtype, x.shape)
    return tuple(key)


# ---- running -----------------------------------------------------------------------------------
def _empty_output(stype: str, shape: tuple, dtype: np.dtype, device: Device) -> NDArray:
    if stype == "default" and device.device_type == "cpu":
        return NDArray(alloc.empty(shape, dtype), device)
    xp = device.xp
    with _dev.allocating_on(device):
        if stype == "default":
            return NDArray(xp.empty(shape, dtype=dtype), device)
        if stype == "csr":
            return CSRNDArray._trusted(xp.empty(0, dtype), xp.empty(0, np.int64), xp.zeros(shape[0] + 1, np.int64),
                                       shape, device)
        return RowSparseNDArray._trusted(xp.empty((0, *shape[1:]), dtype), xp.empty(0, np.int64), shape, device)


def _recheck_inputs(plan: Plan, inputs: Sequence[NDArray]) -> None:
    """Under ``SPARSE_OPS_BOUNDSCHECK=1``, every sparse input's full check again before a
    kernel we do not trust reads it: index arrays shared with NumPy may have been written
    since the container was validated, and a C kernel has no bounds checks of its own."""
    for i, x in enumerate(inputs):
        if x.stype != "default":
            try:
                x.check_format(full_check=True)
            except SparseFormatError as exc:
                name = plan.opdef.arguments[i] if i < len(plan.opdef.arguments) else f"input {i}"
                raise SparseFormatError(f"{plan.opdef.label}: argument {name!r} ({x.stype}): {exc} (found by "
                                        "SPARSE_OPS_BOUNDSCHECK=1's check of the inputs before the kernel: its "
                                        "arrays were written since it was validated)") from None


def _densified(plan: Plan, i: int, x: NDArray) -> NDArray:
    """Input ``i`` densified for a fallback; one too large for memory is refused naming the op,
    the argument and the way out (a kernel for its storage type)."""
    try:
        return convert(x, "default")
    except MemoryError as exc:
        name = plan.opdef.arguments[i] if i < len(plan.opdef.arguments) else f"input {i}"
        raise OperatorError(f"{plan.opdef.label}: no kernel for input storage types {list(plan.in_stypes)} on "
                            f"{plan.device}, and the fallback cannot densify argument {name!r} ({x.stype}, shape "
                            f"{x.shape}, {x.dtype}): {type(exc).__name__}: {exc}") from None


def _allocated(plan: Plan, i: int) -> NDArray:
    """A new container for output ``i`` as planned."""
    try:
        return _empty_output(plan.kernel_stypes[i], plan.out_shapes[i], plan.out_dtypes[i], plan.device)
    except (ValueError, MemoryError) as exc:
        raise _allocation_error(plan, i, exc) from None


def _allocation_error(plan: Plan, i: int, exc: Exception) -> OperatorError:
    """An output the op's own shape rule sized past what memory can hold, named. (NumPy's
    MemoryError names the padded buffer it asked for, not the output: it is not quoted.)"""
    why = "MemoryError: not enough memory" if isinstance(exc, MemoryError) else f"{type(exc).__name__}: {exc}"
    return OperatorError(f"{plan.opdef.label}: output {i} of shape {plan.out_shapes[i]} "
                         f"({plan.out_dtypes[i].name}, {plan.kernel_stypes[i]}) from the op's shape rule cannot be "
                         f"allocated: {why}")


def _as_list(out: Any, n: int, opdef: OpDef) -> list:
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    if len(outs) != n:
        raise OperatorError(f"{opdef.label}: out= needs {n} array(s), got {len(outs)}")
    for o in outs:
        if not isinstance(o, NDArray):
            raise OperatorError(f"{opdef.label}: out= takes NDArrays, got {type(o).__name__}")
        if o._ag is not None:
            check_not_in_graph(o)
    return outs


def _direct(o: NDArray | None, stype: str, shape: tuple, dtype: np.dtype, device: Device, req: str) -> bool:
    """Whether a kernel may write straight into the caller's ``out`` container."""
    if o is None or req not in ("write", "inplace") or o.stype != stype or o._device is not device:
        return False
    if o.shape != shape or o.dtype != dtype:
        return False
    return stype != "default" or o._data.flags.c_contiguous


def _aliases(t: NDArray, inputs: Sequence[NDArray]) -> bool:
    """Whether an ``out=`` array is one of the inputs or may share memory with one (a kernel
    writing into it could overwrite values it has still to read)."""
    mine = _components(t)
    for x in inputs:
        if x is t:
            return True
        for a in _components(x):
            for b in mine:
                if shares_memory(a, b):
                    return True
    return False


def _components(x: NDArray) -> tuple:
    return (x._data,) if x.stype == "default" else (x._data, *x._aux())


def _check_outputs(plan: Plan, results: list[NDArray]) -> None:
    """Check what a kernel produced before anything else sees it (an ``OperatorError``
    naming the op, its plugin, the kernel and the output otherwise).

    After our own storage-aware kernels: the O(1) structure checks of sparse outputs
    (lengths, ``indptr`` length and ends). After any other kernel (plugins, C libraries,
    MXNet-form ops): every output's arrays are of the device's array module with the
    inferred dtype (integer indices) and shape, and sparse outputs get the full O(nnz)
    validation (index ranges, sorted unique indices, monotone ``indptr``): a producer we do
    not trust never hands a malformed array to the next kernel; in debug mode
    (``SPARSE_OPS_BOUNDSCHECK=1``) also no value left unset (``context.mark_unset``).
    """
    if plan.trusted:
        for i, r in enumerate(results):
            if r.stype != "default":
                try:
                    r.check_format(full_check=False)
                except SparseFormatError as exc:
                    raise _output_error(plan, i, f"a malformed {r.stype} output", str(exc)) from None
        return
    for i, r in enumerate(results):
        problem = _output_problem(plan, i, r)
        if problem is not None:
            raise _output_error(plan, i, *problem)


def _output_error(plan: Plan, i: int, what: str, detail: str) -> OperatorError:
    names = plan.inst.output_names()
    name = f" ({names[i]!r})" if i < len(names) else ""
    where = getattr(plan.opdef.cls, "c_library", None)  # a C library's op: its kernel is the library's
    who = f"{where}: the kernel" if where else f"{plan.opdef.label}: kernel {plan.kernel.__qualname__}"
    return OperatorError(f"{who} produced {what} {i}{name}: {detail}")


def _output_problem(plan: Plan, i: int, r: NDArray) -> tuple[str, str] | None:
    """(what, detail) of the first thing wrong with output ``i`` of a kernel that is not ours
    (``boundary.output_problem``; in debug mode also values left unset)."""
    problem = output_problem(r, plan.kernel_stypes[i], plan.out_shapes[i], plan.out_dtypes[i], plan.device.xp)
    if problem is None and plan.debug and holds_unset(r._data):
        return "a partly unset output", ("values the kernel never wrote remain (debug mode marks "
                                                     "outputs before the kernel runs)")
    return problem


def _check_updatable(plan: Plan, inputs: Sequence[NDArray], out: Any) -> None:
    """Refuse an input the op updates in place (its ``mutate``) whose memory is read-only
    (a NumPy view of a JAX array or of a file mapped read-only), before a kernel fails on it;
    and two arrays the call writes (updated inputs, ``out=``) sharing memory: one update
    would overwrite the other (``adam_update(w, g, m, m)``, or ``out=`` a state)."""
    written = []
    for i in plan.mutated:
        why = unwritable(inputs[i]._data)
        if why is not None:
            raise OperatorError(f"{plan.opdef.label} updates input {i} ({plan.opdef.arguments[i]!r}) in place, "
                                f"but {why}; pass a writable copy (e.g. its .copy())")
        written.append((repr(plan.opdef.arguments[i]), inputs[i]._data))
    outs = out if isinstance(out, (list, tuple)) else [] if out is None else [out]
    for k, o in enumerate(outs):
        if isinstance(o, NDArray):
            name = "out=" if len(outs) == 1 else f"out[{k}]"
            why = unwritable(o._data) if o.stype == "default" else None
            if why is not None:
                raise OperatorError(f"{plan.opdef.label} writes {name}, but {why}; pass a writable array")
            written.append((name, o._data))
    for a in range(len(written)):
        for b in range(a + 1, len(written)):
            if _may_share(written[a][1], written[b][1]):
                raise OperatorError(f"{plan.opdef.label} writes {written[a][0]} and {written[b][0]}, which share "
                                    "memory: one update would overwrite the other; pass separate arrays")


def _may_share(a: Any, b: Any) -> bool:
    """Whether two arrays may overlap in memory (NumPy's bounds test; for other array
    modules, the same buffer)."""
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return np.may_share_memory(a, b)
    ptr = getattr(getattr(a, "data", None), "ptr", None)
    return a is b or (ptr is not None and ptr == getattr(getattr(b, "data", None), "ptr", None))


def _check_returned(plan: Plan, ret: Any, results: list[NDArray]) -> None:
    """Kernels write their outputs and return nothing. Returning one of the outputs (or a
    view of one, as ``np.multiply(x, y, out=y)`` does) is harmless; returning any other
    array means the result was computed but never written: refuse it."""
    xp = plan.device.xp
    outs = [a for r in results for a in (r, r._data)]
    for value in ret if isinstance(ret, (tuple, list)) else (ret,):
        data = value._data if isinstance(value, NDArray) else value
        if not isinstance(data, xp.ndarray) or any(value is o for o in outs):
            continue
        if any(xp.may_share_memory(data, r._data) for r in results):
            continue
        raise OperatorError(
            f"{plan.opdef.label}: kernel {plan.kernel.__qualname__} returned an array of shape "
            f"{tuple(data.shape)} instead of writing its output: kernels write into their output "
            f"arguments (y[...] = value, or ctx.alloc_* for sparse outputs) and return nothing"
        )


def _store(targets: list, results: list, req: str) -> None:
    for i, (t, r) in enumerate(zip(targets, results)):
        if t is None or t is r or req == "null":
            continue
        if req == "add":
            accumulate_into(t, r)
        else:
            t[:] = r
        results[i] = t


def accumulate_into(target: NDArray, value: NDArray) -> None:
    """``target += value`` for any pair of storage types (what ``req="add"`` means); the
    target keeps its storage type and dtype. Sparse targets add through the table's own
    ``elemwise_add``, unrecorded."""
    value = value.astype(target.dtype, copy=False)
    if target.stype == "default":
        if value.stype == "row_sparse":
            target._data[value._indices] += value._data
        else:
            target._data += (value if value.stype == "default" else value.tostype("default"))._data
        return
    if value.stype != target.stype:
        value = value.tostype(target.stype)
    with _scope(False, None):
        target[:] = invoke("elemwise_add", [target, value])


def _checked_key(opdef: OpDef, inst: Op, inputs: Sequence[NDArray]) -> tuple:
    """``plan_key`` of these inputs, or the op's refusal of one that is no NDArray or is a
    malformed container (its deferred full check runs here, at its first use)."""
    try:
        return plan_key(inst, inputs)
    except AttributeError:
        bad = next(x for x in inputs if not isinstance(x, NDArray))
        raise OperatorError(f"{opdef.label}: inputs must be NDArrays, got {type(bad).__name__}") from None
    except SparseFormatError as exc:
        raise _refused_input(opdef, inputs, exc) from None


def plan_for(opdef: OpDef, inst: Op, inputs: Sequence[NDArray]) -> Plan:
    """The memoised plan of ``opdef`` with parameters ``inst`` on these inputs."""
    key = _checked_key(opdef, inst, inputs)
    plan = opdef.plans.get(key)
    if plan is None:
        plan = make_plan(opdef, inst, inputs)
        if plan.mode in DENSIFIED:
            _warn_fallback(plan)
        if len(opdef.plans) >= _MAX_PLANS:
            opdef.plans.clear()
        opdef.plans[key] = plan
    return plan


def _refused_input(opdef: OpDef, inputs: Sequence[NDArray], exc: SparseFormatError) -> SparseFormatError:
    """The refusal ``exc`` of a malformed sparse input found by its deferred full check,
    naming the op and the argument: the first input whose check fails (the inputs before
    it passed theirs when the plan's key read their shapes)."""
    for i, x in enumerate(inputs):
        try:
            if x.stype != "default":
                x.check_format(full_check=True)
        except SparseFormatError:
            name = opdef.arguments[i] if i < len(opdef.arguments) else f"input {i}"
            return SparseFormatError(f"{opdef.label}: argument {name!r} ({x.stype}): {exc}")
    return SparseFormatError(f"{opdef.label}: {exc}")


def invoke(op: OpDef | str, inputs: Sequence[NDArray], params: dict[str, Any] | None = None,
           out: Any = None, req: str = "write") -> Any:
    """Run operator ``op`` on ``inputs`` with ``params``; returns the visible output(s).

    ``out`` (an NDArray or a list of them) receives the results according to ``req``:
    ``write``/``inplace`` overwrite it, ``add`` accumulates into it, ``null`` leaves it.
    """
    opdef = get_op(op) if isinstance(op, str) else op
    if isinstance(inputs, NDArray):
        raise TypeError(f"invoke({opdef.name!r}, ...) takes its inputs as a list ([x] for one), got an "
                        f"{type(inputs).__name__}")
    inst = opdef.instance(params) if params else (opdef._default_instance or opdef.instance({}))
    return plan_for(opdef, inst, inputs).call(inputs, out, req)


def _kernel_error(plan: Plan, exc: Exception) -> OperatorError:
    """What a kernel's exception is raised as: an OperatorError as it is, anything else
    wrapped naming the op, caused by it (``from exc``, set here: re-raising an error "from"
    itself would make its cause a cycle, which tools walking causes never leave)."""
    if isinstance(exc, OperatorError):
        return exc
    error = OperatorError(
        f"{plan.opdef.label}: kernel {plan.kernel.__qualname__} failed on {plan.device} with input "
        f"storage types {list(plan.in_stypes)}: {type(exc).__name__}: {exc}"
    )
    error.quoted = str(exc)
    error.__cause__ = exc
    return error


def explain(op_name: str, *inputs: NDArray, **params: Any) -> dict[str, Any]:
    """How ``op_name`` would run on these inputs: storage types in and out, dispatch mode,
    the kernel chosen, output shapes and dtypes, each sparse output's capacity (the bound
    of its stored entries the op's capacity rule gives for these inputs, what ``jax.jit``
    reserves, and the rule's text; ``"none: pass max_nnz="`` where the op declares none),
    and which faces serve the op (``"yes"`` or the reason its declaration gives). Runs
    nothing."""
    from .sdk import capacity as cap

    opdef = get_op(op_name)
    inst = opdef.instance(params)
    _checked_key(opdef, inst, inputs)
    plan = make_plan(opdef, inst, inputs)
    outs = [cap.Stored(tuple(s), st, None, np.dtype(d))
            for s, st, d in zip(plan.out_shapes, plan.out_stypes, plan.out_dtypes)]
    bounds, sources = cap.report(inst, outs, [cap.facts_of(x) for x in inputs])
    return {**plan.describe(), "out_capacity": bounds, "capacity_from": sources,
            "faces": faces.support(opdef, inst, [x.shape for x in inputs], [x.stype for x in inputs]),
            "backward": _describe_backward(plan)}


def _describe_backward(plan: Plan) -> dict[str, Any]:
    """What differentiating a call of ``plan`` runs. For a backward declared on the op
    (``backward_op``): the storage type of each input's gradient, its dispatch mode and
    kernel, assuming each output's gradient arrives in the output's storage type; where an
    output is sparse, the same again under ``"dense_heads"`` for dense output gradients
    (what ``y.backward()`` sends: a head of ones is dense). For a ``gradient()`` built from
    operators: only that (its operators' storage types show when it runs; explain runs
    nothing)."""
    opdef, inst = plan.opdef, plan.inst
    if opdef.constant:
        return {"gradient": f"none: the outputs are constants ({opdef.constant_declaration})", "grad_stypes": None}
    if not opdef.differentiable:
        return {"gradient": "none: the op declares no gradient (differentiating through it is refused)",
                "grad_stypes": None}
    if not opdef.backward_kernels:
        return {"gradient": "gradient() built from operators: their storage types show when it runs",
                "grad_stypes": None}
    backward = backward_of(opdef)
    kept_in = range(len(opdef.arguments)) if opdef.backward_inputs is None else opdef.backward_inputs
    kept = [plan.in_stypes[i] for i in kept_in] + [plan.out_stypes[j] for j in opdef.backward_outputs]

    def route(heads: list[str]) -> dict[str, Any]:
        in_stypes = tuple(heads + kept)
        grad_stypes = list(backward_instance(backward, inst).infer_storage_type(*in_stypes))
        described = {"assumes": {f"{o}_grad": st for o, st in zip(opdef.outputs, heads)},
                     "grad_stypes": {opdef.arguments[i]: st for i, st in zip(opdef.backward_grads, grad_stypes)}}
        try:
            mode, fn = choose_dispatch(backward, plan.device, in_stypes, grad_stypes)
        except OperatorError as exc:  # what the backward would raise: said here, before it runs
            return {**described, "dispatch_mode": None, "kernel": f"none: {exc}"}
        return {**described, "dispatch_mode": mode,
                "kernel": fn.__qualname__ + (" (on densified inputs)" if mode in DENSIFIED else "")}

    heads = list(plan.out_stypes[:plan.nvis])
    described = {"gradient": "declared on the op (backward kernels and rules)", "op": backward.name, **route(heads)}
    if any(st != "default" for st in heads):
        described["dense_heads"] = route(["default"] * len(heads))
    return described


def op_function(name: str) -> Any:
    """The Python function of a registered operator: ``f(*inputs, out=None, req="write", **params)``.

    Positional values after the inputs fill the parameters in declaration order; a
    variadic operator takes every positional value as an input.
    """
    opdef = get_op(name)
    if opdef.function is not None:
        return opdef.function
    nargs = len(opdef.arguments)
    pnames = list(opdef.params)

    if opdef.variadic:
        def fn(*inputs: NDArray, out: Any = None, req: str = "write", **params: Any) -> Any:
            if opdef.retired:  # held from before the op was replaced or removed: the table's op runs
                return op_function(name)(*inputs, out=out, req=req, **params)
            return invoke(opdef, inputs, params, out, req)
    else:
        plans = opdef.plans

        def fn(*args: Any, out: Any = None, req: str = "write", **params: Any) -> Any:
            if opdef.retired:  # held from before the op was replaced or removed: the table's op runs
                return op_function(name)(*args, out=out, req=req, **params)
            if not params and len(args) == nargs:
                try:
                    plan = plans.get(plan_key(opdef._default_instance, args))
                except (AttributeError, SparseFormatError):  # not NDArrays (or no default parameters), a
                    plan = None                                  # malformed input: invoke says so
                if plan is not None:
                    return plan.call(args, out, req)  # the shortest path: a repeated call
            if len(args) != nargs:
                if len(args) < nargs:
                    raise TypeError(f"{name}() ({opdef.label}) takes {nargs} input(s) ({', '.join(opdef.arguments)}), "
                                    f"got {len(args)}")
                extra = args[nargs:]
                if len(extra) > len(pnames):
                    raise TypeError(f"{name}() ({opdef.label}) takes {nargs} input(s) ({', '.join(opdef.arguments)}) "
                                    f"and {len(pnames)} parameter(s) ({', '.join(pnames) or 'none'}), got "
                                    f"{len(args)} positional values")
                for pname, v in zip(pnames, extra):
                    if pname in params:
                        raise TypeError(f"{name}() got parameter {pname!r} twice")
                    params[pname] = v
                args = args[:nargs]
            return invoke(opdef, args, params, out, req)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = opdef.describe()
    fn.__signature__ = _signature_of(opdef)
    opdef.function = fn
    return fn


def _signature_of(opdef: OpDef) -> Any:
    """``inspect.Signature`` built from the declaration: inputs, then parameters, then out/req."""
    import inspect

    P = inspect.Parameter
    if opdef.variadic:
        params = [P(opdef.arguments[0], P.VAR_POSITIONAL)]
    else:
        params = [P(a, P.POSITIONAL_OR_KEYWORD) for a in opdef.arguments]
    kind, seen_default = (P.KEYWORD_ONLY if opdef.variadic else P.POSITIONAL_OR_KEYWORD), False
    for name, p in opdef.params.items():
        if p.required and seen_default:
            kind = P.KEYWORD_ONLY  # a required parameter after defaulted ones: keywords from here
        seen_default = seen_default or not p.required
        params.append(P(name, kind, default=P.empty if p.required else p.default))
    params += [P("out", P.KEYWORD_ONLY, default=None), P("req", P.KEYWORD_ONLY, default="write")]
    return inspect.Signature(params)
