"""XLA's FFI C API (``xla/ffi/api/c_api.h``, shipped as ``jax.ffi.include_dir()``) in ctypes.

An FFI handler is a C function ``XLA_FFI_Error* handler(XLA_FFI_CallFrame*)``. XLA calls
it once with a *metadata* extension in the frame (the handler answers the API version it
speaks and returns), then at each execution stage; we act at ``EXECUTE`` only. Buffers
arrive as ``XLA_FFI_Buffer`` (dtype code, data pointer, rank, dims), attributes as typed
values with names, and an error goes back as an ``XLA_FFI_Error`` made by the API's own
``XLA_FFI_Error_Create`` (JAX raises it as an exception carrying our message).

Why ctypes and no compiled shim: the call frame is a handful of plain C structs (sizes,
pointers, ``int64`` counts, enum codes), which ctypes mirrors field for field; the only
function we call back into XLA with, ``XLA_FFI_Error_Create``, is a pointer in the
``XLA_FFI_Api`` table that ctypes calls directly. A C shim would add a compiler at first
use for nothing the structs need. ``tests/test_jax_ffi.py`` checks every offset used here
(and by ``native.py``, which reads the same frame from numba) against the header, compiled
with the system C compiler when one is present.
"""
from __future__ import annotations

import ctypes
from ctypes import POINTER, c_char_p, c_int32, c_int64, c_size_t, c_uint32, c_void_p
from typing import Any, Callable, Sequence

import numpy as np

API_MAJOR, API_MINOR = 0, 3
EXTENSION_METADATA = 1
STAGE_EXECUTE = 3
ATTR_SCALAR = 3
ERROR_INVALID_ARGUMENT = 3
ERROR_INTERNAL = 13

# XLA_FFI_DataType codes of the dtypes our ops take
DTYPE_CODES = {
    np.dtype(np.bool_): 1, np.dtype(np.int8): 2, np.dtype(np.int16): 3, np.dtype(np.int32): 4,
    np.dtype(np.int64): 5, np.dtype(np.uint8): 6, np.dtype(np.uint16): 7, np.dtype(np.uint32): 8,
    np.dtype(np.uint64): 9, np.dtype(np.float16): 10, np.dtype(np.float32): 11, np.dtype(np.float64): 12,
    np.dtype(np.complex64): 15, np.dtype(np.complex128): 18,
}
CODE_DTYPES = {v: k for k, v in DTYPE_CODES.items()}


class ExtensionBase(ctypes.Structure):
    pass


ExtensionBase._fields_ = [("struct_size", c_size_t), ("type", c_int32), ("next", POINTER(ExtensionBase))]


class ApiVersion(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("extension_start", c_void_p),
                ("major_version", ctypes.c_int), ("minor_version", ctypes.c_int)]


class Metadata(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("api_version", ApiVersion), ("traits", c_uint32),
                ("state_type_id", c_int64)]


class MetadataExtension(ctypes.Structure):
    _fields_ = [("extension_base", ExtensionBase), ("metadata", POINTER(Metadata))]


class Buffer(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("extension_start", c_void_p), ("dtype", c_int32),
                ("data", c_void_p), ("rank", c_int64), ("dims", POINTER(c_int64))]


class Args(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("extension_start", c_void_p), ("size", c_int64),
                ("types", POINTER(c_int32)), ("args", POINTER(c_void_p))]


class ByteSpan(ctypes.Structure):
    _fields_ = [("ptr", c_void_p), ("len", c_size_t)]


class Scalar(ctypes.Structure):
    _fields_ = [("dtype", c_int32), ("value", c_void_p)]


class Attrs(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("extension_start", c_void_p), ("size", c_int64),
                ("types", POINTER(c_int32)), ("names", POINTER(POINTER(ByteSpan))), ("attrs", POINTER(c_void_p))]


class CallFrame(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("extension_start", POINTER(ExtensionBase)), ("api", c_void_p),
                ("ctx", c_void_p), ("stage", c_int32), ("args", Args), ("rets", Args), ("attrs", Attrs),
                ("future", c_void_p)]


class ErrorCreateArgs(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("extension_start", c_void_p), ("message", c_char_p),
                ("errc", c_int32)]


class StreamGetArgs(ctypes.Structure):
    _fields_ = [("struct_size", c_size_t), ("extension_start", c_void_p), ("ctx", c_void_p),
                ("stream", c_void_p)]


ErrorCreate = ctypes.CFUNCTYPE(c_void_p, POINTER(ErrorCreateArgs))
StreamGet = ctypes.CFUNCTYPE(c_void_p, POINTER(StreamGetArgs))


