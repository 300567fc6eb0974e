"""The JAX bridge's forward path: ops as XLA FFI targets under jax.jit, storage types in and
out (BCSR, RowSparse, component tuples), sparse outputs with a capacity and their true
count, errors naming the op and the argument, compile counts, vmap."""
import json
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)  # float64 and int64 arrays (tests name their dtypes)

import jax.numpy as jnp  # noqa: E402
from jax.experimental.sparse import BCSR  # noqa: E402

import sparse_ops as so  # noqa: E402
import sparse_ops.jax as soj  # noqa: E402
import sparse_ops_cookbook  # noqa: E402,F401  (registers the cookbook ops)
from sparse_ops.jax import JaxBridgeError, RowSparse  # noqa: E402
from sparse_ops.jax import bridge  # noqa: E402


def bcsr(m: sp.csr_matrix, index_dtype=np.int64) -> BCSR:
    return BCSR((jnp.asarray(m.data), jnp.asarray(m.indices.astype(index_dtype)),
                 jnp.asarray(m.indptr.astype(index_dtype))), shape=m.shape)


def rand_csr(rows, cols, density, dtype, seed):
    m = sp.random(rows, cols, density=density, format="csr", dtype=np.float64, random_state=seed)
    m.data[:] = np.random.default_rng(seed).standard_normal(m.nnz)
    return m.astype(dtype)


def test_import_sparse_ops_does_not_import_jax():
    code = ("import sys, json, sparse_ops, sparse_ops.ops, sparse_ops.autograd; "
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dense_ops_under_jit_match_numpy(dtype):
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((5, 7)).astype(dtype) for _ in range(2))

    @jax.jit
    def f(x, y):
        return soj.ops.elemwise_mul(soj.ops.relu(x), y), soj.ops.sum(x, axis=1)

    p, s = f(a, b)
    assert p.dtype == dtype and s.shape == (5,)
    np.testing.assert_allclose(np.asarray(p), np.maximum(a, 0) * b, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(s), a.sum(axis=1), rtol=1e-5)


def test_integer_and_empty_inputs():
    x = jnp.asarray(np.arange(-3, 3, dtype=np.int64).reshape(2, 3))
    np.testing.assert_array_equal(np.asarray(jax.jit(soj.ops.abs)(x)), np.abs(np.asarray(x)))
    e = jnp.zeros((0, 4), jnp.float32)
    assert jax.jit(soj.ops.relu)(e).shape == (0, 4)


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_csr_times_dense_as_bcsr_and_as_a_tuple(dtype, index_dtype):
    dense = rand_csr(9, 6, 0.3, dtype, 1).toarray()
    dense[3] = 0  # an empty row
    m = sp.csr_matrix(dense)
    x = np.random.default_rng(2).standard_normal((6, 4)).astype(dtype)
    ref = m @ x
    got = jax.jit(soj.ops.dot)(bcsr(m, index_dtype), x)
    np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-5)
    parts = (jnp.asarray(m.data), jnp.asarray(m.indices.astype(index_dtype)),
             jnp.asarray(m.indptr.astype(index_dtype)), m.shape)
    got = jax.jit(lambda d, i, p, x: soj.ops.csr_spmm((d, i, p, (9, 6)), x))(*parts[:3], x)
    np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-5)


def test_empty_csr():
    m = sp.csr_matrix((4, 3), dtype=np.float64)
    got = jax.jit(soj.ops.csr_spmm)(bcsr(m), jnp.ones((3, 2)))
    np.testing.assert_array_equal(np.asarray(got), np.zeros((4, 2)))


def test_csr_output_has_a_capacity_and_its_true_count():
    m = rand_csr(6, 5, 0.3, np.float64, 3)
    r = jax.jit(soj.ops.square)(bcsr(m))
    assert isinstance(r, BCSR) and r.shape == (6, 5)
    assert r.nse == m.nnz  # square's capacity rule, nnz(data): not the dense bound rows x cols (30)
    assert int(soj.nnz(r)) == m.nnz == int(r.indptr[-1])
    np.testing.assert_allclose(np.asarray(r.todense()), m.toarray() ** 2)
    np.testing.assert_array_equal(np.asarray(r.indices[:m.nnz]), m.indices)
    assert not np.asarray(r.data[m.nnz:]).any()
    # a capacity of one's own, and the padded result fed to a bridged op again
    r2 = jax.jit(lambda a: soj.ops.square(a, max_nnz=m.nnz + 2))(bcsr(m))
    assert r2.nse == m.nnz + 2
    back = jax.jit(soj.ops.csr_spmm)(r2, jnp.eye(5))
    np.testing.assert_allclose(np.asarray(back), m.toarray() ** 2)


