"""Zarr2Store: any ``zstores.Store`` as a zarr-python 2.18 store.

zarr-python 2 takes any mutable mapping, but wraps one that is not a
``BaseStore`` in ``KVStore``, which hides ``listdir``, ``rmdir``,
``getsize``, ``rename`` and the batch calls behind generic loops over every
key.  This adapter is a ``BaseStore`` and forwards each of them to the
store's fast path.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from zarr.storage import BaseStore

from ..base import Store
from ..errors import ReadOnlyError, UnsupportedOperationError
from ..keys import normalize_storage_path
from ..stores.directory import DirectoryStore, NestedDirectoryStore
from .common import Adapter, TransactionSlot, keys_with_prefix

__all__ = ["Zarr2Store"]

# A folder name that is a chunk index (zarr-python 2's ``_prog_number``).
_CHUNK_INDEX = re.compile(r"\d+\Z")


class Zarr2Store(Adapter, BaseStore):
    """A ``zstores.Store`` as a zarr-python 2.18 ``BaseStore``.

    Parameters
    ----------
    store : zstores.Store
        The store to wrap.
    read_only : bool or None
        Refuse writes with ``zstores.ReadOnlyError`` (a ``PermissionError``);
        ``None`` (default) follows the store.
    dimension_separator : {None, ".", "/"}
        What zarr-python 2 records in new arrays' ``.zarray``.  A
        ``NestedDirectoryStore`` always uses ``"/"`` and refuses ``"."``, as
        zarr-python 2's own does.
    owns_store : bool
        Close ``store`` when the adapter is closed (``zarr_store(url)`` sets it).

    Notes
    -----
    ``getsize(path)`` has zarr-python 2's meaning: the size of the value at
    ``path``, or the total of the values directly under it (not of deeper
    ones).  ``is_erasable()`` is the store's ``supports_deletes``.

    Two behaviours follow zarr-python 2's own stores rather than the wrapped
    store's:

    - over a (nested) directory store with ``dimension_separator "/"``,
      ``listdir`` of an array's folder names its chunk keys (``0/1``), not
      the chunk folders (``0``), as zarr 2's ``NestedDirectoryStore`` does;
    - pickling an adapter whose store completes its file only at close (Zip,
      DBM) and is open for writing first completes it (closes and reopens
      the store), as zarr 2's ``ZipStore`` flushes when pickled, so the copy
      opens with everything written so far.  This needs a store the adapter
      owns (``zarr_store(url)``, or ``owns_store=True``): a store passed in
      stays the caller's, and is not closed behind the caller's back.

    Examples
    --------
    >>> import numpy as np, zarr
    >>> from zstores import MemoryStore
    >>> from zstores.adapters.zarr2 import Zarr2Store
    >>> backend = MemoryStore()
    >>> z = zarr.zeros((4, 4), chunks=(2, 2), dtype="i4", store=Zarr2Store(backend))
    >>> z[:] = np.arange(16).reshape(4, 4)
    >>> sorted(backend)[:3]
    ['.zarray', '0.0', '0.1']
    """

    def __init__(
        self,
        store: Store,
        *,
        read_only: bool | None = None,
        dimension_separator: str | None = None,
        owns_store: bool = False,
    ) -> None:
        self._read_only = self._checked_read_only(store, read_only)
        self._store = store
        self._owns_store = bool(owns_store)
        self._slot = TransactionSlot()
        self._dimension_separator = _separator_for(store, dimension_separator)

    # -------------------------------------------------------- capabilities
    @property
    def read_only(self) -> bool:
        """True when the adapter refuses writes."""
        return self._read_only

    @property
    def path(self) -> str:
        """The file or folder of the wrapped store, as zarr-python 2's file stores have.

        Raises
        ------
        AttributeError
            If the store has no path (in-memory and network stores).
        """
        location = getattr(self._store, "path", None)
        if location is None:
            raise AttributeError(f"{self._store!r} has no path")
        return str(location)

    def is_writeable(self) -> bool:
        return not self._read_only

    def is_erasable(self) -> bool:
        return bool(self._store.supports_deletes)

    def _check_writable(self) -> None:
        if self._read_only:
            raise ReadOnlyError(f"{self!r} is read-only")

    # ------------------------------------------------------ mapping basics
    def __getitem__(self, key: str) -> bytes:
        return self._target()[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._check_writable()
        self._target()[key] = value

    def __delitem__(self, key: str) -> None:
        self._check_writable()
        del self._target()[key]

    def __contains__(self, key: object) -> bool:
        return key in self._target()

    def __iter__(self) -> Iterator[str]:
        return iter(self._target())

    def __len__(self) -> int:
        return len(self._target())

    def clear(self) -> None:
        self._check_writable()
        self._target().clear()

    # --------------------------------------------------------- fast paths
    def getitems(
        self, keys: Sequence[str], *, contexts: Mapping[str, Any] | None = None
    ) -> Mapping[str, bytes]:
        """Values of the keys that exist, read in one batch (contexts are not needed).

        The values are the store's read-only ``getviews`` (LMDB: zero-copy
        views of its map for values of 64 KiB or more, each holding its read
        transaction while zarr uses it), as zarr-python 2's own ``LMDBStore``
        hands out buffers; zarr only decodes or copies them.
        """
        return self._target().getviews(keys)

    def setitems(self, values: Mapping[str, Any]) -> None:
        """Write many keys in one batch (one transaction where the backend has them)."""
        self._check_writable()
        self._target().setitems(values)

    def delitems(self, keys: Iterable[str]) -> None:
        """Delete many keys in one batch; missing keys are ignored."""
        self._check_writable()
        self._target().delitems(keys)

    def listdir(self, path: str | None = None) -> list[str]:
        """Sorted names directly under ``path``; an array's chunk keys on nested stores.

        With ``dimension_separator "/"`` over a directory store, an array's
        folder lists its chunk keys (``0/0``, ``0/1`` ...) in place of the
        chunk folders (``0``, ``1``), as zarr-python 2's nested directory
        stores list them: every name ``listdir`` gives is then a key.
        """
        path = normalize_storage_path(path)
        names = self._target().listdir(path)
        if (self._dimension_separator == "/" and ".zarray" in names
                and isinstance(self._store, DirectoryStore)):
            return _with_chunk_keys(self._target(), path, names)
        return names

    def rmdir(self, path: str | None = None) -> None:
        """Delete everything under ``path`` (the whole store for the root)."""
        self._check_writable()
        self._target().rmdir(normalize_storage_path(path))

    def rename(self, src_path: str, dst_path: str) -> None:
        """Move a key or everything under a path."""
        self._check_writable()
        self._target().rename(src_path, dst_path)

    def getsize(self, path: str | None = None) -> int:
        """Size of the value at ``path``, else the total of the values directly under it."""
        path = normalize_storage_path(path)
        store = self._target()
        if path and path in store:
            return store.getsize(path)
        total = 0
        for name in store.listdir(path):
            child = f"{path}/{name}" if path else name
            if child in store:
                total += store.getsize(child)
        return total

    # ----------------------------------------------------------- lifecycle
    def flush(self) -> None:
        """Write out what the store keeps only until it closes (Zip, DBM), and stay open.

        zarr-python 2's ``ZipStore.flush`` and ``DBMStore.flush``; the other
        backends commit every write as it is made, so for them (and for
        read-only stores) this does nothing.

        Raises
        ------
        zstores.UnsupportedOperationError
            For a Zip or DBM store open for writing that the adapter does not
            own (passed in by the caller): only its owner may close it.

        Examples
        --------
        >>> import os, tempfile, zipfile, zstores
        >>> path = os.path.join(tempfile.mkdtemp(), "data.zip")
        >>> adapter = zstores.zarr_store(f"zip://{path}")
        >>> adapter["a"] = b"1"
        >>> adapter.flush()
        >>> zipfile.ZipFile(path).namelist()
        ['a']
        >>> adapter.close()
        """
        if not self._complete_for_copies():
            raise UnsupportedOperationError(
                f"cannot flush {self._store!r} from {type(self).__name__}: the store was "
                "passed in, so the adapter may not close and reopen it; close the store "
                "(or open the adapter with zstores.zarr_store(url), which owns its store)"
            )

    def close(self) -> None:
        """Close the wrapped store if this adapter opened it (see ``zarr_store``)."""
        self._release()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Zarr2Store):
            return NotImplemented
        return self._read_only == other._read_only and self._same_store(other)

    def __hash__(self) -> int:
        return self._identity_hash()

    def __reduce__(self) -> tuple[Any, ...]:
        # The store pickles itself: a persistent one as how to reopen it, an
        # in-memory one with its data.
        self._refuse_pickle_in_transaction()
        self._complete_for_copies()  # a store the caller owns pickles as it is
        return (_unpickle, (type(self), self._store, self._read_only, self._dimension_separator))

    def __repr__(self) -> str:
        return f"Zarr2Store({self._store!r}, read_only={self._read_only})"

    def _complete_for_copies(self) -> bool:
        """Make the store's file complete, so that another handle can open it; False if unable.

        Zip and DBM stores (one writer process) finish their file at close:
        a zip archive has no central directory until then.  zarr-python 2's
        ``ZipStore`` flushes when pickled; this does the same by closing the
        store and reopening it with mode ``"a"``, or by the store's own
        ``flush()`` where it has one.  Other stores are complete after every
        write.
        """
        store = self._store
        if (store.closed or store.read_only or not store.persistent
                or store.supports_process_writers):
            return True
        flush = getattr(store, "flush", None)
        if callable(flush):
            flush()
            return True
        if not self._owns_store:
            return False
        store.close()
        self._store = store.reopen("a")
        return True


def _with_chunk_keys(store: Store, path: str, names: list[str]) -> list[str]:
    """``names`` of an array's folder with each chunk folder replaced by the keys below it."""
    prefix = f"{path}/" if path else ""
    listed = []
    for name in names:
        child = prefix + name
        if _CHUNK_INDEX.match(name) and child not in store:  # a folder, not a 1-d chunk
            listed.extend(key[len(prefix):] for key in keys_with_prefix(store, child + "/"))
        else:
            listed.append(name)
    return sorted(listed)


def _separator_for(store: Store, separator: str | None) -> str | None:
    if separator not in (None, ".", "/"):
        raise ValueError(f"dimension_separator must be '.', '/' or None, not {separator!r}")
    if isinstance(store, NestedDirectoryStore):
        if separator == ".":
            raise ValueError(
                "a NestedDirectoryStore stores chunk keys nested ('/'); "
                "dimension_separator '.' is not supported"
            )
        return "/"
    return separator


def _unpickle(cls: type[Zarr2Store], store: Store, read_only: bool,
              separator: str | None) -> Zarr2Store:
    # The unpickled store is a handle of its own: the adapter closes it.
    return cls(store, read_only=read_only, dimension_separator=separator, owns_store=True)
