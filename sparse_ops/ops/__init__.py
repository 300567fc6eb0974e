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

# Last: the container methods and Python operators, installed from above (the containers
# import no operator).
from . import methods  # noqa: E402

methods.install()
