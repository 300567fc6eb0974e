"""``mx.test_utils``: the helpers MXNet 1.x tests and examples use most.

Comparisons accept NDArrays (any storage type), SciPy matrices and NumPy arrays, with
MXNet 1.9.1's defaults: ``almost_equal`` rtol 1e-5 / atol 1e-20, ``assert_almost_equal``
per dtype (float16 1e-2 / 1e-1, float32 1e-4 / 1e-3, float64 1e-5 / 1e-20, integers exact). Random data comes from NumPy's
global generator, as in MXNet, so ``np.random.seed`` makes it reproducible: dense
arrays are standard normal, sparse ones uniform on [0, 1) at the given density.
"""
from __future__ import annotations

import contextlib
import numbers
import os
import sys
from typing import Any, Callable, Iterator

import numpy as np
import numpy.random as rnd

from ...device import Device, current_device
from ...ndarray import NDArray
from . import ndarray as nd
from .context import Context
from .base import MXNetArgumentError, MXNetValueError

mx = sys.modules[__package__]  # ``from mxnet.test_utils import *`` hands tests ``mx``


def default_context() -> Device:
    """The device tests run on: the current default device."""
    return current_device()


def default_dtype() -> type:
    return np.float32


def default_rtols() -> dict:
    """MXNet 1.9.1's relative tolerances per dtype (what ``assert_almost_equal`` uses)."""
    exact = {np.dtype(t): 0 for t in (np.bool_, np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64)}
    return {np.dtype(np.float16): 1e-2, np.dtype(np.float32): 1e-4, np.dtype(np.float64): 1e-5, **exact}


def default_atols() -> dict:
    """MXNet 1.9.1's absolute tolerances per dtype."""
    exact = {np.dtype(t): 0 for t in (np.bool_, np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64)}
    return {np.dtype(np.float16): 1e-1, np.dtype(np.float32): 1e-3, np.dtype(np.float64): 1e-20, **exact}


def get_rtol(rtol: float | None = None, dtype: Any = np.dtype(np.float64)) -> float:
    return default_rtols()[np.dtype(dtype)] if rtol is None else rtol


def get_atol(atol: float | None = None, dtype: Any = np.dtype(np.float64)) -> float:
    return default_atols()[np.dtype(dtype)] if atol is None else atol


def _tolerance(x: Any, tol: Any, defaults: dict) -> float:
    if isinstance(tol, numbers.Number):
        return tol
    dtype = np.dtype(getattr(x, "dtype", None) or np.asarray(x).dtype)
    return (tol or {}).get(dtype, defaults.get(dtype, defaults[np.dtype(np.float64)]))


def get_tols(x: Any, y: Any, rtol: Any, atol: Any) -> tuple[float, float]:
    """The tolerances for comparing ``x`` and ``y``: the given ones, else the larger of the
    two dtypes' defaults (``rtol``/``atol`` may also be dicts of dtype -> tolerance)."""
    return (max(_tolerance(x, rtol, default_rtols()), _tolerance(y, rtol, default_rtols())),
            max(_tolerance(x, atol, default_atols()), _tolerance(y, atol, default_atols())))


def _as_numpy(x: Any) -> np.ndarray:
    if isinstance(x, NDArray):
        return x.asnumpy()
    if hasattr(x, "toarray") and hasattr(x, "nnz"):  # a SciPy sparse matrix
        return x.toarray()
    return np.asarray(x)


