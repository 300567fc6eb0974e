"""Optimizer updates against NumPy references: dense, lazy and non-lazy row_sparse, in place."""
import numpy as np
import pytest

import sparse_ops as so
from sparse_ops.dispatch import InferenceError
from sparse_ops.registry import ParameterError


# ---- references (MXNet's dense formulas, float64) ------------------------------------------------
def _g(grad, p):
    g = grad * p.get("rescale_grad", 1.0)
    c = p.get("clip_gradient", -1.0)
    return np.clip(g, -c, c) if c >= 0 else g


def ref_sgd(w, grad, p):
    return (1 - p["lr"] * p.get("wd", 0)) * w - p["lr"] * _g(grad, p), []


def ref_sgd_mom(w, grad, mom, p):
    m = p.get("momentum", 0) * mom - p["lr"] * p.get("wd", 0) * w - p["lr"] * _g(grad, p)
    return w + m, [m]


def ref_adam(w, grad, mean, var, p):
    g = grad * p.get("rescale_grad", 1.0) + p.get("wd", 0) * w
    c = p.get("clip_gradient", -1.0)
    g = np.clip(g, -c, c) if c >= 0 else g
    b1, b2 = p.get("beta1", 0.9), p.get("beta2", 0.999)
    m = b1 * mean + (1 - b1) * g
    v = b2 * var + (1 - b2) * g * g
    return w - p["lr"] * m / (np.sqrt(v) + p.get("epsilon", 1e-8)), [m, v]


def ref_adagrad(w, grad, hist, p):
    g = _g(grad, p)
    h = hist + g * g
    return w - p["lr"] * (g / np.sqrt(h + p.get("epsilon", 1e-7)) + p.get("wd", 0) * w), [h]


CASES = {
    "sgd_update": (so.sgd_update, ref_sgd, 0, {"lr": 0.1, "wd": 0.05, "rescale_grad": 0.5, "clip_gradient": 0.4}),
    "sgd_mom_update": (so.sgd_mom_update, ref_sgd_mom, 1,
                       {"lr": 0.1, "momentum": 0.9, "wd": 0.05, "clip_gradient": 0.7}),
    "adam_update": (so.adam_update, ref_adam, 2,
                    {"lr": 0.01, "beta1": 0.8, "beta2": 0.99, "epsilon": 1e-6, "wd": 0.1, "rescale_grad": 2.0,
                     "clip_gradient": 1.0}),
    "adagrad_update": (so.adagrad_update, ref_adagrad, 1, {"lr": 0.1, "epsilon": 1e-6, "rescale_grad": 0.5}),
}
TOL = {"float16": 2e-2, "float32": 1e-5, "float64": 1e-12}


def _problem(rng, nstates, dtype, shape=(8, 3)):
    w = rng.standard_normal(shape).astype(dtype)
    g = rng.standard_normal(shape).astype(dtype)
    states = [np.abs(rng.standard_normal(shape)).astype(dtype) for _ in range(nstates)]
    return w, g, states


def _close(actual, expected, dtype):
    np.testing.assert_allclose(actual, expected, rtol=TOL[dtype], atol=TOL[dtype])


# ---- dense gradients ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_dense_update_in_place(name, dtype, rng):
    fn, ref, nstates, params = CASES[name]
    w, g, states = _problem(rng, nstates, dtype)
    w64, g64, s64 = w.astype(np.float64), g.astype(np.float64), [s.astype(np.float64) for s in states]
    exp_w, exp_states = ref(w64, g64, *s64, params)
    weight = so.array(w)
    st = [so.array(s) for s in states]
    assert so.explain(name, weight, so.array(g), *st, **params)["dispatch_mode"] == "fcompute"
    result = fn(weight, so.array(g), *st, out=weight, **params)
    assert result is weight and weight.dtype == np.dtype(dtype)
    _close(weight.asnumpy(), exp_w, dtype)
    for s, e in zip(st, exp_states):
        _close(s.asnumpy(), e, dtype)


