"""Parallel numba kernels launched from several threads at once neither abort nor race."""
import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.sparse as sp

import sparse_ops as so


def test_concurrent_parallel_conversions_match_serial():
    mats = [sp.random(400, 300, density=0.05, format="csr", dtype=np.float32, random_state=i) for i in range(8)]
    expected = [m.toarray() for m in mats]

    def work(i):
        x = so.csr_matrix(mats[i % 8])
        for _ in range(20):
            d = x.tostype("default")
            x = d.tostype("csr")
        return d.asnumpy()

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(work, range(32)))
    for i, r in enumerate(results):
        np.testing.assert_array_equal(r, expected[i % 8])
    import numba

    assert numba.threading_layer() in ("tbb", "omp")


def test_threading_layer_choice_respects_the_user():
    env = dict(os.environ, NUMBA_THREADING_LAYER="workqueue")
    code = textwrap.dedent("""
        import numpy as np, numba, sparse_ops as so
        so.array(np.eye(3, dtype=np.float32)).tostype("csr")
        print(numba.threading_layer())
    """)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "workqueue"