class Api(ctypes.Structure):
    """The head of ``XLA_FFI_Api``: the function pointers we call (error creation, the stream)."""

    _fields_ = [("struct_size", c_size_t), ("extension_start", c_void_p), ("api_version", ApiVersion),
                ("internal_api", c_void_p), ("Error_Create", c_void_p), ("Error_GetMessage", c_void_p),
                ("Error_Destroy", c_void_p), ("Handler_Register", c_void_p), ("Stream_Get", c_void_p)]


HANDLER = ctypes.CFUNCTYPE(c_void_p, POINTER(CallFrame))

# byte offsets native.py reads the frame at (checked against the header by the tests)
OFFSETS = {
    "frame.extension_start": CallFrame.extension_start.offset,
    "frame.api": CallFrame.api.offset,
    "frame.stage": CallFrame.stage.offset,
    "frame.args.size": CallFrame.args.offset + Args.size.offset,
    "frame.args.args": CallFrame.args.offset + Args.args.offset,
    "frame.rets.size": CallFrame.rets.offset + Args.size.offset,
    "frame.rets.rets": CallFrame.rets.offset + Args.args.offset,
    "buffer.data": Buffer.data.offset,
    "buffer.dims": Buffer.dims.offset,
    "buffer.dtype": Buffer.dtype.offset,
    "buffer.rank": Buffer.rank.offset,
    "frame.attrs.size": CallFrame.attrs.offset + Attrs.size.offset,
    "frame.attrs.types": CallFrame.attrs.offset + Attrs.types.offset,
    "frame.attrs.attrs": CallFrame.attrs.offset + Attrs.attrs.offset,
    "scalar.dtype": Scalar.dtype.offset,
    "scalar.value": Scalar.value.offset,
}


def answer_metadata(frame: CallFrame) -> bool:
    """If XLA is asking for the handler's metadata, answer it (API version, no traits) and
    return True; else False."""
    ext = frame.extension_start
    while ext:
        if ext.contents.type == EXTENSION_METADATA:
            md = ctypes.cast(ext, POINTER(MetadataExtension)).contents.metadata
            if md:
                md.contents.api_version.major_version = API_MAJOR
                md.contents.api_version.minor_version = API_MINOR
                md.contents.traits = 0
            return True
        ext = ext.contents.next
    return False


def make_error(frame: CallFrame, message: str, code: int = ERROR_INVALID_ARGUMENT) -> int:
    """An ``XLA_FFI_Error*`` carrying ``message`` (XLA copies it), made by the frame's API."""
    api = ctypes.cast(frame.api, POINTER(Api)).contents
    args = ErrorCreateArgs(ctypes.sizeof(ErrorCreateArgs), None, message.encode("utf-8", "replace"), code)
    return ErrorCreate(api.Error_Create)(ctypes.byref(args))


def stream_of(frame: CallFrame) -> int:
    """The platform stream XLA runs this call on (a ``cudaStream_t`` on gpu)."""
    api = ctypes.cast(frame.api, POINTER(Api)).contents
    args = StreamGetArgs(ctypes.sizeof(StreamGetArgs), None, frame.ctx, None)
    err = StreamGet(api.Stream_Get)(ctypes.byref(args))
    if err:
        raise RuntimeError("XLA_FFI_Stream_Get failed")
    return int(args.stream or 0)


def _array(buf_ptr: int) -> np.ndarray:
    """A NumPy array over one ``XLA_FFI_Buffer`` (zero-copy, writable)."""
    b = Buffer.from_address(buf_ptr)
    dtype = CODE_DTYPES.get(b.dtype)
    if dtype is None:
        raise TypeError(f"unsupported XLA dtype code {b.dtype}")
    shape = tuple(b.dims[i] for i in range(b.rank))
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if n == 0 or not b.data:
        return np.empty(shape, dtype)
    raw = (ctypes.c_char * (n * dtype.itemsize)).from_address(b.data)
    return np.frombuffer(raw, dtype).reshape(shape)


def buffers(frame: CallFrame) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(argument arrays, result arrays) of a call frame, as NumPy arrays over XLA's memory."""
    args = [_array(frame.args.args[i]) for i in range(frame.args.size)]
    rets = [_array(frame.rets.args[i]) for i in range(frame.rets.size)]
    return args, rets


def buffer_pointers(frame: CallFrame) -> tuple[list[int], list[int]]:
    """(argument, result) data pointers and shapes, for device memory (not readable here)."""
    def one(p: int) -> tuple[int, tuple[int, ...], np.dtype]:
        b = Buffer.from_address(p)
        return b.data or 0, tuple(b.dims[i] for i in range(b.rank)), CODE_DTYPES.get(b.dtype)

    return ([one(frame.args.args[i]) for i in range(frame.args.size)],
            [one(frame.rets.args[i]) for i in range(frame.rets.size)])


