"""The exception types every store raises.

Each subclasses the built-in exception a caller would already catch, so code
written against plain mappings and files keeps working.
"""

from __future__ import annotations

import errno as _errno


class ZStoresError(Exception):
    """Base class of every error raised by zstores itself."""


class InvalidKeyError(ZStoresError, ValueError):
    """A key or path breaks a key rule; the message names the key and the rule."""


class KeyConflictError(InvalidKeyError):
    """A key collides with an existing prefix, or a prefix with an existing key.

    Hierarchical backends (folders, zip members seen as folders) cannot hold
    both ``a`` and ``a/b``; key/value backends can and never raise this.
    """


class UnsafePathError(ZStoresError, PermissionError):
    """A key's path below a folder store's root meets a symbolic link.

    Folder stores never follow links below their root (the root itself may be
    one): a link planted in the store's folder could otherwise make a write,
    delete or read reach files outside it.  The message names the key and the
    link; ``errno`` is ``EACCES``, so a zfuse mount answers "Permission denied".
    """

    def __init__(self, *args: object) -> None:
        super().__init__(*_with_errno(_errno.EACCES, args))


class ReadOnlyError(ZStoresError, PermissionError):
    """A write was attempted on a store opened read-only (mode ``"r"``)."""


class StoreClosedError(ZStoresError, ValueError):
    """An operation was attempted on a store after ``close()``."""


class StoreNotFoundError(ZStoresError, FileNotFoundError):
    """Mode ``"r"`` or ``"r+"`` was asked for and the store does not exist."""


class StoreExistsError(ZStoresError, FileExistsError):
    """Mode ``"w-"`` was asked for and the store already exists."""


class StoreConnectionError(ZStoresError, ConnectionError):
    """The server behind a network store could not be reached or failed."""


class StoreAccessError(ZStoresError, PermissionError):
    """The backend refused the credentials, or they do not allow this operation.

    Raised by the object stores for an HTTP 401 or 403 (wrong or expired keys,
    a bucket policy that denies the call); ``errno`` is ``EACCES``.  The
    message names the store and never a key or token.
    """

    def __init__(self, *args: object) -> None:
        super().__init__(*_with_errno(_errno.EACCES, args))


class StoreIOError(ZStoresError, OSError):
    """The backend failed to read or write (an I/O error, a damaged file).

    Raised with the backend's own exception chained (``__cause__``), the
    message naming the store.  ``errno`` is the failure's (``EIO`` when the
    backend gave none).  Construct it as ``StoreIOError("message")`` or with an
    errno first, ``StoreIOError(errno.EIO, "message")``, like ``OSError``.
    """

    default_errno = _errno.EIO

    def __init__(self, *args: object) -> None:
        super().__init__(*_with_errno(self.default_errno, args))


class StoreFullError(StoreIOError):
    """A write failed because the disk (or the backend's map or memory) is full.

    ``errno`` is ``ENOSPC``.  The failed write left nothing half-written: every
    value acknowledged before it is intact, an overwrite that failed left the
    old value, and deleting keys frees room for new writes.

    Examples
    --------
    >>> error = StoreFullError("SQLiteStore('x.sqlite'): the disk is full")
    >>> isinstance(error, OSError), error.errno == _errno.ENOSPC
    (True, True)
    """

    default_errno = _errno.ENOSPC


class StaleStoreError(StoreIOError):
    """Another process changed a single-writer file (Zip, DBM) under this reader.

    A ``ZipStore`` or ``DBMStore`` (``dbm.dumb``) opened with mode ``"r"``
    notices when the writer changes the file and reads its directory or index
    again, so it serves the new values; this error is raised only when the
    file kept changing through several attempts at one read (a writer busy
    rewriting exactly what is being read).  No wrong bytes were returned.
    Retry the read, or, for a value that must not change while it is read,
    coordinate with the writer (close it, or open the store after it has
    closed).  ``errno`` is ``ESTALE``; the message names the store and key.

    Examples
    --------
    >>> error = StaleStoreError("ZipStore('x.zip'): 'a' kept changing while read")
    >>> isinstance(error, OSError), error.errno == _errno.ESTALE
    (True, True)
    """

    default_errno = _errno.ESTALE


