"""Any batch size under compile, JAX half (issue 38, item 2): one program exported with
``jax.export`` for a symbolic batch (and stored-count) dimension runs at every size, for
dense built-ins lowered to ``jnp``, for csr @ dense FFI calls (``dot``, the cookbook's
``csr_spmm`` and ``embedding_bag``; the native cfunc and the Python handler) and their
gradients, and for a row_sparse result; ``jax.jit`` of the same functions (retraced per
shape, JAX's semantics) gives the same values; what cannot be symbolic is refused naming
the op."""
import re

import numpy as np
import pytest
import scipy.sparse as sp

jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402
from jax import export  # noqa: E402

import sparse_ops.jax as soj  # noqa: E402
import sparse_ops_cookbook  # noqa: E402,F401  (registers csr_spmm, embedding_bag)
from sparse_ops.jax import bridge, lowering, native  # noqa: E402
from sparse_ops.jax import SymbolicShapeError  # noqa: E402

o = soj.ops
S = jax.ShapeDtypeStruct
SIZES = (1, 2, 3, 5, 7, 8, 13, 16, 31, 64, 100, 257)  # twelve batch sizes, one exported program each test
VOCAB, DIM, HIDDEN = 50, 8, 4
RTOL, ATOL = 2e-5, 2e-5

_rng = np.random.default_rng(38)
W = _rng.standard_normal((HIDDEN, DIM)).astype(np.float32)      # FullyConnected weight (num_hidden, features)
BIAS = _rng.standard_normal(HIDDEN).astype(np.float32)
TABLE = _rng.standard_normal((VOCAB, DIM)).astype(np.float32)   # the dense operand of csr @ dense


def _export(f, *specs):
    """``jax.export`` of ``jax.jit(f)`` at ``specs``, with the safety check of each FFI target
    the program calls disabled (the README's recipe: it runs in this process only)."""
    jf = jax.jit(f)
    targets = sorted(set(re.findall(r"custom_call @(sparse_ops_\w+)", jf.trace(*specs).lower().as_text())))
    checks = [export.DisabledSafetyCheck.custom_call(t) for t in targets]
    return export.export(jf, disabled_checks=checks)(*specs), targets


def _batch(n, seed=0):
    return np.random.default_rng(seed + n).standard_normal((n, DIM)).astype(np.float32)


def _bags(n, seed=0):
    """A csr (n, VOCAB) with at least one stored value (a symbolic count is >= 1, JAX's rule)
    and an empty row where there are several."""
    m = sp.random(n, VOCAB, density=0.08, format="csr", dtype=np.float32, random_state=seed + n).tolil()
    m[n - 1, (7 * n) % VOCAB] = 1.5
    if n > 2:
        m[0, :] = 0
    m = m.tocsr()
    m.sort_indices()
    return m


def _parts(m):
    return (jnp.asarray(m.data), jnp.asarray(m.indices.astype(np.int32)), jnp.asarray(m.indptr.astype(np.int32)))


def _csr(data, indices, indptr):
    """A components tuple whose row count is read off indptr: symbolic when indptr's is."""
    return (data, indices, indptr, (indptr.shape[0] - 1, VOCAB))


def _csr_specs():
    nnz, rows = export.symbolic_shape("nnz, rows")
    return (S((nnz,), jnp.float32), S((nnz,), jnp.int32), S((rows + 1,), jnp.int32)), rows


# ---- dense built-ins lowered to jnp ------------------------------------------------------------------
def dense_chain(x):
    """Elementwise, FullyConnected, a reduction over the features broadcast back, an
    activation, softmax; and reductions over the symbolic batch axis."""
    h = o.relu(o.elemwise_mul(x, x))
    h = o.FullyConnected(h, jnp.asarray(W), jnp.asarray(BIAS), num_hidden=HIDDEN)
    h = o.broadcast_sub(h, o.mean(h, axis=1, keepdims=True))
    p = o.softmax(o.LeakyReLU(h, act_type="leaky", slope=0.1))
    return p, o.mean(o.dot(x, jnp.asarray(W), transpose_b=True), axis=0), o.sum(o.tanh(x))


def _dense_chain_ref(x):
    h = np.maximum(x * x, 0) @ W.T + BIAS
    h = h - h.mean(axis=1, keepdims=True)
    h = np.where(h > 0, h, 0.1 * h)
    e = np.exp(h - h.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True), (x @ W.T).mean(axis=0), np.tanh(x).sum()


def dense_loss(x, w):
    """sum over rows of mean(tanh(x @ w.T + bias) ** 2): for its gradient in w."""
    return o.sum(o.mean(o.square(o.tanh(o.FullyConnected(x, w, jnp.asarray(BIAS), num_hidden=HIDDEN))), axis=1))


