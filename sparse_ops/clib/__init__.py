"""Operator libraries in C, C++ and CUDA (``sparse_ops.h``): loading them into the table.

- ``abi``: the header's structs and codes in ctypes;
- ``declare``: reading and checking an ``so_op_decl``;
- ``opclass``: the ``Op`` class of a declaration (rules, kernels and gradient calling C);
- ``call``: running C kernels and callbacks (``so_array``, ``so_context``, errors);
- ``trampoline``: the compiled fast path into dense cpu kernels;
- ``load``: opening a library (version check, entry point, registrar).

Users reach this through ``sparse_ops.library.load(path)``; nothing here is imported by
``import sparse_ops``.
"""
