"""Seeding and the per-device, per-thread NumPy generators (what ``ctx.rng`` hands kernels).

MXNet semantics: ``seed(s)`` makes what follows reproducible (same seed, same numbers),
for every device or for one (``seed(s, device=gpu(0))``). Without a call to ``seed`` the
streams start from a fixed default seed, as MXNet's and PyTorch's do.

NumPy generators are not thread-safe, so each (device, thread) pair owns one. Its stream
is derived from the device's seed, the device and a per-thread slot: the thread that
called ``seed`` (the main thread before any call) has slot 0, so it is reproducible
whatever other threads do; other threads take slots 1, 2, ... in the order they first
draw after the seed, so concurrent threads never share a stream.

The sampling operators that draw from these generators are in ``sparse_ops.random``.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

import numpy as np

from .device import Device, as_device

DEFAULT_SEED = 0
_DEVICE_CODES = {"cpu": 1, "gpu": 2}


class _SeedState:
    """One seeding event: the seed, the thread that owns slot 0, and the slot counter."""

    __slots__ = ("seed", "owner", "next_slot", "lock")

    def __init__(self, seed: int, owner: threading.Thread) -> None:
        self.seed, self.owner = seed, owner
        self.next_slot = 1
        self.lock = threading.Lock()

    def slot(self) -> int:
        if threading.current_thread() is self.owner:
            return 0
        with self.lock:
            slot, self.next_slot = self.next_slot, self.next_slot + 1
        return slot


_global_state = _SeedState(DEFAULT_SEED, threading.main_thread())
_device_states: dict[Device, _SeedState] = {}  # seeds set for one device since the last global seed
_config_lock = threading.Lock()


class _Local(threading.local):
    def __init__(self) -> None:
        self.generators: dict[Device, tuple[_SeedState, np.random.Generator]] = {}
        self.override: np.random.Generator | None = None  # drawing_from's


_local = _Local()


def _normalise_seed(seed_state: Any) -> int:
    if isinstance(seed_state, (bool, np.bool_)) or not isinstance(seed_state, (int, np.integer)):
        raise TypeError(f"seed_state must be an integer, got {seed_state!r}")
    return int(seed_state) % (1 << 64)


def seed(seed_state: int, device: Device | str | None = None) -> None:
    """Seed the generators of every device (``device=None``) or of one device.

    Same seed, same numbers: after ``seed(s)`` the calling thread draws the same values on
    each run. Generators of other threads restart too, each on its own stream.
    """
    global _global_state
    value = _normalise_seed(seed_state)
    state = _SeedState(value, threading.current_thread())
    with _config_lock:
        if device is None:
            _global_state = state
            _device_states.clear()
        else:
            _device_states[as_device(device)] = state


def generator(device: Device | str | None = None) -> np.random.Generator:
    """The NumPy generator of ``device`` (default: the current device) for the calling thread."""
    if _local.override is not None:
        return _local.override
    dev = device if isinstance(device, Device) else as_device(device)
    state = _device_states.get(dev, _global_state)
    cached = _local.generators.get(dev)
    if cached is not None and cached[0] is state:
        return cached[1]
    seq = np.random.SeedSequence(
        state.seed, spawn_key=(_DEVICE_CODES[dev.device_type], dev.device_id, state.slot()))
    gen = np.random.Generator(np.random.PCG64(seq))
    _local.generators[dev] = (state, gen)
    return gen


@contextlib.contextmanager
def drawing_from(gen: np.random.Generator) -> Iterator[None]:
    """Within the block, the calling thread's kernels draw from ``gen`` on every device
    instead of the seeded streams: how a bridge makes an op's draws follow its framework's
    generator (the torch bridge seeds ``gen`` from torch's, so ``torch.manual_seed``
    reproduces them as it does torch's own random ops)."""
    saved = _local.override
    _local.override = gen
    try:
        yield
    finally:
        _local.override = saved
