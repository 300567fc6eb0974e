"""Kernel-first operators as a plugin author writes them: plain numba kernels, declarative
rules, a backward op with its own storage rule. The csr and row_sparse transposes follow
MXNet's lib_custom_op example; a row-scaling op shows parameters, dense and sparse
kernels and the fast path."""
import inspect
import threading
import warnings

import numba
import numpy as np
import pytest
import scipy.sparse as sp

import sparse_ops as so
from sparse_ops import autograd as ag
from sparse_ops.sdk.testing import check_numeric_gradient, opcheck


# ---- kernels: plain numba, no SDK types inside ------------------------------------------------
@numba.njit(cache=True)
def _csr_transpose(n_cols, indptr, indices, data, out_indptr, out_indices, out_data):
    counts = np.zeros(n_cols + 1, dtype=out_indptr.dtype)
    for j in range(indices.shape[0]):
        counts[indices[j] + 1] += 1
    for c in range(n_cols):
        counts[c + 1] += counts[c]
    out_indptr[:] = counts
    for r in range(indptr.shape[0] - 1):
        for j in range(indptr[r], indptr[r + 1]):
            c = indices[j]
            p = counts[c]
            out_indices[p] = r
            out_data[p] = data[j]
            counts[c] = p + 1


@numba.njit(parallel=True, cache=True)
def _scale_rows(indptr, data, scale, out):
    for r in numba.prange(indptr.shape[0] - 1):
        for j in range(indptr[r], indptr[r + 1]):
            out[j] = data[j] * scale[r]


# ---- operators ------------------------------------------------------------------------------
@so.register("my_transpose_csr", replace=True)
class TransposeCSR(so.Op):
    """The transpose of a 2-d array; csr stays csr (MXNet lib_custom_op's transposecsr)."""

    arguments = ("data",)
    backward_needs_inputs = ()

    def infer_shape(self, data):
        if len(data) != 2:
            raise ValueError(f"data must be 2-d, got shape {data}")
        return [data[::-1]]

    def infer_storage_type(self, data):
        return [data if data == "csr" else "default"]

    @so.kernel(device="cpu", stypes=("csr",))
    def csr(self, ctx, x, y):
        out_data, out_indices, out_indptr = ctx.alloc_csr(y, x.nnz, index_dtype=x.indices.dtype)
        _csr_transpose(x.shape[1], x.indptr, x.indices, x.data, out_indptr, out_indices, out_data)

    @so.kernel(device=("cpu", "gpu"))
    def dense(self, ctx, x, y):
        y[...] = x.T

    def gradient(self, out_grads, inputs, outputs):
        return [so.ops.my_transpose_csr(out_grads[0])]


@so.register("my_transpose_rsp", replace=True)
class TransposeRowSparse(so.Op):
    """The transpose of a 2-d row_sparse array as row_sparse (lib_custom_op's transposerowsp):
    row j of the result holds column j of the stored rows."""

    backward_needs_inputs = ()

    def infer_shape(self, data):
        return [data[::-1]]

    def infer_storage_type(self, data):
        return [data if data == "row_sparse" else "default"]

    @so.kernel(device=("cpu", "gpu"), stypes=("row_sparse",))
    def rsp(self, ctx, x, y):
        xp = ctx.xp
        keep = xp.nonzero((x.data != 0).any(axis=0))[0]
        values = xp.zeros((keep.shape[0], x.shape[0]), dtype=x.dtype)
        values[:, x.indices] = x.data[:, keep].T
        ctx.set_row_sparse(y, values, keep.astype(np.int64))

    @so.kernel(device=("cpu", "gpu"))
    def dense(self, ctx, x, y):
        y[...] = x.T

    def gradient(self, out_grads, inputs, outputs):
        return [so.ops.my_transpose_rsp(out_grads[0])]


