"""JAX habits through the bridge (issue 38, item 5): dense built-ins lowered to jnp (values and
gradients equal to the native op's on its own samples), the Python handler's fast path,
forward mode and second order from the op's gradient rule, BCSR with unsorted or repeated
columns, RowSparse results where JAX expects an array, and what jax.export takes."""
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
from jax.experimental.sparse import BCSR  # noqa: E402
from jax.test_util import check_grads  # noqa: E402

import sparse_ops as so  # noqa: E402
from conftest import kinks_like, special_like  # noqa: E402
import sparse_ops.jax as soj  # noqa: E402
import sparse_ops_cookbook  # noqa: E402,F401
from sparse_ops.jax import JaxBridgeError, RowSparse, lowering  # noqa: E402

_CALL = "stablehlo.custom_call"  # an FFI call in a lowered program


def _dense_samples(name):
    """The op's own samples whose inputs are all dense, as (NumPy inputs, params)."""
    out = []
    for sample in so.get_op(name).cls.samples():
        inputs, params = (sample, {}) if isinstance(sample, list) else sample
        if all(x.stype == "default" for x in inputs):
            out.append(([x.asnumpy() for x in inputs], dict(params)))
    return out


def _native(name, inputs, params):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = so.invoke(name, [so.array(x) for x in inputs], params)
    return (got[0] if isinstance(got, (list, tuple)) else got).asnumpy()


def _bridged(name, params):
    return jax.jit(lambda *xs: soj.op(name)(*xs, **params))


class _Ffi:
    """Every call takes its FFI target inside the block (lowering off)."""

    def __enter__(self):
        lowering.disabled(True)

    def __exit__(self, *exc):
        lowering.disabled(False)


# ---- dense built-ins lowered to jnp ---------------------------------------------------------------
@pytest.mark.parametrize("name", lowering.names())
def test_each_lowered_op_matches_the_native_op_on_its_samples(name):
    samples = _dense_samples(name)
    assert samples, f"{name}: no all-dense sample to check the lowering on"
    for inputs, params in samples:
        f = _bridged(name, params)
        args = [jnp.asarray(x) for x in inputs]
        assert _CALL not in f.lower(*args).as_text(), f"{name} {params}: not lowered"
        got, want = np.asarray(f(*args)), _native(name, inputs, params)
        assert got.dtype == want.dtype and got.shape == want.shape, (name, params, got.dtype, want.dtype)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=f"{name} {params}")


@pytest.mark.parametrize("name", lowering.names())
def test_each_lowered_op_matches_the_native_op_at_special_values(name):
    """The op's samples refilled with NaN, infinities, signed zeros, float32 overflow and
    integer extremes (``conftest.special_like``), and scalar parameters of 0 and 0.5: the
    lowering gives the native kernels' values (NaN where they give NaN), integers cast from
    NaN or out-of-range floats included."""
    for inputs, params in _dense_samples(name):
        variants = [params] + ([{**params, "scalar": s} for s in (0.0, 0.5)] if "scalar" in params else [])
        as_ints = [x.astype(np.int32) if x.dtype.kind == "f" else x for x in inputs]  # integer division by 0 ...
        for shift, base in [(0, inputs), (5, inputs), (11, inputs), (0, as_ints), (4, as_ints)]:
            xs = [special_like(x, shift + 3 * i) for i, x in enumerate(base)]
            for p in variants:
                try:
                    want = _native(name, xs, p)
                except (so.OperatorError, TypeError, ValueError):  # the op's rules refuse it: so does the bridge
                    with pytest.raises(Exception), warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        _bridged(name, p)(*[jnp.asarray(x) for x in xs])
                    continue
                with warnings.catch_warnings():  # NumPy's overflow and division warnings, in the FFI call too
                    warnings.simplefilter("ignore")
                    got = np.asarray(_bridged(name, p)(*[jnp.asarray(x) for x in xs]))
                assert got.dtype == want.dtype, (name, p)
                np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-6, atol=0,
                                           equal_nan=True, err_msg=f"{name} {p} {[x.tolist() for x in xs]}")


