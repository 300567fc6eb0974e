"""An ``Op`` subclass for a decoded C declaration (``declare.OpSpec``): its shape, dtype and
storage rules call the library's inference callbacks, its kernels the library's kernels,
its gradient the ops the declaration names. Defaults are the table's own (one shape, one
dtype, dense outputs) where the library gives no callback."""
from __future__ import annotations

import ctypes as C
import threading
from typing import Any, Callable

import numpy as np

from ..creation import array
from ..sdk import capacity
from ..dispatch import invoke, op_function
from ..errors import OperatorError
from ..registry import Op, kernel
from . import abi, call
from .declare import KernelSpec, OpSpec, c_params, make_param


def _checked_call(fn: Any, where: str, what: str, *args: Any) -> None:
    err = call.error_buffer()
    err.message = b""
    status = fn(*args, C.byref(err))
    if status != abi.OK:
        raise call.failure(where, what, status)


def _shape_rule(address: int, where: str) -> Callable:
    fn = abi.InferShapeFn(address)

    def infer_shape(self: Op, *shapes: tuple[int, ...]) -> list[tuple[int, ...]]:
        n, n_out = len(shapes), self.output_count()
        ins, outs = (abi.Shape * max(n, 1))(), (abi.Shape * n_out)()
        for s, shape in zip(ins, shapes):  # (at most MAX_NDIM sizes each: _within_ndim checked them)
            s.struct_size, s.abi_version, s.ndim = C.sizeof(abi.Shape), abi.ABI_VERSION, len(shape)
            s.dims[:len(shape)] = shape
        for s in outs:
            s.struct_size, s.abi_version, s.ndim = C.sizeof(abi.Shape), abi.ABI_VERSION, -1
        _checked_call(fn, where, "infer_shape", C.byref(c_params(self).struct), n, ins, n_out, outs)
        result = []
        for i, s in enumerate(outs):
            if not 0 <= s.ndim <= abi.MAX_NDIM:
                raise OperatorError(f"{where}: infer_shape gave output {i} ndim {s.ndim} (expected 0 to "
                                    f"{abi.MAX_NDIM}; did it set every output?)")
            dims = tuple(int(d) for d in s.dims[:s.ndim])
            if any(d < 0 for d in dims):
                raise OperatorError(f"{where}: infer_shape gave output {i} the negative shape {dims}")
            result.append(dims)
        return result

    return infer_shape


def _within_ndim(rule: Callable, where: str) -> Callable:
    """``rule`` (an infer_shape: the library's or the default) with every input's and
    output's number of dimensions checked against the C ABI's limit (an so_array holds
    MAX_NDIM sizes): every call of a C op infers its shapes before any kernel runs, so no
    kernel is handed an array whose sizes it cannot read."""
    def infer_shape(self: Op, *shapes: tuple[int, ...]) -> list[tuple[int, ...]]:
        for what, listed in (("input", shapes), ("output", None)):
            if listed is None:
                listed = rule(self, *shapes)
            for i, shape in enumerate(listed):
                if len(shape) > abi.MAX_NDIM:
                    raise OperatorError(f"{where}: C ops take arrays of at most {abi.MAX_NDIM} dimensions, got "
                                        f"{what} {i} of shape {tuple(shape)}")
        return listed

    return infer_shape


def _carried(rule: Callable, names: tuple) -> Callable:
    """``rule`` (an infer_type) after refusing input dtypes the C ABI has no code for (the
    MXNet face's int8 and uint8), naming the input."""
    def infer_type(self: Op, *dtypes: Any) -> list:
        for i, d in enumerate(dtypes):
            if np.dtype(d) not in abi.DTYPE_CODES:
                name = names[i] if i < len(names) else str(i)
                carried = ", ".join(str(t) for t in abi.DTYPE_CODES)
                raise TypeError(f"input {i} ({name!r}) has dtype {np.dtype(d)}, which a C library's kernels do not "
                                f"take (the C ABI carries {carried}); convert it with astype")
        return rule(self, *dtypes)

    return infer_type


