"""What ``sparse_ops.torch.ops.<name>`` and ``op(name)`` are: every op of the table on torch tensors.

A bridged op takes torch tensors (strided, ``sparse_csr``, COO with ``sparse_dim=1``, or
``CSRParts`` / ``RowSparseParts`` of component tensors) and keyword parameters, splits
them into component tensors and calls the op's ``torch.ops.sparse_ops`` overload
(``library.py``): eager and compiled code run the same registered operator, and torch's
autograd records it. A call under a ``torch.func`` transform runs it through
``library.TransformAutograd``, the form transforms take. Eager calls of a dense built-in
with a torch lowering (``lowering.py``: elementwise, scalar and broadcast arithmetic,
comparisons, sums and means, softmaxes, dense ``dot``) on plain strided tensors run torch's own operations (``LoweredOp``), recorded
by torch's autograd. Eager host calls like one made before run its steps without torch's
dispatcher: a repeated all-dense call whose plan has
an array form (``dispatch.Plan.arrays``) runs the kernel on NumPy views of the tensors
(``BridgedOp.__call__``; with gradients, ``library.EagerAutograd``), other all-dense ones
the implementation (``BridgedOp._direct``), and calls with sparse inputs or outputs
``library.host_call`` (with gradients, ``library.HostAutograd``), each with the
registered autograd formula's backward (``library.gradients``). Results come back in the
op's inferred storage types (a tuple for several outputs); inside ``torch.compile`` and
``torch.func`` transforms sparse results come back as ``CSRParts`` / ``RowSparseParts``,
since they have no sparse tensors.

Besides the op's parameters a call takes ``training=`` (the op's training flag, True unless
given, as ``torch.nn.functional.dropout``'s). Inside ``torch.compile`` the call decides, from
the leaves it receives, which dense inputs get sparse COO gradients (``library.sparse_grad``)
and says so in the parameter string. ``explain`` says how a call runs; ``opcheck`` runs
``torch.library.opcheck`` on the overload it uses.

Inputs an op updates in place (its ``mutate``) are the caller's tensors, updated and their
version counters bumped as by torch's in-place ops. Caches keyed by parameter values are
bounded (``MAX_DENSE_CALLS``, ``MAX_PLANS``).

The table is read when an op is first asked for, and ``registry.subscribe`` drops a
bridged op when its record is replaced or removed, so plugins, ``library.load`` files and
MXNet-form ops registered at any time are bridged like the built-ins.
"""
from __future__ import annotations

import hashlib
import itertools
import operator
import sys
from typing import Any, NamedTuple

import numpy as np
import torch

from .. import registry
from ..bridging import BoundedCache, BridgedTable, arg_names, decode_params, param_key
from ..dispatch import fitted_stypes, infer_shapes, infer_stypes
from ..errors import OperatorError, quoting
from ..ndarray import STYPES
from ..tape import _state as _tape_state
from .convert import TorchBridgeError, coalesced, components, numpy_dtype, spoken
from .convert import _VALUE_TORCH_DTYPES as _VALUE_DTYPES
from . import lowering
from .lowering import _TABLE as _LOWERINGS
from .library import (SERIAL, SPARSE_GRAD, TRAINING, BridgeError, DenseAutograd, HostCall, Overload,
                      TracedBridgeError, TransformAutograd,
                      _functorch_active, _instance, call_options, encode_params, forget, host_call,
                      eager_apply, host_plan_key, is_sparse_grad, overload_for, run_dense)
from .structure import CSRParts, RowSparseParts, assemble_csr, assemble_rows, rows_values

_PLAIN = torch.Tensor
_PARAMETER = torch.nn.Parameter
_PLAIN_CLASSES = frozenset((_PLAIN, _PARAMETER))  # tensors whose memory the bridge reads as it is
_STRIDED = torch.strided
_grad_enabled = torch.is_grad_enabled
_compiling = torch.compiler.is_compiling
_FORWARD_AD = torch.autograd.forward_ad  # its _current_level: -1 outside dual_level()
_modes = torch._C._len_torch_dispatch_stack
increment_version = torch.autograd.graph.increment_version

# Caches keyed by parameter values are bounded: a scalar that changes on every call (a
# learning rate, a step count) must not grow memory. Beyond its cap a cache drops its oldest
# entries; hot entries are made again on their next call.
MAX_DENSE_CALLS = 256  # repeated all-dense calls kept per bridged op
MAX_PLANS = 1024       # plans and parameter sets plan_call keeps


def _concrete_param(v: Any) -> Any:
    """A parameter value as a Python constant while Dynamo traces: ``torch.compile`` makes
    Python floats and ints symbolic (``specialize_float`` / ``specialize_int`` off), but an op's
    parameters are part of its plan and travel as one string. Taking a float apart into its
    exact integer ratio, and an int through ``operator.index``, makes Dynamo specialize it with
    a guard, so a changed value compiles anew instead of being baked in; the ratio gives back
    the same float (inf and nan have none and stay as they are)."""
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, float):
        try:
            num, den = v.as_integer_ratio()
        except (OverflowError, ValueError):
            return v
        return num / den
    if isinstance(v, (tuple, list)):
        return type(v)(_concrete_param(e) for e in v)
    try:
        return operator.index(v)  # an int (a symbolic one specializes, with a guard)
    except TypeError:
        return v


class _Seen(NamedTuple):
    """What an eager call of a bridged op decided once for its parameters and its inputs'
    storage types and shapes (``BridgedOp._seen``): the overload, the op instance, the
    parameter string, the visible outputs' count, storage types and shapes."""

    ov: Overload
    inst: registry.Op
    nvis: int
    ptext: str
    out_stypes: tuple
    out_shapes: tuple


