"""The C ABI reference page, generated from the comments of ``sdk/include/sparse_ops.h``.

The header is the documentation of the C boundary: every declaration carries the comment
that explains it. This module reads it with a small parser of its own (the standard library
only: no Doxygen, no clang), so the page follows the header on every build, and writes one
MyST Markdown page:

- the file's leading block comment is the page's introduction;
- each ``/* ---- title ---- */`` comment line starts a ``##`` section;
- every public declaration (``#define``, ``typedef``, ``struct``, ``enum``, prototypes and
  ``static inline`` functions, function-pointer typedefs) is shown as C (comments and
  function bodies left out) followed by its comment as prose; struct fields, enumerators
  and commented constants get a table. Each entry gets a label to link it from other pages:
  ``c-so_op_decl``, and for an all-capital name (a macro) ``c-macro-so_ok``.

The header's conventions the parser relies on:

- a comment directly above declarations (no blank line between) documents them all, so a
  run of related ``#define``s or functions under one comment is one entry; a blank line or
  a new comment ends an entry;
- a comment that starts after code on the same line documents that line's declaration (a
  field, a constant), also when it continues on the next lines;
- ``#if``/``#ifdef`` blocks holding only preprocessor lines belong to the entry they sit in;
  one holding C code (the header's ``SPARSE_OPS_HEADER_EXAMPLE`` library) is shown verbatim,
  comments included, as an example; the include guard, ``#include``s and the
  ``extern "C"`` wrapper are left out;
- names starting with ``_``, and declarations whose comment starts with ``internal:`` or
  ``@internal``, are not public and are left out (sparse_ops.h has none today).
"""
from __future__ import annotations

import dataclasses
import pathlib
import re
import textwrap

SECTION_RE = re.compile(r"/\*\s*-{3,}\s*(.*?)\s*-{3,}\s*\*/")
INTERNAL_RE = re.compile(r"[@\\]internal\b|internal:", re.I)  # a comment marking its declarations internal
FUNCPTR_RE = re.compile(r"\(\s*\*\s*(\w+)\s*\)\s*\(")
# a C name, possibly a member access (ctx->stream, so_context.alloc_output), possibly SO_ERR_*
IDENT_RE = re.compile(r"[A-Za-z_]\w*(?:(?:->|\.)[A-Za-z_]\w*)*(?:\([\w.,*&>-]*\))?\*?")
MARKDOWN_SPECIALS = set("\\`*_<>[]{}|$&#~%")


# ---- lexing ---------------------------------------------------------------------------------------
@dataclasses.dataclass
class Token:
    """One piece of C source: a blank line, a comment, a preprocessor line or a declaration."""

    kind: str  # "blank", "comment", "directive" or "code"
    text: str
    start: int  # offsets into the lexed text
    end: int
    col: int = 0  # column the token starts in (comments: to dedent their continuation lines)
    trailing: bool = False  # a comment starting after code on the same line


def _skip_literal(text: str, i: int) -> int:
    """The index after the string or character literal starting at ``text[i]``."""
    quote, i = text[i], i + 1
    while i < len(text) and text[i] != quote:
        i += 2 if text[i] == "\\" else 1
    return i + 1


def _skip_comment(text: str, i: int) -> int:
    """The index after the comment starting at ``text[i]``."""
    if text.startswith("//", i):
        end = text.find("\n", i)
        return len(text) if end < 0 else end
    end = text.find("*/", i + 2)
    if end < 0:
        raise ValueError(f"unterminated comment at offset {i}")
    return end + 2


def _directive_end(text: str, i: int) -> int:
    """The end of the preprocessor line starting at ``text[i]``: its newline (backslash
    continuations included), or the comment trailing it, which is lexed on its own."""
    while i < len(text) and text[i] != "\n":
        if text.startswith("\\\n", i):
            i += 2
        elif text.startswith(("/*", "//"), i):
            break
        elif text[i] == '"':
            i = _skip_literal(text, i)
        else:
            i += 1
    return i


