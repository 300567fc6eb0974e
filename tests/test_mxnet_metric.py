"""``mx.metric`` of the MXNet face: each metric's value against a reference computed here with
NumPy/SciPy from the raw batches, local (since ``reset_local``) and global statistics,
composites, shape errors, ``create`` by name and alias, and ``get_config`` round trips."""
import json
import math

import numpy as np
import pytest
import scipy.stats

import sparse_ops.compat.mxnet as mx

DTYPES = ["float32", "float64"]


def rtol(dtype):
    return 2e-5 if dtype == "float32" else 1e-9


def nd(values, dtype="float32"):
    return mx.nd.array(np.asarray(values), dtype=dtype)


def scores(rng, n, classes, dtype):
    """Class scores without ties, and labels, as NumPy arrays."""
    return rng.random((n, classes)).astype(dtype), rng.integers(0, classes, n)


def probabilities(rng, n, classes, dtype):
    z = rng.normal(size=(n, classes))
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    return p.astype(dtype), rng.integers(0, classes, n)


def feed(metric, batches, dtype):
    for label, pred in batches:
        metric.update([nd(label, dtype)], [nd(pred, dtype)])


def check_local_and_global(metric, batches, dtype, reference):
    """Feed two batches, reset_local, feed the rest: get() must match the reference of the
    batches after the reset, get_global() that of all of them."""
    feed(metric, batches[:2], dtype)
    np.testing.assert_allclose(metric.get()[1], reference(batches[:2]), rtol=rtol(dtype))
    metric.reset_local()
    assert math.isnan(metric.get()[1])
    feed(metric, batches[2:], dtype)
    np.testing.assert_allclose(metric.get()[1], reference(batches[2:]), rtol=rtol(dtype))
    np.testing.assert_allclose(metric.get_global()[1], reference(batches), rtol=rtol(dtype))
    metric.reset()
    assert math.isnan(metric.get()[1]) and math.isnan(metric.get_global()[1])


# ---- classification ------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_accuracy(dtype):
    rng = np.random.default_rng(0)
    batches = [scores(rng, n, 5, dtype)[::-1] for n in (7, 9, 4, 6)]

    def reference(bs):
        hits = [(np.argsort(-p, axis=1)[:, 0] == lb) for lb, p in bs]
        return np.concatenate(hits).mean()

    check_local_and_global(mx.metric.Accuracy(), batches, dtype, reference)
    # classes along axis 0, and predictions given as class indices
    m = mx.metric.Accuracy(axis=0)
    feed(m, [(lb, p.T) for lb, p in batches], dtype)
    np.testing.assert_allclose(m.get()[1], reference(batches))
    m = mx.metric.Accuracy()
    feed(m, [(lb, p.argmax(axis=1)) for lb, p in batches], dtype)
    np.testing.assert_allclose(m.get()[1], reference(batches))
    assert m.num_inst == sum(len(lb) for lb, _ in batches)


@pytest.mark.parametrize("dtype", DTYPES)
def test_top_k_accuracy(dtype):
    rng = np.random.default_rng(1)
    batches = [scores(rng, n, 6, dtype)[::-1] for n in (8, 5, 11)]

    def reference(bs, k=3):
        return np.concatenate([(np.argsort(-p, axis=1)[:, :k] == lb[:, None]).any(axis=1) for lb, p in bs]).mean()

    m = mx.metric.TopKAccuracy(top_k=3)
    assert m.name == "top_k_accuracy_3"
    check_local_and_global(m, batches, dtype, reference)
    m = mx.metric.TopKAccuracy(top_k=10)  # more than the classes: every label is in
    feed(m, batches, dtype)
    assert m.get()[1] == 1.0
    with pytest.raises(AssertionError):
        mx.metric.TopKAccuracy(top_k=1)


