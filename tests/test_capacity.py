"""Capacity rules (``Op.capacity``, ``sparse_ops.sdk.capacity``): the bound of each sparse
output's stored entries an op declares, as a pure function of its inputs' shapes, storage
types and stored counts.

- the helpers' values, units (values for csr, rows for row_sparse) and texts, and the cap
  at the output's dense size;
- declarations checked when the op is registered (names, types, a ``capacity`` parameter);
- every shipped op (built-ins and the cookbook) whose storage inference can give a sparse
  output (or update a sparse input in place) declares a rule, and on every sample each
  sparse result stores at most what the rule says;
- tight rules on larger inputs, compared with SciPy;
- ``explain`` and ``sparse-ops info`` show each rule.

The JAX bridge's use of the rules (``jax.jit`` at 100k x 100k) is in ``test_jax_capacity.py``.
"""
from __future__ import annotations

import itertools
import subprocess
import sys
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import sparse_ops as so
import sparse_ops_cookbook  # noqa: F401  (registers the cookbook's ops)
from sparse_ops import registry
from sparse_ops.sdk import capacity as cap

STYPES = ("default", "csr", "row_sparse")

# shipped ops whose sparse results need no rule, with the reason (none today: keep it that way)
EXEMPT: dict[str, str] = {}


def csr(m: sp.spmatrix) -> so.CSRNDArray:
    m = sp.csr_matrix(m)
    return so.csr_matrix((m.data, m.indices, m.indptr), shape=m.shape)


def shipped_ops() -> list[registry.OpDef]:
    """The built-in operators and the cookbook's (not ops other tests register)."""
    out = []
    for name in registry.list_ops():
        owner = registry.owner_of(name)
        if owner.kind == "built-in" or owner.plugin == "cookbook":
            out.append(registry.get_op(name))
    return out


def samples_of(opdef: registry.OpDef) -> list[tuple[list, dict]]:
    make = getattr(opdef.cls, "samples", None)
    if not callable(make):
        return []
    return [s if isinstance(s, tuple) else (s, {}) for s in make()]


def sparse_slots(opdef: registry.OpDef) -> set[str]:
    """The outputs (and inputs updated in place) storage inference makes sparse for some
    parameter set (the defaults, each sample's) and some input storage types (each sample's,
    and every combination for ops of up to 5 inputs; 1 to 3 alike for variadic ops)."""
    instances = [opdef._default_instance] if opdef._default_instance is not None else []
    signatures = set()
    for inputs, params in samples_of(opdef):
        signatures.add(tuple(x.stype for x in inputs))
        instances.append(opdef.instance(params))
    if opdef.variadic:
        signatures |= {(s,) * k for s in STYPES for k in (1, 2, 3)} | set(itertools.product(STYPES, repeat=2))
    elif len(opdef.arguments) <= 5:
        signatures |= set(itertools.product(STYPES, repeat=len(opdef.arguments)))
    slots = set()
    for inst in instances:
        for sig in signatures:
            try:
                outs = inst.infer_storage_type(*sig)
            except Exception:  # noqa: BLE001  (a rule refusing these storage types)
                continue
            slots |= {slot for slot, st in zip(cap.slot_names(inst, len(outs)), outs) if st != "default"}
            if not opdef.variadic:
                slots |= {m for m in opdef.mutate if sig[opdef.arguments.index(m)] != "default"}
    return slots


# ---- the helpers --------------------------------------------------------------------------------------
class _Fake:
    """Stands for an op instance: the helpers read only ``_opdef.arguments`` (and parameters)."""

    class _opdef:  # noqa: N801
        arguments = ("lhs", "rhs")

    k = 3


OP = _Fake()


def test_stored_counts_convert_to_the_outputs_unit():
    c = cap.Stored((10, 4), "csr", 6)
    r = cap.Stored((10, 4), "row_sparse", 3)
    d = cap.Stored((10, 4))
    assert (c.bound_in("csr"), c.bound_in("row_sparse")) == (6, 6)  # at most 6 rows hold 6 values
    assert cap.Stored((3, 4), "csr", 6).bound_in("row_sparse") == 3  # ... and no more than its rows
    assert (r.bound_in("csr"), r.bound_in("row_sparse")) == (12, 3)  # 3 stored rows of 4 values
    assert (d.bound_in("csr"), d.bound_in("row_sparse")) == (40, 10)  # dense: fully stored
    assert (c.dense_count(), r.dense_count(), d.dense_count()) == (40, 10, 40)
    assert cap.Stored((10, 4), "csr", 2).columns_bound() == 2 and c.columns_bound() == 4
    assert cap.Stored((2**40, 2**40), "csr", 0).dense_count() == 2**80  # exact, however large


