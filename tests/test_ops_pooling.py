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
    # MXNet's own test passes pad=(0, 0, 0) with a 1-d kernel: 'same' checks only that the pad is zero
    padded, _ = _ours(data, np.ones((2, 3, 3)), kernel=(3,), stride=(3,), pool_type="avg", pad=(0, 0, 0),
                      pooling_convention="same")
    np.testing.assert_array_equal(padded, out)
    with pytest.raises(so.SparseOpsError, match="'same' supports 1-d pooling without pad"):
        so.ops.Pooling(so.array(data), kernel=(3,), pad=(1,), pooling_convention="same")


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
    for p in (None, 0, 4):
        with pytest.raises(so.SparseOpsError, match="p_value 1, 2 or 3"):
            so.ops.Pooling(x, kernel=(2, 2), pool_type="lp", p_value=p)
    with pytest.raises(so.SparseOpsError, match="3-d .* or 4-d"):
        so.ops.Pooling(so.array(np.ones((2, 2))), kernel=(2,))


def test_windows_of_padding_only_give_mxnets_values_without_a_warning():
    """A ``full`` window past the data reads nothing: its sum and average are 0, its max the
    dtype's lowest finite value, where MXNet's loops start; padding never wins a max."""
    x = np.array([[[1.0, 2.0, 3.0, 4.0]]], dtype=np.float32)
    with np.errstate(all="raise"):
        for pool_type, last in (("avg", 0.0), ("sum", 0.0), ("max", np.finfo(np.float32).min)):
            out, grad = _ours(x, np.ones((1, 1, 3), np.float32), kernel=(1,), stride=(2,),
                              pooling_convention="full", pool_type=pool_type)
            np.testing.assert_array_equal(out, [[[1.0, 3.0, last]]])
            np.testing.assert_array_equal(grad, [[[1.0, 0.0, 1.0, 0.0]]])
    out, _ = _ours(np.array([[[1.0, 2.0]]]), np.ones((1, 1, 4)), kernel=(1,), pad=(1,))
    np.testing.assert_array_equal(out, [[[np.finfo(np.float64).min, 1.0, 2.0, np.finfo(np.float64).min]]])


@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pooling_takes_signed_powers_and_roots_as_mxnet(p):
    """MXNet's lp pooling: sum(x ** p) ** (1 / p) with x ** p and the root signed (p = 1 the
    plain sum, p = 3 the cube root), its gradient (x / out) ** (p - 1) (1 for p = 1), values
    and gradients checked by hand and by finite differences."""
    data = np.array([[[-1.0, 2.0, -3.0, 0.5, 4.0, -2.5]]])
    head = np.array([[[0.5, -1.5, 2.0]]])
    out, grad = _ours(data, head, kernel=(2,), stride=(2,), pool_type="lp", p_value=p)
    w = data.reshape(3, 2)
    want = np.cbrt((w ** 3).sum(1)) if p == 3 else (w ** p).sum(1) ** (1.0 / p)
    np.testing.assert_allclose(out.reshape(3), want, rtol=1e-12)
    ratio = (w / want[:, None]) ** (p - 1)
    np.testing.assert_allclose(grad.reshape(3, 2), ratio * head.reshape(3, 1), rtol=1e-12)

    def f(d):
        return (so.ops.Pooling(so.array(d), kernel=(2,), stride=(2,), pool_type="lp", p_value=p).asnumpy()
                * head).sum()

    eps, numeric = 1e-6, np.zeros_like(data)
    for i in range(data.size):
        step = np.zeros(data.size)
        step[i] = eps
        step = step.reshape(data.shape)
        numeric.flat[i] = (f(data + step) - f(data - step)) / (2 * eps)
    np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-8)
