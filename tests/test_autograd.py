"""Imperative autograd: recording state, variables, sparse gradients, grad_req, retain_graph,
grad()/create_graph, Function, threads and the error cases."""
import threading

import numpy as np
import pytest

import sparse_ops as so
from sparse_ops import autograd as ag

STYPES = ["default", "row_sparse", "csr"]


def arr(values, stype="default", dtype="float64"):
    return so.array(np.asarray(values, dtype=dtype)).tostype(stype)


A = np.array([[1.0, 0.0, 2.0], [0.0, 0.0, 0.0], [3.0, 4.0, 0.0]])
B = np.array([[0.5, 0.0, 0.0], [0.0, 1.0, 0.0], [2.0, 0.0, 3.0]])


def test_state_is_scoped_and_per_thread():
    assert not ag.is_recording() and not ag.is_training()
    with ag.record():
        assert ag.is_recording() and ag.is_training()
        with ag.pause():
            assert not ag.is_recording() and not ag.is_training()
        with ag.predict_mode():
            assert ag.is_recording() and not ag.is_training()
        seen = {}
        t = threading.Thread(target=lambda: seen.update(rec=ag.is_recording()))
        t.start()
        t.join()
        assert seen["rec"] is False
    with ag.record(train_mode=False):
        assert not ag.is_training()
    with ag.train_mode():
        assert ag.is_training() and not ag.is_recording()
    assert not ag.is_recording() and not ag.is_training()


@pytest.mark.filterwarnings("ignore::sparse_ops.StorageFallbackWarning")  # csr with row_sparse densifies
@pytest.mark.parametrize("ls", STYPES)
@pytest.mark.parametrize("rs", STYPES)
@pytest.mark.parametrize("op", ["elemwise_add", "elemwise_mul"])
def test_nine_storage_combinations(op, ls, rs):
    x, y = arr(A, ls), arr(B, rs)
    x.attach_grad()
    y.attach_grad()
    with ag.record():
        z = getattr(so, op)(x, y)
    z.backward()
    expected_x = np.ones_like(A) if op == "elemwise_add" else B
    expected_y = np.ones_like(A) if op == "elemwise_add" else A
    assert x.grad.stype == ls and y.grad.stype == rs  # the buffer keeps its storage type
    # a csr variable's gradient is that of its stored values (its own structure); the others
    # hold the whole gradient
    np.testing.assert_allclose(x.grad.asnumpy(), expected_x * (A != 0) if ls == "csr" else expected_x)
    np.testing.assert_allclose(y.grad.asnumpy(), expected_y * (B != 0) if rs == "csr" else expected_y)


def test_row_sparse_gradient_stays_sparse():
    w = arr(np.zeros((6, 2)), "row_sparse")
    w.attach_grad()
    g = arr([[1.0, 2.0], [0, 0], [0, 0], [3.0, 4.0], [0, 0], [0, 0]], "row_sparse")
    with ag.record():
        y = so.elemwise_mul(w, g)
        z = so.elemwise_add(y, y)
    z.backward(out_grad=arr(np.ones((6, 2)), "row_sparse"))
    assert w.grad.stype == "row_sparse"
    np.testing.assert_array_equal(w.grad.indices, [0, 3])
    np.testing.assert_allclose(w.grad.asnumpy(), 2 * g.asnumpy())


def test_gradient_cast_into_buffer_of_other_stype():
    x = arr(A)
    x.attach_grad(stype="row_sparse")
    with ag.record():
        y = so.elemwise_mul(x, arr(B))
    y.backward()
    assert x.grad.stype == "row_sparse"
    np.testing.assert_allclose(x.grad.asnumpy(), B)


def test_grad_req_write_add_null():
    x = arr(A)
    x.attach_grad(grad_req="add")
    for i in range(3):
        with ag.record():
            y = so.elemwise_mul(x, x)
        y.backward()
        np.testing.assert_allclose(x.grad.asnumpy(), 2 * A * (i + 1))
    x.attach_grad(grad_req="write")
    for _ in range(2):
        with ag.record():
            y = so.elemwise_mul(x, x)
        y.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), 2 * A)
    x.attach_grad(grad_req="null")
    with ag.record():
        y = so.elemwise_mul(x, arr(B))
    with pytest.raises(so.OperatorError, match="not in a computational graph"):
        y.backward()  # nothing needed a gradient, so nothing was recorded


