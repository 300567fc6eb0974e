"""The built-in operators, registered through the same public API plugins use.

Each module holds one topic: its ``Op`` classes (rules, kernels, gradient and samples
together). Registration publishes each op's generated function here, as
``sparse_ops.ops.<name>`` (built-ins and plugins alike, kept current through replacements
and removals); the built-ins whose names do not start with ``_`` are also
``sparse_ops.<name>``. Inside the ops, operators of other modules are called through the
table (``_util.T.<name>``), so the modules import each other one way only.
"""
from ..dispatch import op_function as _op_function
from ..registry import OpDef as _OpDef
from ..registry import list_ops as _list_ops
from ..registry import subscribe as _subscribe


def _publish(name: str, opdef: "_OpDef | None") -> None:
    """Keep ``sparse_ops.ops.<name>`` the generated function of each registered op (the
    registry tells us of every registration, replacement, removal and restore)."""
    if opdef is None:
        globals().pop(name, None)
    else:
        globals()[name] = _op_function(name)


_subscribe(_publish)  # first: the built-ins registered by the imports below are published too

from .. import random  # noqa: E402,F401  (the sampling operators)
from . import (  # noqa: E402,F401  (importing a module registers its operators)
    broadcast, contrib, conv, elemwise, indexing, linalg, nn, optimizer, reduce, scalar, shape, storage, unary,
    unary_math,
)
from . import activation, arrange, extrema, logic, losses, passthrough, picking, pooling, positions, softmaxes, sorting  # noqa: E402,F401  (MXNet's common dense operators)

__all__ = [name for name in _list_ops() if not name.startswith("_")]  # the public built-ins
