"""jax.grad through bridged ops: the op's own gradient rule (the transpose of the call's
linear tangent, a second FFI call), csr values getting gradients with their structure,
row_sparse values with their rows, check_grads on float64 samples of the cookbook ops,
vmap of gradients, second derivatives, errors."""
import numpy as np
import pytest
import scipy.sparse as sp

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
from jax.experimental.sparse import BCSR  # noqa: E402
from jax.test_util import check_grads  # noqa: E402

import sparse_ops as so  # noqa: E402
import sparse_ops.jax as soj  # noqa: E402
import sparse_ops_cookbook  # noqa: E402,F401
from sparse_ops.jax import JaxBridgeError  # noqa: E402


def rand_csr(rows, cols, density, seed, dtype=np.float64):
    m = sp.random(rows, cols, density=density, format="csr", dtype=np.float64, random_state=seed)
    m.data[:] = np.random.default_rng(seed).standard_normal(m.nnz)
    return m.astype(dtype)


def parts(m):
    return jnp.asarray(m.data), jnp.asarray(m.indices.astype(np.int64)), jnp.asarray(m.indptr.astype(np.int64))


def with_data(m, d):
    _, i, p = parts(m)
    return BCSR((d, i, p), shape=m.shape)


def test_csr_values_get_gradients_with_their_structure():
    m = rand_csr(6, 5, 0.4, 0)
    x = np.random.default_rng(1).standard_normal((5, 3))
    g = np.random.default_rng(2).standard_normal((6, 3))
    d, _, _ = parts(m)
    gd, gx = jax.jit(jax.grad(lambda d, x: jnp.sum(soj.ops.csr_spmm(with_data(m, d), x) * g), argnums=(0, 1)))(d, x)
    rows = np.repeat(np.arange(6), np.diff(m.indptr))
    assert gd.shape == (m.nnz,)  # one gradient per stored value, in the stored order
    np.testing.assert_allclose(np.asarray(gd), (g @ x.T)[rows, m.indices], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(gx), m.T @ g, rtol=1e-12)


def test_padded_csr_values_get_zero_gradients_past_the_count():
    m = rand_csr(5, 4, 0.4, 3)
    d, i, p = parts(m)
    pad = 3
    dp = jnp.concatenate([d, jnp.zeros(pad)])
    ip = jnp.concatenate([i, jnp.zeros(pad, i.dtype)])
    x = np.ones((4, 2))
    gd = jax.grad(lambda d: soj.ops.csr_spmm(BCSR((d, ip, p), shape=m.shape), x).sum())(dp)
    assert gd.shape == (m.nnz + pad,)
    assert not np.asarray(gd[m.nnz:]).any()
    rows = np.repeat(np.arange(5), np.diff(m.indptr))
    np.testing.assert_allclose(np.asarray(gd[:m.nnz]), (np.ones((5, 2)) @ x.T)[rows, m.indices])


def test_row_sparse_values_get_gradients_aligned_with_their_rows():
    vals = np.random.default_rng(4).standard_normal((2, 3))
    idx = np.array([1, 3])
    w = np.random.default_rng(5).standard_normal((4, 3))
    gv = jax.grad(lambda v: jnp.sum(soj.ops.square((v, idx, (4, 3))).todense() * w))(vals)
    assert gv.shape == (2, 3)
    np.testing.assert_allclose(np.asarray(gv), 2 * vals * w[idx], rtol=1e-12)


def test_a_row_sparse_weight_gradient_reaches_jax_dense():
    bags = rand_csr(5, 12, 0.3, 6)
    bags.data[:] = 1.0
    w = np.random.default_rng(7).standard_normal((12, 4))
    a = BCSR(parts(bags), shape=bags.shape)
    gw = jax.grad(lambda w: jnp.sum(soj.ops.embedding_bag(a, w) ** 2))(w)
    np.testing.assert_allclose(np.asarray(gw), bags.T @ (2 * (bags @ w)), rtol=1e-12)
    unused = np.asarray(bags.sum(axis=0)).ravel() == 0
    assert not np.asarray(gw)[unused].any()


def test_only_perturbed_inputs_get_a_gradient_call():
    m = rand_csr(6, 5, 0.4, 8)
    a = BCSR(parts(m), shape=m.shape)
    x = np.ones((5, 2))
    jaxpr = str(jax.make_jaxpr(jax.grad(lambda x: soj.ops.csr_spmm(a, x).sum()))(x))
    assert "sparse_ops_csr_spmm_grad" in jaxpr  # X's gradient alone: the gradient rule, asked for X only
    both = str(jax.make_jaxpr(jax.grad(lambda d, x: soj.ops.csr_spmm(BCSR((d, a.indices, a.indptr), shape=a.shape),
                                                                      x).sum(), argnums=(0, 1)))(a.data, x))
    assert "sparse_ops_csr_spmm_grad" in both  # with A's values too: the gradient rule, in Python
    # the adjacency is a constant: its SDDMM is never asked for (one gradient result)
    from sparse_ops.jax import spec as _spec

    grads = [s for s in _spec._SPECS.values() if isinstance(s, _spec.GradSpec) and s.fwd.name == "csr_spmm"]
    assert any(g.needs == (False, True) for g in grads)


