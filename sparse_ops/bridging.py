"""What the PyTorch and JAX bridges share: how an array splits into component arrays (and
the capacity a preallocated sparse output reserves: the op's capacity rule, or the caller's
``max_nnz=``), the names of a call's inputs, a gradient laid out on its input's components, the call of an
op's gradient rule from a framework's autograd, and the one encoding of parameters.

Both bridges hand each op component arrays (a dense array is one part; a csr array its
values, column indices and row pointer; a row_sparse array its values and row indices) and
receive gradients the same way: dense for a dense input, one value per stored value for a
sparse input (the gradient keeps its input's structure, as the framework's own sparse
gradients do).
"""
from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Hashable
from typing import Any, Sequence

import numpy as np

from .device import Device
from .errors import OperatorError
from .gradients import call_gradient
from .ndarray import NDArray
from .registry import Op, OpDef, get_op, param_key, subscribe  # noqa: F401  (param_key: re-exported)
from .sdk.capacity import Capacity, Stored, bounded
from .tape import _scope

PARTS = {"default": 1, "csr": 3, "row_sparse": 2}  # component arrays per storage type


def capacity(stype: str, shape: Sequence[int], max_nnz: int | None = None) -> int:
    """The stored entries a framework that preallocates (the JAX bridge: XLA's buffers have
    static sizes) reserves for a sparse output of ``shape`` given the bound ``max_nnz`` (the
    op's capacity rule's, or the caller's): that bound capped by the dense size (rows x
    columns for csr, rows for row_sparse; the dense size itself without a bound). Exact
    integers: a capacity past int64 is refused, naming ``max_nnz=``, rather than wrapped."""
    bound = math.prod(int(d) for d in shape) if stype == "csr" else (int(shape[0]) if len(shape) else 0)
    cap = bound if max_nnz is None else min(int(max_nnz), bound)
    if cap >= 2**63:
        raise OperatorError(f"a {stype} output of shape {tuple(shape)} could hold {cap} stored values, more than "
                            "an index can count; pass max_nnz= (an upper bound of its stored values)")
    return cap


def result_capacity(op: Op, slot: str, out: Stored, inputs: Sequence[Stored],
                    max_nnz: int | None = None) -> Capacity | None:
    """The capacity a preallocating framework reserves for sparse result ``slot`` (an
    output's name, or an input's the op updates in place) with facts ``out`` on ``inputs``
    (their shapes, storage types and stored counts), and where it came from: the caller's
    ``max_nnz`` when given (source ``"max_nnz="``), else the op's capacity rule (source: the
    rule's text, ``"nnz(data)"``), capped by the dense size either way. None when neither
    exists: the framework must ask for ``max_nnz=`` rather than reserve the dense size. An
    OperatorError for a capacity past int64 or a failing rule."""
    if max_nnz is not None:
        return Capacity(capacity(out.stype, out.shape, max_nnz), "max_nnz=")
    try:
        declared = bounded(op, slot, out, inputs)
    except ValueError as exc:
        raise OperatorError(str(exc)) from None
    if declared is None:
        return None
    return Capacity(capacity(out.stype, out.shape, declared.value), declared.source)


def arg_names(opdef: OpDef, n: int) -> list[str]:
    """The names of a call's ``n`` inputs, as errors name them: a fixed-arity op's argument
    names; a variadic op's ``<first>0, <first>1, ...`` (its leading fixed names where it has
    several and ``n`` does not exceed them)."""
    fixed = list(opdef.arguments)
    if not opdef.variadic:
        return fixed[:n] + [f"input {i}" for i in range(len(fixed), n)]
    if len(fixed) > 1 and n <= len(fixed):
        return fixed[:n]
    return [f"{fixed[0]}{i}" for i in range(n)]


