"""The numba.cuda kernels of the built-ins (``sparse_ops.cuda.kernels``) against the cpu and SciPy.

elemwise_add / sub / mul on (csr, csr) and dot with a csr operand run storage-aware gpu
kernels (dispatch mode ``fcompute_ex``, not the densifying fallback). Runs where a gpu
exists: on hardware, or anywhere with ``SPARSE_OPS_CUDA_SIM=1`` set before Python
starts, which runs the kernels in numba's CUDA simulator:

    SPARSE_OPS_CUDA_SIM=1 python -m pytest -q tests/test_gpu_kernels.py

The simulator runs every gpu thread as a Python thread: inputs stay tiny.
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import sparse_ops as so
from conftest import dense_arrays, make

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(so.num_gpus() == 0, reason="no gpu (set SPARSE_OPS_CUDA_SIM=1 to simulate one)"),
]

GPU = so.gpu(0)
ELEMWISE = {"elemwise_add": np.add, "elemwise_sub": np.subtract, "elemwise_mul": np.multiply}
SCIPY_ELEMWISE = {"elemwise_add": lambda a, b: a + b, "elemwise_sub": lambda a, b: a - b,
                  "elemwise_mul": lambda a, b: a.multiply(b)}


def matrix(shape, density=0.4, dtype="float64", seed=0):
    """Small integers (exact in every dtype) with a random zero pattern; no zero stored."""
    rng = np.random.default_rng(seed)
    values = rng.integers(1, 9, size=shape) * rng.choice([-1, 1], size=shape)
    return np.where(rng.random(shape) < density, values, 0).astype(dtype)


def pair(dense, stype="default", index_dtype="int64"):
    """The same container on the cpu and on the gpu."""
    cpu = make(dense, stype, index_dtype)
    return cpu, cpu.to(GPU)


def index_dtypes(x):
    return [x.indices.dtype] + ([x.indptr.dtype] if x.stype == "csr" else [])


def assert_same(on_gpu, on_cpu, reference, rtol=1e-12):
    """gpu result = cpu result (storage type, dtype, index dtypes, values) = the reference."""
    assert on_gpu.device == GPU
    assert (on_gpu.stype, on_gpu.shape, on_gpu.dtype) == (on_cpu.stype, on_cpu.shape, on_cpu.dtype)
    if on_gpu.stype != "default":
        on_gpu.check_format(full_check=True)
        assert index_dtypes(on_gpu) == index_dtypes(on_cpu)
    np.testing.assert_allclose(on_gpu.asnumpy(), on_cpu.asnumpy(), rtol=rtol, atol=rtol)
    np.testing.assert_allclose(on_gpu.asnumpy().astype(np.float64), reference, rtol=rtol, atol=rtol)


# ---- dispatch ------------------------------------------------------------------------------------
def _dispatch_cases():
    c, d, r = matrix((4, 3)), matrix((3, 2)), matrix((4, 2))
    csr, dense = pair(c, "csr")[1], pair(d)[1]
    return {
        **{op: (op, (csr, csr), {}) for op in ELEMWISE},
        "csr @ dense": ("dot", (csr, dense), {}),
        "csr @ dense.T": ("dot", (csr, pair(matrix((2, 3)))[1]), {"transpose_b": True}),
        "csr.T @ dense": ("dot", (csr, pair(r)[1]), {"transpose_a": True}),
        "csr.T @ row_sparse": ("dot", (csr, pair(r, "row_sparse")[1]), {"transpose_a": True}),
        "csr @ row_sparse": ("dot", (csr, pair(d, "row_sparse")[1]), {}),
        "dense @ csr": ("dot", (pair(matrix((2, 4)))[1], csr), {}),
        "dense @ csr.T": ("dot", (pair(matrix((2, 3)))[1], csr), {"transpose_b": True}),
        "dense.T @ csr": ("dot", (pair(matrix((4, 2)))[1], csr), {"transpose_a": True}),
    }


DISPATCH_CASES = [*ELEMWISE, "csr @ dense", "csr @ dense.T", "csr.T @ dense", "csr.T @ row_sparse",
                  "csr @ row_sparse", "dense @ csr", "dense @ csr.T", "dense.T @ csr"]


@pytest.mark.parametrize("case", DISPATCH_CASES)
def test_gpu_kernel_is_chosen(case):
    op, inputs, params = _dispatch_cases()[case]
    plan = so.explain(op, *inputs, **params)
    assert plan["device"] == "gpu(0)"
    assert plan["dispatch_mode"] == "fcompute_ex", plan
    # a storage-aware kernel registered for the gpu (the csr merges serve both devices)
    assert plan["kernel"].endswith(("_gpu", ".csr_csr")), plan


# ---- elemwise on (csr, csr) ----------------------------------------------------------------------
@pytest.mark.parametrize("op", sorted(ELEMWISE))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("idx_a,idx_b", [("int32", "int32"), ("int64", "int64"), ("int32", "int64")])
def test_elemwise_csr_csr(op, dtype, idx_a, idx_b):
    a, b = matrix((6, 5), 0.5, dtype, seed=1), matrix((6, 5), 0.5, dtype, seed=2)
    (ca, ga), (cb, gb) = pair(a, "csr", idx_a), pair(b, "csr", idx_b)
    fn = getattr(so, op)
    on_gpu, on_cpu = fn(ga, gb), fn(ca, cb)
    assert on_gpu.stype == "csr"
    expected = SCIPY_ELEMWISE[op](sp.csr_matrix(a.astype(np.float64)), sp.csr_matrix(b.astype(np.float64)))
    assert_same(on_gpu, on_cpu, expected.toarray())
    assert on_gpu.indices.dtype == (np.int32 if idx_a == idx_b == "int32" else np.int64)


@pytest.mark.parametrize("op", sorted(ELEMWISE))
@pytest.mark.parametrize("dtype", ["float16", "int32", "int64"])
def test_elemwise_csr_csr_other_dtypes(op, dtype):
    a, b = matrix((4, 6), 0.5, dtype, seed=3), matrix((4, 6), 0.5, dtype, seed=4)
    (ca, ga), (cb, gb) = pair(a, "csr"), pair(b, "csr")
    fn = getattr(so, op)
    on_gpu = fn(ga, gb)
    assert on_gpu.dtype == np.dtype(dtype)
    assert_same(on_gpu, fn(ca, cb), ELEMWISE[op](a.astype(np.float64), b.astype(np.float64)))


@pytest.mark.parametrize("op", sorted(ELEMWISE))
@pytest.mark.parametrize("shape,density_a,density_b", [
    ((0, 4), 0.5, 0.5), ((3, 0), 0.5, 0.5), ((3, 4), 0.0, 0.0), ((3, 4), 0.0, 0.6), ((3, 4), 0.6, 0.0)])
def test_elemwise_csr_csr_empty(op, shape, density_a, density_b):
    a, b = matrix(shape, density_a, seed=5), matrix(shape, density_b, seed=6)
    (ca, ga), (cb, gb) = pair(a, "csr", "int32"), pair(b, "csr", "int32")
    fn = getattr(so, op)
    assert_same(fn(ga, gb), fn(ca, cb), ELEMWISE[op](a, b))


@settings(max_examples=12)
@given(a=dense_arrays(ndim=2, max_side=6, dtypes=["float64"]), seed=st.integers(0, 2**16),
       op=st.sampled_from(sorted(ELEMWISE)))
def test_elemwise_csr_csr_random(a, seed, op):
    b = matrix(a.shape, 0.4, seed=seed)
    (ca, ga), (cb, gb) = pair(a, "csr"), pair(b, "csr")
    fn = getattr(so, op)
    assert_same(fn(ga, gb), fn(ca, cb), ELEMWISE[op](a, b))


# ---- dot with a csr operand ----------------------------------------------------------------------
# name -> (lhs shape, lhs stype, rhs shape, rhs stype, params, numpy reference)
DOT_CASES = {
    "csr @ dense": ((6, 5), "csr", (5, 3), "default", {}, lambda a, b: a @ b),
    "csr @ dense.T": ((6, 5), "csr", (3, 5), "default", {"transpose_b": True}, lambda a, b: a @ b.T),
    "csr.T @ dense": ((6, 5), "csr", (6, 3), "default", {"transpose_a": True}, lambda a, b: a.T @ b),
    "csr.T @ dense.T": ((6, 5), "csr", (3, 6), "default", {"transpose_a": True, "transpose_b": True},
                        lambda a, b: a.T @ b.T),
    "csr @ row_sparse": ((6, 5), "csr", (5, 3), "row_sparse", {}, lambda a, b: a @ b),
    "csr.T @ row_sparse": ((6, 5), "csr", (6, 3), "row_sparse", {"transpose_a": True}, lambda a, b: a.T @ b),
    "csr @ row_sparse.T": ((6, 5), "csr", (3, 5), "row_sparse", {"transpose_b": True}, lambda a, b: a @ b.T),
    "csr @ vector": ((6, 5), "csr", (5,), "default", {}, lambda a, b: a @ b),
    "csr.T @ vector": ((6, 5), "csr", (6,), "default", {"transpose_a": True}, lambda a, b: a.T @ b),
    "csr @ wide dense": ((3, 4), "csr", (4, 40), "default", {}, lambda a, b: a @ b),
    "dense @ csr": ((4, 6), "default", (6, 5), "csr", {}, lambda a, b: a @ b),
    "dense.T @ csr": ((6, 4), "default", (6, 5), "csr", {"transpose_a": True}, lambda a, b: a.T @ b),
    "dense @ csr.T": ((4, 5), "default", (6, 5), "csr", {"transpose_b": True}, lambda a, b: a @ b.T),
    "dense.T @ csr.T": ((5, 4), "default", (6, 5), "csr", {"transpose_a": True, "transpose_b": True},
                        lambda a, b: a.T @ b.T),
    "csr.T @ dense as default": ((6, 5), "csr", (6, 3), "default",
                                 {"transpose_a": True, "forward_stype": "default"}, lambda a, b: a.T @ b),
    "csr @ dense as csr": ((6, 5), "csr", (5, 3), "default", {"forward_stype": "csr"}, lambda a, b: a @ b),
    "dense @ csr as row_sparse": ((4, 6), "default", (6, 5), "csr", {"forward_stype": "row_sparse"},
                                  lambda a, b: a @ b),
}


def run_dot(case, dtype, index_dtype, density=0.4):
    ls, lst, rs, rst, params, ref = DOT_CASES[case]
    a, b = matrix(ls, density, dtype, seed=7), matrix(rs, 0.6 if rst == "default" else 0.4, dtype, seed=8)
    (ca, ga), (cb, gb) = pair(a, lst, index_dtype), pair(b, rst, index_dtype)
    on_gpu, on_cpu = so.dot(ga, gb, **params), so.dot(ca, cb, **params)
    return on_gpu, on_cpu, ref(a.astype(np.float64), b.astype(np.float64))


@pytest.mark.parametrize("case", sorted(DOT_CASES))
@pytest.mark.parametrize("dtype,index_dtype", [("float32", "int32"), ("float64", "int64"), ("float64", "int32")])
def test_dot_csr(case, dtype, index_dtype):
    on_gpu, on_cpu, expected = run_dot(case, dtype, index_dtype)
    assert_same(on_gpu, on_cpu, expected, rtol=1e-5 if dtype == "float32" else 1e-12)


@pytest.mark.parametrize("case,dtype", [("csr @ dense", "float16"), ("csr.T @ dense", "float16"),
                                        ("dense @ csr", "float16"), ("csr @ dense", "int32"),
                                        ("csr.T @ row_sparse", "int64"), ("dense @ csr.T", "int32")])
def test_dot_csr_other_dtypes(case, dtype):
    on_gpu, on_cpu, expected = run_dot(case, dtype, "int64")
    assert_same(on_gpu, on_cpu, expected, rtol=1e-3 if dtype == "float16" else 0)


@pytest.mark.parametrize("case", ["csr @ dense", "csr.T @ dense", "csr.T @ row_sparse", "csr @ row_sparse",
                                  "dense @ csr", "dense @ csr.T"])
def test_dot_csr_without_stored_values(case):
    on_gpu, on_cpu, expected = run_dot(case, "float64", "int32", density=0.0)
    assert_same(on_gpu, on_cpu, expected)


@pytest.mark.parametrize("lhs_shape,lhs_stype,rhs_shape,rhs_stype,params", [
    ((0, 5), "csr", (5, 3), "default", {}),
    ((6, 0), "csr", (0, 3), "default", {}),
    ((6, 5), "csr", (5, 0), "default", {}),
    ((0, 5), "csr", (0, 3), "default", {"transpose_a": True}),
    ((6, 5), "csr", (6, 0), "row_sparse", {"transpose_a": True}),
    ((0, 6), "default", (6, 5), "csr", {}),
    ((4, 0), "default", (0, 5), "csr", {}),
    ((4, 6), "default", (6, 0), "csr", {}),
    ((4, 5), "default", (0, 5), "csr", {"transpose_b": True}),
])
def test_dot_csr_empty_shapes(lhs_shape, lhs_stype, rhs_shape, rhs_stype, params):
    a, b = matrix(lhs_shape, 0.5, seed=10), matrix(rhs_shape, 0.6, seed=11)
    (ca, ga), (cb, gb) = pair(a, lhs_stype, "int32"), pair(b, rhs_stype, "int32")
    ref = (a.T if params.get("transpose_a") else a) @ (b.T if params.get("transpose_b") else b)
    assert_same(so.dot(ga, gb, **params), so.dot(ca, cb, **params), ref)


def test_dot_on_gpu_writes_into_out():
    a, w = matrix((6, 5), 0.5), matrix((5, 3), 1.0)
    (_, ga), (_, gw) = pair(a, "csr"), pair(w)
    out = so.zeros((6, 3), device=GPU)
    so.dot(ga, gw, out=out)
    np.testing.assert_allclose(out.asnumpy(), a @ w)


# ---- the kernels' drivers, directly --------------------------------------------------------------
def _ctx():
    return so.OpContext(GPU, False, so.get_op("dot"))


@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize("shape,density", [((5, 7), 0.35), ((4, 3), 0.0), ((0, 3), 0.5), ((3, 6), 1.0)])
def test_csr_transpose_matches_scipy(index_dtype, shape, density):
    from sparse_ops.cuda import kernels as gk

    a = matrix(shape, density, seed=9)
    m = make(a, "csr", index_dtype).to(GPU)
    (indptr, indices, values), counts = gk.csr_transpose(_ctx(), (m._indptr, m._indices, m._data), shape[1])
    t = sp.csr_matrix(a.T)
    assert indptr.dtype == indices.dtype == np.dtype(index_dtype)
    np.testing.assert_array_equal(so.device.to_host(indptr), t.indptr)
    np.testing.assert_array_equal(so.device.to_host(indices), t.indices)  # sorted: a stable transpose
    np.testing.assert_array_equal(so.device.to_host(values), t.data)
    np.testing.assert_array_equal(so.device.to_host(counts), np.diff(t.indptr))


def test_launch_helpers_cover_the_work():
    from sparse_ops.sdk.launch import grid_for, rows_grid, warp_per_row

    for n in (1, 6, 100, 300, 7):
        blocks, threads = grid_for(n)
        assert blocks * threads >= n and threads % 32 == 0
        assert rows_grid(n) == grid_for(n)
        blocks, threads = warp_per_row(n)
        assert blocks * (threads // 32) >= n


# The simulator runs kernels as Python: it never types or compiles them. Compiling them to
# PTX (libNVVM only, no GPU) catches what only a GPU build would refuse, and shows that
# float32 products accumulate in float32. The kernels are the bodies of the built-ins'
# one-body row kernels (``sparse_ops.sdk.rowkernel``), compiled for the CUDA target.
PTX_CHECK = r"""
import itertools, re, sys
from numba import cuda, types as T
try:
    from numba.cuda.cudadrv import nvvm
    nvvm.NVVM()
