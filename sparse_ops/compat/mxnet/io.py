"""``mx.io``: MXNet 1.x's data iterators for sparse training loops.

- ``LibSVMIter``: a LibSVM text file (or a folder of them) as batches of csr data with
  dense labels (or csr labels from a second file), MXNet's parameters and its
  ``round_batch`` wrap-around; ``num_parts`` / ``part_index`` read one line-aligned byte
  range of the input, as MXNet's (dmlc's) splitter does.
- ``NDArrayIter``: MXNet 1.9.1's, batch for batch: NDArray / NumPy inputs (SciPy csr
  inside a list or dict), ``last_batch_handle`` ``'pad'``, ``'discard'`` or
  ``'roll_over'``, ``shuffle``, the layout's batch axis. csr inputs give dense batches
  (1.9.1 slices with ``slice_axis``, which densifies) and take only ``'discard'``
  (else ``NotImplementedError``).
- ``SparseNDArrayIter``: sparse-ops' own (not in MXNet): the same interface, but csr batches
  stay csr under every ``last_batch_handle``.
- ``MNISTIter`` and ``CSVIter``: MXNet's C++ iterators (keyword arguments, first batch read
  at construction, MXNet's batch loader rules), on ``MXDataIter``.
- ``DataBatch``, ``DataDesc``, ``DataIter``, ``ResizeIter``.

The LibSVM parser is one numba pass over the file's bytes (``sparse_ops.kernels.libsvm``;
numbers converted as ``float()`` does, then to float32); a malformed file raises
``LibSVMFormatError`` (an ``MXNetError``) naming the file and the line.

Unlike MXNet: files are read once at construction and kept in memory (MXNet streams them,
and reports a bad line only when its batch is read); column indices of a LibSVM row may
come unsorted (they are sorted; MXNet expects them sorted and silently builds a malformed
array otherwise); LibSVMIter's ``round_batch=False`` gives a short last batch padded with
empty rows (MXNet refuses it for sparse data); ``NDArrayIter`` refuses an unknown
``last_batch_handle``, a non-positive ``batch_size`` and inputs of different lengths (MXNet
accepts them and misbehaves later); MNISTIter's shuffled order comes from NumPy (same seed,
same order every time, but not MXNet's order) and its files' magic numbers are checked;
``iter_next()`` of the C++-style iterators consumes the batch read at construction (see
``MXDataIter``); h5py datasets are not taken.
"""
from __future__ import annotations

import os
import re
from collections import OrderedDict, namedtuple
from typing import Any

import numpy as np

from ...errors import SparseOpsError
from ...ndarray import CSRNDArray, NDArray
from .base import MXNetArgumentError, MXNetValueError, mx_real_t
from .ndarray._op import as_face

__all__ = ["DataDesc", "DataBatch", "DataIter", "ResizeIter", "NDArrayIter", "SparseNDArrayIter", "MXDataIter",
           "LibSVMIter", "MNISTIter", "CSVIter", "LibSVMFormatError", "DataIterError", "DataIterNotImplementedError"]


class DataIterError(SparseOpsError, ValueError):
    """A refused iterator argument (an ``MXNetError``); the message names the iterator and argument."""


class LibSVMFormatError(DataIterError):
    """A malformed LibSVM file; the message names the file and the line (1-based)."""


# ---- descriptions and batches ------------------------------------------------------------------------
class DataDesc(namedtuple("DataDesc", ["name", "shape"])):
    """Name, shape, dtype and layout of one input (MXNet's ``DataDesc``; a ``(name, shape)`` tuple)."""

    def __new__(cls, name: str, shape: Any, dtype: Any = mx_real_t, layout: str = "NCHW") -> "DataDesc":
        ret = super().__new__(cls, name, shape)
        ret.dtype = dtype
        ret.layout = layout
        return ret

    def __repr__(self) -> str:
        return f"DataDesc[{self.name},{self.shape},{self.dtype},{self.layout}]"

    @staticmethod
    def get_batch_axis(layout: str | None) -> int:
        return 0 if layout is None else layout.find("N")

    @staticmethod
    def get_list(shapes: Any, types: Any) -> list:
        if types is not None:
            type_dict = dict(types)
            return [DataDesc(x[0], x[1], type_dict[x[0]]) for x in shapes]
        return [DataDesc(x[0], x[1]) for x in shapes]


class DataBatch:
    """One batch: lists ``data`` and ``label`` of arrays, ``pad`` (examples at the end that
    repeat earlier ones or are padding), ``index`` (the examples' positions)."""

    def __init__(self, data: Any, label: Any = None, pad: int | None = None, index: Any = None,
                 bucket_key: Any = None, provide_data: Any = None, provide_label: Any = None) -> None:
        if data is not None and not isinstance(data, (list, tuple)):
            raise DataIterError("DataBatch: data must be a list of NDArrays")
        if label is not None and not isinstance(label, (list, tuple)):
            raise DataIterError("DataBatch: label must be a list of NDArrays")
        self.data, self.label, self.pad, self.index = data, label, pad, index
        self.bucket_key, self.provide_data, self.provide_label = bucket_key, provide_data, provide_label

    def __str__(self) -> str:
        data_shapes = [d.shape for d in self.data]
        label_shapes = [lb.shape for lb in self.label] if self.label else None
        return f"{type(self).__name__}: data shapes: {data_shapes} label shapes: {label_shapes}"


class DataIter:
    """Base of the iterators: ``next()`` gives a ``DataBatch`` or raises ``StopIteration``."""

    def __init__(self, batch_size: int = 0) -> None:
        self.batch_size = batch_size

    def __iter__(self) -> "DataIter":
        return self

    def reset(self) -> None:
        pass

    def next(self) -> DataBatch:
        if self.iter_next():
            return DataBatch(data=self.getdata(), label=self.getlabel(), pad=self.getpad(), index=self.getindex())
        raise StopIteration

    def __next__(self) -> DataBatch:
        return self.next()

    def iter_next(self) -> bool:
        return False

    def getdata(self) -> Any:
        return None

    def getlabel(self) -> Any:
        return None

    def getindex(self) -> Any:
        return None

    def getpad(self) -> Any:
        return None


class ResizeIter(DataIter):
    """``size`` batches per epoch from ``data_iter`` (restarting it when it runs out)."""

    def __init__(self, data_iter: DataIter, size: int, reset_internal: bool = True) -> None:
        super().__init__()
        self.data_iter, self.size, self.reset_internal = data_iter, size, reset_internal
        self.cur = 0
        self.current_batch: DataBatch | None = None
        self.provide_data = data_iter.provide_data
        self.provide_label = data_iter.provide_label
        self.batch_size = data_iter.batch_size

    def reset(self) -> None:
        self.cur = 0
        if self.reset_internal:
            self.data_iter.reset()

    def iter_next(self) -> bool:
        if self.cur == self.size:
            return False
        try:
            self.current_batch = self.data_iter.next()
        except StopIteration:
            self.data_iter.reset()
            self.current_batch = self.data_iter.next()
        self.cur += 1
        return True

    def getdata(self) -> Any:
        return self.current_batch.data

    def getlabel(self) -> Any:
        return self.current_batch.label

    def getindex(self) -> Any:
        return self.current_batch.index

    def getpad(self) -> Any:
        return self.current_batch.pad


