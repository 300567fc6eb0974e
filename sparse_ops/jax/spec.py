"""What one bridged call decides at trace time, from static facts only: the ``CallSpec``.

A spec is made once per (op record, parameters, each input's storage type, shape, dtypes
and stored-value count) and gets a small integer id. The id travels to the FFI handler as
the call's ``call`` attribute; the handler finds the spec by it, so the handler itself
decodes nothing but buffers. Shapes, dtypes and storage types of the outputs come from the
op's own ``infer_shape`` / ``infer_type`` / ``infer_storage_type``.

Component layout (arguments and results of the FFI call, in order): a dense array is one
buffer; a csr array is ``data (nse,)``, ``indices (nse,)``, ``indptr (rows + 1,)``; a
row_sparse array is ``values (nse, *shape[1:])``, ``indices (nse,)``. Sparse *outputs*
have a static capacity ``nse`` (an upper bound of their stored values): a csr output's
true count is ``indptr[-1]`` (the entries after it are padding: zero values, column 0), a
row_sparse output's is the number of indices below ``shape[0]`` (padding rows carry the
index ``shape[0]`` and zero values), so both read back as the right dense array.

The capacity is the call's ``max_nnz=`` when given, else the op's capacity rule
(``Op.capacity``, ``sparse_ops.sdk.capacity``) on the inputs' static stored counts (their
``nse``), capped by the dense size either way (``bridging.result_capacity``). A sparse
result with neither is recorded in ``CallSpec.missing``, and the call is refused naming the
op and the output (``BridgedOp.prepare``): reserving the dense size silently would ask XLA
for rows x columns values.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import registry
from ..bridging import PARTS, param_key, result_capacity
from ..dispatch import _infer
from ..errors import OperatorError
from ..sdk.capacity import Capacity, Stored, slot_names



class JaxBridgeError(OperatorError, ValueError):
    """An op called through the JAX bridge refused its arguments (the message names the op
    and the argument)."""


@dataclass(frozen=True)
class ArgLayout:
    """One input or output of a bridged call: storage type, logical shape, value dtype, index
    dtype (sparse only), stored-value count (capacity, for outputs) and, for a csr input,
    whether it declares its columns sorted and unique in each row (``canonical``: a
    ``BCSR`` with ``indices_sorted`` and ``unique_indices``, and every result of ours);
    one that does not (JAX's default) is sorted and summed by the handler when needed."""

    stype: str
    shape: tuple[int, ...]
    dtype: np.dtype
    index_dtype: np.dtype | None = None
    nse: int = 0
    canonical: bool = True

    def part_shapes(self) -> list[tuple[tuple[int, ...], np.dtype]]:
        if self.stype == "default":
            return [(self.shape, self.dtype)]
        if self.stype == "csr":
            return [((self.nse,), self.dtype), ((self.nse,), self.index_dtype),
                    ((self.shape[0] + 1,), self.index_dtype)]
        return [((self.nse, *self.shape[1:]), self.dtype), ((self.nse,), self.index_dtype)]


class CallSpec:
    """Everything fixed for one call signature (see the module docstring)."""

    def __init__(self, sid: int, opdef: registry.OpDef, inst: registry.Op, params: dict,
                 ins: tuple[ArgLayout, ...], outs: tuple[ArgLayout, ...], nvis: int,
                 mutated: tuple[int, ...] = (), states: tuple[ArgLayout, ...] = (),
                 capacities: tuple[Capacity | None, ...] = (), missing: tuple[str, ...] = ()) -> None:
        self.id, self.opdef, self.inst, self.params = sid, opdef, inst, params
        self.ins, self.outs, self.nvis = ins, outs, nvis
        # inputs the op updates in place (its ``mutate``): JAX arrays are immutable, so the
        # call returns their new values as extra results laid out as ``states``, after ``outs``
        self.mutated, self.states = mutated, states
        # per result (outs, then states): its capacity and where it came from (None: dense);
        # ``missing``: the sparse results with no capacity (no rule, no max_nnz=), described
        self.capacities = capacities or (None,) * (len(outs) + len(states))
        self.missing = missing
        self.n_in_parts = sum(PARTS[a.stype] for a in ins)
        self.n_out_parts = sum(PARTS[a.stype] for a in outs)
        self.all_dense = all(a.stype == "default" for a in (*ins, *outs))
        # the outputs that carry tangents and cotangents (floating values; index arrays and
        # integer results carry none): what derivative calls pass per output
        self.tangent_outs = tuple(j for j, a in enumerate(outs) if np.dtype(a.dtype).kind == "f")
        self.grads: dict[tuple[bool, ...], GradSpec] = {}
        self.derivs: dict[tuple, Any] = {}  # (kind, masks) -> JvpSpec / HvpSpec
        self.native: Any = None  # native.py's cfunc handler, when one serves this signature
        self.lowered: Any = None  # lowering.py's jnp expression serving this call, once decided

    @property
    def name(self) -> str:
        return self.opdef.name

    @property
    def label(self) -> str:
        return f"sparse_ops.jax.ops.{self.opdef.name}"

    def grad_spec(self, needs: tuple[bool, ...]) -> "GradSpec":
        g = self.grads.get(needs)
        if g is None:
            g = self.grads[needs] = GradSpec(_new_id(), self, needs)
            _SPECS[g.id] = g
        return g

    def jvp_spec(self, perturbed: tuple[bool, ...]) -> "JvpSpec":
        """The forward-mode call taking tangents of the inputs ``perturbed`` marks."""
        return self._deriv(("jvp", perturbed), lambda sid: JvpSpec(sid, self, perturbed))

    def hvp_spec(self, perturbed: tuple[bool, ...], needs: tuple[bool, ...]) -> "HvpSpec":
        """The second-order call: tangents of the inputs ``perturbed`` marks, results for
        the inputs ``needs`` marks."""
        return self._deriv(("hvp", perturbed, needs), lambda sid: HvpSpec(sid, self, perturbed, needs))

    def _deriv(self, key: tuple, make: Any) -> Any:
        d = self.derivs.get(key)
        if d is None:
            d = self.derivs[key] = make(_new_id())
            _SPECS[d.id] = d
        return d

    def __repr__(self) -> str:
        return f"<CallSpec {self.id} {self.opdef.name} {[a.stype for a in self.ins]} -> {[a.stype for a in self.outs]}>"


class GradSpec:
    """The backward call of a ``CallSpec``: which inputs get a gradient (``needs``). Its FFI
    call takes the inputs' and outputs' components and one cotangent per tangent output
    (``CallSpec.tangent_outs``), and gives one gradient per input in ``needs``."""

    def __init__(self, sid: int, fwd: CallSpec, needs: tuple[bool, ...]) -> None:
        self.id, self.fwd, self.needs = sid, fwd, needs

    @property
    def label(self) -> str:
        return f"sparse_ops.jax.ops.{self.fwd.opdef.name} (gradient)"


class JvpSpec:
    """The forward-mode call of a ``CallSpec`` (``jax.jvp``): the inputs' and outputs'
    components and one tangent per input in ``perturbed`` in, one tangent per tangent
    output out (the transpose of the gradient rule, ``handlers.run_jvp``)."""

    def __init__(self, sid: int, fwd: CallSpec, perturbed: tuple[bool, ...]) -> None:
        self.id, self.fwd, self.perturbed = sid, fwd, perturbed

    @property
    def label(self) -> str:
        return f"sparse_ops.jax.ops.{self.fwd.opdef.name} (forward-mode derivative)"


class HvpSpec:
    """The second-order call of a ``CallSpec`` (what ``jax.hessian`` needs): the inputs' and
    outputs' components, one cotangent per tangent output and one tangent per input in
    ``perturbed`` in, one result per input in ``needs`` out: the second derivative of
    ``<op(x), cotangent>`` applied to the tangents (``handlers.run_hvp``)."""

    def __init__(self, sid: int, fwd: CallSpec, perturbed: tuple[bool, ...], needs: tuple[bool, ...]) -> None:
        self.id, self.fwd, self.perturbed, self.needs = sid, fwd, perturbed, needs

    @property
    def label(self) -> str:
        return f"sparse_ops.jax.ops.{self.fwd.opdef.name} (second derivative)"


_LOCK = threading.Lock()
_SPECS: dict[int, Any] = {}
_BY_KEY: dict[tuple, CallSpec] = {}
_NEXT = [1]


def _new_id() -> int:
    with _LOCK:
        sid = _NEXT[0]
        _NEXT[0] += 1
        return sid


def lookup(sid: int) -> Any:
    """The spec of id ``sid`` (what the FFI handler does first)."""
    spec = _SPECS.get(sid)
    if spec is None:
        raise JaxBridgeError(f"sparse_ops.jax: no bridged call with id {sid} (the op was re-registered "
                             "or forgotten since this computation was traced; trace it again)")
    return spec


def _index_dtype() -> np.dtype:
    import jax

    return np.dtype(np.int64) if jax.config.jax_enable_x64 else np.dtype(np.int32)


X64 = "jax holds int64 only with x64 on: jax.config.update('jax_enable_x64', True)"
INT32_MAX = 2**31 - 1


def addressed(stype: str, shape: tuple[int, ...]) -> int:
    """How many positions a sparse array's indices must address: columns for csr, rows for
    row_sparse."""
    return shape[1] if stype == "csr" else (shape[0] if shape else 0)


def _facts(lay: ArgLayout) -> Stored:
    """What a capacity rule knows of an input: its static stored count (``nse``, padding
    included) for a sparse one."""
    return Stored(lay.shape, lay.stype, lay.nse if lay.stype != "default" else None, lay.dtype)


def _result_layout(stype: str, shape: tuple[int, ...], dtype: np.dtype, nse: int) -> ArgLayout:
    """The layout of one result; a sparse one holds ``nse`` stored entries (its capacity)."""
    if stype == "default":
        return ArgLayout("default", shape, dtype)
    index = _index_dtype()
    if index == np.dtype(np.int32) and addressed(stype, shape) > INT32_MAX:
        raise OperatorError(f"a {stype} output of shape {shape} needs int64 indices; {X64}")
    return ArgLayout(stype, shape, dtype, index, nse)


def _results(inst: registry.Op, kinds: list[tuple[str, str, tuple[int, ...], np.dtype]], ins: tuple[ArgLayout, ...],
             max_nnz: int | None) -> tuple[list[ArgLayout], list[Capacity | None], list[str]]:
    """(layouts, capacities, missing) of the results ``kinds`` (slot name, storage type,
    shape, dtype each): a sparse result's capacity by ``bridging.result_capacity``; one with
    none is listed in ``missing`` (laid out with capacity 0, never called)."""
    facts = [_facts(a) for a in ins]
    layouts, capacities, missing = [], [], []
    for slot, st, shape, dt in kinds:
        c = None
        if st != "default":
            c = result_capacity(inst, slot, Stored(shape, st, None, dt), facts, max_nnz)
            if c is None:
                missing.append(f"{slot!r} ({st})")
        layouts.append(_result_layout(st, shape, dt, c.value if c is not None else 0))
        capacities.append(c)
    return layouts, capacities, missing


def spec_for(opdef: registry.OpDef, params: dict, ins: tuple[ArgLayout, ...], max_nnz: int | None) -> CallSpec:
    """The (memoised) spec of ``opdef`` with ``params`` on inputs laid out as ``ins``."""
    try:  # parameters by type and value (True, 1 and 1.0 are three specs)
        key = (opdef, param_key(params), ins, max_nnz)
    except TypeError:
        key = None
    if key is not None:
        hit = _BY_KEY.get(key)
        if hit is not None:
            return hit
    label = f"sparse_ops.jax.ops.{opdef.name}"
    try:
        inst = opdef.instance(params) if params else (opdef._default_instance or opdef.instance({}))
        nout = inst.output_count()
        shapes = _infer(opdef, inst, "shape", [a.shape for a in ins], nout)
        dtypes = _infer(opdef, inst, "type", [a.dtype for a in ins], nout)
        stypes = _infer(opdef, inst, "storage_type", [a.stype for a in ins], nout)
    except OperatorError as exc:
        raise JaxBridgeError(f"{label}: {exc}") from exc
    if not opdef.variadic and len(ins) != len(opdef.arguments):
        raise JaxBridgeError(f"{label} takes {len(opdef.arguments)} input(s) ({', '.join(opdef.arguments)}), "
                             f"got {len(ins)}")
    mutated = tuple(opdef.arguments.index(m) for m in opdef.mutate) if not opdef.variadic else ()
    slots = slot_names(inst, nout)
    kinds = [(slot, st, tuple(int(s) for s in shape), np.dtype(dt))
             for slot, st, shape, dt in zip(slots, stypes, shapes, dtypes)]
    kinds += [(opdef.arguments[i], ins[i].stype, ins[i].shape, ins[i].dtype) for i in mutated]
    try:
        layouts, capacities, missing = _results(inst, kinds, ins, max_nnz)
    except OperatorError as exc:
        raise JaxBridgeError(f"{label}: {exc}") from None
    outs, states = layouts[:nout], tuple(layouts[nout:])
    spec = CallSpec(_new_id(), opdef, inst, dict(params), tuple(ins), tuple(outs), inst.visible_output_count(),
                    mutated, states, tuple(capacities), tuple(missing))
    with _LOCK:
        _SPECS[spec.id] = spec
        if key is not None:
            if len(_BY_KEY) > 4096:
                _BY_KEY.clear()
            _BY_KEY[key] = spec
    return spec


def forget(name: str) -> None:
    """Drop the specs of op ``name`` (its record was replaced or removed): computations
    traced before then fail with a clear error instead of running a stale record."""
    with _LOCK:
        for key in [k for k, s in _BY_KEY.items() if s.opdef.name == name]:
            del _BY_KEY[key]
        for sid in [i for i, s in _SPECS.items() if getattr(s, "fwd", s).opdef.name == name]:
            del _SPECS[sid]
