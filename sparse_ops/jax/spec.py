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

**Symbolic sizes** (``jax.export`` shape polymorphism: ``symbolic_shape("b, 8")``): a
layout's dimensions and stored count may be JAX symbolic dimensions. The op's
``infer_shape`` then runs on them as they are (JAX's dimension expressions add, multiply
and compare where the answer holds for every size), so the results' shapes are expressions
in the same symbols and one exported program serves every size. A spec with symbolic sizes
(``CallSpec.symbolic``) is a template: its FFI call carries one more argument, the values
of its symbolic dimensions (``CallSpec.dims``, computed by XLA from the actual shapes,
``dims_operand``), and the handler makes the spec of those concrete sizes
(``CallSpec.concrete``, memoised per size) and runs that, so plans are made and cached by
concrete shapes. What cannot be symbolic is refused at trace time naming the op
(``SymbolicShapeError``): a shape inference that needs a concrete size, a csr result whose
capacity rule reads a symbolic count (pass a static ``max_nnz=``; a row_sparse result falls
back to its static rows, ``_symbolic_capacity``).
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np

from .. import registry
from ..bridging import PARTS, param_key, result_capacity
from ..dispatch import infer_dtypes, infer_shapes, infer_stypes
from ..errors import OperatorError
from ..sdk.capacity import Capacity, Stored, rule_for, slot_names



class JaxBridgeError(OperatorError, ValueError):
    """An op called through the JAX bridge refused its arguments (the message names the op
    and the argument)."""


class SymbolicShapeError(JaxBridgeError):
    """A bridged call traced with symbolic sizes (``jax.export`` shape polymorphism) that the
    op cannot take with symbols (the message names the op and what to do)."""


def is_symbolic(d: Any) -> bool:
    """Whether ``d`` (a dimension or stored count) is a JAX symbolic dimension expression."""
    if isinstance(d, (int, np.integer)):
        return False
    from jax import export

    return export.is_symbolic_dim(d)


def as_dim(d: Any) -> Any:
    """A dimension as an int, or as the symbolic expression it is (never forced to an int:
    ``int()`` of a symbol raises)."""
    return d if is_symbolic(d) else int(d)


def surely_over(n: Any, limit: int) -> bool:
    """Whether ``n`` is surely above ``limit``: a symbolic ``n`` may or may not be, and the
    concrete spec the handler makes at run time checks it again."""
    return not is_symbolic(n) and n > limit


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

    @property
    def symbolic(self) -> bool:
        """Whether a dimension or the stored count is a JAX symbolic dimension."""
        return any(is_symbolic(d) for d in (*self.shape, self.nse))

    def symbols(self) -> list[Any]:
        """The symbolic dimension expressions of the shape and stored count, in order."""
        return [d for d in (*self.shape, self.nse) if is_symbolic(d)]

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
                 capacities: tuple[Capacity | None, ...] = (), missing: tuple[str, ...] = (),
                 max_nnz: int | None = None, training: bool = False) -> None:
        self.id, self.opdef, self.inst, self.params = sid, opdef, inst, params
        self.max_nnz = max_nnz
        # the op context's training flag (what Dropout reads), fixed when the call is traced
        self.training = training
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
        # symbolic sizes (jax.export shape polymorphism): the inputs' distinct symbolic
        # dimensions, whose values the FFI call carries as its last argument (dims_operand)
        self.dims: tuple[Any, ...] = tuple(dict.fromkeys(d for a in ins for d in a.symbols()))
        self.symbolic = bool(self.dims) or any(a.symbolic for a in (*outs, *states))
        self._concrete: dict[tuple[int, ...], CallSpec] = {}

    @property
    def name(self) -> str:
        return self.opdef.name

    @property
    def label(self) -> str:
        return f"sparse_ops.jax.ops.{self.opdef.name}"

    def concrete(self, values: Sequence[int]) -> "CallSpec":
        """The spec of this call at the sizes ``values`` (one per ``dims``, what the FFI call
        carries): the inputs' layouts with each symbol replaced by its value, through
        ``spec_for`` (the op's own inference, capacity rule and checks at those sizes),
        memoised per sizes. A sparse result keeps the capacity this symbolic spec reserved
        (the exported program's buffers are that size: a static ``max_nnz=``, not capped by
        a dense size only known now)."""
        key = tuple(int(v) for v in values)
        hit = self._concrete.get(key)
        if hit is not None:
            return hit
        if len(key) != len(self.dims) or any(v < 0 for v in key):
            raise JaxBridgeError(f"{self.label}: the call carries sizes {key} for its symbolic dimensions "
                                 f"{tuple(str(d) for d in self.dims)}")
        env = dict(zip(self.dims, key))

        def sub(d: Any) -> int:
            return env[d] if is_symbolic(d) else int(d)

        ins = tuple(replace(a, shape=tuple(sub(d) for d in a.shape), nse=sub(a.nse)) for a in self.ins)
        spec = spec_for(self.opdef, self.params, ins, self.max_nnz, self.training)
        reserved = (*self.outs, *self.states)
        got = (*spec.outs, *spec.states)
        if any(r.stype != "default" and not is_symbolic(r.nse) and g.nse != r.nse for r, g in zip(reserved, got)):
            kept = [replace(g, nse=r.nse) if r.stype != "default" and not is_symbolic(r.nse) else g
                    for r, g in zip(reserved, got)]
            spec = CallSpec(_new_id(), spec.opdef, spec.inst, spec.params, spec.ins, tuple(kept[:len(spec.outs)]),
                            spec.nvis, spec.mutated, tuple(kept[len(spec.outs):]), spec.capacities, spec.missing,
                            spec.max_nnz)
            with _LOCK:
                _SPECS[spec.id] = spec
        if len(self._concrete) > 256:  # one per size met: bounded as the spec table is
            self._concrete.clear()
        self._concrete[key] = spec
        return spec

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
# the high half of every id: random per process, so an id carried by a program exported from
# another process (jax.export with the safety check disabled) names no call here and is refused,
# rather than naming whatever call this process numbered the same
_PROCESS = int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF


