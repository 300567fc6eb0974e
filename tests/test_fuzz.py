"""Hostile sparse inputs (issue 9, item 1): every kind of broken csr / row_sparse invariant
(``fuzz_inputs.py``) is fed to every constructor and to every built-in and plugin op.

Each must end in a Python exception naming the problem: never a crash, a hang, or an
invalid input silently accepted.

Which entry points validate:
- public constructors (``csr_matrix``, ``row_sparse_array``, ``CSRNDArray`` /
  ``RowSparseNDArray`` with the default ``check=True``, SciPy matrices, ``sparse_ops.load``)
  validate every invariant at once;
- a container built with ``check=False`` is validated once, on first use (before any
  operator's kernel reads it); internal code builds known-valid containers without that;
- operators trust containers validated that way. Corrupting index arrays after
  construction through memory the caller still shares is outside the contract; in the
  debug mode ``SPARSE_OPS_BOUNDSCHECK=1`` kernels then raise ``IndexError`` instead of
  reading out of bounds (``test_tampered_inputs_in_boundscheck_mode``).

The constructor fuzz runs in-process (pure NumPy validation); the op-level fuzz runs in
child processes (``fuzz_inputs.py`` is the child program), so that a crash is a child's
signal exit and a hang its timeout; the parent restarts the child after the input that
killed it and counts. ``pytest -s`` prints the numbers.
"""
from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sparse_ops as so
from fuzz_inputs import CSR_KINDS, RSP_KINDS, Case, corrupted

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TALLY: dict[str, int] = {"inputs": 0, "constructor_calls": 0, "accepted_but_invalid": 0}


def _report(label: str, numbers: dict) -> None:
    print(f"\n[fuzz] {label}: " + ", ".join(f"{k}={v}" for k, v in numbers.items()))


@pytest.fixture(scope="module", autouse=True)
def _constructor_tally():
    """Print what the constructor fuzz tried (pytest -s shows it) once the module is done."""
    yield
    if TALLY["inputs"]:
        _report("constructors", TALLY)


# ---- constructors --------------------------------------------------------------------------------
def _scipy_matrix(case: Case, fmt: str):
    """A SciPy matrix carrying the corrupted components as they are: a valid matrix whose
    attributes are then assigned (SciPy's constructor would cast some of them itself)."""
    data, indices, indptr = case.parts
    cls = sp.csr_matrix if fmt == "csr" else sp.csc_matrix
    shape = case.shape
    if fmt == "csc" and isinstance(shape, tuple):
        shape = tuple(shape[::-1])
    m = cls((np.ones(1, np.float32), np.zeros(1, np.int64), np.array([0, 1])), shape=(1, 1))
    m.data, m.indices, m.indptr = data, indices, indptr
    m._shape = shape
    return m