def test_sparse_gradient_written_with_one_copy_of_its_values():
    """A row_sparse gradient stored into a row_sparse buffer: the buffer object stays, it
    gets its own copy of the values (the head gradient the caller holds is not aliased) and
    the index arrays are shared read-only."""
    x = so.array(A).tostype("row_sparse")
    x.attach_grad(stype="row_sparse")
    buf = x.grad
    h = so.array(np.array([[0.0, 0, 0], [1, 2, 3], [0, 0, 0]])).tostype("row_sparse")
    with ag.record():
        y = so.add_n(x)  # its gradient hands the head gradient on unchanged
    y.backward(h)
    assert x.grad is buf and x.grad.stype == "row_sparse"
    np.testing.assert_array_equal(x.grad.asnumpy(), h.asnumpy())
    assert not np.shares_memory(x.grad.data, h.data) and np.shares_memory(x.grad.indices, h.indices)
    h.data[...] = 7  # the caller's head gradient changes; the stored gradient does not
    np.testing.assert_array_equal(x.grad.asnumpy(), [[0, 0, 0], [1, 2, 3], [0, 0, 0]])
    with pytest.raises(ValueError, match="read-only"):
        x.grad.indices[0] = 0


def test_fan_out_contributions_are_summed():
    x = arr(A)
    x.attach_grad()
    with ag.record():
        y = so.elemwise_mul(x, x)      # 2x
        z = so.elemwise_add(y, x)      # + 1
        w = so.elemwise_mul(z, arr(B))  # * B
    w.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), (2 * A + 1) * B)


def test_retain_graph_allows_a_second_backward():
    x = arr(A)
    x.attach_grad(grad_req="add")
    with ag.record():
        y = so.elemwise_mul(x, arr(B))
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), 2 * B)
    with pytest.raises(so.OperatorError, match="retain_graph=True"):
        y.backward()


def test_head_grads_and_multiple_heads():
    x = arr(A)
    x.attach_grad()
    with ag.record():
        y1 = so.elemwise_mul(x, arr(B))
        y2 = so.elemwise_add(x, x)
    ag.backward([y1, y2], [arr(np.full((3, 3), 2.0)), None])
    np.testing.assert_allclose(x.grad.asnumpy(), 2 * B + 2)
    with pytest.raises(ValueError, match="head gradient of shape"):
        with ag.record():
            y = so.elemwise_mul(x, x)
        y.backward(arr(np.ones(3)))


def test_detach_and_drop_grad():
    x = arr(A)
    x.attach_grad()
    with ag.record():
        y = so.elemwise_mul(x, x)
        d = y.detach()
        z = so.elemwise_mul(d, x)  # d is a constant here
    z.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), A * A)
    assert np.shares_memory(d.data, y.data)
    x.drop_grad()
    assert x.grad is None


@pytest.mark.parametrize("stype", ["csr", "row_sparse"])
def test_a_sparse_arrays_detach_gets_new_parts_on_assignment_leaving_the_original(stype):
    """x.detach()[:] = v replaces the detached array's parts and writes no memory of x's:
    x keeps its values, and a backward that kept x still runs (it was refused); the
    detached array itself counts the write."""
    x = so.array(np.eye(3)).tostype(stype)
    w = so.array(np.ones((3, 3)))
    w.attach_grad()
    with ag.record():
        loss = so.sum(so.elemwise_mul(w, x))
    d = x.detach()
    d[:] = so.array(2 * np.eye(3)).tostype(stype)
    np.testing.assert_array_equal(x.asnumpy(), np.eye(3))
    loss.backward()
    np.testing.assert_array_equal(w.grad.asnumpy(), np.eye(3))
    with ag.record():
        loss = so.sum(so.elemwise_mul(w, d))
    d[:] = so.array(3 * np.eye(3)).tostype(stype)
    with pytest.raises(so.OperatorError, match="written in place after the call was recorded"):
        loss.backward()


def test_attach_grad_names_itself_when_refusing_a_storage_type():
    x = so.ones((2, 2))
    with pytest.raises(ValueError, match="attach_grad: unknown storage type 'coo' for the gradient"):
        x.attach_grad(stype="coo")
    assert x.grad is None
    x.attach_grad(stype="row_sparse")
    assert x.grad.stype == "row_sparse"


