"""``mx.io`` as MXNet 1.9.1 behaves: NDArrayIter (dense batches, csr only with 'discard',
its input rules, layouts, tiling pad, shuffle), MNISTIter (idx-ubyte files, /256 scaling,
one shuffle per construction, parts) and CSVIter (dtypes, round_batch wrap and stale pad
rows, labels). Expected values come from NumPy / SciPy on the same data."""
import numpy as np
import pytest
import scipy.sparse as sp

import sparse_ops.compat.mxnet as mx
from sparse_ops.compat.mxnet.io import DataIterNotImplementedError

MXNetError = mx.base.MXNetError


# ---- NDArrayIter ----------------------------------------------------------------------------------------
def _csr_data(rows=7, cols=5, dtype=np.float32, seed=3):
    m = sp.random(rows, cols, density=0.4, format="csr", random_state=seed, dtype=np.float64).astype(dtype)
    return m, m.toarray()


@pytest.mark.parametrize("handle", ["pad", "roll_over"])
def test_csr_input_takes_only_discard(handle):
    m, dense = _csr_data()
    for data in ({"data": mx.nd.sparse.csr_matrix(m)}, {"data": m}, mx.nd.sparse.csr_matrix(m)):
        with pytest.raises(NotImplementedError, match="last_batch_handle='discard'") as info:
            mx.io.NDArrayIter(data, dense, 2, last_batch_handle=handle)
        assert isinstance(info.value, MXNetError) and isinstance(info.value, DataIterNotImplementedError)
    with pytest.raises(NotImplementedError):  # a csr label counts too
        mx.io.NDArrayIter(dense, mx.nd.sparse.csr_matrix(m), 2, last_batch_handle=handle)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_csr_batches_are_dense_rows(dtype):
    m, dense = _csr_data(dtype=dtype)
    labels = np.arange(7, dtype=np.float32).reshape(7, 1)
    it = mx.io.NDArrayIter({"x": mx.nd.sparse.csr_matrix(m), "y": dense}, labels, 3, last_batch_handle="discard")
    assert [d.name for d in it.provide_data] == ["x", "y"]
    assert it.provide_data[0].shape == (3, 5) and it.provide_label[0].shape == (3, 1)
    batches = list(it)
    assert len(batches) == 2  # 7 // 3, the rest discarded
    for i, b in enumerate(batches):
        x, y = b.data
        assert type(x) is mx.nd.NDArray and x.stype == "default" and x.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(x.asnumpy(), dense[3 * i:3 * i + 3])
        np.testing.assert_array_equal(y.asnumpy(), dense[3 * i:3 * i + 3].astype(np.float32))
        np.testing.assert_array_equal(b.label[0].asnumpy(), labels[3 * i:3 * i + 3])
        assert b.pad == 0
    with pytest.raises(StopIteration):
        it.next()


def test_csr_shuffle_keeps_rows_paired_and_csr_dtype():
    m, dense = _csr_data(rows=8, dtype=np.float64)
    np.random.seed(11)
    it = mx.io.NDArrayIter({"data": m}, np.arange(8.0), 2, shuffle=True, last_batch_handle="discard")
    np.random.seed(11)
    perm = np.arange(8)
    np.random.shuffle(perm)
    assert it.data[0][1].stype == "csr" and it.data[0][1].dtype == np.float64
    got = [(b.data[0].asnumpy(), b.label[0].asnumpy()) for b in it]
    np.testing.assert_array_equal(np.concatenate([g[1] for g in got]), perm)
    np.testing.assert_array_equal(np.concatenate([g[0] for g in got]), dense[perm])


def test_shuffled_dense_input_is_rebuilt_as_float32():
    x = np.arange(12, dtype=np.float64).reshape(6, 2)
    it = mx.io.NDArrayIter(mx.nd.array(x, dtype=np.float64), batch_size=3, shuffle=True)
    b = it.next()
    assert b.data[0].dtype == np.float32  # MXNet: array(v.asnumpy()[idx]) takes float32
    plain = mx.io.NDArrayIter(mx.nd.array(x, dtype=np.float64), batch_size=3)
    assert plain.next().data[0].dtype == np.float64


def test_input_forms_mxnet_refuses():
    x = np.ones((4, 2))
    with pytest.raises(TypeError, match="a list or dict"):  # a SciPy matrix alone
        mx.io.NDArrayIter(sp.csr_matrix(x), batch_size=2, last_batch_handle="discard")
    with pytest.raises(TypeError):  # a tuple is not a list
        mx.io.NDArrayIter((x, x), batch_size=2)
    with pytest.raises(TypeError, match="invalid type"):
        mx.io.NDArrayIter({"data": object()}, batch_size=2)
    it = mx.io.NDArrayIter(x, [], 2)
    assert it.provide_label == [] and it.next().label == []


