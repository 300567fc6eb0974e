"""The operator table: one ``OpDef`` record per operator, built-in or plugin.

Operators are declared as subclasses of ``Op`` and registered with
``@sparse_ops.register(name)``. The class holds the parameters (``Param`` class
attributes), the pure shape/type/storage rules, the kernels (methods decorated with
``@kernel``), the gradient and its dependencies. An instance of the class is one parsed
set of parameters, so rules and kernels read them as ``self.lr`` and so on.
"""
from __future__ import annotations

import contextlib
import inspect
import itertools
import keyword
import math
import operator
import os
import sys
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from .dtypes import require_one_dtype
from .errors import OperatorError
from .sdk import capacity as _capacity

REQUIRED = object()
PARTITIONS = ("rows", "sum", None)  # Op.partition: how an op runs over row blocks (sparse_ops.dask)


class ParameterError(OperatorError, ValueError):
    """An operator got an unknown parameter or a value it cannot take."""


# ---- parameters -------------------------------------------------------------------------------
def _parse_bool(v: Any) -> bool:
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)) and v in (0, 1):
        return bool(v)
    if isinstance(v, str) and v.lower() in ("true", "false", "1", "0"):
        return v.lower() in ("true", "1")
    raise ValueError(f"expected a bool, got {v!r}")


def _parse_int(v: Any) -> int:
    if isinstance(v, (bool, np.bool_)):
        raise ValueError(f"expected an int, got {v!r}")
    if isinstance(v, str):
        return int(v)
    if isinstance(v, (float, np.floating)):
        if float(v).is_integer():
            return int(v)
        raise ValueError(f"expected an int, got {v!r}")
    return operator.index(v)


def _parse_float(v: Any) -> float:
    if isinstance(v, (bool, np.bool_)):
        raise ValueError(f"expected a number, got {v!r}")
    return float(v)


def _parse_shape(v: Any) -> tuple[int, ...]:
    if isinstance(v, str):
        v = tuple(int(p) for p in v.strip("()[] ").split(",") if p.strip())
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return (int(v),)
    return tuple(_parse_int(d) for d in v)


def _parse_axis(v: Any) -> int | tuple[int, ...] | None:
    if v is None or (isinstance(v, str) and v.strip() in ("", "None", "()")):
        return None
    if isinstance(v, (tuple, list, str)):
        t = _parse_shape(v)
        return t
    return _parse_int(v)


def _parse_str(v: Any) -> str:
    """A text value: every face hands it on as UTF-8 (torch's and JAX's parameter strings,
    a C library's ``const char*``), so text that has no UTF-8 form (a lone surrogate) is refused."""
    text = str(v)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{text!r} has no UTF-8 form ({exc.reason} at position {exc.start})") from None
    return text


def _parse_dtype(v: Any) -> Any:
    from .dtypes import value_dtype

    return value_dtype(v)


def _parse_device(v: Any) -> Any:
    from .device import as_device

    return as_device(v)


_PARSERS: dict[Any, Callable[[Any], Any]] = {
    bool: _parse_bool, int: _parse_int, float: _parse_float, str: _parse_str,
    "shape": _parse_shape, "axis": _parse_axis, "dtype": _parse_dtype, "device": _parse_device,
}


# ---- parameter keys -----------------------------------------------------------------------------
MAX_CACHED_INSTANCES = 1024  # parsed parameter sets kept per op (the oldest evicted beyond)
_NONE_TYPE = type(None)
_SCALARS = frozenset({int, bool, str, _NONE_TYPE})


def _float_key(v: float) -> Any:
    """A float's value for keys: itself, except NaN (equal to every NaN here, unlike ``==``)
    and the zeros (``-0.0`` and ``0.0`` compare equal but may give different results)."""
    if v != v:
        return "nan"
    if v == 0.0:
        return "-0.0" if math.copysign(1.0, v) < 0 else "0.0"
    return v


def _value_key(v: Any) -> Any:
    """``v`` as a hashable key distinguishing types as well as values (``True``, ``1`` and
    ``1.0`` differ; containers hold their elements' keys); a TypeError if ``v`` is unhashable."""
    cls = v.__class__
    if cls in _SCALARS:
        return (cls, v)
    if cls is float or isinstance(v, (float, np.floating)):
        return (cls, _float_key(float(v)))
    if cls is tuple or cls is list:
        return (cls, tuple(_value_key(e) for e in v))
    if isinstance(v, (np.generic, np.dtype)):  # numpy scalars and dtypes hash by value
        return (cls, v)
    hash(v)  # raises TypeError for unhashable objects
    return (cls, v)


def param_key(params: dict[str, Any]) -> tuple:
    """A hashable key of a parameter dict by names, types and values, whatever the order of
    its items: two dicts get one key only if every value has the same type and value
    (``True``, ``1`` and ``1.0`` give different keys; a NaN's key equals another NaN's; ``-0.0``
    and ``0.0`` differ). Caches of parsed parameters key by it, so a cached parse is reused
    only for values that parse alike. A TypeError for an unhashable value."""
    key = []
    for name, v in params.items():
        cls = v.__class__
        if cls is float:  # the common scalar parameters, spelled out: this runs on calls
            key.append((name, cls, v if v and v == v else _float_key(v)))
        elif cls is int or cls is bool or cls is str or v is None:
            key.append((name, cls, v))
        else:
            key.append((name, cls, _value_key(v)))
    if len(key) > 1:
        key.sort(key=_first)
    return tuple(key)


def _first(item: tuple) -> Any:
    return item[0]


def _shown(value: Any) -> str:
    """``repr(value)`` for a message, or for an array or a long text its type (and shape)."""
    text = repr(value)
    if len(text) <= 80 and "\n" not in text:
        return text
    shape = getattr(value, "shape", None)
    return f"a {type(value).__name__}" + (f" of shape {tuple(shape)}" if shape is not None else "")


