"""The tape: per-thread recording state and the graph records of recorded calls.

This is the part of autograd that the invoke path needs (``dispatch`` records each call
here), so it sits below the operators and imports nothing of ours but errors. The engine
that walks the records backwards and sums gradients with operators is
``sparse_ops.autograd``, above the operators.

Recording state is per thread: ``record()`` / ``pause()`` switch recording,
``train_mode()`` / ``predict_mode()`` the flag ops such as ``Dropout`` read. While
recording, each operator call whose inputs need a gradient becomes a ``Node`` that keeps
only the arrays its backward dependency names (the others keep shape, dtype and storage
type).
"""
from __future__ import annotations

import threading
import weakref
from typing import Any, Sequence

import numpy as np

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


def _flag(where: str, value: Any) -> bool:
    """``value`` as a flag: a bool, NumPy's bool or the int 0 or 1 (MXNet passes its flags to C
    as ints); anything else is refused, naming ``where`` (``bool('False')`` is True)."""
    if value.__class__ is bool:
        return value
    if isinstance(value, (bool, np.bool_)) or (isinstance(value, (int, np.integer)) and value in (0, 1)):
        return bool(value)
    raise TypeError(f"{where} must be a bool, got {value!r} (a {type(value).__name__})")


def set_recording(flag: bool) -> bool:
    """Set recording on or off; returns the previous value."""
    prev, _state.recording = _state.recording, _flag("set_recording: the flag", flag)
    return prev


def set_training(flag: bool) -> bool:
    """Set training mode on or off; returns the previous value."""
    prev, _state.training = _state.training, _flag("set_training: the flag", flag)
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


def record(train_mode: bool = True) -> _scope:
    """Record operators inside the block (``with autograd.record():``)."""
    return _scope(True, _flag("record: train_mode", train_mode))


def pause(train_mode: bool = False) -> _scope:
    """Stop recording inside the block."""
    return _scope(False, _flag("pause: train_mode", train_mode))


def train_mode() -> _scope:
    """Training mode inside the block, recording unchanged."""
    return _scope(None, True)


def predict_mode() -> _scope:
    """Prediction mode inside the block, recording unchanged."""
    return _scope(None, False)


# ---- graph records ----------------------------------------------------------------------------------
class AGInfo:
    """Autograd information attached to an array (``x._ag``): the node that produced it
    (and which output it is), for variables the gradient buffer and request, and for an
    array that depends on inputs needing a gradient through something with no derivative
    (a ``differentiable = False`` op's outputs, a gradient computed by code the engine did not
    record, and what is computed from them alone) why it has none (``constant``: the words
    that end "cannot differentiate ...", for the messages of every face). ``fresh``
    says whether a backward pass has written the gradient buffer since the variable was
    marked (or the flag reset): MXNet's ``_fresh_grad``. ``structure``, for a csr variable
    whose gradient is that of its stored values, refers (weakly) to that variable."""

    __slots__ = ("node", "index", "grad", "grad_req", "constant", "fresh", "structure", "__weakref__")

    def __init__(self, node: "Node | None" = None, index: int = 0) -> None:
        self.node, self.index = node, index
        self.grad = None
        self.grad_req = "null"
        self.constant: str | None = None
        self.fresh = False
        self.structure: Any = None

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

    def _refuse(self, *args: Any) -> Any:
        """Arithmetic, indexing and conversion look their methods up on the type, past
        ``__getattr__``: they say the same thing instead of Python's 'unsupported operand'."""
        return self.__getattr__("value")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _refuse
    __truediv__ = __rtruediv__ = __pow__ = __rpow__ = __matmul__ = __rmatmul__ = _refuse
    __neg__ = __abs__ = __getitem__ = __array__ = _refuse


class Node:
    """One recorded call: the op (an Op instance or an ``autograd.Function``), its parents'
    AGInfo (None for inputs that need no gradient), the kept inputs/outputs and weak
    references to the outputs' AGInfo (weak, so node and outputs form no reference cycle:
    the graph is freed by reference counting as soon as the arrays go)."""

    __slots__ = ("fn", "parents", "inputs", "outputs", "out_infos", "freed", "versions")

    def __init__(self, fn: Any, parents: list, inputs: list, outputs: list, out_infos: list) -> None:
        self.fn, self.parents, self.inputs, self.outputs, self.out_infos = fn, parents, inputs, outputs, out_infos
        self.freed = False
        # the in-place write count of each kept array when recorded (``changed_since_recorded``)
        self.versions = tuple(_version(x) for x in (*inputs, *outputs))

    @property
    def opdef(self) -> Any:
        """The table record of the recorded op (None for an ``autograd.Function``)."""
        return getattr(self.fn, "_opdef", None)

    @property
    def label(self) -> str:
        """How messages name the recorded call: the op and its owner, or the Function's class."""
        opdef = self.opdef
        return opdef.label if opdef is not None else type(self.fn).__name__


