"""The dense container, ``NDArray`` (storage type ``default``), and what all containers share."""
from __future__ import annotations

from typing import Any, Iterator

import numpy as np

from .. import device as _dev
from ..device import Device
from ..dtypes import value_dtype
from .view import ComponentView

STYPES = ("default", "row_sparse", "csr")

# The conversions between storage types and the constructors need every container class, so
# they live above the classes (``storage.py``, ``creation.py``) and put themselves here when
# imported (``sparse_ops`` imports both at once): ``cast_storage``, ``densify_into``,
# ``coerce``, ``csr_matrix``. The containers' methods call them through this table.
CONVERSIONS: dict[str, Any] = {}


def convert(x: "NDArray", stype: str) -> "NDArray":
    """``x`` in storage type ``stype``, never recorded (``x.tostype`` records while recording)."""
    return CONVERSIONS["cast_storage"](x, stype)


# In-place writes are counted per memory, as torch's version counters are: an array and the
# views of it made by indexing or ``detach`` share one counter (a one-item list, made at the
# first write or view), so a write through any of them is seen by a node that kept another.
def bump_version(x: "NDArray") -> None:
    """Count one in-place write into ``x``."""
    v = getattr(x, "_version", None)
    if v is None:
        x._version = v = [0]
    v[0] += 1


def share_version(view: "NDArray", base: "NDArray") -> "NDArray":
    """Make ``view`` (sharing ``base``'s memory) count its writes with ``base``'s; returns it."""
    v = getattr(base, "_version", None)
    if v is None:
        base._version = v = [0]
    view._version = v
    return view


# NDArray and its dense subclasses (the MXNet face's): the classes whose values array is the
# whole array, so its shape is the array's (the plan key reads it there: the fast path).
DENSE_CLASSES: set = set()


