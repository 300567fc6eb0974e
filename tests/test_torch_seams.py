"""The seams between the torch bridge and the rest: parameters crossing as one string (every
value a native call takes, types kept), caches that stay bounded whatever the parameter
values, inputs updated in place bumping torch's version counters, and C-library ops with
sparse inputs and outputs under ``torch.compile(fullgraph=True)``. Values are compared with
the native calls (``so.<op>``), NumPy, SciPy and torch."""
from __future__ import annotations

import gc
import math
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch

import sparse_ops as so
import sparse_ops.torch as st
from sparse_ops import plugins, registry
from sparse_ops.bridging import decode_params, param_key
from sparse_ops.errors import OperatorError
from sparse_ops.sdk.cbuild import c_compiler, compile_library
from sparse_ops.torch import CSRParts, RowSparseParts, bridge, library
from sparse_ops.torch.library import encode_params

COOKBOOK_CLIB = Path(__file__).resolve().parent.parent / "cookbook" / "clib"


def _same(a, b) -> bool:
    """``a`` and ``b`` equal in value and type, element by element (NaN equal to NaN, the
    sign of a zero counted)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return a == b


def _native(t: torch.Tensor) -> so.NDArray:
    return so.array(t.detach().numpy().copy())


# ---- 1. one parameter encoding ---------------------------------------------------------------------
VALUES = {
    "true": True, "one": 1, "one_f": 1.0, "zero_neg": -0.0, "inf": math.inf, "ninf": -math.inf,
    "huge": 2 ** 100, "neg_huge": -(3 ** 70), "tiny": 5e-324, "big": 1.7976931348623157e308,
    "third": 1 / 3, "text": "a \"quoted\" 'str' {x}", "empty": "", "none": None,
    "tup": (1, 2.5, (True, None), "s"), "lst": [1, -0.0, math.inf], "empty_tup": (),
}


def test_every_value_round_trips_with_its_type():
    """decode(encode(p)) gives back every value with its type: bools, ints of any size,
    floats (inf, -inf, -0.0, the extremes), strings with quotes and braces, None, nested
    tuples and lists."""
    got = decode_params(encode_params(VALUES))
    assert set(got) == set(VALUES)
    for k, v in VALUES.items():
        assert _same(got[k], v), (k, got[k], v)
    nan = decode_params(encode_params({"x": float("nan")}))["x"]
    assert isinstance(nan, float) and math.isnan(nan)
    assert encode_params({}) == "" and decode_params("") == {}


def test_numpy_scalars_dtypes_and_devices_cross_as_python_values_and_names():
    got = decode_params(encode_params({
        "f32": np.float32(0.1), "i64": np.int64(-7), "b": np.bool_(True), "u8": np.uint8(255),
        "np_dtype": np.dtype("float16"), "np_type": np.float64, "torch_dtype": torch.float32,
        "torch_device": torch.device("cpu"), "device": so.cpu(),
    }))
    assert _same(got["f32"], float(np.float32(0.1))) and _same(got["i64"], -7) and got["b"] is True
    assert _same(got["u8"], 255)
    assert got["np_dtype"] == "float16" and got["np_type"] == "float64" and got["torch_dtype"] == "float32"
    assert got["torch_device"] == "cpu" and got["device"] == str(so.cpu())


def test_types_stay_apart_in_the_string_and_in_the_key():
    """True, 1 and 1.0 give three strings and three keys; NaN keys equal NaN keys; -0.0 and
    0.0 differ; the order of the items does not matter."""
    for a, b in [(True, 1), (True, 1.0), (1, 1.0), (0.0, -0.0), (1, "1"), ((1,), [1])]:
        assert encode_params({"x": a}) != encode_params({"x": b})
        assert param_key({"x": a}) != param_key({"x": b})
    assert param_key({"x": float("nan")}) == param_key({"x": float("nan")})
    assert param_key({"x": np.float32("nan")}) == param_key({"x": np.float32("nan")})
    assert param_key({"a": 1.0, "b": 2}) == param_key({"b": 2, "a": 1.0})
    assert encode_params({"a": 1.0, "b": 2}) == encode_params({"b": 2, "a": 1.0})
    assert hash(param_key({"x": (1.5, [2, None])})) == hash(param_key({"x": (1.5, [2, None])}))


def test_decoding_evaluates_nothing():
    assert decode_params('{"x":"__import__(\'os\').getcwd()"}') == {"x": "__import__('os').getcwd()"}
    with pytest.raises(ValueError):
        decode_params("__import__('os')")


def test_a_value_that_cannot_cross_says_so():
    with pytest.raises(TypeError, match="cannot cross"):
        encode_params({"x": object()})


def test_non_finite_and_signed_zero_parameters_through_the_bridge_equal_the_native_call():
    x = torch.tensor([[-1.5, 0.25, 3.0], [2.0, -0.0, 7.0]], dtype=torch.float64)
    cases = [("clip", {"a_min": 0.0, "a_max": math.inf}), ("clip", {"a_min": -math.inf, "a_max": 2.0}),
             ("_plus_scalar", {"scalar": float("nan")}), ("_plus_scalar", {"scalar": math.inf}),
             ("_mul_scalar", {"scalar": -0.0}), ("_mul_scalar", {"scalar": 0.0}),
             ("_mul_scalar", {"scalar": 2 ** 70}), ("clip", {"a_min": 1, "a_max": 2})]
    for name, params in cases:
        got = getattr(st.ops, name)(x, **params).numpy()
        want = getattr(so.ops, name)(_native(x), **params).asnumpy()
        np.testing.assert_array_equal(got, want, err_msg=f"{name} {params}")
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=f"{name} {params}")
    assert np.isnan(st.ops._plus_scalar(x, scalar=float("nan")).numpy()).all()
    assert np.signbit(st.ops._mul_scalar(x, scalar=-0.0).numpy()[0, 1:]).all()  # -0.0 * positive
    got = st.ops.cast(x, dtype=torch.float32)
    assert got.dtype == torch.float32
    np.testing.assert_array_equal(got.numpy(), so.cast(_native(x), dtype="float32").asnumpy())


def test_true_is_refused_where_a_float_is_expected_after_the_float_was_parsed():
    """A cached parse of a_min=1.0 must not answer for a_min=True (True == 1.0 in Python): the
    native call and the bridge refuse True as a fresh process does, and accept 1.0."""
    x = torch.tensor([[0.5, 1.5, 3.0]])
    for _ in range(2):  # second round: every cache holds the 1.0 call
        np.testing.assert_array_equal(so.clip(_native(x), a_min=1.0, a_max=2.0).asnumpy(), [[1.0, 1.5, 2.0]])
        np.testing.assert_array_equal(st.ops.clip(x, a_min=1.0, a_max=2.0).numpy(), [[1.0, 1.5, 2.0]])
        with pytest.raises(OperatorError, match="a_min"):
            so.clip(_native(x), a_min=True, a_max=2.0)
        with pytest.raises(OperatorError, match="a_min"):
            st.ops.clip(x, a_min=True, a_max=2.0)
    # an int parameter: 2 and 2.0 are both ints to the parser, True is not
    np.testing.assert_array_equal(so.repeat(so.array(np.arange(2.0)), repeats=2).asnumpy(), [0, 0, 1, 1])
    with pytest.raises(OperatorError, match="repeats"):
        so.repeat(so.array(np.arange(2.0)), repeats=True)
    with pytest.raises(OperatorError, match="repeats"):
        st.ops.repeat(torch.arange(2.0), repeats=True)
    np.testing.assert_array_equal(st.ops.repeat(torch.arange(2.0), repeats=2).numpy(), [0, 0, 1, 1])


# ---- 2. bounded caches -----------------------------------------------------------------------------
def _cache_sizes(name: str) -> dict[str, int]:
    return {"dense fast path": len(st.op(name)._dense), "plans": len(bridge._PLANS),
            "instances": max(len(bridge._HELD_ORDER), len(vars(bridge._HELD))), "decoded": len(library._DECODED),
            "parsed parameters": len(registry.get_op(name)._instances)}


def test_distinct_scalars_keep_every_cache_bounded(kernels):
    """10,000 calls with distinct scalars: right values, every cache within its cap, and no
    memory growth once the caches are full (tracemalloc, which sees NumPy's and Python's
    allocations: before the caps, +78 MB after 40,000 calls)."""
    x = torch.linspace(-1, 1, 16, dtype=torch.float64).reshape(4, 4)
    caps = {"dense fast path": bridge.MAX_DENSE_CALLS, "plans": bridge.MAX_PLANS, "instances": bridge.MAX_PLANS,
            "decoded": library.MAX_DECODED, "parsed parameters": registry.MAX_CACHED_INSTANCES}
    f = st.ops._plus_scalar
    # dispatch's own plan cache is capped too (cleared at 2048 plans): emptied at both
    # readings, so that where it stands in its cycle does not count as growth
    plans = registry.get_op("_plus_scalar").plans
    tracemalloc.start()  # from the start: entries evicted later were allocated under it
    try:
        for i in range(3000):  # fill every cache to its cap
            f(x, scalar=0.25 + i)
        plans.clear()
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for i in range(10_000):
            s = 1e6 + 0.5 * i
            y = f(x, scalar=s)
            if i % 997 == 0:
                np.testing.assert_array_equal(y.numpy(), x.numpy() + s)
        plans.clear()
        gc.collect()
        growth = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    sizes = _cache_sizes("_plus_scalar")
    for k, cap in caps.items():
        assert 0 < sizes[k] <= cap, (k, sizes[k], cap)
    assert growth < 2 * 2 ** 20, f"memory grew {growth / 2 ** 20:.1f} MB over 10,000 calls"
    # the hot value is still served by the fast path, and right
    np.testing.assert_array_equal(f(x, scalar=3.0).numpy(), x.numpy() + 3.0)
    assert (param_key({"scalar": 3.0}), 1) in st.op("_plus_scalar")._dense


def test_the_fast_path_keys_by_type():
    """The dense fast path holds 1.0 and True apart: after clip(a_min=1.0) a clip(a_min=True)
    is refused (it was answered from the cache of the 1.0 call)."""
    x = torch.rand(3, 3)
    for _ in range(3):
        st.ops.clip(x, a_min=1.0, a_max=2.0)
    with pytest.raises(OperatorError, match="a_min"):
        st.ops.clip(x, a_min=True, a_max=2.0)
    n0 = float("nan")
    got = [st.ops._plus_scalar(x, scalar=float("nan")) for _ in range(3)] + [st.ops._plus_scalar(x, scalar=n0)]
    assert all(bool(torch.isnan(g).all()) for g in got)


# ---- 3. inputs updated in place --------------------------------------------------------------------
def _adam_reference(w, g, m, v, **params):
    """The native call on copies: (new weight, mean, var) as NumPy arrays."""
    W, G, M, V = (so.array(t.numpy().copy()) for t in (w, g, m, v))
    out = so.adam_update(W, G, M, V, **params)
    return out.asnumpy(), M.asnumpy(), V.asnumpy()


def _adam_args(seed: int = 0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    return [torch.rand(5, 3, dtype=dtype, generator=gen) for _ in range(4)]


def test_adam_update_updates_its_states_in_place_and_bumps_their_versions():
    """mean and var (the op's ``mutate``) are updated in the caller's tensors, to the native
    call's values, and their version counters go up as after torch's in-place ops; the
    weight is not updated (its new value is the output) and keeps its version."""
    w, g, m, v = _adam_args()
    for step in range(3):  # the first call plans, the next ones take the dense fast path
        want_w, want_m, want_v = _adam_reference(w, g, m, v, lr=0.1)
        versions = (w._version, m._version, v._version)
        mp, vp = m.data_ptr(), v.data_ptr()
        out = st.ops.adam_update(w, g, m, v, lr=0.1)
        np.testing.assert_allclose(out.numpy(), want_w, rtol=1e-12)
        np.testing.assert_allclose(m.numpy(), want_m, rtol=1e-12)
        np.testing.assert_allclose(v.numpy(), want_v, rtol=1e-12)
        assert (m.data_ptr(), v.data_ptr()) == (mp, vp)
        assert m._version > versions[1] and v._version > versions[2], step
        assert w._version == versions[0]
        w = out


def test_the_registered_operator_bumps_versions_too():
    w, g, m, v = _adam_args(1)
    _, want_m, want_v = _adam_reference(w, g, m, v, lr=0.05)
    vm, vv = m._version, v._version
    torch.ops.sparse_ops.adam_update(w, g, m, v, encode_params({"lr": 0.05}))
    assert m._version > vm and v._version > vv
    np.testing.assert_allclose(m.numpy(), want_m, rtol=1e-12)
    np.testing.assert_allclose(v.numpy(), want_v, rtol=1e-12)


def test_a_non_contiguous_state_is_updated_in_place():
    gen = torch.Generator().manual_seed(2)
    w, g = torch.rand(4, 3, generator=gen), torch.rand(4, 3, generator=gen)
    mom = torch.rand(3, 4, generator=gen).t()  # a transposed view: not contiguous
    assert not mom.is_contiguous()
    M = so.array(mom.numpy().copy())
    want = so.sgd_mom_update(so.array(w.numpy()), so.array(g.numpy()), M, lr=0.1, momentum=0.9).asnumpy()
    version = mom._version
    out = st.ops.sgd_mom_update(w, g, mom, lr=0.1, momentum=0.9)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-6)
    np.testing.assert_allclose(mom.numpy(), M.asnumpy(), rtol=1e-6)
    assert mom._version > version


def test_a_state_saved_for_backward_then_updated_makes_backward_refuse():
    """As after torch's own in-place ops: a tensor autograd saved, then updated by the op,
    makes the backward raise torch's 'modified by an inplace operation' error (eager, on the
    dense fast path and on the general path)."""
    for _ in range(2):
        w, g, m, v = _adam_args(3)
        a = torch.rand(5, 3, dtype=torch.float64, requires_grad=True)
        loss = (a * m).sum()  # saves m for a's gradient
        st.ops.adam_update(w, g, m, v, lr=0.1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            loss.backward()
    a = torch.rand(5, 3, dtype=torch.float64, requires_grad=True)
    loss = (a * m).sum()
    st.ops.adam_update(w, g, m, v, lr=0.1, beta1=0.5)  # fresh parameters: the general path
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_compiled_updates_give_the_native_values():
    torch._dynamo.reset()
    f = torch.compile(lambda w, g, m, v: st.ops.adam_update(w, g, m, v, lr=0.1), fullgraph=True)
    w, g, m, v = _adam_args(4)
    for _ in range(2):
        want_w, want_m, want_v = _adam_reference(w, g, m, v, lr=0.1)
        vm = m._version
        out = f(w, g, m, v)
        np.testing.assert_allclose(out.numpy(), want_w, rtol=1e-12)
        np.testing.assert_allclose(m.numpy(), want_m, rtol=1e-12)
        np.testing.assert_allclose(v.numpy(), want_v, rtol=1e-12)
        assert m._version > vm
        w = out


# ---- 4. C-library ops with sparse inputs and outputs under torch.compile -------------------------
@pytest.fixture(scope="module")
def clibs(tmp_path_factory):
    """The cookbook's csr -> csr and row_sparse -> csr C libraries, built and loaded; the
    table put back afterwards."""
    if c_compiler() is None:
        pytest.skip("no C compiler")
    folder = tmp_path_factory.mktemp("seams_clib")
    table, loaded = registry.snapshot(), dict(plugins._LOADED)
    attrs = set(vars(so.ops))
    for name in ("transpose_csr", "transpose_row_sparse", "threshold"):
        out = folder / f"lib{name}.so"
        compile_library([COOKBOOK_CLIB / f"{name}.c"], out, flags=["-Wall", "-Werror"])
        so.library.load(out)
    yield
    registry.restore(table)
    plugins._LOADED.clear()
    plugins._LOADED.update(loaded)
    for attr in set(vars(so.ops)) - attrs:
        delattr(so.ops, attr)
    torch._dynamo.reset()


def _csr(n: int, m: int = 6, seed: int = 0) -> sp.csr_matrix:
    a = sp.random(n, m, density=0.4, format="csr", dtype=np.float32, random_state=seed)
    a.sort_indices()
    return a


def _parts(a: sp.csr_matrix) -> tuple:
    return (torch.from_numpy(a.data.copy()), torch.from_numpy(a.indices.astype(np.int64)),
            torch.from_numpy(a.indptr.astype(np.int64)))


def _check_csr(got: tuple, want: sp.csr_matrix) -> None:
    v, i, p = got
    want = want.tocsr()
    want.sort_indices()
    np.testing.assert_array_equal(p.numpy(), want.indptr)
    np.testing.assert_array_equal(i.numpy(), want.indices)
    np.testing.assert_allclose(v.numpy(), want.data, rtol=1e-6)


@pytest.mark.parametrize("dynamic", [None, True])
def test_a_c_op_with_csr_input_and_output_compiles_at_two_sizes(clibs, dynamic):
    """c_transpose_csr (csr -> csr, shape rule in C) in a fullgraph compiled function at two
    input sizes (the second one dynamic under automatic dynamic shapes, or with
    dynamic=True): the values of SciPy's transpose, of the eager bridge and of the native call."""
    torch._dynamo.reset()

    def f(v, i, p):
        r = st.ops.c_transpose_csr(CSRParts(v, i, p, (p.shape[0] - 1, 6)))
        return r.values, r.indices, r.indptr

    g = torch.compile(f, fullgraph=True, dynamic=dynamic)
    for n in (5, 9, 13):
        a = _csr(n, seed=n)
        got = g(*_parts(a))
        _check_csr(got, a.T)
        eager = st.ops.c_transpose_csr(torch.sparse_csr_tensor(*_parts(a)[::-1], size=(n, 6)))
        assert eager.layout == torch.sparse_csr and tuple(eager.shape) == (6, n)
        np.testing.assert_array_equal(eager.values().numpy(), got[0].numpy())
        native = so.ops.c_transpose_csr(so.csr_matrix((a.data, a.indices, a.indptr), shape=(n, 6))).asscipy()
        _check_csr(got, native)


