"""``mx.util``: MXNet's NumPy-shape switch (``is_np_shape``, ``set_np_shape``, ``np_shape``,
``use_np_shape``) and its environment access (``getenv``, ``setenv``).

MXNet 1.x keeps a legacy shape mode (0 meaning "unknown", no zero-size arrays) that NumPy
shape semantics switch off, per thread. Here imperative shapes always have NumPy's
semantics (known, zero-size axes allowed, results never 0-d as in MXNet 1.x); the switch
is kept, per thread, for what it decides besides shapes: ``mx.nd.save`` records the mode
and ``mx.nd.load`` accepts a file only in the mode it was saved in, as MXNet's files do.
"""
from __future__ import annotations

import functools
import inspect
import os
import threading
from typing import Any


class _State(threading.local):
    def __init__(self) -> None:
        self.np_shape = False


_state = _State()


def is_np_shape() -> bool:
    """Whether NumPy shape semantics are on in this thread (off by default, as in MXNet)."""
    return _state.np_shape


def set_np_shape(active: bool) -> bool:
    """Turn NumPy shape semantics on or off in this thread; returns the previous state."""
    prev, _state.np_shape = _state.np_shape, bool(active)
    return prev


class np_shape:
    """``with mx.np_shape(active):`` NumPy shape semantics on (or off) inside the block."""

    def __init__(self, active: bool = True) -> None:
        self._active = bool(active)
        self._prev = False

    def __enter__(self) -> "np_shape":
        self._prev = set_np_shape(self._active)
        return self

    def __exit__(self, *exc: Any) -> None:
        set_np_shape(self._prev)


def use_np_shape(func: Any) -> Any:
    """A decorator running ``func`` (or each method of a class) with NumPy shape semantics on."""
    if isinstance(func, type):
        for name, method in inspect.getmembers(func, inspect.isfunction):
            if not name.startswith("__") or name in ("__init__", "__call__"):
                setattr(func, name, use_np_shape(method))
        return func
    if not callable(func):
        raise TypeError(f"use_np_shape: expected a function or a class, got {type(func).__name__}")

    @functools.wraps(func)
    def with_np_shape(*args: Any, **kwargs: Any) -> Any:
        with np_shape(True):
            return func(*args, **kwargs)

    return with_np_shape


def getenv(name: str) -> str | None:
    """The environment variable ``name``, None when unset (MXNet reads its backend's copy;
    the process has one environment here)."""
    return os.environ.get(name)


def setenv(name: str, value: str | None) -> None:
    """Set the environment variable ``name`` (``None`` unsets it)."""
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


__all__ = ["is_np_shape", "set_np_shape", "np_shape", "use_np_shape", "getenv", "setenv"]
