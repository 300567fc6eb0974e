"""``mx.io``: MXNet 1.x's data iterators for sparse training loops.

- ``LibSVMIter``: a LibSVM text file (or a folder of them) as batches of csr data with
  dense labels (or csr labels from a second file), MXNet's parameters and its
  ``round_batch`` wrap-around; ``num_parts`` / ``part_index`` read one line-aligned byte
  range of the input, as MXNet's (dmlc's) splitter does.
- ``NDArrayIter``: batches of dense or csr arrays (NumPy, SciPy, NDArray) with
  ``last_batch_handle`` ``'pad'``, ``'discard'`` or ``'roll_over'`` and ``shuffle``.
- ``DataBatch``, ``DataDesc``, ``DataIter``, ``ResizeIter``.

The parser is one numba pass over the file's bytes (``sparse_ops.kernels.libsvm``; numbers
converted as ``float()`` does, then to float32); a malformed file raises
``LibSVMFormatError`` (an ``MXNetError``) naming the file and the line.

Unlike MXNet: the file is parsed once at construction and kept in memory (MXNet streams
it, and reports a bad line only when its batch is read); column indices of a row may come
unsorted (they are sorted; MXNet expects them sorted and silently builds a malformed array
otherwise); ``round_batch=False`` gives a short last batch padded with empty rows (MXNet
refuses it for sparse data); csr inputs of ``NDArrayIter`` take every
``last_batch_handle`` (MXNet 1.9: ``'discard'`` only, else ``NotImplementedError``).
"""
from __future__ import annotations

import os
import re
from collections import OrderedDict, namedtuple
from typing import Any

import numpy as np

from ...errors import SparseOpsError
from ...ndarray import CSRNDArray, NDArray
from .base import MXNetArgumentError, mx_real_t

__all__ = ["DataDesc", "DataBatch", "DataIter", "ResizeIter", "NDArrayIter", "LibSVMIter",
           "LibSVMFormatError", "DataIterError"]


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
    return CSRNDArray._trusted(data, idx, ptr, (n, ncols), dev)


class LibSVMIter(DataIter):
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

    def iter_next(self) -> bool:
        if self._first is not None:
            self._batch, self._first = self._first, None
        else:
            self._batch = self._load()
        return self._batch is not None

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


def _dense(values: np.ndarray, ctx: Any) -> NDArray:
    from ... import creation

    return creation.array(np.ascontiguousarray(values, dtype=np.float32), dtype=np.float32, device=ctx)


def _pad_csr(x: CSRNDArray, pad: int) -> CSRNDArray:
    ptr = x._indptr
    xp = x.device.xp
    ptr = xp.concatenate([ptr, xp.full(pad, ptr[-1], dtype=ptr.dtype)])
    return CSRNDArray._trusted(x._data, x._indices, ptr, (x.shape[0] + pad, x.shape[1]), x.device)


# ---- NDArrayIter ------------------------------------------------------------------------------------------
def _is_scipy_sparse(obj: Any) -> bool:
    import sys

    return "scipy.sparse" in sys.modules and sys.modules["scipy.sparse"].issparse(obj)


def _init_data(data: Any, allow_empty: bool, default_name: str) -> list[tuple[str, NDArray]]:
    from .ndarray import array as nd_array

    if data is None:
        if not allow_empty:
            raise DataIterError("NDArrayIter: data is required")
        data = []
    if isinstance(data, (np.ndarray, NDArray)) or _is_scipy_sparse(data):
        data = [data]
    if isinstance(data, (list, tuple)):
        if not allow_empty and not data:
            raise DataIterError("NDArrayIter: data must not be an empty list")
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
                raise DataIterError(f"NDArrayIter: {k}: {v.stype} arrays are not supported (default or csr)")
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
        return _C._trusted(x._data[take], x._indices[take], nptr, (int(r.size), x.shape[1]), dev)
    from ... import creation

    return creation.array(x._data[x.device.xp.asarray(rows)], dtype=x.dtype, device=x.device)


class NDArrayIter(DataIter):
    """MXNet's ``NDArrayIter`` over dense and csr arrays (NDArray, NumPy, SciPy; a list or a
    dict of them; inputs are ordered by name, as MXNet does). ``last_batch_handle``:
    ``'pad'`` fills the last batch from the start (``pad`` says how many), ``'discard'``
    drops it, ``'roll_over'`` carries it into the next epoch's first batch. ``shuffle``
    permutes the examples at every ``reset`` (NumPy's global generator, as MXNet)."""

    def __init__(self, data: Any, label: Any = None, batch_size: int = 1, shuffle: bool = False,
                 last_batch_handle: str = "pad", data_name: str = "data", label_name: str = "softmax_label",
                 layout: str = "NCHW") -> None:
        super().__init__(batch_size)
        if last_batch_handle not in ("pad", "discard", "roll_over"):
            raise DataIterError(f"NDArrayIter: last_batch_handle must be 'pad', 'discard' or 'roll_over', "
                                f"got {last_batch_handle!r}")
        if layout.find("N") != 0:
            raise DataIterError(f"NDArrayIter: layout {layout!r}: only layouts with the batch axis first (N...) "
                                f"are supported")
        if int(batch_size) <= 0:
            raise DataIterError(f"NDArrayIter: batch_size must be positive, got {batch_size}")
        self.data = _init_data(data, allow_empty=False, default_name=data_name)
        self.label = _init_data(label, allow_empty=True, default_name=label_name)
        n = self.data[0][1].shape[0]
        for k, v in self.data + self.label:
            if v.shape[0] != n:
                raise DataIterError(f"NDArrayIter: {k} has {v.shape[0]} examples, {self.data[0][0]} has {n}")
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
        if data[0].shape[0] != self.batch_size:
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
            raise DataIterError("NDArrayIter: the iterator needs reset()")
        if self.last_batch_handle == "roll_over" and -self.batch_size < self.cursor < 0:
            cached = self._cache_data if self._cache_data is not None else self._cache_label
            if cached is None:
                raise DataIterError("NDArrayIter: next epoch should have cached data")
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
    return CSRNDArray._trusted(xp.concatenate([a._data, b._data[lo:hi]]),
                               xp.concatenate([a._indices.astype(idx_dt), b._indices[lo:hi].astype(idx_dt)]),
                               ptr.astype(np.promote_types(ptr.dtype, idx_dt)),
                               (a.shape[0] + b.shape[0], a.shape[1]), a.device)