# ---- LibSVM parsing ----------------------------------------------------------------------------------------
_CHUNK = 32 << 20  # bytes parsed at once: bounds the temporary arrays


class _Parsed:
    """Rows of one input: float32 labels and csr components (int64 indices and indptr)."""

    def __init__(self, labels, data, indices, indptr):
        self.labels, self.data, self.indices, self.indptr = labels, data, indices, indptr

    @property
    def rows(self) -> int:
        return int(self.labels.shape[0])


def _fail(path: str, line: int, what: str) -> LibSVMFormatError:
    return LibSVMFormatError(f"LibSVMIter: {path}, line {line}: {what}")


_TOKEN_END = re.compile(rb"[ \t\r\n]")
_QUOTED = 40  # characters of a bad token an error quotes


def _token(chunk: bytes, pos: int) -> str:
    """The token at ``pos`` for an error message: its first characters, marked when cut."""
    return _quoted(chunk[pos:pos + _QUOTED + 1])


def _quoted(text: bytes) -> str:
    m = _TOKEN_END.search(text)
    text = text[:m.start()] if m else text
    cut = len(text) > _QUOTED
    return text[:_QUOTED].decode(errors="replace") + ("..." if cut else "")


def _parse_chunk(path: str, chunk: bytes, first_line: int, num_cols: int, what: str):
    """(labels, values, indices, row lengths) of the whole lines in ``chunk``: one pass of
    the numba parser (``sparse_ops.kernels.libsvm``), then ``float()`` for the rare numbers
    outside its exact fast path."""
    from ...kernels import libsvm as K

    b = np.frombuffer(chunk, dtype=np.uint8)
    rows_cap, pairs_cap = chunk.count(b"\n") + 1, chunk.count(b":") + 1
    labels = np.empty(rows_cap, np.float32)
    row_len = np.empty(rows_cap, np.int64)
    row_line = np.empty(rows_cap, np.int64)
    idx = np.empty(pairs_cap, np.int64)
    val = np.empty(pairs_cap, np.float32)
    status = np.zeros(8, np.int64)
    fallback = np.empty((4096, 3), np.int64)
    K.parse_lines(b, num_cols, labels, row_len, row_line, idx, val, fallback, status)
    if status[K.ERROR] == K.FALLBACK_FULL:  # many long or special numbers: room for all
        fallback = np.empty((rows_cap + pairs_cap, 3), np.int64)
        status[:] = 0
        K.parse_lines(b, num_cols, labels, row_len, row_line, idx, val, fallback, status)
    code = int(status[K.ERROR])
    if code:
        line, tok = first_line + int(status[K.LINE]), _token(chunk, int(status[K.POS]))
        detail = int(status[K.DETAIL])
        if code == K.BAD_CHAR:
            raise _fail(path, line, f"unexpected character {chr(detail)!r} in {tok!r}")
        if code == K.BAD_NUMBER:
            raise _fail(path, line, f"label {tok!r} is not a number")
        if code == K.BAD_LABEL:
            raise _fail(path, line, f"token {tok!r} is not a label (label or label:weight)")
        if code == K.BAD_INDEX and detail >= 0:
            index = tok.split(":", 1)[0]
            raise _fail(path, line, f"{what} index {index} is not an integer in [0, {num_cols}) "
                        f"(indices are zero-based; the shape gives {num_cols} columns)")
        if code == K.BAD_INDEX:
            raise _fail(path, line, f"the index of {tok!r} is not a non-negative integer")
        if code == K.BAD_VALUE:
            raise _fail(path, line, f"the value of {tok!r} is not a number")
        raise _fail(path, line, f"token {tok!r} is not an index:value pair")
    nrows, npairs = int(status[K.N_ROWS]), int(status[K.N_PAIRS])
    labels, row_len, row_line = labels[:nrows], row_len[:nrows], row_line[:nrows]
    idx, val = idx[:npairs], val[:npairs]
    for start, end, slot in fallback[:int(status[K.N_FALLBACK])].tolist():
        text = chunk[start:end]
        try:
            v = float(text)
        except ValueError:
            line = first_line + chunk.count(b"\n", 0, start)
            raise _fail(path, line, f"{_quoted(text)!r} is not a number") from None
        kind, i = divmod(slot, 2 ** 40)
        with np.errstate(over="ignore"):  # beyond float32: inf, as a float32 cast gives
            (labels if kind == K.FB_LABEL else val)[i] = v
    if status[K.UNSORTED]:
        row_of = np.repeat(np.arange(nrows), row_len)
        order = np.lexsort((idx, row_of))
        idx, val = idx[order], val[order]
        dup = (row_of[1:] == row_of[:-1]) & (idx[1:] == idx[:-1])
        if dup.any():
            t = int(np.argmax(dup))
            raise _fail(path, first_line + int(row_line[row_of[t]]), f"{what} index {idx[t]} appears twice in one row")
    return labels, val, idx, row_len


def _files(path: str, arg: str) -> list[str]:
    p = os.fspath(path)
    if os.path.isdir(p):
        names = sorted(n for n in os.listdir(p) if not n.startswith(".") and os.path.isfile(os.path.join(p, n)))
        if not names:
            raise DataIterError(f"LibSVMIter: {arg} {p!r} is a folder without files")
        return [os.path.join(p, n) for n in names]
    if not os.path.isfile(p):
        raise DataIterError(f"LibSVMIter: {arg} {p!r}: no such file or folder")
    return [p]


def _line_range(content: bytes, base: int, lo_b: int, hi_b: int) -> tuple[int, int, int]:
    """(first byte, end byte, first line index) of the lines of ``content`` (at ``base`` in
    the whole input) that fall in the part [lo_b, hi_b): a line belongs to the part holding
    the newline just before it (the input's first line: byte 0), as dmlc splits."""
    b = np.frombuffer(content, dtype=np.uint8)
    nl = np.flatnonzero(b == 10)
    line_starts = np.concatenate([[0], nl + 1])
    line_starts = line_starts[line_starts < len(content)]
    key = np.maximum(base + line_starts - 1, 0)
    sel = np.flatnonzero((key >= lo_b) & (key < hi_b))
    if sel.size == 0:
        return 0, 0, 0
    i0, i1 = int(sel[0]), int(sel[-1])
    end = int(line_starts[i1 + 1]) if i1 + 1 < line_starts.size else len(content)
    return int(line_starts[i0]), end, i0