class NDArray:
    """An n-d array of one supported dtype on one device, dense (``stype == "default"``).

    ``RowSparseNDArray`` and ``CSRNDArray`` subclass it, as in MXNet, so
    ``isinstance(x, NDArray)`` holds for every container. Create arrays with
    ``sparse_ops.array``, ``zeros``, ``csr_matrix`` and friends rather than this class.
    """

    # ``_version`` counts in-place writes (``bump_version``; unset until the first write or
    # view): the tape compares it, as torch's version counters, to refuse a backward reading
    # an array changed since recorded
    __slots__ = ("_data", "_device", "_ag", "_version", "__weakref__")
    stype = "default"
    # above NumPy's: ``np.float32(2) * x`` and ``ndarray + x`` defer to our operators, as
    # MXNet's NDArray has them do, instead of reading x through ``__array__`` (which would
    # give a NumPy array and leave the autograd graph)
    __array_priority__ = 1000.0
    # A subclass that shows its components as other objects than the library's views (the
    # MXNet face's sparse arrays, whose ``data``/``indices``/``indptr`` are NDArrays) names
    # here the library class it is an instance of for kernels: the invoke path hands
    # kernels, the tape and gradients a ``kernel_form`` of it. None: the array itself.
    _kernel_class: type | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.stype == "default":
            DENSE_CLASSES.add(cls)

    def __init__(self, data: Any, device: Device | None = None) -> None:
        self._data = data if type(data) is not ComponentView else data.view(np.ndarray)
        self._device = device if device is not None else _dev.current_device()
        self._ag = None  # autograd.AGInfo once the array takes part in autograd

    # ---- description -------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self._data.shape

    @property
    def dtype(self) -> np.dtype:
        return self._data.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def device(self) -> Device:
        return self._device

    context = device  # MXNet's name
    ctx = device

    @property
    def data(self) -> Any:
        """The values as a writable, zero-copy NumPy (cpu) or CuPy (gpu) array."""
        return self._data

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    def __iter__(self) -> Iterator["NDArray"]:
        """``self[0]``, ``self[1]``, ... along the first axis, as NumPy iterates; a 0-d array
        has no axis to iterate over (TypeError, as NumPy's)."""
        if not self.shape:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(self.shape[0]))

    def __repr__(self) -> str:
        values = np.array2string(_dev.to_host(self._data), threshold=100, edgeitems=3)
        return f"{values}\n<{self._describe()}>"

    def _describe(self) -> str:
        dims = "x".join(str(d) for d in self.shape) or "scalar"
        return f"{type(self).__name__} {dims} stype={self.stype} dtype={self.dtype.name} @{self._device}"

    # ---- copies and conversions ----------------------------------------------------
    def asnumpy(self) -> np.ndarray:
        """A dense NumPy copy of the values."""
        return np.array(_dev.to_host(self._data), copy=True)

    def item(self) -> Any:
        """The single value of a one-element array as a Python scalar."""
        if self.size != 1:
            raise ValueError(f"item() needs an array of one element, this one has shape {self.shape}")
        return self.asnumpy().reshape(()).item()

    asscalar = item

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __bool__(self) -> bool:
        return bool(self.item())

    def tostype(self, stype: str) -> "NDArray":
        """A new container holding these values in storage type ``stype``."""
        return CONVERSIONS["cast_storage"](self, stype)

    def copy(self) -> "NDArray":
        """A deep copy, same storage type, dtype and device."""
        return self._with_values(self._data.copy(), copy_aux=True)

    def astype(self, dtype: Any, copy: bool = True) -> "NDArray":
        """These values converted to ``dtype``; with ``copy=False`` returns self when nothing changes."""
        dt = value_dtype(dtype)
        if dt == self.dtype and not copy:
            return self
        return self._with_values(self._data.astype(dt), copy_aux=copy)

    def _with_values(self, values: Any, copy_aux: bool) -> "NDArray":
        """A container of the same structure with new values (shape unchanged)."""
        return NDArray(values, self._device)

    def to(self, device: Device | str, copy: bool = False) -> "NDArray":
        """This array on ``device``: self when already there (unless ``copy``), else a copy."""
        dev = _dev.as_device(device)
        if dev == self._device:
            return self.copy() if copy else self
        return self._moved(dev)

    def as_in_context(self, device: Device | str) -> "NDArray":
        """MXNet's name for ``to``."""
        return self.to(device)

    def _moved(self, device: Device) -> "NDArray":
        return NDArray(_dev.on_device(self._data, device, copy=True), device)

    def copyto(self, other: "NDArray | Device | str") -> "NDArray":
        """Copy into ``other`` (a container, any storage type: ``other[:] = self``) or onto a device."""
        if isinstance(other, NDArray):
            if other is self:
                return other
            other[:] = self
            return other
        return self.to(other, copy=True)

    def wait_to_read(self) -> None:
        """MXNet compatibility: work here is synchronous on cpu; on gpu this waits for the stream."""
        if _dev.is_cupy_array(self._data):
            import cupy

            cupy.cuda.get_current_stream().synchronize()

    # ---- autograd ----------------------------------------------------------------------
    # ``attach_grad`` (installed by ``sparse_ops.ops.methods``) and ``backward`` (installed by
    # ``sparse_ops.autograd``) use the tape, which lives above the containers.
    @staticmethod
    def _check_writable(x: "NDArray") -> None:
        """Refuse an in-place write into ``x`` while the autograd tape may need it. A no-op
        here: ``sparse_ops.ops.methods`` installs ``tape.check_not_in_graph`` (containers
        hold ``_ag`` but import no tape)."""

    @property
    def grad(self) -> "NDArray | None":
        """The gradient buffer attached by ``attach_grad`` (None without one)."""
        info = self._ag
        return info.grad if info is not None else None

    def drop_grad(self) -> None:
        """Forget the gradient buffer; the array is no longer a variable."""
        info = self._ag
        if info is not None:
            info.grad, info.grad_req = None, "null"

    def detach(self) -> "NDArray":
        """The same values (shared, not copied) outside any autograd graph."""
        return share_version(self._with_values(self._data, copy_aux=False), self)

    # ---- indexing --------------------------------------------------------------------
    # ``x[key]`` while autograd records and x needs a gradient, as recorded operators (or None);
    # installed by sparse_ops.ops.methods (containers import no operators)
    _record_index: Any = None

    def __getitem__(self, key: Any) -> "NDArray":
        key = _plain_key(key)
        if self._ag is not None and self._record_index is not None:
            recorded = self._record_index(self, key)
            if recorded is not None:
                return recorded
        values = self._data[key]
        view = NDArray(values, self._device)
        return share_version(view, self) if shares_memory(values, self._data) else view

    # ``x[key] = value`` while autograd records and ``value`` needs a gradient, as recorded
    # operators (True when done); installed by sparse_ops.ops.methods, as _record_index
    _record_write: Any = None

    def __setitem__(self, key: Any, value: Any) -> None:
        if self._ag is not None:
            self._check_writable(self)
        if 0 in self._data.strides or not self._data.flags.writeable:
            why = unwritable(self._data)
            if why is not None:
                raise ValueError(f"cannot write into this array: {why}; write into a copy (x.copy())")
        if getattr(value, "_ag", None) is not None and self._record_write is not None \
                and self._record_write(self, key, value):
            return
        self._assign(key, value)
        bump_version(self)  # after the write: a refused one (a shape NumPy cannot broadcast) wrote nothing

    def _assign(self, key: Any, value: Any) -> None:
        if value.__class__ is NDArray and value._device is self._device and key.__class__ is slice:
            self._data[key] = value._data  # x[:] = y, x[a:b] = y: the common case, spelled out
            return
        if not isinstance(value, NDArray) and type(value).__module__.startswith("scipy.sparse"):
            value = CONVERSIONS["csr_matrix"](value, device=self._device)
        if isinstance(value, NDArray):
            if value._device != self._device:
                value = value.to(self._device)
            if value.stype != "default":
                if _is_full_slice(key) and value.shape == self.shape:
                    CONVERSIONS["densify_into"](value, self._data)
                    return
                value = value.tostype("default")
            value = value._data
        self._data[_plain_key(key)] = value

    # ---- interchange -----------------------------------------------------------------
    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        if _dev.is_cupy_array(self._data):
            raise TypeError("this array lives on a gpu; call asnumpy() for a host copy")
        a = self._data
        if dtype is not None and np.dtype(dtype) != a.dtype:
            return a.astype(dtype)
        return np.array(a, copy=True) if copy else a

    @property
    def __cuda_array_interface__(self) -> dict:
        """The CUDA array interface of the CuPy array of a dense gpu array, so numba.cuda
        kernels and CuPy take the container itself, without a copy. Host memory (cpu, or
        the simulated gpu) and sparse containers have none: AttributeError, so that
        ``hasattr`` checks in numba and CuPy do not take a host array for device memory."""
        if self.stype != "default" or not _dev.is_cupy_array(self._data):
            raise AttributeError(f"{self._describe()} is not in device memory: no __cuda_array_interface__")
        return self._data.__cuda_array_interface__

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self._data.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._data.__dlpack_device__()

    def __reduce__(self):
        return (_rebuild_dense, (self.asnumpy(), self._device))

    # ---- Python operators ----------------------------------------------------------------------
    # ``x + y``, ``x @ y``, ``x > 0``, ``-x`` and the fluent methods (``x.sum()``) are operator
    # calls: the ops layer installs them on this class (``sparse_ops.ops.methods``), since
    # containers import nothing above them.
    # __eq__ returns an array, which would make the class unhashable: keep identity hashing
    # so containers can key dicts and sets (autograd relies on that).
    __hash__ = object.__hash__


