"""MXNet operators the face writes with the table's operators, so that they differentiate
through those operators' gradients: ``batch_dot``, ``SequenceMask``, ``SequenceLast``,
``SequenceReverse``, ``moments``, ``depth_to_space``, ``space_to_depth``, ``diag``, and the
normalisation layers ``LayerNorm``, ``BatchNorm``, ``InstanceNorm``, ``GroupNorm`` and
``L2Normalization``, ``SoftmaxActivation``, ``softmax_cross_entropy`` and nearest-neighbour
``UpSampling``.

Sequence lengths and block sizes decide which entries are read; they are read on the host
(``op._host_ids``) and checked first, since a position out of range would be a read out
of bounds in MXNet's kernels. Arguments, results and refusals follow MXNet 1.9.1: each
function takes its arguments as the face's registered operators do (``mxnet_call``), so a
parameter's string reads as MXNet reads it (``transpose_a='False'`` is false) and every
refusal names the function the user called.
"""
from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from ....ndarray import NDArray
from ....registry import Param
from ....tape import is_training, pause
from ..base import MXNetArgumentError, MXNetValueError
from . import _op
from ._op import mxnet_call
from .op import _host_ids


def _floating(fname: str, *arrays: tuple[str, NDArray]) -> None:
    """Refuse arrays that are not floating point (MXNet's real-type operators), naming the
    argument."""
    for name, x in arrays:
        if isinstance(x, NDArray) and x.dtype.kind != "f":
            raise MXNetValueError(f"{fname}: {name} must be a floating-point array (float16, float32 or float64), "
                                  f"got {x.dtype} (argument {name})")


def _constant(like: NDArray, values: np.ndarray) -> NDArray:
    """A face array of ``values`` on ``like``'s device (positions, masks: no gradient)."""
    return _op.as_face(NDArray(like.device.xp.asarray(values), like.device))


@mxnet_call(transpose_a=Param(bool, False), transpose_b=Param(bool, False))
def batch_dot(lhs: NDArray, rhs: NDArray, transpose_a: bool = False, transpose_b: bool = False,
              forward_stype: Any = None, out: NDArray | None = None, name: str | None = None) -> NDArray:
    """The matrix products of the last two axes of N-d arrays (N >= 3) whose leading axes are
    equal: ``(B..., n, m) x (B..., m, k) -> (B..., n, k)``, either side transposed."""
    if forward_stype not in (None, "default"):
        raise MXNetValueError(f"batch_dot: forward_stype {forward_stype!r} is not supported (dense arrays only)")
    _floating("batch_dot", ("lhs", lhs), ("rhs", rhs))
    if lhs.dtype != rhs.dtype:
        raise MXNetValueError(f"batch_dot: lhs and rhs must have one dtype, got {lhs.dtype} and {rhs.dtype} "
                              "(argument rhs)")
    if lhs.ndim < 3 or rhs.ndim != lhs.ndim:
        raise MXNetValueError(f"batch_dot: lhs and rhs must be N-d arrays of one N >= 3, got shapes "
                              f"{tuple(lhs.shape)} and {tuple(rhs.shape)}")
    k_lhs = lhs.shape[-2] if transpose_a else lhs.shape[-1]
    k_rhs = rhs.shape[-1] if transpose_b else rhs.shape[-2]
    if lhs.shape[:-2] != rhs.shape[:-2] or k_lhs != k_rhs:
        raise MXNetValueError(f"batch_dot: shapes {tuple(lhs.shape)} and {tuple(rhs.shape)} (transpose_a="
                              f"{bool(transpose_a)}, transpose_b={bool(transpose_b)}) need equal leading batch axes "
                              f"and inner sizes")
    return _op.call("_linalg_gemm2", [lhs, rhs], {"transpose_a": transpose_a, "transpose_b": transpose_b}, out=out)