def _npz_ours(case: Case) -> bytes:
    """A sparse_ops file holding the corrupted components (written by hand, as an attacker would)."""
    parts = dict(zip(("data", "indices", "indptr"), case.parts))
    shape = list(case.shape) if isinstance(case.shape, tuple) else case.shape
    header = {"format": "sparse_ops", "version": 1, "kind": "single",
              "entries": [{"name": "0", "stype": case.stype, "shape": shape}]}
    arrays = {f"0.{k}": v for k, v in parts.items()}
    arrays["__sparse_ops__"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # object arrays are pickled in the file: load must refuse them
    return buf.getvalue()


def _npz_scipy(case: Case) -> bytes:
    """A file in SciPy's ``save_npz`` layout holding the corrupted csr components."""
    data, indices, indptr = case.parts
    shape = np.asarray(case.shape) if isinstance(case.shape, tuple) else np.asarray([1, 1])
    buf = io.BytesIO()
    np.savez(buf, data=data, indices=indices, indptr=indptr, format=np.array(b"csr"), shape=shape)
    return buf.getvalue()


def _checked(x):
    x.check_format()
    return x


def _constructors(case: Case, tmp: Path) -> dict:
    """Every public way to build a container from these components."""
    import sparse_ops.compat.mxnet as mx

    def load(blob: bytes):
        def run():
            path = tmp / "case.npz"
            path.write_bytes(blob)
            return so.load(path)
        return run

    if case.stype == "csr":
        data, indices, indptr = case.parts
        ctors = {
            "csr_matrix": lambda: so.csr_matrix((data, indices, indptr), shape=case.shape),
            "CSRNDArray": lambda: so.CSRNDArray(data, indices, indptr, case.shape),
            "CSRNDArray.check_format": lambda: so.CSRNDArray(data, indices, indptr, case.shape,
                                                             check=False).check_format(),
            "from_scipy_csr": lambda: so.csr_matrix(_scipy_matrix(case, "csr")),
            "from_scipy_csc": lambda: so.csr_matrix(_scipy_matrix(case, "csc")),
            "array(scipy)": lambda: so.array(_scipy_matrix(case, "csr")),
            # built unchecked, as MXNet does: check_format() refuses (and so does any first use)
            "mx.nd.sparse.csr_matrix": lambda: _checked(mx.nd.sparse.csr_matrix((data, indices, indptr),
                                                                                shape=case.shape)),
            "load(sparse_ops npz)": load(_npz_ours(case)),
        }
        if isinstance(case.shape, tuple) and len(case.shape) == 2:
            ctors["load(scipy npz)"] = load(_npz_scipy(case))
        return ctors
    data, indices = case.parts
    return {
        "row_sparse_array": lambda: so.row_sparse_array((data, indices), shape=case.shape),
        "RowSparseNDArray": lambda: so.RowSparseNDArray(data, indices, case.shape),
        "RowSparseNDArray.check_format": lambda: so.RowSparseNDArray(data, indices, case.shape,
                                                                     check=False).check_format(),
        "mx.nd.sparse.row_sparse_array": lambda: _checked(mx.nd.sparse.row_sparse_array((data, indices),
                                                                                        shape=case.shape)),
        "load(sparse_ops npz)": load(_npz_ours(case)),
    }


# MXNet casts index arrays to int64, so mx.nd.sparse constructors take integral floats
# (and nothing else that is not an integer): the result must equal the int64 input's.
MX_CASTS = ("indices_float", "indptr_float")


def _same_as_int64_parts(case: Case, x) -> bool:
    x.check_format()
    parts = [p.astype(np.int64) if k else p for k, p in enumerate(case.parts)]
    ref = (so.csr_matrix(tuple(parts), shape=case.shape) if case.stype == "csr"
           else so.row_sparse_array(tuple(parts), shape=case.shape))
    return np.array_equal(x.asnumpy(), ref.asnumpy())


# SciPy matrices (and files) may be non-canonical: csr_matrix sorts their indices and sums
# duplicates, as SciPy does; the result must be canonical and hold SciPy's values.
FROM_SCIPY = ("from_scipy_csr", "from_scipy_csc", "array(scipy)", "load(scipy npz)")
SCIPY_CANONICALISES = ("index_unsorted", "index_duplicate")


def _same_as_scipy(case: Case, x, csc: bool) -> bool:
    x.check_format()
    if csc:
        ref = sp.csc_matrix(case.parts, shape=case.shape[::-1]).toarray()
    else:
        ref = sp.csr_matrix(case.parts, shape=case.shape).toarray()
    return np.array_equal(x.asnumpy(), ref)


def _check_constructors(case: Case, tmp: Path) -> None:
    TALLY["inputs"] += 1
    for name, build in _constructors(case, tmp).items():
        TALLY["constructor_calls"] += 1
        try:
            x = build()
        except (ValueError, TypeError) as exc:
            assert str(exc), f"{name}: empty message for {case.describe()}"
            if name.startswith("load") and "pickle" in str(exc).lower() + str(exc.__cause__).lower():
                continue  # object arrays: refused before their content is even read
            if name == "load(scipy npz)" and "corrupt" in str(exc):
                continue  # SciPy's reader refuses some shapes itself (before our checks)
            expect = case.expect
            if name.startswith("load") and case.kind.startswith("shape_"):
                expect += "|shape"  # the file's header: "bad shape in header entry 0"
            assert re.search(expect, str(exc)), (
                f"{name} refused {case.describe()} without naming the problem: {type(exc).__name__}: {exc}")
        else:
            if name.startswith("mx.") and case.kind in MX_CASTS and _same_as_int64_parts(case, x):
                continue
            if name in FROM_SCIPY and case.kind in SCIPY_CANONICALISES and _same_as_scipy(
                    case, x, csc=name.endswith("csc")):
                continue
            TALLY["accepted_but_invalid"] += 1
            pytest.fail(f"{name} accepted an invalid input: {case.describe()}")


CTOR_SETTINGS = settings(max_examples=150, deadline=None,
                         suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                                HealthCheck.filter_too_much])


@CTOR_SETTINGS
@given(case=corrupted("csr"))
def test_csr_constructors_refuse_every_corruption(case, tmp_path):
    _check_constructors(case, tmp_path)


@CTOR_SETTINGS
@given(case=corrupted("row_sparse"))
def test_row_sparse_constructors_refuse_every_corruption(case, tmp_path):
    _check_constructors(case, tmp_path)


