"""Every op of the table as a ``torch.library`` operator, ``torch.ops.sparse_ops.<name>``.

A torch operator takes tensors, so each of our ops is registered on **component
tensors**, one overload per tuple of input and output storage types:

- a dense input is one tensor; a csr input is ``<arg>_values, <arg>_indices, <arg>_indptr,
  <arg>_shape``; a row_sparse input ``<arg>_values, <arg>_indices, <arg>_shape``;
- the parameters travel as one string (``params``, our canonical encoding; empty for the
  defaults), so every parameter type of the table crosses unchanged; keys starting with
  ``@`` are the bridge's options of the call, not the op's (``@training``: the training
  flag Dropout reads, True when absent; ``@sparse_grad``: inputs whose compiled gradient is
  sparse COO);
- the outputs are the components of every output (visible and hidden: backward reads
  hidden ones such as Dropout's mask) by their inferred storage types; indices of sparse
  outputs are int64 and never alias an input (torch's rule for custom ops: a shared index
  array is copied).

The overload named ``default`` is the all-dense one (fixed arity, its declared outputs, all
dense: ``Dropout.default`` returns the result and its mask), so ``torch.ops.sparse_ops.relu(x)``
works as written and ``torch.library.opcheck`` takes ``torch.ops.sparse_ops.<name>.default``;
the others are named by storage codes (``d`` dense, ``c`` csr, ``r`` row_sparse), inputs then
outputs: ``dot.cd_r`` is ``dot(csr, dense) -> row_sparse``.

Each overload has a real implementation (our invoke path on zero-copy NumPy/CuPy views;
on cuda on ``torch.cuda.current_stream()``), a fake implementation from the op's
``infer_shape`` / ``infer_type`` / ``infer_storage_type`` (sparse outputs get dynamic nnz
sizes), an autograd formula that runs the op's own gradient rule (a dense input's gradient
dense unless the user asked for sparse COO: ``sparse_grad``), a vmap rule (a loop over the
batch) and, for tracing and ``torch.func``, the gradient as operators: ``<overload>_backward``
and ``<overload>_backward_rows`` (sparse COO gradients in compiled code). Errors its
implementations raise name dtypes as torch does (``convert.torch_wording``). Registration is lazy:
an op is defined in torch the first time it is used (through ``sparse_ops.torch.ops``,
``op(name)`` or ``torch.ops.sparse_ops.<name>``), so importing the bridge registers nothing.

Eager host calls like one made before skip torch's dispatcher and run the same steps here,
recorded by autograd functions with the registered backward's work (``gradients``):
``EagerAutograd`` for all-dense calls whose plan has an array form (the kernel on NumPy
views, ``dispatch.Plan.arrays``), ``DenseAutograd`` for other all-dense ones, ``host_call`` /
``HostAutograd`` for sparse inputs or outputs (the containers made once, in the forward, and
kept for the backward).
"""
from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np
import torch

from .. import autograd as _ag
from .. import registry, rng
from ..bridging import PARTS, BoundedCache, aligned, arg_names, framework_gradient
from ..bridging import encode_params  # noqa: F401  (re-exported: the bridge and tests take it from here)
from ..bridging import decode_params as _decode_params
from ..bridging import register_param_type
from ..device import Device, as_device
from ..dispatch import STORAGE_AWARE, infer_dtypes, infer_shapes, plan_for
from ..errors import OperatorError, quoting
from ..boundary import FULL, OURS, admit
from ..ndarray import NDArray
from ..ops.methods import attach_gradient_buffer
from ..tape import _scope, _state
from .convert import (_VALUE_TORCH_DTYPES, array_of, device_of, numpy_dtype, sparse_rows, tensor_of, torch_device,
                      spoken, torch_dtype)

NAMESPACE = "sparse_ops"
CODES = {"default": "d", "csr": "c", "row_sparse": "r"}


class BridgeError(OperatorError, ValueError):
    """An op called through the torch bridge refused its arguments; the message names the
    op and the argument, the original error is ``__cause__``."""


class TracedBridgeError(BridgeError, torch._dynamo.exc.UserError):
    """The BridgeError of a call refused while ``torch.compile`` traces it, in the planning
    Dynamo runs as plain Python: also Dynamo's ``UserError``, which Dynamo hands to the user
    as it is (any other exception there comes out as its ``InternalTorchDynamoError``, the
    type for Dynamo's own bugs)."""

    def __init__(self, message: str) -> None:
        torch._dynamo.exc.UserError.__init__(self, torch._dynamo.exc.UserErrorType.INVALID_INPUT, message)


# ---- parameters as one string ------------------------------------------------------------------
# The encoding is the one both bridges share (``bridging.encode_params``): JSON that keeps
# every value's type, non-finite floats and huge integers included; torch dtypes and devices
# cross as names.
register_param_type(torch.dtype, lambda d: numpy_dtype(d).name)
register_param_type(torch.device, str)

MAX_DECODED = 1024  # parameter strings whose parsed dicts are kept (the oldest evicted beyond)
_DECODED: BoundedCache = BoundedCache(MAX_DECODED)


def decode_params(text: str) -> dict[str, Any]:
    """The parameter dict of ``encode_params``'s string (cached: one parse per string; the
    cache is bounded, so a changing scalar parameter does not grow it)."""
    d = _DECODED.get(text)
    if d is None:
        try:
            d = _DECODED.put(text, _decode_params(text))
        except (ValueError, TypeError, KeyError) as exc:  # not JSON, or not the encoding's tags
            raise BridgeError(f"cannot read the parameter string {text[:200]!r} (write it with "
                              f"sparse_ops.torch.library.encode_params): {exc}") from None
    return d


# ---- the bridge's own options in the parameter string -----------------------------------------------
# Besides the op's parameters, the string may carry options of the bridge, under keys starting
# with "@" (no op parameter can be named so): they say how the torch face runs the call, not
# what the op computes, so they never reach the op's instance.
TRAINING = "@training"        # bool: the op's training flag (what Dropout reads); True when absent
SPARSE_GRAD = "@sparse_grad"  # tuple of input positions: dense leaves whose gradient is sparse COO
SERIAL = "@serial"  # str: the op record a torch.compile trace was made against (OpDef.serial, in digits)


class CallOptions(NamedTuple):
    """The bridge's options of one call (``TRAINING``, ``SPARSE_GRAD``, ``SERIAL`` in its
    parameter string)."""

    training: bool = True
    sparse_grad: tuple[int, ...] = ()
    serial: str | None = None


_DEFAULT_OPTIONS = CallOptions()
_SPLIT: BoundedCache = BoundedCache(MAX_DECODED)  # parameter string -> (op parameters, CallOptions)


def split_params(text: str) -> tuple[dict[str, Any], CallOptions]:
    """(the op's parameters, the bridge's options) of a parameter string; cached per string.
    A BridgeError names an unknown ``@`` option or a value of the wrong type."""
    hit = _SPLIT.get(text)
    if hit is not None:
        return hit
    d = decode_params(text)
    if not any(k.startswith("@") for k in d):
        return _SPLIT.put(text, (d, _DEFAULT_OPTIONS))
    params = {k: v for k, v in d.items() if not k.startswith("@")}
    unknown = sorted(k for k in d if k.startswith("@") and k not in (TRAINING, SPARSE_GRAD, SERIAL))
    if unknown:
        raise BridgeError(f"unknown bridge option(s) {', '.join(unknown)} in the parameter string (options: "
                          f"{TRAINING} = a bool, {SPARSE_GRAD} = a tuple of input positions, {SERIAL} = a string of digits)")
    training = d.get(TRAINING, True)
    rows = d.get(SPARSE_GRAD, ())
    serial = d.get(SERIAL)
    if not isinstance(training, bool):
        raise BridgeError(f"{TRAINING} must be a bool, got {training!r}")
    if not isinstance(rows, tuple) or not all(type(i) is int and i >= 0 for i in rows):
        raise BridgeError(f"{SPARSE_GRAD} must be a tuple of input positions, got {rows!r}")
    if serial is not None and not (type(serial) is str and serial.isdigit()):
        raise BridgeError(f"{SERIAL} must be a string of digits, got {serial!r}")
    return _SPLIT.put(text, (params, CallOptions(training, rows, serial)))


def call_options(text: str) -> CallOptions:
    """The bridge's options of a parameter string (the defaults for "")."""
    return split_params(text)[1] if text else _DEFAULT_OPTIONS


def _instance(opdef: registry.OpDef, params: str) -> registry.Op:
    """The op's instance for a parameter string (its ``@`` options left out). A string
    traced against another record of the op (``SERIAL``: the op was replaced, or its plugin
    reloaded, after a ``torch.compile`` trace) is refused: the compiled graph was built for
    the old record's output shapes and dtypes."""
    if not params:
        return opdef._default_instance or opdef.instance({})
    values, options = split_params(params)
    if options.serial is not None and options.serial != opdef.serial:
        raise BridgeError(f"{opdef.label} was registered again (replaced, or its plugin reloaded) after this "
                          "code was traced by torch.compile, so the compiled graph expects the old version's "
                          "outputs; call torch.compiler.reset() and run it again to trace the new version")
    return opdef.instance(values)