except Exception as exc:
    print("no libNVVM:", exc)
    sys.exit(3)
import sparse_ops.kernels.elemwise as E
from sparse_ops.sdk import csr as C
combos = [*itertools.product((T.int32, T.int64), (T.float32, T.float64)), (T.int32, T.int32)]
for idx, vt in combos:
    i, v1, v2 = idx[::1], vt[::1], vt[:, ::1]
    sigs = {
        E.csr_merge_count: (i, i, i, i, T.int64, T.int64[::1]),
        E.csr_merge_fill: (i, i, v1, i, i, v1, T.int64, i, i, v1),
        C._row_ids_row: (i, i),
        C._gather_rows_row: (i, i, v1, i, i, i, v1),
        C._csr_dense_row: (i, i, v1, v2, v2),
        C._segment_sum_row: (i, v1, T.int64, T.float64[::1]),
    }
    for kernel, sig in sigs.items():
        # the body as a kernel of its own, its row (lane, lanes) as arguments: typing the SDK's
        # driver, which calls the body as a device function, needs a CUDA driver
        index = (T.int64,) * (3 if kernel.lanes else 1)
        ptx, _ = cuda.compile_ptx(kernel.body, (*index, *sig), cc=(7, 5))
        if vt == T.float32 and kernel is C._csr_dense_row:
            assert not re.search(r"\b(?:add|sub|mul|fma)(?:\.rn)?\.f64\b", ptx), (kernel, "float64 arithmetic")
