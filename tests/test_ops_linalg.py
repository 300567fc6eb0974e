"""dot (every storage pair x transpose flags, output storage types, dispatch, dtypes, edge
shapes, gradients) and FullyConnected, against NumPy references."""
import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import sparse_ops as so
from conftest import csr_parts, row_sparse_parts
from conftest import make as make_container
from sparse_ops.dispatch import InferenceError
from sparse_ops.registry import ParameterError
from sparse_ops.sdk.testing import check_gradient

pytestmark = pytest.mark.filterwarnings("ignore::sparse_ops.StorageFallbackWarning")

STYPES = ["default", "row_sparse", "csr"]
FLAGS = list(itertools.product([False, True], [False, True]))
# storage pairs that have a storage-aware kernel (others densify)
KERNEL_PAIRS = {("csr", "default"), ("csr", "row_sparse"), ("default", "csr"),
                ("row_sparse", "default"), ("default", "row_sparse"), ("csr", "csr")}


def expected_stype(lhs: str, rhs: str, ta: bool, tb: bool) -> str:
    """dot's output storage types: MXNet 1.9's, plus csr @ csr -> csr (SpGEMM)."""
    if lhs == "csr" and rhs == "csr":
        return "csr"
    if lhs == "csr" and rhs in ("default", "row_sparse") and ta and not tb:
        return "row_sparse"
    if lhs == "default" and rhs == "csr" and not ta:
        return "csr"
    return "default"


def sparse_dense(rng, shape, dtype, density=0.3, empty_rows=0.3):
    """Small integers (exact in every dtype) with zeros and some all-zero rows."""
    values = rng.integers(1, 6, size=shape) * rng.choice([-1, 1], size=shape)
    values = values * (rng.random(shape) < density)
    if len(shape) == 2 and shape[0]:
        values[rng.random(shape[0]) < empty_rows] = 0
    return values.astype(dtype)


# numba compiles one specialisation per (value dtype, index dtype) pair of each kernel. The
# suite keeps to three pairs (float16 and int32 values are widened to float32 and int64 by
# the op) so that a run with a cold numba cache stays short; both index dtypes are covered.
INDEX_FOR = {"float16": "int32", "float32": "int32", "float64": "int64", "int32": "int32", "int64": "int32"}


def make(dense: np.ndarray, stype: str, index_dtype=None):
    return make_container(dense, stype, index_dtype or INDEX_FOR[dense.dtype.name])


def reference(a, b, ta, tb):
    a = a.astype(np.float64).T if ta else a.astype(np.float64)
    b = b.astype(np.float64)
    return a @ (b.T if tb and b.ndim == 2 else b)


def operand_shapes(m, k, n, ta, tb):
    return ((k, m) if ta else (m, k)), ((n, k) if tb else (k, n))


def check_dot(lhs_dense, rhs_dense, lhs_stype, rhs_stype, ta, tb, index_dtype=None, **params):
    lhs, rhs = make(lhs_dense, lhs_stype, index_dtype), make(rhs_dense, rhs_stype, index_dtype)
    out = so.dot(lhs, rhs, transpose_a=ta, transpose_b=tb, **params)
    want = reference(lhs_dense, rhs_dense, ta, tb)
    assert out.shape == want.shape and out.dtype == lhs_dense.dtype
    np.testing.assert_array_equal(out.asnumpy(), want.astype(lhs_dense.dtype))
    if out.stype != "default":
        out.check_format(full_check=True)
    return lhs, rhs, out


# ---- every storage combination x transpose flags ----------------------------------------------------
@pytest.mark.parametrize("ta,tb", FLAGS)
@pytest.mark.parametrize("lhs_stype,rhs_stype", list(itertools.product(STYPES, STYPES)))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_dot_every_storage_pair(lhs_stype, rhs_stype, ta, tb, dtype):
    rng = np.random.default_rng(7)
    sa, sb = operand_shapes(6, 5, 4, ta, tb)
    a, b = sparse_dense(rng, sa, dtype), sparse_dense(rng, sb, dtype)
    lhs, rhs, out = check_dot(a, b, lhs_stype, rhs_stype, ta, tb)
    assert out.stype == expected_stype(lhs_stype, rhs_stype, ta, tb)
    mode = so.explain("dot", lhs, rhs, transpose_a=ta, transpose_b=tb)["dispatch_mode"]
    if (lhs_stype, rhs_stype) == ("default", "default"):
        assert mode == "fcompute"
    elif (lhs_stype, rhs_stype) in KERNEL_PAIRS:
        assert mode == "fcompute_ex"
    else:
        assert mode == "fallback"