def aligned(g: NDArray | None, x: NDArray) -> Any:
    """Gradient ``g`` of input ``x`` as an array laid out like ``x``'s values component:
    dense for a dense ``x`` (row_sparse and csr gradients densified); for a sparse ``x`` the
    gradient of each stored value (``g``'s own values when it has ``x``'s structure, else
    gathered at ``x``'s structure)."""
    if g is None:
        return None
    xp = x.device.xp
    if x.stype == "default":
        return (g if g.stype == "default" else g.tostype("default"))._data
    if g.stype == x.stype:
        if all(a is b or (a.shape == b.shape and bool((a == b).all())) for a, b in zip(g._aux(), x._aux())):
            return g._data
    dense = (g if g.stype == "default" else g.tostype("default"))._data
    if x.stype == "row_sparse":
        return dense[x._indices]
    rows = xp.repeat(xp.arange(x.shape[0]), xp.diff(x._indptr))
    return dense[rows, x._indices]


def framework_gradient(op: Op, out_grads: Sequence[NDArray], inputs: Sequence[NDArray],
                       outputs: Sequence[NDArray], needs: Sequence[bool], *, face: str, prefix: str,
                       error: type[OperatorError], record: bool = False) -> list:
    """The op's gradient rule called from a framework's autograd (``call_gradient``), only for
    ``needs`` (``None`` elsewhere). With ``record`` our tape records it, so a framework's
    second-order request differentiates the rule with our engine; a rule that cannot be
    differentiated then says so."""
    with _scope(record, None):
        try:
            grads = call_gradient(op, out_grads, inputs, outputs, needs, face=face, prefix=prefix, error=error)
        except error:
            raise
        except OperatorError as exc:
            if record:
                raise error(f"{prefix}{op._opdef.label}: its gradient rule cannot be differentiated, so a "
                            f"second-order gradient is not available here: {exc}") from exc
            raise
    return [g if n else None for g, n in zip(grads, needs)]


# ---- parameters across a framework's boundary -----------------------------------------------------
# A framework's operator takes tensors and plain attributes, so both bridges send an op's
# parameters as one string: JSON with small tags where JSON alone would lose a value or its
# type (non-finite floats; lists beside tuples). Python's ``json`` writes floats with ``repr``
# (exact, ``-0.0`` kept) and integers at any size, and keeps ``true`` apart from ``1`` and
# ``1.0``, so a decoded dict parses exactly as the caller's did. Framework types (a torch
# dtype or device) become names through converters the bridges register
# (``register_param_type``), so this module imports no framework.

_FLOAT_TAG, _LIST_TAG = "float", "list"  # {"float": "nan" | "inf" | "-inf"}, {"list": [...]}
_CONVERTERS: dict[type, Callable[[Any], Any]] = {}  # framework type -> its plain form (a name)


def register_param_type(cls: type, convert: Callable[[Any], Any]) -> None:
    """Let parameter values of class ``cls`` cross as ``convert(value)`` (a name, say: a torch
    dtype as the NumPy dtype's name). A bridge calls this for its framework's types."""
    _CONVERTERS[cls] = convert


def _plain(v: Any) -> Any:
    """``v`` as JSON-able data: scalars as themselves (non-finite floats tagged), NumPy scalars
    as Python ones, dtypes and devices as names, tuples as arrays, lists as tagged arrays."""
    cls = v.__class__
    if v is None or cls is bool or cls is int or cls is str:
        return v
    if cls is float or isinstance(v, (float, np.floating)):
        v = float(v)
        return v if math.isfinite(v) else {_FLOAT_TAG: repr(v)}
    if isinstance(v, (np.bool_, np.integer)):
        return v.item()
    if isinstance(v, int):  # an int subclass (an IntEnum, say); bool has none
        return int(v)
    if isinstance(v, str):
        return str(v)
    if isinstance(v, tuple):
        return [_plain(e) for e in v]
    if isinstance(v, list):
        return {_LIST_TAG: [_plain(e) for e in v]}
    if isinstance(v, np.dtype):
        return v.name
    if isinstance(v, type) and issubclass(v, np.generic):
        return np.dtype(v).name
    if isinstance(v, Device):
        return str(v)
    for base in cls.__mro__:
        convert = _CONVERTERS.get(base)
        if convert is not None:
            return convert(v)
    raise TypeError(f"a parameter value of type {cls.__name__} cannot cross a framework bridge (bool, int, "
                    "float, str, None, a NumPy scalar, a dtype, a device, or tuples and lists of them)")