def parse_libsvm(path: str, num_cols: int, part_index: int = 0, num_parts: int = 1, arg: str = "data_libsvm",
                 what: str = "column") -> _Parsed:
    """Parse a LibSVM file or folder (zero-based indices) into labels and csr components,
    keeping part ``part_index`` of ``num_parts`` line-aligned byte ranges."""
    files = _files(path, arg)
    sizes = [os.path.getsize(f) for f in files]
    total = sum(sizes)
    lo_b, hi_b = total * part_index // num_parts, total * (part_index + 1) // num_parts
    if part_index == num_parts - 1:
        hi_b = total + 1
    labels, values, indices, lengths = [], [], [], []
    base = 0
    for f, size in zip(files, sizes):
        if base + size <= lo_b - 1 or base > hi_b:
            base += size
            continue
        with open(f, "rb") as fh:
            content = fh.read()
        start, end, line0 = _line_range(content, base, lo_b, hi_b)
        pos, line = start, line0 + 1
        while pos < end:
            stop = min(end, pos + _CHUNK)
            if stop < end:
                cut = content.rfind(b"\n", pos, stop)
                stop = cut + 1 if cut >= pos else content.find(b"\n", stop) + 1 or end
            chunk = content[pos:stop]
            if chunk.strip():
                lab, val, idx, lens = _parse_chunk(f, chunk, line, num_cols, what)
                labels.append(lab); values.append(val); indices.append(idx); lengths.append(lens)  # noqa: E702
            line += chunk.count(b"\n")
            pos = stop
        base += size
    cat = lambda parts, dt: np.concatenate(parts).astype(dt, copy=False) if parts else np.zeros(0, dt)  # noqa: E731
    lens = cat(lengths, np.int64)
    indptr = np.zeros(lens.size + 1, dtype=np.int64)
    np.cumsum(lens, out=indptr[1:])
    return _Parsed(cat(labels, np.float32), cat(values, np.float32), cat(indices, np.int64), indptr)


def _shape_tuple(shape: Any, name: str) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    try:
        out = tuple(int(s) for s in shape)
    except TypeError:
        raise DataIterError(f"LibSVMIter: {name} must be a shape tuple, got {shape!r}") from None
    if len(out) != 1:
        raise DataIterError(f"LibSVMIter: dimension of {name} is expected to be 1, got {out}")
    if out[0] <= 0:
        raise DataIterError(f"LibSVMIter: {name} must be positive, got {out}")
    return out


def _csr_rows(p: _Parsed, rows: np.ndarray | slice, ncols: int, ctx: Any) -> CSRNDArray:
    """Rows of a parsed input as a CSRNDArray (a contiguous slice copies nothing but indptr)."""
    from ... import device as _dev

    dev = _dev.as_device(ctx)
    if isinstance(rows, slice):
        ptr = p.indptr[rows.start:rows.stop + 1]
        lo, hi = int(ptr[0]), int(ptr[-1])
        data, idx, ptr = p.data[lo:hi], p.indices[lo:hi], ptr - ptr[0]
        n = rows.stop - rows.start
    else:
        starts, ends = p.indptr[rows], p.indptr[rows + 1]
        lens = ends - starts
        ptr = np.zeros(rows.size + 1, dtype=np.int64)
        np.cumsum(lens, out=ptr[1:])
        take = np.repeat(starts - ptr[:-1], lens) + np.arange(int(ptr[-1]))
        data, idx = p.data[take], p.indices[take]
        n = rows.size
    if dev.xp is not np:
        data, idx, ptr = (_dev.on_device(a, dev) for a in (data, idx, ptr))
    return as_face(CSRNDArray._trusted(data, idx, ptr, (n, ncols), dev))


class _BatchReader(DataIter):
    """What the iterators that read their own batches share (``LibSVMIter`` and MXNet's C++
    iterators): subclasses give ``_load()`` -> the next ``DataBatch`` or None at the end;
    ``_first`` holds a batch read ahead (at construction), which ``iter_next`` hands out
    first. One data and one label array per batch."""

    _batch: DataBatch | None = None
    _first: DataBatch | None = None

    def _load(self) -> DataBatch | None:
        raise NotImplementedError

    def iter_next(self) -> bool:
        if self._first is not None:
            self._batch, self._first = self._first, None
            return True
        got = self._load()
        if got is None:
            return False
        self._batch = got
        return True

    def next(self) -> DataBatch:
        if self.iter_next():
            return self._batch
        raise StopIteration

    def getdata(self) -> NDArray:
        """The current batch's data array (one array, as MXNet's native iterators give)."""
        return self._batch.data[0]

    def getlabel(self) -> NDArray:
        """The current batch's label array."""
        return self._batch.label[0]

    def getindex(self) -> Any:
        return self._batch.index

    def getpad(self) -> int:
        return self._batch.pad


