"""``python -m benchmarks [--quick]``: the benchmark suite, as one markdown report.

Import time, per-call overhead and autograd (vs PyTorch when installed), storage
conversions and ``dot`` (vs SciPy). Writes ``benchmarks/results/report.md``
(``report-quick.md`` with ``--quick``, so a smoke run never overwrites the full numbers)
and prints it.
"""
from __future__ import annotations

import argparse
import datetime
from pathlib import Path

from . import bench_conversions, bench_dot, bench_import, bench_overhead
from ._timing import describe_machine

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="every conversion case 10x smaller")
    quick = parser.parse_args().quick

    imports = bench_import.run()  # first, while this process has not imported numba yet
    overhead = bench_overhead.run(quick)
    conversions = bench_conversions.run(quick)
    dots = bench_dot.run(quick)
    machine = describe_machine()  # after the conversions, so numba's threading layer is known

    when = datetime.datetime.now().isoformat(timespec="seconds")
    lines = [f"# sparse_ops benchmarks{' (--quick)' if quick else ''}", "",
             f"Run {when} with `python -m benchmarks{' --quick' if quick else ''}`.", "",
             "## Machine", ""]
    lines += [f"- {k}: {v}" for k, v in machine.items()]
    lines += ["", "## Storage conversions vs SciPy", "",
              "float32 throughout; median wall time; ratio below 1 means sparse_ops is faster. "
              "csr -> dense: median of 3, everything else median of 5, each after one warm-up call. "
              "'same result' compares our output with SciPy's (csr -> dense: 1,000 sampled rows).", "",
              bench_conversions.report(conversions), "",
              "## Import time", "", bench_import.report(imports), "",
              "## Per-call overhead and autograd", "", bench_overhead.report(overhead), ""]
    lines += ["## dot vs SciPy", "",
              "float32; median of interleaved rounds (see `benchmarks/bench_dot.py`); 'raw' calls the "
              "numba kernel(s) directly. " + bench_dot.torch_note(), "", bench_dot.report(dots), ""]
    text = "\n".join(lines)

    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / ("report-quick.md" if quick else "report.md")
    out.write_text(text)
    print(text)
    print(f"\nwritten to {out}")


if __name__ == "__main__":
    main()
