"""Imperative autograd with sparse gradients (MXNet's ``autograd``, as in ``imperative.cc``).

Recording state is per thread: ``record()`` / ``pause()`` switch recording,
``train_mode()`` / ``predict_mode()`` the flag ops such as ``Dropout`` read. While
recording, each operator call whose inputs need a gradient becomes a ``Node`` that keeps
only the arrays its backward dependency names (the others keep shape, dtype and
storage type). ``backward`` walks the nodes in reverse topological order, calls each
operator's gradient rule (itself made of operators, so gradients get their storage
types from the operators' own inference, and ``create_graph=True`` records them),
sums contributions (sparse + sparse stays sparse) and writes variables' ``.grad``
according to their ``grad_req``.
"""
from __future__ import annotations

import threading
import weakref
from typing import Any, Sequence

from .errors import OperatorError

GRAD_REQS = ("write", "add", "null")


class _State(threading.local):
    def __init__(self) -> None:
        self.recording = False
        self.training = False


_state = _State()


def is_recording() -> bool:
    """Whether operators are being recorded for a backward pass in this thread."""
    return _state.recording


def is_training() -> bool:
    """Whether operators run in training mode (Dropout drops) in this thread."""
    return _state.training


def set_recording(flag: bool) -> bool:
    """Set recording on or off; returns the previous value."""
    prev, _state.recording = _state.recording, bool(flag)
    return prev


def set_training(flag: bool) -> bool:
    """Set training mode on or off; returns the previous value."""
    prev, _state.training = _state.training, bool(flag)
    return prev


class _scope:
    """Set recording and/or training (None leaves it) inside a ``with`` block, then restore."""

    __slots__ = ("recording", "training", "saved")

    def __init__(self, recording: bool | None, training: bool | None) -> None:
        self.recording, self.training = recording, training

    def __enter__(self) -> None:
        state = _state
        self.saved = (state.recording, state.training)
        if self.recording is not None:
            state.recording = self.recording
        if self.training is not None:
            state.training = self.training

    def __exit__(self, *exc: Any) -> None:
        _state.recording, _state.training = self.saved


def record(train_mode: bool = True):
    """Record operators inside the block (``with autograd.record():``)."""
    return _scope(True, train_mode)


def pause(train_mode: bool = False):
    """Stop recording inside the block."""
    return _scope(False, train_mode)


def train_mode():
    """Training mode inside the block, recording unchanged."""
    return _scope(None, True)


def predict_mode():
    """Prediction mode inside the block, recording unchanged."""
    return _scope(None, False)



# ---- graph records ----------------------------------------------------------------------------------
class AGInfo:
    """Autograd information attached to an array (``x._ag``): the node that produced it
    (and which output it is), and for variables the gradient buffer and request."""

    __slots__ = ("node", "index", "grad", "grad_req", "__weakref__")

    def __init__(self, node: "Node | None" = None, index: int = 0) -> None:
        self.node, self.index = node, index
        self.grad = None
        self.grad_req = "null"

    @property
    def is_variable(self) -> bool:
        return self.grad is not None

    def needs_grad(self) -> bool:
        return self.node is not None or self.grad_req != "null"


class ArrayMeta:
    """Shape, dtype, storage type and device of an array the tape did not keep."""

    __slots__ = ("shape", "dtype", "stype", "device", "_what")

    def __init__(self, x: Any, what: str) -> None:
        self.shape, self.dtype, self.stype, self.device = x.shape, x.dtype, x.stype, x.device
        self._what = what

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getattr__(self, name: str) -> Any:
        raise OperatorError(
            f"the backward pass read {self._what}, which the operator's backward dependency does not keep "
            f"(only shape/dtype/stype are recorded); declare it in backward_needs_inputs/_outputs"
        )


