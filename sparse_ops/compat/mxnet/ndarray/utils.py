"""``mx.nd.utils``: ``save``, ``load`` and ``load_frombuffer`` (MXNet's module of them), in
sparse-ops' own file format (``sparse_ops.io``; MXNet's binary format is not read).
"""
from __future__ import annotations

import io as _pyio
import os
from typing import Any

from .... import io as _io
from ....ndarray import NDArray as _LibNDArray
from ....ndarray import kernel_form
from .. import util as _util
from ..base import MXNetArgumentError, MXNetError, MXNetIOError, MXNetValueError
from ._op import as_face
from .ndarray import EXTRA_DTYPES

_NP_SHAPE = "mxnet_np_shape"  # the header attribute recording the shape mode a file was saved in


def save(fname: str | os.PathLike, data: Any) -> None:
    """Save an NDArray, a list of NDArrays or a dict of str -> NDArray. A single NDArray
    is saved as a list of one, so ``load`` gives a list back, as in MXNet. The file
    records whether NumPy shape semantics were on (``mx.np_shape``): MXNet loads a file
    only in the mode it was saved in, and saves no sparse array in NumPy mode."""
    if isinstance(data, _LibNDArray):
        data = [data]
    elif isinstance(data, tuple):
        data = list(data)
    elif not isinstance(data, (list, dict)):
        raise MXNetValueError("save: argument data needs to either be a NDArray, dict of str, NDArray pairs or a list of NDarrays.")
    np_shape = _util.is_np_shape()
    items = data.values() if isinstance(data, dict) else data
    if np_shape and any(isinstance(x, _LibNDArray) and x.stype != "default" for x in items):
        raise MXNetValueError("save: only arrays of default storage type can be saved in np shape semantics")
    if isinstance(data, dict):
        data = {k: kernel_form(v) if isinstance(v, _LibNDArray) else v for k, v in data.items()}
    else:
        data = [kernel_form(v) if isinstance(v, _LibNDArray) else v for v in data]
    _io.save(fname, data, attrs={_NP_SHAPE: np_shape})


def _loaded(data: Any, attrs: dict) -> list | dict:
    """What ``load`` hands back: the face's arrays, after MXNet's check of the shape mode."""
    saved_np = bool(attrs.get(_NP_SHAPE, False))
    if saved_np and not _util.is_np_shape():
        raise MXNetValueError("load: the arrays were saved in np shape semantics and must be loaded in them: "
                              "turn them on with mx.np_shape(True) or mx.use_np_shape")
    if not saved_np and _util.is_np_shape():
        raise MXNetValueError("load: the arrays were not saved in np shape semantics but are loaded in them: "
                              "turn them off with mx.np_shape(False)")
    if isinstance(data, dict):
        as_face(list(data.values()))
        return data
    return as_face([data] if isinstance(data, _LibNDArray) else data)


def load(fname: str | os.PathLike) -> list | dict:
    """What ``save`` wrote: a list of NDArrays or a dict of str -> NDArray (a file of
    one array written by ``sparse_ops.save`` also comes back as a list)."""
    attrs: dict = {}
    try:
        data = _io.load(fname, attrs=attrs, extra_dtypes=EXTRA_DTYPES)
    except MXNetError:
        raise
    except OSError as exc:  # missing, a folder, unreadable: MXNet's error, and still an OSError
        raise MXNetIOError(exc.errno, f"load: {exc.strerror or exc}", exc.filename) from None
    except ValueError as exc:  # truncated or not a file save wrote
        raise MXNetValueError(f"load: {exc}") from None
    return _loaded(data, attrs)


def load_frombuffer(buf: bytes) -> list | dict:
    """``load`` from the bytes of a file ``save`` wrote; a truncated or corrupt buffer
    raises ``MXNetError``."""
    if not isinstance(buf, (bytes, bytearray, memoryview)):
        raise MXNetArgumentError(f"load_frombuffer: buf must be bytes, got {type(buf).__name__} (argument buf)")
    attrs: dict = {}
    try:
        data = _io.load(_pyio.BytesIO(bytes(buf)), attrs=attrs, extra_dtypes=EXTRA_DTYPES)
    except MXNetError:
        raise
    except ValueError as exc:
        raise MXNetValueError(f"load_frombuffer: {exc}") from None
    return _loaded(data, attrs)



__all__ = ["save", "load", "load_frombuffer"]
