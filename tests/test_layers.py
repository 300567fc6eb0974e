"""Layers import downward: the containers (``sparse_ops/ndarray``) import nothing from the
operator table, dispatch, autograd or the ops, neither at the top of a module nor inside a
function (the ops layer installs container methods from above), and ``storage`` does not
import ``creation``. Imports are read with ``ast``, so lazy ones count too."""
import ast
import pathlib
from pathlib import Path

import numpy as np
import pytest

import sparse_ops as so

ROOT = pathlib.Path(so.__file__).parent
ABOVE_CONTAINERS = ("sparse_ops.ops", "sparse_ops.dispatch", "sparse_ops.registry", "sparse_ops.autograd")


def imported_modules(source: str, module: str) -> set[str]:
    """Every module ``source`` (the code of module ``module``) imports, anywhere in it, as
    absolute names: ``from .. import ops`` inside ``sparse_ops.ndarray.dense`` counts as
    ``sparse_ops.ops``; ``importlib.import_module("x")`` and ``__import__("x")`` as ``x``."""
    package = module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)  # from pkg import submodule
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", None)
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.add(node.args[0].value)
    return found


def offending(modules: set[str], banned: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == b or m.startswith(b + ".") for b in banned))


def test_the_import_reader_sees_lazy_relative_and_dynamic_imports():
    source = (
        "import numpy as np\n"
        "from .. import device\n"
        "def f():\n"
        "    from ..ops.unary import negative\n"
        "    from .. import autograd\n"
        "    import importlib\n"
        "    return importlib.import_module('sparse_ops.dispatch')\n"
    )
    found = imported_modules(source, "sparse_ops.ndarray.dense")
    assert offending(found, ABOVE_CONTAINERS) == [
        "sparse_ops.autograd", "sparse_ops.dispatch", "sparse_ops.ops.unary", "sparse_ops.ops.unary.negative"]
    assert "sparse_ops.device" in found and "numpy" in found


@pytest.mark.parametrize("path", sorted((ROOT / "ndarray").glob("*.py")), ids=lambda p: p.name)
def test_containers_import_nothing_above_them(path):
    module = "sparse_ops.ndarray." + path.stem if path.stem != "__init__" else "sparse_ops.ndarray.__init__"
    bad = offending(imported_modules(path.read_text(), module), ABOVE_CONTAINERS)
    assert not bad, f"{path.name} imports {bad}: install such methods from the ops layer (ops/methods.py)"


def test_storage_does_not_import_creation():
    found = imported_modules((ROOT / "storage.py").read_text(), "sparse_ops.storage")
    assert offending(found, ("sparse_ops.creation",) + ABOVE_CONTAINERS) == []


def test_the_ops_layer_installed_the_container_methods():
    """What the containers no longer define themselves is there, from sparse_ops.ops.methods."""
    from sparse_ops.ops import methods

    x = so.array(np.arange(4.0).reshape(2, 2))
    for name in ("__add__", "__radd__", "__iadd__", "__matmul__", "__rmatmul__", "__eq__", "__lt__", "__neg__",
                 "__abs__", "__pow__", "__rtruediv__", "attach_grad", "backward", "sum", "dot", "T"):
        assert name in vars(so.NDArray), name
    assert so.NDArray.__matmul__ is methods._matmul_method
    assert so.NDArray._check_writable is so.tape.check_not_in_graph
    np.testing.assert_array_equal((-x + abs(x) * 2).asnumpy(), np.arange(4.0).reshape(2, 2))
    np.testing.assert_array_equal(x.dot(x).asnumpy(), np.arange(4.0).reshape(2, 2) @ np.arange(4.0).reshape(2, 2))
    assert not hasattr(so.ops.unary, "python_operator")  # the table moved: one home


# ---- the whole package: no import cycle -----------------------------------------------------
PACKAGES = {"sparse_ops": ROOT, "sparse_ops.sdk": ROOT.parent / "sdk", "sparse_ops.cuda": ROOT.parent / "cuda"}


def _modules() -> dict[str, Path]:
    found = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if "template" in parts:
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


def _imported(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The known modules that ``module`` imports anywhere in its file (edges to its own
    parent packages left out: Python runs those first whatever the module chose)."""
    as_read = module + ".__init__" if path.name == "__init__.py" else module
    names = imported_modules(path.read_text(), as_read)
    return {n for n in names if n in known and n != module and not module.startswith(n + ".")}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    component.append(m)
                    if m == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycle():
    known = _modules()
    graph = {m: _imported(m, p, known) for m, p in known.items()}
    cycles = _cycles(graph)
    detail = "\n".join(
        f"- {', '.join(c)}\n" + "\n".join(f"    {m} -> {sorted(graph[m] & set(c))}" for m in c) for c in cycles)
    assert not cycles, f"import cycles among sparse_ops modules:\n{detail}"


def test_the_cycle_finder_finds_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