def test_pad_longer_than_the_data_tiles_it():
    data = np.arange(10)
    it = mx.io.NDArrayIter(data=data, batch_size=25, last_batch_handle="pad")
    b = it.next()
    np.testing.assert_array_equal(b.data[0].asnumpy(), np.concatenate([data, data, data[:5]]))
    assert b.pad == 15 and b.data[0].dtype == np.float32


def test_batch_axis_follows_the_layout():
    x = np.arange(4 * 4 * 2, dtype=np.float32).reshape(4, 4, 2)  # (T, N, C); MXNet counts examples on axis 0
    it = mx.io.NDArrayIter(x, batch_size=2, layout="TNC")
    assert it.provide_data[0].shape == (4, 2, 2) and it.provide_data[0].layout == "TNC"
    batches = list(it)
    assert len(batches) == 2
    np.testing.assert_array_equal(batches[1].data[0].asnumpy(), x[:, 2:4])


def test_row_sparse_input_gives_dense_batches_with_pad():
    dense = np.zeros((5, 3), dtype=np.float32)
    dense[[1, 4]] = [[1, 2, 3], [4, 5, 6]]
    it = mx.io.NDArrayIter(mx.nd.array(dense).tostype("row_sparse"), batch_size=2)
    batches = list(it)
    assert [b.pad for b in batches] == [0, 0, 1]
    assert all(b.data[0].stype == "default" for b in batches)
    np.testing.assert_array_equal(batches[2].data[0].asnumpy(), dense[[4, 0]])


def test_batches_are_copies():
    x = mx.nd.array(np.zeros((4, 2)))
    b = mx.io.NDArrayIter(x, batch_size=2).next()
    b.data[0][:] = 5
    assert x.asnumpy().sum() == 0


# ---- MNISTIter ------------------------------------------------------------------------------------------
def write_idx(tmp_path, n=25, rows=4, cols=3, seed=0):
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(n, rows, cols), dtype=np.uint8)
    labels = rng.integers(0, 10, size=n, dtype=np.uint8)
    img, lbl = tmp_path / "img-idx3-ubyte", tmp_path / "lbl-idx1-ubyte"
    img.write_bytes(np.array([2051, n, rows, cols], ">i4").tobytes() + images.tobytes())
    lbl.write_bytes(np.array([2049, n], ">i4").tobytes() + labels.tobytes())
    return str(img), str(lbl), images, labels


def test_mnist_batches_scaling_and_shapes(tmp_path):
    img, lbl, images, labels = write_idx(tmp_path)
    it = mx.io.MNISTIter(image=img, label=lbl, batch_size=10, shuffle=False, flat=True, silent=True,
                         data_shape=(12,))  # an unknown argument is ignored, as MXNet's parser does
    assert it.provide_data[0].shape == (10, 12) and it.provide_label[0].shape == (10,)
    batches = list(it)
    assert len(batches) == 2  # 25 // 10: the partial batch is dropped
    for i, b in enumerate(batches):
        d, y = b.data[0], b.label[0]
        assert d.dtype == np.float32 and y.dtype == np.float32 and y.shape == (10,)
        np.testing.assert_array_equal(d.asnumpy(), images[10 * i:10 * i + 10].reshape(10, 12) / np.float32(256))
        np.testing.assert_array_equal(y.asnumpy(), labels[10 * i:10 * i + 10])
        assert b.pad == 0 and b.index.dtype == np.uint64 and not b.index.any()
    square = mx.io.MNISTIter(image=img, label=lbl, batch_size=5, shuffle=False)
    assert square.next().data[0].shape == (5, 1, 4, 3)


