"""Faulty plugin kernels are caught at the op boundary, and leave everything usable.

A plugin (loaded through ``sparse_ops.library.load``, so its ops carry its name) holds ops
whose kernels misbehave on inputs with a negative value, in the way their ``fault``
parameter names: raise, return their result instead of writing it, write an output of the
wrong shape or dtype, leave it unset, or build a sparse output with a broken structure.
Each must end in an ``OperatorError`` naming the op and the plugin. The structure checks,
O(1) and O(nnz) (index ranges, order, monotone indptr), run always on a plugin's outputs;
the unset-value search runs in debug mode (``SPARSE_OPS_BOUNDSCHECK=1``, here switched per
test through ``sparse_ops.settings``, and once for real in a subprocess). After each fault the same op
runs on good input, the registry is unchanged and autograd works on a fresh graph.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import sparse_ops as so
from sparse_ops import autograd, settings

PLUGIN = "plg_faulty"

SOURCE = '''
import numpy as np
import sparse_ops as so


def bad(x):
    """The plugins' bug shows on inputs holding a negative value."""
    return bool((x < 0).any())


@so.register("plgfault_csr")
class CsrDouble(so.Op):
    """y = 2 x for a csr x."""
    fault = so.Param(str, "none")

    def infer_storage_type(self, x):
        return [x]

    @so.kernel(device="cpu", stypes=("csr",))
    def csr(self, ctx, x, y):
        data, indices, indptr = ctx.alloc_csr(y, x.nnz, x.indices.dtype)
        data[:], indices[:], indptr[:] = 2 * x.data, x.indices, x.indptr
        f = self.fault if bad(x.data) else "none"
        if f == "raise":
            raise ValueError("negative values are not supported")
        elif f == "indptr_length":
            ctx.set_csr(y, data, indices, indptr[:-1])
        elif f == "indptr_end":
            indptr[-1] -= 1
        elif f == "indptr_start":
            indptr[0] = 1
        elif f == "data_length":
            ctx.set_csr(y, data[:-1], indices, indptr)
        elif f == "values_dtype":
            ctx.set_csr(y, data.astype(np.float64), indices, indptr)
        elif f == "index_dtype":
            ctx.set_csr(y, data, indices.astype(np.float64), indptr)
        elif f == "not_an_array":
            ctx.set_csr(y, data.tolist(), indices, indptr)
        elif f == "index_range":
            indices[0] = x.shape[1]
        elif f == "negative_index":
            indices[0] = -1
        elif f == "unsorted":
            indices[0], indices[1] = indices[1], indices[0]
        elif f == "duplicate":
            indices[1] = indices[0]
        elif f == "indptr_decreasing":
            indptr[1] = indptr[2] + 1
        elif f == "unset_values":
            data, indices, indptr = ctx.alloc_csr(y, x.nnz, x.indices.dtype)
            indices[:], indptr[:] = x.indices, x.indptr
        elif f == "too_many":
            ctx.alloc_csr(y, x.shape[0] * x.shape[1] + 1, x.indices.dtype)
        elif f == "unset_indptr":
            data, indices, indptr = ctx.alloc_csr(y, x.nnz, x.indices.dtype)
            data[:], indices[:] = 2 * x.data, x.indices
            indptr[1:] = x.indptr[1:]

    def gradient(self, out_grads, inputs, outputs):
        return [so.ops.plgfault_csr(out_grads[0])]


@so.register("plgfault_rsp")
class RowSparseDouble(so.Op):
    """y = 2 x for a row_sparse x."""
    fault = so.Param(str, "none")

    def infer_storage_type(self, x):
        return [x]

    @so.kernel(device="cpu", stypes=("row_sparse",))
    def rsp(self, ctx, x, y):
        data, indices = ctx.alloc_row_sparse(y, x.indices.shape[0], x.indices.dtype)
        data[...], indices[:] = 2 * x.data, x.indices
        f = self.fault if bad(x.data) else "none"
        if f == "raise":
            raise ValueError("negative values are not supported")
        elif f == "data_rows":
            ctx.set_row_sparse(y, data[:-1], indices)
        elif f == "row_shape":
            ctx.set_row_sparse(y, data[:, :-1], indices)
        elif f == "unsorted":
            indices[:] = indices[::-1].copy()
        elif f == "duplicate":
            indices[1] = indices[0]
        elif f == "index_range":
            indices[-1] = x.shape[0]
        elif f == "too_many":
            ctx.alloc_row_sparse(y, x.shape[0] + 1)