def binary_counts(batches):
    """tp, fp, fn, tn summed over the batches, counted sample by sample."""
    tp = fp = fn = tn = 0
    for label, pred in batches:
        for y, row in zip(label, pred):
            guess = 1 if row[1] > row[0] else 0
            tp += guess == 1 and y == 1
            fp += guess == 1 and y == 0
            fn += guess == 0 and y == 1
            tn += guess == 0 and y == 0
    return tp, fp, fn, tn


def f1_of(batches):
    tp, fp, fn, _ = binary_counts(batches)
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0


def mcc_of(batches):
    tp, fp, fn, tn = binary_counts(batches)
    factors = [f for f in (tp + fp, tp + fn, tn + fp, tn + fn) if f]
    return (tp * tn - fp * fn) / math.sqrt(math.prod(factors))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name, score", [("f1", f1_of), ("mcc", mcc_of)])
def test_f1_and_mcc(name, score, dtype):
    rng = np.random.default_rng(2)
    batches = [scores(rng, n, 2, dtype)[::-1] for n in (10, 7, 12, 9)]
    # micro: the score of the pooled counts
    check_local_and_global(mx.metric.create(name, average="micro"), batches, dtype, score)
    # macro: the mean of each update's score
    check_local_and_global(mx.metric.create(name, average="macro"), batches, dtype,
                           lambda bs: np.mean([score([b]) for b in bs]))
    # one update call with two pairs counts both together
    m = mx.metric.create(name)
    m.update([nd(batches[0][0]), nd(batches[1][0])], [nd(batches[0][1]), nd(batches[1][1])])
    np.testing.assert_allclose(m.get()[1], score(batches[:2]), rtol=1e-6)
    assert m.num_inst == 1


def test_f1_and_mcc_degenerate_cases():
    only_negatives = [nd([0, 0])], [nd([[0.9, 0.1], [0.8, 0.2]])]
    for name in ("f1", "mcc"):
        for average in ("macro", "micro"):
            m = mx.metric.create(name, average=average)
            assert math.isnan(m.get()[1])
            m.update(*only_negatives)
            assert m.get()[1] == 0.0
    with pytest.raises(ValueError, match="binary"):
        mx.metric.F1().update([nd([0, 1, 2])], [nd(np.eye(3))])
    with pytest.raises(ValueError):
        mx.metric.F1(average="weighted")