def _codes_rule(address: int, where: str, what: str) -> Callable:
    """infer_type or infer_storage_type through a C callback on integer codes."""
    fn = abi.InferCodesFn(address)
    to_code, from_code = ((abi.DTYPE_CODES, abi.CODE_DTYPES) if what == "type" else
                          (abi.STYPE_CODES, abi.CODE_STYPES))

    def rule(self: Op, *values: Any) -> list:
        n, n_out = len(values), self.output_count()
        ins = (C.c_int32 * max(n, 1))(*[to_code[np.dtype(v) if what == "type" else v] for v in values])
        start = (ins[0] if n else 0) if what == "type" else 0
        outs = (C.c_int32 * n_out)(*([start] * n_out))
        _checked_call(fn, where, f"infer_{what}", C.byref(c_params(self).struct), n, ins, n_out, outs)
        result = []
        for i in range(n_out):
            value = from_code.get(outs[i])
            if value is None:
                kind = "dtype" if what == "type" else "storage type"
                raise OperatorError(f"{where}: infer_{what} gave output {i} the unknown {kind} code {outs[i]}")
            result.append(value)
        return result

    rule.__name__ = f"infer_{what}"
    return rule


def _kernel(spec: KernelSpec, where: str, n_in: int, n_out: int, mutated: tuple[int, ...],
            resources: tuple) -> Callable:
    fn = abi.KernelFn(spec.address)
    if spec.device == "cpu" and spec.stypes is None and not resources:
        from .trampoline import NOT_CONTIGUOUS, for_arrays

        call_dense = for_arrays(n_in + n_out)
        local = threading.local()  # .prepared: OpContext -> what call_dense needs, per thread

        def run(self: Op, ctx: Any, *arrays: Any) -> None:
            try:
                entry = local.prepared[ctx]
            except (AttributeError, KeyError):
                entry = _prepare(local, self, ctx, spec.address, n_in)
            if entry[1] is not self:  # a context is made for one plan, so one parameter set
                entry = _prepare(local, self, ctx, spec.address, n_in)
            try:
                status = call_dense(entry[0], *arrays)
            except Exception:  # arrays the compiled path has no signature for (float16)
                status = NOT_CONTIGUOUS
            problem = call.fast_problem()  # a callback the kernel made and the host refused
            if status == abi.OK and problem is not None:
                raise OperatorError(f"{where}: the kernel returned SO_OK after a host callback failed: {problem}")
            if status != abi.OK:
                if status != NOT_CONTIGUOUS:
                    raise call.failure(where, "the kernel", status, problem)
                call.run_kernel(fn, where, self, ctx, n_in, arrays, mutated)
    else:
        def run(self: Op, ctx: Any, *arrays: Any) -> None:
            call.run_kernel(fn, where, self, ctx, n_in, arrays, mutated)

    return run


def _prepare(local: threading.local, inst: Op, ctx: Any, address: int, n_in: int) -> tuple:
    """What the fast path passes for this context on this thread: the addresses of the kernel,
    its so_context, so_params and this thread's so_error, and the input count (with the
    structs they point to, kept alive here)."""
    prepared = getattr(local, "prepared", None)
    if prepared is None or len(prepared) > 4096:
        prepared = local.prepared = {}
    c_ctx, params = call.context(ctx), c_params(inst)
    addrs = np.array([address, C.addressof(c_ctx), params.address, call.error_address(), n_in], np.int64)
    prepared[ctx] = entry = (addrs, inst, c_ctx, params)
    return entry


def _gradient(spec: OpSpec) -> Callable:
    terms = spec.gradients

    def gradient(self: Op, out_grads: list, inputs: list, outputs: list, needs: Any = None) -> list:
        """The declared terms: each input's gradient from the ops the library names, as they
        were when it was loaded (``_gradient_ops``: a reload does not change a recorded graph)."""
        grads: list = [None] * len(inputs)
        sources = {abi.REF_INPUT: inputs, abi.REF_OUTPUT: outputs, abi.REF_OUT_GRAD: out_grads}
        bound = type(self)._gradient_ops
        for t in terms:
            if needs is not None and not needs[t.input]:
                continue
            params = {**self.params_dict(), **dict(t.params)} if t.forward_params else dict(t.params)
            g = invoke(bound.get(t.op) or t.op, [sources[kind][i] for kind, i in t.args], params)
            if isinstance(g, (list, tuple)):
                g = g[0]
            grads[t.input] = g if grads[t.input] is None else op_function("elemwise_add")(grads[t.input], g)
        return grads

    return gradient


# the reason opcheck gives for skipping the gradient check of an op that declares no gradient
# terms and no SO_OP_CONSTANT (the header's "not differentiable")
NOT_DIFFERENTIABLE = "not differentiable (no gradients declared)"