class BridgedOp:
    """One op of the table as a function of torch tensors: ``f(*tensors, **params)``."""

    def __init__(self, opdef: registry.OpDef) -> None:
        self.opdef = opdef
        self.__name__ = self.__qualname__ = opdef.name
        self.__doc__ = opdef.describe()
        # (parameter key, n) -> library.HostCall: the repeated all-dense calls; bounded, so a
        # changing scalar parameter cannot grow it
        self._dense: BoundedCache = BoundedCache(MAX_DENSE_CALLS)
        # (parameter key, n, input storage types, input shapes) -> _Seen: what an eager call
        # decided (its overload, instance, parameter string, output storage types and shapes)
        self._seen: BoundedCache = BoundedCache(MAX_DENSE_CALLS)

    def __repr__(self) -> str:
        return f"<sparse_ops.torch op {self.opdef.name}>"

    # ---- the common call: dense tensors -------------------------------------------------------------
    def __call__(self, *args: Any, **params: Any) -> Any:
        """The op on ``args`` (tensors, ``CSRParts``, ``RowSparseParts``) with the op's
        parameters by keyword, and ``training`` (a bool, True unless given: the op's training
        flag, which Dropout follows as ``torch.nn.functional.dropout`` does; an op that
        declares a ``training`` parameter of its own gets the value as that).

        A call whose parameters and number of inputs were seen before with dense inputs
        (``_dense``) first tries the shortest path: for plain contiguous host tensors of our
        dtypes whose plan is already made and has an array form (``Plan.arrays``: one dense
        output), the plan's kernel on NumPy views of them, recorded, when they need a
        gradient, by ``library.EagerAutograd``. Anything else it leaves to ``_dense_call``
        or the general ``_call``, which make the plans and say what is wrong."""
        if _FORWARD_AD._current_level >= 0:  # inside torch.autograd.forward_ad.dual_level()
            self._refuse_tangents(args)
        if _compiling() or _functorch_active():  # traced and transformed calls take the one general path
            return self._call(args, params, None)
        try:  # parameters by type and value: True, 1 and 1.0 are three calls
            key: tuple | None = (param_key(params) if params else (), len(args))
        except TypeError:  # a value with no key: the general path, uncached
            key = None
        fast = None if key is None else self._dense.get(key)
        if fast is None:
            return self._call(args, params, key)
        # (our own tape recording: run_dense, by _dense_call, keeps the kernel's own op calls off it)
        if fast.cpu and args and not _modes() and not _tape_state.recording:
            plan, arrays, grad = None, [], False
            try:  # a sparse layout raises in is_contiguous(), a tensor off the host in numpy()
                for a in args:
                    if a.__class__ not in _PLAIN_CLASSES or a.dtype not in _VALUE_DTYPES or not a.is_contiguous():
                        break
                    if a.requires_grad:
                        grad = True
                        arrays.append(a.detach().numpy())
                    else:
                        arrays.append(a.numpy())
                else:
                    plan = fast.plans.get(host_plan_key(fast.inst, arrays))
            except (TypeError, RuntimeError):
                plan = None
            if plan is not None and plan.arrays is not None:
                try:
                    if grad and _grad_enabled():
                        return eager_apply(fast, plan, arrays, *args)
                    return torch.from_numpy(plan.arrays(arrays, fast.training))
                except (OperatorError, TypeError, ValueError) as exc:
                    raise self._refusal(exc, args) from _cause(exc)
        return self._dense_call(fast, args, params, key)

    def _refuse_tangents(self, args: tuple) -> None:
        """Raise a BridgeError for an input carrying a forward-mode tangent (a dual tensor of
        ``torch.autograd.forward_ad``): the kernels would drop it, giving a wrong tangent
        without a word (the same refusal as ``torch.func.jvp``'s)."""
        for a in args:
            parts = (a.values, a.indices) if isinstance(a, (CSRParts, RowSparseParts)) else (a,)
            if any(isinstance(p, torch.Tensor) and p.layout == _STRIDED
                   and _FORWARD_AD.unpack_dual(p).tangent is not None for p in parts):
                raise BridgeError(f"sparse_ops.torch.ops.{self.opdef.name}: forward-mode derivatives "
                                  "(torch.autograd.forward_ad, torch.func.jvp, jacfwd) are not supported through the "
                                  "torch bridge: an op's gradient rule is a vector-Jacobian product; use reverse mode "
                                  "(backward, torch.func.grad, vjp, jacrev)")

    def _dense_call(self, fast: HostCall, args: tuple, params: dict, key: tuple) -> Any:
        """A repeated all-dense call the shortest path did not take: plain contiguous tensors
        on one device run the registered operator, on the host without torch's dispatcher
        (``_direct``: a plan to make, several outputs, an input updated in place); anything
        else takes the general path."""
        grad = False
        first = args[0].device if args and args[0].__class__ in _PLAIN_CLASSES else None
        for a in args:  # mixed devices leave too: the general path names the argument
            if a.__class__ not in _PLAIN_CLASSES or a.layout is not _STRIDED or not a.is_contiguous() \
                    or a.dtype not in _VALUE_DTYPES or a.device != first:
                break
            grad = grad or a.requires_grad
        else:
            ov, nvis, ptext = fast.ov, fast.nvis, fast.ptext
            if fast.cpu and not _modes() and all(a.is_cpu for a in args):
                grad = grad and _grad_enabled()
                if not grad or ov.backward is not None:
                    return self._direct(ov, fast.inst, nvis, args, ptext, grad)
            res = self._run(ov.torch_op, args, ptext, args)
            if ov.nparts_out == 1:
                return res
            return res[0] if nvis == 1 else tuple(res[:nvis])
        return self._call(args, params, key)

    def _run(self, torch_op: Any, parts: Any, ptext: str, args: tuple, ov: Overload | None = None) -> Any:
        """``torch_op(*parts, ptext)``, its failures as BridgeErrors naming the op (and, for
        torch's own errors, the arguments ``args``) in torch's words (``torch_wording``),
        the original kept as the cause. With ``ov`` (a call under a ``torch.func``
        transform), through ``library.TransformAutograd``, the autograd function transforms take."""
        try:
            if ov is not None:
                return TransformAutograd.apply(*parts, ptext, ov, _instance(self.opdef, ptext))
            return torch_op(*parts, ptext)
        except BridgeError as exc:
            raise self._spoken(exc) from exc.__cause__
        except OperatorError as exc:
            raise quoting(BridgeError(f"sparse_ops.torch.ops.{self.opdef.name}: {spoken(exc)}"), exc) from exc
        except (TypeError, ValueError, RuntimeError) as exc:
            raise self._error(exc, args) from exc

    def _spoken(self, exc: BridgeError) -> BridgeError:
        """``exc`` itself when its message already names this function and speaks torch, else
        a BridgeError that does (one the operator raised, ``operator 'x': ...``, gets the
        ``sparse_ops.torch.ops.<name>:`` prefix)."""
        text = spoken(exc)
        prefix = f"sparse_ops.torch.ops.{self.opdef.name}"
        if not text.startswith(prefix):
            text = f"{prefix}: {text}"
        return exc if text == str(exc) else quoting(BridgeError(text), exc)

    def _direct(self, ov: Overload, inst: registry.Op, nvis: int, args: tuple, ptext: str, grad: bool) -> Any:
        """The all-dense host call, minus torch's dispatcher (``_eager``), its visible results."""
        res = self._eager(ov, inst, args, ptext, grad)
        if len(res) == 1:
            return res[0]
        return res[0] if nvis == 1 else tuple(res[:nvis])

    def _eager(self, ov: Overload, inst: registry.Op, parts: Any, ptext: str, grad: bool) -> tuple:
        """A host call of the registered operator ``ov`` on its component arguments ``parts``
        (plain contiguous host tensors, and sparse arguments' shapes), minus torch's
        dispatcher: without ``grad`` what its implementation computes (the dispatcher would
        add nothing here: no autograd, no mode, no tracing); with it the same recorded with
        the registered autograd formula (``library.DenseAutograd`` for dense inputs and
        outputs, ``library.HostAutograd`` for others). ``ptext``: the parameter string (the
        bridge's options in it: the training flag). Returns every output's component tensors."""
        try:
            if not ov.dense:
                res = host_call(ov, inst, parts, ptext, grad)
            elif not grad:
                res = run_dense(ov, inst, parts, call_options(ptext).training)
            else:
                res = DenseAutograd.apply(*parts, ptext, ov, inst)
        except (OperatorError, TypeError, ValueError) as exc:
            raise self._refusal(exc, parts) from _cause(exc)
        if ov.mutated:  # updated in place without torch's dispatcher: bump their versions as it would
            increment_version([parts[ov.slots[i]] for i in ov.mutated])
        return tuple(res) if isinstance(res, (tuple, list)) else (res,)

    def _refusal(self, exc: Exception, args: Any) -> BridgeError:
        """The BridgeError for what a call raised, in torch's words, naming this function
        (``_spoken``), or the arguments for torch's own errors (``_error``)."""
        if isinstance(exc, BridgeError):
            return self._spoken(exc)
        if isinstance(exc, OperatorError):
            return quoting(BridgeError(f"sparse_ops.torch.ops.{self.opdef.name}: {spoken(exc)}"), exc)
        return self._error(exc, args)

    def _error(self, exc: Exception, args: tuple) -> BridgeError:
        devices = {a.device for a in args if isinstance(a, torch.Tensor)}
        if len(devices) > 1:
            names = ", ".join(f"{n} on {a.device}" for n, a in zip(self._names(len(args)), args)
                              if isinstance(a, torch.Tensor))
            return BridgeError(f"sparse_ops.torch.ops.{self.opdef.name}: inputs on different devices ({names}); "
                               "move them to one device")
        return BridgeError(f"sparse_ops.torch.ops.{self.opdef.name}: {type(exc).__name__}: {spoken(exc)}")

    def _names(self, n: int) -> list[str]:
        return arg_names(self.opdef, n)

    # ---- any call ---------------------------------------------------------------------------------------
    def _call(self, args: tuple, params: dict, key: tuple | None) -> Any:
        opdef = self.opdef
        names = self._names(len(args))
        if not opdef.variadic and len(args) != len(opdef.arguments):
            raise BridgeError(f"sparse_ops.torch.ops.{opdef.name} takes {len(opdef.arguments)} tensor input(s) "
                              f"({', '.join(opdef.arguments)}), got {len(args)}; parameters go by keyword")
        compiling = _compiling()
        params = _bridge_options(opdef, params)
        # rules that run on concrete sizes only (a C library's callbacks) never see traced sizes:
        # those are specialized to their values here (torch guards them: another size recompiles)
        concrete = compiling and not getattr(opdef.cls, "symbolic_shapes", True)
        stypes, flat, shapes, device = [], [], [], None
        for name, a in zip(names, args):
            try:
                st, parts, shape = _split(a, updated=name in opdef.mutate)
            except (TypeError, ValueError) as exc:
                raise BridgeError(f"sparse_ops.torch.ops.{opdef.name}: argument {name!r}: {exc}") from exc
            d = parts[0].device
            if device is None:
                device = (name, d)
            elif d != device[1]:
                raise BridgeError(f"sparse_ops.torch.ops.{opdef.name}: argument {name!r} is on {d} but "
                                  f"{device[0]!r} is on {device[1]}; move them to one device")
            if concrete:
                shape = tuple(operator.index(n) for n in shape)
            stypes.append(st)
            shapes.append(shape)
            flat += parts
            if st != "default":
                flat.append(list(shape))
        if compiling:  # parameters travel as one string: symbolic scalars are specialized (guarded)
            params = {k: _concrete_param(v) for k, v in params.items()}
            rows = _sparse_grad_inputs(opdef, params, stypes, args)
            if rows:  # decided now, from the marks Dynamo reads (and guards): the compiled backward follows it
                params[SPARSE_GRAD] = rows
        shapes = tuple(shapes)  # traced shapes may be symbolic: no constants, unless specialized
        if not compiling and key is not None:  # an eager call like one before: decided then
            seen = self._seen.get((key, tuple(stypes), shapes))
            if seen is not None:
                return self._eager_call(seen, args, flat)
        items = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in params.items()))
        ov_name, out_stypes, out_shapes, nvis, ptext, held = plan_call(
            opdef.name, tuple(stypes), None if compiling and not concrete else shapes, items, compiling)
        if compiling:  # the torch op by name: Dynamo follows torch.ops, not our objects
            torch_op = getattr(getattr(torch.ops.sparse_ops, opdef.name), ov_name)
            # dense results have their shapes; sparse ones are assembled with them (planned on
            # concrete sizes, or the op's shape rule traced on symbolic ones)
            if not concrete and any(s != "default" for s in out_stypes):
                out_shapes = _traced_shapes(opdef, held, shapes)
                fitted = tuple(fitted_stypes(out_stypes, out_shapes))
                if fitted != out_stypes:  # (dot of a vector and a csr): the kernel will plan it so
                    ov_name, out_stypes = fitted_overload(opdef.name, tuple(stypes), fitted), fitted
                    torch_op = getattr(getattr(torch.ops.sparse_ops, opdef.name), ov_name)
            if not any(s != "default" for s in out_stypes[:nvis]):
                out_shapes = (None,) * nvis
        else:
            ov = overload_for(opdef, tuple(stypes), out_stypes)
            torch_op = ov.torch_op
        # torch.func transforms take autograd functions with setup_context only: ours
        if compiling or (ov.setup is not None and _functorch_active()):
            if compiling:  # the record traced (Dynamo guards the serial read here): a replaced op's
                ptext = with_serial(ptext, opdef.serial)  # old graph is retraced, or refused by name
            res = self._run(torch_op, flat, ptext, args, None if compiling else ov)
            return _assemble(out_stypes, (res,) if not isinstance(res, tuple) else res, out_shapes, nvis, parts=True)
        # a first eager call: the registered operator itself; later ones like it may skip the
        # dispatcher (_eager_call), or, all dense, take the shortest path (__call__)
        res = self._run(torch_op, flat, ptext, args)
        seen = _Seen(ov, _instance(opdef, ptext), nvis, ptext, out_stypes, out_shapes)
        if key is not None:
            self._seen.put((key, tuple(stypes), shapes), seen)
            if all(s == "default" for s in stypes) and all(s == "default" for s in out_stypes) \
                    and all(a.__class__ in _PLAIN_CLASSES for a in args) and "random" not in opdef.resources:
                self._dense.put(key, HostCall(ov, seen.inst, nvis, ptext, call_options(ptext).training,
                                              all(a.is_cpu for a in args), opdef.plans))
        return _assemble(out_stypes, (res,) if not isinstance(res, tuple) else res, out_shapes, nvis)

    def _eager_call(self, seen: "_Seen", args: tuple, flat: list) -> Any:
        """An eager call like one before (``seen``: its overload and parameters decided), on
        the component arguments ``flat`` of ``args``: on plain host tensors the registered
        operator's steps without torch's dispatcher (``_eager``), else the operator itself."""
        ov, ptext = seen.ov, seen.ptext
        res = None
        if not _modes() and not _functorch_active() and _host_parts(flat):
            grad = _grad_enabled() and any(p.requires_grad for p in flat if p.__class__ is not list)
            if not grad or ov.backward is not None:
                res = self._eager(ov, seen.inst, flat, ptext, grad)
        if res is None:
            res = self._run(ov.torch_op, flat, ptext, args)
            res = (res,) if not isinstance(res, tuple) else res
        return _assemble(seen.out_stypes, res, seen.out_shapes, seen.nvis)


