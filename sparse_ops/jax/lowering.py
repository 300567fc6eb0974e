"""Dense built-in ops lowered to ``jax.numpy`` / ``lax``: what XLA fuses, with no FFI call.

A bridged call whose inputs and outputs are all dense, of a built-in op (a class defined in
``sparse_ops.ops``, not replaced by a plugin or user code) named in this module's table,
is traced as the ``jnp`` expression of that op instead of an FFI call: a jitted chain of
such ops becomes one fused XLA computation, as the same chain written in ``jnp`` does.
Everything else (sparse storage, plugins, C libraries, ops not in the table) keeps its
FFI call (``bridge.py``).

Each entry follows the op's own semantics, read off the op instance the call's spec holds
(``spec.inst``): its parameters and helpers (``axes``, ``_perm``, ``scalar_as``,
``_matrix_shapes``, ...), the result dtype of its ``infer_type`` (NumPy's promotion of
mixed dtypes, integers computed in floating point and cast back where its kernel does) and
the result shape of its ``infer_shape``, which the lowered result is checked against at
trace time. Values agree with the native kernels to rounding (XLA's float32 transcendental
functions may differ from the native ones, which round from float64, in the last ulp).

Gradients are JAX's own derivative of the expression, so ``jax.grad``, ``jax.jvp``,
``jax.hessian`` and ``jax.vmap`` work to any order. Where JAX's derivative of the plain
``jnp`` function would pick another side of a kink than the op's gradient rule (``relu``
and ``clip`` at their corners, ``maximum`` at ties, ``max`` over ties, the L2 ``norm`` at
0), the entry pins the rule's derivative with a ``jax.custom_jvp``; the tests compare each
lowered op's gradient with its rule's on the op's samples. Ops declared
``differentiable = False`` (``BlockGrad``, ``argmax``, ``zeros_like``) give constants
(``lax.stop_gradient``), as their rule says.
"""
from __future__ import annotations

import functools
import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..bridging import SCALAR_OPERATORS, LoweringTable
from .spec import CallSpec, JaxBridgeError, is_symbolic


Lowering = Callable[..., Any]  # (op instance, spec, *dense arrays) -> one array
_TABLE = LoweringTable()
lowers, names, disabled = _TABLE.lowers, _TABLE.names, _TABLE.disabled
_NONE = object()  # "no lowering" cached on a spec


def lowering_for(spec: CallSpec) -> Lowering | None:
    """The ``jnp`` lowering serving ``spec``'s call, or None (the call keeps its FFI target):
    every input and output dense, no input updated in place, one output, a built-in op of
    the table, lowering not disabled."""
    if _TABLE.off:
        return None
    hit = getattr(spec, "lowered", None)
    if hit is None:
        ok = (_TABLE.serves(spec.opdef) and spec.all_dense and not spec.mutated and len(spec.outs) == 1
              and spec.nvis == 1)
        hit = spec.lowered = _TABLE[spec.name] if ok else _NONE
    return None if hit is _NONE else hit


def describe(spec: CallSpec) -> str | None:
    """``explain``'s handler line for a lowered call, or None."""
    fn = lowering_for(spec)
    if fn is None:
        return None
    try:  # traced on abstract inputs: a lowering that leaves these integers to the kernels says so
        jax.eval_shape(lambda *xs: fn(spec.inst, spec, *xs), *[jax.ShapeDtypeStruct(lay.shape, lay.dtype)
                                                               for lay in spec.ins])
    except _NotExact:
        spec.lowered = _NONE
        return None
    except Exception:  # noqa: BLE001 - symbolic sizes and the like: the call itself decides
        pass
    return f"lowered: the jax.numpy / lax expression of {spec.name} (no FFI call; XLA fuses it with its neighbours)"


