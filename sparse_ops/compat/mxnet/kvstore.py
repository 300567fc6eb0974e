"""``mx.kv`` / ``mx.kvstore``: MXNet 1.x's key-value store, in this process, on one machine.

``mx.kv.create('local')`` (or ``'device'``) gives a real store: ``init`` copies values in,
``push`` sums the values given for each key (row_sparse values stay row_sparse) and either
stores the sum or hands it to the updater set by ``set_optimizer`` / ``set_updater``,
``pull`` copies stored values out, and ``row_sparse_pull`` copies out only the requested
rows of a row_sparse value (the other rows never move). Keys are ints or strs (one kind
per store, as in MXNet), alone or in lists; a value may be a list of arrays for one key
(MXNet's "one per device"), summed on push and each filled on pull.

This store is single-machine: ``rank`` is 0, ``num_workers`` 1, and the ``dist_*`` types
are refused. For work across processes or machines use ``sparse_ops.dask``.

Differences from MXNet 1.9, on purpose: values are copied in and out (MXNet may alias a
single pushed array into the store); ``row_sparse_pull`` also takes rows of a dense stored
value (MXNet refuses); work is synchronous, so ``priority`` is accepted and ignored;
gradient compression is not implemented.
"""
from __future__ import annotations

import numbers
import pickle
import threading
import warnings
from typing import Any, Callable

import numpy as np

from ...errors import SparseOpsError
from .base import MXNetArgumentError, MXNetValueError
from ...ndarray import NDArray, RowSparseNDArray
from ... import device as _dev

__all__ = ["create", "KVStore", "KVStoreBase", "KVStoreError"]


class KVStoreError(SparseOpsError, ValueError):
    """A refused key-value store call (an ``MXNetError``); the message names the call, the
    key and what was wrong."""


_LOCAL_TYPES = ("local", "device", "local_update_cpu", "local_allreduce_cpu", "local_allreduce_device")


def create(name: str = "local") -> "KVStore":
    """A new in-process store. ``name`` is ``'local'`` (values kept in cpu memory),
    ``'device'`` (values kept on the device of the array given to ``init``) or one of
    MXNet's other single-machine spellings (``local_update_cpu``, ``local_allreduce_cpu``,
    ``local_allreduce_device``). Distributed types (``dist_sync``, ``dist_async``, ...,
    ``horovod``, ``nccl``) raise: see ``sparse_ops.dask`` for more than one machine."""
    if not isinstance(name, str):
        raise MXNetArgumentError(f"kv.create: name must be a string, got {type(name).__name__}")
    kind = name.lower()
    if kind not in _LOCAL_TYPES:
        raise KVStoreError(
            f"mx.kv.create({name!r}): this key-value store is single-machine and in-process; "
            f"supported types: {', '.join(_LOCAL_TYPES)}. For distributed work use sparse_ops.dask.")
    return KVStore(kind)


class KVStoreBase:
    """MXNet's abstract store interface (``mx.kv.KVStoreBase``): the capability names."""

    OPTIMIZER = "optimizer"


def _key_kind(key: Any, call: str) -> type:
    if isinstance(key, str):
        return str
    if isinstance(key, numbers.Integral) and not isinstance(key, bool):
        return int
    raise KVStoreError(f"{call}: unexpected type for keys: {type(key).__name__} ({key!r}); keys are int or str")


def _pairs(keys: Any, vals: Any, call: str, what: str = "value") -> list[tuple[Any, Any]]:
    """Flat ``(key, array)`` pairs the MXNet way: a list of keys goes with a list of values,
    each an array or a list of arrays (one key, several arrays)."""
    if isinstance(keys, (list, tuple)):
        if not isinstance(vals, (list, tuple)) or len(keys) != len(vals):
            n = len(vals) if isinstance(vals, (list, tuple)) else 1
            raise KVStoreError(f"{call}: {len(keys)} keys but {n} {what} entries; give one {what} "
                               f"array (or one list of them) per key")
        out: list[tuple[Any, Any]] = []
        kinds = set()
        for k, v in zip(keys, vals):
            kinds.add(_key_kind(k, call))
            out += _pairs(k, v, call, what)
        if len(kinds) > 1:
            raise KVStoreError(f"{call}: inconsistent types of keys detected (int and str keys in one call)")
        return out
    kind = _key_kind(keys, call)
    key = keys if kind is str else int(keys)
    if isinstance(vals, NDArray):
        return [(key, vals)]
    if isinstance(vals, (list, tuple)) and vals:
        for v in vals:
            if not isinstance(v, NDArray):
                raise KVStoreError(f"{call}: key {key!r}: {what}s must be NDArrays, got {type(v).__name__}")
        return [(key, v) for v in vals]
    raise KVStoreError(f"{call}: key {key!r}: {what} must be an NDArray or a non-empty list of NDArrays, "
                       f"got {type(vals).__name__}")


