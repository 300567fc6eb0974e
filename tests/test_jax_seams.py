"""Where the JAX bridge meets the core: the one dtype policy (refused at trace time with the
wording every face uses) and mutated inputs as new states (JAX arrays are immutable)."""
import re

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402

import sparse_ops as so  # noqa: E402
import sparse_ops.jax as soj  # noqa: E402
from sparse_ops.dtypes import not_held  # noqa: E402
from sparse_ops.jax import JaxBridgeError, RowSparse  # noqa: E402

REFUSED = ["uint8", "int8", "int16", "uint16", "uint32", "uint64", "bool", "complex64", "bfloat16"]


@pytest.mark.parametrize("dtype", REFUSED)
def test_unheld_dtypes_are_refused_at_trace_time_with_the_shared_wording(dtype):
    x = jnp.asarray([200, 100, 3]).astype(jnp.dtype(dtype))  # uint64 is uint32 without x64
    expected = f"sparse_ops.jax.ops.sum: argument 'data': {not_held(x.dtype)}"
    # eval_shape traces and runs nothing: the refusal comes before any buffer reaches the handler
    with pytest.raises(JaxBridgeError) as info:
        jax.eval_shape(soj.ops.sum, x)
    assert str(info.value).startswith(expected)
    with pytest.raises(JaxBridgeError, match="not supported"):
        jax.jit(soj.ops.exp)(x)
    with pytest.raises(JaxBridgeError, match=f"argument 'lhs': arrays of dtype {x.dtype.name}"):
        soj.ops.dot(x.reshape(3, 1), x.reshape(1, 3))


def test_the_refusal_reads_the_same_natively_and_through_torch():
    """The core of the message is one function's, whichever face refuses (the torch face
    names dtypes in torch's words)."""
    with pytest.raises(TypeError, match="^" + re.escape(not_held(np.dtype("int16")))):
        so.array(np.ones(3, np.int16))
    torch = pytest.importorskip("torch")
    import sparse_ops.torch as st
    from sparse_ops.torch.convert import torch_wording

    with pytest.raises(st.BridgeError, match=re.escape(f"argument 'data': {torch_wording(not_held(torch.int16))}")):
        st.ops.sum(torch.ones(3, dtype=torch.int16))


def test_csr_index_dtypes_follow_the_policy():
    data = jnp.ones(2, jnp.float32)
    with pytest.raises(JaxBridgeError, match="indices: arrays of dtype uint32 are not supported"):
        soj.ops.sum((data, jnp.asarray([0, 1], jnp.uint32), jnp.asarray([0, 1, 2], jnp.uint32), (2, 2)))


def test_held_dtypes_still_run():
    for dt in ("float16", "float32", "int32"):
        x = jnp.asarray([1, 2, 3]).astype(dt)
        np.testing.assert_allclose(np.asarray(jax.jit(soj.ops.sum)(x)), 6)


# ---- mutated inputs come back as new states ---------------------------------------------------------
def _native_adam(w, g, m, v, **p):
    W, G, M, V = (so.array(np.array(a)) for a in (w, g, m, v))
    nw = so.adam_update(W, G, M, V, **p)
    return nw.asnumpy(), M.asnumpy(), V.asnumpy()


@pytest.mark.parametrize("jit", [False, True])
def test_an_optimizer_update_returns_new_states_and_leaves_its_inputs_alone(jit):
    rng = np.random.default_rng(0)
    w, g = (jnp.asarray(rng.standard_normal(5).astype(np.float32)) for _ in range(2))
    m, v = jnp.zeros(5, jnp.float32), jnp.full(5, 0.5, jnp.float32)
    before = [np.array(a) for a in (w, g, m, v)]
    f = (lambda *a: soj.ops.adam_update(*a, lr=0.1, wd=0.01))
    f = jax.jit(f) if jit else f
    first = f(w, g, m, v)
    second = f(w, g, m, v)
    assert len(first) == 3  # the new weight, then mean and var
    for a, b in zip((w, g, m, v), before):
        np.testing.assert_array_equal(np.asarray(a), b)
    expected = _native_adam(*before, lr=0.1, wd=0.01)
    for got, again, want in zip(first, second, expected):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(again))


