"""torch.ops.sparse_ops.<name>: torch.library operators on component tensors, checked with
torch.library.opcheck over every op's own samples, and compiled with
torch.compile(fullgraph=True)."""
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import torch

import sparse_ops as so
import sparse_ops.torch as st
import sparse_ops_cookbook  # noqa: F401
from sparse_ops import registry
from sparse_ops.dispatch import _infer
from sparse_ops.torch import CSRParts
from sparse_ops.torch.library import encode_params, overload_for

# Every check of opcheck runs on every op but the random ones. Ops whose gradient rule makes
# a row_sparse gradient of a dense input (dot, Embedding, retain, csr_spmm, embedding_bag,
# fm_interaction) are among them: by default the bridge densifies that gradient (torch's rule:
# a dense input gets a dense gradient unless its user asks), so test_aot_dispatch_dynamic's
# comparison of eager and compiled gradients holds for them too.
FULL = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


def _component_args(xs):
    flat, stypes = [], []
    for x in xs:
        stypes.append(x.stype)
        if x.stype == "default":
            flat.append(torch.from_numpy(x.asnumpy()))
        elif x.stype == "csr":
            flat += [torch.from_numpy(x.data.asnumpy()), torch.from_numpy(x.indices.asnumpy()),
                     torch.from_numpy(x.indptr.asnumpy()), list(x.shape)]
        else:
            flat += [torch.from_numpy(x.data.asnumpy()), torch.from_numpy(x.indices.asnumpy()), list(x.shape)]
    return flat, stypes


def _opcheck_cases():
    cases = []
    for d in sorted(registry.all_ops(), key=lambda d: d.name):
        make = getattr(d.cls, "samples", None)
        if not callable(make) or d.plugin not in (None, "cookbook"):
            continue
        smp = list(make())[0]
        cases.append((d.name, smp))
    return cases


OPCHECK_CASES = _opcheck_cases()


@pytest.mark.parametrize("name, sample", OPCHECK_CASES, ids=[c[0] for c in OPCHECK_CASES])
def test_torch_library_opcheck(name, sample):
    opdef = registry.get_op(name)
    xs, params = sample if isinstance(sample, tuple) else (sample, {})
    flat, stypes = _component_args(xs)
    inst = opdef.instance(params)
    out = tuple(_infer(opdef, inst, "storage_type", stypes, inst.output_count()))
    ov = overload_for(opdef, tuple(stypes), out)
    if opdef.differentiable:
        for t in flat:
            if isinstance(t, torch.Tensor) and t.dtype == torch.float64:
                t.requires_grad_(True)
    tests = FULL
    if "random" in opdef.resources:  # two runs draw different numbers: eager vs compiled differ
        tests = ("test_schema", "test_autograd_registration", "test_faketensor")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", so.StorageFallbackWarning)
        torch.library.opcheck(ov.torch_op, tuple(flat) + (encode_params(params),), test_utils=tests)


def test_opcheck_covers_every_op_with_samples():
    with_samples = {d.name for d in registry.all_ops() if callable(getattr(d.cls, "samples", None))
                    and d.plugin in (None, "cookbook")}
    assert {c[0] for c in OPCHECK_CASES} == with_samples
    assert len(with_samples) >= 90


def test_torch_ops_namespace_defines_ops_on_first_use():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 4, generator=gen)
    torch.testing.assert_close(torch.ops.sparse_ops.sigmoid(x), torch.sigmoid(x))
    torch.testing.assert_close(torch.ops.sparse_ops.sigmoid.default(x), torch.sigmoid(x))
    m = sp.random(4, 3, density=0.5, format="csr", dtype=np.float32, random_state=0)
    w = torch.randn(3, 2, generator=gen)
    out = torch.ops.sparse_ops.dot.cd_d(torch.from_numpy(m.data), torch.from_numpy(m.indices),
                                        torch.from_numpy(m.indptr), [4, 3], w)
    # float32 sums in another order than SciPy's: a few ulps of the largest term
    np.testing.assert_allclose(out.numpy(), m @ w.numpy(), rtol=1e-5, atol=1e-6)
    sq = torch.ops.sparse_ops._mul_scalar.c_c(torch.from_numpy(m.data), torch.from_numpy(m.indices),
                                               torch.from_numpy(m.indptr), [4, 3], encode_params({"scalar": 3.0}))
    assert len(sq) == 3 and sq[1].dtype == sq[2].dtype == torch.int64
    np.testing.assert_allclose(sq[0].numpy(), 3 * m.data)


