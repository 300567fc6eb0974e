"""``mx.optimizer``: MXNet 1.9's optimizers and updater over sparse-ops' update operators.

``SGD`` (momentum, ``lazy_update``; ``ccSGD``), ``NAG``, ``Signum``, ``Adam`` (``lazy_update``),
``AdaGrad``, ``RMSProp`` (plain and centered), ``Ftrl`` (also ``FTRL``), ``FTML``, ``LAMB``,
``SGLD``, ``Adamax``, ``Nadam``, ``AdaDelta``, ``DCASGD``; ``create`` /
``Optimizer.create_optimizer`` by case-insensitive name, ``register`` for user classes,
``Updater`` / ``get_updater`` (one state per index, ``get_states`` / ``set_states`` as
pickled bytes, ``sync_state_context``). Each ``update`` calls the built-in operator MXNet's
optimizer calls (``sgd_update``, ``adam_update``, ``ftrl_update``, ...) with MXNet's
arguments, so rescale_grad, clip_gradient (off when ``None`` or 0), weight decay,
``lr_mult`` / ``wd_mult`` and the learning-rate schedule apply as in MXNet.

Sparse semantics (dense weights, row_sparse gradients): ``SGD``, ``Adam`` and ``Ftrl`` with
``lazy_update=True`` and ``AdaGrad`` always touch only the rows the gradient stores (weight,
states and weight decay elsewhere are left alone); ``lazy_update=False`` is the dense update,
as is every update of ``NAG``, ``Signum`` and ``RMSProp`` (MXNet has only dense kernels for
them). ``multi_precision=True`` keeps a float32 master copy of a float16 weight; the update
runs on it and the weight receives its cast.

A row_sparse weight gets MXNet's state storage types: row_sparse states for ``SGD`` and
``Adam`` with ``lazy_update=True`` (dense without), and always for ``AdaGrad``, ``Ftrl``,
``RMSProp``, ``Signum`` and ``LAMB``. Where MXNet has a sparse kernel (SGD, Adam, AdaGrad,
Ftrl) row_sparse states make the update lazy, only the gradient's rows changing, in time that
follows those rows; the others take MXNet's storage fallback (the dense update, weight and
states written back in their storage types), as does a csr weight.

States are NDArrays in the weight's dtype (MXNet makes AdaGrad's, RMSProp's, Ftrl's and
AdaDelta's float32 whatever the weight: a float64 weight there fails MXNet's own type check).
``get_states`` / ``set_states`` use ``pickle``, as MXNet does: load states only from a source
you trust. Bad arguments raise ``OptimizerError`` (``MXNetError`` and ``ValueError``) or
``OptimizerTypeError`` (``MXNetError`` and ``TypeError``), naming the optimizer and the
argument.
"""
from __future__ import annotations

import math
import numbers
import os
import pickle
import warnings
from typing import Any

import numpy as np

from ... import ops as _ops
from ...ndarray import NDArray
from .base import MXNetError
from . import ndarray as nd
from .ndarray import zeros

__all__ = ["Optimizer", "SGD", "NAG", "Signum", "Adam", "AdaGrad", "GroupAdaGrad", "contrib", "RMSProp", "Ftrl", "FTRL", "FTML", "LAMB",
           "SGLD", "Adamax", "Nadam", "AdaDelta", "DCASGD", "ccSGD", "Updater", "get_updater", "create", "register",
           "OptimizerError", "OptimizerTypeError"]


class OptimizerError(MXNetError, ValueError):
    """An optimizer argument has a value the optimizer cannot take, or no such optimizer."""


class OptimizerTypeError(MXNetError, TypeError):
    """An optimizer argument has the wrong type."""


class LRSchedulerConflict(MXNetError, UserWarning):
    """``set_learning_rate`` on an optimizer that follows an ``lr_scheduler`` (MXNet raises
    ``UserWarning`` here; this is one, and an ``MXNetError``)."""


def _need_real(owner: str, name: str, value: Any, optional: bool = False) -> None:
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise OptimizerTypeError(f"{owner}: {name} must be a number{' or None' if optional else ''}, "
                                 f"got {type(value).__name__} {value!r}")


def _need_array(owner: str, name: str, value: Any) -> None:
    if not isinstance(value, NDArray):
        raise OptimizerTypeError(f"{owner}.update: {name} must be an NDArray, got {type(value).__name__}")


def _clip_kwargs(kwargs: dict, clip_gradient: Any) -> dict:
    if clip_gradient:  # MXNet: None and 0 both mean no clipping
        kwargs["clip_gradient"] = clip_gradient
    return kwargs