def _lengths(fname: str, data: NDArray, sequence_length: Any, use_sequence_length: bool, axis: int,
             low: int) -> tuple[np.ndarray | None, int, int]:
    """(the lengths as int64, or None to use every step; the sequence axis' size; the
    batch axis) of a Sequence* call; lengths below ``low`` or past the axis are refused
    when the operator would read there."""
    if axis not in (0, 1):
        raise MXNetValueError(f"{fname}: axis must be 0 or 1, got {axis}")
    if data.ndim < 2:
        raise MXNetValueError(f"{fname}: data must have at least 2 axes (sequence and batch), got shape "
                              f"{tuple(data.shape)}")
    steps, batch = data.shape[axis], data.shape[1 - axis]
    if not use_sequence_length:
        return None, steps, 1 - axis
    if sequence_length is None:
        raise MXNetArgumentError(f"{fname}: use_sequence_length=True needs the sequence_length input")
    ids = _host_ids(sequence_length, fname).reshape(-1)
    if ids.shape[0] != batch:
        raise MXNetValueError(f"{fname}: sequence_length has {ids.shape[0]} entries for a batch of {batch} "
                              f"(argument sequence_length)")
    if low is not None:
        bad = (ids < low) | (ids > steps)
        if bad.any():
            raise MXNetValueError(f"{fname}: sequence_length {ids[bad][0]} is outside [{low}, {steps}] "
                                  f"(argument sequence_length)")
    return ids, steps, 1 - axis


def _rows(data: NDArray) -> NDArray:
    """``data`` as (steps * batch, rest...): one row per (first axis, second axis) pair."""
    return _op.call("reshape", [data], {"shape": (-1,) + tuple(data.shape[2:])})


@mxnet_call(use_sequence_length=Param(bool, False), value=Param(float, 0.0), axis=Param(int, 0))
def SequenceMask(data: NDArray, sequence_length: Any = None, use_sequence_length: bool = False, value: float = 0.0,
                 axis: int = 0, out: NDArray | None = None, name: str | None = None) -> NDArray:
    """``data`` with every step at or past its sequence's length set to ``value`` (the
    sequence axis ``axis``, 0 or 1, the batch the other); without ``use_sequence_length``
    a copy. Masked entries get no gradient."""
    ids, steps, batch_axis = _lengths("SequenceMask", data, sequence_length, use_sequence_length, axis, None)
    if ids is None:
        return _op.call("identity", [data], out=out)
    keep = np.arange(steps)[:, None] < ids[None, :]  # (steps, batch)
    if axis == 1:
        keep = keep.T
    keep = np.broadcast_to(keep.reshape(keep.shape + (1,) * (data.ndim - 2)), data.shape)
    cond = _constant(data, keep.astype(data.dtype))
    fill = _constant(data, np.full(data.shape, value, dtype=data.dtype))
    return _op.call("where", [cond, data, fill], out=out)


@mxnet_call(use_sequence_length=Param(bool, False), axis=Param(int, 0))
def SequenceLast(data: NDArray, sequence_length: Any = None, use_sequence_length: bool = False, axis: int = 0,
                 out: NDArray | None = None, name: str | None = None) -> NDArray:
    """The last step of each sequence: ``data[length - 1]`` along ``axis`` for each batch
    entry (the axis' last step without ``use_sequence_length``); shape ``data.shape`` less
    ``axis``. Lengths must be in [1, steps]."""
    ids, steps, _ = _lengths("SequenceLast", data, sequence_length, use_sequence_length, axis, 1)
    batch = data.shape[1 - axis]
    if steps == 0 and batch:
        raise MXNetValueError(f"SequenceLast: the sequence axis {axis} of data of shape {tuple(data.shape)} is empty: "
                              "there is no last step")
    last = np.full(batch, steps - 1, dtype=np.int64) if ids is None else ids - 1
    b = np.arange(batch)
    positions = last * batch + b if axis == 0 else b * steps + last
    return _op.call("take", [_rows(data), _constant(data, positions)], {"axis": 0, "mode": "raise"}, out=out)


