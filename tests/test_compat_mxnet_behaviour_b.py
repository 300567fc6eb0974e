"""MXNet 1.9 behaviours of the compat face: optimizer updates on a row_sparse weight,
``check_format()`` on unchecked compat constructions, ``Convolution``; against NumPy."""
import numpy as np
import pytest

import sparse_ops as so
import sparse_ops.compat.mxnet as mx

W = np.arange(12, dtype=np.float64).reshape(4, 3) / 10 + 1
G = np.array([[1, 2, 3], [0, 0, 0], [-1, 0.5, 2], [0, 0, 0]], dtype=np.float64)
ROWS = [0, 2]


def _rsp(v):
    return mx.nd.array(v, dtype=v.dtype).tostype("row_sparse")


def _grad():
    return mx.nd.sparse.row_sparse_array((G[ROWS], ROWS), shape=G.shape, dtype=G.dtype)


def _sgd(w, g, lr, wd, rows):
    out = w.copy()
    out[rows] = (1 - lr * wd) * w[rows] - lr * g[rows]
    return out


@pytest.mark.parametrize("lazy", [True, False])
def test_sgd_update_rsp_weight_in_place(lazy):
    w = _rsp(W)
    r = mx.nd.sgd_update(w, _grad(), lr=0.1, wd=0.05, lazy_update=lazy, out=w)
    assert w.stype == "row_sparse" and r.stype == "row_sparse"
    rows = ROWS if lazy else [0, 1, 2, 3]
    np.testing.assert_allclose(w.asnumpy(), _sgd(W, G, 0.1, 0.05, rows), rtol=1e-12)
    assert list(w.indices.asnumpy()) == [0, 1, 2, 3]


def test_sgd_update_rsp_weight_issue_example():
    w = mx.nd.ones((4, 2)).tostype("row_sparse")
    g = mx.nd.ones((4, 2)).tostype("row_sparse")
    mx.nd.sgd_update(w, g, lr=0.1, out=w)
    assert w.stype == "row_sparse"
    np.testing.assert_allclose(w.asnumpy(), np.full((4, 2), 0.9), rtol=1e-6)


def test_sgd_update_rsp_weight_new_output_leaves_weight():
    w = _rsp(W)
    out = mx.nd.sgd_update(w, _grad(), lr=0.1)
    assert out.stype == "row_sparse" and out is not w
    np.testing.assert_allclose(out.asnumpy(), _sgd(W, G, 0.1, 0.0, ROWS), rtol=1e-12)
    np.testing.assert_array_equal(w.asnumpy(), W)


def _mom_ref(w, g, mom, lr, momentum, wd, rows):
    w, mom = w.copy(), mom.copy()
    m = momentum * mom[rows] - lr * wd * w[rows] - lr * g[rows]
    mom[rows] = m
    w[rows] = w[rows] + m
    return w, mom


@pytest.mark.parametrize("mom_stype,lazy,lazy_rows", [("row_sparse", True, True), ("row_sparse", False, False),
                                                      ("default", True, False)])
def test_sgd_mom_update_rsp_weight(mom_stype, lazy, lazy_rows):
    m0 = np.full(W.shape, 0.5)
    w, mom = _rsp(W), mx.nd.array(m0, dtype=W.dtype).tostype(mom_stype)
    mx.nd.sgd_mom_update(w, _grad(), mom, lr=0.1, momentum=0.9, wd=0.01, lazy_update=lazy, out=w)
    rw, rm = _mom_ref(W, G, m0, 0.1, 0.9, 0.01, ROWS if lazy_rows else [0, 1, 2, 3])
    assert w.stype == "row_sparse" and mom.stype == mom_stype
    np.testing.assert_allclose(w.asnumpy(), rw, rtol=1e-12)
    np.testing.assert_allclose(mom.asnumpy(), rm, rtol=1e-12)


def test_sgd_mom_update_fills_empty_rsp_mom():
    w, mom = _rsp(W), mx.nd.sparse.zeros("row_sparse", W.shape, dtype=W.dtype)
    mx.nd.sgd_mom_update(w, _grad(), mom, lr=0.1, momentum=0.9, out=w)
    rw, rm = _mom_ref(W, G, np.zeros(W.shape), 0.1, 0.9, 0.0, ROWS)
    np.testing.assert_allclose(w.asnumpy(), rw, rtol=1e-12)
    np.testing.assert_allclose(mom.asnumpy(), rm, rtol=1e-12)


