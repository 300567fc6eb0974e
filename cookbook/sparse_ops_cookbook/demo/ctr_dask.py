"""The click-through-rate model of ``ctr.py`` trained data-parallel with its data in Dask
blocks (needs ``sparse-ops[dask]`` and a ``distributed.Client``).

The click log is cut into row blocks that stay on the workers. Each step, every block's
slice of the batch computes its share of the loss gradient on its worker (pulling only
the rows of w and V its features use), the row_sparse gradients are summed across blocks
in a tree of ``add_n`` tasks, and the client applies the same lazy Adagrad update as the
single-machine ``FactorizationMachine.step``: the loss curve is the single machine's, up
to float rounding (sums taken in another order).
"""
from __future__ import annotations

from typing import Any, Callable

import sparse_ops as so

from .ctr import FactorizationMachine, fm_logits, logistic_terms
from .data import ClickLog


def fm_block_loss(x: so.CSRNDArray, y: so.NDArray, w: so.NDArray, v: so.NDArray, b: so.NDArray) -> so.NDArray:
    """The logistic loss of the factorization machine summed over the rows of one block."""
    return so.sum(logistic_terms(fm_logits(x, w, v, b), y))


def click_log_blocks(data: ClickLog, nblocks: int) -> tuple[Any, Any]:
    """The training split as (features, labels) DistributedArrays of ``nblocks`` row blocks."""
    import sparse_ops.dask as sd

    indptr, indices, values, labels = data.train
    x = sd.from_array(so.csr_matrix((values, indices, indptr), shape=(len(labels), data.n_features)),
                      nblocks=nblocks)
    return x, sd.from_array(so.array(labels), row_splits=x.row_splits)


def train_ctr_dask(model: FactorizationMachine, x: Any, y: Any, epochs: int = 1, n_batches: int = 1,
                   log: Callable[[str], None] | None = None) -> list[float]:
    """Train ``model`` (its parameters and Adagrad state stay on the client) on the blocks
    of ``x`` and ``y``: each epoch runs batches 0..n_batches-1, batch b being the b-th of
    ``n_batches`` slices of every block. Returns the loss of every step."""
    import sparse_ops.dask as sd

    trainer = sd.DataParallel(fm_block_loss, x, y, row_params=("w", "v"), n_batches=n_batches)
    losses = []
    try:
        for epoch in range(1, epochs + 1):
            for batch in range(n_batches):
                loss, grads = trainer.step({"w": model.w, "v": model.v, "b": model.b}, batch=batch)
                model.update(grads)
                losses.append(loss)
            if log is not None:
                log(f"epoch {epoch}: mean batch loss {sum(losses[-n_batches:]) / n_batches:.4f}")
    finally:
        trainer.close()
    return losses
