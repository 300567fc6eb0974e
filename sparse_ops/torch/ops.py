"""``sparse_ops.torch.ops.<name>``: every registered op as a function of torch tensors.

Each attribute is looked up in the operator table when asked for (``bridge.lookup``), so
ops registered later (plugins, ``sparse_ops.library.load`` files, MXNet-form ops) appear
here too; this module defines nothing else, so no op name is shadowed.
"""


def __getattr__(name):
    from .bridge import lookup

    return lookup(name)


def __dir__():
    from .. import registry

    return registry.list_ops()
