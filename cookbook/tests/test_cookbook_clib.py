"""The C / CUDA examples of cookbook/clib/, built with the system compiler (clib_build.py)
and loaded with sparse_ops.library.load: values against NumPy / SciPy, storage types,
gradients, opcheck on the samples each op declares, the CLI's check, the PyTorch bridge."""
import ctypes
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import sparse_ops as so
from clib_build import SOURCES, build, has_nvcc
from cookbook_helpers import csr, random_dense
from sparse_ops import autograd
from sparse_ops.clib.load import default_name
from sparse_ops.errors import OperatorError, StorageFallbackWarning
from sparse_ops.sdk.testing import check_gradient, check_numeric_gradient, opcheck, table_restored

OPS = {
    "gemm": ["c_gemm", "c_gemm_grad_a", "c_gemm_grad_b"],
    "relu": ["c_relu", "c_relu_backward"],
    "transpose_csr": ["c_transpose_csr"],
    "transpose_row_sparse": ["c_transpose_row_sparse"],
    "threshold": ["c_csr_threshold", "c_csr_threshold_backward"],
}
ALL_OPS = [op for ops in OPS.values() for op in ops]
DTYPES = ["float32", "float64"]
INDEX_DTYPES = ["int32", "int64"]


@pytest.fixture(scope="module", autouse=True)
def libs():
    """Every example built and loaded; the table and the plugin records put back afterwards,
    so no other test sees these ops."""
    with table_restored():
        paths = {name: str(build(name)) for name in SOURCES}
        modules = {name: so.library.load(path) for name, path in paths.items()}
        yield paths, modules