def test_a_capacity_too_small_is_an_error_naming_the_op():
    m = rand_csr(6, 5, 0.5, np.float64, 4)
    with pytest.raises(Exception, match=r"sparse_ops.jax.ops.square.*capacity is 2.*max_nnz"):
        jax.block_until_ready(jax.jit(lambda a: soj.ops.square(a, max_nnz=2))(bcsr(m)))


@pytest.mark.parametrize("jit", [False, True])
def test_a_capacity_of_zero_is_checked_too(jit):
    """max_nnz=0 gives zero-sized result buffers that reading the result never touches: the
    call still runs (XLA would drop it otherwise) and refuses a result that holds values,
    eager and under jit; a result that holds none reads back as zeros."""
    m = rand_csr(6, 5, 0.5, np.float64, 4)
    wrap = jax.jit if jit else (lambda f: f)
    with pytest.raises(Exception, match=r"sparse_ops.jax.ops.square.*capacity is 0.*max_nnz"):
        jax.block_until_ready(wrap(lambda a: soj.ops.square(a, max_nnz=0).todense())(bcsr(m)))
    with pytest.raises(Exception, match=r"sparse_ops.jax.ops.dot.*capacity is 0.*max_nnz"):
        jax.block_until_ready(wrap(lambda a: jnp.asarray(soj.ops.dot(a, jnp.ones((6, 2)), transpose_a=True,
                                                                  max_nnz=0)))(bcsr(m)))
    empty = bcsr(sp.csr_matrix((6, 5)))
    np.testing.assert_array_equal(np.asarray(wrap(lambda a: soj.ops.square(a, max_nnz=0).todense())(empty)),
                                  np.zeros((6, 5)))


def test_row_sparse_in_and_out():
    m = rand_csr(7, 4, 0.3, np.float64, 5)
    g = np.random.default_rng(6).standard_normal((7, 3))
    r = jax.jit(lambda a, g: soj.ops.dot(a, g, transpose_a=True))(bcsr(m), g)
    assert isinstance(r, RowSparse) and r.shape == (4, 3) and r.nse == 4
    np.testing.assert_allclose(np.asarray(r.todense()), m.T @ g, rtol=1e-12)
    used = np.flatnonzero(np.diff(m.tocsc().indptr))
    assert int(soj.nnz(r)) == len(used)
    np.testing.assert_array_equal(np.asarray(r.indices[:len(used)]), used)
    assert (np.asarray(r.indices[len(used):]) == 4).all()  # padding rows: index shape[0]
    # row_sparse in, as a tuple and as the RowSparse result itself
    vals, idx = np.ones((2, 3)), np.array([1, 3])
    s = jax.jit(lambda v, i: soj.ops.square((v * 2, i, (4, 3))))(vals, idx)
    dense = np.zeros((4, 3))
    dense[[1, 3]] = 4.0
    np.testing.assert_allclose(np.asarray(s.todense()), dense)
    again = jax.jit(soj.ops.square)(r)
    np.testing.assert_allclose(np.asarray(again.todense()), (m.T @ g) ** 2, rtol=1e-12)


def test_several_outputs_and_parameters():
    x = np.arange(12.0).reshape(3, 4)
    parts = jax.jit(lambda x: soj.ops.split(x, num_outputs=2, axis=1))(x)
    assert isinstance(parts, tuple) and len(parts) == 2
    np.testing.assert_array_equal(np.asarray(parts[1]), x[:, 2:])


def test_trace_time_errors_name_the_op_and_the_argument():
    m = rand_csr(5, 4, 0.4, np.float64, 7)
    with pytest.raises(JaxBridgeError, match=r"sparse_ops.jax.ops.dot: .*shape"):
        soj.ops.dot(bcsr(m), jnp.ones((5, 3)))
    with pytest.raises(JaxBridgeError, match=r"sparse_ops.jax.ops.relu: argument 'data': expected a jax.Array"):
        soj.ops.relu("not an array")
    with pytest.raises(JaxBridgeError, match=r"csr_spmm: argument 'A': csr components"):
        soj.ops.csr_spmm((jnp.ones(3), jnp.zeros(2, jnp.int64), jnp.zeros(6, jnp.int64), (5, 4)), jnp.ones((4, 2)))
    with pytest.raises(JaxBridgeError, match=r"sparse_ops.jax.ops.relu: .*unknown parameter"):
        soj.ops.relu(jnp.ones(3), bogus=1)
    with pytest.raises(AttributeError, match="no op 'no_such_op'"):
        soj.ops.no_such_op


