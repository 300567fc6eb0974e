"""The MXNet face's operators written with the table's operators (batch_dot, Sequence*,
moments, depth_to_space, space_to_depth, diag): values against NumPy, gradients against
finite differences, and MXNet's refusals, each naming the function and the argument."""
import numpy as np
import pytest

import sparse_ops.compat.mxnet as mx
from sparse_ops.sdk.testing import check_numeric_gradient

RNG = np.random.default_rng(0)


def _a(v):
    return mx.nd.array(v, dtype=v.dtype)


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_batch_dot(ta, tb):
    a, b = RNG.standard_normal((2, 3, 4, 5)), RNG.standard_normal((2, 3, 5, 6))
    a2, b2 = (np.swapaxes(a, -1, -2) if ta else a), (np.swapaxes(b, -1, -2) if tb else b)
    y = mx.nd.batch_dot(_a(a2), _a(b2), transpose_a=ta, transpose_b=tb)
    assert isinstance(y, mx.nd.NDArray)
    np.testing.assert_allclose(y.asnumpy(), a @ b, rtol=1e-12)
    check_numeric_gradient(lambda x, z: mx.nd.batch_dot(x, z, transpose_a=ta, transpose_b=tb), [_a(a2), _a(b2)])


def test_batch_dot_refusals():
    with pytest.raises(mx.base.MXNetValueError, match="batch_dot: lhs and rhs must be N-d"):
        mx.nd.batch_dot(mx.nd.ones((2, 3)), mx.nd.ones((3, 2)))
    with pytest.raises(mx.base.MXNetValueError, match="forward_stype"):
        mx.nd.batch_dot(mx.nd.ones((2, 2, 2)), mx.nd.ones((2, 2, 2)), forward_stype="csr")
    with pytest.raises(mx.base.MXNetValueError, match="batch_dot: shapes \\(2, 2, 3\\) and \\(2, 2, 3\\) .* inner sizes"):
        mx.nd.batch_dot(mx.nd.ones((2, 2, 3)), mx.nd.ones((2, 2, 3)))
    with pytest.raises(mx.base.MXNetValueError, match="leading batch axes"):
        mx.nd.batch_dot(mx.nd.ones((3, 2, 3)), mx.nd.ones((2, 3, 3)))


@pytest.mark.parametrize("axis", [0, 1])
def test_sequence_mask_last_and_reverse(axis):
    steps, batch = 5, 3
    d = RNG.standard_normal((steps, batch, 2) if axis == 0 else (batch, steps, 2))
    lengths = np.array([2, 5, 1])
    seq = d if axis == 0 else np.swapaxes(d, 0, 1)  # (steps, batch, 2)
    keep = np.arange(steps)[:, None, None] < lengths[None, :, None]
    mask = mx.nd.SequenceMask(_a(d), _a(lengths.astype(np.float64)), use_sequence_length=True, value=-7.0, axis=axis)
    want = np.where(keep, seq, -7.0)
    np.testing.assert_array_equal(mask.asnumpy(), want if axis == 0 else np.swapaxes(want, 0, 1))
    last = mx.nd.SequenceLast(_a(d), _a(lengths.astype(np.float64)), use_sequence_length=True, axis=axis)
    np.testing.assert_array_equal(last.asnumpy(), seq[lengths - 1, np.arange(batch)])
    np.testing.assert_array_equal(mx.nd.SequenceLast(_a(d), axis=axis).asnumpy(), seq[-1])
    np.testing.assert_array_equal(mx.nd.SequenceMask(_a(d), axis=axis).asnumpy(), d)
    L = _a(lengths.astype(np.float64))
    for fn in (lambda x: mx.nd.SequenceMask(x, L, use_sequence_length=True, value=3.0, axis=axis),
               lambda x: mx.nd.SequenceLast(x, L, use_sequence_length=True, axis=axis)):
        check_numeric_gradient(fn, [_a(d)])
    if axis == 0:
        rev = mx.nd.SequenceReverse(_a(d), L, use_sequence_length=True).asnumpy()
        for b, n in enumerate(lengths):
            np.testing.assert_array_equal(rev[:n, b], d[:n, b][::-1])
            np.testing.assert_array_equal(rev[n:, b], d[n:, b])
        np.testing.assert_array_equal(mx.nd.SequenceReverse(_a(d)).asnumpy(), d[::-1])
        check_numeric_gradient(lambda x: mx.nd.SequenceReverse(x, L, use_sequence_length=True), [_a(d)])


