"""Small sample inputs for ``opcheck``: what each op's ``samples()`` classmethod builds.

Values are drawn away from zero (magnitudes in [0.5, 1.5], random signs unless
``positive``) and are distinct, so finite differences stay off kinks (abs, relu, max) and
ties. Sparse arrays keep about half the entries, always with an empty row when there is
more than one row, so every kernel meets stored values, missing values and empty rows.
``sparse_ops.sdk.testing.sample_array`` is this module's ``array`` for plugin authors.
"""
from __future__ import annotations

from typing import Any

import numpy as np

STYPES = ("default", "csr", "row_sparse")


def values(shape: tuple[int, ...], seed: int = 0, positive: bool = False, density: float = 1.0) -> np.ndarray:
    """A float64 NumPy array of ``shape``: magnitudes in [0.5, 1.5], a fraction ``density``
    of the entries nonzero (the first row of a 2-d array with more than one row is all zero)."""
    rng = np.random.default_rng(seed)
    out = rng.uniform(0.5, 1.5, size=shape)
    if not positive:
        out *= rng.choice([-1.0, 1.0], size=shape)
    if density < 1.0:
        out[rng.random(shape) >= density] = 0.0
        if len(shape) >= 2 and shape[0] > 1:
            out[0] = 0.0  # an empty row
    return out


def array(shape: tuple[int, ...], stype: str = "default", seed: int = 0, positive: bool = False,
          dtype: Any = "float64", density: float | None = None, index_dtype: Any = None) -> Any:
    """A sample container of ``shape`` and storage type ``stype``. Sparse ones keep about
    half the entries (``density``, default 0.5; dense ones every entry unless given; a
    row_sparse array stores whole rows, none of their values zero);
    ``index_dtype`` picks int32 or int64 indices (default: the container's choice)."""
    from ..creation import array as make_array

    density = (1.0 if stype == "default" else 0.5) if density is None else density
    if stype == "row_sparse":  # whole rows stored or missing: stored rows hold no zeros
        v = values(shape, seed, positive)
        missing = np.random.default_rng(seed + 7).random(shape[0]) >= density
        missing[0] = shape[0] > 1  # an empty row
        missing[-1] = False  # a stored row
        v[missing] = 0.0
    else:
        v = values(shape, seed, positive, density)
    x = make_array(v.astype(dtype))
    if stype == "default":
        return x
    x = x.tostype(stype)
    if index_dtype is not None:
        from ..creation import csr_matrix, row_sparse_array

        idt = np.dtype(index_dtype)
        if stype == "csr":
            x = csr_matrix((x.data.asnumpy(), x.indices.asnumpy().astype(idt), x.indptr.asnumpy().astype(idt)),
                           shape=x.shape)
        else:
            x = row_sparse_array((x.data.asnumpy(), x.indices.asnumpy().astype(idt)), shape=x.shape)
    return x


def each_stype(shape: tuple[int, ...], stypes: tuple[str, ...] = STYPES, **kw: Any) -> list:
    """One array of ``shape`` per storage type of ``stypes``: the sparse ones hold the same
    values (half of them zero, an empty row), the dense one every value nonzero (so
    gradients are checked away from the kinks that zeros are for abs, sign, sqrt, ...)."""
    return [array(shape, st, **kw) for st in stypes]


def ints(values_: Any) -> Any:
    """An int64 container (indices for take, retain, Embedding)."""
    from ..creation import array as make_array

    return make_array(np.asarray(values_, dtype=np.int64))


def kernel_stypes(cls: type, dense: bool = True) -> list[tuple[str, ...]]:
    """The input storage types of each cpu storage-aware kernel of registered op class
    ``cls`` (concrete ones; wildcards are left to the op), plus all-dense when ``dense``."""
    opdef = cls._opdef
    nargs = len(opdef.arguments)
    found = sorted({st for (dev, st) in opdef.fcompute_ex
                    if dev == "cpu" and len(st) == nargs and all(s in STYPES for s in st)})
    if dense and ("default",) * nargs not in found:
        found.insert(0, ("default",) * nargs)
    return found


def by_stypes(signatures: list[tuple[str, ...]], shapes: list[tuple[int, ...]], params: dict | None = None,
              positive: bool | tuple[bool, ...] = False, dtype: Any = "float64") -> list:
    """One ``(inputs, params)`` sample per storage signature: input k has ``shapes[k]``, a
    seed of its own, and is positive where ``positive`` (one flag, or one per input) says."""
    flags = positive if isinstance(positive, tuple) else (positive,) * len(shapes)
    out = []
    for sig in signatures:
        inputs = [array(shape, st, seed=k + 1, positive=flag, dtype=dtype, density=None if st != "default" else 1.0)
                  for k, (st, shape, flag) in enumerate(zip(sig, shapes, flags))]
        out.append((inputs, dict(params or {})))
    return out