@pytest.mark.parametrize("state_stype", ["row_sparse", "default"])
def test_adam_update_rsp_weight(state_stype):
    mean0, var0 = np.full(W.shape, 0.1), np.full(W.shape, 0.2)
    mean = mx.nd.array(mean0, dtype=W.dtype).tostype(state_stype)
    var = mx.nd.array(var0, dtype=W.dtype).tostype(state_stype)
    w = _rsp(W)
    mx.nd.adam_update(w, _grad(), mean, var, lr=0.1, wd=0.01, out=w)
    rows = ROWS if state_stype == "row_sparse" else [0, 1, 2, 3]
    ref, rm, rv = W.copy(), mean0.copy(), var0.copy()
    g = G[rows] + 0.01 * W[rows]
    rm[rows] = 0.9 * mean0[rows] + 0.1 * g
    rv[rows] = 0.999 * var0[rows] + 0.001 * g * g
    ref[rows] = W[rows] - 0.1 * rm[rows] / (np.sqrt(rv[rows]) + 1e-8)
    np.testing.assert_allclose(w.asnumpy(), ref, rtol=1e-10)
    np.testing.assert_allclose(mean.asnumpy(), rm, rtol=1e-12)
    np.testing.assert_allclose(var.asnumpy(), rv, rtol=1e-12)


def test_adagrad_and_ftrl_rsp_weight_lazy():
    h0 = np.full(W.shape, 0.3)
    w, h = _rsp(W), _rsp(h0.copy())
    mx.nd.adagrad_update(w, _grad(), h, lr=0.1, out=w)
    ref, rh = W.copy(), h0.copy()
    rh[ROWS] += G[ROWS] ** 2
    ref[ROWS] = W[ROWS] - 0.1 * G[ROWS] / np.sqrt(rh[ROWS] + 1e-7)
    np.testing.assert_allclose(w.asnumpy(), ref, rtol=1e-12)
    np.testing.assert_allclose(h.asnumpy(), rh, rtol=1e-12)
    w, z, n = _rsp(W), _rsp(np.zeros(W.shape)), _rsp(np.full(W.shape, 0.5))
    mx.nd.ftrl_update(w, _grad(), z, n, lr=0.1, lazy_update=False, out=w)
    got = w.asnumpy()
    np.testing.assert_array_equal(got[[1, 3]], W[[1, 3]])  # always lazy with a row_sparse weight
    assert not np.allclose(got[ROWS], W[ROWS])


def test_rsp_weight_refusals():
    missing = mx.nd.sparse.row_sparse_array((W[:1], [1]), shape=W.shape, dtype=W.dtype)
    with pytest.raises(mx.base.MXNetError, match="all of its rows"):  # dense states: MXNet's rule
        mx.nd.sgd_mom_update(missing, _grad(), mx.nd.zeros(W.shape, dtype=W.dtype), lr=0.1, out=missing)
    # without states (or with row_sparse ones) a weight missing rows is a hashed table (issue 18):
    # its other rows are zero, and it comes out storing its rows and the gradient's
    mx.nd.sgd_update(missing, _grad(), lr=0.1, out=missing)
    ref = np.zeros(W.shape)
    ref[1] = W[0]
    ref[ROWS] -= 0.1 * G[ROWS]
    np.testing.assert_allclose(missing.asnumpy(), ref, rtol=1e-12)
    assert missing.indices.asnumpy().tolist() == [0, 1, 2]
    with pytest.raises(mx.base.MXNetError, match="row_sparse states"):  # MXNet's sparse adagrad: no fallback
        mx.nd.adagrad_update(_rsp(W), _grad(), mx.nd.zeros(W.shape, dtype=W.dtype), lr=0.1)
    with pytest.raises(mx.base.MXNetError, match="share one storage type"):  # MXNet's check of the states
        mx.nd.adam_update(_rsp(W), _grad(), _rsp(np.zeros(W.shape)), mx.nd.zeros(W.shape, dtype=W.dtype), lr=0.1)


def test_rsp_weight_storage_fallbacks():
    """Where MXNet 1.9.1 has no sparse kernel it falls back to dense storage: a row_sparse
    weight with a dense gradient, and the dense-only updates (their states updated too)."""
    so.dispatch._warned.clear()  # the warning comes once per signature: forget earlier ones
    with pytest.warns(so.StorageFallbackWarning, match="sgd_update"):
        out = mx.nd.sgd_update(_rsp(W), mx.nd.array(G, dtype=G.dtype), lr=0.1)
    np.testing.assert_allclose(out.asnumpy(), W - 0.1 * G, rtol=1e-12)
    n = mx.nd.zeros(W.shape, dtype=W.dtype)
    w = _rsp(W)
    with pytest.warns(so.StorageFallbackWarning, match="rmsprop_update"):
        mx.nd.rmsprop_update(w, _grad(), n, lr=0.1, gamma1=0.9, out=w)
    g = _grad().asnumpy()
    n_ref = 0.1 * g * g
    assert w.stype == "row_sparse"
    np.testing.assert_allclose(n.asnumpy(), n_ref, rtol=1e-12)
    np.testing.assert_allclose(w.asnumpy(), W - 0.1 * g / np.sqrt(n_ref + 1e-8), rtol=1e-12)


