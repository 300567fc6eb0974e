"""Structure operators against NumPy/SciPy: storage casts, *_like, add_n, retain, slicing,
split, concat, reshaping, transpose, take, where; storage types, dispatch modes, errors and
gradients."""
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import sparse_ops as so
from conftest import INDEX_DTYPES, csr_parts, dense_arrays, row_sparse_parts
from sparse_ops.dispatch import InferenceError
from sparse_ops.sdk import csr as csr_primitives
from sparse_ops.registry import ParameterError, get_op
from sparse_ops.sdk.testing import check_gradient

STYPES = ["default", "row_sparse", "csr"]
FLOATS = ["float32", "float64"]
NUMERIC = ["float32", "float64", "int32", "int64"]


def make(dense, stype, index_dtype="int64"):
    if stype == "default":
        return so.array(dense)
    if stype == "csr":
        return so.csr_matrix(csr_parts(dense, index_dtype), shape=dense.shape)
    return so.row_sparse_array(row_sparse_parts(dense, index_dtype), shape=dense.shape)


def rand(shape, dtype="float64", density=0.5, seed=0):
    rng = np.random.default_rng(seed)
    values = rng.integers(1, 9, size=shape) * rng.choice([-1, 1], size=shape)
    return np.where(rng.random(shape) < density, values, 0).astype(dtype)


def mode(op, *inputs, **params):
    return so.explain(op, *inputs, **params)["dispatch_mode"]


# ---- cast_storage, zeros_like, ones_like ------------------------------------------------------------
@given(dense=dense_arrays(), src=st.sampled_from(STYPES), dst=st.sampled_from(STYPES),
       index_dtype=st.sampled_from(INDEX_DTYPES))
@settings(max_examples=40)
def test_cast_storage_every_pair(dense, src, dst, index_dtype):
    x = make(dense, src, index_dtype)
    y = so.cast_storage(x, dst)
    assert y.stype == dst and y.dtype == dense.dtype and y is not x
    np.testing.assert_array_equal(y.asnumpy(), dense)
    assert mode("cast_storage", x, stype=dst) == "fcompute_ex"


def test_cast_storage_errors_and_gradient():
    with pytest.raises(InferenceError, match="2-d"):
        so.cast_storage(so.zeros((2, 3, 4)), "csr")
    with pytest.raises(ParameterError, match="stype"):
        so.cast_storage(so.zeros((2, 3)), "coo")
    dense = rand((5, 4))
    for src, dst in [("csr", "default"), ("default", "row_sparse"), ("row_sparse", "csr")]:
        grads = check_gradient("cast_storage", [make(dense, src)], {"stype": dst})
        assert grads[0].stype == src


