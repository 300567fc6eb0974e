"""``mx.nd.ndarray``: MXNet 1.x's ``NDArray`` class and the functions of its ``ndarray`` module.

The face's arrays are sparse-ops' containers with MXNet's behaviour. ``mx.nd.NDArray`` is a
subclass of the library's ``NDArray`` that adds no storage (``__slots__ = ()``), as the
face's ``CSRNDArray`` and ``RowSparseNDArray`` (``mx.nd.sparse``) are of the library's
sparse classes; every array the face makes (creation functions, operators, methods,
autograd) is an instance of them (``_op.as_face`` re-classes a fresh result in place).
Their methods follow MXNet 1.9 where the native API's design differs:

- no result is 0-d: ``x.sum()``, ``x[1, 2]`` of a 2-d array and ``x[0]`` of a 1-d one have
  shape ``(1,)`` (native: 0-d);
- indexing is recorded by autograd (``with record(): y = x[0]``), and writing into an
  array while recording raises as MXNet raises (``x[0] = y``, ``x += y`` when either
  needs a gradient); basic indexing gives a view when the result is contiguous, a copy
  otherwise; float index arrays are cast to integers; a value with leading axes of length
  1 fills a slot of fewer axes (``b[0] = np.array([47.8])``);
- ``asscalar()`` returns a NumPy scalar, ``bool()`` of an empty array is False,
  ``reshape(2, 15)`` takes the shape positionally, ``flatten``/``squeeze``/``expand_dims``
  take ``inplace=True`` (a view), fluent methods take their second input by keyword
  (``x.take(indices=i)``), and ``astype``/creation take int8 and uint8 (which the native
  constructors refuse);
- sparse components (``csr.data``, ``.indices``, ``.indptr``) are NDArrays, copies as in
  MXNet (native: NumPy views); kernels still read the library's views
  (``NDArray._kernel_class``).

Arrays of the native API are accepted everywhere in the face, and
``isinstance(native_array, mx.nd.NDArray)`` holds (the face classes' ``isinstance``
accepts their library class); native functions given face arrays keep the native design
and return library arrays.
"""
from __future__ import annotations

import builtins as _builtins
import numbers
import operator as _pyop
import sys
from typing import Any, Callable

import numpy as np

from .... import creation as _core
from .... import device as _dev
from ....autograd import Function as _Function
from ....dtypes import truncated_ids, value_dtype
from ....sdk.csr import index_add
from ....ndarray import NDArray as _LibNDArray
from ....ndarray import bump_version, kernel_form, share_version, shares_memory, unwritable
from ....ops.methods import FLUENT as _LIB_FLUENT
from ....ops.methods import FLUENT_ALIASES as _LIB_FLUENT_ALIASES
from ....ops.methods import attach_gradient_buffer
from ....registry import Param, get_op
from ....tape import is_recording
from ..base import MXNetArgumentError, MXNetError, MXNetValueError, integer_types, mx_real_t
from . import _op
from ._op import as_face

py_slice = _builtins.slice  # MXNet's name for Python's slice (its module shadows ``slice``)

# MXNet's value types the native constructors do not hold: the face makes these arrays itself
EXTRA_DTYPES = (np.dtype(np.int8), np.dtype(np.uint8))

_STORAGE_TYPE_UNDEFINED, _STORAGE_TYPE_DEFAULT, _STORAGE_TYPE_ROW_SPARSE, _STORAGE_TYPE_CSR = -1, 0, 1, 2
_STORAGE_TYPE_STR_TO_ID = {"undefined": -1, "default": 0, "row_sparse": 1, "csr": 2}
_STORAGE_TYPE_ID_TO_STR = {v: k for k, v in _STORAGE_TYPE_STR_TO_ID.items()}
_GRAD_REQ_MAP = {"null": 0, "write": 1, "add": 3}

_INPLACE_MESSAGE = "Inplace operations (+=, -=, x[:]=, etc) are not supported when recording with autograd."


# ---- the classes ----------------------------------------------------------------------------------------
class FaceClass(type):
    """The metaclass of the face's array classes: ``isinstance`` accepts an instance of the
    library class the face class stands for (``_library``), so MXNet code's type checks
    take arrays of the native API too."""

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, cls._library)


def mx_dtype(dtype: Any) -> np.dtype:
    """``dtype`` as a dtype the face holds: the library's value dtypes and MXNet's int8 and
    uint8; an ``MXNetArgumentError`` (a TypeError) worded as the library's otherwise."""
    try:
        dt = np.dtype(dtype) if dtype is not None else np.dtype(mx_real_t)
        return dt if dt in EXTRA_DTYPES else value_dtype(dt)
    except TypeError as exc:
        raise MXNetArgumentError(f"{exc} (argument dtype)") from None


def held_sparse(make: Callable[[Any], _LibNDArray], dtype: Any) -> _LibNDArray:
    """The sparse array ``make(dtype)`` makes, for MXNet's int8 and uint8 too: the library
    holds neither, so those are made in int32 and their values then converted as ``astype``
    converts them (values wrap as a C cast does)."""
    dt = None if dtype is None else mx_dtype(dtype)
    if dt in EXTRA_DTYPES:
        x = make(np.int32)
        x.check_format()  # (the structure, validated in a dtype the library checks)
        return x._with_values(x._data.astype(dt), copy_aux=False)
    return make(dtype)


def as_new_leaf(x: _LibNDArray) -> None:
    """Make an array computed in a graph a new leaf, as MXNet's ``MarkVariables`` does before
    marking it: what uses it from now on stops there (what used it before still reaches its
    inputs). A leaf is left as it is."""
    if x._ag is not None and x._ag.node is not None:
        x._ag = None


def _needs_grad(x: Any) -> bool:
    info = getattr(x, "_ag", None)
    return info is not None and info.needs_grad()


def _whole(key: Any) -> bool:
    """Whether ``key`` selects the whole array (``x[:]``, ``x[...]``, ``x[None]``)."""
    return key is Ellipsis or key is None or (isinstance(key, py_slice) and key == py_slice(None))


