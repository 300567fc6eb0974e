"""Devices: naming, the default-device stack, a missing gpu, and the simulated gpu."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import sparse_ops as so


def run_python(code: str, **env_changes) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("SPARSE_OPS_CUDA_SIM", "NUMBA_ENABLE_CUDASIM")}
    env.update(env_changes)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=300)


def test_device_values():
    assert so.cpu() == so.Device("cpu", 0) and repr(so.gpu(1)) == "gpu(1)"
    assert so.gpu(0) != so.cpu(0) and len({so.cpu(), so.cpu(0)}) == 1
    from sparse_ops.device import as_device

    assert as_device("gpu(2)") == so.gpu(2) and as_device("cuda:1") == so.gpu(1) and as_device("cpu") == so.cpu()
    with pytest.raises(ValueError, match="not a device"):
        as_device("tpu")
    with pytest.raises(ValueError, match="non-negative"):
        so.gpu(-1)


def test_default_device_stack_is_per_block():
    assert so.current_device() == so.cpu()
    with so.cpu(0) as d:
        assert so.current_device() is d
        assert so.zeros(2).device == so.cpu()
    assert so.current_device() == so.cpu()


def test_the_default_device_is_set_per_thread_and_per_block():
    """``set_default_device`` (or assigning ``Device.default_device``) sets the innermost
    block's device, else the thread's; the class attribute is never replaced."""
    import threading

    got = []

    def run():
        so.Device.default_device = so.cpu(4)
        got.append((so.current_device(), so.zeros(1).device))
        with so.cpu(5):
            so.set_default_device(so.cpu(6))
            got.append(so.Device.default_device)
        got.append(so.current_device())

    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    assert got == [(so.cpu(4), so.cpu(4)), so.cpu(6), so.cpu(4)]
    assert so.current_device() is so.Device.default_device is so.cpu()
    assert "default_device" not in vars(so.Device)
    with pytest.raises(TypeError, match="must be a Device"):
        so.set_default_device("gpu(0)")


@pytest.mark.skipif(so.num_gpus() > 0, reason="a gpu is present")
def test_missing_gpu_is_a_clear_error():
    with pytest.raises(so.DeviceUnavailableError, match="CuPy is not installed.*SPARSE_OPS_CUDA_SIM"):
        so.zeros((2, 2), device=so.gpu(0))
    x = so.ones((2, 2), stype="csr")
    with pytest.raises(so.DeviceUnavailableError, match="gpu\\(0\\) is not available"):
        x.to(so.gpu(0))
    assert x.to(so.cpu()) is x  # nothing was lost


@pytest.mark.gpu
def test_the_simulator_asked_for_after_numba_started_without_it_is_refused_at_import():
    """numba reads NUMBA_ENABLE_CUDASIM at its first import: asked for later, the simulated
    gpu would half work (an unclear driver error from the first gpu kernel)."""
    late = run_python("import numba\nimport sparse_ops", SPARSE_OPS_CUDA_SIM="1")
    assert late.returncode != 0
    assert ("ImportError: SPARSE_OPS_CUDA_SIM=1, but numba was imported before sparse_ops without its CUDA "
            "simulator") in late.stderr
    early = run_python("import numba\nimport sparse_ops as so\nassert so.num_gpus() == 1",
                       SPARSE_OPS_CUDA_SIM="1", NUMBA_ENABLE_CUDASIM="1")
    assert early.returncode == 0, early.stderr


def test_simulated_gpu_round_trip():
    result = run_python("""
        import numpy as np, os, pickle
        import sparse_ops as so
        assert os.environ["NUMBA_ENABLE_CUDASIM"] == "1"
        assert so.num_gpus() == 1 and so.cuda.is_simulator() and so.cuda.is_available()
        dense = np.array([[0, 1.5], [2, 0], [0, 0]], dtype=np.float32)
        for stype in ("default", "row_sparse", "csr"):
            x = so.array(dense).tostype(stype)
            g = x.to(so.gpu(0))
            assert g.device == so.gpu(0) and g.stype == stype and not np.shares_memory(g.data, x.data)
            for dst in ("default", "row_sparse", "csr"):
                y = g.tostype(dst)
                assert y.device == so.gpu(0)
                np.testing.assert_array_equal(y.asnumpy(), dense)
            back = g.to(so.cpu())
            assert back.device == so.cpu()
            np.testing.assert_array_equal(back.asnumpy(), dense)
            assert pickle.loads(pickle.dumps(g)).device == so.gpu(0)
        g = so.array(dense).to(so.gpu(0))
        shared = so.from_dlpack(g)  # ours: the producer's device, though the simulator's memory is NumPy
        assert shared.device == so.gpu(0) and np.shares_memory(shared.data, g.data)
        with so.gpu(0):
            assert so.zeros((2, 2), stype="csr").device == so.gpu(0)
        try:
            so.zeros(2, device=so.gpu(1))
        except so.DeviceUnavailableError as exc:
            assert "gpu(0) only" in str(exc)
        else:
            raise AssertionError("gpu(1) should not exist in the simulator")
        print("ok")
    """, SPARSE_OPS_CUDA_SIM="1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_import_is_light():
    """import sparse_ops loads neither numba (JIT) nor scipy; kernels compile on first use."""
    result = run_python("""
        import sys, sparse_ops
        print("numba" in sys.modules, "scipy" in sys.modules)
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False"]


@pytest.mark.gpu
@pytest.mark.skipif(so.num_gpus() == 0, reason="no gpu (set SPARSE_OPS_CUDA_SIM=1 to simulate one)")
def test_a_move_between_devices_while_recording_joins_the_graph():
    """``x.to(gpu)`` (MXNet's ``as_in_context``/``copyto``) of an array that needs a gradient
    is recorded: the gradient of the copy goes back to x's device and adds to x's other
    paths, for dense and csr arrays; a move outside recording stays a plain copy."""
    import sparse_ops.compat.mxnet as mx
    from sparse_ops import autograd

    w = so.array(np.arange(4.0).reshape(2, 2))
    w.attach_grad()
    with autograd.record():
        on_gpu = w.to(so.gpu(0))
        loss = so.sum(on_gpu * on_gpu).to(so.cpu()) + so.sum(w)
    loss.backward()
    assert on_gpu.device == so.gpu(0) and w.grad.device == so.cpu()
    np.testing.assert_allclose(w.grad.asnumpy(), 2 * np.arange(4.0).reshape(2, 2) + 1)
    a = mx.nd.ones((2, 2))
    a.attach_grad()
    with mx.autograd.record():
        total = (a.as_in_context(mx.gpu(0)) * 3).sum().as_in_context(mx.cpu()) + a.copyto(mx.gpu(0)).sum().copyto(
            mx.cpu())
    total.backward()
    np.testing.assert_allclose(a.grad.asnumpy(), np.full((2, 2), 4.0))
    c = so.array(np.eye(3)).tostype("csr")
    c.attach_grad()
    with autograd.record():
        doubled = so.sum(c.to(so.gpu(0)) * 2.0)
    doubled.backward()
    assert c.grad.stype == "csr" and c.grad.device == so.cpu()
    np.testing.assert_allclose(c.grad.asnumpy(), 2 * np.eye(3))
    moved = w.to(so.gpu(0))
    assert moved._ag is None and moved.device == so.gpu(0)
