"""``sparse_ops.jax.ops.<name>`` / ``op(name)``: every op of the table as a JAX function.

A bridged op takes ``jax.Array``s (dense), ``jax.experimental.sparse.BCSR`` or a tuple
``(data, indices, indptr, shape)`` (csr) and ``RowSparse`` or a tuple ``(values, indices,
shape)`` (row_sparse), plus keyword parameters (static), and returns dense arrays, ``BCSR``
and ``RowSparse`` by the op's inferred storage types. At trace time it makes the call's
``CallSpec`` (``spec.py``). A dense call of a built-in op ``lowering.py`` knows is traced as
that op's ``jnp`` expression (XLA fuses it; JAX differentiates and batches it); every other
call emits one ``jax.ffi.ffi_call`` of the op's FFI target, and XLA calls our handler
(``handlers.py``, or a numba cfunc from ``native.py``) when it runs.

- **Sparse outputs** have a static capacity: the bound the op's capacity rule gives from
  the inputs' static stored counts (``Op.capacity``: ``nnz(data)`` for ``square``,
  ``nnz(lhs) + nnz(rhs)`` for ``elemwise_add``, ...), or ``max_nnz=N`` when passed (it
  overrides the rule), capped by the dense size (rows x cols for csr, rows for
  row_sparse). An op with a sparse output and no rule is refused without ``max_nnz=``,
  naming the op and the output. The true count is ``nnz(result)`` (``indptr[-1]`` of a
  ``BCSR``, the indices below ``shape[0]`` of a ``RowSparse``); padding reads back as
  zeros, and such results can be passed to bridged ops again.
- **Derivatives** of an FFI call: a ``jax.custom_jvp`` whose tangent is one linear call
  (``derivatives.py``); JAX transposes it into a second FFI call running the op's own
  ``gradient`` rule for ``jax.grad``, only for the inputs JAX perturbs (``symbolic_zeros``);
  csr values get a gradient aligned with their indices (the same structure), row_sparse
  values one aligned with their rows. ``jax.jvp`` / ``jacfwd`` run the rule's transpose,
  ``jax.hessian`` and ``grad`` of ``grad`` the rule differentiated by our engine;
  ``jacfwd`` of ``jacfwd`` is refused naming the op.
- **csr inputs** may have unsorted or repeated columns (JAX's ``BCSR`` default declares
  neither order nor uniqueness): the handler sorts and sums them on the way in when they
  need it; a ``BCSR`` declaring ``indices_sorted`` and ``unique_indices`` that is not is
  refused. Results are canonical and say so.
- **RowSparse** results convert where JAX expects an array (``jnp.asarray(r)``,
  ``__jax_array__``); ``r * s`` and ``r / s`` scale them, ``r + s`` asks for a conversion.
- **dtypes**: the one dtype policy of every face (``dtypes.held_dtype``): float16/32/64,
  int32/64 values, int32/64 indices; anything else (bool, uint8, int16, complex,
  bfloat16, ...) is refused at trace time naming the op and the argument.
- **Inputs updated in place** (an op's ``mutate``, e.g. an optimizer's states): JAX arrays
  are immutable, so the op returns their new values after its visible outputs
  (``adam_update(w, g, m, v, lr=0.1)`` returns ``(new_w, new_m, new_v)``); the arrays
  passed in are never written (XLA's argument buffers are read-only to every kernel).
- **vmap**: of an FFI call, its ``vmap_method="sequential"``, a loop over the batch inside
  the compiled program (no better rule is known for a generic op; ``explain`` says so).
- **jit**: specs are memoised by signature, so tracing again (a new ``jax.jit``) gives the
  same program and a jitted model compiles once per input shape.
- **Symbolic sizes** (``jax.export`` shape polymorphism): dimensions and stored counts may
  be JAX symbolic dimensions, never forced to ints here; a csr components tuple may give
  its rows as ``indptr.shape[0] - 1``. Lowered calls are ``jnp`` on them; an FFI call
  carries their values as one more argument and its handler runs the spec of those
  concrete sizes (``spec.py``). What cannot be symbolic is a ``SymbolicShapeError`` at
  trace time naming the op.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.sparse import BCSR

from .. import registry
from ..dtypes import held_dtype
from ..errors import SparseFormatError
from ..gradients import require_gradient
from ..sdk.capacity import NO_RULE
from ..tape import _state as _tape_state
from ..validation import normalize_shape
from . import derivatives, lowering
from .handlers import target  # noqa: F401  (re-exported: the FFI target of an op and kind)
from ..bridging import PARTS, BridgedTable, arg_names
from .spec import (INT32_MAX, X64, ArgLayout, CallSpec, JaxBridgeError, addressed, as_dim, dims_operand, forget,
                   is_symbolic, spec_for, surely_over)

TRACES = [0]  # bridged calls traced so far, lowered or FFI (a counter for tests of compile counts)


@jax.tree_util.register_pytree_node_class
class RowSparse:
    """A row_sparse array in JAX: ``values`` of shape ``(nse, *shape[1:])`` of rows ``indices`` ``(nse,)``,
    sorted; rows past the true count carry the index ``shape[0]`` (padding).

    ``jax.vmap`` over a call that returns one gives it leading batch dimensions (``n_batch``,
    as ``BCSR``'s): ``values`` ``(*batch, nse, *shape[1:])``, ``indices`` ``(*batch, nse)``, and
    ``shape`` then starts with them; ``todense()`` gives one dense array per example."""

    def __init__(self, values: Any, indices: Any, shape: Sequence[int]) -> None:
        self.values, self.indices = values, indices
        self._shape = tuple(as_dim(s) for s in shape)  # one example's (what the op's rule gave)

    def tree_flatten(self) -> tuple:
        return (self.values, self.indices), self._shape

    @classmethod
    def tree_unflatten(cls, shape: tuple, leaves: Sequence[Any]) -> "RowSparse":
        return cls(leaves[0], leaves[1], shape)

    @property
    def n_batch(self) -> int:
        """Leading batch dimensions (0 unless a ``jax.vmap`` stacked results)."""
        return len(self.indices.shape) - 1

    @property
    def shape(self) -> tuple:
        return tuple(self.indices.shape[:self.n_batch]) + self._shape

    @property
    def nse(self) -> int:
        return as_dim(self.indices.shape[-1])

    @property
    def dtype(self) -> Any:
        return self.values.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def todense(self) -> jax.Array:
        """The dense array (padding rows dropped), of ``shape`` (batch dimensions first)."""
        def dense(values: Any, indices: Any) -> jax.Array:
            return jnp.zeros(self._shape, values.dtype).at[indices].add(values, mode="drop")

        b = self.n_batch
        if b == 0:
            return dense(self.values, self.indices)
        batch = tuple(self.indices.shape[:b])
        values = self.values.reshape((-1, *self.values.shape[b:]))
        rows = jax.vmap(dense)(values, self.indices.reshape((-1, *self.indices.shape[b:])))
        return rows.reshape(batch + self._shape)

    # ---- where JAX code expects an array ----
    def __jax_array__(self) -> jax.Array:
        """``jnp.asarray(r)`` / ``jnp.array(r)``: the dense array. (Other ``jnp`` functions
        take it once converted: JAX no longer converts objects inside them.)"""
        return self.todense()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        """``np.asarray(r)`` outside ``jit``: the dense array on the host."""
        out = np.asarray(self.todense())
        return out if dtype is None else out.astype(dtype)

    def __mul__(self, other: Any) -> Any:
        """``r * s`` for a scalar ``s``: a RowSparse (the stored rows scaled); for another
        RowSparse ``elemwise_mul`` (row_sparse); an array operand is left to its own operator,
        which converts ``r`` to dense (``__jax_array__``)."""
        if isinstance(other, RowSparse):
            return op("elemwise_mul")(self, other)
        if not _is_scalar(other):
            return NotImplemented
        if _changes_zero(lambda z: z * other):
            return self._refuse("r * s")(other)
        return RowSparse(self.values * other, self.indices, self._shape)

    __rmul__ = __mul__

    def __truediv__(self, other: Any) -> Any:
        """``r / s`` for a scalar ``s``: a RowSparse (the stored rows divided)."""
        if not _is_scalar(other):
            return NotImplemented
        if _changes_zero(lambda z: z / other):
            return self._refuse("r / s")(other)
        return RowSparse(self.values / other, self.indices, self._shape)

    def __neg__(self) -> "RowSparse":
        return RowSparse(-self.values, self.indices, self._shape)

    def _refuse(self, what: str) -> Any:
        def operator(other: Any) -> Any:
            if not _is_scalar(other):
                return NotImplemented  # an array's own operator converts r (__jax_array__)
            raise TypeError(f"{what} of a RowSparse and a scalar would change the rows it does not store; "
                            "convert it first with r.todense() or jnp.asarray(r), or ask the op for a dense "
                            "result (e.g. dot(..., forward_stype='default'))")
        return operator

    def __add__(self, other: Any) -> Any:
        """``r + q`` of two RowSparse: ``elemwise_add`` (row_sparse, the union of the rows)."""
        if isinstance(other, RowSparse):
            return op("elemwise_add")(self, other)
        return self._refuse("r + s")(other)

    def __radd__(self, other: Any) -> Any:
        return self._refuse("s + r")(other)

    def __sub__(self, other: Any) -> Any:
        """``r - q`` of two RowSparse: ``elemwise_sub`` (row_sparse)."""
        if isinstance(other, RowSparse):
            return op("elemwise_sub")(self, other)
        return self._refuse("r - s")(other)

    def __rsub__(self, other: Any) -> Any:
        return self._refuse("s - r")(other)

    def __rtruediv__(self, other: Any) -> Any:
        return self._refuse("s / r")(other)

    def __pow__(self, other: Any) -> Any:
        return self._refuse("r ** s")(other)

    def __repr__(self) -> str:
        return f"RowSparse(shape={self.shape}, nse={self.nse}, dtype={self.values.dtype})"


def _changes_zero(f: Callable[[np.float64], Any]) -> bool:
    """Whether ``f`` of a concrete scalar turns 0 into something else (``0 * nan``, ``0 / 0``,
    ``0 * inf``): then the rows a RowSparse does not store would change. A traced scalar's
    value is unknown here: taken as keeping 0."""
    try:
        with np.errstate(all="ignore"):
            return bool(f(np.float64(0.0)) != 0)
    except (TypeError, jax.errors.ConcretizationTypeError, jax.errors.TracerBoolConversionError):
        return False


def _is_scalar(x: Any) -> bool:
    """A Python number, a NumPy scalar or a 0-d array (traced ones included)."""
    if isinstance(x, (bool, int, float, np.generic)):
        return True
    return (isinstance(x, (jax.Array, np.ndarray)) or hasattr(x, "aval")) and np.ndim(x) == 0


def nnz(x: Any) -> jax.Array:
    """The true number of stored values of a bridged op's sparse result (``BCSR`` or
    ``RowSparse``; at most its capacity ``nse``)."""
    if isinstance(x, BCSR):
        return x.indptr[-1]
    if isinstance(x, RowSparse):
        return jnp.sum(x.indices < x._shape[0], axis=-1)  # per example when batched
    raise TypeError(f"nnz() takes a BCSR or RowSparse, got {type(x).__name__}")


# ---- splitting arguments into components ------------------------------------------------------
def _static_shape(shape: Any, what: str) -> tuple[int, ...]:
    """A components tuple's shape as non-negative ints (the native containers' rule: no float,
    text or bool entries, 2-d for a csr, at least 1-d for a row_sparse), or symbolic
    dimensions (``jax.export`` shape polymorphism: ``indptr.shape[0] - 1``); never a traced value."""
    try:
        dims = tuple(shape)
        for d in dims:
            if not is_symbolic(d):
                normalize_shape((d,))  # refuses 2.9, "3", True and -1 as native constructors do
        dims = tuple(as_dim(d) for d in dims)
    except (TypeError, SparseFormatError, jax.errors.ConcretizationTypeError) as exc:
        raise TypeError(f"the shape of a {what} must be static non-negative ints (or jax.export symbolic "
                        f"dimensions), got {shape!r}") from exc
    if (what == "csr" and len(dims) != 2) or (what == "row_sparse" and not dims):
        raise TypeError(f"the shape of a {what} must have {'2 dimensions' if what == 'csr' else 'at least 1 dimension'}"
                        f", got {shape!r}")
    return dims


def split(a: Any) -> tuple[str, list, tuple[int, ...]]:
    """(storage type, component arrays, shape) of one argument."""
    if isinstance(a, BCSR):
        if a.n_batch or a.n_dense:
            raise TypeError("BCSR with batch or dense dimensions is not supported (n_batch = n_dense = 0)")
        return "csr", [a.data, a.indices, a.indptr], tuple(a.shape)
    if isinstance(a, RowSparse):
        if a.n_batch:
            raise TypeError(f"a RowSparse with batch dimensions (shape {a.shape}, stacked by jax.vmap) is not "
                            "supported as an input; pass each example's inside the vmap, or r.todense()")
        return "row_sparse", [a.values, _index_part(a.indices, "indices")], a.shape
    if isinstance(a, tuple):
        if len(a) == 4:
            return ("csr", [jnp.asarray(a[0]), _index_part(a[1], "indices"), _index_part(a[2], "indptr")],
                    _static_shape(a[3], "csr"))
        if len(a) == 3:
            return "row_sparse", [jnp.asarray(a[0]), _index_part(a[1], "indices")], _static_shape(a[2], "row_sparse")
        raise TypeError("a tuple argument is a csr (data, indices, indptr, shape) or a row_sparse "
                        f"(values, indices, shape), got {len(a)} items")
    if isinstance(a, (jax.Array, np.ndarray, np.generic, float, int)) or hasattr(a, "aval"):
        return "default", [jnp.asarray(a)], tuple(jnp.shape(a))
    raise TypeError(f"expected a jax.Array, a BCSR, a RowSparse or a components tuple, got {type(a).__name__}")


_CONVERT = "convert it first, e.g. with .astype(jnp.float32)"


def _index_part(a: Any, what: str) -> Any:
    """An index component given as host data, as a JAX array; with x64 off JAX would cut
    int64 values to int32 silently, so values past int32 are refused first."""
    if not isinstance(a, jax.Array) and not hasattr(a, "aval") and not jax.config.jax_enable_x64:
        host = np.asarray(a)
        if host.dtype.kind in "iu" and host.size and (int(host.min()) < -INT32_MAX - 1 or
                                                       int(host.max()) > INT32_MAX):
            raise TypeError(f"{what}: values up to {int(host.max())} do not fit int32; {X64}")
    return jnp.asarray(a)


def declares_canonical(a: Any) -> bool:
    """Whether a csr argument declares its columns sorted and unique in each row: a ``BCSR``
    with ``indices_sorted`` and ``unique_indices`` (ours are); not JAX's default, nor a
    components tuple. The handler sorts and sums the others when they need it."""
    return bool(isinstance(a, BCSR) and a.indices_sorted and a.unique_indices)


def _layout(stype: str, parts: list, shape: tuple[int, ...], canonical: bool = True) -> ArgLayout:
    """The argument's layout, refusing dtypes sparse-ops does not hold (the one dtype policy,
    ``dtypes.held_dtype``) here at trace time, before XLA ever hands the handler a buffer."""
    v = parts[0]
    dtype = held_dtype(v.dtype, hint=_CONVERT)
    if stype == "default":
        return ArgLayout("default", shape, dtype)
    for p, what in zip(parts[1:], ("indices", "indptr")):
        try:
            held_dtype(p.dtype, "index")
        except TypeError as exc:
            raise TypeError(f"{what}: {exc}") from None
    idx = np.dtype(parts[1].dtype)
    count = addressed(stype, shape)
    if idx == np.dtype(np.int32) and surely_over(count, INT32_MAX):
        raise TypeError(f"{'columns' if stype == 'csr' else 'rows'} up to {count - 1} need int64 indices, "
                        f"these are int32; {X64}")
    if stype == "csr":
        if len(shape) != 2:
            raise TypeError(f"a csr array is 2-D, got shape {shape}")
        if parts[2].shape != (shape[0] + 1,) or v.ndim != 1 or parts[1].shape != v.shape:
            raise TypeError(f"csr components of shapes data {v.shape}, indices {parts[1].shape}, indptr "
                            f"{parts[2].shape} do not fit shape {shape}")
        if np.dtype(parts[2].dtype) != idx:
            raise TypeError(f"csr indices ({idx}) and indptr ({parts[2].dtype}) must have one dtype")
    else:
        if v.shape[1:] != shape[1:] or parts[1].shape != v.shape[:1]:
            raise TypeError(f"row_sparse components of shapes values {v.shape}, indices {parts[1].shape} do not "
                            f"fit shape {shape}")
    return ArgLayout(stype, shape, dtype, idx, as_dim(v.shape[0]), canonical or stype != "csr")


# ---- FFI calls ------------------------------------------------------------------------------------
def _result_types(layouts: Sequence[ArgLayout]) -> list[jax.ShapeDtypeStruct]:
    return [jax.ShapeDtypeStruct(s, d) for lay in layouts for s, d in lay.part_shapes()]


def _forward_call(spec: CallSpec, flat: Sequence[Any]) -> list:
    from . import native

    tname = native.target_for(spec) or target(spec.name)
    # a sparse result of capacity 0 has zero-sized buffers that nothing reads: XLA would drop
    # the call (and its refusal of a result holding more): kept as a side effect
    empty = any(lay.stype != "default" and not is_symbolic(lay.nse) and lay.nse == 0 for lay in spec.outs)
    call = jax.ffi.ffi_call(tname, _result_types(spec.outs + spec.states), vmap_method="sequential",
                            has_side_effect=empty)
    extra = [dims_operand(spec)] if spec.symbolic else []  # the sizes a symbolic spec runs at
    return list(call(*flat, *extra, call=np.int64(spec.id)))


# ---- differentiation: a custom_jvp whose tangent is one linear call (derivatives.py) --------------
@jax.tree_util.register_pytree_node_class
class _Static:
    """Static facts carried through custom_jvp arguments (pytree structure, no leaves)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def tree_flatten(self) -> tuple:
        return (), self.value

    @classmethod
    def tree_unflatten(cls, value: Any, leaves: Sequence[Any]) -> "_Static":
        return cls(value)


