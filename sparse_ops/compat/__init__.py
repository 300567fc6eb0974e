"""Faces of other libraries' APIs over sparse-ops, so existing code runs unchanged.

``sparse_ops.compat.mxnet`` is MXNet 1.x's imperative API (``import
sparse_ops.compat.mxnet as mx``). Each face only translates calling conventions: the
arrays, operators and autograd underneath are sparse-ops' own.
"""
