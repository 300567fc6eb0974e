"""Steady training steps (``sparse_ops.malloc``): with glibc's thresholds fixed at import, a
repeated embedding step faults no pages in once warm; without them (``SPARSE_OPS_MALLOC_TUNING=0``)
every other step faults its temporaries in again. Page faults are counted by the kernel
(``getrusage``), not timed. The user's own malloc settings are left alone."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or not os.confstr("CS_GNU_LIBC_VERSION"),
                                reason="glibc only")

STEPS = r"""
import json, resource, numpy as np, sparse_ops as so
rows, width, batch = 200_000, 64, 4096
rng = np.random.default_rng(0)
ids = ((rng.zipf(1.2, batch) - 1) % rows).astype(np.int64)
w = so.array(rng.standard_normal((rows, width), dtype=np.float32) * 0.01)
w.attach_grad(stype="row_sparse")
x = so.array(ids)
def step():
    with so.autograd.record():
        e = so.Embedding(x, w, input_dim=rows, output_dim=width, sparse_grad=True)
        loss = so.sum(so.elemwise_mul(e, e))
    loss.backward()
    so.sgd_update(w, w.grad, lr=1e-5, lazy_update=True, out=w)
for _ in range(10):
    step()
faults = []
for _ in range(20):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    step()
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"tuned": so.malloc.TUNED, "faults": faults}))
"""


def _run(**env: str) -> dict:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "SPARSE_OPS_MALLOC_TUNING"}
    out = subprocess.run([sys.executable, "-c", STEPS], env={**base, **env}, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_steady_steps_fault_no_pages_in():
    tuned = _run()
    assert tuned["tuned"] is True
    assert sum(tuned["faults"]) <= 40, tuned["faults"]  # a stray page or two, not the temporaries
    untuned = _run(SPARSE_OPS_MALLOC_TUNING="0")
    assert untuned["tuned"] is False
    assert sum(untuned["faults"]) > 10 * max(sum(tuned["faults"]), 40), untuned["faults"]


def test_the_users_own_malloc_settings_are_left_alone():
    assert _run(MALLOC_TRIM_THRESHOLD_="1000000")["tuned"] is False
