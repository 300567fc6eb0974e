"""What a cache hit no longer pays keeps working: numba's start imports SciPy's BLAS modules
without the ``scipy.linalg`` package (numba kernels calling BLAS and a later ``import
scipy.linalg`` still work), and numba's scan of extension entry points is skipped only when
no distribution declares one (a declared ``numba_extensions`` init still runs). Each check
runs in a fresh interpreter: they are about what a process imports first."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np


def _fresh(code: str, env: dict | None = None) -> dict:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                         env=env, timeout=600)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_first_dot_does_not_import_scipy_linalg_and_blas_kernels_still_work():
    result = _fresh("""
        import json, sys, numpy as np, sparse_ops as so
        a = so.csr_matrix(np.array([[1.0, 0.0, 2.0], [0.0, 0.0, 0.0]], np.float32))
        y = so.dot(a, so.array(np.ones((3, 2), np.float32))).asnumpy().tolist()
        linalg_after_dot = "scipy.linalg" in sys.modules
        import numba

        @numba.njit
        def matmul(x, w):
            return np.dot(x, w)  # BLAS through scipy.linalg.cython_blas

        m = np.arange(6.0).reshape(2, 3)
        z = matmul(m, m.T).tolist()
        import scipy.linalg
        print(json.dumps({"y": y, "linalg_after_dot": linalg_after_dot, "z": z,
                          "solve": scipy.linalg.solve(np.eye(2) * 2, np.ones(2)).tolist(),
                          "blas": hasattr(scipy.linalg.cython_blas, "__pyx_capi__")}))
    """)
    assert result["y"] == [[3.0, 3.0], [0.0, 0.0]]
    assert result["linalg_after_dot"] is False
    m = np.arange(6.0).reshape(2, 3)
    np.testing.assert_allclose(result["z"], m @ m.T)
    assert result["solve"] == [0.5, 0.5] and result["blas"] is True


def test_scipy_linalg_imported_first_is_left_alone():
    result = _fresh("""
        import json, sys, scipy.linalg, numpy as np, sparse_ops as so
        before = sys.modules["scipy.linalg"]
        a = so.csr_matrix(np.array([[1.0, 0.0], [0.0, 2.0]]))
        y = so.dot(a, so.array(np.ones((2, 1)))).asnumpy().tolist()
        print(json.dumps({"y": y, "same": sys.modules["scipy.linalg"] is before,
                          "blas": sys.modules["scipy.linalg.cython_blas"] is scipy.linalg.cython_blas}))
    """)
    assert result == {"y": [[1.0], [2.0]], "same": True, "blas": True}


def test_numba_extension_entry_points_still_run(tmp_path):
    (tmp_path / "fake_numba_ext.py").write_text("import os\n\ndef init():\n    os.environ['FAKE_EXT_RAN'] = '1'\n")
    info = tmp_path / "fake_numba_ext-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-numba-ext\nVersion: 1.0\n\n")
    (info / "entry_points.txt").write_text("[numba_extensions]\ninit = fake_numba_ext:init\n")
    code = """
        import json, os, numpy as np, sparse_ops as so
        from numba.core import entrypoints
        a = so.csr_matrix(np.array([[1.0, 0.0], [0.0, 2.0]]))
        y = so.dot(a, so.array(np.ones((2, 1)))).asnumpy().tolist()
        print(json.dumps({"y": y, "ran": os.environ.get("FAKE_EXT_RAN"), "done": entrypoints._already_initialized}))
    """
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    assert _fresh(code, env) == {"y": [[1.0], [2.0]], "ran": "1", "done": True}
    without = _fresh(code)  # no extension installed: numba's own scan is skipped, nothing runs
    assert without == {"y": [[1.0], [2.0]], "ran": None, "done": True}


def _exit_report(env: dict) -> subprocess.CompletedProcess:
    # a handler registered before sparse_ops loads numba runs after its exit handler (LIFO)
    code = textwrap.dedent("""
        import atexit, gc, os, sys
        atexit.register(lambda: os.write(1, f"frozen={gc.get_freeze_count() > 0}\\n".encode()))
        import numpy as np, sparse_ops as so
        a = so.csr_matrix(np.eye(3, dtype=np.float32))
        print("sum", float(so.dot(a, so.array(np.ones((3, 2), np.float32))).asnumpy().sum()))
        atexit.register(lambda: os.write(1, b"later handler ran\\n"))
    """)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)


def test_exit_freezes_the_heap_unless_switched_off():
    """At exit the objects numba built are frozen before Python's final collections
    (settings.FAST_EXIT); handlers registered later still run, and SPARSE_OPS_FAST_EXIT=0
    keeps the full collection."""
    env = {k: v for k, v in os.environ.items() if k != "SPARSE_OPS_FAST_EXIT"}
    on = _exit_report(env)
    assert on.returncode == 0, on.stderr
    assert on.stdout.splitlines() == ["sum 6.0", "later handler ran", "frozen=True"]
    off = _exit_report({**env, "SPARSE_OPS_FAST_EXIT": "0"})
    assert off.returncode == 0, off.stderr
    assert off.stdout.splitlines() == ["sum 6.0", "later handler ran", "frozen=False"]