def test_a_lazy_update_with_a_row_sparse_gradient_returns_its_state():
    w = jnp.ones((4, 2), jnp.float32)
    mom = jnp.full((4, 2), 0.5, jnp.float32)
    grad = RowSparse(jnp.asarray([[1.0, 2.0]], jnp.float32), jnp.asarray([2], jnp.int32), (4, 2))
    new_w, new_mom = jax.jit(lambda w, g, m: soj.ops.sgd_mom_update(w, g, m, lr=0.1, momentum=0.9))(w, grad, mom)
    W, M = so.array(np.ones((4, 2), np.float32)), so.array(np.full((4, 2), 0.5, np.float32))
    G = so.row_sparse_array((np.asarray([[1.0, 2.0]], np.float32), np.asarray([2])), shape=(4, 2))
    want_w = so.sgd_mom_update(W, G, M, lr=0.1, momentum=0.9)
    np.testing.assert_allclose(np.asarray(new_w), want_w.asnumpy(), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(new_mom), M.asnumpy(), rtol=1e-6)
    assert not np.array_equal(np.asarray(new_mom)[2], [0.5, 0.5])  # the stored row moved
    np.testing.assert_array_equal(np.asarray(new_mom)[[0, 1, 3]], 0.5)  # the others did not (lazy)
    np.testing.assert_array_equal(np.asarray(mom), 0.5)


def test_row_sparse_states_come_back_row_sparse():
    rows = jnp.asarray([0, 2], jnp.int32)
    w = RowSparse(jnp.ones((2, 3), jnp.float32), rows, (4, 3))
    g = RowSparse(jnp.full((2, 3), 0.5, jnp.float32), rows, (4, 3))
    m = RowSparse(jnp.zeros((2, 3), jnp.float32), rows, (4, 3))
    v = RowSparse(jnp.zeros((2, 3), jnp.float32), rows, (4, 3))
    new_w, new_m, new_v = soj.ops.adam_update(w, g, m, v, lr=0.1)
    assert isinstance(new_m, RowSparse) and isinstance(new_v, RowSparse)
    natives = [so.row_sparse_array((np.array(a.values), np.array(rows)), shape=(4, 3)) for a in (w, g, m, v)]
    nw = so.adam_update(*natives, lr=0.1)
    np.testing.assert_allclose(np.asarray(new_w.todense()), nw.asnumpy(), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(new_m.todense()), natives[2].asnumpy(), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(new_v.todense()), natives[3].asnumpy(), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(m.values), 0)


def test_a_kernel_writing_an_undeclared_input_is_refused_and_the_array_kept(isolated):
    @so.register("_jax_seam_scribbler")
    class Scribbler(so.Op):
        """Writes its input although it declares no mutated input."""

        @so.kernel(device="cpu")
        def dense(self, ctx, x, out):
            x[0] = 99.0
            out[...] = x

    x = jnp.arange(3, dtype=jnp.float32)
    with pytest.raises(Exception, match="_jax_seam_scribbler.*read-only"):
        jax.block_until_ready(soj.ops._jax_seam_scribbler(x))
    np.testing.assert_array_equal(np.asarray(x), [0, 1, 2])
    np.testing.assert_allclose(np.asarray(soj.ops.sum(x)), 3)  # the bridge still works


def test_a_native_update_of_read_only_state_is_refused_naming_op_and_input():
    """A NumPy view of a JAX array is read-only: the core says so before a kernel fails."""
    mom = np.asarray(jnp.zeros(3, jnp.float32))
    w, g = so.array(np.ones(3, np.float32)), so.array(np.ones(3, np.float32))
    with pytest.raises(so.OperatorError, match=r"sgd_mom_update' updates input 2 \('mom'\) in place.*read-only"):
        so.sgd_mom_update(w, g, so.from_dlpack(mom), lr=0.1, momentum=0.9)
    m = so.array(np.array(mom))
    so.sgd_mom_update(w, g, m, lr=0.1, momentum=0.9)
    np.testing.assert_allclose(m.asnumpy(), -0.1)


def test_specs_are_keyed_by_parameter_type_and_value():
    """A spec made for a_min=1.0 is not reused for a_min=True: each parses on its own (the
    bool is refused by clip's float parameter, as natively), and nan / inf cross."""
    x = jnp.asarray([-2.0, 0.5, 3.0])
    np.testing.assert_allclose(np.asarray(soj.ops.clip(x, a_min=1.0, a_max=2.0)), [1.0, 1.0, 2.0])
    with pytest.raises(so.OperatorError) as native:
        so.clip(so.array(np.asarray(x)), a_min=True, a_max=2.0)
    with pytest.raises(JaxBridgeError) as bridged:
        soj.ops.clip(x, a_min=True, a_max=2.0)
    assert str(native.value).split(": ", 1)[-1] in str(bridged.value)
    np.testing.assert_allclose(np.asarray(soj.ops.clip(x, a_min=-np.inf, a_max=np.inf)), [-2.0, 0.5, 3.0])
    assert np.isnan(np.asarray(soj.ops._plus_scalar(x, scalar=float("nan")))).all()


