"""MXNet-form custom operators (CustomOpProp / CustomOp): the semantics of MXNet's own
custom-op tests, written fresh."""
import threading

import numpy as np
import pytest

import sparse_ops as so
from sparse_ops import autograd as ag


@so.register("test_sqr", replace=True)
class SqrProp(so.CustomOpProp):
    """x**2 with an auxiliary state counting calls; keeps csr storage."""

    def __init__(self):
        super().__init__(need_top_grad=True)

    def list_arguments(self):
        return ["data"]

    def list_outputs(self):
        return ["output"]

    def list_auxiliary_states(self):
        return ["calls"]

    def infer_shape(self, in_shape):
        return in_shape, [in_shape[0]], [in_shape[1]]

    def infer_storage_type(self, in_stype):
        return in_stype, [in_stype[0]], [in_stype[1]]

    def infer_storage_type_backward(self, ograd_stype, in_stype, out_stype, igrad_stype, aux_stype):
        return ograd_stype, in_stype, out_stype, [in_stype[0]], aux_stype

    def create_operator(self, ctx, shapes, dtypes):
        SqrProp.created += 1
        return Sqr()


SqrProp.created = 0


class Sqr(so.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        x = in_data[0]
        self.assign(out_data[0], req[0], x * x)
        aux[0][:] = aux[0] + 1

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        x = in_data[0]
        self.assign(in_grad[0], req[0], out_grad[0] * (x * 2))


@pytest.mark.parametrize("stype", ["default", "csr"])
def test_square_with_aux_state_and_storage(stype):
    dense = np.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]])
    x = so.array(dense).tostype(stype)
    calls = so.zeros((2, 3), dtype="float64")
    x.attach_grad()
    with ag.record():
        y = so.Custom(x, calls, op_type="test_sqr", name="sqr0")
    assert y.stype == stype
    np.testing.assert_allclose(y.asnumpy(), dense ** 2)
    np.testing.assert_allclose(calls.asnumpy(), 1)  # aux mutated in place
    y.backward()
    assert x.grad.stype == stype
    np.testing.assert_allclose(x.grad.asnumpy(), 2 * dense)
    y2 = so.ops.test_sqr(x, calls)  # the generated function
    np.testing.assert_allclose(y2.asnumpy(), dense ** 2)
    np.testing.assert_allclose(calls.asnumpy(), 2)


def test_create_operator_once_per_signature():
    SqrProp.created = 0
    calls = so.zeros((2, 2), dtype="float64")
    for _ in range(3):
        so.Custom(so.ones((2, 2), dtype="float64"), calls, op_type="test_sqr")
    assert SqrProp.created == 1
    so.Custom(so.ones((2, 2), dtype="float32"), so.zeros((2, 2)), op_type="test_sqr")
    assert SqrProp.created == 2
    # recorded in training and in predict mode, forward and backward: the same operator
    x = so.ones((2, 2), dtype="float64")
    x.attach_grad()
    for train in (True, False):
        for _ in range(2):
            with ag.record(train_mode=train):
                y = so.Custom(x, calls, op_type="test_sqr")
            y.backward()
            np.testing.assert_allclose(x.grad.asnumpy(), 2 * np.ones((2, 2)))
    assert SqrProp.created == 2


@so.register("test_mult", replace=True)
class MultProp(so.CustomOpProp):
    """x * y with the default storage inference (dense only)."""

    def list_arguments(self):
        return ["lhs", "rhs"]

    def create_operator(self, ctx, shapes, dtypes):
        return Mult()


class Mult(so.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], in_data[0] * in_data[1])

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        self.assign(in_grad[0], req[0], in_data[1] * out_grad[0])
        self.assign(in_grad[1], req[1], in_data[0] * out_grad[0])


def test_two_inputs_default_inference_and_gradients():
    a, b = np.arange(6.0).reshape(2, 3), np.full((2, 3), 3.0)
    x, y = so.array(a), so.array(b)
    x.attach_grad()
    y.attach_grad()
    with ag.record():
        z = so.Custom(x, y, op_type="test_mult")
    z.backward()
    np.testing.assert_allclose(z.asnumpy(), a * b)
    np.testing.assert_allclose(x.grad.asnumpy(), b)
    np.testing.assert_allclose(y.grad.asnumpy(), a)


def test_default_storage_inference_refuses_sparse_with_mxnets_message():
    x = so.array(np.eye(2)).tostype("csr")
    with pytest.raises(so.OperatorError, match="found non default stype 'csr' for in_stype\\[0\\]"):
        so.Custom(x, so.array(np.eye(2)), op_type="test_mult")


@so.register("test_no_top_grad", replace=True)
class NoTopGradProp(so.CustomOpProp):
    """Softmax-style op whose backward ignores the head gradient."""

    def __init__(self):
        super().__init__(need_top_grad=False)

    def create_operator(self, ctx, shapes, dtypes):
        return NoTopGrad()


class NoTopGrad(so.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], in_data[0] * 2.0)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        self.assign(in_grad[0], req[0], so.ones(in_data[0].shape, dtype="float64"))