def _refuse_recorded_write(target: Any, values: tuple, whole: bool) -> None:
    """MXNet's rule for writing into ``target`` while recording: any write into an array
    already in a graph (a variable, a recorded result, a recorded view of one) is refused,
    whatever is written; and the write is recorded when one of its inputs needs a gradient
    (``target`` itself is an input unless the whole array is overwritten), which into part
    of an array is refused too."""
    if not is_recording():
        return
    info = getattr(target, "_ag", None)
    if info is not None and (info.node is not None or info.grad is not None):
        raise MXNetError(_INPLACE_MESSAGE)
    inputs = values if whole else (target, *values)
    if any(_needs_grad(v) for v in inputs) and not whole:
        raise MXNetError(_INPLACE_MESSAGE)


def _index_values(a: _LibNDArray) -> Any:
    """An NDArray used as an index: its values, floats cast to int64 (MXNet casts index
    arrays to integers)."""
    v = (a if a.stype == "default" else kernel_form(a).tostype("default"))._data
    return truncated_ids(a.device.xp, v) if v.dtype.kind == "f" else v


def _numpy_key(key: Any) -> Any:
    """An MXNet indexing key as NumPy's: NDArrays become their (integer) values."""
    if isinstance(key, _LibNDArray):
        return _index_values(key)
    if isinstance(key, tuple):
        return tuple(_numpy_key(k) for k in key)
    return key


def _indexed(base: _LibNDArray, key: Any) -> "NDArray":
    """``base[key]`` with MXNet's result rules: never 0-d, a view only when contiguous."""
    xp = base._device.xp
    a = base._data[key]
    if not isinstance(a, xp.ndarray) or a.ndim == 0:
        a = xp.asarray(a).reshape(1)
    elif not a.flags.c_contiguous:
        a = xp.ascontiguousarray(a)
    return _view_of(base, a)


def _view_of(base: _LibNDArray, values: Any) -> "NDArray":
    """``values`` as a face array: a view of ``base`` when it shares its memory, counting
    in-place writes with it (``share_version``)."""
    view = as_face(_LibNDArray(values, base._device))
    return share_version(view, base) if shares_memory(values, base._data) else view


class _Indexing(_Function):
    """Indexing recorded by autograd: the gradient of ``x[key]`` adds each head-gradient
    entry to the entry of ``x`` it was read from (repeated indices accumulate)."""

    def __init__(self, key: Any) -> None:
        super().__init__()
        self.key = key

    def forward(self, x: _LibNDArray) -> "NDArray":
        self.source = (x.shape, x.dtype, x._device)
        return _indexed(x, self.key)

    def backward(self, grad: _LibNDArray) -> "NDArray":
        shape, dtype, device = self.source
        xp = device.xp
        g = grad if grad.stype == "default" else kernel_form(grad).tostype("default")
        size = int(np.prod(shape, dtype=np.int64))
        where = xp.arange(size).reshape(shape)[self.key]  # the entry of x each result entry comes from
        out = xp.zeros(size, dtype=dtype)
        index_add(device, out, xp.asarray(where).ravel(), g._data.ravel().astype(dtype, copy=False))
        return as_face(_LibNDArray(out.reshape(shape), device))


def _strip_unit_axes(value: Any) -> Any:
    """``value`` without its leading axes of length 1 (a slot NumPy sees with fewer axes
    than MXNet does: ``b[0]`` of a 1-d ``b`` is 0-d there, shape (1,) in MXNet)."""
    a = np.asarray(value) if not hasattr(value, "ndim") else value
    while a.ndim and a.shape[0] == 1:
        a = a[0]
    return a


def _contiguous_slices(key: tuple, shape: tuple) -> bool:
    """Whether basic slices ``key`` (one per leading axis) of a C-contiguous array of
    ``shape`` select one contiguous block: axes of length > 1 in the result must have the
    strides of a C-contiguous array of the result's shape."""
    sizes = [len(range(*k.indices(n))) if isinstance(k, py_slice) else 1 for k, n in zip(key, shape)]
    steps = [k.indices(n)[2] if isinstance(k, py_slice) else 1 for k, n in zip(key, shape)]
    sizes += shape[len(key):]
    steps += [1] * (len(shape) - len(key))
    if 0 in sizes:
        return True
    inner = 1  # elements per step of the source along the current axis
    expected = 1  # elements per step of a contiguous result along the current axis
    for n, size, step in zip(reversed(shape), reversed(sizes), reversed(steps)):
        if size > 1 and inner * step != expected:
            return False
        inner *= n
        expected *= size
    return True


def _recorded(x: _LibNDArray) -> bool:
    return is_recording() and _needs_grad(x)


def _lib(x: _LibNDArray, method: str, *args: Any) -> Any:
    """The library's ``method`` run on ``x``'s kernel form (the library's own class)."""
    form = kernel_form(x)
    cls = x.__class__._kernel_class or _LibNDArray
    return getattr(cls, method)(form, *args)


