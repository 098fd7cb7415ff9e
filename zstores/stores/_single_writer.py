"""One writer process at a time for stores that cannot take more (Zip, DBM).

Private to ``zstores.stores``: the stores hold this lock themselves, below
the synchronizers of ``zstores.sync``, which build on stores.

A writable ``ZipStore`` or ``DBMStore`` holds an exclusive, non-blocking
``flock`` on a file while it is open; a second process that opens the same
store for writing gets ``StoreLockedError`` at once instead of corrupting it.
Handles within one process share the lock (the stores guard their own
threads), and a process that dies releases it.

``DBMStore`` readers of the flavours that cannot be read beside a writer
(``dbm.gnu``, ``dbm.ndbm``) hold a shared ``flock`` on the same file
(``ReaderLock``): a writer is then refused while they are open, and they
while a writer is, as gdbm does itself.

Where ``flock`` is missing (Windows) or the file system refuses it (some
network file systems), the lock is skipped: the limitation then stands as
documented by the store's ``supports_process_writers = False``.
"""

from __future__ import annotations

import errno
import os
import threading
from typing import Any

from ..errors import StoreLockedError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["LockedConditionalWrites", "ReaderLock", "WriterLock", "reader_lock", "writer_lock"]

#: What a refused writer is told by default (Zip): one writer process at a time.
_ONE_WRITER = (
    "allows one writer process at a time (close it there first, or open it here with "
    "mode='r' once the writer has closed it)"
)

# flock errors that mean "this file system cannot lock", not "someone holds it".
_CANNOT_LOCK = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}


class _Held:
    __slots__ = ("fd", "users")

    def __init__(self, fd: int | None) -> None:
        self.fd = fd  # None where the file system cannot lock
        self.users = 1


_MUTEX = threading.Lock()
_HELD: dict[tuple[int, int], _Held] = {}  # (device, inode) -> the lock this process holds


def _drop_inherited_locks() -> None:
    # A forked child shares its parent's flock; closing its copies of the
    # descriptors leaves the parent's lock in place and the child without one.
    for held in _HELD.values():
        if held.fd is not None:
            try:
                os.close(held.fd)
            except OSError:
                pass
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_drop_inherited_locks)


class WriterLock:
    """An exclusive lock on ``path`` for this process, released by ``release()``.

    Parameters
    ----------
    path : str
        The file to lock; created (empty) if missing.
    store : str
        How the error names the store, e.g. ``"ZipStore"``.
    create_new : bool
        Fail with ``FileExistsError`` if ``path`` exists (for mode ``"w-"``).
    busy : str
        What the error says after the store's name when the lock is taken.

    Raises
    ------
    StoreLockedError
        If another process holds the lock.

    Examples
    --------
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "data.zip")
    >>> lock = WriterLock(path, "ZipStore")
    >>> again = WriterLock(path, "ZipStore")  # the same process: shared
    >>> again.release(); lock.release()
    """

    def __init__(self, path: str, store: str, *, create_new: bool = False,
                 busy: str = _ONE_WRITER) -> None:
        self.path = path
        self._key: tuple[int, int] | None = None
        if fcntl is None:
            return
        flags = os.O_RDWR | os.O_CREAT | (os.O_EXCL if create_new else 0)
        fd = os.open(path, flags, 0o666)
        with _MUTEX:
            info = os.fstat(fd)
            key = (info.st_dev, info.st_ino)
            held = _HELD.get(key)
            if held is not None:
                os.close(fd)  # flock belongs to the first descriptor: closing this one keeps it
                held.users += 1
            else:
                _HELD[key] = _Held(_lock(fd, path, store, busy))
            self._key = key

    def release(self) -> None:
        """Give up this handle's share; the last one in the process unlocks the file."""
        key, self._key = self._key, None
        if key is None:
            return
        with _MUTEX:
            held = _HELD.get(key)
            if held is None:  # dropped after a fork
                return
            held.users -= 1
            if held.users == 0:
                del _HELD[key]
                if held.fd is not None:
                    os.close(held.fd)


class ReaderLock:
    """A shared lock on ``path`` held by one reader handle, released by ``release()``.

    Taken by readers of stores whose files cannot be read beside a writer:
    it makes a writer's ``WriterLock`` fail, and fails while one is held.

    Raises
    ------
    StoreLockedError
        If a writer (in this process or another) holds the file.

    Examples
    --------
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "data.lock")
    >>> WriterLock(path, "DBMStore").release()  # a writer made the file
    >>> first, second = ReaderLock(path, "DBMStore"), ReaderLock(path, "DBMStore")
    >>> try:
    ...     WriterLock(path, "DBMStore")
    ... except StoreLockedError:
    ...     print("refused")
    refused
    >>> first.release(); second.release()
    """

    def __init__(self, path: str, store: str, *, busy: str = _ONE_WRITER) -> None:
        self.path = path
        self._fd: int | None = None
        if fcntl is None:
            return
        try:
            # Never created: mode "r" leaves no new files.  A writer creates it
            # (WriterLock) and leaves it; gdbm's own lock covers a database
            # written by other programs.
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return
        self._fd = _lock(fd, path, store, busy, shared=True)

    def release(self) -> None:
        """Give up the shared lock."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def _lock(fd: int, path: str, store: str, busy: str = _ONE_WRITER, *,
          shared: bool = False) -> int | None:
    """Lock ``fd`` (exclusively, or ``shared``); return it, or None (and close it) if the
    file system cannot."""
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        holder = "open for writing" if shared else "open in another process or handle"
        if busy == _ONE_WRITER:
            holder = "open for writing in another process"
        raise StoreLockedError(f"{path!r} is {holder}: {store} {busy}") from None
    except OSError as error:
        os.close(fd)
        if error.errno in _CANNOT_LOCK:
            return None
        raise
    return fd


def writer_lock(path: str, store: Any, mode: str, *, create_new: bool = False,
                busy: str = _ONE_WRITER) -> WriterLock | None:
    """The lock a store opened with ``mode`` must hold: none for readers."""
    if mode == "r":
        return None
    return WriterLock(path, type(store).__name__, create_new=create_new, busy=busy)


def reader_lock(path: str, store: Any, *, busy: str = _ONE_WRITER) -> ReaderLock:
    """The shared lock a reader holds where it cannot be served beside a writer."""
    return ReaderLock(path, type(store).__name__, busy=busy)


class LockedConditionalWrites:
    """``set_if_not_exists`` and ``replace_if`` for a single-writer store (Zip, DBM).

    Mixed into a ``Store`` with a ``_lock`` (a reentrant lock every write
    takes): the look and the write happen under it.  Atomic against every
    writer there can be: the writer lock keeps other processes from writing,
    and the store's lock orders this process's threads.  Versions are
    digests of the value (``Store._holds``).
    """

    supports_create_if_absent = True
    supports_compare_and_swap = True
    _lock: Any

    def _set_if_absent(self, key: str, value: Any) -> bool:
        store: Any = self
        with self._lock:
            if store._contains(key):
                return False
            store._set(key, value)
            return True

    def _replace_if(self, key: str, expected: Any, value: Any) -> bool:
        store: Any = self
        with self._lock:
            try:
                current = store._get(key)
            except KeyError:
                return False
            if not store._holds(current, expected):
                return False
            store._set(key, value)
            return True
