"""Creating containers: ``array``, ``zeros``/``ones``/``empty``/``full``, ``csr_matrix``,
``row_sparse_array`` and ``from_dlpack``.

Any array-like converts: NumPy and CuPy arrays, Python data, and other libraries' arrays
through DLPack (``__dlpack__``: PyTorch, JAX, ...), the CUDA array interface (numba device
arrays, on a gpu) or ``__array__``.

Components given by the caller are validated (``validation.py``) before any kernel sees
them. Arrays already of a supported dtype on the target device are used without a copy
(as ``scipy.sparse.csr_matrix`` does); pass ``copy=True`` for independent storage.
"""
from __future__ import annotations

import sys
from typing import Any

import numpy as np

from . import alloc
from . import device as _dev
from .device import Device
from .dtypes import DEFAULT_DTYPE, DEFAULT_INDEX_DTYPE, VALUE_DTYPES, source_dtype, value_dtype
from .errors import SparseFormatError, SparseOpsError, StorageTypeError
from .ndarray import STYPES, CSRNDArray, NDArray, RowSparseNDArray, share_version
from .ndarray.dense import CONVERSIONS
from .ndarray.sparse import unify_indices
from .validation import check_csr, csr_is_canonical, normalize_shape


def _is_scipy_sparse(obj: Any) -> bool:
    if "scipy.sparse" not in sys.modules:  # nothing can be a SciPy matrix before SciPy is imported
        return False
    import scipy.sparse as sp

    return sp.issparse(obj)


def _target_device(device: Any, *arrays: Any) -> Device:
    if device is not None:
        return _dev.as_device(device)
    for a in arrays:
        dev = _dev.device_of_array(a)
        if dev is not None:
            return dev
    return _dev.current_device()


def _values(obj: Any, dtype: Any, device: Device, copy: bool, what: str) -> Any:
    """``obj`` as a value array of ``device``: its own dtype if it is an array, float32 for
    Python data, ``dtype`` when given."""
    obj = _foreign_array(obj, device)
    if dtype is not None:
        dt = value_dtype(dtype)
    elif hasattr(obj, "dtype") and hasattr(obj, "shape"):
        dt = source_dtype(obj.dtype)
    else:
        dt = DEFAULT_DTYPE
    try:
        return _dev.on_device(obj, device, dtype=dt, copy=copy)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"cannot make {what} of dtype {dt.name} from {type(obj).__name__}: {exc} "
                        f"({_PROTOCOLS})") from exc


def _indices(obj: Any, device: Device, copy: bool, name: str) -> Any:
    """An index array kept in its own integer dtype (int64 for Python data); floats are refused."""
    obj = _foreign_array(obj, device)
    if not hasattr(obj, "dtype"):
        obj = np.asarray(obj)
        if obj.size == 0:
            obj = obj.astype(DEFAULT_INDEX_DTYPE)
    if obj.dtype.kind not in "iu":
        raise SparseFormatError(f"{name} must have an integer dtype, got {obj.dtype}")
    if not obj.dtype.isnative:  # kernels read indices in this machine's byte order
        return _dev.on_device(obj, device, dtype=obj.dtype.newbyteorder("="), copy=copy)
    return _dev.on_device(obj, device, copy=copy)


# ---- dense ---------------------------------------------------------------------------------
def array(obj: Any, dtype: Any = None, device: Device | str | None = None) -> NDArray:
    """A new container holding a copy of ``obj``.

    Containers keep their storage type and SciPy matrices become csr (as in MXNet);
    anything else array-like becomes dense: NumPy and CuPy arrays, Python data, and other
    libraries' arrays (a PyTorch tensor, a numba device array) through DLPack, the CUDA
    array interface or ``__array__``. The dtype is ``dtype`` if given, else the source's
    own for arrays and float32 for Python numbers and lists. ``from_dlpack`` shares the
    memory instead of copying.
    """
    if isinstance(obj, NDArray):
        dev = _dev.as_device(device) if device is not None else obj.device
        moved = obj.to(dev)
        return moved.astype(obj.dtype if dtype is None else dtype, copy=moved is obj)
    if _is_scipy_sparse(obj):
        return csr_matrix(obj, dtype=dtype, device=device, copy=True)
    if device is None and hasattr(obj, "__cuda_array_interface__") and not hasattr(obj, "__dlpack__"):
        device = _dev.gpu(0)  # device memory stays on a gpu unless told otherwise
    obj = _foreign_array(obj, device)  # before the device is chosen: a DLPack gpu tensor stays there
    dev = _target_device(device, obj)
    return NDArray(_values(obj, dtype, dev, copy=True, what="an array"), dev)


