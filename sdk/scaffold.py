"""Write a new plugin project from the template in ``sdk/template`` (``sparse-ops new-plugin``).

The project is a pip-installable package: ``pyproject.toml`` with the entry point in the
group ``sparse_ops.plugins``, the package (one kernel-first operator with a numba cpu
kernel, a numba.cuda gpu kernel, a dense kernel, a gradient and ``samples()``, plus the
SDK version range it supports), a pytest file using ``opcheck`` and a README.

The package sits in ``src/NAME`` (a src layout), not in ``NAME/`` beside ``pyproject.toml``:
run from the folder holding the project, ``python -m pytest NAME/tests`` puts that folder
first on ``sys.path``, where the project folder ``NAME`` would be found as a namespace
package and shadow the installed one (``cannot import name ... (unknown location)``). With
``src/``, the editable install's path entry (``.../NAME/src``) holds the only real ``NAME``.
"""
from __future__ import annotations

import importlib.util
import keyword
import os
import re
import shlex
from pathlib import Path

from ..errors import SparseOpsError

TEMPLATE = Path(__file__).resolve().parent / "template"

# template file -> path in the new project ({name} is the plugin's name)
FILES = {
    "pyproject.toml.tmpl": "pyproject.toml",
    "README.md.tmpl": "README.md",
    "plugin/__init__.py.tmpl": "src/{name}/__init__.py",
    "plugin/kernels.py.tmpl": "src/{name}/kernels.py",
    "tests/test_plugin.py.tmpl": "tests/test_{name}.py",
}


class ScaffoldError(SparseOpsError, RuntimeError):
    """The plugin project cannot be written (the target folder is not empty, say)."""


def validate_name(name: str) -> str:
    """Return ``name`` if it can name a plugin package: a lower-case Python identifier that
    is not a keyword and does not shadow an importable module; else raise ValueError."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name or "") or keyword.iskeyword(name):
        raise ValueError(f"plugin name {name!r} must be a lower-case Python identifier "
                         f"(letters, digits, '_'; starting with a letter), e.g. 'myops'")
    if name == "sparse_ops" or name.startswith("sparse_ops_"):
        raise ValueError(f"plugin name {name!r} is reserved for sparse-ops itself")
    try:
        taken = importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        taken = False
    if taken:
        raise ValueError(f"plugin name {name!r} would shadow the importable module {name!r}; choose another")
    return name


def sdk_range(version: str | None = None) -> str:
    """The range of SDK versions a new plugin declares: this one up to the next minor
    (``"0.1"`` gives ``">=0.1,<0.2"``; ``"1.3"`` gives ``">=1.3,<2"``)."""
    if version is None:
        from . import SDK_VERSION as version
    major, minor = (int(p) for p in (version.split(".") + ["0"])[:2])
    upper = f"{major}.{minor + 1}" if major == 0 else f"{major + 1}"
    return f">={version},<{upper}"


def render(text: str, values: dict[str, str]) -> str:
    """Replace each ``{{key}}`` of the template text with ``values[key]``."""
    def sub(m: re.Match) -> str:
        key = m.group(1)
        if key not in values:
            raise KeyError(f"template placeholder {{{{{key}}}}} has no value")
        return values[key]

    return re.sub(r"\{\{(\w+)\}\}", sub, text)


def create(name: str, directory: str | os.PathLike = ".") -> Path:
    """Write the plugin project ``name`` into ``directory/name`` and return that folder.

    Raises ValueError for a bad name and ScaffoldError when the folder exists and is not
    empty (nothing is overwritten).
    """
    from . import SDK_VERSION

    validate_name(name)
    root = Path(directory).expanduser().resolve() / name
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise ScaffoldError(f"{root} already exists and is not an empty folder")
    values = {
        "name": name,
        "op": f"{name}_scale_rows",
        "class_name": "ScaleRows",
        "sdk_version": SDK_VERSION,
        "sdk_range": sdk_range(SDK_VERSION),
    }
    for src, dst in FILES.items():
        text = render((TEMPLATE / src).read_text(encoding="utf-8"), values)
        target = root / dst.format(name=name)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return root


def next_step(name: str, root: str | os.PathLike) -> str:
    """The shell line ``sparse-ops new-plugin`` prints after writing project ``name`` in
    ``root``: install it (editable), check its ops, run its tests. It works verbatim from any
    folder (absolute, quoted paths; ``python -m pip`` so that pip and pytest run in the same
    interpreter as ``sparse-ops``); ``tests/test_template.py`` runs it."""
    root = Path(root)
    return (f"python -m pip install -e {shlex.quote(str(root))}  &&  sparse-ops check {name}  &&  "
            f"python -m pytest {shlex.quote(str(root / 'tests'))}")


__all__ = ["create", "next_step", "validate_name", "sdk_range", "render", "ScaffoldError", "TEMPLATE", "FILES"]