class Param:
    """A declared operator parameter: its type (``bool``, ``int``, ``float``, ``str``,
    ``"shape"``, ``"axis"``, ``"dtype"``, ``"device"`` or a parsing callable), default (omit for a required
    parameter), allowed ``choices`` and documentation."""

    def __init__(self, type: Any, default: Any = REQUIRED, doc: str = "",
                 choices: Sequence[Any] | None = None, optional: bool = False) -> None:
        self.parse_value = _PARSERS.get(type, type)
        self.type = type
        self.default = default
        self.doc = doc
        self.choices = tuple(choices) if choices is not None else None
        self.optional = optional or default is None
        self.name = ""

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def parse(self, value: Any, op_label: str) -> Any:
        if value is None and self.optional:
            return None
        try:
            parsed = self.parse_value(value)
        except (TypeError, ValueError) as exc:
            raise ParameterError(f"{op_label}: bad value {_shown(value)} for parameter {self.name!r}: {exc}") from None
        if self.choices is not None and parsed not in self.choices:
            raise ParameterError(
                f"{op_label}: parameter {self.name!r} must be one of {self.choices}, got {value!r}"
            )
        return parsed

    def describe(self) -> str:
        tname = self.type if isinstance(self.type, str) else getattr(self.type, "__name__", str(self.type))
        default = "required" if self.required else f"default {self.default!r}"
        return f"{self.name}: {tname}, {default}" + (f" — {self.doc}" if self.doc else "")


# ---- kernels ---------------------------------------------------------------------------------
class KernelSpec:
    """A kernel method and where it applies: device type and, for storage-aware kernels,
    the input storage types (``stypes=None`` declares a dense FCompute kernel)."""

    __slots__ = ("fn", "devices", "stypes")

    def __init__(self, fn: Callable, devices: tuple[str, ...], stypes: tuple[tuple[str, ...], ...] | None) -> None:
        self.fn, self.devices, self.stypes = fn, devices, stypes


def kernel(device: str | Sequence[str] = "cpu", stypes: Sequence[str] | Sequence[Sequence[str]] | None = None):
    """Mark an ``Op`` method as a kernel.

    Without ``stypes`` it is the dense kernel (FCompute): it receives plain NumPy/CuPy
    arrays, ``(self, ctx, *inputs, *outputs)``, and writes the outputs in place. With
    ``stypes`` (one tuple of input storage types, or a list of such tuples) it is a
    storage-aware kernel (FComputeEx) and receives containers. ``"*"`` matches any
    storage type, and ``stypes=("...",)`` any number of inputs of any storage type. ``device`` is ``"cpu"``, ``"gpu"`` or both, ``("cpu", "gpu")``, for
    array-module code that runs on NumPy and CuPy alike.
    """
    return _kernel_marker("_sparse_ops_kernels", device, stypes)


def _kernel_marker(attr: str, device: str | Sequence[str], stypes: Any) -> Callable[[Callable], Callable]:
    """A decorator adding a KernelSpec for ``device`` and ``stypes`` (normalized, checked) to
    the list ``attr`` of the function it decorates."""
    devices = (device,) if isinstance(device, str) else tuple(device)
    for d in devices:
        if d not in ("cpu", "gpu"):
            raise ValueError(f"kernel device must be 'cpu' or 'gpu', got {d!r}")
    if stypes is not None:
        stypes = tuple(stypes)
        if stypes and isinstance(stypes[0], str):
            stypes = (stypes,)
        stypes = tuple(tuple(s) for s in stypes)

    def mark(fn: Callable) -> Callable:
        setattr(fn, attr, getattr(fn, attr, []) + [KernelSpec(fn, devices, stypes)])
        return fn

    return mark


def backward_kernel(device: str | Sequence[str] = "cpu",
                    stypes: Sequence[str] | Sequence[Sequence[str]] | None = None):
    """Mark an ``Op`` method as a kernel of the op's backward (``sparse_ops.backward_op``):
    ``kernel``'s conventions over the backward's arguments (the visible outputs' gradients,
    the kept inputs, the kept outputs), writing the gradients of ``backward_grads``."""
    return _kernel_marker("_sparse_ops_backward_kernels", device, stypes)


def applies_ufunc(fn: Callable) -> Callable:
    """Mark a dense kernel that only runs ``self.ufunc(*inputs, out)``. On host arrays the
    dispatcher may then call ``self.ufunc(*inputs)`` and take its result as the output
    (when its dtype and shape are the planned ones): the shortest call, with no output
    allocated ahead. A subclass that overrides the kernel loses the mark."""
    fn.applies_ufunc = True
    return fn


