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
    gradients. ``wrt`` lists the inputs to check (default: every floating input the op
    declares a gradient for). Use float64 inputs for tight tolerances."""
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
    if wrt is None:  # every floating input the op gives a gradient for
        wrt = [i for i, (x, g) in enumerate(zip(inputs, grads)) if g is not None and x.dtype.kind == "f"]

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


def _allclose(a: NDArray, b: NDArray, rtol: float, atol: float, what: str) -> None:
    x, y = a.asnumpy(), b.asnumpy()
    if x.shape != y.shape:
        raise AssertionError(f"{what}: shapes differ, {x.shape} vs {y.shape}")
    if not np.allclose(x.astype(np.float64), y.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True):
        err = np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))
        raise AssertionError(f"{what}: values differ (max abs difference {err:.3g})")


def opcheck(op: Any, samples: Sequence[Any], rtol: float = 1e-5, atol: float = 1e-6,
            check_grad: bool = True, grad_rtol: float = 1e-2, grad_atol: float = 1e-3) -> int:
    """Check a registered operator on sample inputs; returns how many samples were checked.

    ``samples`` holds ``(inputs, params)`` pairs (or bare input lists). For each sample:
    the inferred output shapes, dtypes and storage types match what the kernel produced;
    a storage-aware kernel agrees with the dense kernel on densified inputs; two runs give
    identical results (unless the op declares the ``random`` resource); the declared
    gradient matches finite differences (perturbing only stored values of sparse inputs);
    and, when a gpu device exists, cpu and gpu results agree. Raises AssertionError
    naming the op, the sample and what disagreed.
    """
    from ..device import gpu, num_gpus

    opdef = get_op(op) if isinstance(op, str) else op
    count = 0
    for k, sample in enumerate(samples):
        inputs, params = (sample if isinstance(sample, tuple) and len(sample) == 2 and isinstance(sample[1], dict)
                          else (sample, {}))
        inputs = list(inputs)
        label = f"{opdef.name} sample {k} ({', '.join(x.stype for x in inputs)})"
        inst = opdef.instance(params)
        plan = make_plan(opdef, inst, inputs)
        mutated = [opdef.arguments.index(m) for m in opdef.mutate]
        pristine = {i: inputs[i].copy() for i in mutated}  # states the op updates in place

        def fresh_inputs() -> list:
            for i, x in pristine.items():
                inputs[i] = x.copy()
            return inputs

        outs = run_plan(plan, fresh_inputs())
        for i, o in enumerate(outs):
            got = (o.shape, o.dtype, o.stype)
            want = (plan.out_shapes[i], plan.out_dtypes[i], plan.out_stypes[i])
            if got != want:
                raise AssertionError(f"{label}: output {i} is {got} but inference said {want}")
            if o.stype != "default":
                o.check_format(full_check=True)
        if "random" not in opdef.resources:
            again = run_plan(plan, fresh_inputs())
            for i, (a, b) in enumerate(zip(outs, again)):
                _allclose(a, b, 0.0, 0.0, f"{label}: output {i} differs between two runs")
            if plan.mode == "fcompute_ex" and opdef.fcompute.get(plan.device.device_type) is not None:
                dense_inputs = [x if x.stype == "default" else x.tostype("default") for x in fresh_inputs()]
                dense_plan = make_plan(opdef, inst, dense_inputs)
                dense_outs = run_plan(dense_plan, dense_inputs)
                for i, (a, b) in enumerate(zip(outs, dense_outs)):
                    _allclose(a, b, rtol, atol, f"{label}: storage-aware kernel and dense path disagree "
                                                f"on output {i}")
            if num_gpus() > 0 and plan.device.device_type == "cpu":
                dev_inputs = [x.to(gpu(0)) for x in fresh_inputs()]
                gpu_outs = run_plan(make_plan(opdef, inst, dev_inputs), dev_inputs)
                for i, (a, b) in enumerate(zip(outs, gpu_outs)):
                    _allclose(a, b, rtol, atol, f"{label}: cpu and gpu disagree on output {i}")
        if check_grad and opdef.differentiable and "random" not in opdef.resources:
            try:
                check_gradient(opdef.name, inputs, params, rtol=grad_rtol, atol=grad_atol)
            except AssertionError as exc:
                raise AssertionError(f"{label}: {exc}") from None
        count += 1
    return count


def check_numeric_gradient(fn: Any, inputs: Sequence[NDArray], eps: float = 1e-3, rtol: float = 1e-2,
                           atol: float = 1e-3, seed: int = 0, directions: int = 3) -> list:
    """Check autograd's gradients of ``fn(*inputs)`` (a function of NDArrays returning one
    NDArray) against central differences; returns the gradients. Sparse inputs are
    perturbed on their stored values only."""
    from .. import autograd
    from ..creation import array

    rng = np.random.default_rng(seed)
    xs = [x.copy() for x in inputs]
    for x in xs:
        x.attach_grad()
    with autograd.record():
        out = fn(*xs)
    head = array(rng.standard_normal(out.shape), dtype=out.dtype, device=out.device)
    out.backward(head)
    grads = [x.grad for x in xs]
    h = head.asnumpy().astype(np.float64)
    for i, x in enumerate(inputs):
        base = _dense_values(x)
        mask = _structure_mask(x)
        for _ in range(directions):
            d = rng.standard_normal(base.shape) * mask
            vals = []
            for sign in (1, -1):
                args = list(inputs)
                args[i] = _with_values(x, base + sign * eps * d)
                vals.append(float(np.sum(_dense_values(fn(*args)) * h)))
            numeric = (vals[0] - vals[1]) / (2 * eps)
            analytic = float(np.sum(_dense_values(grads[i]) * d))
            if abs(numeric - analytic) > atol + rtol * abs(numeric):
                raise AssertionError(f"gradient of input {i} disagrees with finite differences: "
                                     f"analytic {analytic:.6g}, numeric {numeric:.6g}")
    return grads
