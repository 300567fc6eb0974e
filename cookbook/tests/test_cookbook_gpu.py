"""Every recipe's gpu kernels (numba.cuda) against its cpu kernels (numba).

Without a GPU the cases run in a subprocess with ``SPARSE_OPS_CUDA_SIM=1`` (numba's CUDA
simulator must be chosen before numba is imported, so not in this process); with one
(or when this process already simulates one) they run there as they are. One subprocess
serves every case; each case is reported as its own test.
"""
import json
import os
import subprocess
import sys

import pytest

import sparse_ops as so
from gpu_cases import CASES

HERE = os.path.dirname(os.path.abspath(__file__))
pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def results():
    env = dict(os.environ)
    if so.num_gpus() == 0:
        env["SPARSE_OPS_CUDA_SIM"] = "1"
    proc = subprocess.run([sys.executable, os.path.join(HERE, "gpu_cases.py")], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["gpus"] >= 1
    return report["results"]


@pytest.mark.parametrize("case", list(CASES))
def test_gpu_agrees_with_cpu(results, case):
    assert results[case] == "ok", results[case]
