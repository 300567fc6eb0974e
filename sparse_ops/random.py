"""Random numbers: the sampling operators, and seeding (``seed``, ``generator``, from
``sparse_ops.rng``).

``uniform`` and ``normal`` are the operators ``_random_uniform`` and ``_random_normal``
(no inputs; the ``device`` parameter says where the result lives); ``randint``,
``multinomial`` and ``shuffle`` are ``_random_randint``, ``_sample_multinomial`` and
``_shuffle``. On a real gpu the
numbers are drawn by the host generator of that device and copied over: simple and
reproducible, if not the fastest (a device-side generator can replace it later).
"""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from .device import Device, as_device, current_device
from .dispatch import invoke, op_function
from .ndarray import NDArray
from .registry import Op, Param, get_op, kernel, register
from .rng import DEFAULT_SEED, generator, seed  # noqa: F401  (part of sparse_ops.random)


# ---- sampling operators --------------------------------------------------------------------------
_FLOATS = frozenset(np.dtype(t) for t in ("float16", "float32", "float64"))
_BOTH = ("cpu", "gpu")


def _sample(ctx, out, draw) -> None:
    """Fill ``out`` with ``draw(rng, host_array)`` values; gpu output is filled from the host."""
    rng = ctx.rng
    if isinstance(out, np.ndarray) and out.dtype in (np.float32, np.float64) and out.flags.c_contiguous:
        draw(rng, out)
        return
    host = np.empty(out.shape, dtype=np.float64 if out.dtype == np.float64 else np.float32)
    draw(rng, host)
    out[...] = ctx.xp.asarray(host.astype(out.dtype, copy=False))


