"""Mixed dtypes in binary ops promote as NumPy does (``np.result_type``), keep the storage
types the rules give, and the recorded gradients come back in each input's own dtype;
ops that cannot promote name the argument."""
import itertools
import warnings

import numpy as np
import pytest

import sparse_ops as so
from sparse_ops import autograd as ag
from sparse_ops.dispatch import InferenceError
from sparse_ops.dtypes import promote_types

pytestmark = pytest.mark.filterwarnings("ignore::sparse_ops.StorageFallbackWarning")

STYPES = ["default", "row_sparse", "csr"]
PAIRS = [("float32", "float64"), ("float64", "float32"), ("int32", "float32"), ("int64", "float32"),
         ("float16", "float32"), ("int32", "int64"), ("int32", "float64")]
ELEMWISE = {"elemwise_add": np.add, "elemwise_sub": np.subtract, "elemwise_mul": np.multiply}
BROADCAST = {"broadcast_add": np.add, "broadcast_sub": np.subtract, "broadcast_mul": np.multiply,
             "broadcast_div": np.divide, "broadcast_maximum": np.maximum, "broadcast_minimum": np.minimum,
             "broadcast_greater": np.greater, "broadcast_equal": np.equal, "broadcast_lesser_equal": np.less_equal}


def values(seed, shape, dtype, density=0.5):
    """Small integers (exact in every dtype) with zeros."""
    rng = np.random.default_rng(seed)
    v = rng.integers(1, 5, size=shape) * (rng.random(shape) < density)
    return v.astype(dtype)


