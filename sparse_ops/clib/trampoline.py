"""The fast path of a call into a C kernel: a numba function that describes dense arrays in
``so_array`` structs and calls the kernel's function pointer, with no Python per array.

Reading an array's address from Python (``a.ctypes.data``) costs about as much as a whole
small op call; compiled code reads it for free. The kernel's address is an argument, so one
compiled trampoline (per tuple of array types, cached on disk) serves every C kernel.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import literal_unroll, types
from numba.extending import intrinsic, overload
from numba.np.numpy_support import as_dtype

from ..kernels import jit
from . import abi

WORDS = 16  # an so_array is 128 bytes: 16 int64 words (tests/test_clib_abi.py checks the layout)
_HEAD = 128 | (abi.ABI_VERSION << 32)
_DENSE_INDEX = 0xFFFFFFFF  # index_dtype -1 in the low half of a word
_CPU_DEVICE = abi.DEVICE_CPU  # device_type in the low half, device_id 0 in the high half


@intrinsic
def _call(typingctx, fn, ctx, params, n_in, ins, n_out, outs, err):
    """Call the so_kernel_fn at address ``fn`` with the other arguments (addresses and counts)."""
    sig = types.int32(types.int64, types.int64, types.int64, types.int32, types.int64, types.int32,
                      types.int64, types.int64)

    def codegen(context, builder, signature, args):
        i32, ptr = ir.IntType(32), ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(i32, [ptr, ptr, i32, ptr, i32, ptr, ptr])
        target = builder.inttoptr(args[0], fnty.as_pointer())
        p = [builder.inttoptr(args[i], ptr) for i in (1, 2, 4, 6, 7)]
        return builder.call(target, [p[0], p[1], args[3], p[2], args[5], p[3], p[4]])

    return sig, codegen


def dtype_code(a):  # noqa: D103 - the compiled overload below is the definition
    raise NotImplementedError


@overload(dtype_code)
def _dtype_code(a):
    code = abi.DTYPE_CODES.get(np.dtype(as_dtype(a.dtype)))
    if code is None:
        return None
    return lambda a: code


@jit()
def _describe(words, i, a):
    k = i * WORDS
    words[k] = _HEAD
    words[k + 1] = dtype_code(a) << 32  # stype SO_STYPE_DEFAULT (0) in the low half
    words[k + 2] = _DENSE_INDEX | (a.ndim << 32)
    for d in range(8):
        words[k + 3 + d] = a.shape[d] if d < a.ndim else 0
    words[k + 11] = a.size
    words[k + 12] = a.ctypes.data
    words[k + 13] = 0
    words[k + 14] = 0
    words[k + 15] = _CPU_DEVICE


NOT_CONTIGUOUS = -1  # returned before calling anything: an array was not C-contiguous


@intrinsic
def _clear_message(typingctx, err):
    """Empty the message of the so_error at address ``err`` (its text starts 8 bytes in)."""
    def codegen(context, builder, signature, args):
        i8 = ir.IntType(8)
        at = builder.inttoptr(builder.add(args[0], ir.Constant(ir.IntType(64), 8)), i8.as_pointer())
        builder.store(ir.Constant(i8, 0), at)
        return context.get_dummy_value()

    return types.none(types.int64), codegen


@jit()
def _run(addrs, words, n):
    """Call the kernel on the ``n`` arrays described in ``words`` (see ``call_dense``)."""
    base, n_in = words.ctypes.data, addrs[4]
    _clear_message(addrs[3])
    return _call(addrs[0], addrs[1], addrs[2], np.int32(n_in), base, np.int32(n - n_in), base + n_in * WORDS * 8,
                 addrs[3])


@jit()
def call_dense(addrs, *arrays):
    """Run the C kernel ``addrs[0]`` with so_context ``addrs[1]``, so_params ``addrs[2]`` and
    so_error ``addrs[3]`` (addresses) on host arrays: the first ``addrs[4]`` are its inputs,
    the rest its outputs. Returns the kernel's status, or NOT_CONTIGUOUS without calling it
    when an array is not C-contiguous."""
    n = len(arrays)
    for a in literal_unroll(arrays):
        if not a.flags.c_contiguous:
            return NOT_CONTIGUOUS
    words = np.empty(n * WORDS, np.int64)
    i = 0
    for a in literal_unroll(arrays):
        _describe(words, i, a)
        i += 1
    return _run(addrs, words, n)


# call_dense for 2, 3 and 4 arrays without *arrays, which costs the caller a tuple per call
@jit()
def _call2(addrs, a, b):
    if not (a.flags.c_contiguous and b.flags.c_contiguous):
        return NOT_CONTIGUOUS
    words = np.empty(2 * WORDS, np.int64)
    _describe(words, 0, a)
    _describe(words, 1, b)
    return _run(addrs, words, 2)


@jit()
def _call3(addrs, a, b, c):
    if not (a.flags.c_contiguous and b.flags.c_contiguous and c.flags.c_contiguous):
        return NOT_CONTIGUOUS
    words = np.empty(3 * WORDS, np.int64)
    _describe(words, 0, a)
    _describe(words, 1, b)
    _describe(words, 2, c)
    return _run(addrs, words, 3)


@jit()
def _call4(addrs, a, b, c, d):
    if not (a.flags.c_contiguous and b.flags.c_contiguous and c.flags.c_contiguous and d.flags.c_contiguous):
        return NOT_CONTIGUOUS
    words = np.empty(4 * WORDS, np.int64)
    _describe(words, 0, a)
    _describe(words, 1, b)
    _describe(words, 2, c)
    _describe(words, 3, d)
    return _run(addrs, words, 4)


def for_arrays(n: int):
    """The trampoline for kernels taking ``n`` arrays (inputs and outputs together)."""
    return {2: _call2, 3: _call3, 4: _call4}.get(n, call_dense)
