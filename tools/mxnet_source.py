"""Reading MXNet's own files for the runners: a file of an MXNet git directory (or checkout)
at a tag, and the one rewriting applied to it, of its import lines.

``import mxnet as mx`` becomes ``import sparse_ops.compat.mxnet as mx``; ``from mxnet[.sub]
import names`` becomes ``from sparse_ops.compat.mxnet[.sub] import names``; ``import
mxnet.sub as x`` becomes ``import sparse_ops.compat.mxnet.sub as x``; and ``import
mxnet.sub`` (which binds the name ``mxnet``) binds ``mxnet`` to the face and imports the
submodule; a bare ``import mxnet`` binds ``mxnet`` to the face. Nothing else of a file changes.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

_IMPORT = re.compile(r"^([ \t]*)import mxnet as mx(?=[ \t]*(#.*)?$)")
_FROM = re.compile(r"^(\s*)from mxnet((?:\.\w+)*) import ")
_IMPORT_SUB_AS = re.compile(r"^(\s*)import mxnet((?:\.\w+)+) as ")
_IMPORT_SUB = re.compile(r"^(\s*)import mxnet((?:\.\w+)+)[ \t]*$")
_IMPORT_BARE = re.compile(r"^([ \t]*)import mxnet(?=[ \t]*(#.*)?$)")


def rewrite_imports(source: str) -> tuple[str, int]:
    """``source`` with its MXNet import lines pointed at the compat face, and how many changed."""
    out, n = [], 0
    for line in source.splitlines(keepends=True):
        new = _IMPORT.sub(r"\1import sparse_ops.compat.mxnet as mx", line)
        if new == line:
            new = _FROM.sub(r"\1from sparse_ops.compat.mxnet\2 import ", line)
        if new == line:
            new = _IMPORT_SUB_AS.sub(r"\1import sparse_ops.compat.mxnet\2 as ", line)
        if new == line:  # `import mxnet.sub` binds the name mxnet: bind it to the face
            new = _IMPORT_SUB.sub(r"\1import sparse_ops.compat.mxnet as mxnet, sparse_ops.compat.mxnet\2", line)
        if new == line:
            new = _IMPORT_BARE.sub(r"\1import sparse_ops.compat.mxnet as mxnet", line)
        n += new != line
        out.append(new)
    return "".join(out), n


def read_source(root: Path, tag: str, path: str) -> str:
    """File ``path`` of MXNet at ``tag``: through git when ``root`` is a git directory, else
    from the checkout's files."""
    is_git = subprocess.run(["git", "-C", str(root), "rev-parse", "--git-dir"],
                            capture_output=True, text=True).returncode == 0
    if is_git:
        r = subprocess.run(["git", "-C", str(root), "show", f"{tag}:{path}"], capture_output=True, text=True)
        if r.returncode == 0:
            return r.stdout
        if not (root / path).is_file():
            raise SystemExit(f"cannot read {path} at {tag} from {root}: {r.stderr.strip()}")
    return (root / path).read_text()