class ReplicationTimeoutError(StoreIOError):
    """A write was applied, but fewer replicas than asked for confirmed it in time.

    Raised by a Redis store opened with ``wait_replicas=N`` when Redis'
    ``WAIT`` saw fewer than ``N`` replicas acknowledge the write within
    ``wait_timeout`` seconds.  The write *was* applied on the primary and
    readers see it; it is not known to be on enough replicas, so a failover
    of that primary now could lose it.  ``errno`` is ``ETIMEDOUT``; the
    message names the store, how many replicas confirmed and how many were
    asked for.  Writing the same values again is safe.

    Examples
    --------
    >>> error = ReplicationTimeoutError("RedisStore redis://h/0: 0 of 1 replicas in 1 s")
    >>> isinstance(error, OSError), error.errno == _errno.ETIMEDOUT
    (True, True)
    """

    default_errno = _errno.ETIMEDOUT


class CorruptValueError(StoreIOError):
    """A stored value or the backend's file is damaged (a checksum or structure check failed)."""


class InvalidValueError(ZStoresError, ValueError):
    """A value cannot be stored under its key: the key's format rejects it.

    For stores that translate values (``N5Store`` turns a Zarr chunk into an
    N5 block): the message names the key and what the value should be.
    Nothing is written.
    """


class ValueTooLargeError(ZStoresError, ValueError):
    """A value exceeds the largest value the backend can hold."""


class UnsupportedOperationError(ZStoresError, NotImplementedError):
    """The backend declares it cannot do this operation (see its capability flags)."""


class TransactionError(ZStoresError, RuntimeError):
    """A transaction or snapshot was used against its rules.

    Opening a second transaction in a thread that has one (nested use),
    writing through a finished transaction, or using a closed snapshot.
    """


class TransactionConflictError(TransactionError):
    """A transaction's commit found a value it read changed by another writer.

    Nothing of the transaction was committed.  Optimistic concurrency: run
    the transaction again (it then reads the new value); the message names
    the keys that changed.  ``keys`` holds them.
    """

    def __init__(self, message: str, keys: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.keys = keys

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (str(self), self.keys))


class LockOrderError(ZStoresError, RuntimeError):
    """A lock was asked for in an order that could deadlock (see ``SynchronizedArray.locked``)."""


class LockTimeoutError(ZStoresError, TimeoutError):
    """A lock was not acquired within the synchronizer's ``timeout``."""


class LockUnsupportedError(ZStoresError, OSError):
    """The folder of a ``ProcessSynchronizer`` is on a file system without file locks."""


class LeaseExpiredError(ZStoresError, RuntimeError):
    """A Redis lock's lease ran out while it was held: another writer may have entered.

    Raised before a write when the lease may have run out, at release when
    it did, and by a fenced write (``synchronized(..., fenced=True)``) whose
    fencing token a later holder of the lock has overtaken: that write
    changed nothing.
    """


class LockNamespaceError(ZStoresError, ValueError):
    """A synchronizer's lock keys would lie among a store's keys (same server, nested prefixes)."""


class StoreLockedError(ZStoresError, BlockingIOError):
    """Another process has this single-writer store open for writing.

    For ``DBMStore`` on ``dbm.gnu`` and ``dbm.ndbm``, whose files cannot be
    read beside a writer, also: a writer was asked for while readers have the
    database open, or a reader while a writer has it.
    """


def _with_errno(code: int, args: tuple[object, ...]) -> tuple[object, ...]:
    """``OSError`` arguments with ``code`` as the errno when only a message was given.

    ``OSError(errno, message)`` sets ``.errno``; a subclass raised with a lone
    message would leave it ``None``.  Keeping the two-argument form in ``args``
    also lets the error pickle and unpickle unchanged (worker processes).
    """
    if len(args) == 1 and isinstance(args[0], str):
        return (code, args[0])
    return args


class StoreURLError(ZStoresError, ValueError):
    """A store URL names an unknown scheme or option, or an option has a bad value.

    Defined here, not in ``urls``, because the network stores raise it too and
    sit below ``urls``; ``zstores.urls.StoreURLError`` is the same class.
    """
