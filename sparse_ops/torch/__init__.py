"""The PyTorch bridge: sparse-ops containers and operators in PyTorch.

- ``to_torch(x)`` / ``from_torch(t)``: containers and tensors, sharing memory (dense ↔
  strided, csr ↔ ``sparse_csr``, row_sparse ↔ coalesced COO with ``sparse_dim=1``);
- ``ops.<name>`` / ``op(name)``: every registered op on torch tensors, recorded by torch's
  autograd with the op's own gradient rule (a dense input's gradient is dense, as torch's
  own ops give it, unless ``sparse_grad(t)`` marks the tensor or the op's ``sparse_grad=True``
  asks: then sparse COO; a sparse input's gradient keeps its structure), under
  ``torch.func`` transforms too (grad, vjp, jacrev, vmap);
- ``torch.ops.sparse_ops.<name>``: the same ops as ``torch.library`` operators on
  component tensors, with fake implementations, for ``torch.compile(fullgraph=True)``;
  ``opcheck(name, *args, **params)`` runs ``torch.library.opcheck`` on the overload a call
  uses, and ``explain(name, *args, **params)`` says how a call runs (overload, gradients,
  vmap, compile).

This package sits on top (layer 6 of ARCHITECTURE.md): ``import sparse_ops`` never imports
it, nor torch. Needs ``pip install "sparse-ops[torch]"`` (torch >= 2.4).
"""
from __future__ import annotations

from . import ops
from .bridge import BridgedOp, explain, op, opcheck
from .convert import TorchBridgeError, from_torch, to_torch
from .library import BridgeError, is_sparse_grad, sparse_grad
from .structure import CSRParts, RowSparseParts

__all__ = ["to_torch", "from_torch", "ops", "op", "BridgedOp", "BridgeError", "TorchBridgeError",
           "CSRParts", "RowSparseParts", "sparse_grad", "is_sparse_grad", "explain", "opcheck"]
