"""``mx.metric``: MXNet 1.9.1's online evaluation metrics.

A metric is fed batches with ``update(labels, preds)`` (lists of NDArrays, or one array each;
NumPy arrays are accepted too) and reports ``get() -> (name, value)``. Each metric keeps two
sets of statistics: the local ones, which ``reset_local()`` clears (say, at each logging
interval), and the global ones, which only ``reset()`` clears (say, at each epoch);
``get_global()`` reads the latter.

Classification: ``Accuracy`` (``acc``), ``TopKAccuracy`` (``top_k_accuracy``, ``top_k_acc``),
``F1``, ``MCC`` (binary), ``PCC`` (multiclass MCC), ``Perplexity``, ``CrossEntropy`` (``ce``),
``NegativeLogLikelihood`` (``nll_loss``). Regression: ``MAE``, ``MSE``, ``RMSE``,
``PearsonCorrelation`` (``pearsonr``). Others: ``Loss`` (also ``Torch``, ``Caffe``),
``CustomMetric`` and ``np`` (a function of NumPy arrays), ``CompositeEvalMetric``
(``composite``). ``create`` makes one from a name, a callable, a list, an instance or the JSON of
``get_config()``; ``register`` / ``alias`` add user classes to it.

Values follow MXNet's code: batch statistics are computed in the predictions' dtype with NumPy
(a float32 batch gives a float32 cross-entropy; counts and Pearson correlations are float64;
perplexity is a Python float, ``math.exp`` of the mean, as MXNet's)
and added to the running sums by NumPy's rules.
Where this module differs from MXNet 1.9.1, on purpose:

- ``get_config()`` also records ``average`` (F1, MCC, PearsonCorrelation) and ``axis``
  (Perplexity), and ``TopKAccuracy`` does not append ``_<k>`` to a name that already ends so,
  so ``create(json.dumps(m.get_config()))`` rebuilds the same metric (MXNet loses them);
- ``PearsonCorrelation(average='micro')`` keeps local and global statistics apart (MXNet's
  ``get_global()`` gives 0 there, and its ``reset_local()`` keeps the local data);
- ``TopKAccuracy`` updates its global statistics for 1-d predictions too, and takes ``top_k``
  above the number of classes as all of them;
- ``CompositeEvalMetric.get_metric`` raises for an index out of range (MXNet returns the error);
- ``Perplexity``, ``Loss`` and ``CustomMetric`` also take one array instead of a list.

Bad inputs raise ``MetricError``: a ``ValueError`` (as MXNet's shape checks) that is also an
``AssertionError`` (as MXNet's ``assert`` statements) and an ``mx.base.MXNetError``.
"""
from __future__ import annotations

import json
import math
import warnings
from collections import OrderedDict
from typing import Any, Callable, Sequence

import numpy

from .base import MXNetValueError
from .ndarray.ndarray import NDArray

__all__ = ["EvalMetric", "CompositeEvalMetric", "Accuracy", "TopKAccuracy", "F1", "MCC", "Perplexity", "MAE",
           "MSE", "RMSE", "CrossEntropy", "NegativeLogLikelihood", "PearsonCorrelation", "PCC", "Loss", "Torch",
           "Caffe", "CustomMetric", "create", "register", "alias", "check_label_shapes", "MetricError"]


class MetricError(MXNetValueError, AssertionError):
    """A label/prediction mismatch or a bad argument. A ``ValueError`` and an ``AssertionError``,
    so code written against MXNet's ``ValueError`` and ``assert`` checks catches it."""


# ---- helpers ---------------------------------------------------------------------------------------------
def _is_array(x: Any) -> bool:
    return isinstance(x, (NDArray, numpy.ndarray))


def _values(x: Any) -> numpy.ndarray:
    """An NDArray's (or NumPy array's) values as a NumPy array."""
    return x.asnumpy() if hasattr(x, "asnumpy") else numpy.asarray(x)


def _as_list(x: Any) -> Any:
    """One array becomes a one-element list; a list stays as it is."""
    return [x] if _is_array(x) else x


def check_label_shapes(labels: Any, preds: Any, wrap: bool = False, shape: bool = False) -> tuple[Any, Any]:
    """Check that labels and predictions agree, in length (``shape=False``) or in shape, and
    raise ``MetricError`` (a ValueError) if not. With ``wrap=True`` a single array is returned
    as a one-element list, so ``update`` takes one array as well as a list."""
    if shape:
        got_label, got_pred = labels.shape, preds.shape
    else:
        got_label, got_pred = len(labels), len(preds)
    if got_label != got_pred:
        what = "shape" if shape else "length"
        raise MetricError(f"labels and predictions differ in {what}: {got_label} vs {got_pred}")
    if wrap:
        labels, preds = _as_list(labels), _as_list(preds)
    return labels, preds


