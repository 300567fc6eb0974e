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
method: on a real GPU on the op context's CuPy stream (CuPy arrays go to numba through
``__cuda_array_interface__``, without copies); under the simulator
(``SPARSE_OPS_CUDA_SIM=1``), where device memory is NumPy, read-only inputs (the index
views containers hand out) travel as ``cuda.In`` so the simulator does not try to write
them back.
"""
from __future__ import annotations

from typing import Any

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


_streams: dict[int, Any] = {}


def _numba_stream(ctx: Any) -> Any:
    """The numba stream wrapping the op context's CuPy stream; 0 (the default stream) for
    host memory, i.e. under the simulator."""
    stream = getattr(ctx, "stream", None)
    if stream is None:
        return 0
    from numba import cuda

    ptr = int(stream.ptr)
    wrapped = _streams.get(ptr)
    if wrapped is None:
        wrapped = _streams[ptr] = cuda.external_stream(ptr)
    return wrapped


def launch(ctx: Any, kernel: Any, config: tuple[int, int], *args: Any) -> None:
    """Run numba.cuda ``kernel`` with ``config`` = (blocks, threads) on ``args``, on the
    stream of op context ``ctx`` (see the module docstring)."""
    blocks, threads = config
    if getattr(ctx, "stream", None) is None:  # host memory: the simulator
        from numba import cuda

        args = tuple(cuda.In(a) if isinstance(a, np.ndarray) and not a.flags.writeable else a for a in args)
        kernel[blocks, threads](*args)
    else:
        kernel[blocks, threads, _numba_stream(ctx)](*args)


__all__ = ["WARP_SIZE", "grid_for", "rows_grid", "warp_per_row", "launch"]