def test_intermediate_attach_grad_keeps_its_gradient():
    x = arr(A)
    x.attach_grad()
    with ag.record():
        y = so.elemwise_mul(x, arr(B))
        y.attach_grad()
        z = so.elemwise_mul(y, y)
    z.backward()
    np.testing.assert_allclose(y.grad.asnumpy(), 2 * A * B)
    np.testing.assert_allclose(x.grad.asnumpy(), 2 * A * B * B)


def test_grad_function_and_second_order():
    x = arr([1.0, 2.0, 3.0])
    x.attach_grad()
    with ag.record():
        y = so.elemwise_mul(so.elemwise_mul(x, x), x)  # x^3
        (dx,) = ag.grad([y], [x], create_graph=True)
    np.testing.assert_allclose(dx.asnumpy(), 3 * x.asnumpy() ** 2)
    assert x.grad.asnumpy().sum() == 0  # grad() leaves .grad alone
    dx.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), 6 * x.asnumpy())


def test_mark_variables():
    x = arr(A)
    buf = so.zeros((3, 3), stype="row_sparse", dtype="float64")
    ag.mark_variables([x], [buf], "write")
    with ag.record():
        y = so.elemwise_mul(x, arr(B))
    y.backward()
    assert x.grad is buf and buf.stype == "row_sparse"
    np.testing.assert_allclose(buf.asnumpy(), B)
    with pytest.raises(ValueError, match="grad_req"):
        ag.mark_variables([x], [buf], "sometimes")


class Cube(ag.Function):
    def forward(self, x):
        self.save_for_backward(x)
        return so.elemwise_mul(so.elemwise_mul(x, x), x)

    def backward(self, dy):
        (x,) = self.saved_tensors
        three_x2 = so.elemwise_mul(so.elemwise_add(so.elemwise_add(x, x), x), x)
        return so.elemwise_mul(dy, three_x2)


def test_function_in_a_chain_whose_first_input_has_no_grad():
    c = arr([1.0, 2.0])  # no attach_grad
    w = arr([0.5, -1.0])
    w.attach_grad()
    with ag.record():
        h = so.elemwise_mul(c, c)      # not recorded: nothing needs a gradient yet
        u = so.elemwise_add(h, w)
        y = Cube()(u)
    y.backward()
    np.testing.assert_allclose(w.grad.asnumpy(), 3 * (np.array([1.0, 4.0]) + [0.5, -1.0]) ** 2)


def test_a_function_whose_backward_raises_is_named_and_the_gradients_are_untouched():
    class Broken(ag.Function):
        def forward(self, x):
            return so.elemwise_mul(x, x)

        def backward(self, dy):
            raise RuntimeError("boom")

    w = arr([0.5, -1.0])
    w.attach_grad()
    with ag.record():
        y = Broken()(w)
    with pytest.raises(so.OperatorError, match=r"test_a_function_whose_backward_raises_is_named_and_the_gradients_are"
                                               r"_untouched.<locals>.Broken.backward \(.*test_autograd.py:\d+\) "
                                               r"raised RuntimeError: boom") as info:
        y.backward()
    assert isinstance(info.value.__cause__, RuntimeError)
    np.testing.assert_array_equal(w.grad.asnumpy(), [0.0, 0.0])
    with ag.record():
        z = Cube()(w)
    z.backward()
    np.testing.assert_allclose(w.grad.asnumpy(), 3 * np.array([0.5, -1.0]) ** 2)


def test_backward_dependency_keeps_only_declared_arrays():
    x = arr(A)
    x.attach_grad()
    with ag.record():
        y = so.elemwise_add(x, arr(B))
        z = so.elemwise_mul(y, x)
    add_node = y._ag.node
    assert all(isinstance(i, ag.ArrayMeta) for i in add_node.inputs)  # add keeps no inputs
    assert add_node.inputs[0].shape == (3, 3)
    assert all(isinstance(i, so.NDArray) for i in z._ag.node.inputs)  # mul keeps both
    z.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), 2 * A + B)


def test_in_place_write_while_recording_is_refused_and_state_survives():
    x = arr(A)
    x.attach_grad()
    with ag.record():
        y = so.elemwise_mul(x, x)
        with pytest.raises(so.OperatorError, match="in-place operations"):
            y[:] = arr(np.zeros((3, 3)))
        with pytest.raises(so.OperatorError, match="in-place operations"):
            so.elemwise_add(x, x, out=x)
    y.backward()  # the graph is intact
    np.testing.assert_allclose(x.grad.asnumpy(), 2 * A)