class NDArray(_LibNDArray, metaclass=FaceClass):
    """MXNet's NDArray: the library's dense container with MXNet 1.9's methods (see the
    module docstring for where they differ from the native ones)."""

    __slots__ = ()
    _library = _LibNDArray
    __hash__ = _LibNDArray.__hash__

    # ---- values -----------------------------------------------------------------------------------
    def asscalar(self) -> np.generic:
        """The value of a one-element array as a NumPy scalar of its dtype."""
        if self.size != 1:
            raise MXNetValueError("The current array is not a scalar")
        return self.asnumpy().reshape(-1)[0]

    def tolist(self) -> list:
        """The values as nested Python lists (``asnumpy().tolist()``; not in MXNet 1.x, kept
        for code written against the library's NumPy components)."""
        return self.asnumpy().tolist()

    def __bool__(self) -> bool:
        n = self.size
        if n == 0:
            return False
        if n == 1:
            return bool(self.asscalar())
        raise ValueError("The truth value of an NDArray with multiple elements is ambiguous.")

    def astype(self, dtype: Any, copy: bool = True) -> "NDArray":
        """The values converted to ``dtype`` (int8 and uint8 too); with ``copy=False`` the
        array itself when the dtype is already that."""
        dt = mx_dtype(dtype)
        if not copy and dt == self.dtype:
            return self
        if _recorded(self) and dt not in EXTRA_DTYPES:  # recorded, as MXNet's copy into the new dtype
            if self.stype == "default":
                return _op.call("cast", [self], {"dtype": dt})
            return as_face(_lib(self, "astype", dt))  # the library's recorded sparse conversion
        return as_face(self._with_values(self._data.astype(dt), copy_aux=True))

    def copy(self) -> "NDArray":
        """A deep copy (recorded by autograd, as MXNet's ``_copy``)."""
        if _recorded(self):
            return _op.call("identity", [self])
        return as_face(_lib(self, "copy"))

    def copyto(self, other: Any) -> Any:
        """Copy into ``other`` (an NDArray: ``other[:] = self``) or onto a context."""
        if isinstance(other, _LibNDArray):
            if tuple(other.shape) != tuple(self.shape):
                raise MXNetValueError(f"copyto: operands shape mismatch {tuple(self.shape)} vs {tuple(other.shape)}")
            if other is not self:
                other[:] = self
            return other
        return self.to(other, copy=True)

    def as_in_context(self, context: Any) -> "NDArray":
        """This array on ``context``: itself when already there, else a copy."""
        return self.to(context)

    def to(self, device: Any, copy: bool = False) -> "NDArray":
        """This array on ``device``: itself when already there (unless ``copy``), else a copy;
        recorded, as MXNet records ``_copyto``, when it moves between cpu contexts (one
        memory: ``cpu(1)`` is MXNet's name for another worker's share of it)."""
        dev = _dev.as_device(device)
        if dev == self._device and not copy:
            return self
        if _recorded(self) and dev.device_type == self._device.device_type == "cpu":
            moved = _op.call("identity", [self])  # its gradient reaches self
            moved._device = dev
            return moved
        return as_face(_lib(self, "to", device, copy))

    def tostype(self, stype: str) -> "NDArray":
        """A copy in storage type ``stype`` (recorded by autograd, as MXNet's ``cast_storage``)."""
        if stype == "csr" and len(self.shape) != 2:
            raise MXNetValueError("To convert to a CSR, the NDArray should be 2 Dimensional. Current shape "
                                  f"is {self.shape}")
        if _recorded(self) and stype in ("default", "row_sparse", "csr"):
            return _op.call("cast_storage", [self], {"stype": stype})
        return as_face(_lib(self, "tostype", stype))

    def detach(self) -> "NDArray":
        """The same values outside any autograd graph."""
        return as_face(_lib(self, "detach"))

    def __reduce__(self) -> tuple:
        return (_rebuilt_as_face, _lib(self, "__reduce__"))

    # ---- autograd ---------------------------------------------------------------------------------
    def attach_grad(self, grad_req: str = "write", stype: str | None = None) -> None:
        """Attach a gradient buffer (of storage type ``stype``, default this array's); a csr
        array's gradient holds every nonzero the rules give, as MXNet's, not only its own
        stored entries. An array computed in a graph becomes a new leaf, as MXNet's
        ``MarkVariables`` makes it: what uses it from now on stops there (what used it before
        still reaches its inputs)."""
        as_new_leaf(self)
        attach_gradient_buffer(self, grad_req, stype)  # integer arrays too, as MXNet's
        self._ag.structure = None
        as_face(self._ag.grad)

    @property
    def writable(self) -> bool:
        """Whether writes into this array are taken (MXNet's ``writable``): False for read-only
        values (``to_dlpack_for_read``'s, a JAX array's) and broadcast views."""
        return unwritable(self._data) is None

    @property
    def _fresh_grad(self) -> bool:
        """Whether backward wrote the gradient since it was attached (or the flag reset)."""
        info = self._ag
        return bool(info is not None and info.fresh)

    @_fresh_grad.setter
    def _fresh_grad(self, state: bool) -> None:
        if self._ag is not None:
            self._ag.fresh = bool(state)

    # ---- shapes -----------------------------------------------------------------------------------
    def reshape(self, *shape: Any, **kwargs: Any) -> "NDArray":
        """A view of the values in a new shape: ``reshape((2, 15))``, ``reshape(2, 15)`` or
        ``reshape(shape=..., reverse=...)``, with MXNet's special values (0 copies an axis,
        -1 infers one, -2 copies the rest, -3 merges two, -4 splits one)."""
        if len(shape) == 1 and isinstance(shape[0], (list, tuple)):
            shape = tuple(shape[0])
        elif not shape:
            shape = kwargs.pop("shape", None)
            if shape is None:
                raise MXNetArgumentError("reshape() needs a shape")
        reverse = bool(kwargs.pop("reverse", False))
        if kwargs:
            raise MXNetArgumentError(f"reshape() got unexpected arguments {sorted(kwargs)}")
        params = {"shape": tuple(shape), "reverse": reverse}
        if _recorded(self) or self.stype != "default":
            return _op.call("reshape", [self], params)
        return self._view(_shape_by("reshape", params, self.shape))

    def _view(self, shape: tuple) -> "NDArray":
        """A view of the values in ``shape`` (sharing memory, as MXNet's in-place reshapes)."""
        return _view_of(self, self._data.reshape(shape))

    def flatten(self, inplace: bool = False) -> "NDArray":
        """(d0, d1 * ... * dk); ``inplace=True`` gives a view."""
        if not inplace or _recorded(self):
            return _op.call("flatten", [self])
        return self._view(_shape_by("flatten", {}, self.shape))

    def squeeze(self, axis: Any = None, inplace: bool = False) -> "NDArray":
        """Without the axes of length 1 (those of ``axis``, else all; never 0-d);
        ``inplace=True`` gives a view."""
        if not inplace or _recorded(self):
            return _op.call("squeeze", [self], {"axis": axis})
        return self._view(_shape_by("squeeze", {"axis": axis}, self.shape) or (1,))

    def expand_dims(self, axis: int, inplace: bool = False) -> "NDArray":
        """With a new axis of length 1 at ``axis``; ``inplace=True`` gives a view."""
        if not inplace or _recorded(self):
            return _op.call("expand_dims", [self], {"axis": axis})
        return self._view(_shape_by("expand_dims", {"axis": axis}, self.shape))

    @property
    def T(self) -> "NDArray":
        return _nd("transpose")(self)

    # ---- indexing ---------------------------------------------------------------------------------
    def __getitem__(self, key: Any) -> "NDArray":
        np_key = _numpy_key(key)
        if _recorded(self):
            return _Indexing(np_key)(self)
        return _indexed(self, np_key)

    def __setitem__(self, key: Any, value: Any) -> None:
        if not self._recorded_write(key, value):
            self._write(key, value)

    def _write(self, key: Any, value: Any) -> None:
        """``self[key] = value`` with NumPy's rules on MXNet's keys and values (nothing recorded)."""
        if isinstance(value, _LibNDArray):
            v = kernel_form(value)
            if v._device is not self._device:
                v = v.to(self._device)
            value = (v if v.stype == "default" else v.tostype("default"))._data
        elif _is_scipy_sparse(value):
            value = value.toarray()
        np_key = _numpy_key(key)
        try:
            try:
                self._data[np_key] = value
            except (ValueError, TypeError):  # NumPy's errors for a one-element sequence into a scalar slot
                stripped = _strip_unit_axes(value)
                if stripped is value:
                    raise
                self._data[np_key] = stripped
        except ValueError as exc:  # a value that does not broadcast to the slot: an MXNetError, as MXNet's
            raise MXNetValueError(f"__setitem__: cannot assign to key {key!r} of an array of shape {self.shape}: "
                                  f"{exc}") from None
        bump_version(self)  # seen by a recorded call that kept this array or a view of its memory

    def _recorded_write(self, key: Any, value: Any) -> bool:
        """MXNet's rules for ``self[key] = value`` while recording: refused when the write
        would be recorded into an array in a graph or into part of one; a recorded whole
        copy (``x[:] = y``, y needing a gradient) is done here, and True returned."""
        if not is_recording():
            return False
        whole = _whole(key)
        _refuse_recorded_write(self, (value,) if isinstance(value, _LibNDArray) else (), whole)
        if whole and isinstance(value, _LibNDArray) and _needs_grad(value):
            self._take_recorded_copy(value)
            return True
        return False

    def _take_recorded_copy(self, value: _LibNDArray) -> None:
        """``self[:] = value`` while recording, ``value`` needing a gradient: as MXNet's
        recorded copy, this array becomes the copy's output in the graph."""
        shape = value.shape
        while len(shape) > len(self.shape) and shape[0] == 1:  # leading axes of length 1 (x[None] = v)
            shape = shape[1:]
        if shape != value.shape:
            value = _op.call("reshape", [value], {"shape": shape})
        if shape != self.shape:
            copied = _op.call("broadcast_to", [value], {"shape": self.shape})
        else:
            copied = _op.call("identity", [value])
        if copied.dtype != self.dtype:
            copied = _op.call("cast", [copied], {"dtype": self.dtype})
        self._write(py_slice(None), copied)
        self._ag = copied._ag

    @staticmethod
    def _basic_indexing_slice_is_contiguous(slc_key: tuple, shape: tuple) -> bool:
        """Whether basic slices ``slc_key`` of a C-contiguous array of ``shape`` pick one
        contiguous block (then MXNet's indexing gives a view)."""
        return _contiguous_slices(tuple(slc_key), tuple(shape))

    def slice_assign(self, rhs: _LibNDArray, begin: Any, end: Any, step: Any) -> "NDArray":
        """Write ``rhs`` into the region ``begin:end:step`` of this array, in place."""
        return _op.call("_slice_assign", [self, rhs], {"begin": begin, "end": end, "step": step}, out=self)

    def slice_assign_scalar(self, value: float, begin: Any, end: Any, step: Any) -> "NDArray":
        """Write ``value`` into the region ``begin:end:step`` of this array, in place."""
        return _op.call("_slice_assign_scalar", [self], {"scalar": float(value), "begin": begin, "end": end,
                                                         "step": step}, out=self)

    # ---- interchange ------------------------------------------------------------------------------
    def to_dlpack_for_read(self) -> Any:
        """A DLPack capsule of these values (shared memory)."""
        return to_dlpack_for_read(self)

    def to_dlpack_for_write(self) -> Any:
        """A DLPack capsule of these values (shared memory, writable)."""
        return to_dlpack_for_write(self)


