"""Data-parallel gradient steps over row blocks (``DataParallel``).

The client holds the parameters and updates them; the data stays on the workers. Each step
takes batch b, made of the b-th slice of every block (a block's rows cut into
``n_batches`` consecutive slices, ``numpy.array_split``'s way). Every slice computes the
gradient of its share of the loss on its worker, the gradients are summed across slices
in a tree of tasks (``add_n``: row_sparse stays row_sparse), and the client receives one
gradient per parameter, ready for a lazy (row_sparse) update.

Embedding-like parameters (``row_params``: their rows are indexed by the columns of the
csr input, as in ``embedding_bag``, ``fm_interaction`` or ``dot(csr, W)``) are never sent
whole: each slice's columns are renumbered once, on its worker, to the ids it holds, the
client sends it only those rows (its "pull"), and its row_sparse gradient comes back with
the global row ids. The network volume of a step is then proportional to the distinct ids
of the batch, not to the parameters' size.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from .. import autograd
from ..creation import array, csr_matrix
from ..errors import OperatorError
from ..ndarray import NDArray, RowSparseNDArray
from ..ops import add_n
from . import _cluster
from .collection import DistributedArray, even_splits, row_block

TREE_FAN_IN = 8


class DataParallel:
    """Data-parallel gradients of ``loss`` over the row blocks of ``x`` (and of ``others``,
    which share its row partition, e.g. the labels).

    ``loss(x, *others, **params)`` runs on a worker, built from operators so that autograd
    records it, and returns the loss *summed* over the rows it gets (a 0-d or 1-element
    array). ``step`` scales each slice by 1 / (rows in the batch) (``reduction="mean"``;
    ``"sum"`` keeps sums), so the summed gradients are those of the batch's mean loss.
    Needs a ``distributed.Client``.
    """

    def __init__(self, loss: Callable[..., NDArray], x: DistributedArray, *others: DistributedArray,
                 row_params: Sequence[str] = (), n_batches: int = 1, reduction: str = "mean",
                 client: Any = None) -> None:
        self.client = client or _cluster.client()
        if self.client is None:
            raise OperatorError("DataParallel needs a distributed.Client (none is current)")
        if reduction not in ("mean", "sum"):
            raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
        if row_params and set(x.stypes) != {"csr"}:
            raise ValueError(f"row_params index the columns of a csr input; x has blocks of type {x.stype}")
        for i, o in enumerate(others):
            if o.row_splits != x.row_splits:
                raise ValueError(f"input {i + 1} is cut into other row blocks than x ({o.row_splits} vs "
                                 f"{x.row_splits}); rebuild it with from_array(..., row_splits=x.row_splits)")
        self.loss, self.row_params, self.reduction = loss, tuple(row_params), reduction
        self.n_batches = int(n_batches)
        c = self.client
        x_blocks = c.compute(list(x.blocks))
        other_blocks = [c.compute(list(o.blocks)) for o in others]
        self._blocks = (x_blocks, other_blocks)  # kept: a slice lost with its worker is cut again from them
        self._slices: list[list[tuple[int, int]]] = []  # per batch: global (start, stop) of each slice
        self._pieces: list[list[Any]] = []
        for b in range(self.n_batches):
            ranges, pieces = [], []
            for j, info in enumerate(x.block_infos):
                cuts = even_splits(info.shape[0], self.n_batches)
                lo, hi = cuts[b], cuts[b + 1]
                ranges.append((x.row_splits[j] + lo, x.row_splits[j] + hi))
                pieces.append(c.submit(_prepare, x_blocks[j], lo, hi, bool(self.row_params),
                                       *[ob[j] for ob in other_blocks], pure=False))
            self._slices.append(ranges)
            self._pieces.append(pieces)
        self._cols = [c.gather([c.submit(_cols_of, p, pure=False) for p in pieces]) for pieces in self._pieces]
        self.last_traffic: dict[str, int] = {}

    def batch_rows(self, batch: int) -> list[tuple[int, int]]:
        """Global (start, stop) row ranges of the slices making batch ``batch``, in block order."""
        return list(self._slices[batch])

    def step(self, params: dict[str, NDArray], batch: int = 0) -> tuple[float, dict[str, NDArray]]:
        """(loss, gradients) of batch ``batch`` at ``params`` (dense NDArrays on the client):
        row_sparse gradients for ``row_params``, dense for the others. ``last_traffic``
        then holds the bytes this step moved: rows pulled, parameters broadcast, and
        per-slice gradients sent into the reduction."""
        c = self.client
        missing = [n for n in self.row_params if n not in params]
        if missing:
            raise KeyError(f"row_params {missing} not among the parameters {sorted(params)}")
        pieces, cols = self._pieces[batch], self._cols[batch]
        n_rows = sum(b - a for a, b in self._slices[batch])
        scale = 1.0 / max(n_rows, 1) if self.reduction == "mean" else 1.0
        host = {n: np.asarray(p.data) for n, p in params.items()}
        whole = {n: v for n, v in host.items() if n not in self.row_params}
        whole_f = _scatter(c, whole, broadcast=True)
        holders = c.who_has(pieces)  # where each slice lives now (it moves if its worker died)
        pulled = 0
        tasks = []
        for piece, ids in zip(pieces, cols):
            rows = {n: host[n][ids] for n in self.row_params}
            pulled += sum(v.nbytes for v in rows.values())
            workers = list(holders.get(piece.key, ())) or None
            rows_f = _scatter(c, rows, workers=workers)
            tasks.append(c.submit(_slice_grads, self.loss, piece, rows_f, whole_f, scale,
                                  {n: host[n].shape[0] for n in self.row_params}, pure=False))
        while len(tasks) > 1:  # the reduction tree, TREE_FAN_IN slices' gradients per task
            groups = [tasks[j:j + TREE_FAN_IN] for j in range(0, len(tasks), TREE_FAN_IN)]
            tasks = [g[0] if len(g) == 1 else c.submit(_sum_grads, *g, pure=False) for g in groups]
        result = tasks[0].result()
        self.last_traffic = {"pulled": pulled,
                             "broadcast": sum(v.nbytes for v in whole.values()) * len(c.nthreads()),
                             "gradients": int(result.pop("_bytes"))}
        loss = float(result.pop("loss"))
        return loss, result

    def close(self) -> None:
        """Release the slices kept on the workers."""
        for pieces in self._pieces:
            for p in pieces:
                p.release()
        self._pieces, self._blocks = [], ([], [])


def _scatter(c: Any, values: dict[str, Any], **where: Any) -> dict[str, Any]:
    """name -> future of the value (scattering a dict would use its names as the keys,
    which every slice and step shares)."""
    if not values:
        return {}
    return dict(zip(values, c.scatter(list(values.values()), hash=False, **where)))


# ---- on the workers ------------------------------------------------------------------------------
def _prepare(x: NDArray, lo: int, hi: int, compact: bool, *others: NDArray) -> tuple:
    """Rows lo:hi of a block; with ``compact``, its csr columns renumbered 0..u-1 in the
    order of the distinct ids ``cols`` it holds (so the parameters' rows it needs are
    ``param[cols]``). Returns (x, cols or None, others)."""
    part = row_block(x, lo, hi)
    rest = tuple(row_block(o, lo, hi) for o in others)
    if not compact:
        return part, None, rest
    indices = np.asarray(part.indices)
    cols = np.unique(indices)
    local = np.searchsorted(cols, indices).astype(indices.dtype, copy=False)
    squeezed = csr_matrix((np.asarray(part.data), local, np.asarray(part.indptr)), shape=(part.shape[0], len(cols)))
    return squeezed, cols, rest


def _cols_of(piece: tuple) -> Any:
    return piece[1]


def _slice_grads(loss: Callable, piece: tuple, rows: dict, whole: dict, scale: float,
                 global_rows: dict[str, int]) -> dict[str, Any]:
    """The gradients of ``scale * loss`` on one slice: row params as row_sparse arrays
    with global row ids, the others dense; plus the loss and the gradients' bytes."""
    x, cols, others = piece
    params: dict[str, NDArray] = {}
    for name, values in rows.items():
        params[name] = array(values)
        params[name].attach_grad(stype="row_sparse")
    for name, values in whole.items():
        params[name] = array(values)  # read only: tasks on one worker may share the broadcast array
        params[name].attach_grad()
    with autograd.record():
        total = loss(x, *others, **params) * scale
    total.backward()
    out: dict[str, Any] = {"loss": float(total.asnumpy().sum())}
    nbytes = 0
    for name, p in params.items():
        g = p.grad
        if name in rows:
            g = _global_rows(g, cols, global_rows[name])
            nbytes += np.asarray(g.indices).nbytes
        nbytes += np.asarray(g.data).nbytes
        out[name] = g
    out["_bytes"] = nbytes
    return out


def _global_rows(g: NDArray, cols: np.ndarray, n: int) -> RowSparseNDArray:
    """A gradient over a slice's local ids as a row_sparse array over the global rows."""
    if g.stype == "row_sparse":
        values, local = np.asarray(g.data), np.asarray(g.indices)
    else:
        values, local = np.asarray(g.tostype("default").data), np.arange(g.shape[0])
    ids = cols[local].astype(np.int64, copy=False)
    return RowSparseNDArray(values, ids, (n, *g.shape[1:]), check=False)


def _sum_grads(*results: dict) -> dict[str, Any]:
    """One node of the reduction tree: losses and byte counts added, gradients by add_n."""
    out = {"loss": sum(r["loss"] for r in results), "_bytes": sum(r["_bytes"] for r in results)}
    for name in results[0]:
        if name not in out:
            out[name] = add_n(*[r[name] for r in results])
    return out
