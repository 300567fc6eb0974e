"""Benchmarks of sparse_ops side by side with SciPy and (when installed) PyTorch.

Run ``python -m benchmarks [--quick | --smoke]`` (or ``sparse-ops bench``) from the
repository root; the report goes to ``benchmarks/results/report.md`` and the chart to
``benchmarks/results/ratios.png``. Each ``bench_*`` module also runs on its own.
"""
