"""Hostile names and paths for the command line: each refused with a non-zero exit and a
one-line message naming what was wrong, never a traceback; nothing half-written is left."""
from __future__ import annotations

import subprocess
import sys

import pytest


def _cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sparse_ops", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


def _one_line_refusal(done: subprocess.CompletedProcess, words: str) -> None:
    assert done.returncode != 0, done
    assert "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("sparse-ops") and words in last, done.stderr


def test_new_plugin_into_a_file_is_refused(tmp_path):
    f = tmp_path / "afile"
    f.write_text("keep me")
    _one_line_refusal(_cli("new-plugin", "x", "--dir", str(f)), "is not a folder")
    assert f.read_text() == "keep me"


def test_new_plugin_where_nothing_can_be_written_is_refused_leaving_nothing():
    _one_line_refusal(_cli("new-plugin", "x", "--dir", "/proc/self"), "cannot write the project into")


def test_new_plugin_into_a_non_empty_folder_overwrites_nothing(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "mine.txt").write_text("mine")
    _one_line_refusal(_cli("new-plugin", "x", "--dir", str(tmp_path)), "already exists and is not an empty folder")
    assert [p.name for p in (tmp_path / "x").iterdir()] == ["mine.txt"]


@pytest.mark.parametrize("name", ["class", "../x", "a b", "X", "1x", "x-y", "ä", ""])
def test_new_plugin_refuses_names_that_are_not_package_names(tmp_path, name):
    _one_line_refusal(_cli("new-plugin", name, "--dir", str(tmp_path)), "must be a lower-case Python identifier")
    assert not any(tmp_path.iterdir())


def test_new_plugin_with_a_name_too_long_for_the_file_system_is_refused(tmp_path):
    _one_line_refusal(_cli("new-plugin", "x" * 300, "--dir", str(tmp_path)), "File name too long")
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("args, words", [
    (("info", "no_such_op"), "no operator named 'no_such_op'"),
    (("info", "../../etc/passwd"), "no operator named"),
    (("check", "no_such_plugin"), "plugin 'no_such_plugin' is not loaded"),
    (("warmup", "--ops", "no_such_op"), "no operator no_such_op"),
    (("list", "--bogus"), "unrecognized arguments: --bogus"),
])
def test_unknown_names_are_named_in_one_line(args, words):
    _one_line_refusal(_cli(*args), words)
