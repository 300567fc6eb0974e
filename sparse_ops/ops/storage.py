"""Operators on storage types: ``cast_storage``, ``zeros_like``, ``ones_like`` and ``retain``
(MXNet names and semantics).

``cast_storage`` gives the requested storage type, ``zeros_like`` keeps the input's, and
``retain`` (a row_sparse array's rows whose index is in a list) gives ``row_sparse``.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..ndarray import STYPES
from ..registry import Op, Param, kernel, register
from ..sdk import capacity as cap
from ..storage import cast_storage as _cast_storage
from ..storage import densify_into
from ._util import T, index_dtype_for, int_ids

_BOTH = ("cpu", "gpu")


# ---- storage casts and *_like ------------------------------------------------------------------------
@register("cast_storage")
class CastStorage(Op):
    """The values of ``data`` in storage type ``stype`` (a copy when it already has it)."""

    trusted = True  # built-in kernels, tested against NumPy/SciPy references

    stype = Param(str, choices=STYPES, doc="the output storage type")
    backward_needs_inputs = ()
    partition = "rows"
    # data's non-zeros in the output's unit (a dense data: its size; row_sparse to csr: rows x row size)
    capacity = cap.same_as("data")

    def infer_shape(self, data):
        if self.stype == "csr" and len(data) != 2:
            raise ValueError(f"csr arrays are 2-d; cannot cast an array of shape {data}")
        if self.stype == "row_sparse" and len(data) < 1:
            raise ValueError("row_sparse arrays have at least one dimension; got a 0-d array")
        return [data]

    def infer_storage_type(self, data):
        return [self.stype]

    @kernel(device=_BOTH, stypes=("*",))
    def any_stype(self, ctx, data, out):
        if out.stype == "default":
            if data.stype == "default":
                out.data[...] = data.data
            else:
                densify_into(data, out.data)
            return
        ctx.adopt(out, _cast_storage(data, self.stype))

    def gradient(self, out_grads, inputs, outputs):
        return [T.cast_storage(out_grads[0], stype=inputs[0].stype)]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: every storage type cast to every storage type."""
        from . import _samples

        return [([x], {"stype": st}) for x in _samples.each_stype((3, 4)) for st in STYPES]

    def reference(self, data: np.ndarray) -> np.ndarray:
        """NumPy reference for ``opcheck``: casting keeps the values."""
        return data


@register("zeros_like")
class ZerosLike(Op):
    """Zeros of the shape, dtype and storage type of ``data`` (an empty sparse array for
    sparse input, keeping its index dtype)."""

    trusted = True  # built-in kernels, tested against NumPy/SciPy references

    differentiable = False
    partition = "rows"
    capacity = cap.NONE_STORED

    def infer_storage_type(self, data):
        return [data]

    @kernel(device=_BOTH)
    def dense(self, ctx, data, out):
        out[...] = 0

    @kernel(device=_BOTH, stypes=[("row_sparse",), ("csr",)])
    def sparse(self, ctx, data, out):
        xp = ctx.xp
        idt = data.indices.dtype
        values = xp.empty((0, *out.shape[1:]) if out.stype == "row_sparse" else 0, dtype=out.dtype)
        if out.stype == "csr":
            ctx.set_csr(out, values, xp.empty(0, idt), xp.zeros(out.shape[0] + 1, idt))
        else:
            ctx.set_row_sparse(out, values, xp.empty(0, idt))

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: a (3, 4) array of each storage type."""
        from . import _samples

        return [[x] for x in _samples.each_stype((3, 4))]


@register("ones_like")
class OnesLike(Op):
    """Ones of the shape and dtype of ``data``; always dense."""

    trusted = True  # built-in kernels, tested against NumPy/SciPy references

    differentiable = False
    partition = "rows"

    @kernel(device=_BOTH)
    def dense(self, ctx, data, out):
        out[...] = 1

    @kernel(device=_BOTH, stypes=[("row_sparse",), ("csr",)])
    def sparse(self, ctx, data, out):
        out.data[...] = 1

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: a (3, 4) array of each storage type."""
        from . import _samples

        return [[x] for x in _samples.each_stype((3, 4))]


# ---- retain ---------------------------------------------------------------------------------------------
@register("retain")
class Retain(Op):
    """MXNet's ``sparse.retain``: the rows of row_sparse ``data`` listed in ``indices``
    (others dropped), as row_sparse. Dense ``data`` is accepted too (its listed rows become
    the stored rows); ``indices`` outside ``[0, rows)`` are ignored."""

    trusted = True  # built-in kernels, tested against NumPy/SciPy references

    arguments = ("data", "indices")
    backward_needs_inputs = ("indices",)
    # the rows of data that indices name: at most data's stored rows and one per index
    capacity = cap.computed(lambda op, out, data, indices: min(data.bound_in("row_sparse"), indices.size),
                            "min(nnz(data), size(indices))")

    def infer_shape(self, data, indices):
        if len(data) < 1:
            raise ValueError("retain needs data of at least one dimension")
        return [data]

    def infer_type(self, data, indices):
        if indices.kind not in "iuf":
            raise TypeError(f"retain needs integer (or floating point) indices, got {indices}")
        return [data]

    def infer_storage_type(self, data, indices):
        if indices != "default":
            raise ValueError(f"retain needs dense indices, got {indices}")
        if data == "csr":
            raise ValueError("retain needs row_sparse (or dense) data, got csr; "
                             "convert it with tostype('row_sparse')")
        return ["row_sparse"]

    @kernel(device=_BOTH, stypes=("row_sparse", "default"))
    def rsp(self, ctx, data, indices, out):
        keep = ctx.xp.isin(data.indices, int_ids(ctx.xp, indices.data, "retain", "indices").ravel())
        ctx.set_row_sparse(out, data.data[keep], data.indices[keep])

    @kernel(device=_BOTH, stypes=("default", "default"))
    def dense(self, ctx, data, indices, out):
        xp = ctx.xp
        ids = int_ids(xp, indices.data, "retain", "indices").ravel()
        rows = xp.unique(ids[(ids >= 0) & (ids < data.shape[0])])
        rows = rows.astype(index_dtype_for(indices.data, shape=data.shape), copy=False)
        ctx.set_row_sparse(out, data.data[rows], rows)

    def gradient(self, out_grads, inputs, outputs):
        return [T.retain(out_grads[0], inputs[1]), None]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: row_sparse and dense data, ids stored, missing and out of range."""
        from . import _samples

        ids = _samples.ints([3, 1, 7, 1])
        return [[_samples.array((5, 3), "row_sparse", seed=1), ids], [_samples.array((5, 3), seed=2), ids],
                [_samples.array((5, 3), "row_sparse", seed=3), _samples.ints([])]]

    def reference(self, data: np.ndarray, indices: np.ndarray) -> np.ndarray:
        """NumPy reference for ``opcheck``: the listed rows kept, the others zero."""
        ids = indices.astype(np.int64).ravel()
        keep = np.zeros(data.shape[0], dtype=bool)
        keep[ids[(ids >= 0) & (ids < data.shape[0])]] = True
        return np.where(keep.reshape((-1,) + (1,) * (data.ndim - 1)), data, 0)
