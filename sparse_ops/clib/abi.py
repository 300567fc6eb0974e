"""The C ABI of ``sparse_ops.h`` mirrored in ctypes: its structs, codes and version.

Keep this file and ``sdk/include/sparse_ops.h`` in step: ``tests/test_clib_abi.py``
compiles a C program that prints the header's sizes and offsets and compares them with
these mirrors.

Why ctypes (not cffi): it ships with Python, so loading a C library needs no compiler and
no extra dependency at run time; the header's structs are plain C, which ctypes describes
exactly; and a call costs about as much as cffi's ABI mode.
"""
from __future__ import annotations

import ctypes as C

import numpy as np

ABI_MAJOR = 1
ABI_MINOR = 2  # 1.1: so_op_decl's reference / reference_forward_params / opcheck_skips / capacity_like;
#                1.2: its n_partition_args / partition_args
ABI_VERSION = (ABI_MAJOR << 16) | ABI_MINOR

MAX_NDIM = 8
ERROR_MESSAGE_SIZE = 1024

OK, ERR_INVALID_ARGUMENT, ERR_UNSUPPORTED, ERR_OUT_OF_MEMORY, ERR_INTERNAL, ERR_RESOURCE = range(6)
STATUS_NAMES = {OK: "SO_OK", ERR_INVALID_ARGUMENT: "SO_ERR_INVALID_ARGUMENT", ERR_UNSUPPORTED: "SO_ERR_UNSUPPORTED",
                ERR_OUT_OF_MEMORY: "SO_ERR_OUT_OF_MEMORY", ERR_INTERNAL: "SO_ERR_INTERNAL",
                ERR_RESOURCE: "SO_ERR_RESOURCE"}

DTYPE_CODES = {np.dtype(np.float32): 0, np.dtype(np.float64): 1, np.dtype(np.float16): 2,
               np.dtype(np.int32): 4, np.dtype(np.int64): 6}
CODE_DTYPES = {code: dt for dt, code in DTYPE_CODES.items()}
INDEX_CODES = {np.dtype(np.int32): 4, np.dtype(np.int64): 6}

STYPE_CODES = {"default": 0, "row_sparse": 1, "csr": 2}
CODE_STYPES = {code: st for st, code in STYPE_CODES.items()}
STYPE_ANY = -1

DEVICE_CPU, DEVICE_GPU = 1, 2
DEVICE_CODES = {"cpu": DEVICE_CPU, "gpu": DEVICE_GPU}

PARAM_STRING, PARAM_INT, PARAM_FLOAT, PARAM_BOOL, PARAM_SHAPE = range(5)
PARAM_TYPES = {PARAM_STRING: str, PARAM_INT: int, PARAM_FLOAT: float, PARAM_BOOL: bool, PARAM_SHAPE: "shape"}

RESOURCE_WORKSPACE, RESOURCE_RANDOM = 1, 2
OP_CONSTANT = 1
PARTITIONS = {0: None, 1: "rows", 2: "sum"}

# the checks an so_opcheck_skip may name (besides "gradient:<input>"): opcheck's, sdk.testing.CHECKS
# (kept here as the strings libraries write: importing sdk.testing from here would make an import
# cycle; tests/test_clib_check.py checks that both agree)
OPCHECK_CHECKS = ("inference", "format", "determinism", "reference", "gradient", "gpu")

REF_INPUT, REF_OUTPUT, REF_OUT_GRAD = 0, 1, 2  # the high half of an SO_INPUT / SO_OUTPUT / SO_OUT_GRAD


def version_text(version: int) -> str:
    """``1.0`` for ``(1 << 16) | 0``."""
    return f"{version >> 16}.{version & 0xFFFF}"


class Error(C.Structure):
    _fields_ = [("struct_size", C.c_uint32), ("abi_version", C.c_uint32),
                ("message", C.c_char * ERROR_MESSAGE_SIZE)]


class Array(C.Structure):
    _fields_ = [("struct_size", C.c_uint32), ("abi_version", C.c_uint32),
                ("stype", C.c_int32), ("dtype", C.c_int32), ("index_dtype", C.c_int32), ("ndim", C.c_int32),
                ("shape", C.c_int64 * MAX_NDIM), ("nnz", C.c_int64),
                ("data", C.c_void_p), ("indices", C.c_void_p), ("indptr", C.c_void_p),
                ("device_type", C.c_int32), ("device_id", C.c_int32)]


class ParamDecl(C.Structure):
    _fields_ = [("struct_size", C.c_uint32), ("abi_version", C.c_uint32),
                ("name", C.c_char_p), ("type", C.c_int32), ("default_value", C.c_char_p), ("doc", C.c_char_p)]


class Params(C.Structure):
    _fields_ = [("struct_size", C.c_uint32), ("abi_version", C.c_uint32), ("count", C.c_int32),
                ("keys", C.POINTER(C.c_char_p)), ("values", C.POINTER(C.c_char_p))]


class Shape(C.Structure):
    _fields_ = [("struct_size", C.c_uint32), ("abi_version", C.c_uint32), ("ndim", C.c_int32),
                ("reserved", C.c_int32), ("dims", C.c_int64 * MAX_NDIM)]


WorkspaceFn = C.CFUNCTYPE(C.c_void_p, C.c_void_p, C.c_uint64)
AllocOutputFn = C.CFUNCTYPE(C.c_int32, C.c_void_p, C.c_int32, C.c_int64, C.c_int32, C.POINTER(Array))


class Context(C.Structure):
    _fields_ = [("struct_size", C.c_uint32), ("abi_version", C.c_uint32),
                ("device_type", C.c_int32), ("device_id", C.c_int32), ("stream", C.c_void_p),
                ("seed", C.c_uint64), ("is_train", C.c_int32), ("reserved", C.c_int32), ("host", C.c_void_p),
                ("workspace", WorkspaceFn), ("alloc_output", AllocOutputFn)]


