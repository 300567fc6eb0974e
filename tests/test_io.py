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
    with pytest.raises(TypeError, match="save: attrs must be JSON-serialisable.*object is not JSON serializable"):
        so.save(path, so.ones(2), attrs={"a": object()})
    with pytest.raises(FileNotFoundError, match=f"save: no folder '{tmp_path / 'missing'}' to write into"):
        so.save(tmp_path / "missing" / "new.npz", so.ones(2))
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


# ---- hostile files: pickles, oversized claims, wrong shapes ---------------------------------------
class RunsOnUnpickle:
    """Unpickling this creates the file ``marker``: evidence that a pickle ran."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def npy_bytes(a, allow_pickle=False) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, a, allow_pickle=allow_pickle)
    return buf.getvalue()


def claim_bytes(shape, dtype="<f8", payload=b"\0" * 64) -> bytes:
    """A .npy stream whose header claims ``shape`` but holds only ``payload``."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buf.getvalue() + payload


def write_zip(path, members: dict[str, bytes], compression=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, "w", compression) as z:
        for name, blob in members.items():
            z.writestr(name, blob)


def ours(entry=None, members=None) -> dict[str, bytes]:
    """The members of a one-entry sparse_ops file (a csr [[1, 0], [0, 0]]), some replaced by
    ``members`` (member name without .npy -> bytes)."""
    parts = {"__sparse_ops__": npy_bytes(header([entry or {"name": "a", "stype": "csr", "shape": [2, 2]}])),
             "0.data": npy_bytes(np.ones(1)), "0.indices": npy_bytes(np.array([0])),
             "0.indptr": npy_bytes(np.array([0, 1, 1]))}
    parts.update(members or {})
    return {f"{k}.npy": v for k, v in parts.items()}


def scipy_members(**members) -> dict[str, bytes]:
    parts = {"format.npy": npy_bytes(np.array(b"csr")), "shape.npy": npy_bytes(np.array([2, 2])),
             "data.npy": npy_bytes(np.ones(1)), "indices.npy": npy_bytes(np.array([0], np.int32)),
             "indptr.npy": npy_bytes(np.array([0, 1, 1], np.int32))}
    parts.update({f"{k}.npy": v for k, v in members.items()})
    return parts


def test_pickles_in_any_member_never_run(tmp_path):
    marker = tmp_path / "pickle_ran"
    evil = npy_bytes(np.array([RunsOnUnpickle(marker)], dtype=object), allow_pickle=True)
    cases = {"header": ours(members={"__sparse_ops__": evil}), "values": ours(members={"0.data": evil}),
             "scipy": scipy_members(data=evil), "not npy": ours(members={"0.data": b"\x80\x04K\x01."})}
    for what, members in cases.items():
        write_zip(tmp_path / "evil.npz", members)
        with pytest.raises(ValueError, match="evil.npz"):
            so.load(tmp_path / "evil.npz")
    (tmp_path / "evil.npy").write_bytes(evil)
    with pytest.raises(ValueError, match="Python objects"):
        so.load(tmp_path / "evil.npy")
    assert not marker.exists()


def test_oversized_claims_are_refused_before_allocating(tmp_path):
    """Headers claiming terabytes (or more than the file holds) are refused with a ValueError
    before NumPy allocates what they claim: tracemalloc (which sees NumPy's allocations)
    stays far below the claim, and there is no MemoryError."""
    import tracemalloc

    huge, big = (2**40,), (2**31,)  # 8 TiB, and 16 GiB (which a large machine would allocate)
    cases = {
        "header": ours(members={"__sparse_ops__": claim_bytes(big, "|u1")}),
        "values": ours(members={"0.data": claim_bytes(huge)}),
        "indices": ours(members={"0.indices": claim_bytes(big, "<i8")}),
        "scipy data": scipy_members(data=claim_bytes(huge)),
        "scipy indptr": scipy_members(indptr=claim_bytes(big, "<i4")),
        "json shape": ours({"name": "a", "stype": "csr", "shape": [2**62, 2**62]}),
        "dense shape": ours({"name": "a", "stype": "default", "shape": [2**40, 2**40]},
                            {"0.values": npy_bytes(np.ones(2))}),
    }
    tracemalloc.start()
    try:
        for what, members in cases.items():
            for compression in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                write_zip(tmp_path / "big.npz", members, compression)
                with pytest.raises(ValueError, match="big.npz"):
                    so.load(tmp_path / "big.npz")
        for shape in (huge, big):
            (tmp_path / "big.npy").write_bytes(claim_bytes(shape))
            with pytest.raises(ValueError, match=r"big.npy.*claims shape \(\d+,\) of float64"):
                so.load(tmp_path / "big.npy")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20


