"""``prefetch(array, i)``: ask the cpu to start loading ``array[i]`` into its caches (LLVM's
``llvm.prefetch``, a read, kept in all cache levels) without waiting for it.
``prefetch_row(matrix, r)``: the same for the first lines of row ``r`` of a 2-d array, in
row kernels (``sparse_ops.sdk.rowkernel``) that read rows picked by ids, such as an
embedding's gather or a lazy optimizer's update: compiled for the cpu it prefetches, for
CUDA and in the CUDA simulator it does nothing.

For loops whose next reads are known early but land far apart in memory, such as SpGEMM
fetching the rows of B that the next stored values of A select: the hardware prefetchers
follow streams, not such jumps, so each row otherwise costs a full cache miss. A prefetch
never faults: an index one past the end (where an empty last row starts) is harmless.
"""
from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, overload


@intrinsic
def prefetch(typingctx: Any, array: Any, i: Any) -> Any:
    if not isinstance(array, types.Array) or array.ndim != 1 or not isinstance(i, types.Integer):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        aryty, ity = signature.args
        ary = context.make_array(aryty)(context, builder, args[0])
        index = context.cast(builder, args[1], ity, types.intp)
        ptr = cgutils.get_item_pointer2(context, builder, data=ary.data, shape=cgutils.unpack_tuple(builder, ary.shape),
                                        strides=cgutils.unpack_tuple(builder, ary.strides), layout=aryty.layout,
                                        inds=[index], wraparound=False, boundscheck=False)
        emit(builder, ptr)
        return context.get_dummy_value()

    return types.void(array, i), codegen


def emit(builder: ir.IRBuilder, ptr: ir.Value) -> None:
    """Emit the prefetch of the cache line holding ``ptr`` (any pointer type) at the
    builder's position: for intrinsics and generated kernels alike."""
    byte_ptr = ir.IntType(8).as_pointer()
    i32 = ir.IntType(32)
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [byte_ptr, i32, i32, i32]),
                                        "llvm.prefetch.p0i8")
    builder.call(fn, [builder.bitcast(ptr, byte_ptr), i32(0), i32(3), i32(1)])  # read, keep everywhere, data


ROW_LINES = 4  # lines of a row prefetched from its start (the stream prefetchers follow a longer row)


def prefetch_row(matrix: Any, r: Any) -> None:
    """Start loading the first ``ROW_LINES`` cache lines of ``matrix[r]`` (a 2-d array, rows
    contiguous), and its last line where the row ends within one more: on the cpu; a no-op
    for CUDA and as Python (the CUDA simulator). ``r`` may be out of range or not an
    integer (a float id): a prefetch never faults, and a non-integer one is skipped."""
    return None


@intrinsic
def _prefetch_row(typingctx: Any, matrix: Any, r: Any) -> Any:
    if not isinstance(matrix, types.Array) or matrix.ndim != 2 or not isinstance(r, types.Integer):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        aryty, rty = signature.args
        ary = context.make_array(aryty)(context, builder, args[0])
        shape = cgutils.unpack_tuple(builder, ary.shape)
        intp = context.get_value_type(types.intp)
        row = context.cast(builder, args[1], rty, types.intp)
        start = builder.bitcast(ary.data, ir.IntType(8).as_pointer())
        start = builder.gep(start, [builder.mul(row, cgutils.unpack_tuple(builder, ary.strides)[0])])
        nbytes = builder.mul(shape[1], intp(context.get_abi_sizeof(context.get_data_type(aryty.dtype))))
        for line in range(ROW_LINES):
            with builder.if_then(builder.icmp_signed("<", intp(64 * line), nbytes)):
                emit(builder, builder.gep(start, [intp(64 * line)]))
        # a row starting mid-line spans one line more: its last byte's
        fits = builder.and_(builder.icmp_signed(">", nbytes, intp(0)),
                            builder.icmp_signed("<=", nbytes, intp(64 * (ROW_LINES + 1))))
        with builder.if_then(fits):
            emit(builder, builder.gep(start, [builder.sub(nbytes, intp(1))]))
        return context.get_dummy_value()

    return types.void(matrix, r), codegen


@overload(prefetch_row, target="cpu")
def _prefetch_row_cpu(matrix, r):  # (numba matches these names, unannotated, with the implementation's)
    if isinstance(r, types.Integer):
        return lambda matrix, r: _prefetch_row(matrix, r)
    return lambda matrix, r: None


@overload(prefetch_row, target="cuda")
def _prefetch_row_cuda(matrix, r):
    return lambda matrix, r: None
