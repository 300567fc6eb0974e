"""MXNet's Python custom operators, ``CustomOpProp`` and ``CustomOp``, as table entries.

``@sparse_ops.register(name)`` on a ``CustomOpProp`` subclass builds an ``Op`` adapter
(``op_class_for_prop``) so the op lives in the same table, runs through the same invoke
path (always storage-aware: it receives containers of whatever storage type its
``infer_storage_type`` accepts) and records on the same tape. Semantics follow MXNet
1.x and its ``custom.cc``: keyword arguments reach the Prop as strings;
``create_operator`` runs once per device/shape/dtype signature and the operator is
reused; ``declare_backward_dependency`` decides what the tape keeps;
``infer_storage_type_backward`` decides the gradients' storage types; auxiliary states
are inputs mutated in place that get no gradient, and backward always receives them
(the arrays themselves, whatever ``declare_backward_dependency`` says), as in MXNet.
"""
from __future__ import annotations

import threading
from typing import Any

import numpy as np

from .creation import array, zeros
from .dispatch import accumulate_into, invoke
from .errors import OperatorError
from .ndarray import NDArray, take_storage
from .registry import Op, add_class_adapter, get_op, kernel
from .tape import _scope, _state

_DEFAULT = "default"


class CustomOpProp:
    """Describes a custom operator: its inputs, outputs and inference rules, and creates
    the ``CustomOp`` that computes it. Subclass it and register with
    ``@sparse_ops.register(name)`` (or ``mx.operator.register``)."""

    def __init__(self, need_top_grad: bool = True) -> None:
        self.need_top_grad_ = need_top_grad

    def list_arguments(self) -> list[str]:
        return ["data"]

    def list_outputs(self) -> list[str]:
        return ["output"]

    def list_auxiliary_states(self) -> list[str]:
        return []

    def infer_shape(self, in_shape: list) -> tuple:
        return in_shape, (in_shape[0],) * len(self.list_outputs()), ()

    def infer_type(self, in_type: list) -> tuple:
        return (in_type, [in_type[0]] * len(self.list_outputs()),
                [in_type[0]] * len(self.list_auxiliary_states()))

    def infer_storage_type(self, in_stype: list) -> tuple:
        for i, stype in enumerate(in_stype):
            if stype != _DEFAULT:
                raise OperatorError(
                    "Default infer_storage_type implementation doesnt allow non default stypes: "
                    f"found non default stype '{stype}' for in_stype[{i}]. Please implement "
                    "infer_storage_type and infer_storage_type_backward interface in your custom "
                    "operator if you have non-default input/output stypes"
                )
        return (in_stype, [_DEFAULT] * len(self.list_outputs()),
                [_DEFAULT] * len(self.list_auxiliary_states()))

    def infer_storage_type_backward(self, ograd_stype: list, in_stype: list, out_stype: list,
                                    igrad_stype: list, aux_stype: list) -> tuple:
        for what, stypes in (("ograd_stype", ograd_stype), ("in_stype", in_stype), ("out_stype", out_stype),
                             ("aux_stype", aux_stype)):
            for i, stype in enumerate(stypes):
                if stype != _DEFAULT:
                    raise OperatorError(
                        "Default infer_storage_type_backward implementation doesnt allow non default "
                        f"stypes: found non default stype '{stype}' for {what}[{i}]. Please implement "
                        "infer_storage_type and infer_storage_type_backward interface in your custom "
                        "operator if you have non-default output gradient, input, output or aux stypes"
                    )
        return ograd_stype, in_stype, out_stype, [_DEFAULT] * len(igrad_stype), aux_stype

    def declare_backward_dependency(self, out_grad: list, in_data: list, out_data: list) -> list:
        deps = list(out_grad) if self.need_top_grad_ else []
        return deps + list(in_data) + list(out_data)

    def create_operator(self, ctx: Any, in_shapes: list, in_dtypes: list) -> "CustomOp":
        return CustomOp()


