"""``mx.io``: LibSVMIter and NDArrayIter of the MXNet face, against SciPy / NumPy references
built from the same triples the files are written from."""
import numpy as np
import pytest
import scipy.sparse as sp

import sparse_ops.compat.mxnet as mx
from sparse_ops.compat.mxnet.io import DataIterError, LibSVMFormatError, parse_libsvm


def random_rows(n, ncols, seed=0, empty_every=7):
    """(labels, list of (sorted cols, float32 values)) with some empty rows."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(-3, 4, n).astype(np.float32)
    rows = []
    for i in range(n):
        k = 0 if i % empty_every == 3 else int(rng.integers(1, min(ncols, 8)))
        cols = np.sort(rng.choice(ncols, k, replace=False))
        rows.append((cols, rng.standard_normal(k).astype(np.float32)))
    return labels, rows


def write_libsvm(path, labels, rows, newline="\n"):
    with open(path, "w", newline="") as f:
        for y, (cols, vals) in zip(labels, rows):
            pairs = "".join(f" {c}:{v!r}" for c, v in zip(cols.tolist(), vals.tolist()))
            f.write(f"{y:g}{pairs}{newline}")


def reference(labels, rows, ncols):
    """The scipy csr matrix of the triples, and the labels."""
    r = np.concatenate([[i] * len(c) for i, (c, _) in enumerate(rows)] + [[]]).astype(np.int64)
    c = np.concatenate([c for c, _ in rows] + [[]]).astype(np.int64)
    v = np.concatenate([v for _, v in rows] + [[]]).astype(np.float32)
    return sp.csr_matrix((v, (r, c)), shape=(len(rows), ncols), dtype=np.float32), labels


def collect(it):
    """Every batch of one epoch: (data as scipy, label as numpy, pad, index)."""
    out = []
    for b in it:
        out.append((b.data[0].asscipy(), b.label[0].asnumpy(), b.pad, b.index))
    return out


@pytest.fixture
def libsvm_file(tmp_path):
    labels, rows = random_rows(50, 20)
    path = tmp_path / "train.libsvm"
    write_libsvm(path, labels, rows)
    return path, labels, rows


# ---- LibSVMIter -----------------------------------------------------------------------------------
def test_libsvm_batches_match_the_triples(libsvm_file):
    path, labels, rows = libsvm_file
    ref, y = reference(labels, rows, 20)
    it = mx.io.LibSVMIter(data_libsvm=str(path), data_shape=(20,), batch_size=10)
    assert it.provide_data == [("data", (10, 20))] and it.provide_label == [("softmax_label", (10,))]
    assert isinstance(it.provide_data[0], mx.io.DataDesc) and it.provide_data[0].dtype == np.float32
    batches = collect(it)
    assert len(batches) == 5
    for i, (data, label, pad, index) in enumerate(batches):
        assert pad == 0 and index.tolist() == list(range(10 * i, 10 * i + 10))
        np.testing.assert_array_equal(data.toarray(), ref[10 * i:10 * i + 10].toarray())
        np.testing.assert_array_equal(label, y[10 * i:10 * i + 10])
    b = mx.io.LibSVMIter(data_libsvm=str(path), data_shape=(20,), batch_size=10).next()
    x = b.data[0]
    assert x.stype == "csr" and x.dtype == np.float32 and x.indices.dtype == np.int64
    assert b.label[0].stype == "default" and b.label[0].shape == (10,)
    assert isinstance(b, mx.io.DataBatch)


def test_libsvm_round_batch_wraps_like_mxnet(tmp_path):
    """MXNet's own documented example: 4 rows, batch 3."""
    path = tmp_path / "data.t"
    path.write_text("1.0 0:0.5 2:1.2\n-2.0\n-3.0 0:0.6 1:2.4 2:1.2\n4 2:-1.2\n")
    it = mx.io.LibSVMIter(data_libsvm=str(path), data_shape=(3,), batch_size=3)
    first, second = it.next(), it.next()
    np.testing.assert_allclose(first.data[0].asnumpy(), [[0.5, 0, 1.2], [0, 0, 0], [0.6, 2.4, 1.2]], rtol=1e-6)
    np.testing.assert_array_equal(first.label[0].asnumpy(), [1, -2, -3])
    np.testing.assert_allclose(second.data[0].asnumpy(), [[0, 0, -1.2], [0.5, 0, 1.2], [0, 0, 0]], rtol=1e-6)
    np.testing.assert_array_equal(second.label[0].asnumpy(), [4, 1, -2])
    assert (first.pad, second.pad) == (0, 2)
    with pytest.raises(StopIteration):
        it.next()
    it.reset()  # the wrap used rows 0 and 1: the next epoch starts at row 2
    epoch2 = collect(it)
    assert [b[1].tolist() for b in epoch2] == [[-3, 4, 1]] and epoch2[0][2] == 1
    it.reset()
    assert [b[1].tolist() for b in collect(it)] == [[-2, -3, 4]]


