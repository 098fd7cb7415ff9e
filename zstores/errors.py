"""The exception types every store raises.

Each subclasses the built-in exception a caller would already catch, so code
written against plain mappings and files keeps working.
"""

from __future__ import annotations


class ZStoresError(Exception):
    """Base class of every error raised by zstores itself."""


class InvalidKeyError(ZStoresError, ValueError):
    """A key or path breaks a key rule; the message names the key and the rule."""


class KeyConflictError(InvalidKeyError):
    """A key collides with an existing prefix, or a prefix with an existing key.

    Hierarchical backends (folders, zip members seen as folders) cannot hold
    both ``a`` and ``a/b``; key/value backends can and never raise this.
    """


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


class ValueTooLargeError(ZStoresError, ValueError):
    """A value exceeds the largest value the backend can hold."""


class UnsupportedOperationError(ZStoresError, NotImplementedError):
    """The backend declares it cannot do this operation (see its capability flags)."""


class LockOrderError(ZStoresError, RuntimeError):
    """A lock was asked for in an order that could deadlock (see ``SynchronizedArray.locked``)."""


class LockTimeoutError(ZStoresError, TimeoutError):
    """A lock was not acquired within the synchronizer's ``timeout``."""


class LockUnsupportedError(ZStoresError, OSError):
    """The folder of a ``ProcessSynchronizer`` is on a file system without file locks."""


class LeaseExpiredError(ZStoresError, RuntimeError):
    """A Redis lock's lease ran out while it was held: another writer may have entered."""


class StoreLockedError(ZStoresError, BlockingIOError):
    """Another process has this single-writer store open for writing."""