class _Sampler(Op):
    """A zero-input operator drawing ``shape`` values of ``dtype`` on ``device``."""

    trusted = True  # built-in kernels, tested against NumPy/SciPy references

    arguments = ()
    differentiable = False
    resources = ("random",)
    shape = Param("shape", (1,), "shape of the result")
    dtype = Param("dtype", "float32", "float16, float32 or float64")
    device = Param("device", None, "where the result lives (default: the current device)")

    def check_params(self) -> None:
        if np.dtype(self.dtype) not in _FLOATS:
            raise ValueError(f"dtype must be float16, float32 or float64, got {np.dtype(self.dtype).name}")
        if any(d < 0 for d in self.shape):
            raise ValueError(f"shape must have non-negative sides, got {self.shape}")

    def infer_shape(self):
        return [self.shape]

    def infer_type(self):
        return [np.dtype(self.dtype)]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples (no inputs): float32 and float64 draws of a few shapes."""
        return [([], {"shape": (3, 4)}), ([], {"shape": (2, 3, 2), "dtype": "float64"}), ([], {"shape": (0, 3)})]


@register("_random_uniform")
class RandomUniform(_Sampler):
    """Samples of the uniform distribution on [low, high)."""

    low = Param(float, 0.0, "lower bound (inclusive)")
    high = Param(float, 1.0, "upper bound (exclusive)")

    def check_params(self) -> None:
        super().check_params()
        if not self.low <= self.high:
            raise ValueError(f"low must not exceed high, got low={self.low}, high={self.high}")

    @kernel(device=_BOTH)
    def dense(self, ctx, out):
        low, span = self.low, self.high - self.low

        def draw(rng, a):
            rng.random(out=a, dtype=a.dtype)
            a *= span
            a += low

        _sample(ctx, out, draw)


@register("_random_normal")
class RandomNormal(_Sampler):
    """Samples of the normal distribution with mean ``loc`` and standard deviation ``scale``."""

    loc = Param(float, 0.0, "mean")
    scale = Param(float, 1.0, "standard deviation (non-negative)")

    def check_params(self) -> None:
        super().check_params()
        if not self.scale >= 0:
            raise ValueError(f"scale must be non-negative, got {self.scale}")

    @kernel(device=_BOTH)
    def dense(self, ctx, out):
        loc, scale = self.loc, self.scale

        def draw(rng, a):
            rng.standard_normal(out=a, dtype=a.dtype)
            a *= scale
            a += loc

        _sample(ctx, out, draw)


class _NumpySampler(_Sampler):
    """A sampler whose values come from one NumPy ``Generator`` method (float64, then cast)."""

    def draw(self, rng: np.random.Generator, size: tuple) -> np.ndarray:
        raise NotImplementedError

    @kernel(device=_BOTH)
    def dense(self, ctx, out):
        def fill(rng, a):
            a[...] = self.draw(rng, a.shape)

        _sample(ctx, out, fill)


def _positive(op, **values: float) -> None:
    for k, v in values.items():
        if not v > 0:
            raise ValueError(f"{k} must be positive, got {v}")


@register("_random_gamma")
class RandomGamma(_NumpySampler):
    """Samples of the gamma distribution with shape ``alpha`` and scale ``beta``."""

    alpha = Param(float, 1.0, "shape (positive)")
    beta = Param(float, 1.0, "scale (positive)")

    def check_params(self) -> None:
        super().check_params()
        _positive(self, alpha=self.alpha, beta=self.beta)

    def draw(self, rng, size):
        return rng.gamma(self.alpha, self.beta, size)


@register("_random_exponential")
class RandomExponential(_NumpySampler):
    """Samples of the exponential distribution with rate ``lam`` (mean 1 / lam)."""

    lam = Param(float, 1.0, "rate (positive)")

    def check_params(self) -> None:
        super().check_params()
        _positive(self, lam=self.lam)

    def draw(self, rng, size):
        return rng.exponential(1.0 / self.lam, size)


@register("_random_poisson")
class RandomPoisson(_NumpySampler):
    """Samples of the Poisson distribution with rate ``lam`` (integral values, float dtype)."""

    lam = Param(float, 1.0, "rate (non-negative)")

    def check_params(self) -> None:
        super().check_params()
        if not self.lam >= 0:
            raise ValueError(f"lam must be non-negative, got {self.lam}")

    def draw(self, rng, size):
        return rng.poisson(self.lam, size)


@register("_random_negative_binomial")
class RandomNegativeBinomial(_NumpySampler):
    """Samples of the negative binomial distribution: failures before the ``k``-th success
    of trials succeeding with probability ``p``."""

    k = Param(float, 1.0, "number of successes (positive)")
    p = Param(float, 1.0, "success probability, in (0, 1]")

    def check_params(self) -> None:
        super().check_params()
        _positive(self, k=self.k)
        if not 0 < self.p <= 1:
            raise ValueError(f"p must be in (0, 1], got {self.p}")

    def draw(self, rng, size):
        return rng.negative_binomial(self.k, self.p, size)


@register("_random_generalized_negative_binomial")
class RandomGeneralizedNegativeBinomial(_NumpySampler):
    """Samples of the generalized negative binomial distribution with mean ``mu`` and
    dispersion ``alpha`` (a gamma-Poisson mixture; Poisson(mu) when alpha is 0)."""

    mu = Param(float, 1.0, "mean (positive)")
    alpha = Param(float, 1.0, "dispersion (non-negative)")

    def check_params(self) -> None:
        super().check_params()
        _positive(self, mu=self.mu)
        if not self.alpha >= 0:
            raise ValueError(f"alpha must be non-negative, got {self.alpha}")

    def draw(self, rng, size):
        if self.alpha == 0:
            return rng.poisson(self.mu, size)
        return rng.poisson(rng.gamma(1.0 / self.alpha, self.alpha * self.mu, size))


_INTS = frozenset(np.dtype(t) for t in ("int32", "int64"))


def _host_of(xp: Any, out: Any, values: np.ndarray) -> None:
    out[...] = values if xp is np else xp.asarray(values)


@register("_random_randint")
class RandomRandint(_Sampler):
    """Integers drawn uniformly from [low, high) (MXNet's ``random.randint``)."""

    low = Param(int, doc="lower bound (inclusive)")
    high = Param(int, doc="upper bound (exclusive)")
    dtype = Param("dtype", "int32", "int32 or int64")

    def check_params(self) -> None:
        if np.dtype(self.dtype) not in _INTS:
            raise ValueError(f"dtype must be int32 or int64, got {np.dtype(self.dtype).name}")
        if any(d < 0 for d in self.shape):
            raise ValueError(f"shape must have non-negative sides, got {self.shape}")
        if not self.low < self.high:
            raise ValueError(f"low must be less than high, got low={self.low}, high={self.high}")
        info = np.iinfo(np.dtype(self.dtype))
        if self.low < info.min or self.high - 1 > info.max:
            raise ValueError(f"[{self.low}, {self.high}) does not fit in {np.dtype(self.dtype).name}")

    @kernel(device=_BOTH)
    def dense(self, ctx, out):
        _host_of(ctx.xp, out, ctx.rng.integers(self.low, self.high, size=out.shape, dtype=out.dtype))

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples (no inputs): int32 and int64 draws."""
        return [([], {"low": 0, "high": 5, "shape": (3, 4)}),
                ([], {"low": -3, "high": 3, "shape": (2, 2), "dtype": "int64"}), ([], {"low": 1, "high": 2})]


_CATEGORY_DTYPES = frozenset(np.dtype(t) for t in ("int32", "int64", "float16", "float32", "float64"))


def _check_probabilities(p: np.ndarray, dtype: np.dtype) -> None:
    """Refuse distributions (rows of ``p``) with a negative, NaN or infinite probability, or
    none above zero: nothing could be drawn from them right (a negative class was always
    drawn). A sum away from 1 by more than the square root of the dtype's epsilon (at least
    float32's, so weights made in float32 and widened pass) is drawn from as MXNet does (the rest
    of a short sum goes to the last category, the categories past 1 of a long one are never
    drawn), with a ``RuntimeWarning`` saying so: MXNet's own code passes such weights."""
    bad = ~np.isfinite(p) | (p < 0)
    if bad.any():
        row = int(np.argmax(bad.any(axis=1)))
        raise ValueError(f"multinomial: probabilities must be finite and non-negative; distribution {row} is "
                         f"{p[row].tolist() if p.shape[1] <= 8 else p[row, :8].tolist() + ['...']}")
    sums = p.sum(axis=1)
    if (sums <= 0).any():
        raise ValueError(f"multinomial: distribution {int(np.argmax(sums <= 0))} has no probability above zero")
    tol = max(np.sqrt(np.finfo(np.float32).eps), np.sqrt(np.finfo(dtype).eps))  # float32-made weights pass
    off = np.abs(sums - 1.0) > tol
    if off.any():
        row = int(np.argmax(off))
        warnings.warn(f"multinomial: distribution {row} sums to {float(sums[row]):.6g}, not 1: drawn as MXNet draws "
                      "(a short sum's rest goes to the last category; categories past 1 are never drawn); "
                      "normalize the probabilities to draw from the distribution they weigh", RuntimeWarning,
                      stacklevel=2)