_PLANS: BoundedCache = BoundedCache(MAX_PLANS)  # (name, stypes, shapes, parameter key) -> (opdef, plan, instance)


class _Held:
    """The instances ``plan_call`` made, one attribute each, named by op and parameter string
    (``_held_name``), for ``_traced_shapes``. An attribute a trace has not read before is read
    from the object as it is then, where a dict is read as it was when the trace first read
    it: plan_call runs untraced and may have added instances since (a trace calling two ops
    with sparse results, in a process that never ran them eagerly)."""


_HELD = _Held()
_HELD_ORDER: dict[str, None] = {}  # attribute names, oldest first (at most MAX_PLANS kept)


def _held_name(name: str, ptext: str) -> str:
    return "i" + hashlib.blake2b(f"{name}\0{ptext}".encode(), digest_size=12).hexdigest()


def _hold(name: str, ptext: str, inst: registry.Op) -> str:
    """Keep ``inst`` on ``_HELD``; the name of its attribute."""
    attr = _held_name(name, ptext)
    setattr(_HELD, attr, inst)
    _HELD_ORDER.pop(attr, None)
    _HELD_ORDER[attr] = None
    while len(_HELD_ORDER) > MAX_PLANS:
        oldest = next(iter(_HELD_ORDER))
        del _HELD_ORDER[oldest]
        delattr(_HELD, oldest)
    return attr


