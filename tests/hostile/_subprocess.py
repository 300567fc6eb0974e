"""Run a hostile case in a fresh interpreter, so that a crash (a signal, an abort) is a
recorded failure of that case rather than the end of the test run."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

_RUNNER = """
import json, sys, traceback
def _report(outcome, error=None, message=""):
    print("\\n@@RESULT@@" + json.dumps({"outcome": outcome, "error": error, "message": message}))
try:
{body}
except BaseException as exc:  # the case's own refusal: reported, judged by the test
    _report("raised", type(exc).__name__, str(exc))
else:
    _report("returned")
"""


def run_case(code: str, timeout: float = 300, env: dict | None = None) -> dict:
    """``code`` run in a fresh Python: {"outcome": "returned" | "raised" | "crashed",
    "error": the exception's class name, "message": its text (or the crash's stderr),
    "stdout": what it printed}."""
    body = textwrap.indent(textwrap.dedent(code), "    ")
    done = subprocess.run([sys.executable, "-"], input=_RUNNER.replace("{body}", body), capture_output=True,
                          text=True, timeout=timeout, env=env)
    out, _, result = done.stdout.rpartition("\n@@RESULT@@")
    if done.returncode != 0 or not result:
        return {"outcome": "crashed", "error": f"exit {done.returncode}", "message": done.stderr[-2000:],
                "stdout": done.stdout}
    return {**json.loads(result), "stdout": out}
