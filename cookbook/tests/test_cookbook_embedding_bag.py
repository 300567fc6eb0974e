"""embedding_bag: pooled embeddings with a row_sparse weight gradient."""
import numpy as np
import pytest

import sparse_ops as so
from cookbook_helpers import csr, normal, random_dense, serial_and_parallel
from sparse_ops import autograd as ag
from sparse_ops.dispatch import InferenceError
from sparse_ops.registry import ParameterError
from sparse_ops.sdk.testing import check_numeric_gradient, opcheck
from sparse_ops_cookbook import embedding_bag

# 4 bags over a vocabulary of 10 ids; bag 2 is empty; values are per-id weights
BAGS = np.zeros((4, 10))
BAGS[0, [1, 4]] = [1.0, 2.0]
BAGS[1, [4, 7, 9]] = [0.5, 1.0, 1.0]
BAGS[3, [0]] = [3.0]


def reference(bags: np.ndarray, weight: np.ndarray, mode: str) -> np.ndarray:
    out = bags @ weight
    if mode == "mean":
        out /= np.maximum((bags != 0).sum(axis=1), 1)[:, None]
    return out


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_embedding_bag_matches_reference(dtype, mode):
    bags, weight = csr(BAGS, dtype=dtype), normal(10, 5, seed=1, dtype=dtype)
    out = embedding_bag(bags, weight, mode=mode)
    assert (out.stype, out.shape, out.dtype) == ("default", (4, 5), np.dtype(dtype))
    np.testing.assert_allclose(out.asnumpy(), reference(BAGS, weight.asnumpy(), mode), rtol=1e-6, atol=1e-6)
    assert np.all(out.asnumpy()[2] == 0)
    assert so.explain("embedding_bag", bags, weight, mode=mode)["dispatch_mode"] == "fcompute_ex"


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_weight_gradient_is_row_sparse_over_the_ids_present(mode):
    bags, weight = csr(BAGS), normal(10, 5, seed=2)
    weight.attach_grad(stype="row_sparse")
    head = normal(4, 5, seed=3)
    with ag.record():
        out = embedding_bag(bags, weight, mode=mode)
    out.backward(head)
    g = so.ops._embedding_bag_backward(bags, head, mode=mode)
    assert g.stype == "row_sparse" and g.indices.tolist() == [0, 1, 4, 7, 9]
    scaled = head.asnumpy() / (np.maximum((BAGS != 0).sum(axis=1), 1)[:, None] if mode == "mean" else 1)
    np.testing.assert_allclose(g.asnumpy(), BAGS.T @ scaled, atol=1e-12)
    np.testing.assert_allclose(weight.grad.asnumpy(), BAGS.T @ scaled, atol=1e-12)
    check_numeric_gradient(lambda w: embedding_bag(bags, w, mode=mode), [weight])


def test_opcheck_and_row_sparse_weight():
    bags, weight = csr(BAGS), normal(10, 3, seed=4)
    samples = [([bags, weight], {"mode": m}) for m in ("sum", "mean")]
    full = so.array(np.abs(normal(4, 10, seed=5).asnumpy()) + 0.5)  # dense bags under mean: every id present
    samples += [([full, weight], {"mode": "mean"}), [bags, weight.tostype("row_sparse")]]
    assert opcheck("embedding_bag", samples) == 4
    sparse_weight = so.array(np.where(np.arange(10)[:, None] % 2 == 0, weight.asnumpy(), 0)).tostype("row_sparse")
    np.testing.assert_allclose(embedding_bag(bags, sparse_weight).asnumpy(), BAGS @ sparse_weight.asnumpy())


def test_embedding_bag_errors():
    with pytest.raises(InferenceError, match="one row per id"):
        embedding_bag(csr(BAGS), normal(9, 3))
    with pytest.raises(ParameterError, match="mode"):
        embedding_bag(csr(BAGS), normal(10, 3), mode="max")


def test_mean_pooling_serial_and_parallel_forms_agree_exactly(monkeypatch):
    bags = random_dense(300, 50, 0.1, seed=5, empty_rows=[0, 200])
    a, weight = csr(bags), normal(50, 4, seed=6)
    (serial,), (parallel,) = serial_and_parallel(monkeypatch, lambda: [embedding_bag(a, weight, mode="mean")])
    np.testing.assert_array_equal(serial, parallel)
    np.testing.assert_allclose(serial, reference(bags, weight.asnumpy(), "mean"), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_per_id_weights_get_their_gradient_when_asked(mode):
    """The bags' stored values (per-id weights) get d w_bi = <g_b, weight_i> (over the bag's
    size under mean): torch's per_sample_weights gradient, never a silent zero."""
    bags, weight = csr(BAGS), normal(10, 5, seed=7)
    check_numeric_gradient(lambda b: embedding_bag(b, weight, mode=mode), [bags])
    bags.attach_grad()
    with ag.record():
        out = embedding_bag(bags, weight, mode=mode)
    head = normal(4, 5, seed=8)
    out.backward(head)
    sizes = np.maximum((BAGS != 0).sum(axis=1), 1)[:, None] if mode == "mean" else 1
    want = np.where(BAGS != 0, (head.asnumpy() / sizes) @ weight.asnumpy().T, 0)
    assert bags.grad.stype == "csr"
    np.testing.assert_allclose(bags.grad.asnumpy(), want, rtol=1e-12)


def test_per_id_weights_through_torch_match_per_sample_weights():
    torch = pytest.importorskip("torch")
    import sparse_ops.torch as st

    ids, offsets = torch.tensor([1, 4, 2, 7, 9]), torch.tensor([0, 2, 5])
    psw = torch.tensor([0.5, 2.0, 1.0, 3.0, 0.25], dtype=torch.float64)
    w = torch.randn(10, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    values = psw.clone().requires_grad_()
    bags = torch.sparse_csr_tensor(offsets, ids, values, size=(2, 10))
    st.ops.embedding_bag(bags, w).pow(2).sum().backward()
    ref = psw.clone().requires_grad_()
    torch.nn.functional.embedding_bag(ids, w, offsets[:-1], mode="sum", per_sample_weights=ref).pow(2).sum().backward()
    torch.testing.assert_close(values.grad, ref.grad)


@pytest.mark.parametrize("stype", ["csr", "default"])
def test_the_weight_gradient_differentiates_in_the_per_id_weights(stype):
    """Second order: the weight's gradient (bags.T @ g) depends on the per-id weights, so
    differentiating it gives them the gradient dot gives (it read as zero)."""
    weight = normal(10, 5, seed=9)
    grads = {}
    for name, f in (("bag", lambda b, w: embedding_bag(b, w)), ("dot", lambda b, w: so.dot(b, w))):
        bags = csr(BAGS) if stype == "csr" else so.array(BAGS)
        w = so.array(weight.asnumpy())
        bags.attach_grad()
        w.attach_grad()
        with ag.record():
            (gw,) = ag.grad(so.sum(f(bags, w)), [w], create_graph=True)
            second = so.sum(so.elemwise_mul(gw.tostype("default"), gw.tostype("default")))
        second.backward()
        grads[name] = bags.grad.asnumpy()
    assert np.abs(grads["dot"]).sum() > 0
    # (native dot gives a csr every position's gradient; the per-id weights are the stored ones)
    want = np.where(BAGS != 0, grads["dot"], 0) if stype == "csr" else grads["dot"]
    np.testing.assert_allclose(grads["bag"], want, rtol=1e-12)