def test_mnist_shuffles_once_from_the_seed(tmp_path):
    img, lbl, images, labels = write_idx(tmp_path, n=40)

    def epoch(it):
        return np.concatenate([b.label[0].asnumpy() for b in it])

    a = mx.io.MNISTIter(image=img, label=lbl, batch_size=8, shuffle=1, flat=1, seed=10)
    first = epoch(a)
    a.reset()
    assert np.array_equal(epoch(a), first)  # the order is fixed at construction
    assert sorted(first.tolist()) == sorted(labels[:40].astype(np.float32).tolist())
    assert np.array_equal(epoch(mx.io.MNISTIter(image=img, label=lbl, batch_size=8, flat=1, seed=10)), first)
    orders = {tuple(epoch(mx.io.MNISTIter(image=img, label=lbl, batch_size=8, flat=1, seed=s))) for s in range(4)}
    assert len(orders) > 1
    # images stay with their labels
    it = mx.io.MNISTIter(image=img, label=lbl, batch_size=40, flat=1, seed=3)
    b = it.next()
    flat = images.reshape(40, -1) / np.float32(256)
    for row, y in zip(b.data[0].asnumpy(), b.label[0].asnumpy()):
        match = np.flatnonzero((flat == row).all(axis=1))
        assert any(labels[j] == y for j in match)


def test_mnist_iter_next_reset_and_getters(tmp_path):
    img, lbl, _, labels = write_idx(tmp_path)
    it = mx.io.MNISTIter(image=img, label=lbl, batch_size=5, shuffle=False, flat=True)
    assert it.iter_next()
    np.testing.assert_array_equal(it.getlabel().asnumpy(), labels[:5])
    assert it.iter_next() and it.iter_next()
    np.testing.assert_array_equal(it.getlabel().asnumpy(), labels[10:15])
    it.reset()
    assert it.iter_next()
    np.testing.assert_array_equal(it.getlabel().asnumpy(), labels[:5])
    assert it.getpad() == 0 and it.getindex().shape == (5,)