def apply(spec: CallSpec, fn: Lowering, flat: list) -> Any:
    """The lowered call: ``fn``'s result in the dtype and shape the op's ``infer_*`` rules
    give (checked: a lowering disagreeing with its op is an error, never a silent result);
    None where the lowering cannot compute it exactly (the caller takes the FFI call)."""
    lay = spec.outs[0]
    try:
        out = jnp.asarray(fn(spec.inst, spec, *flat))
    except _NotExact:
        spec.lowered = _NONE
        return None
    want = jax.dtypes.canonicalize_dtype(lay.dtype)
    if out.dtype != want:
        out = _as_integers(out, want) if _is_int(want) and not _is_int(out.dtype) and out.dtype != bool else \
            out.astype(want)
    if tuple(out.shape) != tuple(lay.shape):
        raise JaxBridgeError(f"{spec.label}: its jnp lowering gave shape {tuple(out.shape)} but the op's "
                             f"infer_shape says {lay.shape}; lowering.disabled() sends it to the FFI call")
    return lax.stop_gradient(out) if spec.opdef.constant else out


# ---- helpers ---------------------------------------------------------------------------------------
def _out_dtype(spec: CallSpec) -> Any:
    return jax.dtypes.canonicalize_dtype(spec.outs[0].dtype)


def _size(dims: Any) -> Any:
    """The product of ``dims``: an int, or a JAX symbolic dimension expression where one is
    symbolic (``jax.export`` shape polymorphism; ``int()`` of a symbol raises)."""
    return math.prod(dims) if any(is_symbolic(d) for d in dims) else int(np.prod(dims, dtype=np.int64))


def _is_int(dtype: Any) -> bool:
    return np.dtype(dtype).kind in "iu"


class _NotExact(Exception):
    """Raised while tracing a lowering that cannot compute a call's integers as the native
    kernels do: the call takes its FFI target."""


def _float_for(dtype: Any) -> Any:
    """``dtype`` itself for floating inputs; integer inputs that the native kernels compute in
    float64 and truncate take the FFI call instead (``_NotExact``): float32 without x64, and
    XLA's transcendental functions at integers (gamma(3) = 1.9999...), truncate elsewhere."""
    if _is_int(dtype):
        raise _NotExact
    return dtype


def _as_integers(x: Any, dtype: Any) -> Any:
    """Floating ``x`` cast to integer ``dtype`` as NumPy casts on the cpu (truncated; NaN,
    infinities and values out of range give the dtype's minimum, where XLA's cast saturates)."""
    info = np.iinfo(dtype)
    bound = float(2 ** (info.bits - 1)) if info.min < 0 else float(2 ** info.bits)
    fits = jnp.isfinite(x) & (x > -bound - 1 if info.min < 0 else x > -1) & (x < bound)
    return jnp.where(fits, x, jnp.asarray(info.min, x.dtype)).astype(dtype)


def _with_slope(value: Callable[[Any], Any], slope: Callable[[Any, Any], Any]) -> Callable[[Any], Any]:
    """``value(x)``, whose derivative is ``slope(x, y) * t`` (the op's gradient rule, where it
    picks a side of a kink that JAX's derivative of ``value`` would not)."""
    f = jax.custom_jvp(value)

    @f.defjvp
    def _jvp(primals: tuple, tangents: tuple) -> tuple:
        (x,), (t,) = primals, tangents
        y = f(x)
        return y, slope(x, y).astype(t.dtype) * t

    return f


def _ufunc(fn: Callable[[Any], Any]) -> Lowering:
    """An elementwise function of one array: integer inputs computed in floating point
    and cast back (``apply`` casts), as the native kernels do."""
    def lower(inst: Any, spec: CallSpec, x: Any) -> Any:
        return fn(x.astype(_float_for(x.dtype)) if _is_int(x.dtype) else x)
    return lower


def _sigmoid(x: Any) -> Any:
    return jax.nn.sigmoid(x.astype(jnp.float32) if x.dtype == jnp.float16 else x)


def _round_half_away(x: Any) -> Any:
    return jnp.sign(x) * jnp.floor(jnp.abs(x) + 0.5)


def _rint_half_down(x: Any) -> Any:
    low, high = jnp.floor(x), jnp.ceil(x)
    return jnp.where(x - low <= high - x, low, high)


# the special functions at the points where jax.scipy parts from SciPy (the native kernels' values)
def _gammaln(x: Any) -> Any:
    return jnp.where(x == -jnp.inf, x, jax.scipy.special.gammaln(x))  # log|Gamma| -> -inf there, as SciPy


