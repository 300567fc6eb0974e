"""Launches on the caller's stream and device (run by benchmarks/gpu_check.sh; issue 40's
checks that only hardware can make): the native gpu ops that launch from a bare Device
(csr -> dense, row_sparse -> dense, the densifying fallbacks) or from an op context
(dot, sum over rows, dense + csr, the gpu SpGEMM, the Embedding backward) run on a
non-blocking side stream made current, read back with only that stream synchronised,
and give the cpu's values; every launch is recorded (``sdk.launch.recording``) on that
stream. With a second GPU, the same calls on gpu(1) while gpu(0) is current launch on
gpu(1) and leave their results there. In the simulator (``SPARSE_OPS_CUDA_SIM=1``) the
values and the recorded devices are checked (it has one device and no streams). Prints
one line per check (``results``: every check runs); exits 1 if any failed."""
from __future__ import annotations

import contextlib
import sys
from typing import Any, Callable, Iterator


def cases(so: Any, np: Any, rows: int = 300) -> dict[str, Callable[[Any], Any]]:
    """name -> f(device) returning a container: calls whose kernels launch on that device.
    ``rows``: of the csr operand (fewer for the simulator, where each gpu thread is a
    Python thread)."""
    import scipy.sparse as sp

    cols = max(2 * rows // 3, 10)
    m = sp.random(rows, cols, density=0.05, format="csr", dtype=np.float64, random_state=0)
    w = np.random.default_rng(1).standard_normal((cols, 16))
    ids = np.random.default_rng(2).integers(0, 50, 5 * rows // 3).astype(np.float64)
    head = np.random.default_rng(3).standard_normal((ids.shape[0], 8))

    def on(dev: Any, x: Any) -> Any:
        return x.to(dev)

    return {
        "csr -> dense (row ids from a bare Device)": lambda d: on(d, so.csr_matrix(m)).tostype("default"),
        "row_sparse -> dense": lambda d: on(d, so.csr_matrix(m)).tostype("row_sparse").tostype("default"),
        "dot(csr, dense)": lambda d: so.dot(on(d, so.csr_matrix(m)), on(d, so.array(w))),
        "sum(csr, axis=1)": lambda d: so.sum(on(d, so.csr_matrix(m)), axis=1),
        "dense + csr": lambda d: so.elemwise_add(on(d, so.array(m.toarray())), on(d, so.csr_matrix(m))),
        "dot(csr, csr) (SpGEMM)": lambda d: so.dot(on(d, so.csr_matrix(m)), on(d, so.csr_matrix(m.T.tocsr()))),
        "Embedding backward": lambda d: so.ops._embedding_backward(on(d, so.array(ids)), on(d, so.array(head)),
                                                                  input_dim=50, sparse_grad=True),
    }


def results(rows: int = 300) -> Iterator[tuple[str, str, str]]:
    """(check, what it saw, status) per check, status "ok", "FAIL: why" or "skipped: why";
    ``rows`` as in ``cases``. Every check runs: a failure does not stop the others
    (``benchmarks.gpu_check`` makes table rows of them)."""
    import numpy as np

    import sparse_ops as so
    from sparse_ops.sdk import launch

    if so.num_gpus() == 0:
        yield "streams and devices", "", "skipped: no gpu (set SPARSE_OPS_CUDA_SIM=1 to simulate one)"
        return
    real = so.gpu(0).xp is not np
    if real:
        import cupy
    for name, make in cases(so, np, rows).items():
        want = make(so.cpu()).tostype("default").asnumpy()
        side = cupy.cuda.Stream(non_blocking=True) if real else None
        with (side if real else contextlib.nullcontext()), launch.recording() as log:
            got = make(so.gpu(0))
            dense = got.tostype("default").data
            if real:
                side.synchronize()  # only the side stream: a launch elsewhere could still be running
        host = dense.get() if real else np.asarray(dense)
        devices = {d for _, d, _ in log}
        streams = {s for _, _, s in log}
        if not np.allclose(host, want, rtol=1e-10, atol=1e-12):
            yield name, "", f"FAIL: gpu values differ from the cpu's (max abs diff {np.abs(host - want).max():.3g})"
        elif not devices <= {so.gpu(0)} or (real and not streams <= {int(side.ptr)}):
            yield name, "", (f"FAIL: launches on devices {devices}, streams {streams} (side stream "
                             f"{int(side.ptr) if real else None})")
        else:
            yield name, f"{len(log)} launches, all on gpu(0)" + (" on the side stream" if real else ""), "ok"
    if not real:
        yield "the calls on gpu(1) while gpu(0) is current", "", "skipped: the simulator has one device"
    elif so.num_gpus() > 1:
        with cupy.cuda.Device(0):
            for name, make in cases(so, np, rows).items():
                with launch.recording() as log:
                    got = make(so.gpu(1))
                    data = got.tostype("default").data
                devices = {d for _, d, _ in log}
                name = f"{name} on gpu(1) while gpu(0) is current"
                if got.device != so.gpu(1) or data.device.id != 1 or not devices <= {so.gpu(1)}:
                    yield name, "", (f"FAIL: result on {got.device} (memory on device {data.device.id}), "
                                     f"launches on {devices}")
                else:
                    yield name, f"{len(log)} launches there", "ok"
    else:
        yield "the calls on gpu(1) while gpu(0) is current", "", "skipped: one GPU here"


def main() -> int:
    failed = False
    for name, seen, status in results():
        if status == "ok":
            print(f"ok   {name}: {seen}")
        else:
            failed = failed or status.startswith("FAIL")
            print(f"{status.split(':', 1)[0]} {name}: {status.split(': ', 1)[-1]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
