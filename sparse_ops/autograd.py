"""Imperative autograd state: recording and training flags, per thread.

``record()`` and ``pause()`` switch recording; ``train_mode()`` and ``predict_mode()``
switch the flag that ops such as ``Dropout`` read (``ctx.is_train``).
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator


class _State(threading.local):
    def __init__(self) -> None:
        self.recording = False
        self.training = False


_state = _State()


def is_recording() -> bool:
    """Whether operators are being recorded for a backward pass in this thread."""
    return _state.recording


def is_training() -> bool:
    """Whether operators run in training mode (Dropout drops) in this thread."""
    return _state.training


def set_recording(flag: bool) -> bool:
    """Set recording on or off; returns the previous value."""
    prev, _state.recording = _state.recording, bool(flag)
    return prev


def set_training(flag: bool) -> bool:
    """Set training mode on or off; returns the previous value."""
    prev, _state.training = _state.training, bool(flag)
    return prev


@contextmanager
def _scope(recording: bool | None, training: bool | None) -> Iterator[None]:
    prev_rec, prev_train = _state.recording, _state.training
    if recording is not None:
        _state.recording = recording
    if training is not None:
        _state.training = training
    try:
        yield
    finally:
        _state.recording, _state.training = prev_rec, prev_train


def record(train_mode: bool = True):
    """Record operators inside the block (``with autograd.record():``)."""
    return _scope(True, train_mode)


def pause(train_mode: bool = False):
    """Stop recording inside the block."""
    return _scope(False, train_mode)


def train_mode():
    """Training mode inside the block, recording unchanged."""
    return _scope(None, True)


def predict_mode():
    """Prediction mode inside the block, recording unchanged."""
    return _scope(None, False)


def _record(plan, inputs, outputs) -> None:
    """Put one operator call on this thread's tape (the tape arrives with the autograd issue)."""
    raise NotImplementedError("recording is not implemented yet")
