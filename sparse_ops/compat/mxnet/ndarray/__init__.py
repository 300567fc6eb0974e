"""``mx.nd``: MXNet 1.x's imperative NDArray API over sparse-ops.

``mx.nd.NDArray`` and the sparse classes of ``mx.nd.sparse`` are the face's subclasses of
sparse-ops' containers (``ndarray.py`` says how their behaviour follows MXNet where the
native API's differs); arrays pass freely between this face and sparse-ops. Creation
functions take MXNet's signatures and defaults (``ctx=``, float32 unless the source is
an NDArray), every registered operator is reachable under its MXNet name
(``mx.nd.dot``, ``mx.nd.Embedding``, ...; resolved at first use), and results are
never 0-d (a full reduction has shape ``(1,)``, as in MXNet 1.x).
"""
from __future__ import annotations

from typing import Any

from ....container_methods import install_mxnet
from . import _op
from .ndarray import (  # noqa: F401  (MXNet's mx.nd names of its ndarray module)
    NDArray, add, arange, array, choose_element_0index, concatenate, divide, empty, equal, eye, fill_element_0index,
    from_dlpack, from_numpy, full, greater, greater_equal, lesser, lesser_equal, linspace, logical_and, logical_or,
    logical_xor, maximum, minimum, modulo, moveaxis, multiply, not_equal, onehot_encode, ones, power, split_v2,
    subtract, to_dlpack_for_read, to_dlpack_for_write, true_divide, waitall, zeros,
)
from .sparse import BaseSparseNDArray, CSRNDArray, RowSparseNDArray  # noqa: F401
from .utils import load, load_frombuffer, save  # noqa: F401
from .op import (Activation, Custom, Embedding, batch_take, gather_nd, normal, random_exponential, random_gamma,  # noqa: F401
                 random_generalized_negative_binomial, random_negative_binomial, random_normal, random_poisson,
                 random_randint, random_uniform, uniform)
from .composed import (BatchNorm, GroupNorm, InstanceNorm, L2Normalization, LayerNorm,  # noqa: F401
                       SequenceLast, SequenceMask, SequenceReverse, SoftmaxActivation, UpSampling, batch_dot,
                       depth_to_space, diag, moments, softmax_cross_entropy, space_to_depth)
from . import _internal, composed, contrib, linalg, ndarray, op, random, sparse, utils  # noqa: F401,F811

install_mxnet()  # x._num_aux, and x.indptr[0].asscalar() on the native API's arrays, as MXNet code reads them


# ---- every registered operator, by its MXNet name (PEP 562) --------------------------------------
def __getattr__(name: str) -> Any:
    fn = _op.cached_function(name)
    # later look-ups skip __getattr__. The cached functions may shadow builtins (sum, max, abs,
    # round, slice): this module therefore holds no code but these two functions; the face's
    # functions live in ndarray.py, utils.py and op.py, whose globals nothing is cached in.
    globals()[name] = fn
    return fn


def __dir__() -> list[str]:
    return sorted(set(__all__) | set(_op.known_names()))


__all__ = [
    "NDArray", "BaseSparseNDArray", "CSRNDArray", "RowSparseNDArray",
    "array", "zeros", "ones", "full", "empty", "arange", "linspace", "eye", "save", "load", "load_frombuffer",
    "waitall", "Custom", "from_numpy", "from_dlpack", "to_dlpack_for_read", "to_dlpack_for_write", "onehot_encode",
    "choose_element_0index", "fill_element_0index", "moveaxis", "split_v2",
    "add", "subtract", "multiply", "divide", "true_divide", "power", "maximum", "minimum",
    "equal", "not_equal", "greater", "greater_equal", "lesser", "lesser_equal",
    "concatenate", "modulo", "logical_and", "logical_or", "logical_xor", "Activation", "Embedding", "contrib",
    "linalg", "random", "sparse", "uniform", "normal", "random_uniform", "random_normal", "random_exponential",
    "random_gamma", "random_poisson", "random_negative_binomial", "random_generalized_negative_binomial",
    "random_randint", "batch_take", "gather_nd", "batch_dot", "SequenceMask", "SequenceLast", "SequenceReverse",
    "moments", "depth_to_space", "space_to_depth", "diag", "LayerNorm", "BatchNorm", "L2Normalization",
]
