"""Plugins: Python packages that register operators, loaded by name and in isolation.

A plugin is a module that registers ops with ``@sparse_ops.register``. It arrives as

- an installed distribution declaring an entry point in the group ``sparse_ops.plugins``
  (``[project.entry-points."sparse_ops.plugins"] myops = "myops"``), loaded by
  ``load_plugins()`` and at ``import sparse_ops`` unless ``SPARSE_OPS_DISABLE_PLUGIN_AUTOLOAD=1``;
- a ``.py`` file or package folder loaded at run time by ``sparse_ops.library.load(path)``.

The entry point names a module (importing it registers the ops) or a callable in one
(``"myops.ops:setup"``, called once without arguments after the import). The plugin may
declare the SDK versions it supports as a module constant, ``SPARSE_OPS_SDK = ">=0.1,<0.2"``
(``>=``, ``>``, ``<=``, ``<``, ``==``, ``!=`` joined by commas), checked against
``sparse_ops.sdk.SDK_VERSION`` before the module runs when the constant can be read from
its source, and after the import in any case.

Isolation: every plugin loads under its own name. One that fails to import, raises while
registering, takes an op name another plugin owns or declares an SDK range we do not
satisfy is reported by name (a ``PluginWarning`` from ``load_plugins``, a ``PluginError``
from ``library.load``, and in ``plugins_info()``); the ops it registered before failing are
removed again (``registry.snapshot`` before, ``registry.restore`` of its names after), and
the other plugins load regardless.

Editing: ``library.load`` of a file or folder whose source changed since it was loaded is
refused with a pointer to ``library.reload``, which imports it again and replaces exactly
that plugin's ops (keeping the loaded version if the new code fails). ``library.reload``
also takes the module file or package folder of a plugin loaded through its entry point
(an editable install, ``pip install -e``): it runs the entry point again. Importing a
plugin's module again (``importlib.reload``) is refused instead, with that pointer: its ops
belong to the plugin.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import re
import sys
import threading
import traceback
import warnings
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable, Iterable

from . import _numba_env, registry
from .errors import OperatorError
from .registry import Owner
from .settings import env_flag

ENTRY_POINT_GROUP = "sparse_ops.plugins"
AUTOLOAD_DISABLE_ENV = "SPARSE_OPS_DISABLE_PLUGIN_AUTOLOAD"


class PluginError(OperatorError):
    """A plugin could not be loaded; the message names the plugin and the reason."""


class PluginWarning(UserWarning):
    """``load_plugins`` skipped a plugin that failed; the message names it and says why."""


@dataclass
class _Record:
    name: str
    source: str
    version: str | None = None
    sdk: str | None = None
    error: str | None = None
    details: str | None = None  # the traceback of a failure
    module: ModuleType | None = field(default=None, repr=False)
    origin: str | None = None  # resolved path for library.load, to recognise a second load
    fingerprint: str | None = None  # of its source files (library.load), to notice an edit
    owner: Owner | None = None  # what its ops' registrations are attributed to
    entry_point: EntryPoint | None = None  # how it was loaded, for a plugin installed under the group


_LOADED: dict[str, _Record] = {}
_FAILED: dict[str, _Record] = {}
_LOCK = threading.RLock()  # re-entrant: a plugin may load another while it loads


# ---- SDK version ranges ------------------------------------------------------------------------
_CLAUSE = re.compile(r"\s*(>=|<=|==|!=|>|<)\s*(\d+(?:\.\d+)*)\s*$")


def _version_tuple(text: str) -> tuple[int, ...]:
    if not re.fullmatch(r"\d+(?:\.\d+)*", text.strip()):
        raise ValueError(f"not a version: {text!r}")
    parts = [int(p) for p in text.strip().split(".")]
    while len(parts) > 1 and parts[-1] == 0:  # 0.1 == 0.1.0
        parts.pop()
    return tuple(parts)


def sdk_satisfies(spec: str, version: str | None = None) -> bool:
    """Whether ``version`` (default: ``sparse_ops.sdk.SDK_VERSION``) meets ``spec``, a
    comma-separated list of clauses such as ``">=0.1,<0.2"``. Raises ValueError for a
    malformed spec. (``packaging`` is not a dependency, so this is a small comparator.)"""
    if version is None:
        from .sdk import SDK_VERSION as version
    have = _version_tuple(version)
    clauses = [c for c in spec.split(",") if c.strip()]
    if not clauses:
        raise ValueError(f"empty SDK version range {spec!r}")
    for clause in clauses:
        m = _CLAUSE.fullmatch(clause)
        if m is None:
            raise ValueError(f"bad clause {clause.strip()!r} in SDK version range {spec!r} "
                             f"(expected e.g. '>=0.1,<0.2')")
        op, want = m.group(1), _version_tuple(m.group(2))
        ok = {">=": have >= want, "<=": have <= want, ">": have > want, "<": have < want,
              "==": have == want, "!=": have != want}[op]
        if not ok:
            return False
    return True


_DECLARATION = re.compile(r"^SPARSE_OPS_SDK\s*(?::[^=]*)?=\s*([\"'])([^\"'\n]*)\1\s*(?:#.*)?$", re.MULTILINE)


def _declared_in_source(path: str | None) -> str | None:
    """The ``SPARSE_OPS_SDK = "..."`` literal of a module's source, read without running it."""
    if not path or not path.endswith(".py"):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            m = _DECLARATION.search(f.read())
    except (OSError, UnicodeDecodeError):
        return None
    return m.group(2) if m else None


