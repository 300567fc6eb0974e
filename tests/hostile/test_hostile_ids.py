"""NaN and infinite indices and ids: every op that takes float indices (truncated toward
zero, as MXNet's cast) refuses them naming the op and the argument. A cast would give the
dtype's minimum, which clipping made row 0 and a membership test dropped: a silent wrong
row. Finite float ids keep truncating, and the process goes on after each refusal."""
from __future__ import annotations

import numpy as np
import pytest

import sparse_ops as so
from sparse_ops.compat import mxnet as mx
from sparse_ops.compat.mxnet.kvstore import KVStoreError
from sparse_ops.errors import InvalidIndexError

W = np.arange(12.0).reshape(4, 3)


def _calls(ids):
    w = so.array(W)
    return {
        "take": lambda: so.take(w, ids),
        "take wrap": lambda: so.take(w, ids, mode="wrap"),
        "pick": lambda: so.pick(w, so.array(np.resize(ids.asnumpy(), 4)), axis=1),
        "one_hot": lambda: so.one_hot(ids, depth=4),
        "retain": lambda: so.retain(w.tostype("row_sparse"), ids),
        "retain dense": lambda: so.retain(w, ids),
        "Embedding": lambda: so.Embedding(ids, w, input_dim=4, output_dim=3, dtype="float64"),
    }


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("name", list(_calls(so.array([0.0]))))
def test_a_nan_or_infinite_index_is_refused_by_name(name, bad):
    ids = so.array(np.array([1.0, bad, 2.0]))
    op = {"take wrap": "take", "retain dense": "retain"}.get(name, name)
    with pytest.raises(IndexError, match=f"{op}"):
        _calls(ids)[name]()
    # finite float ids truncate toward zero, and the op still works
    got = _calls(so.array(np.array([1.7, 0.2, 2.9])))[name]()
    assert got is not None
    np.testing.assert_array_equal(so.take(so.array(W), so.array(np.array([1.7, 0.2]))).asnumpy(), W[[1, 0]])


def test_the_refusal_names_the_argument_and_the_value():
    with pytest.raises(InvalidIndexError, match=r"operator 'take': argument 'indices' holds nan, which is no index"):
        so.take(so.array(W), so.array(np.array([np.nan])))


def test_row_sparse_pull_refuses_nan_row_ids():
    kv = mx.kv.create("local")
    kv.init("w", mx.nd.array(W).tostype("row_sparse"))
    out = mx.nd.sparse.zeros("row_sparse", (4, 3))
    with pytest.raises(KVStoreError, match="row_sparse_pull: key 'w': row_ids holds nan"):
        kv.row_sparse_pull("w", out=out, row_ids=mx.nd.array([0.0, np.nan]))
    kv.row_sparse_pull("w", out=out, row_ids=mx.nd.array([0.0, 2.0]))
    np.testing.assert_array_equal(out.asnumpy()[[0, 2]], W[[0, 2]])
