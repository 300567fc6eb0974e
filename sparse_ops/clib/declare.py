"""Reading a C library's ``so_op_decl``: ``decode`` checks every struct's size and version,
every name, code and count, and gives plain Python data, an ``OpSpec`` (which
``opclass.op_class`` turns into an ``Op`` subclass); ``c_params`` gives the ``so_params`` of
one parsed parameter set."""
from __future__ import annotations

import ctypes as C
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..registry import REQUIRED, Op, Param, is_name, no_input_rules
from . import abi


# attributes the Op class of a C declaration may carry besides Op's own: no parameter takes them
RESERVED_NAMES = frozenset({"samples", "reference", "reference_op", "opcheck_skip", "c_library", "capacity",
                            "out", "req"})  # the last two: keywords of every operator call


class DeclarationError(ValueError):
    """A declaration handed to ``register_op`` is malformed; the message says what."""


@dataclass(frozen=True)
class ParamSpec:
    name: str
    type: int
    default: str | None  # None: required
    doc: str


@dataclass(frozen=True)
class KernelSpec:
    device: str
    stypes: tuple[str, ...] | None  # None: dense; "*" for SO_STYPE_ANY
    address: int


@dataclass(frozen=True)
class GradientSpec:
    input: int
    op: str
    args: tuple[tuple[int, int], ...]  # (abi.REF_*, index)
    params: tuple[tuple[str, str], ...]
    forward_params: bool


@dataclass
class OpSpec:
    """One C operator's declaration, decoded and checked."""

    name: str
    doc: str
    arguments: tuple[str, ...]
    outputs: tuple[str, ...]
    aux: tuple[str, ...]
    params: tuple[ParamSpec, ...]
    infer_shape: int | None  # function addresses
    infer_type: int | None
    infer_storage_type: int | None
    kernels: tuple[KernelSpec, ...]
    gradients: tuple[GradientSpec, ...]
    resources: int
    constant: bool
    partition: str | None = None
    samples: list = field(default_factory=list)  # [(inputs as containers, {param: value})]
    # ABI 1.1: the op opcheck compares outputs with, whether it gets this call's parameters,
    # and the checks opcheck skips ({check: reason})
    reference: str | None = None
    reference_forward_params: bool = False
    opcheck_skip: dict[str, str] = field(default_factory=dict)
    capacity_like: dict[str, str] = field(default_factory=dict)  # output -> the input bounding its stored count
    partition_args: tuple[str, ...] | None = None  # ABI 1.2: the inputs cut into row blocks (None: every input)

    @property
    def inputs(self) -> tuple[str, ...]:
        return self.arguments + self.aux


# ---- decoding ----------------------------------------------------------------------------------
def check_header(struct: type, address: int, what: str) -> int:
    """Refuse a struct that does not start with a size and ABI version this host reads;
    returns its struct_size (smaller than ours for a struct of an older minor version, whose
    later fields the caller must not read: ``abi.has_field``)."""
    if not address:
        raise DeclarationError(f"{what} is a NULL pointer")
    size, version = (C.c_uint32 * 2).from_address(address)
    if version >> 16 != abi.ABI_MAJOR:
        raise DeclarationError(f"{what} says ABI version {abi.version_text(version)}; this sparse_ops speaks "
                               f"{abi.version_text(abi.ABI_VERSION)} (was it initialised with SO_HEADER(...) "
                               f"or SO_INIT(...)?)")
    if size < abi.minimum_size(struct):
        name = _c_name(struct)
        older = (f" (at least {abi.minimum_size(struct)} in ABI 1.0)"
                 if abi.minimum_size(struct) != C.sizeof(struct) else "")
        raise DeclarationError(f"{what} has struct_size {size}, but an ABI {abi.version_text(abi.ABI_VERSION)} "
                               f"{name} has {C.sizeof(struct)} bytes{older} (was it initialised with "
                               f"SO_HEADER({name}) or SO_INIT(...)?)")
    return int(size)