def _check_sdk(name: str, spec: Any) -> None:
    from .sdk import SDK_VERSION

    if not isinstance(spec, str):
        raise PluginError(f"plugin {name!r}: SPARSE_OPS_SDK must be a string such as '>=0.1,<0.2', "
                          f"got {spec!r}")
    try:
        ok = sdk_satisfies(spec, SDK_VERSION)
    except ValueError as exc:
        raise PluginError(f"plugin {name!r}: {exc}") from None
    if not ok:
        raise PluginError(f"plugin {name!r} supports sparse_ops SDK {spec}, but this is SDK {SDK_VERSION}")


# ---- loading one plugin, with roll-back ------------------------------------------------------------
def _rollback(name: str, saved: registry.Snapshot, modules_before: set, packages: Iterable[str]) -> None:
    """Undo a failed load of plugin ``name``: its ops as they were at ``saved`` (the ones it added
    removed, the ones it replaced restored, generated functions with them; other plugins' ops
    untouched) and its half-imported modules forgotten."""
    registry.restore(saved, plugin_ops(name))
    for pkg in packages:
        for mod in [m for m in sys.modules if (m == pkg or m.startswith(pkg + ".")) and m not in modules_before]:
            sys.modules.pop(mod, None)


def _adopt(owner: Owner, module: ModuleType) -> None:
    """Attribute to the plugin the ops its module registered before, as user code (a plain
    ``import`` of the module before the plugin was loaded)."""
    prefix = module.__name__
    for opdef in registry.all_ops():
        was = registry.owner_of(opdef.name)
        if was.kind == "user" and (was.where == prefix or was.where.startswith(prefix + ".")):
            registry.set_owner(opdef.name, owner)


def _load(owner: Owner, source: str, run: Callable[[], ModuleType], module_name: str, version: str | None = None,
          source_path: str | None = None, origin: str | None = None) -> _Record:
    """Run ``run`` (which imports module ``module_name`` of the plugin and returns it) with
    registrations attributed to ``owner``; on any failure roll back and raise PluginError."""
    name = owner.plugin
    record = _Record(name=name, source=source, version=version, origin=origin, owner=owner)
    with _LOCK:
        saved = registry.snapshot()
        builtins = {n for n in registry.list_ops() if registry.owner_of(n).kind == "built-in"}
        modules_before = set(sys.modules)
        packages = {name, module_name.partition(".")[0]}  # where its half-imported modules would be
        try:
            with registry.registering_as(owner):
                declared = _declared_in_source(source_path)
                if declared is not None:
                    _check_sdk(name, declared)  # refuse before running any of its code
                module = run()
            declared = getattr(module, "SPARSE_OPS_SDK", None)
            if declared is not None:
                _check_sdk(name, declared)
                record.sdk = declared
        except KeyboardInterrupt:  # the user's, not the plugin's: roll back and let it stop the process
            _rollback(name, saved, modules_before, packages)
            raise
        except BaseException as exc:  # a plugin must never take the process down (sys.exit, a test
            # framework's skip or exit raised at import time, its own BaseException subclasses)
            _rollback(name, saved, modules_before, packages)
            own = isinstance(exc, PluginError) and str(exc).startswith(f"plugin {name!r}")  # our SDK check
            reason = str(exc) if own else f"{type(exc).__name__}: {exc}"
            record.error = reason
            record.details = "".join(traceback.format_exception(exc))
            _FAILED[name] = record
            if own:
                raise
            raise PluginError(f"plugin {name!r} failed to load: {reason}") from exc
        _adopt(owner, module)
        record.module = module
        replaced = sorted(n for n in builtins if registry.owner_of(n).plugin == name)
        if replaced:  # allowed (replace=True), and felt by every caller in the process: said once, here
            warnings.warn(f"plugin {name!r} replaced the built-in operator(s) {', '.join(map(repr, replaced))} "
                          "(register(..., replace=True)): every call of them in this process now runs the plugin's",
                          PluginWarning, stacklevel=3)
        if record.version is None:
            v = getattr(module, "__version__", None)
            record.version = str(v) if v is not None else None
        _FAILED.pop(name, None)
        _LOADED[name] = record
        return record