def _dense_loss_grad_ref(x, w):
    t = np.tanh(x @ w.T + BIAS)
    dy = 2 * t * (1 - t * t) / HIDDEN
    return dy.T @ x


def _check(got, want):
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(np.asarray(g), w, rtol=RTOL, atol=ATOL)


def _run_everywhere(f, specs, inputs_at, reference, lowered=True):
    """Export ``f`` once for ``specs`` and call it at every size of ``SIZES``; then
    ``jax.jit(f)`` at the same sizes. Both equal ``reference``. The exported program is
    never traced again (no bridged call traced while it runs)."""
    exported, targets = _export(f, *specs)
    assert ("custom_call @sparse_ops" not in exported.mlir_module()) == lowered
    traced = bridge.TRACES[0]
    for n in SIZES:
        args = inputs_at(n)
        _check(exported.call(*args), reference(*args))
    assert bridge.TRACES[0] == traced  # one program for every size
    jf = jax.jit(f)
    for n in SIZES:
        args = inputs_at(n)
        _check(jf(*args), reference(*args))
    return exported, targets


def test_dense_chain_exports_once_for_every_batch_size():
    b, = export.symbolic_shape("b")
    exported, targets = _run_everywhere(dense_chain, [S((b, DIM), jnp.float32)], lambda n: (jnp.asarray(_batch(n)),),
                                        lambda x: _dense_chain_ref(np.asarray(x)))
    assert not targets and "b" in str(exported.in_avals[0].shape)


def test_dense_gradient_exports_once_for_every_batch_size():
    b, = export.symbolic_shape("b")
    _run_everywhere(jax.grad(dense_loss, argnums=1), [S((b, DIM), jnp.float32), S((HIDDEN, DIM), jnp.float32)],
                    lambda n: (jnp.asarray(_batch(n)), jnp.asarray(W)),
                    lambda x, w: _dense_loss_grad_ref(np.asarray(x), np.asarray(w)))


def test_dense_chain_through_the_ffi_handler_takes_symbolic_sizes():
    """lowering.disabled(): every dense op an FFI call whose handler gets the sizes it runs at."""
    b, = export.symbolic_shape("b")
    lowering.disabled(True)
    try:
        _, targets = _run_everywhere(dense_chain, [S((b, DIM), jnp.float32)], lambda n: (jnp.asarray(_batch(n)),),
                                     lambda x: _dense_chain_ref(np.asarray(x)), lowered=False)
    finally:
        lowering.disabled(False)
    assert "sparse_ops_softmax" in targets and "sparse_ops_FullyConnected" in targets


# ---- csr @ dense FFI calls ------------------------------------------------------------------------------
@pytest.mark.parametrize("native_path", [True, False], ids=["native-cfunc", "python-handler"])
def test_dot_csr_dense_exports_once_for_every_batch_and_nnz(native_path):
    specs, _ = _csr_specs()
    f = lambda d, i, p, w: o.dot(_csr(d, i, p), w)  # noqa: E731
    native.disabled(not native_path)
    try:
        _, targets = _run_everywhere(f, [*specs, S((VOCAB, DIM), jnp.float32)],
                                     lambda n: (*_parts(_bags(n)), jnp.asarray(TABLE)),
                                     lambda d, i, p, w: _bags(len(p) - 1) @ TABLE, lowered=False)
    finally:
        native.disabled(False)
    assert any(t.startswith("sparse_ops_native_csr_dense") for t in targets) == native_path


def test_dot_csr_dense_gradient_exports_once():
    """jax.grad of a csr @ dense: the csr's values get one gradient per stored value, the
    dense operand A.T @ G (the op's gradient rule, an FFI call of the concrete sizes)."""
    specs, _ = _csr_specs()
    g = jax.grad(lambda d, i, p, w: o.sum(o.square(o.dot(_csr(d, i, p), w))), argnums=(0, 3))

    def ref(d, i, p, w):
        m = _bags(len(p) - 1)
        head = 2 * (m @ TABLE)
        return (head @ TABLE.T)[np.repeat(np.arange(m.shape[0]), np.diff(m.indptr)), m.indices], m.T @ head

    _, targets = _run_everywhere(g, [*specs, S((VOCAB, DIM), jnp.float32)],
                                 lambda n: (*_parts(_bags(n)), jnp.asarray(TABLE)), ref, lowered=False)
    assert "sparse_ops_dot_grad" in targets