# ---- the base class and the registry ----------------------------------------------------------------------
class EvalMetric:
    """Base class of the metrics: keeps the running sums and counts, local and global.

    A subclass implements ``update`` and adds each batch's contribution with ``_add``;
    ``get`` returns ``sum_metric / num_inst``. ``output_names`` / ``label_names`` pick the
    arrays ``update_dict`` passes on (all when ``None``). Keyword arguments other than
    ``has_global_stats`` are remembered for ``get_config``.
    """

    def __init__(self, name: str, output_names: list[str] | None = None, label_names: list[str] | None = None,
                 **kwargs: Any) -> None:
        self.name = str(name)
        self.output_names = output_names
        self.label_names = label_names
        # without global statistics of its own (a user's subclass), get_global() is get()
        self._has_global_stats = kwargs.pop("has_global_stats", False)
        self._kwargs = kwargs
        self.reset()

    def __str__(self) -> str:
        return f"EvalMetric: {dict(self.get_name_value())}"

    def get_config(self) -> dict:
        """The arguments that rebuild this metric through ``create(**config)``."""
        return {**self._kwargs, "metric": type(self).__name__, "name": self.name,
                "output_names": self.output_names, "label_names": self.label_names}

    def update_dict(self, label: dict, pred: dict) -> None:
        """Update from ``{name: array}`` dicts, taking the arrays named by ``label_names`` and
        ``output_names`` (all of them, in order, when those are ``None``)."""
        preds = [pred[n] for n in self.output_names] if self.output_names is not None else list(pred.values())
        labels = [label[n] for n in self.label_names] if self.label_names is not None else list(label.values())
        self.update(labels, preds)

    def update(self, labels: Any, preds: Any) -> None:
        """Add one batch of labels and predictions (lists of arrays) to the statistics."""
        raise NotImplementedError()

    def _add(self, value: Any, count: Any) -> None:
        """Add a batch's sum and count to both the local and the global statistics."""
        self.sum_metric += value
        self.global_sum_metric += value
        self.num_inst += count
        self.global_num_inst += count

    def reset(self) -> None:
        """Clear the local and the global statistics."""
        self.num_inst = self.global_num_inst = 0
        self.sum_metric = self.global_sum_metric = 0.0

    def reset_local(self) -> None:
        """Clear the local statistics only."""
        self.num_inst = 0
        self.sum_metric = 0.0

    def get(self) -> tuple[Any, Any]:
        """``(name, value)`` of the local statistics; the value is NaN before any update."""
        if self.num_inst == 0:
            return self.name, float("nan")
        return self.name, self.sum_metric / self.num_inst

    def get_global(self) -> tuple[Any, Any]:
        """``(name, value)`` of the global statistics (those since the last ``reset``)."""
        if not self._has_global_stats:
            return self.get()
        if self.global_num_inst == 0:
            return self.name, float("nan")
        return self.name, self.global_sum_metric / self.global_num_inst

    def get_name_value(self) -> list[tuple[str, Any]]:
        """``get()`` as a list of ``(name, value)`` pairs (one per metric of a composite)."""
        return _pairs(*self.get())

    def get_global_name_value(self) -> list[tuple[str, Any]]:
        """``get_global()`` as a list of ``(name, value)`` pairs."""
        return _pairs(*self.get_global())


def _pairs(names: Any, values: Any) -> list[tuple[str, Any]]:
    names = names if isinstance(names, list) else [names]
    values = values if isinstance(values, list) else [values]
    return list(zip(names, values))


_REGISTRY: dict[str, type] = {}


def register(klass: type, name: str | None = None) -> type:
    """Make ``klass`` (an EvalMetric subclass) known to ``create`` under ``name`` (default: its
    class name), case-insensitively. Usable as a class decorator."""
    if not (isinstance(klass, type) and issubclass(klass, EvalMetric)):
        raise MetricError(f"register: {klass!r} is not a subclass of EvalMetric")
    key = (name or klass.__name__).lower()
    if key in _REGISTRY and _REGISTRY[key] is not klass:
        warnings.warn(f"metric {klass.__module__}.{klass.__name__} registered as {key!r} replaces "
                      f"{_REGISTRY[key].__module__}.{_REGISTRY[key].__name__}", UserWarning, stacklevel=2)
    _REGISTRY[key] = klass
    return klass