@torch._dynamo.assume_constant_result
def plan_call(name: str, stypes: tuple, shapes: tuple | None, items: tuple, traced: bool = False) -> tuple:
    """What a call decides before running, from constants only (so that torch.compile runs it
    once, at trace time, and keeps the result): (overload name, output storage types, output
    shapes, visible outputs, parameter string, and the attribute of ``_HELD`` holding the
    op's instance for ``_traced_shapes``). Defines the overload on first use. Symbolic
    shapes (a compiled function's dynamic dimensions) are no constants: without ``shapes``
    the output shapes are None, and the traced code works out those it needs (an op whose
    rules take concrete sizes only, ``symbolic_shapes = False`` as C-library ops declare,
    gets its traced sizes specialized and planned here instead). Parameters are keyed by
    type and value (``param_key``) and parsed from the string the operator receives, so
    plan and operator parse alike."""
    try:
        pkey = param_key(dict(items))  # by type and value: True and 1.0 are planned apart
        key: tuple | None = (name, stypes, shapes, pkey)
        hit = _PLANS.get(key)
    except TypeError:  # an unhashable parameter value: planned every time
        key, hit = None, None
    if hit is not None and registry.get_op(name) is hit[0]:
        result, inst = hit[1], hit[2]
        _hold(name, result[4], inst)  # (again: it may have been evicted apart from its plan)
        return result
    opdef = registry.get_op(name)
    try:
        ptext = encode_params(dict(items))
        inst = _instance(opdef, ptext)  # what the operator parses: the decoded string (torch dtypes as names)
        out_shapes = None if shapes is None else \
            tuple(tuple(s) for s in infer_shapes(opdef, inst, shapes))
        out_stypes = tuple(infer_stypes(opdef, inst, list(stypes), out_shapes))
        ov = overload_for(opdef, tuple(stypes), out_stypes)
    except (OperatorError, TypeError, ValueError) as exc:
        raise (TracedBridgeError if traced else BridgeError)(f"sparse_ops.torch.ops.{name}: {exc}") from exc
    result = (ov.name, out_stypes, out_shapes, inst.visible_output_count(), ptext, _hold(name, ptext, inst))
    if key is not None:
        _PLANS.put(key, (opdef, result, inst))
    return result


