"""Any batch size under ``torch.compile(fullgraph=True)``: the cookbook's csr @ dense and
embedding-bag models, fed 12 batch sizes, compile at most twice (the first size, then one
graph with symbolic sizes for every other), forward and backward equal to eager. The
recipes' shape rules keep torch's symbolic sizes symbolic (``_common.matrix``)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

torch = pytest.importorskip("torch")

import sparse_ops.torch as st  # noqa: E402
import sparse_ops_cookbook  # noqa: E402,F401  (registers the recipes)
from sparse_ops.torch import CSRParts  # noqa: E402

SIZES = (8, 11, 17, 23, 32, 40, 51, 64, 77, 90, 101, 128)  # the 9th used to hit the recompile limit


def _parts(m: sp.csr_matrix) -> list:
    return [torch.from_numpy(m.data), torch.from_numpy(m.indices).long(), torch.from_numpy(m.indptr).long()]


def _compiled(model: torch.nn.Module) -> tuple:
    torch._dynamo.reset()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    return torch.compile(model, backend=backend, fullgraph=True), graphs


class SpmmModel(torch.nn.Module):
    def __init__(self, features: int = 20, out: int = 6) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(features, out, generator=torch.Generator().manual_seed(0)))

    def forward(self, values, indices, indptr, batch: int):
        a = CSRParts(values, indices, indptr, (batch, self.w.shape[0]))
        return st.ops.csr_spmm(a, self.w)


class BagModel(torch.nn.Module):
    def __init__(self, vocab: int = 50, dim: int = 8) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(vocab, dim, generator=torch.Generator().manual_seed(1)))

    def forward(self, values, indices, indptr, batch: int):
        bags = CSRParts(values, indices, indptr, (batch, self.table.shape[0]))
        return st.ops.embedding_bag(bags, self.table)


@pytest.mark.parametrize("model_cls,width", [(SpmmModel, 20), (BagModel, 50)])
def test_twelve_batch_sizes_compile_at_most_twice(model_cls, width):
    model = model_cls()
    compiled, graphs = _compiled(model)
    for batch in SIZES:
        m = sp.random(batch, width, density=0.2, format="csr", dtype=np.float32, random_state=batch)
        out = compiled(*_parts(m), batch)
        param = next(model.parameters())
        want = m @ param.detach().numpy()
        np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-5, atol=1e-5)
        model.zero_grad()
        (out * out).sum().backward()
        grad = param.grad.to_dense() if param.grad.is_sparse else param.grad
        np.testing.assert_allclose(grad.numpy(), m.T @ (2 * want), rtol=1e-4, atol=1e-4)
    assert len(graphs) <= 2, f"{len(graphs)} compiles for {len(SIZES)} batch sizes"
