"""Devices (``cpu(i)``, ``gpu(i)``), the default-device stack and the array module of each device.

A container keeps arrays of one array module: NumPy on ``cpu``, CuPy on ``gpu``. With
``SPARSE_OPS_CUDA_SIM=1`` (read at import) ``gpu(0)`` exists without a GPU: its memory
is NumPy and numba runs its CUDA simulator.
"""
from __future__ import annotations

import re
import threading
from types import ModuleType
from typing import Any

import numpy as np

from . import alloc
from .settings import env_flag
from .errors import DeviceUnavailableError

SIMULATED_GPU = env_flag("SPARSE_OPS_CUDA_SIM", False)
_DEVICE_TYPES = ("cpu", "gpu")
# other names of a device type: MXNet's shared-memory cpu context is host memory here
_DEVICE_ALIASES = {"cpu_shared": "cpu"}


class _DeviceClass(type):
    """The class of ``Device``. ``Device.default_device`` reads this thread's default device,
    and assigning it sets that default (``set_default_device``): a class attribute holding
    one fixed device would be every thread's default."""

    @property
    def default_device(cls) -> "Device":
        return current_device()

    @default_device.setter
    def default_device(cls, device: "Device") -> None:
        set_default_device(device)


class Device(metaclass=_DeviceClass):
    """A place where arrays live and kernels run: ``cpu(0)`` or ``gpu(i)``.

    Usable as a context manager to change the default device of the current thread,
    as MXNet's ``Context`` is (``with sparse_ops.gpu(0): ...``).
    """

    __slots__ = ("device_type", "device_id", "__weakref__")
    _interned: dict = {}

    def __new__(cls, device_type: str = "cpu", device_id: int = 0) -> "Device":
        # One object per device, so identity is equality and hashing is cheap on the dispatch path.
        device_type = _DEVICE_ALIASES.get(device_type, device_type)
        key = (device_type, device_id)
        dev = cls._interned.get(key)
        if dev is not None:
            return dev
        if device_type not in _DEVICE_TYPES:
            raise ValueError(f"unknown device type {device_type!r}; expected 'cpu' or 'gpu'")
        if isinstance(device_id, bool) or not isinstance(device_id, (int, np.integer)) or device_id < 0:
            raise ValueError(f"device id must be a non-negative integer, got {device_id!r}")
        dev = object.__new__(cls)
        dev.device_type = device_type
        dev.device_id = int(device_id)
        return cls._interned.setdefault((device_type, dev.device_id), dev)

    def __repr__(self) -> str:
        return f"{self.device_type}({self.device_id})"

    def __reduce__(self):
        return (Device, (self.device_type, self.device_id))

    @property
    def xp(self) -> ModuleType:
        """The array module (numpy or cupy) holding this device's arrays."""
        return array_module(self)

    def __enter__(self) -> "Device":
        _stack().append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        _stack().pop()


def cpu(device_id: int = 0) -> Device:
    """The host CPU."""
    return Device("cpu", device_id)


def gpu(device_id: int = 0) -> Device:
    """GPU number ``device_id`` (checked when first used, not here, as in MXNet)."""
    return Device("gpu", device_id)


_local = threading.local()


def _stack() -> list[Device]:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


_CPU0 = Device("cpu", 0)


def current_device() -> Device:
    """The default device of this thread: the innermost ``with device:`` block, else ``cpu(0)``."""
    stack = getattr(_local, "stack", None)
    return stack[-1] if stack else _CPU0


def set_default_device(device: Device) -> None:
    """Make ``device`` this thread's default device: inside a ``with`` block until it ends,
    outside any for the thread (MXNet's ``Context.default_ctx = ctx``)."""
    if not isinstance(device, Device):
        raise TypeError(f"the default device must be a Device (sparse_ops.cpu(), sparse_ops.gpu(i)), got "
                        f"{type(device).__name__}")
    stack = _stack()
    if stack:
        stack[-1] = device
    else:
        stack.append(device)


_DEVICE_RE = re.compile(r"^\s*(cpu|gpu|cuda)\s*(?:[(:]\s*(\d+)\s*\)?)?\s*$")


