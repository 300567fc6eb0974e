"""Hostile writes and flags around autograd and the containers: each either computes what
NumPy, torch or MXNet would, or is refused with a message saying what to do, and the
process and the autograd state keep working afterwards."""
from __future__ import annotations

import numpy as np
import pytest

import sparse_ops as so
from sparse_ops import autograd

X = np.array([0.5, 1.0, 2.0], np.float32)


def _still_differentiates() -> None:
    x = so.array(X)
    x.attach_grad()
    with autograd.record():
        y = so.sum(so.exp(x))
    y.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), np.exp(X), rtol=1e-6)


def test_values_sharing_memory_with_indices_are_refused():
    """A write of the (writable) values would change the (checked, read-only) indices, and a
    kernel would then read out of bounds."""
    buf = np.array([0, 1, 2], np.int64)
    with pytest.raises(so.SparseFormatError, match="the values share memory with the indices"):
        so.csr_matrix((buf, buf, np.array([0, 1, 2, 3])), shape=(3, 3))
    ptr = np.array([0, 1, 2, 3], np.int64)
    with pytest.raises(so.SparseFormatError, match="the values share memory with the indptr"):
        so.csr_matrix((ptr[1:], np.array([0, 1, 2]), ptr), shape=(3, 3))
    rows = np.array([0, 2], np.int64)
    with pytest.raises(so.SparseFormatError, match="the values share memory with the indices"):
        so.row_sparse_array((rows.reshape(2, 1), rows), shape=(3, 1))
    block = np.zeros(8)  # disjoint parts of one buffer are fine
    x = so.csr_matrix((block[:3], np.array([0, 1, 2]), np.array([0, 1, 2, 3])), shape=(3, 3))
    np.testing.assert_array_equal(x.asnumpy(), np.zeros((3, 3)))


def test_req_add_while_recording_is_refused_and_outside_it_adds():
    x = so.array(X)
    x.attach_grad()
    o = so.ones((3,))
    with autograd.record(), pytest.raises(so.OperatorError, match="operator 'exp': req='add' is not recorded"):
        so.exp(x, out=o, req="add")
    np.testing.assert_array_equal(o.asnumpy(), 1)  # nothing written
    so.exp(x, out=o, req="add")
    np.testing.assert_allclose(o.asnumpy(), 1 + np.exp(X), rtol=1e-6)
    _still_differentiates()


def test_a_whole_write_of_a_recorded_value_is_recorded_and_a_partial_one_refused():
    """``c[:] = x * 3`` while recording makes c the copy's output (torch's copy_, MXNet's
    recorded x[:] = y); writing it into part of c is refused rather than dropped from the graph."""
    x = so.array(X)
    x.attach_grad()
    c = so.zeros((3,))
    with autograd.record():
        c[:] = x * 3
        loss = so.sum(c * c) + so.sum(x)
    loss.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), 18 * X + 1, rtol=1e-6)
    wide = so.zeros((2, 3), dtype="float64")  # broadcast and cast on the way, still recorded
    x.attach_grad()
    with autograd.record():
        wide[...] = x
        loss = so.sum(wide)
    loss.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), 2)
    with autograd.record(), pytest.raises(so.OperatorError, match=r"x\[slice\(1, None, None\)\] = value: writing "
                                                                 "a value that needs a gradient into part"):
        c2 = so.zeros((4,))
        c2[1:] = x
    _still_differentiates()


def test_take_wraps_float_indices_of_any_magnitude_exactly():
    a = np.arange(12, dtype=np.float32).reshape(6, 2)
    ids = np.array([2.0 ** 63, -2.0 ** 63, 9.3e18, 5e19, 1e300, -7.5, 5.9])
    got = so.take(so.array(a), so.array(ids), mode="wrap").asnumpy()[:, 0] / 2
    np.testing.assert_array_equal(got, [int(v) % 6 for v in ids])
    with pytest.raises(so.SparseOpsError, match="holds nan, which is no index"):
        so.take(so.array(a), so.array(np.array([np.nan])), mode="wrap")


def test_one_gradient_buffer_for_two_variables_is_refused():
    x, y, g = so.array(X), so.array(X), so.zeros((3,))
    with pytest.raises(ValueError, match="gradient buffers 0 and 1 share memory"):
        autograd.mark_variables([x, y], [g, g])
    half = so.zeros((6,))
    with pytest.raises(ValueError, match="share memory"):
        autograd.mark_variables([x, y], [half[:3], half[2:5]])
    autograd.mark_variables([x, y], [half[:3], half[3:]])  # disjoint views are two buffers


@pytest.mark.parametrize("flag", ["False", 2, 0.0, None])
def test_train_mode_flags_other_than_bools_are_refused(flag):
    with pytest.raises(TypeError, match="record: train_mode must be a bool"):
        autograd.record(train_mode=flag)
    with pytest.raises(TypeError, match="set_training: the flag must be a bool"):
        autograd.set_training(flag)
    assert not autograd.is_training()
    _still_differentiates()


def test_numpy_bools_and_0_or_1_are_flags():
    with autograd.record(train_mode=np.False_):
        assert autograd.is_recording() and autograd.is_training() is False
    previous = autograd.set_training(1)
    assert autograd.is_training() is True
    autograd.set_training(previous)


def test_an_integer_array_takes_no_gradient_natively_but_does_on_the_mxnet_face():
    """torch refuses requires_grad on integer tensors; MXNet attaches integer gradients."""
    x = so.array(np.array([1, 2], np.int64))
    with pytest.raises(TypeError, match="attach_grad on an array of dtype int64: integer and boolean arrays cannot"):
        x.attach_grad()
    from sparse_ops.compat import mxnet as mx

    m = mx.nd.array([1, 2], dtype="int32")
    m.attach_grad()
    with mx.autograd.record():
        y = m * 2
    y.backward()
    np.testing.assert_array_equal(m.grad.asnumpy(), [2, 2])
    assert m.grad.dtype == np.int32


def test_a_second_backward_names_the_ops_the_user_called():
    """The MXNet face's full reduction ends in an internal reshape to (1,): the refusal of a
    second backward names the ops behind it too, not that step alone."""
    from sparse_ops.compat import mxnet as mx

    x = mx.nd.array(X)
    x.attach_grad()
    with mx.autograd.record():
        y = mx.nd.exp(x).sum()
    y.backward()
    with pytest.raises(so.OperatorError, match="the graph through operator 'reshape', operator 'sum', operator "
                                               "'exp' was freed by an earlier backward"):
        y.backward()
    _still_differentiates()
