"""``save`` and ``load``: containers in ``.npz`` files, never pickled.

A file holds a JSON header (``__sparse_ops__``) and each container's component arrays.
A single csr is written in SciPy's ``save_npz`` layout as well, so
``scipy.sparse.load_npz`` reads it, and ``load`` reads files written by ``save_npz``.
Everything read is validated like user input: a corrupt or hostile file raises
``ValueError`` (``SparseFormatError`` for a broken sparse structure) and creates nothing.
"""
from __future__ import annotations

import json
import os
import tempfile
import zipfile
from typing import Any, Union

import numpy as np

from . import device as _dev
from .creation import array, csr_matrix, row_sparse_array
from .errors import SparseFormatError
from .ndarray import STYPES, NDArray

_HEADER = "__sparse_ops__"
_FORMAT_VERSION = 1
_MAX_HEADER_BYTES = 1 << 20

Saved = Union[NDArray, list, dict]


def save(path: str | os.PathLike, data: Saved) -> None:
    """Write a container, a list of containers or a dict of name -> container to ``path``.

    The file is written to a temporary name first and renamed, so a failure leaves any
    earlier file at ``path`` as it was.
    """
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
    arrays[_HEADER] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)

    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".sparse_ops-", suffix=".npz.tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


_PARTS = {"default": ("values",), "row_sparse": ("data", "indices"), "csr": ("data", "indices", "indptr")}


def _components(x: NDArray) -> tuple:
    if x.stype == "default":
        return (x._data,)
    if x.stype == "row_sparse":
        return (x._data, x._indices)
    return (x._data, x._indices, x._indptr)


def load(path: str | os.PathLike, device: Any = None) -> Saved:
    """Read what ``save`` wrote (container, list or dict), a SciPy ``save_npz`` file (one
    csr) or a ``.npy`` file (one dense array)."""
    path = os.fspath(path)
    try:
        loaded = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{path}: not a readable .npz/.npy file ({exc})") from exc
    if isinstance(loaded, np.ndarray):
        return array(loaded, device=device)
    with loaded:
        try:
            files = set(loaded.files)
            if _HEADER in files:
                return _load_ours(loaded, files, path, device)
            if "format" in files and "shape" in files:
                return _load_scipy(path, device)
            raise ValueError("neither a sparse_ops file nor a SciPy save_npz file")
        except SparseFormatError as exc:
            raise SparseFormatError(f"{path}: {exc}") from exc
        except (KeyError, TypeError, ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
            raise ValueError(f"{path}: corrupt sparse_ops file ({exc})") from exc


def _member(loaded: Any, name: str) -> np.ndarray:
    a = loaded[name]
    if a.dtype.hasobject:
        raise ValueError(f"member {name!r} holds Python objects")
    return a


def _load_ours(loaded: Any, files: set, path: str, device: Any) -> Saved:
    raw = _member(loaded, _HEADER)
    if raw.dtype != np.uint8 or raw.ndim != 1 or raw.size > _MAX_HEADER_BYTES:
        raise ValueError("bad header member")
    header = json.loads(raw.tobytes().decode())
    if not isinstance(header, dict) or header.get("format") != "sparse_ops":
        raise ValueError("bad header")
    if header.get("version") != _FORMAT_VERSION:
        raise ValueError(f"unsupported file version {header.get('version')!r}")
    kind, entries = header.get("kind"), header.get("entries")
    if kind not in ("single", "list", "dict") or not isinstance(entries, list):
        raise ValueError("bad header")
    if kind == "single" and len(entries) != 1:
        raise ValueError("a single-array file must hold exactly one entry")
    items = []
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or e.get("stype") not in STYPES or not isinstance(e.get("name"), str):
            raise ValueError(f"bad header entry {i}")
        parts = {p: _member(loaded, f"{i}.{p}") for p in _PARTS[e["stype"]]}
        shape = e.get("shape")
        if not isinstance(shape, list):
            raise ValueError(f"bad shape in header entry {i}")
        items.append((e["name"], _build(e["stype"], parts, tuple(shape), device)))
    if kind == "single":
        return items[0][1]
    if kind == "list":
        return [x for _, x in items]
    return dict(items)


def _build(stype: str, parts: dict, shape: tuple, device: Any) -> NDArray:
    if stype == "default":
        values = parts["values"]
        if tuple(values.shape) != shape:
            raise SparseFormatError(f"dense values of shape {values.shape} where {shape} was declared")
        return array(values, device=device)
    if stype == "row_sparse":
        return row_sparse_array((parts["data"], parts["indices"]), shape=shape, device=device, copy=True)
    return csr_matrix((parts["data"], parts["indices"], parts["indptr"]), shape=shape, device=device, copy=True)


def _load_scipy(path: str, device: Any) -> NDArray:
    import scipy.sparse as sp

    m = sp.load_npz(path)  # SciPy reads its own layout with allow_pickle=False
    return csr_matrix(m, device=device, copy=True)
