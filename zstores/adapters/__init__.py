"""zarr-python adapters: ``zarr_store(store_or_url)`` returns what the installed zarr takes.

zarr-python 3 gets a ``zarr.abc.store.Store`` subclass (``adapters/zarr3.py``),
zarr-python 2.18 a ``zarr.storage.BaseStore`` subclass (``adapters/zarr2.py``);
both wrap a ``zstores.Store`` and call only its public methods.  zarr is
imported only when an adapter is asked for, so the core never depends on it.

What both adapters share lives here: who closes the wrapped store, when two
adapters are equal, and how they pickle.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..base import Mode, Store, check_mode
from ..errors import ReadOnlyError, TransactionError, UnsupportedOperationError
from ..keys import normalize_storage_path, prefix_of

if TYPE_CHECKING:
    from ..transactions import Transaction

__all__ = ["zarr_store"]

#: What to do when zarr-python, the optional package the adapters serve, is missing.
MISSING_ZARR = "zarr_store needs zarr-python: pip install 'zstores[zarr]'"


def zarr_store(
    store_or_url: Store | str | os.PathLike[str], *, mode: Mode = "a", transaction: bool = False
) -> Any:
    """Wrap a store for the installed zarr-python (2.18 or 3.x).

    Parameters
    ----------
    store_or_url : zstores.Store, str or os.PathLike
        A store, or a URL or path for ``zstores.open_store``.  A store opened
        here from a URL belongs to the adapter: closing the adapter closes it.
        A store passed in stays the caller's to close.
    mode : {"a", "r", "r+", "w", "w-"}
        The mode a URL is opened with.  ``"r"`` also makes the adapter
        read-only over a writable store; otherwise the adapter is read-only
        exactly when the store is.
    transaction : bool
        Refuse, here and now, a store that cannot run transactions, so that
        ``with adapter.transaction():`` later cannot fail for that reason.
        Every adapter has ``transaction()``; this only checks early.  See
        docs/transactions.md, "Zarr arrays".

    Raises
    ------
    ModuleNotFoundError
        If zarr-python is not installed (``pip install 'zstores[zarr]'``).
    zstores.UnsupportedOperationError
        With ``transaction=True``, if the store has no transactions (a store
        opened here from a URL is closed again first).

    Returns
    -------
    zarr.abc.store.Store or zarr.storage.BaseStore
        ``zstores.adapters.zarr3.ZarrStore`` under zarr-python 3,
        ``zstores.adapters.zarr2.Zarr2Store`` under zarr-python 2.18.

    Examples
    --------
    >>> import os, tempfile, numpy as np, zarr
    >>> from zstores.adapters import zarr_store
    >>> path = os.path.join(tempfile.mkdtemp(), "data.lmdb")
    >>> array = zarr.open_array(zarr_store(f"lmdb://{path}"), mode="w",
    ...                         shape=(4, 4), chunks=(2, 2), dtype="i4")
    >>> array[:] = np.arange(16).reshape(4, 4)
    >>> int(zarr.open_array(zarr_store(path, mode="r"))[3, 3])
    15
    """
    check_mode(mode)
    try:
        import zarr
    except ModuleNotFoundError as error:
        if error.name != "zarr":
            raise  # zarr is there but something it needs is not: its own message says what
        raise ModuleNotFoundError(MISSING_ZARR, name="zarr") from None

    major = int(zarr.__version__.split(".")[0])
    if major >= 3:
        from .zarr3 import ZarrStore as adapter
    elif major == 2:
        from .zarr2 import Zarr2Store as adapter  # type: ignore[assignment]
    else:
        raise ImportError(f"zstores supports zarr-python 2.18 and 3, not {zarr.__version__}")
    store, owned = open_backend(store_or_url, mode)
    if transaction and not store.supports_transactions:
        if owned:
            store.close()
        refuse_without_transactions(store, "zarr_store(transaction=True)")
    read_only = True if mode == "r" else None
    return adapter(store, read_only=read_only, owns_store=owned)


def open_backend(store_or_url: Store | str | os.PathLike[str], mode: str) -> tuple[Store, bool]:
    """The store to wrap, and whether the adapter owns (and so closes) it."""
    if isinstance(store_or_url, Store):
        return store_or_url, False
    if isinstance(store_or_url, (str, os.PathLike)):
        from ..urls import open_store

        return open_store(store_or_url, mode=mode), True  # type: ignore[arg-type]
    raise TypeError(
        "zarr_store takes a zstores.Store, a URL or a path, not "
        f"{type(store_or_url).__name__} (wrap a plain mapping in zstores.MemoryStore first)"
    )


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
