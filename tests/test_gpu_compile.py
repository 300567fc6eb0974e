"""Gpu kernels compiled for the real CUDA target without a GPU (``sparse_ops.sdk.gpu_compile``,
``sparse-ops check --gpu-compile``), and row-kernel errors at the author's line.

A plugin module with bad bodies (a call of a plain Python helper, an allocation, locals named
like the generated drivers' own) is written to a temporary folder: CUDA's refusals name the
plugin's file and the line of the offending statement; numba's typing errors on the cpu
too; the colliding names run and compile. numba-cuda's NVVM compiles here (the
``gpu-compile`` extra); no GPU or CUDA driver is involved."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from sparse_ops.sdk import gpu_compile
from sparse_ops.sdk.rowkernel import argument_type

try:
    gpu_compile.require_cuda_compiler()
except gpu_compile.GpuCompileError as exc:  # pragma: no cover - the dev extra installs numba-cuda
    pytest.skip(f"no CUDA compiler here: {exc}", allow_module_level=True)

import numba  # noqa: E402
from numba.core.errors import NumbaError  # noqa: E402

BODIES = '''\
import numpy as np
import sparse_ops as so
from sparse_ops.sdk.rowkernel import row_kernel


def twice(v):
    return v * 2


@row_kernel
def calls_plain_helper(r, x, out):
    v = x[r]
    out[r] = twice(v)  # LINE:helper


@row_kernel
def allocates(r, x, out):
    tmp = np.empty(2)  # LINE:alloc
    tmp[0] = x[r]
    out[r] = tmp[0]


@row_kernel
def row_means(r, indptr, data, out):
    _t = out.dtype.type(0.0)
    _n = 0
    _start = indptr[r]
    _stop = indptr[r + 1]
    for _i in range(_start, _stop):
        _t += data[_i]
        _n += 1
    out[r] = _t / out.dtype.type(max(_n, 1))


@row_kernel
def promoting_sum(r, x, scale, out):
    acc = 0.0  # LINE:promote
    for f in range(x.shape[1]):
        acc += x[r, f] * scale
    out[r] = acc


@row_kernel
def typed_sum(r, x, scale, out):
    acc = out.dtype.type(0.0)
    for f in range(x.shape[1]):
        acc += x[r, f] * scale
    out[r] = acc


@row_kernel(float64="the sum of many small values needs the precision")
def declared_sum(r, x, scale, out):
    acc = 0.0
    for f in range(x.shape[1]):
        acc += x[r, f] * scale
    out[r] = acc


@row_kernel(lanes=True)
def scaled_rows(r, lane, lanes, x, out):
    _block = x.shape[1]
    for _i in range(lane, _block, lanes):
        _t = x[r, _i]
        out[r, _i] = out.dtype.type(2) * _t


@row_kernel(total="float64")
def sum_of_squares(r, x):
    _part = x[r]
    _total = _part * _part
    return _total


@so.register("gpubad_copy")
class GpuBadCopy(so.Op):
    """A copy whose kernel allocates: fine on the cpu and in the simulator, refused by CUDA."""

    differentiable = False

    @so.kernel(device=("cpu", "gpu"))
    def run(self, ctx, x, y):
        allocates(ctx, x.shape[0], x, y)

    def reference(self, x):
        return [x]

    @classmethod
    def samples(cls):
        return [[so.array(np.arange(5.0))]]
'''


def _line(text: str, tag: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if line.endswith(f"# LINE:{tag}"))


@pytest.fixture(scope="module")
def bodies(tmp_path_factory):
    """The bad-bodies module, imported from its file (as a plugin's module would be)."""
    folder = tmp_path_factory.mktemp("gpubodies")
    path = folder / "gpubad_bodies.py"
    path.write_text(BODIES)
    import sparse_ops as so

    saved = so.registry.snapshot()
    spec = importlib.util.spec_from_file_location("gpubad_bodies", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpubad_bodies"] = module
    spec.loader.exec_module(module)
    yield module
    so.registry.restore(saved)
    sys.modules.pop("gpubad_bodies", None)


def _types(*arrays):
    return tuple(numba.typeof(a) for a in arrays)


def test_a_plain_helper_is_refused_by_cuda_at_the_authors_line(bodies):
    x = np.arange(4.0)
    with pytest.raises(NumbaError) as info:
        gpu_compile.compile_kernel(bodies.calls_plain_helper, _types(x, x))
    message = str(info.value)
    assert message.startswith(f"row kernel calls_plain_helper ({bodies.__file__}:{_line(BODIES, 'helper')}): ")
    assert "Untyped global name 'twice'" in message


def test_an_allocation_runs_on_the_cpu_but_cuda_refuses_it_at_the_authors_line(bodies):
    x, out = np.arange(4.0), np.zeros(4)
    bodies.allocates(None, 4, x, out)  # numba's cpu target allocates: no error there
    np.testing.assert_array_equal(out, x)
    with pytest.raises(NumbaError) as info:
        gpu_compile.compile_kernel(bodies.allocates, _types(x, out))
    assert str(info.value).startswith(f"row kernel allocates ({bodies.__file__}:{_line(BODIES, 'alloc')}): ")
    assert "empty" in str(info.value)


def test_a_cpu_typing_error_names_the_authors_file_function_and_line(bodies):
    x = np.arange(4.0)
    with pytest.raises(NumbaError) as info:
        bodies.calls_plain_helper(None, 4, x, np.zeros(4))
    message = str(info.value)
    assert message.startswith(f"row kernel calls_plain_helper ({bodies.__file__}:{_line(BODIES, 'helper')}): ")
    assert "rowkernels" not in message.splitlines()[0]  # not the generated driver's file
    # the error left nothing broken: a good kernel of the module still runs
    out = np.zeros(1)
    bodies.row_means(None, 1, np.array([0, 2]), np.array([1.0, 3.0]), out)
    assert out[0] == 2.0


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_locals_named_like_the_drivers_own_run_on_every_cpu_driver_and_compile_for_cuda(bodies, dtype,
                                                                                         index_dtype):
    rng = np.random.default_rng(0)
    rows = 300_000  # past the parallel threshold: the prange driver runs
    counts = rng.integers(0, 4, rows)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(index_dtype)
    data = rng.standard_normal(int(indptr[-1])).astype(dtype)
    want = np.add.reduceat(np.append(data, 0), indptr[:-1].astype(np.int64)) * (counts > 0) / np.maximum(counts, 1)
    for work in (1, 1 << 22):  # the serial driver, then the parallel one
        out = np.zeros(rows, dtype)
        bodies.row_means(None, rows, indptr, data, out, work=work)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    x = rng.standard_normal((rows // 100, 7)).astype(dtype)
    y = np.zeros_like(x)
    bodies.scaled_rows(None, x.shape[0], x, y)
    np.testing.assert_array_equal(y, 2 * x)
    v = rng.standard_normal(rows).astype(dtype)
    assert bodies.sum_of_squares(None, rows, v, work=1 << 22) == pytest.approx(float(np.sum(v.astype(float) ** 2)))
    for kernel, args in ((bodies.row_means, (indptr, data, out)), (bodies.scaled_rows, (x, y)),
                         (bodies.sum_of_squares, (v,))):
        ptx = gpu_compile.compile_kernel(kernel, _types(*args))
        assert ".visible .entry" in ptx and ".target sm_80" in ptx


def test_the_drivers_own_names_avoid_the_bodys():
    from sparse_ops.sdk.rowkernel import driver_prefix

    def plain(r, x, out):
        out[r] = x[r]

    def uses_the_prefix(r, x, _rk_out):
        _rk_out[r] = x[r]

    assert driver_prefix(plain) == "_rk_"
    assert driver_prefix(uses_the_prefix) == "__rk_"


def test_recorded_simulator_launches_compile_and_refusals_are_listed(bodies, tmp_path):
    """Kernels launched on the simulated gpu are recorded with their argument types; the
    recorded signatures then compile here, the allocating one refused at its line."""
    records = tmp_path / "signatures.jsonl"
    code = textwrap.dedent(f"""
        import sys, numpy as np, sparse_ops as so
        sys.path.insert(0, {os.path.dirname(bodies.__file__)!r})
        import gpubad_bodies as b
        ctx = so.gpu(0)
        x = np.arange(6.0, dtype=np.float32)
        b.row_means(ctx, 2, np.array([0, 3, 6], dtype=np.int32), x, np.zeros(2, np.float32))
        b.sum_of_squares(ctx, 6, x)
        b.allocates(ctx, 6, x, np.zeros(6, np.float32))
        b.allocates(ctx, 6, x, np.zeros(6, np.float32))  # the same signature: recorded once
    """)
    env = dict(os.environ, SPARSE_OPS_CUDA_SIM="1", SPARSE_OPS_GPU_SIGNATURES=str(records))
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    assert sorted(r["qualname"] for r in lines) == ["allocates", "row_means", "sum_of_squares"]
    means = next(r for r in lines if r["qualname"] == "row_means")
    assert means["args"] == [["array", "int32", 1, "C"], ["array", "float32", 1, "C"], ["array", "float32", 1, "C"]]
    report = gpu_compile.compile_recorded(str(records), use_cache=False)
    assert report.kernels == 3 and report.compiled == 2 and not report.not_found
    [(name, desc, message, ops)] = report.refused
    assert name == "gpubad_bodies.allocates" and f"gpubad_bodies.py:{_line(BODIES, 'alloc')}" in message
    assert ops == []  # launched directly, not by an operator's kernel


def test_argument_types_describe_what_a_gpu_sees():
    assert argument_type(np.zeros((3, 4), np.float32)) == ["array", "float32", 2, "C"]
    assert argument_type(np.zeros((3, 4), np.float32).T) == ["array", "float32", 2, "F"]
    assert argument_type(np.zeros((3, 4))[:, 1]) == ["array", "float64", 1, "A"]
    assert argument_type(2) == ["scalar", "int64"] and argument_type(2.0) == ["scalar", "float64"]
    assert argument_type(np.float32(1)) == ["scalar", "float32"] and argument_type(True) == ["scalar", "bool"]
    with pytest.raises(TypeError, match="cannot describe a kernel argument of type str"):
        argument_type("x")


def test_check_gpu_compile_refuses_a_plugin_whose_gpu_kernel_cuda_cannot_compile(bodies, tmp_path):
    """The plugin passes `sparse-ops check` on the cpu and in the simulator; `--gpu-compile`
    compiles what the simulator ran and fails at the author's line."""
    plugin = tmp_path / "gpubad_plugin.py"
    plugin.write_text(BODIES)
    out = subprocess.run([sys.executable, "-m", "sparse_ops", "check", "--gpu-compile", str(plugin)],
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "ok   gpubad_copy" in out.stdout  # the checks (values, in the simulator) pass
    assert "REFUSED gpubad_plugin.allocates (float64[1d, C], float64[1d, C]) (operator gpubad_copy)" in out.stdout
    assert f"gpubad_plugin.py:{_line(BODIES, 'alloc')}" in out.stdout
    assert "1 refused" in out.stdout.splitlines()[-1]


def test_compiling_for_cuda_is_refused_under_the_simulator():
    env = dict(os.environ, SPARSE_OPS_CUDA_SIM="1")
    out = subprocess.run([sys.executable, "-m", "sparse_ops.sdk.gpu_compile", os.devnull], env=env,
                         capture_output=True, text=True)
    assert out.returncode == 1 and "needs a process without the simulator" in out.stderr


def test_a_float32_variant_computing_in_float64_is_refused_unless_declared(bodies):
    """A Python float literal (acc = 0.0) or scalar promotes a float32 body's arithmetic to
    float64: the float32 variant's PTX holds float64 instructions and is refused, naming the
    kernel and the remedy; the same body with out.dtype.type(0.0) and a float32 scale
    compiles to float32 arithmetic only; a kernel that declares float64 compiles; float64
    variants are not concerned. The cpu drivers give the same values either way."""
    x32, out32 = np.arange(12, dtype=np.float32).reshape(4, 3), np.zeros(4, np.float32)
    x64, out64 = x32.astype(np.float64), np.zeros(4)
    f32, f64 = numba.float32, numba.float64
    with pytest.raises(gpu_compile.GpuCompileError) as info:
        gpu_compile.compile_kernel(bodies.promoting_sum, (*_types(x32), f32, *_types(out32)))
    message = str(info.value)
    assert message.startswith("row kernel gpubad_bodies.promoting_sum: its float32 variant computes in float64 (")
    assert "out.dtype.type(0.0)" in message and "row_kernel(float64=" in message
    with pytest.raises(gpu_compile.GpuCompileError, match="computes in float64"):
        gpu_compile.compile_kernel(bodies.typed_sum, (*_types(x32), f64, *_types(out32)))  # a float64 scale
    ptx = gpu_compile.compile_kernel(bodies.typed_sum, (*_types(x32), f32, *_types(out32)))
    assert gpu_compile.float64_instructions(ptx) == [] and "fma.rn.f32" in ptx
    ptx = gpu_compile.compile_kernel(bodies.declared_sum, (*_types(x32), f32, *_types(out32)))
    assert gpu_compile.float64_instructions(ptx)  # it does compute in float64, as declared
    gpu_compile.compile_kernel(bodies.promoting_sum, (*_types(x64), f64, *_types(out64)))
    for kernel in (bodies.promoting_sum, bodies.typed_sum, bodies.declared_sum):
        out = np.zeros(4, np.float32)
        kernel(None, 4, x32, np.float32(0.5), out)
        np.testing.assert_array_equal(out, x32.sum(axis=1) * 0.5)


def test_float64_instructions_skip_parameter_loads_and_narrowing():
    ptx = """
    .param .f64 k_param_1,
    .reg .f64 %fd<3>;
    ld.param.f64 %fd1, [k_param_1];
    cvt.rn.f32.f64 %f1, %fd1;
    fma.rn.f32 %f2, %f1, %f3, %f4;
    cvt.f64.f32 %fd2, %f2;
    add.f64 %fd3, %fd2, %fd1;
    """
    assert gpu_compile.float64_instructions(ptx) == ["cvt.f64.f32", "add.f64"]


@pytest.mark.parametrize("ids", [numba.int64[::1], numba.float64[::1]], ids=["int64 ids", "float64 ids"])
def test_the_prefetching_row_kernels_compile_for_cuda(ids):
    """The embedding gather and the lazy optimizer updates prefetch the rows that ids pick
    (``prefetch_row``) on the cpu; the same bodies compile for CUDA, where it does nothing,
    with integer and float ids alike."""
    from sparse_ops.kernels import nn, optimizer

    words = numba.uint64[:, ::1]
    assert ".entry" in gpu_compile.compile_kernel(nn.gather_row, (ids, words, words))
    f64 = numba.float64[:, ::1]  # (the updates compute in float64 by design: their float64 variant)
    assert ".entry" in gpu_compile.compile_kernel(
        optimizer.adam_row, (f64, numba.int64[::1], f64, f64, f64, *(numba.float64,) * 7))