def _c_name(struct: type) -> str:
    return next(name for name, s in abi.STRUCTS.items() if s is struct)


def _text(raw: bytes | None, what: str, required: bool = True) -> str:
    if raw is None:
        if required:
            raise DeclarationError(f"{what} is NULL")
        return ""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise DeclarationError(f"{what} is not UTF-8 text") from None


def _count(n: int, what: str, limit: int = 4096) -> int:
    if not 0 <= n <= limit:
        raise DeclarationError(f"{what} is {n}: expected 0 to {limit}")
    return n


def _names(pointer: Any, n: int, what: str) -> tuple[str, ...]:
    if n and not pointer:
        raise DeclarationError(f"{what}: {n} declared but the array is NULL")
    names = tuple(_text(pointer[i], f"{what}[{i}]") for i in range(n))
    for name in names:
        if not is_name(name):
            raise DeclarationError(f"{what}: {name!r} is not an ASCII identifier or is a Python keyword")
    if len(set(names)) != len(names):
        raise DeclarationError(f"{what}: names repeat: {list(names)}")
    return names


def _items(pointer: Any, struct: type, n: int, what: str) -> list:
    """The n structs of an array, each header checked."""
    if n and not pointer:
        raise DeclarationError(f"{what}: {n} declared but the array is NULL")
    out = []
    base = C.cast(pointer, C.c_void_p).value if n else 0
    stride = C.sizeof(struct)
    for i in range(n):
        address = base + i * stride
        check_header(struct, address, f"{what}[{i}]")
        out.append(struct.from_address(address))
    return out


def _pairs(keys: Any, values: Any, n: int, what: str) -> tuple[tuple[str, str], ...]:
    if n and not (keys and values):
        raise DeclarationError(f"{what}: {n} parameters declared but keys or values are NULL")
    return tuple((_text(keys[i], f"{what} key {i}"), _text(values[i], f"{what} value {i}")) for i in range(n))


def _stype(code: int, what: str, any_ok: bool = False) -> str:
    if any_ok and code == abi.STYPE_ANY:
        return "*"
    st = abi.CODE_STYPES.get(code)
    if st is None:
        raise DeclarationError(f"{what}: unknown storage type code {code}")
    return st


def _opcheck_skips(d: abi.OpDecl, inputs: tuple[str, ...], where: str) -> dict[str, str]:
    """The so_opcheck_skip array of a declaration as {check: reason}, every check name one of
    opcheck's (``abi.OPCHECK_CHECKS``, or ``gradient:<input>``) and every reason said."""
    allowed = (*abi.OPCHECK_CHECKS, *(f"gradient:{name}" for name in inputs))
    table: dict[str, str] = {}
    items = _items(d.opcheck_skips, abi.OpcheckSkip, _count(d.n_opcheck_skips, f"{where}: n_opcheck_skips"),
                   f"{where}: opcheck_skips")
    for i, item in enumerate(items):
        what = f"{where}: opcheck_skips[{i}]"
        check = _text(item.check, f"{what}.check")
        if check not in allowed:
            raise DeclarationError(f"{what}.check is {check!r}, not a check of opcheck; allowed: "
                                   f"{', '.join(allowed)}")
        if check in table:
            raise DeclarationError(f"{what}: check {check!r} is skipped twice")
        reason = _text(item.reason, f"{what}.reason (say why {check!r} is skipped)").strip()
        if not reason:
            raise DeclarationError(f"{what}.reason is empty: say why {check!r} is skipped")
        table[check] = reason
    return table