class CustomOp:
    """Computes a custom operator: ``forward`` and ``backward`` write their results with
    ``assign``, which honours the request (``write``, ``inplace``, ``add``, ``null``)."""

    def forward(self, is_train: bool, req: list, in_data: list, out_data: list, aux: list) -> None:
        raise NotImplementedError

    def backward(self, req: list, out_grad: list, in_data: list, out_data: list, in_grad: list,
                 aux: list) -> None:
        raise NotImplementedError

    def assign(self, dst: Any, req: str, src: Any) -> None:
        """Write ``src`` into ``dst`` (any storage types) as ``req`` asks."""
        if req == "null":
            return
        if req in ("write", "inplace"):
            dst[:] = src
        elif req == "add":
            accumulate_into(dst, src if hasattr(src, "stype") else array(src, dtype=dst.dtype))
        else:
            raise ValueError(f"unknown req {req!r}")


def _label(opdef: Any) -> str:
    return f"custom operator {opdef.name!r}" + (f" (plugin {opdef.plugin})" if opdef.plugin else "")


def op_class_for_prop(name: str, prop_cls: type) -> type:
    """An ``Op`` subclass running the MXNet-form operator ``prop_cls``."""

    class CustomAdapter(Op):
        __doc__ = prop_cls.__doc__ or f"Custom operator {name} ({prop_cls.__name__})."
        variadic = True
        arguments = ("data",)
        # how the CustomOp's own code sees its arrays, whichever face calls the op: None, as
        # they come; else a function giving each one's ``twin`` of the registering face's class
        # (the MXNet face's: ``sum()`` of shape (1,), ...), what the code sets on a twin given back
        array_form: Any = None

        def _forms(self, arrays: list) -> list:
            form = self.array_form
            return list(arrays) if form is None else [form(x) for x in arrays]

        @classmethod
        def from_params(cls, opdef: Any, kwargs: dict) -> "CustomAdapter":
            inst = object.__new__(cls)
            try:
                inst.prop = prop_cls(**{k: str(v) for k, v in kwargs.items()})
                inst.args = list(inst.prop.list_arguments())
                inst.outs = list(inst.prop.list_outputs())
                inst.auxs = list(inst.prop.list_auxiliary_states())
                n_out_ids, n_args = len(inst.outs), len(inst.args)
                ids = list(range(2 * n_out_ids + n_args))
                deps = set(inst.prop.declare_backward_dependency(
                    ids[:n_out_ids], ids[n_out_ids:n_out_ids + n_args], ids[n_out_ids + n_args:]))
            except OperatorError:
                raise
            except Exception as exc:
                raise OperatorError(f"{_label(opdef)}: creating {prop_cls.__name__} failed: "
                                    f"{type(exc).__name__}: {exc}") from exc
            # MXNet hands the auxiliary states to backward whatever the declared dependency:
            # they are always kept (the very arrays, so backward sees what forward wrote)
            inst.keep_in = tuple(i for i in range(n_args) if n_out_ids + i in deps) + \
                tuple(range(n_args, n_args + len(inst.auxs)))
            inst.keep_out = tuple(i for i in range(n_out_ids) if n_out_ids + n_args + i in deps)
            inst.params = dict(kwargs)
            inst.operators = {}
            inst.backward_plans = {}  # backward signature -> what _backward_plan works out
            inst.lock = threading.Lock()
            return inst

        def output_count(self) -> int:
            return len(self.outs)

        def visible_output_count(self) -> int:
            return len(self.outs)

        def kept_for_backward(self):
            return self.keep_in, self.keep_out

        def output_names(self) -> tuple[str, ...]:
            return tuple(self.outs)

        def params_dict(self) -> dict:
            return dict(self.params)

        def _split(self, values: list, what: str) -> tuple[list, list]:
            n_args, n_aux = len(self.args), len(self.auxs)
            if len(values) != n_args + n_aux:
                names = ", ".join(self.args + self.auxs)
                raise ValueError(f"expects {n_args + n_aux} inputs ({names}), got {len(values)}")
            return list(values[:n_args]), list(values[n_args:])

        def _checked(self, what: str, given: list, returned: Any, names: list) -> None:
            if returned is None:
                return
            returned = list(returned)
            if len(returned) != len(given):
                raise ValueError(f"infer_{what} returned {len(returned)} input {what}s for {len(given)} inputs")
            for n, g, r in zip(names, given, returned):
                if _norm(what, g) != _norm(what, r):
                    raise ValueError(f"{what} of argument {n!r} is {g} but infer_{what} requires {r}")

        def infer_shape(self, *shapes):
            args, aux = self._split(list(shapes), "shape")
            in_s, out_s, aux_s = (list(x) for x in _three(self.prop.infer_shape([list(s) for s in args] +
                                                                               [list(s) for s in aux])))
            self._checked("shape", [tuple(s) for s in args], [tuple(s) for s in in_s[:len(args)]], self.args)
            return [tuple(int(d) for d in s) for s in out_s]

        def infer_type(self, *dtypes):
            args, aux = self._split(list(dtypes), "type")
            in_t, out_t, aux_t = _three(self.prop.infer_type([d.type for d in args] + [d.type for d in aux]))
            self._checked("type", args, list(in_t)[:len(args)], self.args)
            return [np.dtype(t) for t in out_t]

        def infer_storage_type(self, *stypes):
            args, aux = self._split(list(stypes), "storage_type")
            in_s, out_s, aux_s = _three(self.prop.infer_storage_type(list(args) + list(aux)))
            self._checked("storage_type", args, list(in_s)[:len(args)], self.args)
            return list(out_s)

        def operator(self, device: Any, shapes: list, dtypes: list) -> CustomOp:
            """The CustomOp for this device and input signature, created once and reused."""
            key = (device, tuple(shapes), tuple(dtypes))
            op = self.operators.get(key)
            if op is None:
                with self.lock:
                    op = self.operators.get(key)
                    if op is None:
                        op = self.prop.create_operator(device, [list(s) for s in shapes], [d.type for d in dtypes])
                        self.operators[key] = op
            return op

        @kernel(device=("cpu", "gpu"), stypes=("...",))
        def compute(self, ctx, *arrays):
            n_args, n_in = len(self.args), len(self.args) + len(self.auxs)
            op = ctx.state.get("custom_op")  # a plan's contexts see one input signature: one CustomOp
            if op is None:
                op = ctx.state["custom_op"] = self.operator(ctx.device, [x.shape for x in arrays[:n_in]],
                                                            [x.dtype for x in arrays[:n_in]])
            forms = self._forms(arrays)
            try:
                with _scope(False, None):  # imperative code, unrecorded (as MXNet runs it): the call is the node
                    op.forward(is_train=ctx.is_train, req=["write"] * (len(arrays) - n_in), in_data=forms[:n_args],
                               out_data=forms[n_in:], aux=forms[n_args:n_in])
            except OperatorError:
                raise
            except Exception as exc:
                raise _user_code_error(self._opdef, op, "forward", exc) from exc
            for x, form in zip(arrays[n_args:], forms[n_args:]):  # the aux states and outputs it wrote
                take_storage(x, form)

        def _backward_plan(self, device: Any, out_grads: list, inputs: list, outputs: list) -> tuple:
            """(CustomOp, out_grad storage types, in_grad storage types) of one backward
            signature, worked out once: the prop's backward storage inference is asked once
            per combination of storage types."""
            key = (device, _state.training)
            for x in (*out_grads, *inputs, *outputs):  # storage type, dtype, shape
                key += (_DEFAULT, x._data.dtype, x._data.shape) if x.__class__ is NDArray else \
                    (x.stype, x.dtype, x.shape)
            found = self.backward_plans.get(key)
            if found is None:
                args, aux = inputs[:len(self.args)], inputs[len(self.args):]
                ograd_st, _, _, igrad_st, _ = _five(self.prop.infer_storage_type_backward(
                    [g.stype for g in out_grads], [x.stype for x in args], [y.stype for y in outputs],
                    [_DEFAULT] * len(args), [a.stype for a in aux]))
                op = self.operator(device, [x.shape for x in inputs], [x.dtype for x in inputs])
                found = self.backward_plans[key] = (op, list(ograd_st), list(igrad_st))
            return found

        gradient_not_recorded = ("it comes from the CustomOp's backward, imperative code the engine does not "
                                 "record, so it has no derivative (no second derivative, no forward mode: jvp, "
                                 "jacfwd, hessian); an op declared with gradient() made of operators has them")

        def gradient(self, out_grads, inputs, outputs):
            n_args = len(self.args)
            args, aux = inputs[:n_args], inputs[n_args:]
            device = out_grads[0].device
            op, ograd_st, igrad_st = self._backward_plan(device, out_grads, inputs, outputs)
            out_grads = [g if g.stype == s else g.tostype(s) for g, s in zip(out_grads, ograd_st)]
            out_grads = self._forms(out_grads) if self.prop.need_top_grad_ else \
                [_Missing(g, "out_grad") for g in out_grads]
            in_grad = [_zeros_like(x, s, device) for x, s in zip(args, igrad_st)]
            ins, outs, grads, states = (self._forms(a) for a in (args, outputs, in_grad, aux))
            try:
                with _scope(False, None):  # imperative code the graph does not record (gradient_not_recorded)
                    op.backward(req=["write"] * n_args, out_grad=out_grads, in_data=ins, out_data=outs,
                                in_grad=grads, aux=states)
            except OperatorError:
                raise
            except Exception as exc:
                raise _user_code_error(self._opdef, op, "backward", exc) from exc
            for x, form in zip([*in_grad, *aux], [*grads, *states]):
                take_storage(x, form)
            return in_grad + [None] * len(aux)

    CustomAdapter.__name__ = CustomAdapter.__qualname__ = f"Custom[{name}]"
    CustomAdapter.prop_class = prop_cls
    # what opcheck and `sparse-ops check` read, declared on the prop as on a kernel-first op:
    # samples, the checks skipped (with why), a NumPy reference (called on the prop)
    if hasattr(prop_cls, "samples"):
        CustomAdapter.samples = prop_cls.samples
    if getattr(prop_cls, "opcheck_skip", None):
        CustomAdapter.opcheck_skip = dict(prop_cls.opcheck_skip)
    if callable(getattr(prop_cls, "reference", None)):
        def reference(self, *arrays: np.ndarray) -> Any:
            return self.prop.reference(*arrays)

        CustomAdapter.reference = reference
    return CustomAdapter