def test_need_top_grad_false_does_not_keep_or_read_head_gradient():
    x = so.array(np.ones(3))
    x.attach_grad()
    with ag.record():
        y = so.Custom(x, op_type="test_no_top_grad")
    y.backward(so.array(np.full(3, 100.0)))
    np.testing.assert_allclose(x.grad.asnumpy(), 1)


@so.register("test_no_inputs", replace=True)
class NoInputsProp(so.CustomOpProp):
    """An op with no inputs whose output shape and fill come from string kwargs."""

    def __init__(self, rows, cols, fill="0.5"):
        super().__init__()
        assert isinstance(rows, str) and isinstance(fill, str)  # MXNet passes strings
        self.shape = (int(rows), int(cols))
        self.fill = float(fill)

    def list_arguments(self):
        return []

    def infer_shape(self, in_shape):
        return [], [self.shape], []

    def infer_type(self, in_type):
        return [], [np.float32], []

    def create_operator(self, ctx, shapes, dtypes):
        return NoInputs(self.fill)


class NoInputs(so.CustomOp):
    def __init__(self, fill):
        self.fill = fill

    def forward(self, is_train, req, in_data, out_data, aux):
        out_data[0][:] = self.fill


def test_op_without_inputs_gets_string_kwargs():
    y = so.Custom(op_type="test_no_inputs", rows=2, cols=3, fill=1.5)
    assert y.shape == (2, 3) and y.dtype == np.float32
    np.testing.assert_allclose(y.asnumpy(), 1.5)


@so.register("test_raises", replace=True)
class RaisesProp(so.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return Raises()


class Raises(so.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        raise ZeroDivisionError("forward exploded")


def test_error_inside_forward_names_the_op_and_keeps_the_cause():
    x = so.array(np.ones(2))
    x.attach_grad()
    with ag.record():
        with pytest.raises(so.OperatorError, match="test_raises.*ZeroDivisionError: forward exploded") as info:
            so.Custom(x, op_type="test_raises")
        assert isinstance(info.value.__cause__, ZeroDivisionError)
        y = so.elemwise_mul(x, x)  # recording still works
    y.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), 2)


def test_bad_shapes_and_arity_name_the_op_and_argument():
    with pytest.raises(so.OperatorError, match="test_mult.*expects 2 inputs \\(lhs, rhs\\), got 1"):
        so.Custom(so.ones(2), op_type="test_mult")

    @so.register("test_fixed_shape", replace=True)
    class FixedProp(so.CustomOpProp):
        def infer_shape(self, in_shape):
            return [[4]], [[4]], []

        def create_operator(self, ctx, shapes, dtypes):
            return Mult()

    with pytest.raises(so.OperatorError, match="shape of argument 'data' is \\(3,\\) but infer_shape requires \\(4,\\)"):
        so.Custom(so.ones(3), op_type="test_fixed_shape")
    with pytest.raises(so.OperatorError, match="no operator named 'missing'"):
        so.Custom(so.ones(3), op_type="missing")


