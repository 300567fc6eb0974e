"""``mx.test_utils``: the helpers MXNet 1.x tests and examples use most.

Comparisons accept NDArrays (any storage type), SciPy matrices and NumPy arrays, with
MXNet 1.9.1's defaults: ``almost_equal`` rtol 1e-5 / atol 1e-20, ``assert_almost_equal``
per dtype (float16 1e-2 / 1e-1, float32 1e-4 / 1e-3, float64 1e-5 / 1e-20, integers exact). Random data comes from NumPy's
global generator, as in MXNet, so ``np.random.seed`` makes it reproducible: dense
arrays are standard normal, sparse ones uniform on [0, 1) at the given density.
"""
from __future__ import annotations

import bz2
import contextlib
import errno
import gzip
import json
import logging
import numbers
import os
import platform
import shutil
import struct
import sys
import time
import traceback
import urllib.request
import zipfile
from collections import OrderedDict
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import numpy as np
import numpy.random as rnd
import numpy.testing as npt

try:
    import scipy.stats as ss
except ImportError:  # as in MXNet: ``ss`` is None without SciPy
    ss = None

from ...device import Device, current_device
from . import io as _io
from . import ndarray as nd
from .ndarray import NDArray, array  # the face's NDArray (MXNet's class)
from .context import Context, current_context
from .base import MXNetArgumentError, MXNetValueError
from .util import getenv, setenv  # noqa: F401  (MXNet's test_utils has them too)
from .runtime import Features

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


@contextlib.contextmanager
def discard_stderr() -> Iterator[None]:
    """Discard what the body of a ``with`` writes to stderr: file descriptor 2, where C code
    writes (and ``sys.stderr``'s own descriptor when it differs, as under a capturing test
    runner), points at the null device, and ``sys.stderr`` writes there as well; all are
    restored afterwards. A descriptor that cannot be duplicated is left alone."""
    fds = {2}
    with contextlib.suppress(AttributeError, OSError, ValueError):
        fds.add(sys.stderr.fileno())
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    saved = {}
    for fd in fds:
        with contextlib.suppress(OSError):
            saved[fd] = os.dup(fd)
    old_stream = sys.stderr
    with open(os.devnull, "w") as null:
        for fd in saved:
            os.dup2(null.fileno(), fd)
        sys.stderr = null
        try:
            yield
        finally:
            sys.stderr = old_stream
            for fd, copy in saved.items():
                os.dup2(copy, fd)
                os.close(copy)


def same_array(array1: NDArray, array2: NDArray) -> bool:
    """Whether two NDArrays share one memory block: adding 1 to ``array1`` in place shows
    in ``array2`` (``array1`` is restored afterwards)."""
    array1[:] += 1
    shared = same(array1.asnumpy(), array2.asnumpy())
    array1[:] -= 1
    return shared and same(array1.asnumpy(), array2.asnumpy())



# ---- more of MXNet's helpers (tolerances, shapes, checks) ----------------------------------------
def set_default_context(ctx: Device) -> None:
    """Make ``ctx`` this thread's default device (inside a ``with ctx:`` block: until it ends)."""
    from ...device import set_default_device

    set_default_device(ctx)


def default_numeric_eps() -> dict:
    """Finite-difference steps per float dtype (powers of two, as MXNet's)."""
    return {np.dtype(np.float16): 2.0 ** -6, np.dtype(np.float32): 2.0 ** -9, np.dtype(np.float64): 2.0 ** -14}


def effective_dtype(dat: Any) -> np.dtype:
    """The dtype that decides ``dat``'s comparison tolerance: its own (no TF32 devices here)."""
    return np.dtype(dat.dtype)


def get_tolerance(dat: Any, tol: Any, default_tol: dict) -> float:
    """``tol`` when it is a number, else its entry (or ``default_tol``'s) for ``dat``'s dtype."""
    if isinstance(tol, numbers.Number):
        return tol
    dtype = effective_dtype(dat)
    return (tol or {}).get(dtype, default_tol[dtype])


