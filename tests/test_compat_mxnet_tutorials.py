"""MXNet 1.9.1's sparse NDArray tutorials (csr.md, row_sparse.md, the imperative cells of
train.md) run through the MXNet face by ``tools/mxnet_tutorials.py``, with checks of what
MXNet shows after the cells. Needs an MXNet git directory or checkout: set
``SPARSE_OPS_MXNET_SRC`` to it (for example ``/work/.mirror/apache+mxnet/repo``)."""
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = os.environ.get("SPARSE_OPS_MXNET_SRC")


def _tutorials():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import mxnet_tutorials
    finally:
        sys.path.remove(str(ROOT / "tools"))
    return mxnet_tutorials


@pytest.mark.skipif(not SRC, reason="set SPARSE_OPS_MXNET_SRC to an MXNet git directory or checkout "
                                    "(tag 1.9.1) to run MXNet's sparse tutorials")
def test_mxnet_sparse_tutorials_run_through_the_face():
    results = _tutorials().run(Path(SRC), "1.9.1")
    assert [name for name, _, _ in results] == ["csr", "row_sparse", "train"]
    runs = {name: n for name, n, _ in results}
    assert runs["csr"] >= 19 and runs["row_sparse"] >= 21 and runs["train"] >= 1, runs
    failures = [f for _, _, fs in results for f in fs]
    assert not failures, "\n".join(failures)


def test_cells_skip_rules_and_imports_of_skipped_cells():
    """Without MXNet's files: a made-up tutorial shows the skip rules (Symbol, Module, names
    of skipped cells) and that a skipped cell's imports still run."""
    t = _tutorials()
    md = ("```python\nimport mxnet as mx\nimport numpy as np\nx = mx.sym.Variable('x')\n```\n"
          "```python\ny = x + 1\n```\n"
          "```python\nz = mx.nd.array(np.arange(3))\nz\n```\n"
          "```python\nm = mx.mod.Module(symbol=None)\n```\n")
    r = t.run_tutorial("made_up", md)
    assert r.run == 1 and r.failures == []
    assert [n for n, _ in r.skipped] == [1, 2, 4]
    assert "Symbol" in r.skipped[0][1] and "x of skipped cell 1" in r.skipped[1][1] and "Module" in r.skipped[2][1]


def test_a_failing_cell_and_a_failing_check_are_reported(monkeypatch):
    t = _tutorials()
    md = "```python\nimport mxnet as mx\na = mx.nd.ones((2, 2))\na\n```\n```python\n1 / 0\n```\n"

    def wrong(s):
        t._ndarray(s.value, "a", "CSRNDArray", "csr", (2, 2), "float32")

    monkeypatch.setitem(t.CHECKS, "made_up", lambda: {1: ("mx.nd.ones", wrong)})
    r = t.run_tutorial("made_up", md)
    assert r.run == 2
    assert r.failures[0] == "made_up cell 1: a is a NDArray, MXNet gives a CSRNDArray"
    assert r.failures[1].startswith("made_up cell 2: raised ZeroDivisionError")
