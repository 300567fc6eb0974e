"""sparse-ops cookbook: a plugin of worked recipes, each a kernel-first operator with cpu
(numba) and gpu (numba.cuda) kernels, gradients as operators and tests.

Importing the package registers every operator (``sparse_ops.ops.<name>``); installed,
it is found through the ``sparse_ops.plugins`` entry point. The recipes:

- ``transpose_csr``, ``transpose_row_sparse`` (transpose.py): MXNet's lib_custom_op examples;
- ``csr_spmm``, ``csr_spmm_t``, ``csr_sddmm``, ``csr_sample`` (spmm.py): GNN aggregation;
- ``csr_row_softmax`` (attention.py): sparse attention;
- ``embedding_bag`` (embedding_bag.py): pooled recommender features;
- ``fm_interaction`` (fm.py): factorization-machine pairwise term for CTR models;
- ``lazy_adagrad``, ``lazy_adam`` (optimizers.py): fused row_sparse optimizer steps;
- ``gcn_norm`` (graph.py): symmetric degree normalisation of an adjacency matrix.
"""
SPARSE_OPS_SDK = ">=0.1,<0.2"
__version__ = "0.1.0"

from .transpose import transpose_csr, transpose_row_sparse  # noqa: E402
from .spmm import csr_sample, csr_sddmm, csr_spmm, csr_spmm_t  # noqa: E402
from .attention import csr_row_softmax  # noqa: E402
from .embedding_bag import embedding_bag  # noqa: E402
from .fm import fm_interaction  # noqa: E402
from .optimizers import lazy_adagrad, lazy_adam  # noqa: E402
from .graph import gcn_norm  # noqa: E402

__all__ = [
    "transpose_csr", "transpose_row_sparse", "csr_spmm", "csr_spmm_t", "csr_sddmm", "csr_sample",
    "csr_row_softmax", "embedding_bag", "fm_interaction", "lazy_adagrad", "lazy_adam", "gcn_norm",
]