# ---- overloads -------------------------------------------------------------------------------------
def overload_name(opdef: registry.OpDef, in_stypes: Sequence[str], out_stypes: Sequence[str]) -> str:
    """``default`` for the all-dense call of a fixed-arity op with its declared outputs
    (dense inputs, every output dense, hidden ones included: ``Dropout.default`` returns the
    output and its mask), else the storage codes of the inputs and the outputs: ``cd_r``.
    A variadic op's all-dense calls are named by their arity (``add_n.ddd_d``), and so are
    the all-dense calls of an op whose parameters change its number of outputs
    (``split(num_outputs=3)`` is ``split.d_ddd``): one schema per name."""
    if (not opdef.variadic and len(out_stypes) == len(opdef.outputs)
            and all(s == "default" for s in (*in_stypes, *out_stypes))):
        return "default"
    return "".join(CODES[s] for s in in_stypes) + "_" + "".join(CODES[s] for s in out_stypes) if in_stypes \
        else "n_" + "".join(CODES[s] for s in out_stypes)


class Overload:
    """One torch operator: op ``opdef`` for input storage types ``in_stypes`` and output
    storage types ``out_stypes`` (every output, hidden ones included)."""

    def __init__(self, opdef: registry.OpDef, in_stypes: tuple[str, ...], out_stypes: tuple[str, ...]) -> None:
        self.opdef, self.in_stypes, self.out_stypes = opdef, in_stypes, out_stypes
        self.name = overload_name(opdef, in_stypes, out_stypes)
        self.names = arg_names(opdef, len(in_stypes))
        self.nparts_out = sum(PARTS[s] for s in out_stypes)
        self.nparts_in = sum(PARTS[s] + (s != "default") for s in in_stypes)  # + the shape argument
        self.qualname = f"{NAMESPACE}::{opdef.name}" + ("" if self.name == "default" else f".{self.name}")
        self.dense = all(s == "default" for s in (*in_stypes, *out_stypes))
        self.torch_op: Any = None
        self.ready = False  # defined with torch (overload_for): what other threads may take
        self.backward_op: Any = None       # <overload>_backward: the gradient under tracing
        self.backward_rows_op: Any = None  # <overload>_backward_rows: the same, some as (values, rows)
        self.impl: Callable | None = None      # the registered implementation
        self.setup: Callable | None = None     # the autograd formula registered for it (None:
        self.backward: Callable | None = None  # it updates an input, so torch sees a constant)
        self.mutated = [i for i, n in enumerate(self.names) if n in opdef.mutate]
        self.slots = _arg_slots(self)  # each input's first component among the operator's arguments

    def schema(self) -> str:
        args, letters = [], iter("abcdefghijklmnopqrstuvwxyz")
        for i, (name, st) in enumerate(zip(self.names, self.in_stypes)):
            if st == "default":
                ann = f"({next(letters)}!)" if i in self.mutated else ""
                args.append(f"Tensor{ann} {name}")
            elif i in self.mutated:
                raise BridgeError(f"{self.opdef.label}: its input {name!r} is updated in place, which the torch "
                                  f"bridge supports for dense inputs only (got {st})")
            elif st == "csr":
                args += [f"Tensor {name}_values", f"Tensor {name}_indices", f"Tensor {name}_indptr",
                         f"SymInt[2] {name}_shape"]
            else:
                args += [f"Tensor {name}_values", f"Tensor {name}_indices", f"SymInt[] {name}_shape"]
        args.append('str params=""')
        rets = ["Tensor"] * sum(PARTS[s] for s in self.out_stypes)
        ret = rets[0] if len(rets) == 1 else "(" + ", ".join(rets) + ")"
        return f"{self.opdef.name}{'' if self.name == 'default' else '.' + self.name}({', '.join(args)}) -> {ret}"

    def backward_schema(self, rows: bool = False) -> str:
        """Component tensors of the inputs, then of every output, then one gradient tensor
        per output (dense, or the values of a sparse output), which inputs want a gradient,
        the parameters; returns one gradient tensor per input (dense, or the values of a
        sparse input; an empty tensor where none was asked for). With ``rows``, the
        ``<overload>_backward_rows`` operator: a list in which each dense input the
        parameters' ``@sparse_grad`` names has two tensors, the stored rows' values and
        their int64 row indices (its gradient as row_sparse: what torch.compile turns into
        a sparse COO gradient)."""
        fwd = self.schema()
        inner = fwd[fwd.index("(") + 1:fwd.rindex(") ->")].replace('str params=""', "").rstrip(", ")
        inner = inner.replace("(a!)", "").replace("(b!)", "").replace("(c!)", "")
        outs = []
        for j, st in enumerate(self.out_stypes):
            outs += [f"Tensor out{j}_{k}" for k in range(PARTS[st])]
        grads = [f"Tensor? grad{j}" for j in range(len(self.out_stypes))]
        rets = ", ".join(["Tensor"] * len(self.in_stypes))
        ret = "Tensor[]" if rows else rets if len(self.in_stypes) == 1 else f"({rets})"
        name = self.opdef.name + "." + self.name + ("_backward_rows" if rows else "_backward")
        return f"{name}({', '.join([inner] + outs + grads + ['bool[] needs', 'str params'])}) -> {ret}"


_LOCK = threading.RLock()
_LIBS: dict[str, Any] = {}                                 # op name -> its torch.library.Library
_OVERLOADS: dict[tuple[str, tuple, tuple], Overload] = {}  # (op name, in stypes, out stypes)


def overload_for(opdef: registry.OpDef, in_stypes: tuple[str, ...], out_stypes: tuple[str, ...]) -> Overload:
    """The registered torch overload of ``opdef`` for these storage types (defined on first use)."""
    key = (opdef.name, in_stypes, out_stypes)
    ov = _OVERLOADS.get(key)
    if ov is not None and ov.ready and ov.opdef is opdef:
        return ov
    with _LOCK:  # another thread defining it holds the lock until it is ready
        ov = _OVERLOADS.get(key)
        if ov is not None and ov.opdef is opdef:  # ready, or being defined by this thread (torch's look-up)
            return ov
        if ov is not None:  # the op was re-registered in our table: its torch op goes too
            forget(opdef.name)
        ov = Overload(opdef, in_stypes, out_stypes)
        _OVERLOADS[key] = ov  # before torch looks the op up (which may define its declared overloads)
        try:
            _define(ov)
        except BaseException:
            _OVERLOADS.pop(key, None)
            raise
        ov.ready = True
        return ov


def forget(name: str) -> None:
    """Drop the torch registrations of op ``name`` (it was replaced or removed in our table)."""
    with _LOCK:
        lib = _LIBS.pop(name, None)
        for key in [k for k in _OVERLOADS if k[0] == name]:
            del _OVERLOADS[key]
        if lib is not None:
            lib._destroy()
        ns = torch.ops.__dict__.get(NAMESPACE)
        if ns is not None:
            if name in ns.__dict__:
                delattr(ns, name)
            # also a name torch listed without caching its packet: torch's own walks over
            # torch.ops (the decomposition tables of torch.compile) would fail on it
            while name in getattr(ns, "_dir", []):
                ns._dir.remove(name)


def _define(ov: Overload) -> None:
    name = ov.opdef.name
    lib = _LIBS.get(name)
    if lib is None:
        lib = _LIBS[name] = torch.library.Library(NAMESPACE, "FRAGMENT")
    schema = ov.schema()
    if schema.count(", ") >= 64:
        raise BridgeError(f"{ov.opdef.label}: {len(ov.in_stypes)} inputs make {schema.count(', ') + 1} torch "
                          "operator arguments; torch takes at most 64 (pass fewer inputs per call)")
    lib.define(schema)
    qual = ov.qualname
    ov.impl = _make_impl(ov)
    lib.impl(qual.split("::")[1], ov.impl, "CompositeExplicitAutograd")
    if ov.mutated:  # torch's in-place ops bump the versions of what they update: so do ours
        lib.impl(qual.split("::")[1], _make_inplace_or_view(ov), "ADInplaceOrView", with_keyset=True)
    torch.library.register_fake(qual, _make_fake(ov), lib=lib)
    if not ov.mutated:  # torch differentiates functional operators only; ours that update are constants
        ov.setup, ov.backward = _make_setup(ov), _make_backward(ov)
        torch.library.register_autograd(qual, ov.backward, setup_context=ov.setup, lib=lib)
    packet = getattr(torch.ops.sparse_ops, name)
    ov.torch_op = getattr(packet, ov.name)
    if not ov.mutated:  # torch.func.vmap (and torch.vmap) of the operator: a loop over the batch
        torch.library.register_vmap(qual, _make_vmap(ov, ov.torch_op, forward=True), lib=lib)
    bschema = ov.backward_schema()
    # torch schemas take at most 64 arguments: a call with that many inputs keeps its eager
    # backward, and a traced one says there is no backward operator
    if ov.opdef.differentiable and not ov.opdef.mutate and bschema.count(", ") < 64:
        lib.define(bschema)
        bname = ov.name + "_backward"
        lib.impl(f"{name}.{bname}", _make_backward_impl(ov), "CompositeExplicitAutograd")
        torch.library.register_fake(f"{NAMESPACE}::{name}.{bname}", _make_backward_fake(ov), lib=lib)
        ov.backward_op = getattr(packet, bname)
        torch.library.register_vmap(f"{NAMESPACE}::{name}.{bname}", _make_vmap(ov, ov.backward_op), lib=lib)
        if "default" in ov.in_stypes:  # a dense input may want its gradient as sparse COO (compiled code)
            lib.define(ov.backward_schema(rows=True))
            rname = ov.name + "_backward_rows"
            lib.impl(f"{name}.{rname}", _make_backward_impl(ov, rows=True), "CompositeExplicitAutograd")
            torch.library.register_fake(f"{NAMESPACE}::{name}.{rname}", _make_backward_fake(ov, rows=True), lib=lib)
            ov.backward_rows_op = getattr(packet, rname)


