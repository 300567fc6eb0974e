"""``DistributedArray``: a csr, row_sparse or dense array cut into row blocks, each block a
lazy Dask value (a ``dask.delayed`` object, or data already on the cluster).

Block i holds rows ``row_splits[i]:row_splits[i + 1]`` as an ordinary sparse_ops
container. The metadata (shape, dtype, each block's storage type and shape) is known
without computing anything, so operators check their inputs on the client before a task
runs; ``nnz`` is known for blocks made from local data and computed (once) otherwise.
"""
from __future__ import annotations

import concurrent.futures
import operator
from typing import Any, Sequence

import numpy as np

from ..dtypes import value_dtype
from ..errors import SparseFormatError, SparseOpsError
from ..ndarray import STYPES, CSRNDArray, NDArray, RowSparseNDArray
from ..validation import normalize_shape
from . import _cluster


class BlockLostError(SparseOpsError, RuntimeError):
    """A block's data went with a worker and Dask could not compute it again."""


def gather(values: Sequence[Any]) -> tuple:
    """``dask.compute`` of these values; a block lost with its worker is a BlockLostError."""
    import dask

    try:
        return dask.compute(*values)
    except concurrent.futures.CancelledError as exc:  # distributed's FutureCancelledError
        raise BlockLostError(
            f"the computation was cancelled ({exc}): a worker that dies takes the blocks held only in its memory. "
            f"Blocks made by from_array / from_blocks were scattered from the client and have no other copy; "
            f"blocks read with from_npz are read again. Rebuild the array and retry") from exc


class BlockInfo(tuple):
    """(shape, stype, dtype) of one block: what the client knows without computing it."""

    __slots__ = ()

    def __new__(cls, shape: Sequence[int], stype: str, dtype: Any) -> "BlockInfo":
        if stype not in STYPES:
            raise ValueError(f"unknown storage type {stype!r}; expected one of {STYPES}")
        # checked as the containers' constructors check theirs: a block declared so is refused now,
        # not when a task computes it
        return super().__new__(cls, (normalize_shape(shape), stype, value_dtype(dtype)))

    def __getnewargs__(self) -> tuple:  # pickled to the workers inside tasks
        return tuple(self)

    shape = property(lambda self: self[0])
    stype = property(lambda self: self[1])
    dtype = property(lambda self: self[2])

    @classmethod
    def of(cls, x: NDArray) -> "BlockInfo":
        return cls(x.shape, x.stype, x.dtype)


