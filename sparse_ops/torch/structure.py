"""Sparse tensors taken apart into component tensors and put back together, differentiably.

The torch operators take components (``library.py``); ``sparse_ops.torch.ops`` splits
sparse tensors into them and assembles sparse outputs from them. Torch's own constructors
do not carry gradients here (a ``sparse_csr_tensor`` built from values that require grad
stops the gradient, pytorch/pytorch#98929; a COO gradient from ``values()`` is not marked
coalesced), so both directions are autograd functions of ours:

- ``rows_values(t)``: the values of a row_sparse (COO, ``sparse_dim=1``) tensor; their
  gradient returns to ``t`` as a coalesced COO tensor of ``t``'s structure;
- ``assemble_csr`` / ``assemble_rows``: a sparse tensor over component tensors whose
  gradient (sparse of the same structure, another structure, or dense) returns to the
  values as the gradient of each stored value.

``CSRParts`` and ``RowSparseParts`` hold components as plain tensors: inside
``torch.compile`` (which has no sparse tensors) a csr or row_sparse argument is passed
this way, and sparse results come back this way.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import torch

from .convert import sparse_csr, sparse_rows


class CSRParts(NamedTuple):
    """A csr matrix as component tensors: stored ``values``, column ``indices``, row
    pointers ``indptr`` and the ``shape``; what code compiled by ``torch.compile`` passes and gets."""

    values: torch.Tensor
    indices: torch.Tensor
    indptr: torch.Tensor
    shape: tuple[int, int]

    stype = "csr"

    def to_torch(self) -> torch.Tensor:
        """The ``torch.sparse_csr`` tensor (eager code only: Dynamo has no sparse tensors)."""
        return assemble_csr(self.values, self.indices, self.indptr, tuple(self.shape))


class RowSparseParts(NamedTuple):
    """A row_sparse array as component tensors: the stored rows' ``values``, their sorted
    unique row ``indices`` and the ``shape``."""

    values: torch.Tensor
    indices: torch.Tensor
    shape: tuple[int, ...]

    stype = "row_sparse"

    def to_torch(self) -> torch.Tensor:
        """The coalesced COO tensor with ``sparse_dim=1`` (eager code only)."""
        return assemble_rows(self.values, self.indices, tuple(self.shape))


def _values_at(g: torch.Tensor, rows: torch.Tensor | None, cols: torch.Tensor | None,
               row_idx: torch.Tensor | None) -> torch.Tensor:
    """The entries of ``g`` (dense or sparse) at a structure: csr (``rows``, ``cols`` per
    stored value) or row_sparse (``row_idx``)."""
    if g.layout != torch.strided:
        g = g.to_dense()
    if row_idx is not None:
        return g.index_select(0, row_idx)
    return g[rows, cols]


class _RowsValues(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, t: torch.Tensor) -> torch.Tensor:
        ctx.indices, ctx.shape = t._indices()[0], tuple(t.shape)
        return t._values().view_as(t._values())

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return sparse_rows(g.contiguous(), ctx.indices, ctx.shape)


def rows_values(t: torch.Tensor) -> torch.Tensor:
    """The values of a coalesced COO tensor with ``sparse_dim=1``, differentiable into ``t``."""
    return _RowsValues.apply(t) if t.requires_grad else t._values()


class _AssembleCSR(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, values: torch.Tensor, indices: torch.Tensor, indptr: torch.Tensor,
                shape: tuple[int, int]) -> torch.Tensor:
        ctx.save_for_backward(indices, indptr)
        ctx.shape = shape
        return sparse_csr(values, indices, indptr, shape)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> Any:
        indices, indptr = ctx.saved_tensors
        if g.layout == torch.sparse_csr and torch.equal(g.crow_indices(), indptr) \
                and torch.equal(g.col_indices(), indices):
            return g.values(), None, None, None
        counts = indptr[1:] - indptr[:-1]
        rows = torch.repeat_interleave(torch.arange(ctx.shape[0], device=indptr.device), counts)
        return _values_at(g, rows, indices, None), None, None, None


def assemble_csr(values: torch.Tensor, indices: torch.Tensor, indptr: torch.Tensor,
                 shape: tuple[int, int]) -> torch.Tensor:
    """A ``sparse_csr`` tensor over these components; gradients reach ``values``."""
    if values.requires_grad and torch.is_grad_enabled():
        return _AssembleCSR.apply(values, indices, indptr, shape)
    return sparse_csr(values, indices, indptr, shape)


class _AssembleRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, values: torch.Tensor, indices: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
        ctx.save_for_backward(indices)
        return sparse_rows(values, indices, shape)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> Any:
        (indices,) = ctx.saved_tensors
        if g.layout == torch.sparse_coo and g.sparse_dim() == 1:
            g = g.coalesce()
            if torch.equal(g._indices()[0], indices.to(torch.int64)):
                return g._values(), None, None
        return _values_at(g, None, None, indices.to(torch.int64)), None, None


def assemble_rows(values: torch.Tensor, indices: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """A coalesced COO tensor (``sparse_dim=1``) over these components; gradients reach ``values``."""
    if values.requires_grad and torch.is_grad_enabled():
        return _AssembleRows.apply(values, indices, shape)
    return sparse_rows(values, indices, shape)