@pytest.mark.parametrize("stype,kind", [("csr", k) for k in CSR_KINDS] + [("row_sparse", k) for k in RSP_KINDS])
@settings(max_examples=3, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.filter_too_much])
@given(data=st.data())
def test_every_kind_is_refused_by_every_constructor(stype, kind, data, tmp_path):
    """Each kind at least a few times (the random draw above may miss rare ones)."""
    _check_constructors(data.draw(corrupted(stype, (kind,))), tmp_path)


# ---- operators, in child processes --------------------------------------------------------------
def run_children(stype: str, ops: str, mode: str, examples: int, seed: int, tmp: Path,
                 env: dict | None = None, timeout: float = 300) -> dict:
    """Run the fuzz child until it has gone through every step, restarting after a crash
    or a hang at the step that caused it. Returns counts, crashes, hangs and failures."""
    progress = tmp / f"progress-{stype}-{ops}-{mode}.jsonl"
    progress.write_text("")
    full_env = {**os.environ, **(env or {})}
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    start, crashes, hangs = 0, [], []
    for _ in range(100):
        before = len(progress.read_text().splitlines())
        cmd = [sys.executable, str(HERE / "fuzz_inputs.py"), "--stype", stype, "--ops", ops, "--mode", mode,
               "--examples", str(examples), "--seed", str(seed), "--start", str(start),
               "--progress", str(progress)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env, cwd=REPO)
        except subprocess.TimeoutExpired:
            proc = None
        if proc is not None and proc.returncode == 0:
            break
        events = [json.loads(line) for line in progress.read_text().splitlines()[before:]]
        calls = [e for e in events if "call" in e]
        last = calls[-1] if calls else None
        what = f"{last['op']}{last['params']} :: {last['case']}" if last else "before any op call"
        if proc is None:
            hangs.append(f"no answer in {timeout} s: {what}")
        else:
            crashes.append(f"exit {proc.returncode}: {what}\n{proc.stderr[-800:]}")
        if last is None or last["call"] <= start:
            break  # nothing to skip: reported, and not retried forever
        start = last["call"]
    events = [json.loads(line) for line in progress.read_text().splitlines()]
    counts = {"inputs": len({e["input"] for e in events if "input" in e}),
              "op_calls": sum("call" in e for e in events),
              "refused_at_build": sum("built" in e for e in events)}
    failures, called, listed, case = [], set(), set(), ""
    for e in events:
        listed |= set(e.get("ops", ()))
        if "call" in e:
            called.add(e["op"])
            case = e["case"]
        if "verdict" in e:
            counts[e["verdict"]] = counts.get(e["verdict"], 0) + 1
            if e["verdict"] != "named":
                failures.append(f"{e.get('op', 'check=False constructor')}: {e['detail']} :: {e.get('case', case)}")
    return {"counts": counts, "crashes": crashes, "hangs": hangs, "failures": failures, "ops_called": called,
            "ops_listed": listed}


def _assert_clean(label: str, result: dict) -> None:
    c = result["counts"]
    numbers = {"inputs": c["inputs"], "op_calls": c["op_calls"], "refused_at_build": c["refused_at_build"],
               "named": c.get("named", 0), "unnamed": c.get("unnamed", 0) + c.get("other_exception", 0),
               "accepted_but_invalid": c.get("accepted", 0), "crashes": len(result["crashes"]),
               "hangs": len(result["hangs"])}
    _report(label, numbers)
    problems = result["crashes"] + result["hangs"] + result["failures"]
    assert not problems, f"{label}: {len(problems)} problems:\n" + "\n".join(problems[:15])
    # the child's own table (a fresh process: built-ins and installed plugins) says which ops
    # take inputs; every one of them must have been called
    missing = result["ops_listed"] - result["ops_called"]
    assert not missing, f"{label}: ops never called: {sorted(missing)}"
    assert numbers["inputs"] > 0 and numbers["op_calls"] > 0


def _cookbook_installed() -> bool:
    from importlib.metadata import entry_points

    return any(ep.name == "cookbook" for ep in entry_points(group="sparse_ops.plugins"))


@pytest.mark.parametrize("stype", ["csr", "row_sparse"])
def test_unchecked_inputs_to_builtin_ops(stype, tmp_path):
    """check=False containers with each broken invariant, through every built-in op."""
    result = run_children(stype, "builtin", "unchecked", examples=40, seed=20240917, tmp=tmp_path)
    assert {"dot", "elemwise_add", "sum", "Embedding", "sgd_update"} <= result["ops_listed"]
    _assert_clean(f"built-in ops, {stype} built with check=False", result)


