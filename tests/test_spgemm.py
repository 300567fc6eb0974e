"""dot(csr, csr) -> csr (SpGEMM) and its gradients (``_sampled_dot``, SDDMM), against SciPy
and dense NumPy references: every transpose form, dtypes, int32/int64 indices, canonical
output, storage types, dispatch, empty and zero-nnz operands, the simulated gpu."""
import itertools
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import sparse_ops as so
from sparse_ops import autograd
from sparse_ops.sdk.testing import check_gradient

FLAGS = list(itertools.product([False, True], [False, True]))


def random_csr(rng, shape, density, dtype="float64", integers=True):
    """A canonical SciPy csr with small integer values (exact in every dtype)."""
    m = sp.random(shape[0], shape[1], density, format="csr", random_state=rng,
                  data_rvs=(lambda n: rng.integers(-3, 4, size=n)) if integers else None)
    m = m.astype(dtype)
    m.eliminate_zeros()
    m.sort_indices()
    return m


def power_law_csr(rng, n, edges, dtype="float64"):
    """A Chung-Lu graph: node i is an end of an edge with probability ~ (i + 1) ** -0.8 (rows
    and columns shuffled), so a few hub rows and columns hold many edges."""
    weights = (np.arange(n) + 1.0) ** -0.8
    weights /= weights.sum()
    rows = rng.permutation(n)[rng.choice(n, edges, p=weights)]
    cols = rng.permutation(n)[rng.choice(n, edges, p=weights)]
    m = sp.csr_matrix((rng.standard_normal(edges), (rows, cols)), shape=(n, n))
    m.sum_duplicates()
    return m.astype(dtype)


def ours(m: sp.csr_matrix, index_dtype="int32", device=None):
    return so.csr_matrix((m.data.copy(), m.indices.astype(index_dtype), m.indptr.astype(index_dtype)),
                         shape=m.shape, **({"device": device} if device else {}))


def stored(m: sp.csr_matrix, ta: bool) -> sp.csr_matrix:
    """The operand as stored for a transpose flag: the transpose when the flag is set."""
    return m.T.tocsr().sorted_indices() if ta else m


def expected(a: sp.csr_matrix, b: sp.csr_matrix) -> sp.csr_matrix:
    c = a @ b
    c.sum_duplicates()
    return c.sorted_indices()


def assert_same_csr(out, want: sp.csr_matrix):
    assert out.stype == "csr"
    assert out.shape == want.shape
    np.testing.assert_array_equal(out.indptr.asnumpy(), want.indptr)
    np.testing.assert_array_equal(out.indices.asnumpy(), want.indices)
    np.testing.assert_allclose(out.data.asnumpy(), want.data, rtol=1e-5 if out.dtype == np.float32 else 1e-12)
    out.check_format(full_check=True)


# ---- values, structure, storage types -----------------------------------------------------------------
@pytest.mark.parametrize("ta,tb", FLAGS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_matches_scipy_every_transpose(ta, tb, seed):
    rng = np.random.default_rng(seed)
    a, b = random_csr(rng, (40, 30), 0.1), random_csr(rng, (30, 50), 0.1)
    lhs, rhs = ours(stored(a, ta)), ours(stored(b, tb))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no StorageFallbackWarning
        out = so.dot(lhs, rhs, transpose_a=ta, transpose_b=tb)
    assert_same_csr(out, expected(a, b))
    plan = so.explain("dot", lhs, rhs, transpose_a=ta, transpose_b=tb)
    assert plan["dispatch_mode"] == "fcompute_ex"
    assert plan["kernel"].startswith("Dot.csr_csr")


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False)])
def test_power_law_matches_scipy(ta, tb):
    """Hub rows and columns: rows whose output is nearly full (scanned in column order) next to
    rows of a few entries (sorted); large enough that the parallel chunks run."""
    rng = np.random.default_rng(5)
    a = power_law_csr(rng, 3000, 20000)
    lhs = ours(stored(a, ta))
    out = so.dot(lhs, ours(a), transpose_a=ta, transpose_b=tb)
    assert_same_csr(out, expected(a, a))
    assert np.diff(out.indptr.asnumpy()).max() > 500  # a hub row exists


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_dtypes(dtype):
    rng = np.random.default_rng(3)
    a, b = random_csr(rng, (20, 15), 0.2, dtype), random_csr(rng, (15, 25), 0.2, dtype)
    out = so.dot(ours(a), ours(b))
    assert out.dtype == np.dtype(dtype)
    assert_same_csr(out, expected(a, b))


