"""The op context: what a kernel may use besides its inputs and outputs."""
from __future__ import annotations

import threading
from typing import Any

import numpy as np

from . import device as _dev
from .alloc import aligned_bytes
from .device import Device
from .errors import OperatorError
from .ndarray import CSRNDArray, NDArray, RowSparseNDArray
from .ndarray.view import plain
from .rng import generator


# ---- unset-output detection (debug mode) ---------------------------------------------------------
# Under SPARSE_OPS_BOUNDSCHECK=1 the outputs of kernels that are not ours start out holding a
# marker bit pattern; any marker left after the kernel is a value it never wrote. For floats
# the marker is a signalling NaN with a payload that arithmetic never produces (any operation
# on it gives a quiet NaN), for 4- and 8-byte integers a value nobody computes by chance.
# Smaller integer and bool outputs cannot be marked reliably and are not.
_MARKERS = {
    ("f", 2): (np.uint16, 0x7DA5), ("f", 4): (np.uint32, 0x7FA5A5A5), ("f", 8): (np.uint64, 0x7FF4A5A5A5A5A5A5),
    ("i", 4): (np.uint32, 0xA5A5A5A5), ("i", 8): (np.uint64, 0xA5A5A5A5A5A5A5A5),
    ("u", 4): (np.uint32, 0xA5A5A5A5), ("u", 8): (np.uint64, 0xA5A5A5A5A5A5A5A5),
}


def mark_unset(a: Any) -> None:
    """Fill ``a`` with the unset marker of its dtype (no-op for dtypes without one)."""
    marker = _MARKERS.get((a.dtype.kind, a.dtype.itemsize))
    if marker is not None and a.size:
        a.view(marker[0])[...] = marker[1]


def holds_unset(a: Any) -> bool:
    """Whether any element of ``a`` still holds the unset marker of its dtype."""
    marker = _MARKERS.get((a.dtype.kind, a.dtype.itemsize))
    return bool(marker is not None and a.size and (a.view(marker[0]) == marker[1]).any())


class _Workspace(threading.local):
    def __init__(self) -> None:
        self.buffers: dict[Any, Any] = {}
        self.offsets: dict[Any, int] = {}


_workspace = _Workspace()

# A thread keeps its workspace buffer between kernels (reused, no allocation per call) up to
# this size; a larger one, grown for one big request, is dropped once no kernel uses it, so
# the memory a thread holds between calls stays bounded.
WORKSPACE_KEEP_BYTES = 64 << 20
# On a real gpu a pool serves one stream (below); a thread keeps the pools of at most this
# many streams per device, dropping the least recently used idle ones.
WORKSPACE_KEEP_STREAMS = 4


def pool_key(device: Device) -> Any:
    """Which workspace pool a kernel running now on ``device`` takes from: the device's, and
    on a real gpu the current stream's too. A kernel's launches are queued, not finished, when
    it returns, so memory handed to the next kernel is safe to reuse only if that kernel runs
    on the same stream (ordered after the first); a call on another stream gets another pool.
    CuPy frees a dropped pool's memory into its pool of the stream it was allocated on, so
    dropping is safe too."""
    xp = device.xp
    if xp is np:
        return device
    with xp.cuda.Device(device.device_id):  # CuPy's current stream is per device
        return device, int(xp.cuda.get_current_stream().ptr)


def workspace_mark(device: Device) -> tuple[Any, int]:
    """Where the pool of the kernel about to run stands (for ``release_workspace``)."""
    key = pool_key(device)
    return key, _workspace.offsets.get(key, 0)


def release_workspace(mark: tuple[Any, int]) -> None:
    """A kernel returned: give back what it took from its pool (everything past ``mark``),
    dropping an oversized buffer once the pool is empty again."""
    key, offset = mark
    _workspace.offsets[key] = offset
    if offset == 0:
        buf = _workspace.buffers.get(key)
        if buf is not None and buf.shape[0] > WORKSPACE_KEEP_BYTES:
            del _workspace.buffers[key]


