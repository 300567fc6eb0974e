"""``mx.runtime``: which of MXNet's compile-time features this face provides.

MXNet code asks ``mx.runtime.Features().is_enabled("CUDA")`` before taking a path; the
answers here describe sparse-ops: shapes and indices are 64-bit (``INT64_TENSOR_SIZE``),
``CUDA`` is on when CuPy and a GPU are present, and the features of MXNet's own build
(cuDNN, MKL-DNN, OpenCV, the distributed store, ...) are off.
"""
from __future__ import annotations

import collections
from typing import NamedTuple

_NAMES = ("CUDA", "CUDNN", "NCCL", "CUDA_RTC", "TENSORRT", "CPU_SSE", "CPU_SSE2", "CPU_SSE3", "CPU_SSE4_1",
          "CPU_SSE4_2", "CPU_SSE4A", "CPU_AVX", "CPU_AVX2", "OPENMP", "SSE", "F16C", "JEMALLOC", "BLAS_OPEN",
          "BLAS_ATLAS", "BLAS_MKL", "BLAS_APPLE", "LAPACK", "MKLDNN", "OPENCV", "CAFFE", "PROFILER",
          "DIST_KVSTORE", "CXX14", "INT64_TENSOR_SIZE", "SIGNAL_HANDLER", "DEBUG", "TVM_OP")


class Feature(NamedTuple):
    """One compile-time feature: its ``name`` and whether it is ``enabled``."""

    name: str
    enabled: bool

    def __repr__(self) -> str:
        return f"{'✔' if self.enabled else '✖'} {self.name}"


def _enabled() -> set[str]:
    from ... import device

    on = {"INT64_TENSOR_SIZE", "OPENMP", "LAPACK", "CXX14", "SIGNAL_HANDLER"}
    if device.num_gpus() > 0:
        on.add("CUDA")
    return on


def feature_list() -> list[Feature]:
    """Every feature MXNet 1.9.1 names, each with whether this face provides it."""
    on = _enabled()
    return [Feature(name, name in on) for name in _NAMES]


class Features(collections.OrderedDict):
    """Feature name -> :class:`Feature`, built once (as MXNet's)."""

    instance = None

    def __new__(cls) -> "Features":
        if cls.instance is None:
            cls.instance = super().__new__(cls)
            super().__init__(cls.instance, [(f.name, f) for f in feature_list()])
        return cls.instance

    def __init__(self) -> None:  # filled once, in __new__
        pass

    def __repr__(self) -> str:
        return str(list(self.values()))

    def is_enabled(self, feature_name: str) -> bool:
        """Whether ``feature_name`` (any case) is on; RuntimeError naming the known ones otherwise."""
        name = feature_name.upper()
        if name not in self:
            raise RuntimeError(f"Feature '{name}' is unknown, known features are: {list(self.keys())}")
        return self[name].enabled
