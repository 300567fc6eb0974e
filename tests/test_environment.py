"""The on/off environment variables read one way (``settings.env_flag``): 1/true/yes/on and
0/false/no/off in any case; anything else stops the import naming the variable, so a
misspelt ``SPARSE_OPS_BOUNDSCHECK=ture`` never leaves the debug mode off unseen."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sparse_ops.settings import env_flag


@pytest.mark.parametrize("raw,expected", [("1", True), ("TRUE", True), (" yes ", True), ("On", True),
                                          ("0", False), ("false", False), ("No", False), ("off", False),
                                          ("", None)])
def test_the_spellings_of_on_and_off(monkeypatch, raw, expected):
    monkeypatch.setenv("SPARSE_OPS_TEST_SWITCH", raw)
    for default in (True, False):
        assert env_flag("SPARSE_OPS_TEST_SWITCH", default) is (default if expected is None else expected)


def test_another_value_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv("SPARSE_OPS_TEST_SWITCH", "ture")
    with pytest.raises(ValueError, match=r"SPARSE_OPS_TEST_SWITCH='ture': expected one of 1, true, yes, on"):
        env_flag("SPARSE_OPS_TEST_SWITCH", False)


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "SPARSE_OPS_DISABLE_PLUGIN_AUTOLOAD": "1", **env})


def test_the_library_switches_read_words_and_refuse_typos():
    """``true`` turns the debug mode on (it was read as off before), ``no`` keeps the
    fallback warning quiet, and a typo stops the import with the variable's name."""
    on = _run("import sparse_ops as so; print(so.settings.BOUNDSCHECK)", SPARSE_OPS_BOUNDSCHECK="true")
    assert on.returncode == 0 and on.stdout.split() == ["True"], on.stderr
    fallback = ("import warnings, sparse_ops as so; warnings.simplefilter('error'); x = so.array([[1.0, 2.0]]);"
                "print(so.elemwise_div(x.tostype('row_sparse'), x))")  # a densifying fallback
    assert "StorageFallbackWarning" in _run(fallback).stderr
    quiet = _run(fallback, SPARSE_OPS_STORAGE_FALLBACK_LOG_VERBOSE="no")
    assert quiet.returncode == 0, quiet.stderr
    typo = _run("import sparse_ops", SPARSE_OPS_BOUNDSCHECK="ture")
    assert typo.returncode != 0 and "SPARSE_OPS_BOUNDSCHECK='ture'" in typo.stderr