@pytest.mark.parametrize("name", list(CASES))
def test_without_out_the_weight_is_left_alone_but_states_change(name, rng):
    fn, ref, nstates, params = CASES[name]
    w, g, states = _problem(rng, nstates, "float64")
    exp_w, exp_states = ref(w, g, *states, params)
    weight = so.array(w)
    st = [so.array(s) for s in states]
    buffers = [s.data for s in st]
    result = fn(weight, so.array(g), *st, **params)
    assert result is not weight
    np.testing.assert_array_equal(weight.asnumpy(), w)
    _close(result.asnumpy(), exp_w, "float64")
    for s, buf, e in zip(st, buffers, exp_states):
        assert s.data is buf  # updated in place, same buffer
        _close(s.asnumpy(), e, "float64")
    # out= another array: it receives the result, weight unchanged
    target = so.zeros(w.shape, dtype="float64")
    assert fn(so.array(w), so.array(g), *[so.array(s) for s in states], out=target, **params) is target
    _close(target.asnumpy(), exp_w, "float64")


# ---- row_sparse gradients -----------------------------------------------------------------------
def _rsp_grad(rng, dtype, index_dtype, shape, rows):
    values = rng.standard_normal((len(rows), *shape[1:])).astype(dtype)
    grad = so.row_sparse_array((values, np.array(rows, dtype=index_dtype)), shape=shape)
    dense = np.zeros(shape, dtype=np.float64)
    dense[list(rows)] = values
    return grad, dense


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_lazy_update_touches_only_gradient_rows(name, dtype, index_dtype, rng):
    fn, ref, nstates, params = CASES[name]
    shape, rows = (9, 2, 3), [1, 4, 8]
    w, _, states = _problem(rng, nstates, dtype, shape)
    grad, dense_grad = _rsp_grad(rng, dtype, index_dtype, shape, rows)
    weight = so.array(w)
    st = [so.array(s) for s in states]
    assert so.explain(name, weight, grad, *st, **params)["dispatch_mode"] == "fcompute_ex"
    assert fn(weight, grad, *st, out=weight, **params) is weight
    w64, s64 = w.astype(np.float64), [s.astype(np.float64) for s in states]
    exp_w, exp_states = ref(w64[rows], dense_grad[rows], *[s[rows] for s in s64], params)
    others = [r for r in range(shape[0]) if r not in rows]
    _close(weight.asnumpy()[rows], exp_w, dtype)
    np.testing.assert_array_equal(weight.asnumpy()[others], w[others])  # untouched, weight decay included
    for s, orig, e in zip(st, states, exp_states):
        _close(s.asnumpy()[rows], e, dtype)
        np.testing.assert_array_equal(s.asnumpy()[others], orig[others])


@pytest.mark.parametrize("name", ["sgd_update", "sgd_mom_update", "adam_update"])
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_non_lazy_update_is_the_dense_update(name, index_dtype, rng):
    fn, ref, nstates, params = CASES[name]
    shape, rows = (7, 4), [0, 5]
    w, _, states = _problem(rng, nstates, "float64", shape)
    grad, dense_grad = _rsp_grad(rng, "float64", index_dtype, shape, rows)
    exp_w, exp_states = ref(w, dense_grad, *states, params)
    weight, st = so.array(w), [so.array(s) for s in states]
    fn(weight, grad, *st, out=weight, lazy_update=False, **params)
    _close(weight.asnumpy(), exp_w, "float64")
    for s, e in zip(st, exp_states):
        _close(s.asnumpy(), e, "float64")
    assert not np.allclose(weight.asnumpy()[2], w[2])  # weight decay reached rows without gradient


@pytest.mark.parametrize("name", list(CASES))
def test_empty_row_sparse_gradient(name, rng):
    fn, ref, nstates, params = CASES[name]
    w, _, states = _problem(rng, nstates, "float32")
    grad = so.row_sparse_array((np.zeros((0, 3), np.float32), np.zeros(0, np.int64)), shape=w.shape)
    weight, st = so.array(w), [so.array(s) for s in states]
    result = fn(weight, grad, *st, **params)
    np.testing.assert_array_equal(result.asnumpy(), w)
    for s, orig in zip(st, states):
        np.testing.assert_array_equal(s.asnumpy(), orig)