# ---- entry points ------------------------------------------------------------------------------
@dataclass
class EntryPoint:
    """One plugin entry point: ``name = value`` in the group, from distribution ``dist``."""

    name: str
    value: str
    dist: str | None = None
    version: str | None = None

    @property
    def module(self) -> str:
        return self.value.split("[")[0].partition(":")[0].strip()

    def load(self) -> Any:
        """Import the module and return the object the value names (the module itself when
        the value has no ``:attr`` part)."""
        obj = importlib.import_module(self.module)
        attr = self.value.partition(":")[2].split("[")[0].strip()
        for part in attr.split(".") if attr else ():
            obj = getattr(obj, part)
        return obj


def _normalize(dist: str) -> str:
    return re.sub(r"[-_.]+", "_", dist).lower()


def _parse_group(text: str, group: str = ENTRY_POINT_GROUP) -> list[tuple[str, str]]:
    """(name, value) pairs of the ``[group]`` section of an entry_points.txt."""
    pairs, inside = [], False
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            inside = line == f"[{group}]"
        elif inside and "=" in line:
            name, _, value = line.partition("=")
            pairs.append((name.strip(), value.strip()))
    return pairs


def _name_and_version(folder: str) -> tuple[str | None, str | None]:
    """``Name`` and ``Version`` from a distribution's METADATA (or an egg's PKG-INFO) headers."""
    name = version = None
    for file in ("METADATA", "PKG-INFO"):
        try:
            with open(os.path.join(folder, file), encoding="utf-8") as f:
                for line in f:
                    if line.startswith("Name:"):
                        name = line.partition(":")[2].strip()
                    elif line.startswith("Version:"):
                        version = line.partition(":")[2].strip()
                    elif not line.strip():
                        break  # end of the headers
        except (OSError, UnicodeDecodeError):
            continue
        break
    return name, version


def _reads_sys_path(finder: object) -> bool:
    """Whether a distribution finder only reads ``sys.path`` folders, as our scan does: the
    ``importlib_metadata`` backport's (which Dask and others import) installs one."""
    cls = type(finder)
    return cls.__module__ == "importlib_metadata" and cls.__name__ == "MetadataPathFinder"


