"""The three storage containers."""
from .dense import (DENSE_CLASSES, STYPES, NDArray, bump_version, convert, kernel_form, share_version, shares_memory,
                    take_storage, twin, unwritable)
from .sparse import BaseSparseNDArray, CSRNDArray, RowSparseNDArray

__all__ = ["NDArray", "DENSE_CLASSES", "BaseSparseNDArray", "RowSparseNDArray", "CSRNDArray", "STYPES", "kernel_form",
           "take_storage", "twin", "bump_version", "share_version", "shares_memory", "convert",
           "unwritable"]
