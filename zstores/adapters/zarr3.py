"""ZarrStore: any ``zstores.Store`` as a zarr-python 3 store.

zarr-python 3 drives stores from an event loop.  Backends that block (files,
SQLite, DBM, zip, network) run in worker threads so the loop stays free;
in-memory and memory-mapped ones (Memory, LMDB) answer faster than a thread
hand-off costs and are called directly (see ``is_blocking``).

Calls to blocking backends made in the same turn of the loop travel to the
workers together: zarr reads up to ``async.concurrency`` chunks at once, and
one hand-off for all of them costs what LocalStore pays for each one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, TypeVar

from zarr.abc.store import (
    ByteRequest,
    OffsetByteRequest,
    RangeByteRequest,
    SuffixByteRequest,
)
from zarr.abc.store import Store as ZarrABCStore
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.core.buffer.core import default_buffer_prototype

from ..base import Store
from ..errors import InvalidKeyError
from ..keys import RESERVED_PREFIX
from .common import Adapter, TransactionSlot, keys_with_prefix, size_under
from .workers import WORKERS as _WORKERS

__all__ = ["ZarrStore", "is_blocking"]

T = TypeVar("T")

# Keys per hand-off when a listing is pulled from a blocking backend.
_LIST_BATCH = 1000


def is_blocking(store: Store) -> bool:
    """Whether the adapter runs ``store``'s calls in worker threads: its ``blocking`` flag.

    Memory and LMDB stores (and wrappers of them) are called directly, every
    other store in worker threads; a thread hand-off costs more than a
    memory copy (measured by scripts/bench_zarr.py).
    """
    return bool(getattr(store, "blocking", True))


def _range_args(byte_range: ByteRequest) -> tuple[int, int | None]:
    """``(start, length)`` for ``Store.get_range`` from a zarr byte request."""
    if isinstance(byte_range, RangeByteRequest):
        return byte_range.start, max(byte_range.end - byte_range.start, 0)
    if isinstance(byte_range, OffsetByteRequest):
        return byte_range.offset, None
    if isinstance(byte_range, SuffixByteRequest):
        if byte_range.suffix == 0:
            return 0, 0  # "-0" would be the whole value
        return -byte_range.suffix, None
    raise TypeError(
        f"Unexpected byte_range, got {byte_range!r}; expected None, RangeByteRequest, "
        "OffsetByteRequest or SuffixByteRequest"
    )


def _as_bytes(value: Buffer) -> Any:
    if not isinstance(value, Buffer):
        raise TypeError(
            f"a zarr store value must be a zarr.core.buffer.Buffer, not {type(value).__name__}"
        )
    return value.as_numpy_array()  # a view for CPU buffers; the backend copies it


class ZarrStore(Adapter, ZarrABCStore):
    """A ``zstores.Store`` as a zarr-python 3 store.

    Every zarr-python 3 call maps onto the store's synchronous API and its fast
    paths: byte ranges onto ``get_range``, ``get_partial_values`` and many
    keys onto ``getitems``/``setitems`` (one transaction where the backend
    has them), ``delete_dir`` onto ``rmdir``, ``list_dir`` onto ``listdir``,
    ``getsize_prefix`` onto the backend's size scan.  The synchronous
    ``get_sync``, ``set_sync`` and ``delete_sync`` call the store directly.

    Parameters
    ----------
    store : zstores.Store
        The store to wrap.
    read_only : bool or None
        Refuse writes; ``None`` (default) follows the store (read-only for
        mode ``"r"``).  A store opened with mode ``"r"`` cannot back a
        writable adapter, except through ``with_read_only(False)``, which
        reopens it.
    owns_store : bool
        Close ``store`` when the adapter is closed (``zarr_store(url)`` sets
        it).  An owned store closed this way reopens on the adapter's next
        use, as zarr-python expects of its stores.
    transaction_slot : TransactionSlot or None
        Share the open transaction of another adapter (``with_read_only``
        passes its own); None: a slot of its own.

    Notes
    -----
    ``with adapter.transaction():`` makes everything zarr-python writes
    through the adapter meanwhile one commit (see ``Adapter.transaction``).

    ``supports_deletes`` is the store's own flag; ``supports_writes`` and
    ``supports_listing`` are True; ``supports_partial_writes`` is False, as
    for every zarr-python 3 store.  ``set_if_not_exists`` is the store's
    own ``set_if_not_exists``: atomic against every writer, in any process,
    where the store declares ``supports_create_if_absent``; on the others
    (an object store through fsspec) it checks and writes in one call, which
    is atomic among the threads of this process only.

    Examples
    --------
    >>> import numpy as np, zarr
    >>> from zstores import MemoryStore
    >>> from zstores.adapters.zarr3 import ZarrStore
    >>> backend = MemoryStore()
    >>> array = zarr.create_array(ZarrStore(backend), shape=(4,), chunks=(2,), dtype="u1")
    >>> array[:] = np.arange(4)
    >>> sorted(backend)
    ['c/0', 'c/1', 'zarr.json']
    """

    supports_writes: bool = True
    supports_listing: bool = True

    def __init__(self, store: Store, *, read_only: bool | None = None,
                 owns_store: bool = False,
                 transaction_slot: TransactionSlot | None = None) -> None:
        read_only = self._checked_read_only(
            store, read_only, "; open it with another mode or use with_read_only(False)")
        super().__init__(read_only=read_only)
        self._store = store
        self._owns_store = bool(owns_store)
        self._blocking = is_blocking(store)
        self._slot = transaction_slot or TransactionSlot()

    # ----------------------------------------------------------- dispatch
    def _ready(self) -> Store:
        """Where calls go: the open transaction, else the wrapped store (reopened if closed)."""
        if not self._is_open:
            self._open_sync()
        tx = self._slot.transaction
        return self._store if tx is None else tx

    async def _run(self, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)``: right here, or in a worker thread for a blocking store."""
        if not self._blocking:
            return function(*args)
        return await _WORKERS.run(lambda: function(*args))

    # ----------------------------------------------------------- lifecycle
    async def _open(self) -> None:
        self._revive()
        await super()._open()

    def _open_sync(self) -> None:
        # what zarr's Store._open does, without a coroutine on every call
        self._revive()
        self._is_open = True

    def close(self) -> None:
        """Mark the adapter closed; an owned persistent store is closed too.

        zarr-python reopens a closed store on its next use, and so does this
        adapter (reopening an owned store from its location).
        """
        super().close()
        self._release()

    def with_read_only(self, read_only: bool = False) -> ZarrStore:
        """A new, not yet opened adapter on the same store with another ``read_only``.

        It shares the wrapped store, except that a writable adapter over a
        store opened with mode ``"r"`` reopens the store with mode ``"r+"``
        (and owns that handle).
        """
        self._revive()  # zarr opens arrays on a closed store through here
        store, owned, slot = self._store, False, self._slot
        if not read_only and store.read_only:
            if not store.persistent:
                raise ValueError(f"{store!r} is in memory and read-only; it cannot become writable")
            store, owned, slot = store.reopen("r+"), True, None
        return type(self)(store, read_only=read_only, owns_store=owned, transaction_slot=slot)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ZarrStore):
            return NotImplemented
        return self.read_only == other.read_only and self._same_store(other)

    def __hash__(self) -> int:
        return self._identity_hash()

    def __reduce__(self) -> tuple[Any, ...]:
        # The store pickles itself: a persistent one as how to reopen it, an
        # in-memory one with its data.
        self._refuse_pickle_in_transaction()
        return (_unpickle, (type(self), self._store, self.read_only))

    def __repr__(self) -> str:
        return f"ZarrStore({self._store!r}, read_only={self.read_only})"

    def __str__(self) -> str:
        # zarr shows str(store) in paths and messages: say which data (never a password)
        return repr(self._store)

    # ------------------------------------------------------------ reading
    async def get(
        self,
        key: str,
        prototype: BufferPrototype | None = None,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        """The value of ``key`` (or a byte range of it), or None if it is missing."""
        data = await self._run(_read_span, self._ready(), key, _span_of(byte_range))
        return _as_buffer(data, prototype)

    def get_sync(
        self,
        key: str,
        *,
        prototype: BufferPrototype | None = None,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        """``get`` without the event loop: a direct call into the store."""
        return _as_buffer(_read_span(self._ready(), key, _span_of(byte_range)), prototype)

    async def get_partial_values(
        self,
        prototype: BufferPrototype,
        key_ranges: Iterable[tuple[str, ByteRequest | None]],
    ) -> list[Buffer | None]:
        """Many values or ranges in one call into the store."""
        requests = [(key, _span_of(byte_range)) for key, byte_range in key_ranges]
        values = await self._run(_read_all, self._ready(), requests)
        return [_as_buffer(data, prototype) for data in values]

    async def _get_many(
        self, requests: Iterable[tuple[str, BufferPrototype, ByteRequest | None]]
    ) -> AsyncIterator[tuple[str, Buffer | None]]:
        requests = list(requests)
        whole = [key for key, _, byte_range in requests if byte_range is None]
        store = self._ready()
        found = await self._run(store.getviews, whole) if whole else {}
        for key, prototype, byte_range in requests:
            if byte_range is None:
                yield key, _as_buffer(found.get(key), prototype)
            else:
                yield key, await self.get(key, prototype, byte_range)

    async def exists(self, key: str) -> bool:
        """Whether ``key`` holds a value (a prefix alone is not a key)."""
        return await self._run(self._ready().__contains__, key)

    async def getsize(self, key: str) -> int:
        """Size of the value at ``key`` in bytes; FileNotFoundError if missing."""
        return await self._run(_key_size, self._ready(), key)

    async def getsize_prefix(self, prefix: str) -> int:
        """Total size of the values under ``prefix`` (a group or array path)."""
        return await self._run(size_under, self._ready(), prefix)

    # ------------------------------------------------------------ writing
    async def set(self, key: str, value: Buffer) -> None:
        """Store ``value`` at ``key``."""
        self._check_writable()
        await self._run(self._ready().__setitem__, key, _as_bytes(value))

    def set_sync(self, key: str, value: Buffer) -> None:
        """``set`` without the event loop: a direct call into the store."""
        self._check_writable()
        self._ready()[key] = _as_bytes(value)

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        """Store ``value`` at ``key`` unless the key exists."""
        self._check_writable()
        await self._run(_set_if_missing, self._ready(), key, _as_bytes(value))

    async def _set_many(self, values: Iterable[tuple[str, Buffer]]) -> None:
        self._check_writable()
        items = {key: _as_bytes(value) for key, value in values}
        await self._run(self._ready().setitems, items)

    @property
    def supports_deletes(self) -> bool:  # type: ignore[override]
        """The wrapped store's own ``supports_deletes``."""
        return bool(self._store.supports_deletes)

    async def delete(self, key: str) -> None:
        """Delete ``key``; a missing key is not an error."""
        self._check_writable()
        await self._run(self._ready().delitems, [key])

    def delete_sync(self, key: str) -> None:
        """``delete`` without the event loop: a direct call into the store."""
        self._check_writable()
        self._ready().delitems([key])

    async def delete_dir(self, prefix: str) -> None:
        """Delete every key under ``prefix`` (everything for ``""``)."""
        self._check_writable()
        await self._run(self._ready().rmdir, prefix)

    async def clear(self) -> None:
        """Delete every key."""
        self._check_writable()
        await self._run(self._ready().clear)

    # ------------------------------------------------------------ listing
    async def is_empty(self, prefix: str) -> bool:
        """True when no key lies under ``prefix`` (the whole store for ``""``)."""
        return not await self._run(self._ready().listdir, prefix)

    async def list(self) -> AsyncIterator[str]:  # type: ignore[override]
        """Every key, streamed in batches as the backend yields them."""
        async for key in self._stream(iter, self._ready()):
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:  # type: ignore[override]
        """Every key that starts with ``prefix``."""
        async for key in self._stream(keys_with_prefix, self._ready(), prefix):
            yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:  # type: ignore[override]
        """Names of the keys and sub-prefixes directly under ``prefix``.

        zstores' own records (``.zstores/`` at the root: fences of
        synchronized writes) are left out: they are no Zarr node.
        """
        hidden = RESERVED_PREFIX.rstrip("/") if not prefix.strip("/") else None
        async for name in self._stream(self._ready().listdir, prefix):
            if name != hidden:
                yield name

    async def _stream(
        self, listing: Callable[..., Iterable[str]], *args: Any
    ) -> AsyncIterator[str]:
        """The keys ``listing(*args)`` yields, pulled in batches from a blocking store.

        A listing that comes back as a list (``listdir``, ``list_prefix``) is
        whole already: it travels back in the one hand-off that made it, as
        each further hand-off costs a thread wake-up (on a loaded machine,
        more than listing a folder of a few thousand names).  Only a lazy
        iterator (every key of the store) is pulled in batches.
        """
        if not self._blocking:
            for key in listing(*args):
                yield key
            return
        found = await self._run(listing, *args)
        if isinstance(found, list):
            for key in found:
                yield key
            return
        keys = iter(found)
        while True:
            batch = await self._run(_take, keys, _LIST_BATCH)
            for key in batch:
                yield key
            if len(batch) < _LIST_BATCH:  # the iterator ran out: no empty batch to fetch
                return


def _take(iterator: Any, count: int) -> list[str]:
    batch = []
    for key in iterator:
        batch.append(key)
        if len(batch) == count:
            break
    return batch


def _read(store: Store, key: str) -> Any:
    """The value of ``key`` through ``getview``, or None if missing.

    zarr only reads what a store gives it (it copies a chunk before changing
    it), so a read-only view does: for LMDB's large values, a zero-copy view
    of the map that keeps its read transaction open while zarr holds it.  A
    copy would cost a fresh buffer of the chunk's size on every read, which
    writers of MiB chunks pay in page faults (docs/parallel-writes.md).
    """
    try:
        return store.getview(key)
    except KeyError:
        return None
    except InvalidKeyError:
        if key:
            raise
        return None  # zarr asks for the root ("") at times: nothing is stored there


def _read_range(store: Store, key: str, start: int, length: int | None) -> bytes | None:
    try:
        return store.get_range(key, start, length)
    except KeyError:
        return None


def _read_span(store: Store, key: str, span: tuple[int, int | None] | None) -> Any:
    """The whole value (``span`` None; read-only, a view where the store has one) or
    ``(start, length)`` of it; None if missing."""
    return _read(store, key) if span is None else _read_range(store, key, *span)


def _span_of(byte_range: ByteRequest | None) -> tuple[int, int | None] | None:
    return None if byte_range is None else _range_args(byte_range)


def _as_buffer(data: Any, prototype: BufferPrototype | None) -> Buffer | None:
    if data is None:
        return None
    return (prototype or default_buffer_prototype()).buffer.from_bytes(data)


def _read_all(
    store: Store, requests: list[tuple[str, tuple[int, int | None] | None]]
) -> list[bytes | None]:
    return [_read_span(store, key, span) for key, span in requests]


def _set_if_missing(store: Store, key: str, value: Any) -> None:
    if store.supports_create_if_absent:
        store.set_if_not_exists(key, value)
    elif key not in store:
        # The store cannot create atomically (it says why if asked): zarr only
        # needs the key written once, so check and write as before.
        store[key] = value


def _key_size(store: Store, key: str) -> int:
    # One backend call (stat), where "in" and getsize made up to three.
    try:
        size = store.stat(key)
    except InvalidKeyError:
        size = None  # zarr asks, it does not write: a key that cannot exist is missing
    if size is None:
        raise FileNotFoundError(key)
    return size


def _unpickle(cls: type[ZarrStore], store: Store, read_only: bool) -> ZarrStore:
    # The unpickled store is a handle of its own: the adapter closes it.
    return cls(store, read_only=read_only, owns_store=True)
