"""The sparse-ops-native twins of the PyTorch models in ``sparse_ops_cookbook.torch_models``.

``sparse-ops demo --torch`` and ``cookbook/tests/test_torch_models.py`` train each PyTorch
model next to its native twin, from the same initial weights on the same data, and compare
losses and parameters step by step. For that the twins must compute the same functions
with the same optimizer formulas as ``torch.optim``, and this module holds what the
native side needs (it imports no torch):

- ``gcn_weights``: the GCN's initial weights (Glorot-uniform, NumPy, float32), used by
  both sides;
- ``NativeGCN``: the 2-layer GCN of ``demo/gcn.py``, with the optional graph attention of
  the PyTorch model (``csr_sddmm`` scores on the adjacency's positions, ``csr_row_softmax``,
  ``csr_spmm``), trained with Adam written as ``torch.optim.Adam`` computes it;
- the factorization machine's twin is ``demo.ctr.FactorizationMachine`` itself (lazy
  Adagrad on row_sparse gradients is what ``torch.optim.Adagrad`` does with sparse ones).
"""
from __future__ import annotations

import numpy as np

import sparse_ops as so
from sparse_ops import autograd

from ..attention import csr_row_softmax
from ..spmm import csr_sddmm, csr_spmm

GCN_PARAMS = ("w1", "w2")
ATTENTION_PARAMS = ("q1", "k1", "q2", "k2")


def gcn_weights(n_in: int, n_hidden: int, n_out: int, attention: bool = False, d_att: int = 8,
                seed: int = 0) -> dict[str, np.ndarray]:
    """Initial weights of the 2-layer GCN, Glorot-uniform in float32: ``w1`` (n_in, n_hidden)
    and ``w2`` (n_hidden, n_out); with ``attention`` also the query and key maps of each
    layer, ``q1``/``k1`` (n_hidden, d_att) and ``q2``/``k2`` (n_out, d_att)."""
    rng = np.random.default_rng(seed)

    def glorot(a: int, b: int) -> np.ndarray:
        limit = np.sqrt(6.0 / (a + b))
        return rng.uniform(-limit, limit, (a, b)).astype(np.float32)

    weights = {"w1": glorot(n_in, n_hidden), "w2": glorot(n_hidden, n_out)}
    if attention:
        for name, width in (("q1", n_hidden), ("k1", n_hidden), ("q2", n_out), ("k2", n_out)):
            weights[name] = glorot(width, d_att)
    return weights


def attention_scale(d_att: int) -> float:
    """The factor of the attention scores, 1 / sqrt(d_att) (scaled dot-product attention)."""
    return float(1.0 / np.sqrt(d_att))


class NativeGCN:
    """logits = L2(relu(L1(X))) where layer l maps H to A_l @ (H W_l): A_l is the normalised
    adjacency itself, or with ``attention`` the softmax over each row's stored positions of
    the scores <q_i, k_j> / sqrt(d_att) (q = Z Q_l, k = Z K_l, Z = H W_l): attention weights
    of each node over its neighbours and itself, learnt. Parameters are sparse_ops arrays
    with dense gradients; ``adam`` is ``torch.optim.Adam``'s step."""

    def __init__(self, weights: dict[str, np.ndarray]) -> None:
        self.attention = "q1" in weights
        self.d_att = weights["q1"].shape[1] if self.attention else 0
        self.params = {name: so.array(np.array(value, copy=True)) for name, value in weights.items()}
        for p in self.params.values():
            p.attach_grad()
        self.moments = {name: (so.zeros(p.shape, dtype=p.dtype), so.zeros(p.shape, dtype=p.dtype))
                        for name, p in self.params.items()}
        self.t = 0

    def _layer(self, a_hat: so.CSRNDArray, h: so.NDArray, layer: int) -> so.NDArray:
        z = so.dot(h, self.params[f"w{layer}"])
        if not self.attention:
            return csr_spmm(a_hat, z)
        q = so.dot(z, self.params[f"q{layer}"]) * attention_scale(self.d_att)
        k = so.dot(z, self.params[f"k{layer}"])
        return csr_spmm(csr_row_softmax(csr_sddmm(a_hat, q, k)), z)

    def logits(self, a_hat: so.CSRNDArray, x: so.NDArray) -> so.NDArray:
        return self._layer(a_hat, so.relu(self._layer(a_hat, x, 1)), 2)

    def loss(self, a_hat: so.CSRNDArray, x: so.NDArray, rows: so.NDArray, onehot: so.NDArray) -> so.NDArray:
        """Mean softmax cross-entropy of the rows ``rows`` (labelled nodes) against ``onehot``
        (recorded when autograd records)."""
        from .gcn import cross_entropy

        picked = so.take(self.logits(a_hat, x), rows, axis=0)
        shift = so.array(picked.asnumpy().max(axis=1, keepdims=True))  # a constant: not recorded
        return cross_entropy(picked, onehot, shift)

    def step(self, a_hat: so.CSRNDArray, x: so.NDArray, rows: so.NDArray, onehot: so.NDArray,
             lr: float = 0.01, weight_decay: float = 5e-4) -> float:
        """Forward and backward under autograd, then one Adam step; returns the loss."""
        with autograd.record():
            loss = self.loss(a_hat, x, rows, onehot)
        loss.backward()
        self.adam(lr, weight_decay)
        return float(loss.asnumpy())

    def adam(self, lr: float, weight_decay: float = 0.0, beta1: float = 0.9, beta2: float = 0.999,
             eps: float = 1e-8) -> None:
        """``torch.optim.Adam``'s step (L2 weight decay added to the gradient) with
        ``adam_update``: torch divides by sqrt(v / c2) + eps with the bias corrections
        c1 = 1 - beta1^t, c2 = 1 - beta2^t and steps lr / c1; multiplying through by sqrt(c2)
        gives adam_update's form with lr' = lr sqrt(c2) / c1 and epsilon' = eps sqrt(c2)."""
        self.t += 1
        c1, c2 = 1.0 - beta1 ** self.t, 1.0 - beta2 ** self.t
        lr_t, eps_t = lr * np.sqrt(c2) / c1, eps * np.sqrt(c2)
        for name, p in self.params.items():
            mean, var = self.moments[name]
            so.adam_update(p, p.grad, mean, var, lr=lr_t, beta1=beta1, beta2=beta2, epsilon=eps_t,
                           wd=weight_decay, out=p)

    def arrays(self) -> dict[str, np.ndarray]:
        """The current parameters as NumPy arrays (copies)."""
        return {name: p.asnumpy().copy() for name, p in self.params.items()}


def gcn_inputs(graph) -> tuple[so.CSRNDArray, so.NDArray, so.NDArray, so.NDArray]:
    """(normalised adjacency, features, labelled rows, their one-hot labels) of a
    ``demo.data.Graph``, as sparse_ops arrays."""
    from ..graph import gcn_norm

    indptr, indices, data = graph.adjacency
    n = graph.n_nodes
    a_hat = gcn_norm(so.csr_matrix((data, indices, indptr), shape=(n, n)))
    onehot = np.eye(graph.n_classes, dtype=np.float32)[graph.labels[graph.train_nodes]]
    return (a_hat, so.array(graph.features), so.array(graph.train_nodes.astype(np.int64)), so.array(onehot))


__all__ = ["gcn_weights", "attention_scale", "NativeGCN", "gcn_inputs", "GCN_PARAMS", "ATTENTION_PARAMS"]
