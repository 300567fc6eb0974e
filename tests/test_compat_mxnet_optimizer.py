"""``mx.optimizer`` and ``mx.lr_scheduler`` against NumPy references of MXNet 1.9's update
formulas: dense and row_sparse gradients, lazy and standard updates, weight decay,
rescale_grad, clip_gradient, momentum states, multi_precision float16; the Updater's states;
create / register; the schedules; the refusals."""
import pickle
import warnings

import numpy as np
import pytest

import sparse_ops as so
import sparse_ops.compat.mxnet as mx
from sparse_ops.compat.mxnet.base import MXNetError

SHAPE = (6, 4)
GRAD_ROWS = ([1, 3], [0, 3, 5], [2], [])  # stored rows of the row_sparse gradient at each step


# ---- NumPy references (float64), one step on the rows ``r`` ------------------------------------
def _clip(x, c):
    return np.clip(x, -c, c) if c else x  # the optimizers pass clip_gradient only when truthy


def ref_sgd(p, w, g, st, lr, wd, t):
    gg = _clip(p.get("rescale_grad", 1.0) * g, p.get("clip_gradient"))
    mom = p.get("momentum", 0.0)
    if mom:
        m = mom * st[0] - lr * wd * w - lr * gg
        return w + m, [m]
    return (1 - lr * wd) * w - lr * gg, []


def ref_nag(p, w, g, st, lr, wd, t):
    gg = _clip(p.get("rescale_grad", 1.0) * g, p.get("clip_gradient"))
    mom = p.get("momentum", 0.0)
    if not mom:
        return (1 - lr * wd) * w - lr * gg, []
    m = mom * st[0]
    step = lr * (gg + wd * w)
    return w - m + (mom + 1) * (m - step), [m - step]


def ref_signum(p, w, g, st, lr, wd, t):
    gg = _clip(p.get("rescale_grad", 1.0) * g, p.get("clip_gradient"))
    mom, wd_lh = p.get("momentum", 0.9), p.get("wd_lh", 0.0)
    if not mom:
        return (1 - lr * wd) * w - lr * np.sign(g), []
    m = mom * st[0] - (1 - mom) * wd * w - (1 - mom) * gg
    return (1 - lr * wd_lh) * w + lr * np.sign(m), [m]


def ref_adam(p, w, g, st, lr, wd, t):
    b1, b2, eps = p.get("beta1", 0.9), p.get("beta2", 0.999), p.get("epsilon", 1e-8)
    gg = _clip(p.get("rescale_grad", 1.0) * g + wd * w, p.get("clip_gradient"))
    m = b1 * st[0] + (1 - b1) * gg
    v = b2 * st[1] + (1 - b2) * gg * gg
    lr_t = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
    return w - lr_t * m / (np.sqrt(v) + eps), [m, v]


def ref_adagrad(p, w, g, st, lr, wd, t):
    gg = _clip(p.get("rescale_grad", 1.0) * g, p.get("clip_gradient"))
    h = st[0] + gg * gg
    return w - lr * (gg / np.sqrt(h + p.get("eps", 1e-7)) + wd * w), [h]


def ref_rmsprop(p, w, g, st, lr, wd, t):
    g1, g2, eps = p.get("gamma1", 0.9), p.get("gamma2", 0.9), p.get("epsilon", 1e-8)
    gg = _clip(p.get("rescale_grad", 1.0) * g + wd * w, p.get("clip_gradient"))
    cw = p.get("clip_weights")
    if p.get("centered"):
        n = (1 - g1) * gg * gg + g1 * st[0]
        gm = (1 - g1) * gg + g1 * st[1]
        delta = g2 * st[2] - lr * gg / np.sqrt(n - gm * gm + eps)
        return _clip(w + delta, cw), [n, gm, delta]
    n = (1 - g1) * gg * gg + g1 * st[0]
    return _clip(w - lr * gg / np.sqrt(n + eps), cw), [n]


def ref_ftrl(p, w, g, st, lr, wd, t):
    lamda1, beta = p.get("lamda1", 0.01), p.get("beta", 1.0)
    gg = _clip(p.get("rescale_grad", 1.0) * g, p.get("clip_gradient"))
    z, n = st
    z = z + gg - (np.sqrt(n + gg * gg) - np.sqrt(n)) * w / lr
    n = n + gg * gg
    return (np.sign(z) * lamda1 - z) / ((beta + np.sqrt(n)) / lr + wd) * (np.abs(z) > lamda1), [z, n]


def ref_ftml(p, w, g, st, lr, wd, t):
    b1, b2, eps = p.get("beta1", 0.6), p.get("beta2", 0.999), p.get("epsilon", 1e-8)
    gg = _clip(p.get("rescale_grad", 1.0) * g + wd * w, p.get("clip_gradient"))
    d, v, z = st
    v = b2 * v + (1 - b2) * gg * gg
    d_t = (1 - b1 ** t) / lr * (np.sqrt(v / (1 - b2 ** t)) + eps)
    z = b1 * z + (1 - b1) * gg - (d_t - b1 * d) * w
    return -z / d_t, [d_t, v, z]


