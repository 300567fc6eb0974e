"""``sparse_ops.torch.ops.<name>``: every registered op as a function of torch tensors.

Each attribute is looked up in the operator table when first asked for (``bridge.lookup``),
so ops registered later (plugins, ``sparse_ops.library.load`` files, MXNet-form ops) appear
here too. The bridged function found is then kept in this module's namespace, so the next
``sparse_ops.torch.ops.<name>`` is a plain attribute read (``__getattr__`` runs only for
names not found there, and costs a microsecond or two per call); the bridge removes it again
whenever the table registers, replaces or removes an op of that name
(``bridge.forget_bridged``). This module defines nothing else, so no op name is shadowed.
"""


def __getattr__(name):
    from .bridge import lookup

    bridged = lookup(name)
    globals()[name] = bridged
    return bridged


def __dir__():
    from .. import registry

    return registry.list_ops()