@pytest.mark.parametrize("name", list(CASES))
def test_lazy_update_without_out_and_in_float16(name, rng):
    fn, ref, nstates, params = CASES[name]
    shape, rows = (6, 3), [2, 3]
    for dtype in ("float32", "float16"):
        w, _, states = _problem(rng, nstates, dtype, shape)
        grad, dense_grad = _rsp_grad(rng, dtype, "int64", shape, rows)
        weight, st = so.array(w), [so.array(s) for s in states]
        result = fn(weight, grad, *st, **params)
        np.testing.assert_array_equal(weight.asnumpy(), w)
        exp_w, _ = ref(w.astype(np.float64)[rows], dense_grad[rows],
                       *[s.astype(np.float64)[rows] for s in states], params)
        _close(result.asnumpy()[rows], exp_w, dtype)
        np.testing.assert_array_equal(result.asnumpy()[[0, 1, 4, 5]], w[[0, 1, 4, 5]])


def test_strided_state_is_updated_in_place(rng):
    base = np.zeros((5, 6))
    mom = so.NDArray(base[:, ::2])  # not contiguous: the vectorised path writes through the view
    grad, dense_grad = _rsp_grad(rng, "float64", "int32", (5, 3), [1, 3])
    weight = so.array(np.ones((5, 3)))
    so.sgd_mom_update(weight, grad, mom, lr=0.5, momentum=0.9, out=weight)
    np.testing.assert_allclose(base[:, ::2], -0.5 * dense_grad)
    np.testing.assert_allclose(weight.asnumpy(), 1 - 0.5 * dense_grad)


# ---- parameters and errors ----------------------------------------------------------------------
def test_positional_parameters_follow_mxnet_order():
    w, g, mom = so.array(np.ones(3)), so.array(np.ones(3)), so.array(np.zeros(3))
    out = so.sgd_mom_update(w, g, mom, 0.1, 0.9)  # lr, momentum
    np.testing.assert_allclose(out.asnumpy(), 0.9)
    np.testing.assert_allclose(mom.asnumpy(), -0.1)


def test_errors_and_flags():
    w = so.array(np.ones((3, 2), np.float32))
    with pytest.raises(ParameterError, match="lr"):
        so.sgd_update(w, w)
    with pytest.raises(InferenceError, match="shape"):
        so.sgd_update(w, so.array(np.ones((2, 2), np.float32)), lr=0.1)
    with pytest.raises(InferenceError, match="dtype"):
        so.sgd_update(w, so.array(np.ones((3, 2))), lr=0.1)
    with pytest.raises(InferenceError, match="float"):
        so.sgd_update(so.array(np.ones(3, np.int32)), so.array(np.ones(3, np.int32)), lr=0.1)
    for name in CASES:
        op = so.get_op(name)
        assert not op.differentiable
    assert so.get_op("adam_update").mutate == ("mean", "var")
    assert so.get_op("sgd_mom_update").mutate == ("mom",)


def test_storage_fallback_writes_weight_and_states_back_in_their_storage_types():
    """Combinations without a sparse kernel take MXNet's storage fallback: a csr weight stays
    csr with the dense update's values; row_sparse states of a dense-only update (and of a
    dense weight) receive the update too."""
    from sparse_ops.errors import StorageFallbackWarning

    dense_w = np.array([[1.0, 0.0, 2.0], [0.0, 0.0, 3.0]], np.float32)
    w = so.array(dense_w).tostype("csr")
    g = so.array(np.ones((2, 3), np.float32)).tostype("csr")
    so.dispatch._warned.clear()  # the warning comes once per signature: forget earlier ones
    with pytest.warns(StorageFallbackWarning, match="sgd_update"):
        r = so.sgd_update(w, g, lr=0.1, wd=0.5, out=w)
    assert r is w and w.stype == "csr"
    np.testing.assert_allclose(w.asnumpy(), (1 - 0.1 * 0.5) * dense_w - 0.1, rtol=1e-6)

    ones = np.ones((4, 2), np.float32)
    grad = np.zeros((4, 2), np.float32)
    grad[1] = 2.0
    w = so.array(ones).tostype("row_sparse")
    n = so.zeros((4, 2), stype="row_sparse", dtype=np.float32)
    with pytest.warns(StorageFallbackWarning, match="rmsprop_update"):
        so.rmsprop_update(w, so.array(grad).tostype("row_sparse"), n, lr=0.1, gamma1=0.9, out=w)
    n_ref = 0.1 * grad ** 2
    assert w.stype == "row_sparse" and n.stype == "row_sparse"
    np.testing.assert_allclose(n.asnumpy(), n_ref, rtol=1e-6)
    np.testing.assert_allclose(w.asnumpy(), ones - 0.1 * grad / np.sqrt(n_ref + 1e-8), rtol=1e-6)

    w = so.array(ones)
    mom = so.array(ones).tostype("row_sparse")
    with pytest.warns(StorageFallbackWarning):
        so.sgd_mom_update(w, so.array(ones), mom, lr=0.1, momentum=0.5, out=w)
    assert mom.stype == "row_sparse"
    np.testing.assert_allclose(mom.asnumpy(), 0.5 - 0.1, rtol=1e-6)
    np.testing.assert_allclose(w.asnumpy(), 1.4, rtol=1e-6)