def _new_id() -> int:
    with _LOCK:
        sid = (_PROCESS << 32) | _NEXT[0]
        _NEXT[0] += 1
        return sid


# ids of forgotten specs -> their op's name (the newest MAX_FORGOTTEN), so a stale program's
# refusal names the op
_FORGOTTEN: dict[int, str] = {}
MAX_FORGOTTEN = 4096


def lookup(sid: int) -> Any:
    """The spec of id ``sid`` (what the FFI handler does first)."""
    spec = _SPECS.get(sid)
    if spec is None:
        name = _FORGOTTEN.get(sid)
        which = f"operator {name!r} was registered again (replaced, or its plugin reloaded) or removed" \
            if name is not None else "the op was registered again or removed"
        raise JaxBridgeError(f"sparse_ops.jax: no bridged call with id {sid}: {which} after this computation "
                             "was traced, and the compiled program calls the old version; jax.clear_caches() "
                             "(or a new jax.jit of the function) traces it again")
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
    if index == np.dtype(np.int32) and surely_over(addressed(stype, shape), INT32_MAX):
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
            out = Stored(shape, st, None, dt)
            symbolic = any(is_symbolic(d) for d in shape) or any(
                a.symbolic for a in ins if a.stype != "default")
            c = (_symbolic_capacity(inst, slot, out, facts, max_nnz) if symbolic
                 else result_capacity(inst, slot, out, facts, max_nnz))
            if c is None:
                missing.append(f"{slot!r} ({st})")
        layouts.append(_result_layout(st, shape, dt, c.value if c is not None else 0))
        capacities.append(c)
    return layouts, capacities, missing


