"""The few places that touch Dask's scheduler: finding the distributed client, putting data
on the cluster (scattered to workers, or broadcast to all of them once), naming tasks and
saying which worker a task runs on. Everything works without a distributed client too
(Dask's local schedulers), which keeps the metadata tests free of a cluster."""
from __future__ import annotations

import uuid
from typing import Any, Callable, Sequence

import dask


def client() -> Any:
    """The current ``distributed.Client`` (the one ``dask.compute`` uses), or None."""
    try:
        from distributed import default_client
    except ImportError:
        return None
    try:
        return default_client()
    except ValueError:  # no client: Dask's local scheduler runs the graph
        return None


def _leaf(value: Any, prefix: str) -> Any:
    return dask.delayed(value, name=f"{prefix}-{uuid.uuid4().hex}", pure=False)


def put_many(values: Sequence[Any], prefix: str = "sparse_ops-block") -> list[Any]:
    """Dask values holding ``values``: scattered over the workers (one transfer each, spread
    round-robin) with a distributed client, else literal leaves of the graph."""
    c = client()
    if c is None:
        return [_leaf(v, prefix) for v in values]
    return [dask.delayed(f) for f in c.scatter(list(values), hash=False)]


def broadcast(value: Any, prefix: str = "sparse_ops-broadcast") -> Any:
    """A Dask value holding ``value``, sent to every worker once (``scatter(broadcast=True)``)
    so that the tasks of every block read their local copy; a graph leaf without a client."""
    c = client()
    if c is None:
        return _leaf(value, prefix)
    return dask.delayed(c.scatter(value, broadcast=True, hash=False))


def delayed_call(fn: Callable, *args: Any, name: Any = None) -> Any:
    """``fn(*args)`` as a lazy task (``name``: its key; default a token of the inputs)."""
    if name is None:
        return dask.delayed(fn, pure=True)(*args)
    return dask.delayed(fn, pure=True)(*args, dask_key_name=name)


def where() -> str:
    """This process as a task sees it: ``worker tcp://host:port``, or the local process."""
    try:
        from distributed import get_worker

        return f"worker {get_worker().address}"
    except (ImportError, ValueError):
        return "the local process (no Dask worker)"
