"""Storage invariants of csr and row_sparse components, checked with vectorised array code.

Pure functions over arrays of one array module (NumPy or CuPy). Each raises
``SparseFormatError`` naming the first broken invariant. ``full=False`` runs only the
O(1) checks (lengths, dtypes, endpoints); ``full=True`` adds the O(nnz) ones (index
ranges, ordering, monotone indptr). See ``CSRNDArray.check_format``.

The O(nnz) checks are array code (``csr_violation``, ``row_sparse_violation``), one body
for NumPy and CuPy. On NumPy index arrays a small check is a dozen NumPy calls, most of a
small operator call's time, so the kernels layer compiles the same bodies with numba and
hooks them in at its import (``HOST_CHECKS``); until then, and for other arrays, the array
code runs as written.
"""
from __future__ import annotations

import operator
import sys
from typing import Any, Callable, Sequence

import numpy as np

from .errors import SparseFormatError

_INT64_MAX = 2**63 - 1

# name -> the compiled twin of the array-code check of that name, for NumPy int32/int64 index
# arrays; filled by sparse_ops/kernels/checks.py when the kernels layer loads
HOST_CHECKS: dict[str, Callable[..., int]] = {}
_COMPILED_INDEX = (np.dtype(np.int32), np.dtype(np.int64))


def _violation_check(name: str, array_code: Callable[..., int], *indices: Any) -> Callable[..., int]:
    """The compiled ``name`` check where one is hooked in and every index array is a NumPy
    int32/int64 one, else ``array_code``."""
    compiled = HOST_CHECKS.get(name)
    if compiled is not None and all(type(a) is np.ndarray and a.dtype in _COMPILED_INDEX for a in indices):
        return compiled
    return array_code


def normalize_shape(shape: Any, ndim: int | None = None) -> tuple[int, ...]:
    """A tuple of non-negative Python ints; ``ndim`` (if given) is enforced."""
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, (bool, np.bool_)):
        shape = (shape,)
    try:
        dims = tuple(shape)
    except TypeError:
        raise SparseFormatError(f"shape must be an int or a sequence of ints, got {shape!r}") from None
    out = []
    for d in dims:
        if isinstance(d, (bool, np.bool_)):
            raise SparseFormatError(f"shape entries must be integers, got {shape!r}")
        try:
            d = operator.index(d)
        except TypeError:
            raise SparseFormatError(f"shape entries must be integers, got {shape!r}") from None
        if d < 0:
            raise SparseFormatError(f"shape entries must be non-negative, got {shape!r}")
        if d > _INT64_MAX:
            raise SparseFormatError(f"shape entry {d} does not fit in int64 (at most 2**63 - 1), "
                                    f"got shape {shape!r}")
        out.append(int(d))
    if ndim is not None and len(out) != ndim:
        raise SparseFormatError(f"expected a {ndim}-d shape, got {tuple(out)}")
    return tuple(out)


def _require_index_array(arr: Any, name: str) -> None:
    if arr.ndim != 1:
        raise SparseFormatError(f"{name} must be 1-d, got shape {tuple(arr.shape)}")
    if arr.dtype.kind not in "iu":
        raise SparseFormatError(f"{name} must have an integer dtype, got {arr.dtype}")


def _first_false(mask: Any) -> int:
    return int(mask.argmin())


def check_csr(data: Any, indices: Any, indptr: Any, shape: Sequence[int], full: bool = True,
              canonical: bool = True) -> None:
    """Raise SparseFormatError unless (data, indices, indptr) is a csr of ``shape``, canonical
    (sorted, unique indices per row) unless ``canonical=False``."""
    if len(shape) != 2:
        raise SparseFormatError(f"csr arrays are 2-d, got shape {tuple(shape)}")
    rows, cols = shape
    _require_index_array(indptr, "csr indptr")
    _require_index_array(indices, "csr indices")
    if data.ndim != 1:
        raise SparseFormatError(f"csr data must be 1-d, got shape {tuple(data.shape)}")
    if indptr.shape[0] != rows + 1:
        raise SparseFormatError(
            f"csr indptr must have rows + 1 = {rows + 1} entries, got {indptr.shape[0]}"
        )
    nnz = indices.shape[0]
    if data.shape[0] != nnz:
        raise SparseFormatError(
            f"csr data and indices must have the same length, got {data.shape[0]} and {nnz}"
        )
    first, last = int(indptr[0]), int(indptr[-1])
    if first != 0:
        raise SparseFormatError(f"csr indptr must start at 0, got {first}")
    if last != nnz:
        raise SparseFormatError(f"csr indptr must end at nnz = {nnz}, got {last}")
    if not full:
        return
    _refuse_shared_values(data, (indices, "indices"), (indptr, "indptr"))
    code = _violation_check("csr", csr_violation, indices, indptr)(indices, indptr, cols, canonical)
    if code != OK:
        raise SparseFormatError(_csr_violation_detail(code, indices, indptr, cols))


# the codes of csr_violation
OK, DECREASING, OUT_OF_RANGE, UNORDERED = 0, 1, 2, 3


