"""Test helpers for operator authors: ``opcheck`` (run every generic check of an operator on
sample inputs and say what each check compared), ``check_gradient`` (the op's declared
gradient against finite differences) and ``check_numeric_gradient`` (autograd through any
function against finite differences).

Gradients are compared **per element**: every stored value of every floating input (up to
``max_elements`` of them, chosen at random beyond that) is perturbed by ``±eps`` and the
central difference of ``<head, op(x)>`` is compared with the analytic gradient at that
element. A mismatch names the worst element: its index, the analytic and the numeric value.

Gradient checks run **in float64** whenever the op takes it: floating inputs of other dtypes
(float32, float16) are cast to float64 for the finite differences, at tolerances that catch
a 0.1% error in a gradient (``FLOAT64_GRAD``: eps 1e-6, rtol 1e-4, atol 1e-6); the declared
gradient in the inputs' own dtypes is then compared with the float64 one, with the same head
gradients (``NATIVE_GRAD_RTOL``), and is what the check returns. An op that refuses float64
inputs, or gives floating outputs other than float64 from them (a float32-only op, a ``cast``
to float32), is checked in its own dtypes at the former, looser tolerances
(``NATIVE_GRAD``: eps 1e-3, rtol 1e-2, atol 1e-3, enough for float32 rounding but not for a
0.1% error). Tolerances passed explicitly are used as given.

Why a report and not a count: a check that compared nothing (a storage-aware kernel with no
dense kernel or reference to compare with, a differentiable op with no gradient) used to pass
silently. ``opcheck`` now fails on such a check unless it is skipped on purpose, with a
reason, through ``opcheck(..., skip=...)`` or the op's ``opcheck_skip`` class attribute.

``sample_array(shape, stype, seed=..., positive=..., dtype=...)`` and ``sample_ints(values)``
build small sample inputs for an op's ``samples()`` (values away from zero and distinct,
sparse arrays with an empty row), the same builders the built-in ops use.
"""
from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from ..dispatch import STORAGE_AWARE, invoke, make_plan
from ..errors import OperatorError, StorageFallbackWarning
from ..gradients import call_gradient
from ..ndarray import NDArray
from ..ops._samples import array as sample_array, ints as sample_ints  # noqa: F401  (for samples())
from ..registry import Op, OpDef, get_op

# The checks opcheck runs, by the names ``skip`` and ``opcheck_skip`` use.
CHECKS: dict[str, str] = {
    "inference": "inferred output shapes, dtypes and storage types match what the kernel produced",
    "format": "sparse outputs pass check_format(full_check=True)",
    "determinism": "two runs give identical outputs (same seed for ops with the random resource)",
    "reference": "the storage-aware kernel agrees with the dense kernel on densified inputs, or the "
                 "outputs agree with the op's NumPy reference",
    "gradient": "the declared gradient agrees with central finite differences, element by element",
    "gpu": "cpu and gpu outputs agree, and gradients from the same heads (when a gpu exists)",
}

# Outcomes of one check on one sample. A check that compared nothing and nobody said why
# is not an outcome: opcheck fails there ("compared nothing: ...").
PASSED = "passed"          # compared something and agreed
NOT_APPLICABLE = "n/a"     # nothing to compare by the op's nature (dense outputs have no format)
SKIPPED = "skipped"        # compared nothing, on purpose: a declared skip (with its reason)
FAILED = "FAILED"          # compared and disagreed, or compared nothing undeclared (then it raises)


class OpcheckError(AssertionError):
    """A check of ``opcheck`` failed or compared nothing; ``report`` holds what ran so far."""

    def __init__(self, message: str, report: "OpcheckReport") -> None:
        super().__init__(message)
        self.report = report


@dataclass
class CheckOutcome:
    """One check on one sample: its name (a key of ``CHECKS``), status and what it compared
    (or why it compared nothing)."""

    check: str
    status: str
    detail: str = ""


@dataclass
class SampleReport:
    """The checks run on one sample."""

    label: str
    outcomes: list[CheckOutcome] = field(default_factory=list)

    def add(self, check: str, status: str, detail: str = "") -> None:
        self.outcomes.append(CheckOutcome(check, status, detail))

    @property
    def compared(self) -> list[str]:
        """Names of the checks that compared something and passed."""
        return [o.check for o in self.outcomes if o.status == PASSED]

    @property
    def not_compared(self) -> list[CheckOutcome]:
        """The checks that compared nothing (skipped, not applicable), each with its reason."""
        return [o for o in self.outcomes if o.status != PASSED]


