"""What ``sparse-ops check X`` checks: a bare word is a plugin name (loaded, or installed under
the entry-point group), even when a folder of that name sits in the current folder; X is a
path only when written as one (``./x``, ``/abs/x``, ``x.py``) or given as ``--path X``."""
from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

import sparse_ops as so
from sparse_ops.cli import _looks_like_path, main


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def plugin(prefix: str, factor: float = 2.0) -> str:
    """A plugin module with one op, ``{prefix}_double``, its gradient (opcheck checks it) and its samples."""
    return textwrap.dedent(f"""
        import numpy as np
        import sparse_ops as so

        @so.register("{prefix}_double")
        class Double(so.Op):
            @so.kernel(device="cpu")
            def dense(self, ctx, x, y):
                y[...] = {factor} * x
            def gradient(self, out_grads, inputs, outputs):
                return [out_grads[0] * {factor}]
            @classmethod
            def samples(cls):
                return [[so.array(np.arange(3.0))]]
        """)


@pytest.fixture
def workdir(tmp_path, isolated, monkeypatch):
    """The current folder holds a plugin project ``ckt`` (as `sparse-ops new-plugin ckt` writes
    it, src layout) whose op differs from the installed plugin ``ckt`` on sys.path."""
    site = tmp_path / "site"
    write(site / "ckt" / "__init__.py", plugin("ckt_installed"))
    dist = site / "ckt-1.0.dist-info"
    write(dist / "METADATA", "Metadata-Version: 2.1\nName: ckt\nVersion: 1.0\n\n")
    write(dist / "entry_points.txt", f"[{so.plugins.ENTRY_POINT_GROUP}]\nckt = ckt\n")
    sys.path.insert(0, str(site))
    work = tmp_path / "work"
    write(work / "ckt" / "pyproject.toml", "[project]\nname = 'ckt'\n")
    write(work / "ckt" / "src" / "ckt" / "__init__.py", plugin("ckt_source"))
    write(work / "loose" / "__init__.py", plugin("ckt_loose"))
    monkeypatch.chdir(work)
    return work


@pytest.mark.parametrize("target, is_path", [
    ("myops", False), ("my_ops2", False), ("./myops", True), ("../myops", True), (".", True),
    ("/abs/myops", True), ("~/myops", True), ("dir/myops", True), ("myops.py", True),
])
def test_what_is_written_as_a_path(target, is_path):
    assert _looks_like_path(target) is is_path


def test_a_bare_name_is_the_installed_plugin_not_the_folder(workdir, capsys):
    assert main(["check", "ckt"]) == 0
    out = capsys.readouterr().out
    assert "checking plugin ckt" in out and "ok   ckt_installed_double: 1 samples" in out
    assert "ckt_source_double" not in so.list_ops()
    assert main(["check", "ckt"]) == 0  # already loaded: the same plugin again


def test_a_path_is_loaded_from_the_folder(workdir, capsys):
    assert main(["check", "./loose"]) == 0
    assert "ok   ckt_loose_double: 1 samples" in capsys.readouterr().out
    assert so.get_op("ckt_loose_double").plugin == "loose"


def test_dash_dash_path_takes_a_bare_folder_name_as_a_path(workdir, capsys):
    assert main(["check", "--path", "loose"]) == 0
    assert "ok   ckt_loose_double: 1 samples" in capsys.readouterr().out


def test_a_project_folder_path_loads_its_src_package(workdir, capsys):
    assert main(["check", str(workdir / "ckt")]) == 0
    assert "ok   ckt_source_double: 1 samples" in capsys.readouterr().out
    assert "ckt_installed_double" not in so.list_ops()


def test_a_name_that_is_only_a_folder_says_how_to_check_the_folder(workdir, capsys):
    assert main(["check", "loose"]) == 1
    err = capsys.readouterr().err
    assert "plugin 'loose' is not loaded: no entry point named 'loose'" in err
    assert "`sparse-ops check ./loose` or `sparse-ops check --path loose`" in err
    assert "ckt_loose_double" not in so.list_ops()


def test_a_name_and_a_path_together_or_neither_is_a_usage_error(workdir, capsys):
    for argv in (["check", "ckt", "--path", "loose"], ["check"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2 and "PLUGIN or --path X" in capsys.readouterr().err