@pytest.mark.parametrize("stype", ["csr", "row_sparse"])
def test_unchecked_inputs_to_plugin_ops(stype, tmp_path):
    """The same through every plugin op (the cookbook's, when installed)."""
    if not _cookbook_installed():
        pytest.skip("the cookbook is not installed")
    result = run_children(stype, "plugins", "unchecked", examples=30, seed=7, tmp=tmp_path)
    assert {"csr_spmm", "embedding_bag", "lazy_adam"} <= result["ops_listed"]
    _assert_clean(f"plugin ops, {stype} built with check=False", result)


@pytest.mark.slow
@pytest.mark.parametrize("stype", ["csr", "row_sparse"])
def test_unchecked_inputs_to_every_op_many(stype, tmp_path):
    """A longer run over every op, built-in and plugin, with a seed of its own."""
    result = run_children(stype, "all", "unchecked", examples=300, seed=99, tmp=tmp_path)
    _assert_clean(f"every op, {stype} built with check=False, long run", result)


@pytest.mark.slow
@pytest.mark.parametrize("stype", ["csr", "row_sparse"])
def test_tampered_inputs_in_boundscheck_mode(stype, tmp_path):
    """Containers validated at construction whose index arrays the caller corrupts in place
    afterwards (out of contract: ops trust validated containers, and such inputs crashed
    the process in a normal run). In the debug mode no op may crash or hang: kernels raise
    IndexError for an out-of-bounds access. Wrong-but-in-bounds structures (unsorted,
    negative indices numba wraps around) still give some answer; the counts say how often."""
    result = run_children(stype, "all", "tampered", examples=20, seed=11, tmp=tmp_path,
                          env={"SPARSE_OPS_BOUNDSCHECK": "1"}, timeout=600)
    c = result["counts"]
    _report(f"every op, {stype} corrupted after validation, SPARSE_OPS_BOUNDSCHECK=1",
            {"inputs": c["inputs"], "op_calls": c["op_calls"],
             "raised": c["op_calls"] - c.get("accepted", 0), "gave_an_answer": c.get("accepted", 0),
             "crashes": len(result["crashes"]), "hangs": len(result["hangs"])})
    assert not result["crashes"] and not result["hangs"], "\n".join(result["crashes"] + result["hangs"])
    assert c["inputs"] > 0 and c["op_calls"] > 0


# ---- holes the fuzz found: regression tests ---------------------------------------------------------
F32 = np.float32


def _bad_unchecked_csr():
    """nnz = 0 but an interior indptr entry of 1: every kernel that walks the rows reads
    ``indices[0]`` of an empty array (this crashed the process in every op before)."""
    return so.CSRNDArray(np.zeros(0, F32), np.zeros(0, np.int32), np.array([0, 0, 1, 0], np.int32), (3, 2),
                         check=False)


@pytest.mark.parametrize("use", [
    lambda x: so.dot(x, so.ones((2, 2))),
    lambda x: so.elemwise_add(x, x),
    lambda x: so.Dropout(x),
    lambda x: so.sum(x, axis=0),
    lambda x: x.tostype("default"),
    lambda x: x.asscipy(),
    lambda x: x[0:2],
    lambda x: so.negative(x.copy()),  # a copy is as unchecked as its source
    lambda x: so.negative(x.astype("float64")),
    lambda x: so.array(x) + 1,
    lambda x: so.save(io.BytesIO(), x),  # reads the shape before writing anything
])
def test_check_false_container_is_validated_on_first_use(use):
    x = _bad_unchecked_csr()
    assert "check=False" in repr(x)  # repr never raises
    with pytest.raises(so.SparseFormatError, match=r"non-decreasing.*built with check=False"):
        use(x)


def test_check_false_container_that_is_valid_works_and_is_trusted_after_first_use():
    dense = np.array([[0, 1, 0], [2, 0, 3]], F32)
    m = sp.csr_matrix(dense)
    x = so.CSRNDArray(m.data, m.indices.astype(np.int32), m.indptr.astype(np.int64), (2, 3), check=False)
    assert x._unchecked is not None
    np.testing.assert_array_equal(so.dot(x, so.ones((3, 1))).asnumpy(), dense.sum(axis=1, keepdims=True))
    assert x._unchecked is None and x.indices.dtype == x.indptr.dtype == np.int64  # as check=True makes them
    y = so.RowSparseNDArray(np.ones((1, 3), F32), np.array([1]), [2, 3], check=False)
    y.check_format()  # a full check that passes also validates it
    assert y._unchecked is None and y.shape == (2, 3)


