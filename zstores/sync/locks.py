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
import logging
import os
import re
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, Protocol, Self

from ..errors import LeaseExpiredError, LockTimeoutError, LockUnsupportedError, ZStoresError
from ..secrets import redact_url, secrets_of
from .lease import LeasedLock

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


#: Seconds a lock is waited for before the first warning (then one more per
#: such period): ``timeout=None`` waits as long as it takes, but never in silence.
WARN_AFTER = 60.0

logger = logging.getLogger("zstores.sync")


def _check_warn_after(warn_after: float | None) -> float | None:
    if warn_after is None:
        return None
    warn_after = float(warn_after)
    if not warn_after > 0:
        raise ValueError(f"invalid warn_after {warn_after!r}: must be > 0 seconds, or None")
    return warn_after


def _wait_for(attempt: Callable[[float | None], bool], timeout: float | None,
              warn_after: float | None, describe: Callable[[], str]) -> bool:
    """Call ``attempt(seconds)`` (which waits at most that long) until it succeeds.

    Returns False once ``timeout`` has passed.  Every ``warn_after`` seconds
    of waiting, logs a warning on the ``zstores.sync`` logger saying what is
    waited for (``describe()``) and for how long, so that a writer stuck
    behind a lock that is never released shows up in the logs.
    """
    deadline = _Deadline(timeout)
    started = time.monotonic()
    warnings = 0
    while True:
        left = deadline.left()
        step = left
        if warn_after is not None:
            to_warning = max(0.0, started + warn_after * (warnings + 1) - time.monotonic())
            step = to_warning if left is None else min(left, to_warning)
        if attempt(step):
            return True
        if left is not None and deadline.left() == 0:
            return False
        waited = time.monotonic() - started
        if warn_after is not None and waited >= warn_after * (warnings + 1):
            warnings += 1
            limit = "no timeout" if timeout is None else f"timeout {timeout} s"
            logger.warning("still waiting after %.0f s (%s) for %s", waited, limit, describe())


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
    """The lock of one key of a ``ThreadSynchronizer``.

    Its holder keeps it for as long as it runs (no lease), so it has no
    fencing token (``token`` is None) and ``check()`` never fails.
    """

    token = None

    def __init__(self, key: str, local: _LocalLock, timeout: float | None,
                 warn_after: float | None = WARN_AFTER) -> None:
        self.key = key
        self.name = key
        self._local = local
        self._timeout = timeout
        self._warn_after = warn_after

    def acquire(self, timeout: float | None = None) -> None:
        """Wait for the lock; ``timeout`` (default: the synchronizer's) bounds the wait."""
        timeout = self._timeout if timeout is None else timeout
        if not _wait_for(self._local.acquire, timeout, self._warn_after,
                         lambda: f"the thread lock of key {self.key!r}"):
            raise LockTimeoutError(
                f"could not lock key {self.key!r} within {timeout} s: another thread holds it"
            )

    def check(self) -> None:
        """Nothing to check: a thread lock is held until it is released."""

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
        Seconds to wait for a lock before ``LockTimeoutError``; ``None`` waits
        as long as it takes (logging a warning every ``warn_after`` seconds).
    warn_after : float or None
        Seconds of waiting for one lock between warnings on the
        ``zstores.sync`` logger; ``None``: no warnings.

    Examples
    --------
    >>> import zstores
    >>> sync = zstores.ThreadSynchronizer()
    >>> with sync["data/0.0"]:
    ...     pass  # read, modify and write the chunk "data/0.0"
    """

    def __init__(self, *, timeout: float | None = None,
                 warn_after: float | None = WARN_AFTER) -> None:
        self.timeout = _check_timeout(timeout)
        self.warn_after = _check_warn_after(warn_after)
        self._locks = _LocalLocks()

    def __getitem__(self, key: str) -> ThreadLock:
        key = _check_key(key)
        return ThreadLock(key, self._locks[key], self.timeout, self.warn_after)

    def lock_name(self, key: str) -> str:
        """Keys are their own lock names."""
        return _check_key(key)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_new_thread_synchronizer, (self.timeout, self.warn_after))

    def __repr__(self) -> str:
        return f"ThreadSynchronizer(timeout={self.timeout!r}, warn_after={self.warn_after!r})"


def _new_thread_synchronizer(timeout: float | None,
                             warn_after: float | None = WARN_AFTER) -> ThreadSynchronizer:
    return ThreadSynchronizer(timeout=timeout, warn_after=warn_after)


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
    """The lock of one key of a ``ProcessSynchronizer``: a thread lock, then a file lock.

    A file lock lives as long as its holder's process (no lease), so it has
    no fencing token (``token`` is None) and ``check()`` never fails.
    """

    token = None

    def __init__(self, key: str, path: str, timeout: float | None,
                 warn_after: float | None = WARN_AFTER) -> None:
        self.key = key
        self.name = path
        self.path = path
        self._timeout = timeout
        self._warn_after = warn_after
        self._local = _FILE_LOCALS[path]

    def acquire(self, timeout: float | None = None) -> None:
        """Wait for the lock; ``timeout`` (default: the synchronizer's) bounds the wait."""
        timeout = self._timeout if timeout is None else timeout
        deadline = _Deadline(timeout)
        if not _wait_for(self._local.acquire, timeout, self._warn_after,
                         lambda: f"key {self.key!r}: another thread holds {self.path!r}"):
            raise self._timed_out(timeout, "another thread of this process")
        try:
            if not _wait_for(self._lock_file, deadline.left(), self._warn_after,
                             lambda: f"key {self.key!r}: another process holds {self.path!r}"):
                raise self._timed_out(timeout, "another process")
        except BaseException:
            self._local.lock.release()
            raise

    def check(self) -> None:
        """Nothing to check: a file lock is held until it is released."""

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
        Seconds to wait for a lock before ``LockTimeoutError``; ``None`` waits
        as long as it takes (logging a warning every ``warn_after`` seconds).
    stripes : int or None
        Hash keys onto this many lock files instead of one file per key, to
        bound the number of files (keys that share a stripe exclude each
        other, which costs only concurrency).
    warn_after : float or None
        Seconds of waiting for one lock between warnings on the
        ``zstores.sync`` logger; ``None``: no warnings.

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
        warn_after: float | None = WARN_AFTER,
    ) -> None:
        _import_fasteners()  # a missing extra fails before any folder is made
        self.path = os.path.abspath(os.fspath(path))
        self.timeout = _check_timeout(timeout)
        self.warn_after = _check_warn_after(warn_after)
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
        return FileLock(key, self.lock_name(key), self.timeout, self.warn_after)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_new_process_synchronizer,
                (self.path, self.timeout, self.stripes, self.warn_after))

    def __repr__(self) -> str:
        return (
            f"ProcessSynchronizer({self.path!r}, timeout={self.timeout!r}, "
            f"stripes={self.stripes!r}, warn_after={self.warn_after!r})"
        )