@pytest.mark.parametrize("stype", STYPES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("dtype", NUMERIC + ["float16"])
def test_zeros_like_keeps_storage_ones_like_is_dense(stype, index_dtype, dtype):
    x = make(rand((4, 3), dtype), stype, index_dtype)
    z = so.zeros_like(x)
    assert z.stype == stype and z.dtype == x.dtype and z.shape == x.shape
    np.testing.assert_array_equal(z.asnumpy(), np.zeros((4, 3)))
    if stype != "default":
        assert z.nnz == 0 and z.aux_types == x.aux_types
        assert mode("zeros_like", x) == "fcompute_ex" and mode("ones_like", x) == "fcompute_ex"
    o = so.ones_like(x)
    assert o.stype == "default" and o.dtype == x.dtype
    np.testing.assert_array_equal(o.asnumpy(), np.ones((4, 3)))
    assert not get_op("zeros_like").differentiable and not get_op("ones_like").differentiable


# ---- add_n -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", NUMERIC)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_add_n_all_row_sparse_stays_row_sparse(dtype, index_dtype):
    arrays = [rand((7, 3), dtype, density=0.3, seed=s) for s in range(4)]
    xs = [make(a, "row_sparse", index_dtype) for a in arrays]
    y = so.add_n(*xs)
    assert y.stype == "row_sparse" and y.dtype == np.dtype(dtype)
    y.check_format()
    np.testing.assert_array_equal(y.asnumpy(), sum(arrays))
    assert y.aux_types == [np.dtype(index_dtype)]
    assert mode("add_n", *xs) == "fcompute_ex"


@pytest.mark.parametrize("stypes", [("default", "row_sparse", "csr"), ("csr", "csr"),
                                    ("row_sparse", "default"), ("csr",), ("default", "default"),
                                    ("csr", "row_sparse", "csr", "default", "default")])
@pytest.mark.parametrize("dtype", NUMERIC + ["float16"])
def test_add_n_otherwise_dense_without_fallback(stypes, dtype):
    arrays = [rand((6, 5), dtype, density=0.4, seed=s) for s in range(len(stypes))]
    xs = [make(a, s) for a, s in zip(arrays, stypes)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", so.StorageFallbackWarning)
        y = so.add_n(*xs)
    assert y.stype == "default" and y.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(y.asnumpy(), sum(a.astype(np.float64) for a in arrays).astype(dtype))
    assert mode("add_n", *xs) == "fcompute_ex"


def test_add_n_many_inputs_and_empty():
    arrays = [rand((3, 2), seed=s) for s in range(40)]
    xs = [make(a, "row_sparse" if i % 2 else "csr") for i, a in enumerate(arrays)]
    np.testing.assert_allclose(so.add_n(*xs).asnumpy(), sum(arrays))
    rs = [make(np.zeros((0, 4)), "row_sparse") for _ in range(3)]
    y = so.add_n(*rs)
    assert y.stype == "row_sparse" and y.shape == (0, 4)
    empty = [make(np.zeros((5, 4)), "row_sparse") for _ in range(2)]
    assert so.add_n(*empty).nnz == 0


def test_add_n_errors():
    with pytest.raises(InferenceError, match="at least one input"):
        so.add_n()
    with pytest.raises(InferenceError, match="shape"):
        so.add_n(so.zeros((2, 3)), so.zeros((3, 2)))
    with pytest.raises(InferenceError, match="num_args"):
        so.add_n(so.zeros((2, 3)), num_args=3)


@pytest.mark.parametrize("stypes", [("default", "default", "default"), ("row_sparse", "row_sparse"),
                                    ("csr", "default", "row_sparse")])
def test_add_n_gradient(stypes):
    xs = [make(rand((4, 3), seed=s), st_) for s, st_ in enumerate(stypes)]
    check_gradient("add_n", xs)


# ---- retain -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("dtype", NUMERIC)
@pytest.mark.parametrize("ids_dtype", ["int32", "int64", "float32"])
def test_retain(index_dtype, dtype, ids_dtype):
    dense = rand((8, 3), dtype, density=0.4)
    x = make(dense, "row_sparse", index_dtype)
    ids = np.array([6, 1, 3, 7], dtype=ids_dtype)
    y = so.retain(x, so.array(ids))
    assert y.stype == "row_sparse" and y.aux_types == [np.dtype(index_dtype)]
    y.check_format()
    expect = np.zeros_like(dense)
    expect[ids.astype(int)] = dense[ids.astype(int)]
    np.testing.assert_array_equal(y.asnumpy(), expect)
    assert mode("retain", x, so.array(ids)) == "fcompute_ex"


def test_retain_edges_and_errors():
    x = make(rand((5, 2)), "row_sparse")
    assert so.retain(x, so.array(np.zeros(0, np.int64))).nnz == 0
    assert so.retain(make(np.zeros((5, 2)), "row_sparse"), so.array(np.array([1]))).nnz == 0
    d = rand((5, 2))
    y = so.retain(so.array(d), so.array(np.array([4, 0, 0, 9])))  # dense data: listed rows stored
    assert y.stype == "row_sparse"
    np.testing.assert_array_equal(y.indices, [0, 4])
    np.testing.assert_array_equal(y.data, d[[0, 4]])
    with pytest.raises(InferenceError, match="row_sparse"):
        so.retain(make(d, "csr"), so.array(np.array([1])))


def test_retain_gradient():
    x = make(rand((6, 3), density=0.6), "row_sparse")
    ids = so.array(np.array([0, 2, 5]))
    grads = check_gradient("retain", [x, ids], wrt=[0])
    assert grads[0].stype == "row_sparse" and grads[1] is None
    np.testing.assert_array_equal(grads[0].indices, [0, 2, 5])


# ---- slice and slice_axis ----------------------------------------------------------------------------
DENSE_SLICES = [
    ((1,), (3,), ()), ((None, 1), (None, None), ()), ((-1, None), (None, 0), (-1, -2)),
    ((0, 1, 0), (2, 3, 4), (1, 1, 2)), ((None,), (None,), (-1,)), ((3, None, -1), (0, None, None), (-2, None, -3)),
    ((2,), (2,), ()),
]


@pytest.mark.parametrize("begin,end,step", DENSE_SLICES)
@pytest.mark.parametrize("dtype", NUMERIC)
def test_slice_dense_matches_numpy(begin, end, step, dtype):
    a = rand((4, 3, 5), dtype)
    key = tuple(slice(b, e if e is None or e >= 0 or (s or 1) > 0 else None, s)
                for b, e, s in zip(begin, end, step or (None,) * len(begin)))
    y = so.slice(so.array(a), begin=begin, end=end, step=step)
    np.testing.assert_array_equal(y.asnumpy(), a[key])
    assert y.stype == "default" and mode("slice", so.array(a), begin=begin, end=end, step=step) == "fcompute"


def test_slice_params_as_strings_and_positional():
    a = rand((4, 6))
    y = so.slice(so.array(a), "(1, None)", "(3, -1)")
    np.testing.assert_array_equal(y.asnumpy(), a[1:3, :-1])


def test_slice_errors():
    x = so.zeros((4, 5))
    with pytest.raises(InferenceError, match="out of range"):
        so.slice(x, begin=(5,), end=(None,))
    with pytest.raises(InferenceError, match="invalid"):
        so.slice(x, begin=(3,), end=(1,))
    with pytest.raises(InferenceError, match="same length"):
        so.slice(x, begin=(0, 0), end=(1,))
    with pytest.raises(InferenceError, match="cannot be 0"):
        so.slice(x, begin=(0,), end=(1,), step=(0,))


@given(dense=dense_arrays(), index_dtype=st.sampled_from(INDEX_DTYPES), data=st.data())
@settings(max_examples=40)
def test_slice_csr_matches_scipy(dense, index_dtype, data):
    rows, cols = dense.shape
    r0 = data.draw(st.integers(0, rows))
    r1 = data.draw(st.integers(r0, rows))
    c0 = data.draw(st.integers(0, cols))
    c1 = data.draw(st.integers(c0, cols))
    x = make(dense, "csr", index_dtype)
    y = so.slice(x, begin=(r0,), end=(r1,))
    assert y.stype == "csr" and y.aux_types == x.aux_types
    y.check_format()
    np.testing.assert_array_equal(y.asnumpy(), dense[r0:r1])
    if y.nnz:
        assert np.shares_memory(y.data, x.data)  # the row range is zero-copy
    z = so.slice(x, begin=(r0, c0), end=(r1, c1))
    assert z.stype == "csr" and z.aux_types == x.aux_types
    z.check_format()
    np.testing.assert_array_equal(z.asnumpy(), dense[r0:r1, c0:c1])
    assert mode("slice", x, begin=(r0, c0), end=(r1, c1)) == "fcompute_ex"


def test_slice_csr_columns_past_int32_of_an_int32_csr():
    """A csr of more than 2**31 columns may keep int32 indices (its stored columns fit):
    column bounds past int32 are compared in int64 (NumPy refused the Python int against
    the int32 indices), giving SciPy's slice."""
    x = so.csr_matrix((np.array([1., 2., 3.]), np.array([5, 2**31 - 2, 2**31 - 1], np.int32),
                       np.array([0, 1, 3], np.int32)), shape=(2, 2**33))
    for begin, end, want in (((0, 2**32), (2, 2**32 + 2), []), ((0, 2**31 - 2), (2, 2**31), [2., 3.]),
                             ((0, -2), (2, None), [])):
        got = so.slice(x, begin=begin, end=end)
        assert got.shape == (2, 2) and got.data.asnumpy().tolist() == want
    got = so.slice_axis(x, axis=1, begin=2**31 - 1, end=2**31 + 5)
    assert got.shape == (2, 6) and got.indices.asnumpy().tolist() == [0] and got.indptr.asnumpy().tolist() == [0, 0, 1]


def test_slice_csr_with_step_is_dense():
    dense = rand((6, 5))
    y = so.slice(make(dense, "csr"), begin=(None, 1), end=(None, None), step=(2, 2))
    assert y.stype == "default"
    np.testing.assert_array_equal(y.asnumpy(), dense[::2, 1::2])


@pytest.mark.parametrize("axis,begin,end", [(0, 1, 3), (1, -3, None), (-1, 0, 2), (2, 1, -1), (1, 2, 2)])
def test_slice_axis(axis, begin, end):
    a = rand((4, 5, 3))
    y = so.slice_axis(so.array(a), axis=axis, begin=begin, end=end)
    key = [slice(None)] * 3
    key[axis] = slice(begin, end)
    np.testing.assert_array_equal(y.asnumpy(), a[tuple(key)])
    check_gradient("slice_axis", [so.array(a)], {"axis": axis, "begin": begin, "end": end})


def test_slice_axis_csr_and_errors():
    dense = rand((6, 5))
    y = so.slice_axis(make(dense, "csr", "int32"), axis=1, begin=1, end=4)
    assert y.stype == "csr" and y.aux_types == [np.int32, np.int32]
    np.testing.assert_array_equal(y.asnumpy(), dense[:, 1:4])
    with pytest.raises(InferenceError, match="axis 2"):
        so.slice_axis(so.array(dense), axis=2, begin=0, end=1)


@pytest.mark.parametrize("stype", ["default", "csr"])
def test_slice_gradient(stype):
    x = make(rand((5, 4), density=0.7), stype)
    check_gradient("slice", [x], {"begin": (1, None), "end": (4, 3)})
    if stype == "default":
        check_gradient("slice", [x], {"begin": (None, -1), "end": (None, None), "step": (-2, -1)})


def test_backward_slice_of_csr_head():
    g = make(rand((3, 2)), "csr")
    y = so.ops._backward_slice(g, begin=(1, 1), end=(4, 3), shape=(5, 4))
    expect = np.zeros((5, 4))
    expect[1:4, 1:3] = g.asnumpy()
    np.testing.assert_array_equal(y.asnumpy(), expect)


# ---- split -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("axis,n,squeeze", [(1, 3, False), (0, 2, False), (-1, 4, False), (1, 6, True),
                                            (2, 1, False)])
