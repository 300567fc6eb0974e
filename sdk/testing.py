"""Test helpers for operator authors: compare an op against a reference and check its
declared gradient against finite differences.

``check_gradient`` calls the op's ``gradient`` rule directly (no tape needed), with a
random head gradient, and compares ``<head, J·dx>`` estimated by central differences
along random directions with ``<gradient, dx>``.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..dispatch import invoke, make_plan, run_plan
from ..ndarray import NDArray
from ..registry import get_op


def _dense_values(x: NDArray) -> np.ndarray:
    return x.asnumpy().astype(np.float64)


def _with_values(x: NDArray, values: np.ndarray) -> NDArray:
    """A container like ``x`` (storage type, dtype) holding ``values``; sparse containers keep
    their structure so perturbations stay inside it."""
    from ..creation import array

    if x.stype == "default":
        return array(values.astype(x.dtype), device=x.device)
    if x.stype == "row_sparse":
        data = values[x._indices] if x._indices.size else values[:0]
        return x._with_values(data.astype(x.dtype), copy_aux=False)
    rows = np.repeat(np.arange(x.shape[0]), np.diff(x._indptr))
    return x._with_values(values[rows, x._indices].astype(x.dtype), copy_aux=False)


def _structure_mask(x: NDArray) -> np.ndarray:
    """Where a perturbation of ``x`` may go: everywhere for dense, the stored entries for sparse."""
    mask = np.zeros(x.shape, dtype=bool)
    if x.stype == "default":
        mask[...] = True
    elif x.stype == "row_sparse":
        mask[x._indices] = True
    else:
        rows = np.repeat(np.arange(x.shape[0]), np.diff(x._indptr))
        mask[rows, x._indices] = True
    return mask


def check_gradient(op_name: str, inputs: Sequence[NDArray], params: dict[str, Any] | None = None,
                   wrt: Sequence[int] | None = None, eps: float = 1e-3, rtol: float = 1e-2,
                   atol: float = 1e-3, seed: int = 0, directions: int = 3) -> list:
    """Assert that the op's declared gradient matches central differences; returns the
    gradients. Use float64 inputs for tight tolerances."""
    params = params or {}
    opdef = get_op(op_name)
    rng = np.random.default_rng(seed)
    inst = opdef.instance(params)
    plan = make_plan(opdef, inst, inputs)
    outputs = run_plan(plan, inputs)  # every output, hidden ones (e.g. Dropout's mask) too
    from ..creation import array, zeros

    heads = [array(rng.standard_normal(o.shape), dtype=o.dtype, device=o.device) for o in outputs[:plan.nvis]]
    hidden = [zeros(o.shape, stype=o.stype, dtype=o.dtype, device=o.device) for o in outputs[plan.nvis:]]
    grads = inst.gradient(heads + hidden, list(inputs), outputs)
    wrt = range(len(inputs)) if wrt is None else wrt

    def objective(xs: list) -> float:
        outs = invoke(opdef, xs, params)
        outs = outs if isinstance(outs, list) else [outs]
        return sum(float(np.sum(_dense_values(o) * h.asnumpy())) for o, h in zip(outs, heads))

    for i in wrt:
        g = grads[i]
        assert g is not None, f"{op_name}: no gradient for input {i}"
        assert g.shape == inputs[i].shape, f"{op_name}: gradient {i} has shape {g.shape}, input {inputs[i].shape}"
        base = _dense_values(inputs[i])
        mask = _structure_mask(inputs[i])
        for _ in range(directions):
            d = rng.standard_normal(base.shape) * mask
            xs = list(inputs)
            xs[i] = _with_values(inputs[i], base + eps * d)
            up = objective(xs)
            xs[i] = _with_values(inputs[i], base - eps * d)
            down = objective(xs)
            numeric = (up - down) / (2 * eps)
            analytic = float(np.sum(_dense_values(g) * d))
            assert abs(numeric - analytic) <= atol + rtol * abs(numeric), (
                f"{op_name}: gradient of input {i} disagrees with finite differences: "
                f"analytic {analytic:.6g}, numeric {numeric:.6g}"
            )
    return grads
