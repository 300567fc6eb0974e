"""``mx.context``: MXNet's ``Context`` is sparse-ops' ``Device``.

``mx.cpu()``, ``mx.gpu(i)``, ``x.context`` and ``with mx.gpu(0):`` work as in MXNet
(devices are interned, so ``x.context == mx.cpu()`` holds).
"""
from __future__ import annotations

from ...device import Device, cpu, current_device, gpu, num_gpus, set_default_device

Context = Device


class _DefaultContext:
    """``ctx.default_ctx`` on an instance: this thread's default device."""

    def __get__(self, obj: object, owner: type | None = None) -> Device:
        return current_device()


class _ThreadDefault:
    """``Context._default_ctx``, MXNet's thread-local holder: ``.value`` reads and sets this
    thread's default device."""

    @property
    def value(self) -> Device:
        return current_device()

    @value.setter
    def value(self, device: Device) -> None:
        set_default_device(device)


if not hasattr(Device, "default_ctx"):
    Device.default_ctx = _DefaultContext()
    # on the class, MXNet's class property: read, and assigned, per thread (Device's class
    # holds it, so an assignment sets the thread's default instead of replacing it)
    type(Device).default_ctx = type(Device).default_device
    Device._default_ctx = _ThreadDefault()
# MXNet's device type codes (``Context.devtype2str[ctx.device_typeid]``)
if not hasattr(Device, "devtype2str"):
    Device.devtype2str = {1: "cpu", 2: "gpu", 3: "cpu_pinned", 5: "cpu_shared"}
    Device.devstr2type = {v: k for k, v in Device.devtype2str.items()}
    Device.device_typeid = property(lambda self: Device.devstr2type[self.device_type],
                                    doc="MXNet's code of the device type (1: cpu, 2: gpu)")


def current_context() -> Device:
    """The default device of this thread (the innermost ``with ctx:`` block, else cpu(0))."""
    return current_device()


__all__ = ["Context", "cpu", "gpu", "current_context", "num_gpus"]