def test_unchecked_containers_that_look_empty_are_still_validated():
    """The cheap path for empty containers (the dispatcher's outputs) let a row_sparse whose
    one row of width 0 had no index through (found by the long fuzz run)."""
    cases = [
        (so.RowSparseNDArray(np.zeros((1, 0), F32), np.zeros(0, np.int64), (0, 0), check=False),
         "data must have shape"),
        (so.CSRNDArray(np.zeros(1, F32), np.zeros(0, np.int64), np.zeros(3, np.int64), (2, 2), check=False),
         "same length"),
        (so.CSRNDArray(np.zeros(0, F32), np.zeros(0, np.int64), np.zeros(3, np.int32), (2, 2), check=False), None),
    ]
    for x, problem in cases:
        if problem is None:
            assert so.negative(x).shape == (2, 2)  # valid: works
        else:
            with pytest.raises(so.SparseFormatError, match=problem):
                so.negative(x)


def test_check_format_refuses_an_invalid_unchecked_container_without_trusting_it():
    x = _bad_unchecked_csr()
    x.check_format(full_check=False)  # the O(1) checks pass: lengths and ends are right
    with pytest.raises(so.SparseFormatError, match="non-decreasing"):
        x.check_format()
    with pytest.raises(so.SparseFormatError, match="non-decreasing"):
        so.negative(x)


def test_index_views_stay_read_only():
    """x.indices could be made writable again (flags.writeable = True) and the container
    corrupted through it after validation."""
    x = so.csr_matrix(np.eye(3, dtype=F32))
    r = so.row_sparse_array(np.eye(3, dtype=F32))
    for view in (x.indices, x.indptr, x.aux_data(0), x.aux_data(1), r.indices, r.aux_data(0)):
        with pytest.raises(ValueError):
            view[0] = 5
        with pytest.raises(ValueError, match="WRITEABLE"):
            view.flags.writeable = True
        assert isinstance(view, np.ndarray) and hasattr(view, "asnumpy")
    x.data[0] = 7  # values stay writable, zero-copy
    assert x.asnumpy()[0, 0] == 7
    assert np.shares_memory(x.indices, x._indices)


def test_mxnet_constructors_refuse_non_integer_indices():
    """MXNet casts index arrays to int64: 0.5 became 0, True became 1, silently."""
    import sparse_ops.compat.mxnet as mx

    ones = np.ones(1, F32)
    for bad, match in ((np.array([0.5]), "integral values, got 0.5"), (np.array([np.nan]), "nan"),
                       (np.array([True]), "integer dtype, got bool"), (np.array([2**64 - 1], np.uint64), "int64")):
        with pytest.raises(so.SparseFormatError, match=match):
            mx.nd.sparse.csr_matrix((ones, bad, np.array([0, 1])), shape=(1, 2))
        with pytest.raises(so.SparseFormatError, match=match):
            mx.nd.sparse.row_sparse_array((np.ones((1, 2), F32), bad), shape=(2, 2))
    x = mx.nd.sparse.csr_matrix((ones, np.array([1.0]), np.array([0.0, 1.0])), shape=(1, 2))  # as MXNet
    np.testing.assert_array_equal(x.asnumpy(), [[0, 1]])


def _scipy_file(tmp_path, **members):
    path = tmp_path / "m.npz"
    np.savez(path, format=np.array(b"csr"), **members)
    return path


def test_load_of_a_scipy_file_refuses_float_indices(tmp_path):
    """SciPy's reader cast index arrays of any dtype (0.5 -> 0) before our checks saw them."""
    path = _scipy_file(tmp_path, data=np.ones(1, F32), indices=np.array([0.5]), indptr=np.array([0, 1]),
                       shape=np.array([1, 2]))
    with pytest.raises(so.SparseFormatError, match="indices must have an integer dtype, got float64"):
        so.load(path)
    # non-canonical SciPy files are still read as SciPy reads them (sorted, duplicates summed)
    path = _scipy_file(tmp_path, data=np.array([1, 2, 4], F32), indices=np.array([1, 0, 1]),
                       indptr=np.array([0, 3]), shape=np.array([1, 2]))
    x = so.load(path)
    x.check_format()
    np.testing.assert_array_equal(x.asnumpy(), [[2, 5]])


def test_scipy_matrix_of_unsupported_dtype_is_refused_before_scipy_converts_it():
    m = sp.csc_matrix(np.eye(2, dtype=F32))
    m.data = m.data.astype(object)
    with pytest.raises(TypeError, match="dtype object are not supported"):
        so.csr_matrix(m)
