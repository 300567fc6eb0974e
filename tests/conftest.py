"""Shared strategies and helpers: random dense/csr/row_sparse data in every dtype."""
from __future__ import annotations

import os

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

settings.register_profile(
    "default", deadline=None, max_examples=60,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile("ci", parent=settings.get_profile("default"), max_examples=40)
settings.load_profile("ci" if os.environ.get("CI") else "default")

VALUE_DTYPES = ["float16", "float32", "float64", "int32", "int64"]
INDEX_DTYPES = ["int32", "int64"]


@st.composite
def dense_arrays(draw, ndim=2, max_side=9, dtypes=VALUE_DTYPES):
    """A dense array with random zero pattern: empty, sparse, or fully dense, any side may be 0.
    ``ndim`` is an int or a strategy of ints."""
    if not isinstance(ndim, int):
        ndim = draw(ndim)
    shape = tuple(draw(st.integers(0, max_side)) for _ in range(ndim))
    dtype = np.dtype(draw(st.sampled_from(dtypes)))
    seed = draw(st.integers(0, 2**32 - 1))
    density = draw(st.sampled_from([0.0, 0.1, 0.4, 1.0]))
    rng = np.random.default_rng(seed)
    values = rng.integers(-50, 50, size=shape)  # small integers: exact in every dtype
    values[values == 0] = 7
    mask = rng.random(shape) < density
    return np.where(mask, values, 0).astype(dtype)


def scipy_csr(dense: np.ndarray, index_dtype) -> sp.csr_matrix:
    """SciPy csr of ``dense`` with the given index dtype (float16 values as float32: SciPy has none)."""
    vals = dense.astype(np.float32) if dense.dtype == np.float16 else dense
    m = sp.csr_matrix(vals)
    m.indices = m.indices.astype(index_dtype)
    m.indptr = m.indptr.astype(index_dtype)
    return m


def csr_parts(dense: np.ndarray, index_dtype):
    """(data, indices, indptr) of ``dense`` in its own value dtype."""
    m = scipy_csr(dense, index_dtype)
    return m.data.astype(dense.dtype), m.indices, m.indptr


def row_sparse_parts(dense: np.ndarray, index_dtype):
    """(data, indices) of ``dense``: the rows holding any non-zero."""
    flat = dense.reshape(dense.shape[0], int(np.prod(dense.shape[1:])))
    rows = np.flatnonzero(flat.any(axis=1))
    return dense[rows], rows.astype(index_dtype)


# values where implementations part ways: NaN, infinities, signed zeros, halves (rounding),
# overflow of exp and of float32, and integers at their extremes and zero (division by zero);
# sums of any of them are exact in float32, so reductions agree whatever their order
SPECIAL_FLOATS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -3.0, 700.0, -700.0,
                           100.0, 1e6, -2.5, 3e38, -1.5])
SPECIAL_INTS = np.array([0, 1, -1, 7, -7, 2**31 - 1, -2**31, 3, -3, 100, 0, -2])
# (an integer sum or mean that overflows wraps in the op's integer dtype, as MXNet's: what the
# kernels and the lowerings both do)


# finite values at the kinks and ties of piecewise functions (abs, relu, clip, maximum at
# equal values, rounding at halves): where a framework's derivative may pick another side
KINKS = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 0.0, 2.0, -3.0, 1.0, 6.0, -2.5])


def kinks_like(x: np.ndarray, shift: int = 0) -> np.ndarray:
    """An array of ``x``'s shape and (floating) dtype filled with ``KINKS`` from ``shift``."""
    return np.resize(np.roll(KINKS, shift), x.size).reshape(x.shape).astype(x.dtype)


def special_like(x: np.ndarray, shift: int = 0) -> np.ndarray:
    """An array of ``x``'s shape and dtype filled with ``SPECIAL_FLOATS`` (or, for an integer
    dtype, ``SPECIAL_INTS`` that fit it), cycled from position ``shift``; booleans as they are."""
    if x.dtype.kind == "f":
        src = SPECIAL_FLOATS
    elif x.dtype.kind in "iu":
        info = np.iinfo(x.dtype)
        src = SPECIAL_INTS[(SPECIAL_INTS >= info.min) & (SPECIAL_INTS <= info.max)]
    else:
        return x
    with np.errstate(over="ignore"):
        return np.resize(np.roll(src, shift), x.size).reshape(x.shape).astype(x.dtype)


def make(dense: np.ndarray, stype: str, index_dtype="int64"):
    """A container of storage type ``stype`` holding ``dense``, built from its components."""
    import sparse_ops as so

    if stype == "default":
        return so.array(dense)
    if stype == "csr":
        return so.csr_matrix(csr_parts(dense, index_dtype), shape=dense.shape)
    return so.row_sparse_array(row_sparse_parts(dense, index_dtype), shape=dense.shape)


@pytest.fixture
def isolated(monkeypatch, tmp_path_factory):
    """Undo whatever a test loads: ops, generated functions, plugin records, modules, sys.path."""
    import sys

    from sparse_ops.sdk.testing import table_restored

    modules = set(sys.modules)
    monkeypatch.setattr(sys, "path", list(sys.path))
    with table_restored():
        yield
    base = str(tmp_path_factory.getbasetemp())
    for mod in set(sys.modules) - modules:  # the test's plugins only: never numba & co
        if (getattr(sys.modules[mod], "__file__", None) or "").startswith(base):
            del sys.modules[mod]


@pytest.fixture
def kernels():
    """The torch bridge runs dense built-ins' kernels, not their torch lowering
    (``sparse_ops.torch.lowering``): for tests of the paths and rules behind the lowering."""
    from sparse_ops.torch import lowering

    lowering.disabled(True)
    yield
    lowering.disabled(False)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """After a run that included tests/matrix: the op x face matrix (per face: pass, declared
    unsupported, FAIL; every failure; how many ops ran torch.compile at two sizes, and why the
    others did not), and, when ``SPARSE_OPS_MATRIX_TABLE`` names a file, the
    whole matrix written there as a Markdown table for the docs."""
    import sys

    matrix = sys.modules.get("op_face_matrix")
    if matrix is None or not matrix.CELLS:
        return
    tr, cells = terminalreporter, matrix.CELLS
    tr.section("op x face matrix")
    tr.write_line(f"{len({o for o, _ in cells})} ops, first sample each; cells pass / declared unsupported / FAIL:")
    for face in sorted({f for _, f in cells}):
        kinds = [cell.split(":")[0] for (_, f), cell in cells.items() if f == face]
        tr.write_line(f"  {face:14s} {kinds.count('pass'):4d} pass  {kinds.count('declared'):4d} declared  "
                      f"{kinds.count('FAIL'):4d} FAIL")
    for (op, face), cell in sorted(cells.items()):
        if cell.startswith("FAIL"):
            tr.write_line(f"  FAIL {op} / {face}: {cell[6:]}")
    if hasattr(matrix, "two_sizes") and any(f == "torch.compile" for _, f in cells):
        head, others = matrix.two_sizes()
        tr.write_line(head)
        if others:
            tr.write_line(f"  not at a second size ({len(others)}):")
            for op, why in others:
                tr.write_line(f"    {op}: {why}")
    path = os.environ.get("SPARSE_OPS_MATRIX_TABLE")
    if path:
        with open(path, "w") as fh:
            fh.write(matrix.table())
        tr.write_line(f"matrix written to {path}")
