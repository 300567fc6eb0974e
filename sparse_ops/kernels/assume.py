"""``nonneg(i)``: ``i`` itself, with LLVM told that it is not negative (``llvm.assume``).

numba indexes arrays with wraparound (``a[-1]`` is the last item), so a loop over an index
LLVM cannot prove non-negative selects ``i + len`` or ``i`` at every access, which keeps
the loop from vectorising (a count over a range of ids, for one). The row kernels' cpu
drivers bind each row through it
(``sparse_ops.sdk.rowkernel``): their rows are ``0 .. n-1``. It emits no instruction;
a negative ``i`` is undefined behaviour.
"""
from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def nonneg(typingctx: Any, i: Any) -> Any:
    if not isinstance(i, types.Integer):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        value = args[0]
        if signature.args[0].signed:
            assume = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [ir.IntType(1)]),
                                                    "llvm.assume")
            builder.call(assume, [builder.icmp_signed(">=", value, ir.Constant(value.type, 0))])
        return value

    return i(i), codegen
