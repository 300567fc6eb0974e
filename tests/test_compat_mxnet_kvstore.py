"""``mx.kv``: the in-process key-value store of the MXNet face, against NumPy references."""
import pickle

import numpy as np
import pytest

import sparse_ops.compat.mxnet as mx
from sparse_ops.compat.mxnet.kvstore import KVStoreError
from sparse_ops.ndarray import RowSparseNDArray

SHAPE = (6, 3)


def rsp(dense, rows):
    """A row_sparse array storing ``rows`` of ``dense``."""
    rows = np.asarray(sorted(rows), dtype=np.int64)
    return mx.nd.sparse.row_sparse_array((dense[rows], rows), shape=dense.shape)


def pulled(kv, key, shape=SHAPE):
    out = mx.nd.zeros(shape)
    kv.pull(key, out=out)
    return out.asnumpy()


class TinySGD:
    """An optimizer with MXNet's ``Optimizer`` protocol: momentum SGD, one state per index."""

    def __init__(self, lr=0.1, momentum=0.9):
        self.lr, self.momentum = lr, momentum
        self.created = []

    def create_state(self, index, weight):
        self.created.append(index)
        return mx.nd.zeros(weight.shape)

    def update(self, index, weight, grad, state):
        g = grad.tostype("default") if grad.stype != "default" else grad
        state[:] = self.momentum * state - self.lr * g
        weight[:] = weight + state


def numpy_momentum(w, grads, lr=0.1, momentum=0.9):
    m = np.zeros_like(w)
    for g in grads:
        m = momentum * m - lr * g
        w = w + m
    return w


# ---- creation and properties ----------------------------------------------------------------------
@pytest.mark.parametrize("name", ["local", "device", "Local", "local_allreduce_cpu", "local_update_cpu"])
def test_create_types(name):
    kv = mx.kv.create(name)
    assert kv.type == name.lower()
    assert kv.rank == 0 and kv.num_workers == 1
    assert kv.is_capable("optimizer")
    assert mx.kvstore.create is mx.kv.create


@pytest.mark.parametrize("name", ["dist_sync", "dist_async", "dist_device_sync", "horovod", "nccl"])
def test_distributed_types_refused(name):
    with pytest.raises(mx.base.MXNetError, match="single-machine.*sparse_ops.dask"):
        mx.kv.create(name)
    with pytest.raises(TypeError):
        mx.kv.create(3)


# ---- init / push / pull -------------------------------------------------------------------------
@pytest.mark.parametrize("key", [3, "w"])
def test_init_pull_copies(key):
    kv = mx.kv.create()
    src = np.arange(18, dtype=np.float32).reshape(SHAPE)
    value = mx.nd.array(src)
    kv.init(key, value)
    value[:] = 0  # the store holds a copy
    np.testing.assert_array_equal(pulled(kv, key), src)
    out = mx.nd.zeros(SHAPE)
    kv.pull(key, out=out)
    out[:] = 5  # and pull copies out
    np.testing.assert_array_equal(pulled(kv, key), src)


def test_lists_of_keys_and_values_per_key():
    kv = mx.kv.create()
    keys = [5, 7, 11]
    kv.init(keys, [mx.nd.zeros(SHAPE)] * 3)
    rng = np.random.default_rng(0)
    grads = [[rng.standard_normal(SHAPE).astype(np.float32) for _ in range(4)] for _ in keys]
    kv.push(keys, [[mx.nd.array(g) for g in gs] for gs in grads])
    outs = [[mx.nd.zeros(SHAPE) for _ in range(2)] for _ in keys]
    kv.pull(keys, out=outs)
    for gs, os_ in zip(grads, outs):
        for o in os_:
            np.testing.assert_allclose(o.asnumpy(), np.sum(gs, axis=0), rtol=1e-6)
    # one key, a list of values: summed; a list of outs: each filled
    kv.push(5, [mx.nd.ones(SHAPE)] * 3)
    outs = [mx.nd.zeros(SHAPE), mx.nd.zeros(SHAPE, ctx=mx.cpu(1))]
    kv.pull(5, out=outs)
    for o in outs:
        np.testing.assert_array_equal(o.asnumpy(), 3)
    assert outs[1].context == mx.cpu(1)