def _digamma(x: Any) -> Any:  # the poles at -0 and +0: +inf and -inf, as SciPy
    return jnp.where(x == 0, jnp.where(jnp.signbit(x), jnp.inf, -jnp.inf).astype(x.dtype),
                     jax.scipy.special.digamma(x))


def _polygamma1(x: Any) -> Any:
    return jnp.where(x == jnp.inf, jnp.zeros((), x.dtype), jax.scipy.special.polygamma(1, x))


_abs = _with_slope(jnp.abs, lambda x, y: jnp.sign(x))  # the rule's slope at 0 is 0 (JAX's abs takes 1 there)
_relu = _with_slope(lambda x: jnp.maximum(x, jnp.zeros((), x.dtype)), lambda x, y: jnp.sign(y))

_UNARY = {
    "negative": jnp.negative, "abs": _abs, "sign": jnp.sign, "square": jnp.square, "sqrt": jnp.sqrt,
    "exp": jnp.exp, "log": jnp.log, "log1p": jnp.log1p, "tanh": jnp.tanh, "sigmoid": _sigmoid,
    "round": _round_half_away, "rint": _rint_half_down, "fix": jnp.trunc, "floor": jnp.floor, "ceil": jnp.ceil,
    "trunc": jnp.trunc, "sin": jnp.sin, "cos": jnp.cos, "tan": jnp.tan, "arcsin": jnp.arcsin,
    "arccos": jnp.arccos, "arctan": jnp.arctan, "sinh": jnp.sinh, "cosh": jnp.cosh, "arcsinh": jnp.arcsinh,
    "arccosh": jnp.arccosh, "arctanh": jnp.arctanh, "degrees": jnp.degrees, "radians": jnp.radians,
    "expm1": jnp.expm1, "log2": jnp.log2, "log10": jnp.log10, "cbrt": jnp.cbrt, "rsqrt": lax.rsqrt,
    "rcbrt": lambda x: 1 / jnp.cbrt(x), "reciprocal": lambda x: 1 / x,
    "gamma": jax.scipy.special.gamma, "gammaln": lambda x: _gammaln(x), "_digamma": lambda x: _digamma(x),
    "_polygamma1": lambda x: _polygamma1(x),
    "erf": jax.scipy.special.erf, "erfinv": jax.scipy.special.erfinv,
    "softsign": lambda x: x / (1 + jnp.abs(x)),
}
# the native kernels compute these on integers as they are (the others in floating point)
_INTEGER_AS_IS = {"negative", "abs", "sign", "square"}

for _name, _fn in _UNARY.items():
    _TABLE[_name] = (lambda fn: lambda inst, spec, x: fn(x))(_fn) if _name in _INTEGER_AS_IS else _ufunc(_fn)


@lowers("relu")
def _relu_lowering(inst: Any, spec: CallSpec, x: Any) -> Any:
    return _relu(x)


@lowers("identity", "BlockGrad")
def _copy(inst: Any, spec: CallSpec, x: Any) -> Any:
    return x  # BlockGrad: apply() stops the gradient (the op is declared differentiable = False)


@lowers("cast")
def _cast(inst: Any, spec: CallSpec, x: Any) -> Any:
    return x.astype(_out_dtype(spec))


@lowers("zeros_like", "ones_like")
def _filled(inst: Any, spec: CallSpec, x: Any) -> Any:
    return jnp.full(x.shape, 0 if spec.name == "zeros_like" else 1, _out_dtype(spec))


@lowers("logical_not")
def _logical_not(inst: Any, spec: CallSpec, x: Any) -> Any:
    return (x == 0).astype(x.dtype)


def _clip_lowering(lo: Any, hi: Any) -> Callable[[Any], Any]:
    return _with_slope(lambda x: jnp.clip(x, lo, hi), lambda x, y: (x >= lo) & (x <= hi))


