"""Hostile input from many threads at once, in a fresh process (a crash is a failed case):
malformed arrays refused in some threads while others compute and record, every result
right, every refusal a SparseFormatError, each thread's autograd state its own."""
from __future__ import annotations

from _subprocess import run_case

_CASE = """
import threading
import numpy as np
import scipy.sparse as sp
import sparse_ops as so

m = sp.random(300, 200, density=0.05, format="csr", random_state=0)
m.sort_indices()
w = np.random.default_rng(1).standard_normal((200, 8))
want = m @ w
good = so.csr_matrix(m)
problems = []


def bad_csr(seed):
    idx = m.indices.copy()
    idx[seed % idx.size] = 10 ** 9 if seed % 2 else -1  # a column out of range
    return so.csr_matrix((m.data, idx, m.indptr), shape=m.shape, check=False)


def worker(k):
    try:
        for i in range(60):
            if (i + k) % 3 == 0:
                try:
                    so.dot(bad_csr(i + k), so.array(w))
                    problems.append(f"thread {k}: a malformed csr was accepted")
                except so.SparseFormatError:
                    pass
            elif k % 2:
                x = so.array(w)
                x.attach_grad()
                with so.autograd.record():
                    assert so.autograd.is_recording()
                    loss = so.sum(so.dot(good, x))
                loss.backward()
                if not np.allclose(x.grad.asnumpy(), np.repeat(np.asarray(m.sum(axis=0)).T, 8, axis=1)):
                    problems.append(f"thread {k}: wrong gradient")
            else:
                if so.autograd.is_recording():
                    problems.append(f"thread {k}: recording leaked from another thread")
                got = so.dot(good, so.array(w)).asnumpy()
                if not np.allclose(got, want):
                    problems.append(f"thread {k}: wrong product")
    except Exception as exc:  # noqa: BLE001 - reported as a problem of the case
        problems.append(f"thread {k}: {type(exc).__name__}: {exc}")


threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert not problems, problems[:5]
assert np.allclose(so.dot(good, so.array(w)).asnumpy(), want)  # and the process goes on
print("ok")
"""


def test_refusals_in_some_threads_leave_the_others_right():
    r = run_case(_CASE, timeout=600)
    assert r["outcome"] == "returned", r
    assert r["stdout"].strip().endswith("ok")