def test_a_c_op_with_row_sparse_input_and_csr_output_compiles_at_two_sizes(clibs):
    torch._dynamo.reset()

    def f(v, rows, n):
        r = st.ops.c_transpose_row_sparse(RowSparseParts(v, rows, (n, v.shape[1])))
        return r.values, r.indices, r.indptr

    g = torch.compile(f, fullgraph=True)
    for n, width in ((7, 4), (11, 5)):
        rng = np.random.default_rng(n)
        rows = np.sort(rng.choice(n, size=3, replace=False))
        vals = rng.standard_normal((3, width)).astype(np.float32)
        dense = np.zeros((n, width), np.float32)
        dense[rows] = vals
        got = g(torch.from_numpy(vals), torch.from_numpy(rows.astype(np.int64)), n)
        _check_csr(got, sp.csr_matrix(dense.T))


def test_a_c_op_with_a_float_parameter_compiles_and_takes_inf(clibs):
    """c_csr_threshold(csr, threshold) -> csr compiled at two sizes and thresholds, inf
    included (keeps nothing), against NumPy and the native call."""
    torch._dynamo.reset()

    def f(v, i, p, t):
        r = st.ops.c_csr_threshold(CSRParts(v, i, p, (p.shape[0] - 1, 6)), threshold=t)
        return r.values, r.indices, r.indptr

    for t in (0.5, math.inf):
        g = torch.compile(lambda v, i, p: f(v, i, p, t), fullgraph=True)
        for n in (6, 10):
            a = _csr(n, seed=2 * n)
            dense = a.toarray()
            want = sp.csr_matrix(np.where(np.abs(dense) > t, dense, 0))
            got = g(*_parts(a))
            _check_csr(got, want)
            native = so.ops.c_csr_threshold(so.csr_matrix((a.data, a.indices, a.indptr), shape=(n, 6)), threshold=t)
            _check_csr(got, native.asscipy())