def test_sequence_refusals_name_the_argument():
    d = mx.nd.ones((4, 2, 3))
    with pytest.raises(mx.base.MXNetValueError, match="SequenceLast: sequence_length 0 is outside \\[1, 4\\]"):
        mx.nd.SequenceLast(d, mx.nd.array([0, 2]), use_sequence_length=True)
    with pytest.raises(mx.base.MXNetValueError, match="SequenceReverse: sequence_length 5 is outside"):
        mx.nd.SequenceReverse(d, mx.nd.array([5, 2]), use_sequence_length=True)
    with pytest.raises(mx.base.MXNetValueError, match="3 entries for a batch of 2"):
        mx.nd.SequenceMask(d, mx.nd.array([1, 2, 3]), use_sequence_length=True)
    with pytest.raises(mx.base.MXNetArgumentError, match="needs the sequence_length input"):
        mx.nd.SequenceMask(d, use_sequence_length=True)
    with pytest.raises(mx.base.MXNetValueError, match="axis must be 0 or 1"):
        mx.nd.SequenceMask(d, axis=2)
    with pytest.raises(mx.base.MXNetValueError, match="only axis 0"):
        mx.nd.SequenceReverse(d, axis=1)
    with pytest.raises(mx.base.MXNetError, match="finite"):
        mx.nd.SequenceMask(d, mx.nd.array([np.nan, 2]), use_sequence_length=True)
    np.testing.assert_array_equal(  # lengths past the steps mask nothing, as in MXNet
        mx.nd.SequenceMask(d, mx.nd.array([9, 4]), use_sequence_length=True).asnumpy(), d.asnumpy())


@pytest.mark.parametrize("axes,keepdims", [(None, False), ((0, 2), False), (1, True)])
def test_moments(axes, keepdims):
    d = RNG.standard_normal((3, 4, 2))
    mean, var = mx.nd.moments(_a(d), axes=axes, keepdims=keepdims)
    np.testing.assert_allclose(mean.asnumpy(), np.atleast_1d(d.mean(axis=axes, keepdims=keepdims)), rtol=1e-12)
    np.testing.assert_allclose(var.asnumpy(), np.atleast_1d(d.var(axis=axes, keepdims=keepdims)), rtol=1e-12)
    check_numeric_gradient(lambda x: mx.nd.moments(x, axes=axes, keepdims=keepdims)[1], [_a(d)])


def test_depth_to_space_and_back():
    x = np.arange(24, dtype=np.float64).reshape(1, 4, 2, 3)
    y = mx.nd.depth_to_space(_a(x), 2).asnumpy()
    want = x.reshape(1, 2, 2, 1, 2, 3).transpose(0, 3, 4, 1, 5, 2).reshape(1, 1, 4, 6)
    np.testing.assert_array_equal(y, want)
    np.testing.assert_array_equal(y[0, 0, 0], [0, 6, 1, 7, 2, 8])  # MXNet's documented example
    np.testing.assert_array_equal(mx.nd.space_to_depth(_a(y), 2).asnumpy(), x)
    check_numeric_gradient(lambda v: mx.nd.space_to_depth(v, 2), [_a(RNG.standard_normal((2, 1, 4, 2)))])
    with pytest.raises(mx.base.MXNetValueError, match="multiple of block_size \\*\\* 2"):
        mx.nd.depth_to_space(mx.nd.ones((1, 3, 2, 2)), 2)
    with pytest.raises(mx.base.MXNetValueError, match="must be 4-d"):
        mx.nd.space_to_depth(mx.nd.ones((4, 4)), 2)


@pytest.mark.parametrize("k", [-2, 0, 1, 3])
def test_diag(k):
    v = RNG.standard_normal(3)
    np.testing.assert_array_equal(mx.nd.diag(_a(v), k=k).asnumpy(), np.diag(v, k))
    m = RNG.standard_normal((3, 4, 5))
    np.testing.assert_array_equal(mx.nd.diag(_a(m), k=k, axis1=0, axis2=2).asnumpy(), np.diagonal(m, k, 0, 2))
    np.testing.assert_array_equal(mx.nd.diag(_a(m[0]), k=k).asnumpy(), np.diag(m[0], k))
    check_numeric_gradient(lambda x: mx.nd.diag(x, k=k), [_a(v)])
    check_numeric_gradient(lambda x: mx.nd.diag(x, k=k, axis1=-1, axis2=0), [_a(m)])
    with pytest.raises(mx.base.MXNetValueError, match="distinct axes"):
        mx.nd.diag(_a(m), axis1=1, axis2=-2)


