"""The cookbook's two demo models as ``torch.nn.Module``s, built on the PyTorch bridge
(``sparse_ops.torch``): the cookbook operators called on torch tensors, recorded by torch's
autograd, their sparse gradients handed to ``torch.optim``.

- ``GCN``: a 2-layer graph convolutional network, each layer ``csr_spmm(A_hat, H W)`` on
  the normalised adjacency as a ``torch.sparse_csr`` tensor; with ``attention=True`` each
  layer aggregates with learnt weights instead, ``csr_row_softmax`` over the adjacency's
  stored positions of the scores ``csr_sddmm(A_hat, q, k)`` (a csr whose stored
  values get gradients through both ops and ``csr_spmm``).
- ``FactorizationMachine``: the click-log model, ``embedding_bag(x, w) + fm_interaction(x,
  V) + b`` on a csr batch; ``w`` and ``V`` are marked by ``sparse_ops.torch.sparse_grad``, so
  their gradients arrive as sparse COO tensors with one row per feature in the batch (eagerly
  and compiled) and ``torch.optim.Adagrad`` (``adagrad``) or ``SparseAdam`` update only
  those rows.

Each model also takes its csr operand as the bridge's ``CSRParts`` (``csr_parts``), the
form ``torch.compile(fullgraph=True)`` traces: Dynamo has no sparse tensors, so the csr
operand travels as component tensors and every cookbook op becomes its
``torch.ops.sparse_ops.<name>`` overload in the graph (``compile_models`` checks it).

This module imports torch; ``import sparse_ops_cookbook`` does not import it. The native
twins the demo compares against are in ``demo/twins.py`` and ``demo/ctr.py``.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import sparse_ops as so
import sparse_ops.torch as sot

from . import attention as _attention, embedding_bag as _embedding_bag, fm as _fm, spmm as _spmm  # noqa: F401
from .demo.twins import attention_scale, gcn_weights


def _op(name: str, *args: Any) -> Any:
    """Cookbook op ``name`` with its default parameters through the bridged function
    ``sparse_ops.torch.ops.<name>``: torch sparse tensors or ``CSRParts`` in; eagerly a
    csr result is a ``torch.sparse_csr`` tensor, inside ``torch.compile`` it is
    ``CSRParts``, and the call traces as the op's ``torch.ops.sparse_ops`` overload on
    component tensors."""
    return getattr(sot.ops, name)(*args)


def to_torch_csr(x: Any) -> torch.Tensor:
    """A sparse_ops csr array, or a SciPy csr matrix, as a ``torch.sparse_csr`` tensor
    without copying (``sparse_ops.torch.to_torch``)."""
    if not isinstance(x, so.CSRNDArray):
        x = so.csr_matrix(x)
    return sot.to_torch(x)


class GCN(nn.Module):
    """logits = L2(relu(L1(X))), layer l mapping H to A_l @ (H W_l), where A_l is the
    normalised adjacency ``a_hat`` or, with ``attention``, the row softmax over a_hat's
    stored positions of <q_i, k_j> / sqrt(d_att), q = Z Q_l, k = Z K_l, Z = H W_l.

    The weights start as ``demo.twins.gcn_weights(..., seed)`` (or ``weights``), the same
    arrays the native twin ``NativeGCN`` starts from.
    """

    def __init__(self, n_in: int, n_hidden: int, n_out: int, attention: bool = False, d_att: int = 8,
                 seed: int = 0, weights: dict[str, np.ndarray] | None = None) -> None:
        super().__init__()
        weights = weights if weights is not None else gcn_weights(n_in, n_hidden, n_out, attention, d_att, seed)
        self.attention = "q1" in weights
        self.scale = attention_scale(weights["q1"].shape[1]) if self.attention else 1.0
        for name, value in weights.items():
            setattr(self, name, nn.Parameter(torch.from_numpy(np.array(value, copy=True))))

    def _layer(self, a_hat: Any, h: torch.Tensor, layer: int) -> torch.Tensor:
        z = h @ getattr(self, f"w{layer}")
        if not self.attention:
            return _op("csr_spmm", a_hat, z)
        q = (z @ getattr(self, f"q{layer}")) * self.scale
        k = z @ getattr(self, f"k{layer}")
        return _op("csr_spmm", _op("csr_row_softmax", _op("csr_sddmm", a_hat, q, k)), z)

    def forward(self, a_hat: Any, x: torch.Tensor) -> torch.Tensor:
        """Logits (n, n_out) of every node; ``a_hat`` (n, n) a ``torch.sparse_csr`` tensor,
        or its ``CSRParts`` (``csr_parts``; the form ``torch.compile`` takes)."""
        return self._layer(a_hat, torch.relu(self._layer(a_hat, x, 1)), 2)

    def loss(self, a_hat: torch.Tensor, x: torch.Tensor, rows: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of the labelled nodes ``rows``."""
        return F.cross_entropy(self(a_hat, x)[rows], labels)

    def optimizer(self, lr: float = 0.01, weight_decay: float = 5e-4) -> torch.optim.Optimizer:
        """Adam with L2 weight decay: the demo's optimizer (``NativeGCN.adam`` is its twin)."""
        return torch.optim.Adam(self.parameters(), lr=lr, weight_decay=weight_decay)

    def arrays(self) -> dict[str, np.ndarray]:
        """The current parameters as NumPy arrays (copies)."""
        return {name: p.detach().numpy().copy() for name, p in self.named_parameters()}