def _code_end(text: str, i: int, ends: str) -> int:
    """The end of the declaration starting at ``text[i]``: after a ``;`` (or any of ``ends``)
    outside brackets, after a function body's closing brace, after ``extern "C" {``, or after
    a lone ``}`` (the end of that block). Comments inside stay part of the declaration."""
    start, depth, body = i, 0, False
    while i < len(text):
        ch = text[i]
        if text.startswith(("/*", "//"), i):
            i = _skip_comment(text, i)
            continue
        if ch in "\"'":
            i = _skip_literal(text, i)
            continue
        if ch in "([{":
            if ch == "{" and depth == 0:
                head = _strip_comments(text[start:i]).strip()
                if re.fullmatch(r'extern\s+"C"', head):
                    return i + 1
                body = head.endswith(")")
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                return i + 1
            depth -= 1
            if depth == 0 and ch == "}" and body:
                return i + 1
        elif ch in ends and depth == 0:
            return i + 1
        i += 1
    return i


def tokens(text: str, ends: str = ";") -> list[Token]:
    """Split C source into tokens, in order; ``ends`` ends a declaration (enum bodies: ``,;``)."""
    out: list[Token] = []
    i, line_start, code_on_line = 0, 0, False
    while i < len(text):
        ch = text[i]
        if ch == "\n":
            if not text[line_start:i].strip():
                out.append(Token("blank", "", i, i))
            i += 1
            line_start, code_on_line = i, False
        elif ch.isspace():
            i += 1
        elif text.startswith(("/*", "//"), i):
            end = _skip_comment(text, i)
            prev = out[-1] if out else None
            if (text.startswith("//", i) and prev and prev.kind == "comment" and prev.text.startswith("//")
                    and not prev.trailing and not code_on_line and text.count("\n", prev.end, i) == 1):
                prev.text, prev.end = text[prev.start:end], end  # consecutive // lines: one comment
            else:
                out.append(Token("comment", text[i:end], i, end, i - line_start, code_on_line))
            i = end
            line_start = text.rfind("\n", 0, i) + 1
        else:
            directive = ch == "#" and not text[line_start:i].strip()
            end = _directive_end(text, i) if directive else _code_end(text, i, ends)
            out.append(Token("directive" if directive else "code", text[i:end].rstrip(), i, end, i - line_start))
            i, code_on_line = end, True
            line_start = text.rfind("\n", 0, i) + 1  # a token may span lines
    return out


def _strip_comments(code: str) -> str:
    """``code`` without its comments; lines left empty by that are dropped (blank lines of
    the source stay), trailing whitespace too, so the alignment before a trailing comment
    goes with it."""
    out, i, last = [], 0, 0
    while i < len(code):
        if code.startswith(("/*", "//"), i):
            out.append(code[last:i] + "\0")  # marks the line a comment was taken from
            i = last = _skip_comment(code, i)
        elif code[i] in "\"'":
            i = _skip_literal(code, i)
        else:
            i += 1
    out.append(code[last:])
    lines = "".join(out).split("\n")
    return "\n".join(line.replace("\0", "").rstrip() for line in lines
                     if "\0" not in line or line.replace("\0", "").strip())


def comment_text(token: Token) -> str:
    """A comment's text: markers, the ``*`` gutter and the common indentation removed."""
    raw = token.text
    if raw.startswith("//"):  # one or more // lines
        lines = [re.sub(r"^\s*//", "", line) for line in raw.split("\n")]
        return textwrap.dedent("\n".join(line.rstrip() for line in lines)).strip("\n")
    opening = "/**" if raw.startswith("/**") and len(raw) > 4 else "/*"  # /** doc comments */ too
    lines = raw[len(opening):-2].split("\n")
    lines[0] = " " * (token.col + len(opening)) + lines[0]
    rest = lines[1:]
    if rest and all(re.match(r"\s*\*(\s|$)", line) for line in rest if line.strip()):
        lines = [lines[0]] + [re.sub(r"^\s*\* ?", "", line) if line.strip() else "" for line in rest]
        if not lines[0].strip():
            lines = lines[1:]
        else:  # the first line sits after "/* ": align it with the gutter's text
            lines[0] = lines[0].strip()
    text = textwrap.dedent("\n".join(line.rstrip() for line in lines))
    return text.strip("\n").rstrip()


