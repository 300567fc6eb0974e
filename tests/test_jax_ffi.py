"""The FFI layer of the JAX bridge: our ctypes mirror of XLA's call-frame structs against
the C header jax ships (compiled with the system C compiler), and the native numba cfunc
path: which calls take it, its results, its hand-off of bad input to the Python handler."""
import shutil
import subprocess

import numpy as np
import pytest
import scipy.sparse as sp

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)

import ctypes  # noqa: E402

import jax.numpy as jnp  # noqa: E402
from jax.experimental.sparse import BCSR  # noqa: E402

import sparse_ops.jax as soj  # noqa: E402
import sparse_ops_cookbook  # noqa: E402,F401
from sparse_ops.errors import OperatorError  # noqa: E402
from sparse_ops.jax import ffi, native  # noqa: E402

_FIELDS = {
    "frame.extension_start": "offsetof(XLA_FFI_CallFrame, extension_start)",
    "frame.api": "offsetof(XLA_FFI_CallFrame, api)",
    "frame.stage": "offsetof(XLA_FFI_CallFrame, stage)",
    "frame.args.size": "offsetof(XLA_FFI_CallFrame, args) + offsetof(XLA_FFI_Args, size)",
    "frame.args.args": "offsetof(XLA_FFI_CallFrame, args) + offsetof(XLA_FFI_Args, args)",
    "frame.rets.size": "offsetof(XLA_FFI_CallFrame, rets) + offsetof(XLA_FFI_Rets, size)",
    "frame.rets.rets": "offsetof(XLA_FFI_CallFrame, rets) + offsetof(XLA_FFI_Rets, rets)",
    "buffer.data": "offsetof(XLA_FFI_Buffer, data)",
    "buffer.dims": "offsetof(XLA_FFI_Buffer, dims)",
    # what the Python handler reads by address (ffi.Frame, ffi.BufferSpec)
    "buffer.dtype": "offsetof(XLA_FFI_Buffer, dtype)",
    "buffer.rank": "offsetof(XLA_FFI_Buffer, rank)",
    "frame.attrs.size": "offsetof(XLA_FFI_CallFrame, attrs) + offsetof(XLA_FFI_Attrs, size)",
    "frame.attrs.types": "offsetof(XLA_FFI_CallFrame, attrs) + offsetof(XLA_FFI_Attrs, types)",
    "frame.attrs.attrs": "offsetof(XLA_FFI_CallFrame, attrs) + offsetof(XLA_FFI_Attrs, attrs)",
    "scalar.dtype": "offsetof(XLA_FFI_Scalar, dtype)",
    "scalar.value": "offsetof(XLA_FFI_Scalar, value)",
}
_SIZES = {
    "XLA_FFI_CallFrame": ffi.CallFrame, "XLA_FFI_Buffer": ffi.Buffer, "XLA_FFI_Attrs": ffi.Attrs,
    "XLA_FFI_Error_Create_Args": ffi.ErrorCreateArgs, "XLA_FFI_Metadata": ffi.Metadata,
    "XLA_FFI_Metadata_Extension": ffi.MetadataExtension, "XLA_FFI_Scalar": ffi.Scalar,
    "XLA_FFI_Stream_Get_Args": ffi.StreamGetArgs,
}
_API = {"Error_Create": "XLA_FFI_Error_Create", "Stream_Get": "XLA_FFI_Stream_Get"}


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_ctypes_layout_matches_the_c_header(tmp_path):
    lines = ["#include <stdio.h>", "#include <stddef.h>", '#include "xla/ffi/api/c_api.h"', "int main(void) {"]
    for key, expr in _FIELDS.items():
        lines.append(f'printf("{key} %zu\\n", (size_t)({expr}));')
    for name in _SIZES:
        lines.append(f'printf("size:{name} %zu\\n", sizeof({name}));')
    for field, cname in _API.items():
        lines.append(f'printf("api:{field} %zu\\n", offsetof(XLA_FFI_Api, {cname}));')
    lines += ['printf("stage %d\\n", (int)XLA_FFI_ExecutionStage_EXECUTE);',
              'printf("meta %d\\n", (int)XLA_FFI_Extension_Metadata);',
              'printf("major %d minor %d\\n", XLA_FFI_API_MAJOR, XLA_FFI_API_MINOR);', "return 0; }"]
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines))
    exe = tmp_path / "layout"
    subprocess.run(["cc", "-I", jax.ffi.include_dir(), str(src), "-o", str(exe)], check=True)
    out = dict(line.rsplit(" ", 1) for line in subprocess.run([str(exe)], capture_output=True, text=True,
                                                               check=True).stdout.splitlines()
               if not line.startswith("major"))
    for key in _FIELDS:
        assert ffi.OFFSETS[key] == int(out[key]), key
    for name, struct in _SIZES.items():
        assert ctypes.sizeof(struct) == int(out[f"size:{name}"]), name
    for field in _API:
        assert getattr(ffi.Api, field).offset == int(out[f"api:{field}"]), field
    assert int(out["stage"]) == ffi.STAGE_EXECUTE and int(out["meta"]) == ffi.EXTENSION_METADATA


