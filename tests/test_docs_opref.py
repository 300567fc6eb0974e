"""The generated operator reference (docs/_ext/opref.py): every registered op, built-in or
cookbook, has a docstring and exactly one page; pages hold the op's docstring, arguments,
parameters, the storage rules `sparse-ops info` prints, its row of the op x face matrix and
its devices; stale pages go; a hostile docstring still builds without a Sphinx warning."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import sparse_ops as so

ROOT = Path(__file__).resolve().parent.parent


def _load_opref():
    spec = importlib.util.spec_from_file_location("opref", ROOT / "docs" / "_ext" / "opref.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("opref", module)  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


opref = _load_opref()


def _documented() -> list[str]:
    """The ops a docs build documents: the table of a fresh process with its plugins loaded
    (this process's table also holds the ops other test modules registered)."""
    code = "import json, sparse_ops as so; so.load_plugins(); print(json.dumps(so.list_ops()))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


DOCUMENTED = _documented()


@pytest.fixture(autouse=True, scope="module")
def documented_table():
    """The table narrowed to what a docs build sees, for the module's tests."""
    saved = so.registry.snapshot()
    for name in so.list_ops():
        if name not in DOCUMENTED:
            so.registry.unregister(name)
    yield
    so.registry.restore(saved)


@pytest.fixture(scope="module")
def pages(tmp_path_factory, documented_table) -> Path:
    """The reference, written once for the module's tests."""
    out = tmp_path_factory.mktemp("opref") / "ops"
    opref.write_op_pages(out)
    return out


def _plain(text: str) -> str:
    """Markdown text without escapes, backticks and line breaks, to compare prose."""
    return " ".join(text.replace("\\", "").replace("`", "").split())


def _folder(name: str) -> str:
    plugin = so.get_op(name).plugin
    return "builtins" if plugin is None else "cookbook" if plugin == "cookbook" else "other"


def test_cookbook_is_loaded_and_part_of_the_table():
    cookbook = [n for n in so.list_ops() if so.get_op(n).plugin == "cookbook"]
    assert "csr_spmm" in cookbook and len(cookbook) >= 10


def test_every_registered_op_has_a_docstring():
    missing = [n for n in so.list_ops() if not (so.get_op(n).cls.__doc__ or "").strip()]
    assert missing == [], f"operators without a docstring: {missing}"


def test_every_op_has_exactly_one_page_and_one_index_entry(pages):
    names = so.list_ops()
    found = sorted(p.relative_to(pages).as_posix() for p in pages.rglob("*.md") if p.name != "index.md")
    assert found == sorted(f"{_folder(n)}/{n}.md" for n in names)
    index = (pages / "index.md").read_text()
    for n in names:
        assert index.count(f"]({_folder(n)}/{n}.md)") == 1, n  # one table row linking the page
        assert len(re.findall(rf"^{_folder(n)}/{n}$", index, re.M)) == 1, n  # one toctree entry
    assert index.startswith("% generated") and "\n# Operator reference\n" in index
    sections = re.findall(r"^## (.+)$", index, re.M)
    assert sections[:2] == ["Built-in operators", "Cookbook operators"]
    assert "### Gradient and internal operators" in index


def test_each_page_holds_its_docstring_arguments_and_parameters(pages):
    for name in so.list_ops():
        opdef = so.get_op(name)
        text = (pages / _folder(name) / f"{name}.md").read_text()
        head = text.split("\n## ")[0]
        assert f"(op-{name})=\n# " in head, name
        assert _plain(opref.first_sentence(opdef.cls.__doc__)) in _plain(head), name
        sections = [s for s in re.findall(r"^## (.+)$", text, re.M)]
        gradients = ["Gradients"] if opref.sample_gradients(opdef) else []
        assert sections == ["Call", "Parameters", "Storage types", *gradients, "Faces", "Devices"], name
        inputs = re.search(r"^- Inputs: (.*)$", text, re.M)[1]
        assert all(f"`{a}`" in inputs for a in opdef.arguments), name
        assert ("variadic" in inputs) == opdef.variadic, name
        for pname in opdef.params:
            assert f"| `{pname}` |" in text, (name, pname)


EXPECTED_STORAGE = {
    "dot": ["| default, default | default | fcompute |", "| csr, csr | csr | fcompute_ex |",
            "| csr, default | default | fcompute_ex |", "| csr, row_sparse | default | fcompute_ex |",
            "| default, csr | csr | fcompute_ex |", "| default, row_sparse | default | fcompute_ex |",
            "| row_sparse, default | default | fcompute_ex |"],
    "elemwise_add": ["| default, default | default | fcompute |", "| csr, csr | csr | fcompute_ex |",
                     "| csr, default | default | fcompute_ex |", "| default, csr | default | fcompute_ex |",
                     "| default, row_sparse | default | fcompute_ex |",
                     "| row_sparse, default | default | fcompute_ex |",
                     "| row_sparse, row_sparse | row_sparse | fcompute_ex |"],
    "Embedding": ["| default, default | default | fcompute |", "| default, row_sparse | default | fcompute_ex |"],
    "csr_spmm": ["| default, default | default | fcompute |",
                 "| csr, \\* | (depends on the inputs) | fcompute_ex |"],
}


@pytest.mark.parametrize("name", sorted(EXPECTED_STORAGE))
def test_chosen_ops_storage_rows_and_faces(pages, name):
    text = (pages / _folder(name) / f"{name}.md").read_text()
    storage = text.split("## Storage types")[1].split("\n## ")[0]
    rows = [line for line in storage.splitlines() if line.startswith("| ") and not line.startswith("| inputs")]
    assert rows == EXPECTED_STORAGE[name]
    assert "densified, run by the dense kernel" in storage  # every one has a dense kernel
    faces = text.split("## Faces")[1].split("## Devices")[0]
    dense_only = re.search(r"- note (\d+): jax.vmap maps over dense arrays only", faces)  # (notes are numbered
    expected = {"csr_spmm": {"jax.vmap": f"no (note {dense_only.group(1) if dense_only else '?'})"}}.get(name, {})
    for face in ("native", "autograd", "torch", "torch.grad", "torch.compile", "torch.compile.grad", "jax",
                 "jax.grad", "jax.vmap", "mxnet", "dask", "gpu"):
        assert f"| {face} | {expected.get(face, 'yes')} |" in faces, (name, face)
    if name == "csr_spmm":  # in the order the matrix meets them)
        assert dense_only is not None
    assert text.rstrip().endswith("cpu, gpu") or "\n\ncpu, gpu\n" in text
    if name == "Embedding":  # required parameters: the first sample's are said
        assert "`{'input_dim': 5, 'output_dim': 3, 'dtype': 'float64'}`" in storage


def test_faces_of_a_constant_op_cite_their_notes(pages):
    text = (pages / "builtins" / "_contrib_getnnz.md").read_text()
    assert "| autograd | no (note 1) |" in text and "| dask | no (note 2) |" in text
    assert "- note 1: its outputs are constants" in text and "- note 2: it declares no partition rule" in text
    assert "| jax.vmap | no (note 6) |" in text and "- note 6: jax.vmap maps over dense arrays only" in text
    assert "Gradient: none: the outputs are constants" in text


def test_declared_backward_gives_the_gradient_storage_explain_reports(isolated, tmp_path):
    so.library.load(str(ROOT / "tests" / "rowclip_plugin.py"))
    try:
        text = opref.op_page("rc_row_clip")
        x = so.array(np.ones((3, 2)))
        for arr in (x, x.tostype("row_sparse")):
            back = so.explain("rc_row_clip", arr)["backward"]
            grads = ", ".join(f"{k}: {v}" for k, v in back["grad_stypes"].items())
            assert f"| {grads} ({back['dispatch_mode']}) |" in text
        assert "not in the op x face matrix" in text
        out = opref.write_op_pages(tmp_path / "ops")  # another plugin's op: the third section
        assert tmp_path / "ops" / "other" / "rc_row_clip.md" in out
        assert "## Other plugins" in (tmp_path / "ops" / "index.md").read_text()
    finally:
        sys.modules.pop("rowclip_plugin", None)


def test_stale_pages_go_and_unchanged_pages_stay_untouched(tmp_path):
    out = tmp_path / "ops"
    (out / "builtins").mkdir(parents=True)
    (out / "builtins" / "no_such_op.md").write_text("stale")
    (out / "other").mkdir()
    (out / "other" / "gone.md").write_text("stale")
    (out / "notes.txt").write_text("not a page")
    written = opref.write_op_pages(out)
    assert not (out / "builtins" / "no_such_op.md").exists() and not (out / "other").exists()
    assert (out / "notes.txt").read_text() == "not a page"
    assert sorted(out.rglob("*.md")) == sorted(written)
    dot = out / "builtins" / "dot.md"
    os.utime(dot, (1, 1))
    opref.write_op_pages(out)
    assert dot.stat().st_mtime == 1  # same text: not rewritten, so Sphinx does not read it again


HOSTILE = '''Computes |x| and -x.

# not a heading
* not a list item of a paragraph
| a | b |
|---|---|
{ref}`op-nowhere` and [a link](nowhere.md) and <b>html</b> &amp; $x$ and ``a|b`` and `` ` ``

(not-a-label)=

:::{note}
not a directive
:::

```{toctree}
nowhere
```

- a real list item with ``code``
- and *another*

1. an ordered one

Example::

    >>> so.dot(a, b)   # a literal block
    ``kept as written``

% not a comment
+++
---
Closing words_ with _emphasis_ and a trailing backslash \\'''


def test_hostile_docstring_renders_and_builds_without_warnings(isolated, tmp_path):
    pytest.importorskip("myst_parser")

    @so.register("opref_hostile", plugin="opref_test")
    class Hostile(so.Op):
        __doc__ = HOSTILE

        @so.kernel()
        def dense(self, ctx, data, out):
            out[...] = data

    page = opref.op_page("opref_hostile")
    body = page.split("\n## Call")[0]
    assert re.findall(r"^#+ ", page, re.M) == ["# ", "## ", "## ", "## ", "## ", "## "]
    assert "\\# not a heading" in body and "\\(not-a-label)=" in body and "\\:::\\{note\\}" in body
    assert "- a real list item with `code`" in body
    assert "```text\n>>> so.dot(a, b)   # a literal block\n``kept as written``\n```" in body
    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text('extensions = ["myst_parser"]\nhtml_theme = "basic"\n')
    (src / "index.md").write_text("# Test\n\n```{toctree}\nopref_hostile\n```\n\nSee {ref}`op-opref_hostile`.\n")
    (src / "opref_hostile.md").write_text(page)
    run = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-q", "-b", "html",
                          str(src), str(tmp_path / "html")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stderr == "", run.stderr
    html = (tmp_path / "html" / "opref_hostile.html").read_text()
    assert html.count("<h1") == 1 and "# not a heading" in html and "(not-a-label)=" in html
    assert "&lt;b&gt;html&lt;/b&gt;" in html  # shown, not interpreted


def test_gradient_storage_types_are_those_native_autograd_gives(pages):
    """The Gradients section lists, per sample, each input's gradient storage type as
    ``sparse_ops.autograd.grad`` gives it: dot(csr, dense)'s dense operand gets a row_sparse
    gradient, csr @ csr gives csr gradients; constant ops and in-place updates have none."""
    dot = (pages / "builtins" / "dot.md").read_text()
    section = dot[dot.index("## Gradients"):dot.index("## Faces")]
    assert "| csr, default |  | lhs: csr, rhs: row_sparse |" in section  # a csr's stored values
    assert "| csr, csr |  | lhs: csr, rhs: csr |" in section
    x = so.array(np.array([[0.0, 2.0], [1.0, 0.0]], np.float32)).tostype("csr")
    w = so.ones((2, 3))
    x.attach_grad(), w.attach_grad()
    with so.autograd.record():
        y = so.dot(x, w)
    assert [g.stype for g in so.autograd.grad([y], [x, w])] == ["csr", "row_sparse"]
    for name in ("_contrib_getnnz", "sgd_update"):
        folder = "builtins"
        assert "## Gradients" not in (pages / folder / f"{name}.md").read_text(), name
