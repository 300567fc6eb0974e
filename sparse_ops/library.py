"""Load operator libraries at run time (``sparse_ops.library.load``), the dynamic loading of
MXNet's "Dynamic CustomOp Support" proposal for Python plugins."""
from __future__ import annotations

import os
from types import ModuleType

from .plugins import PluginError, load_path

__all__ = ["load", "PluginError"]


def load(path: str | os.PathLike, name: str | None = None) -> ModuleType:
    """Load the plugin in ``path`` (a ``.py`` file or a package folder with ``__init__.py``)
    and return its module; the ops it registers are attributed to the plugin ``name``
    (default: the file's stem or the folder's name), which is also its module name.

    The plugin's ``SPARSE_OPS_SDK`` range is checked first. Any failure raises
    ``sparse_ops.plugins.PluginError`` (an ``OperatorError``) naming the plugin, after
    removing the ops it had registered; it is also listed in ``sparse_ops.plugins_info()``.
    Loading the same path twice returns the module loaded the first time.
    """
    return load_path(path, name)
