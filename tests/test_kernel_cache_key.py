"""numba's disk cache of the project's kernels is keyed on every kernel source
(``sparse_ops/_numba_env.py``): after an edit of a helper module that a kernel inlines,
a warm cache must not run the old machine code.

The real thing, in subprocesses: a copy of the package (laid out as installed:
``sparse_ops/``, ``sparse_ops/sdk``, ``sparse_ops/cuda``) is imported ahead of the working
tree, csr @ dense runs (``sdk/csr_cpu.csr_dense_rows``, which inlines
``kernels/chunks.py``'s chunk code), and ``kernels/chunks.py`` of the copy is then edited
so that every product is doubled. numba's own cache index checks only ``csr_cpu.py``
(unchanged), so before the fix the next process loaded the old code and printed the old
product.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import sparse_ops

ROOT = Path(__file__).resolve().parents[1]

PROBE = r"""
import json, sys
import numpy as np
import sparse_ops as so
from sparse_ops import _numba_env
from sparse_ops.sdk.csr_cpu import csr_dense_rows

dense = np.array([[1.0, 2.0, 0.0], [0.0, 0.0, 0.0], [3.0, 4.0, 5.0], [0.0, 6.0, 0.0]])
a = so.csr_matrix(dense)
b = so.array(np.arange(12, dtype=np.float64).reshape(3, 4) + 1.0)  # rows of 32 bytes: the chunk path
y = so.dot(a, b).asnumpy()
stats = csr_dense_rows.stats
print(json.dumps({"y": y.tolist(), "file": so.__file__, "dir": _numba_env.kernel_cache_dir(),
                  "cache_path": stats.cache_path, "hits": sum(stats.cache_hits.values()),
                  "misses": sum(stats.cache_misses.values())}))
"""
DENSE = np.array([[1.0, 2.0, 0.0], [0.0, 0.0, 0.0], [3.0, 4.0, 5.0], [0.0, 6.0, 0.0]])
EXPECTED = DENSE @ (np.arange(12, dtype=np.float64).reshape(3, 4) + 1.0)

# appended to the copy's kernels/chunks.py: every chunk product b * data is taken twice
DOUBLE_PRODUCTS = """

# (edited by tests/test_kernel_cache_key.py: every product doubled)
_original_muladd = _Codegen.muladd


def _doubled_muladd(self, a, b, c):
    return _original_muladd(self, a, self.add(b, b), c)


_Codegen.muladd = _doubled_muladd
"""


def _copy_package(dest: Path) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", "*.nbi", "*.nbc", "*.pyc")
    site = dest / "site"
    pkg = Path(sparse_ops.__file__).resolve().parent
    shutil.copytree(pkg, site / "sparse_ops", ignore=ignore)
    from sparse_ops import _numba_env

    dirs = _numba_env.package_dirs()
    for name, sub in (("sparse_ops.sdk", "sdk"), ("sparse_ops.cuda", "cuda")):
        if name in dirs and not (site / "sparse_ops" / sub).exists():
            shutil.copytree(dirs[name], site / "sparse_ops" / sub, ignore=ignore)
    return site


def _run(site: Path, xdg: Path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("NUMBA_CACHE_DIR", "SPARSE_OPS_BOUNDSCHECK", "SPARSE_OPS_BOUNDSCHECK_CACHE_DIR",
                        "NUMBA_CACHE_LOCATOR_CLASSES", "NUMBA_DISABLE_JIT")}
    env.update(PYTHONPATH=str(site), XDG_CACHE_HOME=str(xdg), SPARSE_OPS_DISABLE_PLUGIN_AUTOLOAD="1")
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=600,
                          cwd=str(site.parent))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["file"].startswith(str(site)), f"the copy was not imported: {out['file']}"
    return out


@pytest.mark.slow
def test_editing_an_inlined_helper_module_gives_fresh_machine_code(tmp_path: Path):
    site, xdg = _copy_package(tmp_path), tmp_path / "xdg"

    first = _run(site, xdg)
    np.testing.assert_array_equal(first["y"], EXPECTED)
    assert first["misses"] >= 1 and first["hits"] == 0
    assert first["dir"].startswith(str(xdg / "sparse_ops" / "numba-kernels-"))
    assert first["cache_path"].startswith(first["dir"]), "the kernel is cached in the fingerprinted folder"
    assert any(Path(first["dir"]).rglob("*csr_dense_rows*.nbi"))

    warm = _run(site, xdg)  # the warm cache is used while nothing changed
    assert warm["dir"] == first["dir"] and warm["hits"] >= 1 and warm["misses"] == 0
    np.testing.assert_array_equal(warm["y"], EXPECTED)

    chunks = site / "sparse_ops" / "kernels" / "chunks.py"
    original = chunks.read_text()
    chunks.write_text(original + DOUBLE_PRODUCTS)
    edited = _run(site, xdg)
    assert edited["dir"] != first["dir"], "an edit of kernels/chunks.py must give another cache folder"
    assert edited["misses"] >= 1 and edited["hits"] == 0, "compiled afresh, not loaded from the old cache"
    np.testing.assert_array_equal(edited["y"], 2 * EXPECTED)  # the new code runs

    chunks.write_text(original)  # back to the first source: its cache folder is found again
    back = _run(site, xdg)
    assert back["dir"] == first["dir"] and back["hits"] >= 1 and back["misses"] == 0
    np.testing.assert_array_equal(back["y"], EXPECTED)


def test_fingerprint_covers_every_kernel_module(tmp_path: Path):
    """The hashed files include the modules kernels inline (chunks, the csr helpers, the
    row-kernel template) and every module of sparse_ops/kernels; one changed byte in any of
    them changes the fingerprint (computed here on a copy, in a subprocess)."""
    from sparse_ops import _numba_env

    files = _numba_env.kernel_source_files()
    names = {os.path.relpath(f, Path(f).parents[1]) for f in files}
    for expected in ("kernels/chunks.py", "kernels/linalg.py", "sdk/csr_cpu.py", "sdk/csr.py", "sdk/groups.py",
                     "sdk/rowkernel.py"):
        assert expected in names, (expected, sorted(names))
    kernels_dir = Path(sparse_ops.__file__).resolve().parent / "kernels"
    assert {str(p.resolve()) for p in kernels_dir.glob("*.py")} <= set(files)

    site = _copy_package(tmp_path)
    code = "from sparse_ops import _numba_env as e; print(e.compute_fingerprint(), e.kernel_fingerprint())"
    env = dict(os.environ, PYTHONPATH=str(site), SPARSE_OPS_DISABLE_PLUGIN_AUTOLOAD="1")

    def fingerprint() -> str:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                             cwd=str(tmp_path))
        assert out.returncode == 0, out.stderr
        a, b = out.stdout.split()
        assert a == b
        return a

    base = fingerprint()
    for rel in ("kernels/chunks.py", "sdk/csr_cpu.py", "sdk/rowkernel.py"):
        path = site / "sparse_ops" / rel
        text = path.read_text()
        path.write_text(text + "\n# one more line\n")
        assert fingerprint() != base, rel
        path.write_text(text)
        assert fingerprint() == base, rel
