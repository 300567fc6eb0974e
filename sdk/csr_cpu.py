"""The cpu kernel of csr @ dense (``sparse_ops.sdk.csr.csr_dense`` on the cpu).

The per-row body of ``sdk.csr`` stays the gpu's (one warp a row) and the reference; the cpu
gets its own kernel because what makes it fast there does not exist on a gpu:

- each output row is cut into chunks of 256, 128, 64 and 32 bytes, and each chunk's sums
  live in vector registers while the row's stored values stream past (``_row_chunk``, an
  LLVM intrinsic: numba cannot prove that ``out`` and ``b`` do not overlap, so a loop
  written in Python loads and stores the output row at every stored value, and leaves a
  narrow row to scalar code); two sets of sums, even and odd stored values, keep two
  multiply-add chains in flight;
- the parallel tasks are row ranges holding equal numbers of stored values (plus one per
  row), not equal numbers of rows, so power-law rows do not leave one thread with most of
  the work;
- multiply-adds may fuse (``llvm.fmuladd``, ``fastmath={"contract"}``: no reassociation,
  one rounding less).

The chunks need one dtype for values, ``b`` and ``out``, and C-contiguous ``b`` and
``out``; other operands (and bounds-checking runs, ``SPARSE_OPS_BOUNDSCHECK=1``, which the
intrinsic would bypass) take the plain per-element loop, chosen when numba compiles the
kernel for the operands' types.

Imported by ``sdk.csr`` on the first cpu product (it loads numba). The options are
``sparse_ops.kernels.jit``'s (nogil, disk cache, bounds checking) plus the fused
multiply-adds.
"""
from __future__ import annotations

from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba import prange, types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from sparse_ops import _numba_env
from sparse_ops import kernels as _kernels  # noqa: F401  (picks numba's threading layer first)
from sparse_ops.settings import BOUNDSCHECK

_NONNEG = 0x7FFF_FFFF_FFFF_FFFF
TASKS_PER_THREAD = 4  # parallel tasks per numba thread
_CHAINS = 2  # multiply-add chains per chunk (4 measured no faster)
_CHUNK_DTYPES = (types.float32, types.float64, types.int32, types.int64)


def _item_pointer(context: Any, builder: Any, aryty: Any, ary: Any, inds: list) -> Any:
    return cgutils.get_item_pointer2(context, builder, data=ary.data, shape=cgutils.unpack_tuple(builder, ary.shape),
                                     strides=cgutils.unpack_tuple(builder, ary.strides), layout=aryty.layout,
                                     inds=inds, wraparound=False, boundscheck=False)


@intrinsic
def _row_chunk(typingctx: Any, indptr: Any, indices: Any, data: Any, b: Any, out: Any, i: Any, c0: Any,
               nbytes: Any) -> Any:
    """out[i, c0:c0 + L] = sum over the stored values j of row i of data[j] * b[indices[j], c0:c0 + L],
    L = nbytes / itemsize (``nbytes`` a literal), the L sums held in registers throughout.
    No bounds checks: the csr is validated at the boundary and the caller keeps c0 + L <= n."""
    if not isinstance(nbytes, types.IntegerLiteral):
        return None
    sig = types.void(indptr, indices, data, b, out, i, c0, nbytes)
    dtype = b.dtype
    lanes = nbytes.literal_value * 8 // dtype.bitwidth

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        tys = signature.args
        ip, ix, dt, bb, oo = (context.make_array(t)(context, builder, a) for t, a in zip(tys[:5], args[:5]))
        intp = context.get_value_type(types.intp)
        row, col = (context.cast(builder, a, t, types.intp) for a, t in zip(args[5:7], tys[5:7]))
        vec = ir.VectorType(context.get_data_type(dtype), lanes)
        align = dtype.bitwidth // 8
        undef = ir.Constant(vec, ir.Undefined)
        broadcast = ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes)

        def index(aryty: Any, ary: Any, k: Any) -> Any:
            value = builder.load(_item_pointer(context, builder, aryty, ary, [k]))
            return context.cast(builder, value, aryty.dtype, types.intp)

        def product_term(j: Any, acc: Any) -> Any:
            r = builder.and_(index(tys[1], ix, j), intp(_NONNEG))
            v = builder.load(_item_pointer(context, builder, tys[2], dt, [j]))
            v = builder.shuffle_vector(builder.insert_element(undef, v, ir.IntType(32)(0)), undef, broadcast)
            src = builder.bitcast(_item_pointer(context, builder, tys[3], bb, [r, col]), vec.as_pointer())
            brow = builder.load(src, align=align)
            if isinstance(dtype, types.Float):
                fmuladd = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vec, [vec] * 3),
                                                         f"llvm.fmuladd.v{lanes}f{dtype.bitwidth}")
                return builder.call(fmuladd, [v, brow, acc])
            return builder.add(builder.mul(v, brow), acc)

        start = index(tys[0], ip, row)
        end = index(tys[0], ip, builder.add(row, intp(1)))
        sums = [cgutils.alloca_once_value(builder, ir.Constant(vec, None)) for _ in range(_CHAINS)]
        groups = builder.sdiv(builder.sub(end, start), intp(_CHAINS))
        with cgutils.for_range(builder, groups) as loop:
            j = builder.add(start, builder.mul(loop.index, intp(_CHAINS)))
            for s, acc in enumerate(sums):
                builder.store(product_term(builder.add(j, intp(s)), builder.load(acc)), acc)
        rest = builder.add(start, builder.mul(groups, intp(_CHAINS)))
        with cgutils.for_range(builder, builder.sub(end, rest)) as loop:
            builder.store(product_term(builder.add(rest, loop.index), builder.load(sums[0])), sums[0])
        add = builder.fadd if isinstance(dtype, types.Float) else builder.add
        parts = [builder.load(acc) for acc in sums]
        while len(parts) > 1:
            parts = [add(parts[k], parts[k + 1]) for k in range(0, len(parts), 2)]
        total = parts[0]
        dst = builder.bitcast(_item_pointer(context, builder, tys[4], oo, [row, col]), vec.as_pointer())
        builder.store(total, dst, align=align)
        return context.get_dummy_value()

    return sig, codegen


