"""``mx.util``: MXNet's NumPy-shape switches.

MXNet 1.x keeps a legacy shape mode (0 meaning "unknown", no zero-size arrays) that
``use_np_shape`` switches off. This face has only NumPy's semantics (imperative shapes are
always known, zero-size axes are allowed), so the switches change nothing here:
``use_np_shape`` returns the function or class unchanged and ``is_np_shape()`` is True.
The results of ``mx.nd`` are still never 0-d, as in MXNet 1.x.
"""
from __future__ import annotations

from typing import Any


def is_np_shape() -> bool:
    return True


def set_np_shape(active: bool) -> bool:
    """Accepts the switch and returns the previous state (always True here)."""
    return True


def use_np_shape(func: Any) -> Any:
    """A decorator running ``func`` (or a class's methods) with NumPy shape semantics: here, unchanged."""
    return func


__all__ = ["is_np_shape", "set_np_shape", "use_np_shape"]
