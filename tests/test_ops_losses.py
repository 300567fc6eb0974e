"""MXNet's output layers (SoftmaxOutput, the regression outputs, make_loss): forward values
against SciPy, and the gradients they give, whatever the head gradient, against the
derivative of the loss each stands for (finite differences of the cross-entropy, NumPy
formulas of MXNet 1.9's definitions), on the native, MXNet and torch faces."""
import numpy as np
import pytest
import scipy.special as sps

import sparse_ops as so
import sparse_ops.compat.mxnet as mx
from sparse_ops import autograd
from sparse_ops.errors import InvalidIndexError


def _grad(op, data, label, head=None, **params):
    x = so.array(data)
    x.attach_grad()
    with autograd.record():
        y = so.dispatch.op_function(op)(x, so.array(label), **params)
    y.backward(None if head is None else so.array(head))
    return y.asnumpy(), x.grad.asnumpy()


def _cross_entropy_grad(data, label, eps=1e-6):
    """d/d data of sum_i -log softmax(data_i)[label_i], by central differences."""
    def loss(d):
        return -np.log(sps.softmax(d, axis=1)[np.arange(len(label)), label.astype(int)]).sum()

    g = np.zeros_like(data)
    for idx in np.ndindex(*data.shape):
        step = np.zeros_like(data)
        step[idx] = eps
        g[idx] = (loss(data + step) - loss(data - step)) / (2 * eps)
    return g


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_output_gives_the_cross_entropy_gradient_whatever_the_head(dtype):
    rng = np.random.default_rng(0)
    data = rng.standard_normal((5, 4))
    label = np.array([0, 3, 1, 1, 2], dtype=np.float64)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-7, atol=1e-9)
    for head in (None, rng.standard_normal((5, 4))):
        out, grad = _grad("SoftmaxOutput", data.astype(dtype), label.astype(dtype), head)
        np.testing.assert_allclose(out, sps.softmax(data, axis=1), **tol)
        np.testing.assert_allclose(grad, _cross_entropy_grad(data, label), **tol)
        assert grad.dtype == dtype


def _mxnet_rule(out, label, k_axis_view, alpha=0.0, ignore=None, normalization="null", scale=1.0, multi=False):
    """MXNet 1.9's SoftmaxOutput gradient on the (n, k, positions) view, written out directly."""
    n, k, positions = k_axis_view
    o = out.reshape(n, k, positions)
    ids = label.reshape(n, positions).astype(int)
    onehot = np.moveaxis(np.eye(k)[ids], -1, 1)  # (n, k, positions)
    target = onehot * (1 - alpha) + (1 - onehot) * (alpha / (k - 1) if alpha else 0.0)
    g = o - target
    if ignore is not None:
        g = g * (ids != ignore)[:, None, :]
    valid = max(int((ids != (-1 if ignore is None else ignore)).sum()), 1)
    count = {"null": 1, "batch": n, "valid": valid}[normalization]
    spread = positions if multi and normalization != "valid" else 1
    return (g * scale / spread / count).reshape(out.shape)


def test_softmax_output_ignore_smoothing_and_normalization_follow_mxnet():
    rng = np.random.default_rng(1)
    data = rng.standard_normal((6, 3))
    label = np.array([0, -1, 2, 1, -1, 2.0])
    params = dict(use_ignore=True, ignore_label=-1, smooth_alpha=0.2, normalization="valid", grad_scale=3.0)
    out, grad = _grad("SoftmaxOutput", data, label, **params)
    want = _mxnet_rule(out, label, (6, 3, 1), alpha=0.2, ignore=-1, normalization="valid", scale=3.0)
    np.testing.assert_allclose(grad, want, rtol=1e-12, atol=1e-12)
    assert (grad[[1, 4]] == 0).all()
    out, grad = _grad("SoftmaxOutput", data, np.abs(label), normalization="batch")
    np.testing.assert_allclose(grad, _mxnet_rule(out, np.abs(label), (6, 3, 1), normalization="batch"), atol=1e-12)


def test_softmax_output_multi_output_and_preserve_shape():
    rng = np.random.default_rng(2)
    data = rng.standard_normal((2, 4, 3))  # (n, k, positions)
    label = np.array([[0, 3, 1], [2, 2, 0.0]])
    out, grad = _grad("SoftmaxOutput", data, label, multi_output=True, normalization="batch")
    np.testing.assert_allclose(out, sps.softmax(data, axis=1), rtol=1e-12)
    np.testing.assert_allclose(grad, _mxnet_rule(out, label, (2, 4, 3), normalization="batch", multi=True),
                               atol=1e-12)
    ids = np.array([[0, 2, 1, 1], [2, 0, 0, 1.0]])  # a class of the last axis for each leading position
    out, grad = _grad("SoftmaxOutput", data, ids, preserve_shape=True)
    np.testing.assert_allclose(out, sps.softmax(data, axis=-1), rtol=1e-12)
    np.testing.assert_allclose(grad, out - np.eye(3)[ids.astype(int)], atol=1e-12)


def test_softmax_output_with_a_distribution_label_and_out_grad():
    rng = np.random.default_rng(3)
    data, label = rng.standard_normal((3, 4)), sps.softmax(rng.standard_normal((3, 4)), axis=1)
    head = rng.standard_normal((3, 4))
    out, grad = _grad("SoftmaxOutput", data, label, head, grad_scale=2.0)
    np.testing.assert_allclose(grad, 2.0 * (out - label), atol=1e-12)
    out, grad = _grad("SoftmaxOutput", data, label, head, grad_scale=2.0, out_grad=True)
    np.testing.assert_allclose(grad, 2.0 * (out - label) * head, atol=1e-12)