def get_etol(etol: float | None = None) -> float:
    """The tolerated share of mismatching elements: ``etol``, else 0."""
    return 0 if etol is None else etol


def checkShapes(a: Any, b: Any) -> None:  # noqa: N802  (MXNet's name)
    """Raise AssertionError unless ``a`` and ``b`` have one shape."""
    if a.shape != b.shape:
        raise AssertionError(f"a.shape = {a.shape} and b.shape = {b.shape} are not equal")


def locationError(a: Any, b: Any, index: tuple, names: tuple, maxError: bool = False) -> str:  # noqa: N802,N803
    """A line naming where two arrays differ and their values there."""
    what = "maximum error" if maxError else "error"
    return f"Location of {what}: {index}, {names[0]}={float(a[index]):.8f}, {names[1]}={float(b[index]):.8f}"


def assert_almost_equal_ignore_nan(a: Any, b: Any, rtol: float | None = None, atol: float | None = None,
                                   names: tuple[str, str] = ("a", "b")) -> None:
    """``assert_almost_equal`` with the positions where either array is NaN left out."""
    a, b = np.array(_as_numpy(a)), np.array(_as_numpy(b))
    nan = np.isnan(a) | np.isnan(b)
    a[nan] = 0
    b[nan] = 0
    assert_almost_equal(a, b, rtol, atol, names)


def assert_almost_equal_with_err(a: Any, b: Any, rtol: Any = None, atol: Any = None, etol: float | None = None,
                                 names: tuple[str, str] = ("a", "b"), equal_nan: bool = False,
                                 mismatches: tuple[int, int] = (10, 10)) -> None:
    """Like ``assert_almost_equal``, but up to a share ``etol`` of the elements may differ."""
    etol = get_etol(etol)
    if etol <= 0:
        assert_almost_equal(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)
        return
    rtol, atol = get_tols(a, b, rtol, atol)
    a, b = _as_numpy(a), _as_numpy(b)
    close = np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)
    share = 1 - np.count_nonzero(close) / max(close.size, 1)
    if share > etol:
        idx, worst = find_max_violation(a, b, rtol, atol)
        raise AssertionError(f"Error {worst:f} exceeds tolerance rtol={rtol:e}, atol={atol:e} "
                             f"(mismatch {100 * share:f}% > etol {100 * etol:f}%).\n"
                             f"{locationError(*np.broadcast_arrays(a, b), idx, names, maxError=True)}")


def retry(n: int) -> Callable:
    """A decorator running a stochastic test up to ``n`` times until it passes (the last
    AssertionError propagates)."""
    if n <= 0:
        raise MXNetValueError(f"retry: argument n must be positive, got {n}")

    def decorate(f: Callable) -> Callable:
        def wrapper(*args: Any, **kwargs: Any) -> None:
            for attempt in range(n):
                try:
                    f(*args, **kwargs)
                    return
                except AssertionError:
                    if attempt == n - 1:
                        raise
                    nd.waitall()
        wrapper.__name__, wrapper.__doc__ = f.__name__, f.__doc__
        return wrapper
    return decorate


def shuffle_csr_column_indices(csr: Any) -> None:
    """Permute, in place and with NumPy's global generator, the column indices within each
    row of a csr matrix, leaving the values where they are (as MXNet's: it makes valid csr
    with unsorted columns out of random data). Takes a SciPy csr matrix, or anything whose
    ``indices`` can be written in place; the face's CSRNDArray keeps its parts read-only."""
    indptr = _as_numpy(csr.indptr)
    rows = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    order = np.lexsort((rnd.rand(rows.size), rows))
    shuffled = _as_numpy(csr.indices)[order]
    try:
        csr.indices[:] = shuffled
    except (ValueError, TypeError) as exc:
        raise MXNetValueError("shuffle_csr_column_indices: argument csr: its indices cannot be written in place "
                              f"({exc}); pass a scipy.sparse.csr_matrix") from None