@torch._dynamo.assume_constant_result
def with_serial(ptext: str, serial: str) -> str:
    """The parameter string ``ptext`` carrying the op record's ``serial`` (``SERIAL``), for a
    traced call: the operator refuses it once the op was registered again."""
    return encode_params({**(decode_params(ptext) if ptext else {}), SERIAL: serial})


@torch._dynamo.assume_constant_result
def fitted_overload(name: str, stypes: tuple, out_stypes: tuple) -> str:
    """The name of op ``name``'s overload for these storage types (defined on first use), for
    a traced call whose output storage types its shapes settled (``fitted_stypes``)."""
    return overload_for(registry.get_op(name), stypes, out_stypes).name


def _traced_shapes(opdef: registry.OpDef, held: str, shapes: tuple) -> tuple:
    """The output shapes of a traced call whose input shapes are symbolic: the op's shape
    rule run on them (torch guards what it compares), for the shapes of sparse results."""
    inst = getattr(_HELD, held)  # made by plan_call: parsing parameters is not traced
    return tuple(tuple(s) for s in infer_shapes(opdef, inst, shapes, traced=True))


def _host_parts(parts: list) -> bool:
    """Whether an operator's component arguments are plain contiguous host tensors (and the
    shapes of sparse arguments, lists): what ``BridgedOp._eager`` runs without torch's
    dispatcher."""
    for p in parts:
        if p.__class__ is not list and (p.__class__ not in _PLAIN_CLASSES or not p.is_cpu or not p.is_contiguous()):
            return False
    return True


def _cause(exc: BaseException) -> BaseException | None:
    """What a refusal of ``exc`` keeps as its cause: a BridgeError's own cause (it already
    speaks for the call), else ``exc``."""
    return exc.__cause__ if isinstance(exc, BridgeError) else exc


def _parts_shape(a: CSRParts | RowSparseParts) -> tuple:
    """The shape of a ``CSRParts`` / ``RowSparseParts``: non-negative ints, 2 of them for a
    csr and at least one for a row_sparse, as the native containers take shapes. Inside
    torch.compile the sizes are the tracer's (comparing one would fix it to this call's
    value): taken as they are."""
    if _compiling():
        return tuple(a.shape)
    try:
        shape = tuple(a.shape)
        ok = all(not isinstance(d, (bool, np.bool_, float)) and operator.index(d) >= 0 for d in shape)
    except TypeError:
        shape, ok = None, False
    if not ok or (len(shape) != 2 if a.stype == "csr" else not shape):
        rank = "2 entries" if a.stype == "csr" else "at least one entry"
        raise TorchBridgeError(f"{type(a).__name__}: shape must be a tuple of non-negative ints with {rank}, "
                               f"got {a.shape!r}")
    return shape


def _split(a: Any, updated: bool = False, past_transforms: bool = False) -> tuple[str, list, tuple]:
    """(storage type, component tensors, shape) of an argument whose values are of a dtype
    we hold (a TorchBridgeError otherwise: NumPy would compute some other dtype's answer).
    A dense argument the op ``updated`` in place is passed as it is, even non-contiguous: the
    operator writes its new values into the caller's tensor, not into a copy. A torch sparse
    tensor met inside a ``torch.func`` transform was closed over (transforms take no sparse
    inputs): its components are constants, read past the transform (whose wrappers have no
    sparse layouts)."""
    if not past_transforms and isinstance(a, torch.Tensor) and a.layout != _STRIDED and _functorch_active():
        with torch._C._DisableFuncTorch():
            return _split(a, updated, past_transforms=True)
    if updated and isinstance(a, torch.Tensor) and a.layout == _STRIDED:
        st, parts, shape = "default", [a], tuple(a.shape)
    elif isinstance(a, CSRParts):
        st, parts, shape = "csr", [a.values, a.indices, a.indptr], _parts_shape(a)
    elif isinstance(a, RowSparseParts):
        st, parts, shape = "row_sparse", [a.values, a.indices], _parts_shape(a)
    elif not isinstance(a, torch.Tensor):
        raise TorchBridgeError(f"expected a torch.Tensor (or CSRParts / RowSparseParts), got a {type(a).__name__}")
    elif a.layout == torch.sparse_coo and a.sparse_dim() == 1:
        a = coalesced(a)  # a copy when not coalesced, as from_torch makes
        st, parts, shape = "row_sparse", [rows_values(a), a._indices()[0]], tuple(a.shape)
    else:
        st, parts, shape = components(a, "sparse_ops.torch")
    if parts[0].dtype not in _VALUE_DTYPES:
        numpy_dtype(parts[0].dtype)  # raises, naming the dtypes we hold
    return st, list(parts), shape


def _assemble(out_stypes: tuple, res: tuple, shapes: tuple, nvis: int, parts: bool = False) -> Any:
    """The visible results from the operator's component tensors ``res``: dense tensors, and
    sparse ones as torch sparse tensors, or as ``CSRParts`` / ``RowSparseParts`` with
    ``parts`` (inside torch.compile and torch.func transforms, which have no sparse tensors)."""
    out, k = [], 0
    for st, shape in zip(out_stypes[:nvis], shapes):
        if st == "default":
            out.append(res[k])
            k += 1
        elif st == "csr":
            v, i, p = res[k:k + 3]
            out.append(CSRParts(v, i, p, shape) if parts else assemble_csr(v, i, p, shape))
            k += 3
        else:
            v, i = res[k:k + 2]
            out.append(RowSparseParts(v, i, shape) if parts else assemble_rows(v, i, shape))
            k += 2
    return out[0] if nvis == 1 else tuple(out)