def ref_lamb(p, w, g, st, lr, wd, t):
    b1, b2, eps = p.get("beta1", 0.9), p.get("beta2", 0.999), p.get("epsilon", 1e-6)
    gg = _clip(p.get("rescale_grad", 1.0) * g, p.get("clip_gradient"))
    m = b1 * st[0] + (1 - b1) * gg
    v = b2 * st[1] + (1 - b2) * gg * gg
    if p.get("bias_correction", True):
        direction = (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps) + wd * w
    else:
        direction = m / (np.sqrt(v) + eps) + wd * w
    r1, r2 = np.linalg.norm(w), np.linalg.norm(direction)
    if p.get("lower_bound"):
        r1 = max(r1, p["lower_bound"])
    if p.get("upper_bound"):
        r1 = min(r1, p["upper_bound"])
    ratio = 1.0 if r1 == 0 or r2 == 0 else r1 / r2
    return w - lr * ratio * direction, [m, v]


def ref_adamax(p, w, g, st, lr, wd, t):
    b1, b2 = p.get("beta1", 0.9), p.get("beta2", 0.999)
    gg = _clip(p.get("rescale_grad", 1.0) * g + wd * w, p.get("clip_gradient"))
    m = b1 * st[0] + (1 - b1) * gg
    u = np.maximum(b2 * st[1], np.abs(gg))
    return w - lr / (1 - b1 ** t) * m / u, [m, u]


def ref_nadam(p, w, g, st, lr, wd, t):
    b1, b2, eps, decay = p.get("beta1", 0.9), p.get("beta2", 0.999), p.get("epsilon", 1e-8), 0.004
    gg = _clip(p.get("rescale_grad", 1.0) * g + wd * w, p.get("clip_gradient"))

    def mom(k):
        return b1 * (1 - 0.5 * 0.96 ** (k * decay))

    schedule = np.prod([mom(k) for k in range(1, t + 1)])
    m = b1 * st[0] + (1 - b1) * gg
    v = b2 * st[1] + (1 - b2) * gg * gg
    m_bar = (1 - mom(t)) * gg / (1 - schedule) + mom(t + 1) * m / (1 - schedule * mom(t + 1))
    return w - lr * m_bar / (np.sqrt(v / (1 - b2 ** t)) + eps), [m, v]


def ref_adadelta(p, w, g, st, lr, wd, t):
    rho, eps = p.get("rho", 0.9), p.get("epsilon", 1e-5)
    gg = _clip(p.get("rescale_grad", 1.0) * g, p.get("clip_gradient"))
    acc_g = rho * st[0] + (1 - rho) * gg * gg
    delta = np.sqrt(st[1] + eps) / np.sqrt(acc_g + eps) * gg
    acc_d = rho * st[1] + (1 - rho) * delta * delta
    return w - (delta + wd * w), [acc_g, acc_d]


REFS = {"sgd": ref_sgd, "nag": ref_nag, "signum": ref_signum, "adam": ref_adam, "adagrad": ref_adagrad,
        "rmsprop": ref_rmsprop, "ftrl": ref_ftrl, "ftml": ref_ftml, "lamb": ref_lamb, "adamax": ref_adamax,
        "nadam": ref_nadam, "adadelta": ref_adadelta}
DEFAULT_LR = {"adam": 0.001, "rmsprop": 0.001, "ftrl": 0.1, "lamb": 0.001, "adamax": 0.002, "nadam": 0.001}
N_STATES = {"adam": 2, "adagrad": 1, "ftrl": 2, "ftml": 3, "lamb": 2, "adamax": 2, "nadam": 2, "adadelta": 2}


def n_states(name, p):
    if name in ("sgd", "nag"):
        return 1 if p.get("momentum", 0.0) else 0
    if name == "signum":
        return 1 if p.get("momentum", 0.9) else 0
    if name == "rmsprop":
        return 3 if p.get("centered") else 1
    return N_STATES[name]


def lazy_rows(name, p, stype):
    """Whether a row_sparse gradient updates only its rows under these arguments."""
    if stype != "row_sparse":
        return False
    if name == "adagrad":
        return True
    if name in ("sgd", "adam"):
        return p.get("lazy_update", True)
    if name == "ftrl":  # MXNet: lazy for a row_sparse weight only; lazy_update=True asks it of a dense one
        return p.get("lazy_update", False)
    return name == "nag" and not p.get("momentum", 0.0)  # MXNet's NAG calls sgd_update (lazy) without momentum


CASES = [
    ("sgd", {}),
    ("sgd", {"learning_rate": 0.1, "wd": 0.05, "rescale_grad": 0.5, "clip_gradient": 0.3}),
    ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.03, "clip_gradient": 0.4}),
    ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.03, "lazy_update": False}),
    ("sgd", {"learning_rate": 0.2, "wd": 0.07, "rescale_grad": 0.8, "lazy_update": False}),
    ("nag", {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.03, "rescale_grad": 0.8, "clip_gradient": 0.5}),
    ("nag", {"learning_rate": 0.1, "wd": 0.03}),
    ("signum", {"learning_rate": 0.05, "momentum": 0.9, "wd": 0.03, "wd_lh": 0.01, "clip_gradient": 0.4}),
    ("signum", {"learning_rate": 0.05, "momentum": 0.0, "wd": 0.03}),
    ("adam", {}),
    ("adam", {"learning_rate": 0.01, "beta1": 0.8, "beta2": 0.99, "epsilon": 1e-6, "wd": 0.1, "rescale_grad": 2.0,
              "clip_gradient": 1.0}),
    ("adam", {"learning_rate": 0.01, "wd": 0.05, "lazy_update": False}),
    ("adagrad", {"learning_rate": 0.1, "eps": 1e-6, "rescale_grad": 0.5, "clip_gradient": 0.4}),
    ("adagrad", {"learning_rate": 0.1, "wd": 0.02}),
    ("rmsprop", {"learning_rate": 0.01, "wd": 0.03, "rescale_grad": 0.8, "clip_gradient": 0.5}),
    ("rmsprop", {"learning_rate": 0.01, "clip_weights": 0.7, "gamma1": 0.8}),
    ("rmsprop", {"learning_rate": 0.01, "centered": True, "wd": 0.03, "clip_gradient": 0.4, "clip_weights": 0.9}),
    ("ftrl", {}),
    ("ftrl", {"lamda1": 0.05, "beta": 0.5, "wd": 0.05, "rescale_grad": 0.8, "clip_gradient": 0.5}),
    ("ftrl", {"learning_rate": 0.2, "wd": 0.07, "lazy_update": True}),
    ("ftml", {"learning_rate": 0.1, "wd": 0.02, "rescale_grad": 0.8, "clip_gradient": 0.5}),
    ("ftml", {"learning_rate": 0.05, "beta1": 0.5, "beta2": 0.99, "epsilon": 1e-6}),
    ("lamb", {"learning_rate": 0.01, "wd": 0.03, "rescale_grad": 0.8, "clip_gradient": 0.5}),
    ("lamb", {"learning_rate": 0.01, "bias_correction": False, "lower_bound": 0.5, "upper_bound": 2.0}),
    ("adamax", {"learning_rate": 0.01, "wd": 0.02, "clip_gradient": 0.5}),
    ("nadam", {"learning_rate": 0.01, "wd": 0.02, "rescale_grad": 0.5}),
    ("adadelta", {"rho": 0.8, "wd": 0.02, "clip_gradient": 0.6}),
]


