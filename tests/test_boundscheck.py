"""The debug mode ``SPARSE_OPS_BOUNDSCHECK=1``: kernels compiled with numba's bounds checks,
cached apart from the normal ones (numba's cache key ignores the flag).

Each run is a child process with its own environment: a kernel module written to a
temporary folder, numba's caches in temporary folders, nothing shared with other tests.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

KERNELS = '''
import numba
from sparse_ops.kernels import jit
from sparse_ops.sdk.rowkernel import row_kernel


@jit()
def ours(a, i):
    return a[i]


@numba.njit(cache=True)
def plain(a, i):  # a plugin's own numba kernel, not using our jit
    return a[i]


@row_kernel
def rows(r, a, out):  # the SDK's one-body form: its generated cpu driver
    out[r] = a[r + 10]
'''

RUN = '''
import json, sys
import numpy as np
import sparse_ops  # first, as plugins do: it sets numba's environment for the mode
sys.path.insert(0, sys.argv[1])
import oob_kernels

big = np.arange(20.0)
a = big[:10]  # a[10] is big[10]: an unchecked read past a's end stays in memory we own
out = {}
for name in ("ours", "plain"):
    fn = getattr(oob_kernels, name)
    try:
        out[name] = float(fn(a, 10))
    except IndexError as exc:
        out[name] = "IndexError: " + str(exc)
    out[name + "_cache_hits"] = sum(fn.stats.cache_hits.values())
result = np.zeros(1)
try:
    oob_kernels.rows(None, 1, a, result)
    out["rows"] = float(result[0])
except IndexError as exc:
    out["rows"] = "IndexError: " + str(exc)
out["rows_cache_hits"] = sum(oob_kernels.rows.drivers().cpu_serial.stats.cache_hits.values())
out["numba_cache_dir"] = __import__("numba").config.CACHE_DIR
print(json.dumps(out))
'''


def _run(tmp: Path, boundscheck: bool, **env: str) -> dict:
    full = {k: v for k, v in os.environ.items()
            if k not in ("NUMBA_CACHE_DIR", "NUMBA_BOUNDSCHECK", "SPARSE_OPS_BOUNDSCHECK",
                         "SPARSE_OPS_BOUNDSCHECK_CACHE_DIR")}
    full.update(XDG_CACHE_HOME=str(tmp / "xdg"), SPARSE_OPS_DISABLE_PLUGIN_AUTOLOAD="1", **env)
    if boundscheck:
        full["SPARSE_OPS_BOUNDSCHECK"] = "1"
    proc = subprocess.run([sys.executable, "-c", RUN, str(tmp / "src")], capture_output=True, text=True,
                          env=full, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def kernels(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "oob_kernels.py").write_text(textwrap.dedent(KERNELS))
    return tmp_path


def test_boundscheck_mode_raises_and_keeps_its_own_cache(kernels: Path):
    normal = _run(kernels, boundscheck=False)
    assert normal["ours"] == normal["plain"] == normal["rows"] == 10.0  # unchecked: read big[10]
    assert normal["numba_cache_dir"] == ""  # numba's default: __pycache__ beside the source

    checked = _run(kernels, boundscheck=True)  # the unchecked code is cached: must not be loaded
    for name in ("ours", "plain", "rows"):
        assert checked[name].startswith("IndexError"), checked
        assert checked[name + "_cache_hits"] == 0
    folder = kernels / "xdg" / "sparse_ops" / "numba-boundscheck"
    assert checked["numba_cache_dir"] == str(folder)
    assert any(folder.rglob("*.nbi")), "the checked kernels are cached in their own folder"

    again = _run(kernels, boundscheck=True)  # ... and loaded from there by the next checked run
    for name in ("ours", "plain", "rows"):
        assert again[name].startswith("IndexError") and again[name + "_cache_hits"] == 1

    after = _run(kernels, boundscheck=False)  # a normal run still gets the fast unchecked code
    for name in ("ours", "plain", "rows"):
        assert after[name] == 10.0 and after[name + "_cache_hits"] == 1


def test_boundscheck_mode_uses_a_subfolder_of_the_users_cache_dir(kernels: Path):
    user = kernels / "user-cache"
    normal = _run(kernels, boundscheck=False, NUMBA_CACHE_DIR=str(user))
    assert normal["ours"] == 10.0 and normal["numba_cache_dir"] == str(user)
    checked = _run(kernels, boundscheck=True, NUMBA_CACHE_DIR=str(user))
    assert checked["ours"].startswith("IndexError") and checked["ours_cache_hits"] == 0
    assert checked["numba_cache_dir"] == str(user / "sparse_ops-boundscheck")
