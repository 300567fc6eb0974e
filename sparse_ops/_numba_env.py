"""numba's environment for the bounds-checking debug mode (``SPARSE_OPS_BOUNDSCHECK=1``).

numba's on-disk cache key does not include the ``boundscheck`` flag: without care, a
bounds-checked process would load machine code compiled without checks (and a normal
process the slower checked code) from the same cache files. So in the debug mode:

- numba caches in a folder of its own: ``$NUMBA_CACHE_DIR/sparse_ops-boundscheck`` when the
  user set ``NUMBA_CACHE_DIR``, else ``$XDG_CACHE_HOME/sparse_ops/numba-boundscheck``
  (``~/.cache/...``), else one under the temporary folder; ``SPARSE_OPS_BOUNDSCHECK_CACHE_DIR``
  chooses another. A normal run never looks there.
- ``NUMBA_BOUNDSCHECK=1`` (unless the user set it) compiles every numba kernel of the
  process with bounds checks, plugins' plain ``numba.njit`` kernels included.

Both are numba environment variables, read when numba is imported: ``configure()`` runs
at the top of ``sparse_ops/__init__.py``, before anything imports numba, and again when
``sparse_ops.kernels`` loads (which also covers a numba the user imported first: numba
re-reads its environment then). Child processes inherit the settings.
"""
from __future__ import annotations

import os
import sys
from typing import Callable

SUBFOLDER = "sparse_ops-boundscheck"


# Set by sparse_ops.plugins (a hook from above): whether an installed distribution declares
# numba extensions (None: cannot tell). ``sparse_ops.kernels`` asks it so that numba, finding
# none, skips its own scan of every distribution's entry points (importlib.metadata).
has_numba_extensions: "Callable[[], bool | None] | None" = None

# False when no folder for bounds-checked kernels is writable: our jit then compiles
# without an on-disk cache rather than share numba's default folders (a warning says so).
CACHE_OK = True


def _writable(folder: str) -> bool:
    import tempfile  # here, not at the top: sparse_ops' import needs it only in the debug mode

    try:
        os.makedirs(folder, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError:
        return False
    return True


def boundscheck_cache_dir() -> str | None:
    """The folder numba caches bounds-checked kernels in (see the module docstring), or None
    when no candidate is writable."""
    chosen = os.environ.get("SPARSE_OPS_BOUNDSCHECK_CACHE_DIR")
    user = os.environ.get("NUMBA_CACHE_DIR")
    if chosen:
        candidates = [chosen]
    elif user and os.path.basename(os.path.normpath(user)) == SUBFOLDER:
        candidates = [user]  # set by a parent process in the debug mode: keep it
    elif user:
        candidates = [os.path.join(user, SUBFOLDER)]
    else:
        candidates = [user_cache_dir("numba-boundscheck")]
    return first_writable(candidates, SUBFOLDER)


def user_cache_dir(name: str) -> str:
    """``$XDG_CACHE_HOME/sparse_ops/<name>`` (``~/.cache/sparse_ops/<name>`` by default)."""
    home_cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(home_cache, "sparse_ops", name)


def first_writable(candidates: list[str], temp_name: str) -> str | None:
    """The first writable (created if need be) of ``candidates``, else ``<temp>/<temp_name>-<uid>``
    in the temporary folder; None when none is."""
    import tempfile

    uid = os.getuid() if hasattr(os, "getuid") else "user"
    for folder in [*candidates, os.path.join(tempfile.gettempdir(), f"{temp_name}-{uid}")]:
        if _writable(folder):
            return folder
    return None


def configure() -> None:
    """Set numba's environment for the debug mode (nothing in a normal run). Idempotent."""
    global CACHE_OK
    from .settings import BOUNDSCHECK

    if not BOUNDSCHECK:
        return
    os.environ.setdefault("NUMBA_BOUNDSCHECK", "1")
    folder = boundscheck_cache_dir()
    if folder is None:
        CACHE_OK = False
        import warnings

        warnings.warn("SPARSE_OPS_BOUNDSCHECK=1: no writable folder for a separate numba cache; "
                      "sparse_ops kernels compile without a disk cache, and other numba code with "
                      "cache=True may share cache files with unchecked runs", RuntimeWarning, stacklevel=2)
    elif os.environ.get("NUMBA_CACHE_DIR") != folder:
        os.environ["NUMBA_CACHE_DIR"] = folder
    numba = sys.modules.get("numba")
    if numba is not None:  # imported before sparse_ops: numba re-reads its environment
        numba.config.reload_config()
