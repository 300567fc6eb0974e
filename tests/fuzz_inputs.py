"""Hostile sparse inputs: valid csr / row_sparse components drawn with hypothesis, then
broken in every way a caller (or a file) can break them.

A plain module (no pytest inside): ``tests/test_fuzz.py`` imports it, and it is also the
program the op-level fuzz runs in child processes (``python tests/fuzz_inputs.py ...``),
so that a crash in a kernel kills a child, not pytest.

- ``valid_csr()`` / ``valid_row_sparse()``: hypothesis strategies of canonical components.
- ``CSR_KINDS`` / ``RSP_KINDS``: every broken invariant we know of, each a function of
  valid components returning the corrupted ones, or None where the input cannot carry
  that corruption (a duplicate needs a row with two stored values).
- ``corrupted(stype)``: a strategy of ``Case`` (valid components + one kind applied).
- ``op_calls(opdef, x)``: argument lists for any registered operator with the container
  ``x`` in each argument slot, built from the op's declared arguments and parameters.
- ``main()``: the child program: draws cases, builds each with ``check=False`` (as a buggy
  caller could) or corrupts a validated container through shared memory, calls every
  selected op on it and writes one JSON line per event to a progress file.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from hypothesis import strategies as st

INT32_MAX = 2**31 - 1
HUGE = (2**31, 2**31 + 7, 2**62, 2**63 - 1)

# What a refusal must say for each kind, as a regex over the error message.
RANGE = r"out of range|exceed|does not fit"
NOT_SUPPORTED = r"not supported|unsupported|supported:"


@dataclass
class Case:
    """One hostile input: ``parts`` = (data, indices, indptr) for csr, (data, indices) for
    row_sparse, claimed ``shape``, and ``expect``, a regex the refusal's message must match."""

    stype: str
    kind: str
    parts: tuple
    shape: Any
    expect: str
    valid: tuple = ()  # the components (and shape) before the corruption

    def describe(self) -> str:
        def show(a: Any) -> str:
            if isinstance(a, np.ndarray):
                body = np.array2string(a.ravel()[:12], threshold=12, max_line_width=200)
                return f"{a.dtype}{list(a.shape)}{body}"
            return repr(a)

        return f"{self.stype}/{self.kind} shape={self.shape!r} " + " ".join(map(show, self.parts))