def _unplain(v: Any) -> Any:
    """The value ``_plain`` wrote as ``v``: arrays as tuples, tagged floats and lists back."""
    if isinstance(v, list):
        return tuple(_unplain(e) for e in v)
    if isinstance(v, dict):
        if _FLOAT_TAG in v:
            return float(v[_FLOAT_TAG])
        return [_unplain(e) for e in v[_LIST_TAG]]
    return v


def encode_params(params: dict[str, Any]) -> str:
    """The one string of a parameter dict both bridges send ("" for none): JSON, keys sorted,
    so equal dicts give one string; ``decode_params`` gives the dict back with every value's
    type (``True``, ``1``, ``1.0`` stay apart; ``inf``, ``-inf``, ``nan``, ``-0.0`` and huge
    integers survive). A TypeError names a value that cannot cross."""
    if not params:
        return ""
    return json.dumps({k: _plain(v) for k, v in params.items()}, sort_keys=True, separators=(",", ":"),
                      allow_nan=False)


def decode_params(text: str) -> dict[str, Any]:
    """The parameter dict of ``encode_params``'s string (``{}`` for ""); no code is evaluated."""
    if not text:
        return {}
    return {k: _unplain(v) for k, v in json.loads(text).items()}


class BoundedCache(dict):
    """A dict of at most ``maxsize`` entries: ``put`` evicts the oldest beyond it. Reads are
    the dict's own (no cost on hits); caches keyed by parameter values use it so that a
    changing scalar cannot grow memory without bound."""

    def __init__(self, maxsize: int) -> None:
        super().__init__()
        self.maxsize = maxsize
        self._lock = threading.Lock()

    def put(self, key: Hashable, value: Any) -> Any:
        """Store ``value`` under ``key`` (evicting the oldest entries beyond ``maxsize``)."""
        with self._lock:
            while len(self) >= self.maxsize:
                del self[next(iter(self))]
            self[key] = value
        return value


# ---- a framework's expressions of the dense built-ins ------------------------------------------------
# the scalar operators as Python's operators, which torch tensors and JAX arrays both take
# (the lowering modules first bring the scalar to the array's dtype, MXNet's rule)
SCALAR_OPERATORS: dict[str, Callable[[Any, Any], Any]] = {
    "_plus_scalar": lambda x, s: x + s, "_minus_scalar": lambda x, s: x - s,
    "_rminus_scalar": lambda x, s: s - x, "_mul_scalar": lambda x, s: x * s,
    "_div_scalar": lambda x, s: x / s, "_rdiv_scalar": lambda x, s: s / x,
    "_power_scalar": lambda x, s: x ** s, "_rpower_scalar": lambda x, s: s ** x,
    "_equal_scalar": lambda x, s: x == s, "_not_equal_scalar": lambda x, s: x != s,
    "_greater_scalar": lambda x, s: x > s, "_greater_equal_scalar": lambda x, s: x >= s,
    "_lesser_scalar": lambda x, s: x < s, "_lesser_equal_scalar": lambda x, s: x <= s,
}


class _Switch(threading.local):
    off = False  # each thread's own, off until it switches (a class default: no failed look-up per call)


