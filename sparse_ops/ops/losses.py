"""MXNet's output layers: operators that end a network and whose backward pass gives the
loss's own gradient, whatever head gradient arrives (MXNet 1.9's semantics).

- ``SoftmaxOutput``: softmax forward; backward ``softmax - one_hot(label)`` (label
  smoothing, ignored labels, normalization by batch or by valid labels), or
  ``softmax - label`` for a label of the data's shape (a distribution). MXNet's legacy
  name ``Softmax`` is the same operator.
- ``LinearRegressionOutput``, ``LogisticRegressionOutput`` (sigmoid forward) and
  ``MAERegressionOutput``: backward ``out - label`` (its sign for MAE: -1 at a tie), scaled by
  ``grad_scale`` over the label's entries per example.
- ``make_loss``: identity forward; backward ones (the output is the loss itself).

A user calling ``backward()`` on these outputs gets the gradient of the loss they stand
for, as MXNet's training scripts expect; the head gradient is read only by
``SoftmaxOutput(out_grad=True)``. Because the gradient is the loss's and not the
derivative of the output, ``opcheck`` skips its finite-difference comparison; the tests
check these gradients against NumPy formulas and against the cross-entropy's own
finite differences. Dense kernels; the label gets no gradient.
"""
from __future__ import annotations

import math

import numpy as np

from ..dtypes import require_one_dtype
from ..registry import Op, Param, kernel, register
from ._util import T, int_ids
from .passthrough import _Copy

_BOTH = ("cpu", "gpu")
_LOSS_GRADIENT = {"gradient": "its gradient is the loss's (MXNet's output layers ignore the head gradient), "
                              "not the derivative of its output; tests compare it with NumPy formulas"}


def _labels(values: list) -> object:
    """A float64 sample label of class ids (MXNet's labels are floats)."""
    from ..creation import array

    return array(np.asarray(values, dtype=np.float64))


