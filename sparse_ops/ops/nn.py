"""Neural-network operators: ``Embedding`` (with its row_sparse gradient) and ``Dropout``.

``Embedding(data, weight)`` gathers rows of ``weight`` at the ids in ``data``. Its weight
gradient is the operator ``_embedding_backward``: per-id sums of the head gradient's rows,
``row_sparse`` when ``sparse_grad=True`` (MXNet 1.9), dense otherwise.
"""
from __future__ import annotations

import numpy as np

from ..errors import OperatorError
from ..registry import Op, Param, kernel, register
from ..sdk import capacity as cap
from ..sdk import csr as sdk_csr
from ._util import (ROW_VALUES_PER_WORK, T, index_dtype_for, is_host, kernel_module, match_rows, numba_values,
                    rows_in_parallel)

_BOTH = ("cpu", "gpu")


class IndexOutOfRangeError(OperatorError, IndexError):
    """An id given to ``Embedding`` is outside ``[0, input_dim)``."""


# ---- ids -----------------------------------------------------------------------------------------
def _raise_out_of_range(ids, n: int, op: str) -> None:
    bad = ids[~((ids > -1) & (ids < n))]
    raise IndexOutOfRangeError(
        f"{op}: {int(bad.shape[0])} id(s) outside [0, input_dim={n}), the first is {bad[:1].tolist()[0]!r}; "
        "ids index rows of the weight"
    )


def _kernel_ids(ids):
    """Host ids as int64 or float64: the two id types the numba kernels are compiled for."""
    return ids.astype(np.int64 if ids.dtype.kind in "iu" else np.float64, copy=False)