def test_a_dense_c_op_still_compiles_with_dynamic_shapes(clibs):
    """The dense kernel of c_transpose_csr (dense -> dense) under dynamic=True at two sizes:
    NumPy's transpose; the eager bridge agrees."""
    torch._dynamo.reset()
    g = torch.compile(lambda x: st.ops.c_transpose_csr(x) * 2, fullgraph=True, dynamic=True)
    for n in (3, 8):
        x = torch.rand(n, 5, generator=torch.Generator().manual_seed(n))
        got = g(x)
        np.testing.assert_allclose(got.numpy(), 2 * x.numpy().T, rtol=1e-6)
        np.testing.assert_allclose(st.ops.c_transpose_csr(x).numpy(), x.numpy().T)


# ---- parameters that torch.compile makes symbolic ------------------------------------------------------
@pytest.mark.parametrize("dynamic", [None, True])
def test_float_and_int_parameters_under_compile_follow_their_values(dynamic):
    """torch.compile turns Python floats and ints into symbolic values (specialize_float and
    specialize_int are off); the bridge specializes them with a guard, so a changed value
    gives the new answer (never a stale constant) and inf crosses as it does eagerly."""
    torch._dynamo.reset()
    p = {"a_min": -0.5, "a_max": 0.5}
    x = torch.linspace(-1, 1, 5, dtype=torch.float64)
    clip = torch.compile(lambda t: st.ops.clip(t, **p), fullgraph=True, dynamic=dynamic)
    for lo, hi in ((-0.5, 0.5), (-0.5, 0.25), (-0.75, math.inf)):
        p.update(a_min=lo, a_max=hi)
        np.testing.assert_array_equal(clip(x).numpy(), np.clip(x.numpy(), lo, hi))
    k = {"num_outputs": 2}
    split = torch.compile(lambda t: st.ops.split(t, axis=1, **k), fullgraph=True, dynamic=dynamic)
    y = torch.arange(24.0).reshape(2, 12)
    for n in (2, 3, 4):
        k["num_outputs"] = n
        got = split(y)
        assert len(got) == n
        for a, b in zip(got, np.split(y.numpy(), n, axis=1)):
            np.testing.assert_array_equal(a.numpy(), b)


