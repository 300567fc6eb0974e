"""``mx.test_utils``: the helpers MXNet 1.x tests and examples use most.

Comparisons accept NDArrays (any storage type), SciPy matrices and NumPy arrays, and
default to MXNet's tolerances (rtol 1e-5, atol 1e-20). Random data comes from NumPy's
global generator, as in MXNet, so ``np.random.seed`` makes it reproducible: dense
arrays are standard normal, sparse ones uniform on [0, 1) at the given density.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import numpy.random as rnd

from ...device import Device, current_device
from ...ndarray import NDArray
from . import ndarray as nd


def default_context() -> Device:
    """The device tests run on: the current default device."""
    return current_device()


def default_dtype() -> type:
    return np.float32


def get_rtol(rtol: float | None = None) -> float:
    return 1e-5 if rtol is None else rtol


def get_atol(atol: float | None = None) -> float:
    return 1e-20 if atol is None else atol


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
    a, b = _as_numpy(a), _as_numpy(b)
    if not use_broadcast and a.shape != b.shape:
        raise AssertionError(f"{names[0]}.shape = {a.shape} and {names[1]}.shape = {b.shape} are not equal")
    if a.dtype == np.bool_ and b.dtype == np.bool_:
        np.testing.assert_equal(a, b)
        return
    rtol, atol = get_rtol(rtol), get_atol(atol)
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
    if distribution != "uniform":
        raise NotImplementedError(f"distribution {distribution!r} is not supported here; use 'uniform'")
    if stype == "row_sparse":
        if rsp_indices is not None:
            indices = np.asarray(rsp_indices)
            if len(indices) > shape[0]:
                raise ValueError("more rsp_indices than rows")
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
            raise ValueError(f"csr arrays are 2-d, got shape {shape}")
        if shuffle_csr_indices:
            raise NotImplementedError("csr arrays here always keep sorted column indices")
        csr = _uniform_csr(shape[0], shape[1], density, dtype, data_init, ctx)
        return csr, (csr.indptr, csr.indices, csr.data)
    raise ValueError(f"unknown storage type {stype!r}")


def _uniform_csr(rows: int, cols: int, density: float, dtype: Any, data_init: float | None, ctx: Any):
    import scipy.sparse as sp

    if not 0 <= density <= 1:
        raise ValueError("density has to be between 0 and 1")
    if rows <= 0 or cols <= 0:
        raise ValueError("num_rows or num_cols should be greater than 0")
    draw = np.float64 if np.dtype(dtype) == np.float64 else np.float32  # SciPy has no float16
    m = sp.random(rows, cols, density, dtype=draw, format="csr")
    if data_init is not None:
        m.data.fill(data_init)
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


__all__ = ["default_context", "default_dtype", "get_rtol", "get_atol", "same", "almost_equal",
           "assert_almost_equal", "find_max_violation", "assert_exception", "random_arrays",
           "rand_shape_2d", "rand_shape_3d", "rand_shape_nd", "rand_sparse_ndarray", "rand_ndarray"]