class DistributedArray:
    """A row-partitioned array: blocks of consecutive rows, each a Dask value holding a
    sparse_ops container (csr, row_sparse or dense; blocks may differ in storage type).

    Build one with ``from_array`` (a SciPy matrix, NumPy array or container cut into
    blocks), ``from_blocks`` (a list of containers), ``from_delayed`` (Dask values with
    their metadata) or ``sparse_ops.dask.from_npz`` (one file per block, read lazily on
    the workers). ``sparse_ops.dask.apply`` runs registered operators on it.
    """

    __slots__ = ("_blocks", "_infos", "_nnz", "_splits")

    def __init__(self, blocks: Sequence[Any], infos: Sequence[BlockInfo],
                 nnz: Sequence[int] | None = None) -> None:
        if len(blocks) != len(infos) or not blocks:
            raise ValueError(f"need one BlockInfo per block and at least one block, got {len(blocks)} "
                             f"blocks and {len(infos)} infos")
        infos = tuple(i if isinstance(i, BlockInfo) else BlockInfo(*i) for i in infos)
        first = infos[0]
        for k, info in enumerate(infos):
            if info.dtype != first.dtype:
                raise ValueError(f"blocks must share one dtype: block 0 is {first.dtype}, block {k} is {info.dtype}")
            if len(info.shape) != len(first.shape) or info.shape[1:] != first.shape[1:]:
                raise ValueError(f"blocks must differ in their number of rows only: block 0 has shape "
                                 f"{first.shape}, block {k} has {info.shape}")
        if not first.shape and len(infos) > 1:
            raise ValueError("a 0-d array is a single block")
        self._blocks = tuple(blocks)
        self._infos = infos
        self._nnz = None if nnz is None else tuple(int(n) for n in nnz)
        rows = [i.shape[0] if i.shape else 1 for i in infos]
        self._splits = tuple(int(v) for v in np.concatenate([[0], np.cumsum(rows)]))

    # ---- metadata ---------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        first = self._infos[0].shape
        return (self._splits[-1], *first[1:]) if first else ()

    @property
    def ndim(self) -> int:
        return len(self._infos[0].shape)

    @property
    def dtype(self) -> np.dtype:
        return self._infos[0].dtype

    @property
    def stypes(self) -> tuple[str, ...]:
        """The storage type of each block."""
        return tuple(i.stype for i in self._infos)

    @property
    def stype(self) -> str:
        """The blocks' storage type; ``"mixed"`` when they differ."""
        kinds = set(self.stypes)
        return kinds.pop() if len(kinds) == 1 else "mixed"

    @property
    def nblocks(self) -> int:
        return len(self._blocks)

    @property
    def row_splits(self) -> tuple[int, ...]:
        """Block i holds rows ``row_splits[i]:row_splits[i + 1]``."""
        return self._splits

    @property
    def block_infos(self) -> tuple[BlockInfo, ...]:
        return self._infos

    @property
    def blocks(self) -> tuple[Any, ...]:
        """The blocks as Dask values (``dask.delayed`` objects)."""
        return self._blocks

    @property
    def block_nnz(self) -> tuple[int, ...]:
        """Stored values per block (computed on the workers the first time, if unknown)."""
        if self._nnz is None:
            self._nnz = tuple(int(n) for n in gather([_cluster.delayed_call(_nnz_of, b) for b in self._blocks]))
        return self._nnz

    @property
    def nnz(self) -> int:
        """Stored values in all blocks, as a container's ``nnz`` counts them (a dense block
        counts all its values, a row_sparse one its stored rows' values)."""
        return sum(self.block_nnz)

    def __repr__(self) -> str:
        nnz = f", nnz={sum(self._nnz)}" if self._nnz is not None else ""
        return (f"<DistributedArray {self.stype} {self.shape} {self.dtype.name}, "
                f"{self.nblocks} row block{'s' if self.nblocks != 1 else ''}{nnz}>")

    # ---- computing -------------------------------------------------------------------------------
    def compute(self, stype: str | None = None) -> NDArray:
        """Gather the blocks and stack their rows into one container: of the blocks' storage
        type, or ``stype`` (needed to choose when the blocks' types differ: dense by default)."""
        return concat_rows(list(gather(self._blocks)), self.shape, stype)

    def persist(self) -> "DistributedArray":
        """The same array with its blocks computed and kept in (cluster) memory, so the
        following operations start from them instead of recomputing their history."""
        import dask

        return DistributedArray(dask.persist(*self._blocks), self._infos, self._nnz)

    def to_delayed(self) -> list[Any]:
        return list(self._blocks)

    def whole(self) -> Any:
        """One Dask value holding the whole array (the blocks stacked by a task on the
        cluster): how a distributed operand reaches an operator that needs it whole."""
        if self.nblocks == 1:
            return self._blocks[0]
        return _cluster.delayed_call(_concat_task, self.shape, None, *self._blocks)


# ---- building ----------------------------------------------------------------------------------------
def _as_container(x: Any) -> NDArray:
    import scipy.sparse as sp

    from ..creation import array, csr_matrix

    if isinstance(x, NDArray):
        return x
    if sp.issparse(x):
        return csr_matrix(x)
    return array(np.asarray(x))