class LoweringTable(dict):
    """op name -> the function expressing that built-in op in a framework's own operations
    (``sparse_ops.torch.lowering``, ``sparse_ops.jax.lowering``), with the switch that sends
    every call back to the op's kernels (``off``), for comparisons. The switch is the calling
    thread's: threads switching it in overlapping ``with`` blocks leave each other's alone."""

    def __init__(self) -> None:
        super().__init__()
        self._thread = _Switch()

    @property
    def off(self) -> bool:
        return self._thread.off

    @off.setter
    def off(self, value: bool) -> None:
        self._thread.off = value

    def lowers(self, *names: str) -> Callable[[Callable], Callable]:
        """Register the decorated function as the lowering of the built-in ops ``names``."""
        def register(fn: Callable) -> Callable:
            for name in names:
                self[name] = fn
            return fn
        return register

    def names(self) -> list[str]:
        """The ops this table can lower (when their record is the built-in one)."""
        return sorted(self)

    def disabled(self, flag: bool = True) -> "Switched":
        """Send every call of this thread to the op's kernels (``True``) or lower the dense
        built-ins again (``False``), from now on; as ``with lowering.disabled(): ...``, only
        inside the block."""
        previous, self.off = self.off, bool(flag)
        return Switched(self, previous)

    def serves(self, opdef: OpDef) -> bool:
        """Whether ``opdef`` is a built-in op of this table: its record's class is defined in
        ``sparse_ops.ops`` (a plugin or user code may register its own class under a
        built-in's name; that one keeps its kernels)."""
        return opdef.name in self and opdef.plugin is None and \
            (opdef.cls.__module__ or "").startswith("sparse_ops.ops.")


class Switched:
    """What ``LoweringTable.disabled`` returns: a ``with`` block over it puts the switch back
    as it was on leaving."""

    def __init__(self, table: LoweringTable, previous: bool) -> None:
        self.table, self.previous = table, previous

    def __enter__(self) -> "Switched":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.table.off = self.previous


# ---- the bridged functions of a framework ---------------------------------------------------------
class BridgedTable:
    """The bridged function of each op a framework was asked for (``sparse_ops.torch.ops.<name>``,
    ``sparse_ops.jax.ops.<name>``): made from the op's record on first use, and dropped, with
    the framework's registrations (``forget``), whenever the table registers, replaces or
    removes a record of that name (``registry.subscribe``), so plugins, libraries and
    MXNet-form ops registered at any time are bridged like the built-ins."""

    def __init__(self, namespace: str, make: Callable[[OpDef], Any], forget: Callable[[str], None]) -> None:
        self.namespace, self._make, self._forget = namespace, make, forget
        self._made: dict[str, Any] = {}
        subscribe(self._on_change)

    def op(self, name: str) -> Any:
        """The bridged function of registered op ``name``; ``OperatorError`` if there is none."""
        opdef = get_op(name)
        f = self._made.get(name)
        if f is None or f.opdef is not opdef:
            f = self._made[name] = self._make(opdef)
        return f

    def lookup(self, name: str) -> Any:
        """``<namespace>.<name>``: AttributeError (not OperatorError) for unknown names."""
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return self.op(name)
        except OperatorError:
            raise AttributeError(f"{self.namespace} has no op {name!r} (no operator of that name is "
                                 "registered; sparse_ops.list_ops() lists them)") from None

    def _on_change(self, name: str, opdef: OpDef | None) -> None:
        held = self._made.pop(name, None)
        self._forget(name)
        if held is not None and held.opdef is not opdef:  # the caller may hold it: it follows the table
            held.__class__ = _following(held.__class__)
            held._table = self
            if opdef is not None:  # the new record's function, made now rather than inside a trace of the held one
                self._made[name] = self._make(opdef)


class _Follows:
    """A bridged function whose op record was replaced or removed after it was made: a
    caller holding it (``f = sparse_ops.torch.ops.x`` before a re-registration) runs the
    table's current record, or gets the table's error for a removed op, never the old kernel."""

    _table: BridgedTable

    def __call__(self, *args: Any, **params: Any) -> Any:
        return self._table.op(self.opdef.name)(*args, **params)


_FOLLOWING: dict[type, type] = {}


def _following(cls: type) -> type:
    """``cls`` with ``_Follows``'s call (one class made per bridged class)."""
    if issubclass(cls, _Follows):
        return cls
    made = _FOLLOWING.get(cls)
    if made is None:
        made = _FOLLOWING[cls] = type(f"Following{cls.__name__}", (_Follows, cls), {"__module__": cls.__module__})
    return made