def _version(x: Any) -> int:
    """How many times array ``x`` was written in place (0 for what the tape keeps only the
    metadata of)."""
    v = None if x.__class__ is ArrayMeta else getattr(x, "_version", None)
    return 0 if v is None else v[0]  # a counter shared with the views of x (ndarray.bump_version)


def changed_since_recorded(node: Node) -> str | None:
    """Which kept array of ``node`` (``"input i"`` / ``"output j"``) was written in place
    since the call was recorded, if any: its gradient rule would read the new values."""
    kept = (*node.inputs, *node.outputs)
    for k, (x, v) in enumerate(zip(kept, node.versions)):
        if _version(x) != v:
            n = len(node.inputs)
            return f"input {k}" if k < n else f"output {k - n}"
    return None


def _record(plan: Any, inputs: Sequence[Any], outputs: list) -> None:
    """Put one operator call on the graph if any input needs a gradient (``RecordOp``).

    The outputs of a ``differentiable = False`` op are constants: they join no graph, and
    remember the op so that asking for their gradient says why there is none; so do the
    outputs of a call whose inputs are such constants (``mark_constant``)."""
    parents = []
    needed = False
    for x in inputs:  # _parent, inlined: this runs on every recorded call
        info = x._ag
        if info is not None and (info.node is not None or info.grad_req != "null"):
            parents.append(info)
            needed = True
        else:
            parents.append(None)
    if not needed:
        why = next((x._ag.constant for x in inputs if x._ag is not None and x._ag.constant), None)
        if why is not None:
            mark_constant(outputs, why)
        return
    opdef = plan.opdef
    if opdef.constant:
        mark_constant(outputs, f"the output of operator {opdef.name!r}: it is declared {opdef.constant_declaration}, so "
                               "its outputs are constants with no gradient")
        return
    if opdef.gradient_by_params:  # this parameter set's outputs may be constants (multinomial's ids alone)
        why = plan.inst.no_gradient()
        if why is not None:
            mark_constant(outputs, f"the output of operator {opdef.name!r}: {why}")
            return
    keep_in, keep_out = plan.kept
    kept_inputs = [x if keep_in is None or i in keep_in else ArrayMeta(x, f"input {i} of {opdef.name}")
                   for i, x in enumerate(inputs)]
    kept_outputs = [y if i in keep_out else ArrayMeta(y, f"output {i} of {opdef.name}")
                    for i, y in enumerate(outputs)]
    attach(plan.inst, parents, kept_inputs, kept_outputs, outputs)


def mark_constant(arrays: Sequence[Any], why: str) -> None:
    """Mark ``arrays`` (computed from inputs needing a gradient, outside the graph) as having
    no derivative, for the reason ``why`` (what follows "cannot differentiate")."""
    for y in arrays:
        if y is not None and y._ag is None:
            info = y._ag = AGInfo()
            info.constant = why


class NoDerivative:
    """The recorded "call" that made arrays computed by code the engine did not record (a
    gradient rule's imperative results under ``create_graph``): they join the graph, so what
    is computed from them is recorded too, and differentiating through them is refused,
    saying ``why`` (what follows "cannot differentiate"), instead of reading as a zero."""

    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why


def mark_no_derivative(arrays: Sequence[Any], why: str) -> None:
    """Put ``arrays`` (those not in the graph yet) on the graph as made by a ``NoDerivative``."""
    fresh = [y for y in arrays if y is not None and y._ag is None]
    if fresh:
        attach(NoDerivative(why), [], [], [], fresh)


def _parent(x: Any) -> AGInfo | None:
    info = getattr(x, "_ag", None)
    return info if info is not None and info.needs_grad() else None


def parents_of(inputs: Sequence[Any]) -> list:
    """Each input's AGInfo when it needs a gradient, else None (non-arrays included)."""
    return [_parent(x) for x in inputs]


def attach(fn: Any, parents: list, kept_inputs: list, kept_outputs: list, outputs: list) -> None:
    """Make ``outputs`` the results of a new node running ``fn`` backwards."""
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
    for i, g in enumerate(gradients):  # one buffer for two variables: the later write would win
        for j in range(i):
            a, b = getattr(g, "_data", None), getattr(gradients[j], "_data", None)
            if g is gradients[j] or (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
                                     and np.may_share_memory(a, b)):
                raise ValueError(f"mark_variables: gradient buffers {j} and {i} share memory, so one variable's "
                                 "gradient would overwrite the other's; give each variable a buffer of its own")
    for v, g, r in zip(variables, gradients, reqs):
        if r not in GRAD_REQS:
            raise ValueError(f"grad_req must be one of {GRAD_REQS}, got {r!r}")
        if g.shape != v.shape:
            raise ValueError(f"gradient buffer of shape {g.shape} for a variable of shape {v.shape}")
        info = v._ag
        if info is None:
            info = v._ag = AGInfo()
        info.grad, info.grad_req, info.fresh = g, r, False
        # a csr variable with a csr buffer gets the gradient of its stored values (autograd.py)
        info.structure = weakref.ref(v) if v.stype == "csr" and g.stype == "csr" else None
