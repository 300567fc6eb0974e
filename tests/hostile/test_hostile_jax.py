"""Hostile JAX arrays and BCSR through the JAX bridge, each in a fresh process (a crash is a
failed case): refused at trace time or as an FFI error naming the op and the argument, and
the bridge still works afterwards."""
from __future__ import annotations

import json

import pytest

from _subprocess import run_case

pytest.importorskip("jax")

_CASE = """
import json, warnings
warnings.simplefilter("ignore")
import numpy as np, jax, jax.numpy as jnp
from jax.experimental.sparse import BCSR
import sparse_ops.jax as soj
ok = np.ones(3, np.float32)
good = (np.ones(3, np.float32), np.array([0, 2, 1], np.int32), np.array([0, 2, 3], np.int32), (2, 3))
args = [{make}]
said = None
try:
    call = soj.ops.{op} if {eager} else jax.jit(lambda *a: soj.ops.{op}(*a))  # tuples with big shapes: eager
    jax.block_until_ready(call(*args))
except Exception as exc:
    said = f"{{type(exc).__name__}}: {{exc}}"
after = np.asarray(jax.jit(soj.ops.sum)(ok))  # the bridge still works
assert float(after) == 3.0
print(json.dumps(said))
"""

_BAD_BCSR = "BCSR((jnp.ones(3), jnp.array({indices}), jnp.array({indptr})), shape=(2, 3))"
# a BCSR declaring its columns sorted and unique (JAX's default declares neither, and is sorted
# and summed on the way in instead)
_DECLARED = ("BCSR((jnp.ones(3), jnp.array({indices}), jnp.array({indptr})), shape=(2, 3), indices_sorted=True, "
             "unique_indices=True)")

CASES = {
    "column past the end": ("sum", _BAD_BCSR.format(indices=[0, 1, 1 << 30], indptr=[0, 2, 3]),
                            "out of range [0, 3)"),
    "negative column": ("sum", _BAD_BCSR.format(indices=[0, -3, 1], indptr=[0, 2, 3]), "csr column index -3"),
    "indptr past the values": ("sum", _BAD_BCSR.format(indices=[0, 1, 2], indptr=[0, 1003, 3]),
                               "non-decreasing"),
    "indptr end past the capacity": ("sum", _BAD_BCSR.format(indices=[0, 1, 2], indptr=[0, 1, 7]),
                                     "indptr[-1] = 7 is outside 0..3"),
    "unsorted columns": ("sum", _DECLARED.format(indices=[1, 0, 2], indptr=[0, 2, 3]), "unsorted index 0 after 1"),
    "repeated columns": ("sum", _DECLARED.format(indices=[1, 1, 2], indptr=[0, 2, 3]), "duplicate index 1"),
    # the native cfunc serves csr @ dense: the same check, the same message
    "native path, column past the end": (
        "csr_spmm", _BAD_BCSR.format(indices=[0, 1, 5], indptr=[0, 2, 3]) + ", jnp.ones((3, 2))",
        "out of range [0, 3)"),
    "int64 indices past int32 with x64 off": (
        "sum", "(np.ones(2, np.float32), np.array([5, 2**33 + 1]), np.array([0, 1, 2]), (2, 2**34))",
        "do not fit int32; jax holds int64 only with x64 on"),
    "a shape int32 indices cannot address": (
        "sum", "(np.ones(2, np.float32), np.array([5, 6]), np.array([0, 1, 2]), (2, 2**34))",
        "need int64 indices, these are int32"),
    "uint8 values": ("sum", "jnp.array([200, 100, 3], jnp.uint8)", "arrays of dtype uint8 are not supported"),
    "bfloat16 values": ("relu", "jnp.ones(3, jnp.bfloat16)", "arrays of dtype bfloat16 are not supported"),
    "complex values": ("exp", "jnp.ones(3, jnp.complex64)", "arrays of dtype complex64 are not supported"),
    # the padding row id (shape[0]) marks the end of the stored rows: one inside is out of range
    "row_sparse padding inside": ("sum", "soj.RowSparse(jnp.ones((3, 2)), jnp.array([0, 5, 1]), (5, 2))",
                                  "row_sparse row index 5 at position 1 is out of range [0, 5)"),
    # a components tuple's shape: non-negative ints, as the native constructors take it
    "a float column count": ("sum", "(np.ones(3, np.float32), np.array([0, 1, 1], np.int32), "
                                    "np.array([0, 1, 2, 3], np.int32), (3, 2.9))", "must be static non-negative ints"),
    "a text row count": ("sum", "(np.ones((2, 2), np.float32), np.array([1, 3], np.int32), ('5', 2))",
                         "must be static non-negative ints"),
    "a row_sparse of no dimensions": ("sum", "(np.ones((2, 2), np.float32), np.array([1, 3], np.int32), ())",
                                      "must have at least 1 dimension"),
    "row_sparse rows unsorted": ("sum", "soj.RowSparse(jnp.ones((3, 2)), jnp.array([3, 1, 2]), (5, 2))",
                                 "row_sparse indices must be sorted and unique: unsorted index 1 after 3"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_hostile_argument_is_refused_naming_op_argument_and_fault(case):
    op, make, words = CASES[case]
    eager = "2**3" in make or "'5'" in make  # shapes past int32, and texts, cannot be jit arguments
    r = run_case(_CASE.replace("{make}", make).replace("{op}", op).replace("{eager}", str(eager))
                 .replace("{{", "{").replace("}}", "}"))
    assert r["outcome"] == "returned", (case, r)
    said = json.loads(r["stdout"].strip().splitlines()[-1])
    assert said is not None and words in said, (case, said)
    assert f"sparse_ops.jax.ops.{op}" in said and ("argument" in said), (case, said)
