"""``sdk.csr.group_columns`` and ``sdk.csr.index_add``: grouping stored values by key, on the
host (a hash table and a radix sort of the distinct keys, ``sdk.groups``) and on the gpu
(a stable sort; in the simulator with ``SPARSE_OPS_CUDA_SIM=1``), against NumPy's stable
argsort and ``np.add.at``."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sparse_ops as so
from sparse_ops.sdk import csr

gpu = pytest.mark.skipif(so.num_gpus() == 0, reason="no gpu (set SPARSE_OPS_CUDA_SIM=1 to simulate one)")


def reference_groups(indices):
    order = np.argsort(indices, kind="stable")
    columns, counts = np.unique(indices, return_counts=True)
    return columns, np.concatenate([[0], np.cumsum(counts)]), order


def check_groups(device, indices, n_cols):
    columns, starts, order = csr.group_columns(device, device.xp.asarray(indices), n_cols)
    want = reference_groups(indices)
    for got, expected in zip((columns, starts, order), want):
        np.testing.assert_array_equal(np.asarray(got), expected)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 2**20), max_size=300), st.sampled_from([np.int32, np.int64]))
def test_group_columns_on_the_host_is_numpys_stable_grouping(values, dtype):
    indices = np.array(values, dtype=dtype)
    check_groups(so.cpu(), indices, 2**20 + 1)
    columns, starts, order = csr.group_columns(so.cpu(), indices, 2**20 + 1)
    assert not (columns.flags.writeable or starts.flags.writeable or order.flags.writeable)


def test_group_columns_of_a_wide_table_spreads_beyond_one_radix_pass():
    rng = np.random.default_rng(0)
    indices = np.minimum(rng.zipf(1.2, 50_000), 10**9) - 1  # keys needing three 11-bit passes
    check_groups(so.cpu(), indices.astype(np.int64), 10**9)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 9), max_size=60), st.integers(1, 3))
def test_index_add_on_the_host_is_add_at(index, width):
    rng = np.random.default_rng(len(index))
    index = np.array(index, dtype=np.int64)
    values = rng.standard_normal((index.shape[0], width))
    target = rng.standard_normal((10, width))
    want = target.copy()
    np.add.at(want, index, values)
    np.testing.assert_array_equal(csr.index_add(so.cpu(), target, index, values), want)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_group_columns_and_index_add_on_the_gpu(dtype):
    """The gpu's stable-sort grouping gives the host's groups; index_add into zeros gives
    the host's bits (each row summed in the order of its entries), float16 summed in float32."""
    rng = np.random.default_rng(4)
    indices = (rng.zipf(1.3, 400) % 97).astype(dtype)
    check_groups(so.gpu(0), indices, 97)
    check_groups(so.gpu(0), indices[:0], 97)
    for vdtype in (np.float64, np.float32, np.float16):
        values = (rng.standard_normal((400, 3)) * 10.0 ** rng.integers(-3, 3, (400, 1))).astype(vdtype)
        on_host = csr.index_add(so.cpu(), np.zeros((97, 3), vdtype), indices, values)
        on_gpu = csr.index_add(so.gpu(0), np.zeros((97, 3), vdtype), indices, values)
        if vdtype == np.float16:  # summed in float32, rounded once (the host's add.at rounds at every step)
            exact = np.zeros((97, 3))
            np.add.at(exact, indices, values.astype(np.float64))
            np.testing.assert_array_equal(on_gpu, exact.astype(np.float32).astype(np.float16))
        else:
            np.testing.assert_array_equal(on_gpu, on_host)