def _new_process_synchronizer(
    path: str, timeout: float | None, stripes: int | None,
    warn_after: float | None = WARN_AFTER,
) -> ProcessSynchronizer:
    return ProcessSynchronizer(path, timeout=timeout, stripes=stripes, warn_after=warn_after)


# -------------------------------------------------------------------- Redis
#: Between a lock's key and the suffix naming what its Redis key holds.  No
#: RedisStore key contains "//" (keys are normalized), and every lock name
#: ends with ``LOCK_SEPARATOR + something``: whatever the two prefixes, a
#: synchronizer's Redis key is never a store's ``prefix:key``.
LOCK_SEPARATOR = "//"
_LOCK, _QUEUE, _ALIVE = "lock", "queue", "waiting"
_TOKENS = LOCK_SEPARATOR + "tokens"  # the counter of one synchronizer prefix

# Take the lock if it is free, else queue the caller.  A lock released while
# others wait is not deleted but left as FREE for a moment, reserved for the
# first in line; only when that one does not come (or a lease ran out) can
# any asker take it.  KEYS: the lock, its queue (waiter -> ticket), its
# waiters' deadlines (waiter -> server ms), the prefix's token counter.
# ARGV: the waiter's id, the lease and how long a waiter that stops asking
# keeps its place (ms).  Returns {token, 0} when granted, else {0, the
# caller's place in line (0: next)}.
_ACQUIRE = """
if redis.replicate_commands then redis.replicate_commands() end
local holder = redis.call('GET', KEYS[1])
if redis.call('EXISTS', KEYS[4]) == 0 then
  -- A new counter starts at the server's time in microseconds: larger than
  -- every token a counter lost with a restart or a flush ever handed out.
  local started = redis.call('TIME')
  redis.call('SET', KEYS[4], started[1] .. string.format('%06d', tonumber(started[2])))
end
local function grant()
  local token = redis.call('INCR', KEYS[4])
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])  -- the waiter's id: unique
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('ZREM', KEYS[3], ARGV[1])
  return {token, 0}
end
if not holder then return grant() end
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) * 1000 + math.floor(tonumber(now_parts[2]) / 1000)
local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
for i = 1, #gone, 500 do
  local batch = {unpack(gone, i, math.min(i + 499, #gone))}
  redis.call('ZREM', KEYS[3], unpack(batch))
  redis.call('ZREM', KEYS[2], unpack(batch))
end
if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[4]), ARGV[1])
end
local keep = tonumber(ARGV[3])
redis.call('ZADD', KEYS[3], now + keep, ARGV[1])
if holder == 'FREE' and redis.call('ZRANGE', KEYS[2], 0, 0)[1] == ARGV[1] then
  return grant()
end
redis.call('PEXPIRE', KEYS[2], 2 * keep)
redis.call('PEXPIRE', KEYS[3], 2 * keep)
return {0, redis.call('ZRANK', KEYS[2], ARGV[1])}
"""
# Leave the queue (a waiter that gives up).  KEYS: queue, deadlines.  ARGV: waiter id.
_LEAVE = """
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
"""
# Renew the lease (ARGV[2] ms) if the caller still holds the lock (ARGV[1],
# its value).  Returns 1 if it did, 0 if the lock is gone or another's.
_RENEW = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""
# Release the lock if the caller still holds it: reserved for the next in
# line for ARGV[2] ms if some writer waits (KEYS[2], the queue), else deleted.
_RELEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('SET', KEYS[1], 'FREE', 'PX', ARGV[2])
else
  redis.call('DEL', KEYS[1])
