"""Registered operators called the MXNet 1.x way.

MXNet's generated functions differ from sparse-ops' ``op_function`` in five ways, all
bridged here: inputs may be passed by keyword (``FullyConnected(data=x, weight=w,
...)``), ``name=`` is accepted and ignored, ``ctx=`` names the device of creation ops,
no result is 0-d (a full reduction, ``mx.nd.sum(x)``, has shape ``(1,)``), and results
are the face's arrays (``as_face``: instances of ``mx.nd.NDArray`` and the face's sparse
classes, whose methods follow MXNet). Operators are looked up in the table at each call,
never at import, so this module imports while some built-in is missing and follows
``register(..., replace=True)``.
"""
from __future__ import annotations

import functools
import inspect
import numbers
from typing import Any, Callable

import numpy as np

from ....dispatch import invoke, plan_key
from ....errors import OperatorError, SparseFormatError
from ....ndarray import NDArray, twin
from ....registry import OpDef, Param, find_op, get_op
from ..base import MXNetArgumentError
from ....tape import is_recording

# MXNet spellings of operators registered here under another name.
ALIASES = {
    "ElementWiseSum": "add_n",
    "Concat": "concat",
    "SliceChannel": "split",
    "Reshape": "reshape",
    "Flatten": "flatten",
    "broadcast_plus": "broadcast_add",
    "broadcast_minus": "broadcast_sub",
    "sum_axis": "sum",
    "crop": "slice",
    "_square_sum": "square_sum",
    "linalg_potrf": "_linalg_potrf",
    "linalg_gemm2": "_linalg_gemm2",
    "linalg_trsm": "_linalg_trsm",
    "shuffle": "_shuffle",
    "Cast": "cast",
    "_copy": "identity",
    "stop_gradient": "BlockGrad",
    "Softmax": "SoftmaxOutput",
    "max_axis": "max",
    "min_axis": "min",
    "flip": "reverse",
    "SwapAxis": "swapaxes",
    "broadcast_axes": "broadcast_axis",
    "Pad": "pad",
    "_crop_assign": "_slice_assign",
    "_crop_assign_scalar": "_slice_assign_scalar",
}
_SPARSE_PREFIX = "_sparse_"  # MXNet's mx.nd.sparse.* ops are registered as _sparse_<name>


def resolve(name: str) -> str | None:
    """The operator name in our table for MXNet's ``name``; None if there is none."""
    for candidate in (ALIASES.get(name, name),
                      name[len(_SPARSE_PREFIX):] if name.startswith(_SPARSE_PREFIX) else None):
        if candidate is None:
            continue
        try:
            get_op(candidate)
        except OperatorError:
            continue
        return candidate
    return None


def split_call(opdef: OpDef, args: tuple, kwargs: dict[str, Any], fname: str) -> tuple[list, dict]:
    """(inputs, params) from an MXNet-style call: positional inputs then parameters in
    declaration order; inputs may also come by keyword (a keyword input set to None is
    skipped, as MXNet does for an optional input such as ``bias``)."""
    names = opdef.arguments
    if opdef.variadic:
        n = 0
        while n < len(args) and isinstance(args[n], NDArray):
            n += 1
        inputs, extra = list(args[:n]), args[n:]
        for a in names:
            v = kwargs.pop(a, None)
            if v is not None:
                inputs.append(v)
    else:
        inputs, extra = list(args[:len(names)]), args[len(names):]
        for a in names[:len(inputs)]:
            if a in kwargs:
                raise MXNetArgumentError(f"{fname}() got input {a!r} both by position and by keyword")
        for a in names[len(inputs):]:
            if a not in kwargs:
                raise MXNetArgumentError(f"{fname}() missing input {a!r} (inputs: {', '.join(names)})")
            inputs.append(kwargs.pop(a))
    pnames = list(opdef.params)
    if len(extra) > len(pnames):
        raise MXNetArgumentError(f"{fname}() got {len(extra)} positional parameter values; "
                        f"parameters: {', '.join(pnames) or 'none'}")
    params = dict(zip(pnames, extra))
    for k in params:
        if k in kwargs:
            raise MXNetArgumentError(f"{fname}() got parameter {k!r} twice")
    params.update(kwargs)
    if getattr(opdef.cls, "from_params", None) is None:  # (a CustomOp takes any keyword: its own parameters)
        unknown = [k for k in params if k not in opdef.params]
        if unknown:
            raise MXNetArgumentError(f"{fname}() got unexpected argument(s) {', '.join(map(repr, unknown))}; "
                                     f"parameters: {', '.join(pnames) or 'none'}")
    return inputs, params


# library class -> the face's subclass of it (filled by ndarray.py and sparse.py at import)
FACE_CLASSES: dict[type, type] = {}


def as_face(result: Any) -> Any:
    """``result`` (an array, or a list or tuple of them) as the face's arrays: a library
    array of a class the face subclasses becomes an instance of that subclass, in place
    (the classes add no storage, so this is O(1)). Only for results the face made."""
    cls = FACE_CLASSES.get(result.__class__)
    if cls is not None:
        result.__class__ = cls
    elif isinstance(result, (list, tuple)):
        for r in result:
            as_face(r)
    return result


