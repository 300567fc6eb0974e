"""The JAX bridge sizes sparse outputs by the op's capacity rule (``Op.capacity``).

- at 100k x 100k inside ``jax.jit``, in a fresh process: ``square``, ``elemwise_add``,
  ``elemwise_mul`` and ``dot(csr.T, dense)`` of csr matrices with 100k stored values (and
  csr.T @ dense over 2**31 - 1 hashed columns) get the rule's capacity, not the dense size
  (10**10 values), agree with SciPy, and the process peaks well under 2 GB;
- a result below its capacity is padded and reads back right (also fed to a bridged op);
- the new values of row_sparse states (an optimizer's) are sized by the rule too;
- an op with a sparse output and no rule is refused naming the op and the output, and
  ``max_nnz=`` still overrides any rule; a kernel writing past its rule's bound gets the
  "holds N stored values but its capacity is C" error;
- ``explain`` shows each capacity and where it came from.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)  # float64 and int64 arrays (tests name their dtypes)

import jax.numpy as jnp  # noqa: E402
from jax.experimental.sparse import BCSR  # noqa: E402

import sparse_ops as so  # noqa: E402
import sparse_ops.jax as soj  # noqa: E402
import sparse_ops_cookbook  # noqa: E402,F401  (registers the cookbook ops)
from sparse_ops.bridging import capacity  # noqa: E402
from sparse_ops.jax import JaxBridgeError, RowSparse  # noqa: E402
from sparse_ops.sdk import capacity as cap  # noqa: E402


def bcsr(m: sp.spmatrix) -> BCSR:
    m = sp.csr_matrix(m)
    return BCSR((jnp.asarray(m.data), jnp.asarray(m.indices.astype(np.int64)),
                 jnp.asarray(m.indptr.astype(np.int64))), shape=m.shape)


# ---- 100k x 100k under jax.jit, in a fresh process ---------------------------------------------------
BIG = r'''
import json
import numpy as np, scipy.sparse as sp
import jax, jax.numpy as jnp
from jax.experimental.sparse import BCSR
import sparse_ops.jax as soj

N, NNZ = 100_000, 100_000
rng = np.random.default_rng(0)

def positions(count, exclude=None):
    """count distinct flat positions of an N x N matrix (none of exclude)."""
    flat = np.unique(rng.integers(0, N * N, size=count + count // 10, dtype=np.int64))
    if exclude is not None:
        flat = np.setdiff1d(flat, exclude)
    return rng.choice(flat, count, replace=False)

def matrix(flat):
    m = sp.csr_matrix((rng.uniform(0.5, 2.0, flat.size).astype(np.float32), (flat // N, flat % N)), shape=(N, N))
    m.sort_indices()
    return m

def bcsr(m):
    return BCSR((jnp.asarray(m.data), jnp.asarray(m.indices.astype(np.int32)),
                 jnp.asarray(m.indptr.astype(np.int32))), shape=m.shape)

def same_csr(r, ref):
    """r (a BCSR result) holds SciPy's ref, then zero padding; returns its true count."""
    n = int(soj.nnz(r))
    ref = sp.csr_matrix(ref)
    ref.sort_indices()
    assert n == ref.nnz, (n, ref.nnz)
    np.testing.assert_array_equal(np.asarray(r.indptr), ref.indptr)
    np.testing.assert_array_equal(np.asarray(r.indices[:n]), ref.indices)
    np.testing.assert_allclose(np.asarray(r.data[:n]), ref.data, rtol=1e-6)
    assert not np.asarray(r.data[n:]).any()
    return n

