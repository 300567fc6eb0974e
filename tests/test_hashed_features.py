"""Hashed feature spaces (issue 18): csr matrices of up to 2**62 columns and row_sparse
tables of 2**40 rows that store a few thousand values. Products, gradients and lazy
optimizer updates must cost O(nnz + rows): values are checked against SciPy/NumPy on the
compacted columns (never a dense reference of the full width), and memory is bounded
loosely with tracemalloc (the old code allocated arrays of length n_cols there)."""
from __future__ import annotations

import tracemalloc
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import sparse_ops as so
from sparse_ops import autograd

MB = 1 << 20


def hashed_csr(m: int, n: int, nnz: int, dtype="float32", index_dtype=np.int64, seed=0):
    """A canonical csr of shape (m, n) with about ``nnz`` values at random columns of [0, n),
    and its (indptr, indices, data)."""
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, m, nnz)
    cols = rng.integers(0, n, nnz, dtype=np.int64)
    order = np.lexsort((cols, rows))
    rows, cols = rows[order], cols[order]
    keep = np.ones(rows.shape[0], bool)
    keep[1:] = (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1])
    rows, cols = rows[keep], cols[keep]
    indptr = np.zeros(m + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=m), out=indptr[1:])
    data = rng.standard_normal(cols.shape[0]).astype(dtype)
    parts = (indptr.astype(index_dtype), cols.astype(index_dtype), data)
    return so.csr_matrix((parts[2], parts[1], parts[0]), shape=(m, n)), parts


def compacted(parts, m):
    """(the distinct stored columns, SciPy csr of A on those columns only)."""
    indptr, indices, data = parts
    cols, inverse = np.unique(indices, return_inverse=True)
    return cols, sp.csr_matrix((data, inverse.reshape(-1), indptr), shape=(m, cols.shape[0]))


def peak_bytes(fn):
    """(fn(), tracemalloc peak in bytes while it ran); fn runs once before, untraced (compiles)."""
    fn()
    tracemalloc.start()
    try:
        result = fn()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return result, peak


def tol(dtype):
    return dict(rtol=1e-5, atol=1e-5) if np.dtype(dtype) == np.float32 else dict(rtol=1e-12, atol=1e-12)


# ---- csr.T @ dense -> row_sparse ---------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", [50, 2**20, 2**32, 2**40, 2**62])
def test_csr_t_dense_matches_scipy_on_compacted_columns(n, dtype):
    m, k = 300, 5
    A, parts = hashed_csr(m, n, 2000, dtype)
    g = np.random.default_rng(1).standard_normal((m, k)).astype(dtype)
    out = so.dot(A, so.array(g), transpose_a=True)
    cols, ref = compacted(parts, m)
    assert out.stype == "row_sparse" and out.shape == (n, k) and out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out.indices.asnumpy(), cols)
    np.testing.assert_allclose(out.data.asnumpy(), ref.T @ g, **tol(dtype))
    out.check_format()


@pytest.mark.parametrize("n, expected", [(2**31 - 1, np.int32), (2**20, np.int32), (2**31, np.int64)])
def test_index_dtype_int32_kept_when_it_fits(n, expected):
    m = 200
    idt = np.int32 if n <= 2**31 - 1 else np.int64
    A, parts = hashed_csr(m, n, 1500, "float64", index_dtype=idt)
    g = np.random.default_rng(2).standard_normal((m, 3))
    out = so.dot(A, so.array(g), transpose_a=True)
    assert out.indices.dtype == expected
    cols, ref = compacted(parts, m)
    np.testing.assert_array_equal(out.indices.asnumpy(), cols)
    np.testing.assert_allclose(out.data.asnumpy(), ref.T @ g, rtol=1e-12, atol=1e-12)


def test_int32_indices_give_int64_result_indices_for_a_2_40_product():
    """int32 source indices but a (2**40, k) result: the result's indices need int64."""
    m, n = 100, 2**40
    _, parts = hashed_csr(m, 2**31 - 1, 500, "float64", index_dtype=np.int32)
    A = so.csr_matrix((parts[2], parts[1], parts[0]), shape=(m, n))
    out = so.dot(A, so.array(np.ones((m, 2))), transpose_a=True)
    assert out.indices.dtype == np.int64 and out.shape == (n, 2)
    np.testing.assert_array_equal(out.indices.asnumpy(), np.unique(parts[1]))


