"""Cold start (issue 18): a fresh process importing sparse_ops and running one small csr dot.

Every case is a whole fresh interpreter (``python -c``), timed from outside: wall time of
the subprocess, interpreter start-up included, and its CPU time (user + system, from
``getrusage`` of the children: less swayed by other load on the machine than wall time).
Inside, ``time.perf_counter`` splits the run into phases. The cases, run in alternation
(one round runs each once), medians over the rounds:

* ``import sparse_ops`` alone (installed plugins, the cookbook among them, load at import);
* SciPy, the reference: ``import numpy, scipy.sparse``, a 200 x 100 float32 csr matrix
  with 5 values a row, ``csr @ dense`` with 16 columns;
* sparse_ops on the same data: ``import sparse_ops``, ``sparse_ops.csr_matrix``,
  ``sparse_ops.dot``, with numba's on-disk cache warm (an untimed first run fills it: the
  normal case after the first use on a machine, or after ``sparse-ops warmup``). Its
  phases: the import, numba's start (``import sparse_ops.kernels``: numba's import and
  its cpu target's registries, which the first kernel call would pay anyway), and the call
  (the dispatcher loading the cached machine code, the plan, the kernel). Target: at most
  0.7 s of wall time; the ratio to SciPy is reported;
* the same with numba's cache cold (an empty temporary ``NUMBA_CACHE_DIR`` each run:
  every kernel the call reaches compiles; the first use after an install).
"""
from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from ._timing import markdown_table

TARGET_S = 0.7  # issue 18: whole-process wall time of the warm sparse_ops case

_DATA = """\
indptr = np.arange(0, 1001, 5, dtype=np.int64)  # 200 x 100, 5 values a row
indices = (np.arange(1000, dtype=np.int64) * 7) % 100
indices.reshape(200, 5).sort(axis=1)
values = np.ones(1000, np.float32)
dense = np.ones((100, 16), np.float32)
"""
IMPORT_ONLY = """\
import time; t0 = time.perf_counter()
import sparse_ops
import json; print(json.dumps({"import": time.perf_counter() - t0}))
"""
SPARSE_OPS_DOT = f"""\
import time; t0 = time.perf_counter()
import numpy as np
import sparse_ops as so
t1 = time.perf_counter()
import sparse_ops.kernels
t2 = time.perf_counter()
{_DATA}a = so.csr_matrix((values, indices, indptr), shape=(200, 100))
y = so.dot(a, so.array(dense)).asnumpy()
t3 = time.perf_counter()
assert y.shape == (200, 16) and float(y.sum()) == 16000.0
import json; print(json.dumps({{"import": t1 - t0, "numba start": t2 - t1, "first dot": t3 - t2}}))
"""
SCIPY_DOT = f"""\
import time; t0 = time.perf_counter()
import numpy as np
import scipy.sparse
t1 = time.perf_counter()
{_DATA}a = scipy.sparse.csr_matrix((values, indices, indptr), shape=(200, 100))
y = a @ dense
t2 = time.perf_counter()
assert y.shape == (200, 16) and float(y.sum()) == 16000.0
import json; print(json.dumps({{"import": t1 - t0, "first dot": t2 - t1}}))
"""
PHASES = ("import", "numba start", "first dot")


@dataclass
class Row:
    case: str
    wall_s: float | None  # median whole-subprocess wall time
    cpu_s: float | None  # median whole-subprocess cpu time (user + system)
    phases: dict[str, float] = field(default_factory=dict)  # median in-process phase times
    runs: int = 0
    note: str = ""

    def row(self) -> list[str]:
        def ms(v: float | None) -> str:
            return "-" if v is None else f"{v * 1e3:.0f}"
        return [self.case, ms(self.wall_s), ms(self.cpu_s), *(ms(self.phases.get(p)) for p in PHASES),
                str(self.runs), self.note]


@dataclass
class ColdStart:
    rows: list[Row]
    ours: Row  # the warm sparse_ops case
    scipy: Row
    ratio: float  # median of the per-round wall ratios ours / SciPy
    load: str  # load average before and after

    @property
    def met(self) -> bool:
        return self.ours.wall_s is not None and self.ours.wall_s <= TARGET_S


HEADER = ["fresh process", "wall (ms)", "cpu (ms)", "import (ms)", "numba start (ms)", "first dot (ms)", "runs",
          "note"]


def _run(code: str, cache_dir: str | None = None) -> tuple[float, float, dict[str, float]]:
    """(wall, cpu, phases) of one fresh interpreter running ``code``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as installed: .pyc on
    if cache_dir is not None:
        env["NUMBA_CACHE_DIR"] = cache_dir
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env).stdout
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, json.loads(out.strip().splitlines()[-1])


def _row(case: str, samples: list[tuple[float, float, dict[str, float]]], note: str = "") -> Row:
    phases = {p: statistics.median(s[2][p] for s in samples) for p in PHASES if p in samples[0][2]}
    return Row(case, statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples), phases,
               len(samples), note)


def _load() -> str:
    return "/".join(f"{v:.2f}" for v in os.getloadavg())


def run(repeat: int = 15, cold_repeat: int = 3, warmup: bool = True) -> ColdStart:
    """The cases in ``repeat`` alternated rounds (cold: ``cold_repeat`` runs); ``warmup=False``
    skips the untimed first runs (a smoke run: the numbers then include whatever the file
    and numba caches held)."""
    load_before = _load()
    if warmup:
        _run(IMPORT_ONLY)  # fills the file cache and writes .pyc files
        _run(SPARSE_OPS_DOT)  # fills numba's on-disk cache (when the kernels were not cached yet)
        _run(SCIPY_DOT)
    imports, ours, ref = [], [], []
    for i in range(repeat):
        pair = [(ours, SPARSE_OPS_DOT), (ref, SCIPY_DOT)]
        for samples, code in (pair if i % 2 == 0 else pair[::-1]):
            samples.append(_run(code))
        imports.append(_run(IMPORT_ONLY))
    cold = []
    for _ in range(cold_repeat):
        with tempfile.TemporaryDirectory(prefix="numba-cold-") as cache:
            cold.append(_run(SPARSE_OPS_DOT, cache_dir=cache))
    ratio = statistics.median(o[0] / r[0] for o, r in zip(ours, ref))
    ours_row = _row("`import sparse_ops` + first `dot(csr, dense)`, numba cache warm", ours,
                    f"target <= {TARGET_S} s wall; {ratio:.2f}x SciPy")
    scipy_row = _row("SciPy: `import scipy.sparse` + the same `csr @ dense`", ref, "the reference")
    rows = [_row("`import sparse_ops`", imports), scipy_row, ours_row,
            _row("`import sparse_ops` + first `dot(csr, dense)`, numba cache cold", cold,
                 "empty NUMBA_CACHE_DIR: every kernel the call reaches compiles")]
    return ColdStart(rows, ours_row, scipy_row, ratio, f"{load_before} before, {_load()} after")


def report(result: ColdStart) -> str:
    verdict = "met" if result.met else "**not met**"
    return (markdown_table(HEADER, [r.row() for r in result.rows])
            + f"\n\nTarget (issue 18): the warm case at most {TARGET_S} s of wall time: {verdict} "
              f"({result.ours.wall_s:.2f} s; {result.ratio:.2f}x SciPy's {result.scipy.wall_s:.2f} s, median of "
              f"per-round ratios). Load average (1/5/15 min): {result.load}; wall times grow with load, "
              "cpu times less so.")


if __name__ == "__main__":
    print(report(run()))
