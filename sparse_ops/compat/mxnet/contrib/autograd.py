"""``mx.contrib.autograd``: MXNet's first autograd API, over the same engine as ``mx.autograd``.

``train_section()`` records in training mode, ``test_section()`` pauses in predict mode
inside it, ``set_is_training(flag)`` switches both recording and the training flag (as that
API's one switch did) and returns the previous state; ``mark_variables``, ``backward`` and
``compute_gradient`` are ``mx.autograd``'s; ``grad_and_loss(func, argnum)`` and
``grad(func, argnum)`` wrap ``func`` to return the gradients of its output with respect to
its arguments (those of ``argnum``, an int or a list; all by default), with its output for
``grad_and_loss``.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

from .. import autograd as _ag
from ..ndarray import zeros_like

mark_variables = _ag.mark_variables


def set_is_training(is_train: bool) -> bool:
    """Turn recording and training mode on or off together; returns the previous state."""
    was = _ag.is_recording()
    _ag.set_recording(bool(is_train))
    _ag.set_training(bool(is_train))
    return was


def train_section() -> Any:
    """``with train_section():`` records the calls in it, in training mode."""
    return _ag.record(train_mode=True)


def test_section() -> Any:
    """``with test_section():`` inside ``train_section``: nothing recorded, predict mode."""
    return _ag.pause(train_mode=False)


def backward(outputs: Any, out_grads: Any = None, retain_graph: bool = False) -> None:
    """Gradients of ``outputs`` into the marked variables' buffers."""
    _ag.backward(outputs, out_grads, retain_graph=retain_graph)


def compute_gradient(outputs: Any) -> None:
    """``backward(outputs)``."""
    backward(outputs)


def grad_and_loss(func: Callable[..., Any], argnum: Any = None) -> Callable[..., tuple]:
    """``func`` wrapped to return (gradients with respect to the arguments of ``argnum``, its
    output): each such argument gets a fresh gradient buffer, recorded through ``func``."""
    @functools.wraps(func)
    def wrapped(*args: Any) -> tuple:
        picked = list(range(len(args))) if argnum is None else \
            [argnum] if isinstance(argnum, int) else list(argnum)
        variables = [args[i] for i in picked]
        grads = [zeros_like(x) for x in variables]
        mark_variables(variables, grads)
        with train_section():
            outputs = func(*args)
        backward([outputs] if not isinstance(outputs, (list, tuple)) else list(outputs))
        return grads, outputs
    return wrapped


def grad(func: Callable[..., Any], argnum: Any = None) -> Callable[..., list]:
    """``func`` wrapped to return the gradients of its output (see ``grad_and_loss``)."""
    g_and_l = grad_and_loss(func, argnum)

    @functools.wraps(func)
    def wrapped(*args: Any) -> list:
        return g_and_l(*args)[0]
    return wrapped


__all__ = ["set_is_training", "train_section", "test_section", "mark_variables", "backward", "compute_gradient",
           "grad_and_loss", "grad"]