def test_a_capacity_past_int64_is_refused_naming_max_nnz_not_wrapped():
    """A csr output of 2**32 x 2**32 (a dense array of that shape cast to csr: the rule
    nnz(data) is its size) could hold more values than int64 counts: refused at trace time
    naming max_nnz= (it wrapped to 0 before); with max_nnz= it traces. An empty row_sparse
    cast to csr needs no max_nnz=: its rule gives 0. With x64 off the int32 indices of such
    an output are refused first. Nothing runs."""
    import os
    import subprocess
    import sys

    from sparse_ops.bridging import capacity

    assert capacity("csr", (2**31, 2**31)) == 2**62
    assert capacity("row_sparse", (7, 3), max_nnz=100) == 7
    with pytest.raises(so.OperatorError, match=r"could hold 18446744073709551616 stored values.*pass max_nnz="):
        capacity("csr", (2**32, 2**32))
    code = """
import jax, jax.numpy as jnp, pytest
import sparse_ops.jax as soj
d = jax.ShapeDtypeStruct((2**32, 2**32), jnp.float32)
with pytest.raises(soj.JaxBridgeError, match=r"sparse_ops.jax.ops.cast_storage: a csr output of shape "
                                             r"\\(4294967296, 4294967296\\) .*pass max_nnz="):
    jax.eval_shape(lambda x: soj.ops.cast_storage(x, stype="csr"), d)
out = jax.eval_shape(lambda x: soj.ops.cast_storage(x, stype="csr", max_nnz=8), d)
assert out.data.shape == (8,) and out.indices.dtype == jnp.int64
x = soj.RowSparse(jnp.zeros((0, 2**32), jnp.float32), jnp.zeros(0, jnp.int64), (2**32, 2**32))
out = jax.eval_shape(lambda x: soj.ops.cast_storage(x, stype="csr"), x)
assert out.data.shape == (0,) and out.indptr.shape == (2**32 + 1,)
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "JAX_ENABLE_X64": "1"})
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
    off = """
import jax, jax.numpy as jnp, pytest
import sparse_ops.jax as soj
x = soj.RowSparse(jnp.zeros((0, 2**33), jnp.float32), jnp.zeros(0, jnp.int32), (2**31 - 1, 2**33))
with pytest.raises(soj.JaxBridgeError, match=r"needs int64 indices; jax holds int64 only with x64 on"):
    jax.eval_shape(lambda x: soj.ops.cast_storage(x, stype="csr", max_nnz=8), x)
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", off], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "JAX_ENABLE_X64": "0"})
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_a_result_jax_cannot_hold_without_x64_is_refused_at_trace_time(jit):
    """float32 with int32 promotes to float64 (the op's NumPy rule), which JAX holds only
    with x64 on: refused when traced, naming the op, the dtypes and both ways out, not an
    XLA buffer error at run time; one dtype runs. (Other test modules turn x64 on.)"""
    from jax.experimental.sparse import BCSR

    with jax.enable_x64(False):
        a = BCSR((jnp.array([1., 2.]), jnp.array([0, 1], jnp.int32), jnp.array([0, 1, 2], jnp.int32)), shape=(2, 2))
        f = jax.jit(lambda x: soj.ops.dot(a, x)) if jit else (lambda x: soj.ops.dot(a, x))
        with pytest.raises(JaxBridgeError, match=r"sparse_ops\.jax\.ops\.dot: its result would be float64 .*float32 "
                                                 r"and int32.*\.astype\(jnp\.float32\).*jax_enable_x64"):
            f(jnp.ones((2, 3), jnp.int32))
        np.testing.assert_array_equal(np.asarray(f(jnp.ones((2, 3)))), [[1, 1, 1], [2, 2, 2]])


def test_row_sparse_rows_out_of_range_are_refused_not_taken_for_padding():
    """Padding rows are the trailing ones whose index is shape[0]; any other index out of
    range is refused by the boundary (before, every index >= shape[0] was dropped as
    padding, silently losing its row)."""
    values = jnp.array([[1., 2.], [3., 4.]])
    for rows in ([1, 5], [1, -1], [3, 1]):  # past the end, negative, padding before a stored row
        r = RowSparse(values, np.array(rows, np.int32), (3, 2))
        with pytest.raises(Exception, match="out of range|order|sorted"):
            jax.block_until_ready(soj.ops.sum(r))
    padded = RowSparse(jnp.array([[1., 2.], [3., 4.], [0., 0.]]), np.array([0, 2, 3], np.int32), (3, 2))
    assert float(soj.ops.sum(padded)) == 10.0
    np.testing.assert_array_equal(np.asarray(soj.ops.relu(padded)), [[1, 2], [0, 0], [3, 4]])


