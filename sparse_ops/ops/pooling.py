"""``Pooling``: MXNet's 1-d and 2-d pooling in NCW / NCHW layout (``max``, ``avg``, ``sum``
and ``lp``), with ``kernel``, ``stride``, ``pad``, ``global_pool``, ``pooling_convention``
(``valid``, ``full``, ``same``) and ``count_include_pad``, as MXNet 1.9 computes them:

- a window starts at ``o * stride - pad`` and reads its entries inside the data: ``max``
  starts from the dtype's lowest finite value (a window of padding only, as ``full`` may
  make past the data, gives that value; a ``sum`` or ``avg`` of it gives 0), ``avg``
  divides by the window's size counted up to the padded edge (``count_include_pad``) or by
  its entries inside the data, ``lp`` (p = 1, 2 or 3) is ``sum(x ** p) ** (1 / p)`` with
  the signed powers and roots (p = 1: the plain sum; p = 3: the cube root);
- ``valid`` gives ``1 + (x + 2 pad - k) // stride`` windows, ``full`` rounds that division
  up, ``same`` (1-d, no padding, as in MXNet) gives ``ceil(x / stride)``;
- the gradient of ``max`` goes to the first largest entry of each window (row-major), as
  MXNet's backward finds it.

The kernels read the windows as a strided view of the padded data (no copy until the
reduction); the gradient is the operator ``_pooling_backward``, one strided add per kernel
offset. Dense cpu kernels, as ``Convolution``.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ..registry import Op, Param, kernel, register
from ._util import T


class _PoolParams(Op):
    trusted = True  # built-in kernels, tested against NumPy references

    kernel = Param("shape", (), "window size: (w,) or (h, w) (ignored with global_pool)")
    pool_type = Param(str, "max", "the reduction over each window", choices=("max", "avg", "sum", "lp"))
    global_pool = Param(bool, False, "one window over all of each channel's entries")
    stride = Param("shape", (), "stride per spatial axis (default 1)")
    pad = Param("shape", (), "padding per spatial axis (default 0)")
    pooling_convention = Param(str, "valid", "how many windows: valid, full (rounding up) or same",
                               choices=("valid", "full", "same"))
    count_include_pad = Param(bool, True, "avg divides by the window's size with its padding")
    p_value = Param(int, None, "the p of lp pooling: 1, 2 or 3")
    cudnn_off = Param(bool, False, "accepted for MXNet compatibility; no effect")
    layout = Param(str, "None", "only NCW / NCHW (MXNet's default) is supported")

    def check_params(self):
        if self.layout not in ("None", "NCW", "NCHW"):
            raise ValueError(f"Pooling supports the NCW / NCHW layout only, got layout={self.layout!r}")
        if self.pool_type == "lp" and self.p_value not in (1, 2, 3):
            raise ValueError(f"lp pooling needs p_value 1, 2 or 3 (as MXNet), got {self.p_value}")

    def geometry(self, shape: tuple) -> tuple:
        """(kernel, stride, pad, output sizes), each per spatial axis, of data of ``shape``."""
        shape = tuple(shape)
        if len(shape) not in (3, 4):
            raise ValueError(f"Pooling takes 3-d (N, C, W) or 4-d (N, C, H, W) data, got shape {shape}")
        spatial = shape[2:]
        nd = len(spatial)
        if self.global_pool:
            return spatial, (1,) * nd, (0,) * nd, (1,) * nd
        k = tuple(self.kernel)
        if len(k) != nd:
            raise ValueError(f"kernel {k} must have {nd} entries for data of shape {shape}")

        def per_axis(name: str, value: tuple, default: int) -> tuple:
            v = tuple(value) if value else (default,) * nd
            if len(v) != nd:
                raise ValueError(f"{name} must have {nd} entries as kernel does, got {v}")
            return v

        pad = tuple(self.pad)
        if self.pooling_convention == "same" and not any(pad):
            pad = ()  # MXNet's 'same' convention checks only that every pad entry is zero
        stride, pad = per_axis("stride", self.stride, 1), per_axis("pad", pad, 0)
        if min(k) < 1 or min(stride) < 1 or min(pad) < 0:
            raise ValueError(f"kernel and stride must be positive and pad non-negative, got kernel={k}, "
                             f"stride={stride}, pad={pad}")
        if self.pooling_convention == "same" and (nd != 1 or any(pad)):
            raise ValueError("pooling_convention 'same' supports 1-d pooling without pad only (as MXNet)")
        out = []
        for x, kk, s, p in zip(spatial, k, stride, pad):
            if kk > x + 2 * p:
                raise ValueError(f"kernel size {kk} exceeds the input ({x} padded to {x + 2 * p})")
            if self.pooling_convention == "valid":
                out.append(1 + (x + 2 * p - kk) // s)
            elif self.pooling_convention == "full":
                out.append(1 + math.ceil((x + 2 * p - kk) / s))
            else:
                out.append(math.ceil(x / s))
        return k, stride, pad, tuple(out)

    def _params(self) -> dict:
        return {name: getattr(self, name) for name in ("kernel", "pool_type", "global_pool", "stride", "pad",
                                                         "pooling_convention", "count_include_pad", "p_value")}

    # ---- the shared pieces of the kernels ---------------------------------------------------------
    def _padded(self, x: np.ndarray, geo: tuple, fill: float) -> np.ndarray:
        """x padded by ``pad`` before and as far as the last window reaches after, with ``fill``."""
        k, s, p, out = geo
        width = [(0, 0), (0, 0)] + [(pa, max(pa, (o - 1) * st + kk - pa - n))
                                    for n, kk, st, pa, o in zip(x.shape[2:], k, s, p, out)]
        return np.pad(x, width, constant_values=fill)

    def _windows(self, padded: np.ndarray, geo: tuple) -> np.ndarray:
        """(N, C, *out, *kernel) strided view of the windows of the padded data."""
        k, s, _, out = geo
        nd = len(k)
        axes = tuple(range(2, 2 + nd))
        win = np.lib.stride_tricks.sliding_window_view(padded, k, axis=axes)
        index = (slice(None), slice(None)) + tuple(slice(0, o * st, st) for o, st in zip(out, s))
        return win[index]

    def _lowest(self, dtype: np.dtype) -> float:
        """Where a max starts: the lowest finite value of the data's dtype (MXNet's)."""
        return float(np.finfo(dtype).min)

    def _pool_size(self, shape: tuple, geo: tuple) -> np.ndarray:
        """The divisor of ``avg`` for each output position (1 for the other pool types; 1 for
        a window of padding only too, whose sum is 0)."""
        k, s, p, out = geo
        if self.pool_type != "avg":
            return np.ones(out)
        sizes = []
        for n, kk, st, pa, o in zip(shape[2:], k, s, p, out):
            start = np.arange(o) * st - pa
            end = np.minimum(start + kk, n + pa)
            if not self.count_include_pad:
                start, end = np.maximum(start, 0), np.minimum(end, n)
            sizes.append(end - start)
        return np.maximum(functools.reduce(np.multiply.outer, sizes), 1).astype(float)


@register("Pooling")
class PoolingOp(_PoolParams):
    """The ``pool_type`` reduction of each window of ``data`` (see the module's text)."""

    backward_needs_inputs = ("data",)
    backward_needs_outputs = ("output",)

    def infer_shape(self, data):
        return [tuple(data[:2]) + self.geometry(data)[3]]

    def infer_type(self, data):
        if data.kind != "f":
            raise TypeError(f"Pooling needs floating point data, got {data} (argument data)")
        return [data]

    @kernel(device="cpu")
    def dense(self, ctx, data, out):
        if data.size == 0 or out.size == 0:
            return
        geo = self.geometry(data.shape)
        nd = len(geo[0])
        reduce_axes = tuple(range(-nd, 0))
        x = data.astype(np.promote_types(data.dtype, np.float32), copy=False)
        if self.pool_type == "max":
            low = self._lowest(data.dtype)
            win = self._windows(self._padded(x, geo, low), geo)
            out[...] = np.maximum(win.max(axis=reduce_axes), low)
            return
        win = self._windows(self._padded(x, geo, 0.0), geo)
        if self.pool_type == "lp":
            total = (win ** self.p_value).sum(axis=reduce_axes)
            out[...] = total if self.p_value == 1 else np.sqrt(total) if self.p_value == 2 else np.cbrt(total)
            return
        out[...] = win.sum(axis=reduce_axes) / self._pool_size(data.shape, geo)

    def gradient(self, out_grads, inputs, outputs):
        return [T._pooling_backward(out_grads[0], inputs[0], outputs[0], **self._params())]

    def reference(self, data):
        """A direct loop over the output positions, MXNet's window bounds written out."""
        geo = self.geometry(data.shape)
        k, s, p, out = geo
        res = np.empty(data.shape[:2] + out)
        for o in np.ndindex(*out):
            starts = [oi * st - pa for oi, st, pa in zip(o, s, p)]
            bounds = [(max(b, 0), min(b + kk, n)) for b, kk, n in zip(starts, k, data.shape[2:])]
            window = data[(Ellipsis,) + tuple(slice(a, b) for a, b in bounds)].reshape(data.shape[:2] + (-1,))
            if self.pool_type == "max":
                v = np.maximum(window.max(axis=-1, initial=-np.inf), self._lowest(data.dtype))
            elif self.pool_type == "lp":
                total = (window ** self.p_value).sum(axis=-1)
                v = np.sign(total) * np.abs(total) ** (1.0 / self.p_value)  # the signed root
            else:
                v = window.sum(axis=-1)
                if self.pool_type == "avg" and window.shape[-1]:
                    if self.count_include_pad:
                        size = math.prod(min(b + kk, n + pa) - b for b, kk, n, pa in zip(starts, k, data.shape[2:], p))
                    else:
                        size = math.prod(b - a for a, b in bounds)
                    v = v / size
            res[(Ellipsis,) + o] = v
        return res

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: 2-d max with stride and pad, avg with full convention (and
        without the padding counted), sum, lp, global, 1-d, 1-d same."""
        from . import _samples

        A = _samples.array
        x = A((2, 2, 5, 5), seed=1)
        return [([x], {"kernel": (2, 2), "stride": (2, 2), "pad": (1, 1)}),
                ([x], {"kernel": (3, 2), "pool_type": "avg", "stride": (2, 2), "pad": (1, 0),
                       "pooling_convention": "full"}),
                ([x], {"kernel": (3, 3), "pool_type": "avg", "pad": (1, 1), "count_include_pad": False}),
                ([x], {"kernel": (2, 3), "pool_type": "sum", "stride": (1, 2)}),
                ([x], {"kernel": (2, 2), "pool_type": "lp", "p_value": 2}),
                ([x], {"pool_type": "avg", "global_pool": True}),
                ([A((2, 3, 7), seed=2)], {"kernel": (3,), "stride": (2,), "pad": (1,)}),
                ([A((1, 2, 7), seed=3)], {"kernel": (2,), "stride": (3,), "pooling_convention": "same"})]


@register("_pooling_backward")
class PoolingBackward(_PoolParams):
    """The gradient of ``Pooling`` with respect to its data, from the head gradient
    ``out_grad``, the ``data`` and the pooled ``output``."""

    arguments = ("out_grad", "data", "output")
    differentiable = False

    def infer_shape(self, out_grad, data, output):
        want = tuple(data[:2]) + self.geometry(data)[3]
        if tuple(out_grad) != want or tuple(output) != want:
            raise ValueError(f"out_grad and output must have the pooled shape {want}, got {tuple(out_grad)} and "
                             f"{tuple(output)}")
        return [tuple(data)]

    def infer_type(self, out_grad, data, output):
        return [data]

    @kernel(device="cpu")
    def dense(self, ctx, out_grad, data, output, grad):
        grad[...] = 0
        if data.size == 0 or out_grad.size == 0:
            return
        geo = self.geometry(data.shape)
        k, s, p, out = geo
        nd = len(k)
        x = data.astype(np.promote_types(data.dtype, np.float32), copy=False)
        g = out_grad.astype(x.dtype, copy=False)
        padded = self._padded(x, geo, self._lowest(data.dtype) if self.pool_type == "max" else 0.0)
        win = self._windows(padded, geo)  # (N, C, *out, *k)
        if self.pool_type == "max":
            flat = win.reshape(win.shape[:2 + nd] + (-1,))
            first = flat.argmax(axis=-1)  # the first largest entry, row-major
            share = (np.arange(flat.shape[-1]) == first[..., None]).reshape(win.shape) * g[(...,) + (None,) * nd]
        elif self.pool_type == "lp":  # d out / d x = (x / out) ** (p - 1), 0 where out is 0 (MXNet's lp_grad)
            pv, y = self.p_value, output.astype(x.dtype, copy=False)
            with np.errstate(divide="ignore", invalid="ignore"):
                scale = np.where(y != 0, g / y ** (pv - 1), 0.0) if pv > 1 else g
            share = (win ** (pv - 1) if pv > 1 else np.ones_like(win)) * scale[(...,) + (None,) * nd]
        else:
            share = np.broadcast_to((g / self._pool_size(data.shape, geo))[(...,) + (None,) * nd], win.shape)
        acc = np.zeros(padded.shape, dtype=x.dtype)
        for offset in np.ndindex(*k):  # one strided add per kernel offset
            index = (slice(None), slice(None)) + tuple(slice(i, i + st * (o - 1) + 1, st)
                                                       for i, st, o in zip(offset, s, out))
            acc[index] += share[(Ellipsis,) + offset]
        inside = (slice(None), slice(None)) + tuple(slice(pa, pa + n) for pa, n in zip(p, data.shape[2:]))
        grad[...] = acc[inside]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: max and avg (full convention) on 2-d data."""
        from . import _samples

        A = _samples.array
        x = A((2, 2, 5, 5), seed=1)
        return [([A((2, 2, 3, 3), seed=4), x, A((2, 2, 3, 3), seed=5)],
                 {"kernel": (2, 2), "stride": (2, 2), "pad": (1, 1)}),
                ([A((2, 2, 3, 3), seed=4), x, A((2, 2, 3, 3), seed=5)],
                 {"kernel": (3, 2), "pool_type": "avg", "stride": (2, 2), "pad": (1, 0),
                  "pooling_convention": "full"})]