def test_gradients_in_eight_threads():
    results, errors = {}, []

    def work(i):
        try:
            for _ in range(20):
                x = arr(A * (i + 1))
                x.attach_grad()
                with ag.record():
                    y = so.elemwise_mul(so.elemwise_mul(x, x), arr(B).tostype("csr"))
                y.backward()
            results[i] = x.grad.asnumpy()
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i in range(8):
        np.testing.assert_allclose(results[i], 2 * A * (i + 1) * B)


def test_out_grads_on_split_missing_heads_count_as_zero():
    x = arr(np.arange(12.0).reshape(3, 4))
    x.attach_grad()
    with ag.record():
        a, b = so.split(x, num_outputs=2, axis=1)
        y = so.elemwise_mul(a, a)  # only the first piece is used
    y.backward()
    expected = np.zeros((3, 4))
    expected[:, :2] = 2 * x.asnumpy()[:, :2]
    np.testing.assert_allclose(x.grad.asnumpy(), expected)
    with ag.record():
        a, b = so.split(x, num_outputs=2, axis=1)
    ag.backward([a, b], [arr(np.ones((3, 2))), arr(np.full((3, 2), 2.0))])
    np.testing.assert_allclose(x.grad.asnumpy(), np.repeat([[1.0, 1.0, 2.0, 2.0]], 3, axis=0))


def test_second_order_through_unary_and_dot():
    x = arr([0.5, -1.0, 2.0])
    x.attach_grad()
    with ag.record():
        y = so.exp(so.elemwise_mul(x, x))  # d/dx = 2x e^{x^2}
        (dx,) = ag.grad([y], [x], create_graph=True)
    dx.backward()  # d2/dx2 = (2 + 4x^2) e^{x^2}
    v = x.asnumpy()
    np.testing.assert_allclose(x.grad.asnumpy(), (2 + 4 * v ** 2) * np.exp(v ** 2), rtol=1e-6)

    w = arr([[1.0, 2.0], [3.0, 4.0]])
    w.attach_grad()
    with ag.record():
        z = so.dot(so.elemwise_mul(w, w), w)
        (dw,) = ag.grad([z], [w], create_graph=True)
        s = so.sum(dw)
    s.backward()
    # numeric second derivative of sum(d sum(z) / dw) along each coordinate
    def first(wv):
        ww = arr(wv)
        ww.attach_grad()
        with ag.record():
            zz = so.dot(so.elemwise_mul(ww, ww), ww)
        zz.backward()
        return ww.grad.asnumpy().sum()
    base = w.asnumpy()
    numeric = np.zeros_like(base)
    for idx in np.ndindex(base.shape):
        d = np.zeros_like(base)
        d[idx] = 1e-5
        numeric[idx] = (first(base + d) - first(base - d)) / 2e-5
    np.testing.assert_allclose(w.grad.asnumpy(), numeric, rtol=1e-4)


def test_embedding_sparse_grad_through_the_tape():
    weight = arr(np.arange(20.0).reshape(10, 2))
    weight.attach_grad(stype="row_sparse")
    ids = arr([[1, 3], [3, 7]], dtype="float32")
    with ag.record():
        out = so.Embedding(ids, weight, input_dim=10, output_dim=2, dtype="float64", sparse_grad=True)
    out.backward()
    assert weight.grad.stype == "row_sparse"
    np.testing.assert_array_equal(weight.grad.indices, [1, 3, 7])
    np.testing.assert_allclose(weight.grad.data, [[1, 1], [2, 2], [1, 1]])


@so.register("_test_needs_spy", replace=True)
class _NeedsSpy(so.Op):
    """x * y whose gradient records which inputs asked for a gradient."""

    arguments = ("x", "y")
    seen: list = []

    @so.kernel(device=("cpu", "gpu"))
    def dense(self, ctx, x, y, out):
        np.multiply(x, y, out=out)

    def gradient(self, out_grads, inputs, outputs, needs=None):
        _NeedsSpy.seen.append(list(needs))
        g = out_grads[0]
        return [so.elemwise_mul(g, inputs[1]) if needs[0] else None,
                so.elemwise_mul(g, inputs[0]) if needs[1] else None]


