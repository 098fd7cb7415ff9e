"""Pinned readers: one version of one value, read by byte ranges until closed.

``Store.open_reader(key)`` returns a ``ValueReader``: every read through it
comes from the version of the value that was current when it was opened,
whatever other writers (in this process or another, through any door) do
meanwhile.  It is what a file opened through a zfuse mount reads from, so a
file read in several requests is one whole version of its key, never a mix
of two.

How a backend pins a version is its own business:

* ``BufferReader`` holds the whole value (the default for every store; LMDB
  hands it a zero-copy view whose read transaction keeps the pages from
  being reused, Redis, MongoDB and the others the bytes read once);
* a folder store keeps a descriptor on the file its atomic renames replace
  (``stores/directory/``), so the old file stays readable whole;
* ``SnapshotReader`` reads ranges through a snapshot of the store (SQLite's
  read transaction on a connection of its own), for values too large to copy.

``version`` is a token such that two readers of one store with equal
tokens read the same bytes (an inode and its times, the engine's last commit
id); None when the backend knows none.  ``identity(limit)`` falls back to a
digest of a value held in memory, which is what a mount compares at ``open``
to decide whether the kernel may keep the pages it cached earlier.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Buffer

    from .base import Store

__all__ = ["BufferReader", "SnapshotReader", "ValueReader"]


class ValueReader:
    """One version of one value, read by byte ranges until ``close``.

    Attributes
    ----------
    key : str
        The key the reader was opened on.
    size : int
        The size of the pinned version, in bytes.
    version : hashable or None
        Equal for two readers of the same store exactly when they read the
        same version (None: the backend cannot tell).

    Examples
    --------
    >>> from zstores import MemoryStore
    >>> store = MemoryStore()
    >>> store["k"] = b"hello"
    >>> with store.open_reader("k") as reader:
    ...     store["k"] = b"replaced meanwhile"
    ...     reader.size, bytes(reader.read(1, 3))
    (5, b'ell')
    """

    key: str
    size: int
    version: Hashable | None = None
    #: The whole value is in memory: reads cost no I/O.
    in_memory: bool = False

    def read(self, start: int, length: int) -> Buffer:
        """Up to ``length`` bytes from ``start`` (fewer at the end; empty past it)."""
        raise NotImplementedError

    def identity(self, limit: int) -> Hashable | None:
        """``version``, or a digest of the bytes when they are in memory and at most ``limit``.

        None when neither is known cheaply: the caller must treat two such
        readers as different versions.
        """
        return self.version

    def close(self) -> None:
        """Release what pins the version (a descriptor, a transaction); idempotent."""

    def __enter__(self) -> ValueReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.key!r}, size={self.size})"


class BufferReader(ValueReader):
    """A reader over the whole value, held in memory.

    Parameters
    ----------
    key : str
        The key.
    value : bytes-like
        The value (``bytes``, or a read-only view that pins its own version).
    version : hashable, optional
        The engine's token for this version, if it has one.

    Examples
    --------
    >>> reader = BufferReader("k", b"abcdef")
    >>> same = BufferReader("x", b"abcdef")
    >>> bytes(reader.read(4, 10)), reader.identity(1 << 20) == same.identity(64)
    (b'ef', True)
    """

    in_memory = True

    def __init__(self, key: str, value: Buffer, version: Hashable | None = None) -> None:
        self.key = key
        self._value: Any = value
        self._view = memoryview(value).cast("B") if not isinstance(value, bytes) else None
        self.size = len(self._view) if self._view is not None else len(value)
        self.version = version

    def read(self, start: int, length: int) -> Buffer:
        value = self._view if self._view is not None else self._value
        if value is None:
            raise ValueError(f"{self!r} is closed")
        if start == 0 and length >= self.size:
            return value
        return value[start:start + length]

    def identity(self, limit: int) -> Hashable | None:
        if self.version is not None:
            return self.version
        value = self._view if self._view is not None else self._value
        if value is None or self.size > limit:
            return None
        # 128 bits: two versions of one size colliding by chance is out of
        # question, and by design would take an attacker far more than a
        # store write; blake2b reads ~1 GB/s here (a 1 MiB value: ~1 ms).
        return ("blake2b", self.size, hashlib.blake2b(value, digest_size=16).digest())

    def close(self) -> None:
        view, self._view, self._value = self._view, None, None
        if view is not None:
            view.release()


class SnapshotReader(ValueReader):
    """A reader of ranges through a snapshot of the store, closed with it.

    For values too large to hold in memory on backends whose snapshots pin a
    state cheaply (SQLite: a read transaction on a connection of its own).

    Parameters
    ----------
    snapshot : Store
        A snapshot (``store.snapshot()``); the reader owns and closes it.
    key : str
        The key, already normalized.
    """

    def __init__(self, snapshot: Store, key: str) -> None:
        self.key = key
        self._snapshot: Store | None = snapshot
        try:
            size = snapshot.stat(key)
        except BaseException:
            snapshot.close()
            raise
        if size is None:
            snapshot.close()
            raise KeyError(key)
        self.size = size

    def read(self, start: int, length: int) -> Buffer:
        snapshot = self._snapshot
        if snapshot is None:
            raise ValueError(f"{self!r} is closed")
        if start >= self.size or length <= 0:
            return b""
        return snapshot.get_range(self.key, start, length)

    def close(self) -> None:
        snapshot, self._snapshot = self._snapshot, None
        if snapshot is not None:
            snapshot.close()
