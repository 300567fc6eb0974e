"""Test helpers of the cookbook; importing this module first also makes
``sparse_ops_cookbook`` importable from the source tree when the distribution is not
installed.

(No conftest.py here on purpose: the main tests/ folder imports helpers with
``from conftest import ...``, and a second conftest.py collected in the same run would
take that name.)
"""
from __future__ import annotations

import importlib.util
import os
import sys

COOKBOOK_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if importlib.util.find_spec("sparse_ops_cookbook") is None:
    sys.path.insert(0, COOKBOOK_DIR)

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import scipy.sparse as sp  # noqa: E402

import sparse_ops as so  # noqa: E402
import sparse_ops_cookbook  # noqa: E402,F401  (registers the recipes)


def random_dense(rows: int, cols: int, density: float = 0.3, seed: int = 0, empty_rows=()) -> np.ndarray:
    """A float64 matrix with standard-normal non-zeros (never exactly 0) at random places."""
    rng = np.random.default_rng(seed)
    mask = rng.random((rows, cols)) < density
    mask[list(empty_rows)] = False
    values = rng.standard_normal((rows, cols))
    values[values == 0] = 1.0
    return np.where(mask, values, 0.0)


def csr(values: np.ndarray, dtype="float64", index_dtype="int64") -> so.CSRNDArray:
    m = sp.csr_matrix(np.asarray(values, dtype=dtype))
    return so.csr_matrix((m.data, m.indices.astype(index_dtype), m.indptr.astype(index_dtype)), shape=m.shape)


def random_csr(rows: int, cols: int, density: float = 0.3, seed: int = 0, dtype="float64",
               index_dtype="int64", empty_rows=()) -> so.CSRNDArray:
    return csr(random_dense(rows, cols, density, seed, empty_rows), dtype, index_dtype)


def normal(*shape: int, seed: int = 0, dtype="float64") -> so.NDArray:
    return so.array(np.random.default_rng(seed).standard_normal(shape).astype(dtype))


def serial_and_parallel(monkeypatch: pytest.MonkeyPatch, run) -> tuple[list, list]:
    """The outputs of ``run()`` (a list of containers) as NumPy arrays, with the cookbook's
    cpu kernels forced to their serial form, then to their parallel form
    (the SDK's one threshold ``sparse_ops.sdk.rowkernel.PARALLEL_MIN_WORK`` set huge, then 0). Skips when numba has one thread,
    where the parallel form never runs.

    The first run's containers stay alive until the second run ends, so the allocator
    cannot hand the second run a buffer that already holds the right answers in places its
    kernel failed to write."""
    import numba
    from sparse_ops.sdk import rowkernel

    if numba.get_num_threads() < 2:
        pytest.skip("one numba thread: the cpu kernels never run their parallel form")
    kept = []
    for threshold in (1 << 62, 0):
        monkeypatch.setattr(rowkernel, "PARALLEL_MIN_WORK", threshold)
        kept.append(run())
    serial, parallel = ([x.asnumpy() for x in outputs] for outputs in kept)
    return serial, parallel