class Optimizer:
    """The base of all optimizers (MXNet's constructor arguments and bookkeeping: update
    counts per index and per device, learning rate from ``learning_rate`` or
    ``lr_scheduler``, ``lr_mult`` / ``wd_mult`` by index or name)."""

    opt_registry: dict = {}

    def __init__(self, rescale_grad: float = 1., param_idx2name: dict | None = None, wd: float = 0.,
                 clip_gradient: float | None = None, learning_rate: float | None = None, lr_scheduler: Any = None,
                 sym: Any = None, begin_num_update: int = 0, multi_precision: bool = False,
                 param_dict: dict | None = None, **unknown: Any) -> None:
        owner = type(self).__name__
        if unknown:
            raise OptimizerTypeError(f"{owner}: unknown argument {sorted(unknown)[0]!r}")
        _need_real(owner, "rescale_grad", rescale_grad)
        _need_real(owner, "wd", wd)
        _need_real(owner, "clip_gradient", clip_gradient, optional=True)
        _need_real(owner, "learning_rate", learning_rate, optional=True)
        if lr_scheduler is not None and not callable(lr_scheduler):
            raise OptimizerTypeError(f"{owner}: lr_scheduler must be an LRScheduler, got {type(lr_scheduler).__name__}")
        if param_idx2name is None:
            param_idx2name = {}
        if not isinstance(param_idx2name, dict):
            raise OptimizerTypeError(f"{owner}: param_idx2name must be a dict of indexes to names, "
                                     f"got {type(param_idx2name).__name__}")
        self.rescale_grad = rescale_grad
        self.lr_scheduler = lr_scheduler
        if lr_scheduler is None and learning_rate is None:
            learning_rate = 0.01
        self.lr = learning_rate
        if lr_scheduler is not None and learning_rate is not None and lr_scheduler.base_lr != learning_rate:
            print(UserWarning("learning rate from ``lr_scheduler`` has been overwritten by ``learning_rate`` "
                              "in optimizer."))
            lr_scheduler.base_lr = learning_rate
        self.wd = wd
        self.lr_mult: dict = {}
        self.wd_mult: dict = {}
        self.begin_num_update = begin_num_update
        self.num_update = begin_num_update
        self._all_index_update_counts: dict = {0: {}}
        self._index_update_count = self._all_index_update_counts[0]
        self.clip_gradient = clip_gradient
        self.multi_precision = multi_precision
        self.aggregate_num = 0
        self.idx2name = param_idx2name.copy()
        self.sym_info = (sym.attr_dict(), sym.list_arguments()) if sym is not None else ()
        self.param_dict = param_dict if param_dict else {}
        self.allow_np_array = False
        self.set_lr_mult({})
        self.set_wd_mult({})

    # ---- registry -----------------------------------------------------------------------------
    @staticmethod
    def register(klass: type) -> type:
        """Register an optimizer class under its lower-cased name (a later class of the same
        name replaces the earlier one, with a warning)."""
        if not isinstance(klass, type):
            raise OptimizerTypeError(f"register: klass must be a class, got {type(klass).__name__}")
        name = klass.__name__.lower()
        if name in Optimizer.opt_registry:
            old = Optimizer.opt_registry[name]
            warnings.warn(f"WARNING: New optimizer {klass.__module__}.{klass.__name__} is overriding existing "
                          f"optimizer {old.__module__}.{old.__name__}")
        Optimizer.opt_registry[name] = klass
        return klass

    @staticmethod
    def create_optimizer(name: str, **kwargs: Any) -> "Optimizer":
        """An instance of the optimizer registered as ``name`` (case-insensitive)."""
        if not isinstance(name, str):
            raise OptimizerTypeError(f"create_optimizer: name must be a str, got {type(name).__name__}")
        klass = Optimizer.opt_registry.get(name.lower())
        if klass is None:
            raise OptimizerError(f"Cannot find optimizer {name} (name: registered ones are "
                                 f"{', '.join(sorted(Optimizer.opt_registry))})")
        return klass(**kwargs)

    # ---- learning rate and weight decay -----------------------------------------------------
    @property
    def learning_rate(self) -> float:
        return self.lr_scheduler(self.num_update) if self.lr_scheduler is not None else self.lr

    def set_learning_rate(self, lr: float) -> None:
        if self.lr_scheduler is not None:
            raise LRSchedulerConflict("LRScheduler of the optimizer has already been defined. Note that "
                                      "set_learning_rate can mutate the value of the learning rate of the "
                                      "optimizer only when the LRScheduler of the optimizer is undefined.")
        _need_real(type(self).__name__, "lr", lr)
        self.lr = lr

    def set_lr_scale(self, args_lrscale: Any) -> None:
        raise DeprecationWarning

    def set_lr_mult(self, args_lr_mult: dict) -> None:
        self.lr_mult = {}
        if self.sym_info:
            attr, arg_names = self.sym_info
            for name in arg_names:
                if name in attr and "__lr_mult__" in attr[name]:
                    self.lr_mult[name] = float(attr[name]["__lr_mult__"])
        self.lr_mult.update(args_lr_mult)

    def set_wd_mult(self, args_wd_mult: dict) -> None:
        """Parameters named in ``param_idx2name`` get no weight decay unless their name ends
        in ``_weight`` or ``_gamma`` (MXNet's rule); ``args_wd_mult`` overrides."""
        self.wd_mult = {}
        for n in self.idx2name.values():
            if not (n.endswith("_weight") or n.endswith("_gamma")):
                self.wd_mult[n] = 0.0
        if self.sym_info:
            attr, arg_names = self.sym_info
            for name in arg_names:
                if name in attr and "__wd_mult__" in attr[name]:
                    self.wd_mult[name] = float(attr[name]["__wd_mult__"])
        self.wd_mult.update(args_wd_mult)

    def _set_current_context(self, device_id: int) -> None:
        self._index_update_count = self._all_index_update_counts.setdefault(device_id, {})

    def _update_count(self, index: Any) -> None:
        for idx in index if isinstance(index, (list, tuple)) else [index]:
            count = self._index_update_count.get(idx, self.begin_num_update) + 1
            self._index_update_count[idx] = count
            self.num_update = max(count, self.num_update)

    def _mults(self, indices: list, base: float, mults: dict, attr: str) -> list:
        out = []
        for index in indices:
            v = base
            if index in self.param_dict:
                v *= getattr(self.param_dict[index], attr)
            elif index in mults:
                v *= mults[index]
            elif index in self.idx2name:
                v *= mults.get(self.idx2name[index], 1.0)
            out.append(v)
        return out

    def _get_lrs(self, indices: list) -> list:
        lr = self.lr_scheduler(self.num_update) if self.lr_scheduler is not None else self.lr
        return self._mults(indices, lr, self.lr_mult, "lr_mult")

    def _get_lr(self, index: Any) -> float:
        return self._get_lrs([index])[0]

    def _get_wds(self, indices: list) -> list:
        return self._mults(indices, self.wd, self.wd_mult, "wd_mult")

    def _get_wd(self, index: Any) -> float:
        return self._get_wds([index])[0]

    # ---- states and updates -------------------------------------------------------------------
    def create_state(self, index: Any, weight: NDArray) -> Any:
        """The state of one weight (None for none); called once per weight."""
        return None

    def create_state_multi_precision(self, index: Any, weight: NDArray) -> Any:
        """``(float32 master copy, state)`` for a float16 weight under ``multi_precision``,
        else ``create_state``."""
        if self.multi_precision and weight.dtype == np.float16:
            master = weight.astype(np.float32)
            return (master, self.create_state(index, master))
        self._warn_float16(weight)
        return self.create_state(index, weight)

    def _warn_float16(self, weight: NDArray) -> None:
        if weight.dtype == np.float16 and not self.multi_precision:
            warnings.warn("Accumulating with float16 in optimizer can lead to poor accuracy or slow convergence. "
                          f"Consider using multi_precision=True option of the {type(self).__name__} optimizer")

    def update(self, index: Any, weight: NDArray, grad: NDArray, state: Any) -> None:
        raise NotImplementedError()

    def update_multi_precision(self, index: Any, weight: NDArray, grad: NDArray, state: Any) -> None:
        """``update`` on the float32 master copy (with a float32 gradient), then the weight
        receives the master's values cast to float16."""
        if self.multi_precision and weight.dtype == np.float16:
            master, inner = state
            self.update(index, master, grad.astype(np.float32), inner)
            weight[:] = master
        else:
            self.update(index, weight, grad, state)

    def _check(self, weight: Any, grad: Any) -> None:
        owner = type(self).__name__
        _need_array(owner, "weight", weight)
        _need_array(owner, "grad", grad)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        del state["param_dict"]  # held by the trainer, not saved
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__ = state
        self.param_dict = {}