def test_libsvm_round_batch_false_pads_with_empty_rows(libsvm_file):
    path, labels, rows = libsvm_file
    ref, y = reference(labels, rows, 20)
    it = mx.io.LibSVMIter(data_libsvm=str(path), data_shape=(20,), batch_size=16, round_batch=False)
    batches = collect(it)
    data, label, pad, _ = batches[-1]
    assert [b[2] for b in batches] == [0, 0, 0, 14] and data.shape == (16, 20)
    np.testing.assert_array_equal(data[:2].toarray(), ref[48:].toarray())
    assert data[2:].nnz == 0 and not label[2:].any()
    it.reset()
    assert len(collect(it)) == 4


def test_libsvm_label_file_gives_csr_labels(tmp_path):
    d, lab = tmp_path / "data.t", tmp_path / "label.t"
    d.write_text("1.0 0:0.5 2:1.2\n-2.0\n-3.0 0:0.6 1:2.4 2:1.2\n4 2:-1.2\n")
    lab.write_text("1.0\n-2.0 0:0.125\n-3.0 2:1.2\n4 1:1.0 2:-1.2\n")
    it = mx.io.LibSVMIter(data_libsvm=str(d), data_shape=(3,), label_libsvm=str(lab), label_shape=(3,),
                          batch_size=3)
    b = it.next()
    assert b.label[0].stype == "csr" and it.provide_label[0].shape == (3, 3)
    np.testing.assert_allclose(b.label[0].asnumpy(), [[0, 0, 0], [0.125, 0, 0], [0, 0, 1.2]], rtol=1e-6)
    with pytest.raises(mx.base.MXNetError, match=r"label_shape is not expected to be \(1,\)"):
        mx.io.LibSVMIter(data_libsvm=str(d), data_shape=(3,), label_libsvm=str(lab), batch_size=3)
    with pytest.raises(mx.base.MXNetError, match=r"label_shape is expected to be \(1,\)"):
        mx.io.LibSVMIter(data_libsvm=str(d), data_shape=(3,), label_shape=(3,), batch_size=3)


@pytest.mark.parametrize("num_parts", [2, 3, 7])
def test_libsvm_parts_cover_the_rows_once(libsvm_file, num_parts):
    path, labels, rows = libsvm_file
    ref, y = reference(labels, rows, 20)
    parts = [parse_libsvm(str(path), 20, k, num_parts) for k in range(num_parts)]
    assert sum(p.rows for p in parts) == 50
    np.testing.assert_array_equal(np.concatenate([p.labels for p in parts]), y)
    start = 0
    for k, p in enumerate(parts):
        m = sp.csr_matrix((p.data, p.indices, p.indptr), shape=(p.rows, 20))
        np.testing.assert_array_equal(m.toarray(), ref[start:start + p.rows].toarray())
        start += p.rows
        if p.rows >= 1:
            it = mx.io.LibSVMIter(data_libsvm=str(path), data_shape=(20,), batch_size=1, num_parts=num_parts,
                                  part_index=k)
            assert len(collect(it)) == p.rows
    with pytest.raises(mx.base.MXNetError, match="part_index"):
        mx.io.LibSVMIter(data_libsvm=str(path), data_shape=(20,), batch_size=1, num_parts=2, part_index=2)
    with pytest.raises(mx.base.MXNetError, match="number of parts should be positive"):
        mx.io.LibSVMIter(data_libsvm=str(path), data_shape=(20,), batch_size=1, num_parts=0)