def _scan_entry_points(group: str = ENTRY_POINT_GROUP) -> list[EntryPoint] | None:
    """The entry points of ``group`` (ours by default), read straight from the ``*.dist-info`` / ``*.egg-info``
    folders on ``sys.path`` (the first distribution of a name wins, as with
    ``importlib.metadata``); None when that cannot be exact (a zip archive on the path, or
    a custom distribution finder), so that ``importlib.metadata`` answers instead.

    Why not ``importlib.metadata`` always: importing it pulls in email, zipfile and csv, a
    large share of ``import sparse_ops``'s time, while this reads a few small files.
    """
    from importlib.machinery import PathFinder

    for finder in sys.meta_path:
        if finder is not PathFinder and hasattr(finder, "find_distributions") and not _reads_sys_path(finder):
            return None
    header = f"[{group}]"
    found: list[EntryPoint] = []
    seen: set[str] = set()
    for entry in sys.path:
        if not isinstance(entry, str):
            continue
        egg = entry.lower().endswith(".egg")
        try:
            with os.scandir(entry or ".") as it:
                children = sorted(it, key=lambda c: c.name)
        except NotADirectoryError:
            return None  # a zip archive: let importlib.metadata look inside
        except OSError:
            continue
        for child in children:
            low = child.name.lower()
            if low.endswith((".dist-info", ".egg-info")):
                dist = child.name.rpartition(".")[0].partition("-")[0]
            elif egg and low == "egg-info":
                dist = os.path.basename(entry).rpartition(".")[0].partition("-")[0]
            else:
                continue
            key = _normalize(dist)
            if key in seen:
                continue
            seen.add(key)
            try:
                with open(os.path.join(child.path, "entry_points.txt"), encoding="utf-8") as f:
                    text = f.read()
            except (OSError, UnicodeDecodeError):
                continue
            if header not in text:
                continue
            name, version = _name_and_version(child.path)
            found += [EntryPoint(n, v, name or dist, version) for n, v in _parse_group(text, group)]
    return found


def _has_numba_extensions() -> bool | None:
    """Whether an installed distribution declares a ``numba_extensions`` entry point named
    ``init`` (what numba runs at its first compile); None when the scan cannot tell."""
    found = _scan_entry_points("numba_extensions")
    return None if found is None else any(ep.name == "init" for ep in found)


_numba_env.has_numba_extensions = _has_numba_extensions  # the hook numba's start asks (sparse_ops.kernels)


def _entry_points() -> list[EntryPoint]:
    """The ``sparse_ops.plugins`` entry points of the installed distributions."""
    found = _scan_entry_points()
    if found is not None:
        return found
    from importlib.metadata import entry_points

    out = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(ep, "dist", None)
        out.append(EntryPoint(ep.name, ep.value, dist.metadata["Name"] if dist is not None else None,
                              getattr(dist, "version", None)))
    return out


def _load_entry_point(ep: EntryPoint) -> _Record:
    source = f"entry point {ep.value!r}" + (f" of {ep.dist} {ep.version or ''}".rstrip() if ep.dist else "")
    module_name = ep.module
    source_path = None
    if "." not in module_name:  # find_spec of a dotted name would import its parents
        try:
            spec = importlib.util.find_spec(module_name)
            source_path = spec.origin if spec is not None else None
        except (ImportError, ValueError):
            source_path = None

    def run() -> ModuleType:
        obj = ep.load()
        if callable(obj) and not isinstance(obj, (ModuleType, type)):
            obj()  # a set-up hook: "pkg.mod:setup"
        return sys.modules[module_name]

    record = _load(Owner("plugin", ep.name, where=source), source, run, module_name, version=ep.version,
                   source_path=source_path)
    record.entry_point = ep
    return record


def load_plugins(names: Iterable[str] | None = None) -> dict[str, dict[str, dict[str, Any]]]:
    """Load the plugins installed under the entry-point group ``sparse_ops.plugins``: all
    of them, or only those in ``names`` (a deployment's allow-list; run with
    ``SPARSE_OPS_DISABLE_PLUGIN_AUTOLOAD=1`` so nothing else loads at import).

    A plugin that fails (import error, error while registering, an op name another plugin
    owns, an SDK range we do not satisfy, or a requested name that is not installed) is
    skipped with a ``PluginWarning`` naming it; the others load regardless. Plugins already
    loaded are left as they are. Returns ``plugins_info()``.
    """
    wanted = None if names is None else ([names] if isinstance(names, str) else list(names))
    with _LOCK:
        eps = _entry_points()
        by_name: dict[str, Any] = {}
        for ep in eps:
            by_name.setdefault(ep.name, ep)  # the first on sys.path wins, as for imports
        for plugin in (wanted if wanted is not None else list(by_name)):
            if plugin in _LOADED:
                continue
            ep = by_name.get(plugin)
            if ep is None:
                installed = ", ".join(sorted(by_name)) or "none"
                reason = (f"no entry point named {plugin!r} in group {ENTRY_POINT_GROUP!r} "
                          f"(installed plugins: {installed})")
                _FAILED[plugin] = _Record(name=plugin, source="-", error=reason)
                warnings.warn(f"sparse_ops: plugin {plugin!r} not loaded: {reason}", PluginWarning, stacklevel=2)
                continue
            try:
                _load_entry_point(ep)
            except PluginError:
                warnings.warn(f"sparse_ops: plugin {plugin!r} not loaded: {_FAILED[plugin].error}",
                              PluginWarning, stacklevel=2)
    return plugins_info()