def create_2d_tensor(rows: int, columns: int, dtype: Any = np.int64) -> NDArray:
    """A (rows, columns) array whose row i holds i."""
    return nd.array(np.broadcast_to(np.arange(rows).reshape(rows, 1), (rows, columns)), dtype=dtype)


def create_vector(size: int, dtype: Any = np.int64) -> NDArray:
    """0, 1, ..., size - 1."""
    return nd.array(np.arange(size), dtype=dtype)


def get_identity_mat(size: int) -> NDArray:
    """The float32 identity matrix of order ``size``."""
    return nd.array(np.eye(size, dtype=np.float32))


def get_identity_mat_batch(size: int) -> NDArray:
    """Two identity matrices of order ``size``, shape (2, size, size)."""
    return nd.array(np.stack([np.eye(size, dtype=np.float32)] * 2))


def rand_coord_2d(x_low: int, x_high: int, y_low: int, y_high: int) -> tuple:
    """One random integer point of [x_low, x_high) x [y_low, y_high)."""
    return (np.random.randint(x_low, x_high, dtype=np.int64), np.random.randint(y_low, y_high, dtype=np.int64))


def collapse_sum_like(a: np.ndarray, shape: tuple) -> np.ndarray:
    """Sum ``a`` down to ``shape`` (the inverse of broadcasting ``shape`` up to ``a.shape``)."""
    if len(a.shape) < len(shape):
        raise MXNetValueError(f"collapse_sum_like: cannot sum shape {a.shape} down to {shape} (argument shape)")
    if not shape:
        return a.sum()
    lead = len(a.shape) - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape) if s == 1 and a.shape[lead + i] != 1)
    return a.sum(axis=axes).reshape(shape) if axes else a.reshape(shape)


def list_gpus() -> range:
    """0 .. n-1 for the n GPUs this face can use."""
    from .context import num_gpus

    return range(num_gpus())


def is_cd_run() -> bool:
    """Whether this is MXNet's continuous-delivery pipeline (environment CD_JOB=1)."""
    return os.environ.get("CD_JOB", 0) == "1"


def is_aarch64_run() -> bool:
    """Whether this machine is an aarch64 one."""
    return platform.machine() == "aarch64"


def has_tvm_ops() -> bool:
    """Whether MXNet's TVM operators are present: never in this face."""
    return False


def is_op_runnable() -> bool:
    """Whether TVM-compiled operators may run here: on the CPU always, as MXNet answers."""
    return default_context().device_type == "cpu" or has_tvm_ops()


def use_np(func: Any) -> Any:
    """MXNet's NumPy-semantics decorator: this face has no mx.np, so it returns ``func`` unchanged."""
    return func


def get_cuda_compute_capability(ctx: Any) -> int:
    """The compute capability of ``ctx``'s GPU as MXNet gives it (major * 10 + minor)."""
    if getattr(ctx, "device_type", None) != "gpu":
        raise MXNetValueError(f"get_cuda_compute_capability: argument ctx must be a GPU context, got {ctx}")
    import cupy  # only GPU contexts reach here, and they need CuPy

    return int(cupy.cuda.Device(ctx.device_id).compute_capability)  # CuPy gives "80" for 8.0


# ---- random-generator checks (test_random's statistics) ------------------------------------------
def gen_buckets_probs_with_ppf(ppf: Callable, nbuckets: int) -> tuple[list, list]:
    """``nbuckets`` equally likely buckets ``(ppf(i/n), ppf((i+1)/n))`` and their probabilities."""
    if nbuckets <= 0:
        raise MXNetValueError(f"gen_buckets_probs_with_ppf: argument nbuckets must be positive, got {nbuckets}")
    edges = [ppf(i / float(nbuckets)) for i in range(nbuckets + 1)]
    return list(zip(edges[:-1], edges[1:])), [1.0 / nbuckets] * nbuckets