@mxnet_call(use_sequence_length=Param(bool, False), axis=Param(int, 0))
def SequenceReverse(data: NDArray, sequence_length: Any = None, use_sequence_length: bool = False, axis: int = 0,
                    out: NDArray | None = None, name: str | None = None) -> NDArray:
    """Each sequence's first ``length`` steps in reverse order, the steps after them kept
    (the whole axis without ``use_sequence_length``); the sequence axis is 0, as in MXNet."""
    if axis != 0:
        raise MXNetValueError(f"SequenceReverse: only axis 0 is supported, got {axis}")
    ids, steps, _ = _lengths("SequenceReverse", data, sequence_length, use_sequence_length, axis, 0)
    batch = data.shape[1]
    lengths = np.full(batch, steps, dtype=np.int64) if ids is None else ids
    t, b = np.arange(steps)[:, None], np.arange(batch)[None, :]
    source = np.where(t < lengths[None, :], lengths[None, :] - 1 - t, t)  # (steps, batch)
    rows = _op.call("take", [_rows(data), _constant(data, (source * batch + b).reshape(-1))],
                    {"axis": 0, "mode": "raise"})
    return _op.call("reshape", [rows], {"shape": tuple(data.shape)}, out=out)


@mxnet_call(axes=Param("axis", None), keepdims=Param(bool, False))
def moments(data: NDArray, axes: Any = None, keepdims: bool = False, name: str | None = None) -> list:
    """[mean, variance] of ``data`` over ``axes`` (every axis when None): the population
    variance, ``mean((x - mean) ** 2)``."""
    params = {"axis": None if axes is None else tuple(np.atleast_1d(axes).tolist()), "keepdims": True}
    mean = _op.call("mean", [data], params)
    var = _op.call("mean", [_op.call("square", [_op.call("broadcast_sub", [data, mean])])], params)
    if keepdims:
        return [mean, var]
    params["keepdims"] = False
    return [_op.call("mean", [mean], params), _op.call("mean", [var], params)]


def _blocks(fname: str, data: NDArray, block_size: int) -> tuple[int, int, int, int]:
    if data.ndim != 4:
        raise MXNetValueError(f"{fname}: data must be 4-d (N, C, H, W), got shape {tuple(data.shape)}")
    if int(block_size) < 1:
        raise MXNetValueError(f"{fname}: block_size must be positive, got {block_size}")
    return tuple(int(d) for d in data.shape)


