"""The MXNet linear-classification loop through ``sparse_ops.compat.mxnet`` (LibSVMIter,
kv.row_sparse_pull, set_optimizer) matches the same loop on the native API step by step."""
import numpy as np

import cookbook_helpers  # noqa: F401  (first: puts the cookbook on sys.path when not installed)
from sparse_ops_cookbook.demo import mxnet_linear
from sparse_ops.compat.mxnet.io import parse_libsvm


def test_generated_file_parses_back(tmp_path):
    path = str(tmp_path / "d.libsvm")
    true_w = mxnet_linear.make_libsvm(path, rows=300, features=400, seed=1)
    p = parse_libsvm(path, 400)
    assert p.rows == 300 and true_w.shape == (400,)
    assert set(np.unique(p.labels).tolist()) <= {0.0, 1.0}
    assert p.indices.max() < 400 and (p.data >= 0.5).all()


def test_mxnet_and_native_trajectories_match(tmp_path):
    r = mxnet_linear.run(rows=600, features=800, batch_size=50, epochs=2, folder=str(tmp_path))
    mx_t, so_t = r["mxnet"], r["native"]
    assert len(mx_t.weights) == len(so_t.weights) == 24
    for a, b in zip(mx_t.weights, so_t.weights):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(mx_t.losses, so_t.losses, rtol=1e-5)
    assert mx_t.losses[0] > min(mx_t.losses[-6:])  # it learns
    # lazy updates: a step changes only the weights of the features its batch holds
    changed = np.flatnonzero(mx_t.weights[1] != mx_t.weights[0])
    assert 0 < changed.size < 800


def test_mx_optimizer_sgd_takes_lazy_sgds_place(tmp_path):
    """``mx.optimizer.SGD(lazy_update=True)`` (where ``mx.optimizer`` exists) in place of the
    example's LazySGD: the same trajectory."""
    import pytest

    import sparse_ops.compat.mxnet as mx

    opt = getattr(mx, "optimizer", None)
    if opt is None or not hasattr(opt, "SGD"):
        pytest.skip("mx.optimizer is not in this tree")
    path = str(tmp_path / "d.libsvm")
    mxnet_linear.make_libsvm(path, rows=300, features=400, seed=2)
    sgd = opt.SGD(learning_rate=0.5, wd=1e-4, rescale_grad=1 / 50, lazy_update=True)
    a = mxnet_linear.train_mxnet(path, 400, batch_size=50, epochs=1, optimizer=sgd)
    b = mxnet_linear.train_native(path, 400, batch_size=50, epochs=1)
    for x, y in zip(a.weights, b.weights):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-7)
