"""Load operator libraries at run time (``sparse_ops.library.load``), the dynamic loading of
MXNet's "Dynamic CustomOp Support" proposal: Python plugin files and folders, and shared
libraries written in C, C++ or CUDA against ``sparse_ops.h`` (``sparse_ops.sdk.include_dir()``).
Load them again after an edit with ``sparse_ops.library.reload``."""
from __future__ import annotations

import os
import sys
from types import ModuleType
from typing import Any

from .plugins import PluginError, load_path, reload_path

__all__ = ["load", "reload", "register_shared", "PluginError"]


def load(path: str | os.PathLike, name: str | None = None) -> ModuleType:
    """Load the plugin in ``path`` (a ``.py`` file, a package folder with ``__init__.py``, or
    a shared library ``.so`` / ``.dylib`` / ``.dll`` built against ``sparse_ops.h``) and return
    its module; the ops it registers are attributed to the plugin ``name`` (default: the
    file's stem, the folder's name, or for ``libmyops.so`` ``myops``). A shared library's
    module stands for it: ``module.library`` lists its ops, ``__version__`` is its version
    string. Its ABI version is checked before any of its code runs.

    The plugin's ``SPARSE_OPS_SDK`` range is checked first. Any failure raises
    ``sparse_ops.plugins.PluginError`` (an ``OperatorError``) naming the plugin, after
    removing the ops it had registered; it is also listed in ``sparse_ops.plugins_info()``.
    Loading the same path twice returns the module loaded the first time; if its source
    changed in between, PluginError says so and points to ``reload`` (it never silently
    hands back the old code).
    """
    return load_path(path, name)


def reload(path: str | os.PathLike, name: str | None = None) -> ModuleType:
    """Import again the plugin ``load`` loaded from ``path`` (after editing it) and return the
    new module. Exactly that plugin's ops are replaced: the ones it still defines run the new
    code (``sparse_ops.ops.<name>`` is the new function), the ones it no longer defines are
    removed, and every other op is left alone. If the new code fails to load, the version
    loaded before stays in place and PluginError says why. ``path`` may also be the module
    file or package folder of a plugin loaded through its entry point (an editable install
    during development): its entry point runs again, under the same plugin name. A path of
    neither kind is an error."""
    return reload_path(path, name)


def register_shared(path: str | os.PathLike) -> Any:
    """Register the ops of the shared library at ``path`` as part of the calling plugin: what
    the ``__init__.py`` of a C plugin package calls (``sparse-ops new-plugin --lang c``), so
    its ops belong to the plugin its entry point names. Returns the
    ``sparse_ops.clib.load.Library``. Failures raise ``sparse_ops.clib.load.LibraryError``
    naming the library, with none of its ops left registered."""
    from .clib.load import open_library

    caller = sys._getframe(1).f_globals.get("__name__", "__main__")
    return open_library(os.fspath(path), caller)
