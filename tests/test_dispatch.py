"""The operator table and the invoke path: registration, parameters, dispatch modes,
fallback warnings, explain, out=/req, the op context and kernel failures."""
import warnings

import numpy as np
import pytest

import sparse_ops as so
from sparse_ops.dispatch import InferenceError
from sparse_ops.registry import ParameterError


@so.register("_test_scale", replace=True)
class _TestScale(so.Op):
    """y = alpha * x; keeps csr (a storage-aware kernel), row_sparse falls back."""

    alpha = so.Param(float, 1.0, doc="the factor")
    mode = so.Param(str, "plain", choices=("plain", "fancy"))
    resources = ("workspace",)

    def infer_storage_type(self, x):
        return [x if x == "csr" else "default"]

    @so.kernel(device=("cpu", "gpu"))
    def dense(self, ctx, x, y):
        tmp = ctx.workspace(x.shape, x.dtype)
        np.multiply(x, self.alpha, out=tmp)
        y[...] = tmp

    @so.kernel(device="cpu", stypes=("csr",))
    def csr(self, ctx, x, y):
        data, indices, indptr = ctx.alloc_csr(y, x.nnz, index_dtype=x._indices.dtype)
        data[...] = x._data * self.alpha
        indices[...] = x._indices
        indptr[...] = x._indptr


scale = so.dispatch.op_function("_test_scale")


def dense(values, dtype="float64"):
    return so.array(np.asarray(values, dtype=dtype))


def test_registration_rules():
    assert "_test_scale" in so.list_ops() and "elemwise_mul" in so.list_ops()
    with pytest.raises(so.OperatorError, match="already registered"):
        so.register("_test_scale")(_TestScale)
    with pytest.raises(TypeError, match="subclass of sparse_ops.Op"):
        so.register("_test_not_an_op")(object)
    with pytest.raises(ValueError, match="identifiers"):
        so.register("bad name")
    op = so.get_op("_test_scale")
    assert op.params["alpha"].default == 1.0 and "workspace" in op.resources
    assert "cpu fcompute_ex csr" in op.describe() and "alpha: float, default 1.0" in op.describe()
    with pytest.raises(so.OperatorError, match="no operator named"):
        so.get_op("nope")


def test_parameters_parse_and_refuse():
    x = dense([1.0, 2.0])
    np.testing.assert_allclose(scale(x, alpha="3").asnumpy(), [3, 6])
    np.testing.assert_allclose(scale(x, 2.0).asnumpy(), [2, 4])  # positional parameter
    with pytest.raises(ParameterError, match="unknown parameter.*'beta'.*accepted: alpha, mode"):
        scale(x, beta=1)
    with pytest.raises(ParameterError, match="bad value 'abc' for parameter 'alpha'"):
        scale(x, alpha="abc")
    with pytest.raises(ParameterError, match="must be one of"):
        scale(x, mode="weird")
    with pytest.raises(ValueError):
        scale(x, alpha=True)  # a bool is not a number here
    with pytest.raises(TypeError, match="takes 1 input"):
        scale()


def test_dispatch_modes_and_explain():
    x = dense(np.eye(3))
    info = so.explain("_test_scale", x, alpha=2.0)
    assert info["dispatch_mode"] == "fcompute" and info["out_stypes"] == ["default"]
    c = x.tostype("csr")
    info = so.explain("_test_scale", c)
    assert (info["in_stypes"], info["out_stypes"], info["dispatch_mode"]) == (["csr"], ["csr"], "fcompute_ex")
    assert info["kernel"].endswith("csr")
    r = x.tostype("row_sparse")
    info = so.explain("_test_scale", r)
    assert info["dispatch_mode"] == "fallback" and "densified" in info["kernel"]
    y = scale(c, alpha=2.0)
    assert y.stype == "csr" and y.aux_types == c.aux_types
    np.testing.assert_allclose(y.asnumpy(), 2 * np.eye(3))
    for bad, name in ((np.eye(3), "ndarray"), ([1.0], "list"), (None, "NoneType")):  # the call's own refusal
        with pytest.raises(so.OperatorError, match=rf"operator '_test_scale': inputs must be NDArrays, got {name}"):
            so.explain("_test_scale", bad)
    broken = so.csr_matrix((np.ones(1), np.array([7]), np.array([0, 1, 1, 1])), shape=(3, 3), check=False)
    with pytest.raises(so.SparseFormatError, match=r"operator '_test_scale': argument 'data' \(csr\)"):
        so.explain("_test_scale", broken)