# ---- the operator base class -------------------------------------------------------------------
class Op:
    """Base class of a declared operator; see ``sparse_ops.register``.

    Class attributes: ``arguments`` (input names, default ``("data",)``; ``variadic = True``
    allows any number of inputs), ``outputs`` (output names, default ``("output",)``: one
    output named ``output``, the name ``backward_needs_outputs = ("output",)`` uses),
    ``num_visible_outputs`` (outputs returned to the
    caller; the rest are kept for the backward pass), ``mutate`` (names of inputs the op
    updates in place, MXNet's aux states), ``resources`` (``"workspace"``, ``"random"``),
    ``backward_needs_inputs`` / ``backward_needs_outputs`` (what the tape keeps; None means
    every input), ``partition`` / ``partition_args`` (how the op runs over row blocks of
    data in ``sparse_ops.dask``; see ``partitioning``), and ``Param`` attributes. Rules
    receive one value per input; their defaults: all shapes equal and the output takes the
    first input's shape and dtype, outputs are dense.

    ``capacity`` is the rule for sparse outputs' sizes: an upper bound of the entries each
    sparse output (and each input updated in place) stores, stored values for csr and
    stored rows for row_sparse, from the inputs' shapes, storage types and stored counts
    (``sparse_ops.sdk.capacity``: ``same_as("data")`` for an output with data's structure,
    ``sum_of("lhs", "rhs")`` for a union, ``min_of(...)`` for an intersection,
    ``columns_of("A")`` for A.T's non-empty rows, ``computed(fn, text)`` for anything else).
    Frameworks that preallocate (``jax.jit``) reserve that many entries instead of the dense
    size; an op with a sparse output and no rule makes them ask the caller for ``max_nnz=``.
    """

    arguments: tuple[str, ...] = ("data",)
    outputs: tuple[str, ...] = ("output",)
    num_visible_outputs: int | None = None
    variadic: bool = False
    mutate: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    backward_needs_inputs: tuple[str, ...] | None = None
    backward_needs_outputs: tuple[str, ...] = ()
    # the inputs a backward declared with @backward_kernel gives gradients (None: every input)
    backward_grads: tuple[str, ...] | None = None
    differentiable: bool = True
    # why the gradient rule's results have no derivative of their own, when it computes them
    # with code the engine does not record (an MXNet-form CustomOp's imperative backward): a
    # second derivative or forward mode through them is refused with these words, never a zero
    gradient_not_recorded: str | None = None
    # kernels tested against references (the built-ins declare it): after them only the O(1)
    # structure checks of sparse outputs run; every other kernel's outputs are checked for
    # array type, dtype and shape, and fully (O(nnz), unset values) under SPARSE_OPS_BOUNDSCHECK=1.
    # Subclasses inherit it: one that brings kernels of its own untested sets trusted = False.
    trusted: bool = False
    # whether the kernels may write an output straight into an ``out=`` array that is also an
    # input, or shares memory with one: True for value-by-value kernels, which read each value
    # before writing its place. Otherwise such an out= gets a new result, copied in afterwards.
    out_may_alias: bool = False
    # how the op distributes over row blocks (sparse_ops.dask): "rows" (row-separable: run per
    # block, stack the results' rows), "sum" (the result is the sum of per-block results) or
    # None (refused); partition_args names the inputs cut into row blocks (None: every input)
    partition: str | None = None
    partition_args: tuple[str, ...] | None = None
    # whether infer_shape may be traced on symbolic sizes (torch.compile with dynamic shapes):
    # True for rules that only do arithmetic on sizes; False where a rule needs concrete ints
    # (a C library's callbacks), and the tracer then specializes the sizes it hands the rule
    symbolic_shapes: bool = True
    # faces this op cannot serve, with the reason ({"dask": "..."}; see sparse_ops.faces)
    unsupported_faces: dict[str, str] = {}
    # an upper bound of each sparse output's stored entries (values for csr, rows for
    # row_sparse) from the inputs' shapes, storage types and stored counts: one rule of
    # sparse_ops.sdk.capacity (same_as("data"), sum_of("lhs", "rhs"), min_of(...),
    # columns_of(...), computed(fn, text), DENSE) for every sparse output and updated input,
    # or a dict of them by name; None: no rule (jax.jit then needs max_nnz= per call)
    capacity: "_capacity.Rule | dict[str, _capacity.Rule] | None" = None

    _opdef: "OpDef"

    def output_count(self) -> int:
        """How many outputs this parameter set gives (override when a parameter decides,
        e.g. ``split(num_outputs=k)``); the default is ``len(outputs)``."""
        return len(self.outputs)

    def visible_output_count(self) -> int:
        """How many outputs are returned to the caller (the rest serve the backward pass)."""
        n = self.output_count()
        return self._opdef.num_visible_outputs if n == len(self.outputs) else n

    def no_gradient(self) -> str | None:
        """Why this parameter set has no gradient although the op has one (its outputs are
        then constants), or None: what ``explain``'s faces say for the gradient faces. The
        default: None (override when a parameter decides, e.g. ``multinomial`` without
        ``get_prob`` gives only category ids)."""
        return None

    def draws_random(self, training: bool) -> bool:
        """Whether a call of this parameter set in this training mode draws random numbers
        (``ctx.rng``): what ``vmap``'s randomness rule and the bridges' seeding ask. The
        default: the op declares the ``"random"`` resource; an op that draws only in
        training (Dropout) says so."""
        return "random" in self.resources

    def output_names(self) -> tuple[str, ...]:
        """The names of this parameter set's outputs, for messages (the declared ``outputs``)."""
        return self._opdef.outputs

    def kept_for_backward(self) -> tuple[tuple[int, ...] | None, tuple[int, ...]]:
        """(input positions, output positions) the tape keeps for ``gradient``; None keeps
        every input. Defaults to the class's ``backward_needs_*`` declarations."""
        return self._opdef.backward_inputs, self._opdef.backward_outputs

    def partitioning(self, *shapes: tuple[int, ...]) -> tuple[str | None, tuple[str, ...] | None]:
        """(rule, partitioned arguments) for inputs of these shapes, how ``sparse_ops.dask``
        runs this parameter set over row blocks. ``"rows"``: output row block i depends only on
        row block i of the partitioned inputs (the others are broadcast whole), so the op runs
        per block and the results' rows are stacked. ``"sum"``: the output is the sum over
        blocks of the op on each block (``dot(csr.T, g)``, a sum over axis 0), reduced with
        ``add_n`` (row_sparse stays row_sparse). None: not distributable. Defaults to the
        class's ``partition`` and ``partition_args`` (None: every input); override when a
        parameter or a shape decides (``dot``'s ``transpose_a``, ``sum``'s ``axis``)."""
        return self._opdef.partition, self._opdef.partition_args

    def infer_shape(self, *shapes: tuple[int, ...]) -> list[tuple[int, ...]]:
        first = shapes[0]
        for s in shapes[1:]:
            if s != first:
                raise ValueError(f"inputs must have one shape, got {list(shapes)}")
        return [first] * self.output_count()

    def infer_type(self, *dtypes: np.dtype) -> list[np.dtype]:
        return [require_one_dtype(self._opdef.name, self._opdef.arguments, dtypes)] * self.output_count()

    def infer_storage_type(self, *stypes: str) -> list[str]:
        return ["default"] * self.output_count()

    def gradient(self, out_grads: list, inputs: list, outputs: list) -> list:
        """Gradients w.r.t. the inputs, built from operators (so they can be recorded).

        A gradient that also accepts ``needs`` (a list of bools, one per input) is told which
        inputs want a gradient, and may return None for the others to save the work."""
        raise NotImplementedError(f"operator {self._opdef.name} declares no gradient")

    def params_dict(self) -> dict[str, Any]:
        return {n: getattr(self, n) for n in self._opdef.params}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params_dict().items())
        return f"{self._opdef.name}({args})"