def _make_vmap(ov: Overload, torch_op: Any, forward: bool = False) -> Callable:
    """The vmap rule of ``torch_op`` (the overload, or its backward): the per-example loop
    (``_stacked``); the forward first refuses what the loop cannot serve (``check_vmap``)."""
    def vmap_rule(info: Any, in_dims: tuple, *args: Any) -> tuple[Any, Any]:
        if forward:
            check_vmap(ov, info.randomness, args[-1] if len(args) > ov.nparts_in else "")
        return _stacked(info.batch_size, in_dims, args, torch_op)

    return vmap_rule


# ---- from component tensors to containers and back -------------------------------------------
def _streams(t: torch.Tensor) -> Any:
    """Run our kernels on torch's current stream of ``t``'s gpu (CuPy's current stream, which
    our kernel launches use, becomes it); nothing on the host."""
    if t.device.type != "cuda":
        return contextlib.nullcontext()
    import cupy

    stream = torch.cuda.current_stream(t.device)
    return cupy.cuda.ExternalStream(stream.cuda_stream, t.device.index or 0)


def _dense(t: torch.Tensor, dev: Device | None = None) -> NDArray:
    if t.dtype not in _VALUE_TORCH_DTYPES:
        numpy_dtype(t.dtype)  # a TorchBridgeError naming the dtypes we hold
    if not t.is_contiguous():
        t = t.contiguous()
    return NDArray(array_of(t), dev or device_of(t))


def inputs_of(ov: Overload, args: Sequence[Any], check: bool = True) -> tuple[list[NDArray], int]:
    """Our containers over the component arguments of ``ov`` (validated by the boundary's
    full check unless ``check`` is False: components our own calls made) and the position
    after them."""
    arrays, k = [], 0
    for st, name in zip(ov.in_stypes, ov.names):
        n = PARTS[st]
        try:
            if st == "default":
                arrays.append(_dense(args[k]))
            else:
                tensors, shape = args[k:k + n], tuple(int(s) for s in args[k + n])
                parts = [array_of(x if x.is_contiguous() else x.contiguous()) for x in tensors]
                arrays.append(admit(st, parts, shape, device_of(tensors[0]), FULL if check else OURS))
                k += 1  # the shape
        except (TypeError, ValueError) as exc:
            raise BridgeError(f"{ov.opdef.label}: argument {name!r} ({st}): {exc}") from exc
        k += n
    return arrays, k


def _base(a: Any) -> Any:
    while getattr(a, "base", None) is not None:
        a = a.base
    return a