def test_gradients_are_told_which_inputs_need_them():
    x, c = arr(A), arr(B)
    x.attach_grad()
    _NeedsSpy.seen.clear()
    with ag.record():
        y = so.ops._test_needs_spy(x, c)  # c is a constant
    y.backward()
    assert _NeedsSpy.seen == [[True, False]]
    np.testing.assert_allclose(x.grad.asnumpy(), B)


@pytest.fixture
def no_gradient_ops():
    """Two user ops: one with no gradient rule, one declared differentiable = False."""
    class Twice(so.Op):
        """2 * x, with no gradient rule."""
        arguments = ("values",)

        @so.kernel()
        def dense(self, ctx, x, y):
            y[...] = 2 * x

    class Mask(so.Op):
        """x > 0 as floats: a constant for autograd."""
        differentiable = False

        @so.kernel()
        def dense(self, ctx, x, y):
            y[...] = x > 0

    so.register("ag_test_twice", replace=True)(Twice)
    so.register("ag_test_mask", replace=True)(Mask)
    yield
    for name in ("ag_test_twice", "ag_test_mask"):
        so.registry.unregister(name)


def test_backward_through_an_op_without_gradient_names_op_and_input(no_gradient_ops):
    x = arr(A)
    x.attach_grad()
    with ag.record():
        y = so.invoke("ag_test_twice", [so.elemwise_mul(x, x)])
        loss = so.sum(y)
    with pytest.raises(so.OperatorError, match=r"operator 'ag_test_twice' declares no gradient, so autograd "
                                               r"cannot differentiate through it to input 0 \('values'\)"):
        loss.backward()
    # the process and autograd still work afterwards
    with ag.record():
        z = so.sum(so.elemwise_mul(x, x))
    z.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), 2 * A)


def test_constant_outputs_say_so(no_gradient_ops):
    x = arr(A)
    x.attach_grad()
    with ag.record():
        m = so.invoke("ag_test_mask", [x])
        y = so.sum(so.elemwise_mul(m, x))  # the mask is a constant factor
    with pytest.raises(so.OperatorError, match=r"output of operator 'ag_test_mask': it is declared "
                                               r"differentiable = False, so its outputs are constants"):
        m.backward()
    y.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), (A > 0).astype(float))


def test_an_array_written_in_place_after_recording_is_refused_at_backward():
    """The tape keeps arrays, not copies: a write into one after the ``record()`` block and
    before ``backward()`` (``x[:] =``, ``out=``, an optimizer's in-place update) would make
    the gradient read the new values (every entry 200, not 2 x). Each kept array counts its
    in-place writes, as torch's tensors do: the backward that would read a changed one is
    refused naming the op and the input; unchanged graphs, writes after backward, and the
    next recording work."""
    c = so.array(np.arange(6.0).reshape(3, 2))
    c.attach_grad()
    with ag.record():
        z = so.sum(so.square(c))
    c[:] = 100
    with pytest.raises(so.OperatorError, match=r"backward of operator 'square': its input 0, which the gradient "
                                               r"reads, was written in place after the call was recorded"):
        z.backward()
    x, w = so.array(np.arange(4.0).reshape(2, 2)), so.array(np.ones((2, 2)))
    w.attach_grad()
    with ag.record():
        y = so.sum(so.elemwise_mul(x, w))
    so.elemwise_add(x, x, out=x)  # a constant the gradient of w reads
    with pytest.raises(so.OperatorError, match=r"elemwise_mul': its input 0"):
        y.backward()
    with ag.record():
        y = so.sum(so.elemwise_mul(x, w))
    y.backward(retain_graph=True)
    np.testing.assert_array_equal(w.grad.asnumpy(), x.asnumpy())
    so.sgd_update(w, w.grad, lr=0.1, out=w)  # after the backward: fine
    with pytest.raises(so.OperatorError, match=r"elemwise_mul': its input 1"):
        y.backward()  # the retained graph read w before the update
    rows = so.row_sparse_array((np.ones((1, 2)), np.array([1])), shape=(3, 2))
    d = so.array(np.ones((3, 2)))
    d.attach_grad()
    with ag.record():
        s = so.sum(so.elemwise_mul(rows, d))
    rows[:] = so.row_sparse_array((2 * np.ones((1, 2)), np.array([0])), shape=(3, 2))
    with pytest.raises(so.OperatorError, match="its input 0"):
        s.backward()