register = Optimizer.register
create = Optimizer.create_optimizer


class _MasterFirstMomentum(Optimizer):
    """SGD and NAG: MXNet keeps ``(momentum, float32 master)`` under multi_precision (the
    reverse of the base class's order) and runs its ``mp_*`` operators, which have no sparse
    kernel: a row_sparse gradient gets the dense update there, and so it does here."""

    def create_state_multi_precision(self, index: Any, weight: NDArray) -> Any:
        if self.multi_precision and weight.dtype == np.float16:
            master = weight.astype(np.float32)
            return (self.create_state(index, master), master)
        self._warn_float16(weight)
        return self.create_state(index, weight)

    def update(self, index: Any, weight: NDArray, grad: NDArray, state: Any) -> None:
        self._update_impl(index, weight, grad, state, multi_precision=False)

    def update_multi_precision(self, index: Any, weight: NDArray, grad: NDArray, state: Any) -> None:
        first = weight[0] if isinstance(index, (list, tuple)) else weight
        mp = self.multi_precision and first.dtype == np.float16 and isinstance(state if not isinstance(
            index, (list, tuple)) else state[0], (tuple, list))
        self._update_impl(index, weight, grad, state, multi_precision=mp)

    def _kwargs(self) -> dict:
        kwargs: dict = {"rescale_grad": self.rescale_grad}
        if self.momentum > 0:
            kwargs["momentum"] = self.momentum
        return _clip_kwargs(kwargs, self.clip_gradient)

    def _update_impl(self, index: Any, weight: Any, grad: Any, state: Any, multi_precision: bool) -> None:
        if isinstance(index, (list, tuple)):  # MXNet's aggregated form: lists of each
            indices, weights, grads, states = list(index), list(weight), list(grad), list(state)
        else:
            indices, weights, grads, states = [index], [weight], [grad], [state]
        for w, g in zip(weights, grads):
            self._check(w, g)
        self._update_count(indices)
        lrs, wds = self._get_lrs(indices), self._get_wds(indices)
        kwargs = self._kwargs()
        for w, g, s, lr, wd in zip(weights, grads, states, lrs, wds):
            if multi_precision:
                mom, master = s
                self._step(master, g.astype(np.float32), mom, lr, wd, kwargs, dense=True)
                w[:] = master
            else:
                self._step(w, g, s, lr, wd, kwargs, dense=False)

    def _step(self, w: NDArray, g: NDArray, mom: Any, lr: float, wd: float, kwargs: dict, dense: bool) -> None:
        raise NotImplementedError


def _state_stype(weight: NDArray, lazy_update: bool) -> str:
    """MXNet's storage type of a state of ``weight``: the weight's own for lazy updates (a
    row_sparse weight keeps row_sparse states, so only the gradient's rows change), else
    dense."""
    return weight.stype if lazy_update else "default"


