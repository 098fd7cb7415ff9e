"""What the zarr-python adapters share (``zarr3.py``, ``zarr2.py``, ``fsspec.py``).

Who closes the wrapped store, when two adapters are equal, how they pickle,
the transaction slot, and the listing helpers.  The package's
``__init__`` picks an adapter and imports the chosen one lazily; the
adapters import this module, never the package, so no import goes round.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..base import Store
from ..errors import ReadOnlyError, TransactionError, UnsupportedOperationError
from ..keys import normalize_storage_path, prefix_of

if TYPE_CHECKING:
    from ..transactions import Transaction

__all__ = ["Adapter", "TransactionSlot", "keys_with_prefix", "refuse_without_transactions",
           "size_under"]


def refuse_without_transactions(store: Store, asked: str) -> None:
    """Raise ``UnsupportedOperationError`` for ``asked`` if ``store`` has no transactions."""
    if not store.supports_transactions:
        raise UnsupportedOperationError(
            f"{asked}: {store!r} cannot run transactions (supports_transactions=False); "
            "use LMDB, SQLite, Memory, Redis or MongoDB"
        )


class TransactionSlot:
    """The transaction an adapter routes its calls to, shared with adapters made from it.

    ``with_read_only`` copies of an adapter (zarr-python makes them when it
    opens an array with another mode) share the slot, so they see the
    transaction's writes too.
    """

    def __init__(self) -> None:
        self.transaction: Transaction | None = None
        self._lock = threading.Lock()

    @contextmanager
    def open(self, store: Store, owner: object) -> Iterator[Transaction]:
        """Route the adapter's calls to a new transaction of ``store`` until the block ends.

        Commits when the block ends normally, rolls back when it raises.  The
        slot is emptied before the commit, so calls made after the block go
        to the store.
        """
        with self._lock:
            if self.transaction is not None:
                raise TransactionError(
                    f"{owner!r} already has a transaction open, and transactions do not nest "
                    "(commit or roll back the open one first)"
                )
            tx = store.transaction(bind_thread=False)
            self.transaction = tx
        try:
            yield tx
        except BaseException:
            self._leave(tx)
            if tx.state == "open":
                tx.rollback()
            raise
        self._leave(tx)
        if tx.state == "open":
            tx.commit()

    def _leave(self, tx: Transaction) -> None:
        with self._lock:
            if self.transaction is tx:
                self.transaction = None


class Adapter:
    """Mixin of both adapters: the wrapped store, its ownership, equality and pickling.

    ``_store`` is the wrapped ``zstores.Store``; ``_owns_store`` says whether
    closing the adapter closes it (stores opened from a URL or unpickled).  An
    in-memory store is never closed by an adapter: its data would be gone,
    while zarr-python expects a closed store to open again with its data, as
    zarr's own ``MemoryStore`` does.
    """

    _store: Store
    _owns_store: bool
    _slot: TransactionSlot

    def transaction(self) -> Any:
        """Make every write through this adapter, from any thread, one commit.

        ``with adapter.transaction():`` routes the adapter's calls (and those
        of its ``with_read_only`` copies) to one ``store.transaction()``:
        whatever zarr-python writes meanwhile, from however many tasks and
        threads, becomes visible to other adapters, handles and processes
        all at once when the block ends, or not at all (an exception in the
        block, a crash).  Reads through the adapter see the writes; other
        adapters and processes do not until the commit.

        The transaction belongs to the adapter, not to a thread: every call
        through it joins, so use another adapter for independent work meanwhile.

        Yields
        ------
        zstores.Transaction
            The open transaction (``changes()``, ``commit()``, ``rollback()``).

        Raises
        ------
        zstores.UnsupportedOperationError
            If the store cannot run transactions.
        zstores.TransactionError
            If the adapter already has one open (transactions do not nest).
        zstores.TransactionConflictError
            At the end of the block, if a value the transaction read (a chunk
            zarr-python read to update part of it, metadata) was changed by
            another writer since; nothing was committed: run it again.
        zstores.ReadOnlyError
            If the adapter is read-only.

        Examples
        --------
        >>> import numpy as np, zarr, zstores
        >>> backend = zstores.MemoryStore()
        >>> zs = zstores.zarr_store(backend, transaction=True)
        >>> array = zarr.create_array(zs, shape=(4, 4), chunks=(2, 2), dtype="i4")
        >>> with zs.transaction():
        ...     array[1:3, 1:3] = 7          # four chunks, one commit
        ...     sorted(backend.list_prefix("c"))  # nothing committed yet
        []
        >>> sorted(backend.list_prefix("c"))
        ['c/0/0', 'c/0/1', 'c/1/0', 'c/1/1']
        """
        self._check_transaction_writable()
        refuse_without_transactions(self._store, f"{self!r}.transaction()")
        self._revive()
        return self._slot.open(self._store, self)

    def _check_transaction_writable(self) -> None:
        if self.read_only:  # type: ignore[attr-defined]
            raise ReadOnlyError(f"{self!r} is read-only: it cannot open a transaction")

    def _target(self) -> Store:
        """Where calls go: the open transaction, else the wrapped store."""
        tx = self._slot.transaction
        return self._store if tx is None else tx

    def _refuse_pickle_in_transaction(self) -> None:
        if self._slot.transaction is not None:
            raise TypeError(
                f"{self!r} has a transaction open: a copy in another process would write "
                "around it (commit first, or write from this process)"
            )

    @classmethod
    def _checked_read_only(cls, store: Store, read_only: bool | None, hint: str = "") -> bool:
        """Whether the adapter is read-only: as asked, else as ``store`` is; refuse a mismatch."""
        if not isinstance(store, Store):
            raise TypeError(
                f"{cls.__name__} wraps a zstores.Store, not {type(store).__name__} "
                "(zstores.zarr_store also takes a URL)"
            )
        if read_only is None:
            return store.read_only
        if not read_only and store.read_only:
            raise ValueError(
                f"{store!r} was opened read-only (mode 'r'), so it cannot back a writable "
                f"{cls.__name__}{hint}"
            )
        return bool(read_only)

    @property
    def store(self) -> Store:
        """The wrapped ``zstores.Store``."""
        return self._store

    def _release(self) -> None:
        """Close the wrapped store if this adapter owns it and closing loses nothing."""
        if self._owns_store and self._store.persistent:
            self._store.close()

    def _revive(self) -> None:
        """Reopen an owned store closed by ``_release`` (zarr reopens closed stores)."""
        store = self._store
        if store.closed and self._owns_store and store.persistent:
            self._store = store.reopen()

    def _same_store(self, other: Adapter) -> bool:
        mine, theirs = self._store, other._store
        if mine is theirs:
            return True
        if type(mine) is not type(theirs):
            return False
        if mine.persistent:
            return bool(mine == theirs)
        # In-memory stores are equal when they hold equal data, as zarr's
        # MemoryStore defines it: a pickled copy equals its original.
        return dict(mine.items()) == dict(theirs.items())

    def _identity_hash(self) -> int:
        store = self._store
        return hash((type(self), type(store), hash(store) if store.persistent else 0))



def keys_with_prefix(store: Store, prefix: str) -> list[str]:
    """Every key of ``store`` that starts with the string ``prefix`` (``"fo"`` matches ``foo/x``).

    Lists only the folder the prefix ends in, through the backend's range
    scan, and filters by the partial last segment.
    """
    folder, _, partial = prefix.rpartition("/")
    keys = store.list_prefix(folder)
    if not partial:
        return keys
    wanted = prefix_of(normalize_storage_path(folder)) + partial
    return [key for key in keys if key.startswith(wanted)]


def size_under(store: Store, prefix: str) -> int:
    """Total size of the values under the folder ``prefix`` (the whole store for "")."""
    return store.getsize_prefix(prefix)