@pytest.mark.parametrize("op, scale", [("sum", 1.0), ("mean", 1.0 / 12)])
def test_compiled_backward_of_a_reduction(op, scale):
    """The gradient rule of sum/mean gives a zero-stride broadcast view; the compiled backward
    operator must return what its fake promised (a contiguous tensor), or AOTAutograd's
    stride check fails."""
    torch._dynamo.reset()
    x = torch.arange(12.0, dtype=torch.float64).reshape(3, 4).requires_grad_(True)
    f = torch.compile(lambda t: getattr(st.ops, op)(t) * 2.0, fullgraph=True, dynamic=True)
    f(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full((3, 4), 2.0 * scale))



# ---- a csr operand whose result a csr cannot hold ------------------------------------------------------
def _csr_parts(a: sp.csr_matrix) -> CSRParts:
    return CSRParts(torch.from_numpy(a.data), torch.from_numpy(a.indices.astype(np.int64)),
                    torch.from_numpy(a.indptr.astype(np.int64)), a.shape)


@pytest.mark.parametrize("dynamic", [None, True])
def test_compiled_results_of_csr_operands_that_cannot_be_csr_are_dense(dynamic):
    """dot(vector, csr) is 1-d and take(csr, 2-d ids) 3-d: no csr holds them, so eagerly they
    are dense. A compiled call whose sizes are symbolic settles that from the traced shapes'
    lengths and runs the dense overload, with the eager values and gradients at every size."""
    torch._dynamo.reset()
    dot = torch.compile(lambda v, a: st.ops.dot(v, a), fullgraph=True, dynamic=dynamic)
    take = torch.compile(lambda a, ids: st.ops.take(a, ids), fullgraph=True, dynamic=dynamic)
    rng = np.random.default_rng(0)
    for rows in (6, 9, 13):
        a = sp.random(rows, 5, 0.4, format="csr", dtype=np.float64, random_state=rng)
        v = torch.from_numpy(rng.standard_normal(rows)).requires_grad_(True)
        got = dot(v, _csr_parts(a))
        assert got.layout == torch.strided and got.shape == (5,)
        np.testing.assert_allclose(got.detach().numpy(), v.detach().numpy() @ a.toarray(), rtol=1e-12)
        w = rng.standard_normal(5)
        (got * torch.from_numpy(w)).sum().backward()
        np.testing.assert_allclose(v.grad.numpy(), a.toarray() @ w, rtol=1e-12)
        ids = torch.from_numpy(rng.integers(0, rows, (2, 3)))
        taken = take(_csr_parts(a), ids)
        assert taken.layout == torch.strided and taken.shape == (2, 3, 5)
        np.testing.assert_array_equal(taken.numpy(), a.toarray()[ids.numpy()])


