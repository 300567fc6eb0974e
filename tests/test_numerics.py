"""Numerics (issue 9, item 6): NaN and inf, float16, integer overflow.

- NaN and inf stored in values propagate as NumPy propagates them on the dense array,
  through elementwise, unary, reduce and dot ops on every storage type (NaN and inf
  positions compared exactly). The one rule of sparse storage on top: a storage-aware
  kernel multiplying by a sparse operand (``elemwise_mul``, ``dot``) treats that operand's
  implicit zeros as exact zeros, so ``0 * nan`` is 0 there (as SciPy, MXNet and PyTorch's
  sparse tensors do); a dense operand's zeros are values. An op that runs on densified
  inputs (``explain(...)["dispatch_mode"] == "fallback"``) computes as NumPy throughout.
- float16 inputs either work (compared with the same op on float32, at float16's
  tolerance) or are refused with a message naming the op and float16, for every
  registered op.
- An nnz, index or shape that does not fit the index dtype is caught before anything is
  allocated (tested with shapes and metadata only).
"""
from __future__ import annotations

import warnings
from contextlib import contextmanager

import numpy as np
import pytest

import sparse_ops as so
from fuzz_inputs import op_calls
from sparse_ops.registry import all_ops

STYPES = ("default", "csr", "row_sparse")
F32 = np.float32
NAN, INF = np.nan, np.inf

# implicit zeros next to NaN/inf in both operands, an all-zero row (row_sparse omits it)
A = np.array([[1.5, 0, NAN, 0, -2],
              [0, 0, 0, 0, 0],
              [INF, 0, 3, -INF, 0],
              [0, -1, 0, 2, NAN]])
B = np.array([[2, NAN, 0, 0, INF],
              [0, 1, 0, -INF, 0],
              [-INF, 0, 0, 4, 1],
              [0, 0, 5, 0, NAN]])
W = np.array([[1, 0, NAN],
              [0, 2, 0],
              [INF, 0, 1],
              [0, 0, 0],
              [3, -INF, 0]])