_OPTS = dict(nogil=True, cache=_numba_env.CACHE_OK, boundscheck=BOUNDSCHECK or None, fastmath={"contract"})


@numba.njit(inline="always", **_OPTS)
def _columns(indptr, indices, data, b, out, i, c0, c1):
    # out[i, c0:c1] by the plain loop: row i's stored values times rows of b
    for c in range(c0, c1):
        out[i, c] = 0
    for j in range(indptr[i], indptr[i + 1]):
        r, v = indices[j] & _NONNEG, data[j]
        for c in range(c0, c1):
            out[i, c] += v * b[r, c]


def _row(indptr, indices, data, b, out, i):  # out[i] = row i of the csr @ b; compiled by the overload below
    raise NotImplementedError("compiled only")


@overload(_row, inline="always", jit_options=_OPTS)
def _row_overload(indptr, indices, data, b, out, i):
    chunked = (not BOUNDSCHECK and data.dtype == b.dtype == out.dtype and b.dtype in _CHUNK_DTYPES
               and b.layout == "C" and out.layout == "C")
    if not chunked:
        return lambda indptr, indices, data, b, out, i: _columns(indptr, indices, data, b, out, i, 0, b.shape[1])
    size = b.dtype.bitwidth // 8
    w256, w128, w64, w32 = 256 // size, 128 // size, 64 // size, 32 // size  # columns per chunk

    def chunks(indptr, indices, data, b, out, i):
        n, c = b.shape[1], 0
        while c + w256 <= n:
            _row_chunk(indptr, indices, data, b, out, i, c, 256)
            c += w256
        if c + w128 <= n:
            _row_chunk(indptr, indices, data, b, out, i, c, 128)
            c += w128
        if c + w64 <= n:
            _row_chunk(indptr, indices, data, b, out, i, c, 64)
            c += w64
        if c + w32 <= n:
            _row_chunk(indptr, indices, data, b, out, i, c, 32)
            c += w32
        if c < n:
            _columns(indptr, indices, data, b, out, i, c, n)

    return chunks


@numba.njit(**_OPTS)
def csr_dense_rows(indptr, indices, data, b, out, lo, hi):
    """out[lo:hi] = (rows lo..hi-1 of the csr) @ b, every row of out written."""
    for i in range(lo & _NONNEG, hi):
        _row(indptr, indices, data, b, out, i)


@numba.njit(parallel=True, **_OPTS)
def csr_dense_parallel(indptr, indices, data, b, out, bounds):
    """``csr_dense_rows`` over the row ranges ``bounds[t]..bounds[t + 1]``, one task each."""
    for t in prange(bounds.shape[0] - 1):
        csr_dense_rows(indptr, indices, data, b, out, bounds[t], bounds[t + 1])


@numba.njit(**_OPTS)
def balanced_bounds(indptr, tasks):
    """``tasks + 1`` row boundaries splitting the rows into ranges of about equal work,
    counting each stored value and each row (its write) as one unit: for each cut, the
    first row whose work before it reaches that share (a binary search, nothing the size
    of the csr allocated)."""
    rows = indptr.shape[0] - 1
    total = indptr[rows] + rows
    bounds = np.empty(tasks + 1, dtype=np.int64)
    bounds[0], bounds[tasks] = 0, rows
    for t in range(1, tasks):
        target = (total * t + tasks - 1) // tasks
        lo, hi = 0, rows
        while lo < hi:
            mid = (lo + hi) // 2
            if indptr[mid] + mid < target:
                lo = mid + 1
            else:
                hi = mid
        bounds[t] = lo
    return bounds


def csr_dense(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, b: np.ndarray, out: np.ndarray,
              parallel: bool) -> None:
    """out = A @ b for a csr A and a C-contiguous b, on the numba threads when ``parallel``."""
    rows = out.shape[0]
    threads = numba.get_num_threads() if parallel else 1
    if threads > 1 and rows > 1:
        csr_dense_parallel(indptr, indices, data, b, out, balanced_bounds(indptr, threads * TASKS_PER_THREAD))
    else:
        csr_dense_rows(indptr, indices, data, b, out, 0, rows)
