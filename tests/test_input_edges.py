"""Inputs at the edges of the public API, each refused clearly or computed as NumPy does:
NumPy-style reshape sizes, writes into memory that repeats or is read-only, a 1-d vector
times a csr, repeated axes, Dask block declarations, and the arguments of load and full."""
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import sparse_ops as so
from sparse_ops.dispatch import InferenceError


def test_reshape_takes_numpy_style_sizes():
    x = so.array(np.arange(4, dtype=np.float32))
    assert x.reshape(4, 1).shape == (4, 1) and x.reshape(1, 4).shape == (1, 4)
    assert x.reshape((2, 2)).shape == (2, 2) and x.reshape(-1).shape == (4,) and x.reshape(shape=(2, -1)).shape == (2, 2)
    with pytest.raises(TypeError, match="both by position and by keyword"):
        x.reshape(4, shape=(4,))


def test_writes_into_repeating_or_read_only_memory_are_refused():
    base = np.zeros(3, np.float32)
    x = so.from_dlpack(np.lib.stride_tricks.as_strided(base, (4, 3), (0, 4)))  # 12 entries over 3 floats
    src = so.array(np.arange(12, dtype=np.float32).reshape(4, 3))
    with pytest.raises(ValueError, match="entries share memory"):
        x[:] = src
    with pytest.raises(so.OperatorError, match="operator 'exp' writes out=, but its entries share memory"):
        so.exp(src, out=x)
    ro = np.arange(6.0).reshape(2, 3)
    ro.flags.writeable = False
    y = so.from_dlpack(ro)
    with pytest.raises(ValueError, match="values are read-only"):
        y[:] = 1
    with pytest.raises(so.OperatorError, match="operator '_plus_scalar' writes out=, but its values are read-only"):
        y += 1
    np.testing.assert_array_equal(base, 0) and np.testing.assert_array_equal(ro, np.arange(6.0).reshape(2, 3))
    z = so.array(np.ones((2, 3)))
    so.exp(z, out=z)  # a plain array still takes writes
    np.testing.assert_allclose(z.asnumpy(), np.e)


def test_torch_expanded_tensor_is_refused_as_torch_refuses_it():
    torch = pytest.importorskip("torch")
    x = so.from_dlpack(torch.zeros(1, 3).expand(4, 3))
    with pytest.raises(ValueError, match="entries share memory"):
        x[:] = so.array(np.ones((4, 3), np.float32))


@pytest.mark.parametrize("transpose_b", [False, True])
def test_a_vector_times_a_csr_is_dense_on_every_face(transpose_b):
    m = sp.random(6, 5, density=0.4, format="csr", dtype=np.float64, random_state=0)
    c = so.csr_matrix(m)
    v = np.arange(5.0 if transpose_b else 6.0)
    want = m.toarray() @ v if transpose_b else v @ m.toarray()
    y = so.dot(so.array(v), c, transpose_b=transpose_b)
    assert y.stype == "default" and y.shape == want.shape
    np.testing.assert_allclose(y.asnumpy(), want)
    if not transpose_b:
        np.testing.assert_allclose((so.array(v) @ c).asnumpy(), want)
    x = so.array(v)
    x.attach_grad()
    c.attach_grad()
    with warnings.catch_warnings(), so.autograd.record():
        warnings.simplefilter("error", so.StorageFallbackWarning)  # the csr is never densified
        so.dot(x, c, transpose_b=transpose_b).backward()
    np.testing.assert_allclose(x.grad.asnumpy(), m.toarray().sum(axis=0 if transpose_b else 1))
    stored = m.toarray() != 0
    dense_grad = np.outer(np.ones(6), v) if transpose_b else np.outer(v, np.ones(5))
    np.testing.assert_allclose(c.grad.asnumpy(), np.where(stored, dense_grad, 0))
    torch = pytest.importorskip("torch")
    import sparse_ops.torch as st

    t = torch.tensor(v, requires_grad=True)
    out = st.ops.dot(t, st.to_torch(c), transpose_b=transpose_b)
    assert out.layout == torch.strided
    out.sum().backward()
    np.testing.assert_allclose(out.detach().numpy(), want)
    np.testing.assert_allclose(t.grad.numpy(), m.toarray().sum(axis=0 if transpose_b else 1))


def test_repeated_axes_are_refused_at_inference():
    with pytest.raises(InferenceError, match="reverse: argument axis \\(0, 0\\) names the same axis twice"):
        so.reverse(so.array(np.ones((2, 3))), axis=(0, 0))
    with pytest.raises(InferenceError, match="squeeze: argument axis \\(0, -3\\) names the same axis twice"):
        so.squeeze(so.zeros((1, 3, 1)), axis=(0, -3))


def test_dask_block_declarations_are_checked_when_made():
    sd = pytest.importorskip("sparse_ops.dask")
    from dask import delayed

    m = sp.random(10, 6, density=0.4, format="csr", dtype=np.float32, random_state=0)
    with pytest.raises(ValueError, match="row_splits must be integers"):
        sd.from_array(m, row_splits=(0, 5.5, 10))
    block = delayed(lambda: so.csr_matrix(m[:5]))()
    with pytest.raises(so.SparseFormatError, match="non-negative"):
        sd.from_delayed([block], [((5, -6), "csr", "float32")])
    with pytest.raises(TypeError, match="uint8 are not supported"):
        sd.from_delayed([block], [((5, 6), "csr", "uint8")])


def test_load_and_full_refuse_wrong_arguments(tmp_path):
    path = tmp_path / "x.npz"
    so.save(path, so.array(np.ones(2, np.float32)))
    with pytest.raises(TypeError, match="load: attrs must be a dict"):
        so.load(path, attrs=[])
    for bad in ("x", [1, 2]):
        with pytest.raises(TypeError, match="full: the value must be a number"):
            so.full((2, 2), bad)
    np.testing.assert_array_equal(so.full((2,), np.float32(2.5)).asnumpy(), [2.5, 2.5])


def test_reshape_of_an_empty_array_takes_written_zeros_as_sizes():
    """MXNet's 0 copies an input axis; where that reading does not fit an empty array, its
    0s are sizes (the written-out shapes the library's own compositions pass)."""
    assert so.reshape(so.zeros((0, 2)), shape=(4, 0, 2)).shape == (4, 0, 2)
    assert so.reshape(so.zeros((2, 3, 2)), shape=(0, 6)).shape == (2, 6)  # the special reading, as MXNet
    with pytest.raises(InferenceError, match="cannot reshape"):
        so.reshape(so.zeros((2, 3)), shape=(4, 0, 2))


@pytest.mark.parametrize("op", ["broadcast_mul", "broadcast_div"])
def test_a_csr_broadcast_to_more_axes_is_dense(op):
    m = sp.random(3, 4, density=0.5, format="csr", dtype=np.float64, random_state=1)
    d = np.arange(1.0, 25.0).reshape(2, 3, 4)
    y = getattr(so, op)(so.csr_matrix(m), so.array(d))
    ref = m.toarray() * d if op == "broadcast_mul" else m.toarray() / d
    assert y.stype == "default" and y.shape == (2, 3, 4)
    np.testing.assert_allclose(y.asnumpy(), ref)