@contextmanager
def quiet():
    """NumPy warns on invalid values; so may we. The values are what is tested."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        warnings.simplefilter("ignore", so.StorageFallbackWarning)  # densified runs are tested too
        yield


def make(dense: np.ndarray, stype: str, dtype=np.float64):
    x = so.array(dense.astype(dtype))
    return x if stype == "default" else x.tostype(stype)


def stored(dense: np.ndarray, stype: str) -> np.ndarray:
    """Where a container of ``stype`` made from ``dense`` stores values."""
    if stype == "default":
        return np.ones(dense.shape, bool)
    if stype == "csr":
        return dense != 0
    return np.broadcast_to((dense != 0).any(axis=1, keepdims=True), dense.shape)


def assert_same(got, ref: np.ndarray, rtol: float = 1e-6) -> None:
    got = got.asnumpy() if hasattr(got, "asnumpy") else np.asarray(got)
    ref = np.asarray(ref)
    assert got.shape == ref.shape or got.size == ref.size, (got.shape, ref.shape)
    got, ref = got.reshape(ref.shape).astype(np.float64), ref.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref), err_msg=f"NaN positions\n{got}\n{ref}")
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(ref), err_msg=f"+inf positions\n{got}\n{ref}")
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(ref), err_msg=f"-inf positions\n{got}\n{ref}")
    finite = np.isfinite(ref)
    np.testing.assert_allclose(got[finite], ref[finite], rtol=rtol, atol=rtol)


def structural_product(a: np.ndarray, sa: np.ndarray, b: np.ndarray, sb: np.ndarray) -> np.ndarray:
    """a @ b summing only the terms whose factors are both stored."""
    terms = np.where(sa[:, :, None] & sb[None, :, :], a[:, :, None] * b[None, :, :], 0.0)
    return terms.sum(axis=1)


def densified(op: str, *inputs, **params) -> bool:
    """Whether the op runs on densified inputs (the fallback: NumPy's semantics throughout)."""
    return so.explain(op, *inputs, **params)["dispatch_mode"] == "fallback"


# ---- NaN and inf --------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("lhs", STYPES)
@pytest.mark.parametrize("rhs", STYPES)
@pytest.mark.parametrize("op", ["elemwise_add", "elemwise_sub", "elemwise_mul", "elemwise_div"])
def test_nan_inf_through_elementwise_ops(op, lhs, rhs, dtype):
    a, b = make(A, lhs, dtype), make(B, rhs, dtype)
    with quiet():
        got = getattr(so, op)(a, b)
        if op == "elemwise_mul" and not densified(op, a, b):
            ref = np.where(stored(A, lhs) & stored(B, rhs), A * B, 0.0)
        else:
            ref = {"elemwise_add": np.add, "elemwise_sub": np.subtract, "elemwise_mul": np.multiply,
                   "elemwise_div": np.divide}[op](A, B)
    assert_same(got, ref.astype(dtype), rtol=1e-6)


UNARY = {
    "negative": ({}, np.negative), "abs": ({}, np.abs), "sign": ({}, np.sign), "square": ({}, np.square),
    "sqrt": ({}, np.sqrt), "exp": ({}, np.exp), "log": ({}, np.log), "log1p": ({}, np.log1p),
    "tanh": ({}, np.tanh), "relu": ({}, lambda x: np.maximum(x, 0)),
    "sigmoid": ({}, lambda x: 1 / (1 + np.exp(-x))),
    "clip": ({"a_min": -1.0, "a_max": 2.0}, lambda x: np.clip(x, -1, 2)),
    "_plus_scalar": ({"scalar": 1.5}, lambda x: x + 1.5), "_minus_scalar": ({"scalar": 1.5}, lambda x: x - 1.5),
    "_rminus_scalar": ({"scalar": 1.5}, lambda x: 1.5 - x), "_mul_scalar": ({"scalar": -2.0}, lambda x: x * -2.0),
    "_div_scalar": ({"scalar": 4.0}, lambda x: x / 4.0), "_rdiv_scalar": ({"scalar": 2.0}, lambda x: 2.0 / x),
    "_power_scalar": ({"scalar": 2.0}, lambda x: x ** 2.0), "_rpower_scalar": ({"scalar": 2.0}, lambda x: 2.0 ** x),
    "_maximum_scalar": ({"scalar": 0.5}, lambda x: np.maximum(x, 0.5)),
    "_minimum_scalar": ({"scalar": 0.5}, lambda x: np.minimum(x, 0.5)),
    "_equal_scalar": ({"scalar": 3.0}, lambda x: (x == 3.0) * 1.0),
    "_not_equal_scalar": ({"scalar": 3.0}, lambda x: (x != 3.0) * 1.0),
    "_greater_scalar": ({"scalar": 1.0}, lambda x: (x > 1.0) * 1.0),
    "_lesser_equal_scalar": ({"scalar": 1.0}, lambda x: (x <= 1.0) * 1.0),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("stype", STYPES)
@pytest.mark.parametrize("op", sorted(UNARY))
def test_nan_inf_through_unary_ops(op, stype, dtype):
    params, ref_fn = UNARY[op]
    with quiet():
        got = so.invoke(op, [make(A, stype, dtype)], params)
        ref = ref_fn(A.astype(dtype))
    assert_same(got, ref, rtol=1e-6 if dtype == np.float64 else 1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("stype", STYPES)
@pytest.mark.parametrize("axis", [None, 0, 1])
@pytest.mark.parametrize("op", ["sum", "mean", "square_sum", "norm"])
def test_nan_inf_through_reductions(op, axis, stype, dtype):
    # rows without NaN too, so that finite sums are checked as well as the propagation
    data = np.vstack([A, [[0, 1, 2, 0, 3]]])
    with quiet():
        got = getattr(so, op)(make(data, stype, dtype), axis=axis)
        ref = {"sum": lambda x: np.sum(x, axis=axis), "mean": lambda x: np.mean(x, axis=axis),
               "square_sum": lambda x: np.sum(x * x, axis=axis),
               "norm": lambda x: np.sqrt(np.sum(x * x, axis=axis))}[op](data.astype(np.float64))
    assert_same(got, ref, rtol=1e-6 if dtype == np.float64 else 1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("lhs", STYPES)
@pytest.mark.parametrize("rhs", STYPES)
@pytest.mark.parametrize("transpose_a", [False, True])
def test_nan_inf_through_dot(lhs, rhs, transpose_a, dtype):
    a = A.T.copy() if transpose_a else A  # the product is always A @ W
    x, w = make(a, lhs, dtype), make(W, rhs, dtype)
    with quiet():
        got = so.dot(x, w, transpose_a=transpose_a)
        if densified("dot", x, w, transpose_a=transpose_a):
            ref = A @ W
        else:
            sa = stored(a, lhs).T if transpose_a else stored(a, lhs)
            ref = structural_product(A, sa, W, stored(W, rhs))
    assert_same(got, ref.astype(dtype), rtol=1e-6 if dtype == np.float64 else 1e-5)


# ---- float16 ------------------------------------------------------------------------------------
def _product_ops() -> list:
    """Every op with inputs that the library or an installed plugin defines (not the ones
    other test modules register)."""
    from importlib.metadata import entry_points

    plugins = {ep.name for ep in entry_points(group="sparse_ops.plugins")}
    ops = []
    for opdef in sorted(all_ops(), key=lambda d: d.name):
        if opdef.plugin is None:  # built-in, unless an MXNet-form op a test registered (adapter class)
            ours = opdef.cls.__module__.startswith("sparse_ops.") and not hasattr(opdef.cls, "prop_class")
        else:
            ours = opdef.plugin in plugins
        if ours and opdef.arguments and not opdef.name.startswith("_random"):
            ops.append(opdef)
    return ops


def _cast(inputs: tuple, dtype) -> tuple:
    return tuple(x.astype(dtype) if x.dtype.kind == "f" else x for x in inputs)


def _outputs(result) -> list:
    return list(result) if isinstance(result, (list, tuple)) else [result]


@pytest.mark.parametrize("opdef", _product_ops(), ids=lambda d: d.name)
def test_float16_works_or_is_refused_clearly(opdef):
    """Every call with float16 inputs (each storage type in each argument slot) either
    matches the same call on float32 at float16's precision, with float16 results, or is
    refused naming the op and float16; at least one call does one or the other."""
    rng = np.random.default_rng(5)
    dense = rng.integers(-3, 4, size=(4, 4)).astype(np.float16)
    dense[1] = 0
    ran = refused = 0
    for stype in STYPES:
        x16 = make(dense, stype, np.float16)
        for inputs, params in op_calls(opdef, x16, 4, 4, np.float16):
            inputs32 = _cast(inputs, np.float32)  # before the call: optimizers update states in place
            params32 = {k: ("float32" if k == "dtype" else v) for k, v in params.items()}
            try:
                with quiet():
                    got = _outputs(so.invoke(opdef, inputs, params))
            except so.SparseOpsError as exc:
                msg = str(exc)
                if "float16" in msg:  # (other refusals: this storage type, say)
                    assert opdef.name in msg and len(msg) < 400 and "TypingError" not in msg, (
                        f"{opdef.name} refuses float16 without a clear message: {msg[:600]}")
                    refused += 1
                else:  # the values refused (a matrix potrf finds not positive definite): so in float32
                    with pytest.raises(so.SparseOpsError), quiet():
                        so.invoke(opdef, _cast(inputs, np.float32), params32)
                    refused += 1
                continue
            ran += 1
            with quiet():
                ref = _outputs(so.invoke(opdef, inputs32, params32))
            for g, r in zip(got, ref):
                assert g.stype == r.stype
                if r.dtype == np.float32:
                    assert g.dtype == np.float16, f"{opdef.name}: float16 in, {g.dtype} out"
                if opdef.name in ("Dropout", "_shuffle", "_sample_multinomial"):
                    continue  # random
                r_np = r.asnumpy()
                if g.dtype == np.float16:  # the float32 result as float16 holds it: beyond 65504, inf
                    with np.errstate(over="ignore"):
                        r_np = r_np.astype(np.float16)
                g64, r64 = g.asnumpy().astype(np.float64), r_np.astype(np.float64)
                scale = max(1.0, float(np.nanmax(np.abs(r64[np.isfinite(r64)]), initial=0)))
                tol = 4 * float(np.finfo(np.float16).eps)  # a few roundings to float16
                np.testing.assert_allclose(g64, r64, rtol=tol, atol=tol * scale, equal_nan=True,
                                           err_msg=f"{opdef.name} ({stype}) float16 vs float32")
    assert ran + refused > 0, f"{opdef.name}: no call ran or was refused for float16"


def test_float16_optimizer_step_computes_in_float32():
    """In float16 adam's epsilon (1e-8) is 0: a row with zero gradient, mean and variance
    became 0/0 = nan. The step now runs in float32 and is stored in float16."""
    w = so.array(np.ones((2, 3), np.float16))
    g, mean, var = (so.zeros((2, 3), dtype="float16") for _ in range(3))
    out = so.adam_update(w, g, mean, var, lr=0.1)
    np.testing.assert_array_equal(out.asnumpy(), np.ones((2, 3), np.float16))
    h = so.zeros((2, 3), dtype="float16")
    assert np.isfinite(so.adagrad_update(w, g, h, lr=0.1).asnumpy()).all()


def test_dense_zeros_times_stored_nan_give_nan_in_dot_dense_csr():
    """dot(dense, csr) skipped the dense operand's zeros: 0 * nan stored in the csr gave 0."""
    a = np.array([[0.0, 1.0], [0.0, 0.0]])
    w = so.csr_matrix(np.array([[NAN, 2.0], [0.0, 3.0]]))
    with quiet():
        got = so.dot(so.array(a), w)
    assert_same(got, a @ np.array([[NAN, 2.0], [0.0, 3.0]]))


# ---- integer overflow, with shapes and metadata only -----------------------------------------------
def test_result_index_dtype_leaves_int32_when_nnz_or_shape_do_not_fit():
    from sparse_ops.ops._util import index_dtype_for

    i32, i64 = np.zeros(1, np.int32), np.zeros(1, np.int64)
    assert index_dtype_for(i32, i32, nnz=2**31 - 1, shape=(10, 10)) == np.int32
    assert index_dtype_for(i32, i32, nnz=2**31, shape=(10, 10)) == np.int64
    assert index_dtype_for(i32, shape=(2**31 - 1, 2)) == np.int32
    assert index_dtype_for(i32, shape=(3, 2**31)) == np.int64
    assert index_dtype_for(i32, i64) == np.int64


def test_int32_inputs_with_more_columns_than_int32_holds():
    """Valid int32 containers of a shape beyond int32: results that build new index arrays
    hold them in int64 (chosen from the shape before anything is allocated), and are right."""
    n = 2**31 + 5
    h = so.csr_matrix((np.array([1.0, 3.0], F32), np.array([5, 2**31 - 1], np.int32),
                       np.array([0, 2, 2], np.int32)), shape=(2, n))
    g = so.csr_matrix((np.array([2.0], F32), np.array([2**31 - 1], np.int32), np.array([0, 0, 1], np.int32)),
                      shape=(2, n))
    for result, indices, indptr, data in (
            (so.elemwise_add(h, g), [5, 2**31 - 1, 2**31 - 1], [0, 2, 3], [1, 3, 2]),
            (so.elemwise_mul(h, h), [5, 2**31 - 1], [0, 2, 2], [1, 9]),
            (so.concat(h, g, dim=0), [5, 2**31 - 1, 2**31 - 1], [0, 2, 2, 2, 3], [1, 3, 2])):
        result.check_format()
        assert result.shape[1] == n and result.indices.dtype == np.int64
        assert (result.indices.tolist(), result.indptr.tolist(), result.data.tolist()) == (indices, indptr, data)
    r = so.row_sparse_array((np.ones((1, 2), F32), np.array([2**31 - 1], np.int32)), shape=(n, 2))
    s = so.row_sparse_array((np.ones((1, 2), F32), np.array([3], np.int32)), shape=(n, 2))
    total = so.elemwise_add(r, s)
    assert total.indices.tolist() == [3, 2**31 - 1] and total.indices.dtype == np.int64


def test_sparse_shapes_near_int64_work_without_index_overflow():
    """A csr of 2**62 columns: elementwise ops must not form row * cols + col keys."""
    n = 2**62 + 5
    h = so.csr_matrix((np.array([1.0, 3.0], F32), np.array([5, 2**62]), np.array([0, 2, 2])), shape=(2, n))
    g = so.csr_matrix((np.array([2.0], F32), np.array([2**62]), np.array([0, 0, 1])), shape=(2, n))
    total = so.elemwise_sub(h, g)
    assert (total.indices.tolist(), total.indptr.tolist(), total.data.tolist()) == (
        [5, 2**62, 2**62], [0, 2, 3], [1, 3, -2])
    np.testing.assert_array_equal(so.sum(h, axis=1).asnumpy(), [4, 0])


def test_nnz_beyond_an_int32_indptr_is_refused_without_reading_the_arrays():
    """2**31 stored values (zero-stride arrays: no memory) with an int32 indptr, which cannot
    count that far: refused by the O(1) checks."""
    data = np.broadcast_to(np.float32(1), (2**31,))
    indices = np.broadcast_to(np.int32(0), (2**31,))
    with pytest.raises(so.SparseFormatError, match="end at nnz = 2147483648, got 2147483647"):
        so.CSRNDArray(data, indices, np.array([0, 2**31 - 1], np.int32), (1, 5))


@pytest.mark.parametrize("build", [
    lambda: so.zeros((2**64, 2), stype="row_sparse"),
    lambda: so.zeros((3, 2**63), stype="csr"),
    lambda: so.csr_matrix((np.ones(1, F32), np.array([0]), np.array([0, 1])), shape=(1, 2**64)),
    lambda: so.row_sparse_array((np.ones((1, 2), F32), np.array([0])), shape=(2**63, 2)),
])
def test_shapes_beyond_int64_are_refused_before_allocating(build):
    with pytest.raises(so.SparseFormatError, match="does not fit in int64"):
        build()


@pytest.mark.parametrize("build", [
    lambda: so.zeros((2**40, 2**40)),
    lambda: so.zeros((2**40, 2**40), stype="row_sparse").tostype("default"),
    lambda: so.zeros((2**62, 3), stype="csr"),
    lambda: so.csr_matrix((np.ones(1, F32), np.array([0]), np.array([0, 1, 1])),
                          shape=(2, 2**62)).tostype("row_sparse"),
])
def test_results_too_big_to_address_are_refused_before_allocating(build):
    """Sizes beyond what a process can address: a Python exception, raised before any
    allocation is attempted (NumPy checks the byte count first)."""
    with pytest.raises((ValueError, MemoryError), match="too big|Unable to allocate|Maximum allowed"):
        build()
