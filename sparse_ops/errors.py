"""Exception and warning types that users catch by name."""


class SparseFormatError(ValueError):
    """A sparse array's components break one of its storage invariants.

    Raised at the boundary (construction, ``check_format``, loading files) so that a
    malformed array never reaches a kernel: numba kernels do not check bounds.
    """


class DeviceUnavailableError(RuntimeError):
    """The requested device cannot be used here; the message says what is missing."""


class StorageFallbackWarning(UserWarning):
    """An operator densified its sparse inputs because it has no kernel for their storage types."""


class OperatorError(RuntimeError):
    """An operator failed; the message names the operator (and its plugin, if any)."""
