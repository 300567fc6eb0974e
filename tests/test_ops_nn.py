"""Embedding (forward, row_sparse weight, dense and row_sparse gradients) and Dropout."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import sparse_ops as so
import sparse_ops.random as rnd
from sparse_ops import autograd
from sparse_ops.dispatch import InferenceError
from sparse_ops.errors import OperatorError
from sparse_ops.ops.nn import IndexOutOfRangeError
from sparse_ops.registry import ParameterError
from sparse_ops.sdk.testing import check_gradient

ID_DTYPES = ["int32", "int64", "float32", "float64"]


def _embedding_data(rng, input_dim, shape, id_dtype):
    return rng.integers(0, input_dim, size=shape).astype(id_dtype)


def _dense_weight_grad(ids, head, input_dim):
    """The reference weight gradient: head rows summed per id."""
    grad = np.zeros((input_dim, head.shape[-1]), dtype=np.float64)
    np.add.at(grad, ids.reshape(-1).astype(np.int64), head.reshape(-1, head.shape[-1]))
    return grad


# ---- forward ------------------------------------------------------------------------------------
@given(seed=st.integers(0, 2**16), shape=st.sampled_from([(5,), (3, 4), (2, 0), (0,), (2, 3, 2)]),
       id_dtype=st.sampled_from(ID_DTYPES), dtype=st.sampled_from(["float16", "float32", "float64"]),
       output_dim=st.integers(0, 4))
def test_embedding_gathers_rows(seed, shape, id_dtype, dtype, output_dim):
    rng = np.random.default_rng(seed)
    input_dim = 6
    ids = _embedding_data(rng, input_dim, shape, id_dtype)
    weight = rng.standard_normal((input_dim, output_dim)).astype(dtype)
    out = so.Embedding(so.array(ids), so.array(weight), input_dim=input_dim, output_dim=output_dim, dtype=dtype)
    assert out.shape == (*shape, output_dim) and out.dtype == np.dtype(dtype) and out.stype == "default"
    np.testing.assert_array_equal(out.asnumpy(), weight[ids.astype(np.int64)])


def test_float_ids_truncate():
    weight = np.arange(8, dtype=np.float32).reshape(4, 2)
    ids = so.array(np.array([1.7, -0.5, 3.99], dtype=np.float32))
    out = so.Embedding(ids, so.array(weight), 4, 2).asnumpy()
    np.testing.assert_array_equal(out, weight[[1, 0, 3]])


@pytest.mark.parametrize("bad", [4, -1, 7.0, -1.0, np.nan])
@pytest.mark.parametrize("stype", ["default", "row_sparse"])
def test_embedding_out_of_range_ids_are_a_clear_error(bad, stype):
    dtype = np.float32 if isinstance(bad, float) else np.int64
    ids = so.array(np.array([0, bad, 2], dtype=dtype))
    weight = so.array(np.ones((4, 3), np.float32)).tostype(stype)
    with pytest.raises(IndexOutOfRangeError, match=r"outside \[0, input_dim=4\)") as info:
        so.Embedding(ids, weight, input_dim=4, output_dim=3)
    assert isinstance(info.value, IndexError) and isinstance(info.value, OperatorError)


def test_embedding_shape_and_dtype_errors():
    ids = so.array(np.array([0, 1], np.int64))
    with pytest.raises(InferenceError, match="input_dim, output_dim"):
        so.Embedding(ids, so.zeros((4, 3)), input_dim=5, output_dim=3)
    with pytest.raises(InferenceError, match="dtype='float64'"):
        so.Embedding(ids, so.zeros((4, 3), dtype="float64"), input_dim=4, output_dim=3)
    with pytest.raises(ParameterError):
        so.Embedding(ids, so.zeros((4, 3)), input_dim=-4, output_dim=3)
    with pytest.raises(ParameterError, match="missing"):
        so.Embedding(ids, so.zeros((4, 3)), input_dim=4)


@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_embedding_row_sparse_weight_reads_missing_rows_as_zeros(index_dtype, dtype):
    rows = np.array([1, 4], dtype=index_dtype)
    values = np.arange(6, dtype=dtype).reshape(2, 3) + 1
    weight = so.row_sparse_array((values, rows), shape=(6, 3))
    ids = so.array(np.array([[4, 0], [1, 5]], np.int32))
    plan = so.explain("Embedding", ids, weight, input_dim=6, output_dim=3, dtype=dtype)
    assert plan["dispatch_mode"] == "fcompute_ex"
    out = so.Embedding(ids, weight, input_dim=6, output_dim=3, dtype=dtype)
    dense = weight.asnumpy()
    np.testing.assert_array_equal(out.asnumpy(), dense[ids.asnumpy()])
    empty = so.row_sparse_array((np.zeros((0, 3), dtype), np.zeros(0, index_dtype)), shape=(6, 3))
    assert not so.Embedding(ids, empty, input_dim=6, output_dim=3, dtype=dtype).asnumpy().any()


# ---- gradient -----------------------------------------------------------------------------------
@pytest.mark.parametrize("id_dtype", ID_DTYPES)
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_embedding_backward_sparse_equals_dense(id_dtype, dtype, rng):
    input_dim = 7
    ids = _embedding_data(rng, input_dim, (4, 5), id_dtype)
    head = rng.standard_normal((4, 5, 3)).astype(dtype)
    expected = _dense_weight_grad(ids, head.astype(np.float64), input_dim)
    tol = 1e-2 if dtype == "float16" else 1e-5
    sparse = so.ops._embedding_backward(so.array(ids), so.array(head), input_dim=input_dim, sparse_grad=True)
    assert sparse.stype == "row_sparse" and sparse.dtype == np.dtype(dtype) and sparse.shape == (input_dim, 3)
    np.testing.assert_array_equal(sparse.indices, np.unique(ids.astype(np.int64)))
    assert sparse.indices.dtype == (np.int32 if id_dtype == "int32" else np.int64)
    np.testing.assert_allclose(sparse.asnumpy(), expected, rtol=tol, atol=tol)
    dense = so.ops._embedding_backward(so.array(ids), so.array(head), input_dim=input_dim, sparse_grad=False)
    assert dense.stype == "default"
    np.testing.assert_allclose(dense.asnumpy(), expected, rtol=tol, atol=tol)


def test_embedding_backward_without_ids():
    ids = so.array(np.zeros((0,), np.int64))
    head = so.array(np.zeros((0, 3), np.float32))
    sparse = so.ops._embedding_backward(ids, head, input_dim=5, sparse_grad=True)
    assert sparse.stype == "row_sparse" and sparse.nnz_rows == 0 and not sparse.asnumpy().any()
    assert not so.ops._embedding_backward(ids, head, input_dim=5).asnumpy().any()
    with pytest.raises(InferenceError, match="data.shape"):
        so.ops._embedding_backward(so.array(np.zeros(2, np.int64)), head, input_dim=5)


@pytest.mark.parametrize("sparse_grad", [False, True])
def test_embedding_gradient_through_the_rule(sparse_grad, rng):
    ids = so.array(np.array([[0, 3, 3], [5, 0, 1]], np.int64))
    weight = so.array(rng.standard_normal((6, 4)))
    params = {"input_dim": 6, "output_dim": 4, "dtype": "float64", "sparse_grad": sparse_grad}
    grads = check_gradient("Embedding", [ids, weight], params, wrt=[1])
    assert grads[0] is None
    assert grads[1].stype == ("row_sparse" if sparse_grad else "default")
    if sparse_grad:
        np.testing.assert_array_equal(grads[1].indices, [0, 1, 3, 5])
    # the backward op is itself differentiable in its head gradient
    head = so.array(rng.standard_normal((2, 3, 4)))
    check_gradient("_embedding_backward", [ids, head], {"input_dim": 6, "sparse_grad": sparse_grad}, wrt=[1])


def test_embedding_gradient_values_match_between_storage_types(rng):
    ids = so.array(rng.integers(0, 10, size=(8,)).astype(np.int32))
    weight = so.array(rng.standard_normal((10, 3)))
    head = so.array(rng.standard_normal((8, 3)))
    op = so.get_op("Embedding")
    dense = op.instance({"input_dim": 10, "output_dim": 3, "dtype": "float64"}).gradient([head], [ids, weight], [])
    sparse = op.instance({"input_dim": 10, "output_dim": 3, "dtype": "float64",
                          "sparse_grad": True}).gradient([head], [ids, weight], [])
    assert sparse[1].stype == "row_sparse" and dense[1].stype == "default"
    np.testing.assert_allclose(sparse[1].asnumpy(), dense[1].asnumpy())


# ---- Dropout ------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_dropout_train_and_predict(dtype):
    x = so.array(np.full((200, 100), 3.0, dtype=dtype))
    out = so.Dropout(x, p=0.3)  # predict mode by default: identity
    assert isinstance(out, so.NDArray) and out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out.asnumpy(), x.asnumpy())
    with autograd.train_mode():
        assert autograd.is_training()
        dropped = so.Dropout(x, p=0.3).asnumpy().astype(np.float64)
        with autograd.predict_mode():
            np.testing.assert_array_equal(so.Dropout(x, p=0.3).asnumpy(), x.asnumpy())
    kept = dropped != 0
    assert abs(kept.mean() - 0.7) < 0.02
    np.testing.assert_allclose(dropped[kept], 3.0 / 0.7, rtol=1e-3)
    always = so.Dropout(x, p=0.3, mode="always").asnumpy()
    assert (always == 0).any()


def test_dropout_seeded_and_p_zero():
    x = so.array(np.ones((50, 50), np.float32))
    with autograd.train_mode():
        rnd.seed(11)
        a = so.Dropout(x, p=0.5).asnumpy()
        rnd.seed(11)
        b = so.Dropout(x, p=0.5).asnumpy()
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(so.Dropout(x, p=0.0).asnumpy(), x.asnumpy())


def test_dropout_axes_share_the_mask():
    x = so.array(np.ones((6, 40, 5), np.float32))
    with autograd.train_mode():
        out = so.Dropout(x, p=0.5, axes=(1,)).asnumpy()
    assert (out == out[:, :1, :]).all() and (out == 0).any()
    with pytest.raises(InferenceError, match="out of range"):
        so.Dropout(x, p=0.5, axes=(3,))


def test_dropout_parameters_and_types():
    x = so.array(np.ones((2, 2), np.float32))
    for p in (1.0, -0.1, 1.5):
        with pytest.raises(ParameterError, match="p must be"):
            so.Dropout(x, p=p)
    with pytest.raises(ParameterError):
        so.Dropout(x, mode="sometimes")
    with pytest.raises(InferenceError, match="float"):
        so.Dropout(so.array(np.ones((2, 2), np.int32)))


@pytest.mark.parametrize("axes", [(), (0,)])
def test_dropout_gradient_multiplies_by_the_mask(axes, rng):
    x = so.array(rng.uniform(1, 2, size=(30, 8)))
    with autograd.train_mode():
        out = so.Dropout(x, p=0.4, axes=axes)
    mask = out.asnumpy() / x.asnumpy()
    if axes:
        mask = mask[:1]
    g = so.array(rng.standard_normal((30, 8)))
    inst = so.get_op("Dropout").instance({"p": 0.4, "axes": axes})
    (dx,) = inst.gradient([g], [x], [out, so.array(mask)])
    np.testing.assert_allclose(dx.asnumpy(), g.asnumpy() * mask)
    op = so.get_op("Dropout")
    assert op.backward_inputs == () and op.backward_outputs == (1,)


# ---- the gpu code paths (vectorised kernels) under the simulated gpu --------------------------------
@pytest.mark.gpu
def test_simulated_gpu_paths():
    """Sampling, Embedding (forward, errors, both gradients), Dropout and a lazy optimizer
    update on gpu(0), simulated: the xp kernels registered for the gpu run on NumPy."""
    import os
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import numpy as np, sparse_ops as so, sparse_ops.random as rnd
        from sparse_ops import autograd
        from sparse_ops.ops.nn import IndexOutOfRangeError
        gpu = so.gpu(0)
        rnd.seed(3)
        assert rnd.uniform(shape=(10,), device=gpu).device == gpu
        with gpu:
            n = rnd.normal(shape=(3,), dtype="float16")
        assert n.device == gpu and n.dtype == np.float16
        ids = so.array(np.array([[0, 3], [3, 1]], np.int64), device=gpu)
        w = so.array(np.arange(12, dtype=np.float32).reshape(4, 3), device=gpu)
        assert so.explain("Embedding", ids, w, input_dim=4, output_dim=3)["kernel"] == "EmbeddingOp.dense_xp"
        out = so.Embedding(ids, w, 4, 3)
        assert out.device == gpu
        np.testing.assert_array_equal(out.asnumpy(), w.asnumpy()[ids.asnumpy()])
        try:
            so.Embedding(so.array(np.array([5]), device=gpu), w, 4, 3)
            raise SystemExit("no error for an out-of-range id")
        except IndexOutOfRangeError:
            pass
        head = so.array(np.ones((2, 2, 3), np.float32), device=gpu)
        g = so.ops._embedding_backward(ids, head, input_dim=4, sparse_grad=True)
        assert g.stype == "row_sparse" and g.device == gpu
        np.testing.assert_array_equal(g.indices, [0, 1, 3])
        np.testing.assert_array_equal(g.asnumpy()[3], [2, 2, 2])
        np.testing.assert_array_equal(so.ops._embedding_backward(ids, head, input_dim=4).asnumpy(), g.asnumpy())
        with autograd.train_mode():
            d = so.Dropout(so.array(np.ones((50, 50), np.float32), device=gpu), p=0.5)
        assert d.device == gpu and (d.asnumpy() == 0).any()
        grad = so.row_sparse_array((np.ones((1, 3), np.float32), np.array([2])), shape=(4, 3), device=gpu)
        mom = so.zeros((4, 3), device=gpu)
        so.sgd_mom_update(w, grad, mom, lr=0.1, momentum=0.9, out=w)
        np.testing.assert_allclose(mom.asnumpy()[2], -0.1)
        np.testing.assert_allclose(w.asnumpy()[2], np.arange(6, 9) - 0.1, rtol=1e-6)
        np.testing.assert_array_equal(w.asnumpy()[[0, 1, 3]], np.arange(12).reshape(4, 3)[[0, 1, 3]])
        print("ok")
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("SPARSE_OPS_CUDA_SIM", "NUMBA_ENABLE_CUDASIM")}
    env["SPARSE_OPS_CUDA_SIM"] = "1"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]


def test_through_the_tape(rng):
    """With autograd: the Embedding weight gradient arrives row_sparse, Dropout's is its mask."""
    w = so.array(rng.standard_normal((6, 2)))
    w.attach_grad(stype="row_sparse")
    ids = so.array(np.array([[1, 4], [4, 4]], np.int64))
    with autograd.record():
        y = so.Embedding(ids, w, 6, 2, dtype="float64", sparse_grad=True)
    autograd.backward(y)
    assert w.grad.stype == "row_sparse"
    np.testing.assert_array_equal(w.grad.indices, [1, 4])
    np.testing.assert_allclose(w.grad.asnumpy(), _dense_weight_grad(ids.asnumpy(), np.ones((2, 2, 2)), 6))
    x = so.array(rng.uniform(1, 2, size=(20, 5)))
    x.attach_grad()
    with autograd.record():
        out = so.Dropout(x, p=0.5)
    autograd.backward(out)
    np.testing.assert_allclose(x.grad.asnumpy(), out.asnumpy() / x.asnumpy())


