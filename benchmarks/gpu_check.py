"""``python -m benchmarks.gpu_check [--smoke]``: everything a lent GPU must show in one run
(issue 40), as one table.

Correctness, every gpu path against the cpu:

- **ops**: every registered op with ``samples()`` (built-ins and the cookbook's): its first
  sample on the cpu and on gpu(0), outputs' storage types, dtypes and values, inputs updated
  in place, and the gradients of a fixed random loss (``tests/matrix/op_face_matrix.py``'s
  building blocks, the same comparison as the op x face matrix's gpu column);
- **streams**: the gpu ops that launch from a bare Device or an op context, on a
  non-blocking side stream, and on gpu(1) while gpu(0) is current when there is a second
  GPU (``stream_device_check``);
- **torch**, **jax**: the bridges on cuda tensors / gpu arrays (``torch_gpu_check``,
  ``jax_gpu_check``), where this python has torch with CUDA / jax with a gpu;
- **c**: the C examples with gpu kernels (``cookbook/clib/relu.cu`` and the CUDA plugin
  template of ``sparse-ops new-plugin``) built with nvcc, their ops run on both devices.

Speed, what only hardware can measure (medians after a warm-up, the device synchronised
around each call):

- **dot**: ``dot(csr, dense)`` float32, 200k x 10k, 20 stored values a row on average,
  uniform and power-law rows, at 1-256 dense columns, against cuSPARSE (``cupyx``);
- **spgemm**: ``dot(csr, csr)`` on a power-law graph squared and a uniform pair against
  cuSPARSE's SpGEMM, results compared;
- **rows**: power-law against uniform rows with the same stored values for the merge
  (``elemwise_add``), ``csr_row_softmax``, ``gcn_norm`` and ``fm_interaction``: the ratio is
  the load imbalance of kernels that give a row to a thread;
- **embedding**: an embedding training step (1M x 64 table, 4096 Zipf ids) against torch's
  ``nn.Embedding(sparse=True)`` + SGD on cuda.

Each section yields rows (section, case, measurement, reference, ratio or verdict, status):
status is "ok", "FAIL: why" or "skipped: why". A section that raises records a FAIL row and
the others go on; SIGTERM (``timeout``) prints the rows so far. The run prints one markdown
table, then "N ok, M failed, K skipped", and exits 1 if any row failed. Sized to finish in
a few minutes on one H100; ``--smoke`` runs tiny sizes and one repeat, for numba's CUDA
simulator (``SPARSE_OPS_CUDA_SIM=1``), where the cuSPARSE anchors become SciPy on the host
("scipy (smoke)") when CuPy is absent. Without a gpu every section is skipped.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, NamedTuple

import numpy as np
import scipy.sparse as sp

ROOT = Path(__file__).resolve().parents[1]
HEADER = ["section", "case", "measurement", "reference", "ratio / verdict", "status"]
SMOKE_OPS = 15  # ops run in --smoke: every k-th by name, a spread of built-ins, backward ops and the cookbook's
OPS_BUDGET_S = 150  # the ops section stops starting new ops after this long (cold kernel compiles)
WIDTHS = (1, 2, 4, 8, 16, 32, 64, 128, 256)  # dense columns of dot(csr, dense); a warp is 32 lanes
SMOKE_WIDTHS = (1, 32, 256)


class Row(NamedTuple):
    section: str
    case: str
    measurement: str = ""
    reference: str = ""
    ratio: str = ""
    status: str = "ok"


class Stopped(BaseException):
    """SIGTERM arrived (``timeout`` in gpu_check.sh): not an Exception, so no section
    swallows it; the run stops and prints what it has."""


@dataclasses.dataclass
class Anchor:
    """What our gpu results are timed against: cuSPARSE through ``cupyx`` on the gpu, or
    SciPy on the host in a smoke run without CuPy."""

    name: str
    xp: Any  # cupy or numpy
    sparse: Any  # cupyx.scipy.sparse or scipy.sparse

    def csr(self, m: sp.csr_matrix) -> Any:
        return self.sparse.csr_matrix((self.xp.asarray(m.data), self.xp.asarray(m.indices),
                                       self.xp.asarray(m.indptr)), shape=m.shape)

    def dense(self, a: np.ndarray) -> Any:
        return self.xp.asarray(a)

    def host(self, x: Any) -> Any:
        """A result as NumPy / SciPy."""
        return x if self.xp is np else x.get()


@dataclasses.dataclass
class Setup:
    """What every section shares: the run's sizes, the gpu, the anchor, the timer."""

    smoke: bool
    real: bool  # a real GPU (False: numba's CUDA simulator)
    cupy: Any  # the module, or None
    anchor: Anchor | None  # None: no anchor for this run (full sizes without CuPy)
    repeat: int

    @classmethod
    def make(cls, smoke: bool) -> "Setup":
        import sparse_ops as so

        try:
            import cupy
            import cupyx.scipy.sparse as csp
        except ImportError:
            cupy = csp = None
        if cupy is not None:
            anchor = Anchor("cuSPARSE (cupyx)", cupy, csp)
        else:
            anchor = Anchor("scipy (smoke)", np, sp) if smoke else None
        return cls(smoke, not so.cuda.is_simulator(), cupy, anchor, repeat=1 if smoke else 10)

    @property
    def gpu(self) -> Any:
        import sparse_ops as so

        return so.gpu(0)

    def sync(self) -> None:
        if self.cupy is not None:
            self.cupy.cuda.get_current_stream().synchronize()

    def timed(self, fn: Callable[[], Any], sync: Callable[[], None] | None = None) -> tuple[float, Any]:
        """(median seconds of ``repeat`` calls, the warm-up call's result): one untimed call
        first (kernels compile or load), ``sync`` (the device's current stream) after each."""
        sync = sync or self.sync
        result = fn()
        sync()
        times = []
        for _ in range(self.repeat):
            t0 = time.perf_counter()
            fn()
            sync()
            times.append(time.perf_counter() - t0)
        return statistics.median(times), result

    def release(self) -> None:
        """Give the memory of the section that ended back (CuPy keeps freed blocks pooled)."""
        gc.collect()
        if self.cupy is not None:
            self.cupy.get_default_memory_pool().free_all_blocks()


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200] if text else ''}".rstrip(": ")