def _cookbook_cases():
    m = rand_csr(5, 4, 0.5, 9)
    m2 = rand_csr(4, 4, 0.5, 10)
    rng = np.random.default_rng(11)
    x, g, p, q = (rng.standard_normal(s) for s in ((4, 3), (5, 3), (5, 3), (4, 3)))
    h = rng.standard_normal((5, 4))
    bags = rand_csr(5, 6, 0.4, 12)
    w = rng.standard_normal((6, 3))
    d, _, _ = parts(m)
    d2, _, _ = parts(m2)
    db, _, _ = parts(bags)
    return {
        "csr_spmm": (lambda d, x: soj.ops.csr_spmm(with_data(m, d), x), (d, x)),
        "csr_spmm_t": (lambda d, g: soj.ops.csr_spmm_t(with_data(m, d), g), (d, g)),
        "csr_sddmm": (lambda d, p, q: soj.ops.csr_sddmm(with_data(m, d), p, q).data, (d, p, q)),
        "csr_sample": (lambda d, h: soj.ops.csr_sample(with_data(m, d), h).data, (d, h)),
        "csr_row_softmax": (lambda d: soj.ops.csr_row_softmax(with_data(m2, d)).data, (d2,)),
        "embedding_bag": (lambda w: soj.ops.embedding_bag(with_data(bags, db), w), (w,)),
        "fm_interaction": (lambda v: soj.ops.fm_interaction(with_data(bags, db), v), (w,)),
        "dot": (lambda d, x: soj.ops.dot(with_data(m, d), x), (d, x)),
    }


@pytest.mark.parametrize("name", sorted(_cookbook_cases()))
def test_check_grads_on_cookbook_ops(name):
    f, args = _cookbook_cases()[name]
    check_grads(jax.jit(f), args, order=1, modes=["rev"], atol=1e-6, rtol=1e-6)


def test_grad_under_vmap():
    m = rand_csr(6, 5, 0.4, 13)
    a = BCSR(parts(m), shape=m.shape)
    xs = np.random.default_rng(14).standard_normal((3, 5, 2))
    got = jax.vmap(jax.grad(lambda x: jnp.sum(soj.ops.csr_spmm(a, x) ** 2)))(xs)
    ref = np.stack([m.T @ (2 * (m @ x)) for x in xs])
    np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-12)


def test_an_op_without_a_gradient_is_a_clear_error(isolated):
    @so.register("jax_no_grad")
    class NoGrad(so.Op):
        @so.kernel()
        def dense(self, ctx, x, out):
            out[...] = x

    with pytest.raises(JaxBridgeError, match=r"sparse_ops.jax.ops.jax_no_grad: .*declares no gradient"):
        jax.grad(lambda x: soj.ops.jax_no_grad(x).sum())(jnp.ones(3))
    # still usable forward, and jax still differentiates other things
    np.testing.assert_array_equal(np.asarray(soj.ops.jax_no_grad(jnp.ones(3))), np.ones(3))
    np.testing.assert_allclose(np.asarray(jax.grad(lambda x: soj.ops.square(x).sum())(jnp.arange(3.0))), [0, 2, 4])


def test_float32_gradients():
    m = rand_csr(6, 5, 0.4, 15, np.float32)
    x = np.ones((5, 2), np.float32)
    d, _, _ = parts(m)
    gd = jax.grad(lambda d: soj.ops.csr_spmm(with_data(m, d), x).sum())(d)
    assert gd.dtype == np.float32
    rows = np.repeat(np.arange(6), np.diff(m.indptr))
    np.testing.assert_allclose(np.asarray(gd), (np.ones((6, 2)) @ x.T)[rows, m.indices], rtol=1e-6)


def test_second_derivatives_run_the_rule_through_our_engine_and_a_third_is_refused():
    """grad of grad and jax.hessian differentiate the op's gradient rule with our engine
    (derivatives.py); a derivative of the forward-mode derivative is refused naming the op."""
    m = rand_csr(6, 5, 0.4, 3)
    a = BCSR(parts(m), shape=m.shape)
    x = np.random.default_rng(4).standard_normal((5, 3))
    dense = jnp.asarray(m.toarray())

    def f(x):
        return jnp.sum(soj.ops.csr_spmm(a, x) ** 3)

    def ref(x):
        return jnp.sum((dense @ x) ** 3)

    np.testing.assert_allclose(np.asarray(jax.grad(lambda x: jnp.sum(jax.grad(f)(x)))(x)),
                               np.asarray(jax.grad(lambda x: jnp.sum(jax.grad(ref)(x)))(x)), rtol=1e-10)
    np.testing.assert_allclose(np.asarray(jax.jit(jax.hessian(f))(x)), np.asarray(jax.hessian(ref)(x)),
                               rtol=1e-10, atol=1e-12)
    with pytest.raises(JaxBridgeError, match=r"sparse_ops\.jax\.ops\.csr_spmm: a derivative of its forward-mode "
                                             r"derivative .* not supported"):
        jax.jacfwd(jax.jacfwd(f))(x)
    y = m @ x
    np.testing.assert_allclose(np.asarray(jax.grad(f)(x)), m.T @ (3 * y ** 2), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(jax.jit(jax.grad(f))(x)), m.T @ (3 * y ** 2), rtol=1e-12)