print("ok")
"""


def test_kernels_compile_for_a_gpu():
    env = {k: v for k, v in os.environ.items() if k not in ("SPARSE_OPS_CUDA_SIM", "NUMBA_ENABLE_CUDASIM")}
    result = subprocess.run([sys.executable, "-c", PTX_CHECK], capture_output=True, text=True, env=env,
                            timeout=300)
    if result.returncode == 3:
        pytest.skip(result.stdout.strip())
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-3000:]


# ---- device memory interface ---------------------------------------------------------------------
def test_cuda_array_interface_only_for_device_memory():
    dense = matrix((3, 2))
    cpu, gpu = pair(dense)
    assert not hasattr(cpu, "__cuda_array_interface__")
    assert not hasattr(pair(dense, "csr")[1], "__cuda_array_interface__")
    if so.cuda.is_simulator():  # simulated gpu memory is host memory
        assert not hasattr(gpu, "__cuda_array_interface__")
    else:
        assert gpu.__cuda_array_interface__ == gpu.data.__cuda_array_interface__


def test_import_compiles_and_imports_no_cuda_code():
    code = ("import sys, sparse_ops; "
            "assert 'numba' not in sys.modules and 'sparse_ops.cuda.kernels' not in sys.modules, "
            "sorted(m for m in sys.modules if 'numba' in m or 'cuda' in m)")
    env = dict(os.environ, SPARSE_OPS_DISABLE_PLUGIN_AUTOLOAD="1")
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)
