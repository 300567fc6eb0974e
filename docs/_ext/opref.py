"""The operator reference of the docs: one MyST Markdown page per registered operator, and an index.

``write_op_pages(outdir)`` reads everything from the live operator table (built-ins, the
cookbook plugin and any other installed plugin), so the reference cannot drift from the code:
each op's docstring, how to call it, its parameters, its storage-type rules (computed as
``sparse-ops info`` computes them), its row of the committed op x face matrix
(``docs/op_face_matrix.md``) and its devices. A docs build runs it before Sphinx reads the
sources; it only rewrites pages whose text changed, so Sphinx's incremental builds stay
incremental.
"""
from __future__ import annotations

import ast
import inspect
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import sparse_ops
from sparse_ops.cli import _devices  # the devices `sparse-ops list` shows
from sparse_ops.describe import sample_gradients, storage_rules
from sparse_ops.dispatch import op_function
from sparse_ops.registry import OpDef

COOKBOOK = "cookbook"  # the plugin name of sparse_ops_cookbook's operators
MATRIX = Path(__file__).resolve().parents[1] / "op_face_matrix.md"
# folder -> section title of the index, in the index's order
SECTIONS = {"builtins": "Built-in operators", "cookbook": "Cookbook operators", "other": "Other plugins"}
INTERNAL = "Gradient and internal operators"  # the sub-list of ops whose names start with "_"


# ---- Markdown text ------------------------------------------------------------------------------
_CODE = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)", re.S)  # a code span, reST ``x`` or Markdown `x`
# characters Markdown or MyST read as inline syntax (an underscore only at a word's edge: inside a
# word it is never emphasis, so ``row_sparse`` stays readable in the generated source)
_SPECIAL = re.compile(r"([\\`*\[{}<|$&]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")
_ORDERED = re.compile(r"(\d{1,9})([.)])(?=\s|$)")  # "1." or "1)" opening a paragraph: an ordered list
_ITEM = re.compile(r"([-*+]|\d{1,9}[.)])\s+")  # a list item's marker
_ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "cf.")


def _code(content: str, table: bool) -> str:
    """``content`` as one Markdown code span (its backticks fenced by a longer run)."""
    fence = "`" * (max((len(r) for r in re.findall(r"`+", content)), default=0) + 1)
    pad = " " if content.startswith("`") or content.endswith("`") else ""
    return fence + pad + (content.replace("|", r"\|") if table else content) + pad + fence


def inline(text: str, table: bool = False) -> str:
    """One paragraph of docstring prose as Markdown inline text on one line: code spans kept
    (reST ``x`` becomes `x`), every other character Markdown or MyST would read as syntax
    backslash-escaped, and the first character escaped where it would open a block (a
    heading, list, quote, target, directive, comment). ``table``: for a table cell (pipes in
    code spans escaped too; no block syntax to escape)."""
    text = " ".join(text.split())
    parts, pos = [], 0
    for m in _CODE.finditer(text):
        parts += [_SPECIAL.sub(r"\\\1", text[pos:m.start()]), _code(m[2], table)]
        pos = m.end()
    out = "".join(parts + [_SPECIAL.sub(r"\\\1", text[pos:])])
    if table:  # a table cell holds inline text only: nothing there opens a block
        return out
    if out.startswith("```"):  # a long code span first would open a fenced block: a zero-width space first
        out = "\u200b" + out
    if out[:1] not in ("", "\\", "`") and not out[0].isalnum() and out[0].isascii() and not out[0].isspace():
        return "\\" + out  # every ASCII punctuation character may be escaped
    return _ORDERED.sub(r"\1\\\2", out, count=1) if _ORDERED.match(out) else out


def _fenced(lines: list[str]) -> str:
    """A literal block, fenced by a backtick run longer than any inside it."""
    body = textwrap.dedent("\n".join(lines))
    fence = "`" * max(3, max((len(r) for r in re.findall(r"`+", body)), default=0) + 1)
    return f"{fence}text\n{body}\n{fence}"


def render_doc(doc: str) -> str:
    """A docstring (reST-flavoured prose) as MyST Markdown that cannot break the page: its
    paragraphs joined and escaped (``inline``), its bullet and numbered lists kept as lists,
    its indented blocks (reST literal blocks) and ``>>>`` examples as literal blocks."""
    blocks = []
    for block in re.split(r"\n\s*\n", inspect.cleandoc(doc)):
        lines = block.splitlines()
        if not lines:
            continue
        if all(line[:1].isspace() for line in lines) or lines[0].startswith(">>>"):
            blocks.append(_fenced(lines))
        elif _ITEM.match(lines[0]):
            kind = lines[0][0].isdigit()
            items: list[list[str]] = []
            for line in lines:
                marker = _ITEM.match(line)
                if marker and marker[1][0].isdigit() == kind:
                    items.append([marker[1] if kind else "-", line[marker.end():]])
                else:
                    items[-1].append(line)
            blocks.append("\n".join(f"{item[0]} {inline(' '.join(item[1:]))}" for item in items))
        else:
            text = " ".join(lines)
            literal = re.search(r"[^:\s]::$", text)  # reST's "Example::" introducing a literal block
            blocks.append(inline(text[:-1] if literal else text))
    return "\n\n".join(blocks)