def face_form(x: NDArray) -> NDArray:
    """``x`` as the face's array for user code the face runs (a CustomOp's ``forward`` and
    ``backward``, whichever face calls the op): ``x`` itself when it is one, else its twin of
    the face's class, sharing its storage (``ndarray.twin``; what the code sets on the twin,
    the caller gives back with ``take_storage``)."""
    cls = FACE_CLASSES.get(x.__class__)
    return x if cls is None else twin(x, cls)


def no_scalar_shape(result: Any) -> Any:
    """MXNet 1.x has no 0-d arrays: a 0-d result becomes shape (1,) (through ``reshape``,
    so autograd sees it)."""
    if isinstance(result, list):
        return [no_scalar_shape(r) for r in result]
    if isinstance(result, NDArray) and not result.shape:
        if type(result) is NDArray and result._ag is None and not is_recording():
            return NDArray(result._data.reshape(1), result._device)  # nothing to record: a view
        return invoke(get_op("reshape"), [result], {"shape": (1,)})
    return result


# MXNet's integer dtypes the library does not hold (the face's arrays do: ndarray.EXTRA_DTYPES)
_NARROW = (np.dtype(np.int8), np.dtype(np.uint8))
# which output an op's ``dtype=`` parameter types, where it is not the first
_DTYPE_OUTPUT: dict[str, Callable[[dict], int]] = {"topk": lambda p: 1 if p.get("ret_typ") == "both" else 0}


def _run(opdef: OpDef, inputs: list, params: dict[str, Any], out: Any) -> Any:
    """``invoke`` with MXNet's ``dtype='int8'`` / ``'uint8'`` (``cast``, ``one_hot``, ``topk``,
    ``argsort``, ``random.multinomial``): the op computes int32, then that output becomes
    the narrow dtype as ``astype`` makes it (values wrap as a C cast does)."""
    narrow = None
    if "dtype" in opdef.params and params.get("dtype") is not None:
        try:
            narrow = np.dtype(params["dtype"])
        except TypeError:
            pass
    choices = opdef.params["dtype"].choices if narrow is not None else None
    if narrow not in _NARROW or (choices is not None and "int32" not in choices):
        return invoke(opdef, inputs, params, out)  # (an op taking no integer dtype refuses the narrow one by name)
    result = invoke(opdef, inputs, {**params, "dtype": "int32"})
    k = _DTYPE_OUTPUT.get(opdef.name, lambda p: 0)(params)
    results = list(result) if isinstance(result, (list, tuple)) else [result]
    results[k] = results[k]._with_values(results[k]._data.astype(narrow), copy_aux=True)
    result = results if isinstance(result, (list, tuple)) else results[0]
    if out is None:
        return result
    for o, r in zip(out if isinstance(out, (list, tuple)) else [out], results):
        o[:] = r
    return out


def call(name: str, inputs: list, params: dict[str, Any] | None = None, out: Any = None) -> Any:
    """Run operator ``name`` (looked up now) with MXNet's result shapes; results are the
    face's arrays (``out``, when given, is returned as it is)."""
    result = no_scalar_shape(_run(get_op(name), inputs, params or {}, out))
    return result if out is not None else as_face(result)


_NO_PLAN = object()


def make_function(mx_name: str, target: str) -> Callable[..., Any]:
    """MXNet's function ``mx_name`` for our operator ``target``."""

    face_dense = FACE_CLASSES.get(NDArray, NDArray)  # filled when the face's classes were defined

    def fn(*args: Any, **kwargs: Any) -> Any:
        opdef = find_op(target) or get_op(target)  # get_op raises naming an op that is gone
        if not kwargs and not opdef.variadic:
            res = _NO_PLAN
            if len(args) == len(opdef.arguments):  # a repeated call: its plan, as the native function's fast path
                try:
                    plan = opdef.plans.get(plan_key(opdef._default_instance, args))
                except (AttributeError, SparseFormatError):  # not NDArrays, a malformed input: the
                    plan = None                                  # native function says so
                if plan is not None:
                    res = plan.call(args, None, "write")
            # (fewer than its inputs, or more than inputs and parameters: split_call refuses them)
            fits = len(opdef.arguments) <= len(args) <= len(opdef.arguments) + len(opdef.params)
            if res is _NO_PLAN and opdef.function is not None and fits:  # inputs, then parameters, by position
                res = opdef.function(*args)
            if res.__class__ is NDArray:  # then MXNet's no-0-d rule, and the face's class
                d = res._data
                if d.ndim:
                    res.__class__ = face_dense
                    return res
                if res._ag is None and not is_recording():
                    res._data = d.reshape(1)  # a fresh result nobody else holds: reshaped in place
                    res.__class__ = face_dense
                    return res
            if res is not _NO_PLAN:
                return as_face(no_scalar_shape(res))
        out, ctx = kwargs.pop("out", None), kwargs.pop("ctx", None)
        kwargs.pop("name", None)  # MXNet's symbol name: nothing to name here
        if out is not None and not kwargs and ctx is None and not opdef.variadic and opdef.function is not None:
            return no_scalar_shape(opdef.function(*args, out=out))
        inputs, params = split_call(opdef, args, kwargs, mx_name)
        if ctx is not None:
            if "device" not in opdef.params:
                raise MXNetArgumentError(f"{mx_name}() takes no ctx argument")
            params["device"] = ctx
        result = no_scalar_shape(_run(opdef, inputs, params, out))
        return result if out is not None else as_face(result)

    if target == "dot":
        fn = _dense_csr_product(fn)
    fn.__name__ = fn.__qualname__ = mx_name
    fn.__doc__ = f"MXNet's ``{mx_name}``: operator ``{target}``.\n\n{get_op(target).describe()}"
    return fn