class LibSVMIter(_BatchReader):
    """MXNet's ``LibSVMIter``: batches of csr data (``(batch_size, *data_shape)``, float32
    values, int64 indices) and labels from LibSVM text with zero-based column indices.

    Without ``label_libsvm`` the label is each line's first number, a dense
    ``(batch_size,)`` array (``label_shape`` must be ``(1,)``); with it, labels are the csr
    rows of that file (``label_shape`` its width, > 1). ``round_batch=True`` (MXNet's
    only mode) fills the last batch from the start of the data and sets ``pad``; the next
    epoch then starts after the examples so used, as MXNet's loader does.
    ``round_batch=False`` (refused by MXNet) ends with a short batch padded by empty rows.
    ``num_parts`` / ``part_index`` keep one line-aligned byte range of the input.
    ``reset()`` starts the next epoch.
    """

    def __init__(self, data_libsvm: str, data_shape: Any, batch_size: int, label_libsvm: str | None = None,
                 label_shape: Any = (1,), num_parts: int = 1, part_index: int = 0, round_batch: bool = True,
                 data_name: str = "data", label_name: str = "softmax_label", ctx: Any = None,
                 dtype: Any = None, prefetch_buffer: int = 4, **kwargs: Any) -> None:
        super().__init__(batch_size)
        if kwargs:
            raise DataIterError(f"LibSVMIter: unknown argument(s) {', '.join(sorted(kwargs))}")
        self.data_shape = _shape_tuple(data_shape, "data_shape")
        self.label_shape = _shape_tuple(label_shape, "label_shape")
        if isinstance(label_libsvm, str) and label_libsvm == "NULL":
            label_libsvm = None
        bs = int(batch_size)
        if bs <= 0:
            raise DataIterError(f"LibSVMIter: batch_size must be positive, got {batch_size}")
        if int(num_parts) <= 0:
            raise DataIterError(f"LibSVMIter: number of parts should be positive, got num_parts={num_parts}")
        if not 0 <= int(part_index) < int(num_parts):
            raise DataIterError(f"LibSVMIter: part_index must be in [0, num_parts={num_parts}), got {part_index}")
        if label_libsvm is not None and self.label_shape[0] <= 1:
            raise DataIterError("LibSVMIter: label_shape is not expected to be (1,) when label_libsvm is set")
        if label_libsvm is None and self.label_shape[0] != 1:
            raise DataIterError("LibSVMIter: label_shape is expected to be (1,) when label_libsvm is not set")
        if dtype is not None and np.dtype(dtype) != np.float32:
            raise DataIterError(f"LibSVMIter: dtype {dtype} is not supported; values are float32")
        self.batch_size, self.round_batch = bs, bool(round_batch)
        self.num_parts, self.part_index = int(num_parts), int(part_index)
        self._ctx = ctx
        self._data = parse_libsvm(data_libsvm, self.data_shape[0], self.part_index, self.num_parts)
        self._label = None
        if label_libsvm is not None:
            self._label = parse_libsvm(label_libsvm, self.label_shape[0], self.part_index, self.num_parts,
                                       arg="label_libsvm", what="label column")
            if self._label.rows < self._data.rows:
                raise DataIterError(f"LibSVMIter: {label_libsvm}: the label file has {self._label.rows} rows, "
                                    f"fewer than the {self._data.rows} rows of the data file")
        if self._data.rows == 0:
            raise DataIterError(f"LibSVMIter: {data_libsvm}: no rows to read (part {part_index} of {num_parts})")
        self._pos = 0
        self._overflow = 0
        self._batch: DataBatch | None = None
        first = self._load()
        self.provide_data = [DataDesc(data_name, first.data[0].shape, first.data[0].dtype)]
        self.provide_label = [DataDesc(label_name, first.label[0].shape, first.label[0].dtype)]
        self._first: DataBatch | None = first

    def _load(self) -> DataBatch | None:
        """The next batch by MXNet's sparse batch loader rules, or None at the end."""
        n, bs = self._data.rows, self.batch_size
        if self._overflow:
            return None
        if self._pos >= n:
            return None
        start = self._pos
        top = min(bs, n - start)
        self._pos += top
        pad = 0
        if top == bs:
            rows: np.ndarray | slice = slice(start, start + bs)
        elif self.round_batch:
            need = bs - top
            if need > n:
                raise DataIterError(f"LibSVMIter: number of input must be bigger than batch size: {n} rows "
                                    f"cannot fill a batch of {bs}")
            rows = np.concatenate([np.arange(start, n), np.arange(need)])
            self._pos, self._overflow, pad = need, need, need
        else:
            rows, pad = np.arange(start, n), bs - top
        index = np.arange(rows.start, rows.stop) if isinstance(rows, slice) else rows
        data = _csr_rows(self._data, rows, self.data_shape[0], self._ctx)
        if self._label is not None:
            label = _csr_rows(self._label, rows, self.label_shape[0], self._ctx)
        else:
            label = _dense(self._data.labels[rows], self._ctx)
        if pad and not self.round_batch:
            data = _pad_csr(data, pad)
            label = _pad_csr(label, pad) if self._label is not None else _dense(
                np.concatenate([label.asnumpy(), np.zeros(pad, np.float32)]), self._ctx)
        return DataBatch([data], [label], pad=pad, index=index.astype(np.uint64))

    def reset(self) -> None:
        """Start the next epoch (after a ``round_batch`` wrap, past the examples it used)."""
        self._first = None
        if not self.round_batch or self._overflow == 0:
            self._pos = 0
        else:
            self._overflow = 0


def _dense(values: np.ndarray, ctx: Any) -> NDArray:
    from ... import creation

    return as_face(creation.array(np.ascontiguousarray(values, dtype=np.float32), dtype=np.float32, device=ctx))


def _pad_csr(x: CSRNDArray, pad: int) -> CSRNDArray:
    ptr = x._indptr
    xp = x.device.xp
    ptr = xp.concatenate([ptr, xp.full(pad, ptr[-1], dtype=ptr.dtype)])
    return as_face(CSRNDArray._trusted(x._data, x._indices, ptr, (x.shape[0] + pad, x.shape[1]), x.device))


# ---- NDArrayIter ------------------------------------------------------------------------------------------
def _is_scipy_sparse(obj: Any) -> bool:
    import sys

    return "scipy.sparse" in sys.modules and sys.modules["scipy.sparse"].issparse(obj)


def _init_data(data: Any, allow_empty: bool, default_name: str,
               who: str = "SparseNDArrayIter") -> list[tuple[str, NDArray]]:
    from .ndarray import array as nd_array

    if data is None:
        if not allow_empty:
            raise DataIterError(f"{who}: data is required")
        data = []
    if isinstance(data, (np.ndarray, NDArray)) or _is_scipy_sparse(data):
        data = [data]
    if isinstance(data, (list, tuple)):
        if not allow_empty and not data:
            raise DataIterError(f"{who}: data must not be an empty list")
        if len(data) == 1:
            data = OrderedDict([(default_name, data[0])])
        else:
            data = OrderedDict((f"_{i}_{default_name}", d) for i, d in enumerate(data))
    if not isinstance(data, dict):
        raise MXNetArgumentError("Input must be NDArray, numpy.ndarray, scipy.sparse.csr_matrix, a list of them "
                        "or dict with them as values")
    out = {}
    for k, v in data.items():
        if isinstance(v, NDArray):
            if v.stype not in ("default", "csr"):
                raise DataIterError(f"{who}: {k}: {v.stype} arrays are not supported (default or csr)")
            out[k] = v
            continue
        try:
            out[k] = nd_array(v)
        except Exception as exc:
            raise MXNetArgumentError(f"Invalid type '{type(v)}' for {k}, should be NDArray, numpy.ndarray or "
                            f"scipy.sparse.csr_matrix") from exc
    return sorted(out.items())


def _rows_of(x: NDArray, rows: np.ndarray | slice) -> NDArray:
    """Rows of a dense or csr array (a contiguous slice: a view)."""
    if isinstance(rows, slice):
        if x.stype == "csr":
            return x[rows.start:rows.stop]
        return x[rows.start:rows.stop]
    if x.stype == "csr":
        from ...ndarray.sparse import CSRNDArray as _C

        ptr, dev = x._indptr, x.device
        xp = dev.xp
        r = xp.asarray(rows)
        starts, ends = ptr[r], ptr[r + 1]
        lens = ends - starts
        nptr = xp.zeros(r.size + 1, dtype=ptr.dtype)
        xp.cumsum(lens, out=nptr[1:])
        take = xp.repeat(starts - nptr[:-1], lens.astype(np.int64)) + xp.arange(int(nptr[-1]))
        return as_face(_C._trusted(x._data[take], x._indices[take], nptr, (int(r.size), x.shape[1]), dev))
    from ... import creation

    return as_face(creation.array(x._data[x.device.xp.asarray(rows)], dtype=x.dtype, device=x.device))