# ---- checking a declaration -------------------------------------------------------------------
CALL_KEYWORDS = ("out", "req")  # what every operator call takes besides the op's own parameters
RESOURCES = ("workspace", "random")  # Op.resources: what a kernel may ask its context for


def _declared_names(op: str, attr: str, value: Any, role: str = "",
                    among: tuple[str, tuple[str, ...], str] | None = None) -> tuple[str, ...]:
    """The class attribute ``attr`` of operator ``op`` as a tuple of names, checked: a tuple
    (or list) of str and, with ``among = (kind, names, note)``, each one of ``names`` (the
    op's "arguments" or "outputs", ``note`` saying where they come from). The ValueError says
    the op, the attribute, the name at fault and what is allowed: the wording of every
    declaration error of ``OpDef``."""
    if isinstance(value, str) or not isinstance(value, (tuple, list)) or not all(isinstance(v, str) for v in value):
        hint = f" (a bare string is not a tuple: write ({value!r},))" if isinstance(value, str) else ""
        raise ValueError(f"operator {op!r}: {attr} = {value!r}{hint}; allowed: a tuple of names (str), such as "
                         f"('data',)")
    if among is not None:
        kind, names, note = among
        for v in value:
            if v not in names:
                raise ValueError(f"operator {op!r}: {attr}: {role}{v!r} is not {'an' if kind[0] in 'aeiou' else 'a'} "
                                 f"{kind[:-1]}; allowed: the {kind} {names!r}{note}")
    return tuple(value)


def is_name(n: str) -> bool:
    """Whether ``n`` can name an op, an argument or a parameter: an ASCII identifier that is
    no Python keyword (torch's operator schemas and the C ABI's names are ASCII, and the
    code torch.compile generates names them)."""
    return n.isascii() and n.isidentifier() and not keyword.iskeyword(n)


def no_input_rules(op: str) -> str:
    """The refusal of an op without inputs that leaves its outputs' shape or dtype to the
    default rules, which take them from the inputs."""
    return (f"operator {op!r} takes no inputs, so its outputs' shapes and dtypes follow none: declare infer_shape "
            "and infer_type")


def _distinct_names(op: str, attr: str, names: tuple[str, ...], reserved: tuple[str, ...] = ()) -> None:
    """Refuse a repeated name, one that is no Python identifier (each input is a keyword of
    the op's function), or a ``reserved`` one, in the class attribute ``attr``."""
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"operator {op!r}: {attr}: names repeat ({', '.join(map(repr, repeated))}); allowed: "
                         "distinct names")
    for n in names:
        if not is_name(n):
            raise ValueError(f"operator {op!r}: {attr}: {n!r} is not an ASCII identifier or is a Python keyword; "
                             "allowed: a name a Python function may take as an argument, in ASCII (as torch's "
                             "operator schemas)")
        if n in reserved:
            raise ValueError(f"operator {op!r}: {attr}: {n!r} is reserved (every call takes {', '.join(reserved)}); "
                             "allowed: any other name")


KERNEL_STYPES = ("default", "row_sparse", "csr", "*")  # what a kernel's stypes entries may name


def _check_kernel_stypes(op: str, method: str, stypes: tuple[tuple[str, ...], ...], inputs: tuple[str, ...],
                         variadic: bool) -> None:
    """Refuse a kernel's ``stypes`` that cannot match a call: an unknown storage type, or a
    tuple whose length is not the number of inputs (a variadic op's may have any)."""
    for entry in stypes:
        if entry == ("...",):
            continue
        for st in entry:
            if st not in KERNEL_STYPES:
                raise ValueError(f"operator {op!r}: kernel {method}: stypes {entry!r} names {st!r}; allowed: "
                                 f"{', '.join(map(repr, KERNEL_STYPES))}, or ('...',) for any inputs")
        if not variadic and len(entry) != len(inputs):
            raise ValueError(f"operator {op!r}: kernel {method}: stypes {entry!r} lists {len(entry)} storage "
                             f"type(s) for {len(inputs)} input(s) {inputs!r}; allowed: one per input, in order")


_SERIALS = itertools.count(1)  # OpDef.serial: one number per record made