# ---- serial and parallel row kernels ------------------------------------------------------------
@pytest.fixture(params=["serial", "parallel"])
def row_kernels(request, monkeypatch):
    """The form of the lazy-update kernels under test: small gradients run the serial one;
    "parallel" lowers the size threshold so even these run the parallel driver."""
    from sparse_ops.sdk import rowkernel

    if request.param == "parallel":
        monkeypatch.setattr(rowkernel, "PARALLEL_MIN_WORK", 0)
    return request.param


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("clip", [None, 0.4])
def test_lazy_update_over_many_row_blocks(row_kernels, name, clip, rng):
    """600 gradient rows of 1,000 (several blocks of the parallel driver), with and without clipping."""
    fn, ref, nstates, params = CASES[name]
    params = dict(params, clip_gradient=-1.0 if clip is None else clip)
    shape = (1000, 5)
    rows = np.sort(rng.choice(shape[0], size=600, replace=False))
    w, _, states = _problem(rng, nstates, "float32", shape)
    grad, dense_grad = _rsp_grad(rng, "float32", "int64", shape, rows)
    weight = so.array(w)
    st = [so.array(s) for s in states]
    fn(weight, grad, *st, out=weight, **params)
    w64, s64 = w.astype(np.float64), [s.astype(np.float64) for s in states]
    exp_w, exp_states = ref(w64[rows], dense_grad[rows], *[s[rows] for s in s64], params)
    others = np.setdiff1d(np.arange(shape[0]), rows)
    _close(weight.asnumpy()[rows], exp_w, "float32")
    np.testing.assert_array_equal(weight.asnumpy()[others], w[others])
    for s, orig, e in zip(st, states, exp_states):
        _close(s.asnumpy()[rows], e, "float32")
        np.testing.assert_array_equal(s.asnumpy()[others], orig[others])


def test_ftrl_row_sparse_update_keeps_nan_as_the_dense_rule_does():
    """A NaN in a stored row of the gradient gives NaN weights on the lazy row_sparse path
    as on the dense one, not 0 (which would hide the divergence); a NaN lr is refused."""
    w = np.array([[1., 2.], [3., 4.]])
    g = np.array([[0., 0.], [np.nan, 1.]])

    def states():
        return [so.zeros((2, 2), dtype="float64"), so.zeros((2, 2), dtype="float64")]

    dense = so.ftrl_update(so.array(w), so.array(g), *states(), lr=0.1).asnumpy()
    rows = so.ftrl_update(so.array(w), so.row_sparse_array((g[1:], np.array([1])), shape=(2, 2)), *states(),
                          lr=0.1).asnumpy()
    np.testing.assert_array_equal(rows[1], dense[1])  # [nan, 1.9495...]
    assert np.isnan(rows[1, 0])
    ok = so.row_sparse_array((np.array([[0.5, 1.]]), np.array([1])), shape=(2, 2))
    with pytest.raises(ParameterError, match="ftrl_update.*lr must be finite, got nan"):
        so.ftrl_update(so.array(w), ok, *states(), lr=float("nan"))


def test_ftml_with_lr_zero_divides_as_ieee():
    """lr = 0 is a division by zero in d_t: inf, then NaN weights, as MXNet's C kernel gives
    (no Python ZeroDivisionError)."""
    with np.errstate(invalid="ignore"):
        out = so.ftml_update(so.array(np.ones((2, 2))), so.array(np.ones((2, 2))),
                             *[so.zeros((2, 2), dtype="float64") for _ in range(3)], lr=0.0, t=1)
    assert np.isnan(out.asnumpy()).all()


