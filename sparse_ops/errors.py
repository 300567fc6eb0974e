"""Exception and warning types that users catch by name.

Every error sparse-ops raises on purpose derives from ``SparseOpsError`` (MXNet's
``MXNetError`` in the compatibility face) and from the built-in type that fits
(``ValueError``, ``RuntimeError``), so both kinds of ``except`` work.
"""


class SparseOpsError(Exception):
    """Base of sparse-ops' own errors."""


class SparseFormatError(SparseOpsError, ValueError):
    """A sparse array's components break one of its storage invariants.

    Raised at the boundary (construction, ``check_format``, loading files) so that a
    malformed array never reaches a kernel: numba kernels do not check bounds.
    """


class StorageTypeError(SparseOpsError, ValueError):
    """A storage type name that is not one of ``default``, ``row_sparse``, ``csr``; the
    message names the function and the argument."""


class DeviceUnavailableError(SparseOpsError, RuntimeError):
    """The requested device cannot be used here; the message says what is missing."""


class StorageFallbackWarning(UserWarning):
    """An operator densified its sparse inputs because it has no kernel for their storage types."""


class OperatorError(SparseOpsError, RuntimeError):
    """An operator failed; the message names the operator (and its plugin, if any).
    ``quoted``, when set, is the part of the message that is someone else's words (a
    kernel's exception, a C library's message): faces that reword messages for their
    users keep it verbatim."""

    quoted: str | None = None


def quoting(error: SparseOpsError, source: BaseException) -> SparseOpsError:
    """``error`` carrying the verbatim words of ``source`` (its ``quoted``), for an error
    raised in place of another with the same text, reworded."""
    words = getattr(source, "quoted", None)
    if words is not None:
        error.quoted = words
    return error


class InvalidIndexError(OperatorError, IndexError):
    """An index or id given to an operator is no index: NaN or infinite (a cast would make
    it the dtype's minimum, which clipping turns into row 0), or outside what the operator
    accepts."""
