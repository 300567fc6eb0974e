"""Dense built-in ops lowered to torch's own operations in eager calls.

An eager call of a bridged op whose inputs are all strided tensors, of a built-in op (a
class defined in ``sparse_ops.ops``, not replaced by a plugin or user code) named in this
module's table, runs as the torch expression of that op instead of the op's kernel: no
NumPy views, no plan, no autograd function of ours, so a small call costs about what the
torch operation costs, on any device torch runs it on, its gradient is torch's own
derivative, and ``torch.func`` transforms take it as they take torch's operations
(``jvp``, ``jacfwd`` and ``hessian`` included; ``vmap`` batches it). Sparse inputs or
outputs, plugins, C libraries, ops not in the table, calls traced by ``torch.compile``,
inputs marked ``sparse_grad`` and calls inside a dispatch mode keep the general path
(``bridge.py``).

Each entry follows the op's own semantics, read off the op instance (its parameters and
helpers such as ``scalar_as``): the inputs are first brought to the dtype the op's
``infer_type`` gives (NumPy's promotion, not torch's), integers are computed in float64
and cast back where the native kernel does, and the op's ``infer_shape`` and
``infer_storage_type`` run once per signature, so an input the op refuses (``elemwise_add``
of two shapes, which torch would broadcast) takes the general path and gets the op's own
error. Values agree with the native kernels to rounding (torch's float32 transcendental
functions may differ from the native ones, which round from float64, in the last ulp).

Gradients are torch's: where torch picks a side of a kink the op's rule picks too
(``relu`` and ``abs`` at 0, ``clip`` and the scalar ``maximum``/``minimum`` inclusive of
their bounds), the lowering uses it; ops whose rule differs from torch's at ties
(``broadcast_maximum``: ties to the left input, torch splits them) are not lowered. One
difference remains at NaN inputs: ``relu``'s native rule gives a NaN gradient there
(MXNet's), torch's ``relu`` passes the incoming gradient. Comparisons and logical ops are
lowered only for inputs that need no gradient: torch's comparisons give results without
one, where the op's rule gives zero gradients (``gives_no_gradient``). Ops declared
``differentiable = False`` give results that need no gradient.
"""
from __future__ import annotations

import functools
import math
from typing import Any, Callable

import torch

from .. import registry
from ..bridging import SCALAR_OPERATORS, LoweringTable
from ..ops.reduce import acc_dtype
from ..ops.unary import _scalar_as
from .convert import numpy_dtype, torch_dtype

# A lowering takes (op instance, result torch dtype, input torch dtypes) and returns the
# function of the tensors that computes the op for that signature (made once per signature,
# so a repeated call runs just the torch operations)
Lowering = Callable[[Any, torch.dtype, tuple], Callable[..., torch.Tensor]]
_TABLE = LoweringTable()
lowers, names, disabled = _TABLE.lowers, _TABLE.names, _TABLE.disabled
_FLOAT64 = torch.float64
_INTEGERS = frozenset((torch.int32, torch.int64))


def lowering_for(opdef: registry.OpDef) -> Lowering | None:
    """The torch lowering of ``opdef``'s all-dense calls, or None: a built-in op of the
    table (a class registered under a built-in's name by a plugin or user code keeps its
    kernel) with one output and no input updated in place."""
    return _TABLE[opdef.name] if _TABLE.serves(opdef) and not opdef.mutate else None


def gives_no_gradient(name: str) -> bool:
    """Whether op ``name``'s lowering gives results torch records no gradient for (its
    comparisons), so that calls with inputs needing a gradient keep the kernels."""
    return name in _NO_GRADIENT


def elementwise(name: str) -> bool:
    """Whether op ``name``'s lowering is elementwise (its result has its one input's shape,
    for every shape), so that its one-input signatures need no shape."""
    return name not in _NOT_ELEMENTWISE


def describe(name: str) -> str | None:
    """``explain``'s line for an op whose eager all-dense calls are lowered, or None."""
    opdef = registry.get_op(name)
    if lowering_for(opdef) is None or _TABLE.off:
        return None
    return (f"eager all-dense calls, torch.func transforms included, run torch's own operations for {name} "
            "(sparse_ops.torch.lowering; "
            "torch's autograd derives them); other calls run the op's kernels")


