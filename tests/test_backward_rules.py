"""Gradients as rules: an op's storage-aware backward declared on the op itself (kernels
marked ``@so.backward_kernel`` and a ``backward_storage_type`` rule, ``sparse_ops.backward_op``),
without a second registered op, through native autograd, opcheck, ``sparse-ops check``,
``explain``, PyTorch and JAX. The plugin is tests/rowclip_plugin.py (a row-norm clip)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import sparse_ops as so
from sparse_ops.errors import OperatorError
from sparse_ops.sdk.testing import opcheck

PLUGIN = Path(__file__).with_name("rowclip_plugin.py")
OP = "rc_row_clip"


@pytest.fixture
def rc(isolated):
    """The plugin module, loaded as a plugin (its ops and its module undone after the test)."""
    yield so.library.load(str(PLUGIN))
    sys.modules.pop(PLUGIN.stem, None)


def _x(seed: int = 1, dtype=np.float64) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((6, 4)) * 2
    x[[1, 4]] = 0  # rows a row_sparse x does not store
    return x.astype(dtype)


@pytest.mark.parametrize("stype", ["row_sparse", "default"])
def test_native_autograd_runs_the_declared_backward(rc, stype):
    x = _x()
    w = np.random.default_rng(2).standard_normal(x.shape)
    a = so.array(x).tostype(stype)
    a.attach_grad()
    with so.autograd.record():
        y = so.ops.rc_row_clip(a, c=1.5)
        loss = so.sum(so.elemwise_mul(y, so.array(w)))
    loss.backward()
    assert y.stype == stype and a.grad.stype == stype
    want = rc.numpy_row_clip_grad(x, w, 1.5)
    if stype == "row_sparse":  # the gradient of the stored rows, on x's rows
        np.testing.assert_array_equal(a.grad.indices, [0, 2, 3, 5])
        want[[1, 4]] = 0
    np.testing.assert_allclose(a.grad.asnumpy(), want, rtol=1e-12, atol=1e-12)


def test_a_row_sparse_output_gradient_reaches_the_storage_aware_backward_kernel(rc):
    x = _x()
    a = so.array(x).tostype("row_sparse")
    a.attach_grad()
    head = np.zeros_like(x)
    head[[0, 3, 4]] = np.random.default_rng(3).standard_normal((3, 4))
    with so.autograd.record():
        y = so.ops.rc_row_clip(a, c=1.5)
    y.backward(so.array(head).tostype("row_sparse"))
    want = rc.numpy_row_clip_grad(x, head, 1.5)
    want[[1, 4]] = 0
    assert a.grad.stype == "row_sparse"
    np.testing.assert_allclose(a.grad.asnumpy(), want, rtol=1e-12, atol=1e-12)


def test_opcheck_compares_the_declared_backward_with_finite_differences(rc):
    report = opcheck(OP, rc.RowClip.samples())
    assert report.summary() == "4 samples; compared: determinism, format, gradient, inference, reference"


def test_sparse_ops_check_passes_the_plugin():
    out = subprocess.run([sys.executable, "-m", "sparse_ops", "check", str(PLUGIN)], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"ok   {OP}: 4 samples; compared: determinism, format, gradient, inference, reference" in out.stdout


def test_explain_describes_the_backward(rc):
    a = so.array(_x()).tostype("row_sparse")
    e = so.explain(OP, a, c=1.5)
    b = e["backward"]
    assert b["gradient"] == "declared on the op (backward kernels and rules)"
    assert b["grad_stypes"] == {"x": "row_sparse"}
    assert b["assumes"] == {"output_grad": "row_sparse"}
    assert b["dispatch_mode"] == "fcompute_ex" and b["kernel"].endswith("rsp_backward")
    # y.backward() sends a dense head of ones: described too, and what a real backward gives
    d = b["dense_heads"]
    assert d["assumes"] == {"output_grad": "default"} and d["kernel"].endswith("rsp_backward")
    a.attach_grad()
    with so.autograd.record():
        y = so.ops.rc_row_clip(a, c=1.5)
    y.backward()
    assert d["grad_stypes"] == {"x": a.grad.stype}
    dense = so.explain(OP, so.array(_x()), c=1.5)["backward"]
    assert dense["grad_stypes"] == {"x": "default"} and dense["kernel"].endswith("dense_backward")
    assert "dense_heads" not in dense  # a dense output's head is dense already
    # an op whose gradient() is built from operators: described, not run
    g = so.explain("relu", so.array(_x()))["backward"]
    assert g["gradient"].startswith("gradient() built from operators") and g["grad_stypes"] is None


def test_second_derivatives_of_a_declared_backward_are_refused_naming_it(rc):
    a = so.array(_x())
    a.attach_grad()
    with so.autograd.record():
        y = so.ops.rc_row_clip(a, c=1.5)
        (g,) = so.autograd.grad(so.sum(y), [a], create_graph=True)
        z = so.sum(g)
    with pytest.raises(OperatorError, match="_backward_rc_row_clip"):
        z.backward()
    # the process and autograd still work
    with so.autograd.record():
        loss = so.sum(so.ops.rc_row_clip(a, c=1.5))
    loss.backward()
    assert a.grad is not None


def test_declaring_both_a_gradient_and_backward_kernels_is_an_error_naming_the_op(isolated):
    with pytest.raises(ValueError, match="operator 'rc_both': declares both gradient\\(\\) and backward kernels"):
        @so.register("rc_both")
        class Both(so.Op):
            @so.kernel()
            def dense(self, ctx, x, y):
                y[...] = x

            @so.backward_kernel()
            def dense_backward(self, ctx, g, x, dx):
                dx[...] = g

            def gradient(self, out_grads, inputs, outputs):
                return out_grads


def test_backward_grads_names_the_inputs_that_get_gradients(isolated):
    @so.register("rc_scale_by")
    class ScaleBy(so.Op):
        """x * ids (ids: an integer input that gets no gradient)."""
        arguments = ("x", "ids")
        backward_grads = ("x",)

        def infer_type(self, x, ids):
            return [x]

        @so.kernel()
        def dense(self, ctx, x, ids, out):
            out[...] = x * ids

        @so.backward_kernel()
        def dense_backward(self, ctx, g, x, ids, dx):
            dx[...] = g * ids

    a = so.array(np.arange(4.0))
    a.attach_grad()
    with so.autograd.record():
        out = so.ops.rc_scale_by(a, so.array(np.array([1, 2, 3, 4], dtype=np.int64)))
    out.backward()
    np.testing.assert_array_equal(a.grad.asnumpy(), [1, 2, 3, 4])


def test_torch_autograd_runs_the_declared_backward(rc):
    torch = pytest.importorskip("torch")
    import sparse_ops.torch as st

    x = _x()
    w = torch.from_numpy(np.random.default_rng(2).standard_normal(x.shape))
    t = torch.tensor(x, requires_grad=True)
    (st.ops.rc_row_clip(t, c=1.5) * w).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), rc.numpy_row_clip_grad(x, w.numpy(), 1.5), rtol=1e-12, atol=1e-12)
    # torch's own autograd of the same function agrees
    t2 = torch.tensor(x, requires_grad=True)
    n = t2.norm(dim=1, keepdim=True)
    (t2 * torch.clamp(1.5 / torch.where(n == 0, torch.ones_like(n), n), max=1.0) * w).sum().backward()
    torch.testing.assert_close(t.grad, t2.grad)


def test_jax_grad_runs_the_declared_backward(rc):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    import sparse_ops.jax as soj

    jax.config.update("jax_enable_x64", True)
    x = _x()
    w = np.random.default_rng(2).standard_normal(x.shape)
    g = jax.jit(jax.grad(lambda v: jnp.sum(soj.ops.rc_row_clip(v, c=1.5) * w)))(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(g), rc.numpy_row_clip_grad(x, w, 1.5), rtol=1e-12, atol=1e-12)


@pytest.mark.gpu
def test_the_declared_backward_runs_on_the_gpu(rc):
    """The backward's kernels on gpu(0) (numba's CUDA simulator without one) agree with the cpu;
    CI compiles what ran here for the real CUDA target."""
    if so.num_gpus() == 0:
        pytest.skip("no gpu (set SPARSE_OPS_CUDA_SIM=1 to simulate one)")
    x, head = _x(dtype=np.float32), np.random.default_rng(5).standard_normal((6, 4)).astype(np.float32)
    grads = {}
    for device in (so.cpu(), so.gpu(0)):
        for stype in ("row_sparse", "default"):
            a = so.array(x, device=device).tostype(stype)
            a.attach_grad()
            with so.autograd.record():
                y = so.ops.rc_row_clip(a, c=1.5)
            y.backward(so.array(head, device=device))
            assert a.grad.stype == stype and a.grad.device == device
            grads[device.device_type, stype] = a.grad.asnumpy()
    for stype in ("row_sparse", "default"):
        np.testing.assert_allclose(grads["gpu", stype], grads["cpu", stype], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("attrs, message", [
    ({"variadic": True}, "a variadic op cannot declare backward kernels"),
    ({"arguments": ("x", "w"), "backward_needs_inputs": ("x",)},
     r"the inputs \['w'\] get gradients but are not kept for the backward"),
    ({"arguments": ("x", "output_grad"), "backward_grads": ("x",)}, "repeat a name"),
])
def test_a_backward_declaration_that_cannot_be_built_is_refused_at_registration(isolated, attrs, message):
    def dense(self, ctx, *arrays):
        arrays[-1][...] = arrays[0]

    body = {"dense": so.kernel()(dense), "dense_backward": so.backward_kernel()(dense), **attrs}
    with pytest.raises(ValueError, match=f"operator 'rc_bad': .*{message}"):
        so.register("rc_bad")(type("Bad", (so.Op,), body))
    assert "rc_bad" not in so.list_ops()  # nothing registered; the table still works
    np.testing.assert_array_equal(so.ops.relu(so.array(np.array([-1.0, 2.0]))).asnumpy(), [0.0, 2.0])


def _register_gather(name: str, backward_stypes: tuple) -> None:
    """An embedding-style op: out = weight[ids], a dense forward kernel only, and one backward
    kernel declared for ``backward_stypes`` (head, weight, ids) giving weight a row_sparse
    gradient of the rows the ids touch."""

    @so.register(name)
    class Gather(so.Op):
        arguments = ("weight", "ids")
        backward_grads = ("weight",)

        def infer_shape(self, weight, ids):
            return [(ids[0], weight[1])]

        def infer_type(self, weight, ids):
            return [weight]

        def backward_storage_type(self, output_grad, weight, ids):
            return ["row_sparse"]

        @so.kernel(device="cpu")
        def dense(self, ctx, weight, ids, out):
            out[...] = weight[ids]

        @so.backward_kernel(device="cpu", stypes=backward_stypes)
        def sparse_backward(self, ctx, g, weight, ids, dw):
            rows, inverse = np.unique(ids.data, return_inverse=True)
            values, out_rows = ctx.alloc_row_sparse(dw, rows.shape[0])
            out_rows[:] = rows
            values[...] = 0
            np.add.at(values, inverse.ravel(), g.data)


def test_a_backward_kernel_for_dense_inputs_serves_a_sparse_input_densified(isolated):
    """No dense backward kernel and a row_sparse weight: the backward declared for dense
    arrays runs on the densified weight (dispatch mode fallback_ex, once warned), its
    row_sparse gradient kept; explain says so before anything runs."""
    _register_gather("fx_gather", ("default", "default", "default"))
    table = np.arange(21.0).reshape(7, 3)
    table[[0, 5]] = 0
    ids = so.array(np.array([1, 3, 1, 6]))
    w = so.array(table).tostype("row_sparse")
    w.attach_grad()
    described = so.explain("fx_gather", w, ids)["backward"]
    assert described["dispatch_mode"] == "fallback_ex" and described["kernel"].endswith("(on densified inputs)")
    with pytest.warns(so.StorageFallbackWarning, match="running the kernel declared for dense inputs"):
        with so.autograd.record():
            y = so.ops.fx_gather(w, ids)
        head = np.random.default_rng(0).standard_normal((4, 3))
        y.backward(so.array(head))
    want = np.zeros((7, 3))
    np.add.at(want, [1, 3, 1, 6], head)
    assert w.grad.stype == "row_sparse"
    np.testing.assert_allclose(w.grad.asnumpy(), want)


def test_explain_reports_a_backward_with_no_kernel_instead_of_raising(isolated):
    _register_gather("fx_gather_csr", ("default", "csr", "default"))  # a backward for a csr weight only
    w = so.array(np.ones((5, 2)))
    described = so.explain("fx_gather_csr", w, so.array(np.array([0, 4])))["backward"]
    assert described["dispatch_mode"] is None
    assert described["kernel"].startswith("none: operator '_backward_fx_gather_csr'") and "no kernel" in \
        described["kernel"]
    assert described["grad_stypes"] == {"weight": "row_sparse"}