def _grouped(pairs: list[tuple[Any, Any]]) -> dict[Any, list[Any]]:
    groups: dict[Any, list[Any]] = {}
    for k, v in pairs:
        groups.setdefault(k, []).append(v)
    return groups


class _Updater:
    """The updater ``set_optimizer`` makes when ``mx.optimizer`` offers no ``get_updater``:
    MXNet's ``Updater`` protocol over any object with MXNet's ``Optimizer`` interface
    (``create_state(index, weight)``, ``update(index, weight, grad, state)``; their
    ``_multi_precision`` forms when present). States are kept per index and saved with
    ``get_states`` / ``set_states`` (pickled, as MXNet does)."""

    def __init__(self, optimizer: Any) -> None:
        self.optimizer = optimizer
        self.states: dict[Any, Any] = {}
        self.states_synced: dict[Any, bool] = {}

    def __call__(self, index: Any, grad: NDArray, weight: NDArray) -> None:
        opt = self.optimizer
        if index not in self.states:
            create = getattr(opt, "create_state_multi_precision", None) or opt.create_state
            self.states[index] = create(index, weight)
            self.states_synced[index] = True
        update = getattr(opt, "update_multi_precision", None) or opt.update
        update(index, weight, grad, self.states[index])

    def get_states(self, dump_optimizer: bool = False) -> bytes:
        return pickle.dumps((self.states, self.optimizer) if dump_optimizer else self.states)

    def set_states(self, states: bytes) -> None:
        loaded = pickle.loads(states)
        if isinstance(loaded, tuple) and len(loaded) == 2:
            self.states, self.optimizer = loaded
        else:
            self.states = loaded
        self.states_synced = dict.fromkeys(self.states, False)


def get_updater(optimizer: Any) -> Callable:
    """``mx.optimizer.get_updater(optimizer)`` for an ``mx.optimizer.Optimizer``; for any
    other object with the ``Optimizer`` methods (or without ``mx.optimizer``), this
    module's ``_Updater`` (the same protocol)."""
    try:
        from . import optimizer as _opt  # mx.optimizer
    except ImportError:
        _opt = None
    factory = getattr(_opt, "get_updater", None)
    base = getattr(_opt, "Optimizer", None)
    if factory is not None and isinstance(base, type) and isinstance(optimizer, base):
        return factory(optimizer)
    return _Updater(optimizer)


def _row_ids(ids: Any, call: str, key: Any) -> np.ndarray:
    """Unique sorted int64 row ids from a dense NDArray (any shape, any numeric dtype)."""
    if not isinstance(ids, NDArray):
        raise KVStoreError(f"{call}: key {key!r}: row_ids must be NDArrays, got {type(ids).__name__}")
    if ids.stype != "default":
        raise KVStoreError(f"{call}: key {key!r}: expected default storage type for row_sparse_pull "
                           f"row_ids, but detected storage type {ids.stype}")
    a = _dev.to_host(ids._data).ravel()
    if a.dtype.kind == "f" and not np.isfinite(a).all():
        raise KVStoreError(f"{call}: key {key!r}: row_ids holds {a[~np.isfinite(a)][0]}, which is no row id")
    if a.dtype.kind not in "iu":
        a = a.astype(np.int64)
    return np.unique(a)