def _user_code_error(opdef: Any, op: CustomOp, method: str, exc: Exception) -> OperatorError:
    """The error of a CustomOp's own ``forward`` or ``backward`` raising: the op (and its
    plugin), the user's class and method, where it was defined, and what it raised."""
    fn = getattr(type(op), method, None)
    code = getattr(fn, "__code__", None)
    where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
    return OperatorError(f"{opdef.label}: {type(op).__qualname__}.{method}{where} raised "
                         f"{type(exc).__name__}: {exc}")


def _zeros_like(x: Any, stype: str, device: Any) -> Any:
    """A zero gradient buffer for input ``x`` in storage type ``stype``."""
    if stype == _DEFAULT and device.device_type == "cpu":
        if x.__class__ is NDArray:
            return NDArray(np.zeros(x._data.shape, dtype=x._data.dtype), device)
        return NDArray(np.zeros(x.shape, dtype=x.dtype), device)
    return zeros(x.shape, stype=stype, dtype=x.dtype, device=device)


class _Missing:
    """Stands for an array the op said it does not need (``need_top_grad=False``)."""

    def __init__(self, like: Any, what: str) -> None:
        self.shape, self.dtype, self.stype = like.shape, like.dtype, like.stype
        self._what = what

    def __getattr__(self, name: str) -> Any:
        raise OperatorError(f"backward read {self._what}, which declare_backward_dependency did not ask for")


