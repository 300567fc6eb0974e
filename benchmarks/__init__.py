"""Benchmarks of sparse_ops: storage conversions side by side with SciPy, and import time.

Run ``python -m benchmarks [--quick]`` from the repository root; the report goes to
``benchmarks/results/conversions.md``.
"""