def _csr(dtype, index_dtype, seed=0, rows=30, cols=20):
    m = sp.random(rows, cols, density=0.2, format="csr", dtype=np.float64, random_state=seed).astype(dtype)
    return m, BCSR((jnp.asarray(m.data), jnp.asarray(m.indices.astype(index_dtype)),
                    jnp.asarray(m.indptr.astype(index_dtype))), shape=m.shape)


@pytest.mark.parametrize("dtype,index_dtype", [(np.float32, np.int32), (np.float64, np.int64)])
def test_csr_times_dense_takes_the_native_cfunc(dtype, index_dtype):
    m, a = _csr(dtype, index_dtype)
    x = np.random.default_rng(1).standard_normal((20, 5)).astype(dtype)
    cases = [("csr_spmm", {}, m @ x), ("dot", {}, m @ x),
             ("embedding_bag", {"mode": "mean"}, (m @ x) / np.maximum(np.diff(m.indptr), 1)[:, None]),
             ("embedding_bag", {"mode": "sum"}, m @ x)]
    for name, kw, ref in cases if dtype == np.float64 else cases[:1]:  # each variant compiles a cfunc
        e = soj.explain(name, a, x, **kw)
        assert e["handler"].startswith("native: numba cfunc") and e["ffi_target"].startswith("sparse_ops_native")
        got = jax.jit(lambda a, x: soj.op(name)(a, x, **kw))(a, x)
        assert got.dtype == dtype
        np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-5 if dtype == np.float32 else 1e-12)
        assert e["ffi_target"] in str(jax.jit(lambda a, x: soj.op(name)(a, x, **kw)).lower(a, x).as_text())
    # other calls with sparse storage take the Python handler (dense built-ins are lowered to jnp)
    assert soj.explain("dot", a, jnp.ones((6, 20), dtype), transpose_b=True)["handler"].startswith("python")
    assert soj.explain("relu", a)["handler"].startswith("python")
    assert soj.explain("relu", jnp.ones(3))["handler"].startswith("lowered")


def test_the_native_path_hands_bad_structure_to_the_python_handler():
    m, a = _csr(np.float64, np.int64, seed=2)
    x = np.ones((20, 3))
    bad_col = BCSR((a.data, a.indices.at[1].set(-1), a.indptr), shape=a.shape)
    bad_ptr = BCSR((a.data, a.indices, a.indptr.at[3].set(10 ** 6)), shape=a.shape)
    row = int(np.argmax(np.diff(m.indptr) >= 2))  # a row of two or more values
    first = int(m.indptr[row])
    # declared sorted and unique (BCSR's flags) but not: refused (undeclared ones are sorted and
    # summed on the way in, tests/test_jax_habits.py)
    declared = {"shape": a.shape, "indices_sorted": True, "unique_indices": True}
    swapped = BCSR((a.data, a.indices.at[first].set(a.indices[first + 1]).at[first + 1].set(a.indices[first]),
                    a.indptr), **declared)
    repeated = BCSR((a.data, a.indices.at[first + 1].set(a.indices[first]), a.indptr), **declared)
    for bad, what in ((bad_col, "out of range"), (bad_ptr, "indptr"), (swapped, "sorted and unique"),
                      (repeated, "sorted and unique")):
        with pytest.raises(Exception, match=rf"sparse_ops.jax.ops.csr_spmm: .*argument 'A' \(csr\).*{what}"):
            jax.block_until_ready(jax.jit(soj.ops.csr_spmm)(bad, x))
    with pytest.raises(Exception, match="sorted and unique"):  # under jax.grad too
        jax.block_until_ready(jax.jit(jax.grad(lambda x: soj.ops.csr_spmm(swapped, x).sum()))(x))
    np.testing.assert_allclose(np.asarray(jax.jit(soj.ops.csr_spmm)(a, x)), m @ x, rtol=1e-12)


