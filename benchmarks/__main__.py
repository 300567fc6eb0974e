"""``python -m benchmarks [--quick | --smoke] [--out DIR]``: the benchmark suite, as one
markdown report and a chart.

Import time and cold start, per-call overhead and autograd (vs PyTorch when installed),
storage conversions and ``dot`` (vs SciPy), the embedding training step and the cookbook's
``csr_spmm`` forward+backward (vs PyTorch), effective memory bandwidth, issue 8's targets
checked, the PyTorch bridge against PyTorch (``bench_torch``: issue 15's targets, also
written alone as ``torch.md``) and C operator libraries (``bench_clib``: issue 16's, also
``clib.md``), the MXNet face (``bench_mxnet``: issue 17's), hashed feature spaces
(``bench_hashed``: issue 18's cost-follows-nnz targets, also ``hashed.md``), whole
training steps vs PyTorch (``bench_training``: issue 18's), SpGEMM (``bench_spgemm``: issue
18's, also ``spgemm.md``) and the JAX bridge (``bench_jax``:
issue 19's, also ``jax.md``; n/a without jax). Writes ``report.md`` and ``ratios.png`` to ``benchmarks/results/``
(``report-quick.md``/``ratios-quick.png`` with ``--quick``, so a short run never overwrites
the full numbers) and prints the report. ``--smoke`` runs every case once on tiny inputs
(the CI smoke test does, into a temporary ``--out``): its numbers mean nothing.
"""
from __future__ import annotations

import argparse
import datetime
from pathlib import Path

from . import (bench_bandwidth, bench_clib, bench_coldstart, bench_conversions, bench_dot, bench_embedding,
               bench_hashed, bench_import, bench_jax, bench_mxnet, bench_overhead, bench_spgemm, bench_spmm,
               bench_torch, bench_training)
