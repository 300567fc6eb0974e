"""Which value and index dtypes containers accept, and how dtypes are normalised."""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

VALUE_DTYPES: tuple[np.dtype, ...] = tuple(
    np.dtype(t) for t in ("float16", "float32", "float64", "int32", "int64")
)
INDEX_DTYPES: tuple[np.dtype, ...] = (np.dtype("int32"), np.dtype("int64"))
DEFAULT_DTYPE = np.dtype("float32")
DEFAULT_INDEX_DTYPE = np.dtype("int64")

_VALUE_SET = frozenset(VALUE_DTYPES)
_INDEX_SET = frozenset(INDEX_DTYPES)


def value_dtype(dtype: Any, default: np.dtype | None = DEFAULT_DTYPE) -> np.dtype:
    """Normalise ``dtype`` (name, type or np.dtype; None means ``default``) to a supported value dtype."""
    if dtype is None:
        if default is None:
            raise TypeError("a dtype is required")
        return default
    try:
        np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"not a dtype: {dtype!r}") from exc
    return held_dtype(dtype)


def dtype_name(dtype: Any) -> str:
    """A dtype's short name, for NumPy, JAX (``bfloat16``) and torch (``torch.uint8`` ->
    ``uint8``) dtypes alike."""
    if not isinstance(dtype, np.dtype) and str(dtype).startswith("torch."):  # (not np.dtype's TypeError:
        return str(dtype).rsplit(".", 1)[-1]                                 # torch.compile cannot trace it)
    try:
        dt = np.dtype(dtype)
    except TypeError:
        return str(dtype).rsplit(".", 1)[-1]
    if dt.isnative:
        return dt.name
    return f"{dt.name} ({'big' if dt.byteorder == '>' else 'little'}-endian, not this machine's byte order)"


def not_held(dtype: Any, kind: str = "value") -> str:
    """The one wording of a refused dtype, on every face (native, torch, JAX, C, files):
    the dtype and the ones that are held. Faces put the op and the argument before it and
    their own way to convert after it."""
    held = INDEX_DTYPES if kind == "index" else VALUE_DTYPES
    names = ", ".join(d.name for d in held)
    return f"arrays of dtype {dtype_name(dtype)} are not supported (supported {kind} dtypes: {names})"


def held_dtype(dtype: Any, kind: str = "value", hint: str = "") -> np.dtype:
    """``dtype`` as a NumPy dtype when sparse-ops holds it as a ``kind`` ("value" or "index")
    dtype, else a TypeError worded by ``not_held`` followed by ``hint``."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt is None or dt not in (_INDEX_SET if kind == "index" else _VALUE_SET):
        raise TypeError(not_held(dtype, kind) + (f"; {hint}" if hint else ""))
    return dt


def source_dtype(dtype: Any) -> np.dtype:
    """The dtype to keep for an existing array: its own if held (in this machine's byte
    order: the values of a big-endian float32 array are converted to float32), else a
    clear error."""
    dt = np.dtype(dtype)
    return held_dtype(dt if dt.isnative else dt.newbyteorder("="), hint="pass dtype= to convert")


# ---- dtypes of operator results ---------------------------------------------------------
def promote_types(*dtypes: np.dtype) -> np.dtype:
    """The dtype NumPy gives a binary operation on arrays of ``dtypes`` (``np.result_type``):
    float32 with float64 is float64, an integer with a float is a float wide enough for
    both (int32 or int64 with float32 is float64), int32 with int64 is int64. Every result
    of two supported value dtypes is itself supported."""
    first = dtypes[0]
    for d in dtypes[1:]:
        if d != first:
            return np.result_type(*dtypes)
    return first


def require_one_dtype(op: str, names: tuple[str, ...], dtypes: tuple[np.dtype, ...]) -> np.dtype:
    """The one dtype of the inputs of an op that cannot promote (an in-place update, a kernel
    of one dtype), else a TypeError naming the first argument that differs from the first."""
    first = dtypes[0]
    for i, d in enumerate(dtypes[1:], 1):
        if d != first:
            # named arguments where each input has one; else positions (variadic ops: add_n, concat)
            name, head = ((f"argument {names[i]!r}", repr(names[0])) if len(names) == len(dtypes)
                          else (f"input {i}", "input 0"))
            raise TypeError(
                f"{name} is {np.dtype(d).name} but {head} is {np.dtype(first).name}; "
                f"{op} takes inputs of one dtype (it cannot promote): convert one with .astype()")
    return first


def in_input_dtypes(gradient: Callable) -> Callable:
    """Wrap an op's ``gradient`` so each input's gradient comes back in that input's dtype.

    An operator that promotes (float32 with float64 gives float64) receives, and computes, its
    gradients in the promoted dtype; the float32 input's gradient is cast back, as PyTorch's
    engine does. The cast is a container conversion, not a recorded op: a second-order
    gradient through a promoting call does not see it."""
    @functools.wraps(gradient)
    def wrapped(self: Any, out_grads: list, inputs: list, outputs: list, **kwargs: Any) -> list:
        grads = gradient(self, out_grads, inputs, outputs, **kwargs)
        dtypes = [x.dtype for x in inputs]
        first = dtypes[0]
        for d in dtypes:
            if d != first:
                break
        else:  # one dtype in: nothing was promoted (the common case, kept to a few Python calls)
            return grads
        return [g if g is None or g.dtype == d else g.astype(d) for g, d in zip(grads, dtypes)]

    return wrapped


def truncated_ids(xp: Any, ids: Any) -> Any:
    """Float index values as int64, truncated toward zero as MXNet's cast truncates them, and
    held at int64's bounds: a cast of a float past them gives int64's minimum, which would
    turn a huge length or index into a negative one (a length of 1e19 masking everything,
    an index of 1e20 clipped to row 0). NaN and infinities are the caller's to refuse."""
    bound = np.nextafter(ids.dtype.type(2.0 ** 63), ids.dtype.type(0))  # float16: its largest value
    return xp.clip(ids, -bound, bound).astype(np.int64)