@pytest.mark.parametrize("op", ["broadcast_mul", "broadcast_div", "broadcast_add", "broadcast_sub"])
def test_compiled_broadcasts_of_a_csr_and_a_dense_operand_give_the_eager_values(op):
    """The broadcast shape rule runs traced under torch.compile (the sizes symbolic): it holds
    nothing Dynamo refuses, and the compiled result, dense or csr parts, equals the eager one
    at two sizes."""
    torch._dynamo.reset()
    f = torch.compile(lambda a, d: getattr(st.ops, op)(a, d), fullgraph=True, dynamic=True)
    rng = np.random.default_rng(1)
    for rows in (6, 11):
        a = sp.random(rows, 5, 0.4, format="csr", dtype=np.float64, random_state=rng)
        for shape in ((rows, 1), (1, 5)):
            d = torch.from_numpy(rng.uniform(0.5, 2.0, shape))
            want = getattr(st.ops, op)(_csr_parts(a), d)
            got = f(_csr_parts(a), d)
            dense = (lambda r: r.to_dense() if isinstance(r, torch.Tensor) else
                     torch.sparse_csr_tensor(r.indptr, r.indices, r.values, r.shape).to_dense())
            np.testing.assert_allclose(dense(got).numpy(), dense(want).numpy(), rtol=1e-12)


