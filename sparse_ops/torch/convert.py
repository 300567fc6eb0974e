"""Containers to torch tensors and back, sharing memory.

=============================  =====================================================
sparse-ops                     PyTorch
=============================  =====================================================
``default`` (``NDArray``)      a strided tensor
``csr`` (``CSRNDArray``)       a ``torch.sparse_csr`` tensor (int32 or int64 indices)
``row_sparse``                 a coalesced hybrid ``torch.sparse_coo`` tensor with
                               ``sparse_dim() == 1`` (what ``nn.Embedding(sparse=True)``
                               gives and ``SparseAdam`` takes)
=============================  =====================================================

Zero-copy holds both ways on the host and on a gpu (DLPack; CuPy arrays on the torch
side's current stream) except where a copy is unavoidable, each one said here:

- a row_sparse array with int32 indices: torch's COO indices are int64, so ``to_torch``
  casts them (the values are still shared);
- an uncoalesced COO tensor is coalesced by ``from_torch`` (torch sorts and sums it);
- a non-contiguous strided tensor is made contiguous by ``from_torch`` (the kernels read
  C-ordered memory); a NumPy array with negative strides likewise by ``to_torch``;
- ``from_torch`` refuses layouts with no storage type of ours (CSC, BSR, BSC, COO with
  ``sparse_dim != 1``), naming the layout and the torch conversion that gets there.

Index arrays of our containers are read-only NumPy views. ``torch.from_numpy`` warns on
non-writable memory, so read-only arrays cross through DLPack, which says read-only
without a warning (torch never writes the index tensors we hand it).

Torch sparse components are validated because numba kernels read memory without bounds
checks, in two steps so that ``from_torch`` stays O(1): the O(1) checks at once (lengths,
dtypes, the ends of ``indptr``) and the O(nnz) ones (index ranges, order, a monotone
``indptr``) on the container's first use, before any operator or conversion reads it (the
deferred check of a container built with ``check=False``). Components reaching a bridged
operator as tensors are validated fully on the way in.
"""
from __future__ import annotations

import re
import warnings
from typing import Any

import numpy as np
import torch

from .. import device as _dev
from ..boundary import DEFERRED, admit, coo_rows
from ..dtypes import VALUE_DTYPES, not_held
from ..errors import SparseFormatError
from ..ndarray import NDArray

_TO_TORCH_DTYPE = {
    np.dtype(np.float16): torch.float16, np.dtype(np.float32): torch.float32,
    np.dtype(np.float64): torch.float64, np.dtype(np.int32): torch.int32, np.dtype(np.int64): torch.int64,
}
_FROM_TORCH_DTYPE = {v: k for k, v in _TO_TORCH_DTYPE.items()}
_VALUE_TORCH_DTYPES = frozenset(_TO_TORCH_DTYPE[d] for d in VALUE_DTYPES)


class TorchBridgeError(TypeError):
    """A tensor or container that the bridge cannot convert: an unsupported layout or dtype."""


def torch_dtype(dtype: Any) -> torch.dtype:
    """The torch dtype of a NumPy dtype (our value and index dtypes)."""
    return _TO_TORCH_DTYPE[np.dtype(dtype)]


def numpy_dtype(dtype: torch.dtype) -> np.dtype:
    """The NumPy dtype of a torch dtype we hold; TorchBridgeError for any other."""
    try:
        return _FROM_TORCH_DTYPE[dtype]
    except KeyError:
        raise TorchBridgeError(torch_wording(f"{not_held(dtype)}; convert it first, e.g. with .to(torch.float32)")) \
            from None