@pytest.mark.parametrize("ta,tb", FLAGS)
@pytest.mark.parametrize("pair", sorted(KERNEL_PAIRS))
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "int64"])
def test_dot_kernels_every_dtype(pair, ta, tb, dtype):
    rng = np.random.default_rng(3)
    sa, sb = operand_shapes(9, 7, 5, ta, tb)
    a, b = sparse_dense(rng, sa, dtype, 0.4), sparse_dense(rng, sb, dtype, 0.4)
    _, _, out = check_dot(a, b, *pair, ta, tb)
    if out.stype != "default":  # the index dtype of the sparse input is kept
        assert out._indices.dtype == np.dtype(INDEX_FOR[dtype])
        if out.stype == "csr":
            assert out._indptr.dtype == np.dtype(INDEX_FOR[dtype])


def test_int32_wraps_around_like_numpy():
    a = np.full((2, 3), 2**20, dtype=np.int32)
    b = np.full((3, 2), 2**12, dtype=np.int32)
    for pair in KERNEL_PAIRS:
        out = so.dot(make(a, pair[0]), make(b, pair[1]))
        np.testing.assert_array_equal(out.asnumpy(), a @ b)


@given(seed=st.integers(0, 2**16), m=st.integers(0, 8), k=st.integers(0, 8), n=st.integers(0, 8),
       ta=st.booleans(), tb=st.booleans(), pair=st.sampled_from(sorted(KERNEL_PAIRS)),
       density=st.sampled_from([0.0, 0.2, 1.0]))
def test_dot_random_shapes(seed, m, k, n, ta, tb, pair, density):
    """Any side may be 0 and nnz may be 0."""
    rng = np.random.default_rng(seed)
    sa, sb = operand_shapes(m, k, n, ta, tb)
    a, b = sparse_dense(rng, sa, "float64", density), sparse_dense(rng, sb, "float64", density)
    _, _, out = check_dot(a, b, *pair, ta, tb)
    assert out.stype == expected_stype(*pair, ta, tb)


@pytest.mark.parametrize("ta,tb", FLAGS)
@pytest.mark.parametrize("pair", sorted(KERNEL_PAIRS))
def test_dot_no_stored_values(pair, ta, tb):
    sa, sb = operand_shapes(4, 3, 5, ta, tb)
    _, _, out = check_dot(np.zeros(sa, np.float32), np.zeros(sb, np.float32), *pair, ta, tb)
    if out.stype != "default":
        assert out.nnz == 0


# ---- 1-d rhs --------------------------------------------------------------------------------------
@pytest.mark.parametrize("lhs_stype", STYPES)
@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("rhs_stype", ["default", "row_sparse"])
def test_dot_vector_rhs(lhs_stype, ta, rhs_stype):
    rng = np.random.default_rng(11)
    a = sparse_dense(rng, (6, 5), "float32")
    v = sparse_dense(rng, (6 if ta else 5,), "float32", density=0.6)
    lhs, rhs, out = check_dot(a, v, lhs_stype, rhs_stype, ta, False)
    assert out.shape == ((5,) if ta else (6,))
    assert out.stype == expected_stype(lhs_stype, rhs_stype, ta, False)
    # transpose_b of a vector is the vector
    np.testing.assert_array_equal(so.dot(lhs, rhs, transpose_a=ta, transpose_b=True).asnumpy(), out.asnumpy())


