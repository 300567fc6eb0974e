"""The recipes' kernels (``rows``): one body per kernel for cpu and gpu, built by
``sparse_ops.sdk.rowkernel``. Imported lazily by the operators; nothing compiles at import."""