@so.register("plgfault_dense")
class DenseDouble(so.Op):
    """y = 2 x, dense (FCompute)."""
    fault = so.Param(str, "none")

    @so.kernel(device="cpu")
    def dense(self, ctx, x, y):
        f = self.fault if bad(x) else "none"
        if f == "raise":
            raise ValueError("negative values are not supported")
        if f == "return":
            return 2 * x                       # computed, never written
        if f == "unset":
            return
        if f == "partial":
            y[:1] = 2 * x[:1]
            return
        if f == "nan":                         # a legitimate NaN result is not "unset"
            y[...] = np.where(x < 0, np.nan, 2 * x)
            return
        if f == "return_out":                  # returning the written output is fine
            return np.multiply(x, 2, out=y)
        y[...] = 2 * x

    def gradient(self, out_grads, inputs, outputs):
        if self.fault == "gradient_raises":
            raise ZeroDivisionError("gradient exploded")
        if self.fault == "gradient_shape":
            return [so.ones((1,))]
        if self.fault == "gradient_numpy":  # the right values, but not in a container
            return [2 * out_grads[0].asnumpy()]
        return [so.ops.plgfault_dense(out_grads[0]) ]


@so.register("plgfault_dense_ex")
class DenseDoubleEx(so.Op):
    """y = 2 x, storage-aware kernel on dense containers (FComputeEx)."""
    fault = so.Param(str, "none")

    @so.kernel(device="cpu", stypes=("default",))
    def ex(self, ctx, x, y):
        y._data[...] = 2 * x._data
        f = self.fault if bad(x._data) else "none"
        if f == "shape":
            y._data = np.zeros(x.shape[0] + 1, y.dtype)
        elif f == "dtype":
            y._data = y._data.astype(np.float64)
        elif f == "not_an_array":
            y._data = y._data.tolist()


class FaultyMx(so.CustomOp):
    def __init__(self, fault):
        self.fault = fault

    def forward(self, is_train, req, in_data, out_data, aux):
        x = in_data[0]
        f = self.fault if bad(x.asnumpy()) else "none"
        if f == "raise":
            raise ValueError("negative values are not supported")
        if f == "shape":
            self.assign(out_data[0], req[0], so.array(np.ones((x.shape[0] + 1, x.shape[1]), x.dtype)))
        elif f != "unset":
            self.assign(out_data[0], req[0], x * 2)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        if self.fault == "backward_raises":
            raise ValueError("backward exploded")
        self.assign(in_grad[0], req[0], out_grad[0] * 2)


@so.register("plgfault_mx")
class FaultyMxProp(so.CustomOpProp):
    def __init__(self, fault="none"):
        super().__init__(need_top_grad=True)
        self.fault = fault

    def create_operator(self, ctx, shapes, dtypes):
        return FaultyMx(self.fault)