def test_rsp_weight_float32_numba_path():
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((600, 4)).astype(np.float32)
    rows = np.sort(rng.choice(600, 300, replace=False))
    gv = rng.standard_normal((300, 4)).astype(np.float32)
    w = mx.nd.array(w0).tostype("row_sparse")
    g = mx.nd.sparse.row_sparse_array((gv, rows), shape=w0.shape)
    mx.nd.sgd_update(w, g, lr=0.1, out=w)
    ref = w0.copy()
    ref[rows] = w0[rows] - np.float32(0.1) * gv
    np.testing.assert_allclose(w.asnumpy(), ref, rtol=1e-6, atol=1e-7)


# ---- check_format() on the compat constructors' unchecked arrays ----------------------------------
BAD_CSR = [([0, 2, 1], [0, 5, 2, 3]), ([2, 1, 1], [0, 2, 2, 3]), ([1, 2, 1], [0, 2, 2, 4]), ([0, 2, 1], [0, -2, 2, 3]),
           ([0, 9, 1], [0, 2, 2, 3])]
BAD_RSP = [[1, 4], [1, 0], [1, -2], [1, 1]]


def _bad_csr(k):
    indices, indptr = BAD_CSR[k]
    return mx.nd.sparse.csr_matrix(([7, 8, 9], indices, indptr), shape=(3, 4))


def _bad_rsp(k):
    return mx.nd.sparse.row_sparse_array(([[1, 2], [3, 4]], BAD_RSP[k]), shape=(3, 2))


@pytest.mark.parametrize("k", range(len(BAD_CSR)))
def test_csr_built_unchecked_check_format_raises(k):
    a = _bad_csr(k)  # MXNet builds it; check_format() tells
    with pytest.raises(mx.base.MXNetError):
        a.check_format()
    with pytest.raises(mx.base.MXNetError):  # and it never reaches a kernel
        a.check_format()


@pytest.mark.parametrize("k", range(len(BAD_RSP)))
def test_rsp_built_unchecked_check_format_raises(k):
    with pytest.raises(mx.base.MXNetError):
        _bad_rsp(k).check_format()


USES = {
    "shape": lambda a: a.shape,
    "asnumpy": lambda a: a.asnumpy(),
    "tostype": lambda a: a.tostype("default"),
    "add": lambda a: a + a,
    "square": lambda a: mx.nd.square(a),
    "sum": lambda a: mx.nd.sum(a),
    "copy": lambda a: a.copy().asnumpy(),  # a copy stays unchecked: refused on its first use
    "dot": lambda a: mx.nd.dot(a, mx.nd.ones((a.shape[1], 2))),
}


@pytest.mark.parametrize("use", sorted(USES))
@pytest.mark.parametrize("make", [lambda: _bad_csr(0), lambda: _bad_csr(4), lambda: _bad_rsp(0), lambda: _bad_rsp(1)])
def test_unchecked_bad_array_refused_on_first_use(use, make):
    a = make()
    with pytest.raises(mx.base.MXNetError, match="first use"):
        USES[use](a)


def test_unchecked_good_array_validated_once_and_usable():
    a = mx.nd.sparse.csr_matrix(([7, 8, 9], [0, 2, 1], [0, 2, 2, 3]), shape=(3, 4))
    a.check_format()
    np.testing.assert_array_equal(a.asnumpy(), [[7, 0, 8, 0], [0, 0, 0, 0], [0, 9, 0, 0]])
    r = mx.nd.sparse.row_sparse_array(([[1, 2], [3, 4]], [0, 2]), shape=(3, 2))
    assert r.stype == "row_sparse" and r.shape == (3, 2)
    np.testing.assert_array_equal((r + r).asnumpy(), [[2, 4], [0, 0], [6, 8]])
    assert repr(mx.nd.sparse.csr_matrix(([7, 8, 9], [0, 2, 1], [0, 5, 2, 3]), shape=(3, 4)))  # repr never raises


def test_native_constructors_still_check_at_once():
    import sparse_ops as so

    with pytest.raises(so.errors.SparseFormatError):
        so.csr_matrix((np.array([7.0, 8, 9]), np.array([0, 2, 1]), np.array([0, 5, 2, 3])), shape=(3, 4))
    with pytest.raises(so.errors.SparseFormatError):
        so.row_sparse_array((np.ones((2, 2)), np.array([1, 4])), shape=(3, 2))