def test_zip_entries_claiming_more_than_the_file_holds_are_refused(tmp_path):
    path = tmp_path / "lies.npz"
    write_zip(path, ours())
    blob = bytearray(path.read_bytes())
    entry = blob.index(b"PK\x01\x02")  # the central directory's first entry
    blob[entry + 24:entry + 28] = (2**31).to_bytes(4, "little")  # its uncompressed size
    path.write_bytes(bytes(blob))
    with pytest.raises(ValueError, match=r"lies.npz.*claims 2147483648 bytes"):
        so.load(path)


@pytest.mark.parametrize("what, entry, members, message", [
    ("rsp rows", {"name": "a", "stype": "row_sparse", "shape": [4, 3]},
     {"0.data": np.ones((2, 3)), "0.indices": np.array([1])}, "row_sparse data must have shape"),
    ("rsp width", {"name": "a", "stype": "row_sparse", "shape": [4, 3]},
     {"0.data": np.ones((1, 2)), "0.indices": np.array([1])}, r"\(1, 3\)"),
    ("csr data 2-d", None, {"0.data": np.ones((1, 1))}, "csr data must be 1-d"),
    ("csr indptr length", {"name": "a", "stype": "csr", "shape": [3, 2]}, {}, "indptr must have rows \\+ 1"),
    ("dense rank", {"name": "a", "stype": "default", "shape": [2, 2]}, {"0.values": np.ones(4)}, "shape"),
])
def test_arrays_of_the_wrong_shape_are_refused(tmp_path, what, entry, members, message):
    write_zip(tmp_path / "shape.npz", ours(entry, {k: npy_bytes(v) for k, v in members.items()}))
    with pytest.raises(ValueError, match=message):
        so.load(tmp_path / "shape.npz")


