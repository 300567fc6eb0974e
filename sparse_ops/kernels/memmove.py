"""``move(array, dst, src, n)``: ``array[dst:dst + n] = array[src:src + n]`` within one
C-contiguous 1-d array, the two ranges allowed to overlap (LLVM's ``llvm.memmove``, which
becomes the C library's ``memmove``).

Written as a loop in numba, an overlapping move stays an element-by-element copy (numba
cannot prove the ranges apart, so it neither vectorises nor calls ``memmove``), several
times slower than ``memmove`` on large arrays; as a slice assignment, numba copies the
source to a temporary first. Nothing is checked: the caller keeps both ranges inside the
array.
"""
from __future__ import annotations

from typing import Any

from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def move(typingctx: Any, array: Any, dst: Any, src: Any, n: Any) -> Any:
    if not (isinstance(array, types.Array) and array.ndim == 1 and array.layout == "C"
            and all(isinstance(t, types.Integer) for t in (dst, src, n))):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        aryty = signature.args[0]
        data = context.make_array(aryty)(context, builder, args[0]).data
        d, s, k = (context.cast(builder, v, t, types.intp) for v, t in zip(args[1:], signature.args[1:]))
        itemsize = context.get_abi_sizeof(context.get_data_type(aryty.dtype))
        cgutils.raw_memmove(builder, builder.gep(data, [d]), builder.gep(data, [s]), k, itemsize)
        return context.get_dummy_value()

    return types.void(array, dst, src, n), codegen
