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

**The cache of the project's own kernels is keyed on every kernel source.** numba's cache
index checks only the file that defines a jitted function, but our kernels inline helpers
of other modules (``sdk/csr_cpu.py`` inlines ``kernels/chunks.py``, a generated row-kernel
driver pastes a body and calls its module's helpers): after an edit of a helper, a warm
cache kept running the old machine code. So ``install_cache_locator()`` (run when
``sparse_ops.kernels`` loads) puts a cache locator in front of numba's own for functions
defined in the project's packages (``sparse_ops``, ``sparse_ops.sdk``, ``sparse_ops.cuda``)
and in the generated row-kernel drivers: it caches them in a folder named by
``kernel_fingerprint()``, a hash of the contents of every module numba code of the
project lives in (``KERNEL_SOURCES``), ``$NUMBA_CACHE_DIR/sparse_ops-kernels-<fp>`` when
numba's cache folder is set (the debug mode's folder included, so bounds-checked code
stays apart), else ``$XDG_CACHE_HOME/sparse_ops/numba-kernels-<fp>``. Any change of any
of those sources gives a fresh folder. The hash is computed once per process, at the
first kernel compile or cache load (~25 files, ~150 kB: ~0.6 ms; ``import sparse_ops`` does not pay it).
Other numba code (the user's, plugins' own ``cache=True`` functions) keeps numba's locators.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Callable

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


# ---- numba's cache keyed on every kernel source (see the module docstring) ----------------------
# (package, glob relative to its folder): the modules holding numba code of the project, or
# helpers numba code inlines. The generated row-kernel drivers derive from these (the
# template is sdk/rowkernel.py's, the bodies' modules are hashed here or name the driver file).
KERNEL_SOURCES: tuple[tuple[str, str], ...] = (
    ("sparse_ops", "kernels/*.py"),
    ("sparse_ops", "jax/native*.py"),
    ("sparse_ops", "validation.py"),
    ("sparse_ops", "clib/trampoline.py"),
    ("sparse_ops", "clib/python.py"),
    ("sparse_ops.sdk", "rowkernel.py"),
    ("sparse_ops.sdk", "csr*.py"),
    ("sparse_ops.sdk", "groups.py"),
    ("sparse_ops.sdk", "launch.py"),
    ("sparse_ops.sdk", "cabi.py"),
    ("sparse_ops.cuda", "*.py"),
)
DRIVER_PREFIX = "sparse_ops_rowkernel_"  # file names of the generated drivers (sdk/rowkernel.py)

_fingerprint: str | None = None
_kernel_dir: "list[str | None]" = []  # [folder] once chosen (None: nowhere writable)


def package_dirs() -> dict[str, str]:
    """The folders of the project's packages that hold numba code, by package name."""
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    out = {"sparse_ops": here}
    for name in ("sparse_ops.sdk", "sparse_ops.cuda"):
        try:
            spec = importlib.util.find_spec(name)
        except ImportError:
            spec = None
        if spec is not None and spec.submodule_search_locations:
            out[name] = os.path.abspath(list(spec.submodule_search_locations)[0])
    return out


def kernel_source_files() -> list[str]:
    """Every file ``kernel_fingerprint`` hashes, sorted."""
    import glob

    dirs = package_dirs()
    files = {os.path.abspath(f) for package, pattern in KERNEL_SOURCES if package in dirs
             for f in glob.glob(os.path.join(dirs[package], pattern))}
    return sorted(files)


def compute_fingerprint() -> str:
    """A hash of the contents (and package-relative names) of ``kernel_source_files()``."""
    import hashlib

    dirs = package_dirs()
    h = hashlib.sha256()
    for path in kernel_source_files():
        rel = next((f"{pkg}:{os.path.relpath(path, d)}" for pkg, d in dirs.items()
                    if os.path.dirname(path).startswith(d)), path)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            data = b"<unreadable>"
        h.update(rel.encode() + b"\0" + len(data).to_bytes(8, "little") + data)
    return h.hexdigest()[:16]


def kernel_fingerprint() -> str:
    """``compute_fingerprint()``, once per process."""
    global _fingerprint
    if _fingerprint is None:
        _fingerprint = compute_fingerprint()
    return _fingerprint


def kernel_cache_dir() -> str | None:
    """The folder numba caches the project's kernels in (chosen once per process; see the
    module docstring), or None when none is writable (numba's own locators then)."""
    if not _kernel_dir:
        name = f"kernels-{kernel_fingerprint()}"
        user = os.environ.get("NUMBA_CACHE_DIR")
        candidates = [os.path.join(user, f"sparse_ops-{name}") if user else user_cache_dir(f"numba-{name}")]
        _kernel_dir.append(first_writable(candidates, f"sparse_ops-numba-{name}"))
    return _kernel_dir[0]


def is_kernel_file(py_file: str) -> bool:
    """Whether numba code in ``py_file`` is the project's: a module of its packages or a
    generated row-kernel driver."""
    if os.path.basename(py_file).startswith(DRIVER_PREFIX):
        return True
    path = os.path.abspath(py_file)
    return any(path.startswith(d + os.sep) for d in _project_dirs())


_dirs_cache: list[str] = []


def _project_dirs() -> list[str]:
    if not _dirs_cache:
        _dirs_cache.extend(package_dirs().values())
    return _dirs_cache


_LOCATOR: Any = None


def cache_locator_class() -> Any:
    """numba's cache locator for the project's kernels (made once; imports numba)."""
    global _LOCATOR
    if _LOCATOR is not None:
        return _LOCATOR
    from numba.core import caching

    class SparseOpsKernelLocator(caching._SourceFileBackedLocatorMixin, caching._CacheLocator):
        """Caches the project's kernels in ``kernel_cache_dir()``, stamped with the defining
        file's own stamp and ``kernel_fingerprint()``."""

        def __init__(self, py_func: Any, py_file: str) -> None:
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            self._cache_path = os.path.join(kernel_cache_dir(), self.get_suitable_cache_subpath(py_file))

        def get_cache_path(self) -> str:
            return self._cache_path

        def get_source_stamp(self) -> Any:
            return super().get_source_stamp(), kernel_fingerprint()

        @classmethod
        def from_function(cls, py_func: Any, py_file: str) -> Any:
            if not is_kernel_file(py_file) or kernel_cache_dir() is None:
                return None
            return super().from_function(py_func, py_file)

    _LOCATOR = SparseOpsKernelLocator
    return _LOCATOR


def install_cache_locator() -> None:
    """Put ``cache_locator_class()`` first among numba's cache locators. Idempotent; does
    nothing when numba has no such list (another numba layout)."""
    from numba.core import caching

    impl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None)
    classes = getattr(impl, "_locator_classes", None)
    if not isinstance(classes, list):
        return
    locator = cache_locator_class()
    if locator not in classes:
        classes.insert(0, locator)