def gorodkin(cm):
    """Multiclass MCC (R_K) of a confusion matrix, written out from its definition."""
    cm = np.asarray(cm, dtype=float)
    k = len(cm)
    num = sum(cm[a, a] * cm[b, c] - cm[a, b] * cm[c, a] for a in range(k) for b in range(k) for c in range(k))
    rows, cols, n = cm.sum(axis=1), cm.sum(axis=0), cm.sum()
    return num / math.sqrt(sum(rows * (n - rows)) * sum(cols * (n - cols)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_pcc(dtype):
    rng = np.random.default_rng(3)
    batches = [scores(rng, n, 4, dtype)[::-1] for n in (20, 15, 25)]

    def reference(bs):
        cm = np.zeros((4, 4))
        for lb, p in bs:
            for y, guess in zip(lb, p.argmax(axis=1)):
                cm[y, guess] += 1
        return gorodkin(cm)

    check_local_and_global(mx.metric.PCC(), batches, dtype, reference)
    # class indices as predictions; the classes grow as larger indices appear
    m = mx.metric.PCC()
    feed(m, [(lb, p.argmax(axis=1)) for lb, p in batches], dtype)
    np.testing.assert_allclose(m.get()[1], reference(batches), rtol=1e-12)
    assert m.k == 4
    # two classes: PCC is MCC
    labels, preds = scores(rng, 30, 2, dtype)[::-1]
    pcc, mcc = mx.metric.PCC(), mx.metric.MCC()
    for m in (pcc, mcc):
        m.update([nd(labels)], [nd(preds, dtype)])
    np.testing.assert_allclose(pcc.get()[1], mcc.get()[1], rtol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
def test_perplexity(dtype):
    rng = np.random.default_rng(4)
    batches = []
    for n in (3, 4, 2):
        p, lb = probabilities(rng, n * 5, 6, dtype)
        batches.append((lb.reshape(n, 5), p.reshape(n, 5, 6)))  # (batch, time) labels, (batch, time, vocab)

    def reference(bs, ignore=None):
        logs = []
        for lb, p in bs:
            picked = np.take_along_axis(p.astype(float), lb[..., None], axis=-1)[..., 0]
            logs.append(np.log(picked[lb != ignore]))
        return math.exp(-np.concatenate(logs).mean())

    check_local_and_global(mx.metric.Perplexity(ignore_label=None), batches, dtype, reference)
    check_local_and_global(mx.metric.Perplexity(ignore_label=2), batches, dtype, lambda bs: reference(bs, 2))
    m = mx.metric.Perplexity(ignore_label=None, axis=1)  # vocabulary along axis 1
    feed(m, [(lb, np.moveaxis(p, 2, 1)) for lb, p in batches], dtype)
    np.testing.assert_allclose(m.get()[1], reference(batches), rtol=rtol(dtype))
    assert type(m.get()[1]) is float  # MXNet's math.exp of the mean: a Python float (json.dumps takes it)
    m = mx.metric.Perplexity(ignore_label=1)
    m.update([nd([1, 1])], [nd([[0.5, 0.5], [0.2, 0.8]])])
    assert math.isnan(m.get()[1])  # every position ignored


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["ce", "nll_loss"])
def test_cross_entropy_and_nll(name, dtype):
    rng = np.random.default_rng(5)
    batches = [probabilities(rng, n, 4, dtype)[::-1] for n in (6, 9, 5)]

    def reference(bs):
        return -np.mean(np.concatenate([np.log(p.astype(float)[np.arange(len(lb)), lb]) for lb, p in bs]))

    check_local_and_global(mx.metric.create(name), batches, dtype, reference)
    m = mx.metric.create(name, eps=0.5)
    feed(m, batches, dtype)
    np.testing.assert_allclose(
        m.get()[1], -np.mean(np.concatenate([np.log(p[np.arange(len(lb)), lb] + 0.5) for lb, p in batches])),
        rtol=rtol(dtype))


# ---- regression ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name, error", [
    ("mae", lambda d: np.abs(d).mean()),
    ("mse", lambda d: (d * d).mean()),
    ("rmse", lambda d: math.sqrt((d * d).mean())),
])
def test_regression(name, error, dtype):
    rng = np.random.default_rng(6)
    batches = [(rng.normal(size=(n, 3)).astype(dtype), rng.normal(size=(n, 3)).astype(dtype)) for n in (4, 7, 5)]

    def reference(bs):  # the mean of each pair's error, as MXNet
        return np.mean([error(lb.astype(float) - p.astype(float)) for lb, p in bs])

    check_local_and_global(mx.metric.create(name), batches, dtype, reference)
    # 1-d labels against (n, 1) predictions; one array instead of a list
    m = mx.metric.create(name)
    m.update(nd([1.0, 2.0, 4.0], dtype), nd([[1.5], [2.0], [3.0]], dtype))
    np.testing.assert_allclose(m.get()[1], error(np.array([-0.5, 0.0, 1.0])), rtol=rtol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_pearson_correlation(dtype):
    rng = np.random.default_rng(7)
    batches = []
    for n in (12, 8, 10, 15):
        label = rng.normal(size=(n, 2))
        batches.append((label.astype(dtype), (label + rng.normal(size=(n, 2))).astype(dtype)))

    def pooled(bs):
        return scipy.stats.pearsonr(np.concatenate([lb.ravel() for lb, _ in bs]),
                                    np.concatenate([p.ravel() for _, p in bs]))[0]

    check_local_and_global(mx.metric.create("pearsonr", average="micro"), batches, dtype, pooled)
    check_local_and_global(mx.metric.PearsonCorrelation(), batches, dtype,
                           lambda bs: np.mean([pooled([b]) for b in bs]))


def test_pearson_refuses_mismatched_shapes():
    with pytest.raises(ValueError):
        mx.metric.PearsonCorrelation().update([nd([[1, 2], [3, 4]])], [nd([1, 2, 3, 4])])


# ---- losses, custom metrics, composites ---------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["loss", "torch", "caffe"])
def test_loss(name, dtype):
    rng = np.random.default_rng(8)
    batches = [(None, rng.random((n, 2)).astype(dtype)) for n in (3, 5, 4)]
    m = mx.metric.create(name)
    assert m.name == name

    def feed_losses(metric, bs, dtype):
        for _, p in bs:
            metric.update(None, nd(p, dtype))  # one array, not a list

    feed_losses(m, batches[:2], dtype)
    m.reset_local()
    feed_losses(m, batches[2:], dtype)
    np.testing.assert_allclose(m.get()[1], batches[2][1].mean(), rtol=rtol(dtype))
    np.testing.assert_allclose(m.get_global()[1], np.concatenate([p.ravel() for _, p in batches]).mean(),
                               rtol=rtol(dtype))


def test_custom_metric():
    labels, preds = [nd([1.0, 2.0]), nd([3.0])], [nd([1.5, 2.0]), nd([1.0])]

    def abs_sum(label, pred):
        assert isinstance(label, np.ndarray) and isinstance(pred, np.ndarray)
        return np.abs(label - pred).sum(), label.size

    m = mx.metric.CustomMetric(abs_sum)
    assert m.name == "abs_sum"
    m.update(labels, preds)
    assert m.get() == ("abs_sum", pytest.approx(2.5 / 3))
    m = mx.metric.create(lambda label, pred: np.abs(label - pred).max())
    assert m.name == "custom(<lambda>)"
    m.update(labels, preds)
    assert m.get()[1] == pytest.approx((0.5 + 2.0) / 2)  # one value per pair
    m = mx.metric.np(lambda label, pred: float(pred.sum()), name="psum", allow_extra_outputs=True)
    m.update([nd([1.0])], [nd([4.0]), nd([100.0])])  # the extra output is left alone
    assert m.get() == ("psum", 4.0)
    with pytest.raises(ValueError):
        mx.metric.CustomMetric(abs_sum).update([nd([1.0])], [nd([4.0]), nd([100.0])])
    with pytest.raises(NotImplementedError):
        m.get_config()


@pytest.mark.parametrize("dtype", DTYPES)
def test_composite_with_two_outputs(dtype):
    rng = np.random.default_rng(9)
    (p1, l1), (p2, l2) = probabilities(rng, 8, 3, dtype), probabilities(rng, 5, 3, dtype)
    m = mx.metric.CompositeEvalMetric()
    m.add("acc")
    m.add(mx.metric.CrossEntropy())
    m.update([nd(l1), nd(l2)], [nd(p1, dtype), nd(p2, dtype)])
    names, values = m.get()
    assert names == ["accuracy", "cross-entropy"]
    labels, probs = np.concatenate([l1, l2]), np.concatenate([p1, p2]).astype(float)
    np.testing.assert_allclose(values[0], (probs.argmax(axis=1) == labels).mean())
    np.testing.assert_allclose(values[1], -np.log(probs[np.arange(13), labels]).mean(), rtol=rtol(dtype))
    assert m.get_name_value() == list(zip(names, values))
    assert m.get_metric(1).name == "cross-entropy"
    with pytest.raises(ValueError):
        m.get_metric(2)
    m.reset_local()
    assert all(math.isnan(v) for v in m.get()[1])
    assert m.get_global()[1] == values
    assert m.get_global_name_value() == list(zip(names, values))
    assert str(m).startswith("EvalMetric: {'accuracy'")

    # update_dict: create() gives the names to each child, which reads those arrays
    m = mx.metric.create(["acc", "ce"], output_names=["out2"], label_names=["lab2"])
    m.update_dict({"lab1": nd(l1), "lab2": nd(l2)}, {"out1": nd(p1), "out2": nd(p2)})
    np.testing.assert_allclose(m.get()[1][0], (p2.argmax(axis=1) == l2).mean())
    whole = mx.metric.CompositeEvalMetric(["acc"], output_names=["out1"], label_names=["lab1"])
    whole.update_dict({"lab1": nd(l1), "lab2": nd(l2)}, {"out1": nd(p1), "out2": nd(p2)})
    np.testing.assert_allclose(whole.get()[1][0], (p1.argmax(axis=1) == l1).mean())


def test_numpy_inputs_give_the_ndarray_values():
    rng = np.random.default_rng(10)
    p, lb = probabilities(rng, 10, 3, "float64")
    for name in ("acc", "ce", "nll_loss", "mae", "mse", "rmse", "pcc"):
        a, b = mx.metric.create(name), mx.metric.create(name)
        a.update([lb], [p])
        b.update([nd(lb, "float64")], [nd(p, "float64")])
        assert a.get() == b.get()


# ---- errors ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["acc", "f1", "mcc", "pcc", "ce", "nll_loss", "mae", "mse", "rmse", "pearsonr",
                                  "top_k_accuracy"])
