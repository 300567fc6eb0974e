"""``Pooling`` against PyTorch's pooling functions (values and gradients), MXNet's window
rules for the conventions torch lacks, and its refusals."""
import numpy as np
import pytest

import sparse_ops as so
import sparse_ops.compat.mxnet as mx
from sparse_ops import autograd

torch = pytest.importorskip("torch")
F = torch.nn.functional
RNG = np.random.default_rng(0)


def _ours(data, head, **params):
    x = so.array(data)
    x.attach_grad()
    with autograd.record():
        y = so.ops.Pooling(x, **params)
    y.backward(so.array(head))
    return y.asnumpy(), x.grad.asnumpy()


def _torch(fn, data, head, *args, **kwargs):
    x = torch.tensor(data, requires_grad=True)
    y = fn(x, *args, **kwargs)
    y.backward(torch.tensor(head))
    return y.detach().numpy(), x.grad.numpy()


@pytest.mark.parametrize("kernel,stride,pad", [((2, 2), (2, 2), (0, 0)), ((3, 3), (2, 1), (1, 1)),
                                               ((3, 2), (1, 2), (1, 0))])
@pytest.mark.parametrize("pool_type", ["max", "avg", "avg_no_pad", "sum", "lp"])
def test_2d_pooling_matches_torch(kernel, stride, pad, pool_type):
    data = RNG.standard_normal((2, 3, 7, 6))
    params = {"kernel": kernel, "stride": stride, "pad": pad,
              "pool_type": "avg" if pool_type == "avg_no_pad" else pool_type}
    if pool_type == "avg_no_pad":
        params["count_include_pad"] = False
    if pool_type == "lp":
        params["p_value"] = 2
        if any(pad):
            pytest.skip("torch's lp_pool2d takes no padding")
    out_shape = so.ops.Pooling(so.array(data), **params).shape
    head = RNG.standard_normal(out_shape)
    ours = _ours(data, head, **params)
    if pool_type == "max":
        ref = _torch(F.max_pool2d, data, head, kernel, stride, pad)
    elif pool_type in ("avg", "avg_no_pad"):
        ref = _torch(F.avg_pool2d, data, head, kernel, stride, pad, count_include_pad=pool_type == "avg")
    elif pool_type == "sum":
        ref = _torch(lambda x: F.avg_pool2d(x, kernel, stride, pad) * (kernel[0] * kernel[1]), data, head)
    else:
        ref = _torch(F.lp_pool2d, data, head, 2, kernel, stride)
    for a, b in zip(ours, ref):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_1d_full_convention_and_global_pool():
    data = RNG.standard_normal((2, 3, 8))
    out, grad = _ours(data, np.ones((2, 3, 4)), kernel=(3,), stride=(2,), pooling_convention="full")
    ref = _torch(F.max_pool1d, data, np.ones((2, 3, 4)), 3, 2, 0, ceil_mode=True)
    np.testing.assert_allclose(out, ref[0])
    np.testing.assert_allclose(grad, ref[1])
    out, grad = _ours(data, np.ones((2, 3, 1)), pool_type="avg", global_pool=True)
    np.testing.assert_allclose(out, data.mean(axis=2, keepdims=True), rtol=1e-12)
    np.testing.assert_allclose(grad, np.full(data.shape, 1 / 8))
    # same: ceil(x / stride) windows from 0, the last one cut at the end (1-d, as MXNet)
    out, _ = _ours(data, np.ones((2, 3, 3)), kernel=(2,), stride=(3,), pooling_convention="same")
    np.testing.assert_allclose(out, np.stack([data[..., 0:2].max(-1), data[..., 3:5].max(-1),
                                              data[..., 6:8].max(-1)], axis=-1))
    out, _ = _ours(data, np.ones((2, 3, 3)), kernel=(3,), stride=(3,), pool_type="avg", pooling_convention="same")
    np.testing.assert_allclose(out, np.stack([data[..., 0:3].mean(-1), data[..., 3:6].mean(-1),
                                              data[..., 6:8].mean(-1)], axis=-1))  # cut at the end: 2 entries


def test_max_gradient_goes_to_the_first_largest_entry():
    data = np.array([[[[1.0, 3.0], [3.0, 0.0]]]])
    _, grad = _ours(data, np.ones((1, 1, 1, 1)), kernel=(2, 2))
    np.testing.assert_array_equal(grad, [[[[0.0, 1.0], [0.0, 0.0]]]])


def test_mxnet_face_and_refusals():
    data = RNG.standard_normal((1, 2, 4, 4)).astype(np.float32)
    y = mx.nd.Pooling(mx.nd.array(data), kernel=(2, 2), stride=(2, 2), pool_type="avg")
    assert isinstance(y, mx.nd.NDArray) and y.dtype == np.float32
    np.testing.assert_allclose(y.asnumpy(), data.reshape(1, 2, 2, 2, 2, 2).mean(axis=(3, 5)), rtol=1e-6)
    x = so.array(data)
    with pytest.raises(so.SparseOpsError, match="kernel size 5 exceeds the input"):
        so.ops.Pooling(x, kernel=(5, 5))
    with pytest.raises(so.SparseOpsError, match="'same' supports 1-d pooling without pad"):
        so.ops.Pooling(x, kernel=(2, 2), pooling_convention="same")
    with pytest.raises(so.SparseOpsError, match="positive p_value"):
        so.ops.Pooling(x, kernel=(2, 2), pool_type="lp")
    with pytest.raises(so.SparseOpsError, match="3-d .* or 4-d"):
        so.ops.Pooling(so.array(np.ones((2, 2))), kernel=(2,))
