"""Click-through-rate prediction with a factorization machine, the recommender workload
sparse gradients exist for.

The model: logit(x) = b + sum_j x_j w_j + sum_{j<l} <v_j, v_l> x_j x_l for a csr batch
x, with the linear term from ``embedding_bag(x, w)`` and the pairwise term from
``fm_interaction(x, V)``; the loss, the mean logistic loss, is built from sparse_ops
operators too, so autograd records the whole step. A batch of 4096 rows touches a few
tens of thousands of the million feature rows, so the gradients of ``w`` and ``V`` are
row_sparse and ``lazy_adagrad`` updates only those rows. The same step with dense
gradients (a (n_features, k) array filled mostly with zeros, and a dense update over every
row) is timed for comparison: it computes the same thing, slowly.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

import sparse_ops as so
from sparse_ops import autograd

from ..embedding_bag import embedding_bag
from ..fm import fm_interaction
from ..optimizers import lazy_adagrad
from .data import ClickLog, auc


def logistic_terms(z: so.NDArray, y: so.NDArray) -> so.NDArray:
    """log(1 + exp(z)) - y z per example, written stably as relu(z) - y z + log1p(exp(-|z|))."""
    return so.relu(z) - y * z + so.log1p(so.exp(-so.abs(z)))


def logistic_loss(z: so.NDArray, y: so.NDArray) -> so.NDArray:
    """The mean logistic loss of logits z and labels y."""
    return so.mean(logistic_terms(z, y))


def fm_logits(x: so.CSRNDArray, w: so.NDArray, v: so.NDArray, b: so.NDArray) -> so.NDArray:
    """b + x w + the pairwise term of x with factors v, per row of x."""
    linear = so.reshape(embedding_bag(x, w), shape=(-1,))
    return so.broadcast_add(linear + fm_interaction(x, v), b)


class FactorizationMachine:
    """Parameters w (n_features, 1), V (n_features, k), b (1,), float32, with their
    Adagrad histories. ``sparse=True`` gives w and V row_sparse gradient buffers and lazy
    updates; ``sparse=False`` dense buffers and dense updates over all rows."""

    def __init__(self, n_features: int, k: int = 8, lr: float = 0.05, seed: int = 0, sparse: bool = True,
                 init_history: float = 1e-5, init_scale: float = 0.01) -> None:
        rng = np.random.default_rng(seed)
        self.lr, self.sparse = lr, sparse
        self.w = so.zeros((n_features, 1), dtype="float32")
        self.v = so.array((init_scale * rng.standard_normal((n_features, k))).astype(np.float32))
        self.b = so.zeros((1,), dtype="float32")
        self.history = {name: so.full(getattr(self, name).shape, init_history, dtype="float32")
                        for name in ("w", "v", "b")}
        self._attach()

    def _attach(self) -> None:
        stype = "row_sparse" if self.sparse else "default"
        self.w.attach_grad(stype=stype)
        self.v.attach_grad(stype=stype)
        self.b.attach_grad()

    def copy(self, sparse: bool) -> "FactorizationMachine":
        """Same parameters and histories (copied), with sparse or dense gradients."""
        twin = object.__new__(FactorizationMachine)
        twin.lr, twin.sparse = self.lr, sparse
        for name in ("w", "v", "b"):
            setattr(twin, name, so.array(getattr(self, name).asnumpy()))
        twin.history = {k: so.array(h.asnumpy()) for k, h in self.history.items()}
        twin._attach()
        return twin

    def logits(self, x: so.CSRNDArray) -> so.NDArray:
        return fm_logits(x, self.w, self.v, self.b)

    def step(self, x: so.CSRNDArray, y: so.NDArray) -> float:
        """One minibatch: forward and backward under autograd, then the Adagrad updates
        (lazy on the rows the batch touched, or dense over every row). Returns the loss."""
        with autograd.record():
            loss = logistic_loss(self.logits(x), y)
        loss.backward()
        self.update({name: getattr(self, name).grad for name in ("w", "v", "b")})
        return float(loss.asnumpy())

    def update(self, grads: dict) -> None:
        """The Adagrad updates from gradients ``{"w", "v", "b"}`` (computed here, or summed
        over data-parallel blocks): lazy on the rows a row_sparse gradient stores, or
        dense over every row."""
        for name in ("w", "v"):
            param, hist, grad = getattr(self, name), self.history[name], grads[name]
            if grad.stype == "row_sparse":
                lazy_adagrad(param, grad, hist, lr=self.lr, out=param)
            else:  # the same formula on every row; rows with a zero gradient do not move
                so.adagrad_update(param, grad, hist, lr=self.lr, epsilon=1e-20, out=param)
        so.adagrad_update(self.b, grads["b"], self.history["b"], lr=self.lr, epsilon=1e-20, out=self.b)

    def predict(self, x: so.CSRNDArray) -> np.ndarray:
        """Logits of the rows of x (no recording)."""
        with autograd.pause():
            return self.logits(x).asnumpy()


@dataclass
class CTRReport:
    """What ``train_ctr`` measured."""

    epochs: list = field(default_factory=list)  # per epoch: train_loss, test_loss, test_auc, examples_per_s
    batch_losses: list = field(default_factory=list)
    batches_per_epoch: int = 0
    sparse_ms: float = float("nan")
    dense_ms: float = float("nan")
    max_weight_diff: float = float("nan")  # sparse vs dense training from the same start
    rows_touched: float = float("nan")  # mean fraction of feature rows a batch touches

    @property
    def speedup(self) -> float:
        return self.dense_ms / self.sparse_ms

    @property
    def final_auc(self) -> float:
        return self.epochs[-1]["test_auc"] if self.epochs else float("nan")


def _csr(parts: tuple, n_features: int) -> so.CSRNDArray:
    indptr, indices, data = parts[:3]
    return so.csr_matrix((data, indices, indptr), shape=(len(indptr) - 1, n_features))


def _batches(data: ClickLog, batch_size: int) -> list[tuple[so.CSRNDArray, so.NDArray]]:
    """The training split cut into consecutive minibatches of (nearly) equal sizes, at most
    ``batch_size``: zero-copy csr row slices (the rows are in random order already, so an
    epoch shuffles the batch order only)."""
    x = _csr(data.train, data.n_features)
    y = data.train[3]
    n = len(y)
    cuts = np.linspace(0, n, -(-n // batch_size) + 1).round().astype(int)
    return [(x[a:b], so.array(y[a:b])) for a, b in zip(cuts[:-1], cuts[1:])]


def warm_up(n_features: int, k: int, x: so.CSRNDArray, y: so.NDArray) -> None:
    """One step of a throwaway model on a small batch: compiles (or loads from numba's
    cache) every kernel of the step, so the timings that follow measure work only."""
    FactorizationMachine(n_features, k=k).step(x, y)
    FactorizationMachine(n_features, k=k).predict(x)


def _median_ms(step: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))


def compare_dense(model: FactorizationMachine, batches: list, n: int = 4) -> tuple[float, float, float]:
    """(sparse step ms, dense step ms, max |w_sparse - w_dense|): the same model, from the
    same parameters, over the same ``n`` batches, once with row_sparse gradients and lazy
    updates and once with dense ones; one warm-up step each, not timed."""
    sparse, dense = model.copy(sparse=True), model.copy(sparse=False)
    sparse.step(*batches[0])
    dense.step(*batches[0])
    todo = iter(batches[1:n + 1])
    sparse_ms = _median_ms(lambda: sparse.step(*next(todo)), n)
    todo = iter(batches[1:n + 1])
    dense_ms = _median_ms(lambda: dense.step(*next(todo)), n)
    diff = max(float(np.abs(getattr(sparse, p).asnumpy() - getattr(dense, p).asnumpy()).max()) for p in ("w", "v"))
    return sparse_ms, dense_ms, diff


def train_ctr(data: ClickLog, epochs: int = 3, batch_size: int = 4096, k: int = 8, lr: float = 0.05,
              init_history: float = 1e-5, init_scale: float = 0.01, seed: int = 0,
              progress: Callable | None = None, log: Callable[[str], None] = print,
              compare_batches: int = 4) -> CTRReport:
    """Train the factorization machine on ``data`` and measure it; ``progress(total, desc)``
    returns a bar with ``update(n, **postfix)`` and ``close()`` (see plot.progress)."""
    from .plot import progress as default_progress

    progress = progress or default_progress
    batches = _batches(data, batch_size)
    test_x = _csr(data.test, data.n_features)
    test_y = so.array(data.test[3])
    t0 = time.perf_counter()
    warm_up(data.n_features, k, batches[0][0][:64], batches[0][1][:64])
    log(f"kernels ready in {time.perf_counter() - t0:.1f} s (numba compiles them on first use, then caches them)")
    model = FactorizationMachine(data.n_features, k=k, lr=lr, seed=seed, init_history=init_history,
                                 init_scale=init_scale)
    report = CTRReport(batches_per_epoch=len(batches))
    order_rng = np.random.default_rng(seed + 1)

    touched = [len(np.unique(x.indices)) / data.n_features for x, _ in batches[:4]]
    report.rows_touched = float(np.mean(touched))
    for epoch in range(1, epochs + 1):
        bar = progress(len(batches), f"epoch {epoch}/{epochs}")
        t0 = time.perf_counter()
        losses = []
        for i in order_rng.permutation(len(batches)):
            x, y = batches[i]
            losses.append(model.step(x, y))
            bar.update(x.shape[0], loss=f"{np.mean(losses[-20:]):.4f}")
        seconds = time.perf_counter() - t0
        bar.close()
        z = model.predict(test_x)
        test_loss = float(logistic_loss(so.array(z), test_y).asnumpy())
        row = {"epoch": epoch, "train_loss": float(np.mean(losses)), "test_loss": test_loss,
               "test_auc": auc(z, data.test[3]), "examples_per_s": data.n_train / seconds, "seconds": seconds}
        report.epochs.append(row)
        report.batch_losses.extend(losses)
        log(f"epoch {epoch}: train loss {row['train_loss']:.4f}  test loss {test_loss:.4f}  "
            f"test AUC {row['test_auc']:.4f}  {row['examples_per_s']:,.0f} examples/s")

    if compare_batches > 0:
        n = min(compare_batches, len(batches) - 1)
        report.sparse_ms, report.dense_ms, report.max_weight_diff = compare_dense(model, batches, n)
    return report