def decode(address: int, load_samples: Callable[[list, Any], list]) -> OpSpec:
    """Read and check the so_op_decl at ``address``; ``load_samples(samples, spec)`` turns its
    so_sample structs into (inputs, params) pairs. The fields of ABI 1.1 are read only when
    the declaration's struct_size holds them (a library built for 1.0 has none)."""
    size = check_header(abi.OpDecl, address, "so_op_decl")
    d = abi.OpDecl.from_address(address)
    name = _text(d.name, "so_op_decl.name")
    if not is_name(name):
        raise DeclarationError(f"operator name {name!r} is not an ASCII identifier or is a Python keyword")
    where = f"operator {name!r}"
    arguments = _names(d.arguments, _count(d.n_arguments, f"{where}: n_arguments"), f"{where}: arguments")
    outputs = _names(d.outputs, _count(d.n_outputs, f"{where}: n_outputs"), f"{where}: outputs")
    if not outputs:
        raise DeclarationError(f"{where} declares no outputs")
    aux = _names(d.aux_states, _count(d.n_aux, f"{where}: n_aux"), f"{where}: aux_states")
    clash = set(arguments) & set(aux)
    if clash:
        raise DeclarationError(f"{where}: {sorted(clash)} named both as argument and aux state")
    n_in = len(arguments) + len(aux)
    params = []
    for i, p in enumerate(_items(d.params, abi.ParamDecl, _count(d.n_params, f"{where}: n_params"),
                                 f"{where}: params")):
        pname = _text(p.name, f"{where}: params[{i}].name")
        if not is_name(pname) or hasattr(Op, pname) or pname in RESERVED_NAMES:
            raise DeclarationError(f"{where}: parameter name {pname!r} is not an ASCII identifier or is reserved")
        if p.type not in abi.PARAM_TYPES:
            raise DeclarationError(f"{where}: parameter {pname!r} has unknown type code {p.type}")
        if pname in arguments or any(q.name == pname for q in params):
            raise DeclarationError(f"{where}: parameter name {pname!r} repeats "
                                   f"{'an argument' if pname in arguments else 'another parameter'}")
        params.append(ParamSpec(pname, p.type, _text(p.default_value, "", required=False) if p.default_value
                                is not None else None, _text(p.doc, "", required=False)))
    kernels = []
    for i, k in enumerate(_items(d.kernels, abi.Kernel, _count(d.n_kernels, f"{where}: n_kernels"),
                                 f"{where}: kernels")):
        dev = {abi.DEVICE_CPU: "cpu", abi.DEVICE_GPU: "gpu"}.get(k.device_type)
        if dev is None:
            raise DeclarationError(f"{where}: kernels[{i}] has unknown device type {k.device_type}")
        if not k.fn:
            raise DeclarationError(f"{where}: kernels[{i}].fn is NULL")
        stypes = None
        if k.stypes:
            if k.n_stypes != n_in:
                raise DeclarationError(f"{where}: kernels[{i}] lists {k.n_stypes} storage types for {n_in} inputs")
            stypes = tuple(_stype(k.stypes[j], f"{where}: kernels[{i}].stypes[{j}]", any_ok=True)
                           for j in range(n_in))
        kernels.append(KernelSpec(dev, stypes, k.fn))
    if not kernels:
        raise DeclarationError(f"{where} declares no kernels")
    gradients = []
    for i, g in enumerate(_items(d.gradients, abi.Gradient, _count(d.n_gradients, f"{where}: n_gradients"),
                                 f"{where}: gradients")):
        what = f"{where}: gradients[{i}]"
        if not 0 <= g.input < n_in:
            raise DeclarationError(f"{what}.input is {g.input}: the op has {n_in} inputs")
        op = _text(g.op, f"{what}.op")
        n_args = _count(g.n_args, f"{what}.n_args")
        if n_args and not g.args:
            raise DeclarationError(f"{what}.args is NULL")
        refs = []
        for j in range(n_args):
            kind, index = g.args[j] >> 16, g.args[j] & 0xFFFF
            limit = {abi.REF_INPUT: n_in, abi.REF_OUTPUT: len(outputs), abi.REF_OUT_GRAD: len(outputs)}.get(kind)
            if limit is None or index >= limit:
                raise DeclarationError(f"{what}.args[{j}] = {g.args[j]:#x} names no input, output or output "
                                       f"gradient (use SO_INPUT(i), SO_OUTPUT(i), SO_OUT_GRAD(i))")
            refs.append((kind, index))
        gradients.append(GradientSpec(g.input, op, tuple(refs),
                                      _pairs(g.param_keys, g.param_values, _count(g.n_params, f"{what}.n_params"),
                                             what), bool(g.forward_params)))
    known_resources = abi.RESOURCE_WORKSPACE | abi.RESOURCE_RANDOM
    if d.resources & ~known_resources:
        raise DeclarationError(f"{where}: resources {d.resources:#x} sets bits no resource has; allowed: "
                               "SO_RESOURCE_WORKSPACE, SO_RESOURCE_RANDOM")
    if d.flags & ~abi.OP_CONSTANT:
        raise DeclarationError(f"{where}: flags {d.flags:#x} sets bits no flag has; allowed: SO_OP_CONSTANT")
    if d.flags & abi.OP_CONSTANT and gradients:
        raise DeclarationError(f"{where}: declared SO_OP_CONSTANT (no gradient) and {len(gradients)} gradient "
                               "term(s); allowed: one of them")
    if not n_in and not (d.infer_shape and d.infer_type):
        raise DeclarationError(no_input_rules(name))
    spec = OpSpec(name, _text(d.doc, "", required=False) if d.doc is not None else "", arguments, outputs, aux,
                  tuple(params), d.infer_shape or None, d.infer_type or None, d.infer_storage_type or None,
                  tuple(kernels), tuple(gradients), int(d.resources), bool(d.flags & abi.OP_CONSTANT))
    if d.partition not in abi.PARTITIONS:
        raise DeclarationError(f"{where}: unknown partition code {d.partition}")
    spec.partition = abi.PARTITIONS[d.partition]
    if abi.has_field(abi.OpDecl, size, "opcheck_skips"):
        if d.reference is not None:
            reference = _text(d.reference, f"{where}: reference")
            if not is_name(reference) or reference == name:
                raise DeclarationError(f"{where}: reference is {reference!r}; allowed: NULL or the name of another "
                                       f"op (a built-in or an op of this library) computing the same outputs")
            spec.reference = reference
            spec.reference_forward_params = bool(d.reference_forward_params)
        spec.opcheck_skip = _opcheck_skips(d, spec.inputs, where)
    if abi.has_field(abi.OpDecl, size, "capacity_like") and d.capacity_like:
        for i, out in enumerate(spec.outputs):
            k = int(d.capacity_like[i])
            if k == abi.CAPACITY_NONE:
                continue
            if not 0 <= k < len(spec.inputs):
                raise DeclarationError(f"{where}: capacity_like[{i}] (output {out!r}) is {k}; allowed: "
                                       f"SO_CAPACITY_NONE (-1) or an input index 0..{len(spec.inputs) - 1}")
            spec.capacity_like[out] = spec.inputs[k]
    if abi.has_field(abi.OpDecl, size, "partition_args"):
        spec.partition_args = _partition_args(d, spec, where)
    raw_samples = _items(d.samples, abi.Sample, _count(d.n_samples, f"{where}: n_samples"), f"{where}: samples")
    spec.samples = load_samples(raw_samples, spec)
    return spec


