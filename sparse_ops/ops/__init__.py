"""The built-in operators, registered through the same public API plugins use.

Each module holds one family: its ``Op`` classes (rules, kernels, gradient together)
and the Python functions ``sparse_ops`` exports.
"""
from . import elemwise, linalg, nn, optimizer, reduce, structure, unary  # noqa: F401
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