def test_helpers_give_their_bounds_and_texts():
    lhs, rhs = cap.Stored((10, 4), "csr", 6), cap.Stored((10, 4), "csr", 9)
    out = cap.Stored((10, 4), "csr")
    cases = [(cap.same_as("rhs"), 9, "nnz(rhs)"), (cap.sum_of("lhs", "rhs"), 15, "nnz(lhs) + nnz(rhs)"),
             (cap.sum_of(), 15, "sum of nnz over the inputs"), (cap.min_of("lhs", "rhs"), 6, "min(nnz(lhs), nnz(rhs))"),
             (cap.columns_of("lhs"), 4, "min(columns(lhs), nnz(lhs))"), (cap.DENSE, 40, "dense size"),
             (cap.NONE_STORED, 0, "0 (nothing stored)"),
             (cap.computed(lambda op, out, a, b: out.rows * op.k, "rows x k"), 30, "rows x k")]
    for rule, bound, text in cases:
        assert (rule.bound(OP, out, [lhs, rhs]), rule.text) == (bound, text)


def test_a_dense_operand_leaves_the_sparse_one_to_decide_an_intersection():
    out = cap.Stored((10, 4), "row_sparse")
    rule = cap.min_of("lhs", "rhs")
    assert rule.bound(OP, out, [cap.Stored((10, 4)), cap.Stored((10, 4), "row_sparse", 2)]) == 2
    # a union with a dense operand: the dense size
    assert cap.sum_of("lhs", "rhs").bound(OP, out, [cap.Stored((10, 4)), cap.Stored((10, 4), "row_sparse", 2)]) == 10


def test_every_bound_is_capped_by_the_dense_size():
    out = cap.Stored((3, 4), "csr")
    big = [cap.Stored((3, 4), "csr", 12), cap.Stored((3, 4), "csr", 12)]
    assert cap.sum_of("lhs", "rhs").bound(OP, out, big) == 12
    assert cap.computed(lambda op, out, a, b: 10**30, "huge").bound(OP, cap.Stored((5, 2), "row_sparse"), big) == 5


@pytest.mark.parametrize("answer, message", [(-1, "returned -1, a negative count"), (2.5, "returned 2.5, not an int"),
                                             (None, "returned None, not an int")])
def test_a_rule_answering_garbage_is_an_error_naming_it(answer, message):
    rule = cap.computed(lambda op, out, a, b: answer, "my bound")
    with pytest.raises(ValueError, match=f"capacity rule 'my bound' {message}"):
        rule.bound(OP, cap.Stored((3, 4), "csr"), [cap.Stored((3, 4))] * 2)


def test_rules_need_a_function_and_a_text():
    with pytest.raises(TypeError, match="must be callable"):
        cap.Rule(3, "three")
    with pytest.raises(TypeError, match="needs a description"):
        cap.Rule(lambda op, out: 0, "")
    with pytest.raises(ValueError, match="names at least one input"):
        cap.min_of()


# ---- declarations -------------------------------------------------------------------------------------
def _declare(isolated_name: str, **attrs):
    body = {"arguments": ("x", "y"), "infer_storage_type": lambda self, x, y: [x], **attrs}
    return so.register(isolated_name)(type("Declared", (so.Op,), body))


def test_declarations_are_read_per_output_and_updated_input(isolated):
    _declare("_cap_one_rule", capacity=cap.same_as("x"))
    assert so.get_op("_cap_one_rule").capacity["*"].text == "nnz(x)"
    _declare("_cap_by_name", outputs=("a", "b"), mutate=("y",),
             capacity={"a": cap.same_as("x"), "y": cap.sum_of("x", "y")})
    rules = so.get_op("_cap_by_name").capacity
    assert cap.describe(rules, ["a", "b", "y"]) == {"a": "nnz(x)", "b": cap.NO_RULE, "y": "nnz(x) + nnz(y)"}
    _declare("_cap_none")
    assert so.get_op("_cap_none").capacity == {}


@pytest.mark.parametrize("attrs, error, message", [
    ({"capacity": {"out": cap.DENSE}}, ValueError, r"_cap_bad: capacity names 'out', which is neither an output nor "
                                                   r"an input it updates in place \(output\)"),
    ({"capacity": cap.same_as("z")}, ValueError, r"_cap_bad: capacity rule 'nnz\(z\)' names input 'z', which is not "
                                                 r"an argument \(x, y\)"),
    ({"capacity": "nnz(x)"}, TypeError, r"_cap_bad: capacity is a capacity rule"),
    ({"capacity": {"output": 5}}, TypeError, r"_cap_bad: capacity of 'output' must be a capacity rule"),
    ({"capacity": so.Param(int, 3)}, ValueError, r"_cap_bad: a parameter named 'capacity' would hide"),
    ({"capacity": cap.same_as("x"), "variadic": True}, ValueError, r"_cap_bad: a variadic op's capacity rule cannot "
                                                                     r"name inputs \(x\)"),
])
def test_a_bad_declaration_is_refused_at_registration_naming_the_op(isolated, attrs, error, message):
    with pytest.raises(error, match=message):
        _declare("_cap_bad", **attrs)
    assert "_cap_bad" not in so.list_ops()


