"""Concurrency soak: 8 threads for 30 s (``SPARSE_OPS_SOAK_SECONDS`` overrides) run built-in
ops on dense, csr and row_sparse inputs, a kernel-first op with a parallel numba kernel
and an MXNet-form ``CustomOp``, with autograd on their own tapes, while another thread
reads the operator table and the plugin registry. Every result must equal the
single-threaded reference computed first; no exception, no abort.

Most built-in sparse kernels used here are ``parallel=True`` numba kernels (csr <-> dense,
``dot``, the Embedding gradient, the lazy sgd update), so parallel kernels are launched from
several threads at once, which numba's default ``workqueue`` threading layer does not survive.
"""
from __future__ import annotations

import os
import threading
import time

import numba
import numpy as np
import pytest
import scipy.sparse as sp

import sparse_ops as so
from sparse_ops import autograd
from sparse_ops.sdk import jit

THREADS = 8
SECONDS = float(os.environ.get("SPARSE_OPS_SOAK_SECONDS", "30"))
ROWS, COLS, K, VOCAB = 64, 48, 8, 40


@jit(parallel=True)
def _scale_rows(indptr, data, scale, out):
    for r in numba.prange(indptr.shape[0] - 1):
        for j in range(indptr[r], indptr[r + 1]):
            out[j] = data[j] * scale[r]


def register_ops() -> None:
    """The kernel-first and the MXNet-form op (under the ``isolated`` fixture, which removes them)."""

    @so.register("_soak_row_scale")
    class RowScale(so.Op):
        """y[r, :] = scale[r] * x[r, :], keeping x's storage type (a kernel-first op)."""

        arguments = ("x", "scale")
        backward_needs_inputs = ("scale",)

        def infer_shape(self, x, scale):
            return [x]

        def infer_storage_type(self, x, scale):
            return [x]

        @so.kernel(device="cpu", stypes=("csr", "default"))
        def csr(self, ctx, x, scale, y):
            _scale_rows(x.indptr, x.data, scale.data, ctx.alloc_like(y, x))

        @so.kernel(device="cpu")
        def dense(self, ctx, x, scale, y):
            np.multiply(x, scale[:, None], out=y)

        def gradient(self, out_grads, inputs, outputs):
            return [so.ops._soak_row_scale(out_grads[0], inputs[1]), None]

    class Square(so.CustomOp):
        def forward(self, is_train, req, in_data, out_data, aux):
            self.assign(out_data[0], req[0], so.square(in_data[0]))

        def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
            self.assign(in_grad[0], req[0], so.elemwise_mul(out_grad[0], in_data[0] * 2))

    @so.register("_soak_square")
    class SquareProp(so.CustomOpProp):
        """x ** 2 as an MXNet-form custom operator."""

        def create_operator(self, ctx, shapes, dtypes):
            return Square()


def make_data(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    m = sp.random(ROWS, COLS, density=0.1, format="csr", dtype=np.float32, random_state=seed)
    rows = np.sort(rng.choice(COLS, 10, replace=False))
    g = np.zeros((COLS, K), np.float32)
    g[rows] = rng.standard_normal((10, K))
    return {
        "x": so.csr_matrix(m), "dense": so.array(rng.standard_normal((ROWS, COLS)).astype(np.float32)),
        "rsp": so.array(g).tostype("row_sparse"), "g": so.array(rng.standard_normal((ROWS, K)).astype(np.float32)),
        "w": rng.standard_normal((COLS, K)).astype(np.float32),
        "scale": so.array(rng.standard_normal(ROWS).astype(np.float32)),
        "ids": so.array(rng.integers(0, VOCAB, ROWS).astype(np.float32)),
        "emb": rng.standard_normal((VOCAB, K)).astype(np.float32),
    }


def step(d: dict) -> dict[str, tuple]:
    """One iteration: (storage type, values) of every result."""
    x, dense = d["x"], d["dense"]
    out = {
        "mul": so.elemwise_mul(dense, dense),
        "to_dense": x.tostype("default"),
        "to_csr": dense.tostype("csr"),
        "to_rsp": dense.tostype("row_sparse"),
        "dot": so.dot(x, d["rsp"]),
        "dot_t": so.dot(x, d["g"], transpose_a=True),
        "csr_mul": x * 3,
        "rsp_add": so.elemwise_add(d["rsp"], d["rsp"]),
        "sum0": so.sum(x, axis=0),
        "row_scale": so.ops._soak_row_scale(x, d["scale"]),
        "square": so.Custom(dense, op_type="_soak_square"),
    }
    w, emb = so.array(d["w"]), so.array(d["emb"])
    w.attach_grad()
    emb.attach_grad(stype="row_sparse")
    with autograd.record():
        h = so.dot(so.ops._soak_row_scale(x, d["scale"]), w)
        e = so.Embedding(d["ids"], emb, input_dim=VOCAB, output_dim=K, sparse_grad=True)
        loss = so.sum(so.elemwise_mul(so.Custom(h, op_type="_soak_square"), e))
    loss.backward()
    weight = so.array(d["emb"])
    so.sgd_update(weight, emb.grad, lr=0.1, lazy_update=True, out=weight)
    out.update({"loss": loss, "w.grad": w.grad, "emb.grad": emb.grad, "sgd": weight})
    return {k: (v.stype, v.asnumpy()) for k, v in out.items()}


def read_registry(stop: threading.Event, probe: dict, counts: list, errors: list) -> None:
    try:
        while not stop.is_set():
            names = so.list_ops()
            assert "_soak_row_scale" in names and "dot" in names
            so.plugins_info()
            assert so.explain("dot", probe["x"], probe["rsp"])["dispatch_mode"] == "fcompute_ex"
            so.explain("_soak_square", probe["dense"])
            so.get_op("_soak_row_scale").describe()
            counts[0] += 1
    except Exception as exc:  # noqa: BLE001  (reported by the main thread)
        errors.append(("reader", repr(exc)))


@pytest.mark.slow
def test_threads_soak_matches_single_threaded_reference(isolated):
    register_ops()
    datasets = [make_data(seed) for seed in range(THREADS // 2)]  # two threads share each data set
    expected = [step(d) for d in datasets]
    assert expected[0]["emb.grad"][0] == "row_sparse" and expected[0]["dot_t"][0] == "row_sparse"
    stop = threading.Event()
    iterations = [0] * THREADS
    reads = [0]
    errors: list = []

    def work(i: int) -> None:
        d, want = datasets[i % len(datasets)], expected[i % len(datasets)]
        try:
            while not stop.is_set():
                got = step(d)
                for key, (stype, values) in want.items():
                    g_stype, g_values = got[key]
                    if g_stype != stype or g_values.dtype != values.dtype or not np.array_equal(g_values, values):
                        errors.append((i, iterations[i], key))
                        return
                iterations[i] += 1
        except Exception as exc:  # noqa: BLE001  (reported by the main thread)
            errors.append((i, iterations[i], repr(exc)))

    workers = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
    workers.append(threading.Thread(target=read_registry, args=(stop, datasets[0], reads, errors)))
    for t in workers:
        t.start()
    deadline = time.monotonic() + SECONDS
    while time.monotonic() < deadline and not errors:
        time.sleep(0.1)
    stop.set()
    for t in workers:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in workers), "a thread hangs"
    print(f"\nsoak: {SECONDS:g} s, {THREADS} threads, iterations per thread {iterations}, "
          f"registry reads {reads[0]}, threading layer {numba.threading_layer()}")
    assert not errors, errors
    assert min(iterations) > 0 and reads[0] > 0
