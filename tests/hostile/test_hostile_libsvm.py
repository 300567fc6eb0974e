"""Hostile LibSVM files: indices past int64, huge tokens, bad numbers. Each case runs in a
subprocess (``run_case``): a crash is a failure of the case, not of the run."""
from __future__ import annotations

import pytest

from _subprocess import run_case

_READ = """
import sparse_ops.compat.mxnet as mx
it = mx.io.LibSVMIter(data_libsvm={path!r}, data_shape=({cols},), batch_size=1)
x = next(iter(it)).data[0]
x.check_format()
print(x.indices.tolist(), x.shape)
"""


def _read(tmp_path, text: str, cols: int) -> dict:
    path = tmp_path / "f.libsvm"
    path.write_text(text)
    return run_case(_READ.format(path=str(path), cols=cols))


@pytest.mark.parametrize("index", ["18446744073709551617", "9223372036854775808", "9223372036854775807",
                                   "99999999999999999999999999"])
def test_an_index_past_the_columns_is_refused_never_wrapped(tmp_path, index):
    r = _read(tmp_path, f"1 {index}:1\n", 2**63 - 1)
    assert r["outcome"] == "raised" and r["error"] == "LibSVMFormatError", r
    assert f"f.libsvm, line 1: column index {index} is not an integer in [0, 9223372036854775807)" in r["message"]


def test_the_largest_index_a_shape_allows_is_read_exactly(tmp_path):
    r = _read(tmp_path, "1 3:1 9223372036854775806:2\n", 2**63 - 1)
    assert r["outcome"] == "returned", r
    assert r["stdout"].strip() == "[3, 9223372036854775806] (1, 9223372036854775807)"


@pytest.mark.parametrize("text, words", [
    ("1 " + "7" * 4_000_000 + ":1\n", "column index 7777777777777777777777777777777777777777... is not an integer"),
    ("1 3:" + "x" * 100_000 + "\n", "the value of '3:xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...' is not a number"),
    ("0\n" + "z" * 100_000 + " 1:1\n", "line 2: unexpected character 'z'"),
])
def test_an_error_quotes_a_prefix_of_the_token_with_file_and_line(tmp_path, text, words):
    r = _read(tmp_path, text, 5)
    assert r["outcome"] == "raised" and r["error"] == "LibSVMFormatError", r
    assert words in r["message"] and len(r["message"]) < 400, r["message"][:500]
