"""``save`` and ``load``: containers in ``.npz`` files, never pickled.

A file holds a JSON header (``__sparse_ops__``) and each container's component arrays.
A single csr is written in SciPy's ``save_npz`` layout as well, so
``scipy.sparse.load_npz`` reads it, and ``load`` reads files written by ``save_npz``.
Everything read is validated like user input: a corrupt or hostile file raises
``ValueError`` (``SparseFormatError`` for a broken sparse structure) and creates nothing.
Before NumPy reads an array (and allocates what its header claims) the claim is checked
against the bytes the file holds, so a few bytes cannot make it allocate terabytes.

Both take a path or a binary file object (``io.BytesIO``, ``open(path, "wb")``), as
``np.savez``/``np.load`` and SciPy's ``save_npz``/``load_npz`` do; ``load`` reads from
the object's current position and needs it seekable (as ``np.load`` does for ``.npz``).
"""
from __future__ import annotations

import errno
import json
import os
import zipfile
from typing import IO, Any, Union

import numpy as np

from . import device as _dev
from .creation import array, csr_matrix, row_sparse_array
from .dtypes import not_held, source_dtype
from .errors import SparseFormatError
from .ndarray import STYPES, NDArray
from .validation import check_csr, normalize_shape

_HEADER = "__sparse_ops__"
_FORMAT_VERSION = 1
_MAX_HEADER_BYTES = 1 << 20
_NPY_MAGIC = b"\x93NUMPY"
_DEFLATE_MAX_RATIO = 1032  # deflate cannot expand its input more than ~1032-fold
_SHAPE_MAX_BYTES = 1 << 30  # row pointers a coo/bsr/dia file's shape alone may ask for (beyond 1032x the file)

Saved = Union[NDArray, list, dict]
File = Union[str, os.PathLike, IO[bytes]]