def _size(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


class _SoftmaxOutputRules(Op):
    """The parameters and layout of ``SoftmaxOutput`` and its backward operator."""

    trusted = True  # built-in kernels, tested against NumPy references
    arguments = ("data", "label")
    grad_scale = Param(float, 1.0, "scale of the gradient")
    ignore_label = Param(float, -1.0, "the label whose examples get no gradient (with use_ignore)")
    multi_output = Param(bool, False, "softmax along axis 1 of (n, k, ...) data, a label per position")
    use_ignore = Param(bool, False, "give examples labelled ignore_label no gradient")
    preserve_shape = Param(bool, False, "softmax along the last axis, a label per leading position")
    normalization = Param(str, "null", "divide the gradient by nothing, the batch size or the valid labels",
                          choices=("null", "batch", "valid"))
    out_grad = Param(bool, False, "multiply the gradient by the head gradient")
    smooth_alpha = Param(float, 0.0, "label smoothing: taken from the label's class, shared by the others")

    def check_params(self) -> None:
        if not 0.0 <= self.smooth_alpha <= 1.0:
            raise ValueError(f"{self._opdef.name}: smooth_alpha must be in [0, 1], got {self.smooth_alpha}")

    def layout(self, shape: tuple[int, ...]) -> tuple[int, int, int]:
        """(examples, classes, positions per example) of data of ``shape``: the softmax runs
        along the middle axis of this 3-d view."""
        if not shape:
            raise ValueError(f"{self._opdef.name}: data must have at least one axis, got shape ()")
        size = _size(shape)
        if self.multi_output:
            if len(shape) < 2:
                raise ValueError(f"{self._opdef.name}: multi_output needs data of shape (n, k, ...), got {shape}")
            n, k = shape[0], shape[1]
            return n, k, size // (n * k) if n * k else 0
        if self.preserve_shape:
            k = shape[-1]
            return (size // k if k else _size(shape[:-1])), k, 1
        n = shape[0]
        return n, (size // n if n else _size(shape[1:])), 1

    def legacy_label(self, data: tuple[int, ...], label: tuple[int, ...]) -> bool:
        """Whether ``label`` has the shape MXNet's shape rule gives N-d data (N >= 3) without
        ``multi_output`` or ``preserve_shape``: the data's shape less its last axis. MXNet's
        backward then reads the first n of its values as the n examples' class ids (its data
        is one softmax per example, over all the other axes): so does this one."""
        return (len(data) >= 3 and not self.multi_output and not self.preserve_shape
                and tuple(label) == tuple(data[:-1]))

    def class_ids(self, label: object, n: int, positions: int) -> object:
        """The label's values as the (n, positions) class ids, from a legacy-shaped label its
        first n values (``legacy_label``)."""
        flat = label.reshape(-1)
        return (flat[:n] if flat.shape[0] != n * positions else flat).reshape(n, positions)

    def check_label(self, data: tuple[int, ...], label: tuple[int, ...]) -> None:
        if tuple(label) == tuple(data) or self.legacy_label(data, label):
            return  # a distribution over the classes for each example, or MXNet's N-d label
        n, _, positions = self.layout(data)
        want = n * positions
        if _size(label) != want or (label and label[0] != data[0] and not self.preserve_shape):
            raise ValueError(f"{self._opdef.name}: label of shape {tuple(label)} does not fit data of shape "
                             f"{tuple(data)}: it needs {want} class ids (one per example"
                             f"{' and position' if self.multi_output else ''}) or the data's shape (argument label)")

    def infer_shape(self, data, label):
        self.check_label(data, label)
        return [tuple(data)]

    def infer_type(self, data, label):
        if data.kind != "f":
            raise TypeError(f"{self._opdef.name} needs floating point data, got {data} (argument data)")
        return [data]


@register("SoftmaxOutput")
class SoftmaxOutput(_SoftmaxOutputRules):
    """The softmax of ``data`` (along axis 1 of its (n, size / n) view; axis 1 of (n, k, ...)
    with ``multi_output``; the last axis with ``preserve_shape``). Backward: the softmax
    minus the label's one-hot vector (``smooth_alpha`` moved from the label's class to the
    others), times ``grad_scale``, divided by the batch size or the count of labels other
    than ``ignore_label`` (``normalization``), the head gradient ignored unless
    ``out_grad``. Labels are class ids as floats, truncated; one out of range gets no
    one-hot entry, as in MXNet."""

    backward_needs_inputs = ("label",)
    backward_needs_outputs = ("output",)
    opcheck_skip = _LOSS_GRADIENT

    @kernel(device=_BOTH)
    def dense(self, ctx, data, label, output):
        if data.size == 0:
            return
        x = data.reshape(self.layout(data.shape))
        z = x.astype(np.float32) if x.dtype == np.float16 else x
        z = z - z.max(axis=1, keepdims=True)
        e = ctx.xp.exp(z)
        output[...] = (e / e.sum(axis=1, keepdims=True)).reshape(output.shape)

    def reference(self, data, label):
        from scipy.special import softmax

        return softmax(data.reshape(self.layout(data.shape)), axis=1).reshape(data.shape)

    def gradient(self, out_grads, inputs, outputs):
        grad = T._backward_SoftmaxOutput(outputs[0], inputs[1], **self.params_dict())
        if self.out_grad:
            grad = T.elemwise_mul(grad, out_grads[0])
        return [grad, None]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: class ids, ignored labels with smoothing and valid
        normalization, multi_output, preserve_shape, a distribution as the label."""
        from . import _samples

        return [[_samples.array((4, 3)), _labels([0.0, 2.0, 1.0, 2.0])],
                ([_samples.array((4, 3), seed=1), _labels([0.0, -1.0, 1.0, 2.0])],
                 {"use_ignore": True, "normalization": "valid", "smooth_alpha": 0.1, "grad_scale": 2.0}),
                ([_samples.array((2, 3, 2), seed=2), _labels([[0.0, 2.0], [1.0, 1.0]])],
                 {"multi_output": True, "normalization": "batch"}),
                ([_samples.array((2, 2, 3), seed=3), _labels([[0.0, 2.0], [1.0, 0.0]])], {"preserve_shape": True}),
                [_samples.array((2, 3), seed=4), _samples.array((2, 3), seed=5, positive=True)]]


@register("_backward_SoftmaxOutput")
class SoftmaxOutputBackward(_SoftmaxOutputRules):
    """The gradient ``SoftmaxOutput`` gives its data, from its ``output`` (the softmax) and
    ``label`` (see there); the head gradient is applied by the caller (``out_grad``)."""

    arguments = ("output", "label")
    differentiable = False

    @kernel(device=_BOTH)
    def dense(self, ctx, output, label, grad):
        if output.size == 0:
            return
        xp = ctx.xp
        out = output.astype(np.float32) if output.dtype == np.float16 else output
        if label.shape == output.shape:  # a distribution: no normalization, as MXNet
            grad[...] = (out - label.astype(out.dtype)) * out.dtype.type(self.grad_scale)
            return
        n, k, positions = self.layout(output.shape)
        o = out.reshape(n, k, positions)
        ids = int_ids(xp, self.class_ids(label, n, positions), self._opdef.name, "label").reshape(n, 1, positions)
        hit = ids == xp.arange(k).reshape(1, k, 1)
        alpha = 0.0 if self.multi_output else self.smooth_alpha  # MXNet smooths the single-output form only
        target = xp.where(hit, o.dtype.type(1.0 - alpha), o.dtype.type(alpha / (k - 1) if alpha and k > 1 else 0.0))
        g = o - target
        ignored = ids == int(self.ignore_label)
        if self.use_ignore:
            g = xp.where(ignored, o.dtype.type(0), g)
        if self.normalization == "batch":
            count = n if self.multi_output else n * positions
        elif self.normalization == "valid":
            count = max(int((~ignored).sum()), 1)
        else:
            count = 1
        spread = positions if self.multi_output and self.normalization != "valid" else 1
        g *= o.dtype.type(self.grad_scale / spread / count)
        grad[...] = g.reshape(grad.shape)

    def reference(self, output, label):
        """MXNet's definition, one example and position at a time."""
        if label.shape == output.shape:
            return (output - label) * self.grad_scale
        n, k, positions = self.layout(output.shape)
        o, ids = output.reshape(n, k, positions), self.class_ids(label, n, positions)
        alpha = 0.0 if self.multi_output else self.smooth_alpha
        g, valid = np.zeros_like(o), 0
        for i in range(n):
            for p in range(positions):
                c = int(ids[i, p])
                if c == int(self.ignore_label):
                    if self.use_ignore:
                        continue
                else:
                    valid += 1
                for j in range(k):
                    g[i, j, p] = o[i, j, p] - ((1 - alpha) if j == c else (alpha / (k - 1) if k > 1 else 0.0))
        divisor = {"null": 1, "batch": n if self.multi_output else n * positions, "valid": max(valid, 1)}
        scale = self.grad_scale / divisor[self.normalization]
        if self.multi_output and self.normalization != "valid":
            scale /= positions
        return (g * scale).reshape(output.shape)

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: ``SoftmaxOutput``'s, on a softmax output."""
        from . import _samples

        probs = _samples.array((4, 3), positive=True)
        return [[probs, _labels([0.0, 2.0, 1.0, 2.0])],
                ([probs, _labels([0.0, -1.0, 1.0, 2.0])],
                 {"use_ignore": True, "normalization": "valid", "smooth_alpha": 0.1}),
                ([_samples.array((2, 3, 2), positive=True), _labels([[0.0, -1.0], [1.0, 2.0]])],
                 {"multi_output": True, "use_ignore": True, "grad_scale": 0.5}),
                ([_samples.array((2, 3), positive=True), _samples.array((2, 3), seed=1, positive=True)],
                 {"grad_scale": 2.0})]


class _RegressionOutput(Op):
    """``label`` matched against ``data`` (the same number of values, the same first axis);
    backward ``grad_scale * d(out, label) / (label values per example)``."""

    trusted = True  # built-in kernels, tested against NumPy references
    arguments = ("data", "label")
    grad_scale = Param(float, 1.0, "scale of the gradient")
    backward_needs_inputs = ("label",)
    backward_needs_outputs = ("output",)
    opcheck_skip = _LOSS_GRADIENT

    def infer_shape(self, data, label):
        if not data or not label or label[0] != data[0] or _size(label) != _size(data):
            raise ValueError(f"{self._opdef.name}: label of shape {tuple(label)} does not match data of shape "
                             f"{tuple(data)} (the same first axis and number of values) (argument label)")
        return [tuple(data)]

    def infer_type(self, data, label):
        if data.kind != "f":
            raise TypeError(f"{self._opdef.name} needs floating point data, got {data} (argument data)")
        require_one_dtype(self._opdef.name, ("data", "label"), (data, label))
        return [data]

    def forward(self, xp, x):
        return x

    def difference(self, d):
        return d

    @kernel(device=_BOTH)
    def dense(self, ctx, data, label, output):
        output[...] = self.forward(ctx.xp, data)

    def gradient(self, out_grads, inputs, outputs):
        out, label = outputs[0], inputs[1]
        per_example = _size(label.shape) // label.shape[0] if label.shape[0] else 1
        d = self.difference(T.elemwise_sub(out, T.reshape(label, shape=out.shape)))
        return [T._mul_scalar(d, scalar=self.grad_scale / max(per_example, 1)), None]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: a label of the data's shape, a flat label, a scale."""
        from . import _samples

        return [[_samples.array((3, 2)), _samples.array((3, 2), seed=1)],
                ([_samples.array((4, 1), seed=2), _samples.array((4,), seed=3)], {"grad_scale": 0.5})]


@register("LinearRegressionOutput")
class LinearRegressionOutput(_RegressionOutput):
    """``data`` itself; backward ``out - label`` (a squared loss's gradient, halved)."""


@register("LogisticRegressionOutput")
class LogisticRegressionOutput(_RegressionOutput):
    """``sigmoid(data)``; backward ``out - label`` (the logistic loss's gradient)."""

    def forward(self, xp, x):
        with np.errstate(over="ignore"):
            return 1 / (1 + xp.exp(-x))


@register("MAERegressionOutput")
class MAERegressionOutput(_RegressionOutput):
    """``data`` itself; backward the sign of ``out - label`` (the absolute loss's gradient),
    -1 where they are equal, as MXNet's (``out - label > 0 ? 1 : -1``)."""

    def difference(self, d):
        return T._minus_scalar(T._mul_scalar(T._greater_scalar(d, scalar=0.0), scalar=2.0), scalar=1.0)


@register("make_loss")
class MakeLoss(_Copy):
    """A copy of ``data`` that stands for a loss: its gradient is ones whatever head gradient
    arrives, so ``backward()`` on a loss built from other operators starts there."""

    opcheck_skip = _LOSS_GRADIENT

    def gradient(self, out_grads, inputs, outputs):
        return [T.ones_like(out_grads[0])]
