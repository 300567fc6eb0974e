"""The cpu kernels of csr @ dense (``sparse_ops.sdk.csr_cpu``) and csr.T @ dense
(``sparse_ops.kernels.linalg``) against SciPy: every width chunk of the register-held rows
(256 down to 4 bytes, ``sparse_ops.kernels.chunks``), rows exactly one chunk wide (their own
loops) and mixtures of chunks, empty and power-law rows, value and index dtypes, serial and
parallel forms,
and the ``so.dot`` paths that reach them (``out=``, ``req="add"``, strided and transposed
dense operands, ``transpose_a``)."""
import numpy as np
import pytest
import scipy.sparse as sp

import sparse_ops as so
from sparse_ops.sdk import csr as sdk_csr
from sparse_ops.sdk import csr_cpu

WIDTHS = [1, 2, 3, 4, 5, 7, 8, 9, 16, 31, 32, 33, 64, 65, 128, 256, 300]


def _csr(rows: int, cols: int, dtype, index_dtype, kind: str, seed: int = 0) -> sp.csr_matrix:
    """uniform: ~6 values a row with every fourth row empty (first, last rows included);
    power-law: Pareto row lengths, a few rows holding most values, many empty."""
    rng = np.random.default_rng(seed)
    if kind == "uniform":
        lengths = rng.integers(1, 12, rows)
        lengths[::4] = 0
        lengths[-1] = 0
    else:
        lengths = np.minimum((rng.pareto(1.2, rows) * 3).astype(np.int64), cols)
        lengths[rng.random(rows) < 0.3] = 0
    indptr = np.zeros(rows + 1, np.int64)
    np.cumsum(lengths, out=indptr[1:])
    nnz = int(indptr[-1])
    if np.dtype(dtype).kind == "i":
        data = rng.integers(-5, 6, nnz).astype(dtype)
    else:
        data = rng.standard_normal(nnz).astype(dtype)
    m = sp.csr_matrix((data, rng.integers(0, cols, nnz), indptr), shape=(rows, cols))
    m.sum_duplicates()
    m.indices, m.indptr = m.indices.astype(index_dtype), m.indptr.astype(index_dtype)
    return m


