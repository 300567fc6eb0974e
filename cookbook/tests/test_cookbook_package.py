"""The cookbook as a plugin package: metadata, entry point, lazy kernels, launch helpers."""
import os
import subprocess
import sys

import numpy as np
import pytest

import cookbook_helpers  # noqa: F401  (first: puts the cookbook on sys.path when not installed)
import sparse_ops as so
import sparse_ops_cookbook as cb
from sparse_ops.sdk.launch import grid_for, rows_grid, warp_per_row

COOKBOOK_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_plugin_metadata_and_entry_point():
    tomllib = pytest.importorskip("tomllib")
    with open(os.path.join(COOKBOOK_DIR, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    assert project["name"] == "sparse-ops-cookbook" and project["version"] == cb.__version__
    assert project["entry-points"]["sparse_ops.plugins"] == {"cookbook": "sparse_ops_cookbook"}
    assert any(d.startswith("sparse-ops") for d in project["dependencies"])
    assert cb.SPARSE_OPS_SDK == ">=0.1,<0.2"
    from sparse_ops.sdk import SDK_VERSION

    assert SDK_VERSION.startswith("0.1")


def test_every_recipe_is_registered_with_docs():
    for name in cb.__all__:
        assert name in so.list_ops(), name
        assert getattr(so.ops, name).__doc__.startswith(f"{name}(")
        assert so.get_op(name).doc


def test_importing_the_cookbook_imports_no_numba():
    code = "import sys, sparse_ops_cookbook; assert 'numba' not in sys.modules, 'numba imported'"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([COOKBOOK_DIR, os.environ.get("PYTHONPATH", "")]),
               SPARSE_OPS_DISABLE_PLUGIN_AUTOLOAD="1")
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)


def test_launch_configurations():
    assert grid_for(0) == (1, 32)  # never an empty grid
    assert grid_for(10) == (1, 32)
    assert grid_for(256) == (1, 256)
    assert grid_for(300) == (2, 160)  # spread evenly, whole warps
    assert grid_for(10_000, block=128) == (79, 128)
    assert rows_grid(1000) == grid_for(1000)
    assert warp_per_row(0) == (1, 32)
    assert warp_per_row(5) == (1, 160)
    assert warp_per_row(100) == (13, 256)
    assert warp_per_row(100, warps_per_block=4) == (25, 128)
    for blocks, threads in (grid_for(12345), warp_per_row(777)):
        assert threads % 32 == 0 and threads <= 1024 and blocks >= 1
    blocks, threads = warp_per_row(777)
    assert blocks * threads // 32 >= 777
    with pytest.raises(ValueError, match="multiple of 32"):
        grid_for(10, block=100)
    with pytest.raises(ValueError, match="at most 1024"):
        warp_per_row(10, warps_per_block=64)


def test_opcheck_float32_forward_of_every_recipe():
    """Inference, storage-aware vs dense path and repeatability in float32 (the float64
    samples in each recipe's tests also check gradients)."""
    from cookbook_helpers import random_csr
    from sparse_ops.sdk.testing import opcheck

    a = random_csr(9, 7, 0.4, seed=1, dtype="float32")
    sq = random_csr(6, 6, 0.4, seed=2, dtype="float32")
    x, g = (so.array(np.random.default_rng(s).standard_normal(shape).astype("float32")) for s, shape in
            ((3, (7, 4)), (4, (9, 4))))
    samples = {
        "transpose_csr": [[a]], "transpose_row_sparse": [[a.tostype("row_sparse")]],
        "csr_spmm": [[a, x]], "csr_spmm_t": [([a, g], {"sparse_grad": True})], "csr_sddmm": [[a, g, x]],
        "csr_sample": [[a, a.tostype("default")]], "csr_row_softmax": [[a]],
        "embedding_bag": [([a, x], {"mode": "mean"})], "fm_interaction": [[a, x]], "gcn_norm": [[sq]],
    }
    for name, cases in samples.items():
        assert opcheck(name, cases, rtol=1e-4, atol=1e-5, check_grad=False) == len(cases), name