def test_updates_write_into_their_weight_without_a_new_array():
    """out=weight (MXNet's in-place update) is handed to the kernel itself (the updates
    declare out_may_alias): no temporary of the weight's size, which a 200k-row table would
    fault in on every step (tests/test_malloc.py counts those faults)."""
    w = so.array(np.ones((4, 3)))
    g = so.row_sparse_array((np.ones((1, 3)), np.array([2])), shape=(4, 3))
    assert so.sgd_update(w, g, lr=0.5, lazy_update=True, out=w) is w
    np.testing.assert_array_equal(w.asnumpy(), [[1, 1, 1], [1, 1, 1], [0.5, 0.5, 0.5], [1, 1, 1]])
    assert all(so.registry.get_op(n).cls.out_may_alias for n in so.list_ops() if n.endswith("_update")
               or n.startswith("lamb_update"))


# ---- AdamW (MXNet's contrib ops) and group AdaGrad ------------------------------------------------
def _adamw_reference(w, g, m, v, s, lr, eta, wd, beta1=0.9, beta2=0.999, eps=1e-8, clip=-1.0):
    g = s * g
    if clip >= 0:
        g = np.clip(g, -clip, clip)
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    return w - eta * (lr * m / (np.sqrt(v) + eps) + wd * w), m, v


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("clip", [-1.0, 0.3])
def test_adamw_update_matches_the_formula_and_updates_the_states_in_place(dtype, clip):
    rng = np.random.default_rng(0)
    w, g, m = (rng.standard_normal((5, 4)).astype(dtype) for _ in range(3))
    v = rng.random((5, 4)).astype(dtype)
    weight, mean, var = so.array(w), so.array(m), so.array(v)
    so.ops._adamw_update(weight, so.array(g), mean, var, so.array(np.array([4.0], np.float32)), lr=0.1, eta=0.5,
                         wd=0.01, clip_gradient=clip, out=weight)
    want_w, want_m, want_v = _adamw_reference(w.astype(np.float64), g, m, v, 4.0, 0.1, 0.5, 0.01, clip=clip)
    tol = 1e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(weight.asnumpy(), want_w, rtol=tol, atol=tol)
    np.testing.assert_allclose(mean.asnumpy(), want_m, rtol=tol, atol=tol)
    np.testing.assert_allclose(var.asnumpy(), want_v, rtol=tol, atol=tol)


