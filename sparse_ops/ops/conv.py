"""``Convolution``: MXNet's dense 1-d and 2-d convolution in NCW / NCHW layout (cross-
correlation, as MXNet computes it), with ``kernel``, ``stride``, ``pad``, ``dilate``,
``num_filter``, ``num_group`` and ``no_bias``.

The kernels gather the input's windows (a strided view of the padded input: no copy until
the contraction) and contract them with the weight by ``einsum`` (a matrix product per
group). The gradients are the operators ``_convolution_backward_data`` (the windows'
gradients scattered back, one strided add per kernel offset) and
``_convolution_backward_weight`` (the windows contracted with the head gradient).
"""
from __future__ import annotations

import numpy as np

from ..dtypes import promote_types
from ..registry import Op, Param, kernel, register
from ._util import T


def _geometry(op, data_shape: tuple) -> tuple:
    """(spatial rank, kernel, stride, pad, dilate) as 2-d tuples (a 1-d convolution is a 2-d
    one with height 1), checking the parameters against the data's rank."""
    k = tuple(op.kernel)
    nd = len(k)
    if nd not in (1, 2):
        raise ValueError(f"Convolution supports 1-d and 2-d kernels, got kernel={k}")
    if len(data_shape) != nd + 2:
        raise ValueError(f"a {nd}-d kernel needs {nd + 2}-d data (N, C, {'W' if nd == 1 else 'H, W'}), "
                         f"got shape {tuple(data_shape)}")

    def per_axis(name, value, default):
        v = tuple(value) if value else (default,) * nd
        if len(v) != nd:
            raise ValueError(f"{name} must have {nd} entries as kernel does, got {v}")
        return v

    stride = per_axis("stride", op.stride, 1)
    pad = per_axis("pad", op.pad, 0)
    dilate = per_axis("dilate", op.dilate, 1)
    if min(k) < 1 or min(stride) < 1 or min(dilate) < 1 or min(pad) < 0:
        raise ValueError(f"kernel, stride and dilate must be positive and pad non-negative, got kernel={k}, "
                         f"stride={stride}, dilate={dilate}, pad={pad}")
    if nd == 1:
        k, stride, pad, dilate = (1, *k), (1, *stride), (0, *pad), (1, *dilate)
    return nd, k, stride, pad, dilate


def _out_spatial(size, k, s, p, d):
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