def mean_check(generator: Callable, mu: float, sigma: float, nsamples: int = 1000000) -> bool:
    """Whether the mean of ``generator(nsamples)`` lies within 3 standard errors of ``mu``."""
    m = np.array(generator(nsamples)).mean()
    bound = 3 * sigma / np.sqrt(nsamples)
    return bool(mu - bound < m < mu + bound)


def var_check(generator: Callable, sigma: float, nsamples: int = 1000000) -> bool:
    """Whether the sample variance of ``generator(nsamples)`` lies within 3 standard errors
    of ``sigma ** 2`` (the normal approximation of its spread)."""
    v = np.array(generator(nsamples)).var(ddof=1)
    bound = 3 * np.sqrt(2 * sigma ** 4 / (nsamples - 1))
    return bool(sigma ** 2 - bound < v < sigma ** 2 + bound)


def chi_square_check(generator: Callable, buckets: list, probs: Any, nsamples: int = 1000000) -> tuple:
    """(p value, observed counts, expected counts) of Pearson's chi-square test of
    ``generator(nsamples)`` against ``probs`` over ``buckets`` (ascending disjoint (low, high)
    ranges for a continuous distribution, else the possible values of a discrete one)."""
    if ss is None:
        raise ImportError("chi_square_check needs scipy.stats")
    if not isinstance(buckets, list) or len(probs) != len(buckets):
        raise MXNetValueError("chi_square_check: buckets must be a list as long as probs (arguments buckets, probs)")
    samples = np.asarray(generator(nsamples))
    expected = (nsamples * np.array(probs, dtype=np.float32)).astype(np.int32)
    if isinstance(buckets[0], (list, tuple)):
        edges = np.asarray(buckets, dtype=np.float32).reshape(-1)
        if np.any(np.diff(edges) < 0):
            raise MXNetValueError("chi_square_check: buckets must be ascending and disjoint (argument buckets)")
        ids = np.searchsorted(edges, samples, side="right")
        inside = ids % 2 == 1  # between a bucket's low and high edge
        observed = np.bincount(ids[inside] // 2, minlength=len(buckets))[:len(buckets)]
    else:
        observed = np.array([(samples == b).sum() for b in buckets])
    # Pearson's statistic as MXNet computed it: its expected counts are truncated to ints and
    # samples may fall outside the buckets, so the totals differ, which scipy.stats.chisquare
    # (1.11 on) refuses; the statistic itself does not need them equal
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(expected > 0, (observed - expected) ** 2 / expected.astype(np.float64), 0.0)
    p = float(ss.chi2.sf(terms.sum(), len(buckets) - 1))
    return p, observed, expected


def verify_generator(generator: Callable, buckets: list, probs: Any, nsamples: int = 1000000, nrepeat: int = 5,
                     success_rate: float = 0.2, alpha: float = 0.05) -> list:
    """Run ``chi_square_check`` ``nrepeat`` times; raise AssertionError unless at least
    ``success_rate`` of the runs have p > ``alpha``. Returns the p values."""
    runs = [chi_square_check(generator, buckets, probs, nsamples) for _ in range(nrepeat)]
    ps = [r[0] for r in runs]
    if sum(p > alpha for p in ps) < nrepeat * success_rate:
        raise AssertionError(f"Generator test fails, chi-square p={ps}, observed={[r[1] for r in runs]}, "
                             f"expected={[r[2] for r in runs]}; buckets={buckets}, probs={probs}")
    return ps


# ---- matrices with known spectra -----------------------------------------------------------------
def new_matrix_with_real_eigvals_2d(n: int) -> np.ndarray:
    """A well-conditioned n x n matrix with real eigenvalues in (-10, 10): ``P^-1 diag(d) P``
    with ``P`` an orthonormal matrix whose rows are scaled by factors in [0.5, 1] (so its
    condition number is at most 2)."""
    p = np.diag(np.random.uniform(0.5, 1.0, n)) @ new_orthonormal_matrix_2d(n)
    return np.linalg.inv(p) @ np.diag(np.random.uniform(-10.0, 10.0, n)) @ p


def new_matrix_with_real_eigvals_nd(shape: tuple) -> np.ndarray:
    """A batch of ``new_matrix_with_real_eigvals_2d`` matrices of shape ``(..., n, n)``."""
    n = shape[-1]
    batch = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
    return np.stack([new_matrix_with_real_eigvals_2d(n) for _ in range(batch)]).reshape(shape)


def new_orthonormal_matrix_2d(n: int) -> np.ndarray:
    """A random n x n orthonormal matrix (the Q of a QR factorisation)."""
    q, _ = np.linalg.qr(np.random.uniform(-1, 1, (n, n)))
    return q


def new_sym_matrix_with_real_eigvals_2d(n: int) -> np.ndarray:
    """A random symmetric n x n matrix ``Q diag(d) Q^T``."""
    q = new_orthonormal_matrix_2d(n)
    return q @ np.diag(np.random.uniform(-10, 10, n)) @ q.T


def new_sym_matrix_with_real_eigvals_nd(shape: tuple) -> np.ndarray:
    """A batch of ``new_sym_matrix_with_real_eigvals_2d`` matrices of shape ``(..., n, n)``."""
    n = shape[-1]
    batch = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
    return np.stack([new_sym_matrix_with_real_eigvals_2d(n) for _ in range(batch)]).reshape(shape)


class DummyIter(_io.DataIter):
    """An iterator that returns the first batch of ``real_iter`` forever (for timing a
    training loop without its input pipeline)."""

    def __init__(self, real_iter: Any) -> None:
        super().__init__()
        self.real_iter = real_iter
        self.provide_data = real_iter.provide_data
        self.provide_label = real_iter.provide_label
        self.batch_size = real_iter.batch_size
        self.the_batch = next(real_iter)

    def next(self) -> Any:
        return self.the_batch


# ---- data sets: downloaded only when absent --------------------------------------------------------
def download(url: str, fname: str | None = None, dirname: str | None = None, overwrite: bool = False,
             retries: int = 5) -> str:
    """Fetch ``url`` into ``fname`` (default: the URL's last part) inside ``dirname`` (made
    when missing) and return the file's path. An existing file is kept unless ``overwrite``.
    Failures are tried again up to ``retries`` times; the last one propagates. The file
    appears only when complete (written beside it, then renamed)."""
    if retries < 0:
        raise MXNetValueError(f"download: argument retries must be at least 0, got {retries}")
    if fname is None:
        fname = url.split("/")[-1]
    if dirname is None:
        dirname = os.path.dirname(fname)
    else:
        fname = os.path.join(dirname, fname)
    if dirname:
        os.makedirs(dirname, exist_ok=True)
    if not overwrite and os.path.exists(fname):
        logging.info("%s exists, skipping download", fname)
        return fname
    left = retries
    while True:
        partial = f"{fname}.part{os.getpid()}"
        try:
            with urllib.request.urlopen(url) as response, open(partial, "wb") as out:
                status = getattr(response, "status", None)
                if status not in (None, 200):
                    raise OSError(f"download: failed to open {url}: HTTP status {status}")
                shutil.copyfileobj(response, out, 1 << 20)
            os.replace(partial, fname)
            break
        except Exception:
            if os.path.exists(partial):
                os.remove(partial)
            left -= 1
            if left <= 0:
                raise
            print(f"download failed, retrying, {left} attempt{'s' if left > 1 else ''} left")
    logging.info("downloaded %s into %s successfully", url, fname)
    return fname


_MNIST_UBYTE = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                "t10k-labels-idx1-ubyte")
_CIFAR10 = ("train.rec", "test.rec", "train.lst", "test.lst")