def _foreign_array(obj: Any, device: Any) -> Any:
    """Another library's array as a NumPy (host) or CuPy (gpu) array, zero-copy where the
    protocol allows: DLPack first (it carries the device), then the CUDA array interface
    (device memory: CuPy reads it when the target is a gpu), then ``__array__``. NumPy and
    CuPy arrays, Python data and anything else come back as they are."""
    if isinstance(obj, (np.ndarray, np.generic, list, tuple, int, float, bool)) or _dev.is_cupy_array(obj):
        return obj
    what = type(obj).__module__.split(".")[0] + "." + type(obj).__qualname__
    try:
        if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
            return _dlpack_array(obj)
        if hasattr(obj, "__cuda_array_interface__"):
            return _cuda_array(obj, what, device)
        if hasattr(obj, "__array__"):
            return np.asarray(obj)
    except SparseOpsError:  # no gpu here, say: the message says what is missing
        raise
    except (TypeError, ValueError, RuntimeError, BufferError) as exc:
        hint = ("detach it first: tensor.detach()" if getattr(obj, "requires_grad", False) else
                f"sparse_ops holds {', '.join(d.name for d in VALUE_DTYPES)}: convert the source to one of them")
        raise TypeError(f"cannot make an array from a {what}: {exc} ({hint}); once it converts, "
                        f"sparse_ops.from_dlpack(obj) shares its memory instead of copying") from exc
    if hasattr(obj, "dtype") and not isinstance(obj.dtype, np.dtype):
        raise TypeError(f"cannot make an array from a {what}: it speaks none of DLPack (__dlpack__), the CUDA "
                        f"array interface or __array__; {_PROTOCOLS}")
    return obj


_PROTOCOLS = ("sparse_ops.array takes NumPy/CuPy arrays, Python data and objects with __dlpack__ (see "
              "sparse_ops.from_dlpack, zero-copy), __cuda_array_interface__ or __array__")


def _cuda_array(obj: Any, what: str, device: Any) -> Any:
    """An object in gpu memory (``__cuda_array_interface__``: numba device arrays, ...) as a
    CuPy array sharing it, for a gpu target."""
    dev = _dev.as_device(device)
    if dev.device_type != "gpu":
        raise TypeError(f"a {what} lives in gpu memory (__cuda_array_interface__): pass device=sparse_ops.gpu(i), "
                        f"or copy it to the host first")
    xp = _dev.array_module(dev)  # DeviceUnavailableError where there is no gpu
    if xp is np:  # the simulated gpu holds host memory: the object's own host copy
        return np.asarray(obj.copy_to_host() if hasattr(obj, "copy_to_host") else obj)
    with xp.cuda.Device(dev.device_id):
        return xp.asarray(obj)


def _dlpack_array(obj: Any) -> Any:
    """The NumPy (cpu) or CuPy (gpu) array sharing the memory of a DLPack producer."""
    kind, dev_id = obj.__dlpack_device__()
    if kind == 1:  # kDLCPU
        return np.from_dlpack(obj)
    if kind in (2, 3):  # kDLCUDA, kDLCUDAHost
        xp = _dev.array_module(_dev.gpu(dev_id))
        if xp is np:
            raise TypeError(f"a DLPack array in gpu memory (device {dev_id}) needs CuPy and a real gpu")
        return xp.from_dlpack(obj)
    raise TypeError(f"unsupported DLPack device type {kind}")


