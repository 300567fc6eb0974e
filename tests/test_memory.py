"""Memory: a long training loop with sparse gradients does not grow, tapes are freed by
reference counting, and the op context's workspace pool is reused and bounded.

The loop (``Embedding`` with ``sparse_grad`` -> ``dot`` with a csr -> ``sum``, backward,
lazy ``sgd_update``) runs 30,000 iterations (``SPARSE_OPS_MEMORY_ITERATIONS`` overrides)
after a warm-up of 5,000 (plans, numba compilation, allocator pools, and CPython's free
lists of tuples and dicts, which count as allocated blocks and take ~4,000 iterations to
fill). The garbage collector is off for the whole loop, so a reference cycle per iteration
would pile up and show. Growth is measured three ways: Python's allocated blocks and the
resident set size (``/proc/self/statm``) over the whole loop, and ``tracemalloc`` (which
also sees NumPy's buffers) over its last 2,500 iterations, after 2,500 traced ones (so the
arrays the loop keeps alive, such as the last gradient, are traced at both ends): tracing
makes an iteration ~2.5x slower, too slow for the whole loop in CI.
"""
from __future__ import annotations

import gc
import os
import sys
import threading
import time
import tracemalloc
import weakref

import numpy as np
import pytest
import scipy.sparse as sp

import sparse_ops as so
from sparse_ops import autograd, context