def test_a_call_refused_while_traced_is_a_bridge_error_not_dynamos_internal_error():
    """Planning a traced call runs as plain Python under Dynamo, which turns any exception
    there into its InternalTorchDynamoError (the type of Dynamo's own bugs); a refusal is
    raised as a BridgeError that is also Dynamo's UserError, which reaches the user as it is."""
    torch._dynamo.reset()
    f = torch.compile(lambda t: st.ops.clip(t, a_min="x", a_max=1.0), fullgraph=True, backend="eager")
    with pytest.raises(library.BridgeError, match="sparse_ops.torch.ops.clip: .*bad value 'x' for parameter 'a_min'"):
        f(torch.ones(2, dtype=torch.float64))
    g = torch.compile(lambda t: st.ops.clip(t, a_min=0.0, a_max=0.5), fullgraph=True, backend="eager")
    np.testing.assert_array_equal(g(torch.ones(2, dtype=torch.float64)).numpy(), [0.5, 0.5])


def test_a_compiled_function_follows_a_replaced_op_and_an_old_graph_is_refused_by_name(isolated):
    """Replacing an op (a new record: other output dtype) after ``torch.compile`` traced a call
    of it retraces that function, whether it reads the op from ``st.ops`` or holds the old
    function; a graph that still calls the old record (its parameter string carries the
    record's ``@serial``) is refused naming the op and the way out, never run with the new
    record's outputs read as the old one's."""
    def make(factor, dtype):
        class Scaled(so.Op):
            def infer_type(self, x):
                return [np.dtype(dtype)]

            @so.kernel(device="cpu")
            def dense(self, ctx, x, y):
                np.multiply(x, factor, out=y, casting="unsafe")

        return Scaled

    so.register("_seam_scaled")(make(2, "float32"))
    held = st.ops._seam_scaled
    looked_up = torch.compile(lambda t: st.ops._seam_scaled(t) * 1 + 1, fullgraph=True, backend="aot_eager")
    holding = torch.compile(lambda t: held(t) * 1 + 1, fullgraph=True, backend="aot_eager")
    x = torch.ones(2, 3)
    for f in (looked_up, holding):
        torch.testing.assert_close(f(x), torch.full((2, 3), 3.0))
    old_serial = so.get_op("_seam_scaled").serial
    so.register("_seam_scaled", replace=True)(make(3, "float64"))
    for f in (looked_up, holding):
        torch.testing.assert_close(f(x), torch.full((2, 3), 4.0, dtype=torch.float64))
    with pytest.raises(bridge.BridgeError, match=r"operator '_seam_scaled' was registered again \(replaced, or its "
                                                 r"plugin reloaded\) after this code was traced by torch.compile.*"
                                                 r"torch.compiler.reset\(\)"):
        torch.ops.sparse_ops._seam_scaled(x, encode_params({"@serial": old_serial}))
    current = encode_params({"@serial": so.get_op("_seam_scaled").serial})
    torch.testing.assert_close(torch.ops.sparse_ops._seam_scaled(x, current), torch.full((2, 3), 3.0,
                                                                                      dtype=torch.float64))


