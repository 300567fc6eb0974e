"""Opening an operator library: the ABI version check, the entry point, the registrar.

``open_library`` runs a library's ``sparse_ops_library_init`` with a registrar whose
``register_op`` decodes each declaration and registers its ``Op`` class in the one table,
attributed to whoever is registering on this thread (the plugin being loaded). Any failure
(no entry point, another major ABI version, a malformed declaration, a taken name, an error
status from init) raises ``LibraryError`` naming the library, after removing every op the
library had registered: the table is as it was before.

A library is never unloaded (recorded graphs may still call its kernels). Loading a
changed file again (``library.reload``) opens a copy of it under a new name, since the
dynamic loader would otherwise hand back the library it already has.
"""
from __future__ import annotations

import ctypes as C
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import registry
from ..creation import array, csr_matrix, row_sparse_array
from ..errors import OperatorError
from . import abi
from .declare import DeclarationError, OpSpec, check_header, decode
from .opclass import op_class

SUFFIXES = (".so", ".dylib", ".dll")
_OPENED: dict[str, int] = {}  # realpath -> how many times it was opened (a reload opens a copy)
_LOCK = threading.RLock()


class LibraryError(OperatorError):
    """An operator library could not be loaded; the message names the library and the reason."""


def is_shared_library(path: str) -> bool:
    """Whether ``path`` names a shared library (``libops.so``, ``libops.so.1``, ``.dylib``, ``.dll``)."""
    base = os.path.basename(path)
    return base.endswith(SUFFIXES) or ".so." in base


def default_name(path: str) -> str:
    """The plugin name of a library file: ``libmyops.so`` -> ``myops``."""
    base = os.path.basename(path).partition(".")[0]
    return base[3:] if base.startswith("lib") and len(base) > 3 else base


@dataclass
class Library:
    """One opened library: its file, handle, version string and the ops it registered."""

    path: str
    handle: Any = None
    version: str | None = None
    abi_version: int = 0
    ops: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # refusals of register_op, in order

    def __repr__(self) -> str:
        return f"<sparse_ops C library {self.path} ({len(self.ops)} ops)>"


# ---- samples -----------------------------------------------------------------------------------
def _host_array(address: int, count: int, dtype: np.dtype, what: str) -> np.ndarray:
    if count and not address:
        raise DeclarationError(f"{what} is NULL")
    if count == 0:
        return np.empty(0, dtype)
    return np.frombuffer((C.c_char * (count * dtype.itemsize)).from_address(address), dtype).copy()


def _sample_input(s: abi.Array, what: str) -> Any:
    """A container holding a copy of the sample so_array ``s`` (checked like any input)."""
    dtype = abi.CODE_DTYPES.get(s.dtype)
    if dtype is None:
        raise DeclarationError(f"{what}: unknown dtype code {s.dtype}")
    if not 0 <= s.ndim <= abi.MAX_NDIM:
        raise DeclarationError(f"{what}: ndim {s.ndim}")
    shape = tuple(int(d) for d in s.shape[:s.ndim])
    if any(d < 0 for d in shape):
        raise DeclarationError(f"{what}: negative shape {shape}")
    size = int(np.prod(shape, dtype=object))  # (Python ints: no wrap past int64)
    # the declaration's own numbers must agree before any buffer is read: the buffers' real
    # sizes are unknown, and a read past one is a crash
    if s.stype == abi.STYPE_CODES["default"]:
        if s.nnz != size:
            raise DeclarationError(f"{what}: a dense sample's nnz ({s.nnz}) must be its number of elements, "
                                   f"{size} for shape {shape}")
        return array(_host_array(s.data, size, dtype, f"{what}.data").reshape(shape))
    index = {4: np.dtype(np.int32), 6: np.dtype(np.int64)}.get(s.index_dtype)
    if index is None:
        raise DeclarationError(f"{what}: index dtype code {s.index_dtype} is neither int32 nor int64")
    if s.nnz < 0:
        raise DeclarationError(f"{what}: negative nnz {s.nnz}")
    nnz = int(s.nnz)
    if s.stype == abi.STYPE_CODES["csr"]:
        if len(shape) != 2:
            raise DeclarationError(f"{what}: a csr sample needs 2 dimensions, got {shape}")
        if nnz > size:
            raise DeclarationError(f"{what}: a csr sample of shape {shape} stores at most {size} values, "
                                   f"its nnz is {nnz}")
        indptr = _host_array(s.indptr, shape[0] + 1, index, f"{what}.indptr")
        if int(indptr[-1]) != nnz:
            raise DeclarationError(f"{what}: indptr[{shape[0]}] = {int(indptr[-1])}, but nnz is {nnz}")
        parts = (_host_array(s.data, nnz, dtype, f"{what}.data"), _host_array(s.indices, nnz, index, f"{what}.indices"),
                 indptr)
        return csr_matrix(parts, shape=shape)
    if s.stype == abi.STYPE_CODES["row_sparse"]:
        if not shape:
            raise DeclarationError(f"{what}: a row_sparse sample needs at least 1 dimension")
        if nnz > shape[0]:
            raise DeclarationError(f"{what}: a row_sparse sample of shape {shape} stores at most {shape[0]} rows, "
                                   f"its nnz is {nnz}")
        row = int(np.prod(shape[1:], dtype=np.int64))
        values = _host_array(s.data, nnz * row, dtype, f"{what}.data").reshape((nnz, *shape[1:]))
        return row_sparse_array((values, _host_array(s.indices, nnz, index, f"{what}.indices")), shape=shape)
    raise DeclarationError(f"{what}: unknown storage type code {s.stype}")