def _symbolic_capacity(inst: registry.Op, slot: str, out: Stored, facts: list[Stored],
                       max_nnz: int | None) -> Capacity | None:
    """The capacity of sparse result ``slot`` of a call with symbolic sizes: it sizes a buffer
    of the exported program, so it is one static number for every size. In order:

    - ``max_nnz=N`` (capped by the dense size only where that is static);
    - the op's rule, where it reads no symbolic size;
    - for a row_sparse result (at most its rows, however it is bounded): the rule with each
      symbolic stored count replaced by its input's static dense size (an upper bound too:
      an input may hold padding up to its dense size, and the rule bounds the result for
      any count), else, its shape static, its rows (the rows a dense result has);

    else the call is refused naming the op, the result and the rule, asking for
    ``max_nnz=``: a csr result's fallback would be a dense size, rows x columns values,
    never reserved silently. None: no rule and no ``max_nnz=`` (refused by
    ``BridgedOp.prepare``)."""
    if max_nnz is not None:
        if any(is_symbolic(d) for d in out.shape):
            return Capacity(int(max_nnz), "max_nnz=")
        return result_capacity(inst, slot, out, facts, max_nnz)
    rule = rule_for(inst._opdef.capacity, slot)
    if rule is None:
        return None
    static_counts = [replace(f, nnz=f.dense_count()) if is_symbolic(f.nnz) and not any(
        is_symbolic(d) for d in f.shape) else f for f in facts]
    tries = [(facts, None)]
    if out.stype == "row_sparse":
        tries.append((static_counts, " (symbolic stored counts taken at their inputs' dense size)"))
    for tried, source in tries:
        c = _static_rule(inst, slot, out, tried)
        if c is not None:
            return c if source is None else Capacity(c.value, c.source + source)
    if out.stype == "row_sparse" and not any(is_symbolic(d) for d in out.shape):
        return Capacity(out.rows, f"rows (the rule {rule.text!r} reads a symbolic size)")
    raise SymbolicShapeError(
        f"the capacity of its sparse result {slot!r} ({out.stype}) comes from the rule {rule.text!r}, which "
        "reads a symbolic size (jax.export shape polymorphism), so it cannot size the buffer of a program "
        "exported for every size; pass max_nnz=N (a static upper bound of its stored "
        f"{'rows' if out.stype == 'row_sparse' else 'values'} at every size the program will run at), or "
        "export with static sizes for this call's sparse inputs")


def _static_rule(inst: registry.Op, slot: str, out: Stored, facts: list[Stored]) -> Capacity | None:
    """The op's capacity rule on ``facts`` when it gives a static int, else None (it read a
    symbolic size: JAX refuses ``int()`` and undecidable comparisons of symbols)."""
    import jax

    try:
        c = result_capacity(inst, slot, out, facts, None)
    except (jax.errors.InconclusiveDimensionOperation, OperatorError, TypeError, ValueError, ArithmeticError):
        return None
    return c if c is not None and not is_symbolic(c.value) else None