def _bn_ref(d, g, b, mean, var, eps, axis=1):
    shape = [1] * d.ndim
    shape[axis] = -1
    r = lambda v: v.reshape(shape)  # noqa: E731
    return (d - r(mean)) / np.sqrt(r(var) + eps) * r(g) + r(b)


@pytest.mark.parametrize("axis", [1, -1])
def test_batch_norm_training_and_inference(axis):
    from sparse_ops.sdk.testing import check_numeric_gradient as cng

    d = RNG.standard_normal((4, 3, 5))
    c = d.shape[axis]
    g, b = RNG.standard_normal(c), RNG.standard_normal(c)
    others = tuple(i for i in range(3) if i != axis % 3)
    mm, mv = _a(np.zeros(c)), _a(np.ones(c))
    x = _a(d)
    with mx.autograd.record():
        y = mx.nd.BatchNorm(x, _a(g), _a(b), mm, mv, eps=1e-5, fix_gamma=False, axis=axis, momentum=0.8)
    mean, var = d.mean(axis=others), d.var(axis=others)
    np.testing.assert_allclose(y.asnumpy(), _bn_ref(d, g, b, mean, var, 1e-5, axis), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(mm.asnumpy(), 0.2 * mean, rtol=1e-12)
    np.testing.assert_allclose(mv.asnumpy(), 0.8 + 0.2 * var, rtol=1e-12)
    # inference: the moving statistics, nothing moved; fix_gamma takes gamma as ones
    y = mx.nd.BatchNorm(x, _a(g), _a(b), mm, mv, axis=axis)
    np.testing.assert_allclose(y.asnumpy(), _bn_ref(d, np.ones(c), b, 0.2 * mean, 0.8 + 0.2 * var, 1e-3, axis),
                               rtol=1e-10)
    np.testing.assert_allclose(mm.asnumpy(), 0.2 * mean, rtol=1e-12)

    def train(v, gamma, beta):
        with mx.autograd.train_mode():
            return mx.nd.BatchNorm(v, gamma, beta, _a(np.zeros(c)), _a(np.ones(c)), fix_gamma=False, axis=axis)
    cng(train, [_a(d), _a(g), _a(b)])
    out, m, invstd = mx.nd.BatchNorm(x, _a(g), _a(b), _a(np.zeros(c)), _a(np.ones(c)), output_mean_var=True,
                                     axis=axis, use_global_stats=True)
    np.testing.assert_allclose(invstd.asnumpy(), np.full(c, 1 / np.sqrt(1 + 1e-3)))


def test_sync_batch_norm_is_batch_norm_on_one_device_and_reports_the_variance():
    """``contrib.SyncBatchNorm`` on one device: BatchNorm's values, gradients and moving
    statistics over channel axis 1; its third ``output_mean_var`` output is the batch's
    variance (BatchNorm's is the inverse standard deviation)."""
    d = RNG.standard_normal((4, 3, 5))
    g, b = RNG.standard_normal(3), RNG.standard_normal(3)
    stats = [(_a(np.zeros(3)), _a(np.ones(3))) for _ in range(2)]
    outs = []
    for op, (mm, mv) in zip((mx.nd.BatchNorm, mx.nd.contrib.SyncBatchNorm), stats):
        x = _a(d)
        x.attach_grad()
        extra = {"key": "bn0", "ndev": 1} if op is mx.nd.contrib.SyncBatchNorm else {}
        with mx.autograd.record():
            y, mean, third = op(x, _a(g), _a(b), mm, mv, eps=1e-5, fix_gamma=False, output_mean_var=True, **extra)
        y.backward(mx.nd.array(np.arange(d.size).reshape(d.shape) % 7, dtype="float64"))
        outs.append((y.asnumpy(), mean.asnumpy(), third.asnumpy(), x.grad.asnumpy(), mm.asnumpy(), mv.asnumpy()))
    (y0, m0, inv0, g0, mm0, mv0), (y1, m1, var1, g1, mm1, mv1) = outs
    for a, b_ in ((y0, y1), (m0, m1), (g0, g1), (mm0, mm1), (mv0, mv1)):
        np.testing.assert_allclose(a, b_, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(var1, d.var(axis=(0, 2)), rtol=1e-9)
    np.testing.assert_allclose(inv0, 1 / np.sqrt(d.var(axis=(0, 2)) + 1e-5), rtol=1e-9)
    with pytest.raises(mx.base.MXNetError, match="ndev must be a positive int"):
        mx.nd.contrib.SyncBatchNorm(_a(d), _a(g), _a(b), *stats[0], ndev=0)


def test_engine_bulk_is_a_scheduling_hint_that_changes_no_value():
    with mx.engine.bulk(10):
        x = mx.nd.ones((3,))
        x *= 2
        assert mx.engine.set_bulk_size(5) == 10
    assert mx.engine.set_bulk_size(0) == 0 and (x.asnumpy() == 2).all()


def test_layer_norm_and_l2_normalization():
    d = RNG.standard_normal((3, 4, 5))
    g, b = RNG.standard_normal(5), RNG.standard_normal(5)
    y, mean, std = mx.nd.LayerNorm(_a(d), _a(g), _a(b), output_mean_var=True)
    m, v = d.mean(-1, keepdims=True), d.var(-1, keepdims=True)
    np.testing.assert_allclose(y.asnumpy(), (d - m) / np.sqrt(v + 1e-5) * g + b, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(std.asnumpy(), np.sqrt(v + 1e-5), rtol=1e-12)
    check_numeric_gradient(lambda x, gm, bt: mx.nd.LayerNorm(x, gm, bt, axis=1),
                           [_a(d), _a(RNG.standard_normal(4)), _a(RNG.standard_normal(4))])
    for mode, axes in (("instance", (1, 2)), ("channel", (1,)), ("spatial", (2,))):
        want = d / np.sqrt((d * d).sum(axis=axes, keepdims=True) + 1e-10)
        np.testing.assert_allclose(mx.nd.L2Normalization(_a(d), mode=mode).asnumpy(), want, rtol=1e-12)
        check_numeric_gradient(lambda x: mx.nd.L2Normalization(x, mode=mode), [_a(d)])
    with pytest.raises(mx.base.MXNetValueError, match="gamma must have shape \\(5,\\)"):
        mx.nd.LayerNorm(_a(d), _a(g[:4]), _a(b))
    with pytest.raises(mx.base.MXNetError, match="L2Normalization: parameter .mode. must be one of"):
        mx.nd.L2Normalization(_a(d), mode="rows")


def test_instance_norm_and_group_norm():
    """Against torch's instance_norm and group_norm (MXNet 1.9's shapes: GroupNorm's gamma and
    beta one value a group), gradients against finite differences, and the refusals."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    d = RNG.standard_normal((2, 6, 3, 4))
    g6, b6, g3, b3 = (RNG.standard_normal(n) for n in (6, 6, 3, 3))
    y = mx.nd.InstanceNorm(_a(d), _a(g6), _a(b6))
    want = F.instance_norm(torch.from_numpy(d), weight=torch.from_numpy(g6), bias=torch.from_numpy(b6), eps=1e-3)
    np.testing.assert_allclose(y.asnumpy(), want.numpy(), rtol=1e-10, atol=1e-12)
    y, mean, std = mx.nd.GroupNorm(_a(d), _a(g3), _a(b3), num_groups=3, output_mean_var=True)
    grouped = d.reshape(2, 3, -1)
    norm = F.group_norm(torch.from_numpy(d), 3, eps=1e-5).numpy().reshape(2, 3, -1)
    np.testing.assert_allclose(y.asnumpy(), (norm * g3[:, None] + b3[:, None]).reshape(d.shape), rtol=1e-10,
                               atol=1e-12)
    np.testing.assert_allclose(mean.asnumpy(), grouped.mean(-1), rtol=1e-12)
    np.testing.assert_allclose(std.asnumpy(), np.sqrt(grouped.var(-1) + 1e-5), rtol=1e-12)
    assert mx.nd.GroupNorm(mx.nd.array(d, dtype="float16"), mx.nd.ones(1), mx.nd.zeros(1)).dtype == np.float16
    small = d[:, :4, :2, :3]
    check_numeric_gradient(lambda x, gm, bt: mx.nd.InstanceNorm(x, gm, bt), [_a(small), _a(g6[:4]), _a(b6[:4])])
    check_numeric_gradient(lambda x, gm, bt: mx.nd.GroupNorm(x, gm, bt, num_groups=2),
                           [_a(small), _a(g3[:2]), _a(b3[:2])])
    with pytest.raises(mx.base.MXNetValueError, match="GroupNorm: the 6 channels must split into num_groups=4"):
        mx.nd.GroupNorm(_a(d), _a(g3), _a(b3), num_groups=4)
    with pytest.raises(mx.base.MXNetValueError, match="GroupNorm: gamma must have shape \\(3,\\)"):
        mx.nd.GroupNorm(_a(d), _a(g6), _a(b6), num_groups=3)
    with pytest.raises(mx.base.MXNetValueError, match="InstanceNorm: data must have at least 3 axes"):
        mx.nd.InstanceNorm(_a(d[0, 0]), _a(g6), _a(b6))
    with pytest.raises(mx.base.MXNetValueError, match="InstanceNorm: data must be a floating-point array"):
        mx.nd.InstanceNorm(mx.nd.ones((2, 6, 3), dtype="int32"), _a(g6), _a(b6))


def test_softmax_activation_cross_entropy_upsampling_and_hypot():
    """Against torch (softmax, cross_entropy), NumPy's repeat and hypot; gradients against
    finite differences; MXNet's refusals naming the function."""
    torch = pytest.importorskip("torch")
    d = RNG.standard_normal((2, 3, 4))
    for mode, axis in (("instance", -1), ("channel", 1)):
        np.testing.assert_allclose(mx.nd.SoftmaxActivation(_a(d), mode=mode).asnumpy(),
                                   torch.softmax(torch.from_numpy(d), axis).numpy(), rtol=1e-12)
    check_numeric_gradient(lambda x: mx.nd.SoftmaxActivation(x, mode="channel"), [_a(d)])
    with pytest.raises(mx.base.MXNetValueError, match="SoftmaxActivation: mode='channel' needs data of at least 3"):
        mx.nd.SoftmaxActivation(_a(d[0]), mode="channel")
    logits, labels = RNG.standard_normal((4, 5)), np.array([0, 4, 2, 1])
    loss = mx.nd.softmax_cross_entropy(_a(logits), _a(labels))
    want = torch.nn.functional.cross_entropy(torch.from_numpy(logits), torch.from_numpy(labels), reduction="sum")
    assert loss.shape == (1,)
    np.testing.assert_allclose(loss.asnumpy(), [want.item()], rtol=1e-12)
    check_numeric_gradient(lambda x: mx.nd.softmax_cross_entropy(x, _a(labels)), [_a(logits)])
    with pytest.raises(mx.base.MXNetValueError, match="softmax_cross_entropy: data must be \\(batch, classes\\)"):
        mx.nd.softmax_cross_entropy(_a(logits), _a(labels[:2]))
    a, b = RNG.standard_normal((1, 2, 2, 3)), RNG.standard_normal((1, 2, 4, 6))
    up = mx.nd.UpSampling(_a(a), _a(b), scale=2, sample_type="nearest", num_args=2)
    np.testing.assert_array_equal(up.asnumpy(), np.concatenate([a.repeat(2, 2).repeat(2, 3), b], axis=1))
    added = mx.nd.UpSampling(_a(a), _a(b), scale=2, sample_type="nearest", num_args=2, multi_input_mode="sum")
    np.testing.assert_array_equal(added.asnumpy(), a.repeat(2, 2).repeat(2, 3) + b)
    check_numeric_gradient(lambda x: mx.nd.UpSampling(x, scale=2, sample_type="nearest"), [_a(a)])
    with pytest.raises(mx.base.MXNetValueError, match="UpSampling: sample_type='bilinear'"):
        mx.nd.UpSampling(_a(a), scale=2, sample_type="bilinear")
    with pytest.raises(mx.base.MXNetValueError, match="UpSampling: input 1 of height and width \\(3, 3\\)"):
        mx.nd.UpSampling(_a(a), _a(b[:, :, :3, :3]), scale=2, sample_type="nearest", num_args=2)
    with pytest.raises(mx.base.MXNetError, match="UpSampling: .*scale"):
        mx.nd.UpSampling(_a(a), sample_type="nearest")
    x, y = RNG.standard_normal((3, 4)) * 1e200, RNG.standard_normal((1, 4)) * 1e200  # no overflow of squares
    np.testing.assert_allclose(mx.nd.broadcast_hypot(_a(x), _a(y)).asnumpy(), np.hypot(x, y), rtol=1e-14)
    check_numeric_gradient(lambda p, q: mx.nd.broadcast_hypot(p, q), [_a(x[:, :2] * 1e-200), _a(y[:, :2] * 1e-200)])


def test_normalisation_mixed_precision_and_fix_gamma():
    """float16 data with float32 parameters (MXNet's mixed precision): the output in float16,
    the statistics in float32; fix_gamma (the default) gives gamma a zero gradient; an empty
    training batch is refused before the moving statistics turn NaN."""
    d = RNG.standard_normal((4, 3, 2))
    x16 = mx.nd.array(d, dtype="float16")
    mm, mv = mx.nd.zeros(3), mx.nd.ones(3)
    with mx.autograd.train_mode():
        out, mean, invstd = mx.nd.BatchNorm(x16, mx.nd.ones(3), mx.nd.zeros(3), mm, mv, output_mean_var=True)
    assert (out.dtype, mean.dtype, invstd.dtype, mm.dtype) == (np.float16, np.float32, np.float32, np.float32)
    want = (d - d.mean((0, 2), keepdims=True)) / np.sqrt(d.var((0, 2), keepdims=True) + 1e-3)
    np.testing.assert_allclose(out.asnumpy().astype(np.float64), want, atol=2e-3)
    assert mx.nd.LayerNorm(x16, mx.nd.ones(2), mx.nd.zeros(2)).dtype == np.float16
    g = mx.nd.ones(3)
    g.attach_grad()
    g.grad[:] = 5
    with mx.autograd.record():
        y = mx.nd.BatchNorm(mx.nd.array(d), g, mx.nd.zeros(3), mx.nd.zeros(3), mx.nd.ones(3))
    y.backward()
    np.testing.assert_array_equal(g.grad.asnumpy(), 0)
    mm, mv = mx.nd.zeros(3), mx.nd.ones(3)
    with mx.autograd.train_mode(), pytest.raises(mx.base.MXNetValueError, match="at least one value per channel"):
        mx.nd.BatchNorm(mx.nd.zeros((0, 3)), mx.nd.ones(3), mx.nd.zeros(3), mm, mv)
    np.testing.assert_array_equal(mm.asnumpy(), 0)
    with pytest.raises(mx.base.MXNetArgumentError, match="moving_mean must be an NDArray"):
        mx.nd.BatchNorm(mx.nd.array(d), mx.nd.ones(3), mx.nd.zeros(3), np.zeros(3), mx.nd.ones(3))
    with pytest.raises(mx.base.MXNetError, match="LayerNorm: bad value a NDArray of shape \\(4, 3, 2\\) for "
                                                 "parameter 'axis'"):
        mx.nd.LayerNorm(mx.nd.array(d), mx.nd.ones(2), mx.nd.zeros(2), mx.nd.array(d))


def test_sequences_of_an_empty_batch_and_refusals():
    lengths, x = mx.nd.zeros((0,)), mx.nd.zeros((4, 0, 2))
    assert mx.nd.SequenceReverse(x, lengths, use_sequence_length=True).shape == (4, 0, 2)
    x.attach_grad()
    with mx.autograd.record():
        y = mx.nd.SequenceLast(x, lengths, use_sequence_length=True)
    y.backward()
    assert y.shape == (0, 2) and x.grad.shape == (4, 0, 2)
    with pytest.raises(mx.base.MXNetValueError, match="no last step"):
        mx.nd.SequenceLast(mx.nd.zeros((0, 3)))
    with pytest.raises(mx.base.MXNetError, match="diag: bad value 1.5 for parameter 'k': expected an int"):
        mx.nd.diag(mx.nd.ones((3, 3)), k=1.5)
    with pytest.raises(mx.base.MXNetArgumentError, match="make_loss\\(\\) got 1 positional parameter"):
        mx.nd.make_loss(mx.nd.ones(2), mx.nd.ones(2))
    with pytest.raises(mx.base.MXNetError, match="bad value 'uint8' for parameter 'dtype'"):
        mx.nd.softmax(mx.nd.ones(2), dtype="uint8")


def test_a_write_into_a_recorded_array_is_refused_at_the_write():
    """MXNet refuses any write into an array already in a graph while recording (a recorded
    view of a variable included), before the variable changes."""
    x = mx.nd.array(np.ones((4, 3)))
    x.attach_grad()
    with mx.autograd.record():
        v = x[1:3]
        with pytest.raises(mx.base.MXNetError, match="Inplace operations"):
            v[:] = 5
        with pytest.raises(mx.base.MXNetError, match="Inplace operations"):
            x[:] = 2
    np.testing.assert_array_equal(x.asnumpy(), 1)


# ---- arguments read as MXNet reads them ------------------------------------------------------------------
def test_string_parameters_read_as_mxnet_reads_them():
    """MXNet hands every keyword on as a string: 'False' and '0' are false, as they are for the
    face's registered operators, in the functions it writes in Python too."""
    a, b = RNG.standard_normal((2, 3, 4)), RNG.standard_normal((2, 3, 4))
    got = mx.nd.batch_dot(_a(a), _a(b), transpose_a="False", transpose_b="True").asnumpy()
    np.testing.assert_allclose(got, a @ np.swapaxes(b, 1, 2), rtol=1e-12)
    x = _a(RNG.standard_normal((3, 2)))
    lengths = mx.nd.array([1, 2])
    for off in ("False", "0", 0, False):
        np.testing.assert_array_equal(mx.nd.SequenceMask(x, lengths, use_sequence_length=off).asnumpy(),
                                      x.asnumpy())
    np.testing.assert_array_equal(mx.nd.SequenceMask(x, lengths, use_sequence_length="True").asnumpy(),
                                  np.where([[True, True], [False, True], [False, False]], x.asnumpy(), 0))
    mean = mx.nd.moments(x, axes="0", keepdims="False")[0]
    assert mean.shape == (2,)
    np.testing.assert_allclose(mean.asnumpy(), x.asnumpy().mean(0), rtol=1e-12)
    data, gamma = _a(RNG.standard_normal((4, 3))), _a(RNG.uniform(1, 2, 3))
    zero, one = _a(np.zeros(3)), _a(np.ones(3))
    with mx.autograd.record():
        y = mx.nd.BatchNorm(data, gamma, _a(np.zeros(3)), zero.copy(), one.copy(), fix_gamma="False",
                            output_mean_var="False")
    assert isinstance(y, mx.nd.NDArray)
    d = data.asnumpy()
    want = (d - d.mean(0)) / np.sqrt(d.var(0) + 1e-3) * gamma.asnumpy()
    np.testing.assert_allclose(y.asnumpy(), want, rtol=1e-10)


@pytest.mark.parametrize("call,error,text", [
    (lambda x: mx.nd.LayerNorm(x), mx.base.MXNetArgumentError, "LayerNorm: missing a required argument: 'gamma'"),
    (lambda x: mx.nd.moments(x, axis=1), mx.base.MXNetArgumentError, "moments: got an unexpected keyword"),
    (lambda x: mx.nd.batch_dot(x), mx.base.MXNetArgumentError, "batch_dot: missing a required argument: 'rhs'"),
    (lambda x: mx.nd.BatchNorm(x, *[mx.nd.ones(3)] * 4, eps="x"), mx.base.MXNetError,
     "BatchNorm: bad value 'x' for parameter 'eps'"),
    (lambda x: mx.nd.BatchNorm(x, *[mx.nd.ones(3)] * 4, momentum=None), mx.base.MXNetError,
     "BatchNorm: bad value None for parameter 'momentum'"),
    (lambda x: mx.nd.SequenceMask(x, value="a"), mx.base.MXNetError, "SequenceMask: bad value 'a' for parameter 'value'"),
    (lambda x: mx.nd.L2Normalization(x, mode="rows"), mx.base.MXNetError, "L2Normalization: parameter 'mode' must be"),
    (lambda x: mx.nd.moments(x, axes=(5,)), mx.base.MXNetError, "moments: .*axis 5 is out of range"),
    (lambda x: mx.nd.SoftmaxOutput(x), mx.base.MXNetArgumentError, "SoftmaxOutput.* missing input 'label'"),
    (lambda x: mx.nd.dot(x), mx.base.MXNetArgumentError, "dot.* missing input 'rhs'"),
    (lambda x: mx.nd.exp(), mx.base.MXNetArgumentError, "exp.* missing input 'data'"),
])
def test_refusals_are_mxnet_errors_naming_the_function_and_the_argument(call, error, text):
    x = mx.nd.ones((2, 3, 4))
    with pytest.raises(error, match=text):
        call(x)
    np.testing.assert_allclose(mx.nd.moments(x, axes=1)[0].asnumpy(), np.ones((2, 4)))  # and all still works


@pytest.mark.parametrize("fn", [
    lambda x: mx.nd.L2Normalization(x),
    lambda x: mx.nd.LayerNorm(x, mx.nd.ones(4), mx.nd.zeros(4)),
    lambda x: mx.nd.BatchNorm(x, *[mx.nd.ones(3)] * 4),
    lambda x: mx.nd.batch_dot(x, x, transpose_b=True),
])
def test_integer_data_is_refused_by_the_real_valued_layers(fn):
    """MXNet's normalisation layers and batch_dot take floating-point data only; an integer
    array would give truncated results (0 for every normalised value)."""
    x = mx.nd.array(np.arange(24).reshape(2, 3, 4), dtype="int32")
    with pytest.raises(mx.base.MXNetValueError, match="must be a floating-point array .* got int32 \\(argument"):
        fn(x)


def test_batch_dot_of_two_dtypes_names_the_argument_not_an_internal_operator():
    with pytest.raises(mx.base.MXNetValueError, match="batch_dot: lhs and rhs must have one dtype.*argument rhs"):
        mx.nd.batch_dot(mx.nd.ones((2, 3, 4)), mx.nd.ones((2, 4, 3), dtype="float64"))


def test_huge_float_lengths_and_indices_hold_at_int64s_bounds():
    """A float length or index past int64 is held at int64's bound, never wrapped to a
    negative one: a length of 1e19 keeps every step (as 1e18 does), an index of 1e20 clips to
    the last row, and -1e20 to the first."""
    x = mx.nd.ones((3, 2))
    np.testing.assert_array_equal(
        mx.nd.SequenceMask(x, mx.nd.array([1e19, 2]), use_sequence_length=True).asnumpy(),
        [[1, 1], [1, 1], [1, 0]])
    y = mx.nd.array(np.arange(6.0).reshape(3, 2))
    np.testing.assert_array_equal(mx.nd.take(y, mx.nd.array([1e20, -1e20]), mode="clip").asnumpy(),
                                  [[4, 5], [0, 1]])
    with pytest.raises(IndexError, match="out of bounds"):
        y[mx.nd.array([1e20])]


def test_the_faces_other_python_functions_take_arguments_as_operators_do():
    """linspace, eye, concatenate, boolean_mask, rand_zipfian, ...: strings read as MXNet reads
    them, and a missing argument an MXNetArgumentError naming the function."""
    np.testing.assert_allclose(mx.nd.linspace(0, 1, "5", endpoint="False").asnumpy(), [0, 0.2, 0.4, 0.6, 0.8],
                               rtol=1e-6)
    np.testing.assert_array_equal(mx.nd.eye("3", k="1").asnumpy(), np.eye(3, k=1))
    x = mx.nd.array([[1.0, 2.0], [3.0, 4.0]])
    assert mx.nd.concatenate([x, x], axis="1").shape == (2, 4)
    np.testing.assert_array_equal(mx.nd.contrib.boolean_mask(x, mx.nd.array([0, 1]), axis="0").asnumpy(), [[3, 4]])
    assert mx.nd.contrib.rand_zipfian(mx.nd.array([1]), "4", "10")[0].shape == (4,)
    for call, name in ((lambda: mx.nd.moveaxis(x), "moveaxis"), (lambda: mx.nd.Activation(x), "Activation"),
                       (lambda: mx.nd.gather_nd(x), "gather_nd"), (lambda: mx.nd.onehot_encode(x), "onehot_encode")):
        with pytest.raises(mx.base.MXNetArgumentError, match=f"^{name}: missing a required argument"):
            call()
    with pytest.raises(mx.base.MXNetError, match="linspace: bad value 'x' for parameter 'endpoint'"):
        mx.nd.linspace(0, 1, 5, endpoint="x")