# ---- the declarations ----------------------------------------------------------------------------
@dataclasses.dataclass
class Member:
    """One struct field or enumerator, or a note between them (a comment or an ``#if``)."""

    name: str = ""
    type: str = ""  # fields: their C type; enumerators: their value
    doc: str = ""
    note: str = ""  # set for a note row: its text (a directive is kept as C)
    directive: bool = False


@dataclasses.dataclass
class Decl:
    """One declaration: its names, its C text (no comments, no body) and what documents it."""

    kind: str  # macro, directive, struct, enum, typedef, function, variable
    names: list[str]
    code: str
    value: str = ""  # a macro's replacement text
    note: str = ""  # its trailing comment (or, inside an #if block, the comment above it)
    members: list[Member] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Entry:
    """Declarations documented by one comment (``doc``, possibly empty)."""

    doc: str
    decls: list[Decl] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Example:
    """An ``#if`` block of C code shown verbatim, with the comment above it."""

    doc: str
    code: str


@dataclasses.dataclass
class Section:
    title: str
    parts: list[Entry | Example | str] = dataclasses.field(default_factory=list)  # str: a free comment


def _matching_brace(text: str, i: int) -> int:
    """The index of the ``}`` closing the ``{`` at ``text[i]``, skipping comments and literals."""
    depth = 0
    while i < len(text):
        if text.startswith(("/*", "//"), i):
            i = _skip_comment(text, i)
            continue
        if text[i] in "\"'":
            i = _skip_literal(text, i)
            continue
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return i
        i += 1
    raise ValueError("unbalanced braces")


def macro(text: str) -> Decl:
    """A preprocessor line: a ``#define`` (its name, with parameters, and value) or another
    directive (kept as C, without names)."""
    m = re.match(r"#\s*define\s+(\w+)(\([^)]*\))?[ \t]*(.*)", text, re.S)
    if m is None:
        return Decl("directive", [], text)
    value = " ".join(m.group(3).replace("\\\n", " ").split())
    return Decl("macro", [m.group(1)], text, value=value)


def _split_field(text: str) -> Member:
    """A field declaration's name and type: ``int64_t shape[8]`` is ``shape`` of type
    ``int64_t[8]``; ``void* (*workspace)(void*, uint64_t)`` is ``workspace`` of type
    ``void* (*)(void*, uint64_t)``."""
    flat = " ".join(_strip_comments(text).split()).rstrip(";").strip()
    m = FUNCPTR_RE.search(flat)
    if m:
        return Member(name=m.group(1), type=flat[:m.start()].rstrip() + " (*)" + flat[m.end() - 1:])
    m = re.fullmatch(r"(.*?)(\w+)\s*((?:\[[^\]]*\]\s*)*)", flat)
    if m is None:
        return Member(name=flat)
    return Member(name=m.group(2), type=m.group(1).strip() + m.group(3).replace(" ", ""))