def _check_ids(ids, n: int, op: str) -> None:
    """Raise IndexOutOfRangeError unless every id truncates into [0, n) (NaN never does)."""
    if is_host(ids):
        bad = kernel_module("nn").out_of_range_id(None, ids.size, _kernel_ids(ids), n,
                                                  work=ids.size // ROW_VALUES_PER_WORK)
    else:
        bad = int((~((ids > -1) & (ids < n))).sum())
    if bad:
        _raise_out_of_range(ids, n, op)


def _as_int_ids(ids):
    """Checked ids as an integer array (float ids truncate toward zero)."""
    return ids if ids.dtype.kind in "iu" else ids.astype(np.int64)


def _dense(x):
    return x.data if x.stype == "default" else x.tostype("default").data


# ---- Embedding -----------------------------------------------------------------------------------
def _row_word(row_bytes: int) -> type:
    """The widest unsigned integer type whose size divides ``row_bytes``: copying rows as
    such words is faster than copying bytes."""
    for word in (np.uint64, np.uint32, np.uint16):
        if row_bytes % np.dtype(word).itemsize == 0:
            return word
    return np.uint8


@register("Embedding")
class EmbeddingOp(Op):
    """Rows of ``weight`` (input_dim, output_dim) at the ids in ``data`` (any shape, int or
    float ids; floats truncate); output shape ``data.shape + (output_dim,)``.

    Ids outside [0, input_dim) raise ``IndexOutOfRangeError`` (MXNet clips them silently).
    ``weight`` may be row_sparse: missing rows read as zeros. The weight gradient is
    row_sparse with ``sparse_grad=True`` or a row_sparse ``weight``; ``data`` gets no gradient.
    """

    trusted = True  # built-in kernels, tested against NumPy/SciPy references

    arguments = ("data", "weight")
    backward_needs_inputs = ("data",)
    input_dim = Param(int, doc="number of rows of weight (vocabulary size)")
    output_dim = Param(int, doc="length of each embedding vector")
    dtype = Param("dtype", "float32", "dtype of weight and of the output")
    sparse_grad = Param(bool, False, "make the weight gradient row_sparse")
    partition, partition_args = "rows", ("data",)  # the weight goes whole to every block

    def partitioning(self, data, weight):
        return ("rows", ("data",)) if data else (None, None)

    def check_params(self) -> None:
        if self.input_dim < 0 or self.output_dim < 0:
            raise ValueError(f"input_dim and output_dim must be non-negative, "
                             f"got {self.input_dim}, {self.output_dim}")

    def infer_shape(self, data, weight):
        if tuple(weight) != (self.input_dim, self.output_dim):
            raise ValueError(f"weight must have shape (input_dim, output_dim) = "
                             f"{(self.input_dim, self.output_dim)}, got {tuple(weight)}")
        return [(*data, self.output_dim)]

    def infer_type(self, data, weight):
        if weight != np.dtype(self.dtype):
            raise TypeError(f"weight has dtype {weight.name} but dtype={np.dtype(self.dtype).name}; "
                            f"pass dtype='{weight.name}'")
        return [weight]

    @kernel(device="cpu")
    def dense_cpu(self, ctx, data, weight, out):
        kernels = kernel_module("nn")
        ids = _kernel_ids(data.reshape(-1))
        rows = out.reshape(ids.shape[0], self.output_dim)
        # a gather only moves bytes: a few compiled kernels for every value dtype (float16
        # too), the rows viewed as words of the widest size that divides them
        word = _row_word(weight.dtype.itemsize * self.output_dim)
        w, r = np.ascontiguousarray(weight).view(word), rows.view(word)
        bad = kernels.gather_row(None, ids.shape[0], ids, w, r, work=rows.size // ROW_VALUES_PER_WORK)
        if bad:
            _raise_out_of_range(ids, self.input_dim, "Embedding")

    @kernel(device="gpu")
    def dense_xp(self, ctx, data, weight, out):
        ids = data.reshape(-1)
        _check_ids(ids, self.input_dim, "Embedding")
        out.reshape(ids.shape[0], self.output_dim)[...] = weight[_as_int_ids(ids)]

    @kernel(device=_BOTH, stypes=("default", "row_sparse"))
    def rsp_weight(self, ctx, data, weight, out):
        ids = data.data.reshape(-1)
        _check_ids(ids, self.input_dim, "Embedding")
        rows = out.data.reshape(ids.shape[0], self.output_dim)
        rows[...] = 0
        found, pos = match_rows(weight.indices, _as_int_ids(ids), ctx.xp)
        rows[found] = weight.data[pos]

    def gradient(self, out_grads, inputs, outputs):
        data, weight = inputs
        # a row_sparse weight (a hashed table) gets a row_sparse gradient, never its dense size
        return [None, T._embedding_backward(data, out_grads[0], input_dim=self.input_dim,
                                          sparse_grad=self.sparse_grad or weight.stype == "row_sparse")]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: int64 ids (repeated) into a dense and a row_sparse weight
        (missing rows read as zeros), with and without ``sparse_grad``."""
        from . import _samples

        ids = _samples.ints([[0, 2, 4], [2, 1, 2]])
        params = {"input_dim": 5, "output_dim": 3, "dtype": "float64"}
        return [([ids, _samples.array((5, 3))], params),
                ([ids, _samples.array((5, 3))], {**params, "sparse_grad": True}),
                ([ids, _samples.array((5, 3), "row_sparse", seed=2)], params)]


@register("_embedding_backward")
class EmbeddingBackward(Op):
    """The weight gradient of ``Embedding``: row ``i`` is the sum of the ``out_grad`` rows
    whose id is ``i``; row_sparse (rows = the distinct ids) when ``sparse_grad``."""

    trusted = True  # built-in kernels, tested against NumPy/SciPy references

    arguments = ("data", "out_grad")
    backward_needs_inputs = ("data",)
    input_dim = Param(int, doc="number of rows of the gradient")
    sparse_grad = Param(bool, False, "row_sparse result")
    partition = "sum"  # a sum over the ids' rows: per-block gradients add up
    # a row_sparse result stores the distinct ids: at most one row per id (and input_dim)
    capacity = cap.computed(lambda op, out, data, out_grad: data.size, "size(data) (the ids)")

    def infer_shape(self, data, out_grad):
        if len(out_grad) != len(data) + 1 or tuple(out_grad[:-1]) != tuple(data):
            raise ValueError(f"out_grad must have shape data.shape + (output_dim,), got data "
                             f"{tuple(data)} and out_grad {tuple(out_grad)}")
        return [(self.input_dim, out_grad[-1])]

    def infer_type(self, data, out_grad):
        return [out_grad]

    def infer_storage_type(self, data, out_grad):
        return ["row_sparse" if self.sparse_grad else "default"]

    @kernel(device="cpu", stypes=("*", "*"))
    def segment_sum_cpu(self, ctx, data, out_grad, out):
        from ..sdk.groups import group_by_rank, rank_ids

        kernels = kernel_module("nn")
        ids = _dense(data).reshape(-1)
        width = out.shape[1]
        values = numba_values(np.ascontiguousarray(_dense(out_grad)).reshape(ids.shape[0], width))
        # ranks ids against their sorted distinct values and checks them, in one O(len(ids)) pass
        rank, unique, bad = rank_ids(_kernel_ids(ids), self.input_dim)
        if bad:
            _raise_out_of_range(ids, self.input_dim, "_embedding_backward")
        parallel = rows_in_parallel(values.size)
        if parallel:
            order, starts = group_by_rank(rank, unique.shape[0])
        if self.sparse_grad:
            if parallel:
                sums = np.empty((unique.shape[0], width), dtype=values.dtype)
                sdk_csr.segment_sum_rows(None, starts, order, values, np.arange(unique.shape[0]), sums)
            else:
                sums = np.zeros((unique.shape[0], width), dtype=values.dtype)
                kernels.scatter_add_rows(rank, values, np.arange(unique.shape[0]), sums)
            # indices keep int32 when the ids are int32 (index_dtype_for reads only the dtype)
            idx = unique.astype(index_dtype_for(ids if ids.dtype.kind in "iu" else unique, shape=out.shape),
                                copy=False)
            ctx.set_row_sparse(out, sums.astype(out.dtype, copy=False), idx)
            return
        direct = out.data.dtype == values.dtype
        dest = out.data if direct else np.empty(out.shape, dtype=values.dtype)
        dest[...] = 0
        if parallel:
            sdk_csr.segment_sum_rows(None, starts, order, values, unique, dest)
        else:
            kernels.scatter_add_rows(rank, values, unique, dest)
        if not direct:
            out.data[...] = dest

    @kernel(device="gpu", stypes=("*", "*"))
    def segment_sum_xp(self, ctx, data, out_grad, out):
        xp = ctx.xp
        ids = _dense(data).reshape(-1)
        _check_ids(ids, self.input_dim, "_embedding_backward")
        width = out.shape[1]
        values = _dense(out_grad).reshape(ids.shape[0], width)
        if values.dtype == np.float16:
            values = values.astype(np.float32)
        int_ids = _as_int_ids(ids)
        # the distinct ids, and the positions of each in order (a stable sort): each id's row
        # sums its gradient rows in their order, deterministic, and the cpu's sums
        unique, starts, order = sdk_csr.group_columns(ctx, int_ids, self.input_dim)
        sums = xp.empty((unique.shape[0], width), dtype=values.dtype)
        sdk_csr.segment_sum_rows(ctx, starts, order, xp.ascontiguousarray(values),
                                 xp.arange(unique.shape[0]), sums)
        sums = sums.astype(out.dtype, copy=False)
        if self.sparse_grad:
            idx = unique.astype(index_dtype_for(int_ids, shape=out.shape), copy=False)
            ctx.set_row_sparse(out, sums, idx)
        else:
            out.data[...] = 0
            out.data[unique] = sums

    def gradient(self, out_grads, inputs, outputs):
        # linear in out_grad: its gradient gathers the head rows back
        head = out_grads[0]
        data = inputs[0]
        return [None, T.Embedding(data, head, input_dim=self.input_dim, output_dim=head.shape[1],
                                dtype=head.dtype)]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: repeated int64 ids, dense and row_sparse results."""
        from . import _samples

        ids = _samples.ints([[0, 2, 4], [2, 1, 2]])
        g = _samples.array((2, 3, 4))
        return [([ids, g], {"input_dim": 6}), ([ids, g], {"input_dim": 6, "sparse_grad": True})]

    def reference(self, data: np.ndarray, out_grad: np.ndarray) -> np.ndarray:
        """NumPy reference for ``opcheck``: the ``out_grad`` rows summed per id."""
        out = np.zeros((self.input_dim, out_grad.shape[-1]), dtype=out_grad.dtype)
        np.add.at(out, data.astype(np.int64).ravel(), out_grad.reshape(-1, out_grad.shape[-1]))
        return out


# ---- Dropout -------------------------------------------------------------------------------------
_FLOATS = frozenset(np.dtype(t) for t in ("float16", "float32", "float64"))


@register("Dropout")
class DropoutOp(Op):
    """In training (``autograd.train_mode()``/``record()``, or ``mode="always"``) each value is
    kept with probability ``1 - p`` and scaled by ``1 / (1 - p)``, otherwise zeroed; in
    prediction it is the identity. ``axes`` share one draw along those axes (variational
    dropout). The hidden second output is the mask the backward pass multiplies by.
    """

    trusted = True  # built-in kernels, tested against NumPy/SciPy references

    outputs = ("output", "mask")
    num_visible_outputs = 1
    resources = ("random",)
    backward_needs_inputs = ()
    backward_needs_outputs = ("mask",)
    p = Param(float, 0.5, "probability of dropping a value, in [0, 1)")
    mode = Param(str, "training", "drop in training only, or always", choices=("training", "always"))
    axes = Param("shape", (), "axes along which one mask value is shared")

    def check_params(self) -> None:
        if not 0 <= self.p < 1:
            raise ValueError(f"p must be in [0, 1), got {self.p}")

    def draws_random(self, training: bool) -> bool:
        return (training or self.mode == "always") and self.p > 0

    def infer_shape(self, data):
        ndim = len(data)
        mask = list(data)
        for a in self.axes:
            if not -ndim <= a < ndim:
                raise ValueError(f"axis {a} is out of range for data of {ndim} dimension(s)")
            mask[a % ndim] = 1
        return [tuple(data), tuple(mask)]

    def infer_type(self, data):
        if data not in _FLOATS:
            raise TypeError(f"Dropout takes float16, float32 or float64 data, got {data.name}")
        return [data, data]

    @kernel(device=_BOTH)
    def dense(self, ctx, data, out, mask):
        xp = ctx.xp
        if (ctx.is_train or self.mode == "always") and self.p > 0:
            draws = ctx.rng.random(mask.shape, dtype=np.float32)  # host draws, copied to a gpu
            scale = mask.dtype.type(1.0 / (1.0 - self.p))
            mask[...] = xp.asarray(np.where(draws >= self.p, scale, mask.dtype.type(0)))
            xp.multiply(data, mask, out=out)
        else:
            mask[...] = 1
            out[...] = data

    def gradient(self, out_grads, inputs, outputs):
        g, mask = out_grads[0], outputs[1]
        return [T.elemwise_mul(g, mask) if g.shape == mask.shape else T.broadcast_mul(g, mask)]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: always dropping (opcheck reseeds before each run), shared
        along an axis, and the identity outside training."""
        from . import _samples

        x = _samples.array((3, 4))
        return [([x], {"p": 0.5, "mode": "always"}), ([x], {"p": 0.3, "mode": "always", "axes": (1,)}), [x]]