@pytest.mark.parametrize("dtype", FLOATS + ["int32"])
def test_split(axis, n, squeeze, dtype):
    a = rand((4, 6, 4), dtype)
    pieces = so.split(so.array(a), num_outputs=n, axis=axis, squeeze_axis=squeeze)
    expect = np.split(a, n, axis=axis)
    if squeeze:
        expect = [np.squeeze(e, axis=axis) for e in expect]
    if n == 1:
        assert isinstance(pieces, so.NDArray)
        pieces = [pieces]
    assert len(pieces) == n
    for p, e in zip(pieces, expect):
        assert p.stype == "default" and p.dtype == a.dtype
        np.testing.assert_array_equal(p.asnumpy(), e)


def test_split_positional_out_and_errors():
    a = rand((4, 6))
    outs = [so.zeros((4, 3), dtype="float64") for _ in range(2)]
    res = so.split(so.array(a), 2, 1, out=outs)
    assert res[0] is outs[0] and res[1] is outs[1]
    np.testing.assert_array_equal(outs[1].asnumpy(), a[:, 3:])
    with pytest.raises(InferenceError, match="does not split evenly"):
        so.split(so.array(a), num_outputs=4, axis=1)
    with pytest.raises(InferenceError, match="squeeze_axis"):
        so.split(so.array(a), num_outputs=2, axis=1, squeeze_axis=True)
    with pytest.raises(ParameterError, match="num_outputs"):
        so.split(so.array(a), num_outputs=0)
    with pytest.raises(ParameterError, match="num_outputs"):
        so.split(so.array(a), num_outputs=None)