def alias(*names: str) -> Callable[[type], type]:
    """Class decorator: register the class under each of ``names`` as well."""
    def add_names(klass: type) -> type:
        for name in names:
            register(klass, name)
        return klass
    return add_names


def create(metric: Any, *args: Any, **kwargs: Any) -> EvalMetric:
    """Make a metric from: a registered name (``'acc'``, ``'f1'``, ...; ``args``/``kwargs`` go to
    its constructor), a callable ``feval(label, pred)`` (a ``CustomMetric``), a list of any of
    these (a ``CompositeEvalMetric``), an ``EvalMetric`` (returned as it is), a
    ``get_config()`` dict, or its JSON string."""
    if callable(metric):
        return CustomMetric(metric, *args, **kwargs)
    if isinstance(metric, list):
        return CompositeEvalMetric([create(m, *args, **kwargs) for m in metric])
    if isinstance(metric, EvalMetric):
        if args or kwargs:
            raise MetricError("create: no arguments may be given with a metric instance")
        return metric
    if isinstance(metric, dict):
        return create(**metric)
    if not isinstance(metric, str):
        raise MetricError(f"create: a metric must be a name, a callable, a list or an EvalMetric, not {metric!r}")
    if metric.startswith(("[", "{")):  # JSON: [name, {kwargs}] or a get_config() dict
        if args or kwargs:
            raise MetricError("create: no arguments may be given with a JSON configuration")
        config = json.loads(metric)
        return create(config[0], **config[1]) if isinstance(config, list) else create(**config)
    klass = _REGISTRY.get(metric.lower())
    if klass is None:
        raise MetricError(f"create: unknown metric {metric!r}; known: {', '.join(sorted(_REGISTRY))}")
    return klass(*args, **kwargs)


@register
@alias("composite")
class CompositeEvalMetric(EvalMetric):
    """Several metrics updated together; ``get()`` gives their names and values as two lists."""

    def __init__(self, metrics: Sequence[Any] | None = None, name: str = "composite",
                 output_names: list[str] | None = None, label_names: list[str] | None = None) -> None:
        self.metrics = [create(m) for m in (metrics or [])]
        super().__init__(name, output_names=output_names, label_names=label_names, has_global_stats=True)

    def add(self, metric: Any) -> None:
        """Add a child metric (anything ``create`` takes)."""
        self.metrics.append(create(metric))

    def get_metric(self, index: int) -> EvalMetric:
        """The child metric at ``index``."""
        try:
            return self.metrics[index]
        except IndexError:
            raise MetricError(f"get_metric: index {index} is out of range for {len(self.metrics)} metrics") from None

    def update_dict(self, labels: dict, preds: dict) -> None:  # type: ignore[override]
        """Pass the named arrays (those of ``label_names`` / ``output_names`` when set) to each child."""
        if self.label_names is not None:
            labels = OrderedDict((k, v) for k, v in labels.items() if k in self.label_names)
        if self.output_names is not None:
            preds = OrderedDict((k, v) for k, v in preds.items() if k in self.output_names)
        for metric in self.metrics:
            metric.update_dict(labels, preds)

    def update(self, labels: Any, preds: Any) -> None:
        for metric in self.metrics:
            metric.update(labels, preds)

    def reset(self) -> None:
        for metric in self.metrics:
            metric.reset()

    def reset_local(self) -> None:
        for metric in self.metrics:
            metric.reset_local()

    def get(self) -> tuple[list, list]:
        return self._collect(lambda m: m.get())

    def get_global(self) -> tuple[list, list]:
        return self._collect(lambda m: m.get_global())

    def _collect(self, read: Callable[[EvalMetric], tuple]) -> tuple[list, list]:
        names: list = []
        values: list = []
        for metric in self.metrics:
            name, value = read(metric)
            names.extend(name if isinstance(name, list) else [name])
            values.extend(value if isinstance(value, list) else [value])
        return names, values

    def get_config(self) -> dict:
        return {**super().get_config(), "metrics": [m.get_config() for m in self.metrics]}