@pytest.mark.parametrize("num_parts,part_index", [(3, 0), (3, 1), (3, 2), (4, 3)])
def test_mnist_parts(tmp_path, num_parts, part_index):
    img, lbl, _, labels = write_idx(tmp_path, n=25)
    start, end = int(25 / num_parts * part_index), int(25 / num_parts * (part_index + 1))
    it = mx.io.MNISTIter(image=img, label=lbl, batch_size=2, shuffle=False, flat=True, num_parts=num_parts,
                         part_index=part_index)
    got = np.concatenate([b.label[0].asnumpy() for b in it])
    np.testing.assert_array_equal(got, labels[start:end][:(end - start) // 2 * 2])


def test_mnist_refusals(tmp_path):
    img, lbl, _, _ = write_idx(tmp_path)
    with pytest.raises(TypeError, match="keyword arguments"):
        mx.io.MNISTIter(img, lbl)
    with pytest.raises(MXNetError, match="magic number 2049"):
        mx.io.MNISTIter(image=lbl, label=lbl)
    short = tmp_path / "short"
    short.write_bytes(open(img, "rb").read()[:100])
    with pytest.raises(MXNetError, match="invalid mnist format"):
        mx.io.MNISTIter(image=str(short), label=lbl)
    with pytest.raises(MXNetError, match="No such file"):
        mx.io.MNISTIter(image=str(tmp_path / "absent"), label=lbl)
    with pytest.raises(MXNetError, match="part_index"):
        mx.io.MNISTIter(image=img, label=lbl, num_parts=2, part_index=2)
    with pytest.raises(MXNetError, match="no batch"):
        mx.io.MNISTIter(image=img, label=lbl, batch_size=26)


# ---- CSVIter --------------------------------------------------------------------------------------------
def write_csv(path, rows):
    path.write_text("".join(",".join(str(v) for v in r) + "\n" for r in rows))
    return str(path)


ROWS = [[1, 2, 3], [2, 3, 4], [3, 4, 5], [4, 5, 6]]


def test_csv_round_batch_wraps_and_next_epoch_continues(tmp_path):
    path = write_csv(tmp_path / "d.csv", ROWS)
    it = mx.io.CSVIter(data_csv=path, data_shape=(3,), batch_size=3)
    first = [(b.data[0].asnumpy().tolist(), b.pad, b.index.tolist()) for b in it]
    assert first == [([[1, 2, 3], [2, 3, 4], [3, 4, 5]], 0, [0, 1, 2]),
                     ([[4, 5, 6], [1, 2, 3], [2, 3, 4]], 2, [3, 0, 1])]
    it.reset()  # the wrap used rows 0 and 1: the next epoch starts at row 2
    second = [(b.data[0].asnumpy().tolist(), b.pad) for b in it]
    assert second == [([[3, 4, 5], [4, 5, 6], [1, 2, 3]], 1)]


def test_csv_without_round_batch_pads_with_stale_rows(tmp_path):
    path = write_csv(tmp_path / "d.csv", ROWS)
    it = mx.io.CSVIter(data_csv=path, data_shape=(3,), batch_size=3, round_batch=False, dtype="int32")
    for _ in range(2):  # every epoch restarts at row 0
        got = [(b.data[0].asnumpy().tolist(), b.pad) for b in it]
        assert got == [([[1, 2, 3], [2, 3, 4], [3, 4, 5]], 0), ([[4, 5, 6], [2, 3, 4], [3, 4, 5]], 2)]
        it.reset()


@pytest.mark.parametrize("dtype,value", [("float32", "1.5"), ("int32", "200000001"), ("int64", "2147483648")])
def test_csv_dtypes_and_shapes(tmp_path, dtype, value):
    path = write_csv(tmp_path / "d.csv", [[value] * 6] * 5)
    it = mx.io.CSVIter(data_csv=path, data_shape=(2, 3), batch_size=5, dtype=dtype)
    b = it.next()
    expected = np.full((5, 2, 3), np.array(value).astype(np.float64).astype(dtype))
    assert b.data[0].dtype == np.dtype(dtype) and b.data[0].shape == (5, 2, 3)
    np.testing.assert_array_equal(b.data[0].asnumpy(), expected)
    assert b.label[0].shape == (5,) and b.label[0].dtype == np.dtype(dtype) and not b.label[0].asnumpy().any()


def test_csv_labels_and_folders(tmp_path):
    folder = tmp_path / "parts"
    folder.mkdir()
    write_csv(folder / "a.csv", ROWS[:2])
    write_csv(folder / "b.csv", ROWS[2:])
    one = write_csv(tmp_path / "l1.csv", [[7], [8], [9], [10], [11]])  # extra label rows are ignored
    two = write_csv(tmp_path / "l2.csv", [[1, 2], [3, 4], [5, 6], [7, 8]])
    it = mx.io.CSVIter(data_csv=str(folder), data_shape=(3,), label_csv=one, batch_size=2)
    assert it.provide_label[0].shape == (2,)
    got = [(b.data[0].asnumpy().tolist(), b.label[0].asnumpy().tolist()) for b in it]
    assert got == [([[1, 2, 3], [2, 3, 4]], [7, 8]), ([[3, 4, 5], [4, 5, 6]], [9, 10])]
    it = mx.io.CSVIter(data_csv=str(folder), data_shape=(3,), label_csv=two, label_shape=(2,), batch_size=4)
    np.testing.assert_array_equal(it.next().label[0].asnumpy(), [[1, 2], [3, 4], [5, 6], [7, 8]])


def test_csv_refusals(tmp_path):
    path = write_csv(tmp_path / "d.csv", ROWS)
    with pytest.raises(MXNetError, match="needs 4"):
        mx.io.CSVIter(data_csv=path, data_shape=(2, 2), batch_size=2)
    with pytest.raises(ValueError, match="float64 is not supported"):
        mx.io.CSVIter(data_csv=path, data_shape=(3,), batch_size=2, dtype="float64")
    with pytest.raises(TypeError, match="batch_size"):
        mx.io.CSVIter(data_csv=path, data_shape=(3,))
    with pytest.raises(TypeError, match="keyword arguments"):
        mx.io.CSVIter(path, (3,), 2)
    labels = write_csv(tmp_path / "l.csv", [[1], [2]])
    with pytest.raises(MXNetError, match="fewer than"):
        mx.io.CSVIter(data_csv=path, data_shape=(3,), label_csv=labels, batch_size=2)
    with pytest.raises(MXNetError, match="bigger than batch size"):
        mx.io.CSVIter(data_csv=path, data_shape=(3,), batch_size=9)
    ragged = tmp_path / "r.csv"
    ragged.write_text("1,2,3\n4,5\n")
    with pytest.raises(MXNetError, match="r.csv"):
        mx.io.CSVIter(data_csv=str(ragged), data_shape=(3,), batch_size=1)


def test_csv_int32_refuses_a_value_it_would_wrap(tmp_path):
    path = tmp_path / "big.csv"
    path.write_text("1,2,3\n4,3000000000,6\n")
    with pytest.raises(mx.base.MXNetError, match=r"CSVIter: data_csv .*big.csv.: value 3000000000 \(row 2, column "
                                                 r"2\) does not fit dtype int32; read it as int64"):
        mx.io.CSVIter(data_csv=str(path), data_shape=(3,), batch_size=2, dtype="int32")
    batch = next(iter(mx.io.CSVIter(data_csv=str(path), data_shape=(3,), batch_size=2, dtype="int64")))
    np.testing.assert_array_equal(batch.data[0].asnumpy(), [[1, 2, 3], [4, 3000000000, 6]])