@pytest.mark.parametrize("dtypes", [("float32", "float64"), ("int64", "float32"), ("int32", "float64")])
def test_mixed_dtypes_promote(dtypes):
    rng = np.random.default_rng(4)
    a, b = random_csr(rng, (12, 10), 0.3, dtypes[0]), random_csr(rng, (10, 9), 0.3, dtypes[1])
    out = so.dot(ours(a), ours(b))
    want_dtype = np.result_type(*dtypes)
    assert out.dtype == want_dtype
    assert_same_csr(out, expected(a.astype(want_dtype), b.astype(want_dtype)))


def test_canonical_output_and_cancellation():
    """Columns sorted and unique; sums that cancel to exactly zero are dropped, as SciPy does."""
    a = sp.csr_matrix(np.array([[1.0, 1.0, 0.0], [0.0, 2.0, 3.0]]))
    b = sp.csr_matrix(np.array([[1.0, 5.0], [-1.0, 0.0], [0.0, 4.0]]))
    want = a @ b  # row 0: 1 - 1 = 0 at column 0 is dropped
    assert want.nnz == 3
    out = so.dot(ours(a), ours(b))
    assert_same_csr(out, want.sorted_indices())
    np.testing.assert_array_equal(out.indices.asnumpy(), [1, 0, 1])


@pytest.mark.parametrize("dtype", ["float64", "int64"])
def test_wide_rows_every_ordering_path(dtype):
    """Each output row leaves the accumulator in increasing column order by one of three
    paths (kernels/spgemm.py): the bitmap walk (rows of much work for their column range),
    collected again and insertion-sorted (up to 32 columns spread wide), or fully sorted
    (more). B here has 400,000 columns, so rows of one to a few dozen values span ranges far
    wider than their length; the small integer values cancel to zero in some sums, which
    must be dropped on every path."""
    rng = np.random.default_rng(4)
    lengths = np.concatenate([np.full(300, 1), np.full(200, 3), np.full(100, 40), np.full(10, 900)])
    rows = np.repeat(np.arange(lengths.shape[0]), lengths)
    a = sp.csr_matrix((rng.integers(-2, 3, rows.shape[0]).astype(dtype), (rows, rng.integers(0, 3000, rows.shape[0]))),
                      shape=(lengths.shape[0], 3000))
    a.sum_duplicates()
    a.eliminate_zeros()
    b = random_csr(rng, (3000, 400_000), 40 / 400_000, dtype)
    assert b.nnz * 4 >= b.shape[1]  # no renumbering of B's columns: the rows stay wide
    want = expected(a, b)
    want.eliminate_zeros()
    assert (abs(a) @ abs(b)).nnz > want.nnz  # some sums did cancel
    widths = np.diff(want.indptr)
    assert widths.min() <= 32 < widths.max()
    assert_same_csr(so.dot(ours(a), ours(b)), want)