def int_attr(frame: CallFrame, name: str) -> int:
    """The integer scalar attribute ``name`` of the call."""
    attrs = frame.attrs
    want = name.encode()
    for i in range(attrs.size):
        span = attrs.names[i].contents
        if ctypes.string_at(span.ptr, span.len) == want and attrs.types[i] == ATTR_SCALAR:
            s = Scalar.from_address(attrs.attrs[i])
            return int(ctypes.cast(s.value, POINTER(c_int64)).contents.value if s.dtype == 5 else
                       ctypes.cast(s.value, POINTER(c_int32)).contents.value)
    raise KeyError(f"the call has no attribute {name!r}")


# ---- the frame read by address: what the Python handler does on every call -------------------------
# ctypes' struct views cost a microsecond or more per field read through them; the handler
# reads a handful of words per call at the offsets above instead (``Frame``).
_void_at, _i32_at, _i64_at = c_void_p.from_address, c_int32.from_address, c_int64.from_address
_O = OFFSETS
_DTYPE_INT64 = DTYPE_CODES[np.dtype(np.int64)]


# the frame's fields the handler reads, as 64-bit words (all are 8-byte aligned: sizes,
# pointers, and the stage, an int32 in a word's low half)
_FRAME_KEYS = ("frame.extension_start", "frame.stage", "frame.args.size", "frame.args.args", "frame.rets.size",
               "frame.rets.rets", "frame.attrs.size", "frame.attrs.types", "frame.attrs.attrs")