# ---- classification ---------------------------------------------------------------------------------------
@register
@alias("acc")
class Accuracy(EvalMetric):
    """The fraction of samples whose predicted class equals the label. A prediction of the
    label's shape holds class indices; otherwise its argmax along ``axis`` is the class."""

    def __init__(self, axis: int = 1, name: str = "accuracy", output_names: list[str] | None = None,
                 label_names: list[str] | None = None) -> None:
        super().__init__(name, axis=axis, output_names=output_names, label_names=label_names,
                         has_global_stats=True)
        self.axis = axis

    def update(self, labels: Any, preds: Any) -> None:
        labels, preds = check_label_shapes(labels, preds, True)
        for label, pred in zip(labels, preds):
            label, pred = _values(label), _values(pred)
            if pred.shape != label.shape:
                pred = pred.argmax(axis=self.axis)
            label, pred = label.astype("int32").ravel(), pred.astype("int32").ravel()
            check_label_shapes(label, pred)
            self._add((label == pred).sum(), label.size)


@register
@alias("top_k_accuracy", "top_k_acc")
class TopKAccuracy(EvalMetric):
    """The fraction of samples whose label is among the ``top_k`` highest-scored classes
    (``top_k`` > 1; use ``Accuracy`` for 1). The name gets ``_<top_k>`` appended."""

    def __init__(self, top_k: int = 1, name: str = "top_k_accuracy", output_names: list[str] | None = None,
                 label_names: list[str] | None = None) -> None:
        super().__init__(name, top_k=top_k, output_names=output_names, label_names=label_names,
                         has_global_stats=True)
        if not top_k > 1:
            raise MetricError(f"TopKAccuracy: top_k must be above 1 (got {top_k}); use Accuracy for top_k=1")
        self.top_k = top_k
        if not self.name.endswith(f"_{top_k}"):  # a name from get_config() has it already
            self.name += f"_{top_k}"

    def update(self, labels: Any, preds: Any) -> None:
        labels, preds = check_label_shapes(labels, preds, True)
        for label, pred in zip(labels, preds):
            label, pred = _values(label).astype("int32").ravel(), _values(pred).astype("float32")
            if pred.ndim > 2:
                raise MetricError(f"TopKAccuracy: predictions must have at most 2 axes, not shape {pred.shape}")
            check_label_shapes(label, pred)
            top = min(pred.shape[-1], self.top_k)
            # the indices of the `top` largest scores of each row, in no particular order
            best = numpy.argpartition(pred, -top, axis=-1)
            if pred.ndim == 1:  # as MXNet: the partition's indices against the labels, position by position
                correct = (best == label).sum()
            else:
                correct = (best[:, -top:] == label[:, None]).sum()
            self._add(correct, pred.shape[0])


def _binary_counts(label: Any, pred: Any, metric: str) -> numpy.ndarray:
    """``[tp, fp, fn, tn]`` of one batch, class 1 being the positive one; the predicted class is
    the argmax over axis 1 of ``pred``."""
    label = _values(label).astype("int32").ravel()
    pred = _values(pred)
    check_label_shapes(label, pred)
    if len(numpy.unique(label)) > 2:
        raise MetricError(f"{metric} supports binary classification only; the labels hold "
                          f"{len(numpy.unique(label))} classes")
    pred_pos = pred.argmax(axis=1) == 1
    label_pos = label == 1
    return numpy.array([(pred_pos & label_pos).sum(), (pred_pos & ~label_pos).sum(),
                        (~pred_pos & label_pos).sum(), (~pred_pos & ~label_pos).sum()], dtype=numpy.int64)


def _f1_score(counts: numpy.ndarray) -> float:
    """F1 from ``[tp, fp, fn, tn]``: the harmonic mean of precision and recall (0 where undefined)."""
    tp, fp, fn, _ = (float(c) for c in counts)
    precision = tp / (tp + fp) if tp + fp > 0 else 0.0
    recall = tp / (tp + fn) if tp + fn > 0 else 0.0
    return 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0


def _matthews(counts: numpy.ndarray) -> float:
    """MCC from ``[tp, fp, fn, tn]``; a zero factor of the denominator counts as 1, and no
    samples give 0."""
    tp, fp, fn, tn = (float(c) for c in counts)
    if tp + fp + fn + tn == 0:
        return 0.0
    factors = numpy.array([tp + fp, tp + fn, tn + fp, tn + fn])
    return (tp * tn - fp * fn) / float(numpy.sqrt(numpy.prod(factors[factors != 0])))