def _take(key: Any, device: Device, nbytes: int) -> Any:
    """``nbytes`` of pool ``key`` (64-byte aligned), growing the pool when it is short."""
    align = 64
    start = _workspace.offsets.get(key, 0)
    start = (start + align - 1) // align * align
    buf = _workspace.buffers.pop(key, None)  # re-inserted last: the dict's order is recency
    if buf is None or buf.shape[0] < start + nbytes:
        size = max(start + nbytes, 2 * (0 if buf is None else buf.shape[0]), 1 << 16)
        if device.xp is np:
            buf = aligned_bytes(size)
        else:  # CuPy's allocations start on 512-byte boundaries
            with _dev.allocating_on(device):
                buf = device.xp.empty(size, dtype=np.uint8)
    _workspace.buffers[key] = buf
    _workspace.offsets[key] = start + nbytes
    if isinstance(key, tuple):
        _forget_idle_streams(key[0])
    return buf[start:start + nbytes]


def _forget_idle_streams(device: Device) -> None:
    streams = [k for k in _workspace.buffers if isinstance(k, tuple) and k[0] == device]
    for k in streams[:max(0, len(streams) - WORKSPACE_KEEP_STREAMS)]:
        if not _workspace.offsets.get(k, 0):
            del _workspace.buffers[k]
            _workspace.offsets.pop(k, None)