def _members(body: str, enum: bool) -> list[Member]:
    """The fields (or enumerators) of a struct (or enum) body, each with its comment: the one
    directly above it and any trailing it. Other comments and ``#if`` lines become notes."""
    rows: list[Member] = []
    pending: list[str] = []
    last: Member | None = None
    for tok in tokens(body, ends=",;" if enum else ";"):
        if tok.kind == "comment" and tok.trailing and last is not None:
            last.doc = _join(last.doc, comment_text(tok))
            continue
        if tok.kind == "comment":
            pending.append(comment_text(tok))
            last = None
            continue
        doc = pending.pop() if tok.kind == "code" and pending else ""
        rows += [Member(note=text) for text in pending]  # comments documenting no one field
        pending, last = [], None
        if tok.kind == "directive":
            rows.append(Member(note=tok.text, directive=True))
        elif tok.kind == "code":
            text = tok.text.rstrip(",;").strip()
            if enum:
                name, _, value = text.partition("=")
                last = Member(name=name.strip(), type=" ".join(value.split()))
            else:
                last = _split_field(text)
            last.doc = doc
            if not last.name.startswith("_"):
                rows.append(last)
    return rows + [Member(note=text) for text in pending]


def declaration(text: str) -> Decl:
    """A C declaration or definition, recognised by its shape."""
    clean = _strip_comments(text).strip()
    flat = " ".join(clean.split())
    m = re.match(r"(typedef\s+)?(struct|union|enum)\s*(\w+)?\s*\{", flat)
    if m:
        open_at = text.index("{")
        close_at = _matching_brace(text, open_at)
        after = _strip_comments(text[close_at + 1:])
        names = re.findall(r"\w+", after) if m.group(1) else []
        if m.group(3) and m.group(3) not in names:
            names.insert(0, m.group(3))
        members = _members(text[open_at + 1:close_at], enum=m.group(2) == "enum")
        return Decl("enum" if m.group(2) == "enum" else "struct", names, clean, members=members)
    ptr = FUNCPTR_RE.search(flat)
    if flat.startswith("typedef"):
        name = ptr.group(1) if ptr else re.findall(r"(\w+)\s*(?:\[[^\]]*\]\s*)*;?$", flat)[-1]
        return Decl("typedef", [name], clean)
    call = re.search(r"(\w+)\s*\(", flat)
    if ptr is None and call is not None:
        if clean.endswith("}"):  # a definition (static inline): its signature only
            clean = clean[:_body_start(clean)].rstrip() + ";"
        return Decl("function", [call.group(1)], clean)
    names = [ptr.group(1)] if ptr else re.findall(r"(\w+)\s*(?:\[[^\]]*\]\s*)*(?:=.*)?;$", flat)[-1:]
    return Decl("variable", names, clean)


def _body_start(code: str) -> int:
    """The index of the ``{`` opening a function's body (outside parentheses)."""
    depth = 0
    for i, ch in enumerate(code):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "{" and depth == 0:
            return i
    return len(code)


# ---- the header ---------------------------------------------------------------------------------
def _keyword(tok: Token) -> str:
    m = re.match(r"#\s*(\w+)", tok.text) if tok.kind == "directive" else None
    return m.group(1) if m else ""


def _without_guard(toks: list[Token]) -> list[Token]:
    """The tokens without the include guard: ``#ifndef X`` / ``#define X`` first, and the
    last ``#endif`` (with its trailing comment)."""
    directives = [i for i, t in enumerate(toks) if t.kind == "directive"]
    if len(directives) < 3:
        return toks
    first, second = toks[directives[0]].text.split(), toks[directives[1]].text.split()
    if first[:1] != ["#ifndef"] or second != ["#define", first[1]] or _keyword(toks[directives[-1]]) != "endif":
        return toks
    drop = {directives[0], directives[1], directives[-1]}
    drop |= {i for i in range(directives[-1] + 1, len(toks)) if toks[i].kind == "comment" and toks[i].trailing}
    return [t for i, t in enumerate(toks) if i not in drop]


def _group_conditionals(toks: list[Token]) -> list[Token | list[Token]]:
    """The tokens with every top-level ``#if``..``#endif`` block (and a comment trailing its
    ``#endif``) gathered into one list."""
    items: list[Token | list[Token]] = []
    block: list[Token] = []
    depth = 0
    for tok in toks:
        kw = _keyword(tok)
        if depth == 0 and block and tok.kind == "comment" and tok.trailing:
            block.append(tok)  # the comment after the block's #endif
            continue
        if depth == 0 and block:
            items.append(block)
            block = []
        if kw.startswith("if"):
            depth += 1
        if depth:
            block.append(tok)
        else:
            items.append(tok)
        if kw == "endif":
            depth -= 1
    if block:
        items.append(block)
    return items