# ---- forward_stype --------------------------------------------------------------------------------
@pytest.mark.parametrize("forward_stype", STYPES)
@pytest.mark.parametrize("pair", sorted(KERNEL_PAIRS) + [("default", "default"), ("csr", "csr")])
@pytest.mark.parametrize("ta", [False, True])
def test_forward_stype_overrides_the_output_storage(pair, ta, forward_stype):
    rng = np.random.default_rng(5)
    sa, sb = operand_shapes(6, 5, 4, ta, False)
    a, b = sparse_dense(rng, sa, "float32"), sparse_dense(rng, sb, "float32")
    _, _, out = check_dot(a, b, *pair, ta, False, forward_stype=forward_stype)
    assert out.stype == forward_stype


def test_forward_stype_is_checked():
    x = so.array(np.ones((2, 2), np.float32))
    with pytest.raises(ParameterError):
        so.dot(x, x, forward_stype="coo")


# ---- errors ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("lhs_stype,rhs_stype", list(itertools.product(STYPES, STYPES)))
def test_dot_shape_mismatch(lhs_stype, rhs_stype):
    lhs = make(np.ones((3, 4), np.float32), lhs_stype)
    rhs = make(np.ones((5, 2), np.float32), rhs_stype)
    with pytest.raises(InferenceError, match="do not align: 4 != 5"):
        so.dot(lhs, rhs)
    with pytest.raises(InferenceError, match="do not align"):
        so.dot(lhs, rhs, transpose_a=True)
    so.dot(lhs, make(np.ones((2, 4), np.float32), rhs_stype), transpose_b=True)  # aligns


def test_dot_shape_errors():
    m = so.array(np.ones((3, 4), np.float32))
    with pytest.raises(InferenceError, match="do not align"):
        so.dot(m, so.array(np.ones(3, np.float32)))
    with pytest.raises(InferenceError, match="do not align"):
        so.dot(m, so.array(np.ones((4, 2, 2), np.float32)), transpose_b=True)
    with pytest.raises(InferenceError, match="at least one dimension"):
        so.dot(m, so.array(np.float32(1)))
    promoted = so.dot(m, so.array(np.ones((4, 2), np.float64)))  # NumPy's promotion, not an error
    assert promoted.dtype == np.float64
    np.testing.assert_array_equal(promoted.asnumpy(), np.full((3, 2), 4.0))


def mxnet_dot(a, b, ta, tb):
    """MXNet's N-d dot: lhs reduces its last axis (first with ta), rhs its first (last with tb)."""
    a = np.moveaxis(a, 0, -1) if ta else a
    b = np.moveaxis(b, -1, 0) if tb else b
    out = np.tensordot(a.astype(np.float64), b.astype(np.float64), axes=([-1], [0]))
    return out.reshape(1) if out.ndim == 0 else out


ND_CASES = [((4,), (4,)), ((4,), (4, 3)), ((2, 3, 4), (4,)), ((2, 3, 4), (4, 5)), ((2, 4), (4, 3, 2)),
            ((2, 3, 4), (4, 2, 2)), ((0, 4), (4, 3, 0)), ((3, 4), (4,))]


def _transposed_shapes(lhs, rhs, ta, tb):
    """Operand shapes that reduce the same axis under the flags."""
    lhs = (lhs[-1], *lhs[:-1]) if ta else lhs
    rhs = (*rhs[1:], rhs[0]) if tb else rhs
    return lhs, rhs


@pytest.mark.parametrize("ta,tb", FLAGS)
@pytest.mark.parametrize("shapes,lhs_stype,rhs_stype", [
    (shapes, ls, rs) for shapes in ND_CASES
    for ls, rs in [("default", "default"), ("row_sparse", "default"), ("default", "row_sparse"),
                   ("csr", "default")]
    if ls != "csr" or len(shapes[0]) == 2])
def test_dot_nd_like_mxnet(shapes, ta, tb, lhs_stype, rhs_stype):
    """Sparse operands of other shapes than the kernels take are densified inside them."""
    lhs_shape, rhs_shape = _transposed_shapes(*shapes, ta, tb)
    rng = np.random.default_rng(12)
    a, b = sparse_dense(rng, lhs_shape, "float32", 0.6), sparse_dense(rng, rhs_shape, "float32", 0.6)
    out = so.dot(make(a, lhs_stype), make(b, rhs_stype), transpose_a=ta, transpose_b=tb)
    want = mxnet_dot(a, b, ta, tb)
    assert out.shape == want.shape
    np.testing.assert_array_equal(out.asnumpy(), want.astype(np.float32))