class _BinaryMetric(EvalMetric):
    """F1 and MCC: a score of the true/false positive/negative counts.

    ``average='macro'``: the mean of the scores of each ``update`` call; ``'micro'``: the score
    of the counts summed over all calls (since ``reset_local`` for ``get``, since ``reset``
    for ``get_global``).
    """

    _score: Callable[[numpy.ndarray], float]

    def __init__(self, name: str, output_names: list[str] | None, label_names: list[str] | None,
                 average: str) -> None:
        if average not in ("macro", "micro"):
            raise MetricError(f"{type(self).__name__}: average must be 'macro' or 'micro', not {average!r}")
        self.average = average
        super().__init__(name, average=average, output_names=output_names, label_names=label_names,
                         has_global_stats=True)

    def reset(self) -> None:
        super().reset()
        self._counts = numpy.zeros(4, dtype=numpy.int64)
        self._global_counts = numpy.zeros(4, dtype=numpy.int64)

    def reset_local(self) -> None:
        super().reset_local()
        self._counts = numpy.zeros(4, dtype=numpy.int64)

    def update(self, labels: Any, preds: Any) -> None:
        labels, preds = check_label_shapes(labels, preds, True)
        batch = sum((_binary_counts(lb, p, type(self).__name__) for lb, p in zip(labels, preds)),
                    numpy.zeros(4, dtype=numpy.int64))
        if self.average == "macro":
            self._add(self._score(batch), 1)
            return
        self._counts += batch
        self._global_counts += batch
        self.num_inst, self.global_num_inst = int(self._counts.sum()), int(self._global_counts.sum())
        self.sum_metric = self._score(self._counts) * self.num_inst
        self.global_sum_metric = self._score(self._global_counts) * self.global_num_inst


@register
class F1(_BinaryMetric):
    """F1 score of binary classification: ``2 * precision * recall / (precision + recall)``;
    the predicted class is the argmax over axis 1."""

    _score = staticmethod(_f1_score)

    def __init__(self, name: str = "f1", output_names: list[str] | None = None,
                 label_names: list[str] | None = None, average: str = "macro") -> None:
        super().__init__(name, output_names, label_names, average)


@register
class MCC(_BinaryMetric):
    """Matthews correlation coefficient of binary classification,
    ``(tp*tn - fp*fn) / sqrt((tp+fp)(tp+fn)(tn+fp)(tn+fn))`` with zero factors taken as 1."""

    _score = staticmethod(_matthews)

    def __init__(self, name: str = "mcc", output_names: list[str] | None = None,
                 label_names: list[str] | None = None, average: str = "macro") -> None:
        super().__init__(name, output_names, label_names, average)


@register
class PCC(EvalMetric):
    """Multiclass Matthews correlation (Gorodkin's R_K) of the confusion matrix summed over all
    batches; equal to MCC for two classes. The number of classes grows with the largest index
    seen. Predictions are class indices (the label's shape) or scores (argmax over axis 1)."""

    def __init__(self, name: str = "pcc", output_names: list[str] | None = None,
                 label_names: list[str] | None = None, has_global_stats: bool = True) -> None:
        self.k = 2
        super().__init__(name, output_names=output_names, label_names=label_names,
                         has_global_stats=has_global_stats)

    @staticmethod
    def _mcc(cm: numpy.ndarray) -> float:
        n = cm.sum()
        predicted, actual = cm.sum(axis=1), cm.sum(axis=0)
        cov_pp = numpy.sum(predicted * (n - predicted))
        cov_aa = numpy.sum(actual * (n - actual))
        if cov_pp == 0 or cov_aa == 0:
            return float("nan")
        cov_pa = numpy.sum(cm.diagonal() * n - predicted * actual)
        return cov_pa / numpy.sqrt(cov_pp * cov_aa)

    @property
    def sum_metric(self) -> float:  # type: ignore[override]
        return self._mcc(self.lcm) * self.num_inst

    @property
    def global_sum_metric(self) -> float:  # type: ignore[override]
        return self._mcc(self.gcm) * self.global_num_inst

    def reset(self) -> None:
        self.global_num_inst = 0
        self.gcm = numpy.zeros((self.k, self.k))
        self.reset_local()

    def reset_local(self) -> None:
        self.num_inst = 0
        self.lcm = numpy.zeros((self.k, self.k))

    def update(self, labels: Any, preds: Any) -> None:
        labels, preds = check_label_shapes(labels, preds, True)
        for label, pred in zip(labels, preds):
            label, pred = _values(label).astype("int32"), _values(pred)
            pred = pred.argmax(axis=1) if pred.shape != label.shape else pred.astype("int32")
            label, pred = label.ravel(), pred.ravel()
            check_label_shapes(label, pred)
            top = int(max(pred.max(initial=0), label.max(initial=0)))
            if top >= self.k:  # new classes: pad both matrices
                grow = top + 1 - self.k
                self.lcm = numpy.pad(self.lcm, ((0, grow), (0, grow)))
                self.gcm = numpy.pad(self.gcm, ((0, grow), (0, grow)))
                self.k += grow
            # rows: predicted class, columns: true class
            batch = numpy.bincount(pred * self.k + label, minlength=self.k * self.k).reshape(self.k, self.k)
            self.lcm += batch
            self.gcm += batch
        self.num_inst += 1
        self.global_num_inst += 1