from ._chart import bar_chart
from ._summary import chart_entries, targets
from ._timing import describe_machine

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="every case 10x smaller")
    size.add_argument("--smoke", action="store_true", help="every case once on tiny inputs (a test, not a benchmark)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the report and the chart")
    args = parser.parse_args()
    quick, smoke = args.quick, args.smoke
    scale = 1000 if smoke else (10 if quick else 1)
    mode = " --smoke" if smoke else (" --quick" if quick else "")

    imports = bench_import.run(repeat=1, warmup=0) if smoke else bench_import.run()  # before numba is imported here
    cold = (bench_coldstart.run(repeat=1, cold_repeat=1, warmup=False) if smoke
            else bench_coldstart.run(repeat=7 if quick else 15))
    overhead = bench_overhead.run(scale=scale)
    conversions = bench_conversions.run(scale=scale)
    dots = bench_dot.run(scale=scale)
    sweep = bench_dot.sweep(scale=scale)
    embedding = bench_embedding.run(scale=scale)
    spmm = bench_spmm.run(scale=scale)
    bandwidth = bench_bandwidth.run(scale=scale)
    bridge = bench_torch.run(scale=scale)
    clib = bench_clib.run(scale=scale)
    mxnet = bench_mxnet.run(scale=scale)
    hashed = bench_hashed.run(scale=scale)
    training = bench_training.run(scale=scale)
    jaxb = bench_jax.run(scale=scale)
    spgemm = bench_spgemm.run(scale=scale)
    machine = describe_machine()  # after the conversions, so numba's threading layer is known

    when = datetime.datetime.now().isoformat(timespec="seconds")
    lines = [f"# sparse_ops benchmarks{f' ({mode.strip()})' if mode else ''}", "",
             f"Run {when} with `python -m benchmarks{mode}`. Ratios are ours / reference (below 1: "
             "we are faster). The machine is shared: contenders are timed in alternation "
             "(`benchmarks/_timing.py`), so load lands on both sides of a ratio; absolute times are noisy.", "",
             "## Machine", ""]
    lines += [f"- {k}: {v}" for k, v in machine.items()]
    lines += ["", "## Issue 8 targets", ""]
    if scale != 1:
        lines += [f"Sizes divided by {scale} in this run: the targets are set for the full sizes, so these "
                  "verdicts do not apply.", ""]
    lines += [targets(overhead, dots, embedding, spmm, cold, sweep)]
    lines += ["", "## Storage conversions vs SciPy", "",
              "float32 throughout; median wall time; ratio below 1 means sparse_ops is faster. "
              "csr -> dense: median of 3, everything else median of 5, each after one warm-up call. "
              "'same result' compares our output with SciPy's (csr -> dense: 1,000 sampled rows).", "",
              bench_conversions.report(conversions), "",
              "## Import time", "", bench_import.report(imports), "",
              "## Per-call overhead and autograd", "", bench_overhead.report(overhead), ""]
    lines += ["## dot vs SciPy", "",
              "float32; median of interleaved rounds (see `benchmarks/bench_dot.py`); 'raw' calls the "
              "numba kernel(s) directly. " + bench_dot.torch_note(), "", bench_dot.report(dots), "",
              "## dot(csr, dense) by width vs MKL", "", bench_dot.sweep_note(sweep), "",
              bench_dot.sweep_report(sweep), ""]
    lines += ["## Embedding training step vs PyTorch", "",
              "Lookup + row_sparse gradient + lazy SGD, float32 (see `benchmarks/bench_embedding.py`).", "",
              bench_embedding.report(embedding), "",
              "## Cookbook `csr_spmm` forward+backward vs PyTorch sparse autograd", "",
              "Gradients for X and for A's stored values; PyTorch: `torch.sparse.mm` on a sparse csr tensor "
              "(see `benchmarks/bench_spmm.py`).", "", bench_spmm.report(spmm), "",
              "## Cold start", "",
              "Fresh interpreters; see `benchmarks/bench_coldstart.py`.", "", bench_coldstart.report(cold), "",
              "## Effective memory bandwidth", "",
              "Least bytes each kernel must move / its median time, against `np.copyto` timed in alternation "
              "(see `benchmarks/bench_bandwidth.py`).", "", bench_bandwidth.report(bandwidth), "",
              "## PyTorch bridge vs PyTorch", "",
              "`sparse_ops.torch` against PyTorch doing the same work, issue 15's targets (see "
              "`benchmarks/bench_torch.py`; also written alone as `torch.md`).", "", bench_torch.report(bridge), "",
              "## C operator libraries", "",
              "A library built against `sparse_ops.h`, issue 16's targets (see `benchmarks/bench_clib.py`; also "
              "written alone as `clib.md`).", "", bench_clib.report(clib), "",
              "## The MXNet face", "",
              "`sparse_ops.compat.mxnet` against the native API, issue 17's targets (see `benchmarks/bench_mxnet.py`).",
              "", bench_mxnet.report(mxnet), "",
              "## Hashed feature spaces", "",
              "Cost follows nnz, not the column count, issue 18's targets (see `benchmarks/bench_hashed.py`; also "
              "written alone as `hashed.md`).", "", bench_hashed.report(hashed), "",
              "## Whole training steps vs PyTorch", "",
              "The embedding step with its loss and the demo's factorization machine against the same models in "
              "plain PyTorch, issue 18's targets (see `benchmarks/bench_training.py`).", "",
              bench_training.report(training, overhead["calls"]), "",
              "## SpGEMM: dot(csr, csr)", "",
              "Against SciPy's `A @ B` and MKL's `dot_product_mkl`, issue 18's targets (see "
              "`benchmarks/bench_spgemm.py`; also written alone as `spgemm.md`).", "", bench_spgemm.report(spgemm), "",
              "## The JAX bridge", "",
              "`sparse_ops.jax` under `jax.jit` against jnp, `BCSR` and `jax.pure_callback`, issue 19's targets (see "
              "`benchmarks/bench_jax.py`; also written alone as `jax.md`).", "", bench_jax.report(jaxb), ""]
    suffix = "-smoke" if smoke else ("-quick" if quick else "")
    args.out.mkdir(parents=True, exist_ok=True)
    entries = chart_entries(overhead, conversions, dots, embedding, spmm, bridge, sweep)
    chart = args.out / f"ratios{suffix}.png"
    renderer = bar_chart(chart, [e[0] for e in entries], [e[1] for e in entries],
                         f"sparse_ops{mode}: time ours / reference, {when}")
    lines += ["## Chart", "", f"![ratios ours / reference]({chart.name}) (drawn with {renderer})", ""]
    text = "\n".join(lines)

    out = args.out / f"report{suffix}.md"
    out.write_text(text)
    (args.out / f"clib{suffix}.md").write_text("\n".join(
        ["# C operator libraries", "", f"From `python -m benchmarks{mode}`, run {when}; the machine is described in "
         "the report beside this file.", "", bench_clib.report(clib), ""]))
    (args.out / f"hashed{suffix}.md").write_text("\n".join(
        ["# Hashed feature spaces", "", f"From `python -m benchmarks{mode}`, run {when}; the machine is described in "
         "the report beside this file.", "", bench_hashed.report(hashed), ""]))
    (args.out / f"spgemm{suffix}.md").write_text("\n".join(
        ["# SpGEMM: dot(csr, csr)", "", f"From `python -m benchmarks{mode}`, run {when}; the machine is described in "
         "the report beside this file.", "", bench_spgemm.report(spgemm), ""]))
    (args.out / f"torch{suffix}.md").write_text("\n".join(
        ["# The PyTorch bridge vs PyTorch", "", f"From `python -m benchmarks{mode}`, run {when}; the machine is "
         "described in the report beside this file.", "", bench_torch.report(bridge), ""]))
    (args.out / f"jax{suffix}.md").write_text("\n".join(
        ["# The JAX bridge", "", f"From `python -m benchmarks{mode}`, run {when}; the machine is described in "
         "the report beside this file.", "", bench_jax.report(jaxb), ""]))
    print(text)
    print(f"\nwritten to {out} and {chart}")


if __name__ == "__main__":
    main()
