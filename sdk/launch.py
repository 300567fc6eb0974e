"""Launch configurations for numba.cuda kernels, so authors don't hand-compute grids.

Each helper returns ``(blocks, threads)`` for ``kernel[blocks, threads](...)``:

- ``grid_for(n)``: one thread per item (``i = cuda.grid(1)``, guard ``if i < n``);
- ``rows_grid(n_rows)``: one thread per row, the same grid under a name that says so;
- ``warp_per_row(n_rows)``: one 32-thread warp per csr row (lanes stride over the row's
  stored values or over a feature dimension), the usual layout for csr kernels.

The grid always has at least one block (CUDA refuses an empty grid, so kernels guard
their index instead), and the work is spread evenly over as few blocks as the block size
allows, each block rounded up to whole warps (12 items get one 32-thread block, 300 get
two blocks of 160 threads rather than 256 + 44): harmless on hardware and much faster
under numba's CUDA simulator, which runs every thread as a Python thread.

``launch(ctx, kernel, config, *args)`` runs a kernel from an operator's gpu kernel
method, on the device and stream of the call that caused it, by construction: ``ctx`` is
the op context (its device, and its stream: the current CuPy stream there, which the torch
bridge sets to torch's current stream and the JAX handler to XLA's) or a gpu ``Device``
(that device's current CuPy stream); anything else is refused. The device is made current
for CuPy and numba around the launch, so a kernel never lands on whichever GPU happened to
be current. CuPy arrays go to numba through ``__cuda_array_interface__``, without copies.
Under the simulator (``SPARSE_OPS_CUDA_SIM=1``), where device memory is NumPy and there
are no streams, read-only inputs (the index views containers hand out) travel as
``cuda.In`` so the simulator does not try to write them back. ``recording()`` collects the
(kernel, device, stream) of each launch in its block, for tests.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

import numpy as np

WARP_SIZE = 32
MAX_THREADS_PER_BLOCK = 1024


def _check_block(threads: int) -> int:
    threads = int(threads)
    if threads < WARP_SIZE or threads > MAX_THREADS_PER_BLOCK or threads % WARP_SIZE:
        raise ValueError(f"a block has a multiple of {WARP_SIZE} threads, at most {MAX_THREADS_PER_BLOCK}; "
                         f"got {threads}")
    return threads


def _round_up(n: int, multiple: int) -> int:
    return (n + multiple - 1) // multiple * multiple


def grid_for(n: int, block: int = 256) -> tuple[int, int]:
    """(blocks, threads) for one thread per item of ``n``: at most ``block`` threads per
    block (a multiple of 32), the items spread evenly over the blocks, at least one block.

    In the kernel: ``i = cuda.grid(1)`` and ``if i < n: ...``.
    """
    block = _check_block(block)
    n = max(int(n), 0)
    blocks = max(1, -(-n // block))
    # spread the items evenly: 300 items make two blocks of 160 threads, not 256 + 44
    threads = max(WARP_SIZE, _round_up(-(-n // blocks), WARP_SIZE))
    return blocks, threads


def rows_grid(n_rows: int, block: int = 256) -> tuple[int, int]:
    """(blocks, threads) for one thread per row: ``row = cuda.grid(1)``, ``if row < n_rows``.

    Best when rows are short or the per-row work is sequential (a scan of the row)."""
    return grid_for(n_rows, block)


def warp_per_row(n_rows: int, warps_per_block: int = 8) -> tuple[int, int]:
    """(blocks, threads) for one 32-thread warp per row, at most ``warps_per_block`` warps
    (rows) per block, the rows spread evenly over the blocks, at least one block.

    In the kernel::

        warp = cuda.threadIdx.x // 32
        lane = cuda.threadIdx.x % 32
        row = cuda.blockIdx.x * (cuda.blockDim.x // 32) + warp
        # lanes stride over the row: for p in range(start + lane, end, 32)

    Keep every thread alive to the end (test ``row < n_rows`` around the work, do not
    return early) when the kernel calls ``cuda.syncthreads()``.
    """
    warps_per_block = int(warps_per_block)
    _check_block(warps_per_block * WARP_SIZE)
    n_rows = max(int(n_rows), 0)
    blocks = max(1, -(-n_rows // warps_per_block))
    warps = max(1, -(-n_rows // blocks))  # rows spread evenly over the blocks
    return blocks, warps * WARP_SIZE


_streams: dict[tuple[int, int], Any] = {}
_records = threading.local()  # .log: the launches of a ``recording()`` block on this thread


@contextlib.contextmanager
def recording() -> Iterator[list]:
    """A list receiving ``(kernel name, device, stream pointer or None)`` for each launch in
    the block on this thread (what a test checks a call launched where it should)."""
    saved, _records.log = getattr(_records, "log", None), []
    try:
        yield _records.log
    finally:
        _records.log = saved


def _numba_stream(stream: Any, device_id: int) -> Any:
    """The numba stream wrapping a CuPy stream of device ``device_id`` (numba's context of
    that device current)."""
    from numba import cuda

    key = (device_id, int(stream.ptr))
    wrapped = _streams.get(key)
    if wrapped is None:
        wrapped = _streams[key] = cuda.external_stream(key[1])
    return wrapped


def launch(ctx: Any, kernel: Any, config: tuple[int, int], *args: Any) -> None:
    """Run numba.cuda ``kernel`` with ``config`` = (blocks, threads) on ``args``, on the
    device and stream of ``ctx``: an op context or a gpu ``Device`` (see the module
    docstring); a TypeError for anything else."""
    from sparse_ops.device import Device

    device = ctx if isinstance(ctx, Device) else getattr(ctx, "device", None)
    if not isinstance(device, Device) or device.device_type != "gpu":
        raise TypeError(f"launch runs on the device and stream of an op context or a gpu Device; got {ctx!r}")
    blocks, threads = config
    xp = device.xp
    log = getattr(_records, "log", None)
    if xp is np:  # host memory: the simulator (one device, no streams)
        from numba import cuda

        if log is not None:
            log.append((getattr(kernel, "__name__", repr(kernel)), device, None))
        args = tuple(cuda.In(a) if isinstance(a, np.ndarray) and not a.flags.writeable else a for a in args)
        kernel[blocks, threads](*args)
        return
    from numba import cuda

    with xp.cuda.Device(device.device_id), cuda.gpus[device.device_id]:
        stream = getattr(ctx, "stream", None) if ctx is not device else None
        if stream is None:
            stream = xp.cuda.get_current_stream()
        if log is not None:
            log.append((getattr(kernel, "__name__", repr(kernel)), device, int(stream.ptr)))
        kernel[blocks, threads, _numba_stream(stream, device.device_id)](*args)


__all__ = ["WARP_SIZE", "grid_for", "rows_grid", "warp_per_row", "launch", "recording"]
