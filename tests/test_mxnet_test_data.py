"""``tools/mxnet_test_data.generate``: the offline stand-ins for the data sets of MXNet's
test_io.py have the names, formats, counts and properties those tests check, are the same
bytes on every run, and read through the face's MNISTIter and LibSVMIter."""
import hashlib
import sys
from pathlib import Path

import numpy as np
import pytest

import sparse_ops.compat.mxnet as mx
import sparse_ops.compat.mxnet.test_utils as tu

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import mxnet_test_data
    finally:
        sys.path.remove(str(ROOT / "tools"))
    folder = tmp_path_factory.mktemp("mxnet-data")
    return mxnet_test_data, folder, mxnet_test_data.generate(folder)


def _idx(path):
    raw = path.read_bytes()
    magic, count = np.frombuffer(raw[:8], ">i4")
    return int(magic), int(count), raw


def test_mnist_files(generated):
    _, folder, written = generated
    assert written == ["data/train-images-idx3-ubyte", "data/train-labels-idx1-ubyte",
                       "data/t10k-images-idx3-ubyte", "data/t10k-labels-idx1-ubyte", "data/news20.t"]
    for prefix, n in (("train", 60000), ("t10k", 10000)):
        magic, count, raw = _idx(folder / f"data/{prefix}-images-idx3-ubyte")
        assert (magic, count) == (2051, n) and tuple(np.frombuffer(raw[8:16], ">i4")) == (28, 28)
        assert len(raw) == 16 + n * 28 * 28
        images = np.frombuffer(raw[16:], np.uint8)
        assert 0.05 < np.count_nonzero(images) / images.size < 0.5  # mostly zeros, like MNIST
        magic, count, raw = _idx(folder / f"data/{prefix}-labels-idx1-ubyte")
        labels = np.frombuffer(raw[8:], np.uint8)
        assert (magic, count, labels.size) == (2049, n, n) and set(np.unique(labels)) == set(range(10))


def test_news20_file(generated):
    _, folder, _ = generated
    lines = (folder / "data/news20.t").read_text().splitlines()
    assert len(lines) == 3993
    labels = []
    for line in lines:
        label, *pairs = line.split(" ")
        labels.append(int(label))
        idx = np.array([int(p.split(":")[0]) for p in pairs])
        vals = np.array([float(p.split(":")[1]) for p in pairs])
        assert np.all(np.diff(idx) > 0) and idx.min() >= 0 and idx.max() < 62061 and np.all(vals > 0)
    assert set(labels) == set(range(1, 21))


def test_generation_is_deterministic(generated, tmp_path):
    module, folder, written = generated
    again = module.generate(tmp_path)
    assert again == written
    digest = lambda p: hashlib.sha256(p.read_bytes()).hexdigest()  # noqa: E731
    assert all(digest(folder / w) == digest(tmp_path / w) for w in written)


def test_the_tests_find_the_files_and_read_them(generated, monkeypatch):
    _, folder, _ = generated
    monkeypatch.chdir(folder)

    def refuse(*args, **kwargs):
        raise AssertionError("tried to download")

    monkeypatch.setattr(tu, "download", refuse)
    tu.get_mnist_ubyte()
    tu.get_bz2_data(str(folder / "data"), "news20.t", "https://unused.invalid/news20.t.bz2", "news20.t.bz2")
    it = mx.io.MNISTIter(image="data/train-images-idx3-ubyte", label="data/train-labels-idx1-ubyte",
                         batch_size=100, shuffle=1, flat=1, seed=10)
    assert sum(1 for _ in it) == 600
    svm = mx.io.LibSVMIter(data_libsvm="data/news20.t", data_shape=(62061,), batch_size=33)
    n = 0
    for b in svm:
        y = b.label[0].asnumpy()
        assert ((y > 0) & (y <= 20)).all()
        n += 1
    assert n == 121  # 3993 = 33 * 121: whole batches, as the MXNet test expects