class Node:
    """One recorded call: the op (an Op instance or a Function), its parents' AGInfo (None
    for inputs that need no gradient), the kept inputs/outputs and weak references to the
    outputs' AGInfo (weak, so node and outputs form no reference cycle: the graph is freed
    by reference counting as soon as the arrays go)."""

    __slots__ = ("fn", "parents", "inputs", "outputs", "out_infos", "freed")

    def __init__(self, fn: Any, parents: list, inputs: list, outputs: list, out_infos: list) -> None:
        self.fn, self.parents, self.inputs, self.outputs, self.out_infos = fn, parents, inputs, outputs, out_infos
        self.freed = False

    @property
    def name(self) -> str:
        opdef = getattr(self.fn, "_opdef", None)
        return opdef.name if opdef is not None else type(self.fn).__name__

    def run_backward(self, out_grads: list) -> list:
        if isinstance(self.fn, Function):
            grads = self.fn.backward(*out_grads)
            grads = list(grads) if isinstance(grads, (list, tuple)) else [grads]
        else:
            grads = self._op_gradient(out_grads)
        if len(grads) != len(self.parents):
            raise OperatorError(f"backward of {self.name} returned {len(grads)} gradients for "
                                f"{len(self.parents)} inputs")
        for i, (g, x, p) in enumerate(zip(grads, self.inputs, self.parents)):
            if p is not None and g is not None and getattr(g, "shape", None) != x.shape:
                what = f"shape {g.shape}" if hasattr(g, "shape") else f"a {type(g).__name__}"
                raise OperatorError(f"backward of {self._label()} gave input {i} (shape {x.shape}) a "
                                    f"gradient of {what}")
        return grads

    def _label(self) -> str:
        opdef = getattr(self.fn, "_opdef", None)
        if opdef is None:
            return self.name
        from .context import op_label

        return op_label(opdef)

    def _op_gradient(self, out_grads: list) -> list:
        """An operator's gradient rule; what it raises is reported naming the op and plugin."""
        opdef = self.fn._opdef
        try:
            if opdef.gradient_takes_needs:
                needs = [p is not None for p in self.parents]
                return list(self.fn.gradient(out_grads, list(self.inputs), list(self.outputs), needs=needs))
            return list(self.fn.gradient(out_grads, list(self.inputs), list(self.outputs)))
        except OperatorError:
            raise
        except Exception as exc:
            raise OperatorError(f"{self._label()}: gradient failed: {type(exc).__name__}: {exc}") from exc


def _info(x: Any) -> AGInfo | None:
    return getattr(x, "_ag", None)


def _record(plan: Any, inputs: Sequence[Any], outputs: list) -> None:
    """Put one operator call on the graph if any input needs a gradient (``RecordOp``)."""
    parents = [_parent(x) for x in inputs]
    if not any(p is not None for p in parents):
        return
    opdef = plan.opdef
    if not opdef.differentiable:
        return
    keep_in, keep_out = plan.inst.kept_for_backward()
    kept_inputs = [x if keep_in is None or i in keep_in else ArrayMeta(x, f"input {i} of {opdef.name}")
                   for i, x in enumerate(inputs)]
    kept_outputs = [y if i in keep_out else ArrayMeta(y, f"output {i} of {opdef.name}")
                    for i, y in enumerate(outputs)]
    _attach(plan.inst, parents, kept_inputs, kept_outputs, outputs)


def _parent(x: Any) -> AGInfo | None:
    info = x._ag
    return info if info is not None and info.needs_grad() else None


def _attach(fn: Any, parents: list, kept_inputs: list, kept_outputs: list, outputs: list) -> None:
    refs: list = []
    node = Node(fn, parents, kept_inputs, kept_outputs, refs)
    for i, y in enumerate(outputs):
        info = y._ag = AGInfo(node, i)
        refs.append(weakref.ref(info))


def check_not_in_graph(x: Any) -> None:
    """Refuse to write in place into an array the current recording may need."""
    info = x._ag
    if _state.recording and info is not None and (info.node is not None or info.grad is not None):
        raise OperatorError(
            "in-place operations (x[:] = ..., x += ..., out=x) are not supported while recording "
            "with autograd on an array that is part of the graph; write into a new array instead"
        )


# ---- variables -----------------------------------------------------------------------------------------
def mark_variables(variables: Any, gradients: Any, grad_reqs: Any = "write") -> None:
    """Make ``variables`` differentiable leaves whose gradients go into ``gradients``."""
    variables = list(variables) if isinstance(variables, (list, tuple)) else [variables]
    gradients = list(gradients) if isinstance(gradients, (list, tuple)) else [gradients]
    reqs = list(grad_reqs) if isinstance(grad_reqs, (list, tuple)) else [grad_reqs] * len(variables)
    if not len(variables) == len(gradients) == len(reqs):
        raise ValueError(f"mark_variables: {len(variables)} variables, {len(gradients)} gradients, "
                         f"{len(reqs)} grad_reqs")
    for v, g, r in zip(variables, gradients, reqs):
        if r not in GRAD_REQS:
            raise ValueError(f"grad_req must be one of {GRAD_REQS}, got {r!r}")
        if g.shape != v.shape:
            raise ValueError(f"gradient buffer of shape {g.shape} for a variable of shape {v.shape}")
        info = v._ag
        if info is None:
            info = v._ag = AGInfo()
        info.grad, info.grad_req = g, r


