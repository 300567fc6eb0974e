"""Load operator libraries at run time (``sparse_ops.library.load``), the dynamic loading of
MXNet's "Dynamic CustomOp Support" proposal for Python plugins, and load them again after
an edit (``sparse_ops.library.reload``)."""
from __future__ import annotations

import os
from types import ModuleType

from .plugins import PluginError, load_path, reload_path

__all__ = ["load", "reload", "PluginError"]


def load(path: str | os.PathLike, name: str | None = None) -> ModuleType:
    """Load the plugin in ``path`` (a ``.py`` file or a package folder with ``__init__.py``)
    and return its module; the ops it registers are attributed to the plugin ``name``
    (default: the file's stem or the folder's name), which is also its module name.

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
    loaded before stays in place and PluginError says why. A path ``load`` did not load is
    an error."""
    return reload_path(path, name)