def _dense(rows: int, cols: int, dtype, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "i":
        return rng.integers(-7, 8, (rows, cols)).astype(dtype)
    return rng.standard_normal((rows, cols)).astype(dtype)


def _check(got: np.ndarray, m: sp.csr_matrix, b: np.ndarray) -> None:
    want = (m @ b).astype(got.dtype)
    if got.dtype.kind == "i":
        np.testing.assert_array_equal(got, want)
        return
    rtol = 1e-5 if got.dtype == np.float32 else 1e-12
    # fused multiply-adds round once per pair, SciPy twice: bound the difference by the row's scale
    scale = (abs(m) @ abs(b)).astype(np.float64)
    assert np.all(np.abs(got - want) <= rtol * scale + rtol), np.max(np.abs(got - want) - rtol * scale)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("kind", ["uniform", "power-law"])
@pytest.mark.parametrize("parallel", [False, True])
def test_every_width_against_scipy(width, dtype, kind, parallel):
    m = _csr(300, 50, dtype, np.int32, kind)
    b = _dense(50, width, dtype)
    out = np.full((300, width), 99, dtype)  # every row must be written, empty ones as zeros
    csr_cpu.csr_dense(m.indptr, m.indices, m.data, b, out, parallel)
    _check(out, m, b)


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("width", [8, 64, 65, 256])
def test_index_dtypes(index_dtype, width):
    m = _csr(200, 40, np.float64, index_dtype, "power-law", seed=3)
    assert m.indices.dtype == index_dtype and m.indptr.dtype == index_dtype
    b = _dense(40, width, np.float64)
    for parallel in (False, True):
        out = np.empty((200, width))
        csr_cpu.csr_dense(m.indptr, m.indices, m.data, b, out, parallel)
        _check(out, m, b)


def test_float32_against_scipy_in_float64_within_1e_5():
    """The 1e-5 tolerance of the benchmark: our float32 sums against exact ones."""
    m = _csr(2000, 500, np.float32, np.int32, "power-law", seed=4)
    b = _dense(500, 64, np.float32)
    out = np.empty((2000, 64), np.float32)
    csr_cpu.csr_dense(m.indptr, m.indices, m.data, b, out, True)
    exact = m.astype(np.float64) @ b.astype(np.float64)
    scale = abs(m).astype(np.float64) @ abs(b).astype(np.float64)
    assert np.all(np.abs(out - exact) <= 1e-5 * scale)


def test_rows_of_one_hub():
    """One row holding nearly every value (the parallel split by values gives it a task of
    its own), the others empty or single."""
    cols = 3000
    indptr = np.array([0, 1, 1, cols + 1, cols + 2, cols + 2], dtype=np.int64)
    indices = np.concatenate(([5], np.arange(cols), [7])).astype(np.int64)
    data = np.random.default_rng(0).standard_normal(cols + 2)
    m = sp.csr_matrix((data, indices, indptr), shape=(5, cols))
    b = _dense(cols, 33, np.float64)
    for parallel in (False, True):
        out = np.full((5, 33), np.nan)
        csr_cpu.csr_dense(m.indptr, m.indices, m.data, b, out, parallel)
        _check(out, m, b)


def test_balanced_bounds_split_by_values():
    indptr = np.array([0, 1000, 1000, 1001, 1002, 1003, 1004, 1005, 1006, 2006], dtype=np.int32)
    bounds = csr_cpu.balanced_bounds(indptr, 4)
    assert bounds[0] == 0 and bounds[-1] == 9 and np.all(np.diff(bounds) >= 0) and bounds.shape == (5,)
    # the two heavy rows land in different tasks
    task_of = np.searchsorted(bounds, [0, 8], side="right")
    assert task_of[0] != task_of[1]
    assert np.array_equal(csr_cpu.balanced_bounds(np.zeros(1, np.int64), 4), np.zeros(5))


def test_strided_dense_operand_in_the_kernel():
    """A non-contiguous b compiles the kernel's any-layout form; same sums."""
    m = _csr(100, 60, np.float64, np.int64, "uniform")
    wide = _dense(60, 130, np.float64)
    for b in (wide[:, ::2], wide[:, :64], np.asfortranarray(wide[:, :16])):
        assert not b.flags.c_contiguous
        out = np.empty((100, b.shape[1]))
        csr_cpu.csr_dense(m.indptr, m.indices, m.data, b, out, True)
        _check(out, m, b)


def test_sdk_entry_point_and_mean():
    m = _csr(64, 30, np.float32, np.int32, "uniform")
    b = _dense(30, 16, np.float32)
    out = sdk_csr.csr_dense(None, m.indptr, m.indices, m.data, b, np.empty((64, 16), np.float32))
    _check(out, m, b)
    mean = sdk_csr.csr_dense(None, m.indptr, m.indices, m.data, b, np.empty((64, 16), np.float32), mean=True)
    counts = np.diff(m.indptr)[:, None]
    np.testing.assert_allclose(mean, np.where(counts > 0, (m @ b) / np.maximum(counts, 1), 0), rtol=1e-5, atol=1e-6)
    empty = sdk_csr.csr_dense(None, np.zeros(1, np.int32), np.zeros(0, np.int32), np.zeros(0, np.float32), b,
                              np.empty((0, 16), np.float32))
    assert empty.shape == (0, 16)


# ---- through so.dot -------------------------------------------------------------------------------
@pytest.mark.parametrize("width", [1, 9, 64, 300])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "int32"])
def test_dot_reaches_the_kernel(width, dtype):
    m = _csr(3000, 200, np.float64, np.int64, "power-law", seed=7)
    m.data = np.round(m.data * 3).astype(dtype)
    b = _dense(200, width, np.dtype(dtype))
    r = so.dot(so.csr_matrix(m), so.array(b))
    assert r.stype == "default" and r.dtype == np.dtype(dtype) and r.shape == (3000, width)
    _check(r.asnumpy(), m, b)


def test_dot_strided_and_transposed_dense():
    m = _csr(500, 80, np.float32, np.int32, "uniform")
    x = so.csr_matrix(m)
    wide = _dense(80, 70, np.float32)
    _check(so.dot(x, so.array(wide[:, ::2])).asnumpy(), m, wide[:, ::2])
    bt = _dense(32, 80, np.float32)
    _check(so.dot(x, so.array(bt), transpose_b=True).asnumpy(), m, bt.T)


def test_dot_out_and_req_add():
    m = _csr(400, 50, np.float64, np.int64, "power-law", seed=2)
    x, b = so.csr_matrix(m), _dense(50, 33, np.float64)
    y = so.array(b)
    target = so.array(np.full((400, 33), 5.0))
    memory = target.data
    so.dot(x, y, out=target)
    assert target.data is memory  # written in place
    _check(target.asnumpy(), m, b)
    base = np.random.default_rng(3).standard_normal((400, 33))
    acc = so.array(base.copy())
    so.dot(x, y, out=acc, req="add")
    np.testing.assert_allclose(acc.asnumpy(), base + m @ b, rtol=1e-12, atol=1e-12)