def spec_for(opdef: registry.OpDef, params: dict, ins: tuple[ArgLayout, ...], max_nnz: int | None,
             training: bool = False) -> CallSpec:
    """The (memoised) spec of ``opdef`` with ``params`` on inputs laid out as ``ins``, run
    with the training flag ``training``."""
    try:  # parameters by type and value (True, 1 and 1.0 are three specs)
        key = (opdef, param_key(params), ins, max_nnz, training)
    except TypeError:
        key = None
    if key is not None:
        hit = _BY_KEY.get(key)
        if hit is not None:
            return hit
    label = f"sparse_ops.jax.ops.{opdef.name}"
    symbols = [str(d) for a in ins for d in a.symbols()]
    try:
        inst = opdef.instance(params) if params else (opdef._default_instance or opdef.instance({}))
        nout = inst.output_count()
        shapes = infer_shapes(opdef, inst, [a.shape for a in ins], traced=bool(symbols))
        if symbols:
            shapes = [tuple(as_dim(d) for d in shape) for shape in shapes]
        dtypes = infer_dtypes(opdef, inst, [a.dtype for a in ins])
        stypes = infer_stypes(opdef, inst, [a.stype for a in ins], shapes)
    except OperatorError as exc:
        if symbols:
            raise _needs_concrete(label, opdef, symbols, exc) from exc
        raise JaxBridgeError(f"{label}: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - JAX's InconclusiveDimensionOperation, or a rule's int() of a symbol
        if not symbols:
            raise
        raise _needs_concrete(label, opdef, symbols, exc) from exc
    if not opdef.variadic and len(ins) != len(opdef.arguments):
        raise JaxBridgeError(f"{label} takes {len(opdef.arguments)} input(s) ({', '.join(opdef.arguments)}), "
                             f"got {len(ins)}")
    _check_held_by_jax(label, [a.dtype for a in ins], dtypes)
    mutated = tuple(opdef.arguments.index(m) for m in opdef.mutate) if not opdef.variadic else ()
    slots = slot_names(inst, nout)
    kinds = [(slot, st, tuple(as_dim(s) for s in shape), np.dtype(dt))
             for slot, st, shape, dt in zip(slots, stypes, shapes, dtypes)]
    kinds += [(opdef.arguments[i], ins[i].stype, ins[i].shape, ins[i].dtype) for i in mutated]
    try:
        layouts, capacities, missing = _results(inst, kinds, ins, max_nnz)
    except OperatorError as exc:
        raise (SymbolicShapeError if isinstance(exc, SymbolicShapeError) else JaxBridgeError)(
            f"{label}: {exc}") from None
    outs, states = layouts[:nout], tuple(layouts[nout:])
    spec = CallSpec(_new_id(), opdef, inst, dict(params), tuple(ins), tuple(outs), inst.visible_output_count(),
                    mutated, states, tuple(capacities), tuple(missing), max_nnz, training)
    with _LOCK:
        _SPECS[spec.id] = spec
        if key is not None:
            if len(_BY_KEY) > 4096:
                _BY_KEY.clear()
            _BY_KEY[key] = spec
    return spec


def _check_held_by_jax(label: str, in_dtypes: list, out_dtypes: list) -> None:
    """Refuse, at trace time, a result dtype JAX cannot hold with x64 off (float64, int64:
    NumPy's promotion of, say, float32 and int32 gives float64), which XLA would otherwise
    narrow behind the op's back."""
    import jax

    if jax.config.jax_enable_x64:
        return
    for dt in out_dtypes:
        dt = np.dtype(dt)
        if dt.itemsize >= 8 and dt.kind in "fiuc":
            names = " and ".join(dict.fromkeys(np.dtype(d).name for d in in_dtypes))
            raise JaxBridgeError(
                f"{label}: its result would be {dt.name} (the op's type rule on {names}), which jax holds only with "
                "x64 on; give the arguments one dtype first, e.g. .astype(jnp.float32), or "
                "jax.config.update('jax_enable_x64', True)")


def _needs_concrete(label: str, opdef: registry.OpDef, symbols: list[str], exc: Exception) -> SymbolicShapeError:
    """The error of a call whose shape inference failed on symbolic sizes."""
    names = ", ".join(dict.fromkeys(symbols))
    why = (str(exc).splitlines() or [type(exc).__name__])[0]  # JAX's own text goes on to a docs link
    return SymbolicShapeError(
        f"{label}: {opdef.label}'s shape inference needs concrete sizes, and this call's input dimension(s) "
        f"{names} are symbolic (jax.export shape polymorphism): {why}. Export it with static sizes for this "
        "op's inputs (jax.ShapeDtypeStruct with ints), or compute this step with jax.numpy, which takes "
        "symbolic sizes")


def resolve(s: Any, values: Sequence[int]) -> Any:
    """The spec of call ``s`` (a ``CallSpec`` or one of its derivative specs) at the sizes
    ``values`` of its forward call's symbolic dimensions (``CallSpec.concrete``)."""
    fwd = getattr(s, "fwd", s)
    c = fwd.concrete(values)
    if isinstance(s, GradSpec):
        return c.grad_spec(s.needs)
    if isinstance(s, JvpSpec):
        return c.jvp_spec(s.perturbed)
    if isinstance(s, HvpSpec):
        return c.hvp_spec(s.perturbed, s.needs)
    return c


def dims_dtype() -> np.dtype:
    """The dtype of the sizes operand of a call with symbolic sizes (``dims_operand``)."""
    return _index_dtype()


def dims_operand(spec: CallSpec) -> Any:
    """The extra (last) argument of the FFI call of a spec with symbolic sizes: the values of
    its symbolic dimensions (``spec.dims``) at run time, computed by XLA from the shapes it
    runs at; what the handler makes the concrete spec from (``resolve``)."""
    import jax.numpy as jnp

    dt = dims_dtype()
    return jnp.stack([jnp.asarray(d).astype(dt) for d in spec.dims]) if spec.dims else jnp.zeros((0,), dt)


def forget(name: str) -> None:
    """Drop the specs of op ``name`` (its record was replaced or removed): computations
    traced before then fail with a clear error instead of running a stale record."""
    with _LOCK:
        for key in [k for k, s in _BY_KEY.items() if s.opdef.name == name]:
            del _BY_KEY[key]
        for sid in [i for i, s in _SPECS.items() if getattr(s, "fwd", s).opdef.name == name]:
            del _SPECS[sid]
            _FORGOTTEN[sid] = name
        while len(_FORGOTTEN) > MAX_FORGOTTEN:
            del _FORGOTTEN[next(iter(_FORGOTTEN))]