@pytest.mark.parametrize("ta,tb", FLAGS)
@pytest.mark.parametrize("shapes", [((4,), (4,)), ((4,), (4, 3)), ((2, 3, 4), (4, 2)), ((3, 4), (4, 2, 2))])
def test_gradient_nd(shapes, ta, tb):
    lhs_shape, rhs_shape = _transposed_shapes(*shapes, ta, tb)
    rng = np.random.default_rng(13)
    inputs = [so.array(rng.standard_normal(lhs_shape)), so.array(rng.standard_normal(rhs_shape))]
    grads = check_gradient("dot", inputs, {"transpose_a": ta, "transpose_b": tb})
    assert [g.shape for g in grads] == [lhs_shape, rhs_shape]


# ---- larger cases against SciPy: the parallel kernels (small products run serially) -----------------
@pytest.mark.parametrize("dtype,index_dtype", [("float32", "int32"), ("float64", "int64")])
@pytest.mark.parametrize("used_columns", [1.0, 0.7, 0.2])
def test_dot_parallel_kernels_against_scipy(dtype, index_dtype, used_columns):
    """used_columns: the fraction of columns the csr stores (csr.T @ dense renumbers the
    columns below one half, picks the stored ones of a full product above)."""
    import scipy.sparse as sp

    from sparse_ops.sdk.rowkernel import PARALLEL_MIN_WORK

    rng = np.random.default_rng(0)
    m = sp.random(3000, 700, density=0.01 / used_columns, format="csr", dtype=dtype, random_state=1)
    m = (m @ sp.diags((rng.random(700) < used_columns).astype(dtype))).tocsr()
    m.eliminate_zeros()
    m.sort_indices()
    m.indices, m.indptr = m.indices.astype(index_dtype), m.indptr.astype(index_dtype)
    assert m.nnz * 33 > PARALLEL_MIN_WORK
    b = rng.standard_normal((700, 33)).astype(dtype)
    g = rng.standard_normal((3000, 33)).astype(dtype)
    d = rng.standard_normal((40, 3000)).astype(dtype)
    a = so.csr_matrix(m)
    tol = dict(rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(so.dot(a, so.array(b)).asnumpy(), m @ b, **tol)
    t = so.dot(a, so.array(g), transpose_a=True)
    assert t.stype == "row_sparse" and t._indices.dtype == np.dtype(index_dtype)
    np.testing.assert_array_equal(t._indices, np.flatnonzero(np.diff(m.tocsc().indptr)))
    np.testing.assert_allclose(t.asnumpy(), m.T @ g, **tol)
    np.testing.assert_allclose(so.dot(so.array(d), a).asnumpy(), d @ m, **tol)
    np.testing.assert_allclose(so.dot(so.array(d.T.copy()), a, transpose_a=True).asnumpy(), d @ m, **tol)


# ---- gradients ------------------------------------------------------------------------------------
@pytest.mark.parametrize("ta,tb", FLAGS)
def test_gradient_dense_dense(ta, tb):
    rng = np.random.default_rng(1)
    sa, sb = operand_shapes(5, 4, 3, ta, tb)
    lhs, rhs = so.array(rng.standard_normal(sa)), so.array(rng.standard_normal(sb))
    grads = check_gradient("dot", [lhs, rhs], {"transpose_a": ta, "transpose_b": tb})
    assert [g.stype for g in grads] == ["default", "default"]


@pytest.mark.parametrize("ta,tb", FLAGS)
def test_gradient_csr_dense(ta, tb):
    rng = np.random.default_rng(2)
    sa, sb = operand_shapes(6, 5, 3, ta, tb)
    lhs = make(sparse_dense(rng, sa, "float64", 0.4), "csr")
    rhs = so.array(rng.standard_normal(sb))
    grads = check_gradient("dot", [lhs, rhs], {"transpose_a": ta, "transpose_b": tb})
    # MXNet: csr lhs without transposes gives a row_sparse gradient for the dense rhs
    assert grads[1].stype == ("row_sparse" if not ta and not tb else "default")
    # the csr's gradient is that of its stored values: its own structure (the product sampled there)
    assert grads[0].stype == "csr"
    np.testing.assert_array_equal(grads[0].indices, lhs.indices)
    np.testing.assert_array_equal(grads[0].indptr, lhs.indptr)


def test_a_csr_operand_gradient_costs_its_stored_values_not_its_columns():
    """A wide design matrix (a million columns, a few values stored): the gradient of its
    values is the product sampled at them, never the dense rows x columns product."""
    cols = np.array([3, 10**6 - 1, 17])
    x = so.csr_matrix((np.array([1.0, 2.0, 3.0]), cols, np.array([0, 2, 3])), shape=(2, 10**6))
    w = np.random.default_rng(0).standard_normal((10**6, 3))
    x.attach_grad()
    g = np.array([[1.0, 0.0, 2.0], [0.5, 1.0, 0.0]])
    with so.autograd.record():
        y = so.dot(x, so.array(w))
    y.backward(so.array(g))
    assert x.grad.stype == "csr" and x.grad.nnz == 3
    np.testing.assert_allclose(x.grad.data, [g[0] @ w[3], g[0] @ w[10**6 - 1], g[1] @ w[17]])


@pytest.mark.parametrize("lhs_stype,rhs_stype", list(itertools.product(["default", "csr", "row_sparse"], repeat=2)))
@pytest.mark.parametrize("ta,tb", FLAGS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sampled_dot_reads_every_operand_storage_in_place(lhs_stype, rhs_stype, ta, tb, dtype):
    """``_sampled_dot`` (the csr operand's gradient) on dense, csr and row_sparse operands,
    transposed or not: the product at the mask's entries, by its storage-aware kernel (no
    densifying fallback); rows a row_sparse operand does not store read as zero."""
    rng = np.random.default_rng(6)
    sa, sb = operand_shapes(5, 4, 6, ta, tb)
    lhs, rhs = sparse_dense(rng, sa, dtype, 0.5), sparse_dense(rng, sb, dtype, 0.5)
    lhs[1] = 0  # a row a row_sparse operand leaves out
    rhs[-1] = 0
    mask = sparse_dense(rng, (5, 6), dtype, 0.5)
    args = [make(mask, "csr"), make(lhs, lhs_stype), make(rhs, rhs_stype)]
    params = {"transpose_a": ta, "transpose_b": tb}
    assert so.explain("_sampled_dot", *args, **params)["kernel"] == "SampledDot.sampled"
    got = so.ops._sampled_dot(*args, **params)
    want = np.where(mask != 0, (lhs.T if ta else lhs) @ (rhs.T if tb else rhs), 0)
    assert got.stype == "csr" and got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got.indices, args[0].indices)
    np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-5 if dtype == "float32" else 1e-12, atol=1e-6)


