"""The Sphinx extension of the sparse-ops documentation: generates the reference pages
(operators, API, C ABI, command line) into ``docs/reference/generated/`` before Sphinx reads
the sources, so the references follow the code on every build."""
from __future__ import annotations

import pathlib
import time
from typing import Any

import apiref

DOCS = pathlib.Path(__file__).resolve().parent.parent
GENERATED = DOCS / "reference" / "generated"
HEADER = DOCS.parent / "sdk" / "include" / "sparse_ops.h"


def generate(outdir: pathlib.Path = GENERATED) -> dict[str, float]:
    """Write every generated reference page under ``outdir``; seconds each generator took."""
    import cliref
    import cref
    import opref

    import sparse_ops

    sparse_ops.load_plugins()  # the cookbook's operators (and any installed plugin's) get pages too
    times = {}
    for what, make in (("operators", lambda: opref.write_op_pages(outdir / "ops")),
                       ("api", lambda: apiref.write_api_pages(outdir / "api")),
                       ("c-abi", lambda: cref.write_c_reference(HEADER, outdir / "c-abi.md")),
                       ("cli", lambda: cliref.write_cli_reference(outdir / "cli.md"))):
        start = time.perf_counter()
        make()
        times[what] = time.perf_counter() - start
    return times


def _on_builder_inited(app: Any) -> None:
    generate()


def setup(app: Any) -> dict[str, Any]:
    app.connect("builder-inited", _on_builder_inited)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
