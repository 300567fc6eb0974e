"""Derivatives of bridged calls that keep their FFI call: reverse mode, forward mode and the
second order ``jax.hessian`` needs, all from the op's own gradient rule.

A bridged call is a ``jax.custom_jvp`` (``bridge._apply``) whose tangent is one
*linear call*: a primitive of this module, ``sparse_ops_linear``, linear in some of its
arguments (the tangents or cotangents), with the others (the call's inputs and outputs)
held fixed. Three kinds, each one FFI call run by the Python handler:

- ``jvp``: the tangents of the perturbed inputs to the tangents of the outputs, ``J t``;
  computed by our engine as the transpose of the gradient rule (the rule is linear in its
  head gradient ``u``; differentiating ``<rule(u), t>`` in ``u`` gives ``J t``);
- ``vjp``: the outputs' cotangents to the inputs' gradients, ``J^T c``: the gradient rule
  itself (the FFI target ``sparse_ops_<op>_grad``);
- ``hvp``: with the cotangents ``c`` held fixed, the tangents of the perturbed inputs to
  the second derivative of ``<op(x), c>`` applied to them, for the inputs that need it
  (the engine differentiating the gradient rule once more).

JAX transposes a linear call into the other kind (``jvp`` and ``vjp`` are each other's
transposes; ``hvp`` is its own, the matrix of second derivatives being symmetric), so
``jax.grad`` runs the gradient rule; ``jax.jvp`` / ``jax.jacfwd`` the ``jvp`` call; the
derivative of a ``vjp`` call in the inputs it holds fixed is an ``hvp`` call, so
``jax.hessian`` (forward over reverse) and ``grad`` of ``grad`` (reverse over reverse)
work. What is refused, naming the op: a derivative of a ``jvp`` call in its inputs
(``jacfwd(jacfwd(f))``, ``jacrev(jacfwd(f))``: use ``jax.hessian``) and of an ``hvp`` call
(third order). Under ``vmap`` a linear call loops over the batch (``lax.map``), keeping
the primitive, so its derivatives still meet these rules.

The derivative of a ``vjp`` call ignores the tangents of the outputs it holds fixed: those
outputs are the op's own results on the inputs it holds, so their tangents are ``J`` of the
inputs' tangents, which the ``hvp`` call (recomputing the op in our engine) already
accounts for.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from ..bridging import PARTS
from .handlers import target
from .spec import CallSpec, JaxBridgeError, dims_operand

JVP, VJP, HVP = "jvp", "vjp", "hvp"


@dataclass(frozen=True, eq=False, repr=False)
class Linear:
    """One linear call's static facts (the primitive's parameter; hashed by identity, made
    once per kind and masks by ``linear``): ``kind``, the forward call's ``spec``, which
    inputs take tangents (``perturbed``: ``jvp``, ``hvp``) and which get results
    (``needs``: ``vjp``, ``hvp``)."""

    kind: str
    spec: CallSpec
    perturbed: tuple[bool, ...] = ()
    needs: tuple[bool, ...] = ()

    @property
    def n_residual(self) -> int:
        """How many leading arguments are held fixed: the inputs' and outputs' components
        (and, for ``hvp``, the cotangents)."""
        s = self.spec
        return s.n_in_parts + s.n_out_parts + (len(s.tangent_outs) if self.kind == HVP else 0)

    def linear_avals(self) -> list[jax.ShapeDtypeStruct]:
        """The shapes and dtypes of the linear arguments."""
        return _out_values(self.spec) if self.kind == VJP else _in_values(self.spec, self.perturbed)

    def result_avals(self) -> list[jax.ShapeDtypeStruct]:
        """The shapes and dtypes of the results."""
        if self.kind == JVP:
            return _out_values(self.spec)
        return _in_values(self.spec, self.needs)

    def __repr__(self) -> str:  # what jaxprs print: the FFI target the call runs
        suffix = {VJP: "grad", JVP: "jvp", HVP: "hvp"}[self.kind]
        return (f"Linear({self.kind}: sparse_ops_{self.spec.name}_{suffix}, perturbed={self.perturbed}, "
                f"needs={self.needs})")

    def transposed(self) -> "Linear":
        """The linear call whose matrix is this one's transpose."""
        if self.kind == JVP:
            return linear(VJP, self.spec, needs=self.perturbed)
        if self.kind == VJP:
            return linear(JVP, self.spec, perturbed=self.needs)
        return linear(HVP, self.spec, perturbed=self.needs, needs=self.perturbed)

    def derivative_spec(self) -> Any:
        """The spec the handler finds by the call's id (``spec.py``)."""
        s = self.spec
        if self.kind == VJP:
            return s.grad_spec(self.needs)
        if self.kind == JVP:
            return s.jvp_spec(self.perturbed)
        return s.hvp_spec(self.perturbed, self.needs)

    def target_and_id(self) -> tuple[str, int]:
        """The FFI target (registered on first use) and call id running this call."""
        return target(self.spec.name, {VJP: "grad", JVP: "jvp", HVP: "hvp"}[self.kind]), self.derivative_spec().id