def _fetch_zip_into_data(url: str, wanted: list[str]) -> None:
    """Download and unpack ``url`` into ./data unless every path of ``wanted`` is there."""
    os.makedirs("data", exist_ok=True)
    if all(os.path.exists(p) for p in wanted):
        return
    archive = download(url, dirname="data")
    with zipfile.ZipFile(archive) as zf:
        zf.extractall("data")


def get_mnist_ubyte() -> None:
    """MNIST's four idx-ubyte files in ./data (``data/train-images-idx3-ubyte`` ...),
    downloaded and unpacked from MXNet's mirror only when one of them is missing."""
    _fetch_zip_into_data("http://data.mxnet.io/mxnet/data/mnist.zip", [f"data/{n}" for n in _MNIST_UBYTE])


def get_cifar10() -> None:
    """CIFAR-10 in MXNet's RecordIO form in ./data/cifar, downloaded only when missing."""
    _fetch_zip_into_data("http://data.mxnet.io/mxnet/data/cifar10.zip", [f"data/cifar/{n}" for n in _CIFAR10])


def get_mnist_pkl() -> None:
    """``data/mnist.pkl.gz``, downloaded only when missing."""
    os.makedirs("data", exist_ok=True)
    if not os.path.exists("data/mnist.pkl.gz"):
        download("http://deeplearning.net/data/mnist/mnist.pkl.gz", dirname="data")


