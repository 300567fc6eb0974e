"""The one boundary (sparse_ops/boundary.py): every face admits outside memory through it,
so each malformed structure and unheld dtype is refused the same way wherever it enters,
and the compiled check of the JAX native handler takes and refuses what the containers do."""
from __future__ import annotations

import re

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sparse_ops as so
from sparse_ops import boundary, validation
from sparse_ops.dtypes import not_held
from sparse_ops.errors import SparseFormatError

CPU = so.cpu()


def _csr(seed: int = 0):
    rng = np.random.default_rng(seed)
    dense = rng.standard_normal((5, 6)) * (rng.random((5, 6)) < 0.5)
    dense[2, :3] = 1.0  # a row of several values
    m = so.array(dense).tostype("csr")
    return [np.array(m.data), np.array(m.indices), np.array(m.indptr)], m.shape


# structures broken in each way validation.py names, with the words its message uses
def _broken():
    (data, indices, indptr), shape = _csr()
    row = 2
    lo = int(indptr[row])
    cases = {}
    i = indices.copy(); i[lo] = -3; cases["out of range"] = (data, i, indptr)
    i = indices.copy(); i[lo] = 1 << 40; cases["out of range "] = (data, i, indptr)
    i = indices.copy(); i[lo], i[lo + 1] = i[lo + 1], i[lo]; cases["unsorted"] = (data, i, indptr)
    i = indices.copy(); i[lo + 1] = i[lo]; cases["duplicate"] = (data, i, indptr)
    p = indptr.copy(); p[1] = p[-1] + 1000; cases["non-decreasing"] = (data, indices, p)
    p = indptr.copy(); p[0] = 1; cases["start at 0"] = (data, indices, p)
    return cases, shape


@pytest.mark.parametrize("check", [boundary.FULL, boundary.DEFERRED])
def test_admit_refuses_every_broken_invariant_now_or_at_first_use(check):
    cases, shape = _broken()
    for words, parts in cases.items():
        if check == boundary.FULL or words == "start at 0":  # an O(1) invariant: refused at once either way
            with pytest.raises(SparseFormatError, match=words.strip()):
                boundary.admit("csr", parts, shape, CPU, check)
            continue
        x = boundary.admit("csr", parts, shape, CPU, check)  # O(1) now: the rest on first use
        with pytest.raises(SparseFormatError, match=words.strip()):
            so.dot(x, so.ones((6, 2)))


def test_admit_refuses_unheld_dtypes_with_the_shared_wording():
    (data, indices, indptr), shape = _csr()
    with pytest.raises(TypeError, match="^" + re.escape(not_held(np.dtype('uint8')))):
        boundary.admit("csr", [data.astype(np.uint8), indices, indptr], shape, CPU)
    with pytest.raises(TypeError, match="^" + re.escape(not_held(np.dtype('int16'), 'index'))):
        boundary.admit("csr", [data, indices.astype(np.int16), indptr], shape, CPU)
    with pytest.raises(TypeError, match="^" + re.escape(not_held(np.dtype('complex64')))):
        boundary.admit("default", [np.zeros(3, np.complex64)], (3,), CPU)
    # the constructors word it the same way
    with pytest.raises(TypeError, match="^" + re.escape(not_held(np.dtype('complex64')))):
        so.array([1, 2], dtype=np.complex64)


def test_the_compiled_check_agrees_with_the_containers_check_on_broken_structures():
    """``validation.csr_violation`` is one body: run on NumPy arrays (the containers'
    check) and compiled by numba (the JAX native handler's), the same code for each case."""
    compiled = numba.njit(validation.csr_violation)
    cases, shape = _broken()
    (data, indices, indptr), _ = _csr()
    cases["valid"] = (data, indices, indptr)
    for words, (d, i, p) in cases.items():
        if words == "start at 0":
            continue  # an O(1) invariant, checked before csr_violation on both paths
        assert compiled(i, p, shape[1], True) == validation.csr_violation(i, p, shape[1], True), words
        assert (validation.csr_violation(i, p, shape[1], True) == validation.OK) == (words == "valid")


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_the_compiled_check_agrees_with_the_containers_check_on_random_corruptions(data):
    compiled = _compiled()
    (values, indices, indptr), shape = _csr(data.draw(st.integers(0, 50)))
    indices, indptr = indices.copy(), indptr.copy()
    for _ in range(data.draw(st.integers(1, 3))):
        target = data.draw(st.sampled_from(["indices", "indptr"]))
        a = indices if target == "indices" else indptr[1:-1]  # the ends are O(1) invariants
        if a.shape[0]:
            a[data.draw(st.integers(0, a.shape[0] - 1))] = data.draw(st.integers(-3, 12))
    want = validation.csr_violation(indices, indptr, shape[1], True)
    assert compiled(indices, indptr, shape[1], True) == want
    if want == validation.OK:
        so.csr_matrix((values, indices, indptr), shape=shape)
    else:
        with pytest.raises(SparseFormatError):
            so.csr_matrix((values, indices, indptr), shape=shape)


_COMPILED = []


def _compiled():
    if not _COMPILED:
        _COMPILED.append(numba.njit(validation.csr_violation))
    return _COMPILED[0]


def test_coo_rows_are_checked_before_a_library_reads_them():
    boundary.coo_rows(np.array([0, 4, 2]), 5)
    with pytest.raises(SparseFormatError, match=r"COO row index -1 at position 0 is out of range \[0, 5\)"):
        boundary.coo_rows(np.array([-1, 2]), 5)
    with pytest.raises(SparseFormatError, match=r"COO row index 5 at position 1"):
        boundary.coo_rows(np.array([0, 5]), 5)
