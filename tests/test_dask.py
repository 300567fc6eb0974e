"""sparse_ops.dask: row-partitioned arrays, operators over their blocks, plugins on workers,
data-parallel training, a worker lost mid-computation.

The cluster tests share one LocalCluster of 2 worker processes (1 thread each) that this
module starts and stops; the data stays small because numba compiles (or loads from its
disk cache) every kernel once in each worker process.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cloudpickle
import dask
import numpy as np
import pytest
import scipy.sparse as sp

import sparse_ops as so
import sparse_ops.dask as sd
from distributed import Client, Event, LocalCluster

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import this test module

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def client():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=logging.CRITICAL) as cluster, Client(cluster) as c:
        c.wait_for_workers(2)
        yield c


def _csr(rng, rows=60, cols=25, density=0.15, dtype=np.float32):
    m = sp.random(rows, cols, density=density, format="csr", dtype=dtype, random_state=rng)
    m.data[:] = rng.integers(1, 9, m.nnz)  # small integers: sums exact in any order
    return m


def _dense(x) -> np.ndarray:
    return x.asnumpy() if isinstance(x, so.NDArray) else np.asarray(x)


# ---- import cost and the extra ---------------------------------------------------------------------
def test_import_sparse_ops_does_not_import_dask():
    out = subprocess.run([sys.executable, "-c", "import sys, sparse_ops; print('dask' in sys.modules, "
                          "'distributed' in sys.modules)"], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_missing_dask_names_the_extra():
    code = "import sys; sys.modules['distributed'] = None; import sparse_ops.dask"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode != 0
    assert "ImportError" in out.stderr and 'pip install "sparse-ops[dask]"' in out.stderr


# ---- the collection (no cluster needed for metadata) ------------------------------------------------
def test_from_array_metadata_and_blocks(rng):
    m = _csr(rng, rows=23)
    x = sd.from_array(m, nblocks=4)
    assert x.shape == (23, 25) and x.ndim == 2 and x.dtype == np.float32
    assert x.row_splits == (0, 6, 12, 18, 23) and x.nblocks == 4
    assert x.stypes == ("csr",) * 4 and x.stype == "csr"
    assert x.nnz == m.nnz and sum(x.block_nnz) == m.nnz
    assert [i.shape for i in x.block_infos] == [(6, 25), (6, 25), (6, 25), (5, 25)]
    d = sd.from_array(m.toarray(), row_splits=x.row_splits)
    assert d.stype == "default" and d.nnz == 23 * 25 and d.row_splits == x.row_splits
    with pytest.raises(ValueError, match="row_splits must rise from 0 to the 23 rows"):
        sd.from_array(m, row_splits=(0, 10, 20))
    with pytest.raises(ValueError, match="differ in their number of rows only"):
        sd.from_blocks([so.zeros((2, 3)), so.zeros((2, 4))])
    with pytest.raises(ValueError, match="share one dtype"):
        sd.from_blocks([so.zeros((2, 3)), so.zeros((2, 3), dtype="float64")])


def test_concat_rows_keeps_storage_types(rng):
    m = _csr(rng, rows=17)
    dense = m.toarray()
    x = so.csr_matrix(m)
    cuts = [(0, 5), (5, 5), (5, 12), (12, 17)]  # an empty block too
    for stype in ("csr", "row_sparse", "default"):
        parts = [sd.collection.row_block(x.tostype(stype), a, b) for a, b in cuts]
        assert [p.stype for p in parts] == [stype] * 4
        out = sd.concat_rows(parts, x.shape)
        assert out.stype == stype
        np.testing.assert_array_equal(out.asnumpy(), dense)
        if stype != "default":
            out.check_format()
    kinds = ("csr", "default", "row_sparse", "csr")
    mixed = [sd.collection.row_block(x.tostype(s), a, b) for s, (a, b) in zip(kinds, cuts)]
    assert sd.concat_rows(mixed, x.shape).stype == "default"
    as_csr = sd.concat_rows(mixed, x.shape, stype="csr")
    assert as_csr.stype == "csr"
    np.testing.assert_array_equal(as_csr.asnumpy(), dense)
    # blocks that do not stack into the shape asked for are refused, whatever their storage
    for stype in ("csr", "row_sparse", "default"):
        a, b = (so.array(np.ones((2, n))).tostype(stype) for n in (5, 6))
        for shape in ((4, 6), (4, 5)):
            with pytest.raises(ValueError, match=r"concat_rows: block \d has shape \(2, [56]\), which does not "
                                                 r"stack into shape"):
                sd.concat_rows([a, b], shape)
        with pytest.raises(ValueError, match=r"concat_rows: the blocks hold 4 rows, which does not stack into shape "
                                             r"\(5, 6\)"):
            sd.concat_rows([b, b], (5, 6))


# ---- refusals: checked on the client, before any task ------------------------------------------------
def test_refusals_name_the_operator(rng):
    m = _csr(rng)
    x = sd.from_array(m, nblocks=3)
    with pytest.raises(sd.NotPartitionableError, match="operator 'transpose' cannot run over row blocks"):
        sd.apply("transpose", x)
    with pytest.raises(sd.NotPartitionableError, match="operator 'mean' cannot run over row blocks"):
        sd.apply("mean", x, axis=0)  # a mean over the rows is no sum of block means
    with pytest.raises(sd.NotPartitionableError, match="operator 'dot' cannot"):
        sd.apply("dot", x, np.ones((4, 60), np.float32), transpose_a=True, transpose_b=True)
    with pytest.raises(sd.NotPartitionableError, match="'sgd_mom_update' updates its input"):
        sd.apply("sgd_mom_update", x, x, x, lr=0.1)
    with pytest.raises(sd.NotPartitionableError, match="returns 2 outputs"):
        sd.apply("split", so.array(m.toarray()), num_outputs=2, axis=1)
    with pytest.raises(sd.NotPartitionableError, match="none of the inputs it cuts into row blocks"):
        sd.apply("dot", so.csr_matrix(m), sd.from_array(np.ones((25, 2), np.float32), nblocks=2))
    other = sd.from_array(m, nblocks=2)
    with pytest.raises(sd.PartitionMismatchError, match="'lhs' and 'rhs' are cut into different row blocks"):
        sd.apply("elemwise_add", x, other)
    with pytest.raises(sd.PartitionMismatchError, match="input 'rhs' of shape"):
        sd.apply("elemwise_add", x, np.ones((59, 25), np.float32))
    with pytest.raises(so.OperatorError, match="shape inference failed"):
        sd.apply("dot", x, np.ones((24, 3), np.float32))


def test_declarations_of_builtins_and_cookbook():
    import sparse_ops_cookbook  # noqa: F401  (registers the cookbook's ops)

    def rule(op, *shapes, **params):
        return so.get_op(op).instance(params).partitioning(*shapes)

    assert rule("dot", (6, 4), (4, 2)) == ("rows", ("lhs",))
    assert rule("dot", (6, 4), (6, 2), transpose_a=True) == ("sum", ("lhs", "rhs"))
    assert rule("sum", (6, 4), axis=1) == ("rows", None)
    assert rule("sum", (6, 4), axis=0)[0] == "sum" and rule("sum", (6, 4))[0] == "sum"
    assert rule("sum", (6, 4), axis=1, exclude=True)[0] == "sum"
    assert rule("norm", (6, 4), axis=0)[0] is None
    assert rule("take", (6, 4), (3,)) == ("rows", ("indices",))
    assert rule("take", (6, 4), (3,), axis=1) == ("rows", ("a",))
    assert rule("broadcast_add", (6, 4), (4,)) == ("rows", ("lhs",))
    assert rule("broadcast_add", (6, 4), (6, 4)) == ("rows", ("lhs", "rhs"))
    assert rule("Embedding", (6,), (10, 3), input_dim=10, output_dim=3) == ("rows", ("data",))
    assert rule("csr_spmm", (6, 4), (4, 2)) == ("rows", ("A",))
    assert rule("csr_spmm_t", (6, 4), (6, 2)) == ("sum", None)
    assert rule("_fm_interaction_backward", (6, 4), (4, 2), (6,)) == ("sum", ("X", "out_grad"))
    assert rule("gcn_norm", (6, 6))[0] is None
    assert so.get_op("exp").partition == "rows" and so.get_op("retain").partition is None

    class Bad(so.Op):
        partition = "columns"

    with pytest.raises(ValueError, match="partition must be one of"):
        so.registry.OpDef("bad", Bad)

    class BadArgs(so.Op):
        partition, partition_args = "rows", ("nope",)

    with pytest.raises(ValueError, match="partitioned input 'nope' is not an argument"):
        so.registry.OpDef("bad_args", BadArgs)


# ---- on the cluster ------------------------------------------------------------------------------------
def _distributed(op, inputs, params, nblocks=3):
    """``apply(op)`` with the inputs its declaration cuts into row blocks distributed (one
    partition for all) and the others local."""
    names = so.get_op(op).arguments
    cut = so.get_op(op).instance(params).partitioning(*[i.shape for i in inputs])[1]
    is_cut = [cut is None or names[min(k, len(names) - 1)] in cut for k in range(len(inputs))]
    splits = sd.even_splits(inputs[is_cut.index(True)].shape[0], nblocks)
    args = [sd.from_array(x, row_splits=splits) if c else x for x, c in zip(inputs, is_cut)]
    return sd.apply(op, *args, **params)


def _check_against_one_machine(cases, nblocks=3):
    for op, inputs, params in cases:
        expected = so.invoke(op, inputs, params)
        result = _distributed(op, inputs, params, nblocks)
        assert result.shape == expected.shape and result.dtype == expected.dtype, op
        got = result.compute()
        assert got.stype == expected.stype, op
        np.testing.assert_allclose(got.asnumpy(), expected.asnumpy(), rtol=1e-6, err_msg=op)


def _cases(rng):
    """(op, inputs, params) for every kind of declaration: built-ins and cookbook ops."""
    import sparse_ops_cookbook  # noqa: F401

    m = _csr(rng, rows=50)
    x = so.csr_matrix(m)
    dense = so.array(np.asarray(rng.integers(-3, 4, (25, 4)), dtype=np.float32))
    g = so.array(np.asarray(rng.integers(-3, 4, (50, 4)), dtype=np.float32))
    same = so.array(np.asarray(rng.integers(-3, 4, (50, 25)), dtype=np.float32))
    ids = so.array(rng.integers(0, 10, (50, 2)).astype(np.float32))
    emb = so.array(np.asarray(rng.integers(-3, 4, (10, 3)), dtype=np.float32))
    return [
        # row-separable
        ("dot", [x, dense], {}),
        ("dot", [x.tostype("default"), dense], {}),
        ("dot", [x.tostype("row_sparse"), dense], {}),
        ("elemwise_mul", [x, x], {}),
        ("elemwise_add", [x, same], {}),
        ("square", [x.tostype("row_sparse")], {}),
        ("exp", [x], {}),
        ("clip", [x, ], {"a_min": -1.0, "a_max": 2.0}),
        ("_mul_scalar", [x], {"scalar": 3.0}),
        ("sum", [x], {"axis": 1}),
        ("norm", [x], {"axis": 1}),
        ("broadcast_add", [same, so.array(np.arange(25, dtype=np.float32))], {}),
        ("broadcast_greater", [same, so.array(np.zeros((1, 25), np.float32))], {}),
        ("cast_storage", [x], {"stype": "row_sparse"}),
        ("zeros_like", [x], {}),
        ("ones_like", [x.tostype("row_sparse")], {}),
        ("add_n", [x, same, x], {}),
        ("where", [same, same, same * 2], {}),
        ("FullyConnected", [g, so.array(np.ones((3, 4), np.float32)), so.array(np.arange(3, dtype=np.float32))],
         {"num_hidden": 3}),
        ("Embedding", [ids, emb], {"input_dim": 10, "output_dim": 3}),
        ("take", [emb, ids], {}),  # along axis 0: the indices' rows
        ("take", [g, so.array(np.array([[0, 2], [1, 3]]))], {"axis": 1}),  # along axis 1: a's rows
        ("csr_spmm", [x, dense], {}),
        ("csr_row_softmax", [x], {}),
        ("_csr_row_softmax_backward", [so.ops.csr_row_softmax(x), same], {}),
        ("csr_sddmm", [x, g, dense], {}),
        ("csr_sample", [x, same], {}),
        ("embedding_bag", [x, dense], {"mode": "mean"}),
        ("fm_interaction", [x, dense], {}),
        # summed over the blocks
        ("dot", [x, g], {"transpose_a": True}),
        ("sum", [x], {"axis": 0}),
        ("square_sum", [x], {"axis": 0}),
        ("csr_spmm_t", [x, g], {"sparse_grad": True}),
        ("_embedding_backward", [ids, so.array(np.ones((50, 2, 3), np.float32))],
         {"input_dim": 10, "sparse_grad": True}),
        ("_embedding_bag_backward", [x, g], {}),
        ("_fm_interaction_backward", [x, dense, so.array(np.arange(50, dtype=np.float32))], {}),
    ]


def test_every_declared_op_equals_one_machine(client, rng):
    _check_against_one_machine(_cases(rng))


def test_apply_sums_reduce_in_a_tree_keeping_row_sparse(client, rng):
    import sparse_ops_cookbook  # noqa: F401

    m = _csr(rng, rows=90, cols=40, density=0.05)
    g = np.asarray(rng.integers(-3, 4, (90, 3)), dtype=np.float32)
    x = sd.from_array(m, nblocks=10)  # 10 partial results: two levels of add_n (fan-in 8)
    gd = sd.from_array(g, row_splits=x.row_splits)
    expected_rows = np.flatnonzero(np.diff(m.tocsc().indptr))
    for op, params in (("dot", {"transpose_a": True}), ("csr_spmm_t", {"sparse_grad": True})):
        result = sd.apply(op, x, gd, **params)
        assert result.nblocks == 1 and result.stypes == ("row_sparse",)
        got = result.compute()
        assert got.stype == "row_sparse"
        np.testing.assert_array_equal(np.asarray(got.indices), expected_rows)  # never densified
        np.testing.assert_allclose(got.asnumpy(), m.T @ g, rtol=1e-6)
    column_sums = sd.apply("sum", x, axis=0).compute()
    np.testing.assert_allclose(column_sums.asnumpy(), np.asarray(m.sum(axis=0)).ravel(), rtol=1e-6)
    total = sd.apply("sum", x).compute()
    assert total.shape == () and float(total.asnumpy()) == pytest.approx(float(m.sum()))
    # a local operand of a summed op is cut into the distributed one's blocks
    np.testing.assert_allclose(sd.apply("dot", x, g, transpose_a=True).compute().asnumpy(), m.T @ g, rtol=1e-6)


def test_broadcast_operand_sent_once_per_worker(client, rng):
    m = _csr(rng, rows=40)
    w = np.ones((25, 2), np.float32)
    x = sd.from_array(m, nblocks=4)
    before = {k for k, ws in client.who_has().items() if len(ws) == 2}
    result = sd.apply("dot", x, w)
    replicated = {k for k, ws in client.who_has().items() if len(ws) == 2} - before
    assert len(replicated) == 1  # w, on both workers before any block runs
    (key,) = replicated
    assert all(key in block.dask for block in result.blocks)  # every block task reads that copy
    np.testing.assert_allclose(result.compute().asnumpy(), m @ w)
    # a distributed operand the op takes whole is stacked once on the cluster
    w_blocks = sd.from_array(np.arange(50, dtype=np.float32).reshape(25, 2), nblocks=3)
    np.testing.assert_allclose(sd.apply("dot", x, w_blocks).compute().asnumpy(),
                               m @ np.arange(50, dtype=np.float32).reshape(25, 2))


def test_persist_and_files(client, rng, tmp_path):
    m = _csr(rng, rows=31)
    x = sd.from_array(m, nblocks=3)
    paths = sd.to_npz(x, tmp_path / "blocks")
    assert [os.path.basename(p) for p in paths] == ["block-00000.npz", "block-00001.npz", "block-00002.npz"]
    sp.save_npz(tmp_path / "scipy.npz", m[:7])  # a SciPy file reads as a block too
    lazy = sd.from_npz(paths + [tmp_path / "scipy.npz"])
    assert lazy.shape == (38, 25) and lazy.stypes == ("csr",) * 4 and lazy.row_splits == (0, 11, 21, 31, 38)
    assert lazy.nnz == m.nnz + m[:7].nnz  # computed on the workers
    kept = sd.apply("negative", lazy).persist()
    np.testing.assert_array_equal(kept.compute().asnumpy(), -sp.vstack([m, m[:7]]).toarray())
    declared = sd.from_npz(paths[:1], infos=[((11, 25), "csr", "float64")])
    with pytest.raises(so.SparseFormatError, match="declared a csr"):
        declared.compute()


def test_an_operator_error_on_a_worker_reaches_the_client(client):
    """A kernel's OperatorError (here an Embedding id out of range) is raised as it is, with
    no cycle in its causes: the worker's error report walks them (it hung forever)."""
    ids = sd.from_array(np.array([0.0, 1.0, 99.0, 2.0]), nblocks=2)
    with pytest.raises(so.OperatorError, match="Embedding"):
        sd.apply("Embedding", ids, np.ones((5, 3), np.float32), input_dim=5, output_dim=3).compute()
    try:
        so.Embedding(so.array(np.array([0.0, 99.0])), so.ones((5, 3)), input_dim=5, output_dim=3)
    except so.OperatorError as exc:
        seen = []
        while exc is not None and not any(exc is s for s in seen):
            seen.append(exc)
            exc = exc.__cause__
        assert exc is None, f"a cycle of causes: {seen}"