def test_split_output_count_follows_the_parameter():
    a = so.array(rand((6, 2)))
    info = so.explain("split", a, num_outputs=3, axis=0)
    assert info["out_shapes"] == [(2, 2)] * 3 and info["dispatch_mode"] == "fcompute"
    assert repr(get_op("split").instance({"num_outputs": "3"})) == "split(num_outputs=3, axis=1, squeeze_axis=False)"


@pytest.mark.parametrize("squeeze", [False, True])
def test_split_gradient(squeeze):
    a = so.array(rand((3, 4, 2)))
    params = {"num_outputs": 4, "axis": -2, "squeeze_axis": squeeze}
    inst = get_op("split").instance(params)
    outs = so.split(a, **params)
    heads = [so.array(np.full(o.shape, i + 1.0)) for i, o in enumerate(outs)]
    heads[2] = None
    (g,) = inst.gradient(heads, [a], outs)
    expect = np.repeat(np.array([1.0, 2.0, 0.0, 4.0])[None, :, None], 3, 0).repeat(2, 2)
    np.testing.assert_array_equal(g.asnumpy(), expect)
    check_gradient("split", [a], params)
    check_gradient("split", [a], {"num_outputs": 1, "axis": 1})


def test_split_backward_through_the_tape():
    a = so.array(rand((2, 6)))
    a.attach_grad()
    with so.autograd.record():
        p0, p1, p2 = so.split(a, num_outputs=3)
        y = so.add_n(p0, p2)
    y.backward()
    np.testing.assert_array_equal(a.grad.asnumpy(), np.tile([1.0, 1.0, 0.0, 0.0, 1.0, 1.0], (2, 1)))


