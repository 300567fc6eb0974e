"""The C ABI reference page (``docs/_ext/cref.py``) against ``sdk/include/sparse_ops.h``.

What the page must hold is read here from the header with plain regular expressions over
its comment-free text, independently of the page's own parser, so a declaration that parser
misses or misreads fails a test."""
from __future__ import annotations

import importlib.util
import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
HEADER = ROOT / "sdk" / "include" / "sparse_ops.h"
EXAMPLE = re.compile(r"#ifdef SPARSE_OPS_HEADER_EXAMPLE\n.*?#endif /\* SPARSE_OPS_HEADER_EXAMPLE \*/", re.S)


def _load_cref():
    """docs/_ext/cref.py, which is no package's module (the docs build puts _ext on sys.path)."""
    if "cref" in sys.modules:
        return sys.modules["cref"]
    spec = importlib.util.spec_from_file_location("cref", ROOT / "docs" / "_ext" / "cref.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["cref"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


cref = _load_cref()


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("cref") / "c-abi.md"
    cref.write_c_reference(HEADER, out)
    return out.read_text(encoding="utf-8")


def _public_code() -> str:
    """The header without its comments and without the example library."""
    text = EXAMPLE.sub("", HEADER.read_text(encoding="utf-8"))
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def _plain(markdown: str) -> str:
    """Markdown reduced to its words: no code marks, no escapes, one space between words."""
    return " ".join(markdown.replace("`", "").replace("\\", "").split())


def _code_blocks(page: str) -> list[str]:
    return re.findall(r"^```c\n(.*?)^```$", page, re.S | re.M)


def _prose(page: str) -> str:
    return re.sub(r"^```.*?^```$", "", page, flags=re.S | re.M)


def _section(page: str, label: str) -> str:
    """The page from ``(label)=`` up to the next declaration's labels or section."""
    start = page.index(f"({label})=\n")
    ends = [m.start() for m in re.finditer(r"\n\n\(c-|\n## ", page) if m.start() > start]
    return page[start:min(ends, default=len(page))]


def _row(section: str, name: str) -> str:
    rows = [line for line in section.splitlines() if line.startswith(f"| `{name}` |")]
    assert len(rows) == 1, f"{name}: {len(rows)} table rows"
    return rows[0]


MACROS = [m for m in dict.fromkeys(re.findall(r"^\s*#\s*define\s+((?:SO|SPARSE_OPS)_\w+)", _public_code(), re.M))
          if m != "SPARSE_OPS_H"]  # the include guard
STRUCTS = re.findall(r"typedef struct (\w+)\s*\{", _public_code())
FN_TYPEDEFS = re.findall(r"typedef[^;{]*?\(\*\s*(\w+)\)", _public_code())
FUNCTIONS = re.findall(r"static inline[^(;{]*?\b(\w+)\s*\(", _public_code())


def test_the_header_has_what_these_tests_expect() -> None:
    assert len(MACROS) > 40 and "SO_ERR_INVALID_ARGUMENT" in MACROS and "SPARSE_OPS_LIBRARY" in MACROS
    assert {"so_error", "so_array", "so_context", "so_op_decl", "so_registrar"} <= set(STRUCTS)
    assert {"so_kernel_fn", "so_library_init_fn"} <= set(FN_TYPEDEFS)
    assert {"so_error_set", "so_param", "so_init_struct"} <= set(FUNCTIONS)


def test_page_header_and_introduction(page: str) -> None:
    assert page.startswith("(c-abi)=\n# C ABI reference\n")
    prose = _plain(_prose(page))
    assert "Rules of the boundary" in prose
    assert "- Only C types cross it: fixed-width integers, pointers, C strings, function pointers." in prose
    assert "Never let a C++ exception or a longjmp cross the boundary." in prose
    assert "Build:   cc -shared -fPIC" in page  # the aligned build/load lines kept as laid out


def test_sections_in_header_order(page: str) -> None:
    titles = re.findall(r"/\* -{3,} (.*?) -{3,} \*/", HEADER.read_text(encoding="utf-8"))
    headings = re.findall(r"^## (.*)$", page, re.M)
    assert [_plain(h).lower() for h in headings] == [t.lower() for t in titles]


@pytest.mark.parametrize("name", MACROS)
def test_every_public_macro_is_shown(page: str, name: str) -> None:
    assert f"(c-macro-{name.lower()})=" in page
    assert any(re.search(rf"^#define {name}\b", block, re.M) for block in _code_blocks(page))


@pytest.mark.parametrize("name", STRUCTS + FN_TYPEDEFS + FUNCTIONS)
def test_every_type_and_function_is_shown(page: str, name: str) -> None:
    assert f"(c-{name})=" in page
    code = "\n".join(_code_blocks(_section(page, f"c-{name}")))
    assert re.search(rf"\b{name}\b", code)


def test_declarations_in_header_order(page: str) -> None:
    names = STRUCTS + FN_TYPEDEFS + FUNCTIONS
    in_header = sorted(names, key=lambda n: re.search(rf"\b{n}\b", _public_code()).start())
    in_page = sorted(names, key=lambda n: page.index(f"(c-{n})="))
    assert in_page == in_header


def test_functions_show_signatures_not_bodies(page: str) -> None:
    code = "\n".join(b for b in _code_blocks(page) if "SPARSE_OPS_HEADER_EXAMPLE" not in b)
    assert "static inline int32_t so_error_set(so_error* err, int32_t code, const char* fmt, ...);" in code
    assert "static inline const char* so_param(const so_params* p, const char* key);" in code
    for body_only in ("vsnprintf", "strtoll", "memcpy(s, header"):
        assert body_only not in page


@pytest.mark.parametrize("struct", STRUCTS)
def test_struct_fields_in_their_table(page: str, struct: str) -> None:
    body = re.search(rf"typedef struct {struct}\s*\{{(.*?)\n\}} {struct};", _public_code(), re.S).group(1)
    fields = [m.group(1) or m.group(2)
              for m in re.finditer(r"\(\*(\w+)\)\s*\(|(\w+)\s*(?:\[\w*\])?\s*;", body)]
    assert fields[:2] == ["struct_size", "abi_version"]
    section = _section(page, f"c-{struct}")
    rows = re.findall(r"^\| `(\w+)` \|", section, re.M)
    assert rows == fields


def test_comments_next_to_their_declarations(page: str) -> None:
    assert "Write a printf-style message into err and return code" in _plain(_section(page, "c-so_error_set"))
    codes = _section(page, "c-macro-so_ok")
    for name, comment in [("SO_ERR_INVALID_ARGUMENT", "the inputs or parameters are not what the op accepts"),
                          ("SO_ERR_UNSUPPORTED", "a valid request this op does not implement"),
                          ("SO_ERR_RESOURCE", "returned by the host: a resource callback failed")]:
        assert comment in _plain(_row(codes, name))
    decl = _section(page, "c-so_op_decl")
    assert "NULL, or an op computing the same outputs from the same inputs" in _plain(_row(decl, "reference"))
    assert "checks opcheck skips, each with its reason" in _plain(_row(decl, "opcheck_skips"))
    assert "SO_CAPACITY_NONE: no rule for that output" in _plain(_row(decl, "capacity_like"))
    assert "Inside `#if SPARSE_OPS_TARGET_MINOR >= 1`" in decl  # the ABI 1.1 fields say so
    array = _section(page, "c-so_array")  # a trailing comment continued on the next line
    assert "stored rows; -1 for a sparse output not yet allocated" in _plain(_row(array, "nnz"))
    assert "`void* (*)(void* host, uint64_t nbytes)`" in _row(_section(page, "c-so_context"), "workspace")


def test_group_comments_and_examples_in_comments(page: str) -> None:
    dtypes = _section(page, "c-macro-so_dtype_float32")
    assert "dtype codes (MXNet's numbering)" in _plain(dtypes)
    init = _section(page, "c-so_init_struct")
    assert "#define SO_INIT(var)" in init and "```c\nso_op_decl op;\nSO_INIT(op);" in init


def test_example_library_verbatim(page: str) -> None:
    example = EXAMPLE.search(HEADER.read_text(encoding="utf-8")).group()
    assert f"```c\n{example}\n```" in page


def test_no_guard_includes_or_linkage(page: str) -> None:
    assert "#include" not in page and "#define SPARSE_OPS_H\n" not in page
    assert 'extern "C" {' not in page


def test_no_comment_markers_in_prose(page: str) -> None:
    prose = _prose(page)
    assert "/*" not in prose and "*/" not in prose
    assert page.count("```") % 2 == 0


def test_other_constructs(tmp_path: pathlib.Path) -> None:
    """What sparse_ops.h does not use today: enums, // comments, internal names, pipes."""
    header = tmp_path / "t.h"
    header.write_text(
        "// t.h: a test header | with a pipe.\n#ifndef T_H\n#define T_H\n\n/* ---- enums ---- */\n"
        "/* Colours. */\ntypedef enum t_colour {\n  T_RED = 1, /* red | not blue */\n  T_GREEN, // green\n"
        "  _T_HIDDEN = 9\n} t_colour;\n\n/* internal: not for users */\n#define T_PRIVATE 3\n\n"
        "int32_t _t_hidden(void);\n#define T_MASK (1 | 2) /* a | b */\n#define T_ONE 1\n#endif /* T_H */\n")
    out = tmp_path / "t.md"
    cref.write_c_reference(header, out)
    text = out.read_text()
    assert "| `T_RED` | `1` | red \\| not blue |" in text and "| `T_GREEN` |  | green |" in text
    assert "| `T_MASK` | `(1 \\| 2)` | a \\| b |" in text
    assert "_T_HIDDEN` |" not in text and "T_PRIVATE" not in text and "_t_hidden" not in text
    assert "(c-t_colour)=" in text and "#ifndef T_H" not in text and "#define T_H\n" not in text
