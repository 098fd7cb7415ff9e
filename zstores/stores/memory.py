"""MemoryStore: a dict in this process."""

from __future__ import annotations

import threading
from bisect import bisect_left, insort
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..base import Buffer, Mode, SortedNames, Store, Version
from ..keys import prefix_upper_bound

if TYPE_CHECKING:
    from ..transactions import ChangeSet

__all__ = ["MemoryStore"]


# Up to this many keys added or deleted since the last listing edit the sorted
# names and keys they touch; more make them sort again when next needed.
_EDITS = 64


#: The counts of a folder of keys only, listed but not yet changed: every name 1.
#: Never changed itself: ``_count`` replaces it with real counts first.
_ALL_KEYS: dict[str, int] = {}


class _Stale(Exception):
    """The folder index disagrees with the dict (a key changed behind the store's back)."""


class MemoryStore(Store):
    """Keys and values in a Python dict; gone when the object is.

    Pickling copies the data.  Thread-safe: a one-key read is one dict
    operation, which the interpreter makes atomic; writes, reads of several
    keys and listings hold the store's lock, so a transaction's commit (under
    the lock) shows all its writes to them at once.  A snapshot is a copy of
    the dict (its values are shared, not copied).

    ``listdir`` reads a folder index built at the first listing: for each
    folder, its names and how many keys lie below each, so a listing costs
    the folder's own names (as zarr-python 2's nested dicts do), not the
    store's keys.  Writes keep it up to date lazily: a new or deleted key is
    only noted (an overwrite changes nothing), and the next listing counts
    the noted keys in, so a write costs a list append and a listing after
    a write costs the keys written since, not a sort of every key.  Each
    folder's sorted names are kept until a name comes or goes.

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
    supports_create_if_absent = True  # under the store's lock (one process)
    supports_compare_and_swap = True
    _commit_copies_values = False  # a commit keeps the values: hold them as bytes

    def __init__(self, *, mode: Mode = "a") -> None:
        super().__init__(mode=mode)
        self._data: dict[str, bytes] = {}
        self._lock = threading.RLock()
        self._drop_index()

    def _get(self, key: str) -> bytes:
        return self._data[key]

    def _set(self, key: str, value: Buffer) -> None:
        value = bytes(value)
        with self._lock:
            data = self._data
            if key not in data and self._tracking:
                self._note(self._added, key)
            data[key] = value

    def _delete(self, key: str) -> None:
        with self._lock:
            del self._data[key]
            if self._tracking:
                self._note(self._removed, key)

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

    # Conditional writes: the look and the write under the lock every write takes.
    def _set_if_absent(self, key: str, value: Buffer) -> bool:
        with self._lock:
            if key in self._data:
                return False
            self._set(key, value)
            return True

    def _replace_if(self, key: str, expected: Buffer | Version, value: Buffer) -> bool:
        with self._lock:
            if not self._holds(self._data.get(key), expected):
                return False
            self._set(key, value)
            return True

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
        view._drop_index()  # built again at the copy's first listing
        return view

    def _getsize_key(self, key: str) -> int:
        return len(self._data[key])

    def _stat(self, key: str) -> int | None:
        value = self._data.get(key)
        return None if value is None else len(value)

    def _listdir(self, prefix: str) -> Iterable[str]:
        with self._lock:
            if self._added or self._removed or self._indexed != len(self._data):
                self._catch_up()
            names = self._named.get(prefix)
            if names is None:
                counts = self._folders.get(prefix)
                if counts is None:  # a folder not listed before
                    counts, listed = self._count_names(prefix)
                    if not listed:
                        return []
                    self._folders[prefix] = counts
                else:
                    listed = sorted(counts)
                names = self._named[prefix] = SortedNames(listed)
        return names  # listdir copies it: the remembered list is never handed out

    # ------------------------------------------------------- the folder index
    # Under the lock.  _folders maps each folder listed so far ("" or "a/b/")
    # to {name: number of keys at or below prefix + name}, and _named to its
    # names sorted; _keys is every key sorted (None: sort again when needed),
    # which a folder listed for the first time is counted from.  Once a
    # listing was made (_tracking), writes note the keys that come and go in
    # _added / _removed, and the next listing applies them.  The counts are
    # sums, so the order does not matter: adding first never goes below zero.
    def _drop_index(self) -> None:
        self._tracking = False
        self._keys: list[str] | None = None
        self._folders: dict[str, dict[str, int]] = {}
        self._named: dict[str, SortedNames] = {}
        self._added: list[str] = []
        self._removed: list[str] = []
        self._indexed = 0

    def _note(self, changes: list[str], key: str) -> None:
        """Note a new or deleted key for the next listing."""
        changes.append(key)
        if len(changes) > len(self._data) + 1024:
            # Churn of the same keys with no listing: starting the index
            # again at the next listing costs less than keeping every change.
            self._drop_index()

    def _catch_up(self) -> None:
        """Apply the changes noted to the folders listed and the sorted keys."""
        added, removed = self._added, self._removed
        changes = len(added) + len(removed)
        try:
            if not self._tracking or changes > len(self._data):
                raise _Stale  # cheaper to start again
            # A few changes edit the sorted names and keys they touch (a copy
            # of the names: a listing handed out never changes); many drop them.
            edit = changes <= _EDITS
            if self._folders:
                for key in added:
                    _count(self._folders, self._named, key, 1, edit)
                for key in removed:
                    _count(self._folders, self._named, key, -1, edit)
            keys = self._keys
            if keys is not None and edit:
                for key in added:
                    insort(keys, key)
                for key in removed:
                    at = bisect_left(keys, key)
                    if at == len(keys) or keys[at] != key:
                        raise _Stale
                    del keys[at]
            elif keys is not None:
                self._keys = None
            self._indexed += len(added) - len(removed)
            added.clear()
            removed.clear()
            # The size check catches a key put into the dict behind the store's
            # back (the test harness's out-of-band writes).
            if self._indexed != len(self._data):
                raise _Stale
        except _Stale:
            self._drop_index()
            self._tracking = True
            self._indexed = len(self._data)

    def _count_names(self, prefix: str) -> tuple[dict[str, int], list[str]]:
        """{name: keys at or below it} directly under ``prefix``, and the names sorted.

        Counted from the sorted keys.  A folder of keys only (a folder of
        chunks) has the names sorted as they come, and its counts (all 1) are
        made when a change first touches it (``_ALL_KEYS``), not at the listing.
        """
        keys = self._keys
        if keys is None:
            keys = self._keys = sorted(self._data)
        upper = prefix_upper_bound(prefix)
        low = bisect_left(keys, prefix)
        high = len(keys) if upper is None else bisect_left(keys, upper, low)
        start = len(prefix)
        names = [key[start:] for key in keys[low:high]]
        if "/" not in "\x00".join(names):  # no sub-folder: the names are the keys
            return _ALL_KEYS, names
        counts: dict[str, int] = {}
        at = low
        while at < high:  # a child folder's keys are counted by bisection, not read
            name, slash, _ = keys[at][start:].partition("/")
            if slash:
                end = bisect_left(keys, keys[at][: start + len(name)] + "0", at, high)
            else:
                end = at + 1
            counts[name] = counts.get(name, 0) + end - at
            at = end
        return counts, sorted(counts)

    def _len(self) -> int:
        return len(self._data)

    def _clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._drop_index()


def _count(folders: dict[str, dict[str, int]], named: dict[str, SortedNames], key: str,
           step: int, edit: bool) -> None:
    """Count ``key`` in (``step`` 1) or out of (-1) the folders listed on its path.

    A folder whose names change has its sorted names replaced by an edited
    copy (``edit``) or forgotten; one left without names is forgotten.
    """
    start = 0
    while True:
        slash = key.find("/", start)
        prefix = key[:start]
        counts = folders.get(prefix)
        if counts is _ALL_KEYS:  # counted when first needed; its names are still kept
            counts = folders[prefix] = dict.fromkeys(named[prefix], 1)
        if counts is not None:
            name = key[start:] if slash < 0 else key[start:slash]
            count = counts.get(name, 0) + step
            if count > 0:
                counts[name] = count
                if count == step:  # a new name
                    _edit_names(named, prefix, name, edit, add=True)
            elif count == 0:
                del counts[name]
                if counts:
                    _edit_names(named, prefix, name, edit, add=False)
                else:
                    del folders[prefix]
                    named.pop(prefix, None)
            else:
                raise _Stale
        if slash < 0:
            return
        start = slash + 1


def _edit_names(named: dict[str, SortedNames], prefix: str, name: str, edit: bool,
                *, add: bool) -> None:
    """Add ``name`` to, or remove it from, the sorted names of ``prefix`` if kept."""
    names = named.get(prefix)
    if names is None:
        return
    if not edit:
        del named[prefix]
        return
    names = SortedNames(names)
    if add:
        insort(names, name)
    else:
        del names[bisect_left(names, name)]
    named[prefix] = names