@pytest.mark.parametrize("big", [2**31 + 1, 2**32 + 1])
def test_row_sparse_int64_host_indices_past_int32_are_refused_without_x64(big):
    """A ``RowSparse`` over host int64 row indices gets the tuple form's check: JAX would cut
    them to int32 silently (wrapping onto another row) with x64 off."""
    with jax.enable_x64(False):
        r = RowSparse(jnp.ones((1, 2)), np.array([big], np.int64), (3, 2))
        with pytest.raises(JaxBridgeError, match=f"indices: values up to {big} do not fit int32"):
            soj.ops.relu(r)


def test_dropout_takes_training_fixed_where_the_call_is_traced():
    """``training=`` (a static bool, as flax's ``deterministic=``) decides whether Dropout
    drops; without it, ``autograd.train_mode()`` where the call is traced does. Either way
    the decision is part of the traced function: a jitted call traced in training keeps
    dropping when run outside it, and one traced outside never drops (before, the mode at
    run time decided, behind JAX's back)."""
    h = jnp.ones((20, 20)) * 3.0
    drops = lambda y: float((np.asarray(y) == 0).mean())  # noqa: E731
    assert drops(soj.ops.Dropout(h, p=0.5)) == 0.0
    assert 0.3 < drops(soj.ops.Dropout(h, p=0.5, training=True)) < 0.7
    static = jax.jit(lambda x, t: soj.ops.Dropout(x, p=0.5, training=t), static_argnums=1)
    assert 0.3 < drops(static(h, True)) < 0.7 and drops(static(h, False)) == 0.0
    traced_in_training = jax.jit(lambda x: soj.ops.Dropout(x, p=0.5))
    with so.autograd.train_mode():
        assert 0.3 < drops(traced_in_training(h)) < 0.7
        assert drops(soj.ops.Dropout(h, p=0.5, training=False)) == 0.0
    assert 0.3 < drops(traced_in_training(h)) < 0.7
    traced_outside = jax.jit(lambda x: soj.ops.Dropout(x, p=0.5))
    assert drops(traced_outside(h)) == 0.0
    with so.autograd.train_mode():
        assert drops(traced_outside(h)) == 0.0
    kept = np.asarray(soj.ops.Dropout(h, p=0.5, training=True))
    np.testing.assert_allclose(kept[kept != 0], 6.0)  # scaled by 1 / (1 - p)
    with pytest.raises(JaxBridgeError, match="training must be a bool"):
        jax.jit(lambda x, t: soj.ops.Dropout(x, p=0.5, training=t))(h, True)


@pytest.mark.parametrize("op, params, shape, message", [
    ("max", {}, (0, 3), r"cannot reduce an empty axis of shape \(0, 3\)"),
    ("min", {"axis": 0}, (0, 3), r"cannot reduce an empty axis of shape \(0, 3\)"),
    ("argmax", {"axis": 0}, (0, 3), r"cannot search an empty axis 0 of shape \(0, 3\)"),
    ("argmin", {}, (2, 0), r"cannot search an empty array of shape \(2, 0\)"),
    ("argmax_channel", {}, (3, 0), r"cannot search an empty last axis, shape \(3, 0\)")])
def test_a_reduction_with_no_identity_over_an_empty_axis_is_refused_alike_on_every_path(op, params, shape, message):
    """The refusal is the op's shape rule: natively, lowered to jnp under jit and through the
    FFI the same words naming the op (jnp's own error named neither); an empty axis that is
    not reduced gives an empty result, as NumPy's."""
    x = np.zeros(shape, np.float32)
    with pytest.raises(so.OperatorError, match=rf"operator '{op}'.*{message}"):
        getattr(so, op)(so.array(x), **params)
    for lowered in (True, False):
        with soj.lowering.disabled(not lowered), pytest.raises(JaxBridgeError, match=rf"operator '{op}'.*{message}"):
            jax.jit(lambda a: getattr(soj.ops, op)(a, **params))(jnp.asarray(x))
    kept = {"max": 1, "min": 1, "argmax": 1}.get(op)
    if kept is not None:
        got = getattr(soj.ops, op)(jnp.zeros((0, 3)), axis=kept)
        assert got.shape == getattr(np, op)(np.zeros((0, 3)), axis=kept).shape == (0,)
