"""API reference pages generated from the public names (``__all__``) of each public module
and their docstrings (autodoc): one Markdown page a module, each name documented once.
Operator functions (``sparse_ops.dot`` and the rest) are listed with links to their
operator pages instead: the operator reference says what they take."""
from __future__ import annotations

import importlib
import inspect
import pathlib
import types

# the modules with an API page, in the order of the API index
MODULES = ("sparse_ops", "sparse_ops.autograd", "sparse_ops.random", "sparse_ops.sdk", "sparse_ops.sdk.capacity",
           "sparse_ops.library", "sparse_ops.torch", "sparse_ops.jax", "sparse_ops.dask")


def public_names(module: types.ModuleType) -> list[str]:
    """The module's public names: its ``__all__``, else every name not starting with ``_``."""
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in vars(module) if not n.startswith("_")]
    return list(dict.fromkeys(names))


def _op_names() -> set[str]:
    from sparse_ops.ops import __all__ as names

    return set(names)


def _directive(qualified: str, obj: object) -> str:
    if inspect.isclass(obj):
        return f"```{{eval-rst}}\n.. autoclass:: {qualified}\n```\n"
    if inspect.isfunction(obj) or inspect.isbuiltin(obj) or callable(obj) and not isinstance(obj, types.ModuleType):
        return f"```{{eval-rst}}\n.. autofunction:: {qualified}\n```\n"
    return f"```{{eval-rst}}\n.. autodata:: {qualified}\n   :annotation:\n```\n"


def module_page(name: str, documented: dict[int, str]) -> str:
    """The Markdown of one module's API page. ``documented``: id -> qualified name of the
    objects earlier pages documented (a name re-exported here links there instead), updated."""
    module = importlib.import_module(name)
    ops = _op_names() if name == "sparse_ops" else set()
    lines = [f"({name})=", f"# `{name}`", "", f"```{{eval-rst}}\n.. automodule:: {name}\n   :no-members:\n```", ""]
    op_links = []
    for n in public_names(module):
        obj = getattr(module, n)
        if n in ops:
            op_links.append(n)
        elif isinstance(obj, types.ModuleType):
            target = obj.__name__
            lines += [f"## `{n}`", "", f"The module {{doc}}`{target}`: its own page." if target in MODULES
                      else f"The module `{target}`.", ""]
        elif id(obj) in documented and (inspect.isclass(obj) or inspect.isfunction(obj)):
            role = "class" if inspect.isclass(obj) else "func"
            lines += [f"## `{n}`", "", f"The same object as {{py:{role}}}`{documented[id(obj)]}`.", ""]
        else:
            documented.setdefault(id(obj), f"{name}.{n}")
            lines += [_directive(f"{name}.{n}", obj), ""]
    if op_links:
        lines += ["## Operator functions", "",
                  f"`{name}` also exposes each registered operator as a function of the same name "
                  "(`sparse_ops.dot(a, b)`); each has its page in the operator reference:", "",
                  ", ".join(f"{{ref}}`{n} <op-{n}>`" for n in sorted(op_links)), ""]
    return "\n".join(lines)


def write_api_pages(outdir: pathlib.Path) -> list[pathlib.Path]:
    """Write ``index.md`` and one page per module of ``MODULES`` into ``outdir``."""
    outdir.mkdir(parents=True, exist_ok=True)
    written, documented = [], {}
    for name in MODULES:
        path = outdir / f"{name}.md"
        path.write_text(module_page(name, documented))
        written.append(path)
    index = ["# API reference", "", "The public names of each module, from their docstrings.", "",
             "```{toctree}", ":maxdepth: 1", "", *MODULES, "```", ""]
    (outdir / "index.md").write_text("\n".join(index))
    return [outdir / "index.md", *written]
