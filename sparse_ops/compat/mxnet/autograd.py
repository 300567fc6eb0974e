"""``mx.autograd``: sparse-ops' autograd, which already has MXNet's names and signatures.

``record(train_mode=True)``, ``pause(train_mode=False)``, ``train_mode()``,
``predict_mode()``, ``is_recording()``, ``is_training()``, ``set_recording(flag)``,
``set_training(flag)`` (both return the previous value), ``mark_variables`` (a face csr
array's gradient keeps every nonzero, as MXNet's), ``backward``, ``grad`` (its gradients
are the face's arrays) and ``Function``.
(``get_symbol`` is Symbol API: not covered.)
"""
from __future__ import annotations

from typing import Any

from ...autograd import (  # noqa: F401
    Function,
    backward,
    is_recording,
    is_training,
    pause,
    predict_mode,
    record,
    set_recording,
    set_training,
    train_mode,
)
from ...autograd import grad as _grad
from ...autograd import mark_variables as _mark_variables
from ...ndarray import NDArray
from .ndarray._op import as_face
from .ndarray.ndarray import as_new_leaf


def mark_variables(variables: Any, gradients: Any, grad_reqs: Any = "write") -> None:
    """Make ``variables`` differentiable leaves whose gradients go into ``gradients``; a face
    csr array's gradient holds every nonzero the rules give, as MXNet's (a native one's,
    its stored values'). An array computed in a graph becomes a new leaf (MXNet's
    ``MarkVariables``), as ``attach_grad`` makes it."""
    face = [v for v in (variables if isinstance(variables, (list, tuple)) else [variables])
            if type(v).__module__.startswith(__package__)]
    for v in face:
        as_new_leaf(v)
    _mark_variables(variables, gradients, grad_reqs)
    for v in face:  # the face's arrays: MXNet's rule
        v._ag.structure = None


def grad(heads: Any, variables: Any, head_grads: Any = None, retain_graph: bool | None = None,
         create_graph: bool = False, train_mode: bool = True) -> Any:
    """Gradients of ``heads`` with respect to ``variables``, returned as a list of NDArrays of
    the face (``.grad`` untouched), one per variable, a single variable too: MXNet 1.x makes
    a lone NDArray a list before computing, so ``grad(y, x)[0]`` is x's gradient there;
    ``create_graph=True`` records them for higher order."""
    if isinstance(variables, NDArray):
        variables = [variables]
    return as_face(_grad(heads, variables, head_grads, retain_graph, create_graph, train_mode))


__all__ = ["record", "pause", "train_mode", "predict_mode", "is_recording", "is_training",
           "set_recording", "set_training", "mark_variables", "backward", "grad", "Function"]