def _partition_args(d: Any, spec: OpSpec, where: str) -> tuple[str, ...] | None:
    """The names of the inputs ``partition_args`` lists (None when it lists none: every
    input is cut), checked: indices of inputs, each once, and a partition rule to cut by."""
    n = _count(d.n_partition_args, f"{where}: n_partition_args")
    if not n:
        return None
    if not d.partition_args:
        raise DeclarationError(f"{where}: n_partition_args is {n} but partition_args is NULL")
    picked = [int(d.partition_args[j]) for j in range(n)]
    if spec.partition is None:
        raise DeclarationError(f"{where}: partition_args needs a partition rule (partition = SO_PARTITION_ROWS or "
                               f"SO_PARTITION_SUM); it is SO_PARTITION_NONE")
    names = []
    for j, k in enumerate(picked):
        if not 0 <= k < len(spec.inputs) or spec.inputs[k] in names:
            raise DeclarationError(f"{where}: partition_args[{j}] is {k}; allowed: each input index "
                                   f"0..{len(spec.inputs) - 1} at most once")
        names.append(spec.inputs[k])
    return tuple(names)


# ---- parameters as C strings ---------------------------------------------------------------------
def param_text(value: Any) -> str:
    """A parsed parameter value in the header's canonical form (ints in decimal, floats as
    repr, bools as 1/0, shapes as a tuple)."""
    if isinstance(value, (bool, np.bool_)):
        return "1" if value else "0"
    if isinstance(value, float):
        return repr(value)
    return str(tuple(value)) if isinstance(value, (tuple, list)) else str(value)