def _rebuilt_as_face(rebuild: Callable, args: tuple) -> NDArray:
    """Unpickle a face array: the library's rebuild, as the face's class."""
    return as_face(rebuild(*args))


def _shape_by(op: str, params: dict, shape: tuple) -> tuple:
    """The output shape operator ``op`` gives an input of ``shape`` (its own shape rule)."""
    opdef = get_op(op)
    try:
        return tuple(opdef.instance(params).infer_shape(tuple(shape))[0])
    except (TypeError, ValueError, IndexError) as exc:  # the rule's refusal, an MXNetError as MXNet's
        if isinstance(exc, MXNetError):
            raise
        raise MXNetValueError(f"{op}: {exc}") from None


def _nd(name: str) -> Callable:
    """``mx.nd.<name>``, looked up at the call (the package resolves operators lazily)."""
    return getattr(sys.modules[__package__], name)


# ---- Python operators, fluent methods: the face's functions, results as face arrays --------------------
# a dense array's arithmetic with an array is MXNet's nd.add/subtract/multiply/divide, which
# broadcast: with a sparse operand that is a dense result (the library's operators choose the
# storage-aware elemwise_* ops for equal shapes, as MXNet's sparse arrays' own operators do)
_DENSE_LHS = {"__add__": "broadcast_add", "__sub__": "broadcast_sub", "__mul__": "broadcast_mul",
              "__truediv__": "broadcast_div"}


