"""Capacity rules: how many stored entries a sparse output of an op can hold at most.

Frameworks that preallocate their buffers (``jax.jit``: XLA's buffers have static sizes)
must reserve room for a sparse output before the kernel runs. Without help they could only
reserve its dense size, rows x columns for csr, which for a 100k x 100k matrix is 10**10
values. An op therefore declares, beside its ``infer_shape`` / ``infer_type`` /
``infer_storage_type`` rules, an upper bound of each sparse output's stored entries as a
pure function of its inputs' shapes, storage types and stored counts::

    from sparse_ops.sdk import capacity as cap

    class Square(Op):
        capacity = cap.same_as("data")                 # the output has data's structure

    class Add(Op):
        capacity = cap.sum_of("lhs", "rhs")            # a union of the two structures

    class Mul(Op):
        capacity = cap.min_of("lhs", "rhs")            # an intersection

    class TopK(Op):                                    # k values per row at most
        capacity = cap.computed(lambda op, out, x: out.rows * op.k, "rows x k")

The unit is the output's: **stored values** for a csr output, **stored rows** for a
row_sparse one. An input's stored count is what the caller holds (a JAX input's static
``nse``, padding included, so a bound from it is an upper bound too); a dense input counts
as fully stored. Where an input of another storage type feeds a helper, its count is
converted to the output's unit (``Stored.bound_in``): a row_sparse input's stored rows
times its row size count as values, a csr input's stored values as at most that many rows.
Every bound is capped by the output's dense size, so a rule need not cap it.

``capacity`` on an ``Op`` class is one ``Rule`` (for every sparse output and every input
the op updates in place) or a dict naming them (``{"output": ..., "mean": ...}``); ``None``
(the default) declares no rule, and the JAX bridge then asks the caller for ``max_nnz=``.
Rules run at trace time on static facts only: no array is read.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any, Callable, Collection, Mapping, Sequence

import numpy as np

# An op instance (a ``sparse_ops.Op``): not imported, since the registry imports this module.
Op = Any

SPARSE = ("csr", "row_sparse")


# ---- what a rule knows of an array ------------------------------------------------------------------
@dataclass(frozen=True)
class Stored:
    """What a capacity rule knows of one array: its shape, storage type, stored count and
    dtype. ``nnz`` is the stored values of a csr array, the stored rows of a row_sparse one,
    and None for a dense array (and for the output a rule bounds)."""

    shape: tuple[int, ...]
    stype: str = "default"
    nnz: int | None = None
    dtype: np.dtype | None = None

    @property
    def rows(self) -> int:
        """The length of the first axis (1 for a 0-d array)."""
        return int(self.shape[0]) if self.shape else 1

    @property
    def cols(self) -> int:
        """The length of the second axis (1 for fewer than two axes)."""
        return int(self.shape[1]) if len(self.shape) > 1 else 1

    @property
    def size(self) -> int:
        """The number of elements (exact, however large)."""
        return math.prod(int(d) for d in self.shape)

    @property
    def row_size(self) -> int:
        """The elements in one row (the product of the axes after the first)."""
        return math.prod(int(d) for d in self.shape[1:])

    def dense_count(self) -> int:
        """The stored count of this array were every entry stored, in its own unit: rows x
        columns for csr, rows for row_sparse, elements for dense."""
        if self.stype == "row_sparse":
            return self.rows
        return self.size

    def bound_in(self, stype: str) -> int:
        """An upper bound of this array's non-zero entries counted the way a ``stype``
        output counts its stored entries: values for csr (and dense), rows for row_sparse.
        A dense array counts as fully stored."""
        if stype == "row_sparse":
            if self.stype == "row_sparse":
                return int(self.nnz)
            if self.stype == "csr":
                return min(self.rows, int(self.nnz))
            return self.rows
        if self.stype == "csr":
            return int(self.nnz)
        if self.stype == "row_sparse":
            return int(self.nnz) * self.row_size
        return self.size

    def columns_bound(self) -> int:
        """An upper bound of the columns holding a non-zero: at most the columns, and at
        most the stored values."""
        return min(self.cols, self.bound_in("csr"))


# ---- rules ----------------------------------------------------------------------------------------------
class Rule:
    """One capacity rule: ``fn(op, out, *inputs) -> int`` (``op`` the op instance, holding
    its parameters; ``out`` the ``Stored`` facts of the output bounded, ``nnz`` None;
    ``inputs`` one ``Stored`` per input) and ``text``, how ``explain`` describes it
    (``"nnz(data)"``). ``names`` are the inputs the rule names (checked against the op's
    arguments when the op is registered)."""

    __slots__ = ("fn", "text", "names")

    def __init__(self, fn: Callable[..., int], text: str, names: Sequence[str] = ()) -> None:
        if not callable(fn):
            raise TypeError(f"a capacity rule's function must be callable, got {fn!r}")
        if not isinstance(text, str) or not text:
            raise TypeError("a capacity rule needs a description (what explain shows, e.g. 'nnz(data)')")
        self.fn, self.text, self.names = fn, text, tuple(names)

    def bound(self, op: Op, out: Stored, inputs: Sequence[Stored]) -> int:
        """The rule's bound for ``out`` from ``inputs``, capped by ``out``'s dense size. A
        rule answering anything but a non-negative int is a ValueError naming the rule."""
        value = self.fn(op, out, *inputs)
        try:
            value = operator.index(value)
        except TypeError:
            raise ValueError(f"capacity rule {self.text!r} returned {value!r}, not an int") from None
        if value < 0:
            raise ValueError(f"capacity rule {self.text!r} returned {value}, a negative count")
        return min(value, out.dense_count())

    def __repr__(self) -> str:
        return f"<capacity rule {self.text}>"


def _named(op: Op, inputs: Sequence[Stored], names: Sequence[str]) -> list[Stored]:
    """The inputs called ``names`` (every input when ``names`` is empty)."""
    if not names:
        return list(inputs)
    args = op._opdef.arguments
    return [inputs[args.index(n)] for n in names]


def same_as(name: str) -> Rule:
    """The output stores at most what input ``name`` stores: it has ``name``'s structure
    (an elementwise function of it, a transpose) or a part of it (a slice, a row softmax,
    the values read at its positions). Described as ``nnz(<name>)``."""
    return Rule(lambda op, out, *ins: _named(op, ins, (name,))[0].bound_in(out.stype), f"nnz({name})", (name,))


def sum_of(*names: str) -> Rule:
    """The output stores at most the sum of what the inputs ``names`` store (a union of
    their structures: an elementwise sum, a concatenation, an optimizer's weight and states
    taking the gradient's rows). No names: every input (variadic ops)."""
    text = " + ".join(f"nnz({n})" for n in names) if names else "sum of nnz over the inputs"
    return Rule(lambda op, out, *ins: sum(x.bound_in(out.stype) for x in _named(op, ins, names)), text, names)


def min_of(*names: str) -> Rule:
    """The output stores at most what the smallest of the inputs ``names`` stores (an
    intersection of their structures: an elementwise product). A dense input counts as
    fully stored, so a sparse one decides."""
    if not names:
        raise ValueError("min_of names at least one input")
    text = f"min({', '.join(f'nnz({n})' for n in names)})" if len(names) > 1 else f"nnz({names[0]})"
    return Rule(lambda op, out, *ins: min(x.bound_in(out.stype) for x in _named(op, ins, names)), text, names)


def columns_of(name: str) -> Rule:
    """A row_sparse output whose stored rows are the columns input ``name`` stores (A.T @ G
    for csr A, an embedding's or a feature matrix's weight gradient): at most ``name``'s
    columns and at most its stored values. Described as ``min(columns(<name>), nnz(<name>))``."""
    return Rule(lambda op, out, *ins: _named(op, ins, (name,))[0].columns_bound(),
                f"min(columns({name}), nnz({name}))", (name,))


def computed(fn: Callable[..., int], text: str, names: Sequence[str] = ()) -> Rule:
    """Any bound: ``fn(op, out, *inputs)`` returns an int from the op's parameters (``op.k``),
    the output's facts (``out.rows``, ``out.cols``, ``out.dtype``) and the inputs' (``x.nnz``,
    ``x.shape``, ``x.stype``, ``x.bound_in(out.stype)``); ``text`` says what it computes
    (``"rows x k"``). A pure function: explain and the JAX bridge call it at trace time."""
    return Rule(fn, text, names)


DENSE = Rule(lambda op, out, *ins: out.dense_count(), "dense size")
"""The output's dense size: a declared rule for outputs no input bounds (a dense array cast
to csr), so that the choice is explicit rather than a silent default."""

NONE_STORED = Rule(lambda op, out, *ins: 0, "0 (nothing stored)")
"""No stored entry at all (``zeros_like`` of a sparse array)."""


# ---- the declaration on an Op class --------------------------------------------------------------------
def declared(name: str, cls: type, params: Collection[str] = ()) -> dict[str, Rule]:
    """The capacity rules op class ``cls`` (registered as ``name``, with parameters named
    ``params``) declares, checked: a dict from output or updated-input name to its ``Rule``
    (``"*"``: every one); empty when the class declares none. A ValueError or TypeError
    names the op and the fault (a parameter called ``capacity``, a key that names no output
    or updated input, a rule naming an input the op does not have)."""
    if "capacity" in params:
        raise ValueError(f"{name}: a parameter named 'capacity' would hide the op's capacity rule")
    value = getattr(cls, "capacity", None)
    if value is None:
        return {}
    if isinstance(value, Rule):
        rules = {"*": value}
    elif isinstance(value, Mapping):
        slots = tuple(cls.outputs) + tuple(cls.mutate)
        rules = {}
        for key, rule in value.items():
            if key not in slots:
                raise ValueError(f"{name}: capacity names {key!r}, which is neither an output nor an input "
                                 f"it updates in place ({', '.join(slots)})")
            rules[key] = rule
    else:
        raise TypeError(f"{name}: capacity is a capacity rule (sparse_ops.sdk.capacity.same_as(...), ...) or a "
                        f"dict of them by output name, got {value!r}")
    for key, rule in rules.items():
        if not isinstance(rule, Rule):
            raise TypeError(f"{name}: capacity of {key!r} must be a capacity rule (sparse_ops.sdk.capacity), "
                            f"got {rule!r}")
        if cls.variadic and rule.names:
            raise ValueError(f"{name}: a variadic op's capacity rule cannot name inputs ({', '.join(rule.names)}); "
                             "use sum_of() for every input or computed(...)")
        for n in rule.names:
            if n not in cls.arguments:
                raise ValueError(f"{name}: capacity rule {rule.text!r} names input {n!r}, which is not an "
                                 f"argument ({', '.join(cls.arguments)})")
    return rules


def rule_for(rules: Mapping[str, Rule], slot: str) -> Rule | None:
    """The rule of the output or updated input called ``slot`` (the op's single rule where
    it declared one for all); None when there is none."""
    rule = rules.get(slot)
    return rule if rule is not None else rules.get("*")


@dataclass(frozen=True)
class Capacity:
    """The capacity decided for one sparse result, and where it came from (what ``explain``
    shows): ``"nnz(data)"`` (the op's rule), ``"max_nnz="`` (the caller's), or ``"dense
    size"``."""

    value: int
    source: str


def bounded(op: Op, slot: str, out: Stored, inputs: Sequence[Stored]) -> Capacity | None:
    """The capacity op instance ``op`` declares for its sparse result ``slot`` (an output's
    or an updated input's name) of facts ``out`` on ``inputs``; None when it declares no
    rule for it. Errors of the rule are ValueErrors naming the op and the rule."""
    rule = rule_for(op._opdef.capacity, slot)
    if rule is None:
        return None
    try:
        return Capacity(rule.bound(op, out, inputs), rule.text)
    except (TypeError, ValueError, IndexError, ArithmeticError) as exc:
        raise ValueError(f"{op._opdef.label}: capacity rule {rule.text!r} of {slot!r} failed: {exc}") from None


def slot_names(op: Op, n_outputs: int) -> list[str]:
    """The names rules are declared under, for ``n_outputs`` outputs then the inputs the op
    updates in place: the declared output names (``output<i>`` past them, for ops whose
    parameters add outputs), then the ``mutate`` names."""
    names = list(op.output_names())[:n_outputs]
    names += [f"output{i}" for i in range(len(names), n_outputs)]
    return names + list(op._opdef.mutate)


def facts_of(x: object) -> Stored:
    """The ``Stored`` facts of a container (anything with ``shape``, ``stype`` and ``dtype``;
    a sparse one's stored count is the length of its ``indices``: values for csr, rows for
    row_sparse)."""
    stype = getattr(x, "stype", "default")
    nnz = None if stype == "default" else int(x.indices.shape[0])
    return Stored(tuple(int(d) for d in x.shape), stype, nnz, np.dtype(x.dtype))


def report(op: Op, outs: Sequence[Stored], inputs: Sequence[Stored]) -> tuple[list[int | None], list[str | None]]:
    """For ``explain``: per output (facts ``outs``), the capacity the op's rule gives on
    ``inputs`` (None for a dense output or where there is none) and where it came from (the
    rule's text, ``NO_RULE`` where the op declares none, ``"rule failed: ..."``; None for a
    dense output)."""
    values: list[int | None] = []
    sources: list[str | None] = []
    for slot, out in zip(slot_names(op, len(outs)), outs):
        if out.stype not in SPARSE:
            values.append(None)
            sources.append(None)
            continue
        try:
            c = bounded(op, slot, out, inputs)
        except ValueError as exc:
            values.append(None)
            sources.append(f"rule failed: {exc}")
            continue
        values.append(c.value if c is not None else None)
        sources.append(c.source if c is not None else NO_RULE)
    return values, sources


def describe(rules: Mapping[str, Rule], slots: Sequence[str]) -> dict[str, str]:
    """For ``explain`` and ``sparse-ops info``: each slot's rule text, or ``"none: pass
    max_nnz="`` where the op declares none."""
    out = {}
    for s in slots:
        rule = rule_for(rules, s)
        out[s] = rule.text if rule is not None else NO_RULE
    return out


NO_RULE = "none: pass max_nnz="


__all__ = ["Stored", "Rule", "Capacity", "same_as", "sum_of", "min_of", "columns_of", "computed", "DENSE",
           "NONE_STORED", "declared", "rule_for", "bounded", "slot_names", "facts_of", "report", "describe",
           "NO_RULE"]