def test_more_predictions_than_labels_raise(name):
    args = {"top_k": 2} if name == "top_k_accuracy" else {}
    m = mx.metric.create(name, **args)
    with pytest.raises(ValueError):
        m.update([nd([0, 1])], [nd([[0.3, 0.7], [0.6, 0.4]]), nd([[0.3, 0.7], [0.6, 0.4]])])


@pytest.mark.parametrize("name", ["acc", "f1", "mcc", "pcc", "ce", "nll_loss", "top_k_accuracy", "perplexity"])
def test_wrong_sample_count_raises(name):
    args = {"top_k": 2} if name == "top_k_accuracy" else {"ignore_label": None} if name == "perplexity" else {}
    m = mx.metric.create(name, **args)
    with pytest.raises(ValueError) as err:
        m.update([nd([0, 1, 1])], [nd([[0.3, 0.7], [0.6, 0.4]])])
    assert isinstance(err.value, (AssertionError, ValueError))


def test_check_label_shapes():
    a, b = nd([1, 2, 3]), nd([[1], [2], [3]])
    assert mx.metric.check_label_shapes(a, b, wrap=True) == ([a], [b])
    with pytest.raises(ValueError):
        mx.metric.check_label_shapes(a, b, shape=True)
    with pytest.raises(ValueError):
        mx.metric.check_label_shapes([a], [a, b])
    err = mx.metric.MetricError("x")
    assert isinstance(err, ValueError) and isinstance(err, AssertionError) and isinstance(err, mx.MXNetError)


