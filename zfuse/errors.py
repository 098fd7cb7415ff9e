"""Store errors as the errno a local disk would give.

A full disk is ENOSPC at ``close`` (where the value is committed), a
symbolic link a folder store refuses to follow is EACCES, a server that
cannot be reached is EIO (as on an NFS soft mount).  ``errno_for`` is the
table; ``fuse_operation`` applies it to every FUSE handler, so a handler
raises store errors as they come and the kernel gets an errno.
"""

from __future__ import annotations

import errno
import functools
import logging
from collections.abc import Callable
from typing import Any, Protocol

from mfusepy import FuseOSError

from zstores.errors import (
    InvalidKeyError,
    ReadOnlyError,
    StoreClosedError,
    StoreConnectionError,
    StoreIOError,
    StoreLockedError,
    UnsupportedOperationError,
    ValueTooLargeError,
)

__all__ = ["FuseOSError", "errno_for", "fail", "fuse_operation"]

log = logging.getLogger("zfuse")

# Errors from the operating system that name a real condition of the
# backend, reported as they are (StoreFullError is ENOSPC, UnsafePathError
# EACCES); any other failure is EIO with a log line.
_PASS_THROUGH = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.ENAMETOOLONG, errno.EACCES, errno.EPERM,
     errno.EROFS, errno.ESTALE}
)

# Errnos that are answers, not failures: no log line for them.
_QUIET = frozenset({errno.ENOENT, errno.EINVAL})


def errno_for(error: BaseException) -> int | None:
    """The errno a store error maps to, or None for an unexpected failure (EIO, logged).

    =================================  ===========
    error                              errno
    =================================  ===========
    KeyError (missing key)             ENOENT
    ReadOnlyError                      EROFS
    ValueTooLargeError                 EFBIG
    InvalidKeyError                    EINVAL
    UnsupportedOperationError          EOPNOTSUPP
    MemoryError                        ENOMEM
    StoreFullError                     ENOSPC
    UnsafePathError                    EACCES
    StoreLockedError                   EAGAIN
    StoreConnectionError               EIO
    StoreIOError, CorruptValueError    EIO
    StoreClosedError                   EIO
    OSError: ENOSPC, EDQUOT, EACCES    the same
    anything else                      None (EIO)
    =================================  ===========

    A server that cannot be reached is EIO, as on an NFS soft mount, not
    ENOTCONN: that is what a dead FUSE mount answers, and would send users
    to unmount a mount that recovers when the server is back.  Only errors
    whose cause a user can act on keep their own errno; the rest are EIO,
    which the wrapper logs with the store's message.

    Examples
    --------
    >>> from zstores.errors import StoreFullError, UnsafePathError
    >>> errno_for(KeyError("a")) == errno.ENOENT
    True
    >>> errno_for(StoreFullError("SQLiteStore('x'): the disk is full")) == errno.ENOSPC
    True
    >>> errno_for(UnsafePathError("DirectoryStore('d'): 'a' is a link")) == errno.EACCES
    True
    """
    if isinstance(error, FuseOSError):
        return error.errno
    if isinstance(error, KeyError):
        return errno.ENOENT
    if isinstance(error, ReadOnlyError):
        return errno.EROFS
    if isinstance(error, ValueTooLargeError):
        return errno.EFBIG
    if isinstance(error, InvalidKeyError):
        return errno.EINVAL
    if isinstance(error, UnsupportedOperationError):
        return errno.EOPNOTSUPP
    if isinstance(error, MemoryError):
        return errno.ENOMEM
    if isinstance(error, StoreLockedError):
        return errno.EAGAIN
    if isinstance(error, (StoreConnectionError, StoreClosedError)):
        return errno.EIO
    if isinstance(error, OSError) and error.errno in _PASS_THROUGH:
        return error.errno  # StoreFullError (ENOSPC), UnsafePathError (EACCES) among them
    if isinstance(error, StoreIOError):
        return errno.EIO
    return None


def fail(code: int) -> FuseOSError:
    """The exception a handler raises to answer ``code`` (an errno).

    Examples
    --------
    >>> fail(errno.ENOENT).errno == errno.ENOENT
    True
    """
    return FuseOSError(code)


class _Described(Protocol):
    def describe_call(self, args: tuple[Any, ...]) -> str: ...


def fuse_operation(method: Callable[..., Any]) -> Callable[..., Any]:
    """Turn a store error raised by a FUSE handler into its errno.

    EIO and the errnos a user acts on (ENOSPC, EACCES ...) are logged with
    the store's message and the path (``self.describe_call(args)``):
    the log is the only place an EIO's cause can be read.

    Examples
    --------
    >>> class Handlers:
    ...     def describe_call(self, args): return args[0]
    ...     @fuse_operation
    ...     def getattr(self, path): raise KeyError(path)
    >>> Handlers().getattr("/a")
    Traceback (most recent call last):
    ...
    mfusepy.FuseOSError: [Errno 2] No such file or directory
    """
    name = method.__name__

    @functools.wraps(method)
    def wrapper(self: _Described, *args: Any) -> Any:
        try:
            return method(self, *args)
        except FuseOSError:
            raise
        except Exception as error:  # noqa: BLE001 - every failure must become an errno
            code = errno_for(error)
            if code is None:
                code = errno.EIO
            if code not in _QUIET:
                # EIO says nothing to the user: the log line is where the cause is.
                level = logging.ERROR if code == errno.EIO else logging.WARNING
                log.log(level, "%s %s failed: %s: %s", name, self.describe_call(args),
                        type(error).__name__, error)
            raise FuseOSError(code) from None

    return wrapper