def test_a_function_calling_two_sparse_result_ops_compiles_before_any_eager_call(isolated):
    """A compiled function whose trace meets two calls with sparse results, in a process that
    never ran them eagerly (each planned while traced, the second after the trace first read
    the planned instances): it compiles with no graph break and gives the eager values."""
    @so.register("_seam_keep_big")
    class KeepBig(so.Op):
        threshold = so.Param(float, 0.5)

        def infer_storage_type(self, x):
            return ["csr"]

        @so.kernel(device="cpu", stypes=("csr",))
        def csr(self, ctx, x, y):
            data = np.asarray(x.data)
            m = sp.csr_matrix((data * (np.abs(data) > self.threshold), np.asarray(x.indices), np.asarray(x.indptr)),
                              shape=x.shape)
            m.eliminate_zeros()
            ctx.set_csr(y, m.data, m.indices.astype(x.indices.dtype), m.indptr.astype(x.indptr.dtype))

    m = sp.random(6, 5, density=0.6, format="csr", random_state=3, dtype=np.float64)
    want = m.multiply(abs(m) > 0.5).multiply(abs(m) > 0.8).toarray()
    compiled = torch.compile(lambda parts: st.ops._seam_keep_big(st.ops._seam_keep_big(parts), threshold=0.8),
                             fullgraph=True, backend="aot_eager")
    got = compiled(CSRParts(torch.from_numpy(m.data), torch.from_numpy(m.indices.astype(np.int64)),
                            torch.from_numpy(m.indptr.astype(np.int64)), (6, 5)))
    assert isinstance(got, CSRParts)
    np.testing.assert_array_equal(got.to_torch().to_dense().numpy(), want)