class KVStore(KVStoreBase):
    """An in-process key-value store (see the module docstring). Made by ``mx.kv.create``."""

    def __init__(self, kind: str = "local") -> None:
        self._type = kind
        self._store: dict[Any, NDArray] = {}
        self._key_type: type | None = None
        self._updater: Callable | None = None
        self._warned: set = set()
        self._lock = threading.RLock()

    # ---- properties -------------------------------------------------------------------------------
    @property
    def type(self) -> str:
        """The type given to ``create`` (lower case)."""
        return self._type

    @property
    def rank(self) -> int:
        """Always 0: one worker."""
        return 0

    @property
    def num_workers(self) -> int:
        """Always 1: one worker."""
        return 1

    def is_capable(self, capability: str) -> bool:
        """``'optimizer'``: True (updates run in the store)."""
        if capability.lower() == KVStoreBase.OPTIMIZER:
            return True
        raise MXNetValueError(f"KVStore.is_capable: Unknown capability: {capability!r} (argument capability)")

    def __repr__(self) -> str:
        return f"<KVStore {self._type!r}: {len(self._store)} keys>"

    # ---- helpers ----------------------------------------------------------------------------------
    def _check_key_type(self, pairs: list, call: str) -> None:
        if not pairs:
            return
        kind = type(pairs[0][0])
        if self._key_type is None:
            self._key_type = kind
        elif kind is not self._key_type:
            raise KVStoreError(f"{call}: key {pairs[0][0]!r}: mixed key types are not allowed; this store "
                               f"uses {self._key_type.__name__} keys")

    def _stored(self, key: Any, call: str) -> NDArray:
        try:
            return self._store[key]
        except KeyError:
            raise KVStoreError(f"{call}: key {key!r} has not been inited (call init first)") from None

    def _home(self, value: NDArray) -> Any:
        return value.device if self._type.endswith("device") or self._type == "device" else _dev.as_device("cpu")

    # ---- init / push / pull -----------------------------------------------------------------------
    def init(self, key: Any, value: Any) -> None:
        """Store a copy of each value under its key (int or str, or lists of them). A key
        can be inited once; row_sparse values stay row_sparse."""
        pairs = _pairs(key, value, "init")
        with self._lock:
            self._check_key_type(pairs, "init")
            seen = set()
            for k, v in pairs:
                if k in self._store or k in seen:
                    raise KVStoreError(f"init: duplicate init of key {k!r}. Please double check if you called "
                                       f"kv.init or kv.broadcast with this key multiple times")
                if v.stype not in ("default", "row_sparse"):
                    raise KVStoreError(f"init: key {k!r}: values must be default or row_sparse, got {v.stype}")
                seen.add(k)
            for k, v in pairs:
                self._store[k] = v.to(self._home(v), copy=True) if v.device != self._home(v) else v.copy()

    def _merge(self, key: Any, values: list[NDArray], stored: NDArray) -> NDArray:
        for v in values:
            if v.stype not in ("default", "row_sparse"):
                raise KVStoreError(f"push: key {key!r}: unexpected storage type detected during kvstore "
                                   f"push: {v.stype} (default or row_sparse expected)")
            if v.shape != stored.shape:
                raise KVStoreError(f"push: key {key!r}: value of shape {v.shape} does not match the "
                                   f"stored shape {stored.shape}")
        home = stored.device
        values = [v if v.device == home else v.to(home) for v in values]
        if len(values) == 1:
            return values[0]
        from ...ops import add_n
        if all(v.stype == "row_sparse" for v in values):
            return add_n(*values)
        return add_n(*[v if v.stype == "default" else v.tostype("default") for v in values])

    def push(self, key: Any, value: Any, priority: int = 0) -> None:
        """Sum the values given for each key; with an updater, call ``updater(key, sum,
        stored)`` (which updates the stored value in place), else store the sum."""
        pairs = _pairs(key, value, "push")
        with self._lock:
            self._check_key_type(pairs, "push")
            groups = _grouped(pairs)
            for k in groups:
                self._stored(k, "push")
            for k, vals in groups.items():
                stored = self._store[k]
                merged = self._merge(k, vals, stored)
                if self._updater is not None:
                    self._updater(k, merged, stored)
                else:
                    if merged.dtype != stored.dtype:
                        merged = merged.astype(stored.dtype)
                    self._store[k] = merged.copy() if any(merged is v for v in vals) else merged

    def pull(self, key: Any, out: Any = None, priority: int = 0, ignore_sparse: bool = True) -> None:
        """Copy each stored value into its ``out`` array(s). Sparse ``out`` arrays are skipped
        (with a warning once per key) unless ``ignore_sparse=False``: use
        ``row_sparse_pull`` for row_sparse weights."""
        if out is None:
            raise KVStoreError("pull: out is required (the arrays to copy the stored values into)")
        pairs = _pairs(key, out, "pull", "out")
        with self._lock:
            self._check_key_type(pairs, "pull")
            for k, _ in pairs:
                self._stored(k, "pull")
            for k, o in pairs:
                if o.stype != "default" and ignore_sparse:
                    if k not in self._warned:
                        self._warned.add(k)
                        warnings.warn(f"kvstore pull: non-default out array for key {k!r} ignored; use "
                                      f"kv.row_sparse_pull() with row_ids", UserWarning, stacklevel=2)
                    continue
                stored = self._store[k]
                if o.shape != stored.shape:
                    raise KVStoreError(f"pull: key {k!r}: out of shape {o.shape} does not match the "
                                       f"stored shape {stored.shape}")
                stored.copyto(o)

    def pushpull(self, key: Any, value: Any, out: Any = None, priority: int = 0) -> None:
        """``push(key, value)`` then ``pull(key, out)`` (into ``value`` without ``out``)."""
        self.push(key, value, priority)
        self.pull(key, value if out is None else out, priority)

    def broadcast(self, key: Any, value: Any, out: Any, priority: int = 0) -> None:
        """``init(key, value)`` then ``pull(key, out)``."""
        self.init(key, value)
        self.pull(key, out, priority)

    def row_sparse_pull(self, key: Any, out: Any = None, priority: int = 0, row_ids: Any = None) -> None:
        """Copy into each row_sparse ``out`` only the stored rows listed in its ``row_ids``
        (a dense NDArray of any shape and numeric dtype; repeats and order do not matter).
        ``out`` then stores exactly those rows the store has; nothing else is read. One
        ``row_ids`` array with a list of ``out`` arrays serves them all."""
        if out is None:
            raise KVStoreError("row_sparse_pull: out is required (row_sparse arrays to copy rows into)")
        if row_ids is None:
            raise KVStoreError("row_sparse_pull: row_ids is required (the rows to pull)")
        if isinstance(row_ids, NDArray):
            row_ids = [row_ids]
        if not isinstance(row_ids, (list, tuple)):
            raise KVStoreError("row_sparse_pull: row_ids should be an NDArray or a list of NDArrays")
        # MXNet: one row_ids array with a list of outs for one key is pulled once, then copied
        single = False
        if isinstance(key, (list, tuple)):
            pairs = _pairs(key, out, "row_sparse_pull", "out")
            id_pairs = _pairs(key, row_ids, "row_sparse_pull", "row_ids")
        elif isinstance(out, (list, tuple)) and len(row_ids) == 1:
            single = True
            pairs = _pairs(key, out[:1], "row_sparse_pull", "out")
            id_pairs = _pairs(key, row_ids[0], "row_sparse_pull", "row_ids")
        else:
            pairs = _pairs(key, out, "row_sparse_pull", "out")
            id_pairs = _pairs(key, row_ids[0] if len(row_ids) == 1 else row_ids, "row_sparse_pull", "row_ids")
        if len(id_pairs) != len(pairs):
            raise KVStoreError(f"row_sparse_pull: the number of row_ids ({len(id_pairs)}) doesn't match the "
                               f"number of out arrays ({len(pairs)})")
        with self._lock:
            self._check_key_type(pairs, "row_sparse_pull")
            for (k, o), (_, ids) in zip(pairs, id_pairs):
                stored = self._stored(k, "row_sparse_pull")
                if o.stype != "row_sparse":
                    raise KVStoreError(f"row_sparse_pull: key {k!r}: expected row_sparse storage type for "
                                       f"row_sparse_pull values, but detected storage type {o.stype}")
                if o.shape != stored.shape:
                    raise KVStoreError(f"row_sparse_pull: key {k!r}: out of shape {o.shape} does not match "
                                       f"the stored shape {stored.shape}")
                self._pull_rows(stored, _row_ids(ids, "row_sparse_pull", k), o)
        if single:
            for o in out[1:]:
                out[0].copyto(o)

    @staticmethod
    def _pull_rows(stored: NDArray, ids: np.ndarray, out: NDArray) -> None:
        """Gather rows ``ids`` (sorted, unique) of ``stored`` into row_sparse ``out``: a binary
        search over the stored row indices (none when every row is stored, or the value is
        dense), then one gather of the rows found."""
        dev = stored.device
        xp = dev.xp
        if stored.stype == "row_sparse" and stored._indices.shape[0] == stored.shape[0]:
            stored_all = True  # every row stored (sorted, unique): row i is at position i
        else:
            stored_all = False
        if stored.stype == "row_sparse" and not stored_all:
            have = stored._indices
            ids_d = _dev.on_device(ids.astype(have.dtype, copy=False), dev)
            pos = xp.searchsorted(have, ids_d)
            pos_c = xp.minimum(pos, max(int(have.shape[0]) - 1, 0))
            hit = (pos < have.shape[0]) & (have[pos_c] == ids_d) if have.shape[0] else xp.zeros(ids_d.shape, bool)
            rows, values = ids_d[hit], stored._data[pos_c[hit]]
        else:
            n = stored.shape[0]
            ids = ids[(ids >= 0) & (ids < n)]
            rows = _dev.on_device(ids, dev)
            values = stored._data[rows]
            if stored_all:
                rows = rows.astype(stored._indices.dtype, copy=False)
        if out.dtype != stored.dtype:
            values = values.astype(out.dtype)
        result = RowSparseNDArray._trusted(values, rows, stored.shape, dev)
        if out.device == dev and out._ag is None:
            out._take_parts(result)  # fresh arrays: handed over, not copied again
        else:
            out[:] = result if out.device == dev else result.to(out.device)

    # ---- optimizer ---------------------------------------------------------------------------------
    def set_optimizer(self, optimizer: Any) -> None:
        """Apply ``optimizer`` on every push: the store calls
        ``mx.optimizer.get_updater(optimizer)(key, merged_grad, stored_weight)``. Any object
        with MXNet's ``Optimizer`` interface works (``create_state(index, weight)``,
        ``update(index, weight, grad, state)``)."""
        for name in ("create_state", "update"):
            found = getattr(optimizer, name, None) or getattr(optimizer, name + "_multi_precision", None)
            if not callable(found):
                raise KVStoreError(f"set_optimizer: {type(optimizer).__name__} has no {name}() method; "
                                   f"expected an mx.optimizer.Optimizer")
        self._set_updater(get_updater(optimizer))

    def _set_updater(self, updater: Callable) -> None:
        """Call ``updater(key, merged_value, stored_value)`` on every push instead of storing
        the merged value; the updater changes the stored value in place."""
        if not callable(updater):
            raise KVStoreError(f"set_updater: the updater must be callable, got {type(updater).__name__}")
        with self._lock:
            self._updater = updater

    set_updater = _set_updater

    def save_optimizer_states(self, fname: str, dump_optimizer: bool = False) -> None:
        """Write the updater's states (and, with ``dump_optimizer``, the optimizer) to ``fname``."""
        updater = self._require_updater("save_optimizer_states")
        with open(fname, "wb") as f:
            f.write(updater.get_states(dump_optimizer))

    def load_optimizer_states(self, fname: str) -> None:
        """Read states written by ``save_optimizer_states`` into the updater."""
        updater = self._require_updater("load_optimizer_states")
        with open(fname, "rb") as f:
            updater.set_states(f.read())

    def _require_updater(self, call: str) -> Any:
        u = self._updater
        if u is None or not hasattr(u, "get_states"):
            raise KVStoreError(f"{call}: no optimizer states here: call set_optimizer first")
        return u

    # ---- the rest of MXNet's surface ---------------------------------------------------------------
    def set_gradient_compression(self, compression_params: dict) -> None:
        """Not implemented: values are summed uncompressed in this process."""
        raise KVStoreError(f"set_gradient_compression: gradient compression is not supported by the "
                           f"in-process {self._type!r} store")

    def _barrier(self) -> None:
        """A no-op: there is one worker."""

    def _send_command_to_servers(self, head: int, body: str) -> None:
        raise KVStoreError("_send_command_to_servers: this store has no servers (single machine)")
