"""Transactions: a store's writes gathered in memory and committed at once.

``Store.transaction()`` returns a :class:`Transaction`, itself a ``Store``: an
*overlay* over the store.  Every write, delete, ``rmdir`` and ``rename`` made
through it (or through the store, from the thread that opened it) lands in
the overlay; reads look in the overlay first and then in the store, so the
transaction sees its own writes while nobody else does.  Nothing reaches the
backend before ``commit()``, which hands a :class:`ChangeSet` to the
backend's one commit primitive, ``Store._commit_changes``: it checks the
values the transaction read and applies every change in one backend
transaction (LMDB: one write transaction; SQLite: one ``BEGIN IMMEDIATE``;
Memory: under its lock), or nothing.  A crash before the commit leaves
nothing, by construction.

Conflicts are optimistic: the overlay records what it read from the store
(a value's length and hash, a key's size or absence, a range's hash), and
the commit re-reads those keys inside its backend transaction.  If one of
them changed since, the commit raises ``TransactionConflictError`` and
applies nothing; run the transaction again.  Writes that read nothing
(whole chunks) never conflict: the later commit wins, as if the two
transactions had run one after the other.  Listings (``listdir``,
``list_prefix``, ``len``) are not checked.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ._arena import BLOCK_BYTES, Arena
from .base import Buffer, Store, Version
from .errors import (
    StoreClosedError,
    TransactionConflictError,
    TransactionError,
    UnsupportedOperationError,
)
from .keys import child_name
from .transaction_hooks import TransactionHooks

__all__ = ["ChangeSet", "Transaction"]

#: What a read observed: ("value", length, hash), ("size", size or None),
#: ("range", start, length, hash) or ("value", None, None) for a missing key.
Observation = tuple[Any, ...]

_IN_STORE = object()  # _lookup: the overlay does not know the key; ask the store


def fingerprint(value: bytes | None) -> Observation:
    """What ``get`` observed: the value's length and hash (None, None if absent).

    Python's hash of bytes (SipHash, 64 bits, keyed per process) is the
    fastest digest the standard library has; it is compared only within this
    process, so its per-process key does not matter.
    """
    if value is None:
        return ("value", None, None)
    return ("value", len(value), hash(bytes(value)))


def _observed_again(observation: Observation, value: bytes | None) -> bool:
    """Whether ``value`` (the key's value now, None if absent) matches ``observation``."""
    kind = observation[0]
    if kind == "value":
        return fingerprint(value) == observation
    if kind == "size":
        return (None if value is None else len(value)) == observation[1]
    _, start, length, digest = observation
    if value is None:
        return digest is None
    stop = None if length is None else _range_stop(start, length, len(value))
    return hash(bytes(value[start:stop])) == digest


def _range_stop(start: int, length: int, size: int) -> int:
    first = start if start >= 0 else max(size + start, 0)
    return first + length


@dataclass
class ChangeSet:
    """What a transaction commits: reads to check, then prefixes cleared, then key writes.

    Attributes
    ----------
    cleared : list of str
        Prefixes (``"a/"``; ``""`` for everything) whose keys are deleted
        first.  None lies under another.
    writes : dict
        Key -> the value to set, or None to delete it (missing: no-op).
        Applied after ``cleared``.  A value is ``bytes`` or a read-only
        ``memoryview`` of the transaction's memory, valid only until the
        commit returns: a backend that keeps a value copies it (as ``_set``
        does with a ``memoryview``).
    reads : dict
        Key -> what the transaction observed of it in the store; ``check``
        compares each with the key's value at commit.

    Examples
    --------
    >>> changes = ChangeSet(cleared=["a/"], writes={"a/b": b"1", "c": None})
    >>> changes.nbytes, changes.touches("a/x"), changes.touches("b")
    (1, True, False)
    >>> changes.check(lambda key: None, "MemoryStore()")  # no reads: nothing to check
    """

    cleared: list[str] = field(default_factory=list)
    writes: dict[str, Buffer | None] = field(default_factory=dict)
    reads: dict[str, list[Observation]] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        """Bytes of the values written."""
        return sum(len(value) for value in self.writes.values() if value is not None)

    @property
    def empty(self) -> bool:
        """True when there is nothing to check or apply."""
        return not (self.cleared or self.writes or self.reads)

    def touches(self, key: str) -> bool:
        """Whether committing changes ``key`` (written, deleted, or under a cleared prefix)."""
        return key in self.writes or key.startswith(tuple(self.cleared))

    def conflicts(self, current: Callable[[str], bytes | None]) -> list[str]:
        """The keys read whose value ``current(key)`` no longer matches what was read."""
        changed = []
        for key, observations in self.reads.items():
            value = current(key)
            if not all(_observed_again(seen, value) for seen in observations):
                changed.append(key)
        return changed

    def check(self, current: Callable[[str], bytes | None], store: object) -> None:
        """Raise ``TransactionConflictError`` naming ``store`` if a key read has changed.

        Call it inside the backend transaction that applies the changes, with
        ``current`` reading that transaction's view of a key.
        """
        changed = self.conflicts(current)
        if changed:
            shown = ", ".join(repr(key) for key in changed[:5])
            more = f" and {len(changed) - 5} more" if len(changed) > 5 else ""
            raise TransactionConflictError(
                f"{store}: the transaction read {shown}{more}, which another writer changed "
                "before it committed; nothing was committed: run the transaction again",
                tuple(changed),
            )


class Transaction(Store):
    """Writes to a store gathered in memory, visible to others only when committed.

    Made by ``store.transaction()``; see that method.  A ``Transaction`` is a
    ``Store`` on its own: every method works through it, from any thread
    (an adapter whose writes run in worker threads passes it around).  With
    ``bind_thread=True`` (the default) the thread that opened it also reaches
    it through the store's own methods.

    Used as a context manager it commits when the block ends, and rolls back
    when the block raises.  ``commit()`` and ``rollback()`` end it
    explicitly; after either, using it raises ``StoreClosedError``.  Dropping
    an open transaction rolls it back.

    Parameters
    ----------
    store : zstores.Store
        The store the changes are for.
    bind_thread : bool
        Whether the store's own methods, called from this thread, act in the
        transaction.

    Examples
    --------
    >>> from zstores import MemoryStore
    >>> store = MemoryStore()
    >>> with store.transaction() as tx:
    ...     store["a/0"] = b"x"           # the opening thread: into the transaction
    ...     tx["a/1"] = b"y"              # the same, through the object
    ...     sorted(store), tx.committed
    (['a/0', 'a/1'], False)
    >>> sorted(store), tx.committed
    (['a/0', 'a/1'], True)
    """

    supports_transactions = False
    supports_snapshots = False

    def __init__(self, store: Store, *, bind_thread: bool = True) -> None:
        super().__init__(mode="r" if store.read_only else "a")
        self._store = store
        # Every private call on the store goes through its hooks (the
        # protocol names and documents them); the rest is public.
        self._hooks: TransactionHooks = store
        self._key = store.normalize  # type: ignore[method-assign]
        for flag in ("supports_range_reads", "supports_deletes", "max_value_size",
                     "persistent", "hierarchical", "blocking", "supports_empty_values",
                     "supports_create_if_absent", "supports_compare_and_swap"):
            setattr(self, flag, getattr(store, flag))
        self._lock = threading.RLock()
        # The values written, copied into pooled memory where the backend's
        # commit copies them out anyway (_arena.py: no fresh pages per
        # commit); bytes of their own where the backend keeps what it is given.
        self._arena = Arena() if self._hooks._commit_copies_values else None
        self._replaced = 0  # bytes of the arena's values since replaced or deleted
        self._writes: dict[str, Buffer | None] = {}
        self._cleared: list[str] = []
        self._reads: dict[str, list[Observation]] = {}
        self._state = "open"
        self._thread: threading.Thread | None = None
        if bind_thread:
            self._thread = threading.current_thread()
            self._hooks._bind_transaction(self)

    # ---------------------------------------------------------------- state
    @property
    def store(self) -> Store:
        """The store this transaction commits to."""
        return self._store

    @property
    def committed(self) -> bool:
        """True once ``commit()`` has applied the changes."""
        return self._state == "committed"

    @property
    def state(self) -> str:
        """``"open"``, ``"committed"``, ``"rolled back"`` or ``"failed"`` (commit raised)."""
        return self._state

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(
                f"{self!r} is {self._state}: it takes no more reads or writes (open a new "
                "one with store.transaction())"
            )

    def _check_writable(self) -> None:
        self._check_open()
        super()._check_writable()

    def changes(self) -> ChangeSet:
        """A copy of what ``commit()`` would check and apply now (values as ``bytes``)."""
        with self._lock:
            changes = self._changes()
            changes.writes = {key: _copied(value) for key, value in changes.writes.items()}
            return changes

    def _changes(self) -> ChangeSet:
        """What the commit applies; its values are views valid until ``_end``."""
        return ChangeSet(
            cleared=list(self._cleared),
            writes=dict(self._writes),
            reads={key: list(seen) for key, seen in self._reads.items()},
        )

    def commit(self) -> None:
        """Apply every change at once, or none (then raise).

        Raises
        ------
        TransactionConflictError
            A value the transaction read was changed by another writer since.
        StoreFullError
            The changes do not fit (the disk, LMDB's map); nothing was applied.
        StoreClosedError
            The transaction has already ended.
        """
        with self._lock:
            self._check_open()
            changes = self._changes()
            self._end("failed", keep_values=True)
        try:
            if changes.writes or changes.cleared:
                self._hooks._commit_changes(changes)
            elif changes.reads:
                # Nothing to write: check the reads against one consistent read
                # of them (getitems is one backend transaction or round trip),
                # which also works on a read-only store.
                current = self._hooks._get_many(list(changes.reads))
                changes.check(current.get, self._store)
        except BaseException as error:
            if isinstance(error, Exception) and not isinstance(error, TransactionConflictError):
                error.add_note(
                    f"{self!r}: nothing of the transaction ({len(changes.writes)} keys, "
                    f"{len(changes.cleared)} prefixes, {changes.nbytes} bytes) was committed"
                )
            raise
        finally:
            # The backend has copied what it keeps: the memory goes back to
            # the pool, and any view of it left anywhere is released.
            changes.writes = {}
            self._release_values()
        self._state = "committed"

    def rollback(self) -> None:
        """Drop every change; the store is as if the transaction never ran."""
        with self._lock:
            self._check_open()
            self._end("rolled back")

    def _end(self, state: str, *, keep_values: bool = False) -> None:
        """Mark the transaction ended; its values go too unless a commit still needs them."""
        self._state = state
        self._closed = True
        self._writes, self._cleared, self._reads = {}, [], {}
        if not keep_values:
            self._release_values()
        if self._thread is not None:
            self._hooks._unbind_transaction(self)

    def _release_values(self) -> None:
        with self._lock:
            if self._arena is not None:
                self._arena.release()

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, exc_type: object, *exc_info: object) -> None:
        if self._closed:
            return  # ended inside the block (commit() or rollback())
        if exc_type is None:
            self.commit()
        else:
            self.rollback()

    def _close(self) -> None:
        # close() (and garbage collection) without a commit: roll back.
        self._closed = False
        if self._state == "open":
            self._end("rolled back")
        self._closed = True

    def __reduce__(self) -> tuple[Any, ...]:
        raise TypeError(f"{self!r} cannot be pickled: a transaction belongs to its process")

    def _reopen_as(self, mode: str) -> Store:
        raise UnsupportedOperationError(f"{self!r} cannot be reopened: open a new transaction")

    def transaction(self, *, bind_thread: bool = True) -> Transaction:
        raise TransactionError(f"{self!r}: transactions do not nest (this one is open)")

    def __repr__(self) -> str:
        return f"Transaction({self._store!r}, state={self._state!r})"

    def _location(self) -> Any:
        return id(self)

    # ----------------------------------------------------------- the overlay
    def _lookup(self, key: str) -> bytes | None | object:
        """The overlay's value (None: deleted), or ``_IN_STORE`` when it has none."""
        value = self._writes.get(key, _IN_STORE)
        if value is _IN_STORE and self._cleared and key.startswith(tuple(self._cleared)):
            return None
        return value

    def _observe(self, key: str, observation: Observation) -> None:
        with self._lock:
            if key in self._writes or (self._cleared and key.startswith(tuple(self._cleared))):
                return  # written since the read began: the overlay decides now
            seen = self._reads.setdefault(key, [])
            if observation not in seen:
                seen.append(observation)

    def _touched(self, prefix: str) -> bool:
        """Whether the overlay changes anything under ``prefix``."""
        with self._lock:
            return any(key.startswith(prefix) for key in self._writes) or any(
                cleared.startswith(prefix) or prefix.startswith(cleared)
                for cleared in self._cleared
            )

    # ------------------------------------------------------------- reads
    def _get(self, key: str) -> bytes:
        with self._lock:
            value = _copied(self._lookup(key))  # the arena's memory is reused after the end
        if value is _IN_STORE:
            try:
                value = self._hooks._get(key)
            except KeyError:
                self._observe(key, fingerprint(None))
                raise
            self._observe(key, fingerprint(value))
            return value  # type: ignore[return-value]
        if value is None:
            raise KeyError(key)
        return value  # type: ignore[return-value]

    def _stat(self, key: str) -> int | None:
        with self._lock:
            value = self._lookup(key)
            if value is not _IN_STORE:  # measured under the lock: the end releases views
                return None if value is None else len(value)  # type: ignore[arg-type]
        size = self._hooks._stat(key)
        self._observe(key, ("size", size))
        return size

    def _contains(self, key: str) -> bool:
        return self._stat(key) is not None

    def _getsize_key(self, key: str) -> int:
        size = self._stat(key)
        if size is None:
            raise KeyError(key)
        return size

    def _get_range(self, key: str, start: int, length: int | None) -> bytes:
        with self._lock:
            value = self._lookup(key)
        if value is None:
            raise KeyError(key)
        if value is not _IN_STORE:
            return super()._get_range(key, start, length)
        try:
            part = self._hooks._get_range(key, start, length)
        except KeyError:
            self._observe(key, fingerprint(None))
            raise
        self._observe(key, ("range", start, length, hash(part)))
        return part

    def _get_many(self, keys: list[str]) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        ask = []
        with self._lock:
            for key in keys:
                value = self._lookup(key)
                if value is _IN_STORE:
                    ask.append(key)
                elif value is not None:
                    found[key] = _copied(value)  # type: ignore[arg-type]
        if ask:
            fetched = self._hooks._get_many(ask)
            for key in ask:
                self._observe(key, fingerprint(fetched.get(key)))
            found.update(fetched)
        return found

    def _list_prefix(self, prefix: str) -> list[str]:
        listed = list(self._hooks._list_prefix(prefix))
        with self._lock:
            cleared = tuple(self._cleared)
            keys = {
                key: None for key in listed
                if key not in self._writes and not (cleared and key.startswith(cleared))
            }
            for key, value in self._writes.items():
                if value is not None and key.startswith(prefix):
                    keys[key] = None
        return list(keys)

    def _listdir(self, prefix: str) -> Iterable[str]:
        if not self._touched(prefix):
            return self._hooks._listdir(prefix)
        return children_names(self._list_prefix(prefix), prefix)

    def _getsize_prefix(self, prefix: str) -> int:
        if not self._touched(prefix):
            return self._hooks._getsize_prefix(prefix)
        return sum(self._getsize_key(key) for key in self._list_prefix(prefix))

    def _len(self) -> int:
        if not self._touched(""):
            return self._hooks._len()
        return len(self._list_prefix(""))

    # ------------------------------------------------------------- writes
    def _set(self, key: str, value: Buffer) -> None:
        self._set_many([(key, value)])

    def _set_many(self, items: list[tuple[str, Buffer]]) -> None:
        self._hooks._check_transaction_keys([key for key, _ in items])
        with self._lock:
            # Copied now (the caller may reuse its buffer), under the lock: a
            # commit ending the transaction meanwhile gives the memory back.
            self._check_open()
            hold = self._hold
            self._record([(key, hold(value)) for key, value in items])  # all held, or none

    def _hold(self, value: Buffer) -> Buffer:
        if self._arena is not None:
            return self._arena.hold(value)
        return value if type(value) is bytes else bytes(value)

    def _delete(self, key: str) -> None:
        self._hooks._check_transaction_keys([key])
        with self._lock:
            if self._stat(key) is None:
                raise KeyError(key)
            self._record([(key, None)])

    def _delete_many(self, keys: list[str]) -> None:
        # Deleting a missing key is a no-op at commit: no need to look first.
        self._hooks._check_transaction_keys(keys)
        with self._lock:
            self._record((key, None) for key in keys)

    def _record(self, entries: Iterable[tuple[str, Buffer | None]]) -> None:
        """Put writes (None: a delete) in the overlay; called with the lock held.

        A value replaced stays in the arena until the end: once replaced
        values fill more than half of it, the live ones move to a new arena,
        so a transaction rewriting one chunk many times holds one copy.
        """
        writes = self._writes
        for key, value in entries:
            self._count_replaced(writes.get(key))
            writes[key] = value
        if self._arena is not None and self._replaced > max(BLOCK_BYTES, self._arena.held // 2):
            self._compact()

    def _count_replaced(self, old: Buffer | None) -> None:
        """Count a value leaving the overlay that still takes room in the arena."""
        if type(old) is memoryview:
            self._replaced += len(old)

    def _compact(self) -> None:
        old, fresh = self._arena, Arena()
        assert old is not None
        self._writes = {key: fresh.hold(value) if type(value) is memoryview else value
                        for key, value in self._writes.items()}
        self._arena, self._replaced = fresh, 0
        old.release()

    def _rmdir(self, prefix: str) -> None:
        self._hooks._check_transaction_prefix(prefix)
        with self._lock:
            for key in [key for key in self._writes if key.startswith(prefix)]:
                self._count_replaced(self._writes.pop(key))
            if not any(prefix.startswith(cleared) for cleared in self._cleared):
                self._cleared = [c for c in self._cleared if not c.startswith(prefix)]
                self._cleared.append(prefix)

    def _clear(self) -> None:
        self._rmdir("")

    def _rename_key(self, src: str, dst: str) -> None:
        with self._lock:
            value = self._get(src)
            self._set(dst, value)
            self._delete(src)

    def _rename_prefix(self, src_prefix: str, dst_prefix: str) -> None:
        # Each key moved is checked as it is written and deleted.
        self._hooks._check_transaction_prefix(src_prefix)
        with self._lock:
            super()._rename_prefix(src_prefix, dst_prefix)

    # ------------------------------------------------------ conditional writes
    # On the overlay: the key's absence or value is read (and so recorded, and
    # checked again by the commit inside the backend's transaction) before
    # the write goes into the overlay.
    def _set_if_absent(self, key: str, value: Buffer) -> bool:
        with self._lock:
            if self._stat(key) is not None:
                return False
            self._set(key, value)
            return True

    def _replace_if(self, key: str, expected: Buffer | Version, value: Buffer) -> bool:
        with self._lock:
            try:
                current = self._get(key)
            except KeyError:
                return False
            if not self._holds(current, expected):
                return False
            self._set(key, value)
            return True

    def _version_of(self, value: Buffer) -> Version:
        return self._hooks._version_of(value)

    def _holds(self, current: Buffer | None, expected: Buffer | Version) -> bool:
        return self._hooks._holds(current, expected)


def _copied(value: Any) -> Any:
    """``value`` as ``bytes`` if it is a view of the transaction's memory, else itself."""
    return bytes(value) if type(value) is memoryview else value


def children_names(keys: Iterable[str], prefix: str) -> set[str]:
    """The names directly under ``prefix`` of ``keys`` (all of which start with it)."""
    return {child_name(key, prefix) for key in keys}


# Store.transaction() makes a Transaction without importing this module, which
# imports base.py: the class is handed to it here (``import zstores`` imports
# this module), so that the two modules do not import each other.
Store._transaction_class = Transaction