@register("_sample_multinomial")
class SampleMultinomial(Op):
    """Draws from the categorical distributions whose probabilities are the last axis of
    ``data`` (MXNet's ``random.multinomial``): the output has shape ``data.shape[:-1] +
    shape`` and holds category ids; with ``get_prob`` a second output holds the log
    probability of each draw, which is differentiable as MXNet's is (the REINFORCE form):
    ``data``'s gradient at each drawn category is the draw's head gradient over the drawn
    probability, summed over the draws. The ids themselves have no gradient."""

    trusted = True  # built-in kernels, tested against NumPy references
    arguments = ("data",)
    outputs = ("output", "prob")
    resources = ("random",)
    shape = Param("shape", (), "draws per distribution (default: one, no extra axis)")
    get_prob = Param(bool, False, "also return the log probability of each draw")
    dtype = Param("dtype", "int32", "dtype of the category ids (int32, int64 or a float type)")

    def check_params(self) -> None:
        if np.dtype(self.dtype) not in _CATEGORY_DTYPES:
            raise ValueError(f"dtype must be int32, int64, float16, float32 or float64, got {np.dtype(self.dtype).name}")

    def output_count(self) -> int:
        return 2 if self.get_prob else 1

    def visible_output_count(self) -> int:
        return self.output_count()

    def kept_for_backward(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return (), ((0, 1) if self.get_prob else ())

    def no_gradient(self) -> str | None:
        return None if self.get_prob else "without get_prob it gives only category ids, which have no gradient"

    def gradient(self, out_grads, inputs, outputs):
        if not self.get_prob:
            return [None]
        ids, logp = outputs
        data = inputs[0]  # its shape and dtype (not kept)
        op = op_function
        if ids.dtype.kind == "f":
            ids = op("cast")(ids, dtype="int64")
        per_draw = op("elemwise_div")(out_grads[1], op("exp")(logp))  # head / drawn probability
        hot = op("one_hot")(ids, depth=data.shape[-1], dtype=data.dtype)
        grad = op("broadcast_mul")(hot, op("expand_dims")(per_draw, axis=-1))
        lead, draws = len(data.shape) - 1, len(self.shape)
        return [op("sum")(grad, axis=tuple(range(lead, lead + draws))) if draws else grad]

    def infer_shape(self, data):
        if not data or data[-1] < 1:
            raise ValueError(f"multinomial needs data whose last axis holds at least one probability, got shape {data}")
        out = tuple(data[:-1]) + tuple(self.shape)
        return [out] * self.output_count()

    def infer_type(self, data):
        if data.kind != "f":
            raise TypeError(f"multinomial needs floating point probabilities, got {data}")
        return [np.dtype(self.dtype)] + [data] * (self.output_count() - 1)

    @kernel(device=_BOTH)
    def dense(self, ctx, data, out, *prob):
        xp = ctx.xp
        host = np.asarray(data if xp is np else xp.asnumpy(data), dtype=np.float64)
        k = host.shape[-1]
        p = host.reshape(-1, k)
        _check_probabilities(p, data.dtype)
        draws = int(np.prod(self.shape, dtype=np.int64))  # () is one draw; a 0 in shape, none
        u = ctx.rng.random((p.shape[0], draws))
        cdf = np.cumsum(p, axis=1)
        ids = np.empty(u.shape, dtype=np.int64)
        for i in range(p.shape[0]):  # the first category whose running sum exceeds u, as MXNet
            ids[i] = np.minimum(np.searchsorted(cdf[i], u[i], side="right"), k - 1)
        _host_of(xp, out, ids.reshape(out.shape).astype(out.dtype))
        if prob:
            with np.errstate(divide="ignore"):
                logp = np.log(np.take_along_axis(p, ids, axis=1))
            _host_of(xp, prob[0], logp.reshape(prob[0].shape).astype(prob[0].dtype))

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: one and a batch of distributions, several draws, log probabilities."""
        from .creation import array

        p = array(np.array([[0.2, 0.3, 0.5], [0.6, 0.1, 0.3]]))  # none 0: the gradient check moves each by 1e-6
        return [[p], ([p], {"shape": (4,)}), ([p], {"shape": (2, 2), "get_prob": True}),
                ([array(np.array([0.1, 0.9], dtype=np.float32))], {"dtype": "int64"})]


def unique_zipfian_row(rng: np.random.Generator, range_max: int, needed: int) -> tuple[np.ndarray, int]:
    """(``needed`` distinct classes in the order first drawn, the draws it took) from the
    log-uniform (Zipfian) distribution over [0, range_max): class k has probability
    log((k + 2) / (k + 1)) / log(range_max + 1). Candidates are drawn in growing batches
    and kept at their first occurrence; the count of draws is where the last one kept was
    drawn."""
    log_range = np.log(range_max + 1.0)
    drawn = np.empty(0, dtype=np.int64)
    batch = max(2 * needed, 64)
    while True:
        more = (np.exp(rng.random(batch) * log_range) - 1.0).astype(np.int64) % range_max
        drawn = np.concatenate([drawn, more])
        first = np.sort(np.unique(drawn, return_index=True)[1])
        if first.shape[0] >= needed:
            first = first[:needed]
            return drawn[first], (int(first[-1]) + 1 if needed else 0)
        batch = drawn.shape[0]  # doubles what was drawn


@register("_sample_unique_zipfian")
class SampleUniqueZipfian(Op):
    """Distinct classes from the log-uniform (Zipfian) distribution over [0, range_max)
    (MXNet's ``_sample_unique_zipfian``, the candidate sampler of sampled softmax): for
    ``shape=(batch, n)``, each row draws until it holds ``n`` distinct classes; outputs the
    classes (int64, in the order first drawn) and each row's number of draws (int64,
    shape ``(batch,)``). Class k has probability log((k + 2) / (k + 1)) / log(range_max + 1)."""

    trusted = True  # built-in kernels, tested against NumPy references
    arguments = ()
    outputs = ("output", "num_trials")
    differentiable = False
    resources = ("random",)
    range_max = Param(int, doc="the number of classes")
    shape = Param("shape", (1,), "(batch, distinct classes per row)")

    def check_params(self) -> None:
        if self.range_max < 1:
            raise ValueError(f"range_max must be at least 1, got {self.range_max}")
        if len(self.shape) != 2:
            raise ValueError(f"shape must be (batch, num_sampled), got {self.shape}")
        if not 0 <= self.shape[1] <= self.range_max or self.shape[0] < 0:
            raise ValueError(f"cannot draw {self.shape[1]} distinct classes of {self.range_max} "
                             f"(shape {self.shape})")

    def infer_shape(self):
        return [tuple(self.shape), (self.shape[0],)]

    def infer_type(self):
        return [np.dtype(np.int64), np.dtype(np.int64)]

    @kernel(device=_BOTH)
    def dense(self, ctx, out, trials):
        batch, needed = self.shape
        classes, counts = np.empty((batch, needed), np.int64), np.empty(batch, np.int64)
        for i in range(batch):  # a row at a time: each draws until its classes are distinct
            classes[i], counts[i] = unique_zipfian_row(ctx.rng, self.range_max, needed)
        _host_of(ctx.xp, out, classes)
        _host_of(ctx.xp, trials, counts)

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: a batch of rows, a row taking every class."""
        return [([], {"range_max": 50, "shape": (3, 10)}), ([], {"range_max": 5, "shape": (1, 5)})]


@register("_shuffle")
class Shuffle(Op):
    """``data`` with its first axis randomly permuted (MXNet's ``random.shuffle``); a new array."""

    trusted = True  # built-in kernels, tested against NumPy references
    arguments = ("data",)
    differentiable = False
    resources = ("random",)

    def infer_shape(self, data):
        if not data:
            raise ValueError("shuffle needs an array of at least one dimension")
        return [tuple(data)]

    @kernel(device=_BOTH)
    def dense(self, ctx, data, out):
        perm = ctx.rng.permutation(data.shape[0])
        out[...] = data[perm if ctx.xp is np else ctx.xp.asarray(perm)]

    @classmethod
    def samples(cls) -> list:
        """``opcheck`` samples: rows of a matrix, a vector."""
        from .creation import array

        return [[array(np.arange(12.0).reshape(4, 3))], [array(np.arange(5, dtype=np.int64))]]


def _run_sampler(op_name: str, params: dict[str, Any], shape: Any, dtype: Any, device: Any,
                 out: NDArray | None) -> NDArray:
    if out is not None:
        shape = out.shape if shape is None else shape
        dtype = out.dtype if dtype is None else dtype
        device = out.device if device is None else device
    # resolve the device here: a plan of a zero-input op is keyed by its parameters only
    params.update(shape=(1,) if shape is None else shape, dtype="float32" if dtype is None else dtype,
                  device=current_device() if device is None else as_device(device))
    return invoke(get_op(op_name), [], params, out=out)


def uniform(low: float = 0, high: float = 1, shape: Any = None, dtype: Any = None,
            device: Device | str | None = None, out: NDArray | None = None) -> NDArray:
    """Uniform samples on [low, high) (MXNet's ``nd.random.uniform``).

    ``shape`` defaults to ``(1,)`` (or ``out``'s shape), ``dtype`` to float32 (or ``out``'s),
    ``device`` to the current device (or ``out``'s).
    """
    return _run_sampler("_random_uniform", {"low": low, "high": high}, shape, dtype, device, out)


def normal(loc: float = 0, scale: float = 1, shape: Any = None, dtype: Any = None,
           device: Device | str | None = None, out: NDArray | None = None) -> NDArray:
    """Normal samples with mean ``loc`` and standard deviation ``scale`` (MXNet's ``nd.random.normal``).

    Defaults as for ``uniform``.
    """
    return _run_sampler("_random_normal", {"loc": loc, "scale": scale}, shape, dtype, device, out)


def randint(low: int, high: int, shape: Any = None, dtype: Any = None,
            device: Device | str | None = None, out: NDArray | None = None) -> NDArray:
    """Integers uniform on [low, high), int32 unless ``dtype`` (or ``out``'s)."""
    if dtype is None and out is None:
        dtype = "int32"
    return _run_sampler("_random_randint", {"low": low, "high": high}, shape, dtype, device, out)


def multinomial(data: NDArray, shape: Any = (), get_prob: bool = False, dtype: Any = "int32",
                out: Any = None) -> Any:
    """Category ids drawn from the distributions along ``data``'s last axis (with
    ``get_prob``, also their log probabilities)."""
    return invoke(get_op("_sample_multinomial"), [data], {"shape": shape, "get_prob": get_prob, "dtype": dtype},
                  out=out)


def shuffle(data: NDArray, out: NDArray | None = None) -> NDArray:
    """A copy of ``data`` with its first axis randomly permuted."""
    return invoke(get_op("_shuffle"), [data], {}, out=out)


def sample(op_name: str, params: dict[str, Any], shape: Any = None, dtype: Any = None,
           device: Device | str | None = None, out: NDArray | None = None) -> NDArray:
    """Run sampler ``op_name`` (``_random_gamma``, ...) with ``params``; defaults as for ``uniform``."""
    return _run_sampler(op_name, dict(params), shape, dtype, device, out)


__all__ = ["seed", "generator", "uniform", "normal", "randint", "multinomial", "shuffle", "sample"]