def first_sentence(doc: str) -> str:
    """The first sentence of a docstring's first paragraph (a full stop outside brackets
    and code, followed by a space or the end), whitespace joined."""
    para = " ".join(inspect.cleandoc(doc).split("\n\n")[0].split())
    masked = _CODE.sub(lambda m: "x" * len(m[0]), para)  # full stops in code do not count
    depth = 0
    for i, ch in enumerate(masked):
        depth += (ch in "([{") - (ch in ")]}" and depth > 0)
        if ch in ".!?" and depth == 0 and masked[i + 1:i + 2] in ("", " ") \
                and not masked[:i + 1].lower().endswith(_ABBREVIATIONS):
            return para[:i + 1]
    return para


def _table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table; the cells must already be Markdown (``inline(..., table=True)``)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def gradient_summary(opdef: OpDef) -> str:
    """How the op is differentiated, in ``sparse_ops.explain``'s words."""
    if opdef.constant:
        return "none: the outputs are constants (`differentiable = False`)."
    if not opdef.differentiable:
        return "none: the op declares no gradient (differentiating through it is refused)."
    if not opdef.backward_kernels:
        return ("`gradient()` built from operators: their storage types show when it runs "
                "(`sparse_ops.explain` on a call says what runs).")
    return ("declared on the op (backward kernels and rules): the table's last column gives each input's "
            "gradient storage type and its dispatch mode, assuming each output's gradient arrives in the "
            "output's storage type.")


# ---- faces ------------------------------------------------------------------------------------
@dataclass
class FaceMatrix:
    """The committed op x face matrix: the faces (columns), each op's cells, the notes."""

    faces: list[str]
    rows: dict[str, list[str]]
    notes: dict[str, str]


def read_face_matrix(path: Path = MATRIX) -> FaceMatrix:
    """Parse ``docs/op_face_matrix.md``; a ValueError if a row does not fit the header."""
    faces: list[str] = []
    rows: dict[str, list[str]] = {}
    notes: dict[str, str] = {}
    in_notes = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("| op |"):
            faces = [c.strip() for c in line.strip().strip("|").split("|")][1:]
        elif m := re.fullmatch(r"\| `([^`]+)` \|(.*)\|\s*", line):
            rows[m[1]] = [c.strip() for c in m[2].split("|")]
            if len(rows[m[1]]) != len(faces):
                raise ValueError(f"{path}: the row of {m[1]} has {len(rows[m[1]])} cells for {len(faces)} faces")
        elif line.strip() == "Notes:":
            in_notes = True
        elif in_notes and (m := re.match(r"(\d+)\. (.*)", line)):
            notes[m[1]] = m[2]
        elif line.startswith("#"):
            in_notes = False
    return FaceMatrix(faces, rows, notes)


def _faces_section(name: str, matrix: FaceMatrix) -> str:
    """The op's row of the matrix as a face | status table, with the notes it cites."""
    cells = matrix.rows.get(name)
    if cells is None:
        return "This operator is not in the op x face matrix (`docs/op_face_matrix.md`)."
    cited = [n for cell in cells for n in re.findall(r"\[(\d+)\]", cell)]
    missing = [n for n in cited if n not in matrix.notes]
    if missing:
        raise ValueError(f"{MATRIX.name}: the row of {name} cites notes {missing} the file does not give")
    status = {"yes": "yes", "-": "not run"}
    rows = [[inline(face, True), status.get(cell) or inline(re.sub(r"\[(\d+)\]", r"no (note \1)", cell), True)]
            for face, cell in zip(matrix.faces, cells)]
    text = ("From the op x face matrix (`docs/op_face_matrix.md`): *yes*, the op's first sample ran through "
            "that face and agreed with the native call; *no*, not served, for the reason in the note; "
            "*not run*, not in that table's passes.\n\n" + _table(["face", "served"], rows))
    if cited:
        text += "\n\nNotes:\n\n" + "\n".join(f"- note {n}: {inline(matrix.notes[n])}" for n in dict.fromkeys(cited))
    return text


# ---- pages ------------------------------------------------------------------------------------
def _folder(opdef: OpDef) -> str:
    return "builtins" if opdef.plugin is None else "cookbook" if opdef.plugin == COOKBOOK else "other"