class CParams:
    """An so_params struct for one parsed parameter set, and the strings it points to."""

    def __init__(self, items: list[tuple[str, str]]) -> None:
        self.keys = (C.c_char_p * max(len(items), 1))(*[k.encode() for k, _ in items])
        self.values = (C.c_char_p * max(len(items), 1))(*[v.encode() for _, v in items])
        self.struct = abi.Params(*abi.header(abi.Params), len(items), self.keys, self.values)
        self.address = C.addressof(self.struct)


def c_params(inst: Op) -> CParams:
    """The so_params of an Op instance (built once per parameter set: instances are cached)."""
    cached = inst.__dict__.get("_so_params")
    if cached is None:
        cached = CParams([(n, param_text(v)) for n, v in inst.params_dict().items()])
        inst.__dict__["_so_params"] = cached
    return cached


def int64(value: Any) -> int:
    """An ``SO_PARAM_INT`` value: an int (as ``Param(int)`` parses one) that fits the C
    library's int64 (``so_param_int`` reads it with ``strtoll``, which would clamp it)."""
    v = Param(int).parse_value(value)
    if not -2**63 <= v < 2**63:
        raise ValueError(f"{v} does not fit the C library's int64")
    return v


def int64_shape(value: Any) -> tuple[int, ...]:
    """An ``SO_PARAM_SHAPE`` value: a shape (as ``Param("shape")`` parses one) whose every
    entry fits the C library's int64, as an ``SO_PARAM_INT`` must."""
    shape = Param("shape").parse_value(value)
    for d in shape:
        if not -2**63 <= d < 2**63:
            raise ValueError(f"entry {d} of {shape} does not fit the C library's int64")
    return shape


def c_string(value: Any) -> str:
    """An ``SO_PARAM_STRING`` value: a str the C library reads whole (no NUL character, where
    its NUL-terminated copy would end early)."""
    v = Param(str).parse_value(value)
    if "\0" in v:
        raise ValueError(f"{v!r} holds a NUL character, which would end the C library's string there")
    return v


def make_param(p: ParamSpec, op: str) -> Param:
    ptype = {abi.PARAM_INT: int64, abi.PARAM_STRING: c_string, abi.PARAM_SHAPE: int64_shape}.get(
        p.type, abi.PARAM_TYPES[p.type])
    default = REQUIRED
    if p.default is not None:
        try:
            default = Param(ptype).parse_value(p.default)
        except (TypeError, ValueError) as exc:
            raise DeclarationError(f"operator {op!r}: default {p.default!r} of parameter {p.name!r} "
                                   f"does not parse: {exc}") from None
    return Param(ptype, default, p.doc)


__all__ = ["DeclarationError", "OpSpec", "decode", "c_params", "make_param", "param_text"]
