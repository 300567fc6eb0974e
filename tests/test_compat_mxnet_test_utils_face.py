"""``mx.test_utils`` beyond comparisons: what ``from mxnet.test_utils import *`` hands a
test, ``discard_stderr`` / ``same_array``, the data-set fetchers (downloading only what is
missing, here from file:// URLs, never the network) and the statistics and matrix helpers,
checked against NumPy / SciPy."""
import bz2
import os
import sys
import urllib.request
import zipfile

import numpy as np
import pytest
import scipy.sparse as sp

import sparse_ops.compat.mxnet as mx
import sparse_ops.compat.mxnet.test_utils as tu


def test_star_import_hands_over_mxnets_public_names():
    ns = {}
    exec("from sparse_ops.compat.mxnet.test_utils import *", ns)
    for name in ("NDArray", "array", "Context", "current_context", "discard_stderr", "same_array",
                 "get_mnist_ubyte", "get_bz2_data", "get_cifar10", "download", "np", "mx", "rnd", "npt",
                 "assert_almost_equal", "rand_ndarray", "gzip", "time", "struct", "logging", "traceback",
                 "numbers", "contextmanager", "default_numeric_eps", "DummyIter", "environment"):
        assert name in ns, name
    assert ns["NDArray"] is mx.nd.NDArray and ns["mx"] is mx and ns["np"] is np
    assert all(hasattr(tu, n) for n in tu.__all__)


def test_discard_stderr_silences_the_file_descriptor(capfd):
    with tu.discard_stderr():
        os.write(2, b"from C code\n")
        print("from Python", file=sys.stderr)
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n"


def test_same_array_tells_shared_memory():
    a = mx.nd.array([1.0, 2.0])
    assert tu.same_array(a, a)
    assert not tu.same_array(a, a.copy())
    np.testing.assert_array_equal(a.asnumpy(), [1, 2])  # restored


# ---- downloads ------------------------------------------------------------------------------------------
def _no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("tried to download")
    monkeypatch.setattr(urllib.request, "urlopen", refuse)


def test_download_file_url_skip_and_overwrite(tmp_path):
    src = tmp_path / "src.bin"
    src.write_bytes(b"abc")
    out = tu.download(src.as_uri(), dirname=str(tmp_path / "d"))
    assert out == str(tmp_path / "d" / "src.bin") and open(out, "rb").read() == b"abc"
    src.write_bytes(b"new")
    assert open(tu.download(src.as_uri(), dirname=str(tmp_path / "d")), "rb").read() == b"abc"  # kept
    assert open(tu.download(src.as_uri(), dirname=str(tmp_path / "d"), overwrite=True), "rb").read() == b"new"
    named = tu.download(src.as_uri(), fname=str(tmp_path / "x" / "other.bin"))
    assert named == str(tmp_path / "x" / "other.bin") and os.path.isfile(named)


def test_download_retries_then_raises(tmp_path, capsys):
    missing = (tmp_path / "absent.bin").as_uri()
    with pytest.raises(OSError):
        tu.download(missing, dirname=str(tmp_path / "d"), retries=2)
    assert "1 attempt left" in capsys.readouterr().out
    assert os.listdir(tmp_path / "d") == []  # no partial file
    with pytest.raises(ValueError, match="retries"):
        tu.download(missing, retries=-1)


def test_get_bz2_data_downloads_only_when_missing(tmp_path, monkeypatch):
    text = b"1 0:1.5\n-1 3:2\n"
    origin = tmp_path / "remote" / "set.t.bz2"
    origin.parent.mkdir()
    origin.write_bytes(bz2.compress(text))
    data_dir = str(tmp_path / "data")
    tu.get_bz2_data(data_dir, "set.t", origin.as_uri(), "set.t.bz2")
    assert open(os.path.join(data_dir, "set.t"), "rb").read() == text
    assert not os.path.exists(os.path.join(data_dir, "set.t.bz2"))  # the archive is removed
    _no_network(monkeypatch)
    tu.get_bz2_data(data_dir, "set.t", "http://unused.invalid/set.t.bz2", "set.t.bz2")