# ---- create, register, get_config -------------------------------------------------------------------------
ALIASES = [
    ("acc", mx.metric.Accuracy), ("accuracy", mx.metric.Accuracy),
    ("top_k_accuracy", mx.metric.TopKAccuracy), ("top_k_acc", mx.metric.TopKAccuracy),
    ("TopKAccuracy", mx.metric.TopKAccuracy),
    ("f1", mx.metric.F1), ("mcc", mx.metric.MCC), ("pcc", mx.metric.PCC),
    ("perplexity", mx.metric.Perplexity), ("mae", mx.metric.MAE), ("mse", mx.metric.MSE), ("rmse", mx.metric.RMSE),
    ("ce", mx.metric.CrossEntropy), ("crossentropy", mx.metric.CrossEntropy),
    ("nll_loss", mx.metric.NegativeLogLikelihood), ("NegativeLogLikelihood", mx.metric.NegativeLogLikelihood),
    ("pearsonr", mx.metric.PearsonCorrelation), ("PearsonCorrelation", mx.metric.PearsonCorrelation),
    ("loss", mx.metric.Loss), ("torch", mx.metric.Torch), ("caffe", mx.metric.Caffe),
    ("composite", mx.metric.CompositeEvalMetric), ("CompositeEvalMetric", mx.metric.CompositeEvalMetric),
]