@pytest.mark.parametrize("name", lowering.names())
def test_each_lowered_gradient_equals_the_ops_gradient_rule(name):
    """JAX's derivative of the lowering against the op's own rule (its FFI gradient call)."""
    for inputs, params in _dense_samples(name):
        floats = tuple(i for i, x in enumerate(inputs) if x.dtype.kind == "f")
        f = soj.op(name)
        shape = np.broadcast_shapes(*[np.shape(_native(name, inputs, params))])
        w = jnp.asarray(np.random.default_rng(7).standard_normal(shape))

        def loss(*xs):
            return jnp.sum(f(*xs, **params) * w)

        if not floats or _native(name, inputs, params).dtype.kind != "f":
            continue
        args = [jnp.asarray(x) for x in inputs]
        lowered = jax.grad(loss, argnums=floats)(*args)
        with _Ffi():
            rule = jax.grad(loss, argnums=floats)(*args)
        for a, b in zip(lowered, rule):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10, atol=1e-12, err_msg=f"{name} {params}")


@pytest.mark.parametrize("name", lowering.names())
def test_each_lowered_gradient_takes_the_rules_side_at_kinks(name):
    """The op's samples refilled with kinks and ties (0, -0, equal values, halves:
    ``conftest.kinks_like``), where JAX's derivative may pick another side than the op's
    rule (abs at 0): the lowered gradient equals the rule's wherever both are finite (at a
    pole one may say inf where the other says NaN)."""
    f = soj.op(name)
    for inputs, params in _dense_samples(name):
        floats = tuple(i for i, x in enumerate(inputs) if x.dtype.kind == "f")
        if not floats or not so.get_op(name).differentiable:
            continue
        for k in (0, 3):
            args = [jnp.asarray(kinks_like(x, 4 * i + k) if x.dtype.kind == "f" else x) for i, x in enumerate(inputs)]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if _native(name, [np.asarray(a) for a in args], params).dtype.kind != "f":
                    break
                lowered = jax.grad(lambda *xs: jnp.sum(f(*xs, **params)), argnums=floats)(*args)
                with _Ffi():
                    rule = jax.grad(lambda *xs: jnp.sum(f(*xs, **params)), argnums=floats)(*args)
            for a, b in zip(lowered, rule):
                a, b = np.asarray(a), np.asarray(b)
                both = np.isfinite(a) & np.isfinite(b)
                np.testing.assert_allclose(a[both], b[both], rtol=1e-10, atol=1e-12,
                                           err_msg=f"{name} {params} {[np.asarray(x).tolist() for x in args]}")


def test_float32_and_integer_inputs_follow_the_ops_dtype_rules():
    x32 = np.array([[1.5, -2.25, 3.0], [0.5, 4.0, -1.0]], np.float32)
    i32 = np.array([[3, -7, 2], [5, 0, 9]], np.int32)
    cases = [("exp", [x32], {}), ("_div_scalar", [i32], {"scalar": 2.0}), ("_power_scalar", [i32], {"scalar": 2.0}),
             ("elemwise_add", [i32, x32], {}), ("mean", [i32], {"axis": 1}), ("sum", [x32.astype(np.float16)], {}),
             ("broadcast_greater", [x32, np.float32([1.0, 0.0, 2.0])], {}), ("elemwise_div", [i32, i32 + 10], {}),
             ("abs", [i32], {}), ("sqrt", [np.abs(i32)], {}), ("_mul_scalar", [i32], {"scalar": 2.7})]
    for name, inputs, params in cases:
        got, want = np.asarray(_bridged(name, params)(*inputs)), _native(name, inputs, params)
        assert got.dtype == want.dtype, (name, got.dtype, want.dtype)
        np.testing.assert_allclose(got, want, rtol=2e-3 if want.dtype == np.float16 else 1e-6, err_msg=name)


def _chain(mul, tanh, x):
    for k in range(10):
        x = tanh(mul(x, x))
    return x