@register
class Perplexity(EvalMetric):
    """``exp`` of the mean negative log-probability of the labels: ``pred`` holds probabilities
    along ``axis``, ``label`` one class index per position. Labels equal to ``ignore_label`` are
    left out (``None``: none are); probabilities are floored at 1e-10."""

    def __init__(self, ignore_label: int | None, axis: int = -1, name: str = "perplexity",
                 output_names: list[str] | None = None, label_names: list[str] | None = None) -> None:
        super().__init__(name, ignore_label=ignore_label, axis=axis, output_names=output_names,
                         label_names=label_names, has_global_stats=True)
        self.ignore_label = ignore_label
        self.axis = axis

    def update(self, labels: Any, preds: Any) -> None:
        labels, preds = _as_list(labels), _as_list(preds)
        if len(labels) != len(preds):
            raise MetricError(f"Perplexity: {len(labels)} labels but {len(preds)} predictions")
        loss, count = 0.0, 0
        for label, pred in zip(labels, preds):
            label, pred = _values(label).ravel(), _values(pred)
            if label.size * pred.shape[self.axis] != pred.size:
                raise MetricError(f"Perplexity: shape mismatch: labels {label.shape} vs predictions {pred.shape}")
            probs = numpy.moveaxis(pred, self.axis, -1).reshape(label.size, -1)
            # as MXNet's pick: an index out of range is clipped to the nearest class
            index = numpy.clip(label.astype("int32"), 0, probs.shape[1] - 1)
            prob = probs[numpy.arange(label.size), index]
            count += label.size
            if self.ignore_label is not None:
                ignored = label == self.ignore_label
                count -= int(ignored.sum())
                prob = numpy.where(ignored, numpy.ones_like(prob), prob)
            loss -= numpy.log(numpy.maximum(prob, 1e-10)).sum()
        self._add(loss, count)

    def get(self) -> tuple[str, Any]:
        if self.num_inst == 0:
            return self.name, float("nan")
        return self.name, math.exp(self.sum_metric / self.num_inst)  # a Python float, as MXNet's

    def get_global(self) -> tuple[str, Any]:
        if self.global_num_inst == 0:
            return self.name, float("nan")
        return self.name, math.exp(self.global_sum_metric / self.global_num_inst)


class _LogLoss(EvalMetric):
    """CrossEntropy and NegativeLogLikelihood: the mean of ``-log(p[label] + eps)`` per sample,
    ``pred`` holding class probabilities ``(samples, classes)`` and ``label`` one class index
    per sample; ``eps`` keeps the log finite at 0."""

    def __init__(self, eps: float, name: str, output_names: list[str] | None, label_names: list[str] | None) -> None:
        super().__init__(name, eps=eps, output_names=output_names, label_names=label_names, has_global_stats=True)
        self.eps = eps

    def update(self, labels: Any, preds: Any) -> None:
        labels, preds = check_label_shapes(labels, preds, True)
        for label, pred in zip(labels, preds):
            label, pred = _values(label).ravel(), _values(pred)
            if label.shape[0] != pred.shape[0]:
                raise MetricError(f"{type(self).__name__}: {label.shape[0]} labels for {pred.shape[0]} predictions")
            prob = pred[numpy.arange(label.shape[0]), label.astype(numpy.int64)]
            self._add((-numpy.log(prob + self.eps)).sum(), label.shape[0])


@register
@alias("ce")
class CrossEntropy(_LogLoss):
    """Mean cross-entropy of the labels' predicted probabilities."""

    def __init__(self, eps: float = 1e-12, name: str = "cross-entropy", output_names: list[str] | None = None,
                 label_names: list[str] | None = None) -> None:
        super().__init__(eps, name, output_names, label_names)