@pytest.mark.parametrize("k", [1, 64])
def test_big_product_parallel_paths_match_scipy(k):
    """Big enough for the parallel drivers: every column stored (partial outputs) and a
    few-columns-stored count renumbering, and the sorted path with many values."""
    for m, n, nnz in ((20_000, 500, 200_000), (5_000, 200_000, 60_000), (20_000, 2**40, 200_000)):
        A, parts = hashed_csr(m, n, nnz, "float64", seed=n % 7)
        g = np.random.default_rng(3).standard_normal((m, k))
        out = so.dot(A, so.array(g), transpose_a=True)
        cols, ref = compacted(parts, m)
        np.testing.assert_array_equal(out.indices.asnumpy(), cols)
        np.testing.assert_allclose(out.data.asnumpy(), ref.T @ g, rtol=1e-10, atol=1e-10)


def test_csr_t_dense_2_32_memory_follows_nnz():
    """The old kernel counted into an int64 array of length n_cols (32 GiB here)."""
    m, n, k = 1000, 2**32, 8
    A, parts = hashed_csr(m, n, 5000)
    g = so.array(np.random.default_rng(4).standard_normal((m, k)).astype(np.float32))
    out, peak = peak_bytes(lambda: so.dot(A, g, transpose_a=True))
    assert peak < 50 * MB, f"peak {peak / MB:.1f} MB"
    cols, ref = compacted(parts, m)
    np.testing.assert_allclose(out.data.asnumpy(), ref.T @ g.asnumpy(), rtol=1e-5, atol=1e-5)