def autoload_disabled() -> bool:
    """Whether ``SPARSE_OPS_DISABLE_PLUGIN_AUTOLOAD`` is on (``settings.env_flag``)."""
    return env_flag(AUTOLOAD_DISABLE_ENV, False)


def autoload() -> None:
    """What ``import sparse_ops`` runs: ``load_plugins()``, unless
    ``SPARSE_OPS_DISABLE_PLUGIN_AUTOLOAD=1``; never lets an error escape the import."""
    if autoload_disabled():
        return
    try:
        load_plugins()
    except Exception as exc:  # broken metadata, say: report it, keep the import working
        warnings.warn(f"sparse_ops: plugin discovery failed: {type(exc).__name__}: {exc}", PluginWarning,
                      stacklevel=2)


# ---- run-time loading from a path ----------------------------------------------------------------
@dataclass
class _Target:
    """What a path given to ``library.load`` / ``library.reload`` names."""

    path: str  # the absolute path as given
    file: str  # the module's file: the .py file or the package's __init__.py
    search: list[str] | None  # the package folder, for its submodules (None for a file)
    name: str  # the plugin's name, which is also its module name
    origin: str  # realpath of ``file``, to recognise the same plugin loaded again
    shared: bool = False  # a C library (sparse_ops.h), not Python

    def sources(self) -> list[str]:
        """The plugin's source files: the file, or every .py file of the package folder."""
        if self.search is None:
            return [self.file]
        return sorted(os.path.join(folder, f) for folder, _, names in os.walk(self.search[0])
                      for f in names if f.endswith(".py") and "__pycache__" not in folder)

    def fingerprint(self) -> str:
        """A hash of the plugin's source files (content, not times: an edit is an edit)."""
        digest = hashlib.sha256()
        for f in self.sources():
            # by real paths: the same files reached through a symlink are the same plugin
            digest.update(os.path.relpath(os.path.realpath(f), os.path.dirname(self.origin)).encode() + b"\0")
            try:
                with open(f, "rb") as handle:
                    digest.update(handle.read())
            except OSError:
                digest.update(b"(unreadable)")
        return digest.hexdigest()


def _locate(path: str | os.PathLike, name: str | None) -> _Target:
    """Resolve a ``.py`` file, a package folder or a project folder (NAME/ or src/NAME/ inside)."""
    p = os.path.abspath(os.fspath(path))
    if os.path.isdir(p) and not os.path.isfile(os.path.join(p, "__init__.py")):
        # a project folder (as `sparse-ops new-plugin` writes): its package is NAME/ or src/NAME/
        base = os.path.basename(p.rstrip(os.sep))
        for inner in (os.path.join(p, base), os.path.join(p, "src", base)):
            if os.path.isfile(os.path.join(inner, "__init__.py")):
                p = inner
                break
    if os.path.isdir(p):
        init = os.path.join(p, "__init__.py")
        if not os.path.isfile(init):
            raise PluginError(f"cannot load plugin from {p}: a package folder needs an __init__.py")
        file, search = init, [p]
        default_name = os.path.basename(p.rstrip(os.sep))
    elif os.path.isfile(p):
        if _is_shared_library(p):
            from .clib.load import default_name as library_name

            name = name or library_name(p)
            if not name.isidentifier():
                raise PluginError(f"cannot load library {p}: {name!r} is not a valid plugin name (pass name=...)")
            return _Target(p, p, None, name, os.path.realpath(p), shared=True)
        if not p.endswith(".py"):
            raise PluginError(f"cannot load plugin from {p}: expected a .py file, a package folder or a shared "
                              f"library (.so, .dylib, .dll)")
        file, search = p, None
        default_name = os.path.basename(p)[:-3]
    else:
        raise PluginError(f"cannot load plugin from {p}: no such file or folder")
    name = name or default_name
    if not name.isidentifier():
        raise PluginError(f"cannot load plugin from {p}: {name!r} is not a valid module name (pass name=...)")
    return _Target(p, file, search, name, os.path.realpath(file))