class SparseNDArrayIter(DataIter):
    """sparse-ops' own batch iterator (not in MXNet): ``NDArrayIter``'s interface, but csr
    inputs give csr batches under every ``last_batch_handle`` (MXNet 1.9.1's ``NDArrayIter``
    densifies them and takes only ``'discard'``), a SciPy matrix or a tuple may be passed
    directly, and the batch axis is always the first. Inputs: dense and csr arrays (NDArray,
    NumPy, SciPy; a list or a dict of them; ordered by name, as MXNet does). ``last_batch_handle``:
    ``'pad'`` fills the last batch from the start (``pad`` says how many), ``'discard'``
    drops it, ``'roll_over'`` carries it into the next epoch's first batch. ``shuffle``
    permutes the examples at every ``reset`` (NumPy's global generator, as MXNet)."""

    def __init__(self, data: Any, label: Any = None, batch_size: int = 1, shuffle: bool = False,
                 last_batch_handle: str = "pad", data_name: str = "data", label_name: str = "softmax_label",
                 layout: str = "NCHW") -> None:
        super().__init__(batch_size)
        who = type(self).__name__
        if last_batch_handle not in ("pad", "discard", "roll_over"):
            raise DataIterError(f"{who}: last_batch_handle must be 'pad', 'discard' or 'roll_over', "
                                f"got {last_batch_handle!r}")
        self._check_layout(layout)
        if int(batch_size) <= 0:
            raise DataIterError(f"{who}: batch_size must be positive, got {batch_size}")
        self.data = self._sources(data, allow_empty=False, default_name=data_name)
        self.label = self._sources(label, allow_empty=True, default_name=label_name)
        self._check_sources(last_batch_handle)
        n = self.data[0][1].shape[0]
        for k, v in self.data + self.label:
            if v.shape[0] != n:
                raise DataIterError(f"{who}: {k} has {v.shape[0]} examples, {self.data[0][0]} has {n}")
        self.idx = np.arange(n)
        self.shuffle = shuffle
        self.last_batch_handle = last_batch_handle
        self.batch_size = int(batch_size)
        self.cursor = -self.batch_size
        self.num_data = n
        self.layout = layout
        self._cache_data = None
        self._cache_label = None
        self.reset()
        self.data_list = [x[1] for x in self.data] + [x[1] for x in self.label]
        self.num_source = len(self.data_list)

    @staticmethod
    def _sources(data: Any, allow_empty: bool, default_name: str) -> list[tuple[str, NDArray]]:
        return _init_data(data, allow_empty=allow_empty, default_name=default_name)

    def _check_layout(self, layout: str) -> None:
        self._axis = 0  # the batch axis
        if layout.find("N") != 0:
            raise DataIterError(f"SparseNDArrayIter: layout {layout!r}: only layouts with the batch axis first (N...) "
                                f"are supported")

    def _check_sources(self, last_batch_handle: str) -> None:
        """Refuse inputs this iterator cannot batch under ``last_batch_handle`` (none here)."""

    @property
    def provide_data(self) -> list:
        return [DataDesc(k, (self.batch_size,) + tuple(v.shape[1:]), v.dtype, layout=self.layout)
                for k, v in self.data]

    @property
    def provide_label(self) -> list:
        return [DataDesc(k, (self.batch_size,) + tuple(v.shape[1:]), v.dtype, layout=self.layout)
                for k, v in self.label]

    def hard_reset(self) -> None:
        """Back to the start, dropping any rolled-over examples."""
        if self.shuffle:
            self._shuffle_data()
        self.cursor = -self.batch_size
        self._cache_data = None
        self._cache_label = None

    def reset(self) -> None:
        if self.shuffle:
            self._shuffle_data()
        if self.last_batch_handle == "roll_over" and self.num_data - self.batch_size < self.cursor < self.num_data:
            self.cursor = self.cursor - self.num_data - self.batch_size
        else:
            self.cursor = -self.batch_size

    def iter_next(self) -> bool:
        self.cursor += self.batch_size
        return self.cursor < self.num_data

    def next(self) -> DataBatch:
        if not self.iter_next():
            raise StopIteration
        data = self.getdata()
        label = self.getlabel()
        if data[0].shape[self._axis] != self.batch_size:
            self._cache_data = data
            self._cache_label = label
            raise StopIteration
        return DataBatch(data=data, label=label, pad=self.getpad(), index=None)

    def _getdata(self, source: list, start: int | None = None, end: int | None = None) -> list:
        start = 0 if start is None else start
        end = self.num_data if end is None else end
        return [_rows_of(v, slice(start, end)) for _, v in source]

    @staticmethod
    def _concat(first: list, second: list) -> list:
        if not first or not second:
            return first if first else second
        from ...ops import concat

        out = []
        for a, b in zip(first, second):
            if a.stype == "csr":
                out.append(_vstack_csr(a, b))
            else:
                out.append(concat(a, b, dim=0))
        return out

    def _batchify(self, source: list) -> list:
        if self.cursor >= self.num_data:
            raise DataIterError("SparseNDArrayIter: the iterator needs reset()")
        if self.last_batch_handle == "roll_over" and -self.batch_size < self.cursor < 0:
            cached = self._cache_data if self._cache_data is not None else self._cache_label
            if cached is None:
                raise DataIterError("SparseNDArrayIter: next epoch should have cached data")
            second = self._getdata(source, end=self.cursor + self.batch_size)
            if self._cache_data is not None:
                self._cache_data = None
            else:
                self._cache_label = None
            return self._concat(cached, second)
        if self.last_batch_handle == "pad" and self.cursor + self.batch_size > self.num_data:
            pad = self.batch_size - self.num_data + self.cursor
            first = self._getdata(source, start=self.cursor)
            rows = np.arange(pad) % self.num_data  # MXNet tiles the data when pad > num_data
            second = [_rows_of(v, rows) for _, v in source]
            return self._concat(first, second)
        end = min(self.cursor + self.batch_size, self.num_data)
        return self._getdata(source, self.cursor, end)

    def getdata(self) -> list:
        return self._batchify(self.data)

    def getlabel(self) -> list:
        return self._batchify(self.label)

    def getpad(self) -> int:
        if self.last_batch_handle == "pad" and self.cursor + self.batch_size > self.num_data:
            return self.cursor + self.batch_size - self.num_data
        if self.last_batch_handle == "roll_over" and -self.batch_size < self.cursor < 0:
            return -self.cursor
        return 0

    def _shuffle_data(self) -> None:
        np.random.shuffle(self.idx)
        self.data = [(k, _rows_of(v, self.idx)) for k, v in self.data]
        self.label = [(k, _rows_of(v, self.idx)) for k, v in self.label]


def _vstack_csr(a: CSRNDArray, b: CSRNDArray) -> CSRNDArray:
    xp = a.device.xp
    ptr = xp.concatenate([a._indptr, b._indptr[1:] - b._indptr[0] + a._indptr[-1]])
    lo, hi = int(b._indptr[0]), int(b._indptr[-1])
    idx_dt = np.promote_types(a._indices.dtype, b._indices.dtype)
    return as_face(CSRNDArray._trusted(xp.concatenate([a._data, b._data[lo:hi]]),
                               xp.concatenate([a._indices.astype(idx_dt), b._indices[lo:hi].astype(idx_dt)]),
                               ptr.astype(np.promote_types(ptr.dtype, idx_dt)),
                               (a.shape[0] + b.shape[0], a.shape[1]), a.device))


# ---- NDArrayIter: MXNet 1.9.1's ------------------------------------------------------------------------
class DataIterNotImplementedError(SparseOpsError, NotImplementedError):
    """What MXNet refuses with ``NotImplementedError`` (an ``MXNetError`` here as well)."""