def _differentiable(lay: ArgLayout) -> bool:
    return np.issubdtype(lay.dtype, np.floating) or np.issubdtype(lay.dtype, np.complexfloating)


@jax.custom_jvp
def _apply(spec_box: _Static, *flat: Any) -> tuple:
    return tuple(_forward_call(spec_box.value, flat))


def _apply_jvp(primals: tuple, tangents: tuple) -> tuple:
    """The call's outputs and their tangents: ``J t`` by the ``jvp`` linear call, for the
    inputs JAX perturbs (a floating values component with a tangent that is not a symbolic
    zero). JAX transposes that call into the gradient rule for ``jax.grad``."""
    spec_box, *flat = primals
    spec: CallSpec = spec_box.value
    tans = tangents[1:]
    outs = _apply(spec_box, *flat)
    out_tangents = [jax.custom_derivatives.SymbolicZero(jax.typeof(o).to_tangent_aval()) for o in outs]
    perturbed = tuple(not isinstance(tans[s], jax.custom_derivatives.SymbolicZero) and _differentiable(lay)
                      for s, lay in zip(derivatives.value_slots(spec.ins), spec.ins))
    if not any(perturbed) or spec.opdef.constant:  # nothing moves, or outputs declared constant
        return outs, tuple(out_tangents)
    if spec.mutated:
        raise JaxBridgeError(f"{spec.label}: {spec.opdef.label} updates its input(s) {', '.join(spec.opdef.mutate)} "
                             "in place (returned as new states here), so JAX cannot differentiate through it")
    require_gradient(spec.inst, perturbed, face="JAX", prefix=f"{spec.label}: ", error=JaxBridgeError)
    lin = [tans[s] for s, p in zip(derivatives.value_slots(spec.ins), perturbed) if p]
    residuals = [*flat, *outs[:spec.n_out_parts]]
    got = derivatives.apply_linear(derivatives.linear(derivatives.JVP, spec, perturbed=perturbed), residuals, lin)
    slots = derivatives.value_slots(spec.outs)
    for j, t in zip(spec.tangent_outs, got):
        out_tangents[slots[j]] = t
    return outs, tuple(out_tangents)