@dataclass(eq=False)
class OpcheckReport:
    """What ``opcheck`` compared, sample by sample.

    ``int(report)`` and ``report.samples`` are the number of samples checked, and a report
    compares equal to that integer, so ``assert opcheck(op, samples) == 3`` reads as before.
    ``str(report)`` is a readable table of every check and its outcome.
    """

    op: str
    results: list[SampleReport] = field(default_factory=list)

    @property
    def samples(self) -> int:
        return len(self.results)

    def __int__(self) -> int:
        return self.samples

    def __index__(self) -> int:
        return self.samples

    def __eq__(self, other: object) -> bool:
        if isinstance(other, int):
            return self.samples == other
        if isinstance(other, OpcheckReport):
            return self.op == other.op and self.results == other.results
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def skipped(self) -> dict[str, set[str]]:
        """Check name -> the distinct reasons it compared nothing, over all samples."""
        out: dict[str, set[str]] = {}
        for r in self.results:
            for o in r.not_compared:
                out.setdefault(o.check, set()).add(f"{o.status}: {o.detail}")
        return out

    def summary(self) -> str:
        """One line: checks compared, and the checks that compared nothing with why."""
        compared = sorted({c for r in self.results for c in r.compared})
        line = f"{self.samples} samples; compared: {', '.join(compared) or 'nothing'}"
        skipped = {c: v for c, v in self.skipped().items() if not all(s.startswith(NOT_APPLICABLE) for s in v)}
        if skipped:
            line += "; not compared: " + "; ".join(f"{c} ({' / '.join(sorted(v))})" for c, v in sorted(skipped.items()))
        return line

    def __str__(self) -> str:
        lines = [f"opcheck {self.op}: {self.summary()}"]
        for r in self.results:
            lines.append(f"  {r.label}")
            lines.extend(f"    {o.check:<12} {o.status}" + (f": {o.detail}" if o.detail else "") for o in r.outcomes)
        return "\n".join(lines)


# ---- values and perturbations -------------------------------------------------------------------
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