def _is_linkage(block: list[Token]) -> bool:
    """Whether an ``#if`` block only opens or closes ``extern "C" {``."""
    code = [t.text for t in block if t.kind == "code"]
    directives = [t for t in block if t.kind == "directive"]
    return bool(code) and all(re.fullmatch(r'extern\s+"C"\s*\{|\}', c) for c in code) and len(directives) == 2


def _join(*texts: str) -> str:
    return " ".join(filter(None, texts))


def parse(text: str) -> tuple[str, list[Section]]:
    """The header's introduction (its leading comment) and its sections, in header order."""
    toks = _without_guard(tokens(text))
    intro = ""
    first = next((i for i, t in enumerate(toks) if t.kind != "blank"), None)
    if first is not None and toks[first].kind == "comment":
        intro = comment_text(toks[first])
        toks = toks[first + 1:]
    sections = [Section("")]
    pending: list[str] = []
    entry: Entry | None = None

    def flush() -> None:  # comments documenting nothing: free prose
        sections[-1].parts.extend(pending)
        pending.clear()

    def add(decl: Decl) -> None:
        nonlocal entry
        if entry is None:
            doc = pending.pop() if pending else ""
            flush()
            entry = Entry(doc)
            if not INTERNAL_RE.match(doc):  # an internal entry is filled, never shown
                sections[-1].parts.append(entry)
        if not (decl.names and all(name.startswith("_") for name in decl.names)):
            entry.decls.append(decl)

    for item in _group_conditionals(toks):
        if isinstance(item, list):
            if _is_linkage(item):
                continue
            if all(t.kind in ("directive", "comment", "blank") for t in item):
                inner: list[str] = []
                for tok in item:  # preprocessor lines only: they join the current entry
                    if tok.kind == "comment" and tok.trailing and entry and entry.decls:
                        entry.decls[-1].note = _join(entry.decls[-1].note, comment_text(tok))
                    elif tok.kind == "comment":
                        inner.append(comment_text(tok))
                    elif tok.kind == "directive":
                        decl = macro(tok.text)
                        decl.note, inner = " ".join(inner), []
                        add(decl)
                continue
            doc = pending.pop() if pending else ""
            flush()
            code = text[item[0].start:item[-1].end]
            sections[-1].parts.append(Example(doc, textwrap.dedent(" " * item[0].col + code)))
            entry = None
            continue
        tok = item
        if tok.kind == "blank":
            flush()
            entry = None
        elif tok.kind == "comment" and tok.trailing and entry and entry.decls:
            entry.decls[-1].note = _join(entry.decls[-1].note, comment_text(tok))
        elif tok.kind == "comment":
            m = SECTION_RE.fullmatch(tok.text)
            if m:
                flush()
                sections.append(Section(m.group(1)))
            else:
                pending.append(comment_text(tok))
            entry = None
        elif tok.kind == "directive":
            if _keyword(tok) not in ("include", "pragma"):
                add(macro(tok.text))
        elif not re.fullmatch(r'extern\s+"C"\s*\{|\}', tok.text):
            add(declaration(tok.text))
    flush()
    return intro, [s for s in sections if s.parts]


# ---- Markdown ------------------------------------------------------------------------------------
def _escape(text: str) -> str:
    return "".join("\\" + ch if ch in MARKDOWN_SPECIALS else ch for ch in text)