pa = positions(NNZ)
pb = np.concatenate([pa[: NNZ // 2], positions(NNZ // 2, exclude=pa)])  # half of a's positions, half new
a, b = matrix(pa), matrix(pb)
assert a.nnz == b.nnz == NNZ
x, y = bcsr(a), bcsr(b)
out = {}
r = jax.jit(soj.ops.square)(x)
out["square"] = [r.nse, same_csr(r, a.multiply(a))]
r = jax.jit(soj.ops.elemwise_add)(x, y)
out["elemwise_add"] = [r.nse, same_csr(r, a + b)]
r = jax.jit(soj.ops.elemwise_mul)(x, y)
out["elemwise_mul"] = [r.nse, same_csr(r, a.multiply(b))]
g = rng.standard_normal((N, 4)).astype(np.float32)
r = jax.jit(lambda x, g: soj.ops.dot(x, g, transpose_a=True))(x, jnp.asarray(g))
used = np.unique(a.indices)
n = int(soj.nnz(r))
np.testing.assert_array_equal(np.asarray(r.indices[:n]), used)
np.testing.assert_allclose(np.asarray(r.values[:n]), (a.T @ g)[used], rtol=1e-4, atol=1e-4)
out["dot_t"] = [r.nse, n]
# hashed features: 2**31 - 1 columns, of which csr.T @ dense stores at most nnz rows
H = 2**31 - 1
h = sp.csr_matrix((rng.uniform(0.5, 2.0, NNZ).astype(np.float32),
                   (rng.integers(0, 1000, NNZ), rng.integers(0, H, NNZ))), shape=(1000, H))
h.sum_duplicates()
gh = rng.standard_normal((1000, 8)).astype(np.float32)
r = jax.jit(lambda x, g: soj.ops.dot(x, g, transpose_a=True))(bcsr(h), jnp.asarray(gh))
cols, inverse = np.unique(h.indices, return_inverse=True)
coo = h.tocoo()
ref = np.zeros((cols.size, 8))
np.add.at(ref, inverse, coo.data[:, None].astype(np.float64) * gh[coo.row])
n = int(soj.nnz(r))
np.testing.assert_array_equal(np.asarray(r.indices[:n]), cols)
np.testing.assert_allclose(np.asarray(r.values[:n]), ref, rtol=1e-4, atol=1e-4)
out["dot_t_hashed"] = [r.nse, n, h.nnz]
# this process's own peak (VmHWM, of the memory exec gave it; ru_maxrss would also count the
# parent's at the fork, the whole test session's)
out["maxrss_bytes"] = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status")
                           if line.startswith("VmHWM:"))
print(json.dumps(out))
'''


@pytest.mark.slow
def test_100k_by_100k_results_get_the_rules_capacity_and_memory_stays_bounded():
    """Each result reserves what its rule says (the dense size would be 10**10 values, 40 GB
    of float32 and as much again of indices), agrees with SciPy, and the whole process
    (jax, numba, the inputs) peaks well under 2 GB."""
    assert capacity("csr", (100_000, 100_000)) == 10**10  # what a result would reserve without a rule
    env = {**os.environ, "JAX_ENABLE_X64": "0"}  # int32 indices (2**31 - 1 columns still fit)
    done = subprocess.run([sys.executable, "-c", BIG], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["square"] == [100_000, 100_000]  # nnz(data): a tight bound
    assert got["elemwise_add"] == [200_000, 150_000]  # nnz(lhs) + nnz(rhs): the union holds 150k, padded
    assert got["elemwise_mul"] == [100_000, 50_000]  # min(nnz(lhs), nnz(rhs)): the intersection holds 50k
    nse, stored = got["dot_t"]
    assert nse == 100_000 and 60_000 < stored <= nse  # min(columns, nnz): both 100k here
    nse, stored, nnz = got["dot_t_hashed"]
    assert nse == nnz and stored <= nnz  # min(2**31 - 1 columns, nnz) rows, not 2**31 - 1 rows (68 GB)
    assert got["maxrss_bytes"] < 2 * 2**30, got["maxrss_bytes"]


# ---- padding, states, and the rule's sources --------------------------------------------------------
def test_a_result_below_its_capacity_is_padded_and_reads_back_right():
    a = sp.random(30, 20, density=0.2, format="csr", random_state=1)
    b = sp.csr_matrix(a.toarray() * (np.arange(20) % 2 == 0))  # a's even columns: a subset of a's structure
    b.eliminate_zeros()
    r = jax.jit(soj.ops.elemwise_add)(bcsr(a), bcsr(b))
    assert r.nse == a.nnz + b.nnz and int(soj.nnz(r)) == a.nnz  # the union is a itself
    np.testing.assert_allclose(np.asarray(r.todense()), (a + b).toarray())
    assert not np.asarray(r.data[a.nnz:]).any() and not np.asarray(r.indices[a.nnz:]).any()
    # the padded result feeds a bridged op again
    w = np.random.default_rng(2).standard_normal((20, 3))
    np.testing.assert_allclose(np.asarray(jax.jit(soj.ops.csr_spmm)(r, w)), (a + b) @ w, rtol=1e-12)
    m = jax.jit(soj.ops.elemwise_mul)(r, bcsr(b))
    assert m.nse == b.nnz  # min(nse of the padded result, nnz(b))
    np.testing.assert_allclose(np.asarray(m.todense()), (a + b).multiply(b).toarray())


def test_capacities_are_capped_by_the_dense_size():
    full = sp.csr_matrix(np.arange(1.0, 7.0).reshape(2, 3))
    r = jax.jit(soj.ops.elemwise_add)(bcsr(full), bcsr(full))
    assert r.nse == 6  # not 12
    np.testing.assert_allclose(np.asarray(r.todense()), 2 * full.toarray())


def test_row_sparse_states_are_sized_by_the_rule():
    """adam_update with row_sparse weight, gradient and states storing different rows: the new
    weight and states store the union, sized as the sum of the inputs' stored rows."""
    def rsp(rows, fill):
        return RowSparse(jnp.full((len(rows), 3), fill), jnp.asarray(rows, jnp.int64), (20, 3))

    w, g, m, v = rsp([0, 2], 1.0), rsp([1, 2, 7], 0.5), rsp([0, 2], 0.1), rsp([0, 2], 0.2)
    new_w, new_m, new_v = soj.ops.adam_update(w, g, m, v, lr=0.1)
    assert new_w.nse == new_m.nse == new_v.nse == 2 + 3 + 2 + 2
    natives = [so.row_sparse_array((np.array(a.values), np.array(a.indices)), shape=(20, 3)) for a in (w, g, m, v)]
    nw = so.adam_update(*natives, lr=0.1)
    for got, want in ((new_w, nw), (new_m, natives[2]), (new_v, natives[3])):
        assert int(soj.nnz(got)) == 4  # rows 0, 1, 2 and 7
        np.testing.assert_allclose(np.asarray(got.todense()), want.asnumpy(), rtol=1e-12)
    e = soj.explain("adam_update", w, g, m, v, lr=0.1)
    assert e["out_capacity"] == [9] and e["capacity_from"] == ["sum of nnz over the inputs"]


def test_explain_shows_each_capacity_and_where_it_came_from():
    a = sp.random(40, 30, density=0.1, format="csr", random_state=3)
    e = soj.explain("square", bcsr(a))
    assert e["out_capacity"] == [a.nnz] and e["capacity_from"] == ["nnz(data) (dense size if f(0) != 0 in the dtype)"]
    e = soj.explain("square", bcsr(a), max_nnz=7)
    assert e["out_capacity"] == [7] and e["capacity_from"] == ["max_nnz="]
    e = soj.explain("dot", bcsr(a), jnp.ones((40, 2)), transpose_a=True)
    assert e["out_stypes"] == ["row_sparse"] and e["out_capacity"] == [min(30, a.nnz)]
    assert e["capacity_from"][0].startswith("min(rows, nnz) of op(lhs)")
    e = soj.explain("relu", jnp.ones(3))
    assert e["out_capacity"] == [None] and e["capacity_from"] == [None]


# ---- no rule, a rule too small, max_nnz= ----------------------------------------------------------------
def _register_copy(name: str, rule=None):
    """A csr -> csr op (a plugin's, say) that copies its input, with capacity ``rule``."""
    body = {
        "infer_storage_type": lambda self, x: [x],
        "capacity": rule,
        "sparse": so.kernel(stypes=("csr",))(lambda self, ctx, x, out: ctx.adopt(out, x.copy())),
    }
    so.register(name)(type("Copy", (so.Op,), body))


def test_an_op_with_a_sparse_output_and_no_rule_asks_for_max_nnz(isolated):
    _register_copy("_jaxcap_norule")
    a = sp.random(50, 40, density=0.1, format="csr", random_state=4)
    with pytest.raises(JaxBridgeError, match=r"sparse_ops.jax.ops._jaxcap_norule: operator '_jaxcap_norule' declares "
                                             r"no capacity rule for its sparse result\(s\) 'output' \(csr\).*"
                                             r"pass max_nnz=N"):
        jax.jit(soj.ops._jaxcap_norule)(bcsr(a))
    e = soj.explain("_jaxcap_norule", bcsr(a))
    assert e["out_capacity"] == [None] and e["capacity_from"] == [cap.NO_RULE]
    r = jax.jit(lambda x: soj.ops._jaxcap_norule(x, max_nnz=a.nnz + 5))(bcsr(a))
    assert r.nse == a.nnz + 5 and int(soj.nnz(r)) == a.nnz
    np.testing.assert_allclose(np.asarray(r.todense()), a.toarray())


def test_max_nnz_overrides_a_rule(isolated):
    _register_copy("_jaxcap_ruled", cap.same_as("data"))
    a = sp.random(50, 40, density=0.1, format="csr", random_state=5)
    assert jax.jit(soj.ops._jaxcap_ruled)(bcsr(a)).nse == a.nnz
    r = jax.jit(lambda x: soj.ops._jaxcap_ruled(x, max_nnz=3 * a.nnz))(bcsr(a))  # larger than the rule
    assert r.nse == 3 * a.nnz
    np.testing.assert_allclose(np.asarray(r.todense()), a.toarray())
    with pytest.raises(Exception, match=r"_jaxcap_ruled.*output 0 holds \d+ stored values but its capacity is 4 "
                                        r"\(from max_nnz=\); pass a larger max_nnz="):
        jax.block_until_ready(jax.jit(lambda x: soj.ops._jaxcap_ruled(x, max_nnz=4))(bcsr(a)))


def test_a_kernel_storing_more_than_its_rule_is_an_error_naming_the_rule(isolated):
    _register_copy("_jaxcap_wrong", cap.computed(lambda op, out, x: x.nnz // 2, "half of nnz(data)"))
    a = sp.random(50, 40, density=0.1, format="csr", random_state=6)
    with pytest.raises(Exception, match=rf"_jaxcap_wrong.*output 0 holds {a.nnz} stored values but its capacity is "
                                        rf"{a.nnz // 2} \(from half of nnz\(data\)\); pass a larger max_nnz="):
        jax.block_until_ready(jax.jit(soj.ops._jaxcap_wrong)(bcsr(a)))


def test_a_rule_that_fails_is_an_error_naming_the_op_and_rule(isolated):
    _register_copy("_jaxcap_broken", cap.computed(lambda op, out, x: x.nnz / 2, "nnz / 2"))
    a = sp.random(10, 10, density=0.5, format="csr", random_state=7)
    with pytest.raises(JaxBridgeError, match=r"sparse_ops.jax.ops._jaxcap_broken: operator '_jaxcap_broken': capacity "
                                             r"rule 'nnz / 2' of 'output' failed: capacity rule 'nnz / 2' returned "
                                             r"\d+\.\d+, not an int"):
        soj.ops._jaxcap_broken(bcsr(a))