def save(file: File, data: Saved, attrs: dict[str, Any] | None = None) -> None:
    """Write a container, a list of containers or a dict of name -> container to ``file``
    (a path, or a binary file object written from its current position). ``attrs`` (a
    JSON-serialisable dict) is kept in the header and handed back by ``load(...,
    attrs={})``: faces record there how the file was written (the MXNet face, its shape mode).

    A path is written to a temporary name first and renamed, so a failure leaves any
    earlier file there as it was; nothing is written to a file object unless every entry
    is an NDArray.
    """
    if attrs is not None and not isinstance(attrs, dict):
        raise TypeError(f"save: attrs must be a dict of the file's attributes, got a {type(attrs).__name__}")
    if isinstance(data, NDArray):
        kind, names, items = "single", ["0"], [data]
    elif isinstance(data, (list, tuple)):
        kind, names, items = "list", [str(i) for i in range(len(data))], list(data)
    elif isinstance(data, dict):
        if not all(isinstance(k, str) for k in data):
            raise TypeError("save: dict keys must be strings")
        kind, names, items = "dict", list(data), list(data.values())
    else:
        raise TypeError(f"save takes an NDArray, a list or a dict of them, got {type(data).__name__}")
    for name, x in zip(names, items):
        if not isinstance(x, NDArray):
            raise TypeError(f"save: entry {name!r} is a {type(x).__name__}, not an NDArray")

    arrays: dict[str, np.ndarray] = {}
    entries = []
    for i, x in enumerate(items):
        entries.append({"name": names[i], "stype": x.stype, "shape": list(x.shape)})
        for part, a in zip(_PARTS[x.stype], _components(x)):
            arrays[f"{i}.{part}"] = _dev.to_host(a)
    if kind == "single" and items[0].stype == "csr":
        x = items[0]
        arrays.update(data=arrays["0.data"], indices=arrays["0.indices"], indptr=arrays["0.indptr"],
                      format=np.array(b"csr"), shape=np.array(x.shape, dtype=np.int64))
    header = {"format": "sparse_ops", "version": _FORMAT_VERSION, "kind": kind, "entries": entries}
    if attrs:
        header["attrs"] = dict(attrs)
    try:
        text = json.dumps(header)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"save: attrs must be JSON-serialisable (strings, numbers, lists, dicts): {exc}") from None
    arrays[_HEADER] = np.frombuffer(text.encode(), dtype=np.uint8)

    if hasattr(file, "write"):
        np.savez(file, **arrays)
        return
    path = _path("save", file)
    folder = os.path.dirname(os.path.abspath(path))
    import tempfile  # here: not a cost of sparse_ops' import

    if not os.path.isdir(folder):
        raise FileNotFoundError(errno.ENOENT, f"save: no folder {folder!r} to write into", path)
    if os.path.isdir(path):
        raise IsADirectoryError(errno.EISDIR, f"save: {path!r} is a folder, not a file to write", path)
    fd, tmp = tempfile.mkstemp(prefix=".sparse_ops-", suffix=".npz.tmp", dir=folder)
    try:
        # the written file's permissions are what open() would give it (an existing file keeps
        # its own): mkstemp makes it private to the owner
        os.chmod(tmp, os.stat(path).st_mode & 0o7777 if os.path.exists(path) else 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _umask() -> int:
    """The process's umask (read by setting it and setting it back: there is no other way)."""
    mask = os.umask(0o22)
    os.umask(mask)
    return mask


_PARTS = {"default": ("values",), "row_sparse": ("data", "indices"), "csr": ("data", "indices", "indptr")}


def _components(x: NDArray) -> tuple:
    """The stored arrays themselves (not the views a class hands out: a subclass may show
    its components as other objects)."""
    if x.stype == "default":
        return (x._data,)
    if x.stype == "row_sparse":
        return (x._data, x._indices)
    return (x._data, x._indices, x._indptr)


def load(file: File, device: Any = None, attrs: dict[str, Any] | None = None,
         extra_dtypes: tuple = ()) -> Saved:
    """Read what ``save`` wrote (container, list or dict), a SciPy ``save_npz`` file (one
    csr) or a ``.npy`` file (one dense array), from a path or a seekable binary file object.
    A dict passed as ``attrs`` receives the ``attrs`` the file was saved with (none for
    files of other writers). Dense values of ``extra_dtypes`` are kept as they are (a face
    holding more dtypes than the library, such as the MXNet face's int8 and uint8); other
    dtypes the library does not hold are refused naming the file and the dtype."""
    if attrs is not None and not isinstance(attrs, dict):
        raise TypeError(f"load: attrs must be a dict, which receives the file's attributes; got a "
                        f"{type(attrs).__name__}")
    if hasattr(file, "read"):
        label = _label(file)
        try:
            start = file.tell()
            size = file.seek(0, os.SEEK_END) - start
            file.seek(start)
        except (AttributeError, OSError, ValueError) as exc:
            raise ValueError(f"{label}: load needs a seekable binary file object (io.BytesIO, "
                             f"open(path, 'rb')): {exc}") from exc
        return _load(file, start, size, label, device, attrs, extra_dtypes)
    path = _path("load", file)
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise ValueError(f"{path}: not a readable .npz/.npy file ({exc})") from exc
    with f:
        return _load(f, 0, os.fstat(f.fileno()).st_size, path, device, attrs, extra_dtypes)


class UnheldDtypeError(TypeError):
    """A well-formed file whose values have a dtype the arrays do not hold."""


class UnsupportedFileError(ValueError):
    """An intact file of a kind or layout ``load`` does not read (a NumPy ``savez`` archive,
    a SciPy 1-d or 3-d sparse array): nothing is damaged."""


def _path(who: str, file: Any) -> str:
    """A path argument (str, bytes or os.PathLike) as text, or a TypeError naming ``who``."""
    try:
        return os.fsdecode(os.fspath(file))
    except TypeError:
        raise TypeError(f"{who}: file must be a path (str, bytes, os.PathLike) or a binary file object, got a "
                        f"{type(file).__name__}") from None


def _label(f: Any) -> str:
    """How messages name a file object: its file name when it has one."""
    name = getattr(f, "name", None)
    return name if isinstance(name, str) else f"<{type(f).__name__}>"


def _load(f: IO[bytes], start: int, size: int, label: str, device: Any, attrs: dict | None = None,
          extra: tuple = ()) -> Saved:
    """``load`` from the open binary file ``f`` whose ``size`` bytes from ``start`` hold the file."""
    try:
        magic = f.read(len(_NPY_MAGIC))
        if magic == _NPY_MAGIC:
            f.seek(start)
            _check_npy(f, size)
        elif not magic.startswith(b"PK"):  # (np.load would take anything else for a pickle)
            raise ValueError("no zip or NumPy header")
        f.seek(start)
        loaded = np.load(f, allow_pickle=False)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{label}: not a readable .npz/.npy file ({exc})") from exc
    if isinstance(loaded, np.ndarray):
        return _dense(loaded, device, extra, label)
    with loaded:
        try:
            _check_members(loaded.zip, size)
            files = set(loaded.files)
            if _HEADER in files:
                return _load_ours(loaded, files, device, attrs, extra, label)
            if "format" in files and "shape" in files:
                return _load_scipy(loaded, f, start, device, size, label)
            raise UnsupportedFileError(f"{label}: a .npz archive neither sparse_ops.save nor scipy.sparse.save_npz "
                                       f"wrote (members {', '.join(sorted(files)[:5])}); load reads those, and .npy "
                                       "files")
        except SparseFormatError as exc:
            raise SparseFormatError(f"{label}: {exc}") from exc
        except (UnheldDtypeError, UnsupportedFileError):
            raise
        except (KeyError, TypeError, ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
            raise ValueError(f"{label}: corrupt sparse_ops file ({exc})") from exc


def _check_members(archive: zipfile.ZipFile, size: int) -> None:
    """Refuse an archive whose members are not plain ``.npy`` arrays whose headers claim
    exactly the bytes the member holds, and whose sizes the file could really hold."""
    for info in archive.infolist():
        if not info.filename.endswith(".npy"):
            raise ValueError(f"member {info.filename!r} is not a .npy array")
        if info.compress_size > size:
            raise ValueError(f"member {info.filename!r} claims {info.compress_size} bytes in a {size}-byte file")
        if info.compress_type == zipfile.ZIP_STORED:
            limit = info.compress_size
        elif info.compress_type == zipfile.ZIP_DEFLATED:
            limit = _DEFLATE_MAX_RATIO * info.compress_size + 1024
        else:
            raise ValueError(f"member {info.filename!r} uses an unsupported compression ({info.compress_type})")
        if info.file_size > limit:
            raise ValueError(f"member {info.filename!r} claims {info.file_size} bytes from {info.compress_size} "
                             f"stored")
        with archive.open(info) as f:
            _check_npy(f, info.file_size, info.filename)


def _check_npy(f: Any, size: int, name: str = "the array") -> None:
    """Read a ``.npy`` header from ``f`` and refuse it unless the data it announces fills
    exactly the ``size`` bytes of the stream (and holds no Python objects)."""
    try:
        version = np.lib.format.read_magic(f)
    except ValueError:
        raise ValueError(f"{name} is not a .npy array") from None
    if version == (1, 0):
        shape, _, dtype = np.lib.format.read_array_header_1_0(f)
    elif version == (2, 0):
        shape, _, dtype = np.lib.format.read_array_header_2_0(f)
    else:
        raise ValueError(f"{name}: unsupported .npy version {version}")
    if dtype.hasobject:
        raise ValueError(f"{name} holds Python objects (sparse_ops never unpickles)")
    claimed = dtype.itemsize
    for d in shape:
        claimed *= d
    held = size - f.tell()
    if claimed != held:
        raise ValueError(f"{name} claims shape {shape} of {dtype} ({claimed} bytes), but holds {held} bytes")


def _member(loaded: Any, name: str) -> np.ndarray:
    """Member ``name`` of the archive, in this machine's byte order (a file written on a
    big-endian machine reads as the same numbers)."""
    a = loaded[name]
    if a.dtype.hasobject:
        raise ValueError(f"member {name!r} holds Python objects")
    return a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("="))


def _load_ours(loaded: Any, files: set, device: Any, attrs: dict | None, extra: tuple, label: str) -> Saved:
    if loaded.zip.getinfo(_HEADER + ".npy").file_size > _MAX_HEADER_BYTES + 4096:  # + the .npy header
        raise ValueError(f"header member larger than {_MAX_HEADER_BYTES} bytes")
    raw = _member(loaded, _HEADER)
    if raw.dtype != np.uint8 or raw.ndim != 1 or raw.size > _MAX_HEADER_BYTES:
        raise ValueError("bad header member")
    try:
        header = json.loads(raw.tobytes().decode())
    except RecursionError:
        raise ValueError("bad header: JSON nested too deeply") from None
    if not isinstance(header, dict) or header.get("format") != "sparse_ops":
        raise ValueError("bad header")
    if header.get("version") != _FORMAT_VERSION:
        raise ValueError(f"unsupported file version {header.get('version')!r}")
    kind, entries = header.get("kind"), header.get("entries")
    saved_attrs = header.get("attrs", {})
    if not isinstance(saved_attrs, dict):
        raise ValueError("bad header attrs")
    if kind not in ("single", "list", "dict") or not isinstance(entries, list):
        raise ValueError("bad header")
    if kind == "single" and len(entries) != 1:
        raise ValueError("a single-array file must hold exactly one entry")
    items, names = [], set()
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or e.get("stype") not in STYPES or not isinstance(e.get("name"), str):
            raise ValueError(f"bad header entry {i}")
        if kind == "dict" and e["name"] in names:
            raise ValueError(f"header entry {i}: the name {e['name']!r} appears twice (a dict keeps one)")
        names.add(e["name"])
        parts = {p: _member(loaded, f"{i}.{p}") for p in _PARTS[e["stype"]]}
        shape = e.get("shape")
        if not isinstance(shape, list):
            raise ValueError(f"bad shape in header entry {i}")
        items.append((e["name"], _build(e["stype"], parts, tuple(shape), device, extra, label)))
    if attrs is not None:
        attrs.update(saved_attrs)
    if kind == "single":
        return items[0][1]
    if kind == "list":
        return [x for _, x in items]
    return dict(items)


def _build(stype: str, parts: dict, shape: tuple, device: Any, extra: tuple, label: str) -> NDArray:
    """A container over the arrays ``np.load`` just made (ours: not copied again on the host)."""
    if stype == "default":
        values = parts["values"]
        if tuple(values.shape) != shape:
            raise SparseFormatError(f"dense values of shape {values.shape} where {shape} was declared")
        return _dense(values, device, extra, label)
    _held(parts["data"].dtype, extra, label)
    if parts["data"].dtype in extra:  # checked with held values in their place, then given its own
        data = parts["data"]
        x = _build(stype, dict(parts, data=data.astype(np.int32)), shape, device, (), label)
        x._data = _dev.on_device(np.ascontiguousarray(data), x.device)
        return x
    if stype == "row_sparse":
        return row_sparse_array((parts["data"], parts["indices"]), shape=shape, device=device)
    return csr_matrix((parts["data"], parts["indices"], parts["indptr"]), shape=shape, device=device)


def _held(dtype: np.dtype, extra: tuple, label: str) -> np.dtype | None:
    """The dtype to keep for values of ``dtype`` read from a file (None for an ``extra`` one),
    or UnheldDtypeError naming the file."""
    if dtype in extra:
        return None
    try:
        return source_dtype(dtype)
    except TypeError:
        raise UnheldDtypeError(f"{label}: the file holds values its arrays cannot: {not_held(dtype)}; the MXNet "
                               "face's nd.load keeps int8 and uint8") from None


def _dense(values: np.ndarray, device: Any, extra: tuple, label: str) -> NDArray:
    """A dense container over ``values`` (an array read from the file), moved or converted
    only where the device or dtype asks; ``extra`` dtypes kept as they are."""
    dev = _dev.as_device(device) if device is not None else _dev.current_device()
    if values.dtype in extra:
        return NDArray(_dev.on_device(np.ascontiguousarray(values), dev), dev)
    dt = _held(values.dtype, extra, label)
    if dev.xp is np and values.dtype == dt and values.flags.c_contiguous:
        return NDArray(values, dev)
    return array(values, device=dev)


_SCIPY_FORMATS = ("csr", "csc", "coo", "bsr", "dia")


def _check_rows(shape: Any, size: int) -> None:
    """Refuse a coo, bsr or dia file whose shape alone would make its csr's row pointers
    larger than ``_SHAPE_MAX_BYTES`` and ``_DEFLATE_MAX_RATIO`` times the file: those
    layouts store no row pointers, so the shape is all that sizes them."""
    if shape.dtype.kind not in "iu" or shape.shape != (2,):
        raise ValueError(f"bad shape member {shape!r}")
    rows = int(shape[0])
    need = 8 * (rows + 1)
    if need > max(_SHAPE_MAX_BYTES, _DEFLATE_MAX_RATIO * size):
        raise ValueError(f"its shape {tuple(int(d) for d in shape)} would need {need} bytes of row pointers "
                         f"from a {size}-byte file")


def _load_scipy(loaded: Any, f: IO[bytes], start: int, device: Any, size: int, label: str) -> NDArray:
    """A file of SciPy's ``save_npz``. csr and csc members are read here and handed to
    ``csr_matrix`` as they are (SciPy's reader would first cast index arrays of any dtype,
    NaN included, to integers); non-canonical ones are made canonical, as from SciPy."""
    import scipy.sparse as sp

    fmt = _member(loaded, "format")
    fmt = fmt.item().decode() if fmt.dtype.kind == "S" and fmt.ndim == 0 else str(fmt)
    shape = _member(loaded, "shape")
    if shape.dtype.kind in "iu" and shape.ndim == 1 and shape.shape != (2,):
        raise UnsupportedFileError(f"{label}: a SciPy sparse array of shape {tuple(int(d) for d in shape)}: "
                                   "load reads SciPy's 2-d sparse matrices and arrays")
    if fmt in ("csr", "csc"):
        shape = _member(loaded, "shape")
        if shape.dtype.kind not in "iu" or shape.shape != (2,):
            raise ValueError(f"bad shape member {shape!r}")
        shape = normalize_shape([int(d) for d in shape], ndim=2)
        if fmt == "csc":  # its csr's row pointers come from the shape alone
            _check_rows(_member(loaded, "shape"), size)
        data, indices, indptr = (_member(loaded, k) for k in ("data", "indices", "indptr"))
        _held(data.dtype, (), label)
        for name, a in (("indices", indices), ("indptr", indptr)):
            if a.dtype.kind not in "iu":
                raise SparseFormatError(f"{fmt} {name} must have an integer dtype, got {a.dtype}")
        # the lengths first (nothing of the shape's size is allocated before), in our words; a
        # csc is the csr of its transpose
        try:
            check_csr(data, indices, indptr, shape if fmt == "csr" else shape[::-1], full=False)
        except SparseFormatError as exc:
            raise SparseFormatError(str(exc) if fmt == "csr" else f"csc (columns for rows): {exc}") from None
        # SciPy brings other integer index dtypes to its own; csr_matrix then checks every value
        m = (sp.csr_matrix if fmt == "csr" else sp.csc_matrix)((data, indices, indptr), shape=shape)
        return csr_matrix(m, device=device)  # the arrays np.load made: not copied again
    if fmt not in _SCIPY_FORMATS:
        raise ValueError(f"SciPy format {fmt[:20]!r} is not one save_npz writes ({', '.join(_SCIPY_FORMATS)})")
    _check_rows(_member(loaded, "shape"), size)
    f.seek(start)
    with np.errstate(all="ignore"):
        m = sp.load_npz(f)  # other layouts (coo, bsr, dia): SciPy reads them, allow_pickle=False
    _held(m.dtype, (), label)
    return csr_matrix(m, device=device)