# ---- concat ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("dtype", NUMERIC)
def test_concat_dense(dim, dtype):
    arrays = [rand((3, 2, 4), dtype, seed=0), rand((3, 2, 4), dtype, seed=1), rand((3, 2, 4), dtype, seed=2)]
    y = so.concat(*[so.array(a) for a in arrays], dim=dim)
    np.testing.assert_array_equal(y.asnumpy(), np.concatenate(arrays, axis=dim))
    assert mode("concat", *[so.array(a) for a in arrays], dim=dim) == "fcompute"


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("dtype", NUMERIC + ["float16"])
def test_concat_csr_rows_stays_csr(index_dtype, dtype):
    arrays = [rand((r, 5), dtype, density=0.4, seed=r) for r in (3, 0, 4, 2)]
    xs = [make(a, "csr", index_dtype) for a in arrays]
    y = so.concat(*xs, dim=0)
    assert y.stype == "csr" and y.aux_types == [np.dtype(index_dtype)] * 2
    y.check_format()
    ref = sp.vstack([sp.csr_matrix(a.astype(np.float64)) for a in arrays]).tocsr()
    np.testing.assert_array_equal(y.indptr, ref.indptr)
    np.testing.assert_array_equal(y.asnumpy(), np.concatenate(arrays))
    assert mode("concat", *xs, dim=0) == "fcompute_ex"


def test_concat_csr_columns_and_mixed_are_dense():
    arrays = [rand((3, c), seed=c) for c in (2, 4)]
    y = so.concat(*[make(a, "csr") for a in arrays], dim=1)
    assert y.stype == "default"
    np.testing.assert_array_equal(y.asnumpy(), np.concatenate(arrays, axis=1))
    with pytest.warns(so.StorageFallbackWarning):
        z = so.concat(make(arrays[0], "csr"), so.array(arrays[1]), dim=1)
    np.testing.assert_array_equal(z.asnumpy(), np.concatenate(arrays, axis=1))


def test_concat_errors():
    with pytest.raises(InferenceError, match="does not match"):
        so.concat(so.zeros((2, 3)), so.zeros((3, 3)), dim=1)
    with pytest.raises(InferenceError, match="axis 2"):
        so.concat(so.zeros((2, 3)), so.zeros((2, 3)), dim=2)
    with pytest.raises(InferenceError, match="at least one"):
        so.concat()


