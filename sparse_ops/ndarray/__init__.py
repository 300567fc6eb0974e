"""The three storage containers."""
from .dense import STYPES, NDArray, kernel_form, take_storage
from .sparse import BaseSparseNDArray, CSRNDArray, RowSparseNDArray

__all__ = ["NDArray", "BaseSparseNDArray", "RowSparseNDArray", "CSRNDArray", "STYPES", "kernel_form", "take_storage"]
