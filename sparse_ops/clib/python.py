"""Declaring a C-ABI operator from Python: ``register_op`` builds the ``so_op_decl`` a C
library would hand its registrar and registers it the same way. Its kernels are addresses of
``so_kernel_fn`` functions: ``numba.cfunc`` kernels (``sparse_ops.sdk.cabi``) or functions of
a library opened with ctypes; inference callbacks likewise."""
from __future__ import annotations

import ctypes as C
import sys
from typing import Any, Sequence

from ..registry import unregister
from . import abi
from .load import Library, LibraryError, missing_ops, register_declaration


def _address(fn: Any) -> int | None:
    """The address of a numba cfunc, a ctypes function, or an int address (None stays None)."""
    if fn is None:
        return None
    if isinstance(fn, int):
        return fn
    address = getattr(fn, "address", None)  # numba.cfunc
    return address if address is not None else C.cast(fn, C.c_void_p).value


def _names(names: Sequence[str]) -> Any:
    return (C.c_char_p * max(len(names), 1))(*[n.encode() for n in names])


def register_op(name: str, *, kernels: Sequence[tuple[str, Sequence[str] | None, Any]],
                arguments: Sequence[str] = ("data",), outputs: Sequence[str] = ("output",),
                params: Sequence[tuple[str, type, str | None, str]] = (), infer_shape: Any = None,
                infer_type: Any = None, infer_storage_type: Any = None,
                gradients: Sequence[tuple[int, str, Sequence[int]]] = (), constant: bool = False,
                doc: str = "", reference: str | None = None,
                opcheck_skip: dict[str, str] | None = None) -> Library:
    """Register operator ``name`` through the C ABI. ``kernels`` holds ``(device, stypes or
    None, kernel)`` triples (``stypes`` as in ``so_kernel``: one storage type per input, "*"
    for any; None for a dense kernel); ``params`` holds ``(name, int | float | bool | str,
    default text or None, doc)``; ``gradients`` holds ``(input, op, refs)`` with refs made by
    ``ref_input`` / ``ref_output`` / ``ref_out_grad``, this op's parameters forwarded.
    ``reference`` names an op opcheck compares the outputs with (this op's parameters
    forwarded), ``opcheck_skip`` maps opcheck's checks to skip to the reason (the ABI 1.1
    fields of ``so_op_decl``). The kernels' owners (cfunc objects) must stay alive while the
    op is registered. Returns the Library standing for the declaration; LibraryError if it
    is refused."""
    types = {str: abi.PARAM_STRING, int: abi.PARAM_INT, float: abi.PARAM_FLOAT, bool: abi.PARAM_BOOL}
    keep: list = []
    pdecl = (abi.ParamDecl * max(len(params), 1))(*[
        abi.ParamDecl(*abi.header(abi.ParamDecl), p.encode(), types[t], None if d is None else d.encode(),
                      text.encode()) for p, t, d, text in params])
    kdecl = (abi.Kernel * max(len(kernels), 1))()
    for k, (device, stypes, fn) in zip(kdecl, kernels):
        codes = None if stypes is None else (C.c_int32 * len(stypes))(
            *[abi.STYPE_ANY if s == "*" else abi.STYPE_CODES[s] for s in stypes])
        keep.append(codes)
        k.struct_size, k.abi_version = abi.header(abi.Kernel)
        k.device_type, k.n_stypes, k.fn = abi.DEVICE_CODES[device], 0 if stypes is None else len(stypes), _address(fn)
        k.stypes = C.cast(codes, C.POINTER(C.c_int32)) if codes is not None else None
    gdecl = (abi.Gradient * max(len(gradients), 1))()
    for g, (index, op, refs) in zip(gdecl, gradients):
        args = (C.c_int32 * max(len(refs), 1))(*refs)
        keep.append(args)
        g.struct_size, g.abi_version = abi.header(abi.Gradient)
        g.input, g.forward_params, g.op, g.n_args, g.args = index, 1, op.encode(), len(refs), args
    arg_names, out_names = _names(arguments), _names(outputs)
    decl = abi.OpDecl(*abi.header(abi.OpDecl))
    decl.name, decl.doc = name.encode(), doc.encode()
    decl.n_arguments, decl.arguments = len(arguments), arg_names
    decl.n_outputs, decl.outputs = len(outputs), out_names
    decl.n_params, decl.params = len(params), pdecl
    decl.infer_shape, decl.infer_type = _address(infer_shape), _address(infer_type)
    decl.infer_storage_type = _address(infer_storage_type)
    decl.n_kernels, decl.kernels = len(kernels), kdecl
    decl.n_gradients, decl.gradients = len(gradients), gdecl
    decl.flags = abi.OP_CONSTANT if constant else 0
    decl.reference, decl.reference_forward_params = (reference.encode() if reference else None), 1
    skips = list((opcheck_skip or {}).items())
    sdecl = (abi.OpcheckSkip * max(len(skips), 1))(*[
        abi.OpcheckSkip(*abi.header(abi.OpcheckSkip), check.encode(), reason.encode()) for check, reason in skips])
    decl.n_opcheck_skips, decl.opcheck_skips = len(skips), sdecl
    lib = Library(f"<declared in Python: {name}>")
    caller = sys._getframe(1).f_globals.get("__name__", "__main__")
    problem = register_declaration(lib, C.addressof(decl), caller)
    if problem is not None:
        raise LibraryError(f"{lib.path}: {problem}")
    problem = missing_ops([name])
    if problem is not None:
        unregister(name)
        raise LibraryError(f"{lib.path}: {problem}")
    lib.handle = (keep, [fn for _, _, fn in kernels], infer_shape, infer_type, infer_storage_type)
    return lib


def ref_input(i: int) -> int:
    """SO_INPUT(i): input ``i`` as an argument of a gradient term."""
    return (abi.REF_INPUT << 16) | i


def ref_output(i: int) -> int:
    """SO_OUTPUT(i)."""
    return (abi.REF_OUTPUT << 16) | i


def ref_out_grad(i: int) -> int:
    """SO_OUT_GRAD(i): the gradient of output ``i``."""
    return (abi.REF_OUT_GRAD << 16) | i


__all__ = ["register_op", "ref_input", "ref_output", "ref_out_grad"]