def _norm(what: str, v: Any) -> Any:
    if what == "type":
        return np.dtype(v)
    if what == "shape":
        return tuple(int(d) for d in v)
    return v


def _three(t: Any) -> tuple:
    t = tuple(t)
    if len(t) == 2:
        t = t + ((),)
    if len(t) != 3:
        raise ValueError(f"an inference method must return (inputs, outputs, aux), got {len(t)} items")
    return t


def _five(t: Any) -> tuple:
    t = tuple(t)
    if len(t) != 5:
        raise ValueError(f"infer_storage_type_backward must return 5 lists, got {len(t)}")
    return t


def Custom(*inputs: Any, op_type: str, name: str | None = None, out: Any = None, **params: Any) -> Any:
    """Run the registered operator ``op_type`` (either form) on ``inputs``; ``name`` labels
    the call, as in MXNet, and is otherwise unused."""

    return invoke(get_op(op_type), inputs, params, out)


def _adapt_prop(name: str, cls: type) -> type | None:
    """``register``'s hook for the MXNet form: the ``Op`` adapter of a ``CustomOpProp`` subclass."""
    return op_class_for_prop(name, cls) if issubclass(cls, CustomOpProp) else None


add_class_adapter(_adapt_prop)  # registry never imports this module: the MXNet form hooks in