def test_push_row_sparse_stays_row_sparse():
    kv = mx.kv.create()
    kv.init("e", mx.nd.sparse.zeros("row_sparse", SHAPE))
    rng = np.random.default_rng(1)
    dense = [rng.standard_normal(SHAPE).astype(np.float32) for _ in range(3)]
    rows = [[0, 2], [2, 5], [1]]
    kv.push("e", [rsp(d, r) for d, r in zip(dense, rows)])
    stored = kv._store["e"]
    assert stored.stype == "row_sparse"
    assert stored.indices.tolist() == [0, 1, 2, 5]
    expected = sum(np.where(np.isin(np.arange(6), r)[:, None], d, 0) for d, r in zip(dense, rows))
    np.testing.assert_allclose(pulled(kv, "e"), expected, rtol=1e-6)
    # a dense-initialised key takes a single row_sparse push as it is (MXNet's local store)
    kv.init("d", mx.nd.zeros(SHAPE))
    kv.push("d", rsp(dense[0], [1, 4]))
    assert kv._store["d"].stype == "row_sparse"
    np.testing.assert_allclose(pulled(kv, "d")[[1, 4]], dense[0][[1, 4]])


def test_pull_sparse_out_ignored_unless_asked():
    kv = mx.kv.create()
    kv.init(1, mx.nd.ones(SHAPE) * 2)
    out = mx.nd.sparse.zeros("row_sparse", SHAPE)
    with pytest.warns(UserWarning, match="row_sparse_pull"):
        kv.pull(1, out=out)
    assert out.asnumpy().sum() == 0 and out.stype == "row_sparse"
    kv.pull(1, out=out, ignore_sparse=False)
    assert out.stype == "row_sparse"
    np.testing.assert_array_equal(out.asnumpy(), 2)


def test_pushpull_and_broadcast():
    kv = mx.kv.create()
    out = mx.nd.zeros(SHAPE)
    kv.broadcast("a", mx.nd.ones(SHAPE) * 3, out=out)
    np.testing.assert_array_equal(out.asnumpy(), 3)
    v = mx.nd.ones(SHAPE) * 8
    kv.pushpull("a", v)
    np.testing.assert_array_equal(v.asnumpy(), 8)
    kv.pushpull("a", [mx.nd.ones(SHAPE)] * 2, out=out)
    np.testing.assert_array_equal(out.asnumpy(), 2)


def test_device_store_keeps_values_where_given():
    kv = mx.kv.create("device")
    kv.init(0, mx.nd.ones(SHAPE, ctx=mx.cpu(2)))
    assert kv._store[0].context == mx.cpu(2)
    kv.push(0, [mx.nd.ones(SHAPE, ctx=mx.cpu(i)) for i in range(3)])
    np.testing.assert_array_equal(pulled(kv, 0), 3)
    local = mx.kv.create("local")
    local.init(0, mx.nd.ones(SHAPE, ctx=mx.cpu(2)))
    assert local._store[0].context == mx.cpu(0)


# ---- row_sparse_pull --------------------------------------------------------------------------------
def test_row_sparse_pull_moves_only_requested_rows():
    rng = np.random.default_rng(2)
    table = rng.standard_normal((1000, 4)).astype(np.float32)
    stored_rows = np.sort(rng.choice(1000, 600, replace=False))
    kv = mx.kv.create()
    kv.init("emb", rsp(table, stored_rows))
    ids = np.array([[999, 3, 3], [500, 0, 42]], dtype=np.float32)  # 2-d, repeated, unsorted, float
    out = mx.nd.sparse.zeros("row_sparse", (1000, 4))
    kv.row_sparse_pull("emb", out=out, row_ids=mx.nd.array(ids))
    want = np.intersect1d(np.unique(ids.astype(np.int64)), stored_rows)
    assert out.stype == "row_sparse"
    assert out.indices.tolist() == want.tolist()
    assert out.data.shape == (want.size, 4)  # only those rows came over
    np.testing.assert_array_equal(out.data.asnumpy(), table[want])
    dense = out.asnumpy()
    np.testing.assert_array_equal(dense[want], table[want])
    assert not np.delete(dense, want, axis=0).any()


