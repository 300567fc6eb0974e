"""A drop-in face of MXNet 1.x's imperative API: ``import sparse_ops.compat.mxnet as mx``.

Covered: ``mx.nd`` (creation, every registered operator under its MXNet name, save/load,
``Custom``), ``mx.nd.sparse``, ``mx.nd.random`` / ``mx.random``, ``mx.autograd``,
``mx.operator`` (``CustomOp``, ``CustomOpProp``, ``register``), ``mx.cpu()``,
``mx.gpu()``, ``mx.Context``, ``mx.base.MXNetError``, ``mx.test_utils``, ``mx.name``,
``mx.util``, ``mx.runtime``, ``mx.engine``, ``mx.optimizer`` and ``mx.lr_scheduler``; ``mx.kv`` /
``mx.kvstore`` (an in-process, single-machine store) and ``mx.io`` (``NDArrayIter``,
``CSVIter``, ``MNISTIter``, ``LibSVMIter``). Values, output storage types and behaviour
follow MXNet 1.9.1. The Symbol API, Module, Gluon (``mx.gluon`` only names what is
missing), distributed stores and MXNet's own binary file format are not covered.

The face's arrays (``mx.nd.NDArray`` and the sparse classes) subclass sparse-ops' own
containers and carry MXNet's behaviour where it differs from the native API's; arrays
pass freely between this face and sparse-ops.
"""
from . import autograd, base, context, name, ndarray, operator, random, test_utils, util  # noqa: F401
from . import io, kvstore  # noqa: F401  (mx.io, mx.kv: single-machine store)
from . import metric  # noqa: F401
from .base import MXNetError
from .context import Context, cpu, current_context, gpu, num_gpus
from .util import is_np_shape, np_shape, set_np_shape, use_np_shape
from . import lr_scheduler, optimizer  # noqa: F401,E402  (mx.optimizer, mx.lr_scheduler)
from . import gluon, runtime  # noqa: F401,E402  (mx.runtime.Features; gluon only names what is missing)
from . import contrib  # noqa: F401,E402  (mx.contrib.autograd, mx.contrib.nd)
from . import engine  # noqa: F401,E402  (mx.engine.bulk: a scheduling hint, operators run when called)

nd = ndarray
kv = kvstore

__all__ = ["nd", "ndarray", "kv", "kvstore", "io", "autograd", "operator", "random", "base", "context", "name",
           "test_utils", "util", "runtime", "gluon", "use_np_shape", "np_shape", "is_np_shape", "set_np_shape",
           "optimizer", "lr_scheduler", "engine", "cpu", "gpu", "Context", "current_context", "num_gpus", "MXNetError"]
