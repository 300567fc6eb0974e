"""``sparse_ops.dask`` on a local cluster: SpMM and a factorization-machine training step over
row blocks on 1 and 2 worker processes, next to the same work in one process, plus the
scheduler's cost per block and the bytes a step moves.

* SpMM: ``dot(csr, dense)``, a 1,000,000 x 100,000 csr with 20 stored values per row (20M
  in all, float32, int32 indices: 168 MB) in 8 row blocks read from one ``.npz`` file per
  block, times a 100,000 x 32 dense matrix broadcast to the workers. Timed: the blocks'
  products computed and kept on the workers (``persist``), and the result gathered to the
  client (``compute``).
* FM step: the cookbook's click log with about 20M stored values (1M features, k = 8) in 8
  row blocks; one full-batch data-parallel step (``DataParallel``: pull the rows of w and V
  each block uses, forward and backward per block, row_sparse gradients summed in a tree,
  then the lazy Adagrad update on the client).
* Scheduler cost per block: 200 one-row blocks through ``apply("negative")`` against 1
  block; (t_200 - t_1) / 199.

Each worker process runs one thread and numba with one thread (``NUMBA_NUM_THREADS=1``),
so 1 vs 2 workers compares one core with two; the one-process column runs the same
operators with numba on 1 and on 2 threads. The machine may be shared: times are medians
of 3 after a warm-up, and the CPU time of the busiest worker process is reported beside
the wall time (on a busy machine two workers wait for cores; their CPU time shows how
the work split). Run ``python -m benchmarks.bench_dask``; writes
``benchmarks/results/dask.md``. Not part of ``python -m benchmarks`` (it takes minutes).
"""
from __future__ import annotations

import datetime
import logging
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

import sparse_ops as so

from ._timing import describe_machine, markdown_table
from .bench_conversions import random_csr

RESULTS = Path(__file__).resolve().parent / "results"
SPMM_ROWS, SPMM_COLS, SPMM_PER_ROW, SPMM_K = 1_000_000, 100_000, 20, 32
FM_EXAMPLES, FM_FEATURES, FM_K = 660_000, 1 << 20, 8
NBLOCKS = 8
TINY_BLOCKS = 200


def _median(fn: Callable[[], Any], repeat: int = 3) -> float:
    fn()  # warm-up: kernels compile (or load from numba's cache) in every process
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _median_with_cpu(client: Any, fn: Callable[[], Any], repeat: int = 3) -> tuple[float, float, float]:
    """(median wall s, median CPU s of the busiest worker process, median CPU s of this
    process) of ``fn()``: CPU time does not grow when other work shares the cores, so it
    shows how the work split between the workers even on a busy machine."""
    fn()
    walls, workers, here = [], [], []
    for _ in range(repeat):
        before, mine = client.run(time.process_time), time.process_time()
        t0 = time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t0)
        here.append(time.process_time() - mine)
        after = client.run(time.process_time)
        workers.append(max(after[w] - before.get(w, 0.0) for w in after))
    return statistics.median(walls), statistics.median(workers), statistics.median(here)


def _one_process(x: so.CSRNDArray, w: so.NDArray, fm: dict) -> dict[str, dict[int, float]]:
    """SpMM and the FM step in this process, numba on 1 and on 2 threads."""
    import numba

    from sparse_ops_cookbook.demo.ctr import FactorizationMachine

    out: dict[str, dict[int, float]] = {"spmm": {}, "fm": {}}
    for threads in (1, 2):
        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
        out["spmm"][threads] = _median(lambda: so.dot(x, w))
        model = FactorizationMachine(FM_FEATURES, k=FM_K, seed=0)
        out["fm"][threads] = _median(lambda: model.step(fm["x"], fm["y"]))
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    return out