def _dense_csr_product(fn: Callable[..., Any]) -> Callable[..., Any]:
    """MXNet 1.9's ``dot`` of two csr arrays is dense (it densified them): the native csr
    product (SpGEMM) is asked for a dense output, unless ``forward_stype`` is given."""

    def dot(*args: Any, **kwargs: Any) -> Any:
        lhs = args[0] if args else kwargs.get("lhs")
        rhs = args[1] if len(args) > 1 else kwargs.get("rhs")
        if (getattr(lhs, "stype", None) == "csr" and getattr(rhs, "stype", None) == "csr"
                and kwargs.get("forward_stype") is None):
            kwargs["forward_stype"] = "default"
        return fn(*args, **kwargs)

    return dot


def function(name: str) -> Callable[..., Any]:
    """The MXNet-convention function of operator ``name``; AttributeError if unknown
    (this backs a module ``__getattr__``)."""
    target = None if name.startswith("__") else resolve(name)
    if target is None:
        raise AttributeError(f"no operator or attribute named {name!r}")
    return make_function(name, target)


_functions: dict[str, Callable[..., Any]] = {}


def cached_function(name: str) -> Callable[..., Any]:
    """``function(name)``, made once. Kept out of the modules' globals on purpose: a cached
    ``sum`` or ``abs`` there would shadow the builtin for the module's own code."""
    fn = _functions.get(name)
    if fn is None:
        fn = _functions.setdefault(name, function(name))
    return fn


def ufunc(lhs: Any, rhs: Any, array_op: str, scalar_fn: Callable[[Any, Any], Any], lscalar_op: str,
          rscalar_op: str | None = None, same_shape_op: str | None = None) -> Any:
    """MXNet's ``_ufunc_helper``: two arrays use ``array_op`` (``same_shape_op`` when the
    shapes agree and one is given), an array and a real scalar the scalar op
    (``rscalar_op`` for scalar ∘ array when the operation is not symmetric), two scalars
    plain Python."""
    lnum, rnum = isinstance(lhs, numbers.Real), isinstance(rhs, numbers.Real)
    if lnum and rnum:
        return scalar_fn(lhs, rhs)
    if lnum and isinstance(rhs, NDArray):
        return call(rscalar_op or lscalar_op, [rhs], {"scalar": float(lhs)})
    if rnum and isinstance(lhs, NDArray):
        return call(lscalar_op, [lhs], {"scalar": float(rhs)})
    if isinstance(lhs, NDArray) and isinstance(rhs, NDArray):
        name = same_shape_op if same_shape_op is not None and lhs.shape == rhs.shape else array_op
        return call(name, [lhs, rhs])
    raise MXNetArgumentError(f"{array_op}: type {type(lhs).__name__} and {type(rhs).__name__} are not supported "
                              "(arguments lhs, rhs)")


def known_names() -> list[str]:
    """Every name the ``__getattr__`` of ``mx.nd`` resolves (for ``dir``)."""
    from ....registry import list_ops

    names = set(list_ops())
    names.update(a for a, t in ALIASES.items() if t in names)
    return sorted(names)


def mxnet_call(**params: Param) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A face function called as MXNet's operators are: its arguments bound as Python binds
    them, a missing or unknown one an ``MXNetArgumentError`` naming the function; the
    parameters in ``params`` read by their ``Param`` as a registered operator's are (MXNet
    hands every keyword on as a string: ``'False'`` and ``'0'`` are false), a value that does
    not read a ``ParameterError`` naming the function and the argument; and a refusal of an
    operator the function runs for the user worded as the function's."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        signature, fname = inspect.signature(fn), fn.__name__
        for name, p in params.items():
            p.name = name

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError as exc:
                raise MXNetArgumentError(f"{fname}: {exc}") from None
            given = bound.arguments
            for name, p in params.items():
                if name in given:
                    given[name] = p.parse(given[name], fname)
            try:
                return fn(*bound.args, **bound.kwargs)
            except OperatorError as exc:  # an operator it ran refused: the user called fname
                if exc.args and isinstance(exc.args[0], str) and not exc.args[0].startswith(fname):
                    exc.args = (f"{fname}: {exc.args[0]}", *exc.args[1:])
                raise

        return call

    return wrap
