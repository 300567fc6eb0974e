"""Dense rows held in vector registers, in chunks of 256 down to 4 bytes: the two
LLVM intrinsics the cpu products of a csr with a dense matrix are built from.

numba cannot prove that two arrays do not overlap, so a loop written in Python that adds
``v * b[r, c]`` into ``out[i, c]`` loads and stores the output row at every stored value,
and leaves a narrow row to scalar code. Each intrinsic here keeps one chunk of a row in
registers while the stored values of one csr row stream past:

- ``gather_chunk``: ``out[i, chunk] = sum over j of data[j] * b[indices[j], chunk]`` (csr @ dense),
  the sums held, in two multiply-add chains (even and odd stored values), one store at the end;
- ``scatter_chunk``: ``out[indices[j], chunk] += data[j] * b[i, chunk]`` (csr.T @ dense), the
  chunk of ``b``'s row i held, each output chunk loaded, multiply-added and stored once.

``rows_by_chunks`` cuts rows into the chunks. ``chunkable`` says when numba may compile
the intrinsics for the operands' types: one dtype for values, ``b`` and ``out``, both
C-contiguous, and bounds checks off (a ``SPARSE_OPS_BOUNDSCHECK=1`` run takes the checked
plain loop, a column at a time). Neither checks bounds: the csr is validated at the
boundary and callers keep the chunk inside the row. Multiply-adds are ``llvm.fmuladd`` (fused where the cpu can: one rounding less).
"""
from __future__ import annotations

from typing import Any, Callable

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ..settings import BOUNDSCHECK
from . import prefetch

NONNEG = 0x7FFF_FFFF_FFFF_FFFF  # index & NONNEG: tells LLVM an index is not negative
CHUNK_BYTES = (256, 128, 64, 32, 16, 8, 4)
# gather chunks of these sizes prefetch b's chunk PREFETCH_AHEAD stored values ahead: rows
# of one or two cache lines are where the out-of-order window stops short of the next rows'
# loads; a 32-byte chunk, half a line, gains less than the prefetch's own instructions cost
PREFETCH_CHUNK_BYTES, PREFETCH_AHEAD = (64, 128), 32
_DTYPES = (types.float32, types.float64, types.int32, types.int64)


def chunkable(data: Any, b: Any, out: Any) -> bool:
    """Whether the chunk intrinsics apply to these numba array types (see the module docstring)."""
    return (not BOUNDSCHECK and data.dtype == b.dtype == out.dtype and b.dtype in _DTYPES
            and b.layout == "C" and out.layout == "C")


