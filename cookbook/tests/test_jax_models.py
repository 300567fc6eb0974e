"""The cookbook's GCN in JAX (``sparse_ops_cookbook.jax_models``) against its sparse-ops-native
twin (``demo.twins.NativeGCN``): the same losses and weights after a few Adam steps, and
one compilation of the jitted training step."""
import numpy as np
import pytest

jax = pytest.importorskip("jax")

from sparse_ops_cookbook import jax_models  # noqa: E402
from sparse_ops_cookbook.demo.data import stochastic_block_model  # noqa: E402
from sparse_ops_cookbook.demo.twins import NativeGCN, gcn_inputs, gcn_weights  # noqa: E402


def test_jax_gcn_matches_its_native_twin():
    graph = stochastic_block_model(blocks=3, size=40, p_in=0.15, p_out=0.01, seed=2)
    weights = gcn_weights(graph.features.shape[1], 16, graph.n_classes, seed=3)
    native = NativeGCN(weights)
    args = gcn_inputs(graph)
    native_losses = [native.step(*args) for _ in range(5)]
    losses, final = jax_models.train(graph, weights, 5)
    np.testing.assert_allclose(losses, native_losses, rtol=1e-5)
    for name, value in native.arrays().items():
        assert final[name].dtype == np.float32
        np.testing.assert_allclose(final[name], value, rtol=1e-5, atol=1e-6)
    assert losses[-1] < losses[0]
    assert jax_models.step._cache_size() == 1  # five steps, one compilation