def _grad(rng, stype, step, dtype):
    g = rng.standard_normal(SHAPE).astype(dtype)
    if stype == "default":
        return g, mx.nd.array(g, dtype=dtype)
    rows = GRAD_ROWS[step]
    dense = np.zeros(SHAPE, dtype)
    dense[rows] = g[rows]
    arr = mx.nd.sparse.row_sparse_array((g[rows], np.array(rows, dtype=np.int64)), shape=SHAPE, dtype=dtype)
    return dense, arr


def _run(name, p, stype, rng, steps=4):
    """Four steps through an Updater and through the reference; returns both weights and states."""
    opt = mx.optimizer.create(name, **p)
    upd = mx.optimizer.get_updater(opt)
    w0 = rng.standard_normal(SHAPE).astype(np.float32)
    weight = mx.nd.array(w0)
    ref_w = w0.astype(np.float64)
    ref_st = [np.zeros(SHAPE) for _ in range(n_states(name, p))]
    lr = p.get("learning_rate", DEFAULT_LR.get(name, 0.01))
    wd = p.get("wd", 0.0)
    for step in range(steps):
        g_dense, grad = _grad(rng, stype, step, np.float32)
        upd(0, grad, weight)
        rows = GRAD_ROWS[step] if lazy_rows(name, p, stype) else list(range(SHAPE[0]))
        new_w, new_st = REFS[name](p, ref_w[rows], g_dense[rows].astype(np.float64), [s[rows] for s in ref_st], lr,
                                   wd, step + 1)
        ref_w[rows] = new_w
        for s, v in zip(ref_st, new_st):
            s[rows] = v
    state = upd.states[0]
    states = [] if state is None else [state] if isinstance(state, mx.nd.NDArray) else list(state)
    return weight, ref_w, states, ref_st


@pytest.mark.parametrize("stype", ["default", "row_sparse"])
@pytest.mark.parametrize("name,params", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_updates_match_mxnet_formulas(name, params, stype, rng):
    weight, ref_w, states, ref_st = _run(name, params, stype, rng)
    assert weight.dtype == np.float32 and weight.stype == "default"
    np.testing.assert_allclose(weight.asnumpy(), ref_w, rtol=1e-5, atol=1e-6)
    assert len(states) == len(ref_st)
    for s, r in zip(states, ref_st):
        assert s.dtype == np.float32
        np.testing.assert_allclose(s.asnumpy(), r, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name,params", [("sgd", {"momentum": 0.9, "wd": 0.1}), ("adam", {"wd": 0.1}),
                                         ("ftrl", {"wd": 0.1, "lazy_update": True}), ("adagrad", {})])
def test_lazy_update_leaves_rows_without_gradient_alone(name, params, rng):
    opt = mx.optimizer.create(name, learning_rate=0.1, **params)
    upd = mx.optimizer.get_updater(opt)
    w0 = rng.standard_normal(SHAPE).astype(np.float32)
    weight = mx.nd.array(w0)
    g = mx.nd.sparse.row_sparse_array((np.ones((2, 4), np.float32), [1, 4]), shape=SHAPE)
    for _ in range(3):
        upd(7, g, weight)
    out = weight.asnumpy()
    untouched = [0, 2, 3, 5]
    np.testing.assert_array_equal(out[untouched], w0[untouched])
    assert not np.allclose(out[[1, 4]], w0[[1, 4]])
    for s in (upd.states[7] if isinstance(upd.states[7], tuple) else (upd.states[7],)):
        np.testing.assert_array_equal(s.asnumpy()[untouched], 0)


def test_standard_update_with_row_sparse_gradient_equals_the_dense_gradient(rng):
    """lazy_update=False: a row_sparse gradient acts as the dense one with zero rows."""
    w0 = rng.standard_normal(SHAPE).astype(np.float32)
    g = np.zeros(SHAPE, np.float32)
    g[[0, 5]] = rng.standard_normal((2, 4))
    results = []
    for grad in (mx.nd.array(g), mx.nd.array(g).tostype("row_sparse")):
        opt = mx.optimizer.SGD(learning_rate=0.1, momentum=0.9, wd=0.1, lazy_update=False)
        upd = mx.optimizer.get_updater(opt)
        weight = mx.nd.array(w0)
        upd(0, grad, weight)
        upd(0, grad, weight)
        results.append(weight.asnumpy())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-6)