# ---- comparisons ---------------------------------------------------------------------------------
def same(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` have the same shape and exactly the same values."""
    return bool(np.array_equal(_as_numpy(a), _as_numpy(b)))


def almost_equal(a: Any, b: Any, rtol: float | None = None, atol: float | None = None,
                 equal_nan: bool = False, use_broadcast: bool = True) -> bool:
    """Whether ``|a - b| <= atol + rtol * |b|`` everywhere (NumPy's ``allclose``)."""
    a, b = _as_numpy(a), _as_numpy(b)
    if not use_broadcast and a.shape != b.shape:
        return False
    return bool(np.allclose(a, b, rtol=get_rtol(rtol), atol=get_atol(atol), equal_nan=equal_nan))


def find_max_violation(a: np.ndarray, b: np.ndarray, rtol: float | None = None,
                       atol: float | None = None) -> tuple[tuple, float]:
    """(index, ratio): where ``|a - b|`` exceeds its tolerance most, and by how much."""
    a, b = np.broadcast_arrays(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    with np.errstate(invalid="ignore", over="ignore"):
        absdiff = np.where(a == b, 0, np.abs(a - b))
        violation = absdiff / (get_atol(atol) + get_rtol(rtol) * np.abs(b) + 1e-20)
    violation = np.where(np.isnan(violation), np.inf, violation)
    idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(violation)), violation.shape))
    return idx, float(violation[idx])


def assert_almost_equal(a: Any, b: Any, rtol: float | None = None, atol: float | None = None,
                        names: tuple[str, str] = ("a", "b"), equal_nan: bool = False,
                        use_broadcast: bool = True, mismatches: tuple[int, int] = (10, 10)) -> None:
    """Raise AssertionError unless ``a`` and ``b`` are almost equal (see ``almost_equal``);
    the message names the worst element."""
    rtol, atol = get_tols(a, b, rtol, atol)
    a, b = _as_numpy(a), _as_numpy(b)
    if not use_broadcast and a.shape != b.shape:
        raise AssertionError(f"{names[0]}.shape = {a.shape} and {names[1]}.shape = {b.shape} are not equal")
    if a.dtype == np.bool_ and b.dtype == np.bool_:
        np.testing.assert_equal(a, b)
        return
    if np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan):
        return
    idx, worst = find_max_violation(a, b, rtol, atol)
    wa, wb = np.broadcast_arrays(a, b)
    bad = int(np.count_nonzero(~np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)))
    raise AssertionError(
        f"Error {worst:f} exceeds tolerance rtol={rtol:e}, atol={atol:e} "
        f"(mismatch {100 * bad / max(wa.size, 1):f}%).\n"
        f"Location of maximum error: {idx}, {names[0]}={wa[idx]}, {names[1]}={wb[idx]}\n"
        f" {names[0]}: {np.array2string(a, threshold=20)}\n {names[1]}: {np.array2string(b, threshold=20)}")


def assert_allclose(a: Any, b: Any, rtol: float = 1e-07, atol: float = 0, equal_nan: bool = True) -> None:
    """``assert_almost_equal`` with NumPy's ``assert_allclose`` defaults."""
    assert_almost_equal(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)


def assert_exception(f: Callable, exception_type: type, *args: Any, **kwargs: Any) -> None:
    """Raise AssertionError unless ``f(*args, **kwargs)`` raises ``exception_type``."""
    try:
        f(*args, **kwargs)
    except exception_type:
        return
    raise AssertionError(f"{getattr(f, '__name__', f)} did not raise {exception_type.__name__}")


# ---- random data ---------------------------------------------------------------------------------
def random_arrays(*shapes: tuple) -> Any:
    """Standard normal float32 NumPy arrays of the given shapes (one array for one shape)."""
    arrays = [np.array(rnd.randn(), dtype=default_dtype()) if len(s) == 0
              else rnd.randn(*s).astype(default_dtype()) for s in shapes]
    return arrays[0] if len(arrays) == 1 else arrays


def rand_shape_2d(dim0: int = 10, dim1: int = 10, allow_zero_size: bool = False) -> tuple[int, int]:
    low = 0 if allow_zero_size else 1
    return rnd.randint(low, dim0 + 1), rnd.randint(low, dim1 + 1)


def rand_shape_3d(dim0: int = 10, dim1: int = 10, dim2: int = 10,
                  allow_zero_size: bool = False) -> tuple[int, int, int]:
    low = 0 if allow_zero_size else 1
    return rnd.randint(low, dim0 + 1), rnd.randint(low, dim1 + 1), rnd.randint(low, dim2 + 1)


def rand_shape_nd(num_dim: int, dim: int = 10, allow_zero_size: bool = False) -> tuple[int, ...]:
    low = 0 if allow_zero_size else 1
    return tuple(int(d) for d in rnd.randint(low, dim + 1, size=num_dim))


def rand_sparse_ndarray(shape: tuple, stype: str, density: float | None = None, dtype: Any = None,
                        distribution: str | None = None, data_init: float | None = None,
                        rsp_indices: Any = None, modifier_func: Callable | None = None,
                        shuffle_csr_indices: bool = False, ctx: Any = None) -> tuple:
    """A random sparse array and its parts: ``(rsp, (values, row_ids))`` or
    ``(csr, (indptr, indices, data))``. Values are uniform on [0, 1) (``data_init``
    fills them with one value instead); each row (row_sparse) or element (csr) is
    stored with probability ``density`` (random when None)."""
    ctx = ctx if ctx is not None else default_context()
    density = rnd.rand() if density is None else density
    dtype = default_dtype() if dtype is None else dtype
    distribution = "uniform" if distribution is None else distribution
    if distribution not in ("uniform", "powerlaw") or (distribution == "powerlaw" and stype != "csr"):
        raise MXNetValueError(f"rand_sparse_ndarray: distribution {distribution!r} is not supported for {stype} (argument distribution)")
    if stype == "row_sparse":
        if rsp_indices is not None:
            indices = np.asarray(rsp_indices)
            if len(indices) > shape[0]:
                raise MXNetValueError("rand_sparse_ndarray: more rsp_indices than rows (argument rsp_indices)")
        else:
            indices = np.argwhere(rnd.rand(shape[0]) < density).flatten()
        if indices.shape[0] == 0:
            return nd.zeros(shape, stype="row_sparse", dtype=dtype, ctx=ctx), (np.array([], dtype=dtype),
                                                                              np.array([]))
        val = rnd.rand(indices.shape[0], *shape[1:]).astype(dtype)
        if data_init is not None:
            val.fill(data_init)
        if modifier_func is not None:
            val = np.vectorize(modifier_func, otypes=[np.float64])(val)
        arr = nd.sparse.row_sparse_array((val, indices), shape=shape, dtype=dtype, ctx=ctx)
        return arr, (val, indices)
    if stype == "csr":
        if len(shape) != 2:
            raise MXNetValueError(f"rand_sparse_ndarray: csr arrays are 2-d, got shape {shape} (argument shape)")
        if distribution == "powerlaw":
            csr = _powerlaw_csr(shape[0], shape[1], density, dtype, ctx)
        else:
            csr = _uniform_csr(shape[0], shape[1], density, dtype, data_init, ctx, shuffle_csr_indices)
        return csr, (csr.indptr, csr.indices, csr.data)
    raise MXNetValueError(f"rand_sparse_ndarray: unknown storage type {stype!r} (argument stype)")


def _powerlaw_csr(rows: int, cols: int, density: float, dtype: Any, ctx: Any):
    """MXNet's power-law csr: one value at the start of each row, then row i holds 2**i
    values (full rows once the columns run out) until ``rows * cols * density`` are placed."""
    total = int(rows * cols * density)
    if not 0 <= density <= 1:
        raise MXNetValueError("rand_sparse_ndarray: density has to be between 0 and 1 (argument density)")
    if total < 2 * rows:
        raise MXNetValueError(f"rand_sparse_ndarray: not supported for this density (argument density): {density} for this shape ({rows}, {cols}); "
                         "keep num_rows * num_cols * density >= 2 * num_rows")
    out = np.zeros((rows, cols), dtype=dtype)
    out[:, 0] = 1 + rnd.uniform(0.001, 2, size=rows)
    unused = total - rows
    col_max = 2
    for row in range(rows):  # at most log2(cols) + rows steps, each one NumPy slice
        if unused <= 0:
            break
        limit = min(cols, col_max)
        if limit == cols and unused > limit:
            out[row] = 1 + rnd.uniform(0.001, 2)
            unused -= limit - 1
            continue
        k = min(limit - 1, unused)
        out[row, 1:1 + k] = 1 + rnd.uniform(0.001, 2, size=k)
        unused -= k
        col_max *= 2
    if unused > 0:
        raise MXNetValueError(f"rand_sparse_ndarray: not supported for this density (argument density): {density} for this shape ({rows}, {cols})")
    return nd.array(out, dtype=dtype, ctx=ctx).tostype("csr")


def _uniform_csr(rows: int, cols: int, density: float, dtype: Any, data_init: float | None, ctx: Any,
                 shuffle: bool = False):
    import scipy.sparse as sp

    if not 0 <= density <= 1:
        raise MXNetValueError("rand_sparse_ndarray: density has to be between 0 and 1 (argument density)")
    if rows <= 0 or cols <= 0:
        raise MXNetValueError("rand_sparse_ndarray: num_rows or num_cols should be greater than 0 (argument shape)")
    draw = np.float64 if np.dtype(dtype) == np.float64 else np.float32  # SciPy has no float16
    m = sp.random(rows, cols, density, dtype=draw, format="csr")
    if data_init is not None:
        m.data.fill(data_init)
    if shuffle:  # MXNet's shuffle_csr_column_indices: column order permuted within each row
        order = np.lexsort((rnd.rand(m.nnz), np.repeat(np.arange(rows), np.diff(m.indptr))))
        m.indices, m.data = m.indices[order], m.data[order]
        return nd.sparse.csr_matrix((m.data, m.indices, m.indptr), shape=m.shape, dtype=dtype, ctx=ctx)
    return nd.sparse.csr_matrix(m, dtype=dtype, ctx=ctx)


def rand_ndarray(shape: tuple, stype: str = "default", density: float | None = None, dtype: Any = None,
                 modifier_func: Callable | None = None, shuffle_csr_indices: bool = False,
                 distribution: str | None = None, ctx: Any = None) -> NDArray:
    """A random array: standard normal values when dense, else as ``rand_sparse_ndarray``."""
    ctx = ctx if ctx is not None else default_context()
    if stype == "default":
        return nd.array(random_arrays(shape), dtype=dtype, ctx=ctx)
    arr, _ = rand_sparse_ndarray(shape, stype, density=density, dtype=dtype, distribution=distribution,
                                 modifier_func=modifier_func, shuffle_csr_indices=shuffle_csr_indices,
                                 ctx=ctx)
    return arr


def random_uniform_arrays(*shapes: tuple, low: float = 0.0, high: float = 1.0, dtype: Any = None) -> list:
    """Uniform [low, high) NumPy arrays of the given shapes (always a list)."""
    dtype = default_dtype() if dtype is None else dtype
    return [rnd.uniform(low, high, size=s).astype(dtype) for s in shapes]


def random_sample(population: list, k: int) -> list:
    """``k`` elements of ``population`` drawn without replacement (NumPy's global generator)."""
    if not 0 <= k <= len(population):
        raise MXNetValueError(f"random_sample: argument k={k} is outside [0, {len(population)}]")
    population = list(population)
    rnd.shuffle(population)
    return population[:k]


def assign_each(the_input: Any, function: Callable | None) -> np.ndarray:
    """``function`` applied to each value of ``the_input`` (a float64 array; a copy when
    ``function`` is None). A test helper on small arrays, as in MXNet."""
    a = np.asarray(the_input)
    if function is None:
        return np.array(a)
    return np.vectorize(function, otypes=[np.float64])(a) if a.size else np.zeros(a.shape)


def assign_each2(input1: Any, input2: Any, function: Callable | None) -> np.ndarray:
    """``function`` applied to each pair of values of two arrays of one shape."""
    a, b = np.asarray(input1), np.asarray(input2)
    if function is None:
        return np.array(a)
    if a.shape != b.shape:
        raise MXNetValueError(f"assign_each2: arguments input1, input2: shapes {a.shape} and {b.shape} differ")
    return np.vectorize(function, otypes=[np.float64])(a, b) if a.size else np.zeros(a.shape)


def np_reduce(dat: np.ndarray, axis: Any, keepdims: bool, numpy_reduce_func: Callable) -> np.ndarray:
    """``numpy_reduce_func`` over each axis of ``axis`` (None: all), from the last, keeping
    the reduced axes as 1 when ``keepdims``."""
    axes = [axis] if isinstance(axis, int) else (list(axis) if axis is not None else list(range(dat.ndim)))
    ret = dat
    for i in sorted(axes, reverse=True):
        ret = numpy_reduce_func(ret, axis=i)
    if keepdims:
        shape = list(dat.shape)
        for i in axes:
            shape[i] = 1
        ret = np.reshape(ret, tuple(shape))
    return ret


def create_sparse_array(shape: tuple, stype: str, data_init: float | None = None, rsp_indices: Any = None,
                        dtype: Any = None, modifier_func: Callable | None = None, density: float = .5,
                        shuffle_csr_indices: bool = False) -> NDArray:
    """A random sparse array (row ids of ``rsp_indices`` sorted first)."""
    if stype == "row_sparse":
        idx = None if rsp_indices is None else np.sort(np.asarray(rsp_indices))
        arr, _ = rand_sparse_ndarray(shape, stype, density=density, data_init=data_init, rsp_indices=idx,
                                     dtype=dtype, modifier_func=modifier_func)
    elif stype == "csr":
        arr, _ = rand_sparse_ndarray(shape, stype, density=density, data_init=data_init, dtype=dtype,
                                     modifier_func=modifier_func, shuffle_csr_indices=shuffle_csr_indices)
    else:
        raise AssertionError(f"Unknown storage type: {stype}")
    return arr


def create_sparse_array_zd(shape: tuple, stype: str, density: float, data_init: float | None = None,
                           rsp_indices: Any = None, dtype: Any = None, modifier_func: Callable | None = None,
                           shuffle_csr_indices: bool = False) -> NDArray:
    """``create_sparse_array`` where a row_sparse array stores exactly ``rsp_indices``."""
    if stype == "row_sparse":
        density = 0.0
        if rsp_indices is not None and len(rsp_indices) > shape[0]:
            raise MXNetValueError("create_sparse_array_zd: more rsp_indices than rows (argument rsp_indices)")
    return create_sparse_array(shape, stype, data_init=data_init, rsp_indices=rsp_indices, dtype=dtype,
                               modifier_func=modifier_func, density=density,
                               shuffle_csr_indices=shuffle_csr_indices)


@contextlib.contextmanager
def environment(*args: Any) -> Iterator[None]:
    """Set environment variables for the body of a ``with`` (``environment(name, value)`` or
    ``environment({name: value})``; None unsets); the old values come back afterwards."""
    if len(args) == 1 and isinstance(args[0], dict):
        env = dict(args[0])
    elif len(args) == 2:
        env = {args[0]: args[1]}
    else:
        raise MXNetArgumentError("environment: arguments: environment() takes one dict or a name and a value")
    saved = {k: os.environ.get(k) for k in env}

    def apply(values: dict) -> None:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    apply(env)
    try:
        yield
    finally:
        nd.waitall()
        apply(saved)


def compare_ndarray_tuple(t1: Any, t2: Any, rtol: float | None = None, atol: float | None = None) -> None:
    """Assert two optimizer states (an NDArray, None, or nested tuples of them) agree."""
    if t1 is None or t2 is None:
        return
    if isinstance(t1, tuple):
        for a, b in zip(t1, t2):
            compare_ndarray_tuple(a, b, rtol, atol)
    else:
        assert_almost_equal(t1, t2, rtol=rtol, atol=atol)


def compare_optimizer(opt1: Any, opt2: Any, shape: Any, dtype: Any, w_stype: str = "default",
                      g_stype: str = "default", rtol: float = 1e-4, atol: float = 1e-5,
                      compare_states: bool = True, ntensors: int = 1) -> None:
    """Run one update of ``opt1`` (a reference, on dense arrays) and ``opt2`` (on arrays of
    storage ``w_stype``/``g_stype``) from the same weight and gradient, and assert states and
    weights agree. A list of shapes runs ``opt2`` as a multi-tensor update over all of them."""
    ctx = default_context()

    def pair(stype: str, density: float | None) -> tuple[NDArray, NDArray]:
        if stype == "default":
            b = mx.random.uniform(shape=shape, ctx=ctx, dtype=dtype)
            return b.copyto(ctx), b
        if stype in ("row_sparse", "csr"):
            b = rand_ndarray(shape, stype, density=density, dtype=dtype)
            return b.copyto(ctx).tostype("default"), b
        raise MXNetValueError(f"compare_optimizer: storage type {stype!r} is not supported")

    if not isinstance(shape, list):
        if ntensors != 1:
            raise MXNetValueError("compare_optimizer: one shape takes ntensors=1")
        w1, w2 = pair(w_stype, 1)
        g1, g2 = pair(g_stype, None)
        state1 = opt1.create_state_multi_precision(0, w1)
        state2 = opt2.create_state_multi_precision(0, w2)
        if compare_states:
            compare_ndarray_tuple(state1, state2)
        opt1.update_multi_precision(0, w1, g1, state1)
        opt2.update_multi_precision(0, w2, g2, state2)
        if compare_states:
            compare_ndarray_tuple(state1, state2, rtol=rtol, atol=atol)
        assert_almost_equal(w1, w2, rtol=rtol, atol=atol)
        return
    w1 = tuple(mx.random.uniform(shape=s, ctx=ctx, dtype=dtype) for s in shape)
    g1 = tuple(mx.random.uniform(shape=s, ctx=ctx, dtype=dtype) for s in shape)
    w2 = tuple(w.copy() for w in w1)
    g2 = tuple(g.copy() for g in g1)
    state2 = [opt2.create_state_multi_precision(0, w2[i]) for i in range(ntensors)]
    opt2.update_multi_precision(list(range(ntensors)), w2, g2, state2)
    for i in range(ntensors):
        state1 = opt1.create_state_multi_precision(i, w1[i])
        opt1.update_multi_precision(i, w1[i], g1[i], state1)
        if compare_states:
            compare_ndarray_tuple(state1, state2[i], rtol, atol)
        compare_ndarray_tuple(w1[i], w2[i], rtol, atol)


__all__ = ["mx", "np", "rnd", "os", "sys", "Context",
           "default_context", "default_dtype", "default_rtols", "default_atols", "get_rtol", "get_atol",
           "get_tols", "same", "almost_equal", "assert_almost_equal", "assert_allclose", "find_max_violation",
           "assert_exception", "random_arrays", "random_uniform_arrays", "random_sample", "assign_each",
           "assign_each2", "np_reduce", "rand_shape_2d", "rand_shape_3d", "rand_shape_nd",
           "rand_sparse_ndarray", "rand_ndarray", "create_sparse_array", "create_sparse_array_zd",
           "environment", "compare_ndarray_tuple", "compare_optimizer"]