# ---- copies and conversions while recording ----------------------------------------------------------
def test_tostype_copy_and_astype_are_recorded():
    """x.tostype, x.copy and x.astype of an array in the graph are operator calls on the
    tape (cast_storage, identity, cast): the gradient flows through them, as MXNet records
    cast_storage and cast and torch records .to() and .clone()."""
    w = so.array(np.arange(1, 7, dtype=np.float32).reshape(2, 3))
    w.attach_grad()
    with ag.record():
        loss = so.sum(w * w) + so.sum(w.tostype("csr")) + so.sum(w.copy() * 3) + so.sum(w.astype("float64") * 2)
    loss.backward()
    np.testing.assert_allclose(w.grad.asnumpy(), 2 * w.asnumpy() + 1 + 3 + 2)
    assert w.grad.dtype == np.float32
    c = so.array(np.array([[0, 2.], [3, 0]], np.float32)).tostype("csr")
    c.attach_grad()
    with ag.record():
        y = c.astype("float64")
        z = c.copy()
        loss = so.sum(y * 3) + so.sum(z * 2)
    assert (y.stype, y.dtype, z.stype) == ("csr", np.float64, "csr")
    loss.backward()
    assert c.grad.dtype == np.float32
    np.testing.assert_allclose(c.grad.asnumpy(), [[0, 5.0], [5.0, 0]])  # its stored values' gradient
    assert w.astype("float32", copy=False) is w  # nothing changes: the array itself, recorded or not
    with ag.record():
        assert w.astype("float32", copy=False) is w
    x = so.array(np.ones(3, np.float32))  # not in a graph: plain copies, nothing recorded
    with ag.record():
        assert x.copy()._ag is None and x.tostype("row_sparse")._ag is None


def test_a_write_through_a_view_is_seen_by_a_node_that_kept_its_base_or_another_view():
    """Views made by indexing and detach share the array's count of in-place writes (torch's
    version counter is per memory): a write through any of them refuses the backward that
    would read the new values."""
    w = so.array(np.ones((2, 3), np.float32))
    w.attach_grad()
    writes = [lambda x, s: x.__setitem__(slice(None), 100), lambda x, s: s.__setitem__(slice(None), 5),
              lambda x, s: x.__iadd__(1), lambda x, s: x.detach().__setitem__(0, 7)]
    for write in writes:
        x = so.array(np.arange(12, dtype=np.float32).reshape(4, 3))
        s = x[1:3]
        with ag.record():
            loss = so.sum(w * s)
        write(x, s)
        with pytest.raises(so.OperatorError, match="written in place after the call was recorded"):
            loss.backward()
    x = so.array(np.arange(12, dtype=np.float32).reshape(4, 3))
    picked = x[np.array([0, 1])]  # advanced indexing copies: its own count
    with ag.record():
        loss = so.sum(w * picked)
    x[:] = 3
    loss.backward()
    np.testing.assert_array_equal(w.grad.asnumpy(), np.arange(6, dtype=np.float32).reshape(2, 3))
    for x in (so.array(np.arange(12, dtype=np.float32).reshape(4, 3)), so.array(np.eye(3)).tostype("csr")):
        x.attach_grad()
        with ag.record():
            loss = so.sum(x * x)
        with pytest.raises((ValueError, TypeError)):  # a write NumPy or the container refuses: nothing written
            x[:] = np.ones((5, 5))
        loss.backward()  # so nothing to refuse


@pytest.mark.parametrize("op", ["radians", "degrees", "sign", "negative"])
def test_the_second_derivative_of_an_op_with_a_constant_first_derivative_is_zero(op):
    """The create_graph gradient of radians (a constant) does not depend on x, yet is x's
    function: differentiating it again gives zero, as MXNet and JAX do, not a refusal."""
    x = so.array(np.array([0.5, 1.0, 2.0]))
    x.attach_grad()
    with so.autograd.record():
        y = getattr(so, op)(x)
        (g,) = so.autograd.grad([y], [x], create_graph=True, retain_graph=True)
    first = {"radians": np.pi / 180, "degrees": 180 / np.pi, "sign": 0.0, "negative": -1.0}[op]
    np.testing.assert_allclose(g.asnumpy(), np.full(3, first))
    (second,) = so.autograd.grad([g], [x], retain_graph=True)
    np.testing.assert_array_equal(second.asnumpy(), np.zeros(3))
    with so.autograd.record():  # and through further ops on it
        z = so.sum(g * x)
    z.backward()
    np.testing.assert_allclose(x.grad.asnumpy(), np.full(3, first))