def test_eight_threads_call_custom_ops_at_once():
    errors = []

    def work(i):
        try:
            for _ in range(30):
                x = so.array(np.full((3, 3), float(i)))
                x.attach_grad()
                with ag.record():
                    y = so.Custom(x, so.array(np.ones((3, 3))), op_type="test_mult")
                y.backward()
                assert np.allclose(x.grad.asnumpy(), 1)
        except Exception as exc:  # pragma: no cover
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_a_custom_op_registered_through_the_mxnet_face_sees_mxnet_arrays_from_every_face(isolated):
    """A CustomOp registered with ``mx.operator.register`` runs MXNet code: its forward and
    backward get the face's arrays (``sum()`` of shape (1,), a csr's ``data`` an NDArray)
    whether the MXNet face, the native API or the torch bridge calls it, dense or csr, and
    what it writes (a csr output, an aux state, the input gradient) reaches the caller. The
    same class registered natively gets the native arrays."""
    import scipy.sparse as sp
    import torch

    import sparse_ops.compat.mxnet as mx
    import sparse_ops.torch as st

    seen = []

    class Scaled(so.CustomOp):
        def forward(self, is_train, req, in_data, out_data, aux):
            x = in_data[0]
            face = type(x).__module__.startswith("sparse_ops.compat.mxnet")
            total = x.sum().asnumpy()[0] if face else None  # MXNet's (1,)-shaped sum
            seen.append((type(x).__module__.split(".")[1], x.stype, total))
            self.assign(out_data[0], req[0], x * 3)
            aux[0][:] = aux[0] + 1

        def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
            seen.append(("backward", *(type(a).__module__.startswith("sparse_ops.compat.mxnet")
                                       for a in (out_grad[0], in_grad[0]))))
            self.assign(in_grad[0], req[0], out_grad[0] * 3)

    class ScaledProp(so.CustomOpProp):
        def __init__(self):
            super().__init__(need_top_grad=True)

        def list_auxiliary_states(self):
            return ["calls"]

        def infer_shape(self, in_shape):
            return in_shape[:1], [in_shape[0]], [[1]]

        def infer_storage_type(self, in_stype):
            return in_stype[:1], [in_stype[0]], ["default"]

        def infer_storage_type_backward(self, ograd_stype, in_stype, out_stype, igrad_stype, aux_stype):
            return ograd_stype, in_stype, out_stype, ["default"], aux_stype

        def create_operator(self, ctx, shapes, dtypes):
            return Scaled()

    mx.operator.register("test_face_scaled")(ScaledProp)
    m = sp.csr_matrix(np.array([[1.0, 0.0, 2.0], [0.0, 4.0, 0.0]]))
    calls = so.zeros((1,))

    got = mx.nd.Custom(mx.nd.sparse.csr_matrix(m), mx.nd.zeros((1,)), op_type="test_face_scaled")
    assert got.stype == "csr" and np.allclose(got.asnumpy(), 3 * m.toarray())
    native = so.ops.test_face_scaled(so.csr_matrix(m), calls)
    assert type(native) is so.CSRNDArray and np.allclose(native.asnumpy(), 3 * m.toarray())
    x = so.array(m.toarray())
    x.attach_grad()
    with ag.record():
        y = so.ops.test_face_scaled(x, calls)
        total = so.sum(y)
    total.backward()
    assert type(y) is so.NDArray and np.allclose(x.grad.asnumpy(), 3.0)
    t = torch.tensor(m.toarray(), requires_grad=True)
    st.ops.test_face_scaled(t, torch.zeros(1, dtype=torch.float64)).sum().backward()
    assert torch.allclose(t.grad, torch.full_like(t, 3.0))
    assert calls.asnumpy().tolist() == [2.0]  # the aux state written through the face's twin
    assert seen[:3] == [("compat", "csr", 7.0), ("compat", "csr", 7.0), ("compat", "default", 7.0)]
    assert ("backward", True, True) in seen and seen[-2] == ("compat", "default", 7.0)

    seen.clear()
    so.register("test_native_scaled")(ScaledProp)
    so.ops.test_native_scaled(so.csr_matrix(m), so.zeros((1,)))
    assert seen == [("ndarray", "csr", None)]


def test_a_prop_declares_what_opcheck_reads_as_a_kernel_first_op_does(isolated):
    """An MXNet-form op with a storage-aware (csr) forward only has nothing to compare with
    unless its CustomOpProp says: its ``reference`` (called on the prop, its parameters the
    prop's attributes) is what opcheck compares with, and its ``opcheck_skip`` is honoured."""
    import scipy.sparse as sp

    from sparse_ops.sdk.testing import OpcheckError, opcheck

    class Scale(so.CustomOp):
        def __init__(self, factor):
            super().__init__()
            self.factor = factor

        def forward(self, is_train, req, in_data, out_data, aux):
            self.assign(out_data[0], req[0], in_data[0] * self.factor)

        def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
            self.assign(in_grad[0], req[0], out_grad[0] * self.factor)

    def prop(reference=None, skip=None):
        class ScaleProp(so.CustomOpProp):
            def __init__(self, factor="2"):
                super().__init__(need_top_grad=True)
                self.factor = float(factor)

            def infer_storage_type(self, in_stype):
                return in_stype, [in_stype[0]], []

            def infer_storage_type_backward(self, ograd_stype, in_stype, out_stype, igrad_stype, aux_stype):
                return ograd_stype, in_stype, out_stype, [in_stype[0]], aux_stype

            def create_operator(self, ctx, shapes, dtypes):
                return Scale(self.factor)

            @classmethod
            def samples(cls):
                return [([so.csr_matrix(sp.random(4, 3, density=0.5, random_state=1))], {"factor": 3.0})]

        if reference is not None:
            ScaleProp.reference = reference
        if skip is not None:
            ScaleProp.opcheck_skip = skip
        return ScaleProp

    so.register("test_prop_plain")(prop())
    with pytest.raises(OpcheckError, match="reference: compared nothing"):
        opcheck("test_prop_plain", so.get_op("test_prop_plain").cls.samples())
    so.register("test_prop_ref")(prop(reference=lambda self, x: [x * self.factor]))
    report = opcheck("test_prop_ref", so.get_op("test_prop_ref").cls.samples())
    assert "reference" in {o.check for o in report.results[0].outcomes if o.status == "passed"}
    so.register("test_prop_wrong")(prop(reference=lambda self, x: [x * (self.factor + 1)]))
    with pytest.raises(OpcheckError, match="reference"):
        opcheck("test_prop_wrong", so.get_op("test_prop_wrong").cls.samples())
    so.register("test_prop_skip")(prop(skip={"reference": "compared with SciPy elsewhere"}))
    report = opcheck("test_prop_skip", so.get_op("test_prop_skip").cls.samples())
    assert report.skipped()["reference"] == {"skipped: compared with SciPy elsewhere"}
