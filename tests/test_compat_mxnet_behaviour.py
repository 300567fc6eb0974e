"""Issue 17: MXNet 1.9 behaviours of the MXNet face (aux states in custom backward, rsp[:] = v,
take of csr rows, shape inference from empty indices, randint / multinomial / shuffle, linalg,
``mx.nd._internal``), against NumPy and SciPy."""
import numpy as np
import pytest
import scipy.sparse as sp

import sparse_ops as so
import sparse_ops.compat.mxnet as mx


# ---- custom ops: auxiliary states reach backward ---------------------------------------------------
class _AuxOp(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        aux[0][:] = 1
        self.assign(out_data[0], req[0], in_data[0] * 2)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        self.assign(in_grad[0], req[0], out_grad[0] * aux[0] * 3)


@mx.operator.register("test_behaviour_aux")
class _AuxProp(mx.operator.CustomOpProp):
    def __init__(self):
        super().__init__(need_top_grad=True)

    def list_auxiliary_states(self):
        return ["state"]

    def infer_shape(self, in_shape):
        return in_shape, [in_shape[0]], [in_shape[0]]

    def declare_backward_dependency(self, out_grad, in_data, out_data):
        return out_grad  # neither input nor output: aux states are kept all the same

    def create_operator(self, ctx, shapes, dtypes):
        return _AuxOp()


def test_custom_op_backward_reads_aux_state_written_by_forward():
    v = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    x, state = mx.nd.array(v), mx.nd.zeros((2, 3))
    x.attach_grad()
    with mx.autograd.record():
        y = mx.nd.Custom(x, state, op_type="test_behaviour_aux")
    y.backward(mx.nd.array(np.full((2, 3), 0.5)))
    np.testing.assert_array_equal(y.asnumpy(), 2 * v)
    np.testing.assert_array_equal(state.asnumpy(), 1)
    np.testing.assert_array_equal(x.grad.asnumpy(), np.full((2, 3), 1.5))


@pytest.mark.parametrize("read", [lambda x, a: x.asnumpy() * a.asnumpy(), lambda x, a: x * a, lambda x, a: a * x,
                                  lambda x, a: x[0], lambda x, a: np.asarray(x)])
def test_custom_op_undeclared_input_still_refused_in_backward(read):
    class ReadsInput(_AuxOp):
        def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
            self.assign(in_grad[0], req[0], read(in_data[0], aux[0]))

    @so.register("test_behaviour_aux_reads_input", replace=True)
    class Prop(_AuxProp):
        def create_operator(self, ctx, shapes, dtypes):
            return ReadsInput()

    x = mx.nd.ones((2, 2))
    x.attach_grad()
    with mx.autograd.record():
        y = mx.nd.Custom(x, mx.nd.zeros((2, 2)), op_type="test_behaviour_aux_reads_input")
    with pytest.raises(mx.base.MXNetError, match="backward dependency"):
        y.backward()


# ---- rsp[:] = value -----------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [2, 2.5, -1.0, np.float32(3)])
def test_row_sparse_scalar_assignment_stores_every_row(value):
    x = mx.nd.zeros((4, 3), stype="row_sparse")
    x[:] = value
    assert x.stype == "row_sparse" and x.dtype == np.float32
    np.testing.assert_array_equal(x.indices.asnumpy(), np.arange(4))
    np.testing.assert_array_equal(x.asnumpy(), np.full((4, 3), value, dtype=np.float32))


def test_row_sparse_scalar_assignment_keeps_dtype_and_zero_stores_nothing():
    x = mx.nd.zeros((2, 2, 2), stype="row_sparse", dtype="float64")
    x[:] = 0.25
    assert x.dtype == np.float64 and x.data.shape == (2, 2, 2)
    np.testing.assert_array_equal(x.asnumpy(), 0.25)
    x[:] = 0
    assert x.indices.shape == (0,) and not x.asnumpy().any()
    native = so.zeros((3, 2), stype="row_sparse")
    native[:] = 7
    np.testing.assert_array_equal(native.asnumpy(), 7)


@pytest.mark.parametrize("src", ["dense", "numpy", "row_sparse"])
def test_row_sparse_array_assignment(src):
    v = np.array([[0, 0, 0], [1, 2, 0], [0, 0, 0], [3, 0, 4]], dtype=np.float32)
    value = {"dense": mx.nd.array(v), "numpy": v, "row_sparse": mx.nd.array(v).tostype("row_sparse")}[src]
    x = mx.nd.zeros((4, 3), stype="row_sparse")
    x[:] = value
    assert x.stype == "row_sparse"
    np.testing.assert_array_equal(x.asnumpy(), v)
    np.testing.assert_array_equal(x.indices.asnumpy(), [1, 3])


def test_csr_scalar_assignment_still_refused():
    x = mx.nd.zeros((2, 2), stype="csr")
    with pytest.raises(ValueError, match="non-zero scalar"):
        x[:] = 2


def test_internal_set_value():
    x = mx.nd.zeros((3, 2), stype="row_sparse")
    assert mx.nd._internal._set_value(1.5, out=x) is x
    np.testing.assert_array_equal(x.asnumpy(), 1.5)
    d = mx.nd.zeros((2, 2))
    mx.nd._internal._set_value(4, out=d)
    np.testing.assert_array_equal(d.asnumpy(), 4)


# ---- take of csr rows -----------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["clip", "wrap"])
@pytest.mark.parametrize("density", [0.0, 0.5, 1.0])
def test_take_csr_rows_gives_csr(mode, density):
    m = sp.random(6, 5, density=density, format="csr", random_state=1, dtype=np.float32)
    x = mx.nd.sparse.csr_matrix(m)
    idx = np.array([-5, 0, 3, 14, 3, 5])
    y = mx.nd.take(x, mx.nd.array(idx), mode=mode)
    assert y.stype == "csr" and y.shape == (6, 5)
    np.testing.assert_array_equal(y.asnumpy(), np.take(m.toarray(), idx, axis=0, mode=mode))
    assert y.indptr[0].asscalar() == 0 and y.indptr[-1] == y.data.shape[0]
    y.check_format()
    z = x.take(mx.nd.array(idx), mode=mode)  # the fluent method
    assert z.stype == "csr"
    np.testing.assert_array_equal(z.asnumpy(), y.asnumpy())


def test_take_csr_other_cases_are_dense():
    m = sp.random(4, 5, density=0.5, format="csr", random_state=2, dtype=np.float64)
    x = so.csr_matrix(m)
    cols = so.take(x, so.array(np.array([4, 0, 0])), axis=1)
    assert cols.stype == "default"
    np.testing.assert_array_equal(cols.asnumpy(), m.toarray()[:, [4, 0, 0]])
    rows = so.take(x, so.array(np.array([3, 1])), mode="raise")
    assert rows.stype == "default"
    np.testing.assert_array_equal(rows.asnumpy(), m.toarray()[[3, 1]])
    with pytest.raises(IndexError):
        so.take(x, so.array(np.array([4])), mode="raise")
    deep = so.take(x, so.array(np.array([[0, 1]])))  # N-d indices: NumPy's result, dense
    assert deep.stype == "default" and deep.shape == (1, 2, 5)
    np.testing.assert_array_equal(deep.asnumpy(), m.toarray()[[[0, 1]]])


def test_take_csr_gradient_and_empty():
    x = mx.nd.sparse.csr_matrix(sp.csr_matrix(np.array([[1.0, 0], [0, 2], [3, 0]])))
    x.attach_grad()
    with mx.autograd.record():
        y = mx.nd.take(x, mx.nd.array([0, 0, 2]))
    y.backward()
    np.testing.assert_array_equal(x.grad.asnumpy(), [[2, 2], [0, 0], [1, 1]])
    e = mx.nd.take(mx.nd.sparse.zeros("csr", (3, 4)), mx.nd.array([2, 1]))
    assert e.stype == "csr" and e.shape == (2, 4) and e.data.shape == (0,)


# ---- shape inference from empty indices ----------------------------------------------------------------
def test_sparse_constructors_refuse_to_infer_shape_from_empty_indices():
    with pytest.raises(ValueError, match="invalid shape"):
        mx.nd.sparse.csr_matrix((np.zeros(0), np.zeros(0, np.int64), np.zeros(3, np.int64)))
    with pytest.raises(ValueError, match="invalid shape"):
        mx.nd.sparse.row_sparse_array((np.zeros((0, 3)), np.zeros(0, np.int64)))
    assert mx.nd.sparse.csr_matrix((np.zeros(0), np.zeros(0, np.int64), np.zeros(3, np.int64)),
                                   shape=(2, 4)).shape == (2, 4)
    assert mx.nd.sparse.row_sparse_array((np.zeros((0, 3)), np.zeros(0, np.int64)), shape=(5, 3)).shape == (5, 3)
    assert mx.nd.sparse.csr_matrix(([1.0], [4], [0, 0, 1])).shape == (2, 5)
    assert mx.nd.sparse.row_sparse_array((np.ones((2, 3, 2)), [1, 6])).shape == (7, 3, 2)


# ---- random ---------------------------------------------------------------------------------------------
def test_randint_range_dtype_and_seed():
    mx.random.seed(3)
    a = mx.nd.random.randint(-2, 5, shape=(200, 5))
    assert a.dtype == np.int32 and a.shape == (200, 5)
    v = a.asnumpy()
    assert v.min() == -2 and v.max() == 4
    mx.random.seed(3)
    np.testing.assert_array_equal(mx.nd.random.randint(-2, 5, shape=(200, 5)).asnumpy(), v)
    assert mx.nd.random.randint(0, 3, dtype="int64").dtype == np.int64
    assert mx.nd.random.randint(0, 3).shape == (1,)
    with pytest.raises(ValueError):
        mx.nd.random.randint(3, 3)
    with pytest.raises(ValueError):
        mx.nd.random.randint(0, 3, dtype="float32")


def test_multinomial_frequencies_shapes_and_log_prob():
    mx.random.seed(0)
    p = np.array([[0.2, 0.3, 0.5], [0.7, 0.0, 0.3]], dtype=np.float32)
    ids = mx.nd.random.multinomial(mx.nd.array(p), shape=20000)
    assert ids.shape == (2, 20000) and ids.dtype == np.int32
    freq = np.stack([np.bincount(r, minlength=3) / 20000 for r in ids.asnumpy()])
    np.testing.assert_allclose(freq, p, atol=0.015)
    assert (ids.asnumpy()[1] != 1).all()  # a zero-probability category is never drawn
    one = mx.nd.random.multinomial(mx.nd.array([0.0, 1.0]))
    assert one.shape == (1,) and one.asnumpy()[0] == 1
    ids, logp = mx.nd.random.multinomial(mx.nd.array(p), shape=(2, 3), get_prob=True)
    assert ids.shape == logp.shape == (2, 2, 3) and logp.dtype == np.float32
    expect = np.log(np.stack([p[i][ids.asnumpy()[i]] for i in range(2)]))
    np.testing.assert_allclose(logp.asnumpy(), expect, rtol=1e-6)


def test_shuffle_permutes_first_axis():
    mx.random.seed(1)
    v = np.arange(40.0).reshape(10, 4)
    y = mx.nd.random.shuffle(mx.nd.array(v))
    out = y.asnumpy()
    assert y.shape == (10, 4) and not np.array_equal(out, v)
    np.testing.assert_array_equal(np.sort(out[:, 0]), v[:, 0])
    np.testing.assert_array_equal(out, v[(out[:, 0] // 4).astype(int)])  # whole rows move
    assert mx.random.shuffle is mx.nd.random.shuffle


# ---- linalg -------------------------------------------------------------------------------------------------
def _spd(n, seed, batch=()):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(batch + (n, n))
    return a @ np.swapaxes(a, -1, -2) + n * np.eye(n)


def test_potrf_against_numpy():
    a = _spd(4, 0, (2,))
    L = mx.nd.linalg.potrf(mx.nd.array(a, dtype=np.float64))
    np.testing.assert_allclose(L.asnumpy(), np.linalg.cholesky(a), rtol=1e-12)
    np.testing.assert_allclose(mx.nd.linalg_potrf(mx.nd.array(a[0])).asnumpy(), np.linalg.cholesky(a[0]), rtol=1e-5)
    with pytest.raises(mx.base.MXNetError, match="positive definite"):
        mx.nd.linalg.potrf(mx.nd.array(-np.eye(2)))
    with pytest.raises((ValueError, mx.base.MXNetError), match="square"):
        mx.nd.linalg.potrf(mx.nd.ones((2, 3)))


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_gemm2_values_and_gradient(ta, tb):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((2, 4, 3) if ta else (2, 3, 4))
    b = rng.standard_normal((2, 5, 4) if tb else (2, 4, 5))
    A, B = mx.nd.array(a, dtype=np.float64), mx.nd.array(b, dtype=np.float64)
    A.attach_grad()
    B.attach_grad()
    op_a = np.swapaxes(a, -1, -2) if ta else a
    op_b = np.swapaxes(b, -1, -2) if tb else b
    with mx.autograd.record():
        c = mx.nd.linalg.gemm2(A, B, transpose_a=ta, transpose_b=tb, alpha=0.5)
    np.testing.assert_allclose(c.asnumpy(), 0.5 * op_a @ op_b, rtol=1e-12)
    g = rng.standard_normal(c.shape)
    c.backward(mx.nd.array(g, dtype=np.float64))
    d_op_a, d_op_b = 0.5 * g @ np.swapaxes(op_b, -1, -2), 0.5 * np.swapaxes(op_a, -1, -2) @ g
    np.testing.assert_allclose(A.grad.asnumpy(), np.swapaxes(d_op_a, -1, -2) if ta else d_op_a, rtol=1e-12)
    np.testing.assert_allclose(B.grad.asnumpy(), np.swapaxes(d_op_b, -1, -2) if tb else d_op_b, rtol=1e-12)


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("rightside", [False, True])
def test_trsm_against_scipy(lower, transpose, rightside):
    from scipy.linalg import solve_triangular

    rng = np.random.default_rng(7)
    a = rng.standard_normal((3, 3)) + 4 * np.eye(3)  # both triangles filled: only one is read
    b = rng.standard_normal((3, 2) if not rightside else (2, 3))
    x = mx.nd.linalg.trsm(mx.nd.array(a, dtype=np.float64), mx.nd.array(b, dtype=np.float64),
                          transpose=transpose, rightside=rightside, lower=lower, alpha=2.0).asnumpy()
    tri = np.tril(a) if lower else np.triu(a)
    op = tri.T if transpose else tri
    if rightside:
        expect = solve_triangular(op.T, 2.0 * b.T, lower=(lower == transpose)).T
    else:
        expect = solve_triangular(op, 2.0 * b, lower=(lower != transpose))
    np.testing.assert_allclose(x, expect, rtol=1e-10)


@pytest.mark.parametrize("params", [{}, {"transpose": True, "alpha": 0.5}, {"rightside": True, "lower": False},
                                    {"rightside": True, "transpose": True}])
def test_trsm_gradient_reads_one_triangle(params):
    from sparse_ops.sdk.testing import check_gradient

    rng = np.random.default_rng(11)
    a = so.array(rng.standard_normal((2, 3, 3)) + 4 * np.eye(3))
    b = so.array(rng.standard_normal((2, 2, 3) if params.get("rightside") else (2, 3, 2)))
    dA, dB = check_gradient("_linalg_trsm", [a, b], params, eps=1e-6, rtol=1e-6, atol=1e-8)
    other = np.triu(np.ones((3, 3)), 1) if params.get("lower", True) else np.tril(np.ones((3, 3)), -1)
    assert not (dA.asnumpy() * other).any()  # the triangle trsm does not read gets no gradient


def test_potrf_backward_gives_a_symmetric_gradient():
    a = mx.nd.array(_spd(2, 1))
    a.attach_grad()
    with mx.autograd.record():
        L = mx.nd.linalg.potrf(a)
    L.backward()  # the values are checked in test_ops_mxnet_common.py
    g = a.grad.asnumpy()
    np.testing.assert_allclose(g, np.swapaxes(g, -1, -2), rtol=1e-6)


# ---- _internal ---------------------------------------------------------------------------------------------
def test_internal_namespace_reaches_underscored_operators():
    rsp = mx.nd.array(np.array([[1.0, 2], [0, 0], [3, 0]])).tostype("row_sparse")
    s = mx.nd._internal._square_sum(rsp, axis=1)
    np.testing.assert_array_equal(s.asnumpy(), [5, 0, 9])
    np.testing.assert_array_equal(mx.nd._internal._plus_scalar(mx.nd.ones((2,)), scalar=2).asnumpy(), [3, 3])
    assert "_set_value" in dir(mx.nd._internal)
    with pytest.raises(AttributeError):
        mx.nd._internal._no_such_operator