# ---- a csr variable's gradient is that of its stored values --------------------------------------------
def _csr_leaf(seed=0):
    import scipy.sparse as sp

    m = sp.random(5, 4, density=0.5, format="csr", random_state=seed)
    m.sort_indices()
    return m, so.csr_matrix(m)


@pytest.mark.parametrize("rule", ["elemwise_mul", "broadcast_mul", "scalar", "square", "dot"])
def test_csr_variable_gradient_has_its_own_structure(rule):
    import warnings

    m, a = _csr_leaf()
    w = np.arange(20.0).reshape(5, 4) + 1
    fns = {"elemwise_mul": (lambda x: so.elemwise_mul(x, so.array(w)), w),
           "broadcast_mul": (lambda x: so.broadcast_mul(x, so.array(w)), w),
           "scalar": (lambda x: x * 2, np.full((5, 4), 2.0)),
           "square": (lambda x: so.square(x), 2 * m.toarray()),
           "dot": (lambda x: so.dot(x, so.array(np.ones((4, 3)))), np.full((5, 4), 3.0))}
    fn, dense_grad = fns[rule]
    for req in ("write", "add"):
        a.attach_grad(grad_req=req)
        for _ in range(2 if req == "add" else 1):
            with warnings.catch_warnings(), ag.record():
                warnings.simplefilter("ignore", so.StorageFallbackWarning)
                loss = so.sum(fn(a))
            loss.backward()
        g = a.grad
        assert g.stype == "csr"
        np.testing.assert_array_equal(g.indices.asnumpy(), m.indices)
        np.testing.assert_array_equal(g.indptr.asnumpy(), m.indptr)
        times = 2 if req == "add" else 1
        np.testing.assert_allclose(g.data.asnumpy(), times * dense_grad[m.nonzero()], rtol=1e-12)
    a.attach_grad()
    with warnings.catch_warnings(), ag.record():
        warnings.simplefilter("ignore", so.StorageFallbackWarning)
        loss = so.sum(fn(a))
    (g,) = ag.grad(loss, [a])
    np.testing.assert_allclose(g.data.asnumpy(), dense_grad[m.nonzero()], rtol=1e-12)
    np.testing.assert_array_equal(g.indices.asnumpy(), m.indices)


def test_on_structure_reads_any_gradient_storage_at_the_stored_entries():
    from sparse_ops.storage import on_structure

    m, a = _csr_leaf(1)
    rng = np.random.default_rng(0)
    dense = rng.standard_normal((5, 4))
    dense[rng.random((5, 4)) < 0.4] = 0.0
    want = dense[m.nonzero()]
    for g in (so.array(dense), so.array(dense).tostype("csr"), so.array(dense).tostype("row_sparse"),
              so.zeros((5, 4), stype="csr"), so.zeros((5, 4), stype="row_sparse")):
        r = on_structure(g, a)
        expect = want if g.asnumpy().any() else np.zeros_like(want)
        np.testing.assert_array_equal(r.data.asnumpy(), expect)
        assert r.indices.asnumpy().tolist() == m.indices.tolist()
        r.check_format()


def test_mxnet_face_csr_gradient_keeps_every_nonzero():
    """MXNet 1.9 casts the computed gradient into the csr buffer: every nonzero is kept."""
    import sparse_ops.compat.mxnet as mx

    m, _ = _csr_leaf()
    a = mx.nd.sparse.csr_matrix((m.data, m.indices, m.indptr), shape=m.shape, dtype="float64")
    a.attach_grad()
    w = np.arange(20.0).reshape(5, 4) + 1
    with mx.autograd.record():
        loss = mx.nd.sum(a * mx.nd.array(w, dtype="float64"))
    loss.backward()
    np.testing.assert_allclose(a.grad.asnumpy(), w)


@pytest.mark.parametrize("key", [1, (1, 2), (slice(None), slice(1, 5, 2)), ([0, 0, 3],), (Ellipsis, None, 2),
                                 ([1, 1], [2, 2])], ids=str)