@so.register("my_scale_rows", replace=True)
class ScaleRows(so.Op):
    """y[r, :] = alpha * scale[r] * x[r, :], keeping x's storage type."""

    arguments = ("x", "scale")
    alpha = so.Param(float, 1.0, doc="an extra factor")
    backward_needs_inputs = ("x", "scale")

    def infer_shape(self, x, scale):
        if len(x) != 2 or scale != x[:1]:
            raise ValueError(f"scale must have shape ({x[0]},) for x of shape {x}, got {scale}")
        return [x]

    def infer_type(self, x, scale):
        return [x]

    def infer_storage_type(self, x, scale):
        return [x if x == "csr" else "default"]

    @so.kernel(device="cpu", stypes=("csr", "default"))
    def csr(self, ctx, x, scale, y):
        data = ctx.alloc_like(y, x)  # same structure as x (shared), fresh values
        _scale_rows(x.indptr, x.data, (scale.data * self.alpha).astype(x.dtype), data)

    @so.kernel(device=("cpu", "gpu"))
    def dense(self, ctx, x, scale, y):
        ctx.xp.multiply(x, (scale * self.alpha)[:, None], out=y, casting="unsafe")

    def gradient(self, out_grads, inputs, outputs):
        g = out_grads[0]
        x, scale = inputs
        # d/dscale[r] = alpha * sum_c g[r, c] * x[r, c]: elemwise_mul keeps x's csr structure
        return [so.ops.my_scale_rows(g, scale, alpha=self.alpha), so.sum(so.elemwise_mul(g, x), axis=1) * self.alpha]


def random_csr(rows, cols, density, seed, index_dtype=np.int64):
    m = sp.random(rows, cols, density=density, format="csr", random_state=seed)
    return so.csr_matrix((m.data, m.indices.astype(index_dtype), m.indptr.astype(index_dtype)), shape=m.shape)


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_csr_transpose_matches_scipy_and_keeps_index_dtype(index_dtype):
    x = random_csr(50, 30, 0.1, 0, index_dtype)
    y = so.ops.my_transpose_csr(x)
    assert y.stype == "csr" and y.shape == (30, 50) and y.aux_types == x.aux_types
    y.check_format()
    np.testing.assert_array_equal(y.asnumpy(), x.asnumpy().T)
    assert so.explain("my_transpose_csr", x)["dispatch_mode"] == "fcompute_ex"


def test_row_sparse_transpose():
    dense = np.zeros((6, 4))
    dense[1] = [1, 0, 2, 0]
    dense[4] = [0, 0, 3, 0]
    y = so.ops.my_transpose_rsp(so.array(dense).tostype("row_sparse"))
    assert y.stype == "row_sparse" and y.indices.tolist() == [0, 2]
    np.testing.assert_array_equal(y.asnumpy(), dense.T)


def test_opcheck_runs_every_check_on_the_examples():
    x = random_csr(20, 12, 0.2, 1)
    assert opcheck("my_transpose_csr", [[x], [x.tostype("default")], [so.zeros((3, 5), stype="csr")]]) == 3
    r = x.tostype("row_sparse")
    assert opcheck("my_transpose_rsp", [[r], [r.tostype("default")]]) == 2
    scale = so.array(np.linspace(0.5, 2.0, 20))
    assert opcheck("my_scale_rows", [([x, scale], {"alpha": 3.0}), ([x.tostype("default"), scale], {})]) == 2


def test_scale_rows_gives_scale_its_gradient():
    """the author's guide's scale_rows (docs/author/kernel-first.md) (this ScaleRows) once returned None for scale: scale.grad
    came out all zeros. Its gradient is alpha * sum_c g[r, c] x[r, c]."""
    x = random_csr(6, 4, 0.5, 7)
    scale = so.array(np.linspace(-1.0, 2.0, 6))
    scale.attach_grad()
    with ag.record():
        y = so.ops.my_scale_rows(x, scale, alpha=3.0)
    y.backward()
    np.testing.assert_allclose(scale.grad.asnumpy(), 3.0 * x.asnumpy().sum(axis=1))


def test_opcheck_fails_the_old_scale_rows_with_a_none_gradient_for_scale():
    @so.register("my_scale_rows_none", replace=True)
    class OldScaleRows(ScaleRows):
        def gradient(self, out_grads, inputs, outputs):  # the README's old gradient
            return [so.ops.my_scale_rows_none(out_grads[0], inputs[1], alpha=self.alpha), None]

    x = random_csr(20, 12, 0.2, 1)
    scale = so.array(np.linspace(0.5, 2.0, 20))
    with pytest.raises(AssertionError, match=r"my_scale_rows_none sample 0 \(csr, default; \{'alpha': 3.0\}\): "
                                             r"gradient: gradient of input 1 disagrees with finite differences at "
                                             r"index \(\d+,\): analytic 0, numeric -?[\d.]+ \(the gradient rule "
                                             r"returned None, i.e. zero\)"):
        opcheck("my_scale_rows_none", [([x, scale], {"alpha": 3.0})])