@pytest.mark.parametrize("stype,dim", [("default", 1), ("default", 0), ("csr", 0)])
def test_concat_gradient(stype, dim):
    shapes = [(2, 3), (2, 1), (2, 2)] if dim == 1 else [(2, 3), (1, 3), (3, 3)]
    xs = [make(rand(s, seed=i, density=0.7), stype) for i, s in enumerate(shapes)]
    check_gradient("concat", xs, {"dim": dim})


# ---- reshape, expand_dims, flatten ----------------------------------------------------------------------
MXNET_RESHAPES = [  # (input, shape, reverse, output), from MXNet's documentation
    ((2, 3, 4), (4, 0, 2), False, (4, 3, 2)), ((2, 3, 4), (2, 0, 0), False, (2, 3, 4)),
    ((2, 3, 4), (6, 1, -1), False, (6, 1, 4)), ((2, 3, 4), (3, -1, 8), False, (3, 1, 8)),
    ((2, 3, 4), (-1,), False, (24,)), ((2, 3, 4), (-2,), False, (2, 3, 4)),
    ((2, 3, 4), (2, -2), False, (2, 3, 4)), ((2, 3, 4), (-2, 1, 1), False, (2, 3, 4, 1, 1)),
    ((2, 3, 4), (-3, 4), False, (6, 4)), ((2, 3, 4, 5), (-3, -3), False, (6, 20)),
    ((2, 3, 4), (0, -3), False, (2, 12)), ((2, 3, 4), (-3, -2), False, (6, 4)),
    ((2, 3, 4), (-4, 1, 2, -2), False, (1, 2, 3, 4)), ((2, 3, 4), (2, -4, -1, 3, -2), False, (2, 1, 3, 4)),
    ((10, 5, 4), (-1, 0), False, (40, 5)), ((10, 5, 4), (-1, 0), True, (50, 4)),
    ((0, 3), (-1, 3), False, (0, 3)), ((), (1, 1), False, (1, 1)),
]


@pytest.mark.parametrize("src,spec,reverse,expect", MXNET_RESHAPES)
def test_reshape_special_values(src, spec, reverse, expect):
    a = np.arange(int(np.prod(src)), dtype=np.float32).reshape(src)
    y = so.reshape(so.array(a), shape=spec, reverse=reverse)
    assert y.shape == expect
    np.testing.assert_array_equal(y.asnumpy(), a.reshape(expect))


@pytest.mark.parametrize("spec,match", [((5, -1), "cannot be inferred"), ((-1, -1), "only one"),
                                        ((7,), "do not fit"), ((0, 0, 0), "does not exist"),
                                        ((-4, -1, -1), "-4"), ((-4, 4, -1), "does not split"),
                                        ((-5,), "not a valid")])
def test_reshape_errors(spec, match):
    with pytest.raises(InferenceError, match=match):
        so.reshape(so.zeros((2, 3)), shape=spec)


def test_reshape_expand_dims_flatten_gradients():
    a = so.array(rand((2, 3, 4)))
    check_gradient("reshape", [a], {"shape": (-1, 0)})
    check_gradient("expand_dims", [a], {"axis": -1})
    check_gradient("flatten", [a])
    assert so.expand_dims(a, axis=0).shape == (1, 2, 3, 4)
    assert so.expand_dims(a, -4).shape == (1, 2, 3, 4)
    assert so.expand_dims(a, axis=3).shape == (2, 3, 4, 1)
    np.testing.assert_array_equal(so.flatten(a).asnumpy(), a.asnumpy().reshape(2, 12))
    assert so.flatten(so.zeros((5,))).shape == (5, 1)
    with pytest.raises(InferenceError, match="out of range"):
        so.expand_dims(a, axis=5)