# ---- Convolution -----------------------------------------------------------------------------------
def _conv_ref(x, w, stride, pad, dilate, groups):
    """Direct NumPy cross-correlation (float64), 2-d NCHW."""
    x = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
    n, c, h, wd = x.shape
    f, cg, kh, kw = w.shape
    oh = (h - dilate[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd - dilate[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, f, oh, ow))
    fg = f // groups
    for o in range(f):
        g = o // fg
        for a in range(oh):
            for b in range(ow):
                patch = x[:, g * cg:(g + 1) * cg, a * stride[0]:a * stride[0] + dilate[0] * (kh - 1) + 1:dilate[0],
                          b * stride[1]:b * stride[1] + dilate[1] * (kw - 1) + 1:dilate[1]]
                out[:, o, a, b] = np.sum(patch * w[o], axis=(1, 2, 3))
    return out


CONV_CASES = [((2, 3, 7, 6), (4, 3, 3, 2), dict(kernel=(3, 2), num_filter=4)),
              ((1, 4, 8, 8), (6, 2, 3, 3), dict(kernel=(3, 3), num_filter=6, num_group=2, stride=(2, 2), pad=(1, 1))),
              ((2, 2, 9, 9), (2, 2, 2, 3), dict(kernel=(2, 3), num_filter=2, dilate=(2, 2), pad=(0, 1), stride=(1, 2)))]


@pytest.mark.parametrize("dshape,wshape,params", CONV_CASES)
@pytest.mark.parametrize("bias", [False, True])
def test_convolution_2d_values(dshape, wshape, params, bias):
    rng = np.random.default_rng(3)
    x, w, b = rng.standard_normal(dshape), rng.standard_normal(wshape), rng.standard_normal(wshape[0])
    p = dict(params)
    ref = _conv_ref(x, w, p.get("stride", (1, 1)), p.get("pad", (0, 0)), p.get("dilate", (1, 1)), p.get("num_group", 1))
    args = [mx.nd.array(x, dtype="float64"), mx.nd.array(w, dtype="float64")]
    if bias:
        args.append(mx.nd.array(b, dtype="float64"))
        ref = ref + b.reshape(1, -1, 1, 1)
    y = mx.nd.Convolution(*args, no_bias=not bias, **p)
    assert y.stype == "default" and y.shape == ref.shape
    np.testing.assert_allclose(y.asnumpy(), ref, rtol=1e-10, atol=1e-12)


def test_convolution_1d_matches_numpy_correlate():
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((2, 3, 11)), rng.standard_normal((2, 3, 3))
    y = mx.nd.Convolution(mx.nd.array(x, dtype="float64"), mx.nd.array(w, dtype="float64"), kernel=(3,),
                          num_filter=2, no_bias=True, stride=(2,), pad=(1,))
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1)))
    ref = np.stack([[sum(np.correlate(xp[n, c], w[f, c], mode="valid") for c in range(3))[::2] for f in range(2)]
                    for n in range(2)])
    np.testing.assert_allclose(y.asnumpy(), ref, rtol=1e-10, atol=1e-12)


def test_convolution_gradients_match_finite_differences():
    rng = np.random.default_rng(5)
    x0, w0, b0 = rng.standard_normal((1, 2, 5, 5)), rng.standard_normal((2, 1, 3, 3)), rng.standard_normal(2)
    head = rng.standard_normal((1, 2, 3, 3))
    p = dict(kernel=(3, 3), num_filter=2, num_group=2, stride=(2, 2), pad=(1, 1))
    x, w, b = (mx.nd.array(v, dtype="float64") for v in (x0, w0, b0))
    for v in (x, w, b):
        v.attach_grad()
    with mx.autograd.record():
        y = mx.nd.Convolution(x, w, b, **p)
    y.backward(mx.nd.array(head, dtype="float64"))

    def loss(xv, wv, bv):
        return float(np.sum((_conv_ref(xv, wv, (2, 2), (1, 1), (1, 1), 2) + bv.reshape(1, -1, 1, 1)) * head))

    eps = 1e-6
    for k, (arr, got) in enumerate(((x0, x.grad), (w0, w.grad), (b0, b.grad))):
        num = np.zeros(arr.size)
        for e in range(arr.size):
            vals = [x0, w0, b0]
            plus, minus = arr.copy().ravel(), arr.copy().ravel()
            plus[e] += eps
            minus[e] -= eps
            vals[k] = plus.reshape(arr.shape)
            lp = loss(*vals)
            vals[k] = minus.reshape(arr.shape)
            num[e] = (lp - loss(*vals)) / (2 * eps)
        np.testing.assert_allclose(got.asnumpy().ravel(), num, rtol=1e-6, atol=1e-8)


def test_convolution_refusals():
    x, w = mx.nd.ones((1, 3, 5, 5)), mx.nd.ones((2, 3, 3, 3))
    with pytest.raises(mx.base.MXNetError, match="weight must have shape"):
        mx.nd.Convolution(x, mx.nd.ones((2, 2, 3, 3)), kernel=(3, 3), num_filter=2, no_bias=True)
    with pytest.raises(mx.base.MXNetError, match="bias"):
        mx.nd.Convolution(x, w, mx.nd.ones((3,)), kernel=(3, 3), num_filter=2)
    with pytest.raises(mx.base.MXNetError, match="4-d data"):
        mx.nd.Convolution(mx.nd.ones((3, 5, 5)), w, kernel=(3, 3), num_filter=2, no_bias=True)
    with pytest.raises(mx.base.MXNetError, match="does not fit"):
        mx.nd.Convolution(mx.nd.ones((1, 3, 2, 2)), w, kernel=(3, 3), num_filter=2, no_bias=True)
    with pytest.raises(mx.base.MXNetError, match="multiple of num_group"):
        mx.nd.Convolution(x, w, kernel=(3, 3), num_filter=3, num_group=2, no_bias=True)
    with pytest.raises(mx.base.MXNetError, match="layout"):
        mx.nd.Convolution(x, w, kernel=(3, 3), num_filter=2, no_bias=True, layout="NHWC")


