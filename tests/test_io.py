"""save/load round trips, SciPy interoperability and hostile files."""
import io
import json
import os
import zipfile

import numpy as np
import pytest
import scipy.sparse as sp

import sparse_ops as so
from conftest import csr_parts


def sample():
    dense = np.array([[0, 1.5, 0], [2, 0, 0], [0, 0, 0]], dtype=np.float64)
    return dense, {
        "dense": so.array(dense.astype(np.float16)),
        "rows": so.array(dense).tostype("row_sparse"),
        "csr32": so.csr_matrix(csr_parts(dense.astype(np.float32), "int32"), shape=(3, 3)),
        "ints": so.array(dense.astype(np.int64)).tostype("csr"),
    }


def assert_same(a, b):
    assert (a.stype, a.shape, a.dtype) == (b.stype, b.shape, b.dtype)
    if a.stype != "default":
        assert a.aux_types == b.aux_types
    np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())


def test_dict_list_and_single_round_trip(tmp_path):
    _, arrays = sample()
    so.save(tmp_path / "d.params", arrays)  # any file name; no suffix is added
    back = so.load(tmp_path / "d.params")
    assert list(back) == list(arrays)
    for k in arrays:
        assert_same(back[k], arrays[k])
    so.save(tmp_path / "l.npz", list(arrays.values()))
    for a, b in zip(so.load(tmp_path / "l.npz"), arrays.values()):
        assert_same(a, b)
    for x in arrays.values():
        so.save(tmp_path / "one.npz", x)
        assert_same(so.load(tmp_path / "one.npz"), x)


def test_scipy_reads_our_single_csr_and_we_read_scipys(tmp_path):
    m = sp.random(40, 30, density=0.1, format="csr", dtype=np.float32, random_state=1)
    so.save(tmp_path / "ours.npz", so.csr_matrix(m))
    theirs = sp.load_npz(tmp_path / "ours.npz")
    assert (theirs != m).nnz == 0
    sp.save_npz(tmp_path / "scipy.npz", m)
    x = so.load(tmp_path / "scipy.npz")
    assert x.stype == "csr" and x.aux_types == [np.int32, np.int32]
    np.testing.assert_array_equal(x.asnumpy(), m.toarray())
    sp.save_npz(tmp_path / "coo.npz", m.tocoo())
    np.testing.assert_array_equal(so.load(tmp_path / "coo.npz").asnumpy(), m.toarray())


def test_npy_file_loads_as_dense(tmp_path):
    np.save(tmp_path / "a.npy", np.arange(4.0))
    x = so.load(tmp_path / "a.npy")
    assert x.stype == "default" and x.asnumpy().tolist() == [0, 1, 2, 3]


def test_save_refuses_bad_input_and_keeps_old_file(tmp_path):
    path = tmp_path / "keep.npz"
    so.save(path, so.ones((2, 2)))
    with pytest.raises(TypeError, match="not an NDArray"):
        so.save(path, [so.ones(2), np.ones(2)])
    with pytest.raises(TypeError, match="keys must be strings"):
        so.save(path, {1: so.ones(2)})
    assert so.load(path).asnumpy().tolist() == [[1, 1], [1, 1]]
    assert [p.name for p in tmp_path.iterdir()] == ["keep.npz"]  # no temporary left behind


def write_npz(path, members):
    with open(path, "wb") as f:
        np.savez(f, **members)


def header(entries, kind="dict", version=1):
    raw = json.dumps({"format": "sparse_ops", "version": version, "kind": kind, "entries": entries})
    return np.frombuffer(raw.encode(), dtype=np.uint8)


def test_truncated_and_garbage_files(tmp_path):
    _, arrays = sample()
    good = tmp_path / "good.npz"
    so.save(good, arrays)
    blob = good.read_bytes()
    (tmp_path / "trunc.npz").write_bytes(blob[: len(blob) // 2])
    (tmp_path / "garbage.npz").write_bytes(os.urandom(500))
    (tmp_path / "empty.npz").write_bytes(b"")
    for name in ("trunc.npz", "garbage.npz", "empty.npz"):
        with pytest.raises(ValueError, match=name):
            so.load(tmp_path / name)
    with pytest.raises(FileNotFoundError):
        so.load(tmp_path / "missing.npz")


def test_hostile_members_are_refused(tmp_path):
    p = tmp_path / "x.npz"
    ok = {"name": "a", "stype": "csr", "shape": [2, 2]}
    cases = {
        "pickled object array": {"__sparse_ops__": header([ok]), "0.data": np.array([object()], dtype=object),
                                 "0.indices": np.array([0]), "0.indptr": np.array([0, 1, 1])},
        "out-of-range index": {"__sparse_ops__": header([ok]), "0.data": np.ones(1), "0.indices": np.array([7]),
                               "0.indptr": np.array([0, 1, 1])},
        "shape lies": {"__sparse_ops__": header([dict(ok, shape=[5, 2])]), "0.data": np.ones(1),
                       "0.indices": np.array([0]), "0.indptr": np.array([0, 1, 1])},
        "missing member": {"__sparse_ops__": header([ok]), "0.data": np.ones(1)},
        "unknown stype": {"__sparse_ops__": header([dict(ok, stype="coo")])},
        "bad json": {"__sparse_ops__": np.frombuffer(b"{not json", dtype=np.uint8)},
        "future version": {"__sparse_ops__": header([ok], version=99)},
        "dense shape lies": {"__sparse_ops__": header([{"name": "a", "stype": "default", "shape": [3]}]),
                             "0.values": np.ones(2)},
        "negative shape": {"__sparse_ops__": header([dict(ok, shape=[-1, 2])]), "0.data": np.ones(0),
                           "0.indices": np.zeros(0, np.int64), "0.indptr": np.array([0])},
        "no header": {"weights": np.ones(3)},
    }
    for what, members in cases.items():
        write_npz(p, members)
        with pytest.raises(ValueError, match=str(p).replace("\\", "\\\\")):
            so.load(p)


def test_pickled_npz_member_is_never_unpickled(tmp_path):
    p = tmp_path / "evil.npz"
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.array([{"boom": 1}], dtype=object), allow_pickle=True)
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("__sparse_ops__.npy", buf.getvalue())
    with pytest.raises(ValueError):
        so.load(p)