def _on_cluster(n_workers: int, paths: list[str], w: np.ndarray, fm: dict) -> dict[str, Any]:
    from distributed import Client, LocalCluster, wait

    import sparse_ops.dask as sd
    from sparse_ops_cookbook.demo.ctr import FactorizationMachine
    from sparse_ops_cookbook.demo.ctr_dask import fm_block_loss

    env = {"NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    with LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=logging.ERROR, env=env) as cluster, Client(cluster) as client:
        r: dict[str, Any] = {}
        t0 = time.perf_counter()
        x = sd.from_npz(paths).persist()
        wait([b for b in x.blocks])
        r["load_s"] = time.perf_counter() - t0
        held = client.who_has()
        r["blocks_per_worker"] = sorted(sum(1 for b in x.blocks if w in held.get(b.key, ())) for w in client.nthreads())

        def spmm_persist() -> None:
            y = sd.apply("dot", x, w).persist()
            wait(list(y.blocks))

        r["spmm_persist_s"], r["spmm_worker_cpu_s"], _ = _median_with_cpu(client, spmm_persist)
        r["spmm_compute_s"] = _median(lambda: sd.apply("dot", x, w).compute(), repeat=1)

        tiny = {n: sd.from_array(np.ones((n, 1), np.float32), nblocks=n) for n in (1, TINY_BLOCKS)}
        tiny_s = {n: _median(lambda a=a: wait(list(sd.apply("negative", a).persist().blocks)))
                  for n, a in tiny.items()}
        r["per_block_ms"] = 1e3 * (tiny_s[TINY_BLOCKS] - tiny_s[1]) / (TINY_BLOCKS - 1)

        xb = sd.from_array(fm["x"], nblocks=NBLOCKS)
        yb = sd.from_array(fm["y"], row_splits=xb.row_splits)
        trainer = sd.DataParallel(fm_block_loss, xb, yb, row_params=("w", "v"))
        model = FactorizationMachine(FM_FEATURES, k=FM_K, seed=0)

        def fm_step() -> None:
            _, grads = trainer.step({"w": model.w, "v": model.v, "b": model.b})
            model.update(grads)

        r["fm_step_s"], r["fm_worker_cpu_s"], r["fm_client_cpu_s"] = _median_with_cpu(client, fm_step)
        r["traffic"] = dict(trainer.last_traffic)
        r["distinct_ids"] = [len(c) for c in trainer._cols[0]]
        trainer.close()
        return r


def _fm_data() -> dict:
    from sparse_ops_cookbook.demo.data import make_click_log

    data = make_click_log(n_examples=FM_EXAMPLES, n_features=FM_FEATURES, test_fraction=0.0, seed=0)
    indptr, indices, values, labels = data.train
    x = so.csr_matrix((values, indices, indptr), shape=(len(labels), FM_FEATURES))
    return {"x": x, "y": so.array(labels)}


def run() -> dict[str, Any]:
    import sparse_ops.dask as sd

    m = random_csr(SPMM_ROWS, SPMM_COLS, SPMM_PER_ROW)
    x = so.csr_matrix(m)
    w = np.random.default_rng(1).uniform(-1, 1, (SPMM_COLS, SPMM_K)).astype(np.float32)
    fm = _fm_data()
    results: dict[str, Any] = {"spmm_nnz": m.nnz, "fm_nnz": fm["x"].nnz,
                               "spmm_bytes": m.data.nbytes + m.indices.nbytes + m.indptr.nbytes}
    results["one_process"] = _one_process(x, so.array(w), fm)
    with tempfile.TemporaryDirectory(prefix="sparse_ops-bench-dask-") as folder:
        blocks = [sd.collection.row_block(x, a, b) for a, b in zip(sd.even_splits(SPMM_ROWS, NBLOCKS)[:-1],
                                                                      sd.even_splits(SPMM_ROWS, NBLOCKS)[1:])]
        paths = []
        for i, block in enumerate(blocks):
            paths.append(f"{folder}/block-{i:05d}.npz")
            so.save(paths[-1], block)
        for n in (1, 2):
            results[n] = _on_cluster(n, paths, w, fm)
    return results


def report(r: dict[str, Any]) -> str:
    one = r["one_process"]
    rows = [
        ["SpMM, blocks computed on the workers (persist)", f"{1e3 * one['spmm'][1]:.0f}", f"{1e3 * one['spmm'][2]:.0f}",
         f"{1e3 * r[1]['spmm_persist_s']:.0f}", f"{1e3 * r[2]['spmm_persist_s']:.0f}",
         f"{r[1]['spmm_persist_s'] / r[2]['spmm_persist_s']:.2f}x"],
        ["SpMM, result gathered to the client (compute)", "", "", f"{1e3 * r[1]['spmm_compute_s']:.0f}",
         f"{1e3 * r[2]['spmm_compute_s']:.0f}", f"{r[1]['spmm_compute_s'] / r[2]['spmm_compute_s']:.2f}x"],
        ["FM training step, full batch", f"{1e3 * one['fm'][1]:.0f}", f"{1e3 * one['fm'][2]:.0f}",
         f"{1e3 * r[1]['fm_step_s']:.0f}", f"{1e3 * r[2]['fm_step_s']:.0f}",
         f"{r[1]['fm_step_s'] / r[2]['fm_step_s']:.2f}x"],
        ["SpMM (persist): CPU time of the busiest worker", "", "", f"{1e3 * r[1]['spmm_worker_cpu_s']:.0f}",
         f"{1e3 * r[2]['spmm_worker_cpu_s']:.0f}", f"{r[1]['spmm_worker_cpu_s'] / r[2]['spmm_worker_cpu_s']:.2f}x"],
        ["FM step: CPU time of the busiest worker", "", "", f"{1e3 * r[1]['fm_worker_cpu_s']:.0f}",
         f"{1e3 * r[2]['fm_worker_cpu_s']:.0f}", f"{r[1]['fm_worker_cpu_s'] / r[2]['fm_worker_cpu_s']:.2f}x"],
        ["FM step: CPU time of the client (pull, update)", "", "", f"{1e3 * r[1]['fm_client_cpu_s']:.0f}",
         f"{1e3 * r[2]['fm_client_cpu_s']:.0f}", ""],
        ["scheduler cost per block (ms)", "", "", f"{r[1]['per_block_ms']:.2f}", f"{r[2]['per_block_ms']:.2f}", ""],
        ["loading the 8 SpMM block files on the workers", "", "", f"{1e3 * r[1]['load_s']:.0f}",
         f"{1e3 * r[2]['load_s']:.0f}", ""],
    ]
    table = markdown_table(["ms (median of 3)", "1 process, 1 thread", "1 process, 2 threads", "1 worker",
                            "2 workers", "1 / 2 workers"], rows)
    t = r[2]["traffic"]
    ids = r[2]["distinct_ids"]
    per_block_nnz = r["fm_nnz"] / NBLOCKS
    lines = [
        table, "",
        f"SpMM matrix: {r['spmm_nnz']:,} stored values ({r['spmm_bytes'] / 1e6:.0f} MB of csr arrays) in "
        f"{NBLOCKS} blocks; dense operand {SPMM_COLS:,} x {SPMM_K} float32 ({SPMM_COLS * SPMM_K * 4 / 1e6:.1f} MB, "
        f"broadcast once per worker per call); result {SPMM_ROWS:,} x {SPMM_K} float32 "
        f"({SPMM_ROWS * SPMM_K * 4 / 1e6:.0f} MB, gathered only by compute). Blocks per worker after "
        f"loading, 2 workers: {r[2]['blocks_per_worker']} (the scheduler places them; a worker that is "
        f"given more blocks sets the pace).",
        "",
        f"FM step: {r['fm_nnz']:,} stored values in {NBLOCKS} blocks ({per_block_nnz / 1e6:.2f}M per block), "
        f"k = {FM_K}. Per step, over all blocks: parameter rows pulled {t['pulled'] / 1e6:.1f} MB, "
        f"per-block row_sparse gradients into the reduction {t['gradients'] / 1e6:.1f} MB, dense parameters "
        f"broadcast {t['broadcast'] / 1e3:.1f} kB; distinct feature ids per block: "
        f"{int(np.mean(ids)):,} on average ({np.mean(ids) / per_block_nnz:.3f} per stored value).",
    ]
    return "\n".join(lines)


def main() -> None:
    import os

    t0 = time.perf_counter()
    load_before = os.getloadavg()[0]
    results = run()
    load_after = os.getloadavg()[0]
    machine = describe_machine()
    when = datetime.datetime.now().isoformat(timespec="seconds")
    text = "\n".join([
        "# sparse_ops.dask on a local cluster", "",
        f"Run {when} with `python -m benchmarks.bench_dask` ({time.perf_counter() - t0:.0f} s). "
        "Workers: separate processes, 1 thread each, numba on 1 thread; see the module docstring. "
        f"Load average (1 min) {load_before:.1f} before and {load_after:.1f} after the run: other work "
        "shared the 2 cores.", "",
        "## Machine", "", *[f"- {k}: {v}" for k, v in machine.items()], "",
        "## Results", "", report(results), ""])
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "dask.md"
    out.write_text(text)
    print(text)
    print(f"\nwritten to {out}")


if __name__ == "__main__":
    main()