def test_a_chain_of_dense_ops_compiles_to_one_xla_computation_without_custom_calls():
    x = jnp.asarray(np.random.default_rng(0).uniform(-1, 1, (8, 8)))
    f = jax.jit(lambda x: _chain(soj.ops.broadcast_mul, soj.ops.tanh, x))
    assert _CALL not in f.lower(x).as_text() and "custom-call(" not in f.lower(x).compile().as_text()
    np.testing.assert_allclose(np.asarray(f(x)), np.asarray(jax.jit(lambda x: _chain(jnp.multiply, jnp.tanh, x))(x)),
                               rtol=1e-12)
    with _Ffi():  # the same chain through the Python handler: the same values, 20 custom calls
        g = jax.jit(lambda x: _chain(soj.ops.broadcast_mul, soj.ops.tanh, x))
        assert g.lower(x).as_text().count(_CALL) == 20
        np.testing.assert_allclose(np.asarray(g(x)), np.asarray(f(x)), rtol=1e-12)


def test_lowered_ops_differentiate_to_any_order_and_batch():
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))

    def ours(x):
        return soj.ops.sum(soj.ops.square(soj.ops.tanh(soj.ops.dot(x, w))))

    def ref(x):
        return jnp.sum(jnp.tanh(x @ w) ** 2)

    for transform in (jax.grad, jax.hessian, lambda f: jax.jacfwd(jax.jacfwd(f)),
                      lambda f: jax.grad(lambda x: jnp.sum(jax.grad(f)(x)))):
        np.testing.assert_allclose(np.asarray(transform(ours)(x)), np.asarray(transform(ref)(x)), rtol=1e-10,
                                   atol=1e-12)
    xs = rng.standard_normal((5, 3, 4))
    np.testing.assert_allclose(np.asarray(jax.vmap(jax.grad(ours))(xs)), np.asarray(jax.vmap(jax.grad(ref))(xs)),
                               rtol=1e-10)


def test_what_is_lowered_and_what_keeps_its_ffi_call():
    x = jnp.ones((3, 4))
    e = soj.explain("relu", x)
    assert e["handler"].startswith("lowered") and e["ffi_target"] is None and "JAX's" in e["forward_mode"]
    csr = BCSR.fromdense(jnp.eye(3, 4))
    assert soj.explain("elemwise_mul", csr, x)["ffi_target"] == "sparse_ops_elemwise_mul"  # sparse: the FFI
    assert soj.explain("sgd_update", x, x, lr=0.1)["handler"].startswith("python")  # updates in place: the FFI
    assert soj.explain("dot", x, x, transpose_b=True, forward_stype="csr")["ffi_target"] == "sparse_ops_dot"
    with _Ffi():
        assert soj.explain("relu", x)["handler"].startswith("python")


def test_integers_the_kernels_compute_in_float64_keep_the_ffi_call():
    """Integer inputs of ops the kernels compute in float64 and truncate (gamma, exp, true
    division, a float scalar's product) are not lowered: XLA's gamma(3) is 1.9999... and
    truncates to 1, and without x64 JAX has only float32. They take the FFI call, which
    says so in explain, and give the native values."""
    i32 = jnp.array([3, 10, 7], jnp.int32)
    for name, args, params, want in [("gamma", [i32], {}, [2, 362880, 720]),
                                     ("elemwise_div", [i32, jnp.array([2, -3, 0], jnp.int32)], {}, None),
                                     ("_scaled_mul", [i32, i32], {"scalar": 2.5}, [22, 250, 122])]:
        assert soj.explain(name, *args, **params)["handler"].startswith("python"), name
        f = _bridged(name, params)
        assert _CALL in f.lower(*args).as_text(), name
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            native = _native(name, [np.asarray(a) for a in args], params)
            got = np.asarray(f(*args))
        np.testing.assert_array_equal(got, native, err_msg=name)
        if want is not None:
            np.testing.assert_array_equal(got, want, err_msg=name)
    assert soj.explain("gamma", jnp.array([3.0]))["handler"].startswith("lowered")  # floats stay lowered


