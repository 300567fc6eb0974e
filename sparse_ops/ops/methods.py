"""What a container does with operators: the Python operators, ``@``, MXNet's fluent methods.

The containers (``sparse_ops.ndarray``) know nothing of operators, dispatch or autograd:
layers import downward only. ``install`` attaches to ``NDArray`` (and so to every
container) what is written with operators; ``sparse_ops.container_methods`` calls it, the
one place where container methods are installed:

- the Python operators (``x + y``, ``x * 2``, ``x > 0``, ``x += y``, ``-x``, ``abs(x)``)
  through the table ``PYTHON_OPERATORS``, each one operator call;
- ``x @ y``: ``dot`` with NumPy's matmul rules for 1-d operands;
- MXNet's fluent methods (``x.sum(axis=1)`` is ``sum(x, axis=1)``, ``x.dot(y)``, ``x.T``);
- ``attach_grad``, the in-place write guard of ``x[:] = ...`` (``NDArray._check_writable``)
  and indexing while recording (``NDArray._record_index``: ``x[key]`` as a recorded ``take``
  of the entries it reads), from the recording half (``sparse_ops.tape``).
"""
from __future__ import annotations

import numbers
from typing import Any, Callable

import numpy as np

from .. import tape as _tape
from ..creation import zeros
from ..dtypes import promote_types
from ..errors import OperatorError
from ..ndarray import STYPES, NDArray
from ._util import T

# ---- Python operators ---------------------------------------------------------------------------
# operator -> (same-shape op, broadcasting op, array ∘ scalar op, scalar ∘ array op)
PYTHON_OPERATORS: dict[str, tuple[Callable, Callable, Callable, Callable]] = {
    "add": (T.elemwise_add, T.broadcast_add, T._plus_scalar, T._plus_scalar),
    "sub": (T.elemwise_sub, T.broadcast_sub, T._minus_scalar, T._rminus_scalar),
    "mul": (T.elemwise_mul, T.broadcast_mul, T._mul_scalar, T._mul_scalar),
    "div": (T.elemwise_div, T.broadcast_div, T._div_scalar, T._rdiv_scalar),
    "pow": (T.broadcast_power, T.broadcast_power, T._power_scalar, T._rpower_scalar),
    "eq": (T.broadcast_equal, T.broadcast_equal, T._equal_scalar, T._equal_scalar),
    "ne": (T.broadcast_not_equal, T.broadcast_not_equal, T._not_equal_scalar, T._not_equal_scalar),
    "gt": (T.broadcast_greater, T.broadcast_greater, T._greater_scalar, T._lesser_scalar),
    "ge": (T.broadcast_greater_equal, T.broadcast_greater_equal, T._greater_equal_scalar, T._lesser_equal_scalar),
    "lt": (T.broadcast_lesser, T.broadcast_lesser, T._lesser_scalar, T._greater_scalar),
    "le": (T.broadcast_lesser_equal, T.broadcast_lesser_equal, T._lesser_equal_scalar, T._greater_equal_scalar),
}


def python_operator(kind: str, x: NDArray, other: Any, reverse: bool = False, out: NDArray | None = None) -> Any:
    """``x ∘ other`` (``other ∘ x`` when ``reverse``) for NDArray's Python operators.

    Arrays of one shape use the storage-aware ``elemwise_*`` ops, other shapes the dense
    ``broadcast_*`` ones (comparisons and ``**`` always broadcast); real scalars use the
    scalar ops, so ``x * 2`` keeps sparsity and ``x + 1`` is dense. ``out`` receives the
    result (in-place operators pass ``out=x``). Other operands (NumPy arrays included, which
    then compute the result themselves through ``__array__``) give NotImplemented.
    """
    same, bcast, with_scalar, scalar_with = PYTHON_OPERATORS[kind]
    if isinstance(other, NDArray):
        lhs, rhs = (other, x) if reverse else (x, other)
        op = same if lhs.shape == rhs.shape else bcast
        if out is None:
            return op(lhs, rhs)
        _check_in_place(kind, out, lhs, rhs)
        return op(lhs, rhs, out=out)
    if isinstance(other, (bool, np.bool_)):  # a number to NumPy and MXNet: True is 1.0
        other = float(other)
    if isinstance(other, numbers.Real):
        return (scalar_with if reverse else with_scalar)(x, scalar=other, out=out)
    return _numpy_result(_NUMPY_OPERATORS[kind], x, other, reverse)


_NUMPY_OPERATORS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
                    "pow": np.power, "eq": np.equal, "ne": np.not_equal, "gt": np.greater,
                    "ge": np.greater_equal, "lt": np.less, "le": np.less_equal}


