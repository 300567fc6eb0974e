"""The three storage containers."""
from .dense import DENSE_CLASSES, STYPES, NDArray, kernel_form, take_storage
from .sparse import BaseSparseNDArray, CSRNDArray, RowSparseNDArray

__all__ = ["NDArray", "DENSE_CLASSES", "BaseSparseNDArray", "RowSparseNDArray", "CSRNDArray", "STYPES", "kernel_form", "take_storage"]
