"""Imperative autograd with sparse gradients (MXNet's ``autograd``, as in ``imperative.cc``).

The recording half lives in ``sparse_ops.tape`` (the invoke path records there); this
module is the engine above the operators and the public face. ``backward`` walks the
recorded nodes in reverse topological order, calls each operator's gradient rule (itself
made of operators, so gradients get their storage types from the operators' own
inference, and ``create_graph=True`` records them), sums contributions with
``elemwise_add`` (sparse + sparse stays sparse) and writes variables' ``.grad``
according to their ``grad_req``.

Differentiation errors name the op: backward through an op that declares no gradient
raises naming the op and the input; the outputs of a ``differentiable = False`` op are
constants, and asking for their gradient says so.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .creation import zeros
from .device import allocating_on
from .dispatch import accumulate_into
from .errors import OperatorError
from .gradients import call_gradient, not_an_array
from .ndarray import NDArray
from .ops import elemwise_add
from .storage import on_structure
from .tape import (  # noqa: F401  (the public face re-exports the recording half)
    GRAD_REQS, AGInfo, ArrayMeta, NoDerivative, Node, _scope, _state, attach, changed_since_recorded,
    check_not_in_graph, is_recording, is_training, mark_no_derivative, mark_variables, parents_of, pause,
    predict_mode, record, set_recording, set_training, train_mode,
)


# ---- backward -----------------------------------------------------------------------------------------
def _as_list(x: Any) -> list:
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _topological(heads: list[AGInfo]) -> list[Node]:
    """Nodes reachable from the heads, each after every node that consumes its outputs."""
    order: list[Node] = []
    seen: set[Node] = set()
    stack: list[tuple[Node, bool]] = [(h.node, False) for h in heads if h.node is not None]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if node in seen:
            continue
        seen.add(node)
        stack.append((node, True))
        for p in node.parents:
            if p is not None and p.node is not None and p.node not in seen:
                stack.append((p.node, False))
    order.reverse()
    return order


def _sum_grads(a: NDArray, b: NDArray) -> NDArray:
    """a + b keeping sparsity when both have the same sparse storage type."""
    if a.stype != b.stype and a.stype != "default" and b.stype != "default":
        a, b = a.tostype("default"), b.tostype("default")
    if a.dtype != b.dtype:
        b = b.astype(a.dtype)
    return elemwise_add(a, b)


def _ones_like(x: NDArray) -> NDArray:
    """The head gradient ``backward()`` assumes: ones like the (dense) head."""
    device = x._device
    if device.device_type == "cpu":
        a = np.empty(x._data.shape if x.__class__ is NDArray else x.shape, dtype=x._data.dtype)
        a.fill(1)  # np.ones costs several times more on small heads
        return NDArray(a, device)
    with allocating_on(device):
        return NDArray(device.xp.ones(x.shape, dtype=x.dtype), device)


def _zeros_like_meta(m: Any) -> NDArray:
    return zeros(m.shape, stype=m.stype, dtype=m.dtype, device=m.device)


def _not_in_graph(info: AGInfo | None) -> OperatorError:
    if info is not None and info.constant is not None:
        return OperatorError(f"cannot differentiate {info.constant}")
    return OperatorError(
        "cannot differentiate an array that is not in a computational graph: run the computation "
        "inside autograd.record() on inputs marked with attach_grad()")


def _materialized(g: Any) -> Any:
    """``g``, or a contiguous copy of it when it is a broadcast view (a reduction's gradient
    repeats one value through zero strides), for code that may write into its gradients or
    read them as contiguous memory: user functions, plugins and the caller of ``grad``."""
    if isinstance(g, NDArray) and g.stype == "default" and g._data.size > 1 and 0 in g._data.strides:
        return NDArray(g._device.xp.ascontiguousarray(g._data), g._device)
    return g


def _node_backward(node: Node, out_grads: list) -> list:
    """The input gradients of one recorded call, checked against its inputs' shapes."""
    if node.fn.__class__ is NoDerivative:
        raise OperatorError(f"cannot differentiate {node.fn.why}")
    changed = changed_since_recorded(node)
    if changed is not None:
        raise OperatorError(
            f"backward of {node.label}: its {changed}, which the gradient reads, was written in place after the "
            "call was recorded, so the gradient would read the new values; write into a new array instead, or run "
            "backward() before the update")
    if not getattr(node.fn, "trusted", False):
        out_grads = [_materialized(g) for g in out_grads]
    if isinstance(node.fn, Function):
        try:
            grads = node.fn.backward(*out_grads)
        except OperatorError:
            raise
        except Exception as exc:  # the user's own backward: named where it is written
            code = getattr(type(node.fn).backward, "__code__", None)
            where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
            raise OperatorError(f"{type(node.fn).__qualname__}.backward{where} raised {type(exc).__name__}: "
                                f"{exc}") from exc
        grads = list(grads) if isinstance(grads, (list, tuple)) else [grads]
    else:
        grads = _op_gradient(node, out_grads)
    if len(grads) != len(node.parents):
        raise OperatorError(f"backward of {node.label} returned {len(grads)} gradients for "
                            f"{len(node.parents)} inputs")
    for i, (g, x, p) in enumerate(zip(grads, node.inputs, node.parents)):
        if p is None or g is None or (g.__class__ is x.__class__ is NDArray and g._data.shape == x._data.shape):
            continue
        if not isinstance(g, NDArray):
            raise not_an_array(node.label, i, g)
        if g.shape != x.shape:
            raise OperatorError(f"backward of {node.label} gave input {i} (shape {x.shape}) a "
                                f"gradient of shape {g.shape}")
    if _state.recording and isinstance(node.fn, Function):  # create_graph: results made outside the graph
        mark_no_derivative(grads, f"the gradient of {node.label}: its backward computed it outside the graph "
                                  "(not with sparse_ops operators), so it has no derivative")
    return grads


