"""One ``.npz`` file per row block: ``from_npz`` reads them lazily (each worker loads its own
blocks with ``sparse_ops.load``, never unpickling), ``to_npz`` writes them (each worker
saves its own blocks). Paths must be readable where the tasks run (a shared file system,
or the local disk of a one-machine cluster)."""
from __future__ import annotations

import json
import os
import zipfile
from typing import Sequence

import numpy as np

from ..errors import SparseFormatError
from ..io import load, save
from ..ndarray import NDArray
from . import _cluster
from .collection import BlockInfo, DistributedArray


def from_npz(paths: Sequence[str | os.PathLike], infos: Sequence[BlockInfo | tuple] | None = None) -> DistributedArray:
    """A DistributedArray whose block i is the container in file ``paths[i]`` (written by
    ``sparse_ops.save``, ``scipy.sparse.save_npz`` or ``numpy.save``), read on a worker
    when a task needs it. ``infos`` gives each block's ``(shape, stype, dtype)``; without
    it the client reads them from the files' headers (a few hundred bytes each, no data)."""
    paths = [os.fspath(p) for p in paths]
    if not paths:
        raise ValueError("from_npz needs at least one file")
    if infos is None:
        infos = [peek(p) for p in paths]
    infos = [i if isinstance(i, BlockInfo) else BlockInfo(*i) for i in infos]
    if len(infos) != len(paths):
        raise ValueError(f"need one (shape, stype, dtype) per file, got {len(paths)} files and {len(infos)}")
    blocks = [_cluster.delayed_call(_load_block, p, info, name=(f"sparse_ops-npz-{_token(p, info)}", i))
              for i, (p, info) in enumerate(zip(paths, infos))]
    return DistributedArray(blocks, infos)


def to_npz(x: DistributedArray, folder: str | os.PathLike, prefix: str = "block") -> list[str]:
    """Write block i of ``x`` to ``folder/{prefix}-{i:05d}.npz`` (on the workers) and return
    the paths, in block order: ``from_npz(paths)`` reads the same array back."""
    import dask

    folder = os.fspath(folder)
    os.makedirs(folder, exist_ok=True)
    paths = [os.path.join(folder, f"{prefix}-{i:05d}.npz") for i in range(x.nblocks)]
    dask.compute(*[_cluster.delayed_call(_save_block, b, p) for b, p in zip(x.blocks, paths)])
    return paths


def peek(path: str | os.PathLike) -> BlockInfo:
    """(shape, stype, dtype) of the one container in a file, from its headers only."""
    path = os.fspath(path)
    if path.endswith(".npy"):
        with open(path, "rb") as f:
            shape, dtype = _npy_header(f)
        return BlockInfo(shape, "default", dtype)
    try:
        with zipfile.ZipFile(path) as z:
            names = set(z.namelist())
            if "__sparse_ops__.npy" in names:
                with z.open("__sparse_ops__.npy") as f:
                    header = json.loads(np.lib.format.read_array(f, allow_pickle=False).tobytes().decode())
                entries = header.get("entries") if isinstance(header, dict) else None
                if header.get("kind") != "single" or not isinstance(entries, list) or len(entries) != 1:
                    raise ValueError("a block file holds exactly one container")
                stype, shape = entries[0]["stype"], entries[0]["shape"]
                with z.open("0.values.npy" if stype == "default" else "0.data.npy") as f:
                    _, dtype = _npy_header(f)
                return BlockInfo(shape, stype, dtype)
            if {"data.npy", "shape.npy", "format.npy"} <= names:  # scipy.sparse.save_npz
                with z.open("shape.npy") as f:
                    shape = tuple(int(d) for d in np.lib.format.read_array(f, allow_pickle=False))
                with z.open("data.npy") as f:
                    _, dtype = _npy_header(f)
                return BlockInfo(shape, "csr", dtype)
    except (zipfile.BadZipFile, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: not a block file sparse_ops can read ({exc})") from exc
    raise ValueError(f"{path}: neither a sparse_ops file nor a SciPy save_npz file")


def _npy_header(f) -> tuple[tuple[int, ...], np.dtype]:
    version = np.lib.format.read_magic(f)
    reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, _, dtype = reader(f)
    return tuple(shape), np.dtype(dtype).newbyteorder("=")  # load gives native byte order


def _token(path: str, info: BlockInfo) -> str:
    """The task's name: the same file read as the same block is one task (a rewritten file,
    or another declaration, is another)."""
    from dask.base import tokenize

    try:
        st = os.stat(path)
    except OSError:  # on the workers' disks only
        return tokenize(os.path.abspath(path), tuple(info))
    return tokenize(os.path.abspath(path), st.st_mtime_ns, st.st_size, tuple(info))


def _load_block(path: str, info: BlockInfo) -> NDArray:
    """Runs on a worker: the container in ``path``, checked against what was declared."""
    x = load(path)
    if not isinstance(x, NDArray):
        raise ValueError(f"{path}: a block file holds one container, found a {type(x).__name__}")
    if BlockInfo.of(x) != info:
        raise SparseFormatError(f"{path}: holds a {x.stype} {x.shape} {x.dtype}, but the block was declared "
                                f"a {info.stype} {info.shape} {info.dtype}")
    return x


def _save_block(x: NDArray, path: str) -> str:
    save(path, x)
    return path