# ---- transpose -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("axes", [(), (0, 2, 1), (2, 0, 1), (-1, 0, 1), (0, 1, 2)])
@pytest.mark.parametrize("dtype", NUMERIC)
def test_transpose_dense(axes, dtype):
    a = rand((2, 3, 4), dtype)
    y = so.transpose(so.array(a), axes=axes)
    np.testing.assert_array_equal(y.asnumpy(), np.transpose(a, axes or None))
    check_gradient("transpose", [so.array(rand((2, 3, 4)))], {"axes": axes})


@given(dense=dense_arrays(), index_dtype=st.sampled_from(INDEX_DTYPES), axes=st.sampled_from([(), (1, 0), (0, 1)]))
@settings(max_examples=40)
def test_transpose_csr_matches_scipy(dense, index_dtype, axes):
    x = make(dense, "csr", index_dtype)
    y = so.transpose(x, axes=axes)
    assert y.stype == "csr" and y.aux_types == [np.dtype(index_dtype)] * 2
    y.check_format()  # canonical: sorted, unique column indices
    np.testing.assert_array_equal(y.asnumpy(), dense.T if axes != (0, 1) else dense)
    if axes != (0, 1):
        values = x.data.astype(np.float64)  # the sdk's own transpose: numba has no cpu float16
        indptr, indices, data = csr_primitives.transpose(None, x.shape[1], x.indptr, x.indices, values)
        np.testing.assert_array_equal(indptr, y.indptr)
        np.testing.assert_array_equal(indices, y.indices)
        np.testing.assert_array_equal(data, y.data)
    assert mode("transpose", x, axes=axes) == "fcompute_ex"


def test_transpose_csr_gradient_and_errors():
    check_gradient("transpose", [make(rand((4, 3), density=0.5), "csr")])
    with pytest.raises(InferenceError, match="permutation"):
        so.transpose(so.zeros((2, 3)), axes=(0, 0))
    with pytest.raises(InferenceError, match="one entry per axis"):
        so.transpose(so.zeros((2, 3)), axes=(1, 0, 2))


# ---- take -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode_", ["clip", "wrap"])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("idx_dtype", ["int32", "int64", "float32", "float64"])
def test_take_modes(mode_, axis, idx_dtype):
    a = rand((4, 5, 3), "float32")
    ids = np.array([[0, 7, -1], [2, -6, 3]])
    y = so.take(so.array(a), so.array(ids.astype(idx_dtype)), axis=axis, mode=mode_)
    np.testing.assert_array_equal(y.asnumpy(), np.take(a, ids, axis=axis, mode=mode_))
    assert y.dtype == a.dtype and y.stype == "default"


def test_take_float_indices_truncate_and_raise_mode():
    a = rand((5, 2), "int64")
    y = so.take(so.array(a), so.array(np.array([1.7, 3.2])), mode="raise")
    np.testing.assert_array_equal(y.asnumpy(), a[[1, 3]])
    with pytest.raises(IndexError, match="index 7 is out of bounds for axis 0 with size 5"):
        so.take(so.array(a), so.array(np.array([1, 7, 9])), mode="raise")
    with pytest.raises(IndexError, match="index -1 "):
        so.take(so.array(a), so.array(np.array([-1])), axis=0, mode="raise")
    with pytest.raises(IndexError, match="length 0"):
        so.take(so.zeros((0, 2)), so.array(np.array([0])))
    with pytest.raises(ParameterError, match="mode"):
        so.take(so.array(a), so.array(np.array([0])), mode="nearest")
    with pytest.raises(InferenceError, match="axis 2"):
        so.take(so.array(a), so.array(np.array([0])), axis=2)
    empty = so.take(so.array(a), so.array(np.zeros((0,), np.int32)))
    assert empty.shape == (0, 2)


@pytest.mark.parametrize("axis", [0, 1])
def test_take_gradient_accumulates_repeats(axis):
    a = so.array(rand((4, 3, 2)))
    ids = so.array(np.array([[1, 1], [3, 1], [0, 9]]))
    check_gradient("take", [a, ids], {"axis": axis, "mode": "wrap"}, wrt=[0])
    g = so.array(np.ones(so.take(a, ids, axis=axis).shape))
    grads = get_op("take").instance({"axis": axis, "mode": "clip"}).gradient([g], [a, ids], [])
    expect = np.zeros((4, 3, 2))
    pos = np.clip(np.array([[1, 1], [3, 1], [0, 9]]), 0, a.shape[axis] - 1).ravel()
    view = np.moveaxis(expect, axis, 0)
    np.add.at(view, pos, 1.0)
    np.testing.assert_array_equal(grads[0].asnumpy(), expect)
    assert grads[1] is None