@pytest.mark.parametrize("factor", [0.0, np.nan, np.inf, -np.inf])
def test_adamw_skips_the_update_for_a_factor_that_is_not_finite_or_zero(factor):
    """What a mixed-precision loss scaler sends on overflow: weight, master weight and states
    are left exactly as they were (MXNet's rule)."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((3, 2)).astype(np.float16)
    weight, grad = so.array(w), so.array(rng.standard_normal((3, 2)).astype(np.float16))
    mean, var, master = so.zeros((3, 2)), so.ones((3, 2)), so.array(w.astype(np.float32))
    scale = so.array(np.array([factor], np.float32))
    so.ops._mp_adamw_update(weight, grad, mean, var, master, scale, lr=0.1, eta=1.0, out=weight)
    np.testing.assert_array_equal(weight.asnumpy(), w)
    np.testing.assert_array_equal(master.asnumpy(), w.astype(np.float32))
    np.testing.assert_array_equal(mean.asnumpy(), 0)
    np.testing.assert_array_equal(var.asnumpy(), 1)


def test_mp_adamw_steps_the_float32_master_and_rounds_it_into_the_weight():
    rng = np.random.default_rng(2)
    w32 = rng.standard_normal((4, 3)).astype(np.float32)
    g16 = rng.standard_normal((4, 3)).astype(np.float16)
    weight, master = so.array(w32.astype(np.float16)), so.array(w32)
    mean, var = so.zeros((4, 3)), so.zeros((4, 3))
    out = so.ops._mp_adamw_update(weight, so.array(g16), mean, var, master, so.array(np.array([1.0], np.float32)),
                                  lr=0.01, eta=1.0, wd=0.1)
    want, _, _ = _adamw_reference(w32.astype(np.float64), g16.astype(np.float64), 0.0, 0.0, 1.0, 0.01, 1.0, 0.1)
    np.testing.assert_allclose(master.asnumpy(), want, rtol=1e-6, atol=1e-6)
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out.asnumpy(), master.asnumpy().astype(np.float16))
    with pytest.raises(so.OperatorError, match="mean must be float32"):
        so.ops._mp_adamw_update(weight, so.array(g16), so.zeros((4, 3), dtype="float16"), var, master,
                                so.array(np.array([1.0], np.float32)), lr=0.01, eta=1.0)


def test_the_mxnet_face_takes_adamw_as_mxnet_does():
    """mx.nd.contrib.adamw_update with a number or an array as rescale_grad, and the
    multi-tensor form, each weight with its own rate, decay and multiplier."""
    import sparse_ops.compat.mxnet as mx

    rng = np.random.default_rng(3)
    shapes = [(3, 4), (2, 5)]
    ws = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    gs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    weights, grads = [mx.nd.array(w) for w in ws], [mx.nd.array(g) for g in gs]
    means, vars_ = [mx.nd.zeros(s) for s in shapes], [mx.nd.zeros(s) for s in shapes]
    lrs, wds, etas = [0.1, 0.2], [0.01, 0.0], [1.0, 0.5]
    mx.nd.contrib.multi_adamw_update(weights, grads, means, vars_, 2.0, lrs=lrs, wds=wds, etas=etas, out=weights)
    for i in range(2):
        want, _, _ = _adamw_reference(ws[i].astype(np.float64), gs[i], 0.0, 0.0, 2.0, lrs[i], etas[i], wds[i])
        np.testing.assert_allclose(weights[i].asnumpy(), want, rtol=1e-5, atol=1e-6)
    single = mx.nd.array(ws[0])
    mx.nd.contrib.adamw_update(single, grads[0], mx.nd.zeros((3, 4)), mx.nd.zeros((3, 4)), mx.nd.array([2.0]),
                               lr=0.1, eta=1.0, wd=0.01, out=single)
    np.testing.assert_allclose(single.asnumpy(), weights[0].asnumpy(), rtol=1e-6)
    with pytest.raises(mx.base.MXNetError, match="lrs holds 1 values for 2 weights"):
        mx.nd.contrib.multi_adamw_update(weights, grads, means, vars_, 1.0, lrs=[0.1], wds=wds, etas=etas,
                                         out=weights)


@pytest.mark.parametrize("gstype", ["default", "row_sparse"])
def test_group_adagrad_updates_each_row_with_one_rate(gstype):
    rng = np.random.default_rng(4)
    w = rng.standard_normal((5, 3))
    g = rng.standard_normal((5, 3))
    g[[1, 3]] = 0
    hist = rng.random((5, 1))
    weight, history = so.array(w), so.array(hist)
    grad = so.array(g).tostype(gstype)
    so.ops._contrib_group_adagrad_update(weight, grad, history, lr=0.1, rescale_grad=2.0, clip_gradient=0.8,
                                         out=weight)
    gg = np.clip(2.0 * g, -0.8, 0.8)
    rows = [0, 2, 4] if gstype == "row_sparse" else list(range(5))  # a row_sparse grad's rows only
    want_h = hist.copy()
    want_h[rows] += (gg[rows] ** 2).mean(axis=1, keepdims=True)
    want_w = w.copy()
    want_w[rows] -= 0.1 * gg[rows] / np.sqrt(want_h[rows] + 1e-5)
    np.testing.assert_allclose(history.asnumpy(), want_h, rtol=1e-12)
    np.testing.assert_allclose(weight.asnumpy(), want_w, rtol=1e-12)


def test_group_adagrad_optimizer_of_the_mxnet_face_matches_its_python_form():
    import sparse_ops.compat.mxnet as mx

    opt = mx.optimizer.contrib.GroupAdaGrad(learning_rate=0.1, rescale_grad=0.5, clip_gradient=0.4)
    rng = np.random.default_rng(5)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    weight = mx.nd.array(w).tostype("row_sparse")
    state = opt.create_state(0, weight)
    assert state.shape == (4, 1) and state.stype == "row_sparse"
    g = rng.standard_normal((4, 3)).astype(np.float32)
    opt.update(0, weight, mx.nd.array(g).tostype("row_sparse"), state)
    gg = np.clip(0.5 * g, -0.4, 0.4)
    h = (gg ** 2).mean(axis=1, keepdims=True)
    np.testing.assert_allclose(weight.asnumpy(), w - 0.1 * gg / np.sqrt(h + 1e-5), rtol=1e-5)
    assert isinstance(mx.optimizer.create("groupadagrad"), mx.optimizer.contrib.GroupAdaGrad)
    with pytest.raises(mx.base.MXNetError, match="weight decay is not supported"):
        mx.optimizer.contrib.GroupAdaGrad(wd=0.1).update(0, weight, mx.nd.array(g), state)


def test_states_and_out_that_share_memory_are_refused_before_anything_is_written():
    """Two arrays an update writes (its states, out=) sharing memory would lose one update
    without a word: refused naming both, the arrays left as they were; out= the weight
    (the usual form) is fine."""
    w = so.array(np.ones((2, 2), np.float32))
    g = so.array(np.full((2, 2), 0.5, np.float32))
    m, v = so.zeros((2, 2)), so.zeros((2, 2))
    for call, names in [(lambda: so.adam_update(w, g, m, m, lr=0.1), "'mean' and 'var'"),
                        (lambda: so.adam_update(w, g, m, v, lr=0.1, out=m), "'mean' and out="),
                        (lambda: so.sgd_mom_update(w, g, m, lr=0.1, momentum=0.9, out=m), "'mom' and out="),
                        (lambda: so.adam_update(w, g, m, so.NDArray(m._data.T, m.device), lr=0.1), "share memory")]:
        with pytest.raises(so.OperatorError, match=names):
            call()
        np.testing.assert_array_equal(m.asnumpy(), 0)
        np.testing.assert_array_equal(w.asnumpy(), 1)
    so.adam_update(w, g, m, v, lr=0.1, out=w)
    assert (w.asnumpy() < 1).all() and (m.asnumpy() != 0).all() and (v.asnumpy() != 0).all()


@pytest.mark.parametrize("call,message", [
    (lambda w, g, z: so.adam_update(w, g, z, z.copy(), lr=0.1, beta1=1.5), "adam_update.*beta1 must be in \\[0, 1\\)"),
    (lambda w, g, z: so.adam_update(w, g, z, z.copy(), lr=0.1, beta2=1.0), "beta2 must be in \\[0, 1\\), got 1.0"),
    (lambda w, g, z: so.adam_update(w, g, z, z.copy(), lr=0.1, epsilon=-1.0), "epsilon must be finite and non-neg"),
    (lambda w, g, z: so.rmsprop_update(w, g, z, lr=0.1, gamma1=2.0), "rmsprop_update.*gamma1"),
    (lambda w, g, z: so.ops.lamb_update_phase1(w, g, z, z.copy(), t=0, wd=0.0), "t \\(the update's number\\)"),
    (lambda w, g, z: so.ops.ftml_update(w, g, z, z.copy(), z.copy(), lr=0.1, t=0), "ftml_update.*at least 1"),
    (lambda w, g, z: so.sgd_update(w, g, lr=float("inf")), "sgd_update.*lr must be finite"),
    (lambda w, g, z: so.sgd_mom_update(w, g, z, lr=0.1, momentum=float("nan")), "momentum must be finite")])
def test_hyperparameters_out_of_range_are_refused_by_name(call, message):
    """As torch.optim and MXNet's optimizer classes refuse them: a decay of 1 or more, a
    negative epsilon, t = 0 (bias corrections divide by zero), a non-finite rate: each gave
    NaN or diverging weights without a word. The arrays are left as they were."""
    w, g, z = so.array(np.ones((2, 2), np.float32)), so.ones((2, 2)), so.zeros((2, 2))
    with pytest.raises(ParameterError, match=message):
        call(w, g, z)
    np.testing.assert_array_equal(w.asnumpy(), 1)
    np.testing.assert_array_equal(z.asnumpy(), 0)