def test_fallback_warns_once_per_signature_and_can_be_silenced(monkeypatch):
    r = dense(np.eye(4)).tostype("row_sparse")
    so.dispatch._warned.clear()
    so.get_op("_test_scale").plans.clear()
    with pytest.warns(so.StorageFallbackWarning, match=r"_test_scale.*\['row_sparse'\].*cpu\(0\)"):
        y = scale(r, alpha=3.0)
    np.testing.assert_allclose(y.asnumpy(), 3 * np.eye(4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scale(r, alpha=3.0)  # same signature: no second warning
    so.dispatch._warned.clear()
    so.get_op("_test_scale").plans.clear()
    monkeypatch.setenv("SPARSE_OPS_STORAGE_FALLBACK_LOG_VERBOSE", "0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scale(r, alpha=5.0)


def test_out_and_req():
    x = dense([1.0, 2.0])
    out = dense([10.0, 10.0])
    assert scale(x, alpha=2.0, out=out) is out
    np.testing.assert_allclose(out.asnumpy(), [2, 4])
    scale(x, alpha=1.0, out=out, req="add")
    np.testing.assert_allclose(out.asnumpy(), [3, 6])
    scale(x, alpha=100.0, out=out, req="null")
    np.testing.assert_allclose(out.asnumpy(), [3, 6])
    f32 = so.zeros(2, dtype="float32")
    scale(x, alpha=2.0, out=f32)  # dtype differs: computed then cast
    assert f32.dtype == np.float32 and f32.asnumpy().tolist() == [2, 4]
    sparse_out = so.zeros((3, 3), stype="row_sparse", dtype="float64")
    so.elemwise_add(dense(np.eye(3)), dense(np.eye(3)), out=sparse_out)
    assert sparse_out.stype == "row_sparse"
    np.testing.assert_allclose(sparse_out.asnumpy(), 2 * np.eye(3))
    so.elemwise_add(dense(np.eye(3)), dense(np.eye(3)), out=sparse_out, req="add")
    np.testing.assert_allclose(sparse_out.asnumpy(), 4 * np.eye(3))
    with pytest.raises(so.OperatorError, match="req must be one of"):
        scale(x, out=out, req="sometimes")
    with pytest.raises(so.OperatorError, match="out= takes NDArrays"):
        scale(x, out=np.zeros(2))


def test_inplace_into_an_input():
    x = dense([1.0, 2.0])
    so.elemwise_mul(x, x, out=x, req="inplace")
    np.testing.assert_allclose(x.asnumpy(), [1, 4])


def test_inference_errors_and_wrong_inputs():
    with pytest.raises(InferenceError, match="elemwise_add.*shape inference failed.*one shape"):
        so.elemwise_add(dense([1.0]), dense([1.0, 2.0]))
    assert so.elemwise_add(dense([1.0]), dense([1.0], dtype="float32")).dtype == np.float64  # NumPy's promotion
    with pytest.raises(InferenceError, match="add_n.*type inference failed.*input 1 is float32 but input 0 is float64"):
        so.add_n(dense([1.0]), dense([1.0], dtype="float32"))  # an op that cannot promote says which input
    with pytest.raises(so.OperatorError, match="inputs must be NDArrays, got ndarray"):
        so.elemwise_add(dense([1.0]), np.ones(1))


@so.register("_test_cpu_only", replace=True)
class _TestCpuOnly(so.Op):
    @so.kernel(device="cpu")
    def dense(self, ctx, x, y):
        y[...] = x


@so.register("_test_broken", replace=True, plugin="broken-plugin")
class _TestBroken(so.Op):
    @so.kernel(device="cpu")
    def dense(self, ctx, x, y):
        raise RuntimeError("boom")

    @so.kernel(device="cpu", stypes=("csr",))
    def bad_csr(self, ctx, x, y):
        ctx.set_csr(y, x._data, x._indices, x._indptr[:-1])  # indptr one entry short

    def infer_storage_type(self, x):
        return [x]


def test_kernel_failures_name_op_and_plugin_and_leave_state_usable():
    x = dense([1.0, 2.0])
    with pytest.raises(so.OperatorError, match="_test_broken.*plugin broken-plugin.*RuntimeError: boom"):
        so.invoke("_test_broken", [x])
    c = dense(np.eye(2)).tostype("csr")
    with pytest.raises(so.OperatorError, match="malformed csr output.*indptr"):
        so.invoke("_test_broken", [c])
    np.testing.assert_allclose(so.elemwise_add(x, x).asnumpy(), [2, 4])  # still works


def test_no_kernel_for_device_is_a_clear_error():
    op = so.get_op("_test_cpu_only")
    from sparse_ops.dispatch import choose_dispatch

    with pytest.raises(so.OperatorError, match="no kernel for device gpu\\(0\\).*cpu dense"):
        choose_dispatch(op, so.gpu(0), ("default",), ["default"])


def test_workspace_must_be_declared():
    @so.register("_test_ws_undeclared", replace=True)
    class _Undeclared(so.Op):
        @so.kernel(device="cpu")
        def dense(self, ctx, x, y):
            y[...] = ctx.workspace(3)[0]

    with pytest.raises(so.OperatorError, match="does not declare resources"):
        so.invoke("_test_ws_undeclared", [dense([1.0, 2.0, 3.0])])


def test_plans_are_memoised_per_signature():
    op = so.get_op("elemwise_mul")
    op.plans.clear()
    a, b = dense(np.ones((2, 2))), dense(np.ones((2, 2)))
    so.elemwise_mul(a, b)
    so.elemwise_mul(b, a)
    assert len(op.plans) == 1
    so.elemwise_mul(dense(np.ones(3)), dense(np.ones(3)))
    so.elemwise_mul(a.tostype("csr"), b)
    assert len(op.plans) == 3


def test_context_is_train_follows_autograd_mode():
    seen = []

    @so.register("_test_mode", replace=True)
    class _Mode(so.Op):
        @so.kernel(device="cpu")
        def dense(self, ctx, x, y):
            seen.append(ctx.is_train)
            y[...] = x

    x = dense([1.0])
    so.invoke("_test_mode", [x])
    with so.autograd.train_mode():
        so.invoke("_test_mode", [x])
    assert seen == [False, True]


def test_out_of_another_dtype_follows_numpys_same_kind_rule():
    a = so.array(np.array([[1.5, 2.5]], np.float32))
    wider = so.zeros((1, 2), dtype="float64")
    so.elemwise_add(a, a, out=wider)  # float32 -> float64: safe
    np.testing.assert_array_equal(wider.asnumpy(), [[3.0, 5.0]])
    narrower = so.zeros((1, 2), dtype="float16")
    so.elemwise_add(a, a, out=narrower)  # same kind (float): allowed, as np.add(..., out=) allows
    np.testing.assert_array_equal(narrower.asnumpy(), [[3.0, 5.0]])
    ints = so.zeros((1, 2), dtype="int32")
    with pytest.raises(so.OperatorError, match=r"operator 'elemwise_add': cannot write output 0 \(float32\) "
                                               r"into out= of dtype int32"):
        so.elemwise_add(a, a, out=ints)
    with pytest.raises(TypeError):  # NumPy refuses the same
        np.add(a.asnumpy(), a.asnumpy(), out=np.zeros((1, 2), np.int32))
    np.testing.assert_array_equal(ints.asnumpy(), [[0, 0]])  # untouched


def test_out_of_another_shape_is_refused_as_numpy_refuses_it():
    """out= must have the output's shape, as NumPy's out= (no broadcasting into it, which
    wrote the (3,) column sums into every row of a (4, 3) out): refused naming the op and
    both shapes, the array untouched, for dense and sparse targets."""
    import scipy.sparse as sp

    m = sp.random(4, 3, density=0.5, format="csr", random_state=1)
    x = so.csr_matrix(m)
    wide = so.zeros((4, 3), dtype="float64")
    with pytest.raises(so.OperatorError, match=r"operator 'sum': cannot write output 0 of shape \(3,\) into out= "
                                               r"of shape \(4, 3\)"):
        so.sum(x, axis=0, out=wide)
    with pytest.raises(ValueError):  # NumPy refuses the same
        np.sum(m.toarray(), axis=0, out=np.zeros((4, 3)))
    assert not wide.asnumpy().any()
    with pytest.raises(so.OperatorError, match=r"operator 'dot': .* of shape \(4, 2\) into out= of shape \(3, 2\)"):
        so.dot(x, so.zeros((3, 2)), out=so.zeros((3, 2)))
    rows = so.zeros((5, 2), stype="row_sparse")
    g = so.row_sparse_array((np.ones((1, 2)), np.array([1])), shape=(3, 2))
    with pytest.raises(so.OperatorError, match=r"shape \(3, 2\) into out= of shape \(5, 2\)"):
        so.elemwise_add(g, g, out=rows)
    right = so.zeros((3,), dtype="float64")
    so.sum(x, axis=0, out=right)
    np.testing.assert_allclose(right.asnumpy(), m.sum(axis=0).A1)


def test_an_output_dtype_the_library_does_not_hold_is_refused_naming_the_op(isolated):
    """A plugin's type rule answering int8 (which every other face refuses, and a saved
    file could not be read back) or no dtype at all is an InferenceError naming the op."""
    for name, answer in (("disp_int8_out", np.int8), ("disp_no_dtype", "nope")):
        @so.register(name)
        class Odd(so.Op):
            arguments = ("data",)

            def infer_type(self, data, answer=answer):
                return [answer]

            @so.kernel(device="cpu")
            def dense(self, ctx, data, out):
                out[...] = 1

        with pytest.raises(InferenceError, match=rf"operator '{name}': infer_type gave output 0 a dtype the library "
                                                 r"does not hold: arrays of dtype (int8|nope) are not supported"):
            so.invoke(name, [so.array(np.ones(3))])


# ---- out= that is also an input ----------------------------------------------------------------------
def test_out_that_is_an_input_gets_the_values_computed_from_the_inputs_before_the_write():
    """An op whose kernel would overwrite values it has still to read (where's two passes,
    Embedding's gather, a csr transpose that replaces its output's arrays) gets a new result
    copied into out=; value-by-value ops keep writing in place (NumPy's overlap rules)."""
    q = np.array([[1., -2.], [-3., 4.]], np.float32)
    x, c = so.array(q.copy()), so.array((q > 0).astype(np.float32))
    assert so.where(c, x, so.array(-q), out=x) is x
    np.testing.assert_array_equal(x.asnumpy(), np.abs(q))
    w = so.array(np.arange(12, dtype=np.float32).reshape(4, 3))
    so.Embedding(so.array(np.array([3., 2., 1., 0.])), w, input_dim=4, output_dim=3, out=w)
    np.testing.assert_array_equal(w.asnumpy(), np.arange(12, dtype=np.float32).reshape(4, 3)[::-1])
    dense = np.eye(4, dtype=np.float32) + np.eye(4, k=3, dtype=np.float32)
    y = so.array(dense).tostype("csr")
    assert so.transpose(y, out=y) is y and y.stype == "csr"
    np.testing.assert_array_equal(y.asnumpy(), dense.T)
    v = so.array(np.arange(6, dtype=np.float32))
    v[1:] += v[:-1]  # overlapping views: NumPy's answer
    a = np.arange(6, dtype=np.float32)
    a[1:] += a[:-1]
    np.testing.assert_array_equal(v.asnumpy(), a)
    z = so.array(np.arange(6, dtype=np.float32).reshape(2, 3))
    so.relu(z, out=z)  # value by value: written in place, no new array
    np.testing.assert_array_equal(z.asnumpy(), np.arange(6).reshape(2, 3))


def test_a_refused_registration_leaves_the_table_as_it_was():
    """A declaration refused when registered (a parameter named like a call keyword or an
    input), or refused by a subscriber of the table, leaves the name free: nothing half
    registered blocks a corrected class."""
    from sparse_ops import registry

    def declared(**attrs):
        def dense(self, ctx, x, y):
            y[...] = x * 2

        return type("T", (so.Op,), {"arguments": ("x",), "differentiable": False,
                                    "dense": so.kernel(device="cpu")(dense), **attrs})

    for bad, text in (({"req": so.Param(int, 1)}, "'req' is a keyword of every call"),
                      ({"out": so.Param(int, 1)}, "'out' is a keyword of every call"),
                      ({"x": so.Param(int, 1)}, "'x' is an input name")):
        with pytest.raises(ValueError, match=text):
            so.register("t_refused_param")(declared(**bad))
        assert "t_refused_param" not in so.list_ops()

    def refuse(name, opdef):
        if name == "t_refused_param" and opdef is not None:
            raise RuntimeError("a subscriber refuses it")

    registry.subscribe(refuse)
    try:
        with pytest.raises(RuntimeError, match="a subscriber refuses it"):
            so.register("t_refused_param")(declared())
        assert "t_refused_param" not in so.list_ops()
    finally:
        registry._SUBSCRIBERS.remove(refuse)
    try:
        so.register("t_refused_param")(declared())
        np.testing.assert_array_equal(so.invoke("t_refused_param", [so.array(np.ones(2))]).asnumpy(), [2, 2])
    finally:
        registry.unregister("t_refused_param")


def test_a_fallback_that_cannot_densify_an_input_names_the_op_and_the_argument():
    """A row_sparse array of 10**10 rows holds two; densifying it for an op without a
    row_sparse kernel is refused naming the op, the argument and its size, and the process
    goes on."""
    big = so.RowSparseNDArray(np.ones((2, 3)), np.array([0, 5]), (10**10, 3))
    with warnings.catch_warnings(), pytest.raises(
            so.OperatorError, match=r"operator 'softmax': no kernel for input storage types \['row_sparse'\] on "
                                    r"cpu\(0\), and the fallback cannot densify argument 'data' \(row_sparse, shape "
                                    r"\(10000000000, 3\), float64\): MemoryError"):
        warnings.simplefilter("ignore", so.StorageFallbackWarning)
        so.softmax(big)
    small = so.RowSparseNDArray(np.ones((2, 3)), np.array([0, 5]), (6, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", so.StorageFallbackWarning)  # warned once per signature: above
        np.testing.assert_allclose(so.softmax(small).asnumpy(), np.full((6, 3), 1 / 3))


def test_call_shape_errors_name_the_op_its_inputs_and_parameters():
    with pytest.raises(TypeError, match=r"negative\(\) \(operator 'negative'\) takes 1 input\(s\) \(data\) and 0 "
                                        r"parameter\(s\) \(none\), got 2 positional values"):
        so.negative(so.ones(2), so.ones(2))
    with pytest.raises(TypeError, match=r"invoke\('negative', \.\.\.\) takes its inputs as a list \(\[x\] for one\)"):
        so.invoke("negative", so.ones(2))
    np.testing.assert_array_equal(so.invoke("negative", [so.ones(2)]).asnumpy(), [-1.0, -1.0])
