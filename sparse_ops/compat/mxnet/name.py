"""``mx.name``: MXNet's name managers (``NameManager``, ``Prefix``).

Imperative calls here ignore ``name=``, so nothing in this face asks a manager for a name;
the classes exist so MXNet code that opens ``with mx.name.NameManager():`` or
``mx.name.Prefix('p_')`` runs, and their ``get`` gives MXNet's names (``hint`` + a counter
per hint, the prefix prepended).
"""
from __future__ import annotations

import threading


class NameManager:
    """Automatic names: ``get(None, 'fc')`` gives ``fc0``, ``fc1``, ...; a given name is kept.
    A ``with`` block makes the manager current for its thread."""

    _current = threading.local()

    def __init__(self) -> None:
        self._counter: dict[str, int] = {}
        self._old_manager: NameManager | None = None

    def get(self, name: str | None, hint: str) -> str:
        if name:
            return name
        n = self._counter.get(hint, 0)
        self._counter[hint] = n + 1
        return f"{hint}{n}"

    def __enter__(self) -> "NameManager":
        self._old_manager = current()
        NameManager._current.value = self
        return self

    def __exit__(self, *exc: object) -> None:
        NameManager._current.value = self._old_manager


class Prefix(NameManager):
    """A name manager prepending ``prefix`` to every name it gives."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self._prefix = prefix

    def get(self, name: str | None, hint: str) -> str:
        return self._prefix + super().get(name, hint)


def current() -> NameManager:
    """This thread's current manager (a default one until a ``with`` block sets another)."""
    value = getattr(NameManager._current, "value", None)
    if value is None:
        value = NameManager._current.value = NameManager()
    return value


__all__ = ["NameManager", "Prefix", "current"]
