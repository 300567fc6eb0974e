"""Write a new plugin project from the templates in ``sdk/template`` (``sparse-ops new-plugin``).

The project is a pip-installable package: ``pyproject.toml`` with the entry point in the
group ``sparse_ops.plugins``, the package, a pytest file using ``opcheck`` and a README.
Its operator is written in one of ``LANGS``:

- ``python`` (the default): one kernel-first operator with a numba cpu kernel, a numba.cuda
  gpu kernel, a dense kernel, a gradient and ``samples()``, plus the SDK version range it
  supports;
- ``c`` and ``cuda`` (templates in ``template/clib``): an operator library against
  ``sparse_ops.h`` in ``csrc/NAME.c`` or ``csrc/NAME.cu`` (a dense kernel, for the cpu, and
  in ``.cu`` also a ``__global__`` one launched on the op's stream; a shape rule, a gradient,
  samples), compiled at install by ``setup.py`` into ``src/NAME/libNAME.so``, which the
  package's ``__init__.py`` registers with ``sparse_ops.library.register_shared``. The
  cuda project needs nvcc to build: without it the build fails with a message saying so.

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
import shutil
from pathlib import Path

from ..errors import SparseOpsError

TEMPLATE = Path(__file__).resolve().parent / "template"

# template file -> path in the new project ({name} is the plugin's name), per language
FILES = {
    "pyproject.toml.tmpl": "pyproject.toml",
    "README.md.tmpl": "README.md",
    "plugin/__init__.py.tmpl": "src/{name}/__init__.py",
    "plugin/kernels.py.tmpl": "src/{name}/kernels.py",
    "tests/test_plugin.py.tmpl": "tests/test_{name}.py",
}
_CLIB_FILES = {
    "clib/pyproject.toml.tmpl": "pyproject.toml",
    "clib/setup.py.tmpl": "setup.py",
    "clib/README.md.tmpl": "README.md",
    "clib/__init__.py.tmpl": "src/{name}/__init__.py",
    "clib/test_plugin.py.tmpl": "tests/test_{name}.py",
}
LANG_FILES = {
    "python": FILES,
    "c": {**_CLIB_FILES, "clib/ops.c.tmpl": "csrc/{name}.c"},
    "cuda": {**_CLIB_FILES, "clib/ops.cu.tmpl": "csrc/{name}.cu"},
}
LANGS = tuple(LANG_FILES)

# what the README of a C or CUDA project says about its kernels and its build
_CLIB_TEXT = {
    "c": {"lang": "C", "kernels": "a dense cpu kernel", "gpu_test": "",
          "build_needs": "Building needs a C compiler: `cc` (or `gcc`, `clang`), or the one `$CC` names."},
    "cuda": {"lang": "CUDA", "kernels": "a dense cpu kernel and a CUDA kernel launched on the op's stream",
             "gpu_test": ", gpu against cpu (when a gpu exists)",
             "build_needs": "Building needs nvcc, the CUDA compiler, from `$CUDA_HOME/bin` or `PATH`: "
                            "without it the build stops with a message saying so (there is no cpu-only "
                            "build). A gpu is not needed to build: the CUDA runtime is linked statically "
                            "and the cpu kernel runs anywhere."},
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


def create(name: str, directory: str | os.PathLike = ".", lang: str = "python") -> Path:
    """Write the plugin project ``name``, its operator in ``lang`` (one of ``LANGS``), into
    ``directory/name`` and return that folder.

    Raises ValueError for a bad name or language and ScaffoldError when the folder exists
    and is not empty (nothing is overwritten).
    """
    from . import SDK_VERSION

    validate_name(name)
    if lang not in LANG_FILES:
        raise ValueError(f"unknown plugin language {lang!r}: choose one of {', '.join(LANGS)}")
    base = Path(directory).expanduser()
    if base.exists() and not base.is_dir():
        raise ScaffoldError(f"{base} is not a folder (the project is written into a folder inside it)")
    root = base.resolve() / name
    try:
        taken = root.exists() and (not root.is_dir() or any(root.iterdir()))
    except OSError as exc:  # a name too long for the file system, a folder we may not read
        raise ScaffoldError(f"cannot write the project into {root}: {exc.strerror or exc}") from None
    if taken:
        raise ScaffoldError(f"{root} already exists and is not an empty folder")
    values = {
        "name": name,
        "op": f"{name}_scale_rows",
        "class_name": "ScaleRows",
        "sdk_version": SDK_VERSION,
        "sdk_range": sdk_range(SDK_VERSION),
    }
    if lang != "python":
        values.update(_CLIB_TEXT[lang], op=f"{name}_scaled_mul", source=f"csrc/{name}.{'c' if lang == 'c' else 'cu'}")
    fresh = not root.exists()
    try:
        for src, dst in LANG_FILES[lang].items():
            text = render((TEMPLATE / src).read_text(encoding="utf-8"), values)
            target = root / dst.format(name=name)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
    except OSError as exc:  # an unwritable place: nothing half-written is left behind
        if fresh:
            shutil.rmtree(root, ignore_errors=True)
        raise ScaffoldError(f"cannot write the project into {root}: {exc.strerror or exc}") from None
    return root


def next_step(name: str, root: str | os.PathLike, lang: str = "python") -> str:
    """The shell line ``sparse-ops new-plugin`` prints after writing project ``name`` in
    ``root``: install it (editable), check its ops, run its tests. It works verbatim from any
    folder (absolute, quoted paths; ``python -m pip`` so that pip and pytest run in the same
    interpreter as ``sparse-ops``); ``tests/test_template.py`` and ``tests/test_clib_template.py``
    run it. A C or CUDA project is built without build isolation: against the sparse-ops
    installed here, whose header and loader it must match (an isolated build would fetch
    sparse-ops from the package index)."""
    root = Path(root)
    isolation = "" if lang == "python" else "--no-build-isolation "
    return (f"python -m pip install {isolation}-e {shlex.quote(str(root))}  &&  sparse-ops check {name}  &&  "
            f"python -m pytest {shlex.quote(str(root / 'tests'))}")


__all__ = ["create", "next_step", "validate_name", "sdk_range", "render", "ScaffoldError", "TEMPLATE", "FILES",
           "LANG_FILES", "LANGS"]