def _samples(raw: list, spec: OpSpec) -> list:
    """(inputs, params) of each so_sample. Its ``n_inputs`` is checked against the op's
    inputs before any array is read: a count the author's array does not hold would be
    read past its end."""
    out = []
    n_in = len(spec.inputs)
    for i, sample in enumerate(raw):
        what = f"operator {spec.name!r}: samples[{i}]"
        if sample.n_inputs != n_in:
            raise DeclarationError(f"{what}: n_inputs is {sample.n_inputs}, but the op takes {n_in} input(s) "
                                   f"({', '.join(spec.inputs) or 'none'}: its arguments, then its aux states)")
        if sample.n_inputs and not sample.inputs:
            raise DeclarationError(f"{what}: {sample.n_inputs} inputs but no array")
        inputs = []
        for j in range(sample.n_inputs):
            address = C.addressof(sample.inputs.contents) + j * C.sizeof(abi.Array)
            check_header(abi.Array, address, f"{what}.inputs[{j}]")
            inputs.append(_sample_input(abi.Array.from_address(address), f"{what}.inputs[{j}]"))
        if sample.n_params < 0 or (sample.n_params and not (sample.param_keys and sample.param_values)):
            raise DeclarationError(f"{what}: {sample.n_params} parameters but no keys or values")
        params = {sample.param_keys[k].decode(): sample.param_values[k].decode() for k in range(sample.n_params)}
        out.append((inputs, params))
    return out


# ---- opening a library -----------------------------------------------------------------------------
def _open(path: str) -> Any:
    """dlopen ``path`` (a copy of it if it was opened before: a reload)."""
    real = os.path.realpath(path)
    target = real
    if real in _OPENED:
        folder = tempfile.mkdtemp(prefix="sparse_ops_reload_")
        target = os.path.join(folder, f"{_OPENED[real]}_{os.path.basename(real)}")
        shutil.copy2(real, target)
    try:
        handle = C.CDLL(target, mode=getattr(os, "RTLD_LOCAL", 0) | getattr(os, "RTLD_NOW", 0))
    except OSError as exc:
        raise LibraryError(f"library {path}: cannot be opened: {exc}") from None
    _OPENED[real] = _OPENED.get(real, 0) + 1
    return handle


def _read_version(handle: Any, path: str) -> tuple[int, str | None]:
    try:
        version = C.c_uint32.in_dll(handle, "sparse_ops_library_abi_version").value
    except ValueError:
        raise LibraryError(f"library {path}: missing symbol sparse_ops_library_abi_version (write "
                           f"SPARSE_OPS_LIBRARY(\"name version\"); in one source file, as sparse_ops.h says)") from None
    host = abi.version_text(abi.ABI_VERSION)
    if version >> 16 != abi.ABI_MAJOR:
        raise LibraryError(f"library {path} was built for sparse_ops ABI {abi.version_text(version)}, but this "
                           f"sparse_ops speaks ABI {host}: rebuild it against the header in `sparse-ops include-dir`")
    if version & 0xFFFF > abi.ABI_MINOR:
        raise LibraryError(f"library {path} was built for sparse_ops ABI {abi.version_text(version)}, newer than "
                           f"this sparse_ops (ABI {host}): upgrade sparse-ops or rebuild the library")
    try:
        text = C.c_char_p.in_dll(handle, "sparse_ops_library_version").value
    except ValueError:
        text = None
    return version, text.decode("utf-8", "replace") if text else None