@lowers("clip")
def _clip(inst: Any, spec: CallSpec, x: Any) -> Any:
    from ..ops.unary import _scalar_as

    lo, hi = _scalar_as(inst.a_min, x.dtype), _scalar_as(inst.a_max, x.dtype)
    return _clip_lowering(lo, hi)(x)


# ---- scalar operators: the scalar in the array's dtype first (MXNet) -------------------------------
def _scalar_op(fn: Callable[[Any, Any], Any]) -> Lowering:
    def lower(inst: Any, spec: CallSpec, x: Any) -> Any:
        s = inst.scalar_as(np.dtype(x.dtype))
        if _is_int(x.dtype) and (inst.float_math or spec.name in ("_div_scalar", "_rdiv_scalar")):
            wide = _float_for(x.dtype)  # computed in floating point, truncated back (NumPy's unsafe cast)
            return fn(x.astype(wide), np.asarray(s, wide))
        if spec.name == "_power_scalar" and s == 0.5:  # NumPy's own x ** 0.5 is sqrt (NaN at -inf, not inf)
            return jnp.sqrt(x)
        return fn(x, s)
    return lower


for _name, _fn in SCALAR_OPERATORS.items():
    _TABLE[_name] = _scalar_op(_fn)


@lowers("_maximum_scalar", "_minimum_scalar")
def _extremum_scalar(inst: Any, spec: CallSpec, x: Any) -> Any:
    s = inst.scalar_as(np.dtype(x.dtype))
    if spec.name == "_maximum_scalar":  # the rule: the gradient where x >= scalar (ties included)
        return _with_slope(lambda v: jnp.maximum(v, s), lambda v, y: v >= s)(x)
    return _with_slope(lambda v: jnp.minimum(v, s), lambda v, y: v <= s)(x)


# ---- two arrays: NumPy's promotion first (the op's infer_type), then the operator ---------------------
def _promoted(spec: CallSpec, *xs: Any) -> list:
    dt = _out_dtype(spec)
    return [x if x.dtype == dt else x.astype(dt) for x in xs]


def _binary(fn: Callable[[Any, Any], Any], integers_in_float: bool = False) -> Lowering:
    """``fn`` of two arrays in their promoted dtype (a comparison's 1/0 too); with
    ``integers_in_float``, integer operands computed in floating point and cast back
    (truncated), as NumPy's true divide and the op's ``float_math`` power do."""
    def lower(inst: Any, spec: CallSpec, a: Any, b: Any) -> Any:
        a, b = _promoted(spec, a, b)
        if integers_in_float and _is_int(a.dtype):
            wide = _float_for(a.dtype)
            return fn(a.astype(wide), b.astype(wide))
        return fn(a, b)
    return lower


for _name, _fn in {"elemwise_add": jnp.add, "broadcast_add": jnp.add, "elemwise_sub": jnp.subtract,
                   "broadcast_sub": jnp.subtract, "elemwise_mul": jnp.multiply,
                   "broadcast_mul": jnp.multiply}.items():
    _TABLE[_name] = _binary(_fn)
for _name in ("elemwise_div", "broadcast_div"):
    _TABLE[_name] = _binary(jnp.divide, integers_in_float=True)
for _name, _fn in {"broadcast_equal": jnp.equal, "broadcast_not_equal": jnp.not_equal,
                   "broadcast_greater": jnp.greater, "broadcast_greater_equal": jnp.greater_equal,
                   "broadcast_lesser": jnp.less, "broadcast_lesser_equal": jnp.less_equal,
                   "broadcast_logical_and": lambda a, b: (a != 0) & (b != 0),
                   "broadcast_logical_or": lambda a, b: (a != 0) | (b != 0),
                   "broadcast_logical_xor": lambda a, b: (a != 0) ^ (b != 0)}.items():
    _TABLE[_name] = _binary(_fn)
_TABLE["broadcast_power"] = _binary(jnp.power, integers_in_float=True)


@lowers("broadcast_mod")
def _mod(inst: Any, spec: CallSpec, a: Any, b: Any) -> Any:
    a, b = _promoted(spec, a, b)
    zero = b == 0
    # 0 where b is 0, with the rule's slope 1 for a there too
    by_zero = _zero_slope_one(a) if jnp.issubdtype(a.dtype, jnp.inexact) else jnp.zeros((), a.dtype)
    return jnp.where(zero, by_zero, jnp.mod(a, jnp.where(zero, jnp.ones((), b.dtype), b)))


