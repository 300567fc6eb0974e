"""An op's storage-aware backward declared on the op itself: rules and kernels, no second op.

In the spirit of ``torch.library.register_autograd`` and JAX's ``custom_vjp``, an ``Op``
class may give its backward as kernels beside its forward ones::

    @so.register("row_clip")
    class RowClip(so.Op):
        arguments = ("x",)
        backward_needs_outputs = ("output",)      # what the backward reads besides the gradients

        def infer_storage_type(self, x):
            return [x]

        @so.kernel(device=("cpu", "gpu"), stypes=("row_sparse",))
        def rsp(self, ctx, x, y): ...

        def backward_storage_type(self, output_grad, x, output):   # one per gradient
            return ["row_sparse" if output_grad == "row_sparse" else "default"]

        @so.backward_kernel(device=("cpu", "gpu"), stypes=("row_sparse", "row_sparse", "row_sparse"))
        def rsp_backward(self, ctx, output_grad, x, output, x_grad): ...

The backward's arguments are the gradients of the visible outputs (``<output>_grad``), then
the kept inputs (``backward_needs_inputs``; every input by default), then the kept outputs
(``backward_needs_outputs``); its outputs are the gradients (``<input>_grad``) of the inputs
``backward_grads`` names (every input by default; the others get none). Rules, all optional:
``backward_storage_type(self, *stypes)`` (default: each gradient in its input's storage type),
shapes and dtypes are the inputs'. Kernels follow the forward kernels' conventions
(``@so.backward_kernel`` without ``stypes``: a dense kernel of plain arrays; with them: a
storage-aware one) and receive the forward op's instance as ``self``, so they read its
parameters and helpers.

``backward_of(opdef)`` builds, once, the backward as an operator of its own (``OpDef``
``_backward_<op>``, not in the table: nobody calls it by name): dispatch runs it like any op
(storage inference, kernel choice, the densifying fallback, output checks), and
``gradients.call_gradient``, the call every face differentiates through, invokes it. Its own
gradient is not declared (second derivatives of such an op are refused, naming it).
"""
from __future__ import annotations

from typing import Any, Callable

from .registry import KernelSpec, Op, OpDef


def _wrap(fn: Callable, spec: KernelSpec) -> Callable:
    """A kernel method of the backward class running ``fn`` with the forward op's instance."""
    def run(self: Op, ctx: Any, *arrays: Any) -> Any:
        return fn(self._forward_op(), ctx, *arrays)

    run.__name__ = run.__qualname__ = fn.__name__
    run.__doc__ = fn.__doc__
    run._sparse_ops_kernels = [KernelSpec(run, spec.devices, spec.stypes)]
    return run


def backward_class(opdef: OpDef) -> type:
    """The Op class of ``opdef``'s declared backward (see the module docstring)."""
    fwd = opdef.cls
    nvis = opdef.num_visible_outputs
    kept_in = list(range(len(opdef.arguments))) if opdef.backward_inputs is None else list(opdef.backward_inputs)
    grads_of = list(opdef.backward_grads)
    arguments = opdef.backward_argument_names  # checked at registration
    position = {i: len(opdef.outputs[:nvis]) + k for k, i in enumerate(kept_in)}  # input -> backward argument
    rule: Callable | None = getattr(fwd, "backward_storage_type", None)

    def infer_shape(self: Op, *shapes: tuple[int, ...]) -> list:
        return [shapes[position[i]] for i in grads_of]

    def infer_type(self: Op, *dtypes: Any) -> list:
        return [dtypes[position[i]] for i in grads_of]

    def infer_storage_type(self: Op, *stypes: str) -> list:
        if rule is None:
            return [stypes[position[i]] for i in grads_of]
        return list(rule(self._forward_op(), *stypes))

    def _forward_op(self: Op) -> Op:
        forward = self.__dict__.get("_forward")
        return forward if forward is not None else opdef.instance(self.params_dict())

    attrs: dict[str, Any] = {
        "__doc__": f"The backward of {opdef.name}, from the rules and kernels declared on {fwd.__qualname__}.",
        "__module__": fwd.__module__,
        "arguments": arguments,
        "outputs": tuple(f"{opdef.arguments[i]}_grad" for i in grads_of),
        "infer_shape": infer_shape, "infer_type": infer_type, "infer_storage_type": infer_storage_type,
        "_forward_op": _forward_op,
        "trusted": fwd.trusted,
        "opcheck_skip": {"gradient": f"the backward of {opdef.name}: second derivatives are not declared"},
    }
    attrs.update(opdef.params)  # the forward's parameters: a backward call gets the same values
    for name, fn, spec in opdef.backward_kernels:
        attrs[f"_kernel_{name}_{len(attrs)}"] = _wrap(fn, spec)
    return type(f"{fwd.__name__}Backward", (Op,), attrs)


def backward_of(opdef: OpDef) -> OpDef | None:
    """The backward operator of an op that declares backward kernels (built on first use and
    kept on the op's record), else None."""
    if not opdef.backward_kernels:
        return None
    made = getattr(opdef, "_backward", None)
    if made is None:
        cls = backward_class(opdef)
        made = OpDef(f"_backward_{opdef.name}", cls, opdef.plugin)
        cls._opdef = made  # (register() does this for the ops of the table)
        made.forward = opdef
        opdef._backward = made
    return made


def backward_instance(backward: OpDef, op: Op) -> Op:
    """The backward operator's instance for forward instance ``op``: its parameters, and ``op``
    itself as the ``self`` of the backward kernels (kept on ``op``: instances are cached per
    parameter set, so each is made once)."""
    inst = op.__dict__.get("_sparse_ops_backward")
    if inst is None:
        inst = object.__new__(backward.cls)
        for pname in backward.params:
            object.__setattr__(inst, pname, getattr(op, pname))
        inst._forward = op
        op.__dict__["_sparse_ops_backward"] = inst
    return inst


def backward_arguments(opdef: OpDef, out_grads: list, inputs: list, outputs: list) -> list:
    """The backward operator's inputs for one call: the visible outputs' gradients, the kept
    inputs, the kept outputs."""
    nvis = opdef.num_visible_outputs
    kept_in = range(len(opdef.arguments)) if opdef.backward_inputs is None else opdef.backward_inputs
    return list(out_grads[:nvis]) + [inputs[i] for i in kept_in] + [outputs[j] for j in opdef.backward_outputs]
