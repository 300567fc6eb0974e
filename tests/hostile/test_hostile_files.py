"""Hostile ``.npz``/``.npy`` files through ``sparse_ops.load``, each in a fresh process (a
crash is a failed case): refused with a ValueError (SparseFormatError for a broken sparse
structure) naming the file and the fault, or read exactly; never a RecursionError, a
NotImplementedError, a silent loss or a copy of what was just read."""
from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest

from _subprocess import run_case


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


def _ours(path, header: dict, members: dict, compress: int = zipfile.ZIP_STORED) -> None:
    with zipfile.ZipFile(path, "w", compression=compress) as z:
        z.writestr("__sparse_ops__.npy", _npy(np.frombuffer(json.dumps(header).encode(), np.uint8)))
        for name, a in members.items():
            z.writestr(name + ".npy", _npy(a))


def _load(path) -> dict:
    return run_case(f"""
import json
import sparse_ops as so
got = so.load({str(path)!r})
items = got if isinstance(got, list) else list(got.values()) if isinstance(got, dict) else [got]
print(json.dumps([[x.stype, list(x.shape), str(x.dtype), x.asnumpy().tolist()] for x in items]))
""")


def _refused(r: dict, words: str, error: str = "ValueError") -> None:
    assert r["outcome"] == "raised", r
    assert r["error"] in (error, "SparseFormatError"), r
    assert words in r["message"], r["message"][:500]


def test_a_deeply_nested_header_is_a_bad_header_not_a_recursion_error(tmp_path):
    path = tmp_path / "deep.npz"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("__sparse_ops__.npy", _npy(np.frombuffer(b"[" * 200_000 + b"]" * 200_000, np.uint8)))
    _refused(_load(path), "JSON nested too deeply")


def test_a_scipy_format_save_npz_never_writes_is_named(tmp_path):
    path = tmp_path / "lil.npz"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("format.npy", _npy(np.array(b"lil")))
        z.writestr("shape.npy", _npy(np.array([2, 2])))
    _refused(_load(path), "SciPy format 'lil' is not one save_npz writes (csr, csc, coo, bsr, dia)")


def test_big_endian_members_read_as_the_same_numbers(tmp_path):
    path = tmp_path / "be.npz"
    values = np.array([[1.5, -2.0], [0.0, 4.25]], dtype=">f4")
    _ours(path, {"format": "sparse_ops", "version": 1, "kind": "list",
                 "entries": [{"name": "0", "stype": "default", "shape": [2, 2]},
                             {"name": "1", "stype": "csr", "shape": [2, 2]}]},
          {"0.values": values, "1.data": np.array([1.5, 4.25], ">f8"), "1.indices": np.array([0, 1], ">i8"),
           "1.indptr": np.array([0, 1, 2], ">i4")})
    r = _load(path)
    assert r["outcome"] == "returned", r
    got = json.loads(r["stdout"].strip().splitlines()[-1])
    assert got == [["default", [2, 2], "float32", [[1.5, -2.0], [0.0, 4.25]]],
                   ["csr", [2, 2], "float64", [[1.5, 0.0], [0.0, 4.25]]]]


def test_a_big_endian_npy_file_reads_too(tmp_path):
    path = tmp_path / "be.npy"
    path.write_bytes(_npy(np.arange(4, dtype=">i8")))
    r = _load(path)
    assert r["outcome"] == "returned", r
    assert json.loads(r["stdout"].strip().splitlines()[-1]) == [["default", [4], "int64", [0, 1, 2, 3]]]


def test_a_dict_with_one_name_twice_is_refused_not_halved(tmp_path):
    path = tmp_path / "twice.npz"
    _ours(path, {"format": "sparse_ops", "version": 1, "kind": "dict",
                 "entries": [{"name": "w", "stype": "default", "shape": [1]},
                             {"name": "w", "stype": "default", "shape": [1]}]},
          {"0.values": np.ones(1, np.float32), "1.values": np.zeros(1, np.float32)})
    _refused(_load(path), "header entry 1: the name 'w' appears twice")


@pytest.mark.parametrize("case, members, words", [
    ("index past the columns", {"0.data": np.ones(2), "0.indices": np.array([0, 1 << 40]),
                                "0.indptr": np.array([0, 1, 2])}, "out of range [0, 3)"),
    ("float indices", {"0.data": np.ones(2), "0.indices": np.array([0.0, 1.0]), "0.indptr": np.array([0, 1, 2])},
     "must have an integer dtype"),
    ("indptr past the values", {"0.data": np.ones(2), "0.indices": np.array([0, 1]),
                                "0.indptr": np.array([0, 1003, 2])}, "non-decreasing"),
    ("complex values", {"0.data": np.ones(2, np.complex64), "0.indices": np.array([0, 1]),
                        "0.indptr": np.array([0, 1, 2])},
     "complex64 are not supported"),
])
def test_a_broken_sparse_member_is_refused_naming_the_file(tmp_path, case, members, words):
    path = tmp_path / "bad.npz"
    _ours(path, {"format": "sparse_ops", "version": 1, "kind": "single",
                 "entries": [{"name": "0", "stype": "csr", "shape": [2, 3]}]}, members)
    r = _load(path)
    assert r["outcome"] == "raised" and "bad.npz" in r["message"] and words in r["message"], (case, r)


def test_a_member_claiming_more_than_the_file_holds_is_refused_before_allocating(tmp_path):
    path = tmp_path / "claims.npz"
    header = np.lib.format.header_data_from_array_1_0(np.zeros(1))
    header["shape"] = (1 << 40,)
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, header)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("x.npy", buf.getvalue() + b"\0" * 8)
    _refused(_load(path), "claims shape (1099511627776,)")


def test_reading_an_inflating_file_does_not_copy_what_numpy_read(tmp_path):
    """A small deflated file holding 64 MB of values: the peak while loading stays near
    the array's own size (np.load's buffer becomes the container's)."""
    path = tmp_path / "inflate.npz"
    _ours(path, {"format": "sparse_ops", "version": 1, "kind": "single",
                 "entries": [{"name": "0", "stype": "default", "shape": [1 << 24]}]},
          {"0.values": np.zeros(1 << 24, np.float32)}, compress=zipfile.ZIP_DEFLATED)
    assert path.stat().st_size < 200_000
    r = run_case(f"""
import tracemalloc
import sparse_ops as so
so.load({str(path)!r})  # warm: imports and first-use costs
tracemalloc.start()
x = so.load({str(path)!r})
print(tracemalloc.get_traced_memory()[1])
""")
    assert r["outcome"] == "returned", r
    peak = int(r["stdout"].strip().splitlines()[-1])
    assert peak < 1.3 * (1 << 26), peak  # 64 MB of values: no second copy
