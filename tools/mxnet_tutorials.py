#!/usr/bin/env python3
"""Run MXNet 1.9.1's sparse NDArray tutorials through ``sparse_ops.compat.mxnet``.

Usage::

    python tools/mxnet_tutorials.py /path/to/mxnet [--tag 1.9.1] [-v]

The tutorials (``docs/python_docs/python/tutorials/packages/ndarray/sparse/csr.md``,
``row_sparse.md`` and ``train.md``) are read from MXNet's git directory or checkout at the
tag, as ``tools/run_mxnet_tests.py`` reads its tests; nothing of MXNet is copied here.
Their ```python cells run in order, one namespace per tutorial (as a notebook's kernel),
with only the import lines rewritten (``mxnet_source.rewrite_imports``), in a
temporary working folder (the csr tutorial writes a file). A cell's last expression is
evaluated as a notebook shows it.

A cell is skipped, with the reason, when it needs what the face does not have: the Symbol
API, Module, Gluon, metrics, a download; or when it reads a name that only a skipped cell
defines (a Symbol executor, say). The import statements of a skipped cell still run, so
later cells see the modules.

After chosen cells, checks written here compare what MXNet 1.9.1 shows there (the
arrays' Python types, storage types, shapes, dtypes and values) with what the face
produced; the expected values come from MXNet 1.9.1's documented semantics and
NumPy/SciPy, not from running the face. Where the tutorial's printed output predates 1.9.1
(its ``NDArrayIter`` example shows csr batches; 1.9.1 slices with ``slice_axis`` and gives
dense ones), the check follows 1.9.1.

``run(root, tag)`` returns ``[(tutorial, cells run, failures)]``; the exit status of the
script is 0 only without failures.
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import io
import os
import re
import sys
import tempfile
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mxnet_source import read_source, rewrite_imports  # noqa: E402

TUTORIAL_DIR = "docs/python_docs/python/tutorials/packages/ndarray/sparse"
TUTORIALS = ("csr", "row_sparse", "train")

# why a cell cannot run through the face: the first pattern that matches names the reason
SKIP_RULES = [
    (re.compile(r"\bmx\.mod\b|\bModule\("), "uses the Module API"),
    (re.compile(r"\bmx\.sym(bol)?\b|\bsimple_bind\(|\.bind\(|\bVariable\("), "uses the Symbol API"),
    (re.compile(r"\bgluon\b"), "uses Gluon"),
    (re.compile(r"\bmx\.metric\b"), "uses mx.metric (part of the Module/Gluon training API)"),
    (re.compile(r"\bdownload\(|\bget_bz2_data\(|\bget_mnist|\burllib\b|\brequests\."), "downloads data"),
]

_CELL = re.compile(r"^```python[ \t]*\n(.*?)^```", re.S | re.M)


# ---- cells ------------------------------------------------------------------------------------------------
def cells_of(markdown: str) -> list[str]:
    """The ```python cells of a tutorial, in order."""
    return _CELL.findall(markdown)


def _assigned(tree: ast.AST) -> set[str]:
    """Names a cell binds other than by import."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out.add(node.name)
    return out


def _loaded(tree: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _imports(tree: ast.Module) -> ast.Module:
    """The top-level import statements of a cell, as a module of their own."""
    return ast.Module(body=[s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))], type_ignores=[])


# ---- checks -------------------------------------------------------------------------------------------------
@dataclass
class Shown:
    """What a cell left: the namespace, the value of its last expression, its printed text."""

    ns: dict
    value: Any
    out: str


def _ndarray(x: Any, what: str, cls: str, stype: str, shape: tuple, dtype: Any, values: Any = None) -> None:
    """``x`` is an ``mx.nd`` array of class ``cls`` (NDArray, CSRNDArray, RowSparseNDArray)
    with this storage type, shape, dtype and (when given) values."""
    import sparse_ops.compat.mxnet as mx

    classes = {"NDArray": mx.nd.NDArray, "CSRNDArray": mx.nd.sparse.CSRNDArray,
               "RowSparseNDArray": mx.nd.sparse.RowSparseNDArray}
    assert isinstance(x, classes[cls]), f"{what} is a {type(x).__name__}, MXNet gives a {cls}"
    assert x.stype == stype, f"{what}.stype is {x.stype!r}, MXNet gives {stype!r}"
    assert tuple(x.shape) == tuple(shape), f"{what}.shape is {x.shape}, MXNet gives {shape}"
    assert np.dtype(x.dtype) == np.dtype(dtype), f"{what}.dtype is {np.dtype(x.dtype)}, MXNet gives {np.dtype(dtype)}"
    if values is not None:
        got = x.asnumpy()
        expected = np.asarray(values)
        assert got.shape == expected.shape and np.allclose(got, expected, rtol=1e-6, atol=0, equal_nan=True), \
            f"{what} holds {got.tolist()}, MXNet gives {expected.tolist()}"


def _numpy(x: Any, what: str, dtype: Any, values: Any) -> None:
    """``x`` is a NumPy array of this dtype and these values (what ``asnumpy()`` shows)."""
    assert isinstance(x, np.ndarray), f"{what} is a {type(x).__name__}, MXNet gives a numpy.ndarray"
    assert x.dtype == np.dtype(dtype), f"{what}.dtype is {x.dtype}, MXNet gives {np.dtype(dtype)}"
    expected = np.asarray(values)
    assert x.shape == expected.shape and np.allclose(x, expected, rtol=1e-6, atol=0, equal_nan=True), \
        f"{what} is {x.tolist()}, MXNet gives {expected.tolist()}"


def _equal(got: Any, expected: Any, what: str) -> None:
    assert got == expected, f"{what} is {got!r}, MXNet gives {expected!r}"


# the matrix of the csr tutorial and its parts
_CSR_DENSE = np.array([[7, 0, 8, 0], [0, 0, 0, 0], [0, 9, 0, 0]])
_ONES22 = np.ones((2, 2), dtype=np.float32)


def _log(x: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(x.astype(np.float32))


def _gpu_cell(s: Shown) -> None:
    """The GPU cell: on a machine with a GPU ``a`` is a csr/row_sparse array there; without
    one, the cell caught an ``MXNetError`` and wrote it to stderr."""
    import sparse_ops.compat.mxnet as mx

    if mx.context.num_gpus() > 0:
        a = s.ns["a"]
        _equal(a.context.device_type, "gpu", "a.context.device_type")
        _equal(tuple(a.shape), (100, 100), "a.shape")
        _equal(a.asnumpy().any(), False, "a.asnumpy().any()")


def _csr_cells() -> dict[int, tuple[str, Callable[[Shown], None]]]:
    def c1(s: Shown) -> None:
        _ndarray(s.ns["a"], "a", "CSRNDArray", "csr", (3, 4), np.float32, _CSR_DENSE)  # lists: float32
        _numpy(s.value, "a.asnumpy()", np.float32, _CSR_DENSE)

    def c2(s: Shown) -> None:  # numpy int64 parts: the array takes their dtype
        _ndarray(s.ns["b"], "b", "CSRNDArray", "csr", (3, 4), np.int64, _CSR_DENSE)
        _numpy(s.value, "b.asnumpy()", np.int64, _CSR_DENSE)

    def c3(s: Shown) -> None:
        _numpy(s.value["a"], "shown['a']", np.float32, _CSR_DENSE)
        _numpy(s.value["b"], "shown['b']", np.int64, _CSR_DENSE)

    def c4(s: Shown) -> None:  # from a SciPy matrix: its dtype (int64)
        _ndarray(s.ns["d"], "d", "CSRNDArray", "csr", (3, 4), np.int64, _CSR_DENSE)
        _equal(s.out.strip(), "d:" + str(_CSR_DENSE), "the printed line")

    def c5(s: Shown) -> None:
        big = s.ns["big_array"]
        _ndarray(big, "big_array", "NDArray", "default", (1000, 100), np.float32)
        dense = big.asnumpy()
        assert set(np.unique(dense).tolist()) <= {0.0, 1.0}, "round(uniform(0, 1)) holds only 0 and 1"
        nnz = int(np.count_nonzero(dense))
        _ndarray(s.ns["big_array_csr"], "big_array_csr", "CSRNDArray", "csr", (1000, 100), np.float32, dense)
        rows, cols = np.nonzero(dense)
        _ndarray(s.ns["data"], "big_array_csr.data", "NDArray", "default", (nnz,), np.float32, np.ones(nnz))
        _ndarray(s.ns["indices"], "big_array_csr.indices", "NDArray", "default", (nnz,), np.int64, cols)
        _ndarray(s.ns["indptr"], "big_array_csr.indptr", "NDArray", "default", (1001,), np.int64,
                 np.concatenate([[0], np.cumsum(np.count_nonzero(dense, axis=1))]))
        assert rows.size == nnz

    def c6(s: Shown) -> None:
        _equal(s.value, (np.float32, np.float16), "(e.dtype, f.dtype)")
        _ndarray(s.ns["e"], "e", "CSRNDArray", "csr", (3, 4), np.float32, _CSR_DENSE)
        _ndarray(s.ns["f"], "f", "CSRNDArray", "csr", (3, 4), np.float16, _CSR_DENSE)  # array() of a csr: csr

    def c7(s: Shown) -> None:
        _numpy(s.value, "a.asnumpy()", np.float32, _CSR_DENSE)

    def c8(s: Shown) -> None:
        _equal(s.value["a.stype"], "csr", "a.stype")
        _ndarray(s.value["data"], "a.data", "NDArray", "default", (3,), np.float32, [7, 8, 9])
        _ndarray(s.value["indices"], "a.indices", "NDArray", "default", (3,), np.int64, [0, 2, 1])
        _ndarray(s.value["indptr"], "a.indptr", "NDArray", "default", (4,), np.int64, [0, 2, 2, 3])

    def conversions(s: Shown) -> None:
        _ndarray(s.value["csr"], "csr", "CSRNDArray", "csr", (2, 2), np.float32, _ONES22)
        _ndarray(s.value["dense"], "dense", "NDArray", "default", (2, 2), np.float32, _ONES22)

    def c11(s: Shown) -> None:
        _equal(s.value["b is a"], False, "b is a")
        for name in ("b", "c", "d"):
            _numpy(s.value[f"{name}.asnumpy()"], f"{name}.asnumpy()", np.float32, _ONES22)
            _ndarray(s.ns[name], name, "CSRNDArray", "csr", (2, 2), np.float32, _ONES22)

    def c12(s: Shown) -> None:  # copying into a csr keeps its storage type
        _equal(s.value, {"e.stype": "csr", "f.stype": "csr", "g.stype": "default"}, "the storage types")
        for name in ("e", "f"):
            _ndarray(s.ns[name], name, "CSRNDArray", "csr", (2, 2), np.float32, _ONES22)

    def c13(s: Shown) -> None:
        full = np.arange(6, dtype=np.float32).reshape(3, 2)
        _ndarray(s.value["a"], "a", "CSRNDArray", "csr", (3, 2), np.float32, full)
        _numpy(s.value["b"], "a[1:2].asnumpy()", np.float32, full[1:2])
        _numpy(s.value["c"], "a[:].asnumpy()", np.float32, full)

    def c14(s: Shown) -> None:  # dot(csr, dense) is dense
        _ndarray(s.value["out"], "out", "NDArray", "default", (3, 1), np.float32, _CSR_DENSE @ np.ones((4, 1)))

    def c15(s: Shown) -> None:
        _equal(s.value, {"b.stype": "csr", "c.stype": "default"}, "the storage types")
        _ndarray(s.ns["b"], "b", "CSRNDArray", "csr", (3, 4), np.float32, _CSR_DENSE * 2)
        _ndarray(s.ns["c"], "c", "NDArray", "default", (3, 4), np.float32, _CSR_DENSE + 1)

    def c16(s: Shown) -> None:  # the dense fallback: log(0) = -inf, cast back to csr for e
        _equal(s.value, {"a.stype": "csr", "d.stype": "default", "e.stype": "csr"}, "the storage types")
        _ndarray(s.ns["d"], "d", "NDArray", "default", (3, 4), np.float32, _log(_CSR_DENSE))
        _ndarray(s.ns["e"], "e", "CSRNDArray", "csr", (3, 4), np.float32, _log(_CSR_DENSE))

    def c17(s: Shown) -> None:  # MXNet 1.9.1 slices each batch with slice_axis: dense batches
        full = np.arange(36, dtype=np.float32).reshape(9, 4)
        assert isinstance(s.value, list) and len(s.value) == 3, f"3 batches expected, got {s.value!r:.200}"
        for i, batch in enumerate(s.value):
            _ndarray(batch, f"batch {i}.data[0]", "NDArray", "default", (3, 4), np.float32, full[3 * i:3 * i + 3])

    def c18(s: Shown) -> None:  # re-read one epoch of the LibSVM file the cell wrote
        dense = np.zeros((9, 10), dtype=np.float32)
        for r, c, v in [(0, 0, 1), (0, 2, 2), (1, 0, 3), (1, 5, 4), (2, 2, 5), (2, 8, 6), (2, 9, 7), (3, 3, 8),
                        (4, 0, .5), (4, 9, 1.5), (6, 0, -.6), (6, 1, 2.25), (6, 2, 1.25), (7, 1, 2),
                        (7, 2, -1.25), (8, 2, -1.2)]:
            dense[r, c] = v
        labels = np.array([1, 1, 1, 1, -1, -2, -3, -3, 4], dtype=np.float32)
        it = s.ns["data_train"]
        it.reset()
        batches = 0
        for i, batch in enumerate(it):
            _ndarray(it.getdata(), f"batch {i} getdata()", "CSRNDArray", "csr", (3, 10), np.float32,
                     dense[3 * i:3 * i + 3])
            _ndarray(it.getlabel(), f"batch {i} getlabel()", "NDArray", "default", (3,), np.float32,
                     labels[3 * i:3 * i + 3])
            _equal(batch.pad, 0, f"batch {i}.pad")
            batches += 1
        _equal(batches, 3, "the number of batches")

    return {1: ("a = mx.nd.sparse.csr_matrix", c1), 2: ("b = mx.nd.sparse.csr_matrix", c2),
            3: ("{'a':a.asnumpy()", c3), 4: ("mx.nd.sparse.array(c)", c4), 5: ("big_array_csr", c5),
            6: ("f = mx.nd.array(a, dtype=np.float16)", c6), 7: ("a.asnumpy()", c7), 8: ("indptr = a.indptr", c8),
            9: ("csr = ones.tostype('csr')", conversions), 10: ("cast_storage(ones, 'csr')", conversions),
            11: ("b = a.copy()", c11), 12: ("g.copyto(f)", c12), 13: ("b = a[1:2].asnumpy()", c13),
            14: ("mx.nd.sparse.dot(a, rhs)", c14), 15: ("b = a * 2", c15), 16: ("mx.nd.log(a, out=e)", c16),
            17: ("mx.io.NDArrayIter(data, labels", c17), 18: ("mx.io.LibSVMIter", c18),
            19: ("gpu_device=mx.gpu()", _gpu_cell)}


_RSP_DENSE = np.array([[0, 0], [1, 2], [0, 0], [0, 0], [3, 4], [0, 0]])


def _row_sparse_cells() -> dict[int, tuple[str, Callable[[Shown], None]]]:
    def c1(s: Shown) -> None:
        _ndarray(s.value["X"], "X", "NDArray", "default", (1, 2), np.float32, [[1, 0]])
        _ndarray(s.value["W"], "W", "NDArray", "default", (2, 3), np.float32, [[3, 4, 5], [6, 7, 8]])
        _ndarray(s.value["Y"], "Y", "NDArray", "default", (1, 3), np.float32, [[3, 4, 5]])

    def c2(s: Shown) -> None:  # X.T @ ones(1, 3)
        _ndarray(s.value, "grad_W", "NDArray", "default", (2, 3), np.float32, [[1, 1, 1], [0, 0, 0]])

    def c7(s: Shown) -> None:
        _ndarray(s.value["a"], "a", "RowSparseNDArray", "row_sparse", (6, 2), np.float32, _RSP_DENSE)
        _ndarray(s.value["b"], "b", "RowSparseNDArray", "row_sparse", (6, 2), np.int64, _RSP_DENSE)  # numpy int64

    def c8(s: Shown) -> None:
        _equal(s.value, (np.float32, np.float16), "(c.dtype, d.dtype)")
        _ndarray(s.ns["c"], "c", "RowSparseNDArray", "row_sparse", (6, 2), np.float32, _RSP_DENSE)
        _ndarray(s.ns["d"], "d", "RowSparseNDArray", "row_sparse", (6, 2), np.float16, _RSP_DENSE)

    def c9(s: Shown) -> None:
        _numpy(s.value, "a.asnumpy()", np.float32, _RSP_DENSE)

    def c10(s: Shown) -> None:
        _equal(s.value["a.stype"], "row_sparse", "a.stype")
        _ndarray(s.value["data"], "a.data", "NDArray", "default", (2, 2), np.float32, [[1, 2], [3, 4]])
        _ndarray(s.value["indices"], "a.indices", "NDArray", "default", (2,), np.int64, [1, 4])

    def conversions(s: Shown) -> None:
        _ndarray(s.value["rsp"], "rsp", "RowSparseNDArray", "row_sparse", (2, 2), np.float32, _ONES22)
        _ndarray(s.value["dense"], "dense", "NDArray", "default", (2, 2), np.float32, _ONES22)

    def c13(s: Shown) -> None:
        _equal(s.value["b is a"], False, "b is a")
        for name in ("b", "c", "d"):
            _numpy(s.value[f"{name}.asnumpy()"], f"{name}.asnumpy()", np.float32, _ONES22)
            _ndarray(s.ns[name], name, "RowSparseNDArray", "row_sparse", (2, 2), np.float32, _ONES22)

    def c14(s: Shown) -> None:
        _equal(s.value, {"e.stype": "row_sparse", "f.stype": "row_sparse", "g.stype": "default"}, "the storage types")
        for name in ("e", "f"):
            _ndarray(s.ns[name], name, "RowSparseNDArray", "row_sparse", (2, 2), np.float32, _ONES22)

    def c15(s: Shown) -> None:  # retain keeps the stored rows among [0, 1]: row 0 only
        full = np.array([[1, 2], [0, 0], [3, 4], [5, 6], [0, 0]], dtype=np.float32)
        kept = np.zeros_like(full)
        kept[0] = full[0]
        _numpy(s.value["rsp.asnumpy()"], "rsp.asnumpy()", np.float32, full)
        _ndarray(s.value["rsp_retained"], "rsp_retained", "RowSparseNDArray", "row_sparse", (5, 2), np.float32, kept)
        _numpy(s.value["rsp_retained.asnumpy()"], "rsp_retained.asnumpy()", np.float32, kept)
        _ndarray(s.ns["rsp_retained"].indices, "rsp_retained.indices", "NDArray", "default", (1,), np.int64, [0])

    lhs = np.zeros((3, 5), dtype=np.float32)
    lhs[0, 0], lhs[0, 2], lhs[2, 1] = 7, 8, 9
    tdot = lhs.T @ np.ones((3, 2), dtype=np.float32)

    def c16(s: Shown) -> None:  # dot(csr.T, dense) is row_sparse
        _ndarray(s.value["transpose_dot"], "transpose_dot", "RowSparseNDArray", "row_sparse", (5, 2), np.float32,
                 tdot)
        _numpy(s.value["transpose_dot.asnumpy()"], "transpose_dot.asnumpy()", np.float32, tdot)

    def c17(s: Shown) -> None:
        _equal(s.value, {"b.stype": "row_sparse", "c.stype": "default"}, "the storage types")
        _ndarray(s.ns["b"], "b", "RowSparseNDArray", "row_sparse", (5, 2), np.float32, tdot * 2)
        _ndarray(s.ns["c"], "c", "NDArray", "default", (5, 2), np.float32, tdot + 1)

    def c18(s: Shown) -> None:
        _equal(s.value, {"a.stype": "row_sparse", "d.stype": "default", "e.stype": "row_sparse"}, "the storage types")
        _ndarray(s.ns["d"], "d", "NDArray", "default", (5, 2), np.float32, _log(tdot))
        _ndarray(s.ns["e"], "e", "RowSparseNDArray", "row_sparse", (5, 2), np.float32, _log(tdot))

    grad = np.array([[0, 0], [1, 2], [4, 5], [0, 0]], dtype=np.float32)

    def c19(s: Shown) -> None:  # a lazy SGD's momentum of a row_sparse weight is row_sparse
        _numpy(s.value["grad.asnumpy()"], "grad.asnumpy()", np.float32, grad)
        _numpy(s.value["weight.asnumpy()"], "weight.asnumpy()", np.float32, np.ones((4, 2)))
        _numpy(s.value["momentum.asnumpy()"], "momentum.asnumpy()", np.float32, np.zeros((4, 2)))
        _ndarray(s.ns["momentum"], "momentum", "RowSparseNDArray", "row_sparse", (4, 2), np.float32)

    def c20(s: Shown) -> None:  # mom = 0.01 * mom - 0.01 * grad; weight += mom; on rows 1 and 2 only
        lr, mu = np.float32(0.01), np.float32(0.01)
        momentum = mu * np.zeros((4, 2), np.float32) - lr * grad
        weight = np.ones((4, 2), np.float32) + momentum
        _numpy(s.value["weight.asnumpy()"], "weight.asnumpy()", np.float32, weight)
        _numpy(s.value["momentum.asnumpy()"], "momentum.asnumpy()", np.float32, momentum)
        _ndarray(s.ns["weight"], "weight", "RowSparseNDArray", "row_sparse", (4, 2), np.float32, weight)

    return {1: ("Y = mx.nd.dot(X, W)", c1), 2: ("transpose_a=True", c2), 7: ("row_sparse_array((data_np", c7),
            8: ("d = mx.nd.array(a, dtype=np.float16)", c8), 9: ("a.asnumpy()", c9), 10: ("indices = a.indices", c10),
            11: ("rsp = ones.tostype('row_sparse')", conversions),
            12: ("cast_storage(ones, 'row_sparse')", conversions),
            13: ("b = a.copy()", c13), 14: ("g.copyto(f)", c14), 15: ("mx.nd.sparse.retain", c15),
            16: ("transpose_dot = mx.nd.sparse.dot", c16), 17: ("b = a * 2", c17), 18: ("mx.nd.log(a, out=e)", c18),
            19: ("momentum = sgd.create_state", c19), 20: ("sgd.update(0, weight, grad, momentum)", c20),
            21: ("gpu_device=mx.gpu()", _gpu_cell)}


def _train_cells() -> dict[int, tuple[str, Callable[[Shown], None]]]:
    def data(s: Shown) -> None:
        import scipy.sparse as sp

        x = s.ns["train_data"]
        _ndarray(x, "train_data", "CSRNDArray", "csr", (1000, 100), np.float32)
        dense = x.asnumpy()
        assert ((dense >= 0) & (dense < 1)).all(), "rand_ndarray's csr values are uniform on [0, 1)"
        assert 0 < np.count_nonzero(dense) < 3000, f"density 0.01 of 100000 gave {np.count_nonzero(dense)} values"
        w = np.arange(1, 101, dtype=np.float32).reshape(100, 1)
        _ndarray(s.ns["target_weight"], "target_weight", "NDArray", "default", (100, 1), np.float32, w)
        _ndarray(s.ns["train_label"], "train_label", "NDArray", "default", (1000, 1), np.float32,
                 sp.csr_matrix(dense) @ w)
        it = s.ns["train_iter"]
        _equal([(d.name, tuple(d.shape)) for d in it.provide_data], [("data", (1, 100))], "train_iter.provide_data")
        _equal([(d.name, tuple(d.shape)) for d in it.provide_label], [("label", (1, 1))], "train_iter.provide_label")
        labels = s.ns["train_label"].asnumpy()
        it.reset()
        n = 0
        for i, batch in enumerate(it):  # MXNet 1.9.1: dense batches of the csr rows
            if i < 3 or i == 999:
                _ndarray(batch.data[0], f"batch {i}.data[0]", "NDArray", "default", (1, 100), np.float32,
                         dense[i:i + 1])
                _ndarray(batch.label[0], f"batch {i}.label[0]", "NDArray", "default", (1, 1), np.float32,
                         labels[i:i + 1])
            n += 1
        _equal(n, 1000, "the number of batches")
        it.reset()

    return {8: ("train_iter = mx.io.NDArrayIter", data)}


CHECKS: dict[str, Callable[[], dict[int, tuple[str, Callable[[Shown], None]]]]] = {
    "csr": _csr_cells, "row_sparse": _row_sparse_cells, "train": _train_cells}


# ---- running ----------------------------------------------------------------------------------------------
@dataclass
class TutorialResult:
    """One tutorial's run: cells run, cells skipped (number, reason), failures."""

    name: str
    run: int = 0
    skipped: list[tuple[int, str]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


def _skip_reason(source: str, tree: ast.Module, tainted: dict[str, int]) -> str | None:
    for pattern, reason in SKIP_RULES:
        if pattern.search(source):
            return reason
    needs = sorted(n for n in _loaded(tree) - _assigned(tree) if n in tainted)
    if needs:
        return f"uses {', '.join(needs)} of skipped cell {tainted[needs[0]]}"
    return None


def _brief(exc: BaseException, limit: int = 300) -> str:
    """An exception's type and the first line of its message, cut at ``limit`` characters."""
    line = traceback.format_exception_only(type(exc), exc)[-1].strip().splitlines()[0]
    return line if len(line) <= limit else line[:limit] + "..."


def run_tutorial(name: str, markdown: str) -> TutorialResult:
    """Run one tutorial's cells in one namespace and check them (see the module's docstring)."""
    result = TutorialResult(name)
    checks = CHECKS.get(name, lambda: {})()
    ns: dict[str, Any] = {"__name__": f"tutorial_{name}"}
    tainted: dict[str, int] = {}
    np.random.seed(0)  # the tutorials draw random data; any seed gives the same checks
    for number, raw in enumerate(cells_of(markdown), 1):
        source, _ = rewrite_imports(raw)
        try:
            tree = ast.parse(source)
        except SyntaxError as exc:
            result.failures.append(f"{name} cell {number}: does not parse: {exc}")
            continue
        reason = _skip_reason(source, tree, tainted)
        if reason:
            result.skipped.append((number, reason))
            for n in _assigned(tree):
                tainted.setdefault(n, number)
            try:
                exec(compile(_imports(tree), f"<{name} cell {number} imports>", "exec"), ns)
            except Exception as exc:  # an import the face lacks: later cells will say so
                result.failures.append(f"{name} cell {number} (skipped): its imports fail: {exc!r}")
            continue
        for n in _assigned(tree):
            tainted.pop(n, None)
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        out, err = io.StringIO(), io.StringIO()
        result.run += 1
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                exec(compile(tree, f"<{name} cell {number}>", "exec"), ns)
                value = eval(compile(last, f"<{name} cell {number}>", "eval"), ns) if last else None
        except Exception as exc:
            result.failures.append(f"{name} cell {number}: raised {_brief(exc)}")
            continue
        if number in checks:
            marker, check = checks[number]
            if marker not in raw:
                result.failures.append(f"{name} cell {number}: the tutorial changed (no {marker!r} in the cell)")
                continue
            try:
                check(Shown(ns, value, out.getvalue()))
            except Exception as exc:
                what = str(exc) if isinstance(exc, AssertionError) else f"the check raised {_brief(exc)}"
                result.failures.append(f"{name} cell {number}: {what}")
    missing = sorted(set(checks) - set(range(1, len(cells_of(markdown)) + 1)))
    for number in missing:
        result.failures.append(f"{name}: cell {number} has a check but the tutorial has no such cell")
    return result


def run_detailed(root: Path, tag: str = "1.9.1") -> list[TutorialResult]:
    """Every tutorial's ``TutorialResult``, run in a temporary working folder."""
    results = []
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="mxnet-tutorials-") as work, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # storage fallback notices, as MXNet's log lines
        os.chdir(work)
        try:
            for name in TUTORIALS:
                results.append(run_tutorial(name, read_source(Path(root), tag, f"{TUTORIAL_DIR}/{name}.md")))
        finally:
            os.chdir(cwd)
    return results


def run(root: Path, tag: str = "1.9.1") -> list[tuple[str, int, list[str]]]:
    """``[(tutorial, cells run, failures)]`` for MXNet's sparse NDArray tutorials at ``tag``
    in the MXNet git directory or checkout ``root``."""
    return [(r.name, r.run, r.failures) for r in run_detailed(root, tag)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mxnet", type=Path, help="an MXNet git directory or checkout")
    ap.add_argument("--tag", default="1.9.1")
    ap.add_argument("-v", "--verbose", action="store_true", help="list the skipped cells and why")
    args = ap.parse_args(argv)
    bad = 0
    for r in run_detailed(args.mxnet, args.tag):
        print(f"{r.name + '.md':16} {r.run:3} cells run, {len(r.skipped):2} skipped, {len(r.failures):2} failed")
        if args.verbose:
            for number, reason in r.skipped:
                print(f"    skipped cell {number}: {reason}")
        for f in r.failures:
            print(f"    FAILED {f}")
        bad += len(r.failures)
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