def test_native_and_python_paths_agree_and_grad_works_after_native():
    m, a = _csr(np.float64, np.int64, seed=3)
    x = np.random.default_rng(4).standard_normal((20, 4))
    fast = np.asarray(jax.jit(soj.ops.csr_spmm)(a, x))
    native.disabled(True)
    try:
        assert soj.explain("csr_spmm", a, x)["handler"].startswith("python")
        slow = np.asarray(jax.jit(lambda a, x: soj.ops.csr_spmm(a, x))(a, x))
    finally:
        native.disabled(False)
    # the native cfunc runs the op's own cpu kernel (sdk/csr_cpu.py): the same bits
    np.testing.assert_array_equal(fast, slow)
    g = jax.grad(lambda x: jnp.sum(soj.ops.csr_spmm(a, x) ** 2))(x)
    np.testing.assert_allclose(np.asarray(g), m.T @ (2 * (m @ x)), rtol=1e-12)


def test_native_parallel_driver_forward_and_gradient():
    """A product big enough for the parallel driver (``parallel_worth``) in the cfunc, and
    X's gradient (the gradient rule, through the Python handler): SciPy's values, and the
    same bits as the op's Python path."""
    from sparse_ops.sdk.rowkernel import parallel_worth

    m, a = _csr(np.float64, np.int32, seed=6, rows=3000, cols=400)
    x = np.random.default_rng(7).standard_normal((400, 64))
    assert parallel_worth(m.nnz * 64)
    assert soj.explain("csr_spmm", a, x)["handler"].startswith("native")
    fast = np.asarray(jax.jit(soj.ops.csr_spmm)(a, x))
    np.testing.assert_allclose(fast, m @ x, rtol=1e-12, atol=1e-12)
    g = np.asarray(jax.jit(jax.grad(lambda x: jnp.sum(soj.ops.csr_spmm(a, x) ** 2)))(x))
    np.testing.assert_allclose(g, m.T @ (2 * (m @ x)), rtol=1e-11, atol=1e-11)
    native.disabled(True)
    try:
        slow = np.asarray(jax.jit(lambda a, x: soj.ops.csr_spmm(a, x))(a, x))
    finally:
        native.disabled(False)
    np.testing.assert_array_equal(fast, slow)


_SERVE_ONCE = """
import json, sys
import numpy as np, scipy.sparse as sp, jax
from jax.experimental.sparse import BCSR
import sparse_ops.jax as soj, sparse_ops_cookbook
m = sp.random(30, 20, density=0.2, format="csr", dtype=np.float32, random_state=0)
a = BCSR((m.data, m.indices, m.indptr), shape=m.shape)
y = np.asarray(jax.jit(soj.ops.csr_spmm)(a, np.ones((20, 3), np.float32)))
from sparse_ops.jax import native_kernel
stats = native_kernel.serve.stats
print(json.dumps({"close": bool(np.allclose(y, m @ np.ones((20, 3), np.float32), rtol=1e-6)),
                  "hits": sum(stats.cache_hits.values()), "misses": sum(stats.cache_misses.values())}))
"""


def test_the_native_kernel_is_compiled_once_and_loaded_from_numbas_cache(tmp_path):
    """A fresh process finds the native handler's compiled body in numba's on-disk cache
    (the per-process cfunc around it is a call and a fallback)."""
    import json
    import os
    import sys

    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    runs = [json.loads(subprocess.run([sys.executable, "-c", _SERVE_ONCE], env=env, capture_output=True, text=True,
                                      check=True).stdout.splitlines()[-1]) for _ in range(2)]
    assert all(r["close"] for r in runs)
    assert runs[0]["misses"] == 1 and runs[0]["hits"] == 0
    assert runs[1]["hits"] == 1 and runs[1]["misses"] == 0


_SDK_PARALLEL = """
import numpy as np, scipy.sparse as sp
from sparse_ops.sdk import csr_cpu
m = sp.random(3000, 400, density=0.05, format="csr", dtype=np.float32, random_state=0)
out = np.empty((3000, 8), np.float32)
csr_cpu.csr_dense(m.indptr, m.indices, m.data, np.ones((400, 8), np.float32), out, True)
"""