def get_mnist() -> dict:
    """MNIST as arrays: ``train_data`` / ``test_data`` float32 (n, 1, 28, 28) in [0, 1]
    (bytes / 255) and ``train_label`` / ``test_label`` int8, from the gzipped idx files
    (downloaded into the current folder when missing)."""
    base = "http://data.mxnet.io/data/mnist/"

    def read(label_name: str, image_name: str) -> tuple[np.ndarray, np.ndarray]:
        with gzip.open(download(base + label_name)) as f:
            f.read(8)
            label = np.frombuffer(f.read(), dtype=np.int8)
        with gzip.open(download(base + image_name), "rb") as f:
            _, _, rows, cols = struct.unpack(">IIII", f.read(16))
            image = np.frombuffer(f.read(), dtype=np.uint8).reshape(len(label), 1, rows, cols)
        return label, image.astype(np.float32) / 255

    train_lbl, train_img = read("train-labels-idx1-ubyte.gz", "train-images-idx3-ubyte.gz")
    test_lbl, test_img = read("t10k-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz")
    return {"train_data": train_img, "train_label": train_lbl, "test_data": test_img, "test_label": test_lbl}


def get_mnist_iterator(batch_size: int, input_shape: tuple, num_parts: int = 1, part_index: int = 0) -> tuple:
    """(train, validation) ``mx.io.MNISTIter`` over ./data's MNIST (fetched when missing):
    flat batches unless ``input_shape`` has three dimensions; the training one shuffled."""
    get_mnist_ubyte()
    flat = len(input_shape) != 3
    train = _io.MNISTIter(image="data/train-images-idx3-ubyte", label="data/train-labels-idx1-ubyte",
                          input_shape=input_shape, batch_size=batch_size, shuffle=True, flat=flat,
                          num_parts=num_parts, part_index=part_index)
    val = _io.MNISTIter(image="data/t10k-images-idx3-ubyte", label="data/t10k-labels-idx1-ubyte",
                        input_shape=input_shape, batch_size=batch_size, flat=flat,
                        num_parts=num_parts, part_index=part_index)
    return train, val


def get_zip_data(data_dir: str, url: str, data_origin_name: str) -> None:
    """Download the zip ``url`` as ``data_dir/data_origin_name`` and unpack it into
    ``data_dir``, unless that zip is already there."""
    origin = os.path.join(data_dir, data_origin_name)
    if not os.path.exists(origin):
        download(url, dirname=data_dir, overwrite=False)
        with zipfile.ZipFile(origin) as zf:
            zf.extractall(path=data_dir)