def _import_from(folder: Path, name: str) -> Any:
    """Import module ``name`` from ``folder`` (test helpers outside any package), the way
    pytest's rootdir import finds them (an import already made is reused)."""
    import importlib

    sys.path.insert(0, str(folder))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(folder))


# ---- inputs ---------------------------------------------------------------------------------------------
def csr_with_lengths(lengths: np.ndarray, cols: int, seed: int) -> sp.csr_matrix:
    """A canonical float32 csr whose row i stores ``lengths[i]`` distinct random columns
    (sorted), values in [0.5, 1.5). Vectorised: each stored value draws a number in
    [0, cols - its row's length]; sorted within the row and shifted by its rank there, the
    draws become strictly increasing columns below ``cols``."""
    rng = np.random.default_rng(seed)
    lengths = np.asarray(lengths, dtype=np.int64)
    indptr = np.zeros(lengths.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    row = np.repeat(np.arange(lengths.shape[0]), lengths)
    draw = rng.integers(0, (cols - lengths + 1)[row])
    offset = row * (cols + 1)
    draw = np.sort(offset + draw) - offset  # rows stay in order; within a row, the draws sort
    indices = draw + (np.arange(indptr[-1]) - indptr[row])
    data = rng.uniform(0.5, 1.5, size=indptr[-1]).astype(np.float32)
    return sp.csr_matrix((data, indices.astype(np.int32), indptr.astype(np.int32)), shape=(lengths.shape[0], cols))


def power_law_lengths(rows: int, cols: int, mean: float, seed: int, alpha: float = 1.2) -> np.ndarray:
    """Row lengths with a Pareto tail (P(length > x) ~ x^-alpha), scaled to ``mean`` and clipped
    to [1, cols]: most rows a few values long, a few as long as the matrix is wide."""
    w = np.random.default_rng(seed).pareto(alpha, rows) + 1.0
    return np.clip(np.rint(w * (mean / w.mean())), 1, cols).astype(np.int64)


def uniform_lengths(rows: int, total: int) -> np.ndarray:
    """``rows`` lengths summing to ``total``, differing by at most one."""
    return total // rows + (np.arange(rows) < total % rows).astype(np.int64)


def row_pair(rows: int, cols: int, mean: float, seed: int) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """(uniform rows, power-law rows): two csr of the same shape and the same stored values."""
    lengths = power_law_lengths(rows, cols, mean, seed)
    return (csr_with_lengths(uniform_lengths(rows, int(lengths.sum())), cols, seed + 1),
            csr_with_lengths(lengths, cols, seed + 2))


def _size(m: sp.csr_matrix) -> str:
    longest = int(np.diff(m.indptr).max()) if m.shape[0] else 0
    return f"{m.shape[0]:,} x {m.shape[1]:,}, {m.nnz:,} nnz, longest row {longest:,}"


# ---- comparing ------------------------------------------------------------------------------------------
def csr_problem(got: sp.csr_matrix, want: sp.csr_matrix, rtol: float = 1e-4) -> str | None:
    """What differs between two csr results (None: nothing): ``want`` canonicalised first
    (duplicates summed, columns sorted, explicit zeros dropped, as ours are); the same
    structure, values within ``rtol`` of the largest."""
    want = want.tocsr(copy=True)
    want.sum_duplicates()
    want.sort_indices()
    want.eliminate_zeros()
    if got.shape != want.shape or got.nnz != want.nnz:
        return f"shape {got.shape} with {got.nnz} stored, the reference {want.shape} with {want.nnz}"
    if not (np.array_equal(got.indptr, want.indptr) and np.array_equal(got.indices, want.indices)):
        return "the stored positions differ"
    return dense_problem(got.data, want.data, rtol)


def dense_problem(got: np.ndarray, want: np.ndarray, rtol: float = 1e-4) -> str | None:
    """None when ``got`` is within ``rtol`` of ``want``'s largest magnitude everywhere."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return f"shape {got.shape}, the reference {want.shape}"
    if not got.size:
        return None
    err = float(np.max(np.abs(got - want))) / max(float(np.max(np.abs(want))), np.finfo(np.float32).tiny)
    return None if err < rtol else f"max relative difference {err:.2e} (limit {rtol:.0e})"


def result_problem(got: Any, want: Any) -> str | None:
    """What differs between a gpu result and the cpu's (containers of the same storage type)."""
    import sparse_ops as so

    if got.stype != want.stype:
        return f"storage type {got.stype}, the cpu's {want.stype}"
    if got.stype == "csr":
        return csr_problem(got.to(so.cpu()).asscipy(), want.asscipy())
    return dense_problem(got.asnumpy(), want.asnumpy())


# ---- correctness: every op -------------------------------------------------------------------------------
def _matrix() -> Any:
    """``tests/matrix/op_face_matrix.py``: the op x face matrix's samples, faces and comparisons."""
    return _import_from(ROOT / "tests" / "matrix", "op_face_matrix")


def _host(a: Any) -> np.ndarray:
    return a.get() if hasattr(a, "get") else np.asarray(a)


def gpu_grad(M: Any, opdef: Any, xs: list, params: dict, weights: list) -> Any:
    """``M.native_grad`` with the inputs and head gradients on gpu(0): the op's outputs and
    the gradients of ``L = sum_j <dense(out_j), W_j>``, brought to the host."""
    import sparse_ops as so
    from sparse_ops import autograd
    from sparse_ops.bridging import aligned

    gpu = so.gpu(0)
    xs = [x.copy().to(gpu) for x in xs]
    for x in xs:
        if M._float(x):
            x.attach_grad()
    with autograd.record():
        outs = M._as_list(so.invoke(opdef, xs, params))
    heads = [so.array(w.astype(o.dtype), device=gpu) for o, w in zip(outs, weights)]
    heads = [h if o.stype == "default" else o._with_values(aligned(h, o), copy_aux=False) for o, h in zip(outs, heads)]
    autograd.backward(outs, heads)
    grads = [_host(aligned(x.grad, x)) if M._float(x) and x.grad is not None else None for x in xs]
    return M.Result([(o.stype, o.asnumpy()) for o in outs], [], grads)


def _dtype_problem(ref: Any, got: Any) -> str | None:
    for j, ((_, r), (_, g)) in enumerate(zip(ref.outputs, got.outputs)):
        if np.asarray(r).dtype != np.asarray(g).dtype:
            return f"output {j} is {np.asarray(g).dtype}, native gives {np.asarray(r).dtype}"
    return None


def op_on_gpu(M: Any, opdef: Any) -> str:
    """'pass', 'declared: why' (the op says it has no gpu kernel) or 'FAIL: what': the op's
    first sample on gpu(0) against the cpu: ``M.compare`` (storage types, values, inputs
    updated in place), the outputs' dtypes, then the gradients where the op has them."""
    from sparse_ops import faces

    xs, params = M.samples_of(opdef)
    reasons = faces.unsupported(opdef, opdef.instance(params), [x.shape for x in xs], [x.stype for x in xs])
    if "gpu" in reasons:
        return f"declared: {reasons['gpu']}"
    random = "random" in opdef.resources
    step = "values"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = M.native(opdef, xs, params)
            got = M.gpu_values(opdef, xs, params)
            problem = M.compare(ref, got, random) or _dtype_problem(ref, got)
            if problem is None and "autograd" not in reasons:
                weights = M.head_weights(ref.outputs)
                try:
                    cpu = M.native_grad(opdef, xs, params, weights)
                except Exception:  # noqa: BLE001 - no gradient on the cpu either: the host matrix reports it
                    return "pass"
                step = "gradients"
                problem = M.compare(cpu, gpu_grad(M, opdef, xs, params, weights), random)
                problem = problem and f"gradients: {problem}"
    except Exception as exc:  # noqa: BLE001 - a failing op is a row; the others go on
        last = traceback.extract_tb(exc.__traceback__)[-1]
        return f"FAIL: {step}: {_first_line(exc)} ({last.filename.rsplit('/', 1)[-1]}:{last.lineno})"
    return "pass" if problem is None else f"FAIL: {problem}"


def ops_section(s: Setup) -> Iterator[Row]:
    from sparse_ops import registry

    M = _matrix()
    names = sorted(d.name for d in registry.all_ops() if M.samples_of(d) is not None)
    if s.smoke:
        names = names[::max(1, len(names) // SMOKE_OPS)]
    cells: dict[str, str] = {}
    deadline = time.monotonic() + OPS_BUDGET_S
    for name in names:
        if time.monotonic() > deadline:
            break
        cells[name] = op_on_gpu(M, registry.get_op(name))
    passed = sum(c == "pass" for c in cells.values())
    declared = sum(c.startswith("declared") for c in cells.values())
    failed = {n: c for n, c in cells.items() if c.startswith("FAIL")}
    yield Row("ops", "first sample of each op: cpu vs gpu(0) (values, stypes, dtypes, gradients)",
              f"{len(cells)} ops: {passed} pass, {declared} declared, {len(failed)} fail", "cpu (native)", "",
              "ok" if not failed else f"FAIL: {len(failed)} ops differ (their rows follow)")
    for name, cell in failed.items():
        yield Row("ops", f"`{name}`", "", "cpu (native)", "", cell)
    if len(cells) < len(names):
        yield Row("ops", f"{len(names) - len(cells)} ops not run", "", "", "",
                  f"skipped: the section's {OPS_BUDGET_S} s were spent (first not run: {names[len(cells)]})")


# ---- correctness: streams, devices, bridges, C ---------------------------------------------------------------
def streams_section(s: Setup) -> Iterator[Row]:
    from .stream_device_check import results

    for name, seen, status in results(rows=60 if s.smoke else 300):
        yield Row("streams", name, seen, "cpu", "", status)


def torch_section(s: Setup) -> Iterator[Row]:
    if not s.real:
        yield Row("torch", "the PyTorch bridge on cuda tensors", status="skipped: the simulated gpu is not torch's")
        return
    try:
        import torch
    except ImportError:
        yield Row("torch", "the PyTorch bridge on cuda tensors", status="skipped: torch is not installed")
        return
    if not torch.cuda.is_available():
        yield Row("torch", "the PyTorch bridge on cuda tensors", status="skipped: torch has no CUDA here")
        return
    from .torch_gpu_check import checks

    for line in checks():
        yield Row("torch", line)


def jax_section(s: Setup) -> Iterator[Row]:
    if not s.real:
        yield Row("jax", "the JAX bridge on gpu arrays", status="skipped: the simulated gpu is not jax's")
        return
    # jax takes 75% of the GPU's memory on its first use unless told otherwise
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    try:
        import jax
    except ImportError:
        yield Row("jax", "the JAX bridge on gpu arrays", status="skipped: jax is not installed")
        return
    from .jax_gpu_check import _gpu, checks

    dev = _gpu(jax)
    if dev is None:
        yield Row("jax", "the JAX bridge on gpu arrays", status="skipped: jax sees no gpu here")
        return
    for line, times in checks(dev):
        if times is None:
            yield Row("jax", line)
        else:
            ours, ref = times
            yield Row("jax", line, f"{ours:.1f} us", f"BCSR @ dense {ref:.1f} us", f"{ours / ref:.2f}x")


def _c_libraries(folder: Path) -> Iterator[tuple[str, Path]]:
    """(what, path) of each C example with gpu kernels, built with nvcc into ``folder``:
    cookbook/clib/relu.cu (the cookbook tests' build) and the CUDA template of
    ``sparse-ops new-plugin``."""
    from sparse_ops.sdk.cbuild import compile_library
    from sparse_ops.sdk.scaffold import create

    clib_build = _import_from(ROOT / "cookbook" / "tests", "clib_build")
    yield "cookbook/clib/relu.cu", clib_build.build("relu", cuda=True)
    project = create("gpucheck_template", folder, lang="cuda")
    source = project / "csrc" / "gpucheck_template.cu"
    yield "the CUDA plugin template", compile_library([source], folder / "libgpucheck_template.so")


def c_section(s: Setup) -> Iterator[Row]:
    """Built and loaded here even in the simulator (the build and the gpu kernels' presence
    are checked); run only on a real GPU: C kernels need device memory."""
    import sparse_ops as so
    from sparse_ops import registry
    from sparse_ops.sdk.cbuild import nvcc
    from sparse_ops.sdk.testing import table_restored

    if nvcc() is None:
        yield Row("c", "the C examples' gpu kernels", status="skipped: no nvcc")
        return
    M = _matrix()
    with table_restored(), tempfile.TemporaryDirectory(prefix="gpu_check_clib_") as folder:
        for what, path in _c_libraries(Path(folder)):
            before = {d.name for d in registry.all_ops()}
            so.library.load(str(path))
            for name in sorted({d.name for d in registry.all_ops()} - before):
                opdef = registry.get_op(name)
                case = f"`{name}` ({what}, nvcc)"
                if not any(d == "gpu" for d in opdef.fcompute):
                    yield Row("c", case, status="FAIL: the nvcc build has no gpu kernel")
                elif M.samples_of(opdef) is None:
                    yield Row("c", case, "gpu kernel built", status="skipped: the op declares no samples")
                elif not s.real:
                    yield Row("c", case, "gpu kernel built", status="skipped: C gpu kernels need a real GPU")
                else:
                    cell = op_on_gpu(M, opdef)
                    yield Row("c", case, "cpu vs gpu(0)", "cpu", "", "ok" if cell == "pass" else cell)


# ---- speed -------------------------------------------------------------------------------------------------
def _no_anchor(section: str) -> Row:
    """The row of a timing section in a full-size run without CuPy (the simulator without --smoke)."""
    return Row(section, "timings", status="skipped: no CuPy (the full sizes need a real GPU; the simulator runs "
                                          "--smoke)")


def dot_section(s: Setup) -> Iterator[Row]:
    """csr @ dense at 1-256 columns: a kernel giving a warp to a row wastes lanes below 32."""
    import sparse_ops as so

    if s.anchor is None:
        yield _no_anchor("dot")
        return
    rows, cols, mean = (64, 128, 4) if s.smoke else (200_000, 10_000, 20)
    rng = np.random.default_rng(0)
    for label, host in zip(("uniform", "power-law"), row_pair(rows, cols, mean, seed=10)):
        ours, theirs = so.csr_matrix(host, device=s.gpu), s.anchor.csr(host)
        for k in SMOKE_WIDTHS if s.smoke else WIDTHS:
            xh = rng.random((cols, k), dtype=np.float32)
            x, xr = so.array(xh, device=s.gpu), s.anchor.dense(xh)
            t_ours, got = s.timed(lambda: so.dot(ours, x))
            t_ref, want = s.timed(lambda: theirs @ xr)
            problem = dense_problem(got.asnumpy(), s.anchor.host(want))
            yield Row("dot", f"csr @ dense, {label} rows ({_size(host)}), {k} columns", _ms(t_ours),
                      f"{s.anchor.name} {_ms(t_ref)}", f"{t_ours / t_ref:.2f}x",
                      "ok" if problem is None else f"FAIL: {problem}")
            del got, want


def spgemm_section(s: Setup) -> Iterator[Row]:
    import sparse_ops as so

    from .bench_spgemm import power_law, uniform

    if s.anchor is None:
        yield _no_anchor("spgemm")
        return
    n = 100 if s.smoke else 100_000
    rng = np.random.default_rng(0)
    graph = power_law(rng, n, 10 * n)
    pair = uniform(rng, n, 10 * n), uniform(rng, n, 10 * n)
    for label, a, b in (("power-law graph A @ A", graph, graph), ("uniform A @ B, 10 a row", *pair)):
        sa, sb = so.csr_matrix(a, device=s.gpu), so.csr_matrix(b, device=s.gpu)
        ra, rb = s.anchor.csr(a), s.anchor.csr(b)
        t_ours, got = s.timed(lambda: so.dot(sa, sb))
        t_ref, want = s.timed(lambda: ra @ rb)
        problem = csr_problem(got.to(so.cpu()).asscipy(), s.anchor.host(want))
        yield Row("spgemm", f"{label} ({n:,} nodes, nnz {a.nnz:,} x {b.nnz:,} -> {got.nnz:,})", _ms(t_ours),
                  f"{s.anchor.name} {_ms(t_ref)}", f"{t_ours / t_ref:.2f}x",
                  "ok" if problem is None else f"FAIL: {problem}")
        del got, want


def _row_kernels(rows: int, cols: int, mean: float, factors: int) -> Iterator[tuple[str, Callable, list]]:
    """(kernel, f(*inputs), [uniform inputs, power-law inputs] as host arrays) for each kernel
    timed on both row distributions; square adjacencies for gcn_norm."""
    import sparse_ops as so

    uni, pl = row_pair(rows, cols, mean, seed=20)
    uni_b, pl_b = row_pair(rows, cols, mean, seed=30)
    v = np.random.default_rng(40).standard_normal((cols, factors)).astype(np.float32)
    yield "elemwise_add(csr, csr) (the merge)", so.elemwise_add, [(uni, uni_b), (pl, pl_b)]
    yield "csr_row_softmax", so.ops.csr_row_softmax, [(uni,), (pl,)]
    yield f"fm_interaction (X csr, V {cols:,} x {factors})", so.ops.fm_interaction, [(uni, v), (pl, v)]
    adj_uni, adj_pl = row_pair(rows, rows, mean, seed=50)
    yield "gcn_norm (square adjacency)", so.ops.gcn_norm, [(adj_uni,), (adj_pl,)]


def rows_section(s: Setup) -> Iterator[Row]:
    """Power-law / uniform time of kernels that give each row one thread: the longest row
    sets the time. Each result is checked against the same op on the cpu."""
    import sparse_ops as so

    if s.anchor is None:
        yield _no_anchor("rows")
        return
    rows, cols, mean, factors = (64, 128, 4, 4) if s.smoke else (200_000, 10_000, 20, 16)

    def on(device, a):
        return so.csr_matrix(a, device=device) if sp.issparse(a) else so.array(a, device=device)

    for kernel, fn, variants in _row_kernels(rows, cols, mean, factors):
        times, problems = [], []
        for inputs in variants:
            gpu_in = [on(s.gpu, a) for a in inputs]
            t, got = s.timed(lambda: fn(*gpu_in))
            problem = result_problem(got, fn(*[on(so.cpu(), a) for a in inputs]))
            times.append(t)
            problems += [problem] if problem else []
        shape = variants[1][0]
        yield Row("rows", f"{kernel}: power-law rows ({_size(shape)}) vs uniform rows", f"power-law {_ms(times[1])}",
                  f"uniform {_ms(times[0])}", f"{times[1] / times[0]:.2f}x",
                  "ok" if not problems else f"FAIL: differs from the cpu: {problems[0]}")


def embedding_section(s: Setup) -> Iterator[Row]:
    """Lookup + row_sparse gradient + lazy SGD against torch on cuda (on the cpu in a smoke
    run without torch CUDA, to run the code)."""
    from .bench_gpu import _torch_sync, embedding_steps

    if s.anchor is None:
        yield _no_anchor("embedding")
        return
    vocab, dim, batch = (1000, 8, 64) if s.smoke else (1_000_000, 64, 4096)
    if _torch_sync("cuda") is not None:
        device, reference = "cuda", "torch cuda"
    elif s.smoke and _torch_sync("cpu") is not None:
        device, reference = "cpu", "torch cpu (smoke)"
    else:
        device = reference = None
    ours, theirs = embedding_steps(s.gpu, vocab, dim, batch, torch_device=device)
    t_ours, _ = s.timed(ours)
    case = f"embedding step {vocab:,} x {dim}, {batch:,} zipf ids (lookup, row_sparse grad, lazy sgd)"
    if theirs is None:
        yield Row("embedding", case, _ms(t_ours), "", "", "skipped: no torch with CUDA to compare with")
        return
    t_ref, _ = s.timed(theirs, sync=_torch_sync(device))
    yield Row("embedding", case, _ms(t_ours), f"{reference} {_ms(t_ref)}", f"{t_ours / t_ref:.2f}x")


# in this order: the bridges last, so that whatever torch's and jax's CUDA set-up does to the
# process comes after the timings
SECTIONS: dict[str, Callable[[Setup], Iterable[Row]]] = {
    "ops": ops_section, "streams": streams_section, "c": c_section, "dot": dot_section, "spgemm": spgemm_section,
    "rows": rows_section, "embedding": embedding_section, "torch": torch_section, "jax": jax_section,
}


# ---- the run -------------------------------------------------------------------------------------------------
def run_section(name: str, section: Callable[[Setup], Iterable[Row]], setup: Setup, rows: list[Row]) -> None:
    """Append the section's rows to ``rows`` as they come; an exception becomes a FAIL row
    and the run goes on."""
    start, before = time.monotonic(), len(rows)
    try:
        for row in section(setup):
            rows.append(row)
    except Stopped:
        rows.append(Row(name, "(stopped)", status="FAIL: SIGTERM (the time limit) arrived during this section"))
        raise
    except Exception as exc:  # noqa: BLE001 - one broken section must not hide the others' rows
        rows.append(Row(name, "(the section raised)", status=f"FAIL: {_first_line(exc)}"))
    finally:
        setup.release()
    failed = sum(r.status.startswith("FAIL") for r in rows[before:])
    print(f"[gpu_check] {name}: {time.monotonic() - start:.1f} s, {len(rows) - before} rows, {failed} failed",
          file=sys.stderr, flush=True)


def run(smoke: bool, rows: list[Row] | None = None, sections: Iterable[str] | None = None) -> list[Row]:
    """Every section's rows (appended to ``rows`` when given, so a caller keeps them if the
    run is stopped); ``sections`` picks some by name. Without a gpu each is skipped."""
    import sparse_ops as so

    rows = [] if rows is None else rows
    chosen = list(SECTIONS) if sections is None else list(sections)
    if so.num_gpus() == 0:
        rows += [Row(name, "(all)", status="skipped: no gpu") for name in chosen]
        return rows
    setup = Setup.make(smoke)
    for name in chosen:
        run_section(name, SECTIONS[name], setup, rows)
    return rows


def table(rows: list[Row]) -> str:
    from ._timing import markdown_table

    return markdown_table(HEADER, [list(r) for r in rows])


def counts(rows: list[Row]) -> tuple[int, int, int]:
    """(ok, failed, skipped)."""
    failed = sum(r.status.startswith("FAIL") for r in rows)
    skipped = sum(r.status.startswith("skipped") for r in rows)
    return len(rows) - failed - skipped, failed, skipped


@contextlib.contextmanager
def _stop_on_sigterm() -> Iterator[None]:
    """Turn SIGTERM into ``Stopped`` for the block (main thread only: signals go there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        raise Stopped()

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one repeat (for the CUDA simulator)")
    parser.add_argument("--sections", nargs="+", choices=list(SECTIONS), help="only these sections")
    args = parser.parse_args(argv)
    start, rows = time.monotonic(), []
    with _stop_on_sigterm():
        try:
            run(args.smoke, rows, args.sections)
        except Stopped:
            pass
    print(table(rows))
    ok, failed, skipped = counts(rows)
    print(f"{ok} ok, {failed} failed, {skipped} skipped ({time.monotonic() - start:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