# ---- csr @ row_sparse and csr.T @ row_sparse ---------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", [40, 2**32, 2**62])
def test_csr_times_row_sparse_on_a_hashed_table(n, dtype):
    m, k = 200, 4
    A, parts = hashed_csr(m, n, 1500, dtype)
    cols, ref = compacted(parts, m)
    rng = np.random.default_rng(5)
    half = np.sort(rng.choice(cols, cols.shape[0] // 2, replace=False))  # some stored columns only
    extra = np.unique(rng.integers(0, n, 50, dtype=np.int64))  # rows no column of A meets
    rows = np.union1d(half, extra)
    vals = rng.standard_normal((rows.shape[0], k)).astype(dtype)
    W = so.row_sparse_array((vals, rows), shape=(n, k))
    out = so.dot(A, W)
    assert out.stype == "default" and out.shape == (m, k)
    dense_w = np.zeros((cols.shape[0], k), dtype)  # W on A's stored columns
    pos = np.searchsorted(cols, rows)
    hit = (pos < cols.shape[0]) & (cols[np.minimum(pos, cols.shape[0] - 1)] == rows)
    dense_w[pos[hit]] = vals[hit]
    np.testing.assert_allclose(out.asnumpy(), ref @ dense_w, **tol(dtype))


def test_csr_times_row_sparse_2_32_memory():
    m, n = 1000, 2**32
    A, parts = hashed_csr(m, n, 5000)
    cols = np.unique(parts[1])
    W = so.row_sparse_array((np.ones((cols.shape[0], 8), np.float32), cols), shape=(n, 8))
    out, peak = peak_bytes(lambda: so.dot(A, W))
    assert peak < 50 * MB, f"peak {peak / MB:.1f} MB"
    np.testing.assert_allclose(out.asnumpy(), np.repeat(np.asarray(compacted(parts, m)[1].sum(axis=1)), 8, axis=1),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [30, 2**40])
def test_csr_t_times_row_sparse(n):
    m, k = 400, 3
    A, parts = hashed_csr(m, n, 2500, "float64")
    rng = np.random.default_rng(6)
    grows = np.sort(rng.choice(m, 120, replace=False))
    gvals = rng.standard_normal((120, k))
    G = so.row_sparse_array((gvals, grows), shape=(m, k))
    out = so.dot(A, G, transpose_a=True)
    assert out.stype == "row_sparse" and out.shape == (n, k)
    cols, ref = compacted(parts, m)
    g = np.zeros((m, k))
    g[grows] = gvals
    full = ref.T @ g  # over every stored column of A
    got = out.indices.asnumpy()
    assert np.isin(got, cols).all()
    np.testing.assert_allclose(out.data.asnumpy(), full[np.searchsorted(cols, got)], rtol=1e-12, atol=1e-12)
    untouched = np.setdiff1d(np.arange(cols.shape[0]), np.searchsorted(cols, got))
    assert not full[untouched].any()  # columns left out hold only zeros


# ---- empty inputs -----------------------------------------------------------------------------
@pytest.mark.parametrize("n", [7, 2**40])
def test_empty_inputs(n):
    A = so.csr_matrix((np.zeros(0, np.float32), np.zeros(0, np.int64), np.zeros(6, np.int64)), shape=(5, n))
    out = so.dot(A, so.array(np.ones((5, 3), np.float32)), transpose_a=True)
    assert out.stype == "row_sparse" and out.shape == (n, 3) and out.indices.shape == (0,)
    W = so.zeros((n, 3), stype="row_sparse")
    np.testing.assert_array_equal(so.dot(A, W).asnumpy(), np.zeros((5, 3), np.float32))
    empty_rows = so.csr_matrix((np.zeros(0, np.float32), np.zeros(0, np.int64), np.zeros(1, np.int64)),
                               shape=(0, n))
    out = so.dot(empty_rows, so.array(np.ones((0, 3), np.float32)), transpose_a=True)
    assert out.shape == (n, 3) and out.nnz == 0


# ---- containers --------------------------------------------------------------------------------
def test_containers_of_hashed_shapes_allocate_nothing_of_their_width():
    _, parts = hashed_csr(1000, 2**40, 5000)

    def make():
        csr = so.csr_matrix((parts[2], parts[1], parts[0]), shape=(1000, 2**40))
        csr.check_format()
        rsp = so.row_sparse_array((np.ones((5, 8), np.float32), np.arange(5) * 2**35), shape=(2**40, 8))
        rsp.check_format()
        return csr, rsp, so.zeros((2**40, 8), stype="row_sparse"), so.zeros((1000, 2**62), stype="csr")

    (csr, rsp, zero, wide), peak = peak_bytes(make)
    assert peak < 10 * MB
    assert csr.shape == (1000, 2**40) and rsp.shape == (2**40, 8) and wide.shape == (1000, 2**62)
    assert zero.indices.shape == (0,)


# ---- gradients and lazy updates ------------------------------------------------------------------
def test_dot_gradient_into_a_2_40_row_weight_with_lazy_sgd():
    m, n, k = 300, 2**40, 4
    A, parts = hashed_csr(m, n, 1200, "float64")
    cols, ref = compacted(parts, m)
    rng = np.random.default_rng(7)
    w0 = rng.standard_normal((cols.shape[0], k))
    w = so.row_sparse_array((w0.copy(), cols), shape=(n, k))
    w.attach_grad(stype="row_sparse")
    head = rng.standard_normal((m, k))

    def step():
        with autograd.record():
            y = so.dot(A, w)
            loss = so.sum(y * so.array(head))
        loss.backward()
        return y

    y, peak = peak_bytes(step)
    assert peak < 50 * MB
    np.testing.assert_allclose(y.asnumpy(), ref @ w0, rtol=1e-12)
    grad = w.grad
    assert grad.stype == "row_sparse" and grad.shape == (n, k)
    np.testing.assert_array_equal(grad.indices.asnumpy(), cols)
    np.testing.assert_allclose(grad.data.asnumpy(), ref.T @ head, rtol=1e-10, atol=1e-12)
    so.sgd_update(w, grad, lr=0.5, lazy_update=True, out=w)
    np.testing.assert_array_equal(w.indices.asnumpy(), cols)
    np.testing.assert_allclose(w.data.asnumpy(), w0 - 0.5 * (ref.T @ head), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_embedding_with_a_2_40_row_table(dtype):
    n, k = 2**40, 8
    rng = np.random.default_rng(8)
    ids = rng.integers(0, n, (32, 5), dtype=np.int64)
    ids[0, :2] = ids[1, 3]  # repeats sum in the gradient
    stored = np.unique(np.concatenate([ids.ravel()[::2], rng.integers(0, n, 20, dtype=np.int64)]))
    vals = rng.standard_normal((stored.shape[0], k)).astype(dtype)
    w = so.row_sparse_array((vals, stored), shape=(n, k))
    w.attach_grad(stype="row_sparse")
    head = rng.standard_normal((32, 5, k)).astype(dtype)
    data = so.array(ids.astype(np.float64))

    def step():
        with autograd.record():
            out = so.Embedding(data, w, input_dim=n, output_dim=k, dtype=dtype, sparse_grad=True)
            loss = so.sum(out * so.array(head))
        loss.backward()
        return out

    out, peak = peak_bytes(step)
    assert peak < 50 * MB
    pos = np.searchsorted(stored, ids)
    hit = stored[np.minimum(pos, stored.shape[0] - 1)] == ids
    expected = np.where(hit[..., None], vals[np.minimum(pos, stored.shape[0] - 1)], 0)
    np.testing.assert_allclose(out.asnumpy(), expected, **tol(dtype))
    uniq, inverse = np.unique(ids, return_inverse=True)
    ref = np.zeros((uniq.shape[0], k))
    np.add.at(ref, inverse.ravel(), head.reshape(-1, k))
    assert w.grad.stype == "row_sparse" and w.grad.shape == (n, k)
    np.testing.assert_array_equal(w.grad.indices.asnumpy(), uniq)
    np.testing.assert_allclose(w.grad.data.asnumpy(), ref, **tol(dtype))

    # lazy adam on the table: states start storing nothing; all come out on the union of rows
    mean, var = so.zeros((n, k), stype="row_sparse", dtype=dtype), so.zeros((n, k), stype="row_sparse", dtype=dtype)
    so.adam_update(w, w.grad, mean, var, lr=0.1, out=w)
    rows = np.union1d(stored, uniq)
    for x in (w, mean, var):
        np.testing.assert_array_equal(x.indices.asnumpy(), rows)
    w_ref = np.zeros((rows.shape[0], k))
    w_ref[np.searchsorted(rows, stored)] = vals
    g = ref
    at = np.searchsorted(rows, uniq)
    m_ref, v_ref = 0.1 * g, 0.001 * g * g
    w_ref[at] -= 0.1 * m_ref / (np.sqrt(v_ref) + 1e-8)
    np.testing.assert_allclose(w.data.asnumpy(), w_ref, rtol=1e-4 if dtype == "float32" else 1e-10, atol=1e-5)
    np.testing.assert_allclose(mean.data.asnumpy()[at], m_ref, **tol(dtype))


OPTIMIZERS = [
    ("sgd_update", 0, {"lr": 0.1, "wd": 0.01}),
    ("sgd_mom_update", 1, {"lr": 0.1, "momentum": 0.9, "wd": 0.01}),
    ("adam_update", 2, {"lr": 0.1, "wd": 0.01}),
    ("adagrad_update", 1, {"lr": 0.1}),
    ("ftrl_update", 2, {"lr": 0.1}),
]


def _small_reference(name, n_states, params, dtype, lazy):
    """The same update on a small dense weight of the same rows (the hashed ids mapped to
    their ranks among the stored ones, a weight of every row): the reference."""
    rng = np.random.default_rng(9)
    big = 2**40
    w_rows = np.sort(rng.choice(big, 30, replace=False))
    g_rows = np.sort(np.concatenate([w_rows[::3], rng.choice(big, 10, replace=False)]))
    g_rows = np.unique(g_rows)
    s_rows = np.unique(np.concatenate([w_rows[1::4], g_rows[:3]]))
    rows = np.union1d(np.union1d(w_rows, g_rows), s_rows)
    k = 3
    wv = rng.standard_normal((w_rows.shape[0], k)).astype(dtype)
    gv = rng.standard_normal((g_rows.shape[0], k)).astype(dtype)
    sv = [np.abs(rng.standard_normal((s_rows.shape[0], k))).astype(dtype) for _ in range(n_states)]

    def on(rows_of, vals):
        out = np.zeros((rows.shape[0], k), dtype)
        out[np.searchsorted(rows, rows_of)] = vals
        return out

    lazy_params = {"lazy_update": lazy} if name != "adagrad_update" else {}
    fn = getattr(so, name)
    # reference: every row of the union stored (MXNet's all-rows weight) with row_sparse states
    small = rows.shape[0]
    ref_w = so.row_sparse_array((on(w_rows, wv), np.arange(small)), shape=(small, k))
    ref_g = so.row_sparse_array((gv, np.searchsorted(rows, g_rows)), shape=(small, k))
    ref_s = [so.row_sparse_array((on(s_rows, v), np.arange(small)), shape=(small, k)) for v in sv]
    fn(ref_w, ref_g, *ref_s, out=ref_w, **params, **lazy_params)
    # hashed: a 2**40-row weight and states storing a few rows each
    w = so.row_sparse_array((wv, w_rows), shape=(big, k))
    g = so.row_sparse_array((gv, g_rows), shape=(big, k))
    st = [so.row_sparse_array((v, s_rows), shape=(big, k)) for v in sv]
    fn(w, g, *st, out=w, **params, **lazy_params)
    return rows, (ref_w, *ref_s), (w, *st)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("lazy", [True, False])
@pytest.mark.parametrize("name, n_states, params", OPTIMIZERS)
def test_lazy_updates_on_hashed_tables_match_an_all_rows_weight(name, n_states, params, dtype, lazy):
    rows, refs, got = _small_reference(name, n_states, params, dtype, lazy)
    for r, x in zip(refs, got):
        assert x.stype == "row_sparse" and x.shape[0] == 2**40
        np.testing.assert_array_equal(x.indices.asnumpy(), rows)
        np.testing.assert_allclose(x.data.asnumpy(), r.data.asnumpy(), **tol(dtype))


def test_update_without_out_leaves_the_hashed_weight_alone():
    rng = np.random.default_rng(10)
    w = so.row_sparse_array((np.ones((2, 2)), [5, 2**39]), shape=(2**40, 2))
    g = so.row_sparse_array((rng.standard_normal((2, 2)), [5, 7]), shape=(2**40, 2))
    new = so.sgd_update(w, g, lr=1.0)
    assert w.indices.asnumpy().tolist() == [5, 2**39] and (w.data.asnumpy() == 1).all()
    assert new.indices.asnumpy().tolist() == [5, 7, 2**39]
    np.testing.assert_allclose(new.data.asnumpy(), [1 - g.data.asnumpy()[0], -g.data.asnumpy()[1], [1, 1]])


def test_dense_states_still_need_every_row():
    """MXNet's rule for a row_sparse weight with dense states (a hashed table has none)."""
    small_w = so.row_sparse_array((np.ones((1, 2)), [3]), shape=(4, 2))
    small_g = so.row_sparse_array((np.ones((1, 2)), [3]), shape=(4, 2))
    with pytest.raises(so.errors.OperatorError, match="sgd_mom_update.*all of its rows"):
        so.sgd_mom_update(small_w, small_g, so.zeros((4, 2), dtype="float64"), lr=0.1)
    # the process and the op still work afterwards
    out = so.sgd_update(small_w, small_g, lr=0.1)
    np.testing.assert_allclose(out.asnumpy()[3], [0.9, 0.9])


def test_hashed_update_memory_2_40():
    n, k = 2**40, 8
    rng = np.random.default_rng(11)
    rows = np.unique(rng.integers(0, n, 5000, dtype=np.int64))
    w = so.row_sparse_array((rng.standard_normal((rows.shape[0], k)).astype(np.float32), rows), shape=(n, k))
    g = so.row_sparse_array((np.ones((rows.shape[0] // 2, k), np.float32), rows[::2][:rows.shape[0] // 2]),
                            shape=(n, k))
    mom = so.zeros((n, k), stype="row_sparse")
    _, peak = peak_bytes(lambda: so.sgd_mom_update(w, g, mom, lr=0.1, momentum=0.9, out=w))
    assert peak < 10 * MB
    np.testing.assert_array_equal(mom.indices.asnumpy(), rows)


# ---- the simulated gpu ----------------------------------------------------------------------------
@pytest.mark.gpu
def test_simulated_gpu_hashed_products_follow_nnz():
    """On gpu(0) (numba's CUDA simulator), csr.T @ dense and csr @ row_sparse with 2**40 and
    2**62 columns: the columns are renumbered by a sort (a per-column array of that length
    could not be allocated), the results equal the cpu's, on the device."""
    import os
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import numpy as np, sparse_ops as so
        gpu = so.gpu(0)
        rng = np.random.default_rng(2)
        for n in (50, 2**40, 2**62):
            m, k, nnz = 120, 4, 600
            rows, cols = rng.integers(0, m, nnz), rng.integers(0, n, nnz, dtype=np.int64)
            key = np.unique(rows.astype(np.int64) * 1000 + np.searchsorted(np.unique(cols), cols))
            rows, cols = key // 1000, np.unique(cols)[key % 1000]
            indptr = np.zeros(m + 1, np.int64)
            np.cumsum(np.bincount(rows, minlength=m), out=indptr[1:])
            data = rng.standard_normal(cols.shape[0])
            cpu_a = so.csr_matrix((data, cols, indptr), shape=(m, n))
            gpu_a = so.csr_matrix((data, cols, indptr), shape=(m, n), device=gpu)
            g = rng.standard_normal((m, k))
            want = so.dot(cpu_a, so.array(g), transpose_a=True)
            got = so.dot(gpu_a, so.array(g, device=gpu), transpose_a=True)
            assert got.device == gpu and got.stype == "row_sparse" and got.shape == (n, k)
            assert so.explain("dot", gpu_a, so.array(g, device=gpu), transpose_a=True)["kernel"] == "Dot.csr_lhs_gpu"
            np.testing.assert_array_equal(got.indices.asnumpy(), np.unique(cols))
            np.testing.assert_allclose(got.data.asnumpy(), want.data.asnumpy(), rtol=1e-12, atol=1e-12)
            stored = np.union1d(rng.choice(np.unique(cols), 20, replace=False), rng.integers(0, n, 5, dtype=np.int64))
            vals = rng.standard_normal((stored.shape[0], k))
            w_cpu = so.row_sparse_array((vals, stored), shape=(n, k))
            w_gpu = so.row_sparse_array((vals, stored), shape=(n, k), device=gpu)
            got = so.dot(gpu_a, w_gpu)
            assert got.device == gpu and got.stype == "default"
            np.testing.assert_allclose(got.asnumpy(), so.dot(cpu_a, w_cpu).asnumpy(), rtol=1e-12, atol=1e-12)
        print("ok")
    """)
    env = dict(os.environ, SPARSE_OPS_CUDA_SIM="1")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr


@pytest.mark.parametrize("mode", ["clip", "wrap", "raise"])
def test_take_reads_a_hashed_table_at_its_stored_rows(mode):
    """take from a row_sparse table of 2**26 rows (a few stored) by its storage-aware kernel:
    densifying it would take 4 GiB; rows it does not store read as zeros."""
    rng = np.random.default_rng(3)
    vocab, k = 1 << 26, 16
    rows = np.sort(rng.choice(vocab, 30, replace=False))
    values = rng.standard_normal((30, k)).astype(np.float32)
    table = so.row_sparse_array((values, rows), shape=(vocab, k))
    ids = so.array(np.array([[rows[3], 5], [rows[29], rows[3]]]))
    assert so.explain("take", table, ids, mode=mode)["kernel"] == "Take.row_sparse"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no storage fallback
        got = so.take(table, ids, mode=mode).asnumpy()
    assert got.shape == (2, 2, k)
    np.testing.assert_array_equal(got[0, 0], values[3])
    np.testing.assert_array_equal(got[0, 1], 0)
    np.testing.assert_array_equal(got[1], values[[29, 3]])


def _hashed_table(seed: int, stored: int = 30, k: int = 16) -> tuple[so.NDArray, np.ndarray, np.ndarray]:
    """A row_sparse table of 2**40 rows storing ``stored`` of them: (table, rows, values)."""
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(1 << 40, stored, replace=False))
    values = rng.standard_normal((stored, k))
    return so.row_sparse_array((values, rows), shape=(1 << 40, k)), rows, values


@pytest.mark.parametrize("mode", ["clip", "wrap", "raise"])
def test_take_gradient_into_a_hashed_table_stays_row_sparse(mode):
    """The gradient of take along axis 0 of a row_sparse table stores the rows taken (each
    the sum of its gradient rows), never the table's dense size (2**40 x 16 here)."""
    table, rows, values = _hashed_table(5)
    n = table.shape[0]
    ids = np.array([[rows[3], rows[7]], [rows[3], 11]], dtype=np.int64)
    if mode != "raise":
        ids = np.concatenate([ids, [[n + 2, -3]]])  # clipped or wrapped into range
    table.attach_grad(stype="row_sparse")
    head = np.random.default_rng(6).standard_normal(ids.shape + (16,))

    def step():
        with autograd.record():
            loss = so.sum(so.take(table, so.array(ids), mode=mode) * so.array(head))
        return autograd.grad(loss, [table])[0]

    grad, peak = peak_bytes(step)
    assert peak < 20 * MB
    pos = np.clip(ids, 0, n - 1) if mode == "clip" else ids % n
    uniq, inverse = np.unique(pos, return_inverse=True)
    ref = np.zeros((uniq.shape[0], 16))
    np.add.at(ref, inverse.ravel(), head.reshape(-1, 16))
    assert grad.stype == "row_sparse" and grad.shape == table.shape
    np.testing.assert_array_equal(grad.indices.asnumpy(), uniq)
    np.testing.assert_allclose(grad.data.asnumpy(), ref, rtol=1e-12)


def test_embedding_of_a_hashed_table_has_a_row_sparse_gradient_without_sparse_grad():
    table, rows, values = _hashed_table(7, k=8)
    ids = so.array(np.array([rows[2], rows[2], rows[5], 9], dtype=np.float64))
    table.attach_grad(stype="row_sparse")

    def step():
        with autograd.record():
            out = so.Embedding(ids, table, input_dim=table.shape[0], output_dim=8, dtype="float64")
            loss = so.sum(out * out)
        return autograd.grad(loss, [table])

    (grad,), peak = peak_bytes(step)
    assert peak < 20 * MB
    assert grad.stype == "row_sparse"
    np.testing.assert_array_equal(grad.indices.asnumpy(), [9, rows[2], rows[5]])
    np.testing.assert_allclose(grad.data.asnumpy(), [np.zeros(8), 4 * values[2], 2 * values[5]], rtol=1e-12)


@pytest.mark.parametrize("key", [(slice(None),), (slice(2, None),), (slice(None, None, -3), slice(1, 7, 2))])
def test_slice_of_a_hashed_table_reads_its_stored_rows_and_gets_a_row_sparse_gradient(key):
    """slice of a row_sparse table: the stored rows in range read where they are (no
    densified table, no storage fallback), and a row_sparse gradient over the range."""
    rng = np.random.default_rng(8)
    n, base = 1 << 40, (1 << 39) + 17
    rows = np.unique(np.concatenate([base + rng.choice(300, 25, replace=False), rng.integers(0, n, 10)]))
    values = rng.standard_normal((rows.shape[0], 16))
    table = so.row_sparse_array((values, rows), shape=(n, 16))
    lo, top = base + 40, base + 250  # a range of 210 rows holding some of the stored ones
    begin, end = (lo,) + tuple(k.start for k in key[1:]), (top,) + tuple(k.stop for k in key[1:])
    step = tuple(k.step for k in key)
    if key[0].step is not None:  # a descending range
        begin, end = (top - 1,) + begin[1:], (lo - 1,) + end[1:]
    table.attach_grad(stype="row_sparse")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no storage fallback
        with autograd.record():
            out = so.slice(table, begin=begin, end=end, step=step)
            head = so.array(np.random.default_rng(9).standard_normal(out.shape))
            loss = so.sum(out * head)
        (grad,) = autograd.grad(loss, [table])
    s = key[0].step or 1
    picked = np.arange(begin[0], end[0], s) if s > 0 else np.arange(begin[0], end[0], s)
    assert out.shape[0] == picked.shape[0] and grad.stype == "row_sparse"
    inner = key[1:]
    where = {int(r): i for i, r in enumerate(rows)}
    for j in np.nonzero(np.isin(picked, rows))[0]:  # the stored rows in range, at their places
        np.testing.assert_array_equal(out.asnumpy()[j], values[where[int(picked[j])]][inner])
    assert np.count_nonzero(out.asnumpy()) == np.count_nonzero(values[[where[int(r)] for r in picked if r in where]][
        (slice(None),) + inner])
    np.testing.assert_array_equal(grad.indices.asnumpy(), np.sort(picked))
    g = grad.data.asnumpy()[np.argsort(np.argsort(picked))] if s < 0 else grad.data.asnumpy()
    expected = np.zeros((picked.shape[0], 16))
    expected[(slice(None),) + inner] = head.asnumpy()
    np.testing.assert_array_equal(g, expected)
