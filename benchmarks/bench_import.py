"""Import time of ``sparse_ops`` in fresh interpreters, and what the import pulls in.

``import sparse_ops`` must stay cheap: numba (and its LLVM) and SciPy are imported lazily,
on the first kernel call or the first SciPy interop, never at import. Each timing is
the wall time of a whole ``python -c ...`` subprocess (median of 5 after one warm-up
run that fills the file cache), so interpreter start-up is included; ``pass`` and
``import numpy`` are the floors to read it against.
"""
from __future__ import annotations

import os
import subprocess
import sys

from ._timing import markdown_table, median_time

STATEMENTS = ["pass", "import numpy", "import sparse_ops"]
HEAVY = ("numba", "llvmlite", "scipy", "cupy")  # numba and scipy must not be imported


def _run(code: str) -> str:
    # Bytecode caching on, as in a normal installation (the warm-up run writes the .pyc
    # files); some sandboxes set PYTHONDONTWRITEBYTECODE, which recompiles every import.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                          text=True, env=env).stdout


def run(repeat: int = 5, warmup: int = 1) -> dict:
    """Median times per statement (of ``repeat`` runs after ``warmup``), and the heavy
    modules ``import sparse_ops`` loaded."""
    times = {s: median_time(lambda s=s: _run(s), repeat=repeat, warmup=warmup) for s in STATEMENTS}
    probe = f"import sys, sparse_ops; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    loaded = _run(probe).split()
    return {"times": times, "loaded": loaded}


def report(result: dict) -> str:
    times, loaded = result["times"], result["loaded"]
    floor = times["import numpy"]
    rows = [[f"`python -c \"{s}\"`", f"{t * 1e3:.1f}", f"{t / floor:.2f}"] for s, t in times.items()]
    table = markdown_table(["command", "median wall time (ms)", "vs `import numpy`"], rows)
    bad = [m for m in loaded if m in ("numba", "scipy")]
    verdict = ("**FAIL**: `import sparse_ops` imported " + ", ".join(bad)) if bad else \
        "OK: `import sparse_ops` imported neither numba nor scipy"
    others = f" (also loaded: {', '.join(loaded)})" if loaded else ""
    return f"{table}\n\n{verdict}{others}."


def main() -> None:
    print(report(run()))


if __name__ == "__main__":
    main()