def test_row_sparse_pull_never_densifies(monkeypatch):
    kv = mx.kv.create()
    n = 200_000
    kv.init(0, mx.nd.sparse.row_sparse_array((np.ones((n, 2), np.float32), np.arange(n)), shape=(n, 2)))

    def refuse(self, stype):
        raise AssertionError("the stored table was converted")

    monkeypatch.setattr(RowSparseNDArray, "tostype", refuse)
    monkeypatch.setattr(RowSparseNDArray, "asnumpy", refuse)
    out = mx.nd.sparse.zeros("row_sparse", (n, 2))
    kv.row_sparse_pull(0, out=out, row_ids=mx.nd.array([7, 199_999, n + 5, -3], dtype="int64"))
    assert out.indices.tolist() == [7, 199_999]  # ids outside the table ignored
    assert out.data.shape == (2, 2)


def test_row_sparse_pull_lists():
    dense = np.arange(18, dtype=np.float32).reshape(SHAPE) + 1
    kv = mx.kv.create()
    kv.init(["a", "b"], [mx.nd.array(dense).tostype("row_sparse")] * 2)
    # one key, several outs, one row_ids array: all outs get the same rows
    outs = [mx.nd.sparse.zeros("row_sparse", SHAPE) for _ in range(3)]
    kv.row_sparse_pull("a", out=outs, row_ids=mx.nd.array([4, 1]))
    for o in outs:
        assert o.indices.tolist() == [1, 4]
        np.testing.assert_array_equal(o.data.asnumpy(), dense[[1, 4]])
    # one row_ids per out
    kv.row_sparse_pull("a", out=outs[:2], row_ids=[mx.nd.array([0]), mx.nd.array([5, 5])])
    assert [o.indices.tolist() for o in outs[:2]] == [[0], [5]]
    # lists of keys
    ka, kb = mx.nd.sparse.zeros("row_sparse", SHAPE), mx.nd.sparse.zeros("row_sparse", SHAPE)
    kv.row_sparse_pull(["a", "b"], out=[ka, kb], row_ids=[mx.nd.array([2]), mx.nd.array([3, 0])])
    assert ka.indices.tolist() == [2] and kb.indices.tolist() == [0, 3]
    np.testing.assert_array_equal(kb.data.asnumpy(), dense[[0, 3]])


def test_row_sparse_pull_of_a_dense_value():
    dense = np.arange(18, dtype=np.float32).reshape(SHAPE)
    kv = mx.kv.create()
    kv.init(0, mx.nd.array(dense))
    out = mx.nd.sparse.zeros("row_sparse", SHAPE)
    kv.row_sparse_pull(0, out=out, row_ids=mx.nd.array([5, 2, 99, -1]))  # out of range ids ignored
    assert out.indices.tolist() == [2, 5]
    np.testing.assert_array_equal(out.data.asnumpy(), dense[[2, 5]])


def test_row_sparse_pull_refusals():
    kv = mx.kv.create()
    kv.init(0, mx.nd.ones(SHAPE).tostype("row_sparse"))
    with pytest.raises(mx.base.MXNetError, match="expected row_sparse storage type.*default"):
        kv.row_sparse_pull(0, out=mx.nd.zeros(SHAPE), row_ids=mx.nd.array([1]))
    with pytest.raises(mx.base.MXNetError, match="row_ids is required"):
        kv.row_sparse_pull(0, out=mx.nd.sparse.zeros("row_sparse", SHAPE))
    csr_ids = mx.nd.array([[1, 0]]).tostype("csr")
    with pytest.raises(mx.base.MXNetError, match="default storage type for row_sparse_pull row_ids"):
        kv.row_sparse_pull(0, out=mx.nd.sparse.zeros("row_sparse", SHAPE), row_ids=csr_ids)
    with pytest.raises(mx.base.MXNetError, match="number of row_ids"):
        kv.row_sparse_pull(0, out=[mx.nd.sparse.zeros("row_sparse", SHAPE)] * 3,
                           row_ids=[mx.nd.array([1])] * 2)
    with pytest.raises(mx.base.MXNetError, match="shape"):
        kv.row_sparse_pull(0, out=mx.nd.sparse.zeros("row_sparse", (2, 3)), row_ids=mx.nd.array([1]))