def test_a_class_registered_under_a_builtin_name_keeps_its_ffi_call(isolated):
    @so.register("exp", replace=True)
    class NotExp(so.Op):
        @so.kernel()
        def dense(self, ctx, x, out):
            np.multiply(x, 2, out=out)

        def gradient(self, out_grads, inputs, outputs):
            return [so.ops._mul_scalar(out_grads[0], scalar=2.0)]

    x = jnp.arange(3.0)
    assert soj.explain("exp", x)["handler"].startswith("python")
    np.testing.assert_array_equal(np.asarray(jax.jit(soj.ops.exp)(x)), [0, 2, 4])
    np.testing.assert_array_equal(np.asarray(jax.grad(lambda x: soj.ops.exp(x).sum())(x)), [2, 2, 2])


def test_a_constant_op_lowered_stops_the_gradient():
    x = jnp.arange(4.0)
    g = jax.grad(lambda x: jnp.sum(soj.ops.BlockGrad(x) * x + soj.ops.zeros_like(x)))(x)
    np.testing.assert_array_equal(np.asarray(g), np.asarray(x))  # BlockGrad's x is a constant
    assert float(jax.grad(lambda x: jnp.sum(soj.ops.argmax(x, axis=0)))(x).sum()) == 0


# ---- the Python handler's fast path ---------------------------------------------------------------
def test_the_python_handler_serves_small_large_integer_and_recorded_calls():
    rng = np.random.default_rng(2)
    small = rng.standard_normal((4, 4))
    large = rng.standard_normal((200, 100))  # past the copy threshold: written in place
    ints = np.arange(12, dtype=np.int32).reshape(3, 4)
    with _Ffi():
        for name, inputs, params in [("elemwise_mul", [small, small], {}), ("elemwise_mul", [large, large], {}),
                                     ("_plus_scalar", [ints], {"scalar": 3.0}), ("sum", [large], {"axis": 0}),
                                     ("softmax", [large], {})]:
            f = _bridged(name, params)
            assert f.lower(*inputs).as_text().count(_CALL) == 1
            np.testing.assert_allclose(np.asarray(f(*inputs)), _native(name, inputs, params), rtol=1e-12)
        x = so.array(np.ones(3))
        x.attach_grad()
        with so.autograd.record():  # a handler running inside the caller's recording records nothing
            got = np.asarray(jax.jit(soj.ops.exp)(jnp.ones(3)))
            y = so.sum(x * x)
        y.backward()
        np.testing.assert_allclose(got, np.e)
        np.testing.assert_array_equal(x.grad.asnumpy(), 2 * np.ones(3))


def test_a_call_with_buffers_other_than_its_spec_says_is_an_ffi_error():
    """The handler checks each buffer's dtype and shape against the call's spec before it
    views it (the id travels as an attribute: a hand-made call could lie)."""
    from sparse_ops.jax import bridge

    with _Ffi():
        spec, _ = soj.op("exp").prepare((jnp.ones((2, 3)),), {})
    forged = jax.ffi.ffi_call(bridge.target("exp"), jax.ShapeDtypeStruct((5,), jnp.float64))
    with pytest.raises(Exception, match="sparse_ops.jax.ops.exp: TypeError: a buffer of XLA dtype code"):
        jax.block_until_ready(forged(jnp.ones(5), call=np.int64(spec.id)))


# ---- forward mode and second order through FFI calls --------------------------------------------
def _csr(rows, cols, density, seed):
    m = sp.random(rows, cols, density=density, format="csr", dtype=np.float64, random_state=seed)
    m.data[:] = np.random.default_rng(seed).standard_normal(m.nnz)
    return m


def _dense_of(m):
    rows = np.repeat(np.arange(m.shape[0]), np.diff(m.indptr))
    return lambda d: jnp.zeros(m.shape, d.dtype).at[rows, m.indices].add(d)