def _init_data_mx(data: Any, allow_empty: bool, default_name: str) -> list[tuple[str, NDArray]]:
    """MXNet 1.9.1's input rules: an NDArray or NumPy array, a list of them, or a dict of
    name -> anything ``mx.nd.array`` takes (a SciPy csr matrix becomes a CSRNDArray);
    NDArrays of every storage type are kept as they are; sorted by name."""
    from .ndarray import array as nd_array

    if data is None:
        if not allow_empty:
            raise DataIterError("NDArrayIter: data is required")
        data = []
    if isinstance(data, (np.ndarray, NDArray)):
        data = [data]
    if isinstance(data, list):
        if not data and not allow_empty:
            raise DataIterError("NDArrayIter: data must not be an empty list")
        data = ({default_name: data[0]} if len(data) == 1
                else {f"_{i}_{default_name}": d for i, d in enumerate(data)})
    if not isinstance(data, dict):
        raise MXNetArgumentError(f"NDArrayIter: argument data/label: got {type(data).__name__}; input must be "
                                 "NDArray, numpy.ndarray, a list of them or a dict with them as values "
                                 "(a SciPy matrix goes in a list or dict)")
    out = {}
    for k, v in data.items():
        if isinstance(v, NDArray):
            out[k] = v
            continue
        try:
            out[k] = nd_array(v)
        except Exception as exc:
            raise MXNetArgumentError(f"NDArrayIter: invalid type {type(v).__name__!r} for {k}: should be NDArray, "
                                     "numpy.ndarray or scipy.sparse.csr_matrix") from exc
    return sorted(out.items())


def _batch_slice(x: NDArray, axis: int, start: int, end: int) -> NDArray:
    """MXNet 1.9.1's ``slice_axis`` of one input, a new dense array: a sparse input is
    densified first, as MXNet's storage fallback does (csr rows are sliced before)."""
    from ... import creation

    if x.stype == "csr" and axis in (0, -2):
        return x[start:end].tostype("default")
    if x.stype != "default":
        x = x.tostype("default")
    if not -x.ndim <= axis < x.ndim:
        raise DataIterError(f"NDArrayIter: the layout's batch axis {axis} is outside the {x.ndim} axes of an input")
    cut = [slice(None)] * x.ndim
    cut[axis] = slice(start, end)
    return as_face(creation.array(x._data[tuple(cut)], dtype=x.dtype, device=x.device))  # a copy


