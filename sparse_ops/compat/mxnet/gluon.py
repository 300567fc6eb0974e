"""``mx.gluon`` is not part of this face.

The module exists so that programs which import it beside ``mx.nd`` (``from mxnet import
gluon`` at the top of a file) run their imperative parts; any use of Gluon names raises an
AttributeError saying so.
"""
from __future__ import annotations


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(f"mxnet.gluon.{name}: Gluon is not part of sparse_ops.compat.mxnet "
                         "(the face covers mx.nd, mx.autograd, mx.optimizer, mx.kv and mx.io)")