def test_convolution_then_sparse_ops_as_mxnet_test_mkldnn_sparse():
    arr = mx.nd.random.uniform(shape=(4, 3, 8, 8))
    w1 = mx.nd.random.uniform(shape=(3, 3, 3, 3))
    arr = mx.nd.Convolution(data=arr, weight=w1, no_bias=True, kernel=(3, 3), num_filter=3)
    rs = mx.nd.sparse.row_sparse_array((mx.nd.zeros_like(arr), np.arange(arr.shape[0])))
    w2 = mx.nd.random.uniform(shape=(5, int(np.prod(arr.shape[1:]))))
    fc = mx.nd.FullyConnected(data=arr, weight=w2, no_bias=True, num_hidden=5)
    diff = mx.nd.elemwise_sub(arr, rs)
    np.testing.assert_allclose(np.dot(mx.nd.flatten(diff).asnumpy(), w2.asnumpy().T), fc.asnumpy(), rtol=1e-5)


# ---- sparse indexing keys, as MXNet 1.9.1's sparse.py takes them -----------------------------------------
def test_csr_full_slice_is_the_array_itself_and_other_keys_are_refused_with_value_errors():
    c = mx.nd.array([[0, 1.], [2, 0]]).tostype("csr")
    v = c[:]
    assert v is c
    v *= 3
    np.testing.assert_array_equal(c.asnumpy(), [[0, 3], [6, 0]])
    np.testing.assert_array_equal(c[1].asnumpy(), [[6, 0]])
    np.testing.assert_array_equal(c[0:1].asnumpy(), [[0, 3]])
    for key, text in (((0, 1), "multi-dimension"), (slice(None, None, 1), "continuous slicing")):
        with pytest.raises(mx.base.MXNetError, match=text) as info:
            c[key]
        assert isinstance(info.value, ValueError)
    for x in (c, c.tostype("row_sparse")):
        with pytest.raises(ValueError, match="Assignment with slice"):
            x[1:2] = mx.nd.ones((1, 2))
        np.testing.assert_array_equal(x.asnumpy(), [[0, 3], [6, 0]])  # nothing written


def test_bools_are_numbers_in_arithmetic():
    x = mx.nd.array([1., 2.])
    np.testing.assert_array_equal((x * True).asnumpy(), [1, 2])
    np.testing.assert_array_equal((x + np.bool_(True)).asnumpy(), [2, 3])


def test_broadcast_mul_and_div_of_a_csr_by_a_dense_array_keep_the_csr():
    """MXNet 1.9.1's BinaryBroadcastCsrDnsCsrImpl: only the stored values are computed, so
    a 0, inf or NaN where the csr stores nothing does not reach the result."""
    c = mx.nd.array([[0, 2., 0], [4, 0, 1]]).tostype("csr")
    r = mx.nd.broadcast_div(c, mx.nd.array([[1, 0, 2.]]))
    assert r.stype == "csr"
    np.testing.assert_array_equal(r.asnumpy(), [[0, np.inf, 0], [4, 0, 0.5]])
    r = mx.nd.broadcast_div(c, mx.nd.array([[0.], [2]]))
    np.testing.assert_array_equal(r.asnumpy(), [[0, np.inf, 0], [2, 0, 0.5]])
    r = mx.nd.broadcast_mul(c, mx.nd.array([[np.inf, 2, np.nan]]))
    assert r.stype == "csr"
    np.testing.assert_array_equal(r.asnumpy(), [[0, 4, 0], [np.inf, 0, np.nan]])
    assert mx.nd.sparse.multiply(c, mx.nd.array([[1, 2, 3.]])).stype == "csr"
    assert mx.nd.broadcast_mul(c, mx.nd.ones((2, 3))).stype == "csr"


@pytest.mark.parametrize("dtype", ["float16", "float64"])
def test_embedding_takes_the_weights_dtype(dtype):
    """MXNet 1.9.1's EmbeddingOpType: the weight's dtype decides, the dtype parameter does not."""
    w = mx.nd.array(np.arange(8).reshape(4, 2), dtype=dtype)
    for y in (mx.nd.Embedding(mx.nd.array([1, 3]), w, input_dim=4, output_dim=2),
              mx.nd.Embedding(data=mx.nd.array([1, 3]), weight=w, input_dim=4, output_dim=2, dtype="float32"),
              mx.nd.contrib.SparseEmbedding(mx.nd.array([1, 3]), w, input_dim=4, output_dim=2)):
        assert y.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(y.asnumpy(), [[2, 3], [6, 7]])


