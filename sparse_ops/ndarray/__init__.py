"""The three storage containers."""
from .dense import NDArray, STYPES
from .sparse import BaseSparseNDArray, CSRNDArray, RowSparseNDArray

__all__ = ["NDArray", "BaseSparseNDArray", "RowSparseNDArray", "CSRNDArray", "STYPES"]