def test_jvp_jacfwd_and_hessian_through_a_csr_op_match_dense_references():
    m = _csr(6, 5, 0.4, 0)
    idx, ptr = jnp.asarray(m.indices), jnp.asarray(m.indptr)
    d0 = jnp.asarray(m.data)
    x = np.random.default_rng(1).standard_normal((5, 3))
    dense = _dense_of(m)

    def ours(d, x):
        return jnp.sum(jnp.sin(soj.ops.csr_spmm(BCSR((d, idx, ptr), shape=m.shape), x)))

    def ref(d, x):
        return jnp.sum(jnp.sin(dense(d) @ x))

    t = (jnp.asarray(np.random.default_rng(2).standard_normal(m.nnz)), jnp.ones_like(x))
    np.testing.assert_allclose(jax.jvp(ours, (d0, x), t)[1], jax.jvp(ref, (d0, x), t)[1], rtol=1e-12)
    for transform in (jax.jacfwd, jax.jacrev, jax.hessian):
        got = jax.tree_util.tree_leaves(jax.jit(transform(ours, argnums=(0, 1)))(d0, x))
        want = jax.tree_util.tree_leaves(transform(ref, argnums=(0, 1))(d0, x))
        for a, b in zip(got, want):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10, atol=1e-12)
    xs = np.random.default_rng(3).standard_normal((4, 5, 3))  # jvp under vmap
    np.testing.assert_allclose(jax.vmap(lambda x: jax.jvp(lambda x: ours(d0, x), (x,), (x,))[1])(xs),
                               jax.vmap(lambda x: jax.jvp(lambda x: ref(d0, x), (x,), (x,))[1])(xs), rtol=1e-12)


def test_forward_mode_of_an_op_with_a_sparse_result():
    m = _csr(5, 4, 0.5, 4)
    idx, ptr = jnp.asarray(m.indices), jnp.asarray(m.indptr)
    d0 = jnp.asarray(m.data)

    def ours(d):
        return soj.ops.square(BCSR((d, idx, ptr), shape=m.shape)).data

    primal, tangent = jax.jvp(ours, (d0,), (jnp.ones_like(d0),))
    np.testing.assert_allclose(np.asarray(tangent), 2 * m.data, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(jax.hessian(lambda d: jnp.sum(ours(d) ** 2))(d0)),
                               np.diag(12 * m.data ** 2), rtol=1e-12)


@pytest.mark.parametrize("name", ["csr_spmm", "csr_spmm_t", "csr_sddmm", "embedding_bag", "dot"])
def test_check_grads_forward_and_reverse_and_second_order_on_ffi_ops(name):
    m = _csr(5, 4, 0.5, 9)
    rng = np.random.default_rng(11)
    x, g, p, q = (rng.standard_normal(s) for s in ((4, 3), (5, 3), (5, 3), (4, 3)))
    bags = _csr(5, 6, 0.4, 12)
    w = rng.standard_normal((6, 3))

    def with_data(mat, d):
        return BCSR((d, jnp.asarray(mat.indices), jnp.asarray(mat.indptr)), shape=mat.shape)

    cases = {
        "csr_spmm": (lambda d, x: soj.ops.csr_spmm(with_data(m, d), x), (m.data, x)),
        "csr_spmm_t": (lambda d, g: soj.ops.csr_spmm_t(with_data(m, d), g), (m.data, g)),
        "csr_sddmm": (lambda d, p, q: soj.ops.csr_sddmm(with_data(m, d), p, q).data, (m.data, p, q)),
        "embedding_bag": (lambda w: soj.ops.embedding_bag(with_data(bags, jnp.asarray(bags.data)), w), (w,)),
        "dot": (lambda d, x: soj.ops.dot(with_data(m, d), x), (m.data, x)),
    }
    f, args = cases[name]
    check_grads(jax.jit(f), args, order=1, modes=["fwd", "rev"], atol=1e-6, rtol=1e-6)
    check_grads(f, args, order=2, modes=["rev"], atol=1e-5, rtol=1e-5)  # grad of grad: the hvp call