def _bridge_options(opdef: registry.OpDef, params: dict) -> dict:
    """``params`` with the bridge's keyword ``training`` turned into its option in the
    parameter string (``@training``, written only when False: True is the default), unless
    the op declares a ``training`` parameter of its own, which then gets the value. The
    native API's ``out=`` and ``req=`` are refused: torch code assigns results."""
    for keyword in ("out", "req"):
        if keyword in params:
            raise BridgeError(f"sparse_ops.torch.ops.{opdef.name}: {keyword}= is not taken on the torch face; use "
                              "the returned tensor (or copy it into yours: t.copy_(result))")
    if "training" not in params or "training" in opdef.params:
        return params
    params = dict(params)
    training = params.pop("training")
    if not isinstance(training, bool):
        raise BridgeError(f"sparse_ops.torch.ops.{opdef.name}: training must be a bool (as in "
                          f"torch.nn.functional.dropout), got {training!r}")
    if not training:
        params[TRAINING] = False
    return params


def _sparse_grad_inputs(opdef: registry.OpDef, params: dict, stypes: list, args: tuple) -> tuple[int, ...]:
    """Inside torch.compile, the positions of the dense inputs whose gradient the compiled
    backward makes sparse COO: leaves that need a gradient, with a dimension, marked by
    ``sparse_grad`` or asked for by the op's own ``sparse_grad=True`` (what an eager
    backward decides from the saved leaf, decided here where Dynamo still sees the
    tensors and guards what it reads)."""
    if not opdef.differentiable or opdef.mutate or not torch.is_grad_enabled():
        return ()
    asks = "sparse_grad" in opdef.params and params.get("sparse_grad") is True
    return tuple(i for i, (st, a) in enumerate(zip(stypes, args))
                 if st == "default" and a.requires_grad and a.is_leaf and a.dim() >= 1
                 and (asks or is_sparse_grad(a)))


class LoweredOp(BridgedOp):
    """A bridged dense built-in with a torch lowering (``lowering.py``): its eager calls on
    plain strided tensors, ``torch.func`` transforms included, run torch's own operations for
    the op, recorded by torch's autograd and batched by torch's ``vmap``; every other call is
    ``BridgedOp``'s."""

    def __init__(self, opdef: registry.OpDef) -> None:
        super().__init__(opdef)
        # (parameter key, then each input's dtype, and its shape unless the op is elementwise)
        # -> (the tensors' function, result dtype, first result's shape), or None where the
        # op's rules refuse the signature
        self._signatures: BoundedCache = BoundedCache(MAX_DENSE_CALLS)
        self._no_gradient = lowering.gives_no_gradient(opdef.name)
        self._any_shape = lowering.elementwise(opdef.name)

    def __call__(self, *args: Any, **params: Any) -> Any:
        """The call as the torch expression of the op, unless the call is traced by
        ``torch.compile``, runs in a dispatch mode or on our own tape, or an input is not a plain
        strided tensor, is on another device than the first, is marked ``sparse_grad`` or
        needs a gradient that the lowering would not give (``lowering.gives_no_gradient``),
        or the op's rules refuse the signature: ``BridgedOp.__call__`` then runs it (and
        says what is wrong)."""
        # (is_compiling first: Dynamo reads it as True and traces none of the others)
        if args and not (_LOWERINGS.off or _compiling() or _modes() or _tape_state.recording):
            try:
                pkey = param_key(params) if params else ()
                if len(args) == 1:
                    a = args[0]
                    ok = a.__class__ in _PLAIN_CLASSES and a.layout is _STRIDED \
                        and not (a.requires_grad and (self._no_gradient or is_sparse_grad(a)))
                    # an elementwise op serves any shape (a call without parameters keys by
                    # the dtype alone); the others' rules read it
                    key: Any = (a.dtype if not pkey else (pkey, a.dtype)) if self._any_shape \
                        else (pkey, a.dtype, a.shape)
                else:
                    ok, key, first = True, [pkey], args[0].device
                    for a in args:
                        if a.__class__ not in _PLAIN_CLASSES or a.layout is not _STRIDED or a.device != first \
                                or (a.requires_grad and (self._no_gradient or is_sparse_grad(a))):
                            ok = False
                            break
                        key += (a.dtype, a.shape)
                    key = tuple(key)
            except (TypeError, AttributeError, RuntimeError):  # a parameter with no key, an argument not a
                ok = False                                        # tensor, a tensor with no sizes (nested)
            if ok:
                fn = self._signatures.get(key, False)
                if fn is False:
                    return self._first(key, params, args)
                if fn is not None:
                    return fn(*args)
        return BridgedOp.__call__(self, *args, **params)

    def _first(self, key: tuple, params: dict, args: tuple) -> Any:
        """A new signature's first call: the op's rules decide whether the lowering serves it
        (``lowering.signature``); the result's shape is checked against the op's rule, and the
        function kept for the signature gives the op's dtype (and, for an op declared not
        differentiable, a result that needs no gradient)."""
        sig = lowering.signature(self.opdef, params, args)
        if sig is None:
            self._signatures.put(key, None)
            return BridgedOp.__call__(self, *args, **params)
        fn, dtype, shape = sig
        out = fn(*args)
        if tuple(out.shape) != shape:
            raise BridgeError(f"sparse_ops.torch.ops.{self.opdef.name}: its torch lowering gave shape "
                              f"{tuple(out.shape)} but the op's infer_shape says {shape}; "
                              "sparse_ops.torch.lowering.disabled() runs its kernels instead")
        if out.dtype is not dtype:
            fn = (lambda f: lambda *xs: f(*xs).to(dtype))(fn)
            out = out.to(dtype)
        if not self.opdef.differentiable:
            fn = (lambda f: lambda *xs: f(*xs).detach())(fn)
            out = out.detach()
        self._signatures.put(key, fn)
        return out


