"""The MXNet test runner's own rules, without MXNet's files: the import-line rewriting
(``tools/mxnet_source.py``), the skip rules with their reasons, and the NumPy 1 aliases of
the generated conftest."""
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[1] / "tools"


@pytest.fixture(scope="module")
def tools():
    sys.path.insert(0, str(TOOLS))
    try:
        import mxnet_source
        import run_mxnet_tests
    finally:
        sys.path.remove(str(TOOLS))
    return mxnet_source, run_mxnet_tests


@pytest.mark.parametrize("line, expected", [
    ("import mxnet as mx\n", "import sparse_ops.compat.mxnet as mx\n"),
    ("    import mxnet as mx  # here\n", "    import sparse_ops.compat.mxnet as mx  # here\n"),
    ("from mxnet import gluon, nd\n", "from sparse_ops.compat.mxnet import gluon, nd\n"),
    ("from mxnet.test_utils import *\n", "from sparse_ops.compat.mxnet.test_utils import *\n"),
    ("import mxnet.ndarray as nd\n", "import sparse_ops.compat.mxnet.ndarray as nd\n"),
    ("import mxnet.autograd\n", "import sparse_ops.compat.mxnet as mxnet, sparse_ops.compat.mxnet.autograd\n"),
    ("import mxnet\n", "import sparse_ops.compat.mxnet as mxnet\n"),
    ("  import mxnet  # bare\n", "  import sparse_ops.compat.mxnet as mxnet  # bare\n"),
    ("import mxnet_extra as mx\n", "import mxnet_extra as mx\n"),
    ("x = 'import mxnet as mx'\n", "x = 'import mxnet as mx'\n"),
])
def test_only_mxnet_import_lines_are_rewritten(tools, line, expected):
    out, n = tools[0].rewrite_imports(line)
    assert out == expected and n == (out != line)


def test_rewritten_import_of_a_submodule_binds_mxnet_to_the_face(tools):
    code, _ = tools[0].rewrite_imports("import mxnet.autograd\n")
    ns: dict = {}
    exec(code, ns)
    import sparse_ops.compat.mxnet as face

    assert ns["mxnet"] is face and ns["mxnet"].autograd.record is face.autograd.record


def test_skip_rules_name_what_the_face_lacks(tools):
    src = '''
def test_sym():
    x = mx.sym.Variable("x")

def test_mod():
    m = mx.mod.Module(None)

def test_gluon():
    loss = gluon.loss.L1Loss()

def test_rec():
    it = mx.io.ImageRecordIter(path_imgrec="x.rec")

def test_legacy():
    mx.nd.load("legacy_ndarray.v0")

def test_state_bytes():
    state = {'handle': bytearray(b"\\x00")}

def test_plain():
    x = mx.nd.ones((2,))
'''
    reasons = tools[1].skipped_tests(src)
    assert set(reasons) == {"test_sym", "test_mod", "test_gluon", "test_rec", "test_legacy", "test_state_bytes"}
    assert "Symbol" in reasons["test_sym"] and "Module" in reasons["test_mod"]
    assert "Gluon" in reasons["test_gluon"] and "RecordIO" in reasons["test_rec"]
    assert "binary" in reasons["test_legacy"] and "binary" in reasons["test_state_bytes"]


def test_generated_conftest_restores_numpy_1_aliases(tools):
    import numpy as np

    had = {a for a in ("NaN", "Inf", "NINF", "PINF") if a in np.__dict__}
    try:
        exec(compile(tools[1].CONFTEST.format(skipped={}, only={}), "conftest.py", "exec"), {})
        assert np.NaN != np.NaN and np.Inf == np.inf and np.NINF == -np.inf
    finally:
        for alias in {"NaN", "Inf", "NINF", "PINF"} - had:
            np.__dict__.pop(alias, None)