def test_forward_mode_refusals_name_the_op(isolated):
    m = _csr(6, 5, 0.4, 5)
    a = BCSR((jnp.asarray(m.data), jnp.asarray(m.indices), jnp.asarray(m.indptr)), shape=m.shape)
    x = np.ones((5, 2))
    with pytest.raises(JaxBridgeError, match=r"sparse_ops\.jax\.ops\.csr_spmm: a derivative of its forward-mode"):
        jax.jacfwd(jax.jacfwd(lambda x: jnp.sum(soj.ops.csr_spmm(a, x) ** 3)))(x)

    @so.register("jax_habits_no_grad")
    class NoGrad(so.Op):
        @so.kernel()
        def dense(self, ctx, x, out):
            out[...] = x

    with pytest.raises(JaxBridgeError, match=r"sparse_ops\.jax\.ops\.jax_habits_no_grad: .*declares no gradient"):
        jax.jvp(soj.ops.jax_habits_no_grad, (jnp.ones(3),), (jnp.ones(3),))
    # csr_row_softmax's rule is an op declared differentiable = False: reverse mode runs it, forward
    # mode (which differentiates the rule) says so rather than answering zero
    sq = _csr(4, 4, 0.5, 10)
    d = jnp.asarray(sq.data)

    def softmax(d):
        return soj.ops.csr_row_softmax(BCSR((d, jnp.asarray(sq.indices), jnp.asarray(sq.indptr)), shape=sq.shape)).data

    assert jax.grad(lambda d: jnp.sum(softmax(d) ** 2))(d).shape == d.shape
    with pytest.raises(Exception, match=r"sparse_ops\.jax\.ops\.csr_row_softmax \(forward-mode derivative\): "
                                        r"forward mode .*'_csr_row_softmax_backward': it is declared differentiable = False"):
        jax.block_until_ready(jax.jvp(softmax, (d,), (d,)))


def test_a_constant_ffi_op_has_zero_tangents():
    m = _csr(4, 4, 0.5, 6)
    d = jnp.asarray(m.data)
    _, t = jax.jvp(lambda d: soj.ops.BlockGrad(BCSR((d, jnp.asarray(m.indices), jnp.asarray(m.indptr)),
                                                      shape=m.shape)).data, (d,), (jnp.ones_like(d),))
    assert not np.asarray(t).any()


# ---- BCSR with unsorted or repeated columns ------------------------------------------------------
def _messy():
    """A 3 x 4 csr with unsorted columns in row 0, a repeated column in row 2, and padding."""
    data = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 9.0])
    cols = np.array([3, 0, 1, 2, 2, 0, 0])  # row 0: 3, 0, 1; row 1: none; row 2: 2, 2, 0; a padding entry
    ptr = np.array([0, 3, 3, 6])
    dense = np.zeros((3, 4))
    for r in range(3):
        for k in range(ptr[r], ptr[r + 1]):
            dense[r, cols[k]] += data[k]
    return data, cols, ptr, dense


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_unsorted_and_repeated_columns_are_sorted_and_summed_on_the_way_in(index_dtype):
    data, cols, ptr, dense = _messy()
    a = BCSR((jnp.asarray(data), jnp.asarray(cols.astype(index_dtype)), jnp.asarray(ptr.astype(index_dtype))),
             shape=(3, 4))
    x = np.random.default_rng(0).standard_normal((4, 2))
    np.testing.assert_allclose(np.asarray(jax.jit(soj.ops.csr_spmm)(a, x)), dense @ x, rtol=1e-12)  # native path
    np.testing.assert_allclose(np.asarray(jax.jit(lambda a: soj.ops.sum(a, axis=1))(a)), dense.sum(axis=1), rtol=1e-12)
    sq = jax.jit(soj.ops.square)(a)  # a sparse result: canonical, declared so
    assert sq.indices_sorted and sq.unique_indices
    np.testing.assert_allclose(np.asarray(sq.todense()), dense ** 2, rtol=1e-12)
    tup = (data, cols.astype(index_dtype), ptr.astype(index_dtype), (3, 4))  # a components tuple too
    np.testing.assert_allclose(np.asarray(soj.ops.csr_spmm(tup, x)), dense @ x, rtol=1e-12)
    assert "sorted and summed" in soj.explain("csr_spmm", a, x)["csr_order"][0]


