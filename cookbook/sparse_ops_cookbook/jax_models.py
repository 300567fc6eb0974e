"""The cookbook's GCN in JAX, on the JAX bridge (``sparse_ops.jax``): the 2-layer graph
convolutional network of ``demo/gcn.py``, each layer ``csr_spmm(A_hat, H W)`` with the
normalised adjacency as a ``jax.experimental.sparse.BCSR``, the whole training step (forward,
``jax.grad`` through the op's own gradient rule, ``torch.optim.Adam``'s update as the native
twin writes it) one ``jax.jit``-compiled function.

It computes what ``demo.twins.NativeGCN`` (the sparse-ops-native model) computes, from the
same initial weights (``gcn_weights``): ``cookbook/tests/test_jax_models.py`` trains both a
few steps and compares losses and weights. This module imports jax; ``import
sparse_ops_cookbook`` does not import it.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.sparse import BCSR

import sparse_ops as so
import sparse_ops.jax as soj

from . import spmm as _spmm  # noqa: F401  (registers csr_spmm)


def to_bcsr(a: Any) -> BCSR:
    """A sparse_ops csr array (or SciPy csr matrix) as a ``BCSR`` (its components copied to
    jax; int32 indices unless jax runs with 64-bit types)."""
    if not isinstance(a, so.CSRNDArray):
        a = so.csr_matrix(a)
    idx = np.int64 if jax.config.jax_enable_x64 else np.int32
    return BCSR((jnp.asarray(a.data), jnp.asarray(a.indices.astype(idx)), jnp.asarray(a.indptr.astype(idx))),
                shape=a.shape)


def layer(a_hat: BCSR, h: jax.Array, w: jax.Array) -> jax.Array:
    """A_hat @ (H W): the dense product in XLA, the neighbourhood sum by the bridged ``csr_spmm``."""
    return soj.ops.csr_spmm(a_hat, h @ w)


def logits(params: dict[str, jax.Array], a_hat: BCSR, x: jax.Array) -> jax.Array:
    return layer(a_hat, jax.nn.relu(layer(a_hat, x, params["w1"])), params["w2"])


def loss(params: dict[str, jax.Array], a_hat: BCSR, x: jax.Array, rows: jax.Array, onehot: jax.Array) -> jax.Array:
    """Mean softmax cross-entropy of the labelled ``rows`` against ``onehot`` (the row max is
    a constant shift, as in ``demo.gcn.cross_entropy``)."""
    picked = logits(params, a_hat, x)[rows]
    shifted = picked - jax.lax.stop_gradient(picked.max(axis=1, keepdims=True))
    return jnp.mean(jnp.log(jnp.sum(jnp.exp(shifted), axis=1)) - jnp.sum(shifted * onehot, axis=1))


def init_state(weights: dict[str, np.ndarray]) -> dict[str, Any]:
    """Parameters and zero Adam moments from ``gcn_weights``."""
    params = {k: jnp.asarray(v) for k, v in weights.items()}
    zeros = {k: jnp.zeros_like(v) for k, v in params.items()}
    return {"params": params, "mean": zeros, "var": dict(zeros), "t": jnp.zeros((), jnp.int32)}


@jax.jit
def step(state: dict[str, Any], a_hat: BCSR, x: jax.Array, rows: jax.Array, onehot: jax.Array,
         lr: float = 0.01, weight_decay: float = 5e-4) -> tuple[dict[str, Any], jax.Array]:
    """One training step: the loss, its gradient, ``torch.optim.Adam``'s update (L2 weight
    decay added to the gradient); returns (new state, loss)."""
    value, grads = jax.value_and_grad(loss)(state["params"], a_hat, x, rows, onehot)
    b1, b2, eps = 0.9, 0.999, 1e-8
    t = state["t"] + 1
    new = {"params": {}, "mean": {}, "var": {}, "t": t}
    for k, p in state["params"].items():
        tf = t.astype(p.dtype)  # the parameters' dtype throughout, whether or not jax runs with 64-bit types
        c1, c2 = 1 - jnp.asarray(b1, p.dtype) ** tf, 1 - jnp.asarray(b2, p.dtype) ** tf
        g = grads[k] + weight_decay * p
        m = b1 * state["mean"][k] + (1 - b1) * g
        v = b2 * state["var"][k] + (1 - b2) * g * g
        new["mean"][k], new["var"][k] = m, v
        new["params"][k] = p - (lr / c1) * m / (jnp.sqrt(v / c2) + eps)
    return new, value


def inputs(graph: Any) -> tuple[BCSR, jax.Array, jax.Array, jax.Array]:
    """(normalised adjacency, features, labelled rows, one-hot labels) of a ``demo.data.Graph``
    as jax values: the native twin's ``gcn_inputs``, converted."""
    from .demo.twins import gcn_inputs

    a_hat, x, rows, onehot = gcn_inputs(graph)
    return to_bcsr(a_hat), jnp.asarray(x.asnumpy()), jnp.asarray(rows.asnumpy()), jnp.asarray(onehot.asnumpy())


def train(graph: Any, weights: dict[str, np.ndarray], steps: int) -> tuple[list[float], dict[str, np.ndarray]]:
    """Train ``steps`` steps from ``weights``; (losses, final weights as NumPy arrays)."""
    a_hat, x, rows, onehot = inputs(graph)
    state, losses = init_state(weights), []
    for _ in range(steps):
        state, value = step(state, a_hat, x, rows, onehot)
        losses.append(float(value))
    return losses, {k: np.asarray(v) for k, v in state["params"].items()}


__all__ = ["to_bcsr", "layer", "logits", "loss", "init_state", "step", "inputs", "train"]
