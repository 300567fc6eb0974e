"""Built-in operators and autograd on the gpu device, against the cpu.

Runs where a gpu exists: on hardware, or on any machine with ``SPARSE_OPS_CUDA_SIM=1``
set before Python starts (``SPARSE_OPS_CUDA_SIM=1 python -m pytest -m gpu``), which
simulates gpu(0) with NumPy memory and numba's CUDA simulator. Elsewhere it skips.
"""
import warnings

import numpy as np
import pytest

import sparse_ops as so
from sparse_ops import autograd as ag

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(so.num_gpus() == 0, reason="no gpu (set SPARSE_OPS_CUDA_SIM=1 to simulate one)"),
]

RNG = np.random.default_rng(7)
A = np.where(RNG.random((6, 5)) < 0.4, RNG.standard_normal((6, 5)), 0.0)
B = np.where(RNG.random((6, 5)) < 0.4, RNG.standard_normal((6, 5)), 0.0)
W = RNG.standard_normal((5, 3))


def both(values, stype="default"):
    cpu = so.array(values).tostype(stype)
    return cpu, cpu.to(so.gpu(0))


CASES = {
    "elemwise_add csr": lambda d: so.elemwise_add(d["a_csr"], d["b_csr"]),
    "elemwise_mul rsp": lambda d: so.elemwise_mul(d["a_rsp"], d["b"]),
    "elemwise_sub dense": lambda d: so.elemwise_sub(d["a"], d["b"]),
    "square csr": lambda d: so.square(d["a_csr"]),
    "exp rsp": lambda d: so.exp(d["a_rsp"]),
    "x*2 csr": lambda d: d["a_csr"] * 2,
    "sum csr axis 0": lambda d: so.sum(d["a_csr"], axis=0),
    "sum rsp axis 1": lambda d: so.sum(d["a_rsp"], axis=1),
    "norm csr": lambda d: so.norm(d["a_csr"]),
    "dot csr dense": lambda d: so.dot(d["a_csr"], d["w"]),
    "dot csr.T dense": lambda d: so.dot(d["a_csr"], d["b"], transpose_a=True),
    "dot dense dense": lambda d: so.dot(d["a"], d["w"]),
    "transpose csr": lambda d: so.transpose(d["a_csr"]),
    "add_n rsp": lambda d: so.add_n(d["a_rsp"], d["a_rsp"], d["a_rsp"]),
    "concat": lambda d: so.concat(d["a"], d["b"], dim=0),
    "reshape": lambda d: so.reshape(d["a"], shape=(5, 6)),
    "take": lambda d: so.take(d["a"], so.array(np.array([0, 3, 5.0]), device=d["a"].device)),
    "retain": lambda d: so.retain(d["a_rsp"], so.array(np.array([0, 2, 4]), device=d["a"].device)),
    "Embedding": lambda d: so.Embedding(so.array(np.array([[1.0, 4.0]]), device=d["w"].device), d["w"],
                                        input_dim=5, output_dim=3, dtype="float64"),
    "cast_storage": lambda d: so.cast_storage(d["a"], stype="csr"),
}


def operands(device_index):
    values = {"a": A, "b": B, "w": W}
    d = {}
    for name, v in values.items():
        pair = both(v)
        d[name] = pair[device_index]
    for stype, suffix in (("csr", "csr"), ("row_sparse", "rsp")):
        d[f"a_{suffix}"] = both(A, stype)[device_index]
        d[f"b_{suffix}"] = both(B, stype)[device_index]
    return d


@pytest.mark.parametrize("case", sorted(CASES))
def test_gpu_matches_cpu(case):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", so.StorageFallbackWarning)
        on_cpu = CASES[case](operands(0))
        on_gpu = CASES[case](operands(1))
    assert on_gpu.device == so.gpu(0) and on_cpu.device == so.cpu()
    assert on_gpu.stype == on_cpu.stype and on_gpu.shape == on_cpu.shape and on_gpu.dtype == on_cpu.dtype
    np.testing.assert_allclose(on_gpu.asnumpy(), on_cpu.asnumpy(), rtol=1e-12, atol=1e-12)


