"""sparse_ops over Dask: registered operators, built-in or plugin, on sparse data cut into
row blocks across a cluster (``pip install "sparse-ops[dask]"``).

- ``DistributedArray``: a csr / row_sparse / dense array as row blocks, each a lazy Dask
  value; ``from_array``, ``from_blocks``, ``from_delayed``, ``from_npz`` (one file per
  block, read on the workers); ``shape``, ``nnz``, ``stypes``, ``compute()``, ``persist()``.
- ``apply(op, *inputs, **params)``: run an operator over the blocks as its declaration
  (``Op.partition``) says: per block ("rows"), or per block then summed with ``add_n``
  ("sum"); refused otherwise. Operands it does not cut go whole to every worker, once.
- ``ship_library`` / ``check_workers``: plugins on the workers.
- ``DataParallel``: data-parallel gradient steps (row_sparse gradients summed across
  blocks, parameters and their update on the client).

``import sparse_ops`` does not import Dask; this module does.
"""
try:
    import dask  # noqa: F401
    import distributed  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"sparse_ops.dask needs Dask and dask.distributed ({exc}); install them with "
        f"pip install \"sparse-ops[dask]\"") from exc

from .collection import (  # noqa: E402
    BlockInfo,
    BlockLostError,
    DistributedArray,
    concat_rows,
    even_splits,
    from_array,
    from_blocks,
    from_delayed,
)
from .io import from_npz, peek, to_npz  # noqa: E402
from .apply import (  # noqa: E402
    NotPartitionableError,
    OperatorMissingOnWorkerError,
    PartitionMismatchError,
    apply,
)
from .workers import check_workers, ship_library  # noqa: E402
from .training import DataParallel  # noqa: E402

__all__ = [
    "DistributedArray", "BlockInfo", "BlockLostError", "from_array", "from_blocks", "from_delayed",
    "from_npz", "to_npz", "peek",
    "concat_rows", "even_splits", "apply", "NotPartitionableError", "PartitionMismatchError",
    "OperatorMissingOnWorkerError", "ship_library", "check_workers", "DataParallel",
]