# ---- multi_precision ------------------------------------------------------------------------------
@pytest.mark.parametrize("name,params", [
    ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.03}),
    ("sgd", {"learning_rate": 0.1, "wd": 0.03, "clip_gradient": 0.5}),
    ("nag", {"learning_rate": 0.1, "momentum": 0.9}),
    ("adam", {"learning_rate": 0.01, "wd": 0.01}),
    ("adagrad", {"learning_rate": 0.1}),
    ("rmsprop", {"learning_rate": 0.01, "centered": True}),
    ("signum", {"learning_rate": 0.01}),
    ("ftrl", {"wd": 0.01}),
])
@pytest.mark.parametrize("stype", ["default", "row_sparse"])
def test_multi_precision_keeps_a_float32_master_copy(name, params, stype, rng):
    p = {**params, "multi_precision": True}
    opt = mx.optimizer.create(name, **p)
    upd = mx.optimizer.get_updater(opt)
    w0 = rng.standard_normal(SHAPE).astype(np.float16)
    weight = mx.nd.array(w0, dtype="float16")
    ref_w = w0.astype(np.float64)
    ref_st = [np.zeros(SHAPE) for _ in range(n_states(name, p))]
    lr = p.get("learning_rate", DEFAULT_LR.get(name, 0.01))
    # MXNet's mp_* operators of SGD and NAG have no sparse kernel: their updates are dense
    lazy = lazy_rows(name, p, stype) and name not in ("sgd", "nag")
    for step in range(3):
        g_dense, grad = _grad(rng, stype, step, np.float16)
        upd(0, grad, weight)
        rows = GRAD_ROWS[step] if lazy else list(range(SHAPE[0]))
        new_w, new_st = REFS[name](p, ref_w[rows], g_dense[rows].astype(np.float64), [s[rows] for s in ref_st], lr,
                                   p.get("wd", 0.0), step + 1)
        ref_w[rows] = new_w
        for s, v in zip(ref_st, new_st):
            s[rows] = v
    state = upd.states[0]
    if name in ("sgd", "nag"):  # MXNet's order: (momentum, master)
        inner, master = state
    else:
        master, inner = state
    assert weight.dtype == np.float16 and master.dtype == np.float32
    np.testing.assert_allclose(master.asnumpy(), ref_w, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(weight.asnumpy(), master.asnumpy().astype(np.float16))
    inner = [] if inner is None else [inner] if isinstance(inner, mx.nd.NDArray) else list(inner)
    for s, r in zip(inner, ref_st):
        assert s.dtype == np.float32
        np.testing.assert_allclose(s.asnumpy(), r, rtol=1e-4, atol=1e-5)


def test_float16_without_multi_precision_warns_and_updates_in_float16():
    opt = mx.optimizer.SGD(learning_rate=0.5, momentum=0.9)
    weight = mx.nd.ones((2, 2), dtype="float16")
    with pytest.warns(UserWarning, match="multi_precision"):
        state = opt.create_state_multi_precision(0, weight)
    assert state.dtype == np.float16
    opt.update_multi_precision(0, weight, mx.nd.ones((2, 2), dtype="float16"), state)
    np.testing.assert_allclose(weight.asnumpy(), 0.5)


# ---- the Updater ----------------------------------------------------------------------------------
def test_updater_keeps_one_state_per_index_and_counts_updates_per_index():
    opt = mx.optimizer.Adam(learning_rate=0.1)
    upd = mx.optimizer.get_updater(opt)
    assert isinstance(upd, mx.optimizer.Updater)
    a, b = mx.nd.ones((3, 2)), mx.nd.ones((4,))
    upd(0, mx.nd.ones((3, 2)), a)
    upd(0, mx.nd.ones((3, 2)), a)
    upd("bias", mx.nd.ones((4,)), b)
    assert set(upd.states) == {0, "bias"}
    assert upd.states[0][0].shape == (3, 2) and upd.states["bias"][0].shape == (4,)
    assert opt._index_update_count == {0: 2, "bias": 1} and opt.num_update == 2
    # the first Adam step moves every coordinate by about lr, whatever the gradient's scale
    np.testing.assert_allclose(b.asnumpy(), 0.9, rtol=1e-5)


def test_updater_takes_lists_of_indices_and_byte_keys():
    upd = mx.optimizer.get_updater(mx.optimizer.SGD(learning_rate=0.5))
    ws = [mx.nd.ones((2,)), mx.nd.ones((3,))]
    upd([0, 1], [mx.nd.ones((2,)), mx.nd.ones((3,))], ws)
    upd(b"k", mx.nd.ones((2,)), ws[0])
    assert set(upd.states) == {0, 1, "k"}
    np.testing.assert_allclose(ws[0].asnumpy(), 0.0)
    np.testing.assert_allclose(ws[1].asnumpy(), 0.5)


@pytest.mark.parametrize("dump_optimizer", [False, True])
def test_get_and_set_states_round_trip_and_training_continues_identically(dump_optimizer, rng):
    def make():
        return mx.optimizer.create("sgd", learning_rate=0.1, momentum=0.9, wd=0.01,
                                   lr_scheduler=mx.lr_scheduler.FactorScheduler(step=2, factor=0.5, base_lr=0.1))

    grads = [mx.nd.array(rng.standard_normal((5, 3))).tostype("row_sparse") for _ in range(6)]
    w0 = rng.standard_normal((5, 3)).astype(np.float32)
    straight = mx.optimizer.get_updater(make())
    w_straight = mx.nd.array(w0)
    for g in grads:
        straight(3, g, w_straight)

    first = mx.optimizer.get_updater(make())
    w = mx.nd.array(w0)
    for g in grads[:3]:
        first(3, g, w)
    blob = first.get_states(dump_optimizer=dump_optimizer)
    assert isinstance(blob, bytes)
    resumed = mx.optimizer.get_updater(make() if not dump_optimizer else mx.optimizer.SGD())
    resumed.set_states(blob)
    assert set(resumed.states) == {3} and resumed.states_synced == {3: False}
    np.testing.assert_array_equal(resumed.states[3].asnumpy(), first.states[3].asnumpy())
    if dump_optimizer:
        assert isinstance(resumed.optimizer, mx.optimizer.SGD) and resumed.optimizer.momentum == 0.9
        for g in grads[3:]:
            resumed(3, g, w)
        np.testing.assert_allclose(w.asnumpy(), w_straight.asnumpy(), rtol=1e-6)
        assert resumed.states_synced == {3: True}


def test_set_states_with_tuple_states_and_multi_precision():
    upd = mx.optimizer.get_updater(mx.optimizer.Adam(multi_precision=True))
    w = mx.nd.ones((2, 2), dtype="float16")
    upd(0, mx.nd.ones((2, 2), dtype="float16"), w)
    other = mx.optimizer.get_updater(mx.optimizer.Adam(multi_precision=True))
    other.set_states(upd.get_states())
    master, (mean, var) = other.states[0]
    assert master.dtype == np.float32 and mean.dtype == np.float32
    np.testing.assert_array_equal(var.asnumpy(), upd.states[0][1][1].asnumpy())


def test_sync_state_context_moves_nested_states():
    upd = mx.optimizer.get_updater(mx.optimizer.SGD())
    s = (mx.nd.ones((2,)), [mx.nd.zeros((1,)), None])
    out = upd.sync_state_context(s, mx.cpu())
    assert isinstance(out, tuple) and isinstance(out[1], list) and out[1][1] is None
    assert out[0].context == mx.cpu() and out[1][0].context == mx.cpu()
    assert upd.sync_state_context(None, mx.cpu()) is None


def test_optimizer_pickles_without_param_dict():
    opt = mx.optimizer.SGD(learning_rate=0.3, param_dict={0: object()})
    back = pickle.loads(pickle.dumps(opt))
    assert back.param_dict == {} and back.lr == 0.3


# ---- create, register, learning rates ---------------------------------------------------------
@pytest.mark.parametrize("name,cls", [("sgd", "SGD"), ("SGD", "SGD"), ("Adam", "Adam"), ("adagrad", "AdaGrad"),
                                      ("ftrl", "Ftrl"), ("rmsprop", "RMSProp"), ("signum", "Signum"), ("nag", "NAG")])
def test_create_by_name_is_case_insensitive(name, cls):
    opt = mx.optimizer.create(name, learning_rate=0.2)
    assert type(opt) is getattr(mx.optimizer, cls)
    assert mx.optimizer.Optimizer.create_optimizer(name).__class__ is type(opt)
    assert opt.learning_rate == 0.2
    assert mx.optimizer.FTRL is mx.optimizer.Ftrl


def test_defaults_follow_mxnet():
    assert mx.optimizer.SGD().learning_rate == 0.01
    assert mx.optimizer.Adam().learning_rate == 0.001
    assert mx.optimizer.Ftrl().learning_rate == 0.1
    assert mx.optimizer.RMSProp().gamma1 == 0.9
    assert mx.optimizer.Signum().momentum == 0.9
    assert mx.optimizer.AdaGrad().float_stable_eps == 1e-7


def test_register_a_user_optimizer_and_override_warns():
    @mx.optimizer.register
    class MyOptTestOnly(mx.optimizer.Optimizer):
        def create_state(self, index, weight):
            return None

        def update(self, index, weight, grad, state):
            weight[:] = weight - self._get_lr(index) * grad

    try:
        opt = mx.optimizer.create("myopttestonly", learning_rate=0.5)
        w = mx.nd.ones((2,))
        mx.optimizer.get_updater(opt)(0, mx.nd.ones((2,)), w)
        np.testing.assert_allclose(w.asnumpy(), 0.5)
        with pytest.warns(UserWarning, match="overriding"):
            mx.optimizer.Optimizer.register(type("MyOptTestOnly", (mx.optimizer.Optimizer,), {}))
    finally:
        mx.optimizer.Optimizer.opt_registry.pop("myopttestonly", None)


def test_lr_mult_wd_mult_and_idx2name():
    opt = mx.optimizer.SGD(learning_rate=0.1, wd=0.5, param_idx2name={0: "fc_weight", 1: "fc_bias"})
    assert opt._get_wd(0) == 0.5 and opt._get_wd(1) == 0.0  # MXNet: no decay unless *_weight / *_gamma
    opt.set_lr_mult({1: 2.0, "fc_weight": 0.5})
    assert opt._get_lr(1) == pytest.approx(0.2) and opt._get_lr(0) == pytest.approx(0.05)
    opt.set_wd_mult({"fc_bias": 3.0})
    assert opt._get_wd(1) == pytest.approx(1.5)


def test_lr_scheduler_drives_the_rate_by_num_update():
    sched = mx.lr_scheduler.FactorScheduler(step=2, factor=0.5, base_lr=1.0)
    opt = mx.optimizer.SGD(lr_scheduler=sched)
    upd = mx.optimizer.get_updater(opt)
    w = mx.nd.zeros((1,))
    seen = []
    for _ in range(5):
        before = w.asnumpy()[0]
        upd(0, mx.nd.ones((1,)), w)
        seen.append(before - w.asnumpy()[0])
    np.testing.assert_allclose(seen, [1.0, 1.0, 0.5, 0.5, 0.25])
    with pytest.raises(UserWarning) as info:
        opt.set_learning_rate(0.1)
    assert isinstance(info.value, MXNetError)
    opt2 = mx.optimizer.SGD()
    opt2.set_learning_rate(0.3)
    assert opt2.learning_rate == 0.3


def test_learning_rate_overrides_the_schedulers_base_lr(capsys):
    sched = mx.lr_scheduler.FactorScheduler(step=10, base_lr=1.0)
    opt = mx.optimizer.SGD(learning_rate=0.2, lr_scheduler=sched)
    assert sched.base_lr == 0.2 and opt.learning_rate == 0.2
    assert "overwritten" in capsys.readouterr().out


# ---- lr schedulers --------------------------------------------------------------------------------
def test_factor_scheduler():
    s = mx.lr_scheduler.FactorScheduler(step=3, factor=0.5, stop_factor_lr=0.1, base_lr=1.0)
    got = [s(n) for n in range(1, 14)]
    assert got == [1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.125, 0.125, 0.125, 0.1]


def test_factor_scheduler_with_warmup():
    s = mx.lr_scheduler.FactorScheduler(step=5, factor=0.1, base_lr=1.0, warmup_steps=4, warmup_begin_lr=0.2)
    assert [s(n) for n in range(4)] == pytest.approx([0.2, 0.4, 0.6, 0.8])
    assert s(4) == 1.0 and s(6) == pytest.approx(0.1)
    c = mx.lr_scheduler.FactorScheduler(step=5, base_lr=1.0, warmup_steps=3, warmup_begin_lr=0.5,
                                        warmup_mode="constant")
    assert [c(n) for n in range(4)] == [0.5, 0.5, 0.5, 1.0]


def test_multifactor_scheduler():
    s = mx.lr_scheduler.MultiFactorScheduler(step=[3, 7], factor=0.1, base_lr=1.0)
    got = [s(n) for n in range(1, 10)]
    np.testing.assert_allclose(got, [1, 1, 1, 0.1, 0.1, 0.1, 0.1, 0.01, 0.01])


def test_poly_scheduler():
    s = mx.lr_scheduler.PolyScheduler(max_update=10, base_lr=1.0, pwr=2, final_lr=0.1)
    for n in (0, 3, 10):
        assert s(n) == pytest.approx(0.1 + 0.9 * (1 - n / 10) ** 2)
    assert s(20) == pytest.approx(0.1)
    w = mx.lr_scheduler.PolyScheduler(max_update=12, base_lr=1.0, pwr=1, warmup_steps=2)
    assert w(1) == pytest.approx(0.5) and w(7) == pytest.approx(0.5)


def test_cosine_scheduler():
    s = mx.lr_scheduler.CosineScheduler(max_update=10, base_lr=1.0, final_lr=0.2)
    for n in (0, 2, 5, 10):
        assert s(n) == pytest.approx(0.2 + 0.8 * (1 + np.cos(np.pi * n / 10)) / 2)
    assert s(15) == pytest.approx(0.2)


@pytest.mark.parametrize("make,argument", [
    (lambda: mx.lr_scheduler.FactorScheduler(step=0), "step"),
    (lambda: mx.lr_scheduler.FactorScheduler(step=2, factor=1.5), "factor"),
    (lambda: mx.lr_scheduler.MultiFactorScheduler(step=[5, 3]), "step"),
    (lambda: mx.lr_scheduler.MultiFactorScheduler(step=[0, 3]), "step"),
    (lambda: mx.lr_scheduler.MultiFactorScheduler(step=3), "step"),
    (lambda: mx.lr_scheduler.PolyScheduler(max_update=0), "max_update"),
    (lambda: mx.lr_scheduler.CosineScheduler(max_update=2.5), "max_update"),
    (lambda: mx.lr_scheduler.CosineScheduler(max_update=5, warmup_steps=-1), "warmup_steps"),
    (lambda: mx.lr_scheduler.CosineScheduler(max_update=5, warmup_mode="cubic"), "warmup_mode"),
    (lambda: mx.lr_scheduler.FactorScheduler(step=2, base_lr=0.1, warmup_begin_lr=0.5), "warmup_begin_lr"),
])
def test_scheduler_refusals_name_the_argument(make, argument):
    with pytest.raises(MXNetError, match=argument) as info:
        make()
    assert isinstance(info.value, (ValueError, TypeError))


# ---- refusals ---------------------------------------------------------------------------------
def test_unknown_optimizer_name():
    with pytest.raises(MXNetError, match="Cannot find optimizer nosuchopt") as info:
        mx.optimizer.create("nosuchopt")
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("make,argument", [
    (lambda: mx.optimizer.SGD(momentum="0.9"), "momentum"),
    (lambda: mx.optimizer.SGD(learning_rate="fast"), "learning_rate"),
    (lambda: mx.optimizer.SGD(wd=None), "wd"),
    (lambda: mx.optimizer.Adam(beta1=1.0), "beta1"),
    (lambda: mx.optimizer.SGD(param_idx2name=[1, 2]), "param_idx2name"),
    (lambda: mx.optimizer.create("sgd", momentun=0.9), "momentun"),
    (lambda: mx.optimizer.register("sgd"), "klass"),
    (lambda: mx.optimizer.get_updater("sgd"), "optimizer"),
])
def test_bad_optimizer_arguments_name_the_argument(make, argument):
    with pytest.raises(MXNetError, match=argument) as info:
        make()
    assert isinstance(info.value, (ValueError, TypeError))


def test_bad_update_inputs_name_the_argument():
    opt = mx.optimizer.SGD(momentum=0.9)
    upd = mx.optimizer.get_updater(opt)
    with pytest.raises(MXNetError, match="grad"):
        upd(0, np.ones((2, 2)), mx.nd.ones((2, 2)))
    with pytest.raises(MXNetError, match="weight"):
        opt.update(0, np.ones(2), mx.nd.ones(2), None)
    with pytest.raises(MXNetError, match="grad"):  # the operator's shape rule
        upd(1, mx.nd.ones((3, 2)), mx.nd.ones((2, 2)))
    with pytest.raises(MXNetError, match="grad"):  # dtypes differ
        upd(2, mx.nd.ones((2, 2), dtype="float64"), mx.nd.ones((2, 2)))
    with pytest.raises(MXNetError, match="lists of one length"):
        upd([0, 1], [mx.nd.ones(2)], [mx.nd.ones(2)])
    with pytest.raises(MXNetError, match="states"):
        upd.set_states("not bytes")
    with pytest.raises(MXNetError, match="unpickled"):
        upd.set_states(b"garbage")


# ---- the update operators under mx.nd ---------------------------------------------------------
def test_new_update_operators_are_reachable_from_mx_nd(rng):
    w = rng.standard_normal(SHAPE).astype(np.float32)
    g = np.zeros(SHAPE, np.float32)
    g[[2, 4]] = rng.standard_normal((2, 4))
    for name, nstates in (("ftrl_update", 2), ("nag_mom_update", 1), ("rmsprop_update", 1),
                          ("rmspropalex_update", 3), ("signsgd_update", 0), ("signum_update", 1)):
        outs = []
        for grad in (mx.nd.array(g), mx.nd.array(g).tostype("row_sparse")):
            weight = mx.nd.array(w)
            states = [mx.nd.ones(SHAPE) * 0.5 for _ in range(nstates)]
            if name == "rmspropalex_update":
                states[1] = mx.nd.zeros(SHAPE)
            extra = {"lazy_update": False} if name == "ftrl_update" else {}
            r = getattr(mx.nd, name)(weight, grad, *states, out=weight, lr=0.1, wd=0.01, **extra)
            assert r is weight
            outs.append([weight.asnumpy()] + [s.asnumpy() for s in states])
        for a, b in zip(*outs):  # dense update for the row_sparse gradient: equal to the dense one
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_ftrl_update_lazy_kernel_on_a_large_gradient(rng):
    """Enough rows for the parallel driver; the same numbers as the dense formula on those rows."""
    n, d = 3000, 8
    w = rng.standard_normal((n, d))
    rows = np.sort(rng.choice(n, 1500, replace=False))
    gv = rng.standard_normal((len(rows), d))
    z, nn = rng.standard_normal((n, d)), np.abs(rng.standard_normal((n, d)))
    weight, zs, ns = so.array(w), so.array(z), so.array(nn)
    grad = so.row_sparse_array((gv, rows), shape=(n, d))
    so.ftrl_update(weight, grad, zs, ns, out=weight, lr=0.1, lamda1=0.05, beta=1.0, wd=0.01, clip_gradient=0.8)
    exp_w, (exp_z, exp_n) = ref_ftrl({"lamda1": 0.05, "beta": 1.0, "clip_gradient": 0.8}, w[rows], gv,
                                     [z[rows], nn[rows]], 0.1, 0.01, 1)
    out = weight.asnumpy()
    np.testing.assert_allclose(out[rows], exp_w, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(zs.asnumpy()[rows], exp_z, rtol=1e-12)
    np.testing.assert_allclose(ns.asnumpy()[rows], exp_n, rtol=1e-12)
    others = np.setdiff1d(np.arange(n), rows)
    np.testing.assert_array_equal(out[others], w[others])
    np.testing.assert_array_equal(zs.asnumpy()[others], z[others])


def test_no_storage_fallback_warning_for_the_dense_only_updates():
    with warnings.catch_warnings():
        warnings.simplefilter("error", so.StorageFallbackWarning)
        opt = mx.optimizer.RMSProp(centered=True)
        mx.optimizer.get_updater(opt)(0, mx.nd.ones((3, 2)).tostype("row_sparse"), mx.nd.ones((3, 2)))


@pytest.mark.parametrize("name, kw, state_stype, lazy", [
    ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.1}, "row_sparse", True),
    ("adam", {"learning_rate": 0.1, "wd": 0.1}, "row_sparse", True),
    ("adagrad", {"learning_rate": 0.1, "wd": 0.1}, "row_sparse", True),
    ("ftrl", {"learning_rate": 0.1, "wd": 0.1}, "row_sparse", True),
    ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.1, "lazy_update": False}, "default", False),
    ("adam", {"learning_rate": 0.1, "wd": 0.1, "lazy_update": False}, "default", False),
    # no sparse kernel in MXNet: row_sparse states, the storage fallback's standard update
    ("rmsprop", {"learning_rate": 0.1, "wd": 0.1}, "row_sparse", False),
    ("rmsprop", {"learning_rate": 0.1, "wd": 0.1, "centered": True}, "row_sparse", False),
    ("signum", {"learning_rate": 0.1, "wd": 0.1}, "row_sparse", False),
    ("lamb", {"learning_rate": 0.1, "wd": 0.1}, "row_sparse", False),
    ("ftml", {"learning_rate": 0.1, "wd": 0.1}, "default", False),
    ("adamax", {"learning_rate": 0.1, "wd": 0.1}, "default", False),
    ("nadam", {"learning_rate": 0.1, "wd": 0.1}, "default", False),
])
def test_states_of_a_row_sparse_weight_follow_mxnet(name, kw, state_stype, lazy):
    """MXNet 1.9.1's create_state and update for a row_sparse weight: SGD and Adam give it
    row_sparse states when lazy_update (else dense), AdaGrad, Ftrl, RMSProp, Signum and LAMB
    always; where MXNet has a sparse kernel the update is lazy (rows without gradient keep
    their values), elsewhere it is the standard update of the storage fallback. The weight
    stays row_sparse, and its values match the same optimizer on a dense weight."""
    rng = np.random.default_rng(3)
    w0 = rng.standard_normal((5, 3)).astype(np.float32)
    rows = np.array([1, 3])
    gv = rng.standard_normal((2, 3)).astype(np.float32)
    g = mx.nd.sparse.row_sparse_array((gv, rows), shape=(5, 3))
    w = mx.nd.array(w0).tostype("row_sparse")
    opt = mx.optimizer.create(name, **kw)
    state = opt.create_state(0, w)
    states = state if isinstance(state, tuple) else (state,)
    assert {s.stype for s in states} == {state_stype}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", so.StorageFallbackWarning)
        for _ in range(2):
            opt.update(0, w, g, state)
    assert w.stype == "row_sparse" and {s.stype for s in states} == {state_stype}
    # the same steps on a dense weight with a dense gradient, its states dense
    ref_opt = mx.optimizer.create(name, **kw)
    wd = mx.nd.array(w0)
    dense_g = np.zeros((5, 3), np.float32)
    dense_g[rows] = gv
    ref_state = ref_opt.create_state(0, wd)
    for _ in range(2):
        ref_opt.update(0, wd, mx.nd.array(dense_g), ref_state)
    got, ref = w.asnumpy(), wd.asnumpy()
    np.testing.assert_allclose(got[rows], ref[rows], rtol=1e-5, atol=1e-6)
    others = np.setdiff1d(np.arange(5), rows)
    if lazy:
        np.testing.assert_array_equal(got[others], w0[others])  # lazy: rows without gradient untouched
    else:
        np.testing.assert_allclose(got[others], ref[others], rtol=1e-5, atol=1e-6)  # standard: wd everywhere
        assert not np.allclose(got[others], w0[others])
    ref_states = ref_state if isinstance(ref_state, tuple) else (ref_state,)
    for s, r in zip(states, ref_states):
        if lazy:
            np.testing.assert_allclose(s.asnumpy()[rows], r.asnumpy()[rows], rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_allclose(s.asnumpy(), r.asnumpy(), rtol=1e-5, atol=1e-6)


def test_sgd_update_of_a_csr_weight_falls_back_and_keeps_csr():
    """MXNet's storage fallback: a csr weight is densified, updated and stored back as csr."""
    dense = np.array([[1.0, 0.0, 2.0], [0.0, 0.0, 3.0]], np.float32)
    w = mx.nd.array(dense).tostype("csr")
    g = mx.nd.array(np.full((2, 3), 0.5, np.float32)).tostype("csr")
    opt = mx.optimizer.SGD(learning_rate=0.1, wd=0.2)
    so.dispatch._warned.clear()  # the warning comes once per signature: forget earlier ones
    with pytest.warns(so.StorageFallbackWarning, match="sgd_update"):
        opt.update(0, w, g, opt.create_state(0, w))
    assert w.stype == "csr"
    np.testing.assert_allclose(w.asnumpy(), (1 - 0.1 * 0.2) * dense - 0.05, rtol=1e-6)


def test_sgld_adds_the_noise_mx_random_draws():
    w0 = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    g = np.full((3, 4), 0.5, np.float32)
    opt = mx.optimizer.SGLD(learning_rate=0.04, wd=0.1)
    w = mx.nd.array(w0)
    mx.random.seed(11)
    opt.update(0, w, mx.nd.array(g), None)
    mx.random.seed(11)
    noise = mx.nd.random.normal(0, 0.2, shape=(3, 4)).asnumpy()
    np.testing.assert_allclose(w.asnumpy(), w0 - 0.02 * (g + 0.1 * w0) + noise, rtol=1e-5, atol=1e-6)
    assert np.std(noise) > 0.05


def test_lamb_updates_a_list_of_weights_as_each_alone():
    rng = np.random.default_rng(5)
    ws = [rng.standard_normal(s).astype(np.float32) for s in ((3, 2), (4,))]
    gs = [rng.standard_normal(w.shape).astype(np.float32) for w in ws]
    together = mx.optimizer.LAMB(learning_rate=0.05, wd=0.01)
    arrays = [mx.nd.array(w) for w in ws]
    states = [together.create_state(i, a) for i, a in enumerate(arrays)]
    together.update([0, 1], arrays, [mx.nd.array(g) for g in gs], states)
    for i, (w, g) in enumerate(zip(ws, gs)):
        alone = mx.optimizer.LAMB(learning_rate=0.05, wd=0.01)
        a = mx.nd.array(w)
        alone.update(i, a, mx.nd.array(g), alone.create_state(i, a))
        np.testing.assert_allclose(arrays[i].asnumpy(), a.asnumpy(), rtol=1e-6)
