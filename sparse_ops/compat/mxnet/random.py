"""``mx.random``: seeding, and the samplers of ``mx.nd.random`` (distributions, ``randint``,
``multinomial``, ``shuffle``)."""
from __future__ import annotations

from typing import Any

from ... import random as _core_random
from ...device import as_device
from .ndarray.random import multinomial, normal, randint, randn, shuffle, uniform  # noqa: F401


def seed(seed_state: int, ctx: Any = "all") -> None:
    """Seed the generators of every device (``ctx="all"``) or of one device."""
    _core_random.seed(seed_state, None if isinstance(ctx, str) and ctx == "all" else as_device(ctx))


__all__ = ["seed", "uniform", "normal", "randn", "randint", "multinomial", "shuffle"]