def test_each_stored_value_of_an_unsorted_csr_gets_its_entrys_gradient_and_tangent():
    data, cols, ptr, _ = _messy()
    idx, iptr = jnp.asarray(cols), jnp.asarray(ptr)
    rows = np.array([0, 0, 0, 2, 2, 2])
    x = np.random.default_rng(1).standard_normal((4, 2))

    def ours(d):
        return jnp.sum(jnp.tanh(soj.ops.csr_spmm(BCSR((d, idx, iptr), shape=(3, 4)), x)))

    def ref(d):  # padding (the last entry) is not part of the array
        return jnp.sum(jnp.tanh(jnp.zeros((3, 4)).at[rows, cols[:6]].add(d[:6]) @ x))

    d = jnp.asarray(data)
    np.testing.assert_allclose(np.asarray(jax.grad(ours)(d)), np.asarray(jax.grad(ref)(d)), rtol=1e-12, atol=1e-15)
    t = jnp.asarray(np.random.default_rng(2).standard_normal(7))
    np.testing.assert_allclose(jax.jvp(ours, (d,), (t,))[1], jax.jvp(ref, (d,), (t,))[1], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(jax.hessian(ours)(d)), np.asarray(jax.hessian(ref)(d)), rtol=1e-10,
                               atol=1e-12)


# ---- RowSparse where JAX expects an array ----------------------------------------------------------
def test_a_row_sparse_result_converts_and_scales():
    m = _csr(6, 5, 0.3, 7)
    a = BCSR((jnp.asarray(m.data), jnp.asarray(m.indices), jnp.asarray(m.indptr)), shape=m.shape)
    x = np.random.default_rng(3).standard_normal((6, 2))
    want = m.T @ x
    r = soj.ops.dot(a, x, transpose_a=True)
    assert isinstance(r, RowSparse)
    np.testing.assert_allclose(np.asarray(jnp.asarray(r)), want, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(r), want, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(jnp.ones((5, 2)) + r), want + 1, rtol=1e-12)  # JAX's operator converts
    np.testing.assert_allclose(np.asarray(jnp.sin(r)), np.sin(want), rtol=1e-12)
    for scaled, factor in ((r * 2.0, 2.0), (3 * r, 3.0), (r / 4, 0.25), (-r, -1.0), (r * jnp.float64(0.5), 0.5)):
        assert isinstance(scaled, RowSparse)
        np.testing.assert_allclose(np.asarray(scaled.todense()), factor * want, rtol=1e-12)
    for bad in (lambda: r + 1, lambda: 1.0 - r, lambda: r ** 2, lambda: 2 / r,
                lambda: r / 0.0, lambda: r * np.nan, lambda: np.inf * r):  # 0 / 0, 0 * nan: NaN rows
        with pytest.raises(TypeError, match=re.escape("r.todense() or jnp.asarray(r)") + ".*forward_stype='default'"):
            bad()
    jitted = jax.jit(lambda a, x: jnp.asarray(soj.ops.dot(a, x, transpose_a=True)) * 2)(a, x)
    np.testing.assert_allclose(np.asarray(jitted), 2 * want, rtol=1e-12)
    dense = soj.ops.dot(a, x, transpose_a=True, forward_stype="default")
    assert isinstance(dense, jax.Array)
    np.testing.assert_allclose(np.asarray(dense + 1), want + 1, rtol=1e-12)
    q = soj.ops.dot(a, 2 * x, transpose_a=True)  # two RowSparse: the row_sparse ops, row_sparse results
    for got, expect in ((r + q, 3 * want), (r - q, -want), (r * q, 2 * want * want)):
        assert isinstance(got, RowSparse)
        np.testing.assert_allclose(np.asarray(got), expect, rtol=1e-12)


# ---- jax.export ---------------------------------------------------------------------------------------
def test_jax_export_takes_lowered_dense_ops_as_plain_stablehlo():
    x = jnp.asarray(np.random.default_rng(4).standard_normal((3, 4)))
    f = jax.jit(lambda x: soj.ops.sum(soj.ops.relu(soj.ops.dot(x, x, transpose_b=True)), axis=1))
    exported = jax.export.export(f)(x)
    assert _CALL not in exported.mlir_module()
    np.testing.assert_allclose(np.asarray(exported.call(x)), np.maximum(np.asarray(x) @ np.asarray(x).T, 0).sum(1),
                               rtol=1e-12)