@mxnet_call(block_size=Param(int))
def depth_to_space(data: NDArray, block_size: int, out: NDArray | None = None, name: str | None = None) -> NDArray:
    """(N, C, H, W) -> (N, C / b^2, H * b, W * b): blocks of channels moved into b x b
    spatial blocks (ONNX's DepthToSpace, DCR order, as MXNet)."""
    n, c, h, w = _blocks("depth_to_space", data, block_size)
    b = int(block_size)
    if c % (b * b):
        raise MXNetValueError(f"depth_to_space: the channels ({c}) must be a multiple of block_size ** 2 ({b * b})")
    x = _op.call("reshape", [data], {"shape": (n, b, b, c // (b * b), h, w)})
    x = _op.call("transpose", [x], {"axes": (0, 3, 4, 1, 5, 2)})
    return _op.call("reshape", [x], {"shape": (n, c // (b * b), h * b, w * b)}, out=out)


@mxnet_call(block_size=Param(int))
def space_to_depth(data: NDArray, block_size: int, out: NDArray | None = None, name: str | None = None) -> NDArray:
    """(N, C, H, W) -> (N, C * b^2, H / b, W / b): the inverse of ``depth_to_space``."""
    n, c, h, w = _blocks("space_to_depth", data, block_size)
    b = int(block_size)
    if h % b or w % b:
        raise MXNetValueError(f"space_to_depth: height ({h}) and width ({w}) must be multiples of block_size ({b})")
    x = _op.call("reshape", [data], {"shape": (n, c, h // b, b, w // b, b)})
    x = _op.call("transpose", [x], {"axes": (0, 3, 5, 1, 2, 4)})
    return _op.call("reshape", [x], {"shape": (n, c * b * b, h // b, w // b)}, out=out)


@mxnet_call(k=Param(int, 0), axis1=Param(int, 0), axis2=Param(int, 1))
def diag(data: NDArray, k: int = 0, axis1: int = 0, axis2: int = 1, out: NDArray | None = None,
         name: str | None = None) -> NDArray:
    """The ``k``-th diagonal of ``data`` over ``axis1`` and ``axis2`` (appended as the last
    axis, as ``numpy.diagonal``); for a 1-d ``data``, the square matrix with it on the
    ``k``-th diagonal (as ``numpy.diag``)."""
    try:
        k = operator.index(k)
    except TypeError:
        raise MXNetArgumentError(f"diag: k must be an integer, got {k!r}") from None
    if data.ndim == 0:
        raise MXNetValueError("diag: data must have at least one axis")
    if data.ndim == 1:
        m = data.shape[0] + abs(k)
        source = np.zeros((m, m), dtype=np.int64)  # 0: the zero put in front of the values
        i = np.arange(data.shape[0])
        source[i + max(-k, 0), i + max(k, 0)] = i + 1
        padded = _op.call("concat", [_constant(data, np.zeros(1, dtype=data.dtype)), data], {"dim": 0})
        return _op.call("reshape", [_op.call("take", [padded, _constant(data, source.reshape(-1))], {"axis": 0})],
                        {"shape": (m, m)}, out=out)
    nd = data.ndim
    a1, a2 = (int(a) % nd if -nd <= int(a) < nd else None for a in (axis1, axis2))
    if a1 is None or a2 is None or a1 == a2:
        raise MXNetValueError(f"diag: axis1 ({axis1}) and axis2 ({axis2}) must be distinct axes of a {nd}-d array")
    order = [a for a in range(nd) if a not in (a1, a2)] + [a1, a2]
    moved = _op.call("transpose", [data], {"axes": tuple(order)})
    rows, cols = data.shape[a1], data.shape[a2]
    i = np.arange(max(0, min(rows + min(k, 0), cols - max(k, 0))))
    positions = (i + max(-k, 0)) * cols + i + max(k, 0)
    flat = _op.call("reshape", [moved], {"shape": tuple(moved.shape[:-2]) + (rows * cols,)})
    return _op.call("take", [flat, _constant(data, positions)], {"axis": -1}, out=out)


# ---- normalisation layers ---------------------------------------------------------------------------
def _axis(fname: str, data: NDArray, axis: Any) -> int:
    try:
        a = operator.index(axis)
    except TypeError:
        raise MXNetArgumentError(f"{fname}: axis must be an integer, got {type(axis).__name__}") from None
    if not -data.ndim <= a < data.ndim:
        raise MXNetValueError(f"{fname}: axis {a} is out of range for data of shape {tuple(data.shape)}")
    return a % data.ndim


def _per_channel(fname: str, name: str, v: Any, data: NDArray, axis: int, dtype: Any) -> NDArray:
    """A (C,) parameter of channel axis ``axis`` in ``dtype``, shaped to broadcast against
    ``data``."""
    if not isinstance(v, NDArray):
        raise MXNetArgumentError(f"{fname}: {name} must be an NDArray, got a {type(v).__name__} (argument {name})")
    if tuple(v.shape) != (data.shape[axis],):
        raise MXNetValueError(f"{fname}: {name} must have shape ({data.shape[axis]},), one value per entry of "
                              f"axis {axis}, got {tuple(v.shape)} (argument {name})")
    shape = [1] * data.ndim
    shape[axis] = data.shape[axis]
    return _op.call("reshape", [_cast(v, dtype)], {"shape": tuple(shape)})


def _cast(x: NDArray, dtype: Any) -> NDArray:
    return x if x.dtype == dtype else _op.call("cast", [x], {"dtype": np.dtype(dtype).name})


def _computing(data: NDArray, *params: NDArray) -> np.dtype:
    """The dtype a normalisation computes in: the data's and the parameters', at least float32
    (float16 data with float32 parameters, MXNet's mixed precision, computes in float32)."""
    return np.result_type(data.dtype, *(p.dtype for p in params if isinstance(p, NDArray)), np.float32)


def _normalised(data: NDArray, mean: NDArray, var: NDArray, eps: float) -> tuple[NDArray, NDArray]:
    """((data - mean) / sqrt(var + eps), that square root): mean and var broadcast."""
    std = _op.call("sqrt", [_op.call("_plus_scalar", [var], {"scalar": float(eps)})])
    return _op.call("broadcast_div", [_op.call("broadcast_sub", [data, mean]), std]), std


def _finished(x: NDArray, gamma: NDArray | None, beta: NDArray, dtype: Any, out: NDArray | None) -> NDArray:
    """``x * gamma + beta`` (``x + beta`` without gamma) in ``dtype`` (the data's), into
    ``out`` when given."""
    if gamma is not None:
        x = _op.call("broadcast_mul", [x, gamma])
    result = _cast(_op.call("broadcast_add", [x, beta]), dtype)
    if out is not None:
        out[:] = result
        return out
    return result


@mxnet_call(axis=Param(int, -1), eps=Param(float, 1e-5), output_mean_var=Param(bool, False))
def LayerNorm(data: NDArray, gamma: NDArray, beta: NDArray, axis: int = -1, eps: float = 1e-5,
              output_mean_var: bool = False, out: NDArray | None = None, name: str | None = None) -> Any:
    """``(data - mean) / sqrt(var + eps) * gamma + beta``, the moments taken along ``axis``
    for each position of the other axes, in the data's dtype (computed in float32 at least);
    with ``output_mean_var`` also the mean and the standard deviation (``axis`` kept with
    length 1, in the parameters' dtype), through which no gradient passes."""
    _floating("LayerNorm", ("data", data))
    a = _axis("LayerNorm", data, axis)
    ct = _computing(data, gamma, beta)
    g, b = (_per_channel("LayerNorm", n, v, data, a, ct) for n, v in (("gamma", gamma), ("beta", beta)))
    mean, var = moments(_cast(data, ct), axes=a, keepdims=True)
    x, std = _normalised(_cast(data, ct), mean, var, eps)
    result = _finished(x, g, b, data.dtype, out)
    if not output_mean_var:
        return result
    return [result, _op.call("BlockGrad", [_cast(mean, gamma.dtype)]), _op.call("BlockGrad", [_cast(std, gamma.dtype)])]


@mxnet_call(eps=Param(float, 1e-3), momentum=Param(float, 0.9), fix_gamma=Param(bool, True),
            use_global_stats=Param(bool, False), output_mean_var=Param(bool, False), axis=Param(int, 1),
            cudnn_off=Param(bool, False))
def BatchNorm(data: NDArray, gamma: NDArray, beta: NDArray, moving_mean: NDArray, moving_var: NDArray,
              eps: float = 1e-3, momentum: float = 0.9, fix_gamma: bool = True, use_global_stats: bool = False,
              output_mean_var: bool = False, axis: int = 1, cudnn_off: bool = False, min_calib_range: Any = None,
              max_calib_range: Any = None, out: NDArray | None = None, name: str | None = None) -> Any:
    """Batch normalisation over every axis but the channel ``axis``, in the data's dtype
    (computed in float32 at least: float16 data with float32 parameters is MXNet's mixed
    precision): in training (``autograd.record()``/``train_mode``) with the batch's mean and
    (biased) variance, which also move ``moving_mean`` and ``moving_var`` in place
    (``moving * momentum + batch * (1 - momentum)``, in the forward pass as MXNet's cuDNN
    build does; its CPU builds do it in the backward pass); otherwise, or with ``use_global_stats``, with the moving statistics.
    ``fix_gamma`` takes gamma as ones (gamma's gradient is zero). With ``output_mean_var``
    also the mean and the inverse standard deviation used, in the parameters' dtype (no
    gradient passes through them)."""
    _floating("BatchNorm", ("data", data))
    a = _axis("BatchNorm", data, axis)
    if not 0.0 <= float(momentum) <= 1.0:
        raise MXNetValueError(f"BatchNorm: momentum must be in [0, 1], got {momentum}")
    ct = _computing(data, gamma, beta)
    g, b, running_mean, running_var = (_per_channel("BatchNorm", n, v, data, a, ct) for n, v in (
        ("gamma", gamma), ("beta", beta), ("moving_mean", moving_mean), ("moving_var", moving_var)))
    x = _cast(data, ct)
    if is_training() and not use_global_stats:
        if data.size == 0:
            raise MXNetValueError(f"BatchNorm: training needs at least one value per channel, got data of shape "
                                  f"{tuple(data.shape)} (its statistics would be NaN)")
        mean, var = moments(x, axes=tuple(i for i in range(data.ndim) if i != a), keepdims=True)
        with pause():  # the running statistics are state, not part of the graph
            m = float(momentum)
            flat = {"shape": (-1,)}
            moving_mean[:] = moving_mean * m + _cast(_op.call("reshape", [mean], flat), moving_mean.dtype) * (1 - m)
            moving_var[:] = moving_var * m + _cast(_op.call("reshape", [var], flat), moving_var.dtype) * (1 - m)
    else:
        mean, var = _op.call("BlockGrad", [running_mean]), _op.call("BlockGrad", [running_var])
    x, std = _normalised(x, mean, var, eps)
    if fix_gamma:  # gamma taken as ones; it stays in the graph (beta + 0 * gamma), so its gradient is zero
        b, g = _op.call("elemwise_add", [b, _op.call("_mul_scalar", [g], {"scalar": 0.0})]), None
    result = _finished(x, g, b, data.dtype, out)
    if not output_mean_var:
        return result
    invstd = _op.call("_rdiv_scalar", [std], {"scalar": 1.0})
    flat = {"shape": (-1,)}
    return [result, _op.call("BlockGrad", [_cast(_op.call("reshape", [mean], flat), gamma.dtype)]),
            _op.call("BlockGrad", [_cast(_op.call("reshape", [invstd], flat), gamma.dtype)])]


def _spatial(fname: str, data: NDArray) -> None:
    """Refuse data without spatial axes: (N, C, spatial...) as MXNet's instance and group
    normalisations take it."""
    if data.ndim < 3:
        raise MXNetValueError(f"{fname}: data must have at least 3 axes (batch, channel, spatial...), got shape "
                              f"{tuple(data.shape)}")


@mxnet_call(eps=Param(float, 1e-3))
def InstanceNorm(data: NDArray, gamma: NDArray, beta: NDArray, eps: float = 1e-3, out: NDArray | None = None,
                 name: str | None = None) -> NDArray:
    """``(data - mean) / sqrt(var + eps) * gamma + beta`` with the moments of each instance's
    channel (every axis after the first two), gamma and beta one value a channel (axis 1);
    in the data's dtype, computed in float32 at least."""
    _floating("InstanceNorm", ("data", data))
    _spatial("InstanceNorm", data)
    ct = _computing(data, gamma, beta)
    g, b = (_per_channel("InstanceNorm", n, v, data, 1, ct) for n, v in (("gamma", gamma), ("beta", beta)))
    x = _cast(data, ct)
    mean, var = moments(x, axes=tuple(range(2, data.ndim)), keepdims=True)
    return _finished(_normalised(x, mean, var, eps)[0], g, b, data.dtype, out)


@mxnet_call(num_groups=Param(int, 1), eps=Param(float, 1e-5), output_mean_var=Param(bool, False))
def GroupNorm(data: NDArray, gamma: NDArray, beta: NDArray, num_groups: int = 1, eps: float = 1e-5,
              output_mean_var: bool = False, out: NDArray | None = None, name: str | None = None) -> Any:
    """The channels (axis 1) split into ``num_groups`` groups of equal size, each instance's
    group normalised by its own moments (over its channels and the spatial axes), then
    ``* gamma + beta`` with one value a group (MXNet 1.9's shapes: ``(num_groups,)``); in the
    data's dtype, computed in float32 at least. With ``output_mean_var`` also the mean and
    the standard deviation ``sqrt(var + eps)``, shape ``(N, num_groups)``, through which no
    gradient passes."""
    _floating("GroupNorm", ("data", data))
    _spatial("GroupNorm", data)
    n, c = data.shape[0], data.shape[1]
    if num_groups < 1 or c % num_groups:
        raise MXNetValueError(f"GroupNorm: the {c} channels must split into num_groups={num_groups} groups of "
                              "equal size")
    ct = _computing(data, gamma, beta)
    grouped = _op.call("reshape", [_cast(data, ct)],
                       {"shape": (n, num_groups, c // num_groups, math.prod(data.shape[2:]))})
    g, b = (_per_channel("GroupNorm", name_, v, grouped, 1, ct) for name_, v in (("gamma", gamma), ("beta", beta)))
    mean, var = moments(grouped, axes=(2, 3), keepdims=True)
    x, std = _normalised(grouped, mean, var, eps)
    x = _op.call("reshape", [_op.call("broadcast_add", [_op.call("broadcast_mul", [x, g]), b])],
                 {"shape": tuple(data.shape)})
    result = _cast(x, data.dtype)
    if out is not None:
        out[:] = result
        result = out
    if not output_mean_var:
        return result
    flat = {"shape": (n, num_groups)}
    return [result, _op.call("BlockGrad", [_cast(_op.call("reshape", [mean], flat), gamma.dtype)]),
            _op.call("BlockGrad", [_cast(_op.call("reshape", [std], flat), gamma.dtype)])]


@mxnet_call(eps=Param(float, 1e-10), mode=Param(str, "instance", choices=("instance", "channel", "spatial")))
def L2Normalization(data: NDArray, eps: float = 1e-10, mode: str = "instance", out: NDArray | None = None,
                    name: str | None = None) -> NDArray:
    """``data / sqrt(sum(data ** 2) + eps)``, the sum over every axis but the first
    (``instance``), over axis 1 (``channel``) or over the axes after the second (``spatial``)."""
    _floating("L2Normalization", ("data", data))
    axes = {"instance": tuple(range(1, data.ndim)), "channel": (1,), "spatial": tuple(range(2, data.ndim))}.get(mode)
    if axes is None:
        raise MXNetValueError(f"L2Normalization: mode must be 'instance', 'channel' or 'spatial', got {mode!r}")
    if data.ndim < (3 if mode == "spatial" else 2):
        raise MXNetValueError(f"L2Normalization: data of shape {tuple(data.shape)} has no axes to normalise in "
                              f"mode {mode!r}")
    total = _op.call("sum", [_op.call("square", [data])], {"axis": axes, "keepdims": True})
    norm = _op.call("sqrt", [_op.call("_plus_scalar", [total], {"scalar": float(eps)})])
    return _op.call("broadcast_div", [data, norm], out=out)


# ---- activations, losses and upsampling -------------------------------------------------------------
@mxnet_call(mode=Param(str, "instance", choices=("instance", "channel")))
def SoftmaxActivation(data: NDArray, mode: str = "instance", out: NDArray | None = None,
                      name: str | None = None) -> NDArray:
    """MXNet's legacy softmax: over the last axis (``instance``), or over the channels, axis
    1, at each position (``channel``, data of at least 3 axes)."""
    _floating("SoftmaxActivation", ("data", data))
    if mode == "channel" and data.ndim < 3:
        raise MXNetValueError(f"SoftmaxActivation: mode='channel' needs data of at least 3 axes, got shape "
                              f"{tuple(data.shape)}")
    return _op.call("softmax", [data], {"axis": 1 if mode == "channel" else -1}, out=out)


@mxnet_call()
def softmax_cross_entropy(data: NDArray, label: NDArray, out: NDArray | None = None,
                          name: str | None = None) -> NDArray:
    """The summed cross-entropy of ``softmax(data)`` (batch, classes) against the integer
    class ``label`` (batch,): ``-sum_i log softmax(data)[i, label[i]]``, shape (1,) as MXNet
    gives it; differentiable in ``data`` (``softmax - one_hot(label)``)."""
    _floating("softmax_cross_entropy", ("data", data))
    if not isinstance(label, NDArray):
        raise MXNetArgumentError(f"softmax_cross_entropy: label must be an NDArray, got a {type(label).__name__}")
    if data.ndim != 2 or tuple(label.shape) != (data.shape[0],):
        raise MXNetValueError(f"softmax_cross_entropy: data must be (batch, classes) and label (batch,), got "
                              f"{tuple(data.shape)} and {tuple(label.shape)}")
    picked = _op.call("pick", [_op.call("log_softmax", [data], {"axis": -1}), label], {"axis": -1})
    return _op.call("negative", [_op.call("sum", [picked])], out=out)


@mxnet_call(scale=Param(int), sample_type=Param(str, choices=("nearest", "bilinear")), num_args=Param(int, 1),
            multi_input_mode=Param(str, "concat", choices=("concat", "sum")), num_filter=Param(int, 0),
            workspace=Param(int, 512))
def UpSampling(*data: NDArray, scale: int, sample_type: str, num_args: int = 1, multi_input_mode: str = "concat",
               num_filter: int = 0, workspace: int = 512, out: NDArray | None = None,
               name: str | None = None) -> NDArray:
    """Nearest-neighbour upsampling of (N, C, H, W) arrays: the first to ``scale`` times its
    height and width, every other one to that same size (its own factor, a whole number),
    then joined along the channels (``concat``) or added (``sum``). MXNet's ``bilinear`` form
    is a deconvolution with a weight input, which the face does not have."""
    if sample_type == "bilinear":
        raise MXNetValueError("UpSampling: sample_type='bilinear' runs MXNet's Deconvolution with a learned weight, "
                              "which this face does not have; use sample_type='nearest'")
    if scale < 1 or len(data) != num_args or not data:
        raise MXNetValueError(f"UpSampling: needs num_args={num_args} arrays (got {len(data)}) and scale >= 1 "
                              f"(got {scale})")
    for i, x in enumerate(data):
        if not isinstance(x, NDArray) or x.ndim != 4:
            raise MXNetValueError(f"UpSampling: input {i} must be a 4-d (N, C, H, W) NDArray, got "
                                  f"{tuple(getattr(x, 'shape', ())) or type(x).__name__}")
    height, width = data[0].shape[2] * scale, data[0].shape[3] * scale
    grown = []
    for i, x in enumerate(data):
        h, w = x.shape[2], x.shape[3]
        if h == 0 or w == 0 or height % h or width % w or height // h != width // w:
            raise MXNetValueError(f"UpSampling: input {i} of height and width {(h, w)} does not grow by one whole "
                                  f"factor to {(height, width)}")
        f = height // h
        grown.append(_op.call("repeat", [_op.call("repeat", [x], {"repeats": f, "axis": 2})],
                              {"repeats": f, "axis": 3}) if f > 1 else x)
    if len(grown) == 1:
        result = grown[0]
    elif multi_input_mode == "sum":
        if len({x.shape[1] for x in data}) != 1:
            raise MXNetValueError("UpSampling: multi_input_mode='sum' needs the same number of channels in every "
                                  "input")
        result = _op.call("add_n", grown)
    else:
        result = _op.call("concat", grown, {"dim": 1})
    if out is not None:
        out[:] = result
        return out
    return result


__all__ = ["batch_dot", "SequenceMask", "SequenceLast", "SequenceReverse", "moments", "depth_to_space",
           "space_to_depth", "diag", "LayerNorm", "BatchNorm", "InstanceNorm", "GroupNorm", "L2Normalization",
           "SoftmaxActivation", "softmax_cross_entropy", "UpSampling"]
