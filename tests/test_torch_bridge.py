"""sparse_ops.torch: conversions (shared memory, layouts, copies said in the docs), bridged ops
on torch tensors against NumPy/SciPy/torch references, the namespace following the table,
errors naming the op and the argument. torch is a dev dependency: these tests never skip."""
import json
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import torch

import sparse_ops as so
import sparse_ops.torch as st
from sparse_ops.torch import BridgeError, CSRParts, TorchBridgeError


def test_torch_is_installed_where_tests_run():
    """CI installs torch with the dev extra (pinned by ci/constraints.txt): nothing here skips."""
    assert tuple(int(p) for p in torch.__version__.split(".")[:2]) >= (2, 4)


def test_import_sparse_ops_does_not_import_torch():
    code = ("import sys, sparse_ops, sparse_ops.ops, sparse_ops.autograd; "
            "print(json.dumps(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))))")
    out = subprocess.run([sys.executable, "-c", "import json; " + code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_importing_the_bridge_registers_no_torch_op():
    code = ("import torch, sparse_ops.torch as st\n"
            "from sparse_ops.torch import library\n"
            "print(len(library._OVERLOADS))\n"
            "torch.ops.sparse_ops.relu\n"  # first use by name defines that op only
            "print(sorted({k[0] for k in library._OVERLOADS}))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    first, second = out.stdout.strip().splitlines()[-2:]
    assert first == "0" and second == "['relu']"


def _csr(rows=6, cols=5, seed=0, dtype=np.float64, index_dtype=np.int32):
    m = sp.random(rows, cols, density=0.4, format="csr", dtype=dtype, random_state=seed)
    m.indices, m.indptr = m.indices.astype(index_dtype), m.indptr.astype(index_dtype)
    return m


# ---- conversions ---------------------------------------------------------------------------------
def test_dense_round_trip_shares_memory():
    a = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    x = so.array(a)
    x = so.from_dlpack(a)  # shares a
    t = st.to_torch(x)
    assert t.layout == torch.strided and t.dtype == torch.float32
    assert np.shares_memory(t.numpy(), a)
    back = st.from_torch(t)
    assert back.stype == "default" and np.shares_memory(back.data, a)
    t[0, 0] = 100.0
    assert a[0, 0] == 100.0


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_csr_round_trip_shares_memory_and_keeps_index_dtype(index_dtype):
    m = _csr(index_dtype=index_dtype)
    x = so.csr_matrix(m)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # read-only index views cross without torch's warning
        t = st.to_torch(x)
    assert t.layout == torch.sparse_csr
    assert t.crow_indices().dtype == t.col_indices().dtype == torch.from_numpy(np.zeros(1, index_dtype)).dtype
    assert t.values().data_ptr() == x.data.ctypes.data
    assert t.col_indices().data_ptr() == x.indices.ctypes.data
    assert t.crow_indices().data_ptr() == x.indptr.ctypes.data
    np.testing.assert_array_equal(t.to_dense().numpy(), m.toarray())
    back = st.from_torch(t)
    assert back.stype == "csr" and back.indices.dtype == index_dtype
    assert np.shares_memory(back.data, x.data) and np.shares_memory(back.indices, x.indices)
    np.testing.assert_array_equal(back.asnumpy(), m.toarray())


def test_row_sparse_round_trip_is_a_coalesced_hybrid_coo():
    dense = np.zeros((6, 3))
    dense[[1, 4]] = [[1.0, 2, 3], [4, 5, 6]]
    r = so.array(dense).tostype("row_sparse")  # int64 indices: zero-copy both ways
    t = st.to_torch(r)
    assert t.layout == torch.sparse_coo and t.sparse_dim() == 1 and t.dense_dim() == 1 and t.is_coalesced()
    assert t._values().data_ptr() == r.data.ctypes.data and t._indices().data_ptr() == r.indices.ctypes.data
    np.testing.assert_array_equal(t.to_dense().numpy(), dense)
    back = st.from_torch(t)
    assert back.stype == "row_sparse" and np.shares_memory(back.data, r.data)
    np.testing.assert_array_equal(back.asnumpy(), dense)


def test_row_sparse_with_int32_indices_casts_only_the_indices():
    r = so.row_sparse_array((np.ones((2, 3)), np.array([0, 3], np.int32)), shape=(5, 3))
    t = st.to_torch(r)
    assert t._indices().dtype == torch.int64  # torch's COO indices: the one documented copy
    assert t._values().data_ptr() == r.data.ctypes.data
    np.testing.assert_array_equal(t.to_dense().numpy(), r.asnumpy())


def test_embedding_sparse_gradient_converts_to_row_sparse():
    emb = torch.nn.Embedding(10, 4, sparse=True)
    emb(torch.tensor([[1, 7, 1]])).sum().backward()
    x = st.from_torch(emb.weight.grad)  # uncoalesced (1 appears twice): coalesced, a copy
    assert x.stype == "row_sparse"
    np.testing.assert_array_equal(x.indices, [1, 7])
    np.testing.assert_allclose(x.asnumpy(), emb.weight.grad.to_dense().numpy())


def test_a_non_contiguous_tensor_is_shared_as_laid_out():
    """As from_dlpack: a transposed tensor's memory is shared (a write shows in the tensor,
    operators read it as it is laid out), and an expanded one refuses writes."""
    t = torch.arange(12.0).reshape(3, 4).t()
    x = st.from_torch(t)
    np.testing.assert_array_equal(x.asnumpy(), t.numpy())
    np.testing.assert_allclose(so.exp(x).asnumpy(), np.exp(t.numpy().astype(np.float64)), rtol=1e-6)
    x[:] = 1.0
    assert float(t.sum()) == 12.0
    e = torch.ones(1, 3).expand(4, 3)
    with pytest.raises(ValueError, match="entries share memory"):
        st.from_torch(e)[:] = 2.0
    np.testing.assert_array_equal(e.numpy(), 1.0)


@pytest.mark.parametrize("make, layout", [
    (lambda d: d.to_sparse_csc(), "sparse_csc"),
    (lambda d: d.to_sparse_bsr((2, 2)), "sparse_bsr"),
    (lambda d: d.to_sparse(), "sparse_coo"),  # 2-d COO: sparse_dim=2
])
def test_other_layouts_are_refused_naming_the_layout_and_the_way_out(make, layout):
    d = torch.eye(4)
    with pytest.raises(TorchBridgeError, match=f"layout {layout}.*to_sparse_csr"):
        st.from_torch(make(d))


def test_unsupported_dtypes_are_refused_by_name():
    with pytest.raises(TorchBridgeError, match="bfloat16"):
        st.from_torch(torch.ones(2, dtype=torch.bfloat16))


@pytest.mark.parametrize("dtype", [torch.int16, torch.int8, torch.uint8, torch.bool, torch.complex64, torch.bfloat16])
def test_ops_refuse_dtypes_they_do_not_hold(dtype):
    """NumPy would compute another dtype's answer (sigmoid of int16 as int16 zeros, a uint8
    sum wrapping around): ops refuse the tensor as ``from_torch`` does, naming op, argument
    and dtype (the one wording of ``dtypes.not_held``, with torch's dtype names), and the
    next call works."""
    t = torch.ones(3, dtype=dtype)
    for call in (lambda: st.ops.sigmoid(t), lambda: st.ops.sum(t), lambda: st.ops.elemwise_add(t, t)):
        name = re.escape(str(dtype))  # torch.int16: the torch face names dtypes as torch does
        with pytest.raises(BridgeError, match=rf"sparse_ops.torch.ops.\w+: argument '\w+': arrays of dtype {name} ") as err:
            call()
        assert isinstance(err.value.__cause__, TorchBridgeError)
    x = torch.tensor([-1.0, 0.0, 3.0])
    torch.testing.assert_close(st.ops.sigmoid(x), torch.sigmoid(x))


def test_torch_sparse_components_are_validated():
    bad = torch.sparse_csr_tensor(torch.tensor([0, 2, 1]), torch.tensor([0, 5, 1]), torch.ones(3), (2, 3),
                                  check_invariants=False)
    with pytest.raises(so.SparseFormatError, match="indptr must end at nnz"):  # an O(1) check: at once
        st.from_torch(bad)
    with pytest.raises(BridgeError, match="argument 'lhs'") as err:
        st.ops.dot(bad, torch.ones(3, 2))
    assert isinstance(err.value.__cause__, so.SparseFormatError)


@pytest.mark.parametrize("make, broken", [
    (lambda: torch.sparse_csr_tensor(torch.tensor([0, 2, 3]), torch.tensor([0, 5, 1]), torch.ones(3), (2, 3),
                                     check_invariants=False), "column index 5 at position 1 is out of range"),
    (lambda: torch.sparse_csr_tensor(torch.tensor([0, 2, 3]), torch.tensor([2, 1, 0]), torch.ones(3), (2, 3),
                                     check_invariants=False), "unsorted index 1 after 2 in row 0"),
    (lambda: torch.sparse_coo_tensor(torch.tensor([[3, 1]]), torch.ones(2, 2), (4, 2), is_coalesced=True,
                                     check_invariants=False), "unsorted index 1 after 3"),
    (lambda: torch.sparse_coo_tensor(torch.tensor([[1, 9]]), torch.ones(2, 2), (4, 2), is_coalesced=True,
                                     check_invariants=False), "row index 9 at position 1 is out of range"),
])
def test_from_torch_defers_the_full_check_to_the_first_use(make, broken):
    """from_torch is O(1): index ranges and order are checked on the container's first
    use, which every operator and conversion makes before reading the components."""
    x = st.from_torch(make())  # nothing read yet: no O(nnz) pass here
    for use in (lambda: so.sum(x), lambda: x.asnumpy(), lambda: st.to_torch(x), lambda: x.tostype("default")):
        with pytest.raises(so.SparseFormatError, match=f"{broken}.*first use.*from_torch"):
            use()
    with pytest.raises(so.SparseFormatError, match=broken):
        x.check_format()


def test_from_torch_of_valid_sparse_tensors_is_trusted_after_its_first_use():
    m = _csr()
    x = st.from_torch(st.to_torch(so.csr_matrix(m)))
    np.testing.assert_allclose(so.sum(x, axis=1).asnumpy(), np.asarray(m.sum(axis=1)).ravel())
    assert repr(x).startswith("<CSRNDArray") and "not yet validated" not in repr(x)
    rows = torch.sparse_coo_tensor(torch.tensor([[0, 2]]), torch.ones(2, 3), (4, 3), is_coalesced=True)
    np.testing.assert_array_equal(st.from_torch(rows).asnumpy(), rows.to_dense().numpy())


# ---- bridged ops -------------------------------------------------------------------------------------
def test_dense_op_matches_torch_and_uses_one_implementation():
    x, y = torch.randn(4, 4), torch.randn(4, 4)
    ref = x * y
    torch.testing.assert_close(st.ops.elemwise_mul(x, y), ref)  # first call: through torch.ops
    torch.testing.assert_close(st.ops.elemwise_mul(x, y), ref)  # then the dense fast path
    torch.testing.assert_close(torch.ops.sparse_ops.elemwise_mul(x, y), ref)
    torch.testing.assert_close(st.op("relu")(x), torch.relu(x))


def test_csr_op_returns_inferred_storage_types():
    m = _csr()
    a = st.to_torch(so.csr_matrix(m))
    w = torch.randn(5, 3, dtype=torch.float64)
    y = st.ops.dot(a, w)
    assert y.layout == torch.strided
    np.testing.assert_allclose(y.numpy(), m @ w.numpy(), rtol=1e-12)
    g = torch.randn(6, 3, dtype=torch.float64)
    r = st.ops.dot(a, g, transpose_a=True)  # csr.T @ dense -> row_sparse
    assert r.layout == torch.sparse_coo and r.sparse_dim() == 1 and r.is_coalesced()
    np.testing.assert_allclose(r.to_dense().numpy(), m.T @ g.numpy(), rtol=1e-12)
    s = st.ops._mul_scalar(a, scalar=2.0)  # csr * scalar -> csr, same structure, indices not aliased
    assert s.layout == torch.sparse_csr
    np.testing.assert_allclose(s.to_dense().numpy(), 2 * m.toarray())
    assert s.col_indices().data_ptr() != a.col_indices().data_ptr()


def test_multiple_outputs_come_back_as_a_tuple():
    x = torch.arange(12.0).reshape(4, 3)
    parts = st.ops.split(x, num_outputs=2, axis=0)
    assert isinstance(parts, tuple) and len(parts) == 2
    torch.testing.assert_close(parts[1], x[2:])


def test_cookbook_ops_are_bridged():
    import sparse_ops_cookbook  # noqa: F401

    m = _csr(8, 8, seed=3)
    x = torch.randn(8, 4, dtype=torch.float64)
    y = st.ops.csr_spmm(st.to_torch(so.csr_matrix(m)), x)
    np.testing.assert_allclose(y.numpy(), m @ x.numpy(), rtol=1e-12)


def test_ops_registered_later_are_bridged_and_replacements_followed(isolated):
    @so.register("_torch_bridge_twice")
    class Twice(so.Op):
        @so.kernel()
        def dense(self, ctx, x, y):
            np.multiply(x, 2, out=y)

        def gradient(self, out_grads, inputs, outputs):
            return [so.ops._mul_scalar(out_grads[0], scalar=2.0)]

    x = torch.ones(3)
    torch.testing.assert_close(st.ops._torch_bridge_twice(x), 2 * x)
    assert "_torch_bridge_twice" in dir(st.ops)

    @so.register("_torch_bridge_twice", replace=True)
    class Thrice(so.Op):
        @so.kernel()
        def dense(self, ctx, x, y):
            np.multiply(x, 3, out=y)

    torch.testing.assert_close(st.ops._torch_bridge_twice(x), 3 * x)
    torch.testing.assert_close(torch.ops.sparse_ops._torch_bridge_twice(x), 3 * x)
    so.registry.unregister("_torch_bridge_twice")
    with pytest.raises(AttributeError, match="no op '_torch_bridge_twice'"):
        st.ops._torch_bridge_twice


def test_mxnet_form_custom_op_is_bridged(isolated):
    @so.register("_torch_bridge_mx_square")
    class SquareProp(so.CustomOpProp):
        def list_arguments(self):
            return ["x"]

        def create_operator(self, ctx, shapes, dtypes):
            return Square()

    class Square(so.CustomOp):
        def forward(self, is_train, req, in_data, out_data, aux):
            self.assign(out_data[0], req[0], in_data[0] * in_data[0])

        def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
            self.assign(in_grad[0], req[0], 2 * in_data[0] * out_grad[0])

    x = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
    y = st.ops._torch_bridge_mx_square(x)
    torch.testing.assert_close(y, x.detach() ** 2)
    y.sum().backward()
    torch.testing.assert_close(x.grad, 2 * x.detach())
    # its backward is imperative code: no second derivative, refused in torch's terms
    (g,) = torch.autograd.grad(st.ops._torch_bridge_mx_square(x).sum(), x, create_graph=True)
    torch.testing.assert_close(g, 2 * x.detach())
    with pytest.raises(BridgeError, match=r"sparse_ops\.torch\.ops\._torch_bridge_mx_square: the derivative of "
                                          r"the gradient rule.*CustomOp's backward") as err:
        torch.autograd.grad(g.sum(), x)
    assert isinstance(err.value.__cause__, so.OperatorError)


# ---- errors -------------------------------------------------------------------------------------------
def test_errors_name_the_op_and_argument_and_keep_the_cause():
    x32, x64 = torch.ones(2, 2), torch.ones(2, 2, dtype=torch.float64)
    with pytest.raises(BridgeError, match="add_n.*float64.*float32") as err:  # dtype mismatch
        st.ops.add_n(x32, x64)
    assert isinstance(err.value.__cause__, so.OperatorError)
    with pytest.raises(BridgeError, match="argument 'rhs'.*sparse_csc"):
        st.ops.elemwise_add(x32, torch.eye(2).to_sparse_csc())
    with pytest.raises(BridgeError, match="argument 'rhs' is on meta"):
        st.ops.elemwise_add(x32, torch.ones(2, 2, device="meta"))
    with pytest.raises(BridgeError, match="dot") as err:  # the op's own refusal: shapes
        st.ops.dot(torch.ones(2, 3), torch.ones(2, 3))
    assert isinstance(err.value.__cause__, so.OperatorError)
    with pytest.raises(BridgeError, match="unknown parameter"):
        st.ops.relu(x32, alpha=2)
    with pytest.raises(BridgeError, match="takes 2 tensor input"):
        st.ops.elemwise_add(x32)
    with pytest.raises(BridgeError, match="argument 'lhs'.*list"):
        st.ops.elemwise_add([1.0], x32)


def test_after_an_error_autograd_keeps_working():
    w = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    with pytest.raises(BridgeError):
        st.ops.add_n(w, torch.ones(3, 3, dtype=torch.float32))
    with pytest.raises(BridgeError):
        st.ops.dot(w, torch.ones(4, 2, dtype=torch.float64))
    st.ops.sigmoid(w).sum().backward()  # torch's autograd
    s = torch.sigmoid(w.detach())
    torch.testing.assert_close(w.grad, s * (1 - s))
    v = so.array(np.ones(3))  # and ours
    v.attach_grad()
    with so.autograd.record():
        z = so.sum(so.square(v))
    z.backward()
    np.testing.assert_array_equal(v.grad.asnumpy(), [2.0, 2.0, 2.0])


def test_the_test_command_installs_torch_from_the_constraints_file():
    """README's second Quick-start line and .ci/run run the same command, which pins the test
    run's torch (ci/constraints.txt) while the torch extra stays unpinned."""
    import pathlib
    import tomllib

    root = pathlib.Path(__file__).resolve().parent.parent
    readme_line = [ln for ln in (root / "README.md").read_text().splitlines() if "python -m pytest -q" in ln][0]
    assert readme_line in (root / ".ci" / "run").read_text()
    assert "-c ci/constraints.txt" in readme_line
    pins = [ln for ln in (root / "ci" / "constraints.txt").read_text().splitlines() if ln and not ln.startswith("#")]
    assert [p for p in pins if p.startswith("torch")] == ["torch==2.13.0"]
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["torch"] == ["torch>=2.4"] and "torch>=2.4" in extras["dev"]