def test_every_op_with_samples_is_in_torch_ops_before_any_call():
    """A fresh process: ``torch.ops.sparse_ops.<name>`` defines each op's overloads by name
    (kernels taking any storage type, ``"*"``, included: csr_sddmm's dense operands)."""
    import subprocess
    import sys

    code = (
        "import torch, sparse_ops as so, sparse_ops.torch, sparse_ops_cookbook\n"
        "from sparse_ops import registry\n"
        "names = [n for n in so.list_ops() if callable(getattr(registry.get_op(n).cls, 'samples', None))]\n"
        "missing = [n for n in names if not list(getattr(torch.ops.sparse_ops, n).overloads())]\n"
        "print(len(names), missing)\n"
        "print(sorted(torch.ops.sparse_ops.csr_sddmm.overloads()))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    count, overloads = out.stdout.strip().splitlines()
    assert count.endswith(" []") and int(count.split()[0]) >= 90, count
    assert "cdd_c" in overloads and "ccc_c" in overloads


class GCN(torch.nn.Module):
    """Two graph convolutions over a csr adjacency passed as components (Dynamo has no sparse
    tensors): dense parameters, csr_spmm, relu."""

    def __init__(self, n_in=8, hidden=16, n_out=4):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.w1 = torch.nn.Parameter(torch.randn(n_in, hidden, generator=g) * 0.3)
        self.w2 = torch.nn.Parameter(torch.randn(hidden, n_out, generator=g) * 0.3)

    def forward(self, values, indices, indptr, x):
        a = CSRParts(values, indices, indptr, (x.shape[0], x.shape[0]))
        h = st.ops.relu(st.ops.csr_spmm(a, x @ self.w1))
        return st.ops.csr_spmm(a, h @ self.w2)


def test_torch_compile_fullgraph_gcn_matches_eager_forward_and_backward():
    torch._dynamo.reset()
    A = sp.random(30, 30, density=0.15, format="csr", dtype=np.float32, random_state=1)
    parts = [torch.from_numpy(A.data), torch.from_numpy(A.indices).long(), torch.from_numpy(A.indptr).long()]
    x = torch.randn(30, 8, generator=torch.Generator().manual_seed(1))
    model = GCN()
    ref = model(*parts, x)
    ref.square().sum().backward()
    ref_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    compiled = torch.compile(model, fullgraph=True)  # fullgraph: any graph break is an error
    out = compiled(*parts, x)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    h = np.maximum(A @ (x.numpy() @ model.w1.detach().numpy()), 0)
    np.testing.assert_allclose(out.detach().numpy(), A @ (h @ model.w2.detach().numpy()), rtol=1e-4, atol=1e-5)
    out.square().sum().backward()
    for p, g in zip(model.parameters(), ref_grads):
        torch.testing.assert_close(p.grad, g, rtol=1e-5, atol=1e-6)
    explained = torch._dynamo.explain(model)(*parts, x)
    assert explained.graph_break_count == 0 and explained.graph_count == 1


def test_compiled_functions_take_new_shapes_as_symbolic_ones():
    """A second shape makes Dynamo retrace with symbolic sizes (automatic dynamic shapes), and
    dynamic=True starts that way: the bridge plans with them, sparse results get shapes of
    them, gradients follow, and a third or fourth shape compiles nothing more."""
    torch._dynamo.reset()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    class Layer(torch.nn.Module):  # built-in ops only (a plugin's shape rule may make sizes static)
        def __init__(self):
            super().__init__()
            g = torch.Generator().manual_seed(0)
            self.w1 = torch.nn.Parameter(torch.randn(8, 16, generator=g) * 0.3)
            self.w2 = torch.nn.Parameter(torch.randn(16, 4, generator=g) * 0.3)

        def forward(self, values, indices, indptr, x):
            a = CSRParts(values, indices, indptr, (x.shape[0], x.shape[0]))
            return st.ops.dot(a, st.ops.relu(st.ops.dot(a, x @ self.w1)) @ self.w2)

    model = Layer()
    layer = torch.compile(model, backend=backend, fullgraph=True)
    for n in (30, 41, 52, 63):
        A = sp.random(n, n, density=0.15, format="csr", dtype=np.float32, random_state=n)
        parts = [torch.from_numpy(A.data), torch.from_numpy(A.indices).long(), torch.from_numpy(A.indptr).long()]
        x = torch.randn(n, 8, generator=torch.Generator().manual_seed(n))
        out = layer(*parts, x)
        h = np.maximum(A @ (x.numpy() @ model.w1.detach().numpy()), 0)
        np.testing.assert_allclose(out.detach().numpy(), A @ (h @ model.w2.detach().numpy()), rtol=1e-4, atol=1e-5)
        model.zero_grad()
        out.sum().backward()
        g = A.T @ np.ones((n, 4), np.float32) @ model.w2.detach().numpy().T * (A @ (x.numpy() @ model.w1.detach().numpy()) > 0)
        np.testing.assert_allclose(model.w1.grad.numpy(), x.numpy().T @ (A.T @ g), rtol=1e-4, atol=1e-4)
    assert len(graphs) == 2  # the first shape, then one graph for every other

    def to_csr(x):
        r = st.ops.cast_storage(x * 2, stype="csr")
        return r.values, r.indices, r.indptr, r.shape

    f = torch.compile(to_csr, dynamic=True, fullgraph=True)
    for n in (3, 5, 8):
        x = torch.randn(n, 4, generator=torch.Generator().manual_seed(n)) * (torch.arange(4 * n).reshape(n, 4) % 3 > 0)
        v, i, p, shape = f(x)
        m = sp.csr_matrix(2 * x.numpy())
        assert tuple(shape) == (n, 4)
        np.testing.assert_allclose(v.numpy(), m.data)
        np.testing.assert_array_equal(i.numpy(), m.indices)
        np.testing.assert_array_equal(p.numpy(), m.indptr)
    g = torch.compile(lambda x, y: st.ops.elemwise_add(x, y), dynamic=True, fullgraph=True)
    with pytest.raises(RuntimeError, match="elemwise_add.*inputs must have one shape"):
        g(torch.randn(6, 3), torch.randn(6, 4))
    torch.testing.assert_close(g(torch.ones(7, 3), torch.ones(7, 3)), torch.full((7, 3), 2.0))


def test_compiled_sparse_results_come_back_as_parts():
    torch._dynamo.reset()
    m = sp.random(5, 4, density=0.5, format="csr", dtype=np.float32, random_state=2)

    def f(v, i, p):
        r = st.ops._mul_scalar(CSRParts(v, i, p, (5, 4)), scalar=2.0)
        return r.values, r.indices, r.indptr

    args = (torch.from_numpy(m.data), torch.from_numpy(m.indices).long(), torch.from_numpy(m.indptr).long())
    v, i, p = torch.compile(f, fullgraph=True)(*args)
    np.testing.assert_allclose(v.numpy(), 2 * m.data)
    np.testing.assert_array_equal(i.numpy(), m.indices)
    np.testing.assert_array_equal(p.numpy(), m.indptr)
