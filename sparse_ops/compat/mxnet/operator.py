"""``mx.operator``: Python custom operators (``CustomOp``, ``CustomOpProp``, ``register``).

The classes are sparse-ops' own, which follow MXNet's method names and semantics; run a
registered operator with ``mx.nd.Custom(*inputs, op_type=name, **params)``.
"""
from __future__ import annotations

import warnings
from typing import Callable

from ...custom import CustomOp, CustomOpProp
from ...errors import OperatorError
from ...registry import get_op, list_ops
from ...registry import register as _register
from .ndarray._op import face_form


def register(reg_name: str) -> Callable[[type], type]:
    """Class decorator registering a ``CustomOpProp`` subclass as operator ``reg_name``.

    As in MXNet, registering a name again replaces the earlier custom operator (with a
    warning). MXNet keeps custom operators apart from built-ins; here they share one
    table, so a name taken by a built-in or plugin operator raises ``MXNetError``.
    """

    def do_register(prop_cls: type) -> type:
        try:
            existing = get_op(reg_name)
        except OperatorError:
            existing = None
        if existing is not None:
            if getattr(existing.cls, "prop_class", None) is None:
                raise OperatorError(
                    f"cannot register custom operator {reg_name!r}: a built-in or plugin operator has "
                    "that name (custom operators share the operator table here); choose another name")
            warnings.warn(f"New registration is overriding existing custom operator {reg_name}",
                          stacklevel=2)
        registered = _register(reg_name, replace=existing is not None)(prop_cls)
        # the CustomOp's code sees MXNet's arrays (sum() of shape (1,), ...) from every face
        get_op(reg_name).cls.array_form = staticmethod(face_form)
        return registered

    return do_register


def get_all_registered_operators() -> list[str]:
    """Names of every registered operator (built-in, plugin and custom), and of the face's
    operators written in Python (``Activation``, the legacy samplers ``random_*``, ...)."""
    from .ndarray import op as face_ops

    return sorted(set(list_ops()) | set(face_ops.__all__))


__all__ = ["CustomOp", "CustomOpProp", "register", "get_all_registered_operators"]
