"""Large host arrays start on a cache line (``sparse_ops.alloc``): the containers' copies,
``zeros``/``empty`` and the outputs dispatch allocates, with NumPy's values, dtypes, layout
and casting unchanged."""
import numpy as np
import pytest
import scipy.sparse as sp

import sparse_ops as so
from sparse_ops import alloc

BIG = alloc.ALIGNED_MIN_BYTES


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("make", [alloc.empty, alloc.zeros])
def test_large_arrays_start_on_a_cache_line(make, dtype):
    dtype = np.dtype(dtype)
    shape = (BIG // dtype.itemsize // 96 + 3, 96)
    for _ in range(5):  # several blocks, whatever offsets malloc hands out
        a = make(shape, dtype)
        assert alloc.is_aligned(a) and a.shape == shape and a.dtype == dtype
        assert a.flags.c_contiguous and a.flags.writeable
        if make is alloc.zeros:
            assert not a.any()
        a[...] = 7  # the whole array is writable memory of its own
        assert (a == 7).all()


def test_small_arrays_are_numpys_own():
    a = alloc.empty((4, 4), np.float32)
    assert a.base is None and a.shape == (4, 4)
    assert not alloc.wants_alignment((4, 4), np.dtype(np.float32))
    assert alloc.wants_alignment((BIG // 8,), np.dtype(np.float64))


@pytest.mark.parametrize("src,dst", [("float64", "float32"), ("float32", "float64"), ("int64", "float32"),
                                     ("float32", "int32"), ("float64", None)])
def test_copy_converts_as_numpy_does(src, dst):
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((BIG // 4 // 50 + 1, 50)) * 1000).astype(src)
    got = alloc.copy(a, dst)
    want = np.array(a, dtype=dst, copy=True)
    assert got.dtype == want.dtype and np.array_equal(got, want) and alloc.is_aligned(got)
    assert not np.may_share_memory(got, a)


def test_copy_keeps_a_fortran_layout():
    a = np.asfortranarray(np.random.default_rng(1).random((2000, 300)))
    got = alloc.copy(a)
    assert got.flags.f_contiguous and np.array_equal(got, a)


def test_containers_and_outputs_are_aligned():
    rng = np.random.default_rng(2)
    b = rng.random((20_000, 64)).astype(np.float32)
    x = so.array(b)
    assert alloc.is_aligned(x.data) and np.array_equal(x.asnumpy(), b)
    b[0, 0] = -1.0  # a copy, not a view
    assert x.asnumpy()[0, 0] != -1.0
    assert alloc.is_aligned(so.zeros((5000, 64)).data) and alloc.is_aligned(so.empty((5000, 64)).data)
    m = sp.random(30_000, 20_000, 0.0005, format="csr", dtype=np.float32, random_state=3)
    got = so.dot(so.csr_matrix(m), x)
    assert alloc.is_aligned(got.data)
    np.testing.assert_allclose(got.asnumpy(), m @ x.asnumpy(), rtol=1e-5, atol=1e-5)
    positive = so.relu(so.negative(x))  # dispatch's short path for dense kernels
    assert alloc.is_aligned(positive.data) and not positive.asnumpy().any()
    g = so.dot(so.csr_matrix(m), so.array(rng.random((30_000, 64)).astype(np.float32)), transpose_a=True)
    assert g.stype == "row_sparse" and alloc.is_aligned(g.data)