def from_dlpack(obj: Any, device: Device | str | None = None) -> NDArray:
    """A dense container sharing memory with a DLPack producer (NumPy, CuPy, PyTorch, ...),
    copied only when ``device`` asks for another device than the producer's (a dense
    sparse_ops array keeps its device and shares its count of in-place writes)."""
    if not (hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__")):
        raise TypeError(f"from_dlpack needs an object with __dlpack__ and __dlpack_device__, got a "
                        f"{type(obj).__name__}; sparse_ops.array(obj) copies other array-likes")
    if isinstance(obj, NDArray) and obj.stype == "default":  # ours: its own device (a simulated gpu's is NumPy)
        own, data = obj.device, obj._data
    else:
        kind, dev_id = obj.__dlpack_device__()
        data = _dlpack_array(obj)
        own = _dev.cpu() if kind == 1 else _dev.gpu(dev_id)
    dev = own if device is None else _dev.as_device(device)
    source_dtype(data.dtype)
    if dev != own:
        return NDArray(_dev.on_device(data, dev, copy=True), dev)
    return share_version(NDArray(data, dev), obj) if isinstance(obj, NDArray) else NDArray(data, dev)


def coerce(value: Any, stype: str, dtype: Any, device: Device, shape: tuple[int, ...]) -> NDArray:
    """``value`` (container, array-like, SciPy matrix, scalar) as a fresh container of
    ``stype``/``dtype`` on ``device``: what ``x[:] = value`` stores."""
    dt = value_dtype(dtype)
    if np.isscalar(value):
        if value == 0:
            return zeros(shape, stype=stype, dtype=dt, device=device)
        if stype == "row_sparse":  # every row stored with the value, as MXNet 1.9's rsp[:] = v
            return full(shape, value, stype=stype, dtype=dt, device=device)
        raise ValueError(f"cannot assign the non-zero scalar {value!r} to a {stype} array")
    if isinstance(value, NDArray):
        moved = value.to(device)
        if moved.stype != stype:
            new = moved.tostype(stype)
        else:
            new = value.copy() if moved is value else moved
    else:
        new = array(value, device=device)
        if new.stype != stype:
            new = new.tostype(stype)
    return new.astype(dt, copy=False)


# ---- filled arrays ----------------------------------------------------------------------
def zeros(shape: Any, stype: str = "default", dtype: Any = "float32",
          device: Device | str | None = None) -> NDArray:
    """An array of zeros; sparse storage types store nothing."""
    shape = normalize_shape(shape)
    dt = value_dtype(dtype)
    dev = _dev.as_device(device)
    xp = dev.xp
    if stype == "default":
        if xp is np:
            return NDArray(alloc.zeros(shape, dt), dev)
        with _dev.allocating_on(dev):
            return NDArray(xp.zeros(shape, dtype=dt), dev)
    _check_stype(stype, "zeros")
    if stype == "csr":
        shape = normalize_shape(shape, ndim=2)
        with _dev.allocating_on(dev):
            return CSRNDArray._trusted(xp.zeros(0, dt), xp.zeros(0, DEFAULT_INDEX_DTYPE),
                                       xp.zeros(shape[0] + 1, DEFAULT_INDEX_DTYPE), shape, dev)
    if len(shape) < 1:
        raise SparseFormatError("row_sparse arrays have at least one dimension")
    with _dev.allocating_on(dev):
        return RowSparseNDArray._trusted(xp.zeros((0, *shape[1:]), dt), xp.zeros(0, DEFAULT_INDEX_DTYPE),
                                         shape, dev)


def empty(shape: Any, stype: str = "default", dtype: Any = "float32",
          device: Device | str | None = None) -> NDArray:
    """An uninitialised dense array (sparse storage types: an empty sparse array)."""
    if stype != "default":
        return zeros(shape, stype=stype, dtype=dtype, device=device)
    shape = normalize_shape(shape)
    dev = _dev.as_device(device)
    if dev.xp is np:
        return NDArray(alloc.empty(shape, value_dtype(dtype)), dev)
    with _dev.allocating_on(dev):
        return NDArray(dev.xp.empty(shape, dtype=value_dtype(dtype)), dev)


def full(shape: Any, val: Any, stype: str = "default", dtype: Any = "float32",
         device: Device | str | None = None) -> NDArray:
    """An array with every entry equal to ``val`` (sparse storage types store every entry
    unless ``val`` is 0)."""
    _check_stype(stype, "full")
    if isinstance(val, (str, bytes)) or not np.isscalar(val) and np.ndim(val) != 0:
        raise TypeError(f"full: the value must be a number, got {val!r}")
    if stype != "default" and val == 0:
        return zeros(shape, stype=stype, dtype=dtype, device=device)
    shape = normalize_shape(shape)
    dev = _dev.as_device(device)
    dt = value_dtype(dtype)
    if dt.kind in "iu" and isinstance(val, (float, np.floating)) and not np.isfinite(val):
        raise ValueError(f"full: the value {val!r} does not fit dtype {dt.name} (an integer dtype has no NaN or "
                         "infinity)")
    with _dev.allocating_on(dev):
        try:
            values = dev.xp.full(shape, val, dtype=dt)
        except OverflowError:
            raise ValueError(f"full: the value {val!r} does not fit dtype {dt.name}") from None
        dense = NDArray(values, dev)
    return dense if stype == "default" else dense.tostype(stype)


def ones(shape: Any, stype: str = "default", dtype: Any = "float32",
         device: Device | str | None = None) -> NDArray:
    """An array of ones."""
    return full(shape, 1, stype=stype, dtype=dtype, device=device)


# ---- sparse --------------------------------------------------------------------------------
def csr_matrix(arg: Any, shape: Any = None, dtype: Any = None,
               device: Device | str | None = None, copy: bool = False, check: bool = True) -> CSRNDArray:
    """A csr array from ``(data, indices, indptr)``, ``(data, (row, col))`` (duplicates
    summed), a shape ``(M, N)`` (empty), a SciPy sparse matrix or array (zero-copy when
    canonical), a dense array-like, or another container.

    Components must be canonical (sorted, unique column indices per row): anything else
    raises ``SparseFormatError`` naming the broken invariant, at once, or with
    ``check=False`` (``(data, indices, indptr)`` only) on the array's first use or
    ``check_format()``, as MXNet's constructors build first and check later.
    """
    if isinstance(arg, NDArray):
        out = array(arg, dtype=dtype, device=device)
        out = out if out.stype == "csr" else out.tostype("csr")
        return _expect_shape(out, shape)
    if _is_scipy_sparse(arg):
        return _expect_shape(_csr_from_scipy(arg, dtype, device, copy), shape)
    if isinstance(arg, tuple) and _is_shape(arg):
        return zeros(arg if shape is None else shape, stype="csr",
                     dtype=DEFAULT_DTYPE if dtype is None else dtype, device=device)
    if isinstance(arg, tuple) and len(arg) == 3:
        dev = _target_device(device, *arg)
        data = _values(arg[0], dtype, dev, copy, "csr data")
        indices = _indices(arg[1], dev, copy, "csr indices")
        indptr = _indices(arg[2], dev, copy, "csr indptr")
        if shape is None:
            if indptr.ndim != 1 or indptr.shape[0] < 1:
                raise SparseFormatError("csr indptr must be 1-d with at least one entry")
            cols = int(indices.max()) + 1 if indices.size and indices.ndim == 1 else 0
            shape = (indptr.shape[0] - 1, cols)
        return CSRNDArray(data, indices, indptr, shape, dev, check=check)
    if isinstance(arg, tuple) and len(arg) == 2 and isinstance(arg[1], (tuple, list)) and len(arg[1]) == 2:
        return _csr_from_coo(arg[0], arg[1][0], arg[1][1], shape, dtype, device)
    if isinstance(arg, tuple) and len(arg) in (2, 3):
        raise TypeError("csr_matrix takes (data, indices, indptr), (data, (row, col)) or a shape (M, N)")
    dense = array(arg, dtype=dtype, device=device)
    return _expect_shape(dense.tostype("csr"), shape)


def row_sparse_array(arg: Any, shape: Any = None, dtype: Any = None,
                     device: Device | str | None = None, copy: bool = False, check: bool = True) -> RowSparseNDArray:
    """A row_sparse array from ``(data, indices)`` (indices sorted and unique), a shape
    (empty), a dense array-like, a SciPy matrix, or another container. ``check=False``
    (``(data, indices)`` only) defers the validation to the first use or ``check_format()``."""
    if isinstance(arg, NDArray):
        out = array(arg, dtype=dtype, device=device)
        out = out if out.stype == "row_sparse" else out.tostype("row_sparse")
        return _expect_shape(out, shape)
    if isinstance(arg, tuple) and _is_shape(arg):
        return zeros(arg if shape is None else shape, stype="row_sparse",
                     dtype=DEFAULT_DTYPE if dtype is None else dtype, device=device)
    if isinstance(arg, tuple) and len(arg) == 2:
        dev = _target_device(device, *arg)
        data = _values(arg[0], dtype, dev, copy, "row_sparse data")
        indices = _indices(arg[1], dev, copy, "row_sparse indices")
        if shape is None:
            if indices.ndim != 1:
                raise SparseFormatError(f"row_sparse indices must be 1-d, got shape {tuple(indices.shape)}")
            rows = int(indices.max()) + 1 if indices.size else 0
            shape = (rows, *data.shape[1:])
        return RowSparseNDArray(data, indices, shape, dev, check=check)
    if _is_scipy_sparse(arg):
        return _expect_shape(csr_matrix(arg, dtype=dtype, device=device).tostype("row_sparse"), shape)
    dense = array(arg, dtype=dtype, device=device)
    return _expect_shape(dense.tostype("row_sparse"), shape)


def _csr_from_scipy(m: Any, dtype: Any, device: Any, copy: bool) -> CSRNDArray:
    # SciPy's C conversion routines trust the index arrays and take any dtype, so check them
    # (and the values' dtype) before calling any.
    if dtype is None:
        source_dtype(m.dtype)
    if m.format == "csc":
        check_csr(m.data, m.indices, m.indptr, normalize_shape(m.shape[::-1], ndim=2), canonical=False)
        m = m.tocsr()
    elif m.format != "csr":
        coo = m.tocoo()
        return _csr_from_coo(coo.data, coo.row, coo.col, coo.shape, dtype, device)
    dev = _target_device(device)
    data = _values(m.data, dtype, dev, copy, "csr data")
    # SciPy keeps any integer index dtype it is given (uint8 ...): int32 or int64 here, as the
    # (data, indices, indptr) form makes them, before a row id can wrap in a narrow dtype
    indices, indptr = unify_indices(_indices(m.indices, dev, copy, "csr indices"),
                                    _indices(m.indptr, dev, copy, "csr indptr"))
    shape = normalize_shape(m.shape, ndim=2)
    check_csr(data, indices, indptr, shape, full=True, canonical=False)
    if not csr_is_canonical(indices, indptr):
        import scipy.sparse as sp

        canon = sp.csr_matrix((_dev.to_host(data), _dev.to_host(indices), _dev.to_host(indptr)),
                              shape=shape, copy=True)
        canon.sum_duplicates()
        return _csr_from_scipy(canon, None, dev, copy=False)
    return CSRNDArray._trusted(data, indices, indptr, shape, dev)


def _csr_from_coo(data: Any, row: Any, col: Any, shape: Any, dtype: Any, device: Any) -> CSRNDArray:
    """COO triplets to csr on the host (sorting, duplicates summed), then onto the device."""
    dev = _target_device(device, data, row, col)
    host = _dev.cpu()
    values = _values(data, dtype, host, False, "csr data")
    row = _indices(row, host, False, "coo row")
    col = _indices(col, host, False, "coo col")
    if not (values.ndim == row.ndim == col.ndim == 1) or not (values.shape == row.shape == col.shape):
        raise SparseFormatError(
            f"coo data, row and col must be 1-d of one length, got {values.shape}, {row.shape}, {col.shape}"
        )
    if shape is None:
        shape = (int(row.max()) + 1 if row.size else 0, int(col.max()) + 1 if col.size else 0)
    shape = normalize_shape(shape, ndim=2)
    for name, idx, bound in (("row", row, shape[0]), ("col", col, shape[1])):
        if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= bound):
            raise SparseFormatError(f"coo {name} indices must lie in [0, {bound})")
    row = row.astype(np.int64, copy=False)
    col = col.astype(np.int64, copy=False)
    order = np.lexsort((col, row))
    row, col, values = row[order], col[order], values[order]
    first = np.ones(row.shape[0], dtype=bool)
    first[1:] = (row[1:] != row[:-1]) | (col[1:] != col[:-1])
    starts = np.flatnonzero(first)
    summed = np.add.reduceat(values, starts) if starts.size else values[:0]
    counts = np.bincount(row[starts], minlength=shape[0])
    indptr = np.zeros(shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    parts = [_dev.on_device(p, dev) for p in (summed.astype(values.dtype, copy=False), col[starts], indptr)]
    return CSRNDArray._trusted(parts[0], parts[1], parts[2], shape, dev)


# ---- helpers -------------------------------------------------------------------------------
def _is_shape(arg: tuple) -> bool:
    return all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in arg)


def _check_stype(stype: str, what: str) -> None:
    if stype not in STYPES:
        raise StorageTypeError(f"{what}: unknown storage type {stype!r} (argument stype); expected one of {STYPES}")


def _expect_shape(x: NDArray, shape: Any) -> NDArray:
    if shape is not None and normalize_shape(shape) != x.shape:
        raise SparseFormatError(f"shape {tuple(shape)} does not match the input's shape {x.shape}")
    return x


CONVERSIONS.update(coerce=coerce, csr_matrix=csr_matrix)
