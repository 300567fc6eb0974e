"""Calling an op's gradient rule: the one call every differentiating face makes.

The native autograd engine, the PyTorch bridge's autograd formula and the JAX bridge's
backward FFI handler all differentiate a call the same way: refuse an op that declares no
gradient (naming the op and the input), run the op's ``gradient`` with ``needs`` when it
takes them, report whatever the rule raises as an ``OperatorError`` naming the op, and check
that one gradient came back per input. Only the face's name and error class differ.
"""
from __future__ import annotations

from typing import Any, Sequence

from .backward_op import backward_arguments, backward_instance, backward_of
from .dispatch import plan_for
from .errors import OperatorError
from .ndarray import NDArray
from .registry import Op
from .tape import is_recording, mark_no_derivative


def input_name(op: Op, i: int) -> str:
    """The name of input ``i`` of a call (a variadic op's inputs share their argument's name)."""
    names = op._opdef.arguments
    if i < len(names):
        return names[i]
    return names[-1] if op._opdef.variadic and names else str(i)


def require_gradient(op: Op, needs: Sequence[bool], *, face: str = "autograd", prefix: str = "",
                     error: type[OperatorError] = OperatorError) -> None:
    """Refuse to differentiate a call of an op that declares no gradient (as ``error``, naming
    the op, the first input asked for and who differentiates), when any input ``needs`` one."""
    opdef = op._opdef
    if opdef.differentiable or not any(needs):
        return
    i = next(k for k, n in enumerate(needs) if n)
    forward = getattr(opdef, "forward", None)
    if forward is not None:  # the backward operator of an op declaring backward kernels
        raise error(f"{prefix}{forward.label}'s gradient is its backward kernels ({opdef.name}), which have no "
                    f"derivative, so {face} cannot differentiate {forward.label}'s gradient (second derivatives, "
                    "and forward mode, which is derived from the gradient, are not available for it); reverse-mode "
                    "first derivatives work, and a gradient() made of operators has derivatives")
    fix = ("declare so_gradient terms, or SO_OP_CONSTANT if its outputs are constants"
           if getattr(opdef.cls, "c_library", None) else
           "give the op a gradient (gradient() or backward kernels), or declare differentiable = False if its "
           "outputs are constants")
    raise error(f"{prefix}{opdef.label} declares no gradient, so {face} cannot differentiate through it "
                f"to input {i} ({input_name(op, i)!r}); {fix}")


def call_gradient(op: Op, out_grads: Sequence[Any], inputs: Sequence[Any], outputs: Sequence[Any],
                  needs: Sequence[bool], *, face: str = "autograd", prefix: str = "",
                  error: type[OperatorError] = OperatorError) -> list:
    """The gradients of ``inputs`` from ``op``'s gradient rule: one per input, ``None`` where
    the rule gives none. ``needs`` says which inputs want one (a rule that declares
    ``gradient_takes_needs`` computes only those; other callers may pass ``()``). ``face`` names who differentiates in the
    refusal of an op without a gradient, raised as ``error`` with ``prefix`` before it."""
    opdef = op._opdef
    if not opdef.differentiable:
        require_gradient(op, needs, face=face, prefix=prefix, error=error)
    if opdef.backward_kernels:  # the backward declared as rules and kernels on the op
        return _shapes_checked(opdef, _declared_backward(op, out_grads, inputs, outputs), inputs)
    try:  # (the rule gets lists of its own: it may change them)
        if opdef.gradient_takes_needs:
            grads = op.gradient(list(out_grads), list(inputs), list(outputs), needs=list(needs))
        else:
            grads = op.gradient(list(out_grads), list(inputs), list(outputs))
        if grads.__class__ is not list:
            grads = list(grads) if isinstance(grads, tuple) else [grads]
    except OperatorError:
        raise
    except Exception as exc:
        raise OperatorError(f"{opdef.label}: gradient failed: {type(exc).__name__}: {exc}") from exc
    if len(grads) != len(inputs):
        raise OperatorError(f"backward of {opdef.label} returned {len(grads)} gradients for "
                            f"{len(inputs)} inputs")
    for i, g in enumerate(grads):
        if g is not None and not isinstance(g, NDArray):
            raise not_an_array(opdef.label, i, g)
    _shapes_checked(opdef, grads, inputs)
    why = op.gradient_not_recorded
    if why is not None and is_recording():  # create_graph: what differentiates these must refuse
        mark_no_derivative(grads, f"the gradient of {opdef.label}: {why}")
    return grads


def _shapes_checked(opdef: Any, grads: list, inputs: Sequence[Any]) -> list:
    """``grads``, each of its input's shape: a rule's gradient of another shape is refused,
    naming the op (a face would otherwise broadcast it into a wrong gradient)."""
    for i, (g, x) in enumerate(zip(grads, inputs)):
        if g is not None and g.shape != x.shape:
            raise OperatorError(f"backward of {opdef.label} gave input {i} (shape {x.shape}) a gradient of shape "
                                f"{g.shape}")
    return grads


def not_an_array(label: str, i: int, g: Any) -> OperatorError:
    """The refusal of a gradient rule's result for input ``i`` that is not an NDArray."""
    return OperatorError(f"backward of {label} gave input {i} a gradient that is a {type(g).__module__}."
                         f"{type(g).__qualname__}, not an NDArray (wrap values with sparse_ops.array, or return "
                         "None for no gradient)")


def _declared_backward(op: Op, out_grads: Sequence[Any], inputs: Sequence[Any], outputs: Sequence[Any]) -> list:
    """The gradients from the op's declared backward (``backward_op``): its backward operator
    run through dispatch like any call; None for the inputs it gives no gradient."""
    opdef = op._opdef
    backward = backward_of(opdef)
    args = backward_arguments(opdef, list(out_grads), list(inputs), list(outputs))
    missing = [backward.arguments[k] for k, a in enumerate(args) if a is None]
    if missing:
        raise OperatorError(f"{opdef.label}: its backward needs {missing}, which this call did not keep")
    inst = backward_instance(backward, op)
    outs = plan_for(backward, inst, args).call(args, None, "write")
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    grads: list = [None] * len(inputs)
    for i, g in zip(opdef.backward_grads, outs):
        grads[i] = g
    return grads
