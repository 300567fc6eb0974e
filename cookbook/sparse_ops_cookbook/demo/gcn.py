"""Node classification with a 2-layer graph convolutional network (Kipf & Welling):

    A_hat = gcn_norm(A)                              (D^-1/2 (A + I) D^-1/2, once)
    H     = relu(csr_spmm(A_hat, X W1))
    logits = csr_spmm(A_hat, H W2)

trained with softmax cross-entropy on a few labelled nodes and Adam, every step recorded
by autograd through ``csr_spmm`` (whose X gradient is ``csr_spmm_t``). The same network
with the graph removed (A = no edges, so A_hat = I: a 2-layer MLP) is trained alongside to
show what the neighbourhood aggregation buys.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import sparse_ops as so
from sparse_ops import autograd

from ..graph import gcn_norm
from ..spmm import csr_spmm
from .data import Graph


def cross_entropy(logits: so.NDArray, onehot: so.NDArray, shift: so.NDArray) -> so.NDArray:
    """mean over rows of logsumexp(logits) - <onehot, logits>, from operators. ``shift``
    (n, 1), each row's max, a constant, keeps exp from overflowing; logsumexp does not
    depend on it, so neither does the gradient."""
    shifted = so.broadcast_sub(logits, shift)
    lse = so.log(so.sum(so.exp(shifted), axis=1))
    return so.mean(lse - so.sum(shifted * onehot, axis=1))


class GCN:
    """The two weight matrices, Glorot-initialised, with their Adam moments."""

    def __init__(self, n_in: int, n_hidden: int, n_out: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)

        def glorot(a: int, b: int) -> so.NDArray:
            limit = np.sqrt(6.0 / (a + b))
            return so.array(rng.uniform(-limit, limit, (a, b)).astype(np.float32))

        self.params = [glorot(n_in, n_hidden), glorot(n_hidden, n_out)]
        self.moments = [(so.zeros(p.shape, dtype="float32"), so.zeros(p.shape, dtype="float32")) for p in self.params]
        for p in self.params:
            p.attach_grad()

    def logits(self, a_hat: so.CSRNDArray, x: so.NDArray) -> so.NDArray:
        w1, w2 = self.params
        h = so.relu(csr_spmm(a_hat, so.dot(x, w1)))
        return csr_spmm(a_hat, so.dot(h, w2))

    def adam(self, t: int, lr: float, wd: float, beta1: float = 0.9, beta2: float = 0.999) -> None:
        """One Adam step (``adam_update``; the bias correction folded into lr, as MXNet does)."""
        lr_t = lr * np.sqrt(1.0 - beta2 ** t) / (1.0 - beta1 ** t)
        for p, (mean, var) in zip(self.params, self.moments):
            so.adam_update(p, p.grad, mean, var, lr=lr_t, beta1=beta1, beta2=beta2, wd=wd, out=p)


@dataclass
class GCNReport:
    graph: str
    nodes: int
    edges: int
    labelled: int
    accuracy: float  # on the unlabelled nodes
    accuracy_without_graph: float
    target: float
    first_loss: float
    final_loss: float

    @property
    def met(self) -> bool:
        return self.accuracy >= self.target


def _fit(graph: Graph, a: so.CSRNDArray, epochs: int, hidden: int, lr: float, wd: float, seed: int) -> tuple:
    """Train a GCN on adjacency ``a``; (test accuracy, first loss, last loss)."""
    a_hat = gcn_norm(a)
    x = so.array(graph.features)
    train = graph.train_nodes
    onehot = so.array(np.eye(graph.n_classes, dtype=np.float32)[graph.labels[train]])
    rows = so.array(train.astype(np.int64))
    model = GCN(x.shape[1], hidden, graph.n_classes, seed)
    losses = []
    for t in range(1, epochs + 1):
        with autograd.record():
            picked = so.take(model.logits(a_hat, x), rows, axis=0)
            shift = so.array(picked.asnumpy().max(axis=1, keepdims=True))  # a constant: not recorded
            loss = cross_entropy(picked, onehot, shift)
        loss.backward()
        model.adam(t, lr, wd)
        losses.append(float(loss.asnumpy()))
    with autograd.pause():
        predicted = model.logits(a_hat, x).asnumpy().argmax(axis=1)
    test = np.setdiff1d(np.arange(graph.n_nodes), train)
    return float(np.mean(predicted[test] == graph.labels[test])), losses[0], losses[-1]


def train_gcn(graph: Graph, epochs: int = 200, hidden: int = 16, lr: float = 0.01, wd: float = 5e-4,
              seed: int = 0) -> GCNReport:
    """Train the GCN on ``graph`` and, for comparison, the same network without its edges."""
    indptr, indices, data = graph.adjacency
    n = graph.n_nodes
    a = so.csr_matrix((data, indices, indptr), shape=(n, n))
    accuracy, first, last = _fit(graph, a, epochs, hidden, lr, wd, seed)
    no_edges = so.zeros((n, n), stype="csr", dtype="float32")
    baseline, _, _ = _fit(graph, no_edges, epochs, hidden, lr, wd, seed)
    return GCNReport(graph.name, n, graph.n_edges, len(graph.train_nodes), accuracy, baseline, graph.target,
                     first, last)
