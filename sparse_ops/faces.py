"""Which faces serve an op, and why one cannot: declared once, read by ``explain``, the
op x face matrix and the docs.

A face is a way to call an op: ``native`` (functions, methods, ``invoke``), ``autograd``
(recorded and differentiated by our engine), ``torch`` and ``torch.grad`` (the PyTorch
bridge, eager values and gradients), ``torch.compile`` (the bridged op inside
``torch.compile(fullgraph=True)``) and ``torch.compile.grad`` (its gradients, through the
backward graph torch compiles from the op's rule), ``jax`` and ``jax.grad`` (the JAX bridge under
``jax.jit``, values and gradients), ``jax.vmap`` (the bridged op mapped over a batch
dimension, one example at a time), ``mxnet`` (``sparse_ops.compat.mxnet``), ``dask``
(``sparse_ops.dask.apply`` over row blocks) and ``gpu``. Every face serves every op unless
the op's declaration says otherwise; the reasons come from the declaration itself (no
gradient, no partition rule, no gpu kernel, inputs updated in place) or from the op's own
``unsupported_faces`` (a dict face -> reason), never from a face's failure.
"""
from __future__ import annotations

from typing import Sequence

from .registry import Op, OpDef

FACES = ("native", "autograd", "torch", "torch.grad", "torch.compile", "torch.compile.grad", "jax", "jax.grad",
         "jax.vmap", "mxnet", "dask", "gpu")
GRADIENT_FACES = ("autograd", "torch.grad", "torch.compile.grad", "jax.grad")


def unsupported(opdef: OpDef, inst: Op | None = None, shapes: Sequence[tuple[int, ...]] | None = None,
                stypes: Sequence[str] | None = None) -> dict[str, str]:
    """face -> the reason this op's declaration gives for not serving it there; with a call's
    parameters (``inst``), input ``shapes`` and storage types, also what rules that depend on
    them decline (the op's ``partitioning`` for Dask and ``jax.vmap``)."""
    reasons = {}
    if opdef.constant:
        for f in GRADIENT_FACES:
            reasons[f] = f"its outputs are constants ({opdef.constant_declaration}): no gradient to take"
    elif not opdef.differentiable:
        for f in GRADIENT_FACES:
            reasons[f] = "it declares no gradient"
    elif inst is not None and inst.no_gradient() is not None:
        for f in GRADIENT_FACES:
            reasons[f] = inst.no_gradient()
    if opdef.mutate:
        reasons["dask"] = (f"it updates input(s) {', '.join(opdef.mutate)} in place, which row blocks on "
                           "workers cannot do")
    elif opdef.partition is None and opdef.cls.partitioning is Op.partitioning:
        reasons["dask"] = "it declares no partition rule (partition = None)"
    elif (opdef.num_visible_outputs or len(opdef.outputs)) > 1:
        reasons["dask"] = "it returns several outputs; sparse_ops.dask.apply runs single-output ops"
    if not any(d == "gpu" for d in opdef.fcompute) and not any(d == "gpu" for d, _ in opdef.fcompute_ex):
        reasons["gpu"] = "it has no gpu kernel"
    rule = inst.partitioning(*shapes)[0] if inst is not None and shapes is not None else opdef.partition
    if "dask" not in reasons and rule is None:
        reasons["dask"] = "its partitioning rule declines these parameters and input shapes"
    if not opdef.variadic and not opdef.arguments:
        reasons["jax.vmap"] = "it takes no inputs to map over"
    elif opdef.mutate:
        reasons["jax.vmap"] = "it updates inputs in place, which a per-example map cannot express"
    elif stypes is not None and any(s != "default" for s in stypes):
        reasons["jax.vmap"] = "jax.vmap maps over dense arrays only (BCSR / RowSparse arguments have no batch rule)"
    if inst is not None and stypes is not None:
        missing = _without_capacity(opdef, inst, stypes)
        if missing:
            why = (f"its sparse result(s) {', '.join(missing)} declare no capacity rule (Op.capacity), so "
                   "jax.jit needs max_nnz= on each call")
            for f in ("jax", "jax.grad", "jax.vmap"):
                reasons.setdefault(f, why)
    for face, why in (getattr(opdef.cls, "unsupported_faces", None) or {}).items():
        if face not in FACES:
            raise ValueError(f"{opdef.label}: unsupported_faces names unknown face {face!r} (faces: {', '.join(FACES)})")
        reasons[face] = str(why)
    return reasons


def _without_capacity(opdef: OpDef, inst: Op, stypes: Sequence[str]) -> list[str]:
    """The sparse results (outputs, inputs updated in place) of a call with these input
    storage types for which the op declares no capacity rule (``Op.capacity``): the JAX
    bridge cannot size them without ``max_nnz=``."""
    from .sdk import capacity as cap

    try:
        outs = list(inst.infer_storage_type(*stypes))
    except Exception:  # noqa: BLE001  (a rule refusing these storage types: the call itself says so)
        return []
    names = [s for s, st in zip(cap.slot_names(inst, len(outs)), outs) if st != "default"]
    if not opdef.variadic:
        names += [m for m in opdef.mutate if stypes[opdef.arguments.index(m)] != "default"]
    return [n for n in names if cap.rule_for(opdef.capacity, n) is None]


def support(opdef: OpDef, inst: Op | None = None, shapes: Sequence[tuple[int, ...]] | None = None,
            stypes: Sequence[str] | None = None) -> dict[str, str]:
    """Every face with ``"yes"`` or the reason it does not serve this op (what ``explain`` shows)."""
    reasons = unsupported(opdef, inst, shapes, stypes)
    return {f: reasons.get(f, "yes") for f in FACES}
