"""Prints the op x face matrix after the run, and writes it as a Markdown table for the
docs when ``SPARSE_OPS_MATRIX_TABLE`` names a file."""
from __future__ import annotations

import collections
import os

import pytest

from op_face_matrix import CELLS, table


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not CELLS:
        return
    tr = terminalreporter
    tr.section("op x face matrix")
    faces = sorted({f for (_, f) in CELLS})
    counts = {f: collections.Counter(CELLS[(o, f2)].split(":")[0] for (o, f2) in CELLS if f2 == f) for f in faces}
    ops = len({o for (o, _) in CELLS})
    tr.write_line(f"{ops} ops, first sample each; cells pass / declared unsupported / FAIL:")
    for f in faces:
        c = counts[f]
        tr.write_line(f"  {f:14s} {c['pass']:4d} pass  {c['declared']:4d} declared  {c['FAIL']:4d} FAIL")
    for (o, f), cell in sorted(CELLS.items()):
        if cell.startswith("FAIL"):
            tr.write_line(f"  FAIL {o} / {f}: {cell[6:]}")
    path = os.environ.get("SPARSE_OPS_MATRIX_TABLE")
    if path:
        with open(path, "w") as fh:
            fh.write(table())
        tr.write_line(f"matrix written to {path}")