@register
@alias("nll_loss")
class NegativeLogLikelihood(_LogLoss):
    """Mean negative log-likelihood of the labels (the value of ``CrossEntropy``, named ``nll-loss``)."""

    def __init__(self, eps: float = 1e-12, name: str = "nll-loss", output_names: list[str] | None = None,
                 label_names: list[str] | None = None) -> None:
        super().__init__(eps, name, output_names, label_names)


# ---- regression --------------------------------------------------------------------------------------------
class _PairwiseError(EvalMetric):
    """MAE, MSE and RMSE: the mean over ``update`` pairs of a per-pair error; 1-d labels and
    predictions are taken as columns (so a 1-d label broadcasts against 2-d predictions)."""

    def __init__(self, name: str, output_names: list[str] | None, label_names: list[str] | None) -> None:
        super().__init__(name, output_names=output_names, label_names=label_names, has_global_stats=True)

    @staticmethod
    def _error(diff: numpy.ndarray) -> Any:
        raise NotImplementedError()

    def update(self, labels: Any, preds: Any) -> None:
        labels, preds = check_label_shapes(labels, preds, True)
        for label, pred in zip(labels, preds):
            label, pred = _values(label), _values(pred)
            label = label.reshape(-1, 1) if label.ndim == 1 else label
            pred = pred.reshape(-1, 1) if pred.ndim == 1 else pred
            self._add(self._error(label - pred), 1)


@register
class MAE(_PairwiseError):
    """Mean absolute error, averaged over the ``update`` pairs."""

    def __init__(self, name: str = "mae", output_names: list[str] | None = None,
                 label_names: list[str] | None = None) -> None:
        super().__init__(name, output_names, label_names)

    @staticmethod
    def _error(diff: numpy.ndarray) -> Any:
        return numpy.abs(diff).mean()


@register
class MSE(_PairwiseError):
    """Mean squared error, averaged over the ``update`` pairs."""

    def __init__(self, name: str = "mse", output_names: list[str] | None = None,
                 label_names: list[str] | None = None) -> None:
        super().__init__(name, output_names, label_names)

    @staticmethod
    def _error(diff: numpy.ndarray) -> Any:
        return (diff ** 2.0).mean()


@register
class RMSE(_PairwiseError):
    """Root mean squared error of each pair, averaged over the ``update`` pairs."""

    def __init__(self, name: str = "rmse", output_names: list[str] | None = None,
                 label_names: list[str] | None = None) -> None:
        super().__init__(name, output_names, label_names)

    @staticmethod
    def _error(diff: numpy.ndarray) -> Any:
        return numpy.sqrt((diff ** 2.0).mean())


class _Comoments:
    """Running count, means, sums of squared deviations and co-deviation of two streams,
    merged batch by batch (Chan et al.'s pairwise update), for a Pearson correlation."""

    def __init__(self) -> None:
        self.n = 0
        self.mean_x = self.mean_y = self.m2_x = self.m2_y = self.cxy = 0.0

    def add(self, x: numpy.ndarray, y: numpy.ndarray) -> None:
        n_b = x.size
        if n_b == 0:
            return
        mean_bx, mean_by = x.mean(), y.mean()
        dx_b, dy_b = x - mean_bx, y - mean_by
        n = self.n + n_b
        dx, dy = mean_bx - self.mean_x, mean_by - self.mean_y
        weight = self.n * n_b / n
        self.m2_x += (dx_b * dx_b).sum() + dx * dx * weight
        self.m2_y += (dy_b * dy_b).sum() + dy * dy * weight
        self.cxy += (dx_b * dy_b).sum() + dx * dy * weight
        self.mean_x += dx * n_b / n
        self.mean_y += dy * n_b / n
        self.n = n

    def correlation(self) -> float:
        with numpy.errstate(divide="ignore", invalid="ignore"):
            return float(numpy.float64(self.cxy) / numpy.sqrt(self.m2_x * self.m2_y))