@pytest.mark.parametrize("name, klass", ALIASES)
def test_create_by_name(name, klass):
    args = {"top_k": 2} if klass is mx.metric.TopKAccuracy else {}
    args = {"ignore_label": -1} if klass is mx.metric.Perplexity else args
    m = mx.metric.create(name, **args)
    assert type(m) is klass
    assert mx.metric.create(name.upper(), **args).get_config() == m.get_config()


def test_create_other_forms():
    acc = mx.metric.Accuracy()
    assert mx.metric.create(acc) is acc
    assert type(mx.metric.create("custommetric", lambda lb, p: 0.0)) is mx.metric.CustomMetric
    both = mx.metric.create(["acc", mx.metric.F1(), lambda lb, p: 0.0])
    assert [type(m) for m in both.metrics] == [mx.metric.Accuracy, mx.metric.F1, mx.metric.CustomMetric]
    assert mx.metric.create('["perplexity", {"ignore_label": 3}]').ignore_label == 3
    assert mx.metric.create({"metric": "acc", "axis": 0}).axis == 0
    assert mx.metric.create("perplexity", -1).ignore_label == -1
    with pytest.raises(ValueError, match="unknown metric"):
        mx.metric.create("no_such_metric")
    with pytest.raises(ValueError):
        mx.metric.create(acc, axis=0)


ROUND_TRIP = [
    lambda: mx.metric.Accuracy(axis=0, name="a0", output_names=["o"], label_names=["l"]),
    lambda: mx.metric.TopKAccuracy(top_k=3),
    lambda: mx.metric.F1(average="micro"), lambda: mx.metric.MCC(average="micro"), lambda: mx.metric.PCC(),
    lambda: mx.metric.Perplexity(ignore_label=0, axis=1), lambda: mx.metric.CrossEntropy(eps=1e-5),
    lambda: mx.metric.NegativeLogLikelihood(eps=1e-3), lambda: mx.metric.PearsonCorrelation(average="micro"),
    lambda: mx.metric.MAE(), lambda: mx.metric.MSE(), lambda: mx.metric.RMSE(),
    lambda: mx.metric.Loss(), lambda: mx.metric.Torch(), lambda: mx.metric.Caffe(),
    lambda: mx.metric.CompositeEvalMetric(["acc", "f1", mx.metric.TopKAccuracy(top_k=2)], output_names=["x"]),
]


@pytest.mark.parametrize("make", ROUND_TRIP)
def test_get_config_round_trip(make):
    m = make()
    config = m.get_config()
    again = mx.metric.create(json.dumps(config))
    assert type(again) is type(m)
    assert again.get_config() == config
    assert again.name == m.name
    for attr in ("axis", "top_k", "average", "ignore_label", "eps", "output_names", "label_names"):
        assert getattr(again, attr, None) == getattr(m, attr, None)


def test_register_and_alias():
    @mx.metric.register
    @mx.metric.alias("my_count_alias")
    class MyCount(mx.metric.EvalMetric):
        def __init__(self, name="count"):
            super().__init__(name)

        def update(self, labels, preds):
            self.sum_metric += len(preds)
            self.num_inst += 1

    m = mx.metric.create("my_count_alias")
    assert type(m) is MyCount and type(mx.metric.create("MyCount")) is MyCount
    m.update([nd([1])], [nd([1]), nd([2])])
    m.reset_local()
    assert math.isnan(m.get_global()[1])  # no global statistics of its own: get_global() is get()
    with pytest.warns(UserWarning, match="replaces"):
        mx.metric.register(mx.metric.Loss, "my_count_alias")
    with pytest.raises(ValueError):
        mx.metric.register(dict)