def test_cookbook_csr_spmm_and_its_gradient_export_once():
    specs, _ = _csr_specs()
    f = lambda d, i, p, w: o.csr_spmm(_csr(d, i, p), w)  # noqa: E731
    inputs = lambda n: (*_parts(_bags(n, 5)), jnp.asarray(TABLE))  # noqa: E731
    _run_everywhere(f, [*specs, S((VOCAB, DIM), jnp.float32)], inputs, lambda d, i, p, w: _bags(len(p) - 1, 5) @ TABLE,
                    lowered=False)
    g = jax.grad(lambda d, i, p, w: o.sum(o.csr_spmm(_csr(d, i, p), w)), argnums=(0, 3))

    def ref(d, i, p, w):
        m = _bags(len(p) - 1, 5)
        return TABLE.sum(axis=1)[m.indices], m.T @ np.ones((m.shape[0], DIM), np.float32)

    _, targets = _run_everywhere(g, [*specs, S((VOCAB, DIM), jnp.float32)], inputs, ref, lowered=False)
    assert "sparse_ops_csr_spmm_grad" in targets


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_cookbook_embedding_bag_and_its_weight_gradient_export_once(mode):
    specs, _ = _csr_specs()
    inputs = lambda n: (*_parts(_bags(n, 9)), jnp.asarray(TABLE))  # noqa: E731

    def divisors(m):
        return np.maximum(np.diff(m.indptr), 1)[:, None] if mode == "mean" else 1

    def fwd_ref(d, i, p, w):
        m = _bags(len(p) - 1, 9)
        return (m @ TABLE) / divisors(m)

    f = lambda d, i, p, w: o.embedding_bag(_csr(d, i, p), w, mode=mode)  # noqa: E731
    _run_everywhere(f, [*specs, S((VOCAB, DIM), jnp.float32)], inputs, fwd_ref, lowered=False)
    cot = _rng.standard_normal(DIM).astype(np.float32)
    g = jax.grad(lambda d, i, p, w: o.sum(o.broadcast_mul(o.embedding_bag(_csr(d, i, p), w, mode=mode),
                                                         jnp.asarray(cot)[None, :])), argnums=3)

    def grad_ref(d, i, p, w):
        m = _bags(len(p) - 1, 9)
        return m.T @ (np.broadcast_to(cot, (m.shape[0], DIM)) / divisors(m))

    _, targets = _run_everywhere(g, [*specs, S((VOCAB, DIM), jnp.float32)], inputs, grad_ref, lowered=False)
    assert "sparse_ops_embedding_bag_grad" in targets


def test_row_sparse_result_of_symbolic_rows_reserves_its_static_rows():
    """dot(A.T, G) of a csr with symbolic rows and count: a row_sparse (VOCAB, DIM) whose
    capacity is its VOCAB rows (the rule reads the symbolic count)."""
    specs, rows = _csr_specs()
    f = lambda d, i, p, g: o.dot(_csr(d, i, p), g, transpose_a=True).todense()  # noqa: E731
    _run_everywhere(f, [*specs, S((rows, DIM), jnp.float32)],
                    lambda n: (*_parts(_bags(n, 3)), jnp.asarray(_batch(n))),
                    lambda d, i, p, g: _bags(len(p) - 1, 3).T @ np.asarray(g), lowered=False)


# ---- what cannot be symbolic: clear errors ---------------------------------------------------------------
def test_an_op_whose_shape_needs_a_concrete_size_is_refused_naming_it():
    b, = export.symbolic_shape("b")
    f = jax.jit(lambda x: o.slice_axis(o.relu(x), axis=0, begin=0, end=2))
    with pytest.raises(SymbolicShapeError, match=r"sparse_ops\.jax\.ops\.slice_axis: .*shape inference needs "
                                                 r"concrete sizes.*dimension\(s\) b are symbolic.*static sizes"):
        export.export(f)(S((b, DIM), jnp.float32))
    assert np.asarray(f(jnp.ones((5, DIM), jnp.float32))).shape == (2, DIM)  # static sizes: fine


def test_a_csr_result_whose_capacity_reads_a_symbolic_count_asks_for_max_nnz():
    specs, _ = _csr_specs()
    f = lambda d, i, p: o.square(_csr(d, i, p)).todense()  # noqa: E731
    with pytest.raises(SymbolicShapeError, match=r"sparse_ops\.jax\.ops\.square: the capacity of its sparse "
                                                 r"result 'output' \(csr\) comes from the rule 'nnz\(data\).*max_nnz="):
        _export(f, *specs)
    g = lambda d, i, p: o.square(_csr(d, i, p), max_nnz=64).todense()  # noqa: E731
    exported, _ = _export(g, *specs)
    for n in (1, 4, 9):
        m = _bags(n, 11)
        np.testing.assert_allclose(np.asarray(exported.call(*_parts(m))), m.multiply(m).toarray(), rtol=RTOL)
    big = _bags(257, 11)
    assert big.nnz > 64
    with pytest.raises(Exception, match=r"holds \d+ stored values but its capacity is 64 \(from max_nnz=\)"):
        jax.block_until_ready(exported.call(*_parts(big)))