def _check_in_place(kind: str, out: NDArray, lhs: NDArray, rhs: NDArray) -> None:
    """``x += y`` stores the promoted result back into x's dtype: allowed where NumPy allows
    it (``same_kind`` casting: float64 into float32 yes, float into an integer array no)."""
    result = promote_types(lhs.dtype, rhs.dtype)
    if not np.can_cast(result, out.dtype, casting="same_kind"):
        raise TypeError(f"in-place {kind}: the result is {result.name}, which cannot be stored in the "
                        f"{out.dtype.name} array on the left (NumPy's same_kind rule); write x = x {_SYMBOLS[kind]} y")


_SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "div": "/"}


def matmul(lhs: NDArray, rhs: NDArray) -> NDArray:
    """``lhs @ rhs``: ``dot(lhs, rhs)``, so storage types, kernels and the fallback warning
    are ``dot``'s (``csr @ dense`` -> default, ``dense @ csr`` -> csr; pairs without a
    storage-aware kernel, such as ``csr @ csr`` today, densify with a warning).

    Shapes follow NumPy's ``matmul`` for 1-d and 2-d operands: a 1-d operand is a vector
    (``(m, k) @ (k,)`` -> ``(m,)``, ``(k,) @ (k, n)`` -> ``(n,)``), two vectors give a 0-d
    result, and ``vector @ csr`` is dense (a vector cannot be csr). Operands of more than
    two axes are refused: NumPy's ``@`` batches them, MXNet's ``dot`` contracts them, and
    guessing would be wrong for one of the two.
    """
    for name, x in (("lhs", lhs), ("rhs", rhs)):
        if x.ndim not in (1, 2):
            raise ValueError(
                f"@ takes 1-d and 2-d operands; {name} has shape {x.shape}. For N-d operands call "
                "sparse_ops.dot (MXNet's contraction: lhs's last axis with rhs's first)")
    # shapes that do not align: dot's own error (an InferenceError, a ValueError)
    if lhs.ndim == 1 and rhs.stype == "csr":
        result = T.dot(lhs, rhs, forward_stype="default")  # a vector result cannot be csr
    else:
        result = T.dot(lhs, rhs)
    return T.reshape(result, shape=()) if lhs.ndim == rhs.ndim == 1 else result


def _binary(kind: str) -> tuple[Callable, Callable, Callable]:
    """(``__op__``, ``__rop__``, ``__iop__``) of Python operator ``kind``."""
    same = PYTHON_OPERATORS[kind][0]

    def forward(self: NDArray, other: Any) -> Any:
        if self.__class__ is other.__class__ is NDArray and self._data.shape == other._data.shape:
            return same(self, other)  # two dense arrays of one shape: python_operator's first case
        return python_operator(kind, self, other)

    def reverse(self: NDArray, other: Any) -> Any:
        return python_operator(kind, self, other, reverse=True)

    def in_place(self: NDArray, other: Any) -> Any:
        return python_operator(kind, self, other, out=self)

    return forward, reverse, in_place


_ARITHMETIC = ("add", "sub", "mul", "div", "pow")  # the others are comparisons: Python reflects them


def _negative_method(self: NDArray) -> NDArray:
    return T.negative(self)


def _abs_method(self: NDArray) -> NDArray:
    return T.abs(self)


def _matmul_method(self: NDArray, other: Any) -> Any:
    if isinstance(other, NDArray):
        return matmul(self, other)
    return _numpy_result(np.matmul, self, other, False)


def _rmatmul_method(self: NDArray, other: Any) -> Any:
    if isinstance(other, NDArray):
        return matmul(other, self)
    return _numpy_result(np.matmul, self, other, True)


def _numpy_result(fn: Callable, x: NDArray, other: Any, reverse: bool) -> Any:
    """``fn(x, other)`` (``fn(other, x)`` when ``reverse``) computed by NumPy on a host view of
    x, for a NumPy array ``other`` (NumPy defers to our operators: ``NDArray.__array_priority__``):
    the NumPy result it gave before; NotImplemented for other operands."""
    if not isinstance(other, np.ndarray) or other.dtype == object:
        return NotImplemented
    a = np.asarray(x)  # (a sparse container refuses: it never densifies silently)
    return fn(other, a) if reverse else fn(a, other)


# ---- autograd methods ---------------------------------------------------------------------------
def attach_grad(self: NDArray, grad_req: str = "write", stype: str | None = None) -> None:
    """Make this array a variable: backward writes its gradient into ``self.grad``
    (a zero buffer of storage type ``stype``, default this array's own) per ``grad_req``
    (``write``, ``add`` or ``null``). On a recorded intermediate result the gradient is
    kept as well (MXNet 2's retain-grad semantics). A csr array with a csr gradient gets the
    gradient of its stored values: a csr of its own structure."""
    if self.dtype.kind not in "fc":
        raise TypeError(f"attach_grad on an array of dtype {self.dtype.name}: integer and boolean arrays cannot be "
                        f"differentiated (the gradient would be computed in {self.dtype.name} and truncated; torch "
                        "refuses requires_grad on them too); attach the gradient to a floating-point copy, e.g. "
                        "x.astype('float32')")
    attach_gradient_buffer(self, grad_req, stype)