'''

GOOD = np.array([[1.0, 0.0, 2.0, 0.0], [0.0, 0.0, 0.0, 3.0], [4.0, 5.0, 0.0, 6.0]], dtype=np.float32)
BAD = GOOD * np.array([[-1.0], [1.0], [1.0]], dtype=np.float32)  # row 0 holds two stored values


@pytest.fixture
def plugin(tmp_path, isolated):
    path = tmp_path / f"{PLUGIN}.py"
    path.write_text(SOURCE)
    module = so.library.load(path)
    assert so.get_op("plgfault_csr").plugin == PLUGIN
    return module


@pytest.fixture
def debug_mode(monkeypatch, plugin):
    """SPARSE_OPS_BOUNDSCHECK=1 for this test's plans (plans read the setting when made)."""
    monkeypatch.setattr(settings, "BOUNDSCHECK", True)
    for name in so.plugins_info()["loaded"][PLUGIN]["ops"]:
        so.get_op(name).plans.clear()


def as_input(values: np.ndarray, stype: str):
    return so.array(values).tostype(stype)


# each plugin op and the storage type of its input and output
OPS = {"csr": ("plgfault_csr", "csr"), "rsp": ("plgfault_rsp", "row_sparse"), "dense": ("plgfault_dense", "default"),
       "dense_ex": ("plgfault_dense_ex", "default"), "mx": ("plgfault_mx", "default")}
MALFORMED_CSR = r"malformed csr output 0 \('output'\): csr "
MALFORMED_RSP = r"malformed row_sparse output 0 \('output'\): row_sparse "
UNSET = r"a partly unset output 0 \('output'\): values the kernel never wrote"

# op, fault, when it is caught ("always", or only in "debug" mode), message
CASES = [
    ("csr", "raise", "always", r"kernel CsrDouble.csr failed.*ValueError: negative values are not supported"),
    ("csr", "indptr_length", "always", MALFORMED_CSR + r"indptr must have rows \+ 1 = 4 entries, got 3"),
    ("csr", "indptr_end", "always", MALFORMED_CSR + "indptr must end at nnz = 6, got 5"),
    ("csr", "indptr_start", "always", MALFORMED_CSR + "indptr must start at 0, got 1"),
    ("csr", "data_length", "always", MALFORMED_CSR + "data and indices must have the same length, got 5 and 6"),
    ("csr", "values_dtype", "always", r"output of the wrong dtype 0.*float64, but the op's type inference says float32"),
    ("csr", "index_dtype", "always", r"csr output with a bad index array 0.*indices of dtype float64"),
    ("csr", "not_an_array", "always", r"bad output 0.*values is a list, not a numpy array"),
    ("csr", "index_range", "always", MALFORMED_CSR + r"column index 4 at position 0 is out of range \[0, 4\)"),
    ("csr", "negative_index", "always", MALFORMED_CSR + r"column index -1 at position 0 is out of range"),
    ("csr", "unsorted", "always", MALFORMED_CSR + "column indices must be sorted.*unsorted index 0 after 2 in row 0"),
    ("csr", "duplicate", "always", MALFORMED_CSR + "column indices must be sorted.*duplicate index 0 after 0 in row 0"),
    ("csr", "indptr_decreasing", "always", MALFORMED_CSR + "indptr must be non-decreasing"),
    ("csr", "unset_values", "debug", UNSET),
    ("csr", "unset_indptr", "debug", MALFORMED_CSR + "indptr must start at 0, got -1"),
    ("csr", "too_many", "always", r"cannot allocate 13 stored values for a csr output of shape \(3, 4\): it has 12 "
                                  "entries"),
    ("rsp", "too_many", "always", r"cannot allocate 4 stored rows for a row_sparse output of shape \(3, 4\): it has "
                                  "3 rows"),
    ("rsp", "raise", "always", r"ValueError: negative values are not supported"),
    ("rsp", "data_rows", "always", MALFORMED_RSP + r"data must have shape .* = \(3, 4\), got \(2, 4\)"),
    ("rsp", "row_shape", "always", MALFORMED_RSP + r"data must have shape .* = \(3, 4\), got \(3, 3\)"),
    ("rsp", "unsorted", "always", MALFORMED_RSP + "indices must be sorted and unique: unsorted index 1 after 2"),
    ("rsp", "duplicate", "always", MALFORMED_RSP + "indices must be sorted and unique: duplicate index 0 after 0"),
    ("rsp", "index_range", "always", MALFORMED_RSP + r"row index 3 at position 2 is out of range \[0, 3\)"),
    ("dense", "raise", "always", r"ValueError: negative values are not supported"),
    ("dense", "return", "always", r"returned an array of shape \(3, 4\) instead of writing its output"),
    ("dense", "unset", "debug", UNSET),
    ("dense", "partial", "debug", UNSET),
    ("dense_ex", "shape", "always", r"output of the wrong shape 0.*\(4,\), but the op's shape inference says \(3, 4\)"),
    ("dense_ex", "dtype", "always", r"output of the wrong dtype 0.*float64"),
    ("dense_ex", "not_an_array", "always", r"bad output 0.*values is a list"),
    ("mx", "raise", "always", r"FaultyMx\.forward \(.*plg_faulty\.py:\d+\) raised ValueError: negative values"),
    ("mx", "shape", "always", r"FaultyMx\.forward \(.*\) raised ValueError: could not broadcast"),
    ("mx", "unset", "debug", UNSET),
]
ALWAYS = [c for c in CASES if c[2] == "always"]


def run(op: str, stype: str, values: np.ndarray, fault: str = "none"):
    return so.invoke(op, [as_input(values, stype)], {"fault": fault})


def assert_usable(op: str, stype: str, fault: str, registry: list[str]) -> None:
    """The failed op gives the right answer on good input, the registry is as it was, and
    autograd (also through the plugin's ops) works on a fresh graph."""
    y = run(op, stype, GOOD, fault)
    assert y.stype == stype
    np.testing.assert_array_equal(y.asnumpy(), 2 * GOOD)
    assert so.list_ops() == registry and so.get_op(op).plugin == PLUGIN
    w = so.array(GOOD)
    w.attach_grad()
    with autograd.record():
        loss = so.sum(so.elemwise_mul(so.ops.plgfault_dense(w), w))
    loss.backward()
    np.testing.assert_allclose(w.grad.asnumpy(), 4 * GOOD)
    c = so.array(GOOD).tostype("csr")
    c.attach_grad(stype="csr")
    with autograd.record():
        out = so.ops.plgfault_csr(c)
    out.backward(as_input(GOOD, "csr"))
    np.testing.assert_array_equal(c.grad.asnumpy(), 2 * GOOD)
    # a built-in numba kernel still runs (the process is fine)
    np.testing.assert_allclose(so.dot(c, so.array(GOOD.T)).asnumpy(), GOOD @ GOOD.T, rtol=1e-6)


def expect_fault(op: str, stype: str, fault: str, message: str) -> None:
    registry = so.list_ops()
    x = as_input(BAD, stype)
    x.attach_grad(stype=stype)
    with autograd.record():  # faults while recording, too
        with pytest.raises(so.OperatorError, match=rf"^operator '{op}' \(plugin {PLUGIN}\): .*{message}"):
            so.invoke(op, [x], {"fault": fault})
    assert_usable(op, stype, fault, registry)


@pytest.mark.parametrize("which, fault, when, message", ALWAYS, ids=[f"{c[0]}-{c[1]}" for c in ALWAYS])
def test_fault_is_caught_always(plugin, which, fault, when, message):
    expect_fault(*OPS[which], fault, message)


@pytest.mark.parametrize("which, fault, when, message", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_fault_is_caught_in_debug_mode(debug_mode, which, fault, when, message):
    expect_fault(*OPS[which], fault, message)


@pytest.mark.parametrize("op, stype", OPS.values(), ids=list(OPS))
def test_correct_kernels_pass_every_check_in_debug_mode(debug_mode, op, stype):
    for values in (GOOD, np.zeros_like(GOOD), np.zeros((0, 4), np.float32)):
        y = run(op, stype, values)
        assert y.stype == stype
        np.testing.assert_array_equal(y.asnumpy(), 2 * values)
    out = as_input(np.ones_like(GOOD), stype)
    so.invoke(op, [as_input(GOOD, stype)], {}, out=out)  # into the caller's array
    np.testing.assert_array_equal(out.asnumpy(), 2 * GOOD)


@pytest.mark.parametrize("debug", [False, True])
def test_legitimate_nan_and_returned_outputs_are_not_faults(plugin, monkeypatch, debug, tmp_path):
    monkeypatch.setattr(settings, "BOUNDSCHECK", debug)
    so.get_op("plgfault_dense").plans.clear()
    y = run("plgfault_dense", "default", BAD, "nan")  # NaN written for negatives: computed, not unset
    np.testing.assert_array_equal(np.isnan(y.asnumpy()), BAD < 0)
    y = run("plgfault_dense", "default", BAD, "return_out")  # returns the output it wrote
    np.testing.assert_array_equal(y.asnumpy(), 2 * BAD)


def test_gradient_faults_name_op_and_plugin_and_leave_autograd_usable(plugin):
    registry = so.list_ops()
    for fault, message in [("gradient_raises", "gradient failed: ZeroDivisionError: gradient exploded"),
                           ("gradient_shape", r"gave input 0 \(shape \(3, 4\)\) a gradient of shape \(1,\)"),
                           ("gradient_numpy", r"gave input 0 a gradient that is a numpy\.ndarray, not an NDArray")]:
        w = so.array(GOOD)
        w.attach_grad()
        with autograd.record():
            loss = so.sum(so.invoke("plgfault_dense", [w], {"fault": fault}))
        with pytest.raises(so.OperatorError, match=rf"operator 'plgfault_dense' \(plugin {PLUGIN}\).*{message}"):
            loss.backward()
        assert_usable("plgfault_dense", "default", "none", registry)
    x = so.array(GOOD)
    x.attach_grad()
    with autograd.record():
        y = so.Custom(x, op_type="plgfault_mx", fault="backward_raises")
    with pytest.raises(so.OperatorError, match=rf"'plgfault_mx' \(plugin {PLUGIN}\): FaultyMx\.backward \(.*\) "
                                               "raised ValueError: backward exploded"):
        y.backward()
    assert_usable("plgfault_mx", "default", "none", registry)


def test_autograd_functions_returning_other_than_ndarrays_are_refused_by_name():
    class Forward(autograd.Function):
        def forward(self, x):
            return 5.0

        def backward(self, g):
            return g

    class Backward(autograd.Function):
        def forward(self, x):
            return x * 2

        def backward(self, g):
            return 2 * g.asnumpy()

    x = so.array(GOOD)
    x.attach_grad()
    with autograd.record(), pytest.raises(so.OperatorError, match="Forward.forward returned a builtins.float as "
                                                                 "output 0, not an NDArray"):
        Forward()(x)
    with autograd.record():
        y = Backward()(x)
    with pytest.raises(so.OperatorError, match="backward of Backward gave input 0 a gradient that is a "
                                               "numpy.ndarray, not an NDArray"):
        y.backward()
    with autograd.record():
        y = so.sum(x * x)
    y.backward()
    np.testing.assert_array_equal(x.grad.asnumpy(), 2 * GOOD)


def test_trust_is_declared_not_inferred(plugin):
    """Built-ins declare ``trusted = True``; plugin and MXNet-form kernels are checked, and so
    is a subclass of a built-in that declares its own kernels untrusted."""
    def trusted(name, fn):
        return fn in so.get_op(name).trusted_kernels

    assert trusted("elemwise_mul", so.get_op("elemwise_mul").fcompute["cpu"])
    assert all(trusted("dot", fn) for fn in so.get_op("dot").fcompute_ex.values())
    assert not trusted("plgfault_csr", so.get_op("plgfault_csr").fcompute_ex[("cpu", ("csr",))])
    assert not trusted("plgfault_mx", so.get_op("plgfault_mx").fcompute_ex[("cpu", ("...",))])  # runs user code
    x = as_input(GOOD, "csr")
    so.elemwise_mul(x, x)
    plans = list(so.get_op("elemwise_mul").plans.values())
    assert plans and all(p.trusted and not p.debug for p in plans)

    cls = so.get_op("negative").cls  # a built-in class, subclassed with a kernel of its own

    class Untrusted(cls):
        trusted = False

        @so.kernel()
        def dense(self, ctx, x, y):
            y[...] = -x

    so.register("plgfault_untrusted_negative", replace=True)(Untrusted)
    try:
        assert not so.get_op("plgfault_untrusted_negative").trusted_kernels & {Untrusted.dense}
        out = so.invoke("plgfault_untrusted_negative", [so.array(np.ones((2, 2), np.float32))])
        np.testing.assert_array_equal(out.asnumpy(), -np.ones((2, 2), np.float32))
    finally:
        so.registry.unregister("plgfault_untrusted_negative")


def test_debug_mode_from_the_environment(plugin, tmp_path):
    """SPARSE_OPS_BOUNDSCHECK=1 set before import: one setting read by kernels and dispatch."""
    code = textwrap.dedent(f"""
        import numpy as np, sparse_ops as so
        from sparse_ops import kernels, settings
        assert settings.BOUNDSCHECK is True and kernels.BOUNDSCHECK is True
        so.library.load({str(tmp_path / (PLUGIN + '.py'))!r})
        x = so.csr_matrix((np.array([-1.0, 2.0, 3.0], np.float32), np.array([0, 2, 2]), np.array([0, 2, 3])),
                          shape=(2, 3))
        try:
            so.invoke("plgfault_csr", [x], {{"fault": "unsorted"}})
        except so.OperatorError as exc:
            print(exc)
        print(so.invoke("plgfault_csr", [x], {{"fault": "none"}}).asnumpy().tolist())
    """)
    env = dict(os.environ, SPARSE_OPS_BOUNDSCHECK="1", SPARSE_OPS_DISABLE_PLUGIN_AUTOLOAD="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.splitlines()
    assert first.startswith(f"operator 'plgfault_csr' (plugin {PLUGIN}): kernel CsrDouble.csr produced a "
                            "malformed csr output 0 ('output'): csr column indices must be sorted")
    assert second == "[[-2.0, 0.0, 4.0], [0.0, 0.0, 6.0]]"
