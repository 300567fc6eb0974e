"""Where memory from outside becomes containers: what is checked, and which dtypes are held.

numba and C kernels read index arrays without bounds checks, so a malformed sparse array
must never reach one. Every face hands the memory it did not make to this module; the
table is the whole policy.

=========================================  ======================  ================================
memory from                                entered through         checked
=========================================  ======================  ================================
component arrays, SciPy matrices, files,   the constructors        everything, at construction
DLPack (``creation``, ``io``)                                      (``check=False``: at first use)
torch tensors converted (``from_torch``)   ``admit(DEFERRED)``     O(1) now, the rest at first use
torch tensors entering a bridged op; JAX   ``admit(FULL)``         everything, before the kernel
sparse buffers (Python handler)
JAX dense buffers (Python handler)         ``jax.handlers``        dtype, rank and shape against the
                                                                   call's layout (all a dense array has)
our own outputs back through a framework  ``admit(OURS)``         nothing (a bridge's saved outputs)
JAX buffers (native handler)               ``validation``          the same check, compiled
COO indices a library sorts or sums        ``coo_rows``            their range, before it reads them
(torch's ``coalesce``)
kernels' outputs: ours                     ``dispatch``            O(1) structure
kernels' outputs: plugins, C libraries,    ``output_problem``      array module, dtype, shape,
MXNet-form ops                                                     then everything
=========================================  ======================  ================================

"Everything" is every invariant of ``validation.py`` (O(nnz)); "O(1)" its lengths, dtypes
and ``indptr``'s ends. Values are float16/32/64 or int32/64, indices int32 or int64
(``dtypes``); any other dtype is refused, on every face, with ``dtypes.not_held``'s
wording, which the face prefixes with the op and the argument.
"""
from __future__ import annotations

from typing import Any, Sequence

from .device import Device
from .dtypes import INDEX_DTYPES, held_dtype
from .errors import SparseFormatError
from .ndarray import CSRNDArray, NDArray, RowSparseNDArray
from .validation import normalize_shape

FULL, DEFERRED, OURS = "full", "deferred", "ours"


def admit(stype: str, parts: Sequence[Any], shape: Sequence[int], device: Device, check: str = FULL) -> NDArray:
    """Our container over component arrays from outside (NumPy or CuPy, shared, not
    copied): ``(values,)``, csr ``(values, indices, indptr)`` or row_sparse ``(values,
    indices)``. ``check``: ``FULL`` validates every invariant now, ``DEFERRED`` the O(1) ones
    now and the rest on the container's first use, ``OURS`` nothing (components our own
    kernels made, come back through a framework: a bridge's saved outputs). Raises
    TypeError for a dtype we do not hold, SparseFormatError for a malformed structure."""
    values = parts[0]
    if stype == "default":
        if check != OURS:
            held_dtype(values.dtype)
        return NDArray(values, device)
    if check == OURS:
        if stype == "csr":
            return CSRNDArray._trusted(values, parts[1], parts[2], tuple(shape), device)
        return RowSparseNDArray._trusted(values, parts[1], tuple(shape), device)
    held_dtype(values.dtype)
    for p in parts[1:]:
        held_dtype(p.dtype, "index")
    shape = normalize_shape(shape, ndim=2 if stype == "csr" else None)
    if stype == "csr":
        x = CSRNDArray(values, parts[1], parts[2], shape, device, check=False)
    else:
        x = RowSparseNDArray(values, parts[1], shape, device, check=False)
    x.check_format(full_check=check == FULL)
    return x


def coo_rows(rows: Any, bound: int) -> None:
    """Refuse COO row indices outside ``[0, bound)`` before a library that trusts them
    (torch's ``coalesce`` corrupts its heap on a negative one) sorts or sums them."""
    if rows.dtype.kind not in "iu":
        raise SparseFormatError(f"COO indices must have an integer dtype, got {rows.dtype}")
    if rows.shape[0] and (int(rows.min()) < 0 or int(rows.max()) >= bound):
        bad = int(((rows < 0) | (rows >= bound)).argmax())
        raise SparseFormatError(f"COO row index {int(rows[bad])} at position {bad} is out of range [0, {bound})")


def output_problem(r: NDArray, stype: str, shape: tuple, dtype: Any, xp: Any) -> tuple[str, str] | None:
    """(what, detail) of the first thing wrong with a kernel's output ``r`` planned as
    (``stype``, ``shape``, ``dtype``) on array module ``xp``, for kernels we do not trust:
    arrays of ``xp``, integer indices, the inferred dtype and shape, then every structure
    invariant (O(nnz)), before anything reads it. None when it is sound."""
    data = r._data
    if stype == "default":
        aux = ()
    else:
        aux = (("indices", r._indices), ("indptr", r._indptr)) if stype == "csr" else (("indices", r._indices),)
    for part, a in (("values", data), *aux):
        if not isinstance(a, xp.ndarray):
            return "a bad output", f"its {part} is a {type(a).__name__}, not a {xp.__name__} array"
    for part, a in aux:
        if a.dtype not in INDEX_DTYPES:
            return f"a {stype} output with a bad index array", f"{part} of dtype {a.dtype} (int32 or int64)"
    if data.dtype != dtype:
        return "an output of the wrong dtype", f"{data.dtype}, but the op's type inference says {dtype}"
    got = r._shape if aux else data.shape
    if got != shape:
        return "an output of the wrong shape", f"{got}, but the op's shape inference says {shape}"
    if aux:
        try:
            r.check_format(full_check=True)
        except SparseFormatError as exc:
            return f"a malformed {stype} output", str(exc)
    return None
