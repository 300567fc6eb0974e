"""Every public name of the documented modules has a docstring of its own and a place on its
module's generated API page (docs/_ext/apiref.py); operator functions link to their
operator pages instead."""
import importlib
import inspect
import pathlib
import sys
import types

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "docs" / "_ext"))
import apiref  # noqa: E402

OPS = apiref._op_names()


def _entries():
    for name in apiref.MODULES:
        module = importlib.import_module(name)
        for n in apiref.public_names(module):
            yield name, n


def _own_doc(obj: object) -> str:
    """The docstring the object itself declares (a data value's is its type's: none of its own)."""
    if isinstance(obj, (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType, property)) \
            or callable(obj):
        return inspect.getdoc(obj) or ""
    return ""


@pytest.mark.parametrize("module,name", [e for e in _entries() if e[1] not in OPS or e[0] != "sparse_ops"],
                         ids=lambda v: v if isinstance(v, str) else None)
def test_public_name_has_a_docstring(module, name):
    obj = getattr(importlib.import_module(module), name)
    if not callable(obj) and not isinstance(obj, types.ModuleType):
        pytest.skip("a constant: documented by its module's docstring")
    assert _own_doc(obj).strip(), f"{module}.{name} has no docstring"


def test_every_public_name_has_a_place_on_its_page(tmp_path):
    apiref.write_api_pages(tmp_path)
    for module in apiref.MODULES:
        page = (tmp_path / f"{module}.md").read_text()
        for n in apiref.public_names(importlib.import_module(module)):
            if module == "sparse_ops" and n in OPS:
                assert f"<op-{n}>" in page, n
            else:
                assert f"{module}.{n}" in page or f"`{n}`" in page, (module, n)
    index = (tmp_path / "index.md").read_text()
    assert all(m in index for m in apiref.MODULES)