def as_device(device: Device | str | None) -> Device:
    """Accept a Device, a string such as ``"cpu"``, ``"gpu(1)"`` or ``"cuda:0"``, or None (current)."""
    if device is None:
        return current_device()
    if isinstance(device, Device):
        return device
    if isinstance(device, str):
        m = _DEVICE_RE.match(device)
        if m:
            kind = "gpu" if m.group(1) == "cuda" else m.group(1)
            return Device(kind, int(m.group(2) or 0))
    raise ValueError(f"not a device: {device!r}; use sparse_ops.cpu() or sparse_ops.gpu(i)")


_modules: dict[Device, ModuleType] = {_CPU0: np}


def array_module(device: Device) -> ModuleType:
    """numpy for cpu (and the simulated gpu), cupy for a real gpu; a clear error if unavailable."""
    mod = _modules.get(device)
    if mod is not None:
        return mod
    if device.device_type == "cpu":
        mod = np
    else:
        mod = _gpu_module(device.device_id)
    _modules[device] = mod
    return mod


def _gpu_module(device_id: int) -> ModuleType:
    if SIMULATED_GPU:
        if device_id != 0:
            raise DeviceUnavailableError(
                f"gpu({device_id}) is not available: the CUDA simulator (SPARSE_OPS_CUDA_SIM=1) provides gpu(0) only"
            )
        return np
    try:
        import cupy
    except ImportError as exc:
        raise DeviceUnavailableError(
            f"gpu({device_id}) is not available: CuPy is not installed "
            "(pip install 'sparse-ops[cuda]'), and SPARSE_OPS_CUDA_SIM is not 1 "
            "(set SPARSE_OPS_CUDA_SIM=1 before importing sparse_ops to simulate a GPU)"
        ) from exc
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDA driver missing or broken
        raise DeviceUnavailableError(f"gpu({device_id}) is not available: CUDA reports {exc}") from exc
    if device_id >= count:
        raise DeviceUnavailableError(f"gpu({device_id}) is not available: {count} GPU(s) found")
    return cupy


def num_gpus() -> int:
    """How many gpu devices can be used (1 under the simulator, 0 without CuPy)."""
    if SIMULATED_GPU:
        return 1
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:
        return 0


def gpu_available() -> bool:
    """Whether a gpu device (real or simulated) can be used: ``sparse_ops.cuda.is_available()``."""
    return num_gpus() > 0


def gpu_simulated() -> bool:
    """Whether gpu devices are simulated on the cpu (``SPARSE_OPS_CUDA_SIM=1``):
    ``sparse_ops.cuda.is_simulator()``."""
    return SIMULATED_GPU


def is_cupy_array(a: Any) -> bool:
    return type(a).__module__.startswith("cupy")


def device_of_array(a: Any) -> Device | None:
    """The gpu holding a CuPy array, or None for host arrays (whose device the caller decides)."""
    if is_cupy_array(a):
        return Device("gpu", int(a.device.id))
    return None


def to_host(a: Any) -> np.ndarray:
    """A NumPy view or copy of ``a`` (a copy only when ``a`` lives on a real gpu)."""
    if is_cupy_array(a):
        return a.get()
    return np.asarray(a)


def on_device(a: Any, device: Device, dtype: Any = None, copy: bool = False) -> Any:
    """``a`` as an array of ``device``'s module, converted to ``dtype``; copies only when needed or asked."""
    xp = array_module(device)
    if xp is np:
        a = to_host(a)
        if copy:
            return alloc.copy(a, dtype) if isinstance(a, np.ndarray) else np.array(a, dtype=dtype, copy=True)
        return np.asarray(a, dtype=dtype)
    with xp.cuda.Device(device.device_id):
        if copy:
            return xp.array(a, dtype=dtype, copy=True)
        return xp.asarray(a, dtype=dtype)


class allocating_on:
    """Makes a real gpu the current CuPy device inside the block (for allocations there);
    does nothing for host memory."""

    __slots__ = ("_ctx",)

    def __init__(self, device: Device) -> None:
        xp = array_module(device)
        self._ctx = xp.cuda.Device(device.device_id) if xp is not np else None

    def __enter__(self) -> None:
        if self._ctx is not None:
            self._ctx.__enter__()

    def __exit__(self, *exc: Any) -> None:
        if self._ctx is not None:
            self._ctx.__exit__(*exc)