_FRAME_WORDS = c_int64 * (max(_O[k] for k in _FRAME_KEYS) // 8 + 1)
_F = {k: _O[k] // 8 for k in _FRAME_KEYS}
_TABLES: dict[int, type] = {}  # n -> c_int64 * n: a call's table of n buffer pointers


class Frame:
    """One call frame read by address (``p``: the ``XLA_FFI_CallFrame*``; its words read once):
    the call's id attribute and its buffers, checked against the shapes and dtypes the caller
    expects."""

    __slots__ = ("p", "w")

    def __init__(self, p: int) -> None:
        self.p, self.w = p, _FRAME_WORDS.from_address(p)

    def metadata_or_other_stage(self) -> bool:
        """Whether XLA is asking for the handler's metadata (answered here) or calling at a
        stage other than EXECUTE: either way the handler has nothing to run."""
        w = self.w
        if w[_F["frame.extension_start"]] and answer_metadata(self.struct()):
            return True
        return w[_F["frame.stage"]] & 0xFFFFFFFF != STAGE_EXECUTE

    def struct(self) -> CallFrame:
        """The frame as the ctypes struct (slow; for errors and the rare paths)."""
        return CallFrame.from_address(self.p)

    def call_id(self) -> int:
        """The value of the call's integer attribute ``call`` (its only one, as the bridge
        emits it; a frame with other attributes is read by name)."""
        w = self.w
        if w[_F["frame.attrs.size"]] != 1 or _i32_at(w[_F["frame.attrs.types"]]).value != ATTR_SCALAR:
            return int_attr(self.struct(), "call")
        scalar = _void_at(w[_F["frame.attrs.attrs"]]).value
        value = _void_at(scalar + _O["scalar.value"]).value
        if _i32_at(scalar + _O["scalar.dtype"]).value == _DTYPE_INT64:
            return _i64_at(value).value
        return _i32_at(value).value

    def arrays(self, rets: bool, expected: "Sequence[BufferSpec]") -> list[np.ndarray]:
        """NumPy arrays over the call's argument (or result) buffers, zero-copy, each checked
        to have the dtype, rank and dimensions of its ``expected`` entry."""
        w = self.w
        size = w[_F["frame.rets.size" if rets else "frame.args.size"]]
        n = len(expected)
        if size != n:
            raise TypeError(f"the call has {size} {'results' if rets else 'arguments'}, {n} expected")
        if not n:
            return []
        table = _TABLES.get(n)
        if table is None:
            table = _TABLES[n] = c_int64 * n
        pointers = table.from_address(w[_F["frame.rets.rets" if rets else "frame.args.args"]])
        return [want.view(b) for want, b in zip(expected, pointers)]

    def last_argument(self, expected: "BufferSpec") -> np.ndarray:
        """The call's last argument buffer (checked against ``expected``), read-only: a call
        with symbolic sizes carries their values there (``spec.dims_operand``), which say
        what the other buffers must be."""
        w = self.w
        size = w[_F["frame.args.size"]]
        if size < 1:
            raise TypeError("the call has no arguments; a call with symbolic sizes carries them last")
        return expected.view(c_int64.from_address(w[_F["frame.args.args"]] + 8 * (size - 1)).value)


# an XLA_FFI_Buffer as 64-bit words: the dtype code (an int32: the word's low half), the
# data pointer, the rank and the dims pointer, at the header's offsets
_BUFFER_WORDS = c_int64 * (max(_O["buffer.data"], _O["buffer.dims"], _O["buffer.dtype"], _O["buffer.rank"]) // 8 + 1)
_W_DTYPE, _W_DATA, _W_RANK, _W_DIMS = (_O[k] // 8 for k in
                                      ("buffer.dtype", "buffer.data", "buffer.rank", "buffer.dims"))


class BufferSpec:
    """What one buffer of a call must be (dtype, shape), and how to view it without a copy."""

    __slots__ = ("shape", "dtype", "code", "rank", "nbytes", "raw", "dims", "writeable", "last")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, writeable: bool) -> None:
        self.shape, self.dtype, self.writeable = tuple(int(d) for d in shape), np.dtype(dtype), writeable
        self.code, self.rank = DTYPE_CODES[self.dtype], len(self.shape)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self.raw = ctypes.c_char * self.nbytes  # the ctypes array type NumPy views
        self.dims = np.asarray(self.shape, np.int64).tobytes()  # the dims as XLA writes them
        self.last: tuple[int, np.ndarray] | None = None  # (data pointer, its view): XLA reuses addresses

    def view(self, b: int) -> np.ndarray:
        """The array over ``XLA_FFI_Buffer*`` ``b`` (read-only unless ``writeable``)."""
        w = _BUFFER_WORDS.from_address(b)
        if w[_W_DTYPE] & 0xFFFFFFFF != self.code or w[_W_RANK] != self.rank or \
                (self.rank and ctypes.string_at(w[_W_DIMS], 8 * self.rank) != self.dims):
            got = Buffer.from_address(b)
            raise TypeError(f"a buffer of XLA dtype code {got.dtype}, shape "
                            f"{tuple(got.dims[i] for i in range(got.rank))}; expected {self.dtype} {self.shape}")
        data = w[_W_DATA]
        last = self.last
        if last is not None and last[0] == data:
            return last[1]  # a view of the same memory, of the same shape and dtype: the same array
        if not self.nbytes or not data:
            return np.empty(self.shape, self.dtype)
        a = np.ndarray(self.shape, self.dtype, self.raw.from_address(data))
        if not self.writeable:
            a.flags.writeable = False
        self.last = (data, a)
        return a


RAW_HANDLER = ctypes.CFUNCTYPE(c_void_p, c_void_p)


def _run_reporting(run: Callable, frame: Any, label: Callable, struct: Callable[[], Any]) -> Any:
    """``run(frame)``; None, or the FFI error (on the call frame ``struct()``) of the exception it
    raised, its message opened with ``label(frame)``: every failure goes back to XLA, none
    escapes into C."""
    try:
        run(frame)
        return None
    except BaseException as exc:  # noqa: BLE001
        try:
            where = label(frame)
        except BaseException:  # noqa: BLE001
            where = "sparse_ops.jax"
        text = str(exc) if str(exc).startswith(where) else f"{where}: {type(exc).__name__}: {exc}"
        return make_error(struct(), text)


def raw_handler(run: Callable[[Frame], None], label: Callable[[Frame], str]) -> tuple[object, int]:
    """As ``handler``, reading the frame by address (``Frame``): the C handler (keep the
    returned ctypes object alive) and its address. ``run(frame)`` runs at the EXECUTE
    stage; any Python exception becomes an FFI error whose message starts with
    ``label(frame)``."""

    def entry(p):  # the GIL is taken by ctypes for the call
        try:
            frame = Frame(p)
            if frame.metadata_or_other_stage():
                return None
        except BaseException:  # pragma: no cover - a frame XLA would never send
            return None
        return _run_reporting(run, frame, label, frame.struct)

    fn = RAW_HANDLER(entry)
    return fn, ctypes.cast(fn, c_void_p).value


def handler(run: Callable[[CallFrame], None], label: Callable[[CallFrame], str]) -> tuple[object, int]:
    """A C handler (keep the returned ctypes object alive) and its address: it answers
    metadata queries, skips stages other than EXECUTE and runs ``run(frame)``; any Python
    exception becomes an FFI error whose message starts with ``label(frame)``."""

    def entry(frame_p):  # the GIL is taken by ctypes for the call
        try:
            frame = frame_p.contents
            if answer_metadata(frame) or frame.stage != STAGE_EXECUTE:
                return None
        except BaseException:  # pragma: no cover - a frame XLA would never send
            return None
        return _run_reporting(run, frame, label, lambda: frame)

    fn = HANDLER(entry)
    return fn, ctypes.cast(fn, c_void_p).value