# ---- every shipped op -----------------------------------------------------------------------------------
def test_every_op_that_can_give_a_sparse_result_declares_a_capacity_rule():
    """Walks the whole table (built-ins and cookbook): an output (or updated input) that
    storage inference makes sparse for some sample or combination of storage types has a
    rule, unless EXEMPT says why not."""
    missing, checked = [], 0
    for opdef in shipped_ops():
        for slot in sorted(sparse_slots(opdef)):
            checked += 1
            if cap.rule_for(opdef.capacity, slot) is None and opdef.name not in EXEMPT:
                missing.append(f"{opdef.name}.{slot}")
    assert not missing, f"sparse results without a capacity rule: {missing}"
    assert checked > 80  # the walk reached the sparse ops (csr unary, elemwise, dot, optimizers, cookbook, ...)
    assert set(EXEMPT) <= {o.name for o in shipped_ops()}


def test_on_every_sample_each_sparse_result_stays_within_its_rule():
    """Runs each shipped op on its own samples: every sparse output, and every sparse input
    updated in place, stores at most what the rule gave from the inputs before the call."""
    too_many, checked = [], 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", so.StorageFallbackWarning)
        for opdef in shipped_ops():
            for inputs, params in samples_of(opdef):
                inst = opdef.instance(params)
                facts = [cap.facts_of(x) for x in inputs]
                args = [x.copy() for x in inputs]  # the states of optimizers are updated in place
                res = so.invoke(opdef, args, params)
                res = list(res) if isinstance(res, (list, tuple)) else [res]
                results = list(zip(cap.slot_names(inst, len(res)), res))
                if not opdef.variadic:
                    results += [(m, args[opdef.arguments.index(m)]) for m in opdef.mutate]
                for slot, r in results:
                    if r.stype == "default":
                        continue
                    bound = cap.bounded(inst, slot, cap.Stored(tuple(r.shape), r.stype, None, r.dtype), facts)
                    checked += 1
                    if bound is None or r.indices.shape[0] > bound.value:
                        too_many.append((opdef.name, slot, int(r.indices.shape[0]), bound))
    assert not too_many
    assert checked > 120


# ---- tight rules on larger inputs ------------------------------------------------------------------------
def bound_of(name: str, *inputs, **params) -> tuple[int, str]:
    e = so.explain(name, *inputs, **params)
    return e["out_capacity"][0], e["capacity_from"][0]


def test_union_intersection_and_structure_rules_against_scipy():
    a = sp.random(300, 200, density=0.02, format="csr", random_state=1)
    b = sp.random(300, 200, density=0.03, format="csr", random_state=2)
    x, y = csr(a), csr(b)
    s = so.elemwise_add(x, y)
    np.testing.assert_allclose(s.asnumpy(), (a + b).toarray())
    assert bound_of("elemwise_add", x, y) == (a.nnz + b.nnz, "nnz(lhs) + nnz(rhs)") and s.nnz <= a.nnz + b.nnz
    p = so.elemwise_mul(x, y)
    np.testing.assert_allclose(p.asnumpy(), a.multiply(b).toarray())
    assert bound_of("elemwise_mul", x, y) == (min(a.nnz, b.nnz), "min(nnz(lhs), nnz(rhs))")
    sq = so.square(x)
    assert bound_of("square", x)[0] == sq.nnz == a.nnz  # the same structure: a tight bound
    t = so.transpose(x)
    assert bound_of("transpose", x) == (a.nnz, "nnz(data)") and t.nnz == a.nnz
    c = so.concat(x, y, dim=0)
    assert bound_of("concat", x, y, dim=0) == (a.nnz + b.nnz, "sum of nnz over the inputs") and c.nnz == a.nnz + b.nnz


