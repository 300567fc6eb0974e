"""Linear algebra: ``dot`` for every pair of storage types, ``FullyConnected``, and MXNet's dense
matrix family on the last two axes (``_linalg_potrf``, ``_linalg_gemm2``, ``_linalg_trsm``).

``dot(lhs, rhs, transpose_a, transpose_b)`` is the matrix product ``op(lhs) @ op(rhs)``.
Beyond matrices it follows MXNet: lhs reduces its last axis (its first with
``transpose_a``), rhs its first (its last with ``transpose_b``), the output has the
remaining axes of lhs then of rhs, and two vectors give shape ``(1,)``.

Output storage types follow MXNet 1.9: ``csr.T @ dense/row_sparse`` gives ``row_sparse``
(only the columns ``lhs`` stores can be non-zero), ``dense @ csr`` (either
``transpose_b``) gives ``csr``, and ``csr @ csr`` gives ``csr`` (SpGEMM; MXNet densified,
and its face here keeps that dense result); everything else is dense. ``forward_stype`` overrides the
choice, as MXNet's parameter of the same name does.

Storage-aware kernels cover every pair with one sparse operand (``c,d``, ``c,r``,
``d,c``, ``r,d``, ``d,r``) under every transpose flag, and ``c,c`` (SpGEMM, a csr result
under every flag: canonical, with sums that cancel to exactly zero dropped as SciPy's
``A @ B`` drops them); ``r,r`` and ``r,c`` densify (fallback). A csr operand's gradient, with
any other operand, is that of its stored values: a csr of its own structure, the product
sampled there (``_sampled_dot``, itself differentiable), never the dense rows x columns
product (MXNet refuses a csr gradient of ``dot``). The csr kernels are numba on the cpu and numba.cuda on a gpu
(``sparse_ops.cuda.kernels``); the row_sparse ones are array-module code for both
devices. The sparse kernels take a matrix lhs and a matrix or vector rhs; other shapes
are densified inside them.

On the cpu, ``csr.T @ dense``, ``csr.T @ row_sparse`` and ``csr @ row_sparse`` cost
O(nnz + rows) time and memory whatever the column count (hashed feature spaces of up to
2**63 columns, row_sparse tables of as many rows): where the columns far outnumber the
stored values, the stored columns are renumbered by a sort of their ids instead of a
table per column (``_sorts``); few columns keep the table, which is faster there.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .. import alloc
from ..dtypes import in_input_dtypes, promote_types, require_one_dtype
from ..ndarray import CSRNDArray, NDArray, RowSparseNDArray
from ..registry import Op, Param, kernel, register
from ..sdk import capacity as cap
from ..sdk import csr as sdk_csr
from ._util import T, index_dtype_for, is_host, kernel_module, numba_values

_BOTH = ("cpu", "gpu")


# ---- writing a result into an output of any storage type ---------------------------------------
def _buffer(xp: Any, out: NDArray, shape: tuple, dtype: np.dtype, operand: Any) -> Any:
    """``out``'s memory as a 2-d ``shape`` array when the kernel may write the product
    there (dense, of ``dtype``, C-contiguous, not the operand it reads), else a new array."""
    if out.stype == "default":
        mem = out.data
        if mem.dtype == dtype and mem.flags.c_contiguous and not xp.may_share_memory(mem, operand):
            return mem.reshape(shape)
    return xp.empty(shape, dtype=dtype)


def _dense_buffer(out: NDArray, dtype: np.dtype, operand: np.ndarray) -> np.ndarray:
    """A 2-d (a 1-d output as one column) C-contiguous array for a numba kernel to write
    the dense product into: ``out``'s own memory when it can (not when ``out=`` is the
    dense ``operand`` the kernel reads), else a new array."""
    shape = (out.shape[0], out.shape[1] if len(out.shape) == 2 else 1)
    return _buffer(np, out, shape, dtype, operand)


def _emit_dense(ctx, out: NDArray, values: Any, sources: tuple = ()) -> None:
    """Store the dense product ``values`` (out's shape, or its 2-d form) into ``out``. A
    sparse ``out`` keeps int32 indices when the index arrays ``sources`` are all int32."""
    values = values.reshape(out.shape)
    if out.stype == "default":
        if not ctx.xp.may_share_memory(values, out.data):
            out.data[...] = values
        return
    result = NDArray(values.astype(out.dtype, copy=False), out.device).tostype(out.stype)
    if not sources:
        ctx.adopt(out, result)
        return
    idt = index_dtype_for(*sources, nnz=result.nnz, shape=out.shape)
    if out.stype == "csr":
        ctx.set_csr(out, result.data, result.indices.astype(idt, copy=False), result.indptr.astype(idt, copy=False))
    else:
        ctx.set_row_sparse(out, result.data, result.indices.astype(idt, copy=False))


def _emit_rows(ctx, out: NDArray, values: Any, rows: Any) -> None:
    """Store a product known to be zero outside the sorted rows ``rows`` (``values`` holds
    those rows) into ``out``."""
    values = values.reshape((rows.shape[0], *out.shape[1:])).astype(out.dtype, copy=False)
    if out.stype == "row_sparse":
        ctx.set_row_sparse(out, values, rows)
    elif out.stype == "default":
        out.data[...] = 0
        out.data[rows] = values
    else:
        ctx.adopt(out, RowSparseNDArray._trusted(values, rows, out.shape, out.device).tostype("csr"))


def _emit_csr(ctx, out: NDArray, values: Any, indices: Any, indptr: Any) -> None:
    """Store a csr result (canonical components, values widened for the kernels) into
    ``out`` of any storage type (``forward_stype`` may ask for another)."""
    values = values.astype(out.dtype, copy=False)
    if out.stype == "csr":
        ctx.set_csr(out, values, indices, indptr)
        return
    result = CSRNDArray._trusted(values, indices, indptr, out.shape, out.device).tostype(out.stype)
    if out.stype == "default":
        out.data[...] = result.data
    else:
        ctx.adopt(out, result)


def _size(shape: tuple) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _as_matrix(values: Any) -> Any:
    """A 1-d array as one column; 2-d arrays unchanged."""
    return values.reshape(values.shape[0], 1) if values.ndim == 1 else values


def _kernel_values(a: np.ndarray) -> np.ndarray:
    """Values as the numba kernels take them: float16 widened to float32 (numba has no
    cpu float16) and int32 to int64 (one integer type: fewer specialisations to compile;
    the cast back gives int32's wrap-around result)."""
    dtype = a.dtype
    if dtype == np.float16:
        return a.astype(np.float32)
    return a.astype(np.int64) if dtype == np.int32 else a


def _promoted(out: NDArray, *operands: NDArray) -> tuple[NDArray, ...]:
    """The operands in the output's (promoted) dtype: a copy of an operand of another dtype
    only, since the numba kernels compute in one dtype."""
    return tuple(x.astype(out.dtype, copy=False) for x in operands)


def _dense_rhs(rhs: NDArray, transpose: bool) -> np.ndarray:
    """The dense, C-contiguous 2-d matrix ``op(rhs)`` for a csr-lhs kernel (a row_sparse
    rhs that must be transposed is densified)."""
    b = rhs.data if rhs.stype == "default" else rhs.tostype("default").data
    b = _as_matrix(_kernel_values(b))
    return np.ascontiguousarray(b.T if transpose and rhs.ndim == 2 else b)


def _stored_rows(rsp: NDArray) -> np.ndarray:
    """The stored rows of a row_sparse array as a C-contiguous 2-d matrix."""
    return np.ascontiguousarray(_as_matrix(_kernel_values(rsp.data)))


# ---- csr helpers (NumPy and numba, cpu) -----------------------------------------------------------
def _csr_parts(x: NDArray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(indptr, indices, values) of csr ``x``, values as the kernels take them."""
    return x.indptr, x.indices, _kernel_values(x.data)


def _take_rows(parts: tuple, rows: np.ndarray) -> tuple:
    """csr parts of the rows ``rows`` (in that order) of the csr ``parts``: O(len(rows) + the
    values they hold)."""
    return sdk_csr.take_rows(None, *parts, rows)


# A column count above this many times the stored values (plus a little) is renumbered by a
# sort of the stored columns instead of a count per column: hashed feature spaces (2**27 ..
# 2**63 columns) then cost O(nnz log nnz) time and O(nnz) memory; few columns keep the count.
SORT_RATIO, SORT_MIN = 4, 4096


def _sorts(columns: int, stored: int) -> bool:
    """Whether a lookup over ``columns`` ids, ``stored`` of them in use, goes by sorting
    (the per-column arrays would dwarf the stored values) rather than by a dense table."""
    return columns > SORT_RATIO * stored + SORT_MIN


def _keep_columns(parts: tuple, rows: Any, columns: int, ctx: Any = None) -> tuple:
    """csr parts keeping the columns ``c`` of the csr ``parts`` (``columns`` of them) that
    appear in the sorted unique ``rows``, renumbered to their position in ``rows``
    (csr @ row_sparse: only the columns at the stored rows count); on ``ctx``'s device
    (None: the cpu)."""
    xp = np if ctx is None else ctx.xp
    indptr, indices, values = parts
    if not _sorts(columns, indices.shape[0] + rows.shape[0]):
        return sdk_csr.keep_columns(ctx, *parts, _row_slots(xp, rows, columns))
    if rows.shape[0] == 0 or indices.shape[0] == 0:
        return xp.zeros_like(indptr), indices[:0], values[:0]
    pos = xp.minimum(xp.searchsorted(rows, indices), rows.shape[0] - 1)
    keep = rows[pos] == indices
    kept_before = xp.zeros(indices.shape[0] + 1, dtype=np.int64)
    xp.cumsum(keep, out=kept_before[1:])
    return kept_before[indptr].astype(indptr.dtype), pos[keep].astype(indices.dtype), values[keep]


def _row_slots(xp: Any, rows: Any, count: int) -> Any:
    """For each of ``count`` ids: its position in the sorted unique ``rows``, or -1 (a dense
    table: only for counts near the number of values looked up, see ``_sorts``)."""
    slot = xp.full(count, -1, dtype=np.int64)
    slot[rows] = xp.arange(rows.shape[0])
    return slot


def _renumbered_columns(xp: Any, parts: tuple, columns: int) -> tuple[Any, tuple, int]:
    """(the stored columns or None, csr parts, column count): for a column count far above
    the stored values (``_sorts``), the columns renumbered to positions among the sorted
    stored ones, so per-column arrays follow nnz; else the parts as they are."""
    indptr, indices, values = parts
    if not _sorts(columns, indices.shape[0]):
        return None, parts, columns
    stored, position = xp.unique(indices, return_inverse=True)
    return stored, (indptr, position.reshape(-1).astype(indices.dtype, copy=False), values), stored.shape[0]


def _csr_times_dense(parts: tuple, b: np.ndarray, out: np.ndarray) -> None:
    """out = A @ b for the csr parts of A and a C-contiguous dense b."""
    sdk_csr.csr_dense(None, *parts, b, out)


def _stored_columns(indices: np.ndarray, columns: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the sorted distinct columns ``indices`` holds, the values per such column, ``indices``
    renumbered to positions among them): a count per column when ``columns`` is small
    beside nnz, a sort of the stored columns otherwise (hashed feature spaces)."""
    kernels = kernel_module("linalg")
    if _sorts(columns, indices.shape[0]):
        renumbered = np.empty_like(indices)
        cols, counts = kernels.renumber_columns(indices, renumbered)
        return cols, counts, renumbered
    counts = kernels.column_counts(indices, columns)
    cols = np.flatnonzero(counts)
    if cols.shape[0] == columns:  # every column stored: no renumbering
        return cols, counts, indices
    slot = np.zeros(columns, dtype=indices.dtype)
    slot[cols] = np.arange(cols.shape[0], dtype=indices.dtype)
    return cols, counts[cols], slot[indices]


def _csr_t_times(ctx, parts: tuple, columns: int, b: np.ndarray, out: NDArray, index_source: Any) -> None:
    """out = A.T @ b for the csr parts of A (``columns`` columns). The product is zero
    outside the columns A stores: a row_sparse result, whose indices keep the dtype of
    ``index_source`` when it is int32 and the shape allows.

    The stored columns are renumbered first (``_stored_columns``), so time and memory
    follow nnz, not the column count; the product over them runs serial or in parallel by
    the kernels' own policy (``kernels.linalg.csr_t_dense_product``).
    """
    kernels = kernel_module("linalg")
    indptr, indices, values = parts
    cols, counts, indices = _stored_columns(indices, columns)
    product = alloc.zeros((cols.shape[0], b.shape[1]), values.dtype)
    kernels.csr_t_dense_product(indptr, indices, values, b, counts, product)
    _emit_rows(ctx, out, product, cols.astype(index_dtype_for(index_source, shape=out.shape), copy=False))


# ---- csr products on a gpu (numba.cuda kernels in sparse_ops.cuda.kernels) ------------------------
def _gpu_dense_rhs(xp: Any, rhs: NDArray, transpose: bool) -> Any:
    """``_dense_rhs`` on a gpu: the dense, C-contiguous 2-d ``op(rhs)``, float16 widened."""
    b = rhs.data if rhs.stype == "default" else rhs.tostype("default").data
    b = _as_matrix(numba_values(b))
    return xp.ascontiguousarray(b.T if transpose and rhs.ndim == 2 else b)





# ---- the operators -------------------------------------------------------------------------------
# ---- capacity of a sparse product ---------------------------------------------------------------------
def _nonempty(x: cap.Stored, rows: bool) -> int:
    """How many rows (``rows``) or columns of matrix ``x`` may hold a non-zero: a csr's are
    at most its stored values, a row_sparse's rows its stored rows (its columns all, unless
    it stores nothing)."""
    n = x.rows if rows else x.cols
    if x.stype == "csr":
        return min(n, int(x.nnz))
    if x.stype == "row_sparse":
        return int(x.nnz) if rows else (n if x.nnz else 0)
    return n


def _dot_capacity(op: "Dot", out: cap.Stored, lhs: cap.Stored, rhs: cap.Stored) -> int:
    """A row of op(lhs) @ op(rhs) is non-zero only where op(lhs) has a non-empty row, a column
    only where op(rhs) has a non-empty column: a csr result stores at most their product, a
    row_sparse one at most those rows (``csr.T @ dense``: min(columns, nnz) of the csr).
    Operands other than matrices: the dense size."""
    if len(lhs.shape) != 2 or len(rhs.shape) != 2 or len(out.shape) != 2:
        return out.dense_count()
    rows = _nonempty(lhs, rows=not op.transpose_a)
    if out.stype == "row_sparse":
        return rows
    return rows * _nonempty(rhs, rows=op.transpose_b)


def _product_gradient(g: NDArray, lhs: NDArray, rhs: NDArray, ta: bool, tb: bool,
                      needs: Any = (True, True)) -> list[NDArray | None]:
    """[d lhs, d rhs] of ``op(lhs) @ op(rhs)`` (matrices) for the head gradient ``g`` (dense,
    or csr for ``_sampled_dot``'s): d op(lhs) = g @ op(rhs).T and d op(rhs) = op(lhs).T @ g,
    each one dot with the transposes folded into its flags; a csr operand's gradient at its
    stored values only (``_sampled_dot``); a dense lhs's dense. None where ``needs`` says no."""
    d_lhs = d_rhs = None
    if needs[0]:
        if lhs.stype == "csr":
            d_lhs = (T._sampled_dot(lhs, rhs, g, transpose_a=tb, transpose_b=True) if ta else
                     T._sampled_dot(lhs, g, rhs, transpose_b=not tb))
        elif ta:
            d_lhs = T.dot(rhs, g, transpose_a=tb, transpose_b=True, forward_stype="default")
        else:
            d_lhs = T.dot(g, rhs, transpose_b=not tb, forward_stype="default")
    if needs[1]:
        # a csr head (second order of a csr operand) keeps a dense rhs's gradient dense; a csr lhs
        # with a dense head gives a row_sparse one (MXNet's rule)
        hint = {"forward_stype": "default"} if g.stype == "csr" and lhs.stype != "csr" else {}
        if rhs.stype == "csr":
            d_rhs = (T._sampled_dot(rhs, g, lhs, transpose_a=True, transpose_b=ta) if tb else
                     T._sampled_dot(rhs, lhs, g, transpose_a=not ta))
        elif tb:
            d_rhs = T.dot(g, lhs, transpose_a=True, transpose_b=ta, **hint)
        else:
            d_rhs = T.dot(lhs, g, transpose_a=not ta, **hint)
    return [d_lhs, d_rhs]


def _shaped(x: NDArray, shape: tuple) -> NDArray:
    """``x`` reshaped to ``shape``, or itself when it has that shape already (a csr operand
    of a vector product keeps its storage: reshape has dense kernels only)."""
    return x if tuple(x.shape) == tuple(shape) else T.reshape(x, shape=shape)


@register("dot")
class Dot(Op):
    """op(lhs) @ op(rhs), op = transpose where asked; N-d operands as in MXNet (lhs
    reduces its last axis, or its first with transpose_a; rhs its first, or its last with
    transpose_b; two vectors give shape (1,)). Storage types (MXNet 1.9): csr.T @
    default/row_sparse -> row_sparse (transpose_a only), default @ csr -> csr (not
    transpose_a), csr @ csr -> csr (any flags; SpGEMM), otherwise default; ``forward_stype`` forces the output storage type."""

    trusted = True  # built-in kernels, tested against NumPy/SciPy references

    arguments = ("lhs", "rhs")
    backward_needs_inputs = ("lhs", "rhs")
    transpose_a = Param(bool, False, doc="use the transpose of lhs")
    transpose_b = Param(bool, False, doc="use the transpose of rhs")
    forward_stype = Param(str, None, doc="output storage type (None: MXNet's choice)",
                          choices=("default", "row_sparse", "csr"))
    partition, partition_args = "rows", ("lhs",)
    capacity = cap.computed(_dot_capacity, "min(rows, nnz) of op(lhs) [x min(columns, nnz) of op(rhs), for csr]")

    def partitioning(self, lhs, rhs):
        """lhs @ rhs: lhs's row blocks give the output's (rhs whole); lhs.T @ rhs: both are cut
        on the contracted rows and the per-block products summed (csr.T @ dense -> row_sparse)."""
        if not self.transpose_a:
            return ("rows", ("lhs",)) if len(lhs) >= 2 else (None, None)
        return ("sum", ("lhs", "rhs")) if not self.transpose_b else (None, None)

    def _split(self, lhs: tuple, rhs: tuple) -> tuple[tuple, int, tuple]:
        """(output axes from lhs, reduced length, output axes from rhs), MXNet's rule: lhs
        reduces its last axis (its first with transpose_a), rhs its first (its last with
        transpose_b); a 1-d operand contributes no output axis."""
        if not lhs or not rhs:
            raise ValueError(f"dot needs operands of at least one dimension, got shapes {lhs} and {rhs}")
        k, out_l = (lhs[0], lhs[1:]) if self.transpose_a else (lhs[-1], lhs[:-1])
        k_rhs, out_r = (rhs[-1], rhs[:-1]) if self.transpose_b else (rhs[0], rhs[1:])
        if k != k_rhs:
            raise ValueError(
                f"dot: shapes {lhs}{' (transposed)' if self.transpose_a else ''} and "
                f"{rhs}{' (transposed)' if self.transpose_b else ''} do not align: {k} != {k_rhs}")
        return tuple(out_l), k, tuple(out_r)

    def infer_shape(self, lhs, rhs):
        out_l, _, out_r = self._split(lhs, rhs)
        return [out_l + out_r if len(lhs) > 1 or len(rhs) > 1 else (1,)]

    def _matrix_shapes(self, lhs: tuple, rhs: tuple) -> tuple[tuple, tuple, tuple]:
        """The 2-d forms (as stored, before any transpose) of lhs, rhs and the output."""
        out_l, k, out_r = self._split(lhs, rhs)
        m, n = _size(out_l), _size(out_r)
        return ((k, m) if self.transpose_a else (m, k)), ((n, k) if self.transpose_b else (k, n)), (m, n)

    def infer_type(self, lhs: np.dtype, rhs: np.dtype) -> list[np.dtype]:
        return [promote_types(lhs, rhs)]  # NumPy's rule; the sparse kernels get promoted operands

    def infer_storage_type(self, lhs, rhs):
        if self.forward_stype is not None:
            return [self.forward_stype]
        if lhs == "csr" and rhs == "csr":  # SpGEMM, any transpose flags (MXNet 1.9 densified)
            return ["csr"]
        if lhs == "csr" and rhs != "csr" and self.transpose_a and not self.transpose_b:
            return ["row_sparse"]
        if lhs == "default" and rhs == "csr" and not self.transpose_a:
            return ["csr"]
        return ["default"]

    @kernel(device=_BOTH)
    def dense(self, ctx, lhs, rhs, out):
        shape_l, shape_r, shape_out = self._matrix_shapes(lhs.shape, rhs.shape)
        a, b = lhs.reshape(shape_l), rhs.reshape(shape_r)
        ctx.xp.matmul(a.T if self.transpose_a else a, b.T if self.transpose_b else b,
                      out=out.reshape(shape_out))

    def _densified(self, ctx, lhs, rhs, out) -> None:
        """The sparse kernels' way out for the shapes they do not take (N-d operands, a
        1-d lhs): the dense product, stored into ``out`` of any storage type."""
        xp = ctx.xp
        result = xp.empty(out.shape, dtype=out.dtype)
        self.dense(ctx, *(x.data if x.stype == "default" else x.tostype("default").data for x in (lhs, rhs)),
                   result)
        _emit_dense(ctx, out, result)

    @kernel(device="cpu", stypes=[("csr", "default"), ("csr", "row_sparse")])
    @sdk_csr.runs_csr_dense(lambda op: None if op.transpose_a or op.transpose_b else False)
    def csr_lhs(self, ctx, lhs, rhs, out):
        if lhs.data.dtype != rhs.data.dtype:  # mixed dtypes: the kernels take one
            lhs, rhs = _promoted(out, lhs, rhs)
        if lhs.ndim != 2 or rhs.ndim > 2:
            return self._densified(ctx, lhs, rhs, out)
        parts = _csr_parts(lhs)
        plain_rsp = rhs.stype == "row_sparse" and not (self.transpose_b and rhs.ndim == 2)
        if self.transpose_a:
            if plain_rsp:  # only the rows of lhs that rhs stores matter
                parts, b = _take_rows(parts, rhs.indices), _stored_rows(rhs)
            else:
                b = _dense_rhs(rhs, self.transpose_b)
            _csr_t_times(ctx, parts, lhs.shape[1], b, out, lhs.indices)
            return
        if plain_rsp:  # only the columns of lhs where rhs stores a row matter
            parts, b = _keep_columns(parts, rhs.indices, lhs.shape[1]), _stored_rows(rhs)
        else:
            b = _dense_rhs(rhs, self.transpose_b)
        buf = _dense_buffer(out, parts[2].dtype, b)
        _csr_times_dense(parts, b, buf)
        _emit_dense(ctx, out, buf, (lhs.indices, lhs.indptr))

    @kernel(device="cpu", stypes=("default", "csr"))
    def csr_rhs(self, ctx, lhs, rhs, out):
        if lhs.data.dtype != rhs.data.dtype:  # mixed dtypes: the kernels take one
            lhs, rhs = _promoted(out, lhs, rhs)
        if lhs.ndim != 2 or rhs.ndim > 2:
            return self._densified(ctx, lhs, rhs, out)
        parts = _csr_parts(rhs)
        a = _kernel_values(lhs.data)
        a = a.T if self.transpose_a else a
        if self.transpose_b:  # a @ rhs.T = (rhs @ a.T).T
            product = np.empty((rhs.shape[0], a.shape[0]), dtype=parts[2].dtype)
            _csr_times_dense(parts, np.ascontiguousarray(a.T), product)
            product = product.T
        else:
            a = np.ascontiguousarray(a)
            product = _dense_buffer(out, parts[2].dtype, a)
            kernel_module("linalg").dense_csr_row(None, a.shape[0], a, *parts, product,
                                                  work=a.shape[0] * max(parts[1].shape[0], a.shape[1]))
        _emit_dense(ctx, out, product, (rhs.indices, rhs.indptr))

    @kernel(device="cpu", stypes=("csr", "csr"))
    def csr_csr(self, ctx, lhs, rhs, out):
        """op(lhs) @ op(rhs) for two csr matrices (SpGEMM, ``sparse_ops.kernels.spgemm``): a
        canonical csr, exact zeros from cancellation dropped as SciPy's ``A @ B`` drops them.
        A transposed operand is transposed structurally first."""
        if lhs.data.dtype != rhs.data.dtype:  # mixed dtypes: the kernels take one
            lhs, rhs = _promoted(out, lhs, rhs)
        a, b = _csr_parts(lhs), _csr_parts(rhs)
        if self.transpose_a:
            a = sdk_csr.transpose(None, lhs.shape[1], *a)
        if self.transpose_b:
            b = sdk_csr.transpose(None, rhs.shape[1], *b)
        idt = index_dtype_for(lhs.indices, rhs.indices, shape=out.shape)
        indptr, indices, values = kernel_module("spgemm").spgemm(a, b, out.shape[1], idt)
        _emit_csr(ctx, out, values, indices, indptr)

    @kernel(device="gpu", stypes=("csr", "csr"))
    def csr_csr_gpu(self, ctx, lhs, rhs, out):
        """``csr_csr`` on a gpu (``sparse_ops.cuda.spgemm``): the same two passes, a thread
        per output row."""
        if lhs.data.dtype != rhs.data.dtype:  # mixed dtypes: the kernels take one
            lhs, rhs = _promoted(out, lhs, rhs)
        from ..cuda import spgemm as gs
        from ..device import allocating_on

        a = (lhs.indptr, lhs.indices, numba_values(lhs.data))
        b = (rhs.indptr, rhs.indices, numba_values(rhs.data))
        with allocating_on(ctx.device):
            if self.transpose_a:
                a = sdk_csr.transpose(ctx, lhs.shape[1], *a)
            if self.transpose_b:
                b = sdk_csr.transpose(ctx, rhs.shape[1], *b)
            idt = index_dtype_for(lhs.indices, rhs.indices, shape=out.shape)
            indptr, indices, values = gs.spgemm(ctx, a, b, out.shape[1], idt)
            _emit_csr(ctx, out, values, indices, indptr)

    @kernel(device="gpu", stypes=[("csr", "default"), ("csr", "row_sparse")])
    def csr_lhs_gpu(self, ctx, lhs, rhs, out):
        """``csr_lhs`` on a gpu. csr.T @ b transposes lhs on the gpu and takes row-wise
        products (no atomics); csr @ row_sparse keeps lhs's columns at rhs's stored rows.
        Hashed column counts are renumbered by sorting, as on the cpu: memory follows nnz."""
        if lhs.data.dtype != rhs.data.dtype:  # mixed dtypes: the kernels take one
            lhs, rhs = _promoted(out, lhs, rhs)
        from ..cuda import kernels as gk
        from ..device import allocating_on

        if lhs.ndim != 2 or rhs.ndim > 2:
            return self._densified(ctx, lhs, rhs, out)
        xp = ctx.xp
        parts = (lhs.indptr, lhs.indices, numba_values(lhs.data))
        plain_rsp = rhs.stype == "row_sparse" and not (self.transpose_b and rhs.ndim == 2)
        with allocating_on(ctx.device):
            if plain_rsp:
                b = xp.ascontiguousarray(_as_matrix(numba_values(rhs.data)))
            else:
                b = _gpu_dense_rhs(xp, rhs, self.transpose_b)
            if self.transpose_a:
                if plain_rsp:  # only the rows of lhs that rhs stores matter
                    parts = gk.take_rows(ctx, parts, rhs.indices)
                stored, parts, columns = _renumbered_columns(xp, parts, lhs.shape[1])
                cols, product = gk.csr_t_times_dense(ctx, parts, columns, b)
                if stored is not None:
                    cols = stored[cols]
                _emit_rows(ctx, out, product,
                           cols.astype(index_dtype_for(lhs.indices, shape=out.shape), copy=False))
                return
            product = _buffer(xp, out, (lhs.shape[0], b.shape[1]), parts[2].dtype, b)
            if plain_rsp:
                gk.csr_times_dense(ctx, _keep_columns(parts, rhs.indices, lhs.shape[1], ctx), b, product)
            else:
                gk.csr_times_dense(ctx, parts, b, product)
            _emit_dense(ctx, out, product, (lhs.indices, lhs.indptr))

    @kernel(device="gpu", stypes=("default", "csr"))
    def csr_rhs_gpu(self, ctx, lhs, rhs, out):
        """``csr_rhs`` on a gpu, through transposes: a @ B = (B.T @ a.T).T with B.T built
        on the gpu, and a @ B.T = (B @ a.T).T."""
        if lhs.data.dtype != rhs.data.dtype:  # mixed dtypes: the kernels take one
            lhs, rhs = _promoted(out, lhs, rhs)
        from ..cuda import kernels as gk
        from ..device import allocating_on

        if lhs.ndim != 2 or rhs.ndim > 2:
            return self._densified(ctx, lhs, rhs, out)
        xp = ctx.xp
        parts = (rhs.indptr, rhs.indices, numba_values(rhs.data))
        a = numba_values(lhs.data)
        a = a.T if self.transpose_a else a
        with allocating_on(ctx.device):
            a_t = xp.ascontiguousarray(a.T)
            if not self.transpose_b:
                parts = gk.csr_transpose(ctx, parts, rhs.shape[1])[0]
            product = xp.empty((parts[0].shape[0] - 1, a_t.shape[1]), dtype=parts[2].dtype)
            gk.csr_times_dense(ctx, parts, a_t, product)
            _emit_dense(ctx, out, product.T, (rhs.indices, rhs.indptr))

    @kernel(device=_BOTH, stypes=("row_sparse", "default"))
    def rsp_lhs(self, ctx, lhs, rhs, out):
        if lhs.ndim != 2 or rhs.ndim > 2:
            return self._densified(ctx, lhs, rhs, out)
        b = rhs.data.T if self.transpose_b else rhs.data
        rows, stored = lhs.indices, lhs.data
        if self.transpose_a:  # lhs.T @ b: the stored rows of lhs meet the same rows of b
            _emit_dense(ctx, out, ctx.xp.matmul(stored.T, b[rows]), (rows,))
        else:  # only the stored rows of the product are non-zero
            _emit_rows(ctx, out, ctx.xp.matmul(stored, b), rows)

    @kernel(device=_BOTH, stypes=("default", "row_sparse"))
    def rsp_rhs(self, ctx, lhs, rhs, out):
        if lhs.ndim != 2 or rhs.ndim > 2:
            return self._densified(ctx, lhs, rhs, out)
        xp = ctx.xp
        a = lhs.data.T if self.transpose_a else lhs.data
        rows, stored = rhs.indices, rhs.data
        if self.transpose_b and rhs.ndim == 2:  # a @ rhs.T: the stored rows are output columns
            product = xp.zeros(out.shape, dtype=out.dtype)
            product[:, rows] = xp.matmul(a, stored.T)
        else:  # only the columns of a at rhs's stored rows matter
            product = xp.matmul(a[:, rows], stored)
        _emit_dense(ctx, out, product, (rows,))

    @in_input_dtypes
    def gradient(self, out_grads, inputs, outputs, needs=None):
        """d lhs = g @ op(rhs).T and d rhs = op(lhs).T @ g, each written as one dot with the
        transposes folded into its flags. A csr operand's gradient is that of its stored
        values: a csr of its own structure, the product sampled there (``_sampled_dot``), the
        dense product never formed (memory and time follow its stored values, whatever its
        column count: hashed features). A csr lhs gives a row_sparse d rhs (MXNet); a dense
        lhs always gets a dense gradient (``dense @ csr`` would otherwise be csr). Other than
        matrices, operands are reshaped to their 2-d forms and back. An input that needs no
        gradient (a constant csr data matrix, say) gets none computed."""
        (g,) = out_grads
        lhs, rhs = inputs
        if lhs.ndim == 2 and rhs.ndim == 2:
            return self._matrix_gradient(g, lhs, rhs, needs or (True, True))
        shape_l, shape_r, shape_out = self._matrix_shapes(lhs.shape, rhs.shape)
        if lhs.ndim == 2 and rhs.ndim == 1:  # d rhs needs no reshape (a csr lhs keeps it row_sparse)
            d_lhs = self._matrix_gradient(T.reshape(g, shape=shape_out), lhs, T.reshape(rhs, shape=shape_r))[0]
            return [d_lhs, T.dot(lhs, g, transpose_a=not self.transpose_a)]
        d_lhs, d_rhs = self._matrix_gradient(_shaped(g, shape_out), _shaped(lhs, shape_l), _shaped(rhs, shape_r))
        return [_shaped(d_lhs, lhs.shape), _shaped(d_rhs, rhs.shape)]

    def _matrix_gradient(self, g: NDArray, lhs: NDArray, rhs: NDArray,
                         needs: Any = (True, True)) -> list[NDArray | None]:
        return _product_gradient(g, lhs, rhs, self.transpose_a, self.transpose_b, needs)

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: every storage pair with a kernel (csr @ dense, dense @ csr,
        csr.T @ dense and row_sparse, dense @ row_sparse, row_sparse @ dense, dense @ csr.T),
        dense @ dense, a csr @ row_sparse fallback and two vectors."""
        from . import _samples

        A = _samples.array
        return [[A((3, 4), seed=1), A((4, 2), seed=2)],
                [A((3, 4), "csr", seed=1), A((4, 2), seed=2)],
                [A((3, 4), "csr", seed=3, index_dtype="int32"), A((4, 2), seed=2)],
                [A((2, 3), seed=1), A((3, 4), "csr", seed=2)],
                ([A((3, 4), "csr", seed=1), A((3, 2), seed=2)], {"transpose_a": True}),
                ([A((3, 4), "csr", seed=1), A((3, 2), "row_sparse", seed=2)], {"transpose_a": True}),
                [A((2, 3), seed=1), A((3, 4), "row_sparse", seed=2)],
                [A((3, 4), "row_sparse", seed=1), A((4, 2), seed=2)],
                ([A((2, 4), seed=1), A((3, 4), "csr", seed=2)], {"transpose_b": True}),
                [A((3, 4), "csr", seed=1), A((4, 2), "row_sparse", seed=2)],
                [A((3, 4), "csr", seed=1), A((4, 2), "csr", seed=2)],
                ([A((4, 3), "csr", seed=1), A((2, 4), "csr", seed=2)], {"transpose_a": True, "transpose_b": True}),
                [A((4,), seed=1), A((4,), seed=2)]]


def _sampled_rows(ctx, x: NDArray, transpose: bool) -> Any:
    """``op(x)``'s rows for ``sparse_ops.kernels.spgemm.sampled``: csr parts (transposed
    structurally), a row-major dense matrix, or a row_sparse matrix's stored rows where
    they are (its transpose as csr parts: a column a row, the stored rows its entries), so
    a hashed table is never densified; values widened for the kernels."""
    from ..kernels.spgemm import StoredRows

    xp = ctx.xp

    def widened(d: Any) -> Any:
        return numba_values(d) if not is_host(d) else _kernel_values(d)

    if x.stype == "csr":
        parts = (x.indptr, x.indices, widened(x.data))
        return sdk_csr.transpose(ctx, x.shape[1], *parts) if transpose else parts
    if x.stype == "row_sparse":
        k, stored = x.shape[1], x.indices.shape[0]
        rows, values = x.indices, widened(x.data).reshape(stored, k)
        if not transpose:
            return StoredRows(rows, values)
        return (xp.arange(k + 1, dtype=rows.dtype) * stored, xp.tile(rows, k),
                xp.ascontiguousarray(values.T).reshape(-1))
    return xp.ascontiguousarray(widened(x.data).T if transpose else widened(x.data))


_OPERANDS = ("default", "csr", "row_sparse")  # what _sampled_rows reads in place


@register("_sampled_dot")
class SampledDot(Op):
    """``op(lhs) @ op(rhs)`` at the stored entries of csr ``mask`` only (SDDMM): a csr with
    mask's structure (index arrays shared). The gradient of a csr operand of ``dot`` for
    its stored values; lhs and rhs are dense, csr or row_sparse (read at its stored rows),
    and the dense product is never formed.
    Linear in lhs and rhs: its gradient is ``dot``'s for the head gradient (a csr of mask's
    structure); mask's values are not read (no gradient)."""

    trusted = True  # built-in kernels, tested against NumPy/SciPy references
    arguments = ("mask", "lhs", "rhs")
    backward_needs_inputs = None  # mask's structure too (the head is read at its entries)
    capacity = cap.same_as("mask")  # mask's structure
    transpose_a = Param(bool, False, doc="use the transpose of lhs")
    transpose_b = Param(bool, False, doc="use the transpose of rhs")
    opcheck_skip = {"gradient:mask": "only its structure is read: its values get no gradient"}

    def gradient(self, out_grads, inputs, outputs, needs=None):
        mask, lhs, rhs = inputs
        g = out_grads[0]
        if mask.stype != "csr":  # a dense mask (the fallback): its non-zero entries are the outputs
            g = T.elemwise_mul(g, T._not_equal_scalar(mask, scalar=0.0).astype(g.dtype))
        elif g.stype != "csr":  # only the stored entries are outputs: the head there, as a csr of their structure
            pattern = CSRNDArray._trusted(mask._device.xp.ones(mask.nnz, dtype=g.dtype), mask._indices,
                                          mask._indptr, mask.shape, mask._device)
            g = T.elemwise_mul(pattern, g)
        needs = needs or (True, True, True)
        return [None, *_product_gradient(g, lhs, rhs, self.transpose_a, self.transpose_b, needs[1:])]

    def infer_shape(self, mask, lhs, rhs):
        if len(mask) != 2 or len(lhs) != 2 or len(rhs) != 2:
            raise ValueError(f"_sampled_dot needs matrices, got shapes {mask}, {lhs} and {rhs}")
        m, k = (lhs[1], lhs[0]) if self.transpose_a else lhs
        k2, n = (rhs[1], rhs[0]) if self.transpose_b else rhs
        if k != k2 or (m, n) != tuple(mask):
            raise ValueError(f"_sampled_dot: op(lhs) {(m, k)} @ op(rhs) {(k2, n)} does not give the "
                             f"mask's shape {tuple(mask)}")
        return [tuple(mask)]

    def infer_type(self, mask, lhs, rhs):
        return [promote_types(lhs, rhs)]

    def infer_storage_type(self, mask, lhs, rhs):
        return ["csr"]

    @kernel(device=_BOTH)
    def dense(self, ctx, mask, lhs, rhs, out):
        """All dense (a fallback): the product where ``mask`` is non-zero."""
        a = lhs.T if self.transpose_a else lhs
        b = rhs.T if self.transpose_b else rhs
        out[...] = ctx.xp.where(mask != 0, ctx.xp.matmul(a, b), 0)

    @kernel(device=_BOTH, stypes=[("csr", a, b) for a in _OPERANDS for b in _OPERANDS])
    def sampled(self, ctx, mask, lhs, rhs, out):
        from ..device import allocating_on
        from ..kernels.spgemm import sampled

        if lhs.dtype != out.dtype or rhs.dtype != out.dtype:
            lhs, rhs = _promoted(out, lhs, rhs)
        with allocating_on(ctx.device):
            x = _sampled_rows(ctx, lhs, self.transpose_a)
            y = _sampled_rows(ctx, rhs, not self.transpose_b)
            k = lhs.shape[0] if self.transpose_a else lhs.shape[1]
            dtype = (x[2] if isinstance(x, tuple) else x).dtype
            gpu = ctx if ctx.device.device_type == "gpu" else None  # the simulator's gpu memory is NumPy
            values = sampled(gpu, mask.indptr, mask.indices, x, y, k, dtype)
            ctx.set_csr(out, values.astype(out.dtype, copy=False), mask.indices, mask.indptr)

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: csr mask with dense, csr and row_sparse operands, transposed; all dense."""
        from . import _samples

        A = _samples.array
        rsp = "row_sparse"
        return [[A((3, 2), "csr", seed=1), A((3, 4), seed=2), A((4, 2), "csr", seed=3)],
                [A((3, 2), "csr", seed=1), A((3, 4), "csr", seed=2), A((4, 2), seed=3)],
                [A((3, 2), "csr", seed=7), A((3, 4), rsp, seed=8), A((4, 2), seed=9)],
                ([A((3, 2), "csr", seed=7), A((4, 3), seed=8), A((2, 4), rsp, seed=9)], {"transpose_a": True,
                                                                                          "transpose_b": True}),
                [A((3, 2), "csr", seed=7), A((3, 4), rsp, seed=8), A((4, 2), rsp, seed=9)],
                [A((3, 2), "csr", seed=7), A((3, 4), "csr", seed=8), A((4, 2), rsp, seed=9)],
                ([A((3, 2), "csr", seed=7), A((4, 3), rsp, seed=8), A((2, 4), "csr", seed=9)], {"transpose_a": True,
                                                                                                "transpose_b": True}),
                ([A((3, 2), "csr", seed=4), A((4, 3), "csr", seed=5), A((2, 4), "csr", seed=6)],
                 {"transpose_a": True, "transpose_b": True}),
                [A((3, 2), "csr", seed=1), A((3, 4), seed=2), A((4, 2), seed=3)],
                [A((3, 2), seed=1), A((3, 4), seed=2), A((4, 2), seed=3)]]


@register("FullyConnected")
class FullyConnectedOp(Op):
    """out = data @ weight.T + bias (MXNet's FullyConnected; dense). Inputs are
    ``(data, weight, bias)``, or ``(data, weight)`` with ``no_bias=True``. With
    ``flatten=True`` data of shape ``(batch, ...)`` is taken as ``(batch, prod(...))``;
    with ``flatten=False`` the product is over data's last axis."""

    trusted = True  # built-in kernels, tested against NumPy/SciPy references

    arguments = ("data", "weight", "bias")
    variadic = True  # two inputs when no_bias
    backward_needs_inputs = ("data", "weight")
    num_hidden = Param(int, doc="number of output features")
    no_bias = Param(bool, False, doc="no bias input")
    flatten = Param(bool, True, doc="flatten data to 2-d (batch, features)")
    partition, partition_args = "rows", ("data",)  # weight and bias go whole to every block

    def check_params(self):
        if self.num_hidden < 1:
            raise ValueError(f"num_hidden must be positive, got {self.num_hidden}")

    def _split(self, data: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
        """(leading output shape, input features) for a data shape."""
        if not data:
            raise ValueError("FullyConnected needs data of at least one dimension")
        if self.flatten:
            return data[:1], _size(data[1:])
        return data[:-1], data[-1]

    def infer_shape(self, *shapes):
        names = ("data", "weight") if self.no_bias else ("data", "weight", "bias")
        if len(shapes) != len(names):
            raise ValueError(f"FullyConnected with no_bias={self.no_bias} takes {len(names)} inputs "
                             f"({', '.join(names)}), got {len(shapes)}")
        lead, features = self._split(shapes[0])
        if shapes[1] != (self.num_hidden, features):
            raise ValueError(f"weight must have shape {(self.num_hidden, features)} for data of shape "
                             f"{shapes[0]} (flatten={self.flatten}), got {shapes[1]}")
        if not self.no_bias and shapes[2] not in ((self.num_hidden,), (self.num_hidden, 1)):
            raise ValueError(f"bias must have shape {(self.num_hidden,)} or {(self.num_hidden, 1)} "
                             f"(as MXNet takes), got {shapes[2]}")
        return [lead + (self.num_hidden,)]

    def infer_type(self, *dtypes: np.dtype) -> list[np.dtype]:
        return [promote_types(*dtypes)]  # NumPy's rule for data @ weight.T + bias

    @kernel(device=_BOTH)
    def dense(self, ctx, data, weight, *rest):
        out = rest[-1]
        batch = _size(out.shape[:-1])
        y = out.reshape(batch, self.num_hidden)
        ctx.xp.matmul(data.reshape(batch, weight.shape[1]), weight.T, out=y)
        if not self.no_bias:
            y += rest[0].reshape(self.num_hidden)

    @in_input_dtypes
    def gradient(self, out_grads, inputs, outputs):
        g = out_grads[0]
        data, weight = inputs[:2]
        batch = _size(g.shape[:-1])
        x = data if data.ndim == 2 else T.reshape(data, shape=(batch, weight.shape[1]))
        g2 = g if g.ndim == 2 else T.reshape(g, shape=(batch, self.num_hidden))
        d_data = T.dot(g2, weight)
        if d_data.shape != data.shape:
            d_data = T.reshape(d_data, shape=data.shape)
        grads = [d_data, T.dot(g2, x, transpose_a=True, forward_stype="default")]
        if not self.no_bias:
            db = T.sum(g2, axis=0)
            grads.append(db if inputs[2].ndim == 1 else T.reshape(db, shape=inputs[2].shape))
        return grads

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: with and without bias, 3-d data flattened or not, csr data."""
        from . import _samples

        A = _samples.array
        return [([A((3, 4), seed=1), A((2, 4), seed=2), A((2,), seed=3)], {"num_hidden": 2}),
                ([A((3, 4), seed=1), A((2, 4), seed=2)], {"num_hidden": 2, "no_bias": True}),
                ([A((3, 2, 2), seed=1), A((2, 4), seed=2), A((2,), seed=3)], {"num_hidden": 2}),
                ([A((3, 2, 4), seed=1), A((2, 4), seed=2), A((2,), seed=3)], {"num_hidden": 2, "flatten": False}),
                ([A((3, 4), "csr", seed=1), A((2, 4), seed=2), A((2,), seed=3)], {"num_hidden": 2}),
                ([A((3, 4), seed=1), A((2, 4), seed=2), A((2, 1), seed=3)], {"num_hidden": 2})]


# ---- dense matrix algebra on the last two axes (MXNet's ``linalg`` family) -----------------------------
def _matrices(shape: tuple, name: str) -> tuple:
    if len(shape) < 2:
        raise ValueError(f"{name} needs arrays of at least two dimensions (batches of matrices), got shape {shape}")
    return tuple(shape)


def _swap(xp: Any, a: Any) -> Any:
    return xp.swapaxes(a, -1, -2)


def _lapack_values(a: Any) -> Any:
    """float16 widened to float32 (LAPACK has no half precision); the result is rounded back
    to float16 when written to the output."""
    return a.astype(np.float32) if a.dtype == np.float16 else a


@register("_linalg_potrf")
class LinalgPotrf(Op):
    """The Cholesky factor ``L`` (lower triangular, ``A = L @ L.T``) of each symmetric
    positive definite matrix of ``A`` (the last two axes; dense). A matrix that is not
    positive definite raises ``ValueError``.

    The factor is taken of ``(A + A.T) / 2``: for the symmetric inputs potrf is defined on
    this is ``A`` itself (MXNet's LAPACK call reads the lower triangle only), and it makes
    the gradient MXNet's symmetric ``dA`` the exact derivative of the forward function, so
    finite differences entry by entry check it."""

    trusted = True  # built-in kernels, tested against NumPy references
    arguments = ("A",)
    backward_needs_inputs = ()
    backward_needs_outputs = ("output",)

    def infer_shape(self, A):
        shape = _matrices(A, "potrf")
        if shape[-1] != shape[-2]:
            raise ValueError(f"potrf needs square matrices, got shape {shape}")
        return [shape]

    def infer_type(self, A):
        if A.kind != "f":
            raise TypeError(f"potrf needs a floating point array, got {A}")
        return [A]

    @kernel(device=_BOTH)
    def dense(self, ctx, A, out):
        xp = ctx.xp
        A = _lapack_values(A)
        sym = (A + _swap(xp, A)) * A.dtype.type(0.5)
        try:
            out[...] = xp.linalg.cholesky(sym)
        except np.linalg.LinAlgError as exc:
            raise ValueError(f"potrf: a matrix is not positive definite ({exc})") from None

    def gradient(self, out_grads, inputs, outputs):
        """``dA = sym(L^-T Phi(L^T dL) L^-1)`` for ``A = L L^T``, with ``Phi`` the lower
        triangle with its diagonal halved and ``sym(S) = (S + S^T) / 2`` (the perturbation
        of ``L`` is lower triangular, ``dA`` symmetric), through the table's triangular
        solves so higher orders record."""
        from ..creation import array

        g, L = out_grads[0], outputs[0]
        n = L.shape[-1]
        phi = np.tril(np.ones((n, n))) - 0.5 * np.eye(n)
        mask = array(np.ascontiguousarray(np.broadcast_to(phi, L.shape)), dtype=L.dtype, device=L.device)
        P = T.elemwise_mul(T._linalg_gemm2(L, g, transpose_a=True), mask)
        Y = T._linalg_trsm(L, P, transpose=True)  # L^-T P
        S = T._linalg_trsm(L, Y, rightside=True)  # L^-T P L^-1
        perm = tuple(range(L.ndim - 2)) + (L.ndim - 1, L.ndim - 2)
        return [T._mul_scalar(T.elemwise_add(S, T.transpose(S, axes=perm)), scalar=0.5)]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: one and a batch of symmetric positive definite matrices."""
        from ..creation import array

        m = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]])
        return [[array(m)], [array(np.stack([m, m * 2 + np.eye(3)]).astype(np.float32))],
                [array(np.stack([m, m * 2 + np.eye(3)]))]]


@register("_linalg_gemm2")
class LinalgGemm2(Op):
    """``alpha * op(A) @ op(B)`` for each matrix of ``A`` and ``B`` (the last two axes,
    leading axes batched; dense), ``op`` transposing when ``transpose_a``/``transpose_b``."""

    trusted = True  # built-in kernels, tested against NumPy references
    arguments = ("A", "B")
    transpose_a = Param(bool, False, "use A's transpose")
    transpose_b = Param(bool, False, "use B's transpose")
    alpha = Param(float, 1.0, "scale of the product")
    axis = Param(int, -2, "MXNet's row axis of the matrices; only -2 (the last two axes) is supported",
                 choices=(-2,))

    def infer_shape(self, A, B):
        A, B = _matrices(A, "gemm2"), _matrices(B, "gemm2")
        if A[:-2] != B[:-2]:
            raise ValueError(f"gemm2 needs the same batch axes, got shapes {A} and {B}")
        m, k = (A[-1], A[-2]) if self.transpose_a else (A[-2], A[-1])
        k2, n = (B[-1], B[-2]) if self.transpose_b else (B[-2], B[-1])
        if k != k2:
            raise ValueError(f"gemm2: inner sizes differ ({k} and {k2}) for shapes {A} and {B}")
        return [A[:-2] + (m, n)]

    def infer_type(self, A, B):
        if A.kind != "f":
            raise TypeError(f"gemm2 needs floating point arrays, got {A} and {B}")
        require_one_dtype("_linalg_gemm2", ("A", "B"), (A, B))
        return [A]

    @kernel(device=_BOTH)
    def dense(self, ctx, A, B, out):
        xp = ctx.xp
        a = _swap(xp, A) if self.transpose_a else A
        b = _swap(xp, B) if self.transpose_b else B
        xp.matmul(a, b, out=out)
        if self.alpha != 1.0:
            out *= out.dtype.type(self.alpha)

    def gradient(self, out_grads, inputs, outputs):
        g = out_grads[0]
        A, B = inputs
        ta, tb, alpha = self.transpose_a, self.transpose_b, self.alpha
        # C = alpha op(A) op(B): dop(A) = alpha g op(B)^T, dop(B) = alpha op(A)^T g
        dA = (T._linalg_gemm2(B, g, transpose_a=tb, transpose_b=True, alpha=alpha) if ta else
              T._linalg_gemm2(g, B, transpose_b=not tb, alpha=alpha))
        dB = (T._linalg_gemm2(g, A, transpose_a=True, transpose_b=ta, alpha=alpha) if tb else
              T._linalg_gemm2(A, g, transpose_a=not ta, alpha=alpha))
        return [dA, dB]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: plain, both transposes with a scale, a batch."""
        from . import _samples

        A = _samples.array
        return [[A((2, 3), seed=1), A((3, 4), seed=2)],
                ([A((3, 2), seed=1), A((4, 3), seed=2)], {"transpose_a": True, "transpose_b": True, "alpha": 0.5}),
                ([A((2, 3), seed=1), A((4, 3), seed=2)], {"transpose_b": True}),
                [A((2, 2, 3), seed=3), A((2, 3, 2), seed=4)]]


@register("_linalg_trsm")
class LinalgTrsm(Op):
    """``X`` solving ``op(A) @ X = alpha * B`` (``X @ op(A) = alpha * B`` with
    ``rightside``) for each triangular matrix of ``A`` (the last two axes; only its
    ``lower`` or upper triangle is read, and gets the gradient; dense); ``op`` transposes
    with ``transpose``."""

    trusted = True  # built-in kernels, tested against NumPy references
    arguments = ("A", "B")
    transpose = Param(bool, False, "use A's transpose")
    rightside = Param(bool, False, "solve X @ op(A) = alpha * B")
    lower = Param(bool, True, "A is lower triangular (else upper)")
    alpha = Param(float, 1.0, "scale of B")
    backward_needs_outputs = ("output",)

    def infer_shape(self, A, B):
        A, B = _matrices(A, "trsm"), _matrices(B, "trsm")
        if A[-1] != A[-2] or A[:-2] != B[:-2]:
            raise ValueError(f"trsm needs square matrices A and the same batch axes, got shapes {A} and {B}")
        side = B[-1] if self.rightside else B[-2]
        if side != A[-1]:
            raise ValueError(f"trsm: A of shape {A} does not fit B of shape {B} (rightside={self.rightside})")
        return [B]

    def infer_type(self, A, B):
        if A.kind != "f":
            raise TypeError(f"trsm needs floating point arrays, got {A} and {B}")
        require_one_dtype("_linalg_trsm", ("A", "B"), (A, B))
        return [A]

    @kernel(device=_BOTH)
    def dense(self, ctx, A, B, out):
        xp = ctx.xp
        A, B = _lapack_values(A), _lapack_values(B)
        tri = xp.tril(A) if self.lower else xp.triu(A)
        a = _swap(xp, tri) if self.transpose else tri
        b = B * B.dtype.type(self.alpha)
        if self.rightside:  # X a = b  <=>  a^T X^T = b^T
            out[...] = _swap(xp, xp.linalg.solve(_swap(xp, a), _swap(xp, b)))
        else:
            out[...] = xp.linalg.solve(a, b)

    def gradient(self, out_grads, inputs, outputs):
        from ..creation import array

        g, (A, _), X = out_grads[0], inputs, outputs[0]
        t, right, low = self.transpose, self.rightside, self.lower
        # with a = op(tri(A)): left X = alpha a^-1 B, right X = alpha B a^-1
        solve = dict(transpose=not t, rightside=right, lower=low)
        dB = T._linalg_trsm(A, g, alpha=self.alpha, **solve)
        Y = T._linalg_trsm(A, g, alpha=1.0, **solve)  # a^-T g (left), g a^-T (right)
        if right:  # da = -X^T Y
            dtri = T._linalg_gemm2(Y, X, transpose_a=True, alpha=-1.0) if t else \
                T._linalg_gemm2(X, Y, transpose_a=True, alpha=-1.0)
        else:  # da = -Y X^T
            dtri = T._linalg_gemm2(X, Y, transpose_b=True, alpha=-1.0) if t else \
                T._linalg_gemm2(Y, X, transpose_b=True, alpha=-1.0)
        n = A.shape[-1]
        tri = np.tril(np.ones((n, n))) if low else np.triu(np.ones((n, n)))
        mask = array(np.ascontiguousarray(np.broadcast_to(tri, A.shape)), dtype=A.dtype, device=A.device)
        return [T.elemwise_mul(dtri, mask), dB]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: lower and upper, transposed, right side, scaled."""
        from ..creation import array
        from . import _samples

        a = array(np.array([[2.0, 0.3, -0.4], [0.5, 1.5, 0.2], [-0.3, 0.4, 2.5]]))
        return [[a, _samples.array((3, 2), seed=1)],
                ([a, _samples.array((3, 2), seed=1)], {"lower": False, "transpose": True, "alpha": 2.0}),
                ([a, _samples.array((2, 3), seed=2)], {"rightside": True}),
                ([a, _samples.array((2, 3), seed=3)], {"rightside": True, "transpose": True, "lower": False}),
                ([a, _samples.array((3, 2), seed=4)], {"transpose": True})]


@register("khatri_rao")
class KhatriRao(Op):
    """The column-wise Kronecker product of matrices with one column count ``k`` (MXNet's
    ``khatri_rao``): inputs of shapes ``(n_1, k) ... (n_m, k)`` give ``(n_1 * ... * n_m, k)``
    whose row ``(i_1, ..., i_m)`` (row-major: the last input's rows vary fastest) is the
    elementwise product of row ``i_j`` of each input; one input is itself. Dense."""

    trusted = True  # built-in kernels, tested against NumPy references
    arguments = ("args",)
    variadic = True

    def infer_shape(self, *shapes):
        if not shapes:
            raise ValueError("khatri_rao needs at least one input")
        for i, s in enumerate(shapes):
            if len(s) != 2:
                raise ValueError(f"khatri_rao takes matrices; input {i} has shape {tuple(s)}")
            if s[1] != shapes[0][1]:
                raise ValueError(f"khatri_rao needs one column count; input {i} has {s[1]} columns, input 0 "
                                 f"{shapes[0][1]}")
        return [(int(np.prod([s[0] for s in shapes], dtype=np.int64)), shapes[0][1])]

    def infer_type(self, *dtypes):
        return [require_one_dtype("khatri_rao", ("args",), dtypes)]

    @kernel(device=_BOTH)
    def dense(self, ctx, *arrays):
        *xs, out = arrays
        product = xs[0]
        for x in xs[1:]:  # rows of the product so far, each times every row of x
            product = (product[:, None, :] * x[None, :, :]).reshape(-1, x.shape[1])
        out[...] = product

    def gradient(self, out_grads, inputs, outputs):
        # d out[(i_1..i_m), c] / d A_j[i_j, c] is the product of the other inputs' rows: input
        # j's gradient sums the head over the other inputs' rows, weighted by their product
        g = out_grads[0]
        if len(inputs) == 1:
            return [g]
        dims = tuple(x.shape[0] for x in inputs)
        if 0 in dims:  # an empty product: nothing reaches any input (and reshape reads 0 as "keep")
            return [T.zeros_like(x) for x in inputs]
        k = g.shape[1]
        head = T.reshape(g, shape=dims + (k,))
        grads = []
        for j, x in enumerate(inputs):
            others = [y for i, y in enumerate(inputs) if i != j]
            weights = others[0] if len(others) == 1 else T.khatri_rao(*others)
            rest = int(np.prod([d for i, d in enumerate(dims) if i != j], dtype=np.int64))
            axes = (j,) + tuple(i for i in range(len(dims)) if i != j) + (len(dims),)
            gj = T.reshape(T.transpose(head, axes=axes), shape=(dims[j], rest, k))
            grads.append(T.sum(T.broadcast_mul(gj, T.expand_dims(weights, axis=0)), axis=1))
        return grads

    def reference(self, *arrays):
        out = arrays[0]
        for x in arrays[1:]:
            out = np.einsum("ik,jk->ijk", out, x).reshape(-1, x.shape[1])
        return [out]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: one, two and three inputs, an empty one, float32."""
        from . import _samples

        A = _samples.array
        return [[A((3, 2), seed=1)], [A((3, 2), seed=1), A((4, 2), seed=2)],
                [A((3, 2), seed=1), A((1, 2), seed=2), A((2, 2), seed=3)],
                [A((2, 3), seed=1), A((0, 3), seed=2)],
                [A((2, 3), seed=4, dtype="float32"), A((2, 3), seed=5, dtype="float32")]]