def test_autograd_on_gpu():
    x = so.array(A, device=so.gpu(0)).tostype("csr")
    w = so.array(W, device=so.gpu(0))
    w.attach_grad(stype="row_sparse")
    with ag.record():
        loss = so.sum(so.square(so.dot(x, w)))
    loss.backward()
    assert w.grad.device == so.gpu(0) and w.grad.stype == "row_sparse"
    expected = 2 * A.T @ (A @ W)
    np.testing.assert_allclose(w.grad.asnumpy(), expected, rtol=1e-10)


def test_optimizer_update_on_gpu_is_lazy():
    weight = so.array(np.ones((6, 2)), device=so.gpu(0))
    grad = so.row_sparse_array((np.full((1, 2), 0.5), np.array([3])), shape=(6, 2), device=so.gpu(0))
    so.sgd_update(weight, grad, lr=1.0, wd=0.1, out=weight)
    expected = np.ones((6, 2))
    expected[3] = 1 - (0.5 + 0.1)
    np.testing.assert_allclose(weight.asnumpy(), expected)


def test_moving_between_devices_and_explain():
    cpu, gpu = both(A, "csr")
    assert so.explain("dot", gpu, so.array(W, device=so.gpu(0)))["device"] == "gpu(0)"
    back = gpu.to(so.cpu())
    assert back.device == so.cpu() and np.array_equal(back.asnumpy(), A)
    with pytest.raises(so.OperatorError, match="different devices"):
        so.elemwise_add(cpu, gpu)