def test_libsvm_folder_crlf_weights_qid_blank_lines_unsorted(tmp_path):
    folder = tmp_path / "parts"
    folder.mkdir()
    labels, rows = random_rows(30, 12, seed=5)
    write_libsvm(folder / "a.txt", labels[:20], rows[:20], newline="\r\n")
    write_libsvm(folder / "b.txt", labels[20:], rows[20:])
    ref, y = reference(labels, rows, 12)
    it = mx.io.LibSVMIter(data_libsvm=str(folder), data_shape=(12,), batch_size=30)
    data, label, _, _ = collect(it)[0]
    np.testing.assert_array_equal(data.toarray(), ref.toarray())
    np.testing.assert_array_equal(label, y)
    odd = tmp_path / "odd.t"
    odd.write_text("\n1:0.5 qid:3 5:2 1:1.5\n\n  \n0 3:1e-3\t0:-2\n")  # weight, qid, blank lines, unsorted
    x = mx.io.LibSVMIter(data_libsvm=str(odd), data_shape=(6,), batch_size=2).next()
    np.testing.assert_array_equal(x.label[0].asnumpy(), [1, 0])
    np.testing.assert_allclose(x.data[0].asnumpy(), [[0, 1.5, 0, 0, 0, 2], [-2, 0, 0, 1e-3, 0, 0]], rtol=1e-6)
    assert x.data[0].indices.asnumpy().tolist() == [1, 5, 0, 3]


@pytest.mark.parametrize("text,line,what", [
    ("1 0:1\n1 2:x\n", 2, "the value of '2:x' is not a number"),
    ("1 0:1\n1 0:1\n1 2:1.2.3\n", 3, "the value of '2:1.2.3' is not a number"),
    ("1 0:1\n1 7:1\n", 2, r"column index 7 is not an integer in \[0, 5\)"),
    ("1 -1:1\n", 1, "the index of '-1:1' is not a non-negative integer"),
    ("1 0.5:1\n", 1, "the index of '0.5:1' is not"),
    ("1 0:1\n\n1 2:1 2:3\n", 3, "column index 2 appears twice"),
    ("1 0:1\n1 2:\n", 2, "the value of '2:' is not a number"),
    ("1 0:1\n1 :3\n", 2, "':3' is not an index:value pair"),
    ("1 0:1 3\n", 1, "'3' is not an index:value pair"),
    ("1 0:1:2\n", 1, "'0:1:2' is not an index:value pair"),
    ("1:2:3 0:1\n", 1, "'1:2:3' is not a label"),
    ("abc 0:1\n", 1, "unexpected character 'a' in 'abc'"),
    ("1.5.2 0:1\n", 1, "label '1.5.2' is not a number"),
    ("1 0:1 qix:3\n", 1, "unexpected character 'q'"),
    ("1 0:infinit\n", 1, "'infinit' is not a number"),
])
def test_libsvm_bad_files_name_the_file_and_line(tmp_path, text, line, what):
    path = tmp_path / "bad.libsvm"
    path.write_text(text)
    with pytest.raises(LibSVMFormatError, match=f"bad.libsvm, line {line}: .*{what}") as info:
        mx.io.LibSVMIter(data_libsvm=str(path), data_shape=(5,), batch_size=1)
    assert isinstance(info.value, mx.base.MXNetError)


def test_libsvm_bad_line_in_a_later_chunk(tmp_path, monkeypatch):
    import sparse_ops.compat.mxnet.io as mxio

    monkeypatch.setattr(mxio, "_CHUNK", 64)  # many chunks: line numbers carry over
    path = tmp_path / "long.t"
    lines = [f"1 {i % 5}:1" for i in range(100)]
    lines[76] = "1 9:1"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(LibSVMFormatError, match="long.t, line 77: "):
        mx.io.LibSVMIter(data_libsvm=str(path), data_shape=(5,), batch_size=1)
    lines[76] = "1 4:1"
    path.write_text("\n".join(lines) + "\n")
    p = parse_libsvm(str(path), 5)
    assert p.rows == 100 and p.indices.tolist() == [4 if i == 76 else i % 5 for i in range(100)]


