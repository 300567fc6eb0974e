"""Which faces serve an op, and why one cannot: declared once, read by ``explain``, the
op x face matrix and the docs.

A face is a way to call an op: ``native`` (functions, methods, ``invoke``), ``autograd``
(recorded and differentiated by our engine), ``torch`` and ``torch.grad`` (the PyTorch
bridge, eager values and gradients), ``torch.compile`` (the bridged op inside
``torch.compile(fullgraph=True)``), ``jax`` and ``jax.grad`` (the JAX bridge under
``jax.jit``, values and gradients), ``mxnet`` (``sparse_ops.compat.mxnet``), ``dask``
(``sparse_ops.dask.apply`` over row blocks) and ``gpu``. Every face serves every op unless
the op's declaration says otherwise; the reasons come from the declaration itself (no
gradient, no partition rule, no gpu kernel, inputs updated in place) or from the op's own
``unsupported_faces`` (a dict face -> reason), never from a face's failure.
"""
from __future__ import annotations

from typing import Sequence

from .registry import Op, OpDef

FACES = ("native", "autograd", "torch", "torch.grad", "torch.compile", "jax", "jax.grad", "mxnet", "dask", "gpu")
GRADIENT_FACES = ("autograd", "torch.grad", "jax.grad")


def unsupported(opdef: OpDef, inst: Op | None = None, shapes: Sequence[tuple[int, ...]] | None = None
                ) -> dict[str, str]:
    """face -> the reason this op's declaration gives for not serving it there; with a call's
    parameters (``inst``) and input ``shapes``, also what rules that depend on them decline
    (the op's ``partitioning`` for Dask)."""
    reasons = {}
    if opdef.constant:
        for f in GRADIENT_FACES:
            reasons[f] = "its outputs are constants (differentiable = False): no gradient to take"
    elif not opdef.differentiable:
        for f in GRADIENT_FACES:
            reasons[f] = "it declares no gradient"
    if opdef.mutate:
        reasons["dask"] = (f"it updates input(s) {', '.join(opdef.mutate)} in place, which row blocks on "
                           "workers cannot do")
    elif opdef.partition is None and opdef.cls.partitioning is Op.partitioning:
        reasons["dask"] = "it declares no partition rule (partition = None)"
    elif (opdef.num_visible_outputs or len(opdef.outputs)) > 1:
        reasons["dask"] = "it returns several outputs; sparse_ops.dask.apply runs single-output ops"
    if not any(d == "gpu" for d in opdef.fcompute) and not any(d == "gpu" for d, _ in opdef.fcompute_ex):
        reasons["gpu"] = "it has no gpu kernel"
    if "dask" not in reasons and inst is not None and shapes is not None:
        rule, _ = inst.partitioning(*shapes)
        if rule is None:
            reasons["dask"] = "its partitioning rule declines these parameters and input shapes"
    for face, why in (getattr(opdef.cls, "unsupported_faces", None) or {}).items():
        if face not in FACES:
            raise ValueError(f"{opdef.label}: unsupported_faces names unknown face {face!r} (faces: {', '.join(FACES)})")
        reasons[face] = str(why)
    return reasons


def support(opdef: OpDef, inst: Op | None = None, shapes: Sequence[tuple[int, ...]] | None = None
            ) -> dict[str, str]:
    """Every face with ``"yes"`` or the reason it does not serve this op (what ``explain`` shows)."""
    reasons = unsupported(opdef, inst, shapes)
    return {f: reasons.get(f, "yes") for f in FACES}