def test_a_csr_operand_gradient_reads_a_hashed_table_at_its_stored_rows():
    """dot(csr, row_sparse) over a hashed vocabulary of 2**26 rows (a few stored): the csr's
    gradient reads the table's stored rows where they are; densifying it would take 4 GiB."""
    rng = np.random.default_rng(7)
    vocab, k = 1 << 26, 16
    cols = np.sort(rng.choice(vocab, 40, replace=False)).reshape(8, 5)
    x = so.csr_matrix((rng.standard_normal(40), cols.reshape(-1), np.arange(0, 41, 5)), shape=(8, vocab))
    stored = np.unique(np.concatenate([cols[:, :3].reshape(-1), [5, vocab - 1]]))  # some columns of x absent
    table = rng.standard_normal((stored.shape[0], k))
    w = so.row_sparse_array((table, stored), shape=(vocab, k))
    x.attach_grad()
    g = rng.standard_normal((8, k))
    with so.autograd.record():
        y = so.dot(x, w)
    y.backward(so.array(g))
    rows = dict(zip(stored.tolist(), table))
    want = [g[i] @ rows[c] if c in rows else 0.0 for i in range(8) for c in cols[i].tolist()]
    assert x.grad.stype == "csr" and x.grad.nnz == 40
    np.testing.assert_allclose(x.grad.data, want, rtol=1e-12, atol=1e-12)


