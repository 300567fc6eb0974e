"""The built-in operators, registered through the same public API plugins use.

Each module holds one family: its ``Op`` classes (rules, kernels, gradient together)
and the Python functions ``sparse_ops`` exports.
"""
from ..dispatch import op_function as _op_function
from ..registry import OpDef as _OpDef
from ..registry import subscribe as _subscribe


def _publish(name: str, opdef: "_OpDef | None") -> None:
    """Keep ``sparse_ops.ops.<name>`` the generated function of each registered op (the
    registry tells us of every registration, replacement, removal and restore)."""
    if opdef is None:
        globals().pop(name, None)
    else:
        globals()[name] = _op_function(name)


_subscribe(_publish)  # first: the built-ins registered by the imports below are published too

from . import elemwise, linalg, nn, optimizer, reduce, structure, unary  # noqa: E402,F401
from .elemwise import *  # noqa: F401,F403
from .linalg import *  # noqa: F401,F403
from .nn import *  # noqa: F401,F403
from .optimizer import *  # noqa: F401,F403
from .reduce import *  # noqa: F401,F403
from .structure import *  # noqa: F401,F403
from .unary import *  # noqa: F401,F403

__all__ = [name for m in (elemwise, unary, reduce, linalg, structure, nn, optimizer) for name in m.__all__]

# MXNet's fluent methods: x.sum(axis=1) is sum(x, axis=1), and so on.
_FLUENT = ("sum", "mean", "norm", "square_sum", "reshape", "transpose", "flatten", "expand_dims", "split",
           "slice", "slice_axis", "take", "clip", "abs", "sign", "square", "sqrt", "exp", "log", "log1p", "relu",
           "sigmoid", "tanh", "zeros_like", "ones_like", "dot", "broadcast_to")


def _install_fluent_methods() -> None:
    from ..ndarray import NDArray

    for name in _FLUENT:
        fn = globals()[name]

        def method(self, *args, _fn=fn, **kwargs):
            return _fn(self, *args, **kwargs)

        method.__name__ = name
        method.__doc__ = f"``{name}(self, ...)``; see ``sparse_ops.{name}``."
        if not hasattr(NDArray, name):
            setattr(NDArray, name, method)
    NDArray.T = property(lambda self: transpose(self), doc="The transpose (``transpose(self)``).")


_install_fluent_methods()
