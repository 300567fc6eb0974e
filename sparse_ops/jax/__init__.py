"""The JAX bridge: every registered op as a JAX function, run by XLA through its FFI.

- ``ops.<name>`` / ``op(name)``: the op on ``jax.Array``s, ``BCSR`` (csr) and ``RowSparse``
  (row_sparse), usable inside ``jax.jit``: dense built-ins lowered to ``jnp`` (``lowering``),
  the rest as FFI calls differentiable with ``jax.grad``, ``jax.jvp`` and ``jax.hessian``
  (the op's own gradient rule, ``derivatives``) and batched by ``jax.vmap``;
- ``explain(name, *args, **params)``: whether a call is lowered, or which FFI target and
  handler it takes;
- ``nnz(x)``: the true stored count of a sparse result (results have a static capacity);
- ``jax.export`` with symbolic sizes (``symbolic_shape("b, 8")``): one program for every
  size, lowered and FFI calls alike; what cannot be symbolic is a ``SymbolicShapeError``
  naming the op (``spec``).

This package sits on top (layer 6 of ARCHITECTURE.md): ``import sparse_ops`` never imports
it, nor jax. Needs ``pip install "sparse-ops[jax]"``.
"""
from __future__ import annotations

from . import ops
from .bridge import BridgedOp, RowSparse, explain, nnz, op
from . import lowering, native
from .spec import JaxBridgeError, SymbolicShapeError

__all__ = ["ops", "op", "explain", "nnz", "BridgedOp", "RowSparse", "JaxBridgeError", "SymbolicShapeError"]
