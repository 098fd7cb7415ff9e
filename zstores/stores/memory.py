"""MemoryStore: a dict in this process."""

from __future__ import annotations

import itertools
import threading
from bisect import bisect_left
from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple

from ..base import Buffer, Mode, Store
from ..keys import prefix_upper_bound

if TYPE_CHECKING:
    from ..transactions import ChangeSet

__all__ = ["MemoryStore"]


class _Listing(NamedTuple):
    """The keys sorted, and the folders listed so far, as of one version of the key set."""

    version: int
    keys: list[str]
    children: dict[str, list[str]]


class MemoryStore(Store):
    """Keys and values in a Python dict; gone when the object is.

    Pickling copies the data.  Thread-safe: a one-key read is one dict
    operation, which the interpreter makes atomic; writes, reads of several
    keys and listings hold the store's lock, so a transaction's commit (under
    the lock) shows all its writes to them at once.  A snapshot is a copy of
    the dict (its values are shared, not copied).

    ``listdir`` works on the keys sorted once per change of the key set (a
    new or deleted key; an overwrite changes nothing), found by bisection,
    and remembers each folder's names until the next such change: listing a
    folder again costs a dict lookup, as in zarr-python 2's nested dicts,
    while a write costs only a version number.

    Parameters
    ----------
    mode : {"a", "r", "r+", "w", "w-"}
        A new MemoryStore is always empty, so the modes differ only in that
        ``"r"`` refuses writes.

    Examples
    --------
    >>> from zstores import MemoryStore
    >>> store = MemoryStore()
    >>> store["foo/.zgroup"] = b'{"zarr_format": 2}'
    >>> store.listdir()
    ['foo']
    """

    blocking = False

    persistent = False
    supports_transactions = True
    supports_snapshots = True

    def __init__(self, *, mode: Mode = "a") -> None:
        super().__init__(mode=mode)
        self._data: dict[str, bytes] = {}
        self._lock = threading.RLock()
        # Every change of the key set takes a new number, under the lock; a
        # listing is valid while the number it was built under is current.
        self._changes = itertools.count(1)
        self._version = 0
        self._listing = _Listing(-1, [], {})

    def _get(self, key: str) -> bytes:
        return self._data[key]

    def _set(self, key: str, value: Buffer) -> None:
        value = bytes(value)
        with self._lock:
            data = self._data
            if key not in data:
                self._version = next(self._changes)
            data[key] = value

    def _delete(self, key: str) -> None:
        with self._lock:
            del self._data[key]
            self._version = next(self._changes)

    def _contains(self, key: str) -> bool:
        return key in self._data

    def _list_prefix(self, prefix: str) -> Iterable[str]:
        with self._lock:
            if not prefix:
                return list(self._data)
            return [key for key in self._data if key.startswith(prefix)]

    # Batches run the base class's loops (so a subclass's primitives stay in
    # charge) under the lock: a commit shows all its writes to them or none.
    def _get_many(self, keys: list[str]) -> dict[str, bytes]:
        with self._lock:
            return super()._get_many(keys)

    def _set_many(self, items: list[tuple[str, Buffer]]) -> None:
        with self._lock:
            super()._set_many(items)

    def _delete_many(self, keys: list[str]) -> None:
        with self._lock:
            super()._delete_many(keys)

    def _rmdir(self, prefix: str) -> None:
        with self._lock:
            super()._rmdir(prefix)

    def _rename_key(self, src: str, dst: str) -> None:
        with self._lock:
            super()._rename_key(src, dst)

    def _rename_prefix(self, src_prefix: str, dst_prefix: str) -> None:
        with self._lock:
            super()._rename_prefix(src_prefix, dst_prefix)

    def _commit_changes(self, changes: ChangeSet) -> None:
        with self._lock:
            changes.check(self._value_or_none, self)
            for prefix in changes.cleared:
                self._rmdir(prefix)
            for key, value in changes.writes.items():
                if value is None:
                    self._delete_many([key])
                else:
                    self._set(key, value)

    def _value_or_none(self, key: str) -> bytes | None:
        try:
            return self._get(key)
        except KeyError:
            return None

    def _snapshot(self) -> Store:
        # A copy of this object (a subclass keeps its own primitives) with a
        # copy of the dict, read-only.
        view = type(self).__new__(type(self))
        view.__dict__.update(self.__dict__)
        Store.__init__(view, mode="r")
        view._lock = threading.RLock()
        with self._lock:
            view._data = dict(self._data)
            view._version, view._listing = self._version, self._listing
        return view

    def _getsize_key(self, key: str) -> int:
        return len(self._data[key])

    def _stat(self, key: str) -> int | None:
        value = self._data.get(key)
        return None if value is None else len(value)

    def _listdir(self, prefix: str) -> Iterable[str]:
        with self._lock:
            listing = self._current_listing()
            names = listing.children.get(prefix)
            if names is None:
                names = listing.children[prefix] = _children(listing.keys, prefix)
        return names  # listdir sorts a copy: the remembered list is never handed out

    def _current_listing(self) -> _Listing:
        """The sorted keys (and folders listed) of the current key set (under the lock)."""
        listing = self._listing
        # The size check also catches a key put into the dict behind the
        # store's back (the test harness's out-of-band writes).
        if listing.version != self._version or len(listing.keys) != len(self._data):
            listing = _Listing(self._version, sorted(self._data), {})
            self._listing = listing
        return listing

    def _len(self) -> int:
        return len(self._data)

    def _clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._version = next(self._changes)


def _children(keys: list[str], prefix: str) -> list[str]:
    """The names directly under ``prefix`` in the sorted ``keys`` (unique, not sorted).

    Linear in the keys under ``prefix``, as sorting them was when the
    listing was built.
    """
    upper = prefix_upper_bound(prefix)
    low = bisect_left(keys, prefix)
    high = len(keys) if upper is None else bisect_left(keys, upper, low)
    start = len(prefix)
    names = [key[start:] for key in keys[low:high]]
    if "/" not in "\x00".join(names):  # no sub-folder: the names are the keys
        return names
    return list(dict.fromkeys([name.partition("/")[0] for name in names]))