def test_second_derivatives_through_a_csr_operand_of_dot():
    """The csr operand's gradient (``_sampled_dot``) is differentiable too: the mixed second
    derivative of sum((x @ w) ** 2) with respect to x's values and w."""
    rng = np.random.default_rng(5)
    m = sparse_dense(rng, (4, 5), "float64", 0.5)
    x, w = make(m, "csr"), so.array(rng.standard_normal((5, 2)))
    w.attach_grad()
    x.attach_grad()
    with so.autograd.record():
        y = so.dot(x, w)
        loss = so.sum(y * y)
        (gx,) = so.autograd.grad([loss], [x], create_graph=True)
        second = so.sum(gx * gx)
    second.backward()
    # gx = 2 (x w) w.T at x's stored positions; d sum(gx^2)/dw, by finite differences
    mask = m != 0

    def f(wv):
        return float(np.sum((2 * (m @ wv) @ wv.T * mask) ** 2))

    eps, wv, want = 1e-6, w.asnumpy(), np.zeros((5, 2))
    for i in range(5):
        for j in range(2):
            d = np.zeros((5, 2))
            d[i, j] = eps
            want[i, j] = (f(wv + d) - f(wv - d)) / (2 * eps)
    np.testing.assert_allclose(w.grad.asnumpy(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("ta,tb", FLAGS)
def test_gradient_dense_csr_is_dense(ta, tb):
    rng = np.random.default_rng(3)
    sa, sb = operand_shapes(4, 5, 6, ta, tb)
    lhs = so.array(rng.standard_normal(sa))
    rhs = make(sparse_dense(rng, sb, "float64", 0.4), "csr")
    grads = check_gradient("dot", [lhs, rhs], {"transpose_a": ta, "transpose_b": tb})
    assert grads[0].stype == "default"
    assert grads[1].stype == "csr" and np.array_equal(grads[1].indices, rhs.indices)  # its stored values


@pytest.mark.parametrize("lhs_stype", ["default", "csr"])
@pytest.mark.parametrize("ta,tb", FLAGS)
def test_gradient_vector_rhs(lhs_stype, ta, tb):
    rng = np.random.default_rng(4)
    lhs = make(sparse_dense(rng, (5, 4), "float64", 0.5), lhs_stype)
    rhs = so.array(rng.standard_normal(5 if ta else 4))
    grads = check_gradient("dot", [lhs, rhs], {"transpose_a": ta, "transpose_b": tb})
    assert grads[0].shape == (5, 4) and grads[1].shape == rhs.shape
    if lhs_stype == "csr" and not ta:
        assert grads[1].stype == "row_sparse"  # d rhs = csr.T @ g


def test_gradient_row_sparse_of_dense_weight_matches_numpy():
    rng = np.random.default_rng(8)
    a = sparse_dense(rng, (7, 6), "float64", 0.3, empty_rows=0.0)
    a[:, 2] = 0  # column 2 of the data is never used: its weight row gets no gradient
    g = rng.standard_normal((7, 3))
    lhs = make(a, "csr")
    d_rhs = so.get_op("dot").instance({}).gradient([so.array(g)], [lhs, so.array(np.ones((6, 3)))], [])[1]
    assert d_rhs.stype == "row_sparse" and 2 not in set(d_rhs._indices.tolist())
    np.testing.assert_allclose(d_rhs.asnumpy(), a.T @ g)


# ---- FullyConnected -------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("no_bias", [False, True])
def test_fully_connected_forward(dtype, no_bias):
    rng = np.random.default_rng(0)
    x = rng.integers(-3, 4, size=(5, 4)).astype(dtype)
    w = rng.integers(-3, 4, size=(3, 4)).astype(dtype)
    b = rng.integers(-3, 4, size=3).astype(dtype)
    inputs = [so.array(x), so.array(w)] + ([] if no_bias else [so.array(b)])
    out = so.FullyConnected(*inputs, num_hidden=3, no_bias=no_bias)
    want = x.astype(np.float64) @ w.T.astype(np.float64) + (0 if no_bias else b)
    assert out.dtype == np.dtype(dtype) and out.stype == "default"
    np.testing.assert_array_equal(out.asnumpy(), want.astype(dtype))


@pytest.mark.parametrize("flatten", [True, False])
@pytest.mark.parametrize("shape", [(4, 2, 3), (0, 2, 3), (2, 3)])
def test_fully_connected_shapes(flatten, shape):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape).astype(np.float32)
    features = int(np.prod(shape[1:])) if flatten else shape[-1]
    w = rng.standard_normal((5, features)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    out = so.FullyConnected(so.array(x), so.array(w), so.array(b), num_hidden=5, flatten=flatten)
    want = (x.reshape(shape[0], features) if flatten else x) @ w.T + b
    assert out.shape == want.shape
    np.testing.assert_allclose(out.asnumpy(), want, rtol=1e-5, atol=1e-5)


def test_fully_connected_errors():
    x, w, b = (so.array(np.ones(s, np.float32)) for s in [(2, 4), (3, 4), (3,)])
    with pytest.raises(InferenceError, match="takes 2 inputs"):
        so.FullyConnected(x, w, b, num_hidden=3, no_bias=True)
    with pytest.raises(InferenceError, match="takes 3 inputs"):
        so.FullyConnected(x, w, num_hidden=3)
    with pytest.raises(InferenceError, match="weight must have shape"):
        so.FullyConnected(x, w, b, num_hidden=2)
    with pytest.raises(InferenceError, match="bias must have shape"):
        so.FullyConnected(x, w, so.array(np.ones(2, np.float32)), num_hidden=3)
    with pytest.raises(ParameterError):
        so.FullyConnected(x, w, b, num_hidden=0)
    with pytest.raises(ParameterError):
        so.FullyConnected(x, w, b)


@pytest.mark.parametrize("no_bias", [False, True])
@pytest.mark.parametrize("flatten,shape", [(True, (4, 3)), (True, (4, 2, 3)), (False, (2, 4, 3))])
def test_fully_connected_gradient(no_bias, flatten, shape):
    rng = np.random.default_rng(6)
    features = int(np.prod(shape[1:])) if flatten else shape[-1]
    inputs = [so.array(rng.standard_normal(shape)), so.array(rng.standard_normal((2, features)))]
    if not no_bias:
        inputs.append(so.array(rng.standard_normal(2)))
    grads = check_gradient("FullyConnected", inputs, {"num_hidden": 2, "no_bias": no_bias, "flatten": flatten})
    assert [g.shape for g in grads] == [x.shape for x in inputs]
    assert all(g.stype == "default" for g in grads)


# ---- the gpu code paths under the simulated gpu ---------------------------------------------------
@pytest.mark.gpu
def test_simulated_gpu_paths():
    """dot for every storage pair and flag, and FullyConnected, on gpu(0), simulated: the
    xp kernels run there, and csr pairs run the numba.cuda kernels (in the CUDA simulator)."""
    import os
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import itertools, warnings
        import numpy as np, sparse_ops as so
        warnings.simplefilter("ignore", so.StorageFallbackWarning)
        gpu = so.gpu(0)
        rng = np.random.default_rng(0)
        kernels = {("row_sparse", "default"): "Dot.rsp_lhs", ("default", "row_sparse"): "Dot.rsp_rhs",
                   ("default", "default"): "Dot.dense", ("csr", "default"): "Dot.csr_lhs_gpu",
                   ("csr", "row_sparse"): "Dot.csr_lhs_gpu", ("default", "csr"): "Dot.csr_rhs_gpu",
                   ("csr", "csr"): "Dot.csr_csr_gpu"}
        for ls, rs in itertools.product(["default", "row_sparse", "csr"], repeat=2):
            for ta, tb in itertools.product([False, True], repeat=2):
                a = rng.integers(-3, 4, size=(4, 5) if ta else (5, 4)).astype(np.float32)
                b = rng.integers(-3, 4, size=(3, 4) if tb else (4, 3)).astype(np.float32)
                a[1] = 0
                b[2] = 0
                lhs = so.array(a, device=gpu).tostype(ls)
                rhs = so.array(b, device=gpu).tostype(rs)
                out = so.dot(lhs, rhs, transpose_a=ta, transpose_b=tb)
                assert out.device == gpu
                want = (a.T if ta else a) @ (b.T if tb else b)
                np.testing.assert_array_equal(out.asnumpy(), want)
                plan = so.explain("dot", lhs, rhs, transpose_a=ta, transpose_b=tb)
                assert plan["kernel"].startswith(kernels.get((ls, rs), "Dot.dense")), plan
        x = so.array(rng.standard_normal((3, 2, 2)).astype(np.float32), device=gpu)
        w = so.array(rng.standard_normal((5, 4)).astype(np.float32), device=gpu)
        bias = so.array(rng.standard_normal(5).astype(np.float32), device=gpu)
        y = so.FullyConnected(x, w, bias, num_hidden=5)
        assert y.device == gpu
        np.testing.assert_allclose(y.asnumpy(), x.asnumpy().reshape(3, 4) @ w.asnumpy().T + bias.asnumpy(),
                                   rtol=1e-5, atol=1e-5)
        print("ok")
    """)
    env = dict(os.environ, SPARSE_OPS_CUDA_SIM="1")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr


def test_out_may_be_the_dense_operand():
    rng = np.random.default_rng(9)
    a = sparse_dense(rng, (4, 4), "float32", 0.5)
    b = rng.standard_normal((4, 4)).astype(np.float32)
    for lhs_stype, rhs_stype in [("csr", "default"), ("default", "csr")]:
        lhs, rhs = make(a if lhs_stype == "csr" else b, lhs_stype), make(b if lhs_stype == "csr" else a, rhs_stype)
        want = lhs.asnumpy() @ rhs.asnumpy()
        dense = lhs if lhs_stype == "default" else rhs
        so.dot(lhs, rhs, forward_stype="default", out=dense)
        np.testing.assert_allclose(dense.asnumpy(), want, rtol=1e-5, atol=1e-5)


def test_potrf_and_trsm_take_float16():
    """LAPACK has no half precision: float16 is computed in float32 and rounded back."""
    a = np.array([[4., 2], [2, 3]], np.float16)
    low = so.invoke("_linalg_potrf", [so.array(a)])
    assert low.dtype == np.float16
    np.testing.assert_allclose(low.asnumpy(), np.linalg.cholesky(a.astype(np.float32)), rtol=1e-3)
    b = np.array([[1., 2], [3, 4]], np.float16)
    x = so.invoke("_linalg_trsm", [so.array(np.tril(a)), so.array(b)])
    assert x.dtype == np.float16
    np.testing.assert_allclose(x.asnumpy(), np.linalg.solve(np.tril(a).astype(np.float32), b.astype(np.float32)),
                               rtol=1e-3)


def test_khatri_rao_is_the_columnwise_kronecker_product_with_its_gradient():
    rng = np.random.default_rng(0)
    a, b, c = rng.standard_normal((3, 2)), rng.standard_normal((4, 2)), rng.standard_normal((2, 2))
    want = np.einsum("ik,jk,lk->ijlk", a, b, c).reshape(-1, 2)
    xs = [so.array(m) for m in (a, b, c)]
    np.testing.assert_allclose(so.khatri_rao(*xs).asnumpy(), want, rtol=1e-12)
    np.testing.assert_allclose(so.khatri_rao(xs[0]).asnumpy(), a)
    for x in xs:
        x.attach_grad()
    head = rng.standard_normal(want.shape)
    with so.autograd.record():
        y = so.khatri_rao(*xs)
    y.backward(so.array(head))
    h = head.reshape(3, 4, 2, 2)
    np.testing.assert_allclose(xs[0].grad.asnumpy(), np.einsum("ijlk,jk,lk->ik", h, b, c), rtol=1e-10)
    np.testing.assert_allclose(xs[1].grad.asnumpy(), np.einsum("ijlk,ik,lk->jk", h, a, c), rtol=1e-10)
    np.testing.assert_allclose(xs[2].grad.asnumpy(), np.einsum("ijlk,ik,jk->lk", h, a, b), rtol=1e-10)
    with pytest.raises(InferenceError, match="one column count; input 1 has 3 columns"):
        so.khatri_rao(so.ones((2, 2)), so.ones((2, 3)))