def _operand(other: Any) -> bool:
    """Whether ``other`` is an operand of MXNet's arithmetic (an NDArray or a number, as its
    ``_ufunc_helper`` takes): a NumPy array is a TypeError, never a silent NumPy result outside
    autograd; anything else is left to its own reflected operator (Python's TypeError if none)."""
    if isinstance(other, (_LibNDArray, numbers.Number, np.generic)):
        return True
    if isinstance(other, np.ndarray):
        raise TypeError(f"type {type(other)} not supported")
    return False


def _binary_operator(name: str) -> Callable:
    lib = getattr(_LibNDArray, name)
    dense_lhs = _DENSE_LHS.get(name)

    def method(self: NDArray, other: Any) -> Any:
        if not _operand(other):
            return NotImplemented
        if dense_lhs is not None and self.stype == "default" and isinstance(other, _LibNDArray) \
                and other.stype != "default":
            return _op.call(dense_lhs, [self, other])
        return as_face(lib(self, other))

    method.__name__ = method.__qualname__ = name
    return method


def _in_place_operator(name: str) -> Callable:
    lib = getattr(_LibNDArray, name)

    def method(self: NDArray, other: Any) -> Any:
        if not _operand(other):
            return NotImplemented
        _refuse_recorded_write(self, (other,), whole=False)
        return lib(self, other)

    method.__name__ = method.__qualname__ = name
    return method


def _unary_operator(name: str) -> Callable:
    lib = getattr(_LibNDArray, name)

    def method(self: NDArray) -> Any:
        return as_face(lib(self))

    method.__name__ = method.__qualname__ = name
    return method


