"""The Python examples of the README and of every documentation page run as written, each
page's blocks in order in one namespace, in a scratch folder (each block saved there as a
file first: numba caches functions of real files only): an example that no longer matches
the code fails here. The generated reference pages hold no examples."""
import pathlib
import re

import pytest

import sparse_ops as so

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").rglob("*.md")
                                     if "generated" not in p.parts and "_build" not in p.parts)]
# pages that build on another page's definitions (the author's guide: the op of "kernel-first")
BUILDS_ON = {"docs/author/testing.md": ["docs/author/kernel-first.md"]}
# examples another test runs, with what they need first (a library compiled by the page's `cc` line)
RUN_ELSEWHERE = {"docs/author/c-libraries.md": "tests/test_clib_template.py"}


def python_blocks(page: pathlib.Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", page.read_text(), re.S | re.M)


def _name(page: pathlib.Path) -> str:
    return page.relative_to(ROOT).as_posix()


def test_the_readme_and_the_guides_have_examples():
    assert python_blocks(ROOT / "README.md")
    assert sum(len(python_blocks(p)) for p in PAGES) >= 20
    for page, test in RUN_ELSEWHERE.items():
        assert python_blocks(ROOT / page) and page in (ROOT / test).read_text()


@pytest.mark.parametrize("page", [p for p in PAGES if python_blocks(p) and _name(p) not in RUN_ELSEWHERE],
                         ids=_name)
def test_page_python_blocks_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__docs_example__"}
    table = so.registry.snapshot()  # the operators an example registers leave with it
    try:
        pages = [ROOT / p for p in BUILDS_ON.get(_name(page), [])] + [page]
        for p in pages:
            for i, block in enumerate(python_blocks(p)):
                source = tmp_path / f"{p.stem.replace('-', '_')}_{i}.py"
                source.write_text(block)
                exec(compile(block, str(source), "exec"), namespace)
    finally:
        so.registry.restore(table)