@register
@alias("pearsonr")
class PearsonCorrelation(EvalMetric):
    """Pearson correlation of labels and predictions (flattened, in float64).

    ``average='macro'``: the mean of each label/prediction pair's correlation; ``'micro'``:
    the correlation of all values seen (since ``reset_local`` for ``get``, since ``reset`` for
    ``get_global``).
    """

    def __init__(self, name: str = "pearsonr", output_names: list[str] | None = None,
                 label_names: list[str] | None = None, average: str = "macro") -> None:
        if average not in ("macro", "micro"):
            raise MetricError(f"PearsonCorrelation: average must be 'macro' or 'micro', not {average!r}")
        self.average = average
        super().__init__(name, average=average, output_names=output_names, label_names=label_names,
                         has_global_stats=True)

    def reset(self) -> None:
        super().reset()
        self._moments, self._global_moments = _Comoments(), _Comoments()

    def reset_local(self) -> None:
        super().reset_local()
        self._moments = _Comoments()

    def update(self, labels: Any, preds: Any) -> None:
        labels, preds = check_label_shapes(labels, preds, True)
        for label, pred in zip(labels, preds):
            label, pred = _values(label), _values(pred)
            check_label_shapes(label, pred, shape=True)
            label, pred = label.ravel().astype(numpy.float64), pred.ravel().astype(numpy.float64)
            if self.average == "macro":
                self._add(numpy.corrcoef(pred, label)[0, 1], 1)
            else:
                self._moments.add(label, pred)
                self._global_moments.add(label, pred)
                self.num_inst += 1
                self.global_num_inst += 1

    def get(self) -> tuple[str, Any]:
        if self.average == "macro" or self.num_inst == 0:
            return super().get()
        return self.name, self._moments.correlation()

    def get_global(self) -> tuple[str, Any]:
        if self.average == "macro" or self.global_num_inst == 0:
            return super().get_global()
        return self.name, self._global_moments.correlation()


# ---- losses and user functions --------------------------------------------------------------------------------
@register
class Loss(EvalMetric):
    """The mean of the values of ``preds`` (the outputs of a loss); labels are ignored."""

    def __init__(self, name: str = "loss", output_names: list[str] | None = None,
                 label_names: list[str] | None = None) -> None:
        super().__init__(name, output_names=output_names, label_names=label_names, has_global_stats=True)

    def update(self, labels: Any, preds: Any) -> None:
        for pred in _as_list(preds):
            pred = _values(pred)
            self._add(pred.sum(), pred.size)


@register
class Torch(Loss):
    """``Loss`` under the name ``torch`` (MXNet's metric for Torch criterions)."""

    def __init__(self, name: str = "torch", output_names: list[str] | None = None,
                 label_names: list[str] | None = None) -> None:
        super().__init__(name, output_names=output_names, label_names=label_names)


@register
class Caffe(Loss):
    """``Loss`` under the name ``caffe`` (MXNet's metric for Caffe criterions)."""

    def __init__(self, name: str = "caffe", output_names: list[str] | None = None,
                 label_names: list[str] | None = None) -> None:
        super().__init__(name, output_names=output_names, label_names=label_names)


@register
class CustomMetric(EvalMetric):
    """A metric from ``feval(label, pred)`` of NumPy arrays, called per pair: it returns the
    pair's value (counted once) or a ``(sum, count)`` tuple. ``allow_extra_outputs`` lets
    ``preds`` hold more arrays than ``labels`` (an RNN's states); the extra ones are unused."""

    def __init__(self, feval: Callable, name: str | None = None, allow_extra_outputs: bool = False,
                 output_names: list[str] | None = None, label_names: list[str] | None = None) -> None:
        if name is None:
            name = feval.__name__
            if "<" in name:  # a lambda
                name = f"custom({name})"
        super().__init__(name, feval=feval, allow_extra_outputs=allow_extra_outputs, output_names=output_names,
                         label_names=label_names, has_global_stats=True)
        self._feval = feval
        self._allow_extra_outputs = allow_extra_outputs

    def update(self, labels: Any, preds: Any) -> None:
        if self._allow_extra_outputs:
            labels, preds = _as_list(labels), _as_list(preds)
        else:
            labels, preds = check_label_shapes(labels, preds, True)
        for label, pred in zip(labels, preds):
            value = self._feval(_values(label), _values(pred))
            self._add(*(value if isinstance(value, tuple) else (value, 1)))

    def get_config(self) -> dict:
        """Refused: a Python function has no JSON form."""
        raise NotImplementedError("CustomMetric cannot be serialized")


def np(numpy_feval: Callable, name: str | None = None, allow_extra_outputs: bool = False) -> CustomMetric:
    """A ``CustomMetric`` from ``numpy_feval(label, pred)``, a function of NumPy arrays that
    returns the batch's value (MXNet's ``mx.metric.np``)."""
    return CustomMetric(numpy_feval, name, allow_extra_outputs)