def attach_gradient_buffer(x: NDArray, grad_req: str = "write", stype: str | None = None) -> None:
    """``attach_grad`` for an array of any dtype (MXNet's faces attach integer arrays too,
    whose gradients then are integers)."""
    if stype is not None and stype not in STYPES:
        raise ValueError(f"attach_grad: unknown storage type {stype!r} for the gradient (one of "
                         f"{', '.join(map(repr, STYPES))})")
    buf = zeros(x.shape, stype=stype or x.stype, dtype=x.dtype, device=x._device)
    _tape.mark_variables([x], [buf], grad_req)


# ---- fluent methods ------------------------------------------------------------------------------
# MXNet's fluent methods: x.sum(axis=1) is sum(x, axis=1), and so on.
FLUENT = ("sum", "mean", "norm", "square_sum", "reshape", "transpose", "flatten", "expand_dims", "split",
          "slice", "slice_axis", "take", "clip", "abs", "sign", "square", "sqrt", "exp", "log", "log1p", "relu",
          "sigmoid", "tanh", "zeros_like", "ones_like", "dot", "broadcast_to", "broadcast_like",
          "round", "rint", "fix", "floor", "ceil", "trunc", "sin", "cos", "tan", "arcsin", "arccos", "arctan",
          "sinh", "cosh", "arcsinh", "arccosh", "arctanh", "degrees", "radians", "expm1", "log2", "log10", "cbrt",
          "rsqrt", "reciprocal", "max", "min", "prod", "nansum", "nanprod", "argmax", "argmin", "argmax_channel",
          "softmax", "log_softmax", "softmin", "squeeze", "tile", "repeat", "swapaxes", "one_hot", "argsort",
          "shape_array", "size_array", "reshape_like", "pick", "slice_like", "sort", "topk")
FLUENT_ALIASES = {"flip": "reverse", "broadcast_axes": "broadcast_axis"}  # MXNet's method name -> the operator


