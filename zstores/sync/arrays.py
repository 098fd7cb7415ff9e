"""``synchronized(array, synchronizer)``: chunk-locked writes for zarr-python 2 and 3 arrays.

zarr-python writes part of a chunk by reading the chunk, changing it and
writing it back.  Two processes doing that to one chunk at once lose one of
the updates.  The proxy cuts every write along the stored-chunk grid and
writes each piece while holding that chunk's lock, the locks zarr-python 2's
``synchronizer=`` takes (same keys), so both libraries' writers exclude each
other.

With ``atomic=True`` over a zstores store that has transactions (through
``zstores.zarr_store``), a write goes to a transaction instead: zarr writes
into it without any lock, and only its commit (one backend transaction)
holds the chunks' locks, so the region appears to readers all at once and a
crash leaves none of it.  A commit that finds a chunk it read changed by
another writer is retried from the start (``retries`` times), then raises
``TransactionConflictError``.

zarr is never imported here at module level: the proxy reads what it needs
from the array object it is given (zarr-python 2 and 3 are told apart by
their attributes), and imports zarr only to reopen a zarr-python 3 array.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import random
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import (
    LeaseExpiredError,
    LockNamespaceError,
    LockOrderError,
    TransactionConflictError,
    UnsupportedOperationError,
)
from ..keys import prefix_of
from ..metadata import ARRAY_V2, NODE_V3
from . import fencing
from .chunks import (
    ChunkLayout,
    boxes,
    broadcast_value,
    normalize_selection,
    selection_shape,
    split,
)
from .locks import Synchronizer, lock_name
from .objects import conditional_store

if TYPE_CHECKING:
    from ..base import Store
    from ..transactions import Transaction

__all__ = ["LockOrderError", "SynchronizedArray", "synchronized"]

#: Tries of a transactional write before its TransactionConflictError is raised.
DEFAULT_RETRIES = 10

#: Chunks a plain (not atomic) write hands to zarr in one call, holding their
#: locks together.  One call per chunk cost zarr-python 3 a trip through its
#: event loop for each: with 1 MiB chunks on LMDB, blocks took 13% less
#: writer CPU (scripts/bench_sync.py).  The locks are taken in the global
#: order, so holding several cannot deadlock; each is a lock file held open
#: while its block is written.
CHUNKS_PER_WRITE = 16
#: Over a store whose calls zarr runs in worker threads (files, SQLite, any
#: store not known to answer at once), a block holds at most this many bytes
#: of chunks (always one chunk at least).  zarr reads the chunks of a call at
#: once, in several threads, and frees them together; with large chunks
#: glibc then hands that memory back to the kernel and faults it in again for
#: the next block: a Directory store's writers of 1 MiB chunks used 30% more
#: CPU in blocks of two (858 page faults per MiB instead of 11).
BYTES_PER_WRITE = 1 << 20


def _transactional(adapter: Any) -> Store | None:
    """The zstores store behind a zarr adapter, if it runs transactions; else None."""
    store = _zstores_store(adapter)
    return store if store is not None and store.supports_transactions else None


def _zstores_store(adapter: Any) -> Store | None:
    """The zstores store behind a zarr adapter; None for any other zarr store."""
    from ..adapters import Adapter

    return adapter.store if isinstance(adapter, Adapter) else None


def check_namespaces(synchronizer: Any, store: Any, path: str) -> None:
    """Refuse a ``RedisSynchronizer`` whose lock keys a ``RedisStore`` on its server would list.

    A store with prefix ``P`` owns every Redis key that starts with ``P:``.
    The lock keys of an array at ``path`` all start with ``sync.prefix +
    path + "/"`` and have no ``:`` after it, so they fall among the store's
    keys exactly when that string starts with ``P:``; the store would then
    list them as its own keys and delete them with ``rmdir``.  (They are
    never equal to one of its keys: lock keys contain ``//``.)

    Raises
    ------
    LockNamespaceError
        Naming both prefixes.
    """
    redis_stores = sys.modules.get("zstores.stores.redis")
    server_of = getattr(synchronizer, "server", None)
    if redis_stores is None or not isinstance(store, redis_stores.RedisStore) or not callable(
            server_of) or not isinstance(getattr(synchronizer, "prefix", None), str):
        return
    if store.server() != server_of():
        return
    base = store.prefix + ":"
    if (synchronizer.prefix + prefix_of(path)).startswith(base):
        raise LockNamespaceError(
            f"the lock keys of {synchronizer!r} (prefix {synchronizer.prefix!r}) would lie "
            f"among the keys of {store!r} (prefix {store.prefix!r}: it owns every Redis key "
            f"starting with {base!r}), on the same server and database: the store would list "
            "them and delete them with its data; give the synchronizer a prefix that does not "
            f"start with {base!r} (its default, 'zstores:lock:', or for example "
            f"{store.prefix + '-locks:'!r})"
        )


# ------------------------------------------------------------ zarr versions
class _Zarr2:
    """A zarr-python 2.18 array, reopened without a synchronizer of its own.

    The proxy takes the locks itself; the array's own ``synchronizer=`` would
    take the same ones again (and a thread lock cannot be taken twice).
    """

    def __init__(self, array: Any) -> None:
        if getattr(array, "_version", 2) != 2:
            raise TypeError("synchronized() supports zarr-python 2 arrays in Zarr v2 stores only")
        state = dict(array.__getstate__())
        state["synchronizer"] = None
        self._state = state
        self._cls = type(array)
        self.array = array if array.synchronizer is None else self._cls(**state)

    def layout(self) -> ChunkLayout:
        array = self.array
        separator = getattr(array, "_dimension_separator", None) or "."
        return ChunkLayout(
            tuple(array.shape), tuple(array.chunks), array.path, separator, "v2", ARRAY_V2
        )

    def reload(self) -> None:
        self.array = self._cls(**self._state)

    def resize(self, shape: tuple[int, ...]) -> None:
        self.array.resize(shape)

    def transactional_store(self) -> Store | None:
        """The store whose transactions writes can use (chunks and metadata in one store)."""
        if self.array.chunk_store is not None and self.array.chunk_store is not self.array.store:
            return None
        return _transactional(self.array.store)

    def chunk_store(self) -> Any:
        """The zarr store the chunks are written to."""
        return self.array.chunk_store if self.array.chunk_store is not None else self.array.store

    def threaded_store(self) -> bool:
        """zarr-python 2 calls its store in the calling thread."""
        return False

    def on(self, tx: Transaction) -> Any:
        """The array, reading and writing through ``tx``."""
        from ..adapters.zarr2 import Zarr2Store

        state = {**self._state, "store": Zarr2Store(tx), "chunk_store": None,
                 "read_only": False}
        if getattr(tx, "fences_by_version", False):
            state["write_empty_chunks"] = True  # no conditional delete: write them
        return self._cls(**state)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_zarr2_from_state, (self._cls, self._state))


def _zarr2_from_state(cls: type, state: dict[str, Any]) -> _Zarr2:
    return _Zarr2(cls(**state))


class _Zarr3:
    """A zarr-python 3 array (Zarr format 2 or 3)."""

    def __init__(self, array: Any) -> None:
        self.array = array

    def layout(self) -> ChunkLayout:
        array = self.array
        metadata = array.metadata
        path = array.store_path.path
        shape = tuple(array.shape)
        if metadata.zarr_format == 2:
            separator = metadata.dimension_separator or "."
            return ChunkLayout(shape, tuple(metadata.chunks), path, separator, "v2", ARRAY_V2)
        grid = getattr(metadata.chunk_grid, "chunk_shape", None)  # shards when sharded
        if grid is None:
            raise TypeError(
                f"synchronized() needs a regular chunk grid; this array has {metadata.chunk_grid}"
            )
        encoding = metadata.chunk_key_encoding
        return ChunkLayout(shape, tuple(grid), path, encoding.separator, encoding.name, NODE_V3)

    def reload(self) -> None:
        self.array = _open_zarr3(*self._reopen_args())

    def resize(self, shape: tuple[int, ...]) -> None:
        self.array.resize(shape)

    def transactional_store(self) -> Store | None:
        """The store whose transactions writes can use."""
        return _transactional(self.array.store_path.store)

    def chunk_store(self) -> Any:
        """The zarr store the chunks are written to."""
        return self.array.store_path.store

    def threaded_store(self) -> bool:
        """Whether zarr runs the store's calls in worker threads (all but the few known not to)."""
        from ..adapters import Adapter
        from ..adapters.zarr3 import is_blocking

        store = self.array.store_path.store
        return not isinstance(store, Adapter) or is_blocking(store.store)

    def on(self, tx: Transaction) -> Any:
        """The array (same metadata and config), reading and writing through ``tx``."""
        import zarr
        from zarr.storage import StorePath

        from ..adapters.zarr3 import ZarrStore

        array = self.array
        path = StorePath(ZarrStore(tx), array.store_path.path)
        config = array.async_array.config
        if getattr(tx, "fences_by_version", False):  # no conditional delete: write empty chunks
            config = dataclasses.replace(config, write_empty_chunks=True)
        return zarr.Array(zarr.AsyncArray(metadata=array.metadata, store_path=path,
                                          config=config))

    def _reopen_args(self) -> tuple[Any, ...]:
        store_path = self.array.store_path
        zarr_format = self.array.metadata.zarr_format
        return (store_path.store, store_path.path, zarr_format, self.array.config)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_zarr3_reopened, self._reopen_args())