def _row_paths(a: sp.csr_matrix, b: sp.csr_matrix) -> np.ndarray:
    """Per row of A @ B: 0 empty (no products), 1 bitmap walk, 2 collected and insertion-sorted
    (up to 32 distinct columns), 3 collected and fully sorted: the kernel's choice, from the
    rows' work and column range (``walks``)."""
    from sparse_ops.kernels.spgemm import walks

    paths = np.zeros(a.shape[0], dtype=np.int64)
    lengths = np.diff(b.indptr)
    for i in range(a.shape[0]):
        sel = a.indices[a.indptr[i]:a.indptr[i + 1]]
        sel = sel[lengths[sel] > 0]
        work = int(lengths[sel].sum())
        if work:
            first, last = int(b.indices[b.indptr[sel]].min()), int(b.indices[b.indptr[sel + 1] - 1].max())
            distinct = np.unique(np.concatenate([b.indices[b.indptr[r]:b.indptr[r + 1]] for r in sel])).shape[0]
            paths[i] = 1 if walks(first, last, work) else (2 if distinct <= 32 else 3)
    return paths


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
@pytest.mark.parametrize("parallel", [False, True])
def test_each_row_path_with_empty_and_cancelling_rows(dtype, parallel):
    """One product whose rows take every path of the numeric pass (kernels/spgemm.py): empty
    (no products, or all of them summing to zero), the bitmap walk, collected again and
    insertion-sorted, collected and fully sorted; a row of each whose products all cancel
    (A's row [1, -1] over two equal rows of B) and rows with some cancelled sums. The result
    equals SciPy's, bit for bit, in one chunk and in parallel chunks taken in turn."""
    from sparse_ops.kernels import spgemm as kernels

    rng = np.random.default_rng(11)
    width = 1_000_000  # a narrow row of B spans 1 word of the second level, a wide one up to ~240
    narrow = [np.sort(rng.choice(4096, k, replace=False)) for k in (5, 30, 200)]
    wide = [np.sort(rng.choice(width, k, replace=False)) for k in (3, 20, 40)]
    b_rows = narrow + wide + [np.zeros(0, np.int64)]  # row 6 of B is empty
    b_rows = b_rows + b_rows  # rows 7..13 repeat rows 0..6: A's [1, -1] over a pair cancels
    # a row A never selects, long enough that B's columns are not renumbered (rows stay wide)
    b_rows.append(np.sort(rng.choice(width, width // kernels.SPARSE_COLUMNS, replace=False)))
    lengths = [len(r) for r in b_rows]
    b = sp.csr_matrix((rng.integers(1, 4, sum(lengths)).astype(dtype) * rng.choice([-1, 1], sum(lengths)).astype(dtype),
                       np.concatenate(b_rows), np.concatenate([[0], np.cumsum(lengths)])), shape=(len(b_rows), width))
    half = sum(lengths[:7])
    b.data[half:2 * half] = b.data[:half]  # the pairs are equal
    a_rows: list[tuple[list[int], list[int]]] = [([], [])]  # an empty row
    for r in range(7):
        a_rows.append(([r], [2]))  # one row of B: walk (narrow), insertion sort / full sort (wide), empty
        a_rows.append(([r, r + 7], [1, -1]))  # the same row twice, cancelling: an empty output row
    a_rows.append(([0, 1, 2], [1, -1, 2]))  # narrow rows overlapping, some sums cancel
    a_rows.append(([3, 4, 5, 10], [1, 2, -1, -1]))  # wide rows: 3 and 10 (equal rows) cancel each other
    a_rows.append(([5, 12], [-1, 1]))  # 40 wide columns, all cancelling
    a_rows.append(([0, 2, 3, 5], [1, 1, 1, 1]))  # narrow and wide together: the walk over a wide range
    a_rows = a_rows * 40  # enough rows for several chunks
    a = sp.csr_matrix((np.concatenate([np.array(v, dtype=dtype) for _, v in a_rows]),
                       np.concatenate([np.array(c, dtype=np.int64) for c, _ in a_rows]),
                       np.concatenate([[0], np.cumsum([len(c) for c, _ in a_rows])])), shape=(len(a_rows), b.shape[0]))
    a.sort_indices()
    want = expected(a, b)
    want.eliminate_zeros()
    paths = _row_paths(a, b)
    assert set(paths) == {0, 1, 2, 3}
    widths = np.diff(want.indptr)
    for path in (1, 2, 3):  # each path meets a row that cancels to nothing and rows that keep entries
        assert (widths[paths == path] == 0).any() and (widths[paths == path] > 0).any(), path
    assert (widths[paths == 0] == 0).all()
    parts = (a.indptr.astype(np.int64), a.indices.astype(np.int64), a.data)
    bparts = (b.indptr.astype(np.int64), b.indices.astype(np.int64), b.data)
    for threads in ((2, 3) if parallel else (1,)):
        ptr, idx, val = kernels.spgemm(parts, bparts, width, np.int64, parallel=parallel, threads=threads)
        np.testing.assert_array_equal(ptr, want.indptr)
        np.testing.assert_array_equal(idx, want.indices)
        np.testing.assert_array_equal(val, want.data)
        assert val.dtype == np.dtype(dtype)
    assert_same_csr(so.dot(ours(a), ours(b)), want)


def _rooms(rng, k):
    """k chunks' lengths and the rooms they were written into (upper bounds, some exact,
    some empty), the rooms' starts, and index and value arrays filling them."""
    lengths = (rng.integers(0, 20, k) * (rng.random(k) < 0.8)).astype(np.int64)
    rooms = lengths + rng.integers(0, 25, k) * (rng.random(k) < 0.7)
    bases = np.concatenate([[0], np.cumsum(rooms)]).astype(np.int64)
    return lengths, bases


@pytest.mark.parametrize("dtypes", [(np.int32, np.float32), (np.int64, np.float64), (np.int64, np.int64)])
def test_finished_chunks_move_in_order_whatever_order_they_finish(dtypes):
    """``move_finished_chunks`` moves a chunk down only once every chunk before it has
    moved, whatever order the chunks finish in; the places overlap the old rooms (shifts
    longer and shorter than the chunks, empty chunks, exact rooms), and the result is the
    chunks' entries closed up, as copying them one by one from the front would give."""
    from sparse_ops.kernels.spgemm import NEXT, PLACE, move_finished_chunks

    rng = np.random.default_rng(12)
    for _ in range(200):
        k = int(rng.integers(1, 12))
        lengths, bases = _rooms(rng, k)
        idx = rng.integers(0, 1000, bases[-1]).astype(dtypes[0])
        val = rng.standard_normal(bases[-1]).astype(dtypes[1]) if np.issubdtype(dtypes[1], np.floating) \
            else rng.integers(-9, 9, bases[-1]).astype(dtypes[1])
        want_idx = np.concatenate([idx[b:b + n] for b, n in zip(bases[:-1], lengths)])
        want_val = np.concatenate([val[b:b + n] for b, n in zip(bases[:-1], lengths)])
        done, state, got = np.zeros(k, np.int64), np.zeros(3, np.int64), np.zeros(k, np.int64)
        for t in rng.permutation(k):
            got[t] = lengths[t]
            done[t] = 1
            move_finished_chunks(idx, val, bases, got, done, state)
            first_unfinished = int(np.argmin(done)) if not done.all() else k
            assert state[NEXT] == first_unfinished  # moved exactly the finished prefix
            assert state[PLACE] == lengths[:first_unfinished].sum()
        np.testing.assert_array_equal(idx[:lengths.sum()], want_idx)
        np.testing.assert_array_equal(val[:lengths.sum()], want_val)


def test_a_taken_lock_leaves_the_moves_to_its_holder():
    """A thread that finds the lock taken moves nothing and goes on (the holder, or the
    driver's last call, moves the chunk)."""
    from sparse_ops.kernels.spgemm import LOCK, NEXT, move_finished_chunks

    lengths, bases = np.array([3, 4], np.int64), np.array([0, 5, 10], np.int64)
    idx, val = np.arange(10, dtype=np.int64), np.arange(10, dtype=np.float64)
    done, state = np.ones(2, np.int64), np.zeros(3, np.int64)
    state[LOCK] = 1
    move_finished_chunks(idx, val, bases, lengths, done, state)
    assert state[NEXT] == 0 and idx[3] == 3
    state[LOCK] = 0
    move_finished_chunks(idx, val, bases, lengths, done, state)
    assert state[NEXT] == 2 and state[LOCK] == 0
    np.testing.assert_array_equal(idx[:7], [0, 1, 2, 5, 6, 7, 8])


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("chunks_per_thread", [1, 16, 200])
def test_threads_moving_each_others_chunks_give_the_product(monkeypatch, threads, chunks_per_thread):
    """In parallel, finished chunks move to their places while other threads compute, with
    few large chunks or many small ones (threads contend for the lock): the same product as
    SciPy's, on a power-law square whose chunks shift by more than their length and a
    uniform product whose shifts are small."""
    from sparse_ops.kernels import spgemm as kernels

    monkeypatch.setattr(kernels, "CHUNKS_PER_THREAD", chunks_per_thread)
    rng = np.random.default_rng(13)
    g = power_law_csr(rng, 4000, 30000)
    u = random_csr(rng, (3000, 3000), 0.004), random_csr(rng, (3000, 3000), 0.004)
    for a, b in ((g, g), u):
        want = expected(a, b)
        want.eliminate_zeros()
        parts = [(m.indptr.astype(np.int32), m.indices.astype(np.int32), m.data) for m in (a, b)]
        for _ in range(3):
            t: dict = {}
            ptr, idx, val = kernels.spgemm(*parts, b.shape[1], np.int32, parallel=True, threads=threads, timings=t)
            assert t["moved"] > 0  # the rooms had gaps
            np.testing.assert_array_equal(ptr, want.indptr)
            np.testing.assert_array_equal(idx, want.indices)
            np.testing.assert_array_equal(val, want.data)


@pytest.mark.parametrize("one_pass_bytes", [0, 1 << 40], ids=["counted rows", "rooms by work"])
@pytest.mark.parametrize("parallel", [True, False])
def test_counted_and_upper_bound_rooms_give_the_same_product(monkeypatch, one_pass_bytes, parallel):
    """The output's room comes from a counting pass or from the rows' work (an upper bound,
    closed up after); both, in parallel chunks and in one, give SciPy's product, with sums
    that cancel to zero dropped inside chunks and at their ends."""
    from sparse_ops.kernels import spgemm as kernels

    monkeypatch.setattr(kernels, "ONE_PASS_BYTES", one_pass_bytes)
    rng = np.random.default_rng(9)
    a = power_law_csr(rng, 3000, 20000)
    a.data = rng.integers(-2, 3, a.nnz).astype(np.float64)
    a.eliminate_zeros()
    want = expected(a, a)
    want.eliminate_zeros()
    assert (abs(a) @ abs(a)).nnz > want.nnz  # some sums cancelled
    parts = (a.indptr.astype(np.int64), a.indices.astype(np.int64), a.data)
    ptr, idx, val = kernels.spgemm(parts, parts, a.shape[1], np.int64, parallel=parallel, threads=2)
    got = sp.csr_matrix((val, idx, ptr), shape=a.shape)
    np.testing.assert_array_equal(ptr, want.indptr)
    np.testing.assert_array_equal(idx, want.indices)
    np.testing.assert_array_equal(val, want.data)
    assert got.has_canonical_format
    assert_same_csr(so.dot(ours(a), ours(a)), want)


def test_index_dtypes():
    rng = np.random.default_rng(6)
    a, b = random_csr(rng, (15, 12), 0.3), random_csr(rng, (12, 10), 0.3)
    want = expected(a, b)
    out32 = so.dot(ours(a, "int32"), ours(b, "int32"))
    assert out32.indices.dtype == np.int32 and out32.indptr.dtype == np.int32
    out64 = so.dot(ours(a, "int64"), ours(b, "int32"))  # an int64 operand gives int64 indices
    assert out64.indices.dtype == np.int64 and out64.indptr.dtype == np.int64
    assert_same_csr(out32, want)
    assert_same_csr(out64, want)


def test_int64_when_the_product_needs_it():
    """A product whose column count exceeds int32 gets int64 indices from int32-free inputs;
    built directly with int64 indices (nothing dense of that width exists)."""
    n = 2**31 + 10
    a = so.csr_matrix((np.array([2.0, 3.0]), np.array([0, 1], dtype=np.int64), np.array([0, 1, 2], dtype=np.int64)),
                      shape=(2, 2))
    b = so.csr_matrix((np.array([1.0, 4.0, 5.0]), np.array([0, n - 1, 7], dtype=np.int64),
                       np.array([0, 2, 3], dtype=np.int64)), shape=(2, n))
    out = so.dot(a, b)
    assert out.shape == (2, n) and out.indices.dtype == np.int64 and out.indptr.dtype == np.int64
    np.testing.assert_array_equal(out.indptr.asnumpy(), [0, 2, 3])
    np.testing.assert_array_equal(out.indices.asnumpy(), [0, n - 1, 7])
    np.testing.assert_array_equal(out.data.asnumpy(), [2.0, 8.0, 15.0])


@pytest.mark.parametrize("shapes", [((0, 4), (4, 3)), ((3, 0), (0, 5)), ((3, 4), (4, 0)), ((5, 6), (6, 7))])
def test_empty_and_zero_nnz(shapes):
    a = sp.csr_matrix(shapes[0])
    b = random_csr(np.random.default_rng(0), shapes[1], 0.5) if 0 not in shapes[1] else sp.csr_matrix(shapes[1])
    for lhs, rhs in ((a, b), (random_csr(np.random.default_rng(1), shapes[0], 0.5) if 0 not in shapes[0] else a,
                               sp.csr_matrix(shapes[1]))):
        out = so.dot(ours(lhs), ours(rhs))
        assert out.nnz == 0 and out.shape == (shapes[0][0], shapes[1][1])
        assert_same_csr(out, expected(lhs, rhs))


def test_empty_rows_and_columns():
    rng = np.random.default_rng(8)
    a, b = random_csr(rng, (30, 20), 0.15).tolil(), random_csr(rng, (20, 25), 0.15).tolil()
    a[::3] = 0
    b[:, ::4] = 0
    a, b = a.tocsr(), b.tocsr()
    a.eliminate_zeros()
    b.eliminate_zeros()
    assert_same_csr(so.dot(ours(a), ours(b)), expected(a, b))


def test_forward_stype_dense():
    rng = np.random.default_rng(9)
    a, b = random_csr(rng, (8, 7), 0.3), random_csr(rng, (7, 6), 0.3)
    out = so.dot(ours(a), ours(b), forward_stype="default")
    assert out.stype == "default"
    np.testing.assert_array_equal(out.asnumpy(), (a @ b).toarray())


def test_shape_mismatch_names_the_op():
    a, b = ours(sp.csr_matrix((3, 4))), ours(sp.csr_matrix((5, 2)))
    with pytest.raises(Exception, match="dot"):
        so.dot(a, b)
    assert so.dot(a, ours(sp.csr_matrix((4, 2)))).shape == (3, 2)  # still works afterwards


# ---- gradients ------------------------------------------------------------------------------------------
def masked_reference(a, b, g, ta, tb):
    """Dense NumPy gradients of op(a) @ op(b) for head g, kept at each operand's stored entries."""
    A, B = a.toarray(), b.toarray()
    oa, ob = (A.T if ta else A), (B.T if tb else B)
    d_oa, d_ob = g @ ob.T, oa.T @ g
    da, db = (d_oa.T if ta else d_oa), (d_ob.T if tb else d_ob)
    return da * (A != 0), db * (B != 0)


@pytest.mark.parametrize("ta,tb", FLAGS)
@pytest.mark.parametrize("head", ["default", "csr"])
def test_gradients_keep_each_operands_structure(ta, tb, head):
    rng = np.random.default_rng(11)
    a = random_csr(rng, (7, 9) if ta else (9, 7), 0.3, integers=False)
    b = random_csr(rng, (8, 7) if tb else (7, 8), 0.3, integers=False)
    lhs, rhs = ours(a), ours(b)
    lhs.attach_grad()
    rhs.attach_grad()
    with autograd.record():
        y = so.dot(lhs, rhs, transpose_a=ta, transpose_b=tb)
    g = rng.standard_normal(y.shape)
    if head == "csr":  # a head gradient with the output's structure
        g = g * (y.asnumpy() != 0)
    y.backward(so.array(g).tostype(head))
    want_a, want_b = masked_reference(a, b, g, ta, tb)
    for grad, x, want in ((lhs.grad, a, want_a), (rhs.grad, b, want_b)):
        assert grad.stype == "csr"
        np.testing.assert_array_equal(grad.indices.asnumpy(), x.indices)  # the operand's own structure
        np.testing.assert_array_equal(grad.indptr.asnumpy(), x.indptr)
        np.testing.assert_allclose(grad.asnumpy(), want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("ta,tb", FLAGS)
def test_gradients_finite_differences(ta, tb):
    rng = np.random.default_rng(12)
    a = random_csr(rng, (5, 6) if ta else (6, 5), 0.4, integers=False)
    b = random_csr(rng, (4, 5) if tb else (5, 4), 0.4, integers=False)
    grads = check_gradient("dot", [ours(a), ours(b)], {"transpose_a": ta, "transpose_b": tb})
    assert [g.stype for g in grads] == ["csr", "csr"]


def test_gradient_dtypes_follow_inputs():
    rng = np.random.default_rng(13)
    a, b = random_csr(rng, (6, 5), 0.4, "float32"), random_csr(rng, (5, 4), 0.4, "float64")
    lhs, rhs = ours(a), ours(b)
    lhs.attach_grad()
    rhs.attach_grad()
    with autograd.record():
        y = so.dot(lhs, rhs)
    y.backward(so.array(np.ones(y.shape)))
    assert lhs.grad.dtype == np.float32 and rhs.grad.dtype == np.float64
    want_a, want_b = masked_reference(a.astype(np.float64), b, np.ones(y.shape), False, False)
    np.testing.assert_allclose(lhs.grad.asnumpy(), want_a, rtol=1e-6)
    np.testing.assert_allclose(rhs.grad.asnumpy(), want_b, rtol=1e-12)


def test_sampled_dot_against_dense_reference():
    """The SDDMM op alone: op(lhs) @ op(rhs) at the mask's stored entries, every operand kind."""
    rng = np.random.default_rng(14)
    mask = random_csr(rng, (9, 8), 0.3)
    for ls, rs, ta, tb in itertools.product(["default", "csr"], ["default", "csr"], [False, True], [False, True]):
        x = random_csr(rng, (6, 9) if ta else (9, 6), 0.4, integers=False)
        y = random_csr(rng, (8, 6) if tb else (6, 8), 0.4, integers=False)
        out = so.ops._sampled_dot(ours(mask), ours(x).tostype(ls), ours(y).tostype(rs), transpose_a=ta, transpose_b=tb)
        X, Y = x.toarray(), y.toarray()
        want = ((X.T if ta else X) @ (Y.T if tb else Y)) * (mask.toarray() != 0)
        assert out.stype == "csr"
        np.testing.assert_array_equal(out.indices.asnumpy(), mask.indices)
        np.testing.assert_allclose(out.asnumpy(), want, rtol=1e-12, atol=1e-12)


def test_the_sampled_product_is_differentiable_for_second_order():
    """``_sampled_dot`` (the gradient of a csr operand) has a gradient of its own: each
    operand's, at its stored values, from the head at the mask's entries; the mask's values
    are not read, so its gradient is zero."""
    rng = np.random.default_rng(15)
    mask, x, y = random_csr(rng, (3, 2), 0.5), random_csr(rng, (3, 4), 0.5), random_csr(rng, (4, 2), 0.5)
    m, a, b = ours(mask), ours(x), ours(y)
    for v in (m, a, b):
        v.attach_grad()
    head = rng.standard_normal((3, 2))
    with autograd.record():
        out = so.ops._sampled_dot(m, a, b)
    out.backward(so.array(head))
    h = head * (mask.toarray() != 0)  # the outputs are the mask's entries only
    np.testing.assert_allclose(a.grad.asnumpy(), (h @ y.toarray().T) * (x.toarray() != 0), rtol=1e-12)
    np.testing.assert_allclose(b.grad.asnumpy(), (x.toarray().T @ h) * (y.toarray() != 0), rtol=1e-12)
    assert not m.grad.asnumpy().any()
    assert a.grad.stype == b.grad.stype == "csr"


# ---- the simulated gpu ----------------------------------------------------------------------------------
@pytest.mark.gpu
def test_simulated_gpu_spgemm_and_gradients():
    """The numba.cuda SpGEMM (a thread per row) and the sampled gradients on gpu(0), in
    numba's CUDA simulator: every transpose form, a cancellation, int64 indices."""
    code = textwrap.dedent("""
        import itertools, warnings
        import numpy as np, scipy.sparse as sp, sparse_ops as so
        from sparse_ops import autograd
        warnings.simplefilter("error")
        gpu = so.gpu(0)
        rng = np.random.default_rng(0)
        def mk(m, idt="int32"):
            return so.csr_matrix((m.data.copy(), m.indices.astype(idt), m.indptr.astype(idt)), shape=m.shape,
                                 device=gpu)
        for (ta, tb), idt in itertools.product(itertools.product([False, True], repeat=2), ["int32", "int64"]):
            a = sp.random(6, 5, 0.4, format="csr", random_state=rng)
            b = sp.random(5, 7, 0.4, format="csr", random_state=rng)
            a.data = np.round(a.data * 4) - 2; b.data = np.round(b.data * 4) - 2
            a.eliminate_zeros(); b.eliminate_zeros()
            sa = a.T.tocsr().sorted_indices() if ta else a
            sb = b.T.tocsr().sorted_indices() if tb else b
            lhs, rhs = mk(sa, idt), mk(sb)
            lhs.attach_grad(); rhs.attach_grad()
            with autograd.record():
                y = so.dot(lhs, rhs, transpose_a=ta, transpose_b=tb)
            want = (a @ b).sorted_indices()
            assert y.device == gpu and y.stype == "csr"
            assert so.explain("dot", lhs, rhs, transpose_a=ta, transpose_b=tb)["kernel"] == "Dot.csr_csr_gpu"
            np.testing.assert_array_equal(y.indptr.asnumpy(), want.indptr)
            np.testing.assert_array_equal(y.indices.asnumpy(), want.indices)
            np.testing.assert_array_equal(y.data.asnumpy(), want.data)
            assert y.indices.dtype == np.dtype(idt)
            g = rng.standard_normal(y.shape)
            y.backward(so.array(g, device=gpu))
            A, B = a.toarray(), b.toarray()
            da, db = g @ B.T, A.T @ g
            np.testing.assert_allclose(lhs.grad.asnumpy(), (da.T if ta else da) * (sa.toarray() != 0), atol=1e-12)
            np.testing.assert_allclose(rhs.grad.asnumpy(), (db.T if tb else db) * (sb.toarray() != 0), atol=1e-12)
            assert lhs.grad.stype == "csr" and rhs.grad.stype == "csr"
        empty = so.dot(mk(sp.csr_matrix((3, 4))), mk(sp.csr_matrix((4, 2))))
        assert empty.nnz == 0 and empty.shape == (3, 2)
        print("ok")
    """)
    env = dict(os.environ, SPARSE_OPS_CUDA_SIM="1")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ok" in result.stdout


def test_gpu_spgemm_chunks_cover_the_rows_within_the_bound():
    """The gpu SpGEMM's row chunks (cuda/spgemm.py ``chunk_rows``) cover every row once, in
    order, each within the workspace bound unless a single row exceeds it alone."""
    from sparse_ops.cuda.spgemm import chunk_rows

    rng = np.random.default_rng(4)
    for _ in range(50):
        work = rng.integers(0, 30, rng.integers(0, 40)) * (rng.random(1) < 0.9)
        w_ptr = np.concatenate([[0], np.cumsum(work)]).astype(np.int64)
        entries = int(rng.integers(1, 60))
        chunks = chunk_rows(w_ptr, entries)
        assert [r for s, e in chunks for r in range(s, e)] == list(range(work.shape[0]))
        for s, e in chunks:
            assert e > s and (w_ptr[e] - w_ptr[s] <= entries or e == s + 1)


@pytest.mark.gpu
def test_simulated_gpu_spgemm_within_a_small_workspace_equals_scipy():
    """With a workspace bound of a few products the gpu SpGEMM runs many row chunks (a
    power-law A @ A, a hub row larger than the bound alone, empty rows, a chunk whose
    products all cancel) and gives SciPy's canonical product, as with the default bound."""
    code = textwrap.dedent("""
        import numpy as np, scipy.sparse as sp, sparse_ops as so
        from sparse_ops.cuda import spgemm as gs
        from sparse_ops.device import to_host
        gpu = so.gpu(0)
        rng = np.random.default_rng(1)
        n = 40
        deg = np.minimum((rng.pareto(1.2, n) * 2).astype(int) + 1, n)
        rows = np.repeat(np.arange(n), deg)
        cols = np.concatenate([rng.choice(n, d, replace=False) for d in deg])
        a = sp.csr_matrix((np.round(rng.standard_normal(rows.shape[0]) * 3), (rows, cols)), shape=(n, n))
        a.data[a.data == 0] = 1.0
        a[5] = 0; a.eliminate_zeros(); a.sort_indices()
        c = sp.csr_matrix(([1.0, 1.0], ([0, 1], [0, 0])), shape=(2, 1))  # rows that cancel: (1, -1) @ ...
        d = sp.csr_matrix(([1.0, -1.0], ([0, 0], [0, 1])), shape=(1, 2))
        ctx = type("Ctx", (), {"xp": np, "stream": None, "device": gpu})()
        for x, y in ((a, a), (c, d), (d, c)):
            want = (x @ y); want.eliminate_zeros(); want.sort_indices()
            parts = lambda m: (m.indptr.astype(np.int64), m.indices.astype(np.int64), m.data)
            for cap in (16, 16 * 7, gs.WORKSPACE_BYTES):  # a product or so per chunk, several rows, one chunk
                ptr, idx, val = gs.spgemm(ctx, parts(x), parts(y), y.shape[1], np.int32, workspace_bytes=cap)
                np.testing.assert_array_equal(to_host(ptr), want.indptr)
                np.testing.assert_array_equal(to_host(idx), want.indices)
                np.testing.assert_array_equal(to_host(val), want.data)
        ab = so.dot(so.csr_matrix(a, device=gpu), so.csr_matrix(a, device=gpu))
        np.testing.assert_array_equal(ab.asscipy().toarray(), (a @ a).toarray())
        print("ok")
    """)
    env = dict(os.environ, SPARSE_OPS_CUDA_SIM="1")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ok" in result.stdout
