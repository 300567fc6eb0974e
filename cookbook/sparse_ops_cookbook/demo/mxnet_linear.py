"""MXNet 1.x's sparse linear classification loop, run unchanged through
``sparse_ops.compat.mxnet``, next to the same loop on the native sparse_ops API.

The MXNet side is the pattern of MXNet's ``example/sparse/linear_classification``
without Module: a generated LibSVM file read by ``mx.io.LibSVMIter`` (csr batches), the
weight held in an ``mx.kv`` store, only the rows a batch touches fetched with
``kv.row_sparse_pull``, a row_sparse gradient from ``dot(csr.T, ...)`` pushed back, and
the update applied in the store by ``kv.set_optimizer`` with an optimizer whose
``update`` is MXNet's ``sgd_update`` (lazy: only the gradient's rows change).
``LazySGD`` below follows MXNet's ``Optimizer`` protocol, so ``mx.optimizer.SGD(
learning_rate=..., wd=..., rescale_grad=..., lazy_update=True)`` takes its place
unchanged.

The native side reads the same rows (``parse_libsvm``), gathers the same rows with
``sparse_ops.retain`` and updates with ``sparse_ops.sgd_update``. ``run`` trains both
and returns their weight after every step; ``cookbook/tests`` checks they agree.

Run with ``python -m sparse_ops_cookbook.demo.mxnet_linear``.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass

import numpy as np

import sparse_ops as so


def make_libsvm(path: str, rows: int = 2000, features: int = 5000, per_row: int = 12,
                seed: int = 0) -> np.ndarray:
    """Write a binary classification problem as LibSVM text (zero-based indices, labels 0/1:
    a logistic model with a sparse true weight, power-law feature frequencies); return the
    true weight."""
    rng = np.random.default_rng(seed)
    true_w = np.where(rng.random(features) < 0.2, rng.standard_normal(features), 0.0)
    p = 1.0 / np.arange(1, features + 1) ** 0.8
    p /= p.sum()
    with open(path, "w") as f:
        for _ in range(rows):
            k = int(rng.integers(1, per_row + 1))
            cols = np.unique(rng.choice(features, k, p=p))
            vals = rng.random(cols.size).astype(np.float32) + np.float32(0.5)
            y = int(rng.random() < 1.0 / (1.0 + np.exp(-float(vals @ true_w[cols]))))
            f.write(str(y) + "".join(f" {c}:{v!r}" for c, v in zip(cols.tolist(), vals.tolist())) + "\n")
    return true_w


class LazySGD:
    """SGD with MXNet's ``Optimizer`` protocol (``create_state``, ``update``), its update
    MXNet's ``sgd_update`` with ``lazy_update``: a row_sparse gradient moves only its rows."""

    def __init__(self, learning_rate: float = 0.1, wd: float = 0.0, rescale_grad: float = 1.0) -> None:
        self.lr, self.wd, self.rescale_grad = learning_rate, wd, rescale_grad

    def create_state(self, index, weight):
        return None

    def update(self, index, weight, grad, state) -> None:
        import sparse_ops.compat.mxnet as mx

        mx.nd.sgd_update(weight, grad, lr=self.lr, wd=self.wd, rescale_grad=self.rescale_grad,
                         lazy_update=True, out=weight)


@dataclass
class Trajectory:
    weights: list  # the full weight (features,) after every step, float32
    losses: list  # mean logistic loss of each batch, before its step


def _logloss(p: np.ndarray, y: np.ndarray) -> float:
    eps = 1e-7
    return float(-np.mean(y * np.log(p + eps) + (1 - y) * np.log(1 - p + eps)))