def test_libsvm_argument_errors(tmp_path, libsvm_file):
    path = str(libsvm_file[0])
    with pytest.raises(mx.base.MXNetError, match="no such file"):
        mx.io.LibSVMIter(data_libsvm=str(tmp_path / "missing"), data_shape=(3,), batch_size=1)
    with pytest.raises(mx.base.MXNetError, match="dimension of data_shape is expected to be 1"):
        mx.io.LibSVMIter(data_libsvm=path, data_shape=(3, 4), batch_size=1)
    with pytest.raises(mx.base.MXNetError, match="batch_size must be positive"):
        mx.io.LibSVMIter(data_libsvm=path, data_shape=(20,), batch_size=0)
    with pytest.raises(mx.base.MXNetError, match="number of input must be bigger than batch size"):
        mx.io.LibSVMIter(data_libsvm=path, data_shape=(20,), batch_size=200)
    with pytest.raises(mx.base.MXNetError, match="unknown argument"):
        mx.io.LibSVMIter(data_libsvm=path, data_shape=(20,), batch_size=2, bogus=1)


def test_libsvm_parse_is_vectorised(tmp_path):
    """200,000 lines parse in well under the time a per-token Python loop needs."""
    import time

    rng = np.random.default_rng(0)
    n = 200_000
    cols = rng.integers(0, 1000, (n, 5))
    text = "\n".join(f"1 {a}:1 {b}:2 {c}:3 {d}:4 {e}:5" for a, b, c, d, e in np.sort(cols + np.arange(5) * 1000,
                                                                                         axis=1).tolist())
    path = tmp_path / "big.t"
    path.write_text(text + "\n")
    t0 = time.perf_counter()
    p = parse_libsvm(str(path), 5000)
    elapsed = time.perf_counter() - t0
    assert p.rows == n and p.indices.size == 5 * n
    assert elapsed < 10, elapsed


# ---- NDArrayIter (dense) and SparseNDArrayIter (csr batches stay csr) -----------------------------------
# MXNet 1.9.1's NDArrayIter densifies csr and takes only 'discard' for it: tests/test_compat_mxnet_io_face.py
ITERS = {"default": mx.io.NDArrayIter, "csr": mx.io.SparseNDArrayIter}


def _x(n=10, d=3):
    return np.arange(n * d, dtype=np.float32).reshape(n, d)


@pytest.mark.parametrize("stype", ["default", "csr"])
def test_ndarrayiter_pad(stype):
    x = _x()
    data = mx.nd.array(x).tostype(stype)
    it = ITERS[stype](data, np.arange(10), batch_size=4)
    assert it.provide_data[0].shape == (4, 3) and it.provide_label[0].name == "softmax_label"
    batches = list(it)
    assert [b.pad for b in batches] == [0, 0, 2]
    assert all(b.data[0].stype == stype for b in batches)
    np.testing.assert_array_equal(batches[2].data[0].asnumpy(), x[[8, 9, 0, 1]])
    np.testing.assert_array_equal(batches[2].label[0].asnumpy(), [8, 9, 0, 1])
    # padding longer than the data tiles it, as MXNet does
    small = ITERS[stype](mx.nd.array(x[:3]).tostype(stype), batch_size=8)
    np.testing.assert_array_equal(small.next().data[0].asnumpy(), x[[0, 1, 2, 0, 1, 2, 0, 1]])


@pytest.mark.parametrize("stype", ["default", "csr"])
def test_ndarrayiter_discard_and_roll_over(stype):
    x = _x()
    it = ITERS[stype](mx.nd.array(x).tostype(stype), batch_size=4, last_batch_handle="discard")
    assert [b.data[0].asnumpy()[0, 0] for b in it] == [0, 12]
    it = ITERS[stype](mx.nd.array(x).tostype(stype), np.arange(10), batch_size=4,
                           last_batch_handle="roll_over")
    assert len(list(it)) == 2
    it.reset()
    epoch2 = list(it)
    assert [b.label[0].asnumpy().tolist() for b in epoch2] == [[8, 9, 0, 1], [2, 3, 4, 5], [6, 7, 8, 9]]
    assert epoch2[0].pad == 2 and epoch2[0].data[0].stype == stype
    np.testing.assert_array_equal(epoch2[0].data[0].asnumpy(), x[[8, 9, 0, 1]])
    it.hard_reset()
    assert [b.label[0].asnumpy()[0] for b in it] == [0, 4]