def quietly(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", so.StorageFallbackWarning)
        return fn()


@pytest.mark.parametrize("pair", PAIRS)
def test_promote_types_is_numpys(pair):
    assert promote_types(*map(np.dtype, pair)) == np.result_type(*pair)
    assert promote_types(np.dtype("float32"), np.dtype("float32")) == np.float32


@pytest.mark.parametrize("name", list(ELEMWISE))
@pytest.mark.parametrize("stypes", list(itertools.product(STYPES, STYPES)))
@pytest.mark.parametrize("pair", PAIRS)
def test_elemwise_promotes_and_keeps_storage_types(name, stypes, pair):
    a, b = values(1, (4, 5), pair[0]), values(2, (4, 5), pair[1])
    x, y = so.array(a).tostype(stypes[0]), so.array(b).tostype(stypes[1])
    got = quietly(lambda: getattr(so, name)(x, y))
    same = quietly(lambda: getattr(so, name)(x.astype(got.dtype), y.astype(got.dtype)))
    assert got.dtype == np.result_type(a, b)
    assert got.stype == same.stype  # the storage-type rules do not look at dtypes
    np.testing.assert_array_equal(got.asnumpy(), ELEMWISE[name](a, b))


@pytest.mark.parametrize("stypes", list(itertools.product(STYPES, STYPES)))
def test_elemwise_div_promotes(stypes):
    a, b = values(3, (3, 4), "float32"), values(4, (3, 4), "float64", density=1.0)
    got = quietly(lambda: so.elemwise_div(so.array(a).tostype(stypes[0]), so.array(b).tostype(stypes[1])))
    assert got.dtype == np.float64 and got.stype == "default"
    np.testing.assert_allclose(got.asnumpy(), a / b, rtol=1e-15)


@pytest.mark.parametrize("name", list(BROADCAST))
@pytest.mark.parametrize("pair", PAIRS)
def test_broadcast_ops_and_comparisons_promote(name, pair):
    a, b = values(5, (3, 4), pair[0], 1.0), values(6, (1, 4), pair[1], 1.0)
    got = getattr(so, name)(so.array(a), so.array(b))
    expected = BROADCAST[name](a, b)
    dtype = np.result_type(a, b)
    assert got.dtype == dtype and got.shape == (3, 4)  # comparisons give 1/0 in that dtype (MXNet)
    np.testing.assert_allclose(got.asnumpy(), expected.astype(dtype), rtol=1e-6 if dtype == np.float16 else 1e-12)


def test_python_operators_promote():
    a, b = values(7, (2, 3), "float32", 1.0), values(8, (2, 3), "float64", 1.0)
    x, y = so.array(a), so.array(b)
    for got, expected in [(x + y, a + b), (y - x, b - a), (x * y, a * b), (x / y, a / b), (x ** y, a ** b),
                          (x > y, a > b), (y == x, a == b), (x + so.array(b[:1]), a + b[:1])]:
        assert got.dtype == np.float64
        np.testing.assert_allclose(got.asnumpy(), expected.astype(np.float64), rtol=1e-12)
    assert (x * 2.5).dtype == np.float32  # a Python scalar keeps the array's dtype (MXNet, NEP 50)
    assert (x.tostype("csr") * y.tostype("csr")).stype == "csr"


def test_in_place_operators_cast_back_as_numpy_does():
    a, b = values(9, (2, 3), "float32", 1.0), values(10, (2, 3), "float64", 1.0)
    x = so.array(a)
    x += so.array(b)  # float64 stored into float32: NumPy's same_kind rule allows it
    assert x.dtype == np.float32
    np.testing.assert_array_equal(x.asnumpy(), (a + b).astype(np.float32))
    i = so.array(np.arange(6, dtype=np.int32).reshape(2, 3))
    with pytest.raises(TypeError, match="in-place add: the result is float64.*int32"):
        i += so.array(b)
    np.testing.assert_array_equal(i.asnumpy(), np.arange(6).reshape(2, 3))  # untouched
    i += so.array(np.ones((2, 3), np.int64))  # int64 into int32: same kind, allowed
    assert i.dtype == np.int32


@pytest.mark.parametrize("stypes", list(itertools.product(STYPES, STYPES)))
@pytest.mark.parametrize("flags", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("pair", [("float32", "float64"), ("float64", "float32"), ("int32", "float32")])
def test_dot_promotes_for_every_storage_pair(stypes, flags, pair):
    ta, tb = flags
    a, b = values(11, (4, 5), pair[0]), values(12, (5, 3), pair[1])
    a_in, b_in = (a.T.copy() if ta else a), (b.T.copy() if tb else b)
    x, y = so.array(a_in).tostype(stypes[0]), so.array(b_in).tostype(stypes[1])
    got = quietly(lambda: so.dot(x, y, transpose_a=ta, transpose_b=tb))
    same = quietly(lambda: so.dot(x.astype(got.dtype), y.astype(got.dtype), transpose_a=ta, transpose_b=tb))
    assert got.dtype == np.result_type(a, b) and got.stype == same.stype
    np.testing.assert_array_equal(got.asnumpy(), a.astype(got.dtype) @ b.astype(got.dtype))
    assert (x @ y if not (ta or tb) else got).dtype == got.dtype


def test_fully_connected_promotes():
    data, weight, bias = values(13, (2, 4), "float32", 1.0), values(14, (3, 4), "float64", 1.0), np.ones(3, "float32")
    got = so.FullyConnected(so.array(data), so.array(weight), so.array(bias), num_hidden=3)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got.asnumpy(), data @ weight.T + bias)


@pytest.mark.parametrize("stype", STYPES)
def test_gradients_come_back_in_each_inputs_dtype(stype):
    a, b, c = values(15, (3, 4), "float32", 0.8), values(16, (3, 4), "float64", 1.0), values(19, (1, 4), "int64", 1.0)
    x, y, r = so.array(a).tostype(stype), so.array(b), so.array(c.astype(np.float64))
    for v in (x, y, r):
        v.attach_grad()
    with ag.record():
        loss = so.sum(so.elemwise_mul(x, y) + so.broadcast_mul(x, r))
    loss.backward()
    assert (x.grad.dtype, y.grad.dtype, r.grad.dtype) == (np.float32, np.float64, np.float64)
    stored = a != 0 if stype == "csr" else True  # a csr variable: the gradient of its stored values
    np.testing.assert_array_equal(x.grad.asnumpy(), np.where(stored, b + c, 0).astype(np.float32))
    np.testing.assert_array_equal(y.grad.asnumpy(), a.astype(np.float64))
    np.testing.assert_array_equal(r.grad.asnumpy(), a.sum(axis=0, keepdims=True).astype(np.float64))
    # autograd.grad hands back the gradients themselves: in the inputs' dtypes as well
    with ag.record():
        z = so.sum(so.elemwise_add(x, y))
    gx, gy = ag.grad(z, [x, y])
    assert gx.dtype == np.float32 and gy.dtype == np.float64
    np.testing.assert_array_equal(gx.asnumpy(), np.where(stored, 1, 0).astype(np.float32))


def test_dot_and_fully_connected_gradients_in_input_dtypes():
    a, w = values(17, (4, 3), "float32", 0.7), values(18, (3, 2), "float64", 1.0)
    x, v = so.array(a), so.array(w)
    x.attach_grad()
    v.attach_grad()
    with ag.record():
        loss = so.sum(so.dot(x, v))
    loss.backward()
    assert x.grad.dtype == np.float32 and v.grad.dtype == np.float64
    np.testing.assert_array_equal(x.grad.asnumpy(), np.ones((4, 2)) @ w.T)
    np.testing.assert_array_equal(v.grad.asnumpy(), a.T.astype(np.float64) @ np.ones((4, 2)))
    weight = so.array(w.T.copy())
    weight.attach_grad()
    with ag.record():
        out = so.sum(so.FullyConnected(x, weight, num_hidden=2, no_bias=True))
    out.backward()
    assert x.grad.dtype == np.float32 and weight.grad.dtype == np.float64
    np.testing.assert_array_equal(weight.grad.asnumpy(), np.ones((2, 4)) @ a.astype(np.float64))


@so.register("_test_one_dtype_pair")
class OneDtypePair(so.Op):
    """lhs + rhs with the default (one dtype) type rule: a kernel that cannot promote."""

    arguments = ("lhs", "rhs")

    @so.kernel(device="cpu")
    def dense(self, ctx, lhs, rhs, out):
        np.add(lhs, rhs, out=out)


def test_an_op_that_cannot_promote_names_the_argument():
    x, y = so.array(np.ones(3, np.float32)), so.array(np.ones(3, np.float64))
    with pytest.raises(InferenceError, match=r"argument 'rhs' is float64 but 'lhs' is float32; "
                                             r"_test_one_dtype_pair takes inputs of one dtype"):
        so.invoke("_test_one_dtype_pair", [x, y])
    with pytest.raises(InferenceError, match="argument 'grad' is float64 but 'weight' is float32; sgd_update takes"):
        so.sgd_update(x, y, lr=0.1)  # an in-place update cannot promote its weight
    for call in (lambda: so.where(x, x, y), lambda: so.invoke("_linalg_gemm2", [x.reshape((3, 1)), y.reshape((1, 3))])):
        with pytest.raises(InferenceError, match="is float64 but .* is float32; .* takes inputs of one dtype"):
            call()


def test_variadic_ops_that_cannot_promote_name_the_position():
    a, b = so.array(np.ones((2, 2), np.float32)), so.array(np.ones((2, 2)))
    with pytest.raises(InferenceError, match=r"input 2 is float64 but input 0 is float32; add_n takes inputs of one"):
        so.add_n(a, a, b)
