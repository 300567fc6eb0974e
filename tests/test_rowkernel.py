"""``sparse_ops.sdk.rowkernel``: one per-row body, cpu drivers (serial and parallel) that
agree with NumPy, the early-return and no-source fallbacks, and the one size policy.
(The gpu drivers run in the gpu tests: built-ins in test_gpu_kernels.py, the cookbook's
recipes in cookbook/tests/test_cookbook_gpu.py.)"""
from __future__ import annotations

import numpy as np
import pytest

from sparse_ops.sdk import rowkernel
from sparse_ops.sdk.rowkernel import row_kernel


@row_kernel
def _row_max(r, indptr, data, out):
    out[r] = 0
    if indptr[r + 1] > indptr[r]:
        top = data[indptr[r]]
        for p in range(indptr[r] + 1, indptr[r + 1]):
            top = max(top, data[p])
        out[r] = top


@row_kernel
def _row_max_early_return(r, indptr, data, out):
    out[r] = 0
    if indptr[r + 1] == indptr[r]:
        return
    top = data[indptr[r]]
    for p in range(indptr[r] + 1, indptr[r + 1]):
        top = max(top, data[p])
    out[r] = top


@row_kernel(lanes=True)
def _scaled_rows(r, lane, lanes, x, scale, out):
    for f in range(lane, x.shape[1], lanes):
        out[r, f] = x[r, f] * scale[r]


# locals named like the drivers' own loop indices and sums (the drivers' names avoid them)
@row_kernel
def _mean_with_driver_names(r, indptr, data, out):
    _t = 0.0
    _n = 0
    _start = indptr[r]
    _stop = indptr[r + 1]
    for _i in range(_start, _stop):
        _t += data[_i]
        _n += 1
    out[r] = _t / max(_n, 1)


@row_kernel(total="float64")
def _total_with_driver_names(r, x, _part):
    _total = x[r] * _part[0]
    _lane = _total
    return _lane


@row_kernel(total="int64")
def _count_negative(r, x):
    return x[r] < 0


@row_kernel(total="float64")
def _row_sum_of_squares(r, indptr, data):
    acc = 0.0
    for p in range(indptr[r], indptr[r + 1]):
        acc += data[p] * data[p]
    return acc


@row_kernel(total="int64")
def _count_nonempty_early_return(r, indptr):
    if indptr[r + 1] == indptr[r]:
        return 0
    return 1


@row_kernel
def _range_sums(t, bounds, data, out):  # a task per range: the callers cut one per thread
    acc = 0.0
    for p in range(bounds[t], bounds[t + 1]):
        acc += data[p]
    out[t] = acc


def _ragged(rows: int = 300, seed: int = 0):
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 6, size=rows)
    indptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    data = rng.standard_normal(indptr[-1])
    want = np.array([data[a:b].max() if b > a else 0.0 for a, b in zip(indptr[:-1], indptr[1:])])
    return indptr, data, want


@pytest.mark.parametrize("kernel", [_row_max, _row_max_early_return])
@pytest.mark.parametrize("threshold", [1 << 62, 0])  # the serial form, then the parallel one
def test_cpu_drivers_match_numpy(monkeypatch, kernel, threshold):
    monkeypatch.setattr(rowkernel, "PARALLEL_MIN_WORK", threshold)
    indptr, data, want = _ragged()
    out = np.full(want.shape, np.nan)
    kernel(None, want.shape[0], indptr, data, out)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("threshold", [1 << 62, 0])  # the serial form, then the parallel one
@pytest.mark.parametrize("rows", [0, 1, 5, 300])
def test_total_drivers_sum_the_rows(monkeypatch, threshold, rows):
    monkeypatch.setattr(rowkernel, "PARALLEL_MIN_WORK", threshold)
    indptr, data, _ = _ragged(rows)
    x = np.random.default_rng(1).standard_normal(rows)
    count = _count_negative(None, rows, x)
    assert type(count) is int and count == int((x < 0).sum())
    assert _row_sum_of_squares(None, rows, indptr, data) == pytest.approx(float(data @ data))
    assert _count_nonempty_early_return(None, rows, indptr) == int((np.diff(indptr) > 0).sum())