# 0 (for inf and NaN too), with derivative 1
_zero_slope_one = _with_slope(lambda x: jnp.zeros_like(x), lambda x, y: jnp.ones_like(x))


def _pick(lhs_wins: Callable[[Any, Any], Any], value: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``value(a, b)`` whose derivative sends the tangent of ``a`` where ``lhs_wins(a, b)``
    and of ``b`` elsewhere (the op's rule: ties go to lhs)."""
    f = jax.custom_jvp(value)

    @f.defjvp
    def _jvp(primals: tuple, tangents: tuple) -> tuple:
        (a, b), (ta, tb) = primals, tangents
        y = f(a, b)
        left = lhs_wins(a, b)
        return y, jnp.where(left, ta, jnp.zeros((), ta.dtype)) + jnp.where(left, jnp.zeros((), tb.dtype), tb)

    return f


_maximum = _pick(lambda a, b: a >= b, jnp.maximum)
_minimum = _pick(lambda a, b: a <= b, jnp.minimum)


@lowers("broadcast_maximum", "broadcast_minimum")
def _extremum(inst: Any, spec: CallSpec, a: Any, b: Any) -> Any:
    a, b = _promoted(spec, a, b)
    return (_maximum if spec.name == "broadcast_maximum" else _minimum)(a, b)


@lowers("_scaled_mul")
def _scaled_mul(inst: Any, spec: CallSpec, a: Any, b: Any) -> Any:
    a, b = _promoted(spec, a, b)
    return (a * b) * np.asarray(inst.scalar, _float_for(a.dtype))  # integers: the product times a float scalar


@lowers("_div_or_zero")
def _div_or_zero(inst: Any, spec: CallSpec, a: Any, b: Any) -> Any:
    a, b = _promoted(spec, a, b)
    zero = b == 0
    return jnp.where(zero, jnp.zeros((), a.dtype), a / jnp.where(zero, jnp.ones((), b.dtype), b))


@lowers("add_n")
def _add_n(inst: Any, spec: CallSpec, *xs: Any) -> Any:
    return functools.reduce(jnp.add, _promoted(spec, *xs))


@lowers("where")
def _where(inst: Any, spec: CallSpec, condition: Any, x: Any, y: Any) -> Any:
    pick = condition != 0
    if pick.ndim != x.ndim:  # a 1-d condition picks whole rows
        pick = pick.reshape(pick.shape + (1,) * (x.ndim - 1))
    return jnp.where(pick, x, y)


# ---- shapes: the op's infer_shape gives the target ---------------------------------------------------
@lowers("reshape", "flatten", "expand_dims", "squeeze", "reshape_like")
def _reshaped(inst: Any, spec: CallSpec, x: Any, *like: Any) -> Any:
    return jnp.reshape(x, spec.outs[0].shape)


@lowers("broadcast_to", "broadcast_like", "broadcast_axis")
def _broadcast(inst: Any, spec: CallSpec, x: Any, *like: Any) -> Any:
    lead = len(spec.outs[0].shape) - x.ndim
    return jnp.broadcast_to(x.reshape((1,) * lead + x.shape), spec.outs[0].shape)


@lowers("transpose")
def _transpose(inst: Any, spec: CallSpec, x: Any) -> Any:
    return jnp.transpose(x, inst._perm(x.ndim))


@lowers("swapaxes")
def _swapaxes(inst: Any, spec: CallSpec, x: Any) -> Any:
    return jnp.swapaxes(x, inst.dim1, inst.dim2)


@lowers("concat")
def _concat(inst: Any, spec: CallSpec, *xs: Any) -> Any:
    axis = inst.dim + xs[0].ndim if inst.dim < 0 else inst.dim
    return jnp.concatenate(_promoted(spec, *xs), axis=axis)


@lowers("stack")
def _stack(inst: Any, spec: CallSpec, *xs: Any) -> Any:
    axis = inst.axis + xs[0].ndim + 1 if inst.axis < 0 else inst.axis
    return jnp.stack(_promoted(spec, *xs), axis=axis)


# ---- reductions: the op's axes (MXNet's axis / exclude), its accumulator dtype ----------------------
def _acc(dtype: Any) -> Any:
    """The accumulator of sum-like reductions (``reduce.acc_dtype``): float16 in float32,
    integers in int64 (where JAX holds it)."""
    from ..ops.reduce import acc_dtype

    return jax.dtypes.canonicalize_dtype(acc_dtype(np.dtype(dtype)))


@lowers("sum", "mean", "square_sum")
def _sum(inst: Any, spec: CallSpec, x: Any) -> Any:
    axes = inst.axes(x.ndim)
    acc = _acc(x.dtype)
    v = x.astype(acc) if spec.name == "square_sum" else x
    total = jnp.sum(v * v if spec.name == "square_sum" else v, axis=axes, keepdims=inst.keepdims, dtype=acc)
    if spec.name != "mean":
        return total
    count = _size([x.shape[a] for a in axes])
    if count == 0 and _is_int(x.dtype):  # a symbolic count is never 0 (JAX takes its symbols >= 1)
        return jnp.zeros_like(total)
    wide = total.astype(_float_for(total.dtype))
    return wide / (jnp.asarray(count).astype(wide.dtype) if is_symbolic(count) else count)


def _l2(axes: tuple[int, ...], keepdims: bool) -> Callable[[Any], Any]:
    """The L2 norm over ``axes``, whose derivative is 0 at a zero norm (the op's rule)."""
    @jax.custom_jvp
    def norm(x: Any) -> Any:
        return jnp.sqrt(jnp.sum(x * x, axis=axes, keepdims=keepdims))

    @norm.defjvp
    def _jvp(primals: tuple, tangents: tuple) -> tuple:
        (x,), (t,) = primals, tangents
        y = norm(x)
        dot = jnp.sum(x * t, axis=axes, keepdims=keepdims)
        zero = y == 0
        return y, jnp.where(zero, jnp.zeros((), y.dtype), dot / jnp.where(zero, jnp.ones((), y.dtype), y))

    return norm


@lowers("norm")
def _norm(inst: Any, spec: CallSpec, x: Any) -> Any:
    axes = inst.axes(x.ndim)
    v = x.astype(_acc(x.dtype))
    if inst.ord == 1:
        return jnp.sum(_abs(v), axis=axes, keepdims=inst.keepdims)
    return _l2(axes, inst.keepdims)(v.astype(_float_for(v.dtype)))  # integers: the kernels' float64 squares


def _tied(reduce: Callable[..., Any], axes: tuple[int, ...], keepdims: bool) -> Callable[[Any], Any]:
    """``max`` / ``min`` over ``axes`` whose derivative gives every entry equal to the result
    the whole tangent (the op's rule: ties each get the head gradient)."""
    @jax.custom_jvp
    def f(x: Any) -> Any:
        return reduce(x, axis=axes, keepdims=keepdims)

    @f.defjvp
    def _jvp(primals: tuple, tangents: tuple) -> tuple:
        (x,), (t,) = primals, tangents
        y = f(x)
        spread = y if keepdims else jnp.expand_dims(y, axes)
        return y, jnp.sum(jnp.where(x == spread, t, jnp.zeros((), t.dtype)), axis=axes, keepdims=keepdims)

    return f


@lowers("max", "min", "prod", "nansum", "nanprod")
def _dense_reduction(inst: Any, spec: CallSpec, x: Any) -> Any:
    axes = inst.axes(x.ndim)
    if not axes:
        return x
    if spec.name in ("max", "min"):
        return _tied(jnp.max if spec.name == "max" else jnp.min, axes, inst.keepdims)(x)
    fn = {"prod": jnp.prod, "nansum": jnp.nansum, "nanprod": jnp.nanprod}[spec.name]
    return fn(x, axis=axes, keepdims=inst.keepdims)


@lowers("argmax", "argmin", "argmax_channel")
def _search(inst: Any, spec: CallSpec, x: Any) -> Any:
    fn = jnp.argmin if spec.name == "argmin" else jnp.argmax
    if spec.name == "argmax_channel":
        found = fn(x, axis=-1)
    elif inst.axis is None:
        found = fn(x.reshape(-1))
    else:
        found = fn(x, axis=inst.axis % x.ndim)
    return found.reshape(spec.outs[0].shape)


@lowers("softmax", "log_softmax", "softmin")
def _softmax(inst: Any, spec: CallSpec, x: Any) -> Any:
    z = x.astype(jnp.promote_types(jnp.promote_types(x.dtype, spec.outs[0].dtype), jnp.float32))
    z = z * np.asarray(inst._scale(), z.dtype)
    return (jax.nn.log_softmax if spec.name == "log_softmax" else jax.nn.softmax)(z, axis=inst.axis)


# ---- activations ---------------------------------------------------------------------------------
@lowers("hard_sigmoid")
def _hard_sigmoid(inst: Any, spec: CallSpec, x: Any) -> Any:
    alpha, beta = np.asarray(inst.alpha, x.dtype), np.asarray(inst.beta, x.dtype)
    # the rule: alpha where 0 < y < 1, else 0 (the ends excluded)
    clipped = _with_slope(lambda z: jnp.clip(z, 0, 1), lambda z, y: (y > 0) & (y < 1))
    return clipped(x * alpha + beta)


@lowers("smooth_l1")
def _smooth_l1(inst: Any, spec: CallSpec, x: Any) -> Any:
    s2 = np.asarray(inst.scalar * inst.scalar, x.dtype)
    with np.errstate(divide="ignore"):  # scalar 0: every |x| is below 1 / 0 = inf
        bound, half = 1 / s2, 0.5 / s2
    a = jnp.abs(x)
    return jnp.where(a < bound, 0.5 * s2 * x * x, a - half)


@lowers("LeakyReLU")
def _leaky_relu(inst: Any, spec: CallSpec, x: Any) -> Any:
    from ..ops.activation import SELU_ALPHA, SELU_LAMBDA

    pos = x > 0
    below = jnp.where(pos, jnp.zeros((), x.dtype), x)  # expm1 of <= 0 only: no overflow, and no tie at 0
    if inst.act_type == "leaky":
        return jnp.where(pos, x, np.asarray(inst.slope, x.dtype) * x)
    if inst.act_type == "elu":
        return jnp.where(pos, x, np.asarray(inst.slope, x.dtype) * jnp.expm1(below))
    if inst.act_type == "selu":
        return np.asarray(SELU_LAMBDA, x.dtype) * jnp.where(pos, x, np.asarray(SELU_ALPHA, x.dtype) * jnp.expm1(below))
    return 0.5 * x * (1 + jax.scipy.special.erf(x / np.asarray(np.sqrt(2.0), x.dtype)))


# ---- products ------------------------------------------------------------------------------------
@lowers("dot")
def _dot(inst: Any, spec: CallSpec, a: Any, b: Any) -> Any:
    a, b = _promoted(spec, a, b)
    out_l, k, out_r = inst._split(a.shape, b.shape)  # the op's own alignment rule and its error
    m, n = _size(out_l), _size(out_r)  # (not its _matrix_shapes: those are ints, and sizes may be symbolic)
    a = a.reshape((k, m) if inst.transpose_a else (m, k))
    b = b.reshape((n, k) if inst.transpose_b else (k, n))
    product = jnp.matmul(a.T if inst.transpose_a else a, b.T if inst.transpose_b else b)
    return product.reshape(spec.outs[0].shape)


@lowers("FullyConnected")
def _fully_connected(inst: Any, spec: CallSpec, data: Any, weight: Any, *bias: Any) -> Any:
    data, weight, *bias = _promoted(spec, data, weight, *bias)
    out_shape = spec.outs[0].shape
    batch = _size(out_shape[:-1])
    y = jnp.matmul(data.reshape(batch, weight.shape[1]), weight.T)
    if bias:
        y = y + bias[0].reshape(inst.num_hidden)
    return y.reshape(out_shape)
