"""The command line reference page, generated from the argument parser of ``sparse-ops``.

``sparse_ops.cli._parser()`` builds the parser the command runs, so the page says exactly
what the command accepts: the program's description and exit codes (from the module
docstring), then one section per subcommand, in the parser's order, with its help, its
usage line and a table of its arguments per argument group. ``sparse_ops.cli`` imports
neither torch nor jax, so this runs in any docs build.
"""
from __future__ import annotations

import argparse
import functools
import pathlib
import re

USAGE_WIDTH = 88  # usage lines wrap here, whatever the terminal of the build
MARKDOWN_SPECIALS = set("\\*_<>[]{}|$&#~%")


def _parser_parts(parser: argparse.ArgumentParser) -> tuple[
        list[tuple[str, str, argparse.ArgumentParser]], list[tuple[str, str, list[argparse.Action]]]]:
    """What argparse keeps in private attributes, read in this one place: the subcommands
    (name, help, subparser) in the order they were added, and the argument groups (title,
    description, actions) in the order of the parser's help."""
    commands: list[tuple[str, str, argparse.ArgumentParser]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            commands += [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    groups = [(g.title or "", g.description or "", list(g._group_actions)) for g in parser._action_groups]
    return commands, groups


def _inline(text: str) -> str:
    """Help text as inline Markdown: its `code` kept, ``--options`` set as code, every other
    character Markdown would read as markup escaped."""
    out = []
    for i, part in enumerate(re.split(r"(`[^`\n]+`)", " ".join(text.split()))):
        if i % 2:
            out.append(part)
            continue
        escaped = "".join("\\" + ch if ch in MARKDOWN_SPECIALS else ch for ch in part)
        out.append(re.sub(r"(?<![\w`-])(--[a-z][\w-]*)", r"`\1`", escaped))
    return "".join(out)


def _cell(text: str) -> str:
    """Help text for a table cell: pipes escaped inside code too (a row splits at every other)."""
    return re.sub(r"`[^`]*`", lambda m: m.group().replace("|", "\\|"), _inline(text))


def _help(action: argparse.Action, prog: str) -> str:
    """An action's help with argparse's ``%(default)s``-style fields filled in."""
    text = action.help or ""
    return text % dict(vars(action), prog=prog) if "%" in text else text


def _placeholder(action: argparse.Action) -> str:
    """What the argument's value looks like on the command line, as argparse prints it:
    ``NAME``, ``[PLUGIN]``, ``DTYPE [DTYPE ...]``, ``{auto,karate,sbm}``; empty for flags."""
    if action.nargs == 0:
        return ""
    if action.metavar is not None:
        name = str(action.metavar)
    elif action.choices is not None:
        name = "{" + ",".join(map(str, action.choices)) + "}"
    else:
        name = action.dest.upper() if action.option_strings else action.dest
    return {None: name, "?": f"[{name}]", "*": f"[{name} ...]", "+": f"{name} [{name} ...]",
            argparse.REMAINDER: "...", argparse.PARSER: f"{name} ..."}.get(
        action.nargs, " ".join([name] * action.nargs) if isinstance(action.nargs, int) else name)


def _default(action: argparse.Action) -> str:
    """The default of an argument taking a value, as one would type it; empty when none."""
    if action.nargs == 0 or action.default is None or action.default == argparse.SUPPRESS:
        return ""
    if isinstance(action.default, (list, tuple)):
        return " ".join(map(str, action.default))
    return str(action.default)


def _code(text: str) -> str:
    return f"`{text}`".replace("|", "\\|") if text else ""


def _table(actions: list[argparse.Action], prog: str) -> str:
    """A Markdown table of arguments; the Choices and Default columns only where one has them."""
    with_choices = any(a.choices for a in actions)
    with_default = any(_default(a) for a in actions)
    head = ["Argument", "Value"] + ["Choices"] * with_choices + ["Default"] * with_default + ["Description"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for a in actions:
        names = ", ".join(f"`{s}`" for s in a.option_strings) or f"`{a.dest}`"  # a positional: its name
        cells = [names, _code(_placeholder(a))]
        if with_choices:
            cells.append(", ".join(_code(str(c)) for c in a.choices or ()))
        if with_default:
            cells.append(_code(_default(a)))
        rows.append("| " + " | ".join(cells + [_cell(_help(a, prog))]) + " |")
    return "\n".join(rows)


def _command_md(name: str, help_text: str, sub: argparse.ArgumentParser, prog: str) -> str:
    """One subcommand's section: label, heading, help, description, usage, argument tables."""
    sub.formatter_class = functools.partial(sub.formatter_class, width=USAGE_WIDTH)
    out = [f"(cli-{name})=\n## `{prog} {name}`"]
    if help_text:
        out.append(_inline(help_text[:1].upper() + help_text[1:]) + ("" if help_text.endswith(".") else "."))
    if sub.description:
        out.append(_inline(sub.description))
    out.append(f"```text\n{sub.format_usage().strip()}\n```")
    for title, description, actions in _parser_parts(sub)[1]:
        actions = [a for a in actions if not isinstance(a, argparse._HelpAction) and a.help != argparse.SUPPRESS]
        if actions:
            caption = f"**{_inline(title[:1].upper() + title[1:])}**"
            out.append(caption + (f": {_inline(description)}" if description else ""))
            out.append(_table(actions, sub.prog))
    return "\n\n".join(out)


def _exit_codes(doc: str) -> list[tuple[str, str]]:
    """The exit codes the module docstring lists: ``Exit codes: 0 success, 1 failure.``"""
    m = re.search(r"Exit codes:\s*(.*?)\.(?:\s|$)", " ".join(doc.split()))
    pairs = [re.match(r"(\d+)\s+(.*)", item.strip()) for item in m.group(1).split(",")] if m else []
    return [(p.group(1), p.group(2)) for p in pairs if p]


def page() -> str:
    """The MyST Markdown of the command line reference."""
    from sparse_ops import cli

    parser, _ = cli._parser()
    doc = " ".join((cli.__doc__ or "").split())
    summary = re.sub(r"``([^`]+)``", r"`\1`", doc.split(" Exit codes:")[0])
    out = ["(cli)=\n# Command line reference",
           "Generated from the argument parser of `sparse-ops` (`python -m sparse_ops.cli`)."]
    if parser.description:
        out.append(_inline(parser.description[:1].upper() + parser.description[1:]) + ".")
    out.append(_inline(summary))
    codes = _exit_codes(doc)
    if codes:
        out.append("**Exit codes**\n\n| Code | Meaning |\n|---|---|\n"
                   + "\n".join(f"| `{code}` | {_cell(meaning)} |" for code, meaning in codes))
    out.append(f"Every command also takes `-h`, `--help`. Usage: `{parser.prog} COMMAND [options]`.")
    out += [_command_md(name, help_text, sub, parser.prog) for name, help_text, sub in _parser_parts(parser)[0]]
    return "\n\n".join(out) + "\n"


def write_cli_reference(out: pathlib.Path) -> None:
    """Write the command line reference page to ``out`` (MyST Markdown)."""
    out = pathlib.Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page(), encoding="utf-8")