def test_modulo_and_logical_functions():
    """MXNet 1.9.1's ``%``/``%=``/``modulo`` (Python's sign rule: the divisor's) and
    ``logical_and``/``or``/``xor``, each with arrays and scalars on either side."""
    v = np.array([5., -3., 7.], np.float32)
    x = mx.nd.array(v)
    np.testing.assert_array_equal((x % 2).asnumpy(), np.mod(v, 2))
    np.testing.assert_array_equal((7 % mx.nd.array([2., 3, -4])).asnumpy(), np.mod(7, [2., 3, -4]))
    np.testing.assert_array_equal(mx.nd.modulo(x, mx.nd.array([2., -2, 4])).asnumpy(), np.mod(v, [2., -2, 4]))
    y = mx.nd.array(v)
    y %= 3
    np.testing.assert_array_equal(y.asnumpy(), np.mod(v, 3))
    assert mx.nd.modulo(7, 3) == 1
    w = mx.nd.array([0., 1, 2])
    np.testing.assert_array_equal(mx.nd.logical_and(x, mx.nd.array([0., 1, 1])).asnumpy(), [0, 1, 1])
    np.testing.assert_array_equal(mx.nd.logical_or(w, 0).asnumpy(), [0, 1, 1])
    np.testing.assert_array_equal(mx.nd.logical_xor(1, w).asnumpy(), [1, 0, 0])
    assert mx.nd.logical_and(w, 1).dtype == np.float32


def test_a_dense_arrays_arithmetic_with_a_sparse_array_is_dense():
    """A dense NDArray's ``+ - * /`` is MXNet's broadcast_* (a dense result); a sparse array's
    own operators keep its storage type for equal shapes."""
    d = mx.nd.array(np.arange(1, 7, dtype=np.float32).reshape(2, 3))
    c = mx.nd.array([[0, 2., 0], [1, 0, 0]]).tostype("csr")
    with pytest.warns(so.StorageFallbackWarning):
        for y, ref in ((d * c, d.asnumpy() * c.asnumpy()), (d * c.tostype("row_sparse"), d.asnumpy() * c.asnumpy()),
                       (d + c, d.asnumpy() + c.asnumpy()), (d - c, d.asnumpy() - c.asnumpy())):
            assert y.stype == "default"
            np.testing.assert_array_equal(y.asnumpy(), ref)
    assert (c * d).stype == "csr"


def test_upstream_operator_corners():
    """Cases of MXNet 1.9.1's test_operator.py: broadcast_like of another dtype (rhs gives
    only its shape), one_hot of depth 0, reshape_like over ranges of axes, softsign
    Activation, and a copyto shape mismatch refused as an MXNetError."""
    z = mx.nd.broadcast_like(mx.nd.zeros((2, 1)), mx.nd.ones((2, 2)).astype("int32"))
    assert z.dtype == np.float32 and z.shape == (2, 2)
    h = mx.nd.one_hot(mx.nd.array([1, 2]), 0)
    assert h.shape == (2, 0)
    r = mx.nd.reshape_like(mx.nd.array(np.arange(360.).reshape(30, 12)), mx.nd.zeros((4, 2, 2, 3)),
                           lhs_begin=-1, rhs_begin=1)
    assert r.shape == (30, 2, 2, 3)
    np.testing.assert_array_equal(r.asnumpy().ravel(), np.arange(360.))
    assert mx.nd.reshape_like(mx.nd.zeros((30, 7)), mx.nd.zeros((15, 2, 4)), lhs_end=1, rhs_end=2).shape == (15, 2, 7)
    with pytest.raises(mx.base.MXNetError, match="lhs_begin=2"):
        mx.nd.reshape_like(mx.nd.zeros((30, 12)), mx.nd.zeros((4, 2, 2, 3)), lhs_begin=2)
    v = np.array([1., -3., 0.], np.float32)
    np.testing.assert_allclose(mx.nd.Activation(mx.nd.array(v), act_type="softsign").asnumpy(), v / (1 + np.abs(v)))
    with pytest.raises(mx.base.MXNetError, match="shape mismatch"):
        mx.nd.ones((2, 3)).copyto(mx.nd.zeros((3, 2)))


def test_exponential_refuses_a_negative_scale_in_its_own_terms():
    """The face's scale, not the op's rate lam (which the user never passed)."""
    with pytest.raises(mx.base.MXNetError, match=r"exponential\(\): scale must be non-negative, got -1"):
        mx.nd.random.exponential(scale=-1)
    np.testing.assert_array_equal(mx.nd.random.exponential(scale=0, shape=(3,)).asnumpy(), 0)