def _names(names: tuple[str, ...]) -> str:
    return ", ".join(_code(n, False) for n in names)


def _call_section(name: str, opdef: OpDef) -> str:
    """The signature as ``sparse-ops info`` shows it, under the name a caller writes, then
    inputs, outputs, in-place updates, resources, the other ways to call it and the gradient."""
    fn = op_function(name)
    where = "sparse_ops" if getattr(sparse_ops, name, None) is fn else "sparse_ops.ops"
    signature = str(inspect.signature(fn))
    try:
        ast.parse(f"def f{signature}: pass")
        lang = "python"
    except SyntaxError:  # a default whose repr is not Python: no highlighting to fail
        lang = "text"
    code = f"{where}.{name}{signature}"
    nvis = opdef.num_visible_outputs
    items = [f"Inputs: {_names(opdef.arguments)}" + (" (variadic: any number of inputs)" if opdef.variadic else ""),
             f"Outputs: {_names(opdef.outputs[:nvis])}"
             + (f" (kept for the backward pass, not returned: {_names(opdef.outputs[nvis:])})"
                if len(opdef.outputs) > nvis else "")]
    if opdef.mutate:
        items.append(f"Updates in place: {_names(opdef.mutate)}")
    if opdef.resources:
        items.append(f"Resources: {', '.join(opdef.resources)}")
    also = "" if where == "sparse_ops.ops" else f"`sparse_ops.ops.{name}(...)`, "
    items.append(f"Also callable as {also}`sparse_ops.invoke({name!r}, inputs, params)`; "
                 f"`sparse_ops.explain({name!r}, *inputs, **params)` says what a call would run.")
    items.append(f"Gradient: {gradient_summary(opdef)}")
    return f"```{lang}\n{code}\n```\n\n" + "\n".join(f"- {item}" for item in items)


def _params_section(opdef: OpDef) -> str:
    if not opdef.params:
        return "None."
    rows = []
    for p in opdef.params.values():
        tname = p.type if isinstance(p.type, str) else getattr(p.type, "__name__", str(p.type))
        default = "required" if p.required else _code(repr(p.default), True)
        doc = inline(p.doc, True) if p.doc else ""
        if p.choices:
            doc += ("; " if doc else "") + "one of " + ", ".join(_code(repr(c), True) for c in p.choices)
        if p.optional and not p.required and p.default is not None:
            doc += ("; " if doc else "") + "may be `None`"
        rows.append([_code(p.name, True), inline(tname, True), default, doc])
    return _table(["parameter", "type", "default", "description"], rows)


def _storage_section(name: str, opdef: OpDef) -> str:
    rules = storage_rules(opdef)
    text = [f"Each input-storage signature with a kernel, the output storage types the op's rule infers for it, "
            f"and the dispatch mode a call on the cpu gets (`sparse-ops info {name}` prints the same)."]
    if rules.sample_params is not None:
        text.append(f"The op requires parameters: the rules are evaluated with those of its first sample, "
                    f"{_code(repr(rules.sample_params), False)}.")
    elif rules.unknown:
        text.append(f"The output storage types depend on parameters the op requires ({inline(rules.unknown)}).")
    header = ["inputs", "outputs", "dispatch"] + (["input gradients"] if opdef.backward_kernels else [])
    rows = [[inline(", ".join(r.inputs), True), inline(r.outputs.replace(",", ", "), True), r.mode or "-"]
            + ([inline(r.gradients or "-", True)] if opdef.backward_kernels else []) for r in rules.rows]
    if rows:
        text.append(_table(header, rows))
    text.append("Other input storage types: " + ("densified, run by the dense kernel, the outputs cast back "
                                                 "(`fallback`)." if rules.fallback else "no kernel (an error)."))
    return "\n\n".join(text)


def _gradients_section(opdef: OpDef) -> str | None:
    """The storage type of each input's gradient on each of the op's samples, differentiated
    natively (``describe.sample_gradients``); None for ops without samples or gradients."""
    seen = sample_gradients(opdef)
    if not seen:
        return None
    names = list(opdef.arguments) if not opdef.variadic else None
    rows = []
    for s in seen:
        grads = (", ".join(f"{names[i] if names and i < len(names) else i}: {g}" for i, g in enumerate(s.grads))
                 if s.grads is not None else f"not differentiable here ({s.note})")
        row = [inline(", ".join(s.inputs), True), _code(repr(s.params), True) if s.params else "",
               inline(grads, True)]
        if row not in rows:
            rows.append(row)
    return ("The storage type of each input's gradient when a call on each of the op's samples is "
            "differentiated natively (`sparse_ops.autograd.grad` of its outputs): a row_sparse gradient "
            "stores only the rows the call touched.\n\n"
            + _table(["inputs", "parameters", "input gradients"], rows))