class OpContext:
    """What a kernel may use besides its inputs and outputs.

    ``device``, ``is_train``; ``workspace(shape, dtype)`` temporary memory from a
    per-thread, per-device pool (per stream on a real gpu: ``pool_key``; valid until the
    kernel returns; the pool is reused by later calls and keeps at most
    ``WORKSPACE_KEEP_BYTES`` between them); ``rng`` a seeded NumPy
    generator (``sparse_ops.random.seed``); ``stream`` the CuPy stream on a real gpu;
    ``alloc_csr`` / ``alloc_row_sparse`` give a sparse output its arrays once the kernel
    knows how many values it has (MXNet's ``alloc_sparse``), without a later copy;
    ``state`` a dict in which a kernel may keep what it works out once for its plan (a plan
    serves one input signature: parameters, storage types, dtypes, shapes, device), as
    MXNet's stateful operators keep a state per signature.

    ``mark_unset`` (set by dispatch in debug mode for kernels that are not ours): the
    arrays these methods hand out start filled with markers (values: the unset marker;
    indices and indptr: -1), so whatever the kernel forgets to fill is caught afterwards.
    """

    __slots__ = ("device", "is_train", "op", "xp", "mark_unset", "state")

    def __init__(self, device: Device, is_train: bool, op: Any, mark_unset: bool = False) -> None:
        self.device, self.is_train, self.op = device, is_train, op
        self.xp = device.xp  # numpy or cupy
        self.mark_unset = mark_unset
        self.state: dict[str, Any] = {}

    def _fresh(self, values: Any, *index_arrays: Any) -> None:
        if self.mark_unset:
            mark_unset(values)
            for a in index_arrays:
                a.fill(-1)

    @property
    def stream(self) -> Any:
        return self.xp.cuda.get_current_stream() if self.xp is not np else None

    @property
    def rng(self) -> np.random.Generator:
        return generator(self.device)

    def workspace(self, shape: Any, dtype: Any = np.float32) -> Any:
        """Temporary memory, valid until the kernel returns (declare ``resources = ("workspace",)``)."""
        if "workspace" not in self.op.resources:
            raise OperatorError(f"{self.op.label} uses ctx.workspace but does not declare "
                                "resources = ('workspace',)")
        dtype = np.dtype(dtype)
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        if any(int(d) < 0 for d in shape):
            raise OperatorError(f"{self.op.label}: ctx.workspace got a negative shape {shape}")
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        return _take(pool_key(self.device), self.device, nbytes).view(dtype).reshape(shape)

    def alloc_csr(self, out: CSRNDArray, nnz: int, index_dtype: Any = np.int64) -> tuple[Any, Any, Any]:
        """Give csr output ``out`` arrays for ``nnz`` values; returns (data, indices, indptr) to fill.
        The index arrays are int64 unless ``index_dtype`` says otherwise, whatever the inputs'
        (pass ``index_dtype=x.indices.dtype`` to keep an int32 input's). More values than the
        output has entries is refused: it would leave values no index could address."""
        self._check_stype(out, "csr", "alloc_csr")
        self._check_room(out, nnz, out.shape[0] * out.shape[1], "values", "entries")
        xp = self.device.xp
        with _dev.allocating_on(self.device):
            data = xp.empty(nnz, dtype=out.dtype)
            indices = xp.empty(nnz, dtype=index_dtype)
            indptr = xp.empty(out.shape[0] + 1, dtype=index_dtype)
        self._fresh(data, indices, indptr)
        out._data, out._indices, out._indptr = data, indices, indptr
        return data, indices, indptr

    def _check_stype(self, out: Any, stype: str, method: str) -> None:
        """Refuse handing ``stype`` arrays to an output of another storage type (its storage
        type comes from the op's storage rule, ``infer_storage_type`` or
        ``backward_storage_type``), naming the op."""
        if getattr(out, "stype", None) != stype:
            got = f"a {out.stype!r} output" if isinstance(out, NDArray) else f"a {type(out).__name__}, not an output"
            raise OperatorError(f"{self.op.label}: ctx.{method} needs a {stype} output, got {got} of shape "
                                f"{getattr(out, 'shape', '?')} (output storage types come from the op's storage rule: "
                                "infer_storage_type, or backward_storage_type for a backward); write a dense "
                                "output as an array, or declare it " + stype)

    def _check_room(self, out: NDArray, n: Any, room: int, what: str, has: str) -> None:
        """Refuse a sparse output's allocation of ``n`` stored ``what`` beyond the ``room`` it
        has (or not a non-negative integer), naming the op."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 0 <= int(n) <= room:
            raise OperatorError(f"{self.op.label}: cannot allocate {n!r} stored {what} for a {out.stype} output of "
                                f"shape {out.shape}: it has {room} {has}")

    def empty(self, shape: Any, dtype: Any) -> Any:
        """An uninitialised array on this op's device (temporary or output-building)."""
        with _dev.allocating_on(self.device):
            a = self.xp.empty(shape, dtype=dtype)
        self._fresh(a)
        return a

    def zeros(self, shape: Any, dtype: Any) -> Any:
        """A zero-filled array on this op's device."""
        with _dev.allocating_on(self.device):
            return self.xp.zeros(shape, dtype=dtype)

    def set_csr(self, out: CSRNDArray, data: Any, indices: Any, indptr: Any) -> None:
        """Hand arrays the kernel built to csr output ``out`` (no copy; checked cheaply after the kernel)."""
        self._check_stype(out, "csr", "set_csr")
        out._data, out._indices, out._indptr = plain(data, indices, indptr)

    def set_row_sparse(self, out: RowSparseNDArray, data: Any, indices: Any) -> None:
        """Hand arrays the kernel built to row_sparse output ``out`` (no copy)."""
        self._check_stype(out, "row_sparse", "set_row_sparse")
        out._data, out._indices = plain(data, indices)

    def adopt(self, out: NDArray, result: NDArray) -> None:
        """Hand the arrays of sparse container ``result`` (out's storage type) to output ``out``."""
        if result.stype == "csr":
            self.set_csr(out, result.data, result.indices, result.indptr)
        else:
            self.set_row_sparse(out, result.data, result.indices)

    def alloc_like(self, out: NDArray, like: NDArray) -> Any:
        """Give sparse output ``out`` the structure of ``like`` (index arrays shared, never
        copied) and fresh values; returns the values array for the kernel to fill."""
        if out.stype != like.stype or out.shape != like.shape:
            raise OperatorError(f"alloc_like: output is {out.stype} {out.shape}, "
                                f"structure source is {like.stype} {like.shape}")
        with _dev.allocating_on(self.device):
            data = self.xp.empty(like._data.shape, dtype=out.dtype)
        self._fresh(data)
        out._data = data
        if like.stype == "csr":
            out._indices, out._indptr = like._indices, like._indptr
        elif like.stype == "row_sparse":
            out._indices = like._indices
        return data

    def alloc_row_sparse(self, out: RowSparseNDArray, nnz_rows: int,
                         index_dtype: Any = np.int64) -> tuple[Any, Any]:
        """Give row_sparse output ``out`` arrays for ``nnz_rows`` rows; returns (data, indices)
        (indices int64 unless ``index_dtype`` says otherwise, as for ``alloc_csr``); more rows
        than the output has are refused."""
        self._check_stype(out, "row_sparse", "alloc_row_sparse")
        self._check_room(out, nnz_rows, out.shape[0], "rows", "rows")
        xp = self.device.xp
        with _dev.allocating_on(self.device):
            data = xp.empty((nnz_rows, *out.shape[1:]), dtype=out.dtype)
            indices = xp.empty(nnz_rows, dtype=index_dtype)
        self._fresh(data, indices)
        out._data, out._indices = data, indices
        return data, indices