def _reference(spec: OpSpec) -> Callable:
    """The op's ``reference`` method for opcheck: the op the declaration names as its reference,
    run on the sample's inputs (NumPy arrays, as opcheck hands them: densified), with this
    call's parameters when the declaration forwards them."""
    name, forward = spec.reference, spec.reference_forward_params

    def reference(self: Op, *arrays: np.ndarray) -> list:
        params = self.params_dict() if forward else {}
        outs = op_function(name)(*[array(a) for a in arrays], **params)
        return [o.asnumpy() for o in (outs if isinstance(outs, (list, tuple)) else [outs])]

    reference.__doc__ = f"The outputs of operator {name!r} on the same inputs (the declared reference)."
    return reference


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part) or "COp"


def op_class(spec: OpSpec, where: str, module: str) -> type:
    """The Op subclass of ``spec``; ``where`` names the op and its library in messages,
    ``module`` is the class's ``__module__`` (who owns it when no plugin is loading)."""
    resources = tuple(r for bit, r in ((abi.RESOURCE_WORKSPACE, "workspace"), (abi.RESOURCE_RANDOM, "random"))
                      if spec.resources & bit)
    n_in = len(spec.inputs)
    mutated = tuple(range(len(spec.arguments), n_in))
    attrs: dict[str, Any] = {
        "__doc__": spec.doc or f"{spec.name}: an operator of a C library.",
        "__module__": module,
        "arguments": spec.inputs, "outputs": spec.outputs, "mutate": spec.aux, "resources": resources,
        "differentiable": not spec.constant, "partition": spec.partition, "partition_args": spec.partition_args,
        # the rules are C callbacks on concrete sizes: a tracer (torch.compile) specializes the
        # sizes it hands them rather than running them on symbolic ones
        "symbolic_shapes": False,
        "c_library": where,  # messages speak C to these ops (SO_OP_CONSTANT, so_gradient)
        "_gradient_ops": {},  # name -> OpDef of the ops the gradient names, bound once the library loaded
    }
    for p in spec.params:
        attrs[p.name] = make_param(p, spec.name)
    attrs["infer_shape"] = _within_ndim(_shape_rule(spec.infer_shape, where) if spec.infer_shape else Op.infer_shape,
                                        where)
    attrs["infer_type"] = _carried(_codes_rule(spec.infer_type, where, "type") if spec.infer_type else Op.infer_type,
                                   spec.inputs)
    if spec.infer_storage_type:
        attrs["infer_storage_type"] = _codes_rule(spec.infer_storage_type, where, "storage_type")
    for i, k in enumerate(spec.kernels):
        label = "dense" if k.stypes is None else "_".join("any" if s == "*" else s for s in k.stypes)
        name = f"c_{k.device}_{label}" + (f"_{i}" if f"c_{k.device}_{label}" in attrs else "")
        run = _kernel(k, where, n_in, len(spec.outputs), mutated, resources)
        run.__name__, run.__qualname__ = name, f"{_camel(spec.name)}.{name}"
        attrs[name] = kernel(device=k.device, stypes=k.stypes)(run)
    if spec.gradients:
        attrs["gradient"] = _gradient(spec)
        attrs["backward_needs_inputs"] = tuple(sorted({spec.inputs[i] for t in spec.gradients
                                                       for kind, i in t.args if kind == abi.REF_INPUT},
                                                      key=spec.inputs.index))
        attrs["backward_needs_outputs"] = tuple(sorted({spec.outputs[i] for t in spec.gradients
                                                        for kind, i in t.args if kind == abi.REF_OUTPUT},
                                                       key=spec.outputs.index))
    skips = dict(spec.opcheck_skip)
    if not spec.gradients and not spec.constant:
        # the header's "not differentiable": differentiating through it is refused (OpDef.differentiable
        # is False without a gradient rule, yet it is no constant), and opcheck says why it checks none
        skips.setdefault("gradient", NOT_DIFFERENTIABLE)
    if skips:
        attrs["opcheck_skip"] = skips
    if spec.reference:
        attrs["reference"] = _reference(spec)
        attrs["reference_op"] = spec.reference
    if spec.capacity_like:  # at most the stored entries of the named input
        attrs["capacity"] = {out: capacity.same_as(name) for out, name in spec.capacity_like.items()}
    if spec.samples:
        stored = spec.samples

        def samples(cls: type) -> list:
            """The samples the library declares (so_sample), for opcheck."""
            return [([x.copy() for x in inputs], dict(params)) for inputs, params in stored]

        attrs["samples"] = classmethod(samples)
    return type(_camel(spec.name), (Op,), attrs)