def _fluent(name: str) -> Callable:
    def method(self: NDArray, *args: Any, **kwargs: Any) -> Any:
        return _nd(name)(self, *args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"``mx.nd.{name}(self, ...)``."
    return method


for _kind in ("add", "sub", "mul", "truediv", "pow", "matmul"):
    for _form in (f"__{_kind}__", f"__r{_kind}__"):
        setattr(NDArray, _form, _binary_operator(_form))
    if _kind not in ("pow", "matmul"):
        setattr(NDArray, f"__i{_kind}__", _in_place_operator(f"__i{_kind}__"))
def _mod(self: NDArray, other: Any) -> Any:
    return modulo(self, other)


def _rmod(self: NDArray, other: Any) -> Any:
    return modulo(other, self)


def _imod(self: NDArray, other: Any) -> NDArray:
    _refuse_recorded_write(self, (other,), whole=False)
    self[:] = modulo(self, other)
    return self


NDArray.__mod__, NDArray.__rmod__, NDArray.__imod__ = _mod, _rmod, _imod
for _kind in ("eq", "ne", "gt", "ge", "lt", "le"):
    setattr(NDArray, f"__{_kind}__", _binary_operator(f"__{_kind}__"))
for _form in ("__neg__", "__abs__"):
    setattr(NDArray, _form, _unary_operator(_form))

# MXNet 1.9's fluent methods, and the library's (every one an operator of mx.nd)
MX_FLUENT = (
    "reshape_like", "zeros_like", "ones_like", "broadcast_axes", "repeat", "pad", "swapaxes", "split", "split_v2",
    "slice", "slice_axis", "slice_like", "take", "one_hot", "pick", "sort", "topk", "argsort", "argmax",
    "argmax_channel", "argmin", "clip", "abs", "sign", "shape_array", "size_array", "tile", "transpose", "flip",
    "depth_to_space", "space_to_depth", "diag", "sum", "nansum", "prod", "nanprod", "mean", "max", "min", "norm",
    "round", "rint", "fix", "floor", "ceil", "trunc", "sin", "cos", "tan", "arcsin", "arccos", "arctan", "degrees",
    "radians", "sinh", "cosh", "tanh", "arcsinh", "arccosh", "arctanh", "exp", "expm1", "log", "log10", "log2",
    "log1p", "sqrt", "rsqrt", "cbrt", "rcbrt", "square", "reciprocal", "relu", "sigmoid", "softmax", "log_softmax",
    "softmin", "broadcast_to", "broadcast_like",
)
for _name in sorted(set(MX_FLUENT) | set(_LIB_FLUENT) | set(_LIB_FLUENT_ALIASES)):
    if _name not in NDArray.__dict__:
        setattr(NDArray, _name, _fluent(_name))

_op.FACE_CLASSES[_LibNDArray] = NDArray


# ---- creation --------------------------------------------------------------------------------------------
def _device(ctx: Any) -> _dev.Device:
    return _dev.as_device(ctx)  # None -> the current default device


def _is_scipy_sparse(obj: Any) -> bool:
    return "scipy.sparse" in sys.modules and sys.modules["scipy.sparse"].issparse(obj)


def _from_values(values: Any, dtype: np.dtype, device: _dev.Device) -> NDArray:
    """A new dense face array holding ``values`` converted to ``dtype`` (any the face holds)."""
    if dtype in EXTRA_DTYPES:
        host = values.asnumpy() if isinstance(values, _LibNDArray) else values
        a = np.array(host, dtype=dtype)
        return as_face(_LibNDArray(_dev.on_device(a, device) if device.xp is not np else a, device))
    return as_face(_core.array(values, dtype=dtype, device=device))


def array(source_array: Any, ctx: Any = None, dtype: Any = None) -> NDArray:
    """A new array holding a copy of ``source_array`` on ``ctx``.

    The dtype is ``dtype`` if given, the source's for an NDArray (and a SciPy matrix),
    and float32 for anything else, NumPy arrays of any dtype included (MXNet converts).
    Sparse NDArrays and SciPy matrices give sparse arrays.
    """
    if (isinstance(source_array, _LibNDArray) and source_array.stype != "default") or _is_scipy_sparse(source_array):
        return sparse_copy(source_array, ctx, dtype)
    if isinstance(source_array, _LibNDArray):
        dt = source_array.dtype if dtype is None else mx_dtype(dtype)
    else:
        dt = mx_dtype(dtype)
    return _from_values(source_array, dt, _device(ctx))


def sparse_copy(source: Any, ctx: Any = None, dtype: Any = None) -> _LibNDArray:
    """A sparse copy of a sparse NDArray or a SciPy matrix (made canonical: sorted
    indices, duplicates summed) on ``ctx``; the dtype is ``dtype``, else the source's."""
    dev = _device(ctx)
    dt = source.dtype if dtype is None else dtype
    if isinstance(source, _LibNDArray):
        return as_face(held_sparse(lambda d: _core.array(kernel_form(source), dtype=d, device=dev), dt))
    m = source.tocsr().sorted_indices()  # a copy: the caller's matrix is left alone
    m.sum_duplicates()
    return as_face(held_sparse(lambda d: _core.csr_matrix((m.data, m.indices.astype(np.int64),
                                                            m.indptr.astype(np.int64)), shape=m.shape, dtype=d,
                                                           device=dev, copy=True), dt))


def _filled(out: NDArray | None, value: float, make: Callable[[], NDArray]) -> NDArray:
    if out is not None:
        out[:] = value
        return out
    return as_face(make())


def zeros(shape: Any, ctx: Any = None, dtype: Any = None, stype: str | None = None, out: NDArray | None = None,
          **kwargs: Any) -> NDArray:
    """An array of zeros (float32 unless ``dtype``; dense unless ``stype``); with ``out``,
    that array is zeroed instead."""
    kwargs.pop("name", None)
    if kwargs:
        raise MXNetArgumentError(f"zeros() got unexpected arguments {sorted(kwargs)}")
    dt = mx_dtype(dtype)
    if dt in EXTRA_DTYPES and (stype or "default") == "default":
        return _filled(out, 0, lambda: _from_values(np.zeros(shape), dt, _device(ctx)))
    return _filled(out, 0, lambda: _core.zeros(shape, stype=stype or "default", dtype=dt, device=_device(ctx)))


def ones(shape: Any, ctx: Any = None, dtype: Any = None, out: NDArray | None = None, **kwargs: Any) -> NDArray:
    """A dense array of ones (float32 unless ``dtype``); with ``out``, that array is filled."""
    kwargs.pop("name", None)
    if kwargs:
        raise MXNetArgumentError(f"ones() got unexpected arguments {sorted(kwargs)}")
    dt = mx_dtype(dtype)
    if dt in EXTRA_DTYPES:
        return _filled(out, 1, lambda: _from_values(np.ones(shape), dt, _device(ctx)))
    return _filled(out, 1, lambda: _core.ones(shape, dtype=dt, device=_device(ctx)))


def full(shape: Any, val: Any, ctx: Any = None, dtype: Any = mx_real_t, out: NDArray | None = None) -> NDArray:
    """A dense array filled with ``val``; with ``out``, fill that array instead."""
    dt = mx_dtype(dtype)
    if dt in EXTRA_DTYPES:
        return _filled(out, val, lambda: _from_values(np.full(shape, val), dt, _device(ctx)))
    return _filled(out, val, lambda: _core.full(shape, val, dtype=dt, device=_device(ctx)))


def empty(shape: Any, ctx: Any = None, dtype: Any = None, stype: str | None = None) -> NDArray:
    """An uninitialised array (float32 unless ``dtype``); sparse storage types store nothing."""
    dt = mx_dtype(dtype)
    if dt in EXTRA_DTYPES and (stype or "default") == "default":
        return _from_values(np.empty(shape), dt, _device(ctx))
    return as_face(_core.empty(shape, stype=stype or "default", dtype=dt, device=_device(ctx)))


@_op.mxnet_call(step=Param(float, 1.0), repeat=Param(int, 1))
def arange(start: float, stop: float | None = None, step: float = 1.0, repeat: int = 1,
           infer_range: Any = None, ctx: Any = None, dtype: Any = mx_real_t) -> NDArray:
    """Evenly spaced values in [start, stop) (``[0, start)`` without ``stop``), each
    repeated ``repeat`` times. Values are ``start + i * step`` computed in ``dtype``, as
    MXNet's kernel does."""
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise MXNetValueError("arange: argument step must not be 0")
    if repeat < 1:
        raise MXNetValueError(f"arange: argument repeat must be positive, got {repeat}")
    dt = mx_dtype(dtype)
    n = _builtins.max(int(np.ceil((stop - start) / step)), 0)
    steps = (np.arange(n * repeat) // repeat).astype(dt)
    values = dt.type(start) + steps * dt.type(step)
    return _from_values(values.astype(dt, copy=False), dt, _device(ctx))


@_op.mxnet_call(start=Param(float), stop=Param(float), num=Param(int), endpoint=Param(bool, True))
def linspace(start: float, stop: float, num: int, endpoint: bool = True, ctx: Any = None,
             dtype: Any = mx_real_t) -> NDArray:
    """``num`` evenly spaced values from ``start`` to ``stop`` (included when
    ``endpoint``); integer dtypes truncate toward zero, as MXNet's kernel casts."""
    if num < 0:
        raise MXNetValueError(f"linspace: argument num must not be negative, got {num}")
    dt = mx_dtype(dtype)
    divisions = (num - 1 if endpoint else num) or 1
    step = (stop - start) / divisions
    values = start + step * np.arange(num, dtype=np.float64)
    if endpoint and num > 1:
        values[-1] = stop
    return _from_values(values.astype(dt), dt, _device(ctx))


@_op.mxnet_call(N=Param(int), M=Param(int, 0), k=Param(int, 0))
def eye(N: int, M: int = 0, k: int = 0, ctx: Any = None, dtype: Any = None, **kwargs: Any) -> NDArray:
    """An N x M (M = N when 0) array with ones on diagonal ``k`` (above the main one when
    positive) and zeros elsewhere."""
    kwargs.pop("name", None)
    if kwargs:
        raise MXNetArgumentError(f"eye() got unexpected arguments {sorted(kwargs)}")
    dt = mx_dtype(dtype)
    return _from_values(np.eye(int(N), int(M) or None, int(k)), dt, _device(ctx))


def from_numpy(ndarray: np.ndarray, zero_copy: bool = True) -> NDArray:
    """An NDArray of a NumPy array's values and dtype. With ``zero_copy`` it shares the
    array's memory and, as in MXNet, the NumPy array becomes read-only (its writes would
    bypass the NDArray); that needs a C-contiguous array (ValueError otherwise)."""
    if not isinstance(ndarray, np.ndarray):
        raise MXNetArgumentError(f"from_numpy: expected a numpy.ndarray, got {type(ndarray).__name__} "
                                 "(argument ndarray)")
    dt = mx_dtype(ndarray.dtype)
    if not zero_copy:
        return _from_values(ndarray, dt, _dev.cpu())
    if not ndarray.flags.c_contiguous:
        raise MXNetValueError("from_numpy: zero_copy needs a C-contiguous array; pass zero_copy=False "
                              "or np.ascontiguousarray(ndarray) (argument ndarray)")
    if not ndarray.flags.writeable:  # e.g. made read-only by an earlier from_numpy: the NDArray still writes
        try:
            ndarray.flags.writeable = True
        except ValueError:
            raise MXNetValueError("from_numpy: zero_copy of a read-only view of memory that cannot be written; "
                                  "pass zero_copy=False (argument ndarray)") from None
    shared = ndarray.view()
    ndarray.flags.writeable = False
    return as_face(_LibNDArray(shared, _dev.cpu()))


class _Capsule:
    """A DLPack capsule handed to NumPy's ``from_dlpack``, which takes an object with
    ``__dlpack__``."""

    def __init__(self, capsule: Any, device: tuple[int, int]) -> None:
        self.capsule, self.device = capsule, device

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device


def to_dlpack_for_read(data: _LibNDArray) -> Any:
    """A DLPack capsule sharing ``data``'s values (dense arrays)."""
    return _capsule(data)


def to_dlpack_for_write(data: _LibNDArray) -> Any:
    """A DLPack capsule sharing ``data``'s values, for writing (dense arrays)."""
    return _capsule(data)


def _capsule(data: _LibNDArray) -> Any:
    """A versioned DLPack capsule (readers take an unversioned one as read-only), else the
    array module's plain one."""
    try:
        return kernel_form(data).__dlpack__(max_version=(1, 0))
    except TypeError:
        return kernel_form(data).__dlpack__()


def from_dlpack(dlpack: Any) -> NDArray:
    """An NDArray sharing the memory of a DLPack capsule (or of an object with ``__dlpack__``)."""
    source = dlpack if hasattr(dlpack, "__dlpack__") else _Capsule(dlpack, (1, 0))
    return as_face(_LibNDArray(np.from_dlpack(source), _dev.cpu()))


# ---- functions of MXNet's ndarray module -----------------------------------------------------------------
@_op.mxnet_call()
def onehot_encode(indices: _LibNDArray, out: _LibNDArray) -> _LibNDArray:
    """Write the one-hot rows of ``indices`` (depth ``out.shape[1]``) into ``out``."""
    return _op.call("one_hot", [indices], {"depth": out.shape[1], "dtype": out.dtype}, out=out)


def choose_element_0index(lhs: _LibNDArray, rhs: _LibNDArray, out: Any = None) -> _LibNDArray:
    """Row i's entry at column ``rhs[i]`` of a 2-d ``lhs`` (``pick`` along axis 1)."""
    return _op.call("pick", [lhs, rhs], {"axis": -1}, out=out)


def fill_element_0index(lhs: _LibNDArray, mhs: _LibNDArray, rhs: _LibNDArray, out: Any = None) -> _LibNDArray:
    """A copy of a 2-d ``lhs`` whose row i holds ``mhs[i]`` at column ``rhs[i]``."""
    hot = _op.call("one_hot", [rhs], {"depth": lhs.shape[1], "dtype": lhs.dtype})
    values = _op.call("broadcast_to", [_op.call("reshape", [mhs], {"shape": (-1, 1)})], {"shape": lhs.shape})
    return _op.call("where", [hot, values, lhs], out=out)


@_op.mxnet_call()
def moveaxis(tensor: _LibNDArray, source: Any, destination: Any) -> _LibNDArray:
    """``tensor`` with axes ``source`` moved to ``destination`` (ints or sequences of
    ints), the others in their order; ValueError for an axis out of range or repeated."""
    nd = len(tensor.shape)

    def axes(spec: Any, what: str) -> list[int]:
        listed = [spec] if isinstance(spec, integer_types) else list(spec)
        out = []
        for a in listed:
            if not -nd <= a < nd:
                raise ValueError(f"moveaxis: {what} axis {a} is out of range for a {nd}-d array")
            out.append(int(a) % nd)
        if len(set(out)) != len(out):
            raise ValueError(f"moveaxis: repeated axis in {what} {spec!r}")
        return out

    src, dst = axes(source, "source"), axes(destination, "destination")
    if len(src) != len(dst):
        raise ValueError(f"moveaxis: source {source!r} and destination {destination!r} need as many axes")
    order = [a for a in range(nd) if a not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return _op.call("transpose", [tensor], {"axes": tuple(order)})


def split_v2(ary: _LibNDArray, indices_or_sections: Any, axis: int = 0, squeeze_axis: bool = False) -> Any:
    """Pieces of ``ary`` along ``axis``: ``indices_or_sections`` equal ones (an int), or cut
    before each index of a sequence (as ``numpy.split``). One piece comes back as an array,
    several as a list."""
    if isinstance(indices_or_sections, integer_types):
        params = {"sections": int(indices_or_sections)}
    elif isinstance(indices_or_sections, (list, tuple)):
        params = {"indices": (0, *indices_or_sections)}
    else:
        raise MXNetValueError(f"split_v2: indices_or_sections must be an int or a tuple of ints, got "
                              f"{indices_or_sections!r}")
    params.update(axis=axis, squeeze_axis=squeeze_axis)
    return _op.call("_split_v2", [ary], params)


def waitall() -> None:
    """Wait for all pending device work. cpu work is synchronous; with CuPy loaded, every
    GPU is synchronised."""
    cupy = sys.modules.get("cupy")
    if cupy is None:
        return
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError:
        return
    for i in range(count):
        with cupy.cuda.Device(i):
            cupy.cuda.runtime.deviceSynchronize()


# ---- element-wise functions with scalar handling (MXNet's nd.add, nd.greater, ...) ----------------
def _ufunc(mx_name: str, array_op: str, scalar_fn: Callable, lscalar: str, rscalar: str | None = None) -> Callable:
    def fn(lhs: Any, rhs: Any) -> Any:
        return _op.ufunc(lhs, rhs, array_op, scalar_fn, lscalar, rscalar)

    fn.__name__ = fn.__qualname__ = mx_name
    fn.__doc__ = (f"``lhs {mx_name} rhs`` with broadcasting (``{array_op}``); a scalar operand uses "
                  f"``{lscalar}``.")
    return fn


def _with_arrays(mx_name: str, array_op: str, scalar_fn: Callable) -> Callable:
    """MXNet's ``nd.<mx_name>`` for an operator with no scalar form here: a scalar operand
    becomes a one-value array of the other operand's dtype, which ``array_op`` broadcasts."""
    def fn(lhs: Any, rhs: Any) -> Any:
        lnum, rnum = isinstance(lhs, numbers.Real), isinstance(rhs, numbers.Real)
        if lnum and rnum:
            return scalar_fn(lhs, rhs)
        if lnum and isinstance(rhs, _LibNDArray):
            lhs = full((1,), lhs, ctx=rhs.device, dtype=rhs.dtype)
        elif rnum and isinstance(lhs, _LibNDArray):
            rhs = full((1,), rhs, ctx=lhs.device, dtype=lhs.dtype)
        return _op.ufunc(lhs, rhs, array_op, scalar_fn, "")

    fn.__name__ = fn.__qualname__ = mx_name
    fn.__doc__ = f"``{mx_name}(lhs, rhs)`` with broadcasting (``{array_op}``); scalars broadcast as arrays."
    return fn


def _flag(test: Callable[[Any, Any], bool]) -> Callable[[Any, Any], int]:
    return lambda x, y: 1 if test(x, y) else 0


add = _ufunc("add", "broadcast_add", _pyop.add, "_plus_scalar")
subtract = _ufunc("subtract", "broadcast_sub", _pyop.sub, "_minus_scalar", "_rminus_scalar")
multiply = _ufunc("multiply", "broadcast_mul", _pyop.mul, "_mul_scalar")
divide = _ufunc("divide", "broadcast_div", _pyop.truediv, "_div_scalar", "_rdiv_scalar")
true_divide = divide
power = _ufunc("power", "broadcast_power", _pyop.pow, "_power_scalar", "_rpower_scalar")
maximum = _ufunc("maximum", "broadcast_maximum", lambda x, y: x if x > y else y, "_maximum_scalar")
minimum = _ufunc("minimum", "broadcast_minimum", lambda x, y: x if x < y else y, "_minimum_scalar")
equal = _ufunc("equal", "broadcast_equal", _flag(_pyop.eq), "_equal_scalar")
not_equal = _ufunc("not_equal", "broadcast_not_equal", _flag(_pyop.ne), "_not_equal_scalar")
greater = _ufunc("greater", "broadcast_greater", _flag(_pyop.gt), "_greater_scalar", "_lesser_scalar")
greater_equal = _ufunc("greater_equal", "broadcast_greater_equal", _flag(_pyop.ge),
                       "_greater_equal_scalar", "_lesser_equal_scalar")
lesser = _ufunc("lesser", "broadcast_lesser", _flag(_pyop.lt), "_lesser_scalar", "_greater_scalar")
modulo = _with_arrays("modulo", "broadcast_mod", _pyop.mod)
logical_and = _with_arrays("logical_and", "broadcast_logical_and", _flag(lambda x, y: bool(x) and bool(y)))
logical_or = _with_arrays("logical_or", "broadcast_logical_or", _flag(lambda x, y: bool(x) or bool(y)))
logical_xor = _with_arrays("logical_xor", "broadcast_logical_xor", _flag(lambda x, y: bool(x) != bool(y)))
lesser_equal = _ufunc("lesser_equal", "broadcast_lesser_equal", _flag(_pyop.le),
                      "_lesser_equal_scalar", "_greater_equal_scalar")


@_op.mxnet_call(axis=Param(int, 0), always_copy=Param(bool, True))
def concatenate(arrays: list, axis: int = 0, always_copy: bool = True) -> _LibNDArray:
    """Join arrays along ``axis`` (``concat`` with ``dim=axis``)."""
    if len(arrays) == 1 and not always_copy:
        return arrays[0]
    return _op.call("concat", list(arrays), {"dim": axis})


__all__ = ["NDArray", "py_slice", "array", "zeros", "ones", "full", "empty", "arange", "linspace", "eye",
           "from_numpy", "from_dlpack", "to_dlpack_for_read", "to_dlpack_for_write", "onehot_encode",
           "choose_element_0index", "fill_element_0index", "moveaxis", "split_v2", "waitall", "add", "subtract",
           "multiply", "divide", "true_divide", "power", "maximum", "minimum", "equal", "not_equal", "greater",
           "greater_equal", "lesser", "lesser_equal", "concatenate", "modulo", "logical_and", "logical_or",
           "logical_xor"]