# ---- where ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", NUMERIC)
def test_where(dtype):
    c = rand((4, 3), "float32", density=0.5)
    x, y = rand((4, 3), dtype, seed=1), rand((4, 3), dtype, seed=2)
    out = so.where(so.array(c), so.array(x), so.array(y))
    np.testing.assert_array_equal(out.asnumpy(), np.where(c != 0, x, y))
    rows = np.array([1, 0, 0, 2], dtype=np.int32)
    out = so.where(so.array(rows), so.array(x), so.array(y))
    np.testing.assert_array_equal(out.asnumpy(), np.where(rows[:, None] != 0, x, y))


def test_where_errors_and_gradient():
    with pytest.raises(InferenceError, match="condition"):
        so.where(so.zeros((3,)), so.zeros((4, 2)), so.zeros((4, 2)))
    with pytest.raises(InferenceError, match="dtype"):
        so.where(so.zeros((4, 2)), so.zeros((4, 2), dtype="float32"), so.zeros((4, 2), dtype="float64"))
    cond = so.array(rand((4, 3), density=0.5, seed=3))
    grads = check_gradient("where", [cond, so.array(rand((4, 3), seed=1)), so.array(rand((4, 3), seed=2))],
                           wrt=[1, 2])
    assert grads[0] is None
    mask = cond.asnumpy() != 0
    assert not grads[1].asnumpy()[~mask].any() and not grads[2].asnumpy()[mask].any()


def test_exports():
    """One publication: every public built-in is sparse_ops.<name>, the function registration
    put in sparse_ops.ops."""
    for name in so.ops.__all__:
        assert getattr(so, name) is getattr(so.ops, name) is so.get_op(name).function
    assert so.slice is so.ops.slice and so.cast_storage is so.ops.cast_storage
    assert {"slice", "take", "where", "reshape", "transpose", "cast_storage", "add_n"} <= set(so.ops.__all__)


def test_take_rows_of_a_float16_csr():
    """float16 values (which numba cannot compute on the cpu) move as their bits."""
    dense = np.array([[0, 1.5, 0], [2.25, 0, 0], [0, 0, -3]], np.float16)
    r = so.take(so.array(dense).tostype("csr"), so.array(np.array([2, 0, 2])))
    assert r.stype == "csr" and r.dtype == np.float16
    np.testing.assert_array_equal(r.asnumpy(), dense[[2, 0, 2]])


def test_axes_out_of_range_or_named_twice_are_refused():
    a, b = so.array(np.arange(3.).reshape(3, 1)), so.array(np.ones((2, 5)))
    for kw, text in ((dict(lhs_axes=(7,), rhs_axes=(-9,)), "axis 7 is out of range"),
                     (dict(lhs_axes=(1, 1), rhs_axes=(1, 0)), "lhs_axes .* names the same axis twice")):
        with pytest.raises(so.OperatorError, match=text):
            so.broadcast_like(a, b, **kw)
    with pytest.raises(so.OperatorError, match="out of range for an array of 0 dimension"):
        so.broadcast_like(so.array(np.float64(3.)), b, lhs_axes=(0,), rhs_axes=(0,))
    assert so.broadcast_like(a, b, lhs_axes=(1,), rhs_axes=(-1,)).shape == (3, 5)
    with pytest.raises(so.OperatorError, match="names the same axis twice"):
        so.broadcast_axis(so.array(np.ones((1, 3))), axis=(0, 0), size=(2, 5))


def test_multinomial_with_no_draws():
    p = so.array(np.array([[0.2, 0.8], [0.5, 0.5]]))
    assert so.invoke("_sample_multinomial", [p], {"shape": (0,)}).shape == (2, 0)
    assert so.invoke("_sample_multinomial", [p], {}).shape == (2,)