def _open_zarr3(store: Any, path: str, zarr_format: int, config: Any) -> Any:
    import zarr  # only ever reached with a zarr-python 3 array in hand

    mode = "r" if store.read_only else "r+"
    array = zarr.open_array(store=store, path=path, zarr_format=zarr_format, mode=mode)
    return array.with_config(config)


def _zarr3_reopened(store: Any, path: str, zarr_format: int, config: Any) -> _Zarr3:
    return _Zarr3(_open_zarr3(store, path, zarr_format, config))


def _wrap(array: Any) -> _Zarr2 | _Zarr3:
    if hasattr(array, "async_array") and hasattr(array, "metadata"):
        return _Zarr3(array)
    if all(hasattr(array, name) for name in ("_chunk_key", "__getstate__", "chunk_store")):
        return _Zarr2(array)
    raise TypeError(
        f"synchronized() takes a zarr-python 2 or 3 array, not {type(array).__name__}"
    )


# ------------------------------------------------------------------ proxy
class _Held(threading.local):
    """The locks this thread holds through one proxy: name -> lock, and which are chunks'.

    ``array`` is the array seen through the transaction of a ``locked()``
    block of a transactional proxy (None otherwise).
    """

    def __init__(self) -> None:
        self.locks: dict[str, Any] = {}
        self.chunks = 0  # how many of them are chunk locks
        self.array: Any = None


