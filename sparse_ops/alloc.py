"""Host memory for container values: large arrays begin on a cache line.

glibc hands out large blocks 16 bytes past a page boundary, so every row of a NumPy array
from ``np.empty`` sits 16 bytes off a cache line, and a kernel that loads or stores a row
in 64-byte vectors (the csr @ dense kernels hold rows in AVX-512 registers) touches two
lines for each where one would do. Arrays of ``ALIGNED_MIN_BYTES`` or more are placed on an
``ALIGNMENT``-byte boundary here, as PyTorch's and MKL's allocators place theirs; smaller
ones come from NumPy as they are, where the extra calls would cost more than the lines save.

The arrays are ordinary C-contiguous, writable NumPy arrays (views into a slightly larger
block that they keep alive).
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

ALIGNMENT = 64
ALIGNED_MIN_BYTES = 1 << 20


def wants_alignment(shape: tuple[int, ...], dtype: np.dtype) -> bool:
    """Whether arrays of this shape and dtype are placed on a cache line (``empty``)."""
    return math.prod(shape) * dtype.itemsize >= ALIGNED_MIN_BYTES


def empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """``np.empty(shape, dtype)``, cache-line aligned when large."""
    return _placed(np.empty, shape, np.dtype(dtype))


def zeros(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """``np.zeros(shape, dtype)``, cache-line aligned when large (still calloc's lazily
    zeroed pages)."""
    return _placed(np.zeros, shape, np.dtype(dtype))


def copy(a: np.ndarray, dtype: Any = None) -> np.ndarray:
    """A copy of ``a`` converted to ``dtype`` as ``np.array(a, dtype, copy=True)`` makes it
    (NumPy's unsafe casting, ``a``'s own layout), cache-line aligned when large and
    C-contiguous."""
    dtype = a.dtype if dtype is None else np.dtype(dtype)
    if not a.flags.c_contiguous or not wants_alignment(a.shape, dtype):
        return np.array(a, dtype=dtype, copy=True)
    out = empty(a.shape, dtype)
    np.copyto(out, a, casting="unsafe")
    return out


def aligned_bytes(nbytes: int) -> np.ndarray:
    """``nbytes`` uninitialised bytes starting a cache line, whatever the size (a
    workspace's pool: what ``ctx.workspace`` promises kernels, C ones included)."""
    block = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    skip = -block.__array_interface__["data"][0] % ALIGNMENT
    return block[skip:skip + nbytes]


def is_aligned(a: np.ndarray) -> bool:
    """Whether ``a``'s first element starts a cache line."""
    return a.__array_interface__["data"][0] % ALIGNMENT == 0


def _placed(make: Callable[..., np.ndarray], shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    count = math.prod(shape)
    if count * dtype.itemsize < ALIGNED_MIN_BYTES:
        return make(shape, dtype)
    block = make(count + -(-ALIGNMENT // dtype.itemsize), dtype)
    skip = -block.__array_interface__["data"][0] % ALIGNMENT
    first = skip // dtype.itemsize if skip % dtype.itemsize == 0 else 0  # (malloc's blocks: 16-byte aligned)
    return block[first:first + count].reshape(shape)