_LINEAR: dict[tuple, Linear] = {}


def linear(kind: str, spec: CallSpec, perturbed: tuple[bool, ...] = (), needs: tuple[bool, ...] = ()) -> Linear:
    """The one ``Linear`` of these facts (so equal calls share the primitive's parameter)."""
    key = (kind, spec.id, perturbed, needs)
    hit = _LINEAR.get(key)
    if hit is None or hit.spec is not spec:
        if len(_LINEAR) > 8192:  # specs are bounded the same way (spec.py)
            _LINEAR.clear()
        hit = _LINEAR[key] = Linear(kind, spec, perturbed, needs)
        hit.derivative_spec()  # made at trace time: its id is fixed before any lowering
    return hit


def _value_layouts(layouts: Sequence[Any]) -> list[jax.ShapeDtypeStruct]:
    return [jax.ShapeDtypeStruct(*lay.part_shapes()[0]) for lay in layouts]


def _in_values(spec: CallSpec, mask: Sequence[bool]) -> list[jax.ShapeDtypeStruct]:
    """The values components of the inputs ``mask`` marks."""
    return [a for a, m in zip(_value_layouts(spec.ins), mask) if m]


def _out_values(spec: CallSpec) -> list[jax.ShapeDtypeStruct]:
    """The values components of the tangent outputs."""
    vals = _value_layouts(spec.outs)
    return [vals[j] for j in spec.tangent_outs]


def value_slots(layouts: Sequence[Any]) -> list[int]:
    """For each array, the position of its dense array / values among the components."""
    slots, k = [], 0
    for lay in layouts:
        slots.append(k)
        k += PARTS[lay.stype]
    return slots


# ---- the primitive ------------------------------------------------------------------------------
linear_p = Primitive("sparse_ops_linear")
linear_p.multiple_results = True


def apply_linear(lin: Linear, residuals: Sequence[Any], operands: Sequence[Any]) -> list:
    """``lin`` applied to ``operands`` (its linear arguments) with ``residuals`` held fixed."""
    return linear_p.bind(*residuals, *operands, call=lin)


def _emit(*args: Any, call: Linear) -> list:
    """The FFI call running ``call`` (its impl, and its lowering under jit)."""
    name, cid = call.target_and_id()
    types = call.result_avals()
    if not types:
        return []
    extra = [dims_operand(call.spec)] if call.spec.symbolic else []  # the sizes a symbolic spec runs at
    return list(jax.ffi.ffi_call(name, types, vmap_method="sequential")(*args, *extra, call=np.int64(cid)))


def _aval(a: jax.ShapeDtypeStruct) -> Any:
    return jax.core.ShapedArray(a.shape, a.dtype)