def _op_gradient(node: Node, out_grads: list) -> list:
    """An operator's gradient rule, through the one call every face makes (``gradients.py``)."""
    opdef = node.fn._opdef
    needs = [p is not None for p in node.parents] if opdef.gradient_takes_needs or not opdef.differentiable else ()
    return call_gradient(node.fn, out_grads, node.inputs, node.outputs, needs)


def _run_backward(heads: list, head_grads: Any, retain_graph: bool, create_graph: bool,
                  train_mode: bool, wanted: set | None = None) -> dict[AGInfo, Any]:
    """Gradients of the heads for every AGInfo in ``wanted`` (default: those with a buffer)."""
    infos = []
    for h in heads:
        info = getattr(h, "_ag", None)
        if info is None or not info.needs_grad():
            raise _not_in_graph(info)
        infos.append(info)
    hgs = [None] * len(heads) if head_grads is None else _as_list(head_grads)
    if len(hgs) != len(heads):
        raise ValueError(f"{len(heads)} heads but {len(hgs)} head gradients")
    grads: dict[AGInfo, Any] = {}
    for h, info, g in zip(heads, infos, hgs):
        if g is None:
            g = _ones_like(h)
        elif not isinstance(g, NDArray):
            raise TypeError(f"head gradients must be NDArrays or None, got {type(g).__name__}")
        elif g.shape != h.shape:
            raise ValueError(f"head gradient of shape {g.shape} for a head of shape {h.shape}")
        grads[info] = _sum_grads(grads[info], g) if info in grads else g
    nodes = _topological(infos)
    freed = list(dict.fromkeys(node.label for node in nodes if node.freed))  # from the heads back, once each
    if freed:
        through = ", ".join(freed[:3]) + (", ..." if len(freed) > 3 else "")
        raise OperatorError(f"the graph through {through} was freed by an earlier backward; pass retain_graph=True "
                            "to the first backward to run backward again")

    results: dict[AGInfo, Any] = {}
    with _scope(create_graph, train_mode):
        for node in nodes:
            out_grads = []
            for ref, out in zip(node.out_infos, node.outputs):
                info = ref()
                g = grads.pop(info, None) if info is not None else None
                if g is not None and (info in wanted if wanted is not None else info.grad is not None):
                    results[info] = g
                out_grads.append(g if g is not None else _zeros_like_meta(out))
            in_grads = _node_backward(node, out_grads)
            for parent, g in zip(node.parents, in_grads):
                if parent is None or g is None:
                    continue
                grads[parent] = _sum_grads(grads[parent], g) if parent in grads else g
            if not retain_graph:
                node.inputs = node.outputs = ()
                node.freed = True
    for info, g in grads.items():  # leaves (variables) left after the walk
        if info in wanted if wanted is not None else info.grad is not None:
            results[info] = g
    return results


def _own_structure(info: AGInfo, g: NDArray) -> NDArray:
    """``g`` on its csr variable's stored entries, where the variable asked for that
    (``attach_grad`` of a native csr array), else ``g``."""
    x = info.structure() if info.structure is not None else None
    if x is None or x.stype != "csr" or g.shape != x.shape:
        return g
    return on_structure(g, x)


