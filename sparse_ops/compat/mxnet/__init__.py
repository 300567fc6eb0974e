"""A drop-in face of MXNet 1.x's imperative API: ``import sparse_ops.compat.mxnet as mx``.

Covered: ``mx.nd`` (creation, every registered operator under its MXNet name, save/load,
``Custom``), ``mx.nd.sparse``, ``mx.nd.random`` / ``mx.random``, ``mx.autograd``,
``mx.operator`` (``CustomOp``, ``CustomOpProp``, ``register``), ``mx.cpu()``,
``mx.gpu()``, ``mx.Context``, ``mx.base.MXNetError``, ``mx.test_utils``, ``mx.name``,
``mx.util``, ``mx.runtime``, ``mx.optimizer`` and ``mx.lr_scheduler``. Values and output storage types follow
MXNet 1.9. ``mx.kv`` / ``mx.kvstore`` (an in-process, single-machine store) and ``mx.io``
(``NDArrayIter``, ``CSVIter``, ``MNISTIter``, ``LibSVMIter``) too. The Symbol API, Gluon, distributed stores and
MXNet's own binary file format are not covered.

The arrays are sparse-ops' own containers: ``mx.nd.NDArray`` and the sparse classes of
``mx.nd.sparse`` subclass the library's classes and add MXNet 1.9's behaviour where the
native API's design differs (``ndarray/ndarray.py``), so code can mix this face with the
native API freely.
"""
from . import autograd, base, context, name, ndarray, operator, random, test_utils, util  # noqa: F401
from . import io, kvstore  # noqa: F401  (mx.io, mx.kv: single-machine store)
from .base import MXNetError
from .context import Context, cpu, current_context, gpu, num_gpus
from .util import is_np_shape, np_shape, set_np_shape, use_np_shape
from . import lr_scheduler, optimizer  # noqa: F401,E402  (mx.optimizer, mx.lr_scheduler)
from . import gluon, runtime  # noqa: F401,E402  (mx.runtime.Features; gluon only names what is missing)

nd = ndarray
kv = kvstore

__all__ = ["nd", "ndarray", "kv", "kvstore", "io", "autograd", "operator", "random", "base", "context", "name",
           "test_utils", "util", "runtime", "gluon", "use_np_shape", "np_shape", "is_np_shape", "set_np_shape", "optimizer", "lr_scheduler",
           "cpu", "gpu", "Context", "current_context", "num_gpus", "MXNetError"]