_SERVE_VARIANTS = """
import sys
import numpy as np
from sparse_ops.jax import native_kernel as nk
for parallel in sys.argv[1:]:
    nk.serve.compile(nk.signature(np.dtype("float32"), np.dtype("int32"), parallel == "1", False))
print("ok")
"""


def test_cached_variants_load_in_any_order(tmp_path):
    """The parallel variant compiled in a process that took the cpu kernel's parallel
    driver from numba's cache, then both variants loaded parallel first: numba's threads
    must be running before they load (else LLVM aborts the process)."""
    import os
    import sys

    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    run = lambda *args: subprocess.run([sys.executable, "-c", *args], env=env, capture_output=True, text=True)
    for args in ((_SDK_PARALLEL,), (_SERVE_VARIANTS, "1"), (_SERVE_VARIANTS, "0"), (_SERVE_VARIANTS, "1", "0")):
        done = run(*args)
        assert done.returncode == 0, (args[1:], done.returncode, done.stderr[-500:])
    assert done.stdout.strip() == "ok"


def test_the_gpu_check_script_passes_on_the_cpu_device():
    """benchmarks/jax_gpu_check.py (run by gpu_check.sh on a gpu) checks what it claims:
    here on jax's cpu device, where its every assertion holds too."""
    import os
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    run = subprocess.run([sys.executable, "-m", "benchmarks.jax_gpu_check", "--cpu"], cwd=root, capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(root)})
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert sum(line.startswith("ok   ") for line in lines) == 5 and lines[-1].startswith("time csr_spmm")
    assert "refused naming the op: INVALID_ARGUMENT: sparse_ops.jax.ops.csr_spmm" in run.stdout


def test_warmup_jax_compiles_the_native_handlers_a_fresh_process_then_loads(tmp_path):
    """``sparse-ops warmup --jax`` compiles every variant of the native handler's body an op
    takes (index dtypes, serial and parallel drivers, its plain or row-mean form); the next
    process's first bridged call loads it from the cache and compiles nothing of it."""
    import json
    import os
    import sys

    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    run = subprocess.run([sys.executable, "-m", "sparse_ops", "warmup", "--jax", "--ops", "csr_spmm", "--dtypes",
                          "float32"], env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr
    assert "ok   jax native handlers: 4 variants" in run.stdout
    assert "warmed 1 of 1 operators in float32 and the jax native handlers" in run.stdout
    after = json.loads(subprocess.run([sys.executable, "-c", _SERVE_ONCE], env=env, capture_output=True, text=True,
                                      check=True).stdout.splitlines()[-1])
    assert after["close"] and after["hits"] == 1 and after["misses"] == 0


def test_native_warm_compiles_only_what_the_native_path_serves():
    from sparse_ops.jax import native

    assert native.warm(["abs", "elemwise_add"]) == []
    assert native.warm("csr_spmm", "float32") == native.warm(["csr_spmm"], ["float32"])  # one name, one dtype
    assert len(native.warm("csr_spmm", "float32")) == 4
    with pytest.raises(OperatorError, match="no operator named 'csr_spm'"):
        native.warm(["csr_spm"])
    # sum bags are plain products, mean bags the row-mean variant
    assert native.warm(["embedding_bag"], ["float64", "int32"]) == [
        ("float64", i, p, mean) for mean in (False, True) for i in ("int32", "int64") for p in (False, True)]
    # dot's kernel for csr @ dense is marked: its plain form (no transposes) only
    assert native.warm("dot", "float32") == native.warm("csr_spmm", "float32")


def test_the_gpu_handlers_pool_cap_is_a_fraction_of_the_device():
    """The gpu handlers allocate from a capped pool per device (beside XLA's own reservation):
    a tenth of the device by default, ``SPARSE_OPS_JAX_GPU_POOL_FRACTION`` otherwise, and a
    setting that is not a fraction in (0, 1] is refused naming the variable."""
    from sparse_ops.jax import handlers

    total = 80 << 30
    assert handlers.pool_limit(total, None) == handlers.pool_limit(total, " ") == total // 10
    assert handlers.pool_limit(total, "0.25") == total // 4 and handlers.pool_limit(total, "1") == total
    for bad in ("0", "1.5", "-0.1", "ten percent"):
        with pytest.raises(soj.JaxBridgeError, match=f"SPARSE_OPS_JAX_GPU_POOL_FRACTION={bad!r}: expected a fraction"):
            handlers.pool_limit(total, bad)
