"""Random numbers: seeding, per-thread generators, uniform and normal sampling."""
import threading
import warnings

import numpy as np
import pytest

import sparse_ops as so
import sparse_ops.random as rnd
from sparse_ops.registry import ParameterError


def test_same_seed_same_numbers():
    rnd.seed(42)
    a = rnd.uniform(shape=(3, 4)).asnumpy()
    b = rnd.normal(shape=(5,)).asnumpy()
    rnd.seed(42)
    np.testing.assert_array_equal(rnd.uniform(shape=(3, 4)).asnumpy(), a)
    np.testing.assert_array_equal(rnd.normal(shape=(5,)).asnumpy(), b)
    rnd.seed(43)
    assert not np.array_equal(rnd.uniform(shape=(3, 4)).asnumpy(), a)


def test_seed_one_device_and_generator_identity():
    rnd.seed(7, device=so.cpu())
    g = rnd.generator(so.cpu())
    assert rnd.generator("cpu(0)") is g and isinstance(g, np.random.Generator)
    first = g.random(3)
    rnd.seed(7, device="cpu")
    assert rnd.generator(so.cpu()) is not g
    np.testing.assert_array_equal(rnd.generator(so.cpu()).random(3), first)
    rnd.seed(0)  # a global seed replaces the per-device one
    assert not np.array_equal(rnd.generator(so.cpu()).random(3), first)


def test_bad_seed():
    with pytest.raises(TypeError):
        rnd.seed(1.5)
    rnd.seed(-3)  # any integer is a seed


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_uniform_and_normal_moments(dtype):
    rnd.seed(1)
    u = rnd.uniform(-1, 3, shape=(200_000,), dtype=dtype)
    assert u.dtype == np.dtype(dtype) and u.shape == (200_000,) and u.device == so.cpu()
    v = u.asnumpy().astype(np.float64)
    assert v.min() >= -1 and v.max() <= 3
    assert abs(v.mean() - 1) < 0.02 and abs(v.var() - 16 / 12) < 0.03
    n = rnd.normal(2, 0.5, shape=(400, 500), dtype=dtype).asnumpy().astype(np.float64)
    assert abs(n.mean() - 2) < 0.01 and abs(n.std() - 0.5) < 0.01


def test_defaults_out_and_invoke():
    x = rnd.uniform()
    assert x.shape == (1,) and x.dtype == np.float32
    target = so.zeros((2, 3), dtype="float64")
    r = rnd.normal(out=target)
    assert r is target and np.all(target.asnumpy() != 0)
    y = so.invoke("_random_uniform", [], {"shape": (2, 2), "low": 5, "high": 6})
    assert y.shape == (2, 2) and np.all((y.asnumpy() >= 5) & (y.asnumpy() < 6))
    assert rnd.uniform(shape=(0, 3)).shape == (0, 3)
    with so.cpu():
        assert rnd.uniform(shape=2, device="cpu").device == so.cpu()


def test_bad_parameters_and_not_differentiable():
    with pytest.raises(ParameterError, match="dtype"):
        rnd.uniform(shape=(2,), dtype="int32")
    with pytest.raises(ParameterError, match="low"):
        rnd.uniform(2, 1)
    with pytest.raises(ParameterError, match="scale"):
        rnd.normal(0, -1)
    assert not so.get_op("_random_uniform").differentiable
    assert not so.get_op("_random_normal").differentiable


def test_threads_draw_without_crashing_on_distinct_streams():
    rnd.seed(5)
    results, errors = {}, []

    def work(name):
        try:
            results[name] = np.concatenate([rnd.uniform(shape=(1000,)).asnumpy() for _ in range(50)])
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    main = rnd.uniform(shape=(1000,)).asnumpy()
    for t in threads:
        t.join()
    assert not errors
    assert not np.array_equal(results[0], results[1])
    # the seeding thread is reproducible whatever the others draw
    rnd.seed(5)
    np.testing.assert_array_equal(rnd.uniform(shape=(1000,)).asnumpy(), main)


def test_each_thread_has_its_own_generator():
    seen = []
    t = threading.Thread(target=lambda: seen.append(rnd.generator(so.cpu())))
    t.start()
    t.join()
    assert seen[0] is not rnd.generator(so.cpu())