ITERATIONS = int(os.environ.get("SPARSE_OPS_MEMORY_ITERATIONS", "30000"))
TRACED = min(2_500, ITERATIONS // 10)  # measured with tracemalloc, after as many traced as a warm-up
UNTRACED = max(ITERATIONS - 2 * TRACED, 0)
VOCAB, DIM = 50, 4


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def model():
    rng = np.random.default_rng(0)
    x = so.csr_matrix(sp.random(8, 16, density=0.25, format="csr", dtype=np.float32, random_state=0))
    weight = so.array(rng.standard_normal((VOCAB, DIM)).astype(np.float32))
    weight.attach_grad(stype="row_sparse")
    ids = so.array(rng.integers(0, VOCAB, 16).astype(np.float32))

    def forward():
        e = so.Embedding(ids, weight, input_dim=VOCAB, output_dim=DIM, sparse_grad=True)
        return so.sum(so.dot(x, e))

    def step() -> None:
        with autograd.record():
            loss = forward()
        loss.backward()
        so.sgd_update(weight, weight.grad, lr=1e-4, lazy_update=True, out=weight)

    return x, ids, weight, forward, step


@pytest.mark.slow
def test_long_training_loop_does_not_grow():
    x, ids, weight, _, step = model()
    start = weight.asnumpy().copy()
    step()  # plans, numba compilation (whose garbage the collection below takes)
    gc.collect()  # and other tests' garbage; this also empties CPython's free lists
    gc.disable()
    try:
        for _ in range(5_000):  # allocator pools and CPython's free lists fill up
            step()
        assert weight.grad.stype == "row_sparse"
        rss0, blocks0 = rss_bytes(), sys.getallocatedblocks()
        t0 = time.perf_counter()
        for _ in range(UNTRACED):
            step()
        t1 = time.perf_counter()
        tracemalloc.start()
        try:
            for _ in range(TRACED):  # what the loop keeps alive (the last gradient...) is traced from here on
                step()
            traced0 = tracemalloc.get_traced_memory()[0]
            for _ in range(TRACED):
                step()
            traced1 = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        t2 = time.perf_counter()
        rss1, blocks1 = rss_bytes(), sys.getallocatedblocks()
        unreachable = gc.collect()
    finally:
        gc.enable()
    print(f"\nmemory: {ITERATIONS} iterations ({(t1 - t0) / max(UNTRACED, 1) * 1e6:.0f} us each, "
          f"{(t2 - t1) / max(2 * TRACED, 1) * 1e6:.0f} us traced): RSS {rss0 >> 10} -> {rss1 >> 10} KiB, "
          f"Python blocks {blocks1 - blocks0:+d}, tracemalloc {traced1 - traced0:+d} B over the last {TRACED}, "
          f"unreachable {unreachable}")
    # the loop really trained: only the embedding rows the ids name moved
    moved = np.flatnonzero((weight.asnumpy() != start).any(axis=1))
    np.testing.assert_array_equal(moved, np.unique(ids.asnumpy().astype(np.int64)))
    # Bounds: the smallest leak, one object per iteration, exceeds the first two many times
    # over: >= 30,000 blocks, >= 40 KB traced (16 B x 2,500); a leaked iteration's arrays
    # (~1 KB) exceed the RSS bound too (>= 30 MB); below them is allocator noise (measured: a
    # few blocks, +-100 B traced, +0-8 KiB RSS).
    assert unreachable < 1_000, "reference cycles are created per iteration"
    assert blocks1 - blocks0 < 1_000
    assert traced1 - traced0 < 32 * 1024
    assert rss1 - rss0 < 4 * 1024 * 1024 * ITERATIONS / 100_000 + 1024 * 1024


def test_backward_frees_the_tape_and_dropping_the_head_frees_the_graph():
    x, ids, weight, forward, _ = model()
    gc.disable()  # freed by reference counting alone: no cycle collector needed
    try:
        for retain in (False, True):
            with autograd.record():
                e = so.Embedding(ids, weight, input_dim=VOCAB, output_dim=DIM, sparse_grad=True)
                h = so.dot(x, e)  # dot keeps e for its backward
                loss = so.sum(h)
            kept = weakref.ref(e)
            records = [weakref.ref(a._ag) for a in (e, h, loss)]  # each holds its node
            del e, h
            assert kept() is not None
            loss.backward(retain_graph=retain)
            assert (kept() is None) is (not retain)
            assert weight.grad.stype == "row_sparse"
            del loss
            assert kept() is None and all(r() is None for r in records)
        with autograd.record():
            loss = forward()
        record = weakref.ref(loss._ag)
        del loss  # a recorded graph nobody differentiates goes with its head
        assert record() is None
    finally:
        gc.enable()


SEEN: list = []  # (workspace addresses) of each _mem_workspace_sum call


@pytest.fixture
def workspace_ops(isolated):
    @so.register("_mem_workspace_sum")
    class WorkspaceSum(so.Op):
        """y = x + x, built in ``n`` bytes of workspace memory (to watch the pool)."""

        resources = ("workspace",)
        n = so.Param(int, 1024)

        @so.kernel(device="cpu")
        def dense(self, ctx, x, y):
            tmp = ctx.workspace(self.n, np.uint8)
            inner = ctx.workspace(x.shape, x.dtype)
            np.add(x, x, out=inner)
            y[...] = inner
            SEEN.append((tmp.__array_interface__["data"][0], inner.__array_interface__["data"][0]))

    @so.register("_mem_workspace_outer")
    class WorkspaceOuter(so.Op):
        """y = x + (x + x): keeps x in workspace memory while an inner op uses the pool too."""

        resources = ("workspace",)

        @so.kernel(device="cpu")
        def dense(self, ctx, x, y):
            mine = ctx.workspace(x.shape, x.dtype)
            mine[...] = x
            inner = so.ops._mem_workspace_sum(so.array(x)).asnumpy()
            y[...] = mine + inner  # mine was not overwritten by the inner kernel


def test_workspace_pool_is_reused_and_bounded(workspace_ops):
    ws = context._workspace
    x = so.array(np.arange(6.0))
    cpu = x.device
    ws.buffers.pop(cpu, None)  # this thread's pool, as a fresh thread has it
    SEEN.clear()
    for _ in range(50):
        np.testing.assert_array_equal(so.ops._mem_workspace_sum(x).asnumpy(), 2 * np.arange(6.0))
    assert len(set(SEEN)) == 1  # the same memory every call
    assert ws.offsets[cpu] == 0 and ws.buffers[cpu].nbytes == 1 << 16
    np.testing.assert_array_equal(so.ops._mem_workspace_outer(x).asnumpy(), 3 * np.arange(6.0))
    assert ws.offsets[cpu] == 0
    # one huge request grows the pool for that call only: it is dropped afterwards
    so.ops._mem_workspace_sum(x, n=context.WORKSPACE_KEEP_BYTES + 1)
    assert ws.offsets[cpu] == 0 and cpu not in ws.buffers
    so.ops._mem_workspace_sum(x)
    assert ws.buffers[cpu].nbytes == 1 << 16
    # a failing kernel gives its workspace back too
    with pytest.raises(so.OperatorError, match="_mem_workspace_sum.*negative shape"):
        so.ops._mem_workspace_sum(x, n=-1)
    assert ws.offsets[cpu] == 0
    # each thread has its own pool: another thread's kernel does not get this thread's memory
    mine = SEEN[-1][0]
    result = []
    t = threading.Thread(target=lambda: result.append(so.ops._mem_workspace_sum(x).asnumpy()))
    t.start()
    t.join()
    np.testing.assert_array_equal(result[0], 2 * np.arange(6.0))
    assert SEEN[-1][0] != mine and ws.buffers[cpu].__array_interface__["data"][0] == mine


def test_a_gpu_pool_serves_one_stream_and_idle_streams_are_forgotten():
    """On a real gpu a kernel's launches may still be queued when the next kernel takes
    workspace memory; only a kernel on the same stream runs after them, so each stream gets
    its own pool (``context.pool_key``), and a thread keeps the pools of a few streams.
    Pools are keyed here as on a gpu, by (device, stream pointer), over host memory."""
    ws, dev = context._workspace, so.cpu()
    keys = [(dev, 1000 + i) for i in range(context.WORKSPACE_KEEP_STREAMS + 2)]
    try:
        first = context._take(keys[0], dev, 256)
        context._workspace.offsets[keys[0]] = 0  # its kernel returned
        other = context._take(keys[1], dev, 256)
        assert not np.shares_memory(first, other)  # another stream: another buffer
        context._workspace.offsets[keys[1]] = 0
        again = context._take(keys[0], dev, 256)
        assert np.shares_memory(first, again)  # the same stream reuses its buffer
        busy = context._take(keys[2], dev, 64)  # a pool in use is never forgotten
        for k in keys[3:]:
            context._take(k, dev, 64)
            context._workspace.offsets[k] = 0
        held = [k for k in keys if k in ws.buffers]
        assert len(held) <= context.WORKSPACE_KEEP_STREAMS + 1 and keys[2] in held and busy.size == 64
        assert keys[1] not in held  # the least recently used idle stream went first
        context.release_workspace((keys[2], 0))
        assert ws.offsets[keys[2]] == 0
    finally:
        for k in keys:
            ws.buffers.pop(k, None)
            ws.offsets.pop(k, None)
    assert context.pool_key(dev) is dev  # host memory: one pool per device and thread
