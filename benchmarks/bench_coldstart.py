"""Cold start: how long a fresh process takes to import sparse_ops and run its first op.

Three scripts, each in fresh interpreters (``python -c``), timed from outside (the whole
subprocess, interpreter start-up included) and from inside (``time.perf_counter`` around
the import and around the first call):

* ``import sparse_ops`` alone (installed plugins, the cookbook among them, are loaded by
  the import: that is the import a user pays);
* ``import sparse_ops`` + the first call of the cookbook op ``csr_spmm``, looked up in the
  operator table (``sparse_ops.dispatch.op_function``), on a small csr matrix, with numba's
  on-disk cache warm (a first, untimed run fills it: the normal case after the first use
  on a machine). Goal: under 1 s;
* the same with the cache cold: every run gets an empty temporary ``NUMBA_CACHE_DIR``, so
  numba compiles each kernel the call reaches (the first use after an install).

Median of ``repeat`` runs (cold: fewer, they take seconds each). Without the cookbook the
two op rows say so and are skipped.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from ._timing import markdown_table

OP = "csr_spmm"
_PRELUDE = "import time; t0 = time.perf_counter(); import sparse_ops as so; t1 = time.perf_counter()\n"
IMPORT_ONLY = _PRELUDE + "import json; print(json.dumps([t1 - t0, 0.0]))"
FIRST_CALL = _PRELUDE + f"""\
import json, numpy as np
indptr = np.arange(0, 1001, 5, dtype=np.int64)  # 200 x 100, 5 values a row
indices = (np.arange(1000, dtype=np.int64) * 7) % 100
indices.reshape(200, 5).sort(axis=1)
a = so.csr_matrix((np.ones(1000, np.float32), indices, indptr), shape=(200, 100))
x = so.array(np.ones((100, 16), np.float32))
spmm = so.dispatch.op_function({OP!r})
t2 = time.perf_counter()
y = spmm(a, x).asnumpy()
t3 = time.perf_counter()
print(json.dumps([t1 - t0, t3 - t2]))
"""


@dataclass
class Row:
    case: str
    wall_s: float | None  # median whole-subprocess time
    import_s: float | None  # median in-process import time
    call_s: float | None  # median in-process first-call time
    runs: int
    note: str = ""

    def row(self) -> list[str]:
        def ms(v: float | None) -> str:
            return "skipped" if v is None else f"{v * 1e3:.0f}"
        both = None if self.import_s is None else self.import_s + self.call_s
        return [self.case, ms(self.wall_s), ms(self.import_s), ms(self.call_s), ms(both), str(self.runs), self.note]


HEADER = ["fresh process", "wall time (ms)", "import (ms)", "first call (ms)", "import + first call (ms)", "runs",
          "note"]


def _run(code: str, cache_dir: str | None = None) -> tuple[float, float, float]:
    """(wall, import, first call) seconds of one fresh interpreter running ``code``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as installed: .pyc on
    if cache_dir is not None:
        env["NUMBA_CACHE_DIR"] = cache_dir
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env).stdout
    wall = time.perf_counter() - t0
    imp, call = json.loads(out.strip().splitlines()[-1])
    return wall, imp, call


def _median_row(case: str, samples: list[tuple[float, float, float]], note: str = "") -> Row:
    wall, imp, call = (statistics.median(s[i] for s in samples) for i in range(3))
    return Row(case, wall, imp, call, len(samples), note)


def _has_op() -> bool:
    """Whether this process's ``import sparse_ops`` (same plugins as a fresh one) found the op."""
    import sparse_ops as so

    return OP in so.list_ops()


def run(repeat: int = 5, cold_repeat: int = 3, warmup: bool = True) -> list[Row]:
    """The three rows; ``warmup=False`` skips the untimed first runs (a smoke run: the
    numbers then include whatever the file and numba caches held)."""
    if warmup:
        _run(IMPORT_ONLY)  # fills the file cache and writes .pyc files
    rows = [_median_row("`import sparse_ops`", [_run(IMPORT_ONLY) for _ in range(repeat)])]
    if not _has_op():
        note = f"no operator {OP!r}: install the cookbook (pip install -e ./cookbook)"
        return rows + [Row(f"import + first `{OP}` call, {c} cache", None, None, None, 0, note)
                       for c in ("warm", "cold")]
    if warmup:
        _run(FIRST_CALL)  # fills numba's on-disk cache (when the kernels were not cached yet)
    rows.append(_median_row(f"import + first `{OP}` call, numba cache warm",
                            [_run(FIRST_CALL) for _ in range(repeat)], "goal < 1 s"))
    cold = []
    for _ in range(cold_repeat):
        with tempfile.TemporaryDirectory(prefix="numba-cold-") as cache:
            cold.append(_run(FIRST_CALL, cache_dir=cache))
    rows.append(_median_row(f"import + first `{OP}` call, numba cache cold", cold,
                            "empty NUMBA_CACHE_DIR: every kernel the call reaches compiles"))
    return rows


def report(rows: list[Row]) -> str:
    return markdown_table(HEADER, [r.row() for r in rows])


if __name__ == "__main__":
    print(report(run()))
