"""Zarr2Store: any ``zstores.Store`` as a zarr-python 2.18 store.

zarr-python 2 takes any mutable mapping, but wraps one that is not a
``BaseStore`` in ``KVStore``, which hides ``listdir``, ``rmdir``,
``getsize``, ``rename`` and the batch calls behind generic loops over every
key.  This adapter is a ``BaseStore`` and forwards each of them to the
store's fast path.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from zarr.storage import BaseStore

from ..base import Store
from ..errors import ReadOnlyError
from ..keys import normalize_storage_path
from ..stores.directory import NestedDirectoryStore
from . import Adapter

__all__ = ["Zarr2Store"]


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
        self._dimension_separator = _separator_for(store, dimension_separator)

    # -------------------------------------------------------- capabilities
    @property
    def read_only(self) -> bool:
        """True when the adapter refuses writes."""
        return self._read_only

    def is_writeable(self) -> bool:
        return not self._read_only

    def is_erasable(self) -> bool:
        return bool(self._store.supports_deletes)

    def _check_writable(self) -> None:
        if self._read_only:
            raise ReadOnlyError(f"{self!r} is read-only")

    # ------------------------------------------------------ mapping basics
    def __getitem__(self, key: str) -> bytes:
        return self._store[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._check_writable()
        self._store[key] = value

    def __delitem__(self, key: str) -> None:
        self._check_writable()
        del self._store[key]

    def __contains__(self, key: object) -> bool:
        return key in self._store

    def __iter__(self) -> Iterator[str]:
        return iter(self._store)

    def __len__(self) -> int:
        return len(self._store)

    def clear(self) -> None:
        self._check_writable()
        self._store.clear()

    # --------------------------------------------------------- fast paths
    def getitems(
        self, keys: Sequence[str], *, contexts: Mapping[str, Any] | None = None
    ) -> Mapping[str, bytes]:
        """Values of the keys that exist, read in one batch (contexts are not needed)."""
        return self._store.getitems(keys)

    def setitems(self, values: Mapping[str, Any]) -> None:
        """Write many keys in one batch (one transaction where the backend has them)."""
        self._check_writable()
        self._store.setitems(values)

    def delitems(self, keys: Iterable[str]) -> None:
        """Delete many keys in one batch; missing keys are ignored."""
        self._check_writable()
        self._store.delitems(keys)

    def listdir(self, path: str | None = None) -> list[str]:
        """Sorted names directly under ``path``."""
        return self._store.listdir(normalize_storage_path(path))

    def rmdir(self, path: str | None = None) -> None:
        """Delete everything under ``path`` (the whole store for the root)."""
        self._check_writable()
        self._store.rmdir(normalize_storage_path(path))

    def rename(self, src_path: str, dst_path: str) -> None:
        """Move a key or everything under a path."""
        self._check_writable()
        self._store.rename(src_path, dst_path)

    def getsize(self, path: str | None = None) -> int:
        """Size of the value at ``path``, else the total of the values directly under it."""
        path = normalize_storage_path(path)
        store = self._store
        if path and path in store:
            return store.getsize(path)
        total = 0
        for name in store.listdir(path):
            child = f"{path}/{name}" if path else name
            if child in store:
                total += store.getsize(child)
        return total

    # ----------------------------------------------------------- lifecycle
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
        return (_unpickle, (type(self), self._store, self._read_only, self._dimension_separator))

    def __repr__(self) -> str:
        return f"Zarr2Store({self._store!r}, read_only={self._read_only})"


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