class FactorizationMachine(nn.Module):
    """logit(x) = b + x w + sum_{j<l} <v_j, v_l> x_j x_l for a csr batch x (n, n_features):
    ``embedding_bag(x, w)`` (w: n_features x 1) + ``fm_interaction(x, V)`` (V: n_features x
    k) + b. Starts as ``demo.ctr.FactorizationMachine(n_features, k, seed=seed,
    init_scale=init_scale)`` does: w and b zeros, V = init_scale * N(0, 1) from
    ``np.random.default_rng(seed)``."""

    def __init__(self, n_features: int, k: int = 8, seed: int = 0, init_scale: float = 0.01) -> None:
        super().__init__()
        rng = np.random.default_rng(seed)
        # sparse gradients, as nn.Embedding(sparse=True) asks for them: only the batch's rows
        self.w = sot.sparse_grad(nn.Parameter(torch.zeros(n_features, 1)))
        self.v = sot.sparse_grad(nn.Parameter(
            torch.from_numpy((init_scale * rng.standard_normal((n_features, k))).astype(np.float32))))
        self.b = nn.Parameter(torch.zeros(1))

    @classmethod
    def from_native(cls, native: Any) -> "FactorizationMachine":
        """A copy of a ``demo.ctr.FactorizationMachine``'s current parameters."""
        model = cls(native.w.shape[0], native.v.shape[1])
        with torch.no_grad():
            for name in ("w", "v", "b"):
                getattr(model, name).copy_(torch.from_numpy(getattr(native, name).asnumpy()))
        return model

    def forward(self, x: Any) -> torch.Tensor:
        """Logits (n,) of a csr batch x: a ``torch.sparse_csr`` tensor or its ``CSRParts``."""
        return _op("embedding_bag", x, self.w).reshape(-1) + _op("fm_interaction", x, self.v) + self.b

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Mean logistic loss against labels y (0 or 1)."""
        return F.binary_cross_entropy_with_logits(self(x), y)

    def adagrad(self, lr: float = 0.05, init_history: float = 1e-5) -> torch.optim.Adagrad:
        """``torch.optim.Adagrad`` as the native demo trains: the sums of squares start at
        ``init_history``; w and V (sparse gradients: only the batch's rows move) with
        eps 1e-10, the bias with a negligible one (the native update puts it under the
        square root)."""
        return torch.optim.Adagrad([{"params": [self.w, self.v], "eps": 1e-10}, {"params": [self.b], "eps": 1e-20}],
                                   lr=lr, initial_accumulator_value=init_history)

    def arrays(self) -> dict[str, np.ndarray]:
        return {name: p.detach().numpy().copy() for name, p in self.named_parameters()}


def csr_parts(a: torch.Tensor) -> "sot.CSRParts":
    """A ``torch.sparse_csr`` tensor as the bridge's ``CSRParts``: how a csr operand enters
    ``torch.compile``d code, which has no sparse tensors. The components share ``a``'s
    memory but are detached from it: Dynamo fails (an IndexError in torch 2.13) on a tensor
    whose ``_base`` is sparse, which ``a.values()`` and the index views are; so the values
    carry no gradient back to ``a`` (the models' csr operands are data)."""
    return sot.CSRParts(a.values().detach(), a.col_indices().detach(), a.crow_indices().detach(), tuple(a.shape))


def compile_models(graph: Any, data: Any, seed: int = 0, backend: str = "aot_eager",
                   batch_size: int = 256) -> dict[str, tuple[bool, str]]:
    """Whether ``torch.compile(fullgraph=True, backend=backend)`` compiles each model's
    training loss (forward, and backward through AOTAutograd) with its csr operand given as
    ``CSRParts``, so that every cookbook op is a ``torch.ops.sparse_ops`` call on component
    tensors; and whether the compiled loss and gradients equal the eager ones.

    ``aot_eager`` (the default) checks what matters for the bridge (Dynamo traces the
    model with no graph break, the fake implementations give the shapes, the backward
    formulas trace) without C++ code generation; ``backend="inductor"`` compiles it too.
    Returns {model name: (ok, what happened)}."""
    import torch._dynamo

    from .demo.ctr import _batches
    from .demo.twins import gcn_inputs

    a_hat, x, rows, _ = gcn_inputs(graph)
    a_parts = csr_parts(to_torch_csr(a_hat))
    xt, rt = torch.from_numpy(x.asnumpy()), torch.from_numpy(rows.asnumpy())
    labels = torch.from_numpy(graph.labels[graph.train_nodes])
    batch, y = _batches(data, batch_size)[0]
    b_parts, yt = csr_parts(to_torch_csr(batch)), torch.from_numpy(y.asnumpy())
    cases = {}
    for attention in (False, True):
        model = GCN(x.shape[1], 16, graph.n_classes, attention=attention, seed=seed)
        cases["GCN with attention" if attention else "GCN"] = (model, (a_parts, xt, rt, labels))
    cases["factorization machine"] = (FactorizationMachine(data.n_features, seed=seed), (b_parts, yt))
    out = {}
    for name, (model, args) in cases.items():
        torch._dynamo.reset()
        try:
            loss = model.loss(*args)
            grads = torch.autograd.grad(loss, list(model.parameters()))
            compiled = torch.compile(model.loss, fullgraph=True, backend=backend)
            c_loss = compiled(*args)
            c_grads = torch.autograd.grad(c_loss, list(model.parameters()))
        except Exception as exc:  # noqa: BLE001  (reported, not raised: the demo says what failed)
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            out[name] = (False, f"{type(exc).__name__}: {first[:300]}")
            continue
        same = torch.allclose(c_loss, loss, rtol=1e-5, atol=1e-7) and all(
            torch.allclose(a.to_dense(), b.to_dense(), rtol=1e-5, atol=1e-7) for a, b in zip(c_grads, grads))
        out[name] = (same, f"backend {backend}, fullgraph; loss and gradients "
                           + ("equal the eager ones" if same else "DIFFER from the eager ones"))
    return out


__all__ = ["GCN", "FactorizationMachine", "to_torch_csr", "csr_parts", "compile_models"]