@register
class SGD(_MasterFirstMomentum):
    """SGD with momentum and weight decay. Standard update::

        mom = momentum * mom - lr * (clip(rescale_grad * grad) + wd * weight); weight += mom

    (``weight = (1 - lr * wd) * weight - lr * clip(rescale_grad * grad)`` without momentum).
    With a row_sparse gradient and ``lazy_update=True`` only its rows change."""

    def __init__(self, momentum: float = 0.0, lazy_update: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _need_real("SGD", "momentum", momentum)
        self.momentum = momentum
        self.lazy_update = bool(lazy_update)

    def create_state(self, index: Any, weight: NDArray) -> Any:
        if self.momentum == 0.0:
            return None
        return zeros(weight.shape, weight.context, dtype=weight.dtype, stype=_state_stype(weight, self.lazy_update))

    def _step(self, w, g, mom, lr, wd, kwargs, dense):
        lazy = self.lazy_update and not dense
        if mom is not None:
            _ops.sgd_mom_update(w, g, mom, out=w, lazy_update=lazy, lr=lr, wd=wd, **kwargs)
        else:
            kw = {k: v for k, v in kwargs.items() if k != "momentum"}
            _ops.sgd_update(w, g, out=w, lazy_update=lazy, lr=lr, wd=wd, **kw)


@register
class NAG(_MasterFirstMomentum):
    """Nesterov accelerated gradient (``nag_mom_update``; ``sgd_update`` without momentum)."""

    def __init__(self, momentum: float = 0.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _need_real("NAG", "momentum", momentum)
        self.momentum = momentum

    def create_state(self, index: Any, weight: NDArray) -> Any:
        if self.momentum == 0.0:
            return None
        return zeros(weight.shape, weight.context, dtype=weight.dtype)

    def _step(self, w, g, mom, lr, wd, kwargs, dense):
        if mom is not None:
            _ops.nag_mom_update(w, g, mom, out=w, lr=lr, wd=wd, **kwargs)
        else:  # MXNet calls sgd_update with its default lazy_update=True (mp_sgd_update: dense)
            kw = {k: v for k, v in kwargs.items() if k != "momentum"}
            _ops.sgd_update(w, g, out=w, lazy_update=not dense, lr=lr, wd=wd, **kw)


@register
class Signum(Optimizer):
    """signSGD / Signum::

        mom = momentum * mom - (1 - momentum) * (wd * weight + clip(rescale_grad * grad))
        weight = (1 - lr * wd_lh) * weight + lr * sign(mom)

    (``signsgd_update`` when momentum is 0)."""

    def __init__(self, learning_rate: float = 0.01, momentum: float = 0.9, wd_lh: float = 0.0,
                 **kwargs: Any) -> None:
        super().__init__(learning_rate=learning_rate, **kwargs)
        _need_real("Signum", "momentum", momentum)
        _need_real("Signum", "wd_lh", wd_lh)
        self.momentum = momentum
        self.wd_lh = wd_lh

    def create_state(self, index: Any, weight: NDArray) -> Any:
        if self.momentum == 0.0:
            return None
        return zeros(weight.shape, weight.context, dtype=weight.dtype, stype=weight.stype)

    def update(self, index: Any, weight: NDArray, grad: NDArray, state: Any) -> None:
        self._check(weight, grad)
        self._update_count(index)
        lr, wd = self._get_lr(index), self._get_wd(index)
        kwargs: dict = {"rescale_grad": self.rescale_grad}
        if self.momentum > 0:
            kwargs["momentum"] = self.momentum
        _clip_kwargs(kwargs, self.clip_gradient)
        if self.wd_lh:
            kwargs["wd_lh"] = self.wd_lh
        if state is not None:
            _ops.signum_update(weight, grad, state, out=weight, lr=lr, wd=wd, **kwargs)
        else:
            kwargs.pop("momentum", None)
            kwargs.pop("wd_lh", None)
            _ops.signsgd_update(weight, grad, out=weight, lr=lr, wd=wd, **kwargs)


@register
class Adam(Optimizer):
    """Adam, the bias correction folded into the rate at step t (per index)::

        g = clip(rescale_grad * grad + wd * weight)
        mean = beta1 * mean + (1 - beta1) * g;  var = beta2 * var + (1 - beta2) * g**2
        weight -= lr * sqrt(1 - beta2**t) / (1 - beta1**t) * mean / (sqrt(var) + epsilon)

    With a row_sparse gradient and ``lazy_update=True`` only its rows change."""

    def __init__(self, learning_rate: float = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8, lazy_update: bool = True, **kwargs: Any) -> None:
        super().__init__(learning_rate=learning_rate, **kwargs)
        for name, v in (("beta1", beta1), ("beta2", beta2), ("epsilon", epsilon)):
            _need_real("Adam", name, v)
        if not 0.0 <= beta1 < 1.0:
            raise OptimizerError(f"Adam: beta1 must be in [0, 1), got {beta1}")
        if not 0.0 <= beta2 < 1.0:
            raise OptimizerError(f"Adam: beta2 must be in [0, 1), got {beta2}")
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon
        self.lazy_update = bool(lazy_update)

    def create_state(self, index: Any, weight: NDArray) -> Any:
        stype = _state_stype(weight, self.lazy_update)
        return (zeros(weight.shape, weight.context, dtype=weight.dtype, stype=stype),
                zeros(weight.shape, weight.context, dtype=weight.dtype, stype=stype))

    def update(self, index: Any, weight: NDArray, grad: NDArray, state: Any) -> None:
        self._check(weight, grad)
        self._update_count(index)
        lr, wd = self._get_lr(index), self._get_wd(index)
        t = self._index_update_count[index]
        lr *= math.sqrt(1.0 - self.beta2 ** t) / (1.0 - self.beta1 ** t)
        kwargs = _clip_kwargs({"beta1": self.beta1, "beta2": self.beta2, "epsilon": self.epsilon,
                               "rescale_grad": self.rescale_grad}, self.clip_gradient)
        mean, var = state
        _ops.adam_update(weight, grad, mean, var, out=weight, lazy_update=self.lazy_update, lr=lr, wd=wd, **kwargs)


@register
class AdaGrad(Optimizer):
    """AdaGrad::

        g = clip(rescale_grad * grad); history += g**2
        weight -= lr * (g / sqrt(history + eps) + wd * weight)

    A row_sparse gradient updates only its rows (MXNet's sparse adagrad, which refuses a
    non-zero wd; here wd applies to those rows)."""

    def __init__(self, eps: float = 1e-7, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _need_real("AdaGrad", "eps", eps)
        self.float_stable_eps = eps

    def create_state(self, index: Any, weight: NDArray) -> Any:
        return zeros(weight.shape, weight.context, dtype=weight.dtype, stype=weight.stype)  # history, as MXNet

    def update(self, index: Any, weight: NDArray, grad: NDArray, state: Any) -> None:
        self._check(weight, grad)
        self._update_count(index)
        lr, wd = self._get_lr(index), self._get_wd(index)
        kwargs: dict = {"epsilon": self.float_stable_eps, "rescale_grad": self.rescale_grad}
        if grad.stype == "row_sparse":
            _clip_kwargs(kwargs, self.clip_gradient)
        elif self.clip_gradient is not None:  # MXNet's dense path clips whenever it is given (0 included)
            kwargs["clip_gradient"] = self.clip_gradient
        _ops.adagrad_update(weight, grad, state, out=weight, lr=lr, wd=wd, **kwargs)


class GroupAdaGrad(Optimizer):
    """AdaGrad with one rate per row (``mx.optimizer.contrib.GroupAdaGrad``) for 2-d weights::

        g = clip(rescale_grad * grad); history += mean(g**2, axis=1, keepdims=True)
        weight -= lr * g / sqrt(history + eps)

    ``history`` has shape (rows, 1) and the weight's storage type; a row_sparse gradient
    updates only its rows. Weight decay is refused, as MXNet's assertion refuses it."""

    def __init__(self, eps: float = 1e-5, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _need_real("GroupAdaGrad", "eps", eps)
        self.float_stable_eps = eps

    def create_state(self, index: Any, weight: NDArray) -> Any:
        if len(weight.shape) != 2:
            raise OptimizerError(f"GroupAdaGrad updates 2-d weights (rows, d), got shape {weight.shape}")
        return zeros((weight.shape[0], 1), weight.context, dtype=weight.dtype, stype=weight.stype)

    def update(self, index: Any, weight: NDArray, grad: NDArray, state: Any) -> None:
        self._check(weight, grad)
        self._update_count(index)
        lr, wd = self._get_lr(index), self._get_wd(index)
        if wd != 0:
            raise OptimizerError(f"GroupAdaGrad: weight decay is not supported, got wd={wd}")
        kwargs: dict = {"epsilon": self.float_stable_eps, "rescale_grad": self.rescale_grad}
        if grad.stype == "row_sparse":
            _clip_kwargs(kwargs, self.clip_gradient)
        elif self.clip_gradient is not None:  # MXNet's dense path clips whenever it is given (0 included)
            kwargs["clip_gradient"] = self.clip_gradient
        _ops._contrib_group_adagrad_update(weight, grad, state, out=weight, lr=lr, **kwargs)


class _Contrib:
    """``mx.optimizer.contrib``: MXNet's contributed optimizers."""

    GroupAdaGrad = GroupAdaGrad


contrib = _Contrib()
Optimizer.register(GroupAdaGrad)


@register
class RMSProp(Optimizer):
    """RMSProp: Tieleman & Hinton (``rmsprop_update``) or, with ``centered=True``, Graves
    (``rmspropalex_update``); ``clip_weights`` clips the new weight."""

    def __init__(self, learning_rate: float = 0.001, gamma1: float = 0.9, gamma2: float = 0.9,
                 epsilon: float = 1e-8, centered: bool = False, clip_weights: float | None = None,
                 **kwargs: Any) -> None:
        super().__init__(learning_rate=learning_rate, **kwargs)
        for name, v in (("gamma1", gamma1), ("gamma2", gamma2), ("epsilon", epsilon)):
            _need_real("RMSProp", name, v)
        _need_real("RMSProp", "clip_weights", clip_weights, optional=True)
        self.gamma1, self.gamma2, self.epsilon = gamma1, gamma2, epsilon
        self.centered = bool(centered)
        self.clip_weights = clip_weights

    def create_state(self, index: Any, weight: NDArray) -> Any:
        n = 3 if self.centered else 1
        return tuple(zeros(weight.shape, weight.context, dtype=weight.dtype, stype=weight.stype) for _ in range(n))

    def update(self, index: Any, weight: NDArray, grad: NDArray, state: Any) -> None:
        self._check(weight, grad)
        self._update_count(index)
        lr, wd = self._get_lr(index), self._get_wd(index)
        kwargs: dict = {"gamma1": self.gamma1, "epsilon": self.epsilon, "rescale_grad": self.rescale_grad}
        if self.centered:
            kwargs["gamma2"] = self.gamma2
        _clip_kwargs(kwargs, self.clip_gradient)
        if self.clip_weights:
            kwargs["clip_weights"] = self.clip_weights
        if self.centered:
            n, g, delta = state
            _ops.rmspropalex_update(weight, grad, n, g, delta, out=weight, lr=lr, wd=wd, **kwargs)
        else:
            (n,) = state
            _ops.rmsprop_update(weight, grad, n, out=weight, lr=lr, wd=wd, **kwargs)


@register
class Ftrl(Optimizer):
    """FTRL-Proximal::

        g = clip(rescale_grad * grad); z += g - (sqrt(n + g**2) - sqrt(n)) * weight / lr
        n += g**2; weight = (sign(z) * lamda1 - z) / ((beta + sqrt(n)) / lr + wd) * (|z| > lamda1)

    As in MXNet 1.9.1, a row_sparse weight (with its row_sparse states) is updated lazily,
    only at the gradient's rows, and a dense weight gets the standard update (the gradient
    densified). ``lazy_update=True``, beyond MXNet, makes a dense weight's update lazy too."""

    def __init__(self, lamda1: float = 0.01, learning_rate: float = 0.1, beta: float = 1,
                 lazy_update: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _need_real("Ftrl", "lamda1", lamda1)
        _need_real("Ftrl", "beta", beta)
        _need_real("Ftrl", "learning_rate", learning_rate)
        self.lamda1, self.beta = lamda1, beta
        self.lr = learning_rate
        self.lazy_update = bool(lazy_update)

    def create_state(self, index: Any, weight: NDArray) -> Any:
        return (zeros(weight.shape, weight.context, dtype=weight.dtype, stype=weight.stype),  # z, as MXNet
                zeros(weight.shape, weight.context, dtype=weight.dtype, stype=weight.stype))  # n

    def update(self, index: Any, weight: NDArray, grad: NDArray, state: Any) -> None:
        self._check(weight, grad)
        self._update_count(index)
        wd, lr = self._get_wd(index), self._get_lr(index)
        kwargs = _clip_kwargs({"lamda1": self.lamda1, "beta": self.beta, "rescale_grad": self.rescale_grad},
                              self.clip_gradient)
        z, n = state
        _ops.ftrl_update(weight, grad, z, n, out=weight, lazy_update=self.lazy_update, lr=lr, wd=wd, **kwargs)


def _zero_states(weight: NDArray, n: int, stype: str = "default") -> tuple:
    """``n`` zero states shaped, placed and typed as ``weight``."""
    return tuple(zeros(weight.shape, weight.context, dtype=weight.dtype, stype=stype) for _ in range(n))


def _python_grad(grad: NDArray, rescale_grad: float, clip_gradient: Any, wd: float = 0.0,
                 weight: NDArray | None = None) -> NDArray:
    """``clip(grad * rescale_grad + wd * weight)`` as MXNet's Python optimizers compute it
    (they clip whenever ``clip_gradient`` is not None, 0 included)."""
    grad = grad * rescale_grad
    if weight is not None:
        grad = grad + wd * weight
    return nd.clip(grad, -clip_gradient, clip_gradient) if clip_gradient is not None else grad


@register
class FTML(Optimizer):
    """Follow the Moving Leader (``ftml_update``)::

        g = clip(rescale_grad * grad + wd * weight)
        v = beta2 * v + (1 - beta2) * g**2
        d_t = (1 - beta1**t) / lr * (sqrt(v / (1 - beta2**t)) + epsilon)
        z = beta1 * z + (1 - beta1) * g - (d_t - beta1 * d_(t-1)) * weight;  weight = -z / d_t"""

    def __init__(self, beta1: float = 0.6, beta2: float = 0.999, epsilon: float = 1e-8, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        for name, v in (("beta1", beta1), ("beta2", beta2), ("epsilon", epsilon)):
            _need_real("FTML", name, v)
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon

    def create_state(self, index: Any, weight: NDArray) -> Any:
        return _zero_states(weight, 3)  # d, v, z

    def update(self, index: Any, weight: NDArray, grad: NDArray, state: Any) -> None:
        self._check(weight, grad)
        self._update_count(index)
        lr, wd = self._get_lr(index), self._get_wd(index)
        kwargs = {"beta1": self.beta1, "beta2": self.beta2, "epsilon": self.epsilon,
                  "rescale_grad": self.rescale_grad, "t": self._index_update_count[index]}
        if self.clip_gradient:
            kwargs["clip_grad"] = self.clip_gradient
        d, v, z = state
        _ops.ftml_update(weight, grad, d, v, z, out=weight, lr=lr, wd=wd, **kwargs)


@register
class LAMB(Optimizer):
    """Layer-wise adaptive moments (``lamb_update_phase1`` / ``lamb_update_phase2``): Adam's
    step direction ``g`` (bias-corrected when ``bias_correction``, plus ``wd * weight``),
    applied as ``weight -= lr * (r1 / r2) * g`` with ``r1 = ||weight||`` clamped to
    ``[lower_bound, upper_bound]`` and ``r2 = ||g||``. States take the weight's storage type.
    A list of indices updates each weight in turn (MXNet's aggregated form)."""

    def __init__(self, learning_rate: float = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-6, lower_bound: float | None = None, upper_bound: float | None = None,
                 bias_correction: bool = True, **kwargs: Any) -> None:
        super().__init__(learning_rate=learning_rate, **kwargs)
        for name, v in (("beta1", beta1), ("beta2", beta2), ("epsilon", epsilon)):
            _need_real("LAMB", name, v)
        _need_real("LAMB", "lower_bound", lower_bound, optional=True)
        _need_real("LAMB", "upper_bound", upper_bound, optional=True)
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon
        self.lower_bound, self.upper_bound = lower_bound, upper_bound
        self.bias_correction = bool(bias_correction)
        self.aggregate_num = max(1, min(45, int(os.getenv("MXNET_OPTIMIZER_AGGREGATION_SIZE", "45"))))

    def create_state(self, index: Any, weight: NDArray) -> Any:
        return _zero_states(weight, 2, weight.stype)  # mean, var

    def update(self, index: Any, weight: Any, grad: Any, state: Any) -> None:
        self._update_all(index, weight, grad, state, multi_precision=False)

    def update_multi_precision(self, index: Any, weight: Any, grad: Any, state: Any) -> None:
        first = weight[0] if isinstance(index, (list, tuple)) else weight
        self._update_all(index, weight, grad, state, self.multi_precision and first.dtype == np.float16)

    def _update_all(self, index: Any, weight: Any, grad: Any, state: Any, multi_precision: bool) -> None:
        if isinstance(index, (list, tuple)):
            items = list(zip(index, weight, grad, state))
        else:
            items = [(index, weight, grad, state)]
        for i, w, g, _ in items:
            self._check(w, g)
            self._update_count(i)
        for i, w, g, st in items:
            if multi_precision:  # (float32 master, (mean, var)): the update runs on the master
                master, (mean, var) = st
                self._step(i, master, g.astype(np.float32), mean, var)
                w[:] = master
            else:
                mean, var = st
                self._step(i, w, g, mean, var)

    def _step(self, index: Any, weight: NDArray, grad: NDArray, mean: NDArray, var: NDArray) -> None:
        kwargs = _clip_kwargs({"beta1": self.beta1, "beta2": self.beta2, "epsilon": self.epsilon,
                               "bias_correction": self.bias_correction, "rescale_grad": self.rescale_grad,
                               "t": self._index_update_count[index]}, self.clip_gradient)
        g = _ops.lamb_update_phase1(weight, grad, mean, var, wd=self._get_wd(index), **kwargs)
        bounds = {}
        if self.lower_bound:
            bounds["lower_bound"] = self.lower_bound
        if self.upper_bound:
            bounds["upper_bound"] = self.upper_bound
        _ops.lamb_update_phase2(weight, g, nd.norm(weight), nd.norm(g), out=weight, lr=self._get_lr(index), **bounds)


@register
class SGLD(Optimizer):
    """Stochastic gradient Langevin dynamics: ``weight += -lr / 2 * (g + wd * weight) + N(0,
    sqrt(lr))``, the noise drawn from ``mx.random`` (so ``mx.random.seed`` reproduces it)."""

    def update(self, index: Any, weight: NDArray, grad: NDArray, state: Any) -> None:
        self._check(weight, grad)
        self._update_count(index)
        lr, wd = self._get_lr(index), self._get_wd(index)
        grad = _python_grad(grad, self.rescale_grad, self.clip_gradient)
        weight[:] += -lr / 2 * (grad + wd * weight)
        weight[:] += nd.random.normal(0, math.sqrt(lr), shape=weight.shape, dtype=weight.dtype, ctx=weight.context)


@register
class Adamax(Optimizer):
    """AdaMax, Adam under the infinity norm::

        g = clip(rescale_grad * grad + wd * weight);  m = beta1 * m + (1 - beta1) * g
        u = maximum(beta2 * u, |g|);  weight -= lr / (1 - beta1**t) * m / u"""

    def __init__(self, learning_rate: float = 0.002, beta1: float = 0.9, beta2: float = 0.999,
                 **kwargs: Any) -> None:
        super().__init__(learning_rate=learning_rate, **kwargs)
        _need_real("Adamax", "beta1", beta1)
        _need_real("Adamax", "beta2", beta2)
        self.beta1, self.beta2 = beta1, beta2

    def create_state(self, index: Any, weight: NDArray) -> Any:
        return _zero_states(weight, 2)  # m, u

    def update(self, index: Any, weight: NDArray, grad: NDArray, state: Any) -> None:
        self._check(weight, grad)
        self._update_count(index)
        lr, wd = self._get_lr(index), self._get_wd(index)
        lr /= 1.0 - self.beta1 ** self._index_update_count[index]
        g = _python_grad(grad, self.rescale_grad, self.clip_gradient, wd, weight)
        m, u = state
        m[:] *= self.beta1
        m[:] += (1.0 - self.beta1) * g
        u[:] = nd.maximum(self.beta2 * u, nd.abs(g))
        weight[:] -= lr * m / u


@register
class Nadam(Optimizer):
    """Adam with Nesterov momentum and a warming momentum schedule
    (``beta1 * (1 - 0.5 * 0.96**(t * schedule_decay))``)."""

    def __init__(self, learning_rate: float = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8, schedule_decay: float = 0.004, **kwargs: Any) -> None:
        super().__init__(learning_rate=learning_rate, **kwargs)
        for name, v in (("beta1", beta1), ("beta2", beta2), ("epsilon", epsilon), ("schedule_decay", schedule_decay)):
            _need_real("Nadam", name, v)
        self.beta1, self.beta2, self.epsilon, self.schedule_decay = beta1, beta2, epsilon, schedule_decay
        self.m_schedule = 1.0

    def create_state(self, index: Any, weight: NDArray) -> Any:
        return _zero_states(weight, 2)  # m, v

    def update(self, index: Any, weight: NDArray, grad: NDArray, state: Any) -> None:
        self._check(weight, grad)
        self._update_count(index)
        lr, wd = self._get_lr(index), self._get_wd(index)
        t = self._index_update_count[index]
        g = _python_grad(grad, self.rescale_grad, self.clip_gradient, wd, weight)
        mom_t = self.beta1 * (1.0 - 0.5 * 0.96 ** (t * self.schedule_decay))
        mom_next = self.beta1 * (1.0 - 0.5 * 0.96 ** ((t + 1) * self.schedule_decay))
        self.m_schedule *= mom_t
        m_schedule_next = self.m_schedule * mom_next
        m, v = state
        m[:] *= self.beta1
        m[:] += (1.0 - self.beta1) * g
        v[:] *= self.beta2
        v[:] += (1.0 - self.beta2) * g * g
        m_bar = (1.0 - mom_t) * (g / (1.0 - self.m_schedule)) + mom_next * (m / (1.0 - m_schedule_next))
        v_hat = v / (1.0 - self.beta2 ** t)
        weight[:] -= lr * m_bar / (nd.sqrt(v_hat) + self.epsilon)


@register
class AdaDelta(Optimizer):
    """AdaDelta (no learning rate)::

        g = clip(rescale_grad * grad);  acc_g = rho * acc_g + (1 - rho) * g**2
        delta = sqrt(acc_delta + epsilon) / sqrt(acc_g + epsilon) * g
        acc_delta = rho * acc_delta + (1 - rho) * delta**2;  weight -= delta + wd * weight

    As MXNet 1.9.1's, it scales the caller's ``grad`` in place by ``rescale_grad``."""

    def __init__(self, rho: float = 0.90, epsilon: float = 1e-5, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _need_real("AdaDelta", "rho", rho)
        _need_real("AdaDelta", "epsilon", epsilon)
        self.rho, self.epsilon = rho, epsilon

    def create_state(self, index: Any, weight: NDArray) -> Any:
        return _zero_states(weight, 2)  # acc_g, acc_delta

    def update(self, index: Any, weight: NDArray, grad: NDArray, state: Any) -> None:
        self._check(weight, grad)
        wd = self._get_wd(index)
        self._update_count(index)
        grad *= self.rescale_grad
        if self.clip_gradient is not None:
            grad = nd.clip(grad, -self.clip_gradient, self.clip_gradient)
        acc_g, acc_delta = state
        acc_g[:] *= self.rho
        acc_g[:] += (1.0 - self.rho) * grad * grad
        delta = nd.sqrt(acc_delta + self.epsilon) / nd.sqrt(acc_g + self.epsilon) * grad
        acc_delta[:] *= self.rho
        acc_delta[:] += (1.0 - self.rho) * delta * delta
        weight[:] -= delta + wd * weight


@register
class DCASGD(Optimizer):
    """Delay-compensated asynchronous SGD: ``mom = momentum * mom - lr * (g + wd * weight +
    lamda * g**2 * (weight - previous_weight))``; ``weight += mom``; the state keeps the
    previous weight."""

    def __init__(self, momentum: float = 0.0, lamda: float = 0.04, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _need_real("DCASGD", "momentum", momentum)
        _need_real("DCASGD", "lamda", lamda)
        self.momentum, self.lamda = momentum, lamda
        self.weight_previous: dict = {}

    def create_state(self, index: Any, weight: NDArray) -> Any:
        mom = None if self.momentum == 0.0 else zeros(weight.shape, weight.context, dtype=weight.dtype)
        return (mom, weight.copy())

    def update(self, index: Any, weight: NDArray, grad: NDArray, state: Any) -> None:
        self._check(weight, grad)
        self._update_count(index)
        lr, wd = self._get_lr(index), self._get_wd(index)
        grad = _python_grad(grad, self.rescale_grad, self.clip_gradient)
        mom, previous = state
        step = -lr * (grad + wd * weight + self.lamda * grad * grad * (weight - previous))
        if mom is not None:
            mom[:] *= self.momentum
            mom[:] += step
            step = mom
        previous[:] = weight
        weight[:] += step


@register
class ccSGD(SGD):  # noqa: N801  (MXNet's name)
    """Deprecated in MXNet: the same as ``SGD``."""


FTRL = Ftrl


# ---- the updater ---------------------------------------------------------------------------------
class Updater:
    """Applies an optimizer to ``(index, grad, weight)`` (MXNet's argument order), creating
    each index's state on first sight and keeping it."""

    def __init__(self, optimizer: Optimizer) -> None:
        if not isinstance(optimizer, Optimizer):
            raise OptimizerTypeError(f"Updater: optimizer must be an Optimizer, got {type(optimizer).__name__}")
        self.optimizer = optimizer
        self.states: dict = {}
        self.states_synced: dict = {}
        self.aggregate_updates = optimizer.aggregate_num > 0

    def __call__(self, index: Any, grad: Any, weight: Any) -> None:
        if isinstance(index, (list, tuple)):
            indices, grads, weights = list(index), list(grad), list(weight)
            if not len(indices) == len(grads) == len(weights):
                raise OptimizerError(f"Updater: index, grad and weight must be lists of one length, got "
                                     f"{len(indices)}, {len(grads)} and {len(weights)}")
        else:
            indices, grads, weights = [index], [grad], [weight]
        for name, arrays in (("grad", grads), ("weight", weights)):
            for a in arrays:
                if not isinstance(a, NDArray):
                    raise OptimizerTypeError(f"Updater: {name} must be an NDArray, got {type(a).__name__}")
        if weights:
            self.optimizer._set_current_context(weights[0].context.device_id)
        for i, idx in enumerate(indices):
            if isinstance(idx, bytes):
                idx = indices[i] = idx.decode("utf-8")  # a key from a C API, as MXNet's py_str
            if idx not in self.states:
                self.states[idx] = self.optimizer.create_state_multi_precision(idx, weights[i])
                self.states_synced[idx] = True
            elif not self.states_synced[idx]:
                self.states[idx] = self.sync_state_context(self.states[idx], weights[i].context)
                self.states_synced[idx] = True
        for i, w, g in zip(indices, weights, grads):
            self.optimizer.update_multi_precision(i, w, g, self.states[i])

    def sync_state_context(self, state: Any, context: Any) -> Any:
        """``state`` (an NDArray, or nested tuples / lists of them) on ``context``."""
        if isinstance(state, NDArray):
            return state.as_in_context(context)
        if isinstance(state, (tuple, list)):
            synced = [self.sync_state_context(s, context) for s in state]
            return tuple(synced) if isinstance(state, tuple) else synced
        return state

    def set_states(self, states: bytes) -> None:
        """Load states pickled by ``get_states`` (with the optimizer when it was dumped).
        This unpickles: pass only bytes from a source you trust."""
        if not isinstance(states, (bytes, bytearray)):
            raise OptimizerTypeError(f"Updater.set_states: states must be bytes from get_states, "
                                     f"got {type(states).__name__}")
        try:
            loaded = pickle.loads(states)
        except Exception as e:  # noqa: BLE001  (any unpickling failure is bad input)
            raise OptimizerError(f"Updater.set_states: states could not be unpickled ({e})") from e
        if isinstance(loaded, tuple) and len(loaded) == 2:
            self.states, self.optimizer = loaded
        elif isinstance(loaded, dict):
            self.states = loaded
        else:
            raise OptimizerError(f"Updater.set_states: states must hold a dict of states, got {type(loaded).__name__}")
        self.states_synced = dict.fromkeys(self.states, False)

    def get_states(self, dump_optimizer: bool = False) -> bytes:
        """The states, pickled (with the optimizer when ``dump_optimizer``)."""
        return pickle.dumps((self.states, self.optimizer) if dump_optimizer else self.states)


def get_updater(optimizer: Optimizer) -> Updater:
    """An ``Updater`` applying ``optimizer``."""
    return Updater(optimizer)