def test_get_mnist_ubyte_fetches_the_zip_only_when_a_file_is_missing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    names = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]
    archive = tmp_path / "mnist.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for n in names:
            zf.writestr(n, n.encode())
    calls = []

    def fake_download(url, fname=None, dirname=None, overwrite=False, retries=5):
        calls.append((url, dirname))
        target = os.path.join(dirname, url.split("/")[-1])
        with open(archive, "rb") as src, open(target, "wb") as out:
            out.write(src.read())
        return target

    monkeypatch.setattr(tu, "download", fake_download)
    tu.get_mnist_ubyte()
    assert calls == [("http://data.mxnet.io/mxnet/data/mnist.zip", "data")]
    assert all(open(f"data/{n}", "rb").read() == n.encode() for n in names)
    tu.get_mnist_ubyte()
    assert len(calls) == 1
    os.remove("data/t10k-labels-idx1-ubyte")
    tu.get_mnist_ubyte()
    assert len(calls) == 2 and os.path.exists("data/t10k-labels-idx1-ubyte")


def test_get_cifar10_skips_when_present(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.makedirs("data/cifar")
    for n in ("train.rec", "test.rec", "train.lst", "test.lst"):
        open(f"data/cifar/{n}", "w").close()
    _no_network(monkeypatch)
    tu.get_cifar10()


# ---- helpers --------------------------------------------------------------------------------------------
def test_tolerances_and_numeric_eps():
    assert tu.default_numeric_eps()[np.dtype(np.float32)] == 2.0 ** -9
    x = np.zeros(2, dtype=np.float16)
    assert tu.get_tolerance(x, None, tu.default_rtols()) == 1e-2
    assert tu.get_tolerance(x, {np.dtype(np.float16): 0.5}, tu.default_rtols()) == 0.5
    assert tu.get_tolerance(x, 3, tu.default_rtols()) == 3
    assert tu.get_etol() == 0 and tu.get_etol(0.1) == 0.1


def test_nan_ignoring_and_error_rate_comparisons():
    a = np.array([1.0, np.nan, 3.0])
    tu.assert_almost_equal_ignore_nan(a, np.array([1.0, 5.0, np.nan]))
    with pytest.raises(AssertionError):
        tu.assert_almost_equal_ignore_nan(a, np.array([2.0, 5.0, 3.0]))
    b = np.arange(10.0)
    c = b.copy()
    c[3] += 1
    tu.assert_almost_equal_with_err(b, c, etol=0.2)  # 10% of the elements differ
    with pytest.raises(AssertionError, match="mismatch 10"):
        tu.assert_almost_equal_with_err(b, c, etol=0.05)
    with pytest.raises(AssertionError):
        tu.checkShapes(b, b[:3])
    assert "Location of maximum error: (1,)" in tu.locationError(b, c, (1,), ("a", "b"), maxError=True)


def test_retry_reruns_failing_attempts():
    attempts = []

    @tu.retry(3)
    def flaky():
        attempts.append(1)
        assert len(attempts) == 3

    flaky()
    assert len(attempts) == 3

    @tu.retry(2)
    def broken():
        raise AssertionError("always")

    with pytest.raises(AssertionError, match="always"):
        broken()


def test_shuffle_csr_column_indices_permutes_within_rows_only():
    m = sp.random(6, 8, density=0.5, format="csr", random_state=1)
    before = [sorted(m.indices[m.indptr[i]:m.indptr[i + 1]].tolist()) for i in range(6)]
    data = m.data.copy()
    np.random.seed(4)
    tu.shuffle_csr_column_indices(m)
    after = [sorted(m.indices[m.indptr[i]:m.indptr[i + 1]].tolist()) for i in range(6)]
    assert before == after and np.array_equal(m.data, data)


def test_small_constructors():
    np.testing.assert_array_equal(tu.create_2d_tensor(3, 2).asnumpy(), [[0, 0], [1, 1], [2, 2]])
    assert tu.create_vector(4).dtype == np.int64
    np.testing.assert_array_equal(tu.get_identity_mat(3).asnumpy(), np.eye(3))
    assert tu.get_identity_mat_batch(2).shape == (2, 2, 2)
    x, y = tu.rand_coord_2d(0, 5, 10, 12)
    assert 0 <= x < 5 and 10 <= y < 12


@pytest.mark.parametrize("shape,target", [((2, 3, 4), (3, 1)), ((2, 3), (2, 1)), ((4,), ()), ((2, 3), (1, 3))])
def test_collapse_sum_like_inverts_broadcasting(shape, target):
    a = np.random.default_rng(0).standard_normal(shape)
    got = tu.collapse_sum_like(a, target)
    assert np.shape(got) == target
    # the sum of a times any broadcast vector equals got times that vector
    v = np.random.default_rng(1).standard_normal(target)
    np.testing.assert_allclose(np.sum(a * np.broadcast_to(v, shape)), np.sum(got * v))


def test_generator_statistics():
    import scipy.stats as ss

    np.random.seed(0)
    gen = lambda n: np.random.normal(0, 1, size=n)  # noqa: E731
    assert tu.mean_check(gen, 0, 1, nsamples=100000)
    assert not tu.mean_check(gen, 1, 1, nsamples=100000)
    assert tu.var_check(gen, 1, nsamples=100000)
    buckets, probs = tu.gen_buckets_probs_with_ppf(lambda q: ss.norm.ppf(q, 0, 1), 5)
    assert len(buckets) == 5 and probs == [0.2] * 5 and buckets[0][0] == -np.inf
    ps = tu.verify_generator(gen, buckets, probs, nsamples=20000, nrepeat=3)
    assert len(ps) == 3
    with pytest.raises(AssertionError, match="Generator test fails"):
        tu.verify_generator(lambda n: np.random.normal(1, 1, size=n), buckets, probs, nsamples=20000, nrepeat=3)
    p, obs, _ = tu.chi_square_check(lambda n: np.random.randint(0, 3, size=n), [0, 1, 2], [1 / 3] * 3, 3000)
    assert obs.sum() == 3000 and p > 1e-4
    # expected counts truncated to ints (3,333 x 3 of 10,000), as MXNet's are: totals that differ,
    # which scipy.stats.chisquare refuses since 1.11; the p value is Pearson's all the same
    p, obs, exp = tu.chi_square_check(lambda n: np.random.uniform(0, 1, size=n), [(0, 1 / 3), (1 / 3, 2 / 3),
                                                                                  (2 / 3, 1)], [1 / 3] * 3, 10000)
    assert exp.tolist() == [3333] * 3 and obs.sum() == 10000
    assert p == pytest.approx(ss.chi2.sf((((obs - exp) ** 2) / exp).sum(), 2)) and p > 1e-4


def test_matrices_with_known_spectra():
    np.random.seed(2)
    m = tu.new_matrix_with_real_eigvals_2d(5)
    ev = np.linalg.eigvals(m)
    assert np.abs(ev.imag).max() < 1e-8 and np.abs(ev.real).max() < 10
    q = tu.new_orthonormal_matrix_2d(4)
    np.testing.assert_allclose(q @ q.T, np.eye(4), atol=1e-12)
    s = tu.new_sym_matrix_with_real_eigvals_nd((2, 3, 3))
    assert s.shape == (2, 3, 3) and np.allclose(s, np.swapaxes(s, 1, 2))
    assert tu.new_matrix_with_real_eigvals_nd((2, 2, 4, 4)).shape == (2, 2, 4, 4)


def test_default_context_and_platform_answers():
    assert tu.default_context() == mx.cpu()
    with mx.cpu(0):
        tu.set_default_context(mx.cpu(1))
        assert tu.default_context() == mx.cpu(1)
    assert tu.default_context() == mx.cpu()
    assert list(tu.list_gpus()) == list(range(mx.context.num_gpus()))
    assert tu.has_tvm_ops() is False and tu.is_op_runnable()
    assert tu.effective_dtype(np.zeros(1, np.float32)) == np.float32


def test_dummy_iter_repeats_the_first_batch():
    real = mx.io.NDArrayIter(np.arange(6.0).reshape(6, 1), batch_size=2)
    it = tu.DummyIter(real)
    assert it.batch_size == 2 and it.provide_data == real.provide_data
    assert it.next() is it.next()