class _ConvParams(Op):
    trusted = True  # built-in kernels, tested against NumPy references

    kernel = Param("shape", doc="kernel size: (w,) or (h, w)")
    stride = Param("shape", (), "stride per spatial axis (default 1)")
    dilate = Param("shape", (), "dilation per spatial axis (default 1)")
    pad = Param("shape", (), "zero padding per spatial axis (default 0)")
    num_filter = Param(int, doc="number of output channels")
    num_group = Param(int, 1, "number of groups: input and output channels split into this many")
    workspace = Param(int, 1024, "accepted for MXNet compatibility; no effect")
    no_bias = Param(bool, False, "no bias input")
    cudnn_tune = Param(str, "off", "accepted for MXNet compatibility; no effect")
    cudnn_off = Param(bool, False, "accepted for MXNet compatibility; no effect")
    layout = Param(str, "None", "only NCW / NCHW (MXNet's default) is supported")

    def check_params(self):
        if self.num_filter < 1 or self.num_group < 1:
            raise ValueError(f"num_filter and num_group must be positive, got {self.num_filter}, {self.num_group}")
        if self.num_filter % self.num_group:
            raise ValueError(f"num_filter ({self.num_filter}) must be a multiple of num_group ({self.num_group})")
        if self.layout not in ("None", "NCW", "NCHW"):
            raise ValueError(f"Convolution supports the NCW / NCHW layout only, got layout={self.layout!r}")

    def _shapes(self, data: tuple, weight: tuple) -> tuple:
        """(geometry, output shape), checking data and weight."""
        geo = _geometry(self, data)
        nd, k, s, p, d = geo
        n, c = data[0], data[1]
        if c % self.num_group:
            raise ValueError(f"data has {c} channels, not a multiple of num_group ({self.num_group})")
        want = (self.num_filter, c // self.num_group, *tuple(self.kernel))
        if tuple(weight) != want:
            raise ValueError(f"weight must have shape {want} for data of shape {tuple(data)}, got {tuple(weight)}")
        spatial = (1, *data[2:]) if nd == 1 else tuple(data[2:])
        out = tuple(_out_spatial(spatial[a], k[a], s[a], p[a], d[a]) for a in range(2))
        if min(out) < 1:
            raise ValueError(f"the kernel (dilated) does not fit the padded data: data {tuple(data)}, "
                             f"kernel {tuple(self.kernel)}, pad {p[2 - nd:]}, dilate {d[2 - nd:]}")
        return geo, (n, self.num_filter, *(out[1:] if nd == 1 else out))

    # ---- the shared pieces of the kernels ----------------------------------------------------
    def _windows(self, x: np.ndarray, geo: tuple) -> np.ndarray:
        """(N, G, Cg, OH, OW, KH, KW) strided view of the padded input's windows."""
        nd, k, s, p, d = geo
        if nd == 1:
            x = x[:, :, None, :]
        if any(p):
            x = np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])))
        ext = tuple((k[a] - 1) * d[a] + 1 for a in range(2))
        win = np.lib.stride_tricks.sliding_window_view(x, ext, axis=(2, 3))
        win = win[:, :, ::s[0], ::s[1], ::d[0], ::d[1]]
        n, c = win.shape[:2]
        g = self.num_group
        return win.reshape(n, g, c // g, *win.shape[2:])

    def _grouped_weight(self, w: np.ndarray) -> np.ndarray:
        """(G, Fg, Cg, KH, KW)."""
        g = self.num_group
        w = w if w.ndim == 4 else w[:, :, None, :]
        return w.reshape(g, w.shape[0] // g, *w.shape[1:])

    def _grouped_out(self, y: np.ndarray) -> np.ndarray:
        """(N, G, Fg, OH, OW) view of an output-shaped array."""
        y = y if y.ndim == 4 else y[:, :, None, :]
        g = self.num_group
        return y.reshape(y.shape[0], g, y.shape[1] // g, *y.shape[2:])


@register("Convolution")
class ConvolutionOp(_ConvParams):
    """out[n, f] = sum over the channels c of f's group and the kernel offsets of
    weight[f, c, i, j] * padded_data[n, c, oh * stride + i * dilate, ow * stride + j * dilate]
    (+ bias[f]). Inputs ``(data, weight, bias)``, or ``(data, weight)`` with ``no_bias``."""

    arguments = ("data", "weight", "bias")
    variadic = True  # two inputs when no_bias
    backward_needs_inputs = ("data", "weight")

    def infer_shape(self, *shapes):
        names = ("data", "weight") if self.no_bias else ("data", "weight", "bias")
        if len(shapes) != len(names):
            raise ValueError(f"Convolution with no_bias={self.no_bias} takes {len(names)} inputs "
                             f"({', '.join(names)}), got {len(shapes)}")
        _, out = self._shapes(tuple(shapes[0]), tuple(shapes[1]))
        if not self.no_bias and tuple(shapes[2]) != (self.num_filter,):
            raise ValueError(f"bias must have shape {(self.num_filter,)}, got {tuple(shapes[2])}")
        return [out]

    def infer_type(self, *dtypes):
        return [promote_types(*dtypes)]

    @kernel(device="cpu")
    def dense(self, ctx, data, weight, *rest):
        out = rest[-1]
        geo, _ = self._shapes(data.shape, weight.shape)
        win = self._windows(data, geo)
        y = np.einsum("ngchwij,gfcij->ngfhw", win, self._grouped_weight(weight), optimize=True)
        res = self._grouped_out(out)
        res[...] = y
        if not self.no_bias:
            out += rest[0].reshape((1, -1) + (1,) * (out.ndim - 2))

    def gradient(self, out_grads, inputs, outputs):
        g = out_grads[0]
        data, weight = inputs[:2]
        p = self._param_values()
        grads = [T._convolution_backward_data(g, data, weight, **p),
                 T._convolution_backward_weight(g, data, weight, **p)]
        if not self.no_bias:
            grads.append(T.sum(g, axis=(0, *range(2, g.ndim))))
        return grads

    def _param_values(self) -> dict:
        return {"kernel": tuple(self.kernel), "stride": tuple(self.stride), "dilate": tuple(self.dilate),
                "pad": tuple(self.pad), "num_filter": self.num_filter, "num_group": self.num_group}

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: 2-d with bias, padding and stride; grouped and dilated without
        bias; 1-d."""
        from . import _samples

        A = _samples.array
        return [([A((2, 2, 5, 5), seed=1), A((3, 2, 3, 3), seed=2), A((3,), seed=3)],
                 {"kernel": (3, 3), "num_filter": 3, "pad": (1, 1), "stride": (2, 1)}),
                ([A((1, 4, 6, 5), seed=1), A((4, 2, 2, 2), seed=2)],
                 {"kernel": (2, 2), "num_filter": 4, "num_group": 2, "dilate": (2, 1), "no_bias": True}),
                ([A((2, 3, 7), seed=1), A((2, 3, 3), seed=2), A((2,), seed=3)],
                 {"kernel": (3,), "num_filter": 2, "stride": (2,), "pad": (1,)})]

    def reference(self, data, weight, *rest):
        """A direct loop over the output channels and kernel offsets, in NumPy."""
        geo, out_shape = self._shapes(data.shape, weight.shape)
        out = _reference_conv(data, weight, geo, self.num_filter, self.num_group)
        if not self.no_bias:
            out += rest[0].reshape(1, -1, 1, 1)
        return out.reshape(out_shape)


def _reference_conv(data, weight, geo, num_filter, num_group):
    nd, k, s, p, d = geo
    x = data if nd == 2 else data[:, :, None, :]
    w = weight if nd == 2 else weight[:, :, None, :]
    x = np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])))
    n, c = x.shape[:2]
    oh = (x.shape[2] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (x.shape[3] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    cg, fg = c // num_group, num_filter // num_group
    out = np.zeros((n, num_filter, oh, ow), dtype=np.result_type(data, weight))
    for f in range(num_filter):
        grp = f // fg
        for i in range(k[0]):
            for j in range(k[1]):
                patch = x[:, grp * cg:(grp + 1) * cg, i * d[0]:i * d[0] + s[0] * (oh - 1) + 1:s[0],
                          j * d[1]:j * d[1] + s[1] * (ow - 1) + 1:s[1]]
                out[:, f] += np.einsum("nchw,c->nhw", patch, w[f, :, i, j])
    return out


def _transpose_reference(geo, num_filter, num_group, out_grad, fixed, varied_shape, varied_is_data):
    """The gradient of sum(conv * out_grad) in the varied input, one unit vector at a time."""
    res = np.zeros(int(np.prod(varied_shape)))
    for e in range(res.size):
        unit = np.zeros(res.size)
        unit[e] = 1
        unit = unit.reshape(varied_shape)
        args = (unit, fixed) if varied_is_data else (fixed, unit)
        res[e] = np.sum(_reference_conv(*args, geo, num_filter, num_group).reshape(out_grad.shape) * out_grad)
    return res.reshape(varied_shape)


class _ConvBackward(_ConvParams):
    arguments = ("out_grad", "data", "weight")
    differentiable = False

    def infer_type(self, out_grad, data, weight):
        return [promote_types(out_grad, data, weight)]

    @classmethod
    def samples(cls) -> list:
        from . import _samples

        A = _samples.array
        return [([A((2, 3, 3, 5), seed=4), A((2, 2, 5, 5), seed=1), A((3, 2, 3, 3), seed=2)],
                 {"kernel": (3, 3), "num_filter": 3, "pad": (1, 1), "stride": (2, 1)}),
                ([A((1, 4, 4, 4), seed=4), A((1, 4, 6, 5), seed=1), A((4, 2, 2, 2), seed=2)],
                 {"kernel": (2, 2), "num_filter": 4, "num_group": 2, "dilate": (2, 1)}),
                ([A((2, 2, 4), seed=4), A((2, 3, 7), seed=1), A((2, 3, 3), seed=2)],
                 {"kernel": (3,), "num_filter": 2, "stride": (2,), "pad": (1,)})]

    def _checked(self, out_grad, data, weight):
        geo, out = self._shapes(tuple(data), tuple(weight))
        if tuple(out_grad) != out:
            raise ValueError(f"out_grad must have the output's shape {out}, got {tuple(out_grad)}")
        return geo


@register("_convolution_backward_data")
class ConvolutionBackwardData(_ConvBackward):
    """The gradient of ``Convolution`` with respect to its data (``data`` gives the shape)."""

    def infer_shape(self, out_grad, data, weight):
        self._checked(out_grad, data, weight)
        return [tuple(data)]

    @kernel(device="cpu")
    def dense(self, ctx, out_grad, data, weight, out):
        geo = self._checked(out_grad.shape, data.shape, weight.shape)
        nd, k, s, p, d = geo
        dwin = np.einsum("ngfhw,gfcij->ngchwij", self._grouped_out(out_grad), self._grouped_weight(weight),
                         optimize=True)
        n, g, cg, oh, ow = dwin.shape[:5]
        x = data if nd == 2 else data[:, :, None, :]
        acc = np.zeros((n, g, cg, x.shape[2] + 2 * p[0], x.shape[3] + 2 * p[1]), dtype=out.dtype)
        for i in range(k[0]):  # one strided add per kernel offset (the windows of one offset never overlap)
            for j in range(k[1]):
                acc[:, :, :, i * d[0]:i * d[0] + s[0] * (oh - 1) + 1:s[0],
                    j * d[1]:j * d[1] + s[1] * (ow - 1) + 1:s[1]] += dwin[..., i, j]
        acc = acc[:, :, :, p[0]:p[0] + x.shape[2], p[1]:p[1] + x.shape[3]]
        out[...] = acc.reshape(out.shape)

    def reference(self, out_grad, data, weight):
        """The transpose of Convolution's reference, one unit vector of the data at a time."""
        geo = self._checked(out_grad.shape, data.shape, weight.shape)
        return _transpose_reference(geo, self.num_filter, self.num_group, out_grad, weight, data.shape, True)


@register("_convolution_backward_weight")
class ConvolutionBackwardWeight(_ConvBackward):
    """The gradient of ``Convolution`` with respect to its weight."""

    def infer_shape(self, out_grad, data, weight):
        self._checked(out_grad, data, weight)
        return [tuple(weight)]

    @kernel(device="cpu")
    def dense(self, ctx, out_grad, data, weight, out):
        geo = self._checked(out_grad.shape, data.shape, weight.shape)
        dw = np.einsum("ngchwij,ngfhw->gfcij", self._windows(data, geo), self._grouped_out(out_grad),
                       optimize=True)
        out[...] = dw.reshape(out.shape)

    def reference(self, out_grad, data, weight):
        geo = self._checked(out_grad.shape, data.shape, weight.shape)
        return _transpose_reference(geo, self.num_filter, self.num_group, out_grad, data, weight.shape, False)