_apply.defjvp(_apply_jvp, symbolic_zeros=True)


# ---- the bridged op -------------------------------------------------------------------------------
class BridgedOp:
    """One op of the table as a function of JAX arrays: ``f(*arrays, max_nnz=None, **params)``."""

    def __init__(self, opdef: registry.OpDef) -> None:
        self.opdef = opdef
        self.__name__ = self.__qualname__ = opdef.name
        self.__doc__ = opdef.describe()

    def __repr__(self) -> str:
        return f"<sparse_ops.jax op {self.opdef.name}>"

    def prepare(self, args: tuple, params: dict, need_capacity: bool = True) -> tuple[CallSpec, list]:
        """(the call's spec, the flat component arrays) of a call. A sparse result without a
        capacity (the op declares no rule for it and no ``max_nnz=`` was passed) is a
        ``JaxBridgeError`` naming the op and the result, unless ``need_capacity`` is False
        (``explain``, which shows it)."""
        label = f"sparse_ops.jax.ops.{self.opdef.name}"
        if not self.opdef.variadic and len(args) != len(self.opdef.arguments):
            raise JaxBridgeError(f"{label} takes {len(self.opdef.arguments)} array input(s) "
                                 f"({', '.join(self.opdef.arguments)}), got {len(args)}; parameters go by keyword")
        max_nnz = params.pop("max_nnz", None)
        if max_nnz is not None and (not isinstance(max_nnz, (int, np.integer)) or max_nnz < 0):
            raise JaxBridgeError(f"{label}: max_nnz must be a non-negative int, got {max_nnz!r}")
        training = _tape_state.training  # sparse_ops.autograd.train_mode() where the call is traced
        if "training" in params and "training" not in self.opdef.params:
            training = params.pop("training")
            if not isinstance(training, (bool, np.bool_)):
                raise JaxBridgeError(f"{label}: training must be a bool (a static Python value, as "
                                     f"flax's deterministic=), got {training!r}")
        layouts, flat = [], []
        for name, a in zip(arg_names(self.opdef, len(args)), args):
            try:
                st, parts, shape = split(a)
                layouts.append(_layout(st, parts, shape, declares_canonical(a)))
            except (TypeError, ValueError) as exc:
                raise JaxBridgeError(f"{label}: argument {name!r}: {exc}") from exc
            flat += parts
        spec = spec_for(self.opdef, params, tuple(layouts), max_nnz, bool(training))
        if spec.missing and need_capacity:
            raise JaxBridgeError(
                f"{label}: {self.opdef.label} declares no capacity rule for its sparse result(s) "
                f"{', '.join(spec.missing)} (an upper bound of the stored entries: values of a csr result, rows "
                "of a row_sparse one; the op's `capacity`), so jax.jit cannot size its buffers; pass max_nnz=N "
                "(that bound) to this call, or declare the rule on the op (sparse_ops.sdk.capacity; a C library: "
                "the so_op_decl's capacity_like)")
        return spec, flat

    def __call__(self, *args: Any, **params: Any) -> Any:
        spec, flat = self.prepare(args, params)
        TRACES[0] += 1
        lowered = lowering.lowering_for(spec)
        if lowered is not None:  # a dense built-in: its jnp expression, no FFI call
            out = lowering.apply(spec, lowered, flat)
            if out is not None:
                return out
        outs = _apply(_Static(spec), *flat)
        return assemble(spec, outs)