def test_dot_rules_follow_the_non_empty_rows_and_columns():
    a = sp.random(400, 10_000, density=0.0005, format="csr", random_state=3)  # 2000 values over 10k columns
    x, g = csr(a), so.array(np.ones((400, 3)))
    r = so.dot(x, g, transpose_a=True)
    np.testing.assert_allclose(r.asnumpy(), a.T @ np.ones((400, 3)))
    assert bound_of("dot", x, g, transpose_a=True)[0] == min(10_000, a.nnz)
    assert r.stype == "row_sparse" and r.indices.shape[0] == len(np.unique(a.indices)) <= a.nnz
    # dense @ csr: every output row may hold a value in each column the csr stores
    w = so.array(np.ones((5, 400)))
    assert bound_of("dot", w, x) == (5 * min(10_000, a.nnz), "min(rows, nnz) of op(lhs) [x min(columns, nnz) of op(rhs), "
                                                                "for csr]")
    # csr @ csr: the non-empty rows of one times the non-empty columns of the other
    b = sp.random(10_000, 50, density=0.001, format="csr", random_state=4)
    p = so.dot(x, csr(b))
    np.testing.assert_allclose(p.asnumpy(), (a @ b).toarray())
    assert bound_of("dot", x, csr(b))[0] == min(400, a.nnz) * min(50, b.nnz) >= p.nnz


def test_take_retain_and_embedding_gradients_are_bounded_by_their_ids():
    a = sp.random(1000, 300, density=0.01, format="csr", random_state=5)
    idx = so.array(np.array([3, 3, 999, 10], dtype=np.int64))
    t = so.take(csr(a), idx)
    np.testing.assert_allclose(t.asnumpy(), a.toarray()[[3, 3, 999, 10]])
    assert bound_of("take", csr(a), idx) == (4 * min(300, a.nnz), "size(indices) x min(columns(a), nnz(a))")
    rows = so.row_sparse_array((np.ones((50, 4)), np.arange(0, 100, 2)), shape=(100, 4))
    keep = so.array(np.array([0, 1, 2, 3, 4.0]))
    assert bound_of("retain", rows, keep) == (5, "min(nnz(data), size(indices))")
    assert so.retain(rows, keep).indices.shape[0] == 3
    ids, og = so.array(np.array([[1, 5], [5, 7.0]])), so.array(np.ones((2, 2, 3)))
    assert bound_of("_embedding_backward", ids, og, input_dim=1000, sparse_grad=True) == (4, "size(data) (the ids)")


def test_cookbook_rules():
    adj = sp.random(50, 50, density=0.05, format="csr", random_state=6)
    adj.setdiag(0)
    adj.eliminate_zeros()
    a = csr(abs(adj))
    n = sparse_ops_cookbook.gcn_norm(a)
    assert bound_of("gcn_norm", a) == (adj.nnz + 50, "nnz(A) + rows(A) with add_self_loops, else nnz(A)")
    assert n.nnz == adj.nnz + 50  # every diagonal value inserted: the bound is met exactly
    assert bound_of("gcn_norm", a, add_self_loops=False)[0] == adj.nnz
    g = so.array(np.ones((50, 2)))
    assert bound_of("csr_spmm_t", a, g, sparse_grad=True) == (min(50, adj.nnz), "min(columns(A), nnz(A))")
    assert bound_of("csr_row_softmax", a) == (adj.nnz, "nnz(A)")


def test_zeros_like_stores_nothing_and_cast_storage_counts_in_the_outputs_unit():
    rows = so.row_sparse_array((np.ones((3, 4)), np.array([0, 5, 9])), shape=(10, 4))
    assert bound_of("zeros_like", rows) == (0, "0 (nothing stored)")
    assert bound_of("cast_storage", rows, stype="csr") == (12, "nnz(data)")  # 3 rows of 4 values
    assert bound_of("cast_storage", rows.tostype("default"), stype="csr") == (40, "nnz(data)")  # dense: its size
    assert bound_of("cast_storage", rows.tostype("csr"), stype="row_sparse")[0] == 10  # 12 values: at most 10 rows


def test_explain_shows_no_capacity_for_dense_outputs_and_none_without_a_rule(isolated):
    x = so.array(np.ones((2, 3)))
    e = so.explain("exp", x)
    assert e["out_capacity"] == [None] and e["capacity_from"] == [None]

    @so.register("_cap_norule")
    class NoRule(so.Op):
        def infer_storage_type(self, x):
            return [x]

        @so.kernel(stypes=("csr",))
        def sparse(self, ctx, x, out):
            ctx.adopt(out, x.copy())

    e = so.explain("_cap_norule", csr(sp.eye(3)))
    assert e["out_stypes"] == ["csr"] and e["out_capacity"] == [None] and e["capacity_from"] == ["none: pass max_nnz="]


def test_sparse_ops_info_prints_the_capacity_rules():
    def info(name: str) -> str:
        done = subprocess.run([sys.executable, "-m", "sparse_ops.cli", "info", name], capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "capacity of sparse outputs (stored entries jax.jit reserves):\n  output: nnz(lhs) + nnz(rhs)\n" in \
        info("elemwise_add")
    assert "  output: sum of nnz over the inputs\n  mean: sum of nnz over the inputs\n  var: sum of nnz over the inputs\n" \
        in info("adam_update")