# ---- refusals -----------------------------------------------------------------------------------
def test_key_errors():
    kv = mx.kv.create()
    kv.init(3, mx.nd.zeros(SHAPE))
    with pytest.raises(mx.base.MXNetError, match="duplicate init of key 3"):
        kv.init(3, mx.nd.zeros(SHAPE))
    with pytest.raises(mx.base.MXNetError, match="key 4 has not been inited"):
        kv.push(4, mx.nd.zeros(SHAPE))
    with pytest.raises(mx.base.MXNetError, match="key 4 has not been inited"):
        kv.pull(4, out=mx.nd.zeros(SHAPE))
    for call in (lambda: kv.init("a", mx.nd.zeros(SHAPE)), lambda: kv.push("a", mx.nd.zeros(SHAPE)),
                 lambda: kv.pull("a", out=mx.nd.zeros(SHAPE))):
        with pytest.raises(mx.base.MXNetError, match="mixed key types"):
            call()
    with pytest.raises(mx.base.MXNetError, match="inconsistent types of keys"):
        mx.kv.create().init([1, "b"], [mx.nd.zeros(SHAPE)] * 2)
    with pytest.raises(mx.base.MXNetError, match="unexpected type for keys: float"):
        kv.push(1.5, mx.nd.zeros(SHAPE))
    with pytest.raises(mx.base.MXNetError, match="2 keys but 1 value entries"):
        kv.push([3, 3], [mx.nd.zeros(SHAPE)])
    with pytest.raises(mx.base.MXNetError, match="out is required"):
        kv.pull(3)
    assert issubclass(KVStoreError, mx.base.MXNetError) and issubclass(KVStoreError, ValueError)


def test_value_errors():
    kv = mx.kv.create()
    kv.init(3, mx.nd.zeros(SHAPE))
    with pytest.raises(mx.base.MXNetError, match="storage type.*push: csr"):
        kv.push(3, mx.nd.zeros(SHAPE).tostype("csr"))
    with pytest.raises(mx.base.MXNetError, match=r"shape \(2, 3\).*stored shape \(6, 3\)"):
        kv.push(3, mx.nd.zeros((2, 3)))
    with pytest.raises(mx.base.MXNetError, match="shape"):
        kv.pull(3, out=mx.nd.zeros((2, 3)))
    with pytest.raises(mx.base.MXNetError, match="must be NDArrays"):
        kv.push(3, [np.zeros(SHAPE)])
    with pytest.raises(mx.base.MXNetError, match="default or row_sparse"):
        kv.init(9, mx.nd.zeros(SHAPE).tostype("csr"))
    with pytest.raises(mx.base.MXNetError, match="gradient compression"):
        kv.set_gradient_compression({"type": "2bit"})


# ---- updaters and optimizers ---------------------------------------------------------------------
@pytest.mark.parametrize("key,stype", [(3, "default"), ("w", "default"), (3, "row_sparse"), ("w", "row_sparse")])
def test_set_updater_gets_key_merged_and_stored(key, stype):
    kv = mx.kv.create()
    kv.init(key, mx.nd.ones(SHAPE))
    seen = []

    def update(k, recv, local):
        seen.append((k, recv.stype))
        local += recv * 2

    kv.set_updater(update)
    kv.push(key, [mx.nd.ones(SHAPE).tostype(stype)] * 3)
    assert seen == [(key, stype)] and type(seen[0][0]) is type(key)
    np.testing.assert_array_equal(pulled(kv, key), 1 + 2 * 3)
    kv._set_updater(update)  # MXNet's spelling
    with pytest.raises(mx.base.MXNetError, match="callable"):
        kv.set_updater(3)