# ---- MXNet's wider unit tests: dtype='uint8' parameters, legacy names, argument errors --------------------
def test_an_ops_dtype_parameter_takes_uint8_and_int8_as_mxnet_does():
    """``cast``, ``one_hot``, ``topk`` (its indices), ``argsort`` and ``random.multinomial``
    take MXNet's narrow integer dtypes: the values as NumPy's cast makes them."""
    x = mx.nd.array([300.0, 1.7, -3.2])
    got = mx.nd.cast(x, dtype="uint8")
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got.asnumpy(), np.array([300, 1, -3]).astype(np.uint8))
    hot = mx.nd.one_hot(mx.nd.array([0, 2]), 3, dtype="int8")
    assert hot.dtype == np.int8 and hot.asnumpy().tolist() == [[1, 0, 0], [0, 0, 1]]
    data = np.array([[1.0, 3.0, 2.0], [9.0, 7.0, 8.0]])
    values, indices = mx.nd.topk(mx.nd.array(data), k=2, ret_typ="both", dtype="uint8")
    assert values.dtype == np.float32 and indices.dtype == np.uint8
    np.testing.assert_array_equal(indices.asnumpy(), np.argsort(-data, axis=1)[:, :2])
    np.testing.assert_array_equal(values.asnumpy(), -np.sort(-data, axis=1)[:, :2])
    order = mx.nd.argsort(mx.nd.array([3.0, 1.0, 2.0]), dtype="uint8")
    assert order.dtype == np.uint8 and order.asnumpy().tolist() == [1, 2, 0]
    out = mx.nd.zeros((3,), dtype="uint8")
    mx.nd.cast(mx.nd.array([4.0, 5.0, 6.0]), dtype="uint8", out=out)
    assert out.asnumpy().tolist() == [4, 5, 6]
    mx.random.seed(3)
    ids = mx.nd.random.multinomial(mx.nd.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]), shape=4, dtype="uint8")
    assert ids.dtype == np.uint8 and ids.asnumpy().tolist() == [[1] * 4, [2] * 4]


def test_an_unknown_keyword_is_an_argument_error():
    """MXNet's generated functions refuse an unknown keyword as a wrong argument (a TypeError
    here: ``MXNetArgumentError``), naming it and the parameters."""
    for call, name in ((lambda: mx.nd.topk(mx.nd.array([1.0, 2.0]), bogus=1), "topk"),
                       (lambda: mx.nd.softmax(mx.nd.array([1.0, 2.0]), lengths=3), "softmax")):
        with pytest.raises(mx.base.MXNetArgumentError, match=rf"{name}\(\) got unexpected argument\(s\) '"):
            call()
    assert issubclass(mx.base.MXNetArgumentError, TypeError)


def test_the_legacy_sampler_names_take_the_raw_parameters():
    """``mx.nd.random_exponential(lam)`` (a rate, as MXNet's registered operator), and the
    other legacy ``random_*`` names, ctx before dtype by position; their means against the
    distributions' (fixed seed, 40,000 draws)."""
    mx.random.seed(0)
    n = 40_000
    cases = [(mx.nd.random_exponential(lam=4, shape=(n,)), 0.25),
             (mx.nd.random_gamma(2, 3, (n,), mx.cpu(), "float64"), 6.0),
             (mx.nd.random_poisson(lam=3, shape=(n,)), 3.0),
             (mx.nd.random_negative_binomial(k=3, p=0.5, shape=(n,)), 3.0),
             (mx.nd.random_generalized_negative_binomial(mu=2, alpha=0.5, shape=(n,)), 2.0),
             (mx.nd.random_randint(0, 5, shape=(n,)), 2.0)]
    for draws, mean in cases:
        assert draws.shape == (n,)
        assert abs(draws.asnumpy().mean() - mean) < 0.05 * mean
    assert cases[1][0].dtype == np.float64
    assert mx.nd.random.gamma(2, 3, (2, 2)).shape == (2, 2)  # shape by position (it was dropped)
    with pytest.raises(mx.base.MXNetArgumentError, match=r"gamma\(\) takes at most 5 positional arguments"):
        mx.nd.random.gamma(1, 1, (2,), "float32", mx.cpu(), 5)


def test_context_type_codes_and_the_operator_list():
    assert mx.Context.devtype2str[mx.cpu().device_typeid] == "cpu"
    assert mx.Context.devstr2type["gpu"] == 2 and mx.gpu(1).device_typeid == 2
    ops = mx.operator.get_all_registered_operators()
    assert {"Activation", "Custom", "random_gamma", "dot", "sgd_update"} <= set(ops)


def test_batch_take_picks_one_value_per_row_clipped_and_differentiates():
    data = np.arange(12.0).reshape(3, 4)
    ids = np.array([1, 5, -2])
    a = mx.nd.array(data)
    a.attach_grad()
    with mx.autograd.record():
        got = mx.nd.batch_take(a, mx.nd.array(ids, dtype="int32"))
    got.backward()
    rows, cols = np.arange(3), np.clip(ids, 0, 3)
    np.testing.assert_array_equal(got.asnumpy(), data[rows, cols])
    expected = np.zeros_like(data)
    expected[rows, cols] = 1
    np.testing.assert_array_equal(a.grad.asnumpy(), expected)
    with pytest.raises(mx.base.MXNetValueError, match="batch_take: a must be 2-d"):
        mx.nd.batch_take(mx.nd.ones((2, 2, 2)), mx.nd.array([0, 1]))