# Array methods that write without going through __setitem__: the proxy
# refuses them rather than let them bypass the locks.
_UNSYNCHRONIZED = frozenset({
    "set_orthogonal_selection", "set_coordinate_selection", "set_mask_selection",
    "set_block_selection",
})
_INDEXERS = frozenset({"oindex", "vindex", "blocks"})


class SynchronizedArray:
    """A zarr array whose writes hold the locks of the chunks they touch.

    Create it with ``synchronized(array, synchronizer)``.  ``proxy[sel] = value``
    writes each stored chunk's part while holding that chunk's lock (with
    ``atomic=True``: all of them at once); reads and every other attribute
    pass through to the array.  Lock keys are the store keys of the chunks
    (shards, for a sharded array), the keys zarr-python 2 locks.

    Notes
    -----
    - ``with proxy.locked(sel):`` holds the locks of ``sel`` across a whole
      read-modify-write such as ``proxy[sel] = proxy[sel] + 1``.  Inside it,
      writes must stay within ``sel``: taking more locks while holding some
      could deadlock with another writer, so it raises ``LockOrderError``.
    - ``atomic=True`` over a store with transactions (``proxy.transactional``):
      each write is one transaction whose commit alone holds the locks; a
      ``locked()`` block is one transaction too, committed when it ends.
    - ``resize`` and ``append`` hold the lock of the metadata document and
      reload the metadata inside it, so parallel appends never lose a block.
      Other processes' appends are seen after ``refresh()``.
    - Writes take basic selections (integers, slices with positive steps,
      ``...``).  ``oindex``, ``vindex`` and ``blocks`` are read-only here.
    - The proxy pickles as its array's store, path and the synchronizer, and
      reopens the array (with fresh metadata) when unpickled.

    Examples
    --------
    >>> import tempfile, numpy as np, zarr, zstores
    >>> array = zarr.create_array(zarr.storage.LocalStore(tempfile.mkdtemp()),
    ...                           shape=(10,), chunks=(4,), dtype="i4", fill_value=0)
    >>> proxy = zstores.synchronized(array, zstores.ThreadSynchronizer())
    >>> proxy[3:6] = 7   # chunk 0 under its lock, then chunk 1 under its own
    >>> with proxy.locked(slice(0, 5)):
    ...     proxy[0:5] = proxy[0:5] + 1
    >>> proxy[:].tolist()
    [1, 1, 1, 8, 8, 7, 0, 0, 0, 0]
    >>> proxy.append(np.arange(2))
    (12,)
    """

    def __init__(self, array: Any, synchronizer: Synchronizer, *, atomic: bool = False,
                 retries: int = DEFAULT_RETRIES, fenced: bool = False) -> None:
        if not callable(getattr(synchronizer, "__getitem__", None)):
            raise TypeError(
                "synchronizer must return a lock for sync[key] (ThreadSynchronizer, "
                f"ProcessSynchronizer, RedisSynchronizer), not {type(synchronizer).__name__}"
            )
        if isinstance(array, SynchronizedArray):
            array = array.array
        self._zarr = array if isinstance(array, (_Zarr2, _Zarr3)) else _wrap(array)
        self._synchronizer = synchronizer
        self._atomic = bool(atomic)
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 1:
            raise ValueError(f"retries must be an int >= 1 (tries of a write), not {retries!r}")
        self._retries = retries
        self._layout = self._zarr.layout()
        self._held = _Held()
        check_namespaces(synchronizer, _zstores_store(self._zarr.chunk_store()),
                         self._layout.path)
        self._fenced = bool(fenced)
        # Where writes commit atomically: the array's store, if it runs transactions.
        self._tx_store = (self._zarr.transactional_store()
                          if self._atomic or self._fenced else None)
        if self._fenced and self._tx_store is None:
            # No transactions: each chunk written conditionally on its version (object stores).
            self._tx_store = conditional_store(_zstores_store(self._zarr.chunk_store()))
            if self._tx_store is None or self._atomic:
                raise _cannot_fence(self._zarr.chunk_store(), self._atomic)

    # ----------------------------------------------------------- properties
    @property
    def array(self) -> Any:
        """The zarr array itself (writes through it are not synchronized)."""
        return self._zarr.array

    @property
    def synchronizer(self) -> Synchronizer:
        """The synchronizer whose locks the writes hold."""
        return self._synchronizer

    @property
    def atomic(self) -> bool:
        """Whether a write holds all its chunks' locks at once."""
        return self._atomic

    @property
    def fenced(self) -> bool:
        """Whether writes check the locks' fencing tokens in the store's transactions."""
        return self._fenced

    @property
    def transactional(self) -> bool:
        """Whether writes go through the store's transactions (``atomic`` and a store that can)."""
        return self._tx_store is not None and not getattr(self._tx_store, "fences_by_version",
                                                          False)

    @property
    def layout(self) -> ChunkLayout:
        """The stored-chunk grid and keys the locks are named after."""
        return self._layout

    # --------------------------------------------------------------- writes
    def __setitem__(self, selection: Any, value: Any) -> None:
        layout = self._layout
        axes = normalize_selection(selection, layout.shape)
        parts = list(split(axes, layout.grid))
        if not parts:
            return
        value = broadcast_value(value, selection_shape(axes))
        array = self._zarr.array
        if self._fenced:
            self._write_fenced(selection, axes, value, parts)
            return
        if self._tx_store is not None:
            self._write_in_transaction(selection, value,
                                       [layout.chunk_key(part.coords) for part in parts])
            return
        if self._atomic:
            keys = [layout.chunk_key(part.coords) for part in parts]
            with self._holding(keys):
                self._check_leases(keys)
                array[selection] = value
            return
        scalar = np.ndim(value) == 0
        for box in boxes(axes, layout.grid, self._chunks_per_write()):
            keys = [layout.chunk_key(coords) for coords in box.coords]
            with self._holding(keys):
                self._check_leases(keys)
                array[box.selection] = value if scalar else value[box.value_selection]

    def _write_fenced(self, selection: Any, axes: Any, value: Any, parts: list[Any]) -> None:
        """Write under the chunks' locks, each block in a transaction checking their fences."""
        layout, held = self._layout, self._held
        if held.array is not None:  # inside locked(): the block's transaction
            with self._holding([layout.chunk_key(part.coords) for part in parts]):
                held.array[selection] = value
            return
        if self._atomic:
            blocks = [([layout.chunk_key(part.coords) for part in parts], selection, value)]
        else:
            scalar = np.ndim(value) == 0
            blocks = [([layout.chunk_key(coords) for coords in box.coords], box.selection,
                       value if scalar else value[box.value_selection])
                      for box in boxes(axes, layout.grid, self._chunks_per_write())]
        for keys, block, piece in blocks:
            with self._holding(keys):
                self._commit_fenced(keys, block, piece)

    def _commit_fenced(self, keys: list[str], selection: Any, value: Any) -> None:
        """One transaction: read the fences of ``keys``' locks, write, check the leases, commit.

        A conflict on a fence record means the lock was granted again
        (``LeaseExpiredError``); one on a chunk alone means a writer without
        the lock changed it, and the write is tried again under the lock.
        """
        locks = self._fenced_locks(keys)
        for attempt in range(1, self._retries + 1):
            tx = self._tx_store.transaction(bind_thread=False)  # type: ignore[union-attr]
            try:
                fencing.read(tx, locks)
                self._zarr.on(tx)[selection] = value
                self._check_leases(keys)
                tx.commit()
                return
            except TransactionConflictError as conflict:
                fencing.explain(conflict, locks)
                if attempt == self._retries:
                    conflict.add_note(f"{self!r}: the write was tried {attempt} times")
                    raise
            finally:
                if tx.state == "open":
                    tx.rollback()

    def _fenced_locks(self, keys: Iterable[str]) -> list[Any]:
        """The held locks of ``keys`` that carry fencing tokens, each once."""
        held = self._held.locks
        names = {lock_name(self._synchronizer, key) for key in keys}
        return [held[name] for name in sorted(names)
                if getattr(held.get(name), "token", None) is not None]

    def _check_leases(self, keys: Iterable[str]) -> None:
        """Raise ``LeaseExpiredError`` if a held lock of ``keys`` may have lost its lease."""
        held = self._held.locks
        for name in {lock_name(self._synchronizer, key) for key in keys}:
            check = getattr(held.get(name), "check", None)
            if callable(check):
                check()

    def _chunks_per_write(self) -> int:
        """Chunks per zarr call: CHUNKS_PER_WRITE, within BYTES_PER_WRITE on threaded stores."""
        if not self._zarr.threaded_store():
            return CHUNKS_PER_WRITE
        itemsize = getattr(getattr(self._zarr.array, "dtype", None), "itemsize", 0) or 1
        chunk_bytes = itemsize * math.prod(self._layout.grid)
        return max(1, min(CHUNKS_PER_WRITE, BYTES_PER_WRITE // chunk_bytes))

    def _write_in_transaction(self, selection: Any, value: Any, keys: list[str]) -> None:
        """Write in a transaction committed under the chunks' locks; retry on a conflict."""
        held = self._held
        if held.array is not None:  # inside locked(): the block's transaction
            with self._holding(keys):  # refuses chunks outside the block's selection
                held.array[selection] = value
            return
        for attempt in range(1, self._retries + 1):
            tx = self._tx_store.transaction(bind_thread=False)  # type: ignore[union-attr]
            try:
                # zarr reads (partial chunks) and writes without locks; the
                # commit checks the reads and applies the writes at once.
                self._zarr.on(tx)[selection] = value
                with self._holding(keys):
                    self._check_leases(keys)
                    tx.commit()
                return
            except TransactionConflictError as conflict:
                if attempt == self._retries:
                    conflict.add_note(f"{self!r}: the write was tried {attempt} times")
                    raise
            finally:
                if tx.state == "open":
                    tx.rollback()
            # Another writer committed chunks this one read: back off, then retry.
            time.sleep(random.uniform(0, 0.0005 * 2 ** min(attempt, 10)))

    def set_basic_selection(self, selection: Any, value: Any) -> None:
        """``proxy[selection] = value``."""
        self[selection] = value

    @contextmanager
    def locked(self, selection: Any = Ellipsis) -> Iterator[SynchronizedArray]:
        """Hold the locks of every chunk ``selection`` touches, in the global order.

        Examples
        --------
        >>> import tempfile, numpy as np, zarr, zstores
        >>> array = zarr.create_array(zarr.storage.LocalStore(tempfile.mkdtemp()),
        ...                           shape=(200,), chunks=(50,), dtype="i4", fill_value=0)
        >>> proxy = zstores.synchronized(array, zstores.ThreadSynchronizer())
        >>> with proxy.locked(np.s_[0:100]):   # the locks of chunks 0 and 1
        ...     proxy[0:100] = proxy[0:100] + 1
        >>> int(proxy[99]), int(proxy[100])
        (1, 0)
        """
        keys = self._layout.keys(selection)
        with self._holding(keys):
            if self._tx_store is None or self._held.array is not None:
                yield self
                return
            # Reads and writes of the block go through one transaction,
            # committed (still under the locks) when the block ends.
            tx = self._tx_store.transaction(bind_thread=False)
            try:
                locks = self._fenced_locks(keys) if self._fenced else []
                fencing.read(tx, locks)
                self._held.array = self._zarr.on(tx)
                try:
                    yield self
                finally:
                    self._held.array = None
                self._check_leases(keys)
                try:
                    tx.commit()
                except TransactionConflictError as conflict:
                    fencing.explain(conflict, locks)
                    raise
            finally:
                if tx.state == "open":
                    tx.rollback()

    def resize(self, *shape: Any) -> None:
        """Change the shape, under the metadata lock, from the latest metadata.

        Takes ``resize(10, 20)`` or ``resize((10, 20))``.
        """
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        new_shape = tuple(operator.index(size) for size in shape)
        with self._holding([self._layout.metadata_path], metadata=True):
            self._reload()
            self._zarr.resize(new_shape)
            self._layout = self._zarr.layout()

    def append(self, data: Any, axis: int = 0) -> tuple[int, ...]:
        """Append ``data`` along ``axis`` after the latest end; return the new shape.

        The metadata lock is held from reading the current shape until the
        data is written, so appends from several processes each get a region
        of their own.
        """
        data = np.asanyarray(data)
        with self._holding([self._layout.metadata_path], metadata=True):
            self._reload()
            old_shape = self._layout.shape
            axis = _check_append(old_shape, data.shape, axis)
            new_shape = tuple(
                size + data.shape[axis] if dim == axis else size
                for dim, size in enumerate(old_shape)
            )
            self._zarr.resize(new_shape)
            self._layout = self._zarr.layout()
            region = tuple(
                slice(old_shape[dim], None) if dim == axis else slice(None)
                for dim in range(len(old_shape))
            )
            self[region] = data
        return new_shape

    def refresh(self) -> None:
        """Reload the metadata (to see other processes' resizes and appends)."""
        self._reload()

    def _reload(self) -> None:
        self._zarr.reload()
        self._layout = self._zarr.layout()

    # ---------------------------------------------------------------- locks
    @contextmanager
    def _holding(self, keys: Iterable[str], *, metadata: bool = False) -> Iterator[None]:
        """Hold the locks of ``keys``: each lock once, in the order of their names."""
        held = self._held
        wanted: dict[str, str] = {}
        for key in keys:
            wanted.setdefault(lock_name(self._synchronizer, key), key)
        new = sorted(name for name in wanted if name not in held.locks)
        self._check_order(new, metadata)
        taken: list[str] = []
        try:
            for name in new:
                lock = self._synchronizer[wanted[name]]
                lock.__enter__()
                held.locks[name] = lock
                taken.append(name)
                held.chunks += not metadata
            if self._fenced and not metadata:
                # Before anything is read under them: no earlier holder can
                # commit once its token is recorded (one transaction for all).
                fencing.advance(self._tx_store, *(  # type: ignore[arg-type]
                    held.locks[name] for name in taken
                    if getattr(held.locks[name], "token", None) is not None))
            yield
        except BaseException as error:
            # The error that stopped the block is the one to see; a lock that
            # cannot be released as well (its server gone) is noted on it.
            try:
                self._release(taken, metadata)
            except Exception as release_error:  # noqa: BLE001 - reported on the first error
                error.add_note(f"releasing the locks failed too: {release_error!r}")
            raise
        else:
            self._release(taken, metadata)

    def _check_order(self, new: list[str], metadata: bool) -> None:
        held = self._held
        if metadata and held.locks:
            raise LockOrderError(
                "resize() and append() take the metadata lock, which must come before "
                "any chunk lock: call them outside proxy.locked()"
            )
        if new and held.chunks:
            raise LockOrderError(
                "a write inside proxy.locked(selection) touches chunks outside that "
                f"selection ({len(new)} more locks); taking locks while holding others "
                "could deadlock: lock the whole region up front"
            )

    def _release(self, names: list[str], metadata: bool) -> None:
        held = self._held
        failure: BaseException | None = None
        for name in reversed(names):
            lock = held.locks.pop(name)
            held.chunks -= not metadata
            try:
                lock.__exit__(None, None, None)
            except LeaseExpiredError as error:
                # A fenced write committed only while no later holder had
                # recorded its token: a lease lost after it changes nothing.
                if not (self._fenced and not metadata):
                    failure = failure or error
            except BaseException as error:  # noqa: BLE001 - release the others, then re-raise
                failure = failure or error
        if failure is not None:
            raise failure

    # ------------------------------------------------------- pass-through
    def __getitem__(self, selection: Any) -> Any:
        inside = self._held.array  # a transactional locked() block reads its transaction
        return (self._zarr.array if inside is None else inside)[selection]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_zarr", "_held", "_layout"):
            raise AttributeError(name)
        if name in _UNSYNCHRONIZED:
            raise AttributeError(
                f"SynchronizedArray does not synchronize {name}(); write with "
                "proxy[selection] = value (basic selections), or through proxy.array "
                "without locks"
            )
        attribute = getattr(self._zarr.array, name)
        return _ReadOnlyIndexer(attribute, name) if name in _INDEXERS else attribute

    def __len__(self) -> int:
        return len(self._zarr.array)

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        return self._zarr.array.__array__(*args, **kwargs)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore, (self._zarr, self._synchronizer, self._atomic, self._retries,
                           self._fenced))

    def __repr__(self) -> str:
        mode = ", atomic=True" if self._atomic else ""
        mode += ", fenced=True" if self._fenced else ""
        return f"synchronized({self._zarr.array!r}, {self._synchronizer!r}{mode})"


def _restore(zarr: _Zarr2 | _Zarr3, synchronizer: Synchronizer, atomic: bool,
             retries: int = DEFAULT_RETRIES, fenced: bool = False) -> SynchronizedArray:
    return SynchronizedArray(zarr, synchronizer, atomic=atomic, retries=retries, fenced=fenced)


def _cannot_fence(chunk_store: Any, atomic: bool = False) -> UnsupportedOperationError:
    store = _zstores_store(chunk_store)
    if store is not None and atomic:
        return UnsupportedOperationError(
            f"synchronized(..., fenced=True, atomic=True): {store!r} has no transactions, so a "
            "write spanning chunks cannot land all at once; fenced writes there write each "
            "chunk conditionally on its version: drop atomic=True")
    if store is None:
        what = (f"the zarr store {type(chunk_store).__name__} (not a zstores store: open the "
                "array on zstores.zarr_store(...))")
    else:
        what = (f"{store!r}, which neither runs transactions nor writes conditionally "
                "(store.supports_transactions, supports_compare_and_swap)")
    return UnsupportedOperationError(
        f"synchronized(..., fenced=True) checks fencing tokens inside the data store's "
        f"transactions, or writes each chunk conditionally on its version, and the array's "
        f"chunks are in {what}; fenced writes need a store with transactions (Memory, LMDB, "
        "SQLite, Redis) or conditional writes (S3, GCS, Azure)"
    )


class _ReadOnlyIndexer:
    """``proxy.oindex`` and friends: reads pass through, writes are refused."""

    def __init__(self, indexer: Any, name: str) -> None:
        self._indexer = indexer
        self._name = name

    def __getitem__(self, selection: Any) -> Any:
        return self._indexer[selection]

    def __setitem__(self, selection: Any, value: Any) -> None:
        raise TypeError(
            f"SynchronizedArray.{self._name} is read-only: write with proxy[selection] = value "
            "(basic selections), or through proxy.array without locks"
        )


def _check_append(shape: tuple[int, ...], data_shape: tuple[int, ...], axis: int) -> int:
    if len(data_shape) != len(shape):
        raise ValueError(
            f"cannot append data of shape {data_shape} to an array of shape {shape}: "
            "the numbers of dimensions differ"
        )
    if not -len(shape) <= axis < len(shape):
        raise IndexError(f"axis {axis} is out of bounds for an array of {len(shape)} dimensions")
    axis %= len(shape)
    for dim, (size, given) in enumerate(zip(shape, data_shape, strict=False)):
        if dim != axis and size != given:
            raise ValueError(
                f"cannot append data of shape {data_shape} to an array of shape {shape} "
                f"along axis {axis}: dimension {dim} differs"
            )
    return axis


def synchronized(array: Any, synchronizer: Synchronizer, *,
                 atomic: bool = False, retries: int = DEFAULT_RETRIES,
                 fenced: bool = False) -> SynchronizedArray:
    """Wrap a zarr-python 2 or 3 array so that its writes hold chunk locks.

    Parameters
    ----------
    array : zarr.Array
        A zarr-python 3 array (Zarr format 2 or 3, sharded or not) or a
        zarr-python 2.18 array.  A zarr-python 2 array's own ``synchronizer``
        is replaced by this one.
    synchronizer : Thread-, Process-, Redis- or ObjectStoreSynchronizer
        Or anything with ``sync[key] -> lock`` (zarr-python 2's synchronizers).
    atomic : bool
        Hold the locks of every chunk a write touches before writing any, so
        that a region spanning chunks is written as a whole with respect to
        other synchronized writers and to readers inside ``locked()``.  Over a
        zstores store with transactions (``zstores.zarr_store(...)`` on LMDB,
        SQLite, Memory ...), each write is one transaction instead: readers
        everywhere see the region all at once, a crash leaves none of it, and
        the locks are held only while it commits.
    retries : int
        Tries of a transactional write whose commit finds a chunk it read
        changed by another writer, before ``TransactionConflictError``.
    fenced : bool
        Check each lock's fencing token inside the data store's
        transactions (``RedisSynchronizer`` locks; the store must run
        transactions): a writer whose lease ran out and whose lock was
        granted again never lands a write, however long it was paused or cut
        off; it gets ``LeaseExpiredError`` and nothing is written.  Every
        write and ``locked()`` block is then one transaction under the
        locks, and fence records are kept under ``.zstores/fence/``.  Locks
        without a lease (thread and file locks) need no fencing: with them
        the writes are transactional and nothing else changes.  On an
        object store (no transactions: S3, GCS, Azure) each chunk is instead
        written conditionally on the version read under its lock, so a late
        write never overwrites a later holder's (not with ``atomic=True``,
        which needs transactions; see docs/parallel-writes.md).

    Returns
    -------
    SynchronizedArray

    Examples
    --------
    >>> import tempfile, zarr, zstores
    >>> array = zarr.create_array(zarr.storage.LocalStore(tempfile.mkdtemp()),
    ...                           shape=(3000,), chunks=(999,), dtype="i4")
    >>> sync = zstores.ProcessSynchronizer(tempfile.mkdtemp(), timeout=60)
    >>> proxy = zstores.synchronized(array, sync)
    >>> proxy[1000:2000] = 1  # safe beside other processes writing 0:1000 and 2000:3000
    >>> backend = zstores.MemoryStore()
    >>> array = zarr.create_array(zstores.zarr_store(backend), shape=(100,), chunks=(10,),
    ...                           dtype="i4", fill_value=0)
    >>> proxy = zstores.synchronized(array, zstores.ThreadSynchronizer(), atomic=True)
    >>> proxy.transactional
    True
    >>> proxy[5:95] = 3  # ten chunks, one commit
    """
    return SynchronizedArray(array, synchronizer, atomic=atomic, retries=retries, fenced=fenced)