# ---- csr.T @ dense: the scatter kernels (sparse_ops/kernels/linalg.py) -----------------------------
def _t_check(got: np.ndarray, m: sp.csr_matrix, b: np.ndarray) -> None:
    _check(got, m.T.tocsr(), b)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("kind", ["uniform", "power-law"])
def test_transposed_every_width_every_driver(monkeypatch, width, dtype, kind):
    """One row range (the serial product), row ranges into per-task partial outputs and
    column ranges (in the parallel driver) give A.T @ b for every chunk combination (b's
    row chunks held in registers)."""
    from sparse_ops.kernels import linalg
    from sparse_ops.sdk import rowkernel

    m = _csr(300, 50, dtype, np.int32, kind)
    b = _dense(300, width, dtype)
    serial = np.zeros((50, width), dtype)
    linalg.csr_t_dense_row_range(None, 1, m.indptr, m.indices, m.data, b, 1, serial, np.empty((0, 0, 0), dtype))
    _t_check(serial, m, b)
    monkeypatch.setattr(rowkernel, "PARALLEL_MIN_WORK", 0)  # the parallel driver, whatever the size
    partial, spare = np.zeros((50, width), dtype), np.full((2, 50, width), 7, dtype)
    linalg.csr_t_dense_row_range(None, 3, m.indptr, m.indices, m.data, b, 3, partial, spare)
    linalg.add_partials_row(None, 50, partial, spare)
    _t_check(partial, m, b)
    columns = np.zeros((50, width), dtype)
    linalg.csr_t_dense_column_range(None, 2, m.indptr, m.indices, m.data, b, np.array([0, 20, 50], np.int64),
                                    columns)
    _t_check(columns, m, b)


@pytest.mark.parametrize("threshold", [1 << 62, 0])  # the serial driver, then the parallel one
def test_dense_times_csr_and_column_counts_in_both_drivers(monkeypatch, threshold):
    from sparse_ops.kernels import linalg
    from sparse_ops.sdk import rowkernel

    monkeypatch.setattr(rowkernel, "PARALLEL_MIN_WORK", threshold)
    m = _csr(60, 300, np.float64, np.int32, "power-law", seed=3)
    a = _dense(500, 60, np.float64)
    out = np.full((500, 300), np.nan)
    linalg.dense_csr_row(None, 500, a, m.indptr, m.indices, m.data, out)
    np.testing.assert_allclose(out, a @ m.toarray(), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(linalg.column_counts(m.indices, 300), np.bincount(m.indices, minlength=300))


def test_row_ranges_split_the_stored_values_evenly():
    from sparse_ops.kernels import linalg

    indptr = np.array([0, 0, 5, 6, 6, 20, 21, 30], np.int32)  # 7 rows, 30 values
    for ranges in (1, 2, 3, 7, 10):
        starts = [linalg.range_start(indptr, t, ranges) for t in range(ranges + 1)]
        assert starts[0] == 0 and starts[-1] == 7 and starts == sorted(starts)
        want = np.minimum(np.searchsorted(indptr, 30 * np.arange(1, ranges, dtype=np.int64) // ranges), 7)
        assert starts[1:-1] == want.tolist()


def test_transposed_accumulates_and_strided_operand():
    """The kernels add into ``out``; a strided b takes the plain loop with the same sums."""
    from sparse_ops.kernels import linalg

    m = _csr(200, 40, np.float64, np.int64, "power-law", seed=5)
    wide = _dense(200, 140, np.float64)
    base = _dense(40, 64, np.float64, seed=9)
    out = base.copy()
    linalg.csr_t_dense_rows(m.indptr, m.indices, m.data, wide[:, :64].copy(), 0, 200, out)
    np.testing.assert_allclose(out, base + m.T @ wide[:, :64], rtol=1e-12, atol=1e-12)
    strided = wide[:, ::2]
    out = np.zeros((40, 70))
    linalg.csr_t_dense_rows(m.indptr, m.indices, m.data, strided, 0, 200, out)
    _t_check(out, m, strided)


@pytest.mark.parametrize("width", [1, 8, 64, 65, 300])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_dot_transpose_a_row_sparse_against_scipy(width, dtype):
    """so.dot(csr.T, dense) big enough for the parallel drivers: a row_sparse result holding
    exactly the stored columns."""
    m = _csr(20_000, 3000, np.float64, np.int32, "power-law", seed=11)
    m.data = np.round(m.data * 3).astype(dtype)
    b = _dense(20_000, width, np.dtype(dtype))
    r = so.dot(so.csr_matrix(m), so.array(b), transpose_a=True)
    assert r.stype == "row_sparse" and r.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(r.indices, np.unique(m.indices))
    _t_check(r.tostype("default").asnumpy(), m, b)
