"""The test suite does not depend on the order of its files.

``SPARSE_OPS_TEST_ORDER=reverse`` (the repository's ``conftest.py``) runs the files in reverse
order; ``.ci/run`` runs the gpu pass so. Run that way, ``tests/test_compat_mxnet.py`` failed:
a file run before it had looked up ``mx.nd.max``, which ``mx.nd``'s module ``__getattr__``
caches in the module's globals, and ``mx.nd.arange`` called a bare ``max`` (then the
operator, not the builtin: "operator 'max': inputs must be NDArrays, got int").
"""
from __future__ import annotations

import ast
import builtins
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

import sparse_ops.compat.mxnet as mx
from sparse_ops.compat.mxnet.ndarray import _op

ROOT = Path(__file__).resolve().parents[1]
MX_DIR = ROOT / "sparse_ops" / "compat" / "mxnet"


def test_arange_after_builtin_named_operators_were_looked_up():
    for name in ("max", "min", "sum", "abs", "round"):
        getattr(mx.nd, name)  # cached in mx.nd's globals from now on
    np.testing.assert_array_equal(mx.nd.arange(5).asnumpy(), np.arange(5, dtype=np.float32))
    np.testing.assert_array_equal(mx.nd.arange(1, 2, 0.25, repeat=2).asnumpy(),
                                  np.repeat(np.arange(1, 2, 0.25, dtype=np.float32), 2))
    np.testing.assert_array_equal(mx.nd.arange(3, 1).asnumpy(), np.zeros(0, np.float32))  # max(n, 0)


def test_no_mxnet_module_that_caches_operators_in_its_globals_calls_a_shadowable_builtin():
    """Modules whose ``__getattr__`` stores operators in ``globals()`` must call builtins as
    ``_builtins.<name>`` where an operator of that name exists (max, min, sum, abs, ...)."""
    offenders = []
    for path in sorted(MX_DIR.rglob("*.py")):
        source = path.read_text()
        if "globals()[" not in source:
            continue
        tree = ast.parse(source)
        defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        defined |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
        defined |= {a.asname or a.name for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
                    for a in n.names}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and hasattr(builtins, node.id)
                    and node.id not in defined and _op.resolve(node.id) is not None):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.id}")
    assert not offenders, offenders


def _collected(order: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "SPARSE_OPS_TEST_ORDER"}
    if order:
        env["SPARSE_OPS_TEST_ORDER"] = order
    files = ["tests/test_layers.py", "tests/test_alloc.py", "tests/test_validation.py"]
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
                         capture_output=True, text=True, cwd=str(ROOT), env=env, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return [ln for ln in out.stdout.splitlines() if "::" in ln]


def test_reverse_order_option_reverses_the_files_and_keeps_each_files_own_order():
    forward, reverse = _collected(None), _collected("reverse")
    assert sorted(forward) == sorted(reverse) and forward != reverse

    def files(ids: list[str]) -> list[str]:
        return list(dict.fromkeys(i.split("::")[0] for i in ids))

    assert files(reverse) == files(forward)[::-1]
    for f in files(forward):
        assert [i for i in reverse if i.startswith(f + "::")] == [i for i in forward if i.startswith(f + "::")]
    bad = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          "tests/test_alloc.py"], capture_output=True, text=True, cwd=str(ROOT),
                         env={**os.environ, "SPARSE_OPS_TEST_ORDER": "sideways"}, timeout=300)
    assert bad.returncode != 0 and "SPARSE_OPS_TEST_ORDER" in bad.stdout + bad.stderr
