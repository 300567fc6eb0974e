"""Plugins on the workers. Installed plugins load there as anywhere (their entry points run at
``import sparse_ops``). A plugin the client loaded from a path with
``sparse_ops.library.load`` exists on the client only: ``ship_library`` sends its file (or
package folder) to every worker, now and when workers join or restart, and loads it there
under the same plugin name. ``check_workers`` asks every worker which operators it lacks."""
from __future__ import annotations

import os
import tempfile
from typing import Any, Iterable

from distributed.diagnostics.plugin import WorkerPlugin

from ..errors import OperatorError
from . import _cluster

MAX_SHIPPED_BYTES = 64 << 20  # a bigger plugin folder is a package to install, not to ship


class LibraryShipper(WorkerPlugin):
    """A Dask worker plugin carrying a sparse_ops plugin's files: on each worker it writes
    them under the worker's local directory and calls ``sparse_ops.library.load``."""

    def __init__(self, name: str, files: dict[str, bytes], entry: str) -> None:
        self.name, self.files, self.entry = name, files, entry  # entry: what library.load opens

    def setup(self, worker: Any) -> None:
        from .. import library, plugins

        if self.name in plugins._LOADED:  # shipped before (a re-registration) or installed there
            return
        base = tempfile.mkdtemp(prefix=f"sparse_ops-plugin-{self.name}-", dir=worker.local_directory)
        for rel, content in self.files.items():
            target = os.path.join(base, rel)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as f:
                f.write(content)
        library.load(os.path.join(base, self.entry), name=self.name)


def _collect(path: str) -> tuple[dict[str, bytes], bool]:
    """(relative path -> bytes, is a package) of the plugin at ``path`` as library.load finds it."""
    if os.path.isfile(path):
        with open(path, "rb") as f:
            return {"plugin.py": f.read()}, False
    files, total = {}, 0
    for root, dirs, names in os.walk(path):
        dirs[:] = [d for d in dirs if d != "__pycache__" and not d.startswith(".")]
        for n in names:
            if n.endswith((".pyc", ".pyo")):
                continue
            full = os.path.join(root, n)
            total += os.path.getsize(full)
            if total > MAX_SHIPPED_BYTES:
                raise OperatorError(f"cannot ship the plugin folder {path}: over {MAX_SHIPPED_BYTES >> 20} MiB; "
                                    f"install it on the workers as a package instead")
            with open(full, "rb") as f:
                files[os.path.relpath(full, path)] = f.read()
    return files, True


def ship_library(path: str | os.PathLike, name: str | None = None, client: Any = None) -> str:
    """Load the plugin at ``path`` (a ``.py`` file, a package folder or a shared library built
    against ``sparse_ops.h``, for workers of the same platform) on the client with
    ``sparse_ops.library.load`` and on every worker of ``client`` (default: the current
    client), including workers that join or restart later. Returns the plugin's name."""
    from .. import library, plugins

    module = library.load(path, name=name)
    plugin = next(r for r in plugins._LOADED.values() if r.module is module)
    c = client or _cluster.client()
    if c is None:
        raise OperatorError("ship_library needs a distributed.Client (none is current): without one, the tasks "
                            "run in this process, which has the plugin already")
    source = plugin.source  # the file, or the package folder library.load resolved
    files, package = _collect(source)
    if package:
        entry = plugin.name
        files = {os.path.join(plugin.name, rel): content for rel, content in files.items()}
    else:  # a .py file, or a shared library (which keeps its file name: libops.so)
        entry = f"{plugin.name}.py" if source.endswith(".py") else os.path.basename(source)
        files = {entry: files.pop("plugin.py")}
    c.register_plugin(LibraryShipper(plugin.name, files, entry), name=f"sparse_ops-library-{plugin.name}")
    return plugin.name


def _missing(names: list[str]) -> list[str]:
    from ..registry import list_ops

    present = set(list_ops())
    return [n for n in names if n not in present]


def check_workers(ops: Iterable[str], client: Any = None) -> None:
    """Raise ``OperatorMissingOnWorkerError`` naming each worker that lacks one of ``ops``
    (and which), before any task needs them."""
    from .apply import OperatorMissingOnWorkerError

    names = list(ops)
    c = client or _cluster.client()
    if c is None:
        return
    lacking = {w: m for w, m in c.run(_missing, names).items() if m}
    if lacking:
        detail = "; ".join(f"worker {w} lacks {', '.join(map(repr, m))}" for w, m in sorted(lacking.items()))
        raise OperatorMissingOnWorkerError(f"operators missing on workers: {detail} (install their plugins there, "
                                           f"or ship a plugin file with sparse_ops.dask.ship_library)")