InferShapeFn = C.CFUNCTYPE(C.c_int32, C.POINTER(Params), C.c_int32, C.POINTER(Shape), C.c_int32,
                           C.POINTER(Shape), C.POINTER(Error))
InferCodesFn = C.CFUNCTYPE(C.c_int32, C.POINTER(Params), C.c_int32, C.POINTER(C.c_int32), C.c_int32,
                           C.POINTER(C.c_int32), C.POINTER(Error))
KernelFn = C.CFUNCTYPE(C.c_int32, C.POINTER(Context), C.POINTER(Params), C.c_int32, C.POINTER(Array), C.c_int32,
                       C.POINTER(Array), C.POINTER(Error))


class Kernel(C.Structure):
    _fields_ = [("struct_size", C.c_uint32), ("abi_version", C.c_uint32), ("device_type", C.c_int32),
                ("stypes", C.POINTER(C.c_int32)), ("n_stypes", C.c_int32), ("reserved", C.c_int32),
                ("fn", C.c_void_p)]


class Gradient(C.Structure):
    _fields_ = [("struct_size", C.c_uint32), ("abi_version", C.c_uint32), ("input", C.c_int32),
                ("forward_params", C.c_int32), ("op", C.c_char_p), ("n_args", C.c_int32), ("n_params", C.c_int32),
                ("args", C.POINTER(C.c_int32)), ("param_keys", C.POINTER(C.c_char_p)),
                ("param_values", C.POINTER(C.c_char_p))]


class Sample(C.Structure):
    _fields_ = [("struct_size", C.c_uint32), ("abi_version", C.c_uint32), ("n_inputs", C.c_int32),
                ("n_params", C.c_int32), ("inputs", C.POINTER(Array)), ("param_keys", C.POINTER(C.c_char_p)),
                ("param_values", C.POINTER(C.c_char_p))]


class OpcheckSkip(C.Structure):
    _fields_ = [("struct_size", C.c_uint32), ("abi_version", C.c_uint32), ("check", C.c_char_p),
                ("reason", C.c_char_p)]


CAPACITY_NONE = -1  # SO_CAPACITY_NONE: an output without a capacity rule


class OpDecl(C.Structure):
    _fields_ = [("struct_size", C.c_uint32), ("abi_version", C.c_uint32),
                ("name", C.c_char_p), ("doc", C.c_char_p),
                ("n_arguments", C.c_int32), ("n_outputs", C.c_int32),
                ("arguments", C.POINTER(C.c_char_p)), ("outputs", C.POINTER(C.c_char_p)),
                ("n_aux", C.c_int32), ("n_params", C.c_int32),
                ("aux_states", C.POINTER(C.c_char_p)), ("params", C.POINTER(ParamDecl)),
                ("infer_shape", C.c_void_p), ("infer_type", C.c_void_p), ("infer_storage_type", C.c_void_p),
                ("n_kernels", C.c_int32), ("n_gradients", C.c_int32),
                ("kernels", C.POINTER(Kernel)), ("gradients", C.POINTER(Gradient)),
                ("resources", C.c_uint32), ("flags", C.c_uint32),
                ("n_samples", C.c_int32), ("partition", C.c_int32), ("samples", C.POINTER(Sample)),
                # ABI 1.1 (read only when the declaration's struct_size covers them: see has_field)
                ("reference", C.c_char_p), ("reference_forward_params", C.c_int32),
                ("n_opcheck_skips", C.c_int32), ("opcheck_skips", C.POINTER(OpcheckSkip)),
                ("capacity_like", C.POINTER(C.c_int32)),
                # ABI 1.2
                ("n_partition_args", C.c_int32), ("partition_args", C.POINTER(C.c_int32))]


RegisterOpFn = C.CFUNCTYPE(C.c_int32, C.c_void_p, C.POINTER(OpDecl), C.POINTER(Error))


class Registrar(C.Structure):
    _fields_ = [("struct_size", C.c_uint32), ("abi_version", C.c_uint32), ("host", C.c_void_p),
                ("register_op", RegisterOpFn), ("library_path", C.c_char_p)]


LibraryInitFn = C.CFUNCTYPE(C.c_int32, C.c_uint32, C.POINTER(Registrar), C.POINTER(Error))

STRUCTS = {"so_error": Error, "so_array": Array, "so_param_decl": ParamDecl, "so_params": Params,
           "so_shape": Shape, "so_context": Context, "so_kernel": Kernel, "so_gradient": Gradient,
           "so_sample": Sample, "so_opcheck_skip": OpcheckSkip, "so_op_decl": OpDecl, "so_registrar": Registrar}

# The first field each minor version added to a struct: a struct written against an older
# minor ends before it (its struct_size says so), and the host reads only the fields it has.
ADDED_IN: dict[type, dict[int, str]] = {OpDecl: {1: "reference", 2: "n_partition_args"}}


def minimum_size(struct: type) -> int:
    """The size of ``struct`` in ABI 1.0, the smallest struct_size a library may declare."""
    added = ADDED_IN.get(struct)
    return getattr(struct, added[min(added)]).offset if added else C.sizeof(struct)


def has_field(struct: type, struct_size: int, field: str) -> bool:
    """Whether a ``struct`` that declares ``struct_size`` bytes holds ``field`` (a struct from
    a library built for an older minor version lacks the fields added since)."""
    f = getattr(struct, field)
    return f.offset + f.size <= struct_size


def header(struct: type) -> tuple[int, int]:
    """(struct_size, abi_version) for a struct the host fills."""
    return C.sizeof(struct), ABI_VERSION
