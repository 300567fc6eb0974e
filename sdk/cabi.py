"""numba speaks the C ABI: write an ``so_kernel_fn`` as a ``numba.cfunc`` and declare it like a
C library's kernel (``sparse_ops.clib.python.register_op``), so C and numba kernels are
interchangeable behind one declaration.

``KERNEL`` is the cfunc signature. Inside, ``ins`` and ``outs`` point at ``so_array``
structs (read them with the accessors below, which take the array's position):

    @numba.cfunc(cabi.KERNEL)
    def mul(ctx, params, n_in, ins, n_out, outs, err):
        x, y = cabi.values(ins, 0, numba.float64), cabi.values(ins, 1, numba.float64)
        o = cabi.values(outs, 0, numba.float64)
        for i in range(o.size):
            o[i] = x[i] * y[i]
        return cabi.OK
"""
from __future__ import annotations

import numba
from numba import types
from numba.extending import intrinsic

OK = 0
ERR_INVALID_ARGUMENT, ERR_UNSUPPORTED = 1, 2
WORDS = 16  # int64 words per so_array (see sparse_ops.clib.abi.Array)
_DTYPE, _SHAPE, _NNZ, _DATA, _INDICES, _INDPTR = 1, 3, 11, 12, 13, 14

SHAPE_WORDS = 10  # int64 words per so_shape: header, ndim and reserved, 8 dims

INFER_SHAPE = types.int32(types.voidptr, types.int32, types.CPointer(types.int64), types.int32,
                          types.CPointer(types.int64), types.voidptr)
KERNEL = types.int32(types.voidptr, types.voidptr, types.int32, types.CPointer(types.int64), types.int32,
                     types.CPointer(types.int64), types.voidptr)


@intrinsic
def _pointer(typingctx, address, dtype):
    """The int64 ``address`` as a pointer to ``dtype`` elements."""
    sig = types.CPointer(dtype.instance_type)(types.int64, dtype)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(signature.return_type))

    return sig, codegen


@numba.njit(inline="always")
def _word(arrays, i, k):
    return numba.carray(arrays, (i + 1) * WORDS)[i * WORDS + k]


@numba.njit(inline="always")
def nnz(arrays, i):
    """Stored values (csr), stored rows (row_sparse) or elements (dense) of array ``i``."""
    return _word(arrays, i, _NNZ)


@numba.njit(inline="always")
def dim(arrays, i, d):
    """Extent ``d`` of array ``i``'s shape."""
    return _word(arrays, i, _SHAPE + d)


@numba.njit(inline="always")
def dtype_code(arrays, i):
    """The SO_DTYPE_* code of array ``i``'s values."""
    return _word(arrays, i, _DTYPE) >> 32


@numba.njit(inline="always")
def index_code(arrays, i):
    """The SO_DTYPE_* code of array ``i``'s index arrays: 4 (int32) or 6 (int64); read it
    before ``indices`` / ``indptr``, whose dtype must match."""
    return _word(arrays, i, 2) & 0xFFFFFFFF


@numba.njit(inline="always")
def values(arrays, i, dtype):
    """Array ``i``'s values as a flat array of ``dtype`` (every element of a dense array)."""
    count = nnz(arrays, i)
    if _word(arrays, i, _DTYPE) & 0xFFFFFFFF == 1:  # row_sparse: nnz rows of shape[1:]
        for d in range(1, (_word(arrays, i, 2) >> 32)):
            count *= dim(arrays, i, d)
    return numba.carray(_pointer(_word(arrays, i, _DATA), dtype), count)


@numba.njit(inline="always")
def indices(arrays, i, dtype):
    """Array ``i``'s column (csr) or row (row_sparse) indices, of ``dtype`` (int32 or int64)."""
    return numba.carray(_pointer(_word(arrays, i, _INDICES), dtype), nnz(arrays, i))


@numba.njit(inline="always")
def indptr(arrays, i, dtype):
    """A csr array's row offsets (shape[0] + 1 of them), of ``dtype``."""
    return numba.carray(_pointer(_word(arrays, i, _INDPTR), dtype), dim(arrays, i, 0) + 1)


@numba.njit(inline="always")
def shape_dim(shapes, i, d):
    """Extent ``d`` of shape ``i`` in an infer_shape callback's input shapes."""
    return numba.carray(shapes, (i + 1) * SHAPE_WORDS)[i * SHAPE_WORDS + 2 + d]


@numba.njit(inline="always")
def shape_ndim(shapes, i):
    """The number of dimensions of shape ``i``."""
    return numba.carray(shapes, (i + 1) * SHAPE_WORDS)[i * SHAPE_WORDS + 1] & 0xFFFFFFFF


@numba.njit(inline="always")
def set_shape(shapes, i, ndim, d, extent):
    """In an infer_shape callback: output ``i`` has ``ndim`` dimensions, extent ``d`` is ``extent``."""
    words = numba.carray(shapes, (i + 1) * SHAPE_WORDS)
    words[i * SHAPE_WORDS + 1] = ndim
    words[i * SHAPE_WORDS + 2 + d] = extent


__all__ = ["KERNEL", "INFER_SHAPE", "shape_dim", "shape_ndim", "set_shape", "OK", "ERR_INVALID_ARGUMENT", "ERR_UNSUPPORTED", "nnz", "dim", "dtype_code", "index_code", "values",
           "indices", "indptr"]