def test_set_optimizer_applies_updates_on_push():
    rng = np.random.default_rng(3)
    w0 = rng.standard_normal(SHAPE).astype(np.float32)
    kv = mx.kv.create()
    kv.init(["w", "b"], [mx.nd.array(w0), mx.nd.array(w0[:1])])
    opt = TinySGD()
    kv.set_optimizer(opt)
    grads = [rng.standard_normal(SHAPE).astype(np.float32) for _ in range(4)]
    for g in grads:
        kv.push("w", [mx.nd.array(g / 2), mx.nd.array(g / 2)])  # two "devices"
    np.testing.assert_allclose(pulled(kv, "w"), numpy_momentum(w0, grads), rtol=1e-5, atol=1e-6)
    assert opt.created == ["w"]  # one state per index, made on first use
    kv.push("b", mx.nd.ones((1, 3)))
    assert opt.created == ["w", "b"]


def test_set_optimizer_refuses_non_optimizers():
    with pytest.raises(mx.base.MXNetError, match=r"object has no create_state\(\) method"):
        mx.kv.create().set_optimizer(object())


def test_optimizer_states_save_and_load(tmp_path):
    rng = np.random.default_rng(4)
    w0 = rng.standard_normal(SHAPE).astype(np.float32)
    grads = [rng.standard_normal(SHAPE).astype(np.float32) for _ in range(6)]

    def store():
        kv = mx.kv.create()
        kv.init(0, mx.nd.array(w0))
        kv.set_optimizer(TinySGD())
        return kv

    a = store()
    for g in grads[:3]:
        a.push(0, mx.nd.array(g))
    path = tmp_path / "states"
    a.save_optimizer_states(str(path))
    b = store()
    b._store[0][:] = mx.nd.array(pulled(a, 0))
    b.load_optimizer_states(str(path))
    for g in grads[3:]:
        a.push(0, mx.nd.array(g))
        b.push(0, mx.nd.array(g))
    np.testing.assert_allclose(pulled(b, 0), pulled(a, 0), rtol=1e-6)
    np.testing.assert_allclose(pulled(a, 0), numpy_momentum(w0, grads), rtol=1e-5, atol=1e-6)
    # with the optimizer itself
    a.save_optimizer_states(str(path), dump_optimizer=True)
    states, opt = pickle.loads(path.read_bytes())
    assert isinstance(opt, TinySGD) and set(states) == {0}
    with pytest.raises(mx.base.MXNetError, match="set_optimizer first"):
        mx.kv.create().save_optimizer_states(str(path))
    with pytest.raises(mx.base.MXNetError, match="set_optimizer first"):
        mx.kv.create().load_optimizer_states(str(path))


def test_lazy_sgd_on_row_sparse_grad_touches_only_pushed_rows():
    """The linear-model pattern: a dense weight in the store, row_sparse gradients pushed,
    an optimizer whose update is MXNet's ``sgd_update`` (lazy: only the gradient's rows move)."""

    class LazySGD(TinySGD):
        def create_state(self, index, weight):
            return None

        def update(self, index, weight, grad, state):
            mx.nd.sgd_update(weight, grad, lr=self.lr, wd=0.0, out=weight)

    w0 = np.arange(18, dtype=np.float32).reshape(SHAPE)
    kv = mx.kv.create()
    kv.init(0, mx.nd.array(w0))
    kv.set_optimizer(LazySGD(lr=0.5))
    g = np.ones(SHAPE, np.float32)
    kv.push(0, [rsp(g, [1, 3]), rsp(g, [3])])
    expected = w0.copy()
    expected[1] -= 0.5
    expected[3] -= 1.0
    np.testing.assert_allclose(pulled(kv, 0), expected)
    out = mx.nd.sparse.zeros("row_sparse", SHAPE)
    kv.row_sparse_pull(0, out=out, row_ids=mx.nd.array([3]))
    np.testing.assert_allclose(out.data.asnumpy(), expected[[3]])