def inline(text: str) -> str:
    """Prose as inline Markdown: the comment's own `code` kept, C names (those with an
    underscore: ``so_error``, ``SO_ERR_*``, ``ctx->alloc_output``) set as code, and every
    other character Markdown would read as markup escaped."""
    out = []
    for i, part in enumerate(re.split(r"(`[^`\n]+`)", text)):
        if i % 2:
            out.append(part)
            continue
        last = 0
        for m in IDENT_RE.finditer(part):
            if "_" in m.group() or "->" in m.group():
                out.append(_escape(part[last:m.start()]) + f"`{m.group()}`")
                last = m.end()
        out.append(_escape(part[last:]))
    result = "".join(out)
    return re.sub(r"^(\d+)([.)])", r"\1\\\2", result)  # not an ordered list


def _is_preformatted(block: list[str]) -> bool:
    """A block of a comment that is laid out, not prose: indented as a whole, or aligned in
    columns (runs of 3+ spaces between words)."""
    indented = all(line.startswith("  ") for line in block if line.strip())
    return indented or any(re.search(r"\S {3,}\S", line) for line in block)


def markdown(text: str) -> str:
    """A comment's text as Markdown: paragraphs, ``-`` lists, and its laid-out blocks (code
    examples, tables) as literal blocks: C where indented code, plain text otherwise."""
    blocks: list[list[str]] = [[]]
    for line in text.split("\n"):
        if line.strip():
            blocks[-1].append(line)
        elif blocks[-1]:
            blocks.append([])
    out: list[str] = []
    pre: list[list[str]] = []

    def flush_pre() -> None:
        if not pre:
            return
        lines = textwrap.dedent("\n\n".join("\n".join(b) for b in pre)).split("\n")
        c = all(b[0].startswith("  ") for b in pre) and any(";" in line for line in lines)
        out.append(f"```{'c' if c else 'text'}\n" + "\n".join(lines) + "\n```")
        pre.clear()

    for block in filter(None, blocks):
        if _is_preformatted(block):
            pre.append(block)
            continue
        flush_pre()
        paragraphs: list[tuple[bool, list[str]]] = []  # (a list item?, its lines)
        for line in block:
            item = re.match(r"\s*[-*] (.*)", line)
            if item:
                paragraphs.append((True, [item.group(1)]))
            elif paragraphs and (not paragraphs[-1][0] or line.startswith(" ")):
                paragraphs[-1][1].append(line)
            else:
                paragraphs.append((False, [line]))
        chunk: list[str] = []
        for is_item, lines in paragraphs:
            joined = inline(" ".join(" ".join(lines).split()))
            if chunk and not (is_item and chunk[-1].startswith("- ")):
                chunk.append("")
            chunk.append(f"- {joined}" if is_item else joined)
        out.append("\n".join(chunk))
    flush_pre()
    return "\n\n".join(out)


def _cell(text: str) -> str:
    """Text for a table cell: one line, its pipes escaped (inside code too: a table row is
    split at every unescaped pipe)."""
    return re.sub(r"`[^`]*`", lambda m: m.group().replace("|", "\\|"), inline(" ".join(text.split())))


def _code_cell(text: str) -> str:
    return f"`{' '.join(text.split())}`".replace("|", "\\|") if text else ""


def _heading(names: list[str]) -> str:
    """An entry's heading: its names, with runs of 3+ constants sharing their first two
    words shortened to ``A_B_*`` (``SO_ERR_*``)."""
    parts: list[str] = []
    i = 0
    while i < len(names):
        j = i + 1
        words = names[i].split("_")
        prefix = "_".join(words[:2]) + "_" if names[i].isupper() and len(words) > 2 else None
        while prefix and j < len(names) and names[j].startswith(prefix) and names[j].isupper():
            j += 1
        if prefix and j - i >= 3:
            parts.append(f"`{prefix}*`")
        else:
            parts += [f"`{n}`" for n in names[i:j]]
        i = j
    return ", ".join(parts)


