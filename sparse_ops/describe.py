"""What an operator declares and does, as data: its storage-type rules per input signature
(the output storage types its rule infers, the dispatch mode a cpu call gets, and, where the
op declares backward kernels, its gradients' storage types: ``storage_rules``), and the
storage type of each input's gradient on each of its samples, differentiated natively
(``sample_gradients``). ``sparse-ops info`` prints the rules (``StorageRules.lines``) and the
documentation's operator pages tabulate both, so the two say the same."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .backward_op import backward_instance, backward_of
from .device import cpu
from .dispatch import choose_dispatch
from .errors import OperatorError
from .ops.methods import attach_gradient_buffer
from .registry import OpDef


@dataclass(frozen=True)
class StorageRow:
    """One input-storage signature with a kernel, as ``sparse-ops info`` reports it."""

    inputs: tuple[str, ...]
    outputs: str  # the output storage types, comma-joined, or why there are none
    mode: str | None  # the dispatch mode a cpu call gets; None where the rule refuses the inputs
    gradients: str | None = None  # "input: storage, ... (mode)" where the op declares backward kernels

    def line(self) -> str:
        """The line ``sparse-ops info`` prints for this row."""
        return f"{','.join(self.inputs)} -> {self.outputs}" + (f" [{self.mode}]" if self.mode else "")


@dataclass
class StorageRules:
    """An op's storage rules (``storage_rules``)."""

    rows: list[StorageRow] = field(default_factory=list)
    sample_params: dict[str, Any] | None = None  # the first sample's parameters, when the rules needed them
    unknown: str | None = None  # why the output storage types are unknown (required parameters)
    fallback: bool = False  # other input storage types run the dense kernel on densified inputs

    def lines(self) -> list[str]:
        """The lines ``sparse-ops info`` prints under "storage rules"."""
        head = ([f"(with the parameters of the first sample: {self.sample_params})"] if self.sample_params is not None
                else [f"(output storage depends on parameters: {self.unknown})"] if self.unknown else [])
        return head + [r.line() for r in self.rows] + [
            "other input storage types: densified, dense kernel, cast back [fallback]" if self.fallback
            else "other input storage types: no kernel (error)"]


def _gradients(opdef: OpDef, inst: Any, ins: tuple[str, ...], outs: list[str]) -> str:
    """The storage type of each input's gradient from the op's declared backward, and its
    dispatch mode, assuming each output's gradient arrives in the output's storage type
    (what ``sparse_ops.explain`` reports under "backward")."""
    backward = backward_of(opdef)
    kept = range(len(opdef.arguments)) if opdef.backward_inputs is None else opdef.backward_inputs
    stypes = tuple(outs[:opdef.num_visible_outputs] + [ins[i] for i in kept]
                   + [outs[j] for j in opdef.backward_outputs])
    try:
        grads = list(backward_instance(backward, inst).infer_storage_type(*stypes))
    except Exception as exc:  # noqa: BLE001  (the backward's rule refusing these storage types)
        return f"(refused: {exc})"
    try:
        mode = choose_dispatch(backward, cpu(), stypes, grads)[0]
    except OperatorError:
        mode = "no cpu kernel"
    return ", ".join(f"{opdef.arguments[i]}: {st}" for i, st in zip(opdef.backward_grads, grads)) + f" ({mode})"


def storage_rules(opdef: OpDef) -> StorageRules:
    """One row per input-storage signature with a kernel (all-dense first): the output
    storage types the op's rule infers and the dispatch mode ``choose_dispatch`` picks for
    a cpu call. An op with required parameters is evaluated with its first sample's, or has
    unknown outputs."""
    rules = StorageRules(fallback=bool(opdef.fcompute))
    try:
        inst = opdef.instance({})
    except Exception as exc:  # noqa: BLE001  (a required parameter: the rule needs values)
        inst, make = None, getattr(opdef.cls, "samples", None)
        try:
            first = list(make())[0] if callable(make) else None
            params = first[1] if isinstance(first, tuple) else {}
            inst = opdef.instance(params) if first is not None else None
            rules.sample_params, rules.unknown = (params, None) if inst is not None else (None, str(exc))
        except Exception:  # noqa: BLE001  (samples that fail: the rules stay unknown)
            rules.unknown = str(exc)
    signatures = [("default",) * len(opdef.arguments)] + sorted({st for _, st in opdef.fcompute_ex})
    for st in dict.fromkeys(signatures):
        if "*" in st or "..." in st:
            rules.rows.append(StorageRow(st, "(depends on the inputs)", "fcompute_ex"))
        elif inst is None:
            rules.rows.append(StorageRow(st, "?", "fcompute_ex" if any(k[1] == st for k in opdef.fcompute_ex) else "?"))
        else:
            try:
                outs = list(inst.infer_storage_type(*st))
            except Exception as exc:  # noqa: BLE001  (a rule refusing these storage types)
                rules.rows.append(StorageRow(st, f"(refused: {exc})", None))
                continue
            try:
                mode = choose_dispatch(opdef, cpu(), tuple(st), outs)[0]
            except OperatorError:
                mode = "no cpu kernel"
            grads = _gradients(opdef, inst, st, outs) if opdef.backward_kernels else None
            rules.rows.append(StorageRow(st, ",".join(outs), mode, grads))
    return rules


@dataclass(frozen=True)
class SampleGradient:
    """The gradients of one sample call, differentiated natively."""

    inputs: tuple[str, ...]  # the sample's input storage types
    params: dict[str, Any]  # the sample's parameters
    grads: tuple[str, ...] | None  # each input's gradient storage type; None where it did not run
    note: str = ""  # why not, where it did not run


def sample_gradients(opdef: OpDef) -> list[SampleGradient]:
    """For each of the op's ``samples()`` (by convention one per storage signature with a
    kernel), the storage type of each input's gradient when a native call on it is
    differentiated (``autograd.grad`` of its visible outputs, heads of ones): for a gradient
    built from operators, what ``explain`` can only say once it runs. Empty for ops without
    samples, without gradients, or that update inputs in place."""
    import warnings

    from . import autograd

    make = getattr(opdef.cls, "samples", None)
    if not callable(make) or opdef.constant or not opdef.differentiable or opdef.mutate:
        return []
    out = []
    for sample in make():
        inputs, params = sample if isinstance(sample, tuple) else (sample, {})
        stypes = tuple(getattr(x, "stype", "default") for x in inputs)
        try:
            with warnings.catch_warnings():  # samples take fallbacks on purpose; values are not read
                warnings.simplefilter("ignore")
                for x in inputs:  # integer inputs too: their gradients' storage types are said
                    attach_gradient_buffer(x)
                with autograd.record():
                    res = opdef.function(*inputs, **params)
                heads = list(res) if isinstance(res, (list, tuple)) else [res]
                grads = autograd.grad(heads, list(inputs))
            out.append(SampleGradient(stypes, dict(params), tuple(g.stype for g in grads)))
        except Exception as exc:  # noqa: BLE001  (an input that takes no gradient, a refused call: said)
            note = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:160]}"
            out.append(SampleGradient(stypes, dict(params), None, note))
    return out