@pytest.mark.parametrize("stype", ["default", "csr"])
def test_ndarrayiter_shuffle_follows_numpy_seed(stype):
    x = _x()
    np.random.seed(7)
    it = ITERS[stype](mx.nd.array(x).tostype(stype), np.arange(10), batch_size=5, shuffle=True)
    np.random.seed(7)
    perm = np.arange(10)
    np.random.shuffle(perm)
    got = np.concatenate([b.label[0].asnumpy() for b in it]).astype(int)
    assert got.tolist() == perm.tolist()
    it.reset()
    again = [b for b in it]
    labels = np.concatenate([b.label[0].asnumpy() for b in again]).astype(int)
    assert sorted(labels.tolist()) == list(range(10))
    for b in again:  # data and labels stay paired
        np.testing.assert_array_equal(b.data[0].asnumpy(), x[b.label[0].asnumpy().astype(int)])


def test_ndarrayiter_inputs_scipy_dict_list():
    x = _x()
    m = sp.csr_matrix(x)
    it = mx.io.SparseNDArrayIter({"b": m, "a": x}, {"y": np.ones(10)}, batch_size=5)
    assert [d.name for d in it.provide_data] == ["a", "b"]
    b = it.next()
    assert [d.stype for d in b.data] == ["default", "csr"] and b.data[0].dtype == np.float32
    it = mx.io.NDArrayIter([x, x], batch_size=5)
    assert [d.name for d in it.provide_data] == ["_0_data", "_1_data"]
    with pytest.raises(mx.base.MXNetError, match="last_batch_handle"):
        mx.io.NDArrayIter(x, batch_size=2, last_batch_handle="wrap")
    with pytest.raises(mx.base.MXNetError, match="9 examples"):
        mx.io.NDArrayIter(x, np.ones(9), batch_size=2)
    with pytest.raises(TypeError):
        mx.io.NDArrayIter(3, batch_size=2)
    assert issubclass(DataIterError, mx.base.MXNetError)


def test_resize_iter():
    it = mx.io.ResizeIter(mx.io.NDArrayIter(_x(), batch_size=4), 5)
    assert len(list(it)) == 5


def test_libsvm_numbers_convert_as_float_then_float32(tmp_path):
    """Every number form the fast path takes or hands to ``float()``: the same float32 as
    ``np.float32(float(text))``; more than 4,096 slow-path numbers in one chunk too."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal(6000) * 10.0 ** rng.integers(-30, 30, 6000)
    forms = [repr(float(v)) for v in x[:5000]]  # 17 digits, large exponents: float()
    forms += [f"{v:.6g}" for v in x[5000:5500]] + [f"{v:.3e}" for v in x[5500:]]
    forms += ["0", "-0", "+1.5", ".5", "5.", "1E3", "1e+2", "-2.5e-3", "00012.50", "inf", "-inf", "nan",
              "123456789012345678901234", "0.000000000000000000000000001", "1e-400", "3.4e39"]
    path = tmp_path / "numbers.t"
    path.write_text("".join(f"{t} 0:{t}\n" for t in forms))
    p = parse_libsvm(str(path), 1)
    with np.errstate(over="ignore"):
        want = np.array([np.float32(float(t)) for t in forms])
    np.testing.assert_array_equal(p.labels, want)
    np.testing.assert_array_equal(p.data, want)
    assert np.signbit(p.data[forms.index("-0")])


@pytest.mark.parametrize("num_parts", [2, 3, 5, 40])
def test_libsvm_parts_of_a_folder_cover_the_rows_once(tmp_path, num_parts):
    folder = tmp_path / "many"
    folder.mkdir()
    labels, rows = random_rows(36, 9, seed=8)
    for i, (a, b) in enumerate([(0, 5), (5, 6), (6, 30), (30, 36)]):
        write_libsvm(folder / f"{i}.t", labels[a:b], rows[a:b])
    ref, y = reference(labels, rows, 9)
    parts = [parse_libsvm(str(folder), 9, k, num_parts) for k in range(num_parts)]
    np.testing.assert_array_equal(np.concatenate([p.labels for p in parts]), y)
    got = sp.vstack([sp.csr_matrix((p.data, p.indices, p.indptr), shape=(p.rows, 9)) for p in parts])
    np.testing.assert_array_equal(got.toarray(), ref.toarray())