def _abstract(*args: Any, call: Linear) -> list:
    return [_aval(a) for a in call.result_avals()]


linear_p.def_impl(_emit)
linear_p.def_abstract_eval(_abstract)
mlir.register_lowering(linear_p, mlir.lower_fun(_emit, multiple_results=True))


def _zeros(aval: Any) -> Any:
    return jnp.zeros(aval.shape, aval.dtype)


def _transpose(cts: Sequence[Any], *args: Any, call: Linear) -> list:
    """The transpose: cotangents of the results to cotangents of the linear arguments,
    through the transposed kind (the residuals get none)."""
    n = call.n_residual
    residuals = args[:n]
    if any(ad.is_undefined_primal(r) for r in residuals):
        raise JaxBridgeError(f"{call.spec.label}: the derivative is linear in its tangents only; this "
                             "transposition asks for its inputs too (not supported)")
    cts = [_zeros(a) if type(c) is ad.Zero else c for c, a in zip(cts, call.result_avals())]
    return [None] * n + list(apply_linear(call.transposed(), residuals, cts))


def _jvp(primals: Sequence[Any], tangents: Sequence[Any], *, call: Linear) -> tuple[list, list]:
    """The derivative of a linear call: in its linear arguments, the call itself; in what it
    holds fixed, the ``hvp`` call for a ``vjp`` (see the module docstring), refused
    naming the op for the others."""
    n = call.n_residual
    residuals, operands = list(primals[:n]), list(primals[n:])
    t_res, t_ops = list(tangents[:n]), list(tangents[n:])
    out = linear_p.bind(*primals, call=call)
    avals = call.result_avals()
    total = [None] * len(avals)
    if any(type(t) is not ad.Zero for t in t_ops):
        ops = [_zeros(a) if type(t) is ad.Zero else t for t, a in zip(t_ops, call.linear_avals())]
        total = list(linear_p.bind(*residuals, *ops, call=call))
    spec = call.spec
    slots = value_slots(spec.ins)
    moved = [type(t_res[s]) is not ad.Zero and np.dtype(lay.dtype).kind == "f" for s, lay in zip(slots, spec.ins)]
    if any(moved):
        if call.kind != VJP:
            what = ("a derivative of its forward-mode derivative in the inputs (jacfwd or jacrev of jacfwd) "
                    "is not supported; jax.hessian (jacfwd of jacrev) and grad of grad are"
                    if call.kind == JVP else "a third derivative is not supported")
            raise JaxBridgeError(f"{spec.label}: {what}: the bridge differentiates an op through its gradient "
                                 "rule, up to second order")
        tx = [t_res[s] for s, m in zip(slots, moved) if m]
        second = linear(HVP, spec, perturbed=tuple(moved), needs=call.needs)
        extra = apply_linear(second, [*residuals, *operands], tx)  # the cotangents held fixed
        total = [e if t is None else t + e for t, e in zip(total, extra)]
    return list(out), [ad.Zero(_aval(a)) if t is None else t for t, a in zip(total, avals)]


def _batch(args: Sequence[Any], dims: Sequence[Any], *, call: Linear) -> tuple[list, list]:
    """Under ``vmap``: a loop over the batch (``lax.map``) of the same primitive, so the
    looped call keeps its transpose and derivative rules."""
    mapped = [i for i, d in enumerate(dims) if d is not None]  # None: not batched
    moved = [jnp.moveaxis(args[i], dims[i], 0) for i in mapped]

    def one(xs: Sequence[Any]) -> list:
        full = list(args)
        for i, x in zip(mapped, xs):
            full[i] = x
        return linear_p.bind(*full, call=call)

    out = lax.map(one, moved)
    return list(out), [0] * len(out)


ad.primitive_jvps[linear_p] = _jvp
ad.primitive_transposes[linear_p] = _transpose
batching.primitive_batchers[linear_p] = _batch