class NDArrayIter(SparseNDArrayIter):
    """MXNet 1.9.1's ``NDArrayIter``: batches of NDArray / NumPy inputs (a list, or a dict
    of name -> array; SciPy csr matrices inside a list or dict), ordered by name.

    Every batch is a new dense array cut along the layout's ``N`` axis, also for csr and
    row_sparse inputs (MXNet 1.9.1 slices with ``slice_axis``, which densifies them); csr
    inputs take only ``last_batch_handle='discard'`` (else ``NotImplementedError``, as in
    MXNet). ``'pad'`` fills the last batch from the start (tiling the data when the pad is
    longer than it), ``'roll_over'`` carries the rest into the next epoch; ``shuffle``
    permutes the examples at every ``reset`` with NumPy's global generator (a shuffled
    dense input becomes float32, csr keeps its dtype, as MXNet's rebuild does).
    ``SparseNDArrayIter`` keeps csr batches csr under every mode.
    """

    @staticmethod
    def _sources(data: Any, allow_empty: bool, default_name: str) -> list[tuple[str, NDArray]]:
        return _init_data_mx(data, allow_empty=allow_empty, default_name=default_name)

    def _check_layout(self, layout: str) -> None:
        self._axis = layout.find("N")  # -1 without an N: the last axis, as MXNet's find gives

    def _check_sources(self, last_batch_handle: str) -> None:
        if last_batch_handle != "discard" and any(v.stype == "csr" for _, v in self.data + self.label):
            raise DataIterNotImplementedError(
                f"NDArrayIter: csr inputs (CSRNDArray, scipy.sparse.csr_matrix) take only "
                f"last_batch_handle='discard', as in MXNet 1.9.1; got {last_batch_handle!r} "
                f"(sparse_ops.compat.mxnet.io.SparseNDArrayIter takes every mode and keeps csr batches)")

    def _descs(self, source: list) -> list:
        out = []
        for k, v in source:
            shape = list(v.shape)
            shape[self._axis] = self.batch_size
            out.append(DataDesc(k, tuple(shape), v.dtype, layout=self.layout))
        return out

    @property
    def provide_data(self) -> list:
        return self._descs(self.data)

    @property
    def provide_label(self) -> list:
        return self._descs(self.label)

    def _getdata(self, source: list, start: int | None = None, end: int | None = None) -> list:
        start = 0 if start is None else start
        if end is None:
            end = source[0][1].shape[0] if source else 0
        return [_batch_slice(v, self._axis, start, end) for _, v in source]

    def _concat(self, first: list, second: list) -> list:
        from .ndarray import concat

        if not first or not second:
            return first if first else second
        return [concat(a, b, dim=self._axis) for a, b in zip(first, second)]

    def _batchify(self, source: list) -> list:
        from .ndarray import tile

        if self.last_batch_handle == "pad" and self.num_data - self.batch_size < self.cursor < self.num_data:
            pad = self.batch_size - self.num_data + self.cursor
            first = self._getdata(source, start=self.cursor)
            if pad > self.num_data:  # MXNet tiles whole copies (along axis 0), then the rest
                whole = self._getdata(source, end=self.num_data)
                second = [tile(d, reps=(pad // self.num_data,) + (1,) * (d.ndim - 1)) for d in whole]
                if pad % self.num_data:
                    second = self._concat(second, self._getdata(source, end=pad % self.num_data))
            else:
                second = self._getdata(source, end=pad)
            return self._concat(first, second)
        return super()._batchify(source)

    def _shuffle_data(self) -> None:
        from .ndarray import array as nd_array

        np.random.shuffle(self.idx)

        def permuted(v: NDArray) -> NDArray:
            if v.stype == "csr":
                return _rows_of(v, self.idx)
            return nd_array(v.asnumpy()[self.idx], ctx=v.context)  # float32, as MXNet's rebuild

        self.data = [(k, permuted(v)) for k, v in self.data]
        self.label = [(k, permuted(v)) for k, v in self.label]


# ---- the C++-style iterators: MNISTIter, CSVIter -----------------------------------------------------------
def _as_bool(value: Any, who: str, name: str) -> bool:
    """A flag as MXNet's parameter parser reads it (True/False, 1/0, 'true'/'false')."""
    if isinstance(value, str):
        low = value.strip().lower()
        if low in ("1", "true"):
            return True
        if low in ("0", "false"):
            return False
        raise MXNetArgumentError(f"{who}: argument {name}: {value!r} is not a boolean")
    return bool(value)


def _as_shape(value: Any, who: str, name: str) -> tuple[int, ...]:
    if isinstance(value, (int, np.integer)):
        value = (int(value),)
    try:
        shape = tuple(int(s) for s in value)
    except (TypeError, ValueError):
        raise MXNetArgumentError(f"{who}: argument {name} must be a shape tuple, got {value!r}") from None
    if not shape or any(s <= 0 for s in shape):
        raise DataIterError(f"{who}: argument {name} must have positive dimensions, got {shape}")
    return shape


def _positive_int(value: Any, who: str, name: str) -> int:
    try:
        out = int(value)
    except (TypeError, ValueError):
        raise MXNetArgumentError(f"{who}: argument {name} must be an integer, got {value!r}") from None
    if out <= 0:
        raise DataIterError(f"{who}: argument {name} must be positive, got {value}")
    return out


def _label_view(label: np.ndarray) -> np.ndarray:
    """MXNet's C API hands a label batch of shape (n, 1, ...) out as its first n values, a
    (n,) vector (the 'make label 1D' rule of ``MXDataIterGetLabel``)."""
    if label.ndim > 1 and label.shape[1] == 1:
        return label.reshape(-1)[:label.shape[0]]
    return label


def _host_array(values: np.ndarray) -> NDArray:
    from ... import creation

    values = np.ascontiguousarray(values)
    return as_face(creation.array(values, dtype=values.dtype, device="cpu"))


class MXDataIter(_BatchReader):
    """Base of the iterators MXNet implements in C++ (``MNISTIter``, ``CSVIter``): keyword
    arguments only, the first batch read at construction (``provide_data`` / ``provide_label``
    and ``batch_size`` come from it), one data and one label array per batch, ``getindex()``
    the examples' uint64 positions and ``getpad()`` the padded count.

    Subclasses give ``_read()`` -> (data, label, pad, index) NumPy arrays or None at the end,
    and ``_before_first()``. Unlike MXNet, ``iter_next()`` right after construction or
    ``reset()`` consumes the preloaded first batch (MXNet's answers True without moving
    until ``next()`` is called), and every batch is a new array (MXNet's reuse buffers).
    """

    def __init__(self, data_name: str = "data", label_name: str = "softmax_label") -> None:
        # DataIter.__init__ would reset batch_size, which the subclass set for _read
        self._batch: DataBatch | None = None
        self._first: DataBatch | None = None
        first = self._load()
        if first is None:
            raise DataIterError(f"{type(self).__name__}: the input gives no batch")
        self._first = self._batch = first
        data, label = first.data[0], first.label[0]
        self.provide_data = [DataDesc(data_name, data.shape, data.dtype)]
        self.provide_label = [DataDesc(label_name, label.shape, label.dtype)]
        self.batch_size = data.shape[0]

    @staticmethod
    def _keywords_only(who: str, args: tuple) -> None:
        if args:
            raise MXNetArgumentError(f"{who} can only accept keyword arguments (got {len(args)} positional)")

    def _read(self) -> tuple | None:
        raise NotImplementedError

    def _before_first(self) -> None:
        raise NotImplementedError

    def _load(self) -> DataBatch | None:
        got = self._read()
        if got is None:
            return None
        data, label, pad, index = got
        return DataBatch([_host_array(data)], [_host_array(_label_view(label))], pad=int(pad),
                         index=np.asarray(index, dtype=np.uint64))

    def reset(self) -> None:
        self._first = None
        self._before_first()


def _read_idx(path: str, who: str, arg: str, magic: int, dims: int, part_index: int,
              num_parts: int) -> np.ndarray:
    """Part ``part_index`` of ``num_parts`` of an idx-ubyte file (big-endian int32 header:
    ``magic``, the count, then ``dims - 1`` sizes), as a uint8 array of shape (count, ...)."""
    try:
        with open(path, "rb") as f:
            header = f.read(4 * dims)
            if len(header) < 4 * dims:
                raise DataIterError(f"{who}: {arg} {path!r}: invalid mnist format "
                                    f"(the file is shorter than its header)")
            fields = np.frombuffer(header, dtype=">i4")
            if int(fields[0]) != magic:
                raise DataIterError(f"{who}: {arg} {path!r}: magic number {int(fields[0])} is not {magic} "
                                    f"(an idx-ubyte {'image' if magic == 2051 else 'label'} file)")
            count, item = int(fields[1]), tuple(int(d) for d in fields[2:])
            size = int(np.prod(item, dtype=np.int64)) if item else 1
            start = int(count / num_parts * part_index)  # MXNet's rule, in double precision
            end = int(count / num_parts * (part_index + 1))
            f.seek(4 * dims + start * size)
            values = np.fromfile(f, dtype=np.uint8, count=(end - start) * size)
    except OSError as exc:
        raise DataIterError(f"{who}: {arg} {path!r}: {exc.strerror or exc}") from None
    if values.size != (end - start) * size:
        raise DataIterError(f"{who}: {arg} {path!r}: invalid mnist format (the header announces {count} items, "
                            f"the file holds fewer)")
    return values.reshape((end - start,) + item)


class MNISTIter(MXDataIter):
    """MXNet's ``MNISTIter``: the idx-ubyte ``image`` and ``label`` files (whole batches
    only: a last partial batch is dropped), images as float32 ``byte / 256`` of shape
    (batch_size, 1, rows, cols), or (batch_size, rows * cols) when ``flat``; labels float32
    (batch_size,). ``shuffle`` (default True) permutes the examples once, at construction,
    from ``seed``, so every epoch has one order. ``num_parts`` / ``part_index`` keep one
    contiguous part of the examples. Other keyword arguments are ignored, as MXNet's
    parameter parser ignores them (``data_shape``, ``input_shape``, ``silent``...).

    Unlike MXNet: the shuffled order comes from NumPy's PCG64 seeded with ``seed`` (MXNet's
    from std::shuffle with mt19937; same seed, different order), and the files' magic
    numbers and lengths are checked.
    """

    def __init__(self, *args: Any, image: str = "./train-images-idx3-ubyte", label: str = "./train-labels-idx1-ubyte",
                 batch_size: int = 128, shuffle: Any = True, flat: Any = False, seed: int = 0, silent: Any = False,
                 num_parts: int = 1, part_index: int = 0, dtype: Any = None, data_name: str = "data",
                 label_name: str = "softmax_label", **ignored: Any) -> None:
        who = "MNISTIter"
        self._keywords_only(who, args)
        bs = _positive_int(batch_size, who, "batch_size")
        parts, part = _positive_int(num_parts, who, "num_parts"), int(part_index)
        if not 0 <= part < parts:
            raise DataIterError(f"{who}: part_index must be in [0, num_parts={parts}), got {part_index}")
        images = _read_idx(os.fspath(image), who, "image", 2051, 4, part, parts)
        labels = _read_idx(os.fspath(label), who, "label", 2049, 2, part, parts)
        if images.shape[0] != labels.shape[0]:
            raise DataIterError(f"{who}: {image!r} holds {images.shape[0]} images, {label!r} "
                                f"{labels.shape[0]} labels")
        if _as_bool(shuffle, who, "shuffle"):
            order = np.random.default_rng(int(seed)).permutation(images.shape[0])
            images, labels = images[order], labels[order]
        self._images, self._labels = images, labels
        self._flat = _as_bool(flat, who, "flat")
        self._dtype = np.dtype(np.float32 if dtype is None else dtype)
        self.batch_size, self._pos = bs, 0
        if not _as_bool(silent, who, "silent"):
            import logging

            shape = (bs, images.shape[1] * images.shape[2]) if self._flat else (bs, 1) + images.shape[1:]
            logging.getLogger(__name__).info("MNISTIter: load %d images, shuffle=%d, shape=%s",
                                             images.shape[0], bool(shuffle), shape)
        super().__init__(data_name, label_name)

    def _before_first(self) -> None:
        self._pos = 0

    def _read(self) -> tuple | None:
        start, bs = self._pos, self.batch_size
        if start + bs > self._images.shape[0]:
            return None
        self._pos += bs
        raw = self._images[start:start + bs]
        data = raw.reshape(bs, -1) if self._flat else raw.reshape((bs, 1) + raw.shape[1:])
        data = (data.astype(np.float32) * np.float32(1 / 256)).astype(self._dtype, copy=False)
        return data, self._labels[start:start + bs].astype(np.float32), 0, np.zeros(bs, dtype=np.uint64)


_CSV_DTYPES = {"float32": np.float32, "int32": np.int32, "int64": np.int64}


def _read_csv(path: str, who: str, arg: str, dtype: type, width: int, shape: tuple) -> np.ndarray:
    """Every row of a CSV file or folder as a (rows, width) array of ``dtype``."""
    parts = []
    for f in _files(path, arg):
        try:
            rows = np.loadtxt(f, dtype=np.float64 if dtype is np.float32 else np.int64, delimiter=",", ndmin=2,
                              comments=None)
        except ValueError as exc:
            raise DataIterError(f"{who}: {arg} {f!r}: {exc}") from None
        if rows.size and rows.shape[1] != width:
            raise DataIterError(f"{who}: {arg} {f!r}: rows have {rows.shape[1]} values; the shape {shape} "
                                f"needs {width}")
        if dtype is np.int32 and rows.size:  # parsed as int64: a value past int32 would wrap
            bad = np.flatnonzero((rows < np.iinfo(np.int32).min) | (rows > np.iinfo(np.int32).max))
            if bad.size:
                row, col = divmod(int(bad[0]), rows.shape[1])
                raise DataIterError(f"{who}: {arg} {f!r}: value {int(rows.flat[bad[0]])} (row {row + 1}, column "
                                    f"{col + 1}) does not fit dtype int32; read it as int64")
        parts.append(rows.reshape(-1, width).astype(dtype))
    return np.concatenate(parts) if parts else np.zeros((0, width), dtype)


class CSVIter(MXDataIter):
    """MXNet's ``CSVIter``: rows of the CSV file (or folder of files) ``data_csv``, each
    reshaped to ``data_shape``, with the rows of ``label_csv`` (shape ``label_shape``; all
    zeros when it is ``'NULL'``), in batches of ``batch_size``; values parsed as ``dtype``
    ('float32' by default, 'int32' or 'int64').

    The last batch follows MXNet's batch loader: with ``round_batch`` (the default) it is
    completed from the start of the data, ``pad`` says by how many, and the next epoch
    (after ``reset()``) starts after those examples; without it, ``pad`` says how many
    trailing rows are stale, left from the previous batch (as MXNet's reused buffer).
    Labels of shape (1,) come as a (batch_size,) vector. ``getindex()`` gives the rows'
    positions. The files are read once, at construction.
    """

    def __init__(self, *args: Any, data_csv: str | None = None, data_shape: Any = None, batch_size: Any = None,
                 label_csv: str = "NULL", label_shape: Any = (1,), round_batch: Any = True, dtype: Any = None,
                 data_name: str = "data", label_name: str = "softmax_label", **ignored: Any) -> None:
        who = "CSVIter"
        self._keywords_only(who, args)
        for name, value in (("data_csv", data_csv), ("data_shape", data_shape), ("batch_size", batch_size)):
            if value is None:
                raise MXNetArgumentError(f"{who}: required argument {name} is missing")
        if dtype is None:
            dt = np.float32
        else:
            name = dtype if isinstance(dtype, str) else getattr(np.dtype(dtype), "name", str(dtype))
            if name not in _CSV_DTYPES:
                raise MXNetValueError(f"{who}: dtype {dtype} is not supported (float32, int32 or int64)")
            dt = _CSV_DTYPES[name]
        self._shape = _as_shape(data_shape, who, "data_shape")
        self._label_shape = _as_shape(label_shape, who, "label_shape")
        bs = _positive_int(batch_size, who, "batch_size")
        self._round = _as_bool(round_batch, who, "round_batch")
        width = int(np.prod(self._shape))
        self._data = _read_csv(os.fspath(data_csv), who, "data_csv", dt, width, self._shape)
        if self._data.shape[0] == 0:
            raise DataIterError(f"{who}: data_csv {data_csv!r} has no rows")
        if label_csv is None or label_csv == "NULL":
            self._labels = np.zeros((self._data.shape[0], 1), dtype=dt)
            self._label_shape = (1,)
        else:
            lwidth = int(np.prod(self._label_shape))
            self._labels = _read_csv(os.fspath(label_csv), who, "label_csv", dt, lwidth, self._label_shape)
            if self._labels.shape[0] < self._data.shape[0]:
                raise DataIterError(f"{who}: label_csv {label_csv!r} has {self._labels.shape[0]} rows, fewer than "
                                    f"the {self._data.shape[0]} of data_csv")
        self.batch_size = bs
        self._buf = np.zeros((bs, width), dtype=dt)  # MXNet's batch buffer: stale rows stay
        self._lbuf = np.zeros((bs, self._labels.shape[1]), dtype=dt)
        self._ibuf = np.zeros(bs, dtype=np.uint64)
        self._pos, self._overflow = 0, 0
        super().__init__(data_name, label_name)

    def _before_first(self) -> None:
        if not self._round or self._overflow == 0:
            self._pos = 0
        else:  # the wrap already restarted the input: the next epoch goes on after it
            self._overflow = 0

    def _read(self) -> tuple | None:
        n, bs = self._data.shape[0], self.batch_size
        if self._overflow or self._pos >= n:
            return None
        start = self._pos
        top = min(bs, n - start)
        rows = np.arange(start, start + top)
        self._pos += top
        pad = 0
        if top < bs and self._round:
            need = bs - top
            if need > n:
                raise DataIterError(f"CSVIter: number of input must be bigger than batch size: {n} rows cannot "
                                    f"fill a batch of {bs}")
            rows = np.concatenate([rows, np.arange(need)])
            self._pos = self._overflow = pad = need
        elif top < bs:
            pad = bs - top
        k = rows.size
        self._buf[:k], self._lbuf[:k], self._ibuf[:k] = self._data[rows], self._labels[rows], rows
        return (self._buf.reshape((bs,) + self._shape).copy(),
                self._lbuf.reshape((bs,) + self._label_shape).copy(), pad, self._ibuf.copy())
