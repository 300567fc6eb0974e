"""Parallel numba kernels launched from several threads at once neither abort nor race.

The conversions here are big enough for the parallel drivers (``sdk.rowkernel``'s size
policy: dense -> csr work is the dense size, at least ``PARALLEL_MIN_WORK``); smaller ones
run serially and never start numba's threads."""
import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import scipy.sparse as sp

import sparse_ops as so


def test_concurrent_parallel_conversions_match_serial():
    mats = [sp.random(600, 400, density=0.05, format="csr", dtype=np.float32, random_state=i) for i in range(8)]
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
        so.array(np.eye(600, dtype=np.float32)).tostype("csr")  # big enough for the parallel driver
        print(numba.threading_layer())
    """)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "workqueue"


CONCURRENT_KERNELS = textwrap.dedent("""
    import sys, threading
    import numpy as np, scipy.sparse as sp, numba
    import sparse_ops as so

    mats = [so.csr_matrix(sp.random(600, 400, density=0.05, format="csr", dtype=np.float32, random_state=i))
            for i in range(8)]
    want = [m.asnumpy() for m in mats]
    done, errors = [0] * 8, []

    def work(i):  # csr -> dense -> csr: parallel=True numba kernels, from 8 threads at once
        try:
            for _ in range(int(sys.argv[1])):
                d = mats[i].tostype("default")
                back = d.tostype("csr")
                if not (np.array_equal(d.asnumpy(), want[i]) and np.array_equal(back.asnumpy(), want[i])):
                    errors.append(i)
                    return
                done[i] += 1
        except Exception as exc:
            errors.append(repr(exc))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(numba.threading_layer(), sum(done), errors)
""")


def run_concurrent_kernels(iterations: int, **env_changes) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_THREADING_LAYER"}
    env.update(env_changes)
    return subprocess.run([sys.executable, "-c", CONCURRENT_KERNELS, str(iterations)], env=env,
                          capture_output=True, text=True, timeout=300)


def test_default_layer_survives_parallel_kernels_from_eight_threads():
    """NUMBA_THREADING_LAYER unset: our choice is not workqueue, and 8 threads each launching
    parallel kernels 100 times finish with the right results (an abort would end the child)."""
    out = run_concurrent_kernels(100)
    assert out.returncode == 0, out.stderr
    layer, count, errors = out.stdout.split(maxsplit=2)
    assert layer in ("tbb", "omp") and layer != "workqueue"
    assert (int(count), errors.strip()) == (800, "[]")


def test_workqueue_layer_aborts_on_the_same_workload():
    """Why we choose the layer: numba's default, workqueue, kills the process here."""
    out = run_concurrent_kernels(2000, NUMBA_THREADING_LAYER="workqueue")
    assert out.returncode != 0 and "Concurrent access has been detected" in out.stderr


FIRST_CALLS = r'''
import sys, threading, warnings
import numpy as np, scipy.sparse as sp, torch
import sparse_ops as so, sparse_ops.torch as st, sparse_ops_cookbook  # noqa: F401
warnings.simplefilter("ignore")
m = sp.random(40, 40, density=0.1, format="csr", dtype=np.float32, random_state=0)
A = st.to_torch(so.csr_matrix(m))
x = torch.randn(40, 4)
calls = [lambda: st.ops.csr_spmm(A, x), lambda: st.ops.dot(A, x), lambda: st.ops.square(A),
         lambda: st.ops.elemwise_add(x, x), lambda: so.dot(so.csr_matrix(m), so.array(x.numpy())),
         lambda: st.ops.sum(x, axis=0), lambda: st.ops.relu(x.requires_grad_(False))]
bar, errors = threading.Barrier(8), []
def work(k):
    bar.wait()
    for call in calls:  # every thread the same first call at once, then the next
        try:
            call()
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
[t.start() for t in threads]
[t.join() for t in threads]
print(len(errors), errors[:2])
'''


def test_threads_making_their_first_calls_at_once_all_succeed():
    """Eight threads in a fresh process each make the first calls of several ops at the
    same moment (the torch bridge defines its torch operators then, the dispatcher makes
    its plans): every call succeeds; none meets a half-defined operator."""
    pytest.importorskip("torch")
    out = subprocess.run([sys.executable, "-c", FIRST_CALLS], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().startswith("0 "), out.stdout
