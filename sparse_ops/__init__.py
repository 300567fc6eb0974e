"""sparse-ops: sparse-aware operators for Python.

Containers for three storage types (``default``, ``row_sparse``, ``csr``) on cpu and
gpu, with zero-copy views of their components, conversions, validation and files.
See README.md for a tour and ARCHITECTURE.md for the architecture.
"""
import os as _os

from .settings import env_flag as _env_flag

if _env_flag("SPARSE_OPS_CUDA_SIM", False):
    # Must precede the first import of numba anywhere in the process: numba reads it then.
    _os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
    import sys as _sys

    if "numba" in _sys.modules and not _sys.modules["numba"].config.ENABLE_CUDASIM:
        raise ImportError("SPARSE_OPS_CUDA_SIM=1, but numba was imported before sparse_ops without its CUDA "
                          "simulator (numba reads NUMBA_ENABLE_CUDASIM at its first import): set "
                          "SPARSE_OPS_CUDA_SIM=1 in the environment before the process imports numba, or import "
                          "sparse_ops first")

from ._numba_env import configure as _configure_numba  # noqa: E402

_configure_numba()  # the debug mode's separate numba cache: also before numba's import

from .malloc import tune as _tune_malloc  # noqa: E402

_tune_malloc()  # steady training steps: freed temporaries stay mapped (SPARSE_OPS_MALLOC_TUNING=0: off)

from .device import Device, cpu, current_device, gpu, num_gpus, set_default_device  # noqa: E402
from .dtypes import INDEX_DTYPES, VALUE_DTYPES  # noqa: E402
from .errors import (  # noqa: E402
    SparseOpsError,
    DeviceUnavailableError,
    OperatorError,
    SparseFormatError,
    StorageFallbackWarning,
)
from .ndarray import BaseSparseNDArray, CSRNDArray, NDArray, RowSparseNDArray  # noqa: E402
from .creation import (  # noqa: E402
    array,
    csr_matrix,
    empty,
    from_dlpack,
    full,
    ones,
    row_sparse_array,
    zeros,
)
from .storage import cast_storage  # noqa: E402
from .io import load, save  # noqa: E402
from .registry import Op, OpDef, Param, backward_kernel, get_op, kernel, list_ops, register  # noqa: E402
from .dispatch import OpContext, explain, invoke  # noqa: E402
from . import autograd, random  # noqa: E402
from . import container_methods  # noqa: E402

container_methods.install()  # every method the containers get from above, in one place
from .custom import Custom, CustomOp, CustomOpProp  # noqa: E402
from .ops import *  # noqa: E402,F401,F403
from .ops import __all__ as _op_names  # noqa: E402
from . import ops as _ops  # noqa: E402
from .registry import subscribe as _subscribe  # noqa: E402


def _republish(name: str, opdef: "OpDef | None") -> None:
    """Keep ``sparse_ops.<name>`` of the public built-ins the function ``sparse_ops.ops``
    publishes (a replacement, ``register(name, replace=True)``, is what ``sparse_ops.relu``
    then runs; a removal removes it, a restore restores it)."""
    if name in _op_names:
        if opdef is None:
            globals().pop(name, None)
        else:
            globals()[name] = getattr(_ops, name)


_subscribe(_republish)
from . import cuda, sdk  # noqa: E402  (both light: no numba, no CuPy at import)

# sparse_ops.cuda is the top-level cuda/ folder, a namespace package: without __init__.py it
# is, from the repository root, a portion of NVIDIA's `cuda` namespace rather than a shadow
# of it. So its status functions (as torch.cuda's) are given to it here.
from . import device as _device  # noqa: E402
cuda.is_available, cuda.is_simulator = _device.gpu_available, _device.gpu_simulated
cuda.SIMULATED_GPU = _device.SIMULATED_GPU
from .plugins import load_plugins, plugins_info  # noqa: E402
from . import library  # noqa: E402

__version__ = "0.1.0"

# MXNet's class names are the class names; these aliases serve readers of the design doc.
DenseArray = NDArray
RowSparseArray = RowSparseNDArray
CSRArray = CSRNDArray

__all__ = [
    "Device", "cpu", "gpu", "current_device", "set_default_device", "num_gpus",
    "VALUE_DTYPES", "INDEX_DTYPES",
    "SparseOpsError", "SparseFormatError", "DeviceUnavailableError", "StorageFallbackWarning", "OperatorError",
    "NDArray", "BaseSparseNDArray", "RowSparseNDArray", "CSRNDArray",
    "array", "zeros", "ones", "empty", "full", "csr_matrix", "row_sparse_array", "from_dlpack",
    "cast_storage", "save", "load",
    "Op", "OpDef", "Param", "kernel", "backward_kernel", "register", "get_op", "list_ops", "OpContext", "explain", "invoke",
    "autograd", "random", "Custom", "CustomOp", "CustomOpProp", *_op_names,
    "load_plugins", "plugins_info", "library",
]

# Last: installed plugins (entry-point group "sparse_ops.plugins") may import sparse_ops
# themselves. SPARSE_OPS_DISABLE_PLUGIN_AUTOLOAD=1 turns this off.
from .plugins import autoload as _autoload  # noqa: E402

_autoload()