def get_bz2_data(data_dir: str, data_name: str, url: str, data_origin_name: str) -> None:
    """``data_dir/data_name``: when missing, download ``url`` as ``data_dir/data_origin_name``
    (a bz2 file), decompress it into ``data_name`` and delete the compressed file."""
    target = os.path.join(data_dir, data_name)
    origin = os.path.join(data_dir, data_origin_name)
    if os.path.exists(target):
        return
    download(url, fname=origin, dirname=data_dir, overwrite=False)
    partial = f"{target}.part{os.getpid()}"
    with bz2.BZ2File(origin, "rb") as src, open(partial, "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)
    os.replace(partial, target)
    os.remove(origin)


def get_im2rec_path(home_env: str = "MXNET_HOME") -> str:
    """The path of MXNet's ``tools/im2rec.py``: this face has none, so OSError (as MXNet
    raises when it cannot find it) unless ``$MXNET_HOME/tools/im2rec.py`` exists."""
    root = os.environ.get(home_env)
    for candidate in ([os.path.join(root, "tools", "im2rec.py"), os.path.join(root, "..", "..", "tools", "im2rec.py")]
                      if root else []):
        if os.path.isfile(candidate):
            return candidate
    raise IOError("Could not find path to tools/im2rec.py")

# What ``from mxnet.test_utils import *`` hands a test: MXNet's module has no ``__all__``, so
# every public name in it (the modules it imports included); here the same names where this
# face has them (the Symbol checkers are absent: no Symbol API).
__all__ = [
    # modules and names MXNet's test_utils imports
    "time", "gzip", "struct", "traceback", "numbers", "sys", "os", "platform", "errno", "logging", "bz2",
    "zipfile", "json", "contextmanager", "OrderedDict", "np", "npt", "rnd", "ss", "mx", "Context",
    "current_context", "array", "NDArray", "use_np", "getenv", "setenv", "Features", "get_cuda_compute_capability",
    # contexts, dtypes and tolerances
    "default_context", "set_default_context", "default_dtype", "default_rtols", "default_atols",
    "default_numeric_eps", "effective_dtype", "get_tolerance", "get_tols", "get_atol", "get_rtol", "get_etol",
    # random data
    "random_arrays", "random_uniform_arrays", "random_sample", "shuffle_csr_column_indices", "assign_each",
    "assign_each2", "create_2d_tensor", "create_vector", "get_identity_mat", "get_identity_mat_batch",
    "rand_sparse_ndarray", "rand_ndarray", "create_sparse_array", "create_sparse_array_zd", "rand_shape_2d",
    "rand_shape_3d", "rand_shape_nd", "rand_coord_2d", "np_reduce",
    # comparisons
    "same", "checkShapes", "almost_equal", "locationError", "assert_almost_equal", "assert_allclose",
    "assert_almost_equal_with_err", "assert_almost_equal_ignore_nan", "assert_exception", "find_max_violation",
    "retry", "same_array", "discard_stderr", "environment", "collapse_sum_like",
    # data sets and iterators
    "list_gpus", "download", "get_mnist", "get_mnist_pkl", "get_mnist_ubyte", "get_cifar10",
    "get_mnist_iterator", "get_zip_data", "get_bz2_data", "get_im2rec_path", "DummyIter",
    # random-generator statistics
    "gen_buckets_probs_with_ppf", "mean_check", "var_check", "chi_square_check", "verify_generator",
    # optimizers, platform, linear algebra
    "compare_ndarray_tuple", "compare_optimizer", "is_cd_run", "is_aarch64_run", "has_tvm_ops",
    "is_op_runnable", "new_matrix_with_real_eigvals_2d", "new_matrix_with_real_eigvals_nd",
    "new_orthonormal_matrix_2d", "new_sym_matrix_with_real_eigvals_2d", "new_sym_matrix_with_real_eigvals_nd",
]
