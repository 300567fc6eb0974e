"""Small helpers shared by the built-in operators' kernels."""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

import numpy as np

from ..dispatch import op_function
from ..dtypes import truncated_ids
from ..errors import InvalidIndexError
from ..registry import subscribe
from ..storage import _csr_row_ids, _result_index_dtype  # noqa: F401  (re-exported)

_NUMBA_DTYPES = frozenset(np.dtype(t) for t in ("float32", "float64", "int32", "int64"))


_KERNEL_MODULES: dict[str, ModuleType] = {}


def kernel_module(name: str) -> ModuleType:
    """``sparse_ops.kernels.<name>``, imported on first use (``import sparse_ops`` compiles
    nothing) and kept, so a call pays a dictionary look-up, not an import statement."""
    module = _KERNEL_MODULES.get(name)
    if module is None:
        module = _KERNEL_MODULES[name] = importlib.import_module(f"sparse_ops.kernels.{name}")
    return module


def is_host(a: Any) -> bool:
    """Whether ``a`` is a NumPy array (so numba cpu kernels can take it)."""
    return isinstance(a, np.ndarray)


def numba_values(a: np.ndarray) -> np.ndarray:
    """Values numba can compute on: float16 (no numba cpu support) widened to float32."""
    return a.astype(np.float32) if a.dtype == np.float16 else a


def row_ids(x: Any) -> Any:
    """The row of each stored value of csr ``x``."""
    return _csr_row_ids(x, x.device.xp)


# Row gathers, scatters and lazy optimizer updates move a few bytes per value: for the
# project's one parallel-size policy (``sparse_ops.sdk.rowkernel.parallel_worth``) a value
# is 1/8 of a work unit (crossover measured at about 16k rows of 64 float32 on the 2-core
# development machine, where a parallel region costs ~50-100 us).
ROW_VALUES_PER_WORK = 8


def rows_in_parallel(values: int) -> bool:
    """Whether a row kernel touching ``values`` values should run its parallel form."""
    from ..sdk.rowkernel import parallel_worth

    return parallel_worth(values // ROW_VALUES_PER_WORK)


def index_dtype_for(*arrays: Any, nnz: int = 0, shape: tuple = ()) -> np.dtype:
    """int32 when every source index array is int32 and the result fits, else int64."""
    if all(a.dtype == np.int32 for a in arrays):
        return _result_index_dtype(np.dtype(np.int32), nnz, shape or (0,))
    return np.dtype(np.int64)


def match_rows(sorted_ids: Any, query: Any, xp: Any) -> tuple[Any, Any]:
    """Positions (in ``query``, in ``sorted_ids``) of the values of ``query`` found in ``sorted_ids``."""
    if sorted_ids.shape[0] == 0 or query.shape[0] == 0:
        empty = xp.zeros(0, dtype=np.int64)
        return empty, empty
    pos = xp.searchsorted(sorted_ids, query)
    pos_c = xp.minimum(pos, sorted_ids.shape[0] - 1)
    found = sorted_ids[pos_c] == query
    q = xp.nonzero(found)[0]
    return q, pos_c[q]


class _Table:
    """Every registered operator's function, looked up by attribute when used: ``T.negative(g)``.

    Gradient rules use operators of other families through it, so the ops modules need not
    import each other both ways (they import downward only; a test checks)."""

    def __getattr__(self, name: str) -> Any:
        fn = op_function(name)
        setattr(self, name, fn)  # later look-ups are an attribute read, until the op changes
        return fn

    def _forget(self, name: str, opdef: Any) -> None:
        self.__dict__.pop(name, None)


T = _Table()
subscribe(T._forget)


# ---- shapes shared by the broadcasting ops and their gradients -----------------------------------
def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy's broadcast of ``shapes``, in comparisons of the sizes only: sizes that
    ``torch.compile`` made symbolic stay symbolic (``np.broadcast_shapes`` would turn them
    into ints, and the compiled code would then hold for that one size)."""
    ndim = max([len(s) for s in shapes] + [0])  # (Dynamo traces no max(..., default=))
    out = []
    for axis in range(ndim):
        size: Any = 1
        for s in shapes:
            k = axis - (ndim - len(s))
            if k < 0 or s[k] == 1:
                continue
            if size == 1:
                size = s[k]
            elif s[k] != size:
                raise ValueError(f"shapes {', '.join(str(tuple(x)) for x in shapes)} cannot be broadcast together: "
                                 f"axis {axis} has lengths {size} and {s[k]}")
        out.append(size)
    return tuple(out)


def sum_to_shape(g: Any, shape: tuple[int, ...]) -> Any:
    """A broadcast gradient summed back to an input's ``shape`` (the broadcast axes summed,
    with operators, so the sum is recorded; ``g`` itself when it already fits)."""
    if g.shape == shape:
        return g
    lead = len(g.shape) - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, d in enumerate(shape) if d == 1 and g.shape[lead + i] != 1)
    return T.reshape(T.sum(g, axis=axes, keepdims=False), shape=shape) if axes else T.reshape(g, shape=shape)


def float_math(dtype: np.dtype) -> Any:
    """The ufunc ``dtype=`` that computes integer inputs in float64 (None: the input's own loop)."""
    return np.float64 if dtype.kind in "iu" else None


def int_ids(xp: Any, ids: Any, op: str, argument: str) -> Any:
    """Indices or ids as integers: integer arrays as they are, floats truncated toward zero
    (MXNet's cast). NaN and infinite floats are refused naming the op and the argument: a
    cast would give the dtype's minimum, which clipping turned into row 0 without a word."""
    if ids.dtype.kind in "iu":
        return ids
    refuse_nonfinite_ids(xp, ids, op, argument)
    return truncated_ids(xp, ids)


def refuse_nonfinite_ids(xp: Any, ids: Any, op: str, argument: str) -> None:
    """Refuse NaN and infinite float indices, naming the op and the argument."""
    if ids.dtype.kind == "f" and ids.size:
        finite = xp.isfinite(ids)
        if not bool(finite.all()):
            bad = ids.ravel()[int(xp.argmin(finite.ravel()))].item()
            raise InvalidIndexError(f"operator {op!r}: argument {argument!r} holds {bad}, which is no index "
                                    "(float indices must be finite; they truncate toward zero)")