# ---- valid inputs ------------------------------------------------------------------------------
@st.composite
def valid_csr(draw: Any, max_side: int = 7) -> tuple:
    """Canonical (data, indices, indptr, shape): any side may be 0, int32 or int64 indices."""
    rows, cols = draw(st.integers(0, max_side)), draw(st.integers(0, max_side))
    idx = np.dtype(draw(st.sampled_from(["int32", "int64"])))
    vdt = np.dtype(draw(st.sampled_from(["float32", "float64"])))
    density = draw(st.sampled_from([0.0, 0.3, 0.7, 1.0]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    mask = rng.random((rows, cols)) < density
    r, c = np.nonzero(mask)  # row-major: sorted within rows
    counts = np.bincount(r, minlength=rows)
    indptr = np.zeros(rows + 1, dtype=idx)
    np.cumsum(counts, out=indptr[1:])
    data = rng.integers(1, 9, size=r.shape[0]).astype(vdt)
    return data, c.astype(idx), indptr, (rows, cols)


@st.composite
def valid_row_sparse(draw: Any, max_side: int = 7) -> tuple:
    """Canonical (data, indices, shape) of a 2-d or 3-d row_sparse array."""
    ndim = draw(st.sampled_from([2, 2, 3]))
    shape = tuple(draw(st.integers(0, max_side)) for _ in range(ndim))
    idx = np.dtype(draw(st.sampled_from(["int32", "int64"])))
    vdt = np.dtype(draw(st.sampled_from(["float32", "float64"])))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    rows = np.flatnonzero(rng.random(shape[0]) < draw(st.sampled_from([0.0, 0.4, 1.0])))
    data = rng.integers(1, 9, size=(rows.shape[0], *shape[1:])).astype(vdt)
    return data, rows.astype(idx), shape


# ---- corruptions -------------------------------------------------------------------------------
def _pick(rng: np.random.Generator, n: int) -> int:
    return int(rng.integers(0, n))


def _with_value(a: np.ndarray, pos: int, value: int) -> np.ndarray:
    """``a`` with ``a[pos] = value``, widened to int64 (or uint64) when the value needs it."""
    if value > np.iinfo(np.int64).max:
        out = a.astype(np.uint64)
    elif a.dtype == np.int32 and not -2**31 <= value <= INT32_MAX:
        out = a.astype(np.int64)
    else:
        out = a.copy()
    out[pos] = value
    return out


def _row_with(indptr: np.ndarray, at_least: int) -> list[int]:
    counts = np.diff(indptr)
    return [int(r) for r in np.flatnonzero(counts >= at_least)]


# Each csr corruption: (data, indices, indptr, shape, rng) -> (data, indices, indptr, shape) or None.
Csr = tuple[np.ndarray, np.ndarray, np.ndarray, Any]


def _csr_index(value: Callable[[int, np.random.Generator], int]):
    def corrupt(d, i, p, s, rng):
        if i.shape[0] == 0:
            return None
        return d, _with_value(i, _pick(rng, i.shape[0]), value(s[1], rng)), p, s
    return corrupt


def _csr_swap(d, i, p, s, rng):
    rows = _row_with(p, 2)
    if not rows:
        return None
    r = rows[_pick(rng, len(rows))]
    i = i.copy()
    a = int(p[r])
    i[a], i[a + 1] = i[a + 1], i[a]
    return d, i, p, s


def _csr_duplicate(d, i, p, s, rng):
    rows = _row_with(p, 2)
    if not rows:
        return None
    r = rows[_pick(rng, len(rows))]
    i = i.copy()
    i[int(p[r]) + 1] = i[int(p[r])]
    return d, i, p, s


def _csr_indptr_down(d, i, p, s, rng):
    if s[0] < 2:
        return None
    r = 1 + _pick(rng, s[0] - 1)  # an interior entry: start and end stay right
    return d, i, _with_value(p, r, int(p[r + 1]) + 1 + _pick(rng, 3)), s


def _csr_indptr_huge(d, i, p, s, rng):
    if s[0] < 2:
        return None
    return d, i, _with_value(p, 1 + _pick(rng, s[0] - 1), HUGE[_pick(rng, len(HUGE))]), s


def _csr_indptr_negative(d, i, p, s, rng):
    if s[0] < 2:
        return None
    return d, i, _with_value(p, 1 + _pick(rng, s[0] - 1), -1 - _pick(rng, 5)), s


def _csr_indptr_end(delta: int):
    def corrupt(d, i, p, s, rng):
        if s[0] < 1 or int(p[-1]) + delta < 0:
            return None
        return d, i, _with_value(p, p.shape[0] - 1, int(p[-1]) + delta), s
    return corrupt


def _csr_indptr_start(d, i, p, s, rng):
    return d, i, _with_value(p, 0, 1 + _pick(rng, 3)), s


def _as(dtype: Any, nan: bool = False, which: str = "indices"):
    """The index array (or indptr) in another dtype (float, bool, object...), values kept."""
    def corrupt(d, i, p, s, rng):
        a = i if which == "indices" else p
        b = a.astype(dtype)
        if nan:
            if b.shape[0] == 0:
                return None
            b[_pick(rng, b.shape[0])] = np.nan
        return (d, b, p, s) if which == "indices" else (d, i, b, s)
    return corrupt


def _two_d(which: str):
    def corrupt(d, i, p, s, rng):
        if which == "indices":
            return d, i.reshape(1, -1), p, s
        if which == "indptr":
            return d, i, p.reshape(1, -1), s
        return d.reshape(1, -1), i, p, s
    return corrupt


def _shape(fn: Callable[[tuple], Any]):
    def corrupt(d, i, p, s, rng):
        new = fn(s)
        return None if new is None else (d, i, p, new)
    return corrupt


def _cols_too_small(d, i, p, s, rng):
    if i.shape[0] == 0:
        return None
    return d, i, p, (s[0], int(i.max()))


CSR_KINDS: dict[str, tuple[Callable, str]] = {
    # column indices
    "index_high": (_csr_index(lambda cols, rng: cols + _pick(rng, 10)), RANGE),
    "index_huge": (_csr_index(lambda cols, rng: HUGE[_pick(rng, len(HUGE))]), RANGE),
    "index_uint64_max": (_csr_index(lambda cols, rng: 2**64 - 1), RANGE),
    "index_negative": (_csr_index(lambda cols, rng: -1 - _pick(rng, 2**31 + 5)), RANGE),
    "index_unsorted": (_csr_swap, "unsorted"),
    "index_duplicate": (_csr_duplicate, "duplicate"),
    # row pointers
    "indptr_decreasing": (_csr_indptr_down, "non-decreasing"),
    "indptr_huge": (_csr_indptr_huge, "non-decreasing"),
    "indptr_negative": (_csr_indptr_negative, "non-decreasing"),
    "indptr_short": (lambda d, i, p, s, rng: (d, i, p[:-1], s), r"rows \+ 1"),
    "indptr_long": (lambda d, i, p, s, rng: (d, i, np.concatenate([p, p[-1:]]), s), r"rows \+ 1"),
    "indptr_empty": (lambda d, i, p, s, rng: (d, i, p[:0], s), r"rows \+ 1"),
    "indptr_start": (_csr_indptr_start, "start at 0"),
    "indptr_end_high": (_csr_indptr_end(+1), "end at nnz"),
    "indptr_end_low": (_csr_indptr_end(-1), "end at nnz"),
    # data
    "data_short": (lambda d, i, p, s, rng: None if d.shape[0] == 0 else (d[:-1], i, p, s), "same length"),
    "data_long": (lambda d, i, p, s, rng: (np.concatenate([d, np.ones(1, d.dtype)]), i, p, s), "same length"),
    "data_2d": (_two_d("data"), "1-d"),
    "data_object": (lambda d, i, p, s, rng: (d.astype(object), i, p, s), NOT_SUPPORTED),
    "data_bool": (lambda d, i, p, s, rng: (d != 0, i, p, s), NOT_SUPPORTED),
    "data_complex": (lambda d, i, p, s, rng: (d.astype(np.complex64), i, p, s), NOT_SUPPORTED),
    # index dtypes and ranks
    "indices_float": (_as(np.float64), "integer dtype"),
    "indices_nan": (_as(np.float64, nan=True), "integer dtype"),
    "indices_bool": (_as(bool), "integer dtype"),
    "indices_object": (_as(object), "integer dtype"),
    "indices_2d": (_two_d("indices"), "1-d"),
    "indptr_float": (_as(np.float32, which="indptr"), "integer dtype"),
    "indptr_nan": (_as(np.float64, nan=True, which="indptr"), "integer dtype"),
    "indptr_bool": (_as(bool, which="indptr"), "integer dtype"),
    "indptr_object": (_as(object, which="indptr"), "integer dtype"),
    "indptr_2d": (_two_d("indptr"), "1-d"),
    # shapes
    "shape_negative": (_shape(lambda s: (s[0], -1 - s[1])), "non-negative"),
    "shape_negative_rows": (_shape(lambda s: (-1 - s[0], s[1])), r"non-negative"),
    "shape_3d": (_shape(lambda s: (*s, 2)), "2-d"),
    "shape_1d": (_shape(lambda s: (s[0],)), "2-d"),
    "shape_float": (_shape(lambda s: (float(s[0]) + 0.5, s[1])), "integers"),
    "shape_str": (_shape(lambda s: "ab"), "integers"),
    "shape_huge": (_shape(lambda s: (s[0], 2**64 + s[1])), "does not fit"),
    "shape_rows_mismatch": (_shape(lambda s: (s[0] + 1, s[1])), r"rows \+ 1"),
    "shape_cols_too_small": (_cols_too_small, RANGE),
}


# Each row_sparse corruption: (data, indices, shape, rng) -> (data, indices, shape) or None.
def _rsp_index(value: Callable[[int, np.random.Generator], int]):
    def corrupt(d, i, s, rng):
        if i.shape[0] == 0:
            return None
        return d, _with_value(i, _pick(rng, i.shape[0]), value(s[0], rng)), s
    return corrupt


def _rsp_swap(d, i, s, rng):
    if i.shape[0] < 2:
        return None
    i = i.copy()
    p = _pick(rng, i.shape[0] - 1)
    i[p], i[p + 1] = i[p + 1], i[p]
    return d, i, s


def _rsp_duplicate(d, i, s, rng):
    if i.shape[0] < 2:
        return None
    i = i.copy()
    p = _pick(rng, i.shape[0] - 1)
    i[p + 1] = i[p]
    return d, i, s


def _rsp_as(dtype: Any, nan: bool = False):
    def corrupt(d, i, s, rng):
        b = i.astype(dtype)
        if nan:
            if b.shape[0] == 0:
                return None
            b[_pick(rng, b.shape[0])] = np.nan
        return d, b, s
    return corrupt


def _rsp_shape(fn: Callable[[tuple], Any]):
    def corrupt(d, i, s, rng):
        new = fn(s)
        return None if new is None else (d, i, new)
    return corrupt


RSP_KINDS: dict[str, tuple[Callable, str]] = {
    "index_high": (_rsp_index(lambda rows, rng: rows + _pick(rng, 10)), RANGE),
    "index_huge": (_rsp_index(lambda rows, rng: HUGE[_pick(rng, len(HUGE))]), RANGE),
    "index_uint64_max": (_rsp_index(lambda rows, rng: 2**64 - 1), RANGE),
    "index_negative": (_rsp_index(lambda rows, rng: -1 - _pick(rng, 2**31 + 5)), RANGE),
    "index_unsorted": (_rsp_swap, "unsorted"),
    "index_duplicate": (_rsp_duplicate, "duplicate"),
    "data_rows_short": (lambda d, i, s, rng: None if d.shape[0] == 0 else (d[:-1], i, s), "data must have shape"),
    "data_rows_long": (lambda d, i, s, rng: (np.concatenate([d, np.ones_like(d[:1]) if d.shape[0] else
                                                             np.ones((1, *d.shape[1:]), d.dtype)]), i, s),
                       "data must have shape"),
    "data_trailing": (lambda d, i, s, rng: (np.ones((d.shape[0], *[n + 1 for n in d.shape[1:]]), d.dtype), i, s),
                      "data must have shape"),
    "data_flat": (lambda d, i, s, rng: (d.reshape(-1), i, s), "data must have shape"),
    "data_object": (lambda d, i, s, rng: (d.astype(object), i, s), NOT_SUPPORTED),
    "data_bool": (lambda d, i, s, rng: (d != 0, i, s), NOT_SUPPORTED),
    "indices_float": (_rsp_as(np.float64), "integer dtype"),
    "indices_nan": (_rsp_as(np.float64, nan=True), "integer dtype"),
    "indices_bool": (_rsp_as(bool), "integer dtype"),
    "indices_object": (_rsp_as(object), "integer dtype"),
    "indices_2d": (lambda d, i, s, rng: (d, i.reshape(1, -1), s), "1-d"),
    "shape_negative": (_rsp_shape(lambda s: (-1 - s[0], *s[1:])), "non-negative"),
    "shape_negative_cols": (_rsp_shape(lambda s: (s[0], -1 - s[1], *s[2:])), "non-negative"),
    "shape_empty": (_rsp_shape(lambda s: ()), "at least one dimension"),
    "shape_float": (_rsp_shape(lambda s: (s[0] + 0.5, *s[1:])), "integers"),
    "shape_huge": (_rsp_shape(lambda s: (2**64 + s[0], *s[1:])), "does not fit"),
    "shape_trailing_mismatch": (_rsp_shape(lambda s: (s[0], s[1] + 1, *s[2:])), "data must have shape"),
    "shape_rows_too_small": (lambda d, i, s, rng: None if i.shape[0] == 0 else (d, i, (int(i.max()), *s[1:])),
                             RANGE),
}

# Kinds whose container still has numeric arrays of the usual ranks and a sane shape: the
# ones a kernel could actually be handed if nothing validated (used by the tamper fuzz).
MEMORY_KINDS = ("index_high", "index_huge", "index_negative", "index_unsorted", "index_duplicate",
                "indptr_decreasing", "indptr_negative", "indptr_end_high")


def corrupt(stype: str, valid: tuple, kind: str, seed: int) -> Case | None:
    """Apply corruption ``kind`` to valid components; None where it does not apply."""
    rng = np.random.default_rng(seed)
    if stype == "csr":
        fn, expect = CSR_KINDS[kind]
        out = fn(*valid, rng)
        return None if out is None else Case("csr", kind, tuple(out[:3]), out[3], expect, valid)
    fn, expect = RSP_KINDS[kind]
    out = fn(*valid, rng)
    return None if out is None else Case("row_sparse", kind, tuple(out[:2]), out[2], expect, valid)


@st.composite
def corrupted(draw: Any, stype: str, kinds: tuple[str, ...] | None = None) -> Case:
    """A valid csr (or row_sparse) input with one invariant broken."""
    table = CSR_KINDS if stype == "csr" else RSP_KINDS
    kinds = tuple(table) if kinds is None else tuple(k for k in kinds if k in table)
    kind = draw(st.sampled_from(kinds))
    seed = draw(st.integers(0, 2**32 - 1))
    for _ in range(20):  # most kinds apply to most inputs; retry the input when one does not
        valid = draw(valid_csr() if stype == "csr" else valid_row_sparse())
        case = corrupt(stype, valid, kind, seed)
        if case is not None:
            return case
    from hypothesis import reject

    reject()


def build_unchecked(case: Case) -> Any:
    """The container a buggy caller gets with ``check=False`` (may raise at once)."""
    import sparse_ops as so

    if case.stype == "csr":
        data, indices, indptr = case.parts
        return so.CSRNDArray(data, indices, indptr, case.shape, check=False)
    data, indices = case.parts
    return so.RowSparseNDArray(data, indices, case.shape, check=False)


def build_tampered(case: Case) -> Any:
    """A container validated at construction (zero-copy from the valid components) whose
    index arrays the caller then corrupts in place through the arrays it still holds; None
    when the corruption changes a length, a dtype or the shape (not possible in place)."""
    import sparse_ops as so

    if case.kind not in MEMORY_KINDS:
        return None
    valid = [np.array(a, copy=True) for a in case.valid[:-1]]
    shape = case.valid[-1]
    pairs = list(zip(valid, case.parts))
    if any(v.shape != b.shape or v.dtype != b.dtype for v, b in pairs):
        return None
    if case.stype == "csr":
        x = so.csr_matrix(tuple(valid), shape=shape)
        shared = (x._data, x._indices, x._indptr)
    else:
        x = so.row_sparse_array(tuple(valid), shape=shape)
        shared = (x._data, x._indices)
    if any(a is not v for a, v in zip(shared, valid)):
        return None  # not zero-copy (cannot happen for these dtypes): nothing to tamper with
    for v, bad in pairs:
        v[...] = bad
    return x


# ---- calling every operator ---------------------------------------------------------------------
def _dense(shape: tuple, dtype: Any, seed: int = 0, positive: bool = False) -> Any:
    import sparse_ops as so

    rng = np.random.default_rng(seed)
    values = rng.integers(1, 5, size=shape) if positive else rng.integers(-3, 4, size=shape)
    return so.array(values.astype(dtype))


def _ints(n: int, high: int) -> Any:
    import sparse_ops as so

    return so.array(np.arange(n) % max(high, 1), dtype="int64")


def _param_defaults(name: str, m: int, n: int) -> dict[str, Any]:
    """Values for required parameters, by name: what a plausible caller would pass."""
    return {
        "lr": 0.1, "scalar": 2.0, "a_min": -1.0, "a_max": 1.0, "num_hidden": 2, "kernel": (1,), "num_filter": 1,
        "input_dim": max(m, 1), "output_dim": n, "stype": "default", "shape": (m, n),
        "axis": 0, "begin": (0, 0), "end": (max(m, 1), n), "num_outputs": 1,
        "dtype": "float16", "reps": (1, 2), "repeats": 2, "size": max(n, 1),  # cast's dtype: the float16 test maps it to float32
        "t": 1,  # an optimizer's update count
        "eta": 1.0,  # AdamW's schedule multiplier
        "range_max": max(n, 1),  # the Zipfian sampler's classes
    }


def _ncw(so: Any, x: Any, m: int, n: int) -> Any:
    """A dense (m, n) x as one NCW example (1, m, n); a sparse x unchanged."""
    return so.reshape(x, shape=(1, m, n)) if x.stype == "default" else x


def op_calls(opdef: Any, x: Any, m: int, n: int, dtype: Any = np.float32) -> list[tuple[tuple, dict]]:
    """(inputs, params) lists calling ``opdef`` with container ``x`` (claimed shape (m, n))
    in every argument slot, companions dense of ``dtype`` and shaped to fit; [] for ops
    without inputs."""
    import sparse_ops as so

    name = opdef.name
    dt = dtype
    conv = {"kernel": (1,), "num_filter": 1, "no_bias": True}
    D = lambda *shape: _dense(shape, dt)  # noqa: E731
    P = lambda *shape: _dense(shape, dt, positive=True)  # noqa: E731
    special: dict[str, Callable[[], list]] = {
        "lamb_update_phase2": lambda: [((x, D(m, n), P(1), P(1)), {"lr": 0.1}),
                                       ((D(m, n), x, P(1), P(1)), {"lr": 0.1})],
        "dot": lambda: [((x, D(n, 2)), {}), ((D(2, m), x), {}), ((x, D(m, 2)), {"transpose_a": True}),
                        ((D(2, n), x), {"transpose_b": True}), ((x, x), {"transpose_a": True})],
        "FullyConnected": lambda: [((x, D(2, n), D(2)), {"num_hidden": 2}),
                                   ((D(2, n), x, D(m)), {"num_hidden": max(m, 1)}),
                                   ((D(2, n), x), {"num_hidden": max(m, 1), "no_bias": True})],
        "Embedding": lambda: [((_ints(4, m), x), {"input_dim": m, "output_dim": n, "dtype": np.dtype(dt).name}),
                              ((_ints(4, m), x), {"input_dim": m, "output_dim": n, "dtype": np.dtype(dt).name,
                                                  "sparse_grad": True})],
        "_embedding_backward": lambda: [((_ints(m, 4), x), {"input_dim": 4, "sparse_grad": True})],
        "retain": lambda: [((x, _ints(2, m)), {})],
        # convolutions take 3-d NCW arrays: a dense x as one example of m channels and width n; a
        # sparse x (2-d: refused by shape inference, after its components are checked) as it is
        # ftrl's n is a sum of squares: never negative
        "ftrl_update": lambda: [((x, D(m, n), D(m, n), P(m, n)), {"lr": 0.1}),
                                ((D(m, n), x, D(m, n), P(m, n)), {"lr": 0.1}),
                                ((D(m, n), D(m, n), x, P(m, n)), {"lr": 0.1}),
                                ((D(m, n), D(m, n), D(m, n), x), {"lr": 0.1})],
        "Convolution": lambda: [((_ncw(so, x, m, n), D(1, m, 1)), conv)],
        "_convolution_backward_data": lambda: [((D(1, 1, n), _ncw(so, x, m, n), D(1, m, 1)), conv)],
        "_convolution_backward_weight": lambda: [((D(1, 1, n), _ncw(so, x, m, n), D(1, m, 1)), conv)],
        "take": lambda: [((x, _ints(3, m)), {}), ((D(m, n), x), {})],
        "_backward_take": lambda: [((x, _ints(m, 3)), {"shape": (3, n)})],
        "where": lambda: [((x, D(m, n), D(m, n)), {}), ((D(m, n), x, D(m, n)), {}),
                          ((D(m, n), D(m, n), x), {})],
        "add_n": lambda: [((x, x), {}), ((x, D(m, n)), {})],
        "concat": lambda: [((x, x), {"dim": 0}), ((x, x), {"dim": 1})],
        "cast_storage": lambda: [((x,), {"stype": s}) for s in ("default", "csr", "row_sparse")],
        "sum": lambda: [((x,), {"axis": a}) for a in (None, 0, 1)],
        "mean": lambda: [((x,), {"axis": a}) for a in (None, 0, 1)],
        "norm": lambda: [((x,), {"axis": a}) for a in (None, 0, 1)],
        "square_sum": lambda: [((x,), {"axis": a}) for a in (None, 0, 1)],
        "slice": lambda: [((x,), {"begin": (0, 0), "end": (max(m, 1), n)})],
        "slice_axis": lambda: [((x,), {"axis": 0, "begin": 0, "end": max(m, 1)})],
        "_backward_slice": lambda: [((x,), {"begin": (0, 0), "end": (m, n), "shape": (m, n)})],
        "_broadcast_reduced": lambda: [((x,), {"shape": (m, n, 2), "axis": (2,)}),
                                       ((x,), {"shape": (2, m, n), "axis": (0,)})],
        "split": lambda: [((x,), {"num_outputs": 1, "axis": 1})],
        "_split_v2": lambda: [((x,), {"sections": 1, "axis": 1}), ((x,), {"indices": (0, 1), "axis": 1})],
        "pad": lambda: [((x,), {"pad_width": (1, 0, 0, 2)}), ((x,), {"pad_width": (1, 0, 0, 2), "mode": "edge"})],
        "_backward_pad": lambda: [((x,), {"pad_width": (1, 0, 0, 1)}),
                                  ((x,), {"pad_width": (1, 0, 0, 1), "mode": "edge"})],
        "reshape": lambda: [((x,), {"shape": (n, m)})],
        "transpose": lambda: [((x,), {})],
        "expand_dims": lambda: [((x,), {"axis": 0})],
        "sgd_mom_update": lambda: [((D(m, n), x, D(m, n)), {"lr": 0.1, "momentum": 0.9}),
                                   ((x, D(m, n), D(m, n)), {"lr": 0.1})],
        # optimizer states that are sums of squares get positive values (history, var)
        "adagrad_update": lambda: [((D(m, n), x, P(m, n)), {"lr": 0.1}), ((x, D(m, n), P(m, n)), {"lr": 0.1}),
                                   ((D(m, n), D(m, n), x), {"lr": 0.1})],
        "lazy_adagrad": lambda: [((D(m, n), x, P(m, n)), {"lr": 0.1}), ((x, D(m, n), P(m, n)), {"lr": 0.1}),
                                 ((D(m, n), D(m, n), x), {"lr": 0.1})],
        "adam_update": lambda: [((D(m, n), x, D(m, n), P(m, n)), {"lr": 0.1}),
                                ((x, D(m, n), D(m, n), P(m, n)), {"lr": 0.1}),
                                ((D(m, n), D(m, n), x, P(m, n)), {"lr": 0.1}),
                                ((D(m, n), D(m, n), D(m, n), x), {"lr": 0.1})],
        "lazy_adam": lambda: [((D(m, n), x, D(m, n), P(m, n)), {"lr": 0.1}),
                              ((x, D(m, n), D(m, n), P(m, n)), {"lr": 0.1}),
                              ((D(m, n), D(m, n), x, P(m, n)), {"lr": 0.1}),
                              ((D(m, n), D(m, n), D(m, n), x), {"lr": 0.1})],
        "csr_spmm": lambda: [((x, D(n, 2)), {}), ((x, D(n, 2)), {"sparse_grad": True})],
        "csr_spmm_t": lambda: [((x, D(m, 2)), {})],
        "csr_sddmm": lambda: [((x, D(m, 2), D(n, 2)), {})],
        "csr_sample": lambda: [((x, D(m, n)), {}), ((x, x), {})],
        "_csr_row_softmax_backward": lambda: [((x, D(m, n)), {}), ((x, x), {})],
        "embedding_bag": lambda: [((x, D(n, 2)), {"mode": mode}) for mode in ("sum", "mean")],
        "_embedding_bag_backward": lambda: [((x, D(m, 2)), {})],
        "fm_interaction": lambda: [((x, D(n, 2)), {})],
        "_fm_interaction_backward": lambda: [((x, D(n, 2), D(m)), {})],
        "gcn_norm": lambda: [((x,), {}), ((x,), {"add_self_loops": False})],
        # an output dtype parameter follows the inputs' (the float16 test maps "dtype" to float32)
        "argsort": lambda: [((x,), {"dtype": np.dtype(dt).name})],
        "one_hot": lambda: [((x,), {"depth": 3, "dtype": np.dtype(dt).name})],
        "topk": lambda: [((x,), {"dtype": np.dtype(dt).name}), ((x,), {"ret_typ": "value", "k": 2})],
        "pick": lambda: [((x, D(m)), {}), ((D(m, n), x), {"axis": 0, "keepdims": True})],
    }
    if name in special:
        return special[name]()
    if not opdef.arguments or (opdef.name.startswith("_random")):
        return []
    defaults = _param_defaults(name, m, n)
    params = {p: defaults[p] for p, spec in opdef.params.items() if spec.required and p in defaults}
    nargs = len(opdef.arguments)
    calls = []
    for slot in range(nargs):
        inputs = tuple(x if k == slot else D(m, n) for k in range(nargs))
        calls.append((inputs, params))
    return calls


# ---- the child program -------------------------------------------------------------------------
def _classify(exc: BaseException | None, case: Case, *, named_by_message: bool = True) -> str:
    if exc is None:
        return "accepted"
    if not isinstance(exc, (ValueError, TypeError, RuntimeError, IndexError, MemoryError, OverflowError)):
        return "other_exception"
    msg = str(exc)
    if re.search(case.expect, msg):
        return "named"
    return "unnamed"


def _select_ops(which: str) -> list:
    from sparse_ops.registry import all_ops

    ops = sorted(all_ops(), key=lambda d: d.name)
    if which == "builtin":
        return [d for d in ops if d.plugin is None]
    if which == "plugins":
        return [d for d in ops if d.plugin is not None]
    return ops


def _collect_cases(stype: str, n: int, seed: int, kinds: tuple[str, ...] | None) -> list[Case]:
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed

    cases: list[Case] = []

    @hseed(seed)
    @settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(corrupted(stype, kinds))
    def collect(case: Case) -> None:
        cases.append(case)

    collect()
    return cases


def main(argv: list[str] | None = None) -> None:
    """Child: run a batch of hostile inputs through the selected ops.

    Everything goes to ``--progress``, one JSON line per event, flushed: ``{"call": step,
    ...}`` before each op call, ``{"verdict": ...}`` after it, ``{"input": i}`` per input.
    A child killed by a signal or a timeout loses nothing; the parent names the input that
    killed it (the last call without a verdict) and restarts after it (``--start``).
    """
    ap = argparse.ArgumentParser()
    ap.add_argument("--stype", choices=("csr", "row_sparse"), required=True)
    ap.add_argument("--ops", choices=("builtin", "plugins", "all"), default="builtin")
    ap.add_argument("--mode", choices=("unchecked", "tampered"), default="unchecked")
    ap.add_argument("--examples", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--progress", required=True)
    ap.add_argument("--memory-limit-gb", type=float, default=6.0)
    args = ap.parse_args(argv)
    try:  # a corrupted size must end in MemoryError here, not in the machine's OOM killer
        import resource

        limit = int(args.memory_limit_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError):
        pass

    import warnings

    import sparse_ops as so

    warnings.simplefilter("ignore")
    kinds = MEMORY_KINDS if args.mode == "tampered" else None
    cases = _collect_cases(args.stype, args.examples, args.seed, kinds)
    ops = _select_ops(args.ops)
    build = build_unchecked if args.mode == "unchecked" else build_tampered
    with open(args.progress, "a", buffering=1) as progress:
        def emit(**event: Any) -> None:
            progress.write(json.dumps(event) + "\n")

        emit(ops=[d.name for d in ops if d.arguments and not d.name.startswith("_random")])

        for ci, case in enumerate(cases):
            if (ci + 1) * len(ops) <= args.start:
                continue
            emit(input=ci, kind=case.kind)
            for oi, opdef in enumerate(ops):
                step = ci * len(ops) + oi + 1  # stable numbering, so a restart can skip to it
                if step <= args.start:
                    continue
                try:
                    x = build(case)
                except Exception as exc:  # noqa: BLE001 - the constructor refused at once
                    verdict = _classify(exc, case)
                    emit(built=ci, verdict=verdict, detail=f"{type(exc).__name__}: {str(exc)[:300]}",
                         case=case.describe())
                    break
                if x is None:  # the tamper mode cannot express this corruption in place
                    emit(skipped=ci)
                    break
                shape = case.shape
                m, n = ((shape[0], shape[1]) if isinstance(shape, tuple) and len(shape) >= 2
                        and all(isinstance(d, int) and 0 <= d < 64 for d in shape[:2]) else (3, 4))
                for inputs, params in op_calls(opdef, x, m, n):
                    emit(call=step, op=opdef.name, params=repr(params), case=case.describe())
                    exc = None
                    try:
                        so.invoke(opdef, inputs, params)
                    except Exception as e:  # noqa: BLE001 - every exception is classified
                        exc = e
                    emit(verdict=_classify(exc, case), op=opdef.name,
                         detail="returned normally" if exc is None else f"{type(exc).__name__}: {str(exc)[:300]}")
    print("done")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
