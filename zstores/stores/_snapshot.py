"""What a snapshot store refuses, written once for the engines that take snapshots.

A snapshot (``Store.snapshot()``) of LMDB or SQLite is a read-only store
holding one read transaction of its engine open: it cannot be written, nor
snapshotted again, nor pickled or reopened (the transaction belongs to this
process), and it is its own location (no other store shares its moment).
Mixed in first: ``class _LMDBSnapshot(SnapshotRefusals, LMDBStore)``.
"""

from __future__ import annotations

from typing import Any, NoReturn

from ..errors import ReadOnlyError, UnsupportedOperationError

__all__ = ["SnapshotRefusals"]


class SnapshotRefusals:
    """The refusals of a snapshot store (see the module's docstring)."""

    supports_transactions = False
    supports_snapshots = False

    def _refuse_write(self) -> NoReturn:
        raise ReadOnlyError(f"{self!r} is a snapshot: it cannot be written")

    def _snapshot(self) -> NoReturn:
        raise UnsupportedOperationError(f"{self!r} is already a snapshot")

    def __reduce__(self) -> NoReturn:
        raise TypeError(f"{self!r} cannot be pickled: a snapshot belongs to its process")

    def _reopen_as(self, mode: str) -> NoReturn:
        raise UnsupportedOperationError(f"{self!r} is a snapshot: reopen the store instead")

    def _location(self) -> Any:
        return id(self)