def op_page(name: str, matrix: FaceMatrix | None = None) -> str:
    """The Markdown page of registered operator ``name``."""
    opdef = sparse_ops.get_op(name)
    doc = opdef.cls.__doc__ or ""
    devices = _devices(opdef)
    sections = [
        "% generated by docs/_ext/opref.py from the operator table: edit the op, not this page",
        f"(op-{name})=\n# {inline(name)}",
        render_doc(doc) if doc.strip() else "*This operator has no docstring.*",
        "## Call\n\n" + _call_section(name, opdef),
        "## Parameters\n\n" + _params_section(opdef),
        "## Storage types\n\n" + _storage_section(name, opdef),
        *(["## Gradients\n\n" + g] if (g := _gradients_section(opdef)) else []),
        "## Faces\n\n" + _faces_section(name, matrix or read_face_matrix()),
        "## Devices\n\n" + (", ".join(devices) if devices else "none: the op has no kernels (it runs its own code)")
        + ("" if opdef.plugin is None else f"\n\nPlugin: {inline(opdef.plugin)}."),
    ]
    return "\n\n".join(sections) + "\n"


def _index(groups: dict[str, list[str]]) -> str:
    """The index page: an intro, then per section a hidden toctree and a table of its ops,
    the ops whose names start with ``_`` in a sub-list of their own."""
    text = ["% generated by docs/_ext/opref.py from the operator table", "# Operator reference",
            "One page per registered operator, built-in or from a plugin. Each page holds the operator's "
            "docstring; how to call it (signature, inputs, outputs, gradient); its parameters; its storage "
            "types (for each input-storage signature with a kernel: the output storage types and the dispatch "
            "mode); which faces serve it, from the op x face matrix; and its devices. The pages are generated "
            "from the operator table, so they describe the code as it is."]
    for folder, title in SECTIONS.items():
        names = sorted(groups.get(folder, []), key=lambda n: (n.startswith("_"), n.lower()))
        if not names:
            continue
        text += [f"## {title}",
                 "```{toctree}\n:maxdepth: 1\n:hidden:\n\n" + "\n".join(f"{folder}/{n}" for n in names) + "\n```"]
        public = [n for n in names if not n.startswith("_")]
        internal = [n for n in names if n.startswith("_")]
        for sub, members in ((None, public), (INTERNAL, internal)):
            if not members:
                continue
            if sub:
                text.append(f"### {sub}")
            rows = []
            for n in members:
                opdef = sparse_ops.get_op(n)
                summary = inline(first_sentence(opdef.cls.__doc__ or ""), True)
                plugin = [inline(opdef.plugin, True)] if folder == "other" else []
                rows.append([f"[{_code(n, True)}]({folder}/{n}.md)"] + plugin
                            + [summary, ", ".join(_devices(opdef)) or "-"])
            header = ["operator"] + (["plugin"] if folder == "other" else []) + ["summary", "devices"]
            text.append(_table(header, rows))
    return "\n\n".join(text) + "\n"


def _write(path: Path, text: str) -> None:
    """Write ``text`` unless the file already holds it (an unchanged page keeps its mtime,
    so Sphinx does not read it again)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


def write_op_pages(outdir: Path) -> list[Path]:
    """Write the operator reference into ``outdir`` (created if missing, stale .md files in
    it removed): ``index.md`` and one page per registered operator, ``builtins/<name>.md``,
    ``cookbook/<name>.md`` (the cookbook plugin's ops) or ``other/<name>.md`` (any other
    plugin's). Installed plugins are loaded first; the cookbook must load (its ops are part of
    the reference). Returns the paths written, the index first."""
    outdir = Path(outdir)
    info = sparse_ops.load_plugins()  # loaded at import unless SPARSE_OPS_DISABLE_PLUGIN_AUTOLOAD is set
    if COOKBOOK not in info["loaded"]:
        reason = info["failed"].get(COOKBOOK, {}).get("reason", "not installed (pip install -e ./cookbook)")
        raise RuntimeError(f"the operator reference needs the {COOKBOOK} plugin: {reason}")
    matrix = read_face_matrix()
    groups: dict[str, list[str]] = {}
    written = [outdir / "index.md"]
    for name in sparse_ops.list_ops():
        folder = _folder(sparse_ops.get_op(name))
        groups.setdefault(folder, []).append(name)
        written.append(outdir / folder / f"{name}.md")
        _write(written[-1], op_page(name, matrix))
    _write(written[0], _index(groups))
    keep = set(written)
    for stale in [p for p in outdir.rglob("*.md") if p not in keep]:
        stale.unlink()
    for folder in SECTIONS:
        if (outdir / folder).is_dir() and not any((outdir / folder).iterdir()):
            (outdir / folder).rmdir()
    return written