# ---- messages in torch's words ------------------------------------------------------------------
# The library words dtype errors once for every face (``dtypes.not_held``,
# ``dtypes.require_one_dtype``): NumPy's dtype names and NumPy's ``.astype()``. Errors the
# torch bridge raises go through ``torch_wording``, which names dtypes as torch does
# (``torch.float32``) and converts with ``.to(...)``.
_DTYPE_NAMES = ("bfloat16", "float16", "float32", "float64", "complex64", "complex128",
                "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
_DTYPE_WORD = re.compile(r"(?<![\w.])(" + "|".join(_DTYPE_NAMES) + r")(?!\w)")
_DTYPE_QUOTED = re.compile(r"'(" + "|".join(_DTYPE_NAMES) + r")'")  # dtype='float16': torch passes torch.float16
_DTYPE_BOOL = re.compile(r"(?<=dtype )bool(?!\w)")  # "bool" alone is a dtype only after "dtype"
_ASTYPE = re.compile(r"\.astype\(\)")
_TARGET = re.compile(r"but [^;]*? is (" + "|".join(_DTYPE_NAMES) + r");")  # require_one_dtype's wording


def spoken(exc: BaseException) -> str:
    """``exc``'s message in torch's words (``torch_wording``), the words it quotes from a
    kernel or a C library (``OperatorError.quoted``) left as they were written."""
    message, quoted = str(exc), getattr(exc, "quoted", None)
    at = message.rfind(quoted) if quoted else -1
    if at < 0:
        return torch_wording(message)
    return torch_wording(message[:at]) + quoted + torch_wording(message[at + len(quoted):])


def torch_wording(message: str) -> str:
    """``message`` as a torch user reads it: NumPy dtype names become torch's
    (``float32`` -> ``torch.float32``; names already prefixed are kept) and a conversion
    with ``.astype()`` becomes one with ``.to(...)``, naming the dtype the message asks for
    when it says one (``input 1 is float64 but input 0 is float32; ...`` ->
    ``.to(torch.float32)``); a quoted dtype a parameter is told to take (``dtype='float16'``)
    becomes the torch dtype itself (``dtype=torch.float16``)."""
    if ".astype()" in message:
        target = _TARGET.search(message)
        to = f".to(torch.{target.group(1)})" if target else ".to(dtype)"
        message = _ASTYPE.sub(lambda _: to, message)
    message = _DTYPE_QUOTED.sub(r"torch.\1", message)
    message = _DTYPE_WORD.sub(r"torch.\1", message)
    return _DTYPE_BOOL.sub("torch.bool", message)


# ---- one array <-> one tensor -------------------------------------------------------------------
def tensor_of(a: Any) -> torch.Tensor:
    """A tensor sharing the memory of a NumPy or CuPy array (a copy only for negative strides)."""
    if isinstance(a, np.ndarray):
        if a.flags.writeable:
            try:
                return torch.from_numpy(a)
            except ValueError:  # negative strides: torch has none
                return torch.from_numpy(np.ascontiguousarray(a))
        try:
            return torch.from_dlpack(a)  # read-only memory: DLPack carries the flag, no warning
        except (BufferError, TypeError, RuntimeError):
            with warnings.catch_warnings():  # an older NumPy exports no read-only DLPack
                warnings.simplefilter("ignore", UserWarning)
                return torch.from_numpy(np.ascontiguousarray(a))
    if _dev.is_cupy_array(a):
        return torch.utils.dlpack.from_dlpack(a)
    raise TorchBridgeError(f"expected a NumPy or CuPy array, got a {type(a).__name__}")


def array_of(t: torch.Tensor) -> Any:
    """The NumPy (cpu) or CuPy (cuda) array sharing a dense tensor's memory (``t`` must be
    contiguous and of a dtype we hold); autograd history is not followed (detached)."""
    if t.device.type == "cpu":
        return t.numpy(force=True)  # detached; on the host a view (our dtypes have no conj/neg bits)
    if t.device.type == "cuda":
        import cupy

        # torch's current stream is where our kernels run (see library.py): no stream hand-over
        return cupy.from_dlpack(t.detach())
    raise TorchBridgeError(f"tensors on device {t.device} are not supported (cpu and cuda are)")


def device_of(t: torch.Tensor) -> _dev.Device:
    """Our device for a tensor's device: cpu, or gpu(i) for cuda:i."""
    if t.device.type == "cpu":
        return _dev.cpu()
    if t.device.type == "cuda":
        return _dev.gpu(t.device.index or 0)
    raise TorchBridgeError(f"tensors on device {t.device} are not supported (cpu and cuda are)")


def torch_device(device: _dev.Device) -> torch.device:
    """torch's device for one of ours."""
    return torch.device("cpu") if device.device_type == "cpu" or _dev.array_module(device) is np \
        else torch.device("cuda", device.device_id)


# ---- containers -----------------------------------------------------------------------------------
_csr_warned = False


def sparse_csr(values: torch.Tensor, indices: torch.Tensor, indptr: torch.Tensor,
               shape: tuple[int, int]) -> torch.Tensor:
    """A ``torch.sparse_csr`` tensor over these components (no copy, no torch-side check:
    ours validated them)."""
    global _csr_warned
    if _csr_warned:
        return torch.sparse_csr_tensor(indptr, indices, values, shape, check_invariants=False)
    with warnings.catch_warnings():  # torch's one-time "csr support is in beta" notice
        warnings.simplefilter("ignore", UserWarning)
        t = torch.sparse_csr_tensor(indptr, indices, values, shape, check_invariants=False)
    _csr_warned = True
    return t


def sparse_rows(values: torch.Tensor, indices: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """A coalesced hybrid COO tensor (``sparse_dim == 1``) storing rows ``indices`` (int64,
    sorted, unique: a copy when they are int32) of an array of ``shape``."""
    if indices.dtype != torch.int64:
        indices = indices.to(torch.int64)
    return torch.sparse_coo_tensor(indices.view(1, -1), values, tuple(shape), is_coalesced=True,
                                   check_invariants=False)


def to_torch(x: NDArray) -> torch.Tensor:
    """The torch tensor of a container, sharing its memory: dense → strided, csr →
    ``sparse_csr`` (index dtype kept), row_sparse → coalesced COO with ``sparse_dim=1``
    (int32 row indices are cast to int64: the one copy; values stay shared)."""
    if not isinstance(x, NDArray):
        raise TorchBridgeError(f"to_torch takes a sparse_ops container, got a {type(x).__name__}")
    if x.stype == "default":
        return tensor_of(x._data)
    shape = x.shape  # validates a container built with check=False
    if x.stype == "csr":
        return sparse_csr(tensor_of(x._data), tensor_of(x._indices), tensor_of(x._indptr), shape)
    return sparse_rows(tensor_of(x._data), tensor_of(x._indices), shape)


def _layout_refusal(t: torch.Tensor, what: str) -> TorchBridgeError:
    layout = str(t.layout).replace("torch.", "")
    if t.layout == torch.sparse_coo:
        how = (f"this COO tensor has sparse_dim={t.sparse_dim()}; row_sparse is COO with sparse_dim=1: "
               "convert with t.to_sparse_csr() (a copy, 2-d) for csr, or t.to_dense().to_sparse(1) for row_sparse")
    elif t.layout in (torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc):
        how = "convert it with t.to_sparse_csr() (a copy) for csr, or t.to_dense() for a dense array"
    else:
        how = "convert it to a strided, sparse_csr or sparse_coo (sparse_dim=1) tensor first"
    return TorchBridgeError(f"{what}: layout {layout} has no sparse-ops storage type; {how}")


def components(t: torch.Tensor, what: str = "from_torch") -> tuple[str, tuple[torch.Tensor, ...], tuple[int, ...]]:
    """(storage type, component tensors, shape) of a tensor: dense ``(t,)``, csr
    ``(values, indices, indptr)``, row_sparse ``(values, row indices)``. Shares memory
    except for the documented copies (coalescing, contiguity)."""
    if t.is_nested:
        raise TorchBridgeError(f"{what}: nested tensors have no sparse-ops storage type; pad them first, "
                               "e.g. with t.to_padded_tensor(0)")
    layout = t.layout
    if layout == torch.strided:
        if not t.is_contiguous():
            t = t.contiguous()  # a copy: kernels read C-ordered memory
        return "default", (t,), tuple(t.shape)
    if layout == torch.sparse_csr:
        if t.dim() != 2 or t.values().dim() != 1:
            raise TorchBridgeError(f"{what}: csr tensors are 2-d with scalar values; this one has shape "
                                   f"{tuple(t.shape)} and values of shape {tuple(t.values().shape)} "
                                   "(batched or hybrid csr is not supported)")
        return "csr", (t.values(), t.col_indices(), t.crow_indices()), tuple(t.shape)
    if layout == torch.sparse_coo:
        if t.sparse_dim() != 1:
            raise _layout_refusal(t, what)
        t = coalesced(t)
        return "row_sparse", (t._values(), t._indices()[0]), tuple(t.shape)
    raise _layout_refusal(t, what)


def coalesced(t: torch.Tensor) -> torch.Tensor:
    """A COO tensor with ``sparse_dim == 1`` coalesced (a copy: sorted, duplicates summed),
    its row indices checked first (``boundary.coo_rows``): torch checks none by default and
    corrupts its heap coalescing a negative one (a common padding id)."""
    if t.is_coalesced():
        return t
    coo_rows(array_of(t._indices()[0]), t.shape[0])
    return t.coalesce()


def array_from_components(stype: str, parts: tuple[torch.Tensor, ...], shape: tuple[int, ...]) -> NDArray:
    """Our container over component tensors (shared memory). Sparse components get the
    O(1) checks now and the full check on first use (O(1) here: a conversion should not
    read every index, and the first use reads them anyway)."""
    if parts[0].dtype not in _VALUE_TORCH_DTYPES:
        numpy_dtype(parts[0].dtype)  # raises, naming the dtype
    arrays = [array_of(p if p.is_contiguous() else p.contiguous()) for p in parts]
    return admit(stype, arrays, shape, device_of(parts[0]), DEFERRED)


def from_torch(t: torch.Tensor) -> NDArray:
    """The container of a torch tensor, sharing its memory: strided → dense (laid out as the
    tensor is, strides included, as ``from_dlpack`` shares it: a write shows in the tensor,
    and one into an expanded tensor, whose entries share memory, is refused), ``sparse_csr`` → csr (index dtype kept),
    COO with ``sparse_dim=1`` → row_sparse (an uncoalesced one is coalesced: a copy).
    Sparse components are validated (``SparseFormatError`` naming the broken invariant):
    lengths, dtypes and ``indptr``'s ends here, in O(1); index ranges and order on the
    result's first use (any operator, conversion or ``check_format()``). The result is
    outside torch's autograd (the memory is shared, the history is not): call ``sparse_ops.torch.ops.<name>`` on tensors to stay differentiable."""
    if not isinstance(t, torch.Tensor):
        raise TorchBridgeError(f"from_torch takes a torch.Tensor, got a {type(t).__name__}")
    try:
        if t.layout == torch.strided and not t.is_nested:
            if t.dtype not in _VALUE_TORCH_DTYPES:
                numpy_dtype(t.dtype)  # raises, naming the dtype
            return admit("default", [array_of(t)], tuple(t.shape), device_of(t), DEFERRED)
        stype, parts, shape = components(t)
        return array_from_components(stype, parts, shape)
    except SparseFormatError as exc:
        raise SparseFormatError(f"from_torch: {exc}") from None
    except TorchBridgeError as exc:  # layouts are named with the prefix already
        raise TorchBridgeError(str(exc) if str(exc).startswith("from_torch") else f"from_torch: {exc}") from None