# ---- plugins on the workers -------------------------------------------------------------------------------
def test_op_registered_on_the_client_only_is_a_clear_error(client, isolated):
    name = f"client_only_{uuid.uuid4().hex[:8]}"

    @so.register(name)
    class ClientOnly(so.Op):
        partition = "rows"

        @so.kernel()
        def dense(self, ctx, x, out):
            out[...] = x

    x = sd.from_array(np.ones((6, 2), np.float32), nblocks=2)
    with pytest.raises(sd.OperatorMissingOnWorkerError) as info:
        sd.apply(name, x).compute()
    message = str(info.value)
    assert f"operator {name!r} is not registered on worker tcp://" in message
    assert "registered it from module" in message
    with pytest.raises(sd.OperatorMissingOnWorkerError, match=f"worker tcp://\\S+ lacks {name!r}.*worker tcp://"):
        sd.check_workers(["dot", name])
    sd.check_workers(["dot", "csr_spmm"])  # built-ins and installed plugins are everywhere


def test_library_plugin_is_refused_then_shipped(client, isolated, tmp_path):
    name = f"shipped_{uuid.uuid4().hex[:8]}"
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(f"""
        import sparse_ops as so

        @so.register("{name}_twice")
        class Twice(so.Op):
            partition = "rows"

            @so.kernel()
            def dense(self, ctx, x, out):
                out[...] = 2 * x
    """))
    so.library.load(path)
    x = sd.from_array(np.arange(12, dtype=np.float32).reshape(6, 2), nblocks=2)
    with pytest.raises(sd.OperatorMissingOnWorkerError, match="sparse_ops.dask.ship_library"):
        sd.apply(f"{name}_twice", x).compute()
    assert sd.ship_library(path) == name
    sd.check_workers([f"{name}_twice"])
    np.testing.assert_array_equal(sd.apply(f"{name}_twice", x).compute().asnumpy(),
                                  2 * np.arange(12).reshape(6, 2))


