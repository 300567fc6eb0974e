"""A C library that breaks its contract in one way per call (tests/hostile/clib/hostile.c):
each fault is refused before anything reads the memory, naming the op, the library and what
was wrong; the process, the table and autograd work after it. Each case runs in a fresh
process: a crash is a failed case."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from _subprocess import run_case
from sparse_ops.sdk.cbuild import c_compiler, compile_library

pytestmark = pytest.mark.skipif(c_compiler() is None, reason="no C compiler")
SOURCE = Path(__file__).resolve().parent / "clib" / "hostile.c"


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("hostile") / "libhostile.so"
    compile_library([SOURCE], out, flags=["-Wall", "-Werror", "-Wno-unused-parameter"])
    return out


_CASE = """
import json
import numpy as np
import scipy.sparse as sp
import sparse_ops as so
so.library.load({lib!r})
m = sp.random(4, 6, density=0.5, format="csr", random_state=0)
m.sort_indices()
x = so.csr_matrix((m.data, m.indices.astype(np.int64), m.indptr.astype(np.int64)), shape=m.shape)
said = None
try:
    y = so.ops.h_copy(x, fault={fault})
    y.check_format()
    said = {{"ok": bool(np.array_equal(y.asnumpy(), m.toarray()))}}
except Exception as exc:
    said = {{"error": type(exc).__name__, "message": str(exc)}}
# the process, the table and autograd still work
w = so.array(np.ones((6, 2)))
w.attach_grad()
with so.autograd.record():
    loss = so.sum(so.dot(x, w))
loss.backward()
assert np.allclose(w.grad.asnumpy(), np.repeat(m.sum(axis=0).T, 2, axis=1))
print(json.dumps(said))
"""

FAULTS = {
    1: "returned SO_OK without allocating sparse output 0 ('out')",
    2: "csr column index 1099511627776 at position 0 is out of range [0, 6)",
    3: "csr column index -3 at position 0 is out of range [0, 6)",
    4: "csr indptr must be non-decreasing",
    5: "csr column indices must be sorted and unique within each row: unsorted",
    6: "ctx->workspace called, but the op does not declare SO_RESOURCE_WORKSPACE",
    7: "output 0 of shape (4611686018427387904, 4611686018427387904) (float64, csr) from the op's shape rule "
       "cannot be allocated",
    8: "unknown storage type",
    9: "negative nnz -5 for output 0",
    10: "returned status 12345",
    11: "infer_shape gave output 0 the negative shape (-5, 6)",
    12: "ctx->alloc_output(output=0, nnz=25) failed: cannot allocate 25 stored values for a csr output of shape "
        "(4, 6): it has 24 entries",
    13: "ctx->alloc_output(output=0, nnz=12) failed: output 0 was already allocated (alloc_output is called once "
        "per output)",
}


def test_the_honest_call_is_a_copy(library):
    r = run_case(_CASE.format(lib=str(library), fault=0))
    assert r["outcome"] == "returned", r
    assert json.loads(r["stdout"].strip().splitlines()[-1]) == {"ok": True}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_each_broken_contract_is_refused_naming_op_library_and_fault(library, fault):
    r = run_case(_CASE.format(lib=str(library), fault=fault))
    assert r["outcome"] == "returned", (fault, r)  # no crash, and the process still works
    said = json.loads(r["stdout"].strip().splitlines()[-1])
    assert "error" in said, (fault, said)
    message = said["message"]
    assert said["error"] in ("OperatorError", "InferenceError"), (fault, said)
    assert "h_copy" in message and "hostile" in message, (fault, message)
    assert FAULTS[fault] in message, (fault, message)


_NDIM_CASE = """
import json
import numpy as np
import sparse_ops as so
so.library.load({lib!r})
eight = np.arange(2 * 3 * 2, dtype=np.float64).reshape(2, 1, 1, 1, 1, 1, 3, 2)
said = {{"eight": bool(np.array_equal(so.ops.h_scale(so.array(eight)).asnumpy(), 2 * eight))}}
try:
    so.ops.h_scale(so.array(eight.reshape(2, 1, 1, 1, 1, 1, 1, 3, 2)))
except Exception as exc:
    said["error"], said["message"] = type(exc).__name__, str(exc)
print(json.dumps(said))
"""


def test_arrays_beyond_the_headers_dimensions_never_reach_a_kernel(library):
    """An so_array holds SO_MAX_NDIM (8) sizes: a 9-d input of an op with no shape rule of its
    own is refused before the kernel, which would read the sizes of the first 8 only."""
    r = run_case(_NDIM_CASE.format(lib=str(library)))
    assert r["outcome"] == "returned", r
    said = json.loads(r["stdout"].strip().splitlines()[-1])
    assert said["eight"] is True and said["error"] == "OperatorError", said
    assert said["message"].startswith("operator 'h_scale' (library ") and "libhostile" in said["message"], said
    assert "C ops take arrays of at most 8 dimensions, got input 0 of shape (2, 1, 1, 1, 1, 1, 1, 3, 2)" \
        in said["message"], said