def test_opcheck_catches_a_kernel_that_disagrees_with_the_dense_path():
    @so.register("my_bad_scale", replace=True)
    class BadScale(ScaleRows):
        @so.kernel(device="cpu", stypes=("csr", "default"))
        def csr(self, ctx, x, scale, y):
            data = ctx.alloc_like(y, x)
            data[...] = x.data  # forgets to scale

    x = random_csr(10, 5, 0.5, 2)
    with pytest.raises(AssertionError, match="my_bad_scale sample 0.*storage-aware kernel and dense path disagree"):
        opcheck("my_bad_scale", [[x, so.array(np.full(10, 2.0))]])


def test_gradients_flow_through_kernel_first_ops_with_sparse_storage():
    x = random_csr(8, 6, 0.4, 3)
    x.attach_grad()
    scale = so.array(np.arange(1.0, 9.0))
    with ag.record():
        y = so.ops.my_scale_rows(x, scale, alpha=2.0)
        z = so.ops.my_transpose_csr(y)
    assert z.stype == "csr"
    z.backward()
    assert x.grad.stype == "csr"  # the buffer keeps x's storage type: the gradient of its stored values
    stored = x.asnumpy() != 0
    np.testing.assert_allclose(x.grad.asnumpy(), np.where(stored, 2.0 * np.arange(1.0, 9.0)[:, None], 0.0))
    with ag.record():  # a csr head gradient keeps every step sparse
        y = so.ops.my_transpose_csr(so.ops.my_scale_rows(x, scale))
    y.backward(so.ops.my_transpose_csr(x))
    assert x.grad.stype == "csr"
    np.testing.assert_allclose(x.grad.asnumpy(), x.asnumpy() * np.arange(1.0, 9.0)[:, None])
    check_numeric_gradient(lambda a: so.ops.my_transpose_csr(so.ops.my_scale_rows(a, scale)), [x])


def test_generated_function_signature_and_docs():
    sig = inspect.signature(so.ops.my_scale_rows)
    assert list(sig.parameters)[:3] == ["x", "scale", "alpha"]
    assert sig.parameters["alpha"].default == 1.0
    assert "y[r, :] = alpha * scale[r]" in so.ops.my_scale_rows.__doc__
    np.testing.assert_allclose(so.Custom(so.ones((2, 2)), so.ones(2), op_type="my_scale_rows", alpha=3).asnumpy(), 3)


def test_errors_name_the_op_and_argument():
    x = random_csr(4, 3, 0.5, 4)
    with pytest.raises(so.OperatorError, match="my_scale_rows.*scale must have shape \\(4,\\)"):
        so.ops.my_scale_rows(x, so.ones(3, dtype="float64"))
    with pytest.raises(so.OperatorError, match="unknown parameter"):
        so.ops.my_scale_rows(x, so.ones(4, dtype="float64"), beta=1)


def test_parallel_numba_kernel_from_eight_threads():
    x = random_csr(400, 200, 0.05, 5)
    scale = so.array(np.linspace(1, 2, 400))
    expected = so.ops.my_scale_rows(x, scale).asnumpy()
    errors = []

    def work():
        try:
            for _ in range(50):
                np.testing.assert_allclose(so.ops.my_scale_rows(x, scale).asnumpy(), expected)
        except Exception as exc:  # pragma: no cover
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_fallback_for_storage_without_kernel_warns_and_is_right():
    r = random_csr(6, 4, 0.5, 6).tostype("row_sparse")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = so.ops.my_scale_rows(r, so.array(np.full(6, 2.0)))
    assert y.stype == "default"
    np.testing.assert_allclose(y.asnumpy(), 2 * r.asnumpy())
    assert any(issubclass(w.category, so.StorageFallbackWarning) for w in caught)