def _loads_file(record: _Record, origin: str) -> bool:
    """Whether the loaded plugin ``record`` is the module in file ``origin`` (loaded from that
    path, or through an entry point whose module is that file, as after ``pip install -e``)."""
    if record.module is None:
        return False
    if record.origin is not None:
        return record.origin == origin
    file = getattr(record.module, "__file__", None)
    return file is not None and os.path.realpath(file) == origin


def _is_shared_library(path: str) -> bool:
    base = os.path.basename(path)
    return base.endswith((".so", ".dylib", ".dll")) or ".so." in base


def _open_library(target: _Target) -> ModuleType:
    """Register the ops of the C library ``target`` names; a module object stands for it
    (``library`` is the ``sparse_ops.clib.load.Library``, ``__version__`` its version string)."""
    from .clib.load import open_library

    module = ModuleType(f"sparse_ops.clib.libraries.{target.name}", f"C operator library {target.path}")
    module.__file__ = target.file
    module.library = open_library(target.file, module.__name__)
    module.__version__ = module.library.version
    return module


def _import_target(target: _Target) -> ModuleType:
    """Execute the plugin's module (or adopt it when a plain import loaded it already)."""
    name = target.name
    if target.shared:
        return _open_library(target)
    if name in sys.modules:  # imported plainly before: adopt its ops
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, target.file, submodule_search_locations=target.search)
    if spec is None or spec.loader is None:
        raise PluginError(f"cannot load plugin {name!r} from {target.path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _load_target(target: _Target) -> ModuleType:
    owner = Owner("library", target.name, where=target.path)
    fingerprint = target.fingerprint()
    record = _load(owner, target.path, lambda: _import_target(target), target.name, source_path=target.file,
                   origin=target.origin)
    record.fingerprint = fingerprint
    return record.module


def load_path(path: str | os.PathLike, name: str | None = None) -> ModuleType:
    """Load a plugin from a ``.py`` file or a package folder (with ``__init__.py``); see
    ``sparse_ops.library.load``."""
    asked = name
    target = _locate(path, name)
    name = target.name
    with _LOCK:
        done = _LOADED.get(name)
        if done is None or not _loads_file(done, target.origin):
            # the same file reached by another path (a symlink): the module loaded first, as
            # for the same path (its init must not run twice); another name= is refused below
            done = next((r for r in _LOADED.values() if r.origin is not None and r.origin == target.origin), done)
        if done is not None:
            if not _loads_file(done, target.origin):
                raise PluginError(f"plugin {name!r} is already loaded from {done.source}; "
                                  f"cannot load another one of that name from {target.path}")
            if asked is not None and done.name != asked:  # name= asks for another name than its ops carry
                raise PluginError(f"{target.path} is already loaded as plugin {done.name!r}; its ops keep that name "
                                  f"(load it once, under one name), so it cannot be loaded as {name!r}")
            if done.fingerprint is not None and done.fingerprint != target.fingerprint():
                raise PluginError(f"plugin {name!r}: {target.path} changed since it was loaded; "
                                  f"sparse_ops.library.reload({os.fspath(path)!r}) loads the new code "
                                  f"(library.load keeps the version loaded first)")
            return done.module  # loading twice is a no-op, as importing twice is
        existing = None if target.shared else sys.modules.get(name)
        if existing is not None:
            efile = getattr(existing, "__file__", None)
            if efile is None or os.path.realpath(efile) != target.origin:
                raise PluginError(f"cannot load plugin {name!r} from {target.path}: a different module named "
                                  f"{name!r} is already imported{f' (from {efile})' if efile else ''}")
        return _load_target(target)


def _forget_bytecode(target: _Target) -> None:
    """Delete the cached bytecode of the plugin's files: Python trusts a ``.pyc`` whose source
    has the same size and modification second, so an edit made within a second of the last
    import (``2.0`` -> ``9.0``) would otherwise reload the old code."""
    for source in [] if target.shared else target.sources():
        try:
            os.remove(importlib.util.cache_from_source(source))
        except (OSError, NotImplementedError, ValueError):
            pass  # nothing cached (or a read-only cache folder, where Python decides as it always does)


def _loaded_from(target: _Target) -> _Record | None:
    """The loaded plugin whose code ``target`` names: the one ``library.load`` loaded from that
    path, else one loaded through its entry point whose module is that file or package (an
    editable install); None if neither is loaded."""
    done = _LOADED.get(target.name)
    if done is not None and done.origin == target.origin:
        return done
    return next((r for r in _LOADED.values() if r.entry_point is not None and _loads_file(r, target.origin)), None)


def reload_path(path: str | os.PathLike, name: str | None = None) -> ModuleType:
    """Import again a plugin loaded from ``path``, replacing exactly its ops: those it still
    defines get the new code, those it no longer defines are removed, other owners' ops are
    untouched. ``path`` is what ``library.load`` loaded, or the module file or package folder
    of a plugin loaded through its entry point (run again, under the same plugin name). If
    the new code fails to load, the loaded version stays (its ops, modules and record as
    they were) and PluginError says why."""
    target = _locate(path, name)
    with _LOCK:
        done = _loaded_from(target)
        if done is None:
            other = _LOADED.get(target.name)
            how = "is not loaded" if other is None else f"was loaded from {other.source}"
            raise PluginError(f"cannot reload plugin {target.name!r} from {target.path}: it {how}; "
                              f"library.reload reloads what sparse_ops.library.load loaded from that path, or "
                              f"the module file or package folder of a plugin loaded through its entry point")
        name, ep = done.name, done.entry_point
        package = ep.module.partition(".")[0] if ep is not None else name  # its modules, all imported again
        saved = registry.snapshot()
        old_ops = plugin_ops(name)
        old_modules = {} if target.shared else {m: sys.modules.pop(m) for m in list(sys.modules)
                                                 if m == package or m.startswith(package + ".")}
        del _LOADED[name]
        for op in old_ops:
            registry.unregister(op)
        _forget_bytecode(target)
        try:
            return _load_entry_point(ep).module if ep is not None else _load_target(target)
        except PluginError as exc:
            registry.restore(saved, old_ops + plugin_ops(name))
            sys.modules.update(old_modules)
            _LOADED[name] = done
            _FAILED.pop(name, None)  # still loaded: the old version
            raise PluginError(f"plugin {name!r}: reloading {target.path} failed, the version loaded before "
                              f"stays: {exc}") from exc


# ---- what is loaded ------------------------------------------------------------------------------
def plugin_ops(name: str) -> list[str]:
    """Names of the ops plugin ``name`` registered, sorted."""
    return sorted(opdef.name for opdef in registry.all_ops() if opdef.plugin == name)


def plugins_info() -> dict[str, dict[str, dict[str, Any]]]:
    """The plugins this process knows: ``{"loaded": {name: {"version", "sdk", "source",
    "ops"}}, "failed": {name: {"source", "reason"}}}``."""
    with _LOCK:
        loaded = {r.name: {"version": r.version, "sdk": r.sdk, "source": r.source, "ops": plugin_ops(r.name)}
                  for r in sorted(_LOADED.values(), key=lambda r: r.name)}
        failed = {r.name: {"source": r.source, "reason": r.error}
                  for r in sorted(_FAILED.values(), key=lambda r: r.name)}
    return {"loaded": loaded, "failed": failed}


def installed_plugins() -> list[str]:
    """Names of the installed plugins (entry points in ``sparse_ops.plugins``), loaded or not."""
    return sorted({ep.name for ep in _entry_points()})


def plugin_module(name: str) -> ModuleType | None:
    """The module of a loaded plugin (None if ``name`` is not loaded)."""
    record = _LOADED.get(name)
    return record.module if record is not None else None


def failure_details(name: str) -> str | None:
    """The traceback of a plugin's failed load, if it failed."""
    record = _FAILED.get(name)
    return record.details if record is not None else None


__all__ = ["ENTRY_POINT_GROUP", "EntryPoint", "PluginError", "PluginWarning", "load_plugins", "plugins_info",
           "sdk_satisfies", "load_path", "reload_path", "plugin_ops", "installed_plugins", "plugin_module", "autoload",
           "autoload_disabled", "failure_details"]