def _fluent(name: str, op: str) -> Callable:
    """The method ``name`` calling the operator ``op`` as registered when called (a
    replacement of the op, ``register(op, replace=True)``, is what the method runs)."""
    def method(self: NDArray, *args: Any, **kwargs: Any) -> Any:
        return getattr(T, op)(self, *args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"``{name}(self, ...)``; see ``sparse_ops.{name}``."
    return method


def _reshape_method(self: NDArray, *shape: Any, **params: Any) -> NDArray:
    """``x.reshape((2, 3))`` or, as NumPy, ``x.reshape(2, 3)``; MXNet's special sizes and
    ``reverse`` by keyword (see ``sparse_ops.reshape``)."""
    if shape:
        if "shape" in params:
            raise TypeError("reshape() got the shape both by position and by keyword")
        params["shape"] = shape[0] if len(shape) == 1 else shape
    return T.reshape(self, **params)


def _recorded_sparse_index(x: NDArray, key: Any) -> NDArray | None:
    """``x[key]`` of a csr or row_sparse ``x`` as recorded operators, of the storage type the
    unrecorded indexing gives: row slices (``slice``: a csr's rows as a csr, a row_sparse's
    as a row_sparse), a row_sparse's row or row ids (``take``: dense rows, its gradient a
    row_sparse one), anything else on the dense form. None: a key the container refuses."""
    rows = x.shape[0]
    if isinstance(key, slice):
        if x.stype == "csr" and key.step not in (None, 1):
            return None
        start, stop, step = key.indices(rows)
        y = T.slice(x, begin=(start,), end=(stop if stop >= 0 else None,), step=(step,))
        return y if y.stype == x.stype else T.cast_storage(y, stype=x.stype)
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        if not -rows <= key < rows:
            return None
        i = int(key) % rows
        y = T.slice(x, begin=(i,), end=(i + 1,))
        return y if x.stype == "csr" else T.reshape(T.cast_storage(y, stype="default"), shape=x.shape[1:])
    if x.stype == "csr":
        return None
    if isinstance(key, tuple):
        return recorded_index(T.cast_storage(x, stype="default"), key)
    ids = x._row_ids(key)
    return T.take(x, NDArray(ids.reshape(-1), x._device), axis=0).reshape(tuple(ids.shape) + x.shape[1:])


def recorded_index(x: NDArray, key: Any) -> NDArray | None:
    """``x[key]`` (a NumPy key) as recorded operators when autograd records and ``x`` needs a
    gradient: a ``take`` of the entries it reads from ``x`` flattened, so the gradient adds
    each head-gradient entry back where it was read (a copy, not a view). None otherwise:
    the caller gives the plain view."""
    info = x._ag
    if not (_tape.is_recording() and info is not None and info.needs_grad()):
        return None
    if x.stype != "default":
        return _recorded_sparse_index(x, key)
    xp = x._device.xp
    first = key[0] if isinstance(key, tuple) and len(key) == 1 else key
    if x.ndim and not isinstance(first, tuple) and (isinstance(first, (int, np.integer, slice)) or
                                                     getattr(xp.asarray(first), "ndim", 2) <= 1):
        rows = xp.asarray(xp.arange(x.shape[0], dtype=np.int64)[first])  # rows only: x is never flattened
        picked = T.take(x, NDArray(rows.reshape(-1), x._device), axis=0)
        return T.reshape(picked, shape=tuple(rows.shape) + tuple(x.shape[1:]))
    positions = _flat_positions(x, key)  # (a copy of x flattened: keys over several axes)
    picked = T.take(T.reshape(x, shape=(-1,)), NDArray(positions.reshape(-1), x._device), axis=0)
    return T.reshape(picked, shape=positions.shape)


def recorded_write(x: NDArray, key: Any, value: NDArray) -> bool:
    """``x[key] = value`` when autograd records and ``value`` needs a gradient: a write of the
    whole array (``x[:]``, ``x[...]``) is a recorded copy into ``x``, which becomes its output
    in the graph (torch's ``copy_``, MXNet's recorded ``x[:] = y``); a write into part of ``x``
    is refused, since no recorded operator would give the rest of ``x`` its origin. False
    otherwise: the caller writes the values."""
    info = value._ag
    if not (_tape.is_recording() and info.needs_grad()):
        return False
    if not (key is Ellipsis or (isinstance(key, slice) and key == slice(None))):
        raise OperatorError(f"x[{key!r}] = value: writing a value that needs a gradient into part of an array is "
                            "not recorded by autograd; build the array from operators (concat, where, "
                            "broadcast_to) instead, or write outside autograd.record()")
    if value.shape == x.shape:
        T.identity(value, out=x)
    else:
        T.broadcast_to(value, shape=x.shape, out=x)
    return True


def _flat_positions(x: NDArray, key: Any) -> Any:
    """The flat position in ``x`` of each entry of ``x[key]`` (int64, the result's shape), in
    memory of the result's size: each axis' coordinate read through a broadcast (stride-0)
    view, never an index array of the whole of ``x`` (a large table indexed while recording)."""
    xp, shape = x._device.xp, x.shape
    flat = xp.asarray(xp.zeros((), dtype=np.int64)[key] if not shape else 0)
    step = 1
    for axis in reversed(range(len(shape))):
        along = xp.arange(shape[axis], dtype=np.int64).reshape((shape[axis],) + (1,) * (len(shape) - axis - 1))
        flat = flat + xp.broadcast_to(along, shape)[key] * step
        step *= shape[axis]
    return xp.asarray(flat, dtype=np.int64)


def install(cls: type = NDArray) -> None:
    """Attach the Python operators, ``@``, the fluent methods and ``attach_grad`` to ``cls``."""
    for kind in PYTHON_OPERATORS:
        forward, reverse, in_place = _binary(kind)
        name = "truediv" if kind == "div" else kind
        setattr(cls, f"__{name}__", forward)
        if kind in _ARITHMETIC:
            setattr(cls, f"__r{name}__", reverse)
            if kind != "pow":  # MXNet has no in-place **; Python then rebinds x = x ** y
                setattr(cls, f"__i{name}__", in_place)
    # ``x @= y`` is left to Python's fallback (``x = x @ y``): the product's shape and storage
    # type may differ from x's (``dense @ csr`` is csr), which no in-place write can keep.
    cls.__matmul__, cls.__rmatmul__ = _matmul_method, _rmatmul_method
    cls.__neg__ = _negative_method
    cls.__abs__ = _abs_method
    cls.attach_grad = attach_grad
    cls._check_writable = staticmethod(_tape.check_not_in_graph)
    cls._record_index = staticmethod(recorded_index)
    cls._record_write = staticmethod(recorded_write)
    cls.reshape = _reshape_method
    for name in FLUENT:
        if not hasattr(cls, name):
            setattr(cls, name, _fluent(name, name))
    for name, op in FLUENT_ALIASES.items():
        if not hasattr(cls, name):
            setattr(cls, name, _fluent(name, op))
    cls.T = property(lambda self: T.transpose(self), doc="The transpose (``transpose(self)``).")


__all__ = ["PYTHON_OPERATORS", "python_operator", "matmul", "install"]