end
return 1
"""

#: Milliseconds a released lock waits for the first in line before any
#: asker may take it: the next in line asks every half millisecond, so only
#: a waiter that is not running (paused, swapped out) misses its turn.
_RESERVED_MS = 50
_REDIS_POLL = 0.002  # seconds before the first retry on a held Redis lock
_REDIS_MAX_POLL = 0.01  # and at most this long between retries
_REDIS_NEXT_POLL = 0.0005  # between the retries of the waiter next in line
#: Renewals per lease: a holder renews after a third of it has passed, so
#: two renewals in a row can be late or lost before the lease runs out.
RENEWALS_PER_LEASE = 3
_WATCHDOG_LINGER = 5.0  # seconds a renewal thread with no lock to renew waits for one


class RedisLock(LeasedLock):
    """The lock of one key of a ``RedisSynchronizer``: a Redis key with a lease.

    Once acquired, ``token`` is its fencing token: a number that grows with
    every grant of any lock of the synchronizer's prefix, so a later holder
    of this lock always has a larger one.  The counter starts at the Redis
    server's time in microseconds, so tokens keep growing across a restart
    of a server without persistence (or a ``FLUSHALL``).  While it is held, the
    synchronizer renews its lease in the background; ``check()`` raises
    ``LeaseExpiredError`` once a renewal failed or came too late.
    """

    kind = "Redis lock"
    _owner: RedisSynchronizer

    def __init__(self, key: str, base: str, timeout: float | None,
                 owner: RedisSynchronizer) -> None:
        super().__init__(key, base + LOCK_SEPARATOR + _LOCK, owner, timeout)
        self._keys = [self.name, base + LOCK_SEPARATOR + _QUEUE,
                      base + LOCK_SEPARATOR + _ALIVE, owner._tokens_key(base)]

    def _where(self) -> str:
        return self._owner._describe()

    def acquire(self, timeout: float | None = None) -> None:
        """Wait for the lock; ``timeout`` (default: the synchronizer's) bounds the wait.

        Waiters are served first come, first served: a released lock is
        kept for the first in line for a moment (50 ms), and a waiter gets
        the lock after the writers that queued before it.  A waiter that
        stops asking for 2 s loses its place (a paused or dead one), and one
        that does not come for its turn within the moment lets any asker in.
        """
        if self.token is not None:
            raise RuntimeError(f"the Redis lock {self.name!r} is already held by this object")
        timeout = self._timeout if timeout is None else timeout
        owner = self._owner
        waiter = os.urandom(12).hex()
        delay = [_REDIS_POLL]

        def attempt(seconds: float | None) -> bool:
            deadline = _Deadline(seconds)
            while True:
                sent = time.monotonic()
                token, place = owner._script(_ACQUIRE, self._keys, waiter,
                                             owner._lease_ms, owner._keep_ms)
                if token:
                    self._granted(waiter, int(token), sent)
                    return True
                left = deadline.left()
                if left is not None and left <= 0:
                    return False
                # The next in line asks often, so a released lock is not left
                # idle, and the one after it nearly as often (it is next as
                # soon as the lock changes hands); the others back off.
                pause = _REDIS_NEXT_POLL * (1 + 3 * place) if place < 2 else delay[0]
                time.sleep(pause if left is None else min(pause, left))
                delay[0] = min(delay[0] * 2, _REDIS_MAX_POLL)

        try:
            acquired = _wait_for(attempt, timeout, owner.warn_after,
                                 lambda: f"the Redis lock {self.name!r} of key {self.key!r}")
        except BaseException:
            self._leave(waiter)
            raise
        if not acquired:
            self._leave(waiter)
            raise LockTimeoutError(
                f"could not lock key {self.key!r} within {timeout} s: the Redis lock "
                f"{self.name!r} on {owner._describe()} is held by another writer"
            )

    def _leave(self, waiter: str) -> None:
        try:
            self._owner._script(_LEAVE, self._keys[1:3], waiter)
        except Exception:  # the place expires anyway; keep the first error
            logger.debug("could not leave the queue of %s", self.name, exc_info=True)

    def _renew(self) -> None:
        """Extend the lease (called by the watchdog); mark the lock lost if that fails."""
        owner = self._owner
        sent = time.monotonic()
        if self._overdue():  # too late: another writer may hold it by now
            return
        try:
            renewed = owner._script(_RENEW, self._keys[:1], self._value, owner._lease_ms)
        except (ZStoresError, OSError) as error:  # the lease runs out; check() says so
            self._renewal_raised(error)
            return
        if not renewed:
            self._renewal_failed = False
            self._lost = "it was gone from Redis when its holder renewed it"
        else:
            self._renewed(sent)

    def release(self) -> None:
        """Release the lock.

        Raises
        ------
        LeaseExpiredError
            If the lease ran out while the lock was held.
        """
        if self.token is None:
            raise RuntimeError(f"the Redis lock {self.name!r} is not held")
        owner = self._owner
        owner._watchdog.drop(self)
        token, self.token = self.token, None
        released = owner._script(_RELEASE, self._keys[:2], self._value, _RESERVED_MS)
        if not released:
            raise LeaseExpiredError(
                f"the lease of the Redis lock {self.name!r} (key {self.key!r}, token {token}) "
                f"expired after {owner.lease} s while it was held, so another writer may "
                "have written at the same time: use synchronized(..., fenced=True), or give "
                "RedisSynchronizer a longer lease="
            )


class _Watchdog:
    """Renews the leases of the locks a synchronizer holds in this process.

    One daemon thread per synchronizer, started with its first lock and
    ended when it has held none for a few seconds; each lock is renewed once
    a third of its lease has passed since it was granted or last renewed.
    """

    def __init__(self, interval: float) -> None:
        self._interval = interval
        self._held: dict[int, RedisLock] = {}
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._sleep_until = 0.0  # time.monotonic() the thread sleeps until (0: awake)
        self._pid = os.getpid()

    def hold(self, lock: RedisLock) -> None:
        with self._wake:
            if self._pid != os.getpid():  # a forked child: the parent's thread is not here
                self._held, self._thread, self._pid = {}, None, os.getpid()
            self._held[id(lock)] = lock
            if self._renew_time(lock) < self._sleep_until:
                self._wake.notify()  # due before the thread wakes: it works out its sleep again
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="zstores-lease-renewal",
                                                daemon=True)
                self._thread.start()

    def drop(self, lock: RedisLock) -> None:
        with self._wake:
            self._held.pop(id(lock), None)

    def _renew_time(self, lock: RedisLock) -> float:
        """When ``lock`` is due for renewal: a third of its lease after the last one."""
        return lock._valid_until - self._interval * (RENEWALS_PER_LEASE - 1)

    def _run(self) -> None:
        while True:
            with self._wake:
                if not self._held:
                    # Linger a little: a writer takes and releases locks in a
                    # row, and a thread started for each would cost more than
                    # the lock itself.
                    end = self._sleep_until = time.monotonic() + _WATCHDOG_LINGER
                    while not self._held and time.monotonic() < end:
                        self._wake.wait(end - time.monotonic())
                    if not self._held:
                        self._thread = None
                        return
                    continue
                self._sleep_until = min(map(self._renew_time, self._held.values()))
                wait = self._sleep_until - time.monotonic()
                if wait > 0:
                    self._wake.wait(wait)
                    continue
                self._sleep_until = 0.0  # awake: hold() need not wake it
                now = time.monotonic()
                renew = [lock for lock in self._held.values()
                         if lock._lost is None and self._renew_time(lock) <= now]
                lost = [key for key, lock in self._held.items() if lock._lost is not None]
                for key in lost:  # nothing left to renew; check() and release() report it
                    del self._held[key]
            before = [lock._valid_until for lock in renew]
            for lock in renew:
                lock._renew()
            if any(lock._lost is None and lock._valid_until == was
                   for lock, was in zip(renew, before, strict=True)):
                # A renewal failed (server unreachable): try again soon, not in a spin.
                time.sleep(min(self._interval / 4, 0.1))


class RedisSynchronizer:
    """Fair locks per key in a Redis server, with leases and fencing tokens.

    ``sync[key]`` returns a lock usable as a context manager (zarr-python 2's
    ``synchronizer=`` protocol), held as the Redis key ``prefix + key +
    "//lock"`` with a lease.  While the holder runs, a thread renews the
    lease every third of it; a writer that dies or stops blocks the others
    for at most ``lease`` seconds.  Waiters get the lock in the order they
    asked for it.  Every grant carries a fencing token (``lock.token``)
    larger than any before it, which ``synchronized(..., fenced=True)``
    checks inside the data store's transactions, so a holder that lost its
    lease never lands a write.  The synchronizer pickles to its URL and
    options; each process opens its own connection.

    Lock keys contain ``//``, which no ``RedisStore`` key does, so they are
    never a store's key whatever the prefixes; ``synchronized()`` refuses a
    synchronizer prefix under which a store on the same server would list
    them (``RedisStore(prefix="p")`` with ``prefix="p:"``).

    On a Redis Cluster (a ``redis+cluster://host:port,host:port/`` URL, as
    ``RedisStore`` takes it, or a ready ``redis.RedisCluster`` client) each
    lock's keys share a hash tag, so its scripts run in one slot: the
    prefix's own tag if it has one (every lock in that slot, tokens growing
    across them), else a digest of the key after the prefix (locks spread
    over the primaries, each with its own token counter: a later holder of
    a lock still always has a larger token).  A plain ``redis://`` URL on a
    cluster node is refused at first use, naming the URL to write.  Redis
    replicates asynchronously: a failover can lose a grant or a token just
    handed out, so on a cluster with failover keep ``fenced=True`` writes
    on a store that waits for its replicas (``wait_replicas``) and a lease
    long enough to cover the failover.

    Parameters
    ----------
    url : str or redis.Redis or redis.RedisCluster
        A ``redis://`` (or ``rediss://``, ``unix://``, ``redis+cluster://``)
        URL, as redis-py takes it; or a ready client, used but never closed
        (such a synchronizer cannot be pickled).
    prefix : str
        Prepended to every key; use one per dataset when several share a server.
    lease : float
        Seconds after which a lock whose holder stopped renewing it expires.
    timeout : float or None
        Seconds to wait for a lock before ``LockTimeoutError``; ``None`` waits
        as long as it takes (logging a warning every ``warn_after`` seconds).
    warn_after : float or None
        Seconds of waiting for one lock between warnings on the
        ``zstores.sync`` logger; ``None``: no warnings.

    Examples
    --------
    >>> import zstores
    >>> sync = zstores.RedisSynchronizer("redis://127.0.0.1:6379/0", lease=30)
    >>> sync.lock_name("data/0.0")
    'zstores:lock:data/0.0//lock'
    >>> with sync["data/0.0"] as lock:  # doctest: +SKIP
    ...     pass  # read, modify and write the chunk "data/0.0"; lock.token is its token
    """

    def __init__(
        self,
        url: str | Any,
        *,
        prefix: str = "zstores:lock:",
        lease: float = 60.0,
        timeout: float | None = None,
        warn_after: float | None = WARN_AFTER,
    ) -> None:
        self._given: Any = None  # a ready client (not pickled, never closed)
        if not isinstance(url, str):
            if type(url).__name__ not in ("Redis", "RedisCluster") \
                    or not type(url).__module__.startswith("redis"):
                raise ValueError(f"invalid url {url!r}: expected a redis:// or redis+cluster:// "
                                 "URL, or a redis.Redis or redis.RedisCluster client")
            self._given, url = url, None
        elif "://" not in url:
            raise ValueError(f"invalid url {url!r}: expected a redis:// URL")
        # On a Redis Cluster each lock's keys share a hash tag (one slot).
        self._cluster = (type(self._given).__name__ == "RedisCluster" if url is None
                         else url.partition("://")[0].lower() in ("redis+cluster",
                                                                  "rediss+cluster"))
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a str, not {type(prefix).__name__}")
        lease = float(lease)
        if not lease > 0:
            raise ValueError(f"invalid lease {lease!r}: must be > 0 seconds")
        self.url = url
        self.prefix = prefix
        self.lease = lease
        self.timeout = _check_timeout(timeout)
        self.warn_after = _check_warn_after(warn_after)
        self._lease_ms = max(1, round(lease * 1000))
        # A waiter keeps its place while it asks at least this often (it asks
        # every 10 ms at most; the margin covers a slow scheduler).  A waiter
        # that died first in line holds the others up for this long.
        self._keep_ms = 2000
        self._client: Any = self._given
        self._scripts: dict[str, Any] = {}
        self._mutex = threading.Lock()
        self._watchdog = _Watchdog(lease / RENEWALS_PER_LEASE)

    def _redis(self) -> Any:
        with self._mutex:
            if self._client is None:
                try:
                    import redis
                except ImportError:  # pragma: no cover - the extra is installed in tests
                    raise ImportError(
                        "RedisSynchronizer needs the redis package: pip install 'zstores[redis]'"
                    ) from None
                self._client = self._connect(redis)
            return self._client

    def _connect(self, redis: Any) -> Any:
        """A client for the URL: a ``RedisCluster`` for ``redis+cluster://`` (every node
        a seed); a plain URL on a cluster node is refused, naming the URL to write."""
        from ..errors import StoreURLError
        from ..stores import redis_cluster

        if self._cluster:
            nodes = redis_cluster.split_cluster_url(self.url)
            seeds = [redis.cluster.ClusterNode(host, port) for _, host, port in nodes[1:]]
            return redis.RedisCluster.from_url(nodes[0][0], startup_nodes=seeds)
        client = redis.Redis.from_url(self.url)
        try:
            node = redis_cluster.is_cluster_node(client)
        except BaseException:
            client.close()
            raise
        if node:
            client.close()
            options = client.connection_pool.connection_kwargs
            raise StoreURLError(
                f"RedisSynchronizer {self._describe()}: the server is a Redis Cluster node "
                "(cluster_enabled:1), where a plain URL reaches only that node's slots: write "
                f"redis+cluster://{options.get('host')}:{options.get('port')}/")
        return client

    def _lock_base(self, key: str) -> str:
        """What the Redis keys of ``key``'s lock start with.

        On a cluster whose prefix has no hash tag of its own, a tag made of
        the key's digest follows the prefix: the keys of one lock (its
        script touches them all) share a slot, and locks spread over the
        primaries.
        """
        key = _check_key(key)
        if not self._cluster or _hash_tag(self.prefix):
            return self.prefix + key
        digest = hashlib.sha1(key.encode("utf-8")).hexdigest()[:8]
        return self.prefix + "{" + digest + "}" + key

    def _tokens_key(self, base: str) -> str:
        """The fencing-token counter of the lock whose keys start with ``base``.

        One per prefix on a server (tokens grow across all its locks); one
        per lock on a cluster, in the lock's slot, unless the prefix's hash
        tag keeps all of them in one slot anyway.
        """
        if self._cluster and not _hash_tag(self.prefix):
            return base + _TOKENS
        return self.prefix + _TOKENS

    def _script(self, source: str, keys: list[str], *args: Any) -> Any:
        """Run a Lua script (cached by its SHA on the server), errors typed."""
        script = self._scripts.get(source)
        if script is None:
            script = self._call(lambda: self._redis().register_script(source))
            self._scripts[source] = script
        return self._call(functools.partial(script, keys=keys, args=list(args)))

    def _describe(self) -> str:
        if self.url is not None:
            return redact_url(self.url)
        return f"{type(self._given).__name__} client"

    def _connection_kwargs(self) -> dict[str, Any]:
        client = self._client
        if client is None:
            return {}
        if self._cluster:
            return client.get_connection_kwargs()  # type: ignore[no-any-return]
        return client.connection_pool.connection_kwargs  # type: ignore[no-any-return]

    def _secrets(self) -> list[str]:
        """Every password this synchronizer knows of, to keep out of errors."""
        found = secrets_of(self.url) if self.url is not None else []
        password = self._connection_kwargs().get("password")
        if password:
            found.append(password)
        return found

    def _call(self, call: Callable[[], Any]) -> Any:
        """``call()``, a server's or network's redis-py error raised as a typed zstores error.

        The translation is RedisStore's (``StoreConnectionError`` when the
        server cannot be reached or refuses the credentials, ``StoreIOError``
        when it refuses a command ...), with no password in the message or
        in any chained exception.
        """
        from redis import exceptions

        from ..stores._network import call_translating
        from ..stores.redis import typed_redis_error

        def translate(error: BaseException) -> Exception:
            name = f"RedisSynchronizer {self._describe()}"
            return typed_redis_error(error, name, self._secrets())

        driver_errors = (exceptions.ConnectionError, exceptions.TimeoutError,
                         exceptions.ResponseError, exceptions.ClusterError,
                         exceptions.RedisClusterException)
        return call_translating(call, driver_errors, translate, self._secrets)

    def server(self) -> tuple[Any, ...]:
        """Which server and database the locks live in: ``(host and port or socket, db)``;
        on a cluster ``("redis-cluster", its primaries' addresses, sorted)``."""
        from ..stores.redis import server_of

        return self._call(lambda: server_of(self._redis()))  # type: ignore[no-any-return]

    def lock_name(self, key: str) -> str:
        """The Redis key of ``key``'s lock."""
        return self._lock_base(key) + LOCK_SEPARATOR + _LOCK

    def __getitem__(self, key: str) -> RedisLock:
        return RedisLock(key, self._lock_base(key), self.timeout, self)

    def __reduce__(self) -> tuple[Any, ...]:
        if self.url is None:
            raise TypeError(
                f"cannot pickle {self!r}: it was built from a ready client, whose credentials "
                "and options cannot be recovered; build it from a URL to pickle it")
        return (_new_redis_synchronizer,
                (self.url, self.prefix, self.lease, self.timeout, self.warn_after))

    def __repr__(self) -> str:
        return (
            f"RedisSynchronizer({self._describe()!r}, prefix={self.prefix!r}, "
            f"lease={self.lease!r}, timeout={self.timeout!r}, warn_after={self.warn_after!r})"
        )


def _hash_tag(prefix: str) -> str | None:
    from ..stores.redis_cluster import store_hash_tag

    return store_hash_tag(prefix)


def _new_redis_synchronizer(
    url: str, prefix: str, lease: float, timeout: float | None,
    warn_after: float | None = WARN_AFTER,
) -> RedisSynchronizer:
    return RedisSynchronizer(url, prefix=prefix, lease=lease, timeout=timeout,
                             warn_after=warn_after)