def test_gather_nd_reads_wraps_refuses_and_differentiates():
    x = np.arange(24.0).reshape(2, 3, 4)
    data = mx.nd.array(x)
    data.attach_grad()
    idx = np.array([[[1, 0], [0, -1]], [[2, 0], [-2, 1]]])
    with mx.autograd.record():
        got = mx.nd.gather_nd(data, mx.nd.array(idx))
    got.backward()
    assert got.shape == (2, 2, 4)
    np.testing.assert_array_equal(got.asnumpy(), x[tuple(idx)])  # negative indices count from the end
    expected = np.zeros_like(x)
    np.add.at(expected, tuple(idx), 1.0)
    np.testing.assert_array_equal(data.grad.asnumpy(), expected)
    np.testing.assert_array_equal(mx.nd.gather_nd(data, mx.nd.array([1, 2])).asnumpy(), x[1, 2])
    for bad, message in (([[0, 1], [0, 3]], "index 3 is out of bounds for axis 1 with size 3"),
                         ([[0, 1], [0, -4]], "index -4 is out of bounds for axis 1 with size 3")):
        with pytest.raises(IndexError, match=message):
            mx.nd.gather_nd(data, mx.nd.array(bad))
    with pytest.raises(IndexError, match="gather_nd: indices must be finite"):
        mx.nd.gather_nd(data, mx.nd.array([[0.0, np.nan]]))


def test_boolean_mask_keeps_the_marked_slices_and_their_gradient():
    x = np.arange(1.0, 10.0).reshape(3, 3)
    for mask, axis in (([0, 1, 1], 0), ([1, 0, 1], 1), ([0, 0, 0], 0)):
        data = mx.nd.array(x)
        data.attach_grad()
        with mx.autograd.record():
            got = mx.nd.contrib.boolean_mask(data, mx.nd.array(mask), axis=axis)
        got.backward()
        keep = np.flatnonzero(mask)
        np.testing.assert_array_equal(got.asnumpy(), np.take(x, keep, axis=axis))
        expected = np.zeros_like(x)
        if axis == 0:
            expected[keep] = 1
        else:
            expected[:, keep] = 1
        np.testing.assert_array_equal(data.grad.asnumpy(), expected)
    with pytest.raises(mx.base.MXNetArgumentError, match="boolean_mask: index must be 1-d"):
        mx.nd.contrib.boolean_mask(mx.nd.array(x), mx.nd.array([1, 0]))


def test_index_copy_fills_rows_and_splits_the_gradient():
    old = np.arange(15.0).reshape(5, 3)
    new = -np.arange(1.0, 7.0).reshape(2, 3)
    a, b = mx.nd.array(old), mx.nd.array(new)
    a.attach_grad()
    b.attach_grad()
    head = np.arange(15.0).reshape(5, 3) + 1
    with mx.autograd.record():
        got = mx.nd.contrib.index_copy(a, mx.nd.array([4, 1], dtype="int64"), b)
    got.backward(mx.nd.array(head))
    expected = old.copy()
    expected[[4, 1]] = new
    np.testing.assert_array_equal(got.asnumpy(), expected)
    kept = head.copy()
    kept[[4, 1]] = 0
    np.testing.assert_array_equal(a.grad.asnumpy(), kept)
    np.testing.assert_array_equal(b.grad.asnumpy(), head[[4, 1]])
    for rows in ([4, 4], [5, 0]):
        with pytest.raises(mx.base.MXNetArgumentError, match=r"index_copy: index_vector must hold distinct rows"):
            mx.nd.contrib.index_copy(a, mx.nd.array(rows), b)


def test_util_environment_access_and_the_data_dir(monkeypatch):
    monkeypatch.delenv("SPARSE_OPS_TEST_MX_VAR", raising=False)
    assert mx.util.getenv("SPARSE_OPS_TEST_MX_VAR") is None
    mx.util.setenv("SPARSE_OPS_TEST_MX_VAR", "42")
    assert mx.util.getenv("SPARSE_OPS_TEST_MX_VAR") == "42"
    mx.util.setenv("SPARSE_OPS_TEST_MX_VAR", None)
    assert "SPARSE_OPS_TEST_MX_VAR" not in __import__("os").environ
    monkeypatch.setenv("MXNET_HOME", "/tmp/mxnet_data")
    assert mx.base.data_dir() == "/tmp/mxnet_data"
    monkeypatch.delenv("MXNET_HOME")
    assert mx.base.data_dir().endswith(".mxnet")