def test_softmax_output_refuses_labels_that_do_not_fit():
    x = so.array(np.zeros((3, 4)))
    with pytest.raises(so.SparseOpsError, match="label of shape \\(2,\\)"):
        so.ops.SoftmaxOutput(x, so.array(np.zeros(2)))
    with pytest.raises(InvalidIndexError, match="'label'"):
        x.attach_grad()
        with autograd.record():
            y = so.ops.SoftmaxOutput(x, so.array(np.array([0.0, np.nan, 1.0])))
        y.backward()
    with pytest.raises(so.SparseOpsError, match="floating point data"):
        so.ops.SoftmaxOutput(so.array(np.zeros((3, 4), np.int64)), so.array(np.zeros(3)))
    _, grad = _grad("SoftmaxOutput", np.zeros((3, 4)), np.array([0.0, 1.0, 2.0]))  # and nothing is left broken
    np.testing.assert_allclose(grad, 0.25 - np.eye(4)[[0, 1, 2]])


@pytest.mark.parametrize("op,forward,difference", [
    ("LinearRegressionOutput", lambda x: x, lambda d: d),
    ("LogisticRegressionOutput", sps.expit, lambda d: d),
    ("MAERegressionOutput", lambda x: x, lambda d: np.where(d > 0, 1.0, -1.0)),  # MXNet's: -1 at a tie
])
def test_regression_outputs(op, forward, difference):
    rng = np.random.default_rng(4)
    data, label = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    label[0] = forward(data[0])  # ties: out == label
    out, grad = _grad(op, data, label, head=rng.standard_normal((4, 3)), grad_scale=0.5)
    np.testing.assert_allclose(out, forward(data), rtol=1e-12)
    np.testing.assert_allclose(grad, 0.5 * difference(out - label) / 3, rtol=1e-12)
    out, grad = _grad(op, data[:, :1], label[:, 0])  # a flat label for (n, 1) data, as MXNet allows
    np.testing.assert_allclose(grad, difference(out - label[:, :1]), rtol=1e-12)
    with pytest.raises(so.SparseOpsError, match="argument label"):
        so.dispatch.op_function(op)(so.array(data), so.array(label[:3]))


def test_make_loss_starts_backward_with_ones():
    rng = np.random.default_rng(5)
    v = rng.standard_normal((3, 2))
    x = so.array(v)
    x.attach_grad()
    with autograd.record():
        loss = so.ops.make_loss(so.ops.square(x))
    loss.backward(so.array(rng.standard_normal((3, 2))))
    np.testing.assert_allclose(loss.asnumpy(), v * v)
    np.testing.assert_allclose(x.grad.asnumpy(), 2 * v)


def test_mxnet_face_names_and_training_step():
    """A classic MXNet classifier head: mx.nd.SoftmaxOutput (and its legacy name Softmax)
    trained with autograd, float32 labels, the gradient the cross-entropy's."""
    rng = np.random.default_rng(6)
    data = rng.standard_normal((4, 3)).astype(np.float32)
    label = np.array([2, 0, 1, 1], dtype=np.float32)
    for name in ("SoftmaxOutput", "Softmax"):
        x = mx.nd.array(data)
        x.attach_grad()
        with mx.autograd.record():
            y = getattr(mx.nd, name)(data=x, label=mx.nd.array(label), normalization="batch")
        y.backward()
        assert isinstance(y, mx.nd.NDArray)
        np.testing.assert_allclose(x.grad.asnumpy(), _cross_entropy_grad(data.astype(np.float64), label) / 4,
                                   rtol=1e-4, atol=1e-6)
    x = mx.nd.array(data)
    x.attach_grad()
    with mx.autograd.record():
        y = mx.nd.LinearRegressionOutput(x, mx.nd.array(data * 0))
    y.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), data / 3, rtol=1e-6)


def test_torch_face_gives_the_same_gradient():
    torch = pytest.importorskip("torch")
    import sparse_ops.torch as st

    rng = np.random.default_rng(7)
    data = rng.standard_normal((4, 3))
    label = np.array([2, 0, 1, 1.0])
    x = torch.tensor(data, requires_grad=True)
    y = st.ops.SoftmaxOutput(x, torch.tensor(label), normalization="batch")
    (y * torch.tensor(rng.standard_normal((4, 3)))).sum().backward()  # any head: the loss's gradient
    np.testing.assert_allclose(x.grad.numpy(), _cross_entropy_grad(data, label) / 4, rtol=1e-6, atol=1e-8)


def test_softmax_output_takes_mxnets_label_for_nd_data():
    """For N-d data (N >= 3) without multi_output or preserve_shape, MXNet's shape rule gives
    the label the data's shape less its last axis, and its backward reads the first n of
    those values as the n examples' class ids (one softmax per example, over the other axes)."""
    rng = np.random.default_rng(8)
    data = rng.standard_normal((2, 3, 2))
    label = np.array([[4.0, 1.0, 0.0], [2.0, 5.0, 3.0]])  # read: 4 and 1
    out, grad = _grad("SoftmaxOutput", data, label)
    flat = data.reshape(2, 6)
    probs = np.exp(flat - flat.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    np.testing.assert_allclose(out.reshape(2, 6), probs, rtol=1e-12)
    np.testing.assert_allclose(grad.reshape(2, 6), probs - np.eye(6)[[4, 1]], rtol=1e-12)
    _, flat_label_grad = _grad("SoftmaxOutput", data, label.reshape(-1)[:2])  # (n,) as before
    np.testing.assert_allclose(flat_label_grad, grad, rtol=1e-12)