def assemble(spec: CallSpec, outs: Sequence[Any]) -> Any:
    """The visible outputs of a call from its flat results (a tuple for several), followed by
    the new values of the inputs the op updates in place (its ``mutate``), in their order."""
    res, k = [], 0
    hidden = sum(PARTS[lay.stype] for lay in spec.outs[spec.nvis:])
    layouts = list(spec.outs[:spec.nvis]) + list(spec.states)
    for j, lay in enumerate(layouts):
        if j == spec.nvis:
            k += hidden
        if lay.stype == "default":
            res.append(outs[k])
        elif lay.stype == "csr":
            res.append(BCSR((outs[k], outs[k + 1], outs[k + 2]), shape=lay.shape, indices_sorted=True,
                            unique_indices=True))  # our results are canonical
        else:
            res.append(RowSparse(outs[k], outs[k + 1], lay.shape))
        k += PARTS[lay.stype]
    return res[0] if len(res) == 1 else tuple(res)


# ---- the namespace ----------------------------------------------------------------------------------
_TABLE = BridgedTable("sparse_ops.jax.ops", BridgedOp, forget)
op, lookup = _TABLE.op, _TABLE.lookup


def explain(name: str, *args: Any, **params: Any) -> dict[str, Any]:
    """How a bridged call would run: storage types, capacities, whether it is lowered to
    ``jnp`` or which FFI target and handler run it, how csr inputs' column order is taken,
    the gradient, forward mode and the batching rule. Traces nothing, runs nothing."""
    from . import native

    f = op(name)
    spec, _ = f.prepare(args, dict(params), need_capacity=False)
    visible = list(zip(spec.outs[:spec.nvis], spec.capacities[:spec.nvis]))
    described = {
        "op": name,
        "in_stypes": [a.stype for a in spec.ins],
        "out_stypes": [a.stype for a in spec.outs[:spec.nvis]],
        "out_shapes": [a.shape for a in spec.outs[:spec.nvis]],
        # stored entries reserved per sparse output (values for csr, rows for row_sparse), and why
        "out_capacity": [c.value if c is not None else None for _, c in visible],
        "capacity_from": [None if a.stype == "default" else (c.source if c is not None else NO_RULE)
                          for a, c in visible],
        "csr_order": [None if a.stype != "csr" else (
            "declared sorted and unique (BCSR indices_sorted and unique_indices): checked, refused if not"
            if a.canonical else "may be unsorted or repeat columns (JAX's BCSR default, or a components tuple): "
            "checked, and sorted and summed on the way in where it does (gradients go back to each stored value)")
            for a in spec.ins],
    }
    lowered = lowering.describe(spec)
    if lowered is not None:
        described.update({
            "ffi_target": None,
            "handler": lowered,
            "gradient": ("JAX's derivative of the jnp expression (equal to the op's gradient rule; "
                         + (f"constant: the op is declared {spec.opdef.constant_declaration})" if spec.opdef.constant
                            else "any order)")),
            "forward_mode": "JAX's own (jax.jvp, jacfwd, hessian: any order)",
            "batching": "JAX's own (vmap of the jnp expression)",
        })
        return described
    nat = native.describe(spec)
    differentiable = spec.opdef.differentiable
    described.update({
        "ffi_target": nat["target"] if nat else f"sparse_ops_{name}",
        "handler": nat["handler"] if nat else ("python: ctypes FFI handler (GIL taken), NumPy views of XLA's "
                                               "buffers, the sparse-ops invoke path"),
        "gradient": (f"custom_jvp whose tangent JAX transposes: FFI target sparse_ops_{name}_grad runs "
                     f"{spec.opdef.name}'s gradient rule; second order (grad of grad, jax.hessian) through "
                     f"sparse_ops_{name}_hvp: our engine differentiating the rule"
                     if differentiable else
                     f"none: constant outputs (declared {spec.opdef.constant_declaration})" if spec.opdef.constant else
                     "none (the op declares no gradient)"),
        "forward_mode": (f"FFI target sparse_ops_{name}_jvp: J t as the transpose of the gradient rule (our engine "
                         "differentiates the rule in its head gradient); jacfwd of jacfwd is refused"
                         if differentiable else "none (no gradient rule)"),
        "batching": "vmap_method='sequential': a loop over the batch in the compiled program",
    })
    return described
