"""What a transaction needs from its store: the ``TransactionHooks`` protocol.

A ``zstores.transactions.Transaction`` is an overlay over one store.  It
reaches that store's data through the hooks below and through nothing else
(besides the public ``normalize``, ``read_only`` and capability flags):
``Transaction`` holds the store as ``self._hooks``, typed by this protocol,
and tests/test_base.py checks that every private name it
calls on the store is one of these.

``Store`` implements every hook: the reads are its primitives and fast
paths, the route is the base class's own, the rest are defaults.  A backend
that sets ``supports_transactions`` writes ``_commit_changes`` and overrides
the others only where its engine does better.  The hooks keep the
underscore names of the backend side of the contract (``zstores.base``):
code above the stores never calls them.

Keys reaching a hook are normalized (``Store.normalize``) and prefixes are
``""`` or end in ``/``, as for every primitive.

Examples
--------
>>> from zstores import MemoryStore
>>> isinstance(MemoryStore(), TransactionHooks)
True
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from .base import Buffer, Version
    from .transactions import ChangeSet, Transaction

__all__ = ["TransactionHooks"]


@runtime_checkable
class TransactionHooks(Protocol):
    """The store side of a transaction: route, reads, checks, commit.

    Attributes
    ----------
    _commit_copies_values : bool
        True when ``_commit_changes`` copies each value out (into the
        engine's pages, a command): the transaction then holds its values in
        pooled memory (``zstores._arena``) instead of ``bytes`` of their own.
    """

    _commit_copies_values: bool

    # ------------------------------------------------------------ the route
    def _bind_transaction(self, tx: Transaction) -> None:
        """Hand the calling thread's public calls on the store to ``tx`` until unbound.

        Called when a transaction opens with ``bind_thread=True``.
        """

    def _unbind_transaction(self, tx: Transaction) -> None:
        """Stop handing any thread's calls to ``tx``; called once, when it ends."""

    # ---------------------------------------------------------------- reads
    # What the overlay does not hold is read from the store; the transaction
    # records what each read observed, for ``_commit_changes`` to check.
    def _get(self, key: str) -> bytes:
        """The value of ``key``; raise ``KeyError`` when it has none."""

    def _get_many(self, keys: list[str]) -> dict[str, bytes]:
        """The values of those ``keys`` that exist, read together where the engine can.

        A commit with reads and nothing to write checks them against one
        such read, so it should be one consistent view (one backend
        transaction or round trip) where the engine offers it.
        """

    def _get_range(self, key: str, start: int, length: int | None) -> bytes:
        """Bytes ``start .. start+length`` of the value (negative ``start``: from the end)."""

    def _stat(self, key: str) -> int | None:
        """The size of ``key``'s value, or None when it has none."""

    def _list_prefix(self, prefix: str) -> Iterable[str]:
        """Every key starting with ``prefix``, in any order."""

    def _listdir(self, prefix: str) -> Iterable[str]:
        """The names directly under ``prefix`` (asked only where the overlay changed none)."""

    def _getsize_prefix(self, prefix: str) -> int:
        """The total size of the values under ``prefix`` (likewise)."""

    def _len(self) -> int:
        """How many keys the store holds (likewise)."""

    # ---------------------------------------------------------------- writes
    def _check_transaction_keys(self, keys: list[str]) -> None:
        """Raise what writing or deleting ``keys`` would raise, before the overlay takes them.

        For keys the store refuses whatever the transaction (a wrapper's
        protected metadata, reserved names); the default accepts all.
        """

    def _check_transaction_prefix(self, prefix: str) -> None:
        """Raise what removing or renaming ``prefix`` would raise; the default accepts all."""

    def _commit_changes(self, changes: ChangeSet) -> None:
        """Check ``changes.reads`` and apply the changes atomically: all, or none and raise.

        In one backend transaction: ``changes.check(current, self)`` with
        ``current`` reading inside it (``TransactionConflictError`` if a key
        read has changed), then delete the keys under each prefix of
        ``changes.cleared``, then set or delete each key of
        ``changes.writes``.  A value there is valid only until this returns:
        copy what is kept.  ``StoreFullError`` when the changes do not fit.
        """

    # ---------------------------------------------------- conditional writes
    def _version_of(self, value: Buffer) -> Version:
        """The version ``get_with_version`` gives for ``value`` (a digest of it)."""

    def _holds(self, current: Buffer | None, expected: Buffer | Version) -> bool:
        """Whether ``current`` (None: absent) is what ``expected`` says the key holds."""