class _Codegen:
    """The LLVM IR both intrinsics share: the csr's arrays, a row's stored-value range, a
    stored value broadcast to a vector, pointers to vector chunks of ``b`` and ``out``."""

    def __init__(self, context: Any, builder: Any, signature: Any, args: Any, lanes: int) -> None:
        self.context, self.builder, self.tys = context, builder, signature.args
        self.arrays = [context.make_array(t)(context, builder, a) for t, a in zip(self.tys[:5], args[:5])]
        self.intp = context.get_value_type(types.intp)
        self.row, self.col = (context.cast(builder, a, t, types.intp) for a, t in zip(args[5:7], self.tys[5:7]))
        self.dtype = self.tys[3].dtype
        self.vec = ir.VectorType(context.get_data_type(self.dtype), lanes)
        self.align = self.dtype.bitwidth // 8

    def _pointer(self, which: int, inds: list) -> Any:
        aryty, ary = self.tys[which], self.arrays[which]
        builder = self.builder
        return cgutils.get_item_pointer2(self.context, builder, data=ary.data,
                                         shape=cgutils.unpack_tuple(builder, ary.shape),
                                         strides=cgutils.unpack_tuple(builder, ary.strides), layout=aryty.layout,
                                         inds=inds, wraparound=False, boundscheck=False)

    def _index(self, which: int, k: Any) -> Any:
        value = self.builder.load(self._pointer(which, [k]))
        return self.context.cast(self.builder, value, self.tys[which].dtype, types.intp)

    def stored_range(self) -> tuple[Any, Any]:
        """(start, end) of the row's stored values."""
        return self._index(0, self.row), self._index(0, self.builder.add(self.row, self.intp(1)))

    def column(self, j: Any) -> Any:
        return self.builder.and_(self._index(1, j), self.intp(NONNEG))

    def value(self, j: Any) -> Any:
        """data[j] in every lane."""
        builder, lanes = self.builder, self.vec.count
        undef = ir.Constant(self.vec, ir.Undefined)
        v = builder.insert_element(undef, builder.load(self._pointer(2, [j])), ir.IntType(32)(0))
        return builder.shuffle_vector(v, undef, ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes))

    def chunk(self, which: int, row: Any) -> Any:
        """A pointer to the chunk of row ``row`` of ``b`` (which=3) or ``out`` (4)."""
        return self.builder.bitcast(self._pointer(which, [row, self.col]), self.vec.as_pointer())

    def prefetch_chunk(self, j: Any) -> None:
        """Prefetch the cache lines of ``b``'s chunk for stored value j + PREFETCH_AHEAD (j
        itself past the end of ``indices``). A prefetch never faults: the index read stays
        inside ``indices``, the address it gives need not be valid."""
        builder, intp = self.builder, self.intp
        stored = cgutils.unpack_tuple(builder, self.arrays[1].shape)[0]
        k = builder.add(j, intp(PREFETCH_AHEAD))
        k = builder.select(builder.icmp_signed("<", k, stored), k, j)
        base = builder.bitcast(self.chunk(3, self.column(k)), ir.IntType(8).as_pointer())
        for line in range(max(1, self.vec.count * self.align // 64)):
            prefetch.emit(builder, builder.gep(base, [intp(64 * line)]))

    def load(self, ptr: Any) -> Any:
        return self.builder.load(ptr, align=self.align)

    def store(self, value: Any, ptr: Any) -> None:
        self.builder.store(value, ptr, align=self.align)

    def muladd(self, a: Any, b: Any, c: Any) -> Any:
        builder = self.builder
        if isinstance(self.dtype, types.Float):
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(self.vec, [self.vec] * 3),
                                                f"llvm.fmuladd.v{self.vec.count}f{self.dtype.bitwidth}")
            return builder.call(fn, [a, b, c])
        return builder.add(builder.mul(a, b), c)

    def add(self, a: Any, b: Any) -> Any:
        return (self.builder.fadd if isinstance(self.dtype, types.Float) else self.builder.add)(a, b)


def _chunk_intrinsic(emit: Callable[[_Codegen], None]) -> Any:
    """An intrinsic (indptr, indices, data, b, out, i, c0, nbytes) whose body ``emit`` writes,
    ``nbytes`` a literal chunk size."""
    def typer(typingctx: Any, indptr: Any, indices: Any, data: Any, b: Any, out: Any, i: Any, c0: Any,
              nbytes: Any) -> Any:
        if not isinstance(nbytes, types.IntegerLiteral):
            return None
        lanes = nbytes.literal_value * 8 // b.dtype.bitwidth

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            emit(_Codegen(context, builder, signature, args, lanes))
            return context.get_dummy_value()

        return types.void(indptr, indices, data, b, out, i, c0, nbytes), codegen

    typer.__name__, typer.__doc__ = emit.__name__, emit.__doc__
    return intrinsic(typer)


@_chunk_intrinsic
def gather_chunk(g: _Codegen) -> None:
    """out[i, c0:c0 + L] = sum over the stored values j of row i of data[j] * b[indices[j], c0:c0 + L];
    chunks of PREFETCH_CHUNK_BYTES prefetch the chunk of b that the stored value
    PREFETCH_AHEAD places further on needs (in this row or the next ones)."""
    builder, intp = g.builder, g.intp
    start, end = g.stored_range()
    sums = [cgutils.alloca_once_value(builder, ir.Constant(g.vec, None)) for _ in range(2)]
    ahead = g.vec.count * g.align in PREFETCH_CHUNK_BYTES

    def term(j: Any, acc: Any) -> None:
        if ahead:
            g.prefetch_chunk(j)
        builder.store(g.muladd(g.value(j), g.load(g.chunk(3, g.column(j))), builder.load(acc)), acc)

    pairs = builder.ashr(builder.sub(end, start), intp(1))
    with cgutils.for_range(builder, pairs) as loop:
        j = builder.add(start, builder.shl(loop.index, intp(1)))
        term(j, sums[0])
        term(builder.add(j, intp(1)), sums[1])
    last = builder.add(start, builder.shl(pairs, intp(1)))
    with builder.if_then(builder.icmp_signed("<", last, end)):
        term(last, sums[0])
    g.store(g.add(builder.load(sums[0]), builder.load(sums[1])), g.chunk(4, g.row))


@_chunk_intrinsic
def scatter_chunk(g: _Codegen) -> None:
    """out[indices[j], c0:c0 + L] += data[j] * b[i, c0:c0 + L] for the stored values j of row i."""
    builder = g.builder
    start, end = g.stored_range()
    brow = g.load(g.chunk(3, g.row))
    with cgutils.for_range(builder, builder.sub(end, start)) as loop:
        j = builder.add(start, loop.index)
        dst = g.chunk(4, g.column(j))
        g.store(g.muladd(g.value(j), brow, g.load(dst)), dst)


def rows_by_chunks(chunk: Any, itemsize: int) -> Callable[..., None]:
    """A body ``(indptr, indices, data, b, out, lo, hi)`` for numba to compile: ``chunk`` (an
    intrinsic above) over the column chunks of CHUNK_BYTES of each row lo <= i < hi
    (``b.shape[1]`` columns of ``itemsize`` bytes, 4 or 8: the chunks cover any width).
    Narrow rows (a few columns) get vector chunks too: a plain loop would take the stored
    values once per column, in one chain of dependent multiply-adds.

    Rows exactly one chunk wide get a loop of their own: the general row, every chunk size
    inlined, keeps too much live to stay in registers, and narrow products would pay for
    its spills at every row."""
    w256, w128, w64, w32, w16, w8, w4 = (size // itemsize for size in CHUNK_BYTES)  # w4: 0 for 8-byte values

    def rows(indptr, indices, data, b, out, lo, hi):
        n = b.shape[1]
        width = n * itemsize
        if width == 256:
            for i in range(lo, hi):
                chunk(indptr, indices, data, b, out, i, 0, 256)
        elif width == 128:
            for i in range(lo, hi):
                chunk(indptr, indices, data, b, out, i, 0, 128)
        elif width == 64:
            for i in range(lo, hi):
                chunk(indptr, indices, data, b, out, i, 0, 64)
        elif width == 32:
            for i in range(lo, hi):
                chunk(indptr, indices, data, b, out, i, 0, 32)
        elif width == 16:
            for i in range(lo, hi):
                chunk(indptr, indices, data, b, out, i, 0, 16)
        elif width == 8:
            for i in range(lo, hi):
                chunk(indptr, indices, data, b, out, i, 0, 8)
        elif w4 and width == 4:  # (numba drops the branches w4 = 0 rules out)
            for i in range(lo, hi):
                chunk(indptr, indices, data, b, out, i, 0, 4)
        elif width > 0:
            for i in range(lo, hi):
                c = 0
                while c + w256 <= n:
                    chunk(indptr, indices, data, b, out, i, c, 256)
                    c += w256
                if c + w128 <= n:
                    chunk(indptr, indices, data, b, out, i, c, 128)
                    c += w128
                if c + w64 <= n:
                    chunk(indptr, indices, data, b, out, i, c, 64)
                    c += w64
                if c + w32 <= n:
                    chunk(indptr, indices, data, b, out, i, c, 32)
                    c += w32
                if c + w16 <= n:
                    chunk(indptr, indices, data, b, out, i, c, 16)
                    c += w16
                if c + w8 <= n:
                    chunk(indptr, indices, data, b, out, i, c, 8)
                    c += w8
                if w4 and c + w4 <= n:
                    chunk(indptr, indices, data, b, out, i, c, 4)

    return rows