def _members_md(decl: Decl) -> str:
    """A struct's fields (or an enum's enumerators) as tables; notes and ``#if`` lines in between."""
    out: list[str] = []
    table: list[str] = []
    head = ("| Enumerator | Value | Description |" if decl.kind == "enum" else "| Field | Type | Description |")

    def flush() -> None:
        if table:
            out.append("\n".join([head, "|---|---|---|", *table]))
            table.clear()

    for i, m in enumerate(decl.members):
        if m.directive:
            flush()
            fields_follow = any(not later.note for later in decl.members[i + 1:])
            if _keyword(Token("directive", m.note, 0, 0)) != "endif":
                out.append(f"Inside `{m.note}`:")
            elif fields_follow:
                out.append("After `#endif`:")
        elif m.note:
            flush()
            out.append(markdown(m.note))
        else:
            table.append(f"| `{m.name}` | {_code_cell(m.type)} | {_cell(m.doc)} |")
    flush()
    return "\n\n".join(out)


def _label(name: str) -> str:
    """The page-wide label of a declared name: ``c-so_op_decl``; all-capital names (macros)
    ``c-macro-so_param_float``, since labels are case-insensitive and a macro may share its
    name with a function (``SO_PARAM_FLOAT``, ``so_param_float``)."""
    return f"c-macro-{name.lower()}" if name.isupper() else f"c-{name.lower()}"


def _entry_md(entry: Entry, labels: set[str]) -> str:
    """One entry: labels, a heading naming its declarations, their C, the comment, then the
    tables (commented constants, struct fields, enumerators). ``labels``: those used so far."""
    names = list(dict.fromkeys(n for d in entry.decls for n in d.names))
    if not names:  # all internal, or stray preprocessor lines
        return ""
    heading = ""
    for name in names:
        label = _label(name)
        if label not in labels:
            labels.add(label)
            heading += f"({label})=\n"
    out = [heading + f"### {_heading(names)}"]
    code = "\n".join(d.code for d in entry.decls)
    out.append(f"```c\n{code}\n```")
    if entry.doc:
        out.append(markdown(entry.doc))
    macros = [d for d in entry.decls if d.kind == "macro"]
    noted = [d for d in entry.decls if d.note and d.kind != "directive"]  # not #endif's markers
    if len(macros) > 1 and noted:
        rows = [f"| `{d.names[0]}` | {_code_cell(d.value)} | {_cell(d.note)} |" for d in macros]
        out.append("\n".join(["| Name | Value | Description |", "|---|---|---|", *rows]))
        noted = [d for d in noted if d.kind != "macro"]
    out += [markdown(d.note) for d in noted]
    out += [_members_md(d) for d in entry.decls if d.members]
    return "\n\n".join(filter(None, out))


def render(intro: str, sections: list[Section], source: str) -> str:
    """The MyST page of a parsed header."""
    out = ["(c-abi)=", "# C ABI reference", "",
           f"Generated from the comments of `{source}`, the one header operator libraries are "
           "written against (`sparse-ops include-dir` prints its folder). Each declaration is "
           "shown as C, without comments or function bodies, followed by its comment."]
    if intro:
        out += ["", markdown(intro)]
    labels: set[str] = set()
    for section in sections:
        if section.title:
            out += ["", f"## {inline(section.title[:1].upper() + section.title[1:])}"]
        for part in section.parts:
            if isinstance(part, Entry):
                entry = _entry_md(part, labels)
                out += ["", entry] if entry else []
            elif isinstance(part, Example):
                out += ["", markdown(part.doc)] if part.doc else []
                out += ["", f"```c\n{part.code.rstrip()}\n```"]
            else:
                out += ["", markdown(part)]
    return "\n".join(out).rstrip() + "\n"


def write_c_reference(header: pathlib.Path, out: pathlib.Path) -> None:
    """Write the C ABI reference page of ``header`` to ``out`` (MyST Markdown)."""
    header, out = pathlib.Path(header), pathlib.Path(out)
    intro, sections = parse(header.read_text(encoding="utf-8"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(intro, sections, header.name), encoding="utf-8")