def _overlaps(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return np.may_share_memory(a, b)
    try:
        import cupy

        return bool(cupy.may_share_memory(a, b))
    except Exception:
        return False


def output_parts(results: Sequence[NDArray], inputs: Sequence[NDArray], fresh: bool) -> list[Any]:
    """The component arrays of the outputs as torch wants them: indices int64, nothing
    aliasing an input or another output (copied where it would). ``fresh``: the dense
    kernel wrote into outputs allocated for it, so nothing can alias."""
    parts: list[Any] = []
    for r in results:
        if r.stype == "default":
            parts.append(r._data)
        elif r.stype == "csr":
            parts += [r._data, r._indices.astype(np.int64, copy=False), r._indptr.astype(np.int64, copy=False)]
        else:
            parts += [r._data, r._indices.astype(np.int64, copy=False)]
    if fresh and all(r.stype == "default" for r in results):
        return parts
    taken = [a for x in inputs for a in (x._data, *getattr(x, "_aux", lambda: ())())]
    out = []
    for p in parts:
        if any(_overlaps(p, q) for q in taken):
            p = p.copy()
        taken.append(p)
        out.append(p)
    return out


def _tensors(parts: Sequence[Any]) -> Any:
    ts = [tensor_of(p) for p in parts]
    return ts[0] if len(ts) == 1 else tuple(ts)


_CPU = Device("cpu", 0)


_NO_DRAWS = contextlib.nullcontext()


def torch_drawn(inst: registry.Op, training: bool) -> Any:
    """What a bridged call of ``inst`` runs in: for one that draws random numbers
    (``Op.draws_random``), a generator seeded with one draw from torch's default generator,
    so ``torch.manual_seed`` reproduces its draws as it does torch's own random ops (and
    ``torch.library.opcheck``, which seeds torch before each run it compares, sees the same
    numbers); nothing for the others."""
    if "random" not in inst.resources or not inst.draws_random(training):
        return _NO_DRAWS
    with torch._C._DisableFuncTorch():  # a plain draw, also inside vmap(..., randomness="different")'s loop
        seed = int(torch.randint(0, 2**63 - 1, (), dtype=torch.int64))
    return rng.drawing_from(np.random.Generator(np.random.PCG64(seed)))


def run_dense(ov: Overload, inst: registry.Op, tensors: Sequence[torch.Tensor],
              training: bool = True) -> list[torch.Tensor]:
    """The implementation for all-dense host tensors (contiguous, of our dtypes): zero-copy
    views, the plan, the kernel (its context's training flag ``training``: what Dropout
    reads), fresh outputs as tensors. The registered implementation calls it for such
    inputs, and eager calls reach it directly."""
    arrays = [NDArray(t.numpy(force=True), _CPU) for t in tensors]
    plan = plan_for(ov.opdef, inst, arrays)
    state = _state
    saved = state.recording, state.training
    state.recording, state.training = False, training  # torch's call: our tape never records it
    try:
        with torch_drawn(inst, training):
            if plan.nvis == plan.nout:
                res = plan.call(arrays)
                results = [res] if plan.nout == 1 else list(res)
            else:
                results = plan.execute(arrays)
    finally:
        state.recording, state.training = saved
    if plan.mode == "fcompute":  # the dense kernel wrote into outputs allocated for it
        return [tensor_of(r._data) for r in results]
    return [tensor_of(p) for p in output_parts(results, arrays, False)]


_functorch_active = torch._C._are_functorch_transforms_active  # a torch.func transform (grad, vjp, vmap) runs


def _plain_host(tensors: Sequence[Any]) -> bool:
    """Whether these are plain contiguous host tensors (``run_dense`` reads their memory)."""
    return all(t.__class__ is torch.Tensor and t.is_cpu and t.is_contiguous() for t in tensors)


def _run_call(args: tuple) -> Any:
    """The forward of ``TransformAutograd``: ``args`` is the operator's component arguments
    and parameter string, then the overload and the op instance."""
    ov, inst, inputs = args[-2], args[-1], args[:-2]
    tensors = inputs[:-1]
    if ov.dense and _plain_host(tensors):
        res = run_dense(ov, inst, tensors, call_options(inputs[-1]).training)
        return res[0] if len(res) == 1 else tuple(res)
    return ov.torch_op(*inputs)  # grad is off in a forward: the operator's implementation


def _setup_call(ctx: Any, args: tuple, output: Any) -> None:
    """What the overload's registered setup saves, for ``_run_call``'s ``args``."""
    ov = args[-2]
    ov.setup(ctx, args[:-2], output)
    ctx.overload = ov


class DenseAutograd(torch.autograd.Function):
    """A repeated all-dense host call whose plan has no array form (several outputs, such as
    Dropout's mask; ``BridgedOp._direct``) that torch's autograd records:
    ``apply(*args, params, ov, inst)`` runs what the registered operator ``ov`` runs for it
    (``run_dense``), then its registered setup, and later its registered backward, minus
    torch's dispatcher. Torch's autograd layer of a registered operator is such an autograd
    function too, wrapped in Python this call does not need (schema defaults, dispatch key
    sets, a redispatch): a fifth of a small op's forward and backward.

    Written with ``ctx`` in ``forward`` (the older form) on purpose: for a function with
    ``setup_context`` torch binds default arguments through ``inspect`` on every ``apply``,
    which doubles a small op's forward. ``torch.func`` transforms take only that form, so
    calls under a transform use ``TransformAutograd`` instead."""

    @staticmethod
    def forward(ctx: Any, *args: Any) -> Any:
        ov, inst = args[-2], args[-1]  # the caller checked: dense, plain, contiguous host tensors
        res = run_dense(ov, inst, args[:-3], call_options(args[-3]).training)
        out = res[0] if len(res) == 1 else tuple(res)
        _setup_call(ctx, args, out)
        return out

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        return (*ctx.overload.backward(ctx, *grads), None, None)


# ---- the shortest eager call: all-dense host tensors whose plan runs on arrays -----------------------
class HostCall(NamedTuple):
    """What a repeated eager call of a bridged op (one set of parameters, one number of
    inputs, all dense) needs to run again without being planned: the overload, the op
    instance, how many outputs are visible, the parameter string and its training flag,
    whether the first call was on the host, and the op's memoised plans (``OpDef.plans``,
    looked up by ``host_plan_key``)."""

    ov: Overload
    inst: registry.Op
    nvis: int
    ptext: str
    training: bool
    cpu: bool
    plans: dict


def host_plan_key(inst: registry.Op, arrays: Sequence[Any]) -> tuple:
    """``dispatch.plan_key(inst, [NDArray(a, cpu) for a in arrays])`` for one or more
    NumPy arrays, without making the containers: the key of the plan ``run_dense`` makes for
    these inputs (``tests/test_torch_percall.py`` checks the two agree)."""
    if len(arrays) == 1:
        a = arrays[0]
        return (inst, NDArray, _CPU, a.dtype, a.shape)
    if len(arrays) == 2:
        a, b = arrays
        return (inst, NDArray, _CPU, a.dtype, a.shape, NDArray, _CPU, b.dtype, b.shape)
    key: list = [inst]
    for a in arrays:
        key += (NDArray, _CPU, a.dtype, a.shape)
    return tuple(key)


class EagerAutograd(torch.autograd.Function):
    """A repeated all-dense host call whose plan has an array form (``Plan.arrays``: one
    dense output, computed by a trusted or checked dense kernel), recorded by torch's autograd:
    ``eager_apply(call, plan, arrays, *tensors)``, with ``call`` the ``HostCall``,
    ``plan`` the op's plan for these inputs and ``arrays`` NumPy views of ``tensors``.

    The forward is the plan's kernel on those views and the output as a tensor over the
    kernel's array; it saves the inputs and the output (torch checks, when the backward
    unpacks them, that nothing changed them in place since) and keeps the NumPy views for
    the backward, which runs ``gradients`` as the registered operator's backward does.
    Compared with ``DenseAutograd`` nothing is wrapped in containers on the way in or
    planned again, and ``apply`` is torch's own (below), so a small op's forward and
    backward cost little more than its kernels and gradient rule."""

    @staticmethod
    def forward(ctx: Any, call: HostCall, plan: Any, arrays: list, *tensors: torch.Tensor) -> torch.Tensor:
        y = plan.arrays(arrays, call.training)
        out = torch.from_numpy(y)
        ctx.call, ctx.arrays, ctx.marks = call, (*arrays, y), leaf_marks(tensors)
        ctx.save_for_backward(*tensors, out)
        if call.ov.opdef.constant:
            ctx.mark_non_differentiable(out)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        call = ctx.call
        saved = ctx.saved_tensors  # raises if an input or the output was changed in place
        n = len(saved) - 1
        needs = list(ctx.needs_input_grad[3:])
        result: list[Any] = [None] * (n + 1)
        if any(needs):
            arrays = ctx.arrays
            kept = (call.inst, [NDArray(a, _CPU) for a in arrays[:n]], [NDArray(arrays[n], _CPU)])
            gradients(call.ov, [*saved[:n], call.ptext], [saved[n]], (grad,), needs, range(n), result, kept,
                      ctx.marks)
        return (None, None, None, *result[:n])


# ---- eager host calls with sparse inputs or outputs ---------------------------------------------------
def host_inputs(ov: Overload, parts: Sequence[Any]) -> list[NDArray]:
    """Our containers over the component arguments ``parts`` of a host call of ``ov`` (plain
    contiguous cpu tensors, whose values' dtypes the caller checked, and each sparse
    argument's shape as a list): zero-copy NumPy views, sparse ones validated by the
    boundary's full check (``admit(FULL)``), as the registered implementation's
    ``inputs_of`` does for any device, minus its device look-ups."""
    arrays, k = [], 0
    for st, name in zip(ov.in_stypes, ov.names):
        if st == "default":
            t = parts[k]
            arrays.append(NDArray(t.detach().numpy() if t.requires_grad else t.numpy(), _CPU))
            k += 1
            continue
        n = PARTS[st]
        try:
            views = [t.detach().numpy() if t.requires_grad else t.numpy() for t in parts[k:k + n]]
            arrays.append(admit(st, views, tuple(parts[k + n]), _CPU, FULL))
        except (TypeError, ValueError) as exc:
            raise BridgeError(f"{ov.opdef.label}: argument {name!r} ({st}): {exc}") from exc
        k += n + 1
    return arrays


def host_plan(ov: Overload, inst: registry.Op, arrays: Sequence[NDArray]) -> Any:
    """The plan of a host call of ``ov`` on ``arrays``; a BridgeError when the op infers other
    output storage types than the overload returns."""
    plan = plan_for(ov.opdef, inst, arrays)
    if tuple(plan.out_stypes) != ov.out_stypes:
        raise BridgeError(f"{ov.opdef.label}: inferred output storage types {list(plan.out_stypes)}, but "
                          f"overload {ov.name} returns {list(ov.out_stypes)}")
    return plan


def run_host(plan: Any, arrays: Sequence[NDArray], training: bool) -> tuple[list[NDArray], tuple]:
    """(the output containers, the outputs' component tensors as the operator returns them)
    of ``plan`` on ``arrays``, never recorded on our tape, with the training flag ``training``."""
    with _scope(False, training), torch_drawn(plan.inst, training):
        results = plan.execute(arrays)
    return results, tuple(tensor_of(p) for p in output_parts(results, arrays, plan.mode not in STORAGE_AWARE))


def host_call(ov: Overload, inst: registry.Op, parts: Sequence[Any], ptext: str, grad: bool) -> tuple:
    """An eager host call of the registered operator ``ov`` on its component arguments
    ``parts`` (what ``host_inputs`` takes), without torch's dispatcher: what its
    implementation computes (every output's component tensors), and with ``grad`` recorded
    by torch's autograd with its autograd formula (``HostAutograd``)."""
    arrays = host_inputs(ov, parts)
    plan = host_plan(ov, inst, arrays)
    training = call_options(ptext).training
    if grad:
        res = host_apply(ov, inst, plan, arrays, training, ptext, *parts)
        return res if isinstance(res, tuple) else (res,)
    return run_host(plan, arrays, training)[1]


class HostAutograd(torch.autograd.Function):
    """An eager host call of an overload with sparse inputs or outputs, recorded by torch's
    autograd: ``apply(ov, inst, plan, arrays, training, ptext, *parts)`` runs ``plan`` on the
    containers ``arrays`` over the component arguments ``parts`` (``host_call``), saves what
    the registered setup saves, keeps the containers, and its backward is the registered
    backward's (``gradients``) on them. What the registered operator does for such a call,
    minus torch's dispatcher, its autograd wrapper and making the containers again."""

    @staticmethod
    def forward(ctx: Any, ov: Overload, inst: registry.Op, plan: Any, arrays: list, training: bool, ptext: str,
                *parts: Any) -> Any:
        results, out = run_host(plan, arrays, training)
        output = out[0] if len(out) == 1 else out
        ov.setup(ctx, (*parts, ptext), output)
        ctx.overload, ctx.kept = ov, (inst, arrays, results)
        return output

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        ov = ctx.overload
        slots = ov.slots
        result: list[Any] = [None] * (ov.nparts_in + 1)
        asked = ctx.needs_input_grad  # (a tuple torch builds on each read)
        needs = [bool(asked[6 + s]) for s in slots]
        if any(needs):
            saved = ctx.saved_tensors
            it = iter(saved[:ctx.ntensors])
            args = [next(it) if a is None else a for a in ctx.args]
            gradients(ov, args, list(saved[ctx.ntensors:]), grads, needs, slots, result, ctx.kept, ctx.marks)
        return (None,) * 6 + tuple(result[:ov.nparts_in])


def _function_apply(cls: type) -> Callable:
    """``cls.apply`` without ``torch.autograd.Function.apply``'s Python wrapper: its work
    (binding default arguments for a ``setup_context`` form, unwrapping dead ``torch.func``
    wrappers, redirecting under transforms) is none of a plain eager call's, which the
    caller has checked it is; torch's C ``apply`` records the function as the wrapper
    would. Falls back to ``cls.apply`` where torch lays ``_FunctionBase`` out otherwise."""
    try:
        return torch._C._FunctionBase.__dict__["apply"].__get__(None, cls)
    except (AttributeError, KeyError, TypeError):
        return cls.apply


eager_apply = _function_apply(EagerAutograd)
host_apply = _function_apply(HostAutograd)


class TransformAutograd(torch.autograd.Function):
    """A call under a ``torch.func`` transform (grad, vjp, jacrev, vmap): the same call as
    ``DenseAutograd`` (``apply(*args, params, ov, inst)``, the registered setup and backward
    of ``ov``), in the form transforms take, with ``setup_context`` (torch's generated
    autograd function of a registered operator has none). Under a transform the backward
    sees wrapped tensors and runs the ``<overload>_backward`` operator.

    ``vmap`` is a loop over the batch, one ``apply`` per example (so transforms below it, as
    in ``grad(vmap(f))``, see each call), results stacked; the backward operator's
    registered vmap rule is the same loop (``jacrev`` maps it over cotangents). Forward mode
    (``jvp``) is refused: gradient rules are vector-Jacobian products."""

    generate_vmap_rule = False  # the loop below: our kernels read memory, not traced torch code

    @staticmethod
    def forward(*args: Any) -> Any:
        return _run_call(args)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        _setup_call(ctx, inputs, output)

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        return (*ctx.overload.backward(ctx, *grads), None, None)

    @staticmethod
    def jvp(ctx: Any, *tangents: Any) -> Any:
        raise BridgeError(f"{ctx.overload.opdef.label}: forward-mode derivatives (torch.func.jvp, jacfwd, "
                          "torch.autograd.forward_ad) are not supported through the torch bridge: an op's gradient "
                          "rule is a vector-Jacobian product; use reverse mode (torch.func.grad, vjp, jacrev)")

    @staticmethod
    def vmap(info: Any, in_dims: tuple, *args: Any) -> tuple[Any, Any]:
        check_vmap(args[-2], info.randomness, args[-3])
        return _stacked(info.batch_size, in_dims, args, TransformAutograd.apply)


def check_vmap(ov: Overload, randomness: str, params: str) -> None:
    """Refuse, with the way out, a vmap the per-example loop cannot serve: sparse results
    (each example stores its own count of values: nothing to stack) and random draws unless
    vmap was told ``randomness="different"`` (each example draws its own numbers, as
    torch's random ops do under it; "error", vmap's default, refuses random ops as torch's
    own do, and "same" is not supported). A call that draws nothing (Dropout with
    ``training=False``, as ``F.dropout`` then) is no random op: ``params``, the parameter
    string, says."""
    label = ov.opdef.label
    if any(s != "default" for s in ov.out_stypes):
        raise BridgeError(f"{label}: torch.func.vmap over a call with sparse results ({', '.join(ov.out_stypes)}) is "
                          "not supported: each example stores its own number of values, so they cannot be stacked; "
                          "call the op per example")
    if randomness != "different" and "random" in ov.opdef.resources and \
            _instance(ov.opdef, params).draws_random(call_options(params).training):
        raise BridgeError(f"{label}: draws random numbers, and torch.func.vmap was called with randomness="
                          f"{randomness!r}; pass randomness='different' (each example draws its own numbers)")


def _stacked(n: int, in_dims: tuple, args: tuple, call: Callable) -> tuple[Any, Any]:
    """vmap as a loop: ``call`` on example ``b`` of each batched tensor argument (``in_dims``:
    its batch dimension; None, or a list of them for a list argument, for the others) for
    every b < ``n``, each result stacked along a new dimension 0; returns (results,
    out_dims) as a vmap rule does. An empty batch gives empty results, shaped by the call on
    one example's meta tensors (the op's shape and type rules: its registered fake)."""
    if n == 0:
        def example(a: Any, d: Any) -> Any:
            if not isinstance(a, torch.Tensor):
                return a
            shape = a.shape[:d] + a.shape[d + 1:] if isinstance(d, int) else a.shape
            return torch.empty(shape, dtype=a.dtype, device="meta")

        out = call(*[example(a, d) for a, d in zip(args, in_dims)])
        device = next(a.device for a in args if isinstance(a, torch.Tensor))
        stacked = tuple(torch.empty((0, *o.shape), dtype=o.dtype, device=device)
                        for o in (out if isinstance(out, (tuple, list)) else (out,)))
        return (stacked[0], 0) if len(stacked) == 1 else (stacked, (0,) * len(stacked))
    per = []
    for b in range(n):
        out = call(*[a.select(d, b) if isinstance(d, int) and isinstance(a, torch.Tensor) else a
                     for a, d in zip(args, in_dims)])
        per.append(tuple(out) if isinstance(out, (tuple, list)) else (out,))
    stacked = tuple(torch.stack(col) for col in zip(*per))
    return (stacked[0], 0) if len(stacked) == 1 else (stacked, (0,) * len(stacked))


def _speaking_torch(fn: Callable) -> Callable:
    """``fn`` (an operator's implementation or fake) whose OperatorErrors are worded for torch
    users (``torch_wording``: torch's dtype names, ``.to(...)``), the original kept as the
    cause: ``torch.ops.sparse_ops.<name>`` callers read what ``sparse_ops.torch.ops`` ones do."""
    @functools.wraps(fn)
    def speaking(*args: Any) -> Any:
        try:
            return fn(*args)
        except OperatorError as exc:
            text = spoken(exc)
            if text == str(exc):
                raise
            raise quoting(BridgeError(text), exc) from exc

    return speaking


def _make_impl(ov: Overload) -> Callable:
    opdef, expected, dense = ov.opdef, list(ov.out_stypes), ov.dense

    def impl(*args: Any) -> Any:
        params = args[ov.nparts_in] if len(args) > ov.nparts_in else ""
        training = call_options(params).training
        if dense and all(t.is_cpu and t.is_contiguous() for t in args[:ov.nparts_in]):
            got = run_dense(ov, _instance(opdef, params), args[:ov.nparts_in], training)
            return got[0] if len(got) == 1 else tuple(got)
        inst = _instance(opdef, params)
        first = args[0] if args else None
        # on a gpu everything from here runs on torch's current stream, DLPack exchanges included
        with _streams(first) if isinstance(first, torch.Tensor) else contextlib.nullcontext():
            arrays, k = inputs_of(ov, args)
            plan = plan_for(opdef, inst, arrays)
            if list(plan.out_stypes) != expected:
                raise BridgeError(f"{opdef.label}: inferred output storage types {list(plan.out_stypes)}, but "
                                  f"overload {ov.name} returns {expected}")
            with _scope(False, training), torch_drawn(inst, training):
                results = plan.execute(arrays)
            if ov.mutated:
                _write_back(ov, args, arrays)
            parts = output_parts(results, arrays, plan.mode not in STORAGE_AWARE)
            return _tensors(parts)

    return _speaking_torch(impl)


def _make_inplace_or_view(ov: Overload) -> Callable:
    """The ADInplaceOrView kernel of an overload that updates inputs in place (``ov.mutated``,
    ``Tensor(a!)`` in its schema): bumps their version counters, as torch's own in-place ops
    do, so autograd refuses a backward through a tensor saved before the update; then the
    call goes on to the implementation (what ``torch.library.custom_op`` does for its
    mutating ops)."""
    slots = [_arg_slots(ov)[i] for i in ov.mutated]
    below = torch._C._after_ADInplaceOrView_keyset

    def inplace_or_view(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        torch.autograd.graph.increment_version([args[s] for s in slots])
        return ov.torch_op.redispatch(keyset & below, *args, **kwargs)

    return inplace_or_view


def _write_back(ov: Overload, args: Sequence[Any], arrays: Sequence[NDArray]) -> None:
    """Updated inputs the kernel wrote into a contiguous copy of (``_dense`` copies a
    non-contiguous tensor): their new values go back into the caller's tensors."""
    slots = _arg_slots(ov)
    for i in ov.mutated:
        t = args[slots[i]]
        if not t.is_contiguous():
            t.copy_(tensor_of(arrays[i]._data))


def infer_meta(ov: Overload, args: Sequence[Any]) -> tuple[registry.Op, list, list, Any]:
    """(op instance, output shapes, output torch dtypes, device) from component arguments
    (real or fake tensors): the op's own shape and dtype rules, nothing run."""
    shapes, dtypes, k, dev = [], [], 0, None
    for st in ov.in_stypes:
        v = args[k]
        dev = dev or v.device
        if st == "default":
            shapes.append(tuple(v.shape))
            k += 1
        else:
            n = 4 if st == "csr" else 3
            shapes.append(tuple(args[k + n - 1]))
            k += n
        dtypes.append(numpy_dtype(v.dtype))
    params = args[k] if len(args) > k else ""
    opdef = ov.opdef
    if not getattr(opdef.cls, "symbolic_shapes", True):  # rules on concrete sizes only (C callbacks):
        shapes = [tuple(int(d) for d in s) for s in shapes]  # symbolic sizes specialized, guarded
    inst = _instance(opdef, params)
    out_shapes = infer_shapes(opdef, inst, shapes, traced=True)
    out_dtypes = [torch_dtype(d) for d in infer_dtypes(opdef, inst, dtypes)]
    if dev is None:  # no inputs: the op's device parameter
        d = getattr(inst, "device", None)
        dev = torch_device(as_device(d)) if d is not None else torch.device("cpu")
    return inst, out_shapes, out_dtypes, dev


def _make_fake(ov: Overload) -> Callable:
    def fake(*args: Any) -> Any:
        inst, shapes, dtypes, dev = infer_meta(ov, args)
        out = []
        for st, shape, dt in zip(ov.out_stypes, shapes, dtypes):
            shape = tuple(shape)
            if st == "default":
                out.append(torch.empty(shape, dtype=dt, device=dev))
                continue
            nnz = torch.library.get_ctx().new_dynamic_size()  # how many values are stored: data decides
            if st == "csr":
                out += [torch.empty((nnz,), dtype=dt, device=dev), torch.empty((nnz,), dtype=torch.int64, device=dev),
                        torch.empty((shape[0] + 1,), dtype=torch.int64, device=dev)]
            else:
                out += [torch.empty((nnz, *shape[1:]), dtype=dt, device=dev),
                        torch.empty((nnz,), dtype=torch.int64, device=dev)]
        return out[0] if len(out) == 1 else tuple(out)

    return _speaking_torch(fake)


# ---- autograd ------------------------------------------------------------------------------------------
def _out_arrays(ov: Overload, outs: Sequence[torch.Tensor], shapes: Sequence[tuple]) -> list[NDArray]:
    arrays, k = [], 0
    for st, shape in zip(ov.out_stypes, shapes):
        if st == "default":
            arrays.append(_dense(outs[k]))
        else:
            parts = [array_of(t) for t in outs[k:k + PARTS[st]]]
            arrays.append(admit(st, parts, tuple(shape), device_of(outs[k]), OURS))
        k += PARTS[st]
    return arrays


def _grad_array(ov: Overload, j: int, g: torch.Tensor | None, out: NDArray) -> NDArray:
    """The gradient of output ``j`` as our container: dense, or the output's structure with
    the gradient of its stored values; zeros when torch has none."""
    from ..creation import zeros

    if g is None:
        return zeros(out.shape, stype=out.stype, dtype=out.dtype, device=out.device)
    if g.layout != torch.strided:
        g = g.to_dense()
    data = array_of(g.contiguous())
    if out.stype == "default":
        return NDArray(data, out.device)
    return out._with_values(data.astype(out.dtype, copy=False), copy_aux=False)


def run_gradient(ov: Overload, inst: registry.Op, inputs: list[NDArray], outputs: list[NDArray],
                 out_grads: list[NDArray], needs: list[bool], record: bool = False) -> list:
    """The op's own gradient rule on our containers, only for ``needs`` (recorded on our
    tape when ``record``: second order differentiates it)."""
    return framework_gradient(inst, out_grads, inputs, outputs, needs, face="torch autograd", prefix="",
                              error=BridgeError, record=record)


def _arg_slots(ov: Overload) -> list[int]:
    """For each input, the position of its dense tensor or values tensor among the op's arguments."""
    slots, k = [], 0
    for st in ov.in_stypes:
        slots.append(k)
        k += 1 if st == "default" else PARTS[st] + 1
    return slots


def _make_setup(ov: Overload) -> Callable:
    nout = sum(PARTS[s] for s in ov.out_stypes)

    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        outs = (output,) if nout == 1 else tuple(output)
        if ov.opdef.constant:
            ctx.mark_non_differentiable(*outs)
        tensors = [a for a in inputs if isinstance(a, torch.Tensor)]
        ctx.ntensors = len(tensors)
        ctx.args = [None if isinstance(a, torch.Tensor) else a for a in inputs]
        ctx.marks = leaf_marks(inputs)
        ctx.save_for_backward(*tensors, *outs)

    return setup_context


# ---- which dense inputs get sparse gradients ---------------------------------------------------------
# torch's rule: a dense parameter gets a dense gradient unless its user asked for a sparse one
# (nn.Embedding(sparse=True), F.embedding(sparse=True)). So does the bridge: a gradient rule's
# row_sparse gradient of a dense input is densified, unless the input is a leaf marked by
# ``sparse_grad(t)`` or the call's op parameter ``sparse_grad=True`` asks (Embedding's, the
# cookbook's csr_spmm's); then it is torch's coalesced sparse COO gradient, which SGD,
# SparseAdam and Adagrad take. Inside torch.compile the bridged call names such inputs in
# the parameter string (``@sparse_grad``), decided when Dynamo traces it.
_MARK = "_sparse_ops_sparse_grad"


def sparse_grad(tensor: torch.Tensor, enabled: bool = True) -> torch.Tensor:
    """Mark ``tensor`` (a dense leaf: a parameter) so that every bridged op gives it its
    gradient as a coalesced sparse COO tensor (row_sparse: the rows the gradient stores,
    ``sparse_dim=1``), the per-tensor switch that ``nn.Embedding(sparse=True)`` is for torch's
    embedding; ``enabled=False`` removes the mark. Returns ``tensor``, so
    ``self.w = st.sparse_grad(nn.Parameter(...))`` reads as a declaration.

    Unmarked dense tensors get dense gradients, as torch's own ops give them. A gradient
    rule that makes a dense gradient for a marked tensor has it stored as row_sparse too (the
    rows with a nonzero). Intermediate results are never given sparse gradients: the torch
    ops before them take strided gradients only. Works eagerly and inside ``torch.compile``
    (fullgraph included: Dynamo reads the mark, guards it, and the compiled backward builds
    the sparse gradient); ``torch.func`` transforms give dense gradients (they have no
    sparse tensors)."""
    if not isinstance(tensor, torch.Tensor) or tensor.layout != torch.strided:
        raise TypeError(f"sparse_grad marks a dense (strided) torch.Tensor, got "
                        f"{type(tensor).__name__ if not isinstance(tensor, torch.Tensor) else tensor.layout}")
    if tensor.dim() < 1:
        raise ValueError("sparse_grad: a 0-d tensor has no rows to store sparsely")
    if enabled and not tensor.is_leaf:
        raise ValueError("sparse_grad marks a leaf tensor (a parameter): this one is the result of an operation, "
                         "whose gradient never reaches a .grad; mark the leaf it was computed from")
    if enabled and not (tensor.is_floating_point() or tensor.is_complex()):
        raise TypeError(f"sparse_grad: a tensor of dtype {tensor.dtype} has no gradient (only floating-point "
                        "tensors do)")
    if enabled:
        setattr(tensor, _MARK, True)
        if tensor.is_leaf and tensor.requires_grad:  # compiled backwards too: their .grad keeps the flag
            keep_coalesced_flag(tensor)
    elif hasattr(tensor, _MARK):
        delattr(tensor, _MARK)
    return tensor


def is_sparse_grad(tensor: Any) -> bool:
    """Whether ``tensor`` is marked by ``sparse_grad``."""
    return bool(getattr(tensor, _MARK, False))


def op_asks_sparse_grad(opdef: registry.OpDef, inst: registry.Op) -> bool:
    """Whether the call's own op parameter ``sparse_grad`` is set (Embedding, csr_spmm):
    the per-call way to ask for sparse gradients of its dense inputs."""
    return "sparse_grad" in opdef.params and bool(getattr(inst, "sparse_grad", False))


LEAF, MARKED_LEAF = 1, 2  # what ``leaf_marks`` records of a call's argument (0: anything else)


def leaf_marks(args: Sequence[Any]) -> tuple[int, ...]:
    """For each argument of a call, as its forward sees it: ``MARKED_LEAF`` for a leaf tensor
    marked ``sparse_grad``, ``LEAF`` for another leaf, 0 otherwise. Kept for the backward,
    which may see other tensor objects (unpacked by ``torch.utils.checkpoint`` or saved-
    tensor hooks: not leaves, without the mark)."""
    return tuple((MARKED_LEAF if getattr(a, _MARK, False) else LEAF) if isinstance(a, torch.Tensor) and a.is_leaf
                 else 0 for a in args)


def wants_sparse(ov: Overload, inst: registry.Op, options: CallOptions, args: Sequence[Any],
                 slots: Sequence[int], needs: Sequence[bool], marks: Sequence[int] | None = None) -> list[bool]:
    """For each input of an eager call, whether its gradient goes to torch as sparse COO: a
    dense leaf with a dimension that ``needs`` one, marked (``sparse_grad``), named by
    ``@sparse_grad`` or asked for by the op's ``sparse_grad`` parameter. ``marks``: the
    arguments' ``leaf_marks`` from the forward (else read off ``args`` now)."""
    asks = op_asks_sparse_grad(ov.opdef, inst)
    marks = leaf_marks(args) if marks is None else marks
    out = [False] * len(slots)
    for i, (st, s) in enumerate(zip(ov.in_stypes, slots)):
        if needs[i] and st == "default" and marks[s] and args[s].dim() >= 1:
            out[i] = bool(asks or i in options.sparse_grad or marks[s] == MARKED_LEAF)
    return out


def _mark_coalesced(p: torch.Tensor) -> None:
    g, given = p.grad, p.__dict__.pop(_GIVEN, None)
    if g is not None and g.layout == torch.sparse_coo and g.sparse_dim() == 1 and not g.is_coalesced():
        idx = g._indices()
        if given is not None and (given[0].data_ptr(), given[1].data_ptr()) == (idx.data_ptr(), g._values().data_ptr()):
            ordered = True  # the components of the coalesced gradient we returned, re-wrapped as they are
        elif idx.is_cpu:  # on the host, NumPy on a view: a third of torch's time for a few thousand rows
            rows = idx[0].numpy()
            ordered = rows.shape[0] < 2 or bool((rows[1:] > rows[:-1]).all())
        else:
            ordered = idx.shape[1] < 2 or bool((idx[0, 1:] > idx[0, :-1]).all())
        if ordered:
            g._coalesced_(True)


_GIVEN = "_sparse_ops_given"


def keep_coalesced_flag(param: torch.Tensor, grad: torch.Tensor | None = None) -> None:
    """Keep the coalesced flag of sparse gradients in ``param.grad``: torch's AccumulateGrad
    re-wraps the coalesced COO gradient we return without its flag (as it does for
    ``nn.Embedding(sparse=True)``), so after accumulation a hook sets it again when the
    stored rows are sorted and unique, sparing optimizers a sort in ``grad.coalesce()``. A
    sum of several sparse gradients that is not stays unflagged. ``grad``: the coalesced
    gradient about to be returned for ``param``, whose components the param holds until
    the hook: when ``.grad`` holds those very buffers (the pass's one gradient, re-wrapped)
    the hook trusts the flag instead of an O(nnz) check (held, they cannot have been freed
    and reused by another tensor). Called by the backward that makes such a gradient: a
    hook added then runs in that same pass."""
    if grad is not None:
        param.__dict__[_GIVEN] = (grad._indices(), grad._values())
    if not getattr(param, "_sparse_ops_flag_hook", False):
        param.register_post_accumulate_grad_hook(_mark_coalesced)
        param._sparse_ops_flag_hook = True


def _tracing(tensors: Sequence[Any]) -> bool:
    """Whether these tensors are being traced (torch.compile, make_fx) or a ``torch.func``
    transform runs (its tensors are wrapped): then the backward is itself an operator
    (``<overload>_backward``) rather than Python on their memory."""
    if torch.compiler.is_compiling() or _functorch_active():
        return True
    for t in tensors:
        if t is not None and type(t) is not torch.Tensor and not isinstance(t, torch.nn.Parameter):
            return True
    return False


def _host(t: torch.Tensor) -> NDArray:
    """A dense container over a cpu tensor's memory (a contiguous copy if it has to)."""
    if not t.is_contiguous():
        t = t.contiguous()
    return NDArray(t.numpy(force=True) if t.requires_grad else t.numpy(), _CPU)


def _make_backward(ov: Overload) -> Callable:
    """The registered autograd formula's backward: the saved component tensors back in
    their argument positions, then ``gradients``."""
    slots = _arg_slots(ov)
    nparts = ov.nparts_in

    def backward(ctx: Any, *grads: Any) -> Any:
        result: list[Any] = [None] * (nparts + 1)
        asked = ctx.needs_input_grad  # (a tuple torch builds on each read)
        needs = [bool(asked[s]) for s in slots]
        if not any(needs):
            return tuple(result)
        saved = ctx.saved_tensors
        it = iter(saved[:ctx.ntensors])
        args = [next(it) if a is None else a for a in ctx.args]
        return gradients(ov, args, list(saved[ctx.ntensors:]), grads, needs, slots, result, None, ctx.marks)

    return backward


def gradients(ov: Overload, args: list, outs: list, grads: Sequence[Any], needs: list[bool], slots: Sequence[int],
              result: list, kept: tuple | None = None, marks: Sequence[int] | None = None) -> tuple:
    """The gradients of a call of ``ov`` (its component arguments ``args``, parameter string
    included, and outputs ``outs``; ``grads`` the outputs' gradients), written into
    ``result`` at the inputs' argument positions ``slots`` where ``needs`` says: the
    ``<overload>_backward`` operator when traced, our engine's derivative of the rule under
    ``create_graph=True``, else the op's gradient rule on zero-copy views of the tensors.
    ``kept``: (op instance, input containers, output containers) of a host call that kept
    them from its forward (``EagerAutograd``, ``HostAutograd``), so they are not made
    again; ``marks``: the arguments' ``leaf_marks`` as the forward saw them."""
    nparts = ov.nparts_in
    params = args[nparts] if len(args) > nparts else ""
    saved = [a for a in args[:nparts] if isinstance(a, torch.Tensor)] + list(outs)
    if _tracing([*saved, *grads]):
        return _traced_gradients(ov, args, outs, grads, needs, params, result, slots)
    if torch.is_grad_enabled():
        return create_graph_backward(ov, args, outs, grads, needs, result, slots)
    if kept is None and ov.dense and all(t.is_cpu for t in saved):
        kept = (_instance(ov.opdef, params), [_host(a) for a in args[:nparts]], [_host(o) for o in outs])
    with _streams(saved[0]) if saved and kept is None else contextlib.nullcontext():
        if kept is not None:
            inst, inputs, out_arrays = kept
        else:
            inputs, _ = inputs_of(ov, args, check=False)
            if all(s == "default" for s in ov.out_stypes):  # the outputs' tensors have their shapes
                inst, shapes = _instance(ov.opdef, params), [tuple(o.shape) for o in outs]
            else:  # sparse outputs' shapes: the op's rule
                inst, shapes, _, _ = infer_meta(ov, args)
            out_arrays = _out_arrays(ov, outs, shapes)
        gk, out_grads = 0, []
        for j, (st, o) in enumerate(zip(ov.out_stypes, out_arrays)):
            g = grads[gk]
            # a dense gradient of a dense host output: a view of it (what _grad_array does, shorter)
            out_grads.append(_host(g) if st == "default" and g is not None and g.__class__ is torch.Tensor
                             and g.layout is torch.strided and g.is_cpu else _grad_array(ov, j, g, o))
            gk += PARTS[st]
        gs = run_gradient(ov, inst, inputs, out_arrays, out_grads, needs)
    sparse = wants_sparse(ov, inst, call_options(params), args, slots, needs, marks)
    return _torch_gradients(gs, inputs, args, slots, needs, sparse, result)


def _differentiated_again(tensors: Sequence[Any]) -> bool:
    """Whether an enclosing ``torch.func`` gradient transform tracks any of these tensors
    (a grad-tracking wrapper of a lower level that needs a gradient, under the wrapper of the
    transform running this backward): the gradient computed from them would be
    differentiated again. The backward operator is opaque to torch's autograd, so that
    derivative would silently read zero."""
    F = torch._C._functorch
    for t in tensors:
        if not isinstance(t, torch.Tensor) or not F.is_functorch_wrapped_tensor(t):
            continue
        inner = F.get_unwrapped(t)
        while F.is_functorch_wrapped_tensor(inner):
            if F.is_gradtrackingtensor(inner) and inner.requires_grad:
                return True
            inner = F.get_unwrapped(inner)
    return False


def _traced_gradients(ov: Overload, args: list, outs: list, grads: Sequence[Any], needs: list[bool], params: str,
                      result: list, slots: list[int]) -> tuple:
    """The backward of a traced call (torch.compile, make_fx, torch.func): the
    ``<overload>_backward`` operator, or ``<overload>_backward_rows`` where the parameter
    string names dense inputs for sparse gradients (``@sparse_grad``, put there when Dynamo
    traced the call): those come back as (values, row indices), assembled here into the
    coalesced sparse COO gradient the compiled backward hands to ``.grad``."""
    if ov.backward_op is None:
        raise BridgeError(f"{ov.opdef.label}: no gradient to trace (declares none, or updates inputs in place)")
    if _functorch_active() and _differentiated_again([*args, *outs, *grads]):
        raise BridgeError(f"sparse_ops.torch.ops.{ov.opdef.name}: derivatives of its gradient under torch.func "
                          "(grad of grad, jacrev of jacrev, hessian) are not supported through the torch bridge; "
                          "torch.autograd.grad(..., create_graph=True) gives the second derivative of a call with "
                          "dense inputs and outputs")
    nparts = ov.nparts_in
    gparts, k = [], 0
    for st in ov.out_stypes:
        gparts.append(grads[k])
        k += PARTS[st]
    rows = [i in call_options(params).sparse_grad and st == "default" and needs[i]
            for i, st in enumerate(ov.in_stypes)]
    if any(rows) and ov.backward_rows_op is not None:
        got = ov.backward_rows_op(*args[:nparts], *outs, *gparts, needs, params)
        k = 0
        for i, s in enumerate(slots):
            if rows[i]:
                result[s] = sparse_rows(got[k], got[k + 1], tuple(args[s].shape))
                k += 2
            else:
                if needs[i]:
                    result[s] = got[k]
                k += 1
        return tuple(result)
    got = ov.backward_op(*args[:nparts], *outs, *gparts, needs, params)
    got = (got,) if len(ov.in_stypes) == 1 else got
    for i, (s, g) in enumerate(zip(slots, got)):
        if needs[i]:
            result[s] = g
    return tuple(result)


def _as_rows(g: NDArray) -> NDArray:
    """A gradient of a dense input as row_sparse (a dense or csr one keeps its rows with a nonzero)."""
    return g if g.stype == "row_sparse" else g.tostype("row_sparse")


def _torch_gradients(gs: list, inputs: list[NDArray], args: list, slots: list[int], needs: list[bool],
                     sparse: list[bool], result: list) -> tuple:
    """The gradients ``gs`` of ``inputs`` as torch wants them, at the inputs' argument
    positions ``slots`` of ``result``: dense for a dense input, except where ``sparse`` says
    the user asked for a sparse one (``wants_sparse``): torch's coalesced sparse COO gradient
    of its rows, which the leaf's ``.grad`` holds; the gradient of each stored value for a
    sparse input."""
    for i, (s, g, x) in enumerate(zip(slots, gs, inputs)):
        if not needs[i]:
            continue
        if g is None:  # asked for, but the rule gives this input none: zero by design
            result[s] = torch.zeros_like(args[s])
            continue
        if sparse[i]:
            # what nn.Embedding(sparse=True) gives; SGD, SparseAdam and Adagrad take it
            r = _as_rows(g)
            values = tensor_of(r._data.astype(x.dtype, copy=False))
            result[s] = sparse_rows(values, tensor_of(r._indices), x.shape)
            keep_coalesced_flag(args[s], result[s])  # the saved leaf itself: its .grad will hold it
        else:
            a = g._data if g.__class__ is NDArray and x.__class__ is NDArray else aligned(g, x)  # dense: as it is
            result[s] = tensor_of(a.astype(x.dtype, copy=False) if a.dtype != x.dtype else a)
    return tuple(result)


def _make_backward_impl(ov: Overload, rows: bool = False) -> Callable:
    """The implementation of ``<overload>_backward`` (one gradient tensor per input) or, with
    ``rows``, of ``<overload>_backward_rows`` (a list; the dense inputs that the parameters'
    ``@sparse_grad`` names get two tensors: their gradient's stored rows and row indices)."""
    nparts = ov.nparts_in
    nout = sum(PARTS[s] for s in ov.out_stypes)

    def backward_impl(*args: Any) -> Any:
        fargs = list(args[:nparts])
        outs = list(args[nparts:nparts + nout])
        grads = list(args[nparts + nout:nparts + nout + len(ov.out_stypes)])
        needs, params = args[-2], args[-1]
        as_rows = call_options(params).sparse_grad if rows else ()
        with _streams(args[0]):
            inputs, _ = inputs_of(ov, fargs)
            inst, shapes, _, _ = infer_meta(ov, fargs + [params])
            out_arrays = _out_arrays(ov, outs, shapes)
            out_grads = [_grad_array(ov, j, g, o) for j, (g, o) in enumerate(zip(grads, out_arrays))]
            gs = run_gradient(ov, inst, inputs, out_arrays, out_grads, list(needs))
            taken = _all_parts(inputs, out_arrays)
            res = []
            for i, (g, x, n) in enumerate(zip(gs, inputs, needs)):
                xp = x.device.xp
                if g is None and n:  # asked for, but the rule gives this input none: zero by design
                    g = x._with_values(x._data * 0, copy_aux=False) if x.stype != "default" else NDArray(
                        x._data * 0, x.device)
                if n and i in as_rows and x.stype == "default":
                    r = _as_rows(g)
                    res += [_fresh(r._data.astype(x.dtype, copy=False), xp, taken),
                            _fresh(r._indices.astype(np.int64, copy=False), xp, taken)]
                elif g is None or not n:
                    res.append(tensor_of(np.empty(0, x.dtype)) if xp is np else
                               torch.empty(0, dtype=torch_dtype(x.dtype), device=torch_device(x.device)))
                else:
                    # the fake gives a fresh contiguous tensor: so must this (a sum's gradient
                    # is a zero-stride broadcast view; torch's checks compare strides)
                    res.append(_fresh(aligned(g, x).astype(x.dtype, copy=False), xp, taken))
        if rows:
            return res
        return res[0] if len(res) == 1 else tuple(res)

    return backward_impl


def _fresh(a: Any, xp: Any, taken: Sequence[Any]) -> torch.Tensor:
    """``a`` (of array module ``xp``) as a contiguous tensor sharing no memory with ``taken``
    (an operator's results never alias its arguments: copied where it would)."""
    a = xp.ascontiguousarray(a)
    return tensor_of(a.copy() if any(_overlaps(a, q) for q in taken) else a)


def _all_parts(*groups: Sequence[NDArray]) -> list:
    return [a for g in groups for x in g for a in (x._data, *getattr(x, "_aux", lambda: ())())]


def _make_backward_fake(ov: Overload, rows: bool = False) -> Callable:
    """The fake of ``<overload>_backward`` (or ``_backward_rows``: a row_sparse gradient's
    values and row indices have a dynamic number of rows)."""
    def backward_fake(*args: Any) -> Any:
        needs, params = args[-2], args[-1]
        as_rows = call_options(params).sparse_grad if rows else ()
        res, k = [], 0
        for i, (st, n) in enumerate(zip(ov.in_stypes, needs)):
            v = args[k]
            if n and i in as_rows and st == "default":
                nnz = torch.library.get_ctx().new_dynamic_size()
                res += [v.new_empty((nnz, *v.shape[1:])), v.new_empty((nnz,), dtype=torch.int64)]
            else:
                res.append(torch.empty_like(v) if n else v.new_empty((0,)))
            k += 1 if st == "default" else PARTS[st] + 1
        if rows:
            return res
        return res[0] if len(res) == 1 else tuple(res)

    return backward_fake


# ---- second order: the gradient rule, differentiated by our own engine --------------------------------
class _Vjp(torch.autograd.Function):
    """``fn`` (a function of dense containers, made of our operators, returning containers)
    as a torch autograd function whose backward is ``fn``'s vector-Jacobian product, which
    sparse-ops' own autograd computes by recording ``fn``. ``order`` counts the derivatives
    taken: the gradient rule is order 1, its derivative order 2, and there it stops."""

    @staticmethod
    def forward(ctx: Any, fn: Callable, order: int, *tensors: torch.Tensor) -> Any:
        arrays = [_dense(t) for t in tensors]
        res = fn(*arrays)
        ctx.fn, ctx.order = fn, order
        ctx.save_for_backward(*tensors)
        taken = [a._data for a in arrays]
        out = []
        for r in res:
            d = (r if r.stype == "default" else r.tostype("default"))._data
            out.append(tensor_of(d.copy() if any(_overlaps(d, q) for q in taken) else d))
        ctx.out_meta = [(tuple(t.shape), t.dtype) for t in out]
        return tuple(out)

    @staticmethod
    def backward(ctx: Any, *cots: torch.Tensor) -> Any:
        if ctx.order >= 2:
            raise BridgeError(f"{ctx.fn.label}: derivatives of third order and beyond are not supported through the "
                              "torch bridge (create_graph=True works once: second order)")
        tensors, fn = ctx.saved_tensors, ctx.fn
        n = len(tensors)

        def vjp(*arrays: NDArray) -> list:
            xs, cs = [NDArray(a._data, a.device) for a in arrays[:n]], list(arrays[n:])
            for x in xs:  # index inputs too (their gradients are asked for and dropped)
                attach_gradient_buffer(x)
            with _ag.record():
                ys = fn(*xs)
            why = next((y._ag.constant for y in ys if y._ag is not None and y._ag.constant), None)
            if why is not None:  # a zero would be a wrong answer, not a derivative
                raise BridgeError(f"{fn.label}: the derivative of the gradient rule, taken by the sparse-ops "
                                  f"engine, is not available: it cannot differentiate the rule's result, {why}")
            pairs = [(y, c) for y, c in zip(ys, cs) if y._ag is not None and y._ag.needs_grad()]
            if not pairs:
                return [NDArray(x._data * 0, x.device) for x in xs]
            try:
                gs = _ag.grad([y for y, _ in pairs], xs, head_grads=[c for _, c in pairs])
            except BridgeError:
                raise
            except OperatorError as exc:  # the engine's refusal, said in torch's terms
                raise BridgeError(f"{fn.label}: the derivative of the gradient rule, taken by the sparse-ops "
                                  f"engine, is not available: {exc}") from exc
            return list(gs)

        vjp.label = fn.label

        full = [c if c is not None else torch.zeros(shape, dtype=dt, device=tensors[0].device)
                for c, (shape, dt) in zip(cots, ctx.out_meta)]
        got = _Vjp.apply(vjp, ctx.order + 1, *tensors, *full)
        return (None, None, *got)


def create_graph_backward(ov: Overload, args: list, outs: list, grads: Sequence[Any], needs: list[bool],
                          result: list, slots: list[int]) -> tuple:
    """Backward under ``create_graph=True``: the gradient rule as a torch function whose own
    derivative sparse-ops' autograd computes, so torch can differentiate the gradient once
    more (dense inputs and outputs; a clear error otherwise, and where the rule is made of
    operators without gradients)."""
    if any(s != "default" for s in (*ov.in_stypes, *ov.out_stypes)):
        raise BridgeError(f"{ov.opdef.label}: second-order gradients (create_graph=True) through the torch bridge "
                          f"need dense inputs and outputs; this call has {list(ov.in_stypes)} -> "
                          f"{list(ov.out_stypes)}")
    nin, nout = len(ov.in_stypes), len(ov.out_stypes)
    params = args[nin] if len(args) > nin else ""
    inst = _instance(ov.opdef, params)
    grads = [g if g is not None else torch.zeros_like(o) for g, o in zip(grads, outs)]

    def rule(*arrays: NDArray) -> list:
        from ..creation import zeros

        xs, ys, gs = list(arrays[:nin]), list(arrays[nin:nin + nout]), list(arrays[nin + nout:])
        got = run_gradient(ov, inst, xs, ys, gs, needs, record=_ag.is_recording())
        return [zeros(x.shape, dtype=x.dtype, device=x.device) if g is None else g for g, x in zip(got, xs)]

    rule.__name__ = f"gradient of {ov.opdef.name}"
    rule.label = f"sparse_ops.torch.ops.{ov.opdef.name}"
    got = _Vjp.apply(rule, 1, *args[:nin], *outs, *grads)
    for i, (s, g) in enumerate(zip(slots, got)):
        if needs[i]:
            result[s] = g
    return tuple(result)