def test_jax_export_refuses_ffi_calls_and_runs_them_only_in_this_process_when_told():
    m = _csr(6, 5, 0.4, 8)
    a = BCSR((jnp.asarray(m.data), jnp.asarray(m.indices), jnp.asarray(m.indptr)), shape=m.shape)
    x = jnp.ones((5, 2))
    f = jax.jit(lambda a, x: soj.ops.square(a).data.sum() + soj.ops.csr_spmm(a, x))
    with pytest.raises(ValueError, match="(?s)custom calls whose targets have no compatibility guarantees"
                                         ".*@sparse_ops_"):
        jax.export.export(f)(a, x)
    text = f.lower(a, x).as_text()
    targets = sorted(set(re.findall(r"custom_call @(sparse_ops_\w+)", text)))
    assert targets, text
    checks = [jax.export.DisabledSafetyCheck.custom_call(t) for t in targets]
    exported = jax.export.export(f, disabled_checks=checks)(a, x)
    np.testing.assert_allclose(np.asarray(exported.call(a, x)), (m.data ** 2).sum() + m @ np.ones((5, 2)),
                               rtol=1e-12)
    from sparse_ops.jax.spec import forget

    forget("square")  # the call descriptions its ids name are gone (as in another process)
    with pytest.raises(Exception, match=r"no bridged call with id \d+: operator 'square' was registered again "
                                         r"\(replaced, or its plugin reloaded\) or removed after this computation was "
                                         r"traced.*jax.clear_caches\(\)"):
        jax.block_until_ready(exported.call(a, x))


def test_call_ids_differ_between_processes():
    """An exported FFI program carries the ids of this process's call descriptions: another
    process numbers its own calls differently, so such an id names none there (refused, as
    above) instead of naming another call that happens to share the number."""
    code = "import sparse_ops.jax.spec as s; print(s._new_id(), s._new_id())"
    ids = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
           for _ in range(2)]
    assert int(ids[0][1]) == int(ids[0][0]) + 1 and ids[0] != ids[1] and ids[0][0] != ids[1][0]


def test_vmap_stacks_row_sparse_results_with_batch_dimensions():
    """A RowSparse made under jax.vmap comes back with a leading batch dimension (as BCSR's
    n_batch): its shape says it, todense()/jnp.asarray give one dense array per example (not
    their sum), nnz counts per example, and a bridged op refuses it as an input, naming why."""
    m = sp.random(6, 5, density=0.4, format="csr", dtype=np.float32, random_state=0)
    a = BCSR((jnp.asarray(m.data), jnp.asarray(m.indices), jnp.asarray(m.indptr)), shape=m.shape)
    gs = jnp.asarray(np.random.RandomState(0).randn(3, 6, 2).astype(np.float32))
    ref = np.stack([m.T @ np.asarray(g) for g in gs])
    for f in (jax.vmap, lambda fn: jax.jit(jax.vmap(fn))):
        r = f(lambda g: soj.ops.dot(a, g, transpose_a=True))(gs)
        assert isinstance(r, RowSparse) and r.n_batch == 1 and r.shape == (3, 5, 2)
        np.testing.assert_allclose(jnp.asarray(r), ref, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.asarray(r * 2), 2 * ref, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(soj.nnz(r), [len(set(m.indices))] * 3)
    with pytest.raises(JaxBridgeError, match="batch dimensions.*stacked by jax.vmap"):
        soj.ops.sum(r)
    one = soj.ops.dot(a, gs[0], transpose_a=True)
    assert one.n_batch == 0 and one.shape == (5, 2)
    np.testing.assert_allclose(jnp.asarray(one), ref[0], rtol=1e-5, atol=1e-6)


def test_lowering_disabled_is_a_switch_and_a_with_block():
    """``lowering.disabled()`` switches at the call; as a ``with`` block it switches back."""
    def handler() -> str:
        return soj.explain("relu", jnp.ones(2))["handler"]

    assert handler().startswith("lowered")
    with lowering.disabled():
        assert not handler().startswith("lowered")
    assert handler().startswith("lowered")
    lowering.disabled(True)
    try:
        assert not handler().startswith("lowered")
    finally:
        lowering.disabled(False)
    assert handler().startswith("lowered")