class OpDef:
    """One record of the operator table (NNVM's attribute table, in Python)."""

    def __init__(self, name: str, cls: type, plugin: str | None = None) -> None:
        self.name = name
        self.cls = cls
        self.plugin = plugin
        self.doc = (cls.__doc__ or "").strip()
        # every declaration error names the op, the attribute and what is allowed (_declared_names)
        self.arguments = _declared_names(name, "arguments", cls.arguments)
        self.outputs = _declared_names(name, "outputs", cls.outputs)
        _distinct_names(name, "arguments", self.arguments, CALL_KEYWORDS)
        _distinct_names(name, "outputs", self.outputs)
        args = ("arguments", self.arguments, "")
        outs = ("outputs", self.outputs, " (the default: the class declares no `outputs`)"
                if cls.outputs is Op.outputs else "")
        n_vis = cls.num_visible_outputs
        if n_vis is not None and (not isinstance(n_vis, int) or isinstance(n_vis, bool)
                                  or not 1 <= n_vis <= len(self.outputs)):
            raise ValueError(f"operator {name!r}: num_visible_outputs = {n_vis!r}; allowed: None (every output) or "
                             f"an int from 1 to {len(self.outputs)}, the number of outputs {self.outputs!r}")
        self.num_visible_outputs = n_vis or len(self.outputs)
        self.variadic = bool(cls.variadic)
        if not self.arguments and not self.variadic and (cls.infer_shape is Op.infer_shape
                                                         or cls.infer_type is Op.infer_type):
            raise ValueError(no_input_rules(name))
        self.mutate = _declared_names(name, "mutate", cls.mutate, "mutated input ", args)
        self.resources = _declared_names(name, "resources", cls.resources, "resource ",
                                         ("resources", RESOURCES, " a kernel may ask for"))
        # constant: declared differentiable = False (outputs carry no gradient); differentiable:
        # has a gradient rule. An op that is neither cannot be differentiated through (an error).
        self.constant = not cls.differentiable
        # whether a parameter set may have no gradient (Op.no_gradient overridden): the tape asks it then
        self.gradient_by_params = cls.no_gradient is not Op.no_gradient
        # the backward as kernels on the op (sparse_ops.backward_op): (method name, method, spec)
        self.backward_kernels = [(attr, value, spec) for klass in reversed(cls.__mro__)
                                 for attr, value in vars(klass).items()
                                 for spec in getattr(value, "_sparse_ops_backward_kernels", ())]
        self.backward_grads = tuple(range(len(self.arguments))) if cls.backward_grads is None else tuple(
            self.arguments.index(a) for a in _declared_names(name, "backward_grads", cls.backward_grads, "input ",
                                                             args))
        self.differentiable = not self.constant and (cls.gradient is not Op.gradient or bool(self.backward_kernels))
        if self.backward_kernels and cls.gradient is not Op.gradient:
            raise ValueError(f"operator {name!r}: declares both gradient() and backward kernels; allowed: one of them")
        self.gradient_takes_needs = self.differentiable and "needs" in inspect.signature(cls.gradient).parameters
        self.params: dict[str, Param] = {}
        for klass in reversed(cls.__mro__):
            for attr, value in vars(klass).items():
                if isinstance(value, Param):
                    if not is_name(attr):
                        raise ValueError(f"operator {name!r}: parameter {attr!r} is not an ASCII identifier; allowed: "
                                         "an ASCII name that is no Python keyword (as torch's operator schemas)")
                    if callable(getattr(Op, attr, None)):
                        raise ValueError(f"operator {name!r}: parameter {attr!r} would hide the Op method of that "
                                         f"name; allowed: any name no Op method has")
                    if attr in CALL_KEYWORDS or attr in self.arguments:
                        raise ValueError(f"operator {name!r}: parameter {attr!r} is "
                                         f"{'an input name' if attr in self.arguments else 'a keyword of every call'}; "
                                         f"allowed: any other name (every call takes {', '.join(CALL_KEYWORDS)})")
                    value.name = attr
                    self.params[attr] = value
        # each default parsed and checked as a passed value is: Param(bool, "False") is False
        self.defaults: dict[str, Any] = {}
        for pname, p in self.params.items():
            if not p.required:
                try:
                    self.defaults[pname] = p.parse(p.default, f"operator {name!r}")
                except ParameterError as exc:
                    raise ValueError(f"{exc} (the parameter's declared default); allowed: a default that parses "
                                     "as the parameter's type and lies in its choices") from None
        self.partition = cls.partition
        if self.partition not in PARTITIONS:
            raise ValueError(f"operator {name!r}: partition = {self.partition!r}; allowed: partition must be one of "
                             f"{PARTITIONS}")
        self.partition_args = None if cls.partition_args is None else _declared_names(
            name, "partition_args", cls.partition_args, "partitioned input ", args)
        # the capacity rules by output / updated-input name ("*": all); {} when none is declared
        self.capacity: dict[str, _capacity.Rule] = _capacity.declared(name, cls, self.params)
        needs_in = None if cls.backward_needs_inputs is None else _declared_names(
            name, "backward_needs_inputs", cls.backward_needs_inputs, "input ", args)
        needs_out = _declared_names(name, "backward_needs_outputs", cls.backward_needs_outputs, "output ", outs)
        # positions the tape keeps for the backward pass; None keeps every input
        self.backward_inputs = None if needs_in is None else tuple(self.arguments.index(a) for a in needs_in)
        self.backward_outputs = tuple(self.outputs.index(o) for o in needs_out)
        # the declared backward's argument names (sparse_ops.backward_op), checked here
        self.backward_argument_names = self._backward_argument_names() if self.backward_kernels else ()
        # kernels: dense ones by device type, storage-aware ones by (device type, input stypes)
        self.fcompute: dict[str, Callable] = {}
        self.fcompute_ex: dict[tuple[str, tuple[str, ...]], Callable] = {}
        self.trusted_kernels: set[Callable] = set()  # defined by a class that declares trusted = True
        for klass in reversed(cls.__mro__):
            for attr, value in vars(klass).items():
                specs = getattr(value, "_sparse_ops_kernels", ())
                if specs and klass.trusted:
                    self.trusted_kernels.add(value)
                for spec in specs:
                    if spec.stypes is not None:
                        _check_kernel_stypes(name, attr, spec.stypes, self.arguments, self.variadic)
                    for dev in spec.devices:
                        if spec.stypes is None:
                            self.fcompute[dev] = value
                        else:
                            for st in spec.stypes:
                                self.fcompute_ex[(dev, st)] = value
        self._instances: dict[Any, Op] = {}
        self._default_instance: Op | None = None
        self._lock = threading.Lock()
        self.plans: dict[Any, Any] = {}  # filled by dispatch.py
        self.function: Any = None  # the generated Python function (dispatch.op_function)
        # True while another record holds this one's name, or none does (``_retire``)
        self.retired = False
        # which registration this record is, in digits: a replaced op's new record has another
        # (what a traced call carries, so a compiled graph of the old record is told apart; a
        # string, which tracers keep constant where they may make an int symbolic)
        self.serial = str(next(_SERIALS))
        if not any(p.required for p in self.params.values()):
            try:
                self._default_instance = self._make_instance({})
            except (OperatorError, TypeError, ValueError):
                self._default_instance = None  # built per call, so the caller sees the error

    def _backward_argument_names(self) -> tuple[str, ...]:
        """The argument names of the backward that backward kernels declare (the visible
        outputs' gradients, the kept inputs, the kept outputs); refuses, at registration,
        a declaration whose backward operator cannot be built (``backward_op``): a variadic
        op, gradients of inputs not kept for the backward, arguments that repeat a name."""
        name, nvis = self.name, self.num_visible_outputs
        if self.variadic:
            raise ValueError(f"operator {name!r}: a variadic op cannot declare backward kernels; write gradient() "
                             "instead")
        kept_in = range(len(self.arguments)) if self.backward_inputs is None else self.backward_inputs
        missing = [self.arguments[i] for i in self.backward_grads if i not in kept_in]
        if missing:
            raise ValueError(f"operator {name!r}: backward kernels: the inputs {missing} get gradients but are not "
                             "kept for the backward (backward_needs_inputs); keep them: a gradient takes its "
                             "input's shape")
        arguments = (tuple(f"{o}_grad" for o in self.outputs[:nvis]) + tuple(self.arguments[i] for i in kept_in)
                     + tuple(self.outputs[j] for j in self.backward_outputs))
        if len(set(arguments)) != len(arguments):
            raise ValueError(f"operator {name!r}: backward kernels: their arguments {arguments} repeat a name; "
                             "rename an input or output")
        return arguments

    # ---- parameters ---------------------------------------------------------------------------
    def instance(self, kwargs: dict[str, Any]) -> Op:
        """The (cached) Op instance holding these parsed parameters."""
        if not kwargs:
            inst = self._default_instance
            if inst is not None:
                return inst
            return self._make_instance({})  # raises: a required parameter is missing
        try:
            key = param_key(kwargs)  # by type and value: True, 1 and 1.0 parse differently
            inst = self._instances.get(key)
        except TypeError:  # a value with no key (an unhashable object): parse without caching
            return self._make_instance(kwargs)
        if inst is None:
            inst = self._make_instance(kwargs)
            with self._lock:
                cache = self._instances
                while len(cache) >= MAX_CACHED_INSTANCES:  # the oldest go: bounded whatever the values
                    del cache[next(iter(cache))]
                inst = cache.setdefault(key, inst)
        return inst

    def _make_instance(self, kwargs: dict[str, Any]) -> Op:
        factory = getattr(self.cls, "from_params", None)
        if factory is not None:  # the op builds its own instances (MXNet-form custom ops)
            return factory(self, kwargs)
        unknown = [k for k in kwargs if k not in self.params]
        if unknown:
            accepted = ", ".join(self.params) or "none"
            raise ParameterError(
                f"{self.label}: unknown parameter(s) {', '.join(map(repr, unknown))}; accepted: {accepted}"
            )
        inst = object.__new__(self.cls)
        for pname, p in self.params.items():
            if pname in kwargs:
                value = p.parse(kwargs[pname], self.label)
            elif p.required:
                raise ParameterError(f"{self.label}: missing required parameter {pname!r}")
            else:
                value = self.defaults[pname]
            object.__setattr__(inst, pname, value)
        check = getattr(inst, "check_params", None)
        if check is not None:
            try:
                check()
            except (TypeError, ValueError) as exc:
                raise ParameterError(f"{self.label}: {exc}") from None
        return inst

    @property
    def label(self) -> str:
        """How messages name this operator: its name, and its plugin when it has one."""
        return f"operator {self.name!r}" + (f" (plugin {self.plugin})" if self.plugin else "")

    @property
    def constant_declaration(self) -> str:
        """How the author declared the outputs constant, in the author's language: a C
        library's flag, a Python op's attribute."""
        return "SO_OP_CONSTANT" if getattr(self.cls, "c_library", None) else "differentiable = False"

    def describe(self) -> str:
        lines = [f"{self.name}({', '.join(self.arguments)}{', ...' if self.variadic else ''})"]
        if self.plugin:
            lines.append(f"plugin: {self.plugin}")
        if self.doc:
            lines.append(self.doc)
        if self.params:
            lines.append("parameters:")
            lines += [f"  {p.describe()}" for p in self.params.values()]
        lines.append("kernels:")
        for dev in sorted(self.fcompute):
            lines.append(f"  {dev} fcompute (dense)")
        for (dev, st), fn in sorted(self.fcompute_ex.items()):
            lines.append(f"  {dev} fcompute_ex {','.join(st)} -> {fn.__name__}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<OpDef {self.name}{' from ' + self.plugin if self.plugin else ''}>"


# ---- the table --------------------------------------------------------------------------------
# Who may change what: ``register`` adds (or, when allowed, replaces) one op; ``unregister``
# removes one; ``snapshot`` / ``restore`` undo a batch (a plugin that failed half-way, a test).
# Every change is announced to the subscribers (``subscribe``): that is how ``sparse_ops.ops``
# keeps each op's generated function, without this module importing the layers above it.
_TABLE: dict[str, OpDef] = {}
_TABLE_LOCK = threading.RLock()  # re-entrant: a subscriber may read the table while it is told
_OWNERS: "weakref.WeakKeyDictionary[OpDef, Owner]" = weakref.WeakKeyDictionary()  # who registered each record
_DECLARED: "weakref.WeakKeyDictionary[OpDef, type]" = weakref.WeakKeyDictionary()  # the class @register saw
_CONTEXT = threading.local()  # .owner: the plugin being loaded on this thread (``registering_as``)
_SUBSCRIBERS: list[Callable[[str, "OpDef | None"], None]] = []
_CLASS_ADAPTERS: list[Callable[[str, type], "type | None"]] = []
BUILTIN_PACKAGE = "sparse_ops"  # classes defined in this package's modules are the built-ins


@dataclass(frozen=True)
class Owner:
    """Who registered an op, for error messages and for undoing a plugin's work.

    ``kind`` is ``"built-in"`` (a class defined in the ``sparse_ops`` package), ``"plugin"``
    (an installed plugin, or ``register(..., plugin=NAME)``), ``"library"`` (a file or folder
    loaded with ``sparse_ops.library.load``) or ``"user"`` (any other code: a script, a notebook
    cell, a test module). ``plugin`` is the plugin's name (plugins and libraries); ``where`` is
    the library's path, the plugin's source, or for user code the module the class was defined
    in, with ``qualname`` the class's qualified name and ``file`` its file (a notebook cell's
    pseudo-file included).
    """

    kind: str
    plugin: str | None = None
    where: str = ""
    qualname: str = ""
    file: str | None = None

    def __str__(self) -> str:
        if self.kind == "built-in":
            return "a built-in"
        if self.kind == "plugin":
            return f"plugin {self.plugin!r}"
        if self.kind == "library":
            return f"library file {self.where} (plugin {self.plugin!r})"
        return f"user code: class {self.where}.{self.qualname}" + (f" in {self.file}" if self.file else "")


def _defined_in(cls: type) -> str | None:
    """The file a class's methods were compiled from (works for ``__main__`` and notebook
    cells, where ``inspect.getfile`` fails); None for a class without Python methods."""
    for value in vars(cls).values():
        code = getattr(getattr(value, "__func__", value), "__code__", None)
        if code is not None:
            return code.co_filename
    module = sys.modules.get(cls.__module__)
    return getattr(module, "__file__", None)


def _owner_for(cls: type, plugin: str | None) -> Owner:
    """The owner of a registration of ``cls``: the explicit ``plugin``, else the plugin being
    loaded on this thread, else a built-in or user code by where ``cls`` was defined."""
    if plugin is not None:
        return Owner("plugin", plugin)
    current = getattr(_CONTEXT, "owner", None)
    if current is not None:
        return current
    module = getattr(cls, "__module__", "") or ""
    if module == BUILTIN_PACKAGE or module.startswith(BUILTIN_PACKAGE + "."):
        return Owner("built-in")
    return Owner("user", where=module, qualname=cls.__qualname__, file=_defined_in(cls))


@contextlib.contextmanager
def registering_as(owner: Owner | None) -> Iterator[Owner | None]:
    """Attribute the registrations made on this thread inside the block to ``owner`` (what
    ``load_plugins`` and ``library.load`` do while a plugin's module runs); nests."""
    previous = getattr(_CONTEXT, "owner", None)
    _CONTEXT.owner = owner
    try:
        yield owner
    finally:
        _CONTEXT.owner = previous


def add_class_adapter(adapter: Callable[[str, type], "type | None"]) -> None:
    """Let ``register`` accept another kind of class: ``adapter(name, cls)`` returns the
    ``Op`` subclass that runs ``cls``, or None when ``cls`` is not its kind. ``sparse_ops.custom``
    adds the MXNet ``CustomOpProp`` form this way, so this module never imports it."""
    if adapter not in _CLASS_ADAPTERS:
        _CLASS_ADAPTERS.append(adapter)


def subscribe(callback: Callable[[str, "OpDef | None"], None]) -> None:
    """Call ``callback(name, opdef)`` after every change of the table: the new record after a
    registration or a restore, None after a removal. ``sparse_ops.ops`` subscribes to publish
    each op's generated function. A subscriber that raises on a registration undoes it
    (the table as it was, announced again), and the error reaches the caller of ``register``."""
    if callback not in _SUBSCRIBERS:
        _SUBSCRIBERS.append(callback)


def _retire(opdef: "OpDef | None", retired: bool = True) -> None:
    """Mark a record that left the table (``retired``) or came back to it: its generated
    function, held by a caller from before the change, then runs the table's current record
    (``dispatch.op_function``). What was bound to the record itself (a recorded graph's
    nodes, a library's gradient ops) keeps running it."""
    if opdef is not None:
        opdef.retired = retired


def _announce(changes: Iterable[tuple[str, "OpDef | None"]]) -> None:
    for name, opdef in changes:
        for callback in list(_SUBSCRIBERS):
            callback(name, opdef)


def _refusal(name: str, old: OpDef, new_cls: type, new_owner: Owner, replace: bool) -> str | None:
    """Why registering ``new_cls`` as ``name`` for ``new_owner`` over ``old`` is refused, or
    None if it may replace ``old``."""
    old_owner = owner_of(name)
    if old_owner.plugin and new_owner.plugin and old_owner.plugin != new_owner.plugin:
        return (f"plugin {new_owner.plugin!r} cannot register operator {name!r}: {old_owner} already "
                f"registered it (two plugins cannot share an operator name)")
    if replace:
        return None
    same_class = new_cls is _DECLARED.get(old, old.cls)
    same_place = (new_owner.where, new_owner.qualname) == (old_owner.where, old_owner.qualname)
    if new_owner.kind == old_owner.kind == "user" and same_place and not same_class:
        # user code defining the op again where it did before: a re-run notebook cell, a reload
        # (the file is not compared: IPython names each run of a cell differently)
        return None
    by = f"plugin {new_owner.plugin!r}: " if new_owner.plugin else ""
    if hasattr(new_cls, "_c_spec"):  # a C library's declaration: no replace=True to pass
        return (f"{by}operator {name!r} is already registered (owner: {old_owner}); a C library cannot replace "
                f"an operator: give its so_op_decl another name")
    hint = _reload_hint(old_owner, old) if new_owner.kind == "user" else ""
    if hint:  # most likely the plugin's own module run again (a re-import, importlib.reload)
        return (f"{by}operator {name!r} is already registered (owner: {old_owner}){hint}; to put another class "
                "in its place, pass replace=True")
    return f"{by}operator {name!r} is already registered (owner: {old_owner}); pass replace=True to replace it"


def _reload_hint(owner: Owner, old: OpDef) -> str:
    """How to load edited code of the plugin or library file that owns ``old`` (what a
    developer who ran its module again, e.g. ``importlib.reload``, meant), or ""."""
    if owner.kind == "library":
        path = owner.where
    elif owner.kind == "plugin":  # an installed plugin (entry point): its module's file or package folder
        top = sys.modules.get(old.cls.__module__.partition(".")[0])
        path = getattr(top, "__file__", None)
        if path is None:
            return ""
        if os.path.basename(path) == "__init__.py":
            path = os.path.dirname(path)
    else:
        return ""
    return (f"; to load the edited code of plugin {owner.plugin!r}, call sparse_ops.library.reload({path!r}) "
            f"instead: it replaces all of the plugin's ops together")


def register(name: str, replace: bool = False, plugin: str | None = None) -> Callable[[type], type]:
    """Class decorator: add an operator to the table under ``name``: an ``Op`` subclass
    (kernel-first form) or an MXNet-style ``CustomOpProp`` subclass. Returns the class.

    Registering a taken name is an error naming the name's owner (a built-in, a plugin, a
    library file, user code: see ``Owner``) unless ``replace=True``, with one exception: user
    code that defines the op again from the same place (the same ``module.qualname``: a re-run
    notebook cell, ``importlib.reload``) replaces it, since that is an edit, not a clash. A
    plugin can never take a name another plugin registered, even with ``replace=True``.

    The op belongs to ``plugin`` if given, else to the plugin being loaded on this thread
    (``registering_as``), else to the built-ins or the user code that defined the class.
    """
    if not isinstance(name, str) or not is_name(name):
        raise ValueError(f"operator names are ASCII identifiers and no Python keywords (torch's operator schemas "
                         f"and compiled code take no other), got {name!r}")

    def deco(cls: type) -> type:
        op_cls = cls
        if isinstance(cls, type) and not issubclass(cls, Op):
            for adapter in list(_CLASS_ADAPTERS):
                adapted = adapter(name, cls)
                if adapted is not None:
                    op_cls = adapted
                    break
        if not (isinstance(op_cls, type) and issubclass(op_cls, Op)):
            raise TypeError(f"@register({name!r}) decorates a subclass of sparse_ops.Op or "
                            f"sparse_ops.CustomOpProp, got {cls!r}")
        owner = _owner_for(cls, plugin)
        opdef = OpDef(name, op_cls, owner.plugin)
        with _TABLE_LOCK:
            old = _TABLE.get(name)
            why = None if old is None else _refusal(name, old, cls, owner, replace)
            if why is not None:
                raise OperatorError(why)
            _TABLE[name] = opdef
            _OWNERS[opdef] = owner
            _DECLARED[opdef] = cls
            op_cls._opdef = opdef
            _retire(old)
            try:
                _announce([(name, opdef)])
            except BaseException:  # a subscriber refused it: the table is as it was, the name free
                if old is None:
                    del _TABLE[name]
                else:
                    _TABLE[name] = old
                _retire(old, False)
                _retire(opdef)
                _OWNERS.pop(opdef, None)
                _DECLARED.pop(opdef, None)
                _announce([(name, old)])
                raise
        return cls

    return deco


def unregister(name: str) -> OpDef:
    """Remove operator ``name`` from the table (and its generated function from
    ``sparse_ops.ops``) and return its record; OperatorError if there is none."""
    with _TABLE_LOCK:
        opdef = _TABLE.pop(name, None)
        if opdef is None:
            raise OperatorError(f"no operator named {name!r} to unregister")
        _retire(opdef)
        _announce([(name, None)])
    return opdef


class Snapshot:
    """The table at one moment, for ``restore``: which record each name held, and owners."""

    __slots__ = ("_table", "_owners")

    def __init__(self, table: dict[str, OpDef], owners: dict[OpDef, Owner]) -> None:
        self._table, self._owners = table, owners

    def __repr__(self) -> str:
        return f"<registry.Snapshot of {len(self._table)} operators>"


def snapshot() -> Snapshot:
    """The current table, to ``restore`` later (cheap: it copies the name -> record map)."""
    with _TABLE_LOCK:
        table = dict(_TABLE)
        return Snapshot(table, {opdef: _OWNERS[opdef] for opdef in table.values() if opdef in _OWNERS})


def restore(saved: Snapshot, names: Iterable[str] | None = None) -> list[str]:
    """Put the table back as it was at ``snapshot()``: ops added since are removed, ops replaced
    or removed since come back (with their owners and generated functions). ``names`` limits
    this to those names (a failed plugin's own ops), leaving changes to others in place.
    Returns the names that changed, sorted."""
    with _TABLE_LOCK:
        wanted = set(_TABLE) | set(saved._table) if names is None else set(names)
        changes: list[tuple[str, OpDef | None]] = []
        for name in sorted(wanted):
            before, now = saved._table.get(name), _TABLE.get(name)
            if before is now:
                continue
            _retire(now)
            _retire(before, False)
            if before is None:
                del _TABLE[name]
            else:
                _TABLE[name] = before
                if before in saved._owners:
                    _OWNERS[before] = saved._owners[before]
            changes.append((name, before))
        _announce(changes)
    return [name for name, _ in changes]


def owner_of(name: str) -> Owner:
    """Who registered operator ``name`` (see ``Owner``); OperatorError if there is none."""
    opdef = get_op(name)
    owner = _OWNERS.get(opdef)
    return owner if owner is not None else _owner_for(opdef.cls, opdef.plugin)


def set_owner(name: str, owner: Owner) -> None:
    """Attribute the registered op ``name`` to ``owner`` (a plugin adopting the ops its module
    registered in a plain import before ``load_plugins`` ran)."""
    with _TABLE_LOCK:
        opdef = get_op(name)
        _OWNERS[opdef] = owner
        opdef.plugin = owner.plugin


find_op = _TABLE.get  # name -> the table's record of that operator, or None: a call's fast look-up


def get_op(name: str) -> OpDef:
    """The table's record of operator ``name``; OperatorError if there is none."""
    try:
        return _TABLE[name]
    except KeyError:
        raise OperatorError(f"no operator named {name!r}") from None


def list_ops() -> list[str]:
    """Names of every registered operator, sorted."""
    return sorted(_TABLE)


def all_ops() -> Iterable[OpDef]:
    """Every registered record (a copy of the list: the table may change meanwhile)."""
    return list(_TABLE.values())