# ---- the namespace ------------------------------------------------------------------------------------
def forget_bridged(name: str) -> None:
    """Drop what the bridge holds for op ``name`` (its record was replaced or removed): its
    torch registrations (``library.forget``) and the function ``sparse_ops.torch.ops`` kept
    (that module, above this one, is found loaded rather than imported)."""
    forget(name)
    namespace = sys.modules.get(f"{__package__}.ops")
    if namespace is not None:
        namespace.__dict__.pop(name, None)


def _bridged(opdef: registry.OpDef) -> BridgedOp:
    return (BridgedOp if lowering.lowering_for(opdef) is None else LoweredOp)(opdef)


_TABLE = BridgedTable("sparse_ops.torch.ops", _bridged, forget_bridged)
op, lookup = _TABLE.op, _TABLE.lookup


# ---- how a call runs, and torch's operator check of it -----------------------------------------------
def _operator_call(name: str, args: tuple, params: dict, copies: bool = False) -> tuple[Overload, list, str, tuple,
                                                                                          tuple]:
    """(overload, component arguments, parameter string, input storage types, output shapes)
    of the call ``sparse_ops.torch.ops.<name>(*args, **params)`` would make, eagerly. With
    ``copies``, a torch sparse tensor's components are copies (leaves; the values require
    grad where the tensor does), not views of it."""
    opdef = registry.get_op(name)
    params = _bridge_options(opdef, params)
    stypes, flat, shapes = [], [], []
    for argname, a in zip(arg_names(opdef, len(args)), args):
        try:
            st, parts, shape = _split(a, updated=argname in opdef.mutate)
        except (TypeError, ValueError) as exc:
            raise BridgeError(f"sparse_ops.torch.ops.{name}: argument {argname!r}: {exc}") from exc
        if copies and isinstance(a, torch.Tensor) and a.layout != _STRIDED:
            parts = [p.detach().clone() for p in parts]
            parts[0].requires_grad_(a.requires_grad and parts[0].is_floating_point())
        stypes.append(st)
        shapes.append(shape)
        flat += parts
        if st != "default":
            flat.append(list(shape))
    items = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in params.items()))
    _, out_stypes, out_shapes, _, ptext, _ = plan_call(name, tuple(stypes), tuple(shapes), items)
    return overload_for(opdef, tuple(stypes), out_stypes), flat, ptext, tuple(stypes), out_shapes


def opcheck(name: str, *args: Any, test_utils: Any = None, raise_exception: bool = True, **params: Any) -> dict:
    """``torch.library.opcheck`` of the operator the call ``sparse_ops.torch.ops.<name>(*args,
    **params)`` runs: its ``torch.ops.sparse_ops`` overload (``default`` for dense inputs
    of a fixed-arity op; storage codes otherwise, ``dot.cd_d`` for csr @ dense) on the
    call's component tensors and parameter string. torch's checks: the schema, the autograd
    registration, the fake implementation against the real one, and the compiled
    (AOTAutograd) forward and backward against the eager ones. Inputs that require grad
    have their gradients checked; a sparse tensor's components are passed as copies (leaves
    that require grad as its values did). ``test_utils`` and ``raise_exception`` are
    opcheck's; returns its dict of results.

    Called directly: ``torch.library.opcheck(torch.ops.sparse_ops.relu.default, (x,))``,
    ``torch.library.opcheck(torch.ops.sparse_ops.dot.cd_d, (values, indices, indptr, [n, k],
    w, ""))``; ``explain`` prints that call for any arguments."""
    ov, flat, ptext, _, _ = _operator_call(name, args, dict(params), copies=True)
    kwargs = {} if test_utils is None else {"test_utils": test_utils}
    return torch.library.opcheck(ov.torch_op, tuple(flat) + (ptext,), raise_exception=raise_exception, **kwargs)