def _write_grad(info: AGInfo, g: NDArray) -> None:
    buf, req = info.grad, info.grad_req
    if req == "null":
        return
    info.fresh = True
    g = _own_structure(info, g)
    if (req == "write" and g.stype == "default" and buf.stype == "default" and buf._device is g._device
            and buf._data.dtype == g._data.dtype and buf._data.shape == g._data.shape):
        buf._data[...] = g._data  # the common case: one copy into the dense buffer (of any dense class)
        return
    with _scope(False, None):
        if info.grad_req == "add":
            accumulate_into(buf, g)
        elif (buf.stype != g.stype or buf._device is not g._device or buf.dtype != g.dtype
              or buf.shape != g.shape):
            buf[:] = g  # a conversion (or the shape error) on the way
        else:
            # one copy of the values (a gradient may be a head gradient the caller holds);
            # the index arrays are shared read-only, as operators share them
            buf._take_parts(g._with_values(g._data.copy(), copy_aux=False))


def backward(heads: Any, head_grads: Any = None, retain_graph: bool = False, train_mode: bool = True) -> None:
    """Compute the gradients of ``heads`` and store them in the variables' ``.grad``."""
    heads = _as_list(heads)
    results = _run_backward(heads, head_grads, retain_graph, False, train_mode)
    for info, g in results.items():
        _write_grad(info, g)


def grad(heads: Any, variables: Any, head_grads: Any = None, retain_graph: bool | None = None,
         create_graph: bool = False, train_mode: bool = True) -> list:
    """Gradients of ``heads`` with respect to ``variables``, returned (``.grad`` untouched).

    With ``create_graph=True`` the backward pass is recorded, so the returned gradients
    can be differentiated again.
    """
    heads = _as_list(heads)
    single = not isinstance(variables, (list, tuple))
    variables = _as_list(variables)
    wanted = set()
    for v in variables:
        info = getattr(v, "_ag", None)
        if info is None or not info.needs_grad():
            raise OperatorError("grad: every variable must be marked with attach_grad() before recording")
        wanted.add(info)
    results = _run_backward(heads, head_grads, create_graph if retain_graph is None else retain_graph,
                            create_graph, train_mode, wanted)
    out = []
    for v in variables:
        g = results.get(v._ag)
        if g is not None and not create_graph:  # (a recorded gradient is returned as its rules gave it)
            g = _own_structure(v._ag, g)
        out.append(_materialized(g) if g is not None else _zeros_like_meta(v))
    if create_graph:  # a gradient constant in the variables (radians, x * 2) is still their function
        parents = [v._ag for v in variables]
        for g in out:
            if g._ag is None:
                attach(_ConstantGradient(len(parents)), parents, [], [], [g])
    return out[0] if single else out


# ---- user-defined differentiable functions ------------------------------------------------------------
class Function:
    """A differentiable function with a hand-written backward (MXNet's ``autograd.Function``).

    Subclass and define ``forward(*inputs)`` and ``backward(*out_grads)``, both on
    NDArrays; keep what backward needs with ``save_for_backward``.
    """

    def __init__(self) -> None:
        self._saved: tuple = ()

    def save_for_backward(self, *arrays: Any) -> None:
        self._saved = arrays

    @property
    def saved_tensors(self) -> tuple:
        return self._saved

    def forward(self, *inputs: Any) -> Any:
        raise NotImplementedError

    def backward(self, *out_grads: Any) -> Any:
        raise NotImplementedError

    def __call__(self, *inputs: Any) -> Any:
        with pause(_state.training):
            outputs = self.forward(*inputs)
        outs = _as_list(outputs)
        for i, o in enumerate(outs):
            if not isinstance(o, NDArray):
                raise OperatorError(f"{type(self).__name__}.forward returned a {type(o).__module__}."
                                    f"{type(o).__qualname__} as output {i}, not an NDArray (wrap values with "
                                    "sparse_ops.array)")
        if _state.recording:
            parents = parents_of(inputs)
            if any(p is not None for p in parents):
                metas = [ArrayMeta(x, f"input {i} of {type(self).__name__}") for i, x in enumerate(inputs)]
                attach(self, parents, metas, list(outs), outs)
        return outputs


class _ConstantGradient(Function):
    """The recorded "call" that made a ``create_graph`` gradient that does not depend on the
    variables (the derivative of ``radians`` or ``x * 2``): differentiating it again gives
    them zero, as MXNet and JAX do, instead of refusing an array not in the graph."""

    trusted = True

    def __init__(self, count: int) -> None:
        super().__init__()
        self.count = count

    def backward(self, *out_grads: Any) -> list:
        return [None] * self.count


__all__ = ["record", "pause", "train_mode", "predict_mode", "is_recording", "is_training", "set_recording",
           "set_training", "mark_variables", "backward", "grad", "Function", "GRAD_REQS"]