@pytest.mark.parametrize("sparse_grad", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_embedding_backward_on_the_gpu_is_deterministic_and_equals_the_cpus_sums(dtype, sparse_grad):
    """The gpu Embedding backward sums each id's gradient rows in a fixed order (a segment sum
    over the ids grouped, no atomics): two runs give the same bits, and the bits of the cpu's
    sums, also for popular ids repeated many times with values of mixed magnitude."""
    rng = np.random.default_rng(3)
    ids = np.concatenate([np.full(300, 7), rng.integers(0, 50, 200), np.full(40, 0)]).astype(np.float64)
    rng.shuffle(ids)
    head = (rng.standard_normal((ids.shape[0], 6)) * 10.0 ** rng.integers(-4, 4, (ids.shape[0], 1))).astype(dtype)

    def grad(device):
        out = so.ops._embedding_backward(so.array(ids, device=device), so.array(head, device=device),
                                         input_dim=50, sparse_grad=sparse_grad)
        return out.tostype("default").asnumpy()

    cpu, first, second = grad(so.cpu()), grad(so.gpu(0)), grad(so.gpu(0))
    np.testing.assert_array_equal(first, second)
    np.testing.assert_array_equal(first, cpu)
    want = np.zeros((50, 6))
    np.add.at(want, ids.astype(int), head.astype(np.float64))
    np.testing.assert_allclose(cpu, want, rtol=1e-4 if dtype == "float32" else 1e-12, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_csr_row_and_column_sums_on_the_gpu_are_the_cpus_exactly(dtype):
    """sum / square_sum / mean of a csr over rows or columns on the gpu run the cpu's segment
    kernel (one thread a segment, in row order, no atomics): the cpu's values bit for bit,
    int64 sums exact past 2**53 (a float64 bincount rounds them)."""
    rng = np.random.default_rng(5)
    dense = np.where(rng.random((30, 40)) < 0.3, rng.integers(-9, 9, (30, 40)), 0).astype(dtype)
    if dtype != "int64":
        dense *= 10.0 ** rng.integers(-6, 6, (30, 40))
    cpu, gpu = both(dense, "csr")
    for axis in (0, 1):
        for op in (so.sum, so.square_sum, so.mean):
            want, got = op(cpu, axis=axis).asnumpy(), op(gpu, axis=axis).asnumpy()
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)
    if dtype == "int64":
        dense[3, :5] = 2**53 + 1  # sums beyond float64's integers
        _, gpu = both(dense, "csr")
        assert so.sum(gpu, axis=1).asnumpy()[3] == int(dense[3].sum())
        assert so.sum(gpu, axis=0).asnumpy()[2] == int(dense[:, 2].sum())


def test_every_launch_runs_on_the_device_of_the_call_that_caused_it():
    """The launch helper takes its device (and, on hardware, its stream) from the op context
    or device it is given: every launch a gpu call makes, the conversions and densifying
    fallbacks that pass a bare Device included, is recorded on gpu(0); a launch given no
    device, or a cpu one, is refused rather than sent to whatever is current."""
    from sparse_ops.sdk import launch

    cpu_x, x = both(A, "csr")
    _, w = both(W)
    with launch.recording() as log:
        so.dot(x, w)
        x.tostype("default")  # row ids of a bare Device
        so.sum(x, axis=1)
        so.elemwise_add(x, x.tostype("default"))
    assert log and {device for _, device, _ in log} == {so.gpu(0)}
    assert {stream for _, _, stream in log} == {None}  # the simulator has no streams
    for bad in (None, so.cpu(), object()):
        with pytest.raises(TypeError, match="launch runs on the device and stream of an op context or a gpu Device"):
            launch.launch(bad, None, (1, 32))


def test_a_gpu_call_takes_the_gpu_path_even_where_the_simulators_memory_is_numpy():
    """Which kernels run is the call's device's choice, not the memory's: under the
    simulator gpu arrays are NumPy, and the csr @ csr gradient (SDDMM) launched no gpu
    kernel; its values equal the cpu's either way."""
    from sparse_ops.sdk import launch

    (ca, ga), (cp, gp), (cw, gw) = both(A, "csr"), both(B[:, :3].copy()), both(W)
    with launch.recording() as log:
        got = so.ops._sampled_dot(ga, gp, gw, transpose_b=True)
    assert got.device == so.gpu(0) and log
    want = np.where(A != 0, B[:, :3] @ W.T, 0)
    np.testing.assert_allclose(got.asnumpy(), want)
    np.testing.assert_allclose(so.ops._sampled_dot(ca, cp, cw, transpose_b=True).asnumpy(), want)


@pytest.mark.parametrize("transpose", [False, True])
def test_sampled_products_read_a_row_sparse_operand_at_its_stored_rows_on_the_gpu(transpose):
    """``_sampled_dot`` with a row_sparse operand (a hashed table's gradient path) on the
    gpu: its stored rows found by binary search, or its transpose as csr parts; the cpu's
    values."""
    table = W.copy()
    table[2] = 0  # a row it does not store
    lhs = B[:, :3].copy() if transpose else B[:, :5] @ W  # (6, 3): k = 3
    rhs = table if transpose else table.T.copy()  # op(rhs) = (3, 5)
    (cm, gm), (cl, gl), (cr, gr) = both(A, "csr"), both(lhs), both(rhs, "row_sparse")
    want = np.where(A != 0, lhs @ (rhs.T if transpose else rhs), 0)
    got = so.ops._sampled_dot(gm, gl, gr, transpose_b=transpose)
    assert got.device == so.gpu(0)
    np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-12)
    np.testing.assert_allclose(so.ops._sampled_dot(cm, cl, cr, transpose_b=transpose).asnumpy(), want, rtol=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gradients_that_add_into_repeated_positions_sum_in_order_on_the_gpu(dtype):
    """take's, _gather_along_axis's and reflect-pad's gradients and an MXNet-face index's
    backward add values into repeated positions: on the gpu each position's values are
    grouped (a stable sort) and summed by one thread in order (``sdk.csr.index_add``), no
    float atomics, so the cpu's bits; the kernel launches on gpu(0) are recorded."""
    from sparse_ops.compat import mxnet as mx
    from sparse_ops.sdk import launch

    rng = np.random.default_rng(11)
    x = (rng.standard_normal((7, 5)) * 10.0 ** rng.integers(-4, 4, (7, 5))).astype(dtype)
    idx = np.array([3, 3, 0, 6, 3, 0, 3], dtype=np.float64)
    pos = rng.integers(-5, 5, (7, 5))  # negative positions count from the end, as in NumPy
    cases = {
        "take axis 0": lambda a: so.take(a, so.array(idx, device=a.device), axis=0),
        "take axis 1": lambda a: so.take(a, so.array(idx[:4] % 5, device=a.device), axis=1),
        "gather along axis": lambda a: so.ops._gather_along_axis(a, so.array(pos, device=a.device), axis=1),
        "reflect pad": lambda a: so.pad(a.reshape((1, 1, 7, 5)), mode="reflect", pad_width=(0, 0, 0, 0, 3, 3, 2, 2)),
    }

    def grad(device, f):
        a = so.array(x, device=device)
        a.attach_grad()
        with so.autograd.record():
            y = f(a)
        y.backward(so.array(np.linspace(-2, 3, y.size).reshape(y.shape).astype(dtype), device=device))
        return a.grad.asnumpy()

    for name, f in cases.items():
        with launch.recording() as log:
            on_gpu = grad(so.gpu(0), f)
        assert log and {device for _, device, _ in log} == {so.gpu(0)}, name  # add.at would launch nothing
        np.testing.assert_array_equal(on_gpu, grad(so.cpu(), f), err_msg=name)

    def face_grad(device):
        a = mx.nd.array(x, ctx=mx.gpu(0) if device.device_type == "gpu" else mx.cpu())
        a.attach_grad()
        with mx.autograd.record():
            y = a[[0, 2, 0, 0]]
        y.backward(mx.nd.ones(y.shape, ctx=y.context))
        return a.grad.asnumpy()

    np.testing.assert_array_equal(face_grad(so.gpu(0)), face_grad(so.cpu()))


def test_the_jax_handlers_sum_repeated_bcsr_columns_in_order_on_the_gpu():
    """A JAX BCSR with unsorted and repeated columns is sorted and summed on the way in
    (``sorted_and_summed``) and tangents are moved onto the summed structure: on the gpu by
    the same ordered segment sums as every gpu scatter (no atomics), so the cpu's bits."""
    pytest.importorskip("jax")
    from sparse_ops.jax import handlers

    rng = np.random.default_rng(2)
    indptr = np.array([0, 4, 4, 9])
    indices = np.array([3, 1, 3, 3, 0, 2, 0, 0, 4])
    values = rng.standard_normal(9) * 10.0 ** rng.integers(-5, 5, 9)
    out = {}
    for device in (so.cpu(), so.gpu(0)):
        parts, mapping = handlers.sorted_and_summed(device, [values, indices, indptr], 3)
        x = so.csr_matrix((parts[0], parts[1], parts[2]), shape=(3, 5), device=device)
        out[device.device_type] = (x.asnumpy(), handlers._to_canonical(values * 2, mapping, x))
    np.testing.assert_array_equal(out["gpu"][0], out["cpu"][0])
    np.testing.assert_array_equal(np.asarray(out["gpu"][1]), np.asarray(out["cpu"][1]))
    want = np.zeros((3, 5))
    np.add.at(want, (np.repeat(np.arange(3), np.diff(indptr)), indices), values)
    np.testing.assert_allclose(out["cpu"][0], want, rtol=1e-12)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_csr_made_on_the_gpu_has_contiguous_indices_that_kernels_take(dtype):
    """A 2-d mask's nonzero() gives strided column views: cast_storage makes them contiguous
    before a gpu kernel (which takes contiguous buffers only) reads them."""
    dense = np.array([[0, 1.5, 0], [2.5, 0, 0], [0, 0, -3]], dtype)
    for x in (so.array(dense, device="gpu").tostype("csr"),
              so.array(dense, device="gpu").tostype("row_sparse").tostype("csr")):
        assert x.indices.flags["C_CONTIGUOUS"]
        r = so.take(x, so.array(np.array([2, 0, 2]), device="gpu"))
        assert r.stype == "csr" and r.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(r.asnumpy(), dense[[2, 0, 2]])