# ---- backward -----------------------------------------------------------------------------------------
def _as_list(x: Any) -> list:
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _topological(heads: list[AGInfo]) -> list[Node]:
    """Nodes reachable from the heads, each after every node that consumes its outputs."""
    order: list[Node] = []
    seen: set[int] = set()
    stack: list[tuple[Node, bool]] = [(h.node, False) for h in heads if h.node is not None]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for p in node.parents:
            if p is not None and p.node is not None and id(p.node) not in seen:
                stack.append((p.node, False))
    order.reverse()
    return order


def _sum_grads(a: Any, b: Any) -> Any:
    """a + b keeping sparsity when both have the same sparse storage type."""
    from .ops.elemwise import elemwise_add

    if a.stype != b.stype and a.stype != "default" and b.stype != "default":
        a, b = a.tostype("default"), b.tostype("default")
    if a.dtype != b.dtype:
        b = b.astype(a.dtype)
    return elemwise_add(a, b)


def _ones_like(x: Any) -> Any:
    from .ndarray import NDArray

    xp = x.device.xp
    with _device_scope(x.device):
        return NDArray(xp.ones(x.shape, dtype=x.dtype), x.device)


def _device_scope(device: Any) -> Any:
    from .device import allocating_on

    return allocating_on(device)


def _zeros_like_meta(m: Any) -> Any:
    from .creation import zeros

    return zeros(m.shape, stype=m.stype, dtype=m.dtype, device=m.device)


def _run_backward(heads: list, head_grads: Any, retain_graph: bool, create_graph: bool,
                  train_mode: bool, wanted: set | None = None) -> dict[AGInfo, Any]:
    """Gradients of the heads for every AGInfo in ``wanted`` (default: those with a buffer)."""
    from .ndarray import NDArray

    infos = []
    for h in heads:
        info = _info(h)
        if info is None or not info.needs_grad():
            raise OperatorError(
                "cannot differentiate an array that is not in a computational graph: run the computation "
                "inside autograd.record() on inputs marked with attach_grad()"
            )
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
    for node in nodes:
        if node.freed:
            raise OperatorError(
                f"the graph through {node.name} was freed by an earlier backward; pass retain_graph=True "
                "to the first backward to run backward again"
            )
    def want(info: AGInfo) -> bool:
        return info in wanted if wanted is not None else info.grad is not None

    results: dict[AGInfo, Any] = {}
    with _scope(create_graph, train_mode):
        for node in nodes:
            out_grads = []
            for ref, out in zip(node.out_infos, node.outputs):
                info = ref()
                g = grads.pop(info, None) if info is not None else None
                if g is not None and want(info):
                    results[info] = g
                out_grads.append(g if g is not None else _zeros_like_meta(out))
            in_grads = node.run_backward(out_grads)
            for parent, g in zip(node.parents, in_grads):
                if parent is None or g is None:
                    continue
                grads[parent] = _sum_grads(grads[parent], g) if parent in grads else g
            if not retain_graph:
                node.inputs = node.outputs = ()
                node.freed = True
    for info, g in grads.items():  # leaves (variables) left after the walk
        if want(info):
            results[info] = g
    return results


def _write_grad(info: AGInfo, g: Any) -> None:
    from .dispatch import _accumulate

    buf = info.grad
    if info.grad_req == "null":
        return
    with _scope(False, None):
        if info.grad_req == "add":
            _accumulate(buf, g)
        else:
            buf[:] = g


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
        info = _info(v)
        if info is None or not info.needs_grad():
            raise OperatorError("grad: every variable must be marked with attach_grad() before recording")
        wanted.add(info)
    results = _run_backward(heads, head_grads, create_graph if retain_graph is None else retain_graph,
                            create_graph, train_mode, wanted)
    out = []
    for v in variables:
        g = results.get(v._ag)
        out.append(g if g is not None else _zeros_like_meta(v))
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
        if _state.recording:
            parents = [_parent(x) if hasattr(x, "_ag") else None for x in inputs]
            if any(p is not None for p in parents):
                metas = [ArrayMeta(x, f"input {i} of {type(self).__name__}") for i, x in enumerate(inputs)]
                _attach(self, parents, metas, list(outs), outs)
        return outputs