def rand(shape, dtype, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def sparse_csr(dense, dtype="float64", index_dtype="int64"):
    return csr(dense, dtype, index_dtype)


def tol(dtype):
    return dict(rtol=1e-5, atol=1e-5) if dtype == "float32" else dict(rtol=1e-12, atol=1e-12)


# ---- the libraries ----------------------------------------------------------------------------
def test_every_library_registers_its_ops_under_its_plugin(libs):
    paths, modules = libs
    for name, ops in OPS.items():
        assert sorted(modules[name].library.ops) == sorted(ops)
        assert modules[name].__version__ == f"cookbook {name} 1.0"
        for op in ops:
            assert so.get_op(op).plugin == default_name(paths[name])  # libgemm.so -> gemm


@pytest.mark.skipif(not has_nvcc(), reason="no nvcc on this machine: the CUDA build of relu.cu is not possible")
def test_relu_cuda_build_has_gpu_kernels():
    """nvcc compiled relu.cu (it is the build loaded here): cpu and gpu kernels."""
    assert build("relu").name == "librelu.so"
    for op in OPS["relu"]:
        assert set(so.get_op(op).fcompute) == {"cpu", "gpu"}


def test_relu_builds_as_c_without_its_gpu_kernels():
    """cc -x c relu.cu: the build a machine without nvcc gets; it exports the entry point and
    the ABI version (it is not loaded: its op names are taken by the build above)."""
    lib = ctypes.CDLL(str(build("relu", cuda=False)))
    assert ctypes.c_uint32.in_dll(lib, "sparse_ops_library_abi_version").value == so.clib.abi.ABI_VERSION  # 1.1
    assert ctypes.c_char_p.in_dll(lib, "sparse_ops_library_version").value == b"cookbook relu 1.0"
    assert lib.sparse_ops_library_init


@pytest.mark.parametrize("op", ALL_OPS)
def test_opcheck_on_declared_samples(op):
    samples = so.get_op(op).cls.samples()
    report = opcheck(op, samples)
    assert report.samples == len(samples) >= 1
    compared = {c for s in report.results for c in s.compared}
    assert {"inference", "determinism", "gradient"} <= compared
    if any(o.stype != "default" for x in samples for o in [so.invoke(op, x[0], x[1])]):
        assert {"format", "reference"} <= compared


def test_cli_check_runs_every_library(libs, capsys):
    from sparse_ops import cli

    paths, _ = libs
    for name, path in paths.items():
        assert cli.main(["check", path]) == 0, capsys.readouterr().out
        out = capsys.readouterr().out
        assert f"({len(OPS[name])} operators;" in out and ", 0 failed, 0 without samples" in out


# ---- gemm -------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_gemm_matches_numpy(dtype, ta, tb):
    a = rand((4, 3) if ta else (3, 4), dtype, 1)
    b = rand((5, 4) if tb else (4, 5), dtype, 2)
    out = so.ops.c_gemm(so.array(a), so.array(b), transpose_a=ta, transpose_b=tb)
    want = (a.T if ta else a).astype(np.float64) @ (b.T if tb else b).astype(np.float64)
    assert (out.stype, out.dtype, out.shape) == ("default", np.dtype(dtype), (3, 5))
    np.testing.assert_allclose(out.asnumpy(), want, **tol(dtype))


def test_gemm_empty_inner_and_outer_sizes():
    np.testing.assert_array_equal(so.ops.c_gemm(so.zeros((3, 0)), so.zeros((0, 2))).asnumpy(), np.zeros((3, 2)))
    assert so.ops.c_gemm(so.zeros((0, 4)), so.array(rand((4, 2), "float32"))).shape == (0, 2)


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_gemm_autograd_values(ta, tb):
    a_np, b_np, g_np = rand((4, 3) if ta else (3, 4), "float64", 3), rand((2, 4) if tb else (4, 2), "float64", 4), \
        rand((3, 2), "float64", 5)
    a, b = so.array(a_np), so.array(b_np)
    a.attach_grad()
    b.attach_grad()
    with autograd.record():
        c = so.ops.c_gemm(a, b, transpose_a=ta, transpose_b=tb)
    c.backward(so.array(g_np))
    op_a, op_b = (a_np.T if ta else a_np), (b_np.T if tb else b_np)
    da, db = g_np @ op_b.T, op_a.T @ g_np  # gradients for op(a) and op(b)
    np.testing.assert_allclose(a.grad.asnumpy(), da.T if ta else da, rtol=1e-12)
    np.testing.assert_allclose(b.grad.asnumpy(), db.T if tb else db, rtol=1e-12)


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_gemm_family_gradients_against_finite_differences(ta, tb):
    """c_gemm's gradient ops and their own gradients (second order) agree with central differences."""
    a = so.array(rand((4, 3) if ta else (3, 4), "float64", 6))
    b = so.array(rand((2, 4) if tb else (4, 2), "float64", 7))
    g = so.array(rand((3, 2), "float64", 8))
    params = {"transpose_a": ta, "transpose_b": tb}
    check_gradient("c_gemm", [a, b], params)
    check_gradient("c_gemm_grad_a", [g, b], params)
    check_gradient("c_gemm_grad_b", [a, g], params)
    check_numeric_gradient(lambda x, y: so.ops.c_gemm(x, y, **params), [a, b])


def test_gemm_second_derivative_through_create_graph():
    """d/da of sum(d loss/d a) for loss = sum(c_gemm(a, b) * w): grad_a is linear in b only, so
    the second derivative for a is 0 and for b it is w's column sums broadcast."""
    a, b = so.array(rand((3, 4), "float64", 9)), so.array(rand((4, 2), "float64", 10))
    w = so.array(rand((3, 2), "float64", 11))
    a.attach_grad()
    b.attach_grad()
    with autograd.record():
        loss = so.sum(so.ops.c_gemm(a, b) * w)
        (da,) = autograd.grad(loss, [a], create_graph=True)
        total = so.sum(da)
    total.backward()
    # da = w @ b.T, so sum(da) = sum_ij sum_k w_ik b_jk: d/db_jk = sum_i w_ik
    np.testing.assert_allclose(b.grad.asnumpy(), np.tile(w.asnumpy().sum(axis=0), (4, 1)), rtol=1e-12)


def test_gemm_refuses_bad_shapes_and_dtypes():
    x = so.array(rand((3, 4), "float64"))
    with pytest.raises(OperatorError, match=r"op\(a\) is 3 x 4 and op\(b\) is 3 x 4: the inner sizes differ"):
        so.ops.c_gemm(x, x)
    so.ops.c_gemm(x, x, transpose_b=True)  # 3x4 @ 4x3
    with pytest.raises(OperatorError, match=r"b must be a matrix \(2-D\), got 1 dimensions"):
        so.ops.c_gemm(x, so.array(rand((4,), "float64")))
    with pytest.raises(OperatorError, match="SO_ERR_UNSUPPORTED: input 0 is float16: only float32 and float64"):
        so.ops.c_gemm(so.array(rand((3, 4), "float16")), so.array(rand((4, 2), "float16")))
    with pytest.raises(OperatorError, match="input 1 is int64"):
        so.ops.c_gemm(x, so.array(np.ones((4, 2), np.int64)))
    with pytest.raises(OperatorError, match="the inputs are float64 and float32: give both the same dtype"):
        so.ops.c_gemm(x, so.array(rand((4, 2), "float32")))
    with pytest.raises(OperatorError, match=r"library .*libgemm\.so"):
        so.ops.c_gemm(x, x)


# ---- relu -------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_relu_and_its_backward_match_numpy(dtype):
    x_np = rand((5, 7), dtype, 12)
    x_np[0, :3] = [np.nan, -np.inf, np.inf]
    out = so.ops.c_relu(so.array(x_np))
    assert (out.dtype, out.shape) == (np.dtype(dtype), (5, 7))
    np.testing.assert_array_equal(out.asnumpy(), np.maximum(x_np, 0))  # NaN stays NaN
    g_np = rand((5, 7), dtype, 13)
    np.testing.assert_array_equal(so.ops.c_relu_backward(so.array(g_np), so.array(x_np)).asnumpy(),
                                  np.where(x_np > 0, g_np, 0))
    assert so.ops.c_relu(so.zeros((0, 3), dtype=dtype)).shape == (0, 3)


def test_relu_autograd_and_gradient_checks():
    x_np = rand((4, 6), "float64", 14)
    x_np[np.abs(x_np) < 0.05] = 0.5  # away from the kink
    x = so.array(x_np)
    x.attach_grad()
    g = rand((4, 6), "float64", 15)
    with autograd.record():
        y = so.ops.c_relu(x)
    y.backward(so.array(g))
    np.testing.assert_array_equal(x.grad.asnumpy(), np.where(x_np > 0, g, 0))
    check_gradient("c_relu", [so.array(x_np)])
    check_gradient("c_relu_backward", [so.array(g), so.array(x_np)], wrt=[0])


def test_relu_refuses_other_dtypes_and_shapes():
    with pytest.raises(OperatorError, match="SO_ERR_UNSUPPORTED: float16 is not supported: float32 and float64 only"):
        so.ops.c_relu(so.array(rand((3,), "float16")))
    with pytest.raises(OperatorError, match="int32 is not supported"):
        so.ops.c_relu(so.array(np.arange(3, dtype=np.int32)))
    with pytest.raises(OperatorError, match="out_grad and data must have one shape"):
        so.ops.c_relu_backward(so.array(rand((3,), "float64")), so.array(rand((4,), "float64")))


def test_relu_on_a_csr_falls_back_to_the_dense_kernel():
    x = sparse_csr(random_dense(6, 5, 0.4, seed=16))
    with pytest.warns(StorageFallbackWarning, match="c_relu"):
        out = so.ops.c_relu(x)
    assert out.stype == "default"
    np.testing.assert_array_equal(out.asnumpy(), np.maximum(x.asnumpy(), 0))


@pytest.mark.gpu
@pytest.mark.skipif(not has_nvcc(), reason="no nvcc: relu has no gpu kernel to call")
def test_relu_gpu_kernel_on_the_simulated_gpu_is_refused_clearly():
    """The gpu kernel needs device memory and a CUDA stream; the simulator has neither, and
    the loader says so instead of handing host memory to a CUDA kernel. (On a real GPU the
    kernel would run: not tested here.)"""
    refusal = r"C kernels need a real GPU; under SPARSE_OPS_CUDA_SIM=1 the gpu device is simulated"
    if so.cuda.is_simulator():  # .ci/run's `SPARSE_OPS_CUDA_SIM=1 pytest -m gpu`: check here
        x = so.array(np.array([-1.0, 2.0]), device=so.gpu(0))
        with pytest.raises(OperatorError, match=r"operator 'c_relu' \(library .*\): " + refusal):
            so.ops.c_relu(x)
        return
    if so.num_gpus() > 0:
        pytest.skip("a real GPU: the simulated-gpu refusal does not apply")
    # the simulator must be chosen before numba is imported: a subprocess
    script = textwrap.dedent(f"""
        import numpy as np, sparse_ops as so
        assert so.cuda.is_simulator()
        so.library.load({str(build('relu'))!r})
        x = so.array(np.array([-1.0, 2.0]), device=so.gpu(0))
        try:
            so.ops.c_relu(x)
        except so.OperatorError as exc:
            print("REFUSED", exc)
    """)
    env = dict(os.environ, SPARSE_OPS_CUDA_SIM="1")
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "REFUSED operator 'c_relu' (library" in proc.stdout
    assert refusal in proc.stdout


@pytest.mark.gpu
@pytest.mark.skipif(not has_nvcc(), reason="no nvcc: relu has no gpu kernel to call")
def test_relu_gpu_kernel_on_a_real_gpu():
    """On hardware (benchmarks/gpu_check.sh): the CUDA kernels of relu.cu run on device memory,
    on the current stream, forward and backward, and agree with the cpu kernels."""
    if so.cuda.is_simulator() or so.num_gpus() == 0:
        pytest.skip("needs a real GPU")
    values = np.random.default_rng(3).standard_normal((257, 33))
    for dtype in ("float32", "float64"):
        x = so.array(values.astype(dtype), device=so.gpu(0))
        x.attach_grad()
        with so.autograd.record():
            y = so.ops.c_relu(x)
        y.backward(so.ones(y.shape, dtype=dtype, device=so.gpu(0)))
        assert y.device == so.gpu(0)
        np.testing.assert_array_equal(y.asnumpy(), np.maximum(values.astype(dtype), 0))
        np.testing.assert_array_equal(x.grad.asnumpy(), (values.astype(dtype) > 0).astype(dtype))


# ---- transpose of a csr ---------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_transpose_csr_matches_scipy(dtype, index_dtype):
    d = random_dense(30, 17, 0.2, seed=17, empty_rows=[0, 5, 29])
    d[:, 3] = 0  # an empty output row
    d = (d * 10).astype(dtype)
    m = sp.csr_matrix(d.astype(np.float64))  # SciPy has no float16
    x = so.csr_matrix((m.data.astype(dtype), m.indices.astype(index_dtype), m.indptr.astype(index_dtype)),
                      shape=d.shape)
    y = so.ops.c_transpose_csr(x)
    assert (y.stype, y.shape, y.dtype, y.nnz) == ("csr", (17, 30), np.dtype(dtype), x.nnz)
    assert y.indices.dtype == np.dtype(index_dtype) and y.indptr.dtype == np.dtype(index_dtype)
    y.check_format(full_check=True)
    want = m.T.tocsr()
    want.sort_indices()
    np.testing.assert_array_equal(y.indptr, want.indptr)
    np.testing.assert_array_equal(y.indices, want.indices)
    np.testing.assert_array_equal(y.data, want.data.astype(dtype))
    e = so.explain("c_transpose_csr", x)
    assert e["dispatch_mode"] == "fcompute_ex"
    # the declared capacity rule (so_op_decl.capacity_like, ABI 1.1): A.T stores A's values
    assert (e["out_capacity"], e["capacity_from"]) == ([x.nnz], ["nnz(data)"])


def test_transpose_csr_edge_cases():
    for shape in [(3, 5), (0, 4), (4, 0)]:
        y = so.ops.c_transpose_csr(so.zeros(shape, stype="csr"))
        assert (y.stype, y.shape, y.nnz) == ("csr", shape[::-1], 0)
        y.check_format(full_check=True)
    d = rand((4, 3), "float64", 18)
    dense = so.ops.c_transpose_csr(so.array(d))
    assert dense.stype == "default"
    np.testing.assert_array_equal(dense.asnumpy(), d.T)
    r = so.array(d).tostype("row_sparse")
    with pytest.warns(StorageFallbackWarning, match="c_transpose_csr"):
        out = so.ops.c_transpose_csr(r)
    assert out.stype == "default"
    np.testing.assert_array_equal(out.asnumpy(), d.T)
    with pytest.raises(OperatorError, match=r"data must be a matrix \(2-D\), got 3 dimensions"):
        so.ops.c_transpose_csr(so.zeros((2, 3, 4)))


def test_transpose_csr_gradients():
    x = sparse_csr(random_dense(8, 6, 0.4, seed=19, empty_rows=[2]))
    x.attach_grad()
    g = rand((6, 8), "float64", 20)
    with autograd.record():
        y = so.ops.c_transpose_csr(x)
    y.backward(so.array(g))
    np.testing.assert_array_equal(x.grad.asnumpy() * (x.asnumpy() != 0), g.T * (x.asnumpy() != 0))
    check_numeric_gradient(lambda a: so.ops.c_transpose_csr(a), [sparse_csr(random_dense(8, 6, 0.4, seed=19))])
    check_gradient("c_transpose_csr", [sparse_csr(random_dense(5, 7, 0.3, seed=21))])


# ---- transpose of a row_sparse ----------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int64"])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("out_stype", ["csr", "row_sparse"])
def test_transpose_row_sparse_matches_numpy(dtype, index_dtype, out_stype):
    d = np.zeros((9, 5), dtype=dtype)
    d[1] = [1, 0, 2, 0, 0]
    d[4] = [0, 0, 3, 0, -1]
    d[7] = [0, 0, 0, 0, 0]  # a stored row of zeros
    rows = np.array([1, 4, 7], dtype=index_dtype)
    x = so.row_sparse_array((d[rows], rows), shape=d.shape)
    y = so.ops.c_transpose_row_sparse(x, out_stype=out_stype)
    assert (y.stype, y.shape, y.dtype) == (out_stype, (5, 9), np.dtype(dtype))
    y.check_format(full_check=True)
    np.testing.assert_array_equal(y.asnumpy(), d.T)
    assert y.indices.dtype == np.dtype(index_dtype)
    if out_stype == "row_sparse":  # MXNet's: the non-zero columns, each stored in full
        assert y.indices.tolist() == [0, 2, 4] and y.data.shape == (3, 9)
    else:  # exactly the non-zero values; stored zeros dropped
        assert y.nnz == 4 and y.indices.tolist() == [1, 1, 4, 4] and y.indptr.tolist() == [0, 1, 1, 3, 3, 4]


def test_transpose_row_sparse_edge_cases():
    for out_stype in ["csr", "row_sparse"]:
        for shape in [(4, 3), (0, 3), (3, 0)]:
            y = so.ops.c_transpose_row_sparse(so.zeros(shape, stype="row_sparse"), out_stype=out_stype)
            assert (y.stype, y.shape, y.nnz) == (out_stype, shape[::-1], 0)
            y.check_format(full_check=True)
    d = rand((3, 4), "float64", 22)
    assert so.ops.c_transpose_row_sparse(so.array(d)).stype == "default"
    np.testing.assert_array_equal(so.ops.c_transpose_row_sparse(so.array(d)).asnumpy(), d.T)
    with pytest.raises(OperatorError, match="out_stype must be 'csr' or 'row_sparse', got 'coo'"):
        so.ops.c_transpose_row_sparse(so.array(d).tostype("row_sparse"), out_stype="coo")
    with pytest.raises(OperatorError, match=r"data must be a matrix \(2-D\), got 3 dimensions"):
        so.ops.c_transpose_row_sparse(so.zeros((2, 3, 4), stype="row_sparse"))


@pytest.mark.parametrize("out_stype", ["csr", "row_sparse"])
def test_transpose_row_sparse_gradients(out_stype):
    x_np = csr(random_dense(10, 6, 0.3, seed=23, empty_rows=[0, 3])).asnumpy()
    x = so.array(x_np).tostype("row_sparse")
    g = rand((6, 10), "float64", 24)
    x.attach_grad()
    with autograd.record():
        y = so.ops.c_transpose_row_sparse(x, out_stype=out_stype)
    y.backward(so.array(g))
    stored = np.zeros(10, bool)
    stored[x.indices] = True
    np.testing.assert_allclose(x.grad.asnumpy()[stored], g.T[stored])
    check_numeric_gradient(lambda a: so.ops.c_transpose_row_sparse(a, out_stype=out_stype), [x])


# ---- csr threshold ----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("threshold", [0.0, 0.7, 10.0])
def test_csr_threshold_matches_numpy(dtype, index_dtype, threshold):
    d = random_dense(25, 12, 0.3, seed=25, empty_rows=[3, 24]).astype(dtype)
    x = sparse_csr(d, dtype, index_dtype)
    y = so.ops.c_csr_threshold(x, threshold=threshold)
    want = np.where(np.abs(d) > np.asarray(threshold, dtype=dtype), d, 0)
    assert (y.stype, y.shape, y.dtype) == ("csr", d.shape, np.dtype(dtype))
    assert y.indices.dtype == np.dtype(index_dtype) and y.indptr.dtype == np.dtype(index_dtype)
    y.check_format(full_check=True)
    assert y.nnz == np.count_nonzero(want)  # nothing kept that is not there
    np.testing.assert_array_equal(y.asnumpy(), want)
    dense = so.ops.c_csr_threshold(so.array(d), threshold=threshold)
    assert dense.stype == "default"
    np.testing.assert_array_equal(dense.asnumpy(), want)


def test_csr_threshold_compares_float32_in_float32():
    """0.1 is not a float32: the threshold is rounded to float32 first, as NumPy compares."""
    v = np.float32(0.1)
    x = sparse_csr(np.array([[v, 2 * v]], np.float32), "float32")
    assert so.ops.c_csr_threshold(x, threshold=0.1).nnz == int(np.count_nonzero(np.abs([v, 2 * v]) > 0.1)) == 1


def test_csr_threshold_edge_cases_and_errors():
    for shape in [(3, 4), (0, 4), (4, 0)]:
        y = so.ops.c_csr_threshold(so.zeros(shape, stype="csr"), threshold=0.5)
        assert (y.stype, y.shape, y.nnz) == ("csr", shape, 0)
    x = sparse_csr(np.array([[np.nan, 1.0], [0.0, -3.0]]))
    np.testing.assert_array_equal(so.ops.c_csr_threshold(x, threshold=0.5).asnumpy(), [[0, 1], [0, -3]])
    with pytest.raises(OperatorError, match=r"threshold must be >= 0, got -0.5 \(a negative one would keep every "
                                            r"implicit zero\)"):
        so.ops.c_csr_threshold(x, threshold=-0.5)
    with pytest.raises(OperatorError, match="SO_ERR_UNSUPPORTED: float16 is not supported"):
        so.ops.c_csr_threshold(so.zeros((2, 2), stype="csr", dtype="float16"))
    with pytest.raises(OperatorError, match="int64 is not supported"):
        so.ops.c_csr_threshold(so.array(np.ones((2, 2), np.int64)))
    with pytest.raises(OperatorError, match="out_grad and data must be matrices of one shape"):
        so.ops.c_csr_threshold_backward(so.zeros((2, 3)), x)


@pytest.mark.parametrize("grad_stype", ["default", "csr"])
def test_csr_threshold_backward_values(grad_stype):
    d = random_dense(12, 9, 0.4, seed=26, empty_rows=[1])
    x = sparse_csr(d)
    g_np = random_dense(12, 9, 0.5, seed=27)
    g = so.array(g_np) if grad_stype == "default" else sparse_csr(g_np)
    out = so.ops.c_csr_threshold_backward(g, x, threshold=0.6)
    mask = np.abs(d) > 0.6
    assert out.stype == "csr" and out.nnz == mask.sum()  # x's kept pattern, whatever g holds there
    out.check_format(full_check=True)
    np.testing.assert_array_equal(out.asnumpy(), np.where(mask, g_np, 0))


def test_csr_threshold_gradients():
    d = random_dense(10, 8, 0.4, seed=28, empty_rows=[4])
    d[np.abs(np.abs(d) - 0.5) < 0.01] = 2.0  # nothing within eps of the threshold
    x = sparse_csr(d)
    x.attach_grad()
    g = rand((10, 8), "float64", 29)
    with autograd.record():
        y = so.ops.c_csr_threshold(x, threshold=0.5)
    y.backward(so.array(g))
    assert x.grad.stype == "csr"
    np.testing.assert_array_equal(x.grad.asnumpy(), np.where(np.abs(d) > 0.5, g, 0))
    check_gradient("c_csr_threshold", [x], {"threshold": 0.5})
    check_numeric_gradient(lambda a: so.ops.c_csr_threshold(a, threshold=0.5), [sparse_csr(d)])


# ---- debug mode, PyTorch ------------------------------------------------------------------------
def test_sparse_outputs_pass_the_full_checks_of_the_debug_mode(monkeypatch):
    """With SPARSE_OPS_BOUNDSCHECK=1 every sparse output of these (untrusted) kernels is fully
    validated after the kernel, unset values included. .ci/run runs this whole file in that
    mode; here the switch is flipped in-process for fresh plans (plans are made per signature)."""
    from sparse_ops import settings

    monkeypatch.setattr(settings, "BOUNDSCHECK", True)
    for op in ["c_transpose_csr", "c_transpose_row_sparse", "c_csr_threshold", "c_csr_threshold_backward"]:
        monkeypatch.setattr(so.get_op(op), "plans", {})
    for index_dtype in INDEX_DTYPES:
        d = random_dense(40, 23, 0.2, seed=30, empty_rows=[0, 39]).astype("float32")
        x = sparse_csr(d, "float32", index_dtype)
        outs = [so.ops.c_transpose_csr(x), so.ops.c_csr_threshold(x, threshold=0.3),
                so.ops.c_csr_threshold_backward(so.array(d), x, threshold=0.3),
                so.ops.c_csr_threshold_backward(x, x, threshold=0.3)]
        r = so.array(d).tostype("row_sparse")
        outs += [so.ops.c_transpose_row_sparse(r), so.ops.c_transpose_row_sparse(r, out_stype="row_sparse")]
        for out in outs:
            assert out.stype != "default"
            out.check_format(full_check=True)
        assert so.get_op("c_transpose_csr").plans and all(p.debug for p in so.get_op("c_transpose_csr").plans.values())
        np.testing.assert_array_equal(outs[0].asnumpy(), d.T)
        np.testing.assert_array_equal(outs[1].asnumpy(), np.where(np.abs(d) > np.float32(0.3), d, 0))


def test_torch_bridge_runs_the_c_ops():
    torch = pytest.importorskip("torch")
    from sparse_ops.torch import ops as tops

    a = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, 2, dtype=torch.float64, requires_grad=True)
    c = tops.c_gemm(a, b)
    torch.testing.assert_close(c, a @ b)
    g = torch.randn(3, 2, dtype=torch.float64)
    c.backward(g)
    torch.testing.assert_close(a.grad, g @ b.T.detach())
    torch.testing.assert_close(b.grad, a.T.detach() @ g)

    d = torch.tensor([[0.2, -1.5, 0.0], [0.9, 0.0, -0.1]], dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch: "Sparse CSR tensor support is in beta state"
        y = tops.c_csr_threshold(d.to_sparse_csr(), threshold=0.5)
    assert y.layout == torch.sparse_csr
    torch.testing.assert_close(y.to_dense(), torch.where(d.abs() > 0.5, d, torch.zeros_like(d)))
    x = torch.tensor([-1.0, 0.5, 2.0], requires_grad=True)
    tops.c_relu(x).sum().backward()
    torch.testing.assert_close(x.grad, torch.tensor([0.0, 1.0, 1.0]))