def explain(name: str, *args: Any, **params: Any) -> dict[str, Any]:
    """How ``sparse_ops.torch.ops.<name>(*args, **params)`` runs, without running it: the
    storage types and shapes, the ``torch.ops.sparse_ops`` overload and how to opcheck it,
    which inputs get sparse gradients, what ``torch.func`` transforms and ``torch.compile``
    use, and which faces serve the op (``"yes"`` or the reason)."""
    from .. import faces

    opdef = registry.get_op(name)
    ov, flat, ptext, stypes, out_shapes = _operator_call(name, args, dict(params))
    inst = _instance(opdef, ptext)
    nvis = inst.visible_output_count()
    qual = f"torch.ops.sparse_ops.{name}.{ov.name}"
    shown = ", ".join(f"<{n}>" for n in _component_names(ov)) + (f", {ptext!r}" if ptext else "")
    asks = "sparse_grad" in opdef.params and bool(getattr(inst, "sparse_grad", False))
    grads = {}
    for i, (argname, st, a) in enumerate(zip(arg_names(opdef, len(args)), stypes, args)):
        if i < len(opdef.arguments) and i not in opdef.backward_grads:
            grads[argname] = "none: the op's backward_grads leaves it out"
        elif isinstance(a, torch.Tensor) and not (a.is_floating_point() or a.is_complex()):
            grads[argname] = f"none: {a.dtype} values have no gradient in torch"
        elif st != "default":
            layout = "sparse_csr" if st == "csr" else "sparse COO"
            grads[argname] = f"{st}: the gradient of each stored value ({layout})"
        elif asks or is_sparse_grad(a):
            grads[argname] = ("sparse COO (row_sparse) when a leaf: " +
                              ("the op's sparse_grad=True asks" if asks else "marked by sparse_ops.torch.sparse_grad"))
        else:
            grads[argname] = "dense (sparse_ops.torch.sparse_grad(t) marks a leaf for a sparse COO gradient)"
    if not opdef.differentiable or opdef.mutate:
        grads = {k: "none" for k in grads}
    sparse_out = [s for s in ov.out_stypes if s != "default"]
    if ov.mutated:
        vmap = "none: the op updates inputs in place"
    elif sparse_out:
        vmap = "refused: its results are sparse (each example stores its own count of values)"
    else:
        vmap = ("a loop over the batch: one call per example, results stacked (TransformAutograd.vmap for "
                f"sparse_ops.torch.ops.{name}, a registered vmap rule for {qual})"
                + ("; random: needs vmap(..., randomness='different')" if "random" in opdef.resources else ""))
    lowered = all(st == "default" for st in stypes) and lowering.describe(name) is not None
    if lowered:  # torch's own operations, which every transform takes
        vmap = "torch's batching rules for the torch operations the call lowers to (sparse_ops.torch.lowering)"
        func = ("grad, vjp, jacrev, jvp, jacfwd, hessian: torch's own derivatives of the torch operations the "
                "call lowers to (sparse_ops.torch.lowering)")
    elif ov.setup is not None and opdef.differentiable:
        func = ("grad, vjp, jacrev: library.TransformAutograd (setup_context; its backward runs the "
                f"{ov.name}_backward operator); jvp, jacfwd: not supported (reverse-mode rules only)")
    else:
        func = "values only: " + ("the op updates inputs in place" if ov.mutated else "the op declares no gradient")
    compiled = f"{qual} in the graph (fake implementation from the op's rules); "
    if ov.backward_op is None:
        compiled += "no backward"
    else:
        compiled += f"backward: {ov.name}_backward" + (
            f", or {ov.name}_backward_rows for sparse COO gradients" if ov.backward_rows_op is not None else "")
    eager = lowering.describe(name) if lowered else \
        f"the op's kernels through {qual} (repeated host calls skip torch's dispatcher)"
    return {
        "op": name,
        "in_stypes": list(stypes),
        "out_stypes": list(ov.out_stypes[:nvis]),
        "out_shapes": [list(s) for s in out_shapes[:nvis]],
        "overload": qual,
        "schema": str(ov.torch_op._schema),
        "opcheck": f"torch.library.opcheck({qual}, ({shown})), or sparse_ops.torch.opcheck({name!r}, ...)",
        "training": call_options(ptext).training,
        "eager": eager,
        "gradients": grads,
        "torch.func": func,
        "vmap": vmap,
        "torch.compile": compiled,
        "faces": faces.support(opdef, inst, [tuple(s) for s in _shapes_of(args)], list(stypes)),
    }


def _component_names(ov: Overload) -> list[str]:
    """The operator's component argument names (``a_values, a_indices, a_indptr, a_shape, w``)."""
    names = []
    for name, st in zip(ov.names, ov.in_stypes):
        names += [name] if st == "default" else [f"{name}_values", f"{name}_indices"] + \
            ([f"{name}_indptr"] if st == "csr" else []) + [f"{name}_shape"]
    return names


def _shapes_of(args: tuple) -> list[tuple]:
    return [tuple(a.shape) for a in args]


class _TorchNamespace(torch._ops._OpNamespace):
    """``torch.ops.sparse_ops``: defines an op's torch overloads the first time it is asked
    for by name (its all-dense overload and one per declared storage-aware kernel)."""

    __module__ = torch._ops._OpNamespace.__module__  # torch names the ops it finds by this (pickling graphs)

    def __getattr__(self, op_name: str) -> Any:
        if not op_name.startswith("__") and op_name not in _DECLARING:
            try:
                opdef = registry.get_op(op_name)
            except OperatorError:
                opdef = None
            if opdef is not None:
                _DECLARING.add(op_name)
                try:
                    define_declared(opdef)
                finally:
                    _DECLARING.discard(op_name)
        return super().__getattr__(op_name)


_DECLARING: set[str] = set()  # names whose declared overloads are being defined (no re-entry)


def define_declared(opdef: registry.OpDef) -> list[Overload]:
    """Define the torch overloads of ``opdef`` that its declaration names: all-dense inputs
    (as many as it takes, or as its first sample has for a variadic op) and each cpu storage-aware kernel's input storage
    types, with the output storage types its default parameters infer. Ones the default
    parameters cannot infer (a required parameter) are left for their first call; a kernel
    taking any storage type (``"*"``) gets one overload per storage type there."""
    combos = [("default",) * (len(opdef.arguments) if not opdef.variadic else _sample_arity(opdef))]
    for (dev, stypes) in opdef.fcompute_ex:
        if dev != "cpu" or "..." in stypes:
            continue
        # a "*" (any storage type) stands for each of them
        for combo in itertools.product(*[STYPES if s == "*" else (s,) for s in stypes]):
            if combo not in combos:
                combos.append(combo)
    made = []
    for stypes in combos:
        try:
            inst = opdef._default_instance or _sample_instance(opdef)
            out = tuple(infer_stypes(opdef, inst, list(stypes), None))
            made.append(overload_for(opdef, tuple(stypes), out))
        except (OperatorError, TypeError, ValueError):
            continue
    return made


def _sample_arity(opdef: registry.OpDef) -> int:
    """How many inputs the first sample of variadic ``opdef`` passes (2 without samples)."""
    make = getattr(opdef.cls, "samples", None)
    for smp in (make() if callable(make) else []):
        if isinstance(smp, tuple) and smp:
            return len(smp[0])
    return 2


def _sample_instance(opdef: registry.OpDef) -> registry.Op:
    """An instance for an op with required parameters: those of its first sample (the
    storage types it infers name the overloads ``torch.ops.sparse_ops.<name>`` defines)."""
    make = getattr(opdef.cls, "samples", None)
    for smp in (make() if callable(make) else []):
        if isinstance(smp, tuple) and smp[1]:
            return opdef.instance(smp[1])
    return opdef.instance({})


def _install_torch_namespace() -> None:
    ns = torch.ops.__dict__.get("sparse_ops")
    if isinstance(ns, _TorchNamespace):
        return
    if ns is None:
        ns = _TorchNamespace("sparse_ops")
        setattr(torch.ops, "sparse_ops", ns)
        if "sparse_ops" not in torch.ops._dir:
            torch.ops._dir.append("sparse_ops")
    else:
        ns.__class__ = _TorchNamespace


_install_torch_namespace()