def csr_violation(indices: Any, indptr: Any, columns: int, canonical: bool = True) -> int:
    """``OK``, or the first broken O(nnz) invariant of a csr structure whose O(1) ones
    hold (lengths, ``indptr``'s ends): ``indptr`` DECREASING somewhere, a column index
    OUT_OF_RANGE ``[0, columns)``, column indices UNORDERED (unsorted or repeated) within
    a row (``canonical`` only). Array code only: this one body checks NumPy and CuPy
    arrays, and numba compiles it for the JAX bridge's native handler, so every face takes
    and refuses the same structures."""
    rows = indptr.shape[0] - 1
    if rows > 0 and not (indptr[1:] >= indptr[:-1]).all():
        return DECREASING
    nnz = indices.shape[0]
    if nnz == 0:
        return OK
    if indices.min() < 0 or indices.max() >= columns:
        return OUT_OF_RANGE
    if canonical and nnz > 1:
        increasing = indices[1:] > indices[:-1]
        starts = indptr[1:-1]
        starts = starts[(starts > 0) & (starts < nnz)]
        increasing[starts - 1] = True  # a row boundary may step down
        if not increasing.all():
            return UNORDERED
    return OK


def _csr_violation_detail(code: int, indices: Any, indptr: Any, cols: int) -> str:
    """The message naming where ``csr_violation``'s ``code`` is broken."""
    if code == DECREASING:
        r = _first_false(indptr[1:] >= indptr[:-1])
        return (f"csr indptr must be non-decreasing: indptr[{r}] = {int(indptr[r])} > "
                f"indptr[{r + 1}] = {int(indptr[r + 1])}")
    if code == OUT_OF_RANGE:
        bad = int(((indices < 0) | (indices >= cols)).argmax())
        return f"csr column index {int(indices[bad])} at position {bad} is out of range [0, {cols})"
    p = _csr_order_violation(indices, indptr)
    row = int((indptr <= p).sum()) - 1
    prev, cur = int(indices[p - 1]), int(indices[p])
    what = "duplicate" if prev == cur else "unsorted"
    return (f"csr column indices must be sorted and unique within each row: {what} "
            f"index {cur} after {prev} in row {row}")


def _csr_order_violation(indices: Any, indptr: Any) -> int | None:
    """Position of the first stored index not above its predecessor in the same row, or None
    (where ``csr_violation`` finds UNORDERED)."""
    nnz = indices.shape[0]
    if nnz < 2:
        return None
    increasing = indices[1:] > indices[:-1]
    starts = indptr[1:-1]
    starts = starts[(starts > 0) & (starts < nnz)]
    increasing[starts - 1] = True  # a row boundary may step down
    if bool(increasing.all()):
        return None
    return _first_false(increasing) + 1


def csr_is_canonical(indices: Any, indptr: Any) -> bool:
    """Whether column indices are sorted and unique within each row (structure already valid)."""
    return _csr_order_violation(indices, indptr) is None


def _refuse_shared_values(data: Any, *index_arrays: tuple[Any, str]) -> None:
    """Refuse values sharing memory with an index array: values are writable and index
    arrays are not, so a write of the values would change indices already checked (a kernel
    then reads out of bounds)."""
    if isinstance(data, np.ndarray):
        may_share = np.may_share_memory
    else:  # CuPy's arrays: CuPy's test (the module is loaded: the arrays came from it)
        may_share = getattr(sys.modules.get(type(data).__module__.split(".")[0]), "may_share_memory", None)
        if may_share is None:
            return
    for a, name in index_arrays:
        if may_share(data, a):
            raise SparseFormatError(f"the values share memory with the {name}: values are writable and {name} "
                                    "are not, so writing the values would change checked indices; pass a copy "
                                    "of one of them")


def check_row_sparse(data: Any, indices: Any, shape: Sequence[int], full: bool = True) -> None:
    """Raise SparseFormatError unless (data, indices) is a canonical row_sparse array of ``shape``."""
    if len(shape) < 1:
        raise SparseFormatError("row_sparse arrays have at least one dimension")
    _require_index_array(indices, "row_sparse indices")
    expected = (indices.shape[0], *shape[1:])
    if tuple(data.shape) != expected:
        raise SparseFormatError(
            f"row_sparse data must have shape (len(indices), *shape[1:]) = {expected}, "
            f"got {tuple(data.shape)}"
        )
    if not full:
        return
    _refuse_shared_values(data, (indices, "indices"))
    rows = shape[0]
    code = _violation_check("row_sparse", row_sparse_violation, indices)(indices, rows)
    if code == OUT_OF_RANGE:
        bad = int(((indices < 0) | (indices >= rows)).argmax())
        raise SparseFormatError(
            f"row_sparse row index {int(indices[bad])} at position {bad} is out of range [0, {rows})"
        )
    if code == UNORDERED:
        p = _first_false(indices[1:] > indices[:-1]) + 1
        prev, cur = int(indices[p - 1]), int(indices[p])
        what = "duplicate" if prev == cur else "unsorted"
        raise SparseFormatError(
            f"row_sparse indices must be sorted and unique: {what} index {cur} after {prev} "
            f"at position {p}"
        )


def row_sparse_violation(indices: Any, rows: int) -> int:
    """``OK``, or the first broken O(n) invariant of row_sparse row indices: a row index
    OUT_OF_RANGE ``[0, rows)``, indices UNORDERED (unsorted or repeated). Array code, for
    NumPy and CuPy (and compiled: ``HOST_CHECKS``)."""
    if indices.shape[0] == 0:
        return OK
    if indices.min() < 0 or indices.max() >= rows:
        return OUT_OF_RANGE
    if indices.shape[0] > 1 and not (indices[1:] > indices[:-1]).all():
        return UNORDERED
    return OK
