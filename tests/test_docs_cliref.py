"""The command line reference page (``docs/_ext/cliref.py``) against the parser of
``sparse-ops``, read here another way than the page reads it: the subcommands from the dict
``_parser()`` returns, options from each parser's option-string index, defaults from what
``parse_args`` actually yields."""
from __future__ import annotations

import argparse
import importlib.util
import pathlib
import re
import subprocess
import sys

import pytest

from sparse_ops import cli

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _load_cliref():
    """docs/_ext/cliref.py, which is no package's module (the docs build puts _ext on sys.path)."""
    if "cliref" in sys.modules:
        return sys.modules["cliref"]
    spec = importlib.util.spec_from_file_location("cliref", ROOT / "docs" / "_ext" / "cliref.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["cliref"] = module
    spec.loader.exec_module(module)
    return module


cliref = _load_cliref()
PARSER, SUBS = cli._parser()


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("cliref") / "cli.md"
    cliref.write_cli_reference(out)
    return out.read_text(encoding="utf-8")


def _plain(markdown: str) -> str:
    return " ".join(markdown.replace("`", "").replace("\\", "").split())


def _section(page: str, command: str) -> str:
    start = page.index(f"(cli-{command})=\n")
    end = page.find("\n(cli-", start + 1)
    return page[start:end if end >= 0 else len(page)]


def _row(section: str, argument: str) -> list[str]:
    """The cells of the table row of ``argument`` (an option string or a positional's name)."""
    rows = [line for line in section.splitlines()
            if line.startswith("| ") and argument in re.findall(r"`([^`]+)`", line.split(" | ")[0])]
    assert len(rows) == 1, f"{argument}: {len(rows)} rows"
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", rows[0])[1:-1]]


def _header(section: str, argument: str) -> list[str]:
    """The header row of the table holding ``argument``."""
    lines = section.splitlines()
    index = next(i for i, line in enumerate(lines) if line.startswith(f"| `{argument}`"))
    while not lines[index - 1].startswith("|---"):
        index -= 1
    return [cell.strip() for cell in lines[index - 2].split("|")[1:-1]]


def _options(sub: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {s: a for s, a in sub._option_string_actions.items() if s not in ("-h", "--help")}


def _positionals(sub: argparse.ArgumentParser) -> list[argparse.Action]:
    return sub._get_positional_actions()


def test_title_description_exit_codes(page: str) -> None:
    assert page.startswith("(cli)=\n# Command line reference\n")
    assert "Sparse-aware operators for Python." in page
    for code, meaning in re.findall(r"(\d) (success|failure|usage error)", cli.__doc__):
        assert f"| `{code}` | {meaning} |" in page


def test_one_section_per_subcommand_in_parser_order(page: str) -> None:
    assert len(SUBS) == 10
    sections = re.findall(r"^## `sparse-ops ([\w-]+)`$", page, re.M)
    assert sections == list(SUBS)


@pytest.mark.parametrize("command", list(SUBS))
def test_subcommand_help_and_usage(page: str, command: str) -> None:
    section = _section(page, command)
    helps = {a.dest: a.help for a in PARSER._subparsers._group_actions[0]._get_subactions()}
    assert _plain(helps[command]).lower() in _plain(section).lower()
    if SUBS[command].description:
        assert _plain(SUBS[command].description) in _plain(section)
    usage = re.search(r"```text\n(.*?)\n```", section, re.S).group(1)
    assert " ".join(usage.split()) == " ".join(SUBS[command].format_usage().split())


@pytest.mark.parametrize("command", list(SUBS))
def test_every_argument_with_its_help(page: str, command: str) -> None:
    section = _section(page, command)
    sub = SUBS[command]
    for option, action in _options(sub).items():
        assert _plain(action.help) in _plain(" ".join(_row(section, option)))
    for action in _positionals(sub):
        row = _row(section, action.dest)
        assert _plain(action.help) in _plain(row[-1]) and action.metavar in row[1]
    documented = {name for line in section.splitlines() if line.startswith("| `")
                  for name in re.findall(r"`([^`]+)`", line.split(" | ")[0])}
    assert documented == set(_options(sub)) | {a.dest for a in _positionals(sub)}


@pytest.mark.parametrize("command", list(SUBS))
def test_defaults_match_the_parser(page: str, command: str) -> None:
    sub = SUBS[command]
    required = [action.dest for action in _positionals(sub) if action.nargs is None]
    parsed = vars(PARSER.parse_args([command] + ["x"] * len(required)))
    section = _section(page, command)
    for option, action in _options(sub).items():
        if action.nargs == 0:
            continue  # a flag: no default shown
        value = parsed[action.dest]
        header, row = _header(section, option), _row(section, option)
        shown = row[header.index("Default")].strip("`") if "Default" in header else ""
        expected = "" if value is None else " ".join(map(str, value)) if isinstance(value, list) else str(value)
        assert shown == expected, option


def test_argument_groups_and_choices(page: str) -> None:
    demo = _section(page, "demo")
    tour = demo[demo.index("**Container tour (no cookbook needed)**"):]
    assert all(f"| `{option}` |" in tour for option in ("--tour", "--rows", "--cols", "--per-row"))
    assert "| `--quick` |" not in tour
    graph = _row(demo, "--graph")
    assert "`auto`, `karate`, `sbm`" in graph and "`{auto,karate,sbm}`" in graph
    lang = _row(_section(page, "new-plugin"), "--lang")
    assert all(f"`{choice}`" in " ".join(lang) for choice in SUBS["new-plugin"]._option_string_actions["--lang"].choices)


def test_generating_imports_neither_torch_nor_jax(tmp_path: pathlib.Path) -> None:
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import cliref, pathlib; "
            "cliref.write_cli_reference(pathlib.Path(sys.argv[2])); "
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'jax', 'jaxlib')); "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code, str(ROOT / "docs" / "_ext"), str(tmp_path / "cli.md")],
                   check=True, cwd=ROOT, timeout=120)
    assert (tmp_path / "cli.md").read_text().startswith("(cli)=")
