"""``prefetch(array, i)``: ask the cpu to start loading ``array[i]`` into its caches (LLVM's
``llvm.prefetch``, a read, kept in all cache levels) without waiting for it.

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
from numba.extending import intrinsic


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