def train_mxnet(path: str, features: int, batch_size: int = 100, epochs: int = 2, lr: float = 0.5,
                wd: float = 1e-4, optimizer=None) -> Trajectory:
    """The MXNet loop, written against ``mx`` only."""
    import sparse_ops.compat.mxnet as mx

    train = mx.io.LibSVMIter(data_libsvm=path, data_shape=(features,), batch_size=batch_size)
    kv = mx.kv.create("local")
    kv.init("weight", mx.nd.zeros((features, 1)))
    kv.set_optimizer(optimizer or LazySGD(learning_rate=lr, wd=wd, rescale_grad=1.0 / batch_size))
    weights, losses = [], []
    full = mx.nd.zeros((features, 1))
    for _ in range(epochs):
        train.reset()
        for batch in train:
            x, y = batch.data[0], batch.label[0].reshape((-1, 1))
            rows = mx.nd.sparse.zeros("row_sparse", (features, 1))
            kv.row_sparse_pull("weight", out=rows, row_ids=mx.nd.array(x.indices, dtype="int64"))
            p = mx.nd.sigmoid(mx.nd.sparse.dot(x, rows))
            losses.append(_logloss(p.asnumpy(), y.asnumpy()))
            grad = mx.nd.sparse.dot(x, p - y, transpose_a=True)  # row_sparse: the batch's columns
            kv.push("weight", grad)
            kv.pull("weight", out=full)
            weights.append(full.asnumpy().ravel().copy())
    return Trajectory(weights, losses)


def train_native(path: str, features: int, batch_size: int = 100, epochs: int = 2, lr: float = 0.5,
                 wd: float = 1e-4) -> Trajectory:
    """The same loop on the native API: the file's rows, ``retain``, ``dot``, ``sgd_update``."""
    from sparse_ops.compat.mxnet.io import parse_libsvm

    parsed = parse_libsvm(path, features)
    if parsed.rows % batch_size:
        raise ValueError("train_native walks whole batches: use a row count divisible by batch_size")
    x_all = so.csr_matrix((parsed.data, parsed.indices, parsed.indptr), shape=(parsed.rows, features))
    labels = parsed.labels
    w = so.zeros((features, 1))
    weights, losses = [], []
    for _ in range(epochs):
        for start in range(0, parsed.rows, batch_size):
            x = x_all[start:start + batch_size]
            y = so.array(labels[start:start + batch_size].reshape(-1, 1))
            rows = so.retain(w, so.array(np.asarray(x.indices), dtype="int64"))
            p = so.sigmoid(so.dot(x, rows))
            losses.append(_logloss(p.asnumpy(), y.asnumpy()))
            grad = so.dot(x, p - y, transpose_a=True)
            so.sgd_update(w, grad, lr=lr, wd=wd, rescale_grad=1.0 / batch_size, lazy_update=True, out=w)
            weights.append(w.asnumpy().ravel().copy())
    return Trajectory(weights, losses)


def run(rows: int = 2000, features: int = 5000, batch_size: int = 100, epochs: int = 2,
        folder: str | None = None, seed: int = 0) -> dict:
    """Generate the file, train both loops; their trajectories and the largest relative gap."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(folder or tmp, "linear.libsvm")
        make_libsvm(path, rows=rows, features=features, seed=seed)
        mx_t = train_mxnet(path, features, batch_size, epochs)
        so_t = train_native(path, features, batch_size, epochs)
    a, b = np.stack(mx_t.weights), np.stack(so_t.weights)
    gap = float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-6)))
    return {"mxnet": mx_t, "native": so_t, "max_relative_gap": gap}


def main() -> None:
    r = run()
    m, n = r["mxnet"], r["native"]
    step = max(1, len(m.losses) // 8)
    for i in range(0, len(m.losses), step):
        print(f"step {i:3d}: loss mx {m.losses[i]:.5f}   native {n.losses[i]:.5f}")
    print(f"final loss mx {m.losses[-1]:.5f}, native {n.losses[-1]:.5f}; "
          f"largest relative weight gap over {len(m.weights)} steps: {r['max_relative_gap']:.2e}")


if __name__ == "__main__":
    main()