def test_run_time_errors_come_back_as_ffi_errors_naming_the_op():
    m = rand_csr(5, 4, 0.4, np.float64, 8)
    bad = BCSR((jnp.asarray(m.data), jnp.asarray(m.indices).at[0].set(99), jnp.asarray(m.indptr)), shape=m.shape)
    with pytest.raises(Exception, match=r"sparse_ops.jax.ops.csr_spmm: .*argument 'A' \(csr\).*99.*out of range"):
        jax.block_until_ready(jax.jit(soj.ops.csr_spmm)(bad, jnp.ones((4, 2))))
    # the process, jax and our autograd still work afterwards
    got = jax.jit(soj.ops.csr_spmm)(bcsr(m), jnp.ones((4, 2)))
    np.testing.assert_allclose(np.asarray(got), m @ np.ones((4, 2)))
    x = so.array(np.ones(3))
    x.attach_grad()
    with so.autograd.record():
        y = so.sum(x * x)
    y.backward()
    np.testing.assert_array_equal(x.grad.asnumpy(), 2 * np.ones(3))


def test_a_jitted_model_compiles_once_per_shape():
    m = rand_csr(8, 8, 0.3, np.float64, 9)
    a = bcsr(m)

    @jax.jit
    def model(a, x, w):
        h = soj.ops.relu(soj.ops.csr_spmm(a, soj.ops.dot(x, w)))
        return soj.ops.sum(soj.ops.square(h))

    before = bridge.TRACES[0]
    x, w = np.ones((8, 3)), np.ones((3, 2))
    first = model(a, x, w)
    traced = bridge.TRACES[0] - before
    assert traced == 5
    for k in range(3):
        np.testing.assert_allclose(np.asarray(model(a, x * k, w)), (np.maximum(m @ (x * k @ w), 0) ** 2).sum())
    assert bridge.TRACES[0] - before == traced  # no retrace, no recompile
    assert model._cache_size() == 1
    model(a, np.ones((8, 4)), np.ones((4, 2)))  # a new shape: one more
    assert model._cache_size() == 2
    assert float(first) == pytest.approx((np.maximum(m @ (x @ w), 0) ** 2).sum())


def test_vmap_loops_over_the_batch():
    m = rand_csr(6, 5, 0.4, np.float64, 10)
    xs = np.random.default_rng(11).standard_normal((3, 5, 2))
    got = jax.jit(jax.vmap(soj.ops.csr_spmm, in_axes=(None, 0)))(bcsr(m), xs)
    np.testing.assert_allclose(np.asarray(got), np.stack([m @ x for x in xs]), rtol=1e-12)
    ys = np.random.default_rng(12).standard_normal((4, 3, 3))
    np.testing.assert_allclose(np.asarray(jax.vmap(soj.ops.relu)(ys)), np.maximum(ys, 0))
    assert "sequential" in soj.explain("csr_spmm", bcsr(m), xs[0])["batching"]


def test_explain_names_target_path_and_gradient():
    m = rand_csr(6, 5, 0.4, np.float64, 13)
    e = soj.explain("square", bcsr(m), max_nnz=10)
    assert e["in_stypes"] == ["csr"] and e["out_stypes"] == ["csr"] and e["out_capacity"] == [10]
    assert e["ffi_target"].startswith("sparse_ops_square")
    assert "gradient rule" in e["gradient"]


def test_an_op_registered_later_is_bridged(isolated):
    @so.register("jax_bridge_twice")
    class Twice(so.Op):
        @so.kernel()
        def dense(self, ctx, x, out):
            np.multiply(x, 2, out=out)

    np.testing.assert_array_equal(np.asarray(jax.jit(soj.ops.jax_bridge_twice)(jnp.arange(3.0))), [0, 2, 4])

    @so.register("jax_bridge_twice", replace=True)
    class Thrice(so.Op):
        @so.kernel()
        def dense(self, ctx, x, out):
            np.multiply(x, 3, out=out)

    np.testing.assert_array_equal(np.asarray(jax.jit(soj.ops.jax_bridge_twice)(jnp.arange(3.0))), [0, 3, 6])


def test_a_call_with_too_few_or_too_many_arrays_names_the_inputs():
    with pytest.raises(JaxBridgeError, match=r"elemwise_add takes 2 array input\(s\) \(lhs, rhs\), got 1; parameters"):
        soj.ops.elemwise_add(jnp.ones(3))
    with pytest.raises(JaxBridgeError, match=r"relu takes 1 array input\(s\) \(data\), got 2"):
        soj.ops.relu(jnp.ones(3), jnp.ones(3))