def open_library(path: str, module: str) -> Library:
    """Open the library at ``path`` and register its ops (classes of module ``module``);
    returns the Library. On any failure the ops it registered are removed and LibraryError
    says why, naming the library (and the op, when one op's declaration was at fault)."""
    lib = Library(os.path.abspath(path))
    with _LOCK:
        saved = registry.snapshot()
        try:
            lib.handle = _open(lib.path)
            lib.abi_version, lib.version = _read_version(lib.handle, lib.path)
            try:
                init = abi.LibraryInitFn(C.cast(lib.handle.sparse_ops_library_init, C.c_void_p).value)
            except AttributeError:
                raise LibraryError(f"library {lib.path}: no entry point sparse_ops_library_init (declare "
                                   f"SO_EXPORT int32_t sparse_ops_library_init(uint32_t, const so_registrar*, "
                                   f"so_error*))") from None
            _run_init(lib, init, module)
        except BaseException:
            registry.restore(saved, lib.ops)
            raise
    return lib


def register_declaration(lib: Library, address: int, module: str) -> str | None:
    """Decode the so_op_decl at ``address`` and register its op for ``lib``; returns None, or
    what was wrong (also kept in ``lib.problems``): what the registrar's register_op does."""
    try:
        spec = decode(address, _samples)
        _register(lib, spec, module)
        return None
    except Exception as exc:  # never let an exception reach C
        name = _declared_name(address)
        problem = f"operator {name!r}: {exc}" if name and f"{name!r}" not in str(exc) else str(exc)
        lib.problems.append(problem)
        return problem


def _run_init(lib: Library, init: Any, module: str) -> None:
    def register_op(host: int, decl: Any, err: Any) -> int:
        problem = register_declaration(lib, C.cast(decl, C.c_void_p).value, module)
        if problem is None:
            return abi.OK
        err.contents.message = problem.encode("utf-8", "replace")[:abi.ERROR_MESSAGE_SIZE - 1]
        return abi.ERR_INVALID_ARGUMENT

    callback = abi.RegisterOpFn(register_op)
    registrar = abi.Registrar(*abi.header(abi.Registrar), None, callback, lib.path.encode())
    err = abi.Error(*abi.header(abi.Error))
    status = init(abi.ABI_VERSION, C.byref(registrar), C.byref(err))
    if lib.problems:
        raise LibraryError(f"library {lib.path}: {lib.problems[0]}")
    if status != abi.OK:
        message = err.message.decode("utf-8", "replace") or "(no message)"
        raise LibraryError(f"library {lib.path}: sparse_ops_library_init returned "
                           f"{abi.STATUS_NAMES.get(status, f'status {status}')}: {message}")
    if not lib.ops:
        raise LibraryError(f"library {lib.path}: sparse_ops_library_init registered no operators")
    problem = missing_ops(lib.ops)
    if problem:
        raise LibraryError(f"library {lib.path}: {problem}")
    for name in lib.ops:  # the ops each gradient names, as they are now: a graph recorded before a
        cls = registry.get_op(name).cls  # reload differentiates with this version, not the next
        cls._gradient_ops = {t.op: registry.get_op(t.op) for t in cls._c_spec.gradients}


def missing_ops(names: list[str]) -> str | None:
    """What is wrong with the ops a library just registered that only the whole table can
    tell (each op's gradient ops and reference op must exist, in the library or the table),
    or None."""
    table = set(registry.list_ops())
    for name in names:
        spec = registry.get_op(name).cls._c_spec
        for term in spec.gradients:
            if term.op not in table:
                return (f"operator {name!r}: its gradient names operator {term.op!r}, which is neither in the "
                        f"library nor in the table")
        if spec.reference is not None and spec.reference not in table:
            return (f"operator {name!r}: its reference names operator {spec.reference!r}, which is neither in the "
                    f"library ({', '.join(names)}) nor in the table; allowed: an op of the library or a "
                    f"registered op (`sparse-ops list` lists them)")
    return None


def _declared_name(address: int) -> str | None:
    try:
        check_header(abi.OpDecl, address, "so_op_decl")
        raw = abi.OpDecl.from_address(address).name
        return raw.decode("utf-8", "replace") if raw else None
    except (DeclarationError, ValueError):
        return None


def _register(lib: Library, spec: OpSpec, module: str) -> None:
    where = f"operator {spec.name!r} (library {lib.path})"
    cls = op_class(spec, where, module)
    cls._c_spec = spec
    cls._c_library = lib
    registry.register(spec.name)(cls)
    lib.ops.append(spec.name)


__all__ = ["Library", "LibraryError", "SUFFIXES", "default_name", "is_shared_library", "missing_ops",
           "open_library", "register_declaration"]
