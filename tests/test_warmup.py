"""``sparse-ops warmup`` compiles the operators' kernels into numba's on-disk cache: after it,
a fresh process's first call loads the kernel from the cache (numba's dispatcher counts a
cache hit and no miss) instead of compiling it; without it, the same call compiles."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numba
import numpy as np
import pytest

import sparse_ops as so
from sparse_ops import cli
from sparse_ops.warmup import warmup, warmup_op

# A fresh process: one csr (float32 values, int64 indices) @ dense float32, then the cache
# statistics of the serial cpu kernel that call ran (sdk/csr_cpu.py).
PROBE = textwrap.dedent("""
    import json, numpy as np, sparse_ops as so
    from sparse_ops.sdk.csr_cpu import csr_dense_rows
    indptr = np.array([0, 2, 2, 3], np.int64)
    indices = np.array([0, 2, 1], np.int64)
    a = so.csr_matrix((np.array([1.0, 2.0, 3.0], np.float32), indices, indptr), shape=(3, 3))
    y = so.dot(a, so.array(np.arange(6, dtype=np.float32).reshape(3, 2))).asnumpy()
    stats = csr_dense_rows.stats
    print(json.dumps({"hits": sum(stats.cache_hits.values()), "misses": sum(stats.cache_misses.values()),
                      "y": y.tolist()}))
""")
EXPECTED = (np.array([[1, 0, 2], [0, 0, 0], [0, 3, 0]], np.float32) @ np.arange(6, dtype=np.float32).reshape(3, 2))


def _env(cache: Path) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    env.pop("SPARSE_OPS_BOUNDSCHECK_CACHE_DIR", None)
    return env


def _probe(cache: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=_env(cache),
                         timeout=600)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    np.testing.assert_allclose(result["y"], EXPECTED)
    return result


@pytest.fixture(scope="module")
def warmed(tmp_path_factory):
    cache = tmp_path_factory.mktemp("numba-warm")
    run = subprocess.run([sys.executable, "-m", "sparse_ops", "warmup", "--ops", "dot", "--dtypes", "float32"],
                         capture_output=True, text=True, env=_env(cache), timeout=900)
    return cache, run


def test_warmup_cli_reports_what_it_compiled(warmed):
    _, run = warmed
    assert run.returncode == 0, run.stderr
    assert "ok   dot:" in run.stdout
    assert "warmed 1 of 1 operators in float32" in run.stdout


def test_after_warmup_a_fresh_process_loads_the_kernel_from_the_cache(warmed):
    cache, run = warmed
    assert run.returncode == 0, run.stderr
    indexes = list(cache.rglob("*.nbi"))
    assert any("csr_dense_rows" in p.name for p in indexes)
    if numba.config.NUMBA_NUM_THREADS > 1:  # the prange driver large inputs take: warmed too
        assert any("csr_dense_parallel" in p.name for p in indexes)
    result = _probe(cache)
    assert result["hits"] >= 1 and result["misses"] == 0


def test_without_warmup_the_first_call_compiles(tmp_path):
    result = _probe(tmp_path)
    assert result["hits"] == 0 and result["misses"] >= 1


@pytest.fixture
def broken_and_picky(isolated):
    """Two ops of this test: one whose kernel always fails, one that refuses float32."""
    @so.register("_warm_broken")
    class Broken(so.Op):
        @so.kernel()
        def dense(self, ctx, x, y):
            raise RuntimeError("this kernel never works")

        @classmethod
        def samples(cls):
            return [[so.array(np.ones(3))]]

    @so.register("_warm_float64_only")
    class Float64Only(so.Op):
        def infer_type(self, x):
            if x != np.float64:
                raise TypeError(f"_warm_float64_only: x must have dtype float64, got {x}")
            return [x]

        @so.kernel()
        def dense(self, ctx, x, y):
            y[...] = x + 1.0

        @classmethod
        def samples(cls):
            return [[so.array(np.ones(3))]]


def test_a_failing_op_is_named_and_does_not_stop_the_others(broken_and_picky, capsys):
    code = cli.main(["warmup", "--ops", "_warm_broken", "_warm_float64_only", "abs"])
    out, err = capsys.readouterr()
    assert code == 1
    assert "FAIL _warm_broken: OperatorError" in err and "this kernel never works" in err
    assert "ok   _warm_float64_only: 2 calls" in out and "does not take float32" in out
    assert "ok   abs:" in out
    assert "warmed 2 of 3 operators" in out and "failed: _warm_broken" in out


def test_warmup_function_results(broken_and_picky):
    results = {r.name: r for r in warmup(["_warm_broken", "_warm_float64_only"], ["float64"])}
    assert results["_warm_broken"].error is not None and results["_warm_broken"].calls == 0
    assert results["_warm_float64_only"].error is None and results["_warm_float64_only"].calls == 2
    assert results["_warm_float64_only"].skipped == []
    assert warmup_op("no_such_op").error == "OperatorError: no operator named 'no_such_op'"


def test_quiet_prints_nothing_on_success(capsys):
    assert cli.main(["warmup", "--ops", "abs", "--dtypes", "float64", "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert out == "" and err == ""


def test_unknown_op_is_refused(capsys):
    assert cli.main(["warmup", "--ops", "no_such_op"]) == 1
    assert "no operator no_such_op" in capsys.readouterr().err