def even_splits(rows: int, nblocks: int) -> tuple[int, ...]:
    """Row offsets of ``nblocks`` consecutive blocks of near-equal sizes (the first
    ``rows % nblocks`` blocks one row longer, as ``numpy.array_split`` cuts)."""
    if nblocks < 1:
        raise ValueError(f"need at least one block, got {nblocks}")
    sizes = np.full(nblocks, rows // nblocks)
    sizes[:rows % nblocks] += 1
    return tuple(int(v) for v in np.concatenate([[0], np.cumsum(sizes)]))


def row_block(x: NDArray, start: int, stop: int) -> NDArray:
    """Rows ``start:stop`` of a container (csr: zero-copy values; row_sparse: the stored
    rows in the range, renumbered; dense: a view)."""
    if x.stype == "csr":
        return x[start:stop]
    if x.stype == "row_sparse":
        idx = np.asarray(x.indices)
        lo, hi = np.searchsorted(idx, [start, stop])
        rows = (idx[lo:hi] - start).astype(idx.dtype, copy=False)
        return RowSparseNDArray(np.asarray(x.data)[lo:hi], rows, (stop - start, *x.shape[1:]), check=False)
    return NDArray(x.data[start:stop])


def from_array(x: Any, nblocks: int | None = None, row_splits: Sequence[int] | None = None) -> DistributedArray:
    """Cut ``x`` (a SciPy sparse matrix, a NumPy array or a sparse_ops container) into row
    blocks: ``nblocks`` near-equal ones, or at ``row_splits`` (``(0, ..., rows)``, e.g.
    another array's ``row_splits`` to match its partition). With a distributed client the
    blocks are scattered to the workers now; otherwise they are kept in the graph."""
    x = _as_container(x)
    if x.ndim == 0:
        raise ValueError("a 0-d array has no rows to cut")
    n = x.shape[0]
    if row_splits is None:
        row_splits = even_splits(n, 1 if nblocks is None else nblocks)  # nblocks=0 is refused, not taken as 1
    elif nblocks is not None and nblocks != len(row_splits) - 1:
        raise ValueError(f"nblocks={nblocks} but row_splits has {len(row_splits) - 1} blocks")
    try:
        splits = tuple(operator.index(v) for v in row_splits)
    except TypeError:
        raise ValueError(f"row_splits must be integers, got {tuple(row_splits)}") from None
    if len(splits) < 2 or splits[0] != 0 or splits[-1] != n or any(a > b for a, b in zip(splits, splits[1:])):
        raise ValueError(f"row_splits must rise from 0 to the {n} rows, got {splits}")
    return from_blocks([row_block(x, a, b) for a, b in zip(splits[:-1], splits[1:])])


def from_blocks(blocks: Sequence[Any]) -> DistributedArray:
    """A DistributedArray of these containers (or SciPy/NumPy arrays), in row order."""
    parts = [_as_container(b) for b in blocks]
    if not parts:
        raise ValueError("from_blocks needs at least one block")
    return DistributedArray(_cluster.put_many(parts), [BlockInfo.of(p) for p in parts],
                            [_nnz_of(p) for p in parts])


def from_delayed(blocks: Sequence[Any], infos: Sequence[BlockInfo | tuple]) -> DistributedArray:
    """A DistributedArray of Dask values (``dask.delayed`` objects or futures) that will
    hold containers of the declared ``(shape, stype, dtype)``; a block that turns out
    otherwise is an error when it is computed."""
    infos = [i if isinstance(i, BlockInfo) else BlockInfo(*i) for i in infos]
    if len(infos) != len(blocks):
        raise ValueError(f"need one (shape, stype, dtype) per block, got {len(blocks)} blocks and {len(infos)}")
    checked = [_cluster.delayed_call(_checked_block, b, info, i) for i, (b, info) in enumerate(zip(blocks, infos))]
    return DistributedArray(checked, infos)


def _checked_block(block: Any, info: BlockInfo, i: int) -> NDArray:
    """Runs on a worker: the block as declared, or a clear error."""
    x = _as_container(block)
    if BlockInfo.of(x) != info:
        raise SparseFormatError(f"block {i} is a {x.stype} {x.shape} {x.dtype} but was declared a "
                                f"{info.stype} {info.shape} {info.dtype}")
    return x


def _nnz_of(x: NDArray) -> int:
    return int(x.nnz) if x.stype != "default" else int(x.size)


# ---- stacking rows -----------------------------------------------------------------------------------
def _concat_task(shape: tuple, stype: str | None, *parts: NDArray) -> NDArray:
    return concat_rows(list(parts), shape, stype)


def concat_rows(parts: list[NDArray], shape: tuple[int, ...], stype: str | None = None) -> NDArray:
    """Stack the rows of containers into one of ``shape``: csr and row_sparse blocks are
    joined from their components (indices offset, never densified), dense ones with
    ``numpy.concatenate``. ``stype`` (default: the blocks' common storage type, dense
    when they differ) converts blocks first where needed. Blocks whose rows do not add up to
    ``shape[0]``, or whose other dimensions are not ``shape[1:]``, are refused."""
    shape = tuple(shape)
    if len(parts) == 1:  # (one block, of any shape: a 0-d reduction too)
        odd, rows = (None if tuple(parts[0].shape) == shape else 0), (shape[0] if shape else 0)
    else:
        rows = sum(p.shape[0] for p in parts)
        odd = next((i for i, p in enumerate(parts) if tuple(p.shape[1:]) != shape[1:]), None)
    if odd is not None or (shape and rows != shape[0]):
        what = f"block {odd} has shape {tuple(parts[odd].shape)}" if odd is not None else f"the blocks hold {rows} rows"
        raise ValueError(f"concat_rows: {what}, which does not stack into shape {shape} (blocks of shape "
                         f"(rows, {', '.join(map(str, shape[1:]))}) whose rows add up to {shape[0]})")
    if len(parts) == 1 and (stype is None or parts[0].stype == stype):
        return parts[0]
    kinds = {p.stype for p in parts}
    target = stype or (kinds.pop() if len(kinds) == 1 else "default")
    parts = [p if p.stype == target else p.tostype(target) for p in parts]
    if target == "default":
        return NDArray(np.concatenate([np.asarray(p.data) for p in parts], axis=0))
    if target == "row_sparse":
        offsets = np.cumsum([0] + [p.shape[0] for p in parts[:-1]])
        idx_dtype = _index_dtype([p.indices for p in parts], shape[0])
        indices = np.concatenate([np.asarray(p.indices, dtype=idx_dtype) + off for p, off in zip(parts, offsets)])
        data = np.concatenate([np.asarray(p.data) for p in parts], axis=0)
        return RowSparseNDArray(data, indices.astype(idx_dtype, copy=False), shape, check=False)
    nnz = sum(p.nnz for p in parts)
    idx_dtype = _index_dtype([p.indices for p in parts] + [p.indptr for p in parts], max(nnz, shape[1]))
    ends = np.cumsum([0] + [p.nnz for p in parts[:-1]])
    indptr = np.concatenate([np.zeros(1, idx_dtype)] + [np.asarray(p.indptr[1:], dtype=idx_dtype) + end
                                                         for p, end in zip(parts, ends)])
    indices = np.concatenate([np.asarray(p.indices, dtype=idx_dtype) for p in parts])
    data = np.concatenate([np.asarray(p.data) for p in parts])
    return CSRNDArray(data, indices, indptr, shape, check=False)


def _index_dtype(arrays: list, largest: int) -> np.dtype:
    """int32 when every piece is int32 and the largest index fits, else int64."""
    if all(np.dtype(a.dtype) == np.int32 for a in arrays) and largest <= np.iinfo(np.int32).max:
        return np.dtype(np.int32)
    return np.dtype(np.int64)
