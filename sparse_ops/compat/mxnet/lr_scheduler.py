"""``mx.lr_scheduler``: MXNet 1.9's learning-rate schedules.

A scheduler is called with ``num_update`` (the largest number of updates any weight has
had) and returns the learning rate. As in MXNet, ``FactorScheduler`` and
``MultiFactorScheduler`` keep state (they lower ``base_lr`` as the count passes each step
and never raise it again), and every scheduler can warm up linearly or at a constant rate
for ``warmup_steps`` updates first. Bad arguments raise ``LRSchedulerError`` (an
``MXNetError`` and a ``ValueError``) or ``LRSchedulerTypeError`` (an ``MXNetError`` and a
``TypeError``), each naming the scheduler and the argument.
"""
from __future__ import annotations

import logging
import math
import numbers
from typing import Any

from .base import MXNetError

__all__ = ["LRScheduler", "FactorScheduler", "MultiFactorScheduler", "PolyScheduler", "CosineScheduler",
           "LRSchedulerError", "LRSchedulerTypeError"]


class LRSchedulerError(MXNetError, ValueError):
    """A scheduler argument has a value the scheduler cannot take."""


class LRSchedulerTypeError(MXNetError, TypeError):
    """A scheduler argument has the wrong type."""


def _need_int(owner: str, name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise LRSchedulerTypeError(f"{owner}: {name} must be an int, got {type(value).__name__} {value!r}")


def _need_real(owner: str, name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise LRSchedulerTypeError(f"{owner}: {name} must be a number, got {type(value).__name__} {value!r}")


class LRScheduler:
    """Base of the schedules: ``base_lr`` and the warm-up (``warmup_steps`` updates from
    ``warmup_begin_lr`` to ``base_lr``, ``'linear'`` or ``'constant'``)."""

    def __init__(self, base_lr: float = 0.01, warmup_steps: int = 0, warmup_begin_lr: float = 0,
                 warmup_mode: str = "linear") -> None:
        owner = type(self).__name__
        _need_real(owner, "base_lr", base_lr)
        _need_int(owner, "warmup_steps", warmup_steps)
        _need_real(owner, "warmup_begin_lr", warmup_begin_lr)
        if warmup_begin_lr > base_lr:
            raise LRSchedulerError(f"{owner}: warmup_begin_lr ({warmup_begin_lr}) must not exceed base_lr ({base_lr})")
        if warmup_steps < 0:
            raise LRSchedulerError(f"{owner}: warmup_steps must be >= 0, got {warmup_steps}")
        if warmup_mode not in ("linear", "constant"):
            raise LRSchedulerError(f"{owner}: warmup_mode must be 'linear' or 'constant', got {warmup_mode!r}")
        self.base_lr = base_lr
        self.warmup_steps = warmup_steps
        self.warmup_final_lr = base_lr
        self.warmup_begin_lr = warmup_begin_lr
        self.warmup_mode = warmup_mode

    def get_warmup_lr(self, num_update: int) -> float:
        if num_update >= self.warmup_steps:
            raise LRSchedulerError(f"{type(self).__name__}: num_update {num_update} is past the warm-up "
                                   f"({self.warmup_steps} steps)")
        if self.warmup_mode == "constant":
            return self.warmup_begin_lr
        return self.warmup_begin_lr + (self.warmup_final_lr - self.warmup_begin_lr) * num_update / self.warmup_steps

    def __call__(self, num_update: int) -> float:
        raise NotImplementedError("must override this")


class FactorScheduler(LRScheduler):
    """``base_lr * factor ** floor((num_update - 1) / step)``, never below ``stop_factor_lr``
    (MXNet's counting: the rate drops once ``num_update`` exceeds each multiple of ``step``)."""

    def __init__(self, step: int, factor: float = 1, stop_factor_lr: float = 1e-8, base_lr: float = 0.01,
                 warmup_steps: int = 0, warmup_begin_lr: float = 0, warmup_mode: str = "linear") -> None:
        super().__init__(base_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        _need_real("FactorScheduler", "step", step)
        _need_real("FactorScheduler", "factor", factor)
        if step < 1:
            raise LRSchedulerError(f"FactorScheduler: step must be >= 1, got {step}")
        if factor > 1.0:
            raise LRSchedulerError(f"FactorScheduler: factor must be <= 1 (the rate only decreases), got {factor}")
        self.step = step
        self.factor = factor
        self.stop_factor_lr = stop_factor_lr
        self.count = 0

    def __call__(self, num_update: int) -> float:
        if num_update < self.warmup_steps:
            return self.get_warmup_lr(num_update)
        while num_update > self.count + self.step:  # a loop: training may resume at a later count
            self.count += self.step
            self.base_lr *= self.factor
            if self.base_lr < self.stop_factor_lr:
                self.base_lr = self.stop_factor_lr
                logging.info("Update[%d]: now learning rate arrived at %0.5e, will not change in the future",
                             num_update, self.base_lr)
            else:
                logging.info("Update[%d]: Change learning rate to %0.5e", num_update, self.base_lr)
        return self.base_lr


class MultiFactorScheduler(LRScheduler):
    """Multiply the rate by ``factor`` each time ``num_update`` passes one of ``step``
    (an increasing list of ints >= 1)."""

    def __init__(self, step: list, factor: float = 1, base_lr: float = 0.01, warmup_steps: int = 0,
                 warmup_begin_lr: float = 0, warmup_mode: str = "linear") -> None:
        super().__init__(base_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        if not isinstance(step, list) or not step:
            raise LRSchedulerTypeError(f"MultiFactorScheduler: step must be a non-empty list of ints, got {step!r}")
        for i, s in enumerate(step):
            _need_real("MultiFactorScheduler", f"step[{i}]", s)
            if i and s <= step[i - 1]:
                raise LRSchedulerError(f"MultiFactorScheduler: step must be increasing, got {step}")
            if s < 1:
                raise LRSchedulerError(f"MultiFactorScheduler: step[{i}] must be >= 1, got {s}")
        _need_real("MultiFactorScheduler", "factor", factor)
        if factor > 1.0:
            raise LRSchedulerError(f"MultiFactorScheduler: factor must be <= 1 (the rate only decreases), got {factor}")
        self.step = step
        self.cur_step_ind = 0
        self.factor = factor
        self.count = 0

    def __call__(self, num_update: int) -> float:
        if num_update < self.warmup_steps:
            return self.get_warmup_lr(num_update)
        while self.cur_step_ind < len(self.step) and num_update > self.step[self.cur_step_ind]:
            self.count = self.step[self.cur_step_ind]
            self.cur_step_ind += 1
            self.base_lr *= self.factor
            logging.info("Update[%d]: Change learning rate to %0.5e", num_update, self.base_lr)
        return self.base_lr


class PolyScheduler(LRScheduler):
    """``final_lr + (base_lr - final_lr) * (1 - t / T) ** pwr`` after the warm-up, with
    ``t = num_update - warmup_steps`` and ``T = max_update - warmup_steps``; the rate stays
    where it was once ``num_update`` passes ``max_update``."""

    def __init__(self, max_update: int, base_lr: float = 0.01, pwr: float = 2, final_lr: float = 0,
                 warmup_steps: int = 0, warmup_begin_lr: float = 0, warmup_mode: str = "linear") -> None:
        super().__init__(base_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        _need_int("PolyScheduler", "max_update", max_update)
        if max_update < 1:
            raise LRSchedulerError(f"PolyScheduler: max_update must be >= 1, got {max_update}")
        self.power = pwr
        self.base_lr_orig = self.base_lr
        self.max_update = max_update
        self.final_lr = final_lr
        self.max_steps = self.max_update - self.warmup_steps

    def __call__(self, num_update: int) -> float:
        if num_update < self.warmup_steps:
            return self.get_warmup_lr(num_update)
        if num_update <= self.max_update:
            frac = 1.0 - float(num_update - self.warmup_steps) / float(self.max_steps)
            self.base_lr = self.final_lr + (self.base_lr_orig - self.final_lr) * pow(frac, self.power)
        return self.base_lr


class CosineScheduler(LRScheduler):
    """``final_lr + (base_lr - final_lr) * (1 + cos(pi * t / T)) / 2`` after the warm-up
    (``t``, ``T`` as in ``PolyScheduler``); constant past ``max_update``."""

    def __init__(self, max_update: int, base_lr: float = 0.01, final_lr: float = 0, warmup_steps: int = 0,
                 warmup_begin_lr: float = 0, warmup_mode: str = "linear") -> None:
        super().__init__(base_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        _need_int("CosineScheduler", "max_update", max_update)
        if max_update < 1:
            raise LRSchedulerError(f"CosineScheduler: max_update must be >= 1, got {max_update}")
        self.base_lr_orig = base_lr
        self.max_update = max_update
        self.final_lr = final_lr
        self.max_steps = self.max_update - self.warmup_steps

    def __call__(self, num_update: int) -> float:
        if num_update < self.warmup_steps:
            return self.get_warmup_lr(num_update)
        if num_update <= self.max_update:
            t = (num_update - self.warmup_steps) / self.max_steps
            self.base_lr = self.final_lr + (self.base_lr_orig - self.final_lr) * (1 + math.cos(math.pi * t)) / 2
        return self.base_lr