def test_a_file_cut_anywhere_is_a_value_error(tmp_path):
    _, arrays = sample()
    good = tmp_path / "good.npz"
    so.save(good, arrays)
    blob = good.read_bytes()
    cut = tmp_path / "cut.npz"
    for n in range(0, len(blob), max(1, len(blob) // 60)):
        cut.write_bytes(blob[:n])
        with pytest.raises(ValueError, match="cut.npz"):
            so.load(cut)


# ---- file objects (as np.savez/np.load and SciPy's save_npz/load_npz take them) ---------------------
def test_round_trips_through_file_objects(tmp_path):
    _, arrays = sample()
    for data in (arrays, list(arrays.values()), arrays["csr32"], arrays["rows"], arrays["dense"]):
        buffer = io.BytesIO()
        so.save(buffer, data)
        buffer.seek(0)
        loaded = so.load(buffer)
        pairs = zip(data.values(), loaded.values()) if isinstance(data, dict) else (
            zip(data, loaded) if isinstance(data, list) else [(data, loaded)])
        for a, b in pairs:
            assert_same(a, b)
    with open(tmp_path / "f.npz", "wb") as f:
        so.save(f, arrays)
    with open(tmp_path / "f.npz", "rb") as f:
        loaded = so.load(f)
        assert not f.closed  # the caller's file stays the caller's
    for name, x in arrays.items():
        assert_same(x, loaded[name])


def test_file_objects_are_read_from_their_position():
    _, arrays = sample()
    buffer = io.BytesIO()
    buffer.write(b"a prefix the caller wrote")
    start = buffer.tell()
    so.save(buffer, arrays["csr32"])
    buffer.write(b"and a suffix")
    buffer.seek(start)
    assert_same(so.load(buffer), arrays["csr32"])


def test_file_objects_interoperate_with_scipy_and_numpy():
    dense, arrays = sample()
    buffer = io.BytesIO()
    so.save(buffer, arrays["csr32"])
    buffer.seek(0)
    np.testing.assert_array_equal(sp.load_npz(buffer).toarray(), dense.astype(np.float32))
    for layout in ("csr", "coo"):
        buffer = io.BytesIO()
        sp.save_npz(buffer, sp.csr_matrix(dense).asformat(layout))
        buffer.seek(0)
        x = so.load(buffer)
        assert x.stype == "csr"
        np.testing.assert_array_equal(x.asnumpy(), dense)
    buffer = io.BytesIO()
    np.save(buffer, dense)
    buffer.seek(0)
    np.testing.assert_array_equal(so.load(buffer).asnumpy(), dense)


def test_hostile_file_objects_are_refused_before_allocating():
    import tracemalloc

    tracemalloc.start()
    try:
        for members in (ours(members={"0.data": claim_bytes((2**40,))}), scipy_members(data=claim_bytes((2**40,)))):
            buffer = io.BytesIO()
            with zipfile.ZipFile(buffer, "w") as z:
                for name, blob in members.items():
                    z.writestr(name, blob)
            buffer.seek(0)
            with pytest.raises(ValueError, match=r"<BytesIO>.*claims shape"):
                so.load(buffer)
        with pytest.raises(ValueError, match=r"<BytesIO>.*claims shape \(1099511627776,\)"):
            so.load(io.BytesIO(claim_bytes((2**40,))))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20
    _, arrays = sample()
    good = io.BytesIO()
    so.save(good, arrays)
    blob = good.getvalue()
    for n in range(0, len(blob), max(1, len(blob) // 30)):
        with pytest.raises(ValueError, match="<BytesIO>"):
            so.load(io.BytesIO(blob[:n]))


def test_unseekable_file_objects_and_bad_entries_are_refused(tmp_path):
    class Stream(io.RawIOBase):
        def readable(self):
            return True

        def seekable(self):
            return False

        def tell(self):
            raise OSError("not seekable")

    with pytest.raises(ValueError, match="seekable binary file object"):
        so.load(Stream())
    buffer = io.BytesIO()
    with pytest.raises(TypeError, match="not an NDArray"):
        so.save(buffer, [so.array(np.ones(2)), "x"])
    assert buffer.getvalue() == b""  # nothing written


def test_scipy_files_are_sized_by_their_members_not_their_shape():
    """A few bytes claiming a huge shape are refused before anything of that size is
    allocated: csr and csc members must fit the shape; coo, bsr and dia files (which hold
    no row pointers) may not ask for more than the io module's bound."""
    def saved(fmt, shape, indptr):
        b = io.BytesIO()
        np.savez(b, format=np.array(fmt.encode()), shape=np.array(shape), data=np.ones(0, np.float32),
                 indices=np.array([], np.int32), indptr=np.array(indptr, np.int32))
        b.seek(0)
        return b

    with pytest.raises(so.SparseFormatError, match=r"indptr must have rows \+ 1 = 1099511627777 entries"):
        so.load(saved("csr", [2**40, 3], [0]))
    with pytest.raises(ValueError, match="would need 8796093022216 bytes of row pointers"):
        so.load(saved("csc", [2**40, 3], [0, 0, 0, 0]))
    b = io.BytesIO()
    sp.save_npz(b, sp.dia_matrix((2**40, 3), dtype=np.float32))
    b.seek(0)
    with pytest.raises(ValueError, match="bytes of row pointers"):
        so.load(b)
    b = io.BytesIO()
    sp.save_npz(b, sp.coo_matrix((100_000, 3), dtype=np.float32))  # empty, but a real size
    b.seek(0)
    assert so.load(b).shape == (100_000, 3)


@pytest.mark.parametrize("index_dtype", [np.uint64, np.uint32, np.uint16, np.int8, np.int16])
def test_scipy_file_index_dtypes_become_ours(index_dtype):
    """A SciPy-layout file with another integer index dtype reads as int32/int64 indices,
    every value checked, as the constructors convert them."""
    m = sp.random(6, 5, density=0.4, format="csr", dtype=np.float32, random_state=3)
    b = io.BytesIO()
    np.savez(b, format=np.array(b"csr"), shape=np.array([6, 5]), data=m.data,
             indices=m.indices.astype(index_dtype), indptr=m.indptr.astype(index_dtype))
    b.seek(0)
    x = so.load(b)
    assert x.indices.dtype in (np.int32, np.int64) and x.indptr.dtype in (np.int32, np.int64)
    np.testing.assert_array_equal((x + x).asnumpy(), 2 * m.toarray())
    np.testing.assert_array_equal(x.asscipy().toarray(), m.toarray())


def test_intact_files_load_does_not_read_are_named_for_what_they_are(tmp_path):
    """Refused, but never called corrupt: a NumPy savez archive, a SciPy 1-d or 3-d sparse
    array (no csr form), values of a dtype the arrays do not hold; a file that is no archive
    at all is said to be one (never taken for a pickle)."""
    from sparse_ops.io import UnheldDtypeError, UnsupportedFileError

    np.savez(tmp_path / "savez.npz", a=np.ones(3))
    with pytest.raises(UnsupportedFileError, match="savez.npz: a .npz archive neither sparse_ops.save nor "
                                                   "scipy.sparse.save_npz wrote \\(members a\\)"):
        so.load(tmp_path / "savez.npz")
    sp.save_npz(tmp_path / "one_d.npz", sp.csr_array(np.array([1.0, 0.0, 2.0])))
    with pytest.raises(UnsupportedFileError, match="a SciPy sparse array of shape \\(3,\\)"):
        so.load(tmp_path / "one_d.npz")
    for kind, dtype in (("csr", np.int8), ("coo", np.bool_)):
        m = sp.random(4, 3, 0.5, format=kind, random_state=0).astype(dtype)
        sp.save_npz(tmp_path / f"{kind}.npz", m)
        with pytest.raises(UnheldDtypeError, match=f"the file holds values its arrays cannot: arrays of dtype "
                                                   f"{np.dtype(dtype).name}"):
            so.load(tmp_path / f"{kind}.npz")
    (tmp_path / "text.npz").write_text("hello")
    with pytest.raises(ValueError, match="text.npz: not a readable .npz/.npy file \\(no zip or NumPy header\\)"):
        so.load(tmp_path / "text.npz")


def test_save_takes_every_path_load_takes_and_refuses_bad_attrs_by_name(tmp_path):
    x = so.array(np.arange(3.0))
    path = os.fsencode(tmp_path / "bytes.npz")
    so.save(path, x)
    np.testing.assert_array_equal(so.load(path).asnumpy(), [0, 1, 2])
    with pytest.raises(TypeError, match="save: attrs must be a dict of the file's attributes, got a list"):
        so.save(tmp_path / "a.npz", x, attrs=[1, 2])
    with pytest.raises(TypeError, match="save: file must be a path .* got a int"):
        so.save(3, x)
    assert not (tmp_path / "a.npz").exists()


def test_a_saved_file_gets_the_permissions_open_gives_and_a_folder_is_refused_by_name(tmp_path):
    """``save`` writes through a private temporary file: the file it leaves has the mode a
    plain ``open()`` would give (the umask's), an overwritten file keeps its own, and a
    folder in the file's place is refused naming ``save``."""
    import os
    import stat

    old = os.umask(0o027)
    try:
        path = tmp_path / "a.npz"
        so.save(str(path), so.array(np.ones(3)))
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
        os.chmod(path, 0o604)
        so.save(str(path), so.array(np.zeros(3)))
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o604
        np.testing.assert_array_equal(so.load(str(path)).asnumpy(), np.zeros(3))
    finally:
        os.umask(old)
    (tmp_path / "folder.npz").mkdir()
    with pytest.raises(IsADirectoryError, match=r"save: .*folder.npz' is a folder, not a file to write"):
        so.save(str(tmp_path / "folder.npz"), so.array(np.ones(2)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npz", "folder.npz"]
