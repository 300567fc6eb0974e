"""lazy_adagrad / lazy_adam: fused row_sparse updates, in place through out=."""
import numpy as np
import pytest

from cookbook_helpers import serial_and_parallel  # first: puts the cookbook on sys.path when not installed
import sparse_ops as so
from sparse_ops.dispatch import InferenceError
from sparse_ops.registry import ParameterError
from sparse_ops_cookbook import lazy_adagrad, lazy_adam

ROWS = [1, 4, 5]


def setup(dtype, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((7, 3)).astype(dtype)
    g = rng.standard_normal((len(ROWS), 3)).astype(dtype)
    grad = so.row_sparse_array((g, np.array(ROWS)), shape=(7, 3))
    return w, g, grad


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_adagrad_updates_only_the_gradient_rows_in_place(dtype):
    w0, g, grad = setup(dtype)
    h0 = np.abs(np.random.default_rng(1).standard_normal((7, 3))).astype(dtype)
    weight, history = so.array(w0), so.array(h0)
    out = lazy_adagrad(weight, grad, history, lr=0.1, epsilon=1e-6, wd=0.01, out=weight)
    assert out is weight
    gw = g + 0.01 * w0[ROWS]
    h = h0[ROWS] + gw * gw
    want_w, want_h = w0.copy(), h0.copy()
    want_w[ROWS] -= 0.1 * gw / (np.sqrt(h) + 1e-6)
    want_h[ROWS] = h
    tol = 1e-6 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(weight.asnumpy(), want_w, rtol=tol, atol=tol)
    np.testing.assert_allclose(history.asnumpy(), want_h, rtol=tol, atol=tol)
    untouched = [r for r in range(7) if r not in ROWS]
    assert np.array_equal(weight.asnumpy()[untouched], w0[untouched])


def test_adagrad_without_out_leaves_the_weight():
    w0, _, grad = setup("float64")
    weight, history = so.array(w0), so.zeros((7, 3), dtype="float64")
    new = lazy_adagrad(weight, grad, history, 0.5)
    assert new is not weight and np.array_equal(weight.asnumpy(), w0)
    assert not np.array_equal(new.asnumpy()[ROWS], w0[ROWS]) and np.all(history.asnumpy()[ROWS] > 0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_adam_two_steps_with_bias_correction(dtype):
    w0, g, grad = setup(dtype, seed=2)
    weight, mean, var = so.array(w0), so.zeros((7, 3), dtype=dtype), so.zeros((7, 3), dtype=dtype)
    w, m, v = w0.astype(np.float64), np.zeros((7, 3)), np.zeros((7, 3))
    for t in (1, 2):
        lazy_adam(weight, grad, mean, var, lr=0.01, wd=0.1, t=t, out=weight)
        gw = g + 0.1 * w[ROWS]
        m[ROWS] = 0.9 * m[ROWS] + 0.1 * gw
        v[ROWS] = 0.999 * v[ROWS] + 0.001 * gw * gw
        w[ROWS] -= 0.01 * (m[ROWS] / (1 - 0.9 ** t)) / (np.sqrt(v[ROWS] / (1 - 0.999 ** t)) + 1e-8)
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(weight.asnumpy(), w, rtol=tol, atol=tol)
    np.testing.assert_allclose(mean.asnumpy(), m, rtol=tol, atol=tol)
    np.testing.assert_allclose(var.asnumpy(), v, rtol=tol, atol=tol)
    assert so.explain("lazy_adam", weight, grad, mean, var, lr=0.1)["dispatch_mode"] == "fcompute_ex"


def test_empty_gradient_changes_nothing():
    w0 = np.ones((4, 2))
    weight, mean, var = so.array(w0), so.zeros((4, 2), dtype="float64"), so.zeros((4, 2), dtype="float64")
    lazy_adam(weight, so.zeros((4, 2), stype="row_sparse", dtype="float64"), mean, var, lr=1.0, out=weight)
    assert np.array_equal(weight.asnumpy(), w0) and not mean.asnumpy().any()


def test_declarations_and_errors():
    for name, states in (("lazy_adagrad", ("history",)), ("lazy_adam", ("mean", "var"))):
        opdef = so.get_op(name)
        assert opdef.mutate == states and not opdef.differentiable
    w, _, grad = setup("float64")
    weight, h = so.array(w), so.zeros((7, 3), dtype="float64")
    with pytest.raises(InferenceError, match="grad must be row_sparse"):
        lazy_adagrad(weight, so.array(w), h, lr=0.1)
    with pytest.raises(InferenceError, match="history has shape"):
        lazy_adagrad(weight, grad, so.zeros((7, 2), dtype="float64"), lr=0.1)
    with pytest.raises(ParameterError, match="missing required parameter 'lr'"):
        lazy_adagrad(weight, grad, h)
    with pytest.raises(ParameterError, match="t counts steps from 1"):
        lazy_adam(weight, grad, h, h, lr=0.1, t=0)


def test_updates_serial_and_parallel_forms_agree_exactly(monkeypatch):
    """Both optimizers below and above the cpu kernels' work threshold, on 200 of 300 rows."""
    rng = np.random.default_rng(3)
    w0, h0 = rng.standard_normal((300, 5)), np.abs(rng.standard_normal((300, 5)))
    rows = np.sort(rng.choice(300, 200, replace=False))
    g = rng.standard_normal((200, 5))
    grad = so.row_sparse_array((g, rows), shape=(300, 5))

    def run():
        weight, history = so.array(w0), so.array(h0)
        lazy_adagrad(weight, grad, history, lr=0.1, epsilon=1e-6, wd=0.01, out=weight)
        aw, mean, var = so.array(w0), so.zeros((300, 5), dtype="float64"), so.zeros((300, 5), dtype="float64")
        lazy_adam(aw, grad, mean, var, lr=0.01, wd=0.1, t=1, out=aw)
        return [weight, history, aw, mean, var]

    serial, parallel = serial_and_parallel(monkeypatch, run)
    for s, p in zip(serial, parallel):
        np.testing.assert_array_equal(s, p)
    gw = g + 0.01 * w0[rows]
    want_h, want_w = h0.copy(), w0.copy()
    want_h[rows] += gw * gw
    want_w[rows] -= 0.1 * gw / (np.sqrt(want_h[rows]) + 1e-6)
    np.testing.assert_allclose(serial[0], want_w, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(serial[1], want_h, rtol=1e-12, atol=1e-12)
    ga = g + 0.1 * w0[rows]
    m, v, w = np.zeros((300, 5)), np.zeros((300, 5)), w0.copy()
    m[rows], v[rows] = 0.1 * ga, 0.001 * ga * ga
    w[rows] -= 0.01 * (m[rows] / 0.1) / (np.sqrt(v[rows] / 0.001) + 1e-8)
    for got, want in zip(serial[2:], (w, m, v)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
