"""``sparse_ops.jax.ops.<name>``: every registered op as a function of JAX arrays.

Each attribute is looked up in the operator table when asked for (``bridge.lookup``), so
ops registered later (plugins, library files) appear too; nothing else is defined here,
so no op name is shadowed.
"""


def __getattr__(name):
    from .bridge import lookup

    return lookup(name)


def __dir__():
    from .. import registry

    return registry.list_ops()