_STORAGE_SLOTS: dict[type, tuple[str, ...]] = {}


def _storage_slots(cls: type) -> tuple[str, ...]:
    """The slots holding a container's storage and autograd record (every slot but
    ``__weakref__``), once per class."""
    names = _STORAGE_SLOTS.get(cls)
    if names is None:
        names = []
        for c in cls.__mro__:
            slots = c.__dict__.get("__slots__", ())
            for n in (slots,) if isinstance(slots, str) else slots:
                if n != "__weakref__" and n not in names:
                    names.append(n)
        names = _STORAGE_SLOTS[cls] = tuple(names)
    return names


_UNSET = object()


DENSE_CLASSES.add(NDArray)


def kernel_form(x: NDArray) -> NDArray:
    """``x`` as an instance of its ``_kernel_class``, sharing its storage and autograd
    record (a new object, O(1)); ``x`` itself when its class declares none. Kernels, the
    tape and gradient rules read components through the library's own properties, which a
    subclass may show differently."""
    cls = x.__class__._kernel_class
    return x if cls is None else twin(x, cls)


def twin(x: NDArray, cls: type) -> NDArray:
    """A new ``cls`` object sharing ``x``'s storage and autograd record (O(1)); ``cls`` is a
    class of the same storage as ``x``'s (a subclass adding no slots, or its base).
    ``take_storage`` gives back what was set on the twin."""
    x.shape  # a container built with check=False is validated first, so the twin shares a checked one
    made = object.__new__(cls)
    for name in _storage_slots(cls):
        value = getattr(x, name, _UNSET)
        if value is not _UNSET:
            setattr(made, name, value)
    return made


def take_storage(x: NDArray, form: NDArray) -> None:
    """Give ``x`` what a kernel (or the tape) set on its ``kernel_form`` (or other ``twin``)
    ``form``: new component arrays of a sparse output, a validation, an autograd record."""
    if form is x:
        return
    for name in _storage_slots(form.__class__):
        value = getattr(form, name, _UNSET)
        if value is not _UNSET:
            setattr(x, name, value)


def _rebuild_dense(values: np.ndarray, device: Device) -> NDArray:
    return NDArray(_dev.on_device(values, device), device)


def _plain_key(key: Any) -> Any:
    """An indexing key with containers replaced by their dense arrays."""
    if isinstance(key, NDArray):
        return key.tostype("default")._data if key.stype != "default" else key._data
    if isinstance(key, tuple):
        return tuple(_plain_key(k) for k in key)
    return key


def shares_memory(a: Any, b: Any) -> bool:
    """Whether arrays ``a`` and ``b`` may share memory (NumPy's, or on a gpu CuPy's, bounds
    test); a NumPy scalar (``x[0, 0]``'s values) shares none."""
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return np.may_share_memory(a, b)
    if _dev.is_cupy_array(a) and _dev.is_cupy_array(b):
        import cupy

        return cupy.may_share_memory(a, b)
    return False


def unwritable(a: Any) -> str | None:
    """Why values array ``a`` cannot take writes, or None: read-only memory (a NumPy view of
    a JAX array, a file mapped read-only), or entries that share memory (a zero stride along
    an axis longer than 1: a broadcast or expanded view, where every write to one entry
    lands on the others)."""
    flags = getattr(a, "flags", None)
    if flags is not None and not getattr(flags, "writeable", True):
        return "its values are read-only"
    strides = getattr(a, "strides", ())
    if 0 in strides and a.size > 1 and any(st == 0 and n > 1 for st, n in zip(strides, a.shape)):
        return "its entries share memory (a broadcast or expanded view: stride 0 along an axis)"
    return None


def _is_full_slice(key: Any) -> bool:
    return (isinstance(key, slice) and key == slice(None)) or key is Ellipsis