# ---- training -----------------------------------------------------------------------------------------------
def _click_log():
    from sparse_ops_cookbook.demo.data import make_click_log

    return make_click_log(n_examples=2500, n_features=1 << 12, n_fields=6, max_tags=4, seed=3)


def test_data_parallel_gradients_equal_one_machine(client):
    from sparse_ops_cookbook.demo.ctr import FactorizationMachine, logistic_loss
    from sparse_ops_cookbook.demo.ctr_dask import click_log_blocks, fm_block_loss

    data = _click_log()
    x, y = click_log_blocks(data, nblocks=3)
    model = FactorizationMachine(data.n_features, k=4, seed=1)
    trainer = sd.DataParallel(fm_block_loss, x, y, row_params=("w", "v"))
    loss, grads = trainer.step({"w": model.w, "v": model.v, "b": model.b})
    trainer.close()
    xs = so.csr_matrix((data.train[2], data.train[1], data.train[0]), shape=(data.n_train, data.n_features))
    with so.autograd.record():
        expected = logistic_loss(model.logits(xs), so.array(data.train[3]))
    expected.backward()
    assert loss == pytest.approx(float(expected.asnumpy()), rel=1e-5)
    for name in ("w", "v"):
        got, want = grads[name], getattr(model, name).grad
        assert got.stype == want.stype == "row_sparse"
        np.testing.assert_array_equal(np.asarray(got.indices), np.asarray(want.indices))
        np.testing.assert_allclose(got.asnumpy(), want.asnumpy(), rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(grads["b"].asnumpy(), model.b.grad.asnumpy(), rtol=1e-5)
    assert trainer.last_traffic["pulled"] > 0 and trainer.last_traffic["gradients"] > 0


def test_fm_demo_in_dask_blocks_follows_the_single_machine_loss_curve(client):
    from sparse_ops_cookbook.demo.ctr import FactorizationMachine
    from sparse_ops_cookbook.demo.ctr_dask import click_log_blocks, train_ctr_dask

    data = _click_log()
    x, y = click_log_blocks(data, nblocks=3)
    epochs, n_batches = 2, 3
    distributed_model = FactorizationMachine(data.n_features, k=4, seed=2)
    reference = distributed_model.copy(sparse=True)
    losses = train_ctr_dask(distributed_model, x, y, epochs=epochs, n_batches=n_batches)

    indptr, indices, values, labels = data.train
    whole = so.csr_matrix((values, indices, indptr), shape=(len(labels), data.n_features))
    expected = []
    for _ in range(epochs):
        for b in range(n_batches):  # batch b: the b-th of n_batches slices of every block
            rows = np.concatenate([np.array_split(np.arange(lo, hi), n_batches)[b]
                                   for lo, hi in zip(x.row_splits[:-1], x.row_splits[1:])])
            xb = sp.vstack([whole.asscipy()[r:r + 1] for r in rows]).tocsr()
            expected.append(reference.step(so.csr_matrix(xb), so.array(labels[rows])))
    np.testing.assert_allclose(losses, expected, rtol=1e-5)
    assert expected[-1] < expected[0]  # it learns
    for name in ("w", "v", "b"):
        np.testing.assert_allclose(getattr(distributed_model, name).asnumpy(), getattr(reference, name).asnumpy(),
                                   rtol=1e-4, atol=1e-6)


# ---- a worker lost mid-computation -------------------------------------------------------------------------
def _gated(block, event):
    """A block that waits for ``event`` before it is ready: the test kills a worker meanwhile."""
    Event(event).wait(timeout=60)
    return block


def _compute_while_a_worker_dies(client, array, event):
    """``array.compute()`` in a thread; once the blocks wait on ``event`` on both workers,
    SIGKILL the process of one of them (a worker this module's cluster started), wait
    until the scheduler has noticed, release the blocks. Returns (the compute's future,
    the killed pid)."""
    pool = ThreadPoolExecutor(1)
    done = pool.submit(array.compute)
    deadline = time.monotonic() + 60
    busy = []
    while len(busy) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
        busy = [w for w, tasks in client.processing().items() if tasks]
    assert len(busy) == 2, "the blocks should be running on both workers"
    victim = busy[0]
    pid = client.run(os.getpid, workers=[victim])[victim]
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while victim in client.scheduler_info(n_workers=-1)["workers"] and time.monotonic() < deadline:
        time.sleep(0.05)
    Event(event, client=client).set()
    pool.shutdown(wait=False)
    return done, pid


@pytest.mark.slow
def test_worker_killed_mid_computation_is_retried_from_the_files(client, rng, tmp_path):
    m = _csr(rng, rows=80)
    w = np.asarray(rng.integers(-3, 4, (25, 3)), dtype=np.float32)
    paths = sd.to_npz(sd.from_array(m, nblocks=4), tmp_path)
    files = sd.from_npz(paths)  # blocks a lost worker's successor can read again
    event = f"go-{uuid.uuid4().hex}"
    gated = sd.from_delayed([dask.delayed(_gated)(b, event) for b in files.blocks], files.block_infos)
    done, pid = _compute_while_a_worker_dies(client, sd.apply("dot", gated, w), event)
    np.testing.assert_array_equal(done.result(timeout=120).asnumpy(), m @ w)
    client.wait_for_workers(2, timeout=60)  # the nanny started a new worker process
    assert pid not in client.run(os.getpid).values()


@pytest.mark.slow
def test_worker_killed_holding_scattered_blocks_is_a_clear_error(client, rng):
    m = _csr(rng, rows=80)
    w = np.ones((25, 3), np.float32)
    x = sd.from_array(m, nblocks=4)  # scattered from the client: no other copy, nothing to recompute from
    event = f"go-{uuid.uuid4().hex}"
    gated = sd.from_delayed([dask.delayed(_gated)(b, event) for b in x.blocks], x.block_infos)
    done, _ = _compute_while_a_worker_dies(client, sd.apply("dot", gated, w), event)
    try:
        result = done.result(timeout=120)
    except sd.BlockLostError as exc:  # never a wrong result
        assert "scattered from the client" in str(exc)
    else:  # Dask had copied the lost blocks elsewhere (work stealing): then the result is right
        np.testing.assert_array_equal(result.asnumpy(), m @ w)
    client.wait_for_workers(2, timeout=60)


def test_a_c_library_is_shipped_to_the_workers(client, isolated, tmp_path):
    """A shared library built against sparse_ops.h travels like a .py plugin (same platform)."""
    from sparse_ops.sdk.cbuild import c_compiler, compile_library

    if c_compiler() is None:
        pytest.skip("no C compiler")
    name = f"cshipped{uuid.uuid4().hex[:8]}"
    lib = compile_library([Path(__file__).parent / "clib" / "factor.c"], tmp_path / f"lib{name}.so",
                          flags=["-DFACTOR=5"])
    assert sd.ship_library(lib) == name
    sd.check_workers(["factor_times"])
    x = sd.from_array(np.arange(12, dtype=np.float64).reshape(6, 2), nblocks=2)
    np.testing.assert_array_equal(sd.apply("factor_times", x).compute().asnumpy(), 5 * np.arange(12).reshape(6, 2))


def test_from_npz_reads_other_byte_orders(tmp_path):
    """Blocks saved big-endian read as the native arrays ``so.load`` gives (no dtype mismatch)."""
    values = np.arange(12, dtype=">f4").reshape(3, 4)
    np.save(tmp_path / "b0.npy", values)
    x = sd.from_npz([tmp_path / "b0.npy"])
    assert x.dtype == np.float32
    np.testing.assert_array_equal(x.compute().asnumpy(), values)


@pytest.mark.parametrize("nblocks", [0, -1])
def test_from_array_refuses_fewer_than_one_block(nblocks):
    """nblocks=0 was taken as one block (the default) without a word."""
    with pytest.raises(ValueError, match=f"need at least one block, got {nblocks}"):
        sd.from_array(np.ones((4, 2)), nblocks=nblocks)