# ---- multinomial's log-probability gradient, Zipfian candidate samplers --------------------------
@pytest.mark.parametrize("shape", [(), (300,)])
def test_multinomial_log_probabilities_have_the_reinforce_gradient(shape):
    """d prob / d data: at each drawn category, the head over the drawn probability, summed
    over the draws (MXNet's gradient); the ids get none."""
    p = np.array([[0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]])
    x = so.array(p)
    x.attach_grad()
    with so.autograd.record():
        ids, logp = rnd.multinomial(x, shape=shape, get_prob=True)
        loss = so.sum(logp * 5.0)
    loss.backward()
    drawn = ids.asnumpy().reshape(2, -1).astype(int)
    np.testing.assert_allclose(logp.asnumpy().reshape(2, -1), np.log(np.take_along_axis(p, drawn, axis=1)))
    want = np.zeros_like(p)
    for i in range(2):
        np.add.at(want[i], drawn[i], 5.0 / p[i, drawn[i]])
    np.testing.assert_allclose(x.grad.asnumpy(), want, rtol=1e-12)


def test_unique_zipfian_draws_distinct_log_uniform_classes_and_counts_the_draws():
    so.random.seed(7)
    classes, trials = so.invoke("_sample_unique_zipfian", [], {"range_max": 1000, "shape": (3, 200)})
    c, t = classes.asnumpy(), trials.asnumpy()
    assert c.dtype == t.dtype == np.int64 and c.shape == (3, 200) and t.shape == (3,)
    assert all(np.unique(row).size == 200 for row in c) and c.min() >= 0 and c.max() < 1000
    assert (t >= 200).all()
    # the first classes are the likeliest: class 0 (probability log 2 / log 1001, ~10%) is in every row
    assert all(0 in row for row in c)
    so.random.seed(7)
    again = so.invoke("_sample_unique_zipfian", [], {"range_max": 1000, "shape": (3, 200)})
    np.testing.assert_array_equal(again[0].asnumpy(), c)  # seeded
    with pytest.raises(ParameterError, match="cannot draw 6 distinct classes of 5"):
        so.invoke("_sample_unique_zipfian", [], {"range_max": 5, "shape": (1, 6)})


def test_the_mxnet_face_rand_zipfian_and_contrib_autograd():
    import sparse_ops.compat.mxnet as mx

    true = mx.nd.array([0, 3, 19], dtype="int32")
    sampled, exp_true, exp_sampled = mx.nd.contrib.rand_zipfian(true, 5000, 20)
    prob = lambda k: np.log((k + 2.0) / (k + 1.0)) / np.log(21)  # noqa: E731
    s = sampled.asnumpy()
    assert s.dtype == np.int64 and s.min() >= 0 and s.max() < 20
    np.testing.assert_allclose(exp_true.asnumpy(), prob(np.array([0, 3, 19])) * 5000)
    np.testing.assert_allclose(exp_sampled.asnumpy(), prob(s) * 5000)
    counts = np.bincount(s, minlength=20)
    assert abs(counts[0] - prob(0) * 5000) < 5 * np.sqrt(prob(0) * 5000)
    x = mx.nd.array([1.0, 2.0, 3.0])
    grads, out = mx.contrib.autograd.grad_and_loss(lambda a: mx.nd.sum(a * a))(x)
    np.testing.assert_array_equal(grads[0].asnumpy(), [2.0, 4.0, 6.0])
    assert out.asscalar() == 14.0


@pytest.mark.parametrize("probabilities,match", [
    ([[0.5, -0.5]], "finite and non-negative; distribution 0"),
    ([[0.2, 0.8], [np.nan, 0.5]], "finite and non-negative; distribution 1"),
    ([[np.inf, 0.0]], "finite and non-negative"),
    ([[0.5, 0.5], [0.0, 0.0]], "distribution 1 has no probability above zero")])
def test_multinomial_refuses_what_is_no_distribution(probabilities, match):
    """NumPy's Generator.choice and torch.multinomial refuse these; drawing from them gave
    ids of no distribution (the negative class always drawn)."""
    with pytest.raises(so.OperatorError, match=f"_sample_multinomial.*{match}"):
        so.random.multinomial(so.array(np.array(probabilities, np.float32)), shape=4)


def test_multinomial_weights_that_do_not_sum_to_one_are_drawn_as_mxnet_draws_them_with_a_warning():
    """MXNet's own tests pass weights summing to 0.625: drawn as MXNet draws (the short
    sum's rest to the last category), with a RuntimeWarning; rounding within NumPy's
    tolerance is silent."""
    with pytest.warns(RuntimeWarning, match="distribution 0 sums to 0.6, not 1"):
        ids = so.random.multinomial(so.array(np.array([[0.3, 0.3]], np.float32)), shape=2000).asnumpy()
    assert 0.25 < np.mean(ids == 0) < 0.35  # the rest, 0.4, went to category 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ok = so.random.multinomial(so.array(np.array([[0.1, 0.2, 0.7 + 1e-6]], np.float32)), shape=50).asnumpy()
    assert ok.shape == (1, 50) and set(np.unique(ok)) <= {0, 1, 2}