def test_indexing_while_recording_is_recorded(key):
    """x[key] of an array needing a gradient, while recording, reaches x in backward (repeated
    indices accumulate), as torch's indexing does; outside recording it stays a view."""
    torch = pytest.importorskip("torch")
    v = np.arange(24.0).reshape(4, 6)
    x = so.array(v)
    x.attach_grad()
    with ag.record():
        y = x[key]
        loss = so.sum(y * y) + so.sum(x)
    loss.backward()
    t = torch.tensor(v, requires_grad=True)
    ((t[key] ** 2).sum() + t.sum()).backward()
    np.testing.assert_array_equal(y.asnumpy(), v[key])
    np.testing.assert_allclose(x.grad.asnumpy(), t.grad.numpy())
    view = x[1:3]
    assert np.shares_memory(view._data, x._data)  # not recording: the view


@pytest.mark.parametrize("stype,key", [("csr", 1), ("csr", slice(0, 2)), ("csr", slice(-2, None)),
                                       ("row_sparse", 1), ("row_sparse", slice(1, 4)), ("row_sparse", slice(None, None, -2)),
                                       ("row_sparse", [3, 1, 1]), ("row_sparse", (1, 2)), ("row_sparse", -1)], ids=str)
def test_indexing_a_sparse_array_while_recording_is_recorded(stype, key):
    """A csr's rows and a row_sparse's rows, row ids and elements read while recording reach
    the array's gradient (a csr variable's on its stored entries), with the storage type the
    unrecorded indexing gives."""
    torch = pytest.importorskip("torch")
    v = np.array([[0, 1.0, 0, 2], [0, 0, 0, 0], [3, 0, 4, 0], [5, 6, 0, 0], [0, 0, 7, 8]])
    x = so.array(v).tostype(stype)
    x.attach_grad()
    plain = x[key]
    with ag.record():
        y = x[key]
        loss = so.sum(y * y) + so.sum(x * 1.0)
    loss.backward()
    assert y.stype == plain.stype and y.shape == plain.shape
    np.testing.assert_array_equal(y.asnumpy(), plain.asnumpy())
    t = torch.tensor(v, requires_grad=True)
    tkey = list(key) if isinstance(key, list) else key
    if isinstance(key, slice) and key.step is not None and key.step < 0:
        picked = torch.flip(t, [0])[::-key.step]
    else:
        picked = t[tkey] if stype == "row_sparse" else t[tkey]
    ((picked ** 2).sum() + t.sum()).backward()
    want = t.grad.numpy() * (v != 0) if stype == "csr" else t.grad.numpy()
    np.testing.assert_allclose(x.grad.asnumpy(), want)


def test_mark_variables_gives_a_csr_variable_the_same_rule_as_attach_grad():
    import sparse_ops.compat.mxnet as mx

    m, a = _csr_leaf(2)
    w = np.arange(20.0).reshape(5, 4) - 7
    ag.mark_variables([a], [so.zeros((5, 4), stype="csr")])
    with ag.record():
        loss = so.sum(a * so.array(w))
    loss.backward()
    np.testing.assert_array_equal(a.grad.indices.asnumpy(), m.indices)
    np.testing.assert_allclose(a.grad.asnumpy(), np.where(m.toarray() != 0, w, 0))
    face = mx.nd.sparse.csr_matrix((m.data, m.indices, m.indptr), shape=m.shape, dtype="float64")
    mx.autograd.mark_variables([face], [mx.nd.sparse.zeros("csr", (5, 4), dtype="float64")])
    with mx.autograd.record():
        loss = mx.nd.sum(face * mx.nd.array(w, dtype="float64"))
    loss.backward()
    np.testing.assert_allclose(face.grad.asnumpy(), w)  # MXNet's: every nonzero


def test_indexing_rows_of_a_large_table_while_recording_reads_only_those_rows():
    """x[ids] / x[i] / x[a:b] of a table that needs a gradient, while recording, is a take of
    those rows: nothing of the table's size is allocated (25.6 MB table here)."""
    import tracemalloc

    table = so.array(np.zeros((200_000, 16)))
    table.attach_grad()
    tracemalloc.start()
    try:
        with ag.record():
            rows = [table[np.array([5, 7, 199_999])], table[3], table[10:12]]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [r.shape for r in rows] == [(3, 16), (16,), (2, 16)]
    assert peak < 4_000_000, peak
