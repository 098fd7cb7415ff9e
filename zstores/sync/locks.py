"""Synchronizers: ``sync[key]`` returns a lock, the protocol of zarr-python 2's ``synchronizer=``.

Three kinds share it:

- ``ThreadSynchronizer``: threads of one process (``threading`` locks);
- ``ProcessSynchronizer``: processes on one machine or a shared file system
  (``fasteners`` file locks in a folder, plus a thread lock per lock file);
- ``RedisSynchronizer``: processes on several machines (Redis locks with a lease).

Each lock has a ``name`` that identifies what it locks across processes (a
file path, a Redis key).  ``synchronized`` arrays take several locks in the
order of their names, so writers that each hold some cannot deadlock, and
take a lock only once when two keys share it (stripes).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, Protocol, Self

from ..errors import LeaseExpiredError, LockTimeoutError, LockUnsupportedError
from ..secrets import redact_url, secrets_of

__all__ = [
    "LeaseExpiredError",
    "Lock",
    "LockTimeoutError",
    "LockUnsupportedError",
    "ProcessSynchronizer",
    "RedisSynchronizer",
    "Synchronizer",
    "ThreadSynchronizer",
    "lock_file_name",
    "lock_name",
]


class Lock(Protocol):
    """What ``synchronizer[key]`` returns: a context manager that excludes other holders."""

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc_info: object) -> Any: ...


class Synchronizer(Protocol):
    """Anything with ``synchronizer[key] -> Lock`` (zarr-python 2's protocol)."""

    def __getitem__(self, key: str) -> Lock: ...


def lock_name(synchronizer: Synchronizer, key: str) -> str:
    """What the lock of ``key`` locks: equal names are the same lock, in every process.

    zstores synchronizers say it themselves (``lock_name``); for others
    (zarr-python 2's) the key is the best guess.
    """
    name_of = getattr(synchronizer, "lock_name", None)
    return name_of(key) if callable(name_of) else key


def _check_key(key: object) -> str:
    if not isinstance(key, str) or not key:
        raise TypeError(f"a lock key must be a non-empty str, not {key!r}")
    return key


def _check_timeout(timeout: float | None) -> float | None:
    if timeout is None:
        return None
    timeout = float(timeout)
    if not timeout >= 0:
        raise ValueError(
            f"invalid timeout {timeout!r}: must be >= 0 seconds, or None to wait forever")
    return timeout


class _Deadline:
    """Seconds left of a timeout (``None``: no limit)."""

    def __init__(self, timeout: float | None) -> None:
        self._end = None if timeout is None else time.monotonic() + timeout

    def left(self) -> float | None:
        return None if self._end is None else max(0.0, self._end - time.monotonic())


# ------------------------------------------------------------------ threads
class _LocalLock:
    """A thread lock shared by every lock object of one name in a process."""

    __slots__ = ("__weakref__", "file", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.file: Any = None  # the fasteners lock of a ProcessSynchronizer

    def acquire(self, timeout: float | None) -> bool:
        return self.lock.acquire(timeout=-1 if timeout is None else timeout)


class _LocalLocks:
    """Name -> ``_LocalLock``, kept only while some lock object refers to it.

    Entries go away with their last user, so an array of a million chunks
    does not leave a million locks behind in every process.
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._locks: weakref.WeakValueDictionary[str, _LocalLock] = weakref.WeakValueDictionary()

    def __getitem__(self, name: str) -> _LocalLock:
        with self._mutex:
            local = self._locks.get(name)
            if local is None:
                local = self._locks[name] = _LocalLock()
            return local


class ThreadLock:
    """The lock of one key of a ``ThreadSynchronizer``."""

    def __init__(self, key: str, local: _LocalLock, timeout: float | None) -> None:
        self.key = key
        self.name = key
        self._local = local
        self._timeout = timeout

    def acquire(self, timeout: float | None = None) -> None:
        """Wait for the lock; ``timeout`` (default: the synchronizer's) bounds the wait."""
        timeout = self._timeout if timeout is None else timeout
        if not self._local.acquire(timeout):
            raise LockTimeoutError(
                f"could not lock key {self.key!r} within {timeout} s: another thread holds it"
            )

    def release(self) -> None:
        """Release the lock."""
        self._local.lock.release()

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


class ThreadSynchronizer:
    """Locks per key for the threads of one process.

    ``sync[key]`` returns a lock usable as a context manager, which makes it
    a drop-in ``synchronizer=`` for zarr-python 2.  A pickled synchronizer
    comes back with fresh locks: threads of different processes do not
    exclude each other (use ``ProcessSynchronizer`` for that).

    Parameters
    ----------
    timeout : float or None
        Seconds to wait for a lock before ``LockTimeoutError``; ``None`` waits forever.

    Examples
    --------
    >>> import zstores
    >>> sync = zstores.ThreadSynchronizer()
    >>> with sync["data/0.0"]:
    ...     pass  # read, modify and write the chunk "data/0.0"
    """

    def __init__(self, *, timeout: float | None = None) -> None:
        self.timeout = _check_timeout(timeout)
        self._locks = _LocalLocks()

    def __getitem__(self, key: str) -> ThreadLock:
        key = _check_key(key)
        return ThreadLock(key, self._locks[key], self.timeout)

    def lock_name(self, key: str) -> str:
        """Keys are their own lock names."""
        return _check_key(key)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_new_thread_synchronizer, (self.timeout,))

    def __repr__(self) -> str:
        return f"ThreadSynchronizer(timeout={self.timeout!r})"


def _new_thread_synchronizer(timeout: float | None) -> ThreadSynchronizer:
    return ThreadSynchronizer(timeout=timeout)


# ---------------------------------------------------------------- processes
# POSIX record locks belong to a process, not to a thread or a file handle,
# and closing any handle on a file drops them all.  So every lock file has one
# thread lock per process, shared by all synchronizers on it: a thread must
# own it before it touches the file.
_FILE_LOCALS = _LocalLocks()


def _forget_file_locks_after_fork() -> None:
    global _FILE_LOCALS
    _FILE_LOCALS = _LocalLocks()  # a forked child holds none of its parent's locks


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_file_locks_after_fork)

# Characters kept as they are in lock file names; every other character,
# uppercase letters included, becomes %XX per UTF-8 byte.  The names are then
# injective, contain no "/", and stay distinct on case-insensitive file systems.
_ESCAPED = re.compile(r"[^a-z0-9_.\-]+")
_MAX_PLAIN_NAME = 200  # longer names are shortened with a hash (file names: 255 bytes)
_HASHED_MARK = "%%"  # never produced by the escaping above


@functools.lru_cache(maxsize=1 << 16)  # writers lock the same chunks over and over
def lock_file_name(key: str, stripes: int | None = None) -> str:
    """The lock file name of ``key`` inside a ``ProcessSynchronizer``'s folder.

    Keys map to distinct names that stay inside the folder (``/`` and a
    leading ``.`` are escaped); with ``stripes``, keys hash onto that many
    names.

    Examples
    --------
    >>> lock_file_name("data/0.0")
    'data%2F0.0.lock'
    >>> lock_file_name("../A")
    '%2E.%2F%41.lock'
    >>> lock_file_name("data/0.0", stripes=16)
    'stripe-4.lock'
    """
    if stripes is not None:
        digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
        return f"stripe-{int.from_bytes(digest, 'big') % stripes}.lock"
    escaped = _ESCAPED.sub(_percent_encode, key)
    if escaped.startswith("."):
        escaped = "%2E" + escaped[1:]
    if len(escaped) > _MAX_PLAIN_NAME:
        digest = hashlib.sha256(key.encode("utf-8")).hexdigest()
        escaped = escaped[:100] + _HASHED_MARK + digest
    return escaped + ".lock"


def _percent_encode(match: re.Match[str]) -> str:
    return "".join(f"%{byte:02X}" for byte in match.group().encode("utf-8"))


# fasteners polls a held lock: start after 0.5 ms and back off to 10 ms, so a
# waiting writer reacts within a chunk write or so, without spinning.
_POLL_DELAY = 0.0005
_POLL_MAX_DELAY = 0.01


class FileLock:
    """The lock of one key of a ``ProcessSynchronizer``: a thread lock, then a file lock."""

    def __init__(self, key: str, path: str, timeout: float | None) -> None:
        self.key = key
        self.name = path
        self.path = path
        self._timeout = timeout
        self._local = _FILE_LOCALS[path]

    def acquire(self, timeout: float | None = None) -> None:
        """Wait for the lock; ``timeout`` (default: the synchronizer's) bounds the wait."""
        timeout = self._timeout if timeout is None else timeout
        deadline = _Deadline(timeout)
        if not self._local.acquire(timeout):
            raise self._timed_out(timeout, "another thread of this process")
        try:
            if not self._lock_file(deadline.left()):
                raise self._timed_out(timeout, "another process")
        except BaseException:
            self._local.lock.release()
            raise

    def _lock_file(self, timeout: float | None) -> bool:
        fasteners = _import_fasteners()

        local = self._local
        if local.file is None:
            local.file = fasteners.InterProcessLock(self.path)
        try:
            return bool(
                local.file.acquire(
                    blocking=True, delay=_POLL_DELAY, max_delay=_POLL_MAX_DELAY, timeout=timeout
                )
            )
        except threading.ThreadError as error:  # fasteners' report of any other OSError
            raise _unsupported(os.path.dirname(self.path), error) from error

    def release(self) -> None:
        """Release the lock."""
        try:
            self._local.file.release()
        finally:
            self._local.lock.release()

    def _timed_out(self, timeout: float | None, holder: str) -> LockTimeoutError:
        return LockTimeoutError(
            f"could not lock key {self.key!r} within {timeout} s: its lock file "
            f"{self.path!r} is held by {holder}"
        )

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def _import_fasteners() -> Any:
    """The fasteners module, or an ImportError naming the extra that installs it."""
    try:
        import fasteners
    except ModuleNotFoundError as error:
        if error.name != "fasteners":
            raise
        raise ModuleNotFoundError(
            "ProcessSynchronizer needs fasteners: pip install 'zstores[sync]'", name="fasteners"
        ) from None
    return fasteners


def _unsupported(folder: str, error: BaseException) -> LockUnsupportedError:
    return LockUnsupportedError(
        f"cannot lock files in {folder!r}: its file system does not support file locks "
        f"({error}); give ProcessSynchronizer a folder on one that does (a local disk, "
        "or NFS with its lock service)"
    )


class ProcessSynchronizer:
    """Locks per key shared by processes, as lock files in a folder (fasteners).

    ``sync[key]`` returns a lock usable as a context manager, the protocol of
    zarr-python 2's ``synchronizer=``.  A lock excludes other processes (a
    file lock on ``path/<key>.lock``) and other threads of this process (a
    thread lock per lock file).  A process that dies releases its file locks
    with it.  The synchronizer pickles to its folder and options, so worker
    processes share its locks.

    Parameters
    ----------
    path : str or os.PathLike
        A folder, created if missing, on a file system that supports file
        locks and that every writer process sees.  Keep it apart from the data.
    timeout : float or None
        Seconds to wait for a lock before ``LockTimeoutError``; ``None`` waits forever.
    stripes : int or None
        Hash keys onto this many lock files instead of one file per key, to
        bound the number of files (keys that share a stripe exclude each
        other, which costs only concurrency).

    Raises
    ------
    ModuleNotFoundError
        If fasteners is not installed (``pip install 'zstores[sync]'``).
    LockUnsupportedError
        If the folder's file system does not support file locks.
    NotADirectoryError
        If ``path`` exists and is not a folder.

    Examples
    --------
    >>> import tempfile, zstores
    >>> sync = zstores.ProcessSynchronizer(tempfile.mkdtemp(), timeout=60)
    >>> with sync["data/0.0"]:
    ...     pass  # read, modify and write the chunk "data/0.0"
    >>> sync.lock_name("data/0.0").endswith("data%2F0.0.lock")
    True
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        timeout: float | None = None,
        stripes: int | None = None,
    ) -> None:
        _import_fasteners()  # a missing extra fails before any folder is made
        self.path = os.path.abspath(os.fspath(path))
        self.timeout = _check_timeout(timeout)
        if stripes is not None and (not isinstance(stripes, int) or stripes < 1):
            raise ValueError(f"invalid stripes {stripes!r}: must be an int >= 1, or None")
        self.stripes = stripes
        if os.path.exists(self.path) and not os.path.isdir(self.path):
            raise NotADirectoryError(
                f"ProcessSynchronizer path {self.path!r} exists and is not a folder"
            )
        os.makedirs(self.path, exist_ok=True)
        self._folder = os.path.join(self.path, "")
        self._check_locking()

    def _check_locking(self) -> None:
        """Fail now, not at the first write, on a file system without locks."""
        fasteners = _import_fasteners()

        probe = fasteners.InterProcessLock(os.path.join(self.path, ".zstores-probe.lock"))
        try:
            if probe.acquire(blocking=False):  # False: another process probes right now
                probe.release()
        except threading.ThreadError as error:
            raise _unsupported(self.path, error) from error

    def lock_name(self, key: str) -> str:
        """The lock file of ``key``."""
        return self._folder + lock_file_name(_check_key(key), self.stripes)

    def __getitem__(self, key: str) -> FileLock:
        return FileLock(key, self.lock_name(key), self.timeout)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_new_process_synchronizer, (self.path, self.timeout, self.stripes))

    def __repr__(self) -> str:
        return (
            f"ProcessSynchronizer({self.path!r}, timeout={self.timeout!r}, "
            f"stripes={self.stripes!r})"
        )


def _new_process_synchronizer(
    path: str, timeout: float | None, stripes: int | None
) -> ProcessSynchronizer:
    return ProcessSynchronizer(path, timeout=timeout, stripes=stripes)


# -------------------------------------------------------------------- Redis
_REDIS_POLL = 0.002  # seconds between attempts on a held Redis lock


class RedisLock:
    """The lock of one key of a ``RedisSynchronizer``: a Redis key with a lease."""

    def __init__(self, key: str, lock: Any, timeout: float | None,
                 owner: RedisSynchronizer) -> None:
        self.key = key
        self.name = lock.name
        self._lock = lock
        self._timeout = timeout
        self._owner = owner

    def acquire(self, timeout: float | None = None) -> None:
        """Wait for the lock; ``timeout`` (default: the synchronizer's) bounds the wait."""
        timeout = self._timeout if timeout is None else timeout
        acquired = self._owner._call(
            functools.partial(self._lock.acquire, blocking=True, blocking_timeout=timeout))
        if not acquired:
            raise LockTimeoutError(
                f"could not lock key {self.key!r} within {timeout} s: the Redis lock "
                f"{self.name!r} on {self._owner._describe()} is held by another writer"
            )

    def release(self) -> None:
        """Release the lock.

        Raises
        ------
        LeaseExpiredError
            If the lease ran out while the lock was held.
        """
        from redis.exceptions import LockNotOwnedError

        try:
            self._owner._call(self._lock.release)
        except LockNotOwnedError:
            raise LeaseExpiredError(
                f"the lease of the Redis lock {self.name!r} (key {self.key!r}) expired "
                f"after {self._lock.timeout} s while it was held, so another writer may "
                "have written at the same time: give RedisSynchronizer a longer lease="
            ) from None

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


class RedisSynchronizer:
    """Locks per key in a Redis server, for writers on several machines.

    ``sync[key]`` returns a lock usable as a context manager (zarr-python 2's
    ``synchronizer=`` protocol), held as the Redis key ``prefix + key`` with
    a lease: a writer that dies without releasing it blocks the others for
    at most ``lease`` seconds.  A lock held longer than its lease is lost, and
    its release raises ``LeaseExpiredError``: choose a lease well above the
    longest write of one region.  The synchronizer pickles to its URL and
    options; each process opens its own connection.

    Parameters
    ----------
    url : str
        A ``redis://`` (or ``rediss://``, ``unix://``) URL, as redis-py takes it.
    prefix : str
        Prepended to every key; use one per dataset when several share a server.
    lease : float
        Seconds after which a lock that was not released expires.
    timeout : float or None
        Seconds to wait for a lock before ``LockTimeoutError``; ``None`` waits forever.

    Examples
    --------
    >>> import zstores
    >>> sync = zstores.RedisSynchronizer("redis://127.0.0.1:6379/0", lease=30)
    >>> sync.lock_name("data/0.0")
    'zstores:lock:data/0.0'
    >>> with sync["data/0.0"]:  # doctest: +SKIP
    ...     pass  # read, modify and write the chunk "data/0.0"
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "zstores:lock:",
        lease: float = 60.0,
        timeout: float | None = None,
    ) -> None:
        if not isinstance(url, str) or "://" not in url:
            raise ValueError(f"invalid url {url!r}: expected a redis:// URL")
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a str, not {type(prefix).__name__}")
        lease = float(lease)
        if not lease > 0:
            raise ValueError(f"invalid lease {lease!r}: must be > 0 seconds")
        self.url = url
        self.prefix = prefix
        self.lease = lease
        self.timeout = _check_timeout(timeout)
        self._client: Any = None
        self._mutex = threading.Lock()

    def _redis(self) -> Any:
        with self._mutex:
            if self._client is None:
                try:
                    import redis
                except ImportError:  # pragma: no cover - the extra is installed in tests
                    raise ImportError(
                        "RedisSynchronizer needs the redis package: pip install 'zstores[redis]'"
                    ) from None
                self._client = redis.Redis.from_url(self.url)
            return self._client

    def _describe(self) -> str:
        return redact_url(self.url)

    def _secrets(self) -> list[str]:
        """Every password this synchronizer knows of, to keep out of errors."""
        found = secrets_of(self.url)
        if self._client is not None:
            password = self._client.connection_pool.connection_kwargs.get("password")
            if password:
                found.append(password)
        return found

    def _call(self, call: Callable[[], Any]) -> Any:
        """``call()``, a server's or network's redis-py error raised as a typed zstores error.

        The translation is RedisStore's (``StoreConnectionError`` when the
        server cannot be reached or refuses the credentials, ``StoreIOError``
        when it refuses a command ...), with no password in the message or
        in any chained exception.  Lock errors of redis-py (a lease that
        expired) pass through for ``RedisLock`` to explain.
        """
        from redis import exceptions

        from ..stores._network import call_translating
        from ..stores.redis import typed_redis_error

        def translate(error: BaseException) -> Exception:
            name = f"RedisSynchronizer {self._describe()}"
            return typed_redis_error(error, name, self._secrets())

        driver_errors = (exceptions.ConnectionError, exceptions.TimeoutError,
                         exceptions.ResponseError)
        return call_translating(call, driver_errors, translate, self._secrets)

    def lock_name(self, key: str) -> str:
        """The Redis key of ``key``'s lock."""
        return self.prefix + _check_key(key)

    def __getitem__(self, key: str) -> RedisLock:
        name = self.lock_name(key)
        lock = self._redis().lock(name, timeout=self.lease, sleep=_REDIS_POLL, thread_local=False)
        return RedisLock(key, lock, self.timeout, self)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_new_redis_synchronizer, (self.url, self.prefix, self.lease, self.timeout))

    def __repr__(self) -> str:
        return (
            f"RedisSynchronizer({self._describe()!r}, prefix={self.prefix!r}, "
            f"lease={self.lease!r}, timeout={self.timeout!r})"
        )


def _new_redis_synchronizer(
    url: str, prefix: str, lease: float, timeout: float | None
) -> RedisSynchronizer:
    return RedisSynchronizer(url, prefix=prefix, lease=lease, timeout=timeout)