def _worst(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> tuple[tuple, float, float] | None:
    """The element of ``got`` furthest outside ``atol + rtol * |want|`` of ``want``, as
    (index, got value, wanted value); None when every element is within tolerance."""
    got, want = got.astype(np.float64), want.astype(np.float64)
    both_nan = np.isnan(got) & np.isnan(want)
    with np.errstate(invalid="ignore"):
        excess = np.abs(got - want) - (atol + rtol * np.abs(want))
    excess = np.where(both_nan | (got == want), -np.inf, np.where(np.isnan(excess), np.inf, excess))
    if excess.size == 0 or not np.max(excess) > 0:
        return None
    idx = np.unravel_index(int(np.argmax(excess)), excess.shape)
    return tuple(int(i) for i in idx), float(got[idx]), float(want[idx])


def _compare(got: Any, want: Any, rtol: float, atol: float, what: str, names: tuple[str, str]) -> None:
    """Raise AssertionError naming the worst element when ``got`` and ``want`` (NDArrays or
    NumPy arrays) differ in shape or beyond the tolerance."""
    x = got.asnumpy() if isinstance(got, NDArray) else np.asarray(got)
    y = want.asnumpy() if isinstance(want, NDArray) else np.asarray(want)
    if x.shape != y.shape:
        raise AssertionError(f"{what}: shapes differ, {x.shape} vs {y.shape}")
    bad = _worst(x, y, rtol, atol)
    if bad is not None:
        idx, a, b = bad
        count = int(np.sum(~np.isclose(x.astype(np.float64), y.astype(np.float64), rtol=rtol, atol=atol,
                                       equal_nan=True)))
        raise AssertionError(f"{what}: {count} of {x.size} elements differ; worst at index {idx}: "
                             f"{names[0]} {a:.6g}, {names[1]} {b:.6g} (rtol {rtol:g}, atol {atol:g})")


def _element_gradient_check(objective: Callable[[list], float], inputs: Sequence[NDArray],
                            grads: Sequence[Any], wrt: Sequence[int], eps: float, rtol: float,
                            atol: float, rng: np.random.Generator, max_elements: int, label: str,
                            precision: str = "") -> int:
    """Compare ``grads[i]`` (an NDArray, or None meaning zero) with the central difference of
    ``objective`` at each stored element of each input in ``wrt``; returns how many elements
    were compared. Raises AssertionError naming the worst element."""
    compared = 0
    for i in wrt:
        x = inputs[i]
        g = grads[i] if i < len(grads) else None
        if g is not None and tuple(g.shape) != tuple(x.shape):
            raise AssertionError(f"{label}gradient of input {i} has shape {g.shape}, the input {x.shape}")
        analytic_full = np.zeros(x.shape) if g is None else _dense_values(g)
        base = _dense_values(x)
        positions = np.argwhere(_structure_mask(x))
        if positions.shape[0] > max_elements:
            positions = positions[np.sort(rng.choice(positions.shape[0], max_elements, replace=False))]
        numeric = np.empty(positions.shape[0])
        for k, pos in enumerate(map(tuple, positions)):
            xs = list(inputs)
            bumped = base.copy()
            bumped[pos] = base[pos] + eps
            xs[i] = _with_values(x, bumped)
            up = objective(xs)
            bumped[pos] = base[pos] - eps
            xs[i] = _with_values(x, bumped)
            numeric[k] = (up - objective(xs)) / (2 * eps)
        analytic = analytic_full[tuple(positions.T)] if positions.size else np.zeros(0)
        bad = _worst(analytic, numeric, rtol, atol)
        if bad is not None:
            k, a, n = bad
            where = tuple(int(v) for v in positions[k[0]])
            none = " (the gradient rule returned None, i.e. zero)" if g is None else ""
            raise AssertionError(
                f"{label}gradient of input {i} disagrees with finite differences at index {where}: "
                f"analytic {a:.8g}, numeric {n:.8g}{none} (eps {eps:g}, rtol {rtol:g}, atol {atol:g}"
                f"{'; ' + precision if precision else ''}; "
                f"{int(np.sum(~np.isclose(analytic, numeric, rtol=rtol, atol=atol)))} of "
                f"{positions.shape[0]} elements differ)")
        compared += positions.shape[0]
    return compared


def _float_inputs(inputs: Sequence[NDArray]) -> list[int]:
    return [i for i, x in enumerate(inputs) if x.dtype.kind == "f"]


def _gradient_objective(opdef: OpDef, params: dict[str, Any], heads: list, seeded: bool) -> Callable[[list], float]:
    def objective(xs: list) -> float:
        if seeded:
            _reseed()
        outs = invoke(opdef, xs, params)
        outs = outs if isinstance(outs, list) else [outs]
        return sum(float(np.sum(np.where(h != 0, _dense_values(o) * h, 0.0))) for o, h in zip(outs, heads))
    return objective


def _declared_gradient(opdef: OpDef, inputs: list, params: dict[str, Any], rng: np.random.Generator,
                       seeded: bool, heads: list | None = None, wrt: Sequence[int] | None = None) -> tuple[list, list]:
    """(head gradients of the visible outputs as float64 NumPy arrays, rounded to the outputs'
    dtypes; the op's gradient rule applied to them). ``heads``: use these (float64 arrays)
    instead of new random ones. ``wrt``: the inputs whose gradients are asked for (default:
    all), as autograd asks a rule for those that need one."""
    from ..creation import array, zeros

    inst = opdef.instance(params)
    plan = make_plan(opdef, inst, inputs)
    if seeded:
        _reseed()
    outputs = plan.execute(inputs)  # every output, hidden ones (e.g. Dropout's mask) too
    # heads are zero where an output is not finite (1/x at a sparse zero): those entries stay
    # infinite under any perturbation and would make every difference nan
    if heads is None:
        heads = [rng.standard_normal(o.shape) * np.isfinite(o.asnumpy()) for o in outputs[:plan.nvis]]
    head_arrays = [array(h, dtype=o.dtype, device=o.device) for h, o in zip(heads, outputs)]
    hidden = [zeros(o.shape, stype=o.stype, dtype=o.dtype, device=o.device) for o in outputs[plan.nvis:]]
    needs = [True] * len(inputs) if wrt is None else [i in wrt for i in range(len(inputs))]
    grads = call_gradient(inst, head_arrays + hidden, list(inputs), outputs, needs)
    return [h.astype(o.dtype).astype(np.float64) for h, o in zip(heads, outputs)], list(grads)


_SEED = 20240611


def _reseed() -> None:
    """Same seed before each run of an op with the ``random`` resource, so runs can be compared."""
    from .. import random

    random.seed(_SEED)


# Finite-difference settings (eps, rtol, atol): in float64, tight enough to catch a 0.1% error
# in a gradient of size ~1e-2 and up (central differences in float64: truncation ~eps**2,
# rounding ~1e-16 |objective| / eps); in an op's own float32/float16 (ops refusing float64),
# loose: float32 rounding of the objective alone is ~1e-7 |objective| / eps.
FLOAT64_GRAD = (1e-6, 1e-4, 1e-6)
NATIVE_GRAD = (1e-3, 1e-2, 1e-3)
# The declared gradient in the inputs' own dtypes against the float64 one (same heads):
# relative to the largest float64 gradient value of the input.
NATIVE_GRAD_RTOL = {np.dtype(np.float16): 1e-2, np.dtype(np.float32): 1e-4}


def _in_float64(opdef: OpDef, params: dict[str, Any], inputs: Sequence[NDArray]) -> list | None:
    """``inputs`` with every floating input cast to float64, when the op takes them so and
    every floating output it then gives is float64; None otherwise (checked in its own dtypes)."""
    wide = [x.astype(np.float64) if x.dtype.kind == "f" and x.dtype != np.float64 else x for x in inputs]
    try:
        plan = make_plan(opdef, opdef.instance(params), wide)
    except Exception:  # noqa: BLE001 - the op refuses float64 here: check it in its own dtypes
        return None
    if any(np.dtype(d).kind == "f" and np.dtype(d) != np.float64 for d in plan.out_dtypes[:plan.nvis]):
        return None
    return wide


@dataclass
class _GradientResult:
    grads: list           # the declared gradients on the inputs as given (their own dtypes)
    compared: int         # elements compared with finite differences
    precision: str        # what ran: "float64" or "float32 (...)"
    eps: float            # the finite-difference step used


def _run_gradient_check(opdef: OpDef, inputs: list, params: dict[str, Any], wrt: list[int],
                        eps: float | None, rtol: float | None, atol: float | None, rng: np.random.Generator,
                        max_elements: int, label: str, seeded: bool) -> _GradientResult:
    """The element-wise finite-difference check (in float64 when the op takes it, see the
    module docstring), then, when inputs were cast, the declared gradient in their own dtypes
    against the float64 one."""
    wide = _in_float64(opdef, params, inputs)
    if wide is not None and all(a is b for a, b in zip(wide, inputs)):
        wide = inputs  # float64 already: nothing cast, nothing to compare afterwards
    floats = sorted({str(inputs[i].dtype) for i in wrt if inputs[i].dtype.kind == "f"})
    if wide is not None:
        defaults, xs = FLOAT64_GRAD, wide
        precision = "float64" + (f" (inputs cast from {', '.join(d for d in floats if d != 'float64')})"
                                 if any(d != "float64" for d in floats) else "")
    else:
        defaults, xs = NATIVE_GRAD, inputs
        precision = (f"{', '.join(floats) or 'native dtypes'} (the op takes no float64 inputs here, or gives "
                     f"other floating outputs from them: loose tolerances)")
    eps, rtol, atol = (d if v is None else v for v, d in zip((eps, rtol, atol), defaults))
    heads, grads = _declared_gradient(opdef, xs, params, rng, seeded, wrt=wrt)
    n = _element_gradient_check(_gradient_objective(opdef, params, heads, seeded), xs, grads, wrt,
                                eps, rtol, atol, rng, max_elements, label, precision)
    if xs is inputs:  # checked as given (float64, or the op's own dtypes)
        return _GradientResult(list(grads), n, precision, eps)
    # the gradient rule in the inputs' own dtypes, with the same heads, against the float64 one
    _, native = _declared_gradient(opdef, inputs, params, rng, seeded, heads=heads, wrt=wrt)
    if not seeded:  # random draws differ between dtypes: nothing to compare then
        for i in wrt:
            want = grads[i] if i < len(grads) else None
            got = native[i] if i < len(native) else None
            tol = NATIVE_GRAD_RTOL.get(inputs[i].dtype)
            if tol is None or (want is None and got is None):
                continue
            w = np.zeros(inputs[i].shape) if want is None else _dense_values(want)
            g = np.zeros(inputs[i].shape) if got is None else _dense_values(got)
            scale = float(np.max(np.abs(w[np.isfinite(w)]), initial=0.0))
            bad = _worst(g, w, tol, tol * scale)
            if bad is not None:
                idx, a, b = bad
                raise AssertionError(
                    f"{label}gradient of input {i} in {inputs[i].dtype} disagrees with its float64 gradient "
                    f"at index {idx}: {a:.6g} vs {b:.6g} (rtol {tol:g}, atol {tol * scale:.3g})")
    return _GradientResult(list(native), n, precision, eps)


def check_gradient(op_name: str, inputs: Sequence[NDArray], params: dict[str, Any] | None = None,
                   wrt: Sequence[int] | None = None, eps: float | None = None, rtol: float | None = None,
                   atol: float | None = None, seed: int = 0, max_elements: int = 256) -> list:
    """Assert that the op's declared gradient matches central differences element by element;
    returns the gradients (in the inputs' own dtypes). ``wrt`` lists the inputs to check
    (default: every floating input; a None gradient counts as zero, so a forgotten gradient
    fails where the op does depend on the input). Sparse inputs are perturbed on their
    stored values only.

    The check runs in float64 (floating inputs cast) whenever the op takes float64, with
    ``eps``/``rtol``/``atol`` defaulting to ``FLOAT64_GRAD`` (1e-6, 1e-4, 1e-6: a 0.1% error
    in a gradient fails), and the gradient in the inputs' own dtypes must then agree with the
    float64 one. Ops that take no float64 (float32-only) are checked in their own dtypes at
    the looser ``NATIVE_GRAD`` (1e-3, 1e-2, 1e-3), which does not catch a 0.1% error. A
    smaller ``eps`` keeps non-smooth ops (ties, kinks) off their kinks."""
    params = params or {}
    opdef = get_op(op_name) if isinstance(op_name, str) else op_name
    rng = np.random.default_rng(seed)
    inputs = list(inputs)
    seeded = "random" in opdef.resources
    wrt = _float_inputs(inputs) if wrt is None else list(wrt)
    return _run_gradient_check(opdef, inputs, params, wrt, eps, rtol, atol, rng, max_elements, f"{opdef.name}: ",
                               seeded).grads


# ---- opcheck --------------------------------------------------------------------------------------
def _split_sample(sample: Any) -> tuple[list, dict]:
    if isinstance(sample, tuple) and len(sample) == 2 and isinstance(sample[1], dict):
        return list(sample[0]), dict(sample[1])
    return list(sample), {}


def _skip_table(opdef: OpDef, skip: Mapping[str, str] | Iterable[str] | None) -> dict[str, str]:
    """The op's ``opcheck_skip`` declaration merged with the caller's ``skip``: check -> reason."""
    table: dict[str, str] = dict(getattr(opdef.cls, "opcheck_skip", None) or {})
    if skip is not None:
        if isinstance(skip, str):
            skip = [skip]
        items = skip.items() if isinstance(skip, Mapping) else ((s, "skipped by the caller") for s in skip)
        table.update({k: str(v) for k, v in items})
    unknown = [k for k in table if k not in CHECKS and not (
        k.startswith("gradient:") and k.split(":", 1)[1] in opdef.arguments)]
    if unknown:
        raise ValueError(f"opcheck {opdef.name}: unknown check(s) to skip {unknown}; checks: {', '.join(CHECKS)}, "
                         f"or 'gradient:<input>' for one input ({', '.join(opdef.arguments)})")
    return table


def _gradient_inputs(opdef: OpDef, inputs: Sequence[NDArray], skips: dict[str, str]) -> tuple[list[int], dict]:
    """(positions of the floating inputs whose gradient is checked, {input name: reason} of
    the floating inputs skipped with ``gradient:<name>``)."""
    names = list(opdef.arguments)
    checked, skipped = [], {}
    for i in _float_inputs(inputs):
        name = names[i] if i < len(names) and not opdef.variadic else None
        reason = skips.get(f"gradient:{name}") if name else None
        if reason is None:
            checked.append(i)
        else:
            skipped[name] = reason
    return checked, skipped


def _op_reference(opdef: OpDef, inst: Op, reference: Callable | None,
                  params: dict[str, Any]) -> Callable[[list], list] | None:
    """The NumPy reference to compare outputs with, as a function of the inputs' NumPy
    values returning a list of arrays: opcheck's ``reference(*arrays, **params)``, else the
    op's ``reference(self, *arrays)`` method (params are the instance's attributes)."""
    if reference is not None:
        fn: Callable = lambda arrays: reference(*arrays, **params)  # noqa: E731
    elif callable(getattr(opdef.cls, "reference", None)):
        fn = lambda arrays: inst.reference(*arrays)  # noqa: E731
    else:
        return None

    def as_list(arrays: list) -> list:
        out = fn(arrays)
        return list(out) if isinstance(out, (list, tuple)) else [out]
    return as_list


def _has_kernel_for(opdef: OpDef, device_type: str) -> bool:
    return device_type in opdef.fcompute or any(dev == device_type for dev, _ in opdef.fcompute_ex)


def opcheck(op: Any, samples: Sequence[Any], rtol: float = 1e-5, atol: float = 1e-6,
            check_grad: bool = True, grad_rtol: float | None = None, grad_atol: float | None = None,
            eps: float | None = None, skip: Mapping[str, str] | Iterable[str] | None = None,
            reference: Callable[..., Any] | None = None, max_grad_elements: int = 256,
            verbose: bool = False) -> OpcheckReport:
    """Check a registered operator on sample inputs; returns an ``OpcheckReport`` saying what
    each check compared on each sample (``int(report)`` is the number of samples).

    ``samples`` holds ``(inputs, params)`` pairs (or bare input lists). The checks (names as
    in ``CHECKS``, used by ``skip``):

    - ``inference``: inferred output shapes, dtypes and storage types match the outputs;
    - ``format``: sparse outputs pass ``check_format(full_check=True)``;
    - ``determinism``: two runs give identical outputs (ops with the ``random`` resource run
      twice from the same seed: ``sparse_ops.random.seed`` is reset);
    - ``reference``: a storage-aware kernel agrees with the dense kernel on densified inputs;
      with a NumPy reference (``reference(*arrays, **params)`` here, or a ``reference(self,
      *arrays)`` method on the op, returning the visible outputs; ``arrays`` are the inputs as
      dense NumPy arrays, sparse ones densified) every sample's outputs are compared with it
      instead. A storage-aware kernel with neither compares nothing: a failure;
    - ``gradient`` (with ``check_grad``): for an op declaring itself differentiable (the
      default), the gradient rule agrees with central differences (step ``eps``, tolerances
      ``grad_rtol``/``grad_atol``) at every stored element of every floating input (at most
      ``max_grad_elements`` per input); a None gradient counts as zero. The check runs in
      float64 when the op takes it (floating inputs cast; defaults ``FLOAT64_GRAD``: eps 1e-6,
      rtol 1e-4, atol 1e-6, which catch a 0.1% error), and the gradient in the sample's own
      dtypes must agree with the float64 one; ops that take no float64 are checked in their
      own dtypes at ``NATIVE_GRAD`` (1e-3, 1e-2, 1e-3: float32 rounding, not a 0.1% error).
      The report says which ran. A differentiable op without a gradient rule fails here:
      declare ``differentiable = False`` or skip it;
    - ``gpu``: when a gpu exists and the op has gpu kernels, cpu and gpu outputs agree, and
      (with ``check_grad``, for a differentiable op whose gradient is not skipped) so do the
      gradients from the same head gradients, in storage type and values.

    A check that compares nothing fails unless skipped with a reason: ``skip={"reference":
    "why"}`` here, or the op's class attribute ``opcheck_skip = {"gradient": "why"}``. The
    key ``"gradient:<input>"`` leaves one floating input out of the gradient check (ids or
    weights that are data by design, whose gradient the op does not give).
    Raises ``OpcheckError`` (an AssertionError) naming the op, the sample, the check and, for
    value mismatches, the worst element (index and both values); an error the op raises on
    a sample (its rules refusing it, a kernel failing) is that check's failure, the error
    kept as the cause. ``verbose`` prints the report.
    """
    opdef = get_op(op) if isinstance(op, str) else op
    options = _Options(rtol, atol, check_grad, grad_rtol, grad_atol, eps, _skip_table(opdef, skip), reference,
                       max_grad_elements)
    report = OpcheckReport(opdef.name)
    samples = list(samples)
    if not samples:
        raise OpcheckError(f"opcheck {opdef.name}: no samples given, so nothing was compared", report)
    rng = np.random.default_rng(0)  # head gradients and sampled gradient elements: reproducible
    # samples take fallback paths on purpose (the report says which dispatch mode ran), and
    # reach f(0) = inf (log, 1/x at a sparse input's zeros) on purpose: neither is a finding
    with warnings.catch_warnings(), np.errstate(divide="ignore", invalid="ignore"):
        warnings.simplefilter("ignore", StorageFallbackWarning)
        for k, raw in enumerate(samples):
            _SampleCheck(opdef, k, raw, options, report, rng).run()
    if verbose:
        print(report)
    return report


@dataclass
class _Options:
    """opcheck's arguments, as the per-sample checks read them."""

    rtol: float
    atol: float
    check_grad: bool
    grad_rtol: float | None
    grad_atol: float | None
    eps: float | None
    skips: dict[str, str]
    reference: Callable[..., Any] | None
    max_grad_elements: int


class _SampleCheck:
    """The checks of ``opcheck`` on one sample, one method each, in order. Each method
    records one outcome in ``self.sample`` or raises ``OpcheckError`` through ``fail``."""

    def __init__(self, opdef: OpDef, k: int, raw: Any, options: _Options, report: OpcheckReport,
                 rng: np.random.Generator) -> None:
        self.opdef, self.o, self.report, self.rng = opdef, options, report, rng
        self.inputs, self.params = _split_sample(raw)
        stypes = ", ".join(x.stype for x in self.inputs) or "no inputs"
        self.sample = SampleReport(f"{opdef.name} sample {k} ({stypes}" + (f"; {self.params}" if self.params else "")
                                   + ")")
        self.seeded = "random" in opdef.resources
        self.c_op = bool(getattr(opdef.cls, "c_library", None))  # advice then speaks the C declaration
        # states the op updates in place (optimizer moments): every run starts from a copy
        self.pristine = {i: self.inputs[i].copy() for i in (opdef.arguments.index(m) for m in opdef.mutate)}

    def run(self) -> None:
        check = "inference"  # parsing the parameters, planning and the first run serve this check
        try:
            self.inst = self.opdef.instance(self.params)
            self.plan = make_plan(self.opdef, self.inst, self.inputs, debug=True)
            self.outs = self.execute(self.plan, self.fresh_inputs())
            for step in (self.inference, self.format, self.determinism, self.reference, self.gradient, self.gpu):
                check = step.__name__
                step()
        except OperatorError as exc:  # the op refused the sample or a kernel failed: this check's finding
            self.fail(check, f"{type(exc).__name__}: {exc}", exc)
        self.report.results.append(self.sample)

    # ---- helpers ----------------------------------------------------------------------------------
    def fresh_inputs(self) -> list:
        for i, x in self.pristine.items():
            self.inputs[i] = x.copy()
        return self.inputs

    def execute(self, plan: Any, xs: list) -> list:
        if self.seeded:
            _reseed()
        return plan.execute(xs)

    def fail(self, check: str, message: str, cause: BaseException | None = None) -> None:
        self.sample.add(check, FAILED, message)
        self.report.results.append(self.sample)
        raise OpcheckError(f"{self.sample.label}: {check}: {message}", self.report) from cause

    def nothing(self, check: str, why: str, fix: str) -> None:
        """Record a check that compared nothing: skipped when declared, else a failure."""
        if check in self.o.skips:
            self.sample.add(check, SKIPPED, self.o.skips[check])
        else:
            declared = (f'so_opcheck_skip {{"{check}", "why"}} in the op\'s declaration' if self.c_op else
                        "opcheck_skip on the op")
            self.fail(check, f"compared nothing: {why}; {fix}, or skip it with a reason "
                             f"(opcheck(..., skip={{{check!r}: 'why'}}) or {declared})")

    def compare(self, check: str, got: list, want: list, rtol: float, atol: float, what: str,
                names: tuple[str, str]) -> None:
        """Fail ``check`` at the first output pair of ``got`` and ``want`` that differs."""
        for i, (a, b) in enumerate(zip(got, want)):
            try:
                _compare(a, b, rtol, atol, what.format(i=i), names)
            except AssertionError as exc:
                self.fail(check, str(exc))

    def skipped(self, check: str) -> bool:
        if check in self.o.skips:
            self.sample.add(check, SKIPPED, self.o.skips[check])
            return True
        return False

    # ---- the checks ---------------------------------------------------------------------------------
    def inference(self) -> None:
        plan = self.plan
        for i, o in enumerate(self.outs):
            got, want = (o.shape, o.dtype, o.stype), (plan.out_shapes[i], plan.out_dtypes[i], plan.out_stypes[i])
            if got != want:
                self.fail("inference", f"output {i} is {got} but inference said {want}")
        self.sample.add("inference", PASSED, f"{len(self.outs)} output(s): {', '.join(plan.out_stypes)}")

    def format(self) -> None:
        sparse_outs = [i for i, o in enumerate(self.outs) if o.stype != "default"]
        for i in sparse_outs:
            try:
                self.outs[i].check_format(full_check=True)
            except Exception as exc:  # noqa: BLE001 - any refusal is the finding
                self.fail("format", f"output {i} ({self.outs[i].stype}) is malformed: {exc}")
        if sparse_outs:
            self.sample.add("format", PASSED, f"output(s) {sparse_outs} well-formed")
        else:
            self.sample.add("format", NOT_APPLICABLE, "no sparse outputs")

    def determinism(self) -> None:
        if self.skipped("determinism"):
            return
        again = self.execute(self.plan, self.fresh_inputs())
        self.compare("determinism", self.outs, again, 0.0, 0.0, "output {i} differs between two runs",
                     ("first", "second"))
        self.sample.add("determinism", PASSED, "two runs" + (" from the same seed" if self.seeded else "") + " identical")

    def reference(self) -> None:
        """The storage-aware kernel against the dense kernel, or every output against the
        NumPy reference when there is one."""
        plan, o = self.plan, self.o
        ref = _op_reference(self.opdef, self.inst, o.reference, self.params)
        if self.skipped("reference"):
            return
        if ref is not None:
            # a C library's op may name another op as its reference (reference_op): say which
            ref_op = getattr(self.opdef.cls, "reference_op", None) if o.reference is None else None
            label = f"its reference op {ref_op!r}" if ref_op else "the NumPy reference"
            wanted = ref([x.asnumpy() for x in self.fresh_inputs()])
            if len(wanted) != plan.nvis:
                self.fail("reference", f"{label} returned {len(wanted)} arrays, the op has {plan.nvis} "
                                       f"visible output(s)")
            self.compare("reference", self.outs, wanted, o.rtol, o.atol, f"output {{i}} and {label} disagree",
                         ("kernel", "reference"))
            self.sample.add("reference", PASSED, f"outputs vs {label} ({plan.mode} kernel)")
        elif plan.mode not in STORAGE_AWARE:
            self.sample.add("reference", NOT_APPLICABLE, f"{plan.mode} ran the dense kernel, the reference itself")
        elif self.opdef.fcompute.get(plan.device.device_type) is None:
            self.nothing("reference", f"the {','.join(plan.in_stypes)} kernel ran and the op has no dense kernel and "
                         "no NumPy reference to compare it with", "give a reference ("
                         + ("so_op_decl.reference naming an op that computes the same outputs" if self.c_op else
                            "a `reference` method on the op")
                         + " or opcheck(..., reference=fn)) or a dense kernel")
        else:
            dense_inputs = [x if x.stype == "default" else x.tostype("default") for x in self.fresh_inputs()]
            dense_outs = self.execute(make_plan(self.opdef, self.inst, dense_inputs, debug=True), dense_inputs)
            self.compare("reference", self.outs, dense_outs, o.rtol, o.atol,
                         "storage-aware kernel and dense path disagree on output {i}", ("storage-aware", "dense"))
            self.sample.add("reference", PASSED, f"{','.join(plan.in_stypes)} kernel vs the dense kernel")

    def gradient(self) -> None:
        opdef, o = self.opdef, self.o
        if not o.check_grad:
            self.sample.add("gradient", SKIPPED, "check_grad=False")
            return
        if not getattr(opdef.cls, "differentiable", True):
            self.sample.add("gradient", NOT_APPLICABLE, f"the op declares {opdef.constant_declaration}")
            return
        if self.skipped("gradient"):
            return
        if not opdef.differentiable:  # neither gradient() nor backward kernels
            declared = "no SO_OP_CONSTANT" if self.c_op else "differentiable is not False"
            self.nothing("gradient", f"the op is differentiable ({declared}) but declares no gradient",
                         "declare so_gradient terms or SO_OP_CONSTANT" if self.c_op else
                         "write gradient() or declare differentiable = False")
            return
        wrt, not_wrt = _gradient_inputs(opdef, self.inputs, o.skips)
        for name, reason in not_wrt.items():
            self.sample.add(f"gradient:{name}", SKIPPED, reason)
        if not wrt:
            self.nothing("gradient", "the sample has no floating input whose gradient is checked",
                         "add a sample with float64 inputs")
            return
        xs = self.fresh_inputs()
        try:
            result = _run_gradient_check(opdef, xs, self.params, wrt, o.eps, o.grad_rtol, o.grad_atol, self.rng,
                                         o.max_grad_elements, "", self.seeded)
        except AssertionError as exc:
            self.fail("gradient", str(exc))
        self.sample.add("gradient", PASSED, f"{result.compared} elements of input(s) {wrt} vs finite differences "
                                            f"(eps {result.eps:g}) in {result.precision}")

    def gpu(self) -> None:
        from ..device import gpu, num_gpus

        if self.skipped("gpu"):
            return
        if num_gpus() == 0 or self.plan.device.device_type != "cpu":
            self.sample.add("gpu", NOT_APPLICABLE, "no gpu device" if num_gpus() == 0 else "the sample is on a gpu")
        elif not _has_kernel_for(self.opdef, "gpu"):
            self.sample.add("gpu", NOT_APPLICABLE, "the op has no gpu kernel")
        elif getattr(self.opdef.cls, "c_library", None) and gpu(0).xp is np:
            self.sample.add("gpu", NOT_APPLICABLE, "compiled (C/CUDA) gpu kernels need a real GPU; the simulated "
                                                   "one (SPARSE_OPS_CUDA_SIM=1) runs numba kernels only")
        elif self.seeded:
            self.sample.add("gpu", NOT_APPLICABLE, "random draws: each device has its own stream, so the "
                                                   "same seed gives other numbers on the gpu")
        else:
            dev_inputs = [x.to(gpu(0)) for x in self.fresh_inputs()]
            gpu_outs = self.execute(make_plan(self.opdef, self.inst, dev_inputs, debug=True), dev_inputs)
            self.compare("gpu", gpu_outs, self.outs, self.o.rtol, self.o.atol, "cpu and gpu disagree on output {i}",
                         ("gpu", "cpu"))
            compared = "gpu outputs equal the cpu outputs"
            if self.o.check_grad and self.opdef.differentiable and "gradient" not in self.o.skips:
                compared += self.gpu_gradients()
            self.sample.add("gpu", PASSED, compared)

    def gpu_gradients(self) -> str:
        """The op's gradient on the gpu against the cpu's, from the same head gradients: a
        backward kernel of its own for each device, or a gradient() of operators, runs on the
        gpu as training there would run it. What was compared, for the report."""
        from ..device import gpu

        wrt = _gradient_inputs(self.opdef, self.inputs, self.o.skips)[0]
        heads, want = _declared_gradient(self.opdef, self.fresh_inputs(), self.params, self.rng, False, wrt=wrt)
        dev_inputs = [x.to(gpu(0)) for x in self.fresh_inputs()]
        got = _declared_gradient(self.opdef, dev_inputs, self.params, self.rng, False, heads, wrt=wrt)[1]
        compared = []
        for i, (a, b) in enumerate(zip(got, want)):
            if i not in wrt:
                continue
            name = self.opdef.arguments[i] if i < len(self.opdef.arguments) else f"input {i}"
            if (a is None) != (b is None):
                self.fail("gpu", f"the gradient of {name!r} is None on the " + ("gpu" if a is None else "cpu")
                          + " only")
            if a is None:
                continue
            if a.stype != b.stype:
                self.fail("gpu", f"the gradient of {name!r} is {a.stype} on the gpu but {b.stype} on the cpu")
            self.compare("gpu", [a], [b], self.o.rtol, self.o.atol, f"cpu and gpu disagree on the gradient of {name!r}",
                         ("gpu", "cpu"))
            compared.append(name)
        return f", and so do the gradients of {', '.join(map(repr, compared))}" if compared else ""


def check_numeric_gradient(fn: Any, inputs: Sequence[NDArray], eps: float | None = None, rtol: float | None = None,
                           atol: float | None = None, seed: int = 0, max_elements: int = 256) -> list:
    """Check autograd's gradients of ``fn(*inputs)`` (a function of NDArrays returning one
    NDArray) against central differences at each stored element of each input; returns the
    gradients (autograd's, on the inputs as given). Sparse inputs are perturbed on their
    stored values only; a mismatch names the worst element (index, analytic and numeric value).

    As ``check_gradient``: in float64 (floating inputs cast) when ``fn`` takes float64 inputs
    and returns float64, at ``FLOAT64_GRAD`` unless tolerances are given, else in the inputs'
    own dtypes at the looser ``NATIVE_GRAD``."""
    from .. import autograd
    from ..creation import array

    def gradients(args: Sequence[NDArray], head: np.ndarray | None) -> tuple[list, np.ndarray, Any]:
        xs = [x.copy() for x in args]
        for x in xs:
            x.attach_grad()
        with autograd.record():
            out = fn(*xs)
        h = rng.standard_normal(out.shape) if head is None else head
        out.backward(array(h, dtype=out.dtype, device=out.device))
        return [x.grad for x in xs], h, out.dtype

    rng = np.random.default_rng(seed)
    inputs = list(inputs)
    wrt = _float_inputs(inputs)
    wide = [x.astype(np.float64) if x.dtype.kind == "f" and x.dtype != np.float64 else x for x in inputs]
    in_float64 = False
    if any(a is not b for a, b in zip(wide, inputs)):
        try:
            grads, h, out_dtype = gradients(wide, None)
            in_float64 = out_dtype == np.float64
        except Exception:  # noqa: BLE001 - fn refuses float64 inputs: check in their own dtypes
            pass
    if not in_float64:
        wide = inputs
        grads, h, out_dtype = gradients(inputs, None)
        in_float64 = out_dtype == np.float64
    h = h.astype(out_dtype).astype(np.float64)
    defaults = FLOAT64_GRAD if in_float64 else NATIVE_GRAD
    eps, rtol, atol = (d if v is None else v for v, d in zip((eps, rtol, atol), defaults))

    def objective(args: list) -> float:
        return float(np.sum(_dense_values(fn(*args)) * h))

    _element_gradient_check(objective, wide, grads, wrt, eps, rtol, atol, rng, max_elements, "",
                            "float64" if in_float64 else "the inputs' own dtypes (fn takes no float64: loose tolerances)")
    if wide is inputs:
        return grads
    native, _, _ = gradients(inputs, h)
    for i in wrt:
        tol = NATIVE_GRAD_RTOL.get(inputs[i].dtype)
        if tol is None or native[i] is None or grads[i] is None:
            continue
        w, g = _dense_values(grads[i]), _dense_values(native[i])
        scale = float(np.max(np.abs(w[np.isfinite(w)]), initial=0.0))
        bad = _worst(g, w, tol, tol * scale)
        if bad is not None:
            idx, a, b = bad
            raise AssertionError(f"gradient of input {i} in {inputs[i].dtype} disagrees with its float64 gradient "
                                 f"at index {idx}: {a:.6g} vs {b:.6g} (rtol {tol:g}, atol {tol * scale:.3g})")
    return native


@contextlib.contextmanager
def table_restored() -> Iterator[None]:
    """Undo on exit whatever is registered or loaded inside: the operator table (new ops,
    replacements, removals), plugin and library records, and the ``sparse_ops.ops``
    functions they published. For tests that register ops or load plugins and libraries, so
    that no other test sees them."""
    from .. import ops, plugins, registry

    table, loaded, failed = registry.snapshot(), dict(plugins._LOADED), dict(plugins._FAILED)
    published = set(vars(ops))
    try:
        yield
    finally:
        registry.restore(table)
        for attr in set(vars(ops)) - published:
            delattr(ops, attr)
        plugins._LOADED.clear()
        plugins._LOADED.update(loaded)
        plugins._FAILED.clear()
        plugins._FAILED.update(failed)