@pytest.mark.parametrize("work", [1, 1 << 22])  # the serial driver, then the parallel one
def test_locals_named_like_the_drivers_own(work):
    indptr, data, _ = _ragged(rows=3000)
    counts = np.diff(indptr)
    out = np.full(len(counts), np.nan)
    _mean_with_driver_names(None, len(counts), indptr, data, out, work=work)
    means = np.array([data[indptr[i]:indptr[i + 1]].sum() / max(counts[i], 1) for i in range(len(counts))])
    np.testing.assert_allclose(out, means)
    v = np.linspace(-1, 2, 3000)
    assert _total_with_driver_names(None, 3000, v, np.array([3.0]), work=work) == pytest.approx(3 * v.sum())


def test_a_total_body_returns_a_number_of_a_numeric_dtype():
    assert "_rk_part += _rk_total_type(x[r] < 0)" in _count_negative._row_code()
    assert "_rk_body(" not in _row_sum_of_squares._row_code()
    assert _count_nonempty_early_return._row_code().strip().startswith(
        "_rk_part += _rk_total_type(_rk_body(_rk_nonneg(_rk_i), ")
    with pytest.raises(TypeError, match="integer or float dtype"):
        row_kernel(total="U3")(lambda r, x: x[r])


def test_few_heavy_rows_get_a_task_each(monkeypatch):
    """Ranges a caller cut one per thread: the parallel driver's tasks shrink below
    ROWS_PER_TASK rows so that every thread gets one; many rows make at most
    TASKS_PER_THREAD tasks a thread."""
    import numba

    threads = numba.get_num_threads()
    assert rowkernel.task_rows(threads) == 1 and rowkernel.task_rows(1) == 1
    assert rowkernel.task_rows(threads * rowkernel.ROWS_PER_TASK) == rowkernel.ROWS_PER_TASK
    many = threads * rowkernel.TASKS_PER_THREAD * rowkernel.ROWS_PER_TASK * 10
    assert -(-many // rowkernel.task_rows(many)) == threads * rowkernel.TASKS_PER_THREAD
    monkeypatch.setattr(rowkernel, "PARALLEL_MIN_WORK", 0)
    bounds = np.array([0, 3, 10, 10], dtype=np.int64)
    out = np.full(3, np.nan)
    _range_sums(None, 3, bounds, np.arange(10.0), out)
    np.testing.assert_array_equal(out, [3.0, 42.0, 0.0])


def test_the_body_is_pasted_in_unless_it_returns():
    assert "_rk_body(" not in _row_max._row_code() and "top = max(top, data[p])" in _row_max._row_code()
    assert _row_max_early_return._row_code().strip().startswith("_rk_body(_rk_nonneg(_rk_i), ")


def test_lanes_body_runs_with_one_lane_on_the_cpu():
    x = np.arange(12.0).reshape(4, 3)
    scale = np.array([1.0, 2.0, 0.5, -1.0])
    out = np.empty_like(x)
    _scaled_rows(None, 4, x, scale, out)
    np.testing.assert_array_equal(out, x * scale[:, None])


def test_a_body_without_source_file_compiles_uncached():
    namespace: dict = {}
    exec("def body(r, a, out):\n    out[r] = 2 * a[r]\n", namespace)
    kernel = rowkernel.RowKernel(namespace["body"])
    assert not kernel.cacheable
    out = np.zeros(5)
    kernel(None, 5, np.arange(5.0), out)
    np.testing.assert_array_equal(out, 2 * np.arange(5.0))


def test_one_parallel_size_policy(monkeypatch):
    import numba

    monkeypatch.setattr(rowkernel, "PARALLEL_MIN_WORK", 1000)
    assert not rowkernel.parallel_worth(999)
    assert rowkernel.parallel_worth(1000) == (numba.get_num_threads() > 1)


def test_a_body_needs_its_row_argument():
    with pytest.raises(TypeError, match="row index first"):
        row_kernel(lambda: None)
    with pytest.raises(TypeError, match="lane and lanes"):
        row_kernel(lanes=True)(lambda r, lane: None)


@pytest.mark.gpu
def test_gpu_drivers_match_the_cpu():
    """Thread-per-row and warp-per-row drivers on the gpu (numba's CUDA simulator without one)."""
    import sparse_ops as so

    if so.num_gpus() == 0:
        pytest.skip("no gpu (set SPARSE_OPS_CUDA_SIM=1 to simulate one)")
    gpu = so.gpu(0)
    xp = gpu.xp
    indptr, data, want = _ragged(rows=40)
    for kernel in (_row_max, _row_max_early_return):
        out = xp.full(want.shape, np.nan)
        kernel(gpu, want.shape[0], xp.asarray(indptr), xp.asarray(data), out)
        np.testing.assert_array_equal(so.device.to_host(out), want)
    count = _count_negative(gpu, 40, xp.asarray(np.linspace(-1, 1, 40)))
    assert type(count) is int and count == 20
    assert _row_sum_of_squares(gpu, want.shape[0], xp.asarray(indptr), xp.asarray(data)) == pytest.approx(
        float(data @ data))
    out = xp.full(want.shape, np.nan)
    _mean_with_driver_names(gpu, want.shape[0], xp.asarray(indptr), xp.asarray(data), out)
    counts = np.diff(indptr)
    means = np.array([data[indptr[i]:indptr[i + 1]].sum() / max(counts[i], 1) for i in range(len(counts))])
    np.testing.assert_allclose(so.device.to_host(out), means)
    v = np.linspace(-1, 2, 40)
    assert _total_with_driver_names(gpu, 40, xp.asarray(v), xp.asarray([3.0])) == pytest.approx(3 * v.sum())
    x = np.arange(8.0 * 40).reshape(8, 40)  # 40 columns: a warp's lanes stride past 32
    scale = np.linspace(-1, 1, 8)
    out = xp.empty(x.shape)
    _scaled_rows(gpu, 8, xp.asarray(x), xp.asarray(scale), out)
    np.testing.assert_array_equal(so.device.to_host(out), x * scale[:, None])


@row_kernel
def _row_mean(r, indptr, data, out):
    s = data.dtype.type(0.0)
    for j in range(indptr[r], indptr[r + 1]):
        s += data[j]
    out[r] = s / (indptr[r + 1] - indptr[r])


@row_kernel
def _floor_div(r, a, d, out):
    out[r] = a[r] // d


@pytest.mark.parametrize("threshold", [1, 1 << 60])
def test_division_by_zero_follows_numpy_on_the_serial_and_parallel_forms(monkeypatch, threshold):
    """The serial form (numba's default would raise ZeroDivisionError) and the parallel one
    (numba's parallel loops take NumPy's rule) give the same values: NumPy's."""
    monkeypatch.setattr(rowkernel, "PARALLEL_MIN_WORK", threshold)
    indptr = np.array([0, 2, 2, 5, 5, 6], np.int64)
    data = np.array([1.0, 3.0, -1.0, 0.5, 2.0, 4.0])
    out = np.empty(5)
    _row_mean.run_cpu(5, indptr, data, out, work=1 << 20)
    with np.errstate(invalid="ignore"):
        ref = np.add.reduceat(np.r_[data, 0.0], indptr[:-1]) * (np.diff(indptr) > 0) / np.diff(indptr)
    np.testing.assert_array_equal(out, ref)  # NaN (0 / 0) in the empty rows
    a, q = np.arange(-3, 5, dtype=np.int64), np.empty(8, np.int64)
    _floor_div.run_cpu(8, a, np.int64(0), q, work=1 << 20)
    with np.errstate(divide="ignore"):
        np.testing.assert_array_equal(q, a // np.int64(0))  # NumPy: 0