# ---- serial and parallel row kernels ------------------------------------------------------------
@pytest.fixture(params=["serial", "parallel"])
def row_kernels(request, monkeypatch):
    """The form of the row kernels under test: small inputs run the serial one; "parallel"
    lowers the size threshold so even these run the parallel driver."""
    from sparse_ops.sdk import rowkernel

    if request.param == "parallel":
        monkeypatch.setattr(rowkernel, "PARALLEL_MIN_WORK", 0)
    return request.param


@pytest.mark.parametrize("id_dtype", ID_DTYPES)
def test_embedding_step_kernels_on_skewed_ids(row_kernels, id_dtype, rng):
    """Zipf ids (one id holds a third of the batch, most appear once) over several row blocks:
    forward rows, and gradient sums equal to NumPy's unbuffered adds in the same order."""
    input_dim, width = 5000, 7
    ids = (np.minimum(rng.zipf(1.3, 1500), input_dim) - 1).astype(id_dtype)
    weight = rng.standard_normal((input_dim, width)).astype(np.float32)
    head = rng.standard_normal((1500, width)).astype(np.float32)
    out = so.Embedding(so.array(ids), so.array(weight), input_dim=input_dim, output_dim=width)
    np.testing.assert_array_equal(out.asnumpy(), weight[ids.astype(np.int64)])
    expected = np.zeros((input_dim, width), np.float32)
    np.add.at(expected, ids.astype(np.int64), head)  # float32, in the order of the ids, as ours
    sparse = so.ops._embedding_backward(so.array(ids), so.array(head), input_dim=input_dim, sparse_grad=True)
    np.testing.assert_array_equal(sparse.indices, np.unique(ids.astype(np.int64)))
    np.testing.assert_array_equal(sparse.data, expected[np.unique(ids.astype(np.int64))])
    dense = so.ops._embedding_backward(so.array(ids), so.array(head), input_dim=input_dim)
    np.testing.assert_array_equal(dense.asnumpy(), expected)