# ---- helpers ---------------------------------------------------------------------------------------
def _promoting(dtype: torch.dtype, in_dtypes: tuple, fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``fn`` of the tensors brought to ``dtype`` first (NumPy's promotion, the op's
    ``infer_type``), or ``fn`` itself where they have it already."""
    if all(d == dtype for d in in_dtypes):
        return fn
    return lambda *xs: fn(*[x.to(dtype) for x in xs])


def _scalar(inst: Any, dtype: torch.dtype) -> Any:
    """The op's scalar in the input's dtype first (MXNet's rule), as a Python number."""
    return inst.scalar_as(numpy_dtype(dtype)).item()


# ---- one array --------------------------------------------------------------------------------------
def _sigmoid(x: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(x.float() if x.dtype == torch.float16 else x)


def _round_half_away(x: torch.Tensor) -> torch.Tensor:
    return torch.sign(x) * torch.floor(torch.abs(x) + 0.5)


def _rint_half_down(x: torch.Tensor) -> torch.Tensor:
    low, high = torch.floor(x), torch.ceil(x)
    return torch.where(x - low <= high - x, low, high)


def _sign(x: torch.Tensor) -> torch.Tensor:
    """NumPy's sign: NaN at NaN (torch.sign gives 0 there)."""
    s = torch.sign(x)
    return torch.where(x != x, x, s) if x.is_floating_point() else s


def _lgamma(x: torch.Tensor) -> torch.Tensor:
    """log|Gamma(x)|, -inf at -inf as SciPy's gammaln (torch.lgamma gives +inf there)."""
    return torch.where(x == -math.inf, x, torch.lgamma(x))


_UNARY = {
    "sqrt": torch.sqrt, "exp": torch.exp, "log": torch.log, "log1p": torch.log1p, "tanh": torch.tanh,
    "sigmoid": _sigmoid, "round": _round_half_away, "rint": _rint_half_down, "fix": torch.trunc,
    "floor": torch.floor, "ceil": torch.ceil, "trunc": torch.trunc, "sin": torch.sin, "cos": torch.cos,
    "tan": torch.tan, "arcsin": torch.asin, "arccos": torch.acos, "arctan": torch.atan, "sinh": torch.sinh,
    "cosh": torch.cosh, "arcsinh": torch.asinh, "arccosh": torch.acosh, "arctanh": torch.atanh,
    "degrees": torch.rad2deg, "radians": torch.deg2rad, "expm1": torch.expm1, "log2": torch.log2,
    "log10": torch.log10, "rsqrt": torch.rsqrt, "reciprocal": torch.reciprocal, "gammaln": _lgamma,
    "_digamma": torch.digamma, "erf": torch.erf, "erfinv": torch.erfinv,
    "softsign": lambda x: x / (1 + torch.abs(x)),
}
# the native kernels compute these on integers as they are (the others in float64, cast back)
_INTEGER_AS_IS = {"negative": torch.neg, "abs": torch.abs, "sign": _sign, "square": torch.square,
                  "relu": torch.relu}


def _unary(fn: Callable[[torch.Tensor], torch.Tensor], as_is: bool) -> Lowering:
    def make(inst: Any, dtype: torch.dtype, in_dtypes: tuple) -> Callable[..., torch.Tensor]:
        if as_is or in_dtypes[0] not in _INTEGERS:
            return fn
        return lambda x: fn(x.to(_FLOAT64))
    return make


for _name, _fn in _UNARY.items():
    _TABLE[_name] = _unary(_fn, False)
for _name, _fn in _INTEGER_AS_IS.items():
    _TABLE[_name] = _unary(_fn, True)
# BlockGrad is declared differentiable = False: the bridge detaches its result
_TABLE["identity"] = _TABLE["BlockGrad"] = lambda inst, dtype, in_dtypes: torch.clone
_TABLE["cast"] = lambda inst, dtype, in_dtypes: lambda x: x.to(dtype, copy=True)  # a new array, as the kernel
_TABLE["logical_not"] = lambda inst, dtype, in_dtypes: lambda x: x == 0


@lowers("zeros_like", "ones_like")
def _filled(inst: Any, dtype: torch.dtype, in_dtypes: tuple) -> Callable[..., torch.Tensor]:
    fill = torch.zeros if inst._opdef.name == "zeros_like" else torch.ones
    return lambda x: fill(x.shape, dtype=dtype, device=x.device)


@lowers("clip")
def _clip(inst: Any, dtype: torch.dtype, in_dtypes: tuple) -> Callable[..., torch.Tensor]:
    nd = numpy_dtype(in_dtypes[0])
    lo, hi = _scalar_as(inst.a_min, nd).item(), _scalar_as(inst.a_max, nd).item()
    return lambda x: torch.clamp(x, lo, hi)  # its gradient passes where lo <= x <= hi: the rule's


# ---- scalar operators ---------------------------------------------------------------------------------
_SCALAR = {
    **SCALAR_OPERATORS,
    # torch.clamp's gradient passes where x >= min (x <= max): the rule's side of the tie
    "_maximum_scalar": lambda x, s: torch.clamp(x, min=s), "_minimum_scalar": lambda x, s: torch.clamp(x, max=s),
}


def _scalar_op(fn: Callable[[torch.Tensor, Any], torch.Tensor], name: str) -> Lowering:
    true_divide = name in ("_div_scalar", "_rdiv_scalar")

    def make(inst: Any, dtype: torch.dtype, in_dtypes: tuple) -> Callable[..., torch.Tensor]:
        s = _scalar(inst, in_dtypes[0])
        if in_dtypes[0] in _INTEGERS and (true_divide or getattr(inst, "float_math", False)):
            s = float(s)  # in floating point, truncated back (NumPy's unsafe cast)
            return lambda x: fn(x.to(_FLOAT64), s)
        return lambda x: fn(x, s)
    return make


for _name, _fn in _SCALAR.items():
    _TABLE[_name] = _scalar_op(_fn, _name)


# ---- two or more arrays: NumPy's promotion first (the op's infer_type), then the operator ---------------
def _binary(fn: Callable[..., torch.Tensor], in_float: bool = False) -> Lowering:
    """``fn`` of the tensors in their promoted dtype; with ``in_float``, integer operands
    computed in float64 and cast back (truncated), as NumPy's true divide and the op's
    ``float_math`` power do."""
    def make(inst: Any, dtype: torch.dtype, in_dtypes: tuple) -> Callable[..., torch.Tensor]:
        if in_float and dtype in _INTEGERS:
            return _promoting(_FLOAT64, in_dtypes, fn)  # (in_dtypes are integers: converted)
        return _promoting(dtype, in_dtypes, fn)
    return make


for _name, _fn in {"elemwise_add": torch.add, "broadcast_add": torch.add, "elemwise_sub": torch.sub,
                   "broadcast_sub": torch.sub, "elemwise_mul": torch.mul, "broadcast_mul": torch.mul,
                   "broadcast_equal": torch.eq, "broadcast_not_equal": torch.ne, "broadcast_greater": torch.gt,
                   "broadcast_greater_equal": torch.ge, "broadcast_lesser": torch.lt,
                   "broadcast_lesser_equal": torch.le,
                   "broadcast_logical_and": lambda a, b: (a != 0) & (b != 0),
                   "broadcast_logical_or": lambda a, b: (a != 0) | (b != 0),
                   "broadcast_logical_xor": lambda a, b: (a != 0) ^ (b != 0),
                   "add_n": lambda *xs: functools.reduce(torch.add, xs)}.items():
    _TABLE[_name] = _binary(_fn)
for _name in ("elemwise_div", "broadcast_div"):
    _TABLE[_name] = _binary(torch.div, in_float=True)
_TABLE["broadcast_power"] = _binary(torch.pow, in_float=True)



# ---- reductions, softmax, products: their results' shapes depend on the input's ------------------------
@lowers("sum", "mean", "square_sum")
def _sum(inst: Any, dtype: torch.dtype, in_dtypes: tuple) -> Callable[..., torch.Tensor]:
    name, keep = inst._opdef.name, inst.keepdims
    acc = torch_dtype(acc_dtype(numpy_dtype(in_dtypes[0])))  # float16 in float32, integers in int64

    def lower(x: torch.Tensor) -> torch.Tensor:
        axes = inst.axes(x.dim())
        v = x.to(acc)
        if name == "square_sum":
            v = v * v
        total = torch.sum(v, dim=axes, keepdim=keep) if axes else v.clone()  # dim=() would sum everything
        if name != "mean":
            return total
        count = math.prod(x.shape[a] for a in axes)
        if count == 0 and acc in _INTEGERS:
            return torch.zeros_like(total)
        if acc in _INTEGERS:  # the sum wraps to the input's integer dtype first, as the kernels (and MXNet)
            return total.to(in_dtypes[0]).to(_FLOAT64) / count
        return total / count
    return lower


@lowers("softmax", "log_softmax", "softmin")
def _softmax(inst: Any, dtype: torch.dtype, in_dtypes: tuple) -> Callable[..., torch.Tensor]:
    fn, scale = (torch.log_softmax if inst._opdef.name == "log_softmax" else torch.softmax), inst._scale()

    def lower(x: torch.Tensor) -> torch.Tensor:  # in the wider of the input's and the result's dtype
        z = x.to(torch.promote_types(torch.promote_types(x.dtype, dtype), torch.float32))
        return fn(z if scale == 1.0 else z * scale, dim=inst.axis)
    return lower


@lowers("dot")
def _dot(inst: Any, dtype: torch.dtype, in_dtypes: tuple) -> Callable[..., torch.Tensor]:
    def lower(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a, b = a.to(dtype), b.to(dtype)
        out_l, k, out_r = inst._split(tuple(a.shape), tuple(b.shape))
        m, n = math.prod(out_l), math.prod(out_r)
        a = a.reshape((k, m) if inst.transpose_a else (m, k))
        b = b.reshape((n, k) if inst.transpose_b else (k, n))
        product = torch.matmul(a.T if inst.transpose_a else a, b.T if inst.transpose_b else b)
        return product.reshape(out_l + out_r if out_l or out_r else (1,))
    return lower


_NOT_ELEMENTWISE = frozenset(("sum", "mean", "square_sum", "softmax", "log_softmax", "softmin", "dot"))
_NO_GRADIENT = frozenset((
    "_equal_scalar", "_not_equal_scalar", "_greater_scalar", "_greater_equal_scalar", "_lesser_scalar",
    "_lesser_equal_scalar", "broadcast_equal", "broadcast_not_equal", "broadcast_greater",
    "broadcast_greater_equal", "broadcast_lesser", "broadcast_lesser_equal", "broadcast_logical_and",
    "broadcast_logical_or", "broadcast_logical_xor", "logical_not"))


def signature(opdef: registry.OpDef, params: dict, args: tuple) -> tuple[Callable[..., torch.Tensor], torch.dtype,
                                                                           tuple] | None:
    """(the function of the tensors computing the call, result torch dtype, result shape)
    of an all-dense call of ``opdef``'s lowering, from the op's own rules; None where they
    refuse it or its result is not one dense array (the general path then runs, and says
    what is wrong)."""
    try:
        inst = opdef.instance(params)
        dtypes = [numpy_dtype(a.dtype) for a in args]
        shapes = [tuple(a.shape) for a in args]
        if inst.output_count() != 1 or inst.infer_storage_type(*["default"] * len(args)) != ["default"]:
            return None
        (shape,), (dtype,) = inst.infer_shape(*shapes), inst.infer_type(*dtypes)
        out = torch_dtype(dtype)
        return _TABLE[opdef.name](inst, out, tuple(a.dtype for a in args)), out, tuple(shape)
    except Exception:  # noqa: BLE001 - any refusal: the general path raises it in the bridge's words
        return None