@pytest.mark.parametrize("bad", [5000, -1, np.nan])
def test_embedding_backward_refuses_out_of_range_ids(row_kernels, bad):
    ids = np.arange(600, dtype=np.float64 if isinstance(bad, float) else np.int64)
    ids[599] = bad
    head = so.array(np.ones((600, 2), np.float32))
    for sparse_grad in (True, False):
        with pytest.raises(IndexOutOfRangeError, match=r"_embedding_backward: 1 id\(s\) outside \[0, input_dim=5000\)"):
            so.ops._embedding_backward(so.array(ids), head, input_dim=5000, sparse_grad=sparse_grad)
    with pytest.raises(IndexOutOfRangeError, match=r"Embedding: 1 id\(s\)"):
        so.Embedding(so.array(ids), so.zeros((5000, 2)), input_dim=5000, output_dim=2)


def test_embedding_gradient_of_a_huge_sparse_table():
    """Ids of up to 62 bits: the radix sort of the distinct ids takes all its passes."""
    ids = np.array([2**61 + 5, 3, 2**61 + 5, 2**40, 2**62 - 1], np.int64)
    head = np.arange(10, dtype=np.float32).reshape(5, 2)
    g = so.ops._embedding_backward(so.array(ids), so.array(head), input_dim=2**62, sparse_grad=True)
    np.testing.assert_array_equal(g.indices, [3, 2**40, 2**61 + 5, 2**62 - 1])
    np.testing.assert_array_equal(g.data, [head[1], head[3], head[0] + head[2], head[4]])
